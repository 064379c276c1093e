//! The blocks of ggml's 4-row ARM layouts (`q4_0`, `iq4_nl`, `mxfp4` and `q8_0`, interleaved in chunks of
//! 4 or 8 bytes) decoded into signed bytes, for the `dotprod` and `i8mm` kernels.
//!
//! A block column of four rows holds 128 weights. Both interleaves decode into eight vectors of
//! 16 signed bytes, `v[0..8]`, in an order that only depends on the interleave:
//!
//! * chunks of 4 bytes: `v[j]` holds elements `4j..4j + 4` of rows 0, 1, 2, 3 (one 4-byte group
//!   per row, the operand of `sdot` by lane);
//! * chunks of 8 bytes: `v[2c + p]` holds elements `8c..8c + 8` of rows `2p` and `2p + 1` (a 2x8
//!   matrix, the operand of `smmla`).
//!
//! For Q8_0 the vectors are the packed bytes themselves. Q4_0 stores byte `b` of a row with
//! weight `b` in its low and weight `b + 16` in its high nibble, so the same 16 packed bytes give
//! the vector of the low nibbles (`v[0..4]`) and of the high nibbles (`v[4..8]`) for both
//! interleaves; its nibbles are stored xor 8 (signed 4-bit), so `byte << 4` and `byte & 0xf0`
//! read as `i8` are 16 times the weights, which [`Rows4::SCALE`] takes back off (once, on the
//! accumulated outputs: a power of two, so exactly). IQ4_NL maps its
//! nibbles through the 16 levels with one table lookup, MXFP4 through its doubled E2M1 values
//! (its rows' scales are E8M0 exponents instead of f16s).

use std::arch::aarch64::*;

use crate::blocks::{BlockIq4Nlx4, BlockMxfp4x4, BlockQ4_0x4, BlockQ8_0x4, F16Bits, IQ4NL_LEVELS};
use crate::kernels::aarch64::asm::f16x4_to_f32;
use crate::quant::grids::KVALUES_FP4;

/// A 4-row block of one of ggml's ARM layouts.
pub(crate) trait Rows4: bytemuck::Pod + Send + Sync {
    /// The factor between the decoded integer products and the weights' (1/16 for Q4_0).
    const SCALE: f32;
    /// The four rows' scales as f32.
    ///
    /// # Safety
    /// The CPU must have NEON.
    unsafe fn row_scales(&self) -> float32x4_t;
    /// The eight vectors of signed weights (see the module docs).
    ///
    /// # Safety
    /// The CPU must have NEON.
    unsafe fn decode(&self) -> [int8x16_t; 8];
}

/// The 16 bytes of `bytes` starting at `16 * i` as one vector.
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
pub(crate) unsafe fn load16<T: bytemuck::Pod, const N: usize>(
    bytes: &[T; N],
    i: usize,
) -> int8x16_t {
    const { assert!(std::mem::size_of::<T>() == 1) };
    let chunk = &bytes[16 * i..16 * i + 16];
    // SAFETY: `chunk` is 16 one-byte elements (checked above); `ld1` needs no alignment.
    unsafe { vld1q_s8(chunk.as_ptr().cast()) }
}

/// Four f16 scales widened to f32.
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
pub(crate) unsafe fn scales_f32(d: &[F16Bits; 4]) -> float32x4_t {
    let bits = u64::from_le_bytes(bytemuck::cast(*d));
    // SAFETY: NEON, which the caller has.
    unsafe { f16x4_to_f32(vcreate_u16(bits)) }
}

/// One f16 value (raw bits) widened to f32 in all four lanes.
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
pub(crate) unsafe fn splat_f16(d: F16Bits) -> float32x4_t {
    // SAFETY: NEON, which the caller has.
    unsafe { f16x4_to_f32(vdup_n_u16(u16::from_le_bytes(d.0))) }
}

impl Rows4 for BlockQ4_0x4 {
    const SCALE: f32 = 1.0 / 16.0;
    #[inline(always)]
    unsafe fn row_scales(&self) -> float32x4_t {
        // SAFETY: NEON, which the caller has.
        unsafe { scales_f32(&self.d) }
    }
    #[inline(always)]
    unsafe fn decode(&self) -> [int8x16_t; 8] {
        // SAFETY: NEON, which the caller has; the loads stay inside `qs`.
        unsafe {
            let high = vdupq_n_s8(0xf0u8 as i8);
            let b = [
                load16(&self.qs, 0),
                load16(&self.qs, 1),
                load16(&self.qs, 2),
                load16(&self.qs, 3),
            ];
            [
                vshlq_n_s8::<4>(b[0]),
                vshlq_n_s8::<4>(b[1]),
                vshlq_n_s8::<4>(b[2]),
                vshlq_n_s8::<4>(b[3]),
                vandq_s8(b[0], high),
                vandq_s8(b[1], high),
                vandq_s8(b[2], high),
                vandq_s8(b[3], high),
            ]
        }
    }
}

