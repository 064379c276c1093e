//! Per-call tiles of 8 plain NVFP4, MXFP4 or Q1_0 rows, one row per 32-bit lane, multiplied
//! with AVX2 against their Q8_0 activations: the AVX2 form of the AVX-512 `q8_0_tiles`.
//!
//! The three types decode exactly to signed bytes (NVFP4's doubled E2M1 values with a UE4M3
//! scale per 16 weights, MXFP4's with an E8M0 scale per 32, Q1_0's `±1` with one f16 scale per
//! 128). A tile cuts each row into *chunks* of 32 weights, the span of one activation block,
//! and lays 8 rows side by side in a sub-tile, four weights of a row per lane (NVFP4 and Q1_0
//! tiles hold two sub-tiles, which share one flip of the activations). Four activation bytes broadcast to every lane then meet four weights of each of the
//! 8 rows in one `vpmaddubsw` (unsigned activations times signed weights, pairs summed to 16
//! bits). The activations are taken as `a + 128` and each lane starts from `-128 Σw` of its
//! weights, stored in the tile. Without tiles, the row GEMM decodes every weight block once per
//! group of four activation rows and sums each row and activation row across the lanes.
//!
//! # Exactness
//!
//! A `vpmaddubsw` pair is at most `2·255·12 = 6120` (NVFP4, MXFP4) or `510` (Q1_0), and the
//! 16-bit sums run over at most four pairs of the FP4 types (16 weights: 24480) or eight of Q1_0
//! (4080), inside `i16`; they are widened to 32 bits once per 16 weights (FP4) or per chunk
//! (Q1_0), and a scale group's `Σ w·a` (below `2^16`) converts to `f32` exactly. The integers
//! are the portable kernel's; only the order of the `f32` roundings differs.

use std::arch::x86_64::*;

use crate::blocks::BlockQ8_0;
use crate::blocks::{e8m0_half_to_f32, ue4m3_half_to_f32, BlockMxfp4, BlockNvfp4, BlockQ1_0};
use crate::kernel_api::{target_entries, Kernels, TiledGemm};
use crate::kernels::x86::Avx2;
use crate::quant::grids::KVALUES_FP4;

use super::lanes::transpose8;
use super::lowbit;

/// Rows in one sub-tile, one per 32-bit lane.
const ROWS: usize = 8;

/// 32 weights (one Q8_0 activation block's span) of 8 rows.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Chunk {
    /// `q[p][r]`: weights `4p..4p + 4` of row `r`, signed bytes (little-endian).
    q: [[u32; ROWS]; 8],
    /// `neg_sums[h][r]`: `-128` times the sum of row `r`'s weights in scale group `h` (the
    /// chunk's halves, or the whole chunk in `h = 0` when it has one scale).
    neg_sums: [[i32; ROWS]; 2],
    /// `scales[h][r]`: row `r`'s scale of group `h`.
    scales: [[f32; ROWS]; 2],
}

const _: () = assert!(std::mem::size_of::<Chunk>().is_multiple_of(8));

/// The most chunks a weight block has (Q1_0's four).
const MAX_K: usize = 4;

/// A weight block of a tiled type: `K` chunks, each with one scale or one per half.
trait DecodeChunks: bytemuck::Pod {
    /// The activation blocks that meet one weight block.
    type Act: bytemuck::Pod;
    /// Chunks (Q8_0 blocks) per weight block, at most [`MAX_K`].
    const K: usize;
    /// Whether each half of a chunk has its own scale.
    const SPLIT: bool;
    /// Whether the 16-bit sums are widened per half of a chunk even though the chunk has one
    /// scale (true when a whole chunk's `vpmaddubsw` pairs could pass `i16`).
    const WIDEN_HALVES: bool = Self::SPLIT;
    /// Sub-tiles of 8 rows in one tile: the activations, flipped once per call of the product,
    /// serve all of them (the product's register budget allows two, but one where the halves
    /// are widened under one scale; `gemm_body` follows this). Two measured 7-11 % faster than one for NVFP4
    /// and Q1_0 at batches 32 and 512, and 1-3 % slower for MXFP4, whose product keeps more
    /// sums per chunk (4096x4096, 2 threads, Zen 4 capped at AVX2, best of 3 alternating).
    const SUBS: usize = if Self::WIDEN_HALVES && !Self::SPLIT {
        1
    } else {
        2
    };

