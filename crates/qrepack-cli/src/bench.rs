//! `qrepack bench`: times `QMatrix::matmul` on the peer's deterministic data.

use std::time::Instant;

use anyhow::{bail, Context, Result};
use qrepack::cpu::CpuFeatures;
use qrepack::{GgmlType, Layout, QMatrix};
use rayon::prelude::*;
use serde::Serialize;

use crate::data;
use crate::table::{fmt_ms, fmt_rate, fmt_speedup, Align, Table};

/// The default suite's first group: LLaMA-7B-shaped matrices (attention / FFN up / FFN down).
pub const SUITE_SHAPES: [(usize, usize); 3] = [(4096, 4096), (11008, 4096), (4096, 11008)];
/// The default suite's weight types.
pub const SUITE_TYPES: [GgmlType; 4] = [
    GgmlType::Q4_0,
    GgmlType::Q4_K,
    GgmlType::IQ4_NL,
    GgmlType::Q8_0,
];
/// The default suite's batches: one token (decode) and a 512-token prompt.
pub const SUITE_BATCHES: [usize; 2] = [1, 512];

/// The default suite's second group: the matrices of the small models people run on CPUs,
/// SmolLM2-135M (hidden 576, FFN 1536) and Gemma 3 270M (hidden 640, FFN 2048, Q heads 1024),
/// rows x cols.
pub const SMALL_SHAPES: [(usize, usize); 7] = [
    (576, 576),
    (1536, 576),
    (576, 1536),
    (1024, 640),
    (640, 1024),
    (2048, 640),
    (640, 2048),
];
/// The small-model group's types (each on the shapes whose columns it fits).
pub const SMALL_TYPES: [GgmlType; 6] = [
    GgmlType::Q4_0,
    GgmlType::Q4_K,
    GgmlType::IQ4_NL,
    GgmlType::Q8_0,
    GgmlType::Q5_0,
    GgmlType::Q6_K,
];
/// The small-model group's batches: decode, a short and a long prompt.
pub const SMALL_BATCHES: [usize; 3] = [1, 32, 512];
/// Seconds of timed reps per small-model measurement in the default suite (its calls take
/// microseconds to milliseconds, so this is still hundreds of reps).
pub const SMALL_MIN_TIME: f64 = 0.1;

/// The `types` group: every weight type qrepack loads that ggml also multiplies (Q8_1 and Q8_K
/// are activation types there), on the LLaMA-7B attention and FFN-up shapes.
pub const TYPES_SUITE_TYPES: [GgmlType; 15] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
];
/// The `types` group's shapes (rows x cols).
pub const TYPES_SUITE_SHAPES: [(usize, usize); 2] = [(4096, 4096), (11008, 4096)];
/// The `types` group's batches: decode, a short and a long prompt.
pub const TYPES_SUITE_BATCHES: [usize; 3] = [1, 32, 512];

/// Batches up to this size are timed "cold" (rotating over copies of the weights), like decode.
pub const COLD_MAX_BATCH: usize = 3;

/// Adaptive timing takes only 2 reps of calls longer than this many seconds.
pub const LONG_CALL_S: f64 = 1.0;

/// Which layouts to time.
#[derive(Clone, Debug, PartialEq)]
pub enum LayoutSel {
    /// The layout `QMatrix::new` picks, and `plain` too when `vs_plain` (and it differs).
    Auto { vs_plain: bool },
    /// Exactly these layouts.
    Fixed(Vec<Layout>),
}

/// How many repetitions to time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reps {
    /// Exactly this many (after the warm-up).
    Fixed(usize),
    /// Until `min_time` seconds have passed and at least `min` reps ran (2 for calls longer
    /// than [`LONG_CALL_S`]), at most `max`.
    Adaptive {
        min_time: f64,
        min: usize,
        max: usize,
    },
}

/// A whole benchmark run: every type x shape x batch x layout.
#[derive(Clone, Debug)]
pub struct Config {
    pub types: Vec<GgmlType>,
    pub shapes: Vec<(usize, usize)>,
    pub batches: Vec<usize>,
    pub layouts: LayoutSel,
    pub reps: Reps,
    /// Weights to rotate over for small batches, in MiB (0: always hot).
    pub cold_mb: f64,
    pub seed: u64,
    /// Progress lines on stderr.
    pub progress: bool,
    /// Compare each result with an f64 reference on the dequantized weights (sampled rows).
    pub check: bool,
    /// Time the phases of each call too (a second, profiled series of reps).
    pub phases: bool,
    /// Leave out the (type, shape) pairs whose columns the type cannot hold, instead of
    /// failing (a suite crossing block sizes 32 and 256).
    pub skip_unfit: bool,
}

