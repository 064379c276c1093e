//! Mixtures of experts (Qwen3-MoE, OLMoE, Mixtral) on tiny random GGUF files written by the
//! test: 2 layers 64 wide, 8 experts of 32 units, 2 used per token, an f32 router.
//!
//! With f32 weights the decoder must match the f64 reference of `common/reference.rs` (router,
//! softmax, top-k, renormalization, the experts' SwiGLU and their weighted sum, written from
//! llama.cpp's `build_moe_ffn`) to 1/2000 of the logit scale, having chosen the same experts
//! for every row (each seed is checked to route no row by a near tie). Quantized files
//! (Q4_0 / Q5_0, Q4_K / Q6_K experts) are compared between qrepack's routed product and
//! candle's `QMatMul` on each expert, and against the reference loosely. A prompt in chunks must equal the whole prompt,
//! and a batch of several sequences each sequence alone. (tests/stock.rs also compares a tiny
//! Mixtral with candle-transformers' `quantized_llama`.)

mod common;

use candle_core::{Device, Tensor};
use common::compare::{
    check_backends, check_chunks, check_near_reference, check_reference, exact, load, max_diff,
    model, rms, run, split_experts,
};
use common::Tiny;
use qrepack::GgmlType;
use qrepack_candle::{Backend, Llama, LoadOptions};

/// Qwen3-MoE: Qwen3's attention (q/k head norms, NeoX RoPE, heads wider than
/// `n_embd / n_head`), experts renormalized.
fn qwen3moe() -> Tiny {
    Tiny {
        arch: "qwen3moe",
        n_layer: 2,
        n_embd: 64,
        n_head: 4,
        n_kv_head: 2,
        head_dim: Some(32),
        n_ff: 96,
        vocab: 320,
        qk_norm: true,
        eps: 1e-6,
        rope_base: 1000.0,
        n_expert: 8,
        n_expert_used: 2,
        n_ff_expert: 32,
        router: GgmlType::F32,
        attn: GgmlType::Q8_0,
        ffn: GgmlType::Q4_0,
        down: GgmlType::Q8_0,
        embd: GgmlType::Q8_0,
        output: Some(GgmlType::Q8_0),
        ..Tiny::llama()
    }
}

/// OLMoE: one norm over the whole of q and of k, NeoX RoPE, weights not renormalized.
fn olmoe() -> Tiny {
    Tiny {
        arch: "olmoe",
        n_kv_head: 4,
        head_dim: None,
        qk_norm_whole: true,
        ..qwen3moe()
    }
}

/// Mixtral: a `llama` file with routers; Llama's RoPE on neighbouring pairs, no head norms.
fn mixtral() -> Tiny {
    Tiny {
        arch: "llama",
        head_dim: None,
        qk_norm: false,
        rope_base: 500.0,
        eps: 1e-5,
        ..qwen3moe()
    }
}

#[test]
fn qwen3moe_matches_reference() {
    check_reference(qwen3moe(), 51);
}

#[test]
fn olmoe_matches_reference() {
    check_reference(olmoe(), 52);
}

#[test]
fn mixtral_matches_reference() {
    check_reference(mixtral(), 53);
}

/// Top-4 of 8 and top-1 of 4 experts (the top-1 weight renormalizes to 1).
#[test]
fn other_expert_counts_match_reference() {
    check_reference(
        Tiny {
            n_expert_used: 4,
            ..qwen3moe()
        },
        54,
    );
    check_reference(
        Tiny {
            n_expert: 4,
            n_expert_used: 1,
            ..qwen3moe()
        },
        55,
    );
}

/// `t` with the products in types whose activations candle quantizes as ggml does (Q4_0,
/// Q5_0, the K-quants; not Q8_0, see tests/synthetic.rs), so that the two backends differ by
/// summation order only.
fn for_backends(t: Tiny) -> Tiny {
    let q8 = |ty: GgmlType| {
        if ty == GgmlType::Q8_0 {
            GgmlType::Q5_0
        } else {
            ty
        }
    };
    Tiny {
        attn: q8(t.attn),
        ffn: q8(t.ffn),
        down: q8(t.down),
        output: t.output.map(q8),
        ..t
    }
}

