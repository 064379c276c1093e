//! Quantizers of the 1.5-bit grid types IQ1_S and IQ1_M with an importance matrix,
//! bit-compatible with ggml's.
//!
//! A group (32 weights for IQ1_S, 16 for IQ1_M) takes the values `-1, 0, 1` shifted by
//! `±1/8`; with three values, the best split of the sorted weights into three runs is found
//! exhaustively (the least-squares scale of every split and shift). Each 8 weights must then be
//! a grid point: a combination off the grid is replaced by its best neighbour, and the scale is
//! refitted. Group scales are stored as 3 bits under one f16 block scale.

use super::grid_search::{c_max, group_weights, iq1_grid, scale_code, sum_squares, Grid};
use crate::blocks::{BlockIq1M, BlockIq1S, F16Bits};
use crate::types::QK_K;

/// The shift of the grid values (ggml's `IQ1S_DELTA`, `IQ1M_DELTA`).
const DELTA: f32 = 0.125;
/// The values of levels 0, 1, 2 shifted up and down.
const PLUS: [f32; 3] = [-1.0 + DELTA, DELTA, 1.0 + DELTA];
const MINUS: [f32; 3] = [-1.0 - DELTA, -DELTA, 1.0 - DELTA];

/// The positions of `xb` in increasing order of value, equal values in position order (ggml
/// sorts with the C library's `qsort`, which glibc implements as a stable merge sort; zeros
/// of either sign are equal, NaN is put anywhere without panicking).
fn sorted_positions<const N: usize>(xb: &[f32]) -> [usize; N] {
    let mut order: [usize; N] = std::array::from_fn(|i| i);
    // `+ 0.0` turns -0 into +0, so the total order agrees with `<` on every other value.
    order.sort_by(|&a, &b| (xb[a] + 0.0).total_cmp(&(xb[b] + 0.0)));
    order
}

/// The levels of a split of the sorted positions `order`: level 0 below `i1`, 1 up to `i2`, 2 after.
fn split_levels<const N: usize>(order: &[usize; N], i1: usize, i2: usize) -> [u8; N] {
    let mut l = [0u8; N];
    for (j, &i) in order.iter().enumerate() {
        l[i] = u8::from(j >= i1) + u8::from(j >= i2);
    }
    l
}

/// Puts each 8 levels of `l` on the grid: its point, or the neighbour closest to `xb` at
/// `scale` with the values of `values(k)` for the `k`-th 8 weights. Returns the grid indices and
/// whether every combination was a grid point.
fn grid_points<const M: usize>(
    g: &Grid,
    l: &[u8],
    xb: &[f32],
    weight: &[f32],
    scale: f32,
    values: impl Fn(usize) -> &'static [f32; 3],
) -> ([u16; M], bool) {
    let mut index = [0u16; M];
    let mut all_on = true;
    for (k, idx) in index.iter_mut().enumerate() {
        let r = 8 * k..8 * k + 8;
        *idx = match &g.slots[g.index(&l[r.clone()])] {
            Ok(p) => *p,
            Err(near) => {
                all_on = false;
                let xx = values(k);
                g.best_candidate(near, &xb[r.clone()], &weight[r], scale, |q| {
                    xx[usize::from(q)]
                })
            }
        };
    }
    (index, all_on)
}

/// The least-squares scale of `xb` against grid points `index` with the values of `values(k)`,
/// if it is positive.
fn refit_scale(
    g: &Grid,
    index: &[u16],
    xb: &[f32],
    weight: &[f32],
    values: impl Fn(usize) -> &'static [f32; 3],
) -> Option<f32> {
    let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
    for (k, &p) in index.iter().enumerate() {
        let xx = values(k);
        for (j, &l) in g.points[usize::from(p)][..8].iter().enumerate() {
            let (w, q) = (weight[8 * k + j], xx[usize::from(l)]);
            sumqx += w * q * xb[8 * k + j];
            sumq2 += w * q * q;
        }
    }
    (sumqx > 0.0 && sumq2 > 0.0).then(|| sumqx / sumq2)
}

/// The largest magnitude of `xb`, folded as ggml does from the first value.
fn abs_max(xb: &[f32]) -> f32 {
    xb[1..].iter().fold(xb[0].abs(), |m, &v| c_max(m, v.abs()))
}

/// Smallest group magnitude IQ1_S fits (ggml's `GROUP_MAX_EPS_IQ1_S`).
const IQ1_S_EPS: f32 = 1e-12;
/// Smallest group magnitude IQ1_M fits (ggml's `GROUP_MAX_EPS_IQ1_M`).
const IQ1_M_EPS: f32 = 1e-7;

