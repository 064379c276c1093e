//! Per-call tiles of 16 plain NVFP4 or Q1_0 rows, one row per 32-bit lane, multiplied with
//! AVX-512 VNNI against their Q8_0 activations.
//!
//! Both types' blocks span whole Q8_0 blocks (NVFP4 two, Q1_0 four) and decode exactly to
//! signed bytes: NVFP4's doubled E2M1 values (`0, ±1, ±2, ±3, ±4, ±6, ±8, ±12`) with a UE4M3
//! scale per 16 weights, Q1_0's `±1` with one f16 scale per 128. The tile cuts each row into
//! *chunks* of 32 weights, the span of one activation block, and lays 16 rows side by side,
//! four weights of a row per lane, so that one `vpdpbusd` with four activation bytes broadcast
//! to every lane adds four products to each of the 16 rows, as `grid_tiles` does for the
//! types of Q8_K activations. `vpdpbusd` wants one unsigned operand: the weights are signed, so
//! the activations are taken as `a + 128` (their sign bit flipped, a few chunks at a time into
//! a buffer on the stack) and each lane starts from `-128 Σw` of its weights, stored in the
//! tile. Each scale group (16 weights of NVFP4, a whole chunk of Q1_0) then ends in one
//! conversion and one multiply by the 16 rows' scales, and each chunk in an FMA by the
//! activation block's scale.
//!
//! Before these tiles the AVX-512 set ran the AVX2 GEMM, which decodes every block once per
//! quad and sums every row and activation row horizontally.
//!
//! # Exactness
//!
//! A lane sums at most 32 products of a weight (`|w| <= 12`) and `a + 128` (`0..=255`) from
//! `-128 Σw`: far inside `i32`, and equal to the scale group's `Σ w·a`, which is below `2^16`
//! and converts to `f32` exactly. NVFP4's scales are `ue4m3_half_to_f32`'s (a 4-bit integer
//! times a power of two), so a group's product with its scale is exact too; the first group of
//! a chunk is multiplied, the second added by an FMA (one rounding), and the chunk's sum goes
//! into the row's total by an FMA with the activation scale. Q1_0's chunk sum is multiplied by
//! the activation scale and added by an FMA with the block scale. The integers are the
//! portable kernel's; only the order of the `f32` roundings differs (two per chunk at most).

use crate::blocks::{BlockNvfp4, BlockQ1_0, BlockQ8_0};
use crate::kernel_api::{Kernels, TiledGemm};
use crate::kernels::x86::{target_entries, Avx512};

use super::{nvfp4_rows, q1_0_rows};

/// Rows in one tile, one per 32-bit lane.
const ROWS: usize = 16;

/// 32 weights (one Q8_0 activation block's span) of 16 rows.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Chunk {
    /// `q[p][r]`: weights `4p..4p + 4` of row `r`, signed bytes (little-endian).
    q: [[u32; ROWS]; 8],
    /// `neg_sums[h][r]`: `-128` times the sum of row `r`'s weights in scale group `h` (the
    /// chunk's two halves, or the whole chunk in `h = 0` for one scale per chunk).
    neg_sums: [[i32; ROWS]; 2],
    /// `scales[h][r]`: row `r`'s scale of group `h`.
    scales: [[f32; ROWS]; 2],
}

const _: () = assert!(std::mem::size_of::<Chunk>().is_multiple_of(8));

/// A weight block of a tiled type: `K` chunks, each with one scale or one per half.
trait DecodeChunks: bytemuck::Pod {
    /// The activation blocks that meet one weight block.
    type Act: bytemuck::Pod;
    /// Chunks (Q8_0 blocks) per weight block.
    const K: usize;
    /// Whether each half of a chunk has its own scale.
    const SPLIT: bool;

    /// Writes block `b` of 16 rows of `nb` blocks (row after row in `blocks`) into its `K`
    /// chunks.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F, BW and VNNI, and F16C.
    unsafe fn decode16(blocks: &[Self], nb: usize, b: usize, chunks: &mut [Chunk]);
}

mod imp {
    use std::arch::x86_64::*;

    use super::super::lanes::transpose16;
    use super::{Chunk, DecodeChunks, ROWS};
    use crate::blocks::{BlockNvfp4, BlockQ1_0, BlockQ8_0, F16Bits};
    use crate::quant::grids::KVALUES_FP4;

    /// An f16 as `f32` by F16C.
    ///
    /// # Safety
    /// The CPU must support F16C.
    #[inline(always)]
    unsafe fn half(x: F16Bits) -> f32 {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe {
            let bits = _mm_cvtsi32_si128(i32::from(u16::from_le_bytes(x.0)));
            _mm_cvtss_f32(_mm_cvtph_ps(bits))
        }
    }