/// The nibbles of `qs` (four rows' 64 bytes) through a 16-entry table of signed weights: low
/// nibbles in `v[0..4]`, high nibbles in `v[4..8]`.
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn table_decode(qs: &[u8; 64], table: &[i8; 16]) -> [int8x16_t; 8] {
    // SAFETY: NEON, which the caller has; the loads stay inside `qs` and the table.
    unsafe {
        let levels = vld1q_s8(table.as_ptr());
        let low = vdupq_n_u8(0x0f);
        let b = [
            vreinterpretq_u8_s8(load16(qs, 0)),
            vreinterpretq_u8_s8(load16(qs, 1)),
            vreinterpretq_u8_s8(load16(qs, 2)),
            vreinterpretq_u8_s8(load16(qs, 3)),
        ];
        let lo = |v: uint8x16_t| vqtbl1q_s8(levels, vandq_u8(v, low));
        let hi = |v: uint8x16_t| vqtbl1q_s8(levels, vshrq_n_u8::<4>(v));
        [
            lo(b[0]),
            lo(b[1]),
            lo(b[2]),
            lo(b[3]),
            hi(b[0]),
            hi(b[1]),
            hi(b[2]),
            hi(b[3]),
        ]
    }
}

/// MXFP4: IQ4_NL's decoding with another table, E8M0 exponents for scales.
impl Rows4 for BlockMxfp4x4 {
    const SCALE: f32 = 1.0;
    #[inline(always)]
    unsafe fn row_scales(&self) -> float32x4_t {
        // SAFETY: NEON, which the caller has. `2^(e - 128)` (as `e8m0_half_to_f32`): the
        // exponent field `e - 1` for `e >= 2`, a subnormal for `e` 0 and 1.
        unsafe {
            let e8 = vcreate_u8(u64::from(u32::from_le_bytes(self.e)));
            let e = vmovl_u16(vget_low_u16(vmovl_u8(e8)));
            let one = vdupq_n_u32(1);
            let normal = vshlq_n_u32::<23>(vsubq_u32(e, one));
            let tiny = vshlq_u32(vdupq_n_u32(0x0020_0000), vreinterpretq_s32_u32(e));
            vreinterpretq_f32_u32(vbslq_u32(vcgtq_u32(e, one), normal, tiny))
        }
    }
    #[inline(always)]
    unsafe fn decode(&self) -> [int8x16_t; 8] {
        // SAFETY: NEON, which the caller has.
        unsafe { table_decode(&self.qs, &KVALUES_FP4) }
    }
}

impl Rows4 for BlockIq4Nlx4 {
    const SCALE: f32 = 1.0;
    #[inline(always)]
    unsafe fn row_scales(&self) -> float32x4_t {
        // SAFETY: NEON, which the caller has.
        unsafe { scales_f32(&self.d) }
    }
    #[inline(always)]
    unsafe fn decode(&self) -> [int8x16_t; 8] {
        // SAFETY: NEON, which the caller has.
        unsafe { table_decode(&self.qs, &IQ4NL_LEVELS) }
    }
}

impl Rows4 for BlockQ8_0x4 {
    const SCALE: f32 = 1.0;
    #[inline(always)]
    unsafe fn row_scales(&self) -> float32x4_t {
        // SAFETY: NEON, which the caller has.
        unsafe { scales_f32(&self.d) }
    }
    #[inline(always)]
    unsafe fn decode(&self) -> [int8x16_t; 8] {
        // SAFETY: NEON, which the caller has; the loads stay inside `qs`.
        unsafe {
            [
                load16(&self.qs, 0),
                load16(&self.qs, 1),
                load16(&self.qs, 2),
                load16(&self.qs, 3),
                load16(&self.qs, 4),
                load16(&self.qs, 5),
                load16(&self.qs, 6),
                load16(&self.qs, 7),
            ]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blocks::e8m0_half_to_f32;

    /// Every exponent byte, the subnormal ones (0, 1) and 255 included, as the portable decode.
    #[test]
    fn mxfp4_scales_equal_the_portable_decode() {
        for first in (0..256).step_by(4) {
            let e: [u8; 4] = std::array::from_fn(|i| (first + i) as u8);
            let block = BlockMxfp4x4 { e, qs: [0; 64] };
            let mut got = [0.0f32; 4];
            // SAFETY: NEON is part of every AArch64 target qrepack builds for.
            unsafe { vst1q_f32(got.as_mut_ptr(), block.row_scales()) };
            for (g, x) in got.iter().zip(e) {
                assert_eq!(g.to_bits(), e8m0_half_to_f32(x).to_bits(), "e = {x}");
            }
        }
    }
}
