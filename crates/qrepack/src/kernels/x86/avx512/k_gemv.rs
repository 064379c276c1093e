//! The GEMV of the K-quant 8x8 layouts (`q4_K_8x8`, `q5_K_8x8_x86`) with 512-bit vectors: all
//! 8 rows of a row group in one zmm (two lanes per row, as the stored 64-byte quant pairs
//! hold them), one `vpdpbusd` per 8 activations, and the sub-block scale applied by
//! `vpdpwssd` where the sums fit an i16 (Q4_K; see `K8x8::NARROW_SUMS`).
//!
//! The 256-bit GEMV (the AVX2 loop nest with `vpdpbusd`) took about twice the instructions per
//! block: Zen 4, 2 threads, 4096x4096 from cache, q4_K 0.215 -> 0.204 ms, q5_K 0.298 -> 0.279.

use std::arch::x86_64::*;

use super::lanes::{concat, fold_pairs_epi32};
use crate::blocks::{BlockQ8K, BlockQ8Kx4};
use crate::kernels::x86::avx2::k_quants::imp::{
    block_scales, f16x8, mins_dot, quad_sub_sums, row_sub_sums, Dpbusd, QUAD_LANE,
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
        for (group, o) in w.chunks_exact(nb).zip(out.chunks_exact_mut(8)) {
            let mut acc = _mm256_setzero_ps();
            for (wb, ab) in group.iter().zip(a) {
                let sc = block_scales::<P, Dpbusd>(wb);
                let mut sums = _mm512_setzero_si512();
                for g in 0..4 {
                    let q = wb.decode_group_zmm(g);
                    for s in 0..2 {
                        let sub = 2 * g + s;
                        // Lanes 2r + part hold the scale of row r (prepared as i32).
                        let scale = concat(sc.sc[sub][0], sc.sc[sub][1]);
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
                let mins = mins_dot(&sc.mins, &row_sub_sums(&ab.bsums), 0);
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
        let mut acc = [_mm256_setzero_ps(); 4];
        for (wb, ab) in w.iter().zip(a) {
            let sc = block_scales::<P, Dpbusd>(wb);
            let mut sums = [_mm512_setzero_si512(); 4];
            for g in 0..4 {
                let q = wb.decode_group_zmm(g);
                for s in 0..2 {
                    let sub = 2 * g + s;
                    let scale = concat(sc.sc[sub][0], sc.sc[sub][1]);
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
            let sub_sums = quad_sub_sums(&ab.bsums);
            let d = f16x8(wb.d());
            let dmin = f16x8(wb.dmin());
            for (m, acc_m) in acc.iter_mut().enumerate() {
                let mins = mins_dot(&sc.mins, &sub_sums, QUAD_LANE[m]);
                let da = _mm256_set1_ps(ab.d[m]);
                *acc_m = _mm256_fmadd_ps(
                    _mm256_cvtepi32_ps(fold_pairs_epi32(sums[m])),
                    _mm256_mul_ps(d, da),
                    *acc_m,
                );
                *acc_m =
                    _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_mul_ps(dmin, da), *acc_m);
            }
        }
        for (m, acc_m) in acc.iter().enumerate() {
            _mm256_storeu_ps(out.as_mut_ptr().add(8 * m), *acc_m);
        }
    }
}
