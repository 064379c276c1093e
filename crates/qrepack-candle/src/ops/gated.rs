//! The gated activations of a feed-forward layer (SwiGLU, GeGLU, gpt-oss's clamped SwiGLU):
//! `act(gate) * up` on rows of f32 into a preallocated buffer, with 512- or 256-bit vectors
//! where the CPU has them.

use multiversion::multiversion;

use super::elementwise::rows_mut;
use super::math::silu;

/// The gate of a gated feed-forward layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// `silu(gate) * up` (Llama, Qwen).
    SwiGlu,
    /// `gelu_tanh(gate) * up` (Gemma).
    GeGlu,
    /// gpt-oss's clamped SwiGLU: `g * sigmoid(1.702 g) * (u + 1)` with the gate capped at 7
    /// and the up projection clamped to [-7, 7] (llama.cpp's `swiglu_oai`).
    SwiGluOai,
}

/// The slope of [`Gate::SwiGluOai`]'s sigmoid.
const OAI_ALPHA: f32 = 1.702;
/// The bound of [`Gate::SwiGluOai`]'s inputs.
const OAI_LIMIT: f32 = 7.0;

/// `out[r][i] = act(gate[r][i]) * up[r][i]`, where row `r` of `gate` and `up` start at
/// `r * stride + gate_off` and `r * stride + up_off` and `out` has rows of `width`.
pub fn gated(
    gate: Gate,
    src: &[f32],
    stride: usize,
    (gate_off, up_off): (usize, usize),
    out: &mut [f32],
    width: usize,
) {
    let kernel = gated_row_kernel();
    rows_mut(out, width, |r, o| {
        let row = &src[r * stride..];
        kernel(gate, &row[gate_off..][..width], &row[up_off..][..width], o)
    });
}

/// [`gated`] when gate and up are separate buffers of `width`-wide rows (two products, or the
/// experts of a mixture): `out[r][i] = act(gate[r][i]) * up[r][i]`.
pub fn gated_split(gate: Gate, g: &[f32], u: &[f32], out: &mut [f32], width: usize) {
    assert!(
        g.len() >= out.len() && u.len() >= out.len(),
        "gated_split: gate or up shorter than the output"
    );
    let kernel = gated_row_kernel();
    rows_mut(out, width, |r, o| {
        kernel(gate, &g[r * width..][..width], &u[r * width..][..width], o)
    });
}

/// A gated activation's row kernel: gate values, up values, output.
type GatedRow = fn(Gate, &[f32], &[f32], &mut [f32]);

/// [`gated_row`], or the same with 512- or 256-bit vectors where the CPU has them (chosen once
/// per call): the compiler does not vectorize the portable loops' exponential well (4 ns a
/// value on AVX-512 Zen 4, a tenth of a 135M model's prompt pass).
fn gated_row_kernel() -> GatedRow {
    #[cfg(target_arch = "x86_64")]
    match super::wide::Width::available().next() {
        Some(super::wide::Width::W512) => {
            return |gate, g, u, out| {
                assert!(
                    g.len() >= out.len() && u.len() >= out.len(),
                    "gated row too short"
                );
                // SAFETY: AVX-512 F is present (the width was available); `g` and `u` hold
                // `out.len()` values.
                unsafe { gated_row_512(gate, g, u, out) }
            };
        }
        Some(super::wide::Width::W256) => {
            return |gate, g, u, out| {
                assert!(
                    g.len() >= out.len() && u.len() >= out.len(),
                    "gated row too short"
                );
                // SAFETY: AVX2, FMA and F16C are present; as above.
                unsafe { gated_row_256(gate, g, u, out) }
            };
        }
        None => {}
    }
    gated_row
}

/// # Safety
/// AVX-512 F; as [`gated_row_wide`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn gated_row_512(gate: Gate, g: &[f32], u: &[f32], out: &mut [f32]) {
    // SAFETY: the caller's contract.
    unsafe { gated_row_wide::<std::arch::x86_64::__m512>(gate, g, u, out) }
}

/// # Safety
/// AVX2, FMA and F16C; as [`gated_row_wide`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn gated_row_256(gate: Gate, g: &[f32], u: &[f32], out: &mut [f32]) {
    // SAFETY: the caller's contract.
    unsafe { gated_row_wide::<std::arch::x86_64::__m256>(gate, g, u, out) }
}

