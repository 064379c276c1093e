//! Every kernel of this module against its portable counterpart in `crate::vecdot`, through
//! both the GEMV (one activation row, several weight rows) and the GEMM (one weight row, four
//! activation rows), on random blocks (every quant bit pattern, `-128` activations included)
//! and on extreme blocks.
//!
//! Tolerance: `|simd − scalar| ≤ 1e-5 · (L + tiny)` with `L = Σ_i |w_i|·|a_i|` from the
//! dequantized weights (for the types with a min, scale and min parts counted apart) and
//! activations. A single wrong quant moves the result by about `L / weights`, far above that.

use super::*;
use crate::blocks::IQ4NL_LEVELS;
use crate::cpu::CpuFeatures;
use crate::kernel_api::SetToken;
use crate::quant::dequantize_f64;
use crate::rng::SplitMix64 as Rng;
use crate::types::GgmlType;
use crate::vecdot;
use bytemuck::Pod;

fn avx2() -> Option<Avx2> {
    Avx2::new(CpuFeatures::get())
}

fn scale(rng: &mut Rng) -> f32 {
    let m = 0.001 + 0.049 * rng.unit();
    if rng.next_u64() & 1 == 1 {
        -m
    } else {
        m
    }
}

fn half(rng: &mut Rng) -> F16Bits {
    F16Bits::from_f32(scale(rng))
}

fn random<B: Pod>(rng: &mut Rng) -> B {
    let mut b = B::zeroed();
    for byte in bytemuck::bytes_of_mut(&mut b) {
        *byte = rng.next_u64() as u8;
    }
    b
}

fn random_q8_k(rng: &mut Rng) -> BlockQ8K {
    let mut b: BlockQ8K = random(rng);
    b.d = scale(rng);
    for (s, g) in b.bsums.iter_mut().zip(b.qs.chunks_exact(16)) {
        *s = g.iter().map(|&q| q as i16).sum();
    }
    b
}

fn random_q8_1(rng: &mut Rng) -> BlockQ8_1 {
    let mut b: BlockQ8_1 = random(rng);
    b.d = half(rng);
    let sum: i32 = b.qs.iter().map(|&q| q as i32).sum();
    b.s = F16Bits::from_f32(b.d.to_f32() * sum as f32);
    b
}

/// `Σ |w|·|a|` of one weight row (bytes of `ty`) and one activation row of values.
fn magnitude(ty: GgmlType, w: &[u8], a: &[f64], min_field: Option<usize>) -> f64 {
    let cols = a.len();
    let abs = |bytes: &[u8]| dequantize_f64(ty, bytes, 1, cols).unwrap();
    let parts: Vec<Vec<f64>> = match min_field {
        // Each part with the other scale zeroed, so a cancelling min cannot shrink the bound.
        Some(off) => {
            let zero_at = |at: &[usize]| {
                let mut b = w.to_vec();
                for block in b.chunks_exact_mut(ty.block_bytes()) {
                    for &o in at {
                        block[o..o + 2].fill(0);
                    }
                }
                abs(&b)
            };
            let main = scale_field(ty);
            vec![zero_at(&[off]), zero_at(&[main])]
        }
        None => vec![abs(w)],
    };
    parts
        .iter()
        .map(|p| p.iter().zip(a).map(|(x, y)| (x * y).abs()).sum::<f64>())
        .sum()
}

fn scale_field(ty: GgmlType) -> usize {
    match ty {
        GgmlType::Q2_K => 80,
        _ => 0,
    }
}

fn check(what: &str, got: f32, want: f32, mag: f64) {
    let tol = 1e-5 * (mag + 1e-30);
    let err = (got as f64 - want as f64).abs();
    assert!(
        err <= tol,
        "{what}: {got:e} vs scalar {want:e}, error {err:e} > {tol:e}"
    );
}

