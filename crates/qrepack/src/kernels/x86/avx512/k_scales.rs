//! Sub-block scales of the K-quant 8x8 blocks in 512-bit form, where row `r` of a row group
//! owns dword lanes `2r` and `2r + 1`: from the decoded scale bytes (`scale_bytes`), one
//! `vpshufb` per sub-block. The AVX2 loop nest's i16 vectors, widened and concatenated, took
//! several times the instructions (Zen 4, q5_K GEMV from cache 0.250 -> 0.160 ms).

use std::arch::x86_64::*;

use super::lanes::concat;

/// Index for `vpshufb` that puts the scale of row `r` of sub-block `4j + c` in dword lanes
/// `2r` and `2r + 1` (zero-extended), from the 128-bit lanes that [`scale_halves`] lays out:
/// lanes 0-1 hold rows 0-3 of sub-blocks `4j .. 4j + 4` (a dword each), lanes 2-3 rows 4-7.
const fn scale_pick(c: usize) -> [i32; 16] {
    let mut idx = [0i32; 16];
    let mut lane = 0;
    while lane < 16 {
        // Dword `lane` is row `lane / 2`; within its 128-bit lane, that row is byte `r % 4`
        // of dword `c`. Bytes 1-3 have the top bit set: zeros.
        let row = lane / 2;
        idx[lane] = (4 * c + row % 4) as i32 | 0x8080_8000_u32 as i32;
        lane += 1;
    }
    idx
}

const SCALE_PICKS: [[i32; 16]; 4] = [scale_pick(0), scale_pick(1), scale_pick(2), scale_pick(3)];

/// The scale bytes (see `scale_bytes`) in the two arrangements `SCALE_PICKS` index: 128-bit
/// lanes with rows 0-3 of sub-blocks 0-3, again, rows 4-7 of sub-blocks 0-3, again; then the
/// same for sub-blocks 4-7.
#[inline(always)]
pub(super) unsafe fn scale_halves(scales: &[__m256i; 2]) -> [__m512i; 2] {
    // SAFETY: register-only AVX-512 F per the caller's contract.
    unsafe {
        let all = concat(scales[0], scales[1]);
        [
            _mm512_shuffle_i64x2::<0b10_10_00_00>(all, all),
            _mm512_shuffle_i64x2::<0b11_11_01_01>(all, all),
        ]
    }
}

/// `SCALE_PICKS` in registers.
#[inline(always)]
pub(super) unsafe fn load_picks() -> [__m512i; 4] {
    let pick = |c: usize| SCALE_PICKS[c].as_ptr() as *const __m512i;
    // SAFETY: each pick is 16 i32 (64 bytes); unaligned loads; AVX-512 F per the caller's
    // contract.
    unsafe {
        [
            _mm512_loadu_si512(pick(0)),
            _mm512_loadu_si512(pick(1)),
            _mm512_loadu_si512(pick(2)),
            _mm512_loadu_si512(pick(3)),
        ]
    }
}

/// Sub-block `sub`'s scales, row `r`'s (zero-extended) in dword lanes `2r` and `2r + 1`: one
/// `vpshufb` instead of the AVX2 loop nest's i16 vectors and a concatenation.
#[inline(always)]
pub(super) unsafe fn sub_scales(
    halves: &[__m512i; 2],
    picks: &[__m512i; 4],
    sub: usize,
) -> __m512i {
    // SAFETY: register-only AVX-512 BW per the caller's contract.
    unsafe { _mm512_shuffle_epi8(halves[sub / 4], picks[sub % 4]) }
}

/// Row `r`'s value of `v` in lanes `2r` and `2r + 1`: the f32 row scales laid out as the
/// sums are.
#[inline(always)]
pub(super) unsafe fn row_pairs(v: __m256) -> __m512 {
    // SAFETY: register-only AVX-512 F per the caller's contract.
    unsafe {
        let idx = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
        _mm512_permutexvar_ps(idx, _mm512_castps256_ps512(v))
    }
}
