//! Per-call tiles of 16 plain grid rows (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M)
//! or ternary rows (TQ1_0, TQ2_0), one row per 32-bit lane, multiplied with AVX-512 VNNI.
//!
//! Each row's blocks are first decoded by the AVX2 set (`avx2::grid` into
//! `avx2::plain_tiles::DecodedK`): every weight an unsigned byte `u` (the signed grid value
//! plus 64, `2..=126` since the grids' largest magnitude is 62, or the IQ1 types' `8 q + δ + 9`,
//! `0..=18`), a scale per 16 weights (odd, at most 31) and the offset `64 · scale` or
//! `9 · scale` that comes off with the activations' 16-weight sums `bsums`. The ternary types
//! (`avx2::lowbit`) store their quants `t` (`0..=3`, the weight `t - 1`) with scale 1 and
//! offset 1, and skip the scale multiply (TQ2_0's tiles skip the decode too: `imp::tq2_0_tile`
//! transposes 16 rows' stored quants). The tile then lays
//! 16 rows side by side, four weights of each row per 32-bit lane, so that one `vpdpbusd` with
//! four activation bytes broadcast to every lane adds four products to each of the 16 rows:
//! no horizontal sums, no per-row work in the inner loop. A scale group's 4-weight sums go
//! into a fresh register and `vpmulld` scales them by the 16 rows' scales; the offsets come off
//! by one `vpdpwssd` of the (negated) offset pairs with each pair of `bsums`.
//!
//! Against the two-row tiles of `plain_k_tiles` (`maddubs`, `vpdpwssd` by the scales, and a
//! horizontal sum per row and block) this is 1.4 instead of about 4 instructions per 64
//! weights, row and activation row.
//!
//! # Exactness
//!
//! A lane's sum over one scale group (32 weights at most) is at most `32 · 126 · 128 < 2^19`,
//! times a scale of at most 31 under `2^24`; a block's eight such groups and its offset sum
//! (16 · `64 · 31 · 2048` < 2^26) stay far inside `i32`. The lane then holds the row's exact
//! integer block sum, which is converted to `f32` once, as ggml's `vec_dot` converts its
//! block sum.

use crate::blocks::{BlockIq1M, BlockIq1S, BlockIq2S, BlockIq2Xs, BlockIq2Xxs, BlockIq3S};
use crate::blocks::{BlockIq3Xxs, BlockQ8K, BlockTq1_0, BlockTq2_0};
use crate::cpu::KernelSet;
use crate::kernel_api::{Kernels, TiledGemm};
use crate::kernels::x86::avx2::plain_tiles::{DecodeK, DecodedK};
use crate::kernels::x86::avx2::{grid, lowbit};
use crate::kernels::x86::{target_entries, Avx512};

/// Rows in one tile, one per 32-bit lane.
const ROWS: usize = 16;

/// One 256-weight block of 16 rows.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Rows16Block {
    /// `u[p]`: weights `4p..4p + 4` of each row, row `r` in bytes `4r..4r + 4`.
    u: [[u8; 64]; 64],
    /// `scales[h][r]`: row `r`'s scale of weights `16h..16h + 16`.
    scales: [[i32; ROWS]; 16],
    /// `neg_offsets[k][2r + e]`: minus row `r`'s offset of weights `16 (2k + e)..`, the pairs
    /// that `vpdpwssd` multiplies with the activations' `bsums[2k]`, `bsums[2k + 1]`.
    neg_offsets: [[i16; 2 * ROWS]; 8],
    /// Each row's block scale (with the type's constant factor).
    d: [f32; ROWS],
}

const _: () = assert!(std::mem::size_of::<Rows16Block>().is_multiple_of(8));

/// `u64` words of a tile of 16 rows of `nb` blocks.
fn tile_words(nb: usize) -> usize {
    nb * std::mem::size_of::<Rows16Block>() / 8
}

/// Decodes 16 rows of `nb` blocks each (row after row) into the tile, block by block.
///
/// # Safety
/// The CPU must support AVX2 and F16C.
#[inline(always)]
unsafe fn make_tile_body<W: DecodeK>(blocks: &[W], tile: &mut [u64]) {
    let nb = blocks.len() / ROWS;
    let tile: &mut [Rows16Block] = bytemuck::cast_slice_mut(tile);
    assert_eq!(tile.len(), nb);
    let mut dec = <DecodedK as bytemuck::Zeroable>::zeroed();
    for (b, t) in tile.iter_mut().enumerate() {
        for r in 0..ROWS {
            // SAFETY: the caller's features.
            unsafe { blocks[r * nb + b].decode(&mut dec) };
            for (p, u) in t.u.iter_mut().enumerate() {
                u[4 * r..4 * r + 4].copy_from_slice(&dec.u[4 * p..4 * p + 4]);
            }
            for (h, s) in t.scales.iter_mut().enumerate() {
                s[r] = i32::from(dec.scales[h]);
            }
            for (k, o) in t.neg_offsets.iter_mut().enumerate() {
                o[2 * r] = -dec.offsets[2 * k];
                o[2 * r + 1] = -dec.offsets[2 * k + 1];
            }
            t.d[r] = dec.d;
        }
    }
}

