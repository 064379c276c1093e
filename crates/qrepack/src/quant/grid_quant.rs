//! Quantizers of the grid types that ggml quantizes without an importance matrix: IQ3_XXS,
//! IQ3_S and IQ2_S, bit-compatible with ggml's searches (weights `x^2`, or for IQ2_S
//! `sigma^2 / 4 + x^2`, in place of the importance matrix).
//!
//! Each group of 32 (IQ3) or 16 (IQ2_S) weights is fitted by trying a range of inverse scales:
//! every sub-group of 4 or 8 magnitudes is rounded to levels, and a combination of levels that
//! is not a grid point is replaced by the best of its nearest grid points. The least-squares
//! scale of the best trial is kept and the groups' scales are then quantized to 4 bits under one
//! f16 block scale.

use std::ops::RangeInclusive;
use std::sync::OnceLock;

use super::grids::{IQ2S_GRID, IQ3S_GRID, IQ3XXS_GRID};
use super::nearest_int;
use crate::blocks::{BlockIq2S, BlockIq3S, BlockIq3Xxs, F16Bits};
use crate::types::QK_K;

/// The most weights a fitted group holds (IQ3's 32).
const MAX_GROUP: usize = 32;

/// A grid as the search uses it: points as levels `0..n`, and for every combination of levels
/// either the point it is or the points nearest to it.
struct Grid {
    /// Coordinates per point (4 or 8).
    dim: usize,
    /// Bits per coordinate in a combination's index.
    bits: usize,
    /// Levels of each point's coordinates, in grid order.
    points: Vec<[u8; 8]>,
    /// Per combination index: `Ok(point)` for a grid point, `Err(candidates)` otherwise.
    slots: Vec<Result<u16, Box<[u16]>>>,
}

impl Grid {
    /// Builds the search tables from a dequantization grid (one byte per coordinate; the byte
    /// values, in increasing order, are the levels). A combination off the grid gets every
    /// point at one of its `rings` smallest distances, nearest first and in grid order within a
    /// distance: the order decides ties between candidates.
    fn new(values: &[u64], dim: usize, bits: usize, rings: usize) -> Self {
        let mut distinct: Vec<u8> = values
            .iter()
            .flat_map(|v| v.to_le_bytes()[..dim].to_vec())
            .collect();
        distinct.sort_unstable();
        distinct.dedup();
        let points: Vec<[u8; 8]> = values
            .iter()
            .map(|v| {
                let mut p = [0u8; 8];
                for (l, b) in p.iter_mut().zip(&v.to_le_bytes()[..dim]) {
                    *l = distinct.binary_search(b).unwrap_or(0) as u8;
                }
                p
            })
            .collect();
        let levels = distinct.len();
        let index = |p: &[u8]| -> usize {
            p.iter()
                .enumerate()
                .map(|(i, &l)| usize::from(l) << (bits * i))
                .sum()
        };
        let mut slots: Vec<Result<u16, Box<[u16]>>> = (0..1usize << (bits * dim))
            .map(|_| Err(Box::default()))
            .collect();
        for (j, p) in points.iter().enumerate() {
            slots[index(&p[..dim])] = Ok(j as u16);
        }
        let mut dist: Vec<(u32, u16)> = Vec::with_capacity(points.len());
        for (u, slot) in slots.iter_mut().enumerate() {
            let wanted: Vec<u8> = (0..dim)
                .map(|i| ((u >> (bits * i)) & ((1 << bits) - 1)) as u8)
                .collect();
            // Searches clamp to the grid's levels: other combinations are never looked up.
            if slot.is_ok() || wanted.iter().any(|&l| usize::from(l) >= levels) {
                continue;
            }
            dist.clear();
            dist.extend(points.iter().enumerate().map(|(j, p)| {
                let d2 = p[..dim]
                    .iter()
                    .zip(&wanted)
                    .map(|(&a, &b)| (i32::from(a) - i32::from(b)).pow(2) as u32)
                    .sum();
                (d2, j as u16)
            }));
            dist.sort_unstable();
            let mut seen = 0;
            let mut last = None;
            let mut near = Vec::new();
            for &(d2, j) in &dist {
                if last != Some(d2) {
                    if seen == rings {
                        break;
                    }
                    seen += 1;
                    last = Some(d2);
                }
                near.push(j);
            }
            *slot = Err(near.into_boxed_slice());
        }
        Grid {
            dim,
            bits,
            points,
            slots,
        }
    }

