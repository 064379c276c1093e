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
use super::plain_tiles::decoded_tiled;
use crate::kernel_api::{target_entries, Kernels};
use crate::kernels::x86::{prepared_gemv, Avx2};

mod imp {
    use std::arch::x86_64::*;

    mod iq1;
    pub(super) mod iq1_m_gemv;
    pub(super) mod iq1_s_gemv;
    pub(super) mod signed_gemv;

    use iq1::{iq1_s_groups, shifted_groups};

    use super::super::lowbit::{half, mul_signed_pairs};
    use super::super::plain_rows::{
        bit_mask32, group_scale_pairs, load32, load_bsums, sub, RowBlock,
    };
    use super::super::plain_tiles::{DecodeK, DecodedK};
    use crate::blocks::{
        BlockIq1M, BlockIq1S, BlockIq2S, BlockIq2Xs, BlockIq2Xxs, BlockIq3S, BlockIq3Xxs, BlockQ8K,
        F16Bits,
    };
    use crate::quant::grid::iq1_m_scale;
    use crate::quant::grids::{
        IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID,
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

    #[inline(always)]
    fn le_u64(b: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(*sub::<u8, 8>(b, at))
    }

    /// `x`, hidden from the optimizer, so that a group's grid indices are cut from a general
    /// register with shifts and masks. Left visible, LLVM gathers the group's index fields
    /// into a vector register and moves each back out (`vpextrw`): two vector operations a
    /// point on the ports the products need (IQ1_M GEMV, 4096x4096, one Zen 3 thread:
    /// 2.0 -> 1.66 ms).
    #[inline(always)]
    fn opaque(x: u64) -> u64 {
        std::hint::black_box(x)
    }

    /// The sign bytes of 32 7-bit sign codes (one per byte): each code with its parity as the
    /// eighth bit (an even number of negated weights per 8), as `KSIGNS_IQ2XS` maps them,
    /// group `g`'s four in word `g`. Decoded for the whole block at once: one table lookup
    /// per code cost more than the group's products in a GEMV.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline(always)]
    unsafe fn sign_words(codes: __m256i) -> [u32; 8] {
        // SAFETY: register-only intrinsics of the caller's features; a 32-byte vector is eight
        // words, for any bits.
        unsafe {
            // 0x80 where a nibble has an odd number of bits set.
            let odd = _mm256_setr_epi8(
                0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0, //
                0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0,
            );
            let low = _mm256_and_si256(codes, _mm256_set1_epi8(0x0f));
            let high = _mm256_and_si256(_mm256_srli_epi16::<4>(codes), _mm256_set1_epi8(0x0f));
            let parity = _mm256_xor_si256(
                _mm256_shuffle_epi8(odd, low),
                _mm256_shuffle_epi8(odd, high),
            );
            std::mem::transmute::<__m256i, [u32; 8]>(_mm256_or_si256(codes, parity))
        }
    }

    /// The odd scales `2 (w >> 28) + 1` of eight scale words (one per group) as `i16` pairs,
    /// each one group's `madd` operand once broadcast.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline(always)]
    unsafe fn top_scale_pairs(words: __m256i) -> [u32; 8] {
        // SAFETY: register-only intrinsics of the caller's features; a 32-byte vector is eight
        // words, for any bits.
        unsafe {
            let s = _mm256_srli_epi32::<28>(words);
            let odd = _mm256_add_epi32(_mm256_add_epi32(s, s), _mm256_set1_epi32(1));
            std::mem::transmute::<__m256i, [u32; 8]>(_mm256_or_si256(
                odd,
                _mm256_slli_epi32::<16>(odd),
            ))
        }
    }

    /// `x` read from memory, as written: LLVM otherwise takes bytes and words that are also
    /// in a vector register out of it (`vpextrb`, `vpshufd` and a broadcast), two operations
    /// on the shuffle ports the products need instead of one load.
    #[inline(always)]
    fn from_memory<T: Copy>(x: &T) -> T {
        // SAFETY: a reference is valid for reads.
        unsafe { std::ptr::read_volatile(x) }
    }

    /// The four 7-bit sign codes of each of eight words (bits `7l..7l+7`), one per byte.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline(always)]
    unsafe fn split_codes(words: __m256i) -> __m256i {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe {
            let c0 = _mm256_and_si256(words, _mm256_set1_epi32(0x7f));
            let c1 = _mm256_and_si256(_mm256_slli_epi32::<1>(words), _mm256_set1_epi32(0x7f00));
            let c2 = _mm256_and_si256(_mm256_slli_epi32::<2>(words), _mm256_set1_epi32(0x7f_0000));
            let c3 = _mm256_and_si256(
                _mm256_slli_epi32::<3>(words),
                _mm256_set1_epi32(0x7f00_0000),
            );
            _mm256_or_si256(_mm256_or_si256(c0, c1), _mm256_or_si256(c2, c3))
        }
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
        let p = |k: usize| p[k] as i32;
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe { _mm256_setr_epi32(p(0), p(1), p(2), p(3), p(4), p(5), p(6), p(7)) }
    }

    /// `grid` with the bytes where `mask` is `0xff` negated.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline(always)]
    pub(in crate::kernels::x86::avx2) unsafe fn negated(grid: __m256i, mask: __m256i) -> __m256i {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe { _mm256_sub_epi8(_mm256_xor_si256(grid, mask), mask) }
    }

    /// The odd scales `2 s + 1` of the 16 nibbles of 8 bytes (the low nibble of byte `g` for
    /// weights `32 g..32 g + 16`, the high one for the next 16) as the `madd` operands of the
    /// eight groups: one vector per block instead of two broadcasts and a lane insert per
    /// group.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline(always)]
    unsafe fn nibble_scale_pairs(scales: &[u8; 8]) -> [__m256i; 8] {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe {
            let x = _mm_cvtsi64_si128(i64::from_le_bytes(*scales));
            let m4 = _mm_set1_epi8(0x0f);
            let s = _mm_unpacklo_epi8(
                _mm_and_si128(x, m4),
                _mm_and_si128(_mm_srli_epi16::<4>(x), m4),
            );
            let s = _mm256_cvtepu8_epi16(s);
            group_scale_pairs(_mm256_add_epi16(
                _mm256_add_epi16(s, s),
                _mm256_set1_epi16(1),
            ))
        }
    }

    /// A grid type whose block is eight groups of 32 weights, each decoded to one vector of
    /// bytes and the `i16` scales of its halves (`madd` operand).
    ///
    /// The decode is a trait rather than a closure: a closure does not inherit its caller's
    /// target features, and when it is not inlined its intrinsics become calls.
    pub(in crate::kernels::x86::avx2) trait GridBlock {
        /// What the whole block decodes at once (sign words, scales).
        type Prep: Copy;
        /// The block's weight scale times the type's constant factor (a power of two), in
        /// lane 0.
        ///
        /// # Safety
        /// The CPU must support F16C.
        unsafe fn scale(&self) -> __m128;
        /// # Safety
        /// The CPU must support AVX2.
        unsafe fn prepare(&self) -> Self::Prep;
        /// Group `g`'s grid bytes, the mask of the weights they negate (`0xff` bytes; zero for
        /// types without signs) and the group's scales: [`negated`] of the first two is the
        /// group's weights.
        ///
        /// # Safety
        /// The CPU must support AVX2.
        unsafe fn group(&self, prep: &Self::Prep, g: usize) -> (__m256i, __m256i, __m256i);
    }

    /// `d` times `factor` in lane 0.
    ///
    /// # Safety
    /// The CPU must support F16C.
    #[inline(always)]
    unsafe fn block_scale(d: F16Bits, factor: f32) -> __m128 {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe { _mm_mul_ss(half(d), _mm_set_ss(factor)) }
    }

    /// Adds the block's scale times `d_a` times `isum[r]` to `acc[r]`.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[inline(always)]
    unsafe fn scale_rows<const N: usize>(
        d: __m128,
        a: [&BlockQ8K; N],
        isum: [__m256i; N],
        acc: &mut [__m256; N],
    ) {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe {
            for r in 0..N {
                let dr = _mm256_broadcastss_ps(_mm_mul_ss(d, _mm_set_ss(a[r].d)));
                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), dr, acc[r]);
            }
        }
    }

    /// One block of signed grid groups: `d·d_a·Σ_g Σ sc·w·a`, each group multiplied with every
    /// row before the next one is decoded.
    ///
    /// # Safety
    /// The CPU must support AVX2, FMA and F16C.
    #[inline(always)]
    unsafe fn signed_groups<B: GridBlock, const N: usize>(
        b: &B,
        a: [&BlockQ8K; N],
        acc: &mut [__m256; N],
    ) {
        // SAFETY: register-only intrinsics of the caller's features; loads go through
        // fixed-size references.
        unsafe {
            let prep = b.prepare();
            // Two sums a row, the groups taken in pairs, unrolled: one loop over the eight
            // groups kept a single chain and its counter.
            let mut isum = [[_mm256_setzero_si256(); N]; 2];
            macro_rules! group {
                ($g:literal) => {
                    let (grid, negate, sc) = b.group(&prep, $g);
                    let w = negated(grid, negate);
                    for r in 0..N {
                        let av = load32(sub::<i8, 32>(&a[r].qs, 32 * $g));
                        let p = _mm256_madd_epi16(mul_signed_pairs(w, av), sc);
                        isum[$g % 2][r] = _mm256_add_epi32(isum[$g % 2][r], p);
                    }
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
            let [mut total, odd] = isum;
            for (t, o) in total.iter_mut().zip(odd) {
                *t = _mm256_add_epi32(*t, o);
            }
            scale_rows(b.scale(), a, total, acc);
        }
    }

    /// Row blocks of the grid types through `signed_groups` or `shifted_groups`.
    macro_rules! grid_row_blocks {
        ($($block:ty => $body:ident;)*) => {$(
            impl RowBlock for $block {
                type Act = BlockQ8K;
                #[inline(always)]
                unsafe fn accumulate<const N: usize>(
                    &self,
                    a: [&BlockQ8K; N],
                    acc: &mut [__m256; N],
                    _: &mut [f32; N],
                ) {
                    // SAFETY: the caller's features.
                    unsafe { $body(self, a, acc) }
                }
            }
        )*};
    }

    /// Decodes a block into a per-call tile block (`plain_tiles`): each group's bytes plus
    /// `bias` as unsigned quants, the `i16` scales of its halves (lanes 0 and 8 of the `madd`
    /// operand), `offset` times each scale as the term the tile kernels take off with the
    /// activations' `bsums`, and the block's scale with the type's factor.
    ///
    /// The signed grid types take `bias` 64 (`|w| <= 62`, so `u` is `2..=126`); the IQ1 types'
    /// bytes are already `8 q + δ + 9` (`0..=18`, `bias` 0, `offset` 9). A `maddubs` pair of such
    /// `u` is at most `2 · 126 · 128 = 32256`: no saturation.
    ///
    /// # Safety
    /// The CPU must support AVX2 and F16C.
    #[inline(always)]
    unsafe fn decode_tile<B: GridBlock>(b: &B, bias: i8, offset: i16, out: &mut DecodedK) {
        // SAFETY: register-only intrinsics of the caller's features; the store goes through a
        // fixed-size reference.
        unsafe {
            let prep = b.prepare();
            for g in 0..8 {
                let (grid, negate, sc) = b.group(&prep, g);
                let u = _mm256_add_epi8(negated(grid, negate), _mm256_set1_epi8(bias));
                let dst: &mut [u8; 32] = (&mut out.u[32 * g..32 * g + 32])
                    .try_into()
                    .expect("32 bytes");
                _mm256_storeu_si256(dst.as_mut_ptr().cast(), u);
                let halves = [
                    _mm256_extract_epi16::<0>(sc) as i16,
                    _mm256_extract_epi16::<8>(sc) as i16,
                ];
                for (h, s) in halves.into_iter().enumerate() {
                    out.scales[2 * g + h] = s;
                    out.offsets[2 * g + h] = offset * s;
                }
            }
            out.d = _mm_cvtss_f32(b.scale());
            out.c = out.d;
        }
    }

    /// Tile decoders of the grid types through [`decode_tile`].
    macro_rules! grid_tile_blocks {
        ($($block:ty => $bias:expr, $offset:expr;)*) => {$(
            impl DecodeK for $block {
                #[inline(always)]
                unsafe fn decode(&self, out: &mut DecodedK) {
                    // SAFETY: the caller's features.
                    unsafe { decode_tile(self, $bias, $offset, out) }
                }
            }
        )*};
    }

    grid_tile_blocks! {
        BlockIq2Xxs => 64, 64;
        BlockIq2Xs => 64, 64;
        BlockIq2S => 64, 64;
        BlockIq3Xxs => 64, 64;
        BlockIq3S => 64, 64;
        BlockIq1S => 0, 9;
        BlockIq1M => 0, 9;
    }

    grid_row_blocks! {
        BlockIq2Xxs => signed_groups;
        BlockIq2Xs => signed_groups;
        BlockIq2S => signed_groups;
        BlockIq3Xxs => signed_groups;
        BlockIq3S => signed_groups;
        BlockIq1S => iq1_s_groups;
        BlockIq1M => shifted_groups;
    }

    impl GridBlock for BlockIq2Xxs {
        /// Sign words and scale pairs.
        type Prep = ([u32; 8], [u32; 8]);
        #[inline(always)]
        unsafe fn scale(&self) -> __m128 {
            // SAFETY: the caller's features.
            unsafe { block_scale(self.d, 0.125) }
        }
        #[inline(always)]
        unsafe fn prepare(&self) -> Self::Prep {
            // SAFETY: register-only intrinsics of the caller's features; loads go through
            // fixed-size references.
            unsafe {
                // Group `g`: four index bytes, then a word of four sign codes and the scale;
                // the words are the odd dwords of `qs`.
                let q0 = _mm256_castsi256_ps(load32(sub::<u8, 32>(&self.qs, 0)));
                let q1 = _mm256_castsi256_ps(load32(sub::<u8, 32>(&self.qs, 32)));
                let words = _mm256_castps_si256(_mm256_shuffle_ps::<0xdd>(q0, q1));
                let words = _mm256_permute4x64_epi64::<0xd8>(words);
                (sign_words(split_codes(words)), top_scale_pairs(words))
            }
        }
        #[inline(always)]
        unsafe fn group(&self, prep: &Self::Prep, g: usize) -> (__m256i, __m256i, __m256i) {
            let idx = sub::<u8, 4>(&self.qs, 8 * g);
            // SAFETY: register-only intrinsics of the caller's features.
            unsafe {
                let point = |l: usize| IQ2XXS_GRID[usize::from(from_memory(&idx[l]))];
                let grid = points64([point(0), point(1), point(2), point(3)]);
                let sc = _mm256_set1_epi32(from_memory(&prep.1[g]) as i32);
                (grid, bit_mask32(prep.0[g]), sc)
            }
        }
    }

    impl GridBlock for BlockIq2Xs {
        type Prep = ([u32; 8], [__m256i; 8]);
        #[inline(always)]
        unsafe fn scale(&self) -> __m128 {
            // SAFETY: the caller's features.
            unsafe { block_scale(self.d, 0.125) }
        }
        #[inline(always)]
        unsafe fn prepare(&self) -> ([u32; 8], [__m256i; 8]) {
            // SAFETY: register-only intrinsics of the caller's features; loads go through
            // fixed-size references.
            unsafe {
                // Each 16-bit entry: a 9-bit grid index and a 7-bit sign code. The codes as
                // bytes in order (`packus` interleaves the 128-bit lanes of its operands).
                let c0 = _mm256_srli_epi16::<9>(load32(sub::<u8, 32>(&self.qs, 0)));
                let c1 = _mm256_srli_epi16::<9>(load32(sub::<u8, 32>(&self.qs, 32)));
                let codes = _mm256_permute4x64_epi64::<0xd8>(_mm256_packus_epi16(c0, c1));
                (sign_words(codes), nibble_scale_pairs(&self.scales))
            }
        }
        #[inline(always)]
        unsafe fn group(&self, prep: &Self::Prep, g: usize) -> (__m256i, __m256i, __m256i) {
            let word = opaque(le_u64(&self.qs, 8 * g));
            let point = |l: usize| IQ2XS_GRID[(word >> (16 * l)) as usize & 511];
            // SAFETY: register-only intrinsics of the caller's features.
            unsafe {
                let grid = points64([point(0), point(1), point(2), point(3)]);
                (grid, bit_mask32(prep.0[g]), prep.1[g])
            }
        }
    }

    impl GridBlock for BlockIq2S {
        type Prep = [__m256i; 8];
        #[inline(always)]
        unsafe fn scale(&self) -> __m128 {
            // SAFETY: the caller's features.
            unsafe { block_scale(self.d, 0.125) }
        }
        #[inline(always)]
        unsafe fn prepare(&self) -> [__m256i; 8] {
            // SAFETY: the caller's features.
            unsafe { nibble_scale_pairs(&self.scales) }
        }
        #[inline(always)]
        unsafe fn group(&self, scales: &[__m256i; 8], g: usize) -> (__m256i, __m256i, __m256i) {
            // Low 8 index bits in `qs[..32]`, the top 2 of point `l` in bits 2l, 2l + 1 of
            // `qh[g]`; the 8 sign bits of each point stored in `qs[32..]`.
            let low = sub::<u8, 4>(&self.qs, 4 * g);
            let qh = usize::from(self.qh[g]);
            let index = |l: usize| usize::from(low[l]) | (((qh >> (2 * l)) & 3) << 8);
            let point = |l: usize| IQ2S_GRID[index(l)];
            let points = [point(0), point(1), point(2), point(3)];
            // SAFETY: register-only intrinsics of the caller's features.
            unsafe {
                let negate = bit_mask32(le_u32(&self.qs, 32 + 4 * g));
                (points64(points), negate, scales[g])
            }
        }
    }

    impl GridBlock for BlockIq3Xxs {
        type Prep = [u32; 8];
        #[inline(always)]
        unsafe fn scale(&self) -> __m128 {
            // SAFETY: the caller's features.
            unsafe { block_scale(self.d, 0.25) }
        }
        #[inline(always)]
        unsafe fn prepare(&self) -> [u32; 8] {
            // SAFETY: register-only intrinsics of the caller's features; the load goes
            // through a fixed-size reference.
            unsafe { sign_words(split_codes(load32(sub::<u8, 32>(&self.qs, 64)))) }
        }
        #[inline(always)]
        unsafe fn group(&self, signs: &[u32; 8], g: usize) -> (__m256i, __m256i, __m256i) {
            let idx = sub::<u8, 8>(&self.qs, 8 * g);
            let aux = le_u32(&self.qs, 64 + 4 * g);
            // SAFETY: register-only intrinsics of the caller's features.
            unsafe {
                let point = |k: usize| IQ3XXS_GRID[usize::from(idx[k])];
                let grid = points32([
                    point(0),
                    point(1),
                    point(2),
                    point(3),
                    point(4),
                    point(5),
                    point(6),
                    point(7),
                ]);
                let sc = _mm256_set1_epi16(odd((aux >> 28) as u8));
                (grid, bit_mask32(signs[g]), sc)
            }
        }
    }

    impl GridBlock for BlockIq3S {
        type Prep = ();
        #[inline(always)]
        unsafe fn scale(&self) -> __m128 {
            // SAFETY: the caller's features.
            unsafe { block_scale(self.d, 1.0) }
        }
        #[inline(always)]
        unsafe fn prepare(&self) {}
        #[inline(always)]
        unsafe fn group(&self, _: &(), g: usize) -> (__m256i, __m256i, __m256i) {
            // Point `k`'s 9th index bit is bit `k` of `qh[g]`.
            let idx = sub::<u8, 8>(&self.qs, 8 * g);
            let qh = usize::from(self.qh[g]);
            let index = |k: usize| usize::from(idx[k]) | (((qh >> k) & 1) << 8);
            let point = |k: usize| IQ3S_GRID[index(k)];
            let points = [
                point(0),
                point(1),
                point(2),
                point(3),
                point(4),
                point(5),
                point(6),
                point(7),
            ];
            let s = (self.scales[g / 2] >> (4 * (g % 2))) & 0x0f;
            // SAFETY: register-only intrinsics of the caller's features.
            unsafe {
                let negate = bit_mask32(le_u32(&self.signs, 4 * g));
                (points32(points), negate, _mm256_set1_epi16(odd(s)))
            }
        }
    }
}

block_rows! {
    BlockIq2Xxs, BlockQ8K => iq2_xxs_row_gemv, iq2_xxs_gemm, iq2_xxs_row_kernels, tiled decoded_tiled;
    BlockIq2Xs, BlockQ8K => iq2_xs_row_gemv, iq2_xs_gemm, iq2_xs_row_kernels, tiled decoded_tiled;
    BlockIq2S, BlockQ8K => iq2_s_gemv, iq2_s_gemm, iq2_s_rows, tiled decoded_tiled;
    BlockIq3Xxs, BlockQ8K => iq3_xxs_gemv, iq3_xxs_gemm, iq3_xxs_rows, tiled decoded_tiled;
    BlockIq3S, BlockQ8K => iq3_s_row_gemv, iq3_s_gemm, iq3_s_row_kernels, tiled decoded_tiled;
    BlockIq1S, BlockQ8K => iq1_s_row_gemv, iq1_s_gemm, iq1_s_row_kernels, tiled decoded_tiled;
    BlockIq1M, BlockQ8K => iq1_m_row_gemv, iq1_m_gemm, iq1_m_row_kernels, tiled decoded_tiled;
}

target_entries! { "avx2,fma,f16c";
    fn iq1_m_prepared_gemv(w: &[BlockIq1M], a: &[BlockQ8K], out: &mut [f32]) => prepared_gemv::gemv_body::<imp::iq1_m_gemv::Iq1M, { imp::iq1_m_gemv::PREP_BLOCKS }>;
    fn iq1_s_prepared_gemv(w: &[BlockIq1S], a: &[BlockQ8K], out: &mut [f32]) => prepared_gemv::gemv_body::<imp::iq1_s_gemv::Iq1S, { imp::iq1_s_gemv::PREP_BLOCKS }>;
}

/// The signed grid types' GEMVs on prepared activations and their row and tile kernels.
macro_rules! signed_prepared_rows {
    ($($block:ty => $gemv:ident, $rows:ident, $row_kernels:ident;)*) => {
        target_entries! { "avx2,fma,f16c"; $(
            fn $gemv(w: &[$block], a: &[BlockQ8K], out: &mut [f32]) => prepared_gemv::gemv_body::<imp::signed_gemv::Signed<$block>, { imp::signed_gemv::PREP_BLOCKS }>;
        )* }
        $(
            /// Plain rows with AVX2: the GEMV on activations prepared once per call
            /// (`imp::signed_gemv`), the row GEMM and the per-call tiles.
            pub(crate) fn $rows(token: Avx2) -> Kernels<$block, BlockQ8K, BlockQ8K> {
                Kernels {
                    gemv: $gemv,
                    ..$row_kernels(token)
                }
            }
        )*
    };
}

// The prepared activations with each block's sign words and scales worked out eight blocks
// ahead (one Zen 3 thread, 4096x4096 hot, min of 3 alternating, row GEMV -> prepared):
// IQ2_XXS 1.405 -> 1.184 ms, IQ2_XS 1.465 -> 1.391, IQ3_S 2.12 -> 1.97 (nothing ahead); with
// the activations' signs prepared too (one `xor` and one `vpsignb` a group instead of negating
// the grid bytes and then signing them): IQ2_XXS 1.182 -> 1.137, IQ2_XS 1.361 -> 1.341, IQ3_S
// 1.983 -> 1.928. IQ2_S (1.285 -> 1.504; with the signs, 1.300 -> 1.473) and IQ3_XXS (1.557 ->
// 1.633; 1.564 -> 1.614) lose and keep the row GEMV.
signed_prepared_rows! {
    BlockIq3S => iq3_s_prepared_gemv, iq3_s_rows, iq3_s_row_kernels;
    BlockIq2Xxs => iq2_xxs_prepared_gemv, iq2_xxs_rows, iq2_xxs_row_kernels;
    BlockIq2Xs => iq2_xs_prepared_gemv, iq2_xs_rows, iq2_xs_row_kernels;
}

/// Plain IQ1_S rows with AVX2: the GEMV on activations prepared once per call
/// (`imp::iq1_s_gemv`), the row GEMM and the per-call tiles.
pub(crate) fn iq1_s_rows(token: Avx2) -> Kernels<BlockIq1S, BlockQ8K, BlockQ8K> {
    Kernels {
        gemv: iq1_s_prepared_gemv,
        ..iq1_s_row_kernels(token)
    }
}

/// Plain IQ1_M rows with AVX2: the GEMV on activations prepared once per call
/// (`imp::iq1_m_gemv`), the row GEMM and the per-call tiles.
pub(crate) fn iq1_m_rows(token: Avx2) -> Kernels<BlockIq1M, BlockQ8K, BlockQ8K> {
    Kernels {
        gemv: iq1_m_prepared_gemv,
        ..iq1_m_row_kernels(token)
    }
}

#[cfg(test)]
mod tests;
