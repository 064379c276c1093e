//! Plain NVFP4 rows against Q8_0 with 512-bit `vpdpbusd`: the GEMV of this set (the GEMM and
//! its tiles stay the AVX2 set's).
//!
//! An NVFP4 block (64 weights, 4 groups of 16 with a UE4M3 scale each) fills one register as it
//! is stored: its 32 code bytes in the low half and the same bytes shifted right by 4 in the high
//! half, masked to the codes. Byte `8s + j` of the low half is weight `16s + j` and of the high
//! half weight `16s + 8 + j`, so every 4-byte lane holds weights of one group. The activations
//! are put in that order once per call, with each lane's bias term and its activation scale, and
//! the loop over the weights is left with a table lookup (the E2M1 values + 12, unsigned), one
//! `vpdpbusd`, the scales of the four groups spread to their lanes, and one multiply and one FMA
//! per block and row.
//!
//! # Exactness
//!
//! A lane sums 4 products of a value + 12 (at most 24) and an activation (at most 128 in
//! magnitude) and starts from `-12 Σa` of its 4 activations, so every lane's integer is exact and
//! equal to the group's share of `Σ v·a`; the scales are the portable kernel's UE4M3 halves
//! (`blocks::ue4m3_half_to_f32`), computed as the AVX2 kernel does. Only the order of the `f32`
//! products and sums differs from the portable kernel.

use crate::blocks::{BlockNvfp4, BlockQ8_0};
use crate::cpu::KernelSet;
use crate::kernel_api::Kernels;
use crate::kernels::x86::avx2::lowbit;
use crate::kernels::x86::{target_entries, Avx512};

use crate::kernels::x86::prepared_gemv;

mod imp {
    use std::arch::x86_64::*;

    use crate::blocks::{BlockNvfp4, BlockQ8_0};
    use crate::kernels::x86::prepared_gemv::{nothing_ahead, PreparedGemv};
    use crate::quant::grids::KVALUES_FP4;

    /// Activation block pairs prepared at a time (8192 columns; 24 KiB of stack).
    pub(super) const PREP_PAIRS: usize = 128;

    /// One pair of Q8_0 blocks (64 activations) in the weights' byte order, with `-12 Σa` of
    /// each 4-byte lane and each lane's activation scale.
    #[derive(Clone, Copy)]
    pub(super) struct Prepared {
        act: __m512i,
        neg_bias: __m512i,
        scale: __m512,
    }

    /// The column within the pair that weight byte `p` of a block (in register order) meets.
    const fn column(p: usize) -> usize {
        let (half, q) = (p / 32, p % 32);
        16 * (q / 8) + 8 * half + q % 8
    }

    /// The value table (E2M1 values + 12) and the byte of each lane's scale.
    #[derive(Clone, Copy)]
    pub(super) struct Consts {
        table: __m512i,
        spread: __m512i,
    }

    /// The NVFP4 GEMV's blocks.
    pub(super) struct Nvfp4;

    impl PreparedGemv for Nvfp4 {
        type Weight = BlockNvfp4;
        type Acc = __m512;
        type Act = [BlockQ8_0; 2];
        type Prep = Prepared;
        type Consts = Consts;
        nothing_ahead!();

        #[inline(always)]
        unsafe fn empty() -> Prepared {
            // SAFETY: register-only intrinsics of the caller's features.
            unsafe {
                Prepared {
                    act: _mm512_setzero_si512(),
                    neg_bias: _mm512_setzero_si512(),
                    scale: _mm512_setzero_ps(),
                }
            }
        }

        #[inline(always)]
        unsafe fn consts() -> Consts {
            let mut lut = [0i8; 16];
            for (l, v) in lut.iter_mut().zip(KVALUES_FP4) {
                *l = v + 12;
            }
            // the byte of a lane's group, then three zeroing indices
            let lane = |g: u32| (g | 0x8080_8000) as i32;
            // SAFETY: the caller's features; the load reads the 16-byte local table.
            unsafe {
                let g01 = _mm_set_epi32(lane(1), lane(1), lane(0), lane(0));
                let g23 = _mm_set_epi32(lane(3), lane(3), lane(2), lane(2));
                let half = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(g01), g23);
                Consts {
                    table: _mm512_broadcast_i32x4(_mm_loadu_si128(lut.as_ptr().cast())),
                    spread: _mm512_inserti64x4::<1>(_mm512_castsi256_si512(half), half),
                }
            }
        }

