//! Per-call weight tiles for the plain layout of the 2- and 3-bit K-quants (Q2_K, Q3_K): once
//! per call, two weight rows are decoded into unsigned quant bytes with their group scales and
//! offset terms, and every quad of activation rows then runs on the decoded bytes with three
//! instructions per 32 weights and activation row (`maddubs`, `madd` by the group scales, add).
//!
//! ggml decodes a Q3_K block again for every activation row; the plain GEMM of `plain_rows`
//! does it once per quad; the tile once per call, which at prompt sizes (a hundred quads and
//! more) takes the decode out of the loop.
//!
//! # The decoded block
//!
//! Each 256-weight block becomes `u` (256 quants `0..=7`), the 16 group scales, the 16 group
//! offsets and two `f32` factors, so that the block's product with a Q8_K block `a` is
//! `a.d · (d · Σ_g scale_g Σ u·a − c · Σ_g offset_g · bsum_g)`:
//!
//! * Q2_K: `u` the 2-bit quant, `scale` the 4-bit scale, `offset` the 4-bit min, `d`, `c = dmin`;
//! * Q3_K: `u = q + 4` (`0..=7`), `scale` the 6-bit scale − 32, `offset = 4 · scale`, `c = d`;
//! * IQ4_XS: `u` the level + 128 (`1..=241`), `scale` its 32-weight group's 6-bit scale − 32
//!   on both 16-weight halves, `offset = 128 · scale`, `c = d`. Such `u` overflow `maddubs`
//!   pairs, so only the AVX-512 set (`vpdpbusd`) multiplies these tiles.
//!
//! * the grid types (decoded in `grid`): `u` the signed grid value + 64 (`2..=126`) or IQ1's
//!   `8 q + δ + 9` (`0..=18`), `scale` the odd scale of each 16 weights, `offset = 64 · scale`
//!   or `9 · scale`, `d` with the type's constant factor, `c = d` ([`decoded_tiled`]);
//! * the ternary types (decoded in `lowbit`, multiplied by the AVX-512 set's 16-row tiles and
//!   the AVX2 `ternary_tiles`): `u` the quant (`0..=3`), `scale` and `offset` 1, `c = d`.
//!
//! Every integer is exact (`maddubs` pairs reach `2 · 7 · 128`, for the grid types
//! `2 · 126 · 128 < 2^15`), as in the portable kernels.
//!
//! Q2_K tiles go one step further ([`prescale`]): a 2-bit quant times its 4-bit group scale
//! is at most 45, still a byte, so the tile stores `u · scale` and the kernels skip the scale
//! multiply (two `maddubs` summed in `i16`, then one `madd` by ones, per 64 weights).

use crate::blocks::{BlockIq4Xs, BlockQ2K, BlockQ3K, BlockQ8K};
use crate::kernel_api::{target_entries, TiledGemm};
use crate::kernels::x86::Avx2;

/// Weight rows decoded into one tile.
pub(crate) const TILE_ROWS: usize = 2;

/// One decoded 256-weight block (see the module documentation).
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct DecodedK {
    pub(crate) u: [u8; 256],
    pub(crate) scales: [i16; 16],
    pub(crate) offsets: [i16; 16],
    pub(crate) d: f32,
    pub(crate) c: f32,
}

const _: () = assert!(std::mem::size_of::<DecodedK>().is_multiple_of(8));

/// `u64` words of a tile of [`TILE_ROWS`] rows of `nb` blocks.
pub(crate) fn tile_words(nb: usize) -> usize {
    TILE_ROWS * nb * std::mem::size_of::<DecodedK>() / 8
}

mod imp {
    use std::arch::x86_64::*;

    use super::{DecodedK, TILE_ROWS};
    use crate::blocks::{BlockIq4Xs, BlockQ2K, BlockQ3K, BlockQ8K, IQ4NL_LEVELS};

    /// `N` elements of `s` from `at`.
    #[inline(always)]
    fn sub<T, const N: usize>(s: &[T], at: usize) -> &[T; N] {
        s[at..at + N]
            .try_into()
            .expect("in-bounds fixed-size chunk")
    }

    /// Loads 32 bytes.
    ///
    /// # Safety
    /// The CPU must support AVX.
    #[inline(always)]
    unsafe fn load32<T: bytemuck::Pod>(p: &[T; 32]) -> __m256i {
        assert_eq!(std::mem::size_of::<T>(), 1);
        // SAFETY: `p` is 32 one-byte elements; `loadu` has no alignment requirement.
        unsafe { _mm256_loadu_si256(p.as_ptr().cast()) }
    }

