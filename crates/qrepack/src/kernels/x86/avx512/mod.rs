//! The AVX-512 kernel set (F, BW, VL and VNNI): the nibble layouts with EVEX `vpdpbusd`, and
//! the other layouts' AVX2 GEMM bodies compiled with AVX-512 VL, which gives the compiler 32
//! vector registers (no accumulator spills). GEMVs stream the weights and gain nothing from the
//! extra registers, so they stay the AVX2 ones.

mod q4_0;

use std::arch::x86_64::*;

use crate::blocks::{
    BlockQ4_0x8, BlockQ4_1x8, BlockQ5_0x8, BlockQ6Kx8, BlockQ8K, BlockQ8Kx4, BlockQ8_0, BlockQ8_0x4Sums,
    BlockQ8_1x4,
};
use crate::cpu::KernelSet;
use crate::kernel_api::Kernels;
use crate::kernels::x86::avx2::k_quants::{self, K8x8};
use crate::kernels::x86::avx2::nibble::imp::{
    abs4, act_broadcasts, broadcast8, f16_splat, f16x8, gemm_quad, gemv_groups, row_order,
};
use crate::kernels::x86::avx2::nibble::{Nibble8x8, Q8Quad};
use crate::kernels::x86::avx2::{q4_1, q5_0, q6_k};
use crate::kernels::x86::avxvnni::row_sums_vnni_with;
use crate::kernels::x86::{target_entries, Avx512};

/// The GEMV/GEMM of an 8x8 nibble (or byte) layout with EVEX `vpdpbusd`.
pub(crate) fn nibble_kernels<P: Nibble8x8, Q: Q8Quad>(_: Avx512) -> Kernels<P, BlockQ8_0, Q> {
    Kernels::pair(KernelSet::Avx512, nibble_gemv::<P>, nibble_gemm::<P, Q>)
}

/// `q4_0_8x8` with 512-bit `vpdpbusd` (all 8 rows of a group by 8 activations at once).
pub(crate) fn q4_0_kernels(_: Avx512) -> Kernels<BlockQ4_0x8, BlockQ8_0, BlockQ8_0x4Sums> {
    Kernels::pair(KernelSet::Avx512, q4_0_gemv, q4_0_gemm)
}

/// The K-quant 8x8 layouts: the AVX2 GEMV and tiles, the GEMMs with 32 registers.
pub(crate) fn k_quant_kernels<P: K8x8>(t: Avx512) -> Kernels<P, BlockQ8K, BlockQ8Kx4> {
    Kernels {
        set: KernelSet::Avx512,
        gemm: k_gemm::<P>,
        tiled: Some(k_quants::tiled(k_gemm_tiled::<P>)),
        ..k_quants::kernels(t.avx2())
    }
}

/// `q4_1_8x8`: the AVX2 GEMV, the GEMM with 32 registers.
pub(crate) fn q4_1_kernels(
    t: Avx512,
) -> Kernels<BlockQ4_1x8, crate::blocks::BlockQ8_1, BlockQ8_1x4> {
    Kernels {
        set: KernelSet::Avx512,
        gemm: q4_1_gemm,
        ..q4_1::kernels(t.avx2())
    }
}

/// `q5_0_8x8`: the AVX2 GEMV, the GEMM with 32 registers.
pub(crate) fn q5_0_kernels(t: Avx512) -> Kernels<BlockQ5_0x8, BlockQ8_0, BlockQ8_0x4Sums> {
    Kernels {
        set: KernelSet::Avx512,
        gemm: q5_0_gemm,
        ..q5_0::kernels(t.avx2())
    }
}

/// `q6_K_8x8`: the AVX2 GEMV, the GEMM with 32 registers.
pub(crate) fn q6_k_kernels(t: Avx512) -> Kernels<BlockQ6Kx8, BlockQ8K, BlockQ8Kx4> {
    Kernels {
        set: KernelSet::Avx512,
        gemm: q6_k_gemm,
        ..q6_k::kernels(t.avx2())
    }
}

#[inline(always)]
unsafe fn row_sums(w: &[[__m256i; 2]; 4], a: [__m256i; 4], _abs: [__m256i; 4]) -> __m256i {
    unsafe { row_sums_vnni_with::<true>(w, a) }
}

#[inline(always)]
unsafe fn nibble_gemv_body<P: Nibble8x8>(w: &[P], a: &[BlockQ8_0], out: &mut [f32]) {
    unsafe { gemv_groups!(w, a, out, decode_biased, row_sums) }
}

#[inline(always)]
unsafe fn nibble_gemm_body<P: Nibble8x8, Q: Q8Quad>(w: &[P], a: &[Q], out: &mut [f32]) {
    unsafe { gemm_quad!(w, a, out, decode_biased, row_sums) }
}

target_entries! { "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni";
    fn q4_0_gemv(w: &[BlockQ4_0x8], a: &[BlockQ8_0], out: &mut [f32]) => q4_0::gemv_body;
    fn q4_0_gemm(w: &[BlockQ4_0x8], a: &[BlockQ8_0x4Sums], out: &mut [f32]) => q4_0::gemm_body;
    fn nibble_gemv<P: Nibble8x8>(w: &[P], a: &[BlockQ8_0], out: &mut [f32]) => nibble_gemv_body;
    fn nibble_gemm<P: Nibble8x8, Q: Q8Quad>(w: &[P], a: &[Q], out: &mut [f32]) => nibble_gemm_body;
}

target_entries! { "avx2,fma,f16c,avx512f,avx512bw,avx512vl";
    fn k_gemm<P: K8x8>(w: &[P], a: &[BlockQ8Kx4], out: &mut [f32]) => k_quants::imp::gemm_body;
    fn k_gemm_tiled<P: K8x8>(w: &[P], tile: &[u64], a: &[BlockQ8Kx4], out: &mut [f32]) => k_quants::imp::gemm_tiled_body;
    fn q4_1_gemm(w: &[BlockQ4_1x8], a: &[BlockQ8_1x4], out: &mut [f32]) => q4_1::imp::gemm_body;
    fn q5_0_gemm(w: &[BlockQ5_0x8], a: &[BlockQ8_0x4Sums], out: &mut [f32]) => q5_0::imp::gemm_body;
    fn q6_k_gemm(w: &[BlockQ6Kx8], a: &[BlockQ8Kx4], out: &mut [f32]) => q6_k::imp::gemm_body;
}
