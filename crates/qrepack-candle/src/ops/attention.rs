//! Causal multi-head attention with grouped-query heads over a key/value cache, computed with
//! an online softmax over tiles of positions.
//!
//! The query heads that share a key/value head are processed together, so each tile of keys
//! and values is read once for the whole group (and, for prompts, for a block of query rows).
//! Prompts are split over the thread pool by blocks of query rows; a single token (or a few)
//! splits the positions instead, each task keeping a partial softmax state that is merged at
//! the end, so that a decode step uses every core even with one key/value head.

use multiversion::multiversion;
use rayon::prelude::*;

use super::math::{axpy, dot, exp};

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
    /// Cached keys: one row of `n_kv_head * head_dim` per position, at least
    /// `first_pos + seq` rows.
    pub keys: &'a [f32],
    /// Cached values, laid out as `keys`.
    pub values: &'a [f32],
    /// Multiplier of the scores (usually `1 / sqrt(head_dim)`).
    pub scale: f32,
    /// Sliding window: row at position `p` sees only positions `> p - window` (`None`: all).
    pub window: Option<usize>,
}

/// Positions per tile: 64 keys of a 64-wide head are 16 KiB, which stays in L1 while the
/// group's queries pass over it.
const TILE: usize = 64;
/// Query rows per task of a prompt.
const ROW_BLOCK: usize = 8;

/// Per query vector: `head_dim` accumulators, then the running maximum and the running sum.
fn state_len(head_dim: usize) -> usize {
    head_dim + 2
}

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
        let kv = (self.first_pos + self.seq) * h.n_kv_head * h.head_dim;
        if self.keys.len() < kv || self.values.len() < kv {
            return Err(format!(
                "{} positions of keys and values need {kv} values each, have {} and {}",
                self.first_pos + self.seq,
                self.keys.len(),
                self.values.len()
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
        self.check(out)?;
        if self.seq == 0 {
            return Ok(());
        }
        let threads = rayon::current_num_threads();
        if self.seq.div_ceil(ROW_BLOCK) >= 2 * threads {
            self.by_row_blocks(out);
        } else {
            self.by_position_chunks(out, threads);
        }
        Ok(())
    }

    /// Prompts: each task owns `ROW_BLOCK` query rows and every head of them.
    fn by_row_blocks(&self, out: &mut [f32]) {
        let h = self.heads;
        let (width, sl) = (h.n_head * h.head_dim, state_len(h.head_dim));
        out.par_chunks_mut(ROW_BLOCK * width)
            .with_max_len(1)
            .enumerate()
            .for_each(|(b, out)| {
                let r0 = b * ROW_BLOCK;
                let rows = out.len() / width;
                let mut states = vec![0.0f32; rows * h.group() * sl];
                for g in 0..h.n_kv_head {
                    reset(&mut states, h.head_dim);
                    let hi = self.visible(r0 + rows - 1).1;
                    let lo = self.visible(r0).0;
                    self.attend(g, r0, rows, (lo, hi), &mut states);
                    for r in 0..rows {
                        for j in 0..h.group() {
                            let s = &states[(r * h.group() + j) * sl..][..sl];
                            let o = &mut out[r * width + (g * h.group() + j) * h.head_dim..]
                                [..h.head_dim];
                            finish(s, o);
                        }
                    }
                }
            });
    }

    /// Few query rows: each task takes one key/value head and a range of positions for every
    /// row; the partial softmax states are merged afterwards.
    fn by_position_chunks(&self, out: &mut [f32], threads: usize) {
        let h = self.heads;
        let (width, sl) = (h.n_head * h.head_dim, state_len(h.head_dim));
        let kv_len = self.first_pos + self.seq;
        let lo = self.visible(0).0;
        let span = kv_len - lo;
        let chunks = (4 * threads)
            .div_ceil(h.n_kv_head)
            .min(span.div_ceil(TILE))
            .max(1);
        let chunk_len = span.div_ceil(chunks).next_multiple_of(TILE.min(span));
        let chunks = span.div_ceil(chunk_len);
        let per_task = self.seq * h.group() * sl;
        let mut states = vec![0.0f32; h.n_kv_head * chunks * per_task];
        states
            .par_chunks_mut(per_task)
            .with_max_len(1)
            .enumerate()
            .for_each(|(task, states)| {
                let (g, c) = (task / chunks, task % chunks);
                let start = lo + c * chunk_len;
                let end = (start + chunk_len).min(kv_len);
                reset(states, h.head_dim);
                self.attend(g, 0, self.seq, (start, end), states);
            });
        let mut merged = vec![0.0f32; sl];
        for r in 0..self.seq {
            for g in 0..h.n_kv_head {
                for j in 0..h.group() {
                    let parts = (0..chunks).map(|c| {
                        let base = (g * chunks + c) * per_task + (r * h.group() + j) * sl;
                        &states[base..base + sl]
                    });
                    merge(parts, &mut merged);
                    let o = &mut out[r * width + (g * h.group() + j) * h.head_dim..][..h.head_dim];
                    finish(&merged, o);
                }
            }
        }
    }

    /// Adds positions `range` of key/value head `g` to the states of query rows
    /// `r0..r0 + rows` and the group's query heads (`[row][head of group][state]`).
    fn attend(&self, g: usize, r0: usize, rows: usize, range: (usize, usize), states: &mut [f32]) {
        let h = self.heads;
        let tile = Tile {
            heads: h,
            kv_head: g,
            keys: self.keys,
            values: self.values,
            scale: self.scale,
        };
        let queries: Vec<(&[f32], (usize, usize))> = (0..rows)
            .flat_map(|r| {
                let q = self.queries.row(r0 + r);
                let vis = self.visible(r0 + r);
                let lo = vis.0.max(range.0);
                let hi = vis.1.min(range.1);
                (0..h.group()).map(move |j| {
                    let head = (g * h.group() + j) * h.head_dim;
                    (&q[head..head + h.head_dim], (lo, hi))
                })
            })
            .collect();
        attend_tiles(&tile, &queries, range, states);
    }
}

/// The key/value head that a group of query vectors reads.
struct Tile<'a> {
    heads: Heads,
    kv_head: usize,
    keys: &'a [f32],
    values: &'a [f32],
    scale: f32,
}

