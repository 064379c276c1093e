//! `qrepack`: benchmark and inspect qrepack's repacked quantized matrix multiplication.

mod bench;
mod bench_cmd;
mod data;
mod info;
mod inspect;
mod load;
mod matmul;
mod model_bench;
mod npy;
mod progress;
mod repack;
mod sweep;
mod synth;
mod table;
mod verify;
mod vs_ggml;

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{ArgGroup, Args, Parser, Subcommand};
use qrepack::cpu::{CpuFeatures, KernelSet, ISA_ENV};
use qrepack::{GgmlType, Layout};

use bench::{Config, LayoutSel, Reps};

const MAIN_EXAMPLES: &str = "\
Examples:
  qrepack bench                       # default suite (LLaMA-7B shapes, q4_0/q4_K/iq4_nl/q8_0, batch 1 and 512)
  qrepack bench --json > results.jsonl
  qrepack bench --type q4_0 --rows 4096 --cols 4096 --batch 1 --threads 2
  qrepack info --rows 11008
  qrepack inspect model.gguf
  qrepack verify model.gguf
  qrepack bench model.gguf --batch 1,512
  qrepack bench --suite types --vs ggml   # every weight type against ggml's own kernels
  qrepack bench --isa avx2 --type q4_0 --batch 1
  qrepack sweep --plot sweep.svg
  qrepack repack model.gguf -o model.repacked.gguf
  qrepack matmul model.gguf --tensor blk.0.attn_q.weight --input x.npy --output y.npy
  qrepack synth --preset llama3-8b --mix q4_k_m -o /tmp/llama3-8b.q4_k_m.gguf

Set QREPACK_ISA=NAME (scalar, avx2, avxvnni, avx512, avx512bf16, neon, dotprod, i8mm, sve) to cap the kernel sets
at NAME (`bench --isa NAME` does the same); QREPACK_FORCE_SCALAR=1 is QREPACK_ISA=scalar.";

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

With MODEL (a GGUF file), every weight matrix of the model is timed at each batch (default 1
and 512: the matmul part of one decode step and of one 512-token prompt), as loaded (repacked)
and in plain, in passes over all matrices in file order (one warm-up pass, then --reps timed
passes, default 5 for batches up to 8, else 3); reported: totals per batch, tokens/s of the
matmul part (batch / total), and per type the bytes, how many are repacked and the times.

--isa NAME caps the kernel sets at NAME (as QREPACK_ISA=NAME does): e.g. --isa avx2 on an
AVX-512 machine times the AVX2 kernels, --isa scalar the portable ones. The `kernels` column and
JSON key name the set each matrix ran.

`bench --sweep` is `qrepack sweep` (kept as an alias): the same options and output.

Examples:
  qrepack bench
  qrepack bench model.gguf
  qrepack bench model.gguf --batch 1,512 --threads 2 --reps 3 --json
  qrepack bench --isa avx2 --type q4_0 --batch 1,512
  qrepack bench --sweep --plot sweep.svg
  qrepack bench --type q4_0,q4_K --batch 1 --threads 1
  qrepack bench --type q4_0 --rows 4096 --cols 4096 --batch 1 --threads 2
  qrepack bench --type q4_0 --rows 4096 --cols 4096 --batch 512 --layout plain --reps 5
  qrepack bench --type iq4_nl --rows 4096 --cols 4096 --batch 1,4,512 --vs-plain --json";

const SWEEP_EXAMPLES: &str = "\
GFLOP/s is measured against the batch (1, 2, 4, ..., 512) per type (default: the types with an
interleaved layout), in the chosen interleaved layout and plain, on one --rows x --cols shape
(default 4096x4096, hot, the data of `qrepack bench`), and drawn as an SVG line chart with
--plot FILE.svg. `qrepack bench --sweep` is the same command.

Examples:
  qrepack sweep --plot sweep.svg
  qrepack sweep --type q4_0,iq4_nl --rows 11008 --cols 4096
  qrepack sweep --isa avx2 --type q4_0 --json
  qrepack sweep --type q4_0,q4_K --vs ggml --plot vs-ggml.svg";

const INSPECT_EXAMPLES: &str = "\
Opens the model as `Model::open` does (every weight repacked for this CPU where a layout fits)
and lists the metadata summary, every tensor with its type, shape (rows x cols, outermost
first), bytes and what it became (its layout, or why it stayed plain or is not a weight), and
per-type totals of bytes and the share repacked.

