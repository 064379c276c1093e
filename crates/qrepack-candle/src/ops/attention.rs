//! Causal multi-head attention with grouped-query heads over a paged key/value cache
//! ([`KvCache`]).
//!
//! For a block of query rows and one key/value head, the keys and values the block sees are
//! gathered from the cache's pages as f32 rows; per query head, the scores against them are one
//! matrix product (`Q K^T`), each row's softmax runs over its own positions (causal mask,
//! sliding window), and the output is a second product (`P V`) written straight into the output
//! rows. The products are the `gemm` crate's (candle's own CPU GEMM, with its AVX2 / NEON
//! kernels chosen at run time); on AVX-512 and AVX2 a tiled kernel (`attention_tile`) replaces both
//! products and the softmax, with the query vectors in the lanes. Prompts are split over the
//! thread pool by blocks of query rows. A single row (a decode step) on AVX-512 or AVX2 reads
//! the cache in place with its own kernel (`attention_row`), its positions cut into chunks over
//! the threads and merged; elsewhere it is split by key/value head. Calls too small to be worth waking the pool run on the calling
//! thread.

use multiversion::multiversion;
use rayon::prelude::*;

use super::kv_cache::{self, KvCache, Page, Pages};
use super::math::exp;
#[cfg(target_arch = "x86_64")]
use crate::decoder::sized;

/// The head structure of an attention layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heads {
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads; `n_head` is a multiple of it, and query head `h` reads key/value head
    /// `h / (n_head / n_kv_head)`.
    pub n_kv_head: usize,
    /// Width of one head.
    pub head_dim: usize,
}

impl Heads {
    /// Query heads per key/value head.
    pub fn group(&self) -> usize {
        self.n_head / self.n_kv_head
    }
}

/// A matrix whose row `r` is `data[r * stride + offset..][..width]` (the query part of a fused
/// q/k/v product, say).
#[derive(Clone, Copy, Debug)]
pub struct Rows<'a> {
    /// The storage.
    pub data: &'a [f32],
    /// Distance between rows.
    pub stride: usize,
    /// Start of row 0.
    pub offset: usize,
}

impl<'a> Rows<'a> {
    /// Row `r`, from its offset to the end of the row stride.
    #[cfg(test)]
    fn row(&self, r: usize) -> &'a [f32] {
        &self.data[r * self.stride + self.offset..]
    }
}

/// One attention call: the queries of `seq` consecutive positions starting at `first_pos`
/// against the cached keys and values of positions `0..first_pos + seq`.
#[derive(Clone, Copy, Debug)]
pub struct Attention<'a> {
    /// The heads.
    pub heads: Heads,
    /// `seq` rows of `n_head * head_dim` queries (head `h` at `h * head_dim`).
    pub queries: Rows<'a>,
    /// Query rows.
    pub seq: usize,
    /// Position of query row 0; row `r` attends to positions `..= first_pos + r`.
    pub first_pos: usize,
    /// The cache, holding at least `first_pos + seq` positions (those of this call's rows
    /// appended).
    pub cache: &'a KvCache,
    /// Multiplier of the scores (usually `1 / sqrt(head_dim)`).
    pub scale: f32,
    /// Sliding window: row at position `p` sees only positions `> p - window` (`None`: all).
    pub window: Option<usize>,
    /// Per query head, a logit that joins each softmax without a value of its own (gpt-oss's
    /// attention sinks): it takes a share of the weight, and the positions share the rest.
    /// Not scaled by [`Attention::scale`].
    pub sinks: Option<&'a [f32]>,
}

/// Query rows per task of a prompt: enough rows that the products over the keys and values
/// run as matrix products, few enough that a 512-token prompt gives each thread several tasks
/// (the causal rows grow in cost, and work stealing evens them out).
const ROW_BLOCK: usize = 32;
/// The items in the order first, last, second, second to last, ...: under a causal mask a
/// block of later rows sees more positions, and rayon first hands each thread a half of the
/// list, so in order one half carried most of the work (a prompt's first part of 128 rows, four
/// blocks over two threads: 16 + 48 against 80 + 112 positions a row).
fn light_and_heavy<T>(items: impl Iterator<Item = T>) -> Vec<T> {
    let mut rest: std::collections::VecDeque<T> = items.collect();
    let mut order = Vec::with_capacity(rest.len());
    while let Some(first) = rest.pop_front() {
        order.push(first);
        order.extend(rest.pop_back());
    }
    order
}

