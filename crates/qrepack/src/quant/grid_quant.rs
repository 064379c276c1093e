//! Quantizers of the 2- and 3-bit grid types, bit-compatible with ggml's searches: IQ3_XXS,
//! IQ3_S and IQ2_S with or without an importance matrix (without one, weights `x^2`, or for
//! IQ2_S `sigma^2 / 4 + x^2`, stand in for it), IQ2_XXS and IQ2_XS only with one.
//!
//! Each group of 32 (IQ3, IQ2_XXS) or 16 (IQ2_S, IQ2_XS) weights is fitted by trying a range
//! of inverse scales (`grid_search::Search`): every sub-group of 4 or 8 magnitudes is rounded
//! to levels, and a combination of levels that is not a grid point is replaced by the best of
//! its nearest grid points. The least-squares scale of the best trial is kept and the groups'
//! scales are then quantized to 4 bits under one f16 block scale.

use super::grid_search::{
    c_max, even_sign_magnitudes, group_max, group_weights, iq2_s_grid, iq2_xs_grid, iq2_xxs_grid,
    iq3_s_grid, iq3_xxs_grid, magnitudes, scale_code, sum_squares, Refit, Search,
};
use super::{nearest_int, GROUP_MAX_EPS};
use crate::blocks::{BlockIq2S, BlockIq2Xs, BlockIq2Xxs, BlockIq3S, BlockIq3Xxs, F16Bits};
use crate::types::QK_K;

/// Smallest group maximum that IQ3_XXS and IQ2_S fit (ggml's `GROUP_MAX_EPS_IQ3_XXS` and
/// `GROUP_MAX_EPS_IQ2_S`).
const GRID_GROUP_EPS: f32 = 1e-8;

/// The importance of the values of group `ib` of `n` values, if any.
fn group_importance(qw: Option<&[f32]>, ib: usize, n: usize) -> Option<&[f32]> {
    qw.map(|q| &q[n * ib..n * (ib + 1)])
}

/// IQ3_XXS, with importance `qw` (one per value of `x`) or without.
pub(super) fn q_iq3_xxs(x: &[f32], qw: Option<&[f32]>) -> BlockIq3Xxs {
    debug_assert_eq!(x.len(), QK_K);
    let search = Search {
        grid: iq3_xxs_grid(),
        max_q: 8,
        trials: -15..=15,
        step: 0.2,
        start_on_grid: true,
        refit: Refit::OffGrid,
    };
    let sigma2 = 2.0 * sum_squares(x) / QK_K as f32;
    let mut qs = [0u8; 96];
    let mut scales = [0.0f32; 8];
    let mut max_scale = 0.0f32;
    let mut words = [0u32; 8];
    for (ib, xb) in x.chunks_exact(32).enumerate() {
        let weight: [f32; 32] = group_weights(xb, group_importance(qw, ib, 32), sigma2, |v| v * v);
        let waux = weight.map(f32::sqrt);
        let mut xval = [0.0f32; 32];
        let mut signs = [0u8; 4];
        even_sign_magnitudes(xb, &weight, &mut xval, &mut signs);
        let max = group_max(&xval);
        if max < GRID_GROUP_EPS {
            continue;
        }
        let mut fit = search.fit(&xval, &weight, &waux, max, max / 15.0);
        if fit.scale < 0.0 {
            // Scales are stored unsigned: flip the signs instead.
            fit.scale = -fit.scale;
            signs.iter_mut().for_each(|s| *s = !*s & 127);
        }
        for (q, &p) in qs[8 * ib..8 * ib + 8].iter_mut().zip(&fit.points) {
            *q = p as u8;
        }
        words[ib] = signs
            .iter()
            .enumerate()
            .fold(0, |w, (k, &s)| w | (u32::from(s) << (7 * k)));
        scales[ib] = fit.scale;
        max_scale = c_max(max_scale, fit.scale);
    }
    if max_scale == 0.0 {
        return BlockIq3Xxs {
            d: F16Bits::from_f32(0.0),
            qs: [0; 96],
        };
    }
    let d = max_scale / 31.0;
    let id = 1.0 / d;
    for (ib, w) in words.iter().enumerate() {
        let word = w | (u32::from(scale_code(id, scales[ib], 15)) << 28);
        qs[64 + 4 * ib..68 + 4 * ib].copy_from_slice(&word.to_le_bytes());
    }
    BlockIq3Xxs {
        // ggml's fudge factor on the block scale
        d: F16Bits::from_f32(d * 1.0125),
        qs,
    }
}

