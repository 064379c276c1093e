//! NEON versions of the activation quantizers, byte for byte those of [`crate::activation`]:
//! Q8_0 in the plain rows of the x86 semantics ([`PlainQ8_0`], inverse scale `127 / amax`) and
//! ggml's ARM build's ([`ArmQ8_0Interleaved`], inverse `1 / (amax / 127)`), plain Q8_1 rows
//! ([`PlainQ8_1`], x86 semantics) and Q8_K, plain ([`PlainQ8K`]) and as ggml's ARM quads
//! ([`ArmQ8KInterleaved`]).
//!
//! # Exactness
//!
//! The block maximum is the same value as the portable fold (a NaN anywhere gives NaN, which is
//! replaced by the canonical NaN so the f16 scale has the portable bits), the scale and its
//! inverse are computed with the same scalar `f32` operations, and each product `v · id` is the
//! same single multiplication. `fcvtns` rounds it half to even like the portable code, and the
//! saturating narrows (`sqxtn` to `i16`, then to `i8`) reproduce its clamp to `[-128, 127]`,
//! including the infinite products of a tiny maximum; NaN converts to 0 in both.

use std::arch::aarch64::*;

use crate::activation::{
    interleave_q8_0, interleave_q8_k_by, ActQuantizer, ArmQ8KInterleaved, ArmQ8_0Interleaved,
    PlainQ8K, PlainQ8_0, PlainQ8_1,
};
use crate::blocks::{BlockQ8K, BlockQ8Kx4, BlockQ8_0, BlockQ8_0x4, BlockQ8_1, F16Bits};
use crate::kernels::aarch64::{target_entries, Neon};
use crate::types::QK_K;

/// The NEON quantizers of ggml's ARM interleaved Q8_0 activations.
pub(crate) fn arm_q8_0_interleaved<const IL: usize>(
    _: Neon,
) -> ActQuantizer<ArmQ8_0Interleaved<IL>> {
    const { assert!(IL == 4 || IL == 8) };
    let quad: fn([&[f32]; 4], &mut [BlockQ8_0x4]) =
        if IL == 4 { arm_quad_il4 } else { arm_quad_il8 };
    ActQuantizer { row: arm_row, quad }
}

/// The NEON quantizers of plain Q8_0 rows (x86 semantics, the plain path's format).
pub(crate) fn q8_0_plain(_: Neon) -> ActQuantizer<PlainQ8_0> {
    ActQuantizer {
        row: x86_row,
        quad: x86_rows4,
    }
}

/// The NEON quantizers of plain Q8_1 rows (x86 semantics, the plain path's format).
pub(crate) fn q8_1_plain(_: Neon) -> ActQuantizer<PlainQ8_1> {
    ActQuantizer {
        row: q8_1_row,
        quad: q8_1_rows4,
    }
}

/// The NEON quantizers of plain Q8_K rows (the plain path's format of the K-quants).
pub(crate) fn q8_k_plain(_: Neon) -> ActQuantizer<PlainQ8K> {
    ActQuantizer {
        row: q8_k_row,
        quad: q8_k_rows4,
    }
}

/// The NEON quantizers of ggml's ARM Q8_K quads (rows as the reference quantizer).
pub(crate) fn arm_q8_k_interleaved<const IL: usize>(
    _: Neon,
) -> ActQuantizer<ArmQ8KInterleaved<IL>> {
    const { assert!(IL == 4 || IL == 8) };
    let quad: fn([&[f32]; 4], &mut [BlockQ8Kx4]) = if IL == 4 {
        q8_k_quad_il4
    } else {
        q8_k_quad_il8
    };
    ActQuantizer {
        row: q8_k_row,
        quad,
    }
}

target_entries! {
    "neon";
    fn q8_1_row(x: &[f32], out: &mut [BlockQ8_1]) => q8_1_row_body;
    fn q8_k_row(x: &[f32], out: &mut [BlockQ8K]) => q8_k_row_body;
    fn q8_k_quad_il4(x: [&[f32]; 4], out: &mut [BlockQ8Kx4]) => q8_k_quad_body::<4>;
    fn q8_k_quad_il8(x: [&[f32]; 4], out: &mut [BlockQ8Kx4]) => q8_k_quad_body::<8>;
    fn arm_row(x: &[f32], out: &mut [BlockQ8_0]) => row_body::<true>;
    fn x86_row(x: &[f32], out: &mut [BlockQ8_0]) => row_body::<false>;
    fn arm_quad_il4(x: [&[f32]; 4], out: &mut [BlockQ8_0x4]) => quad_body::<4>;
    fn arm_quad_il8(x: [&[f32]; 4], out: &mut [BlockQ8_0x4]) => quad_body::<8>;
}

