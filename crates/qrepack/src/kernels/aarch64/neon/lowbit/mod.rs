//! NEON kernels of the plain layout for the FP4 types (MXFP4, NVFP4) and Q1_0 / Q2_0 against
//! Q8_0, and the ternary types (TQ1_0, TQ2_0) against Q8_K.
//!
//! Each weight block is decoded in registers to signed bytes in the order of its activations
//! (FP4 codes through one `tbl` of the 16 values, bits and 2-bit fields with masks and shifts,
//! base-3 digits with byte multiplies and two compares) and summed with [`Dot16`].
//!
//! # Exactness
//!
//! Every block's (or scale group's) integer sum is exact and equal to that of the portable
//! kernels (`crate::vecdot::lowbit`): the weights are small signed bytes (FP4 values
//! `|v| <= 12`, `q - 1` in -1..=2, ±1, digits - 1 in -1..=1) and [`Dot16`] sums any byte
//! products exactly. The sums are converted to `f32` in their lanes and scaled there; only the
//! order of the `f32` scaling and accumulation differs from the portable kernels.

use std::arch::aarch64::*;

use super::dot::{bytes16, dot_rows, Dot16, Widening};
use crate::blocks::{e8m0_half_to_f32, BlockMxfp4, BlockNvfp4, BlockQ1_0};
use crate::blocks::{BlockQ2_0, BlockQ8K, BlockQ8_0, BlockTq1_0, BlockTq2_0};
use crate::cpu::KernelSet;
use crate::kernels::aarch64::rows4::{load16, scales_f32, splat_f16};
use crate::kernels::aarch64::Neon;
use crate::quant::grids::KVALUES_FP4;

/// The 16 doubled E2M1 values as a table for `tbl`.
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn fp4_table() -> int8x16_t {
    // SAFETY: NEON, the caller's contract; the table is 16 bytes.
    unsafe { vld1q_s8(KVALUES_FP4.as_ptr()) }
}

/// The low and the high nibbles of 16 bytes.
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn nibbles(q: uint8x16_t) -> (uint8x16_t, uint8x16_t) {
    // SAFETY: NEON, the caller's contract.
    unsafe { (vandq_u8(q, vdupq_n_u8(0x0f)), vshrq_n_u8::<4>(q)) }
}

/// Four lanes `[Σ s0, Σ s1, Σ s2, Σ s3]`, each the total of one of four partial sums.
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn totals4(s: [int32x4_t; 4]) -> int32x4_t {
    // SAFETY: NEON, the caller's contract.
    unsafe { vpaddq_s32(vpaddq_s32(s[0], s[1]), vpaddq_s32(s[2], s[3])) }
}

/// MXFP4: `Σ_blocks d_a·2^(e-128)·Σ v·a`, the block sums scaled in their lanes.
///
/// # Safety
/// The CPU must have NEON and what `D` needs.
#[inline(always)]
unsafe fn mxfp4<D: Dot16>(w: &[BlockMxfp4], a: &[BlockQ8_0]) -> f32 {
    // SAFETY: the caller's features; every load stays inside the blocks.
    unsafe {
        let lut = fp4_table();
        let mut acc = vdupq_n_f32(0.0);
        for (wb, ab) in w.iter().zip(a) {
            // Weight j in the low nibble of byte j, weight 16 + j in its high nibble.
            let (lo, hi) = nibbles(bytes16(&wb.qs));
            let s = D::dot16(vdupq_n_s32(0), vqtbl1q_s8(lut, lo), load16(&ab.qs, 0));
            let s = D::dot16(s, vqtbl1q_s8(lut, hi), load16(&ab.qs, 1));
            let d = vmulq_n_f32(splat_f16(ab.d), e8m0_half_to_f32(wb.e));
            acc = vfmaq_f32(acc, vcvtq_f32_s32(s), d);
        }
        vaddvq_f32(acc)
    }
}

/// Half the values of four UE4M3 scales, as `ue4m3_half_to_f32`: the low 7 bits placed as an
/// f32's exponent and mantissa (`2^(e-127)·(1 + m/8)`, or `m·2^-149` for `e = 0`) times
/// `2^119` are exactly `(8 + m)·2^(e-11)` and `m·2^-10`; `0x7f` is zero, the top bit ignored.
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn ue4m3_halves(d: [u8; 4]) -> float32x4_t {
    // SAFETY: NEON, the caller's contract.
    unsafe {
        let x = vmovl_u16(vget_low_u16(vmovl_u8(vcreate_u8(u64::from(
            u32::from_le_bytes(d),
        )))));
        let bits = vshlq_n_u32::<20>(vandq_u32(x, vdupq_n_u32(0x7f)));
        let v = vmulq_n_f32(vreinterpretq_f32_u32(bits), f32::from_bits(246 << 23));
        let nan = vceqq_u32(x, vdupq_n_u32(0x7f));
        vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(v), nan))
    }
}

