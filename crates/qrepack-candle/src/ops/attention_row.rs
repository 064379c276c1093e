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

/// Rows ahead whose key row is asked for. A decode step usually finds the cache in memory (the
/// layers' weights pushed it out since the last step); 16 rows (with the value rows prefetched
/// beside the keys and each run's start from the run before) against 8 and none of the values,
/// SmolLM2's shapes, 2 threads, Zen 4: 512 positions 45-66 -> 41-56 us, 2048 positions 208-236
/// -> 115-179 us (`examples/attention_speed`, best of 100 reads from memory, 3 runs).
const PREFETCH_ROWS: usize = 16;

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
    /// Scores into `scores` (`m` rows of the positions), turned into
    /// `exp(score - max)` (returning the row's maximum and sum into `stats`), then the sums of
    /// the values weighted by them into `out` (`m` vectors of `d`): divided by the sum, that
    /// is the attention of the positions.
    pub fn run(&self, scores: &mut Vec<f32>, out: &mut [f32], stats: &mut [(f32, f32)]) {
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
            // SAFETY: AVX-512 F is present (asserted above).
            *st = unsafe { exp_from_max(row) };
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
        let row_bytes = d * size_of::<E>();
        for (i, (keys, values)) in self.runs.iter().enumerate() {
            let n = keys.len() / d;
            let base = keys.as_ptr();
            let value_base = values.as_ptr().cast::<i8>();
            // The next run's first keys, which the prefetches below (inside this run) never
            // reach: a cache read from memory would otherwise wait at every run's start.
            if let Some((next, _)) = self.runs.get(i + 1) {
                let bytes = (PREFETCH_ROWS * d).min(next.len()) * size_of::<E>();
                prefetch::<_MM_HINT_T0>(next.as_ptr().cast(), bytes);
            }
            let mut p = 0;
            if M <= 4 {
                while p + 4 <= n {
                    // SAFETY: rows p..p + 4 < n of the run; as below; prefetches do not fault
                    // but stay inside the run.
                    unsafe {
                        if p + PREFETCH_ROWS + 4 <= n {
                            let ahead = base.add((p + PREFETCH_ROWS) * d).cast::<i8>();
                            prefetch::<_MM_HINT_T0>(ahead, 4 * row_bytes);
                        }
                        // the values of these positions, read once the scores are done
                        prefetch::<_MM_HINT_T1>(value_base.add(p * row_bytes), 4 * row_bytes);
                        self.scores4::<M>(base.add(p * d), s.add(at + p), span)
                    };
                    p += 4;
                }
            }
            for p in p..n {
                // SAFETY: row p < n of the run holds d values; the M query vectors of d
                // values are inside `queries`; j * span + at + p < M * span.
                unsafe {
                    if p + PREFETCH_ROWS < n {
                        let ahead = base.add((p + PREFETCH_ROWS) * d);
                        prefetch::<_MM_HINT_T0>(ahead.cast(), row_bytes);
                    }
                    prefetch::<_MM_HINT_T1>(value_base.add(p * row_bytes), row_bytes);
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

    /// The scores of four consecutive positions (key rows at `keys`) for the `M` query
    /// vectors, stored at `out + j * span` for vector `j`: the sums of the four positions
    /// are reduced together, a quarter of the shuffles of four separate reductions.
    ///
    /// # Safety
    /// AVX-512 F; four rows of `d` keys at `keys` (and the rows [`PREFETCH_ROWS`] on are
    /// only prefetched); `M` query vectors in `queries`; four values writable at each
    /// `out + j * span`.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn scores4<const M: usize>(&self, keys: *const E, out: *mut f32, span: usize) {
        let d = self.d;
        let q = self.queries.as_ptr();
        let mut acc = [[_mm512_setzero_ps(); 4]; M];
        // SAFETY: the caller's contract.
        unsafe {
            let mut c = 0;
            while c < d {
                for p in 0..4 {
                    let k = E::load16(keys.add(p * d + c));
                    for (j, a) in acc.iter_mut().enumerate() {
                        a[p] = _mm512_fmadd_ps(_mm512_loadu_ps(q.add(j * d + c)), k, a[p]);
                    }
                }
                c += 16;
            }
            let scale = _mm_set1_ps(self.scale);
            for (j, a) in acc.iter().enumerate() {
                _mm_storeu_ps(out.add(j * span), _mm_mul_ps(sum4(a), scale));
            }
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
                // SAFETY: as above; rows p < n of the run, lanes c..c + 16 C <= d; weights
                // j * span + at + p < M * span.
                unsafe {
                    if M <= 6 && c + 64 <= d {
                        weighted_columns::<E, M, 4>(base.add(c), d, n, w.add(at), span, o.add(c));
                        c += 64;
                    } else {
                        weighted_columns::<E, M, 1>(base.add(c), d, n, w.add(at), span, o.add(c));
                        c += 16;
                    }
                }
            }
            at += n;
        }
    }
}

/// The sums of the lanes of four vectors, in order.
#[target_feature(enable = "avx512f")]
#[inline]
fn sum4(v: &[__m512; 4]) -> __m128 {
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

/// `out[j * d + c..][..16 C] += sum_p w[j * span + p] values[p * d + c..][..16 C]` for the
/// `M` query vectors over `n` positions: `M x C` accumulators, so each value row is read in
/// one pass and the sums are `M C` independent chains.
///
/// # Safety
/// AVX-512 F; `n` rows `d` apart at `values`, each with `16 C` readable; weights at
/// `w + j * span + p` for `j < M`, `p < n`; `16 C` values at each `out + j * d`.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn weighted_columns<E: Lanes, const M: usize, const C: usize>(
    values: *const E,
    d: usize,
    n: usize,
    w: *const f32,
    span: usize,
    out: *mut f32,
) {
    // SAFETY: the caller's contract.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); C]; M];
        for (j, a) in acc.iter_mut().enumerate() {
            for (k, a) in a.iter_mut().enumerate() {
                *a = _mm512_loadu_ps(out.add(j * d + 16 * k));
            }
        }
        for p in 0..n {
            let mut v = [_mm512_setzero_ps(); C];
            for (k, v) in v.iter_mut().enumerate() {
                *v = E::load16(values.add(p * d + 16 * k));
            }
            for (j, a) in acc.iter_mut().enumerate() {
                let wt = _mm512_set1_ps(*w.add(j * span + p));
                for (a, v) in a.iter_mut().zip(&v) {
                    *a = _mm512_fmadd_ps(wt, *v, *a);
                }
            }
        }
        for (j, a) in acc.iter().enumerate() {
            for (k, a) in a.iter().enumerate() {
                _mm512_storeu_ps(out.add(j * d + 16 * k), *a);
            }
        }
    }
}

