//! The AVX-512 BF16 kernel set: the plain layout's BF16 rows with `vdpbf16ps`, which multiplies
//! 32 bf16 pairs and adds them to 16 `f32` lanes in one instruction, so neither the weights nor
//! the activations are widened first. Every other layout takes the `avx512` kernels.
//!
//! `vdpbf16ps` rounds each of its two additions per lane to `f32` (nearest even) and flushes
//! denormals; the portable kernel sums exact products in `f64`. The difference is ordinary
//! `f32` summation error (the tests bound it by `1e-5 · Σ |w·a|`).

use crate::activation::Bf16Bits;
use crate::cpu::KernelSet;
use crate::kernel_api::{target_entries, Kernels};
use crate::kernels::x86::Avx512Bf16;

mod imp {
    use std::arch::x86_64::*;

    use crate::activation::Bf16Bits;
    use crate::kernel_api::{prefetch_l2, GEMV_PREFETCH_BYTES};

    /// 32 bf16 values as one `vdpbf16ps` operand.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F.
    #[inline(always)]
    unsafe fn load32(h: &[Bf16Bits]) -> __m512bh {
        let h: &[Bf16Bits; 32] = h.try_into().expect("32 bf16 values");
        // SAFETY: 32 bf16 are 64 bytes; `loadu` has no alignment requirement. `__m512bh` is
        // the same 512 bits as `__m512i`, reinterpreted.
        unsafe { std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(h.as_ptr().cast())) }
    }

    /// `w · a[r]` of bf16 rows for `N` activation rows, 64 values per step into two
    /// accumulators per row, the tail of the common length one by one; with one row (a GEMV)
    /// the weights are requested ahead into L2.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F and BF16.
    #[inline(always)]
    pub(super) unsafe fn bf16_rows<const N: usize>(
        w: &[Bf16Bits],
        a: [&[Bf16Bits]; N],
    ) -> [f32; N] {
        // SAFETY: the caller's features; loads go through bounds-checked sub-slices.
        unsafe {
            let n = a.iter().fold(w.len(), |n, r| n.min(r.len()));
            let mut acc = [[_mm512_setzero_ps(); 2]; N];
            // Two independent chains with fixed registers (an index `i % 2` kept them in
            // memory), then a last half step.
            let pairs = n / 64;
            for i in 0..pairs {
                let at = 64 * i;
                if N == 1 {
                    prefetch_l2(&w[at], GEMV_PREFETCH_BYTES);
                    prefetch_l2(&w[at + 32], GEMV_PREFETCH_BYTES);
                }
                let w0 = load32(&w[at..at + 32]);
                let w1 = load32(&w[at + 32..at + 64]);
                for r in 0..N {
                    let x0 = load32(&a[r][at..at + 32]);
                    let x1 = load32(&a[r][at + 32..at + 64]);
                    acc[r][0] = _mm512_dpbf16_ps(acc[r][0], w0, x0);
                    acc[r][1] = _mm512_dpbf16_ps(acc[r][1], w1, x1);
                }
            }
            let mut steps = 2 * pairs;
            if n - 64 * pairs >= 32 {
                let at = 64 * pairs;
                let wv = load32(&w[at..at + 32]);
                for r in 0..N {
                    let x = load32(&a[r][at..at + 32]);
                    acc[r][0] = _mm512_dpbf16_ps(acc[r][0], wv, x);
                }
                steps += 1;
            }
            let mut out = [0.0f32; N];
            for r in 0..N {
                let tail: f32 = (32 * steps..n)
                    .map(|k| w[k].to_f32() * a[r][k].to_f32())
                    .sum();
                out[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r][0], acc[r][1])) + tail;
            }
            out
        }
    }

    /// `w[g] · a[m]` for two bf16 weight rows and eight activation rows: each weight vector
    /// serves eight rows and each activation vector two, so a step loads ten vectors for
    /// sixteen `vdpbf16ps` (the four-row GEMM loads five for four, and waits on L2).
    ///
    /// # Safety
    /// The CPU must support AVX-512 F and BF16.
    #[inline(always)]
    pub(super) unsafe fn bf16_wide(w: [&[Bf16Bits]; 2], a: [&[Bf16Bits]; 8]) -> [[f32; 8]; 2] {
        // SAFETY: the caller's features; loads go through bounds-checked sub-slices.
        unsafe {
            let n = a
                .iter()
                .fold(w[0].len().min(w[1].len()), |n, r| n.min(r.len()));
            let mut acc = [[_mm512_setzero_ps(); 8]; 2];
            let steps = n / 32;
            for i in 0..steps {
                let at = 32 * i;
                let w0 = load32(&w[0][at..at + 32]);
                let w1 = load32(&w[1][at..at + 32]);
                for m in 0..8 {
                    let x = load32(&a[m][at..at + 32]);
                    acc[0][m] = _mm512_dpbf16_ps(acc[0][m], w0, x);
                    acc[1][m] = _mm512_dpbf16_ps(acc[1][m], w1, x);
                }
            }
            let mut out = [[0.0f32; 8]; 2];
            for g in 0..2 {
                for m in 0..8 {
                    let tail: f32 = (32 * steps..n)
                        .map(|k| w[g][k].to_f32() * a[m][k].to_f32())
                        .sum();
                    out[g][m] = _mm512_reduce_add_ps(acc[g][m]) + tail;
                }
            }
            out
        }
    }
}

