//! AVX2 (+FMA+F16C) kernels of the plain layout for the FP4 types (MXFP4, NVFP4) and Q1_0 / Q2_0
//! against Q8_0, and the ternary types (TQ1_0, TQ2_0) against Q8_K.
//!
//! They are row blocks of `plain_rows` (`RowBlock`): the GEMV serves one activation row per
//! weight row, the GEMM decodes each weight block once for the four rows of a quad.
//!
//! # Exactness
//!
//! Every block's integer sums are exact and equal to those of the portable kernels
//! (`crate::vecdot::lowbit`); only the order of the `f32` scaling and accumulation differs. The
//! byte products stay clear of `maddubs` saturation:
//!
//! * the weights against Q8_0 are small signed bytes (FP4 values `|v| <= 12`, Q2_0's `q - 1` in
//!   -1..=2, Q1_0's ±1): `maddubs(|a|, sign(w, a))`, in which `|a|` read as unsigned is exact
//!   for `a = -128` and a pair is at most `2 * 128 * 12`;
//! * the ternary quants against Q8_K are multiplied unsigned (`q` in 0..=3, the weight `q - 1`),
//!   and the offset of 1 comes off with the activations' `bsums`.

use crate::blocks::{BlockMxfp4, BlockNvfp4, BlockQ1_0, BlockQ2_0, BlockQ8K, BlockQ8_0};
use crate::blocks::{BlockTq1_0, BlockTq2_0};

use super::plain_rows::block_rows;

pub(super) use imp::{half, mul_signed_pairs};

mod imp {
    use std::arch::x86_64::*;

    use super::super::plain_rows::{
        bit_mask32, crumbs, load16, load32, load_bsums, nibbles32, sub, RowBlock,
    };
    use super::super::plain_tiles::{DecodeK, DecodedK};
    use crate::blocks::{e8m0_half_to_f32, BlockMxfp4, BlockNvfp4, BlockQ1_0, BlockQ2_0};
    use crate::blocks::{BlockQ8K, BlockQ8_0, BlockTq1_0, BlockTq2_0, F16Bits};
    use crate::quant::grids::KVALUES_FP4;

    /// Products of signed bytes `w` (`|w| <= 127`) and `a` (any `i8`), summed over adjacent pairs
    /// into `i16` without saturation.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline(always)]
    pub(in crate::kernels::x86::avx2) unsafe fn mul_signed_pairs(
        w: __m256i,
        a: __m256i,
    ) -> __m256i {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe { _mm256_maddubs_epi16(_mm256_abs_epi8(a), _mm256_sign_epi8(w, a)) }
    }