/// `s = exp(s - max(s))`; returns `(max(s), sum of the new s)`, 16 lanes at a time.
///
/// # Safety
/// AVX-512 F.
#[target_feature(enable = "avx512f")]
unsafe fn exp_from_max(s: &mut [f32]) -> (f32, f32) {
    use super::math::x86::exp16;
    let n = s.len();
    let tail: __mmask16 = ((1u32 << (n % 16)) - 1) as __mmask16;
    let p = s.as_mut_ptr();
    // SAFETY: full vectors at i + 16 <= n, the tail masked to the values left.
    unsafe {
        let mut max = _mm512_set1_ps(f32::NEG_INFINITY);
        let mut i = 0;
        while i + 16 <= n {
            max = _mm512_max_ps(max, _mm512_loadu_ps(p.add(i)));
            i += 16;
        }
        let rest = _mm512_mask_loadu_ps(_mm512_set1_ps(f32::NEG_INFINITY), tail, p.add(i));
        let max = _mm512_reduce_max_ps(_mm512_max_ps(max, rest));
        let shift = _mm512_set1_ps(max);
        let mut sum = _mm512_setzero_ps();
        let mut i = 0;
        while i + 16 <= n {
            let e = exp16(_mm512_sub_ps(_mm512_loadu_ps(p.add(i)), shift));
            _mm512_storeu_ps(p.add(i), e);
            sum = _mm512_add_ps(sum, e);
            i += 16;
        }
        let e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, p.add(i)), shift));
        let e = _mm512_maskz_mov_ps(tail, e);
        _mm512_mask_storeu_ps(p.add(i), tail, e);
        sum = _mm512_add_ps(sum, e);
        (max, _mm512_reduce_add_ps(sum))
    }
}

/// Asks for the cache lines of `bytes` bytes from `at` (hint `HINT`).
#[inline(always)]
fn prefetch<const HINT: i32>(at: *const i8, bytes: usize) {
    let mut c = 0;
    while c < bytes {
        // SAFETY: a prefetch never faults, whatever the address.
        unsafe { _mm_prefetch::<HINT>(at.wrapping_add(c)) };
        c += 64;
    }
}
