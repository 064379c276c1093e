//! NEON versions of the plain path's dot products ([`crate::vecdot`]) for Q4_0, Q4_1, Q5_0,
//! Q8_0, IQ4_NL, Q4_K, Q5_K, Q6_K, F16 and F32, and the plain layout's GEMV/GEMM pairs built on
//! them (the other types are in [`super::plain_rows`]).
//!
//! Weights are decoded to signed bytes in registers; the byte products are widened to `i16`
//! (`smull`, exact for every pair including `-128 · -128`) and summed pairwise into `i32`, so
//! every block's integer sum equals the portable kernel's. Only the order of the `f32` scaling
//! and accumulation differs. Float rows are multiplied and accumulated in `f32` lanes.

use std::arch::aarch64::*;

use crate::blocks::{
    k4_scale_min, BlockIq4Nl, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ6K,
    BlockQ8K, BlockQ8_0, BlockQ8_1, F16Bits, IQ4NL_LEVELS,
};
use crate::cpu::KernelSet;
use crate::kernel_api::Kernels;
use crate::kernels::aarch64::asm::f16x4_to_f32;
use crate::kernels::aarch64::rows4::load16;
use crate::kernels::aarch64::{target_entries, Neon};

/// `Σ w·a` over 16 signed bytes, as four `i32` lanes (added to `acc`).
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
pub(super) unsafe fn dot16(acc: int32x4_t, w: int8x16_t, a: int8x16_t) -> int32x4_t {
    // SAFETY: NEON, the caller's contract.
    unsafe {
        let acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(w), vget_low_s8(a)));
        vpadalq_s16(acc, vmull_high_s8(w, a))
    }
}

/// `Σ w·a` of a 32-weight block given as its low (0..16) and high (16..32) halves.
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
pub(super) unsafe fn dot32(lo: int8x16_t, hi: int8x16_t, a: &[i8; 32]) -> i32 {
    // SAFETY: NEON, the caller's contract.
    unsafe {
        vaddvq_s32(dot16(
            dot16(vdupq_n_s32(0), lo, load16(a, 0)),
            hi,
            load16(a, 1),
        ))
    }
}

/// The nibbles of 16 packed bytes: (low, high) as unsigned bytes.
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
pub(super) unsafe fn nibbles(qs: &[u8; 16]) -> (uint8x16_t, uint8x16_t) {
    // SAFETY: NEON, the caller's contract.
    unsafe {
        let q = vreinterpretq_u8_s8(load16(qs, 0));
        (vandq_u8(q, vdupq_n_u8(0x0f)), vshrq_n_u8::<4>(q))
    }
}

/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn q4_0(w: &[BlockQ4_0], a: &[BlockQ8_0]) -> f32 {
    let mut sum = 0.0f32;
    for (wb, ab) in w.iter().zip(a) {
        // SAFETY: NEON, the caller's contract.
        let s = unsafe {
            let (lo, hi) = nibbles(&wb.qs);
            let eight = vdupq_n_s8(8);
            let lo = vsubq_s8(vreinterpretq_s8_u8(lo), eight);
            let hi = vsubq_s8(vreinterpretq_s8_u8(hi), eight);
            dot32(lo, hi, &ab.qs)
        };
        sum += s as f32 * (wb.d.to_f32() * ab.d.to_f32());
    }
    sum
}

/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn q4_1(w: &[BlockQ4_1], a: &[BlockQ8_1]) -> f32 {
    let mut sum = 0.0f32;
    for (wb, ab) in w.iter().zip(a) {
        // SAFETY: NEON, the caller's contract.
        let s = unsafe {
            let (lo, hi) = nibbles(&wb.qs);
            dot32(vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(hi), &ab.qs)
        };
        sum += wb.d.to_f32() * ab.d.to_f32() * s as f32 + wb.m.to_f32() * ab.s.to_f32();
    }
    sum
}

/// The fifth bits of a Q5_0 block as `0x10` bytes: (weights 0..16, weights 16..32).
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
pub(super) unsafe fn fifth_bits(qh: [u8; 4]) -> (uint8x16_t, uint8x16_t) {
    const BITS: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
    const LO: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1];
    const HI: [u8; 16] = [2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3];
    // SAFETY: NEON, the caller's contract; the constant tables are 16 bytes each.
    unsafe {
        let bytes = vreinterpretq_u8_u32(vdupq_n_u32(u32::from_le_bytes(qh)));
        let bits = vld1q_u8(BITS.as_ptr());
        let ten = vdupq_n_u8(0x10);
        let spread = |idx: &[u8; 16]| {
            let b = vqtbl1q_u8(bytes, vld1q_u8(idx.as_ptr()));
            vandq_u8(vtstq_u8(b, bits), ten)
        };
        (spread(&LO), spread(&HI))
    }
}

