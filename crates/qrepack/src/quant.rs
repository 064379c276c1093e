//! Weight quantization and dequantization, bit-compatible with ggml's reference routines.
//!
//! * [`quantize`] reproduces the bytes of ggml's `ggml_quantize_chunk` without an importance
//!   matrix (the `quantize_row_*_ref` routines, and for IQ4_NL / IQ4_XS the `ntry = 7` search
//!   that `ggml_quantize_chunk` uses), as compiled without floating-point contraction.
//! * [`dequantize`] reproduces ggml's `dequantize_row_*` in f32, operation for operation.
//! * [`dequantize_f64`] computes the same values exactly (in f64) from the stored integers and
//!   scales; it is meant as an independent reference for tests.
//!
//! Both dequantizers share one generic decoder per block type, instantiated for `f32` and `f64`.

use std::borrow::Cow;
use std::ops::{Add, Mul, Sub};

use bytemuck::Pod;

use crate::activation::Bf16Bits;
use crate::blocks::{
    collect_blocks, k4_pack_scales, k4_scale_min, view_blocks, BlockIq4Nl, BlockIq4Xs, BlockQ2K,
    BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K, BlockQ8K,
    BlockQ8_0, BlockQ8_1, F16Bits, IQ4NL_LEVELS,
};
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

/// The 5-bit quant of weight `j` (0..32) of a Q5_0/Q5_1 block.
#[inline]
fn nibble5(qs: &[u8; 16], qh: &[u8; 4], j: usize) -> u8 {
    let high = ((u32::from_le_bytes(*qh) >> j) & 1) as u8;
    nibble(qs, j) | (high << 4)
}

fn dq_q4_0<R: Real>(b: &BlockQ4_0, y: &mut [R]) {
    let d = R::of_f16(b.d);
    for (j, v) in y.iter_mut().enumerate() {
        *v = R::of_int(i32::from(nibble(&b.qs, j)) - 8) * d;
    }
}

fn dq_q4_1<R: Real>(b: &BlockQ4_1, y: &mut [R]) {
    let (d, m) = (R::of_f16(b.d), R::of_f16(b.m));
    for (j, v) in y.iter_mut().enumerate() {
        *v = R::of_int(i32::from(nibble(&b.qs, j))) * d + m;
    }
}

fn dq_q5_0<R: Real>(b: &BlockQ5_0, y: &mut [R]) {
    let d = R::of_f16(b.d);
    for (j, v) in y.iter_mut().enumerate() {
        *v = R::of_int(i32::from(nibble5(&b.qs, &b.qh, j)) - 16) * d;
    }
}

fn dq_q5_1<R: Real>(b: &BlockQ5_1, y: &mut [R]) {
    let (d, m) = (R::of_f16(b.d), R::of_f16(b.m));
    for (j, v) in y.iter_mut().enumerate() {
        *v = R::of_int(i32::from(nibble5(&b.qs, &b.qh, j))) * d + m;
    }
}

fn dq_q8_0<R: Real>(b: &BlockQ8_0, y: &mut [R]) {
    let d = R::of_f16(b.d);
    for (v, &q) in y.iter_mut().zip(&b.qs) {
        *v = R::of_int(i32::from(q)) * d;
    }
}

fn dq_q8_1<R: Real>(b: &BlockQ8_1, y: &mut [R]) {
    let d = R::of_f16(b.d);
    for (v, &q) in y.iter_mut().zip(&b.qs) {
        *v = R::of_int(i32::from(q)) * d;
    }
}

fn dq_iq4_nl<R: Real>(b: &BlockIq4Nl, y: &mut [R]) {
    let d = R::of_f16(b.d);
    for (j, v) in y.iter_mut().enumerate() {
        *v = d * R::of_int(i32::from(IQ4NL_LEVELS[usize::from(nibble(&b.qs, j))]));
    }
}

/// The 2-bit field `(q[l] >> shift) & 3` where weight `j` of a 128-weight half (Q2_K, Q3_K)
/// lives: byte `j % 32`, bits `2 * (j / 32)`.
#[inline]
fn crumb(qs: &[u8], j: usize) -> u8 {
    (qs[j % 32] >> (2 * (j / 32))) & 3
}

fn dq_q2_k<R: Real>(b: &BlockQ2K, y: &mut [R]) {
    let (d, dmin) = (R::of_f16(b.d), R::of_f16(b.dmin));
    for (j, v) in y.iter_mut().enumerate() {
        let sc = b.scales[j / 16];
        let dl = d * R::of_int(i32::from(sc & 0x0f));
        let ml = dmin * R::of_int(i32::from(sc >> 4));
        let q = crumb(&b.qs[32 * (j / 128)..], j % 128);
        *v = dl * R::of_int(i32::from(q)) - ml;
    }
}

