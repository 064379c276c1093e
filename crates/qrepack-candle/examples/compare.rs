//! qrepack-candle's `Llama` against candle-transformers' stock `quantized_llama` on one GGUF
//! file: the same prompt, then greedy steps that feed the stock model's token to both, and the
//! logits compared at every step (the criteria of the ignored test `tests/stock.rs`).
//!
//! ```text
//! cargo run --release -p qrepack-candle --features stock --example compare -- MODEL.gguf \
//!     [--prompt TEXT | --tokens 1,2,3] [--steps 16] [--backend candle] [--kv f32]
//! ```
//!
//! `--backend candle` builds qrepack-candle's model with candle's own `QMatMul`: then only the
//! model code differs from the stock model. `--kv f32` keeps the key/value cache in f32, as the
//! stock model does (the default is f16).

use std::process::ExitCode;
use std::sync::Arc;

use qrepack::Model;
use qrepack_candle::ops::KvType;
use qrepack_candle::stock::{compare_with, StockLlama};
use qrepack_candle::{Backend, LoadOptions, Tokenizer};

fn run(args: &[String]) -> Result<bool, String> {
    let mut path = None;
    let mut prompt = "What is the capital of France?".to_string();
    let mut tokens: Option<Vec<u32>> = None;
    let mut steps = 16;
    let mut options = LoadOptions::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--prompt" => prompt = it.next().ok_or("--prompt needs a value")?.clone(),
            "--tokens" => {
                let v = it.next().ok_or("--tokens needs a value")?;
                tokens = Some(
                    v.split(',')
                        .map(|t| t.trim().parse().map_err(|_| format!("bad id '{t}'")))
                        .collect::<Result<_, _>>()?,
                );
            }
            "--backend" => {
                options.backend = match it.next().map(String::as_str) {
                    Some("qrepack") => Backend::Qrepack,
                    Some("candle") => Backend::CandleQMatMul,
                    _ => return Err("--backend: qrepack or candle".into()),
                }
            }
            "--kv" => {
                options.kv_cache = match it.next().map(String::as_str) {
                    Some("f16") => KvType::F16,
                    Some("f32") => KvType::F32,
                    _ => return Err("--kv: f16 or f32".into()),
                }
            }
            "--steps" => {
                steps = it
                    .next()
                    .and_then(|s| s.parse().ok())
                    .ok_or("--steps needs a number")?
            }
            s if path.is_none() && !s.starts_with("--") => path = Some(s.to_string()),
            s => return Err(format!("unexpected argument '{s}'")),
        }
    }
    let path =
        path.ok_or("usage: compare MODEL.gguf [--prompt TEXT | --tokens 1,2,3] [--steps N]")?;
    let model = Arc::new(Model::open(&path).map_err(|e| e.to_string())?);
    let ids = match tokens {
        Some(t) => t,
        None => {
            let tok = Tokenizer::from_gguf(model.gguf()).map_err(|e| e.to_string())?;
            if tok.token_id("<start_of_turn>").is_some() {
                // Gemma's chat template
                tok.encode(&format!(
                    "<start_of_turn>user\n{prompt}<end_of_turn>\n<start_of_turn>model\n"
                ))
            } else {
                tok.encode(&format!(
                    "<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"
                ))
            }
        }
    };
    let mut stock = StockLlama::open(&path).map_err(|e| e.to_string())?;
    if !stock.dequantized.is_empty() {
        println!(
            "candle has no type for {} tensors: the stock model gets them dequantized to f32",
            stock.dequantized.len()
        );
    }
    let c = compare_with(model, &options, &mut stock, &ids, steps).map_err(|e| e.to_string())?;
    println!("step  stock  qrepack  gap(stock)  gap(qrepack)  top5  max|dlogit|  top5 max|dlogit|  rank5-6 gap");
    for (i, s) in c.steps.iter().enumerate() {
        println!(
            "{i:>4}  {:>5}  {:>7}  {:>10.3}  {:>12.3}  {:>4}  {:>11.4}  {:>16.4}  {:>11.3}",
            s.stock_token,
            s.token,
            s.stock_gap,
            s.gap,
            s.top5_shared,
            s.max_diff,
            s.max_diff_top5,
            s.stock_rank5_gap
        );
    }
    println!(
        "first near-tie: {}; tokens must agree for {} steps; largest logit difference {:.4}",
        c.first_near_tie()
            .map_or("none".to_string(), |s| format!("step {s}")),
        c.must_agree(),
        c.max_diff()
    );
    match c.check() {
        Ok(()) => {
            match c.check_strict() {
                Ok(()) => println!("PASS"),
                Err(e) => println!("PASS (read strictly, at a near-tie: {e})"),
            }
            Ok(true)
        }
        Err(e) => {
            println!("FAIL: {e}");
            Ok(false)
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("compare: {e}");
            ExitCode::from(2)
        }
    }
}
