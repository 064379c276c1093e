//! NEON kernels of the plain layout for the grid types (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
//! IQ1_S, IQ1_M) against Q8_K.
//!
//! A block is walked group by group (32 weights, two vectors): the group's grid points are read
//! from their tables into the two vectors, signed, and summed against the activations with
//! [`Dot16`]; the group's odd scale multiplies the four `i32` lanes (`mla`), which are
//! converted and scaled once per block. The 7-bit sign codes of IQ2_XXS, IQ2_XS and IQ3_XXS are
//! turned into sign bytes for the whole block at once: their eighth bit is the parity of the
//! seven (`cnt`), as `KSIGNS_IQ2XS` has it.
//!
//! # Exactness
//!
//! Every block's integer sum is exact and equal to that of the portable kernels
//! (`crate::vecdot::grid`); only the order of the `f32` scaling and accumulation differs, and a
//! type's constant factor (1/8, 1/4) is taken into the block's scale (a power of two: exact).
//!
//! * IQ2 and IQ3 weights are signed grid values (`|w| <= 62`, negated by xor and subtract of
//!   the sign mask, exact since the grid values are positive bytes), and [`Dot16`] sums any
//!   byte products exactly, `-128` activations included. A lane holds at most 64 products of
//!   `62 · 128` times a scale of 31: below `2^24`, so even its conversion to `f32` is exact.
//! * IQ1 weights are `ls·(q + δ/8)` with `q` in {-1, 0, 1} and `δ = ±1`; eight times that is
//!   the integer `ls·(8 q + δ)`, so the kernels multiply the bytes `8 q + δ` with the
//!   activations (no separate activation sums) and the block's scale carries the 1/8.

use std::arch::aarch64::*;

use super::dot::{dot_rows, le_u16, le_u32, sub, Dot16, Widening};
use crate::blocks::{BlockIq1M, BlockIq1S, BlockIq2S, BlockIq2Xs, BlockIq2Xxs, BlockIq3S};
use crate::blocks::{BlockIq3Xxs, BlockQ8K, F16Bits};
use crate::cpu::KernelSet;
use crate::kernels::aarch64::rows4::{load16, splat_f16};
use crate::kernels::aarch64::Neon;
use crate::quant::grid::iq1_m_scale;
use crate::quant::grids::{IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID};

/// The odd scale `2 s + 1` of a 3- or 4-bit scale field.
#[inline(always)]
fn odd(s: u32) -> i32 {
    2 * (s & 0x0f) as i32 + 1
}

/// Two 8-byte grid points as one vector (`p0` in bytes 0..8).
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn points(p0: u64, p1: u64) -> int8x16_t {
    // SAFETY: NEON, the caller's contract.
    unsafe { vcombine_s8(vcreate_s8(p0), vcreate_s8(p1)) }
}

/// Four 4-byte grid points as one vector.
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn points4(p: [u32; 4]) -> int8x16_t {
    let pair = |lo: u32, hi: u32| u64::from(lo) | (u64::from(hi) << 32);
    // SAFETY: NEON, the caller's contract.
    unsafe { points(pair(p[0], p[1]), pair(p[2], p[3])) }
}

/// Sign bytes from 7-bit sign codes (one per byte; the top bit of each byte must be clear):
/// the code with its parity as the eighth bit, so that every 8 weights have an even number of
/// negated ones.
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn sign_bytes(codes: uint8x16_t) -> uint8x16_t {
    // SAFETY: NEON, the caller's contract.
    unsafe { vorrq_u8(codes, vshlq_n_u8::<7>(vcntq_u8(codes))) }
}

/// The four 7-bit sign codes of each of four words (bits `7l..7l + 7` as byte `l`), as sign
/// bytes.
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn word_signs(words: uint32x4_t) -> uint32x4_t {
    // SAFETY: NEON, the caller's contract.
    unsafe {
        let c0 = vandq_u32(words, vdupq_n_u32(0x7f));
        let c1 = vandq_u32(vshlq_n_u32::<1>(words), vdupq_n_u32(0x7f00));
        let c2 = vandq_u32(vshlq_n_u32::<2>(words), vdupq_n_u32(0x7f_0000));
        let c3 = vandq_u32(vshlq_n_u32::<3>(words), vdupq_n_u32(0x7f00_0000));
        let codes = vorrq_u32(vorrq_u32(c0, c1), vorrq_u32(c2, c3));
        vreinterpretq_u32_u8(sign_bytes(vreinterpretq_u8_u32(codes)))
    }
}

