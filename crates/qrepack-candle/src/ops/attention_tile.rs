//! Attention of many query vectors (a prompt) against the same keys and values, with the query
//! vectors in the lanes of 512-bit (AVX-512) or 256-bit (AVX2) vectors ([`Wide`]).
//!
//! A pass takes up to two vectors of query vectors ([`lanes`]: 32 or 16) that read one
//! key/value head (a block of query rows of one head, or the heads of a group for a few rows),
//! transposed so that value `c` of every query vector is one contiguous row. Then every step is
//! a vertical operation:
//!
//! * scores of several positions at once (8 with 512-bit vectors, 6 with 256-bit ones): each
//!   key value is broadcast and multiplies a row of the transposed queries, so the accumulators
//!   (positions x 2 vectors of lanes) stay in registers over the head width and no sum crosses
//!   lanes;
//! * the online softmax keeps each query vector's running maximum and sum in its lane, and
//!   the causal mask and sliding window compare a position with each lane's own limits;
//! * the weighted values accumulate transposed as well (each value broadcast against the lanes'
//!   weights), 8 or 4 head columns at a time.
//!
//! A general matrix product (the `gemm` crate, whose AVX-512 kernels need a nightly compiler)
//! computes all the scores of a block first; this kernel never leaves a tile of positions and
//! needs no horizontal sums, transposes only the queries and the output, and masks in
//! registers.

use std::arch::x86_64::*;

use super::wide::{Wide, Width};

/// Lanes of the widest pass: two vectors of 16 lanes (a pass with vectors `w` has
/// [`lanes`]`(w)`).
pub(super) const LANES: usize = 32;

/// Query vectors of one pass with vectors `w`: two vectors of lanes.
pub(super) fn lanes(w: Width) -> usize {
    2 * w.lanes()
}

/// Whether the kernel takes heads of width `d` with vectors `w` on this CPU: the weighted
/// values go 8 head columns at a time.
pub(super) fn supports(w: Width, d: usize) -> bool {
    d > 0 && d.is_multiple_of(8) && Width::available().any(|a| a == w)
}

/// The widest vectors the kernel takes heads of width `d` with on this CPU.
pub(super) fn best(d: usize) -> Option<Width> {
    Width::available().find(|w| supports(*w, d))
}

/// The query vectors of one pass and what each may see.
pub(super) struct Pass<'a> {
    /// The vectors the pass runs with.
    pub w: Width,
    /// Head width.
    pub d: usize,
    /// `d` rows of [`lanes`]`(w)`: value `c` of query vector `i` at `c * lanes + i`, already
    /// multiplied by the score scale (lanes without a query vector hold zeros).
    pub queries: &'a [f32],
    /// Per lane (the first [`lanes`]`(w)`), the first position it sees and the one after its
    /// last.
    pub lo: &'a [i32; LANES],
    pub hi: &'a [i32; LANES],
    /// Per lane, the logit of an attention sink (`-inf`: none).
    pub sinks: &'a [f32; LANES],
    /// Keys and values of consecutive positions from `first`, `d` each, as f32 rows.
    pub keys: &'a [f32],
    pub values: &'a [f32],
    pub first: usize,
}

/// A thread's buffers for the kernel.
#[derive(Default)]
pub(super) struct TileScratch {
    scores: Vec<f32>,
}

/// Positions per step of the online softmax, per position of a score kernel call.
const TILE_CALLS: usize = 8;

