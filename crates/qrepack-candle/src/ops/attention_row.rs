//! One query row's attention for the few query heads that share a key/value head (a decode
//! step), with 512-bit or 256-bit vectors ([`Wide`]), reading the cache's keys and values in place (f32, or f16
//! widened as they load): a general matrix product spends more on its set-up than on
//! `group x positions x head_dim` multiply-adds this small.
//!
//! Scores: per position, the key row is loaded once for every query vector of the group and
//! each dot product is summed across the lanes. Weighted values: per block of output
//! lanes, one accumulator per query vector stays in a register over a run of positions.
//! The softmax is left open (its maximum and sum returned, the values not yet divided by the
//! sum), so that the positions of one head can be split over several threads and merged.

use std::arch::x86_64::*;

use half::f16;

use super::kv_cache::KvElem;
use super::math::exp;
use super::wide::{Wide, Width};

/// Rows ahead whose key row is asked for. A decode step usually finds the cache in memory (the
/// layers' weights pushed it out since the last step); 16 rows (with the value rows prefetched
/// beside the keys and each run's start from the run before) against 8 and none of the values,
/// SmolLM2's shapes, 2 threads, Zen 4: 512 positions 45-66 -> 41-56 us, 2048 positions 208-236
/// -> 115-179 us (`examples/attention_speed`, best of 100 reads from memory, 3 runs).
const PREFETCH_ROWS: usize = 16;

/// Largest group of query heads this kernel takes at once.
pub(super) const MAX_GROUP: usize = 8;

/// A cache element loaded into f32 lanes.
pub(super) trait Lanes: KvElem {
    /// The [`Wide::LANES`] values at `p` as f32.
    ///
    /// # Safety
    /// The vector's instruction set (see [`Wide`]); `W::LANES` values readable at `p`.
    unsafe fn lanes<W: Wide>(p: *const Self) -> W;
}

impl Lanes for f32 {
    #[inline(always)]
    unsafe fn lanes<W: Wide>(p: *const f32) -> W {
        // SAFETY: the caller's contract.
        unsafe { W::load(p) }
    }
}

impl Lanes for f16 {
    #[inline(always)]
    unsafe fn lanes<W: Wide>(p: *const f16) -> W {
        // SAFETY: the caller's contract.
        unsafe { W::load_f16(p) }
    }
}

/// One row's query vectors of one key/value head, against runs of its cached positions.
pub(super) struct RowGroup<'a, E> {
    /// `m` query vectors of `d` values, one after the other.
    pub queries: &'a [f32],
    /// Query vectors (1..=[`MAX_GROUP`]).
    pub m: usize,
    /// Head width, a multiple of the width's lanes.
    pub d: usize,
    /// Runs of consecutive positions: keys and values, `d` per position.
    pub runs: &'a [(&'a [E], &'a [E])],
    pub scale: f32,
}

/// The widest vectors the kernel takes heads of width `d` with on this CPU.
pub(super) fn best(d: usize) -> Option<Width> {
    Width::available().find(|w| supports(*w, d))
}

/// Whether the kernel takes heads of width `d` with vectors `w` on this CPU.
pub(super) fn supports(w: Width, d: usize) -> bool {
    d > 0 && d.is_multiple_of(w.lanes()) && Width::available().any(|a| a == w)
}

