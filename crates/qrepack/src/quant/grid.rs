//! The grid types IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S and IQ1_M: decoding of each
//! 32-weight group to its signed grid integers and scales (shared with the plain `vec_dot`s),
//! and the dequantizers built on it.
//!
//! Every grid point is read as little-endian bytes of a [`super::grids`] entry; a sign code
//! (7 bits, through `KSIGNS_IQ2XS`, or 8 stored bits for IQ2_S/IQ3_S) negates the points'
//! weights whose bit is set.

use super::grids::{
    IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS,
};
use super::Real;
use crate::blocks::{
    BlockIq1M, BlockIq1S, BlockIq2S, BlockIq2Xs, BlockIq2Xxs, BlockIq3S, BlockIq3Xxs, F16Bits,
};

/// Groups of 32 weights in one 256-weight block.
pub(crate) const GROUPS: usize = 8;

/// The 8 bytes of grid point `point` with the signs of `signs` applied (bit `j` negates byte `j`).
#[inline]
fn signed_point(point: u64, signs: u8, out: &mut [i8]) {
    for (j, (o, g)) in out.iter_mut().zip(point.to_le_bytes()).enumerate() {
        let g = g as i8;
        *o = if (signs >> j) & 1 == 1 { -g } else { g };
    }
}

#[inline]
fn le_u16(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[2 * i], b[2 * i + 1]])
}

#[inline]
fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// IQ2_XXS group `g`: its 4-bit scale `s` (weights are `d * (0.5 + s) / 4 * q`) and its 32
/// signed quants.
#[inline]
pub(crate) fn iq2_xxs_group(b: &BlockIq2Xxs, g: usize) -> (u8, [i8; 32]) {
    let idx = &b.qs[8 * g..8 * g + 4];
    let aux = le_u32(&b.qs, 8 * g + 4);
    let mut q = [0i8; 32];
    for (l, chunk) in q.chunks_exact_mut(8).enumerate() {
        let signs = KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize];
        signed_point(IQ2XXS_GRID[usize::from(idx[l])], signs, chunk);
    }
    ((aux >> 28) as u8, q)
}

/// IQ2_XS group `g`: the 4-bit scales of its two halves and its 32 signed quants.
#[inline]
pub(crate) fn iq2_xs_group(b: &BlockIq2Xs, g: usize) -> ([u8; 2], [i8; 32]) {
    let mut q = [0i8; 32];
    for (l, chunk) in q.chunks_exact_mut(8).enumerate() {
        let v = le_u16(&b.qs, 4 * g + l);
        let signs = KSIGNS_IQ2XS[usize::from(v >> 9)];
        signed_point(IQ2XS_GRID[usize::from(v & 511)], signs, chunk);
    }
    let s = b.scales[g];
    ([s & 0x0f, s >> 4], q)
}

/// IQ2_S group `g`: the 4-bit scales of its two halves and its 32 signed quants.
#[inline]
pub(crate) fn iq2_s_group(b: &BlockIq2S, g: usize) -> ([u8; 2], [i8; 32]) {
    let (low, signs) = b.qs.split_at(32);
    let qh = u16::from(b.qh[g]);
    let mut q = [0i8; 32];
    for (l, chunk) in q.chunks_exact_mut(8).enumerate() {
        let index = usize::from(low[4 * g + l]) | usize::from((qh << (8 - 2 * l)) & 0x300);
        signed_point(IQ2S_GRID[index], signs[4 * g + l], chunk);
    }
    let s = b.scales[g];
    ([s & 0x0f, s >> 4], q)
}

/// Two 4-weight grid points of IQ3_XXS/IQ3_S as one 8-byte point.
#[inline]
fn point_pair(lo: u32, hi: u32) -> u64 {
    u64::from(lo) | (u64::from(hi) << 32)
}