/// The 16 signed 6-bit scales of a Q3_K block (already minus 32).
fn q3k_scales(packed: &[u8; 12]) -> [i32; 16] {
    let mut s = [0i32; 16];
    for (j, v) in s.iter_mut().enumerate() {
        let low = if j < 8 {
            packed[j] & 0x0f
        } else {
            packed[j - 8] >> 4
        };
        let high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
        *v = i32::from(low | (high << 4)) - 32;
    }
    s
}

fn dq_q3_k<R: Real>(b: &BlockQ3K, y: &mut [R]) {
    let d = R::of_f16(b.d);
    let scales = q3k_scales(&b.scales);
    for (j, v) in y.iter_mut().enumerate() {
        let dl = d * R::of_int(scales[j / 16]);
        let low = i32::from(crumb(&b.qs[32 * (j / 128)..], j % 128));
        // the high bit of weight j is bit j / 32 of hmask[j % 32]; a clear bit subtracts 4
        let high_set = b.hmask[j % 32] & (1 << (j / 32)) != 0;
        *v = dl * R::of_int(low - if high_set { 0 } else { 4 });
    }
}

fn dq_q4_k<R: Real>(b: &BlockQ4K, y: &mut [R]) {
    let (d, dmin) = (R::of_f16(b.d), R::of_f16(b.dmin));
    for (s, ys) in y.chunks_exact_mut(32).enumerate() {
        let (sc, m) = k4_scale_min(&b.scales, s);
        let d1 = d * R::of_int(i32::from(sc));
        let m1 = dmin * R::of_int(i32::from(m));
        let q = &b.qs[32 * (s / 2)..32 * (s / 2) + 32];
        let shift = 4 * (s % 2);
        for (v, &byte) in ys.iter_mut().zip(q) {
            *v = d1 * R::of_int(i32::from((byte >> shift) & 0x0f)) - m1;
        }
    }
}

fn dq_q5_k<R: Real>(b: &BlockQ5K, y: &mut [R]) {
    let (d, dmin) = (R::of_f16(b.d), R::of_f16(b.dmin));
    for (s, ys) in y.chunks_exact_mut(32).enumerate() {
        let (sc, m) = k4_scale_min(&b.scales, s);
        let d1 = d * R::of_int(i32::from(sc));
        let m1 = dmin * R::of_int(i32::from(m));
        let q = &b.qs[32 * (s / 2)..32 * (s / 2) + 32];
        let shift = 4 * (s % 2);
        for ((v, &byte), &hbits) in ys.iter_mut().zip(q).zip(&b.qh) {
            let high = (hbits >> s) & 1;
            let level = ((byte >> shift) & 0x0f) | (high << 4);
            *v = d1 * R::of_int(i32::from(level)) - m1;
        }
    }
}

fn dq_q6_k<R: Real>(b: &BlockQ6K, y: &mut [R]) {
    let d = R::of_f16(b.d);
    for (j, v) in y.iter_mut().enumerate() {
        let half = j / 128; // 128-weight half: 64 bytes of ql, 32 of qh, 8 scales
        let r = j % 128;
        let (quarter, l) = (r / 32, r % 32);
        let ql = b.ql[64 * half + 32 * (quarter % 2) + l];
        let low = if quarter < 2 { ql & 0x0f } else { ql >> 4 };
        let high = (b.qh[32 * half + l] >> (2 * quarter)) & 3;
        let q = i32::from(low | (high << 4)) - 32;
        let sc = i32::from(b.scales[j / 16]);
        *v = d * R::of_int(sc) * R::of_int(q);
    }
}

fn dq_q8_k<R: Real>(b: &BlockQ8K, y: &mut [R]) {
    let d = R::of_f32(b.d);
    for (v, &q) in y.iter_mut().zip(&b.qs) {
        *v = d * R::of_int(i32::from(q));
    }
}

