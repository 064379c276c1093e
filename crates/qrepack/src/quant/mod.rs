//! Weight quantization and dequantization, bit-compatible with ggml's reference routines.
//!
//! * [`quantize`] reproduces the bytes of ggml's `ggml_quantize_chunk` without an importance
//!   matrix (the `quantize_row_*_ref` routines, for IQ4_NL / IQ4_XS the `ntry = 7` search
//!   that `ggml_quantize_chunk` uses, and for IQ3_XXS / IQ3_S / IQ2_S the grid searches with
//!   weights derived from the values), as compiled without floating-point contraction.
//! * [`quantize_with_importance`] reproduces them given an importance matrix, for the grid
//!   types (IQ1_S, IQ1_M, IQ2_XXS and IQ2_XS need one), IQ4_NL, IQ4_XS and the types that
//!   ignore it.
//! * [`dequantize`] reproduces ggml's `dequantize_row_*` in f32, operation for operation.
//! * [`dequantize_f64`] computes the same values exactly (in f64) from the stored integers and
//!   scales; it is meant as an independent reference for tests.
//!
//! Both dequantizers share one generic decoder per block type, instantiated for `f32` and `f64`.

// The block formats, one file per family: each holds the decoders (`dq_*`, generic over
// `Real`) and the quantizers (`q_*`) of its types; the shared helpers and the public entry
// points are here.
pub(crate) mod grid;
mod grid_quant;
mod grid_search;
pub mod grids;
mod iq;
mod iq1_quant;
mod kquants;
mod legacy;
pub(crate) mod lowbit;
mod lowbit_quant;

use grid::{dq_iq1_m, dq_iq1_s, dq_iq2_s, dq_iq2_xs, dq_iq2_xxs, dq_iq3_s, dq_iq3_xxs};
use grid_quant::{q_iq2_s, q_iq2_xs, q_iq2_xxs, q_iq3_s, q_iq3_xxs};
use iq::{dq_iq4_nl, dq_iq4_xs, q_iq4_nl, q_iq4_xs};
use iq1_quant::{q_iq1_m, q_iq1_s};
use kquants::{
    dq_q2_k, dq_q3_k, dq_q4_k, dq_q5_k, dq_q6_k, dq_q8_k, q_q2_k, q_q3_k, q_q4_k, q_q5_k, q_q6_k,
    q_q8_k,
};
use legacy::{
    dq_q4_0, dq_q4_1, dq_q5_0, dq_q5_1, dq_q8_0, dq_q8_1, q_q4_0, q_q4_1, q_q5_0, q_q5_1, q_q8_0,
    q_q8_1,
};
use lowbit::{dq_mxfp4, dq_nvfp4, dq_q1_0, dq_q2_0, dq_tq1_0, dq_tq2_0};
use lowbit_quant::{q_mxfp4, q_nvfp4, q_q1_0, q_q2_0, q_tq1_0, q_tq2_0};

use std::borrow::Cow;
use std::ops::{Add, Mul, Sub};

use bytemuck::Pod;

use crate::activation::Bf16Bits;
use crate::blocks::{collect_blocks, view_blocks, F16Bits};
use crate::error::Error;
use crate::types::{GgmlType, QK_K};

// ------------------------------------------------------------------------------------------------
// Shape checks
// ------------------------------------------------------------------------------------------------

/// Number of values in a `rows` x `cols` matrix, checking for overflow.
fn element_count(ty: GgmlType, rows: usize, cols: usize) -> Result<usize, Error> {
    rows.checked_mul(cols)
        .ok_or_else(|| Error::Shape(format!("{rows} x {cols} {} overflows usize", ty.name())))
}

/// Checks that `bytes` holds exactly a `rows` x `cols` matrix of `ty`; returns the value count.
fn check_bytes(ty: GgmlType, bytes: &[u8], rows: usize, cols: usize) -> Result<usize, Error> {
    let want = ty.matrix_bytes(rows, cols)?;
    if bytes.len() != want {
        return Err(Error::Shape(format!(
            "a {rows} x {cols} {} matrix takes {want} bytes, got {}",
            ty.name(),
            bytes.len()
        )));
    }
    element_count(ty, rows, cols)
}