#[test]
fn quantized_files_match_across_backends() {
    check_backends(for_backends(qwen3moe()), 61);
    check_backends(for_backends(olmoe()), 62);
    check_backends(for_backends(mixtral()), 63);
}

/// K-quant experts, as in the common Qwen3-MoE files (Q4_K gate and up, Q6_K down), on a model
/// 256 wide with experts of 256 (K-quant rows are multiples of 256).
#[test]
fn k_quant_experts_match_across_backends() {
    let t = Tiny {
        n_embd: 256,
        n_ff_expert: 256,
        head_dim: Some(64),
        ffn: GgmlType::Q4_K,
        down: GgmlType::Q6_K,
        ..qwen3moe()
    };
    check_backends(for_backends(t), 65);
}

#[test]
fn prompt_in_chunks_matches_one_prompt() {
    check_chunks(qwen3moe(), 71);
    check_chunks(olmoe(), 72);
}

/// A batch of several sequences equals each sequence alone: the prompts (3 x 6 rows, whose
/// experts are multiplied together across sequences) and then single-token steps (3 rows, and
/// 1 row alone), with f32 weights.
#[test]
fn batch_matches_single_sequences() {
    let t = exact(qwen3moe());
    let bytes = t.gguf(81);
    let dev = Device::Cpu;
    let prompts: [[u32; 6]; 3] = [
        [5, 17, 300, 2, 99, 250],
        [1, 2, 3, 4, 5, 6],
        [310, 0, 77, 77, 77, 12],
    ];
    let steps: [[u32; 3]; 2] = [[42, 7, 283], [9, 9, 1]];
    // each sequence alone: its prompt's last logits, then one row per step
    let mut alone: Vec<Vec<Vec<f32>>> = Vec::new();
    for (b, p) in prompts.iter().enumerate() {
        let mut llama = load(&bytes, Backend::Qrepack, true);
        let ids = Tensor::new(&[*p], &dev).unwrap();
        let mut rows: Vec<Vec<f32>> = llama.forward(&ids, 0).unwrap().to_vec2().unwrap();
        for (i, s) in steps.iter().enumerate() {
            let ids = Tensor::new(&[[s[b]]], &dev).unwrap();
            let l = llama.forward(&ids, p.len() + i).unwrap();
            rows.extend(l.to_vec2::<f32>().unwrap());
        }
        alone.push(rows);
    }
    let mut batched = load(&bytes, Backend::Qrepack, true);
    let ids = Tensor::new(&prompts, &dev).unwrap();
    let first: Vec<Vec<f32>> = batched.forward(&ids, 0).unwrap().to_vec2().unwrap();
    let mut together: Vec<Vec<Vec<f32>>> = first.into_iter().map(|r| vec![r]).collect();
    for (i, s) in steps.iter().enumerate() {
        let ids = Tensor::new(&s.map(|x| [x]), &dev).unwrap();
        let l: Vec<Vec<f32>> = batched
            .forward(&ids, prompts[0].len() + i)
            .unwrap()
            .to_vec2()
            .unwrap();
        for (b, r) in l.into_iter().enumerate() {
            together[b].push(r);
        }
    }
    for b in 0..prompts.len() {
        let tol = rms(&alone[b]) / 2000.0;
        let d = max_diff(&alone[b], &together[b]);
        eprintln!("sequence {b}: max |batched - alone| {d:.2e}, tolerance {tol:.2e}");
        assert!(d <= tol, "sequence {b}: {d} > {tol}");
    }
}

