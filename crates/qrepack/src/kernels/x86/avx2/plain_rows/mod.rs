//! AVX2 (+FMA+F16C) kernels of the plain layout for the types with costly rows: Q2_K, Q3_K,
//! IQ4_XS and Q8_K against Q8_K, Q4_1, Q5_1 and Q8_1 against Q8_1, and BF16.
//!
//! Each type has one block routine generic over the number `N` of activation rows it serves:
//! the GEMV runs it with `N = 1` for every weight row (asking for the weights 16 KiB ahead, into
//! L2), the GEMM with `N = 4`, so that each weight block is decoded once for the four rows of a
//! quad. ggml's `vec_dot` decodes a block again for every activation row; for the 2- and 3-bit
//! K-quants the decode is most of the work.
//!
//! # Exactness
//!
//! The integer part of every block is computed exactly (the same integers as the portable
//! kernels of `crate::vecdot`); only the order of the `f32` scaling and accumulation differs.
//! Where the weights are made unsigned for `maddubs`, the offset is taken off with the
//! activation block's `bsums` (Q8_K carries them, the quantizers make them exact), and every
//! `i16` pair stays far from saturation:
//!
//! * Q2_K quants `0..=3`, Q3_K quants offset by 4 to `0..=7`, Q4_1/Q5_1 quants `0..=31`:
//!   `maddubs(q, a)` pairs reach at most `2 * 31 * 128`;
//! * IQ4_XS levels are signed (`-127..=113`) and too large to offset, so they use
//!   `maddubs(|a|, sign(w, a))` (`|a|` read as unsigned is exact for `a = -128`);
//! * Q8_1 and Q8_K weights may be `-128`, so both sides are widened to `i16` for `madd`.

use crate::activation::Bf16Bits;
use crate::blocks::{
    BlockIq4Xs, BlockQ2K, BlockQ3K, BlockQ4_1, BlockQ5_1, BlockQ8K, BlockQ8_1, F16Bits,
};
use crate::cpu::KernelSet;
use crate::kernel_api::{target_entries, Kernels};
use crate::kernels::x86::Avx2;

mod imp {
    use std::arch::x86_64::*;

    use crate::activation::Bf16Bits;
    use crate::blocks::{BlockIq4Xs, BlockQ2K, BlockQ3K, BlockQ4_1, BlockQ5_1, BlockQ8K};
    use crate::blocks::{BlockQ8_1, F16Bits, IQ4NL_LEVELS};
    use crate::kernel_api::{prefetch_l2, GEMV_PREFETCH_BYTES};

    /// `N` elements of `s` from `at` (constant offsets after inlining: the check folds away).
    #[inline(always)]
    pub(in crate::kernels::x86::avx2) fn sub<T, const N: usize>(s: &[T], at: usize) -> &[T; N] {
        s[at..at + N]
            .try_into()
            .expect("in-bounds fixed-size chunk")
    }

    /// Loads 16 bytes.
    ///
    /// # Safety
    /// The CPU must support SSE2.
    #[inline(always)]
    pub(in crate::kernels::x86::avx2) unsafe fn load16<T: bytemuck::Pod>(p: &[T; 16]) -> __m128i {
        assert_eq!(std::mem::size_of::<T>(), 1);
        // SAFETY: `p` is 16 one-byte elements; `loadu` has no alignment requirement.
        unsafe { _mm_loadu_si128(p.as_ptr().cast()) }
    }

    /// Loads 32 bytes.
    ///
    /// # Safety
    /// The CPU must support AVX.
    #[inline(always)]
    pub(in crate::kernels::x86::avx2) unsafe fn load32<T: bytemuck::Pod>(p: &[T; 32]) -> __m256i {
        assert_eq!(std::mem::size_of::<T>(), 1);
        // SAFETY: `p` is 32 one-byte elements; `loadu` has no alignment requirement.
        unsafe { _mm256_loadu_si256(p.as_ptr().cast()) }
    }

