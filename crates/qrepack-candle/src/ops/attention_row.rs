//! One query row's attention for the few query heads that share a key/value head (a decode
//! step), with 512-bit vectors, reading the cache's keys and values in place (f32, or f16
//! widened as they load): a general matrix product spends more on its set-up than on
//! `group x positions x head_dim` multiply-adds this small.
//!
//! Scores: per position, the key row is loaded once for every query vector of the group and
//! each dot product is summed across the lanes. Weighted values: per group of 16 output
//! lanes, one accumulator per query vector stays in a register over a run of positions.
//! The softmax is left open (its maximum and sum returned, the values not yet divided by the
//! sum), so that the positions of one head can be split over several threads and merged.

use std::arch::x86_64::*;

use half::f16;

use super::kv_cache::KvElem;

/// Rows ahead whose key or value row is asked for.
const PREFETCH_ROWS: usize = 8;

/// Largest group of query heads this kernel takes at once.
pub(super) const MAX_GROUP: usize = 8;

/// A cache element loaded as 16 f32 lanes.
pub(super) trait Lanes: KvElem {
    /// The 16 values at `p` as f32.
    ///
    /// # Safety
    /// AVX-512 F; 16 values readable at `p`.
    unsafe fn load16(p: *const Self) -> __m512;
}

impl Lanes for f32 {
    #[inline(always)]
    unsafe fn load16(p: *const f32) -> __m512 {
        // SAFETY: the caller's contract.
        unsafe { _mm512_loadu_ps(p) }
    }
}

impl Lanes for f16 {
    #[inline(always)]
    unsafe fn load16(p: *const f16) -> __m512 {
        // SAFETY: the caller's contract: 16 halves (32 bytes) at `p`.
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())) }
    }
}

/// One row's query vectors of one key/value head, against runs of its cached positions.
pub(super) struct RowGroup<'a, E> {
    /// `m` query vectors of `d` values, one after the other.
    pub queries: &'a [f32],
    /// Query vectors (1..=[`MAX_GROUP`]).
    pub m: usize,
    /// Head width, a multiple of 16.
    pub d: usize,
    /// Runs of consecutive positions: keys and values, `d` per position.
    pub runs: &'a [(&'a [E], &'a [E])],
    pub scale: f32,
}

/// Whether the kernel takes heads of width `d` on this CPU.
pub(super) fn supported(d: usize) -> bool {
    d > 0 && d.is_multiple_of(16) && std::is_x86_feature_detected!("avx512f")
}