/// `out[i] = act(g[i]) * u[i]` four vectors at a time, each activation as `x / (1 + e^-y)`;
/// the values past the last four vectors through [`gated_row`]. The four exponentials run
/// interleaved ([`super::wide::Wide::exp_many`]): one at a time, each a chain of some 30
/// dependent operations, they ran at a third of the four's speed (SiLU, one Zen 3 thread,
/// 0.93 -> 2.1 values/ns).
///
/// # Safety
/// `W`'s instruction set; `g` and `u` at least as long as `out`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn gated_row_wide<W: super::wide::Wide>(gate: Gate, g: &[f32], u: &[f32], out: &mut [f32]) {
    const VECTORS: usize = 4;
    let n = out.len();
    let step = VECTORS * W::LANES;
    let full = n - n % step;
    let (gp, up, op) = (g.as_ptr(), u.as_ptr(), out.as_mut_ptr());
    // SAFETY: `i + step <= full <= n` for every step; the inputs hold at least `n` values.
    unsafe {
        let one = W::splat(1.0);
        let mut i = 0;
        while i < full {
            // `x / (1 + e^-y) * v` for the gate's x, y and factor v; loops over the vectors
            // rather than closures, which do not take the caller's target features
            let (mut x, mut minus_y, mut v) = ([one; VECTORS], [one; VECTORS], [one; VECTORS]);
            for k in 0..VECTORS {
                let (g, u) = (
                    W::load(gp.add(i + k * W::LANES)),
                    W::load(up.add(i + k * W::LANES)),
                );
                let (xk, yk, vk) = match gate {
                    Gate::SwiGlu => (g, g, u),
                    Gate::GeGlu => {
                        // 2 sqrt(2 / pi) (x + 0.044715 x^3)
                        let cube = g.mul(g).mul(W::splat(0.044_715));
                        (g, cube.mul_add(g, g).mul(W::splat(2.0 * 0.797_884_6)), u)
                    }
                    Gate::SwiGluOai => {
                        let x = g.min(W::splat(OAI_LIMIT));
                        let v = u.min(W::splat(OAI_LIMIT)).max(W::splat(-OAI_LIMIT));
                        (x, x.mul(W::splat(OAI_ALPHA)), v.add(one))
                    }
                };
                (x[k], minus_y[k], v[k]) = (xk, W::zero().sub(yk), vk);
            }
            let e = W::exp_many(minus_y);
            for k in 0..VECTORS {
                x[k].div(one.add(e[k]))
                    .mul(v[k])
                    .store(op.add(i + k * W::LANES));
            }
            i += step;
        }
    }
    gated_row(gate, &g[full..n], &u[full..n], &mut out[full..])
}

#[multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512vl+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn gated_row(gate: Gate, g: &[f32], u: &[f32], out: &mut [f32]) {
    match gate {
        Gate::SwiGlu => {
            for ((o, g), u) in out.iter_mut().zip(g).zip(u) {
                *o = silu(*g) * u;
            }
        }
        Gate::GeGlu => {
            for ((o, g), u) in out.iter_mut().zip(g).zip(u) {
                *o = gelu_tanh(*g) * u;
            }
        }
        Gate::SwiGluOai => {
            for ((o, g), u) in out.iter_mut().zip(g).zip(u) {
                let g = g.min(OAI_LIMIT);
                let u = u.clamp(-OAI_LIMIT, OAI_LIMIT);
                *o = g / (1.0 + super::math::exp(-OAI_ALPHA * g)) * (u + 1.0);
            }
        }
    }
}

/// GELU with the tanh approximation: `x / 2 * (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))`,
/// written as `x * sigmoid(2 t)` so that it needs one exponential.
#[inline(always)]
fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    let t = SQRT_2_OVER_PI * x.mul_add(0.044_715 * x * x, x);
    x / (1.0 + super::math::exp(-2.0 * t))
}

#[cfg(test)]
mod tests {
    use super::super::elementwise::tests::values;
    use super::*;

    /// The clamped SwiGLU beyond its limits: the gate capped at 7, the up value clamped.
    #[test]
    fn swiglu_oai_clamps() {
        let g = [-20.0f32, -1.0, 0.0, 3.0, 7.0, 30.0];
        let u = [30.0f32, -30.0, 2.0, -0.5, 6.9, 8.0];
        let mut out = [0.0f32; 6];
        gated_split(Gate::SwiGluOai, &g, &u, &mut out, 6);
        for i in 0..6 {
            let gc = (g[i] as f64).min(7.0);
            let uc = (u[i] as f64).clamp(-7.0, 7.0);
            let want = gc / (1.0 + (-1.702 * gc).exp()) * (uc + 1.0);
            assert!(
                (out[i] as f64 - want).abs() < 1e-5 * want.abs().max(1.0),
                "{i}"
            );
        }
    }