    /// The 16 `bsums` of a Q8_K block.
    ///
    /// # Safety
    /// The CPU must support AVX.
    #[inline(always)]
    pub(in crate::kernels::x86::avx2) unsafe fn load_bsums(b: &[i16; 16]) -> __m256i {
        // SAFETY: 16 `i16` are 32 bytes; `loadu` has no alignment requirement.
        unsafe { _mm256_loadu_si256(b.as_ptr().cast()) }
    }

    /// Sum of the 8 lanes.
    ///
    /// # Safety
    /// The CPU must support AVX and SSE3.
    #[inline(always)]
    unsafe fn hsum256(v: __m256) -> f32 {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe {
            let v = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let s = _mm_add_ps(v, _mm_movehl_ps(v, v));
            _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
        }
    }

    /// Two f16 fields widened: `[x, y, 0, 0]`.
    ///
    /// # Safety
    /// The CPU must support F16C.
    #[inline(always)]
    unsafe fn halves2(x: F16Bits, y: F16Bits) -> __m128 {
        let bits = u32::from_le_bytes([x.0[0], x.0[1], y.0[0], y.0[1]]);
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe { _mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)) }
    }

    /// The 32 nibbles of 16 bytes as bytes: low nibbles (weights 0..16), then high ones.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline(always)]
    pub(in crate::kernels::x86::avx2) unsafe fn nibbles32(qs: &[u8; 16]) -> __m256i {
        // SAFETY: register-only intrinsics of the caller's features; `load16` reads `qs`.
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
    pub(in crate::kernels::x86::avx2) unsafe fn bit_mask32(bits: u32) -> __m256i {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe {
            let v = _mm256_set1_epi32(bits as i32);
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

    /// The 16 per-group scales of a 256-weight block (`i16`, group `g` in lane `g`) as the
    /// eight `madd` operands of its 32-weight vectors: vector `j` covers groups `2j` (its low
    /// 128-bit lane) and `2j + 1` (its high lane).
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline(always)]
    pub(in crate::kernels::x86::avx2) unsafe fn group_scale_pairs(scales: __m256i) -> [__m256i; 8] {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe {
            let low = _mm256_permute4x64_epi64::<0x44>(scales);
            let high = _mm256_permute4x64_epi64::<0xee>(scales);
            let mut out = [_mm256_setzero_si256(); 8];
            for (j, o) in out.iter_mut().enumerate() {
                // i16 lane `k` of a 128-bit lane is bytes 2k, 2k + 1.
                let k = (2 * (j % 4)) as i16;
                let pick = _mm256_set_m128i(
                    _mm_set1_epi16((2 * k + 2) | ((2 * k + 3) << 8)),
                    _mm_set1_epi16((2 * k) | ((2 * k + 1) << 8)),
                );
                let src = if j < 4 { low } else { high };
                *o = _mm256_shuffle_epi8(src, pick);
            }
            out
        }
    }

    /// The quants of a 2-bit field (Q2_K, Q3_K's low bits) as eight 32-byte vectors: vector
    /// `4h + s` holds bits `2s..2s+2` of bytes `32h..32h+32`, i.e. weights `32(4h + s)..`.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline(always)]
    pub(in crate::kernels::x86::avx2) unsafe fn crumbs(qs: &[u8; 64]) -> [__m256i; 8] {
        // SAFETY: register-only intrinsics of the caller's features; `load32` reads `qs`.
        unsafe {
            let three = _mm256_set1_epi8(3);
            let mut out = [_mm256_setzero_si256(); 8];
            for h in 0..2 {
                let mut v = load32(sub::<u8, 32>(qs, 32 * h));
                for s in 0..4 {
                    out[4 * h + s] = _mm256_and_si256(v, three);
                    v = _mm256_srli_epi16::<2>(v);
                }
            }
            out
        }
    }

    /// One weight block type of the plain layout with the routine that adds its products with
    /// `N` activation blocks to `N` accumulators.
    pub(in crate::kernels::x86::avx2) trait RowBlock: Sized {
        /// The activation block type (the weight type's `vec_dot_type`).
        type Act;
        /// Adds `block · a[r]` to `acc[r]` (lanes summed at the end) and `extra[r]`.
        ///
        /// # Safety
        /// The CPU must support AVX2, FMA and F16C.
        unsafe fn accumulate<const N: usize>(
            &self,
            a: [&Self::Act; N],
            acc: &mut [__m256; N],
            extra: &mut [f32; N],
        );
    }

    impl RowBlock for BlockQ2K {
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
                let q = crumbs(&self.qs);
                let bytes = load16(&self.scales);
                let mask = _mm_set1_epi8(0x0f);
                let scales = _mm256_cvtepu8_epi16(_mm_and_si128(bytes, mask));
                let mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(bytes), mask));
                let sc = group_scale_pairs(scales);
                let dw = halves2(self.d, self.dmin);
                for r in 0..N {
                    let ab = a[r];
                    let mut isum = _mm256_setzero_si256();
                    for j in 0..8 {
                        let av = load32(sub::<i8, 32>(&ab.qs, 32 * j));
                        let p = _mm256_maddubs_epi16(q[j], av);
                        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, sc[j]));
                    }
                    let msum = _mm256_madd_epi16(mins, load_bsums(&ab.bsums));
                    let d = _mm_mul_ps(dw, _mm_set1_ps(ab.d)); // [d·d_a, dmin·d_a, ..]
                    let dall = _mm256_broadcastss_ps(d);
                    let dmin = _mm256_broadcastss_ps(_mm_movehdup_ps(d));
                    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), dall, acc[r]);
                    acc[r] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), dmin, acc[r]);
                }
            }
        }
    }

    /// The 16 Q3_K scales (6 bits, offset by −32) as `i16` lanes.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline(always)]
    unsafe fn q3_k_scales(p: &[u8; 12]) -> __m256i {
        let word = |i: usize| u32::from_le_bytes(*sub::<u8, 4>(p, 4 * i));
        let (lo, mid, top) = (word(0), word(1), word(2));
        let nib = 0x0f0f_0f0f;
        let two = |shift: u32| ((top >> shift) & 0x0303_0303) << 4;
        let s0 = (lo & nib) | two(0);
        let s1 = (mid & nib) | two(2);
        let s2 = ((lo >> 4) & nib) | two(4);
        let s3 = ((mid >> 4) & nib) | two(6);
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe {
            let v = _mm_set_epi32(s3 as i32, s2 as i32, s1 as i32, s0 as i32);
            _mm256_sub_epi16(_mm256_cvtepu8_epi16(v), _mm256_set1_epi16(32))
        }
    }

    impl RowBlock for BlockQ3K {
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
                // Quants as `u = low bits + 4·high bit` in 0..=7; the weight is `u − 4`, and the
                // `−4` comes off through the group sums: Σ sc·(u − 4)·a = Σ sc·u·a − 4 Σ sc·bsum.
                let mut q = crumbs(&self.qs);
                let hmask = load32(&self.hmask);
                let four = _mm256_set1_epi8(4);
                for (k, v) in q.iter_mut().enumerate() {
                    let bit = _mm256_set1_epi8(1 << k);
                    let set = _mm256_cmpeq_epi8(_mm256_and_si256(hmask, bit), bit);
                    *v = _mm256_or_si256(*v, _mm256_and_si256(set, four));
                }
                let scales = q3_k_scales(&self.scales);
                let sc = group_scale_pairs(scales);
                let dw = halves2(self.d, self.d);
                for r in 0..N {
                    let ab = a[r];
                    let offset = _mm256_madd_epi16(scales, load_bsums(&ab.bsums));
                    let mut isum =
                        _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32::<2>(offset));
                    for j in 0..8 {
                        let av = load32(sub::<i8, 32>(&ab.qs, 32 * j));
                        let p = _mm256_maddubs_epi16(q[j], av);
                        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, sc[j]));
                    }
                    let d = _mm256_broadcastss_ps(_mm_mul_ss(dw, _mm_set_ss(ab.d)));
                    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), d, acc[r]);
                }
            }
        }
    }

    impl RowBlock for BlockIq4Xs {
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
                let lut = _mm256_broadcastsi128_si256(load16(&IQ4NL_LEVELS));
                let high = u16::from_le_bytes(self.scales_h);
                let mut w = [_mm256_setzero_si256(); 8];
                let mut ls = [_mm256_setzero_si256(); 8];
                for s in 0..8 {
                    w[s] = _mm256_shuffle_epi8(lut, nibbles32(sub::<u8, 16>(&self.qs, 16 * s)));
                    let low = (self.scales_l[s / 2] >> (4 * (s % 2))) & 0x0f;
                    let top = (((high >> (2 * s)) & 3) as u8) << 4;
                    ls[s] = _mm256_set1_epi16((low | top) as i16 - 32);
                }
                let dw = halves2(self.d, self.d);
                for r in 0..N {
                    let ab = a[r];
                    let mut isum = _mm256_setzero_si256();
                    for s in 0..8 {
                        let av = load32(sub::<i8, 32>(&ab.qs, 32 * s));
                        let p =
                            _mm256_maddubs_epi16(_mm256_abs_epi8(av), _mm256_sign_epi8(w[s], av));
                        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, ls[s]));
                    }
                    let d = _mm256_broadcastss_ps(_mm_mul_ss(dw, _mm_set_ss(ab.d)));
                    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), d, acc[r]);
                }
            }
        }
    }

    impl RowBlock for BlockQ8K {
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
                for r in 0..N {
                    let ab = a[r];
                    let mut isum = _mm256_setzero_si256();
                    for k in 0..16 {
                        let w = _mm256_cvtepi8_epi16(load16(sub::<i8, 16>(&self.qs, 16 * k)));
                        let x = _mm256_cvtepi8_epi16(load16(sub::<i8, 16>(&ab.qs, 16 * k)));
                        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(w, x));
                    }
                    let d = _mm256_set1_ps(self.d * ab.d);
                    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), d, acc[r]);
                }
            }
        }
    }

    /// The Q8_1 part shared by Q4_1 and Q5_1: `d_w·d_a·Σ q·a + m_w·s_a` for unsigned `q`.
    ///
    /// # Safety
    /// The CPU must support AVX2, FMA and F16C.
    #[inline(always)]
    unsafe fn unsigned_q8_1<const N: usize>(
        q: __m256i,
        d: F16Bits,
        m: F16Bits,
        a: [&BlockQ8_1; N],
        acc: &mut [__m256; N],
        extra: &mut [f32; N],
    ) {
        // SAFETY: register-only intrinsics of the caller's features; loads go through
        // fixed-size references.
        unsafe {
            let ones = _mm256_set1_epi16(1);
            for r in 0..N {
                let ab = a[r];
                let p = _mm256_maddubs_epi16(q, load32(&ab.qs));
                let isum = _mm256_madd_epi16(p, ones);
                // [d, m, d_a, s_a] in one conversion, then [d·d_a, m·s_a, ..].
                let bits = u64::from_le_bytes([
                    d.0[0], d.0[1], m.0[0], m.0[1], ab.d.0[0], ab.d.0[1], ab.s.0[0], ab.s.0[1],
                ]);
                let v = _mm_cvtph_ps(_mm_cvtsi64_si128(bits as i64));
                let prod = _mm_mul_ps(v, _mm_movehl_ps(v, v));
                acc[r] = _mm256_fmadd_ps(
                    _mm256_cvtepi32_ps(isum),
                    _mm256_broadcastss_ps(prod),
                    acc[r],
                );
                extra[r] += _mm_cvtss_f32(_mm_movehdup_ps(prod));
            }
        }
    }

    impl RowBlock for BlockQ4_1 {
        type Act = BlockQ8_1;
        #[inline(always)]
        unsafe fn accumulate<const N: usize>(
            &self,
            a: [&BlockQ8_1; N],
            acc: &mut [__m256; N],
            extra: &mut [f32; N],
        ) {
            // SAFETY: the caller's features; `nibbles32` reads `qs`.
            unsafe { unsigned_q8_1(nibbles32(&self.qs), self.d, self.m, a, acc, extra) }
        }
    }

    impl RowBlock for BlockQ5_1 {
        type Act = BlockQ8_1;
        #[inline(always)]
        unsafe fn accumulate<const N: usize>(
            &self,
            a: [&BlockQ8_1; N],
            acc: &mut [__m256; N],
            extra: &mut [f32; N],
        ) {
            // SAFETY: register-only intrinsics of the caller's features and fixed-size reads.
            unsafe {
                let high = bit_mask32(u32::from_le_bytes(self.qh));
                let fifth = _mm256_and_si256(high, _mm256_set1_epi8(0x10));
                let q = _mm256_or_si256(nibbles32(&self.qs), fifth);
                unsigned_q8_1(q, self.d, self.m, a, acc, extra)
            }
        }
    }

    impl RowBlock for BlockQ8_1 {
        type Act = BlockQ8_1;
        #[inline(always)]
        unsafe fn accumulate<const N: usize>(
            &self,
            a: [&BlockQ8_1; N],
            acc: &mut [__m256; N],
            _: &mut [f32; N],
        ) {
            // SAFETY: register-only intrinsics of the caller's features and fixed-size reads.
            unsafe {
                let w0 = _mm256_cvtepi8_epi16(load16(sub::<i8, 16>(&self.qs, 0)));
                let w1 = _mm256_cvtepi8_epi16(load16(sub::<i8, 16>(&self.qs, 16)));
                for r in 0..N {
                    let ab = a[r];
                    let x0 = _mm256_cvtepi8_epi16(load16(sub::<i8, 16>(&ab.qs, 0)));
                    let x1 = _mm256_cvtepi8_epi16(load16(sub::<i8, 16>(&ab.qs, 16)));
                    let isum =
                        _mm256_add_epi32(_mm256_madd_epi16(w0, x0), _mm256_madd_epi16(w1, x1));
                    let d = halves2(self.d, ab.d);
                    let d = _mm256_broadcastss_ps(_mm_mul_ss(d, _mm_movehdup_ps(d)));
                    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), d, acc[r]);
                }
            }
        }
    }

    /// `w · a[r]` for `N` activation rows, block by block over the common length; with one
    /// row (a GEMV) the weights are requested ahead into L2.
    ///
    /// # Safety
    /// The CPU must support AVX2, FMA and F16C.
    #[inline(always)]
    pub(super) unsafe fn rows_dot<W: RowBlock, const N: usize>(
        w: &[W],
        a: [&[W::Act]; N],
    ) -> [f32; N] {
        // SAFETY: the caller's features; every block is read through a reference.
        unsafe {
            let n = a.iter().fold(w.len(), |n, r| n.min(r.len()));
            let mut acc = [_mm256_setzero_ps(); N];
            let mut extra = [0.0f32; N];
            for i in 0..n {
                let wb = &w[i];
                if N == 1 {
                    prefetch_l2(wb, GEMV_PREFETCH_BYTES);
                }
                let mut blocks = [&a[0][0]; N];
                for (b, row) in blocks.iter_mut().zip(&a) {
                    *b = &row[i];
                }
                wb.accumulate(blocks, &mut acc, &mut extra);
            }
            let mut out = [0.0f32; N];
            for r in 0..N {
                out[r] = hsum256(acc[r]) + extra[r];
            }
            out
        }
    }

    /// A 16-bit float element of a weight or activation row.
    pub(super) trait Half: bytemuck::Pod {
        /// The value as `f32` (for the tail of a row).
        fn value(self) -> f32;
        /// Sixteen elements as two vectors of `f32`. Which element goes to which lane is the
        /// type's own choice, the same for weights and activations, so lane-wise products pair
        /// equal positions.
        ///
        /// # Safety
        /// The CPU must support AVX2 and F16C.
        unsafe fn widen16(h: &[Self; 16]) -> (__m256, __m256);
    }

    impl Half for Bf16Bits {
        #[inline(always)]
        fn value(self) -> f32 {
            self.to_f32()
        }
        #[inline(always)]
        unsafe fn widen16(h: &[Self; 16]) -> (__m256, __m256) {
            // SAFETY: 16 bf16 are 32 bytes; `loadu` has no alignment requirement.
            unsafe {
                // A bf16 is the top half of an f32: in each 32-bit lane the odd element is the
                // lane with its low half cleared, the even one the lane shifted up by 16.
                let x = _mm256_loadu_si256(h.as_ptr().cast());
                let odd = _mm256_and_si256(x, _mm256_set1_epi32(0xffff_0000_u32 as i32));
                let even = _mm256_slli_epi32::<16>(x);
                (_mm256_castsi256_ps(even), _mm256_castsi256_ps(odd))
            }
        }
    }

    impl Half for F16Bits {
        #[inline(always)]
        fn value(self) -> f32 {
            self.to_f32()
        }
        #[inline(always)]
        unsafe fn widen16(h: &[Self; 16]) -> (__m256, __m256) {
            // SAFETY: 16 halves are 32 bytes; `loadu` has no alignment requirement.
            unsafe {
                let lo = _mm_loadu_si128(h.as_ptr().cast());
                let hi = _mm_loadu_si128(h.as_ptr().add(8).cast());
                (_mm256_cvtph_ps(lo), _mm256_cvtph_ps(hi))
            }
        }
    }

    /// `w · a[r]` of 16-bit float rows for `N` activation rows: 16 values per step into two
    /// accumulators per row (products and sums in `f32`, each weight widened once for the `N`
    /// rows), the tail of the common length one by one.
    ///
    /// # Safety
    /// The CPU must support AVX2, FMA and F16C.
    #[inline(always)]
    pub(super) unsafe fn half_rows<E: Half, const N: usize>(w: &[E], a: [&[E]; N]) -> [f32; N] {
        // SAFETY: the caller's features; loads go through fixed-size references.
        unsafe {
            let n = a.iter().fold(w.len(), |n, r| n.min(r.len()));
            let mut acc = [[_mm256_setzero_ps(); 2]; N];
            let steps = n / 16;
            for i in 0..steps {
                if N == 1 {
                    prefetch_l2(sub::<E, 16>(w, 16 * i), GEMV_PREFETCH_BYTES);
                }
                let (w0, w1) = E::widen16(sub(w, 16 * i));
                for r in 0..N {
                    let (x0, x1) = E::widen16(sub(a[r], 16 * i));
                    acc[r][0] = _mm256_fmadd_ps(w0, x0, acc[r][0]);
                    acc[r][1] = _mm256_fmadd_ps(w1, x1, acc[r][1]);
                }
            }
            let mut out = [0.0f32; N];
            for r in 0..N {
                let tail: f32 = (16 * steps..n)
                    .map(|k| w[k].value() * a[r][k].value())
                    .sum();
                out[r] = hsum256(_mm256_add_ps(acc[r][0], acc[r][1])) + tail;
            }
            out
        }
    }

    /// `w[g] · a[r]` of 16-bit float rows for `G` weight rows and `N` activation rows, one
    /// accumulator each: every widened weight serves `N` rows and every widened activation
    /// `G` (two by four: 14 of the 16 vector registers).
    ///
    /// # Safety
    /// The CPU must support AVX2, FMA and F16C.
    #[inline(always)]
    pub(super) unsafe fn half_block<E: Half, const G: usize, const N: usize>(
        w: [&[E]; G],
        a: [&[E]; N],
    ) -> [[f32; N]; G] {
        // SAFETY: the caller's features; loads go through fixed-size references.
        unsafe {
            let n = a.iter().chain(&w).fold(usize::MAX, |n, r| n.min(r.len()));
            let mut acc = [[_mm256_setzero_ps(); N]; G];
            let steps = n / 16;
            for i in 0..steps {
                let wv = w.map(|row| E::widen16(sub(row, 16 * i)));
                for r in 0..N {
                    let (x0, x1) = E::widen16(sub(a[r], 16 * i));
                    for g in 0..G {
                        acc[g][r] = _mm256_fmadd_ps(wv[g].0, x0, acc[g][r]);
                        acc[g][r] = _mm256_fmadd_ps(wv[g].1, x1, acc[g][r]);
                    }
                }
            }
            let mut out = [[0.0f32; N]; G];
            for g in 0..G {
                for r in 0..N {
                    let tail: f32 = (16 * steps..n)
                        .map(|k| w[g][k].value() * a[r][k].value())
                        .sum();
                    out[g][r] = hsum256(acc[g][r]) + tail;
                }
            }
            out
        }
    }
}

