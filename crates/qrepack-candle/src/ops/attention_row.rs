//! One query row's attention for the few query heads that share a key/value head (a decode
//! step), with 512-bit vectors: a general matrix product spends more on its set-up than on
//! `group x positions x head_dim` multiply-adds this small.
//!
//! Scores: per position, the key row is loaded once for every query vector of the group and
//! each dot product is summed across the lanes. Weighted values: per group of 16 output
//! lanes, one accumulator per query vector stays in a register over all positions.

use std::arch::x86_64::*;

/// Positions ahead whose key or value row is asked for: the rows of one head are a few
/// cache lines every `stride` values, which the cache misses on in a decode step (the layers'
/// weights streamed through the caches since the row was written).
const PREFETCH_ROWS: usize = 8;

/// Asks for the `d` values of row `p` (if `p < span`) into L1.
#[inline(always)]
fn prefetch_row(base: *const f32, p: usize, span: usize, stride: usize, d: usize) {
    if p >= span {
        return;
    }
    let row = base.wrapping_add(p * stride);
    let mut at = 0;
    while at < d {
        // SAFETY: a prefetch never faults and is never dereferenced; the address is inside
        // the rows the caller checked.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add(at).cast()) };
        at += 16;
    }
}

/// Largest group of query heads per key/value head this kernel takes.
pub(super) const MAX_GROUP: usize = 8;

/// One row's query vectors of one key/value head.
pub(super) struct RowGroup<'a> {
    /// `m` query vectors of `d` values, one after the other.
    pub queries: &'a [f32],
    /// Query vectors (1..=[`MAX_GROUP`]).
    pub m: usize,
    /// Head width, a multiple of 16.
    pub d: usize,
    /// Keys and values from the first position seen, `stride` apart, the head's `d` values
    /// at the start of each.
    pub keys: &'a [f32],
    pub values: &'a [f32],
    pub stride: usize,
    /// Positions seen.
    pub span: usize,
    pub scale: f32,
}

impl RowGroup<'_> {
    /// Whether the kernel takes this shape on this CPU.
    pub fn supported(m: usize, d: usize) -> bool {
        (1..=MAX_GROUP).contains(&m)
            && d > 0
            && d.is_multiple_of(16)
            && std::is_x86_feature_detected!("avx512f")
    }

    /// Scores into `scores` (`m` rows of `span`), then, after `softmax` has turned each row
    /// into weights, the weighted values into `out` (`m` vectors of `d`, one after the other).
    pub fn run(&self, scores: &mut [f32], softmax: impl Fn(&mut [f32]), out: &mut [f32]) {
        let (m, d, span) = (self.m, self.d, self.span);
        assert!(Self::supported(m, d), "shape or CPU not supported");
        assert!(
            self.queries.len() >= m * d
                && scores.len() >= m * span
                && out.len() >= m * d
                && span > 0
                && self.keys.len() >= (span - 1) * self.stride + d
                && self.values.len() >= (span - 1) * self.stride + d,
            "attention row operands out of bounds"
        );
        match m {
            1 => self.run_with::<1>(scores, softmax, out),
            2 => self.run_with::<2>(scores, softmax, out),
            3 => self.run_with::<3>(scores, softmax, out),
            4 => self.run_with::<4>(scores, softmax, out),
            5 => self.run_with::<5>(scores, softmax, out),
            6 => self.run_with::<6>(scores, softmax, out),
            7 => self.run_with::<7>(scores, softmax, out),
            _ => self.run_with::<8>(scores, softmax, out),
        }
    }

    /// [`RowGroup::run`] for `M == self.m` query vectors, the operands checked.
    fn run_with<const M: usize>(
        &self,
        scores: &mut [f32],
        softmax: impl Fn(&mut [f32]),
        out: &mut [f32],
    ) {
        // SAFETY: AVX-512 F is present and the operands' lengths were asserted (`run`).
        unsafe { self.scores::<M>(scores) };
        for row in scores.chunks_exact_mut(self.span).take(M) {
            softmax(row);
        }
        // SAFETY: as above.
        unsafe { self.weighted::<M>(scores, out) };
    }

    /// `scores[j * span + p] = scale * q_j . k_p`, the key row loaded once for the `M`
    /// query vectors, whose sums are independent chains.
    ///
    /// # Safety
    /// AVX-512 F; the operands' lengths as asserted in [`RowGroup::run`].
    #[target_feature(enable = "avx512f")]
    unsafe fn scores<const M: usize>(&self, scores: &mut [f32]) {
        let (d, span) = (self.d, self.span);
        let q = self.queries.as_ptr();
        let s = scores.as_mut_ptr();
        for p in 0..span {
            // SAFETY: position p < span, its d values inside `keys`; the M query vectors of
            // d values inside `queries`; j * span + p within `scores` (caller's assertion).
            unsafe {
                let k = self.keys.as_ptr().add(p * self.stride);
                prefetch_row(
                    self.keys.as_ptr(),
                    p + PREFETCH_ROWS,
                    self.span,
                    self.stride,
                    d,
                );
                let mut acc = [_mm512_setzero_ps(); M];
                let mut c = 0;
                while c < d {
                    let kv = _mm512_loadu_ps(k.add(c));
                    for (j, a) in acc.iter_mut().enumerate() {
                        *a = _mm512_fmadd_ps(_mm512_loadu_ps(q.add(j * d + c)), kv, *a);
                    }
                    c += 16;
                }
                for (j, a) in acc.iter().enumerate() {
                    *s.add(j * span + p) = _mm512_reduce_add_ps(*a) * self.scale;
                }
            }
        }
    }

    /// `out_j = sum_p w[j * span + p] v_p`, 16 lanes at a time with `M` accumulators.
    ///
    /// # Safety
    /// AVX-512 F; the operands' lengths as asserted in [`RowGroup::run`].
    #[target_feature(enable = "avx512f")]
    unsafe fn weighted<const M: usize>(&self, weights: &[f32], out: &mut [f32]) {
        let (d, span) = (self.d, self.span);
        let w = weights.as_ptr();
        let o = out.as_mut_ptr();
        let mut c = 0;
        while c < d {
            let mut acc = [_mm512_setzero_ps(); M];
            for p in 0..span {
                if c == 0 {
                    prefetch_row(
                        self.values.as_ptr(),
                        p + PREFETCH_ROWS,
                        span,
                        self.stride,
                        d,
                    );
                }
                // SAFETY: position p < span; lanes c..c + 16 <= d of its value row; weights
                // j * span + p within `weights` (caller's assertion).
                unsafe {
                    let v = _mm512_loadu_ps(self.values.as_ptr().add(p * self.stride + c));
                    for (j, a) in acc.iter_mut().enumerate() {
                        *a = _mm512_fmadd_ps(_mm512_set1_ps(*w.add(j * span + p)), v, *a);
                    }
                }
            }
            for (j, a) in acc.iter().enumerate() {
                // SAFETY: j * d + c + 16 <= m * d <= out.len() (caller's assertion).
                unsafe { _mm512_storeu_ps(o.add(j * d + c), *a) };
            }
            c += 16;
        }
    }
}
