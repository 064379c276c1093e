//! F16 rows of the plain layout with 512-bit vectors: each group of 16 halves is widened once
//! (`vcvtph2ps`, F16C's conversion at 512 bits) and multiplied in `f32`.
//!
//! The GEMV streams the weights with four independent FMA chains and asks for them ahead into
//! L2, like the other 512-bit GEMVs. The wide GEMM takes two weight rows by eight activation
//! rows: each widened weight vector serves eight rows and each widened activation two, and the
//! 16 accumulators, two weights and one activation stay within the 32 `zmm` registers.
//!
//! Products and sums are in `f32` (as ggml's own F16 dot product); the portable kernel sums in
//! `f64`, so the difference is ordinary `f32` summation error.

use crate::blocks::F16Bits;
use crate::cpu::KernelSet;
use crate::kernel_api::{target_entries, Kernels};
use crate::kernels::x86::Avx512;

mod imp {
    use std::arch::x86_64::*;

    use crate::blocks::F16Bits;
    use crate::kernel_api::{prefetch_l2, GEMV_PREFETCH_BYTES};

    /// Sixteen halves starting at `at`, widened to `f32`.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F.
    #[inline(always)]
    unsafe fn widen16(h: &[F16Bits], at: usize) -> __m512 {
        let h: &[F16Bits; 16] = h[at..at + 16].try_into().expect("16 halves");
        // SAFETY: 16 halves are 32 bytes, read through a bounds-checked reference; `loadu`
        // has no alignment requirement.
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(h.as_ptr().cast())) }
    }

    /// The exact-order tail of a dot product from `from` to `n`.
    fn tail(w: &[F16Bits], a: &[F16Bits], from: usize, n: usize) -> f32 {
        (from..n).map(|k| w[k].to_f32() * a[k].to_f32()).sum()
    }

    /// `w · a` of one weight row and one activation row: 64 values per step in four chains,
    /// then 16 at a time, then the rest one by one.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F.
    #[inline(always)]
    pub(super) unsafe fn row_dot(w: &[F16Bits], a: &[F16Bits]) -> f32 {
        // SAFETY: the caller's features; every load is bounds-checked by `widen16`.
        unsafe {
            let n = w.len().min(a.len());
            let mut acc = [_mm512_setzero_ps(); 4];
            let quads = n / 64;
            for i in 0..quads {
                let at = 64 * i;
                // 128 bytes of weights: two cache lines ahead.
                prefetch_l2(&w[at], GEMV_PREFETCH_BYTES);
                prefetch_l2(&w[at + 32], GEMV_PREFETCH_BYTES);
                for (c, acc) in acc.iter_mut().enumerate() {
                    let off = at + 16 * c;
                    *acc = _mm512_fmadd_ps(widen16(w, off), widen16(a, off), *acc);
                }
            }
            let mut done = 64 * quads;
            while done + 16 <= n {
                acc[0] = _mm512_fmadd_ps(widen16(w, done), widen16(a, done), acc[0]);
                done += 16;
            }
            let sum = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
            _mm512_reduce_add_ps(sum) + tail(w, a, done, n)
        }
    }

    /// `w[g] · a[r]` for `G` weight rows and `N` activation rows, one accumulator each.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F.
    #[inline(always)]
    pub(super) unsafe fn block<const G: usize, const N: usize>(
        w: [&[F16Bits]; G],
        a: [&[F16Bits]; N],
    ) -> [[f32; N]; G] {
        // SAFETY: the caller's features; every load is bounds-checked by `widen16`.
        unsafe {
            let n = a.iter().chain(&w).fold(usize::MAX, |n, r| n.min(r.len()));
            let mut acc = [[_mm512_setzero_ps(); N]; G];
            let steps = n / 16;
            for i in 0..steps {
                let at = 16 * i;
                // A loop, not `map`: a closure does not inherit the target features, and its
                // conversions would become calls.
                let mut wv = [_mm512_setzero_ps(); G];
                for g in 0..G {
                    wv[g] = widen16(w[g], at);
                }
                for r in 0..N {
                    let x = widen16(a[r], at);
                    for g in 0..G {
                        acc[g][r] = _mm512_fmadd_ps(wv[g], x, acc[g][r]);
                    }
                }
            }
            let mut out = [[0.0f32; N]; G];
            for g in 0..G {
                for r in 0..N {
                    out[g][r] = _mm512_reduce_add_ps(acc[g][r]) + tail(w[g], a[r], 16 * steps, n);
                }
            }
            out
        }
    }
}

/// One output per weight row of `w` (`a.len()` values each).
///
/// # Safety
/// The CPU must support AVX-512 F and F16C.
#[inline(always)]
unsafe fn gemv_body(w: &[F16Bits], a: &[F16Bits], out: &mut [f32]) {
    for (o, row) in out.iter_mut().zip(w.chunks_exact(a.len().max(1))) {
        // SAFETY: the caller's features.
        *o = unsafe { imp::row_dot(row, a) };
    }
}

/// One weight row times the activation rows of `a` (four in a quad), one output each.
///
/// # Safety
/// The CPU must support AVX-512 F and F16C.
#[inline(always)]
unsafe fn gemm_body(w: &[F16Bits], a: &[F16Bits], out: &mut [f32]) {
    let k = w.len().max(1);
    if out.len() == 4 && a.len() == 4 * k {
        let rows: [&[F16Bits]; 4] = std::array::from_fn(|m| &a[m * k..(m + 1) * k]);
        // SAFETY: the caller's features.
        let v = unsafe { imp::block::<1, 4>([w], rows) };
        out.copy_from_slice(&v[0]);
        return;
    }
    for (o, row) in out.iter_mut().zip(a.chunks_exact(k)) {
        // SAFETY: the caller's features.
        *o = unsafe { imp::row_dot(w, row) };
    }
}

