//! `qrepack::profile` on its own process: its totals are process-wide.

use qrepack::{profile, quantize, GgmlType, Layout, QMatrix};

fn matrix(layout: Layout, rows: usize, cols: usize) -> QMatrix {
    let w: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 31 % 17) as f32 - 8.0) / 8.0)
        .collect();
    let q = quantize(GgmlType::Q4_0, &w, rows, cols).unwrap();
    QMatrix::with_layout(GgmlType::Q4_0, rows, cols, &q, layout).unwrap()
}

#[test]
fn phases_add_up_and_count_calls_and_tasks() {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    let (rows, cols) = (256, 512);
    for layout in [Layout::Q4_0_8x8, Layout::Plain] {
        let m = matrix(layout, rows, cols);
        for n in [1, 5, 12] {
            let x = vec![0.5f32; n * cols];
            let mut y = vec![0.0f32; n * rows];
            pool.install(|| {
                profile::start();
                for _ in 0..4 {
                    m.matmul(&x, n, &mut y).unwrap();
                }
            });
            let p = profile::stop();
            assert_eq!(p.calls, 4, "{layout} n={n}");
            assert!(p.tasks >= 4, "{layout} n={n}: every call runs a task");
            let parts = p.quantize + p.kernel_wall;
            assert!(parts <= p.total, "{layout} n={n}: {p:?}");
            assert!(p.busiest_thread <= p.task_busy, "{p:?}");
            assert!(p.busiest_thread * 2 >= p.task_busy, "two threads: {p:?}");
            assert!(p.scheduling() <= p.kernel_wall, "{p:?}");
            assert!(p.imbalance(2) <= p.busiest_thread, "{p:?}");
            assert_eq!(p.other(), p.total - parts);
            // Nothing is recorded while profiling is off.
            m.matmul(&x, n, &mut y).unwrap();
            profile::start();
            assert_eq!(profile::stop(), profile::PhaseTimes::default());
        }
    }
}
