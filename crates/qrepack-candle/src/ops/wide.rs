//! The f32 vectors the attention kernels are written over: one kernel body, instantiated for
//! 512-bit (AVX-512 F) and 256-bit (AVX2 + FMA + F16C) registers.
//!
//! Every method is `#[inline(always)]` and uses only the instructions of its own vector's
//! set, so it takes the target features of the `#[target_feature]` function it is inlined
//! into; callers promise those features by calling the methods only from such a function.

use std::arch::x86_64::*;

use half::f16;

use super::math::x86::{exp16, exp16_many, exp8_many, exp8_nonpositive};

/// Which vector width a kernel runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Width {
    /// 16 lanes, AVX-512 F.
    W512,
    /// 8 lanes, AVX2 + FMA + F16C.
    W256,
}

impl Width {
    /// The widths this CPU runs, widest first.
    pub fn available() -> impl Iterator<Item = Width> {
        let w512 = std::is_x86_feature_detected!("avx512f");
        let w256 = std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c");
        [(Width::W512, w512), (Width::W256, w256)]
            .into_iter()
            .filter_map(|(w, ok)| ok.then_some(w))
    }

    /// f32 lanes of one register.
    pub fn lanes(self) -> usize {
        match self {
            Width::W512 => 16,
            Width::W256 => 8,
        }
    }
}

/// A register of f32 lanes and the operations the kernels need.
///
/// # Safety (every method)
/// The CPU must support the vector's instruction set (AVX-512 F for `__m512`; AVX2, FMA and
/// F16C for `__m256`), and pointers must have [`Wide::LANES`] values readable or writable.
pub(super) trait Wide: Copy {
    /// f32 lanes.
    const LANES: usize;
    /// Vector registers of the instruction set, which bound how many accumulators a kernel
    /// keeps.
    const REGISTERS: usize;

    unsafe fn zero() -> Self;
    unsafe fn splat(x: f32) -> Self;
    unsafe fn load(p: *const f32) -> Self;
    /// [`Wide::LANES`] halves widened to f32.
    unsafe fn load_f16(p: *const f16) -> Self;
    unsafe fn store(self, p: *mut f32);
    /// `self * b + c`, one rounding.
    unsafe fn mul_add(self, b: Self, c: Self) -> Self;
    /// The sums of the lanes of four vectors, in order.
    unsafe fn totals4(v: &[Self; 4]) -> __m128;
    /// The sum of the lanes.
    unsafe fn total(self) -> f32;
    /// The largest lane.
    unsafe fn max_total(self) -> f32;
    unsafe fn add(self, b: Self) -> Self;
    unsafe fn sub(self, b: Self) -> Self;
    unsafe fn mul(self, b: Self) -> Self;
    unsafe fn max(self, b: Self) -> Self;
    unsafe fn min(self, b: Self) -> Self;
    unsafe fn div(self, b: Self) -> Self;
    /// `e^x` per lane (relative error below 3e-7) of `N` vectors, their chains interleaved:
    /// 0 below -87.3 and for `-inf`, `+inf` above 88.7.
    unsafe fn exp_many<const N: usize>(x: [Self; N]) -> [Self; N];
    /// [`Wide::exp_many`] of one vector's lanes at most 0 (the same values; other lanes unspecified): what a
    /// softmax takes after subtracting the maximum, where it can be cheaper.
    unsafe fn exp_nonpositive(self) -> Self;
    /// `self`, with `-inf` in the lanes where `at` lies outside `lo..hi` (a lane's first
    /// position and the one after its last, as f32).
    unsafe fn seen_between(self, at: f32, lo: Self, hi: Self) -> Self;
    /// `self`, with `-inf` lanes (nothing seen yet) as 0, so that `exp(x - that)` is 0, never
    /// NaN.
    unsafe fn finite_or_zero(self) -> Self;
    /// Whether any lane is not 1.
    unsafe fn any_not_one(self) -> bool;
    /// `self / b` in the lanes where `b > 0`, 0 elsewhere.
    unsafe fn div_where_positive(self, b: Self) -> Self;
}

impl Wide for __m512 {
    const LANES: usize = 16;
    const REGISTERS: usize = 32;

