//! IQ1_S's AVX2 GEMV on activations prepared once per call (`prepared_gemv`), its grid
//! indices worked out a few blocks ahead (`prepared_gemv::AHEAD_BLOCKS`) and read back four
//! to a word. As in the row GEMV, each group's shift `δ` goes into the factor of its two
//! 16-weight activation sums, `Σ ls·(8 q + δ)·a = ls·Σ (8 q + 9)·a + (δ - 9)·ls·Σ a`, so the
//! points multiply as the table's `8 q + 9` bytes.
//!
//! # Exactness
//!
//! The row GEMV's integers (`iq1_s_groups`), the same products and sums: only the order of the
//! `f32` roundings differs from the portable kernel.

use std::arch::x86_64::*;
use std::mem::MaybeUninit;

use super::iq1::{iq1_points_ahead, iq1_s_indices, iq1_s_shift_coef};
use super::{le_u16, odd, points64, GridBlock};
use crate::blocks::{BlockIq1S, BlockQ8K};
use crate::kernels::x86::avx2::plain_rows::{load32, load_bsums, sub};
use crate::kernels::x86::prepared_gemv::PreparedGemv;

/// Activation blocks (256 columns) prepared at a time: 4096 columns, under 5 KiB of stack.
pub(in crate::kernels::x86::avx2) const PREP_BLOCKS: usize = 16;

/// One Q8_K block as the GEMV reads it.
#[derive(Clone, Copy)]
pub(in crate::kernels::x86::avx2) struct Iq1SAct {
    /// The quants of each 32-weight group.
    qs: [__m256i; 8],
    /// The sums of each 16 quants (`i16` lanes).
    bsums: __m256i,
    d: f32,
}

/// The IQ1_S GEMV's blocks.
pub(in crate::kernels::x86::avx2) struct Iq1S;

impl PreparedGemv for Iq1S {
    type Weight = BlockIq1S;
    type Act = BlockQ8K;
    type Acc = __m256;
    type Prep = Iq1SAct;
    type Consts = ();
    type Ahead = [u64; 8];

    /// The block's 32 grid indices, worked out a few blocks before its product: cut from the
    /// block's words in the product (3 bits of a `qh` word and a `qs` byte a point), they were
    /// most of its scalar work.
    #[inline(always)]
    unsafe fn ahead(w: &BlockIq1S, _: (), index: &mut MaybeUninit<[u64; 8]>) {
        // SAFETY: the caller's features; `iq1_s_indices` writes all eight words.
        unsafe { iq1_s_indices(w, index.write([0; 8])) }
    }

    #[inline(always)]
    unsafe fn empty() -> Iq1SAct {
        // SAFETY: register-only intrinsics of the caller's features.
        let zero = unsafe { _mm256_setzero_si256() };
        Iq1SAct {
            qs: [zero; 8],
            bsums: zero,
            d: 0.0,
        }
    }

    #[inline(always)]
    unsafe fn consts() {}

    #[inline(always)]
    unsafe fn prepare(a: &BlockQ8K) -> Iq1SAct {
        // SAFETY: the caller's features; `load32` reads 32 bytes of fixed-size arrays.
        unsafe {
            Iq1SAct {
                qs: std::array::from_fn(|g| load32(sub::<i8, 32>(&a.qs, 32 * g))),
                bsums: load_bsums(&a.bsums),
                d: a.d,
            }
        }
    }

    #[inline(always)]
    unsafe fn block(w: &BlockIq1S, index: &[u64; 8], p: &Iq1SAct, _: (), acc: __m256) -> __m256 {
        // SAFETY: register-only intrinsics of the caller's features; `ahead` wrote the
        // indices (below 2048).
        unsafe {
            let coef = iq1_s_shift_coef(w);
            let mut isum = _mm256_madd_epi16(p.bsums, coef);
            for (g, &av) in p.qs.iter().enumerate() {
                let u = points64(iq1_points_ahead(index, g));
                let scale = _mm256_set1_epi16(odd(((le_u16(&w.qh, g) >> 12) & 7) as u8));
                isum =
                    _mm256_add_epi32(isum, _mm256_madd_epi16(_mm256_maddubs_epi16(u, av), scale));
            }
            let d = _mm256_broadcastss_ps(_mm_mul_ss(w.scale(), _mm_set_ss(p.d)));
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), d, acc)
        }
    }
}
