//! AVX2 kernels for `q4_1_8x8` and `q5_1_8x8` (byte layouts in `layout/q4_1.rs`, `q5_1.rs`).
//!
//! A packed block decodes to eight 32-byte vectors of unsigned quants, in `q4_0_8x8`'s order
//! (Q5_1: with the fifth bits of `q5_0_8x8`'s planes). `maddubs(q, a)` multiplies them with the
//! signed activations directly (a pair is at most `2 * 31 * 128 = 7936`, so four such sums stay
//! below 32768), giving the exact `Σ q·a` per row;
//! each block then adds `d_w·d_a·Σ q·a + m_w·s_a` in f32. Results equal the scalar kernel up to
//! f32 summation order.

use std::arch::x86_64::*;

use crate::blocks::{BlockQ4_1x8, BlockQ5_1x8, BlockQ8_1, BlockQ8_1x4, F16Bits};
use crate::cpu::KernelSet;
use crate::kernel_api::Kernels;
use crate::kernels::x86::{target_entries, Avx2};

/// An 8-row block of unsigned quants with per-row scales and minimums, multiplied with
/// interleaved Q8_1 activations.
pub(crate) trait MinBlockX8: bytemuck::Pod + Send + Sync {
    /// The rows' scales.
    fn d(&self) -> &[F16Bits; 8];
    /// The rows' minimums.
    fn m(&self) -> &[F16Bits; 8];
    /// The unsigned quants: `[v][s]`, vector `v`, low (`s = 0`) or high nibbles' weights.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    unsafe fn quants(&self) -> [[__m256i; 2]; 4];
}

impl MinBlockX8 for BlockQ4_1x8 {
    fn d(&self) -> &[F16Bits; 8] {
        &self.d
    }
    fn m(&self) -> &[F16Bits; 8] {
        &self.m
    }
    #[inline(always)]
    unsafe fn quants(&self) -> [[__m256i; 2]; 4] {
        // SAFETY: the caller's features.
        unsafe { imp::decode(self) }
    }
}

impl MinBlockX8 for BlockQ5_1x8 {
    fn d(&self) -> &[F16Bits; 8] {
        &self.d
    }
    fn m(&self) -> &[F16Bits; 8] {
        &self.m
    }
    #[inline(always)]
    unsafe fn quants(&self) -> [[__m256i; 2]; 4] {
        // SAFETY: the caller's features.
        unsafe { super::q5_0::imp::decode_planes(&self.qs, &self.qh) }
    }
}

pub(in crate::kernels::x86) mod imp {
    use super::*;

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