impl Config {
    /// Checks the whole plan before any data is generated, with messages naming the option.
    pub fn validate(&self) -> Result<()> {
        if self.types.is_empty() || self.shapes.is_empty() || self.batches.is_empty() {
            bail!("nothing to measure");
        }
        if let Some(b) = self.batches.iter().find(|&&b| b == 0) {
            bail!("--batch must be at least 1, got {b}");
        }
        if !(self.cold_mb.is_finite() && self.cold_mb >= 0.0) {
            bail!(
                "--cold-mb must be a non-negative number, got {}",
                self.cold_mb
            );
        }
        match self.reps {
            Reps::Fixed(0) => bail!("--reps must be at least 1"),
            Reps::Adaptive { min_time, .. } if !(min_time.is_finite() && min_time >= 0.0) => {
                bail!("--min-time must be a non-negative number of seconds, got {min_time}")
            }
            _ => {}
        }
        for &(rows, cols) in &self.shapes {
            if rows == 0 || cols == 0 {
                bail!("--rows and --cols must be at least 1, got {rows} x {cols}");
            }
            for &batch in &self.batches {
                if batch
                    .checked_mul(cols.max(rows))
                    .is_none_or(|n| n > 1 << 32)
                {
                    bail!("--batch {batch} with a {rows} x {cols} matrix is too large");
                }
            }
            if rows.checked_mul(cols).is_none_or(|n| n > 1 << 32) {
                bail!("a {rows} x {cols} matrix is too large");
            }
            for &ty in &self.types {
                if self.skip_unfit && ty.row_bytes(cols).is_err() {
                    continue;
                }
                ty.row_bytes(cols)
                    .with_context(|| format!("--cols {cols} does not fit {ty}"))?;
                for layout in self.layouts_for(ty, rows) {
                    check_layout(layout, ty, rows)?;
                }
            }
        }
        Ok(())
    }

    /// The layouts timed for a `rows`-row matrix of `ty`, the automatic choice first.
    pub fn layouts_for(&self, ty: GgmlType, rows: usize) -> Vec<Layout> {
        match &self.layouts {
            LayoutSel::Fixed(list) => list.clone(),
            LayoutSel::Auto { vs_plain } => {
                let best = Layout::best_for(ty, rows, CpuFeatures::get());
                let mut v = vec![best];
                if *vs_plain && best != Layout::Plain {
                    v.push(Layout::Plain);
                }
                v
            }
        }
    }

    /// Number of measurements in the plan.
    pub fn count(&self) -> usize {
        let mut n = 0;
        for &(rows, cols) in &self.shapes {
            for &ty in &self.types {
                if self.skip_unfit && ty.row_bytes(cols).is_err() {
                    continue;
                }
                n += self.layouts_for(ty, rows).len() * self.batches.len();
            }
        }
        n
    }
}

/// An error naming why `layout` cannot hold a `rows`-row matrix of `ty`.
pub fn check_layout(layout: Layout, ty: GgmlType, rows: usize) -> Result<()> {
    if let Some(wt) = layout.weight_type() {
        if wt != ty {
            bail!("layout {layout} holds {wt} weights, not {ty} (try --layout plain, or see `qrepack info`)");
        }
    }
    let r = layout.rows_interleaved();
    if !rows.is_multiple_of(r) {
        bail!("layout {layout} interleaves {r} rows, but --rows {rows} is not a multiple of {r}");
    }
    Ok(())
}

/// Order statistics of the timed reps, in seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stats {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub p10: f64,
    pub p90: f64,
}

/// Linear-interpolated percentile of sorted values, as the peer computes it.
fn pct(sorted: &[f64], p: f64) -> f64 {
    let idx = p * (sorted.len() - 1) as f64;
    let lo = idx as usize;
    let hi = (lo + 1).min(sorted.len() - 1);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (idx - lo as f64)
}

impl Stats {
    /// Statistics of a non-empty sample.
    pub fn of(times: &[f64]) -> Stats {
        assert!(!times.is_empty());
        let mut t = times.to_vec();
        t.sort_by(f64::total_cmp);
        Stats {
            median: pct(&t, 0.5),
            min: pct(&t, 0.0),
            max: pct(&t, 1.0),
            p10: pct(&t, 0.1),
            p90: pct(&t, 0.9),
        }
    }
}

