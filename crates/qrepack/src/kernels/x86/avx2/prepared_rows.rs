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
//! * **TQ1_0**: digit `n` of a byte `b` is `t_n = ⌊3 h_n / 256⌋` for `h_n = 3^n b mod 256`,
//!   which is `F_{n+1} - 3 F_n` for `F_m = ⌊3^m b / 256⌋` (with `3^n b = 256 F_n + h_n`). So a
//!   byte's digits against activations `a_n` sum to `Σ_m F_m (a_{m-1} - 3 a_m)` (`F_0 = 0`,
//!   `a` past the last digit 0): the factors `a_{m-1} - 3 a_m` are prepared once per call as
//!   `i16`, and each `F_m` is one `vpmulhuw` of the zero-extended bytes by `3^m · 256`
//!   (`3^5 · 256 < 2^16`). Two multiplies per 16 weights and digit, against ten instructions
//!   per 32 digits to extract them one by one (ggml's vec_dot and the row GEMV here).
//!
//! Against the row GEMVs (`lowbit`), which redo the activation work for every row, this
//! takes NVFP4 from 1.04x to 0.67x ggml's time at batch 1, Q1_0 from 1.47x to 0.71-0.79x and
//! TQ1_0 from 1.27x to 0.89-0.92x (weights from DRAM; the select table has the figures).
//!
//! # Exactness
//!
//! `|a|` read as unsigned is exact for `a = -128`, and the pair sums stay far from `i16`
//! saturation (Q1_0 `2·128`, NVFP4 two products of `|w| <= 12` per pair and two pairs added:
//! `4·12·128`). The integer sums of each Q8_0 block or 16-weight group are exact; only the
//! order of the `f32` products and sums differs from the portable kernels.

use crate::blocks::{BlockNvfp4, BlockQ1_0, BlockQ8K, BlockQ8_0, BlockTq1_0};
use crate::kernel_api::{target_entries, Kernels};
use crate::kernels::x86::avx2::{q8_0_tiles, ternary_tiles};
use crate::kernels::x86::{prepared_gemv, Avx2};

mod imp {
    use std::arch::x86_64::*;

    use crate::blocks::{BlockNvfp4, BlockQ1_0, BlockQ8K, BlockQ8_0, BlockTq1_0};
    use crate::kernels::x86::avx2::lowbit::half;
    use crate::kernels::x86::avx2::plain_rows::{load16, load32, sub};
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

    /// TQ1_0 blocks (256 columns) prepared at a time: 4096 columns, 9 KiB of stack.
    pub(super) const TQ1_0_PREP_BLOCKS: usize = 16;

    /// A Q8_K block as the factors `a_{m-1} - 3 a_m` of the TQ1_0 digits (module docs), `i16`
    /// in the lanes of the zero-extended weight bytes: `qs[..16]` and `qs[16..32]` for `m` 1 to
    /// 5, `qs[32..]` for `m` 1 to 5, and `qh` (four bytes in each of four lane groups, group
    /// `m - 1`); `-Σ a` (the weights are the digits less 1) in lane 0, and the scale.
    #[derive(Clone, Copy)]
    pub(super) struct Tq1_0Prep {
        head: [[__m256i; 5]; 2],
        mid: [__m256i; 5],
        tail: __m256i,
        neg_sum: __m256i,
        d: f32,
    }

    /// The multipliers `3^m · 256` of `vpmulhuw`, and `qh`'s lane groups' ones.
    #[derive(Clone, Copy)]
    pub(super) struct Tq1_0Consts {
        pow3: [__m256i; 5],
        tail_pow3: __m256i,
    }

    /// The TQ1_0 GEMV's blocks.
    pub(super) struct Tq1_0;

    /// `a_{m-1} - 3 a_m` for the digits of one byte run: `a(n)` is digit `n`'s activation
    /// (`n < digits`), `m` from 1.
    fn digit_factor(a: impl Fn(usize) -> i8, m: usize, digits: usize) -> i16 {
        let next = if m < digits { i16::from(a(m)) } else { 0 };
        i16::from(a(m - 1)) - 3 * next
    }

    impl PreparedGemv for Tq1_0 {
        type Weight = BlockTq1_0;
        type Act = BlockQ8K;
        type Acc = __m256;
        type Prep = Tq1_0Prep;
        type Consts = Tq1_0Consts;
        nothing_ahead!();

        #[inline(always)]
        unsafe fn empty() -> Tq1_0Prep {
            // SAFETY: register-only intrinsics of the caller's features.
            let zero = unsafe { _mm256_setzero_si256() };
            Tq1_0Prep {
                head: [[zero; 5]; 2],
                mid: [zero; 5],
                tail: zero,
                neg_sum: zero,
                d: 0.0,
            }
        }