    /// Each lane's sum of its four signed bytes in `v`, added to `acc`.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F and VNNI.
    #[inline(always)]
    unsafe fn add_bytes(acc: __m512i, v: __m512i) -> __m512i {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe { _mm512_dpbusd_epi32(acc, _mm512_set1_epi8(1), v) }
    }

    /// `-128 x`.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F.
    #[inline(always)]
    unsafe fn times_minus_128(x: __m512i) -> __m512i {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe { _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32::<7>(x)) }
    }

    /// Half the values of UE4M3 scale bytes, one per lane (as `ue4m3_half_to_f32`): the low
    /// 7 bits placed as an f32's exponent and mantissa (`2^(e-127)·(1 + m/8)`, or `m·2^-129`
    /// for `e = 0`) times `2^119` are exactly `(8 + m)·2^(e-11)` and `m·2^-10`; `0x7f` is zero.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F.
    #[inline(always)]
    unsafe fn ue4m3_halves(x: __m512i) -> __m512 {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe {
            let bits = _mm512_slli_epi32::<20>(_mm512_and_si512(x, _mm512_set1_epi32(0x7f)));
            let v = _mm512_mul_ps(
                _mm512_castsi512_ps(bits),
                _mm512_set1_ps(f32::from_bits(246 << 23)),
            );
            let not_a_number = _mm512_cmpeq_epi32_mask(x, _mm512_set1_epi32(0x7f));
            _mm512_maskz_mov_ps(!not_a_number, v)
        }
    }

    impl DecodeChunks for BlockNvfp4 {
        type Act = [BlockQ8_0; 2];
        const K: usize = 2;
        const SPLIT: bool = true;

        #[inline(always)]
        unsafe fn decode16(blocks: &[Self], nb: usize, b: usize, chunks: &mut [Chunk]) {
            // SAFETY: the caller's features; loads read each row's 32 code bytes, the value
            // table or a local array, stores go through references into the chunks.
            unsafe {
                // word i of every row's codes in one vector (lane r from row r)
                let mut rows = [_mm512_setzero_si512(); ROWS];
                for (r, row) in rows.iter_mut().enumerate() {
                    let qs = &blocks[r * nb + b].qs;
                    *row = _mm512_zextsi256_si512(_mm256_loadu_si256(qs.as_ptr().cast()));
                }
                let words = transpose16(rows);
                let d: [u32; ROWS] =
                    std::array::from_fn(|r| u32::from_le_bytes(blocks[r * nb + b].d));
                let d = _mm512_loadu_si512(d.as_ptr().cast());
                let lut = _mm512_broadcast_i32x4(_mm_loadu_si128(KVALUES_FP4.as_ptr().cast()));
                let m4 = _mm512_set1_epi8(0x0f);
                for (c, chunk) in chunks.iter_mut().enumerate() {
                    for h in 0..2 {
                        // group g = 2c + h: words 2g, 2g + 1, whose low nibbles are weights
                        // 0..8 of the group and high nibbles 8..16
                        let g = 2 * c + h;
                        let mut sum = _mm512_setzero_si512();
                        for k in 0..2 {
                            let x = words[2 * g + k];
                            let lo = _mm512_shuffle_epi8(lut, _mm512_and_si512(x, m4));
                            let hi = _mm512_shuffle_epi8(
                                lut,
                                _mm512_and_si512(_mm512_srli_epi16::<4>(x), m4),
                            );
                            _mm512_storeu_si512(chunk.q[4 * h + k].as_mut_ptr().cast(), lo);
                            _mm512_storeu_si512(chunk.q[4 * h + 2 + k].as_mut_ptr().cast(), hi);
                            sum = add_bytes(add_bytes(sum, lo), hi);
                        }
                        let neg = times_minus_128(sum);
                        _mm512_storeu_si512(chunk.neg_sums[h].as_mut_ptr().cast(), neg);
                        let byte = _mm512_and_si512(
                            _mm512_srlv_epi32(d, _mm512_set1_epi32(8 * g as i32)),
                            _mm512_set1_epi32(0xff),
                        );
                        _mm512_storeu_ps(chunk.scales[h].as_mut_ptr(), ue4m3_halves(byte));
                    }
                }
            }
        }
    }

    /// Dword `n`: byte `k` is `+1` where bit `k` of `n` is set, `-1` where it is not.
    const SIGNS: [i32; 16] = {
        let mut table = [0i32; 16];
        let mut n = 0;
        while n < 16 {
            let mut word = 0u32;
            let mut k = 0;
            while k < 4 {
                let byte = if (n >> k) & 1 == 1 { 0x01 } else { 0xff };
                word |= byte << (8 * k);
                k += 1;
            }
            table[n] = word as i32;
            n += 1;
        }
        table
    };

    impl DecodeChunks for BlockQ1_0 {
        type Act = [BlockQ8_0; 4];
        const K: usize = 4;
        const SPLIT: bool = false;

        #[inline(always)]
        unsafe fn decode16(blocks: &[Self], nb: usize, b: usize, chunks: &mut [Chunk]) {
            // SAFETY: the caller's features; loads read each row's 16 bit bytes or local
            // arrays, stores go through references into the chunks.
            unsafe {
                // word c of every row's bits in one vector (lane r from row r)
                let mut rows = [_mm512_setzero_si512(); ROWS];
                for (r, row) in rows.iter_mut().enumerate() {
                    let qs = &blocks[r * nb + b].qs;
                    *row = _mm512_zextsi128_si512(_mm_loadu_si128(qs.as_ptr().cast()));
                }
                let words = transpose16(rows);
                let d: [u16; ROWS] =
                    std::array::from_fn(|r| u16::from_le_bytes(blocks[r * nb + b].d.0));
                let d = _mm512_cvtph_ps(_mm256_loadu_si256(d.as_ptr().cast()));
                let signs = _mm512_loadu_si512(SIGNS.as_ptr().cast());
                let nibble = _mm512_set1_epi32(0x0f);
                for (c, chunk) in chunks.iter_mut().enumerate() {
                    // word c holds the chunk's 32 bits, weights 4p..4p + 4 in bits 4p..
                    let x = words[c];
                    let mut sum = _mm512_setzero_si512();
                    for (p, q) in chunk.q.iter_mut().enumerate() {
                        let shift = _mm512_set1_epi32(4 * p as i32);
                        let idx = _mm512_and_si512(_mm512_srlv_epi32(x, shift), nibble);
                        let v = _mm512_permutexvar_epi32(idx, signs);
                        _mm512_storeu_si512(q.as_mut_ptr().cast(), v);
                        sum = add_bytes(sum, v);
                    }
                    let neg = times_minus_128(sum);
                    _mm512_storeu_si512(chunk.neg_sums[0].as_mut_ptr().cast(), neg);
                    let zero = _mm512_setzero_si512();
                    _mm512_storeu_si512(chunk.neg_sums[1].as_mut_ptr().cast(), zero);
                    _mm512_storeu_ps(chunk.scales[0].as_mut_ptr(), d);
                    _mm512_storeu_ps(chunk.scales[1].as_mut_ptr(), _mm512_setzero_ps());
                }
            }
        }
    }

    /// Activation blocks flipped to `a + 128` at a time per activation row.
    const PIECE: usize = 16;

    /// Loads 64 bytes.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F.
    #[inline(always)]
    unsafe fn load64<T: bytemuck::Pod>(p: &T) -> __m512i {
        const { assert!(std::mem::size_of::<T>() == 64) };
        // SAFETY: `p` is 64 bytes; `loadu` has no alignment requirement.
        unsafe { _mm512_loadu_si512((p as *const T).cast()) }
    }

    /// The tile's 16 rows times `M` activation rows (`a`: `M` rows of `tile.len()` Q8_0
    /// blocks, back to back): `out[16 m + r]` for activation row `m`. `SPLIT`: a scale per
    /// 16 weights (else one per chunk, in `h = 0`).
    ///
    /// # Safety
    /// The CPU must support AVX-512 F, BW and VNNI, and F16C.
    #[inline(always)]
    pub(super) unsafe fn rows<const M: usize, const SPLIT: bool>(
        tile: &[Chunk],
        a: &[BlockQ8_0],
        out: &mut [f32],
    ) {
        let nch = tile.len();
        assert!(a.len() == M * nch && out.len() == M * ROWS);
        let mut flipped = [[[0u32; 8]; PIECE]; M];
        let mut da = [[0.0f32; PIECE]; M];
        // SAFETY: register-only intrinsics of the caller's features; loads and stores go
        // through references into the tile, the activations and the local buffers.
        unsafe {
            let sign = _mm256_set1_epi8(-128);
            let mut acc = [_mm512_setzero_ps(); M];
            for start in (0..nch).step_by(PIECE) {
                let len = PIECE.min(nch - start);
                for m in 0..M {
                    for i in 0..len {
                        let blk = &a[m * nch + start + i];
                        let q = _mm256_loadu_si256(blk.qs.as_ptr().cast());
                        let f = _mm256_xor_si256(q, sign);
                        _mm256_storeu_si256(flipped[m][i].as_mut_ptr().cast(), f);
                        da[m][i] = half(blk.d);
                    }
                }
                for (i, ch) in tile[start..start + len].iter().enumerate() {
                    if SPLIT {
                        let mut sum = [_mm512_setzero_ps(); M];
                        for h in 0..2 {
                            let start = load64(&ch.neg_sums[h]);
                            let sc = _mm512_loadu_ps(ch.scales[h].as_ptr());
                            let mut s = [start; M];
                            for (p, q) in ch.q.iter().enumerate().skip(4 * h).take(4) {
                                let q = load64(q);
                                for (m, s) in s.iter_mut().enumerate() {
                                    *s = _mm512_dpbusd_epi32(
                                        *s,
                                        _mm512_set1_epi32(flipped[m][i][p] as i32),
                                        q,
                                    );
                                }
                            }
                            for m in 0..M {
                                let x = _mm512_cvtepi32_ps(s[m]);
                                sum[m] = if h == 0 {
                                    _mm512_mul_ps(x, sc)
                                } else {
                                    _mm512_fmadd_ps(x, sc, sum[m])
                                };
                            }
                        }
                        for m in 0..M {
                            acc[m] = _mm512_fmadd_ps(sum[m], _mm512_set1_ps(da[m][i]), acc[m]);
                        }
                    } else {
                        let start = load64(&ch.neg_sums[0]);
                        let sc = _mm512_loadu_ps(ch.scales[0].as_ptr());
                        let mut s = [start; M];
                        for (p, q) in ch.q.iter().enumerate() {
                            let q = load64(q);
                            for (m, s) in s.iter_mut().enumerate() {
                                *s = _mm512_dpbusd_epi32(
                                    *s,
                                    _mm512_set1_epi32(flipped[m][i][p] as i32),
                                    q,
                                );
                            }
                        }
                        for m in 0..M {
                            let x =
                                _mm512_mul_ps(_mm512_cvtepi32_ps(s[m]), _mm512_set1_ps(da[m][i]));
                            acc[m] = _mm512_fmadd_ps(x, sc, acc[m]);
                        }
                    }
                }
            }
            for (m, o) in out.chunks_exact_mut(ROWS).enumerate() {
                _mm512_storeu_ps(o.as_mut_ptr(), acc[m]);
            }
        }
    }
}

