//! Greedy generation from a GGUF model with qrepack-candle's `Llama`.
//!
//! ```text
//! cargo run --release -p qrepack-candle --example generate -- MODEL.gguf --prompt "What is 2+2?" --chat
//! cargo run --release -p qrepack-candle --example generate -- MODEL.gguf --tokens 1,2,3 --steps 16 --top 5 --json
//! ```
//!
//! Options:
//!
//! * `--tokens 504,3575,282`: the prompt as token ids; or `--prompt TEXT`, tokenized with the
//!   GGUF file's tokenizer (GPT-2 style BPE or SentencePiece; `--chat` wraps it in the chat
//!   template of the model's family, [`ChatTemplate`]: ChatML, Gemma, Llama 3, gpt-oss's
//!   harmony);
//! * `--steps N` tokens to generate (default 32); text mode stops early at the end-of-sequence
//!   token or the template's end of turn, `--json` always runs N steps;
//! * `--top K` and `--json`: on stdout the prompt's token ids, `{"prompt": [2, 818, ...]}`,
//!   then one JSON object per step,
//!   `{"step": 0, "token": 7042, "top": [[7042, 17.74], [260, 15.23], ...]}` (K ids with their
//!   logits, largest first);
//! * `--force 7042,260,...`: teacher forcing: after step `i`, feed the `i`-th of these ids
//!   instead of the greedy token (the steps still report the model's own greedy token and top
//!   K), e.g. another engine's greedy tokens, so that the two are compared at every step;
//! * `--kv f16|f32`: the key/value cache's number format (default f16, as llama.cpp's);
//! * `--threads N`: the rayon pool for qrepack and candle (`RAYON_NUM_THREADS`); default all;
//! * `--backend candle`: candle-core's `QMatMul` instead of qrepack, same model code;
//! * `--profile-load`: where the load's time goes, on stderr: mapping the file, converting
//!   the weights (repacking, or mapping a repack cache), the tokenizer, the model set-up; and
//!   the resident memory after each stage, after the prompt and after generating.
//!
//! The generated text goes to stdout (without `--json`), the prompt and generation speeds in
//! tokens/s to stderr.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use candle_core::{Device, Tensor};
use qrepack::gguf::GgufFile;
use qrepack::model::{Checksums, LayoutPolicy, OpenOptions};
use qrepack::Model;
use qrepack_candle::llama::stacks_for;
use qrepack_candle::ops::KvType;
use qrepack_candle::ChatTemplate;
use qrepack_candle::{Backend, Llama, LoadOptions, Tokenizer};

const USAGE: &str = "usage: generate MODEL.gguf (--tokens 1,2,3 | --prompt TEXT [--chat]) \
[--steps N] [--top K] [--json] [--force 1,2,..] [--kv f16|f32] [--threads N] [--backend qrepack|candle] [--profile-load]";

struct Args {
    model: String,
    tokens: Option<Vec<u32>>,
    force: Vec<u32>,
    kv: KvType,
    prompt: Option<String>,
    chat: bool,
    steps: usize,
    top: usize,
    json: bool,
    threads: Option<usize>,
    backend: Backend,
    profile_load: bool,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut a = Args {
        model: String::new(),
        tokens: None,
        force: Vec::new(),
        kv: KvType::F16,
        prompt: None,
        chat: false,
        steps: 32,
        top: 5,
        json: false,
        threads: None,
        backend: Backend::Qrepack,
        profile_load: false,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value\n{USAGE}"))
        };
        let number = |s: String, name: &str| {
            s.parse::<usize>()
                .map_err(|_| format!("{name}: '{s}' is not a number"))
        };
        let ids = |v: String, name: &str| {
            v.split(',')
                .map(|t| {
                    t.trim()
                        .parse::<u32>()
                        .map_err(|_| format!("{name}: bad id '{t}'"))
                })
                .collect::<Result<Vec<_>, _>>()
        };
        match arg.as_str() {
            "--tokens" => a.tokens = Some(ids(value("--tokens")?, "--tokens")?),
            "--force" => a.force = ids(value("--force")?, "--force")?,
            "--kv" => {
                a.kv = match value("--kv")?.as_str() {
                    "f16" => KvType::F16,
                    "f32" => KvType::F32,
                    other => return Err(format!("--kv: '{other}' (f16 or f32)")),
                }
            }
            "--prompt" => a.prompt = Some(value("--prompt")?),
            "--chat" => a.chat = true,
            "--steps" => a.steps = number(value("--steps")?, "--steps")?,
            "--top" => a.top = number(value("--top")?, "--top")?,
            "--json" => a.json = true,
            "--profile-load" => a.profile_load = true,
            "--threads" => a.threads = Some(number(value("--threads")?, "--threads")?),
            "--backend" => {
                a.backend = match value("--backend")?.as_str() {
                    "qrepack" => Backend::Qrepack,
                    "candle" => Backend::CandleQMatMul,
                    other => return Err(format!("--backend: '{other}' (qrepack or candle)")),
                }
            }
            "-h" | "--help" => return Err(USAGE.into()),
            s if s.starts_with("--") => return Err(format!("unknown option {s}\n{USAGE}")),
            s if a.model.is_empty() => a.model = s.to_string(),
            s => return Err(format!("unexpected argument '{s}'\n{USAGE}")),
        }
    }
    if a.model.is_empty() {
        return Err(USAGE.into());
    }
    if a.tokens.is_some() == a.prompt.is_some() {
        return Err(format!("give the prompt as --tokens or --prompt\n{USAGE}"));
    }
    Ok(a)
}

