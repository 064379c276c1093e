//! AVX2 kernels for `q5_0_8x8` (byte layout in `q5_0.rs`).
//!
//! A packed block decodes to eight 32-byte vectors of unsigned 5-bit quants `u` (0..32): the
//! nibble vectors of `q4_0_8x8`'s order, each or-ed with its bit plane shifted into bit 4. The
//! weight is `u - 16`, so a row's integer sum is `Σ u·a - 16·Σ a`: `maddubs(u, a)` multiplies
//! unsigned by signed bytes directly (a pair is at most `2 * 31 * 128 = 7936`, four such sums
//! stay below 32768), and the bias `maddubs(16, a)` depends only on the activations, so it is
//! computed once per activation block and subtracted in `i16` (exact: the true difference is at
//! most `8 * 16 * 128` in magnitude and `i16` adds wrap). The GEMM takes `16 x` each row's quant
//! sum from its activations instead (`Q8_0SumsInterleaved<16>`, prepared once per call).
//! Results equal the scalar kernel up to f32 summation order.

use std::arch::x86_64::*;

use crate::blocks::{BlockQ5_0x8, BlockQ8_0, BlockQ8_0x4Sums};
use crate::cpu::KernelSet;
use crate::kernel_api::Kernels;
use crate::kernels::x86::{target_entries, Avx2};

pub(in crate::kernels::x86) mod imp {
    use super::*;
    use crate::blocks::F16Bits;