/// Every state to "nothing seen": zero sums, maximum minus infinity.
fn reset(states: &mut [f32], head_dim: usize) {
    for s in states.chunks_exact_mut(state_len(head_dim)) {
        s[..head_dim].fill(0.0);
        s[head_dim] = f32::NEG_INFINITY;
        s[head_dim + 1] = 0.0;
    }
}

/// The softmax-weighted sum of a state: `acc / sum` (zeros when it saw no position).
fn finish(state: &[f32], out: &mut [f32]) {
    let d = out.len();
    let sum = state[d + 1];
    let inv = if sum > 0.0 { 1.0 / sum } else { 0.0 };
    for (o, a) in out.iter_mut().zip(&state[..d]) {
        *o = a * inv;
    }
}

/// Combines partial states of disjoint position ranges into `out`.
fn merge<'s>(parts: impl Iterator<Item = &'s [f32]> + Clone, out: &mut [f32]) {
    let d = out.len() - 2;
    let max = parts
        .clone()
        .map(|s| s[d])
        .fold(f32::NEG_INFINITY, f32::max);
    out.fill(0.0);
    out[d] = max;
    if max == f32::NEG_INFINITY {
        return;
    }
    for s in parts {
        if s[d] == f32::NEG_INFINITY {
            continue;
        }
        let w = exp(s[d] - max);
        axpy(&mut out[..d], w, &s[..d]);
        out[d + 1] += w * s[d + 1];
    }
}

