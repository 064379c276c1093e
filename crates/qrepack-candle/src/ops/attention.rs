//! Causal multi-head attention with grouped-query heads over a key/value cache.
//!
//! For a block of query rows and one query head, the scores against every position the block
//! sees are one matrix product (`Q K^T`, keys read in place from the cache), each row's softmax
//! runs over its own positions (causal mask, sliding window), and the output is a second
//! product (`P V`) written straight into the output rows. The products are the `gemm` crate's
//! (candle's own CPU GEMM, with its AVX-512 / AVX2 / NEON kernels chosen at run time).
//! Prompts are split over the thread pool by blocks of query rows; a single row by key/value
//! head; calls too small to be worth waking the pool run on the calling thread.

use multiversion::multiversion;
use rayon::prelude::*;

use super::math::exp;

/// The head structure of an attention layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heads {
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads; `n_head` is a multiple of it, and query head `h` reads key/value head
    /// `h / (n_head / n_kv_head)`.
    pub n_kv_head: usize,
    /// Width of one head.
    pub head_dim: usize,
}

impl Heads {
    /// Query heads per key/value head.
    pub fn group(&self) -> usize {
        self.n_head / self.n_kv_head
    }
}

/// A matrix whose row `r` is `data[r * stride + offset..][..width]` (the query part of a fused
/// q/k/v product, say).
#[derive(Clone, Copy, Debug)]
pub struct Rows<'a> {
    /// The storage.
    pub data: &'a [f32],
    /// Distance between rows.
    pub stride: usize,
    /// Start of row 0.
    pub offset: usize,
}

impl<'a> Rows<'a> {
    /// Row `r`, from its offset to the end of the row stride.
    #[cfg(test)]
    fn row(&self, r: usize) -> &'a [f32] {
        &self.data[r * self.stride + self.offset..]
    }
}

/// One attention call: the queries of `seq` consecutive positions starting at `first_pos`
/// against the cached keys and values of positions `0..first_pos + seq`.
#[derive(Clone, Copy, Debug)]
pub struct Attention<'a> {
    /// The heads.
    pub heads: Heads,
    /// `seq` rows of `n_head * head_dim` queries (head `h` at `h * head_dim`).
    pub queries: Rows<'a>,
    /// Query rows.
    pub seq: usize,
    /// Position of query row 0; row `r` attends to positions `..= first_pos + r`.
    pub first_pos: usize,
    /// Cached keys: one row of `n_kv_head * head_dim` per position, at least
    /// `first_pos + seq` rows.
    pub keys: &'a [f32],
    /// Cached values, laid out as `keys`.
    pub values: &'a [f32],
    /// Multiplier of the scores (usually `1 / sqrt(head_dim)`).
    pub scale: f32,
    /// Sliding window: row at position `p` sees only positions `> p - window` (`None`: all).
    pub window: Option<usize>,
}

/// Query rows per task of a prompt: enough rows that the products over the keys and values
/// run as matrix products, few enough that a 512-token prompt gives each thread several tasks
/// (the causal rows grow in cost, and work stealing evens them out).
const ROW_BLOCK: usize = 32;
/// Multiply-adds below which a call runs on the calling thread: waking the pool costs more.
const SERIAL_WORK: usize = 1 << 20;
/// The same for a single query row, whose work is bound by reading the cache from memory.
const SERIAL_ROW_WORK: usize = 1 << 16;

