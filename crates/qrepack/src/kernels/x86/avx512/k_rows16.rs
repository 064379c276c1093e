//! A per-call tile of 16 rows for the K-quant 8x8 layouts (`q4_K_8x8`, `q5_K_8x8_x86`): two
//! row groups with their quants unpacked to bytes and re-laid so that one zmm holds 4 weights
//! of each of 16 rows, one row per dword lane, next to the decoded sub-block scales and mins.
//!
//! The 8x8 GEMM decodes nibbles for every quad and ends every block in per-row reductions over
//! two lanes and 256-bit halves; here a sub-block and activation row take 8 `vpdpbusd` and
//! `vpdpwssd` by the sub-block scale (an i32 lane read as (sum, sign) i16 pairs against (scale,
//! 0): exact while the sum fits an i16, so the products are summed in chains short enough for
//! that: 16 per lane for Q4_K, 8 for Q5_K). The mins term is 8 more `vpdpwssd`: each lane's
//! (min, min) against a broadcast pair of the row's 16-sums.
//!
//! Tile of one block (656 words): weights (sub-block `sb`, vector `j`: bytes `4j..4j + 4` of
//! the sub-block for rows 0-15; 8 x 8 x 64 bytes), then per sub-block the scales (i32 per
//! row), then per sub-block the mins ((min, min) i16 per row), then `d` and `dmin` (f32 per
//! row).

use std::arch::x86_64::*;

use super::k_scales::{load_picks, scale_halves, sub_scales};
use super::lanes::{concat, f16x16, pick_rows};
use crate::blocks::BlockQ8Kx4;
use crate::kernels::x86::avx2::k_quants::imp::{min_pairs, scale_bytes};
use crate::kernels::x86::avx2::k_quants::K8x8;

/// 64-byte vectors in one block's tile.
const BLOCK_VECTORS: usize = 64 + 8 + 8 + 2;

/// Words of one block's tile.
pub(super) const BLOCK_WORDS: usize = 8 * BLOCK_VECTORS;

const SCALES_AT: usize = 64;
const MINS_AT: usize = 72;
const D_AT: usize = 80;
const DMIN_AT: usize = 81;

/// From lanes of i16 pairs (min of sub-block 2p, min of 2p + 1), the min of sub-block
/// `2p + which` in both halves of each lane.
#[inline(always)]
unsafe fn one_min_twice(pairs: __m256i, which: usize) -> __m256i {
    // SAFETY: register-only AVX2 per the caller's contract.
    unsafe {
        let one = if which == 0 {
            _mm256_and_si256(pairs, _mm256_set1_epi32(0xffff))
        } else {
            _mm256_srli_epi32::<16>(pairs)
        };
        _mm256_or_si256(one, _mm256_slli_epi32::<16>(one))
    }
}

/// Fills the tile of two row groups (`w`: group A's `nb` blocks, then group B's).
#[inline(always)]
pub(super) unsafe fn make_tile_body<P: K8x8>(w: &[P], tile: &mut [u64]) {
    let nb = w.len() / 2;
    assert!(tile.len() >= nb * BLOCK_WORDS);
    let (group_a, group_b) = w.split_at(nb);
    // SAFETY: AVX-512 F/BW/VL/VNNI and F16C per the caller's contract; every store is into the
    // block's BLOCK_VECTORS vectors (the tile holds nb blocks, asserted above).
    unsafe {
        let picks = load_picks();
        for ((a, b), t) in group_a
            .iter()
            .zip(group_b)
            .zip(tile.chunks_exact_mut(BLOCK_WORDS))
        {
            let out = t.as_mut_ptr() as *mut __m512i;
            for g in 0..4 {
                // [k][h][lo/hi]: rows 4h.., bytes 8k.. of sub-blocks 2g (lo) and 2g + 1 (hi).
                let (qa, qb) = (a.decode_group(g), b.decode_group(g));
                for k in 0..4 {
                    for s in 0..2 {
                        // Lane 2r + part: row r's bytes 8k + 4 part.. of sub-block 2g + s.
                        let za = concat(qa[k][0][s], qa[k][1][s]);
                        let zb = concat(qb[k][0][s], qb[k][1][s]);
                        for part in 0..2 {
                            let v = pick_rows(za, zb, part);
                            _mm512_storeu_si512(out.add(8 * (2 * g + s) + 2 * k + part), v);
                        }
                    }
                }
            }
            let (sa, sb) = (scale_bytes(a), scale_bytes(b));
            let (ha, hb) = (scale_halves(&sa.scales), scale_halves(&sb.scales));
            let (ma, mb) = (min_pairs(&sa.mins), min_pairs(&sb.mins));
            for sub in 0..8 {
                // Each row's scale as i32 in lanes 2r and 2r + 1.
                let za = sub_scales(&ha, &picks, sub);
                let zb = sub_scales(&hb, &picks, sub);
                _mm512_storeu_si512(out.add(SCALES_AT + sub), pick_rows(za, zb, 0));
                let mins = concat(
                    one_min_twice(ma[sub / 2], sub % 2),
                    one_min_twice(mb[sub / 2], sub % 2),
                );
                _mm512_storeu_si512(out.add(MINS_AT + sub), mins);
            }
            _mm512_storeu_ps(out.add(D_AT) as *mut f32, f16x16(a.d(), b.d()));
            _mm512_storeu_ps(out.add(DMIN_AT) as *mut f32, f16x16(a.dmin(), b.dmin()));
        }
    }
}