/// IQ3_S, with importance `qw` (one per value of `x`) or without.
pub(super) fn q_iq3_s(x: &[f32], qw: Option<&[f32]>) -> BlockIq3S {
    debug_assert_eq!(x.len(), QK_K);
    let search = Search {
        grid: iq3_s_grid(),
        max_q: 8,
        trials: -9..=9,
        step: 0.2,
        start_on_grid: false,
        refit: Refit::AllWhenOffGrid,
    };
    let sigma2 = 2.0 * sum_squares(x) / QK_K as f32;
    let mut b = BlockIq3S {
        d: F16Bits::from_f32(0.0),
        qs: [0; 64],
        qh: [0; 8],
        signs: [0; 32],
        scales: [0; 4],
    };
    let mut scales = [0.0f32; 8];
    let mut max_scale = 0.0f32;
    // ggml advances its write positions for `qs` and `signs` only past groups it fitted, so the
    // groups after an all-zero one move up: their bytes are written where ggml writes them.
    let mut written = 0usize;
    for (ib, xb) in x.chunks_exact(32).enumerate() {
        let weight: [f32; 32] = group_weights(xb, group_importance(qw, ib, 32), sigma2, |v| v * v);
        let waux = weight.map(f32::sqrt);
        let mut xval = [0.0f32; 32];
        let mut signs = [0u8; 4];
        magnitudes(xb, &mut xval, &mut signs);
        let max = group_max(&xval);
        if max == 0.0 {
            continue;
        }
        let mut fit = search.fit(&xval, &weight, &waux, max, max / 15.0);
        if fit.scale < 0.0 {
            fit.scale = -fit.scale;
            signs.iter_mut().for_each(|s| *s = !*s);
        }
        for (k, &p) in fit.points.iter().enumerate() {
            b.qs[8 * written + k] = p as u8;
            b.qh[ib] |= ((p >> 8) as u8) << k;
        }
        b.signs[4 * written..4 * written + 4].copy_from_slice(&signs);
        written += 1;
        scales[ib] = fit.scale;
        max_scale = c_max(max_scale, fit.scale);
    }
    if max_scale == 0.0 {
        return b;
    }
    let d = max_scale / 31.0;
    b.d = F16Bits::from_f32(d * 1.033);
    let id = 1.0 / d;
    for (s, pair) in b.scales.iter_mut().zip(scales.chunks_exact(2)) {
        *s = scale_code(id, pair[0], 15) | (scale_code(id, pair[1], 15) << 4);
    }
    b
}

/// IQ2_S, with importance `qw` (one per value of `x`) or without.
pub(super) fn q_iq2_s(x: &[f32], qw: Option<&[f32]>) -> BlockIq2S {
    debug_assert_eq!(x.len(), QK_K);
    let search = Search {
        grid: iq2_s_grid(),
        max_q: 3,
        trials: -9..=9,
        step: 0.1,
        start_on_grid: true,
        refit: Refit::OffGrid,
    };
    let mut b = BlockIq2S {
        d: F16Bits::from_f32(0.0),
        qs: [0; 64],
        qh: [0; 8],
        scales: [0; 8],
    };
    let sigma2 = 2.0 * sum_squares(x) / QK_K as f32;
    let mut scales = [0.0f32; 16];
    let mut max_scale = 0.0f32;
    for (ib, xb) in x.chunks_exact(16).enumerate() {
        let weight: [f32; 16] = group_weights(xb, group_importance(qw, ib, 16), sigma2, |v| {
            0.25 * sigma2 + v * v
        });
        let waux = weight.map(f32::sqrt);
        let mut xval = [0.0f32; 16];
        let mut signs = [0u8; 2];
        magnitudes(xb, &mut xval, &mut signs);
        let max = group_max(&xval);
        if max < GRID_GROUP_EPS {
            continue;
        }
        let mut fit = search.fit(&xval, &weight, &waux, max, max / 5.0);
        if fit.scale < 0.0 {
            fit.scale = -fit.scale;
            signs.iter_mut().for_each(|s| *s = !*s);
        }
        for (k, (&p, &s)) in fit.points.iter().zip(&signs).enumerate() {
            let i8 = 2 * ib + k;
            b.qs[i8] = p as u8;
            b.qh[i8 / 4] |= ((p >> 8) as u8) << (2 * (i8 % 4));
            b.qs[QK_K / 8 + i8] = s;
        }
        scales[ib] = fit.scale;
        max_scale = c_max(max_scale, fit.scale);
    }
    if max_scale == 0.0 {
        return b;
    }
    let d = max_scale / 31.0;
    b.d = F16Bits::from_f32(d * 0.9875);
    let id = 1.0 / d;
    for (s, pair) in b.scales.iter_mut().zip(scales.chunks_exact(2)) {
        *s = scale_code(id, pair[0], 15) | (scale_code(id, pair[1], 15) << 4);
    }
    b
}