/// The GEMV and GEMM of one block type from its `rows_dot`, with the per-call tiles where
/// the type has them.
macro_rules! block_rows {
    ($($w:ty, $a:ty => $gemv:ident, $gemm:ident, $ctor:ident $(, tiled $tiled:path)?;)*) => {$(
        $crate::kernel_api::target_entries! { "avx2,fma,f16c";
            fn $gemv(w: &[$w], a: &[$a], out: &mut [f32])
                => $crate::kernels::x86::avx2::plain_rows::gemv_body::<$w>;
            fn $gemm(w: &[$w], a: &[$a], out: &mut [f32])
                => $crate::kernels::x86::avx2::plain_rows::gemm_body::<$w>;
        }

        #[doc = concat!("The AVX2 plain-layout kernels of `", stringify!($w), "` rows.")]
        pub(crate) fn $ctor(
            token: $crate::kernels::x86::Avx2,
        ) -> $crate::kernel_api::Kernels<$w, $a, $a> {
            let _ = token;
            #[allow(unused_mut)]
            let mut kernels = $crate::kernel_api::Kernels::pair(
                $crate::cpu::KernelSet::Avx2,
                $gemv,
                $gemm,
            );
            $( kernels.tiled = Some($tiled(token)); )?
            kernels
        }
    )*};
}