    /// A kernel of one row of a gated activation: gate, up, out.
    type RowKernel<'a> = &'a dyn Fn(&[f32], &[f32], &mut [f32]);

    #[test]
    fn gated_activations_match_f64() {
        // widths with a tail past the last 16 lanes; values to +-12, past gpt-oss's clamps
        for (rows, ff) in [(33, 100), (3, 7), (2, 64)] {
            let src: Vec<f32> = values(rows * 2 * ff, 4 + ff as u64)
                .iter()
                .map(|v| 12.0 * v)
                .collect();
            for gate in [Gate::SwiGlu, Gate::GeGlu, Gate::SwiGluOai] {
                let mut best = vec![0.0; rows * ff];
                gated(gate, &src, 2 * ff, (0, ff), &mut best, ff);
                // the portable kernel every CPU has, and each vector width of this CPU's
                let row_by_row = |kernel: RowKernel<'_>| {
                    let mut out = vec![0.0; rows * ff];
                    for (r, o) in out.chunks_exact_mut(ff).enumerate() {
                        let row = &src[r * 2 * ff..];
                        kernel(&row[..ff], &row[ff..2 * ff], o);
                    }
                    out
                };
                #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
                let mut paths = vec![
                    ("best", best),
                    ("portable", row_by_row(&|g, u, o| gated_row(gate, g, u, o))),
                ];
                #[cfg(target_arch = "x86_64")]
                for w in crate::ops::wide::Width::available() {
                    let kernel = |g: &[f32], u: &[f32], o: &mut [f32]| match w {
                        // SAFETY: the CPU has the width's features; `g`, `u` as long as `o`.
                        crate::ops::wide::Width::W512 => unsafe { gated_row_512(gate, g, u, o) },
                        // SAFETY: as above.
                        crate::ops::wide::Width::W256 => unsafe { gated_row_256(gate, g, u, o) },
                    };
                    paths.push((
                        if w.lanes() == 16 {
                            "512-bit"
                        } else {
                            "256-bit"
                        },
                        row_by_row(&kernel),
                    ));
                }
                for r in 0..rows {
                    for i in 0..ff {
                        let g = src[r * 2 * ff + i] as f64;
                        let u = src[r * 2 * ff + ff + i] as f64;
                        let want = match gate {
                            Gate::SwiGlu => g / (1.0 + (-g).exp()) * u,
                            Gate::GeGlu => {
                                let t = (2.0 / std::f64::consts::PI).sqrt()
                                    * (g + 0.044715 * g * g * g);
                                0.5 * g * (1.0 + t.tanh()) * u
                            }
                            Gate::SwiGluOai => {
                                let g = g.min(7.0);
                                let u = u.clamp(-7.0, 7.0);
                                g / (1.0 + (-1.702 * g).exp()) * (u + 1.0)
                            }
                        };
                        for (path, got) in &paths {
                            let got = got[r * ff + i] as f64;
                            assert!(
                                (got - want).abs() <= 1e-5 * want.abs().max(1.0),
                                "{gate:?} {path} ({g}, {u}): {got} vs {want}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn gated_split_equals_gated() {
        // enough values for the parallel path
        let (rows, ff) = (70, 1000);
        let src = values(rows * 2 * ff, 7);
        let g: Vec<f32> = src
            .chunks_exact(2 * ff)
            .flat_map(|r| r[..ff].to_vec())
            .collect();
        let u: Vec<f32> = src
            .chunks_exact(2 * ff)
            .flat_map(|r| r[ff..].to_vec())
            .collect();
        for gate in [Gate::SwiGlu, Gate::GeGlu, Gate::SwiGluOai] {
            let mut want = vec![0.0; rows * ff];
            gated(gate, &src, 2 * ff, (0, ff), &mut want, ff);
            let mut got = vec![0.0; rows * ff];
            gated_split(gate, &g, &u, &mut got, ff);
            assert_eq!(got, want, "{gate:?}");
        }
    }
}
