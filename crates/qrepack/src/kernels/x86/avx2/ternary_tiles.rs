//! Per-call tiles of plain ternary rows (TQ1_0, TQ2_0), two sub-tiles of 8 rows with one row
//! per 32-bit lane, multiplied with AVX2 against their Q8_K activations: the AVX2 form of the
//! ternary tiles of the AVX-512 `grid_tiles`.
//!
//! A block's quants `t` (`0..=3`, the weight `t - 1`) are decoded once per call by the ternary
//! decoders of `lowbit` and laid side by side, four quants of each of a sub-tile's 8 rows per
//! 32-bit lane. Four activation bytes broadcast to every lane then meet four quants of each row
//! of both sub-tiles in two `vpmaddubsw` (the unsigned quants times the signed activations),
//! with no flip of the activations and no horizontal sums; the weights' offset of 1 comes off
//! once per block with the sum of the activation block's `bsums`. Without tiles the row GEMM
//! decodes each block once per quad of activation rows and sums each row and activation row
//! across the lanes.
//!
//! # Exactness
//!
//! A `vpmaddubsw` pair is at most `2·3·128 = 768` in magnitude, and the 16-bit sums run over 32
//! of them (128 weights: 24576) before they are widened, inside `i16`. A block's `Σ t·a − Σ a`
//! (below `2^18`) converts to `f32` exactly: the integers are the portable kernel's, only the
//! order of the `f32` roundings differs.

use std::arch::x86_64::*;

use crate::blocks::{BlockQ8K, BlockTq1_0, BlockTq2_0};
use crate::kernel_api::{target_entries, Kernels, TiledGemm};
use crate::kernels::x86::Avx2;

use super::lanes::transpose8;
use super::lowbit;
use super::plain_tiles::{DecodeK, DecodedK};

/// Rows in one tile, one per 32-bit lane.
const ROWS: usize = 8;

/// One 256-weight block of 8 rows.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Block8 {
    /// `t[p][r]`: quants `4p..4p + 4` of row `r` (little-endian bytes).
    t: [[u32; ROWS]; 64],
    /// Each row's block scale.
    d: [f32; ROWS],
}

const _: () = assert!(std::mem::size_of::<Block8>().is_multiple_of(8));

/// Sub-tiles of 8 rows in one tile: each broadcast of activation bytes serves all of them. Two
/// against one, AMD EPYC Zen 3, 2 threads, weights hot, min of 3 alternating (ms): TQ2_0
/// 4096x4096 batch 32 3.73 -> 2.81, 512 45.1 -> 41.5, 11008x4096 batch 32 10.9 -> 7.6; TQ1_0
/// 4096x4096 batch 32 4.53 -> 3.59, 512 48.0 -> 42.2.
const SUBS: usize = 2;

/// `u64` words of a tile of `SUBS` sub-tiles of `nb` blocks.
fn tile_words(nb: usize) -> usize {
    SUBS * nb * std::mem::size_of::<Block8>() / 8
}

/// Decodes `SUBS` sub-tiles of 8 rows of `nb` blocks each (row after row, sub-tile `s` holding
/// rows `8 s..8 s + 8`) into the tile, block by block: the 8 rows of a sub-tile's block decoded
/// one after another, then each 32-byte run of their quants transposed into the lanes (storing
/// word by word into the lanes took longer than the products at batch 8).
///
/// # Safety
/// The CPU must support AVX2 and F16C.
#[inline(always)]
unsafe fn make_tile_body<W: DecodeK, const SUBS: usize>(blocks: &[W], tile: &mut [u64]) {
    let nb = blocks.len() / (SUBS * ROWS);
    let tile: &mut [Block8] = bytemuck::cast_slice_mut(tile);
    assert!(tile.len() == SUBS * nb && blocks.len() == SUBS * ROWS * nb);
    let mut dec = [<DecodedK as bytemuck::Zeroable>::zeroed(); ROWS];
    for (i, t) in tile.iter_mut().enumerate() {
        // block `b` of sub-tile `s`
        let (b, s) = (i / SUBS, i % SUBS);
        for (r, dec) in dec.iter_mut().enumerate() {
            // SAFETY: the caller's features.
            unsafe { blocks[(s * ROWS + r) * nb + b].decode(dec) };
            t.d[r] = dec.d;
        }
        for j in 0..8 {
            // SAFETY: the caller's features; the loads and stores go through 32-byte
            // references into the decoded blocks and the tile.
            unsafe {
                let runs: [__m256i; ROWS] = std::array::from_fn(|r| {
                    let run: &[u8; 32] =
                        dec[r].u[32 * j..32 * j + 32].try_into().expect("32 quants");
                    load32(run)
                });
                for (k, v) in transpose8(runs).into_iter().enumerate() {
                    _mm256_storeu_si256(t.t[8 * j + k].as_mut_ptr().cast(), v);
                }
            }
        }
    }
}

/// Loads 32 bytes.
///
/// # Safety
/// The CPU must support AVX.
#[inline(always)]
unsafe fn load32<T: bytemuck::Pod>(p: &T) -> __m256i {
    const { assert!(std::mem::size_of::<T>() == 32) };
    // SAFETY: `p` is 32 bytes; `loadu` has no alignment requirement.
    unsafe { _mm256_loadu_si256((p as *const T).cast()) }
}