impl<E: Lanes> RowGroup<'_, E> {
    /// Scores into `scores` (`m` rows of the positions), turned into
    /// `exp(score - max)` (returning the row's maximum and sum into `stats`), then the sums of
    /// the values weighted by them into `out` (`m` vectors of `d`): divided by the sum, that
    /// is the attention of the positions. Runs with vectors `w`.
    pub fn run(&self, w: Width, scores: &mut Vec<f32>, out: &mut [f32], stats: &mut [(f32, f32)]) {
        let (m, d) = (self.m, self.d);
        let span: usize = self.runs.iter().map(|(k, _)| k.len() / d).sum();
        assert!(
            (1..=MAX_GROUP).contains(&m)
                && supports(w, d)
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
        // SAFETY: the CPU runs `w` (`supports`) and the operands' lengths were asserted.
        unsafe {
            match w {
                Width::W512 => self.run_512(scores, span, out, stats),
                Width::W256 => self.run_256(scores, span, out, stats),
            }
        }
    }

    /// # Safety
    /// AVX-512 F; as [`RowGroup::run_with`].
    #[target_feature(enable = "avx512f")]
    unsafe fn run_512(
        &self,
        scores: &mut [f32],
        span: usize,
        out: &mut [f32],
        st: &mut [(f32, f32)],
    ) {
        // SAFETY: the caller's contract.
        unsafe { self.run_with::<__m512>(scores, span, out, st) }
    }

    /// # Safety
    /// AVX2, FMA and F16C; as [`RowGroup::run_with`].
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn run_256(
        &self,
        scores: &mut [f32],
        span: usize,
        out: &mut [f32],
        st: &mut [(f32, f32)],
    ) {
        // SAFETY: the caller's contract.
        unsafe { self.run_with::<__m256>(scores, span, out, st) }
    }

    /// The kernel with vectors `W`.
    ///
    /// # Safety
    /// `W`'s instruction set; the operands as asserted in [`RowGroup::run`].
    #[inline(always)]
    unsafe fn run_with<W: Wide>(
        &self,
        scores: &mut [f32],
        span: usize,
        out: &mut [f32],
        stats: &mut [(f32, f32)],
    ) {
        // SAFETY: the caller's contract.
        unsafe {
            self.scores_of::<W>(scores, span);
            for (row, st) in scores.chunks_exact_mut(span).zip(stats.iter_mut()) {
                *st = exp_from_max::<W>(row);
            }
            self.weighted_of::<W>(scores, span, out);
        }
    }

    /// [`RowGroup::scores`] for `self.m` query vectors.
    ///
    /// # Safety
    /// As [`RowGroup::scores`].
    #[inline(always)]
    unsafe fn scores_of<W: Wide>(&self, scores: &mut [f32], span: usize) {
        // SAFETY: the caller's contract.
        unsafe {
            match self.m {
                1 => self.scores::<W, 1>(scores, span),
                2 => self.scores::<W, 2>(scores, span),
                3 => self.scores::<W, 3>(scores, span),
                4 => self.scores::<W, 4>(scores, span),
                5 => self.scores::<W, 5>(scores, span),
                6 => self.scores::<W, 6>(scores, span),
                7 => self.scores::<W, 7>(scores, span),
                _ => self.scores::<W, 8>(scores, span),
            }
        }
    }

    /// [`RowGroup::weighted`] for `self.m` query vectors.
    ///
    /// # Safety
    /// As [`RowGroup::weighted`].
    #[inline(always)]
    unsafe fn weighted_of<W: Wide>(&self, weights: &[f32], span: usize, out: &mut [f32]) {
        // SAFETY: the caller's contract.
        unsafe {
            match self.m {
                1 => self.weighted::<W, 1>(weights, span, out),
                2 => self.weighted::<W, 2>(weights, span, out),
                3 => self.weighted::<W, 3>(weights, span, out),
                4 => self.weighted::<W, 4>(weights, span, out),
                5 => self.weighted::<W, 5>(weights, span, out),
                6 => self.weighted::<W, 6>(weights, span, out),
                7 => self.weighted::<W, 7>(weights, span, out),
                _ => self.weighted::<W, 8>(weights, span, out),
            }
        }
    }

    /// `scores[j * span + p] = scale * q_j . k_p`, each key row loaded once for the `M` query
    /// vectors, whose sums are independent chains. Four positions at a time while their
    /// `4 M` accumulators, the query vectors and a key vector leave a register spare, else
    /// three, else two (each query load then serves several positions: Llama 3's groups of 4
    /// heads on AVX2, whose 8B decode step spent 77 us a layer in this kernel with the cache in
    /// L3, one position at a time).
    ///
    /// # Safety
    /// `W`'s instruction set; the operands as asserted in [`RowGroup::run`], `M == self.m`,
    /// `scores` holding `M * span` values.
    #[inline(always)]
    unsafe fn scores<W: Wide, const M: usize>(&self, scores: &mut [f32], span: usize) {
        let d = self.d;
        let q = self.queries.as_ptr();
        let s = scores.as_mut_ptr();
        let mut at = 0;
        let row_bytes = d * size_of::<E>();
        // `M P` sums, `M` query vectors and the key vector in registers, with one to spare:
        // with none (three query heads and four positions on AVX2) a sum went to the stack
        // and back on every step.
        let fits = |p: usize| M * p + M + 1 < W::REGISTERS;
        let block = if M <= 4 && fits(4) {
            4
        } else if fits(3) {
            3
        } else if fits(2) {
            2
        } else {
            1
        };
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
            if block > 1 {
                while p + block <= n {
                    // SAFETY: rows p..p + block <= n of the run; as below; prefetches do not
                    // fault but stay inside the run.
                    unsafe {
                        if p + PREFETCH_ROWS + block <= n {
                            let ahead = base.add((p + PREFETCH_ROWS) * d).cast::<i8>();
                            prefetch::<_MM_HINT_T0>(ahead, block * row_bytes);
                        }
                        // the values of these positions, read once the scores are done
                        prefetch::<_MM_HINT_T1>(value_base.add(p * row_bytes), block * row_bytes);
                        let (k, out) = (base.add(p * d), s.add(at + p));
                        match block {
                            4 => self.scores_block::<W, M, 4>(k, out, span),
                            3 => self.scores_block::<W, M, 3>(k, out, span),
                            _ => self.scores_block::<W, M, 2>(k, out, span),
                        }
                    };
                    p += block;
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
                    let mut acc = [W::zero(); M];
                    let mut c = 0;
                    while c < d {
                        let kv = E::lanes::<W>(k.add(c));
                        for (j, a) in acc.iter_mut().enumerate() {
                            *a = W::load(q.add(j * d + c)).mul_add(kv, *a);
                        }
                        c += W::LANES;
                    }
                    for (j, a) in acc.iter().enumerate() {
                        *s.add(j * span + at + p) = a.total() * self.scale;
                    }
                }
            }
            at += n;
        }
    }

    /// The scores of `P` consecutive positions (key rows at `keys`) for the `M` query
    /// vectors, stored at `out + j * span` for vector `j`: the `M P` sums are reduced four at
    /// a time, a quarter of the shuffles of separate reductions.
    ///
    /// # Safety
    /// `W`'s instruction set; `P` rows of `d` keys at `keys` (and the rows
    /// [`PREFETCH_ROWS`] on are only prefetched); `M` query vectors in `queries`; `P` values
    /// writable at each `out + j * span`.
    #[inline(always)]
    unsafe fn scores_block<W: Wide, const M: usize, const P: usize>(
        &self,
        keys: *const E,
        out: *mut f32,
        span: usize,
    ) {
        let d = self.d;
        let q = self.queries.as_ptr();
        // SAFETY: the caller's contract.
        unsafe {
            let mut acc = [[W::zero(); P]; M];
            let mut c = 0;
            while c < d {
                for p in 0..P {
                    let k = E::lanes::<W>(keys.add(p * d + c));
                    for (j, a) in acc.iter_mut().enumerate() {
                        a[p] = W::load(q.add(j * d + c)).mul_add(k, a[p]);
                    }
                }
                c += W::LANES;
            }
            let scale = _mm_set1_ps(self.scale);
            // the sums in (vector, position) order, four to a reduction
            let mut i = 0;
            while i < M * P {
                let four: [W; 4] = std::array::from_fn(|t| {
                    let at = i + t;
                    if at < M * P {
                        acc[at / P][at % P]
                    } else {
                        W::zero()
                    }
                });
                let totals = _mm_mul_ps(W::totals4(&four), scale);
                if P == 4 {
                    _mm_storeu_ps(out.add(i / 4 * span), totals);
                } else {
                    let mut lanes = [0.0f32; 4];
                    _mm_storeu_ps(lanes.as_mut_ptr(), totals);
                    for (t, v) in lanes.iter().enumerate().take(M * P - i) {
                        let at = i + t;
                        *out.add(at / P * span + at % P) = *v;
                    }
                }
                i += 4;
            }
        }
    }

    /// `out_j = sum_p w[j * span + p] v_p`, a few vectors of lanes at a time with `M`
    /// accumulators each over each run.
    ///
    /// # Safety
    /// As [`RowGroup::scores`], `out` holding `M * d` values.
    #[inline(always)]
    unsafe fn weighted<W: Wide, const M: usize>(
        &self,
        weights: &[f32],
        span: usize,
        out: &mut [f32],
    ) {
        let d = self.d;
        let w = weights.as_ptr();
        let o = out.as_mut_ptr();
        // SAFETY: j * d + c + LANES <= M * d <= out.len().
        unsafe {
            for j in 0..M {
                let mut c = 0;
                while c < d {
                    W::zero().store(o.add(j * d + c));
                    c += W::LANES;
                }
            }
        }
        // the widest block of columns whose `M x C` accumulators, `C` value vectors and a
        // broadcast weight fit in the registers with one to spare (as the scores above)
        let fits = |c: usize| (M + 1) * c + 1 < W::REGISTERS;
        let mut at = 0;
        for (_, values) in self.runs {
            let n = values.len() / d;
            let base = values.as_ptr();
            let mut c = 0;
            while c < d {
                // SAFETY: as above; rows p < n of the run, lanes c..c + C LANES <= d; weights
                // j * span + at + p < M * span.
                unsafe {
                    let (v, w, o) = (base.add(c), w.add(at), o.add(c));
                    if fits(4) && c + 4 * W::LANES <= d {
                        weighted_columns::<E, W, M, 4>(v, d, n, w, span, o);
                        c += 4 * W::LANES;
                    } else if fits(3) && c + 3 * W::LANES <= d {
                        weighted_columns::<E, W, M, 3>(v, d, n, w, span, o);
                        c += 3 * W::LANES;
                    } else if fits(2) && c + 2 * W::LANES <= d {
                        weighted_columns::<E, W, M, 2>(v, d, n, w, span, o);
                        c += 2 * W::LANES;
                    } else {
                        weighted_columns::<E, W, M, 1>(v, d, n, w, span, o);
                        c += W::LANES;
                    }
                }
            }
            at += n;
        }
    }
}

