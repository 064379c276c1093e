//! Per-call tiles of three 8-row groups of `mxfp4_8x8` for the AVX2 GEMM: each block's nibbles
//! decoded once per call to unsigned bytes (the doubled E2M1 value plus 12), one row per 32-bit
//! lane as the interleaved GEMM regroups them, and its E8M0 scales to f32.
//!
//! The interleaved GEMM (`mxfp4::gemm`) decodes every block again for each quad of activation
//! rows (regrouping, nibble split and a table lookup per vector), and each 4-byte broadcast of
//! an activation row meets one 8-row group. Over a tile, the products read the decoded vectors
//! and each broadcast meets all three groups: per 32 weights of 24 rows and four activation
//! rows, 32 broadcasts serve 96 `vpmaddubsw` and nothing is decoded. Against the interleaved GEMM,
//! AMD EPYC Zen 3, 2 threads, weights hot, min of 3 (`compare_peer.py --baseline`), ms: 4096x4096
//! batch 8 1.45 -> 1.13, 32 5.43 -> 3.80, 512 96.8 -> 58.9; 11008x4096 batch 32 12.6 -> 8.7, 512
//! 206 -> 133. Q4_0, whose interleaved GEMM decodes with five instructions a vector and no
//! lookup, measured slower on two-group tiles at batches 8 and 32 (0.94 -> 1.21, 3.47 -> 4.02 ms)
//! and equal at 512, so it keeps its interleaved GEMM.
//!
//! # Exactness
//!
//! As in the interleaved GEMM: a `vpmaddubsw` pair is at most `2·24·128 = 6144`, summed over four
//! vectors (24576) in `i16` before each widening `madd`. The offset (12 times the activation
//! row's quant sum) comes off in exact `i32`; only the order of the `f32` roundings differs from
//! the portable kernel.

use std::arch::x86_64::*;

use super::imp::{e8m0_half_x8, nibble_rows, row_order};
use crate::blocks::{BlockMxfp4x8, BlockQ8_0x4Sums};
use crate::kernel_api::{target_entries, TiledGemm};
use crate::quant::grids::KVALUES_FP4;

/// Row groups of 8 in one tile: every activation broadcast serves all of them. Three against
/// two, MXFP4 4096x4096, one Zen 3 thread, weights hot, min of 3 alternating (ms): batch 32
/// 7.23 -> 6.49, 512 108.3 -> 95.6; four measured no faster than three (the accumulators of
/// four groups leave no spare register).
const GROUPS: usize = 3;

/// One 32-column block of the tile's rows.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct TileBlock {
    /// `u[g][i]`: group `g`'s unsigned values that meet activation bytes `4i..4i + 4` of a row,
    /// four of each weight row per 32-bit lane (lanes in `row_order`).
    u: [[[u8; 32]; 8]; GROUPS],
    /// `d[g]`: group `g`'s row scales, lanes in `row_order`.
    d: [[f32; 8]; GROUPS],
}

const _: () = assert!(std::mem::size_of::<TileBlock>().is_multiple_of(8));

/// A packed 8-row block whose values are unsigned bytes less a constant offset (MXFP4's; the
/// form any 8x8 nibble layout with a table or an offset would take).
pub(in crate::kernels::x86::avx2) trait UnsignedBlock:
    bytemuck::Pod
{
    /// Whether a `vpmaddubsw` pair can pass `2^15 / 8`, so that a block's eight products are
    /// widened in two halves.
    const WIDEN_HALVES: bool;

    /// The block's eight vectors of unsigned values, vector `i` meeting activation bytes
    /// `4i..4i + 4`.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    unsafe fn unsigned_values(&self) -> [__m256i; 8];

    /// The 8 rows' scales in natural row order.
    ///
    /// # Safety
    /// The CPU must support AVX2 and F16C.
    unsafe fn row_scales(&self) -> __m256;

    /// The offset to take off a row's integer dot product, from the quad's `offsets` entry of
    /// that activation row.
    fn offset(quad_offset: i32) -> i32;
}

/// Vector `i` of a block from the four regrouped vectors: the low nibbles of vector `i` meet
/// activation bytes `4i..`, the high ones `16 + 4i..` (activation vector `i + 4`).
#[inline(always)]
fn by_activation(pairs: [[__m256i; 2]; 4]) -> [__m256i; 8] {
    std::array::from_fn(|i| pairs[i % 4][i / 4])
}

