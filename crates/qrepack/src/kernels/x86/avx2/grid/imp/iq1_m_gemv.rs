//! IQ1_M's AVX2 GEMV on activations prepared once per call (`prepared_gemv`): with the sum
//! of every 8 activations at hand, each point's shift `δ` (one per 8 weights) goes into the
//! factor of its activation sum, `Σ ls·(8 q + δ)·a = ls·Σ (8 q + 9)·a + (δ - 9)·ls·Σ a`, so a
//! group's points multiply as the table's `8 q + 9` bytes with no per-group vector work
//! besides loading them. The row GEMV builds the `8 q + 9 + δ` bytes in every group instead,
//! since Q8_K carries only 16-weight sums.
//!
//! # Exactness
//!
//! The products and the integer sums are the row GEMV's, regrouped: a point's `(δ - 9)·ls`
//! is at most `10·15` and an 8-activation sum at most `8·128` in magnitude, so a `madd` pair
//! stays far inside `i32`. Only the order of the `f32` roundings differs from the portable
//! kernel.

use std::arch::x86_64::*;

use std::mem::MaybeUninit;

use super::iq1::{iq1_m_indices, iq1_points_ahead};
use super::{points64, GridBlock};
use crate::blocks::{BlockIq1M, BlockQ8K};
use crate::kernels::x86::avx2::plain_rows::{load32, load_bsums, sub};
use crate::kernels::x86::prepared_gemv::PreparedGemv;

/// Activation blocks (256 columns) prepared at a time: 4096 columns, under 6 KiB of stack.
pub(in crate::kernels::x86::avx2) const PREP_BLOCKS: usize = 16;

/// One Q8_K block as the GEMV reads it.
#[derive(Clone, Copy)]
pub(in crate::kernels::x86::avx2) struct Iq1MAct {
    /// The quants of each 32-weight group.
    qs: [__m256i; 8],
    /// `i16` lane `k`: the sum of activations `16 k..16 k + 8` (`runs[0]`) and `16 k + 8..16 k
    /// + 16` (`runs[1]`), the spans of the block's even and odd points.
    runs: [__m256i; 2],
    d: f32,
}

/// The IQ1_M GEMV's blocks.
pub(in crate::kernels::x86::avx2) struct Iq1M;

impl PreparedGemv for Iq1M {
    type Weight = BlockIq1M;
    type Act = BlockQ8K;
    type Acc = __m256;
    type Prep = Iq1MAct;
    type Consts = ();
    type Ahead = [u64; 8];

    /// The block's 32 grid indices, worked out a few blocks before its product and read back
    /// one by one: cut from a general register with shifts and masks in the product, they
    /// were most of its scalar work.
    #[inline(always)]
    unsafe fn ahead(w: &BlockIq1M, _: (), index: &mut MaybeUninit<[u64; 8]>) {
        // SAFETY: the caller's features; `iq1_m_indices` writes all eight words.
        unsafe { iq1_m_indices(w, index.write([0; 8])) }
    }

    #[inline(always)]
    unsafe fn empty() -> Iq1MAct {
        // SAFETY: register-only intrinsics of the caller's features.
        let zero = unsafe { _mm256_setzero_si256() };
        Iq1MAct {
            qs: [zero; 8],
            runs: [zero; 2],
            d: 0.0,
        }
    }

    #[inline(always)]
    unsafe fn consts() {}

    #[inline(always)]
    unsafe fn prepare(a: &BlockQ8K) -> Iq1MAct {
        let run = |r: usize| -> i16 { a.qs[8 * r..8 * r + 8].iter().map(|&v| i16::from(v)).sum() };
        let even: [i16; 16] = std::array::from_fn(|k| run(2 * k));
        let odd: [i16; 16] = std::array::from_fn(|k| run(2 * k + 1));
        // SAFETY: the caller's features; `load32` reads 32 bytes of fixed-size arrays.
        unsafe {
            Iq1MAct {
                qs: std::array::from_fn(|g| load32(sub::<i8, 32>(&a.qs, 32 * g))),
                runs: [load_bsums(&even), load_bsums(&odd)],
                d: a.d,
            }
        }
    }

    #[inline(always)]
    unsafe fn block(w: &BlockIq1M, index: &[u64; 8], p: &Iq1MAct, _: (), acc: __m256) -> __m256 {
        // SAFETY: register-only intrinsics of the caller's features; the loads read the
        // block's 16 `qh` bytes.
        unsafe {
            let prep = w.prepare();
            // Byte k of `qh` holds the shift signs of points 2k (bit 3) and 2k + 1 (bit 7),
            // both in the 16 weights of scale k.
            let qh = _mm256_cvtepu8_epi16(_mm_loadu_si128(w.qh.as_ptr().cast()));
            let eight = _mm256_set1_epi16(8);
            // δ - 9: -10 where the sign is set (δ = -1), else -8
            let factor = |bits: __m256i| {
                let negative = _mm256_cmpeq_epi16(_mm256_and_si256(bits, eight), eight);
                _mm256_add_epi16(_mm256_set1_epi16(-8), _mm256_add_epi16(negative, negative))
            };
            let even = _mm256_mullo_epi16(prep.ls, factor(qh));
            let odd = _mm256_mullo_epi16(prep.ls, factor(_mm256_srli_epi16::<4>(qh)));
            let mut isum = _mm256_add_epi32(
                _mm256_madd_epi16(p.runs[0], even),
                _mm256_madd_epi16(p.runs[1], odd),
            );
            for (g, &av) in p.qs.iter().enumerate() {
                // `ahead` wrote the indices (below 2048).
                let u = points64(iq1_points_ahead(index, g));
                let products = _mm256_madd_epi16(_mm256_maddubs_epi16(u, av), prep.scales[g]);
                isum = _mm256_add_epi32(isum, products);
            }
            let d = _mm256_broadcastss_ps(_mm_mul_ss(w.scale(), _mm_set_ss(p.d)));
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), d, acc)
        }
    }
}
