//! AVX2 (+FMA+F16C) versions of the plain-path dot products of [`crate::vecdot`].
//!
//! Each constructor (`q4_0_q8_0`, ..., `f32`, and their `_rows` forms for the plain layout;
//! F16 and the costlier block types are in `plain_rows`) hands
//! out its kernel in exchange for an [`Avx2`] token; the kernels take the same arguments as their portable counterparts
//! and pair the rows block by block in the same way (extra blocks of the longer row are
//! ignored).
//!
//! # Exactness
//!
//! The integer part of every block is computed exactly, with the same value as the portable
//! kernel; only the order of the `f32` scaling and accumulation differs (lanes are accumulated
//! with FMA and summed horizontally once at the end). The byte products avoid the `i16`
//! saturation of `maddubs` as follows:
//!
//! * signed weights with `|w| <= 127` (Q5_0, IQ4_NL) against any signed activation byte:
//!   `maddubs(|a|, sign(w, a))`: `|a|` read as unsigned is exact even for `a = -128`, and a pair
//!   sums to at most `2 * 128 * 127 = 32512`;
//! * Q8_0 weights may be `-128` too, so both sides are widened to `i16` and multiplied with
//!   `madd` (no byte trick is exact for `-128 * -128` pairs);
//! * unsigned weights (Q4_K/Q5_K quants, the biased Q4_0 and Q6_K quants) use `maddubs(q, a)`
//!   directly (`2 * 63 * 128 = 16128` at most); Q4_0 and Q6_K then subtract `maddubs(8, a)`
//!   and `maddubs(32, a)` for their biases (an exact `i16` difference) rather than relying on
//!   the activation's `bsums`, so they match the portable kernels for any activation block;
//! * the Q4_K/Q5_K min term multiplies every `i16` group sum by its min in `madd`, exact for any
//!   `bsums`.
//!
//! F32 rows are multiplied and accumulated in `f32` FMA lanes (the portable kernels
//! accumulate in `f64`, so these differ by ordinary `f32` summation error).

use crate::blocks::BlockQ8_0;
use crate::blocks::{BlockIq4Nl, BlockQ4K, BlockQ4_0, BlockQ5K, BlockQ5_0, BlockQ6K, BlockQ8K};
use crate::cpu::KernelSet;
use crate::kernel_api::Kernels;
use crate::kernels::x86::Avx2;

/// A plain dot product of a weight row with an activation row.
type Dot<W, A> = fn(&[W], &[A]) -> f32;

mod imp {
    use std::arch::x86_64::*;

    use crate::blocks::{BlockIq4Nl, BlockQ4K, BlockQ4_0, BlockQ5K, BlockQ5_0, BlockQ6K};
    use crate::blocks::{BlockQ8K, BlockQ8_0, F16Bits, IQ4NL_LEVELS};

    // ---------------------------------------------------------------------------------------
    // Small helpers. They are `#[inline(always)]` and only called from the
    // `#[target_feature(enable = "avx2,fma,f16c")]` kernels below, into which they are inlined.
    // Every memory access goes through a reference to a fixed-size array, so the loads can never
    // read out of bounds.
    // ---------------------------------------------------------------------------------------

    /// `N` elements of `s` starting at `at` (the offsets are constants after inlining, so the
    /// bounds check folds away).
    #[inline(always)]
    fn sub<T, const N: usize>(s: &[T], at: usize) -> &[T; N] {
        s[at..at + N]
            .try_into()
            .expect("in-bounds fixed-size chunk")
    }