/// `bytes[at..at + 4]` (or two i16) in every dword.
#[inline(always)]
unsafe fn broadcast4<T>(bytes: &[T], at: usize) -> __m512i {
    assert!((at + 4) * std::mem::size_of::<u8>() <= std::mem::size_of_val(bytes));
    // SAFETY: 4 bytes from `at` (a byte offset) are in bounds (asserted); unaligned read.
    unsafe {
        let p = (bytes.as_ptr() as *const u8).add(at) as *const i32;
        _mm512_set1_epi32(std::ptr::read_unaligned(p))
    }
}

/// The GEMM over a tile of 16 rows with `QUADS` quads (`a`: `QUADS x nb` blocks, quad major),
/// into `out[16 m + r]` for activation row `m` (0..4 QUADS) and tile row `r`. `CHAIN`: how many
/// `vpdpbusd` (of 4 products per lane) a sum takes before it is scaled.
#[inline(always)]
unsafe fn gemm_body<const QUADS: usize, const CHAIN: usize>(
    tile: &[u64],
    a: &[BlockQ8Kx4],
    out: &mut [f32],
) {
    let nb = a.len() / QUADS;
    assert!(tile.len() >= nb * BLOCK_WORDS && out.len() >= 64 * QUADS);
    // SAFETY: AVX-512 F/BW/VL/VNNI per the caller's contract; the tile holds nb blocks
    // (asserted), quads are fixed-size blocks read within their fields, and `out` holds
    // 64 QUADS floats.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); 4]; QUADS];
        for (b, t) in tile.chunks_exact(BLOCK_WORDS).take(nb).enumerate() {
            let p = t.as_ptr() as *const __m512i;
            let mut sums = [[_mm512_setzero_si512(); 4]; QUADS];
            for sub in 0..8 {
                // No closure (`array::from_fn`): it would not inherit the kernel's features.
                let mut w = [_mm512_setzero_si512(); 8];
                for (j, wj) in w.iter_mut().enumerate() {
                    *wj = _mm512_loadu_si512(p.add(8 * sub + j));
                }
                let sc = _mm512_loadu_si512(p.add(SCALES_AT + sub));
                for (q, sums_q) in sums.iter_mut().enumerate() {
                    let qs = &a[q * nb + b].qs;
                    for (m, s) in sums_q.iter_mut().enumerate() {
                        for chain in w.chunks_exact(CHAIN).enumerate() {
                            let (c, wc) = chain;
                            let mut dot = _mm512_setzero_si512();
                            for (i, wj) in wc.iter().enumerate() {
                                let j = c * CHAIN + i;
                                // Row m's activations e.. sit at 32 (e / 8) + 8m, e = 32 sub + 4j.
                                let at = 32 * (4 * sub + j / 2) + 8 * m + 4 * (j % 2);
                                dot = _mm512_dpbusd_epi32(dot, *wj, broadcast4(qs, at));
                            }
                            *s = _mm512_dpwssd_epi32(*s, dot, sc);
                        }
                    }
                }
            }
            let d = _mm512_loadu_ps(p.add(D_AT) as *const f32);
            let dmin = _mm512_loadu_ps(p.add(DMIN_AT) as *const f32);
            for (q, acc_q) in acc.iter_mut().enumerate() {
                let ab = &a[q * nb + b];
                for (m, acc_m) in acc_q.iter_mut().enumerate() {
                    // Row m's 16-sums of sub-block sub: i16 16 (sub / 2) + 4m + 2 (sub % 2)..
                    let mut mins = _mm512_setzero_si512();
                    for sub in 0..8 {
                        let at = 2 * (16 * (sub / 2) + 4 * m + 2 * (sub % 2));
                        let pair = broadcast4(&ab.bsums, at);
                        mins = _mm512_dpwssd_epi32(
                            mins,
                            _mm512_loadu_si512(p.add(MINS_AT + sub)),
                            pair,
                        );
                    }
                    let da = _mm512_set1_ps(ab.d[m]);
                    *acc_m = _mm512_fmadd_ps(
                        _mm512_cvtepi32_ps(sums[q][m]),
                        _mm512_mul_ps(d, da),
                        *acc_m,
                    );
                    *acc_m =
                        _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mins), _mm512_mul_ps(dmin, da), *acc_m);
                }
            }
        }
        for (q, acc_q) in acc.iter().enumerate() {
            for (m, acc_m) in acc_q.iter().enumerate() {
                _mm512_storeu_ps(out.as_mut_ptr().add(16 * (4 * q + m)), *acc_m);
            }
        }
    }
}

/// [`gemm_body`] for the driver's tiled GEMM: `w` is the tile's two row groups (for the block
/// count), `a` one quad or two.
#[inline(always)]
pub(super) unsafe fn tiled_gemm_body<P: K8x8>(
    w: &[P],
    tile: &[u64],
    a: &[BlockQ8Kx4],
    out: &mut [f32],
) {
    let nb = w.len() / 2;
    // SAFETY: the caller's contract is the callee's; `gemm_body` checks the lengths.
    unsafe {
        match (a.len() >= 2 * nb, P::NARROW_SUMS) {
            (true, true) => gemm_body::<2, 4>(tile, &a[..2 * nb], out),
            (true, false) => gemm_body::<2, 2>(tile, &a[..2 * nb], out),
            (false, true) => gemm_body::<1, 4>(tile, &a[..nb], out),
            (false, false) => gemm_body::<1, 2>(tile, &a[..nb], out),
        }
    }
}
