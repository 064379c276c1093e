//! Kernel throughput: every interleaved layout against `plain`, one 4096x4096 matrix, batch 1
//! (GEMV, weights from cache) and batch 32 (GEMM). `cargo bench -p qrepack --bench kernels`.
//! Whole-operator numbers against ggml come from `qrepack bench` (docs/PERFORMANCE.md).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use qrepack::{quantize, GgmlType, Layout, QMatrix};

fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

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
