//! `q2_K_8x8` (ggml's `block_q2_Kx8`, byte layout in `layout/q2_k.rs`) with 512-bit
//! `vpdpbusd`. One 64-byte quant chunk row `k` is 8 bytes of each of the 8 rows, so one zmm
//! holds row `r` in dword lanes `2r` and `2r + 1` (as the other 8x8 layouts here) and each of
//! its four 2-bit fields is 8 weights of every row, all from one 16-weight group, against one
//! broadcast qword of activations.
//!
//! * GEMV: the fields are masked in place (`q & 3 << 2s`, `4^s` times the weight), a group's
//!   two `vpdpbusd` summed and shifted down once (exact: every product is a multiple of `4^s`),
//!   then scaled by `vpdpwssd` against (scale, 0) pairs: a group's sum is at most
//!   8 · 3 · 128 = 3072 per lane, an i16.
//! * One-quad GEMM: a decoded vector serves four activation rows, so it is multiplied by its
//!   group scale first (`vpmullw`: a quant times a 4-bit scale is at most 45, and both bytes of
//!   a word belong to the same row, so the word product is the two byte products) and goes
//!   straight into the row sums.
//! * Per-call tiles (from [`TILE_MIN_QUADS`] quads): those prescaled vectors stored once per
//!   call, so that each further quad costs one `vpdpbusd` per 8 weights of 8 rows.
//!
//! The mins term is 4 `vpdpwssd` per block and activation row: vector `v` holds in lane
//! `2r + x` row `r`'s i16 mins of groups `4v + 2x` and `4v + 2x + 1`, against one broadcast
//! qword of the activations' 16-sums (groups `4v..4v + 4`), so it lands in the same lane pairs
//! as the main sums. Every integer is exact; only the f32 sums are added in another order than
//! ggml's generic kernel.

use std::arch::x86_64::*;

use super::k_scales::row_pairs;
use super::lanes::fold_pairs_ps;
use crate::blocks::{BlockQ2Kx8, BlockQ8K, BlockQ8Kx4, F16Bits};
use crate::cpu::KernelSet;
use crate::kernel_api::{Kernels, TiledGemm};
use crate::kernels::x86::avx2::q2_k::{act_chunk, group_of, pick_table, scale_bytes, WORD_PICKS};
use crate::kernels::x86::{target_entries, Avx512};

/// Quads from which a call makes tiles (below, the one-quad GEMM decodes the stored blocks).
const TILE_MIN_QUADS: usize = 2;

/// 64-byte vectors of one block's tile: 32 prescaled quant vectors (`4k + s`), 4 mins vectors,
/// `d` and `dmin` as lane pairs.
const BLOCK_VECTORS: usize = 32 + 4 + 2;
const MINS_AT: usize = 32;
const D_AT: usize = 36;
const DMIN_AT: usize = 37;

/// Words of one block's tile.
const BLOCK_WORDS: usize = 8 * BLOCK_VECTORS;

/// [`pick_table`] for (scale, 0) pairs, the GEMV's `vpdpwssd` operands.
const PAIR_PICKS: [[[u8; 64]; 2]; 2] = pick_table::<false>();

/// Loads the four [`pick_table`] vectors.
///
/// # Safety
/// The CPU must support AVX-512 F.
#[inline(always)]
unsafe fn load_picks(t: &[[[u8; 64]; 2]; 2]) -> [[__m512i; 2]; 2] {
    // SAFETY: each table is 64 bytes; `loadu` has no alignment requirement.
    unsafe {
        // No closure: it would not inherit the caller's target features.
        let mut out = [[_mm512_setzero_si512(); 2]; 2];
        for (o, tx) in out.iter_mut().zip(t) {
            for (oh, th) in o.iter_mut().zip(tx) {
                *oh = _mm512_loadu_si512(th.as_ptr().cast());
            }
        }
        out
    }
}

