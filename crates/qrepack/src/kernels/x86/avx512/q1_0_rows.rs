//! Plain Q1_0 rows against Q8_0 with AVX-512 masks and `vpdpbusd`: the GEMV of this set (the
//! GEMM stays the AVX2 set's).
//!
//! A Q1_0 weight is `+d` where its bit is set and `-d` where it is not, so a block's sum against
//! 64 activations is `2 Σ_set a - Σ a`: the bits load straight into a mask register, the masked
//! activations are summed by one `vpdpbusd` with 2 (unsigned), and `-Σ a` of each 4-byte lane is
//! its starting value, worked out once per call with the activations' scales per lane. Each
//! 128-weight block takes two such steps, a multiply by the activation scales and an FMA by the
//! block's own scale.
//!
//! # Exactness
//!
//! A lane sums 4 products of 0 or 2 with an activation (at most 128 in magnitude) from `-Σ a` of
//! its 4 activations: exact integers equal to that lane's share of `Σ (±1)·a`. Only the order of
//! the `f32` products and sums differs from the portable kernel.

use crate::blocks::{BlockQ1_0, BlockQ8_0};
use crate::cpu::KernelSet;
use crate::kernel_api::Kernels;
use crate::kernels::x86::avx2::lowbit;
use crate::kernels::x86::{target_entries, Avx512};

use crate::kernels::x86::prepared_gemv;

mod imp {
    use std::arch::x86_64::*;

    use crate::blocks::{BlockQ1_0, BlockQ8_0};
    use crate::kernels::x86::prepared_gemv::{nothing_ahead, PreparedGemv};

    /// Activation blocks (128 columns each) prepared at a time (8192 columns; 24 KiB of stack).
    pub(super) const PREP_BLOCKS: usize = 64;

    /// Two Q8_0 blocks (64 activations) as one register, `-Σ a` of each 4-byte lane and each
    /// lane's activation scale.
    #[derive(Clone, Copy)]
    pub(super) struct Half {
        act: __m512i,
        neg_sum: __m512i,
        scale: __m512,
    }

    /// The Q1_0 GEMV's blocks.
    pub(super) struct Q1_0;

    impl PreparedGemv for Q1_0 {
        type Weight = BlockQ1_0;
        type Acc = __m512;
        type Act = [BlockQ8_0; 4];
        type Prep = [Half; 2];
        type Consts = ();
        nothing_ahead!();

        #[inline(always)]
        unsafe fn empty() -> [Half; 2] {
            // SAFETY: register-only intrinsics of the caller's features.
            let zero = unsafe {
                Half {
                    act: _mm512_setzero_si512(),
                    neg_sum: _mm512_setzero_si512(),
                    scale: _mm512_setzero_ps(),
                }
            };
            [zero; 2]
        }

        #[inline(always)]
        unsafe fn consts() {}

        #[inline(always)]
        unsafe fn prepare(a: &[BlockQ8_0; 4]) -> [Half; 2] {
            // SAFETY: the caller's features; the loads read 32 bytes of each block's quants.
            unsafe {
                let half = |b: &[BlockQ8_0]| {
                    let lo = _mm256_loadu_si256(b[0].qs.as_ptr().cast());
                    let hi = _mm256_loadu_si256(b[1].qs.as_ptr().cast());
                    let act = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi);
                    let ones = _mm512_set1_epi8(1);
                    let sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, act);
                    let d0 = _mm256_set1_ps(b[0].d.to_f32());
                    let d1 = _mm256_set1_ps(b[1].d.to_f32());
                    Half {
                        act,
                        neg_sum: _mm512_sub_epi32(_mm512_setzero_si512(), sum),
                        scale: _mm512_insertf32x8::<1>(_mm512_castps256_ps512(d0), d1),
                    }
                };
                [half(&a[..2]), half(&a[2..])]
            }
        }

        #[inline(always)]
        unsafe fn block(w: &BlockQ1_0, _: &(), halves: &[Half; 2], _: (), acc: __m512) -> __m512 {
            // SAFETY: register-only intrinsics of the caller's features.
            unsafe {
                let two = _mm512_set1_epi8(2);
                let mut sum = _mm512_setzero_ps();
                for (h, p) in halves.iter().enumerate() {
                    let mut bits = [0u8; 8];
                    bits.copy_from_slice(&w.qs[8 * h..8 * h + 8]);
                    let set = _mm512_maskz_mov_epi8(u64::from_le_bytes(bits), p.act);
                    let dots = _mm512_dpbusd_epi32(p.neg_sum, two, set);
                    sum = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dots), p.scale, sum);
                }
                let d = _mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(u16::from_le_bytes(w.d.0))));
                _mm512_fmadd_ps(sum, _mm512_broadcastss_ps(d), acc)
            }
        }
    }
}

target_entries! { "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni";
    fn q1_0_gemv(w: &[BlockQ1_0], a: &[[BlockQ8_0; 4]], out: &mut [f32]) => prepared_gemv::gemv_body::<imp::Q1_0, { imp::PREP_BLOCKS }>;
}

/// Plain Q1_0 rows: the 512-bit GEMV, the AVX2 GEMM.
pub(crate) fn q1_0_rows(token: Avx512) -> Kernels<BlockQ1_0, [BlockQ8_0; 4], [BlockQ8_0; 4]> {
    Kernels {
        set: KernelSet::Avx512,
        gemv: q1_0_gemv,
        ..lowbit::q1_0_rows(token.avx2())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::CpuFeatures;
    use crate::kernel_api::SetToken;
    use crate::kernels::row_tests::{
        compare_long_gemv, compare_matmul_on, compare_rows, q8_0s_values, random_q1_0, random_q8_0s,
    };
    use crate::types::GgmlType;
    use crate::vecdot;

    #[test]
    fn equals_portable_and_exact() {
        let Some(cpu) = Avx512::new(CpuFeatures::get()) else {
            return;
        };
        compare_rows(
            GgmlType::Q1_0,
            4,
            q1_0_rows(cpu),
            vecdot::vec_dot_q1_0_q8_0,
            random_q1_0,
            random_q8_0s::<4>,
            q8_0s_values::<4>,
        );
        compare_matmul_on(KernelSet::Avx512, GgmlType::Q1_0, 4, random_q1_0);
    }

    /// Rows longer than one piece of prepared activations (70 blocks, 8960 columns) and 1 to 9
    /// rows (groups of four and the rows left over).
    #[test]
    fn long_rows_and_odd_row_counts() {
        let Some(cpu) = Avx512::new(CpuFeatures::get()) else {
            return;
        };
        compare_long_gemv(
            GgmlType::Q1_0,
            4,
            70,
            q1_0_rows(cpu).gemv,
            vecdot::vec_dot_q1_0_q8_0,
            random_q1_0,
            random_q8_0s::<4>,
            q8_0s_values::<4>,
        );
    }
}