fn dq_iq4_xs<R: Real>(b: &BlockIq4Xs, y: &mut [R]) {
    let d = R::of_f16(b.d);
    let scales_h = u16::from_le_bytes(b.scales_h);
    for (s, ys) in y.chunks_exact_mut(32).enumerate() {
        let low = (b.scales_l[s / 2] >> (4 * (s % 2))) & 0x0f;
        let high = ((scales_h >> (2 * s)) & 3) as u8;
        let dl = d * R::of_int(i32::from(low | (high << 4)) - 32);
        let qs = &b.qs[16 * s..16 * s + 16];
        for (j, v) in ys.iter_mut().enumerate() {
            *v = dl * R::of_int(i32::from(IQ4NL_LEVELS[usize::from(nibble(qs, j))]));
        }
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

/// Index of the IQ4_NL level closest to `x` (ties towards the upper level).
fn best_level(x: f32) -> u8 {
    let lv = |i: usize| f32::from(IQ4NL_LEVELS[i]);
    if x <= lv(0) {
        return 0;
    }
    if x >= lv(15) {
        return 15;
    }
    let (mut lo, mut hi) = (0usize, 15usize);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if x < lv(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    if x - lv(hi - 1) < lv(hi) - x {
        (hi - 1) as u8
    } else {
        hi as u8
    }
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

/// Packs 256 2-bit levels (Q2_K, Q3_K): weight `128 h + 32 g + l` goes to bits `2 g` of byte
/// `32 h + l`.
fn pack_crumbs(levels: &[u8; QK_K], qs: &mut [u8; 64]) {
    for (q, lv) in qs.chunks_exact_mut(32).zip(levels.chunks_exact(128)) {
        for (l, byte) in q.iter_mut().enumerate() {
            *byte = lv[l] | (lv[l + 32] << 2) | (lv[l + 64] << 4) | (lv[l + 96] << 6);
        }
    }
}

/// Fits `x ~ scale * L - min` with `L` in `0..=nmax` by a weighted least-squares search over
/// `nstep + 1` candidate inverse scales (ggml's `make_qkx2_quants`). Returns `(scale, min)` with
/// `min >= 0` subtracted, and writes the levels to `levels`.
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
fn fit_scale_min(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    levels: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> (f32, f32) {
    let n = x.len();
    let err = |d: f32| if use_mad { d.abs() } else { d * d };
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        levels[..n].fill(0);
        return (0.0, -min);
    }
    let nmax_f = nmax as f32;
    let mut iscale = nmax_f / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
        levels[i] = l as u8;
        let diff = scale * l as f32 + min - x[i];
        best_error += weights[i] * err(diff);
    }
    if nstep < 1 {
        return (scale, -min);
    }
    let mut aux = [0u8; 32];
    let aux = &mut aux[..n];
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax_f) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            aux[i] = l as u8;
            let (w, lf) = (weights[i], l as f32);
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                let diff = this_scale * f32::from(aux[i]) + this_min - x[i];
                cur_error += weights[i] * err(diff);
            }
            if cur_error < best_error {
                levels[..n].copy_from_slice(aux);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// Fits `x ~ scale * (L - nmax)`, `L` in `0..2 nmax`, weighting by `x^2` and trying 18 nearby
/// inverse scales (ggml's `make_qx_quants` with `rmse_type = 1` and no importance weights).
#[allow(clippy::needless_range_loop)]
fn fit_symmetric(nmax: i32, x: &[f32], levels: &mut [i8]) -> f32 {
    let n = x.len();
    let (amax, max) = signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        levels[..n].fill(0);
        return 0.0;
    }
    let nmax_f = nmax as f32;
    let quant = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    let mut iscale = -nmax_f / max;
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for i in 0..n {
        let l = quant(iscale, x[i]);
        levels[i] = (l + nmax) as i8;
        let (w, lf) = (x[i] * x[i], l as f32);
        sumlx += w * x[i] * lf;
        suml2 += w * lf * lf;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmax_f + 0.1 * is as f32) / max;
        sumlx = 0.0;
        suml2 = 0.0;
        for i in 0..n {
            let l = quant(iscale, x[i]);
            let (w, lf) = (x[i] * x[i], l as f32);
            sumlx += w * x[i] * lf;
            suml2 += w * lf * lf;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for i in 0..n {
                levels[i] = (quant(iscale, x[i]) + nmax) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// Fits `x ~ scale * (L - nmax)` for Q3_K by coordinate descent on the `x^2`-weighted error
/// (ggml's `make_q3_quants` with `do_rmse`).
#[allow(clippy::needless_range_loop)]
fn fit_symmetric_descent(nmax: i32, x: &[f32], levels: &mut [i8]) -> f32 {
    let n = x.len();
    let (amax, max) = signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        levels[..n].fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for i in 0..n {
        let l = nearest_int(iscale * x[i]).clamp(-nmax, nmax - 1);
        levels[i] = l as i8;
        let (w, lf) = (x[i] * x[i], l as f32);
        sumlx += w * x[i] * lf;
        suml2 += w * lf * lf;
    }
    for _ in 0..5 {
        let mut changed = false;
        for i in 0..n {
            let w = x[i] * x[i];
            let old = f32::from(levels[i]);
            let mut slx = sumlx - w * x[i] * old;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * old * old;
                let new_l = nearest_int(x[i] * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_l != i32::from(levels[i]) {
                    let nf = new_l as f32;
                    slx += w * x[i] * nf;
                    sl2 += w * nf * nf;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        levels[i] = new_l as i8;
                        sumlx = slx;
                        suml2 = sl2;
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    for l in levels[..n].iter_mut() {
        *l += nmax as i8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// The IQ4_NL scale of one 32-weight group: an `x^2`-weighted least-squares fit over 15 inverse
/// scales around `-levels[0] / max` (ggml's `quantize_row_iq4_nl_impl` search with `ntry = 7`).
fn iq4_group_scale(xb: &[f32]) -> f32 {
    const NTRY: i32 = 7;
    let (amax, max) = signed_absmax(xb);
    if amax < GROUP_MAX_EPS {
        return 0.0;
    }
    let v0 = f32::from(IQ4NL_LEVELS[0]);
    let sums = |id: f32| {
        let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
        for &v in xb {
            let q = f32::from(IQ4NL_LEVELS[usize::from(best_level(id * v))]);
            let w = v * v;
            sumqx += w * q * v;
            sumq2 += w * q * q;
        }
        (sumqx, sumq2)
    };
    let d0 = -max / v0;
    let (sumqx, sumq2) = sums(1.0 / d0);
    let mut d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
    let mut best = d * sumqx;
    for itry in -NTRY..=NTRY {
        let id = (itry + i32::from(IQ4NL_LEVELS[0])) as f32 / max;
        let (sumqx, sumq2) = sums(id);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    d
}

/// Packs 32 4-bit levels: low nibbles weights 0..16, high nibbles 16..32.
fn pack_nibbles32(levels: &[u8], qs: &mut [u8]) {
    for j in 0..16 {
        qs[j] = levels[j] | (levels[j + 16] << 4);
    }
}

fn q_q4_0(x: &[f32]) -> BlockQ4_0 {
    let (_, max) = signed_absmax(x);
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut b = BlockQ4_0 {
        d: F16Bits::from_f32(d),
        qs: [0; 16],
    };
    for j in 0..16 {
        let q0 = ((x[j] * id + 8.5) as i8).min(15) as u8;
        let q1 = ((x[j + 16] * id + 8.5) as i8).min(15) as u8;
        b.qs[j] = q0 | (q1 << 4);
    }
    b
}

/// Minimum and maximum of a block as ggml's Q4_1/Q5_1 compute them.
fn min_max(x: &[f32]) -> (f32, f32) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

fn q_q4_1(x: &[f32]) -> BlockQ4_1 {
    let (min, max) = min_max(x);
    let d = (max - min) / 15.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut b = BlockQ4_1 {
        d: F16Bits::from_f32(d),
        m: F16Bits::from_f32(min),
        qs: [0; 16],
    };
    for j in 0..16 {
        let q0 = (((x[j] - min) * id + 0.5) as i8).min(15) as u8;
        let q1 = (((x[j + 16] - min) * id + 0.5) as i8).min(15) as u8;
        b.qs[j] = q0 | (q1 << 4);
    }
    b
}

/// Splits 32 5-bit levels into low nibbles and the high-bit word of Q5_0/Q5_1.
fn pack_q5(levels: &[u8; 32]) -> ([u8; 16], [u8; 4]) {
    let mut qs = [0u8; 16];
    let mut qh = 0u32;
    for j in 0..16 {
        qs[j] = (levels[j] & 0x0f) | ((levels[j + 16] & 0x0f) << 4);
        qh |= u32::from(levels[j] >> 4 & 1) << j;
        qh |= u32::from(levels[j + 16] >> 4 & 1) << (j + 16);
    }
    (qs, qh.to_le_bytes())
}

fn q_q5_0(x: &[f32]) -> BlockQ5_0 {
    let (_, max) = signed_absmax(x);
    let d = max / -16.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut levels = [0u8; 32];
    for (l, &v) in levels.iter_mut().zip(x) {
        *l = ((v * id + 16.5) as i8).min(31) as u8;
    }
    let (qs, qh) = pack_q5(&levels);
    BlockQ5_0 {
        d: F16Bits::from_f32(d),
        qh,
        qs,
    }
}

fn q_q5_1(x: &[f32]) -> BlockQ5_1 {
    let (min, max) = min_max(x);
    let d = (max - min) / 31.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut levels = [0u8; 32];
    for (l, &v) in levels.iter_mut().zip(x) {
        *l = ((v - min) * id + 0.5) as u8;
    }
    let (qs, qh) = pack_q5(&levels);
    BlockQ5_1 {
        d: F16Bits::from_f32(d),
        m: F16Bits::from_f32(min),
        qh,
        qs,
    }
}

fn q_q8_0(x: &[f32]) -> BlockQ8_0 {
    let amax = x
        .iter()
        .fold(0.0f32, |a, v| if a > v.abs() { a } else { v.abs() });
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut b = BlockQ8_0 {
        d: F16Bits::from_f32(d),
        qs: [0; 32],
    };
    for (q, &v) in b.qs.iter_mut().zip(x) {
        *q = (v * id).round() as i8;
    }
    b
}

fn q_q8_1(x: &[f32]) -> BlockQ8_1 {
    let amax = x
        .iter()
        .fold(0.0f32, |a, v| if a > v.abs() { a } else { v.abs() });
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut qs = [0i8; 32];
    for (q, &v) in qs.iter_mut().zip(x) {
        *q = (v * id).round() as i8;
    }
    let sum: i32 = qs.iter().map(|&q| i32::from(q)).sum();
    BlockQ8_1 {
        d: F16Bits::from_f32(d),
        s: F16Bits::from_f32(sum as f32 * d),
        qs,
    }
}

fn q_q8_k(x: &[f32]) -> BlockQ8K {
    let (amax, max) = signed_absmax(x);
    let mut b = BlockQ8K {
        d: 0.0,
        qs: [0; QK_K],
        bsums: [0; 16],
    };
    if amax == 0.0 {
        return b;
    }
    let iscale = -127.0 / max;
    for (q, &v) in b.qs.iter_mut().zip(x) {
        *q = nearest_int(iscale * v).min(127) as i8;
    }
    for (s, group) in b.bsums.iter_mut().zip(b.qs.chunks_exact(16)) {
        *s = group.iter().map(|&q| i16::from(q)).sum();
    }
    b.d = 1.0 / iscale;
    b
}

#[allow(clippy::needless_range_loop)]
fn q_q2_k(x: &[f32]) -> BlockQ2K {
    let mut levels = [0u8; QK_K];
    let mut scales = [0f32; 16];
    let mut mins = [0f32; 16];
    let mut weights = [0f32; 16];
    let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
    for j in 0..16 {
        let xs = &x[16 * j..16 * j + 16];
        for (w, &v) in weights.iter_mut().zip(xs) {
            *w = v.abs();
        }
        let lv = &mut levels[16 * j..16 * j + 16];
        (scales[j], mins[j]) = fit_scale_min(3, xs, &weights, lv, -0.5, 0.1, 15, true);
        if scales[j] > max_scale {
            max_scale = scales[j];
        }
        if mins[j] > max_min {
            max_min = mins[j];
        }
    }
    let mut b = BlockQ2K {
        scales: [0; 16],
        qs: [0; 64],
        d: F16Bits::from_f32(0.0),
        dmin: F16Bits::from_f32(0.0),
    };
    if max_scale > 0.0 {
        let iscale = 15.0 / max_scale;
        for j in 0..16 {
            b.scales[j] = nearest_int(iscale * scales[j]) as u8;
        }
        b.d = F16Bits::from_f32(max_scale / 15.0);
    }
    if max_min > 0.0 {
        let iscale = 15.0 / max_min;
        for j in 0..16 {
            b.scales[j] |= (nearest_int(iscale * mins[j]) << 4) as u8;
        }
        b.dmin = F16Bits::from_f32(max_min / 15.0);
    }
    let (d_all, dmin_all) = (b.d.to_f32(), b.dmin.to_f32());
    for j in 0..16 {
        let d = d_all * f32::from(b.scales[j] & 0x0f);
        if d == 0.0 {
            continue;
        }
        let dm = dmin_all * f32::from(b.scales[j] >> 4);
        for ii in 0..16 {
            levels[16 * j + ii] = nearest_int((x[16 * j + ii] + dm) / d).clamp(0, 3) as u8;
        }
    }
    pack_crumbs(&levels, &mut b.qs);
    b
}

#[allow(clippy::needless_range_loop)]
fn q_q3_k(x: &[f32]) -> BlockQ3K {
    let mut levels = [0i8; QK_K];
    let mut scales = [0f32; 16];
    let (mut amax, mut max_scale) = (0.0f32, 0.0f32);
    for j in 0..16 {
        scales[j] = fit_symmetric_descent(4, &x[16 * j..16 * j + 16], &mut levels[16 * j..]);
        if scales[j].abs() > amax {
            amax = scales[j].abs();
            max_scale = scales[j];
        }
    }
    let mut b = BlockQ3K {
        hmask: [0; 32],
        qs: [0; 64],
        scales: [0; 12],
        d: F16Bits::from_f32(0.0),
    };
    if max_scale != 0.0 {
        let iscale = -32.0 / max_scale;
        for j in 0..16 {
            // ggml stores the rounded value in an int8 before clamping
            let l = ((nearest_int(iscale * scales[j]) as i8).clamp(-32, 31) + 32) as u8;
            if j < 8 {
                b.scales[j] = l & 0x0f;
            } else {
                b.scales[j - 8] |= (l & 0x0f) << 4;
            }
            b.scales[j % 4 + 8] |= (l >> 4) << (2 * (j / 4));
        }
        b.d = F16Bits::from_f32(1.0 / iscale);
    }
    let d_all = b.d.to_f32();
    let sc = q3k_scales(&b.scales);
    for j in 0..16 {
        let d = d_all * sc[j] as f32;
        if d == 0.0 {
            continue;
        }
        for ii in 0..16 {
            levels[16 * j + ii] = (nearest_int(x[16 * j + ii] / d).clamp(-4, 3) + 4) as i8;
        }
    }
    let mut low = [0u8; QK_K];
    for (j, (lo, &l)) in low.iter_mut().zip(&levels).enumerate() {
        let mut l = l as u8;
        if l > 3 {
            b.hmask[j % 32] |= 1 << (j / 32);
            l -= 4;
        }
        *lo = l;
    }
    pack_crumbs(&low, &mut b.qs);
    b
}

/// Sub-block scales and mins of Q4_K/Q5_K: fits each 32-weight group with weights
/// `sqrt(mean(x^2)) + |x|`, then quantizes scales and mins to 6 bits against their maxima.
/// Returns `(packed scales, d, dmin)` and the first-pass levels.
fn k_scales_mins(
    x: &[f32],
    nmax: i32,
    rmin: f32,
    nstep: i32,
    levels: &mut [u8; QK_K],
) -> ([u8; 12], F16Bits, F16Bits) {
    let mut scales = [0f32; 8];
    let mut mins = [0f32; 8];
    let mut weights = [0f32; 32];
    let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
    for j in 0..8 {
        let xs = &x[32 * j..32 * j + 32];
        let mut sum_x2 = 0.0f32;
        for &v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        for (w, &v) in weights.iter_mut().zip(xs) {
            *w = av_x + v.abs();
        }
        let lv = &mut levels[32 * j..32 * j + 32];
        (scales[j], mins[j]) = fit_scale_min(nmax, xs, &weights, lv, rmin, 0.1, nstep, false);
        if scales[j] > max_scale {
            max_scale = scales[j];
        }
        if mins[j] > max_min {
            max_min = mins[j];
        }
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut ls = [0u8; 8];
    let mut lm = [0u8; 8];
    for j in 0..8 {
        // ggml keeps the low byte of the rounded value, then caps it at 63
        ls[j] = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        lm[j] = (nearest_int(inv_min * mins[j]) as u8).min(63);
    }
    (
        k4_pack_scales(&ls, &lm),
        F16Bits::from_f32(max_scale / 63.0),
        F16Bits::from_f32(max_min / 63.0),
    )
}

/// Re-quantizes every 32-weight group against its stored 6-bit scale and min (groups whose
/// scale is zero keep their first-pass levels).
fn k_requantize(
    x: &[f32],
    packed: &[u8; 12],
    d: F16Bits,
    dmin: F16Bits,
    nmax: i32,
    levels: &mut [u8; QK_K],
) {
    for j in 0..8 {
        let (sc, m) = k4_scale_min(packed, j);
        let dj = d.to_f32() * f32::from(sc);
        if dj == 0.0 {
            continue;
        }
        let dm = dmin.to_f32() * f32::from(m);
        for (l, &v) in levels[32 * j..32 * j + 32]
            .iter_mut()
            .zip(&x[32 * j..32 * j + 32])
        {
            *l = nearest_int((v + dm) / dj).clamp(0, nmax) as u8;
        }
    }
}

fn q_q4_k(x: &[f32]) -> BlockQ4K {
    let mut levels = [0u8; QK_K];
    let (scales, d, dmin) = k_scales_mins(x, 15, -1.0, 20, &mut levels);
    k_requantize(x, &scales, d, dmin, 15, &mut levels);
    let mut b = BlockQ4K {
        d,
        dmin,
        scales,
        qs: [0; 128],
    };
    for (q, lv) in b.qs.chunks_exact_mut(32).zip(levels.chunks_exact(64)) {
        for (l, byte) in q.iter_mut().enumerate() {
            *byte = lv[l] | (lv[l + 32] << 4);
        }
    }
    b
}

fn q_q5_k(x: &[f32]) -> BlockQ5K {
    let mut levels = [0u8; QK_K];
    let (scales, d, dmin) = k_scales_mins(x, 31, -0.5, 15, &mut levels);
    k_requantize(x, &scales, d, dmin, 31, &mut levels);
    let mut b = BlockQ5K {
        d,
        dmin,
        scales,
        qh: [0; 32],
        qs: [0; 128],
    };
    for (p, (q, lv)) in
        b.qs.chunks_exact_mut(32)
            .zip(levels.chunks_exact(64))
            .enumerate()
    {
        for (l, byte) in q.iter_mut().enumerate() {
            let (l1, l2) = (lv[l], lv[l + 32]);
            b.qh[l] |= ((l1 >> 4) << (2 * p)) | ((l2 >> 4) << (2 * p + 1));
            *byte = (l1 & 0x0f) | ((l2 & 0x0f) << 4);
        }
    }
    b
}

#[allow(clippy::needless_range_loop)]
fn q_q6_k(x: &[f32]) -> BlockQ6K {
    let mut levels = [0i8; QK_K];
    let mut scales = [0f32; 16];
    let (mut max_scale, mut max_abs) = (0.0f32, 0.0f32);
    for ib in 0..16 {
        scales[ib] = fit_symmetric(32, &x[16 * ib..16 * ib + 16], &mut levels[16 * ib..]);
        if scales[ib].abs() > max_abs {
            max_abs = scales[ib].abs();
            max_scale = scales[ib];
        }
    }
    let mut b = BlockQ6K {
        ql: [0; 128],
        qh: [0; 64],
        scales: [0; 16],
        d: F16Bits::from_f32(0.0),
    };
    if max_abs < GROUP_MAX_EPS {
        return b;
    }
    let iscale = -128.0 / max_scale;
    b.d = F16Bits::from_f32(1.0 / iscale);
    for ib in 0..16 {
        b.scales[ib] = nearest_int(iscale * scales[ib]).min(127) as i8;
    }
    let d_all = b.d.to_f32();
    for j in 0..16 {
        let d = d_all * f32::from(b.scales[j]);
        if d == 0.0 {
            continue;
        }
        for ii in 0..16 {
            levels[16 * j + ii] = (nearest_int(x[16 * j + ii] / d).clamp(-32, 31) + 32) as i8;
        }
    }
    for h in 0..2 {
        let lv = &levels[128 * h..128 * h + 128];
        for l in 0..32 {
            let q = |k: usize| lv[l + 32 * k] as u8;
            b.ql[64 * h + l] = (q(0) & 0x0f) | ((q(2) & 0x0f) << 4);
            b.ql[64 * h + l + 32] = (q(1) & 0x0f) | ((q(3) & 0x0f) << 4);
            b.qh[32 * h + l] =
                (q(0) >> 4) | ((q(1) >> 4) << 2) | ((q(2) >> 4) << 4) | ((q(3) >> 4) << 6);
        }
    }
    b
}

fn q_iq4_nl(x: &[f32]) -> BlockIq4Nl {
    let d = iq4_group_scale(x);
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut levels = [0u8; 32];
    for (l, &v) in levels.iter_mut().zip(x) {
        *l = best_level(id * v);
    }
    let mut b = BlockIq4Nl {
        d: F16Bits::from_f32(d),
        qs: [0; 16],
    };
    pack_nibbles32(&levels, &mut b.qs);
    b
}

fn q_iq4_xs(x: &[f32]) -> BlockIq4Xs {
    let mut scales = [0f32; 8];
    let (mut amax_scale, mut max_scale) = (0.0f32, 0.0f32);
    for (s, xb) in scales.iter_mut().zip(x.chunks_exact(32)) {
        *s = iq4_group_scale(xb);
        if s.abs() > amax_scale {
            amax_scale = s.abs();
            max_scale = *s;
        }
    }
    let d = -max_scale / 32.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut b = BlockIq4Xs {
        d: F16Bits::from_f32(d),
        scales_h: [0; 2],
        scales_l: [0; 4],
        qs: [0; 128],
    };
    let mut scales_h = 0u16;
    let mut levels = [0u8; 32];
    for (ib, (&s, xb)) in scales.iter().zip(x.chunks_exact(32)).enumerate() {
        let l = nearest_int(id * s).clamp(-32, 31);
        let dl = d * l as f32;
        let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
        for (lv, &v) in levels.iter_mut().zip(xb) {
            *lv = best_level(idl * v);
        }
        pack_nibbles32(&levels, &mut b.qs[16 * ib..16 * ib + 16]);
        let l = (l + 32) as u8;
        b.scales_l[ib / 2] |= (l & 0x0f) << (4 * (ib % 2));
        scales_h |= u16::from(l >> 4) << (2 * ib);
    }
    b.scales_h = scales_h.to_le_bytes();
    b
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
/// Supports every [`GgmlType`]: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K,
/// Q5_K, Q6_K, IQ4_NL, IQ4_XS, and the activation types Q8_1 and Q8_K (`quantize_row_q8_1_ref`,
/// `quantize_row_q8_K_ref`; an all-zero Q8_K block gets zero `bsums`).
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
    let n = element_count(ty, rows, cols)?;
    let nbytes = ty.matrix_bytes(rows, cols)?;
    if x.len() != n {
        return Err(Error::Shape(format!(
            "a {rows} x {cols} matrix has {n} values, got {}",
            x.len()
        )));
    }
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
        GgmlType::IQ4_NL => encode_blocks(x, 32, &mut out, q_iq4_nl),
        GgmlType::IQ4_XS => encode_blocks(x, QK_K, &mut out, q_iq4_xs),
    }
    if out.len() != nbytes {
        return Err(Error::Invalid(format!(
            "internal: {ty} produced {} bytes instead of {nbytes}",
            out.len()
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn best_level_picks_the_closest_level() {
        for i in -1300..=1300 {
            let x = i as f32 / 10.0;
            let got = usize::from(best_level(x));
            let dist = |k: usize| (f32::from(IQ4NL_LEVELS[k]) - x).abs();
            let best = (0..16).map(dist).fold(f32::INFINITY, f32::min);
            assert_eq!(dist(got), best, "{x}");
        }
        // exact midpoint between -10 and 1 goes up
        assert_eq!(best_level(-4.5), 8);
    }

    #[test]
    fn q4_0_block_by_hand() {
        // max magnitude -4 (negative): d = -4 / -8 = 0.5, so x = 0.5 * (q - 8)
        let mut x = [0.0f32; 32];
        x[0] = -4.0;
        x[1] = 3.5;
        x[16] = 1.0;
        x[17] = 0.25; // 0.5 * 0.5 + 8.5 = 9 after truncation -> rounds up
        let b = q_q4_0(&x);
        assert_eq!(b.d, F16Bits::from_f32(0.5));
        assert_eq!(b.qs[0], 10 << 4);
        assert_eq!(b.qs[1], 15 | (9 << 4));
        assert_eq!(b.qs[2], 8 | (8 << 4));
        let y = dequantize(GgmlType::Q4_0, bytemuck::bytes_of(&b), 1, 32).unwrap();
        assert_eq!(&y[..2], &[-4.0, 3.5]);
        assert_eq!(&y[16..18], &[1.0, 0.5]);
    }

    #[test]
    fn zero_blocks() {
        let z = [0.0f32; 256];
        // IQ4_NL: scale 0, every level the one closest to 0 (index 8, value 1)
        let b = q_iq4_nl(&z[..32]);
        assert_eq!(b.d, F16Bits::from_f32(0.0));
        assert_eq!(b.qs, [0x88; 16]);
        // IQ4_XS: ggml's d = -0/32 is a negative zero
        let b = q_iq4_xs(&z);
        assert_eq!(u16::from_le_bytes(b.d.0), 0x8000);
        assert_eq!(b.qs, [0x88; 128]);
        // Q6_K and Q4_K: everything zero
        assert_eq!(bytemuck::bytes_of(&q_q6_k(&z)), &[0u8; 210][..]);
        assert_eq!(bytemuck::bytes_of(&q_q4_k(&z)), &[0u8; 144][..]);
        for ty in GgmlType::ALL {
            let q = quantize(ty, &z, 1, 256).unwrap();
            let y = dequantize(ty, &q, 1, 256).unwrap();
            assert!(y.iter().all(|&v| v == 0.0), "{ty}");
        }
    }

    #[test]
    fn fit_scale_min_reproduces_exact_grid() {
        // values on an exact 4-bit grid with offset -1: the fit recovers scale 0.25, min 1
        let x: Vec<f32> = (0..32).map(|i| (i % 16) as f32 * 0.25 - 1.0).collect();
        let w = vec![1.0f32; 32];
        let mut l = [0u8; 32];
        let (scale, min) = fit_scale_min(15, &x, &w, &mut l, -1.0, 0.1, 20, false);
        assert!(
            (scale - 0.25).abs() < 1e-6 && (min - 1.0).abs() < 1e-6,
            "{scale} {min}"
        );
        for (i, &li) in l.iter().enumerate() {
            assert_eq!(usize::from(li), i % 16);
        }
    }

    #[test]
    fn q4_k_first_pass_levels_survive_zero_scales() {
        // one group dwarfs the others: their 6-bit scales round to 0 and ggml keeps the levels of
        // the first fit, so the tiny groups dequantize to -dmin * m (not to garbage)
        let mut x = [0.0f32; 256];
        for (i, v) in x.iter_mut().enumerate() {
            *v = ((i * 37 % 29) as f32 - 14.0) * if i < 32 { 100.0 } else { 1e-4 };
        }
        let q = quantize(GgmlType::Q4_K, &x, 1, 256).unwrap();
        let b: BlockQ4K = bytemuck::pod_read_unaligned(&q);
        assert_eq!(k4_scale_min(&b.scales, 3).0, 0);
        let y = dequantize(GgmlType::Q4_K, &q, 1, 256).unwrap();
        for (a, r) in x.iter().zip(&y) {
            assert!((a - r).abs() <= 1400.0 * 0.12, "{a} {r}");
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

    #[test]
    fn q8_k_blocks_have_consistent_sums() {
        let x: Vec<f32> = (0..256).map(|i| (i as f32 * 0.7).cos() * 3.0).collect();
        let b = q_q8_k(&x);
        for (j, &s) in b.bsums.iter().enumerate() {
            let sum: i16 = b.qs[16 * j..16 * j + 16]
                .iter()
                .map(|&q| i16::from(q))
                .sum();
            assert_eq!(s, sum);
        }
        assert!(b.qs.iter().any(|&q| q.unsigned_abs() == 127));
    }
}
