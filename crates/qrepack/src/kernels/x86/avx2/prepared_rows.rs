//! AVX2 GEMVs of plain Q1_0 and NVFP4 rows on activations prepared once per call
//! (`prepared_gemv`): the activation bytes are put in the order the weight bits or nibbles
//! come out of their cheapest decode, with their absolute values and signs, so that a weight
//! block costs a handful of instructions and four rows share every prepared block.
//!
//! * **Q1_0**: the four bytes of weight bits of each Q8_0 block are broadcast to the eight
//!   dword lanes and shifted left by `7 - lane`, which puts bit `lane` of every byte in its top
//!   bit: the byte at `4·lane + b` stands for weight `8b + lane`, and the activations are
//!   prepared in that order. `vpblendvb` on those top bits picks `sign(a)` or `-sign(a)`, and
//!   `maddubs(|a|, ·)` gives `±a` in pairs.
//! * **NVFP4**: the 32 quant bytes of a block are split into low and high nibbles in place
//!   (byte `i`'s low nibble is weight `16(i/8) + i%8`, its high one that plus 8), the
//!   activations prepared in both orders; both halves' products share the `i16` lanes of their
//!   16-weight group, so that the `i32` lanes after `madd` come in group pairs.
//!
//! Against the row GEMVs (`lowbit`), which redo the activation work for every row, this
//! takes NVFP4 from 1.04x to 0.67x ggml's time at batch 1 and Q1_0 from 1.47x to 0.71-0.79x
//! (weights from DRAM; the select table has the figures).
//!
//! # Exactness
//!
//! `|a|` read as unsigned is exact for `a = -128`, and the pair sums stay far from `i16`
//! saturation (Q1_0 `2·128`, NVFP4 two products of `|w| <= 12` per pair and two pairs added:
//! `4·12·128`). The integer sums of each Q8_0 block or 16-weight group are exact; only the
//! order of the `f32` products and sums differs from the portable kernels.

use crate::blocks::{BlockNvfp4, BlockQ1_0, BlockQ8_0};
use crate::kernel_api::{target_entries, Kernels};
use crate::kernels::x86::avx2::q8_0_tiles;
use crate::kernels::x86::{prepared_gemv, Avx2};

mod imp {
    use std::arch::x86_64::*;

    use crate::blocks::{BlockNvfp4, BlockQ1_0, BlockQ8_0};
    use crate::kernels::x86::avx2::lowbit::half;
    use crate::kernels::x86::avx2::plain_rows::{load16, load32};
    use crate::kernels::x86::prepared_gemv::{nothing_ahead, PreparedGemv};
    use crate::quant::grids::KVALUES_FP4;

    /// Q1_0 blocks (128 columns) prepared at a time: 4096 columns, 12 KiB of stack.
    pub(super) const Q1_0_PREP_BLOCKS: usize = 32;

    /// NVFP4 blocks (64 columns) prepared at a time: 4096 columns, 10 KiB of stack.
    pub(super) const NVFP4_PREP_BLOCKS: usize = 64;

    /// 32 activations as `maddubs` wants them: `|a|` (unsigned) and `sign(a)`, `-sign(a)`.
    #[derive(Clone, Copy)]
    pub(super) struct Signed {
        abs: __m256i,
        sign: __m256i,
        neg_sign: __m256i,
    }

    /// The activations of one Q1_0 block: each Q8_0 block in bit order, and its scale.
    #[derive(Clone, Copy)]
    pub(super) struct Q1_0Prep {
        act: [Signed; 4],
        d: [f32; 4],
    }

    /// The Q1_0 GEMV's blocks.
    pub(super) struct Q1_0;

    impl PreparedGemv for Q1_0 {
        type Weight = BlockQ1_0;
        type Act = [BlockQ8_0; 4];
        type Acc = __m256;
        type Prep = Q1_0Prep;
        /// The shift of each dword lane, `7 - lane`.
        type Consts = __m256i;
        nothing_ahead!();

        #[inline(always)]
        unsafe fn empty() -> Q1_0Prep {
            // SAFETY: register-only intrinsics of the caller's features.
            let zero = unsafe { _mm256_setzero_si256() };
            let signed = Signed {
                abs: zero,
                sign: zero,
                neg_sign: zero,
            };
            Q1_0Prep {
                act: [signed; 4],
                d: [0.0; 4],
            }
        }

        #[inline(always)]
        unsafe fn consts() -> __m256i {
            // SAFETY: register-only intrinsics of the caller's features.
            unsafe { _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0) }
        }

