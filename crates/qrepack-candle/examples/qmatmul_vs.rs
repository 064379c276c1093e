//! One quantized matmul, candle-core's `QMatMul` against qrepack's `QMatrix`, on the same
//! quantized weights and the same activations, with the same number of threads.
//!
//! ```text
//! cargo run --release -p qrepack-candle --example qmatmul_vs -- [--threads 2] \
//!     [--types q4_0,q4_K,q8_0] [--shapes 4096x4096] [--batches 1,8,32,512] \
//!     [--reps N] [--round-ms 300] [--rounds 3] [--seed 1] [--json]
//! ```
//!
//! Weights `W` (`rows` outputs x `cols` inputs) and activations `x` (`batch` x `cols`) are
//! splitmix64 data in `[-1, 1)`. candle quantizes `W` (`QTensor::quantize`); qrepack gets the
//! very bytes candle holds (`QTensor::data`, ggml blocks in ggml's row layout) through
//! `QMatrix::new`. Both compute `y = x W^T` from f32 activations: candle with
//! `QMatMul::forward` on a `[batch, cols]` tensor (its output allocation included, as in a
//! model), qrepack with `QMatrix::matmul` into a preallocated `y`.
//!
//! Threads. `--threads N` (default 2) is applied before anything touches candle or rayon:
//!
//! * candle-core 0.11.1 runs its CPU quantized matmuls (`k_quants::matmul`, the x86 repacked
//!   tiles of `repack_x86`) on its own "barrier pool" (`utils::barrier_pool`), not on rayon. The
//!   pool is built once, on first use, with `CANDLE_NUM_THREADS - 1` workers (threads named
//!   `candle-bp-<i>`); the calling thread takes part as the last worker, so N threads compute.
//!   Without `CANDLE_NUM_THREADS` it falls back to `RAYON_NUM_THREADS`, then to the number of
//!   physical (or `CANDLE_CPU_MASK` / preferred) cores. Its other pool (`candle_pool`, rayon,
//!   sized by `RAYON_NUM_THREADS`) is not used by the quantized matmul. So this program sets
//!   `CANDLE_NUM_THREADS` and `RAYON_NUM_THREADS` to N as the first thing in `main`, and calls
//!   candle from the main thread.
//! * qrepack runs inside a rayon `ThreadPool` of N threads (`pool.install`).
//!
//! After the first candle product the program counts the `candle-bp-*` threads of the process
//! (`/proc/self/task/*/comm`) and checks qrepack's pool size; a mismatch is an error. The
//! `busy` column is the CPU time of all the process's threads over a side's timed rounds divided
//! by their wall time (`/proc/self/task/*/schedstat`): about N when that side keeps N threads
//! busy on an idle machine.
//!
//! Timing. Per case: two warm-up products per side (candle repacks its weights into its cache on
//! the first one), then `--rounds` rounds (default 3) alternating candle and qrepack; a round is
//! the median of R products, R chosen so that a round lasts about `--round-ms` (or `--reps R`).
//! Reported: the best of the round medians of each side, and qrepack / candle (below 1:
//! qrepack faster). The outputs must agree: relative L2 error `|y_q - y_c| / |y_c|` < 2e-2.
//!
//! Output: a markdown table on stdout; with `--json`, one JSON object per case on stdout and
//! the table on stderr.

use std::hint::black_box;
use std::process::ExitCode;
use std::time::Instant;

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};
use qrepack::cpu::CpuFeatures;
use qrepack::rng::SplitMix64;
use qrepack::{GgmlType, QMatrix};

/// Largest accepted relative L2 difference between the two outputs.
const MAX_REL_ERR: f64 = 2e-2;

struct Opts {
    threads: usize,
    types: Vec<GgmlType>,
    shapes: Vec<(usize, usize)>,
    batches: Vec<usize>,
    reps: Option<usize>,
    round_ms: f64,
    rounds: usize,
    seed: u64,
    json: bool,
}