    /// The block's `K` chunks as 32 signed values each, in weight order, and the scales of
    /// their halves (the chunk's one scale in `h = 0` unless `SPLIT`).
    ///
    /// # Safety
    /// The CPU must support AVX2 and F16C.
    unsafe fn decode(&self, values: &mut [__m256i; MAX_K], scales: &mut [[f32; 2]; MAX_K]);
}

impl DecodeChunks for BlockQ1_0 {
    type Act = [BlockQ8_0; 4];
    const K: usize = 4;
    const SPLIT: bool = false;

    #[inline(always)]
    unsafe fn decode(&self, values: &mut [__m256i; MAX_K], scales: &mut [[f32; 2]; MAX_K]) {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe {
            // byte i of a chunk takes byte i / 8 of its 32 bits, then the bit i % 8 of it
            let spread = _mm256_setr_epi8(
                0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, //
                2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
            );
            let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201_u64 as i64);
            let one = _mm256_set1_epi8(1);
            let d = _mm_cvtss_f32(lowbit::half(self.d));
            for (c, (v, sc)) in values.iter_mut().zip(scales.iter_mut()).enumerate() {
                let word: [u8; 4] = self.qs[4 * c..4 * c + 4].try_into().expect("32 bits");
                let bytes =
                    _mm256_shuffle_epi8(_mm256_set1_epi32(i32::from_le_bytes(word)), spread);
                let set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
                // set (-1) -> 1, clear (0) -> -1
                let minus = _mm256_or_si256(_mm256_add_epi8(set, set), one);
                *v = _mm256_sub_epi8(_mm256_setzero_si256(), minus);
                *sc = [d, 0.0];
            }
        }
    }
}

impl DecodeChunks for BlockNvfp4 {
    type Act = [BlockQ8_0; 2];
    const K: usize = 2;
    const SPLIT: bool = true;

    #[inline(always)]
    unsafe fn decode(&self, values: &mut [__m256i; MAX_K], scales: &mut [[f32; 2]; MAX_K]) {
        // SAFETY: register-only intrinsics of the caller's features; the loads read the value
        // table and the chunk's 16 code bytes.
        unsafe {
            let table = _mm_loadu_si128(KVALUES_FP4.as_ptr().cast());
            let nibble = _mm_set1_epi8(0x0f);
            for c in 0..2 {
                // group h of the chunk: weights 0..8 in the low nibbles of its 8 bytes, 8..16
                // in the high ones
                let codes = _mm_loadu_si128(self.qs[16 * c..16 * c + 16].as_ptr().cast());
                let low = _mm_and_si128(codes, nibble);
                let high = _mm_and_si128(_mm_srli_epi16::<4>(codes), nibble);
                values[c] = _mm256_set_m128i(
                    _mm_shuffle_epi8(table, _mm_unpackhi_epi64(low, high)),
                    _mm_shuffle_epi8(table, _mm_unpacklo_epi64(low, high)),
                );
                scales[c] = [
                    ue4m3_half_to_f32(self.d[2 * c]),
                    ue4m3_half_to_f32(self.d[2 * c + 1]),
                ];
            }
        }
    }
}

impl DecodeChunks for BlockMxfp4 {
    type Act = BlockQ8_0;
    const K: usize = 1;
    const SPLIT: bool = false;
    // a chunk's eight pairs could reach 8 · 6120, past `i16`
    const WIDEN_HALVES: bool = true;

    #[inline(always)]
    unsafe fn decode(&self, values: &mut [__m256i; MAX_K], scales: &mut [[f32; 2]; MAX_K]) {
        // SAFETY: register-only intrinsics of the caller's features; the loads read the value
        // table and the block's 16 code bytes.
        unsafe {
            let table = _mm256_broadcastsi128_si256(_mm_loadu_si128(KVALUES_FP4.as_ptr().cast()));
            let nibble = _mm_set1_epi8(0x0f);
            // weights 0..16 in the low nibbles, 16..32 in the high ones
            let codes = _mm_loadu_si128(self.qs.as_ptr().cast());
            let low = _mm_and_si128(codes, nibble);
            let high = _mm_and_si128(_mm_srli_epi16::<4>(codes), nibble);
            values[0] = _mm256_shuffle_epi8(table, _mm256_set_m128i(high, low));
            scales[0] = [e8m0_half_to_f32(self.e), 0.0];
        }
    }
}

