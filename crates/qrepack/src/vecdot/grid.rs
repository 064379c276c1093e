//! Dot products of the grid types (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) with
//! Q8_K rows, in the arithmetic of ggml's portable kernels: each block's integer sum of
//! `scale * Σ q·a` over its 32-weight groups is exact, then scaled in `f32` by `d_w·d_a` and
//! accumulated over blocks; the constant factor of the type's scales (1/8 for IQ2, 1/4 for
//! IQ3_XXS) multiplies the total once at the end, as ggml does.

use super::{idot, sum_blocks};
use crate::blocks::{
    BlockIq1M, BlockIq1S, BlockIq2S, BlockIq2Xs, BlockIq2Xxs, BlockIq3S, BlockIq3Xxs, BlockQ8K,
};
use crate::quant::grid::{
    iq1_m_group, iq1_m_scale, iq1_s_group, iq2_s_group, iq2_xs_group, iq2_xxs_group, iq3_s_group,
    iq3_xxs_group, GROUPS,
};

/// The odd scale `2 s + 1` of a 3- or 4-bit scale field.
#[inline]
fn odd(s: u8) -> i32 {
    2 * i32::from(s) + 1
}

/// The activations of group `g` (32 quants).
#[inline]
fn group(a: &BlockQ8K, g: usize) -> &[i8] {
    &a.qs[32 * g..32 * g + 32]
}

/// Block sum of the types with one scale per 32 weights.
#[inline]
fn one_scale_sum(a: &BlockQ8K, decode: impl Fn(usize) -> (u8, [i8; 32])) -> i32 {
    (0..GROUPS)
        .map(|g| {
            let (s, q) = decode(g);
            idot(&q, group(a, g)) * odd(s)
        })
        .sum()
}

/// Block sum of the types with one scale per 16 weights.
#[inline]
fn two_scale_sum(a: &BlockQ8K, decode: impl Fn(usize) -> ([u8; 2], [i8; 32])) -> i32 {
    (0..GROUPS)
        .map(|g| {
            let (s, q) = decode(g);
            let ag = group(a, g);
            odd(s[0]) * idot(&q[..16], &ag[..16]) + odd(s[1]) * idot(&q[16..], &ag[16..])
        })
        .sum()
}

/// IQ2_XXS · Q8_K: `1/8 · Σ_blocks d_w·d_a · Σ_groups (2 s + 1)·Σ q·a`.
pub fn vec_dot_iq2_xxs_q8_k(w: &[BlockIq2Xxs], a: &[BlockQ8K]) -> f32 {
    0.125
        * sum_blocks(w, a, |wb, ab| {
            wb.d.to_f32() * ab.d * one_scale_sum(ab, |g| iq2_xxs_group(wb, g)) as f32
        })
}

/// IQ2_XS · Q8_K: as IQ2_XXS with a scale per 16 weights.
pub fn vec_dot_iq2_xs_q8_k(w: &[BlockIq2Xs], a: &[BlockQ8K]) -> f32 {
    0.125
        * sum_blocks(w, a, |wb, ab| {
            wb.d.to_f32() * ab.d * two_scale_sum(ab, |g| iq2_xs_group(wb, g)) as f32
        })
}

/// IQ2_S · Q8_K: as IQ2_XS.
pub fn vec_dot_iq2_s_q8_k(w: &[BlockIq2S], a: &[BlockQ8K]) -> f32 {
    0.125
        * sum_blocks(w, a, |wb, ab| {
            wb.d.to_f32() * ab.d * two_scale_sum(ab, |g| iq2_s_group(wb, g)) as f32
        })
}

/// IQ3_XXS · Q8_K: `1/4 · Σ_blocks d_w·d_a · Σ_groups (2 s + 1)·Σ q·a`.
pub fn vec_dot_iq3_xxs_q8_k(w: &[BlockIq3Xxs], a: &[BlockQ8K]) -> f32 {
    0.25 * sum_blocks(w, a, |wb, ab| {
        wb.d.to_f32() * ab.d * one_scale_sum(ab, |g| iq3_xxs_group(wb, g)) as f32
    })
}

/// IQ3_S · Q8_K: `Σ_blocks d_w·d_a · Σ_groups (2 s + 1)·Σ q·a`.
pub fn vec_dot_iq3_s_q8_k(w: &[BlockIq3S], a: &[BlockQ8K]) -> f32 {
    sum_blocks(w, a, |wb, ab| {
        wb.d.to_f32() * ab.d * one_scale_sum(ab, |g| iq3_s_group(wb, g)) as f32
    })
}

/// IQ1_S · Q8_K: per block `d_w·d_a·(Σ ls·Σ q·a + 1/8 · Σ ls·(±1)·Σ a)`, the activation sums
/// taken from the Q8_K `bsums`.
pub fn vec_dot_iq1_s_q8_k(w: &[BlockIq1S], a: &[BlockQ8K]) -> f32 {
    sum_blocks(w, a, |wb, ab| {
        let (mut sumi, mut shifts) = (0i32, 0i32);
        for g in 0..GROUPS {
            let (s, negative, q) = iq1_s_group(wb, g);
            let ls = odd(s);
            sumi += ls * idot(&q, group(ab, g));
            let asum = i32::from(ab.bsums[2 * g]) + i32::from(ab.bsums[2 * g + 1]);
            shifts += ls * if negative { -asum } else { asum };
        }
        wb.d.to_f32() * ab.d * (sumi as f32 + 0.125 * shifts as f32)
    })
}

/// IQ1_M · Q8_K: as IQ1_S with a scale per 16 weights and a shift sign per 8.
pub fn vec_dot_iq1_m_q8_k(w: &[BlockIq1M], a: &[BlockQ8K]) -> f32 {
    sum_blocks(w, a, |wb, ab| {
        let (mut sumi, mut shifts) = (0i32, 0i32);
        for g in 0..GROUPS {
            let (s, negative, q) = iq1_m_group(wb, g);
            let ag = group(ab, g);
            for h in 0..2 {
                let ls = odd(s[h]);
                let (qh, ah) = (&q[16 * h..16 * h + 16], &ag[16 * h..16 * h + 16]);
                sumi += ls * idot(qh, ah);
                let shift: i32 = (0..2)
                    .map(|e| {
                        let asum: i32 = ah[8 * e..8 * e + 8].iter().map(|&v| i32::from(v)).sum();
                        if negative[2 * h + e] {
                            -asum
                        } else {
                            asum
                        }
                    })
                    .sum();
                shifts += ls * shift;
            }
        }
        iq1_m_scale(wb).to_f32() * ab.d * (sumi as f32 + 0.125 * shifts as f32)
    })
}