    #[inline(always)]
    unsafe fn zero() -> Self {
        // SAFETY: the trait's contract (AVX-512 F).
        unsafe { _mm512_setzero_ps() }
    }

    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        // SAFETY: the trait's contract.
        unsafe { _mm512_set1_ps(x) }
    }

    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: the trait's contract: 16 values at `p`.
        unsafe { _mm512_loadu_ps(p) }
    }

    #[inline(always)]
    unsafe fn load_f16(p: *const f16) -> Self {
        // SAFETY: the trait's contract: 16 halves (32 bytes) at `p`.
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())) }
    }

    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: the trait's contract: 16 values writable at `p`.
        unsafe { _mm512_storeu_ps(p, self) }
    }

    #[inline(always)]
    unsafe fn mul_add(self, b: Self, c: Self) -> Self {
        // SAFETY: the trait's contract.
        unsafe { _mm512_fmadd_ps(self, b, c) }
    }

    #[inline(always)]
    unsafe fn totals4(v: &[Self; 4]) -> __m128 {
        // SAFETY: the trait's contract; register-only intrinsics.
        unsafe {
            // per 128-bit block: pairs of lanes of a, b, then of c, d, then all four vectors
            let ab = _mm512_add_ps(
                _mm512_unpacklo_ps(v[0], v[1]),
                _mm512_unpackhi_ps(v[0], v[1]),
            );
            let cd = _mm512_add_ps(
                _mm512_unpacklo_ps(v[2], v[3]),
                _mm512_unpackhi_ps(v[2], v[3]),
            );
            let blocks = _mm512_add_ps(
                _mm512_shuffle_ps::<0x44>(ab, cd),
                _mm512_shuffle_ps::<0xee>(ab, cd),
            );
            let half = _mm256_add_ps(
                _mm512_castps512_ps256(blocks),
                _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(blocks))),
            );
            _mm_add_ps(
                _mm256_castps256_ps128(half),
                _mm256_extractf128_ps::<1>(half),
            )
        }
    }

    #[inline(always)]
    unsafe fn total(self) -> f32 {
        // SAFETY: the trait's contract.
        unsafe { _mm512_reduce_add_ps(self) }
    }

    #[inline(always)]
    unsafe fn max_total(self) -> f32 {
        // SAFETY: the trait's contract.
        unsafe { _mm512_reduce_max_ps(self) }
    }
    #[inline(always)]
    unsafe fn add(self, b: Self) -> Self {
        // SAFETY: the trait's contract.
        unsafe { _mm512_add_ps(self, b) }
    }

    #[inline(always)]
    unsafe fn sub(self, b: Self) -> Self {
        // SAFETY: the trait's contract.
        unsafe { _mm512_sub_ps(self, b) }
    }

    #[inline(always)]
    unsafe fn mul(self, b: Self) -> Self {
        // SAFETY: the trait's contract.
        unsafe { _mm512_mul_ps(self, b) }
    }

    #[inline(always)]
    unsafe fn max(self, b: Self) -> Self {
        // SAFETY: the trait's contract.
        unsafe { _mm512_max_ps(self, b) }
    }

    #[inline(always)]
    unsafe fn min(self, b: Self) -> Self {
        // SAFETY: the trait's contract.
        unsafe { _mm512_min_ps(self, b) }
    }

    #[inline(always)]
    unsafe fn div(self, b: Self) -> Self {
        // SAFETY: the trait's contract.
        unsafe { _mm512_div_ps(self, b) }
    }

    #[inline(always)]
    unsafe fn exp_nonpositive(self) -> Self {
        // SAFETY: the trait's contract (AVX-512 F). `vscalefps` already applies any `2^n` in
        // one instruction: little to save here.
        unsafe { exp16(self) }
    }

    #[inline(always)]
    unsafe fn exp_many<const N: usize>(x: [Self; N]) -> [Self; N] {
        // SAFETY: the trait's contract (AVX-512 F).
        unsafe { exp16_many(x) }
    }

    #[inline(always)]
    unsafe fn seen_between(self, at: f32, lo: Self, hi: Self) -> Self {
        // SAFETY: the trait's contract; register-only intrinsics.
        unsafe {
            let at = _mm512_set1_ps(at);
            let seen =
                _mm512_cmp_ps_mask::<_CMP_GE_OQ>(at, lo) & _mm512_cmp_ps_mask::<_CMP_LT_OQ>(at, hi);
            _mm512_mask_blend_ps(seen, _mm512_set1_ps(f32::NEG_INFINITY), self)
        }
    }

    #[inline(always)]
    unsafe fn finite_or_zero(self) -> Self {
        // SAFETY: the trait's contract; register-only intrinsics.
        unsafe {
            let none = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(self, _mm512_set1_ps(f32::NEG_INFINITY));
            _mm512_mask_blend_ps(none, self, _mm512_setzero_ps())
        }
    }

    #[inline(always)]
    unsafe fn any_not_one(self) -> bool {
        // SAFETY: the trait's contract.
        unsafe { _mm512_cmp_ps_mask::<_CMP_NEQ_UQ>(self, _mm512_set1_ps(1.0)) != 0 }
    }

    #[inline(always)]
    unsafe fn div_where_positive(self, b: Self) -> Self {
        // SAFETY: the trait's contract; register-only intrinsics.
        unsafe {
            let positive = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(b, _mm512_setzero_ps());
            _mm512_maskz_div_ps(positive, self, b)
        }
    }
}

impl Wide for __m256 {
    const LANES: usize = 8;
    const REGISTERS: usize = 16;

