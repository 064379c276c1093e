//! The cost of one parallel call on a rayon pool like the decoder's: a call hands one task of
//! 20 us of work to each thread, after a gap of serial work of a given length (the pool's
//! threads spin for a while after their last task, then sleep); its wall time beyond the 20 us
//! is the cost of starting the threads and joining them.
//!
//! ```text
//! cargo run --release -p qrepack-candle --example pool_wake -- [threads]
//! ```
//! (default 2). A decode step of SmolLM2-135M makes about 150 such calls (five per layer:
//! q/k/v, attention, output projection, gate/up, down), a few microseconds of serial work
//! apart.

use std::hint::black_box;
use std::time::{Duration, Instant};

use rayon::prelude::*;

/// Spins for `d` (a stand-in for the serial work between two parallel calls).
fn busy(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

fn main() {
    let threads: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("a thread count"))
        .unwrap_or(2);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("a pool");
    const TASK: Duration = Duration::from_micros(20);
    println!("{threads} threads: one call of {threads} tasks of 20 us after a gap of serial work");
    println!(
        "{:>12} {:>18} {:>14}",
        "gap", "overhead median us", "p90 us"
    );
    for gap_us in [0u64, 2, 10, 50, 200, 1000, 5000] {
        let gap = Duration::from_micros(gap_us);
        let reps = if gap_us >= 1000 { 200 } else { 2000 };
        let mut times: Vec<f64> = pool.install(|| {
            (0..reps)
                .map(|_| {
                    busy(gap);
                    let t = Instant::now();
                    (0..threads).into_par_iter().with_max_len(1).for_each(|i| {
                        busy(TASK);
                        black_box(i);
                    });
                    (t.elapsed() - TASK).as_secs_f64() * 1e6
                })
                .collect()
        });
        times.sort_by(f64::total_cmp);
        println!(
            "{:>10}us {:>18.2} {:>14.2}",
            gap_us,
            times[times.len() / 2],
            times[times.len() * 9 / 10]
        );
    }
}
