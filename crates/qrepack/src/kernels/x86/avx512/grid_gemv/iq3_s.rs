//! The IQ3_S GEMV with `vpdpbusd`: a block is four registers of 16 4-byte grid points, each
//! weight stored as the unsigned byte `16 ± g` (the sign bits straight from a mask register),
//! multiplied with activations put in the registers' order once per call (`prepared_gemv`).
//!
//! Register `j` holds points `8 g + 2 j` and `8 g + 2 j + 1` in lanes `2 g`, `2 g + 1`: both
//! lie in scale group `g` (32 weights), so all four registers share one vector of scales, and
//! their sums take one `vpmulld` after four chained `vpdpbusd` that start from `-16 Σ a` of
//! each lane. The 9-bit indices and the sign masks are worked out a few blocks ahead and read
//! back from memory (`prepared_gemv::AHEAD_BLOCKS`).
//!
//! # Exactness
//!
//! A lane's sum is `Σ w·a` of its 16 weights exactly (`|w| <= 15`, `|a| <= 128`: at most
//! 30720), times an odd scale of at most 31: below `2^24`, so it converts to `f32` exactly.
//! Only the order of the `f32` products and sums differs from the portable kernel.

use crate::blocks::{BlockIq3S, BlockQ8K};
use crate::kernel_api::Kernels;
use crate::kernels::x86::{target_entries, Avx512};

use super::super::grid_tiles;
use crate::kernels::x86::prepared_gemv;

mod imp {
    use std::arch::x86_64::*;
    use std::mem::MaybeUninit;
    use std::ptr::addr_of_mut;

    use crate::blocks::{BlockIq3S, BlockQ8K};
    use crate::kernels::x86::prepared_gemv::PreparedGemv;
    use crate::quant::grids::IQ3S_GRID;

    /// Activation blocks (256 columns each) prepared at a time (8192 columns; 12 KiB of
    /// stack).
    pub(super) const PREP_BLOCKS: usize = 32;

    /// A Q8_K block in the registers' order, `-16 Σ a` of each lane over the four registers
    /// and the block's scale.
    #[derive(Clone, Copy)]
    pub(super) struct Prepared {
        act: [__m512i; 4],
        neg_bias: __m512i,
        d: f32,
    }

    /// A block's 64 grid indices (point order) and the sign masks of its four registers.
    #[derive(Clone, Copy)]
    pub(super) struct Ahead {
        index: [u16; 64],
        signs: [u64; 4],
    }

    /// The point in lane `i` of register `j`.
    const fn point(j: usize, i: usize) -> usize {
        8 * (i / 2) + 2 * j + i % 2
    }

    /// Sixteen 4-byte grid points as one register, `point(i)` in bytes `4 i..4 i + 4`.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F.
    #[inline(always)]
    unsafe fn points16(point: impl Fn(usize) -> u32) -> __m512i {
        let p = |i: usize| point(i) as i32;
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe {
            _mm512_setr_epi32(
                p(0),
                p(1),
                p(2),
                p(3),
                p(4),
                p(5),
                p(6),
                p(7),
                p(8),
                p(9),
                p(10),
                p(11),
                p(12),
                p(13),
                p(14),
                p(15),
            )
        }
    }

    /// `dots` plus register `j`'s 64 weights times its activations.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F, BW and VNNI.
    #[inline(always)]
    unsafe fn register(dots: __m512i, ahead: &Ahead, p: &Prepared, j: usize) -> __m512i {
        // SAFETY: the caller's features; the table reads stay below 512 (9-bit indices).
        unsafe {
            // Loads: see `AHEAD_BLOCKS`.
            let grid = points16(|i| {
                let k = std::ptr::read_volatile(&ahead.index[point(j, i)]);
                *IQ3S_GRID.get_unchecked(usize::from(k))
            });
            let signs = std::ptr::read_volatile(&ahead.signs[j]);
            let up = _mm512_add_epi8(grid, _mm512_set1_epi8(16));
            // 32 - (16 + g) is 16 - g.
            let u = _mm512_mask_sub_epi8(up, signs, _mm512_set1_epi8(32), up);
            _mm512_dpbusd_epi32(dots, u, p.act[j])
        }
    }

    /// The IQ3_S GEMV's blocks.
    pub(super) struct Iq3S;

    impl PreparedGemv for Iq3S {
        type Weight = BlockIq3S;
        type Acc = __m512;
        type Act = BlockQ8K;
        type Prep = Prepared;
        type Consts = ();
        type Ahead = Ahead;

        #[inline(always)]
        unsafe fn empty() -> Prepared {
            // SAFETY: register-only intrinsics of the caller's features.
            unsafe {
                Prepared {
                    act: [_mm512_setzero_si512(); 4],
                    neg_bias: _mm512_setzero_si512(),
                    d: 0.0,
                }
            }
        }

