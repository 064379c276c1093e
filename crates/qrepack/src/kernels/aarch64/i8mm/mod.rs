//! The i8mm kernel set: GEMV and GEMM of ggml's 4-row layouts interleaved in 8-byte chunks
//! (`q4_0_4x8`, `q8_0_4x8`).
//!
//! Four activation rows (GEMM): the quad interleaves its rows in 8-byte chunks, so its 16-byte
//! vector `2c + p` is the 2x8 matrix of elements `8c..8c+8` of activation rows `2p, 2p+1`, and
//! the decoded weight vector `2c + q` the same for weight rows `2q, 2q+1`: `smmla` adds their
//! 2x2 product, 16 per block column for the 4x4 outputs. One activation row (GEMV): `sdot` of
//! each weight vector with the 8 activation bytes repeated, 8 per block column, and a pairwise
//! add gives the four rows.

pub(crate) mod k_quants;

use std::arch::aarch64::*;

use crate::blocks::{BlockQ8_0, BlockQ8_0x4};
use crate::cpu::KernelSet;
use crate::kernel_api::Kernels;
use crate::kernels::aarch64::asm::{sdot, smmla};
use crate::kernels::aarch64::rows4::{load16, scales_f32, splat_f16, Rows4};
use crate::kernels::aarch64::{target_entries, I8mm};

/// The GEMV/GEMM pair of a 4-row layout interleaved in 8-byte chunks.
pub(crate) fn rows4x8_kernels<P: Rows4>(_: I8mm) -> Kernels<P, BlockQ8_0, BlockQ8_0x4> {
    Kernels::pair(KernelSet::I8mm, gemv::<P>, gemm::<P>)
}

target_entries! {
    "neon,dotprod,i8mm";
    fn gemv<P: Rows4>(w: &[P], a: &[BlockQ8_0], out: &mut [f32]) => gemv_body;
    fn gemm<P: Rows4>(w: &[P], a: &[BlockQ8_0x4], out: &mut [f32]) => gemm_body;
}

/// Every 4-row group in `w` (`a.len()` blocks each) times one activation row.
///
/// # Safety
/// The CPU must have NEON and dotprod, and the caller must be compiled with them.
#[inline(always)]
unsafe fn gemv_body<P: Rows4>(w: &[P], a: &[BlockQ8_0], out: &mut [f32]) {
    if a.is_empty() {
        out.fill(0.0);
        return;
    }
    // SAFETY: the features are the caller's contract; loads and stores stay inside the blocks
    // and the 4-float output chunks.
    unsafe {
        for (group, o) in w.chunks_exact(a.len()).zip(out.chunks_exact_mut(4)) {
            let mut acc = vdupq_n_f32(0.0);
            for (b, x) in group.iter().zip(a) {
                let v = b.decode();
                let lo = vreinterpretq_s64_s8(load16(&x.qs, 0));
                let hi = vreinterpretq_s64_s8(load16(&x.qs, 1));
                let chunks = [
                    vreinterpretq_s8_s64(vdupq_laneq_s64::<0>(lo)),
                    vreinterpretq_s8_s64(vdupq_laneq_s64::<1>(lo)),
                    vreinterpretq_s8_s64(vdupq_laneq_s64::<0>(hi)),
                    vreinterpretq_s8_s64(vdupq_laneq_s64::<1>(hi)),
                ];
                let (mut s01, mut s23) = (vdupq_n_s32(0), vdupq_n_s32(0));
                for (c, x8) in chunks.iter().enumerate() {
                    s01 = sdot(s01, v[2 * c], *x8);
                    s23 = sdot(s23, v[2 * c + 1], *x8);
                }
                let s = vpaddq_s32(s01, s23);
                let d = vmulq_f32(b.row_scales(), splat_f16(x.d));
                acc = vfmaq_f32(acc, vcvtq_f32_s32(s), d);
            }
            vst1q_f32(o.as_mut_ptr(), vmulq_n_f32(acc, P::SCALE));
        }
    }
}

/// One 4-row group (`w.len()` blocks) times one activation quad: 16 outputs, activation row
/// major.
///
/// # Safety
/// The CPU must have NEON and i8mm, and the caller must be compiled with them.
#[inline(always)]
unsafe fn gemm_body<P: Rows4>(w: &[P], a: &[BlockQ8_0x4], out: &mut [f32]) {
    let out: &mut [f32; 16] = (&mut out[..16]).try_into().expect("16 outputs");
    // SAFETY: the features are the caller's contract; loads and stores stay inside the blocks
    // and `out`.
    unsafe {
        let mut acc = [vdupq_n_f32(0.0); 4];
        for (b, q) in w.iter().zip(a) {
            let v = b.decode();
            // s[p][r]: activation rows 2p, 2p+1 times weight rows 2r, 2r+1.
            let mut s = [[vdupq_n_s32(0); 2]; 2];
            for c in 0..4 {
                for (p, sp) in s.iter_mut().enumerate() {
                    let x = load16(&q.qs, 2 * c + p);
                    sp[0] = smmla(sp[0], x, v[2 * c]);
                    sp[1] = smmla(sp[1], x, v[2 * c + 1]);
                }
            }
            let wd = b.row_scales();
            let ad = scales_f32(&q.d);
            let rows = |pair: [int32x4_t; 2]| {
                let (x, y) = (
                    vreinterpretq_s64_s32(pair[0]),
                    vreinterpretq_s64_s32(pair[1]),
                );
                [
                    vcvtq_f32_s32(vreinterpretq_s32_s64(vzip1q_s64(x, y))),
                    vcvtq_f32_s32(vreinterpretq_s32_s64(vzip2q_s64(x, y))),
                ]
            };
            let [r0, r1] = rows(s[0]);
            let [r2, r3] = rows(s[1]);
            acc[0] = vfmaq_f32(acc[0], r0, vmulq_laneq_f32::<0>(wd, ad));
            acc[1] = vfmaq_f32(acc[1], r1, vmulq_laneq_f32::<1>(wd, ad));
            acc[2] = vfmaq_f32(acc[2], r2, vmulq_laneq_f32::<2>(wd, ad));
            acc[3] = vfmaq_f32(acc[3], r3, vmulq_laneq_f32::<3>(wd, ad));
        }
        for (o, v) in out.chunks_exact_mut(4).zip(acc) {
            vst1q_f32(o.as_mut_ptr(), vmulq_n_f32(v, P::SCALE));
        }
    }
}
