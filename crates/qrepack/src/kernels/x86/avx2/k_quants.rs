//! AVX2 kernels for the K-quant 8-row layouts `q4_K_8x8` and `q5_K_8x8_x86` (which adds fifth-bit
//! planes; byte layout in `q5_k.rs`): one loop nest, two ways of decoding the quants.
//!
//! The 1024 quant bytes of a packed block are 32 vectors of 32 bytes; vector `8g + 2k + h` holds
//! bytes `32g + 8k .. 32g + 8k + 8` of rows `4h .. 4h + 4`. Their low nibbles are weights of
//! sub-block `2g` (activations `64g + 8k ..`), their high nibbles of sub-block `2g + 1`
//! (activations `64g + 32 + 8k ..`). Weights are unsigned (Q4_K 0..16, Q5_K 0..32), so
//! `maddubs(q, a)` multiplies directly; four such i16 partial sums stay below
//! 4 * 2 * 31 * 128 = 31744. The 6-bit sub-block
//! scales multiply the i16 sums through `madd`, and the mins term `sum_sb min * bsum` uses `madd`
//! on interleaved (min of sub-block s, min of s + 1) pairs.

use std::arch::x86_64::*;

use crate::blocks::{BlockQ4Kx8, BlockQ5Kx8, BlockQ8K, BlockQ8Kx4, F16Bits};
use crate::cpu::KernelSet;
use crate::kernel_api::{Kernels, TiledGemm, TiledGemmFn};
use crate::kernels::x86::Avx2;

/// An 8-row K-quant packed block as the kernels see it: Q4_K's scales/mins encoding, f16 `d`
/// and `dmin` per row, and a way to decode one group of quants.
pub(crate) trait K8x8: Copy + Send + Sync + 'static {
    fn d(&self) -> &[F16Bits; 8];
    fn dmin(&self) -> &[F16Bits; 8];
    /// The 8 sub-blocks' 12-byte (scale, min) groups.
    fn scales(&self) -> &[u8; 96];
    /// Whether the sum of 16 products of a quant with an activation (|a| <= 128) always fits
    /// an i16, so that a sub-block's i32 sums can be scaled by `vpdpwssd`.
    const NARROW_SUMS: bool;
    /// Quants of the 8 quant vectors of group `g` as unsigned bytes: `[k][h][lo/hi]`.
    unsafe fn decode_group(&self, g: usize) -> [[[__m256i; 2]; 2]; 4];
    /// [`Self::decode_group`] with both halves `h` in one 512-bit vector (rows 0-3, then 4-7):
    /// `[k][lo/hi]`. Only for callers with AVX-512 F.
    #[inline(always)]
    unsafe fn decode_group_zmm(&self, g: usize) -> [[__m512i; 2]; 4] {
        // SAFETY: the caller's contract (AVX-512 F and the AVX2 decode's features).
        // No closures here: they would not inherit the caller's target features.
        unsafe {
            let q = self.decode_group(g);
            let mut out = [[_mm512_setzero_si512(); 2]; 4];
            for (o, qk) in out.iter_mut().zip(&q) {
                for (s, os) in o.iter_mut().enumerate() {
                    *os = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(qk[0][s]), qk[1][s]);
                }
            }
            out
        }
    }
}

macro_rules! k8x8_fields {
    () => {
        fn d(&self) -> &[F16Bits; 8] {
            &self.d
        }
        fn dmin(&self) -> &[F16Bits; 8] {
            &self.dmin
        }
        fn scales(&self) -> &[u8; 96] {
            &self.scales
        }
    };
}