/// The sign words of eight groups (one byte per 8 weights) from two vectors of four.
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn store_words(v: [uint32x4_t; 2]) -> [u32; 8] {
    let mut out = [0u32; 8];
    // SAFETY: NEON, the caller's contract; `out` holds 8 words.
    unsafe {
        vst1q_u32(out.as_mut_ptr(), v[0]);
        vst1q_u32(out[4..].as_mut_ptr(), v[1]);
    }
    out
}

/// The 32 weights of a group (grid magnitudes `g[0]`, `g[1]`) with byte `l` of `signs`
/// negating weights `8l..8l + 8` where its bits are set.
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn signed(g: [int8x16_t; 2], signs: u32) -> [int8x16_t; 2] {
    // SAFETY: NEON, the caller's contract.
    unsafe {
        let bits = vreinterpretq_u8_u64(vdupq_n_u64(0x8040_2010_0804_0201));
        let v = vreinterpretq_u8_u32(vdupq_n_u32(signs));
        let spread = vcombine_u8(vdup_n_u8(0), vdup_n_u8(1));
        let apply = |g: int8x16_t, idx: uint8x16_t| {
            let m = vreinterpretq_s8_u8(vtstq_u8(vqtbl1q_u8(v, idx), bits));
            vsubq_s8(veorq_s8(g, m), m)
        };
        [
            apply(g[0], spread),
            apply(g[1], vaddq_u8(spread, vdupq_n_u8(2))),
        ]
    }
}

/// `acc` plus the sums of a group's two halves against the activations of group `g`, each
/// times its scale (`split`, a constant of the type), or their total times the one scale of the group.
///
/// # Safety
/// The CPU must have NEON and what `D` needs.
#[inline(always)]
unsafe fn group_dot<D: Dot16>(
    split: bool,
    acc: int32x4_t,
    w: [int8x16_t; 2],
    a: &BlockQ8K,
    g: usize,
    scales: [i32; 2],
) -> int32x4_t {
    // SAFETY: the caller's features; `g < 8` keeps the loads inside `a.qs`.
    unsafe {
        let zero = vdupq_n_s32(0);
        let lo = D::dot16(zero, w[0], load16(&a.qs, 2 * g));
        if split {
            let acc = vmlaq_n_s32(acc, lo, scales[0]);
            vmlaq_n_s32(
                acc,
                D::dot16(zero, w[1], load16(&a.qs, 2 * g + 1)),
                scales[1],
            )
        } else {
            vmlaq_n_s32(acc, D::dot16(lo, w[1], load16(&a.qs, 2 * g + 1)), scales[0])
        }
    }
}

/// A grid type's block: its scale and the weights and scales of each group.
trait GridBlock {
    /// What the whole block decodes at once (sign words).
    type Prep;
    /// The constant factor of the type's scales (a power of two).
    const FACTOR: f32;
    /// Whether the two halves of a group have scales of their own.
    const SPLIT: bool = false;
    /// The f16 block scale.
    fn d(&self) -> F16Bits;
    /// # Safety
    /// The CPU must have NEON.
    unsafe fn prepare(&self) -> Self::Prep;
    /// Group `g`'s 32 signed weights and the odd scales of its halves (equal for the types
    /// with one scale per group).
    ///
    /// # Safety
    /// The CPU must have NEON.
    unsafe fn group(&self, prep: &Self::Prep, g: usize) -> ([int8x16_t; 2], [i32; 2]);
}

/// `Σ_blocks d·FACTOR·d_a·Σ_groups sc·Σ w·a` over one row.
///
/// # Safety
/// The CPU must have NEON and what `D` needs.
#[inline(always)]
unsafe fn grid_dot<B: GridBlock, D: Dot16>(w: &[B], a: &[BlockQ8K]) -> f32 {
    // SAFETY: the caller's features.
    unsafe {
        let mut acc = vdupq_n_f32(0.0);
        for (wb, ab) in w.iter().zip(a) {
            let prep = wb.prepare();
            let mut s = vdupq_n_s32(0);
            for g in 0..8 {
                let (wv, scales) = wb.group(&prep, g);
                s = group_dot::<D>(B::SPLIT, s, wv, ab, g, scales);
            }
            let d = vmulq_n_f32(splat_f16(wb.d()), B::FACTOR * ab.d);
            acc = vfmaq_f32(acc, vcvtq_f32_s32(s), d);
        }
        vaddvq_f32(acc)
    }
}

