//! A tiny random Llama-family model, written by the test itself, run through `Llama` twice:
//! with qrepack's `QLinear` and with candle-core's own `QMatMul` on the same weight bytes.

mod common;

use std::sync::Arc;

use candle_core::{Device, Tensor};
use common::Tiny;
use qrepack::gguf::GgufFile;
use qrepack::model::OpenOptions;
use qrepack::Model;
use qrepack_candle::llama::stacks_for;
use qrepack_candle::ops::KvType;
use qrepack_candle::{Backend, Llama, LoadOptions};

fn load(bytes: &[u8], backend: Backend, fuse: bool) -> Llama {
    let g = GgufFile::from_bytes(bytes.to_vec()).unwrap();
    let open = OpenOptions {
        stacks: if fuse { stacks_for(&g) } else { Vec::new() },
        ..OpenOptions::default()
    };
    let model = Model::from_gguf(g, &open).unwrap();
    Llama::load(
        Arc::new(model),
        &LoadOptions {
            backend,
            fuse,
            kv_cache: KvType::F32,
            ..LoadOptions::default()
        },
    )
    .unwrap()
}

/// Logits after a 7-token prompt (every position) and after each of 3 single-token steps:
/// `[10, vocab]`.
fn run(llama: &mut Llama) -> Vec<Vec<f32>> {
    let dev = Device::Cpu;
    let prompt = Tensor::new(&[[5u32, 17, 300, 2, 99, 250, 17]], &dev).unwrap();
    let mut rows: Vec<Vec<f32>> = llama
        .forward_all(&prompt, 0)
        .unwrap()
        .squeeze(0)
        .unwrap()
        .to_vec2()
        .unwrap();
    for (i, t) in [42u32, 7, 383].into_iter().enumerate() {
        let ids = Tensor::new(&[[t]], &dev).unwrap();
        let l = llama.forward(&ids, 7 + i).unwrap().squeeze(0).unwrap();
        rows.push(l.to_vec1().unwrap());
    }
    rows
}

fn rms(v: &[Vec<f32>]) -> f32 {
    let n: usize = v.iter().map(Vec::len).sum();
    (v.iter().flatten().map(|x| x * x).sum::<f32>() / n as f32).sqrt()
}

