//! Plain IQ2_S and IQ1_M rows against Q8_K with `vpdpbusd`: the GEMVs of this set (the
//! one-quad GEMM stays the AVX2 set's, larger batches take the `grid_tiles`).
//!
//! A block is four registers of 64 weights, each eight 8-byte grid points loaded one by one. A
//! grid weight is made the unsigned byte `u = w + bias`: the IQ2_S signs are one bit per
//! weight, so 64 of them load straight into a mask register and `bias - g` replaces `bias + g`
//! under it; IQ1_M's `8 (q + 1)` comes from a 16-byte table by the grid value `q` and `1 + δ`
//! is added under the mask of its positive shifts. One `vpdpbusd` then multiplies the 64 bytes
//! with the activations, starting from `-bias Σ a` of each 4-byte lane, which is worked out
//! once per call with the activations themselves (`prepared_gemv`). Every 4-byte lane lies in
//! one 16-weight scale group, so one `vpmulld` by the scales spread to their lanes (`vpermd`
//! from one vector of the block's 16 odd scales) finishes the register: against the AVX2
//! kernel, no sign vectors, no `maddubs`/`madd` pairs and no activation sums per block.
//!
//! IQ3_S was tried the same way (16 4-byte points per register) and measured slower than its
//! AVX2 kernel, gathered (`vpgatherdd`) or loaded (4096x4096, 2 threads, weights from DRAM, shared
//! Zen 4, 2026-12-06: 1.25 and 1.14 ms against 0.95).
//!
//! # Exactness
//!
//! A lane's `vpdpbusd` sum is `Σ w·a` of its four weights exactly (`w` is IQ1_M's `8 q + δ`, at
//! most 9 in magnitude, or IQ2_S's grid value, at most 43; `|a| <= 128`), times an odd scale of
//! at most 31 and summed over the block's four registers: below `2^22`, so the lane holds its
//! share of the block's integer sum and converts to `f32` exactly; the type's constant factor
//! (1/8) is a power of two. Only the order of the `f32` products and sums differs from the
//! portable kernels.

use crate::blocks::{BlockIq1M, BlockIq2S, BlockQ8K};
use crate::kernel_api::Kernels;
use crate::kernels::x86::{target_entries, Avx512};

use super::{grid_tiles, prepared_gemv};

mod imp {
    use std::arch::x86_64::*;

    use super::super::prepared_gemv::PreparedGemv;
    use crate::blocks::{BlockIq1M, BlockIq2S, BlockQ8K, F16Bits};
    use crate::quant::grid::iq1_m_scale;
    use crate::quant::grids::{IQ1S_GRID, IQ2S_GRID};

    /// Activation blocks (256 columns each) prepared at a time (8192 columns; 18 KiB of
    /// stack).
    pub(super) const PREP_BLOCKS: usize = 32;

    /// A Q8_K block as four registers, `-bias Σ a` of each of their 4-byte lanes and the
    /// block's scale.
    #[derive(Clone, Copy)]
    pub(super) struct Prepared {
        act: [__m512i; 4],
        neg_bias: [__m512i; 4],
        d: __m512,
    }

    /// A placeholder block.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F.
    #[inline(always)]
    unsafe fn empty() -> Prepared {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe {
            Prepared {
                act: [_mm512_setzero_si512(); 4],
                neg_bias: [_mm512_setzero_si512(); 4],
                d: _mm512_setzero_ps(),
            }
        }
    }

