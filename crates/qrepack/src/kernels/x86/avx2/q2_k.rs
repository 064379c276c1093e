//! `q2_K_8x8` (ggml's `block_q2_Kx8`, byte layout in `layout/q2_k.rs`) with 256-bit vectors:
//! a 64-byte quant chunk row is two ymm (rows 0-3, rows 4-7; row `r` in dword lanes
//! `2 (r % 4)` and `2 (r % 4) + 1`), each 2-bit field of it 8 weights of each row from one
//! 16-weight group against one broadcast qword of activations.
//!
//! Per group, half and activation row: two `maddubs` (a pair of products is at most
//! 2 · 3 · 128, so the two chunk rows of a group add up in i16 too), one `madd` by the group
//! scales (the same word in all four words of a row) and an add. Scaling the quants first, as
//! the AVX-512 set does for `vpdpbusd`, saves nothing here: `maddubs` pairs of prescaled quants
//! would still need a `madd` to widen them. The mins term is four `madd` per block and row:
//! the same lane pairs as the AVX-512 kernels (their i16 vectors split in halves).
//!
//! The helpers here that only compute indices are shared with the AVX-512 kernels.

use std::arch::x86_64::*;

use crate::blocks::{BlockQ2Kx8, BlockQ8K, BlockQ8Kx4, F16Bits};
use crate::cpu::KernelSet;
use crate::kernel_api::{target_entries, Kernels};
use crate::kernels::x86::Avx2;

/// Activation chunk (8 bytes, `e / 8`) of field `s` of quant chunk row `k`.
#[inline(always)]
pub(in crate::kernels::x86) const fn act_chunk(k: usize, s: usize) -> usize {
    16 * (k / 4) + 4 * s + k % 4
}

/// 16-weight group of field `s` of quant chunk row `k`.
#[inline(always)]
pub(in crate::kernels::x86) const fn group_of(k: usize, s: usize) -> usize {
    8 * (k / 4) + 2 * s + (k % 4) / 2
}

/// `vpshufb` indices (the same in every 128-bit lane: two rows) that pick, from a vector of
/// scales laid out as [`scale_bytes`] leaves them widened to i16 (lane `2r + x`: row `r`'s
/// groups `4v + 2x + h`, `h` = 0, 1), group `4v + 2x + h` of row `r` for both lanes `2r` and
/// `2r + 1`: as (scale, 0) i16 pairs (`WORDS` false) or in all four words of the two lanes
/// (`WORDS` true). Indexed `[x][h]`.
pub(in crate::kernels::x86) const fn pick_table<const WORDS: bool>() -> [[[u8; 64]; 2]; 2] {
    let mut t = [[[0x80u8; 64]; 2]; 2];
    // `while`: the table is built at compile time.
    let mut i = 0;
    while i < 4 * 64 {
        let (x, h, byte) = (i / 128, (i / 64) % 2, i % 64);
        // The lane's row (0 or 1) and the byte within its 8 bytes.
        let (local, within) = ((byte % 16) / 8, byte % 8);
        let keep = if WORDS {
            within % 2 == 0
        } else {
            within % 4 == 0
        };
        if keep {
            t[x][h][byte] = (8 * local + 4 * x + 2 * h) as u8;
        }
        i += 1;
    }
    t
}

/// [`pick_table`] for scales in every word of a row.
pub(in crate::kernels::x86) const WORD_PICKS: [[[u8; 64]; 2]; 2] = pick_table::<true>();

/// A block's (scale, min) bytes with every row's pairs of groups side by side: byte
/// `2 (2r + x) + h` of vector `v` is row `r`'s byte of group `4v + 2x + h` (the stored runs
/// `2v + x` hold them as byte pairs `2r, 2r + 1`, so one 16-bit unpack of runs `2v` and
/// `2v + 1` puts every pair in place). Widened to i16, rows 0-3 are the low 16 bytes.
///
/// # Safety
/// The CPU must support AVX2.
#[inline(always)]
pub(in crate::kernels::x86) unsafe fn scale_bytes(scales: &[u8; 128], v: usize) -> __m256i {
    assert!(v < 4);
    // SAFETY: the loads are of 16 bytes at 32v and 32v + 16 < 128 (asserted above).
    unsafe {
        let p = scales.as_ptr().add(32 * v);
        let run0 = _mm_loadu_si128(p as *const __m128i);
        let run1 = _mm_loadu_si128(p.add(16) as *const __m128i);
        _mm256_set_m128i(
            _mm_unpackhi_epi16(run0, run1),
            _mm_unpacklo_epi16(run0, run1),
        )
    }
}

