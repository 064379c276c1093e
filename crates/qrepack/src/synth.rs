//! Synthetic models: GGUF files with the tensor names, shapes, types and metadata of real
//! Llama-family models (llama.cpp's names and keys) and random weights, so that model-level
//! speed can be measured at sizes that cannot be downloaded here. llama.cpp loads them (a
//! SentencePiece-style vocabulary of filler tokens is included), and so does qrepack-candle.
//!
//! Quantizing billions of random weights would take longer than the benchmark, and speed does
//! not depend on the values: each distinct (shape, type) gets one random block of up to 64
//! rows, quantized once, and every tensor of that shape and type repeats it
//! ([`GgufWriter::add_tensor_repeated`]), so memory stays at a few megabytes however large the
//! file and writing runs at disk speed.
//!
//! ```
//! use qrepack::synth::{plan, Mix, Options, Preset};
//! let spec = Preset::Llama3_8B.spec();
//! let tensors = plan(&spec, Mix::Q4_K_M, &Options::default()).unwrap();
//! assert_eq!(tensors.len(), 2 + 32 * 9 + 1);
//! let out = tensors.iter().find(|t| t.name == "output.weight").unwrap();
//! assert_eq!(out.dims, vec![4096, 128256]); // ggml order: columns first
//! ```

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use crate::error::Error;
use crate::gguf::{GgufValue, GgufValueType, GgufWriter};
use crate::quant::quantize;
use crate::rng::SplitMix64;
use crate::shared::SharedBytes;
use crate::types::GgmlType;

/// The models [`plan`] knows.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Preset {
    /// A small Llama (2 layers, width 256, vocabulary 512) for tests: every shape is a
    /// multiple of 256 so both mixes apply.
    Tiny,
    /// Llama-3.2-1B: tied output, 16 layers, grouped-query attention 32/8.
    Llama3_2_1B,
    /// Qwen2.5-1.5B: `qwen2` architecture, q/k/v biases, tied output, 28 layers, 12/2 heads.
    Qwen2_5_1_5B,
    /// Llama-3-8B: separate `output.weight`, 32 layers, 32/8 heads, ffn 14336.
    Llama3_8B,
    /// A small `qwen3moe` model (2 layers 256 wide, 8 experts of 128, 2 used, vocabulary
    /// 512), for checks against other engines; best written with [`Options::distinct`].
    TinyQwen3Moe,
    /// Qwen3-30B-A3B's layers, 6 of its 48: `qwen3moe`, q/k head norms, 32/4 heads of 128,
    /// 128 experts of 768 with 8 used per token, separate output head.
    Qwen3_30B_A3B_6L,
}

impl Preset {
    /// Every preset, smallest first.
    pub const ALL: [Preset; 6] = [
        Preset::Tiny,
        Preset::TinyQwen3Moe,
        Preset::Llama3_2_1B,
        Preset::Qwen2_5_1_5B,
        Preset::Qwen3_30B_A3B_6L,
        Preset::Llama3_8B,
    ];