/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn q5_0(w: &[BlockQ5_0], a: &[BlockQ8_0]) -> f32 {
    let mut sum = 0.0f32;
    for (wb, ab) in w.iter().zip(a) {
        // SAFETY: NEON, the caller's contract.
        let s = unsafe {
            let (lo, hi) = nibbles(&wb.qs);
            let (hlo, hhi) = fifth_bits(wb.qh);
            let sixteen = vdupq_n_s8(16);
            let lo = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, hlo)), sixteen);
            let hi = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(hi, hhi)), sixteen);
            dot32(lo, hi, &ab.qs)
        };
        sum += s as f32 * (wb.d.to_f32() * ab.d.to_f32());
    }
    sum
}

/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn q8_0(w: &[BlockQ8_0], a: &[BlockQ8_0]) -> f32 {
    let mut sum = 0.0f32;
    for (wb, ab) in w.iter().zip(a) {
        // SAFETY: NEON, the caller's contract.
        let s = unsafe { dot32(load16(&wb.qs, 0), load16(&wb.qs, 1), &ab.qs) };
        sum += s as f32 * (wb.d.to_f32() * ab.d.to_f32());
    }
    sum
}

/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn iq4_nl(w: &[BlockIq4Nl], a: &[BlockQ8_0]) -> f32 {
    let mut sum = 0.0f32;
    // SAFETY: NEON, the caller's contract; the table is 16 bytes.
    let levels = unsafe { vld1q_s8(IQ4NL_LEVELS.as_ptr()) };
    for (wb, ab) in w.iter().zip(a) {
        // SAFETY: NEON, the caller's contract.
        let s = unsafe {
            let (lo, hi) = nibbles(&wb.qs);
            dot32(vqtbl1q_s8(levels, lo), vqtbl1q_s8(levels, hi), &ab.qs)
        };
        sum += (wb.d.to_f32() * ab.d.to_f32()) * s as f32;
    }
    sum
}

/// The Q4_K/Q5_K super-block: `d·d_a·Σ sc·dot − dmin·d_a·Σ m·bsum`, with the sub-block pair
/// `j`'s 32 packed bytes and (for Q5_K) the fifth bits taken from `qh` bits `2j` and `2j + 1`.
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn k4_super<const FIFTH: bool>(
    d: F16Bits,
    dmin: F16Bits,
    scales: &[u8; 12],
    qs: &[u8; 128],
    qh: &[u8; 32],
    ab: &BlockQ8K,
) -> f32 {
    // SAFETY: NEON, the caller's contract; every load stays inside the blocks.
    unsafe {
        let mask = vdupq_n_u8(0x0f);
        let ten = vdupq_n_u8(0x10);
        let h = [
            vreinterpretq_u8_s8(load16(qh, 0)),
            vreinterpretq_u8_s8(load16(qh, 1)),
        ];
        let mut sumi = 0i32;
        let mut summ = 0i32;
        for j in 0..4 {
            let (sc_lo, m_lo) = k4_scale_min(scales, 2 * j);
            let (sc_hi, m_hi) = k4_scale_min(scales, 2 * j + 1);
            let q = [
                vreinterpretq_u8_s8(load16(qs, 2 * j)),
                vreinterpretq_u8_s8(load16(qs, 2 * j + 1)),
            ];
            let mut lo = [vandq_u8(q[0], mask), vandq_u8(q[1], mask)];
            let mut hi = [vshrq_n_u8::<4>(q[0]), vshrq_n_u8::<4>(q[1])];
            if FIFTH {
                let sl = vdupq_n_s8(4 - 2 * j as i8);
                let sh = vdupq_n_s8(3 - 2 * j as i8);
                for t in 0..2 {
                    lo[t] = vorrq_u8(lo[t], vandq_u8(vshlq_u8(h[t], sl), ten));
                    hi[t] = vorrq_u8(hi[t], vandq_u8(vshlq_u8(h[t], sh), ten));
                }
            }
            let a = |k: usize| load16(&ab.qs, 4 * j + k);
            let dl = dot16(
                dot16(vdupq_n_s32(0), vreinterpretq_s8_u8(lo[0]), a(0)),
                vreinterpretq_s8_u8(lo[1]),
                a(1),
            );
            let dh = dot16(
                dot16(vdupq_n_s32(0), vreinterpretq_s8_u8(hi[0]), a(2)),
                vreinterpretq_s8_u8(hi[1]),
                a(3),
            );
            sumi += sc_lo as i32 * vaddvq_s32(dl) + sc_hi as i32 * vaddvq_s32(dh);
            let b = &ab.bsums;
            summ += m_lo as i32 * (b[4 * j] as i32 + b[4 * j + 1] as i32)
                + m_hi as i32 * (b[4 * j + 2] as i32 + b[4 * j + 3] as i32);
        }
        d.to_f32() * ab.d * sumi as f32 - dmin.to_f32() * ab.d * summ as f32
    }
}