/// The sums of a chunk's 32 signed values over its halves (weights `0..16`, `16..32`).
///
/// # Safety
/// The CPU must support AVX2.
#[inline(always)]
unsafe fn half_sums(values: __m256i) -> [i32; 2] {
    // SAFETY: register-only intrinsics of the caller's features.
    unsafe {
        // Σ (v + 128) over each 8 bytes, less 16 · 128 a half
        let biased = _mm256_sad_epu8(
            _mm256_xor_si256(values, _mm256_set1_epi8(-128)),
            _mm256_setzero_si256(),
        );
        let lo = _mm256_castsi256_si128(biased);
        let hi = _mm256_extracti128_si256::<1>(biased);
        let part = |v: __m128i| (_mm_cvtsi128_si32(v) + _mm_extract_epi32::<2>(v)) - 2048;
        [part(lo), part(hi)]
    }
}

/// Activation blocks flipped to `a + 128` at a time per activation row.
const PIECE: usize = 16;

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

/// Four activation rows as a tile product reads them, one 32-weight chunk at a time.
trait ActQuad {
    /// Chunks in each row.
    fn chunks(&self) -> usize;
    /// The four rows' quants of chunk `c`, in weight order, and their scales.
    ///
    /// # Safety
    /// The CPU must support AVX2 and F16C.
    unsafe fn chunk(&self, c: usize) -> ([__m256i; 4], [f32; 4]);
}

/// Four rows of Q8_0 blocks, back to back (the plain layout's quads).
struct RowQuad<'a>(&'a [BlockQ8_0]);

impl ActQuad for RowQuad<'_> {
    fn chunks(&self) -> usize {
        self.0.len() / 4
    }

    #[inline(always)]
    unsafe fn chunk(&self, c: usize) -> ([__m256i; 4], [f32; 4]) {
        let n = self.chunks();
        let blk = |m: usize| &self.0[m * n + c];
        // SAFETY: the caller's features. F16C, not the portable conversion: this runs once per
        // block, quad and tile.
        unsafe {
            (
                std::array::from_fn(|m| load32(&blk(m).qs)),
                std::array::from_fn(|m| _mm_cvtss_f32(lowbit::half(blk(m).d))),
            )
        }
    }
}

