//! NEON versions of the plain path's dot products ([`crate::vecdot`]) for the types
//! [`super::vecdot`] leaves out: Q5_1 and Q8_1 (with Q8_1 activations), Q2_K, Q3_K, Q8_K and
//! IQ4_XS (with Q8_K activations) and BF16 (with BF16 activations), each with the plain
//! layout's GEMV/GEMM pair.
//!
//! As in [`super::vecdot`], the quants are decoded to signed bytes in registers and multiplied
//! with `smull` into `i16`, summed pairwise into `i32` lanes; the group scales of the
//! super-block types multiply those lanes in `i32` (`mla`), so every super-block's integer sum
//! is exact and only its `f32` scaling and the accumulation over blocks differ from the
//! portable kernels. BF16 is widened to `f32` by a 16-bit left shift (`shll`) and accumulated
//! with `fmla`.

use std::arch::aarch64::*;

use crate::activation::Bf16Bits;
use crate::blocks::{BlockIq4Xs, BlockQ2K, BlockQ3K, BlockQ5_1, BlockQ8K, BlockQ8_1, IQ4NL_LEVELS};
use crate::cpu::KernelSet;
use crate::kernel_api::Kernels;
use crate::kernels::aarch64::neon::vecdot::{dot16, dot32, fifth_bits, nibbles, plain_rows};
use crate::kernels::aarch64::rows4::load16;
use crate::kernels::aarch64::{target_entries, Neon};
use crate::vecdot::q3_k_scales;

/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn q5_1(w: &[BlockQ5_1], a: &[BlockQ8_1]) -> f32 {
    let mut sum = 0.0f32;
    for (wb, ab) in w.iter().zip(a) {
        // SAFETY: NEON, the caller's contract.
        let s = unsafe {
            let (lo, hi) = nibbles(&wb.qs);
            let (hlo, hhi) = fifth_bits(wb.qh);
            dot32(
                vreinterpretq_s8_u8(vorrq_u8(lo, hlo)),
                vreinterpretq_s8_u8(vorrq_u8(hi, hhi)),
                &ab.qs,
            )
        };
        sum += wb.d.to_f32() * ab.d.to_f32() * s as f32 + wb.m.to_f32() * ab.s.to_f32();
    }
    sum
}

/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn q8_1(w: &[BlockQ8_1], a: &[BlockQ8_1]) -> f32 {
    let mut sum = 0.0f32;
    for (wb, ab) in w.iter().zip(a) {
        // SAFETY: NEON, the caller's contract.
        let s = unsafe { dot32(load16(&wb.qs, 0), load16(&wb.qs, 1), &ab.qs) };
        sum += s as f32 * (wb.d.to_f32() * ab.d.to_f32());
    }
    sum
}

/// `acc + scale · Σ q·a` over the 16 weights of group `g` of a super-block (four `i32` lanes).
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn scaled_group(
    acc: int32x4_t,
    q: int8x16_t,
    ab: &BlockQ8K,
    g: usize,
    scale: i32,
) -> int32x4_t {
    // SAFETY: NEON, the caller's contract; `g < 16` keeps the load inside `ab.qs`.
    unsafe { vmlaq_n_s32(acc, dot16(vdupq_n_s32(0), q, load16(&ab.qs, g)), scale) }
}

/// The 2-bit field `s` (bits `2s, 2s+1`) of every byte of `b`.
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn crumbs(b: uint8x16_t, s: usize) -> uint8x16_t {
    // SAFETY: NEON, the caller's contract.
    unsafe { vandq_u8(vshlq_u8(b, vdupq_n_s8(-2 * s as i8)), vdupq_n_u8(3)) }
}

