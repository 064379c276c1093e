//! The 8x8 layouts of 32-weight blocks (`q4_0_8x8`, `iq4_nl_8x8`, `mxfp4_8x8`, `q5_0_8x8`,
//! `q8_0_8x8`) with
//! 512-bit `vpdpbusd`: one instruction multiplies all 8 rows of a row group by 8 activations.
//!
//! The packed blocks need no re-layout. For Q4_0, IQ4_NL and Q5_0: the first 64 quant bytes are bytes 0-7 of rows 0-7 (row
//! `r` at `8r`), the last 64 bytes 8-15. Loaded as one zmm, dword lane `2r + h` holds bytes
//! `4h..4h + 4` of row `r`; a qword broadcast of 8 activations puts activations `4h..4h + 4` in
//! the same lanes. So `vpdpbusd(acc, nibbles, broadcast)` adds, in lane `(r, h)`, four products
//! of row `r` with the half `h` of those 8 activations. Low nibbles of the two halves are weights
//! 0-7 and 8-15, high nibbles 16-23 and 24-31: four `vpdpbusd` per block and activation row.
//!
//! Q8_0's 256 quant bytes are four such 64-byte vectors (activations 0-7, 8-15, 16-23, 24-31).
//!
//! `vpdpbusd` wants its weights unsigned, so they are biased: Q4_0 nibbles read as `q = nibble
//! ^ 8` (weight `q - 8`), Q5_0's as `q = nibble | fifth bit << 4` (weight `q - 16`), IQ4_NL
//! levels looked up as `level + 128`, MXFP4 values as `value + 16`, Q8_0 bytes as `q + 128`. The bias times the activations'
//! sum is taken off again: in the GEMMs the sums come with the activations
//! (`Q8_0SumsInterleaved<8>`, `<16>`, `<128>` and `Q8_0AbsInterleaved`), in the GEMV from a
//! `vpdpbusd` of ones with the same broadcasts, which sums exactly the activations each lane
//! multiplies. The two lanes of a row
//! share its scale; they are added once, after the last block.

use std::arch::x86_64::*;

use super::lanes::{fold_pairs_ps, store_piece};
use crate::blocks::{
    BlockIq4Nlx8, BlockMxfp4x8, BlockQ4_0x8, BlockQ5_0x8, BlockQ8_0, BlockQ8_0x4Abs,
    BlockQ8_0x4Sums, BlockQ8_0x8, IQ4NL_LEVELS,
};
use crate::kernels::x86::avx2::nibble::imp::{e8m0_half_x8, f16x8};
use crate::quant::grids::KVALUES_FP4;

/// Lanes `(r, 0)`: where the whole-row correction is subtracted once.
const EVEN_LANES: __mmask16 = 0x5555;

/// An 8-row block of 32 weights per row as the 512-bit kernels see it.
pub(crate) trait ZmmBlock: Copy + Send + Sync + 'static {
    /// log2 of the bias added to every weight to make it unsigned.
    const BIAS_SHIFT: u32;
    /// log2 of the ratio between the bias the GEMMs' quads carry their offsets for and
    /// [`ZmmBlock::BIAS_SHIFT`]: the offsets are shifted right by it (exactly: they are
    /// multiples of their bias).
    const QUAD_OFFSET_SHIFT: u32 = 0;
    /// Whether the GEMV asks for the weights ahead (`kernel_api::prefetch_l2`). Q8_0, with the
    /// fewest instructions per byte, streams as fast without (11008x4096 rotated, 2 threads,
    /// best of 4: 1.04-1.09 ms without, 1.11-1.13 with: no gain, within this VM's noise);
    /// Q4_0 and IQ4_NL gained 25-30 % (0.47-0.52 -> 0.36-0.39 ms).
    const PREFETCH: bool = true;
    /// The rows' scales as f32, in row order.
    unsafe fn row_scales(&self) -> __m256;
    /// The four weight vectors (activations 0-7, 8-15, 16-23, 24-31), biased to unsigned.
    unsafe fn weights(&self) -> [__m512i; 4];
}

