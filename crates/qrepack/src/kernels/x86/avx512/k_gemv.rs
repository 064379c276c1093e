//! The GEMV of the K-quant 8x8 layouts (`q4_K_8x8`, `q5_K_8x8_x86`) with 512-bit vectors: all
//! 8 rows of a row group in one zmm (two lanes per row, as the stored 64-byte quant pairs
//! hold them), one `vpdpbusd` per 8 activations, and the sub-block scale applied by
//! `vpdpwssd` where the sums fit an i16 (Q4_K; see `K8x8::NARROW_SUMS`). Q4_K has a leaner
//! GEMV of its own (`q4_k_gemv_body`), and the one-quad GEMM below the tiles' threshold.
//!
//! The 256-bit GEMV (the AVX2 loop nest with `vpdpbusd`) took about twice the instructions per
//! block: Zen 4, 2 threads, 4096x4096 from cache, q4_K 0.215 -> 0.204 ms, q5_K 0.298 -> 0.279;
//! the Q4_K GEMV of its own then 0.132 -> 0.090 ms (small-model shapes 0.017 -> 0.012 ms).

use std::arch::x86_64::*;

use super::k_scales::{load_picks, row_pairs, scale_halves, sub_scales};
use super::lanes::{fold_pairs_epi32, fold_pairs_ps, store_piece};
use crate::blocks::{BlockQ4Kx8, BlockQ8K, BlockQ8Kx4};
use crate::kernels::x86::avx2::k_quants::imp::{
    f16x8, min_pairs, mins_dot, quad_sub_sums, row_sub_sums, scale_bytes, QUAD_LANE,
};
use crate::kernels::x86::avx2::k_quants::K8x8;

/// Eight activations (bytes `at..at + 8` of `q`) in every qword.
#[inline(always)]
unsafe fn broadcast8(q: &[i8], at: usize) -> __m512i {
    assert!(at + 8 <= q.len());
    // SAFETY: the 8 bytes are in bounds (asserted above); unaligned read.
    unsafe { _mm512_set1_epi64(std::ptr::read_unaligned(q.as_ptr().add(at) as *const i64)) }
}

/// GEMV over every row group in `w` (`a.len()` blocks each), one group after the other.
#[inline(always)]
pub(super) unsafe fn gemv_body<P: K8x8>(w: &[P], a: &[BlockQ8K], out: &mut [f32]) {
    let nb = a.len();
    if nb == 0 {
        out.fill(0.0);
        return;
    }
    assert!(out.len() >= w.len() / nb * 8);
    // SAFETY: AVX-512 F/BW/VL/VNNI and F16C per the caller's contract; block reads are of
    // fixed-size fields, and every store is into an 8-float chunk of `out` (asserted above).
    unsafe {
        let picks = load_picks();
        for (group, o) in w.chunks_exact(nb).zip(out.chunks_exact_mut(8)) {
            let mut acc = _mm256_setzero_ps();
            for (wb, ab) in group.iter().zip(a) {
                crate::kernel_api::prefetch_l2(wb, crate::kernel_api::GEMV_PREFETCH_BYTES);
                let bytes = scale_bytes(wb);
                let halves = scale_halves(&bytes.scales);
                let mut sums = _mm512_setzero_si512();
                for g in 0..4 {
                    let q = wb.decode_group_zmm(g);
                    for s in 0..2 {
                        let sub = 2 * g + s;
                        let scale = sub_scales(&halves, &picks, sub);
                        let mut dot = _mm512_setzero_si512();
                        for (k, qk) in q.iter().enumerate() {
                            dot = _mm512_dpbusd_epi32(
                                dot,
                                qk[s],
                                broadcast8(&ab.qs, 32 * sub + 8 * k),
                            );
                        }
                        sums = if P::NARROW_SUMS {
                            _mm512_dpwssd_epi32(sums, dot, scale)
                        } else {
                            _mm512_add_epi32(sums, _mm512_mullo_epi32(dot, scale))
                        };
                    }
                }
                let mins = mins_dot(&min_pairs(&bytes.mins), &row_sub_sums(&ab.bsums), 0);
                let da = _mm256_set1_ps(ab.d);
                let d = _mm256_mul_ps(f16x8(wb.d()), da);
                let dmin = _mm256_mul_ps(f16x8(wb.dmin()), da);
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(fold_pairs_epi32(sums)), d, acc);
                acc = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mins), dmin, acc);
            }
            _mm256_storeu_ps(o.as_mut_ptr(), acc);
        }
    }
}