/// Reads `bytes` as blocks, borrowing when the alignment allows it and copying otherwise.
fn load_blocks<B: Pod>(bytes: &[u8]) -> Result<Cow<'_, [B]>, Error> {
    match view_blocks::<B>(bytes) {
        Ok(blocks) => Ok(Cow::Borrowed(blocks)),
        Err(_) => Ok(Cow::Owned(collect_blocks::<B>(bytes)?)),
    }
}

// ------------------------------------------------------------------------------------------------
// Dequantization, generic over the arithmetic
// ------------------------------------------------------------------------------------------------

/// The arithmetic a dequantizer runs in: `f32` reproduces ggml's rounding step by step, `f64`
/// computes the stored value exactly (every product of an f16 scale and the small integers of a
/// block fits in 53 bits, so only the final subtraction, if any, rounds).
trait Real: Copy + Default + Add<Output = Self> + Sub<Output = Self> + Mul<Output = Self> {
    fn of_f32(v: f32) -> Self;
    fn of_int(v: i32) -> Self;
    fn of_f16(h: F16Bits) -> Self {
        Self::of_f32(h.to_f32())
    }
}

impl Real for f32 {
    #[inline]
    fn of_f32(v: f32) -> Self {
        v
    }
    #[inline]
    fn of_int(v: i32) -> Self {
        // Exact: the integers of a block are far below 2^24.
        v as f32
    }
}

impl Real for f64 {
    #[inline]
    fn of_f32(v: f32) -> Self {
        f64::from(v)
    }
    #[inline]
    fn of_int(v: i32) -> Self {
        f64::from(v)
    }
}

/// Decodes every block of `bytes` into consecutive `block_size`-value chunks of `out`.
fn decode_blocks<B: Pod, R: Real>(
    bytes: &[u8],
    out: &mut [R],
    block_size: usize,
    decode: fn(&B, &mut [R]),
) -> Result<(), Error> {
    let blocks = load_blocks::<B>(bytes)?;
    if blocks.len() * block_size != out.len() {
        return Err(Error::Shape(format!(
            "{} blocks do not hold {} values",
            blocks.len(),
            out.len()
        )));
    }
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(block_size)) {
        decode(b, y);
    }
    Ok(())
}

/// The 4-bit quant of weight `j` (0..32) of a 32-weight block packed as in Q4_0/Q4_1/IQ4_NL.
#[inline]
fn nibble(qs: &[u8], j: usize) -> u8 {
    if j < 16 {
        qs[j] & 0x0f
    } else {
        qs[j - 16] >> 4
    }
}