/// Low and high nibbles of the two 64-byte halves: activations 0-7, 8-15, 16-23, 24-31.
#[inline(always)]
unsafe fn nibbles(qs: &[u8; 128], xor: i8) -> [__m512i; 4] {
    // SAFETY: callers meet this function's contract (AVX-512 F/BW); `qs` is 128 bytes, read as
    // two 64-byte halves.
    unsafe {
        let low4 = _mm512_set1_epi8(0x0f);
        let flip = _mm512_set1_epi8(xor);
        let p = qs.as_ptr() as *const __m512i;
        let first = _mm512_xor_si512(_mm512_loadu_si512(p), flip);
        let second = _mm512_xor_si512(_mm512_loadu_si512(p.add(1)), flip);
        [
            _mm512_and_si512(first, low4),
            _mm512_and_si512(second, low4),
            _mm512_and_si512(_mm512_srli_epi16::<4>(first), low4),
            _mm512_and_si512(_mm512_srli_epi16::<4>(second), low4),
        ]
    }
}

impl ZmmBlock for BlockQ4_0x8 {
    const BIAS_SHIFT: u32 = 3;
    #[inline(always)]
    unsafe fn row_scales(&self) -> __m256 {
        // SAFETY: F16C per the caller's contract; `d` is 8 halves.
        unsafe { f16x8(&self.d) }
    }
    #[inline(always)]
    unsafe fn weights(&self) -> [__m512i; 4] {
        // SAFETY: AVX-512 F/BW per the caller's contract. ggml stores `q ^ 8`; undo it.
        unsafe { nibbles(&self.qs, 0x88u8 as i8) }
    }
}

/// Q5_0: the nibbles (not xored) with their fifth bits from the bit planes `qh`, `q = w + 16`.
/// Bit plane `t` of `qh` belongs to 32-byte vector `t / 2` of the nibbles (low nibbles for even
/// `t`), so each 512-bit weight vector takes two planes, one per 256-bit half: a rotation of
/// the 64-bit lanes by `4 - t` (mod 64) puts bit `t` of every byte at bit 4 without crossing
/// into a neighbouring byte there.
impl ZmmBlock for BlockQ5_0x8 {
    const BIAS_SHIFT: u32 = 4;
    #[inline(always)]
    unsafe fn row_scales(&self) -> __m256 {
        // SAFETY: F16C per the caller's contract; `d` is 8 halves.
        unsafe { f16x8(&self.d) }
    }
    #[inline(always)]
    unsafe fn weights(&self) -> [__m512i; 4] {
        // SAFETY: AVX-512 F/BW per the caller's contract; `qh` is 32 bytes.
        unsafe {
            let planes =
                _mm512_broadcast_i64x4(_mm256_loadu_si256(self.qh.as_ptr() as *const __m256i));
            let n = nibbles(&self.qs, 0);
            [
                _mm512_or_si512(n[0], fifth_bits(planes, &FIFTH_BIT_TURNS[0])),
                _mm512_or_si512(n[1], fifth_bits(planes, &FIFTH_BIT_TURNS[1])),
                _mm512_or_si512(n[2], fifth_bits(planes, &FIFTH_BIT_TURNS[2])),
                _mm512_or_si512(n[3], fifth_bits(planes, &FIFTH_BIT_TURNS[3])),
            ]
        }
    }
}

/// Left rotations of the 64-bit lanes (low half, high half) that bring planes (0, 2), (4, 6),
/// (1, 3) and (5, 7) to bit 4, for the four weight vectors of a Q5_0 block.
const FIFTH_BIT_TURNS: [[i64; 8]; 4] = [
    [4, 4, 4, 4, 2, 2, 2, 2],
    [0, 0, 0, 0, 62, 62, 62, 62],
    [3, 3, 3, 3, 1, 1, 1, 1],
    [63, 63, 63, 63, 61, 61, 61, 61],
];

/// Bit 4 of every byte of `planes` rotated by `turns`, the rest cleared.
#[inline(always)]
unsafe fn fifth_bits(planes: __m512i, turns: &[i64; 8]) -> __m512i {
    // SAFETY: `turns` is 64 bytes; AVX-512 F per the caller's contract.
    unsafe {
        let counts = _mm512_loadu_si512(turns.as_ptr() as *const __m512i);
        _mm512_and_si512(_mm512_rolv_epi64(planes, counts), _mm512_set1_epi8(0x10))
    }
}