    /// Loads 16 bytes.
    ///
    /// # Safety
    /// The CPU must support SSE2 (every x86_64 CPU does).
    #[inline(always)]
    unsafe fn load16<T: bytemuck::Pod>(p: &[T; 16]) -> __m128i {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            assert_eq!(std::mem::size_of::<T>(), 1);
            // SAFETY: `p` is 16 one-byte elements; `loadu` has no alignment requirement.
            _mm_loadu_si128(p.as_ptr().cast())
        }
    }

    /// Loads 32 bytes.
    ///
    /// # Safety
    /// The CPU must support AVX.
    #[inline(always)]
    unsafe fn load32<T: bytemuck::Pod>(p: &[T; 32]) -> __m256i {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            assert_eq!(std::mem::size_of::<T>(), 1);
            // SAFETY: `p` is 32 one-byte elements; `loadu` has no alignment requirement.
            _mm256_loadu_si256(p.as_ptr().cast())
        }
    }

    /// Sum of the 4 lanes.
    ///
    /// # Safety
    /// The CPU must support SSE3.
    #[inline(always)]
    unsafe fn hsum128(v: __m128) -> f32 {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            let s = _mm_add_ps(v, _mm_movehl_ps(v, v));
            _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
        }
    }

    /// Sum of the 8 lanes.
    ///
    /// # Safety
    /// The CPU must support AVX.
    #[inline(always)]
    unsafe fn hsum256(v: __m256) -> f32 {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            hsum128(_mm_add_ps(
                _mm256_castps256_ps128(v),
                _mm256_extractf128_ps::<1>(v),
            ))
        }
    }

    /// Adjacent `i16` pairs summed into `i32` lanes (exact).
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline(always)]
    unsafe fn pairs_to_i32(p: __m256i) -> __m256i {
        // SAFETY: the enclosing unsafe fn's contract (the kernel set's CPU features, in-bounds
        // slices) is the callee's; register-only intrinsics need nothing more.
        unsafe { _mm256_madd_epi16(p, _mm256_set1_epi16(1)) }
    }

    /// Products of signed bytes `w` (`|w| <= 127`) and `a` (any `i8`, `-128` included), adjacent
    /// pairs summed to `i16` without saturation.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline(always)]
    unsafe fn mul_signed_pairs(w: __m256i, a: __m256i) -> __m256i {
        // SAFETY: the enclosing unsafe fn's contract (the kernel set's CPU features, in-bounds
        // slices) is the callee's; register-only intrinsics need nothing more.
        unsafe { _mm256_maddubs_epi16(_mm256_abs_epi8(a), _mm256_sign_epi8(w, a)) }
    }

    /// The 32 nibbles of a 16-byte run as bytes: low nibbles first, then high nibbles.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline(always)]
    unsafe fn nibbles32(qs: &[u8; 16]) -> __m256i {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            let x = load16(qs);
            let both = _mm256_set_m128i(_mm_srli_epi16::<4>(x), x);
            _mm256_and_si256(both, _mm256_set1_epi8(0x0f))
        }
    }

    /// Byte `i` is `0xff` when bit `i` of `bits` is set, else 0.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline(always)]
    unsafe fn bit_mask32(bits: u32) -> __m256i {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            let v = _mm256_set1_epi32(bits as i32);
            // Byte i takes source byte i / 8 (both 128-bit lanes of `v` hold all four bytes).
            let spread = _mm256_shuffle_epi8(
                v,
                _mm256_setr_epi8(
                    0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, //
                    2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
                ),
            );
            let select = _mm256_set1_epi64x(0x8040_2010_0804_0201_u64 as i64);
            _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select)
        }
    }

    /// `[dw0 * da0, dw1 * da1]` of two block pairs, each broadcast to 8 lanes (each product
    /// rounded once, like the portable kernels' `d_w * d_a`).
    ///
    /// # Safety
    /// The CPU must support AVX2 and F16C.
    #[inline(always)]
    unsafe fn scale_pair(w0: F16Bits, a0: F16Bits, w1: F16Bits, a1: F16Bits) -> (__m256, __m256) {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            let bits = u64::from_le_bytes([
                w0.0[0], w0.0[1], w1.0[0], w1.0[1], a0.0[0], a0.0[1], a1.0[0], a1.0[1],
            ]);
            let v = _mm_cvtph_ps(_mm_cvtsi64_si128(bits as i64)); // [w0, w1, a0, a1]
            let p = _mm_mul_ps(v, _mm_movehl_ps(v, v)); // [w0 a0, w1 a1, ..]
            (
                _mm256_broadcastss_ps(p),
                _mm256_broadcastss_ps(_mm_movehdup_ps(p)),
            )
        }
    }

    /// `dw * da` broadcast to 8 lanes.
    ///
    /// # Safety
    /// The CPU must support AVX2 and F16C.
    #[inline(always)]
    unsafe fn scale_one(w: F16Bits, a: F16Bits) -> __m256 {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            let bits = u32::from_le_bytes([w.0[0], w.0[1], a.0[0], a.0[1]]);
            let v = _mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)); // [w, a, 0, 0]
            _mm256_broadcastss_ps(_mm_mul_ss(v, _mm_movehdup_ps(v)))
        }
    }

    // ---------------------------------------------------------------------------------------
    // 32-weight blocks against Q8_0
    // ---------------------------------------------------------------------------------------

    /// A 32-weight block type paired with Q8_0 activations.
    pub(super) trait Block32: Sized {
        fn scale(&self) -> F16Bits;
        /// The block's exact integer dot product with `a`, spread over 8 `i32` lanes.
        ///
        /// # Safety
        /// The CPU must support AVX2.
        unsafe fn isum(&self, a: &BlockQ8_0) -> __m256i;
    }

    impl Block32 for BlockQ4_0 {
        #[inline(always)]
        fn scale(&self) -> F16Bits {
            self.d
        }
        #[inline(always)]
        unsafe fn isum(&self, a: &BlockQ8_0) -> __m256i {
            // SAFETY: callers meet this function's contract: the CPU has the features of the
            // kernel set that calls it, and the slices are as long as the body reads.
            unsafe {
                // Σ (q - 8)·a as Σ q·a - Σ 8·a, pair by pair (unsigned q <= 15: no saturation).
                let av = load32(&a.qs);
                let p = _mm256_maddubs_epi16(nibbles32(&self.qs), av);
                let bias = _mm256_maddubs_epi16(_mm256_set1_epi8(8), av);
                pairs_to_i32(_mm256_sub_epi16(p, bias))
            }
        }
    }

    impl Block32 for BlockQ5_0 {
        #[inline(always)]
        fn scale(&self) -> F16Bits {
            self.d
        }
        #[inline(always)]
        unsafe fn isum(&self, a: &BlockQ8_0) -> __m256i {
            // SAFETY: callers meet this function's contract: the CPU has the features of the
            // kernel set that calls it, and the slices are as long as the body reads.
            unsafe {
                // `nibble - 16` is `nibble | 0xf0` as a signed byte; with the fifth bit set the
                // weight is the nibble itself.
                let high = bit_mask32(u32::from_le_bytes(self.qh));
                let bias = _mm256_andnot_si256(high, _mm256_set1_epi8(0xf0_u8 as i8));
                let q = _mm256_or_si256(nibbles32(&self.qs), bias);
                pairs_to_i32(mul_signed_pairs(q, load32(&a.qs)))
            }
        }
    }

    impl Block32 for BlockQ8_0 {
        #[inline(always)]
        fn scale(&self) -> F16Bits {
            self.d
        }
        #[inline(always)]
        unsafe fn isum(&self, a: &BlockQ8_0) -> __m256i {
            // SAFETY: callers meet this function's contract: the CPU has the features of the
            // kernel set that calls it, and the slices are as long as the body reads.
            unsafe {
                let w0 = _mm256_cvtepi8_epi16(load16(sub::<i8, 16>(&self.qs, 0)));
                let w1 = _mm256_cvtepi8_epi16(load16(sub::<i8, 16>(&self.qs, 16)));
                let a0 = _mm256_cvtepi8_epi16(load16(sub::<i8, 16>(&a.qs, 0)));
                let a1 = _mm256_cvtepi8_epi16(load16(sub::<i8, 16>(&a.qs, 16)));
                _mm256_add_epi32(_mm256_madd_epi16(w0, a0), _mm256_madd_epi16(w1, a1))
            }
        }
    }

    impl Block32 for BlockIq4Nl {
        #[inline(always)]
        fn scale(&self) -> F16Bits {
            self.d
        }
        #[inline(always)]
        unsafe fn isum(&self, a: &BlockQ8_0) -> __m256i {
            // SAFETY: callers meet this function's contract: the CPU has the features of the
            // kernel set that calls it, and the slices are as long as the body reads.
            unsafe {
                let lut = _mm256_broadcastsi128_si256(load16(&IQ4NL_LEVELS));
                let q = _mm256_shuffle_epi8(lut, nibbles32(&self.qs));
                pairs_to_i32(mul_signed_pairs(q, load32(&a.qs)))
            }
        }
    }

    /// `Σ_blocks d_w·d_a·isum` over the common length, two blocks per step.
    ///
    /// # Safety
    /// The CPU must support AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dot32<W: Block32>(w: &[W], a: &[BlockQ8_0]) -> f32 {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            let n = w.len().min(a.len());
            let (w, a) = (&w[..n], &a[..n]);
            let mut acc0 = _mm256_setzero_ps();
            let mut acc1 = _mm256_setzero_ps();
            let mut wp = w.chunks_exact(2);
            let mut ap = a.chunks_exact(2);
            for (w2, a2) in (&mut wp).zip(&mut ap) {
                let (d0, d1) = scale_pair(w2[0].scale(), a2[0].d, w2[1].scale(), a2[1].d);
                let s0 = _mm256_cvtepi32_ps(w2[0].isum(&a2[0]));
                let s1 = _mm256_cvtepi32_ps(w2[1].isum(&a2[1]));
                acc0 = _mm256_fmadd_ps(s0, d0, acc0);
                acc1 = _mm256_fmadd_ps(s1, d1, acc1);
            }
            if let (Some(wb), Some(ab)) = (wp.remainder().first(), ap.remainder().first()) {
                let s = _mm256_cvtepi32_ps(wb.isum(ab));
                acc0 = _mm256_fmadd_ps(s, scale_one(wb.scale(), ab.d), acc0);
            }
            hsum256(_mm256_add_ps(acc0, acc1))
        }
    }

    // ---------------------------------------------------------------------------------------
    // 256-weight super-blocks against Q8_K
    // ---------------------------------------------------------------------------------------

    /// Broadcast of `i16` lane `j` (0..8) of a 128-bit lane, as a `pshufb` control.
    ///
    /// # Safety
    /// The CPU must support AVX.
    #[inline(always)]
    unsafe fn pick_i16(j: usize) -> __m256i {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            let lo = (2 * j) as i16;
            _mm256_set1_epi16(lo | ((lo + 1) << 8))
        }
    }

    /// `pshufb` control giving `i16` lane `j` in the low 128-bit lane and `j + 1` in the high.
    ///
    /// # Safety
    /// The CPU must support AVX.
    #[inline(always)]
    unsafe fn pick_i16_pair(j: usize) -> __m256i {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            let lo = (2 * j) as i16;
            let hi = lo + 2;
            _mm256_set_m128i(
                _mm_set1_epi16(hi | ((hi + 1) << 8)),
                _mm_set1_epi16(lo | ((lo + 1) << 8)),
            )
        }
    }

    /// The 8 scales and 8 mins of a Q4_K/Q5_K 12-byte field as 16-bit lanes.
    ///
    /// # Safety
    /// The CPU must support SSE4.1.
    #[inline(always)]
    unsafe fn k4_scales_mins(q: &[u8; 12]) -> (__m128i, __m128i) {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            let word = |i: usize| u32::from_le_bytes(*sub::<u8, 4>(q, 4 * i));
            let (s0, s1, s2) = (word(0), word(1), word(2));
            let low6 = 0x3f3f_3f3f;
            let top2 = |x: u32| ((x >> 6) & 0x0303_0303) << 4;
            let sc_lo = s0 & low6;
            let mn_lo = s1 & low6;
            let sc_hi = (s2 & 0x0f0f_0f0f) | top2(s0);
            let mn_hi = ((s2 >> 4) & 0x0f0f_0f0f) | top2(s1);
            let v = _mm_set_epi32(mn_hi as i32, mn_lo as i32, sc_hi as i32, sc_lo as i32);
            (
                _mm_cvtepu8_epi16(v),
                _mm_cvtepu8_epi16(_mm_srli_si128::<8>(v)),
            )
        }
    }

    /// `Σ_g bsums[g]·min[g / 2]` in 4 `i32` lanes (exact for any `bsums`).
    ///
    /// # Safety
    /// The CPU must support SSE2.
    #[inline(always)]
    unsafe fn k4_min_sums(bsums: &[i16; 16], mins: __m128i) -> __m128i {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            let b0 = _mm_loadu_si128(bsums.as_ptr().cast());
            // SAFETY: `bsums` has 16 `i16`, so elements 8..16 are the second 16 bytes.
            let b1 = _mm_loadu_si128(bsums.as_ptr().add(8).cast());
            _mm_add_epi32(
                _mm_madd_epi16(b0, _mm_unpacklo_epi16(mins, mins)),
                _mm_madd_epi16(b1, _mm_unpackhi_epi16(mins, mins)),
            )
        }
    }

    /// `[d·d_a, dmin·d_a, 0, 0]` for the adjacent f16 fields `d`, `dmin`.
    ///
    /// # Safety
    /// The CPU must support F16C.
    #[inline(always)]
    unsafe fn k4_scales_f32(d: F16Bits, dmin: F16Bits, da: f32) -> __m128 {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            let bits = u32::from_le_bytes([d.0[0], d.0[1], dmin.0[0], dmin.0[1]]);
            _mm_mul_ps(
                _mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)),
                _mm_set1_ps(da),
            )
        }
    }

    /// One Q4_K super-block, or a Q5_K one when the fifth bits `qh` are given: adds
    /// `d·d_a·Σ sc·Σ q·a` to `acc` and `dmin·d_a·Σ m·bsum` to `acc_min`.
    ///
    /// # Safety
    /// The CPU must support AVX2, FMA and F16C.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn k4_block(
        d: F16Bits,
        dmin: F16Bits,
        scales: &[u8; 12],
        qh: Option<&[u8; 32]>,
        qs: &[u8; 128],
        ab: &BlockQ8K,
        acc: &mut __m256,
        acc_min: &mut __m128,
    ) {
        // SAFETY: the enclosing unsafe fn's contract (the kernel set's CPU features, in-bounds
        // slices) is the callee's; register-only intrinsics need nothing more.
        unsafe {
            let dd = k4_scales_f32(d, dmin, ab.d);
            let (sc, mn) = k4_scales_mins(scales);
            let msum = k4_min_sums(&ab.bsums, mn);
            *acc_min = _mm_fmadd_ps(
                _mm_cvtepi32_ps(msum),
                _mm_shuffle_ps::<0x55>(dd, dd),
                *acc_min,
            );

            let sc = _mm256_broadcastsi128_si256(sc);
            let m4 = _mm256_set1_epi8(0x0f);
            let bit4 = _mm256_set1_epi8(0x10);
            let mut h = qh.map(|qh| load32(qh));
            let mut isum0 = _mm256_setzero_si256();
            let mut isum1 = _mm256_setzero_si256();
            for c in 0..4 {
                let x = load32(sub::<u8, 32>(qs, 32 * c));
                let mut lo = _mm256_and_si256(x, m4);
                let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(x), m4);
                if let Some(hb) = h.as_mut() {
                    // Bit 2c (then 2c + 1) of each qh byte, moved to bit 4. The 16-bit shifts move
                    // bits across bytes, but bit 0 of every byte stays that byte's own bit.
                    lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16::<4>(*hb), bit4));
                    *hb = _mm256_srli_epi16::<1>(*hb);
                    hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16::<4>(*hb), bit4));
                    *hb = _mm256_srli_epi16::<1>(*hb);
                }
                let plo = _mm256_maddubs_epi16(lo, load32(sub::<i8, 32>(&ab.qs, 64 * c)));
                let phi = _mm256_maddubs_epi16(hi, load32(sub::<i8, 32>(&ab.qs, 64 * c + 32)));
                let slo = _mm256_shuffle_epi8(sc, pick_i16(2 * c));
                let shi = _mm256_shuffle_epi8(sc, pick_i16(2 * c + 1));
                isum0 = _mm256_add_epi32(isum0, _mm256_madd_epi16(plo, slo));
                isum1 = _mm256_add_epi32(isum1, _mm256_madd_epi16(phi, shi));
            }
            let isum = _mm256_add_epi32(isum0, isum1);
            *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_broadcastss_ps(dd), *acc);
        }
    }

    /// Q4_K · Q8_K.
    ///
    /// # Safety
    /// The CPU must support AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn q4_k(w: &[BlockQ4K], a: &[BlockQ8K]) -> f32 {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            let mut acc = _mm256_setzero_ps();
            let mut acc_min = _mm_setzero_ps();
            for (wb, ab) in w.iter().zip(a) {
                k4_block(
                    wb.d,
                    wb.dmin,
                    &wb.scales,
                    None,
                    &wb.qs,
                    ab,
                    &mut acc,
                    &mut acc_min,
                );
            }
            hsum256(acc) - hsum128(acc_min)
        }
    }

    /// Q5_K · Q8_K.
    ///
    /// # Safety
    /// The CPU must support AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn q5_k(w: &[BlockQ5K], a: &[BlockQ8K]) -> f32 {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            let mut acc = _mm256_setzero_ps();
            let mut acc_min = _mm_setzero_ps();
            for (wb, ab) in w.iter().zip(a) {
                k4_block(
                    wb.d,
                    wb.dmin,
                    &wb.scales,
                    Some(&wb.qh),
                    &wb.qs,
                    ab,
                    &mut acc,
                    &mut acc_min,
                );
            }
            hsum256(acc) - hsum128(acc_min)
        }
    }

    /// Q6_K · Q8_K.
    ///
    /// # Safety
    /// The CPU must support AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn q6_k(w: &[BlockQ6K], a: &[BlockQ8K]) -> f32 {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            let m4 = _mm256_set1_epi8(0x0f);
            let m30 = _mm256_set1_epi8(0x30);
            let bias = _mm256_set1_epi8(32);
            let mut acc = _mm256_setzero_ps();
            for (wb, ab) in w.iter().zip(a) {
                let bits = u16::from_le_bytes(wb.d.0);
                let d = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32))) * ab.d;
                let sc16 = _mm256_cvtepi8_epi16(load16(&wb.scales));
                let mut isum0 = _mm256_setzero_si256();
                let mut isum1 = _mm256_setzero_si256();
                for half in 0..2 {
                    let sc = if half == 0 {
                        _mm256_permute2x128_si256::<0x00>(sc16, sc16)
                    } else {
                        _mm256_permute2x128_si256::<0x11>(sc16, sc16)
                    };
                    let l0 = load32(sub::<u8, 32>(&wb.ql, 64 * half));
                    let l1 = load32(sub::<u8, 32>(&wb.ql, 64 * half + 32));
                    let h = load32(sub::<u8, 32>(&wb.qh, 32 * half));
                    // Quarter s: low nibbles of l0, l1, then high nibbles of l0, l1; top bits from
                    // bits 2s..2s+2 of h, moved to bits 4..6.
                    let quarters = [
                        _mm256_or_si256(
                            _mm256_and_si256(l0, m4),
                            _mm256_and_si256(_mm256_slli_epi16::<4>(h), m30),
                        ),
                        _mm256_or_si256(
                            _mm256_and_si256(l1, m4),
                            _mm256_and_si256(_mm256_slli_epi16::<2>(h), m30),
                        ),
                        _mm256_or_si256(
                            _mm256_and_si256(_mm256_srli_epi16::<4>(l0), m4),
                            _mm256_and_si256(h, m30),
                        ),
                        _mm256_or_si256(
                            _mm256_and_si256(_mm256_srli_epi16::<4>(l1), m4),
                            _mm256_and_si256(_mm256_srli_epi16::<2>(h), m30),
                        ),
                    ];
                    for (s, u) in quarters.into_iter().enumerate() {
                        let av = load32(sub::<i8, 32>(&ab.qs, 128 * half + 32 * s));
                        let p = _mm256_sub_epi16(
                            _mm256_maddubs_epi16(u, av),
                            _mm256_maddubs_epi16(bias, av),
                        );
                        let scv = _mm256_shuffle_epi8(sc, pick_i16_pair(2 * s));
                        if s % 2 == 0 {
                            isum0 = _mm256_add_epi32(isum0, _mm256_madd_epi16(p, scv));
                        } else {
                            isum1 = _mm256_add_epi32(isum1, _mm256_madd_epi16(p, scv));
                        }
                    }
                }
                let isum = _mm256_add_epi32(isum0, isum1);
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(d), acc);
            }
            hsum256(acc)
        }
    }

    // ---------------------------------------------------------------------------------------
    // Float rows
    // ---------------------------------------------------------------------------------------

    /// F32 · F32 with four 8-lane FMA accumulators.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn f32_dot(w: &[f32], a: &[f32]) -> f32 {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            let n = w.len().min(a.len());
            let (w, a) = (&w[..n], &a[..n]);
            let mut acc = [_mm256_setzero_ps(); 4];
            let mut wc = w.chunks_exact(32);
            let mut ac = a.chunks_exact(32);
            for (w32, a32) in (&mut wc).zip(&mut ac) {
                for (k, acc_k) in acc.iter_mut().enumerate() {
                    // SAFETY: the chunks hold 32 floats, so 8 floats from 8k (k < 4) are in bounds.
                    let x = _mm256_loadu_ps(w32.as_ptr().add(8 * k));
                    let y = _mm256_loadu_ps(a32.as_ptr().add(8 * k));
                    *acc_k = _mm256_fmadd_ps(x, y, *acc_k);
                }
            }
            let (wr, ar) = (wc.remainder(), ac.remainder());
            let mut w8 = wr.chunks_exact(8);
            let mut a8 = ar.chunks_exact(8);
            for (x, y) in (&mut w8).zip(&mut a8) {
                // SAFETY: the chunks hold 8 floats.
                let (x, y) = (_mm256_loadu_ps(x.as_ptr()), _mm256_loadu_ps(y.as_ptr()));
                acc[0] = _mm256_fmadd_ps(x, y, acc[0]);
            }
            let total = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
            let tail: f32 = w8
                .remainder()
                .iter()
                .zip(a8.remainder())
                .map(|(x, y)| x * y)
                .sum();
            hsum256(total) + tail
        }
    }
}