        #[inline(always)]
        unsafe fn prepare(a: &[BlockQ8_0; 4]) -> Q1_0Prep {
            let act = a.each_ref().map(|b| {
                // Byte 4·lane + j stands for weight 8j + lane.
                let ordered: [i8; 32] = std::array::from_fn(|p| b.qs[8 * (p % 4) + p / 4]);
                // SAFETY: the caller's features; `load32` reads the 32 bytes.
                unsafe { signed(load32(&ordered)) }
            });
            Q1_0Prep {
                act,
                d: a.each_ref().map(|b| b.d.to_f32()),
            }
        }

        #[inline(always)]
        unsafe fn block(
            w: &BlockQ1_0,
            _: &(),
            p: &Q1_0Prep,
            shifts: __m256i,
            acc: __m256,
        ) -> __m256 {
            let mut acc = [acc];
            // SAFETY: the caller's features.
            unsafe { Self::blocks([w], p, shifts, &mut acc) };
            acc[0]
        }

        /// The rows Q8_0 block by Q8_0 block: its three prepared vectors stay in registers
        /// for all the rows (a block at a time for each row spilled them).
        #[inline(always)]
        unsafe fn blocks<const R: usize>(
            w: [&BlockQ1_0; R],
            p: &Q1_0Prep,
            shifts: __m256i,
            acc: &mut [__m256; R],
        ) {
            // SAFETY: register-only intrinsics of the caller's features.
            unsafe {
                let ones16 = _mm256_set1_epi16(1);
                let mut sums = [_mm256_setzero_ps(); R];
                for (k, (act, &d)) in p.act.iter().zip(&p.d).enumerate() {
                    let d = _mm256_set1_ps(d);
                    for (w, sum) in w.iter().zip(&mut sums) {
                        let mut bits = [0u8; 4];
                        bits.copy_from_slice(&w.qs[4 * k..4 * k + 4]);
                        let bits = _mm256_set1_epi32(i32::from_le_bytes(bits));
                        let tops = _mm256_sllv_epi32(bits, shifts);
                        // `sign(a)` where the weight's bit is set (+1), `-sign(a)` where not.
                        let sign = _mm256_blendv_epi8(act.neg_sign, act.sign, tops);
                        let pairs = _mm256_maddubs_epi16(act.abs, sign);
                        let dots = _mm256_madd_epi16(pairs, ones16);
                        *sum = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots), d, *sum);
                    }
                }
                for ((w, sum), acc) in w.iter().zip(sums).zip(acc) {
                    *acc = _mm256_fmadd_ps(sum, _mm256_broadcastss_ps(half(w.d)), *acc);
                }
            }
        }
    }

    /// `v` as `|v|` and its signs.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline(always)]
    unsafe fn signed(v: __m256i) -> Signed {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe {
            let ones = _mm256_set1_epi8(1);
            let sign = _mm256_sign_epi8(ones, v);
            Signed {
                abs: _mm256_abs_epi8(v),
                sign,
                neg_sign: _mm256_sub_epi8(_mm256_setzero_si256(), sign),
            }
        }
    }

    /// The activations of one NVFP4 block in the order of the low and the high nibbles, with
    /// their absolute values, and the two Q8_0 scales in the lanes of their groups.
    #[derive(Clone, Copy)]
    pub(super) struct Nvfp4Prep {
        low: [__m256i; 2],
        high: [__m256i; 2],
        d: __m256,
    }

    /// Constants of the NVFP4 kernel.
    #[derive(Clone, Copy)]
    pub(super) struct Nvfp4Consts {
        table: __m256i,
        nibble: __m256i,
        ones16: __m256i,
    }

    /// The NVFP4 GEMV's blocks.
    pub(super) struct Nvfp4;

    impl PreparedGemv for Nvfp4 {
        type Weight = BlockNvfp4;
        type Act = [BlockQ8_0; 2];
        type Acc = __m256;
        type Prep = Nvfp4Prep;
        type Consts = Nvfp4Consts;
        nothing_ahead!();

        #[inline(always)]
        unsafe fn empty() -> Nvfp4Prep {
            // SAFETY: register-only intrinsics of the caller's features.
            unsafe {
                let zero = _mm256_setzero_si256();
                Nvfp4Prep {
                    low: [zero; 2],
                    high: [zero; 2],
                    d: _mm256_setzero_ps(),
                }
            }
        }

        #[inline(always)]
        unsafe fn consts() -> Nvfp4Consts {
            // SAFETY: register-only intrinsics of the caller's features; `load16` reads the
            // 16-byte table.
            unsafe {
                Nvfp4Consts {
                    table: _mm256_broadcastsi128_si256(load16(&KVALUES_FP4)),
                    nibble: _mm256_set1_epi8(0x0f),
                    ones16: _mm256_set1_epi16(1),
                }
            }
        }

        #[inline(always)]
        unsafe fn prepare(a: &[BlockQ8_0; 2]) -> Nvfp4Prep {
            // Byte i's low nibble is weight 16(i/8) + i%8, its high nibble that plus 8.
            let at = |i: usize| &a[i / 16].qs[16 * (i / 8 % 2) + i % 8..];
            let low: [i8; 32] = std::array::from_fn(|i| at(i)[0]);
            let high: [i8; 32] = std::array::from_fn(|i| at(i)[8]);
            // SAFETY: the caller's features; `load32` reads the 32 bytes.
            unsafe {
                let (low, high) = (load32(&low), load32(&high));
                let (d0, d1) = (a[0].d.to_f32(), a[1].d.to_f32());
                Nvfp4Prep {
                    low: [low, _mm256_abs_epi8(low)],
                    high: [high, _mm256_abs_epi8(high)],
                    d: _mm256_setr_ps(d0, d0, d0, d0, d1, d1, d1, d1),
                }
            }
        }

        #[inline(always)]
        unsafe fn block(
            w: &BlockNvfp4,
            _: &(),
            p: &Nvfp4Prep,
            c: Nvfp4Consts,
            acc: __m256,
        ) -> __m256 {
            // SAFETY: register-only intrinsics of the caller's features; `load32` reads the
            // 32 quant bytes.
            unsafe {
                let q = load32(&w.qs);
                let low = _mm256_shuffle_epi8(c.table, _mm256_and_si256(q, c.nibble));
                let high = _mm256_shuffle_epi8(
                    c.table,
                    _mm256_and_si256(_mm256_srli_epi16::<4>(q), c.nibble),
                );
                let pairs = _mm256_add_epi16(
                    _mm256_maddubs_epi16(p.low[1], _mm256_sign_epi8(low, p.low[0])),
                    _mm256_maddubs_epi16(p.high[1], _mm256_sign_epi8(high, p.high[0])),
                );
                // i32 lanes 2g and 2g + 1 hold group g.
                let dots = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, c.ones16));
                let scales = ue4m3_halves_paired(w.d);
                _mm256_fmadd_ps(_mm256_mul_ps(dots, scales), p.d, acc)
            }
        }
    }

    /// Half the values of four UE4M3 scales, each in two adjacent lanes (`ue4m3_half_to_f32`:
    /// the low 7 bits as an f32's exponent and mantissa times `2^119`; `0x7f` is zero).
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline(always)]
    unsafe fn ue4m3_halves_paired(d: [u8; 4]) -> __m256 {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe {
            let x = _mm_cvtsi32_si128(i32::from_le_bytes(d));
            let x = _mm256_cvtepu8_epi32(_mm_unpacklo_epi8(x, x));
            let bits = _mm256_slli_epi32::<20>(_mm256_and_si256(x, _mm256_set1_epi32(0x7f)));
            let v = _mm256_mul_ps(
                _mm256_castsi256_ps(bits),
                _mm256_set1_ps(f32::from_bits(246 << 23)),
            );
            _mm256_andnot_ps(
                _mm256_castsi256_ps(_mm256_cmpeq_epi32(x, _mm256_set1_epi32(0x7f))),
                v,
            )
        }
    }
}

