//! A per-call tile of 16 rows for the 8x8 layouts of 32-weight blocks (`q4_0_8x8`,
//! `iq4_nl_8x8`, `mxfp4_8x8`, `q8_0_8x8`): two row groups re-laid so that one zmm holds 4 weights of each of
//! 16 rows, one row per dword lane.
//!
//! In the stored 8x8 form a row owns two lanes of a zmm, so every block and activation row ends
//! in a conversion, a scale and an FMA for 8 rows after 4 `vpdpbusd`. Those four instructions,
//! not the products, bounded the 8x8 GEMM (taking them out made q8_0 batch 512 a third faster
//! on Zen 4). In the tile the same epilogue serves 16 rows after 8 `vpdpbusd`, and the weights'
//! bias correction, equal for all lanes here, is one subtraction of a broadcast.
//!
//! Tile of one block (72 words): 8 vectors (vector `j`: bytes `4j..4j + 4` of rows 0-15, biased
//! to unsigned as [`ZmmBlock::weights`] gives them), then the 16 rows' scales as f32.

use std::arch::x86_64::*;

use super::lanes::pick_rows;
use super::nibble::{OffsetQuad, ZmmBlock};

/// Words of one block's tile: 8 x 64 bytes of weights, 16 f32 scales.
pub(super) const BLOCK_WORDS: usize = 8 * 8 + 8;

/// Fills the tile of two row groups (`w`: group A's `nb` blocks, then group B's).
#[inline(always)]
pub(super) unsafe fn make_tile_body<P: ZmmBlock>(w: &[P], tile: &mut [u64]) {
    let nb = w.len() / 2;
    assert!(tile.len() >= nb * BLOCK_WORDS);
    let (group_a, group_b) = w.split_at(nb);
    // SAFETY: AVX-512 F/BW/VL and F16C per the caller's contract; every store is into the
    // block's 72 words (the tile holds nb of them, asserted above).
    unsafe {
        for ((a, b), t) in group_a
            .iter()
            .zip(group_b)
            .zip(tile.chunks_exact_mut(BLOCK_WORDS))
        {
            let (wa, wb) = (a.weights(), b.weights());
            let out = t.as_mut_ptr() as *mut __m512i;
            for c in 0..4 {
                // Lane r of vector 2c + h: row r's bytes 8c + 4h.., which the 8x8 form keeps
                // in lane 2r + h of vector c (group A for rows 0-7, group B for rows 8-15).
                for h in 0..2 {
                    _mm512_storeu_si512(out.add(2 * c + h), pick_rows(wa[c], wb[c], h));
                }
            }
            let scales =
                _mm512_insertf32x8::<1>(_mm512_castps256_ps512(a.row_scales()), b.row_scales());
            _mm512_storeu_ps(out.add(8) as *mut f32, scales);
        }
    }
}

/// Four activations (bytes `at..at + 4` of `q`) in every dword.
#[inline(always)]
unsafe fn broadcast4(q: &[i8; 128], at: usize) -> __m512i {
    assert!(at + 4 <= q.len());
    // SAFETY: the 4 bytes are in bounds (asserted above); unaligned read.
    unsafe { _mm512_set1_epi32(std::ptr::read_unaligned(q.as_ptr().add(at) as *const i32)) }
}

/// The GEMM over a tile of 16 rows with one or two quads (`a`: `QUADS x nb` blocks, quad
/// major), into `out[16 m + r]` for activation row `m` (0..4 QUADS) and tile row `r`.
#[inline(always)]
pub(super) unsafe fn gemm_body<P: ZmmBlock, Q: OffsetQuad, const QUADS: usize>(
    tile: &[u64],
    a: &[Q],
    out: &mut [f32],
) {
    let nb = a.len() / QUADS;
    assert!(tile.len() >= nb * BLOCK_WORDS && out.len() >= 64 * QUADS);
    // SAFETY: AVX-512 F/BW/VL/VNNI per the caller's contract; the tile holds nb blocks of 72
    // words (asserted), quads are fixed-size blocks, and `out` holds 64 QUADS floats.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); 4]; QUADS];
        for (b, t) in tile.chunks_exact(BLOCK_WORDS).take(nb).enumerate() {
            let p = t.as_ptr() as *const __m512i;
            // No closure (`array::from_fn`): it would not inherit the kernel's features.
            let mut w = [_mm512_setzero_si512(); 8];
            for (j, wj) in w.iter_mut().enumerate() {
                *wj = _mm512_loadu_si512(p.add(j));
            }
            let dw = _mm512_loadu_ps(p.add(8) as *const f32);
            for (q, acc_q) in acc.iter_mut().enumerate() {
                let ab = &a[q * nb + b];
                let qs = ab.qs();
                for (m, acc_m) in acc_q.iter_mut().enumerate() {
                    // Row m's activations 4j.. sit at 32 (j / 2) + 8m + 4 (j % 2) in the quad.
                    let mut dot = _mm512_setzero_si512();
                    for (j, wj) in w.iter().enumerate() {
                        let at = 32 * (j / 2) + 8 * m + 4 * (j % 2);
                        dot = _mm512_dpbusd_epi32(dot, *wj, broadcast4(qs, at));
                    }
                    let dot = _mm512_sub_epi32(
                        dot,
                        _mm512_set1_epi32(ab.offsets()[m] >> P::QUAD_OFFSET_SHIFT),
                    );
                    let scale = _mm512_mul_ps(dw, _mm512_set1_ps(ab.d()[m]));
                    *acc_m = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, *acc_m);
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
pub(super) unsafe fn tiled_gemm_body<P: ZmmBlock, Q: OffsetQuad>(
    w: &[P],
    tile: &[u64],
    a: &[Q],
    out: &mut [f32],
) {
    let nb = w.len() / 2;
    // SAFETY: the caller's contract is the callee's; `gemm_body` checks the lengths.
    unsafe {
        if a.len() >= 2 * nb {
            gemm_body::<P, Q, 2>(tile, &a[..2 * nb], out)
        } else {
            gemm_body::<P, Q, 1>(tile, &a[..nb], out)
        }
    }
}