/// Q4_K: unsigned nibbles.
impl K8x8 for BlockQ4Kx8 {
    k8x8_fields!();
    // 16 x 15 x 128 = 30720 <= 32767.
    const NARROW_SUMS: bool = true;
    #[inline(always)]
    unsafe fn decode_group_zmm(&self, g: usize) -> [[__m512i; 2]; 4] {
        // SAFETY: AVX-512 F/BW per the caller's contract; vectors 8g + 2k and 8g + 2k + 1 are
        // the 64 bytes at 64 (4g + k) < 1024.
        unsafe {
            let m4 = _mm512_set1_epi8(0x0f);
            let mut out = [[_mm512_setzero_si512(); 2]; 4];
            for (k, o) in out.iter_mut().enumerate() {
                let p = self.qs.as_ptr().add(64 * (4 * g + k)) as *const __m512i;
                let x = _mm512_loadu_si512(p);
                *o = [
                    _mm512_and_si512(x, m4),
                    _mm512_and_si512(_mm512_srli_epi16::<4>(x), m4),
                ];
            }
            out
        }
    }
    #[inline(always)]
    unsafe fn decode_group(&self, g: usize) -> [[[__m256i; 2]; 2]; 4] {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            let m4 = _mm256_set1_epi8(0x0f);
            let mut out = [[[_mm256_setzero_si256(); 2]; 2]; 4];
            for (k, ok) in out.iter_mut().enumerate() {
                for (h, oh) in ok.iter_mut().enumerate() {
                    let v = 8 * g + 2 * k + h;
                    // SAFETY: v < 32, so the 32 bytes at 32v lie inside the 1024-byte array.
                    let x = _mm256_loadu_si256(self.qs.as_ptr().add(32 * v) as *const __m256i);
                    oh[0] = _mm256_and_si256(x, m4);
                    oh[1] = _mm256_and_si256(_mm256_srli_epi16(x, 4), m4);
                }
            }
            out
        }
    }
}

/// Q5_K: nibbles plus the fifth bit of decoded vector `D` from bit plane `D % 8` of the 32 bytes
/// `qh[32 (D / 8)..]`, shifted into bit 4.
impl K8x8 for BlockQ5Kx8 {
    k8x8_fields!();
    // 16 x 31 x 128 = 63488 does not fit.
    const NARROW_SUMS: bool = false;
    #[inline(always)]
    unsafe fn decode_group(&self, g: usize) -> [[[__m256i; 2]; 2]; 4] {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            let m4 = _mm256_set1_epi8(0x0f);
            let m10 = _mm256_set1_epi8(0x10);
            let mut out = [[[_mm256_setzero_si256(); 2]; 2]; 4];
            for half in 0..2 {
                // Plane vector 2g + half serves vectors V = 8g + 4 half + 0..4 (k = 2 half + k2):
                // decoded vector D = 2V + s uses bit t = 2 (2 k2 + h) + s.
                let pv = 2 * g + half;
                // SAFETY: pv < 8, so the 32 bytes at 32 pv lie inside the 256-byte array.
                let qh = _mm256_loadu_si256(self.qh.as_ptr().add(32 * pv) as *const __m256i);
                let planes = [
                    _mm256_slli_epi16::<4>(qh),
                    _mm256_slli_epi16::<3>(qh),
                    _mm256_slli_epi16::<2>(qh),
                    _mm256_slli_epi16::<1>(qh),
                    qh,
                    _mm256_srli_epi16::<1>(qh),
                    _mm256_srli_epi16::<2>(qh),
                    _mm256_srli_epi16::<3>(qh),
                ];
                for k2 in 0..2 {
                    let k = 2 * half + k2;
                    for (h, oh) in out[k].iter_mut().enumerate() {
                        let v = 8 * g + 2 * k + h;
                        let t = 2 * (2 * k2 + h);
                        // SAFETY: v < 32, so the 32 bytes at 32v lie inside the 1024-byte array.
                        let x = _mm256_loadu_si256(self.qs.as_ptr().add(32 * v) as *const __m256i);
                        let lo = _mm256_and_si256(x, m4);
                        let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(x), m4);
                        oh[0] = _mm256_or_si256(lo, _mm256_and_si256(planes[t], m10));
                        oh[1] = _mm256_or_si256(hi, _mm256_and_si256(planes[t + 1], m10));
                    }
                }
            }
            out
        }
    }
}

pub(in crate::kernels::x86) mod imp {
    use super::*;