/// NVFP4: four scale groups of 16 per block (the low nibbles of 8 bytes, then their high
/// nibbles), group `g` against half `g % 2` of Q8_0 block `g / 2`; the four group sums in one
/// vector, scaled lane by lane by `d_a·s_g`.
///
/// # Safety
/// The CPU must have NEON and what `D` needs.
#[inline(always)]
unsafe fn nvfp4<D: Dot16>(w: &[BlockNvfp4], a: &[[BlockQ8_0; 2]]) -> f32 {
    // SAFETY: the caller's features; every load stays inside the blocks.
    unsafe {
        let lut = fp4_table();
        let zero = vdupq_n_s32(0);
        let mut acc = vdupq_n_f32(0.0);
        for (wb, ab) in w.iter().zip(a) {
            let mut s = [zero; 4];
            for (k, y) in ab.iter().enumerate() {
                let (lo, hi) = nibbles(vreinterpretq_u8_s8(load16(&wb.qs, k)));
                let (lo, hi) = (vreinterpretq_u64_u8(lo), vreinterpretq_u64_u8(hi));
                // Groups 2k (bytes 0..8) and 2k + 1 (bytes 8..16), low nibbles first.
                let even = vreinterpretq_s8_u64(vzip1q_u64(lo, hi));
                let odd = vreinterpretq_s8_u64(vzip2q_u64(lo, hi));
                s[2 * k] = D::dot16(
                    zero,
                    vqtbl1q_s8(lut, vreinterpretq_u8_s8(even)),
                    load16(&y.qs, 0),
                );
                s[2 * k + 1] = D::dot16(
                    zero,
                    vqtbl1q_s8(lut, vreinterpretq_u8_s8(odd)),
                    load16(&y.qs, 1),
                );
            }
            // [d_a0, d_a0, d_a1, d_a1]: group g meets Q8_0 block g / 2.
            let da = scales_f32(&[ab[0].d, ab[0].d, ab[1].d, ab[1].d]);
            let scales = vmulq_f32(da, ue4m3_halves(wb.d));
            acc = vfmaq_f32(acc, vcvtq_f32_s32(totals4(s)), scales);
        }
        vaddvq_f32(acc)
    }
}

/// Q1_0: weight `j` is `+1` where bit `j % 8` of byte `j / 8` is set, else `-1`; the sums of
/// the four Q8_0 blocks in one vector, scaled by `d_w·d_a` per block.
///
/// # Safety
/// The CPU must have NEON and what `D` needs.
#[inline(always)]
unsafe fn q1_0<D: Dot16>(w: &[BlockQ1_0], a: &[[BlockQ8_0; 4]]) -> f32 {
    // SAFETY: the caller's features; every load stays inside the blocks.
    unsafe {
        let bits = vreinterpretq_u8_u64(vdupq_n_u64(0x8040_2010_0804_0201));
        // Bytes 2v and 2v + 1 spread over the 16 lanes of weights 16v..16v + 16.
        let spread = vcombine_u8(vdup_n_u8(0), vdup_n_u8(1));
        let one = vdupq_n_u8(1);
        let zero = vdupq_n_s32(0);
        let mut acc = vdupq_n_f32(0.0);
        for (wb, ab) in w.iter().zip(a) {
            let q = bytes16(&wb.qs);
            let mut s = [zero; 4];
            for (k, y) in ab.iter().enumerate() {
                for h in 0..2 {
                    let v = 2 * k + h;
                    let idx = vaddq_u8(spread, vdupq_n_u8(2 * v as u8));
                    let set = vtstq_u8(vqtbl1q_u8(q, idx), bits);
                    // `1 | !set`: 1 where the bit is set, -1 (all ones) where it is clear.
                    let wv = vreinterpretq_s8_u8(vornq_u8(one, set));
                    s[k] = D::dot16(s[k], wv, load16(&y.qs, h));
                }
            }
            let da = scales_f32(&[ab[0].d, ab[1].d, ab[2].d, ab[3].d]);
            let d = vmulq_f32(da, splat_f16(wb.d));
            acc = vfmaq_f32(acc, vcvtq_f32_s32(totals4(s)), d);
        }
        vaddvq_f32(acc)
    }
}

/// The 2-bit field `S` (bits `2S, 2S + 1`) of every byte.
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn crumbs<const S: i8>(q: uint8x16_t) -> uint8x16_t {
    // SAFETY: NEON, the caller's contract.
    unsafe { vandq_u8(vshlq_u8(q, vdupq_n_s8(-2 * S)), vdupq_n_u8(3)) }
}