    /// The preset's command-line name (`tiny`, `tiny-qwen3moe`, `llama3.2-1b`,
    /// `qwen2.5-1.5b`, `qwen3-30b-a3b-6l`, `llama3-8b`).
    pub const fn name(self) -> &'static str {
        match self {
            Preset::Tiny => "tiny",
            Preset::Llama3_2_1B => "llama3.2-1b",
            Preset::Qwen2_5_1_5B => "qwen2.5-1.5b",
            Preset::Llama3_8B => "llama3-8b",
            Preset::Qwen3_30B_A3B_6L => "qwen3-30b-a3b-6l",
            Preset::TinyQwen3Moe => "tiny-qwen3moe",
        }
    }

    /// The model's hyper-parameters (from the models' published configurations).
    pub fn spec(self) -> Spec {
        let llama3 = Spec {
            arch: "llama",
            name: "Llama-3.2-1B (synthetic)",
            n_layer: 16,
            n_embd: 2048,
            n_head: 32,
            n_kv_head: 8,
            head_dim: 64,
            n_ff: 8192,
            vocab: 128_256,
            context_length: 131_072,
            rope_base: 500_000.0,
            rms_eps: 1e-5,
            qkv_bias: false,
            tied: true,
            rope_scaling: Some(32.0),
            qk_norm: false,
            experts: None,
        };
        match self {
            Preset::Tiny => Spec {
                name: "tiny (synthetic)",
                n_layer: 2,
                n_embd: 256,
                n_head: 4,
                n_kv_head: 2,
                head_dim: 64,
                n_ff: 512,
                vocab: 512,
                context_length: 4096,
                rope_scaling: Some(8.0),
                ..llama3
            },
            Preset::Llama3_2_1B => llama3,
            Preset::Qwen2_5_1_5B => Spec {
                arch: "qwen2",
                name: "Qwen2.5-1.5B (synthetic)",
                n_layer: 28,
                n_embd: 1536,
                n_head: 12,
                n_kv_head: 2,
                head_dim: 128,
                n_ff: 8960,
                vocab: 151_936,
                context_length: 32_768,
                rope_base: 1_000_000.0,
                rms_eps: 1e-6,
                qkv_bias: true,
                tied: true,
                rope_scaling: None,
                ..llama3
            },
            Preset::TinyQwen3Moe => Spec {
                arch: "qwen3moe",
                name: "tiny Qwen3-MoE (synthetic)",
                n_layer: 2,
                n_embd: 256,
                n_head: 4,
                n_kv_head: 2,
                head_dim: 64,
                n_ff: 512,
                vocab: 512,
                context_length: 4096,
                rope_base: 1_000_000.0,
                rms_eps: 1e-6,
                qkv_bias: false,
                tied: false,
                rope_scaling: None,
                qk_norm: true,
                experts: Some(Experts {
                    count: 8,
                    used: 2,
                    n_ff: 128,
                }),
            },
            Preset::Qwen3_30B_A3B_6L => Spec {
                arch: "qwen3moe",
                name: "Qwen3-30B-A3B, 6 of 48 layers (synthetic)",
                n_layer: 6,
                n_embd: 2048,
                n_head: 32,
                n_kv_head: 4,
                head_dim: 128,
                n_ff: 6144,
                vocab: 151_936,
                context_length: 40_960,
                rope_base: 1_000_000.0,
                rms_eps: 1e-6,
                qkv_bias: false,
                tied: false,
                rope_scaling: None,
                qk_norm: true,
                experts: Some(Experts {
                    count: 128,
                    used: 8,
                    n_ff: 768,
                }),
            },
            Preset::Llama3_8B => Spec {
                name: "Llama-3-8B (synthetic)",
                n_layer: 32,
                n_embd: 4096,
                n_head: 32,
                n_kv_head: 8,
                head_dim: 128,
                n_ff: 14_336,
                context_length: 8192,
                tied: false,
                // Llama 3.1-8B's scaling, used only with `Options::rope_freqs`
                rope_scaling: Some(8.0),
                ..llama3
            },
        }
    }
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Preset {
    type Err = Error;

    /// Parses [`Preset::name`] case-insensitively.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Preset::ALL
            .iter()
            .copied()
            .find(|p| p.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                let names: Vec<&str> = Preset::ALL.iter().map(|p| p.name()).collect();
                Error::Invalid(format!(
                    "unknown preset '{s}' (known: {})",
                    names.join(", ")
                ))
            })
    }
}