target_entries! { "avx2,fma,f16c";
    fn q1_0_prepared_gemv(w: &[BlockQ1_0], a: &[[BlockQ8_0; 4]], out: &mut [f32]) => prepared_gemv::gemv_body::<imp::Q1_0, { imp::Q1_0_PREP_BLOCKS }>;
    fn nvfp4_prepared_gemv(w: &[BlockNvfp4], a: &[[BlockQ8_0; 2]], out: &mut [f32]) => prepared_gemv::gemv_body::<imp::Nvfp4, { imp::NVFP4_PREP_BLOCKS }>;
}

/// Plain Q1_0 rows with AVX2: this GEMV, the one-quad row GEMM and the 8-row tiles
/// (`q8_0_tiles`).
pub(crate) fn q1_0_rows(token: Avx2) -> Kernels<BlockQ1_0, [BlockQ8_0; 4], [BlockQ8_0; 4]> {
    Kernels {
        gemv: q1_0_prepared_gemv,
        ..q8_0_tiles::q1_0_tiled_rows(token)
    }
}

/// Plain NVFP4 rows with AVX2: this GEMV, the one-quad row GEMM and the 8-row tiles
/// (`q8_0_tiles`).
pub(crate) fn nvfp4_rows(token: Avx2) -> Kernels<BlockNvfp4, [BlockQ8_0; 2], [BlockQ8_0; 2]> {
    Kernels {
        gemv: nvfp4_prepared_gemv,
        ..q8_0_tiles::nvfp4_tiled_rows(token)
    }
}

#[cfg(test)]
mod tests;