Examples:
  qrepack inspect model.gguf
  qrepack inspect model.gguf --metadata
  qrepack inspect model.gguf --json | jq '.types'";

const VERIFY_EXAMPLES: &str = "\
For every weight matrix (each expert of a 3-D tensor on its own): the product with random
activations (deterministic from --seed and the tensor's name) in the chosen layout against the
plain layout (normalized MSE over all outputs), and against an f64 reference computed from the
dequantized weights and the activations quantized exactly as the kernels quantize them, on up
to --ref-rows sampled rows. PASS when both are <= 1e-9; the exit code is 1 if any matrix fails.

Examples:
  qrepack verify model.gguf
  qrepack verify model.gguf --batch 1,5,32 --tensor blk.0.attn_q.weight --tensor output.weight
  qrepack verify model.gguf --json | jq '.worst_nmse_vs_ref'";

const REPACK_EXAMPLES: &str = "\
Opens IN (repacking every matrix for this CPU) and writes a repack cache: a GGUF file with the
same metadata and tensors in which the repacked matrices are stored in their layout, so that
opening it maps them in place without repacking. The write is atomic (temp file + rename); OUT
is never overwritten without --force, and IN never. Then the open times are measured: IN
(open + repack) against OUT (open).

Examples:
  qrepack repack model.gguf -o model.repacked.gguf
  qrepack repack model.gguf -o model.repacked.gguf --force --json";

const MATMUL_EXAMPLES: &str = "\
Reads X from a NumPy .npy file of little-endian float32 ('<f4') in C order with shape
[n, cols] (or [cols]), computes Y = X W^T with the 2-D weight tensor NAME in the layout qrepack
picks (or --layout), and writes Y as [n, rows] (or [rows]).

Examples:
  python3 -c \"import numpy as np; np.save('x.npy', np.random.rand(4, 640).astype('<f4'))\"
  qrepack matmul model.gguf --tensor blk.0.attn_q.weight --input x.npy --output y.npy
  qrepack matmul model.gguf --tensor blk.0.attn_q.weight --input x.npy --output y.npy --layout plain";

const SYNTH_EXAMPLES: &str = "\
Writes a GGUF file with the tensor names, shapes, types and metadata (llama.cpp's keys and a
SentencePiece-style vocabulary of filler tokens) of a real model, and random weights: llama.cpp
(llama-bench) and qrepack-candle load it, so model-level speed can be measured at sizes that
are not downloaded. Each distinct shape and type repeats one quantized random block of rows, so
writing runs at disk speed (an 8B file is ~4.5 GB), unless --distinct draws every row (small
models, for comparing engines logit by logit). OUT is never overwritten without --force.

Presets: tiny (tests), tiny-qwen3moe (2 layers, 8 experts, top 2), llama3.2-1b (tied output),
qwen2.5-1.5b (qwen2, q/k/v biases, tied), qwen3-30b-a3b-6l (qwen3moe, Qwen3-30B-A3B's layer
shapes, 6 of its 48 layers, 2.3 GB at q4_0), llama3-8b (separate output.weight). Mixes: q4_0 (every matrix Q4_0, norms F32); q4_k_m
(llama.cpp's Q4_K_M: Q4_K, Q6_K output head / tied embedding and attn_v, ffn_down in the
layers llama.cpp gives more bits).

Examples:
  qrepack synth --preset llama3.2-1b --mix q4_0 -o /tmp/llama3.2-1b.q4_0.gguf
  qrepack synth --preset llama3-8b --mix q4_k_m -o /tmp/llama3-8b.q4_k_m.gguf --force";

