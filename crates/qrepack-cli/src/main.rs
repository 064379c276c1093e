//! `qrepack`: benchmark and inspect qrepack's repacked quantized matrix multiplication.

mod bench;
mod data;
mod info;
mod table;

use std::io::{self, Write};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use qrepack::cpu::CpuFeatures;
use qrepack::{GgmlType, Layout};

use bench::{Config, LayoutSel, Reps};

const MAIN_EXAMPLES: &str = "\
Examples:
  qrepack bench                       # default suite (LLaMA-7B shapes, q4_0/q4_K/iq4_nl/q8_0, batch 1 and 512)
  qrepack bench --json > results.jsonl
  qrepack bench --type q4_0 --rows 4096 --cols 4096 --batch 1 --threads 2
  qrepack info --rows 11008

Set QREPACK_FORCE_SCALAR=1 to run the portable kernels instead of the SIMD ones.";

const BENCH_EXAMPLES: &str = "\
Without --rows/--cols the default suite runs: 4096x4096, 11008x4096 and 4096x11008 matrices
(rows x cols), types q4_0, q4_K, iq4_nl, q8_0, batch 1 and 512, each in the layout qrepack picks
and in plain; --type and --batch narrow it down. With --rows and --cols, one shape is measured in
the chosen layout only (add --vs-plain to time plain too).

The data is the ggml peer's (ggml_mm_bench): splitmix64 W[rows][cols] from --seed, X[batch][cols]
from --seed + 1, W quantized with qrepack::quantize. Each rep times one matmul call, including the
activation quantization. Batches up to 3 rotate over copies of the weights totalling more than
--cold-mb MiB (mode \"cold\": weights stream from memory, as in decode); larger ones reuse one
matrix (mode \"hot\").

Examples:
  qrepack bench
  qrepack bench --type q4_0,q4_K --batch 1 --threads 1
  qrepack bench --type q4_0 --rows 4096 --cols 4096 --batch 1 --threads 2
  qrepack bench --type q4_0 --rows 4096 --cols 4096 --batch 512 --layout plain --reps 5
  qrepack bench --type iq4_nl --rows 4096 --cols 4096 --batch 1,4,512 --vs-plain --json";

const INFO_EXAMPLES: &str = "\
Examples:
  qrepack info
  qrepack info --rows 12 --type q4_0,iq4_nl
  QREPACK_FORCE_SCALAR=1 qrepack info --json";

#[derive(Parser, Debug)]
#[command(
    name = "qrepack",
    version,
    about = "Benchmark and inspect qrepack: interleaved (repacked) ggml-quantized matmul on CPUs",
    after_help = MAIN_EXAMPLES
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Time QMatrix::matmul on the ggml peer's data (default: the LLaMA-7B suite)
    #[command(after_help = BENCH_EXAMPLES)]
    Bench(BenchArgs),
    /// Show CPU features, the layouts and which layout each type gets
    #[command(after_help = INFO_EXAMPLES)]
    Info(InfoArgs),
}

#[derive(Args, Debug)]
struct BenchArgs {
    /// Weight type(s), comma-separated [default: q4_0,q4_K,iq4_nl,q8_0]
    #[arg(long = "type", value_name = "TYPE", value_delimiter = ',', value_parser = parse_type)]
    types: Vec<GgmlType>,
    /// Weight rows (output features, ggml M); needs --cols
    #[arg(long, value_name = "M", value_parser = parse_positive)]
    rows: Option<usize>,
    /// Weight columns (input features, ggml K), a multiple of the type's block size; needs --rows
    #[arg(long, value_name = "K", value_parser = parse_positive)]
    cols: Option<usize>,
    /// Activation rows (tokens, ggml N), comma-separated [default: 1,512]
    #[arg(long, value_name = "N", value_delimiter = ',', value_parser = parse_positive)]
    batch: Vec<usize>,
    /// Threads of the rayon pool the matmuls run on [default: all cores]
    #[arg(long, value_name = "P", value_parser = parse_positive)]
    threads: Option<usize>,
    /// Time exactly these layouts (comma-separated, e.g. q4_0_8x8,plain) instead of the chosen one
    #[arg(long, value_name = "LAYOUT", value_delimiter = ',', value_parser = parse_layout)]
    layout: Vec<Layout>,
    /// Also time plain for comparison (the default without --rows/--cols)
    #[arg(long)]
    vs_plain: bool,
    /// Timed reps per measurement [default: adaptive, until --min-time and at least 3 (2 for calls over 1 s)]
    #[arg(long, value_name = "R", value_parser = parse_positive)]
    reps: Option<usize>,
    /// Seconds of timed reps per measurement when --reps is not given
    #[arg(long, value_name = "SECONDS", default_value_t = 0.3)]
    min_time: f64,
    /// Batches up to 3 rotate over copies of the weights exceeding this many MiB (0: always hot)
    #[arg(long, value_name = "MIB", default_value_t = 64.0)]
    cold_mb: f64,
    /// Seed of the weights (the activations use seed + 1)
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Also compare every result with an f64 reference on the dequantized weights (sampled rows)
    #[arg(long)]
    check: bool,
    /// One JSON object per measurement and line on stdout instead of the table
    #[arg(long)]
    json: bool,
    /// No progress lines on stderr
    #[arg(long, short)]
    quiet: bool,
}

#[derive(Args, Debug)]
struct InfoArgs {
    /// Row count for which the chosen layout is shown
    #[arg(long, value_name = "M", default_value_t = 4096, value_parser = parse_positive)]
    rows: usize,
    /// Types to list, comma-separated [default: all]
    #[arg(long = "type", value_name = "TYPE", value_delimiter = ',', value_parser = parse_type)]
    types: Vec<GgmlType>,
    /// Print one JSON object instead of the tables
    #[arg(long)]
    json: bool,
}

fn parse_type(s: &str) -> Result<GgmlType, String> {
    s.trim().parse().map_err(|e: qrepack::Error| match e {
        qrepack::Error::Unsupported(m) => m,
        e => e.to_string(),
    })
}

fn parse_layout(s: &str) -> Result<Layout, String> {
    s.trim().parse().map_err(|e: qrepack::Error| match e {
        qrepack::Error::Unsupported(m) => m,
        e => e.to_string(),
    })
}

fn parse_positive(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_string()),
        Ok(v) => Ok(v),
        Err(e) => Err(format!("not a positive integer: {e}")),
    }
}

