//! AVX2 (+FMA+F16C) versions of the activation quantizers of [`crate::activation`], producing
//! the same bytes as the portable ones.
//!
//! # Exactness
//!
//! A block takes the vector path only when its scale is "ordinary": every value finite, and the
//! inverse scale (`127 / amax` for Q8_0/Q8_1, `∓127 / max` for Q8_K) finite. Then every product
//! `v * id` is finite and at most `127 * (1 + 2^-23)` in magnitude, so the portable code's clamp
//! (and Q8_K's `min(127)`) never changes the rounded result and no NaN can occur: the products
//! are computed with the same single `f32` multiplication and rounded half to even by
//! `cvtps_epi32` (Rust code always runs with the default MXCSR). Block maxima are taken as
//! integer maxima of the sign-cleared bit patterns, which order finite non-negative floats like
//! their values and put NaN above infinity, so one comparison of the maximum with the infinity
//! pattern detects every non-finite block. All-zero blocks stay on the vector path (`id = 0`).
//!
//! Everything else (NaN or infinite activations, or a maximum below `127 / f32::MAX` ≈ 3.7e-37,
//! whose inverse scale overflows) is rare, and the portable quantizer handles the group of
//! blocks it occurs in (up to four consecutive Q8_0/Q8_1 blocks of a row, or one block column of
//! a quad's four rows), so the odd semantics there (NaN scales, zero or saturated quants from
//! zero or infinite inverse scales) are reproduced by construction.
//!
//! Scales are converted with `vcvtps2ph` in round-to-nearest-even, which is what
//! [`crate::blocks::F16Bits::from_f32`] computes.
//!
//! # Byte order
//!
//! `packs_epi32` and `packs_epi16` work per 128-bit lane, so packing the eight-lane `i32`
//! vectors of 32 values `c0..c8` (4-byte chunks) gives the dwords `c0 c2 c4 c6 | c1 c3 c5 c7`
//! ("pack order"). One `permutevar8x32` restores the natural order; for four rows interleaved in
//! chunks of 4 bytes, a 4x4 dword transpose inside each lane gives the interleaved vectors
//! directly, and chunks of 8 bytes need the same permutation after it.

use crate::activation::{ActFormat, ActQuantizer};
use crate::blocks::{
    BlockQ8K, BlockQ8Kx4, BlockQ8_0, BlockQ8_0x4, BlockQ8_0x4Abs, BlockQ8_0x4Sums, BlockQ8_1,
    BlockQ8_1x4,
};
use crate::kernels::x86::Avx2;

/// The AVX2 quantizers of a Q8_0 format whose quads interleave four rows in chunks of `IL`
/// bytes (4 or 8).
pub(crate) fn q8_0_interleaved<A, const IL: usize>(_: Avx2) -> ActQuantizer<A>
where
    A: ActFormat<Row = BlockQ8_0, Quad = BlockQ8_0x4>,
{
    const { assert!(IL == 4 || IL == 8) };
    let quad: fn([&[f32]; 4], &mut [BlockQ8_0x4]) = if IL == 4 {
        entry::q8_0_quad_il4
    } else {
        entry::q8_0_quad_il8
    };
    ActQuantizer {
        row: entry::q8_0_row,
        quad,
    }
}

