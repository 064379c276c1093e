//! Mixture of experts: `QExperts::matmul_id` (the rows routed to each expert gathered into one
//! GEMM) against the same products as one GEMV per routed row. 8 experts of 2048 x 640 Q4_0,
//! 4 used per token, 128 tokens, uniform and skewed routing.
//! `cargo bench -p qrepack --bench moe`.

mod common;

use common::{data, routing};
use criterion::{criterion_group, criterion_main, Criterion};
use qrepack::{quantize, GgmlType, QExperts};

fn moe(c: &mut Criterion) {
    let (n_expert, rows, cols, n_used, tokens) = (8, 2048, 640, 4, 128);
    let w = data(n_expert * rows * cols, 42);
    let bytes = quantize(GgmlType::Q4_0, &w, n_expert * rows, cols).expect("quantize");
    let experts = QExperts::new(GgmlType::Q4_0, n_expert, rows, cols, &bytes).expect("experts");
    let x = data(tokens * cols, 43);
    let mut y = vec![0.0f32; tokens * n_used * rows];
    let mut group = c.benchmark_group("moe_q4_0_8x2048x640_top4_128tok");
    group.sample_size(20);
    for skew in [false, true] {
        let ids = routing(tokens, n_expert, n_used, skew);
        let name = if skew { "skewed" } else { "uniform" };
        group.bench_function(format!("matmul_id/{name}"), |b| {
            b.iter(|| {
                experts
                    .matmul_id(&x, 1, &ids, n_used, &mut y)
                    .expect("matmul_id")
            })
        });
        group.bench_function(format!("gemv_per_row/{name}"), |b| {
            b.iter(|| {
                for (t, token_ids) in ids.chunks_exact(n_used).enumerate() {
                    let xt = &x[t * cols..(t + 1) * cols];
                    for (u, &e) in token_ids.iter().enumerate() {
                        let m = experts.expert(e as usize).expect("expert");
                        let out = &mut y[(t * n_used + u) * rows..(t * n_used + u + 1) * rows];
                        m.matmul(xt, 1, out).expect("matmul");
                    }
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, moe);
criterion_main!(benches);