fn x86_rows4(x: [&[f32]; 4], out: &mut [BlockQ8_0]) {
    rows4(x, out, x86_row)
}

fn q8_1_rows4(x: [&[f32]; 4], out: &mut [BlockQ8_1]) {
    rows4(x, out, q8_1_row)
}

fn q8_k_rows4(x: [&[f32]; 4], out: &mut [BlockQ8K]) {
    rows4(x, out, q8_k_row)
}

/// Four plain rows one after the other (the plain formats' quads).
fn rows4<B>(x: [&[f32]; 4], out: &mut [B], row: fn(&[f32], &mut [B])) {
    let nb = out.len() / 4;
    for (r, dst) in x.iter().zip(out.chunks_exact_mut(nb.max(1))) {
        row(r, dst);
    }
}

/// One block of 32 values.
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn block<const ARM: bool>(x: &[f32; 32]) -> BlockQ8_0 {
    // SAFETY: NEON, the caller's contract.
    unsafe { block_amax::<ARM>(x).0 }
}

/// One block of 32 values and the block's `amax` (NaN when a value is NaN).
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn block_amax<const ARM: bool>(x: &[f32; 32]) -> (BlockQ8_0, f32) {
    // SAFETY: NEON, the caller's contract; every load reads 4 floats inside `x`.
    unsafe {
        let p = x.as_ptr();
        // SAFETY (loads): `x` is 32 floats, so `p + 4j .. p + 4j + 4` is inside it for j < 8.
        let v: [float32x4_t; 8] = [
            vld1q_f32(p),
            vld1q_f32(p.add(4)),
            vld1q_f32(p.add(8)),
            vld1q_f32(p.add(12)),
            vld1q_f32(p.add(16)),
            vld1q_f32(p.add(20)),
            vld1q_f32(p.add(24)),
            vld1q_f32(p.add(28)),
        ];
        let mut m = vabsq_f32(v[0]);
        for vj in &v[1..] {
            m = vmaxq_f32(m, vabsq_f32(*vj));
        }
        let amax = vmaxvq_f32(m);
        let amax = if amax.is_nan() { f32::NAN } else { amax };
        let d = amax / 127.0;
        let id = if ARM {
            if d != 0.0 {
                1.0 / d
            } else {
                0.0
            }
        } else if amax != 0.0 {
            127.0 / amax
        } else {
            0.0
        };
        let pair = |k: usize| {
            let lo = vqmovn_s32(vcvtnq_s32_f32(vmulq_n_f32(v[2 * k], id)));
            let hi = vqmovn_s32(vcvtnq_s32_f32(vmulq_n_f32(v[2 * k + 1], id)));
            vcombine_s16(lo, hi)
        };
        let q16 = [pair(0), pair(1), pair(2), pair(3)];
        let mut qs = [0i8; 32];
        vst1q_s8(
            qs.as_mut_ptr(),
            vcombine_s8(vqmovn_s16(q16[0]), vqmovn_s16(q16[1])),
        );
        vst1q_s8(
            qs[16..].as_mut_ptr(),
            vcombine_s8(vqmovn_s16(q16[2]), vqmovn_s16(q16[3])),
        );
        let b = BlockQ8_0 {
            d: F16Bits::from_f32(d),
            qs,
        };
        (b, amax)
    }
}

/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn row_body<const ARM: bool>(x: &[f32], out: &mut [BlockQ8_0]) {
    for (b, xs) in out.iter_mut().zip(x.chunks_exact(32)) {
        // SAFETY: NEON, the caller's contract.
        *b = unsafe { block::<ARM>(xs.try_into().expect("32 values")) };
    }
}

/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn quad_body<const IL: usize>(x: [&[f32]; 4], out: &mut [BlockQ8_0x4]) {
    for (i, quad) in out.iter_mut().enumerate() {
        // SAFETY: NEON, the caller's contract.
        let block_of = |m: usize| -> BlockQ8_0 {
            let xs: &[f32; 32] = x[m][32 * i..32 * i + 32].try_into().expect("32 values");
            // SAFETY: NEON, the caller's contract.
            unsafe { block::<true>(xs) }
        };
        let rows = [block_of(0), block_of(1), block_of(2), block_of(3)];
        *quad = interleave_q8_0(&rows, IL);
    }
}

