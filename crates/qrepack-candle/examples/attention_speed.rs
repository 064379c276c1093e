//! Times the decoder's attention kernel alone on one layer's shapes: a prompt of P rows from
//! position 0, and single-row decode steps after it.
//!
//! ```text
//! cargo run --release -p qrepack-candle --example attention_speed -- [heads kv_heads head_dim prompt [f32]]
//! ```
//! (default: 9 3 64 512, SmolLM2-135M's attention, an f16 cache); the single row is timed with
//! the cache in the CPU's caches and again read from memory. Runs on a rayon pool of
//! `RAYON_NUM_THREADS` threads, called from one of its threads as the decoder calls it: from
//! outside a pool every call would also pay for handing the work over (about 12 us).

use std::time::Instant;

use rayon::prelude::*;

use qrepack::rng::SplitMix64;
use qrepack_candle::ops::{Attention, Heads, KvCache, KvType, Rows};

fn main() {
    let f32_cache = std::env::args().any(|a| a == "f32");
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter(|a| a != "f32")
        .map(|a| a.parse().expect("a number"))
        .collect();
    let get = |i: usize, d: usize| args.get(i).copied().unwrap_or(d);
    let heads = Heads {
        n_head: get(0, 9),
        n_kv_head: get(1, 3),
        head_dim: get(2, 64),
    };
    let prompt = get(3, 512);
    let (q_w, kv_w) = (
        heads.n_head * heads.head_dim,
        heads.n_kv_head * heads.head_dim,
    );
    let mut rng = SplitMix64::new(1);
    let q = rng.pm1_vec(prompt * q_w);
    let k = rng.pm1_vec((prompt + 1) * kv_w);
    let v = rng.pm1_vec((prompt + 1) * kv_w);
    let ty = if f32_cache { KvType::F32 } else { KvType::F16 };
    let mut cache = KvCache::new(ty, heads.n_kv_head, heads.head_dim);
    for (k, v) in k.chunks_exact(kv_w).zip(v.chunks_exact(kv_w)) {
        cache.push(k, v);
    }
    println!("{ty:?} cache, {heads:?}");
    let mut out = vec![0.0f32; prompt * q_w];
    let run = |seq: usize, first_pos: usize, out: &mut [f32]| {
        Attention {
            heads,
            queries: Rows {
                data: &q,
                stride: q_w,
                // the prompt's own rows; a decode step reuses the first
                offset: if first_pos + seq <= prompt {
                    first_pos * q_w
                } else {
                    0
                },
            },
            seq,
            first_pos,
            cache: &cache,
            scale: 1.0 / (heads.head_dim as f32).sqrt(),
            window: None,
            sinks: None,
        }
        .run(out)
        .expect("shapes fit");
    };
    let time = |label: &str, reps: usize, f: &mut dyn FnMut()| {
        f();
        let mut best = f64::INFINITY;
        for _ in 0..reps {
            let t = Instant::now();
            f();
            best = best.min(t.elapsed().as_secs_f64());
        }
        println!("{label}: {:.1} us (best of {reps})", best * 1e6);
    };
    // on a pool of its own, called from one of its threads, as the decoder calls it
    let pool = rayon::ThreadPoolBuilder::new()
        .build()
        .expect("a thread pool");
    pool.install(|| {
        time(&format!("prompt of {prompt} rows"), 5, &mut || {
            run(prompt, 0, &mut out)
        });
        // as the decoder runs a prompt: consecutive calls of a part of the rows each
        for part in [256, 128, 64] {
            if part < prompt {
                time(&format!("  in parts of {part} rows"), 5, &mut || {
                    for first in (0..prompt).step_by(part) {
                        let rows = part.min(prompt - first);
                        run(rows, first, &mut out[first * q_w..(first + rows) * q_w]);
                    }
                });
            }
        }
        time(&format!("one row at position {prompt}"), 200, &mut || {
            run(1, prompt, &mut out[..q_w])
        });
        // As in a decode step, where the layer's weights have pushed the cache out of L2 and
        // L3 since its last read: 96 MiB read by every thread between calls (which also keeps
        // the threads awake, as the products before the attention do).
        let junk = vec![1u8; 96 << 20];
        let mut best = f64::INFINITY;
        for i in 0..100u64 {
            let sum: u64 = junk
                .par_chunks(1 << 20)
                .map(|c| c.iter().step_by(64).map(|&b| u64::from(b)).sum::<u64>())
                .sum();
            std::hint::black_box(sum + i);
            let t = Instant::now();
            run(1, prompt, &mut out[..q_w]);
            best = best.min(t.elapsed().as_secs_f64());
        }
        println!(
            "one row at position {prompt}, cache from memory: {:.1} us (best of 100)",
            best * 1e6
        );
    });
}