    #[inline(always)]
    unsafe fn broadcast8(bytes: &[i8]) -> __m256i {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            // SAFETY: callers pass slices of at least 8 bytes; read_unaligned needs no alignment.
            _mm256_set1_epi64x(std::ptr::read_unaligned(bytes.as_ptr() as *const i64))
        }
    }

    /// Per block: sub-block scales as i16 vectors matching the quant vectors' row order
    /// (`[sb][h]`: rows 4h..4h+4, each row's scale in its four lanes), and the interleaved mins
    /// pairs (`[p]`: lanes `(min[2p][j], min[2p + 1][j])` for row j).
    pub(in crate::kernels::x86) struct Scales {
        pub(in crate::kernels::x86) sc: [[__m256i; 2]; 8],
        pub(in crate::kernels::x86) mins: [__m256i; 4],
    }

    /// Where a kernel reads a block's decoded scales: a `Scales` in registers, or the block's
    /// 20 vectors in a tile (`TileScales`), read at each use. Building a `Scales` from a tile
    /// instead copied 640 bytes per block and call to the stack (a `memcpy`).
    pub(in crate::kernels::x86) trait ScaleSource {
        /// `Scales::sc[sb][h]`.
        unsafe fn sc(&self, sb: usize, h: usize) -> __m256i;
        /// `Scales::mins`.
        unsafe fn mins(&self) -> [__m256i; 4];
    }

    impl ScaleSource for Scales {
        #[inline(always)]
        unsafe fn sc(&self, sb: usize, h: usize) -> __m256i {
            self.sc[sb][h]
        }
        #[inline(always)]
        unsafe fn mins(&self) -> [__m256i; 4] {
            self.mins
        }
    }

    /// One block's vectors in a tile written by `make_tile`: `sc` flattened, then `mins`.
    struct TileScales<'a>(&'a [u64]);

    impl TileScales<'_> {
        #[inline(always)]
        unsafe fn vector(&self, i: usize) -> __m256i {
            // SAFETY: callers meet this function's contract: the CPU has the features of the
            // kernel set that calls it, and the slices are as long as the body reads.
            unsafe {
                assert!(i < TILE_VECTORS && self.0.len() >= 4 * TILE_VECTORS);
                // SAFETY: the slice holds TILE_VECTORS x 32 bytes (taken so by `tile_scales`) and
                // i < TILE_VECTORS; unaligned loads need no alignment.
                _mm256_loadu_si256((self.0.as_ptr() as *const __m256i).add(i))
            }
        }
    }

    impl ScaleSource for TileScales<'_> {
        #[inline(always)]
        unsafe fn sc(&self, sb: usize, h: usize) -> __m256i {
            // SAFETY: the enclosing unsafe fn's contract (the kernel set's CPU features, in-bounds
            // slices) is the callee's; register-only intrinsics need nothing more.
            unsafe { self.vector(2 * sb + h) }
        }
        #[inline(always)]
        unsafe fn mins(&self) -> [__m256i; 4] {
            // SAFETY: callers meet this function's contract: the CPU has the features of the
            // kernel set that calls it, and the slices are as long as the body reads.
            unsafe {
                [
                    self.vector(16),
                    self.vector(17),
                    self.vector(18),
                    self.vector(19),
                ]
            }
        }
    }

    /// `block_scales` for the unit test: (`sc`, `mins`).
    #[cfg(test)]
    #[inline(always)]
    pub(super) unsafe fn block_scales_for_test<P: K8x8>(
        w: &P,
    ) -> ([[__m256i; 2]; 8], [__m256i; 4]) {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            let s = block_scales::<P>(w);
            (s.sc, s.mins)
        }
    }

    /// The 6-bit scales and mins of a block's eight sub-blocks as bytes: dword lane `sb` of
    /// `scales[h]` (`mins[h]`) holds the scales (mins) of rows `4h .. 4h + 4` of sub-block `sb`.
    pub(in crate::kernels::x86) struct ScaleBytes {
        pub(in crate::kernels::x86) scales: [__m256i; 2],
        pub(in crate::kernels::x86) mins: [__m256i; 2],
    }

    /// The 6-bit scales and mins of all eight sub-blocks, decoded with vector instructions.
    ///
    /// Sub-block `sb`'s 12 bytes are three little-endian words `x0 x1 x2` (dwords `3sb`,
    /// `3sb + 1`, `3sb + 2` of the 96), each with one byte per row of a half: rows 0-3 take
    /// `x0 & 63` (scale) and `x1 & 63` (min); rows 4-7 take the low (scale) and high (min)
    /// nibble of `x2` plus, as bits 4-5, the top two bits of `x0` (scale) or `x1` (min). With
    /// the words of all sub-blocks gathered into one vector per field (lane = sub-block), every
    /// step is one instruction for all eight.
    #[inline(always)]
    pub(in crate::kernels::x86) unsafe fn scale_bytes<P: K8x8>(w: &P) -> ScaleBytes {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            let p = w.scales().as_ptr() as *const __m256i;
            // SAFETY: the 96 bytes are three 32-byte vectors.
            let (a, b, c) = (
                _mm256_loadu_si256(p),
                _mm256_loadu_si256(p.add(1)),
                _mm256_loadu_si256(p.add(2)),
            );
            // Field f of sub-block sb is dword 3sb + f: in `a` (0-7), `b` (8-15) or `c` (16-23);
            // the permutes use the index modulo 8 and the blends pick the right source per lane.
            macro_rules! gather {
                ($f:literal, $mask_b:literal, $mask_c:literal) => {{
                    let idx = _mm256_setr_epi32(
                        $f,
                        3 + $f,
                        6 + $f,
                        9 + $f,
                        12 + $f,
                        15 + $f,
                        18 + $f,
                        21 + $f,
                    );
                    _mm256_blend_epi32::<$mask_c>(
                        _mm256_blend_epi32::<$mask_b>(
                            _mm256_permutevar8x32_epi32(a, idx),
                            _mm256_permutevar8x32_epi32(b, idx),
                        ),
                        _mm256_permutevar8x32_epi32(c, idx),
                    )
                }};
            }
            let x0 = gather!(0, 0x38, 0xc0);
            let x1 = gather!(1, 0x18, 0xe0);
            let x2 = gather!(2, 0x1c, 0xe0);
            let m6 = _mm256_set1_epi8(0x3f);
            let m4 = _mm256_set1_epi8(0x0f);
            let m2 = _mm256_set1_epi8(0x03);
            // Byte-wise shifts through 16-bit ones: the masks drop the bits of the neighbour byte.
            let s_lo = _mm256_and_si256(x0, m6);
            let m_lo = _mm256_and_si256(x1, m6);
            let s_hi = _mm256_or_si256(
                _mm256_and_si256(x2, m4),
                _mm256_slli_epi16::<4>(_mm256_and_si256(_mm256_srli_epi16::<6>(x0), m2)),
            );
            let m_hi = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16::<4>(x2), m4),
                _mm256_slli_epi16::<4>(_mm256_and_si256(_mm256_srli_epi16::<6>(x1), m2)),
            );

            ScaleBytes {
                scales: [s_lo, s_hi],
                mins: [m_lo, m_hi],
            }
        }
    }

    /// The mins of [`ScaleBytes`] as i16 pairs for `mins_dot`: vector `p` holds, in i32 lane
    /// `j`, (min of sub-block `2p`, min of `2p + 1`) of row `j`.
    #[inline(always)]
    pub(in crate::kernels::x86) unsafe fn min_pairs(mins: &[__m256i; 2]) -> [__m256i; 4] {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it; register-only intrinsics.
        unsafe {
            let [m_lo, m_hi] = *mins;
            // mins[p]: i16 pairs (min of sub-block 2p, min of 2p + 1) for rows 0-7. Unpacking the
            // halves gives each sub-block's 8 row bytes as one qword (sub-blocks 0 1 | 4 5 and
            // 2 3 | 6 7); a shuffle interleaves the two qwords of each 128-bit half.
            let pair = _mm256_setr_epi8(
                0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15, 0, 8, 1, 9, 2, 10, 3, 11, 4,
                12, 5, 13, 6, 14, 7, 15,
            );
            let u = _mm256_shuffle_epi8(_mm256_unpacklo_epi32(m_lo, m_hi), pair);
            let v = _mm256_shuffle_epi8(_mm256_unpackhi_epi32(m_lo, m_hi), pair);
            [
                _mm256_cvtepu8_epi16(_mm256_castsi256_si128(u)),
                _mm256_cvtepu8_epi16(_mm256_castsi256_si128(v)),
                _mm256_cvtepu8_epi16(_mm256_extracti128_si256::<1>(u)),
                _mm256_cvtepu8_epi16(_mm256_extracti128_si256::<1>(v)),
            ]
        }
    }

    /// [`scale_bytes`] widened for the AVX2 loop nest ([`Scales`]).
    #[inline(always)]
    pub(in crate::kernels::x86) unsafe fn block_scales<P: K8x8>(w: &P) -> Scales {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            let bytes = scale_bytes(w);
            let [s_lo, s_hi] = bytes.scales;
            // sc[sb][h]: each row's scale in the four i16 lanes of its row. A shuffle expands
            // sub-block d of each 128-bit half (sub-blocks d and 4 + d) at once.
            let mut sc = [[_mm256_setzero_si256(); 2]; 8];
            macro_rules! expand {
                ($d:literal) => {{
                    let k = 4 * $d;
                    // The same pattern in both 128-bit halves (shuffles stay within a half).
                    let pick = _mm256_broadcastsi128_si256(_mm_setr_epi8(
                        k,
                        k,
                        k,
                        k,
                        k + 1,
                        k + 1,
                        k + 1,
                        k + 1,
                        k + 2,
                        k + 2,
                        k + 2,
                        k + 2,
                        k + 3,
                        k + 3,
                        k + 3,
                        k + 3,
                    ));
                    for (h, half) in [s_lo, s_hi].into_iter().enumerate() {
                        let t = _mm256_shuffle_epi8(half, pick);
                        sc[$d][h] = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(t));
                        sc[4 + $d][h] = _mm256_cvtepu8_epi16(_mm256_extracti128_si256::<1>(t));
                    }
                }};
            }
            expand!(0);
            expand!(1);
            expand!(2);
            expand!(3);

            let mins = min_pairs(&bytes.mins);
            Scales { sc, mins }
        }
    }

    /// `sum_sb min[sb][j] * (bsum[2sb] + bsum[2sb+1])` for the 8 rows. `sub_sums[p]` holds the
    /// activation sums of sub-blocks `2p` and `2p + 1` as two i16 in its i32 lane `lane` (a
    /// sub-block sum is at most 32 x 128, so it fits).
    #[inline(always)]
    pub(in crate::kernels::x86) unsafe fn mins_dot(
        mins: &[__m256i; 4],
        sub_sums: &[__m256i; 4],
        lane: i32,
    ) -> __m256i {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            let pick = _mm256_set1_epi32(lane);
            let mut acc = _mm256_setzero_si256();
            for (m, s) in mins.iter().zip(sub_sums) {
                let b = _mm256_permutevar8x32_epi32(*s, pick);
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(*m, b));
            }
            acc
        }
    }

    /// Sub-block sums of a plain Q8_K row packed for `mins_dot` (every pair in lane `p` of
    /// vector 0; the vectors repeat it so that lane 0 of `sub_sums[p]` is pair `p`).
    #[inline(always)]
    pub(in crate::kernels::x86) unsafe fn row_sub_sums(bsums: &[i16; 16]) -> [__m256i; 4] {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            // SAFETY: 16 i16 are 32 bytes.
            let b = _mm256_loadu_si256(bsums.as_ptr() as *const __m256i);
            // i32 lane sb = bsum[2sb] + bsum[2sb + 1]; packed to i16, i32 lane p of each 128-bit
            // half holds sub-blocks (2p, 2p + 1) of that half: p = 0, 1 low, p = 2, 3 high.
            let sb = _mm256_madd_epi16(b, _mm256_set1_epi16(1));
            let packed = _mm256_packs_epi32(sb, sb);
            [
                _mm256_permutevar8x32_epi32(packed, _mm256_set1_epi32(0)),
                _mm256_permutevar8x32_epi32(packed, _mm256_set1_epi32(1)),
                _mm256_permutevar8x32_epi32(packed, _mm256_set1_epi32(4)),
                _mm256_permutevar8x32_epi32(packed, _mm256_set1_epi32(5)),
            ]
        }
    }

    /// Sub-block sums of the four rows of a quad packed for `mins_dot`: vector `p` holds row
    /// m's pair `p` in i32 lane `QUAD_LANE[m]`. Chunk `c` of the quad's bsums holds each row's
    /// four 16-sums of sub-blocks `2c` and `2c + 1` (ggml's order), so pair `p` is chunk `p`.
    #[inline(always)]
    pub(in crate::kernels::x86) unsafe fn quad_sub_sums(bsums: &[i16; 64]) -> [__m256i; 4] {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            let ones = _mm256_set1_epi16(1);
            let p = bsums.as_ptr() as *const __m256i;
            let mut out = [_mm256_setzero_si256(); 4];
            for (c, o) in out.iter_mut().enumerate() {
                // SAFETY: c < 4, so the 32 bytes at 32c lie inside the 128-byte array.
                let sb = _mm256_madd_epi16(_mm256_loadu_si256(p.add(c)), ones);
                *o = _mm256_packs_epi32(sb, sb);
            }
            out
        }
    }

    /// i32 lane of row m's pair in `quad_sub_sums` vectors.
    pub(in crate::kernels::x86) const QUAD_LANE: [i32; 4] = [0, 1, 4, 5];

    /// `acc + q·a` for unsigned `q`, signed `a`: `maddubs` into i16 (four products of a group
    /// stay in range).
    #[inline(always)]
    unsafe fn add_products(acc: __m256i, q: __m256i, a: __m256i) -> __m256i {
        // SAFETY: register-only AVX2 intrinsics; the caller's kernel set has AVX2.
        unsafe { _mm256_add_epi16(acc, _mm256_maddubs_epi16(q, a)) }
    }

    /// `s` plus the i16 sums of one sub-block times its i16 scales, as i32 lanes (two per row).
    #[inline(always)]
    unsafe fn add_scaled(s: __m256i, acc: __m256i, sc: __m256i) -> __m256i {
        // SAFETY: as above.
        unsafe { _mm256_add_epi32(s, _mm256_madd_epi16(acc, sc)) }
    }

    /// Scaled integer sums of one group against one activation row, accumulated into `s[h]`
    /// (i32 lanes, two per row). Activations `e..e+8` start at `(e / 8) * stride + offset` in
    /// `qs` (stride 8, offset 0 for a plain row; stride 32, offset 8m for row m of a quad). No
    /// closures: they would not inherit the caller's target features.
    #[inline(always)]
    unsafe fn group_dot<P: K8x8, S: ScaleSource>(
        q: &[[[__m256i; 2]; 2]; 4],
        sc: &S,
        g: usize,
        qs: &[i8],
        (stride, offset): (usize, usize),
        s: &mut [__m256i; 2],
    ) {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            let mut lo = [_mm256_setzero_si256(); 2];
            let mut hi = [_mm256_setzero_si256(); 2];
            for (k, qk) in q.iter().enumerate() {
                let p_lo = (8 * g + k) * stride + offset;
                let p_hi = (8 * g + 4 + k) * stride + offset;
                let a_lo = broadcast8(&qs[p_lo..p_lo + 8]);
                let a_hi = broadcast8(&qs[p_hi..p_hi + 8]);
                for h in 0..2 {
                    lo[h] = add_products(lo[h], qk[h][0], a_lo);
                    hi[h] = add_products(hi[h], qk[h][1], a_hi);
                }
            }
            for h in 0..2 {
                s[h] = add_scaled(s[h], lo[h], sc.sc(2 * g, h));
                s[h] = add_scaled(s[h], hi[h], sc.sc(2 * g + 1, h));
            }
        }
    }

    #[inline(always)]
    pub(in crate::kernels::x86) unsafe fn f16x8(h: &[F16Bits; 8]) -> __m256 {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            // SAFETY: 8 halves are 16 bytes.
            _mm256_cvtph_ps(_mm_loadu_si128(h.as_ptr() as *const __m128i))
        }
    }

    /// Row sums in natural row order from the two half accumulators.
    #[inline(always)]
    unsafe fn row_sums(s: &[__m256i; 2]) -> __m256i {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            _mm256_permutevar8x32_epi32(
                _mm256_hadd_epi32(s[0], s[1]),
                _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7),
            )
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn gemv<P: K8x8>(w: &[P], a: &[BlockQ8K], out: &mut [f32]) {
        // SAFETY: the enclosing unsafe fn's contract (the kernel set's CPU features, in-bounds
        // slices) is the callee's; register-only intrinsics need nothing more.
        unsafe { gemv_body(w, a, out) }
    }

    #[inline(always)]
    unsafe fn gemv_body<P: K8x8>(w: &[P], a: &[BlockQ8K], out: &mut [f32]) {
        // SAFETY: the enclosing unsafe fn's contract is the callee's.
        unsafe { gemv_body_with::<P>(w, a, out) }
    }

    #[inline(always)]
    unsafe fn gemv_body_with<P: K8x8>(w: &[P], a: &[BlockQ8K], out: &mut [f32]) {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            for (group, o) in w.chunks_exact(a.len().max(1)).zip(out.chunks_exact_mut(8)) {
                gemv_group::<P>(group, a, o);
            }
        }
    }

    #[inline(always)]
    unsafe fn gemv_group<P: K8x8>(w: &[P], a: &[BlockQ8K], out: &mut [f32]) {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            let mut acc = _mm256_setzero_ps();
            for (wb, ab) in w.iter().zip(a) {
                crate::kernel_api::prefetch_l2(wb, crate::kernel_api::GEMV_PREFETCH_BYTES);
                let sc = block_scales::<P>(wb);
                let mut s = [_mm256_setzero_si256(); 2];
                for g in 0..4 {
                    let q = wb.decode_group(g);
                    group_dot::<P, _>(&q, &sc, g, &ab.qs, (8, 0), &mut s);
                }
                let m = mins_dot(&sc.mins, &row_sub_sums(&ab.bsums), 0);
                let da = _mm256_set1_ps(ab.d);
                let d = _mm256_mul_ps(f16x8(wb.d()), da);
                let dmin = _mm256_mul_ps(f16x8(wb.dmin()), da);
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(row_sums(&s)), d, acc);
                acc = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(m), dmin, acc);
            }
            assert!(out.len() >= 8);
            // SAFETY: checked just above.
            _mm256_storeu_ps(out.as_mut_ptr(), acc);
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn gemm<P: K8x8>(w: &[P], a: &[BlockQ8Kx4], out: &mut [f32]) {
        // SAFETY: the enclosing unsafe fn's contract (the kernel set's CPU features, in-bounds
        // slices) is the callee's; register-only intrinsics need nothing more.
        unsafe { gemm_body(w, a, out) }
    }

    /// 32-byte vectors in the tile of one block: `Scales::sc` then `Scales::mins`.
    pub(super) const TILE_VECTORS: usize = 20;

    /// Stores the decoded scales of every block of a row group into its tile.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::kernels::x86) unsafe fn make_tile<P: K8x8>(w: &[P], tile: &mut [u64]) {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            for (wb, t) in w.iter().zip(tile.chunks_exact_mut(4 * TILE_VECTORS)) {
                let sc = block_scales::<P>(wb);
                let p = t.as_mut_ptr() as *mut __m256i;
                // SAFETY: the chunk holds TILE_VECTORS x 32 bytes.
                for (i, v) in sc.sc.iter().flatten().chain(&sc.mins).enumerate() {
                    _mm256_storeu_si256(p.add(i), *v);
                }
            }
        }
    }

    /// The scales of block `b` in a tile written by `make_tile`.
    #[inline(always)]
    fn tile_scales(tile: &[u64], b: usize) -> TileScales<'_> {
        TileScales(&tile[4 * TILE_VECTORS * b..4 * TILE_VECTORS * (b + 1)])
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn gemm_tiled<P: K8x8>(
        w: &[P],
        tile: &[u64],
        a: &[BlockQ8Kx4],
        out: &mut [f32],
    ) {
        // SAFETY: the enclosing unsafe fn's contract (the kernel set's CPU features, in-bounds
        // slices) is the callee's; register-only intrinsics need nothing more.
        unsafe { gemm_tiled_body(w, tile, a, out) }
    }

    /// The tiled GEMM: the tile must cover every block it reads (asserted).
    #[inline(always)]
    pub(in crate::kernels::x86) unsafe fn gemm_tiled_body<P: K8x8>(
        w: &[P],
        tile: &[u64],
        a: &[BlockQ8Kx4],
        out: &mut [f32],
    ) {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            assert!(tile.len() >= w.len().min(a.len()) * 4 * TILE_VECTORS);
            gemm_body_with::<P, true>(w, tile, a, out)
        }
    }

    #[inline(always)]
    pub(in crate::kernels::x86) unsafe fn gemm_body<P: K8x8>(
        w: &[P],
        a: &[BlockQ8Kx4],
        out: &mut [f32],
    ) {
        // SAFETY: the enclosing unsafe fn's contract (the kernel set's CPU features, in-bounds
        // slices) is the callee's; register-only intrinsics need nothing more.
        unsafe { gemm_body_with::<P, false>(w, &[], a, out) }
    }

    /// One block of a row group against one block of a quad, into the four rows' accumulators.
    #[inline(always)]
    unsafe fn quad_block<P: K8x8, S: ScaleSource>(
        wb: &P,
        sc: &S,
        ab: &BlockQ8Kx4,
        acc: &mut [__m256; 4],
    ) {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            let mut s = [[_mm256_setzero_si256(); 2]; 4];
            for g in 0..4 {
                let q = wb.decode_group(g);
                for (m, sm) in s.iter_mut().enumerate() {
                    // Row m's activations e..e+8 sit at 32 * (e / 8) + 8m in the quad.
                    group_dot::<P, _>(&q, sc, g, &ab.qs, (32, 8 * m), sm);
                }
            }
            let d = f16x8(wb.d());
            let dmin = f16x8(wb.dmin());
            let sub_sums = quad_sub_sums(&ab.bsums);
            let mins = sc.mins();
            for (m, acc_m) in acc.iter_mut().enumerate() {
                let mn = mins_dot(&mins, &sub_sums, QUAD_LANE[m]);
                let da = _mm256_set1_ps(ab.d[m]);
                *acc_m = _mm256_fmadd_ps(
                    _mm256_cvtepi32_ps(row_sums(&s[m])),
                    _mm256_mul_ps(d, da),
                    *acc_m,
                );
                *acc_m = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mn), _mm256_mul_ps(dmin, da), *acc_m);
            }
        }
    }

    /// GEMM of one row group with one quad; the scales decoded here or (`TILED`) read from
    /// the group's tile.
    #[inline(always)]
    unsafe fn gemm_body_with<P: K8x8, const TILED: bool>(
        w: &[P],
        tile: &[u64],
        a: &[BlockQ8Kx4],
        out: &mut [f32],
    ) {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            let mut acc = [_mm256_setzero_ps(); 4];
            for (b, (wb, ab)) in w.iter().zip(a).enumerate() {
                if TILED {
                    quad_block::<P, _>(wb, &tile_scales(tile, b), ab, &mut acc);
                } else {
                    quad_block::<P, _>(wb, &block_scales::<P>(wb), ab, &mut acc);
                }
            }
            assert!(out.len() >= 32);
            for (m, acc_m) in acc.iter().enumerate() {
                // SAFETY: out has at least 32 elements (checked above).
                _mm256_storeu_ps(out.as_mut_ptr().add(8 * m), *acc_m);
            }
        }
    }
}