/// One output per weight row of `w` (`a.len()` blocks each).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[inline(always)]
pub(super) unsafe fn gemv_body<W: imp::RowBlock>(w: &[W], a: &[W::Act], out: &mut [f32]) {
    for (o, row) in out.iter_mut().zip(w.chunks_exact(a.len().max(1))) {
        // SAFETY: the caller's features.
        *o = unsafe { imp::rows_dot::<W, 1>(row, [a])[0] };
    }
}

/// One weight row `w` times the activation rows of `a` (`w.len()` blocks each, four of them
/// in a quad), one output per activation row.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[inline(always)]
pub(super) unsafe fn gemm_body<W: imp::RowBlock>(w: &[W], a: &[W::Act], out: &mut [f32]) {
    let nb = w.len().max(1);
    if out.len() == 4 && a.len() == 4 * nb {
        let (r0, rest) = a.split_at(nb);
        let (r1, rest) = rest.split_at(nb);
        let (r2, r3) = rest.split_at(nb);
        // SAFETY: the caller's features.
        let v = unsafe { imp::rows_dot::<W, 4>(w, [r0, r1, r2, r3]) };
        out.copy_from_slice(&v);
        return;
    }
    for (o, row) in out.iter_mut().zip(a.chunks_exact(nb)) {
        // SAFETY: the caller's features.
        *o = unsafe { imp::rows_dot::<W, 1>(w, [row])[0] };
    }
}