    /// `a` with the lane sums for weights stored as `w + BIAS`.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F, BW and VNNI.
    #[inline(always)]
    unsafe fn prepare<const BIAS: i8>(a: &BlockQ8K) -> Prepared {
        // SAFETY: the caller's features; each load reads 64 of the block's 256 quants.
        unsafe {
            let act: [__m512i; 4] =
                std::array::from_fn(|j| _mm512_loadu_si512(a.qs[64 * j..].as_ptr().cast()));
            let neg_bias = act.map(|x| {
                let sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(BIAS), x);
                _mm512_sub_epi32(_mm512_setzero_si512(), sum)
            });
            Prepared {
                act,
                neg_bias,
                d: _mm512_set1_ps(a.d),
            }
        }
    }

    /// The f16 block scale times `factor` times the activations' scale, in every lane.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F and F16C.
    #[inline(always)]
    unsafe fn block_scale(d: F16Bits, factor: f32, p: &Prepared) -> __m512 {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe {
            let d = _mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(u16::from_le_bytes(d.0))));
            let d = _mm512_broadcastss_ps(_mm_mul_ss(d, _mm_set_ss(factor)));
            _mm512_mul_ps(d, p.d)
        }
    }

    /// Grid magnitudes `g` with one sign bit per byte as `w + 64`: `64 - g` where the bit is
    /// set, else `64 + g`.
    ///
    /// # Safety
    /// The CPU must support AVX-512 BW.
    #[inline(always)]
    unsafe fn biased(grid: __m512i, signs: u64) -> __m512i {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe {
            let up = _mm512_add_epi8(grid, _mm512_set1_epi8(64));
            // 128 - (64 + g) wraps to 64 - g.
            _mm512_mask_sub_epi8(up, signs, _mm512_set1_epi8(-128), up)
        }
    }

    /// The odd scales `2 s + 1` of the fields of `bits` bits at `shifts` of `lo` (lanes 0..8)
    /// and `hi` (lanes 8..16).
    ///
    /// # Safety
    /// The CPU must support AVX-512 F.
    #[inline(always)]
    unsafe fn odd_fields(lo: u32, hi: u32, shifts: __m512i, bits: i32) -> __m512i {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe {
            let x = _mm512_inserti64x4::<1>(
                _mm512_castsi256_si512(_mm256_set1_epi32(lo as i32)),
                _mm256_set1_epi32(hi as i32),
            );
            let mask = _mm512_set1_epi32((1 << bits) - 1);
            let s = _mm512_and_si512(_mm512_srlv_epi32(x, shifts), mask);
            _mm512_or_si512(_mm512_slli_epi32::<1>(s), _mm512_set1_epi32(1))
        }
    }

    /// The shifts of eight 4-bit fields, twice.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F.
    #[inline(always)]
    unsafe fn nibble_shifts() -> __m512i {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe { _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28) }
    }

    /// Register `j`'s 64 bytes times the activations, scaled per lane by the entry of
    /// `scales` that `spread` picks, added to `isum`.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F, BW and VNNI.
    #[inline(always)]
    unsafe fn scaled_dot(
        isum: __m512i,
        u: __m512i,
        p: &Prepared,
        j: usize,
        scales: __m512i,
        spread: __m512i,
    ) -> __m512i {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe {
            let dots = _mm512_dpbusd_epi32(p.neg_bias[j], u, p.act[j]);
            let sc = _mm512_permutexvar_epi32(spread, scales);
            _mm512_add_epi32(isum, _mm512_mullo_epi32(dots, sc))
        }
    }

    /// Lane `l` of register `j` takes scale `4 j + l / 4` (one per 16 weights).
    ///
    /// # Safety
    /// The CPU must support AVX-512 F.
    #[inline(always)]
    unsafe fn spread16(j: usize) -> __m512i {
        let b = 4 * j as i32;
        let (b1, b2, b3) = (b + 1, b + 2, b + 3);
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe { _mm512_setr_epi32(b, b, b, b, b1, b1, b1, b1, b2, b2, b2, b2, b3, b3, b3, b3) }
    }

    /// The `u64` of `b[at..at + 8]`.
    #[inline(always)]
    fn le_u64(b: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(b[at..at + 8].try_into().expect("eight bytes"))
    }

    /// The `PreparedGemv` items every type here shares: Q8_K blocks prepared for weights
    /// stored as `w + $bias`, no constants.
    macro_rules! q8_k_prepared {
        ($bias:literal) => {
            type Act = BlockQ8K;
            type Prep = Prepared;
            type Consts = ();

            #[inline(always)]
            unsafe fn empty() -> Prepared {
                // SAFETY: the caller's features.
                unsafe { empty() }
            }

            #[inline(always)]
            unsafe fn consts() {}

            #[inline(always)]
            unsafe fn prepare(a: &BlockQ8K) -> Prepared {
                // SAFETY: the caller's features.
                unsafe { prepare::<$bias>(a) }
            }
        };
    }

    /// Eight 8-byte grid points as one register, `point(l)` in bytes `8 l..8 l + 8`.
    ///
    /// Loaded one by one: a gather of them (`vpgatherdq`) measured faster on one thread of the
    /// Zen 4 but did not gain from a second one (IQ1_M 4096x4096, 2 threads, weights from DRAM:
    /// 1.22 ms gathered, 0.60 loaded, 0.82 for the AVX2 kernel).
    ///
    /// # Safety
    /// The CPU must support AVX-512 F.
    #[inline(always)]
    unsafe fn points8(point: impl Fn(usize) -> u64) -> __m512i {
        let p = |l: usize| point(l) as i64;
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe { _mm512_set_epi64(p(7), p(6), p(5), p(4), p(3), p(2), p(1), p(0)) }
    }

    /// The IQ2_S GEMV's blocks.
    pub(super) struct Iq2S;

    impl PreparedGemv for Iq2S {
        type Weight = BlockIq2S;
        q8_k_prepared!(64);

        #[inline(always)]
        unsafe fn block(w: &BlockIq2S, p: &Prepared, _: (), acc: __m512) -> __m512 {
            let sc = u64::from_le_bytes(w.scales);
            // SAFETY: the caller's features; the table reads are bounds-checked.
            unsafe {
                // Nibble h of the scales weighs weights 16 h..16 h + 16.
                let scales = odd_fields(sc as u32, (sc >> 32) as u32, nibble_shifts(), 4);
                let mut isum = _mm512_setzero_si512();
                for j in 0..4 {
                    // Point k's top index bits are bits 2 (k % 4), 2 (k % 4) + 1 of `qh[k / 4]`.
                    let grid = points8(|l| {
                        let k = 8 * j + l;
                        let high = (usize::from(w.qh[k / 4]) << (8 - 2 * (k % 4))) & 0x300;
                        IQ2S_GRID[usize::from(w.qs[k]) | high]
                    });
                    let u = biased(grid, le_u64(&w.qs, 32 + 8 * j));
                    isum = scaled_dot(isum, u, p, j, scales, spread16(j));
                }
                let d = block_scale(w.d, 0.125, p);
                _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), d, acc)
            }
        }
    }

    /// The IQ1_M GEMV's blocks.
    pub(super) struct Iq1M;

    impl PreparedGemv for Iq1M {
        type Weight = BlockIq1M;
        q8_k_prepared!(9);

        #[inline(always)]
        unsafe fn block(w: &BlockIq1M, p: &Prepared, _: (), acc: __m512) -> __m512 {
            let sc = u64::from_le_bytes(w.scales);
            // SAFETY: the caller's features; the table reads are bounds-checked.
            unsafe {
                // Scale h (16 weights): 3 bits at 3 (h % 4) of 16-bit word h / 4.
                let shifts =
                    _mm512_setr_epi32(0, 3, 6, 9, 16, 19, 22, 25, 0, 3, 6, 9, 16, 19, 22, 25);
                let scales = odd_fields(sc as u32, (sc >> 32) as u32, shifts, 3);
                // 8 (q + 1) for the grid values q = -1, 0, 1 (bytes 0xff, 0, 1): `pshufb`
                // zeroes a byte whose top bit is set.
                let table = _mm512_broadcast_i32x4(_mm_setr_epi8(
                    8, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                ));
                let mut isum = _mm512_setzero_si512();
                for j in 0..4 {
                    // Point p of 8 j..8 j + 8: nibble p of the `qh` bytes 4 j..4 j + 4, its 3
                    // high index bits and the shift sign (bit 3; set: δ = -1).
                    let qh =
                        u32::from_le_bytes(w.qh[4 * j..4 * j + 4].try_into().expect("four bytes"));
                    let nibbles = _mm256_srlv_epi32(
                        _mm256_set1_epi32(qh as i32),
                        _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28),
                    );
                    let positive = _mm256_testn_epi32_mask(nibbles, _mm256_set1_epi32(8));
                    let grid = points8(|l| {
                        let k = 8 * j + l;
                        let high = ((usize::from(w.qh[k / 2]) >> (4 * (k % 2))) & 7) << 8;
                        IQ1S_GRID[usize::from(w.qs[k]) | high]
                    });
                    // u = 8 q + 9 + δ: 8 (q + 1), plus 2 where the shift is positive.
                    let base = _mm512_shuffle_epi8(table, grid);
                    let u = _mm512_mask_add_epi64(base, positive, base, _mm512_set1_epi8(2));
                    isum = scaled_dot(isum, u, p, j, scales, spread16(j));
                }
                let d = block_scale(iq1_m_scale(w), 0.125, p);
                _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), d, acc)
            }
        }
    }
}