/// The scale of ggml's `make_qp_quants`: levels `0..=nmax` for the non-negative `x` (a
/// negative value, which the even-sign rule can leave, rounds to a negative level that is
/// stored as a byte, as ggml stores it), the best of 9 inverse scales by weighted error, then
/// up to 5 passes that move single levels while that improves the least-squares fit.
fn make_qp_scale(x: &[f32], nmax: i32, w: &[f32]) -> f32 {
    let max = x.iter().fold(0.0f32, |m, &v| c_max(m, v));
    if max < GROUP_MAX_EPS {
        return 0.0;
    }
    let nmaxf = nmax as f32;
    let mut iscale = nmaxf / max;
    let scale = 1.0 / iscale;
    let mut best_mse = 0.0f32;
    for (&v, &wi) in x.iter().zip(w) {
        let l = f32::from(nearest_int(iscale * v) as u8);
        let diff = v - scale * l;
        best_mse += wi * diff * diff;
    }
    for is in (-4..=4).filter(|&is| is != 0) {
        let iscale_is = (0.1 * is as f32 + nmaxf) / max;
        let scale_is = 1.0 / iscale_is;
        let mut mse = 0.0f32;
        for (&v, &wi) in x.iter().zip(w) {
            let l = nearest_int(iscale_is * v).min(nmax);
            let diff = v - scale_is * l as f32;
            mse += wi * diff * diff;
        }
        if mse < best_mse {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    let mut levels = [0u8; 32];
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for ((l, &v), &wi) in levels.iter_mut().zip(x).zip(w) {
        let q = nearest_int(iscale * v).min(nmax);
        *l = q as u8;
        // the sums take the level before it is stored as a byte
        let qf = q as f32;
        sumlx += wi * v * qf;
        suml2 += wi * qf * qf;
    }
    for _ in 0..5 {
        let mut changed = false;
        for ((l, &v), &wi) in levels.iter_mut().zip(x).zip(w) {
            let lf = f32::from(*l);
            let mut slx = sumlx - wi * v * lf;
            let mut sl2 = suml2 - wi * lf * lf;
            if slx > 0.0 && sl2 > 0.0 {
                let new_l = nearest_int(v * sl2 / slx).min(nmax);
                if new_l != i32::from(*l) {
                    let nl = new_l as f32;
                    slx += wi * v * nl;
                    sl2 += wi * nl * nl;
                    if slx * slx * suml2 > sumlx * sumlx * sl2 {
                        *l = new_l as u8;
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
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// IQ2_XXS with importance `qw` (one per value of `x`).
pub(super) fn q_iq2_xxs(x: &[f32], qw: &[f32]) -> BlockIq2Xxs {
    debug_assert_eq!(x.len(), QK_K);
    let search = Search {
        grid: iq2_xxs_grid(),
        max_q: 3,
        trials: -6..=6,
        step: 0.1,
        start_on_grid: true,
        refit: Refit::Always,
    };
    let sigma2 = sum_squares(x) / QK_K as f32;
    let mut qs = [0u8; 64];
    let mut scales = [0.0f32; 8];
    let mut max_scale = 0.0f32;
    for (ib, xb) in x.chunks_exact(32).enumerate() {
        let weight: [f32; 32] = group_weights(xb, Some(&qw[32 * ib..]), sigma2, |v| v);
        let waux = weight.map(f32::sqrt);
        let mut xval = [0.0f32; 32];
        let mut signs = [0u8; 4];
        even_sign_magnitudes(xb, &weight, &mut xval, &mut signs);
        let max = group_max(&xval);
        if max < GROUP_MAX_EPS {
            continue;
        }
        // The trials centre on the scale of a plain 4-level fit instead of the largest value.
        let start = make_qp_scale(&xval, 4, &weight);
        let eff_max = start * 3.0;
        if eff_max <= 0.0 {
            continue;
        }
        let mut fit = search.fit(&xval, &weight, &waux, eff_max, start);
        if fit.scale < 0.0 {
            fit.scale = -fit.scale;
            signs.iter_mut().for_each(|s| *s = !*s & 127);
        }
        let group = &mut qs[8 * ib..8 * ib + 8];
        for (q, &p) in group.iter_mut().zip(&fit.points) {
            *q = p as u8;
        }
        let word = signs
            .iter()
            .enumerate()
            .fold(0u32, |w, (k, &s)| w | (u32::from(s) << (7 * k)));
        group[4..].copy_from_slice(&word.to_le_bytes());
        scales[ib] = fit.scale;
        max_scale = c_max(max_scale, fit.scale);
    }
    if max_scale == 0.0 {
        return BlockIq2Xxs {
            d: F16Bits::from_f32(0.0),
            qs: [0; 64],
        };
    }
    let d = max_scale / 31.0;
    let id = 1.0 / d;
    for (ib, &s) in scales.iter().enumerate() {
        qs[8 * ib + 7] |= scale_code(id, s, 15) << 4;
    }
    BlockIq2Xxs {
        d: F16Bits::from_f32(d),
        qs,
    }
}

/// IQ2_XS with importance `qw` (one per value of `x`).
pub(super) fn q_iq2_xs(x: &[f32], qw: &[f32]) -> BlockIq2Xs {
    debug_assert_eq!(x.len(), QK_K);
    let search = Search {
        grid: iq2_xs_grid(),
        max_q: 3,
        trials: -9..=9,
        step: 0.1,
        start_on_grid: true,
        refit: Refit::OffGrid,
    };
    let sigma2 = sum_squares(x) / QK_K as f32;
    let mut b = BlockIq2Xs {
        d: F16Bits::from_f32(0.0),
        qs: [0; 64],
        scales: [0; 8],
    };
    let mut scales = [0.0f32; 16];
    let mut max_scale = 0.0f32;
    for (ib, xb) in x.chunks_exact(16).enumerate() {
        let weight: [f32; 16] = group_weights(xb, Some(&qw[16 * ib..]), sigma2, |v| v);
        let waux = weight.map(f32::sqrt);
        let mut xval = [0.0f32; 16];
        let mut signs = [0u8; 2];
        even_sign_magnitudes(xb, &weight, &mut xval, &mut signs);
        let max = group_max(&xval);
        if max < GROUP_MAX_EPS {
            continue;
        }
        let mut fit = search.fit(&xval, &weight, &waux, max, max / 5.0);
        if fit.scale < 0.0 {
            fit.scale = -fit.scale;
            signs.iter_mut().for_each(|s| *s = !*s & 127);
        }
        for (k, (&p, &s)) in fit.points.iter().zip(&signs).enumerate() {
            let v = p | (u16::from(s) << 9);
            b.qs[4 * ib + 2 * k..4 * ib + 2 * k + 2].copy_from_slice(&v.to_le_bytes());
        }
        scales[ib] = fit.scale;
        max_scale = c_max(max_scale, fit.scale);
    }
    if max_scale == 0.0 {
        b.qs = [0; 64];
        return b;
    }
    let d = max_scale / 31.0;
    b.d = F16Bits::from_f32(d);
    let id = 1.0 / d;
    for (s, pair) in b.scales.iter_mut().zip(scales.chunks_exact(2)) {
        *s = scale_code(id, pair[0], 15) | (scale_code(id, pair[1], 15) << 4);
    }
    b
}