impl GridBlock for BlockIq2Xxs {
    type Prep = [u32; 8];
    const FACTOR: f32 = 0.125;
    fn d(&self) -> F16Bits {
        self.d
    }
    #[inline(always)]
    unsafe fn prepare(&self) -> [u32; 8] {
        // SAFETY: NEON, the caller's contract; the loads cover `qs`.
        unsafe {
            // Group g: four index bytes, then the word of its sign codes and scale; the
            // words are the odd ones of `qs`.
            let q = [0, 1, 2, 3].map(|i| vreinterpretq_u32_s8(load16(&self.qs, i)));
            store_words([
                word_signs(vuzp2q_u32(q[0], q[1])),
                word_signs(vuzp2q_u32(q[2], q[3])),
            ])
        }
    }
    #[inline(always)]
    unsafe fn group(&self, signs: &[u32; 8], g: usize) -> ([int8x16_t; 2], [i32; 2]) {
        let idx: &[u8; 4] = sub(&self.qs, 8 * g);
        let sc = odd(le_u32(&self.qs, 8 * g + 4) >> 28);
        let p = |l: usize| IQ2XXS_GRID[usize::from(idx[l])];
        // SAFETY: NEON, the caller's contract.
        unsafe {
            (
                signed([points(p(0), p(1)), points(p(2), p(3))], signs[g]),
                [sc; 2],
            )
        }
    }
}

impl GridBlock for BlockIq2Xs {
    type Prep = [u32; 8];
    const FACTOR: f32 = 0.125;
    const SPLIT: bool = true;
    fn d(&self) -> F16Bits {
        self.d
    }
    #[inline(always)]
    unsafe fn prepare(&self) -> [u32; 8] {
        // SAFETY: NEON, the caller's contract; the loads cover `qs`.
        unsafe {
            // Each 16-bit entry: a 9-bit grid index and a 7-bit sign code on top, the
            // code the top 7 bits of the entry's high (odd) byte.
            let q = [0, 1, 2, 3].map(|i| vreinterpretq_u8_s8(load16(&self.qs, i)));
            let codes = |x: uint8x16_t, y: uint8x16_t| {
                vreinterpretq_u32_u8(sign_bytes(vshrq_n_u8::<1>(vuzp2q_u8(x, y))))
            };
            store_words([codes(q[0], q[1]), codes(q[2], q[3])])
        }
    }
    #[inline(always)]
    unsafe fn group(&self, signs: &[u32; 8], g: usize) -> ([int8x16_t; 2], [i32; 2]) {
        let p = |l: usize| IQ2XS_GRID[usize::from(le_u16(&self.qs, 4 * g + l) & 511)];
        let s = u32::from(self.scales[g]);
        // SAFETY: NEON, the caller's contract.
        unsafe {
            let w = signed([points(p(0), p(1)), points(p(2), p(3))], signs[g]);
            (w, [odd(s), odd(s >> 4)])
        }
    }
}

impl GridBlock for BlockIq2S {
    type Prep = ();
    const FACTOR: f32 = 0.125;
    const SPLIT: bool = true;
    fn d(&self) -> F16Bits {
        self.d
    }
    #[inline(always)]
    unsafe fn prepare(&self) {}
    #[inline(always)]
    unsafe fn group(&self, _: &(), g: usize) -> ([int8x16_t; 2], [i32; 2]) {
        // Low 8 index bits in `qs[..32]`, the top 2 of point `l` in bits 2l, 2l + 1 of
        // `qh[g]`; the sign bytes of the points in `qs[32..]`.
        let low: &[u8; 4] = sub(&self.qs, 4 * g);
        let qh = usize::from(self.qh[g]);
        let p = |l: usize| IQ2S_GRID[usize::from(low[l]) | (((qh >> (2 * l)) & 3) << 8)];
        let s = u32::from(self.scales[g]);
        // SAFETY: NEON, the caller's contract.
        unsafe {
            let signs = le_u32(&self.qs, 32 + 4 * g);
            let w = signed([points(p(0), p(1)), points(p(2), p(3))], signs);
            (w, [odd(s), odd(s >> 4)])
        }
    }
}

