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

use super::lanes::{concat, fold_pairs_epi32, fold_pairs_ps};
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

/// Index for `vpshufb` that puts the scale of row `r` of sub-block `4j + c` in dword lanes
/// `2r` and `2r + 1` (zero-extended), from the 128-bit lanes that [`q4_k_gemv_body`] lays out:
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
unsafe fn scale_halves(scales: &[__m256i; 2]) -> [__m512i; 2] {
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
unsafe fn load_picks() -> [__m512i; 4] {
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
unsafe fn sub_scales(halves: &[__m512i; 2], picks: &[__m512i; 4], sub: usize) -> __m512i {
    // SAFETY: register-only AVX-512 BW per the caller's contract.
    unsafe { _mm512_shuffle_epi8(halves[sub / 4], picks[sub % 4]) }
}

/// Row `r`'s value of `v` in lanes `2r` and `2r + 1`: the f32 row scales laid out as the
/// sums are.
#[inline(always)]
unsafe fn row_pairs(v: __m256) -> __m512 {
    // SAFETY: register-only AVX-512 F per the caller's contract.
    unsafe {
        let idx = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
        _mm512_permutexvar_ps(idx, _mm512_castps256_ps512(v))
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
                let mut rows = _mm256_sub_ps(fold_pairs_ps(acc), acc_mins);
                if piece > 0 {
                    rows = _mm256_add_ps(rows, _mm256_loadu_ps(o.as_ptr()));
                }
                _mm256_storeu_ps(o.as_mut_ptr(), rows);
            }
        }
    }
}

/// GEMM of one row group with one quad (`a`: one block per weight block), below the 16-row
/// tiles' `min_quads`. Q4_K the same way as the GEMV: each block's quants decoded once into
/// 512-bit vectors for the quad's four rows, into `out[8 m + r]` (Zen 4, 4096x4096: batch 4
/// 0.93x, batch 8 0.91x of the 256-bit loop nest). Q5_K keeps the 256-bit loop nest with
/// `vpdpbusd`: its fifth bits decode in 256-bit halves, and its sums need `vpmulld` (batch 4-8
/// 1.05-1.15x slower here).
#[inline(always)]
pub(super) unsafe fn gemm_body<P: K8x8>(w: &[P], a: &[BlockQ8Kx4], out: &mut [f32]) {
    if !P::NARROW_SUMS {
        // SAFETY: the caller's contract (AVX-512 F/BW/VL/VNNI, F16C) covers the callee's.
        return unsafe { crate::kernels::x86::avx2::k_quants::imp::gemm_body_vnni(w, a, out) };
    }
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
                        *sums_m = _mm512_dpwssd_epi32(*sums_m, dot, scale);
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