/// The hyper-parameters of a Llama-family model.
#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    /// `general.architecture`: `llama` or `qwen2`.
    pub arch: &'static str,
    /// `general.name`.
    pub name: &'static str,
    /// Transformer blocks.
    pub n_layer: usize,
    /// Model width.
    pub n_embd: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads.
    pub n_kv_head: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Width of the feed-forward layers.
    pub n_ff: usize,
    /// Vocabulary size (at least 259: three special tokens and the 256 byte tokens).
    pub vocab: usize,
    /// `<arch>.context_length`, the training context.
    pub context_length: usize,
    /// RoPE base frequency.
    pub rope_base: f32,
    /// Epsilon of the RMS norms.
    pub rms_eps: f32,
    /// q/k/v biases (Qwen2).
    pub qkv_bias: bool,
    /// The output head is the token embedding (no `output.weight`).
    pub tied: bool,
    /// Llama 3.1-style RoPE scaling factor, the content of `rope_freqs.weight` when
    /// [`Options::rope_freqs`] asks for it; `None` for models without one.
    pub rope_scaling: Option<f32>,
    /// RMS norms of each q and k head (Qwen3).
    pub qk_norm: bool,
    /// A mixture of experts in place of the dense feed-forward layers.
    pub experts: Option<Experts>,
}

/// The mixture of experts of a layer (`ffn_{gate,up,down}_exps`, routed by `ffn_gate_inp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Experts {
    /// Experts per layer.
    pub count: usize,
    /// Experts each token is routed to.
    pub used: usize,
    /// Width of one expert's feed-forward layer.
    pub n_ff: usize,
}

/// How the weights are quantized.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mix {
    /// Every 2-D weight Q4_0 (the token embedding and output head too); norms and biases F32.
    Q4_0,
    /// llama.cpp's Q4_K_M recipe: Q4_K, with Q6_K for the output head (and the embedding when
    /// it is tied to it) and for `attn_v` and `ffn_down` in the layers llama.cpp's
    /// `use_more_bits` picks (the first and last eighth, every third in between).
    Q4_K_M,
}

impl Mix {
    /// Both mixes.
    pub const ALL: [Mix; 2] = [Mix::Q4_0, Mix::Q4_K_M];

    /// The command-line name (`q4_0`, `q4_k_m`).
    pub const fn name(self) -> &'static str {
        match self {
            Mix::Q4_0 => "q4_0",
            Mix::Q4_K_M => "q4_k_m",
        }
    }

    /// llama.cpp's `general.file_type` (`LLAMA_FTYPE_MOSTLY_Q4_0` = 2, `..._Q4_K_M` = 15).
    pub const fn file_type(self) -> u32 {
        match self {
            Mix::Q4_0 => 2,
            Mix::Q4_K_M => 15,
        }
    }
}

impl fmt::Display for Mix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Mix {
    type Err = Error;

    /// Parses [`Mix::name`] case-insensitively.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Mix::ALL
            .iter()
            .copied()
            .find(|m| m.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| Error::Invalid(format!("unknown mix '{s}' (known: q4_0, q4_k_m)")))
    }
}

/// Choices beyond the preset and the mix.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Seed of the random weights.
    pub seed: u64,
    /// Add `rope_freqs.weight` (Llama 3.1+ RoPE scaling factors). Off by default: it costs
    /// nothing measurable in either engine.
    pub rope_freqs: bool,
    /// Every row of every matrix drawn on its own. Off by default: a matrix then repeats one
    /// random block of up to 64 rows (writing gigabytes takes seconds), which makes the
    /// logits repeat every 64 tokens; distinct rows make every logit tell, for comparing
    /// engines on small models.
    pub distinct: bool,
}

/// One tensor of a synthetic model.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedTensor {
    /// llama.cpp's name (`blk.3.attn_q.weight`).
    pub name: String,
    /// Dimensions in ggml order (`ne0`, the columns, first).
    pub dims: Vec<u64>,
    /// Weight type (F32 for norms, biases and `rope_freqs`).
    pub ty: GgmlType,
}