impl Pass<'_> {
    /// The attention of each lane, transposed as the queries (`d` rows of
    /// [`lanes`]`(w)`), into `out`.
    pub fn run(&self, out: &mut [f32], scratch: &mut TileScratch) {
        let (d, n) = (self.d, lanes(self.w));
        let lo = self.lo[..n].iter().copied().min().unwrap_or(0).max(0) as usize;
        let hi = self.hi[..n].iter().copied().max().unwrap_or(0).max(0) as usize;
        let positions = self.keys.len() / d.max(1);
        assert!(
            supports(self.w, d)
                && self.queries.len() >= d * n
                && out.len() >= d * n
                && self.keys.len() == self.values.len()
                && self.keys.len().is_multiple_of(d)
                && lo >= self.first
                && hi <= self.first + positions
                && self.lo[..n].iter().zip(&self.hi[..n]).all(|(a, b)| a < b)
                && hi < 1 << 24,
            "attention tile operands out of bounds or CPU not supported"
        );
        scratch.scores.resize(TILE_CALLS * 8 * LANES, 0.0);
        // SAFETY: the CPU runs `w` (`supports`); the assertion bounds every access: the
        // queries and output hold `d * lanes` values, and positions `lo..hi` lie inside the
        // gathered keys and values (positions below 2^24 are exact as f32).
        unsafe {
            match self.w {
                Width::W512 => self.run_512(out, &mut scratch.scores, (lo, hi)),
                Width::W256 => self.run_256(out, &mut scratch.scores, (lo, hi)),
            }
        }
    }

    /// # Safety
    /// AVX-512 F; as [`Pass::run_with`].
    #[target_feature(enable = "avx512f")]
    unsafe fn run_512(&self, out: &mut [f32], scores: &mut [f32], span: (usize, usize)) {
        // SAFETY: the caller's contract.
        unsafe { self.run_with::<__m512, 8, 8>(out, scores, span) }
    }

    /// # Safety
    /// AVX2, FMA and F16C; as [`Pass::run_with`].
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn run_256(&self, out: &mut [f32], scores: &mut [f32], span: (usize, usize)) {
        // SAFETY: the caller's contract.
        unsafe { self.run_with::<__m256, 6, 4>(out, scores, span) }
    }

    /// The pass with vectors `W`, the scores of `P` positions per call (`2 P` accumulators)
    /// and the weighted values `C` head columns at a time (`2 C` accumulators).
    ///
    /// # Safety
    /// `W`'s instruction set and `W::LANES == self.w.lanes()`; the operands as asserted in
    /// [`Pass::run`]; `scores` holds `8 P` rows of `2 W::LANES`.
    #[inline(always)]
    unsafe fn run_with<W: Wide, const P: usize, const C: usize>(
        &self,
        out: &mut [f32],
        scores: &mut [f32],
        (lo, hi): (usize, usize),
    ) {
        let d = self.d;
        let (v_lanes, n_lanes) = (W::LANES, 2 * W::LANES);
        let tile = TILE_CALLS * P;
        let o = out.as_mut_ptr();
        let s = scores.as_mut_ptr();
        let limits = |a: &[i32; LANES]| -> [f32; LANES] { a.map(|x| x as f32) };
        let (lo_f, hi_f) = (limits(self.lo), limits(self.hi));
        // SAFETY (whole body): `o` holds `d * n_lanes`, `s` `tile * n_lanes` values; the loads
        // of the limits and sinks read the first `n_lanes` of their 32; positions come from
        // `lo..hi`.
        unsafe {
            for c in 0..d * 2 {
                W::zero().store(o.add(v_lanes * c));
            }
            let lane_lo = [W::load(lo_f.as_ptr()), W::load(lo_f.as_ptr().add(v_lanes))];
            let lane_hi = [W::load(hi_f.as_ptr()), W::load(hi_f.as_ptr().add(v_lanes))];
            // positions every lane sees: no mask needed inside them
            let all_lo = self.lo[..n_lanes].iter().copied().max().unwrap_or(0).max(0) as usize;
            let all_hi = self.hi[..n_lanes].iter().copied().min().unwrap_or(0).max(0) as usize;
            let mut max = [W::splat(f32::NEG_INFINITY); 2];
            let mut sum = [W::zero(); 2];
            let mut t0 = lo;
            while t0 < hi {
                let n = tile.min(hi - t0);
                let key0 = self.keys.as_ptr().add((t0 - self.first) * d);
                let mut p = 0;
                while p + P <= n {
                    self.scores::<W, P>(key0.add(p * d), s.add(p * n_lanes));
                    p += P;
                }
                while p < n {
                    self.scores::<W, 1>(key0.add(p * d), s.add(p * n_lanes));
                    p += 1;
                }
                if t0 < all_lo || t0 + n > all_hi {
                    for p in 0..n {
                        let at = (t0 + p) as f32;
                        for v in 0..2 {
                            let sp = s.add(p * n_lanes + v_lanes * v);
                            W::load(sp)
                                .seen_between(at, lane_lo[v], lane_hi[v])
                                .store(sp);
                        }
                    }
                }
                for v in 0..2 {
                    let mut tile_max = W::splat(f32::NEG_INFINITY);
                    for p in 0..n {
                        tile_max = tile_max.max(W::load(s.add(p * n_lanes + v_lanes * v)));
                    }
                    let new_max = max[v].max(tile_max);
                    let shift = new_max.finite_or_zero();
                    let factor = max[v].sub(shift).exp_nonpositive();
                    max[v] = new_max;
                    let mut tile_sum = W::zero();
                    for p in 0..n {
                        let sp = s.add(p * n_lanes + v_lanes * v);
                        let e = W::load(sp).sub(shift).exp_nonpositive();
                        e.store(sp);
                        tile_sum = tile_sum.add(e);
                    }
                    sum[v] = sum[v].mul_add(factor, tile_sum);
                    // a lane whose maximum rose rescales what it has summed so far
                    if factor.any_not_one() {
                        for c in 0..d {
                            let op = o.add(c * n_lanes + v_lanes * v);
                            W::load(op).mul(factor).store(op);
                        }
                    }
                }
                let value0 = self.values.as_ptr().add((t0 - self.first) * d);
                let mut c = 0;
                while c < d {
                    weighted_columns::<W, C>(value0.add(c), d, s, n, o.add(c * n_lanes));
                    c += C;
                }
                t0 += n;
            }
            // the sinks join each lane's sum; then divide by it
            for v in 0..2 {
                let sink = W::load(self.sinks.as_ptr().add(v_lanes * v));
                let top = max[v].max(sink);
                let shift = top.finite_or_zero();
                let factor = max[v].sub(shift).exp_nonpositive();
                let total = sum[v].mul_add(factor, sink.sub(shift).exp_nonpositive());
                let scale = factor.div_where_positive(total);
                for c in 0..d {
                    let op = o.add(c * n_lanes + v_lanes * v);
                    W::load(op).mul(scale).store(op);
                }
            }
        }
    }

    /// Scores of `P` consecutive positions from `keys` for every lane, as `P` rows of
    /// `2 W::LANES` at `out`.
    ///
    /// # Safety
    /// `W`'s instruction set; `P` key rows of `d` at `keys`; `2 P W::LANES` values writable
    /// at `out`.
    #[inline(always)]
    unsafe fn scores<W: Wide, const P: usize>(&self, keys: *const f32, out: *mut f32) {
        // SAFETY: the caller's contract, and `queries` holds `d` rows of `2 W::LANES`: step
        // `c` reads query row `c` and key value `c` of each of the `P` rows.
        unsafe {
            let mut acc = [[W::zero(); 2]; P];
            rank_one_updates(&mut acc, self.queries.as_ptr(), keys, (self.d, 1), self.d);
            store_rows(&acc, out);
        }
    }
}

