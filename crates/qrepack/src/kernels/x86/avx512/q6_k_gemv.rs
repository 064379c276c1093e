//! The GEMV of `q6_K_8x8_x86` with 512-bit vectors. One 64-byte load of `qa`, `qb` or `qc`
//! holds chunk `c` of all 8 rows (row `r` in dword lanes `2r` and `2r + 1`, as in the other 8x8
//! layouts), so one `vpdpbusd` multiplies 4 weights of every row; the layout's four quants per
//! three bytes come back with 9 operations per chunk. The quants' `-32` offset is folded into
//! each product's starting value (`-32` times the sum of the 4 activations it multiplies,
//! worked out once per call), so that a sum of 4 products `(u - 32)·a` fits an i16 and the
//! signed group scale is applied by one `vpdpwssd`.
//!
//! The AVX2 loop nest (`vpdpbusd` with `vpmulld`, and an offset term per block) did not keep
//! up with memory: Zen 4, 4096x4096, one thread, weights rotated: 1.6 ms, where plain Q6_K rows
//! took 0.67 ms and a bare read of the same bytes 0.38 ms.

use std::arch::x86_64::*;

use super::k_scales::row_pairs;
use super::lanes::{fold_pairs_ps, store_piece};
use crate::blocks::{BlockQ6Kx8, BlockQ8K};
use crate::kernels::x86::avx2::k_quants::imp::f16x8;

/// `vpternlogd` truth table of `a ? b : c`, bit by bit.
const SELECT: i32 = 0xca;

/// Activation blocks whose offsets the GEMV prepares at a time (32768 columns, 32 KiB of
/// stack): rows up to that length stream their weights in one forward pass (see the nibble
/// GEMV's `PREP_BLOCKS` for what a shorter piece costs).
const PREP_BLOCKS: usize = 128;

/// Eight activations (bytes `at..at + 8` of `q`) in every qword.
#[inline(always)]
unsafe fn broadcast8(q: &[i8], at: usize) -> __m512i {
    assert!(at + 8 <= q.len());
    // SAFETY: the 8 bytes are in bounds (asserted above); unaligned read.
    unsafe { _mm512_set1_epi64(std::ptr::read_unaligned(q.as_ptr().add(at) as *const i64)) }
}

/// Per activation block: `-32` times the sum of each 4 consecutive activations, in order
/// (dword `j` covers activations `4j .. 4j + 4`).
#[inline(always)]
unsafe fn prepare(a: &[BlockQ8K], prep: &mut [[i32; 64]]) {
    // SAFETY: AVX2 per the caller's contract; the loads read the block's 256 bytes, the stores
    // write one 64-dword slot.
    unsafe {
        let ones = _mm256_set1_epi8(1);
        let ones16 = _mm256_set1_epi16(1);
        for (ab, p) in a.iter().zip(prep.iter_mut()) {
            for v in 0..8 {
                let x = _mm256_loadu_si256(ab.qs.as_ptr().add(32 * v) as *const __m256i);
                let pairs = _mm256_maddubs_epi16(ones, x);
                let fours = _mm256_madd_epi16(pairs, ones16);
                let offset = _mm256_mullo_epi32(fours, _mm256_set1_epi32(-32));
                _mm256_storeu_si256(p.as_mut_ptr().add(8 * v) as *mut __m256i, offset);
            }
        }
    }
}

/// The prepared offsets of activations `e .. e + 8` (`e` a multiple of 8) in every qword: one
/// per half of those 8, the starting values of a `vpdpbusd`.
#[inline(always)]
unsafe fn offsets_of(prep: &[i32; 64], e: usize) -> __m512i {
    assert!(e.is_multiple_of(8) && e / 4 + 2 <= prep.len());
    // SAFETY: dwords e / 4 and e / 4 + 1 are in bounds (asserted above); unaligned read;
    // AVX-512 F per the caller's contract.
    unsafe {
        _mm512_set1_epi64(std::ptr::read_unaligned(
            prep.as_ptr().add(e / 4) as *const i64
        ))
    }
}

/// `vpermw` indices that put word `8j + r` in word `2d` for dword lane `d` (row `r = d / 2`).
const fn scale_index(j: usize) -> [i16; 32] {
    let mut idx = [0i16; 32];
    let mut d = 0;
    while d < 16 {
        idx[2 * d] = (8 * j + d / 2) as i16;
        d += 1;
    }
    idx
}

const SCALE_INDEX: [[i16; 32]; 4] = [
    scale_index(0),
    scale_index(1),
    scale_index(2),
    scale_index(3),
];

/// Group `4i + j`'s scales from `wide` (the scales of groups `4i .. 4i + 4` as i16: word
/// `8j + r` is row `r`'s): row `r`'s in the low word of dword lanes `2r` and `2r + 1`, zero in
/// the high words.
#[inline(always)]
unsafe fn group_scale(wide: __m512i, j: usize) -> __m512i {
    // SAFETY: the index table row is 64 bytes; AVX-512 BW per the caller's contract.
    unsafe {
        let idx = _mm512_loadu_si512(SCALE_INDEX[j].as_ptr() as *const __m512i);
        _mm512_maskz_permutexvar_epi16(0x5555_5555, idx, wide)
    }
}