fn dequantize_as<R: Real>(
    ty: GgmlType,
    bytes: &[u8],
    rows: usize,
    cols: usize,
) -> Result<Vec<R>, Error> {
    let n = check_bytes(ty, bytes, rows, cols)?;
    let mut out = vec![R::default(); n];
    let y = &mut out[..];
    match ty {
        GgmlType::F32 => {
            for (v, c) in y.iter_mut().zip(bytes.chunks_exact(4)) {
                *v = R::of_f32(f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
            }
        }
        GgmlType::F16 => {
            for (v, c) in y.iter_mut().zip(bytes.chunks_exact(2)) {
                *v = R::of_f16(F16Bits([c[0], c[1]]));
            }
        }
        GgmlType::BF16 => {
            for (v, c) in y.iter_mut().zip(bytes.chunks_exact(2)) {
                *v = R::of_f32(Bf16Bits([c[0], c[1]]).to_f32());
            }
        }
        GgmlType::Q4_0 => decode_blocks(bytes, y, 32, dq_q4_0::<R>)?,
        GgmlType::Q4_1 => decode_blocks(bytes, y, 32, dq_q4_1::<R>)?,
        GgmlType::Q5_0 => decode_blocks(bytes, y, 32, dq_q5_0::<R>)?,
        GgmlType::Q5_1 => decode_blocks(bytes, y, 32, dq_q5_1::<R>)?,
        GgmlType::Q8_0 => decode_blocks(bytes, y, 32, dq_q8_0::<R>)?,
        GgmlType::Q8_1 => decode_blocks(bytes, y, 32, dq_q8_1::<R>)?,
        GgmlType::Q2_K => decode_blocks(bytes, y, QK_K, dq_q2_k::<R>)?,
        GgmlType::Q3_K => decode_blocks(bytes, y, QK_K, dq_q3_k::<R>)?,
        GgmlType::Q4_K => decode_blocks(bytes, y, QK_K, dq_q4_k::<R>)?,
        GgmlType::Q5_K => decode_blocks(bytes, y, QK_K, dq_q5_k::<R>)?,
        GgmlType::Q6_K => decode_blocks(bytes, y, QK_K, dq_q6_k::<R>)?,
        GgmlType::Q8_K => decode_blocks(bytes, y, QK_K, dq_q8_k::<R>)?,
        GgmlType::IQ4_NL => decode_blocks(bytes, y, 32, dq_iq4_nl::<R>)?,
        GgmlType::IQ4_XS => decode_blocks(bytes, y, QK_K, dq_iq4_xs::<R>)?,
        GgmlType::IQ2_XXS => decode_blocks(bytes, y, QK_K, dq_iq2_xxs::<R>)?,
        GgmlType::IQ2_XS => decode_blocks(bytes, y, QK_K, dq_iq2_xs::<R>)?,
        GgmlType::IQ2_S => decode_blocks(bytes, y, QK_K, dq_iq2_s::<R>)?,
        GgmlType::IQ3_XXS => decode_blocks(bytes, y, QK_K, dq_iq3_xxs::<R>)?,
        GgmlType::IQ3_S => decode_blocks(bytes, y, QK_K, dq_iq3_s::<R>)?,
        GgmlType::IQ1_S => decode_blocks(bytes, y, QK_K, dq_iq1_s::<R>)?,
        GgmlType::IQ1_M => decode_blocks(bytes, y, QK_K, dq_iq1_m::<R>)?,
        GgmlType::TQ1_0 => decode_blocks(bytes, y, QK_K, dq_tq1_0::<R>)?,
        GgmlType::TQ2_0 => decode_blocks(bytes, y, QK_K, dq_tq2_0::<R>)?,
        GgmlType::MXFP4 => decode_blocks(bytes, y, 32, dq_mxfp4::<R>)?,
        GgmlType::NVFP4 => decode_blocks(bytes, y, 64, dq_nvfp4::<R>)?,
        GgmlType::Q1_0 => decode_blocks(bytes, y, 128, dq_q1_0::<R>)?,
        GgmlType::Q2_0 => decode_blocks(bytes, y, 64, dq_q2_0::<R>)?,
    }
    Ok(out)
}

/// Dequantizes a `rows` x `cols` matrix of `ty` (ggml row layout) to f32, with the arithmetic of
/// ggml's `dequantize_row_*` (so the results are bit-identical to ggml's).
///
/// Works for every [`GgmlType`]; fails when `bytes` is not exactly
/// [`GgmlType::matrix_bytes`]`(rows, cols)` long or `cols` is not a whole number of blocks.
///
/// ```
/// use qrepack::{dequantize, GgmlType};
/// // one Q8_0 block: scale 0.5 (f16 0x3800), quants 0, 1, 2, ...
/// let mut bytes = vec![0x00, 0x38];
/// bytes.extend((0..32).map(|q| q as u8));
/// let x = dequantize(GgmlType::Q8_0, &bytes, 1, 32).unwrap();
/// assert_eq!(x[3], 1.5);
/// assert!(dequantize(GgmlType::Q8_0, &bytes[..33], 1, 32).is_err());
/// ```
pub fn dequantize(ty: GgmlType, bytes: &[u8], rows: usize, cols: usize) -> Result<Vec<f32>, Error> {
    dequantize_as::<f32>(ty, bytes, rows, cols)
}

/// Like [`dequantize`], but computes every value in f64 from the stored integers and scales
/// (for Q4_K, `d * sc * q - dmin * m`), so the result is exact up to one final rounding.
///
/// Meant as an independent reference: it shares the bit decoding with [`dequantize`] but none of
/// ggml's f32 rounding steps.
///
/// ```
/// use qrepack::{quant::dequantize_f64, quantize, GgmlType};
/// let x: Vec<f32> = (0..256).map(|i| (i as f32 - 128.0) / 64.0).collect();
/// let q = quantize(GgmlType::Q4_K, &x, 1, 256).unwrap();
/// let exact = dequantize_f64(GgmlType::Q4_K, &q, 1, 256).unwrap();
/// let approx = qrepack::dequantize(GgmlType::Q4_K, &q, 1, 256).unwrap();
/// for (a, b) in exact.iter().zip(&approx) {
///     assert!((a - f64::from(*b)).abs() < 1e-6);
/// }
/// ```
pub fn dequantize_f64(
    ty: GgmlType,
    bytes: &[u8],
    rows: usize,
    cols: usize,
) -> Result<Vec<f64>, Error> {
    dequantize_as::<f64>(ty, bytes, rows, cols)
}

// ------------------------------------------------------------------------------------------------
// Quantization
// ------------------------------------------------------------------------------------------------

/// Groups whose largest magnitude is below this are treated as all zero (ggml's `GROUP_MAX_EPS`).
const GROUP_MAX_EPS: f32 = 1e-15;

/// Round to nearest, ties to even, by adding 1.5 * 2^23 and reading the mantissa: valid for
/// `|v| <= 2^22 - 1`, which every caller guarantees for finite input (other inputs give some
/// integer, never a panic).
#[inline]
fn nearest_int(v: f32) -> i32 {
    let bits = (v + 12_582_912.0_f32).to_bits() as i32;
    (bits & 0x007f_ffff) - 0x0040_0000
}

/// Largest magnitude of `x` and the signed value that has it (the first one on ties).
fn signed_absmax(x: &[f32]) -> (f32, f32) {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    (amax, max)
}

/// Quantizes consecutive `block_size`-value chunks of `x` with `f`, appending the block bytes.
fn encode_blocks<B: Pod>(x: &[f32], block_size: usize, out: &mut Vec<u8>, f: fn(&[f32]) -> B) {
    for chunk in x.chunks_exact(block_size) {
        out.extend_from_slice(bytemuck::bytes_of(&f(chunk)));
    }
}

/// Quantizes a row-major `rows` x `cols` f32 matrix to `ty` in ggml's row layout, producing the
/// same bytes as ggml's `ggml_quantize_chunk` without an importance matrix (the reference
/// quantizers `quantize_row_*_ref`; for IQ4_NL and IQ4_XS the `ntry = 7` scale search), as ggml
/// computes them without floating-point contraction.
///
/// Supports every [`GgmlType`] for which [`GgmlType::is_quantizable`] holds: F32, F16, BF16,
/// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, the ternary types
/// TQ1_0 and TQ2_0, the FP4 types MXFP4 and NVFP4, Q1_0, Q2_0, and the activation types Q8_1
/// and Q8_K (`quantize_row_q8_1_ref`, `quantize_row_q8_K_ref`; an all-zero Q8_K block gets zero
/// `bsums`), and the grid types IQ3_XXS, IQ3_S and IQ2_S (ggml's searches without an importance
/// matrix). IQ1_S, IQ1_M, IQ2_XXS and IQ2_XS give [`Error::Unsupported`]: ggml quantizes them
/// only with an importance matrix (see [`quantize_with_importance`]).
///
/// Fails when `x.len() != rows * cols`, when `cols` is not a whole number of blocks, or when the
/// sizes overflow.
///
/// ```
/// use qrepack::{dequantize, quantize, GgmlType};
/// let x: Vec<f32> = (0..64).map(|i| (i as f32 - 32.0) / 8.0).collect();
/// let q = quantize(GgmlType::Q8_0, &x, 2, 32).unwrap();
/// assert_eq!(q.len(), 2 * 34);
/// let y = dequantize(GgmlType::Q8_0, &q, 2, 32).unwrap();
/// assert!(x.iter().zip(&y).all(|(a, b)| (a - b).abs() < 0.02));
/// assert!(quantize(GgmlType::Q8_0, &x, 1, 64).is_ok());
/// assert!(quantize(GgmlType::Q8_0, &x, 4, 16).is_err()); // partial block
/// assert!(quantize(GgmlType::Q8_0, &x[1..], 2, 32).is_err()); // wrong length
/// ```
pub fn quantize(ty: GgmlType, x: &[f32], rows: usize, cols: usize) -> Result<Vec<u8>, Error> {
    let nbytes = check_input(ty, x, rows, cols)?;
    let mut out = Vec::with_capacity(nbytes);
    match ty {
        GgmlType::F32 => x
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        GgmlType::F16 => x
            .iter()
            .for_each(|&v| out.extend_from_slice(&F16Bits::from_f32(v).0)),
        GgmlType::BF16 => x
            .iter()
            .for_each(|&v| out.extend_from_slice(&Bf16Bits::from_f32(v).0)),
        GgmlType::Q4_0 => encode_blocks(x, 32, &mut out, q_q4_0),
        GgmlType::Q4_1 => encode_blocks(x, 32, &mut out, q_q4_1),
        GgmlType::Q5_0 => encode_blocks(x, 32, &mut out, q_q5_0),
        GgmlType::Q5_1 => encode_blocks(x, 32, &mut out, q_q5_1),
        GgmlType::Q8_0 => encode_blocks(x, 32, &mut out, q_q8_0),
        GgmlType::Q8_1 => encode_blocks(x, 32, &mut out, q_q8_1),
        GgmlType::Q2_K => encode_blocks(x, QK_K, &mut out, q_q2_k),
        GgmlType::Q3_K => encode_blocks(x, QK_K, &mut out, q_q3_k),
        GgmlType::Q4_K => encode_blocks(x, QK_K, &mut out, q_q4_k),
        GgmlType::Q5_K => encode_blocks(x, QK_K, &mut out, q_q5_k),
        GgmlType::Q6_K => encode_blocks(x, QK_K, &mut out, q_q6_k),
        GgmlType::Q8_K => encode_blocks(x, QK_K, &mut out, q_q8_k),
        GgmlType::IQ4_NL => encode_blocks(x, 32, &mut out, |b| q_iq4_nl(b, None)),
        GgmlType::IQ4_XS => encode_blocks(x, QK_K, &mut out, |b| q_iq4_xs(b, None)),
        GgmlType::MXFP4 => encode_blocks(x, 32, &mut out, q_mxfp4),
        GgmlType::TQ2_0 => encode_blocks(x, QK_K, &mut out, q_tq2_0),
        GgmlType::TQ1_0 => encode_blocks(x, QK_K, &mut out, q_tq1_0),
        GgmlType::NVFP4 => encode_blocks(x, 64, &mut out, q_nvfp4),
        GgmlType::Q1_0 => encode_blocks(x, 128, &mut out, q_q1_0),
        GgmlType::Q2_0 => encode_blocks(x, 64, &mut out, q_q2_0),
        GgmlType::IQ2_XXS | GgmlType::IQ2_XS | GgmlType::IQ1_S | GgmlType::IQ1_M => {
            return Err(Error::Unsupported(format!(
                "{ty} weights need an importance matrix to be quantized (ggml's {ty} quantizer \
                 requires one): use `quantize_with_importance`"
            )))
        }
        GgmlType::IQ3_XXS => encode_blocks(x, QK_K, &mut out, |b| q_iq3_xxs(b, None)),
        GgmlType::IQ3_S => encode_blocks(x, QK_K, &mut out, |b| q_iq3_s(b, None)),
        GgmlType::IQ2_S => encode_blocks(x, QK_K, &mut out, |b| q_iq2_s(b, None)),
    }
    checked_output(ty, out, nbytes)
}

/// Checks that `x` holds a `rows` x `cols` matrix for `ty`; returns the size of its quantized
/// form.
fn check_input(ty: GgmlType, x: &[f32], rows: usize, cols: usize) -> Result<usize, Error> {
    let n = element_count(ty, rows, cols)?;
    let nbytes = ty.matrix_bytes(rows, cols)?;
    if x.len() != n {
        return Err(Error::Shape(format!(
            "a {rows} x {cols} matrix has {n} values, got {}",
            x.len()
        )));
    }
    Ok(nbytes)
}

/// `out`, once its length is checked against the `nbytes` a quantizer of `ty` must produce.
fn checked_output(ty: GgmlType, out: Vec<u8>, nbytes: usize) -> Result<Vec<u8>, Error> {
    if out.len() != nbytes {
        return Err(Error::Invalid(format!(
            "internal: {ty} produced {} bytes instead of {nbytes}",
            out.len()
        )));
    }
    Ok(out)
}

/// Quantizes every row of `x` (rows of `importance.len()` values) in `block_size`-value blocks
/// with `f`, which gets each block's slice of the importance.
fn encode_weighted<B: Pod>(
    x: &[f32],
    importance: &[f32],
    block_size: usize,
    out: &mut Vec<u8>,
    f: fn(&[f32], &[f32]) -> B,
) {
    if importance.is_empty() {
        // no columns: no values
        return;
    }
    for row in x.chunks_exact(importance.len()) {
        for (xb, qw) in row
            .chunks_exact(block_size)
            .zip(importance.chunks_exact(block_size))
        {
            out.extend_from_slice(bytemuck::bytes_of(&f(xb, qw)));
        }
    }
}

/// Quantizes a row-major `rows` x `cols` f32 matrix to `ty` like [`quantize`], but with an
/// importance matrix: `importance` holds one non-negative weight per column (ggml's
/// `quant_weights`, as `llama-imatrix` computes them: the mean square of the activations each
/// column meets), and the result is the bytes of ggml's `ggml_quantize_chunk` given the same
/// weights, as compiled without floating-point contraction.
///
/// * IQ2_XXS, IQ2_XS, IQ1_S and IQ1_M, which ggml quantizes only this way, and IQ3_XXS, IQ3_S
///   and IQ2_S use the importance in their grid searches, IQ4_NL and IQ4_XS in their scale
///   searches.
/// * F32, F16, BF16, Q8_0, MXFP4, NVFP4, TQ1_0 and TQ2_0 (whose ggml quantizers ignore the
///   importance) and the activation types Q8_1 and Q8_K give the bytes of [`quantize`].
/// * The other types (Q4_0, Q4_1, Q5_0, Q5_1, the K-quants, Q1_0, Q2_0), whose
///   ggml quantizers change with an importance matrix, give [`Error::Unsupported`].
///
/// Fails like [`quantize`] on shapes, and when `importance.len() != cols`.
///
/// ```
/// use qrepack::{dequantize, quantize, quantize_with_importance, GgmlType};
/// let (rows, cols) = (2, 512);
/// let x: Vec<f32> = (0..rows * cols).map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0).collect();
/// // columns 0..256 matter four times as much as the others
/// let importance: Vec<f32> = (0..cols).map(|c| if c < 256 { 4.0 } else { 1.0 }).collect();
/// let q = quantize_with_importance(GgmlType::IQ2_XXS, &x, rows, cols, &importance).unwrap();
/// assert_eq!(q.len(), GgmlType::IQ2_XXS.matrix_bytes(rows, cols).unwrap());
/// let y = dequantize(GgmlType::IQ2_XXS, &q, rows, cols).unwrap();
/// let err: f32 = x.iter().zip(&y).map(|(a, b)| (a - b) * (a - b)).sum();
/// let norm: f32 = x.iter().map(|a| a * a).sum();
/// assert!(err < 0.5 * norm);
/// // plain `quantize` refuses IQ2_XXS; one importance value per column is required
/// assert!(quantize(GgmlType::IQ2_XXS, &x, rows, cols).is_err());
/// assert!(quantize_with_importance(GgmlType::IQ2_XXS, &x, rows, cols, &importance[1..]).is_err());
/// ```
pub fn quantize_with_importance(
    ty: GgmlType,
    x: &[f32],
    rows: usize,
    cols: usize,
    importance: &[f32],
) -> Result<Vec<u8>, Error> {
    let nbytes = check_input(ty, x, rows, cols)?;
    if importance.len() != cols {
        return Err(Error::Shape(format!(
            "a {rows} x {cols} matrix takes {cols} importance values, got {}",
            importance.len()
        )));
    }
    let mut out = Vec::with_capacity(nbytes);
    match ty {
        GgmlType::IQ2_XXS => encode_weighted(x, importance, QK_K, &mut out, q_iq2_xxs),
        GgmlType::IQ2_XS => encode_weighted(x, importance, QK_K, &mut out, q_iq2_xs),
        GgmlType::IQ1_S => encode_weighted(x, importance, QK_K, &mut out, q_iq1_s),
        GgmlType::IQ1_M => encode_weighted(x, importance, QK_K, &mut out, q_iq1_m),
        GgmlType::IQ3_XXS => {
            encode_weighted(x, importance, QK_K, &mut out, |b, w| q_iq3_xxs(b, Some(w)))
        }
        GgmlType::IQ3_S => {
            encode_weighted(x, importance, QK_K, &mut out, |b, w| q_iq3_s(b, Some(w)))
        }
        GgmlType::IQ2_S => {
            encode_weighted(x, importance, QK_K, &mut out, |b, w| q_iq2_s(b, Some(w)))
        }
        GgmlType::IQ4_NL => {
            encode_weighted(x, importance, 32, &mut out, |b, w| q_iq4_nl(b, Some(w)))
        }
        GgmlType::IQ4_XS => {
            encode_weighted(x, importance, QK_K, &mut out, |b, w| q_iq4_xs(b, Some(w)))
        }
        GgmlType::F32
        | GgmlType::F16
        | GgmlType::BF16
        | GgmlType::Q8_0
        | GgmlType::Q8_1
        | GgmlType::Q8_K
        | GgmlType::MXFP4
        | GgmlType::NVFP4
        | GgmlType::TQ1_0
        | GgmlType::TQ2_0 => return quantize(ty, x, rows, cols),
        GgmlType::Q4_0
        | GgmlType::Q4_1
        | GgmlType::Q5_0
        | GgmlType::Q5_1
        | GgmlType::Q2_K
        | GgmlType::Q3_K
        | GgmlType::Q4_K
        | GgmlType::Q5_K
        | GgmlType::Q6_K
        | GgmlType::Q1_0
        | GgmlType::Q2_0 => {
            return Err(Error::Unsupported(format!(
                "{ty} with an importance matrix is not implemented (ggml's {ty} quantizer \
                 uses one differently); `quantize` gives ggml's bytes without one"
            )))
        }
    }
    checked_output(ty, out, nbytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blocks::{k4_scale_min, BlockQ4K};

    #[test]
    fn nearest_int_rounds_half_to_even() {
        let cases = [
            (0.5, 0),
            (1.5, 2),
            (2.5, 2),
            (-0.5, 0),
            (-1.5, -2),
            (-2.5, -2),
            (0.49999997, 0),
            (3.7, 4),
            (-3.7, -4),
            (4_194_303.0, 4_194_303),
            (-4_194_303.0, -4_194_303),
        ];
        for (v, want) in cases {
            assert_eq!(nearest_int(v), want, "{v}");
        }
        // garbage in, garbage out, but no panic
        let _ = nearest_int(f32::NAN);
        let _ = nearest_int(1e30);
    }

    #[test]
    fn zero_blocks() {
        let z = [0.0f32; 256];
        // IQ4_NL: scale 0, every level the one closest to 0 (index 8, value 1)
        let b = q_iq4_nl(&z[..32], None);
        assert_eq!(b.d, F16Bits::from_f32(0.0));
        assert_eq!(b.qs, [0x88; 16]);
        // IQ4_XS: ggml's d = -0/32 is a negative zero
        let b = q_iq4_xs(&z, None);
        assert_eq!(u16::from_le_bytes(b.d.0), 0x8000);
        assert_eq!(b.qs, [0x88; 128]);
        // Q6_K and Q4_K: everything zero
        assert_eq!(bytemuck::bytes_of(&q_q6_k(&z)), &[0u8; 210][..]);
        assert_eq!(bytemuck::bytes_of(&q_q4_k(&z)), &[0u8; 144][..]);
        for ty in GgmlType::ALL.into_iter().filter(|t| t.is_quantizable()) {
            let q = quantize(ty, &z, 1, 256).unwrap();
            let y = dequantize(ty, &q, 1, 256).unwrap();
            assert!(y.iter().all(|&v| v == 0.0), "{ty}");
        }
    }

    #[test]
    fn dequantize_f64_is_exact_for_q4_k() {
        let x: Vec<f32> = (0..512)
            .map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 300.0)
            .collect();
        let q = quantize(GgmlType::Q4_K, &x, 2, 256).unwrap();
        let y = dequantize_f64(GgmlType::Q4_K, &q, 2, 256).unwrap();
        let b: BlockQ4K = bytemuck::pod_read_unaligned(&q[..144]);
        let (sc, m) = k4_scale_min(&b.scales, 5);
        let level = f64::from((b.qs[32 * 2 + 3] >> 4) & 0x0f);
        let want = f64::from(b.d.to_f32()) * f64::from(sc) * level
            - f64::from(b.dmin.to_f32()) * f64::from(m);
        assert_eq!(y[5 * 32 + 3], want);
    }
}
