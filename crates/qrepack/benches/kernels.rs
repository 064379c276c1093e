//! Kernel throughput: every interleaved layout against `plain`, one 4096x4096 matrix, batch 1
//! (GEMV, weights from cache) and batch 32 (GEMM). `cargo bench -p qrepack --bench kernels`.
//! Whole-operator numbers against ggml come from `qrepack bench` (docs/PERFORMANCE.md).

mod common;

use common::data;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use qrepack::{quantize, GgmlType, Layout, QMatrix};

fn kernels(c: &mut Criterion) {
    let (rows, cols) = (4096, 4096);
    let w = data(rows * cols, 42);
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q4_K,
        GgmlType::IQ4_NL,
        GgmlType::Q8_0,
    ] {
        let bytes = quantize(ty, &w, rows, cols).expect("quantize");
        let mut group = c.benchmark_group(format!("{ty}_{rows}x{cols}"));
        group.sample_size(10);
        for layout in Layout::candidates(ty) {
            let m = QMatrix::with_layout(ty, rows, cols, &bytes, layout).expect("layout");
            for n in [1usize, 32] {
                let x = data(n * cols, 43);
                let mut y = vec![0.0f32; n * rows];
                group.throughput(Throughput::Elements((2 * rows * cols * n) as u64));
                group.bench_with_input(
                    BenchmarkId::new(format!("{layout}/{}", m.kernel_name()), n),
                    &n,
                    |b, &n| b.iter(|| m.matmul(&x, n, &mut y).expect("matmul")),
                );
            }
        }
        group.finish();
    }
}

criterion_group!(benches, kernels);
criterion_main!(benches);