const USAGE: &str = "usage: qmatmul_vs [--threads 2] [--types q4_0,q4_K,q8_0] \
[--shapes 4096x4096] [--batches 1,8,32,512] [--reps N] [--round-ms 300] [--rounds 3] \
[--seed 1] [--json]";

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        threads: 2,
        types: vec![
            GgmlType::Q4_0,
            GgmlType::Q4_K,
            GgmlType::Q8_0,
            GgmlType::IQ4_NL,
        ],
        shapes: vec![(4096, 4096)],
        batches: vec![1, 8, 32, 512],
        reps: None,
        round_ms: 300.0,
        rounds: 3,
        seed: 1,
        json: false,
    };
    fn list<T>(v: &str, f: impl Fn(&str) -> Result<T, String>) -> Result<Vec<T>, String> {
        v.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(f)
            .collect()
    }
    fn num(flag: &str, s: &str) -> Result<usize, String> {
        s.parse::<usize>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("{flag} wants a positive integer, got '{s}'"))
    }
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .map(String::as_str)
                .ok_or_else(|| format!("{a} needs a value"))
        };
        match a.as_str() {
            "--threads" => o.threads = num(a, val()?)?,
            "--types" => {
                o.types = list(val()?, |s| s.parse::<GgmlType>().map_err(|e| e.to_string()))?
            }
            "--shapes" => {
                o.shapes = list(val()?, |s| {
                    let (r, c) = s
                        .split_once(['x', 'X'])
                        .ok_or_else(|| format!("shape '{s}' is not ROWSxCOLS"))?;
                    Ok((num("--shapes", r)?, num("--shapes", c)?))
                })?
            }
            "--batches" => o.batches = list(val()?, |s| num("--batches", s))?,
            "--reps" => o.reps = Some(num(a, val()?)?),
            "--round-ms" => {
                let s = val()?;
                o.round_ms = s
                    .parse::<f64>()
                    .ok()
                    .filter(|&v| v > 0.0)
                    .ok_or_else(|| format!("--round-ms wants a positive number, got '{s}'"))?
            }
            "--rounds" => o.rounds = num(a, val()?)?,
            "--seed" => {
                let s = val()?;
                o.seed = s
                    .parse()
                    .map_err(|_| format!("--seed wants an integer, got '{s}'"))?
            }
            "--json" => o.json = true,
            "-h" | "--help" => return Err(USAGE.into()),
            s => return Err(format!("unexpected argument '{s}'\n{USAGE}")),
        }
    }
    if o.types.is_empty() || o.shapes.is_empty() || o.batches.is_empty() {
        return Err(format!("empty --types, --shapes or --batches\n{USAGE}"));
    }
    Ok(o)
}

/// candle-core 0.11.1's dtype for a qrepack type, if candle has it.
fn candle_dtype(ty: GgmlType) -> Option<GgmlDType> {
    Some(match ty {
        GgmlType::Q4_0 => GgmlDType::Q4_0,
        GgmlType::Q4_1 => GgmlDType::Q4_1,
        GgmlType::Q5_0 => GgmlDType::Q5_0,
        GgmlType::Q5_1 => GgmlDType::Q5_1,
        GgmlType::Q8_0 => GgmlDType::Q8_0,
        GgmlType::Q2_K => GgmlDType::Q2K,
        GgmlType::Q3_K => GgmlDType::Q3K,
        GgmlType::Q4_K => GgmlDType::Q4K,
        GgmlType::Q5_K => GgmlDType::Q5K,
        GgmlType::Q6_K => GgmlDType::Q6K,
        // Unquantized types would be dequantized by `QMatMul`; IQ4_NL / IQ4_XS do not exist in
        // candle-core 0.11.1; Q8_1 / Q8_K are activation types.
        _ => return None,
    })
}

fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

/// Names of the threads of this process.
fn thread_names() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("comm")).ok())
        .map(|s| s.trim().to_string())
        .collect()
}