/// `u64` words of a tile of 16 rows of `nb` blocks.
fn tile_words<W: DecodeChunks>(nb: usize) -> usize {
    nb * W::K * std::mem::size_of::<Chunk>() / 8
}

/// Decodes 16 rows of `nb` blocks each (row after row) into the tile, block by block.
///
/// # Safety
/// The CPU must support AVX-512 F, BW and VNNI, and F16C.
#[inline(always)]
unsafe fn make_tile_body<W: DecodeChunks>(blocks: &[W], tile: &mut [u64]) {
    let nb = blocks.len() / ROWS;
    let chunks: &mut [Chunk] = bytemuck::cast_slice_mut(tile);
    assert_eq!(chunks.len(), nb * W::K);
    assert_eq!(blocks.len(), ROWS * nb);
    for (b, block_chunks) in chunks.chunks_exact_mut(W::K).enumerate() {
        // SAFETY: the caller's features.
        unsafe { W::decode16(blocks, nb, b, block_chunks) };
    }
}

/// The tile's rows times each activation row of `a` (one or two quads), activation row major
/// into `out`.
///
/// # Safety
/// The CPU must support AVX-512 F, BW and VNNI, and F16C.
#[inline(always)]
unsafe fn gemm_body<W: DecodeChunks>(w: &[W], tile: &[u64], a: &[W::Act], out: &mut [f32]) {
    let nb = w.len() / ROWS;
    let tile: &[Chunk] = bytemuck::cast_slice(tile);
    let a: &[BlockQ8_0] = bytemuck::cast_slice(a);
    // SAFETY: the caller's features; `rows` asserts the lengths.
    unsafe {
        match (a.len() == 8 * nb * W::K, W::SPLIT) {
            (true, true) => imp::rows::<8, true>(tile, a, out),
            (true, false) => imp::rows::<8, false>(tile, a, out),
            (false, true) => imp::rows::<4, true>(tile, a, out),
            (false, false) => imp::rows::<4, false>(tile, a, out),
        }
    }
}