/// What makes every doubled E2M1 value (`|v| <= 12`) an unsigned byte.
const MXFP4_OFFSET: i8 = 12;

impl UnsignedBlock for BlockMxfp4x8 {
    const WIDEN_HALVES: bool = true;

    #[inline(always)]
    unsafe fn unsigned_values(&self) -> [__m256i; 8] {
        // SAFETY: the caller's features; the table is 16 bytes.
        unsafe {
            let table = KVALUES_FP4.map(|v| v + MXFP4_OFFSET);
            let lut = _mm256_broadcastsi128_si256(_mm_loadu_si128(table.as_ptr().cast()));
            by_activation(nibble_rows::<false>(&self.qs)).map(|v| _mm256_shuffle_epi8(lut, v))
        }
    }

    #[inline(always)]
    unsafe fn row_scales(&self) -> __m256 {
        // SAFETY: the caller's features.
        unsafe { e8m0_half_x8(&self.e) }
    }

    #[inline(always)]
    fn offset(quad_offset: i32) -> i32 {
        // `Q8_0SumsInterleaved<128>`: 128 Σa, a multiple of 128
        (quad_offset >> 7) * i32::from(MXFP4_OFFSET)
    }
}

/// Loads 32 bytes.
///
/// # Safety
/// The CPU must support AVX.
#[inline(always)]
unsafe fn load32(p: &[u8; 32]) -> __m256i {
    // SAFETY: `p` is 32 bytes; `loadu` has no alignment requirement.
    unsafe { _mm256_loadu_si256(p.as_ptr().cast()) }
}

/// Fills the tile from its row groups (`blocks`: group 0's `nb` blocks, then group 1's, ...).
///
/// # Safety
/// The CPU must support AVX2 and F16C.
#[inline(always)]
unsafe fn make_tile_body<W: UnsignedBlock>(blocks: &[W], tile: &mut [u64]) {
    let tile: &mut [TileBlock] = bytemuck::cast_slice_mut(tile);
    let nb = tile.len();
    assert!(blocks.len() == GROUPS * nb);
    // SAFETY: the caller's features; the stores go through references into the tile.
    unsafe {
        let order = row_order();
        for (b, t) in tile.iter_mut().enumerate() {
            for g in 0..GROUPS {
                let block = &blocks[g * nb + b];
                for (u, v) in t.u[g].iter_mut().zip(block.unsigned_values()) {
                    _mm256_storeu_si256(u.as_mut_ptr().cast(), v);
                }
                let d = _mm256_permutevar8x32_ps(block.row_scales(), order);
                _mm256_storeu_ps(t.d[g].as_mut_ptr(), d);
            }
        }
    }
}

/// The tile's rows times one quad of activation rows: `out[8 (GROUPS m + g) + r]` for activation
/// row `m` and row `r` of group `g`.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[inline(always)]
unsafe fn gemm_body<W: UnsignedBlock>(
    _: &[W],
    tile: &[u64],
    a: &[BlockQ8_0x4Sums],
    out: &mut [f32],
) {
    const M: usize = 4;
    let tile: &[TileBlock] = bytemuck::cast_slice(tile);
    assert!(a.len() == tile.len() && out.len() == M * GROUPS * 8);
    // SAFETY: register-only intrinsics of the caller's features; loads and stores go through
    // references into the tile, the quads and `out` (lengths asserted).
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let halves = if W::WIDEN_HALVES { 2 } else { 1 };
        let per_half = 8 / halves;
        let mut acc = [[_mm256_setzero_ps(); GROUPS]; M];
        for (t, ab) in tile.iter().zip(a) {
            let mut d = [_mm256_setzero_ps(); GROUPS];
            for (d, row_scales) in d.iter_mut().zip(&t.d) {
                *d = _mm256_loadu_ps(row_scales.as_ptr());
            }
            for (m, acc_m) in acc.iter_mut().enumerate() {
                // The weights loaded again for every activation row: left to itself, LLVM keeps
                // the block's 16 vectors for the four rows and spills them.
                let t = std::hint::black_box(t);
                // Row m's bytes 4i..4i + 4 sit at 32 (i / 2) + 8m + 4 (i % 2) in the quad.
                let bytes = |i: usize| -> i32 {
                    let at = 32 * (i / 2) + 8 * m + 4 * (i % 2);
                    let q: [i8; 4] = ab.qs[at..at + 4].try_into().expect("4 bytes");
                    i32::from_le_bytes(q.map(|v| v as u8))
                };
                let mut isum = [_mm256_set1_epi32(-W::offset(ab.offsets[m])); GROUPS];
                for h in 0..halves {
                    let mut s16 = [_mm256_setzero_si256(); GROUPS];
                    for i in h * per_half..(h + 1) * per_half {
                        let av = _mm256_set1_epi32(bytes(i));
                        for (s, u) in s16.iter_mut().zip(&t.u) {
                            *s = _mm256_add_epi16(*s, _mm256_maddubs_epi16(load32(&u[i]), av));
                        }
                    }
                    for (sum, s) in isum.iter_mut().zip(s16) {
                        *sum = _mm256_add_epi32(*sum, _mm256_madd_epi16(s, ones));
                    }
                }
                let da = _mm256_set1_ps(ab.d[m]);
                for ((acc, sum), d) in acc_m.iter_mut().zip(isum).zip(d) {
                    let dots = _mm256_cvtepi32_ps(sum);
                    *acc = _mm256_fmadd_ps(dots, _mm256_mul_ps(d, da), *acc);
                }
            }
        }
        let order = row_order();
        for (m, acc_m) in acc.iter().enumerate() {
            for (g, acc) in acc_m.iter().enumerate() {
                let o = &mut out[8 * (GROUPS * m + g)..8 * (GROUPS * m + g) + 8];
                _mm256_storeu_ps(o.as_mut_ptr(), _mm256_permutevar8x32_ps(*acc, order));
            }
        }
    }
}

