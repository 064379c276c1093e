//! AVX2 kernels for `q6_K_8x8_x86` (byte layout in `q6_k.rs`).
//!
//! Vector `2c + h` of `qa`, `qb`, `qc` (chunk `c = 4H + k`, rows `4h..4h + 4`) yields the
//! unsigned quants of weights `128H + 32s + 8k ..+8` for `s` = 0..4 with 11 vector operations.
//! Each meets the 8-byte broadcast of the matching activations in `maddubs(u, a)` (unsigned quant
//! times signed activation: a pair is at most `2 * 63 * 128 = 16128`, so the two chunks `k` of a
//! 16-weight group add up below 32768 in `i16`). The group's signed scale then multiplies the
//! `i16` sums in `madd` (exact in `i32`). The `-32` offset of the quants is applied once per
//! super-block as `32·Σ_g sc_g·bsum_g` with the activation's group sums (exact: Q8_K's `bsums`
//! are the sums of its quants). Results equal the scalar kernel up to f32 summation order.

use std::arch::x86_64::*;

use crate::blocks::{BlockQ6Kx8, BlockQ8K, BlockQ8Kx4};
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
    unsafe fn load_vec(bytes: &[u8; 512], v: usize) -> __m256i {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            assert!(v < 16);
            // SAFETY: v < 16, so the 32 bytes at 32v lie inside the 512-byte array.
            _mm256_loadu_si256(bytes.as_ptr().add(32 * v) as *const __m256i)
        }
    }

    #[inline(always)]
    unsafe fn load8(bytes: &[i8]) -> __m128i {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            assert!(bytes.len() >= 8);
            // SAFETY: callers pass slices of at least 8 bytes.
            _mm_loadl_epi64(bytes.as_ptr() as *const __m128i)
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

    /// The scales of group `g` for rows `4h..4h + 4` as `i16`, each row's in its four lanes.
    #[inline(always)]
    unsafe fn group_scale(scales: &[i8; 128], g: usize, h: usize) -> __m256i {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            // SAFETY: the caller guarantees AVX2+FMA+F16C; the memory accesses are
            // the bounds-checked helpers and fixed-size array loads called here.
            let pick = if h == 0 {
                _mm_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3)
            } else {
                _mm_setr_epi8(4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7)
            };
            _mm256_cvtepi8_epi16(_mm_shuffle_epi8(load8(&scales[8 * g..8 * g + 8]), pick))
        }
    }

    /// The scales of group `g` for rows `4h..4h + 4` as `i32`, each row's in its two lanes.
    #[inline(always)]
    unsafe fn group_scale32(scales: &[i8; 128], g: usize, h: usize) -> __m256i {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            let pick = if h == 0 {
                _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 0, 0, 0, 0, 0, 0, 0, 0)
            } else {
                _mm_setr_epi8(4, 4, 5, 5, 6, 6, 7, 7, 0, 0, 0, 0, 0, 0, 0, 0)
            };
            _mm256_cvtepi8_epi32(_mm_shuffle_epi8(load8(&scales[8 * g..8 * g + 8]), pick))
        }
    }

    /// Scale pairs for the offset term: `[p]` has lanes `(sc[2p][r], sc[2p + 1][r])`, row `r`.
    #[inline(always)]
    unsafe fn scale_pairs(scales: &[i8; 128]) -> [__m256i; 8] {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            // SAFETY: the caller guarantees AVX2+FMA+F16C; the memory accesses are
            // the bounds-checked helpers and fixed-size array loads called here.
            let mut out = [_mm256_setzero_si256(); 8];
            for (p, o) in out.iter_mut().enumerate() {
                let lo = load8(&scales[16 * p..16 * p + 8]);
                let hi = load8(&scales[16 * p + 8..16 * p + 16]);
                *o = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(lo, hi));
            }
            out
        }
    }

    /// `32·Σ_g sc_g·bsum_g` for the 8 rows in natural order; `bsum(g)` is at `bsums[idx[g]]`.
    #[inline(always)]
    unsafe fn offset_term(pairs: &[__m256i; 8], bsums: &[i16], idx: &[usize; 16]) -> __m256i {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            // SAFETY: register-only intrinsics; the caller guarantees AVX2.
            let mut acc = _mm256_setzero_si256();
            for (p, sp) in pairs.iter().enumerate() {
                let lo = bsums[idx[2 * p]] as u16 as i32;
                let hi = bsums[idx[2 * p + 1]] as i32;
                acc = _mm256_add_epi32(
                    acc,
                    _mm256_madd_epi16(*sp, _mm256_set1_epi32(lo | (hi << 16))),
                );
            }
            _mm256_slli_epi32::<5>(acc)
        }
    }

    /// `Σ_g sc_g Σ u·a` of one super-block for `M` activation rows: `s[m][h]` gets rows
    /// `4h..4h + 4` (two `i32` lanes per row). Activations `e..e + 8` of row `m` start at
    /// `(e / 8) * stride + 8m` in `qs` (stride 8 for one row, 32 for a quad). No closures: they
    /// would not inherit the caller's target features. With `VNNI` (callers with AVX-512 VNNI
    /// and VL), `vpdpbusd` sums the byte products into i32 and the scale multiplies them once
    /// (`vpmulld`), instead of two `maddubs`, an add and a `madd`: the same integers.
    #[inline(always)]
    unsafe fn block_sums<const M: usize, const VNNI: bool>(
        w: &BlockQ6Kx8,
        qs: &[i8],
        stride: usize,
        s: &mut [[__m256i; 2]; M],
    ) {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            // SAFETY: the caller guarantees AVX2+FMA+F16C; the memory accesses are
            // the bounds-checked helpers and fixed-size array loads called here.
            let m3f = _mm256_set1_epi8(0x3f);
            let m30 = _mm256_set1_epi8(0x30);
            let m0f = _mm256_set1_epi8(0x0f);
            for h in 0..2 {
                for big in 0..2 {
                    for mm in 0..2 {
                        // Chunks k = 2mm, 2mm + 1 form the 16-weight group 8big + 2s + mm.
                        let mut a = [_mm256_setzero_si256(); 2];
                        let mut b = [_mm256_setzero_si256(); 2];
                        let mut c = [_mm256_setzero_si256(); 2];
                        for kk in 0..2 {
                            let v = 2 * (4 * big + 2 * mm + kk) + h;
                            a[kk] = load_vec(&w.qa, v);
                            b[kk] = load_vec(&w.qb, v);
                            c[kk] = load_vec(&w.qc, v);
                        }
                        for sq in 0..4 {
                            let mut u = [_mm256_setzero_si256(); 2];
                            for kk in 0..2 {
                                u[kk] = match sq {
                                    0 => _mm256_and_si256(a[kk], m3f),
                                    1 => _mm256_and_si256(b[kk], m3f),
                                    2 => _mm256_or_si256(
                                        _mm256_and_si256(c[kk], m0f),
                                        _mm256_and_si256(_mm256_srli_epi16::<2>(a[kk]), m30),
                                    ),
                                    _ => _mm256_or_si256(
                                        _mm256_and_si256(_mm256_srli_epi16::<4>(c[kk]), m0f),
                                        _mm256_and_si256(_mm256_srli_epi16::<2>(b[kk]), m30),
                                    ),
                                };
                            }
                            let g = 8 * big + 2 * sq + mm;
                            let scv = if VNNI {
                                group_scale32(&w.scales, g, h)
                            } else {
                                group_scale(&w.scales, g, h)
                            };
                            let e = 128 * big + 32 * sq + 16 * mm;
                            for (m, sm) in s.iter_mut().enumerate() {
                                let p0 = (e / 8) * stride + 8 * m;
                                let p1 = (e / 8 + 1) * stride + 8 * m;
                                let a0 = broadcast8(&qs[p0..p0 + 8]);
                                let a1 = broadcast8(&qs[p1..p1 + 8]);
                                let scaled = if VNNI {
                                    let d = _mm256_dpbusd_epi32(_mm256_setzero_si256(), u[0], a0);
                                    _mm256_mullo_epi32(_mm256_dpbusd_epi32(d, u[1], a1), scv)
                                } else {
                                    let p = _mm256_add_epi16(
                                        _mm256_maddubs_epi16(u[0], a0),
                                        _mm256_maddubs_epi16(u[1], a1),
                                    );
                                    _mm256_madd_epi16(p, scv)
                                };
                                sm[h] = _mm256_add_epi32(sm[h], scaled);
                            }
                        }
                    }
                }
            }
        }
    }

    /// Row sums in natural row order from the two half accumulators.
    #[inline(always)]
    unsafe fn row_sums(s: &[__m256i; 2]) -> __m256i {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            // SAFETY: register-only intrinsics; the caller guarantees AVX2.
            _mm256_permutevar8x32_epi32(
                _mm256_hadd_epi32(s[0], s[1]),
                _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7),
            )
        }
    }

    const ROW_BSUMS: [usize; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];

    /// Where the bsum of group `g` of row `m` of a quad sits: `(g / 4) * 16 + 4m + g % 4`.
    #[inline(always)]
    fn quad_bsums(m: usize) -> [usize; 16] {
        let mut idx = [0usize; 16];
        for (g, i) in idx.iter_mut().enumerate() {
            *i = (g / 4) * 16 + 4 * m + g % 4;
        }
        idx
    }

    /// GEMV over every row group in `w` (`a.len()` blocks each).
    #[inline(always)]
    pub(in crate::kernels::x86) unsafe fn gemv_body(
        w: &[BlockQ6Kx8],
        a: &[BlockQ8K],
        out: &mut [f32],
    ) {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            // SAFETY: the caller guarantees AVX2+FMA+F16C; every load below reads
            // inside a fixed-size array field and every store is length-checked.
            let nb = a.len();
            if nb == 0 {
                out.fill(0.0);
                return;
            }
            let groups = w.chunks_exact(nb).zip(out.chunks_exact_mut(8));
            for (group, o) in groups {
                let mut acc = _mm256_setzero_ps();
                for (wb, ab) in group.iter().zip(a) {
                    crate::kernel_api::prefetch_l2(wb, crate::kernel_api::GEMV_PREFETCH_BYTES);
                    let mut s = [[_mm256_setzero_si256(); 2]; 1];
                    block_sums::<1, false>(wb, &ab.qs, 8, &mut s);
                    let off = offset_term(&scale_pairs(&wb.scales), &ab.bsums, &ROW_BSUMS);
                    let isum = _mm256_sub_epi32(row_sums(&s[0]), off);
                    let d = _mm256_mul_ps(f16x8(&wb.d), _mm256_set1_ps(ab.d));
                    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), d, acc);
                }
                // SAFETY: chunks_exact_mut(8) gives 8 floats.
                _mm256_storeu_ps(o.as_mut_ptr(), acc);
            }
        }
    }

    #[inline(always)]
    pub(in crate::kernels::x86) unsafe fn gemm_body(
        w: &[BlockQ6Kx8],
        a: &[BlockQ8Kx4],
        out: &mut [f32],
    ) {
        // SAFETY: the enclosing unsafe fn's contract is the callee's.
        unsafe { gemm_body_with::<false>(w, a, out) }
    }

    /// [`gemm_body`] with `vpdpbusd`: for callers with AVX-512 VNNI and VL.
    #[inline(always)]
    pub(in crate::kernels::x86) unsafe fn gemm_body_vnni(
        w: &[BlockQ6Kx8],
        a: &[BlockQ8Kx4],
        out: &mut [f32],
    ) {
        // SAFETY: the enclosing unsafe fn's contract is the callee's.
        unsafe { gemm_body_with::<true>(w, a, out) }
    }

    #[inline(always)]
    unsafe fn gemm_body_with<const VNNI: bool>(
        w: &[BlockQ6Kx8],
        a: &[BlockQ8Kx4],
        out: &mut [f32],
    ) {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            // SAFETY: the caller guarantees AVX2+FMA+F16C; every load below reads
            // inside a fixed-size array field and every store is length-checked.
            let mut acc = [_mm256_setzero_ps(); 4];
            for (wb, ab) in w.iter().zip(a) {
                let mut s = [[_mm256_setzero_si256(); 2]; 4];
                block_sums::<4, VNNI>(wb, &ab.qs, 32, &mut s);
                let pairs = scale_pairs(&wb.scales);
                let dw = f16x8(&wb.d);
                for (m, acc_m) in acc.iter_mut().enumerate() {
                    let off = offset_term(&pairs, &ab.bsums, &quad_bsums(m));
                    let isum = _mm256_sub_epi32(row_sums(&s[m]), off);
                    let d = _mm256_mul_ps(dw, _mm256_set1_ps(ab.d[m]));
                    *acc_m = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), d, *acc_m);
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

/// The AVX2 kernels of the layout.
pub(crate) fn kernels(_: Avx2) -> Kernels<BlockQ6Kx8, BlockQ8K, BlockQ8Kx4> {
    Kernels::pair(KernelSet::Avx2, gemv, gemm)
}

target_entries! { "avx2,fma,f16c";
    fn gemv(w: &[BlockQ6Kx8], a: &[BlockQ8K], out: &mut [f32]) => imp::gemv_body;
    fn gemm(w: &[BlockQ6Kx8], a: &[BlockQ8Kx4], out: &mut [f32]) => imp::gemm_body;
}