/// One timed configuration.
#[derive(Clone, Debug)]
pub struct Measurement {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub batch: usize,
    pub threads: usize,
    pub layout: Layout,
    /// The layout is the one `QMatrix::new` picks.
    pub chosen: bool,
    pub kernels: &'static str,
    /// `"hot"` (one matrix) or `"cold"` (rotating over `copies`).
    pub mode: &'static str,
    pub copies: usize,
    pub reps: usize,
    pub stats: Stats,
    /// Stored weight bytes of one matrix.
    pub weight_bytes: usize,
    /// `plain` median / this median, when `plain` was timed too.
    pub speedup_vs_plain: Option<f64>,
    pub seed: u64,
    /// The `--check` result.
    pub check: Option<Check>,
    /// The `--phases` result.
    pub phases: Option<Phases>,
}

/// Where one call's time goes (`--phases`), in microseconds per call, from a profiled series
/// of reps run after the timed ones ([`qrepack::profile`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Phases {
    /// The profiled calls' mean, which includes the profiling's own small cost.
    pub total_us: f64,
    /// Quantizing the activations.
    pub quantize_us: f64,
    /// The parallel kernel section, wall clock.
    pub kernel_us: f64,
    /// Of `kernel_us`: time inside the kernel tasks of the busiest thread.
    pub busy_us: f64,
    /// Of `busy_us`: how much longer the busiest thread worked than the threads' mean.
    pub imbalance_us: f64,
    /// Of `kernel_us`: the rest, when the busiest thread ran no task (waking workers, handing
    /// out and joining tasks).
    pub scheduling_us: f64,
    /// Everything else (checks, scratch).
    pub other_us: f64,
    /// Kernel tasks per call.
    pub tasks: f64,
}

impl Phases {
    fn of(p: &qrepack::profile::PhaseTimes, threads: usize) -> Phases {
        let us = |d: std::time::Duration| p.per_call(d).as_secs_f64() * 1e6;
        Phases {
            total_us: us(p.total),
            quantize_us: us(p.quantize),
            kernel_us: us(p.kernel_wall),
            busy_us: us(p.busiest_thread),
            imbalance_us: us(p.imbalance(threads)),
            scheduling_us: us(p.scheduling()),
            other_us: us(p.other()),
            tasks: p.tasks as f64 / p.calls.max(1) as f64,
        }
    }
}

/// Error of a result against an f64 reference computed from the dequantized weights.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Check {
    /// Outputs compared (rows sampled with a stride so the reference stays ~2e8 MACs).
    pub samples: usize,
    /// `sqrt(sum err^2 / sum ref^2)`.
    pub rel_rms_err: f64,
    pub max_abs_err: f64,
}

/// Largest relative RMS error `--check` accepts without a warning (activation quantization
/// to 8 bits stays far below it).
pub const CHECK_WARN: f64 = 0.02;

/// Compares `y` (`batch x rows`) with `x W^T` in f64, `W` dequantized from `q` with
/// `qrepack::dequantize`, on every `stride`-th row.
pub fn check(
    ty: GgmlType,
    q: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    batch: usize,
    y: &[f32],
) -> Result<Check> {
    let row_bytes = ty.row_bytes(cols)?;
    let work = rows as f64 * cols as f64 * batch as f64;
    let stride = ((work / 2e8) as usize).max(1);
    let sampled: Vec<usize> = (0..rows).step_by(stride).collect();
    let parts = sampled
        .par_iter()
        .map(|&i| -> Result<(f64, f64, f64, usize)> {
            let w = qrepack::dequantize(ty, &q[i * row_bytes..(i + 1) * row_bytes], 1, cols)?;
            let (mut se, mut sr, mut maxe) = (0.0f64, 0.0f64, 0.0f64);
            for j in 0..batch {
                let xr = &x[j * cols..(j + 1) * cols];
                let r: f64 = w.iter().zip(xr).map(|(&a, &b)| a as f64 * b as f64).sum();
                let e = y[j * rows + i] as f64 - r;
                se += e * e;
                sr += r * r;
                maxe = maxe.max(e.abs());
            }
            Ok((se, sr, maxe, batch))
        })
        .collect::<Result<Vec<_>>>()
        .context("--check: dequantizing the weights")?;
    let (se, sr, maxe, n) = parts.iter().fold((0.0, 0.0, 0.0f64, 0), |a, p| {
        (a.0 + p.0, a.1 + p.1, a.2.max(p.2), a.3 + p.3)
    });
    Ok(Check {
        samples: n,
        rel_rms_err: (se / sr.max(1e-300)).sqrt(),
        max_abs_err: maxe,
    })
}

