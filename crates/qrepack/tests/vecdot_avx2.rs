//! End-to-end check of the plain layout's SIMD dot products: the same matrix built for this CPU
//! (`CpuFeatures::get()`, AVX2 kernels where wired in) and for the portable kernels
//! (`CpuFeatures::scalar()`) must give the same products up to `f32` summation order.
//!
//! Tolerance per output: `1e-5 · (L + tiny)` with `L = Σ_i |w_i|·|a_i|` over the row, where for
//! Q4_K/Q5_K the scale part `|d·sc·q|` and the min part `|dmin·m|` of each weight are counted
//! separately (so a cancelling min term cannot shrink the bound). A single wrong quant moves an
//! output by about `L / cols`, i.e. hundreds of times the tolerance at these shapes.
//!
//! Before the AVX2 kernels are wired into the plain layout both builds run the same scalar code
//! and the test passes trivially.

use qrepack::activation::{quantize_block_q8_0, quantize_block_q8_k, Bf16Bits};
use qrepack::blocks::F16Bits;
use qrepack::cpu::CpuFeatures;
use qrepack::quant::dequantize_f64;
use qrepack::rng::SplitMix64;
use qrepack::{GgmlType, Layout, QMatrix};

/// `qrepack::rng::SplitMix64` with the draws these tests need.
struct Rng(SplitMix64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }
    /// Uniform in [-1, 1).
    fn signed(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// The types with AVX2 plain-path kernels.
const TYPES: &[GgmlType] = &[
    GgmlType::Q4_0,
    GgmlType::Q5_0,
    GgmlType::Q8_0,
    GgmlType::IQ4_NL,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::F16,
    GgmlType::F32,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::IQ4_XS,
    GgmlType::Q8_K,
    GgmlType::Q4_1,
    GgmlType::Q5_1,
    GgmlType::Q8_1,
    GgmlType::BF16,
];

/// Byte offsets of the f16 scales in one block: `(main scale, min scale)`.
fn scale_offsets(ty: GgmlType) -> (usize, Option<usize>) {
    match ty {
        GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q4_1 | GgmlType::Q5_1 => (0, Some(2)),
        GgmlType::Q6_K => (208, None),
        GgmlType::Q2_K => (80, Some(82)),
        GgmlType::Q3_K => (108, None),
        _ => (0, None),
    }
}

/// Random bytes (every quant pattern) with sane f16 scales, or random floats.
fn random_weights(ty: GgmlType, rows: usize, cols: usize, rng: &mut Rng) -> Vec<u8> {
    match ty {
        GgmlType::F32 => {
            return (0..rows * cols)
                .flat_map(|_| rng.signed().to_le_bytes())
                .collect()
        }
        GgmlType::F16 => {
            return (0..rows * cols)
                .flat_map(|_| F16Bits::from_f32(rng.signed()).0)
                .collect()
        }
        GgmlType::BF16 => {
            return (0..rows * cols)
                .flat_map(|_| Bf16Bits::from_f32(rng.signed()).0)
                .collect()
        }
        GgmlType::Q8_K => {
            // Random quants (every byte value) under an f32 scale.
            let n = ty.matrix_bytes(rows, cols).unwrap();
            let mut bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            for block in bytes.chunks_exact_mut(ty.block_bytes()) {
                let d = 0.001 + 0.049 * (0.5 * rng.signed() + 0.5);
                block[..4].copy_from_slice(&d.to_le_bytes());
            }
            return bytes;
        }
        _ => {}
    }
    let n = ty.matrix_bytes(rows, cols).unwrap();
    let mut bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
    let (d, dmin) = scale_offsets(ty);
    for block in bytes.chunks_exact_mut(ty.block_bytes()) {
        for off in std::iter::once(d).chain(dmin) {
            let v = 0.001 + 0.049 * (0.5 * rng.signed() + 0.5);
            let v = if rng.next() & 1 == 1 { -v } else { v };
            block[off..off + 2].copy_from_slice(&F16Bits::from_f32(v).0);
        }
    }
    bytes
}

/// The activations as the kernels see them.
fn activations(ty: GgmlType, x: &[f32]) -> Vec<f64> {
    match ty.vec_dot_type() {
        GgmlType::Q8_0 => x
            .chunks_exact(32)
            .flat_map(|c| {
                let b = quantize_block_q8_0(c);
                b.qs.map(|q| b.d.to_f32() as f64 * q as f64)
            })
            .collect(),
        GgmlType::Q8_K => x
            .chunks_exact(256)
            .flat_map(|c| {
                let b = quantize_block_q8_k(c);
                b.qs.map(|q| b.d as f64 * q as f64)
            })
            .collect(),
        GgmlType::F16 => x
            .iter()
            .map(|&v| F16Bits::from_f32(v).to_f32() as f64)
            .collect(),
        GgmlType::BF16 => x
            .iter()
            .map(|&v| Bf16Bits::from_f32(v).to_f32() as f64)
            .collect(),
        _ => x.iter().map(|&v| v as f64).collect(),
    }
}

/// `|w|` of every weight, with both parts of Q4_K/Q5_K weights counted.
fn weight_magnitudes(ty: GgmlType, w: &[u8], rows: usize, cols: usize) -> Vec<f64> {
    let abs = |bytes: &[u8]| -> Vec<f64> {
        let v = dequantize_f64(ty, bytes, rows, cols).unwrap();
        v.iter().map(|x| x.abs()).collect()
    };
    match scale_offsets(ty) {
        (d, Some(dmin)) => {
            let zeroed = |off: usize| -> Vec<u8> {
                let mut b = w.to_vec();
                for block in b.chunks_exact_mut(ty.block_bytes()) {
                    block[off..off + 2].copy_from_slice(&[0, 0]);
                }
                b
            };
            let (a, b) = (abs(&zeroed(dmin)), abs(&zeroed(d)));
            a.iter().zip(&b).map(|(x, y)| x + y).collect()
        }
        _ => abs(w),
    }
}

#[test]
fn plain_layout_simd_equals_scalar() {
    let fast_cpu = CpuFeatures::get();
    let slow_cpu = CpuFeatures::scalar();
    let mut rng = Rng(SplitMix64::new(2024));
    for &ty in TYPES {
        for cols in [256, 4096] {
            let rows = 6;
            let w = random_weights(ty, rows, cols, &mut rng);
            let wabs = weight_magnitudes(ty, &w, rows, cols);
            let build = |cpu| QMatrix::with_layout_for_cpu(ty, rows, cols, &w, Layout::Plain, cpu);
            let fast = build(fast_cpu).unwrap();
            let slow = build(&slow_cpu).unwrap();
            assert_eq!(fast.layout(), Layout::Plain);
            // n = 1 goes through the GEMV path, 4 and 5 through GEMM (+ GEMV for the last row).
            for n in [1, 4, 5] {
                let x: Vec<f32> = (0..n * cols).map(|_| rng.signed()).collect();
                let mut got = vec![f32::NAN; n * rows];
                let mut want = vec![f32::NAN; n * rows];
                fast.matmul(&x, n, &mut got).unwrap();
                slow.matmul(&x, n, &mut want).unwrap();
                for t in 0..n {
                    let a = activations(ty, &x[t * cols..(t + 1) * cols]);
                    for r in 0..rows {
                        let wr = &wabs[r * cols..(r + 1) * cols];
                        let l: f64 = wr.iter().zip(&a).map(|(w, a)| w * a.abs()).sum();
                        let tol = 1e-5 * (l + 1e-30);
                        let (g, s) = (got[t * rows + r], want[t * rows + r]);
                        let err = (g as f64 - s as f64).abs();
                        assert!(
                            err <= tol,
                            "{ty} cols={cols} n={n} row {r} (kernels {}): {g:e} vs scalar \
                             {s:e}, error {err:e} > {tol:e}",
                            fast.kernel_name()
                        );
                    }
                }
            }
        }
    }
}