const INFO_EXAMPLES: &str = "\
Examples:
  qrepack info
  qrepack info --rows 12 --type q4_0,iq4_nl
  QREPACK_ISA=avx2 qrepack info --json";

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
    /// GFLOP/s against the batch per type, chosen layout vs plain, on one shape (table, SVG)
    #[command(after_help = SWEEP_EXAMPLES)]
    Sweep(SweepArgs),
    /// Show CPU features, the layouts, which layout each type gets and the kernel sets
    #[command(after_help = INFO_EXAMPLES)]
    Info(InfoArgs),
    /// Summarize a GGUF model: metadata, every tensor and what it became, per-type totals
    #[command(after_help = INSPECT_EXAMPLES)]
    Inspect(InspectArgs),
    /// Check every weight matrix of a model: chosen layout vs plain vs an f64 reference
    #[command(after_help = VERIFY_EXAMPLES)]
    Verify(VerifyArgs),
    /// Write a repack cache of a model (loads without repacking) and compare open times
    #[command(after_help = REPACK_EXAMPLES)]
    Repack(RepackArgs),
    /// Multiply one weight matrix of a model with activations from a .npy file
    #[command(after_help = MATMUL_EXAMPLES)]
    Matmul(MatmulArgs),
    /// Write a random-weight GGUF file shaped like a real model (Llama 3, Qwen2.5) for speed tests
    #[command(after_help = SYNTH_EXAMPLES)]
    Synth(SynthArgs),
}

impl Command {
    /// The `--isa` cap of the command, if it takes one and it was given.
    fn isa(&self) -> Option<KernelSet> {
        match self {
            Command::Bench(a) => a.isa,
            Command::Sweep(a) => a.isa,
            _ => None,
        }
    }
}

/// The options every subcommand shares.
#[derive(Args, Debug, Clone, Copy)]
struct Common {
    /// Threads of the rayon pool [default: all cores]
    #[arg(long, value_name = "P", value_parser = parse_positive)]
    threads: Option<usize>,
    /// Print JSON on stdout instead of the text report (bench: one object per measurement and line)
    #[arg(long)]
    json: bool,
    /// No progress output on stderr
    #[arg(long, short)]
    quiet: bool,
}

#[derive(Args, Debug)]
struct InspectArgs {
    /// The GGUF file
    model: PathBuf,
    /// Also list every metadata key
    #[arg(long)]
    metadata: bool,
    #[command(flatten)]
    common: Common,
}

#[derive(Args, Debug)]
struct VerifyArgs {
    /// The GGUF file
    model: PathBuf,
    /// Activation rows, comma-separated
    #[arg(long, value_name = "N", value_delimiter = ',', value_parser = parse_positive, default_values_t = [1usize, 5])]
    batch: Vec<usize>,
    /// Only this tensor (repeatable; a 3-D tensor means all its experts)
    #[arg(long, value_name = "NAME")]
    tensor: Vec<String>,
    /// Weight rows sampled for the f64 reference
    #[arg(long, value_name = "R", default_value_t = 64, value_parser = parse_positive)]
    ref_rows: usize,
    /// Seed of the activations
    #[arg(long, default_value_t = 43)]
    seed: u64,
    #[command(flatten)]
    common: Common,
}

#[derive(Args, Debug)]
struct RepackArgs {
    /// The GGUF file to repack
    input: PathBuf,
    /// The repack cache to write
    #[arg(short, long, value_name = "OUT.gguf")]
    output: PathBuf,
    /// Overwrite OUT if it exists
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    common: Common,
}

#[derive(Args, Debug)]
struct SynthArgs {
    /// The model: tiny, tiny-qwen3moe, llama3.2-1b, qwen2.5-1.5b, qwen3-30b-a3b-6l, llama3-8b
    #[arg(long, value_parser = parse_preset)]
    preset: qrepack::synth::Preset,
    /// The weight types: q4_0 or q4_k_m
    #[arg(long, value_parser = parse_mix, default_value = "q4_0")]
    mix: qrepack::synth::Mix,
    /// The GGUF file to write
    #[arg(short, long, value_name = "OUT.gguf")]
    output: PathBuf,
    /// Overwrite OUT if it exists
    #[arg(long)]
    force: bool,
    /// Seed of the random weights
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Add rope_freqs.weight (Llama 3.1+ RoPE scaling factors)
    #[arg(long)]
    rope_freqs: bool,
    /// Draw every row of every matrix (no repeated blocks): slower, for small models
    #[arg(long)]
    distinct: bool,
    /// Print the report as JSON
    #[arg(long)]
    json: bool,
    /// No progress output on stderr
    #[arg(long, short)]
    quiet: bool,
}