/// `out[c][lane] += sum_p weights[p][lane] * values[p][c]` for the `C` head columns from
/// `values`, over `n` positions whose value rows are `d` apart (rows of `2 W::LANES` lanes).
///
/// # Safety
/// `W`'s instruction set; `n` rows of `d` values at `values` with `C` readable from each;
/// `n` rows of weights; `C` rows of lanes at `out`.
#[inline(always)]
unsafe fn weighted_columns<W: Wide, const C: usize>(
    values: *const f32,
    d: usize,
    weights: *const f32,
    n: usize,
    out: *mut f32,
) {
    // SAFETY: the caller's contract: step `p` reads weight row `p` and value row `p`'s `C`
    // values.
    unsafe {
        let mut acc = [[W::zero(); 2]; C];
        for (c, a) in acc.iter_mut().enumerate() {
            a[0] = W::load(out.add(c * 2 * W::LANES));
            a[1] = W::load(out.add(c * 2 * W::LANES + W::LANES));
        }
        rank_one_updates(&mut acc, weights, values, (1, d), n);
        store_rows(&acc, out);
    }
}

/// The products both kernels are made of: for each of `steps` steps `t`, a row of two vectors
/// of lanes at `lanes + t * 2 W::LANES` times `R` scalars (scalar `i` at `scalars + i *
/// stride.0 + t * stride.1`, broadcast), added to the `R` accumulator rows.
///
/// # Safety
/// `W`'s instruction set; every row and scalar named above readable.
#[inline(always)]
unsafe fn rank_one_updates<W: Wide, const R: usize>(
    acc: &mut [[W; 2]; R],
    lanes: *const f32,
    scalars: *const f32,
    stride: (usize, usize),
    steps: usize,
) {
    // SAFETY: the caller's contract.
    unsafe {
        for t in 0..steps {
            let l0 = W::load(lanes.add(t * 2 * W::LANES));
            let l1 = W::load(lanes.add(t * 2 * W::LANES + W::LANES));
            let col = scalars.add(t * stride.1);
            for (i, a) in acc.iter_mut().enumerate() {
                let x = W::splat(*col.add(i * stride.0));
                a[0] = x.mul_add(l0, a[0]);
                a[1] = x.mul_add(l1, a[1]);
            }
        }
    }
}