/// Q2_K: in half `h`, quarter `s`, the 16 weights `128h + 32s + 16t + i` (group
/// `8h + 2s + t`) are the field `s` of `qs[32h + 16t + i]`.
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn q2_k(w: &[BlockQ2K], a: &[BlockQ8K]) -> f32 {
    let mut sum = 0.0f32;
    for (wb, ab) in w.iter().zip(a) {
        // SAFETY: NEON, the caller's contract; every load stays inside the blocks.
        let (isum, msum) = unsafe {
            let mut acc = vdupq_n_s32(0);
            for h in 0..2 {
                let qs = [
                    vreinterpretq_u8_s8(load16(&wb.qs, 2 * h)),
                    vreinterpretq_u8_s8(load16(&wb.qs, 2 * h + 1)),
                ];
                for s in 0..4 {
                    for (t, &b) in qs.iter().enumerate() {
                        let g = 8 * h + 2 * s + t;
                        let q = vreinterpretq_s8_u8(crumbs(b, s));
                        acc = scaled_group(acc, q, ab, g, (wb.scales[g] & 0x0f) as i32);
                    }
                }
            }
            // The mins (high nibbles of the scales) times the group sums.
            let mins = vshrq_n_u8::<4>(vreinterpretq_u8_s8(load16(&wb.scales, 0)));
            let m0 = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mins)));
            let m1 = vreinterpretq_s16_u16(vmovl_high_u8(mins));
            let b0 = vld1q_s16(ab.bsums.as_ptr());
            let b1 = vld1q_s16(ab.bsums[8..].as_ptr());
            let m = vmull_s16(vget_low_s16(m0), vget_low_s16(b0));
            let m = vmlal_high_s16(m, m0, b0);
            let m = vmlal_s16(m, vget_low_s16(m1), vget_low_s16(b1));
            let m = vmlal_high_s16(m, m1, b1);
            (vaddvq_s32(acc), vaddvq_s32(m))
        };
        let dall = ab.d * wb.d.to_f32();
        let dmin = ab.d * wb.dmin.to_f32();
        sum += dall * isum as f32 - dmin * msum as f32;
    }
    sum
}

/// Q3_K: as Q2_K's two low bits, minus 4 where the weight's bit in `hmask` is clear (weight
/// `32k + l` has it in bit `k` of `hmask[l]`), with signed 6-bit group scales.
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn q3_k(w: &[BlockQ3K], a: &[BlockQ8K]) -> f32 {
    let mut sum = 0.0f32;
    for (wb, ab) in w.iter().zip(a) {
        let scales = q3_k_scales(&wb.scales);
        // SAFETY: NEON, the caller's contract; every load stays inside the blocks.
        let isum = unsafe {
            let four = vdupq_n_u8(4);
            let hm = [
                vreinterpretq_u8_s8(load16(&wb.hmask, 0)),
                vreinterpretq_u8_s8(load16(&wb.hmask, 1)),
            ];
            let mut acc = vdupq_n_s32(0);
            for h in 0..2 {
                let qs = [
                    vreinterpretq_u8_s8(load16(&wb.qs, 2 * h)),
                    vreinterpretq_u8_s8(load16(&wb.qs, 2 * h + 1)),
                ];
                for s in 0..4 {
                    let bit = vdupq_n_u8(1 << (4 * h + s));
                    for t in 0..2 {
                        let g = 8 * h + 2 * s + t;
                        // 4 where the high bit is clear, 0 where it is set.
                        let low = vbicq_u8(four, vtstq_u8(hm[t], bit));
                        let q = vsubq_s8(
                            vreinterpretq_s8_u8(crumbs(qs[t], s)),
                            vreinterpretq_s8_u8(low),
                        );
                        acc = scaled_group(acc, q, ab, g, scales[g]);
                    }
                }
            }
            vaddvq_s32(acc)
        };
        sum += wb.d.to_f32() * ab.d * isum as f32;
    }
    sum
}

/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn q8_k(w: &[BlockQ8K], a: &[BlockQ8K]) -> f32 {
    let mut sum = 0.0f32;
    for (wb, ab) in w.iter().zip(a) {
        // SAFETY: NEON, the caller's contract; the 16 loads cover the 256 quants.
        let s = unsafe {
            let mut acc = [vdupq_n_s32(0); 2];
            for i in 0..8 {
                acc[0] = dot16(acc[0], load16(&wb.qs, 2 * i), load16(&ab.qs, 2 * i));
                acc[1] = dot16(acc[1], load16(&wb.qs, 2 * i + 1), load16(&ab.qs, 2 * i + 1));
            }
            vaddvq_s32(vaddq_s32(acc[0], acc[1]))
        };
        sum += s as f32 * (wb.d * ab.d);
    }
    sum
}

