//! Per-call tiles of plain Q2_K, Q3_K and IQ4_XS rows multiplied with AVX-512 VNNI. The tiles are the
//! AVX2 set's decoded blocks (`avx2::plain_tiles`: unsigned quants, group scales and offsets);
//! what changes is the arithmetic per 64 weights and activation row:
//!
//! * Q2_K: a 2-bit quant times its 4-bit group scale is at most 45, so the tile stores the
//!   products and one `vpdpbusd` does the rest (the AVX2 tile needs `maddubs`, a `madd` by
//!   the scales and an add per 32 weights);
//! * Q3_K: `q + 4` (`0..=7`) times a signed 6-bit scale does not fit a byte, so `maddubs` makes
//!   the pair sums and one `vpdpwssd` multiplies them by the group scales and accumulates;
//! * IQ4_XS: levels + 128 fill a byte, so `vpdpbusd` makes 4-weight sums and `vpmulld` scales
//!   them (the AVX2 kernel needs `abs`, `sign`, `maddubs`, `madd` and an add per 32 weights and
//!   activation row, and decodes per quad).
//!
//! The offset terms (Q2_K's mins, Q3_K's `4 · scale`, IQ4_XS's `128 · scale`) take one `madd`
//! with the activations' 16-weight sums per block. Every integer stays exact: a lane sums at
//! most 16 products of 45 · 128 (Q2_K), 8 pair sums of 1792 · 32 (Q3_K) or 4 four-weight sums
//! of 241 · 128 times 32 (IQ4_XS, under 2^24); an offset sum is at most 2 · 4096 · 2048.

use crate::blocks::{BlockIq4Xs, BlockQ2K, BlockQ3K, BlockQ8K};
use crate::cpu::KernelSet;
use crate::kernel_api::{Kernels, TiledGemm};
use crate::kernels::x86::avx2::plain_rows;
use crate::kernels::x86::avx2::plain_tiles::{
    make_tile_body, prescaled_q2_k_tile_body, tile_words, DecodedK, TILE_ROWS,
};
use crate::kernels::x86::{target_entries, Avx512};

mod imp {
    use std::arch::x86_64::*;

    use super::{DecodedK, TILE_ROWS};
    use crate::blocks::BlockQ8K;

    /// `N` elements of `s` from `at`.
    #[inline(always)]
    fn sub<T, const N: usize>(s: &[T], at: usize) -> &[T; N] {
        s[at..at + N]
            .try_into()
            .expect("in-bounds fixed-size chunk")
    }

    /// Loads 64 bytes.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F.
    #[inline(always)]
    unsafe fn load64<T: bytemuck::Pod>(p: &[T; 64]) -> __m512i {
        assert_eq!(std::mem::size_of::<T>(), 1);
        // SAFETY: `p` is 64 one-byte elements; `loadu` has no alignment requirement.
        unsafe { _mm512_loadu_si512(p.as_ptr().cast()) }
    }

    /// 16 `i16` in the low half of a vector, zeros above.
    ///
    /// # Safety
    /// The CPU must support AVX-512 BW.
    #[inline(always)]
    unsafe fn load_i16x16(p: &[i16; 16]) -> __m512i {
        // SAFETY: the mask reads exactly the 16 `i16` (32 bytes) of `p`.
        unsafe { _mm512_maskz_loadu_epi16(0xffff, p.as_ptr()) }
    }

    /// For each 64-weight chunk `j` of a block, the `vpermw` indices that spread its four
    /// group scales over the 32 pair sums of `maddubs` (8 pairs per 16-weight group).
    ///
    /// # Safety
    /// The CPU must support AVX-512 F.
    #[inline(always)]
    unsafe fn scale_indices() -> [__m512i; 4] {
        std::array::from_fn(|j| {
            let lanes: [i16; 32] = std::array::from_fn(|l| (4 * j + l / 8) as i16);
            // SAFETY: 32 `i16` are 64 bytes; `loadu` has no alignment requirement.
            unsafe { _mm512_loadu_si512(lanes.as_ptr().cast()) }
        })
    }

