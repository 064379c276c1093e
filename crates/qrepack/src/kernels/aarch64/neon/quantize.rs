//! NEON versions of the Q8_0 activation quantizers, byte for byte those of
//! [`crate::activation`]: the plain rows of the x86 semantics ([`PlainQ8_0`], inverse scale
//! `127 / amax`) and ggml's ARM build's ([`ArmQ8_0Interleaved`], inverse `1 / (amax / 127)`).
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

use crate::activation::{interleave_q8_0, ActQuantizer, ArmQ8_0Interleaved, PlainQ8_0};
use crate::blocks::{BlockQ8_0, BlockQ8_0x4, F16Bits};
use crate::kernels::aarch64::{target_entries, Neon};

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

target_entries! {
    "neon";
    fn arm_row(x: &[f32], out: &mut [BlockQ8_0]) => row_body::<true>;
    fn x86_row(x: &[f32], out: &mut [BlockQ8_0]) => row_body::<false>;
    fn arm_quad_il4(x: [&[f32]; 4], out: &mut [BlockQ8_0x4]) => quad_body::<4>;
    fn arm_quad_il8(x: [&[f32]; 4], out: &mut [BlockQ8_0x4]) => quad_body::<8>;
}

fn x86_rows4(x: [&[f32]; 4], out: &mut [BlockQ8_0]) {
    let nb = out.len() / 4;
    for (row, dst) in x.iter().zip(out.chunks_exact_mut(nb.max(1))) {
        x86_row(row, dst);
    }
}

/// One block of 32 values.
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn block<const ARM: bool>(x: &[f32; 32]) -> BlockQ8_0 {
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
        BlockQ8_0 {
            d: F16Bits::from_f32(d),
            qs,
        }
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