#[derive(Args, Debug)]
struct MatmulArgs {
    /// The GGUF file
    model: PathBuf,
    /// The 2-D weight tensor
    #[arg(long, value_name = "NAME")]
    tensor: String,
    /// Activations: .npy, '<f4', C order, shape (n, cols) or (cols)
    #[arg(long, value_name = "X.npy")]
    input: PathBuf,
    /// Where to write the result: .npy '<f4', shape (n, rows) or (rows)
    #[arg(long, value_name = "Y.npy")]
    output: PathBuf,
    /// Force this layout (an error if it does not fit the tensor)
    #[arg(long, value_name = "LAYOUT", value_parser = parse_layout)]
    layout: Option<Layout>,
    #[command(flatten)]
    common: Common,
}

/// `bench`. The options that only apply to the synthetic matrices conflict with a MODEL;
/// `--sweep` turns it into `qrepack sweep`.
#[derive(Args, Debug)]
#[command(group(shape_group()))]
struct BenchArgs {
    /// A GGUF model: time every weight matrix of it (repacked vs plain) instead of the suite
    #[arg(
        value_name = "MODEL",
        conflicts_with_all = ["types", "rows", "cols", "layout", "vs_plain", "check", "sweep"]
    )]
    model: Option<PathBuf>,
    /// Run `qrepack sweep` (the batch 1..512 per type on one shape, chosen layout vs plain)
    #[arg(long, conflicts_with_all = ["layout", "vs_plain", "check"])]
    sweep: bool,
    /// With --sweep: draw GFLOP/s against batch as an SVG line chart into FILE
    #[arg(long, value_name = "FILE.svg", requires = "sweep")]
    plot: Option<PathBuf>,
    /// With MODEL: also list every matrix
    #[arg(long, requires = "model")]
    per_tensor: bool,
    /// Also time every case (with MODEL: every matrix shape of the model) with ggml's own CPU
    /// backend, repack on and off (the peer benchmark `ggml_mm_bench`), and compare
    #[arg(long, value_enum, value_name = "ENGINE", conflicts_with = "sweep")]
    vs: Option<VsEngine>,
    /// With --vs ggml: the peer binary [default: $QREPACK_GGML_PEER, else
    /// /tmp/ggml-peer/bin/ggml_mm_bench]
    #[arg(long, value_name = "PATH", requires = "vs")]
    peer: Option<PathBuf>,
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
    /// Time exactly these layouts (comma-separated, e.g. q4_0_8x8,plain) instead of the chosen one
    #[arg(long, value_name = "LAYOUT", value_delimiter = ',', value_parser = parse_layout)]
    layout: Vec<Layout>,
    /// Also time plain for comparison (the default without --rows/--cols)
    #[arg(long)]
    vs_plain: bool,
    /// Timed reps per measurement [default: adaptive, until --min-time and at least 3 (2 for calls over 1 s)]
    #[arg(long, value_name = "R", value_parser = parse_positive)]
    reps: Option<usize>,
    /// Seconds of timed reps per measurement when --reps is not given [default: 0.3; 0.1 for
    /// the small-model group]
    #[arg(long, value_name = "SECONDS")]
    min_time: Option<f64>,
    /// Which groups of the default suite to run (without --rows/--cols): LLaMA-7B shapes,
    /// small-model shapes (SmolLM2-135M, Gemma 3 270M), both (all), or every weight type on
    /// 4096x4096 and 11008x4096 at batches 1, 32 and 512 (types; best with --vs ggml)
    #[arg(long, value_enum, default_value_t = SuiteSel::All, conflicts_with_all = ["rows", "cols", "model"])]
    suite: SuiteSel,
    /// Batches up to 3 rotate over copies of the weights exceeding this many MiB (0: always hot)
    #[arg(long, value_name = "MIB", default_value_t = 64.0)]
    cold_mb: f64,
    /// Seed of the weights (the activations use seed + 1)
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Also compare every result with an f64 reference on the dequantized weights (sampled rows;
    /// for a MODEL, use `qrepack verify`)
    #[arg(long)]
    check: bool,
    /// Also time where each call's time goes: activation quantization, the kernel section (the
    /// kernels' own work, which stores the results, and the scheduling around it)
    #[arg(long, conflicts_with = "model")]
    phases: bool,
    /// Cap the kernel sets at NAME (scalar, avx2, avxvnni, avx512, avx512bf16, neon, dotprod, i8mm, sve), as QREPACK_ISA=NAME
    #[arg(long, value_name = "NAME", value_parser = parse_isa)]
    isa: Option<KernelSet>,
    #[command(flatten)]
    common: Common,
}

