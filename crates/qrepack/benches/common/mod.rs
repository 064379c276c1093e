//! Deterministic benchmark data shared by the criterion benches and the MoE example.

use qrepack::rng::SplitMix64;

/// `n` values in [-1, 1) from a splitmix64 stream seeded with `seed`.
pub fn data(n: usize, seed: u64) -> Vec<f32> {
    SplitMix64::new(seed).pm1_vec(n)
}

/// `n_used` distinct experts per token; `skew` sends most tokens to experts 0-3.
#[allow(dead_code)] // the kernels bench includes this file without routing anything
pub fn routing(tokens: usize, n_expert: usize, n_used: usize, skew: bool) -> Vec<i32> {
    let r = data(tokens * n_used, 7);
    let mut ids = Vec::with_capacity(tokens * n_used);
    for t in 0..tokens {
        let mut chosen: Vec<i32> = Vec::new();
        let mut k = 0;
        while chosen.len() < n_used {
            let u = (r[(t * n_used + k) % r.len()] + 1.0) / 2.0;
            let e = if skew && u < 0.8 {
                ((u * 5.0) as usize).min(3)
            } else {
                (u * n_expert as f32) as usize % n_expert
            } as i32;
            let e = (e + k as i32) % n_expert as i32;
            if !chosen.contains(&e) {
                chosen.push(e);
            }
            k += 1;
        }
        ids.extend(chosen);
    }
    ids
}
