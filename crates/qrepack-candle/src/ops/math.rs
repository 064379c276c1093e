//! Vectorizable building blocks of the decoder's kernels: dot products and an
//! exponential that the compiler can keep in vector registers.
//!
//! Everything here is `#[inline(always)]` so that it takes the target features of the
//! multiversioned kernel it is inlined into (AVX-512, AVX2 + FMA, NEON): the loops are written
//! with independent lanes, which lets the compiler use full-width fused multiply-adds without
//! reassociating a single sum.

/// Lanes of the accumulators: 16 f32, one AVX-512 register, two AVX2 or four NEON registers.
const LANES: usize = 16;

/// `sum(a[i] * b[i])` over the common length.
#[inline(always)]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f32; LANES];
    let (ac, ar) = a.split_at(n - n % LANES);
    let (bc, br) = b.split_at(n - n % LANES);
    for (x, y) in ac.chunks_exact(LANES).zip(bc.chunks_exact(LANES)) {
        for l in 0..LANES {
            acc[l] = x[l].mul_add(y[l], acc[l]);
        }
    }
    let mut tail = 0.0f32;
    for (x, y) in ar.iter().zip(br) {
        tail = x.mul_add(*y, tail);
    }
    reduce(&acc) + tail
}

/// The sum of the lanes, pairwise (the same order on every target).
#[inline(always)]
fn reduce(acc: &[f32; LANES]) -> f32 {
    let mut v = *acc;
    let mut width = LANES / 2;
    while width > 0 {
        for l in 0..width {
            v[l] += v[l + width];
        }
        width /= 2;
    }
    v[0]
}

/// `e^x` to within 2 ulp-ish (relative error below 2e-7) for finite `x`; 0 below -87.3 (where
/// f32 underflows to subnormals), `+inf` above 88.7, and NaN for NaN.
///
/// Branch-free, so a loop of it vectorizes: `x = n ln 2 + r` with `|r| <= ln 2 / 2`, `e^r` from
/// a degree-6 polynomial, and `2^n` put into the exponent bits.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split in two so that n * LN2_HI is exact for |n| < 2^9
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    let clamped = x.clamp(-87.336_54, 88.722_83);
    // round to nearest by adding and removing 1.5 * 2^23: no rounding instruction needed
    const ROUND: f32 = 12_582_912.0;
    let shifted = clamped * LOG2E + ROUND;
    let n = shifted - ROUND;
    let r = (-n).mul_add(LN2_LO, (-n).mul_add(LN2_HI, clamped));
    // Taylor coefficients 1/k! (k = 2..6): enough for |r| <= 0.347 at f32 precision
    let p = r.mul_add(1.0 / 720.0, 1.0 / 120.0);
    let p = r.mul_add(p, 1.0 / 24.0);
    let p = r.mul_add(p, 1.0 / 6.0);
    let p = r.mul_add(p, 0.5);
    let p = r.mul_add(p, 1.0);
    let er = r.mul_add(p, 1.0);
    // 2^n as two factors, since 2^128 (reached just below the overflow) is not an f32; n as
    // an integer from the bits of `n + ROUND` (a float-to-int conversion, saturating in Rust,
    // would keep the loop from vectorizing)
    let n = shifted.to_bits() as i32 - ROUND.to_bits() as i32;
    let half = n >> 1;
    let pow2 = |k: i32| f32::from_bits(((k + 127) as u32) << 23);
    let y = er * pow2(half) * pow2(n - half);
    // below the clamp the true value is (sub)normal or 0: 0 is within the tolerance of
    // softmax and SiLU; above it the result is +inf as for `f32::exp`
    let y = if x < -87.336_54 { 0.0 } else { y };
    let y = if x > 88.722_83 { f32::INFINITY } else { y };
    if x.is_nan() {
        x
    } else {
        y
    }
}

/// `x * sigmoid(x)`, with [`exp`].
#[inline(always)]
pub(crate) fn silu(x: f32) -> f32 {
    x / (1.0 + exp(-x))
}