    /// Loads 16 `i16`.
    ///
    /// # Safety
    /// The CPU must support AVX.
    #[inline(always)]
    unsafe fn load_i16x16(p: &[i16; 16]) -> __m256i {
        // SAFETY: 16 `i16` are 32 bytes; `loadu` has no alignment requirement.
        unsafe { _mm256_loadu_si256(p.as_ptr().cast()) }
    }

    /// Stores 32 bytes.
    ///
    /// # Safety
    /// The CPU must support AVX.
    #[inline(always)]
    unsafe fn store32(p: &mut [u8], v: __m256i) {
        let p: &mut [u8; 32] = p.try_into().expect("32 bytes");
        // SAFETY: `p` is 32 bytes; `storeu` has no alignment requirement.
        unsafe { _mm256_storeu_si256(p.as_mut_ptr().cast(), v) }
    }

    /// The 2-bit fields of a 64-byte run as eight 32-byte vectors (vector `4h + s`: bits
    /// `2s..2s+2` of bytes `32h..32h+32`), stored into `u`.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline(always)]
    unsafe fn crumbs_into(qs: &[u8; 64], u: &mut [u8; 256], high: impl Fn(usize) -> __m256i) {
        // SAFETY: register-only intrinsics of the caller's features and bounded loads/stores.
        unsafe {
            let three = _mm256_set1_epi8(3);
            for h in 0..2 {
                let mut v = load32(sub::<u8, 32>(qs, 32 * h));
                for s in 0..4 {
                    let j = 4 * h + s;
                    let q = _mm256_or_si256(_mm256_and_si256(v, three), high(j));
                    store32(&mut u[32 * j..32 * j + 32], q);
                    v = _mm256_srli_epi16::<2>(v);
                }
            }
        }
    }

    /// Decodes a Q2_K block.
    ///
    /// # Safety
    /// The CPU must support AVX2 and F16C.
    #[inline(always)]
    pub(super) unsafe fn decode_q2_k(b: &BlockQ2K, out: &mut DecodedK) {
        // SAFETY: register-only intrinsics of the caller's features and bounded loads/stores.
        unsafe {
            crumbs_into(&b.qs, &mut out.u, |_| _mm256_setzero_si256());
        }
        for (g, &s) in b.scales.iter().enumerate() {
            out.scales[g] = (s & 0x0f) as i16;
            out.offsets[g] = (s >> 4) as i16;
        }
        out.d = b.d.to_f32();
        out.c = b.dmin.to_f32();
    }

    /// Decodes a Q3_K block (quants offset by 4, so unsigned).
    ///
    /// # Safety
    /// The CPU must support AVX2 and F16C.
    #[inline(always)]
    pub(super) unsafe fn decode_q3_k(b: &BlockQ3K, out: &mut DecodedK) {
        // SAFETY: register-only intrinsics of the caller's features and bounded loads/stores.
        unsafe {
            let hmask = load32(&b.hmask);
            let four = _mm256_set1_epi8(4);
            crumbs_into(&b.qs, &mut out.u, |j| {
                let bit = _mm256_set1_epi8(1 << j);
                let set = _mm256_cmpeq_epi8(_mm256_and_si256(hmask, bit), bit);
                _mm256_and_si256(set, four)
            });
        }
        let p = &b.scales;
        for (g, (s, o)) in out.scales.iter_mut().zip(&mut out.offsets).enumerate() {
            let low = if g < 8 { p[g] & 0x0f } else { p[g - 8] >> 4 };
            let high = (p[8 + g % 4] >> (2 * (g / 4))) & 3;
            *s = (low | (high << 4)) as i16 - 32;
            *o = 4 * *s;
        }
        out.d = b.d.to_f32();
        out.c = out.d;
    }