/// The online softmax of each query vector over the positions of its own range (within
/// `range`), a tile of `TILE` positions at a time; `states` as in [`Attention::attend`].
#[multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512vl+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn attend_tiles<'a>(
    tile: &Tile<'a>,
    queries: &[(&'a [f32], (usize, usize))],
    range: (usize, usize),
    states: &mut [f32],
) {
    let d = tile.heads.head_dim;
    let stride = tile.heads.n_kv_head * d;
    let off = tile.kv_head * d;
    let sl = state_len(d);
    let mut scores = [0.0f32; TILE];
    let mut t0 = range.0;
    while t0 < range.1 {
        let t1 = (t0 + TILE).min(range.1);
        for ((q, (lo, hi)), state) in queries.iter().zip(states.chunks_exact_mut(sl)) {
            let (a, b) = ((*lo).max(t0), (*hi).min(t1));
            if a >= b {
                continue;
            }
            let n = b - a;
            let mut tile_max = f32::NEG_INFINITY;
            for (i, s) in scores[..n].iter_mut().enumerate() {
                let k = &tile.keys[(a + i) * stride + off..][..d];
                *s = dot(q, k) * tile.scale;
                tile_max = tile_max.max(*s);
            }
            let (acc, rest) = state.split_at_mut(d);
            let old_max = rest[0];
            let new_max = old_max.max(tile_max);
            let keep = exp(old_max - new_max);
            let mut sum = 0.0f32;
            for s in &mut scores[..n] {
                *s = exp(*s - new_max);
                sum += *s;
            }
            for a_i in acc.iter_mut() {
                *a_i *= keep;
            }
            for (i, p) in scores[..n].iter().enumerate() {
                let v = &tile.values[(a + i) * stride + off..][..d];
                axpy(acc, *p, v);
            }
            rest[0] = new_max;
            rest[1] = rest[1] * keep + sum;
        }
        t0 = t1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Attention in f64, straight from the definition.
    fn reference(a: &Attention<'_>) -> Vec<f64> {
        let h = a.heads;
        let d = h.head_dim;
        let stride = h.n_kv_head * d;
        let mut out = vec![0.0f64; a.seq * h.n_head * d];
        for r in 0..a.seq {
            let (lo, hi) = a.visible(r);
            for head in 0..h.n_head {
                let g = head / h.group();
                let q = &a.queries.row(r)[head * d..][..d];
                let scores: Vec<f64> = (lo..hi)
                    .map(|p| {
                        let k = &a.keys[p * stride + g * d..][..d];
                        q.iter()
                            .zip(k)
                            .map(|(x, y)| *x as f64 * *y as f64)
                            .sum::<f64>()
                            * a.scale as f64
                    })
                    .collect();
                let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
                let total: f64 = w.iter().sum();
                for (p, w) in (lo..hi).zip(&w) {
                    let v = &a.values[p * stride + g * d..][..d];
                    for i in 0..d {
                        out[(r * h.n_head + head) * d + i] += w / total * v[i] as f64;
                    }
                }
            }
        }
        out
    }

    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    fn check(heads: Heads, seq: usize, first_pos: usize, window: Option<usize>, threads: usize) {
        let kv = first_pos + seq;
        let width = heads.n_head * heads.head_dim;
        // queries inside a fused q/k/v row, as the decoder passes them
        let stride = width + 2 * heads.n_kv_head * heads.head_dim;
        let qkv = values(seq * stride, 1 + seq as u64);
        let keys = values(kv * heads.n_kv_head * heads.head_dim, 2 + kv as u64);
        let vals = values(kv * heads.n_kv_head * heads.head_dim, 3);
        let a = Attention {
            heads,
            queries: Rows {
                data: &qkv,
                stride,
                offset: 0,
            },
            seq,
            first_pos,
            keys: &keys,
            values: &vals,
            // large scores test the softmax's range
            scale: 3.0 / (heads.head_dim as f32).sqrt(),
            window,
        };
        let mut out = vec![f32::NAN; seq * width];
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| a.run(&mut out)).unwrap();
        let want = reference(&a);
        for (i, (got, want)) in out.iter().zip(&want).enumerate() {
            assert!(
                (*got as f64 - want).abs() < 2e-5,
                "{heads:?} seq {seq} pos {first_pos} window {window:?}: [{i}] {got} vs {want}"
            );
        }
    }

    #[test]
    fn matches_f64_on_awkward_shapes() {
        for head_dim in [64, 80, 128, 256] {
            for (n_head, n_kv_head) in [(4, 4), (6, 2), (8, 2), (8, 1)] {
                let heads = Heads {
                    n_head,
                    n_kv_head,
                    head_dim,
                };
                for seq in [1, 2, 5, 9, 33] {
                    check(heads, seq, 0, None, 2);
                    check(heads, seq, 70, None, 3);
                }
            }
        }
    }

    #[test]
    fn long_prompts_and_decode_after_them() {
        let heads = Heads {
            n_head: 9,
            n_kv_head: 3,
            head_dim: 64,
        };
        check(heads, 150, 0, None, 2);
        check(heads, 64, 200, None, 4);
        check(heads, 1, 511, None, 2);
        check(heads, 1, 1000, None, 1);
    }

    #[test]
    fn sliding_window() {
        let heads = Heads {
            n_head: 4,
            n_kv_head: 1,
            head_dim: 64,
        };
        check(heads, 40, 0, Some(16), 2);
        check(heads, 1, 300, Some(64), 2);
        check(heads, 33, 100, Some(1), 2);
    }

    #[test]
    fn shape_errors() {
        let heads = Heads {
            n_head: 4,
            n_kv_head: 3,
            head_dim: 8,
        };
        let data = vec![0.0; 64];
        let a = Attention {
            heads,
            queries: Rows {
                data: &data,
                stride: 32,
                offset: 0,
            },
            seq: 1,
            first_pos: 0,
            keys: &data,
            values: &data,
            scale: 1.0,
            window: None,
        };
        assert!(a.run(&mut [0.0; 32]).unwrap_err().contains("cannot share"));
        let a = Attention {
            heads: Heads {
                n_kv_head: 2,
                ..heads
            },
            keys: &data[..8],
            ..a
        };
        assert!(a
            .run(&mut [0.0; 32])
            .unwrap_err()
            .contains("positions of keys"));
    }
}
