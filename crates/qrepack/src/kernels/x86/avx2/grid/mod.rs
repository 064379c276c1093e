//! AVX2 (+FMA+F16C) kernels of the plain layout for the grid types (IQ2_XXS, IQ2_XS, IQ2_S,
//! IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) against Q8_K.
//!
//! They are row blocks of `plain_rows` (`RowBlock`): the GEMV serves one activation row per
//! weight row, the GEMM decodes each weight block once for the four rows of a quad. A block is
//! walked group by group (32 weights): the group's grid points are read from their tables into
//! one vector, signed, and multiplied with each activation row before the next group is
//! decoded, so that only one decoded group and one integer accumulator per row are live.
//!
//! # Exactness
//!
//! Every block's integer sum is exact and equal to that of the portable kernels
//! (`crate::vecdot::grid`); only the order of the `f32` scaling and accumulation differs, and a
//! type's constant factor (1/8, 1/4) is taken into the block's scale (a power of two: exact).
//!
//! * IQ2 and IQ3 weights are signed grid values (`|w| <= 62`): `maddubs(|a|, sign(w, a))`, in
//!   which `|a|` read as unsigned is exact for `a = -128` (applying the grid signs to the
//!   activations instead would turn `-(-128)` into `-128`). A pair is at most `2 * 128 * 62`, a
//!   block's lane sum at most `8 * 2 * 15872 * 31 < 2^24`, so its conversion to `f32` is exact.
//! * IQ1 weights are `ls·(q + δ/8)` with `q` in {-1, 0, 1} and `δ = ±1`; eight times that is
//!   the integer `ls·(8 q + δ)`, which the kernels take as the unsigned byte `u = 8 q + δ + 9`
//!   (`0..=18`) times the scale, less `9·ls` times the activation sums (Q8_K's `bsums`, 16
//!   weights each). The block's scale carries the 1/8.

use crate::blocks::{BlockIq1M, BlockIq1S, BlockIq2S, BlockIq2Xs, BlockIq2Xxs, BlockIq3S};
use crate::blocks::{BlockIq3Xxs, BlockQ8K};

use super::plain_rows::block_rows;

mod imp {
    use std::arch::x86_64::*;

    use super::super::lowbit::{half, mul_signed_pairs};
    use super::super::plain_rows::{bit_mask32, load32, load_bsums, sub, RowBlock};
    use crate::blocks::{
        BlockIq1M, BlockIq1S, BlockIq2S, BlockIq2Xs, BlockIq2Xxs, BlockIq3S, BlockIq3Xxs, BlockQ8K,
    };
    use crate::quant::grid::iq1_m_scale;
    use crate::quant::grids::{
        IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS,
    };

    /// The odd scale `2 s + 1` of a 3- or 4-bit scale field.
    #[inline(always)]
    fn odd(s: u8) -> i16 {
        2 * i16::from(s) + 1
    }

    #[inline(always)]
    fn le_u16(b: &[u8], i: usize) -> u16 {
        u16::from_le_bytes(*sub::<u8, 2>(b, 2 * i))
    }

    #[inline(always)]
    fn le_u32(b: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(*sub::<u8, 4>(b, at))
    }

    /// The 32 sign bits of four 7-bit sign codes (bits `7l..7l+7` of `aux`), through the table
    /// that adds each code's parity bit.
    #[inline(always)]
    fn sign_codes(aux: u32) -> u32 {
        (0..4).fold(0, |bits, l| {
            let code = ((aux >> (7 * l)) & 127) as usize;
            bits | (u32::from(KSIGNS_IQ2XS[code]) << (8 * l))
        })
    }

    /// Four 8-byte grid points as one vector, point `l` in bytes `8l..8l+8`.
    ///
    /// # Safety
    /// The CPU must support AVX.
    #[inline(always)]
    unsafe fn points64(p: [u64; 4]) -> __m256i {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe { _mm256_set_epi64x(p[3] as i64, p[2] as i64, p[1] as i64, p[0] as i64) }
    }

