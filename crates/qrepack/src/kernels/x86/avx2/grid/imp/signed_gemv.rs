//! An AVX2 GEMV of the signed grid types (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S) on
//! activations prepared once per call (`prepared_gemv`): each group's `|a|` and the sign of
//! each `a` are taken once for every weight row rather than once per row. A group's product
//! with a row is then `maddubs(|a|, sign(grid, sign(a) ^ negate))`, the grid bytes unsigned
//! and `negate` the mask of the weights their signs negate, its `madd` by the group scale and
//! the sum: the row GEMV also negates the grid bytes before signing them by `a`. IQ3_S,
//! IQ2_XXS and IQ2_XS take it; for the others the row GEMV measured faster (`grid/mod.rs` has
//! the figures).
//!
//! # Exactness
//!
//! The row GEMV's integers (`signed_groups`), regrouped: `|a|` read as unsigned is exact for
//! `a = -128`, and the sign operand is never zero where `a` is not, so every grid magnitude
//! (at most 62) keeps its value with the sign of its product. Only the order of the `f32`
//! roundings differs from the portable kernel.

use std::arch::x86_64::*;
use std::marker::PhantomData;
use std::mem::MaybeUninit;

use super::GridBlock;
use crate::blocks::BlockQ8K;
use crate::kernels::x86::avx2::plain_rows::{load32, sub};
use crate::kernels::x86::prepared_gemv::PreparedGemv;

/// Activation blocks (256 columns) prepared at a time: 4096 columns, about 8 KiB of stack.
pub(in crate::kernels::x86::avx2) const PREP_BLOCKS: usize = 16;

/// One Q8_K block as the GEMVs read it.
#[derive(Clone, Copy)]
pub(in crate::kernels::x86::avx2) struct SignedAct {
    /// Each quant's sign as a nonzero byte: `0x81` where it is negative, else `0x01`. With
    /// the mask of a group's negated weights (`0xff` bytes) xored in, its sign is that of the
    /// product, and it is never zero, so `sign(grid, ..)` leaves every magnitude in place.
    sign: [__m256i; 8],
    /// Their absolute values (unsigned: 128 for -128).
    abs: [__m256i; 8],
    d: f32,
}

/// The GEMV's blocks of grid type `B`.
pub(in crate::kernels::x86::avx2) struct Signed<B>(PhantomData<B>);

impl<B: GridBlock> PreparedGemv for Signed<B> {
    type Weight = B;
    type Act = BlockQ8K;
    type Acc = __m256;
    type Prep = SignedAct;
    type Consts = ();
    /// What the block decodes at once (sign words, scales), worked out a few blocks before its
    /// product (`prepared_gemv::AHEAD_BLOCKS`): made right before it, its loads waited on the
    /// vector stores that had just written it.
    type Ahead = B::Prep;

    #[inline(always)]
    unsafe fn ahead(w: &B, _: (), out: &mut MaybeUninit<B::Prep>) {
        // SAFETY: the caller's features.
        out.write(unsafe { w.prepare() });
    }

    #[inline(always)]
    unsafe fn empty() -> SignedAct {
        // SAFETY: register-only intrinsics of the caller's features.
        let zero = unsafe { _mm256_setzero_si256() };
        SignedAct {
            sign: [zero; 8],
            abs: [zero; 8],
            d: 0.0,
        }
    }

    #[inline(always)]
    unsafe fn consts() {}

    #[inline(always)]
    unsafe fn prepare(a: &BlockQ8K) -> SignedAct {
        // SAFETY: the caller's features; `load32` reads 32 bytes of the block's quants.
        unsafe {
            let q: [__m256i; 8] = std::array::from_fn(|g| load32(sub::<i8, 32>(&a.qs, 32 * g)));
            let top = _mm256_set1_epi8(-128);
            let one = _mm256_set1_epi8(1);
            SignedAct {
                sign: q.map(|v| _mm256_or_si256(_mm256_and_si256(v, top), one)),
                abs: q.map(|v| _mm256_abs_epi8(v)),
                d: a.d,
            }
        }
    }

    #[inline(always)]
    unsafe fn block(w: &B, prep: &B::Prep, p: &SignedAct, _: (), acc: __m256) -> __m256 {
        // SAFETY: register-only intrinsics of the caller's features; the block's own loads go
        // through its fixed-size fields.
        unsafe {
            // Two sums, the groups in pairs, unrolled (as the row GEMV's `signed_groups`).
            let mut isum = [_mm256_setzero_si256(); 2];
            macro_rules! group {
                ($g:literal) => {
                    // |a| times the grid byte with the sign of the product (exact for a = -128)
                    let (grid, negate, sc) = w.group(prep, $g);
                    let sign = _mm256_xor_si256(p.sign[$g], negate);
                    let pairs = _mm256_maddubs_epi16(p.abs[$g], _mm256_sign_epi8(grid, sign));
                    isum[$g % 2] = _mm256_add_epi32(isum[$g % 2], _mm256_madd_epi16(pairs, sc));
                };
            }
            group!(0);
            group!(1);
            group!(2);
            group!(3);
            group!(4);
            group!(5);
            group!(6);
            group!(7);
            let total = _mm256_add_epi32(isum[0], isum[1]);
            let d = _mm256_broadcastss_ps(_mm_mul_ss(w.scale(), _mm_set_ss(p.d)));
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(total), d, acc)
        }
    }
}