// -------------------------------------------------------------------------------------------
// Safe wrappers, only reachable through the selectors below.
// -------------------------------------------------------------------------------------------

macro_rules! safe_wrappers {
    ($($name:ident, $gemv:ident, $gemm:ident ($w:ty, $a:ty) => $call:expr;)*) => {$(
        fn $name(w: &[$w], a: &[$a]) -> f32 {
            // SAFETY: this function is only handed out by its constructor, in exchange for an
            // `Avx2` token.
            unsafe { $call(w, a) }
        }
        /// One output per weight row in `w` (`a.len()` blocks each).
        fn $gemv(w: &[$w], a: &[$a], out: &mut [f32]) {
            for (o, row) in out.iter_mut().zip(w.chunks_exact(a.len().max(1))) {
                *o = $name(row, a);
            }
        }
        /// Four activation rows stored one after the other.
        fn $gemm(w: &[$w], a: &[$a], out: &mut [f32]) {
            for (o, row) in out.iter_mut().zip(a.chunks_exact(w.len().max(1))) {
                *o = $name(w, row);
            }
        }
    )*};
}

safe_wrappers! {
    q4_0_q8_0_avx2, q4_0_gemv, q4_0_gemm (BlockQ4_0, BlockQ8_0) => imp::dot32::<BlockQ4_0>;
    q5_0_q8_0_avx2, q5_0_gemv, q5_0_gemm (BlockQ5_0, BlockQ8_0) => imp::dot32::<BlockQ5_0>;
    q8_0_q8_0_avx2, q8_0_gemv, q8_0_gemm (BlockQ8_0, BlockQ8_0) => imp::dot32::<BlockQ8_0>;
    iq4_nl_q8_0_avx2, iq4_nl_gemv, iq4_nl_gemm (BlockIq4Nl, BlockQ8_0) => imp::dot32::<BlockIq4Nl>;
    q4_k_q8_k_avx2, q4_k_gemv, q4_k_gemm (BlockQ4K, BlockQ8K) => imp::q4_k;
    q5_k_q8_k_avx2, q5_k_gemv, q5_k_gemm (BlockQ5K, BlockQ8K) => imp::q5_k;
    q6_k_q8_k_avx2, q6_k_gemv, q6_k_gemm (BlockQ6K, BlockQ8K) => imp::q6_k;
    f32_avx2, f32_gemv, f32_gemm (f32, f32) => imp::f32_dot;
}

