//! The dot-product kernel set: GEMV and GEMM of ggml's 4-row layouts interleaved in 4-byte
//! chunks (`q4_0_4x4`, `iq4_nl_4x4`, `q8_0_4x4`) with `sdot` by lane.
//!
//! One activation row (GEMV): decoded vector `v[j]` (elements `4j..4j+4` of the four rows) meets
//! the 4-byte group `j % 4` of the activation's 16-byte half `j / 4`. Four rows (GEMM): the
//! activation quad interleaves its rows in 4-byte chunks too, so its 16-byte vector `j` holds
//! elements `4j..4j+4` of the four activation rows, and `sdot` by lane `m` adds row `m`'s
//! products to the four weight rows' sums of activation row `m`. 8 `sdot` per block column for
//! one row, 32 for four.

pub(crate) mod k_quants;

use std::arch::aarch64::*;

use crate::blocks::{BlockQ8_0, BlockQ8_0x4};
use crate::cpu::KernelSet;
use crate::kernel_api::Kernels;
use crate::kernels::aarch64::asm::sdot_lane;
use crate::kernels::aarch64::rows4::{load16, scales_f32, splat_f16, Rows4};
use crate::kernels::aarch64::{target_entries, Dotprod};

/// The GEMV/GEMM pair of a 4-row layout interleaved in 4-byte chunks.
pub(crate) fn rows4x4_kernels<P: Rows4>(_: Dotprod) -> Kernels<P, BlockQ8_0, BlockQ8_0x4> {
    Kernels::pair(KernelSet::Dotprod, gemv::<P>, gemm::<P>)
}

target_entries! {
    "neon,dotprod";
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
                let lo = load16(&x.qs, 0);
                let hi = load16(&x.qs, 1);
                let mut s = vdupq_n_s32(0);
                s = sdot_lane::<0>(s, v[0], lo);
                s = sdot_lane::<1>(s, v[1], lo);
                s = sdot_lane::<2>(s, v[2], lo);
                s = sdot_lane::<3>(s, v[3], lo);
                s = sdot_lane::<0>(s, v[4], hi);
                s = sdot_lane::<1>(s, v[5], hi);
                s = sdot_lane::<2>(s, v[6], hi);
                s = sdot_lane::<3>(s, v[7], hi);
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
/// As [`gemv_body`].
#[inline(always)]
unsafe fn gemm_body<P: Rows4>(w: &[P], a: &[BlockQ8_0x4], out: &mut [f32]) {
    let out: &mut [f32; 16] = (&mut out[..16]).try_into().expect("16 outputs");
    // SAFETY: the features are the caller's contract; loads and stores stay inside the blocks
    // and `out`.
    unsafe {
        let mut acc = [vdupq_n_f32(0.0); 4];
        for (b, q) in w.iter().zip(a) {
            let v = b.decode();
            let mut s = [vdupq_n_s32(0); 4];
            for (j, vj) in v.iter().enumerate() {
                let x = load16(&q.qs, j);
                s[0] = sdot_lane::<0>(s[0], *vj, x);
                s[1] = sdot_lane::<1>(s[1], *vj, x);
                s[2] = sdot_lane::<2>(s[2], *vj, x);
                s[3] = sdot_lane::<3>(s[3], *vj, x);
            }
            let wd = b.row_scales();
            let ad = scales_f32(&q.d);
            acc[0] = vfmaq_f32(acc[0], vcvtq_f32_s32(s[0]), vmulq_laneq_f32::<0>(wd, ad));
            acc[1] = vfmaq_f32(acc[1], vcvtq_f32_s32(s[1]), vmulq_laneq_f32::<1>(wd, ad));
            acc[2] = vfmaq_f32(acc[2], vcvtq_f32_s32(s[2]), vmulq_laneq_f32::<2>(wd, ad));
            acc[3] = vfmaq_f32(acc[3], vcvtq_f32_s32(s[3]), vmulq_laneq_f32::<3>(wd, ad));
        }
        for (o, v) in out.chunks_exact_mut(4).zip(acc) {
            vst1q_f32(o.as_mut_ptr(), vmulq_n_f32(v, P::SCALE));
        }
    }
}
