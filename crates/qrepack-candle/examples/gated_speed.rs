//! Speed of the gated activation (`ops::gated`, SwiGLU and GeGLU) on a prompt's feed-forward
//! chunk, on this CPU's widest vectors.
//!
//! ```sh
//! cargo run --release -p qrepack-candle --example gated_speed -- [threads] [rows] [width]
//! ```
//!
//! Defaults: 2 threads, 64 rows (the decoder's feed-forward chunk), width 1536 (SmolLM2-135M).
//! Prints the best of 5 rounds of 200 calls, in values per nanosecond.

use std::time::Instant;

use qrepack_candle::ops::{gated, Gate};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arg = |i: usize, default: usize| -> Result<usize, Box<dyn std::error::Error>> {
        Ok(std::env::args().nth(i).map_or(Ok(default), |s| s.parse())?)
    };
    let (threads, rows, width) = (arg(1, 2)?, arg(2, 64)?, arg(3, 1536)?);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()?;
    // gate and up side by side in each row, as the fused product writes them; values in -5..5
    let src: Vec<f32> = (0..rows * 2 * width)
        .map(|i| ((i * 7919) % 1000) as f32 / 100.0 - 5.0)
        .collect();
    let mut out = vec![0.0f32; rows * width];
    const CALLS: usize = 200;
    for gate in [Gate::SwiGlu, Gate::GeGlu] {
        let best = pool.install(|| {
            (0..5)
                .map(|_| {
                    let start = Instant::now();
                    for _ in 0..CALLS {
                        gated(gate, &src, 2 * width, (0, width), &mut out, width);
                    }
                    start.elapsed().as_secs_f64() / CALLS as f64
                })
                .fold(f64::INFINITY, f64::min)
        });
        println!(
            "{gate:?}: {threads} threads, {rows} x {width}: {:.1} us a call, {:.2} values/ns",
            best * 1e6,
            (rows * width) as f64 / best / 1e9
        );
    }
    Ok(())
}