impl GridBlock for BlockIq3Xxs {
    type Prep = [u32; 8];
    const FACTOR: f32 = 0.25;
    fn d(&self) -> F16Bits {
        self.d
    }
    #[inline(always)]
    unsafe fn prepare(&self) -> [u32; 8] {
        // SAFETY: NEON, the caller's contract; the loads read `qs[64..96]`, the groups'
        // words of sign codes and scale.
        unsafe {
            let q = [4, 5].map(|i| vreinterpretq_u32_s8(load16(&self.qs, i)));
            store_words([word_signs(q[0]), word_signs(q[1])])
        }
    }
    #[inline(always)]
    unsafe fn group(&self, signs: &[u32; 8], g: usize) -> ([int8x16_t; 2], [i32; 2]) {
        let idx: &[u8; 8] = sub(&self.qs, 8 * g);
        let sc = odd(le_u32(&self.qs, 64 + 4 * g) >> 28);
        let p = |k: usize| IQ3XXS_GRID[usize::from(idx[k])];
        // SAFETY: NEON, the caller's contract.
        unsafe {
            let g4 = [
                points4([p(0), p(1), p(2), p(3)]),
                points4([p(4), p(5), p(6), p(7)]),
            ];
            (signed(g4, signs[g]), [sc; 2])
        }
    }
}

impl GridBlock for BlockIq3S {
    type Prep = ();
    const FACTOR: f32 = 1.0;
    fn d(&self) -> F16Bits {
        self.d
    }
    #[inline(always)]
    unsafe fn prepare(&self) {}
    #[inline(always)]
    unsafe fn group(&self, _: &(), g: usize) -> ([int8x16_t; 2], [i32; 2]) {
        // Point `k`'s 9th index bit is bit `k` of `qh[g]`.
        let idx: &[u8; 8] = sub(&self.qs, 8 * g);
        let qh = usize::from(self.qh[g]);
        let p = |k: usize| IQ3S_GRID[usize::from(idx[k]) | (((qh >> k) & 1) << 8)];
        let sc = odd(u32::from(self.scales[g / 2] >> (4 * (g % 2))));
        // SAFETY: NEON, the caller's contract.
        unsafe {
            let g4 = [
                points4([p(0), p(1), p(2), p(3)]),
                points4([p(4), p(5), p(6), p(7)]),
            ];
            (signed(g4, le_u32(&self.signs, 4 * g)), [sc; 2])
        }
    }
}

/// The IQ1 bytes `8 q + δ` of two 8-byte grid points (`q` in {-1, 0, 1}) with the shift
/// `δ0`, `δ1` (±1) of each.
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn iq1_bytes(p0: u64, p1: u64, d0: i8, d1: i8) -> int8x16_t {
    // SAFETY: NEON, the caller's contract.
    unsafe {
        let q = points(p0, p1);
        vaddq_s8(
            vshlq_n_s8::<3>(q),
            vcombine_s8(vdup_n_s8(d0), vdup_n_s8(d1)),
        )
    }
}

/// The shift `δ` of a negative-shift flag.
#[inline(always)]
fn delta(negative: bool) -> i8 {
    if negative {
        -1
    } else {
        1
    }
}

impl GridBlock for BlockIq1S {
    type Prep = ();
    const FACTOR: f32 = 0.125;
    fn d(&self) -> F16Bits {
        self.d
    }
    #[inline(always)]
    unsafe fn prepare(&self) {}
    #[inline(always)]
    unsafe fn group(&self, _: &(), g: usize) -> ([int8x16_t; 2], [i32; 2]) {
        // Word g of `qh`: the 3 high index bits of point l at 3 l, the group's 3-bit scale
        // at 12, its shift sign at 15.
        let h = usize::from(le_u16(&self.qh, g));
        let p = |l: usize| IQ1S_GRID[usize::from(self.qs[4 * g + l]) | (((h >> (3 * l)) & 7) << 8)];
        let d = delta(h & 0x8000 != 0);
        let sc = odd(((h >> 12) & 7) as u32);
        // SAFETY: NEON, the caller's contract.
        unsafe {
            let w = [iq1_bytes(p(0), p(1), d, d), iq1_bytes(p(2), p(3), d, d)];
            (w, [sc; 2])
        }
    }
}

