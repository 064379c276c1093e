//! Shared test helpers: deterministic data, random weight blocks and an f64 reference product.
#![allow(dead_code)]

use qrepack::activation::Bf16Bits;
use qrepack::blocks::F16Bits;
use qrepack::rng::SplitMix64;
use qrepack::GgmlType;

/// Byte offsets of the f16 scale fields inside one block of `ty` (for block types).
fn f16_fields(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q4_0
        | GgmlType::Q5_0
        | GgmlType::Q8_0
        | GgmlType::IQ4_NL
        | GgmlType::IQ4_XS
        | GgmlType::IQ2_XXS
        | GgmlType::IQ2_XS
        | GgmlType::IQ2_S
        | GgmlType::IQ3_XXS
        | GgmlType::IQ3_S
        | GgmlType::IQ1_S
        | GgmlType::Q1_0
        | GgmlType::Q2_0 => &[0],
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q8_1 | GgmlType::Q4_K | GgmlType::Q5_K => {
            &[0, 2]
        }
        GgmlType::Q2_K => &[80, 82],
        GgmlType::Q3_K => &[108],
        GgmlType::Q6_K => &[208],
        GgmlType::TQ1_0 => &[52],
        GgmlType::TQ2_0 => &[64],
        _ => &[],
    }
}

/// A `rows x cols` matrix of `ty` made of random bytes with sane, random scales: every quant
/// bit pattern occurs, not only those a quantizer would produce.
pub fn random_weights(ty: GgmlType, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let mut rng = SplitMix64::new(seed);
    let n = ty.matrix_bytes(rows, cols).unwrap();
    match ty {
        GgmlType::F32 => {
            return rng
                .pm1_vec(rows * cols)
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect()
        }
        GgmlType::F16 => {
            return rng
                .pm1_vec(rows * cols)
                .iter()
                .flat_map(|&v| F16Bits::from_f32(v).0)
                .collect()
        }
        GgmlType::BF16 => {
            return rng
                .pm1_vec(rows * cols)
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
            let d = 0.001 + 0.01 * (rng.uniform_pm1() * 0.5 + 0.5);
            block[0..4].copy_from_slice(&d.to_le_bytes());
        }
        if ty == GgmlType::MXFP4 {
            // exponents 2^-10 .. 2^-3: every code, finite products
            block[0] = 118 + (rng.next_u64() % 8) as u8;
        }
        if ty == GgmlType::IQ1_M {
            // the block scale lives in the top nibbles of the four scale words (bytes 48..56)
            let mag = 0.001 + 0.049 * (rng.uniform_pm1() * 0.5 + 0.5);
            let bits = u16::from_le_bytes(F16Bits::from_f32(mag).0);
            for w in 0..4 {
                let hi = &mut block[48 + 2 * w + 1];
                *hi = (*hi & 0x0f) | ((((bits >> (4 * w)) & 0x0f) as u8) << 4);
            }
        }
        for &off in f16_fields(ty) {
            // scales in ±[0.001, 0.05): positive for the main scale keeps the sign mix realistic
            let mag = 0.001 + 0.049 * (rng.uniform_pm1() * 0.5 + 0.5);
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

/// `y = x W^T` in f64 from the stored integers: `n` rows of `rows` outputs.
pub fn reference_matmul(
    ty: GgmlType,
    w: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    n: usize,
) -> Vec<f64> {
    qrepack::reference::matmul_f64(ty, w, rows, cols, x, n, None).unwrap()
}

/// As [`reference_matmul`], with the activations rounded as `layout`'s kernels round them.
#[allow(dead_code)]
pub fn reference_matmul_for(
    layout: qrepack::Layout,
    ty: GgmlType,
    w: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    n: usize,
) -> Vec<f64> {
    qrepack::reference::matmul_f64_for_layout(layout, ty, w, rows, cols, x, n, None).unwrap()
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