/// One output per bf16 weight row of `w` (`a.len()` values each).
///
/// # Safety
/// The CPU must support AVX-512 F and BF16.
#[inline(always)]
unsafe fn gemv_body(w: &[Bf16Bits], a: &[Bf16Bits], out: &mut [f32]) {
    for (o, row) in out.iter_mut().zip(w.chunks_exact(a.len().max(1))) {
        // SAFETY: the caller's features.
        *o = unsafe { imp::bf16_rows::<1>(row, [a])[0] };
    }
}

/// One bf16 weight row times the activation rows of `a` (four in a quad), one output each.
///
/// # Safety
/// The CPU must support AVX-512 F and BF16.
#[inline(always)]
unsafe fn gemm_body(w: &[Bf16Bits], a: &[Bf16Bits], out: &mut [f32]) {
    let k = w.len().max(1);
    if out.len() == 4 && a.len() == 4 * k {
        let (r0, rest) = a.split_at(k);
        let (r1, rest) = rest.split_at(k);
        let (r2, r3) = rest.split_at(k);
        // SAFETY: the caller's features.
        let v = unsafe { imp::bf16_rows::<4>(w, [r0, r1, r2, r3]) };
        out.copy_from_slice(&v);
        return;
    }
    for (o, row) in out.iter_mut().zip(a.chunks_exact(k)) {
        // SAFETY: the caller's features.
        *o = unsafe { imp::bf16_rows::<1>(w, [row])[0] };
    }
}

/// Two bf16 weight rows times two quads of activation rows (`out[g][m]`, quad 0's rows then
/// quad 1's).
///
/// # Safety
/// The CPU must support AVX-512 F and BF16.
#[inline(always)]
unsafe fn wide_body(w: [&[Bf16Bits]; 2], a: [&[Bf16Bits]; 2], out: [&mut [f32]; 2]) {
    let k = w[0].len().max(1);
    let rows: [&[Bf16Bits]; 8] = std::array::from_fn(|m| &a[m / 4][(m % 4) * k..(m % 4 + 1) * k]);
    // SAFETY: the caller's features.
    let v = unsafe { imp::bf16_wide(w, rows) };
    for (o, v) in out.into_iter().zip(v) {
        o.copy_from_slice(&v);
    }
}

target_entries! { "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512bf16";
    fn bf16_gemv(w: &[Bf16Bits], a: &[Bf16Bits], out: &mut [f32]) => gemv_body;
    fn bf16_gemm(w: &[Bf16Bits], a: &[Bf16Bits], out: &mut [f32]) => gemm_body;
}

target_entries! { "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512bf16";
    fn bf16_wide_gemm(w: [&[Bf16Bits]; 2], a: [&[Bf16Bits]; 2], out: [&mut [f32]; 2]) => wide_body;
}

/// The plain-layout kernels of bf16 rows with `vdpbf16ps`: GEMV, four-row GEMM and the
/// two-row, two-quad GEMM.
pub(crate) fn bf16_rows(_: Avx512Bf16) -> Kernels<Bf16Bits, Bf16Bits, Bf16Bits> {
    Kernels {
        wide: Some(bf16_wide_gemm),
        ..Kernels::pair(KernelSet::Avx512Bf16, bf16_gemv, bf16_gemm)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::CpuFeatures;
    use crate::kernel_api::SetToken;
    use crate::rng::SplitMix64;
    use crate::vecdot::vec_dot_bf16;

    #[test]
    fn bf16_rows_equal_portable_on_every_length() {
        let Some(token) = Avx512Bf16::new(CpuFeatures::get()) else {
            return;
        };
        let k = bf16_rows(token);
        let mut rng = SplitMix64::new(8);
        for len in [1, 31, 32, 33, 64, 65, 100, 4095, 4096] {
            let x: Vec<Bf16Bits> = (0..3 * len)
                .map(|_| Bf16Bits::from_f32(rng.uniform_pm1()))
                .collect();
            let y: Vec<Bf16Bits> = (0..8 * len)
                .map(|_| Bf16Bits::from_f32(rng.uniform_pm1()))
                .collect();
            let mag = |wr: &[Bf16Bits], ar: &[Bf16Bits]| -> f64 {
                wr.iter()
                    .zip(ar)
                    .map(|(p, q)| (p.to_f32() * q.to_f32()).abs() as f64)
                    .sum()
            };
            let mut out3 = [f32::NAN; 3];
            (k.gemv)(&x, &y[..len], &mut out3);
            for (r, &o) in out3.iter().enumerate() {
                let wr = &x[r * len..(r + 1) * len];
                let want = vec_dot_bf16(wr, &y[..len]);
                let tol = 1e-5 * mag(wr, &y[..len]);
                assert!(
                    (o - want).abs() as f64 <= tol,
                    "gemv len={len} row {r}: {o} vs {want}"
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
                let wr = &x[g * len..(g + 1) * len];
                for (m, &o) in outs.iter().enumerate() {
                    let ar = &y[m * len..(m + 1) * len];
                    let want = vec_dot_bf16(wr, ar);
                    let tol = 1e-5 * mag(wr, ar);
                    assert!(
                        (o - want).abs() as f64 <= tol,
                        "wide len={len} row {g} act {m}: {o} vs {want}"
                    );
                }
            }
            let mut out4 = [f32::NAN; 4];
            (k.gemm)(&x[..len], &y[..4 * len], &mut out4);
            for (m, &o) in out4.iter().enumerate() {
                let ar = &y[m * len..(m + 1) * len];
                let want = vec_dot_bf16(&x[..len], ar);
                let tol = 1e-5 * mag(&x[..len], ar);
                assert!(
                    (o - want).abs() as f64 <= tol,
                    "gemm len={len} act {m}: {o} vs {want}"
                );
            }
        }
    }
}