impl GridBlock for BlockIq1M {
    type Prep = ();
    const FACTOR: f32 = 0.125;
    const SPLIT: bool = true;
    fn d(&self) -> F16Bits {
        iq1_m_scale(self)
    }
    #[inline(always)]
    unsafe fn prepare(&self) {}
    #[inline(always)]
    unsafe fn group(&self, _: &(), g: usize) -> ([int8x16_t; 2], [i32; 2]) {
        // Byte `qh[2g + l / 2]`: the 3 high index bits of point l in its bits 0..3 (even l)
        // or 4..7 (odd l), the point's shift sign in bit 3 or 7.
        let h = |l: usize| usize::from(self.qh[2 * g + l / 2]) >> (4 * (l % 2));
        let p = |l: usize| IQ1S_GRID[usize::from(self.qs[4 * g + l]) | ((h(l) & 7) << 8)];
        let d = |l: usize| delta(h(l) & 8 != 0);
        // Scales of the halves: 3 bits at 6 (g % 2) and 6 (g % 2) + 3 of word g / 2.
        let word = u32::from(le_u16(&self.scales, g / 2)) >> (6 * (g % 2));
        let sc = [odd(word & 7), odd((word >> 3) & 7)];
        // SAFETY: NEON, the caller's contract.
        unsafe {
            let w = [
                iq1_bytes(p(0), p(1), d(0), d(1)),
                iq1_bytes(p(2), p(3), d(2), d(3)),
            ];
            (w, sc)
        }
    }
}

/// Row dot products of the grid types, one per type for [`dot_rows`].
macro_rules! grid_dots {
    ($($name:ident: $block:ty;)*) => {$(
        /// # Safety
        /// The CPU must have NEON and what `D` needs.
        #[inline(always)]
        unsafe fn $name<D: Dot16>(w: &[$block], a: &[BlockQ8K]) -> f32 {
            // SAFETY: the caller's features.
            unsafe { grid_dot::<$block, D>(w, a) }
        }
    )*};
}

grid_dots! {
    iq2_xxs: BlockIq2Xxs;
    iq2_xs: BlockIq2Xs;
    iq2_s: BlockIq2S;
    iq3_xxs: BlockIq3Xxs;
    iq3_s: BlockIq3S;
    iq1_s: BlockIq1S;
    iq1_m: BlockIq1M;
}

dot_rows! {
    "neon";
    Neon, KernelSet::Neon, Widening;
    /// NEON IQ2_XXS · Q8_K rows.
    iq2_xxs_rows, iq2_xxs_dot (BlockIq2Xxs, BlockQ8K) => iq2_xxs;
    /// NEON IQ2_XS · Q8_K rows.
    iq2_xs_rows, iq2_xs_dot (BlockIq2Xs, BlockQ8K) => iq2_xs;
    /// NEON IQ2_S · Q8_K rows.
    iq2_s_rows, iq2_s_dot (BlockIq2S, BlockQ8K) => iq2_s;
    /// NEON IQ3_XXS · Q8_K rows.
    iq3_xxs_rows, iq3_xxs_dot (BlockIq3Xxs, BlockQ8K) => iq3_xxs;
    /// NEON IQ3_S · Q8_K rows.
    iq3_s_rows, iq3_s_dot (BlockIq3S, BlockQ8K) => iq3_s;
    /// NEON IQ1_S · Q8_K rows.
    iq1_s_rows, iq1_s_dot (BlockIq1S, BlockQ8K) => iq1_s;
    /// NEON IQ1_M · Q8_K rows.
    iq1_m_rows, iq1_m_dot (BlockIq1M, BlockQ8K) => iq1_m;
}

/// The same bodies with `sdot` for the dotprod set.
pub(crate) mod sdot {
    use super::*;
    use crate::kernels::aarch64::neon::dot::Sdot;
    use crate::kernels::aarch64::Dotprod;

    dot_rows! {
        "neon,dotprod";
        Dotprod, KernelSet::Dotprod, Sdot;
        /// dotprod IQ2_XXS · Q8_K rows.
        iq2_xxs_rows, iq2_xxs_dot (BlockIq2Xxs, BlockQ8K) => iq2_xxs;
        /// dotprod IQ2_XS · Q8_K rows.
        iq2_xs_rows, iq2_xs_dot (BlockIq2Xs, BlockQ8K) => iq2_xs;
        /// dotprod IQ2_S · Q8_K rows.
        iq2_s_rows, iq2_s_dot (BlockIq2S, BlockQ8K) => iq2_s;
        /// dotprod IQ3_XXS · Q8_K rows.
        iq3_xxs_rows, iq3_xxs_dot (BlockIq3Xxs, BlockQ8K) => iq3_xxs;
        /// dotprod IQ3_S · Q8_K rows.
        iq3_s_rows, iq3_s_dot (BlockIq3S, BlockQ8K) => iq3_s;
        /// dotprod IQ1_S · Q8_K rows.
        iq1_s_rows, iq1_s_dot (BlockIq1S, BlockQ8K) => iq1_s;
        /// dotprod IQ1_M · Q8_K rows.
        iq1_m_rows, iq1_m_dot (BlockIq1M, BlockQ8K) => iq1_m;
    }
}

#[cfg(test)]
mod tests;
