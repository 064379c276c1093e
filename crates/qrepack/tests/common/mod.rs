//! Shared test helpers: deterministic data, random weight blocks and an f64 reference product.
#![allow(dead_code)]

use qrepack::activation::{
    quantize_block_q8_0, quantize_block_q8_1, quantize_block_q8_k, Bf16Bits,
};
use qrepack::blocks::F16Bits;
use qrepack::quant::dequantize_f64;
use qrepack::GgmlType;

/// splitmix64, the generator the peer benchmark uses.
pub struct SplitMix(pub u64);

impl SplitMix {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    pub fn next_f32(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 * (1.0 / (1u64 << 24) as f32)) * 2.0 - 1.0
    }
    pub fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.next_f32()).collect()
    }
}

/// Byte offsets of the f16 scale fields inside one block of `ty` (for block types).
fn f16_fields(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 | GgmlType::IQ4_NL | GgmlType::IQ4_XS => {
            &[0]
        }
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q8_1 | GgmlType::Q4_K | GgmlType::Q5_K => {
            &[0, 2]
        }
        GgmlType::Q2_K => &[80, 82],
        GgmlType::Q3_K => &[108],
        GgmlType::Q6_K => &[208],
        _ => &[],
    }
}

/// A `rows x cols` matrix of `ty` made of random bytes with sane, random scales: every quant
/// bit pattern occurs, not only those a quantizer would produce.
pub fn random_weights(ty: GgmlType, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let mut rng = SplitMix(seed);
    let n = ty.matrix_bytes(rows, cols).unwrap();
    match ty {
        GgmlType::F32 => {
            return rng
                .vec(rows * cols)
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect()
        }
        GgmlType::F16 => {
            return rng
                .vec(rows * cols)
                .iter()
                .flat_map(|&v| F16Bits::from_f32(v).0)
                .collect()
        }
        GgmlType::BF16 => {
            return rng
                .vec(rows * cols)
                .iter()
                .flat_map(|&v| Bf16Bits::from_f32(v).0)
                .collect()
        }
        _ => {}
    }
    let mut bytes: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
    let bb = ty.block_bytes();
    for block in bytes.chunks_exact_mut(bb) {
        if ty == GgmlType::Q8_K {
            let d = 0.001 + 0.01 * (rng.next_f32() * 0.5 + 0.5);
            block[0..4].copy_from_slice(&d.to_le_bytes());
        }
        for &off in f16_fields(ty) {
            // scales in ±[0.001, 0.05): positive for the main scale keeps the sign mix realistic
            let mag = 0.001 + 0.049 * (rng.next_f32() * 0.5 + 0.5);
            let v = if off == 0 || f16_fields(ty).len() == 1 {
                mag
            } else {
                mag * 0.5
            };
            block[off..off + 2].copy_from_slice(&F16Bits::from_f32(v).0);
        }
    }
    bytes
}

/// The activations exactly as the kernels see them (quantized to `ty`'s vec_dot type), in f64.
pub fn quantized_activations_f64(ty: GgmlType, x: &[f32]) -> Vec<f64> {
    match ty.vec_dot_type() {
        GgmlType::Q8_0 => x
            .chunks_exact(32)
            .flat_map(|c| {
                let b = quantize_block_q8_0(c);
                let d = b.d.to_f32() as f64;
                b.qs.map(|q| d * q as f64)
            })
            .collect(),
        GgmlType::Q8_1 => x
            .chunks_exact(32)
            .flat_map(|c| {
                let b = quantize_block_q8_1(c);
                let d = b.d.to_f32() as f64;
                b.qs.map(|q| d * q as f64)
            })
            .collect(),
        GgmlType::Q8_K => x
            .chunks_exact(256)
            .flat_map(|c| {
                let b = quantize_block_q8_k(c);
                let d = b.d as f64;
                b.qs.map(|q| d * q as f64)
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

/// `y = x W^T` in f64 from the stored integers: `n` rows of `rows` outputs.
pub fn reference_matmul(
    ty: GgmlType,
    w: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    n: usize,
) -> Vec<f64> {
    let wf = dequantize_f64(ty, w, rows, cols).unwrap();
    let mut y = vec![0.0f64; n * rows];
    for t in 0..n {
        let xt = &x[t * cols..(t + 1) * cols];
        let a = quantized_activations_f64(ty, xt);
        for r in 0..rows {
            let mut v: f64 = wf[r * cols..(r + 1) * cols]
                .iter()
                .zip(&a)
                .map(|(w, a)| w * a)
                .sum();
            if matches!(ty, GgmlType::Q4_1 | GgmlType::Q5_1) {
                v += q8_1_sum_correction(ty, w, r, cols, xt);
            }
            y[t * rows + r] = v;
        }
    }
    y
}

/// Asserts `got` matches `want` row by row: max |error| <= `tol` x rms of the reference row.
/// A row shorter than 8 outputs says little about the scale of the results (one output can
/// cancel to almost zero), so those are measured against the rms of all outputs instead.
pub fn assert_close_rows(got: &[f32], want: &[f64], row_len: usize, tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let rms_of = |w: &[f64]| (w.iter().map(|v| v * v).sum::<f64>() / w.len().max(1) as f64).sqrt();
    let overall = rms_of(want);
    for (i, (g, w)) in got.chunks(row_len).zip(want.chunks(row_len)).enumerate() {
        let rms = if row_len >= 8 { rms_of(w) } else { overall }.max(1e-30);
        let err = g
            .iter()
            .zip(w)
            .map(|(a, b)| (*a as f64 - b).abs())
            .fold(0.0, f64::max);
        assert!(
            err <= tol * rms,
            "{what}: row {i}: max error {err:e} > {tol:e} x rms {rms:e}"
        );
    }
}

/// Normalized mean squared error of `got` against `want`.
pub fn nmse(got: &[f32], want: &[f32]) -> f64 {
    let num: f64 = got
        .iter()
        .zip(want)
        .map(|(a, b)| ((*a - *b) as f64).powi(2))
        .sum();
    let den: f64 = want.iter().map(|b| (*b as f64).powi(2)).sum();
    num / den.max(1e-300)
}

/// ggml's Q4_1/Q5_1 dot product applies the weight minimum `m` to the activation sum `s` that
/// Q8_1 stores rounded to f16, not to the exact `d * sum(q)`: the reference does the same.
fn q8_1_sum_correction(ty: GgmlType, w: &[u8], row: usize, cols: usize, x: &[f32]) -> f64 {
    let bb = ty.block_bytes();
    let nb = cols / 32;
    let mut c = 0.0;
    for (b, xs) in x.chunks_exact(32).enumerate() {
        let off = (row * nb + b) * bb;
        let m = F16Bits([w[off + 2], w[off + 3]]).to_f32() as f64;
        let a = quantize_block_q8_1(xs);
        let exact = a.d.to_f32() as f64 * a.qs.iter().map(|&q| q as f64).sum::<f64>();
        c += m * (a.s.to_f32() as f64 - exact);
    }
    c
}