    /// Decodes an IQ4_XS block: levels biased by 128 (`1..=241`, unsigned), each 32-weight
    /// scale on both of its 16-weight groups, offsets `128 · scale`.
    ///
    /// # Safety
    /// The CPU must support AVX2 and F16C.
    #[inline(always)]
    pub(super) unsafe fn decode_iq4_xs(b: &BlockIq4Xs, out: &mut DecodedK) {
        const BIASED: [u8; 16] = {
            let mut t = [0u8; 16];
            let mut i = 0;
            while i < 16 {
                t[i] = (IQ4NL_LEVELS[i] as i16 + 128) as u8;
                i += 1;
            }
            t
        };
        // SAFETY: register-only intrinsics of the caller's features and bounded loads/stores.
        unsafe {
            let lut = _mm256_broadcastsi128_si256(_mm_loadu_si128(BIASED.as_ptr().cast()));
            let mask = _mm256_set1_epi8(0x0f);
            for (s, qs) in b.qs.chunks_exact(16).enumerate() {
                let qs: &[u8; 16] = qs.try_into().expect("16 bytes");
                let x = _mm_loadu_si128(qs.as_ptr().cast());
                // Low nibbles are weights 0..16 of the group, high nibbles 16..32.
                let nibbles = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16::<4>(x), x), mask);
                store32(
                    &mut out.u[32 * s..32 * s + 32],
                    _mm256_shuffle_epi8(lut, nibbles),
                );
            }
        }
        let high = u16::from_le_bytes(b.scales_h);
        for s in 0..8 {
            let low = (b.scales_l[s / 2] >> (4 * (s % 2))) & 0x0f;
            let scale = (low | ((((high >> (2 * s)) & 3) as u8) << 4)) as i16 - 32;
            out.scales[2 * s..2 * s + 2].fill(scale);
            out.offsets[2 * s..2 * s + 2].fill(128 * scale);
        }
        out.d = b.d.to_f32();
        out.c = out.d;
    }

    /// Sum of the 8 lanes.
    ///
    /// # Safety
    /// The CPU must support AVX and SSE3.
    #[inline(always)]
    unsafe fn hsum256(v: __m256) -> f32 {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe {
            let v = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let s = _mm_add_ps(v, _mm_movehl_ps(v, v));
            _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
        }
    }

    /// The `vpshufb` pattern that makes the `madd` operand of 32-weight vector `j` (`k = j %
    /// 4`) from its half of the block's 16 scales (duplicated in both 128-bit lanes): scale
    /// `2j` in the low lane, `2j + 1` in the high one.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline(always)]
    unsafe fn scale_pick(k: usize) -> __m256i {
        let k = (2 * k) as i16;
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe {
            _mm256_set_m128i(
                _mm_set1_epi16((2 * k + 2) | ((2 * k + 3) << 8)),
                _mm_set1_epi16((2 * k) | ((2 * k + 1) << 8)),
            )
        }
    }

    /// The tile's [`TILE_ROWS`] rows (`nb` decoded blocks each) times four activation rows
    /// (`a`, `nb` blocks each, back to back): `out[m * TILE_ROWS + g]`. One weight row at a
    /// time, each 32-weight vector's scale pair made where it is used (one `vpshufb` for four
    /// activation rows): holding the eight scale vectors of two rows spilled them.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[inline(always)]
    pub(super) unsafe fn quad(tile: &[DecodedK], nb: usize, a: &[BlockQ8K], out: &mut [f32]) {
        // SAFETY: register-only intrinsics of the caller's features and bounded loads.
        unsafe {
            for g in 0..TILE_ROWS {
                let mut acc = [_mm256_setzero_ps(); 4];
                for b in 0..nb {
                    let row = &tile[g * nb + b];
                    let acts: [&BlockQ8K; 4] = std::array::from_fn(|m| &a[m * nb + b]);
                    let v = load_i16x16(&row.scales);
                    let halves = [
                        _mm256_permute4x64_epi64::<0x44>(v),
                        _mm256_permute4x64_epi64::<0xee>(v),
                    ];
                    let mut isum = [_mm256_setzero_si256(); 4];
                    for j in 0..8 {
                        let u = load32(sub::<u8, 32>(&row.u, 32 * j));
                        let sc = _mm256_shuffle_epi8(halves[j / 4], scale_pick(j % 4));
                        for m in 0..4 {
                            let av = load32(sub::<i8, 32>(&acts[m].qs, 32 * j));
                            let p = _mm256_madd_epi16(_mm256_maddubs_epi16(u, av), sc);
                            isum[m] = _mm256_add_epi32(isum[m], p);
                        }
                    }
                    let offsets = load_i16x16(&row.offsets);
                    for m in 0..4 {
                        // `c == d` here: the offsets come off in integers.
                        let osum = _mm256_madd_epi16(offsets, load_i16x16(&acts[m].bsums));
                        let net = _mm256_cvtepi32_ps(_mm256_sub_epi32(isum[m], osum));
                        let d = _mm256_set1_ps(row.d * acts[m].d);
                        acc[m] = _mm256_fmadd_ps(net, d, acc[m]);
                    }
                }
                for m in 0..4 {
                    out[m * TILE_ROWS + g] = hsum256(acc[m]);
                }
            }
        }
    }

    /// [`quad`] for tiles whose quants carry their group scales (Q2_K, see
    /// [`prescale`](super::prescale)): `maddubs` pair sums of two 32-weight vectors add in
    /// `i16` (each at most 2 · 45 · 128) and one `madd` widens them, five instructions per 64
    /// weights and activation row where [`quad`] takes six, and no scale vectors to hold. One
    /// weight row at a time against the four activation rows keeps the live vectors (two of
    /// quants, four integer and four float accumulators) within the 16 registers: with both
    /// rows at once the compiler spilled them.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[inline(always)]
    pub(super) unsafe fn quad_prescaled(
        tile: &[DecodedK],
        nb: usize,
        a: &[BlockQ8K],
        out: &mut [f32],
    ) {
        // SAFETY: register-only intrinsics of the caller's features and bounded loads.
        unsafe {
            let ones = _mm256_set1_epi16(1);
            for g in 0..TILE_ROWS {
                let mut acc = [_mm256_setzero_ps(); 4];
                for b in 0..nb {
                    let row = &tile[g * nb + b];
                    let acts: [&BlockQ8K; 4] = std::array::from_fn(|m| &a[m * nb + b]);
                    let mut isum = [_mm256_setzero_si256(); 4];
                    for j in (0..8).step_by(2) {
                        let u0 = load32(sub::<u8, 32>(&row.u, 32 * j));
                        let u1 = load32(sub::<u8, 32>(&row.u, 32 * j + 32));
                        for m in 0..4 {
                            let a0 = load32(sub::<i8, 32>(&acts[m].qs, 32 * j));
                            let a1 = load32(sub::<i8, 32>(&acts[m].qs, 32 * j + 32));
                            let p = _mm256_add_epi16(
                                _mm256_maddubs_epi16(u0, a0),
                                _mm256_maddubs_epi16(u1, a1),
                            );
                            isum[m] = _mm256_add_epi32(isum[m], _mm256_madd_epi16(p, ones));
                        }
                    }
                    let offsets = load_i16x16(&row.offsets);
                    let (d, c) = (_mm256_set1_ps(row.d), _mm256_set1_ps(row.c));
                    for m in 0..4 {
                        // a.d · (d · Σ u·a − c · Σ offset·bsum): the row's factors broadcast
                        // once per block, the activation's once per row.
                        let osum = _mm256_madd_epi16(offsets, load_i16x16(&acts[m].bsums));
                        let net = _mm256_fmsub_ps(
                            _mm256_cvtepi32_ps(isum[m]),
                            d,
                            _mm256_mul_ps(_mm256_cvtepi32_ps(osum), c),
                        );
                        acc[m] = _mm256_fmadd_ps(net, _mm256_set1_ps(acts[m].d), acc[m]);
                    }
                }
                for m in 0..4 {
                    out[m * TILE_ROWS + g] = hsum256(acc[m]);
                }
            }
        }
    }
}