target_entries! { "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni";
    fn q8_0_tile<W: DecodeChunks>(blocks: &[W], tile: &mut [u64]) => make_tile_body::<W>;
    fn tiled_gemm<W: DecodeChunks>(w: &[W], tile: &[u64], a: &[W::Act], out: &mut [f32]) => gemm_body::<W>;
}

/// Quads from which a call decodes the tiles: from one on, as making them costs about a
/// seventh of a batch-32 call (4096x4096, 2 threads, shared Zen 4, best of 3, ms, AVX2 GEMM
/// against tiles: NVFP4 batch 4 1.9 vs 1.1, 8 3.7 vs 1.2; Q1_0 batch 4 1.25 vs 0.60, 8 1.9
/// vs 0.9).
const MIN_QUADS: usize = 1;

/// The 16-row tiles of `W`, used from `min_quads` quads on.
fn tiles<W: DecodeChunks>(min_quads: usize) -> TiledGemm<W, W::Act> {
    TiledGemm {
        groups: ROWS,
        quads: 2,
        min_quads,
        tile_words: tile_words::<W>,
        make_tile: q8_0_tile::<W>,
        gemm: tiled_gemm::<W>,
    }
}

/// Plain NVFP4 rows: the 512-bit GEMV, the AVX2 one-quad GEMM, the 16-row VNNI tiles.
pub(crate) fn nvfp4_tiled_rows(
    token: Avx512,
) -> Kernels<BlockNvfp4, [BlockQ8_0; 2], [BlockQ8_0; 2]> {
    Kernels {
        tiled: Some(tiles::<BlockNvfp4>(MIN_QUADS)),
        ..nvfp4_rows::nvfp4_rows(token)
    }
}