/// Defines a constructor handing out one pair of `entry` functions for an AVX2 token.
macro_rules! constructor {
    ($(#[$doc:meta])* $name:ident: $row_ty:ty, $quad_ty:ty => $row:ident, $quad:ident) => {
        $(#[$doc])*
        pub(crate) fn $name<A>(_: Avx2) -> ActQuantizer<A>
        where
            A: ActFormat<Row = $row_ty, Quad = $quad_ty>,
        {
            ActQuantizer {
                row: entry::$row,
                quad: entry::$quad,
            }
        }
    };
}

constructor!(
    /// The AVX2 quantizers of plain Q8_0 rows (quads are four rows back to back).
    q8_0_plain: BlockQ8_0, BlockQ8_0 => q8_0_row, q8_0_rows4
);

/// The AVX2 quantizers of Q8_0 quads with f32 scales and quant sums times `OFFSET`.
pub(crate) fn q8_0_sums_interleaved<A, const OFFSET: i32>(_: Avx2) -> ActQuantizer<A>
where
    A: ActFormat<Row = BlockQ8_0, Quad = BlockQ8_0x4Sums>,
{
    ActQuantizer {
        row: entry::q8_0_row,
        quad: entry::q8_0_sums_quad::<OFFSET>,
    }
}

constructor!(
    /// The AVX2 quantizers of Q8_0 quads with f32 scales and the quants' absolute values.
    q8_0_abs_interleaved: BlockQ8_0, BlockQ8_0x4Abs => q8_0_row, q8_0_abs_quad
);
constructor!(
    /// The AVX2 quantizers of plain Q8_1 rows (quads are four rows back to back).
    q8_1_plain: BlockQ8_1, BlockQ8_1 => q8_1_row, q8_1_rows4
);
constructor!(
    /// The AVX2 quantizers of Q8_1 with four rows interleaved in chunks of 8 bytes.
    q8_1_interleaved: BlockQ8_1, BlockQ8_1x4 => q8_1_row, q8_1_quad
);
constructor!(
    /// The AVX2 quantizers of Q8_K with four rows interleaved (ggml's x86 4-row scale choice).
    q8_k_interleaved: BlockQ8K, BlockQ8Kx4 => q8_k_row, q8_k_quad
);
constructor!(
    /// The AVX2 quantizers of plain Q8_K rows (quads are four rows back to back).
    q8_k_plain: BlockQ8K, BlockQ8K => q8_k_row, q8_k_rows4
);

/// Safe entry points. They are private and only handed out by the constructors above, in
/// exchange for an [`Avx2`] token.
mod entry {
    use super::imp;
    use crate::blocks::{
        BlockQ8K, BlockQ8Kx4, BlockQ8_0, BlockQ8_0x4, BlockQ8_0x4Abs, BlockQ8_0x4Sums, BlockQ8_1,
        BlockQ8_1x4,
    };

    /// Four plain rows back to back, split exactly as the portable `plain_format!` quads are.
    fn rows4<R>(x: [&[f32]; 4], out: &mut [R], row: fn(&[f32], &mut [R])) {
        let nb = out.len() / 4;
        for (xs, dst) in x.iter().zip(out.chunks_exact_mut(nb.max(1))) {
            row(xs, dst);
        }
    }

    /// Safe wrappers of the `imp` kernels.
    macro_rules! entries {
        ($($name:ident($x:ty, $out:ty) => $kernel:path;)*) => {$(
            pub(super) fn $name(x: $x, out: &mut [$out]) {
                // SAFETY: only handed out in exchange for an `Avx2` token (AVX2+FMA+F16C) was
                // checked.
                unsafe { $kernel(x, out) }
            }
        )*};
    }

    entries! {
        q8_0_row(&[f32], BlockQ8_0) => imp::q8_0_row;
        q8_0_quad_il4([&[f32]; 4], BlockQ8_0x4) => imp::q8_0_quad::<4>;
        q8_0_quad_il8([&[f32]; 4], BlockQ8_0x4) => imp::q8_0_quad::<8>;
        q8_1_row(&[f32], BlockQ8_1) => imp::q8_1_row;
        q8_1_quad([&[f32]; 4], BlockQ8_1x4) => imp::q8_1_quad;
        q8_k_row(&[f32], BlockQ8K) => imp::q8_k_row;
        q8_k_quad([&[f32]; 4], BlockQ8Kx4) => imp::q8_k_quad;
    }

    pub(super) fn q8_0_sums_quad<const OFFSET: i32>(x: [&[f32]; 4], out: &mut [BlockQ8_0x4Sums]) {
        // SAFETY: only handed out in exchange for an `Avx2` token (AVX2+FMA+F16C).
        unsafe { imp::q8_0_sums_quad::<OFFSET>(x, out) }
    }
    pub(super) fn q8_0_abs_quad(x: [&[f32]; 4], out: &mut [BlockQ8_0x4Abs]) {
        // SAFETY: as above.
        unsafe { imp::q8_0_abs_quad(x, out) }
    }
    pub(super) fn q8_0_rows4(x: [&[f32]; 4], out: &mut [BlockQ8_0]) {
        rows4(x, out, q8_0_row)
    }
    pub(super) fn q8_1_rows4(x: [&[f32]; 4], out: &mut [BlockQ8_1]) {
        rows4(x, out, q8_1_row)
    }
    pub(super) fn q8_k_rows4(x: [&[f32]; 4], out: &mut [BlockQ8K]) {
        rows4(x, out, q8_k_row)
    }
}

/// The kernels: safe `#[target_feature]` functions (callable without `unsafe` only from code
/// with the same features). The small helpers carry the same attribute with `#[inline]`, so they
/// inline into the kernels and their intrinsics need no `unsafe`; memory is only touched through
/// bounds-checked fixed-size arrays.
mod imp {
    use std::arch::x86_64::*;

    use bytemuck::Zeroable;

    use crate::activation::{
        interleave_q8_0, interleave_q8_k, quantize_block_q8_0, quantize_block_q8_1,
        quantize_block_q8_k, quantize_block_q8_k_quad_row, with_abs, with_offsets,
    };
    use crate::blocks::{
        BlockQ8K, BlockQ8Kx4, BlockQ8_0, BlockQ8_0x4, BlockQ8_0x4Abs, BlockQ8_0x4Sums, BlockQ8_1,
        BlockQ8_1x4, F16Bits,
    };
    use crate::types::QK_K;

    /// Bit pattern of `+inf`: sign-cleared patterns at or above it are not finite.
    const INF_BITS: i32 = 0x7f80_0000;
    const ABS_MASK: i32 = 0x7fff_ffff;

    /// Block `i` of `N` values of a row (panics like the portable code on a short row).
    #[inline]
    fn block<const N: usize>(row: &[f32], i: usize) -> &[f32; N] {
        row[i * N..(i + 1) * N]
            .try_into()
            .expect("a slice of exactly N values")
    }

    /// Values `8k .. 8k + 8` of `x`.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn load<const N: usize>(x: &[f32; N], k: usize) -> __m256 {
        let v: &[f32; 8] = x[8 * k..8 * k + 8].try_into().expect("8 values");
        // SAFETY: `v` is 8 floats; `loadu` has no alignment requirement.
        unsafe { _mm256_loadu_ps(v.as_ptr()) }
    }

    /// Stores 32 quants at `dst[at..at + 32]`.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn store_i8(dst: &mut [i8], at: usize, v: __m256i) {
        let d: &mut [i8; 32] = (&mut dst[at..at + 32]).try_into().expect("32 bytes");
        // SAFETY: `d` is 32 bytes; `storeu` has no alignment requirement.
        unsafe { _mm256_storeu_si256(d.as_mut_ptr().cast(), v) }
    }

    /// Stores 16 `i16` at `dst[at..at + 16]`.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn store_i16(dst: &mut [i16], at: usize, v: __m256i) {
        let d: &mut [i16; 16] = (&mut dst[at..at + 16]).try_into().expect("16 values");
        // SAFETY: `d` is 32 bytes; `storeu` has no alignment requirement.
        unsafe { _mm256_storeu_si256(d.as_mut_ptr().cast(), v) }
    }

    /// The four f32 lanes of `v`, each rounded to f16 (nearest even).
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn to_f16x4(v: __m128) -> [F16Bits; 4] {
        let h = _mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
        let b = (_mm_cvtsi128_si64(h) as u64).to_le_bytes();
        [
            F16Bits([b[0], b[1]]),
            F16Bits([b[2], b[3]]),
            F16Bits([b[4], b[5]]),
            F16Bits([b[6], b[7]]),
        ]
    }

    /// The four lanes of `v`.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn lanes(v: __m128) -> [f32; 4] {
        let mut out = [0.0f32; 4];
        // SAFETY: `out` holds 4 floats; `storeu` has no alignment requirement.
        unsafe { _mm_storeu_ps(out.as_mut_ptr(), v) };
        out
    }

    /// Lane `k` (0..4) of `v` in all eight lanes.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn broadcast(v: __m128, k: usize) -> __m256 {
        _mm256_permutevar8x32_ps(_mm256_castps128_ps256(v), _mm256_set1_epi32(k as i32))
    }

    /// Sign-cleared bit patterns of 8 values.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn abs_bits(v: __m256) -> __m256i {
        _mm256_and_si256(_mm256_castps_si256(v), _mm256_set1_epi32(ABS_MASK))
    }

    /// Per-vector reduction `[op(v0), op(v1), op(v2), op(v3)]` of four vectors of `i32` with a
    /// lane-wise `op` (`$wide` on 256 bits, `$narrow` on 128): a transpose that reduces as it
    /// goes (both halves of a lane pair meet in one `op`).
    macro_rules! reduce4 {
        ($v:expr, $wide:ident, $narrow:ident) => {{
            let v = $v;
            let t01 = $wide(
                _mm256_unpacklo_epi32(v[0], v[1]),
                _mm256_unpackhi_epi32(v[0], v[1]),
            );
            let t23 = $wide(
                _mm256_unpacklo_epi32(v[2], v[3]),
                _mm256_unpackhi_epi32(v[2], v[3]),
            );
            let u = $wide(
                _mm256_unpacklo_epi64(t01, t23),
                _mm256_unpackhi_epi64(t01, t23),
            );
            $narrow(_mm256_castsi256_si128(u), _mm256_extracti128_si256::<1>(u))
        }};
    }

    /// `[max(v0), max(v1), max(v2), max(v3)]`.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn hmax4(v: [__m256i; 4]) -> __m128i {
        reduce4!(v, _mm256_max_epi32, _mm_max_epi32)
    }

    /// `[sum(v0), sum(v1), sum(v2), sum(v3)]`.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn hsum4(v: [__m256i; 4]) -> __m128i {
        reduce4!(v, _mm256_add_epi32, _mm_add_epi32)
    }

    /// Maximum of the eight `i32` lanes.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn hmax1(v: __m256i) -> i32 {
        let m = _mm_max_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let m = _mm_max_epi32(m, _mm_shuffle_epi32::<0b01_00_11_10>(m));
        let m = _mm_max_epi32(m, _mm_shuffle_epi32::<0b10_11_00_01>(m));
        _mm_cvtsi128_si32(m)
    }

    /// True when all four lanes of `mask` are set.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn all4(mask: __m128i) -> bool {
        _mm_movemask_ps(_mm_castsi128_ps(mask)) == 0xf
    }

    /// Packs four vectors of `i32` quants (values `8j .. 8j + 8` in vector `j`) into 32 bytes in
    /// pack order, also returning the two `i16` halves (values 0..16 and 16..32, in some order).
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn pack(q: [__m256i; 4]) -> (__m256i, __m256i, __m256i) {
        let a = _mm256_packs_epi32(q[0], q[1]);
        let b = _mm256_packs_epi32(q[2], q[3]);
        (_mm256_packs_epi16(a, b), a, b)
    }

    /// Pack order to natural order.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn natural(p: __m256i) -> __m256i {
        _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
    }

    /// Four rows' 32 quants in pack order to the 128 bytes of ggml's interleaving in chunks of
    /// 4 bytes: output vector `k` is chunk `2k` of rows 0..4 then chunk `2k + 1` of rows 0..4,
    /// which in pack order are dword `k` of the low lanes and dword `k` of the high lanes.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn interleave4(p: [__m256i; 4]) -> [__m256i; 4] {
        let t0 = _mm256_unpacklo_epi32(p[0], p[1]);
        let t1 = _mm256_unpackhi_epi32(p[0], p[1]);
        let t2 = _mm256_unpacklo_epi32(p[2], p[3]);
        let t3 = _mm256_unpackhi_epi32(p[2], p[3]);
        [
            _mm256_unpacklo_epi64(t0, t2),
            _mm256_unpackhi_epi64(t0, t2),
            _mm256_unpacklo_epi64(t1, t3),
            _mm256_unpackhi_epi64(t1, t3),
        ]
    }

    /// As [`interleave4`] in chunks of 8 bytes: the same dwords, paired up across the lanes.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn interleave8(p: [__m256i; 4]) -> [__m256i; 4] {
        let v = interleave4(p);
        [natural(v[0]), natural(v[1]), natural(v[2]), natural(v[3])]
    }

    /// Four Q8_0 (or Q8_1) blocks quantized, when all four have ordinary scales.
    struct Q8x4 {
        /// The quants of block `k`, in pack order.
        q: [__m256i; 4],
        /// `amax / 127` of each block, the unrounded scale.
        dm: __m128,
        /// Sum of each block's quants (only when asked for).
        sums: __m128i,
    }

    /// Quantizes four blocks of 32 values like `quantize_block_q8_0`, or `None` when one of
    /// them has NaN/infinite values or an infinite `127 / amax`.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn q8_0_x4<const SUMS: bool>(x: [&[f32; 32]; 4]) -> Option<Q8x4> {
        let mut mx = [_mm256_setzero_si256(); 4];
        for (m, b) in mx.iter_mut().zip(x) {
            *m = _mm256_max_epi32(
                _mm256_max_epi32(abs_bits(load(b, 0)), abs_bits(load(b, 1))),
                _mm256_max_epi32(abs_bits(load(b, 2)), abs_bits(load(b, 3))),
            );
        }
        let mbits = hmax4(mx);
        let m = _mm_castsi128_ps(mbits);
        let zero = _mm_cmpeq_ps(m, _mm_setzero_ps());
        let id = _mm_andnot_ps(zero, _mm_div_ps(_mm_set1_ps(127.0), m));
        let inf = _mm_set1_epi32(INF_BITS);
        // `id` is never negative, so a signed comparison of its bits tests finiteness too.
        let ordinary = _mm_and_si128(
            _mm_cmpgt_epi32(inf, mbits),
            _mm_cmpgt_epi32(inf, _mm_castps_si128(id)),
        );
        if !all4(ordinary) {
            return None;
        }
        let mut q = [_mm256_setzero_si256(); 4];
        let mut sums = [_mm256_setzero_si256(); 4];
        for (k, b) in x.iter().enumerate() {
            let idk = broadcast(id, k);
            let i = [
                _mm256_cvtps_epi32(_mm256_mul_ps(load(b, 0), idk)),
                _mm256_cvtps_epi32(_mm256_mul_ps(load(b, 1), idk)),
                _mm256_cvtps_epi32(_mm256_mul_ps(load(b, 2), idk)),
                _mm256_cvtps_epi32(_mm256_mul_ps(load(b, 3), idk)),
            ];
            if SUMS {
                sums[k] =
                    _mm256_add_epi32(_mm256_add_epi32(i[0], i[1]), _mm256_add_epi32(i[2], i[3]));
            }
            q[k] = pack(i).0;
        }
        Some(Q8x4 {
            q,
            dm: _mm_div_ps(m, _mm_set1_ps(127.0)),
            sums: if SUMS {
                hsum4(sums)
            } else {
                _mm_setzero_si128()
            },
        })
    }

    /// Blocks `i .. i + 4` of a row, the missing ones past `nb` replaced by block `i` (their
    /// results are not stored).
    #[inline]
    fn four_blocks(x: &[f32], i: usize, nb: usize) -> [&[f32; 32]; 4] {
        let at = |k: usize| block::<32>(x, if i + k < nb { i + k } else { i });
        [at(0), at(1), at(2), at(3)]
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn q8_0_row(x: &[f32], out: &mut [BlockQ8_0]) {
        let nb = out.len().min(x.len() / 32);
        for (g, dst) in out[..nb].chunks_mut(4).enumerate() {
            let b = four_blocks(x, 4 * g, nb);
            match q8_0_x4::<false>(b) {
                Some(r) => {
                    let d = to_f16x4(r.dm);
                    for (k, o) in dst.iter_mut().enumerate() {
                        o.d = d[k];
                        store_i8(&mut o.qs, 0, natural(r.q[k]));
                    }
                }
                None => {
                    for (o, xs) in dst.iter_mut().zip(b) {
                        *o = quantize_block_q8_0(xs);
                    }
                }
            }
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn q8_1_row(x: &[f32], out: &mut [BlockQ8_1]) {
        let nb = out.len().min(x.len() / 32);
        for (g, dst) in out[..nb].chunks_mut(4).enumerate() {
            let b = four_blocks(x, 4 * g, nb);
            match q8_0_x4::<true>(b) {
                Some(r) => {
                    let d = to_f16x4(r.dm);
                    let s = to_f16x4(_mm_mul_ps(r.dm, _mm_cvtepi32_ps(r.sums)));
                    for (k, o) in dst.iter_mut().enumerate() {
                        o.d = d[k];
                        o.s = s[k];
                        store_i8(&mut o.qs, 0, natural(r.q[k]));
                    }
                }
                None => {
                    for (o, xs) in dst.iter_mut().zip(b) {
                        *o = quantize_block_q8_1(xs);
                    }
                }
            }
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn q8_0_quad<const IL: usize>(x: [&[f32]; 4], out: &mut [BlockQ8_0x4]) {
        assert!(IL == 4 || IL == 8);
        for (i, quad) in out.iter_mut().enumerate() {
            let b = x.map(|row| block::<32>(row, i));
            match q8_0_x4::<false>(b) {
                Some(r) => {
                    quad.d = to_f16x4(r.dm);
                    let v = if IL == 4 {
                        interleave4(r.q)
                    } else {
                        interleave8(r.q)
                    };
                    for (k, &vk) in v.iter().enumerate() {
                        store_i8(&mut quad.qs, 32 * k, vk);
                    }
                }
                None => {
                    let rows = [
                        quantize_block_q8_0(b[0]),
                        quantize_block_q8_0(b[1]),
                        quantize_block_q8_0(b[2]),
                        quantize_block_q8_0(b[3]),
                    ];
                    *quad = interleave_q8_0(&rows, IL);
                }
            }
        }
    }

    /// A block column of a quad as [`q8_0_quad`] interleaves it in chunks of 8 bytes, with the
    /// scales widened back to f32 (the f16 values, as the kernels must use) and the rows' quant
    /// sums times `OFFSET`; `None` on the portable path's blocks (see [`q8_0_x4`]).
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn q8_0_x4_offsets<const OFFSET: i32>(
        x: [&[f32; 32]; 4],
    ) -> Option<([f32; 4], [i32; 4], [__m256i; 4])> {
        let r = q8_0_x4::<true>(x)?;
        let d = _mm_cvtph_ps(_mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(r.dm));
        let mut offsets = [0i32; 4];
        let scaled = _mm_mullo_epi32(r.sums, _mm_set1_epi32(OFFSET));
        // SAFETY: `offsets` holds 4 i32; `storeu` has no alignment requirement.
        unsafe { _mm_storeu_si128(offsets.as_mut_ptr().cast(), scaled) };
        Some((lanes(d), offsets, interleave8(r.q)))
    }

    /// The portable quantization of one block column of a quad, interleaved in chunks of 8.
    fn q8_0_column_portable(x: [&[f32; 32]; 4]) -> BlockQ8_0x4 {
        interleave_q8_0(&x.map(|b| quantize_block_q8_0(b)), 8)
    }

    /// Quads of Q8_0 with f32 scales and quant sums times `OFFSET` in one pass (quantizing
    /// first and summing the stored bytes after took twice as long).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn q8_0_sums_quad<const OFFSET: i32>(x: [&[f32]; 4], out: &mut [BlockQ8_0x4Sums]) {
        for (i, quad) in out.iter_mut().enumerate() {
            let b = x.map(|row| block::<32>(row, i));
            match q8_0_x4_offsets::<OFFSET>(b) {
                Some((d, offsets, qs)) => {
                    quad.d = d;
                    quad.offsets = offsets;
                    for (k, &vk) in qs.iter().enumerate() {
                        store_i8(&mut quad.qs, 32 * k, vk);
                    }
                }
                None => *quad = with_offsets::<OFFSET>(&q8_0_column_portable(b)),
            }
        }
    }

    /// Quads of Q8_0 with f32 scales, 128 times the quant sums and the quants' magnitudes.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn q8_0_abs_quad(x: [&[f32]; 4], out: &mut [BlockQ8_0x4Abs]) {
        for (i, quad) in out.iter_mut().enumerate() {
            let b = x.map(|row| block::<32>(row, i));
            match q8_0_x4_offsets::<128>(b) {
                Some((d, offsets, qs)) => {
                    quad.d = d;
                    quad.offsets = offsets;
                    for (k, &vk) in qs.iter().enumerate() {
                        store_i8(&mut quad.qs, 32 * k, vk);
                        let abs: &mut [u8; 32] = (&mut quad.abs[32 * k..32 * k + 32])
                            .try_into()
                            .expect("32 bytes");
                        // SAFETY: `abs` is 32 bytes; `storeu` has no alignment requirement.
                        unsafe {
                            _mm256_storeu_si256(abs.as_mut_ptr().cast(), _mm256_abs_epi8(vk))
                        };
                    }
                }
                None => *quad = with_abs(&q8_0_column_portable(b)),
            }
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn q8_1_quad(x: [&[f32]; 4], out: &mut [BlockQ8_1x4]) {
        for (i, quad) in out.iter_mut().enumerate() {
            let b = x.map(|row| block::<32>(row, i));
            match q8_0_x4::<true>(b) {
                Some(r) => {
                    quad.d = to_f16x4(r.dm);
                    quad.s = to_f16x4(_mm_mul_ps(r.dm, _mm_cvtepi32_ps(r.sums)));
                    for (k, &vk) in interleave8(r.q).iter().enumerate() {
                        store_i8(&mut quad.qs, 32 * k, vk);
                    }
                }
                None => {
                    *quad = BlockQ8_1x4::zeroed();
                    for (m, xs) in b.iter().enumerate() {
                        let r = quantize_block_q8_1(*xs);
                        quad.d[m] = r.d;
                        quad.s[m] = r.s;
                        for (c, chunk) in r.qs.chunks_exact(8).enumerate() {
                            let dst = (c * 4 + m) * 8;
                            quad.qs[dst..dst + 8].copy_from_slice(chunk);
                        }
                    }
                }
            }
        }
    }

    /// Lane-wise maxima of the bit patterns of 256 values: sign-cleared (the magnitudes), and
    /// when `SIGNED` also raw as `i32` (the largest positive value's pattern, if there is one)
    /// and raw as `u32` (the pattern of the negative value of largest magnitude, if any).
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn max_256<const SIGNED: bool>(x: &[f32; QK_K]) -> [__m256i; 3] {
        let mut a = [_mm256_setzero_si256(); 4];
        let mut s = [_mm256_set1_epi32(i32::MIN); 4];
        let mut u = [_mm256_setzero_si256(); 4];
        for j in 0..8 {
            for t in 0..4 {
                let v = load(x, 4 * j + t);
                a[t] = _mm256_max_epi32(a[t], abs_bits(v));
                if SIGNED {
                    s[t] = _mm256_max_epi32(s[t], _mm256_castps_si256(v));
                    u[t] = _mm256_max_epu32(u[t], _mm256_castps_si256(v));
                }
            }
        }
        [
            _mm256_max_epi32(_mm256_max_epi32(a[0], a[1]), _mm256_max_epi32(a[2], a[3])),
            _mm256_max_epi32(_mm256_max_epi32(s[0], s[1]), _mm256_max_epi32(s[2], s[3])),
            _mm256_max_epu32(_mm256_max_epu32(u[0], u[1]), _mm256_max_epu32(u[2], u[3])),
        ]
    }

    /// Index of the first of 256 values whose sign-cleared pattern is `mbits`.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn first_abs_eq(x: &[f32; QK_K], mbits: i32) -> Option<usize> {
        let want = _mm256_set1_epi32(mbits);
        for j in 0..32 {
            let eq = _mm256_cmpeq_epi32(abs_bits(load(x, j)), want);
            let mask = _mm256_movemask_ps(_mm256_castsi256_ps(eq));
            if mask != 0 {
                return Some(8 * j + mask.trailing_zeros() as usize);
            }
        }
        None
    }

    /// The quants of 256 values at the (finite) inverse scale in `s` (all lanes), in pack order
    /// per 32 values, and the 16 sums of 16 quants in natural order.
    ///
    /// The sums come from the `i16` halves of the packing: `a` holds the 16 quants of one sum
    /// and `b` those of the next, so three rounds of `hadd_epi16` leave each lane with a partial
    /// sum of every group, and adding the two lanes finishes them (all partials stay below
    /// `16 * 128`).
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn q8_k_quants(x: &[f32; QK_K], s: __m256, q: &mut [__m256i; 8]) -> __m256i {
        let mut h = [_mm256_setzero_si256(); 8];
        for (j, (qj, hj)) in q.iter_mut().zip(h.iter_mut()).enumerate() {
            let i = [
                _mm256_cvtps_epi32(_mm256_mul_ps(s, load(x, 4 * j))),
                _mm256_cvtps_epi32(_mm256_mul_ps(s, load(x, 4 * j + 1))),
                _mm256_cvtps_epi32(_mm256_mul_ps(s, load(x, 4 * j + 2))),
                _mm256_cvtps_epi32(_mm256_mul_ps(s, load(x, 4 * j + 3))),
            ];
            let (p, a, b) = pack(i);
            *qj = p;
            *hj = _mm256_hadd_epi16(a, b);
        }
        let k0 = _mm256_hadd_epi16(h[0], h[1]);
        let k1 = _mm256_hadd_epi16(h[2], h[3]);
        let k2 = _mm256_hadd_epi16(h[4], h[5]);
        let k3 = _mm256_hadd_epi16(h[6], h[7]);
        let l0 = _mm256_hadd_epi16(k0, k1);
        let l1 = _mm256_hadd_epi16(k2, k3);
        _mm256_add_epi16(
            _mm256_permute2x128_si256::<0x20>(l0, l1),
            _mm256_permute2x128_si256::<0x31>(l0, l1),
        )
    }

    /// One block like `quantize_block_q8_k`: the scale's sign is that of the first value of
    /// largest magnitude.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn q8_k_block(x: &[f32; QK_K], out: &mut BlockQ8K) {
        let [a, s, u] = max_256::<true>(x);
        let mbits = hmax1(a);
        if mbits == 0 {
            *out = BlockQ8K::zeroed();
            return;
        }
        let m = f32::from_bits(mbits as u32);
        // The scale's sign is that of the first value of largest magnitude; only when both
        // `+amax` and `-amax` occur does that need a search.
        let positive = hmax1(s) == mbits;
        let negative = hmax1(_mm256_xor_si256(u, _mm256_set1_epi32(i32::MIN))) == mbits;
        let max = match (positive, negative) {
            _ if mbits >= INF_BITS => f32::NAN,
            (true, false) => m,
            (false, true) => -m,
            _ => match first_abs_eq(x, mbits) {
                Some(i) => x[i],
                None => f32::NAN,
            },
        };
        let iscale = -127.0 / max;
        if !iscale.is_finite() {
            *out = quantize_block_q8_k(x);
            return;
        }
        let mut q = [_mm256_setzero_si256(); 8];
        let sums = q8_k_quants(x, _mm256_set1_ps(iscale), &mut q);
        for (j, &qj) in q.iter().enumerate() {
            store_i8(&mut out.qs, 32 * j, natural(qj));
        }
        store_i16(&mut out.bsums, 0, sums);
        out.d = 1.0 / iscale;
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn q8_k_row(x: &[f32], out: &mut [BlockQ8K]) {
        for (o, xs) in out.iter_mut().zip(x.chunks_exact(QK_K)) {
            q8_k_block(xs.try_into().expect("256 values"), o);
        }
    }

    /// One quad like `Q8KInterleaved::quantize_quad`; false (nothing written) when a row has
    /// no ordinary scale.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn q8_k_quad_block(x: [&[f32; QK_K]; 4], out: &mut BlockQ8Kx4) -> bool {
        let mut a = [_mm256_setzero_si256(); 4];
        let mut s = [_mm256_setzero_si256(); 4];
        for m in 0..4 {
            [a[m], s[m], _] = max_256::<true>(x[m]);
        }
        let mbits = hmax4(a);
        let m = _mm_castsi128_ps(mbits);
        // ggml's 4-row routine negates the scale when `+amax` itself occurs in the row.
        let positive_max = _mm_cmpeq_epi32(hmax4(s), mbits);
        let sign = _mm_and_ps(_mm_castsi128_ps(positive_max), _mm_set1_ps(-0.0));
        let zero = _mm_cmpeq_ps(m, _mm_setzero_ps());
        let iscale = _mm_andnot_ps(zero, _mm_xor_ps(_mm_div_ps(_mm_set1_ps(127.0), m), sign));
        let inf = _mm_set1_epi32(INF_BITS);
        let iscale_abs = _mm_and_si128(_mm_castps_si128(iscale), _mm_set1_epi32(ABS_MASK));
        let ordinary = _mm_and_si128(
            _mm_cmpgt_epi32(inf, mbits),
            _mm_cmpgt_epi32(inf, iscale_abs),
        );
        if !all4(ordinary) {
            return false;
        }
        let mut q = [[_mm256_setzero_si256(); 8]; 4];
        let mut sums = [_mm256_setzero_si256(); 4];
        for (row, (qm, sm)) in q.iter_mut().zip(sums.iter_mut()).enumerate() {
            *sm = q8_k_quants(x[row], broadcast(iscale, row), qm);
        }
        for (j, dst) in out.qs.chunks_exact_mut(128).enumerate() {
            let v = interleave8([q[0][j], q[1][j], q[2][j], q[3][j]]);
            for (k, &vk) in v.iter().enumerate() {
                store_i8(dst, 32 * k, vk);
            }
        }
        // ggml's bsums order puts sums 4c .. 4c + 4 of rows 0..4 together: a 4x4 transpose of
        // 8-byte chunks.
        let t0 = _mm256_unpacklo_epi64(sums[0], sums[1]);
        let t1 = _mm256_unpackhi_epi64(sums[0], sums[1]);
        let t2 = _mm256_unpacklo_epi64(sums[2], sums[3]);
        let t3 = _mm256_unpackhi_epi64(sums[2], sums[3]);
        let v = [
            _mm256_permute2x128_si256::<0x20>(t0, t2),
            _mm256_permute2x128_si256::<0x20>(t1, t3),
            _mm256_permute2x128_si256::<0x31>(t0, t2),
            _mm256_permute2x128_si256::<0x31>(t1, t3),
        ];
        for (k, &vk) in v.iter().enumerate() {
            store_i16(&mut out.bsums, 16 * k, vk);
        }
        out.d = lanes(_mm_andnot_ps(zero, _mm_div_ps(_mm_set1_ps(1.0), iscale)));
        true
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn q8_k_quad(x: [&[f32]; 4], out: &mut [BlockQ8Kx4]) {
        for (i, quad) in out.iter_mut().enumerate() {
            let b = [
                block::<QK_K>(x[0], i),
                block::<QK_K>(x[1], i),
                block::<QK_K>(x[2], i),
                block::<QK_K>(x[3], i),
            ];
            if !q8_k_quad_block(b, quad) {
                let rows = [
                    quantize_block_q8_k_quad_row(b[0]),
                    quantize_block_q8_k_quad_row(b[1]),
                    quantize_block_q8_k_quad_row(b[2]),
                    quantize_block_q8_k_quad_row(b[3]),
                ];
                *quad = interleave_q8_k(&rows);
            }
        }
    }
}

#[cfg(test)]
mod tests;