/// GEMV over 3 weight rows and GEMM of the first row with 4 activation rows, for rows of each
/// length in `counts`, against `portable`.
#[allow(clippy::too_many_arguments)]
fn compare<W: Pod, A: Pod>(
    name: &str,
    ty: GgmlType,
    kernels: Kernels<W, A, A>,
    portable: fn(&[W], &[A]) -> f32,
    weight: impl Fn(&mut Rng) -> W,
    act: impl Fn(&mut Rng) -> A,
    act_values: impl Fn(&[A]) -> Vec<f64>,
    min_field: Option<usize>,
) {
    let mut rng = Rng::new(17);
    for nb in [1, 2, 3, 5, 16] {
        let w: Vec<W> = (0..3 * nb).map(|_| weight(&mut rng)).collect();
        let a: Vec<A> = (0..4 * nb).map(|_| act(&mut rng)).collect();
        let bytes = |r: usize| bytemuck::cast_slice::<W, u8>(&w[r * nb..(r + 1) * nb]).to_vec();
        let mut out = [f32::NAN; 3];
        (kernels.gemv)(&w, &a[..nb], &mut out);
        let av = act_values(&a[..nb]);
        for (r, &o) in out.iter().enumerate() {
            let want = portable(&w[r * nb..(r + 1) * nb], &a[..nb]);
            let mag = magnitude(ty, &bytes(r), &av, min_field);
            check(&format!("{name} gemv nb={nb} row {r}"), o, want, mag);
        }
        let mut out = [f32::NAN; 4];
        (kernels.gemm)(&w[..nb], &a, &mut out);
        for (m, &o) in out.iter().enumerate() {
            let row = &a[m * nb..(m + 1) * nb];
            let want = portable(&w[..nb], row);
            let mag = magnitude(ty, &bytes(0), &act_values(row), min_field);
            check(&format!("{name} gemm nb={nb} act row {m}"), o, want, mag);
        }
    }
}

fn q8_k_values(a: &[BlockQ8K]) -> Vec<f64> {
    a.iter()
        .flat_map(|b| b.qs.map(|q| b.d as f64 * q as f64))
        .collect()
}

fn q8_1_values(a: &[BlockQ8_1]) -> Vec<f64> {
    a.iter()
        .flat_map(|b| b.qs.map(|q| b.d.to_f32() as f64 * q as f64))
        .collect()
}

#[test]
fn k_types_equal_portable() {
    let Some(cpu) = avx2() else { return };
    compare(
        "q2_K",
        GgmlType::Q2_K,
        q2_k_rows(cpu),
        vecdot::vec_dot_q2_k_q8_k,
        |r| BlockQ2K {
            d: half(r),
            dmin: half(r),
            ..random(r)
        },
        random_q8_k,
        q8_k_values,
        Some(82),
    );
    compare(
        "q3_K",
        GgmlType::Q3_K,
        q3_k_rows(cpu),
        vecdot::vec_dot_q3_k_q8_k,
        |r| BlockQ3K {
            d: half(r),
            ..random(r)
        },
        random_q8_k,
        q8_k_values,
        None,
    );
    compare(
        "iq4_xs",
        GgmlType::IQ4_XS,
        iq4_xs_rows(cpu),
        vecdot::vec_dot_iq4_xs_q8_k,
        |r| BlockIq4Xs {
            d: half(r),
            ..random(r)
        },
        random_q8_k,
        q8_k_values,
        None,
    );
    compare(
        "q8_K",
        GgmlType::Q8_K,
        q8_k_rows(cpu),
        vecdot::vec_dot_q8_k_q8_k,
        random_q8_k,
        random_q8_k,
        q8_k_values,
        None,
    );
}