#[derive(Args, Debug)]
#[command(group(shape_group()))]
struct SweepArgs {
    /// Weight type(s), comma-separated [default: the types with an interleaved layout]
    #[arg(long = "type", value_name = "TYPE", value_delimiter = ',', value_parser = parse_type)]
    types: Vec<GgmlType>,
    /// Weight rows (output features, ggml M) [default: 4096]; needs --cols
    #[arg(long, value_name = "M", value_parser = parse_positive)]
    rows: Option<usize>,
    /// Weight columns (input features, ggml K) [default: 4096]; needs --rows
    #[arg(long, value_name = "K", value_parser = parse_positive)]
    cols: Option<usize>,
    /// Activation rows, comma-separated [default: 1,2,4,...,512]
    #[arg(long, value_name = "N", value_delimiter = ',', value_parser = parse_positive)]
    batch: Vec<usize>,
    /// Timed reps per point [default: adaptive, until min(--min-time, 0.2 s) and at least 3]
    #[arg(long, value_name = "R", value_parser = parse_positive)]
    reps: Option<usize>,
    /// Seconds of timed reps per point when --reps is not given (at most 0.2 are used)
    #[arg(long, value_name = "SECONDS", default_value_t = 0.3)]
    min_time: f64,
    /// Seed of the weights (the activations use seed + 1)
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Draw GFLOP/s against batch as an SVG line chart into FILE
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Time ggml's own CPU backend on each type too (the peer benchmark `ggml_mm_bench`, the
    /// faster of repack on and off per batch): one more line per type
    #[arg(long, value_enum, value_name = "ENGINE")]
    vs: Option<VsEngine>,
    /// With --vs ggml: the peer binary [default: $QREPACK_GGML_PEER, else
    /// /tmp/ggml-peer/bin/ggml_mm_bench]
    #[arg(long, value_name = "PATH", requires = "vs")]
    peer: Option<PathBuf>,
    /// Cap the kernel sets at NAME (scalar, avx2, avxvnni, avx512, avx512bf16, neon, dotprod, i8mm, sve), as QREPACK_ISA=NAME
    #[arg(long, value_name = "NAME", value_parser = parse_isa)]
    isa: Option<KernelSet>,
    #[command(flatten)]
    common: Common,
}

impl From<BenchArgs> for SweepArgs {
    /// `bench --sweep`: the options the two share (clap rejects the others).
    fn from(b: BenchArgs) -> SweepArgs {
        SweepArgs {
            types: b.types,
            rows: b.rows,
            cols: b.cols,
            batch: b.batch,
            reps: b.reps,
            min_time: b.min_time.unwrap_or(0.3),
            seed: b.seed,
            plot: b.plot,
            vs: None,
            peer: None,
            isa: b.isa,
            common: b.common,
        }
    }
}

/// `--rows` and `--cols` go together (give both, or neither for the default shapes).
fn shape_group() -> ArgGroup {
    ArgGroup::new("shape")
        .args(["rows", "cols"])
        .multiple(true)
        .requires_all(["rows", "cols"])
}

#[derive(Args, Debug)]
struct InfoArgs {
    /// Row count for which the chosen layout is shown
    #[arg(long, value_name = "M", default_value_t = 4096, value_parser = parse_positive)]
    rows: usize,
    /// Types to list, comma-separated [default: all]
    #[arg(long = "type", value_name = "TYPE", value_delimiter = ',', value_parser = parse_type)]
    types: Vec<GgmlType>,
    #[command(flatten)]
    common: Common,
}

/// The message of a library error without its kind prefix.
fn lib_message(e: qrepack::Error) -> String {
    match e {
        qrepack::Error::Unsupported(m) | qrepack::Error::Invalid(m) => m,
        e => e.to_string(),
    }
}

fn parse_type(s: &str) -> Result<GgmlType, String> {
    s.trim().parse().map_err(lib_message)
}

fn parse_layout(s: &str) -> Result<Layout, String> {
    s.trim().parse().map_err(lib_message)
}

fn parse_isa(s: &str) -> Result<KernelSet, String> {
    s.parse().map_err(lib_message)
}