    fn index(&self, levels: &[u8]) -> usize {
        levels
            .iter()
            .enumerate()
            .map(|(i, &l)| usize::from(l) << (self.bits * i))
            .sum()
    }

    /// The candidate whose points, scaled, are closest to `xval` in the `w`-weighted squared
    /// error (the first on ties). ggml stops when every error is NaN; the first candidate
    /// stands in for it here.
    fn best_candidate(&self, near: &[u16], xval: &[f32], w: &[f32], scale: f32) -> u16 {
        let mut best = f32::MAX;
        let mut pick = near.first().copied().unwrap_or(0);
        for &j in near {
            let p = &self.points[usize::from(j)];
            let mut d2 = 0.0f32;
            for i in 0..self.dim {
                let diff = scale * odd(p[i]) - xval[i];
                d2 += w[i] * diff * diff;
            }
            if d2 < best {
                best = d2;
                pick = j;
            }
        }
        pick
    }
}

/// The value `2 l + 1` that level `l` stands for.
#[inline]
fn odd(l: u8) -> f32 {
    f32::from(2 * l + 1)
}

fn iq3_xxs_grid() -> &'static Grid {
    static GRID: OnceLock<Grid> = OnceLock::new();
    GRID.get_or_init(|| {
        let v: Vec<u64> = IQ3XXS_GRID.iter().map(|&p| u64::from(p)).collect();
        Grid::new(&v, 4, 3, 2)
    })
}

fn iq3_s_grid() -> &'static Grid {
    static GRID: OnceLock<Grid> = OnceLock::new();
    GRID.get_or_init(|| {
        let v: Vec<u64> = IQ3S_GRID.iter().map(|&p| u64::from(p)).collect();
        Grid::new(&v, 4, 3, 3)
    })
}

fn iq2_s_grid() -> &'static Grid {
    static GRID: OnceLock<Grid> = OnceLock::new();
    GRID.get_or_init(|| Grid::new(&IQ2S_GRID, 8, 2, 1))
}

/// How one type searches a group's scale.
struct Search {
    grid: &'static Grid,
    /// Levels per coordinate (`kMaxQ`).
    max_q: i32,
    /// Trials `is`: inverse scales `(2 max_q - 1 + is * step) / max`.
    trials: RangeInclusive<i32>,
    step: f32,
    /// Whether sub-groups count as on the grid before any trial wins (then an all-zero fit
    /// skips the refit).
    start_on_grid: bool,
    /// Whether the refit redoes every sub-group or only those the best trial moved off grid.
    refit_all: bool,
}

/// The result of fitting one group: its scale and the grid point of each sub-group.
struct Fit {
    scale: f32,
    points: [u16; 8],
}

impl Search {
    /// Rounds the sub-groups of `xval` at inverse scale `id` to levels in `l`, replacing a
    /// combination off the grid with its best candidate at `scale`; returns whether each
    /// sub-group was on the grid. With `only`, the sub-groups it marks as on the grid keep
    /// their levels.
    fn round(
        &self,
        xval: &[f32],
        waux: &[f32],
        id: f32,
        scale: f32,
        l: &mut [u8],
        only: Option<&[bool; 8]>,
    ) -> [bool; 8] {
        let g = self.grid;
        let mut on = [true; 8];
        for (k, (ls, xs)) in l
            .chunks_exact_mut(g.dim)
            .zip(xval.chunks_exact(g.dim))
            .enumerate()
        {
            if only.is_some_and(|on_grid| on_grid[k]) {
                continue;
            }
            for (q, &x) in ls.iter_mut().zip(xs) {
                *q = nearest_int(0.5 * (id * x - 1.0)).clamp(0, self.max_q - 1) as u8;
            }
            if let Err(near) = &g.slots[g.index(ls)] {
                on[k] = false;
                let ws = &waux[k * g.dim..(k + 1) * g.dim];
                let p = g.best_candidate(near, xs, ws, scale);
                ls.copy_from_slice(&g.points[usize::from(p)][..g.dim]);
            }
        }
        on
    }

    /// The weighted sums `sum w x q` and `sum w q^2` of levels `l` against `xval`.
    fn sums(xval: &[f32], weight: &[f32], l: &[u8]) -> (f32, f32) {
        let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
        for ((&x, &w), &q) in xval.iter().zip(weight).zip(l) {
            let q = odd(q);
            sumqx += w * x * q;
            sumq2 += w * q * q;
        }
        (sumqx, sumq2)
    }