/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn q4_k(w: &[BlockQ4K], a: &[BlockQ8K]) -> f32 {
    let no_qh = [0u8; 32];
    w.iter()
        .zip(a)
        // SAFETY: NEON, the caller's contract.
        .map(|(wb, ab)| unsafe { k4_super::<false>(wb.d, wb.dmin, &wb.scales, &wb.qs, &no_qh, ab) })
        .sum()
}

/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn q5_k(w: &[BlockQ5K], a: &[BlockQ8K]) -> f32 {
    w.iter()
        .zip(a)
        // SAFETY: NEON, the caller's contract.
        .map(|(wb, ab)| unsafe { k4_super::<true>(wb.d, wb.dmin, &wb.scales, &wb.qs, &wb.qh, ab) })
        .sum()
}

/// Q6_K: in half `h`, quarter `s` (weights `128h + 32s + l`) takes the low nibble of
/// `ql[64h + 32(s % 2) + l]` (high nibble for `s >= 2`) and bits `2s, 2s+1` of `qh[32h + l]`.
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn q6_k(w: &[BlockQ6K], a: &[BlockQ8K]) -> f32 {
    let mut sum = 0.0f32;
    for (wb, ab) in w.iter().zip(a) {
        // SAFETY: NEON, the caller's contract; every load stays inside the blocks.
        let sumi = unsafe {
            let mask = vdupq_n_u8(0x0f);
            let top = vdupq_n_u8(0x30);
            let bias = vdupq_n_s8(32);
            let mut sumi = 0i32;
            for h in 0..2 {
                let ql = [
                    vreinterpretq_u8_s8(load16(&wb.ql, 4 * h)),
                    vreinterpretq_u8_s8(load16(&wb.ql, 4 * h + 1)),
                    vreinterpretq_u8_s8(load16(&wb.ql, 4 * h + 2)),
                    vreinterpretq_u8_s8(load16(&wb.ql, 4 * h + 3)),
                ];
                let qh = [
                    vreinterpretq_u8_s8(load16(&wb.qh, 2 * h)),
                    vreinterpretq_u8_s8(load16(&wb.qh, 2 * h + 1)),
                ];
                for s in 0..4 {
                    let shift = vdupq_n_s8(4 - 2 * s as i8);
                    for t in 0..2 {
                        let l = ql[2 * (s % 2) + t];
                        let nib = if s < 2 {
                            vandq_u8(l, mask)
                        } else {
                            vshrq_n_u8::<4>(l)
                        };
                        let q = vorrq_u8(nib, vandq_u8(vshlq_u8(qh[t], shift), top));
                        let q = vsubq_s8(vreinterpretq_s8_u8(q), bias);
                        let g = 8 * h + 2 * s + t;
                        let dot = vaddvq_s32(dot16(vdupq_n_s32(0), q, load16(&ab.qs, g)));
                        sumi += wb.scales[g] as i32 * dot;
                    }
                }
            }
            sumi
        };
        sum += wb.d.to_f32() * ab.d * sumi as f32;
    }
    sum
}

/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn f32_dot(w: &[f32], a: &[f32]) -> f32 {
    let n = w.len().min(a.len());
    let (w, a) = (&w[..n], &a[..n]);
    // SAFETY: NEON, the caller's contract; every load reads 4 floats of a 16-float chunk.
    unsafe {
        let mut acc = [vdupq_n_f32(0.0); 4];
        let (wc, ac) = (w.chunks_exact(16), a.chunks_exact(16));
        let tail: f32 = wc
            .remainder()
            .iter()
            .zip(ac.remainder())
            .map(|(x, y)| x * y)
            .sum();
        for (x, y) in wc.zip(ac) {
            for (k, acc) in acc.iter_mut().enumerate() {
                *acc = vfmaq_f32(
                    *acc,
                    vld1q_f32(x[4 * k..].as_ptr()),
                    vld1q_f32(y[4 * k..].as_ptr()),
                );
            }
        }
        vaddvq_f32(vaddq_f32(
            vaddq_f32(acc[0], acc[1]),
            vaddq_f32(acc[2], acc[3]),
        )) + tail
    }
}

