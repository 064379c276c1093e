//! The non-linear 4-bit types: IQ4_NL and IQ4_XS.

use super::grid_search::{group_weights, sum_squares};
use super::{nearest_int, nibble, signed_absmax, Real, GROUP_MAX_EPS};
use crate::blocks::{BlockIq4Nl, BlockIq4Xs, F16Bits, IQ4NL_LEVELS};
use crate::types::QK_K;

// ------------------------------------------------------------------------------------------------
// Dequantization
// ------------------------------------------------------------------------------------------------

pub(super) fn dq_iq4_nl<R: Real>(b: &BlockIq4Nl, y: &mut [R]) {
    let d = R::of_f16(b.d);
    for (j, v) in y.iter_mut().enumerate() {
        *v = d * R::of_int(i32::from(IQ4NL_LEVELS[usize::from(nibble(&b.qs, j))]));
    }
}

pub(super) fn dq_iq4_xs<R: Real>(b: &BlockIq4Xs, y: &mut [R]) {
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

// ------------------------------------------------------------------------------------------------
// Quantization
// ------------------------------------------------------------------------------------------------

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

/// The IQ4_NL scale of one 32-weight group: a weighted least-squares fit over 15 inverse
/// scales around `-levels[0] / max` (ggml's `quantize_row_iq4_nl_impl` search with `ntry = 7`),
/// weights `x^2`, or with the importance `qw` of the group `qw * sqrt(sigma2 + x^2)`.
fn iq4_group_scale(xb: &[f32], qw: Option<&[f32]>, sigma2: f32) -> f32 {
    const NTRY: i32 = 7;
    let (amax, max) = signed_absmax(xb);
    if amax < GROUP_MAX_EPS {
        return 0.0;
    }
    let v0 = f32::from(IQ4NL_LEVELS[0]);
    let weight: [f32; 32] = group_weights(xb, qw, sigma2, |v| v * v);
    let sums = |id: f32| {
        let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
        for (&v, &w) in xb.iter().zip(&weight) {
            let q = f32::from(IQ4NL_LEVELS[usize::from(best_level(id * v))]);
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

/// IQ4_NL, with importance `qw` (one per value of `x`) or without.
pub(super) fn q_iq4_nl(x: &[f32], qw: Option<&[f32]>) -> BlockIq4Nl {
    let d = iq4_group_scale(x, qw, 2.0 * sum_squares(x) / 32.0);
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

/// IQ4_XS, with importance `qw` (one per value of `x`) or without.
pub(super) fn q_iq4_xs(x: &[f32], qw: Option<&[f32]>) -> BlockIq4Xs {
    let mut scales = [0f32; 8];
    let (mut amax_scale, mut max_scale) = (0.0f32, 0.0f32);
    let sigma2 = 2.0 * sum_squares(x) / QK_K as f32;
    for (ib, (s, xb)) in scales.iter_mut().zip(x.chunks_exact(32)).enumerate() {
        *s = iq4_group_scale(xb, qw.map(|q| &q[32 * ib..32 * ib + 32]), sigma2);
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
