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
    c_max, group_weights, iq2_s_grid, iq2_xs_grid, iq2_xxs_grid, iq3_s_grid, iq3_xxs_grid,
    scale_code, sum_squares, GroupFit, Refit, Search, Signs, Start,
};
use super::GROUP_MAX_EPS;
use crate::blocks::{BlockIq2S, BlockIq2Xs, BlockIq2Xxs, BlockIq3S, BlockIq3Xxs, F16Bits};
use crate::types::QK_K;

/// The group scales of a block and the largest of them (0 when no group was fitted).
struct BlockScales {
    scales: [f32; 16],
    max: f32,
}

impl BlockScales {
    /// The 4-bit codes of the group scales under the block step `max / 31`, two to a byte (the
    /// even group in the low nibble), and that step; `None` when no group was fitted.
    fn nibble_pairs(&self, n: usize) -> Option<([u8; 8], f32)> {
        if self.max == 0.0 {
            return None;
        }
        let d = self.max / 31.0;
        let id = 1.0 / d;
        let mut out = [0u8; 8];
        for (o, pair) in out.iter_mut().zip(self.scales[..n].chunks_exact(2)) {
            *o = scale_code(id, pair[0], 15) | (scale_code(id, pair[1], 15) << 4);
        }
        Some((out, d))
    }
}

/// Fits every group of `N` values of block `x`, with the weights `weights(ib, xb)` of group
/// `ib`, and hands each fitted group to `put`.
fn fit_groups<const N: usize>(
    search: &Search,
    x: &[f32],
    weights: impl Fn(usize, &[f32]) -> [f32; N],
    mut put: impl FnMut(usize, &GroupFit),
) -> BlockScales {
    let mut s = BlockScales {
        scales: [0.0; 16],
        max: 0.0,
    };
    for (ib, xb) in x.chunks_exact(N).enumerate() {
        let Some(fit) = search.fit_group(xb, &weights(ib, xb)) else {
            continue;
        };
        put(ib, &fit);
        s.scales[ib] = fit.scale;
        s.max = c_max(s.max, fit.scale);
    }
    s
}

/// ggml's weights of a group of `N` values without an importance matrix, `plain(x)`, or with
/// the importance `qw` of the block, `qw * sqrt(sigma2 + x^2)`.
fn weights_of<'a, const N: usize>(
    qw: Option<&'a [f32]>,
    sigma2: f32,
    plain: impl Fn(f32) -> f32 + Copy + 'a,
) -> impl Fn(usize, &[f32]) -> [f32; N] + 'a {
    move |ib, xb| group_weights(xb, qw.map(|q| &q[N * ib..N * (ib + 1)]), sigma2, plain)
}

/// `2 sum x^2 / 256`, the variance term of the importance weights of most grid types.
fn sigma2_of(x: &[f32]) -> f32 {
    2.0 * sum_squares(x) / QK_K as f32
}

/// The little-endian word of four 7-bit sign codes, `k`-th at bit `7 k`.
fn sign_word(signs: &[u8]) -> u32 {
    signs
        .iter()
        .enumerate()
        .fold(0, |w, (k, &s)| w | (u32::from(s) << (7 * k)))
}

/// IQ3_XXS, with importance `qw` (one per value of `x`) or without.
pub(super) fn q_iq3_xxs(x: &[f32], qw: Option<&[f32]>) -> BlockIq3Xxs {
    debug_assert_eq!(x.len(), QK_K);
    let search = Search {
        trials: -15..=15,
        signs: Signs::Even,
        ..Search::new(iq3_xxs_grid(), 8, 0.2)
    };
    let mut qs = [0u8; 96];
    let mut words = [0u32; 8];
    let weights = weights_of::<32>(qw, sigma2_of(x), |v| v * v);
    let s = fit_groups(&search, x, weights, |ib, fit| {
        for (q, &p) in qs[8 * ib..8 * ib + 8].iter_mut().zip(&fit.points) {
            *q = p as u8;
        }
        words[ib] = sign_word(&fit.signs);
    });
    if s.max == 0.0 {
        return BlockIq3Xxs {
            d: F16Bits::from_f32(0.0),
            qs: [0; 96],
        };
    }
    let d = s.max / 31.0;
    let id = 1.0 / d;
    for (ib, w) in words.iter().enumerate() {
        let word = w | (u32::from(scale_code(id, s.scales[ib], 15)) << 28);
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
        start_on_grid: false,
        refit: Refit::AllWhenOffGrid,
        // only all-zero groups are skipped
        eps: f32::from_bits(1),
        ..Search::new(iq3_s_grid(), 8, 0.2)
    };
    let mut b = BlockIq3S {
        d: F16Bits::from_f32(0.0),
        qs: [0; 64],
        qh: [0; 8],
        signs: [0; 32],
        scales: [0; 4],
    };
    // ggml advances its write positions for `qs` and `signs` only past groups it fitted, so the
    // groups after an all-zero one move up: their bytes are written where ggml writes them.
    let mut written = 0usize;
    let weights = weights_of::<32>(qw, sigma2_of(x), |v| v * v);
    let s = fit_groups(&search, x, weights, |ib, fit| {
        for (k, &p) in fit.points.iter().enumerate() {
            b.qs[8 * written + k] = p as u8;
            b.qh[ib] |= ((p >> 8) as u8) << k;
        }
        b.signs[4 * written..4 * written + 4].copy_from_slice(&fit.signs);
        written += 1;
    });
    if let Some((pairs, d)) = s.nibble_pairs(8) {
        b.d = F16Bits::from_f32(d * 1.033);
        b.scales.copy_from_slice(&pairs[..4]);
    }
    b
}