    /// Eight 4-byte grid points as one vector, point `k` in bytes `4k..4k+4`.
    ///
    /// # Safety
    /// The CPU must support AVX.
    #[inline(always)]
    unsafe fn points32(p: [u32; 8]) -> __m256i {
        let p = p.map(|v| v as i32);
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe { _mm256_setr_epi32(p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]) }
    }

    /// Grid magnitudes with bit `i` of `signs` negating byte `i`.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline(always)]
    unsafe fn signed(grid: __m256i, signs: u32) -> __m256i {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe {
            let m = bit_mask32(signs);
            _mm256_sub_epi8(_mm256_xor_si256(grid, m), m)
        }
    }

    /// The `madd` operand of a group with one scale per 16 weights: `s0` in the low 128-bit
    /// lane (weights 0..16), `s1` in the high one.
    ///
    /// # Safety
    /// The CPU must support AVX.
    #[inline(always)]
    unsafe fn scale_halves(s0: i16, s1: i16) -> __m256i {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe { _mm256_set_m128i(_mm_set1_epi16(s1), _mm_set1_epi16(s0)) }
    }

    /// One block of signed grid groups: adds `d·d_a·Σ_g Σ sc·w·a` to `acc[r]`, where
    /// `group(g)` gives group `g`'s signed weights and its `i16` scales (`madd` operand) and
    /// `d` holds the weight scale (times the type's factor) in lane 0.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[inline(always)]
    unsafe fn signed_groups<const N: usize>(
        a: [&BlockQ8K; N],
        acc: &mut [__m256; N],
        d: __m128,
        group: impl Fn(usize) -> (__m256i, __m256i),
    ) {
        // SAFETY: register-only intrinsics of the caller's features; loads go through
        // fixed-size references.
        unsafe {
            let mut isum = [_mm256_setzero_si256(); N];
            for g in 0..8 {
                let (w, sc) = group(g);
                for r in 0..N {
                    let av = load32(sub::<i8, 32>(&a[r].qs, 32 * g));
                    let p = _mm256_madd_epi16(mul_signed_pairs(w, av), sc);
                    isum[r] = _mm256_add_epi32(isum[r], p);
                }
            }
            for r in 0..N {
                let dr = _mm256_broadcastss_ps(_mm_mul_ss(d, _mm_set_ss(a[r].d)));
                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), dr, acc[r]);
            }
        }
    }

    /// One block of IQ1 groups: adds `d·d_a·(Σ_g Σ sc·u·a + Σ_h coef_h·bsum_h)` to `acc[r]`,
    /// where `group(g)` gives group `g`'s unsigned bytes `u` and `i16` scales, and `coef` the
    /// `i16` factor of each 16-weight activation sum.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[inline(always)]
    unsafe fn shifted_groups<const N: usize>(
        a: [&BlockQ8K; N],
        acc: &mut [__m256; N],
        d: __m128,
        coef: __m256i,
        group: impl Fn(usize) -> (__m256i, __m256i),
    ) {
        // SAFETY: register-only intrinsics of the caller's features; loads go through
        // fixed-size references.
        unsafe {
            let mut isum = [_mm256_setzero_si256(); N];
            for r in 0..N {
                isum[r] = _mm256_madd_epi16(load_bsums(&a[r].bsums), coef);
            }
            for g in 0..8 {
                let (u, sc) = group(g);
                for r in 0..N {
                    let av = load32(sub::<i8, 32>(&a[r].qs, 32 * g));
                    let p = _mm256_madd_epi16(_mm256_maddubs_epi16(u, av), sc);
                    isum[r] = _mm256_add_epi32(isum[r], p);
                }
            }
            for r in 0..N {
                let dr = _mm256_broadcastss_ps(_mm_mul_ss(d, _mm_set_ss(a[r].d)));
                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), dr, acc[r]);
            }
        }
    }

    /// `d` times the type's constant factor (a power of two), in lane 0.
    ///
    /// # Safety
    /// The CPU must support F16C.
    #[inline(always)]
    unsafe fn block_scale(d: crate::blocks::F16Bits, factor: f32) -> __m128 {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe { _mm_mul_ss(half(d), _mm_set_ss(factor)) }
    }

    impl RowBlock for BlockIq2Xxs {
        type Act = BlockQ8K;
        #[inline(always)]
        unsafe fn accumulate<const N: usize>(
            &self,
            a: [&BlockQ8K; N],
            acc: &mut [__m256; N],
            _: &mut [f32; N],
        ) {
            // SAFETY: register-only intrinsics of the caller's features; loads go through
            // fixed-size references.
            unsafe {
                signed_groups(a, acc, block_scale(self.d, 0.125), |g| {
                    let idx = sub::<u8, 4>(&self.qs, 8 * g);
                    let aux = le_u32(&self.qs, 8 * g + 4);
                    let grid = points64(idx.map(|i| IQ2XXS_GRID[usize::from(i)]));
                    let sc = _mm256_set1_epi16(odd((aux >> 28) as u8));
                    (signed(grid, sign_codes(aux)), sc)
                })
            }
        }
    }

    impl RowBlock for BlockIq2Xs {
        type Act = BlockQ8K;
        #[inline(always)]
        unsafe fn accumulate<const N: usize>(
            &self,
            a: [&BlockQ8K; N],
            acc: &mut [__m256; N],
            _: &mut [f32; N],
        ) {
            // SAFETY: register-only intrinsics of the caller's features; loads go through
            // fixed-size references.
            unsafe {
                signed_groups(a, acc, block_scale(self.d, 0.125), |g| {
                    // Each 16-bit entry: a 9-bit grid index and a 7-bit sign code.
                    let v: [u16; 4] = std::array::from_fn(|l| le_u16(&self.qs, 4 * g + l));
                    let grid = points64(v.map(|v| IQ2XS_GRID[usize::from(v & 511)]));
                    let codes = v
                        .iter()
                        .enumerate()
                        .fold(0u32, |c, (l, &v)| c | (u32::from(v >> 9) << (7 * l)));
                    let s = self.scales[g];
                    let sc = scale_halves(odd(s & 0x0f), odd(s >> 4));
                    (signed(grid, sign_codes(codes)), sc)
                })
            }
        }
    }

    impl RowBlock for BlockIq2S {
        type Act = BlockQ8K;
        #[inline(always)]
        unsafe fn accumulate<const N: usize>(
            &self,
            a: [&BlockQ8K; N],
            acc: &mut [__m256; N],
            _: &mut [f32; N],
        ) {
            // SAFETY: register-only intrinsics of the caller's features; loads go through
            // fixed-size references.
            unsafe {
                signed_groups(a, acc, block_scale(self.d, 0.125), |g| {
                    // Low 8 index bits in `qs[..32]`, the top 2 of point `l` in bits 2l, 2l + 1
                    // of `qh[g]`; the 8 sign bits of each point stored in `qs[32..]`.
                    let low = sub::<u8, 4>(&self.qs, 4 * g);
                    let qh = usize::from(self.qh[g]);
                    let index = |l: usize| usize::from(low[l]) | (((qh >> (2 * l)) & 3) << 8);
                    let grid = points64(std::array::from_fn(|l| IQ2S_GRID[index(l)]));
                    let signs = le_u32(&self.qs, 32 + 4 * g);
                    let s = self.scales[g];
                    let sc = scale_halves(odd(s & 0x0f), odd(s >> 4));
                    (signed(grid, signs), sc)
                })
            }
        }
    }

    impl RowBlock for BlockIq3Xxs {
        type Act = BlockQ8K;
        #[inline(always)]
        unsafe fn accumulate<const N: usize>(
            &self,
            a: [&BlockQ8K; N],
            acc: &mut [__m256; N],
            _: &mut [f32; N],
        ) {
            // SAFETY: register-only intrinsics of the caller's features; loads go through
            // fixed-size references.
            unsafe {
                signed_groups(a, acc, block_scale(self.d, 0.25), |g| {
                    let idx = sub::<u8, 8>(&self.qs, 8 * g);
                    let aux = le_u32(&self.qs, 64 + 4 * g);
                    let grid = points32(idx.map(|i| IQ3XXS_GRID[usize::from(i)]));
                    let sc = _mm256_set1_epi16(odd((aux >> 28) as u8));
                    (signed(grid, sign_codes(aux)), sc)
                })
            }
        }
    }

    impl RowBlock for BlockIq3S {
        type Act = BlockQ8K;
        #[inline(always)]
        unsafe fn accumulate<const N: usize>(
            &self,
            a: [&BlockQ8K; N],
            acc: &mut [__m256; N],
            _: &mut [f32; N],
        ) {
            // SAFETY: register-only intrinsics of the caller's features; loads go through
            // fixed-size references.
            unsafe {
                signed_groups(a, acc, block_scale(self.d, 1.0), |g| {
                    // Point `k`'s 9th index bit is bit `k` of `qh[g]`.
                    let idx = sub::<u8, 8>(&self.qs, 8 * g);
                    let qh = usize::from(self.qh[g]);
                    let index = |k: usize| usize::from(idx[k]) | (((qh >> k) & 1) << 8);
                    let grid = points32(std::array::from_fn(|k| IQ3S_GRID[index(k)]));
                    let signs = le_u32(&self.signs, 4 * g);
                    let s = (self.scales[g / 2] >> (4 * (g % 2))) & 0x0f;
                    (signed(grid, signs), _mm256_set1_epi16(odd(s)))
                })
            }
        }
    }

    /// Grid values `q` in {-1, 0, 1} (one byte each) as `u = 8 q + 9 + δ`, with `base` holding
    /// `9 + δ` (8 or 10) per byte.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline(always)]
    unsafe fn iq1_bytes(grid: __m256i, base: __m256i) -> __m256i {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe { _mm256_add_epi8(_mm256_sign_epi8(_mm256_set1_epi8(8), grid), base) }
    }

    /// `9 + δ` for a shift sign: 8 when negative, else 10.
    #[inline(always)]
    fn iq1_base(negative: bool) -> i8 {
        if negative {
            8
        } else {
            10
        }
    }

    impl RowBlock for BlockIq1S {
        type Act = BlockQ8K;
        #[inline(always)]
        unsafe fn accumulate<const N: usize>(
            &self,
            a: [&BlockQ8K; N],
            acc: &mut [__m256; N],
            _: &mut [f32; N],
        ) {
            // SAFETY: register-only intrinsics of the caller's features; loads go through
            // fixed-size references.
            unsafe {
                // Per group: 3 high index bits per point, the 3-bit scale, the shift sign.
                let qh: [u16; 8] = std::array::from_fn(|g| le_u16(&self.qh, g));
                let ls = qh.map(|h| odd(((h >> 12) & 7) as u8));
                let coef: [i16; 16] = std::array::from_fn(|h| -9 * ls[h / 2]);
                let coef = _mm256_loadu_si256(coef.as_ptr().cast());
                shifted_groups(a, acc, block_scale(self.d, 0.125), coef, |g| {
                    let h = usize::from(qh[g]);
                    let index =
                        |l: usize| usize::from(self.qs[4 * g + l]) | (((h >> (3 * l)) & 7) << 8);
                    let grid = points64(std::array::from_fn(|l| IQ1S_GRID[index(l)]));
                    let base = _mm256_set1_epi8(iq1_base(h & 0x8000 != 0));
                    (iq1_bytes(grid, base), _mm256_set1_epi16(ls[g]))
                })
            }
        }
    }

    impl RowBlock for BlockIq1M {
        type Act = BlockQ8K;
        #[inline(always)]
        unsafe fn accumulate<const N: usize>(
            &self,
            a: [&BlockQ8K; N],
            acc: &mut [__m256; N],
            _: &mut [f32; N],
        ) {
            // SAFETY: register-only intrinsics of the caller's features; loads go through
            // fixed-size references.
            unsafe {
                // Scale of half `h` (16 weights) of group `g`: 3 bits at `6 g + 3 h` of the
                // little-endian scale words.
                let ls: [i16; 16] = std::array::from_fn(|k| {
                    let (g, h) = (k / 2, k % 2);
                    let word = le_u16(&self.scales, g / 2);
                    odd(((word >> (6 * (g % 2) + 3 * h)) & 7) as u8)
                });
                let coef: [i16; 16] = ls.map(|s| -9 * s);
                let coef = _mm256_loadu_si256(coef.as_ptr().cast());
                let d = block_scale(iq1_m_scale(self), 0.125);
                shifted_groups(a, acc, d, coef, |g| {
                    // Point `l`'s byte of `qh`: 3 high index bits and the shift sign, in its
                    // low nibble for even `l`, high nibble for odd `l`.
                    let nibble =
                        |l: usize| usize::from(self.qh[2 * g + l / 2] >> (4 * (l % 2))) & 0x0f;
                    let index = |l: usize| usize::from(self.qs[4 * g + l]) | ((nibble(l) & 7) << 8);
                    let grid = points64(std::array::from_fn(|l| IQ1S_GRID[index(l)]));
                    let base: [i64; 4] = std::array::from_fn(|l| {
                        i64::from(iq1_base(nibble(l) & 8 != 0)) * 0x0101_0101_0101_0101
                    });
                    let base = _mm256_set_epi64x(base[3], base[2], base[1], base[0]);
                    (
                        iq1_bytes(grid, base),
                        scale_halves(ls[2 * g], ls[2 * g + 1]),
                    )
                })
            }
        }
    }
}

block_rows! {
    BlockIq2Xxs, BlockQ8K => iq2_xxs_gemv, iq2_xxs_gemm, iq2_xxs_rows;
    BlockIq2Xs, BlockQ8K => iq2_xs_gemv, iq2_xs_gemm, iq2_xs_rows;
    BlockIq2S, BlockQ8K => iq2_s_gemv, iq2_s_gemm, iq2_s_rows;
    BlockIq3Xxs, BlockQ8K => iq3_xxs_gemv, iq3_xxs_gemm, iq3_xxs_rows;
    BlockIq3S, BlockQ8K => iq3_s_gemv, iq3_s_gemm, iq3_s_rows;
    BlockIq1S, BlockQ8K => iq1_s_gemv, iq1_s_gemm, iq1_s_rows;
    BlockIq1M, BlockQ8K => iq1_m_gemv, iq1_m_gemm, iq1_m_rows;
}

#[cfg(test)]
mod tests;
