//! The search tables and the scale search shared by the grid quantizers (`grid_quant.rs` for
//! IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S, `iq1_quant.rs` for IQ1_S and IQ1_M).
//!
//! ggml builds, once per grid, a map from every combination of levels to its grid point or to
//! the grid points nearest to it; [`Grid`] derives the same tables from the dequantization grids
//! of `grids.rs` on first use. [`Search`] is the trial-and-refit scale search of the 2- and 3-bit
//! types, parameterized by what differs between them.

use std::ops::RangeInclusive;
use std::sync::OnceLock;

use super::grids::{IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID};
use super::{nearest_int, GROUP_MAX_EPS};

/// The most weights a fitted group holds (IQ3's 32).
const MAX_GROUP: usize = 32;

/// A grid as the search uses it: points as levels `0..n`, and for every combination of levels
/// either the point it is or the points nearest to it.
pub(super) struct Grid {
    /// Coordinates per point (4 or 8).
    pub(super) dim: usize,
    /// Bits per coordinate in a combination's index.
    bits: usize,
    /// Levels of each point's coordinates, in grid order.
    pub(super) points: Vec<[u8; 8]>,
    /// Per combination index: `Ok(point)` for a grid point, `Err(candidates)` otherwise.
    pub(super) slots: Vec<Result<u16, Box<[u16]>>>,
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

    /// The index of a combination of levels (`bits` per coordinate, the first lowest).
    pub(super) fn index(&self, levels: &[u8]) -> usize {
        levels
            .iter()
            .enumerate()
            .map(|(i, &l)| usize::from(l) << (self.bits * i))
            .sum()
    }

    /// The grid point of a combination of levels, or `None` when it is off the grid.
    pub(super) fn point_of(&self, levels: &[u8]) -> Option<u16> {
        self.slots[self.index(levels)].as_ref().ok().copied()
    }