/// A weight block type that decodes into [`DecodedK`].
pub(crate) trait DecodeK: bytemuck::Pod {
    /// # Safety
    /// The CPU must support AVX2 and F16C.
    unsafe fn decode(&self, out: &mut DecodedK);
}

impl DecodeK for BlockQ2K {
    #[inline(always)]
    unsafe fn decode(&self, out: &mut DecodedK) {
        // SAFETY: the caller's features.
        unsafe { imp::decode_q2_k(self, out) }
    }
}

impl DecodeK for BlockQ3K {
    #[inline(always)]
    unsafe fn decode(&self, out: &mut DecodedK) {
        // SAFETY: the caller's features.
        unsafe { imp::decode_q3_k(self, out) }
    }
}

impl DecodeK for BlockIq4Xs {
    #[inline(always)]
    unsafe fn decode(&self, out: &mut DecodedK) {
        // SAFETY: the caller's features.
        unsafe { imp::decode_iq4_xs(self, out) }
    }
}

/// Decodes [`TILE_ROWS`] rows of blocks (row after row) into the tile.
///
/// # Safety
/// The CPU must support AVX2 and F16C.
#[inline(always)]
pub(crate) unsafe fn make_tile_body<W: DecodeK>(blocks: &[W], tile: &mut [u64]) {
    let decoded: &mut [DecodedK] = bytemuck::cast_slice_mut(tile);
    assert_eq!(decoded.len(), blocks.len());
    for (b, d) in blocks.iter().zip(decoded) {
        // SAFETY: the caller's features.
        unsafe { b.decode(d) };
    }
}