/// Loads the `[x][h]` tables of [`pick_table`], their first 32 bytes.
///
/// # Safety
/// The CPU must support AVX.
#[inline(always)]
unsafe fn load_picks(t: &[[[u8; 64]; 2]; 2]) -> [[__m256i; 2]; 2] {
    // SAFETY: each table is 64 bytes, of which 32 are read; `loadu` has no alignment
    // requirement. No closure: it would not inherit the caller's target features.
    unsafe {
        let mut out = [[_mm256_setzero_si256(); 2]; 2];
        for (o, tx) in out.iter_mut().zip(t) {
            for (oh, th) in o.iter_mut().zip(tx) {
                *oh = _mm256_loadu_si256(th.as_ptr().cast());
            }
        }
        out
    }
}

/// Half `half` (rows `4 half..4 half + 4`) of a block's scales and mins as i16 vectors
/// (`[v]`, lane `2 (r % 4) + x`: row `r`'s groups `4v + 2x`, `4v + 2x + 1`).
///
/// # Safety
/// The CPU must support AVX2.
#[inline(always)]
unsafe fn half_scales(scales: &[u8; 128], half: usize) -> ([__m256i; 4], [__m256i; 4]) {
    // SAFETY: register-only intrinsics of the caller's features and `scale_bytes`' loads.
    unsafe {
        let low = _mm_set1_epi8(0x0f);
        let mut sc = [_mm256_setzero_si256(); 4];
        let mut mins = [_mm256_setzero_si256(); 4];
        for v in 0..4 {
            let both = scale_bytes(scales, v);
            let bytes = if half == 0 {
                _mm256_castsi256_si128(both)
            } else {
                _mm256_extracti128_si256::<1>(both)
            };
            sc[v] = _mm256_cvtepu8_epi16(_mm_and_si128(bytes, low));
            mins[v] = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(bytes), low));
        }
        (sc, mins)
    }
}

/// Eight activations (bytes `at..at + 8` of `q`) in every qword.
///
/// # Safety
/// The CPU must support AVX.
#[inline(always)]
unsafe fn broadcast8(q: &[i8], at: usize) -> __m256i {
    assert!(at + 8 <= q.len());
    // SAFETY: the 8 bytes are in bounds (asserted above); unaligned read.
    unsafe { _mm256_set1_epi64x(std::ptr::read_unaligned(q.as_ptr().add(at) as *const i64)) }
}

/// Four 16-sums (`bsums[at..at + 4]`) in every qword.
///
/// # Safety
/// The CPU must support AVX.
#[inline(always)]
unsafe fn broadcast_sums(bsums: &[i16], at: usize) -> __m256i {
    assert!(at + 4 <= bsums.len());
    // SAFETY: the 4 i16 are in bounds (asserted above); unaligned read.
    unsafe {
        _mm256_set1_epi64x(std::ptr::read_unaligned(
            bsums.as_ptr().add(at) as *const i64
        ))
    }
}

/// The f16 scales of rows `4 half..4 half + 4` as f32 lane pairs.
///
/// # Safety
/// The CPU must support AVX2 and F16C.
#[inline(always)]
unsafe fn f16_pairs(h: &[F16Bits; 8], half: usize) -> __m256 {
    // SAFETY: 8 halves are 16 bytes; register-only otherwise.
    unsafe {
        let all = _mm256_cvtph_ps(_mm_loadu_si128(h.as_ptr() as *const __m128i));
        let b = 4 * half as i32;
        let idx = _mm256_setr_epi32(b, b, b + 1, b + 1, b + 2, b + 2, b + 3, b + 3);
        _mm256_permutevar8x32_ps(all, idx)
    }
}

/// Field `s` (0..4) of every byte of `q`, as unsigned bytes 0..4.
///
/// # Safety
/// The CPU must support AVX2.
#[inline(always)]
unsafe fn field(q: __m256i, s: usize) -> __m256i {
    // SAFETY: register-only intrinsics of the caller's features.
    unsafe {
        let shifted = match s {
            0 => q,
            1 => _mm256_srli_epi16::<2>(q),
            2 => _mm256_srli_epi16::<4>(q),
            _ => _mm256_srli_epi16::<6>(q),
        };
        _mm256_and_si256(shifted, _mm256_set1_epi8(3))
    }
}