    /// The block's nibbles: `[v][s]`, vector `v`, low (`s = 0`) or high nibbles.
    #[inline(always)]
    pub(super) unsafe fn decode(w: &BlockQ4_1x8) -> [[__m256i; 2]; 4] {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            let m4 = _mm256_set1_epi8(0x0f);
            // SAFETY: `qs` is 128 bytes (vectors 0..4).
            let p = w.qs.as_ptr() as *const __m256i;
            let mut out = [[_mm256_setzero_si256(); 2]; 4];
            for (v, o) in out.iter_mut().enumerate() {
                let x = _mm256_loadu_si256(p.add(v));
                o[0] = _mm256_and_si256(x, m4);
                o[1] = _mm256_and_si256(_mm256_srli_epi16::<4>(x), m4);
            }
            out
        }
    }

    /// Row sums `Σ q·a` of one decoded block against one activation row given as its
    /// four 8-byte broadcasts. Lanes come out in row order 0 1 4 5 2 3 6 7.
    #[inline(always)]
    unsafe fn row_sums(w: &[[__m256i; 2]; 4], a: &[__m256i; 4]) -> __m256i {
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
                *sh = _mm256_madd_epi16(p, ones);
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
    unsafe fn gemv_block<P: MinBlockX8>(
        wb: &P,
        av: &[__m256i; 4],
        da: __m256,
        sa: __m256,
        acc: __m256,
    ) -> __m256 {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            // SAFETY: the caller guarantees AVX2+FMA+F16C; the memory accesses are
            // the bounds-checked helpers and fixed-size array loads called here.
            let order = row_order();
            let sums = row_sums(&wb.quants(), av);
            let scale = _mm256_mul_ps(_mm256_permutevar8x32_ps(f16x8(wb.d()), order), da);
            let acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), scale, acc);
            let mins = _mm256_permutevar8x32_ps(f16x8(wb.m()), order);
            _mm256_fmadd_ps(mins, sa, acc)
        }
    }

    /// GEMV over every row group in `w` (`a.len()` blocks each), two groups at a time so that
    /// the activation broadcasts and scales are prepared once for both.
    #[inline(always)]
    pub(in crate::kernels::x86) unsafe fn gemv_body<P: MinBlockX8>(
        w: &[P],
        a: &[BlockQ8_1],
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
                    let da = _mm256_set1_ps(ab.d.to_f32());
                    let sa = _mm256_set1_ps(ab.s.to_f32());
                    crate::kernel_api::prefetch_ahead(&w0[i], 2 * nb);
                    if second.is_some() {
                        crate::kernel_api::prefetch_ahead(&w0[i], 3 * nb);
                    }
                    acc0 = gemv_block(&w0[i], &av, da, sa, acc0);
                    if let Some((w1, _)) = &second {
                        acc1 = gemv_block(&w1[i], &av, da, sa, acc1);
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
    pub(in crate::kernels::x86) unsafe fn gemm_body<P: MinBlockX8>(
        w: &[P],
        a: &[BlockQ8_1x4],
        out: &mut [f32],
    ) {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            let order = row_order();
            let mut acc = [_mm256_setzero_ps(); 4];
            for (wb, ab) in w.iter().zip(a) {
                let wq = wb.quants();
                let dw = _mm256_permutevar8x32_ps(f16x8(wb.d()), order);
                // SAFETY: the four halves `ab.d` are 8 bytes.
                let da = _mm_cvtph_ps(_mm_loadl_epi64(ab.d.as_ptr() as *const __m128i));
                let mw = _mm256_permutevar8x32_ps(f16x8(wb.m()), order);
                // SAFETY: the four halves `ab.s` are 8 bytes.
                let sa = _mm_cvtph_ps(_mm_loadl_epi64(ab.s.as_ptr() as *const __m128i));
                let mut da_m = [0.0f32; 4];
                let mut sa_m = [0.0f32; 4];
                // SAFETY: `da_m` and `sa_m` hold 4 floats.
                _mm_storeu_ps(da_m.as_mut_ptr(), da);
                _mm_storeu_ps(sa_m.as_mut_ptr(), sa);
                for (m, acc_m) in acc.iter_mut().enumerate() {
                    // Row m's bytes 8k..8k+8 sit at 32k + 8m in the interleaved quad.
                    let av = [
                        broadcast8(&ab.qs[8 * m..8 * m + 8]),
                        broadcast8(&ab.qs[32 + 8 * m..40 + 8 * m]),
                        broadcast8(&ab.qs[64 + 8 * m..72 + 8 * m]),
                        broadcast8(&ab.qs[96 + 8 * m..104 + 8 * m]),
                    ];
                    let sums = row_sums(&wq, &av);
                    let scale = _mm256_mul_ps(dw, _mm256_set1_ps(da_m[m]));
                    *acc_m = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), scale, *acc_m);
                    *acc_m = _mm256_fmadd_ps(mw, _mm256_set1_ps(sa_m[m]), *acc_m);
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

/// The AVX2 kernels of `q4_1_8x8` (`P = BlockQ4_1x8`) or `q5_1_8x8` (`BlockQ5_1x8`).
pub(crate) fn kernels<P: MinBlockX8>(_: Avx2) -> Kernels<P, BlockQ8_1, BlockQ8_1x4> {
    Kernels::pair(KernelSet::Avx2, gemv::<P>, gemm::<P>)
}

target_entries! { "avx2,fma,f16c";
    fn gemv<P: MinBlockX8>(w: &[P], a: &[BlockQ8_1], out: &mut [f32]) => imp::gemv_body;
    fn gemm<P: MinBlockX8>(w: &[P], a: &[BlockQ8_1x4], out: &mut [f32]) => imp::gemm_body;
}
