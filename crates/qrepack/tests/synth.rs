//! Synthetic models (`qrepack::synth`): the tiny preset written to disk in both mixes and
//! opened with `Model`, its names, shapes, types and metadata checked; the large presets
//! planned (and their file sizes computed) without writing them.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use qrepack::gguf::GgufFile;
use qrepack::synth::{self, Mix, Options, Preset};
use qrepack::{dequantize, GgmlType, Model};

struct TempDir(PathBuf);
impl TempDir {
    fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "qrepack-synth-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn u(g: &GgufFile, k: &str) -> u64 {
    g.get(k)
        .and_then(|v| v.as_u64())
        .unwrap_or_else(|| panic!("{k} missing"))
}

#[test]
fn tiny_written_and_opened_in_both_mixes() {
    let dir = TempDir::new("tiny");
    for mix in Mix::ALL {
        let spec = Preset::Tiny.spec();
        let opts = Options::default();
        let path = dir.0.join(format!("tiny-{mix}.gguf"));
        let w = synth::writer(&spec, mix, &opts).unwrap();
        let size = w.file_size().unwrap();
        let mut last = (0, 0);
        w.write_to_with_progress(&path, false, &mut |d, t| last = (d, t))
            .unwrap();
        assert_eq!(last, (size, size));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), size);
        // never overwritten without asking
        assert!(w.write_to(&path, false).is_err());

        let model = Model::open(&path).unwrap();
        let g = model.gguf();
        let s = |k: &str| g.get(k).and_then(|v| v.as_str()).unwrap().to_string();
        assert_eq!(s("general.architecture"), "llama");
        assert_eq!(s("tokenizer.ggml.model"), "llama");
        assert_eq!(u(g, "general.file_type"), u64::from(mix.file_type()));
        assert_eq!(u(g, "general.alignment"), 32);
        assert_eq!(u(g, "llama.block_count"), 2);
        assert_eq!(u(g, "llama.embedding_length"), 256);
        assert_eq!(u(g, "llama.feed_forward_length"), 512);
        assert_eq!(u(g, "llama.attention.head_count"), 4);
        assert_eq!(u(g, "llama.attention.head_count_kv"), 2);
        assert_eq!(u(g, "llama.rope.dimension_count"), 64);
        assert_eq!(u(g, "llama.context_length"), 4096);
        let f = |k: &str| g.get(k).and_then(|v| v.as_f64()).unwrap();
        assert_eq!(f("llama.rope.freq_base"), 500_000.0);
        assert!((f("llama.attention.layer_norm_rms_epsilon") - 1e-5).abs() < 1e-9);
        assert_eq!(u(g, "tokenizer.ggml.bos_token_id"), 1);
        assert_eq!(u(g, "tokenizer.ggml.eos_token_id"), 2);
        let arr = |k: &str| g.get(k).and_then(|v| v.as_array()).unwrap().to_vec();
        let tokens = arr("tokenizer.ggml.tokens");
        let types = arr("tokenizer.ggml.token_type");
        assert_eq!(tokens.len(), 512);
        assert_eq!(arr("tokenizer.ggml.scores").len(), 512);
        assert_eq!(types.len(), 512);
        assert_eq!(tokens[0].as_str(), Some("<unk>"));
        assert_eq!(tokens[1].as_str(), Some("<s>"));
        assert_eq!(tokens[2].as_str(), Some("</s>"));
        assert_eq!(tokens[3].as_str(), Some("<0x00>"));
        assert_eq!(tokens[3 + 0x0A].as_str(), Some("<0x0A>"));
        assert_eq!(tokens[258].as_str(), Some("<0xFF>"));
        let t: Vec<i64> = types.iter().map(|v| v.as_i64().unwrap()).collect();
        assert_eq!(&t[..4], &[2, 3, 3, 6]);
        assert_eq!((t[258], t[259], t[511]), (6, 1, 1));
        let distinct: std::collections::HashSet<&str> =
            tokens.iter().map(|v| v.as_str().unwrap()).collect();
        assert_eq!(distinct.len(), 512);

        // names, shapes and types, as planned and as llama.cpp names them
        let planned = synth::plan(&spec, mix, &opts).unwrap();
        assert_eq!(model.tensors().len(), planned.len());
        assert_eq!(planned.len(), 1 + 2 * 9 + 1); // tied: no output.weight
        assert!(model.tensor("output.weight").is_none());
        assert!(model.tensor("rope_freqs.weight").is_none());
        for (t, p) in model.tensors().iter().zip(&planned) {
            assert_eq!((&t.name, &t.dims, t.ty), (&p.name, &p.dims, Some(p.ty)));
        }
        let ty = |n: &str| model.tensor(n).unwrap().ty.unwrap();
        let dims = |n: &str| model.tensor(n).unwrap().dims.clone();
        assert_eq!(dims("token_embd.weight"), vec![256, 512]);
        assert_eq!(dims("blk.1.attn_q.weight"), vec![256, 256]);
        assert_eq!(dims("blk.1.attn_k.weight"), vec![256, 128]);
        assert_eq!(dims("blk.1.attn_v.weight"), vec![256, 128]);
        assert_eq!(dims("blk.1.attn_output.weight"), vec![256, 256]);
        assert_eq!(dims("blk.1.ffn_gate.weight"), vec![256, 512]);
        assert_eq!(dims("blk.1.ffn_up.weight"), vec![256, 512]);
        assert_eq!(dims("blk.1.ffn_down.weight"), vec![512, 256]);
        assert_eq!(dims("blk.0.attn_norm.weight"), vec![256]);
        assert_eq!(dims("output_norm.weight"), vec![256]);
        assert_eq!(ty("blk.0.ffn_norm.weight"), GgmlType::F32);
        match mix {
            Mix::Q4_0 => {
                for t in model.tensors().iter().filter(|t| t.dims.len() == 2) {
                    assert_eq!(t.ty, Some(GgmlType::Q4_0), "{}", t.name);
                }
            }
            Mix::Q4_K_M => {
                // tied: the embedding is the output head, Q6_K; of 2 layers, llama.cpp's
                // use_more_bits picks the last (i >= 7n/8) only
                assert_eq!(ty("token_embd.weight"), GgmlType::Q6_K);
                assert_eq!(ty("blk.0.attn_v.weight"), GgmlType::Q4_K);
                assert_eq!(ty("blk.0.ffn_down.weight"), GgmlType::Q4_K);
                assert_eq!(ty("blk.1.attn_v.weight"), GgmlType::Q6_K);
                assert_eq!(ty("blk.1.ffn_down.weight"), GgmlType::Q6_K);
                assert_eq!(ty("blk.1.attn_q.weight"), GgmlType::Q4_K);
                assert_eq!(ty("blk.0.ffn_up.weight"), GgmlType::Q4_K);
            }
        }
        // the weights are finite, not all equal, and of the planned scale
        let raw = model.raw_bytes("blk.0.ffn_up.weight").unwrap();
        let x = dequantize(ty("blk.0.ffn_up.weight"), raw, 512, 256).unwrap();
        assert!(x.iter().all(|v| v.is_finite()));
        let rms = (x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32).sqrt();
        assert!((0.05..0.15).contains(&rms), "rms {rms}"); // sqrt(3/256)/sqrt(3) = 0.0625
    }
}