/// The mixture of experts as read from each file.
#[test]
fn configs() {
    let c = |t: Tiny| {
        Llama::load(model(&t.gguf(1)), &LoadOptions::default())
            .unwrap()
            .config()
            .clone()
    };
    let q = c(qwen3moe());
    let moe = q.moe.as_ref().unwrap();
    assert_eq!(
        (moe.n_expert, moe.n_expert_used, moe.n_ff_expert),
        (8, 2, 32)
    );
    assert!(moe.norm_weights && moe.weights_scale == 1.0);
    assert!(q.rope_neox && q.qk_norm && !q.qk_norm_whole);
    let o = c(olmoe());
    assert!(!o.moe.as_ref().unwrap().norm_weights && o.qk_norm_whole && o.rope_neox);
    let m = c(mixtral());
    assert!(m.moe.as_ref().unwrap().norm_weights && !m.rope_neox && !m.qk_norm);
    let dense = c(Tiny {
        n_expert: 0,
        ..mixtral()
    });
    assert!(dense.moe.is_none());
}

/// Malformed files are errors at load that say what is wrong.
#[test]
fn malformed_files_are_clear_errors() {
    let err = |t: Tiny| {
        Llama::load(model(&t.gguf(1)), &LoadOptions::default())
            .unwrap_err()
            .to_string()
    };
    // a qwen3moe file without experts
    let e = err(Tiny {
        n_expert: 0,
        ..qwen3moe()
    });
    assert!(e.contains("ffn_gate_inp"), "{e}");
    // more experts used than there are
    let e = err(Tiny {
        n_expert: 2,
        n_expert_used: 3,
        ..qwen3moe()
    });
    assert!(e.contains("3 experts used of 2"), "{e}");
}

/// candle's per-expert `QMatMul` backend against qrepack's on the f32 file that
/// [`qwen3moe_matches_reference`] checks against the f64 reference: the backend the quantized
/// files are compared with is itself right.
#[test]
fn candle_backend_matches_qrepack_on_f32() {
    let t = exact(qwen3moe());
    let bytes = t.gguf(51);
    let a = run(&mut load(&bytes, Backend::CandleQMatMul, false));
    let b = run(&mut load(&bytes, Backend::Qrepack, true));
    let tol = rms(&b) / 2000.0;
    let d = max_diff(&a, &b);
    assert!(d <= tol, "candle vs qrepack on f32 weights: {d} > {tol}");
}

/// The quantized file (Q4_0 experts, Q8_0 elsewhere, f32 router) against the f64 reference on
/// its dequantized weights, routing included: the products' 8-bit activations move the logits
/// by 5 to 10% of their scale (measured on ten seeds), and the router's logits by about 1e-2,
/// enough to flip a choice made by a smaller gap (which then moves logits by 50 to 170%). So
/// the seeds here route every row by a gap of more than 3e-2, and the bound is 15%: a loose
/// check that the quantized experts are read and routed as the reference reads them, next to
/// the precise ones of the f32 files and of the two backends.
#[test]
fn quantized_qwen3moe_near_reference() {
    check_near_reference(&qwen3moe(), &[92, 97], 3e-2);
}

/// The first Mixtral files, with one 2-D tensor per expert (`blk.N.ffn_gate.E.weight`), give
/// the logits of the same experts in 3-D tensors: f32 to rounding (the split experts run one
/// product each, the 3-D ones the routed product) and quantized, with both backends.
#[test]
fn mixtral_split_experts_match_3d() {
    for (t, tol) in [
        (exact(mixtral()), 1e-5),
        (for_backends(mixtral()), 1.0 / 512.0),
    ] {
        let bytes = t.gguf(64);
        let split = split_experts(bytes.clone());
        assert!(model(&split).tensor("blk.0.ffn_gate.7.weight").is_some());
        let want = run(&mut load(&bytes, Backend::Qrepack, true));
        for backend in [Backend::Qrepack, Backend::CandleQMatMul] {
            let got = run(&mut load(&split, backend, backend == Backend::Qrepack));
            let d = max_diff(&got, &want);
            eprintln!("{backend:?}: max |split - 3-D| {d:.2e}");
            assert!(d <= tol * rms(&want), "{backend:?}: {d}");
        }
    }
}