/// Half `half` (rows `4 half..`) of the 64 quant bytes of chunk row `k`.
///
/// # Safety
/// The CPU must support AVX.
#[inline(always)]
unsafe fn chunk_half(w: &BlockQ2Kx8, k: usize, half: usize) -> __m256i {
    assert!(k < 8 && half < 2);
    // SAFETY: the 32 bytes at 64k + 32 half < 512 are in bounds (asserted above).
    unsafe { _mm256_loadu_si256(w.qs.as_ptr().add(64 * k + 32 * half).cast()) }
}

/// Rows `0..8` from the lane pairs of the two halves.
///
/// # Safety
/// The CPU must support AVX2.
#[inline(always)]
unsafe fn fold_halves(lo: __m256, hi: __m256) -> __m256 {
    // SAFETY: register-only intrinsics of the caller's features.
    unsafe {
        // [r0 r1 r4 r5 | r2 r3 r6 r7] in 64-bit units, back in row order.
        let sums = _mm256_hadd_ps(lo, hi);
        _mm256_castpd_ps(_mm256_permute4x64_pd::<0xd8>(_mm256_castps_pd(sums)))
    }
}

/// GEMV over every row group in `w` (`a.len()` blocks each).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[inline(always)]
pub(in crate::kernels::x86) unsafe fn gemv_body(w: &[BlockQ2Kx8], a: &[BlockQ8K], out: &mut [f32]) {
    let nb = a.len();
    if nb == 0 {
        out.fill(0.0);
        return;
    }
    assert!(out.len() >= w.len() / nb * 8);
    // SAFETY: the caller's features; block reads are of fixed-size fields, and every store is
    // into an 8-float chunk of `out` (asserted above).
    unsafe {
        let words = load_picks(&WORD_PICKS);
        for (group, o) in w.chunks_exact(nb).zip(out.chunks_exact_mut(8)) {
            let mut acc = [_mm256_setzero_ps(); 2];
            for (wb, ab) in group.iter().zip(a) {
                crate::kernel_api::prefetch_l2(wb, crate::kernel_api::GEMV_PREFETCH_BYTES);
                let da = _mm256_set1_ps(ab.d);
                for (half, acc_h) in acc.iter_mut().enumerate() {
                    let (sc, mins) = half_scales(&wb.scales, half);
                    let mut sums = _mm256_setzero_si256();
                    for j in 0..4 {
                        // Chunk rows 2j and 2j + 1: the same groups, activations 8 apart.
                        let q = [chunk_half(wb, 2 * j, half), chunk_half(wb, 2 * j + 1, half)];
                        for s in 0..4 {
                            let at = 8 * act_chunk(2 * j, s);
                            let pairs = _mm256_add_epi16(
                                _mm256_maddubs_epi16(field(q[0], s), broadcast8(&ab.qs, at)),
                                _mm256_maddubs_epi16(field(q[1], s), broadcast8(&ab.qs, at + 8)),
                            );
                            let g = group_of(2 * j, s);
                            let scale = _mm256_shuffle_epi8(sc[g / 4], words[(g / 2) % 2][g % 2]);
                            sums = _mm256_add_epi32(sums, _mm256_madd_epi16(pairs, scale));
                        }
                    }
                    let mut msum = _mm256_setzero_si256();
                    for (v, m) in mins.iter().enumerate() {
                        let sums_v = broadcast_sums(&ab.bsums, 4 * v);
                        msum = _mm256_add_epi32(msum, _mm256_madd_epi16(*m, sums_v));
                    }
                    let main = _mm256_mul_ps(_mm256_cvtepi32_ps(sums), f16_pairs(&wb.d, half));
                    let dmin = f16_pairs(&wb.dmin, half);
                    let net = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), dmin, main);
                    *acc_h = _mm256_fmadd_ps(net, da, *acc_h);
                }
            }
            _mm256_storeu_ps(o.as_mut_ptr(), fold_halves(acc[0], acc[1]));
        }
    }
}

