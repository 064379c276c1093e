//! One shared matrix used from many threads at once, inside and outside rayon pools.

mod common;

use common::random_weights;
use qrepack::rng::SplitMix64;
use qrepack::{GgmlType, QExperts, QMatrix};
use std::sync::Arc;

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn matrices_are_send_and_sync() {
    assert_send_sync::<QMatrix>();
    assert_send_sync::<QExperts>();
}

#[test]
fn eight_threads_share_one_matrix() {
    let (rows, cols) = (64, 512);
    let ty = GgmlType::Q4_K;
    let w = random_weights(ty, rows, cols, 8);
    let m = Arc::new(QMatrix::new(ty, rows, cols, &w).unwrap());
    let inputs: Vec<(usize, Vec<f32>)> = (0..8)
        .map(|i| {
            let n = 1 + i % 5;
            (n, SplitMix64::new(i as u64).pm1_vec(n * cols))
        })
        .collect();
    let expected: Vec<Vec<f32>> = inputs
        .iter()
        .map(|(n, x)| {
            let mut y = vec![0.0; n * rows];
            m.matmul(x, *n, &mut y).unwrap();
            y
        })
        .collect();
    let handles: Vec<_> = inputs
        .iter()
        .cloned()
        .zip(expected.clone())
        .map(|((n, x), want)| {
            let m = Arc::clone(&m);
            std::thread::spawn(move || {
                for _ in 0..20 {
                    let mut y = vec![0.0; n * rows];
                    m.matmul(&x, n, &mut y).unwrap();
                    assert_eq!(y, want);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    // inside a rayon pool, many calls at once, and under a 1-thread pool: the same results
    for threads in [1, 3] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            use rayon::prelude::*;
            inputs.par_iter().zip(&expected).for_each(|((n, x), want)| {
                let mut y = vec![0.0; n * rows];
                m.matmul(x, *n, &mut y).unwrap();
                assert_eq!(&y, want);
            });
        });
    }
}