/// IQ3_XXS group `g`: its 4-bit scale `s` (weights are `d * (0.5 + s) / 2 * q`) and its 32
/// signed quants.
#[inline]
pub(crate) fn iq3_xxs_group(b: &BlockIq3Xxs, g: usize) -> (u8, [i8; 32]) {
    let idx = &b.qs[8 * g..8 * g + 8];
    let aux = le_u32(&b.qs, 64 + 4 * g);
    let mut q = [0i8; 32];
    for (l, chunk) in q.chunks_exact_mut(8).enumerate() {
        let signs = KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize];
        let point = point_pair(
            IQ3XXS_GRID[usize::from(idx[2 * l])],
            IQ3XXS_GRID[usize::from(idx[2 * l + 1])],
        );
        signed_point(point, signs, chunk);
    }
    ((aux >> 28) as u8, q)
}

/// IQ3_S group `g`: its 4-bit scale `s` (weights are `d * (1 + 2 s) * q`) and its 32 signed
/// quants.
#[inline]
pub(crate) fn iq3_s_group(b: &BlockIq3S, g: usize) -> (u8, [i8; 32]) {
    let idx = &b.qs[8 * g..8 * g + 8];
    let qh = u16::from(b.qh[g]);
    let mut q = [0i8; 32];
    for (l, chunk) in q.chunks_exact_mut(8).enumerate() {
        let i0 = usize::from(idx[2 * l]) | usize::from((qh << (8 - 2 * l)) & 256);
        let i1 = usize::from(idx[2 * l + 1]) | usize::from((qh << (7 - 2 * l)) & 256);
        let point = point_pair(IQ3S_GRID[i0], IQ3S_GRID[i1]);
        signed_point(point, b.signs[4 * g + l], chunk);
    }
    ((b.scales[g / 2] >> (4 * (g % 2))) & 0x0f, q)
}

/// IQ1_S group `g`: its 3-bit scale `s` (weights are `d * (2 s + 1) * (q ± 1/8)`), whether the
/// shift is negative, and its 32 grid values in {-1, 0, 1}.
#[inline]
pub(crate) fn iq1_s_group(b: &BlockIq1S, g: usize) -> (u8, bool, [i8; 32]) {
    let qh = le_u16(&b.qh, g);
    let mut q = [0i8; 32];
    for (l, chunk) in q.chunks_exact_mut(8).enumerate() {
        let index = usize::from(b.qs[4 * g + l]) | (usize::from((qh >> (3 * l)) & 7) << 8);
        signed_point(IQ1S_GRID[index], 0, chunk);
    }
    (((qh >> 12) & 7) as u8, qh & 0x8000 != 0, q)
}

/// IQ1_M's block scale, spread over the top nibbles of its four little-endian scale words.
#[inline]
pub(crate) fn iq1_m_scale(b: &BlockIq1M) -> F16Bits {
    let sc = |i: usize| le_u16(&b.scales, i);
    let bits = (sc(0) >> 12) | ((sc(1) >> 8) & 0x00f0) | ((sc(2) >> 4) & 0x0f00) | (sc(3) & 0xf000);
    F16Bits(bits.to_le_bytes())
}

/// IQ1_M group `g`: the 3-bit scales of its two halves, whether the shift of each 8 weights is
/// negative, and its 32 grid values in {-1, 0, 1}.
#[inline]
pub(crate) fn iq1_m_group(b: &BlockIq1M, g: usize) -> ([u8; 2], [bool; 4], [i8; 32]) {
    let qh = [u16::from(b.qh[2 * g]), u16::from(b.qh[2 * g + 1])];
    let mut q = [0i8; 32];
    let mut negative = [false; 4];
    for (l, chunk) in q.chunks_exact_mut(8).enumerate() {
        let h = qh[l / 2];
        let high = (if l % 2 == 0 { h << 8 } else { h << 4 }) & 0x700;
        signed_point(
            IQ1S_GRID[usize::from(b.qs[4 * g + l]) | usize::from(high)],
            0,
            chunk,
        );
        negative[l] = (h & if l % 2 == 0 { 0x08 } else { 0x80 }) != 0;
    }
    let word = le_u16(&b.scales, g / 2);
    let shift = 6 * (g % 2);
    let s1 = ((word >> shift) & 7) as u8;
    let s2 = ((word >> (shift + 3)) & 7) as u8;
    ([s1, s2], negative, q)
}