target_entries! { "avx2,fma,f16c";
    fn unsigned_tile<W: UnsignedBlock>(blocks: &[W], tile: &mut [u64]) => make_tile_body::<W>;
    fn tiled_gemm<W: UnsignedBlock>(w: &[W], tile: &[u64], a: &[BlockQ8_0x4Sums], out: &mut [f32]) => gemm_body::<W>;
}

/// The tiles of `W` (`GROUPS` row groups), used from `min_quads` quads of activation rows on.
pub(in crate::kernels::x86::avx2) fn tiles<W: UnsignedBlock>(
    min_quads: usize,
) -> TiledGemm<W, BlockQ8_0x4Sums> {
    TiledGemm {
        groups: GROUPS,
        quads: 1,
        min_quads,
        tile_words: |nb| nb * std::mem::size_of::<TileBlock>() / 8,
        make_tile: unsigned_tile::<W>,
        gemm: tiled_gemm::<W>,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::{CpuFeatures, KernelSet};

    /// The tile's product of the row groups of `blocks` with one quad `a`, through the entry
    /// points the driver calls.
    fn product<W: UnsignedBlock>(blocks: &[W], a: &[BlockQ8_0x4Sums]) -> Vec<f32> {
        let t = tiles::<W>(1);
        let mut tile = vec![0u64; (t.tile_words)(a.len())];
        (t.make_tile)(blocks, &mut tile);
        let mut out = vec![f32::NAN; 32 * GROUPS];
        (t.gemm)(blocks, &tile, a, &mut out);
        out
    }

    /// A quad whose four rows are `q` everywhere, with the offsets of `Q8_0SumsInterleaved<OFFSET>`.
    fn quad<const OFFSET: i32>(q: i8) -> BlockQ8_0x4Sums {
        BlockQ8_0x4Sums {
            d: [1.0; 4],
            offsets: [OFFSET * 32 * i32::from(q); 4],
            qs: [q; 128],
        }
    }

    /// Every MXFP4 nibble against activations of -128 and 127, the widest `i16` sums and the
    /// largest offsets: exact, in every row of every group.
    #[test]
    fn mxfp4_extremes_are_exact() {
        if !CpuFeatures::get().has(KernelSet::Avx2) {
            return;
        }
        for nibble in 0..16u8 {
            for q in [-128i8, 127] {
                // e = 128: the halved scale 2^0, so an output is 32 · value · a.
                let block = BlockMxfp4x8 {
                    e: [128; 8],
                    qs: [nibble * 0x11; 128],
                };
                let out = product(&[block; GROUPS], &[quad::<128>(q)]);
                let want = 32.0 * f32::from(KVALUES_FP4[usize::from(nibble)]) * f32::from(q);
                assert!(
                    out.iter().all(|&o| o == want),
                    "nibble {nibble}, a {q}: {out:?}"
                );
            }
        }
    }
}
