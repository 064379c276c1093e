//! The AArch64 kernel sets: `neon` (Advanced SIMD, every AArch64 CPU: the plain path's
//! `vec_dot`s and the activation quantizers), `dotprod` (the 4-row layouts interleaved in 4-byte
//! chunks, with `sdot`) and `i8mm` (the 4-row layouts interleaved in 8-byte chunks, with `smmla`
//! for four activation rows and `sdot` for one).
//!
//! Stable Rust has no `vdotq_s32`/`vmmlaq_s32` yet, so `asm` wraps the two instructions (and the
//! f16 widening `fcvtl`); everything else is `core::arch::aarch64`. `sve` (SVE with i8mm at a
//! 256-bit vector length: `q4_0_8x8`) is written in `asm!` blocks of whole loops, as Rust has no
//! SVE types.

pub(crate) mod asm;
pub(crate) mod dotprod;
pub(crate) mod i8mm;
pub(crate) mod kx8;
pub(crate) mod neon;
pub(crate) mod rows4;
pub(crate) mod sve;

crate::kernel_api::set_tokens! {
    /// Proof that the CPU has NEON (Advanced SIMD).
    Neon;
    /// Proof that the CPU has NEON and the dot-product instructions (`sdot`).
    Dotprod;
    /// Proof that the CPU has NEON, `sdot` and the int8 matrix multiply (`smmla`).
    I8mm;
    /// Proof that the CPU has SVE with a 256-bit vector length, i8mm and dotprod.
    Sve;
}

impl Sve {
    /// The i8mm token the sve set implies (its CPUs have NEON, dotprod and i8mm), for the
    /// kernels it shares with that set.
    pub(crate) fn i8mm(self) -> I8mm {
        I8mm(())
    }
}

pub(crate) use crate::kernel_api::target_entries;