    /// For each 64-weight chunk `j` of a block, the `vpermd` indices that spread its four
    /// group scales over the 16 dword sums of `vpdpbusd` (4 per 16-weight group).
    ///
    /// # Safety
    /// The CPU must support AVX-512 F.
    #[inline(always)]
    unsafe fn dword_scale_indices() -> [__m512i; 4] {
        std::array::from_fn(|j| {
            let lanes: [i32; 16] = std::array::from_fn(|l| (4 * j + l / 4) as i32);
            // SAFETY: 16 `i32` are 64 bytes; `loadu` has no alignment requirement.
            unsafe { _mm512_loadu_si512(lanes.as_ptr().cast()) }
        })
    }

    /// The tile's [`TILE_ROWS`] rows (`nb` decoded blocks each) times four activation rows
    /// (`a`, `nb` blocks each, back to back): `out[m * TILE_ROWS + g]`. `MODE` says how the
    /// group scales enter (see [`super::Arith`]).
    ///
    /// # Safety
    /// The CPU must support AVX-512 F, BW and VNNI.
    #[inline(always)]
    pub(super) unsafe fn quad<const MODE: u8>(
        tile: &[DecodedK],
        nb: usize,
        a: &[BlockQ8K],
        out: &mut [f32],
    ) {
        const PRESCALED: u8 = super::Arith::Prescaled as u8;
        const PAIRS: u8 = super::Arith::Pairs as u8;
        // SAFETY: register-only intrinsics of the caller's features and bounded loads.
        unsafe {
            let idx = scale_indices();
            let idx32 = dword_scale_indices();
            let mut acc = [[_mm512_setzero_ps(); 4]; TILE_ROWS];
            for b in 0..nb {
                let rows: [&DecodedK; TILE_ROWS] = [&tile[b], &tile[nb + b]];
                let acts: [&BlockQ8K; 4] = [&a[b], &a[nb + b], &a[2 * nb + b], &a[3 * nb + b]];
                let scales = rows.map(|r| load_i16x16(&r.scales));
                let scales32 = scales.map(|s| _mm512_cvtepi16_epi32(_mm512_castsi512_si256(s)));
                let mut isum = [[_mm512_setzero_si512(); 4]; TILE_ROWS];
                for j in 0..4 {
                    let u = rows.map(|r| load64(sub::<u8, 64>(&r.u, 64 * j)));
                    let sv = if MODE == PAIRS {
                        scales.map(|s| _mm512_permutexvar_epi16(idx[j], s))
                    } else {
                        scales32.map(|s| _mm512_permutexvar_epi32(idx32[j], s))
                    };
                    for m in 0..4 {
                        let av = load64(sub::<i8, 64>(&acts[m].qs, 64 * j));
                        for g in 0..TILE_ROWS {
                            isum[g][m] = match MODE {
                                PRESCALED => _mm512_dpbusd_epi32(isum[g][m], u[g], av),
                                PAIRS => {
                                    let pairs = _mm512_maddubs_epi16(u[g], av);
                                    _mm512_dpwssd_epi32(isum[g][m], pairs, sv[g])
                                }
                                _ => {
                                    let quads =
                                        _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[g], av);
                                    _mm512_add_epi32(isum[g][m], _mm512_mullo_epi32(quads, sv[g]))
                                }
                            };
                        }
                    }
                }
                for g in 0..TILE_ROWS {
                    let offsets = load_i16x16(&rows[g].offsets);
                    for m in 0..4 {
                        let osum = _mm512_madd_epi16(offsets, load_i16x16(&acts[m].bsums));
                        let d = _mm512_set1_ps(rows[g].d * acts[m].d);
                        acc[g][m] = if MODE == PRESCALED {
                            let c = _mm512_set1_ps(rows[g].c * acts[m].d);
                            let main =
                                _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[g][m]), d, acc[g][m]);
                            _mm512_fnmadd_ps(_mm512_cvtepi32_ps(osum), c, main)
                        } else {
                            let net = _mm512_sub_epi32(isum[g][m], osum);
                            _mm512_fmadd_ps(_mm512_cvtepi32_ps(net), d, acc[g][m])
                        };
                    }
                }
            }
            for m in 0..4 {
                for g in 0..TILE_ROWS {
                    out[m * TILE_ROWS + g] = _mm512_reduce_add_ps(acc[g][m]);
                }
            }
        }
    }
}

/// How a tile's group scales enter its products.
#[derive(Clone, Copy)]
#[repr(u8)]
enum Arith {
    /// The quants carry their scales (Q2_K): one `vpdpbusd` per 64 weights; the offsets have
    /// their own factor `c`.
    Prescaled,
    /// Small quants (Q3_K, `0..=7`): `maddubs` pair sums, one `vpdpwssd` by the scales.
    Pairs,
    /// Byte-wide quants (IQ4_XS): `vpdpbusd` 4-weight sums, `vpmulld` by the scales.
    Dwords,
}

