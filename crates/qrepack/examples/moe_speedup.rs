//! `QExperts::matmul_id` against one GEMV per routed row, timed alternately in one process and
//! reported as the best of 60 repetitions each, so that a noisy shared machine disturbs both
//! sides alike (the criterion bench `moe` reports medians of consecutive runs instead).
//! 8 experts of 2048 x 640 Q4_0, 4 used per token, 128 tokens, uniform and skewed routing.
//!
//! `cargo run --release -p qrepack --example moe_speedup`

#[path = "../benches/common/mod.rs"]
mod common;

use std::time::Instant;

use common::{data, routing};
use qrepack::{quantize, GgmlType, QExperts};

fn main() -> Result<(), qrepack::Error> {
    let (n_expert, rows, cols, n_used, tokens) = (8, 2048, 640, 4, 128);
    let w = data(n_expert * rows * cols, 42);
    let bytes = quantize(GgmlType::Q4_0, &w, n_expert * rows, cols)?;
    let experts = QExperts::new(GgmlType::Q4_0, n_expert, rows, cols, &bytes)?;
    let x = data(tokens * cols, 43);
    let mut y = vec![0.0f32; tokens * n_used * rows];
    for skew in [false, true] {
        let ids = routing(tokens, n_expert, n_used, skew);
        let (mut grouped, mut per_row) = (f64::MAX, f64::MAX);
        for _ in 0..60 {
            let start = Instant::now();
            experts.matmul_id(&x, 1, &ids, n_used, &mut y)?;
            grouped = grouped.min(start.elapsed().as_secs_f64());
            let start = Instant::now();
            for (t, token_ids) in ids.chunks_exact(n_used).enumerate() {
                let xt = &x[t * cols..(t + 1) * cols];
                for (u, &e) in token_ids.iter().enumerate() {
                    let out = &mut y[(t * n_used + u) * rows..(t * n_used + u + 1) * rows];
                    if let Some(m) = experts.expert(e as usize) {
                        m.matmul(xt, 1, out)?;
                    }
                }
            }
            per_row = per_row.min(start.elapsed().as_secs_f64());
        }
        println!(
            "{} routing: matmul_id {:.3} ms, one GEMV per routed row {:.3} ms, speedup {:.2}x",
            if skew { "skewed" } else { "uniform" },
            grouped * 1e3,
            per_row * 1e3,
            per_row / grouped
        );
    }
    Ok(())
}
