//! Attention of many query vectors (a prompt) against the same keys and values, with 512-bit
//! vectors and the query vectors in the lanes.
//!
//! A pass takes up to [`LANES`] query vectors that read one key/value head (a block of query
//! rows of one head, or the heads of a group for a few rows), transposed so that value `c` of
//! every query vector is one contiguous row. Then every step is a vertical operation:
//!
//! * scores of 8 positions at once: each key value is broadcast and multiplies a row of the
//!   transposed queries, so 16 accumulators (8 positions x 2 vectors of lanes) stay in registers
//!   over the head width and no sum crosses lanes;
//! * the online softmax keeps each query vector's running maximum and sum in its lane, and
//!   the causal mask and sliding window compare a position with each lane's own limits;
//! * the weighted values accumulate transposed as well (each value broadcast against the lanes'
//!   weights), 8 head columns at a time.
//!
//! A general matrix product (the `gemm` crate, whose AVX-512 kernels need a nightly compiler)
//! computes all the scores of a block first; this kernel never leaves a tile of positions and
//! needs no horizontal sums, transposes only the queries and the output, and masks in
//! registers.

use std::arch::x86_64::*;

use super::math::x86::exp16;

/// Query vectors of one pass: two vectors of 16 lanes.
pub(super) const LANES: usize = 32;
/// Positions whose scores one call of the score kernel computes.
const POSITIONS: usize = 8;
/// Positions per step of the online softmax.
const TILE: usize = 64;
/// Head columns the weighted-value kernel accumulates at once.
const COLUMNS: usize = 8;

/// Whether the kernel takes heads of width `d` on this CPU.
pub(super) fn supported(d: usize) -> bool {
    d > 0 && d.is_multiple_of(COLUMNS) && std::is_x86_feature_detected!("avx512f")
}

/// The query vectors of one pass and what each may see.
pub(super) struct Pass<'a> {
    /// Head width.
    pub d: usize,
    /// `d` rows of [`LANES`]: value `c` of query vector `i` at `c * LANES + i`, already
    /// multiplied by the score scale (lanes without a query vector hold zeros).
    pub queries: &'a [f32],
    /// Per lane, the first position it sees and the one after its last.
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