/// IQ4_NL's levels plus 128, as unsigned bytes.
const BIASED_IQ4NL_LEVELS: [u8; 16] = {
    let mut t = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = (IQ4NL_LEVELS[i] as i16 + 128) as u8;
        i += 1;
    }
    t
};
/// MXFP4's doubled E2M1 values plus 16.
const BIASED_FP4_VALUES: [u8; 16] = {
    let mut t = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = (KVALUES_FP4[i] + 16) as u8;
        i += 1;
    }
    t
};

/// The nibbles of `qs` through a table of biased weights, as [`ZmmBlock::weights`] gives them.
#[inline(always)]
unsafe fn table_weights(qs: &[u8; 128], table: &[u8; 16]) -> [__m512i; 4] {
    // SAFETY: AVX-512 F/BW per the caller's contract; the table is 16 bytes.
    unsafe {
        let lut = _mm512_broadcast_i32x4(_mm_loadu_si128(table.as_ptr() as *const __m128i));
        let n = nibbles(qs, 0);
        // No closures here: they would not inherit the kernel's target features.
        [
            _mm512_shuffle_epi8(lut, n[0]),
            _mm512_shuffle_epi8(lut, n[1]),
            _mm512_shuffle_epi8(lut, n[2]),
            _mm512_shuffle_epi8(lut, n[3]),
        ]
    }
}

/// MXFP4: IQ4_NL's arithmetic with another table and E8M0 exponents for scales. Its values are
/// at most 12 in magnitude, so they take a bias of 16 (IQ4_NL's 128 made each lane's sum, the
/// half of a row that `fold_pairs_ps` adds after scaling, up to ten times larger than the
/// row's result: the f32 rounding of the two large halves cancelled to relative errors of
/// 1e-5). The quads carry `128 Σa` (`Q8_0AbsInterleaved`, as IQ4_NL's): shifted right by 3.
impl ZmmBlock for BlockMxfp4x8 {
    const BIAS_SHIFT: u32 = 4;
    const QUAD_OFFSET_SHIFT: u32 = 3;
    #[inline(always)]
    unsafe fn row_scales(&self) -> __m256 {
        // SAFETY: AVX2 per the caller's contract; `e` is 8 bytes.
        unsafe { e8m0_half_x8(&self.e) }
    }
    #[inline(always)]
    unsafe fn weights(&self) -> [__m512i; 4] {
        // SAFETY: AVX-512 F/BW per the caller's contract.
        unsafe { table_weights(&self.qs, &BIASED_FP4_VALUES) }
    }
}

impl ZmmBlock for BlockIq4Nlx8 {
    const BIAS_SHIFT: u32 = 7;
    #[inline(always)]
    unsafe fn row_scales(&self) -> __m256 {
        // SAFETY: F16C per the caller's contract; `d` is 8 halves.
        unsafe { f16x8(&self.d) }
    }
    #[inline(always)]
    unsafe fn weights(&self) -> [__m512i; 4] {
        // SAFETY: AVX-512 F/BW per the caller's contract.
        unsafe { table_weights(&self.qs, &BIASED_IQ4NL_LEVELS) }
    }
}

impl ZmmBlock for BlockQ8_0x8 {
    const PREFETCH: bool = false;
    const BIAS_SHIFT: u32 = 7;
    #[inline(always)]
    unsafe fn row_scales(&self) -> __m256 {
        // SAFETY: F16C per the caller's contract; `d` is 8 halves.
        unsafe { f16x8(&self.d) }
    }
    #[inline(always)]
    unsafe fn weights(&self) -> [__m512i; 4] {
        // SAFETY: AVX-512 F per the caller's contract; `qs` is 256 bytes, four 64-byte vectors.
        unsafe {
            let flip = _mm512_set1_epi8(0x80u8 as i8);
            let p = self.qs.as_ptr() as *const __m512i;
            [
                _mm512_xor_si512(_mm512_loadu_si512(p), flip),
                _mm512_xor_si512(_mm512_loadu_si512(p.add(1)), flip),
                _mm512_xor_si512(_mm512_loadu_si512(p.add(2)), flip),
                _mm512_xor_si512(_mm512_loadu_si512(p.add(3)), flip),
            ]
        }
    }
}