/// `out[j * d + c..][..C LANES] += sum_p w[j * span + p] values[p * d + c..][..C LANES]` for
/// the `M` query vectors over `n` positions: `M x C` accumulators, so each value row is read in
/// one pass and the sums are `M C` independent chains.
///
/// # Safety
/// `W`'s instruction set; `n` rows `d` apart at `values`, each with `C LANES` readable; weights
/// at `w + j * span + p` for `j < M`, `p < n`; `C LANES` values at each `out + j * d`.
#[inline(always)]
unsafe fn weighted_columns<E: Lanes, W: Wide, const M: usize, const C: usize>(
    values: *const E,
    d: usize,
    n: usize,
    w: *const f32,
    span: usize,
    out: *mut f32,
) {
    // SAFETY: the caller's contract.
    unsafe {
        let mut acc = [[W::zero(); C]; M];
        for (j, a) in acc.iter_mut().enumerate() {
            for (k, a) in a.iter_mut().enumerate() {
                *a = W::load(out.add(j * d + W::LANES * k));
            }
        }
        for p in 0..n {
            let mut v = [W::zero(); C];
            for (k, v) in v.iter_mut().enumerate() {
                *v = E::lanes::<W>(values.add(p * d + W::LANES * k));
            }
            for (j, a) in acc.iter_mut().enumerate() {
                let wt = W::splat(*w.add(j * span + p));
                for (a, v) in a.iter_mut().zip(&v) {
                    *a = wt.mul_add(*v, *a);
                }
            }
        }
        for (j, a) in acc.iter().enumerate() {
            for (k, a) in a.iter().enumerate() {
                a.store(out.add(j * d + W::LANES * k));
            }
        }
    }
}