impl Measurement {
    pub fn flop(&self) -> f64 {
        2.0 * self.rows as f64 * self.cols as f64 * self.batch as f64
    }
    pub fn gflops(&self) -> f64 {
        self.flop() / self.stats.median * 1e-9
    }
    pub fn weight_gbs(&self) -> f64 {
        self.weight_bytes as f64 / self.stats.median * 1e-9
    }

    /// The JSON report of this measurement.
    pub fn json(&self) -> MeasurementJson<'_> {
        MeasurementJson {
            ty: self.ty.name(),
            rows: self.rows,
            cols: self.cols,
            batch: self.batch,
            threads: self.threads,
            layout: self.layout.name(),
            chosen: self.chosen,
            kernels: self.kernels,
            mode: self.mode,
            copies: self.copies,
            reps: self.reps,
            median_ms: self.stats.median * 1e3,
            min_ms: self.stats.min * 1e3,
            max_ms: self.stats.max * 1e3,
            p10_ms: self.stats.p10 * 1e3,
            p90_ms: self.stats.p90 * 1e3,
            gflops: self.gflops(),
            weight_gbs: self.weight_gbs(),
            weight_bytes: self.weight_bytes,
            speedup_vs_plain: self.speedup_vs_plain,
            seed: self.seed,
            cpu: CpuFeatures::get().describe(),
            check_samples: self.check.map(|c| c.samples),
            check_rel_rms_err: self.check.map(|c| c.rel_rms_err),
            check_max_abs_err: self.check.map(|c| c.max_abs_err),
            phases: self.phases,
        }
    }

    /// One JSON object on one line, keys in report order.
    pub fn to_json_line(&self) -> Result<String> {
        Ok(serde_json::to_string(&self.json())?)
    }
}

/// One line of `bench --json`, keys in this order (non-finite numbers are written as `null`).
#[derive(Debug, Serialize)]
pub struct MeasurementJson<'a> {
    #[serde(rename = "type")]
    pub ty: &'static str,
    pub rows: usize,
    pub cols: usize,
    pub batch: usize,
    pub threads: usize,
    pub layout: &'static str,
    pub chosen: bool,
    /// The kernel set the matrix runs (`QMatrix::kernel_name`).
    pub kernels: &'a str,
    pub mode: &'a str,
    pub copies: usize,
    pub reps: usize,
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub p10_ms: f64,
    pub p90_ms: f64,
    pub gflops: f64,
    pub weight_gbs: f64,
    pub weight_bytes: usize,
    pub speedup_vs_plain: Option<f64>,
    pub seed: u64,
    pub cpu: String,
    /// The `--check` result, only with `--check`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check_samples: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check_rel_rms_err: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check_max_abs_err: Option<f64>,
    /// The `--phases` result, only with `--phases`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phases: Option<Phases>,
}

/// The per-phase table of the measurements that have phases (`--phases`).
pub fn phase_table(ms: &[Measurement]) -> Table {
    let mut t = Table::new(&[
        ("type", Align::Left),
        ("shape", Align::Left),
        ("batch", Align::Right),
        ("layout", Align::Left),
        ("mode", Align::Left),
        ("total us", Align::Right),
        ("quantize us", Align::Right),
        ("kernel us", Align::Right),
        ("busy us", Align::Right),
        ("imbalance us", Align::Right),
        ("scheduling us", Align::Right),
        ("other us", Align::Right),
        ("tasks", Align::Right),
    ]);
    let us = |v: f64| format!("{v:.1}");
    for m in ms {
        let Some(p) = m.phases else { continue };
        t.push(vec![
            m.ty.to_string(),
            format!("{}x{}", m.rows, m.cols),
            m.batch.to_string(),
            m.layout.to_string(),
            m.mode.to_string(),
            us(p.total_us),
            us(p.quantize_us),
            us(p.kernel_us),
            us(p.busy_us),
            us(p.imbalance_us),
            us(p.scheduling_us),
            us(p.other_us),
            format!("{:.1}", p.tasks),
        ]);
    }
    t
}