mod imp {
    use std::arch::x86_64::*;

    use super::super::lanes::transpose16;
    use super::{Rows16Block, ROWS};
    use crate::blocks::{BlockQ8K, BlockTq2_0};

    /// TQ2_0's tile without the per-row decode of `make_tile_body`: the 16 rows' quants of a
    /// block (64 bytes each) are loaded and transposed as 16 x 16 words, so that word `i` of
    /// every row lands in one vector (lane `r` from row `r`), and its four 2-bit planes,
    /// shifted and masked, are the tile's `u` vectors as they are (plane `l` of word `8j + k`
    /// holds weights `128j + 32l + 4k..+4` of every row). The scales and offsets are left as
    /// they are: the ternary GEMM (`SUB = 256`) reads neither (scale 1, offset 1 everywhere). (Gathering each word from the 16 rows
    /// instead took 80 % of the tile's time on Zen 4.)
    ///
    /// # Safety
    /// The CPU must support AVX-512 F and BW, and F16C.
    #[inline(always)]
    pub(super) unsafe fn tq2_0_tile(blocks: &[BlockTq2_0], tile: &mut [Rows16Block]) {
        let nb = blocks.len() / ROWS;
        assert!(blocks.len() == ROWS * nb && tile.len() == nb);
        // SAFETY: register-only intrinsics of the caller's features; loads and stores go
        // through references into the blocks and the tile.
        unsafe {
            let three = _mm512_set1_epi8(3);
            for (b, t) in tile.iter_mut().enumerate() {
                let mut rows = [_mm512_setzero_si512(); ROWS];
                for (r, row) in rows.iter_mut().enumerate() {
                    *row = _mm512_loadu_si512(blocks[r * nb + b].qs.as_ptr().cast());
                }
                for (i, words) in transpose16(rows).into_iter().enumerate() {
                    let (j, k) = (i / 8, i % 8);
                    let planes = [
                        words,
                        _mm512_srli_epi32::<2>(words),
                        _mm512_srli_epi32::<4>(words),
                        _mm512_srli_epi32::<6>(words),
                    ];
                    for (l, &plane) in planes.iter().enumerate() {
                        let u = _mm512_and_si512(plane, three);
                        _mm512_storeu_si512(t.u[32 * j + 8 * l + k].as_mut_ptr().cast(), u);
                    }
                }
                let mut d = [0u16; ROWS];
                for (r, d) in d.iter_mut().enumerate() {
                    *d = u16::from_le_bytes(blocks[r * nb + b].d.0);
                }
                let d = _mm512_cvtph_ps(_mm256_loadu_si256(d.as_ptr().cast()));
                _mm512_storeu_ps(t.d.as_mut_ptr(), d);
            }
        }
    }

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

    /// Activation quants `4p..4p + 4` broadcast to every lane.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F.
    #[inline(always)]
    unsafe fn quants4(a: &BlockQ8K, p: usize) -> __m512i {
        let q: [i8; 4] = a.qs[4 * p..4 * p + 4].try_into().expect("four quants");
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe { _mm512_set1_epi32(i32::from_le_bytes(q.map(|v| v as u8))) }
    }

    /// The activation sums `bsums[2k]`, `bsums[2k + 1]` as an `i16` pair broadcast to every
    /// lane.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F.
    #[inline(always)]
    unsafe fn sum_pair(a: &BlockQ8K, k: usize) -> __m512i {
        let lo = u32::from(a.bsums[2 * k] as u16);
        let hi = u32::from(a.bsums[2 * k + 1] as u16);
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe { _mm512_set1_epi32((lo | (hi << 16)) as i32) }
    }