    /// The candidate whose points, as the values `value(level)` times `scale`, are closest to
    /// `xval` in the `w`-weighted squared error (the first on ties). ggml stops when every
    /// error is NaN or overflows; the first candidate stands in for it here.
    pub(super) fn best_candidate(
        &self,
        near: &[u16],
        xval: &[f32],
        w: &[f32],
        scale: f32,
        value: impl Fn(u8) -> f32,
    ) -> u16 {
        let mut best = f32::MAX;
        let mut pick = near.first().copied().unwrap_or(0);
        for &j in near {
            let p = &self.points[usize::from(j)];
            let mut d2 = 0.0f32;
            for i in 0..self.dim {
                let diff = scale * value(p[i]) - xval[i];
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
pub(super) fn odd(l: u8) -> f32 {
    f32::from(2 * l + 1)
}

/// Declares a function returning a grid's search tables, built on first use.
macro_rules! grid_tables {
    ($($(#[$m:meta])* $name:ident => $build:expr;)*) => {$(
        $(#[$m])*
        pub(super) fn $name() -> &'static Grid {
            static GRID: OnceLock<Grid> = OnceLock::new();
            GRID.get_or_init(|| $build)
        }
    )*};
}

/// The entries of a grid of 4-byte points as 8-byte ones.
fn widen(grid: &[u32]) -> Vec<u64> {
    grid.iter().map(|&p| u64::from(p)).collect()
}

grid_tables! {
    /// IQ3_XXS: 4 coordinates of 8 levels, candidates at the 2 nearest distances.
    iq3_xxs_grid => Grid::new(&widen(&IQ3XXS_GRID), 4, 3, 2);
    /// IQ3_S: 4 coordinates of 8 levels, candidates at the 3 nearest distances.
    iq3_s_grid => Grid::new(&widen(&IQ3S_GRID), 4, 3, 3);
    /// IQ2_S: 8 coordinates of 3 levels, candidates at the nearest distance.
    iq2_s_grid => Grid::new(&IQ2S_GRID, 8, 2, 1);
    /// IQ2_XXS: 8 coordinates of 3 levels, candidates at the 2 nearest distances.
    iq2_xxs_grid => Grid::new(&IQ2XXS_GRID, 8, 2, 2);
    /// IQ2_XS: 8 coordinates of 3 levels, candidates at the 2 nearest distances.
    iq2_xs_grid => Grid::new(&IQ2XS_GRID, 8, 2, 2);
    /// IQ1_S and IQ1_M: 8 coordinates of the signed bytes -1, 0, 1 (levels 0, 1, 2),
    /// candidates at the 3 nearest distances.
    iq1_grid => Grid::new(
        &IQ1S_GRID
            .iter()
            .map(|&p| u64::from_le_bytes(p.to_le_bytes().map(|b| (b as i8 + 1) as u8)))
            .collect::<Vec<_>>(),
        8,
        2,
        3,
    );
}

/// When [`Search::fit`] rounds a group again at the scale of its best trial.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Refit {
    /// Only the sub-groups the best trial moved off the grid, when there are any.
    OffGrid,
    /// Every sub-group, when the best trial moved any off the grid.
    AllWhenOffGrid,
    /// Every sub-group, always.
    Always,
}

/// Where the trials of [`Search::fit`] centre.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Start {
    /// On the group's largest magnitude, with `max / (2 max_q - 1)` as the fallback scale.
    Max,
    /// On the scale of ggml's `make_qp_quants` fit to `max_q + 1` levels (IQ2_XXS); a group
    /// whose fit is not positive is skipped.
    QpQuants,
}

/// Which sign patterns a type stores.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Signs {
    /// Any: 8 bits per 8 values.
    All,
    /// Even ones only, as 7 bits (see [`even_sign_magnitudes`]).
    Even,
}

/// How one type searches a group's scale.
pub(super) struct Search {
    pub(super) grid: &'static Grid,
    /// Levels per coordinate (`kMaxQ`).
    pub(super) max_q: i32,
    /// Trials `is`: inverse scales `(2 max_q - 1 + is * step) / max`.
    pub(super) trials: RangeInclusive<i32>,
    pub(super) step: f32,
    pub(super) start: Start,
    /// Whether sub-groups count as on the grid before any trial wins (then an all-zero fit
    /// skips the refit).
    pub(super) start_on_grid: bool,
    pub(super) refit: Refit,
    pub(super) signs: Signs,
    /// Groups whose largest magnitude is below this are not fitted.
    pub(super) eps: f32,
}

/// The result of fitting one group: its scale and the grid point of each sub-group.
pub(super) struct Fit {
    pub(super) scale: f32,
    pub(super) points: [u16; 8],
}

/// A fitted group as it is stored: its (non-negative) scale, the grid point of each sub-group
/// and the sign code of each 8 values.
pub(super) struct GroupFit {
    pub(super) scale: f32,
    pub(super) points: [u16; 8],
    pub(super) signs: [u8; 4],
}

/// Smallest group maximum that IQ3_XXS and IQ2_S fit (ggml's `GROUP_MAX_EPS_IQ3_XXS` and
/// `GROUP_MAX_EPS_IQ2_S`).
const GRID_GROUP_EPS: f32 = 1e-8;

impl Search {
    /// A search on `grid` with `max_q` levels per coordinate and trials `is` in `-9..=9` of
    /// `step`, as IQ2_S searches: centred on the largest magnitude, refitting only what the
    /// best trial moved off the grid, every sign pattern, groups from 1e-8 up.
    pub(super) fn new(grid: &'static Grid, max_q: i32, step: f32) -> Self {
        Search {
            grid,
            max_q,
            trials: -9..=9,
            step,
            start: Start::Max,
            start_on_grid: true,
            refit: Refit::OffGrid,
            signs: Signs::All,
            eps: GRID_GROUP_EPS,
        }
    }

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
                let p = g.best_candidate(near, xs, ws, scale, odd);
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

    /// Fits the group of values `xb` with weights `weight`, or `None` when it is too small (or
    /// its start scale is not positive). A negative scale is stored as its magnitude with every
    /// sign flipped.
    pub(super) fn fit_group<const N: usize>(
        &self,
        xb: &[f32],
        weight: &[f32; N],
    ) -> Option<GroupFit> {
        let waux = weight.map(f32::sqrt);
        let mut xval = [0.0f32; N];
        let mut signs = [0u8; 4];
        let codes = &mut signs[..N / 8];
        match self.signs {
            Signs::All => magnitudes(xb, &mut xval, codes),
            Signs::Even => even_sign_magnitudes(xb, weight, &mut xval, codes),
        }
        let max = group_max(&xval);
        if max < self.eps {
            return None;
        }
        let (trial_max, start) = match self.start {
            Start::Max => (max, max / (2 * self.max_q - 1) as f32),
            Start::QpQuants => {
                let scale = make_qp_scale(&xval, self.max_q + 1, weight);
                let eff_max = scale * self.max_q as f32;
                if eff_max <= 0.0 {
                    return None;
                }
                (eff_max, scale)
            }
        };
        let fit = self.fit(&xval, weight, &waux, trial_max, start);
        let mut scale = fit.scale;
        if scale < 0.0 {
            // Scales are stored unsigned: flip the signs instead.
            scale = -scale;
            let mask = if self.signs == Signs::Even { 127 } else { 255 };
            codes.iter_mut().for_each(|s| *s = !*s & mask);
        }
        Some(GroupFit {
            scale,
            points: fit.points,
            signs,
        })
    }

    /// Fits a group of magnitudes `xval` with weights `weight` and their square roots `waux`:
    /// the trials divide by `max`, and `scale` stands when no trial wins.
    fn fit(&self, xval: &[f32], weight: &[f32], waux: &[f32], max: f32, mut scale: f32) -> Fit {
        let g = self.grid;
        let n = xval.len();
        let subgroups = n / g.dim;
        let top = (2 * self.max_q - 1) as f32;
        let mut l = [0u8; MAX_GROUP];
        let mut laux = [0u8; MAX_GROUP];
        let mut best = 0.0f32;
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
        let refit = self.refit == Refit::Always || on_grid[..subgroups].iter().any(|&on| !on);
        if refit && scale > 0.0 {
            let only = (self.refit == Refit::OffGrid).then_some(&on_grid);
            self.round(xval, waux, 1.0 / scale, scale, &mut l[..n], only);
            let (sumqx, sumq2) = Self::sums(xval, weight, &l[..n]);
            if sumq2 > 0.0 {
                scale = sumqx / sumq2;
            }
        }
        let mut points = [0u16; 8];
        for (p, ls) in points.iter_mut().zip(l[..n].chunks_exact(g.dim)) {
            // Every combination kept is a grid point (the levels of the zero fit are too);
            // only non-finite input leaves other levels, which ggml aborts on.
            *p = g.point_of(ls).unwrap_or(0);
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

/// [`magnitudes`] for the types that store only even sign patterns (7 bits, the eighth is the
/// parity): an odd pattern gives up the sign of the value whose `weight x^2` is the smallest
/// (that magnitude turns negative), and the codes keep their low 7 bits.
fn even_sign_magnitudes(xb: &[f32], weight: &[f32], xval: &mut [f32], signs: &mut [u8]) {
    magnitudes(xb, xval, signs);
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
}

/// ggml's `MAX(a, b)`: `a` only when it is strictly larger.
#[inline]
pub(super) fn c_max(a: f32, b: f32) -> f32 {
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

/// The code of a group scale `s` under block step `d` (inverse `id`): `(s / d - 1) / 2`,
/// clamped to `0..=top`.
#[inline]
pub(super) fn scale_code(id: f32, s: f32, top: i32) -> u8 {
    nearest_int(0.5 * (id * s - 1.0)).clamp(0, top) as u8
}

/// `sum x^2` over a block, in order.
pub(super) fn sum_squares(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |s, &v| s + v * v)
}

/// The weights of a group: with an importance matrix `qw`, ggml's `qw * sqrt(sigma2 + x^2)`;
/// without, `plain(x)`.
pub(super) fn group_weights<const N: usize>(
    xb: &[f32],
    qw: Option<&[f32]>,
    sigma2: f32,
    plain: impl Fn(f32) -> f32,
) -> [f32; N] {
    std::array::from_fn(|i| match qw {
        Some(q) => q[i] * (sigma2 + xb[i] * xb[i]).sqrt(),
        None => plain(xb[i]),
    })
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
            (iq2_xxs_grid(), 256, 3),
            (iq2_xs_grid(), 512, 3),
            (iq1_grid(), 2048, 3),
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

    #[test]
    fn iq1_levels_follow_the_signed_bytes() {
        // the first IQ1_S point is all -1 (level 0), and level 2 stands for +1
        let g = iq1_grid();
        assert_eq!(g.points[0], [0; 8]);
        let last = IQ1S_GRID[2047].to_le_bytes();
        for (l, b) in g.points[2047].iter().zip(last) {
            assert_eq!(i32::from(*l) - 1, i32::from(b as i8));
        }
    }
}