/// Activation blocks whose mins sums the Q4_K GEMV prepares at a time (2 KiB of stack).
const Q4_K_PREP_BLOCKS: usize = 128;

/// The Q4_K GEMV, leaner than [`gemv_body`] per block:
/// * the high nibbles are multiplied in place (`x & 0xf0`, 16 times the weight) and their
///   sub-block sums shifted right by 4 once, instead of every vector shifted down first;
/// * each sub-block's scales come from the decoded scale bytes by one `vpshufb`, without the
///   AVX2 loop nest's i16 vectors;
/// * the activations' sub-block sums for the mins term are paired once per call, not once per
///   row group;
/// * the sums stay in two lanes per row until the end of the row group.
///
/// Same integers as the other K-quant kernels; the f32 sums are added in another order.
#[inline(always)]
pub(super) unsafe fn q4_k_gemv_body(w: &[BlockQ4Kx8], a: &[BlockQ8K], out: &mut [f32]) {
    let nb = a.len();
    if nb == 0 {
        out.fill(0.0);
        return;
    }
    assert!(out.len() >= w.len() / nb * 8);
    // Per activation block: the sums of sub-blocks (2p, 2p + 1) as two i16 in dword p.
    let mut prep = [[0i32; 4]; Q4_K_PREP_BLOCKS];
    // SAFETY: AVX-512 F/BW/VL/VNNI and F16C per the caller's contract; block reads are of
    // fixed-size fields, `prep` has a slot per block of the piece, and every load and store is
    // of an 8-float chunk of `out` (asserted above).
    unsafe {
        let low = _mm512_set1_epi8(0x0f);
        let picks = load_picks();
        for (piece, a_piece) in a.chunks(Q4_K_PREP_BLOCKS).enumerate() {
            let first = piece * Q4_K_PREP_BLOCKS;
            for (ab, p) in a_piece.iter().zip(prep.iter_mut()) {
                let sums = row_sub_sums(&ab.bsums);
                for (pair, slot) in sums.iter().zip(p.iter_mut()) {
                    *slot = _mm256_cvtsi256_si32(*pair);
                }
            }
            for (group, o) in w.chunks_exact(nb).zip(out.chunks_exact_mut(8)) {
                let blocks = &group[first..first + a_piece.len()];
                let mut acc = _mm512_setzero_ps();
                let mut acc_mins = _mm256_setzero_ps();
                for ((wb, ab), p) in blocks.iter().zip(a_piece).zip(&prep) {
                    crate::kernel_api::prefetch_l2(wb, crate::kernel_api::GEMV_PREFETCH_BYTES);
                    let bytes = scale_bytes(wb);
                    let halves = scale_halves(&bytes.scales);
                    let mut sums = _mm512_setzero_si512();
                    for g in 0..4 {
                        let mut dot_lo = _mm512_setzero_si512();
                        let mut dot_hi16 = _mm512_setzero_si512();
                        for k in 0..4 {
                            // Vectors 8g + 2k (rows 0-3) and 8g + 2k + 1 (rows 4-7): the 64
                            // bytes at 64 (4g + k) < 1024.
                            let x = _mm512_loadu_si512(
                                wb.qs.as_ptr().add(64 * (4 * g + k)) as *const __m512i
                            );
                            let lo = _mm512_and_si512(x, low);
                            let hi16 = _mm512_andnot_si512(low, x);
                            let at = 64 * g + 8 * k;
                            dot_lo = _mm512_dpbusd_epi32(dot_lo, lo, broadcast8(&ab.qs, at));
                            dot_hi16 =
                                _mm512_dpbusd_epi32(dot_hi16, hi16, broadcast8(&ab.qs, at + 32));
                        }
                        // Exact: every product of the high nibbles is a multiple of 16.
                        let dot_hi = _mm512_srai_epi32::<4>(dot_hi16);
                        for (s, dot) in [dot_lo, dot_hi].into_iter().enumerate() {
                            let sub = 2 * g + s;
                            // Each sum fits an i16 (see `NARROW_SUMS`).
                            let scale = sub_scales(&halves, &picks, sub);
                            sums = _mm512_dpwssd_epi32(sums, dot, scale);
                        }
                    }
                    let mins = min_pairs(&bytes.mins);
                    let mut mins_sum = _mm256_setzero_si256();
                    for (m, &pair) in mins.iter().zip(p) {
                        mins_sum = _mm256_add_epi32(
                            mins_sum,
                            _mm256_madd_epi16(*m, _mm256_set1_epi32(pair)),
                        );
                    }
                    let da = _mm256_set1_ps(ab.d);
                    let d = _mm256_mul_ps(f16x8(&wb.d), da);
                    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), row_pairs(d), acc);
                    let dmin = _mm256_mul_ps(f16x8(&wb.dmin), da);
                    acc_mins = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mins_sum), dmin, acc_mins);
                }
                store_piece(o, _mm256_sub_ps(fold_pairs_ps(acc), acc_mins), piece == 0);
            }
        }
    }
}