pub(super) use block_rows;
pub(super) use imp::{
    bit_mask32, crumbs, group_scale_pairs, load16, load32, load_bsums, nibbles32, sub, RowBlock,
};

block_rows! {
    BlockQ2K, BlockQ8K => q2_k_gemv, q2_k_gemm, q2_k_rows, tiled super::plain_tiles::q2_k_tiled;
    BlockQ3K, BlockQ8K => q3_k_gemv, q3_k_gemm, q3_k_rows, tiled super::plain_tiles::q3_k_tiled;
    BlockIq4Xs, BlockQ8K => iq4_xs_gemv, iq4_xs_gemm, iq4_xs_rows;
    BlockQ8K, BlockQ8K => q8_k_gemv, q8_k_gemm, q8_k_rows;
    BlockQ4_1, BlockQ8_1 => q4_1_gemv, q4_1_gemm, q4_1_rows;
    BlockQ5_1, BlockQ8_1 => q5_1_gemv, q5_1_gemm, q5_1_rows;
    BlockQ8_1, BlockQ8_1 => q8_1_gemv, q8_1_gemm, q8_1_rows;
}

/// One output per weight row of `w` (`a.len()` values each).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[inline(always)]
unsafe fn half_gemv_body<E: imp::Half>(w: &[E], a: &[E], out: &mut [f32]) {
    for (o, row) in out.iter_mut().zip(w.chunks_exact(a.len().max(1))) {
        // SAFETY: the caller's features.
        *o = unsafe { imp::half_rows::<E, 1>(row, [a])[0] };
    }
}