/// The AVX2 kernels of a K-quant 8x8 layout, with the tiled GEMM (scales decoded once per
/// call).
pub(crate) fn kernels<P: K8x8>(_: Avx2) -> Kernels<P, BlockQ8K, BlockQ8Kx4> {
    Kernels {
        set: KernelSet::Avx2,
        gemv: gemv::<P>,
        gemm: gemm::<P>,
        tiled: Some(tiled::<P>(gemm_tiled::<P>)),
        wide: None,
    }
}

/// The tiled GEMM around `gemm` (a build of `imp::gemm_tiled_body` with the products `D`),
/// with tiles whose scales are prepared for `D`.
pub(in crate::kernels::x86) fn tiled<P: K8x8>(
    gemm: TiledGemmFn<P, BlockQ8Kx4>,
) -> TiledGemm<P, BlockQ8Kx4> {
    TiledGemm {
        groups: 1,
        quads: 1,
        min_quads: 2,
        tile_words: |nb| nb * 4 * imp::TILE_VECTORS,
        make_tile: make_tile::<P>,
        gemm,
    }
}

fn make_tile<P: K8x8>(w: &[P], tile: &mut [u64]) {
    assert!(tile.len() >= w.len() * 4 * imp::TILE_VECTORS);
    // SAFETY: only reachable through `tiled`, which the AVX2 and AVX-512 sets call in exchange
    // for their tokens (both imply AVX2, all the tile needs: `prepare_scale` is AVX2 for every
    // `D`); the tile is large enough (asserted above).
    unsafe { imp::make_tile::<P>(w, tile) }
}

fn gemm_tiled<P: K8x8>(w: &[P], tile: &[u64], a: &[BlockQ8Kx4], out: &mut [f32]) {
    // SAFETY: only reachable through `kernels`, in exchange for an `Avx2` token; the body
    // checks the tile length.
    unsafe { imp::gemm_tiled(w, tile, a, out) }
}

fn gemv<P: K8x8>(w: &[P], a: &[BlockQ8K], out: &mut [f32]) {
    // SAFETY: only reachable through `kernels`, in exchange for an `Avx2` token.
    unsafe { imp::gemv(w, a, out) }
}

fn gemm<P: K8x8>(w: &[P], a: &[BlockQ8Kx4], out: &mut [f32]) {
    // SAFETY: only reachable through `kernels`, in exchange for an `Avx2` token.
    unsafe { imp::gemm(w, a, out) }
}

#[cfg(test)]
mod tests;