/// Multiply-adds below which a call runs on the calling thread: waking the pool costs more.
const SERIAL_WORK: usize = 1 << 20;
/// The same for a single query row, whose work is bound by reading the cache from memory.
const SERIAL_ROW_WORK: usize = 1 << 16;
/// Fewest positions per chunk of a single row split over threads.
#[cfg(target_arch = "x86_64")]
const MIN_ROW_CHUNK: usize = 64;

impl Attention<'_> {
    fn check(&self, out: &[f32]) -> Result<(), String> {
        let h = self.heads;
        if h.n_kv_head == 0 || !h.n_head.is_multiple_of(h.n_kv_head) || h.head_dim == 0 {
            return Err(format!(
                "{} query heads cannot share {} key/value heads of width {}",
                h.n_head, h.n_kv_head, h.head_dim
            ));
        }
        let width = h.n_head * h.head_dim;
        if self.seq > 0 {
            let last = (self.seq - 1) * self.queries.stride + self.queries.offset + width;
            if self.queries.data.len() < last {
                return Err(format!(
                    "{} query rows of {width} need {last} values, have {}",
                    self.seq,
                    self.queries.data.len()
                ));
            }
        }
        let c = self.cache;
        if c.n_kv_head() != h.n_kv_head || c.head_dim() != h.head_dim {
            return Err(format!(
                "a cache of {} key/value heads of width {} for {} heads of width {}",
                c.n_kv_head(),
                c.head_dim(),
                h.n_kv_head,
                h.head_dim
            ));
        }
        if c.len() < self.first_pos + self.seq {
            return Err(format!(
                "{} positions of keys and values needed, the cache has {}",
                self.first_pos + self.seq,
                c.len()
            ));
        }
        if out.len() != self.seq * width {
            return Err(format!(
                "the output of {} rows of {width} has {} values",
                self.seq,
                out.len()
            ));
        }
        if self.window == Some(0) {
            return Err("a sliding window of 0 positions sees nothing".into());
        }
        if let Some(s) = self.sinks {
            if s.len() != h.n_head {
                return Err(format!("{} sinks for {} query heads", s.len(), h.n_head));
            }
        }
        Ok(())
    }

    /// The positions row `r` attends to.
    fn visible(&self, r: usize) -> (usize, usize) {
        let p = self.first_pos + r;
        let lo = self.window.map_or(0, |w| (p + 1).saturating_sub(w));
        (lo, p + 1)
    }

    /// Runs the attention into `out` (`seq` rows of `n_head * head_dim`), on the current rayon
    /// pool; an error when the shapes do not fit.
    pub fn run(&self, out: &mut [f32]) -> Result<(), String> {
        self.run_with(out, Kernels::for_cpu(self.heads.head_dim))
    }

    /// [`Attention::run`] with the given kernels.
    fn run_with(&self, out: &mut [f32], kernels: Kernels) -> Result<(), String> {
        self.check(out)?;
        if self.seq == 0 {
            return Ok(());
        }
        match self.cache.pages() {
            Pages::F32(p) => self.run_on(p, out, kernels),
            Pages::F16(p) => self.run_on(p, out, kernels),
        }
        Ok(())
    }

    /// [`Attention::run`] on the cache's pages, the shapes checked.
    fn run_on<E: Elem>(&self, pages: &[Page<E>], out: &mut [f32], kernels: Kernels) {
        let h = self.heads;
        #[cfg(target_arch = "x86_64")]
        if let (1, Some(w)) = (self.seq, kernels.row) {
            self.one_row(pages, out, w);
            return;
        }
        let width = h.n_head * h.head_dim;
        let span = self.visible(self.seq - 1).1 - self.visible(0).0;
        let work = self.seq * h.n_head * span * h.head_dim;
        let threads = rayon::current_num_threads();
        let one_row_split = self.seq == 1 && h.n_kv_head > 1 && work >= SERIAL_ROW_WORK;
        if (work < SERIAL_WORK && !one_row_split) || threads == 1 {
            let mut scratch = Scratch::default();
            for (b, rows) in out.chunks_mut(ROW_BLOCK * width).enumerate() {
                for g in 0..h.n_kv_head {
                    self.attend_block(pages, b * ROW_BLOCK, g, rows, &mut scratch, kernels);
                }
            }
        } else if self.seq == 1 && h.n_kv_head > 1 {
            // One row: the query heads of one key/value head are contiguous in it.
            out.par_chunks_mut(h.group() * h.head_dim)
                .enumerate()
                .for_each_init(Scratch::default, |scratch, (g, part)| {
                    self.attend_block(pages, 0, g, part, scratch, kernels)
                });
        } else {
            let block = ROW_BLOCK.min(self.seq.div_ceil(2 * threads)).max(1);
            light_and_heavy(out.chunks_mut(block * width).enumerate())
                .into_par_iter()
                .with_max_len(1)
                .for_each_init(Scratch::default, |scratch, (b, rows)| {
                    for g in 0..h.n_kv_head {
                        self.attend_block(pages, b * block, g, rows, scratch, kernels);
                    }
                });
        }
    }

    /// A single query row with the kernel of vectors `w`, reading the cache in place: the positions
    /// of each key/value head (and each part of at most `MAX_GROUP` of its query heads) are
    /// cut into chunks, enough to keep every thread streaming, each chunk's softmax left open;
    /// the chunks of a head are then merged.
    #[cfg(target_arch = "x86_64")]
    fn one_row<E: Elem>(&self, pages: &[Page<E>], out: &mut [f32], w: super::wide::Width) {
        use super::attention_row::{RowGroup, MAX_GROUP};
        let h = self.heads;
        let (d, group) = (h.head_dim, h.group());
        let (lo, hi) = self.visible(0);
        let span = hi - lo;
        let parts = group.div_ceil(MAX_GROUP);
        let part_len = group.div_ceil(parts);
        let units = h.n_kv_head * parts;
        let threads = rayon::current_num_threads();
        let work = span * h.n_head * d;
        let chunks = if work < SERIAL_ROW_WORK || threads == 1 {
            1
        } else {
            (2 * threads)
                .div_ceil(units)
                .min(span.div_ceil(MIN_ROW_CHUNK))
                .max(1)
        };
        let tasks = units * chunks;
        let mut partial = vec![0.0f32; tasks * part_len * d];
        let mut stats = vec![(0.0f32, 0.0f32); tasks * part_len];
        // the query heads `first..first + m` of unit `u`
        let heads_of = |u: usize| {
            let (g, part) = (u / parts, u % parts);
            let first = g * group + part * part_len;
            (g, first, part_len.min(group - part * part_len))
        };
        let task = |t: usize, o: &mut [f32], st: &mut [(f32, f32)], scores: &mut Vec<f32>| {
            let (u, c) = (t / chunks, t % chunks);
            let (g, first, m) = heads_of(u);
            let (a, b) = (lo + span * c / chunks, lo + span * (c + 1) / chunks);
            let runs: Vec<(&[E], &[E])> = kv_cache::runs(pages, d, g, a, b).collect();
            let q0 = self.queries.offset + first * d;
            RowGroup {
                queries: &self.queries.data[q0..q0 + m * d],
                m,
                d,
                runs: &runs,
                scale: self.scale,
            }
            .run(w, scores, o, st);
        };
        if tasks == 1 {
            task(0, &mut partial, &mut stats, &mut Vec::new());
        } else {
            partial
                .par_chunks_mut(part_len * d)
                .zip(stats.par_chunks_mut(part_len))
                .with_max_len(1)
                .enumerate()
                .for_each_init(Vec::new, |scores, (t, (o, st))| task(t, o, st, scores));
        }
        // merge each query head's chunks: rescale each to the largest maximum
        for u in 0..units {
            let (_, first, m) = heads_of(u);
            for j in 0..m {
                let at = |c: usize| (u * chunks + c) * part_len + j;
                let sink = self.sinks.map(|s| s[first + j]);
                let max = (0..chunks)
                    .map(|c| stats[at(c)].0)
                    .fold(sink.unwrap_or(f32::NEG_INFINITY), f32::max);
                let dst = &mut out[(first + j) * d..][..d];
                dst.fill(0.0);
                let mut total = 0.0f32;
                for c in 0..chunks {
                    let (cmax, sum) = stats[at(c)];
                    let f = exp(cmax - max);
                    total += f * sum;
                    let src = &partial[at(c) * d..][..d];
                    for (o, s) in dst.iter_mut().zip(src) {
                        *o += f * s;
                    }
                }
                if let Some(z) = sink {
                    total += exp(z - max);
                }
                let inv = if total > 0.0 { 1.0 / total } else { 0.0 };
                dst.iter_mut().for_each(|o| *o *= inv);
            }
        }
    }

    /// The query heads of key/value head `g` for the query rows from `r0` on that `out`
    /// holds: `out` is either whole output rows or, for a single row, just the group's heads.
    ///
    /// The keys and values the rows see are gathered as f32 rows; per query head, the scores
    /// of the rows against every position any of them sees are one matrix product (`Q K^T`),
    /// the softmax runs over each row's own positions (the others get weight 0), and the
    /// weighted values are a second product (`P V`) written straight into `out`.
    fn attend_block<E: Elem>(
        &self,
        pages: &[Page<E>],
        r0: usize,
        g: usize,
        out: &mut [f32],
        scratch: &mut Scratch,
        kernels: Kernels,
    ) {
        let h = self.heads;
        let (d, group) = (h.head_dim, h.group());
        let width = h.n_head * d;
        // a single row's part of the group's heads, or whole rows
        let (rows, group_col) = if self.seq == 1 && out.len() == group * d {
            (1, 0)
        } else {
            (out.len() / width, g * group * d)
        };
        let lo = (0..rows).map(|r| self.visible(r0 + r).0).min().unwrap_or(0);
        let hi = self.visible(r0 + rows - 1).1;
        kv_cache::gather(
            pages,
            d,
            g,
            (lo, hi),
            &mut scratch.keys,
            &mut scratch.values,
        );
        #[cfg(target_arch = "x86_64")]
        if let Some(w) = kernels.tile {
            self.attend_tiled(w, r0, rows, g, (group_col, width), lo, out, scratch);
            return;
        }
        let _ = kernels;
        let kv = Gathered {
            keys: &scratch.keys,
            values: &scratch.values,
            first: lo,
        };
        let scores = &mut scratch.scores;
        let q_row0 = r0 * self.queries.stride + self.queries.offset + g * group * d;
        if rows == 1 {
            // One row: the group's query heads are `group` vectors `d` apart that see the
            // same positions, so each product takes them all at once.
            let vis = self.visible(r0);
            let sink = |i: usize| self.sinks.map(|s| s[g * group + i]);
            self.pass(
                &kv,
                group,
                (q_row0, d),
                (group_col, d),
                out,
                scores,
                |_| vis,
                sink,
            );
        } else {
            for j in 0..group {
                let q = (q_row0 + j * d, self.queries.stride);
                let o = (group_col + j * d, width);
                let sink = |_| self.sinks.map(|s| s[g * group + j]);
                let visible = |r| self.visible(r0 + r);
                self.pass(&kv, rows, q, o, out, scores, visible, sink);
            }
        }
    }

    /// The tiled kernel on the rows `r0..r0 + rows` and the query heads of key/value head `g`,
    /// their keys and values gathered in `scratch` from position `first`: the (row, head)
    /// pairs go [`lanes`](super::attention_tile::lanes)`(w)` to a pass, head by head; the output of
    /// row `r`, head `j` of the group lands at `out[r * cols.1 + cols.0 + j * d..]`.
    #[cfg(target_arch = "x86_64")]
    #[allow(clippy::too_many_arguments)]
    fn attend_tiled(
        &self,
        w: super::wide::Width,
        r0: usize,
        rows: usize,
        g: usize,
        cols: (usize, usize),
        first: usize,
        out: &mut [f32],
        scratch: &mut Scratch,
    ) {
        use super::attention_tile::{lanes as lanes_of, transpose_in, transpose_out, Pass, LANES};
        let h = self.heads;
        let (d, group) = (h.head_dim, h.group());
        let pairs = rows * group;
        let n_lanes = lanes_of(w);
        let lanes = sized(&mut scratch.lanes, d * n_lanes);
        let lanes_out = sized(&mut scratch.lanes_out, d * n_lanes);
        let mut q_starts = Vec::with_capacity(n_lanes);
        let mut out_starts = Vec::with_capacity(n_lanes);
        for start in (0..pairs).step_by(n_lanes) {
            let count = n_lanes.min(pairs - start);
            let (mut lo, mut hi) = ([0i32; LANES], [0i32; LANES]);
            let mut sinks = [f32::NEG_INFINITY; LANES];
            q_starts.clear();
            out_starts.clear();
            for lane in 0..n_lanes {
                // lanes past the pairs repeat the first one's limits and are not stored
                let pair = start + if lane < count { lane } else { 0 };
                let (j, r) = (pair / rows, pair % rows);
                let (a, b) = self.visible(r0 + r);
                (lo[lane], hi[lane]) = (a as i32, b as i32);
                if lane >= count {
                    continue;
                }
                let head = g * group + j;
                if let Some(s) = self.sinks {
                    sinks[lane] = s[head];
                }
                q_starts.push((r0 + r) * self.queries.stride + self.queries.offset + head * d);
                out_starts.push(r * cols.1 + cols.0 + j * d);
            }
            transpose_in(w, self.queries.data, &q_starts, d, self.scale, lanes);
            Pass {
                w,
                d,
                queries: lanes,
                lo: &lo,
                hi: &hi,
                sinks: &sinks,
                keys: &scratch.keys,
                values: &scratch.values,
                first,
            }
            .run(lanes_out, &mut scratch.tile);
            transpose_out(w, lanes_out, &out_starts, d, out);
        }
    }

    /// `m` query vectors (the first at `q.0` of the queries, the next `q.1` further on)
    /// against the gathered keys and values: scores (`Q K^T`), each vector's softmax over the
    /// positions `visible(i)` gives it, weighted values (`P V`) into `out` from `o.0`, `o.1`
    /// apart. Vector `i`'s softmax takes in `sink(i)` when there is one.
    #[allow(clippy::too_many_arguments)]
    fn pass(
        &self,
        kv: &Gathered<'_>,
        m: usize,
        q: (usize, usize),
        o: (usize, usize),
        out: &mut [f32],
        scratch: &mut Vec<f32>,
        visible: impl Fn(usize) -> (usize, usize),
        sink: impl Fn(usize) -> Option<f32>,
    ) {
        let d = self.heads.head_dim;
        let lo = (0..m).map(|i| visible(i).0).min().unwrap_or(0);
        let hi = (0..m).map(|i| visible(i).1).max().unwrap_or(0);
        let span = hi - lo;
        let skip = (lo - kv.first) * d;
        assert!(
            lo >= kv.first
                && q.0 + (m - 1) * q.1 + d <= self.queries.data.len()
                && skip + span * d <= kv.keys.len().min(kv.values.len())
                && o.0 + (m - 1) * o.1 + d <= out.len(),
            "attention operands out of bounds"
        );
        scratch.clear();
        scratch.resize(m * span, 0.0);
        // SAFETY: the assertion above bounds every element read: query vectors `q.0 + i * q.1
        // .. + d` for `i < m`, the gathered keys and values of positions `lo..hi` (`d` each);
        // the scores are `m x span` in `scratch`, sized just above; nothing else holds these
        // buffers while the product runs.
        unsafe {
            gemm::gemm(
                m,
                span,
                d,
                scratch.as_mut_ptr(),
                1,
                span as isize,
                false,
                self.queries.data.as_ptr().add(q.0),
                1,
                q.1 as isize,
                kv.keys.as_ptr().add(skip),
                d as isize,
                1,
                0.0,
                self.scale,
                false,
                false,
                false,
                gemm::Parallelism::None,
            );
        }
        for (i, s) in scratch.chunks_exact_mut(span).enumerate() {
            let (a, b) = visible(i);
            softmax_in_place(s, a - lo, b - lo, sink(i));
        }
        // SAFETY: the weights are the `m x span` scores; the values of positions `lo..hi`
        // and the output vectors `o.0 + i * o.1 .. + d` are inside their slices (the
        // assertion above); `out` is this call's own.
        unsafe {
            gemm::gemm(
                m,
                d,
                span,
                out.as_mut_ptr().add(o.0),
                1,
                o.1 as isize,
                false,
                scratch.as_ptr(),
                1,
                span as isize,
                kv.values.as_ptr().add(skip),
                1,
                d as isize,
                0.0,
                1.0,
                false,
                false,
                false,
                gemm::Parallelism::None,
            );
        }
    }
}