#[test]
fn q8_1_types_equal_portable() {
    let Some(cpu) = avx2() else { return };
    compare(
        "q4_1",
        GgmlType::Q4_1,
        q4_1_rows(cpu),
        vecdot::vec_dot_q4_1_q8_1,
        |r| BlockQ4_1 {
            d: half(r),
            m: half(r),
            ..random(r)
        },
        random_q8_1,
        q8_1_values,
        Some(2),
    );
    compare(
        "q5_1",
        GgmlType::Q5_1,
        q5_1_rows(cpu),
        vecdot::vec_dot_q5_1_q8_1,
        |r| BlockQ5_1 {
            d: half(r),
            m: half(r),
            ..random(r)
        },
        random_q8_1,
        q8_1_values,
        Some(2),
    );
    compare(
        "q8_1",
        GgmlType::Q8_1,
        q8_1_rows(cpu),
        vecdot::vec_dot_q8_1_q8_1,
        random_q8_1,
        random_q8_1,
        q8_1_values,
        None,
    );
}

/// The largest products every type can make: `-128` activations against the most negative
/// weights, the largest scales.
#[test]
fn extreme_blocks_are_exact() {
    let Some(cpu) = avx2() else { return };
    let one = F16Bits::from_f32(1.0);
    let act = BlockQ8K {
        d: 1.0,
        qs: [-128; 256],
        bsums: [-128 * 16; 16],
    };
    // IQ4_XS: every index 0 (level −127), scale 0 (−32).
    let w = BlockIq4Xs {
        d: one,
        scales_h: [0; 2],
        scales_l: [0; 4],
        qs: [0; 128],
    };
    let want = 256.0 * (-32.0) * (-127.0) * (-128.0);
    let mut out = [0.0f32; 1];
    (iq4_xs_rows(cpu).gemv)(&[w], &[act], &mut out);
    assert_eq!(out[0], want);
    assert_eq!(vecdot::vec_dot_iq4_xs_q8_k(&[w], &[act]), want);
    // Q3_K: every quant −4 (no high bit), every scale −32.
    let w = BlockQ3K {
        hmask: [0; 32],
        qs: [0; 64],
        scales: [0; 12],
        d: one,
    };
    let want = 256.0 * (-32.0) * (-4.0) * (-128.0);
    (q3_k_rows(cpu).gemv)(&[w], &[act], &mut out);
    assert_eq!(out[0], want);
    assert_eq!(vecdot::vec_dot_q3_k_q8_k(&[w], &[act]), want);
    // Q2_K: every quant 3, scale 15, min 15.
    let w = BlockQ2K {
        scales: [0xff; 16],
        qs: [0xff; 64],
        d: one,
        dmin: one,
    };
    let want = 256.0 * 15.0 * 3.0 * (-128.0) - 15.0 * 16.0 * (-128.0 * 16.0);
    (q2_k_rows(cpu).gemv)(&[w], &[act], &mut out);
    assert_eq!(out[0], want);
    assert_eq!(vecdot::vec_dot_q2_k_q8_k(&[w], &[act]), want);
    // Q8_K: −128 · −128 everywhere.
    (q8_k_rows(cpu).gemv)(&[act], &[act], &mut out);
    assert_eq!(out[0], 256.0 * 128.0 * 128.0);
    // Q5_1: every quant 31 against −128.
    let w = BlockQ5_1 {
        d: one,
        m: F16Bits::from_f32(0.0),
        qh: [0xff; 4],
        qs: [0xff; 16],
    };
    let a = BlockQ8_1 {
        d: one,
        s: F16Bits::from_f32(0.0),
        qs: [-128; 32],
    };
    (q5_1_rows(cpu).gemv)(&[w], &[a], &mut out);
    assert_eq!(out[0], 32.0 * 31.0 * -128.0);
    assert_eq!(IQ4NL_LEVELS[0], -127);
}