    /// The tile's 16 rows times `M` activation rows (`a`: `M` rows of `nb` blocks, back to
    /// back; one or two quads): `out[16 m + r]` for activation row `m`. `SUB` is the weights per scale
    /// group (16 or 32; the scales of a 32-weight group are stored on both of its halves), or
    /// 256 for the ternary types (scale 1 and offset 1 on every weight: the tile's scales and
    /// offsets are not read).
    ///
    /// # Safety
    /// The CPU must support AVX-512 F, BW and VNNI.
    #[inline(always)]
    pub(super) unsafe fn rows<const M: usize, const SUB: usize>(
        tile: &[Rows16Block],
        nb: usize,
        a: &[BlockQ8K],
        out: &mut [f32],
    ) {
        assert!(a.len() == M * nb && tile.len() == nb && out.len() == M * ROWS);
        // SAFETY: register-only intrinsics of the caller's features; loads go through
        // references into the tile and the activations.
        unsafe {
            let mut acc = [_mm512_setzero_ps(); M];
            for (b, blk) in tile.iter().enumerate() {
                let acts: [&BlockQ8K; M] = std::array::from_fn(|m| &a[m * nb + b]);
                let mut isum = [_mm512_setzero_si512(); M];
                if SUB == 256 {
                    // The ternary types: offset 1 on every weight of every row, so the offset
                    // term is `-Σa` in every lane, one broadcast instead of eight `vpdpwssd`.
                    for (m, s) in isum.iter_mut().enumerate() {
                        let total: i32 = acts[m].bsums.iter().map(|&b| i32::from(b)).sum();
                        *s = _mm512_set1_epi32(-total);
                    }
                } else {
                    for (k, off) in blk.neg_offsets.iter().enumerate() {
                        let off = load64(off);
                        for (m, s) in isum.iter_mut().enumerate() {
                            *s = _mm512_dpwssd_epi32(*s, off, sum_pair(acts[m], k));
                        }
                    }
                }
                for h in 0..256 / SUB {
                    let mut raw = [_mm512_setzero_si512(); M];
                    for p in h * SUB / 4..(h + 1) * SUB / 4 {
                        let u = load64(&blk.u[p]);
                        for (m, s) in raw.iter_mut().enumerate() {
                            *s = _mm512_dpbusd_epi32(*s, u, quants4(acts[m], p));
                        }
                    }
                    if SUB == 256 {
                        // One scale per block (the ternary types' 1): nothing to multiply.
                        for m in 0..M {
                            isum[m] = _mm512_add_epi32(isum[m], raw[m]);
                        }
                    } else {
                        let sc = load64(&blk.scales[h * SUB / 16]);
                        for m in 0..M {
                            isum[m] = _mm512_add_epi32(isum[m], _mm512_mullo_epi32(raw[m], sc));
                        }
                    }
                }
                let d = _mm512_loadu_ps(blk.d.as_ptr());
                for m in 0..M {
                    let dm = _mm512_mul_ps(d, _mm512_set1_ps(acts[m].d));
                    acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[m]), dm, acc[m]);
                }
            }
            for (m, o) in out.chunks_exact_mut(ROWS).enumerate() {
                _mm512_storeu_ps(o.as_mut_ptr(), acc[m]);
            }
        }
    }
}

/// The tile's rows times each activation row of `a` (one or two quads), activation row major
/// into `out`.
///
/// # Safety
/// The CPU must support AVX-512 F, BW and VNNI.
#[inline(always)]
unsafe fn gemm_body<W, const SUB: usize>(w: &[W], tile: &[u64], a: &[BlockQ8K], out: &mut [f32]) {
    let nb = w.len() / ROWS;
    let tile: &[Rows16Block] = bytemuck::cast_slice(tile);
    // SAFETY: the caller's features; `rows` asserts the lengths.
    unsafe {
        if a.len() == 8 * nb {
            imp::rows::<8, SUB>(tile, nb, a, out)
        } else {
            imp::rows::<4, SUB>(tile, nb, a, out)
        }
    }
}

/// TQ2_0's tile by gathers (`imp::tq2_0_tile`).
///
/// # Safety
/// The CPU must support AVX-512 F and BW, and F16C.
#[inline(always)]
unsafe fn tq2_0_tile_body(blocks: &[BlockTq2_0], tile: &mut [u64]) {
    // SAFETY: the caller's features; `tq2_0_tile` asserts the lengths.
    unsafe { imp::tq2_0_tile(blocks, bytemuck::cast_slice_mut(tile)) }
}