/// The report table of `ms`.
pub fn table(ms: &[Measurement]) -> Table {
    let mut t = Table::new(&[
        ("type", Align::Left),
        ("shape", Align::Left),
        ("batch", Align::Right),
        ("layout", Align::Left),
        ("kernels", Align::Left),
        ("mode", Align::Left),
        ("reps", Align::Right),
        ("median ms", Align::Right),
        ("GFLOP/s", Align::Right),
        ("weight GB/s", Align::Right),
        ("vs plain", Align::Right),
    ]);
    for m in ms {
        let mode = if m.copies > 1 {
            format!("{} x{}", m.mode, m.copies)
        } else {
            m.mode.to_string()
        };
        t.push(vec![
            m.ty.to_string(),
            format!("{}x{}", m.rows, m.cols),
            m.batch.to_string(),
            m.layout.to_string(),
            m.kernels.to_string(),
            mode,
            m.reps.to_string(),
            fmt_ms(m.stats.median * 1e3),
            fmt_rate(m.gflops()),
            fmt_rate(m.weight_gbs()),
            fmt_speedup(m.speedup_vs_plain),
        ]);
    }
    t
}

/// Times `matmul` over `mats` (rotating when there are several): one warm-up call per matrix,
/// then the reps. Returns the seconds of each rep.
pub fn time_reps(
    mats: &[QMatrix],
    x: &[f32],
    batch: usize,
    y: &mut [f32],
    reps: Reps,
) -> Result<Vec<f64>> {
    let t0 = Instant::now();
    for m in mats {
        m.matmul(x, batch, y)?;
    }
    let warm = t0.elapsed().as_secs_f64() / mats.len() as f64;
    let reps = match reps {
        // a call of more than a second is timed twice only: keeps the suite within its budget
        Reps::Adaptive { min_time, min, max } if warm > LONG_CALL_S => Reps::Adaptive {
            min_time,
            min: min.min(2),
            max,
        },
        r => r,
    };
    let mut times = Vec::new();
    let start = Instant::now();
    loop {
        let i = times.len();
        let done = match reps {
            Reps::Fixed(r) => i >= r,
            Reps::Adaptive { min_time, min, max } => {
                i >= max || (i >= min && start.elapsed().as_secs_f64() >= min_time)
            }
        };
        if done {
            break;
        }
        let m = &mats[i % mats.len()];
        let t0 = Instant::now();
        m.matmul(x, batch, y)?;
        times.push(t0.elapsed().as_secs_f64().max(1e-9));
    }
    Ok(times)
}