/// The tile's rows times each quad of `a`, activation row major into `out`.
///
/// # Safety
/// The CPU must support AVX-512 F, BW and VNNI.
#[inline(always)]
unsafe fn gemm_body<W, const MODE: u8>(w: &[W], tile: &[u64], a: &[BlockQ8K], out: &mut [f32]) {
    let nb = w.len() / TILE_ROWS;
    let decoded: &[DecodedK] = bytemuck::cast_slice(tile);
    assert_eq!(decoded.len(), TILE_ROWS * nb);
    for (quad, o) in a
        .chunks_exact(4 * nb)
        .zip(out.chunks_exact_mut(4 * TILE_ROWS))
    {
        // SAFETY: the caller's features.
        unsafe { imp::quad::<MODE>(decoded, nb, quad, o) };
    }
}

target_entries! { "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni";
    fn q2_k_tile(blocks: &[BlockQ2K], tile: &mut [u64]) => prescaled_q2_k_tile_body;
    fn q3_k_tile(blocks: &[BlockQ3K], tile: &mut [u64]) => make_tile_body::<BlockQ3K>;
    fn iq4_xs_tile(blocks: &[BlockIq4Xs], tile: &mut [u64]) => make_tile_body::<BlockIq4Xs>;
    fn q2_k_tiled_gemm(w: &[BlockQ2K], tile: &[u64], a: &[BlockQ8K], out: &mut [f32]) => gemm_body::<BlockQ2K, { Arith::Prescaled as u8 }>;
    fn q3_k_tiled_gemm(w: &[BlockQ3K], tile: &[u64], a: &[BlockQ8K], out: &mut [f32]) => gemm_body::<BlockQ3K, { Arith::Pairs as u8 }>;
    fn iq4_xs_tiled_gemm(w: &[BlockIq4Xs], tile: &[u64], a: &[BlockQ8K], out: &mut [f32]) => gemm_body::<BlockIq4Xs, { Arith::Dwords as u8 }>;
}

/// Quads from which a call decodes tiles (as in the AVX2 set: below, the plain GEMM decodes
/// once per quad anyway).
const MIN_QUADS: usize = 2;

/// The per-call tiles of one type: two rows per tile, two quads per call.
fn vnni_tiles<W>(
    make_tile: fn(&[W], &mut [u64]),
    gemm: crate::kernel_api::TiledGemmFn<W, BlockQ8K>,
) -> TiledGemm<W, BlockQ8K> {
    TiledGemm {
        groups: TILE_ROWS,
        quads: 2,
        min_quads: MIN_QUADS,
        tile_words,
        make_tile,
        gemm,
    }
}

/// Plain Q2_K rows: the AVX2 GEMV and one-quad GEMM, the VNNI tiles.
pub(crate) fn q2_k_rows(token: Avx512) -> Kernels<BlockQ2K, BlockQ8K, BlockQ8K> {
    Kernels {
        set: KernelSet::Avx512,
        tiled: Some(vnni_tiles(q2_k_tile, q2_k_tiled_gemm)),
        ..plain_rows::q2_k_rows(token.avx2())
    }
}

/// Plain Q3_K rows: the AVX2 GEMV and one-quad GEMM, the VNNI tiles.
pub(crate) fn q3_k_rows(token: Avx512) -> Kernels<BlockQ3K, BlockQ8K, BlockQ8K> {
    Kernels {
        set: KernelSet::Avx512,
        tiled: Some(vnni_tiles(q3_k_tile, q3_k_tiled_gemm)),
        ..plain_rows::q3_k_rows(token.avx2())
    }
}

/// Plain IQ4_XS rows: the AVX2 GEMV and one-quad GEMM, the VNNI tiles.
pub(crate) fn iq4_xs_rows(token: Avx512) -> Kernels<BlockIq4Xs, BlockQ8K, BlockQ8K> {
    Kernels {
        set: KernelSet::Avx512,
        tiled: Some(vnni_tiles(iq4_xs_tile, iq4_xs_tiled_gemm)),
        ..plain_rows::iq4_xs_rows(token.avx2())
    }
}
