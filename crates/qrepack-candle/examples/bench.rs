//! Model-level speed: a prompt of P tokens (default 512), then G greedy tokens (default 128),
//! through qrepack-candle's `Llama` and through candle-transformers' stock `quantized_llama` on
//! the same GGUF file, with the same number of threads on both sides.
//!
//! ```text
//! cargo run --release -p qrepack-candle --features stock --example bench -- MODEL.gguf \
//!     [--threads 2] [--prompt 512] [--gen 128] [--reps 3] [--no-fuse] [--only qrepack|stock]
//!     [--profile] [--profile-runs N] [--tg-empty] [--kv f16|f32] [--pass N] [--layer-rows N]
//! ```
//!
//! `--kv` sets qrepack-candle's key/value cache type (default f16, as llama.cpp's) and `--pass`
//! the most positions one forward pass runs (`LoadOptions::max_pass_positions`, default 256),
//! `--layer-rows` the rows of a pass a layer takes at once (`LoadOptions::layer_rows`, default
//! chosen from the model's size).
//!
//! `--tg-empty` also times G single-token steps from an empty cache (positions 0..G-1, after
//! clearing it): llama-bench's `tg128` at depth 0, where the generation after the prompt is its
//! `tg128` at depth P (`-d 512`). Each rep line then ends in `, empty-cache generation S s`.
//!
//! `--profile` then runs qrepack-candle once more with [`Llama::set_profiling`] on and splits
//! the prompt pass and the mean decode step into matrix products, attention, elementwise work
//! (norms, RoPE, activation, residuals) and the rest; with `--tg-empty` also the mean of G
//! decode steps from an empty cache. `--profile-runs N` profiles N times and shows, per
//! column, the run with the shortest total (on a shared machine one run swings by 10 %).
//!
//! `--threads N` sets `RAYON_NUM_THREADS` and `CANDLE_NUM_THREADS` (read by candle's pools) and
//! builds the global rayon pool (qrepack's) with N threads, before anything runs. The two
//! models run alternately, `--reps` times each (best of the reps reported: the machine may be
//! shared). The prompt is deterministic pseudo-random token ids; prompt tokens/s counts the
//! whole prompt forward pass (logits of its last token included), generation tokens/s the G
//! single-token forward passes after it.

use std::process::ExitCode;
use std::time::Instant;

use candle_core::{Device, Tensor};
use qrepack::rng::SplitMix64;
use qrepack_candle::ops::KvType;
use qrepack_candle::stock::StockLlama;
use qrepack_candle::{Llama, LoadOptions, PhaseTimes};

struct Opts {
    path: String,
    threads: usize,
    prompt: usize,
    gen: usize,
    reps: usize,
    fuse: bool,
    kv: KvType,
    pass: usize,
    layer_rows: Option<usize>,
    only: Option<String>,
    profile: bool,
    /// Profiled runs; each column shows its fastest.
    profile_runs: usize,
    tg_empty: bool,
}

/// Runs the prompt and the generation; returns (prompt seconds, generation seconds).
fn run_once(
    forward: &mut dyn FnMut(&Tensor, usize) -> candle_core::Result<Tensor>,
    prompt: &[u32],
    gen: usize,
) -> candle_core::Result<(f64, f64)> {
    let dev = Device::Cpu;
    let ids = Tensor::new(prompt, &dev)?.unsqueeze(0)?;
    let t = Instant::now();
    let mut logits = forward(&ids, 0)?;
    let mut next = logits.squeeze(0)?.argmax(0)?.to_scalar::<u32>()?;
    let prompt_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    for i in 0..gen {
        let ids = Tensor::new(&[[next]], &dev)?;
        logits = forward(&ids, prompt.len() + i)?;
        next = logits.squeeze(0)?.argmax(0)?.to_scalar::<u32>()?;
    }
    Ok((prompt_s, t.elapsed().as_secs_f64()))
}