/// IQ4_XS: sub-block `s` (32 weights) is the 16 bytes `qs[16s..]` (low nibbles first) looked
/// up in the IQ4_NL levels, scaled by its 6-bit scale minus 32.
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn iq4_xs(w: &[BlockIq4Xs], a: &[BlockQ8K]) -> f32 {
    let mut sum = 0.0f32;
    // SAFETY: NEON, the caller's contract; the table is 16 bytes.
    let levels = unsafe { vld1q_s8(IQ4NL_LEVELS.as_ptr()) };
    for (wb, ab) in w.iter().zip(a) {
        let high = u16::from_le_bytes(wb.scales_h);
        // SAFETY: NEON, the caller's contract; every load stays inside the blocks.
        let isum = unsafe {
            let mut acc = vdupq_n_s32(0);
            for s in 0..8 {
                let low = (wb.scales_l[s / 2] >> (4 * (s % 2))) & 0x0f;
                let ls = (low | ((((high >> (2 * s)) & 3) as u8) << 4)) as i32 - 32;
                let q = vreinterpretq_u8_s8(load16(&wb.qs, s));
                let lo = vqtbl1q_s8(levels, vandq_u8(q, vdupq_n_u8(0x0f)));
                let hi = vqtbl1q_s8(levels, vshrq_n_u8::<4>(q));
                let d = dot16(
                    dot16(vdupq_n_s32(0), lo, load16(&ab.qs, 2 * s)),
                    hi,
                    load16(&ab.qs, 2 * s + 1),
                );
                acc = vmlaq_n_s32(acc, d, ls);
            }
            vaddvq_s32(acc)
        };
        sum += wb.d.to_f32() * ab.d * isum as f32;
    }
    sum
}

/// Eight bf16 values widened to f32 (exact: the bits move to the top half).
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn bf16x8(h: &[Bf16Bits]) -> (float32x4_t, float32x4_t) {
    let h: &[Bf16Bits; 8] = h.try_into().expect("8 halves");
    let bytes: &[u8; 16] = bytemuck::cast_ref(h);
    // SAFETY: NEON, the caller's contract; `bytes` is 16 bytes.
    unsafe {
        let v = vreinterpretq_u16_s8(load16(bytes, 0));
        (
            vreinterpretq_f32_u32(vshll_n_u16::<16>(vget_low_u16(v))),
            vreinterpretq_f32_u32(vshll_high_n_u16::<16>(v)),
        )
    }
}

/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn bf16_dot(w: &[Bf16Bits], a: &[Bf16Bits]) -> f32 {
    let n = w.len().min(a.len());
    let (w, a) = (&w[..n], &a[..n]);
    // SAFETY: NEON, the caller's contract; every widening reads 8 values of a 16-value chunk.
    unsafe {
        let mut acc = [vdupq_n_f32(0.0); 4];
        let (wc, ac) = (w.chunks_exact(16), a.chunks_exact(16));
        let tail: f32 = wc
            .remainder()
            .iter()
            .zip(ac.remainder())
            .map(|(x, y)| x.to_f32() * y.to_f32())
            .sum();
        for (x, y) in wc.zip(ac) {
            let (x0, x1) = bf16x8(&x[..8]);
            let (x2, x3) = bf16x8(&x[8..]);
            let (y0, y1) = bf16x8(&y[..8]);
            let (y2, y3) = bf16x8(&y[8..]);
            acc[0] = vfmaq_f32(acc[0], x0, y0);
            acc[1] = vfmaq_f32(acc[1], x1, y1);
            acc[2] = vfmaq_f32(acc[2], x2, y2);
            acc[3] = vfmaq_f32(acc[3], x3, y3);
        }
        vaddvq_f32(vaddq_f32(
            vaddq_f32(acc[0], acc[1]),
            vaddq_f32(acc[2], acc[3]),
        )) + tail
    }
}

plain_rows! {
    /// NEON Q5_1 · Q8_1 rows.
    q5_1_rows, q5_1_dot, q5_1_gemv, q5_1_gemm (BlockQ5_1, BlockQ8_1) => q5_1;
    /// NEON Q8_1 · Q8_1 rows.
    q8_1_rows, q8_1_dot, q8_1_gemv, q8_1_gemm (BlockQ8_1, BlockQ8_1) => q8_1;
    /// NEON Q2_K · Q8_K rows.
    q2_k_rows, q2_k_dot, q2_k_gemv, q2_k_gemm (BlockQ2K, BlockQ8K) => q2_k;
    /// NEON Q3_K · Q8_K rows.
    q3_k_rows, q3_k_dot, q3_k_gemv, q3_k_gemm (BlockQ3K, BlockQ8K) => q3_k;
    /// NEON Q8_K · Q8_K rows.
    q8_k_rows, q8_k_dot, q8_k_gemv, q8_k_gemm (BlockQ8K, BlockQ8K) => q8_k;
    /// NEON IQ4_XS · Q8_K rows.
    iq4_xs_rows, iq4_xs_dot, iq4_xs_gemv, iq4_xs_gemm (BlockIq4Xs, BlockQ8K) => iq4_xs;
    /// NEON BF16 · BF16 rows (f32 accumulation).
    bf16_rows, bf16_dot_entry, bf16_gemv, bf16_gemm (Bf16Bits, Bf16Bits) => bf16_dot;
}