/// Q2_0: weight `j` of a block is field `j % 4` of byte `j / 4`, so field `s` of the 8 bytes of
/// a Q8_0 block holds its weights `4i + s`: the activations are split the same way (`ld4`)
/// rather than the weights put back in order.
///
/// # Safety
/// The CPU must have NEON and what `D` needs.
#[inline(always)]
unsafe fn q2_0<D: Dot16>(w: &[BlockQ2_0], a: &[[BlockQ8_0; 2]]) -> f32 {
    // SAFETY: the caller's features; every load stays inside the blocks (`ld4` of 8-byte
    // vectors reads 32 bytes, one Q8_0 block's quants).
    unsafe {
        let one = vdupq_n_s8(1);
        let zero = vdupq_n_s32(0);
        let mut acc = vdupq_n_f32(0.0);
        for (wb, ab) in w.iter().zip(a) {
            let q = bytes16(&wb.qs);
            let c = [
                crumbs::<0>(q),
                crumbs::<1>(q),
                crumbs::<2>(q),
                crumbs::<3>(q),
            ]
            .map(|c| vreinterpretq_u64_u8(c));
            // Bytes 0..8 of the fields are Q8_0 block 0's, bytes 8..16 block 1's.
            let fields = |first: bool, s: usize| {
                let v = if first {
                    vzip1q_u64(c[s], c[s + 1])
                } else {
                    vzip2q_u64(c[s], c[s + 1])
                };
                vsubq_s8(vreinterpretq_s8_u64(v), one)
            };
            let mut s = [zero; 2];
            for (k, y) in ab.iter().enumerate() {
                let av = vld4_s8(y.qs.as_ptr());
                let s01 = D::dot16(zero, fields(k == 0, 0), vcombine_s8(av.0, av.1));
                s[k] = D::dot16(s01, fields(k == 0, 2), vcombine_s8(av.2, av.3));
            }
            // [Σ s0 (two lanes), Σ s1 (two lanes)].
            let sums = vpaddq_s32(s[0], s[1]);
            let da = scales_f32(&[ab[0].d, ab[0].d, ab[1].d, ab[1].d]);
            let d = vmulq_f32(da, splat_f16(wb.d));
            acc = vfmaq_f32(acc, vcvtq_f32_s32(sums), d);
        }
        vaddvq_f32(acc)
    }
}

/// TQ2_0: field `l` of `qs[32h + m]` is weight `128h + 32l + m`, so each field of 16 bytes is
/// 16 weights in order.
///
/// # Safety
/// The CPU must have NEON and what `D` needs.
#[inline(always)]
unsafe fn tq2_0<D: Dot16>(w: &[BlockTq2_0], a: &[BlockQ8K]) -> f32 {
    // SAFETY: the caller's features; every load stays inside the blocks.
    unsafe {
        let one = vdupq_n_s8(1);
        let mut acc = vdupq_n_f32(0.0);
        for (wb, ab) in w.iter().zip(a) {
            let mut s = vdupq_n_s32(0);
            for h in 0..2 {
                for t in 0..2 {
                    let q = vreinterpretq_u8_s8(load16(&wb.qs, 2 * h + t));
                    let c = [
                        crumbs::<0>(q),
                        crumbs::<1>(q),
                        crumbs::<2>(q),
                        crumbs::<3>(q),
                    ];
                    for (l, cl) in c.into_iter().enumerate() {
                        let wv = vsubq_s8(vreinterpretq_s8_u8(cl), one);
                        s = D::dot16(s, wv, load16(&ab.qs, 8 * h + 2 * l + t));
                    }
                }
            }
            acc = vfmaq_f32(acc, vcvtq_f32_s32(s), vmulq_n_f32(splat_f16(wb.d), ab.d));
        }
        vaddvq_f32(acc)
    }
}

/// The ternary weights `t - 1` of 16 bytes holding the digit as the top base-3 digit
/// `(3 b) >> 8` of each byte `b`: 1 from `b >= 86`, 2 from `b >= 171`. The compares give -1
/// where they hold, so their sum is minus the digit and its complement the digit minus one.
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn trits(b: uint8x16_t) -> int8x16_t {
    // SAFETY: NEON, the caller's contract.
    unsafe {
        let neg = vaddq_u8(vcgeq_u8(b, vdupq_n_u8(86)), vcgeq_u8(b, vdupq_n_u8(171)));
        vreinterpretq_s8_u8(vmvnq_u8(neg))
    }
}