/// IQ1_S with importance `qw` (one per value of `x`).
pub(super) fn q_iq1_s(x: &[f32], qw: &[f32]) -> BlockIq1S {
    debug_assert_eq!(x.len(), QK_K);
    let g = iq1_grid();
    let mut b = BlockIq1S {
        d: F16Bits::from_f32(0.0),
        qs: [0; 32],
        qh: [0; 16],
    };
    let sigma2 = 2.0 * sum_squares(x) / QK_K as f32;
    let mut scales = [0.0f32; 8];
    let mut minus = [false; 8];
    let mut max_scale = 0.0f32;
    for (ib, xb) in x.chunks_exact(32).enumerate() {
        let weight: [f32; 32] = group_weights(xb, Some(&qw[32 * ib..]), sigma2, |v| v);
        if abs_max(xb) < IQ1_S_EPS {
            continue;
        }
        let order = sorted_positions::<32>(xb);
        let (mut sumx, mut sumw) = ([0.0f32; 33], [0.0f32; 33]);
        for (j, &i) in order.iter().enumerate() {
            sumx[j + 1] = sumx[j] + weight[i] * xb[i];
            sumw[j + 1] = sumw[j] + weight[i];
        }
        // the best split and shift by least squares, the first found on ties
        let mut best_score = -f32::MAX;
        let mut best: Option<(usize, usize, bool)> = None;
        let mut scale = 0.0f32;
        for i1 in 0..=32 {
            for i2 in i1..=32 {
                let (x0, x1, x2) = (sumx[i1] - sumx[0], sumx[i2] - sumx[i1], sumx[32] - sumx[i2]);
                let (w0, w1, w2) = (sumw[i1] - sumw[0], sumw[i2] - sumw[i1], sumw[32] - sumw[i2]);
                for (neg, v) in [(false, &PLUS), (true, &MINUS)] {
                    let sumqx = x0 * v[0] + x1 * v[1] + x2 * v[2];
                    let sumq2 = w0 * v[0] * v[0] + w1 * v[1] * v[1] + w2 * v[2] * v[2];
                    if sumq2 > 0.0 && sumqx * sumqx > best_score * sumq2 {
                        scale = sumqx / sumq2;
                        best_score = scale * sumqx;
                        best = Some((i1, i2, neg));
                    }
                }
            }
        }
        let Some((i1, i2, mut neg)) = best else {
            continue;
        };
        let mut l = split_levels(&order, i1, i2);
        if scale < 0.0 {
            l.iter_mut().for_each(|q| *q = 2 - *q);
            scale = -scale;
            neg = !neg;
        }
        let values = |_| if neg { &MINUS } else { &PLUS };
        let (index, all_on) = grid_points::<4>(g, &l, xb, &weight, scale, values);
        if !all_on {
            if let Some(s) = refit_scale(g, &index, xb, &weight, values) {
                scale = s;
            }
        }
        let mut h = 0u16;
        for (k, &p) in index.iter().enumerate() {
            b.qs[4 * ib + k] = p as u8;
            h |= (p >> 8) << (3 * k);
        }
        b.qh[2 * ib..2 * ib + 2].copy_from_slice(&h.to_le_bytes());
        scales[ib] = scale;
        minus[ib] = neg;
        max_scale = c_max(max_scale, scale);
    }
    if max_scale == 0.0 {
        return b;
    }
    let d = max_scale / 15.0;
    // ggml's fudge factor on the block scale
    b.d = F16Bits::from_f32(d * 1.125);
    let id = 1.0 / d;
    for (ib, (&s, &neg)) in scales.iter().zip(&minus).enumerate() {
        let code = scale_code(id, s, 7) | if neg { 8 } else { 0 };
        b.qh[2 * ib + 1] |= code << 4;
    }
    b
}

/// The values of the two halves of an IQ1_M group under shift choice `k` (bit 1: the first
/// half shifted down, bit 0: the second).
fn iq1_m_values(k: u8, half: usize) -> &'static [f32; 3] {
    let down = if half == 0 { k & 2 != 0 } else { k & 1 != 0 };
    if down {
        &MINUS
    } else {
        &PLUS
    }
}

