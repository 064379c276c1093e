//! Plain TQ1_0 rows against Q8_K with AVX-512 byte arithmetic and `vpdpbusd`: the GEMV of this
//! set (the one-quad GEMM stays the AVX2 set's, larger batches take the `grid_tiles`).
//!
//! A TQ1_0 byte holds base-3 digits as a fixed-point fraction: digit `n` is the top digit of the
//! byte times `3^n` (wrapping), `(b · 3) >> 8`, which is `(b >= 86) + (b >= 171)`: two unsigned
//! compares into mask registers. The block's 256 digits fill four registers of 64 bytes, the
//! powers of 3 made by byte adds (tripling) under lane masks, in an order of our choosing:
//! `[X, 3X]`, `[9X, 27X]`, `[81X, 81Y, Q]`, `[Y, 3Y, 9Y, 27Y]` for `X = qs[..32]`,
//! `Y = qs[32..]` and `Q` the four dwords `qh`, `3 qh`, `9 qh`, `27 qh`. The activations are put
//! in that order once per call (`prepared_gemv`), with `-Σ a` of each 4-byte lane over the four
//! registers, so that four `vpdpbusd` of the digits (the weight plus 1) give the block's sum.
//!
//! # Exactness
//!
//! A lane adds 16 products of a digit (at most 2) and an activation (at most 128 in magnitude)
//! to `-Σ a` of its 16 activations: an exact integer, its share of `Σ (t - 1)·a`, far below
//! `2^24`. Only the order of the `f32` products and sums differs from the portable kernel.

use crate::blocks::{BlockQ8K, BlockTq1_0};
use crate::kernel_api::Kernels;
use crate::kernels::x86::{target_entries, Avx512};

use super::grid_tiles;
use crate::kernels::x86::prepared_gemv;

mod imp {
    use std::arch::x86_64::*;

    use crate::blocks::{BlockQ8K, BlockTq1_0};
    use crate::kernels::x86::prepared_gemv::{nothing_ahead, PreparedGemv};

    /// Activation blocks (256 columns each) prepared at a time (8192 columns; 10 KiB of
    /// stack).
    pub(super) const PREP_BLOCKS: usize = 32;

    /// A Q8_K block in the digits' order, `-Σ a` of each 4-byte lane over the four registers
    /// and the block's scale.
    #[derive(Clone, Copy)]
    pub(super) struct Prepared {
        act: [__m512i; 4],
        neg_sum: __m512i,
        d: __m512,
    }

    /// Each 128-bit lane's 16 bytes tripled (wrapping) where `lanes` has its bit.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F and BW.
    #[inline(always)]
    unsafe fn triple(v: __m512i, lanes: u8) -> __m512i {
        let mut mask = 0u64;
        for l in 0..4 {
            if lanes & (1 << l) != 0 {
                mask |= 0xffff << (16 * l);
            }
        }
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe { _mm512_mask_add_epi8(v, mask, v, _mm512_add_epi8(v, v)) }
    }

    /// The top base-3 digit of each byte, `(b · 3) >> 8`.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F and BW.
    #[inline(always)]
    unsafe fn digits(b: __m512i) -> __m512i {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe {
            let one = _mm512_cmpge_epu8_mask(b, _mm512_set1_epi8(86));
            let two = _mm512_cmpge_epu8_mask(b, _mm512_set1_epi8(171u8 as i8));
            let t = _mm512_maskz_mov_epi8(one, _mm512_set1_epi8(1));
            _mm512_mask_mov_epi8(t, two, _mm512_set1_epi8(2))
        }
    }

    /// The TQ1_0 GEMV's blocks.
    pub(super) struct Tq1_0;

    impl PreparedGemv for Tq1_0 {
        type Weight = BlockTq1_0;
        type Acc = __m512;
        type Act = BlockQ8K;
        type Prep = Prepared;
        type Consts = ();
        nothing_ahead!();

        #[inline(always)]
        unsafe fn empty() -> Prepared {
            // SAFETY: register-only intrinsics of the caller's features.
            unsafe {
                Prepared {
                    act: [_mm512_setzero_si512(); 4],
                    neg_sum: _mm512_setzero_si512(),
                    d: _mm512_setzero_ps(),
                }
            }
        }

        #[inline(always)]
        unsafe fn consts() {}

        #[inline(always)]
        unsafe fn prepare(a: &BlockQ8K) -> Prepared {
            // Weights 0..64, 64..128, 128..160 with 224..256, 160..224 (see the module).
            let mut r2 = [0i8; 64];
            r2[..32].copy_from_slice(&a.qs[128..160]);
            r2[32..].copy_from_slice(&a.qs[224..]);
            // SAFETY: the caller's features; each load reads 64 bytes of the block or of `r2`.
            unsafe {
                let act = [
                    _mm512_loadu_si512(a.qs[..64].as_ptr().cast()),
                    _mm512_loadu_si512(a.qs[64..128].as_ptr().cast()),
                    _mm512_loadu_si512(r2.as_ptr().cast()),
                    _mm512_loadu_si512(a.qs[160..224].as_ptr().cast()),
                ];
                let ones = _mm512_set1_epi8(1);
                let sum = act.iter().fold(_mm512_setzero_si512(), |s, &x| {
                    _mm512_dpbusd_epi32(s, ones, x)
                });
                Prepared {
                    act,
                    neg_sum: _mm512_sub_epi32(_mm512_setzero_si512(), sum),
                    d: _mm512_set1_ps(a.d),
                }
            }
        }

