//! The sve kernel set: ggml's SVE kernels' layouts, `q4_0_8x8` (GEMV and GEMM), `q8_0_4x8` and
//! `q4_K_8x8` (GEMM; their GEMVs are i8mm's, as in ggml), at a 256-bit vector length (the set exists only on
//! CPUs with SVE, i8mm and 32-byte vectors, `cpu.rs`).
//!
//! Stable Rust has no SVE types or intrinsics, so each kernel is one `asm!` block that runs a
//! whole block loop and stores its outputs: SVE registers cannot carry values from one `asm!`
//! block to the next. The blocks name the `z` registers by their NEON halves `v0`..`v31` and
//! the predicates `p0`.. as clobbers (the upper bits of the `z` registers are never live in
//! Rust code, and every `z`/`p` register is caller-saved).
//!
//! A `q4_0_8x8` block column is 16 bytes of f16 scales (rows 0..8) and 128 bytes of nibbles in
//! chunks of 8 bytes, chunk `j` from row `j % 8`: with 32-byte vectors, quant vector 0 holds the
//! first 8 bytes of rows 0..4, vector 1 those of rows 4..8, vectors 2 and 3 the next 8 bytes.
//! Byte `i` of a row holds weight `i` in its low nibble and weight `i + 16` in its high one,
//! each stored xor 8, so `lsl #4` and `and #0xf0` give 16 times the signed weights; the kernels
//! take the 16 back off once, on the f32 results (exact: a power of two).

pub(crate) mod q4_0;
pub(crate) mod q4_k;
pub(crate) mod q8_0;

use crate::blocks::{BlockQ4Kx8, BlockQ4_0x8, BlockQ8K, BlockQ8Kx4, BlockQ8_0, BlockQ8_0x4};
use crate::cpu::KernelSet;
use crate::kernel_api::Kernels;
use crate::kernels::aarch64::{i8mm, Sve};

/// The `q4_0_8x8` kernels: GEMV with `sdot`, GEMM with the SVE `smmla`.
pub(crate) fn q4_0_kernels(_: Sve) -> Kernels<BlockQ4_0x8, BlockQ8_0, BlockQ8_0x4> {
    Kernels::pair(KernelSet::Sve, q4_0::gemv, q4_0::gemm)
}

/// The `q8_0_4x8` kernels: i8mm's GEMV, the GEMM with the SVE `smmla`.
pub(crate) fn q8_0_kernels(token: Sve) -> Kernels<BlockQ8_0x4, BlockQ8_0, BlockQ8_0x4> {
    let neon = i8mm::rows4x8_kernels::<BlockQ8_0x4>(token.i8mm());
    Kernels::pair(KernelSet::Sve, neon.gemv, q8_0::gemm)
}

/// The `q4_K_8x8` kernels: i8mm's GEMV, the GEMM with the SVE `smmla`.
pub(crate) fn q4_k_kernels(token: Sve) -> Kernels<BlockQ4Kx8, BlockQ8K, BlockQ8Kx4> {
    let neon = i8mm::k_quants::kernels::<BlockQ4Kx8>(token.i8mm());
    Kernels::pair(KernelSet::Sve, neon.gemv, q4_k::gemm)
}