/// A cache element the kernels of this CPU read.
#[cfg(target_arch = "x86_64")]
trait Elem: super::attention_row::Lanes {}
#[cfg(target_arch = "x86_64")]
impl<E: super::attention_row::Lanes> Elem for E {}
#[cfg(not(target_arch = "x86_64"))]
trait Elem: kv_cache::KvElem {}
#[cfg(not(target_arch = "x86_64"))]
impl<E: kv_cache::KvElem> Elem for E {}

/// A thread's buffers for [`Attention::attend_block`].
#[derive(Default)]
struct Scratch {
    keys: Vec<f32>,
    values: Vec<f32>,
    scores: Vec<f32>,
    /// The tiled kernel's transposed queries and output.
    #[cfg(target_arch = "x86_64")]
    lanes: Vec<f32>,
    #[cfg(target_arch = "x86_64")]
    lanes_out: Vec<f32>,
    #[cfg(target_arch = "x86_64")]
    tile: super::attention_tile::TileScratch,
}

/// Which of this CPU's kernels an attention call may use (the portable path otherwise).
#[derive(Clone, Copy, Debug)]
struct Kernels {
    /// The one-row kernel for a decode step, and its vector width.
    #[cfg(target_arch = "x86_64")]
    row: Option<super::wide::Width>,
    /// The tiled kernel for several rows, and its vector width.
    #[cfg(target_arch = "x86_64")]
    tile: Option<super::wide::Width>,
}

