//! Lane moves shared by the 512-bit kernels of the 8x8 layouts, where row `r` of a row group
//! owns dword lanes `2r` and `2r + 1` of a zmm.

use std::arch::x86_64::*;

use crate::blocks::F16Bits;

/// Indices of lanes `2r` (even) and `2r + 1` (odd), for `r` in 0..8, twice.
#[inline(always)]
unsafe fn pair_indices() -> [__m512i; 2] {
    // SAFETY: register-only AVX-512 F per the caller's contract.
    unsafe {
        [
            _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 2, 4, 6, 8, 10, 12, 14),
            _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 1, 3, 5, 7, 9, 11, 13, 15),
        ]
    }
}

/// Row `r`'s f32 result: lanes `2r` plus `2r + 1`.
#[inline(always)]
pub(super) unsafe fn fold_pairs_ps(v: __m512) -> __m256 {
    // SAFETY: register-only AVX-512 F per the caller's contract.
    unsafe {
        let [even, odd] = pair_indices();
        let sum = _mm512_add_ps(
            _mm512_permutexvar_ps(even, v),
            _mm512_permutexvar_ps(odd, v),
        );
        _mm512_castps512_ps256(sum)
    }
}

/// Row `r`'s i32 sum: lanes `2r` plus `2r + 1`.
#[inline(always)]
pub(super) unsafe fn fold_pairs_epi32(v: __m512i) -> __m256i {
    // SAFETY: register-only AVX-512 F per the caller's contract.
    unsafe {
        let [even, odd] = pair_indices();
        let sum = _mm512_add_epi32(
            _mm512_permutexvar_epi32(even, v),
            _mm512_permutexvar_epi32(odd, v),
        );
        _mm512_castsi512_si256(sum)
    }
}

/// 16 rows, one per lane, from two row groups: lane `r` is lane `2r + part` of `a` for
/// `r < 8`, of `b` (row `r - 8`) for `r >= 8`.
#[inline(always)]
pub(super) unsafe fn pick_rows(a: __m512i, b: __m512i, part: usize) -> __m512i {
    // SAFETY: register-only AVX-512 F per the caller's contract.
    unsafe {
        let idx = if part == 0 {
            _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30)
        } else {
            _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31)
        };
        _mm512_permutex2var_epi32(a, idx, b)
    }
}

/// `lo` in the low 256 bits, `hi` in the high.
#[inline(always)]
pub(super) unsafe fn concat(lo: __m256i, hi: __m256i) -> __m512i {
    // SAFETY: register-only AVX-512 F per the caller's contract.
    unsafe { _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi) }
}

/// The scales of two row groups as 16 f32, group `a`'s first.
#[inline(always)]
pub(super) unsafe fn f16x16(a: &[F16Bits; 8], b: &[F16Bits; 8]) -> __m512 {
    // SAFETY: 8 halves are 16 bytes each; AVX-512 F and F16C per the caller's contract.
    unsafe {
        let lo = _mm256_cvtph_ps(_mm_loadu_si128(a.as_ptr() as *const __m128i));
        let hi = _mm256_cvtph_ps(_mm_loadu_si128(b.as_ptr() as *const __m128i));
        _mm512_insertf32x8::<1>(_mm512_castps256_ps512(lo), hi)
    }
}

/// A row group's 8 results of one piece of a GEMV's row into `out[..8]`: stored by the first
/// piece, added by the later ones (GEMVs that prepare the activations a piece at a time).
#[inline(always)]
pub(super) unsafe fn store_piece(out: &mut [f32], rows: __m256, first: bool) {
    assert!(out.len() >= 8);
    // SAFETY: 8 floats in bounds (asserted above); unaligned; AVX per the caller's contract.
    unsafe {
        let rows = if first {
            rows
        } else {
            _mm256_add_ps(rows, _mm256_loadu_ps(out.as_ptr()))
        };
        _mm256_storeu_ps(out.as_mut_ptr(), rows);
    }
}

/// The 16 x 16 transpose of dwords: lane `r` of output `i` is lane `i` of input `r`.
///
/// # Safety
/// The CPU must support AVX-512 F.
#[inline(always)]
pub(super) unsafe fn transpose16(rows: [__m512i; 16]) -> [__m512i; 16] {
    // SAFETY: register-only AVX-512 F per the caller's contract.
    unsafe {
        // Within each 128-bit lane `L`: pairs of rows, then quartets, so that `u[4k + c]` holds
        // dword `4L + c` of rows `4k..4k + 4` in lane `L`.
        // (Loops, not `array::from_fn`: a closure does not inherit the target features, and
        // the intrinsics would not be inlined into it.)
        let mut t = [_mm512_setzero_si512(); 16];
        for k in 0..8 {
            let (a, b) = (rows[2 * k], rows[2 * k + 1]);
            t[2 * k] = _mm512_unpacklo_epi32(a, b);
            t[2 * k + 1] = _mm512_unpackhi_epi32(a, b);
        }
        let mut u = [_mm512_setzero_si512(); 16];
        for k in 0..4 {
            for h in 0..2 {
                let (a, b) = (t[4 * k + h], t[4 * k + 2 + h]);
                u[4 * k + 2 * h] = _mm512_unpacklo_epi64(a, b);
                u[4 * k + 2 * h + 1] = _mm512_unpackhi_epi64(a, b);
            }
        }
        // Then the 4 x 4 transpose of 128-bit lanes across quartets.
        let mut out = [_mm512_setzero_si512(); 16];
        for c in 0..4 {
            let v0 = _mm512_shuffle_i32x4::<0b01_00_01_00>(u[c], u[4 + c]);
            let v1 = _mm512_shuffle_i32x4::<0b11_10_11_10>(u[c], u[4 + c]);
            let v2 = _mm512_shuffle_i32x4::<0b01_00_01_00>(u[8 + c], u[12 + c]);
            let v3 = _mm512_shuffle_i32x4::<0b11_10_11_10>(u[8 + c], u[12 + c]);
            out[c] = _mm512_shuffle_i32x4::<0b10_00_10_00>(v0, v2);
            out[4 + c] = _mm512_shuffle_i32x4::<0b11_01_11_01>(v0, v2);
            out[8 + c] = _mm512_shuffle_i32x4::<0b10_00_10_00>(v1, v3);
            out[12 + c] = _mm512_shuffle_i32x4::<0b11_01_11_01>(v1, v3);
        }
        out
    }
}