/// `gen` single-token steps from position 0 on an empty cache (first token `first`); seconds.
fn gen_from_empty(
    forward: &mut dyn FnMut(&Tensor, usize) -> candle_core::Result<Tensor>,
    first: u32,
    gen: usize,
) -> candle_core::Result<f64> {
    let dev = Device::Cpu;
    let mut next = first;
    let t = Instant::now();
    for i in 0..gen {
        let ids = Tensor::new(&[[next]], &dev)?;
        let logits = forward(&ids, i)?;
        next = logits.squeeze(0)?.argmax(0)?.to_scalar::<u32>()?;
    }
    Ok(t.elapsed().as_secs_f64())
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

fn run(o: Opts) -> Result<(), String> {
    let vocab;
    let mut ours = if o.only.as_deref() != Some("stock") {
        let t = Instant::now();
        let l = Llama::open_with(
            &o.path,
            &LoadOptions {
                fuse: o.fuse,
                kv_cache: o.kv,
                max_pass_positions: o.pass,
                layer_rows: o.layer_rows,
                ..LoadOptions::default()
            },
        )
        .map_err(|e| e.to_string())?;
        eprintln!(
            "qrepack-candle loaded in {:.2} s",
            t.elapsed().as_secs_f64()
        );
        vocab = l.config().vocab_size;
        Some(l)
    } else {
        // the prompt's ids must exist in the model: take the embedding's row count
        let g = qrepack::gguf::GgufFile::open(&o.path).map_err(|e| e.to_string())?;
        vocab = match g.tensor("token_embd.weight").map(|t| t.dims.clone()) {
            Some(d) if d.len() == 2 => d[1] as usize,
            _ => return Err("the model has no 2-D token_embd.weight".into()),
        };
        None
    };
    let mut stock = if o.only.as_deref() != Some("qrepack") {
        let t = Instant::now();
        let s = StockLlama::open(&o.path).map_err(|e| e.to_string())?;
        eprintln!("stock candle loaded in {:.2} s", t.elapsed().as_secs_f64());
        Some(s)
    } else {
        None
    };
    let mut rng = SplitMix64::new(42);
    let prompt: Vec<u32> = (0..o.prompt).map(|_| rng.below(vocab) as u32).collect();
    let mut best = [(f64::MAX, f64::MAX); 2];
    let mut best_empty = [f64::MAX; 2];
    let empty_note = |t: Option<f64>| {
        t.map_or(String::new(), |t| {
            format!(", empty-cache generation {t:.3} s")
        })
    };
    for rep in 0..o.reps {
        if let Some(l) = ours.as_mut() {
            l.clear_cache();
            let r =
                run_once(&mut |x, p| l.forward(x, p), &prompt, o.gen).map_err(|e| e.to_string())?;
            let empty = if o.tg_empty {
                l.clear_cache();
                Some(
                    gen_from_empty(&mut |x, p| l.forward(x, p), prompt[0], o.gen)
                        .map_err(|e| e.to_string())?,
                )
            } else {
                None
            };
            eprintln!(
                "rep {rep} qrepack-candle: prompt {:.3} s, generation {:.3} s{}",
                r.0,
                r.1,
                empty_note(empty)
            );
            best[0] = (best[0].0.min(r.0), best[0].1.min(r.1));
            best_empty[0] = best_empty[0].min(empty.unwrap_or(f64::MAX));
        }
        if let Some(s) = stock.as_mut() {
            s.clear_kv_cache().map_err(|e| e.to_string())?;
            let r =
                run_once(&mut |x, p| s.forward(x, p), &prompt, o.gen).map_err(|e| e.to_string())?;
            let empty = if o.tg_empty {
                s.clear_kv_cache().map_err(|e| e.to_string())?;
                Some(
                    gen_from_empty(&mut |x, p| s.forward(x, p), prompt[0], o.gen)
                        .map_err(|e| e.to_string())?,
                )
            } else {
                None
            };
            eprintln!(
                "rep {rep} stock candle:   prompt {:.3} s, generation {:.3} s{}",
                r.0,
                r.1,
                empty_note(empty)
            );
            best[1] = (best[1].0.min(r.0), best[1].1.min(r.1));
            best_empty[1] = best_empty[1].min(empty.unwrap_or(f64::MAX));
        }
    }
    let name = std::path::Path::new(&o.path)
        .file_name()
        .map_or(o.path.clone(), |n| n.to_string_lossy().into_owned());
    println!(
        "{name}: {} threads, prompt {} + {} generated, best of {} ({})",
        o.threads,
        o.prompt,
        o.gen,
        o.reps,
        cpu_name()
    );
    let tps = |(p, g): (f64, f64)| (o.prompt as f64 / p, o.gen as f64 / g);
    let mut rows = Vec::new();
    if ours.is_some() {
        rows.push(("qrepack-candle", tps(best[0]), best_empty[0]));
    }
    if stock.is_some() {
        rows.push(("stock candle", tps(best[1]), best_empty[1]));
    }
    for (who, (p, g), empty) in &rows {
        let empty = if o.tg_empty {
            format!("   from empty cache {:>7.1} tokens/s", o.gen as f64 / empty)
        } else {
            String::new()
        };
        println!("  {who:<15} prompt {p:>8.1} tokens/s   generation {g:>7.1} tokens/s{empty}");
    }
    if rows.len() == 2 {
        let (a, b) = (rows[0].1, rows[1].1);
        println!(
            "  speedup         prompt {:>8.2}x          generation {:>7.2}x",
            a.0 / b.0,
            a.1 / b.1
        );
    }
    if let (true, Some(l)) = (o.profile, ours.as_mut()) {
        print_profile(l, &prompt, o.gen, o.tg_empty, o.profile_runs).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The fastest of `runs` profiles of qrepack-candle, per column: a prompt pass, `gen` decode
/// steps after it (and, with `from_empty`, `gen` more from an empty cache), as a table.
fn print_profile(
    l: &mut Llama,
    prompt: &[u32],
    gen: usize,
    from_empty: bool,
    runs: usize,
) -> candle_core::Result<()> {
    type Profiles = (PhaseTimes, PhaseTimes, Option<PhaseTimes>);
    let mut best: Option<Profiles> = None;
    let faster = |a: PhaseTimes, b: PhaseTimes| if a.total <= b.total { a } else { b };
    for _ in 0..runs.max(1) {
        let (pass, steps, empty) = profile_once(l, prompt, gen, from_empty)?;
        best = Some(match best {
            None => (pass, steps, empty),
            Some((p, s, e)) => (
                faster(p, pass),
                faster(s, steps),
                e.zip(empty).map(|(a, b)| faster(a, b)),
            ),
        });
    }
    let (pass, steps, empty) = best.expect("at least one run");
    let ms = |d: std::time::Duration, n: usize| d.as_secs_f64() * 1e3 / n.max(1) as f64;
    println!(
        "  profile (qrepack-candle, the fastest of {} runs per column): the {}-token prompt pass, \
         one decode step after it (mean of {}){}",
        runs.max(1),
        prompt.len(),
        steps.passes,
        if empty.is_some() {
            ", one from an empty cache (mean of as many)"
        } else {
            ""
        }
    );
    print_columns(pass, steps, empty, ms);
    Ok(())
}

/// One profiled prompt pass, the decode steps after it, and those from an empty cache.
fn profile_once(
    l: &mut Llama,
    prompt: &[u32],
    gen: usize,
    from_empty: bool,
) -> candle_core::Result<(PhaseTimes, PhaseTimes, Option<PhaseTimes>)> {
    let dev = Device::Cpu;
    l.clear_cache();
    l.set_profiling(true);
    let ids = Tensor::new(prompt, &dev)?.unsqueeze(0)?;
    let mut next = l
        .forward(&ids, 0)?
        .squeeze(0)?
        .argmax(0)?
        .to_scalar::<u32>()?;
    let pass = l.take_profile().unwrap_or_default();
    for i in 0..gen {
        let ids = Tensor::new(&[[next]], &dev)?;
        next = l
            .forward(&ids, prompt.len() + i)?
            .squeeze(0)?
            .argmax(0)?
            .to_scalar::<u32>()?;
    }
    let steps = l.take_profile().unwrap_or_default();
    let empty = if from_empty {
        l.clear_cache();
        next = prompt.first().copied().unwrap_or(0);
        for pos in 0..gen {
            let ids = Tensor::new(&[[next]], &dev)?;
            next = l
                .forward(&ids, pos)?
                .squeeze(0)?
                .argmax(0)?
                .to_scalar::<u32>()?;
        }
        l.take_profile()
    } else {
        None
    };
    l.set_profiling(false);
    Ok((pass, steps, empty))
}

/// The profile table: one column per profile, one line per phase.
fn print_columns(
    pass: PhaseTimes,
    steps: PhaseTimes,
    empty: Option<PhaseTimes>,
    ms: impl Fn(std::time::Duration, usize) -> f64,
) {
    let mut columns = vec![("prompt ms", pass), ("decode step ms", steps)];
    columns.extend(empty.map(|e| ("from empty ms", e)));
    let mut header = format!("  {:<12}", "phase");
    for (title, _) in &columns {
        header += &format!(" {title:>16} {:>6}", "%");
    }
    println!("{header}");
    type Part = fn(&PhaseTimes) -> std::time::Duration;
    let parts: [(&str, Part); 5] = [
        ("products", |p| p.products),
        ("attention", |p| p.attention),
        ("elementwise", |p| p.elementwise),
        ("rest", |p| p.rest()),
        ("total", |p| p.total),
    ];
    for (name, part) in parts {
        let mut line = format!("  {name:<12}");
        for (_, p) in &columns {
            let (v, total) = (ms(part(p), p.passes), ms(p.total, p.passes));
            line += &format!(" {v:>16.3} {:>5.1}%", 100.0 * v / total.max(1e-12));
        }
        println!("{line}");
    }
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        path: String::new(),
        threads: 2,
        prompt: 512,
        gen: 128,
        reps: 3,
        fuse: true,
        kv: KvType::F16,
        pass: LoadOptions::default().max_pass_positions,
        layer_rows: None,
        only: None,
        profile: false,
        profile_runs: 1,
        tg_empty: false,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut num = |name: &str| -> Result<usize, String> {
            it.next()
                .and_then(|s| s.parse().ok())
                .ok_or(format!("{name} needs a number"))
        };
        match a.as_str() {
            "--threads" => o.threads = num("--threads")?,
            "--prompt" => o.prompt = num("--prompt")?,
            "--gen" => o.gen = num("--gen")?,
            "--reps" => o.reps = num("--reps")?,
            "--no-fuse" => o.fuse = false,
            "--kv" => {
                o.kv = match it.next().map(String::as_str) {
                    Some("f16") => KvType::F16,
                    Some("f32") => KvType::F32,
                    _ => return Err("--kv: f16 or f32".into()),
                }
            }
            "--pass" => {
                o.pass = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|&n: &usize| n > 0)
                    .ok_or("--pass needs a positive number")?
            }
            "--layer-rows" => {
                o.layer_rows = Some(
                    it.next()
                        .and_then(|v| v.parse().ok())
                        .filter(|&n: &usize| n > 0)
                        .ok_or("--layer-rows needs a positive number")?,
                )
            }
            "--only" => o.only = it.next().cloned(),
            "--profile" => o.profile = true,
            "--profile-runs" => {
                o.profile = true;
                o.profile_runs = num("--profile-runs")?;
            }
            "--tg-empty" => o.tg_empty = true,
            s if o.path.is_empty() && !s.starts_with("--") => o.path = s.to_string(),
            s => return Err(format!("unexpected argument '{s}'")),
        }
    }
    if o.path.is_empty() || o.prompt == 0 || o.threads == 0 {
        return Err("usage: bench MODEL.gguf [--threads 2] [--prompt 512] [--gen 128] [--reps 3] [--no-fuse] [--only qrepack|stock] [--profile] [--tg-empty]".into());
    }
    Ok(o)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let o = match parse(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("bench: {e}");
            return ExitCode::from(2);
        }
    };
    // before any candle or rayon call: both read the thread count once
    std::env::set_var("RAYON_NUM_THREADS", o.threads.to_string());
    std::env::set_var("CANDLE_NUM_THREADS", o.threads.to_string());
    if let Err(e) = rayon::ThreadPoolBuilder::new()
        .num_threads(o.threads)
        .build_global()
    {
        eprintln!("bench: {e}");
        return ExitCode::FAILURE;
    }
    match run(o) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: {e}");
            ExitCode::FAILURE
        }
    }
}