/// `R` accumulator rows into `R` rows of `2 W::LANES` at `out`.
///
/// # Safety
/// `W`'s instruction set; `2 R W::LANES` values writable at `out`.
#[inline(always)]
unsafe fn store_rows<W: Wide, const R: usize>(acc: &[[W; 2]; R], out: *mut f32) {
    for (i, a) in acc.iter().enumerate() {
        // SAFETY: row `i < R` of `out`.
        unsafe {
            a[0].store(out.add(i * 2 * W::LANES));
            a[1].store(out.add(i * 2 * W::LANES + W::LANES));
        }
    }
}

/// Transposes 16 vectors of 16 values in registers: lane `i` of result `j` is lane `j` of
/// input `i`.
#[target_feature(enable = "avx512f")]
#[inline]
fn transpose16(r: &mut [__m512; 16]) {
    // pairs of rows interleaved by lane, then pairs of pairs, then 128-bit blocks twice
    let mut t = [_mm512_setzero_ps(); 16];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for i in 0..4 {
        let (a, b, c, d) = (t[4 * i], t[4 * i + 1], t[4 * i + 2], t[4 * i + 3]);
        r[4 * i] = _mm512_shuffle_ps::<0x44>(a, c);
        r[4 * i + 1] = _mm512_shuffle_ps::<0xee>(a, c);
        r[4 * i + 2] = _mm512_shuffle_ps::<0x44>(b, d);
        r[4 * i + 3] = _mm512_shuffle_ps::<0xee>(b, d);
    }
    for i in 0..4 {
        for j in 0..2 {
            let (a, b) = (r[8 * j + i], r[8 * j + 4 + i]);
            t[8 * j + i] = _mm512_shuffle_f32x4::<0x88>(a, b);
            t[8 * j + 4 + i] = _mm512_shuffle_f32x4::<0xdd>(a, b);
        }
    }
    for i in 0..8 {
        r[i] = _mm512_shuffle_f32x4::<0x88>(t[i], t[8 + i]);
        r[8 + i] = _mm512_shuffle_f32x4::<0xdd>(t[i], t[8 + i]);
    }
}

/// Up to [`lanes`]`(w)` vectors of `d` values, vector `i` at `data[starts[i]..]`, times
/// `scale`, transposed into `out` (`d` rows of [`lanes`]`(w)`; lanes past `starts.len()`
/// become 0).
pub(super) fn transpose_in(
    w: Width,
    data: &[f32],
    starts: &[usize],
    d: usize,
    scale: f32,
    out: &mut [f32],
) {
    let n = lanes(w);
    assert!(
        supports(w, d)
            && starts.len() <= n
            && out.len() >= d * n
            && starts.iter().all(|&s| s + d <= data.len()),
        "transposed queries out of bounds or CPU not supported"
    );
    match w {
        // SAFETY: AVX-512 F is present; the assertion bounds every row read and the output.
        Width::W512 => unsafe { transpose_in_avx512(data, starts, d, scale, out) },
        // a pass's work is a multiple of this copy's by its positions: no shuffles needed
        Width::W256 => {
            for (c, row) in out[..d * n].chunks_exact_mut(n).enumerate() {
                for (lane, x) in row.iter_mut().enumerate() {
                    *x = starts.get(lane).map_or(0.0, |s| data[s + c] * scale);
                }
            }
        }
    }
}

/// # Safety
/// As asserted in [`transpose_in`].
#[target_feature(enable = "avx512f")]
unsafe fn transpose_in_avx512(
    data: &[f32],
    starts: &[usize],
    d: usize,
    scale: f32,
    lanes: &mut [f32],
) {
    let factor = _mm512_set1_ps(scale);
    for v in 0..2 {
        let mut c = 0;
        while c < d {
            let (width, cols) = columns_from(c, d);
            let mut r = [_mm512_setzero_ps(); 16];
            for (i, row) in r.iter_mut().enumerate() {
                if let Some(&s) = starts.get(16 * v + i) {
                    // SAFETY: `s + c + width <= s + d <= data.len()`; masked lanes are not read.
                    *row = unsafe { _mm512_maskz_loadu_ps(cols, data.as_ptr().add(s + c)) };
                }
            }
            transpose16(&mut r);
            for (i, row) in r.iter().take(width).enumerate() {
                // SAFETY: row `c + i < d` of `lanes`, lanes `16 v..16 v + 16`.
                unsafe {
                    let at = lanes.as_mut_ptr().add((c + i) * LANES + 16 * v);
                    _mm512_storeu_ps(at, _mm512_mul_ps(*row, factor));
                }
            }
            c += 16;
        }
    }
}