// ------------------------------------------------------------------------------------------------
// Dequantization
// ------------------------------------------------------------------------------------------------

/// `d * (0.5 + s) * f` in ggml's order.
#[inline]
fn half_step_scale<R: Real>(d: R, s: u8, f: f32) -> R {
    d * (R::of_f32(0.5) + R::of_int(i32::from(s))) * R::of_f32(f)
}

#[inline]
fn scaled<R: Real>(db: R, q: &[i8], y: &mut [R]) {
    for (v, &x) in y.iter_mut().zip(q) {
        *v = db * R::of_int(i32::from(x));
    }
}

pub(super) fn dq_iq2_xxs<R: Real>(b: &BlockIq2Xxs, y: &mut [R]) {
    let d = R::of_f16(b.d);
    for (g, yg) in y.chunks_exact_mut(32).enumerate() {
        let (s, q) = iq2_xxs_group(b, g);
        scaled(half_step_scale(d, s, 0.25), &q, yg);
    }
}

pub(super) fn dq_iq2_xs<R: Real>(b: &BlockIq2Xs, y: &mut [R]) {
    let d = R::of_f16(b.d);
    for (g, yg) in y.chunks_exact_mut(32).enumerate() {
        let (s, q) = iq2_xs_group(b, g);
        for h in 0..2 {
            let db = half_step_scale(d, s[h], 0.25);
            scaled(db, &q[16 * h..16 * h + 16], &mut yg[16 * h..16 * h + 16]);
        }
    }
}

pub(super) fn dq_iq2_s<R: Real>(b: &BlockIq2S, y: &mut [R]) {
    let d = R::of_f16(b.d);
    for (g, yg) in y.chunks_exact_mut(32).enumerate() {
        let (s, q) = iq2_s_group(b, g);
        for h in 0..2 {
            let db = half_step_scale(d, s[h], 0.25);
            scaled(db, &q[16 * h..16 * h + 16], &mut yg[16 * h..16 * h + 16]);
        }
    }
}

pub(super) fn dq_iq3_xxs<R: Real>(b: &BlockIq3Xxs, y: &mut [R]) {
    let d = R::of_f16(b.d);
    for (g, yg) in y.chunks_exact_mut(32).enumerate() {
        let (s, q) = iq3_xxs_group(b, g);
        scaled(half_step_scale(d, s, 0.5), &q, yg);
    }
}

pub(super) fn dq_iq3_s<R: Real>(b: &BlockIq3S, y: &mut [R]) {
    let d = R::of_f16(b.d);
    for (g, yg) in y.chunks_exact_mut(32).enumerate() {
        let (s, q) = iq3_s_group(b, g);
        scaled(d * R::of_int(1 + 2 * i32::from(s)), &q, yg);
    }
}

/// `dl * (q + delta)` for 8 weights; `q + delta` is exact in f32.
#[inline]
fn shifted<R: Real>(dl: R, negative: bool, q: &[i8], y: &mut [R]) {
    let delta = if negative { -0.125f32 } else { 0.125 };
    for (v, &x) in y.iter_mut().zip(q) {
        *v = dl * R::of_f32(f32::from(x) + delta);
    }
}

pub(super) fn dq_iq1_s<R: Real>(b: &BlockIq1S, y: &mut [R]) {
    let d = R::of_f16(b.d);
    for (g, yg) in y.chunks_exact_mut(32).enumerate() {
        let (s, negative, q) = iq1_s_group(b, g);
        shifted(d * R::of_int(2 * i32::from(s) + 1), negative, &q, yg);
    }
}

pub(super) fn dq_iq1_m<R: Real>(b: &BlockIq1M, y: &mut [R]) {
    let d = R::of_f16(iq1_m_scale(b));
    for (g, yg) in y.chunks_exact_mut(32).enumerate() {
        let (s, negative, q) = iq1_m_group(b, g);
        for (l, y8) in yg.chunks_exact_mut(8).enumerate() {
            let dl = d * R::of_int(2 * i32::from(s[l / 2]) + 1);
            shifted(dl, negative[l], &q[8 * l..8 * l + 8], y8);
        }
    }
}