/// The 8 row scales of a block, each twice (lanes `(r, 0)` and `(r, 1)`).
#[inline(always)]
unsafe fn scales_twice(s: __m256) -> __m512 {
    // SAFETY: register-only AVX-512 F per the caller's contract.
    unsafe {
        let twice = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
        _mm512_permutexvar_ps(twice, _mm512_castps256_ps512(s))
    }
}

/// Eight activations (bytes `at..at + 8` of `q`) in every qword.
#[inline(always)]
unsafe fn broadcast8(q: &[i8], at: usize) -> __m512i {
    assert!(at + 8 <= q.len());
    // SAFETY: the 8 bytes are in bounds (asserted above); unaligned read.
    unsafe { _mm512_set1_epi64(std::ptr::read_unaligned(q.as_ptr().add(at) as *const i64)) }
}

/// `Σ q·a` per lane `(r, h)` for one block and one activation row given as its four broadcasts.
#[inline(always)]
unsafe fn lane_dots(w: &[__m512i; 4], a: &[__m512i; 4]) -> __m512i {
    // SAFETY: register-only AVX-512 VNNI per the caller's contract.
    unsafe { lane_dots_from(_mm512_setzero_si512(), w, a) }
}

/// `init + Σ q·a` per lane `(r, h)`, as [`lane_dots`].
#[inline(always)]
unsafe fn lane_dots_from(init: __m512i, w: &[__m512i; 4], a: &[__m512i; 4]) -> __m512i {
    // SAFETY: register-only AVX-512 VNNI per the caller's contract.
    unsafe {
        let s = _mm512_dpbusd_epi32(init, w[0], a[0]);
        let s = _mm512_dpbusd_epi32(s, w[1], a[1]);
        let s = _mm512_dpbusd_epi32(s, w[2], a[2]);
        _mm512_dpbusd_epi32(s, w[3], a[3])
    }
}

/// A quad of four Q8_0 rows (interleaved in chunks of 8 bytes) that carries f32 scales and
/// each row's quant sum times the weights' bias.
pub(crate) trait OffsetQuad: Copy + Send + Sync + 'static {
    fn d(&self) -> &[f32; 4];
    fn offsets(&self) -> &[i32; 4];
    fn qs(&self) -> &[i8; 128];
}

macro_rules! offset_quads {
    ($($t:ty),*) => {$(
        impl OffsetQuad for $t {
            #[inline(always)]
            fn d(&self) -> &[f32; 4] {
                &self.d
            }
            #[inline(always)]
            fn offsets(&self) -> &[i32; 4] {
                &self.offsets
            }
            #[inline(always)]
            fn qs(&self) -> &[i8; 128] {
                &self.qs
            }
        }
    )*};
}
offset_quads!(BlockQ8_0x4Sums, BlockQ8_0x4Abs);

/// GEMM of one row group (`w`, one block per quad in `a`) with four activation rows into
/// `out[8m + r]`; the quads carry the bias correction (`offsets` = bias x quant sum).
#[inline(always)]
pub(super) unsafe fn gemm_body<P: ZmmBlock, Q: OffsetQuad>(w: &[P], a: &[Q], out: &mut [f32]) {
    assert!(out.len() >= 32);
    // SAFETY: AVX-512 F/BW/VL/VNNI per the caller's contract; every read is from fixed-size
    // block fields, and `out` holds 32 floats (asserted above).
    unsafe {
        let mut acc = [_mm512_setzero_ps(); 4];
        for (wb, ab) in w.iter().zip(a) {
            let wq = wb.weights();
            let dw = scales_twice(wb.row_scales());
            let qs = ab.qs();
            for (m, acc_m) in acc.iter_mut().enumerate() {
                // Row m's activations 8j..8j + 8 sit at 32j + 8m in the interleaved quad.
                let am = [
                    broadcast8(qs, 8 * m),
                    broadcast8(qs, 32 + 8 * m),
                    broadcast8(qs, 64 + 8 * m),
                    broadcast8(qs, 96 + 8 * m),
                ];
                let dots = lane_dots(&wq, &am);
                let dots = _mm512_mask_sub_epi32(
                    dots,
                    EVEN_LANES,
                    dots,
                    _mm512_set1_epi32(ab.offsets()[m] >> P::QUAD_OFFSET_SHIFT),
                );
                let scale = _mm512_mul_ps(dw, _mm512_set1_ps(ab.d()[m]));
                *acc_m = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dots), scale, *acc_m);
            }
        }
        for (m, acc_m) in acc.iter().enumerate() {
            _mm256_storeu_ps(out.as_mut_ptr().add(8 * m), fold_pairs_ps(*acc_m));
        }
    }
}