/// The tile's 8 rows times four activation rows (`a`, `tile.len()` chunks a row): `out[8 m +
/// r]` for activation row `m`. `SPLIT`: a scale per 16 weights (else
/// one per chunk, in `h = 0`); `WIDEN`: the 16-bit sums are widened per 16 weights even under
/// one scale, and the chunk's start is in `h = 0`.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[inline(always)]
unsafe fn rows<const SPLIT: bool, const WIDEN: bool, const SUBS: usize>(
    tile: &[Chunk],
    a: impl ActQuad,
    out: &mut [f32],
) {
    const M: usize = 4;
    let nch = tile.len() / SUBS;
    assert!(a.chunks() == nch && tile.len() == SUBS * nch && out.len() == M * SUBS * ROWS);
    let mut flipped = [[[0u32; 8]; PIECE]; M];
    let mut da = [[0.0f32; PIECE]; M];
    let (groups, per_group) = if SPLIT || WIDEN { (2, 4) } else { (1, 8) };
    // SAFETY: register-only intrinsics of the caller's features; loads and stores go through
    // references into the tile, the activations, the local buffers and `out` (length asserted).
    unsafe {
        let sign = _mm256_set1_epi8(-128);
        let ones = _mm256_set1_epi16(1);
        let mut acc_of = [[_mm256_setzero_ps(); M]; SUBS];
        for start in (0..nch).step_by(PIECE) {
            let len = PIECE.min(nch - start);
            for i in 0..len {
                let (q, d) = a.chunk(start + i);
                for m in 0..M {
                    let f = _mm256_xor_si256(q[m], sign);
                    _mm256_storeu_si256(flipped[m][i].as_mut_ptr().cast(), f);
                    da[m][i] = d[m];
                }
            }
            for (sub, acc_sub) in acc_of.iter_mut().enumerate() {
                let mut acc = *acc_sub;
                let chunks = &tile[sub * nch + start..sub * nch + start + len];
                for (i, ch) in chunks.iter().enumerate() {
                    let mut sum = [_mm256_setzero_ps(); M];
                    // the chunk's exact sums under one scale (`WIDEN` without `SPLIT`)
                    let mut whole = [load32(&ch.neg_sums[0]); M];
                    for h in 0..groups {
                        let mut s16 = [_mm256_setzero_si256(); M];
                        for (p, q) in ch.q.iter().enumerate().skip(per_group * h).take(per_group) {
                            let q = load32(q);
                            for (m, s) in s16.iter_mut().enumerate() {
                                let b = _mm256_set1_epi32(flipped[m][i][p] as i32);
                                *s = _mm256_add_epi16(*s, _mm256_maddubs_epi16(b, q));
                            }
                        }
                        if WIDEN && !SPLIT {
                            for (w, s) in whole.iter_mut().zip(&s16) {
                                *w = _mm256_add_epi32(*w, _mm256_madd_epi16(*s, ones));
                            }
                            continue;
                        }
                        let first = load32(&ch.neg_sums[h]);
                        let sc = _mm256_loadu_ps(ch.scales[h].as_ptr());
                        for (m, s) in s16.iter().enumerate() {
                            let x = _mm256_cvtepi32_ps(_mm256_add_epi32(
                                first,
                                _mm256_madd_epi16(*s, ones),
                            ));
                            sum[m] = if h == 0 {
                                _mm256_mul_ps(x, sc)
                            } else {
                                _mm256_fmadd_ps(x, sc, sum[m])
                            };
                        }
                    }
                    if WIDEN && !SPLIT {
                        let sc = _mm256_loadu_ps(ch.scales[0].as_ptr());
                        for (s, w) in sum.iter_mut().zip(&whole) {
                            *s = _mm256_mul_ps(_mm256_cvtepi32_ps(*w), sc);
                        }
                    }
                    for m in 0..M {
                        acc[m] = _mm256_fmadd_ps(sum[m], _mm256_set1_ps(da[m][i]), acc[m]);
                    }
                }
                *acc_sub = acc;
            }
        }
        for (m, o) in out.chunks_exact_mut(SUBS * ROWS).enumerate() {
            for (sub, acc) in acc_of.iter().enumerate() {
                _mm256_storeu_ps(o[ROWS * sub..].as_mut_ptr(), acc[m]);
            }
        }
    }
}

/// `u64` words of a tile of `W::SUBS` sub-tiles of `nb` blocks.
fn tile_words<W: DecodeChunks>(nb: usize) -> usize {
    W::SUBS * nb * W::K * std::mem::size_of::<Chunk>() / 8
}

/// Decodes 8 rows of `nb` blocks each (row after row) into the tile, block by block: the 8
/// rows' chunks decoded whole, then transposed into the lanes (storing them word by word into
/// the lanes took a quarter of the time at batch 32).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[inline(always)]
unsafe fn make_tile_body<W: DecodeChunks>(blocks: &[W], tile: &mut [u64]) {
    let nb = blocks.len() / (W::SUBS * ROWS);
    assert!(blocks.len() == W::SUBS * ROWS * nb);
    // SAFETY: the caller's features.
    unsafe { make_tile_from(nb, |r, b| blocks[r * nb + b], tile) }
}

/// Decodes `W::SUBS` times 8 rows of `nb` blocks each, block `b` of row `r` from `block(r, b)`,
/// into the tile: rows `8 s..8 s + 8` into sub-tile `s`.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[inline(always)]
unsafe fn make_tile_from<W: DecodeChunks>(
    nb: usize,
    block: impl Fn(usize, usize) -> W,
    tile: &mut [u64],
) {
    let tile: &mut [Chunk] = bytemuck::cast_slice_mut(tile);
    assert!(tile.len() == W::SUBS * nb * W::K);
    // SAFETY: the caller's features; register-only intrinsics, and stores through references
    // into the tile.
    unsafe {
        let mut values = [[_mm256_setzero_si256(); MAX_K]; ROWS];
        let mut scales = [[[0.0f32; 2]; MAX_K]; ROWS];
        let subs = tile.chunks_exact_mut(nb * W::K);
        for (sub, chunks) in subs.enumerate() {
            for (b, block_chunks) in chunks.chunks_exact_mut(W::K).enumerate() {
                for r in 0..ROWS {
                    block(ROWS * sub + r, b).decode(&mut values[r], &mut scales[r]);
                }
                for (c, ch) in block_chunks.iter_mut().enumerate() {
                    let rows: [__m256i; ROWS] = std::array::from_fn(|r| values[r][c]);
                    for (k, v) in transpose8(rows).into_iter().enumerate() {
                        _mm256_storeu_si256(ch.q[k].as_mut_ptr().cast(), v);
                    }
                    for r in 0..ROWS {
                        let [h0, h1] = half_sums(values[r][c]);
                        let [s0, s1] = scales[r][c];
                        if W::SPLIT {
                            ch.neg_sums[0][r] = -128 * h0;
                            ch.neg_sums[1][r] = -128 * h1;
                        } else {
                            ch.neg_sums[0][r] = -128 * (h0 + h1);
                            ch.neg_sums[1][r] = 0;
                        }
                        ch.scales[0][r] = s0;
                        ch.scales[1][r] = s1;
                    }
                }
            }
        }
    }
}