impl Attention<'_> {
    fn check(&self, out: &[f32]) -> Result<(), String> {
        let h = self.heads;
        if h.n_kv_head == 0 || !h.n_head.is_multiple_of(h.n_kv_head) || h.head_dim == 0 {
            return Err(format!(
                "{} query heads cannot share {} key/value heads of width {}",
                h.n_head, h.n_kv_head, h.head_dim
            ));
        }
        let width = h.n_head * h.head_dim;
        if self.seq > 0 {
            let last = (self.seq - 1) * self.queries.stride + self.queries.offset + width;
            if self.queries.data.len() < last {
                return Err(format!(
                    "{} query rows of {width} need {last} values, have {}",
                    self.seq,
                    self.queries.data.len()
                ));
            }
        }
        let kv = (self.first_pos + self.seq) * h.n_kv_head * h.head_dim;
        if self.keys.len() < kv || self.values.len() < kv {
            return Err(format!(
                "{} positions of keys and values need {kv} values each, have {} and {}",
                self.first_pos + self.seq,
                self.keys.len(),
                self.values.len()
            ));
        }
        if out.len() != self.seq * width {
            return Err(format!(
                "the output of {} rows of {width} has {} values",
                self.seq,
                out.len()
            ));
        }
        if self.window == Some(0) {
            return Err("a sliding window of 0 positions sees nothing".into());
        }
        Ok(())
    }

    /// The positions row `r` attends to.
    fn visible(&self, r: usize) -> (usize, usize) {
        let p = self.first_pos + r;
        let lo = self.window.map_or(0, |w| (p + 1).saturating_sub(w));
        (lo, p + 1)
    }

    /// Runs the attention into `out` (`seq` rows of `n_head * head_dim`), on the current rayon
    /// pool; an error when the shapes do not fit.
    pub fn run(&self, out: &mut [f32]) -> Result<(), String> {
        self.check(out)?;
        if self.seq == 0 {
            return Ok(());
        }
        let h = self.heads;
        let width = h.n_head * h.head_dim;
        let span = self.visible(self.seq - 1).1 - self.visible(0).0;
        let work = self.seq * h.n_head * span * h.head_dim;
        let threads = rayon::current_num_threads();
        // A single row reads every cached key and value once, from memory (the weights have
        // streamed through the caches since): split by key/value head as soon as that beats
        // waking the pool.
        let one_row_split = self.seq == 1 && h.n_kv_head > 1 && work >= SERIAL_ROW_WORK;
        if (work < SERIAL_WORK && !one_row_split) || threads == 1 {
            let mut scratch = Vec::new();
            for (b, rows) in out.chunks_mut(ROW_BLOCK * width).enumerate() {
                for g in 0..h.n_kv_head {
                    self.attend_block(b * ROW_BLOCK, g, rows, &mut scratch);
                }
            }
        } else if self.seq == 1 && h.n_kv_head > 1 {
            // One row: the query heads of one key/value head are contiguous in it.
            out.par_chunks_mut(h.group() * h.head_dim)
                .enumerate()
                .for_each_init(Vec::new, |scratch, (g, part)| {
                    self.attend_block(0, g, part, scratch)
                });
        } else {
            let block = ROW_BLOCK.min(self.seq.div_ceil(2 * threads)).max(1);
            out.par_chunks_mut(block * width)
                .with_max_len(1)
                .enumerate()
                .for_each_init(Vec::new, |scratch, (b, rows)| {
                    for g in 0..h.n_kv_head {
                        self.attend_block(b * block, g, rows, scratch);
                    }
                });
        }
        Ok(())
    }

    /// The query heads of key/value head `g` for the query rows from `r0` on that `out`
    /// holds: `out` is either whole output rows or, for a single row, just the group's heads.
    ///
    /// Per query head, the scores of the rows against every position any of them sees are one
    /// matrix product (`Q K^T`), the softmax runs over each row's own positions (the others
    /// get weight 0), and the weighted values are a second product (`P V`) written straight
    /// into `out`.
    fn attend_block(&self, r0: usize, g: usize, out: &mut [f32], scratch: &mut Vec<f32>) {
        let h = self.heads;
        let (d, group) = (h.head_dim, h.group());
        let width = h.n_head * d;
        // a single row's part of the group's heads, or whole rows
        let (rows, group_col) = if self.seq == 1 && out.len() == group * d {
            (1, 0)
        } else {
            (out.len() / width, g * group * d)
        };
        let q_row0 = r0 * self.queries.stride + self.queries.offset + g * group * d;
        if rows == 1 {
            // One row: the group's query heads are `group` vectors `d` apart that see the
            // same positions, so each product takes them all at once.
            let vis = self.visible(r0);
            #[cfg(target_arch = "x86_64")]
            if super::attention_row::RowGroup::supported(group, d) {
                let kv_stride = h.n_kv_head * d;
                let span = vis.1 - vis.0;
                let kv_at = vis.0 * kv_stride + g * d;
                let row = super::attention_row::RowGroup {
                    queries: &self.queries.data[q_row0..q_row0 + group * d],
                    m: group,
                    d,
                    keys: &self.keys[kv_at..],
                    values: &self.values[kv_at..],
                    stride: kv_stride,
                    span,
                    scale: self.scale,
                };
                scratch.clear();
                scratch.resize(group * span, 0.0);
                let out = &mut out[group_col..group_col + group * d];
                row.run(scratch, |w| softmax_in_place(w, 0, span), out);
                return;
            }
            self.pass(g, group, (q_row0, d), (group_col, d), out, scratch, |_| vis);
        } else {
            for j in 0..group {
                let q = (q_row0 + j * d, self.queries.stride);
                let o = (group_col + j * d, width);
                self.pass(g, rows, q, o, out, scratch, |r| self.visible(r0 + r));
            }
        }
    }

    /// `m` query vectors (the first at `q.0` of the queries, the next `q.1` further on)
    /// against key/value head `g`: scores (`Q K^T`), each vector's softmax over the positions
    /// `visible(i)` gives it, weighted values (`P V`) into `out` from `o.0`, `o.1` apart.
    #[allow(clippy::too_many_arguments)]
    fn pass(
        &self,
        g: usize,
        m: usize,
        q: (usize, usize),
        o: (usize, usize),
        out: &mut [f32],
        scratch: &mut Vec<f32>,
        visible: impl Fn(usize) -> (usize, usize),
    ) {
        let d = self.heads.head_dim;
        let kv_stride = self.heads.n_kv_head * d;
        let lo = (0..m).map(|i| visible(i).0).min().unwrap_or(0);
        let hi = (0..m).map(|i| visible(i).1).max().unwrap_or(0);
        let span = hi - lo;
        assert!(
            q.0 + (m - 1) * q.1 + d <= self.queries.data.len()
                && hi * kv_stride <= self.keys.len().min(self.values.len())
                && o.0 + (m - 1) * o.1 + d <= out.len(),
            "attention operands out of bounds"
        );
        scratch.clear();
        scratch.resize(m * span, 0.0);
        // SAFETY: the assertion above bounds every element read: query vectors `q.0 + i * q.1
        // .. + d` for `i < m`, keys and values of positions `lo..hi` of head `g` (`g * d + d
        // <= kv_stride`, checked by `check`); the scores are `m x span` in `scratch`, sized
        // just above; nothing else holds these buffers while the product runs.
        unsafe {
            gemm::gemm(
                m,
                span,
                d,
                scratch.as_mut_ptr(),
                1,
                span as isize,
                false,
                self.queries.data.as_ptr().add(q.0),
                1,
                q.1 as isize,
                self.keys.as_ptr().add(lo * kv_stride + g * d),
                kv_stride as isize,
                1,
                0.0,
                self.scale,
                false,
                false,
                false,
                gemm::Parallelism::None,
            );
        }
        for (i, s) in scratch.chunks_exact_mut(span).enumerate() {
            let (a, b) = visible(i);
            softmax_in_place(s, a - lo, b - lo);
        }
        // SAFETY: the weights are the `m x span` scores; the values of positions `lo..hi` of
        // head `g` and the output vectors `o.0 + i * o.1 .. + d` are inside their slices
        // (the assertion above); `out` is this call's own.
        unsafe {
            gemm::gemm(
                m,
                d,
                span,
                out.as_mut_ptr().add(o.0),
                1,
                o.1 as isize,
                false,
                scratch.as_ptr(),
                1,
                span as isize,
                self.values.as_ptr().add(lo * kv_stride + g * d),
                1,
                kv_stride as isize,
                0.0,
                1.0,
                false,
                false,
                false,
                gemm::Parallelism::None,
            );
        }
    }
}