/// GEMM of one row group with one quad (`a`: one block per weight block) into `out[8m + r]`:
/// rows 0-3 over every block, then rows 4-7 (four accumulators per pass fit the 16 registers).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[inline(always)]
pub(in crate::kernels::x86) unsafe fn gemm_body(
    w: &[BlockQ2Kx8],
    a: &[BlockQ8Kx4],
    out: &mut [f32],
) {
    assert!(out.len() >= 32);
    // SAFETY: the caller's features; block reads are of fixed-size fields, and `out` holds 32
    // floats (asserted above).
    unsafe {
        let words = load_picks(&WORD_PICKS);
        let mut acc = [[_mm256_setzero_ps(); 4]; 2];
        for (half, acc_h) in acc.iter_mut().enumerate() {
            for (wb, ab) in w.iter().zip(a) {
                let (sc, mins) = half_scales(&wb.scales, half);
                let mut sums = [_mm256_setzero_si256(); 4];
                for j in 0..4 {
                    let q = [chunk_half(wb, 2 * j, half), chunk_half(wb, 2 * j + 1, half)];
                    for s in 0..4 {
                        let u = [field(q[0], s), field(q[1], s)];
                        let c = act_chunk(2 * j, s);
                        let g = group_of(2 * j, s);
                        let scale = _mm256_shuffle_epi8(sc[g / 4], words[(g / 2) % 2][g % 2]);
                        for (m, sum) in sums.iter_mut().enumerate() {
                            // Row m's activations of chunk c sit at 32c + 8m in the quad.
                            let pairs = _mm256_add_epi16(
                                _mm256_maddubs_epi16(u[0], broadcast8(&ab.qs, 32 * c + 8 * m)),
                                _mm256_maddubs_epi16(u[1], broadcast8(&ab.qs, 32 * c + 32 + 8 * m)),
                            );
                            *sum = _mm256_add_epi32(*sum, _mm256_madd_epi16(pairs, scale));
                        }
                    }
                }
                let d = f16_pairs(&wb.d, half);
                let dmin = f16_pairs(&wb.dmin, half);
                for (m, acc_m) in acc_h.iter_mut().enumerate() {
                    let mut msum = _mm256_setzero_si256();
                    for (v, mv) in mins.iter().enumerate() {
                        // Row m's sums of groups 4v..4v + 4 sit at 16v + 4m in the quad.
                        let sums_v = broadcast_sums(&ab.bsums, 16 * v + 4 * m);
                        msum = _mm256_add_epi32(msum, _mm256_madd_epi16(*mv, sums_v));
                    }
                    let main = _mm256_mul_ps(_mm256_cvtepi32_ps(sums[m]), d);
                    let net = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), dmin, main);
                    *acc_m = _mm256_fmadd_ps(net, _mm256_set1_ps(ab.d[m]), *acc_m);
                }
            }
        }
        let [lo, hi] = acc;
        for (m, (l, h)) in lo.into_iter().zip(hi).enumerate() {
            _mm256_storeu_ps(out.as_mut_ptr().add(8 * m), fold_halves(l, h));
        }
    }
}

target_entries! { "avx2,fma,f16c";
    fn q2_k_gemv(w: &[BlockQ2Kx8], a: &[BlockQ8K], out: &mut [f32]) => gemv_body;
    fn q2_k_gemm(w: &[BlockQ2Kx8], a: &[BlockQ8Kx4], out: &mut [f32]) => gemm_body;
}

/// `q2_K_8x8`: GEMV and one-quad GEMM on the stored blocks.
pub(crate) fn kernels(_: Avx2) -> Kernels<BlockQ2Kx8, BlockQ8K, BlockQ8Kx4> {
    Kernels::pair(KernelSet::Avx2, q2_k_gemv, q2_k_gemm)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn act_chunks_and_groups_follow_the_q2_k_weight_order() {
        for k in 0..8 {
            for s in 0..4 {
                // Byte 8k of a row holds, in field s, weight 128 (b / 32) + 32 s + b % 32.
                let b = 8 * k;
                let e = 128 * (b / 32) + 32 * s + b % 32;
                assert_eq!(act_chunk(k, s), e / 8);
                assert_eq!(group_of(k, s), e / 16);
                // Chunk rows 2j and 2j + 1 share their groups.
                assert_eq!(group_of(k, s), group_of(k ^ 1, s));
            }
        }
    }
}