/// Folds each group scale of decoded Q2_K blocks into its quants (a 2-bit quant times a
/// 4-bit scale is at most 45, a byte still), for kernels that then skip the scales.
pub(crate) fn prescale(tile: &mut [u64]) {
    let decoded: &mut [DecodedK] = bytemuck::cast_slice_mut(tile);
    for d in decoded {
        for (group, &s) in d.u.chunks_exact_mut(16).zip(&d.scales) {
            group.iter_mut().for_each(|q| *q *= s as u8);
        }
    }
}

/// Decodes Q2_K rows into the tile with the group scales folded into the quants.
///
/// # Safety
/// The CPU must support AVX2 and F16C.
#[inline(always)]
pub(crate) unsafe fn prescaled_q2_k_tile_body(blocks: &[BlockQ2K], tile: &mut [u64]) {
    // SAFETY: the caller's features.
    unsafe { make_tile_body(blocks, tile) };
    prescale(tile);
}

/// The tile's rows times each quad of `a`, activation row major into `out`.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[inline(always)]
pub(crate) unsafe fn gemm_body<W, const PRESCALED: bool>(
    w: &[W],
    tile: &[u64],
    a: &[BlockQ8K],
    out: &mut [f32],
) {
    let nb = w.len() / TILE_ROWS;
    let decoded: &[DecodedK] = bytemuck::cast_slice(tile);
    assert_eq!(decoded.len(), TILE_ROWS * nb);
    for (quad, o) in a
        .chunks_exact(4 * nb)
        .zip(out.chunks_exact_mut(4 * TILE_ROWS))
    {
        // SAFETY: the caller's features.
        unsafe {
            if PRESCALED {
                imp::quad_prescaled(decoded, nb, quad, o)
            } else {
                imp::quad(decoded, nb, quad, o)
            }
        };
    }
}

target_entries! { "avx2,fma,f16c";
    fn q2_k_tile(blocks: &[BlockQ2K], tile: &mut [u64]) => prescaled_q2_k_tile_body;
    fn q3_k_tile(blocks: &[BlockQ3K], tile: &mut [u64]) => make_tile_body::<BlockQ3K>;
    fn q2_k_tiled_gemm(w: &[BlockQ2K], tile: &[u64], a: &[BlockQ8K], out: &mut [f32]) => gemm_body::<BlockQ2K, true>;
    fn q3_k_tiled_gemm(w: &[BlockQ3K], tile: &[u64], a: &[BlockQ8K], out: &mut [f32]) => gemm_body::<BlockQ3K, false>;
}

/// Quads from which a call decodes tiles (below, the plain GEMM decodes once per quad anyway).
pub(crate) const MIN_QUADS: usize = 2;

/// The per-call tiles of plain Q2_K rows.
pub(crate) fn q2_k_tiled(_: Avx2) -> TiledGemm<BlockQ2K, BlockQ8K> {
    TiledGemm {
        groups: TILE_ROWS,
        quads: 2,
        min_quads: MIN_QUADS,
        tile_words,
        make_tile: q2_k_tile,
        gemm: q2_k_tiled_gemm,
    }
}

/// The per-call tiles of plain Q3_K rows.
pub(crate) fn q3_k_tiled(_: Avx2) -> TiledGemm<BlockQ3K, BlockQ8K> {
    TiledGemm {
        groups: TILE_ROWS,
        quads: 2,
        min_quads: MIN_QUADS,
        tile_words,
        make_tile: q3_k_tile,
        gemm: q3_k_tiled_gemm,
    }
}

target_entries! { "avx2,fma,f16c";
    fn decoded_tile<W: DecodeK>(blocks: &[W], tile: &mut [u64]) => make_tile_body::<W>;
    fn decoded_tiled_gemm<W: DecodeK>(w: &[W], tile: &[u64], a: &[BlockQ8K], out: &mut [f32]) => gemm_body::<W, false>;
}

/// The per-call tiles of any type whose blocks decode into [`DecodedK`] with `c == d` (the grid
/// types): two rows per tile, two quads per call.
pub(crate) fn decoded_tiled<W: DecodeK>(_: Avx2) -> TiledGemm<W, BlockQ8K> {
    TiledGemm {
        groups: TILE_ROWS,
        quads: 2,
        min_quads: MIN_QUADS,
        tile_words,
        make_tile: decoded_tile::<W>,
        gemm: decoded_tiled_gemm::<W>,
    }
}