/// The `k` largest logits, largest first.
fn top_k(logits: &[f32], k: usize) -> Vec<(u32, f32)> {
    let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
    idx.sort_by(|&a, &b| {
        logits[b as usize]
            .total_cmp(&logits[a as usize])
            .then(a.cmp(&b))
    });
    idx.into_iter()
        .take(k)
        .map(|i| (i, logits[i as usize]))
        .collect()
}

/// The process's peak resident memory (`VmHWM`) and its anonymous and file-backed parts now
/// (`RssAnon`, `RssFile`) in MB, from `/proc/self/status` (Linux).
fn memory_mb() -> Option<(f64, f64, f64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| -> Option<f64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        let kb: f64 = line[name.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kb * 1024.0 / 1e6)
    };
    Some((field("VmHWM:")?, field("RssAnon:")?, field("RssFile:")?))
}

fn json_number(x: f32) -> String {
    if x.is_finite() {
        format!("{x}")
    } else {
        "null".into()
    }
}

fn run(a: Args) -> Result<(), String> {
    if let Some(n) = a.threads {
        // candle reads RAYON_NUM_THREADS for its own pool; qrepack uses the global rayon pool
        std::env::set_var("RAYON_NUM_THREADS", n.to_string());
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global()
            .map_err(|e| e.to_string())?;
    }
    let t0 = Instant::now();
    let gguf = GgufFile::open(&a.model).map_err(|e| e.to_string())?;
    let t_open = t0.elapsed().as_secs_f64();
    let rss_open = memory_mb();
    // before the weights: the allocator still maps the tokenizer's large temporary tables on
    // their own and unmaps them when they are freed (after the weights' conversion it keeps
    // such blocks in its heap, and they would stay resident)
    let tokenizer = Tokenizer::from_gguf(&gguf).ok();
    let t_tokenizer = t0.elapsed().as_secs_f64();
    let rss_tokenizer = memory_mb();
    let options = OpenOptions {
        layout: match a.backend {
            Backend::Qrepack => LayoutPolicy::Best,
            Backend::CandleQMatMul => LayoutPolicy::Plain,
        },
        // q/k/v and gate/up built once as stacked matrices, multiplied as one product each
        stacks: match a.backend {
            Backend::Qrepack => stacks_for(&gguf),
            Backend::CandleQMatMul => Vec::new(),
        },
        // a repack cache: each matrix checks its bytes before its first product
        checksums: Checksums::OnFirstUse,
        ..OpenOptions::default()
    };
    let model = Arc::new(Model::from_gguf(gguf, &options).map_err(|e| e.to_string())?);
    let t_weights = t0.elapsed().as_secs_f64();
    let rss_weights = memory_mb();
    let mut llama = Llama::load(
        Arc::clone(&model),
        &LoadOptions {
            backend: a.backend,
            kv_cache: a.kv,
            ..LoadOptions::default()
        },
    )
    .map_err(|e| e.to_string())?;
    let load_s = t0.elapsed().as_secs_f64();
    if a.profile_load {
        let what = if model.is_cache() {
            "map the repack cache"
        } else {
            "convert the weights"
        };
        eprintln!(
            "load: map the file {:.3} s, tokenizer {:.3} s, {what} {:.3} s, model set-up {:.3} s, \
             total {load_s:.3} s",
            t_open,
            t_tokenizer - t_open,
            t_weights - t_tokenizer,
            load_s - t_weights
        );
        if let Some(open) = rss_open {
            let mb = |x: Option<(f64, f64, f64)>| {
                x.map_or("?".into(), |(_, anon, file)| {
                    format!("{:.1} ({anon:.1} + {file:.1})", anon + file)
                })
            };
            eprintln!(
                "resident memory (MB, anonymous + file-backed): after mapping {}, the tokenizer {}, \
                 the weights {}, the model {}",
                mb(Some(open)),
                mb(rss_tokenizer),
                mb(rss_weights),
                mb(memory_mb())
            );
        }
    }

    let prompt: Vec<u32> = match (&a.tokens, &a.prompt) {
        (Some(ids), _) => ids.clone(),
        (None, Some(text)) => {
            let tok = tokenizer
                .as_ref()
                .ok_or("this GGUF file has no tokenizer we read: give the prompt as --tokens")?;
            let text = match ChatTemplate::detect(tok).filter(|_| a.chat) {
                Some(template) => template.prompt(text),
                None => text.clone(),
            };
            tok.encode(&text)
        }
        (None, None) => unreachable!("parse checks the prompt"),
    };
    if prompt.is_empty() {
        return Err("the prompt is empty".into());
    }
    if let Some(&bad) = prompt
        .iter()
        .chain(&a.force)
        .find(|&&t| t as usize >= llama.config().vocab_size)
    {
        return Err(format!("token id {bad} is outside the vocabulary"));
    }
    let eos = tokenizer.as_ref().and_then(Tokenizer::eos);
    // chat models end a turn with a token of their template, not with end-of-sequence
    let end_of_turn = tokenizer.as_ref().and_then(|t| {
        ChatTemplate::detect(t).and_then(|template| t.token_id(template.end_of_turn()))
    });
    eprintln!(
        "{}: {} layers, {} x {} heads ({} kv), loaded in {load_s:.2} s; prompt {} tokens{}",
        a.model,
        llama.config().n_layer,
        llama.config().n_head,
        llama.config().head_dim,
        llama.config().n_kv_head,
        prompt.len(),
        match &tokenizer {
            Some(t) if !a.json => format!(": {:?}", t.decode(&prompt)),
            _ => String::new(),
        }
    );

    let dev = Device::Cpu;
    let mut stdout = std::io::stdout().lock();
    if a.json {
        let ids: Vec<String> = prompt.iter().map(u32::to_string).collect();
        writeln!(stdout, "{{\"prompt\": [{}]}}", ids.join(", ")).map_err(|e| e.to_string())?;
    }
    let t_prompt = Instant::now();
    let ids = Tensor::new(prompt.as_slice(), &dev)
        .and_then(|t| t.unsqueeze(0))
        .map_err(|e| e.to_string())?;
    let mut logits = llama.forward(&ids, 0).map_err(|e| e.to_string())?;
    let prompt_s = t_prompt.elapsed().as_secs_f64();
    let memory_after_prompt = memory_mb();
    let mut generated = Vec::new();
    let mut gen_s = 0.0;
    let mut printed = 0; // bytes of generated text printed so far
    for step in 0..a.steps {
        let row: Vec<f32> = logits
            .squeeze(0)
            .and_then(|l| l.to_vec1())
            .map_err(|e| e.to_string())?;
        let top = top_k(&row, a.top.max(1));
        let next = top[0].0;
        generated.push(next);
        if a.json {
            let pairs: Vec<String> = top
                .iter()
                .take(a.top)
                .map(|(t, l)| format!("[{t}, {}]", json_number(*l)))
                .collect();
            writeln!(
                stdout,
                "{{\"step\": {step}, \"token\": {next}, \"top\": [{}]}}",
                pairs.join(", ")
            )
            .map_err(|e| e.to_string())?;
        } else if let Some(t) = &tokenizer {
            // print whole characters only: a token may end inside a UTF-8 sequence
            let text = t.decode(&generated);
            let text = text.trim_end_matches('\u{FFFD}');
            if text.len() > printed {
                write!(stdout, "{}", &text[printed..]).map_err(|e| e.to_string())?;
                stdout.flush().map_err(|e| e.to_string())?;
                printed = text.len();
            }
        } else {
            write!(stdout, "{next} ").map_err(|e| e.to_string())?;
        }
        if step + 1 == a.steps || (!a.json && (Some(next) == eos || Some(next) == end_of_turn)) {
            break;
        }
        let fed = a.force.get(step).copied().unwrap_or(next);
        let t = Instant::now();
        let ids = Tensor::new(&[[fed]], &dev).map_err(|e| e.to_string())?;
        logits = llama
            .forward(&ids, prompt.len() + step)
            .map_err(|e| e.to_string())?;
        gen_s += t.elapsed().as_secs_f64();
    }
    if !a.json {
        writeln!(stdout).map_err(|e| e.to_string())?;
    }
    let decode_steps = generated.len().saturating_sub(1);
    eprintln!(
        "prompt: {} tokens in {:.3} s = {:.1} tokens/s; generation: {} tokens in {:.3} s = {:.1} tokens/s ({} threads)",
        prompt.len(),
        prompt_s,
        prompt.len() as f64 / prompt_s,
        decode_steps,
        gen_s,
        if gen_s > 0.0 { decode_steps as f64 / gen_s } else { 0.0 },
        rayon::current_num_threads()
    );
    if a.profile_load {
        if let (Some(p), Some(g)) = (memory_after_prompt, memory_mb()) {
            eprintln!(
                "resident memory (MB): after the prompt {:.1} (anonymous {:.1}, file {:.1}), \
                 after generating {:.1} (anonymous {:.1}, file {:.1}), peak {:.1}",
                p.1 + p.2,
                p.1,
                p.2,
                g.1 + g.2,
                g.1,
                g.2,
                g.0
            );
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match parse(&args).and_then(run) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("generate: {e}");
            ExitCode::FAILURE
        }
    }
}
