//! The decoder's elementwise kernels: RMS norm, rotary position embedding and residual adds, on
//! rows of f32 in place or into preallocated buffers (the gated activations are in `gated`).
//!
//! Rows are independent: the callers split large batches over the thread pool by rows, and a
//! single token's rows (a few thousand values) run on the calling thread, where waking the pool
//! would cost more than the work.

use multiversion::multiversion;
use rayon::prelude::*;

use super::math::dot;

/// Values per task when a kernel splits its rows over the pool (fewer run on the caller).
const PARALLEL_VALUES: usize = 1 << 15;

/// Runs `f` on each `width`-wide row of `data` (with its index), in parallel when there are
/// enough values.
pub(super) fn rows_mut(data: &mut [f32], width: usize, f: impl Fn(usize, &mut [f32]) + Sync) {
    if width == 0 {
        return;
    }
    if data.len() < 2 * PARALLEL_VALUES {
        data.chunks_exact_mut(width)
            .enumerate()
            .for_each(|(i, r)| f(i, r));
    } else {
        let rows_per_task = rows_per_task(data.len() / width, width);
        data.par_chunks_mut(rows_per_task * width)
            .enumerate()
            .for_each(|(t, rows)| {
                for (i, r) in rows.chunks_exact_mut(width).enumerate() {
                    f(t * rows_per_task + i, r)
                }
            });
    }
}

/// Rows per task when `rows` rows of `width` values are split over the pool: tasks of about
/// [`PARALLEL_VALUES`] values, as many on every thread. Tasks of a fixed size left one thread
/// with a task more than the other (64 rows of a 1536-wide activation: 21, 21, 21 and 1 rows),
/// and the call waited for it.
fn rows_per_task(rows: usize, width: usize) -> usize {
    let threads = rayon::current_num_threads().max(1);
    let tasks = (rows * width)
        .div_ceil(PARALLEL_VALUES)
        .next_multiple_of(threads);
    rows.div_ceil(tasks).max(1)
}

/// `out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight` for every row of `x` (rows as wide as
/// `weight`).
pub fn rms_norm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let w = weight.len();
    assert_eq!(
        x.len(),
        out.len(),
        "rms_norm: input and output sizes differ"
    );
    rows_mut(out, w, |r, o| {
        rms_norm_row(&x[r * w..][..w], weight, eps, o)
    });
}

/// [`rms_norm`] that overwrites its input, for a norm applied to each head of q or k.
pub fn rms_norm_in_place(x: &mut [f32], weight: &[f32], eps: f32) {
    let w = weight.len();
    rows_mut(x, w, |_, row| rms_norm_row_in_place(row, weight, eps));
}

/// [`rms_norm_in_place`] on each of the `n_heads` heads (`weight.len()` wide) of every row of
/// `data`, where row `r` starts at `r * stride + offset` (q or k inside the rows of a fused
/// q/k/v product): Qwen3's and Gemma 3's norms of q and k.
pub fn rms_norm_heads(
    data: &mut [f32],
    stride: usize,
    offset: usize,
    n_heads: usize,
    weight: &[f32],
    eps: f32,
) {
    let d = weight.len();
    if d == 0 || stride == 0 {
        return;
    }
    let body = |row: &mut [f32]| {
        for head in row[offset..][..n_heads * d].chunks_exact_mut(d) {
            rms_norm_row_in_place(head, weight, eps);
        }
    };
    // a last row may end right after its heads, so rows are the chunks of `stride`
    let rows = data.len().div_ceil(stride);
    if rows * n_heads * d < 2 * PARALLEL_VALUES {
        data.chunks_mut(stride).for_each(body);
    } else {
        data.par_chunks_mut(stride).for_each(body);
    }
}

#[multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512vl+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn rms_norm_row_in_place(row: &mut [f32], weight: &[f32], eps: f32) {
    let mean = dot(row, row) / row.len() as f32;
    let inv = 1.0 / (mean + eps).sqrt();
    for (x, w) in row.iter_mut().zip(weight) {
        *x *= inv * w;
    }
}

#[multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512vl+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn rms_norm_row(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let mean = dot(x, x) / x.len() as f32;
    let inv = 1.0 / (mean + eps).sqrt();
    for ((o, x), w) in out.iter_mut().zip(x).zip(weight) {
        *o = x * inv * w;
    }
}