/// A block's scales and mins as i16 ([`scale_bytes`] widened): vector `v`, lane `2r + x`,
/// holds row `r`'s groups `4v + 2x` and `4v + 2x + 1`.
///
/// # Safety
/// The CPU must support AVX-512 F and BW.
#[inline(always)]
unsafe fn scale_vectors(scales: &[u8; 128]) -> ([__m512i; 4], [__m512i; 4]) {
    // SAFETY: register-only intrinsics of the caller's features and `scale_bytes`' loads.
    unsafe {
        let low = _mm256_set1_epi8(0x0f);
        let mut sc = [_mm512_setzero_si512(); 4];
        let mut mins = [_mm512_setzero_si512(); 4];
        for v in 0..4 {
            let both = scale_bytes(scales, v);
            sc[v] = _mm512_cvtepu8_epi16(_mm256_and_si256(both, low));
            mins[v] = _mm512_cvtepu8_epi16(_mm256_and_si256(_mm256_srli_epi16::<4>(both), low));
        }
        (sc, mins)
    }
}

/// Eight activations (bytes `at..at + 8` of `q`) in every qword.
///
/// # Safety
/// The CPU must support AVX-512 F.
#[inline(always)]
unsafe fn broadcast8(q: &[i8], at: usize) -> __m512i {
    assert!(at + 8 <= q.len());
    // SAFETY: the 8 bytes are in bounds (asserted above); unaligned read.
    unsafe { _mm512_set1_epi64(std::ptr::read_unaligned(q.as_ptr().add(at) as *const i64)) }
}

/// Four 16-sums (`bsums[at..at + 4]`, groups of one mins vector) in every qword.
///
/// # Safety
/// The CPU must support AVX-512 F.
#[inline(always)]
unsafe fn broadcast_sums(bsums: &[i16], at: usize) -> __m512i {
    assert!(at + 4 <= bsums.len());
    // SAFETY: the 4 i16 are in bounds (asserted above); unaligned read.
    unsafe {
        _mm512_set1_epi64(std::ptr::read_unaligned(
            bsums.as_ptr().add(at) as *const i64
        ))
    }
}

/// The rows' f16 scales as f32 lane pairs (lanes `2r`, `2r + 1`: row `r`).
///
/// # Safety
/// The CPU must support AVX-512 F and F16C.
#[inline(always)]
unsafe fn f16_pairs(h: &[F16Bits; 8]) -> __m512 {
    // SAFETY: 8 halves are 16 bytes; register-only otherwise.
    unsafe {
        row_pairs(_mm256_cvtph_ps(_mm_loadu_si128(
            h.as_ptr() as *const __m128i
        )))
    }
}

/// Field `s` (0..4) of every byte of `q`, as unsigned bytes 0..4.
///
/// # Safety
/// The CPU must support AVX-512 F and BW.
#[inline(always)]
unsafe fn field(q: __m512i, s: usize) -> __m512i {
    // SAFETY: register-only intrinsics of the caller's features.
    unsafe {
        let three = _mm512_set1_epi8(3);
        let shifted = match s {
            0 => q,
            1 => _mm512_srli_epi16::<2>(q),
            2 => _mm512_srli_epi16::<4>(q),
            _ => _mm512_srli_epi16::<6>(q),
        };
        _mm512_and_si512(shifted, three)
    }
}

/// The 64 quant bytes of chunk row `k`.
///
/// # Safety
/// The CPU must support AVX-512 F.
#[inline(always)]
unsafe fn chunk_row(w: &BlockQ2Kx8, k: usize) -> __m512i {
    assert!(k < 8);
    // SAFETY: the 64 bytes at 64k < 512 are in bounds (asserted above).
    unsafe { _mm512_loadu_si512(w.qs.as_ptr().add(64 * k).cast()) }
}

/// The 32 quant vectors of a block (`4k + s`), each byte times its group scale.
///
/// # Safety
/// The CPU must support AVX-512 F and BW.
#[inline(always)]
unsafe fn prescaled(w: &BlockQ2Kx8, sc: &[__m512i; 4], words: &[[__m512i; 2]; 2]) -> [__m512i; 32] {
    // SAFETY: register-only intrinsics of the caller's features and bounded loads.
    unsafe {
        let mut out = [_mm512_setzero_si512(); 32];
        for k in 0..8 {
            let q = chunk_row(w, k);
            for s in 0..4 {
                let g = group_of(k, s);
                let scale = _mm512_shuffle_epi8(sc[g / 4], words[(g / 2) % 2][g % 2]);
                out[4 * k + s] = _mm512_mullo_epi16(field(q, s), scale);
            }
        }
        out
    }
}