        #[inline(always)]
        unsafe fn consts() {}

        #[inline(always)]
        unsafe fn prepare(a: &BlockQ8K) -> Prepared {
            // Bytes 8 g..8 g + 8 of register j: activations 32 g + 8 j..32 g + 8 j + 8.
            let mut ordered = [0i8; 256];
            for (k, chunk) in ordered.chunks_exact_mut(8).enumerate() {
                let (j, g) = (k / 8, k % 8);
                chunk.copy_from_slice(&a.qs[32 * g + 8 * j..32 * g + 8 * j + 8]);
            }
            // SAFETY: the caller's features; each load reads 64 bytes of `ordered`.
            unsafe {
                let mut act = [_mm512_setzero_si512(); 4];
                let mut sum = _mm512_setzero_si512();
                for (j, act) in act.iter_mut().enumerate() {
                    *act = _mm512_loadu_si512(ordered[64 * j..].as_ptr().cast());
                    sum = _mm512_dpbusd_epi32(sum, _mm512_set1_epi8(16), *act);
                }
                Prepared {
                    act,
                    neg_bias: _mm512_sub_epi32(_mm512_setzero_si512(), sum),
                    d: a.d,
                }
            }
        }

        #[inline(always)]
        unsafe fn ahead(w: &BlockIq3S, _: (), out: &mut MaybeUninit<Ahead>) {
            let ahead = out.as_mut_ptr();
            let qh = u64::from_le_bytes(w.qh);
            // SAFETY: the caller's features; the loads read the block's `qs` and `signs`, the
            // stores write `ahead`'s arrays.
            unsafe {
                // Point k's ninth index bit is bit k of `qh`.
                for h in 0..2 {
                    let low = _mm256_loadu_si256(w.qs[32 * h..].as_ptr().cast());
                    let low = _mm512_cvtepu8_epi16(low);
                    let high = (qh >> (32 * h)) as u32;
                    let idx = _mm512_mask_add_epi16(low, high, low, _mm512_set1_epi16(256));
                    _mm512_storeu_si512(
                        addr_of_mut!((*ahead).index)
                            .cast::<u16>()
                            .add(32 * h)
                            .cast(),
                        idx,
                    );
                }
                // Byte g of register j's mask: `signs[4 g + j]` (weights 32 g + 8 j..+ 8): a
                // 4x4 byte transpose in each 128-bit lane, then dword j of both lanes paired.
                let s = _mm256_loadu_si256(w.signs.as_ptr().cast());
                let s = _mm256_shuffle_epi8(
                    s,
                    _mm256_setr_epi8(
                        0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15, //
                        0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,
                    ),
                );
                let s = _mm256_permutevar8x32_epi32(s, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
                _mm256_storeu_si256(addr_of_mut!((*ahead).signs).cast(), s);
            }
        }

        #[inline(always)]
        unsafe fn block(w: &BlockIq3S, ahead: &Ahead, p: &Prepared, _: (), acc: __m512) -> __m512 {
            // SAFETY: the caller's features.
            unsafe {
                let mut dots = p.neg_bias;
                dots = register(dots, ahead, p, 0);
                dots = register(dots, ahead, p, 1);
                dots = register(dots, ahead, p, 2);
                dots = register(dots, ahead, p, 3);
                // Lanes 2 g, 2 g + 1 take nibble g of the scales, as `2 s + 1`.
                let sc = _mm512_set1_epi32(u32::from_le_bytes(w.scales) as i32);
                let shifts =
                    _mm512_setr_epi32(0, 0, 4, 4, 8, 8, 12, 12, 16, 16, 20, 20, 24, 24, 28, 28);
                let s = _mm512_and_si512(_mm512_srlv_epi32(sc, shifts), _mm512_set1_epi32(0xf));
                let odd = _mm512_or_si512(_mm512_slli_epi32::<1>(s), _mm512_set1_epi32(1));
                let isum = _mm512_mullo_epi32(dots, odd);
                let d = _mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(u16::from_le_bytes(w.d.0))));
                let d = _mm512_broadcastss_ps(_mm_mul_ss(d, _mm_set_ss(p.d)));
                _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), d, acc)
            }
        }
    }
}

target_entries! { "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni";
    fn iq3_s_gemv(w: &[BlockIq3S], a: &[BlockQ8K], out: &mut [f32]) => prepared_gemv::gemv_body::<imp::Iq3S, { imp::PREP_BLOCKS }>;
}

/// Plain IQ3_S rows: the 512-bit GEMV, the AVX2 one-quad GEMM, the 16-row tiles.
pub(crate) fn iq3_s_rows(token: Avx512) -> Kernels<BlockIq3S, BlockQ8K, BlockQ8K> {
    Kernels {
        gemv: iq3_s_gemv,
        ..grid_tiles::iq3_s_rows(token)
    }
}