/// llama.cpp's `use_more_bits` (llama-quant.cpp): the layers Q4_K_M gives Q6_K `attn_v` and
/// `ffn_down`.
fn use_more_bits(i: usize, n: usize) -> bool {
    // `i >= n / 8` in the last term: the first one short-circuits
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// Every tensor of the model, in the order llama.cpp's converter writes them; an error when a
/// shape cannot take the mix's types or the spec is inconsistent.
pub fn plan(spec: &Spec, mix: Mix, options: &Options) -> Result<Vec<PlannedTensor>, Error> {
    check(spec)?;
    if options.rope_freqs && spec.rope_scaling.is_none() {
        return Err(Error::Invalid(format!(
            "{} has no RoPE scaling factors (rope_freqs.weight)",
            spec.name
        )));
    }
    let (e, hd) = (spec.n_embd as u64, spec.head_dim as u64);
    let (q_rows, kv_rows) = (spec.n_head as u64 * hd, spec.n_kv_head as u64 * hd);
    let (ff, vocab) = (spec.n_ff as u64, spec.vocab as u64);
    let q = |more: bool| match mix {
        Mix::Q4_0 => GgmlType::Q4_0,
        Mix::Q4_K_M if more => GgmlType::Q6_K,
        Mix::Q4_K_M => GgmlType::Q4_K,
    };
    let mut out = Vec::new();
    let mut push = |name: String, dims: Vec<u64>, ty: GgmlType| {
        out.push(PlannedTensor { name, dims, ty });
    };
    // a tied embedding is quantized as the output head it also is
    push("token_embd.weight".into(), vec![e, vocab], q(spec.tied));
    if options.rope_freqs {
        push("rope_freqs.weight".into(), vec![hd / 2], GgmlType::F32);
    }
    for i in 0..spec.n_layer {
        let n = |s: &str| format!("blk.{i}.{s}");
        let more = use_more_bits(i, spec.n_layer);
        push(n("attn_norm.weight"), vec![e], GgmlType::F32);
        push(n("attn_q.weight"), vec![e, q_rows], q(false));
        if spec.qkv_bias {
            push(n("attn_q.bias"), vec![q_rows], GgmlType::F32);
        }
        push(n("attn_k.weight"), vec![e, kv_rows], q(false));
        if spec.qkv_bias {
            push(n("attn_k.bias"), vec![kv_rows], GgmlType::F32);
        }
        push(n("attn_v.weight"), vec![e, kv_rows], q(more));
        if spec.qkv_bias {
            push(n("attn_v.bias"), vec![kv_rows], GgmlType::F32);
        }
        push(n("attn_output.weight"), vec![q_rows, e], q(false));
        if spec.qk_norm {
            push(n("attn_q_norm.weight"), vec![hd], GgmlType::F32);
            push(n("attn_k_norm.weight"), vec![hd], GgmlType::F32);
        }
        push(n("ffn_norm.weight"), vec![e], GgmlType::F32);
        if let Some(x) = spec.experts {
            let (count, xff) = (x.count as u64, x.n_ff as u64);
            // the router stays f32, as llama.cpp's quantizer leaves it
            push(n("ffn_gate_inp.weight"), vec![e, count], GgmlType::F32);
            push(n("ffn_gate_exps.weight"), vec![e, xff, count], q(false));
            push(n("ffn_up_exps.weight"), vec![e, xff, count], q(false));
            push(n("ffn_down_exps.weight"), vec![xff, e, count], q(more));
        } else {
            push(n("ffn_gate.weight"), vec![e, ff], q(false));
            push(n("ffn_up.weight"), vec![e, ff], q(false));
            push(n("ffn_down.weight"), vec![ff, e], q(more));
        }
    }
    push("output_norm.weight".into(), vec![e], GgmlType::F32);
    if !spec.tied {
        push("output.weight".into(), vec![e, vocab], q(true));
    }
    for t in &out {
        let cols = t.dims.first().copied().unwrap_or(1);
        if cols % t.ty.block_size() as u64 != 0 {
            return Err(Error::Invalid(format!(
                "{}: {cols} columns do not fill {} blocks",
                t.name, t.ty
            )));
        }
    }
    Ok(out)
}

fn check(spec: &Spec) -> Result<(), Error> {
    let bad = |m: String| Err(Error::Invalid(format!("{}: {m}", spec.name)));
    if spec.n_layer == 0 || spec.n_embd == 0 || spec.n_ff == 0 || spec.head_dim == 0 {
        return bad("every dimension must be positive".into());
    }
    if spec.n_kv_head == 0 || !spec.n_head.is_multiple_of(spec.n_kv_head) {
        return bad(format!(
            "{} query heads cannot share {} key/value heads",
            spec.n_head, spec.n_kv_head
        ));
    }
    if !spec.head_dim.is_multiple_of(2) {
        return bad(format!("head width {} is odd", spec.head_dim));
    }
    if spec.vocab < SPECIAL.len() + 256 {
        return bad(format!(
            "a vocabulary of {} cannot hold the 3 special and 256 byte tokens",
            spec.vocab
        ));
    }
    if !matches!(spec.arch, "llama" | "qwen2" | "qwen3" | "qwen3moe") {
        return bad(format!(
            "architecture '{}' (llama, qwen2, qwen3, qwen3moe)",
            spec.arch
        ));
    }
    if let Some(x) = spec.experts {
        if x.count == 0 || x.used == 0 || x.used > x.count || x.n_ff == 0 {
            return bad(format!(
                "{} of {} experts of width {}",
                x.used, x.count, x.n_ff
            ));
        }
    }
    if (spec.experts.is_some()) != (spec.arch == "qwen3moe") {
        return bad("experts go with the qwen3moe architecture, and only there".into());
    }
    Ok(())
}

/// The special tokens at ids 0, 1, 2 (unknown, BOS, EOS), as in Llama 2's SentencePiece model.
const SPECIAL: [&str; 3] = ["<unk>", "<s>", "</s>"];

/// llama.cpp's token types.
const TOKEN_NORMAL: i32 = 1;
const TOKEN_UNKNOWN: i32 = 2;
const TOKEN_CONTROL: i32 = 3;
const TOKEN_BYTE: i32 = 6;

/// The metadata of the model: llama.cpp's hyper-parameter keys and a SentencePiece-style
/// vocabulary (`<unk>`, `<s>`, `</s>`, the byte tokens `<0x00>`..`<0xFF>` that llama.cpp's
/// SPM tokenizer requires, then distinct filler tokens up to the vocabulary size).
pub fn metadata(spec: &Spec, mix: Mix) -> Vec<(String, GgufValue)> {
    let a = spec.arch;
    let u = |x: usize| GgufValue::U32(u32::try_from(x).unwrap_or(u32::MAX));
    let mut m: Vec<(String, GgufValue)> = vec![
        ("general.architecture".into(), GgufValue::String(a.into())),
        ("general.name".into(), GgufValue::String(spec.name.into())),
        ("general.file_type".into(), GgufValue::U32(mix.file_type())),
        ("general.quantization_version".into(), GgufValue::U32(2)),
        ("general.alignment".into(), GgufValue::U32(32)),
    ];
    let mut arch = |k: &str, v: GgufValue| m.push((format!("{a}.{k}"), v));
    arch("vocab_size", u(spec.vocab));
    arch("context_length", u(spec.context_length));
    arch("embedding_length", u(spec.n_embd));
    arch("block_count", u(spec.n_layer));
    arch("feed_forward_length", u(spec.n_ff));
    arch("attention.head_count", u(spec.n_head));
    arch("attention.head_count_kv", u(spec.n_kv_head));
    arch("attention.key_length", u(spec.head_dim));
    arch("attention.value_length", u(spec.head_dim));
    arch("rope.freq_base", GgufValue::F32(spec.rope_base));
    arch("rope.dimension_count", u(spec.head_dim));
    if let Some(x) = spec.experts {
        arch("expert_count", u(x.count));
        arch("expert_used_count", u(x.used));
        arch("expert_feed_forward_length", u(x.n_ff));
    }
    arch(
        "attention.layer_norm_rms_epsilon",
        GgufValue::F32(spec.rms_eps),
    );
    let n = spec.vocab;
    let mut tokens = Vec::with_capacity(n);
    let mut scores = Vec::with_capacity(n);
    let mut types = Vec::with_capacity(n);
    for (i, s) in SPECIAL.iter().enumerate() {
        tokens.push(GgufValue::String((*s).into()));
        scores.push(GgufValue::F32(0.0));
        types.push(GgufValue::I32(if i == 0 {
            TOKEN_UNKNOWN
        } else {
            TOKEN_CONTROL
        }));
    }
    for b in 0..256 {
        tokens.push(GgufValue::String(format!("<0x{b:02X}>")));
        scores.push(GgufValue::F32(0.0));
        types.push(GgufValue::I32(TOKEN_BYTE));
    }
    for i in tokens.len()..n {
        // distinct strings: llama.cpp maps text to ids and checks the map is one-to-one
        tokens.push(GgufValue::String(format!("\u{2581}t{i}")));
        scores.push(GgufValue::F32(-(i as f32)));
        types.push(GgufValue::I32(TOKEN_NORMAL));
    }
    m.push((
        "tokenizer.ggml.model".into(),
        GgufValue::String("llama".into()),
    ));
    m.push((
        "tokenizer.ggml.tokens".into(),
        GgufValue::Array(GgufValueType::String, tokens),
    ));
    m.push((
        "tokenizer.ggml.scores".into(),
        GgufValue::Array(GgufValueType::F32, scores),
    ));
    m.push((
        "tokenizer.ggml.token_type".into(),
        GgufValue::Array(GgufValueType::I32, types),
    ));
    m.push(("tokenizer.ggml.unknown_token_id".into(), GgufValue::U32(0)));
    m.push(("tokenizer.ggml.bos_token_id".into(), GgufValue::U32(1)));
    m.push(("tokenizer.ggml.eos_token_id".into(), GgufValue::U32(2)));
    m.push(("tokenizer.ggml.add_bos_token".into(), GgufValue::Bool(true)));
    m.push((
        "tokenizer.ggml.add_eos_token".into(),
        GgufValue::Bool(false),
    ));
    m
}

/// Llama 3.1's RoPE frequency factors (`rope_freqs.weight`, one per rotated pair): 1 for
/// short wavelengths, `factor` for long ones, interpolated between (original context 8192,
/// low/high frequency factors 1 and 4, as in the models' configurations).
fn llama3_rope_factors(spec: &Spec, factor: f32) -> Vec<f32> {
    let (old_ctx, low, high) = (8192.0f64, 1.0f64, 4.0f64);
    let (low_wavelen, high_wavelen) = (old_ctx / low, old_ctx / high);
    let d = spec.head_dim as f64;
    (0..spec.head_dim / 2)
        .map(|i| {
            let freq = f64::from(spec.rope_base).powf(-((2 * i) as f64) / d);
            let wavelen = 2.0 * std::f64::consts::PI / freq;
            if wavelen < high_wavelen {
                1.0
            } else if wavelen > low_wavelen {
                factor
            } else {
                let smooth = (old_ctx / wavelen - low) / (high - low);
                (1.0 / ((1.0 - smooth) / f64::from(factor) + smooth)) as f32
            }
        })
        .collect()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Rows of the repeated block of a matrix with `rows` rows: the largest power of two up to 64
/// that divides it, so the block tiles the matrix exactly.
fn unit_rows(rows: u64) -> u64 {
    let mut r = 64;
    while !rows.is_multiple_of(r) {
        r /= 2;
    }
    r
}

/// The model as a [`GgufWriter`] ready to write: metadata from [`metadata`], tensors from
/// [`plan`]. Matrices repeat one quantized random block per (shape, type), scaled so a
/// product keeps the variance of its input (the embedding's entries are of size ~1); norms are
/// 1 ± 0.2 and biases ± 0.5, so the forward pass stays finite through every layer.
pub fn writer(spec: &Spec, mix: Mix, options: &Options) -> Result<GgufWriter<'static>, Error> {
    let tensors = plan(spec, mix, options)?;
    let mut w = GgufWriter::new();
    for (k, v) in metadata(spec, mix) {
        w.add_kv(&k, v)?;
    }
    let mut rng = SplitMix64::new(options.seed);
    // keyed by (block rows, columns, type, is the embedding): the embedding's scale differs
    let mut units: HashMap<(u64, u64, GgmlType, bool), SharedBytes> = HashMap::new();
    let mut vectors: HashMap<(String, u64), SharedBytes> = HashMap::new();
    for t in tensors {
        let cols = t.dims.first().copied().unwrap_or(1);
        if t.name == "rope_freqs.weight" {
            let factor = spec.rope_scaling.unwrap_or(1.0);
            let bytes = f32_bytes(&llama3_rope_factors(spec, factor));
            w.add_tensor_owned(&t.name, &t.dims, t.ty.id(), bytes)?;
        } else if t.dims.len() == 1 {
            // one vector per kind and length, shared by every layer
            let kind = t.name.rsplit('.').take(2).collect::<Vec<_>>().join(".");
            let is_bias = t.name.ends_with(".bias");
            let bytes = vectors.entry((kind, cols)).or_insert_with(|| {
                let v: Vec<f32> = (0..cols)
                    .map(|_| {
                        let r = rng.uniform_pm1();
                        if is_bias {
                            0.5 * r
                        } else {
                            1.0 + 0.2 * r
                        }
                    })
                    .collect();
                SharedBytes::new(f32_bytes(&v))
            });
            w.add_tensor_shared(&t.name, &t.dims, t.ty.id(), bytes.clone())?;
        } else {
            let rows = t.dims.get(1).copied().unwrap_or(1);
            let r = if options.distinct {
                t.dims.iter().skip(1).product()
            } else {
                unit_rows(rows)
            };
            let embd = t.name == "token_embd.weight";
            let scale = if embd {
                1.0
            } else {
                (3.0 / cols as f32).sqrt()
            };
            let key = (r, cols, t.ty, embd);
            let unit = match units.get(&key).filter(|_| !options.distinct) {
                Some(u) => u.clone(),
                None => {
                    let (ru, cu) = (r as usize, cols as usize);
                    let x: Vec<f32> = (0..ru * cu).map(|_| rng.uniform_pm1() * scale).collect();
                    let u = SharedBytes::new(quantize(t.ty, &x, ru, cu)?);
                    units.insert(key, u.clone());
                    u
                }
            };
            w.add_tensor_repeated(&t.name, &t.dims, t.ty.id(), unit)?;
        }
    }
    Ok(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn use_more_bits_matches_llama_cpp() {
        // 32 layers: 0..4, 28..32, and 4 + 3k + 2 in between
        let picked: Vec<usize> = (0..32).filter(|&i| use_more_bits(i, 32)).collect();
        assert_eq!(
            picked,
            vec![0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]
        );
        assert_eq!((0..16).filter(|&i| use_more_bits(i, 16)).count(), 8);
    }

    #[test]
    fn rope_factors_span_one_to_the_factor() {
        let f = llama3_rope_factors(&Preset::Llama3_2_1B.spec(), 32.0);
        assert_eq!(f.len(), 32);
        assert_eq!(f[0], 1.0);
        assert_eq!(f[31], 32.0);
        assert!(f.windows(2).all(|p| p[0] <= p[1]));
    }

    #[test]
    fn unit_rows_divide() {
        assert_eq!(unit_rows(128_256), 64);
        assert_eq!(unit_rows(151_936), 64);
        assert_eq!(unit_rows(8960), 64);
        assert_eq!(unit_rows(7), 1);
        assert_eq!(unit_rows(12), 4);
    }
}
