use super::*;
use crate::ops::KvType;

/// Attention in f64, straight from the definition, the keys and values one row of
/// `n_kv_head * head_dim` per position.
fn reference(a: &Attention<'_>, keys: &[f32], values: &[f32]) -> Vec<f64> {
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
                    let k = &keys[p * stride + g * d..][..d];
                    q.iter()
                        .zip(k)
                        .map(|(x, y)| *x as f64 * *y as f64)
                        .sum::<f64>()
                        * a.scale as f64
                })
                .collect();
            let sink = a.sinks.map(|s| s[head] as f64);
            let m = scores
                .iter()
                .copied()
                .fold(sink.unwrap_or(f64::NEG_INFINITY), f64::max);
            let w: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
            let total: f64 = w.iter().sum::<f64>() + sink.map_or(0.0, |z| (z - m).exp());
            for (p, w) in (lo..hi).zip(&w) {
                let v = &values[p * stride + g * d..][..d];
                for i in 0..d {
                    out[(r * h.n_head + head) * d + i] += w / total * v[i] as f64;
                }
            }
        }
    }
    out
}

/// `n` values uniform in [-1, 1), rounded to f16 so that both cache types hold them
/// exactly.
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut v = qrepack::rng::SplitMix64::new(seed).pm1_vec(n);
    v.iter_mut()
        .for_each(|x| *x = half::f16::from_f32(*x).to_f32());
    v
}

/// A cache of `n` positions of the given rows.
fn cache_of(ty: KvType, heads: Heads, keys: &[f32], vals: &[f32]) -> KvCache {
    let w = heads.n_kv_head * heads.head_dim;
    let mut c = KvCache::new(ty, heads.n_kv_head, heads.head_dim);
    for (k, v) in keys.chunks_exact(w).zip(vals.chunks_exact(w)) {
        c.push(k, v);
    }
    c
}

fn check(heads: Heads, seq: usize, first_pos: usize, window: Option<usize>, threads: usize) {
    check_sinks(heads, seq, first_pos, window, threads, false)
}

/// [`check`], with random sinks in [-4, 8] when `with_sinks` (above the scores at times).
fn check_sinks(
    heads: Heads,
    seq: usize,
    first_pos: usize,
    window: Option<usize>,
    threads: usize,
    with_sinks: bool,
) {
    let kv = first_pos + seq;
    let width = heads.n_head * heads.head_dim;
    // queries inside a fused q/k/v row, as the decoder passes them
    let stride = width + 2 * heads.n_kv_head * heads.head_dim;
    let qkv = values(seq * stride, 1 + seq as u64);
    let keys = values(kv * heads.n_kv_head * heads.head_dim, 2 + kv as u64);
    let vals = values(kv * heads.n_kv_head * heads.head_dim, 3);
    let sinks: Vec<f32> = values(heads.n_head, 4)
        .iter()
        .map(|v| 2.0 + 6.0 * v)
        .collect();
    for ty in [KvType::F16, KvType::F32] {
        let cache = cache_of(ty, heads, &keys, &vals);
        let a = Attention {
            heads,
            queries: Rows {
                data: &qkv,
                stride,
                offset: 0,
            },
            seq,
            first_pos,
            cache: &cache,
            // large scores test the softmax's range
            scale: 3.0 / (heads.head_dim as f32).sqrt(),
            window,
            sinks: with_sinks.then_some(&sinks[..]),
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let want = reference(&a, &keys, &vals);
        // this CPU's kernels at each vector width, and the portable path every CPU has
        for kernels in Kernels::all_for_cpu(heads.head_dim) {
            let mut out = vec![f32::NAN; seq * width];
            pool.install(|| a.run_with(&mut out, kernels)).unwrap();
            for (i, (got, want)) in out.iter().zip(&want).enumerate() {
                assert!(
                    (*got as f64 - want).abs() < 2e-5,
                    "{ty:?} {kernels:?} {heads:?} seq {seq} pos {first_pos} window \
                     {window:?} sinks {with_sinks}: [{i}] {got} vs {want}"
                );
            }
        }
    }
}

#[test]
fn matches_f64_on_awkward_shapes() {
    for head_dim in [64, 80, 128, 256] {
        // (16, 1): a group wider than the one-row kernel takes at once
        for (n_head, n_kv_head) in [
            (4, 4),
            (6, 2),
            (8, 2),
            (8, 1),
            (16, 1),
            (24, 8),
            (10, 5),
            (12, 2),
            (14, 2),
            (15, 3),
        ] {
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
    // single rows split over threads in chunks across pages
    check(heads, 1, 511, None, 2);
    check(heads, 1, 700, None, 3);
    check(heads, 1, 1000, None, 1);
    let wide = Heads {
        n_head: 32,
        n_kv_head: 8,
        head_dim: 128,
    };
    check(wide, 1, 300, None, 2);
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
    check(heads, 1, 600, Some(400), 2);
    check(heads, 33, 100, Some(1), 2);
}

/// Sinks on every path: prompts, single rows on one thread and split over several, with a
/// window, and grouped heads.
#[test]
fn sinks_join_the_softmax() {
    for (n_head, n_kv_head, head_dim) in [(4, 4, 64), (8, 2, 64), (16, 1, 128), (6, 2, 80)] {
        let heads = Heads {
            n_head,
            n_kv_head,
            head_dim,
        };
        for (seq, pos, window, threads) in [
            (1, 0, None, 1),
            (9, 0, None, 2),
            (33, 40, Some(8), 2),
            (1, 700, None, 2),
            (1, 300, Some(128), 3),
        ] {
            check_sinks(heads, seq, pos, window, threads, true);
        }
    }
}

#[test]
fn shape_errors() {
    let heads = Heads {
        n_head: 4,
        n_kv_head: 3,
        head_dim: 8,
    };
    let data = vec![0.0; 64];
    let cache = cache_of(KvType::F32, heads, &data[..24], &data[..24]);
    let a = Attention {
        heads,
        queries: Rows {
            data: &data,
            stride: 32,
            offset: 0,
        },
        seq: 1,
        first_pos: 0,
        cache: &cache,
        scale: 1.0,
        window: None,
        sinks: None,
    };
    assert!(a.run(&mut [0.0; 32]).unwrap_err().contains("cannot share"));
    let two = Heads {
        n_kv_head: 2,
        ..heads
    };
    let a = Attention { heads: two, ..a };
    assert!(a.run(&mut [0.0; 32]).unwrap_err().contains("a cache of 3"));
    let cache = cache_of(KvType::F32, two, &[], &[]);
    let a = Attention { cache: &cache, ..a };
    assert!(a
        .run(&mut [0.0; 32])
        .unwrap_err()
        .contains("positions of keys"));
}

/// Blocks alternate light and heavy, so that the two halves rayon first splits the list into
/// carry the same work when a block's cost grows linearly with its index (a causal prompt) and
/// their count is a multiple of four.
#[test]
fn prompt_blocks_alternate_light_and_heavy() {
    assert_eq!(light_and_heavy(0..5), [0, 4, 1, 3, 2]);
    assert_eq!(light_and_heavy(0..1), [0]);
    assert!(light_and_heavy(0..0).is_empty());
    for n in [4usize, 8, 12, 16] {
        let order = light_and_heavy(0..n);
        let cost = |half: &[usize]| half.iter().map(|b| 2 * b + 1).sum::<usize>();
        let (a, b) = order.split_at(n / 2);
        assert_eq!(cost(a), cost(b), "{order:?}");
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(sorted, (0..n).collect::<Vec<_>>());
    }
}