/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn q8_1_row_body(x: &[f32], out: &mut [BlockQ8_1]) {
    for (b, xs) in out.iter_mut().zip(x.chunks_exact(32)) {
        // SAFETY: NEON, the caller's contract; the loads read the block's 32 quants.
        unsafe {
            let (q, amax) = block_amax::<false>(xs.try_into().expect("32 values"));
            let sum = vaddlvq_s8(vld1q_s8(q.qs.as_ptr())) as i32
                + vaddlvq_s8(vld1q_s8(q.qs[16..].as_ptr())) as i32;
            *b = BlockQ8_1 {
                d: q.d,
                s: F16Bits::from_f32(amax / 127.0 * sum as f32),
                qs: q.qs,
            };
        }
    }
}

/// One Q8_K block of 256 values as [`crate::activation::quantize_block_q8_k`]: the scale's sign
/// is that of the first value of largest magnitude, a NaN or infinite value poisons the block.
///
/// The maximum is the same value as the portable loop's; `fminnm` keeps the portable
/// `min(127)` when a product is NaN (an infinite inverse scale times zero); the conversion and
/// the saturating narrows round and clamp as the portable code.
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn q8_k_block(x: &[f32; QK_K]) -> BlockQ8K {
    // SAFETY: NEON, the caller's contract; every load reads 4 floats inside `x` (64 vectors) and
    // every store writes 16 bytes inside `qs`.
    unsafe {
        let p = x.as_ptr();
        let mut m = vdupq_n_f32(0.0);
        for j in 0..QK_K / 4 {
            m = vmaxq_f32(m, vabsq_f32(vld1q_f32(p.add(4 * j))));
        }
        let amax = vmaxvq_f32(m);
        if !amax.is_finite() {
            return BlockQ8K {
                d: f32::NAN,
                ..bytemuck::Zeroable::zeroed()
            };
        }
        if amax == 0.0 {
            return bytemuck::Zeroable::zeroed();
        }
        // The first value whose magnitude is the maximum: the vector, then the lane.
        let first = (0..QK_K / 4)
            .find(|&j| {
                vmaxvq_u32(vceqq_f32(
                    vabsq_f32(vld1q_f32(p.add(4 * j))),
                    vdupq_n_f32(amax),
                )) != 0
            })
            .expect("the maximum is one of the values");
        let max = x[4 * first..4 * first + 4]
            .iter()
            .copied()
            .find(|v| v.abs() == amax)
            .expect("the maximum is in this vector");
        let iscale = -127.0 / max;
        let (scale, top) = (vdupq_n_f32(iscale), vdupq_n_f32(127.0));
        let mut out = BlockQ8K {
            d: 1.0 / iscale,
            ..bytemuck::Zeroable::zeroed()
        };
        for g in 0..QK_K / 16 {
            let quarter = |k: usize| {
                let v = vld1q_f32(p.add(16 * g + 4 * k));
                vqmovn_s32(vcvtnq_s32_f32(vminnmq_f32(vmulq_f32(v, scale), top)))
            };
            let lo = vqmovn_s16(vcombine_s16(quarter(0), quarter(1)));
            let hi = vqmovn_s16(vcombine_s16(quarter(2), quarter(3)));
            let q = vcombine_s8(lo, hi);
            vst1q_s8(out.qs[16 * g..16 * g + 16].as_mut_ptr(), q);
            out.bsums[g] = vaddlvq_s8(q);
        }
        out
    }
}

/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn q8_k_row_body(x: &[f32], out: &mut [BlockQ8K]) {
    for (b, xs) in out.iter_mut().zip(x.chunks_exact(QK_K)) {
        // SAFETY: NEON, the caller's contract.
        *b = unsafe { q8_k_block(xs.try_into().expect("256 values")) };
    }
}

/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn q8_k_quad_body<const IL: usize>(x: [&[f32]; 4], out: &mut [BlockQ8Kx4]) {
    for (i, quad) in out.iter_mut().enumerate() {
        let block_of = |m: usize| -> BlockQ8K {
            let xs: &[f32; QK_K] = x[m][QK_K * i..QK_K * (i + 1)]
                .try_into()
                .expect("256 values");
            // SAFETY: NEON, the caller's contract.
            unsafe { q8_k_block(xs) }
        };
        let rows = [block_of(0), block_of(1), block_of(2), block_of(3)];
        *quad = interleave_q8_k_by(&rows, IL);
    }
}