/// The tile's rows times one quad of activation rows, activation row major into `out`.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[inline(always)]
unsafe fn gemm_body<W: DecodeChunks>(_: &[W], tile: &[u64], a: &[W::Act], out: &mut [f32]) {
    let tile: &[Chunk] = bytemuck::cast_slice(tile);
    let a = RowQuad(bytemuck::cast_slice(a));
    // SAFETY: the caller's features; `rows` asserts the lengths.
    unsafe {
        match (W::SPLIT, W::WIDEN_HALVES) {
            (true, _) => rows::<true, true, 2>(tile, a, out),
            (false, true) => rows::<false, true, 1>(tile, a, out),
            (false, false) => rows::<false, false, 2>(tile, a, out),
        }
    }
}

target_entries! { "avx2,fma,f16c";
    fn q8_0_tile<W: DecodeChunks>(blocks: &[W], tile: &mut [u64]) => make_tile_body::<W>;
    fn tiled_gemm<W: DecodeChunks>(w: &[W], tile: &[u64], a: &[W::Act], out: &mut [f32]) => gemm_body::<W>;
}

/// The 8-row tiles of `W`, used from `min_quads` quads on. A tile holds 1.5 bytes a weight
/// (Q1_0 stores 0.14, NVFP4 0.56), so making it costs about as much as a batch-8 call of the
/// row GEMM: 4096x4096, 2 threads, weights hot, Zen 4 shared with a build (old -> new, ms):
/// NVFP4 batch 8 4.8 -> 4.7, 16 9.5 -> 7.0, 32 19.0 -> 11.4, 512 154 -> 76; Q1_0 batch 8 3.7 ->
/// 4.7, 16 7.4 -> 7.1, 32 14.9 -> 10.8, 512 124 -> 73.
fn tiles<W: DecodeChunks>(min_quads: usize) -> TiledGemm<W, W::Act> {
    TiledGemm {
        groups: W::SUBS * ROWS,
        quads: 1,
        min_quads,
        tile_words: tile_words::<W>,
        make_tile: q8_0_tile::<W>,
        gemm: tiled_gemm::<W>,
    }
}

/// Plain NVFP4 rows: the AVX2 GEMV and one-quad GEMM, and the 8-row tiles from batch 8.
pub(crate) fn nvfp4_tiled_rows(token: Avx2) -> Kernels<BlockNvfp4, [BlockQ8_0; 2], [BlockQ8_0; 2]> {
    Kernels {
        tiled: Some(tiles::<BlockNvfp4>(2)),
        ..lowbit::nvfp4_rows(token)
    }
}

/// Plain MXFP4 rows: the AVX2 GEMV and one-quad GEMM, and the 8-row tiles from batch 8.
pub(crate) fn mxfp4_tiled_rows(token: Avx2) -> Kernels<BlockMxfp4, BlockQ8_0, BlockQ8_0> {
    Kernels {
        tiled: Some(tiles::<BlockMxfp4>(2)),
        ..lowbit::mxfp4_rows(token)
    }
}

/// Plain Q1_0 rows: the AVX2 GEMV and one-quad GEMM, and the 8-row tiles from batch 16.
pub(crate) fn q1_0_tiled_rows(token: Avx2) -> Kernels<BlockQ1_0, [BlockQ8_0; 4], [BlockQ8_0; 4]> {
    Kernels {
        tiled: Some(tiles::<BlockQ1_0>(4)),
        ..lowbit::q1_0_rows(token)
    }
}

#[cfg(test)]
mod tests;