    /// Fits a group of magnitudes `xval` (largest `max`) with weights `weight` and their square
    /// roots `waux`.
    fn fit(&self, xval: &[f32], weight: &[f32], waux: &[f32], max: f32) -> Fit {
        let g = self.grid;
        let n = xval.len();
        let subgroups = n / g.dim;
        let top = (2 * self.max_q - 1) as f32;
        let mut l = [0u8; MAX_GROUP];
        let mut laux = [0u8; MAX_GROUP];
        let mut best = 0.0f32;
        let mut scale = max / top;
        let mut on_grid = [self.start_on_grid; 8];
        for is in self.trials.clone() {
            let id = (top + is as f32 * self.step) / max;
            let on = self.round(xval, waux, id, 1.0 / id, &mut laux[..n], None);
            let (sumqx, sumq2) = Self::sums(xval, weight, &laux[..n]);
            if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
                scale = sumqx / sumq2;
                best = scale * sumqx;
                l[..n].copy_from_slice(&laux[..n]);
                on_grid = on;
            }
        }
        if on_grid[..subgroups].iter().any(|&on| !on) && scale > 0.0 {
            let only = (!self.refit_all).then_some(&on_grid);
            self.round(xval, waux, 1.0 / scale, scale, &mut l[..n], only);
            let (sumqx, sumq2) = Self::sums(xval, weight, &l[..n]);
            if sumq2 > 0.0 {
                scale = sumqx / sumq2;
            }
        }
        let mut points = [0u16; 8];
        for (p, ls) in points.iter_mut().zip(l[..n].chunks_exact(g.dim)) {
            // Every combination kept is a grid point (the levels of the zero fit are too).
            *p = g.slots[g.index(ls)].as_ref().map_or(0, |&j| j);
        }
        Fit { scale, points }
    }
}

/// The magnitudes of `xb`, each 8 values' signs as a bit mask (bit `i` set for a negative value).
fn magnitudes(xb: &[f32], xval: &mut [f32], signs: &mut [u8]) {
    for ((xs, vs), s) in xb.chunks_exact(8).zip(xval.chunks_exact_mut(8)).zip(signs) {
        *s = 0;
        for (i, (&x, v)) in xs.iter().zip(vs.iter_mut()).enumerate() {
            if x >= 0.0 {
                *v = x;
            } else {
                *v = -x;
                *s |= 1 << i;
            }
        }
    }
}

/// ggml's `MAX(a, b)`: `a` only when it is strictly larger.
#[inline]
fn c_max(a: f32, b: f32) -> f32 {
    if a > b {
        a
    } else {
        b
    }
}

/// The largest of `xval`, folded as ggml does from the first value.
fn group_max(xval: &[f32]) -> f32 {
    xval[1..].iter().fold(xval[0], |m, &v| c_max(m, v))
}

/// The 4-bit code of a group scale under block step `d` (inverse `id`): `(s / d - 1) / 2`.
#[inline]
fn scale_code(id: f32, s: f32) -> u8 {
    nearest_int(0.5 * (id * s - 1.0)).clamp(0, 15) as u8
}

/// Smallest group maximum that IQ3_XXS and IQ2_S fit (ggml's `GROUP_MAX_EPS_IQ3_XXS` and
/// `GROUP_MAX_EPS_IQ2_S`).
const GRID_GROUP_EPS: f32 = 1e-8;

pub(super) fn q_iq3_xxs(x: &[f32]) -> BlockIq3Xxs {
    debug_assert_eq!(x.len(), QK_K);
    let search = Search {
        grid: iq3_xxs_grid(),
        max_q: 8,
        trials: -15..=15,
        step: 0.2,
        start_on_grid: true,
        refit_all: false,
    };
    let mut qs = [0u8; 96];
    let mut scales = [0.0f32; 8];
    let mut max_scale = 0.0f32;
    let mut words = [0u32; 8];
    for (ib, xb) in x.chunks_exact(32).enumerate() {
        let weight: [f32; 32] = std::array::from_fn(|i| xb[i] * xb[i]);
        let waux = weight.map(f32::sqrt);
        let mut xval = [0.0f32; 32];
        let mut signs = [0u8; 4];
        magnitudes(xb, &mut xval, &mut signs);
        // Only even sign patterns are stored (7 bits, the eighth is the parity): an odd one
        // gives up the sign of the value that costs the least.
        for (k, s) in signs.iter_mut().enumerate() {
            if s.count_ones() % 2 == 1 {
                let cost = |i: usize| weight[8 * k + i] * xb[8 * k + i] * xb[8 * k + i];
                let mut imin = 0;
                let mut min = cost(0);
                for i in 1..8 {
                    if cost(i) < min {
                        min = cost(i);
                        imin = i;
                    }
                }
                xval[8 * k + imin] = -xval[8 * k + imin];
                *s ^= 1 << imin;
            }
            *s &= 127;
        }
        let max = group_max(&xval);
        if max < GRID_GROUP_EPS {
            continue;
        }
        let mut fit = search.fit(&xval, &weight, &waux, max);
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
        let word = w | (u32::from(scale_code(id, scales[ib])) << 28);
        qs[64 + 4 * ib..68 + 4 * ib].copy_from_slice(&word.to_le_bytes());
    }
    BlockIq3Xxs {
        // ggml's fudge factor on the block scale
        d: F16Bits::from_f32(d * 1.0125),
        qs,
    }
}