/// Softmax of `s[a..b]` in place; the rest of `s` becomes 0 (positions the row does not see).
#[multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512vl+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn softmax_in_place(s: &mut [f32], a: usize, b: usize) {
    const LANES: usize = 16;
    let (head, rest) = s.split_at_mut(a);
    let (seen, tail) = rest.split_at_mut(b - a);
    head.fill(0.0);
    tail.fill(0.0);
    let mut lane_max = [f32::NEG_INFINITY; LANES];
    let mut chunks = seen.chunks_exact(LANES);
    for c in &mut chunks {
        for l in 0..LANES {
            lane_max[l] = lane_max[l].max(c[l]);
        }
    }
    let max = chunks
        .remainder()
        .iter()
        .chain(&lane_max)
        .copied()
        .fold(f32::NEG_INFINITY, f32::max);
    let mut lane_sum = [0.0f32; LANES];
    let mut chunks = seen.chunks_exact_mut(LANES);
    for c in &mut chunks {
        for l in 0..LANES {
            let e = exp(c[l] - max);
            c[l] = e;
            lane_sum[l] += e;
        }
    }
    let mut sum: f32 = lane_sum.iter().sum();
    for v in chunks.into_remainder() {
        *v = exp(*v - max);
        sum += *v;
    }
    let inv = if sum > 0.0 { 1.0 / sum } else { 0.0 };
    for v in seen.iter_mut() {
        *v *= inv;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Attention in f64, straight from the definition.
    fn reference(a: &Attention<'_>) -> Vec<f64> {
        let h = a.heads;
        let d = h.head_dim;
        let stride = h.n_kv_head * d;
        let mut out = vec![0.0f64; a.seq * h.n_head * d];
        for r in 0..a.seq {
            let (lo, hi) = a.visible(r);
            for head in 0..h.n_head {
                let g = head / h.group();
                let q = &a.queries.row(r)[head * d..][..d];
                let scores: Vec<f64> = (lo..hi)
                    .map(|p| {
                        let k = &a.keys[p * stride + g * d..][..d];
                        q.iter()
                            .zip(k)
                            .map(|(x, y)| *x as f64 * *y as f64)
                            .sum::<f64>()
                            * a.scale as f64
                    })
                    .collect();
                let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
                let total: f64 = w.iter().sum();
                for (p, w) in (lo..hi).zip(&w) {
                    let v = &a.values[p * stride + g * d..][..d];
                    for i in 0..d {
                        out[(r * h.n_head + head) * d + i] += w / total * v[i] as f64;
                    }
                }
            }
        }
        out
    }

    /// `n` values uniform in [-1, 1).
    fn values(n: usize, seed: u64) -> Vec<f32> {
        qrepack::rng::SplitMix64::new(seed).pm1_vec(n)
    }

    fn check(heads: Heads, seq: usize, first_pos: usize, window: Option<usize>, threads: usize) {
        let kv = first_pos + seq;
        let width = heads.n_head * heads.head_dim;
        // queries inside a fused q/k/v row, as the decoder passes them
        let stride = width + 2 * heads.n_kv_head * heads.head_dim;
        let qkv = values(seq * stride, 1 + seq as u64);
        let keys = values(kv * heads.n_kv_head * heads.head_dim, 2 + kv as u64);
        let vals = values(kv * heads.n_kv_head * heads.head_dim, 3);
        let a = Attention {
            heads,
            queries: Rows {
                data: &qkv,
                stride,
                offset: 0,
            },
            seq,
            first_pos,
            keys: &keys,
            values: &vals,
            // large scores test the softmax's range
            scale: 3.0 / (heads.head_dim as f32).sqrt(),
            window,
        };
        let mut out = vec![f32::NAN; seq * width];
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| a.run(&mut out)).unwrap();
        let want = reference(&a);
        for (i, (got, want)) in out.iter().zip(&want).enumerate() {
            assert!(
                (*got as f64 - want).abs() < 2e-5,
                "{heads:?} seq {seq} pos {first_pos} window {window:?}: [{i}] {got} vs {want}"
            );
        }
    }

    #[test]
    fn matches_f64_on_awkward_shapes() {
        for head_dim in [64, 80, 128, 256] {
            // (16, 1): a group too wide for the one-row kernel
            for (n_head, n_kv_head) in [(4, 4), (6, 2), (8, 2), (8, 1), (16, 1)] {
                let heads = Heads {
                    n_head,
                    n_kv_head,
                    head_dim,
                };
                for seq in [1, 2, 5, 9, 33] {
                    check(heads, seq, 0, None, 2);
                    check(heads, seq, 70, None, 3);
                }
            }
        }
    }

    #[test]
    fn long_prompts_and_decode_after_them() {
        let heads = Heads {
            n_head: 9,
            n_kv_head: 3,
            head_dim: 64,
        };
        check(heads, 150, 0, None, 2);
        check(heads, 64, 200, None, 4);
        check(heads, 1, 511, None, 2);
        check(heads, 1, 1000, None, 1);
    }

    #[test]
    fn sliding_window() {
        let heads = Heads {
            n_head: 4,
            n_kv_head: 1,
            head_dim: 64,
        };
        check(heads, 40, 0, Some(16), 2);
        check(heads, 1, 300, Some(64), 2);
        check(heads, 33, 100, Some(1), 2);
    }

    #[test]
    fn shape_errors() {
        let heads = Heads {
            n_head: 4,
            n_kv_head: 3,
            head_dim: 8,
        };
        let data = vec![0.0; 64];
        let a = Attention {
            heads,
            queries: Rows {
                data: &data,
                stride: 32,
                offset: 0,
            },
            seq: 1,
            first_pos: 0,
            keys: &data,
            values: &data,
            scale: 1.0,
            window: None,
        };
        assert!(a.run(&mut [0.0; 32]).unwrap_err().contains("cannot share"));
        let a = Attention {
            heads: Heads {
                n_kv_head: 2,
                ..heads
            },
            keys: &data[..8],
            ..a
        };
        assert!(a
            .run(&mut [0.0; 32])
            .unwrap_err()
            .contains("positions of keys"));
    }
}