/// Row `r`'s scales of groups `4i .. 4i + 4` as i16 (word `8j + r` for group `4i + j`).
#[inline(always)]
unsafe fn wide_scales(w: &BlockQ6Kx8, i: usize) -> __m512i {
    assert!(i < 4);
    // SAFETY: 32 bytes at 32i < 128 of the scales; AVX-512 BW per the caller's contract.
    unsafe {
        _mm512_cvtepi8_epi16(_mm256_loadu_si256(
            w.scales.as_ptr().add(32 * i) as *const __m256i
        ))
    }
}

/// Chunk `c` (bytes `64c ..`) of a 512-byte quant array.
#[inline(always)]
unsafe fn chunk(bytes: &[u8; 512], c: usize) -> __m512i {
    assert!(c < 8);
    // SAFETY: 64 bytes at 64c < 512; AVX-512 F per the caller's contract.
    unsafe { _mm512_loadu_si512(bytes.as_ptr().add(64 * c) as *const __m512i) }
}

/// GEMV over every row group in `w` (`a.len()` blocks each), one group after the other.
#[inline(always)]
pub(super) unsafe fn gemv_body(w: &[BlockQ6Kx8], a: &[BlockQ8K], out: &mut [f32]) {
    let nb = a.len();
    if nb == 0 {
        out.fill(0.0);
        return;
    }
    assert!(out.len() >= w.len() / nb * 8);
    let mut prep = [[0i32; 64]; PREP_BLOCKS];
    // SAFETY: AVX-512 F/BW/VL/VNNI and F16C per the caller's contract; block reads are of
    // fixed-size fields (64-byte loads at 64c < 512 of the 512-byte arrays, 32-byte loads at
    // 32i < 128 of the scales), `prep` has a slot per block of the piece, and every load and
    // store of `out` is of an 8-float chunk (asserted above).
    unsafe {
        let m3f = _mm512_set1_epi8(0x3f);
        let m0f = _mm512_set1_epi8(0x0f);
        for (piece, a_piece) in a.chunks(PREP_BLOCKS).enumerate() {
            let first = piece * PREP_BLOCKS;
            prepare(a_piece, &mut prep);
            for (group, o) in w.chunks_exact(nb).zip(out.chunks_exact_mut(8)) {
                let blocks = &group[first..first + a_piece.len()];
                let mut acc = _mm512_setzero_ps();
                for ((wb, ab), p) in blocks.iter().zip(a_piece).zip(&prep) {
                    crate::kernel_api::prefetch_l2(wb, crate::kernel_api::GEMV_PREFETCH_BYTES);
                    let wide = [
                        wide_scales(wb, 0),
                        wide_scales(wb, 1),
                        wide_scales(wb, 2),
                        wide_scales(wb, 3),
                    ];
                    let mut sums = _mm512_setzero_si512();
                    for c in 0..8 {
                        let (xa, xb, xc) = (chunk(&wb.qa, c), chunk(&wb.qb, c), chunk(&wb.qc, c));
                        // Bits 4-5 of q2 and q3 are bits 6-7 of `qa` and `qb`; the 16-bit
                        // shifts pull a neighbour byte's bits into 6-7, which the 0x3f clears.
                        let u = [
                            _mm512_and_si512(xa, m3f),
                            _mm512_and_si512(xb, m3f),
                            _mm512_and_si512(
                                _mm512_ternarylogic_epi32::<SELECT>(
                                    m0f,
                                    xc,
                                    _mm512_srli_epi16::<2>(xa),
                                ),
                                m3f,
                            ),
                            _mm512_and_si512(
                                _mm512_ternarylogic_epi32::<SELECT>(
                                    m0f,
                                    _mm512_srli_epi16::<4>(xc),
                                    _mm512_srli_epi16::<2>(xb),
                                ),
                                m3f,
                            ),
                        ];
                        let (half, part) = (c / 4, c % 4);
                        for (s, us) in u.iter().enumerate() {
                            // Weights 128 half + 32 s + 8 part .. + 8 of each row.
                            let e = 128 * half + 32 * s + 8 * part;
                            let init = offsets_of(p, e);
                            let dot = _mm512_dpbusd_epi32(init, *us, broadcast8(&ab.qs, e));
                            let g = e / 16;
                            sums = _mm512_dpwssd_epi32(sums, dot, group_scale(wide[g / 4], g % 4));
                        }
                    }
                    let d = _mm256_mul_ps(f16x8(&wb.d), _mm256_set1_ps(ab.d));
                    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), row_pairs(d), acc);
                }
                store_piece(o, fold_pairs_ps(acc), piece == 0);
            }
        }
    }
}