/// One weight row times the activation rows of `a`, one output per activation row.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[inline(always)]
unsafe fn half_gemm_body<E: imp::Half>(w: &[E], a: &[E], out: &mut [f32]) {
    let k = w.len().max(1);
    if out.len() == 4 && a.len() == 4 * k {
        let (r0, rest) = a.split_at(k);
        let (r1, rest) = rest.split_at(k);
        let (r2, r3) = rest.split_at(k);
        // SAFETY: the caller's features.
        let v = unsafe { imp::half_rows::<E, 4>(w, [r0, r1, r2, r3]) };
        out.copy_from_slice(&v);
        return;
    }
    for (o, row) in out.iter_mut().zip(a.chunks_exact(k)) {
        // SAFETY: the caller's features.
        *o = unsafe { imp::half_rows::<E, 1>(w, [row])[0] };
    }
}

/// Two 16-bit float weight rows times two quads of activation rows (`out[g][m]`, quad 0's
/// rows then quad 1's), two rows by four at a time.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[inline(always)]
unsafe fn half_wide_body<E: imp::Half>(w: [&[E]; 2], a: [&[E]; 2], out: [&mut [f32]; 2]) {
    let k = w[0].len().max(1);
    let [o0, o1] = out;
    for (q, quad) in a.iter().enumerate() {
        let rows: [&[E]; 4] = std::array::from_fn(|m| &quad[m * k..(m + 1) * k]);
        // SAFETY: the caller's features.
        let v = unsafe { imp::half_block::<E, 2, 4>(w, rows) };
        o0[4 * q..4 * q + 4].copy_from_slice(&v[0]);
        o1[4 * q..4 * q + 4].copy_from_slice(&v[1]);
    }
}