/// How RoPE pairs the dimensions of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// Neighbouring dimensions `(2i, 2i + 1)`: Llama, as its GGUF files store q and k.
    Interleaved,
    /// Dimension `i` with `i + head_dim / 2`: GPT-NeoX, Qwen2, Gemma.
    Halves,
}

/// YaRN context extension (`rope.scaling.type = yarn`), as ggml's `rope_ext` applies it with
/// llama.cpp's defaults: each frequency is interpolated (divided by `factor`), extrapolated
/// (left alone) or a blend of the two, by where its wavelength falls against the original
/// context; and the cosines and sines are scaled by `magnitude`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Yarn {
    /// How much longer the extended context is than the original (`rope.scaling.factor`).
    pub factor: f32,
    /// The context the model was trained with before the extension
    /// (`rope.scaling.original_context_length`).
    pub original_context: usize,
    /// Pairs turning at least this many times over the original context keep their
    /// frequency (llama.cpp's `yarn_beta_fast`, 32).
    pub beta_fast: f32,
    /// Pairs turning at most this many times are fully interpolated (`yarn_beta_slow`, 1).
    pub beta_slow: f32,
    /// Blend of interpolation and extrapolation (llama.cpp's `yarn_ext_factor`: 1 for YaRN).
    pub ext_factor: f32,
    /// Factor on the cosines and sines: `rope.scaling.attn_factor` times `1 + 0.1 ln(factor)`
    /// (llama.cpp's net magnitude once its own correction is undone).
    pub magnitude: f32,
}

impl Yarn {
    /// YaRN with llama.cpp's defaults for the given factor, original context and
    /// `rope.scaling.attn_factor`.
    pub fn new(factor: f32, original_context: usize, attn_factor: f32) -> Yarn {
        let growth = if factor > 1.0 {
            1.0 + 0.1 * factor.ln()
        } else {
            1.0
        };
        Yarn {
            factor,
            original_context,
            beta_fast: 32.0,
            beta_slow: 1.0,
            ext_factor: 1.0,
            magnitude: attn_factor * growth,
        }
    }

    /// The pair index below which frequencies are kept and the one above which they are fully
    /// interpolated: where a pair turns `beta` times over the original context, rounded
    /// outwards and kept within the pairs (ggml's correction dimensions).
    fn ramp_ends(&self, head_dim: usize, base: f32) -> (f32, f32) {
        let d = head_dim as f32;
        let at = |turns: f32| {
            d * (self.original_context as f32 / (turns * 2.0 * std::f32::consts::PI)).ln()
                / (2.0 * base.ln())
        };
        let low = at(self.beta_fast).floor().max(0.0);
        let high = at(self.beta_slow).ceil().min(d - 1.0);
        (low, high)
    }

    /// The multiplier of pair `i`'s frequency: `1 / factor` (interpolated) blended towards 1
    /// (extrapolated) for the fast pairs.
    fn frequency_factor(&self, i: usize, (low, high): (f32, f32)) -> f32 {
        let y = (i as f32 - low) / (high - low).max(0.001);
        let keep = (1.0 - y.clamp(0.0, 1.0)) * self.ext_factor;
        let interp = 1.0 / self.factor;
        interp * (1.0 - keep) + keep
    }
}