/// The real-model presets: tensor counts, the shapes that set their speed, the Q4_K_M layer
/// rule, and file sizes (computed, not written) near the real files'.
#[test]
fn large_presets_plan_like_the_real_models() {
    let opts = Options::default();
    let find = |p: &[synth::PlannedTensor], n: &str| {
        p.iter()
            .find(|t| t.name == n)
            .unwrap_or_else(|| panic!("{n} missing"))
            .clone()
    };
    let p = synth::plan(&Preset::Llama3_2_1B.spec(), Mix::Q4_0, &opts).unwrap();
    assert_eq!(p.len(), 1 + 16 * 9 + 1);
    assert_eq!(find(&p, "blk.15.attn_k.weight").dims, vec![2048, 512]);
    assert_eq!(find(&p, "blk.15.ffn_down.weight").dims, vec![8192, 2048]);
    assert_eq!(find(&p, "token_embd.weight").dims, vec![2048, 128_256]);
    assert!(p.iter().all(|t| t.name != "output.weight"));

    let p = synth::plan(&Preset::Qwen2_5_1_5B.spec(), Mix::Q4_K_M, &opts).unwrap();
    assert_eq!(p.len(), 1 + 28 * 12 + 1);
    assert_eq!(find(&p, "blk.3.attn_q.bias").dims, vec![1536]);
    assert_eq!(find(&p, "blk.3.attn_k.weight").dims, vec![1536, 256]);
    assert_eq!(find(&p, "blk.3.ffn_gate.weight").dims, vec![1536, 8960]);
    assert_eq!(find(&p, "token_embd.weight").ty, GgmlType::Q6_K);

    let p = synth::plan(&Preset::Llama3_8B.spec(), Mix::Q4_K_M, &opts).unwrap();
    assert_eq!(find(&p, "output.weight").ty, GgmlType::Q6_K);
    assert_eq!(find(&p, "token_embd.weight").ty, GgmlType::Q4_K);
    assert_eq!(find(&p, "blk.4.attn_v.weight").ty, GgmlType::Q4_K);
    assert_eq!(find(&p, "blk.6.attn_v.weight").ty, GgmlType::Q6_K);
    assert_eq!(find(&p, "blk.31.ffn_down.weight").ty, GgmlType::Q6_K);
    assert_eq!(find(&p, "blk.31.ffn_down.weight").dims, vec![14_336, 4096]);
    let with_freqs = Options {
        rope_freqs: true,
        ..Options::default()
    };
    let p = synth::plan(&Preset::Llama3_8B.spec(), Mix::Q4_0, &with_freqs).unwrap();
    assert_eq!(find(&p, "rope_freqs.weight").dims, vec![64]);
    assert!(synth::plan(&Preset::Qwen2_5_1_5B.spec(), Mix::Q4_0, &with_freqs).is_err());

    // Llama-3-8B: 8.03e9 weights; Q4_0 4.5 bits each, Q4_K_M ~4.9 (real files: 4.66 and 4.92
    // GB, the Q4_0 one with a Q6_K output head)
    let gb = |preset: Preset, mix| {
        synth::writer(&preset.spec(), mix, &opts)
            .unwrap()
            .file_size()
            .unwrap() as f64
            / 1e9
    };
    let q4_0 = gb(Preset::Llama3_8B, Mix::Q4_0);
    assert!((4.4..4.7).contains(&q4_0), "{q4_0} GB");
    let q4_k_m = gb(Preset::Llama3_8B, Mix::Q4_K_M);
    assert!((4.7..5.1).contains(&q4_k_m), "{q4_k_m} GB");
    let small = gb(Preset::Llama3_2_1B, Mix::Q4_K_M);
    assert!((0.7..0.9).contains(&small), "{small} GB");

    // Qwen3-30B-A3B, 6 of its 48 layers: 6 x 128 x 3 x 2048 x 768 expert weights (3.6e9),
    // plus the embedding and head (2 x 3.1e8)
    let p = synth::plan(&Preset::Qwen3_30B_A3B_6L.spec(), Mix::Q4_0, &opts).unwrap();
    assert_eq!(p.len(), 2 + 6 * 12 + 1);
    assert_eq!(find(&p, "blk.5.attn_q.weight").dims, vec![2048, 4096]);
    assert_eq!(find(&p, "blk.5.attn_q_norm.weight").dims, vec![128]);
    assert_eq!(find(&p, "blk.5.ffn_gate_inp.weight").ty, GgmlType::F32);
    assert_eq!(find(&p, "blk.5.ffn_gate_inp.weight").dims, vec![2048, 128]);
    assert_eq!(
        find(&p, "blk.5.ffn_down_exps.weight").dims,
        vec![768, 2048, 128]
    );
    assert!(p.iter().all(|t| !t.name.contains("ffn_gate.weight")));
    let moe = gb(Preset::Qwen3_30B_A3B_6L, Mix::Q4_0);
    assert!((2.3..2.5).contains(&moe), "{moe} GB");
}

#[test]
fn names_parse() {
    for p in Preset::ALL {
        assert_eq!(p.name().parse::<Preset>().unwrap(), p);
    }
    assert_eq!("Q4_K_M".parse::<Mix>().unwrap(), Mix::Q4_K_M);
    assert!("llama-7b".parse::<Preset>().is_err());
    assert!("q8_0".parse::<Mix>().is_err());
}