/// GEMV over every row group in `w` (`a.len()` blocks each).
///
/// # Safety
/// The CPU must support AVX-512 F, BW, VL and VNNI, and F16C.
#[inline(always)]
unsafe fn gemv_body(w: &[BlockQ2Kx8], a: &[BlockQ8K], out: &mut [f32]) {
    let nb = a.len();
    if nb == 0 {
        out.fill(0.0);
        return;
    }
    assert!(out.len() >= w.len() / nb * 8);
    // SAFETY: the caller's features; block reads are of fixed-size fields, and every store is
    // into an 8-float chunk of `out` (asserted above).
    unsafe {
        let picks = load_picks(&PAIR_PICKS);
        for (group, o) in w.chunks_exact(nb).zip(out.chunks_exact_mut(8)) {
            let mut acc = _mm512_setzero_ps();
            for (wb, ab) in group.iter().zip(a) {
                crate::kernel_api::prefetch_l2(wb, crate::kernel_api::GEMV_PREFETCH_BYTES);
                let (sc, mins) = scale_vectors(&wb.scales);
                let mut sums = _mm512_setzero_si512();
                for j in 0..4 {
                    // Chunk rows 2j and 2j + 1: the same groups, activations 8 apart.
                    let q = [chunk_row(wb, 2 * j), chunk_row(wb, 2 * j + 1)];
                    for s in 0..4 {
                        let mask = _mm512_set1_epi8((3u8 << (2 * s)) as i8);
                        let at = 8 * act_chunk(2 * j, s);
                        let mut dot = _mm512_setzero_si512();
                        dot = _mm512_dpbusd_epi32(
                            dot,
                            _mm512_and_si512(q[0], mask),
                            broadcast8(&ab.qs, at),
                        );
                        dot = _mm512_dpbusd_epi32(
                            dot,
                            _mm512_and_si512(q[1], mask),
                            broadcast8(&ab.qs, at + 8),
                        );
                        // Exact: every product is a multiple of 4^s.
                        let dot = match s {
                            0 => dot,
                            1 => _mm512_srai_epi32::<2>(dot),
                            2 => _mm512_srai_epi32::<4>(dot),
                            _ => _mm512_srai_epi32::<6>(dot),
                        };
                        let g = group_of(2 * j, s);
                        let scale = _mm512_shuffle_epi8(sc[g / 4], picks[(g / 2) % 2][g % 2]);
                        sums = _mm512_dpwssd_epi32(sums, dot, scale);
                    }
                }
                let mut msum = _mm512_setzero_si512();
                for (v, m) in mins.iter().enumerate() {
                    msum = _mm512_dpwssd_epi32(msum, *m, broadcast_sums(&ab.bsums, 4 * v));
                }
                let da = _mm512_set1_ps(ab.d);
                let main = _mm512_mul_ps(_mm512_cvtepi32_ps(sums), f16_pairs(&wb.d));
                let net = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum), f16_pairs(&wb.dmin), main);
                acc = _mm512_fmadd_ps(net, da, acc);
            }
            _mm256_storeu_ps(o.as_mut_ptr(), fold_pairs_ps(acc));
        }
    }
}