    /// An f16 value as `f32`, in a vector register.
    ///
    /// # Safety
    /// The CPU must support F16C.
    #[inline(always)]
    pub(in crate::kernels::x86::avx2) unsafe fn half(x: F16Bits) -> __m128 {
        let bits = u16::from_le_bytes(x.0);
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe { _mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))) }
    }

    /// Adjacent `i16` pairs summed into `i32` lanes.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline(always)]
    unsafe fn pairs(p: __m256i) -> __m256i {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe { _mm256_madd_epi16(p, _mm256_set1_epi16(1)) }
    }

    /// The ternary quants `t` in 0..=3 (eight vectors of 32, in weight order) against a Q8_K
    /// block: `Σ (t - 1)·a = Σ t·a - Σ a`, the second sum from the `bsums`. The byte products
    /// are added as `i16` (each pair at most `2 * 3 * 128`, eight of them fit) and widened once.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline(always)]
    unsafe fn offset_dot(t: &[__m256i; 8], a: &BlockQ8K) -> __m256i {
        // SAFETY: register-only intrinsics of the caller's features; loads go through
        // fixed-size references.
        unsafe {
            let mut sum = _mm256_setzero_si256();
            for (j, &tj) in t.iter().enumerate() {
                let av = load32(sub::<i8, 32>(&a.qs, 32 * j));
                sum = _mm256_add_epi16(sum, _mm256_maddubs_epi16(tj, av));
            }
            _mm256_sub_epi32(pairs(sum), pairs(load_bsums(&a.bsums)))
        }
    }

    /// Adds `d_w·d_a·isum` for each row of a 256-weight ternary block.
    ///
    /// # Safety
    /// The CPU must support AVX2, FMA and F16C.
    #[inline(always)]
    unsafe fn ternary_rows<const N: usize>(
        t: &[__m256i; 8],
        d: F16Bits,
        a: [&BlockQ8K; N],
        acc: &mut [__m256; N],
    ) {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe {
            let dw = half(d);
            for r in 0..N {
                let isum = offset_dot(t, a[r]);
                let dr = _mm256_broadcastss_ps(_mm_mul_ss(dw, _mm_set_ss(a[r].d)));
                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), dr, acc[r]);
            }
        }
    }

    impl RowBlock for BlockTq2_0 {
        type Act = BlockQ8K;
        #[inline(always)]
        unsafe fn accumulate<const N: usize>(
            &self,
            a: [&BlockQ8K; N],
            acc: &mut [__m256; N],
            _: &mut [f32; N],
        ) {
            // SAFETY: the caller's features; `crumbs` reads `qs`.
            unsafe { ternary_rows(&crumbs(&self.qs), self.d, a, acc) }
        }
    }

    /// Three times each byte, modulo 256.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline(always)]
    unsafe fn times3(x: __m256i) -> __m256i {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe { _mm256_add_epi8(x, _mm256_add_epi8(x, x)) }
    }

    /// The top base-3 digit `(3 b) >> 8` of each byte `b` (a TQ1_0 byte times `3^n` modulo 256
    /// is a fixed-point fraction whose top digit is digit `n`): 1 from `b >= 86`, 2 from
    /// `b >= 171`, counted with two unsigned compares (`max(b, t) == b`).
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline(always)]
    unsafe fn top_trit(b: __m256i) -> __m256i {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe {
            // Each mask is -1 where it holds: the digit is minus their sum.
            let one = _mm256_cmpeq_epi8(_mm256_max_epu8(b, _mm256_set1_epi8(86)), b);
            let two = _mm256_cmpeq_epi8(_mm256_max_epu8(b, _mm256_set1_epi8(171u8 as i8)), b);
            _mm256_sub_epi8(_mm256_setzero_si256(), _mm256_add_epi8(one, two))
        }
    }

    /// The 256 trits of a TQ1_0 block (`0..=2`, the weight plus 1) as eight 32-byte vectors in
    /// weight order.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline(always)]
    unsafe fn tq1_0_trits(b: &BlockTq1_0) -> [__m256i; 8] {
        // SAFETY: register-only intrinsics of the caller's features; loads go through
        // fixed-size references.
        unsafe {
            // Digits 0..5 of `qs[..32]` are weights 0..160; digits n, n + 1 of
            // `qs[32..48]` (one per 128-bit lane) weights 160 + 16 n ..; digit 4 of those
            // and the four digits of `qh` (4 bytes each) the last 32. Byte `b` times `3^n`
            // is `b` tripled `n` times.
            let h0 = load32(sub::<u8, 32>(&b.qs, 0));
            let h1 = times3(h0);
            let h2 = times3(h1);
            let h3 = times3(h2);
            let h4 = times3(h3);
            let m0 = _mm256_set_m128i(_mm_setzero_si128(), load16(sub::<u8, 16>(&b.qs, 32)));
            let m0 = _mm256_inserti128_si256::<1>(m0, _mm256_castsi256_si128(times3(m0)));
            let m2 = times3(times3(m0));
            // [digit 4 of qs[32..48] | qh with digit n in dword n]: the low lane of
            // `m2` tripled twice, the high one `qh` times 1, 3, 9, 27 by dword.
            let q0 = _mm_set1_epi32(i32::from_le_bytes(b.qh));
            let q1 = _mm256_castsi256_si128(times3(_mm256_castsi128_si256(q0)));
            let q2 = _mm256_castsi256_si128(times3(_mm256_castsi128_si256(q1)));
            let q3 = _mm256_castsi256_si128(times3(_mm256_castsi128_si256(q2)));
            let qh = _mm_blend_epi32::<0b1100>(
                _mm_blend_epi32::<0b0010>(q0, q1),
                _mm_blend_epi32::<0b1000>(q2, q3),
            );
            let d4 = _mm256_castsi256_si128(times3(times3(m2)));
            let tail = _mm256_set_m128i(qh, d4);
            [
                top_trit(h0),
                top_trit(h1),
                top_trit(h2),
                top_trit(h3),
                top_trit(h4),
                top_trit(m0),
                top_trit(m2),
                top_trit(tail),
            ]
        }
    }

    impl RowBlock for BlockTq1_0 {
        type Act = BlockQ8K;
        #[inline(always)]
        unsafe fn accumulate<const N: usize>(
            &self,
            a: [&BlockQ8K; N],
            acc: &mut [__m256; N],
            _: &mut [f32; N],
        ) {
            // SAFETY: the caller's features.
            unsafe { ternary_rows(&tq1_0_trits(self), self.d, a, acc) }
        }
    }

    /// A ternary block as a per-call tile block (`plain_tiles`): the quants `t` (`0..=3`) as
    /// they are, scale 1 on every 16 weights and offset 1 (the weight is `t - 1`).
    ///
    /// # Safety
    /// The CPU must support AVX2 and F16C.
    #[inline(always)]
    unsafe fn ternary_tile(t: &[__m256i; 8], d: F16Bits, out: &mut DecodedK) {
        for (j, &v) in t.iter().enumerate() {
            let dst: &mut [u8; 32] = (&mut out.u[32 * j..32 * j + 32])
                .try_into()
                .expect("32 bytes");
            // SAFETY: `dst` is 32 bytes; `storeu` has no alignment requirement.
            unsafe { _mm256_storeu_si256(dst.as_mut_ptr().cast(), v) };
        }
        out.scales = [1; 16];
        out.offsets = [1; 16];
        out.d = d.to_f32();
        out.c = out.d;
    }

    impl DecodeK for BlockTq1_0 {
        #[inline(always)]
        unsafe fn decode(&self, out: &mut DecodedK) {
            // SAFETY: the caller's features.
            unsafe { ternary_tile(&tq1_0_trits(self), self.d, out) }
        }
    }

    impl DecodeK for BlockTq2_0 {
        #[inline(always)]
        unsafe fn decode(&self, out: &mut DecodedK) {
            // SAFETY: the caller's features; `crumbs` reads `qs`.
            unsafe { ternary_tile(&crumbs(&self.qs), self.d, out) }
        }
    }

    /// The f16 scales of a weight block's `K` (2 or 4) Q8_0 blocks in the lanes where
    /// `q8_0_group_rows` leaves each block's sums: `[d0, d1, d2, d3]` in both 128-bit halves
    /// for four blocks, `[d0, d0, d1, d1]` for two.
    ///
    /// # Safety
    /// The CPU must support AVX and F16C.
    #[inline(always)]
    unsafe fn act_scales<const K: usize>(a: &[BlockQ8_0; K]) -> __m256 {
        // Assembled in a register: bytes stored one by one and read back as a word stall the
        // load on store forwarding.
        let bits = a.iter().enumerate().fold(0u64, |bits, (k, b)| {
            bits | (u64::from(u16::from_le_bytes(b.d.0)) << (16 * k))
        });
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe {
            let v = _mm_cvtph_ps(_mm_cvtsi64_si128(bits as i64));
            let v = if K == 2 { _mm_unpacklo_ps(v, v) } else { v };
            _mm256_set_m128(v, v)
        }
    }

    /// The weight block's signed bytes (`K` vectors of 32, one per Q8_0 block) against the
    /// Q8_0 blocks of each row: per Q8_0 block the exact `Σ w·a` in `i32` lanes, folded with
    /// `hadd` so that each lane holds a partial sum of one block (the lanes of
    /// [`act_scales`]), then scaled lane by lane by the activation scales times `wscale` (the
    /// weights' factor of each lane) into `acc`.
    ///
    /// # Safety
    /// The CPU must support AVX2, FMA and F16C.
    #[inline(always)]
    unsafe fn q8_0_group_rows<const K: usize, const N: usize>(
        w: &[__m256i; K],
        wscale: __m256,
        a: [&[BlockQ8_0; K]; N],
        acc: &mut [__m256; N],
    ) {
        // SAFETY: register-only intrinsics of the caller's features; loads go through
        // fixed-size references.
        unsafe {
            for r in 0..N {
                let mut p = [_mm256_setzero_si256(); K];
                for k in 0..K {
                    p[k] = pairs(mul_signed_pairs(w[k], load32(&a[r][k].qs)));
                }
                let isum = if K == 4 {
                    let lo = _mm256_hadd_epi32(p[0], p[1]);
                    _mm256_hadd_epi32(lo, _mm256_hadd_epi32(p[2], p[3]))
                } else {
                    _mm256_hadd_epi32(p[0], p[1])
                };
                let scale = _mm256_mul_ps(act_scales(a[r]), wscale);
                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), scale, acc[r]);
            }
        }
    }

    impl RowBlock for BlockQ1_0 {
        type Act = [BlockQ8_0; 4];
        #[inline(always)]
        unsafe fn accumulate<const N: usize>(
            &self,
            a: [&[BlockQ8_0; 4]; N],
            acc: &mut [__m256; N],
            _: &mut [f32; N],
        ) {
            // SAFETY: register-only intrinsics of the caller's features.
            unsafe {
                // A set bit is +1, a clear one -1: `2 b - 1` from the bit's byte mask.
                let mut w = [_mm256_setzero_si256(); 4];
                for (k, wk) in w.iter_mut().enumerate() {
                    let bits = u32::from_le_bytes(*sub::<u8, 4>(&self.qs, 4 * k));
                    let two = _mm256_and_si256(bit_mask32(bits), _mm256_set1_epi8(2));
                    *wk = _mm256_sub_epi8(two, _mm256_set1_epi8(1));
                }
                let dw = _mm256_broadcastss_ps(half(self.d));
                q8_0_group_rows(&w, dw, a, acc)
            }
        }
    }

    /// The 32 two-bit quants of 8 bytes (weight `j` in bits `2 (j % 4)` of byte `j / 4`) as
    /// bytes in weight order.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline(always)]
    unsafe fn crumbs32(qs: &[u8; 8]) -> __m256i {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe {
            // 64-bit lane `l` takes bits 2l.. of every byte: lane l, byte i is weight 4i + l.
            let v = _mm256_set1_epi64x(i64::from_le_bytes(*qs));
            let q = _mm256_and_si256(
                _mm256_srlv_epi64(v, _mm256_setr_epi64x(0, 2, 4, 6)),
                _mm256_set1_epi8(3),
            );
            // Bytes 0..4 of every lane to the low 128 bits, 4..8 to the high ones, then the
            // 4x4 byte transpose within each half puts weight 4i + l at byte 4i + l.
            let halves = _mm256_permutevar8x32_epi32(q, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
            let transpose = _mm256_setr_epi8(
                0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15, //
                0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,
            );
            _mm256_shuffle_epi8(halves, transpose)
        }
    }

    impl RowBlock for BlockQ2_0 {
        type Act = [BlockQ8_0; 2];
        #[inline(always)]
        unsafe fn accumulate<const N: usize>(
            &self,
            a: [&[BlockQ8_0; 2]; N],
            acc: &mut [__m256; N],
            _: &mut [f32; N],
        ) {
            // SAFETY: register-only intrinsics of the caller's features.
            unsafe {
                let one = _mm256_set1_epi8(1);
                let w = [
                    _mm256_sub_epi8(crumbs32(sub::<u8, 8>(&self.qs, 0)), one),
                    _mm256_sub_epi8(crumbs32(sub::<u8, 8>(&self.qs, 8)), one),
                ];
                let dw = _mm256_broadcastss_ps(half(self.d));
                q8_0_group_rows(&w, dw, a, acc)
            }
        }
    }

    /// Half the values of four UE4M3 scales (as `ue4m3_half_to_f32`): the low 7 bits placed as
    /// an f32's exponent and mantissa (`2^(e-127)·(1 + m/8)`, or `m·2^-129` for `e = 0`) times
    /// `2^119` are exactly `(8 + m)·2^(e-11)` and `m·2^-10`; `0x7f` is zero.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline(always)]
    unsafe fn ue4m3_halves(d: [u8; 4]) -> __m128 {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe {
            let x = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(i32::from_le_bytes(d)));
            let bits = _mm_slli_epi32::<20>(_mm_and_si128(x, _mm_set1_epi32(0x7f)));
            let v = _mm_mul_ps(
                _mm_castsi128_ps(bits),
                _mm_set1_ps(f32::from_bits(246 << 23)),
            );
            _mm_andnot_ps(
                _mm_castsi128_ps(_mm_cmpeq_epi32(x, _mm_set1_epi32(0x7f))),
                v,
            )
        }
    }

    impl RowBlock for BlockNvfp4 {
        type Act = [BlockQ8_0; 2];
        #[inline(always)]
        unsafe fn accumulate<const N: usize>(
            &self,
            a: [&[BlockQ8_0; 2]; N],
            acc: &mut [__m256; N],
            _: &mut [f32; N],
        ) {
            // SAFETY: register-only intrinsics of the caller's features; loads go through
            // fixed-size references.
            unsafe {
                // Q8_0 block k meets scale groups 2k and 2k + 1 (16 weights each: the low
                // nibbles of 8 bytes, then their high nibbles).
                let lut = _mm256_broadcastsi128_si256(load16(&KVALUES_FP4));
                let m4 = _mm_set1_epi8(0x0f);
                let mut w = [_mm256_setzero_si256(); 2];
                for (k, wk) in w.iter_mut().enumerate() {
                    let x = load16(sub::<u8, 16>(&self.qs, 16 * k));
                    let lo = _mm_and_si128(x, m4);
                    let hi = _mm_and_si128(_mm_srli_epi16::<4>(x), m4);
                    let v =
                        _mm256_set_m128i(_mm_unpackhi_epi64(lo, hi), _mm_unpacklo_epi64(lo, hi));
                    *wk = _mm256_shuffle_epi8(lut, v);
                }
                // Group g's sums land in the lanes of block g / 2 and half g % 2:
                // [s0, s0, s2, s2 | s1, s1, s3, s3].
                let s = ue4m3_halves(self.d);
                let even = _mm_shuffle_ps::<0b10_10_00_00>(s, s);
                let odd = _mm_shuffle_ps::<0b11_11_01_01>(s, s);
                q8_0_group_rows(&w, _mm256_set_m128(odd, even), a, acc)
            }
        }
    }

    impl RowBlock for BlockMxfp4 {
        type Act = BlockQ8_0;
        #[inline(always)]
        unsafe fn accumulate<const N: usize>(
            &self,
            a: [&BlockQ8_0; N],
            acc: &mut [__m256; N],
            _: &mut [f32; N],
        ) {
            // SAFETY: register-only intrinsics of the caller's features; loads go through
            // fixed-size references.
            unsafe {
                let lut = _mm256_broadcastsi128_si256(load16(&KVALUES_FP4));
                let w = _mm256_shuffle_epi8(lut, nibbles32(&self.qs));
                let e = _mm_set_ss(e8m0_half_to_f32(self.e));
                let ones = _mm256_set1_epi16(1);
                for r in 0..N {
                    let ab = a[r];
                    let isum = _mm256_madd_epi16(mul_signed_pairs(w, load32(&ab.qs)), ones);
                    // `d_a·2^(e-128)`, as the portable kernel's factor (a power of two times
                    // an f16: exact unless it leaves the normal range).
                    let d = _mm256_broadcastss_ps(_mm_mul_ss(half(ab.d), e));
                    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), d, acc[r]);
                }
            }
        }
    }
}

block_rows! {
    BlockMxfp4, BlockQ8_0 => mxfp4_gemv, mxfp4_gemm, mxfp4_rows;
    BlockNvfp4, [BlockQ8_0; 2] => nvfp4_gemv, nvfp4_gemm, nvfp4_rows;
    BlockQ1_0, [BlockQ8_0; 4] => q1_0_gemv, q1_0_gemm, q1_0_rows;
    BlockQ2_0, [BlockQ8_0; 2] => q2_0_gemv, q2_0_gemm, q2_0_rows;
    BlockTq1_0, BlockQ8K => tq1_0_gemv, tq1_0_gemm, tq1_0_rows;
    BlockTq2_0, BlockQ8K => tq2_0_gemv, tq2_0_gemm, tq2_0_rows;
}

#[cfg(test)]
mod tests;