#[test]
fn half_rows_equal_portable_on_every_length() {
    let Some(cpu) = avx2() else { return };
    let mut rng = Rng::new(5);
    let (f16k, bf16k) = (f16_rows(cpu), bf16_rows(cpu));
    for len in [1, 7, 15, 16, 17, 31, 33, 100, 257, 4095] {
        let x: Vec<f32> = (0..3 * len).map(|_| rng.uniform_pm1()).collect();
        let y: Vec<f32> = (0..8 * len).map(|_| rng.uniform_pm1()).collect();
        let mag = |r: usize, m: usize| -> f64 {
            (0..len)
                .map(|k| (x[r * len + k] * y[m * len + k]).abs() as f64)
                .sum()
        };
        let xh: Vec<F16Bits> = x.iter().map(|&v| F16Bits::from_f32(v)).collect();
        let yh: Vec<F16Bits> = y.iter().map(|&v| F16Bits::from_f32(v)).collect();
        let xb: Vec<Bf16Bits> = x.iter().map(|&v| Bf16Bits::from_f32(v)).collect();
        let yb: Vec<Bf16Bits> = y.iter().map(|&v| Bf16Bits::from_f32(v)).collect();
        let mut out3 = [f32::NAN; 3];
        let mut out4 = [f32::NAN; 4];
        (f16k.gemv)(&xh, &yh[..len], &mut out3);
        for (r, &o) in out3.iter().enumerate() {
            let want = vecdot::vec_dot_f16(&xh[r * len..(r + 1) * len], &yh[..len]);
            check(&format!("f16 gemv len={len} row {r}"), o, want, mag(r, 0));
        }
        (f16k.gemm)(&xh[..len], &yh[..4 * len], &mut out4);
        for (m, &o) in out4.iter().enumerate() {
            let want = vecdot::vec_dot_f16(&xh[..len], &yh[m * len..(m + 1) * len]);
            check(&format!("f16 gemm len={len} act {m}"), o, want, mag(0, m));
        }
        (bf16k.gemv)(&xb, &yb[..len], &mut out3);
        for (r, &o) in out3.iter().enumerate() {
            let want = vecdot::vec_dot_bf16(&xb[r * len..(r + 1) * len], &yb[..len]);
            check(&format!("bf16 gemv len={len} row {r}"), o, want, mag(r, 0));
        }
        (bf16k.gemm)(&xb[..len], &yb[..4 * len], &mut out4);
        for (m, &o) in out4.iter().enumerate() {
            let want = vecdot::vec_dot_bf16(&xb[..len], &yb[m * len..(m + 1) * len]);
            check(&format!("bf16 gemm len={len} act {m}"), o, want, mag(0, m));
        }
        // Two weight rows by two quads.
        let mut wide = [[f32::NAN; 8]; 2];
        let [w0, w1] = &mut wide;
        (f16k.wide.expect("f16 wide GEMM"))(
            [&xh[..len], &xh[len..2 * len]],
            [&yh[..4 * len], &yh[4 * len..]],
            [&mut w0[..], &mut w1[..]],
        );
        for (g, outs) in wide.iter().enumerate() {
            for (m, &o) in outs.iter().enumerate() {
                let want =
                    vecdot::vec_dot_f16(&xh[g * len..(g + 1) * len], &yh[m * len..(m + 1) * len]);
                check(
                    &format!("f16 wide len={len} row {g} act {m}"),
                    o,
                    want,
                    mag(g, m),
                );
            }
        }
        let mut wide = [[f32::NAN; 8]; 2];
        let [w0, w1] = &mut wide;
        (bf16k.wide.expect("bf16 wide GEMM"))(
            [&xb[..len], &xb[len..2 * len]],
            [&yb[..4 * len], &yb[4 * len..]],
            [&mut w0[..], &mut w1[..]],
        );
        for (g, outs) in wide.iter().enumerate() {
            for (m, &o) in outs.iter().enumerate() {
                let want =
                    vecdot::vec_dot_bf16(&xb[g * len..(g + 1) * len], &yb[m * len..(m + 1) * len]);
                check(
                    &format!("bf16 wide len={len} row {g} act {m}"),
                    o,
                    want,
                    mag(g, m),
                );
            }
        }
    }
}