/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn f16x8(h: &[F16Bits]) -> (float32x4_t, float32x4_t) {
    let h: &[F16Bits; 8] = h.try_into().expect("8 halves");
    let bytes: &[u8; 16] = bytemuck::cast_ref(h);
    // SAFETY: NEON, the caller's contract; `bytes` is 16 bytes.
    unsafe {
        let v = vreinterpretq_u16_s8(load16(bytes, 0));
        (
            f16x4_to_f32(vget_low_u16(v)),
            f16x4_to_f32(vget_high_u16(v)),
        )
    }
}

/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn f16_dot(w: &[F16Bits], a: &[F16Bits]) -> f32 {
    let n = w.len().min(a.len());
    let (w, a) = (&w[..n], &a[..n]);
    // SAFETY: NEON, the caller's contract.
    unsafe {
        let mut acc = [vdupq_n_f32(0.0); 2];
        let (wc, ac) = (w.chunks_exact(8), a.chunks_exact(8));
        let tail: f32 = wc
            .remainder()
            .iter()
            .zip(ac.remainder())
            .map(|(x, y)| x.to_f32() * y.to_f32())
            .sum();
        for (x, y) in wc.zip(ac) {
            let (x0, x1) = f16x8(x);
            let (y0, y1) = f16x8(y);
            acc[0] = vfmaq_f32(acc[0], x0, y0);
            acc[1] = vfmaq_f32(acc[1], x1, y1);
        }
        vaddvq_f32(vaddq_f32(acc[0], acc[1])) + tail
    }
}

macro_rules! plain_rows {
    ($($(#[$m:meta])* $rows:ident, $dot:ident, $gemv:ident, $gemm:ident ($w:ty, $a:ty) => $body:path;)*) => {
        target_entries! {
            "neon";
            $(fn $dot(w: &[$w], a: &[$a]) -> f32 => $body;)*
        }
        $(
            /// One output per weight row in `w` (`a.len()` blocks each).
            fn $gemv(w: &[$w], a: &[$a], out: &mut [f32]) {
                for (o, row) in out.iter_mut().zip(w.chunks_exact(a.len().max(1))) {
                    *o = $dot(row, a);
                }
            }
            /// Four activation rows stored one after the other.
            fn $gemm(w: &[$w], a: &[$a], out: &mut [f32]) {
                for (o, row) in out.iter_mut().zip(a.chunks_exact(w.len().max(1))) {
                    *o = $dot(w, row);
                }
            }
            $(#[$m])*
            pub(crate) fn $rows(_: Neon) -> Kernels<$w, $a, $a> {
                Kernels::pair(KernelSet::Neon, $gemv, $gemm)
            }
        )*
    };
}
/// Also the constructor maker of [`super::plain_rows`].
pub(super) use plain_rows;

plain_rows! {
    /// NEON Q4_0 · Q8_0 rows.
    q4_0_rows, q4_0_dot, q4_0_gemv, q4_0_gemm (BlockQ4_0, BlockQ8_0) => q4_0;
    /// NEON Q4_1 · Q8_1 rows.
    q4_1_rows, q4_1_dot, q4_1_gemv, q4_1_gemm (BlockQ4_1, BlockQ8_1) => q4_1;
    /// NEON Q5_0 · Q8_0 rows.
    q5_0_rows, q5_0_dot, q5_0_gemv, q5_0_gemm (BlockQ5_0, BlockQ8_0) => q5_0;
    /// NEON Q8_0 · Q8_0 rows.
    q8_0_rows, q8_0_dot, q8_0_gemv, q8_0_gemm (BlockQ8_0, BlockQ8_0) => q8_0;
    /// NEON IQ4_NL · Q8_0 rows.
    iq4_nl_rows, iq4_nl_dot, iq4_nl_gemv, iq4_nl_gemm (BlockIq4Nl, BlockQ8_0) => iq4_nl;
    /// NEON Q4_K · Q8_K rows.
    q4_k_rows, q4_k_dot, q4_k_gemv, q4_k_gemm (BlockQ4K, BlockQ8K) => q4_k;
    /// NEON Q5_K · Q8_K rows.
    q5_k_rows, q5_k_dot, q5_k_gemv, q5_k_gemm (BlockQ5K, BlockQ8K) => q5_k;
    /// NEON Q6_K · Q8_K rows.
    q6_k_rows, q6_k_dot, q6_k_gemv, q6_k_gemm (BlockQ6K, BlockQ8K) => q6_k;
    /// NEON F16 · F16 rows (f32 accumulation).
    f16_rows, f16_dot_entry, f16_gemv, f16_gemm (F16Bits, F16Bits) => f16_dot;
    /// NEON F32 · F32 rows (f32 accumulation).
    f32_rows, f32_dot_entry, f32_gemv, f32_gemm (f32, f32) => f32_dot;
}