/// GEMM of two row groups (`w[0]`, `w[1]`) with two quads (`a[0]`, `a[1]`, one block per
/// weight block): `out[g][8 (4 q + m) + r]`. The weights of each block are decoded once for
/// eight activation rows, and each activation broadcast feeds both groups, which takes a
/// quarter of the instructions per `vpdpbusd` off [`gemm_body`]'s count.
#[inline(always)]
pub(super) unsafe fn wide_gemm_body<P: ZmmBlock, Q: OffsetQuad>(
    w: [&[P]; 2],
    a: [&[Q]; 2],
    out: [&mut [f32]; 2],
) {
    let nb = w[0].len();
    assert!(w[1].len() == nb && a[0].len() >= nb && a[1].len() >= nb);
    assert!(out[0].len() >= 64 && out[1].len() >= 64);
    // SAFETY: AVX-512 F/BW/VL/VNNI per the caller's contract; every read is from fixed-size
    // block fields of blocks in bounds (asserted above), and each `out` holds 64 floats.
    unsafe {
        // acc[g][4 q + m]
        let mut acc = [[_mm512_setzero_ps(); 8]; 2];
        for b in 0..nb {
            let wq = [w[0][b].weights(), w[1][b].weights()];
            let dw = [
                scales_twice(w[0][b].row_scales()),
                scales_twice(w[1][b].row_scales()),
            ];
            for (q, aq) in a.iter().enumerate() {
                let ab = &aq[b];
                let qs = ab.qs();
                for m in 0..4 {
                    // Row m's activations 8j..8j + 8 sit at 32j + 8m in the interleaved quad.
                    let am = [
                        broadcast8(qs, 8 * m),
                        broadcast8(qs, 32 + 8 * m),
                        broadcast8(qs, 64 + 8 * m),
                        broadcast8(qs, 96 + 8 * m),
                    ];
                    let offset = _mm512_set1_epi32(ab.offsets()[m] >> P::QUAD_OFFSET_SHIFT);
                    let da = _mm512_set1_ps(ab.d()[m]);
                    for g in 0..2 {
                        let dots = lane_dots(&wq[g], &am);
                        let dots = _mm512_mask_sub_epi32(dots, EVEN_LANES, dots, offset);
                        let scale = _mm512_mul_ps(dw[g], da);
                        acc[g][4 * q + m] =
                            _mm512_fmadd_ps(_mm512_cvtepi32_ps(dots), scale, acc[g][4 * q + m]);
                    }
                }
            }
        }
        for (acc_g, out_g) in acc.iter().zip(out) {
            for (i, acc_i) in acc_g.iter().enumerate() {
                _mm256_storeu_ps(out_g.as_mut_ptr().add(8 * i), fold_pairs_ps(*acc_i));
            }
        }
    }
}

/// Per activation block, what every row group's GEMV needs besides the quants: the bias times
/// the sums of the activations that lanes `(r, 0)` and `(r, 1)` multiply, negated (the start
/// of the lanes' dot products), and the block's scale as f32 bits.
type GemvBlockPrep = [i32; 4];