impl Pass<'_> {
    /// The attention of each lane, transposed as the queries (`d` rows of [`LANES`]), into
    /// `out`.
    pub fn run(&self, out: &mut [f32], scratch: &mut TileScratch) {
        let d = self.d;
        let lo = self.lo.iter().copied().min().unwrap_or(0).max(0) as usize;
        let hi = self.hi.iter().copied().max().unwrap_or(0).max(0) as usize;
        let positions = self.keys.len() / d.max(1);
        assert!(
            supported(d)
                && self.queries.len() >= d * LANES
                && out.len() >= d * LANES
                && self.keys.len() == self.values.len()
                && self.keys.len().is_multiple_of(d)
                && lo >= self.first
                && hi <= self.first + positions
                && self.lo.iter().zip(self.hi).all(|(a, b)| a < b),
            "attention tile operands out of bounds or CPU not supported"
        );
        scratch.scores.resize(TILE * LANES, 0.0);
        // SAFETY: AVX-512 F is present (`supported`); the assertion bounds every access: the
        // queries and output hold `d * LANES` values, and positions `lo..hi` lie inside the
        // gathered keys and values.
        unsafe { self.run_avx512(out, &mut scratch.scores, (lo, hi)) }
    }

    /// # Safety
    /// AVX-512 F; the operands as asserted in [`Pass::run`]; `scores` holds `TILE * LANES`.
    #[target_feature(enable = "avx512f")]
    unsafe fn run_avx512(&self, out: &mut [f32], scores: &mut [f32], (lo, hi): (usize, usize)) {
        let d = self.d;
        let o = out.as_mut_ptr();
        let s = scores.as_mut_ptr();
        // SAFETY (whole body): `o` holds `d * LANES`, `s` `TILE * LANES` values; the loads of
        // the limits and sinks read the arrays' 32 values; positions come from `lo..hi`.
        unsafe {
            for c in 0..d * LANES / 16 {
                _mm512_storeu_ps(o.add(16 * c), _mm512_setzero_ps());
            }
            let lane_lo = [
                _mm512_loadu_si512(self.lo.as_ptr().cast()),
                _mm512_loadu_si512(self.lo.as_ptr().add(16).cast()),
            ];
            let lane_hi = [
                _mm512_loadu_si512(self.hi.as_ptr().cast()),
                _mm512_loadu_si512(self.hi.as_ptr().add(16).cast()),
            ];
            // positions every lane sees: no mask needed inside them
            let all_lo = self.lo.iter().copied().max().unwrap_or(0).max(0) as usize;
            let all_hi = self.hi.iter().copied().min().unwrap_or(0).max(0) as usize;
            let mut max = [_mm512_set1_ps(f32::NEG_INFINITY); 2];
            let mut sum = [_mm512_setzero_ps(); 2];
            let mut t0 = lo;
            while t0 < hi {
                let n = TILE.min(hi - t0);
                let key0 = self.keys.as_ptr().add((t0 - self.first) * d);
                let mut p = 0;
                while p + POSITIONS <= n {
                    self.scores::<POSITIONS>(key0.add(p * d), s.add(p * LANES));
                    p += POSITIONS;
                }
                while p < n {
                    self.scores::<1>(key0.add(p * d), s.add(p * LANES));
                    p += 1;
                }
                if t0 < all_lo || t0 + n > all_hi {
                    for p in 0..n {
                        let at = _mm512_set1_epi32((t0 + p) as i32);
                        for v in 0..2 {
                            let seen = _mm512_cmpge_epi32_mask(at, lane_lo[v])
                                & _mm512_cmplt_epi32_mask(at, lane_hi[v]);
                            let sp = s.add(p * LANES + 16 * v);
                            let masked = _mm512_mask_blend_ps(
                                seen,
                                _mm512_set1_ps(f32::NEG_INFINITY),
                                _mm512_loadu_ps(sp),
                            );
                            _mm512_storeu_ps(sp, masked);
                        }
                    }
                }
                for v in 0..2 {
                    let mut tile_max = _mm512_set1_ps(f32::NEG_INFINITY);
                    for p in 0..n {
                        tile_max =
                            _mm512_max_ps(tile_max, _mm512_loadu_ps(s.add(p * LANES + 16 * v)));
                    }
                    let new_max = _mm512_max_ps(max[v], tile_max);
                    let shift = finite_or_zero(new_max);
                    let factor = exp16(_mm512_sub_ps(max[v], shift));
                    max[v] = new_max;
                    let mut tile_sum = _mm512_setzero_ps();
                    for p in 0..n {
                        let sp = s.add(p * LANES + 16 * v);
                        let e = exp16(_mm512_sub_ps(_mm512_loadu_ps(sp), shift));
                        _mm512_storeu_ps(sp, e);
                        tile_sum = _mm512_add_ps(tile_sum, e);
                    }
                    sum[v] = _mm512_fmadd_ps(sum[v], factor, tile_sum);
                    // a lane whose maximum rose rescales what it has summed so far
                    if _mm512_cmp_ps_mask::<_CMP_NEQ_UQ>(factor, _mm512_set1_ps(1.0)) != 0 {
                        for c in 0..d {
                            let op = o.add(c * LANES + 16 * v);
                            _mm512_storeu_ps(op, _mm512_mul_ps(_mm512_loadu_ps(op), factor));
                        }
                    }
                }
                let value0 = self.values.as_ptr().add((t0 - self.first) * d);
                let mut c = 0;
                while c < d {
                    weighted_columns(value0.add(c), d, s, n, o.add(c * LANES));
                    c += COLUMNS;
                }
                t0 += n;
            }
            // the sinks join each lane's sum; then divide by it
            for v in 0..2 {
                let sink = _mm512_loadu_ps(self.sinks.as_ptr().add(16 * v));
                let top = _mm512_max_ps(max[v], sink);
                let shift = finite_or_zero(top);
                let factor = exp16(_mm512_sub_ps(max[v], shift));
                let total = _mm512_fmadd_ps(sum[v], factor, exp16(_mm512_sub_ps(sink, shift)));
                let positive = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(total, _mm512_setzero_ps());
                let scale = _mm512_maskz_div_ps(positive, factor, total);
                for c in 0..d {
                    let op = o.add(c * LANES + 16 * v);
                    _mm512_storeu_ps(op, _mm512_mul_ps(_mm512_loadu_ps(op), scale));
                }
            }
        }
    }

    /// Scores of `P` consecutive positions from `keys` for every lane, as `P` rows of
    /// [`LANES`] at `out`.
    ///
    /// # Safety
    /// AVX-512 F; `P` key rows of `d` at `keys`; `P * LANES` values writable at `out`.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn scores<const P: usize>(&self, keys: *const f32, out: *mut f32) {
        let mut acc = [[_mm512_setzero_ps(); 2]; P];
        // SAFETY: the caller's contract, and `queries` holds `d * LANES` values: step `c`
        // reads query row `c` and key value `c` of each of the `P` rows.
        unsafe {
            rank_one_updates(&mut acc, self.queries.as_ptr(), keys, (self.d, 1), self.d);
            store_rows(&acc, out);
        }
    }
}

/// `out[c][lane] += sum_p weights[p][lane] * values[p][c]` for the [`COLUMNS`] head columns
/// from `values`, over `n` positions whose value rows are `d` apart.
///
/// # Safety
/// AVX-512 F; `n` rows of `d` values at `values` with `COLUMNS` readable from each;
/// `n * LANES` weights; `COLUMNS` rows of [`LANES`] at `out`.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn weighted_columns(
    values: *const f32,
    d: usize,
    weights: *const f32,
    n: usize,
    out: *mut f32,
) {
    // SAFETY: the caller's contract: step `p` reads weight row `p` and value row `p`'s
    // `COLUMNS` values.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); 2]; COLUMNS];
        for (c, a) in acc.iter_mut().enumerate() {
            a[0] = _mm512_loadu_ps(out.add(c * LANES));
            a[1] = _mm512_loadu_ps(out.add(c * LANES + 16));
        }
        rank_one_updates(&mut acc, weights, values, (1, d), n);
        store_rows(&acc, out);
    }
}