/// TQ1_0: digit `n` of byte `b` is the top digit of `b·3^n` (modulo 256). Digits 0..5 of
/// `qs[..32]` are weights `32 n ..`, of `qs[32..48]` weights `160 + 16 n ..`, and the four
/// digits of `qh`, multiplied by 1, 3, 9, 27 one word each, the last 16 in order.
///
/// # Safety
/// The CPU must have NEON and what `D` needs.
#[inline(always)]
unsafe fn tq1_0<D: Dot16>(w: &[BlockTq1_0], a: &[BlockQ8K]) -> f32 {
    const POW3: [u8; 5] = [1, 3, 9, 27, 81];
    // SAFETY: the caller's features; every load stays inside the blocks.
    unsafe {
        let qh_pow = vreinterpretq_u8_u32(vld1q_u32(
            [0x0101_0101, 0x0303_0303, 0x0909_0909, 0x1b1b_1b1b].as_ptr(),
        ));
        let mut acc = vdupq_n_f32(0.0);
        for (wb, ab) in w.iter().zip(a) {
            let head = [
                vreinterpretq_u8_s8(load16(&wb.qs, 0)),
                vreinterpretq_u8_s8(load16(&wb.qs, 1)),
            ];
            let mid = vreinterpretq_u8_s8(load16(&wb.qs, 2));
            let mut s = vdupq_n_s32(0);
            for (n, &p) in POW3.iter().enumerate() {
                let p = vdupq_n_u8(p);
                s = D::dot16(s, trits(vmulq_u8(head[0], p)), load16(&ab.qs, 2 * n));
                s = D::dot16(s, trits(vmulq_u8(head[1], p)), load16(&ab.qs, 2 * n + 1));
                s = D::dot16(s, trits(vmulq_u8(mid, p)), load16(&ab.qs, 10 + n));
            }
            let qh = vreinterpretq_u8_u32(vdupq_n_u32(u32::from_le_bytes(wb.qh)));
            s = D::dot16(s, trits(vmulq_u8(qh, qh_pow)), load16(&ab.qs, 15));
            acc = vfmaq_f32(acc, vcvtq_f32_s32(s), vmulq_n_f32(splat_f16(wb.d), ab.d));
        }
        vaddvq_f32(acc)
    }
}

dot_rows! {
    "neon";
    Neon, KernelSet::Neon, Widening;
    /// NEON MXFP4 · Q8_0 rows.
    mxfp4_rows, mxfp4_dot (BlockMxfp4, BlockQ8_0) => mxfp4;
    /// NEON NVFP4 · Q8_0 rows (two Q8_0 blocks per weight block).
    nvfp4_rows, nvfp4_dot (BlockNvfp4, [BlockQ8_0; 2]) => nvfp4;
    /// NEON Q1_0 · Q8_0 rows (four Q8_0 blocks per weight block).
    q1_0_rows, q1_0_dot (BlockQ1_0, [BlockQ8_0; 4]) => q1_0;
    /// NEON Q2_0 · Q8_0 rows (two Q8_0 blocks per weight block).
    q2_0_rows, q2_0_dot (BlockQ2_0, [BlockQ8_0; 2]) => q2_0;
    /// NEON TQ1_0 · Q8_K rows.
    tq1_0_rows, tq1_0_dot (BlockTq1_0, BlockQ8K) => tq1_0;
    /// NEON TQ2_0 · Q8_K rows.
    tq2_0_rows, tq2_0_dot (BlockTq2_0, BlockQ8K) => tq2_0;
}

/// The same bodies with `sdot` for the dotprod set.
pub(crate) mod sdot {
    use super::*;
    use crate::kernels::aarch64::neon::dot::Sdot;
    use crate::kernels::aarch64::Dotprod;

    dot_rows! {
        "neon,dotprod";
        Dotprod, KernelSet::Dotprod, Sdot;
        /// dotprod MXFP4 · Q8_0 rows.
        mxfp4_rows, mxfp4_dot (BlockMxfp4, BlockQ8_0) => mxfp4;
        /// dotprod NVFP4 · Q8_0 rows.
        nvfp4_rows, nvfp4_dot (BlockNvfp4, [BlockQ8_0; 2]) => nvfp4;
        /// dotprod Q1_0 · Q8_0 rows.
        q1_0_rows, q1_0_dot (BlockQ1_0, [BlockQ8_0; 4]) => q1_0;
        /// dotprod Q2_0 · Q8_0 rows.
        q2_0_rows, q2_0_dot (BlockQ2_0, [BlockQ8_0; 2]) => q2_0;
        /// dotprod TQ1_0 · Q8_K rows.
        tq1_0_rows, tq1_0_dot (BlockTq1_0, BlockQ8K) => tq1_0;
        /// dotprod TQ2_0 · Q8_K rows.
        tq2_0_rows, tq2_0_dot (BlockTq2_0, BlockQ8K) => tq2_0;
    }
}

#[cfg(test)]
mod tests;
