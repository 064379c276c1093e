//! The blocks of ggml's 8-row K-quant ARM layouts (`q4_K`, `q5_K`, `q6_K` interleaved in chunks
//! of 4 or 8 bytes) decoded into signed bytes for the `dotprod` and `i8mm` kernels, and the
//! scale bookkeeping those kernels share.
//!
//! Each row of a block column stores 128 quant bytes (Q4_K/Q5_K `qs`, Q6_K `ql`) whose low and
//! high nibbles hold two different 32-weight sub-blocks. Bytes `32p..32p + 32` of every row
//! (the *pair* `p`, 0..4) are 256 packed bytes, 16 vectors of 16: packed vector `16p + 4k + i`
//! holds row bytes `32p + 8k..32p + 8k + 8` (the *quarter* `k`) for
//!
//! * chunks of 4 bytes: 4 rows x 4 bytes, bytes `8k + 4(i / 2)..+4` of rows `4(i % 2)..+4`;
//! * chunks of 8 bytes: 2 rows x 8 bytes, bytes `8k..8k + 8` of rows `2i, 2i + 1`.
//!
//! Byte `32p + l` is weight `l` of the sub-block [`KBlock::sub_block`] names (low nibble) and of
//! another one (high nibble). The extra bits sit at the same positions of their own arrays
//! (Q5_K `qh`: vector `4k + i`, bit = sub-block; Q6_K `qh`: vector `16(p / 2) + 4k + i`, two
//! bits per sub-block), so [`KBlock::decode`] turns four packed vectors into four vectors of
//! signed weights with a few masks and shifts and no shuffles: unsigned 0..16 (Q4_K) or 0..32
//! (Q5_K) with the mins kept apart, `q - 32` for Q6_K.

use std::arch::aarch64::*;

use crate::blocks::{BlockQ4Kx8, BlockQ5Kx8, BlockQ6Kx8Ggml, F16Bits};
use crate::kernels::aarch64::asm::f16x4_to_f32;
use crate::kernels::aarch64::rows4::load16;

/// An 8-row block of one of ggml's K-quant ARM layouts (the interleave does not change the
/// decoding, only how the kernels pair the vectors with activations).
pub(crate) trait KBlock: bytemuck::Pod + Send + Sync {
    /// True for Q6_K: a signed scale per 16 weights and no mins. False for Q4_K/Q5_K: a 6-bit
    /// scale and min per 32 weights.
    const GROUPS16: bool;
    /// The 32-weight sub-block (0..8) of the low (`HI = false`) or high nibbles of pair `p`.
    fn sub_block<const HI: bool>(p: usize) -> usize;
    /// The rows' f16 scales.
    fn d(&self) -> &[F16Bits; 8];
    /// The rows' f16 min scales (Q4_K/Q5_K).
    fn dmin(&self) -> &[F16Bits; 8];
    /// The 8 rows' scales (Q4_K/Q5_K: of sub-block `g / 2`; Q6_K: of 16-weight group `g`) and
    /// mins (Q4_K/Q5_K, of sub-block `g / 2`; zero for Q6_K).
    ///
    /// # Safety
    /// The CPU must have NEON.
    unsafe fn scales(&self, g: usize) -> (int16x8_t, int16x8_t);
    /// The four vectors of signed weights of quarter `k` of pair `p` (see the module docs):
    /// low nibbles for `HI = false`, high ones for `HI = true`.
    ///
    /// # Safety
    /// The CPU must have NEON.
    unsafe fn decode<const HI: bool>(&self, p: usize, k: usize) -> [int8x16_t; 4];
}