/// The products both kernels are made of: for each of `steps` steps `t`, a row of [`LANES`]
/// at `lanes + t * LANES` times `R` scalars (scalar `i` at `scalars + i * stride.0 + t *
/// stride.1`, broadcast), added to the `R` accumulator rows.
///
/// # Safety
/// AVX-512 F; every row and scalar named above readable.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn rank_one_updates<const R: usize>(
    acc: &mut [[__m512; 2]; R],
    lanes: *const f32,
    scalars: *const f32,
    stride: (usize, usize),
    steps: usize,
) {
    // SAFETY: the caller's contract.
    unsafe {
        for t in 0..steps {
            let l0 = _mm512_loadu_ps(lanes.add(t * LANES));
            let l1 = _mm512_loadu_ps(lanes.add(t * LANES + 16));
            let col = scalars.add(t * stride.1);
            for (i, a) in acc.iter_mut().enumerate() {
                let x = _mm512_set1_ps(*col.add(i * stride.0));
                a[0] = _mm512_fmadd_ps(x, l0, a[0]);
                a[1] = _mm512_fmadd_ps(x, l1, a[1]);
            }
        }
    }
}

/// `R` accumulator rows into `R` rows of [`LANES`] at `out`.
///
/// # Safety
/// AVX-512 F; `R * LANES` values writable at `out`.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn store_rows<const R: usize>(acc: &[[__m512; 2]; R], out: *mut f32) {
    for (i, a) in acc.iter().enumerate() {
        // SAFETY: row `i < R` of `out`.
        unsafe {
            _mm512_storeu_ps(out.add(i * LANES), a[0]);
            _mm512_storeu_ps(out.add(i * LANES + 16), a[1]);
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

/// Up to [`LANES`] vectors of `d` values, vector `i` at `data[starts[i]..]`, times `scale`,
/// transposed into `lanes` (`d` rows of [`LANES`]; lanes past `starts.len()` become 0).
pub(super) fn transpose_in(
    data: &[f32],
    starts: &[usize],
    d: usize,
    scale: f32,
    lanes: &mut [f32],
) {
    assert!(
        supported(d)
            && starts.len() <= LANES
            && lanes.len() >= d * LANES
            && starts.iter().all(|&s| s + d <= data.len()),
        "transposed queries out of bounds or CPU not supported"
    );
    // SAFETY: AVX-512 F is present; the assertion bounds every row read and the output.
    unsafe { transpose_in_avx512(data, starts, d, scale, lanes) }
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
/// [`LANES`]) into `out[starts[i]..][..d]`.
pub(super) fn transpose_out(lanes: &[f32], starts: &[usize], d: usize, out: &mut [f32]) {
    assert!(
        supported(d)
            && starts.len() <= LANES
            && lanes.len() >= d * LANES
            && starts.iter().all(|&s| s + d <= out.len()),
        "transposed output out of bounds or CPU not supported"
    );
    // SAFETY: AVX-512 F is present; the assertion bounds every row written and the input.
    unsafe { transpose_out_avx512(lanes, starts, d, out) }
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

/// `x`, with `-inf` lanes (nothing seen yet) as 0, so that `exp(x - that)` is 0, never NaN.
#[target_feature(enable = "avx512f")]
#[inline]
fn finite_or_zero(x: __m512) -> __m512 {
    let none = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(x, _mm512_set1_ps(f32::NEG_INFINITY));
    _mm512_mask_blend_ps(none, x, _mm512_setzero_ps())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transposes_round_trip() {
        if !std::is_x86_feature_detected!("avx512f") {
            return;
        }
        for d in [8, 24, 64, 80, 256] {
            for count in [1, 5, 16, 17, 32] {
                let data: Vec<f32> = (0..count * (d + 3)).map(|i| i as f32).collect();
                let starts: Vec<usize> = (0..count).map(|i| i * (d + 3) + 1).collect();
                let mut lanes = vec![f32::NAN; d * LANES];
                transpose_in(&data, &starts, d, 2.0, &mut lanes);
                for c in 0..d {
                    for lane in 0..LANES {
                        let want = starts.get(lane).map_or(0.0, |s| 2.0 * data[s + c]);
                        assert_eq!(lanes[c * LANES + lane], want, "d {d} lane {lane} col {c}");
                    }
                }
                let mut out = vec![-1.0f32; data.len()];
                transpose_out(&lanes, &starts, d, &mut out);
                for (i, (o, x)) in out.iter().zip(&data).enumerate() {
                    let inside = starts.iter().any(|&s| (s..s + d).contains(&i));
                    assert_eq!(*o, if inside { 2.0 * x } else { -1.0 }, "d {d} at {i}");
                }
            }
        }
    }
}