/// `s = exp(s - max(s))`; returns `(max(s), sum of the new s)`, a vector at a time (the values
/// past the last full vector one by one).
///
/// # Safety
/// `W`'s instruction set.
#[inline(always)]
unsafe fn exp_from_max<W: Wide>(s: &mut [f32]) -> (f32, f32) {
    let n = s.len();
    let full = n - n % W::LANES;
    let p = s.as_mut_ptr();
    // SAFETY: full vectors at `i + LANES <= full <= n`.
    let (max, sum) = unsafe {
        let mut lanes = W::splat(f32::NEG_INFINITY);
        let mut i = 0;
        while i < full {
            lanes = lanes.max(W::load(p.add(i)));
            i += W::LANES;
        }
        let max = (full..n).fold(lanes.max_total(), |m, i| m.max(*p.add(i)));
        let shift = W::splat(max);
        let mut sum = W::zero();
        let mut i = 0;
        while i < full {
            let e = W::load(p.add(i)).sub(shift).exp_nonpositive();
            e.store(p.add(i));
            sum = sum.add(e);
            i += W::LANES;
        }
        (max, sum.total())
    };
    let mut tail = 0.0;
    for x in &mut s[full..] {
        *x = exp(*x - max);
        tail += *x;
    }
    (max, sum + tail)
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