target_entries! { "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni";
    fn grid_tile<W: DecodeK>(blocks: &[W], tile: &mut [u64]) => make_tile_body::<W>;
    fn tq2_0_tile(blocks: &[BlockTq2_0], tile: &mut [u64]) => tq2_0_tile_body;
    fn tiled_gemm16<W: DecodeK>(w: &[W], tile: &[u64], a: &[BlockQ8K], out: &mut [f32]) => gemm_body::<W, 16>;
    fn tiled_gemm32<W: DecodeK>(w: &[W], tile: &[u64], a: &[BlockQ8K], out: &mut [f32]) => gemm_body::<W, 32>;
    fn tiled_gemm256<W: DecodeK>(w: &[W], tile: &[u64], a: &[BlockQ8K], out: &mut [f32]) => gemm_body::<W, 256>;
}

/// Quads from which a call decodes the tiles of a grid type: from two on (batch 8) they
/// measured faster than the AVX2 GEMM, which decodes each block once per quad (4096x4096, 2
/// threads, shared Zen 4, ms: IQ1_M batch 8 2.2 vs 2.9, 16 2.6 vs 5.7).
const GRID_MIN_QUADS: usize = 2;

/// The same for TQ2_0, whose AVX2 GEMM decodes a block in a few instructions. With its
/// tiles made by the per-row decode (`make_tile_body`) they overtook it only between batch 32
/// and 64 (batch 32 3.7 vs 3.6, 48 4.7 vs 5.1, 64 5.8 vs 6.4): the decode, and the copy of its
/// words into the lanes, cost more than the products at batch 32. Made by transposes of the
/// stored quants (`imp::tq2_0_tile`) they win from batch 8 (2026-12-06, best of 6 on a
/// loaded machine: batch 8 0.72 vs 0.68, 16 2.9 vs 1.1, 24 2.2 vs 1.6).
const TQ2_0_MIN_QUADS: usize = 2;

/// The same for TQ1_0 (batch 16 2.4 vs 2.2, 32 3.5 vs 4.5).
const TQ1_0_MIN_QUADS: usize = 8;

/// The 16-row tiles of a type with one scale per `sub` weights (16, 32, or 256: the block's
/// scale alone), used from `min_quads` quads on.
fn rows16_tiles<W: DecodeK>(sub: usize, min_quads: usize) -> TiledGemm<W, BlockQ8K> {
    TiledGemm {
        groups: ROWS,
        quads: 2,
        min_quads,
        tile_words,
        make_tile: grid_tile::<W>,
        gemm: match sub {
            16 => tiled_gemm16::<W>,
            32 => tiled_gemm32::<W>,
            _ => tiled_gemm256::<W>,
        },
    }
}

/// The AVX-512 rows of each grid and ternary type: the AVX2 GEMV and one-quad GEMM, the
/// 16-row tiles.
macro_rules! tiled_rows {
    ($($block:ty, $sub:literal, $min_quads:expr => $module:ident::$ctor:ident;)*) => {$(
        #[doc = concat!("Plain `", stringify!($block), "` rows: the AVX2 GEMV and one-quad GEMM, the 16-row VNNI tiles.")]
        pub(crate) fn $ctor(token: Avx512) -> Kernels<$block, BlockQ8K, BlockQ8K> {
            Kernels {
                set: KernelSet::Avx512,
                tiled: Some(rows16_tiles::<$block>($sub, $min_quads)),
                ..$module::$ctor(token.avx2())
            }
        }
    )*};
}

tiled_rows! {
    BlockIq2Xxs, 32, GRID_MIN_QUADS => grid::iq2_xxs_rows;
    BlockIq2Xs, 16, GRID_MIN_QUADS => grid::iq2_xs_rows;
    BlockIq2S, 16, GRID_MIN_QUADS => grid::iq2_s_rows;
    BlockIq3Xxs, 32, GRID_MIN_QUADS => grid::iq3_xxs_rows;
    BlockIq3S, 32, GRID_MIN_QUADS => grid::iq3_s_rows;
    BlockIq1S, 32, GRID_MIN_QUADS => grid::iq1_s_rows;
    BlockIq1M, 16, GRID_MIN_QUADS => grid::iq1_m_rows;
    BlockTq1_0, 256, TQ1_0_MIN_QUADS => lowbit::tq1_0_rows;
}

/// Plain TQ2_0 rows: the AVX2 GEMV and one-quad GEMM, the 16-row VNNI tiles made by gathers.
pub(crate) fn tq2_0_rows(token: Avx512) -> Kernels<BlockTq2_0, BlockQ8K, BlockQ8K> {
    Kernels {
        set: KernelSet::Avx512,
        tiled: Some(TiledGemm {
            make_tile: tq2_0_tile,
            ..rows16_tiles::<BlockTq2_0>(256, TQ2_0_MIN_QUADS)
        }),
        ..lowbit::tq2_0_rows(token.avx2())
    }
}