pub(super) fn q_iq3_s(x: &[f32]) -> BlockIq3S {
    debug_assert_eq!(x.len(), QK_K);
    let search = Search {
        grid: iq3_s_grid(),
        max_q: 8,
        trials: -9..=9,
        step: 0.2,
        start_on_grid: false,
        refit_all: true,
    };
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
        let weight: [f32; 32] = std::array::from_fn(|i| xb[i] * xb[i]);
        let waux = weight.map(f32::sqrt);
        let mut xval = [0.0f32; 32];
        let mut signs = [0u8; 4];
        magnitudes(xb, &mut xval, &mut signs);
        let max = group_max(&xval);
        if max == 0.0 {
            continue;
        }
        let mut fit = search.fit(&xval, &weight, &waux, max);
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
        *s = scale_code(id, pair[0]) | (scale_code(id, pair[1]) << 4);
    }
    b
}

pub(super) fn q_iq2_s(x: &[f32]) -> BlockIq2S {
    debug_assert_eq!(x.len(), QK_K);
    let search = Search {
        grid: iq2_s_grid(),
        max_q: 3,
        trials: -9..=9,
        step: 0.1,
        start_on_grid: true,
        refit_all: false,
    };
    let mut b = BlockIq2S {
        d: F16Bits::from_f32(0.0),
        qs: [0; 64],
        qh: [0; 8],
        scales: [0; 8],
    };
    let sumx2 = x.iter().fold(0.0f32, |s, &v| s + v * v);
    let sigma2 = 2.0 * sumx2 / QK_K as f32;
    let mut scales = [0.0f32; 16];
    let mut max_scale = 0.0f32;
    for (ib, xb) in x.chunks_exact(16).enumerate() {
        let weight: [f32; 16] = std::array::from_fn(|i| 0.25 * sigma2 + xb[i] * xb[i]);
        let waux = weight.map(f32::sqrt);
        let mut xval = [0.0f32; 16];
        let mut signs = [0u8; 2];
        magnitudes(xb, &mut xval, &mut signs);
        let max = group_max(&xval);
        if max < GRID_GROUP_EPS {
            continue;
        }
        let mut fit = search.fit(&xval, &weight, &waux, max);
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
        *s = scale_code(id, pair[0]) | (scale_code(id, pair[1]) << 4);
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_points_are_in_increasing_index_order() {
        // ggml lists its grids by increasing combination index; the tables derived from the
        // dequantization grids must agree, or candidates would be tried in another order.
        for (grid, n, levels) in [
            (iq3_xxs_grid(), 256, 8),
            (iq3_s_grid(), 512, 8),
            (iq2_s_grid(), 1024, 3),
        ] {
            assert_eq!(grid.points.len(), n);
            let idx: Vec<usize> = grid
                .points
                .iter()
                .map(|p| grid.index(&p[..grid.dim]))
                .collect();
            assert!(idx.windows(2).all(|w| w[0] < w[1]));
            assert!(grid.points.iter().all(|p| p.iter().all(|&l| l < levels)));
            // every off-grid combination within the levels has candidates
            for (u, slot) in grid.slots.iter().enumerate() {
                let inside = (0..grid.dim)
                    .all(|i| (u >> (grid.bits * i)) & ((1 << grid.bits) - 1) < usize::from(levels));
                if let Err(near) = slot {
                    assert_eq!(!near.is_empty(), inside, "{u}");
                }
            }
        }
    }
}