/// The width of the 16-column block from column `c` of `d`, and its mask.
fn columns_from(c: usize, d: usize) -> (usize, __mmask16) {
    let width = 16.min(d - c);
    (width, (((1u32 << width) - 1) & 0xffff) as __mmask16)
}

/// The inverse of [`transpose_in`] without a scale: lane `i` of `lanes` (`d` rows of
/// [`lanes`]`(w)`) into `out[starts[i]..][..d]`.
pub(super) fn transpose_out(
    w: Width,
    lanes_in: &[f32],
    starts: &[usize],
    d: usize,
    out: &mut [f32],
) {
    let n = lanes(w);
    assert!(
        supports(w, d)
            && starts.len() <= n
            && lanes_in.len() >= d * n
            && starts.iter().all(|&s| s + d <= out.len()),
        "transposed output out of bounds or CPU not supported"
    );
    match w {
        // SAFETY: AVX-512 F is present; the assertion bounds every row written and the input.
        Width::W512 => unsafe { transpose_out_avx512(lanes_in, starts, d, out) },
        Width::W256 => {
            for (lane, &s) in starts.iter().enumerate() {
                for (c, o) in out[s..s + d].iter_mut().enumerate() {
                    *o = lanes_in[c * n + lane];
                }
            }
        }
    }
}

/// # Safety
/// As asserted in [`transpose_out`].
#[target_feature(enable = "avx512f")]
unsafe fn transpose_out_avx512(lanes: &[f32], starts: &[usize], d: usize, out: &mut [f32]) {
    for v in 0..starts.len().div_ceil(16) {
        let mut c = 0;
        while c < d {
            let (width, cols) = columns_from(c, d);
            let mut r = [_mm512_setzero_ps(); 16];
            for (i, row) in r.iter_mut().take(width).enumerate() {
                // SAFETY: row `c + i < d` of `lanes`, lanes `16 v..16 v + 16`.
                *row = unsafe { _mm512_loadu_ps(lanes.as_ptr().add((c + i) * LANES + 16 * v)) };
            }
            transpose16(&mut r);
            for (i, row) in r.iter().enumerate() {
                if let Some(&s) = starts.get(16 * v + i) {
                    // SAFETY: `s + c + width <= s + d <= out.len()`; masked lanes not written.
                    unsafe { _mm512_mask_storeu_ps(out.as_mut_ptr().add(s + c), cols, *row) };
                }
            }
            c += 16;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transposes_round_trip() {
        for w in Width::available() {
            let n = lanes(w);
            for d in [8, 24, 64, 80, 256] {
                for count in [1, 5, 8, 16, 17, 32].into_iter().filter(|&c| c <= n) {
                    let data: Vec<f32> = (0..count * (d + 3)).map(|i| i as f32).collect();
                    let starts: Vec<usize> = (0..count).map(|i| i * (d + 3) + 1).collect();
                    let mut lanes = vec![f32::NAN; d * n];
                    transpose_in(w, &data, &starts, d, 2.0, &mut lanes);
                    for c in 0..d {
                        for lane in 0..n {
                            let want = starts.get(lane).map_or(0.0, |s| 2.0 * data[s + c]);
                            assert_eq!(
                                lanes[c * n + lane],
                                want,
                                "{w:?} d {d} lane {lane} col {c}"
                            );
                        }
                    }
                    let mut out = vec![-1.0f32; data.len()];
                    transpose_out(w, &lanes, &starts, d, &mut out);
                    for (i, (o, x)) in out.iter().zip(&data).enumerate() {
                        let inside = starts.iter().any(|&s| (s..s + d).contains(&i));
                        assert_eq!(
                            *o,
                            if inside { 2.0 * x } else { -1.0 },
                            "{w:?} d {d} at {i}"
                        );
                    }
                }
            }
        }
    }
}