/// The 8 rows' 6-bit (scale, min) of one sub-block from its 12 regrouped bytes (Q4_K's own
/// scheme with row `r` in the place of sub-block `r`), widened to 16 bits.
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn scale_min_6bit(group: &[u8]) -> (int16x8_t, int16x8_t) {
    let x = u64::from_le_bytes(group[..8].try_into().expect("12 bytes"));
    let y = u32::from_le_bytes(group[8..12].try_into().expect("12 bytes"));
    // SAFETY: register-only NEON operations, which the caller has.
    unsafe {
        let x = vcreate_u8(x);
        // Rows 0..4: [s0..s3, m0..m3], the low 6 bits of bytes 0..8.
        let low = vand_u8(x, vdup_n_u8(63));
        // Rows 4..8: bits 4..6 from the top two bits of bytes 0..8, bits 0..4 from the nibbles of
        // bytes 8..12 (low nibbles the scales, high nibbles the mins).
        let top = vshl_n_u8::<4>(vshr_n_u8::<6>(x));
        let y = vreinterpret_u8_u32(vdup_n_u32(y));
        let nib = vand_u8(vshl_u8(y, vcreate_s8(0xfcfc_fcfc_0000_0000)), vdup_n_u8(15));
        let high = vorr_u8(top, nib);
        let (low, high) = (vreinterpret_u32_u8(low), vreinterpret_u32_u8(high));
        let s = vreinterpret_u8_u32(vzip1_u32(low, high));
        let m = vreinterpret_u8_u32(vzip2_u32(low, high));
        (
            vreinterpretq_s16_u16(vmovl_u8(s)),
            vreinterpretq_s16_u16(vmovl_u8(m)),
        )
    }
}

/// Four consecutive 16-byte vectors of `bytes` from vector `first`.
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn load4<const N: usize>(bytes: &[u8; N], first: usize) -> [uint8x16_t; 4] {
    // SAFETY: NEON, which the caller has; `load16` bounds-checks each vector.
    unsafe {
        [
            vreinterpretq_u8_s8(load16(bytes, first)),
            vreinterpretq_u8_s8(load16(bytes, first + 1)),
            vreinterpretq_u8_s8(load16(bytes, first + 2)),
            vreinterpretq_u8_s8(load16(bytes, first + 3)),
        ]
    }
}

/// The low or high nibbles of `v`.
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn nibble<const HI: bool>(v: uint8x16_t) -> uint8x16_t {
    // SAFETY: register-only NEON operations, which the caller has.
    unsafe {
        if HI {
            vshrq_n_u8::<4>(v)
        } else {
            vandq_u8(v, vdupq_n_u8(0x0f))
        }
    }
}

impl KBlock for BlockQ4Kx8 {
    const GROUPS16: bool = false;
    fn sub_block<const HI: bool>(p: usize) -> usize {
        2 * p + HI as usize
    }
    fn d(&self) -> &[F16Bits; 8] {
        &self.d
    }
    fn dmin(&self) -> &[F16Bits; 8] {
        &self.dmin
    }
    #[inline(always)]
    unsafe fn scales(&self, g: usize) -> (int16x8_t, int16x8_t) {
        let sb = g / 2;
        // SAFETY: NEON, which the caller has.
        unsafe { scale_min_6bit(&self.scales[12 * sb..12 * sb + 12]) }
    }
    #[inline(always)]
    unsafe fn decode<const HI: bool>(&self, p: usize, k: usize) -> [int8x16_t; 4] {
        // SAFETY: NEON, which the caller has; the loads are bounds-checked.
        unsafe { load4(&self.qs, 16 * p + 4 * k).map(|v| vreinterpretq_s8_u8(nibble::<HI>(v))) }
    }
}

// `BlockQ5Kx8` also holds qrepack's `q5_K_8x8_x86`, whose `qh` are bit planes: this decoding
// is for ggml's `q5_K_8x4`/`q5_K_8x8` only (interleaved `qh` bytes), which is the only pairing
// the selection table makes.
impl KBlock for BlockQ5Kx8 {
    const GROUPS16: bool = false;
    fn sub_block<const HI: bool>(p: usize) -> usize {
        2 * p + HI as usize
    }
    fn d(&self) -> &[F16Bits; 8] {
        &self.d
    }
    fn dmin(&self) -> &[F16Bits; 8] {
        &self.dmin
    }
    #[inline(always)]
    unsafe fn scales(&self, g: usize) -> (int16x8_t, int16x8_t) {
        let sb = g / 2;
        // SAFETY: NEON, which the caller has.
        unsafe { scale_min_6bit(&self.scales[12 * sb..12 * sb + 12]) }
    }
    #[inline(always)]
    unsafe fn decode<const HI: bool>(&self, p: usize, k: usize) -> [int8x16_t; 4] {
        // The fifth bit of sub-block `sb` is bit `sb` of the `qh` byte: moved to bit 4.
        let shift = 4 - (2 * p + HI as usize) as i8;
        // SAFETY: NEON, which the caller has; the loads are bounds-checked.
        unsafe {
            let q = load4(&self.qs, 16 * p + 4 * k);
            let h = load4(&self.qh, 4 * k);
            let (shift, bit) = (vdupq_n_s8(shift), vdupq_n_u8(0x10));
            std::array::from_fn(|i| {
                let fifth = vandq_u8(vshlq_u8(h[i], shift), bit);
                vreinterpretq_s8_u8(vorrq_u8(nibble::<HI>(q[i]), fifth))
            })
        }
    }
}

