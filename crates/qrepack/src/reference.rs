//! An f64 reference product built only from the stored integers and scales: independent of the
//! layouts and kernels, it is what tests and `qrepack verify` compare them with.

use crate::activation::{
    quantize_block_q8_0, quantize_block_q8_0_arm, quantize_block_q8_1, quantize_block_q8_k,
    Bf16Bits,
};
use crate::blocks::F16Bits;
use crate::error::Error;
use crate::layout::Layout;
use crate::quant::dequantize_f64;
use crate::types::GgmlType;

/// The activations exactly as the kernels for weight type `ty` see them (quantized to its
/// vec_dot type, ggml x86 style), in f64.
///
/// ```
/// use qrepack::{reference, GgmlType};
/// let a = reference::activations_f64(GgmlType::Q4_0, &[0.5; 32]);
/// assert!((a[0] - 0.5).abs() < 1e-3);
/// ```
pub fn activations_f64(ty: GgmlType, x: &[f32]) -> Vec<f64> {
    activations(ty, x, false)
}

fn activations(ty: GgmlType, x: &[f32], arm: bool) -> Vec<f64> {
    match ty.vec_dot_type() {
        GgmlType::Q8_0 => x
            .chunks_exact(32)
            .flat_map(|c| {
                let b = if arm {
                    quantize_block_q8_0_arm(c)
                } else {
                    quantize_block_q8_0(c)
                };
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

/// ggml's Q4_1/Q5_1 dot product applies the weight minimum to the activation sum that Q8_1
/// stores rounded to f16, not to the exact `d * sum(q)`: the reference does the same.
fn q8_1_sum_correction(ty: GgmlType, row: &[u8], x: &[f32]) -> f64 {
    let bb = ty.block_bytes();
    row.chunks_exact(bb)
        .zip(x.chunks_exact(32))
        .map(|(block, xs)| {
            let m = F16Bits([block[2], block[3]]).to_f32() as f64;
            let a = quantize_block_q8_1(xs);
            let exact = a.d.to_f32() as f64 * a.qs.iter().map(|&q| q as f64).sum::<f64>();
            m * (a.s.to_f32() as f64 - exact)
        })
        .sum()
}

/// `y = x W^T` in f64 for the weight rows `rows_wanted` (all when `None`): `n` activation rows
/// of `cols`, result `n x rows_wanted.len()`.
///
/// ```
/// use qrepack::{quantize, reference, GgmlType};
/// let w: Vec<f32> = (0..4 * 32).map(|i| (i as f32 * 0.1).sin()).collect();
/// let bytes = quantize(GgmlType::Q8_0, &w, 4, 32).unwrap();
/// let y = reference::matmul_f64(GgmlType::Q8_0, &bytes, 4, 32, &[0.25; 32], 1, None).unwrap();
/// assert_eq!(y.len(), 4);
/// ```
pub fn matmul_f64(
    ty: GgmlType,
    w: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    n: usize,
    rows_wanted: Option<&[usize]>,
) -> Result<Vec<f64>, Error> {
    matmul_impl(ty, w, rows, cols, x, n, rows_wanted, false)
}

/// As [`matmul_f64`], with the activations quantized as `layout`'s kernels see them: ggml's
/// ARM rounding for its 4-row ARM layouts ([`Layout::arm_rounding`]), x86 rounding otherwise.
#[allow(clippy::too_many_arguments)]
pub fn matmul_f64_for_layout(
    layout: Layout,
    ty: GgmlType,
    w: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    n: usize,
    rows_wanted: Option<&[usize]>,
) -> Result<Vec<f64>, Error> {
    let arm = layout.weight_type().is_none_or(|t| t == ty) && layout.arm_rounding(ty);
    matmul_impl(ty, w, rows, cols, x, n, rows_wanted, arm)
}

#[allow(clippy::too_many_arguments)]
fn matmul_impl(
    ty: GgmlType,
    w: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    n: usize,
    rows_wanted: Option<&[usize]>,
    arm: bool,
) -> Result<Vec<f64>, Error> {
    let all: Vec<usize>;
    let wanted = match rows_wanted {
        Some(r) => r,
        None => {
            all = (0..rows).collect();
            &all
        }
    };
    let row_bytes = ty.row_bytes(cols)?;
    if Some(x.len()) != n.checked_mul(cols) || Some(w.len()) != row_bytes.checked_mul(rows) {
        return Err(Error::Shape(format!(
            "reference: {rows} x {cols} {ty} with {n} activation rows needs {} weight bytes and {} activations",
            row_bytes.saturating_mul(rows),
            n.saturating_mul(cols)
        )));
    }
    if let Some(&bad) = wanted.iter().find(|&&r| r >= rows) {
        return Err(Error::Invalid(format!(
            "reference: row {bad} out of range 0..{rows}"
        )));
    }
    let mut weights = Vec::with_capacity(wanted.len());
    for &r in wanted {
        weights.push(dequantize_f64(
            ty,
            &w[r * row_bytes..(r + 1) * row_bytes],
            1,
            cols,
        )?);
    }
    let mut y = Vec::with_capacity(n * wanted.len());
    for xt in x.chunks_exact(cols.max(1)).take(n) {
        let a = activations(ty, xt, arm);
        for (&r, wr) in wanted.iter().zip(&weights) {
            let mut v: f64 = wr.iter().zip(&a).map(|(w, a)| w * a).sum();
            if matches!(ty, GgmlType::Q4_1 | GgmlType::Q5_1) {
                v += q8_1_sum_correction(ty, &w[r * row_bytes..(r + 1) * row_bytes], xt);
            }
            y.push(v);
        }
    }
    Ok(y)
}