    #[inline(always)]
    unsafe fn zero() -> Self {
        // SAFETY: the trait's contract (AVX).
        unsafe { _mm256_setzero_ps() }
    }

    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        // SAFETY: the trait's contract.
        unsafe { _mm256_set1_ps(x) }
    }

    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: the trait's contract: 8 values at `p`.
        unsafe { _mm256_loadu_ps(p) }
    }

    #[inline(always)]
    unsafe fn load_f16(p: *const f16) -> Self {
        // SAFETY: the trait's contract (F16C): 8 halves (16 bytes) at `p`.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
    }

    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: the trait's contract: 8 values writable at `p`.
        unsafe { _mm256_storeu_ps(p, self) }
    }

    #[inline(always)]
    unsafe fn mul_add(self, b: Self, c: Self) -> Self {
        // SAFETY: the trait's contract (FMA).
        unsafe { _mm256_fmadd_ps(self, b, c) }
    }

    #[inline(always)]
    unsafe fn totals4(v: &[Self; 4]) -> __m128 {
        // SAFETY: the trait's contract; register-only intrinsics.
        unsafe {
            // pairs of lanes of a, b and of c, d; then the four vectors per 128-bit half
            let ab = _mm256_hadd_ps(v[0], v[1]);
            let cd = _mm256_hadd_ps(v[2], v[3]);
            let halves = _mm256_hadd_ps(ab, cd);
            _mm_add_ps(
                _mm256_castps256_ps128(halves),
                _mm256_extractf128_ps::<1>(halves),
            )
        }
    }

    #[inline(always)]
    unsafe fn total(self) -> f32 {
        // SAFETY: the trait's contract; register-only intrinsics.
        unsafe {
            let v = _mm_add_ps(
                _mm256_castps256_ps128(self),
                _mm256_extractf128_ps::<1>(self),
            );
            let v = _mm_add_ps(v, _mm_movehl_ps(v, v));
            _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)))
        }
    }

    #[inline(always)]
    unsafe fn max_total(self) -> f32 {
        // SAFETY: the trait's contract; register-only intrinsics.
        unsafe {
            let v = _mm_max_ps(
                _mm256_castps256_ps128(self),
                _mm256_extractf128_ps::<1>(self),
            );
            let v = _mm_max_ps(v, _mm_movehl_ps(v, v));
            _mm_cvtss_f32(_mm_max_ss(v, _mm_movehdup_ps(v)))
        }
    }

    #[inline(always)]
    unsafe fn add(self, b: Self) -> Self {
        // SAFETY: the trait's contract.
        unsafe { _mm256_add_ps(self, b) }
    }

    #[inline(always)]
    unsafe fn sub(self, b: Self) -> Self {
        // SAFETY: the trait's contract.
        unsafe { _mm256_sub_ps(self, b) }
    }

    #[inline(always)]
    unsafe fn mul(self, b: Self) -> Self {
        // SAFETY: the trait's contract.
        unsafe { _mm256_mul_ps(self, b) }
    }

    #[inline(always)]
    unsafe fn max(self, b: Self) -> Self {
        // SAFETY: the trait's contract.
        unsafe { _mm256_max_ps(self, b) }
    }

    #[inline(always)]
    unsafe fn min(self, b: Self) -> Self {
        // SAFETY: the trait's contract.
        unsafe { _mm256_min_ps(self, b) }
    }

    #[inline(always)]
    unsafe fn div(self, b: Self) -> Self {
        // SAFETY: the trait's contract.
        unsafe { _mm256_div_ps(self, b) }
    }

    #[inline(always)]
    unsafe fn exp_nonpositive(self) -> Self {
        // SAFETY: the trait's contract (AVX2, FMA).
        unsafe { exp8_nonpositive(self) }
    }

    #[inline(always)]
    unsafe fn exp_many<const N: usize>(x: [Self; N]) -> [Self; N] {
        // SAFETY: the trait's contract (AVX2, FMA).
        unsafe { exp8_many(x) }
    }

    #[inline(always)]
    unsafe fn seen_between(self, at: f32, lo: Self, hi: Self) -> Self {
        // SAFETY: the trait's contract; register-only intrinsics.
        unsafe {
            let at = _mm256_set1_ps(at);
            let seen = _mm256_and_ps(
                _mm256_cmp_ps::<_CMP_GE_OQ>(at, lo),
                _mm256_cmp_ps::<_CMP_LT_OQ>(at, hi),
            );
            _mm256_blendv_ps(_mm256_set1_ps(f32::NEG_INFINITY), self, seen)
        }
    }

    #[inline(always)]
    unsafe fn finite_or_zero(self) -> Self {
        // SAFETY: the trait's contract; register-only intrinsics.
        unsafe {
            let none = _mm256_cmp_ps::<_CMP_EQ_OQ>(self, _mm256_set1_ps(f32::NEG_INFINITY));
            _mm256_andnot_ps(none, self)
        }
    }

    #[inline(always)]
    unsafe fn any_not_one(self) -> bool {
        // SAFETY: the trait's contract.
        unsafe {
            let differs = _mm256_cmp_ps::<_CMP_NEQ_UQ>(self, _mm256_set1_ps(1.0));
            _mm256_movemask_ps(differs) != 0
        }
    }

    #[inline(always)]
    unsafe fn div_where_positive(self, b: Self) -> Self {
        // SAFETY: the trait's contract; register-only intrinsics.
        unsafe {
            let positive = _mm256_cmp_ps::<_CMP_GT_OQ>(b, _mm256_setzero_ps());
            _mm256_and_ps(positive, _mm256_div_ps(self, b))
        }
    }
}