fn max_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter()
        .flatten()
        .zip(b.iter().flatten())
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Both backends multiply the same quantized weights, and for the types used here (Q4_0,
/// Q4_K, Q5_0, Q6_K) both quantize the activations exactly as ggml does (Q8_0 / Q8_K), so
/// their products differ only in f32 summation order: a relative 1e-6 per product (measured:
/// at most 5e-6 of the largest output, see tests/linear.rs). Through three layers that stays
/// far below 2^-9 of the logit scale, the tolerance, while a mistake in the model (a wrong
/// head, mask, rotation or bias) moves logits by a sizable fraction of their scale. (candle's
/// Q8_0 and Q4_1 products quantize activations differently from ggml, so they differ from
/// qrepack by up to the activation-quantization error; tests/linear.rs checks every type
/// against that bound.)
fn check(cfg: &Tiny, seed: u64) {
    let bytes = cfg.gguf(seed);
    let mut a = load(&bytes, Backend::Qrepack, true);
    let mut b = load(&bytes, Backend::CandleQMatMul, false);
    let mut c = load(&bytes, Backend::Qrepack, false);
    let (la, lb, lc) = (run(&mut a), run(&mut b), run(&mut c));
    assert_eq!(la.len(), 10);
    assert!(la.iter().all(|r| r.len() == cfg.vocab));
    let scale = rms(&lb);
    let tol = scale / 512.0;
    let d_candle = max_diff(&la, &lb);
    let d_fused = max_diff(&la, &lc);
    eprintln!(
        "{}: rms logit {scale:.3}, max |qrepack - candle| {d_candle:.2e}, \
         max |fused - unfused| {d_fused:.2e}, tolerance {tol:.2e}",
        cfg.arch
    );
    assert!(scale > 0.1, "degenerate logits: rms {scale}");
    assert!(d_candle <= tol, "qrepack vs candle: {d_candle} > {tol}");
    assert!(d_fused <= tol, "fused vs unfused: {d_fused} > {tol}");
}

/// A model made of the types qrepack multiplies but candle-core does not (IQ1-IQ3, TQ, MXFP4, NVFP4, Q1_0, Q2_0) loads and
/// runs with qrepack's products: the fused and unfused decoders agree, the logits are finite and
/// not degenerate. (Every product is checked against ggml in qrepack's tests/lowbit_types.rs.)
#[test]
fn grid_ternary_and_fp4_types_load_and_run() {
    use qrepack::GgmlType;
    for (i, (attn, ffn, down, embd)) in [
        (
            GgmlType::IQ2_XXS,
            GgmlType::IQ2_XS,
            GgmlType::IQ2_S,
            GgmlType::IQ3_XXS,
        ),
        (
            GgmlType::IQ3_S,
            GgmlType::IQ1_S,
            GgmlType::IQ1_M,
            GgmlType::TQ1_0,
        ),
        (
            GgmlType::TQ2_0,
            GgmlType::MXFP4,
            GgmlType::NVFP4,
            GgmlType::Q1_0,
        ),
        (
            GgmlType::Q2_0,
            GgmlType::Q2_0,
            GgmlType::Q1_0,
            GgmlType::MXFP4,
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let cfg = Tiny {
            attn,
            ffn,
            down,
            embd,
            output: Some(attn),
            ..Tiny::llama()
        };
        let bytes = cfg.gguf(10 + i as u64);
        let fused = run(&mut load(&bytes, Backend::Qrepack, true));
        let plain = run(&mut load(&bytes, Backend::Qrepack, false));
        assert_eq!(fused.len(), 10);
        assert!(fused.iter().flatten().all(|v| v.is_finite()), "{attn}..");
        let scale = rms(&fused);
        assert!(scale > 0.01, "{attn}..: degenerate logits, rms {scale}");
        let d = max_diff(&fused, &plain);
        assert!(
            d <= scale / 512.0,
            "{attn}..: fused vs unfused {d} > {scale}/512"
        );
    }
}

#[test]
fn llama_qlinear_matches_candle_qmatmul() {
    check(&Tiny::llama(), 1);
}

#[test]
fn qwen2_with_biases_matches_candle_qmatmul() {
    check(&Tiny::qwen2(), 2);
}

/// The KV cache and the causal mask: one 10-token prompt gives the same logits as a 4-token
/// prompt followed by a 3-token chunk and three single tokens.
#[test]
fn prompt_in_chunks_matches_one_prompt() {
    let bytes = Tiny::llama().gguf(3);
    let ids: Vec<u32> = vec![3, 1, 4, 1, 5, 9, 2, 6, 5, 3];
    let dev = Device::Cpu;
    let mut whole = load(&bytes, Backend::Qrepack, true);
    let all: Vec<Vec<f32>> = whole
        .forward_all(
            &Tensor::new(&ids[..], &dev).unwrap().unsqueeze(0).unwrap(),
            0,
        )
        .unwrap()
        .squeeze(0)
        .unwrap()
        .to_vec2()
        .unwrap();
    let mut parts = load(&bytes, Backend::Qrepack, true);
    let mut got = Vec::new();
    let mut pos = 0;
    for chunk in [&ids[0..4], &ids[4..7], &ids[7..8], &ids[8..9], &ids[9..10]] {
        let t = Tensor::new(chunk, &dev).unwrap().unsqueeze(0).unwrap();
        let l: Vec<Vec<f32>> = parts
            .forward_all(&t, pos)
            .unwrap()
            .squeeze(0)
            .unwrap()
            .to_vec2()
            .unwrap();
        got.extend(l);
        pos += chunk.len();
    }
    assert_eq!(parts.cached_len(), 10);
    let tol = rms(&all) / 512.0;
    let d = max_diff(&all, &got);
    assert!(d <= tol, "chunked vs whole: {d} > {tol}");
    // a wrong position is an error, not a silent mistake
    assert!(parts
        .forward(&Tensor::new(&[[1u32]], &dev).unwrap(), 3)
        .is_err());
    parts.clear_cache();
    assert_eq!(parts.cached_len(), 0);
}

/// Profiling changes no logit, counts every pass, and its phases add up to at most the total;
/// with profiling off there is nothing to take.
#[test]
fn profiling_times_the_phases_without_changing_results() {
    let bytes = Tiny::llama().gguf(4);
    let mut plain = load(&bytes, Backend::Qrepack, true);
    let mut profiled = load(&bytes, Backend::Qrepack, true);
    assert!(profiled.take_profile().is_none());
    profiled.set_profiling(true);
    let (a, b) = (run(&mut plain), run(&mut profiled));
    assert_eq!(a, b);
    let t = profiled.take_profile().unwrap();
    assert_eq!(t.passes, 4);
    assert!(t.products > std::time::Duration::ZERO);
    assert!(t.attention > std::time::Duration::ZERO);
    assert!(t.elementwise > std::time::Duration::ZERO);
    assert!(t.products + t.attention + t.elementwise <= t.total);
    assert_eq!(profiled.take_profile().unwrap().passes, 0);
    profiled.set_profiling(false);
    assert!(profiled.take_profile().is_none());
}

/// The `tiny` preset of `qrepack::synth` (what `qrepack synth` writes, llama.cpp's names and
/// SentencePiece vocabulary) loads with `Llama::open` in both mixes, and a prompt and a decode
/// step give finite, non-degenerate logits over the whole vocabulary.
#[test]
fn synth_tiny_preset_opens_and_runs() {
    use qrepack::synth::{self, Mix, Options, Preset};
    let dir = std::env::temp_dir().join(format!("qrepack-candle-synth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for mix in Mix::ALL {
        let path = dir.join(format!("tiny-{mix}.gguf"));
        synth::writer(&Preset::Tiny.spec(), mix, &Options::default())
            .unwrap()
            .write_to(&path, true)
            .unwrap();
        let mut llama = Llama::open(&path).unwrap();
        let c = llama.config().clone();
        assert_eq!((c.n_layer, c.n_embd, c.n_head, c.n_kv_head), (2, 256, 4, 2));
        assert_eq!((c.head_dim, c.n_ff, c.vocab_size), (64, 512, 512));
        assert_eq!(c.rope_base, 500_000.0);
        let rows = run(&mut llama);
        assert_eq!(rows.len(), 10);
        assert!(rows.iter().all(|r| r.len() == 512));
        assert!(rows.iter().flatten().all(|x| x.is_finite()), "{mix}");
        let scale = rms(&rows);
        assert!(scale > 0.01, "{mix}: degenerate logits, rms {scale}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