impl Kernels {
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
    fn for_cpu(head_dim: usize) -> Kernels {
        Kernels {
            #[cfg(target_arch = "x86_64")]
            row: super::attention_row::best(head_dim),
            #[cfg(target_arch = "x86_64")]
            tile: super::attention_tile::best(head_dim),
        }
    }

    /// The portable path only.
    #[cfg(test)]
    fn portable() -> Kernels {
        Kernels {
            #[cfg(target_arch = "x86_64")]
            row: None,
            #[cfg(target_arch = "x86_64")]
            tile: None,
        }
    }

    /// Every set of kernels this CPU runs for heads of width `head_dim` (each vector width of
    /// the one-row and the tiled kernel), and the portable path.
    #[cfg(test)]
    fn all_for_cpu(head_dim: usize) -> Vec<Kernels> {
        let best = Kernels::for_cpu(head_dim);
        let mut all = vec![best];
        #[cfg(target_arch = "x86_64")]
        for w in super::wide::Width::available() {
            let at = Kernels {
                row: super::attention_row::supports(w, head_dim).then_some(w),
                tile: super::attention_tile::supports(w, head_dim).then_some(w),
            };
            if (at.row, at.tile) != (best.row, best.tile) {
                all.push(at);
            }
        }
        all.push(Kernels::portable());
        all
    }
}