/// Two weight rows times two quads of activation rows (`out[g][m]`, quad 0's rows then
/// quad 1's), all eight activation rows in one pass.
///
/// # Safety
/// The CPU must support AVX-512 F and F16C.
#[inline(always)]
unsafe fn wide_body(w: [&[F16Bits]; 2], a: [&[F16Bits]; 2], out: [&mut [f32]; 2]) {
    let k = w[0].len().max(1);
    let rows: [&[F16Bits]; 8] = std::array::from_fn(|m| &a[m / 4][(m % 4) * k..(m % 4 + 1) * k]);
    // SAFETY: the caller's features.
    let v = unsafe { imp::block::<2, 8>(w, rows) };
    for (o, v) in out.into_iter().zip(v) {
        o.copy_from_slice(&v);
    }
}

target_entries! { "avx2,fma,f16c,avx512f,avx512bw,avx512vl";
    fn f16_gemv(w: &[F16Bits], a: &[F16Bits], out: &mut [f32]) => gemv_body;
    fn f16_gemm(w: &[F16Bits], a: &[F16Bits], out: &mut [f32]) => gemm_body;
}

target_entries! { "avx2,fma,f16c,avx512f,avx512bw,avx512vl";
    fn f16_wide_gemm(w: [&[F16Bits]; 2], a: [&[F16Bits]; 2], out: [&mut [f32]; 2]) => wide_body;
}

/// The plain-layout kernels of f16 rows with 512-bit vectors: GEMV, four-row GEMM and the
/// two-row, two-quad GEMM.
pub(crate) fn f16_rows(_: Avx512) -> Kernels<F16Bits, F16Bits, F16Bits> {
    Kernels {
        wide: Some(f16_wide_gemm),
        ..Kernels::pair(KernelSet::Avx512, f16_gemv, f16_gemm)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::CpuFeatures;
    use crate::kernel_api::SetToken;
    use crate::rng::SplitMix64;

    /// `Σ w·a` in f64 from the same halves, and `Σ |w·a|` to scale the tolerance.
    fn reference(w: &[F16Bits], a: &[F16Bits]) -> (f64, f64) {
        w.iter().zip(a).fold((0.0, 0.0), |(s, m), (p, q)| {
            let x = p.to_f32() as f64 * q.to_f32() as f64;
            (s + x, m + x.abs())
        })
    }

    fn check(what: &str, got: f32, w: &[F16Bits], a: &[F16Bits]) {
        let (want, mag) = reference(w, a);
        assert!(
            (got as f64 - want).abs() <= 1e-5 * mag + 1e-30,
            "{what}: {got} vs {want}"
        );
    }

    #[test]
    fn f16_rows_equal_the_f64_reference_on_every_length() {
        let Some(token) = Avx512::new(CpuFeatures::get()) else {
            return;
        };
        let k = f16_rows(token);
        let mut rng = SplitMix64::new(16);
        for len in [1, 15, 16, 17, 63, 64, 65, 100, 130, 4095, 4096] {
            let x: Vec<F16Bits> = (0..3 * len)
                .map(|_| F16Bits::from_f32(rng.uniform_pm1()))
                .collect();
            let y: Vec<F16Bits> = (0..8 * len)
                .map(|_| F16Bits::from_f32(rng.uniform_pm1()))
                .collect();
            let mut out3 = [f32::NAN; 3];
            (k.gemv)(&x, &y[..len], &mut out3);
            for (r, &o) in out3.iter().enumerate() {
                check(
                    &format!("gemv len={len} row {r}"),
                    o,
                    &x[r * len..(r + 1) * len],
                    &y[..len],
                );
            }
            let mut out4 = [f32::NAN; 4];
            (k.gemm)(&x[..len], &y[..4 * len], &mut out4);
            for (m, &o) in out4.iter().enumerate() {
                check(
                    &format!("gemm len={len} act {m}"),
                    o,
                    &x[..len],
                    &y[m * len..(m + 1) * len],
                );
            }
            // fewer than four rows: one at a time
            let mut out2 = [f32::NAN; 2];
            (k.gemm)(&x[..len], &y[..2 * len], &mut out2);
            for (m, &o) in out2.iter().enumerate() {
                check(
                    &format!("gemm2 len={len} act {m}"),
                    o,
                    &x[..len],
                    &y[m * len..(m + 1) * len],
                );
            }
            let mut wide = [[f32::NAN; 8]; 2];
            let [w0, w1] = &mut wide;
            (k.wide.expect("a wide GEMM"))(
                [&x[..len], &x[len..2 * len]],
                [&y[..4 * len], &y[4 * len..]],
                [&mut w0[..], &mut w1[..]],
            );
            for (g, outs) in wide.iter().enumerate() {
                for (m, &o) in outs.iter().enumerate() {
                    check(
                        &format!("wide len={len} row {g} act {m}"),
                        o,
                        &x[g * len..(g + 1) * len],
                        &y[m * len..(m + 1) * len],
                    );
                }
            }
        }
    }
}