/// IQ2_S, with importance `qw` (one per value of `x`) or without.
pub(super) fn q_iq2_s(x: &[f32], qw: Option<&[f32]>) -> BlockIq2S {
    debug_assert_eq!(x.len(), QK_K);
    let search = Search::new(iq2_s_grid(), 3, 0.1);
    let mut b = BlockIq2S {
        d: F16Bits::from_f32(0.0),
        qs: [0; 64],
        qh: [0; 8],
        scales: [0; 8],
    };
    let sigma2 = sigma2_of(x);
    let weights = weights_of::<16>(qw, sigma2, move |v| 0.25 * sigma2 + v * v);
    let s = fit_groups(&search, x, weights, |ib, fit| {
        for (k, (&p, &sg)) in fit.points.iter().zip(&fit.signs[..2]).enumerate() {
            let i8 = 2 * ib + k;
            b.qs[i8] = p as u8;
            b.qh[i8 / 4] |= ((p >> 8) as u8) << (2 * (i8 % 4));
            b.qs[QK_K / 8 + i8] = sg;
        }
    });
    if let Some((pairs, d)) = s.nibble_pairs(16) {
        b.d = F16Bits::from_f32(d * 0.9875);
        b.scales = pairs;
    }
    b
}

/// IQ2_XXS with importance `qw` (one per value of `x`).
pub(super) fn q_iq2_xxs(x: &[f32], qw: &[f32]) -> BlockIq2Xxs {
    debug_assert_eq!(x.len(), QK_K);
    let search = Search {
        trials: -6..=6,
        start: Start::QpQuants,
        refit: Refit::Always,
        signs: Signs::Even,
        eps: GROUP_MAX_EPS,
        ..Search::new(iq2_xxs_grid(), 3, 0.1)
    };
    let mut qs = [0u8; 64];
    let weights = weights_of::<32>(Some(qw), sum_squares(x) / QK_K as f32, |v| v);
    let s = fit_groups(&search, x, weights, |ib, fit| {
        let group = &mut qs[8 * ib..8 * ib + 8];
        for (q, &p) in group.iter_mut().zip(&fit.points) {
            *q = p as u8;
        }
        group[4..].copy_from_slice(&sign_word(&fit.signs).to_le_bytes());
    });
    if s.max == 0.0 {
        return BlockIq2Xxs {
            d: F16Bits::from_f32(0.0),
            qs: [0; 64],
        };
    }
    let d = s.max / 31.0;
    let id = 1.0 / d;
    for (ib, &sc) in s.scales[..8].iter().enumerate() {
        qs[8 * ib + 7] |= scale_code(id, sc, 15) << 4;
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
        signs: Signs::Even,
        eps: GROUP_MAX_EPS,
        ..Search::new(iq2_xs_grid(), 3, 0.1)
    };
    let mut b = BlockIq2Xs {
        d: F16Bits::from_f32(0.0),
        qs: [0; 64],
        scales: [0; 8],
    };
    let weights = weights_of::<16>(Some(qw), sum_squares(x) / QK_K as f32, |v| v);
    let s = fit_groups(&search, x, weights, |ib, fit| {
        for (k, (&p, &sg)) in fit.points.iter().zip(&fit.signs[..2]).enumerate() {
            let v = p | (u16::from(sg) << 9);
            b.qs[4 * ib + 2 * k..4 * ib + 2 * k + 2].copy_from_slice(&v.to_le_bytes());
        }
    });
    match s.nibble_pairs(16) {
        Some((pairs, d)) => {
            b.d = F16Bits::from_f32(d);
            b.scales = pairs;
        }
        // ggml clears the indices of groups fitted to a zero scale
        None => b.qs = [0; 64],
    }
    b
}