/// Rotary position embedding of one head width: the frequencies, and the cosines and sines of
/// the positions of one forward pass.
#[derive(Clone, Debug)]
pub struct Rope {
    style: RopeStyle,
    inv_freq: Vec<f32>,
    /// Factor on the cosines and sines (YaRN's magnitude; 1 otherwise).
    magnitude: f32,
    /// The first position of the pass.
    first: usize,
    /// `[position of the pass][head_dim / 2]` each.
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl Rope {
    /// RoPE of heads `head_dim` wide with base frequency `base`: pair `i` turns by
    /// `position * base^(-2i / head_dim)` (computed in f32, as llama.cpp and candle do), divided
    /// by `factors[i]` when given (Llama 3.1's `rope_freqs`).
    pub fn new(style: RopeStyle, head_dim: usize, base: f32, factors: Option<&[f32]>) -> Rope {
        let half = head_dim / 2;
        let inv_freq = (0..half)
            .map(|i| {
                let f = 1.0 / base.powf((2 * i) as f32 / head_dim as f32);
                f / factors.and_then(|v| v.get(i)).copied().unwrap_or(1.0)
            })
            .collect();
        Rope {
            style,
            inv_freq,
            magnitude: 1.0,
            first: 0,
            cos: Vec::new(),
            sin: Vec::new(),
        }
    }

    /// This RoPE (of base frequency `base`) extended by YaRN: each pair's frequency blended
    /// between itself and `1 / factor` of itself, the rotations scaled by its magnitude.
    pub fn with_yarn(mut self, base: f32, yarn: &Yarn) -> Rope {
        let ends = yarn.ramp_ends(2 * self.inv_freq.len(), base);
        for (i, f) in self.inv_freq.iter_mut().enumerate() {
            *f *= yarn.frequency_factor(i, ends);
        }
        self.magnitude = yarn.magnitude;
        self
    }

    /// Prepares the angles of positions `first..first + count`.
    pub fn set_positions(&mut self, first: usize, count: usize) {
        let half = self.inv_freq.len();
        self.first = first;
        self.cos.resize(count * half, 0.0);
        self.sin.resize(count * half, 0.0);
        for p in 0..count {
            let pos = (first + p) as f32;
            for (i, f) in self.inv_freq.iter().enumerate() {
                let angle = pos * f;
                self.cos[p * half + i] = angle.cos() * self.magnitude;
                self.sin[p * half + i] = angle.sin() * self.magnitude;
            }
        }
    }

    /// Rotates `n_heads` heads of every row of `data` in place: row `r` (the `r`-th position
    /// given to [`Rope::set_positions`]) starts at `r * stride + offset`.
    pub fn apply(&self, data: &mut [f32], stride: usize, offset: usize, n_heads: usize) {
        self.apply_at(self.first, data, stride, offset, n_heads);
    }

    /// [`Rope::apply`] to rows that start at position `first` (one of the positions given to
    /// [`Rope::set_positions`]): a part of the pass.
    pub fn apply_at(
        &self,
        first: usize,
        data: &mut [f32],
        stride: usize,
        offset: usize,
        n_heads: usize,
    ) {
        let skip = first
            .checked_sub(self.first)
            .expect("rows start at one of the pass's positions");
        let half = self.inv_freq.len();
        let d = 2 * half;
        let rows = (self.cos.len() / half.max(1))
            .saturating_sub(skip)
            .min(data.len().div_ceil(stride.max(1)));
        let body = |r: usize, row: &mut [f32]| {
            let at = (skip + r) * half;
            let (cos, sin) = (&self.cos[at..][..half], &self.sin[at..][..half]);
            for h in 0..n_heads {
                let head = &mut row[offset + h * d..][..d];
                rotate(self.style, head, cos, sin);
            }
        };
        if rows * n_heads * d < 2 * PARALLEL_VALUES {
            data.chunks_mut(stride)
                .take(rows)
                .enumerate()
                .for_each(|(r, row)| body(r, row));
        } else {
            data.par_chunks_mut(stride)
                .take(rows)
                .enumerate()
                .for_each(|(r, row)| body(r, row));
        }
    }
}

#[multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512vl+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn rotate(style: RopeStyle, head: &mut [f32], cos: &[f32], sin: &[f32]) {
    let half = cos.len();
    match style {
        RopeStyle::Interleaved => {
            for ((pair, c), s) in head.chunks_exact_mut(2).zip(cos).zip(sin) {
                let (a, b) = (pair[0], pair[1]);
                pair[0] = a * c - b * s;
                pair[1] = a * s + b * c;
            }
        }
        RopeStyle::Halves => {
            let (x0, x1) = head.split_at_mut(half);
            for i in 0..half {
                let (a, b) = (x0[i], x1[i]);
                x0[i] = a * cos[i] - b * sin[i];
                x1[i] = a * sin[i] + b * cos[i];
            }
        }
    }
}

/// `x += y` elementwise.
pub fn add_in_place(x: &mut [f32], y: &[f32]) {
    assert_eq!(x.len(), y.len(), "add_in_place: sizes differ");
    if x.len() < 2 * PARALLEL_VALUES {
        x.iter_mut().zip(y).for_each(|(a, b)| *a += b);
    } else {
        // as many tasks on every thread, each a multiple of 16 values
        let per_task = 16 * rows_per_task(x.len().div_ceil(16), 16);
        x.par_chunks_mut(per_task)
            .zip(y.par_chunks(per_task))
            .for_each(|(a, b)| a.iter_mut().zip(b).for_each(|(a, b)| *a += b));
    }
}