/// GEMM of one row group with one quad (`a`: one block per weight block) into `out[8m + r]`.
///
/// # Safety
/// The CPU must support AVX-512 F, BW, VL and VNNI, and F16C.
#[inline(always)]
unsafe fn gemm_body(w: &[BlockQ2Kx8], a: &[BlockQ8Kx4], out: &mut [f32]) {
    assert!(out.len() >= 32);
    // SAFETY: the caller's features; block reads are of fixed-size fields, and `out` holds 32
    // floats (asserted above).
    unsafe {
        let words = load_picks(&WORD_PICKS);
        let mut acc = [_mm512_setzero_ps(); 4];
        for (wb, ab) in w.iter().zip(a) {
            let (sc, mins) = scale_vectors(&wb.scales);
            let u = prescaled(wb, &sc, &words);
            let mut sums = [_mm512_setzero_si512(); 4];
            for k in 0..8 {
                for s in 0..4 {
                    let c = act_chunk(k, s);
                    for (m, sum) in sums.iter_mut().enumerate() {
                        // Row m's activations of chunk c sit at 32c + 8m in the quad.
                        *sum = _mm512_dpbusd_epi32(
                            *sum,
                            u[4 * k + s],
                            broadcast8(&ab.qs, 32 * c + 8 * m),
                        );
                    }
                }
            }
            let d = f16_pairs(&wb.d);
            let dmin = f16_pairs(&wb.dmin);
            for (m, acc_m) in acc.iter_mut().enumerate() {
                let mut msum = _mm512_setzero_si512();
                for (v, mv) in mins.iter().enumerate() {
                    // Row m's sums of groups 4v..4v + 4 sit at 16v + 4m in the quad.
                    msum =
                        _mm512_dpwssd_epi32(msum, *mv, broadcast_sums(&ab.bsums, 16 * v + 4 * m));
                }
                let main = _mm512_mul_ps(_mm512_cvtepi32_ps(sums[m]), d);
                let net = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum), dmin, main);
                *acc_m = _mm512_fmadd_ps(net, _mm512_set1_ps(ab.d[m]), *acc_m);
            }
        }
        for (m, acc_m) in acc.iter().enumerate() {
            _mm256_storeu_ps(out.as_mut_ptr().add(8 * m), fold_pairs_ps(*acc_m));
        }
    }
}

/// Fills the tile of one row group (`w`: its `nb` blocks).
///
/// # Safety
/// The CPU must support AVX-512 F, BW and VL, and F16C.
#[inline(always)]
unsafe fn make_tile_body(w: &[BlockQ2Kx8], tile: &mut [u64]) {
    assert!(tile.len() >= w.len() * BLOCK_WORDS);
    // SAFETY: the caller's features; every store is into the block's BLOCK_VECTORS vectors
    // (the tile holds every block, asserted above).
    unsafe {
        let words = load_picks(&WORD_PICKS);
        for (wb, t) in w.iter().zip(tile.chunks_exact_mut(BLOCK_WORDS)) {
            let p = t.as_mut_ptr() as *mut __m512i;
            let (sc, mins) = scale_vectors(&wb.scales);
            for (i, u) in prescaled(wb, &sc, &words).iter().enumerate() {
                _mm512_storeu_si512(p.add(i), *u);
            }
            for (v, m) in mins.iter().enumerate() {
                _mm512_storeu_si512(p.add(MINS_AT + v), *m);
            }
            _mm512_storeu_ps(p.add(D_AT) as *mut f32, f16_pairs(&wb.d));
            _mm512_storeu_ps(p.add(DMIN_AT) as *mut f32, f16_pairs(&wb.dmin));
        }
    }
}