/// CPU time (ns) of all the live threads of this process.
fn cpu_ns() -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    dir.flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

/// One side of the comparison: its product, its repetitions per round, its results.
struct Side<'a> {
    run: Box<dyn FnMut() -> Result<(), String> + 'a>,
    reps: usize,
    medians: Vec<f64>,
    cpu_ns: u64,
    wall_ns: u64,
}

impl<'a> Side<'a> {
    fn new(run: impl FnMut() -> Result<(), String> + 'a) -> Self {
        Side {
            run: Box::new(run),
            reps: 1,
            medians: Vec::new(),
            cpu_ns: 0,
            wall_ns: 0,
        }
    }

    /// Two warm-up products; sets the repetitions per round from the last one.
    fn warm_up(&mut self, fixed: Option<usize>, round_ms: f64) -> Result<(), String> {
        (self.run)()?;
        let t = Instant::now();
        (self.run)()?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        self.reps = fixed.unwrap_or_else(|| ((round_ms / ms.max(1e-3)) as usize).clamp(3, 10_000));
        Ok(())
    }

    /// One round: the median of `reps` products, in ms.
    fn round(&mut self) -> Result<(), String> {
        let cpu0 = cpu_ns();
        let wall = Instant::now();
        let mut times = Vec::with_capacity(self.reps);
        for _ in 0..self.reps {
            let t = Instant::now();
            (self.run)()?;
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        self.wall_ns += wall.elapsed().as_nanos() as u64;
        self.cpu_ns += cpu_ns().saturating_sub(cpu0);
        self.medians.push(median(&mut times));
        Ok(())
    }

    fn best(&self) -> f64 {
        self.medians.iter().copied().fold(f64::INFINITY, f64::min)
    }

    fn busy(&self) -> f64 {
        self.cpu_ns as f64 / self.wall_ns.max(1) as f64
    }
}

struct Row {
    ty: GgmlType,
    rows: usize,
    cols: usize,
    batch: usize,
    candle_ms: f64,
    qrepack_ms: f64,
    rel_err: f64,
    candle_reps: usize,
    qrepack_reps: usize,
    candle_busy: f64,
    qrepack_busy: f64,
    kernel: &'static str,
}

impl Row {
    fn ratio(&self) -> f64 {
        self.qrepack_ms / self.candle_ms
    }

    fn ok(&self) -> bool {
        self.rel_err < MAX_REL_ERR
    }