/// IQ1_M with importance `qw` (one per value of `x`).
pub(super) fn q_iq1_m(x: &[f32], qw: &[f32]) -> BlockIq1M {
    debug_assert_eq!(x.len(), QK_K);
    let g = iq1_grid();
    let mut b = BlockIq1M {
        qs: [0; 32],
        qh: [0; 16],
        scales: [0; 8],
    };
    let sigma2 = 2.0 * sum_squares(x) / QK_K as f32;
    let mut scales = [0.0f32; 16];
    let mut shifts = [0u8; 16];
    let mut indices = [[0u16; 2]; 16];
    let mut max_scale = 0.0f32;
    for (ib, xb) in x.chunks_exact(16).enumerate() {
        let weight: [f32; 16] = group_weights(xb, Some(&qw[16 * ib..]), sigma2, |v| v);
        if abs_max(xb) < IQ1_M_EPS {
            continue;
        }
        let order = sorted_positions::<16>(xb);
        let mut best_score = -f32::MAX;
        let mut best: Option<(usize, usize, u8)> = None;
        let mut scale = 0.0f32;
        for i1 in 0..=16 {
            for i2 in i1..=16 {
                // sums per shift choice, accumulated in sorted order as ggml does
                let (mut sumqx, mut sumq2) = ([0.0f32; 4], [0.0f32; 4]);
                for (j, &i) in order.iter().enumerate() {
                    let level = usize::from(j >= i1) + usize::from(j >= i2);
                    for k in 0..4u8 {
                        let v = iq1_m_values(k, i / 8)[level];
                        let k = usize::from(k);
                        sumqx[k] += weight[i] * v * xb[i];
                        sumq2[k] += weight[i] * v * v;
                    }
                }
                for k in 0..4 {
                    if sumq2[k] > 0.0 && sumqx[k] * sumqx[k] > best_score * sumq2[k] {
                        scale = sumqx[k] / sumq2[k];
                        best_score = scale * sumqx[k];
                        best = Some((i1, i2, k as u8));
                    }
                }
            }
        }
        let Some((i1, i2, mut k)) = best else {
            continue;
        };
        let mut l = split_levels(&order, i1, i2);
        if scale < 0.0 {
            l.iter_mut().for_each(|q| *q = 2 - *q);
            scale = -scale;
            k = 3 - k;
        }
        let values = |half| iq1_m_values(k, half);
        let (index, all_on) = grid_points::<2>(g, &l, xb, &weight, scale, values);
        if !all_on {
            if let Some(s) = refit_scale(g, &index, xb, &weight, values) {
                scale = s;
            }
        }
        b.qs[2 * ib] = index[0] as u8;
        b.qs[2 * ib + 1] = index[1] as u8;
        b.qh[ib] = (index[0] >> 8) as u8 | ((index[1] >> 8) as u8) << 4;
        indices[ib] = index;
        scales[ib] = scale;
        shifts[ib] = k;
        max_scale = c_max(max_scale, scale);
    }
    if max_scale == 0.0 {
        return b;
    }
    let mut d = max_scale / 15.0;
    let id = 1.0 / d;
    let mut sc = [0u16; 4];
    // The block scale is refitted to the quantized group scales, over every group (those not
    // fitted count as grid point 0 with the upward shift, as ggml leaves them).
    let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
    for (ib, xb) in x.chunks_exact(16).enumerate() {
        let l = scale_code(id, scales[ib], 7);
        sc[ib / 4] |= u16::from(l) << (3 * (ib % 4));
        b.qh[ib] |= [0x00, 0x80, 0x08, 0x88][usize::from(shifts[ib])];
        let weight: [f32; 16] = group_weights(xb, Some(&qw[16 * ib..]), sigma2, |v| v);
        let mul = f32::from(2 * l + 1);
        for (half, &p) in indices[ib].iter().enumerate() {
            let xx = iq1_m_values(shifts[ib], half);
            for (j, &q) in g.points[usize::from(p)][..8].iter().enumerate() {
                let (w, q) = (weight[8 * half + j], xx[usize::from(q)] * mul);
                sumqx += w * q * xb[8 * half + j];
                sumq2 += w * q * q;
            }
        }
    }
    if sumq2 > 0.0 {
        d = sumqx / sumq2;
    }
    // ggml's fudge factor on the block scale, whose f16 bits go to the top nibbles
    let s = u16::from_le_bytes(F16Bits::from_f32(d * 1.1125).0);
    for (i, v) in sc.iter_mut().enumerate() {
        *v |= ((s >> (4 * i)) & 0xf) << 12;
        b.scales[2 * i..2 * i + 2].copy_from_slice(&v.to_le_bytes());
    }
    b
}