        #[inline(always)]
        unsafe fn block(w: &BlockTq1_0, _: &(), p: &Prepared, _: (), acc: __m512) -> __m512 {
            // SAFETY: the caller's features; the loads read `qs[..32]` and `qs[32..]`.
            unsafe {
                let x = _mm256_loadu_si256(w.qs[..32].as_ptr().cast());
                let x = _mm512_broadcast_i64x4(x);
                let r0 = triple(x, 0b1100);
                let r1 = triple(triple(r0, 0b1111), 0b1111);
                let y = _mm512_broadcast_i32x4(_mm_loadu_si128(w.qs[32..].as_ptr().cast()));
                let r3 = triple(triple(triple(y, 0b1110), 0b1100), 0b1000);
                // [9X, 27Y] tripled, then the X half again: [81X, 81Y].
                let v = _mm512_inserti32x4::<2>(r1, _mm512_extracti32x4_epi32::<3>(r3));
                let v = triple(triple(v, 0b0111), 0b0011);
                // `qh` in every dword, dword 12 + k of the last lane tripled k times.
                let mut q = _mm512_set1_epi32(i32::from_le_bytes(w.qh));
                for dwords in [0b1110u16 << 12, 0b1100 << 12, 0b1000 << 12] {
                    q = _mm512_mask_add_epi8(q, spread_dwords(dwords), q, _mm512_add_epi8(q, q));
                }
                let r2 = _mm512_mask_blend_epi32(0xf000, v, q);
                let mut isum = p.neg_sum;
                for (j, r) in [r0, r1, r2, r3].into_iter().enumerate() {
                    isum = _mm512_dpbusd_epi32(isum, digits(r), p.act[j]);
                }
                let d = _mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(u16::from_le_bytes(w.d.0))));
                let d = _mm512_mul_ps(_mm512_broadcastss_ps(d), p.d);
                _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), d, acc)
            }
        }
    }

    /// A byte mask with the four bytes of each dword set in `dwords`.
    #[inline(always)]
    fn spread_dwords(dwords: u16) -> u64 {
        (0..16)
            .filter(|k| dwords & (1 << k) != 0)
            .fold(0, |m, k| m | (0xf << (4 * k)))
    }
}

target_entries! { "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni";
    fn tq1_0_gemv(w: &[BlockTq1_0], a: &[BlockQ8K], out: &mut [f32]) => prepared_gemv::gemv_body::<imp::Tq1_0, { imp::PREP_BLOCKS }>;
}

/// Plain TQ1_0 rows: the 512-bit GEMV, the AVX2 one-quad GEMM, the 16-row tiles.
pub(crate) fn tq1_0_rows(token: Avx512) -> Kernels<BlockTq1_0, BlockQ8K, BlockQ8K> {
    Kernels {
        gemv: tq1_0_gemv,
        ..grid_tiles::tq1_0_rows(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::{CpuFeatures, KernelSet};
    use crate::kernel_api::SetToken;
    use crate::kernels::row_tests::{
        compare_matmul_on, compare_rows, half, q8_k_extreme_activations, q8_k_long_rows,
        q8_k_values, random, random_q8_k,
    };
    use crate::rng::SplitMix64 as Rng;
    use crate::types::GgmlType;
    use crate::vecdot;

    fn random_tq1_0(rng: &mut Rng) -> BlockTq1_0 {
        BlockTq1_0 {
            d: half(rng),
            ..random(rng)
        }
    }

    /// Random blocks (every byte value, so every digit pattern and the bytes past 242 that
    /// ggml's quantizer never writes), rows of 70 and 130 blocks with 1 to 9 rows, and blocks of
    /// all-equal bytes at the digit boundaries against `-128` and `127` activations.
    #[test]
    fn equals_portable_and_exact() {
        let Some(cpu) = Avx512::new(CpuFeatures::get()) else {
            return;
        };
        let ty = GgmlType::TQ1_0;
        let (rows, dot) = (tq1_0_rows(cpu), vecdot::vec_dot_tq1_0_q8_k);
        compare_rows(ty, 1, rows, dot, random_tq1_0, random_q8_k, q8_k_values);
        compare_matmul_on(KernelSet::Avx512, ty, 1, random_tq1_0);
        q8_k_long_rows(ty, rows.gemv, dot, random_tq1_0);
        let mut rng = Rng::new(3);
        let w: Vec<BlockTq1_0> = [0u8, 85, 86, 170, 171, 242, 255]
            .map(|b| BlockTq1_0 {
                qs: [b; 48],
                qh: [b; 4],
                d: half(&mut rng),
            })
            .to_vec();
        q8_k_extreme_activations(ty, rows.gemv, dot, &w);
    }
}