target_entries! { "avx2,fma,f16c";
    fn bf16_wide(w: [&[Bf16Bits]; 2], a: [&[Bf16Bits]; 2], out: [&mut [f32]; 2]) => half_wide_body::<Bf16Bits>;
    fn f16_wide(w: [&[F16Bits]; 2], a: [&[F16Bits]; 2], out: [&mut [f32]; 2]) => half_wide_body::<F16Bits>;
}

target_entries! { "avx2,fma,f16c";
    fn bf16_gemv(w: &[Bf16Bits], a: &[Bf16Bits], out: &mut [f32]) => half_gemv_body::<Bf16Bits>;
    fn bf16_gemm(w: &[Bf16Bits], a: &[Bf16Bits], out: &mut [f32]) => half_gemm_body::<Bf16Bits>;
    fn f16_gemv(w: &[F16Bits], a: &[F16Bits], out: &mut [f32]) => half_gemv_body::<F16Bits>;
    fn f16_gemm(w: &[F16Bits], a: &[F16Bits], out: &mut [f32]) => half_gemm_body::<F16Bits>;
}

/// The AVX2 plain-layout kernels of bf16 rows (f32 products and sums; the GEMMs widen each
/// weight once for four activation rows, and each activation once for two weight rows).
pub(crate) fn bf16_rows(_: Avx2) -> Kernels<Bf16Bits, Bf16Bits, Bf16Bits> {
    Kernels {
        wide: Some(bf16_wide),
        ..Kernels::pair(KernelSet::Avx2, bf16_gemv, bf16_gemm)
    }
}

/// The AVX2 plain-layout kernels of f16 rows (f32 products and sums; the GEMMs widen each
/// weight once for four activation rows, and each activation once for two weight rows).
pub(crate) fn f16_rows(_: Avx2) -> Kernels<F16Bits, F16Bits, F16Bits> {
    Kernels {
        wide: Some(f16_wide),
        ..Kernels::pair(KernelSet::Avx2, f16_gemv, f16_gemm)
    }
}

#[cfg(test)]
mod tests;