        #[inline(always)]
        unsafe fn prepare(a: &[BlockQ8_0; 2]) -> Prepared {
            let mut bytes = [0i8; 64];
            for (p, b) in bytes.iter_mut().enumerate() {
                let c = column(p);
                *b = a[c / 32].qs[c % 32];
            }
            // lanes 0-3 and 8-11 hold groups 0 and 1 (the first Q8_0 block), the others 2, 3
            let (d0, d1) = (a[0].d.to_f32(), a[1].d.to_f32());
            let mut scales = [0.0f32; 16];
            for (lane, s) in scales.iter_mut().enumerate() {
                *s = if lane % 8 < 4 { d0 } else { d1 };
            }
            // SAFETY: the caller's features; both loads read whole 64-byte local arrays.
            unsafe {
                let act = _mm512_loadu_si512(bytes.as_ptr().cast());
                let bias = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(12), act);
                Prepared {
                    act,
                    neg_bias: _mm512_sub_epi32(_mm512_setzero_si512(), bias),
                    scale: _mm512_loadu_ps(scales.as_ptr()),
                }
            }
        }

        #[inline(always)]
        unsafe fn block(w: &BlockNvfp4, _: &(), p: &Prepared, c: Consts, acc: __m512) -> __m512 {
            // SAFETY: the caller's features; the load reads the block's 32 code bytes.
            unsafe {
                // the 64 values + 12 in register order (see the module)
                let x = _mm256_loadu_si256(w.qs.as_ptr().cast());
                let high = _mm256_srli_epi16::<4>(x);
                let both = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(x), high);
                let codes = _mm512_and_si512(both, _mm512_set1_epi8(0x0f));
                let values = _mm512_shuffle_epi8(c.table, codes);
                let dots = _mm512_dpbusd_epi32(p.neg_bias, values, p.act);
                let scaled = _mm512_mul_ps(_mm512_cvtepi32_ps(dots), p.scale);
                _mm512_fmadd_ps(scaled, scales(w, c.spread), acc)
            }
        }
    }

    /// The block's four UE4M3 scales (halved, as `ue4m3_half_to_f32`), each in its group's
    /// lanes; `spread` picks each lane's scale byte.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F and BW.
    #[inline(always)]
    unsafe fn scales(w: &BlockNvfp4, spread: __m512i) -> __m512 {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe {
            let all = _mm512_set1_epi32(i32::from_le_bytes(w.d));
            // lane i gets its group's scale byte in its low byte, zeros above
            let x = _mm512_shuffle_epi8(all, spread);
            let bits = _mm512_slli_epi32::<20>(_mm512_and_si512(x, _mm512_set1_epi32(0x7f)));
            let v = _mm512_mul_ps(
                _mm512_castsi512_ps(bits),
                _mm512_set1_ps(f32::from_bits(246 << 23)),
            );
            let not_a_number = _mm512_cmpeq_epi32_mask(x, _mm512_set1_epi32(0x7f));
            _mm512_maskz_mov_ps(!not_a_number, v)
        }
    }
}

target_entries! { "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni";
    fn nvfp4_gemv(w: &[BlockNvfp4], a: &[[BlockQ8_0; 2]], out: &mut [f32]) => prepared_gemv::gemv_body::<imp::Nvfp4, { imp::PREP_PAIRS }>;
}

/// Plain NVFP4 rows: the 512-bit GEMV, the AVX2 GEMM.
pub(crate) fn nvfp4_rows(token: Avx512) -> Kernels<BlockNvfp4, [BlockQ8_0; 2], [BlockQ8_0; 2]> {
    Kernels {
        set: KernelSet::Avx512,
        gemv: nvfp4_gemv,
        ..lowbit::nvfp4_rows(token.avx2())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::CpuFeatures;
    use crate::kernel_api::SetToken;
    use crate::kernels::row_tests::{
        compare_long_gemv, compare_matmul_on, compare_rows, q8_0s_values, random, random_q8_0s,
    };
    use crate::types::GgmlType;
    use crate::vecdot;

    #[test]
    fn equals_portable_and_exact() {
        let Some(cpu) = Avx512::new(CpuFeatures::get()) else {
            return;
        };
        compare_rows(
            GgmlType::NVFP4,
            4,
            nvfp4_rows(cpu),
            vecdot::vec_dot_nvfp4_q8_0,
            random::<BlockNvfp4>,
            random_q8_0s::<2>,
            q8_0s_values::<2>,
        );
        compare_matmul_on(KernelSet::Avx512, GgmlType::NVFP4, 4, random::<BlockNvfp4>);
    }

    /// Rows longer than one piece of prepared activations (130 blocks, 8320 columns) and 1 to
    /// 9 rows (groups of four and the rows left over).
    #[test]
    fn long_rows_and_odd_row_counts() {
        let Some(cpu) = Avx512::new(CpuFeatures::get()) else {
            return;
        };
        compare_long_gemv(
            GgmlType::NVFP4,
            4,
            130,
            nvfp4_rows(cpu).gemv,
            vecdot::vec_dot_nvfp4_q8_0,
            random::<BlockNvfp4>,
            random_q8_0s::<2>,
            q8_0s_values::<2>,
        );
    }
}