/// GEMM of one row group with one quad (`a`: one block per weight block), below the 16-row
/// tiles' `min_quads`: each block's quants decoded once into 512-bit vectors for the quad's
/// four rows, into `out[8 m + r]`. Zen 4, 4096x4096, against the 256-bit loop nest: Q4_K batch
/// 4 0.93x, batch 8 0.91x, then 0.82x with the scales from `k_scales.rs`; Q5_K (whose sums need
/// `vpmulld`) was 1.05-1.15x slower before those scales and is now 0.87x of that loop nest.
#[inline(always)]
pub(super) unsafe fn gemm_body<P: K8x8>(w: &[P], a: &[BlockQ8Kx4], out: &mut [f32]) {
    assert!(out.len() >= 32);
    // SAFETY: AVX-512 F/BW/VL/VNNI and F16C per the caller's contract; block reads are of
    // fixed-size fields, and `out` holds 32 floats (asserted above).
    unsafe {
        let picks = load_picks();
        let mut acc = [_mm512_setzero_ps(); 4];
        let mut acc_mins = [_mm256_setzero_ps(); 4];
        for (wb, ab) in w.iter().zip(a) {
            let bytes = scale_bytes(wb);
            let halves = scale_halves(&bytes.scales);
            let mut sums = [_mm512_setzero_si512(); 4];
            for g in 0..4 {
                let q = wb.decode_group_zmm(g);
                for s in 0..2 {
                    let sub = 2 * g + s;
                    let scale = sub_scales(&halves, &picks, sub);
                    for (m, sums_m) in sums.iter_mut().enumerate() {
                        let mut dot = _mm512_setzero_si512();
                        for (k, qk) in q.iter().enumerate() {
                            // Row m's activations e..e + 8 sit at 32 (e / 8) + 8m in the quad.
                            let at = 32 * (4 * sub + k) + 8 * m;
                            dot = _mm512_dpbusd_epi32(dot, qk[s], broadcast8(&ab.qs, at));
                        }
                        *sums_m = if P::NARROW_SUMS {
                            _mm512_dpwssd_epi32(*sums_m, dot, scale)
                        } else {
                            _mm512_add_epi32(*sums_m, _mm512_mullo_epi32(dot, scale))
                        };
                    }
                }
            }
            let mins = min_pairs(&bytes.mins);
            let sub_sums = quad_sub_sums(&ab.bsums);
            let d = f16x8(wb.d());
            let dmin = f16x8(wb.dmin());
            for m in 0..4 {
                let da = _mm256_set1_ps(ab.d[m]);
                let d_m = row_pairs(_mm256_mul_ps(d, da));
                acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[m]), d_m, acc[m]);
                let mins_m = mins_dot(&mins, &sub_sums, QUAD_LANE[m]);
                acc_mins[m] = _mm256_fmadd_ps(
                    _mm256_cvtepi32_ps(mins_m),
                    _mm256_mul_ps(dmin, da),
                    acc_mins[m],
                );
            }
        }
        for m in 0..4 {
            let rows = _mm256_sub_ps(fold_pairs_ps(acc[m]), acc_mins[m]);
            _mm256_storeu_ps(out.as_mut_ptr().add(8 * m), rows);
        }
    }
}