/// One head's keys and values of consecutive positions from `first`, as f32 rows.
struct Gathered<'a> {
    keys: &'a [f32],
    values: &'a [f32],
    first: usize,
}

/// `s = exp(s - max(s))`; returns `(max(s), sum of the new s)`.
#[multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512vl+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn exp_from_max(s: &mut [f32]) -> (f32, f32) {
    const LANES: usize = 16;
    let mut lane_max = [f32::NEG_INFINITY; LANES];
    let mut chunks = s.chunks_exact(LANES);
    for c in &mut chunks {
        for l in 0..LANES {
            lane_max[l] = lane_max[l].max(c[l]);
        }
    }
    let max = chunks
        .remainder()
        .iter()
        .chain(&lane_max)
        .copied()
        .fold(f32::NEG_INFINITY, f32::max);
    let mut lane_sum = [0.0f32; LANES];
    let mut chunks = s.chunks_exact_mut(LANES);
    for c in &mut chunks {
        for l in 0..LANES {
            let e = exp(c[l] - max);
            c[l] = e;
            lane_sum[l] += e;
        }
    }
    let mut sum: f32 = lane_sum.iter().sum();
    for v in chunks.into_remainder() {
        *v = exp(*v - max);
        sum += *v;
    }
    (max, sum)
}

/// Softmax of `s[a..b]` in place, with `sink` as one more logit in the sum when given; the
/// rest of `s` becomes 0 (positions the row does not see).
fn softmax_in_place(s: &mut [f32], a: usize, b: usize, sink: Option<f32>) {
    let (head, rest) = s.split_at_mut(a);
    let (seen, tail) = rest.split_at_mut(b - a);
    head.fill(0.0);
    tail.fill(0.0);
    let (max, mut sum) = exp_from_max(seen);
    match sink {
        // a sink above every score: rescale to it, so that nothing overflows
        Some(z) if z > max => {
            let f = exp(max - z);
            seen.iter_mut().for_each(|v| *v *= f);
            sum = sum * f + 1.0;
        }
        Some(z) => sum += exp(z - max),
        None => {}
    }
    let inv = if sum > 0.0 { 1.0 / sum } else { 0.0 };
    for v in seen.iter_mut() {
        *v *= inv;
    }
}

#[cfg(test)]
mod tests;
