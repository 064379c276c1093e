//! AVX2 (+FMA+F16C) kernels of the plain layout for the FP4 types (MXFP4, NVFP4) and Q1_0 / Q2_0
//! against Q8_0, and the ternary types (TQ1_0, TQ2_0) against Q8_K.
//!
//! They are row blocks of `plain_rows` (`RowBlock`): the GEMV serves one activation row per
//! weight row, the GEMM decodes each weight block once for the four rows of a quad.
//!
//! # Exactness
//!
//! Every block's integer sums are exact and equal to those of the portable kernels
//! (`crate::vecdot::lowbit`); only the order of the `f32` scaling and accumulation differs. The
//! byte products stay clear of `maddubs` saturation:
//!
//! * FP4 values are signed (`|v| <= 12`): `maddubs(|a|, sign(v, a))`, in which `|a|` read as
//!   unsigned is exact for `a = -128` and a pair is at most `2 * 128 * 12`;
//! * the 2-bit and ternary quants are unsigned (`q <= 3`), multiplied as they are, and their
//!   offset of 1 comes off with the activations' sums (`maddubs(1, a)` for Q8_0, the `bsums`
//!   for Q8_K); Q1_0's signs `2 b - 1` likewise as `2 Σ b·a - Σ a`.

use crate::blocks::{BlockMxfp4, BlockQ8_0};

use super::plain_rows::block_rows;

pub(super) use imp::{half, mul_signed_pairs};

mod imp {
    use std::arch::x86_64::*;

    use super::super::plain_rows::{load16, load32, nibbles32, RowBlock};
    use crate::blocks::{e8m0_half_to_f32, BlockMxfp4, BlockQ8_0, F16Bits};
    use crate::quant::grids::KVALUES_FP4;

    /// Products of signed bytes `w` (`|w| <= 127`) and `a` (any `i8`), summed over adjacent pairs
    /// into `i16` without saturation.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline(always)]
    pub(in crate::kernels::x86::avx2) unsafe fn mul_signed_pairs(
        w: __m256i,
        a: __m256i,
    ) -> __m256i {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe { _mm256_maddubs_epi16(_mm256_abs_epi8(a), _mm256_sign_epi8(w, a)) }
    }

    /// An f16 value as `f32`, in a vector register.
    ///
    /// # Safety
    /// The CPU must support F16C.
    #[inline(always)]
    pub(in crate::kernels::x86::avx2) unsafe fn half(x: F16Bits) -> __m128 {
        let bits = u16::from_le_bytes(x.0);
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe { _mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))) }
    }

    impl RowBlock for BlockMxfp4 {
        type Act = BlockQ8_0;
        #[inline(always)]
        unsafe fn accumulate<const N: usize>(
            &self,
            a: [&BlockQ8_0; N],
            acc: &mut [__m256; N],
            _: &mut [f32; N],
        ) {
            // SAFETY: register-only intrinsics of the caller's features; loads go through
            // fixed-size references.
            unsafe {
                let lut = _mm256_broadcastsi128_si256(load16(&KVALUES_FP4));
                let w = _mm256_shuffle_epi8(lut, nibbles32(&self.qs));
                let e = _mm_set_ss(e8m0_half_to_f32(self.e));
                let ones = _mm256_set1_epi16(1);
                for r in 0..N {
                    let ab = a[r];
                    let isum = _mm256_madd_epi16(mul_signed_pairs(w, load32(&ab.qs)), ones);
                    // `d_a·2^(e-128)`, as the portable kernel's factor (a power of two times
                    // an f16: exact unless it leaves the normal range).
                    let d = _mm256_broadcastss_ps(_mm_mul_ss(half(ab.d), e));
                    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), d, acc[r]);
                }
            }
        }
    }
}

block_rows! {
    BlockMxfp4, BlockQ8_0 => mxfp4_gemv, mxfp4_gemm, mxfp4_rows;
}

#[cfg(test)]
mod tests;