        #[inline(always)]
        unsafe fn consts() -> Tq1_0Consts {
            // SAFETY: register-only intrinsics of the caller's features.
            unsafe {
                let pow3 = [3, 9, 27, 81, 243].map(|p: i32| _mm256_set1_epi16((p * 256) as i16));
                let tail_pow3 = _mm256_setr_epi16(
                    3 * 256,
                    3 * 256,
                    3 * 256,
                    3 * 256,
                    9 * 256,
                    9 * 256,
                    9 * 256,
                    9 * 256,
                    27 * 256,
                    27 * 256,
                    27 * 256,
                    27 * 256,
                    (81 * 256) as i16,
                    (81 * 256) as i16,
                    (81 * 256) as i16,
                    (81 * 256) as i16,
                );
                Tq1_0Consts { pow3, tail_pow3 }
            }
        }

        #[inline(always)]
        unsafe fn prepare(a: &BlockQ8K) -> Tq1_0Prep {
            let q = &a.qs;
            let load = |f: [i16; 16]| {
                // SAFETY: the caller's features; the load reads the 32 bytes of `f`.
                unsafe { _mm256_loadu_si256(f.as_ptr().cast()) }
            };
            // Digit n of qs[j] (j < 32) is weight 32 n + j; of qs[32 + j] 160 + 16 n + j; of
            // qh[j] 240 + 4 n + j.
            let head = [0, 16].map(|h| {
                std::array::from_fn(|k| {
                    load(std::array::from_fn(|i| {
                        digit_factor(|n| q[32 * n + h + i], k + 1, 5)
                    }))
                })
            });
            let mid = std::array::from_fn(|k| {
                load(std::array::from_fn(|i| {
                    digit_factor(|n| q[160 + 16 * n + i], k + 1, 5)
                }))
            });
            let tail = load(std::array::from_fn(|lane| {
                digit_factor(|n| q[240 + 4 * n + lane % 4], lane / 4 + 1, 4)
            }));
            let sum: i32 = q.iter().map(|&v| i32::from(v)).sum();
            // SAFETY: register-only intrinsics of the caller's features.
            let neg_sum = unsafe { _mm256_setr_epi32(-sum, 0, 0, 0, 0, 0, 0, 0) };
            Tq1_0Prep {
                head,
                mid,
                tail,
                neg_sum,
                d: a.d,
            }
        }

        #[inline(always)]
        unsafe fn block(
            w: &BlockTq1_0,
            _: &(),
            p: &Tq1_0Prep,
            c: Tq1_0Consts,
            acc: __m256,
        ) -> __m256 {
            // SAFETY: register-only intrinsics of the caller's features; the loads read 16
            // bytes of `qs` each.
            unsafe {
                let mut isum = p.neg_sum;
                // `vpmulhuw` for every `F_m`, though it shares a pipe with `vpmaddwd` on Zen 3:
                // tripling in 16 bits (two adds and a shift per `F_m`) for some or all of them
                // measured 3-15 % slower.
                let mut run = |bytes: __m256i, factors: &[__m256i; 5]| {
                    for (&pow3, &f) in c.pow3.iter().zip(factors) {
                        let floor = _mm256_mulhi_epu16(bytes, pow3);
                        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(floor, f));
                    }
                };
                run(
                    _mm256_cvtepu8_epi16(load16(sub::<u8, 16>(&w.qs, 0))),
                    &p.head[0],
                );
                run(
                    _mm256_cvtepu8_epi16(load16(sub::<u8, 16>(&w.qs, 16))),
                    &p.head[1],
                );
                run(
                    _mm256_cvtepu8_epi16(load16(sub::<u8, 16>(&w.qs, 32))),
                    &p.mid,
                );
                let qh = _mm256_cvtepu8_epi16(_mm_set1_epi32(i32::from_le_bytes(w.qh)));
                let floor = _mm256_mulhi_epu16(qh, c.tail_pow3);
                isum = _mm256_add_epi32(isum, _mm256_madd_epi16(floor, p.tail));
                // The lanes are not partial sums of the products (a byte's terms `F_m (a_{m-1}
                // - 3 a_m)` are spread over lanes and larger than its products): summed as
                // integers, the block's exact sum is rounded once.
                let s = _mm_add_epi32(
                    _mm256_castsi256_si128(isum),
                    _mm256_extracti128_si256::<1>(isum),
                );
                let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
                let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01>(s));
                let d = _mm_mul_ss(half(w.d), _mm_set_ss(p.d));
                let v = _mm_mul_ss(_mm_cvtepi32_ps(s), d);
                let v = _mm_move_ss(_mm_setzero_ps(), v);
                _mm256_add_ps(acc, _mm256_zextps128_ps256(v))
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
    fn tq1_0_prepared_gemv(w: &[BlockTq1_0], a: &[BlockQ8K], out: &mut [f32]) => prepared_gemv::gemv_body::<imp::Tq1_0, { imp::TQ1_0_PREP_BLOCKS }>;
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

/// Plain TQ1_0 rows with AVX2: this GEMV, the one-quad row GEMM and the 8-row tiles
/// (`ternary_tiles`).
pub(crate) fn tq1_0_rows(token: Avx2) -> Kernels<BlockTq1_0, BlockQ8K, BlockQ8K> {
    Kernels {
        gemv: tq1_0_prepared_gemv,
        ..ternary_tiles::tq1_0_tiled_rows(token)
    }
}

#[cfg(test)]
mod tests;
