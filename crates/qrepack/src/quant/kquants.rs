//! The k-quants (256-weight super-blocks): Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and Q8_K.

use super::{nearest_int, signed_absmax, Real, GROUP_MAX_EPS};
use crate::blocks::{
    k4_pack_scales, k4_scale_min, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K,
    F16Bits,
};
use crate::types::QK_K;

// ------------------------------------------------------------------------------------------------
// Dequantization
// ------------------------------------------------------------------------------------------------

/// The 2-bit field `(q[l] >> shift) & 3` where weight `j` of a 128-weight half (Q2_K, Q3_K)
/// lives: byte `j % 32`, bits `2 * (j / 32)`.
#[inline]
fn crumb(qs: &[u8], j: usize) -> u8 {
    (qs[j % 32] >> (2 * (j / 32))) & 3
}

pub(super) fn dq_q2_k<R: Real>(b: &BlockQ2K, y: &mut [R]) {
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

pub(super) fn dq_q3_k<R: Real>(b: &BlockQ3K, y: &mut [R]) {
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

pub(super) fn dq_q4_k<R: Real>(b: &BlockQ4K, y: &mut [R]) {
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

pub(super) fn dq_q5_k<R: Real>(b: &BlockQ5K, y: &mut [R]) {
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

pub(super) fn dq_q6_k<R: Real>(b: &BlockQ6K, y: &mut [R]) {
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

pub(super) fn dq_q8_k<R: Real>(b: &BlockQ8K, y: &mut [R]) {
    let d = R::of_f32(b.d);
    for (v, &q) in y.iter_mut().zip(&b.qs) {
        *v = d * R::of_int(i32::from(q));
    }
}

// ------------------------------------------------------------------------------------------------
// Quantization
// ------------------------------------------------------------------------------------------------

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

pub(super) fn q_q8_k(x: &[f32]) -> BlockQ8K {
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
pub(super) fn q_q2_k(x: &[f32]) -> BlockQ2K {
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
pub(super) fn q_q3_k(x: &[f32]) -> BlockQ3K {
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

pub(super) fn q_q4_k(x: &[f32]) -> BlockQ4K {
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

pub(super) fn q_q5_k(x: &[f32]) -> BlockQ5K {
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
pub(super) fn q_q6_k(x: &[f32]) -> BlockQ6K {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::{dequantize, quantize};
    use crate::types::GgmlType;

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