/// Runs the plan on the current rayon pool. `on_group` receives the measurements of each
/// (type, shape) as soon as they are done, in report order (batch, then the chosen layout
/// first); all of them are returned at the end.
pub fn run(
    cfg: &Config,
    mut on_group: impl FnMut(&[Measurement]) -> Result<()>,
) -> Result<Vec<Measurement>> {
    cfg.validate()?;
    let threads = rayon::current_num_threads();
    let total = cfg.count();
    let mut done = 0usize;
    let mut all = Vec::with_capacity(total);
    let say = |msg: String| {
        if cfg.progress {
            eprintln!("{msg}");
        }
    };
    for &(rows, cols) in &cfg.shapes {
        let t0 = Instant::now();
        let w = data::weights(cfg.seed, rows, cols)?;
        let xs: Vec<Vec<f32>> = cfg
            .batches
            .iter()
            .map(|&b| data::activations(cfg.seed, b, cols))
            .collect::<Result<_>>()?;
        say(format!(
            "data {rows}x{cols} (seed {}): {:.2} s",
            cfg.seed,
            t0.elapsed().as_secs_f64()
        ));
        for &ty in &cfg.types {
            if cfg.skip_unfit && ty.row_bytes(cols).is_err() {
                continue;
            }
            let t0 = Instant::now();
            let q = data::quantize(ty, &w, rows, cols)?;
            say(format!(
                "quantize {ty} {rows}x{cols}: {:.2} s",
                t0.elapsed().as_secs_f64()
            ));
            let layouts = cfg.layouts_for(ty, rows);
            let best = Layout::best_for(ty, rows, CpuFeatures::get());
            let mut group: Vec<(usize, Measurement)> = Vec::new();
            for (li, &layout) in layouts.iter().enumerate() {
                let t0 = Instant::now();
                let first =
                    QMatrix::with_layout(ty, rows, cols, &q, layout).with_context(|| {
                        format!("building a {rows}x{cols} {ty} matrix in layout {layout}")
                    })?;
                let stored = first.stored_bytes().max(1);
                let any_cold = cfg.batches.iter().any(|&b| b <= COLD_MAX_BATCH);
                let copies = if any_cold && cfg.cold_mb > 0.0 {
                    ((cfg.cold_mb * 1048576.0 / stored as f64).ceil() as usize).max(1)
                } else {
                    1
                };
                let mut mats = vec![first];
                mats.extend(
                    (1..copies)
                        .into_par_iter()
                        .map(|_| QMatrix::with_layout(ty, rows, cols, &q, layout))
                        .collect::<Result<Vec<_>, _>>()?,
                );
                say(format!(
                    "build {ty} {rows}x{cols} {layout} x{copies}: {:.2} s",
                    t0.elapsed().as_secs_f64()
                ));
                for (&batch, x) in cfg.batches.iter().zip(&xs) {
                    let cold = batch <= COLD_MAX_BATCH && mats.len() > 1;
                    let used = if cold { &mats[..] } else { &mats[..1] };
                    let mut y = vec![0.0f32; batch * rows];
                    let times = time_reps(used, x, batch, &mut y, cfg.reps)?;
                    if let Some(bad) = y.iter().position(|v| !v.is_finite()) {
                        eprintln!(
                            "warning: {ty} {rows}x{cols} batch {batch} {layout}: non-finite output y[{bad}] = {}",
                            y[bad]
                        );
                    }
                    let mut m = Measurement {
                        ty,
                        rows,
                        cols,
                        batch,
                        threads,
                        layout,
                        chosen: layout == best,
                        kernels: used[0].kernel_name(),
                        mode: if cold { "cold" } else { "hot" },
                        copies: used.len(),
                        reps: times.len(),
                        stats: Stats::of(&times),
                        weight_bytes: stored,
                        speedup_vs_plain: None,
                        seed: cfg.seed,
                        check: None,
                        phases: None,
                    };
                    if cfg.phases {
                        qrepack::profile::start();
                        let profiled = time_reps(used, x, batch, &mut y, Reps::Fixed(times.len()));
                        let p = qrepack::profile::stop();
                        profiled?;
                        m.phases = Some(Phases::of(&p, threads));
                    }
                    if cfg.check {
                        let c = check(ty, &q, rows, cols, x, batch, &y)?;
                        let msg = format!(
                            "check {ty} {rows}x{cols} batch {batch} {layout}: rel rms err {:.3e}, max abs err {:.3e} ({} outputs)",
                            c.rel_rms_err, c.max_abs_err, c.samples
                        );
                        if c.rel_rms_err > CHECK_WARN || !c.rel_rms_err.is_finite() {
                            eprintln!("warning: {msg}");
                        } else {
                            say(msg);
                        }
                        m.check = Some(c);
                    }
                    done += 1;
                    say(format!(
                        "[{done:>width$}/{total}] {ty} {rows}x{cols} batch {batch} {layout} ({}, {}{}): median {} ms, {} GFLOP/s, {} reps",
                        m.kernels,
                        m.mode,
                        if m.copies > 1 { format!(" x{}", m.copies) } else { String::new() },
                        fmt_ms(m.stats.median * 1e3),
                        fmt_rate(m.gflops()),
                        m.reps,
                        width = total.to_string().len(),
                    ));
                    group.push((li, m));
                }
            }
            // report order: batch, then the layouts in plan order; then the speedups
            group.sort_by_key(|(li, m)| (m.batch, *li));
            let mut group: Vec<Measurement> = group.into_iter().map(|(_, m)| m).collect();
            let plain: Vec<(usize, f64)> = group
                .iter()
                .filter(|m| m.layout == Layout::Plain)
                .map(|m| (m.batch, m.stats.median))
                .collect();
            for m in group.iter_mut().filter(|m| m.layout != Layout::Plain) {
                m.speedup_vs_plain = plain
                    .iter()
                    .find(|(b, _)| *b == m.batch)
                    .map(|(_, p)| p / m.stats.median);
            }
            on_group(&group)?;
            all.extend(group);
        }
    }
    Ok(all)
}

#[cfg(test)]
mod tests;