    fn json(&self, threads: usize) -> String {
        format!(
            "{{\"type\":\"{}\",\"rows\":{},\"cols\":{},\"batch\":{},\"threads\":{},\
\"candle_ms\":{:.4},\"qrepack_ms\":{:.4},\"ratio\":{:.4},\"rel_err\":{:.3e},\"ok\":{},\
\"candle_reps\":{},\"qrepack_reps\":{},\"candle_busy\":{:.2},\"qrepack_busy\":{:.2},\
\"qrepack_kernel\":\"{}\"}}",
            self.ty,
            self.rows,
            self.cols,
            self.batch,
            threads,
            self.candle_ms,
            self.qrepack_ms,
            self.ratio(),
            self.rel_err,
            self.ok(),
            self.candle_reps,
            self.qrepack_reps,
            self.candle_busy,
            self.qrepack_busy,
            self.kernel
        )
    }
}

/// Checks that candle's barrier pool has `threads - 1` workers (plus the calling thread).
fn check_candle_threads(threads: usize) -> Result<usize, String> {
    let workers = thread_names()
        .iter()
        .filter(|n| n.starts_with("candle-bp-"))
        .count();
    if workers + 1 != threads {
        return Err(format!(
            "candle's barrier pool has {workers} workers + the caller, {threads} threads wanted \
             (was CANDLE_NUM_THREADS read before main set it?)"
        ));
    }
    Ok(workers)
}

#[allow(clippy::too_many_arguments)]
fn run_case(
    o: &Opts,
    pool: &rayon::ThreadPool,
    ty: GgmlType,
    (rows, cols): (usize, usize),
    batch: usize,
    qmm: &QMatMul,
    qm: &QMatrix,
    candle_checked: &mut bool,
) -> Result<Row, String> {
    let e = |e: candle_core::Error| e.to_string();
    let x: Vec<f32> = SplitMix64::new(o.seed.wrapping_add(1 + batch as u64)).pm1_vec(batch * cols);
    let xt = Tensor::from_slice(&x, (batch, cols), &Device::Cpu).map_err(e)?;

    // agreement, from fresh outputs
    let yc = qmm.forward(&xt).map_err(e)?;
    if yc.dims() != [batch, rows] {
        return Err(format!(
            "candle output {:?}, wanted [{batch}, {rows}]",
            yc.dims()
        ));
    }
    let yc: Vec<f32> = yc.flatten_all().map_err(e)?.to_vec1().map_err(e)?;
    if !*candle_checked {
        let workers = check_candle_threads(o.threads)?;
        eprintln!(
            "candle: barrier pool of {workers} candle-bp workers + the calling thread = {} threads",
            workers + 1
        );
        *candle_checked = true;
    }
    let mut yq = vec![0f32; batch * rows];
    pool.install(|| qm.matmul(&x, batch, &mut yq))
        .map_err(|e| e.to_string())?;
    let (mut num, mut den) = (0f64, 0f64);
    for (&q, &c) in yq.iter().zip(&yc) {
        num += (q as f64 - c as f64).powi(2);
        den += (c as f64).powi(2);
    }
    let rel_err = (num / den.max(f64::MIN_POSITIVE)).sqrt();

    let mut candle = Side::new(|| {
        black_box(qmm.forward(black_box(&xt)).map_err(e)?);
        Ok(())
    });
    let mut qrepack = Side::new(|| {
        pool.install(|| qm.matmul(black_box(&x), batch, &mut yq))
            .map_err(|e| e.to_string())?;
        black_box(&mut yq);
        Ok(())
    });
    candle.warm_up(o.reps, o.round_ms)?;
    qrepack.warm_up(o.reps, o.round_ms)?;
    for _ in 0..o.rounds {
        candle.round()?;
        qrepack.round()?;
    }
    Ok(Row {
        ty,
        rows,
        cols,
        batch,
        candle_ms: candle.best(),
        qrepack_ms: qrepack.best(),
        rel_err,
        candle_reps: candle.reps,
        qrepack_reps: qrepack.reps,
        candle_busy: candle.busy(),
        qrepack_busy: qrepack.busy(),
        kernel: qm.kernel_name(),
    })
}

fn run(o: &Opts) -> Result<Vec<Row>, String> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(o.threads)
        .thread_name(|i| format!("qrepack-{i}"))
        .build()
        .map_err(|e| e.to_string())?;
    let in_pool = pool.install(rayon::current_num_threads);
    if in_pool != o.threads {
        return Err(format!(
            "qrepack's pool has {in_pool} threads, {} wanted",
            o.threads
        ));
    }
    eprintln!("qrepack: rayon pool of {in_pool} threads");
    let mut rows_out = Vec::new();
    let mut candle_checked = false;
    for &ty in &o.types {
        let Some(dt) = candle_dtype(ty) else {
            eprintln!("skipping {ty}: candle-core 0.11.1 has no quantized matmul for it");
            continue;
        };
        for &(rows, cols) in &o.shapes {
            let e = |e: candle_core::Error| format!("{ty} {rows}x{cols}: {e}");
            eprintln!("{ty} {rows}x{cols}: quantizing with candle ...");
            let w = SplitMix64::new(o.seed).pm1_vec(rows * cols);
            let wt = Tensor::from_vec(w, (rows, cols), &Device::Cpu).map_err(e)?;
            let qt = QTensor::quantize(&wt, dt).map_err(e)?;
            drop(wt);
            let bytes = qt.data().map_err(e)?.into_owned();
            let want = ty.matrix_bytes(rows, cols).map_err(|e| e.to_string())?;
            if bytes.len() != want {
                return Err(format!(
                    "{ty} {rows}x{cols}: candle holds {} bytes, ggml's layout takes {want}",
                    bytes.len()
                ));
            }
            let qm = pool
                .install(|| QMatrix::new(ty, rows, cols, &bytes))
                .map_err(|e| format!("{ty} {rows}x{cols}: {e}"))?;
            drop(bytes);
            let qmm = QMatMul::from_qtensor(qt).map_err(e)?;
            if !matches!(qmm, QMatMul::QTensor(_)) {
                return Err("QMatMul dequantized the weights (CANDLE_DEQUANTIZE_ALL set?)".into());
            }
            eprintln!(
                "{ty} {rows}x{cols}: qrepack layout {}, kernel {}",
                qm.layout(),
                qm.kernel_name()
            );
            for &batch in &o.batches {
                let r = run_case(
                    o,
                    &pool,
                    ty,
                    (rows, cols),
                    batch,
                    &qmm,
                    &qm,
                    &mut candle_checked,
                )?;
                eprintln!(
                    "  batch {batch}: candle {:.3} ms, qrepack {:.3} ms, ratio {:.3}, rel err {:.2e}",
                    r.candle_ms,
                    r.qrepack_ms,
                    r.ratio(),
                    r.rel_err
                );
                if o.json {
                    println!("{}", r.json(o.threads));
                }
                rows_out.push(r);
            }
        }
    }
    Ok(rows_out)
}