    #[inline(always)]
    unsafe fn broadcast8(bytes: &[i8]) -> __m256i {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            assert!(bytes.len() >= 8);
            // SAFETY: callers pass slices of at least 8 bytes; read_unaligned needs no alignment.
            _mm256_set1_epi64x(std::ptr::read_unaligned(bytes.as_ptr() as *const i64))
        }
    }

    #[inline(always)]
    unsafe fn f16x8(h: &[F16Bits; 8]) -> __m256 {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            // SAFETY: 8 halves are 16 bytes.
            _mm256_cvtph_ps(_mm_loadu_si128(h.as_ptr() as *const __m128i))
        }
    }

    /// The block's unsigned quants: `[v][s]`, vector `v`, low (`s = 0`) or high nibbles.
    #[inline(always)]
    unsafe fn decode(w: &BlockQ5_0x8) -> [[__m256i; 2]; 4] {
        // SAFETY: the caller's features.
        unsafe { decode_planes(&w.qs, &w.qh) }
    }

    /// Unsigned 5-bit quants from interleaved nibbles and `q5_0_8x8`'s bit planes (also the
    /// quants of `q5_1_8x8`): `[v][s]`, vector `v`, low (`s = 0`) or high nibbles.
    #[inline(always)]
    pub(in crate::kernels::x86) unsafe fn decode_planes(
        qs: &[u8; 128],
        qh: &[u8; 32],
    ) -> [[__m256i; 2]; 4] {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            let m4 = _mm256_set1_epi8(0x0f);
            let m10 = _mm256_set1_epi8(0x10);
            // SAFETY: `qs` is 128 bytes (vectors 0..4) and `qh` 32 bytes.
            let p = qs.as_ptr() as *const __m256i;
            let x = [
                _mm256_loadu_si256(p),
                _mm256_loadu_si256(p.add(1)),
                _mm256_loadu_si256(p.add(2)),
                _mm256_loadu_si256(p.add(3)),
            ];
            let qh = _mm256_loadu_si256(qh.as_ptr() as *const __m256i);
            // Plane t = 2v + s is moved to bit 4 by a shift of 4 - t (16-bit shifts by at most 4
            // bring in no bits of the neighbouring byte at bit 4 of either byte).
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
            let mut out = [[_mm256_setzero_si256(); 2]; 4];
            for (v, o) in out.iter_mut().enumerate() {
                let lo = _mm256_and_si256(x[v], m4);
                let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(x[v]), m4);
                o[0] = _mm256_or_si256(lo, _mm256_and_si256(planes[2 * v], m10));
                o[1] = _mm256_or_si256(hi, _mm256_and_si256(planes[2 * v + 1], m10));
            }
            out
        }
    }

    /// `maddubs(16, a)` summed over the four 8-byte broadcasts of one activation block.
    #[inline(always)]
    unsafe fn bias(a: &[__m256i; 4]) -> __m256i {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            // SAFETY: register-only intrinsics; the caller guarantees AVX2.
            let c16 = _mm256_set1_epi8(16);
            _mm256_add_epi16(
                _mm256_add_epi16(
                    _mm256_maddubs_epi16(c16, a[0]),
                    _mm256_maddubs_epi16(c16, a[1]),
                ),
                _mm256_add_epi16(
                    _mm256_maddubs_epi16(c16, a[2]),
                    _mm256_maddubs_epi16(c16, a[3]),
                ),
            )
        }
    }

    /// Row sums `Σ (u - 16)·a` of one decoded block against one activation row given as its
    /// four 8-byte broadcasts. Lanes come out in row order 0 1 4 5 2 3 6 7.
    #[inline(always)]
    unsafe fn row_sums(w: &[[__m256i; 2]; 4], a: &[__m256i; 4], bias: __m256i) -> __m256i {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            // SAFETY: register-only intrinsics; the caller guarantees AVX2.
            let ones = _mm256_set1_epi16(1);
            let mut s = [_mm256_setzero_si256(); 2];
            for (h, sh) in s.iter_mut().enumerate() {
                // Vector 2k + h: low nibbles meet activations 8k.., high nibbles 16 + 8k...
                let p = _mm256_add_epi16(
                    _mm256_add_epi16(
                        _mm256_maddubs_epi16(w[h][0], a[0]),
                        _mm256_maddubs_epi16(w[h][1], a[2]),
                    ),
                    _mm256_add_epi16(
                        _mm256_maddubs_epi16(w[2 + h][0], a[1]),
                        _mm256_maddubs_epi16(w[2 + h][1], a[3]),
                    ),
                );
                *sh = _mm256_madd_epi16(_mm256_sub_epi16(p, bias), ones);
            }
            _mm256_hadd_epi32(s[0], s[1])
        }
    }

    /// Lane order produced by `row_sums` (and its own inverse).
    #[inline(always)]
    unsafe fn row_order() -> __m256i {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            // SAFETY: register-only intrinsics; the caller guarantees AVX2.
            _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7)
        }
    }

    /// One block of one row group into `acc` (lanes in `row_sums` order).
    #[inline(always)]
    unsafe fn gemv_block(
        wb: &BlockQ5_0x8,
        av: &[__m256i; 4],
        bias: __m256i,
        da: __m256,
        acc: __m256,
    ) -> __m256 {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            // SAFETY: the caller guarantees AVX2+FMA+F16C; the memory accesses are
            // the bounds-checked helpers and fixed-size array loads called here.
            let order = row_order();
            let sums = row_sums(&decode(wb), av, bias);
            let scale = _mm256_mul_ps(_mm256_permutevar8x32_ps(f16x8(&wb.d), order), da);
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), scale, acc)
        }
    }

    /// GEMV over every row group in `w` (`a.len()` blocks each), two groups at a time so that
    /// the activation broadcasts, bias and scales are prepared once for both.
    #[inline(always)]
    pub(in crate::kernels::x86) unsafe fn gemv_body(
        w: &[BlockQ5_0x8],
        a: &[BlockQ8_0],
        out: &mut [f32],
    ) {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            // SAFETY: the caller guarantees AVX2+FMA+F16C; every load below reads
            // inside a fixed-size array field and every store is length-checked.
            let order = row_order();
            let nb = a.len();
            if nb == 0 {
                out.fill(0.0);
                return;
            }
            let mut groups = w.chunks_exact(nb).zip(out.chunks_exact_mut(8));
            while let Some((w0, o0)) = groups.next() {
                let mut acc0 = _mm256_setzero_ps();
                let second = groups.next();
                let mut acc1 = _mm256_setzero_ps();
                for (i, ab) in a.iter().enumerate() {
                    let av = [
                        broadcast8(&ab.qs[0..8]),
                        broadcast8(&ab.qs[8..16]),
                        broadcast8(&ab.qs[16..24]),
                        broadcast8(&ab.qs[24..32]),
                    ];
                    let bias = bias(&av);
                    let da = _mm256_set1_ps(ab.d.to_f32());
                    crate::kernel_api::prefetch_ahead(&w0[i], 2 * nb);
                    if second.is_some() {
                        crate::kernel_api::prefetch_ahead(&w0[i], 3 * nb);
                    }
                    acc0 = gemv_block(&w0[i], &av, bias, da, acc0);
                    if let Some((w1, _)) = &second {
                        acc1 = gemv_block(&w1[i], &av, bias, da, acc1);
                    }
                }
                // SAFETY: chunks_exact_mut(8) gives 8 floats.
                _mm256_storeu_ps(o0.as_mut_ptr(), _mm256_permutevar8x32_ps(acc0, order));
                if let Some((_, o1)) = second {
                    // SAFETY: as above.
                    _mm256_storeu_ps(o1.as_mut_ptr(), _mm256_permutevar8x32_ps(acc1, order));
                }
            }
        }
    }

    #[inline(always)]
    pub(in crate::kernels::x86) unsafe fn gemm_body(
        w: &[BlockQ5_0x8],
        a: &[BlockQ8_0x4Sums],
        out: &mut [f32],
    ) {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            let order = row_order();
            let mut acc = [_mm256_setzero_ps(); 4];
            for (wb, ab) in w.iter().zip(a) {
                let wq = decode(wb);
                let dw = _mm256_permutevar8x32_ps(f16x8(&wb.d), order);
                for (m, acc_m) in acc.iter_mut().enumerate() {
                    // Row m's bytes 8k..8k+8 sit at 32k + 8m in the interleaved quad.
                    let av = [
                        broadcast8(&ab.qs[8 * m..8 * m + 8]),
                        broadcast8(&ab.qs[32 + 8 * m..40 + 8 * m]),
                        broadcast8(&ab.qs[64 + 8 * m..72 + 8 * m]),
                        broadcast8(&ab.qs[96 + 8 * m..104 + 8 * m]),
                    ];
                    // The bias term `16 x Σ a` comes with the activations.
                    let offset = _mm256_castps_si256(_mm256_broadcast_ss(bytemuck::cast_ref(
                        &ab.offsets[m],
                    )));
                    let sums = _mm256_sub_epi32(row_sums(&wq, &av, _mm256_setzero_si256()), offset);
                    let scale = _mm256_mul_ps(dw, _mm256_broadcast_ss(&ab.d[m]));
                    *acc_m = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), scale, *acc_m);
                }
            }
            assert!(out.len() >= 32);
            for (m, acc_m) in acc.iter().enumerate() {
                // SAFETY: out has at least 32 elements (checked above).
                _mm256_storeu_ps(
                    out.as_mut_ptr().add(8 * m),
                    _mm256_permutevar8x32_ps(*acc_m, order),
                );
            }
        }
    }
}

/// The AVX2 kernels of the layout.
pub(crate) fn kernels(_: Avx2) -> Kernels<BlockQ5_0x8, BlockQ8_0, BlockQ8_0x4Sums> {
    Kernels::pair(KernelSet::Avx2, gemv, gemm)
}

target_entries! { "avx2,fma,f16c";
    fn gemv(w: &[BlockQ5_0x8], a: &[BlockQ8_0], out: &mut [f32]) => imp::gemv_body;
    fn gemm(w: &[BlockQ5_0x8], a: &[BlockQ8_0x4Sums], out: &mut [f32]) => imp::gemm_body;
}