impl KBlock for BlockQ6Kx8Ggml {
    const GROUPS16: bool = true;
    fn sub_block<const HI: bool>(p: usize) -> usize {
        4 * (p / 2) + p % 2 + 2 * HI as usize
    }
    fn d(&self) -> &[F16Bits; 8] {
        &self.d
    }
    fn dmin(&self) -> &[F16Bits; 8] {
        // Q6_K has no mins; the kernels never read this for `GROUPS16` blocks.
        &self.d
    }
    #[inline(always)]
    unsafe fn scales(&self, g: usize) -> (int16x8_t, int16x8_t) {
        let s: &[i8; 8] = self.scales[8 * g..8 * g + 8].try_into().expect("8 scales");
        // SAFETY: NEON, which the caller has; the load reads the 8 bytes of `s`.
        unsafe { (vmovl_s8(vld1_s8(s.as_ptr())), vdupq_n_s16(0)) }
    }
    #[inline(always)]
    unsafe fn decode<const HI: bool>(&self, p: usize, k: usize) -> [int8x16_t; 4] {
        // Quarter `s` (0..4) of a 128-weight half has its top two bits at bits `2s..2s + 2` of
        // the `qh` byte: moved to bits 4..6.
        let s = p % 2 + 2 * HI as usize;
        let shift = 4 - 2 * s as i8;
        // SAFETY: NEON, which the caller has; the loads are bounds-checked.
        unsafe {
            let q = load4(&self.ql, 16 * p + 4 * k);
            let h = load4(&self.qh, 16 * (p / 2) + 4 * k);
            let (shift, bits, bias) = (vdupq_n_s8(shift), vdupq_n_u8(0x30), vdupq_n_s8(32));
            std::array::from_fn(|i| {
                let top = vandq_u8(vshlq_u8(h[i], shift), bits);
                let u = vreinterpretq_s8_u8(vorrq_u8(nibble::<HI>(q[i]), top));
                vsubq_s8(u, bias)
            })
        }
    }
}

/// Eight f16 values widened to f32 (rows 0..4, rows 4..8).
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
pub(crate) unsafe fn f16x8(d: &[F16Bits; 8]) -> [float32x4_t; 2] {
    let bits: [u64; 2] = bytemuck::cast(*d);
    // SAFETY: NEON, which the caller has.
    unsafe {
        [
            f16x4_to_f32(vcreate_u16(bits[0])),
            f16x4_to_f32(vcreate_u16(bits[1])),
        ]
    }
}

/// A vector of 16-bit scales widened to 32 bits (rows 0..4, rows 4..8).
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
pub(crate) unsafe fn widen(s: int16x8_t) -> [int32x4_t; 2] {
    // SAFETY: register-only NEON operations, which the caller has.
    unsafe { [vmovl_s16(vget_low_s16(s)), vmovl_high_s16(s)] }
}

/// `Σ_sb min[sb][r] · bs(m, sb)` for the 8 rows `r` of a Q4_K/Q5_K block (rows 0..4, rows
/// 4..8) and each of `M` activation rows `m`, where `bs(m, sb)` is activation row `m`'s quant
/// sum over sub-block `sb`.
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
pub(crate) unsafe fn min_sums<P: KBlock, const M: usize>(
    w: &P,
    bs: impl Fn(usize, usize) -> i16,
) -> [[int32x4_t; 2]; M] {
    // SAFETY: register-only NEON operations, which the caller has.
    unsafe {
        let mut acc = [[vdupq_n_s32(0); 2]; M];
        for sb in 0..8 {
            let (_, mins) = w.scales(2 * sb);
            for (m, a) in acc.iter_mut().enumerate() {
                let s = bs(m, sb);
                a[0] = vmlal_n_s16(a[0], vget_low_s16(mins), s);
                a[1] = vmlal_high_n_s16(a[1], mins, s);
            }
        }
        acc
    }
}