/// Writes to stdout; a closed pipe (`| head`) ends the program quietly.
fn out(s: &str) -> Result<()> {
    let mut o = io::stdout().lock();
    match o.write_all(s.as_bytes()).and_then(|_| o.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => std::process::exit(0),
        r => r.context("writing to stdout"),
    }
}

fn bench(args: BenchArgs) -> Result<()> {
    let parameterized = match (args.rows, args.cols) {
        (Some(_), Some(_)) => true,
        (None, None) => false,
        _ => bail!("--rows and --cols go together (give both, or neither for the default suite)"),
    };
    let cfg = Config {
        types: if args.types.is_empty() {
            bench::SUITE_TYPES.to_vec()
        } else {
            args.types
        },
        shapes: match (args.rows, args.cols) {
            (Some(r), Some(c)) => vec![(r, c)],
            _ => bench::SUITE_SHAPES.to_vec(),
        },
        batches: if args.batch.is_empty() {
            bench::SUITE_BATCHES.to_vec()
        } else {
            args.batch
        },
        layouts: if args.layout.is_empty() {
            LayoutSel::Auto {
                vs_plain: args.vs_plain || !parameterized,
            }
        } else {
            if args.vs_plain && !args.layout.contains(&Layout::Plain) {
                bail!("--vs-plain goes with the chosen layout; with --layout, list plain yourself (e.g. --layout q4_0_8x8,plain)");
            }
            LayoutSel::Fixed(args.layout)
        },
        reps: match args.reps {
            Some(r) => Reps::Fixed(r),
            None => Reps::Adaptive {
                min_time: args.min_time,
                min: 3,
                max: 1000,
            },
        },
        cold_mb: args.cold_mb,
        seed: args.seed,
        progress: !args.quiet,
        check: args.check,
    };
    cfg.validate()?;

    let threads = match args.threads {
        Some(p) => p,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .context("starting the thread pool")?;

    if !args.quiet {
        eprintln!(
            "qrepack bench: {} measurement(s), cpu {}, {threads} thread(s)",
            cfg.count(),
            CpuFeatures::get().describe()
        );
    }
    let json = args.json;
    let results = pool.install(|| {
        bench::run(&cfg, |group| {
            if json {
                let mut s = String::new();
                for m in group {
                    s.push_str(&m.to_json_line());
                    s.push('\n');
                }
                out(&s)?;
            }
            Ok(())
        })
    })?;
    if !json {
        let mode = match cfg.reps {
            Reps::Fixed(r) => format!("{r} reps"),
            Reps::Adaptive { min_time, min, .. } => {
                format!("reps until {min_time} s and at least {min}")
            }
        };
        out(&format!(
            "qrepack bench: cpu {}, {threads} thread(s), seed {}, median of {mode}; cold = rotating over copies > {} MiB\n\n{}",
            CpuFeatures::get().describe(),
            cfg.seed,
            cfg.cold_mb,
            bench::table(&results).render()
        ))?;
    }
    Ok(())
}

fn info(args: InfoArgs) -> Result<()> {
    let info = info::Info {
        types: if args.types.is_empty() {
            GgmlType::ALL.to_vec()
        } else {
            args.types
        },
        rows: args.rows,
    };
    if args.json {
        out(&format!("{}\n", info.to_json()))
    } else {
        out(&info.render())
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.command {
        Command::Bench(a) => bench(a),
        Command::Info(a) => info(a),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