/// Plain Q1_0 rows: the 512-bit GEMV, the AVX2 one-quad GEMM, the 16-row VNNI tiles.
pub(crate) fn q1_0_tiled_rows(token: Avx512) -> Kernels<BlockQ1_0, [BlockQ8_0; 4], [BlockQ8_0; 4]> {
    Kernels {
        tiled: Some(tiles::<BlockQ1_0>(MIN_QUADS)),
        ..q1_0_rows::q1_0_rows(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::{CpuFeatures, KernelSet};
    use crate::kernel_api::SetToken;
    use crate::kernels::row_tests::{compare_matmul_shapes, random, random_q1_0, MatmulShapes};
    use crate::kernels::x86::q8_0_tile_checks as checks;
    use crate::types::GgmlType;

    #[test]
    fn tiles_equal_portable_and_exact() {
        let Some(cpu) = Avx512::new(CpuFeatures::get()) else {
            return;
        };
        checks::tiles_equal_portable_and_exact(
            nvfp4_tiled_rows(cpu).tiled.expect("tiles"),
            q1_0_tiled_rows(cpu).tiled.expect("tiles"),
            ROWS,
            &[4, 8],
        );
    }

    #[test]
    fn extremes_are_exact() {
        let Some(cpu) = Avx512::new(CpuFeatures::get()) else {
            return;
        };
        checks::extremes_are_exact(
            nvfp4_tiled_rows(cpu).tiled.expect("tiles"),
            q1_0_tiled_rows(cpu).tiled.expect("tiles"),
            ROWS,
        );
    }

    /// Through `QMatrix::matmul`: odd row counts (tiles, then the plain GEMM for the rows left
    /// over, or no tile at all), rows of 1, 2, 3 and 70 blocks, and batches around the
    /// threshold.
    #[test]
    fn matmul_with_tiles_equals_portable_and_exact() {
        let ns = [1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 31, 32, 33];
        for rows in [1, 15, 17, 33, 37] {
            let shapes = MatmulShapes {
                rows,
                nbs: &[1, 2, 3],
                ns: &ns,
            };
            compare_matmul_shapes(
                KernelSet::Avx512,
                GgmlType::NVFP4,
                4,
                random::<BlockNvfp4>,
                &shapes,
            );
            compare_matmul_shapes(KernelSet::Avx512, GgmlType::Q1_0, 4, random_q1_0, &shapes);
        }
        let long = MatmulShapes {
            rows: 33,
            nbs: &[70],
            ns: &[8, 17, 33],
        };
        compare_matmul_shapes(
            KernelSet::Avx512,
            GgmlType::NVFP4,
            4,
            random::<BlockNvfp4>,
            &long,
        );
        compare_matmul_shapes(KernelSet::Avx512, GgmlType::Q1_0, 4, random_q1_0, &long);
    }
}