fn parse_preset(s: &str) -> Result<qrepack::synth::Preset, String> {
    s.parse().map_err(lib_message)
}

fn parse_mix(s: &str) -> Result<qrepack::synth::Mix, String> {
    s.parse().map_err(lib_message)
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

/// The rayon pool of `--threads` (default: all cores) and its size.
fn pool(threads: Option<usize>) -> Result<(rayon::ThreadPool, usize)> {
    let threads = match threads {
        Some(p) => p,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .context("starting the thread pool")?;
    Ok((pool, threads))
}

/// `qrepack bench MODEL --vs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum VsEngine {
    Ggml,
}

/// `qrepack bench --suite`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum SuiteSel {
    All,
    #[value(name = "llama7b")]
    Llama7b,
    Small,
    Types,
}

/// A group of the benchmark plan.
#[derive(Clone, Copy)]
enum Suite {
    Llama7b,
    Small,
    Types,
    /// `--rows`/`--cols`.
    Custom(usize, usize),
}

fn info(args: InfoArgs) -> Result<()> {
    let (pool, _) = pool(args.common.threads)?;
    let info = info::Info {
        types: if args.types.is_empty() {
            GgmlType::ALL.to_vec()
        } else {
            args.types
        },
        rows: args.rows,
    };
    if args.common.json {
        let v = pool.install(|| info.to_json());
        out(&format!("{}\n", serde_json::to_string(&v)?))
    } else {
        out(&pool.install(|| info.render()))
    }
}

fn inspect(a: InspectArgs) -> Result<()> {
    let (pool, _) = pool(a.common.threads)?;
    let s = pool.install(|| inspect::run(&a.model, a.common.json, a.metadata, a.common.quiet))?;
    out(&s)
}

fn verify(a: VerifyArgs) -> Result<bool> {
    let (pool, _) = pool(a.common.threads)?;
    let (s, ok) = pool.install(|| {
        verify::run(
            &a.model,
            &a.batch,
            &a.tensor,
            a.seed,
            a.ref_rows,
            a.common.json,
            a.common.quiet,
        )
    })?;
    out(&s)?;
    Ok(ok)
}

fn repack(a: RepackArgs) -> Result<()> {
    let (pool, _) = pool(a.common.threads)?;
    let s =
        pool.install(|| repack::run(&a.input, &a.output, a.force, a.common.json, a.common.quiet))?;
    out(&s)
}

fn synth(a: SynthArgs) -> Result<()> {
    let options = qrepack::synth::Options {
        seed: a.seed,
        rope_freqs: a.rope_freqs,
        distinct: a.distinct,
    };
    let s = synth::run(
        a.preset, a.mix, &options, &a.output, a.force, a.json, a.quiet,
    )?;
    out(&s)
}

fn matmul(a: MatmulArgs) -> Result<()> {
    let (pool, _) = pool(a.common.threads)?;
    let args = matmul::MatmulArgs {
        model: &a.model,
        tensor: &a.tensor,
        input: &a.input,
        output: &a.output,
        layout: a.layout,
        json: a.common.json,
        quiet: a.common.quiet,
    };
    let s = pool.install(|| matmul::run(&args))?;
    out(&s)
}

/// Exit code of usage errors (clap's) and of a bad `QREPACK_ISA`.
const USAGE: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // `--isa` goes through the environment, which the library reads once, on the first
    // `CpuFeatures` call: set it now, before any thread starts or any kernel is chosen.
    if let Some(isa) = cli.command.isa() {
        std::env::set_var(ISA_ENV, isa.name());
    }
    // An unknown QREPACK_ISA from the environment: one line, not a silent fallback or a panic.
    if let Err(e) = CpuFeatures::try_get() {
        eprintln!("error: {}", lib_message(e));
        return ExitCode::from(USAGE);
    }
    let r = match cli.command {
        Command::Bench(a) => bench_cmd::bench(a),
        Command::Sweep(a) => bench_cmd::sweep(a),
        Command::Info(a) => info(a),
        Command::Inspect(a) => inspect(a),
        Command::Verify(a) => match verify(a) {
            Ok(true) => Ok(()),
            Ok(false) => return ExitCode::FAILURE,
            Err(e) => Err(e),
        },
        Command::Repack(a) => repack(a),
        Command::Matmul(a) => matmul(a),
        Command::Synth(a) => synth(a),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