/// The tile's `SUBS` sub-tiles of 8 rows times four activation rows (`a`: four rows of `nb` Q8_K
/// blocks, back to back): `out[8 SUBS m + 8 s + r]` for activation row `m` and row `r` of
/// sub-tile `s`. Each broadcast of four activation bytes serves every sub-tile.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[inline(always)]
unsafe fn rows<const SUBS: usize>(tile: &[Block8], a: &[BlockQ8K], out: &mut [f32]) {
    const M: usize = 4;
    let nb = tile.len() / SUBS;
    assert!(a.len() == M * nb && tile.len() == SUBS * nb && out.len() == M * SUBS * ROWS);
    // SAFETY: register-only intrinsics of the caller's features; loads and stores go through
    // references into the tile, the activations and `out` (lengths asserted).
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let mut acc = [[_mm256_setzero_ps(); M]; SUBS];
        for b in 0..nb {
            let subs: [&Block8; SUBS] = std::array::from_fn(|s| &tile[SUBS * b + s]);
            let acts: [&BlockQ8K; M] = std::array::from_fn(|m| &a[m * nb + b]);
            // Σ (t - 1)·a = Σ t·a - Σ a
            let offsets: [__m256i; M] = std::array::from_fn(|m| {
                let offset: i32 = acts[m].bsums.iter().map(|&s| i32::from(s)).sum();
                _mm256_set1_epi32(-offset)
            });
            let mut isum = [offsets; SUBS];
            for half in 0..2 {
                let mut s16 = [[_mm256_setzero_si256(); M]; SUBS];
                for p in 32 * half..32 * half + 32 {
                    let t: [__m256i; SUBS] = std::array::from_fn(|s| load32(&subs[s].t[p]));
                    for m in 0..M {
                        let q: [i8; 4] = acts[m].qs[4 * p..4 * p + 4]
                            .try_into()
                            .expect("four quants");
                        let av = _mm256_set1_epi32(i32::from_le_bytes(q.map(|v| v as u8)));
                        for s in 0..SUBS {
                            s16[s][m] = _mm256_add_epi16(s16[s][m], _mm256_maddubs_epi16(t[s], av));
                        }
                    }
                }
                for s in 0..SUBS {
                    for m in 0..M {
                        isum[s][m] =
                            _mm256_add_epi32(isum[s][m], _mm256_madd_epi16(s16[s][m], ones));
                    }
                }
            }
            for s in 0..SUBS {
                let d = _mm256_loadu_ps(subs[s].d.as_ptr());
                for m in 0..M {
                    let dd = _mm256_mul_ps(d, _mm256_set1_ps(acts[m].d));
                    acc[s][m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[s][m]), dd, acc[s][m]);
                }
            }
        }
        for (m, o) in out.chunks_exact_mut(SUBS * ROWS).enumerate() {
            for (s, o) in o.chunks_exact_mut(ROWS).enumerate() {
                _mm256_storeu_ps(o.as_mut_ptr(), acc[s][m]);
            }
        }
    }
}

/// The tile's rows times one quad of activation rows, activation row major into `out`.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[inline(always)]
unsafe fn gemm_body<W, const SUBS: usize>(_: &[W], tile: &[u64], a: &[BlockQ8K], out: &mut [f32]) {
    // SAFETY: the caller's features; `rows` asserts the lengths.
    unsafe { rows::<SUBS>(bytemuck::cast_slice(tile), a, out) }
}

target_entries! { "avx2,fma,f16c";
    fn ternary_tile<W: DecodeK>(blocks: &[W], tile: &mut [u64]) => make_tile_body::<W, SUBS>;
    fn tiled_gemm<W: DecodeK>(w: &[W], tile: &[u64], a: &[BlockQ8K], out: &mut [f32]) => gemm_body::<W, SUBS>;
}

/// The 16-row tiles of `W`, used from `min_quads` quads on. Against the row GEMM, 4096x4096, 2
/// threads, weights hot, Zen 4 capped at AVX2, 2026-12-06 (ms, rows -> tiles): TQ2_0 batch 8
/// 1.00 -> 1.04, 16 1.92 -> 1.80, 32 3.98 -> 3.2-3.5, 512 49 -> 41-45; TQ1_0 batch 8 1.56 ->
/// 1.16, 16 3.11 -> 2.02, 32 6.17 -> 3.6-3.8, 512 88 -> 39-47.
fn tiles<W: DecodeK>(min_quads: usize) -> TiledGemm<W, BlockQ8K> {
    TiledGemm {
        groups: SUBS * ROWS,
        quads: 1,
        min_quads,
        tile_words,
        make_tile: ternary_tile::<W>,
        gemm: tiled_gemm::<W>,
    }
}

/// Plain TQ1_0 rows: the AVX2 GEMV and one-quad GEMM, and the 16-row tiles from batch 8.
pub(crate) fn tq1_0_tiled_rows(token: Avx2) -> Kernels<BlockTq1_0, BlockQ8K, BlockQ8K> {
    Kernels {
        tiled: Some(tiles::<BlockTq1_0>(2)),
        ..lowbit::tq1_0_rows(token)
    }
}

/// Plain TQ2_0 rows: the AVX2 GEMV and one-quad GEMM, and the 16-row tiles from batch 16.
pub(crate) fn tq2_0_tiled_rows(token: Avx2) -> Kernels<BlockTq2_0, BlockQ8K, BlockQ8K> {
    Kernels {
        tiled: Some(tiles::<BlockTq2_0>(4)),
        ..lowbit::tq2_0_rows(token)
    }
}

#[cfg(test)]
mod tests;
