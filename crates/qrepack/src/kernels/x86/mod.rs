//! The x86-64 kernel sets: `avx2` (the 256-bit kernels of every layout, activation format and
//! plain type), `avxvnni` and `avx512` (the kernels that gain from `vpdpbusd` or from AVX-512's
//! 32 vector registers; the AVX2 bodies compiled again where that is all they need), and
//! `avx512bf16` (BF16 rows with `vdpbf16ps`).

pub(crate) mod avx2;
pub(crate) mod avx512;
pub(crate) mod avx512bf16;
pub(crate) mod avxvnni;
mod prepared_gemv;
#[cfg(test)]
mod q8_0_tile_checks;

crate::kernel_api::set_tokens! {
    /// Proof that the CPU has AVX2, FMA and F16C.
    Avx2;
    /// Proof that the CPU has AVX2, FMA, F16C and AVX-VNNI.
    AvxVnni;
    /// Proof that the CPU has AVX2, FMA, F16C and AVX-512 F, BW, VL and VNNI.
    Avx512;
    /// Proof that the CPU has the AVX-512 set and AVX-512 BF16.
    Avx512Bf16;
}

pub(crate) use crate::kernel_api::target_entries;

impl Avx512 {
    /// The AVX2 token of the same CPU: the AVX-512 set is only detected together with AVX2,
    /// FMA and F16C.
    pub(crate) fn avx2(self) -> Avx2 {
        Avx2(())
    }
}