/// Fills `prep` for the activation row `a`.
#[inline(always)]
unsafe fn prepare_gemv<P: ZmmBlock>(a: &[BlockQ8_0], prep: &mut [GemvBlockPrep]) {
    // SAFETY: AVX-512 F/BW/VNNI per the caller's contract; block reads are of fixed-size
    // fields.
    unsafe {
        let ones = _mm512_set1_epi8(1);
        let shift = _mm_cvtsi32_si128(P::BIAS_SHIFT as i32);
        for (ab, p) in a.iter().zip(prep) {
            let act = [
                broadcast8(&ab.qs, 0),
                broadcast8(&ab.qs, 8),
                broadcast8(&ab.qs, 16),
                broadcast8(&ab.qs, 24),
            ];
            // Lane (r, h) holds the sum of the activations that lane multiplies.
            let bias = _mm512_sll_epi32(lane_dots(&[ones; 4], &act), shift);
            let neg = _mm512_sub_epi32(_mm512_setzero_si512(), bias);
            let mut lanes = [0i32; 16];
            _mm512_storeu_si512(lanes.as_mut_ptr() as *mut __m512i, neg);
            *p = [lanes[0], lanes[1], ab.d.to_f32().to_bits() as i32, 0];
        }
    }
}

/// GEMV over every row group in `w` (`a.len()` blocks each), one group after the other: a
/// single forward stream, which the hardware prefetcher follows by itself. Two groups side by
/// side (sharing the broadcasts) with software prefetch of the next pair, as the AVX2 GEMVs do,
/// streamed at half the speed on Zen 4 (2 threads, weights rotated: q4_0 1536x576 0.045-0.048
/// -> 0.023-0.026 ms, 2048x640 0.067-0.072 -> 0.034 ms, 4096x4096 0.57 -> 0.38-0.42 ms).
///
/// The activations' bias sums and scales are worked out once per call (`prepare_gemv`), not
/// once per group: the group loop is left with the products and one scaled FMA per block.
/// They go to the stack (no closure around a scratch buffer: it would not inherit the
/// kernel's target features), `PREP_BLOCKS` blocks at a time; longer rows add up the partial
/// sums of each piece in `out`.
#[inline(always)]
pub(super) unsafe fn gemv_body<P: ZmmBlock>(w: &[P], a: &[BlockQ8_0], out: &mut [f32]) {
    let nb = a.len();
    if nb == 0 {
        out.fill(0.0);
        return;
    }
    assert!(out.len() >= w.len() / nb * 8);
    let mut prep = [[0i32; 4]; PREP_BLOCKS];
    // SAFETY: AVX-512 F/BW/VL/VNNI per the caller's contract; block reads are of fixed-size
    // fields, `prep` has a slot per block of the piece, and every load and store is of an
    // 8-float chunk of `out` (asserted above).
    unsafe {
        for (piece, a_piece) in a.chunks(PREP_BLOCKS).enumerate() {
            let first = piece * PREP_BLOCKS;
            prepare_gemv::<P>(a_piece, &mut prep);
            for (group, o) in w.chunks_exact(nb).zip(out.chunks_exact_mut(8)) {
                let blocks = &group[first..first + a_piece.len()];
                let mut acc = _mm512_setzero_ps();
                for ((wb, ab), p) in blocks.iter().zip(a_piece).zip(&prep) {
                    if P::PREFETCH {
                        crate::kernel_api::prefetch_l2(wb, crate::kernel_api::GEMV_PREFETCH_BYTES);
                    }
                    let act = [
                        broadcast8(&ab.qs, 0),
                        broadcast8(&ab.qs, 8),
                        broadcast8(&ab.qs, 16),
                        broadcast8(&ab.qs, 24),
                    ];
                    let init =
                        _mm512_set1_epi64(std::ptr::read_unaligned(p.as_ptr() as *const i64));
                    let dots = lane_dots_from(init, &wb.weights(), &act);
                    let da = _mm512_set1_ps(f32::from_bits(p[2] as u32));
                    let scale = _mm512_mul_ps(scales_twice(wb.row_scales()), da);
                    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dots), scale, acc);
                }
                store_piece(o, fold_pairs_ps(acc), piece == 0);
            }
        }
    }
}

/// Activation blocks prepared at a time by the GEMV (32768 columns; 16 KiB of stack). A row
/// longer than a piece is read piece by piece across every group, which breaks the weights'
/// single forward stream: with 256 (8192 columns), a 4096x14336 Q4_0 GEMV (an 8B model's FFN
/// down projection) took 1.13 ms against ggml's 0.84.
const PREP_BLOCKS: usize = 1024;