macro_rules! constructors {
    ($($(#[$m:meta])* $name:ident, $rows:ident ($w:ty, $a:ty) => $kernel:ident, $gemv:ident, $gemm:ident;)*) => {$(
        $(#[$m])*
        #[allow(dead_code)] // the plain layout uses the `_rows` form; tests use this one
        pub(crate) fn $name(_: Avx2) -> Dot<$w, $a> {
            $kernel
        }
        /// The same kernel as the plain layout's GEMV/GEMM pair (`gemv` writes one output per
        /// weight row, `gemm` one per activation row, the rows back to back).
        pub(crate) fn $rows(_: Avx2) -> Kernels<$w, $a, $a> {
            Kernels::pair(KernelSet::Avx2, $gemv, $gemm)
        }
    )*};
}

constructors! {
    /// AVX2 Q4_0 · Q8_0.
    q4_0_q8_0, q4_0_q8_0_rows (BlockQ4_0, BlockQ8_0) => q4_0_q8_0_avx2, q4_0_gemv, q4_0_gemm;
    /// AVX2 Q5_0 · Q8_0.
    q5_0_q8_0, q5_0_q8_0_rows (BlockQ5_0, BlockQ8_0) => q5_0_q8_0_avx2, q5_0_gemv, q5_0_gemm;
    /// AVX2 Q8_0 · Q8_0.
    q8_0_q8_0, q8_0_q8_0_rows (BlockQ8_0, BlockQ8_0) => q8_0_q8_0_avx2, q8_0_gemv, q8_0_gemm;
    /// AVX2 IQ4_NL · Q8_0.
    iq4_nl_q8_0, iq4_nl_q8_0_rows (BlockIq4Nl, BlockQ8_0) => iq4_nl_q8_0_avx2, iq4_nl_gemv, iq4_nl_gemm;
    /// AVX2 Q4_K · Q8_K.
    q4_k_q8_k, q4_k_q8_k_rows (BlockQ4K, BlockQ8K) => q4_k_q8_k_avx2, q4_k_gemv, q4_k_gemm;
    /// AVX2 Q5_K · Q8_K.
    q5_k_q8_k, q5_k_q8_k_rows (BlockQ5K, BlockQ8K) => q5_k_q8_k_avx2, q5_k_gemv, q5_k_gemm;
    /// AVX2 Q6_K · Q8_K.
    q6_k_q8_k, q6_k_q8_k_rows (BlockQ6K, BlockQ8K) => q6_k_q8_k_avx2, q6_k_gemv, q6_k_gemm;
    /// AVX2 F32 · F32 (f32 accumulation).
    f32, f32_rows (f32, f32) => f32_avx2, f32_gemv, f32_gemm;
}

#[cfg(test)]
mod tests;