impl<E: Lanes> RowGroup<'_, E> {
    /// Scores into `scores` (`m` rows of the positions), turned by `exp_from_max` into
    /// `exp(score - max)` (returning the row's maximum and sum into `stats`), then the sums of
    /// the values weighted by them into `out` (`m` vectors of `d`): divided by the sum, that
    /// is the attention of the positions.
    pub fn run(
        &self,
        scores: &mut Vec<f32>,
        exp_from_max: impl Fn(&mut [f32]) -> (f32, f32),
        out: &mut [f32],
        stats: &mut [(f32, f32)],
    ) {
        let (m, d) = (self.m, self.d);
        let span: usize = self.runs.iter().map(|(k, _)| k.len() / d).sum();
        assert!(
            (1..=MAX_GROUP).contains(&m)
                && supported(d)
                && self.queries.len() >= m * d
                && out.len() >= m * d
                && stats.len() >= m
                && span > 0
                && self
                    .runs
                    .iter()
                    .all(|(k, v)| k.len() == v.len() && k.len().is_multiple_of(d)),
            "attention row operands out of bounds or CPU not supported"
        );
        scores.clear();
        scores.resize(m * span, 0.0);
        // SAFETY: AVX-512 F is present and the operands' lengths were asserted.
        unsafe {
            match m {
                1 => self.scores::<1>(scores, span),
                2 => self.scores::<2>(scores, span),
                3 => self.scores::<3>(scores, span),
                4 => self.scores::<4>(scores, span),
                5 => self.scores::<5>(scores, span),
                6 => self.scores::<6>(scores, span),
                7 => self.scores::<7>(scores, span),
                _ => self.scores::<8>(scores, span),
            }
        }
        for (row, st) in scores.chunks_exact_mut(span).zip(stats.iter_mut()) {
            *st = exp_from_max(row);
        }
        // SAFETY: as above.
        unsafe {
            match m {
                1 => self.weighted::<1>(scores, span, out),
                2 => self.weighted::<2>(scores, span, out),
                3 => self.weighted::<3>(scores, span, out),
                4 => self.weighted::<4>(scores, span, out),
                5 => self.weighted::<5>(scores, span, out),
                6 => self.weighted::<6>(scores, span, out),
                7 => self.weighted::<7>(scores, span, out),
                _ => self.weighted::<8>(scores, span, out),
            }
        }
    }

    /// `scores[j * span + p] = scale * q_j . k_p`, each key row loaded once for the `M` query
    /// vectors, whose sums are independent chains.
    ///
    /// # Safety
    /// AVX-512 F; the operands as asserted in [`RowGroup::run`], `M == self.m`, `scores`
    /// holding `M * span` values.
    #[target_feature(enable = "avx512f")]
    unsafe fn scores<const M: usize>(&self, scores: &mut [f32], span: usize) {
        let d = self.d;
        let q = self.queries.as_ptr();
        let s = scores.as_mut_ptr();
        let mut at = 0;
        for (keys, _) in self.runs {
            let n = keys.len() / d;
            let base = keys.as_ptr();
            for p in 0..n {
                // SAFETY: row p < n of the run holds d values; the M query vectors of d
                // values are inside `queries`; j * span + at + p < M * span.
                unsafe {
                    if p + PREFETCH_ROWS < n {
                        let ahead = base.add((p + PREFETCH_ROWS) * d);
                        let mut c = 0;
                        while c < d * size_of::<E>() {
                            _mm_prefetch::<_MM_HINT_T0>(ahead.cast::<i8>().add(c));
                            c += 64;
                        }
                    }
                    let k = base.add(p * d);
                    let mut acc = [_mm512_setzero_ps(); M];
                    let mut c = 0;
                    while c < d {
                        let kv = E::load16(k.add(c));
                        for (j, a) in acc.iter_mut().enumerate() {
                            *a = _mm512_fmadd_ps(_mm512_loadu_ps(q.add(j * d + c)), kv, *a);
                        }
                        c += 16;
                    }
                    for (j, a) in acc.iter().enumerate() {
                        *s.add(j * span + at + p) = _mm512_reduce_add_ps(*a) * self.scale;
                    }
                }
            }
            at += n;
        }
    }

    /// `out_j = sum_p w[j * span + p] v_p`, 16 lanes at a time with `M` accumulators over
    /// each run.
    ///
    /// # Safety
    /// As [`RowGroup::scores`], `out` holding `M * d` values.
    #[target_feature(enable = "avx512f")]
    unsafe fn weighted<const M: usize>(&self, weights: &[f32], span: usize, out: &mut [f32]) {
        let d = self.d;
        let w = weights.as_ptr();
        let o = out.as_mut_ptr();
        // SAFETY: j * d + c + 16 <= M * d <= out.len().
        unsafe {
            for j in 0..M {
                let mut c = 0;
                while c < d {
                    _mm512_storeu_ps(o.add(j * d + c), _mm512_setzero_ps());
                    c += 16;
                }
            }
        }
        let mut at = 0;
        for (_, values) in self.runs {
            let n = values.len() / d;
            let base = values.as_ptr();
            let mut c = 0;
            while c < d {
                // SAFETY: as above; row p < n of the run, lanes c..c + 16 <= d; weights
                // j * span + at + p < M * span.
                unsafe {
                    let mut acc = [_mm512_setzero_ps(); M];
                    for (j, a) in acc.iter_mut().enumerate() {
                        *a = _mm512_loadu_ps(o.add(j * d + c));
                    }
                    for p in 0..n {
                        let v = E::load16(base.add(p * d + c));
                        for (j, a) in acc.iter_mut().enumerate() {
                            let wt = _mm512_set1_ps(*w.add(j * span + at + p));
                            *a = _mm512_fmadd_ps(wt, v, *a);
                        }
                    }
                    for (j, a) in acc.iter().enumerate() {
                        _mm512_storeu_ps(o.add(j * d + c), *a);
                    }
                }
                c += 16;
            }
            at += n;
        }
    }
}