/// 512-bit forms of the functions above, for the x86-64 kernels written with intrinsics.
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use std::arch::x86_64::*;

    /// `e^x` per lane, the algorithm of [`super::exp`] (relative error below 2e-7), with
    /// `2^n` applied by `vscalefps`; 0 below -87.3 (and for `-inf`), `+inf` above 88.7.
    #[target_feature(enable = "avx512f")]
    #[inline]
    pub(crate) fn exp16(x: __m512) -> __m512 {
        let [y] = exp16_many([x]);
        y
    }

    /// [`exp16`] of `N` vectors, each step taken for all of them before the next: one
    /// vector's exponential is a chain of some 20 dependent operations, and written one
    /// vector after another the chains fill the scheduler before a second one can start.
    #[target_feature(enable = "avx512f")]
    #[inline]
    pub(crate) fn exp16_many<const N: usize>(x: [__m512; N]) -> [__m512; N] {
        const LN2_HI: f32 = 0.693_145_75;
        const LN2_LO: f32 = 1.428_606_8e-6;
        let (mut n, mut r) = (x, x);
        for i in 0..N {
            let clamped = _mm512_min_ps(
                _mm512_max_ps(x[i], _mm512_set1_ps(-87.336_54)),
                _mm512_set1_ps(88.722_83),
            );
            n[i] = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                _mm512_mul_ps(clamped, _mm512_set1_ps(std::f32::consts::LOG2_E)),
            );
            r[i] = _mm512_fnmadd_ps(n[i], _mm512_set1_ps(LN2_HI), clamped);
            r[i] = _mm512_fnmadd_ps(n[i], _mm512_set1_ps(LN2_LO), r[i]);
        }
        let mut p = [_mm512_set1_ps(1.0 / 720.0); N];
        for c in [1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
            for i in 0..N {
                p[i] = _mm512_fmadd_ps(r[i], p[i], _mm512_set1_ps(c));
            }
        }
        let mut y = p;
        for i in 0..N {
            let scaled = _mm512_scalef_ps(p[i], n[i]);
            let low = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x[i], _mm512_set1_ps(-87.336_54));
            let scaled = _mm512_mask_blend_ps(low, scaled, _mm512_setzero_ps());
            // above the clamp: +inf, as f32::exp
            let high = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(x[i], _mm512_set1_ps(88.722_83));
            y[i] = _mm512_mask_blend_ps(high, scaled, _mm512_set1_ps(f32::INFINITY));
        }
        y
    }

    /// [`exp16`] on 8 lanes with AVX2 + FMA: `2^n` (`|n| <= 128`) applied as two powers of
    /// two built in the exponent bits, each in the normal range. The kernels take
    /// [`exp8_many`]; this one vector is the tests' reference.
    #[cfg(test)]
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    pub(crate) fn exp8(x: __m256) -> __m256 {
        let [y] = exp8_many([x]);
        y
    }

    /// `exp8` of `N` vectors, step by step across them (see [`exp16_many`]). SiLU over a
    /// 135M model's prompt, one Zen 3 thread: 0.93 -> 2.1 values/ns with four vectors.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    pub(crate) fn exp8_many<const N: usize>(x: [__m256; N]) -> [__m256; N] {
        let mut clamped = x;
        for c in &mut clamped {
            *c = _mm256_min_ps(
                _mm256_max_ps(*c, _mm256_set1_ps(-87.336_54)),
                _mm256_set1_ps(88.722_83),
            );
        }
        let (n, p) = exponent_and_mantissa_many(clamped);
        let mut y = p;
        for i in 0..N {
            // 2^n = 2^h 2^(n - h) with h = n / 2 rounded down: both in -63..=64
            let h = _mm256_srai_epi32::<1>(n[i]);
            let scaled = _mm256_mul_ps(
                _mm256_mul_ps(p[i], power_of_two(h)),
                power_of_two(_mm256_sub_epi32(n[i], h)),
            );
            let low = _mm256_cmp_ps::<_CMP_LT_OQ>(x[i], _mm256_set1_ps(-87.336_54));
            let scaled = _mm256_blendv_ps(scaled, _mm256_setzero_ps(), low);
            // above the clamp: +inf, as f32::exp
            let high = _mm256_cmp_ps::<_CMP_GT_OQ>(x[i], _mm256_set1_ps(88.722_83));
            y[i] = _mm256_blendv_ps(scaled, _mm256_set1_ps(f32::INFINITY), high);
        }
        y
    }

    /// [`exp8`] of arguments at most 0 (a softmax's scores less their maximum), equal to it
    /// there bit for bit: with no overflow side, `2^n` (`-126 <= n <= 0`) is one power of two
    /// and the upper clamp goes; positive lanes count as 0, NaN as -87.3 (as in [`exp8`]).
    /// About a third fewer instructions, which the prompt attention's softmax runs once per
    /// position and query vector.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    pub(crate) fn exp8_nonpositive(x: __m256) -> __m256 {
        let floor = _mm256_set1_ps(-87.336_54);
        let low = _mm256_cmp_ps::<_CMP_LT_OQ>(x, floor);
        // `max` returns its second operand for NaN
        let clamped = _mm256_min_ps(_mm256_max_ps(x, floor), _mm256_setzero_ps());
        let (n, p) = exponent_and_mantissa(clamped);
        _mm256_andnot_ps(low, _mm256_mul_ps(p, power_of_two(n)))
    }

    /// `x = n ln 2 + r` (`|r| <= ln 2 / 2`) of clamped arguments: `n` as integers and `e^r`
    /// from the degree-6 polynomial of [`super::exp`], so that `e^x = e^r 2^n`.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn exponent_and_mantissa(clamped: __m256) -> (__m256i, __m256) {
        let ([n], [p]) = exponent_and_mantissa_many([clamped]);
        (n, p)
    }

    /// [`exponent_and_mantissa`] of `N` vectors, step by step across them.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn exponent_and_mantissa_many<const N: usize>(
        clamped: [__m256; N],
    ) -> ([__m256i; N], [__m256; N]) {
        // ln 2 split in two so that n * LN2_HI is exact for |n| < 2^9
        const LN2_HI: f32 = 0.693_145_75;
        const LN2_LO: f32 = 1.428_606_8e-6;
        let (mut n, mut r) = (clamped, clamped);
        for i in 0..N {
            n[i] = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                _mm256_mul_ps(clamped[i], _mm256_set1_ps(std::f32::consts::LOG2_E)),
            );
            r[i] = _mm256_fnmadd_ps(n[i], _mm256_set1_ps(LN2_HI), clamped[i]);
            r[i] = _mm256_fnmadd_ps(n[i], _mm256_set1_ps(LN2_LO), r[i]);
        }
        let mut p = [_mm256_set1_ps(1.0 / 720.0); N];
        for c in [1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
            for i in 0..N {
                p[i] = _mm256_fmadd_ps(r[i], p[i], _mm256_set1_ps(c));
            }
        }
        let mut whole = [_mm256_setzero_si256(); N];
        for i in 0..N {
            whole[i] = _mm256_cvtps_epi32(n[i]);
        }
        (whole, p)
    }

    /// `2^e` per lane for `-126 <= e <= 127`, from the exponent bits.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn power_of_two(e: __m256i) -> __m256 {
        _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(
            e,
            _mm256_set1_epi32(127),
        )))
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// `exp` on every lane against f64 over the whole f32 range and its edges.
        fn check_exp(lanes: usize, exp: impl Fn(&[f32], &mut [f32])) {
            let mut xs: Vec<f32> = (0..4000).map(|i| -90.0 + i as f32 * 0.0451).collect();
            xs.extend([f32::NEG_INFINITY, 0.0, -0.0, 88.0, 89.0, -87.0, -88.0]);
            xs.extend([88.38, 88.5, 88.7, -87.3, f32::INFINITY]);
            while !xs.len().is_multiple_of(lanes) {
                xs.push(1.0);
            }
            for chunk in xs.chunks_exact(lanes) {
                let mut got = vec![0.0f32; lanes];
                exp(chunk, &mut got);
                for (x, y) in chunk.iter().zip(got) {
                    let want = (*x as f64).exp();
                    if *x < -87.336_54 {
                        assert_eq!(y, 0.0, "exp({x})");
                    } else if *x > 88.722_83 {
                        assert_eq!(y, f32::INFINITY, "exp({x})");
                    } else {
                        let err = (y as f64 - want).abs() / want;
                        assert!(err < 3e-7, "exp({x}) = {y}, want {want}: {err:e}");
                    }
                }
            }
        }

        #[test]
        fn exp16_matches_f64() {
            if !std::is_x86_feature_detected!("avx512f") {
                return;
            }
            check_exp(16, |x, y| {
                // SAFETY: AVX-512 F checked above; 16 values in and out.
                unsafe { _mm512_storeu_ps(y.as_mut_ptr(), exp16(_mm512_loadu_ps(x.as_ptr()))) }
            });
        }

        /// On the arguments a softmax gives it (at most 0, `-inf`), `exp8_nonpositive` is
        /// `exp8` bit for bit; a positive lane counts as 0.
        #[test]
        fn exp8_nonpositive_is_exp8_below_zero() {
            if !(std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")) {
                return;
            }
            let mut xs: Vec<f32> = (0..20_000).map(|i| -95.0 + i as f32 * 0.004_75).collect();
            xs.extend([
                f32::NEG_INFINITY,
                0.0,
                -0.0,
                -87.336_54,
                -87.336_55,
                -87.3,
                -1e-30,
            ]);
            xs.extend([
                f32::MIN,
                -f32::MIN_POSITIVE,
                -1e-45,
                -0.346_57,
                -0.346_58,
                -86.9,
            ]);
            xs.retain(|x| *x <= 0.0);
            while !xs.len().is_multiple_of(8) {
                xs.push(-1.0);
            }
            let run = |f: unsafe fn(__m256) -> __m256, x: &[f32]| {
                let mut y = [0.0f32; 8];
                // SAFETY: AVX2 and FMA checked above; 8 values in and out.
                unsafe { _mm256_storeu_ps(y.as_mut_ptr(), f(_mm256_loadu_ps(x.as_ptr()))) };
                y
            };
            for x in xs.chunks_exact(8) {
                let (got, want) = (run(exp8_nonpositive, x), run(exp8, x));
                for ((x, g), w) in x.iter().zip(got).zip(want) {
                    assert_eq!(g.to_bits(), w.to_bits(), "exp({x}) = {g}, exp8 {w}");
                }
            }
            let got = run(
                exp8_nonpositive,
                &[0.5, 3.0, 100.0, f32::INFINITY, 0.0, -0.0, 1e-30, 7.0],
            );
            assert!(got.iter().all(|&y| y == 1.0), "{got:?}");
        }

        #[test]
        fn exp8_matches_f64() {
            if !(std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")) {
                return;
            }
            check_exp(8, |x, y| {
                // SAFETY: AVX2 and FMA checked above; 8 values in and out.
                unsafe { _mm256_storeu_ps(y.as_mut_ptr(), exp8(_mm256_loadu_ps(x.as_ptr()))) }
            });
        }

        /// The interleaved forms on four vectors: every lane as accurate as one vector's.
        #[test]
        fn exp_many_matches_f64() {
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                check_exp(32, |x, y| {
                    // SAFETY: AVX2 and FMA checked above; 32 values in and out.
                    unsafe {
                        let v: [__m256; 4] =
                            std::array::from_fn(|k| _mm256_loadu_ps(x[8 * k..].as_ptr()));
                        for (k, e) in exp8_many(v).into_iter().enumerate() {
                            _mm256_storeu_ps(y[8 * k..].as_mut_ptr(), e);
                        }
                    }
                });
            }
            if std::is_x86_feature_detected!("avx512f") {
                check_exp(64, |x, y| {
                    // SAFETY: AVX-512 F checked above; 64 values in and out.
                    unsafe {
                        let v: [__m512; 4] =
                            std::array::from_fn(|k| _mm512_loadu_ps(x[16 * k..].as_ptr()));
                        for (k, e) in exp16_many(v).into_iter().enumerate() {
                            _mm512_storeu_ps(y[16 * k..].as_mut_ptr(), e);
                        }
                    }
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_accurate_over_the_range_softmax_uses() {
        let mut worst = 0.0f64;
        let mut x = -87.0f32;
        while x < 88.5 {
            let want = (x as f64).exp();
            let got = exp(x) as f64;
            worst = worst.max(((got - want) / want).abs());
            x += 0.001_37;
        }
        assert!(worst < 4e-7, "relative error {worst}");
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(-1000.0), 0.0);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(1000.0), f32::INFINITY);
        assert!(exp(f32::NAN).is_nan());
    }

    #[test]
    fn silu_matches_f64() {
        for i in -400..400 {
            let x = i as f32 * 0.05;
            let want = x as f64 / (1.0 + (-(x as f64)).exp());
            assert!(
                (silu(x) as f64 - want).abs() <= 1e-6 * want.abs().max(1.0),
                "{x}"
            );
        }
        assert_eq!(silu(-200.0), 0.0);
        assert_eq!(silu(200.0), 200.0);
    }

    #[test]
    fn dot_matches_f64_on_awkward_lengths() {
        for n in [0usize, 1, 7, 16, 17, 64, 80, 129, 256] {
            let a: Vec<f32> = (0..n)
                .map(|i| ((i * 37 % 11) as f32 - 5.0) * 0.25)
                .collect();
            let b: Vec<f32> = (0..n).map(|i| ((i * 13 % 7) as f32 - 3.0) * 0.5).collect();
            let want: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
            assert!((dot(&a, &b) as f64 - want).abs() < 1e-4, "n = {n}");
        }
    }
}