target_entries! { "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni";
    fn iq2_s_gemv(w: &[BlockIq2S], a: &[BlockQ8K], out: &mut [f32]) => prepared_gemv::gemv_body::<imp::Iq2S, { imp::PREP_BLOCKS }>;
    fn iq1_m_gemv(w: &[BlockIq1M], a: &[BlockQ8K], out: &mut [f32]) => prepared_gemv::gemv_body::<imp::Iq1M, { imp::PREP_BLOCKS }>;
}

/// Plain IQ2_S rows: the 512-bit GEMV, the AVX2 one-quad GEMM, the 16-row tiles.
pub(crate) fn iq2_s_rows(token: Avx512) -> Kernels<BlockIq2S, BlockQ8K, BlockQ8K> {
    Kernels {
        gemv: iq2_s_gemv,
        ..grid_tiles::iq2_s_rows(token)
    }
}

/// Plain IQ1_M rows: the 512-bit GEMV, the AVX2 one-quad GEMM, the 16-row tiles.
pub(crate) fn iq1_m_rows(token: Avx512) -> Kernels<BlockIq1M, BlockQ8K, BlockQ8K> {
    Kernels {
        gemv: iq1_m_gemv,
        ..grid_tiles::iq1_m_rows(token)
    }
}

#[cfg(test)]
mod tests;