/// `QUADS` quads (`a`: `QUADS * nb` blocks) times the tile of one row group, activation row
/// major into `out[8 (4q + m) + r]`.
///
/// # Safety
/// The CPU must support AVX-512 F, BW, VL and VNNI.
#[inline(always)]
unsafe fn tiled_quads<const QUADS: usize>(
    tile: &[u64],
    nb: usize,
    a: &[BlockQ8Kx4],
    out: &mut [f32],
) {
    assert!(tile.len() >= nb * BLOCK_WORDS && a.len() >= QUADS * nb && out.len() >= 32 * QUADS);
    // SAFETY: the caller's features; the tile holds nb blocks (asserted), quads are read within
    // their fixed-size fields, and `out` holds 32 QUADS floats.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); 4]; QUADS];
        for (b, t) in tile.chunks_exact(BLOCK_WORDS).take(nb).enumerate() {
            let p = t.as_ptr() as *const __m512i;
            let d = _mm512_loadu_ps(p.add(D_AT) as *const f32);
            let dmin = _mm512_loadu_ps(p.add(DMIN_AT) as *const f32);
            // The mins term first, into the f32 sums, so that its registers are free below.
            for (q, acc_q) in acc.iter_mut().enumerate() {
                let ab = &a[q * nb + b];
                for (m, acc_m) in acc_q.iter_mut().enumerate() {
                    let mut msum = _mm512_setzero_si512();
                    for v in 0..4 {
                        let mv = _mm512_loadu_si512(p.add(MINS_AT + v));
                        msum = _mm512_dpwssd_epi32(
                            msum,
                            mv,
                            broadcast_sums(&ab.bsums, 16 * v + 4 * m),
                        );
                    }
                    let dm = _mm512_mul_ps(dmin, _mm512_set1_ps(ab.d[m]));
                    *acc_m = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum), dm, *acc_m);
                }
            }
            let mut sums = [[_mm512_setzero_si512(); 4]; QUADS];
            for k in 0..8 {
                for s in 0..4 {
                    let u = _mm512_loadu_si512(p.add(4 * k + s));
                    let c = act_chunk(k, s);
                    for (q, sums_q) in sums.iter_mut().enumerate() {
                        let qs = &a[q * nb + b].qs;
                        for (m, sum) in sums_q.iter_mut().enumerate() {
                            *sum = _mm512_dpbusd_epi32(*sum, u, broadcast8(qs, 32 * c + 8 * m));
                        }
                    }
                }
            }
            for (q, acc_q) in acc.iter_mut().enumerate() {
                let ab = &a[q * nb + b];
                for (m, acc_m) in acc_q.iter_mut().enumerate() {
                    let dd = _mm512_mul_ps(d, _mm512_set1_ps(ab.d[m]));
                    *acc_m = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[q][m]), dd, *acc_m);
                }
            }
        }
        for (q, acc_q) in acc.iter().enumerate() {
            for (m, acc_m) in acc_q.iter().enumerate() {
                _mm256_storeu_ps(out.as_mut_ptr().add(8 * (4 * q + m)), fold_pairs_ps(*acc_m));
            }
        }
    }
}

/// The tiled GEMM: one or two quads a call.
///
/// # Safety
/// The CPU must support AVX-512 F, BW, VL and VNNI.
#[inline(always)]
unsafe fn tiled_gemm_body(w: &[BlockQ2Kx8], tile: &[u64], a: &[BlockQ8Kx4], out: &mut [f32]) {
    let nb = w.len();
    if nb == 0 {
        out.fill(0.0);
        return;
    }
    // SAFETY: the caller's features; the bounds are asserted by `tiled_quads`.
    unsafe {
        match a.len() / nb {
            2 => tiled_quads::<2>(tile, nb, a, out),
            _ => tiled_quads::<1>(tile, nb, a, out),
        }
    }
}

target_entries! { "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni";
    fn q2_k_gemv(w: &[BlockQ2Kx8], a: &[BlockQ8K], out: &mut [f32]) => gemv_body;
    fn q2_k_gemm(w: &[BlockQ2Kx8], a: &[BlockQ8Kx4], out: &mut [f32]) => gemm_body;
    fn q2_k_tile(w: &[BlockQ2Kx8], tile: &mut [u64]) => make_tile_body;
    fn q2_k_tiled_gemm(w: &[BlockQ2Kx8], tile: &[u64], a: &[BlockQ8Kx4], out: &mut [f32]) => tiled_gemm_body;
}

/// `q2_K_8x8`: GEMV and one-quad GEMM on the stored blocks, prescaled tiles from
/// [`TILE_MIN_QUADS`] quads on.
pub(crate) fn q2_k_kernels(_: Avx512) -> Kernels<BlockQ2Kx8, BlockQ8K, BlockQ8Kx4> {
    Kernels {
        set: KernelSet::Avx512,
        gemv: q2_k_gemv,
        gemm: q2_k_gemm,
        tiled: Some(TiledGemm {
            groups: 1,
            quads: 2,
            min_quads: TILE_MIN_QUADS,
            tile_words: |nb| nb * BLOCK_WORDS,
            make_tile: q2_k_tile,
            gemm: q2_k_tiled_gemm,
        }),
        wide: None,
    }
}
