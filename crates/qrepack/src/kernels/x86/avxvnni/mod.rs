//! The AVX-VNNI kernel set: the 8x8 nibble layouts' AVX2 loop nest with the four-byte products
//! summed by one VEX-encoded `vpdpbusd` instead of `maddubs` + `madd`. Every layout without a
//! VNNI kernel runs its AVX2 kernels on these CPUs.

use std::arch::x86_64::*;

use crate::blocks::BlockQ8_0;
use crate::cpu::KernelSet;
use crate::kernel_api::Kernels;
use crate::kernels::x86::avx2::nibble::imp::{
    abs4, act_broadcasts, broadcast8, f16_splat, gemm_quad, gemv_groups, row_order,
};
use crate::kernels::x86::avx2::nibble::{Nibble8x8, Q8Quad};
use crate::kernels::x86::AvxVnni;

/// The GEMV/GEMM of an 8x8 nibble (or byte) layout with VEX `vpdpbusd`.
pub(crate) fn nibble_kernels<P: Nibble8x8, Q: Q8Quad>(_: AvxVnni) -> Kernels<P, BlockQ8_0, Q> {
    Kernels::pair(KernelSet::AvxVnni, gemv::<P>, gemm::<P, Q>)
}

/// `vpdpbusd` in its VEX (AVX-VNNI) encoding.
#[inline(always)]
unsafe fn dp(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
    // SAFETY: register-only AVX-VNNI, which the caller's token proves.
    unsafe { _mm256_dpbusd_avx_epi32(acc, u, s) }
}

/// Row sums with `vpdpbusd`: biased weights (w + 128) times activations, minus 128 x the
/// activation sum, which each row pair of lanes receives once. Lanes in `row_order`.
#[inline(always)]
unsafe fn row_sums_vnni(w: &[[__m256i; 2]; 4], a: [__m256i; 4]) -> __m256i {
    // SAFETY: callers meet this function's contract: the CPU has the features of the
    // kernel set that calls it, and the slices are as long as the body reads.
    unsafe {
        let z = _mm256_setzero_si256();
        let s03 = dp(
            dp(dp(dp(z, w[0][0], a[0]), w[0][1], a[2]), w[2][0], a[1]),
            w[2][1],
            a[3],
        );
        let s47 = dp(
            dp(dp(dp(z, w[1][0], a[0]), w[1][1], a[2]), w[3][0], a[1]),
            w[3][1],
            a[3],
        );
        let ones = _mm256_set1_epi8(1);
        let sum_a = dp(
            dp(dp(dp(z, ones, a[0]), ones, a[1]), ones, a[2]),
            ones,
            a[3],
        );
        let bias = _mm256_slli_epi32(sum_a, 7);
        _mm256_hadd_epi32(_mm256_sub_epi32(s03, bias), _mm256_sub_epi32(s47, bias))
    }
}

#[inline(always)]
unsafe fn row_sums(w: &[[__m256i; 2]; 4], a: [__m256i; 4], _abs: [__m256i; 4]) -> __m256i {
    // SAFETY: the enclosing unsafe fn's contract (the kernel set's CPU features, in-bounds
    // slices) is the callee's; register-only intrinsics need nothing more.
    unsafe { row_sums_vnni(w, a) }
}

#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn gemv_avxvnni<P: Nibble8x8>(w: &[P], a: &[BlockQ8_0], out: &mut [f32]) {
    // SAFETY: the enclosing unsafe fn's contract (the kernel set's CPU features, in-bounds
    // slices) is the callee's; register-only intrinsics need nothing more.
    unsafe { gemv_groups!(w, a, out, decode_biased, row_sums) }
}

#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn gemm_avxvnni<P: Nibble8x8, Q: Q8Quad>(w: &[P], a: &[Q], out: &mut [f32]) {
    // SAFETY: the enclosing unsafe fn's contract (the kernel set's CPU features, in-bounds
    // slices) is the callee's; register-only intrinsics need nothing more.
    unsafe { gemm_quad!(w, a, out, decode_biased, row_sums) }
}

fn gemv<P: Nibble8x8>(w: &[P], a: &[BlockQ8_0], out: &mut [f32]) {
    // SAFETY: only handed out by `nibble_kernels`, in exchange for an `AvxVnni` token.
    unsafe { gemv_avxvnni(w, a, out) }
}

fn gemm<P: Nibble8x8, Q: Q8Quad>(w: &[P], a: &[Q], out: &mut [f32]) {
    // SAFETY: only handed out by `nibble_kernels`, in exchange for an `AvxVnni` token.
    unsafe { gemm_avxvnni(w, a, out) }
}