fn table(o: &Opts, rows: &[Row]) -> String {
    let mut s = format!(
        "CPU: {} | qrepack kernel sets: {} | threads: {} per side | best of {} round medians\n\n",
        cpu_name(),
        CpuFeatures::get().describe(),
        o.threads,
        o.rounds
    );
    s.push_str(
        "| type | rows x cols | batch | candle ms | qrepack ms | qrepack/candle | rel err | busy thr candle/qrepack |\n",
    );
    s.push_str("|---|---|--:|--:|--:|--:|--:|--:|\n");
    for r in rows {
        s.push_str(&format!(
            "| {} | {}x{} | {} | {:.3} | {:.3} | {:.3} | {:.2e}{} | {:.2} / {:.2} |\n",
            r.ty,
            r.rows,
            r.cols,
            r.batch,
            r.candle_ms,
            r.qrepack_ms,
            r.ratio(),
            r.rel_err,
            if r.ok() { "" } else { " FAIL" },
            r.candle_busy,
            r.qrepack_busy
        ));
    }
    s
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let o = match parse(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("qmatmul_vs: {e}");
            return ExitCode::from(2);
        }
    };
    // First thing after the arguments, before any candle or rayon call: candle sizes its
    // quantized-matmul barrier pool from CANDLE_NUM_THREADS (falling back to RAYON_NUM_THREADS)
    // and its rayon pool from RAYON_NUM_THREADS, once, on first use; rayon's global pool reads
    // RAYON_NUM_THREADS. (Single-threaded here, so setting the environment is sound.)
    std::env::set_var("CANDLE_NUM_THREADS", o.threads.to_string());
    std::env::set_var("RAYON_NUM_THREADS", o.threads.to_string());

    let rows = match run(&o) {
        Ok(rows) => rows,
        Err(e) => {
            eprintln!("qmatmul_vs: {e}");
            return ExitCode::FAILURE;
        }
    };
    let t = table(&o, &rows);
    if o.json {
        eprint!("\n{t}");
    } else {
        print!("\n{t}");
    }
    if rows.iter().all(Row::ok) {
        ExitCode::SUCCESS
    } else {
        eprintln!("qmatmul_vs: outputs disagree (rel err >= {MAX_REL_ERR})");
        ExitCode::FAILURE
    }
}