/// Adds `bias` to every `bias.len()`-wide row of `x`.
pub fn add_bias(x: &mut [f32], bias: &[f32]) {
    rows_mut(x, bias.len(), |_, r| {
        r.iter_mut().zip(bias).for_each(|(a, b)| *a += b)
    });
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// `n` values uniform in [-2, 2) (also the gated activations' test values).
    pub(in crate::ops) fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut v = qrepack::rng::SplitMix64::new(seed).pm1_vec(n);
        v.iter_mut().for_each(|x| *x *= 2.0);
        v
    }

    /// Every thread gets as many tasks, each at most about [`PARALLEL_VALUES`] values: the
    /// rows of a thread's share never exceed an even split by more than one task.
    #[test]
    fn row_tasks_are_even_over_the_threads() {
        for threads in [1, 2, 3, 8] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("a pool");
            pool.install(|| {
                assert_eq!(rayon::current_num_threads(), threads);
                for (rows, width) in [(64, 1536), (128, 576), (512, 2048), (7, 100_000), (3, 5)] {
                    let per = rows_per_task(rows, width);
                    let tasks = rows.div_ceil(per);
                    let busiest = tasks.div_ceil(threads) * per;
                    assert!(
                        busiest <= rows.div_ceil(threads) + per,
                        "{rows}x{width} on {threads}: {per} rows a task"
                    );
                    assert!(
                        per == 1 || per * width <= 2 * PARALLEL_VALUES,
                        "{rows}x{width}"
                    );
                }
                if threads == 2 {
                    // 64 rows of 1536: four tasks of 16, where tasks of 21 rows made 21+21 / 21+1
                    assert_eq!(rows_per_task(64, 1536), 16);
                }
            });
        }
    }

    #[test]
    fn rms_norm_matches_f64() {
        for (rows, width) in [(1, 64), (9, 80), (33, 576), (200, 576)] {
            let x = values(rows * width, 1);
            let w = values(width, 2);
            let mut out = vec![0.0; rows * width];
            rms_norm(&x, &w, 1e-5, &mut out);
            for r in 0..rows {
                let row = &x[r * width..][..width];
                let ms = row.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / width as f64;
                let inv = 1.0 / (ms + 1e-5).sqrt();
                for i in 0..width {
                    let want = row[i] as f64 * inv * w[i] as f64;
                    assert!(
                        (out[r * width + i] as f64 - want).abs() < 1e-5,
                        "{rows}x{width}"
                    );
                }
            }
        }
    }

    #[test]
    fn rope_matches_f64_in_both_styles() {
        for style in [RopeStyle::Interleaved, RopeStyle::Halves] {
            for (d, with_factors) in [(64, false), (80, true), (128, false), (256, true)] {
                let (rows, heads, stride, offset) = (9, 3, 3 * d + 5, 5);
                // Llama 3.1-style divisors: 1 for the fast pairs up to 8 for the slow ones
                let factors: Vec<f32> =
                    (0..d / 2).map(|i| 1.0 + (7 * i / (d / 2)) as f32).collect();
                let f = |i: usize| if with_factors { factors[i] as f64 } else { 1.0 };
                let mut rope = Rope::new(style, d, 10_000.0, with_factors.then_some(&factors[..]));
                rope.set_positions(100, rows);
                let x = values(rows * stride, 3);
                let mut y = x.clone();
                rope.apply(&mut y, stride, offset, heads);
                for r in 0..rows {
                    for h in 0..heads {
                        for i in 0..d / 2 {
                            let theta = (100 + r) as f64
                                * (10_000f64).powf(-((2 * i) as f64) / d as f64)
                                / f(i);
                            let (a, b) = match style {
                                RopeStyle::Interleaved => (2 * i, 2 * i + 1),
                                RopeStyle::Halves => (i, i + d / 2),
                            };
                            let base = r * stride + offset + h * d;
                            let (x0, x1) = (x[base + a] as f64, x[base + b] as f64);
                            let w0 = x0 * theta.cos() - x1 * theta.sin();
                            let w1 = x0 * theta.sin() + x1 * theta.cos();
                            assert!((y[base + a] as f64 - w0).abs() < 1e-4, "{style:?} {d}");
                            assert!((y[base + b] as f64 - w1).abs() < 1e-4, "{style:?} {d}");
                        }
                    }
                }
                // what lies outside the heads is untouched
                for r in 0..rows {
                    assert_eq!(y[r * stride..][..offset], x[r * stride..][..offset]);
                }
            }
        }
    }

    /// YaRN against the definition in f64: the correction range from where each pair turns
    /// 32 and 1 times over the original context, the linear ramp between, the magnitude.
    #[test]
    fn yarn_matches_f64() {
        let (d, base, factor, orig) = (64usize, 150_000.0f64, 32.0f64, 4096usize);
        let yarn = Yarn::new(factor as f32, orig, 1.0);
        let mut rope =
            Rope::new(RopeStyle::Halves, d, base as f32, None).with_yarn(base as f32, &yarn);
        let (rows, pos0) = (5, 3000);
        rope.set_positions(pos0, rows);
        let x = values(rows * d, 9);
        let mut y = x.clone();
        rope.apply(&mut y, d, 0, 1);
        let turns_at = |beta: f64| {
            d as f64 * (orig as f64 / (beta * 2.0 * std::f64::consts::PI)).ln() / (2.0 * base.ln())
        };
        let low = turns_at(32.0).floor().max(0.0);
        let high = turns_at(1.0).ceil().min(d as f64 - 1.0);
        let magnitude = 1.0 + 0.1 * factor.ln();
        let mut blended = 0;
        for r in 0..rows {
            for i in 0..d / 2 {
                let keep = 1.0 - ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                blended += usize::from(keep > 0.0 && keep < 1.0);
                let extrap = (pos0 + r) as f64 * base.powf(-((2 * i) as f64) / d as f64);
                let theta = extrap / factor * (1.0 - keep) + extrap * keep;
                let (x0, x1) = (x[r * d + i] as f64, x[r * d + i + d / 2] as f64);
                let w0 = (x0 * theta.cos() - x1 * theta.sin()) * magnitude;
                let w1 = (x0 * theta.sin() + x1 * theta.cos()) * magnitude;
                // f32 angles of positions ~3000: a few ulps of 3000 radians
                assert!((y[r * d + i] as f64 - w0).abs() < 2e-3, "pair {i}");
                assert!((y[r * d + i + d / 2] as f64 - w1).abs() < 2e-3, "pair {i}");
            }
        }
        assert!(blended > 0, "no pair fell inside the ramp");
    }

    #[test]
    fn head_norms_match_f64() {
        for (rows, heads, d) in [(3, 2, 32), (40, 8, 128)] {
            let (stride, offset) = (heads * d + 2 * d + 3, d);
            let x = values(rows * stride, 7);
            let w = values(d, 8);
            let mut y = x.clone();
            rms_norm_heads(&mut y, stride, offset, heads, &w, 1e-6);
            for r in 0..rows {
                for h in 0..heads {
                    let base = r * stride + offset + h * d;
                    let head = &x[base..][..d];
                    let ms = head.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / d as f64;
                    let inv = 1.0 / (ms + 1e-6).sqrt();
                    for i in 0..d {
                        let want = head[i] as f64 * inv * w[i] as f64;
                        assert!(
                            (y[base + i] as f64 - want).abs() < 1e-5,
                            "{rows}x{heads}x{d}"
                        );
                    }
                }
                // the rest of the row (k, v, and what precedes q) is untouched
                assert_eq!(y[r * stride..][..offset], x[r * stride..][..offset]);
                let end = r * stride + offset + heads * d;
                assert_eq!(y[end..r * stride + stride], x[end..r * stride + stride]);
            }
        }
    }

    #[test]
    fn adds() {
        let mut x = values(70_000, 5);
        let y = values(70_000, 6);
        let want: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a + b).collect();
        add_in_place(&mut x, &y);
        assert_eq!(x, want);
        let mut z = vec![1.0f32; 12];
        add_bias(&mut z, &[1.0, 2.0, 3.0]);
        assert_eq!(z, [2.0, 3.0, 4.0].repeat(4));
    }
}
