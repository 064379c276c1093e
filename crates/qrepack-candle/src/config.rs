//! The hyper-parameters of a decoder, read from GGUF metadata, and what each architecture
//! changes on the shared Llama-style block.
//!
//! The architectures follow llama.cpp's definitions of them (`src/llama-model.cpp` and
//! `src/models/*.cpp`), since that is what the GGUF files were converted for:
//!
//! * `llama`, `mistral`: pre-norm blocks, SwiGLU, RoPE on neighbouring pairs; Llama 3.1+ adds
//!   per-frequency divisors (`rope_freqs.weight`).
//! * `qwen2`: the same with q/k/v biases and NeoX-style RoPE (halves).
//! * `qwen3`: no biases, an RMS norm over each head of q and of k before RoPE, and a head width
//!   of its own (`qwen3.attention.key_length`, q wider than the model).
//! * `qwen3moe`: Qwen3's attention, and a mixture of experts in place of every feed-forward
//!   layer ([`MoeConfig`]): softmax over the router's logits, the top `expert_used_count`
//!   experts, their weights renormalized to sum 1.
//! * `olmoe`: NeoX RoPE, one RMS norm over the whole of q and of k (not per head), and a
//!   mixture of experts whose top-k weights are not renormalized.
//! * Mixtral: a `llama` file whose layers have a router (`ffn_gate_inp`): experts as in
//!   `qwen3moe` (3-D tensors, or one 2-D tensor per expert in the first files), Llama's
//!   attention.
//! * `gemma3`: the embedding scaled by `sqrt(n_embd)`, q/k head norms, RMS norms after the
//!   attention and the feed-forward output (before their residual adds), GeGLU, sliding-window
//!   attention on five layers of every six with their own RoPE base (10000), and an output head
//!   tied to the embedding.
//! * `gpt-oss`: q/k/v and output biases, NeoX RoPE extended by YaRN, attention sinks (a
//!   logit per head in every softmax), sliding-window attention on every other layer (the
//!   even ones), the feed-forward norm stored as `post_attention_norm`, and a mixture of
//!   experts with router and expert biases, whose top-k logits are softmaxed among
//!   themselves ([`Gating::SoftmaxOfChosen`]) and whose experts use the clamped SwiGLU
//!   ([`Gate::SwiGluOai`]).

use candle_core::{bail, Result};
use qrepack::Model;

use crate::ops::{Gate, Yarn};
use crate::weights::{metadata, metadata_f64, metadata_usize};

/// The architectures [`Config::from_model`] accepts (`general.architecture`).
pub const ARCHITECTURES: &[&str] = &[
    "llama", "mistral", "qwen2", "qwen3", "qwen3moe", "olmoe", "gemma3", "gpt-oss",
];

/// Gemma 3's layer pattern: every sixth layer attends globally, the others through the sliding
/// window (llama.cpp's `set_swa_pattern(6)`: layer `il` is local when `il % 6 < 5`).
const GEMMA3_SWA_PATTERN: usize = 6;

/// RoPE base of Gemma 3's sliding-window layers (fixed by the model, not in the metadata).
const GEMMA3_LOCAL_ROPE_BASE: f64 = 10_000.0;

/// gpt-oss's layer pattern: layer `il` is local when `il % 2 < 1` (llama.cpp's default for it).
const GPT_OSS_SWA_PATTERN: usize = 2;

/// How a mixture of experts turns the router's logits into the chosen experts' weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gating {
    /// The softmax over every expert, read at the chosen ones (Qwen3-MoE, Mixtral, OLMoE).
    Softmax,
    /// The softmax over the chosen experts' logits alone (gpt-oss).
    SoftmaxOfChosen,
}

/// The mixture-of-experts feed-forward layers (llama.cpp `build_moe_ffn`): per row, the
/// router's logits `ffn_gate_inp x` over the experts, the `n_expert_used` largest, their
/// weights by [`MoeConfig::gating`] (renormalized to sum 1 when [`MoeConfig::norm_weights`],
/// then times [`MoeConfig::weights_scale`]), and the sum of those experts' gated outputs
/// `down_e(act(gate_e x) * up_e x)` weighted by them.
#[derive(Clone, Debug, PartialEq)]
pub struct MoeConfig {
    /// Experts per layer (`<arch>.expert_count`).
    pub n_expert: usize,
    /// Experts each row goes through (`<arch>.expert_used_count`).
    pub n_expert_used: usize,
    /// Width of one expert's feed-forward layer.
    pub n_ff_expert: usize,
    /// The chosen experts' weights divided by their sum (Qwen3-MoE, Mixtral; not OLMoE).
    pub norm_weights: bool,
    /// Factor on the weights (`<arch>.expert_weights_scale`; 1 when absent or 0).
    pub weights_scale: f64,
    /// How the weights come from the router's logits.
    pub gating: Gating,
}

/// The hyper-parameters of a Llama-family model, read from GGUF metadata.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// `general.architecture`, one of [`ARCHITECTURES`].
    pub architecture: String,
    /// Transformer blocks.
    pub n_layer: usize,
    /// Model width.
    pub n_embd: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads (grouped-query attention when fewer than `n_head`).
    pub n_kv_head: usize,
    /// Width of one head (`n_head * head_dim` may differ from `n_embd`: Qwen3, Gemma 3).
    pub head_dim: usize,
    /// Epsilon of the RMS norms.
    pub rms_eps: f64,
    /// RoPE base frequency (of the global layers when some layers are local).
    pub rope_base: f64,
    /// Divisor of every RoPE frequency of the global layers (linear RoPE scaling,
    /// `rope.scaling.factor`; 1 for none and for YaRN).
    pub rope_scale: f64,
    /// YaRN context extension of the RoPE (`rope.scaling.type = yarn`).
    pub yarn: Option<Yarn>,
    /// RoPE rotates the halves of each head (GPT-NeoX, Qwen, Gemma) instead of neighbouring
    /// pairs (Llama, as its GGUF files store q and k).
    pub rope_neox: bool,
    /// The file has per-frequency RoPE divisors (`rope_freqs.weight`, Llama 3.1+).
    pub rope_freq_factors: bool,
    /// Longest sequence (positions) the model supports.
    pub context_length: usize,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Width of the dense feed-forward layers (0 in a model whose every layer is a mixture of
    /// experts and whose file does not say).
    pub n_ff: usize,
    /// The mixture of experts of the layers that have a router (`None`: every layer dense).
    pub moe: Option<MoeConfig>,
    /// The activation of the gated feed-forward layer.
    pub gate: Gate,
    /// RMS norm over each head of q and of k before RoPE (`attn_q_norm`, `attn_k_norm`).
    pub qk_norm: bool,
    /// The q and k norms take the whole of q and of k (all heads) as one vector (OLMoE).
    pub qk_norm_whole: bool,
    /// RMS norms on the attention and feed-forward outputs before their residual adds
    /// (`post_attention_norm`, `post_ffw_norm`).
    pub post_norms: bool,
    /// Factor on the token embeddings (Gemma: `sqrt(n_embd)`).
    pub embedding_scale: Option<f64>,
    /// Factor on the attention scores.
    pub attention_scale: f64,
    /// Sliding window of the local layers, in positions (`None`: every layer is global). The
    /// local layers follow [`Config::swa_pattern`] ([`Config::is_local_layer`]); a query at
    /// position `p` sees the keys at `p - window + 1 ..= p`, as llama.cpp masks them.
    pub sliding_window: Option<usize>,
    /// Of every `swa_pattern` layers, all but the last are local (Gemma 3: 6; gpt-oss: 2; 0:
    /// every layer local).
    pub swa_pattern: usize,
    /// RoPE base of the local layers.
    pub rope_base_local: f64,
    /// Linear RoPE scaling of the local layers (Gemma 3: none; others: the global layers').
    /// YaRN, when the model has it, extends both kinds of layers.
    pub rope_scale_local: f64,
    /// The local layers rotate with a RoPE of their own ([`Config::rope_base_local`],
    /// [`Config::rope_scale_local`]; Gemma 3) rather than the global layers'.
    pub local_rope_differs: bool,
    /// Per query head, a logit that joins every attention softmax (`attn_sinks`, gpt-oss).
    pub attn_sinks: bool,
    /// Final logit soft-capping: `c * tanh(logit / c)`.
    pub final_softcap: Option<f64>,
}

impl Config {
    /// Reads the configuration from the model's metadata; an error for an unknown
    /// architecture (naming it and the known ones), an unsupported feature, or a missing key.
    pub fn from_model(model: &Model) -> Result<Config> {
        let arch = match metadata(model, "general.architecture").and_then(|v| v.as_str()) {
            Some(a) => a.to_string(),
            None => bail!("the GGUF metadata have no 'general.architecture'"),
        };
        if !ARCHITECTURES.contains(&arch.as_str()) {
            bail!(
                "architecture '{arch}' is not supported (known: {})",
                ARCHITECTURES.join(", ")
            );
        }
        let key = |k: &str| format!("{arch}.{k}");
        let n_embd = metadata_usize(model, &key("embedding_length"))?;
        let n_head = metadata_usize(model, &key("attention.head_count"))?;
        let n_kv_head = metadata_usize(model, &key("attention.head_count_kv")).unwrap_or(n_head);
        if n_head == 0 || n_kv_head == 0 || n_head % n_kv_head != 0 {
            bail!("{n_head} query heads cannot share {n_kv_head} key/value heads");
        }
        let head_dim =
            metadata_usize(model, &key("attention.key_length")).unwrap_or(n_embd / n_head);
        let value_dim = metadata_usize(model, &key("attention.value_length")).unwrap_or(head_dim);
        if value_dim != head_dim {
            bail!("keys {head_dim} wide and values {value_dim} wide are not supported");
        }
        let rope_dim = metadata_usize(model, &key("rope.dimension_count")).unwrap_or(head_dim);
        if rope_dim != head_dim {
            bail!("partial RoPE ({rope_dim} of {head_dim} dims) is not supported");
        }
        let vocab_size = match metadata(model, &key("vocab_size")).and_then(|v| v.as_u64()) {
            Some(v) => v as usize,
            None => match model.tensor("token_embd.weight") {
                Some(t) if t.dims.len() == 2 => t.dims[1] as usize,
                _ => bail!("the model has no 2-D 'token_embd.weight'"),
            },
        };
        let rope_base = metadata_f64(model, &key("rope.freq_base")).unwrap_or(10_000.0);
        let n_layer = metadata_usize(model, &key("block_count"))?;
        let moe = moe(model, &arch, n_layer)?;
        let n_ff = match model.tensor("blk.0.ffn_gate.weight") {
            Some(t) if t.dims.len() == 2 => t.dims[1] as usize,
            _ => match metadata_usize(model, &key("feed_forward_length")) {
                Ok(n) => n,
                Err(_) if moe.is_some() => 0,
                Err(e) => return Err(e),
            },
        };
        let (rope_scale, yarn) = rope_scaling(model, &arch)?;
        let mut config = Config {
            n_layer,
            n_embd,
            n_head,
            n_kv_head,
            head_dim,
            rms_eps: metadata_f64(model, &key("attention.layer_norm_rms_epsilon"))?,
            rope_base,
            rope_scale,
            yarn,
            rope_neox: false,
            rope_freq_factors: model.tensor("rope_freqs.weight").is_some(),
            context_length: metadata_usize(model, &key("context_length")).unwrap_or(4096),
            vocab_size,
            n_ff,
            moe,
            gate: Gate::SwiGlu,
            qk_norm: false,
            qk_norm_whole: false,
            post_norms: false,
            embedding_scale: None,
            attention_scale: 1.0 / (head_dim as f64).sqrt(),
            sliding_window: None,
            swa_pattern: GEMMA3_SWA_PATTERN,
            rope_base_local: rope_base,
            rope_scale_local: rope_scale,
            local_rope_differs: false,
            attn_sinks: false,
            final_softcap: None,
            architecture: arch.clone(),
        };
        match arch.as_str() {
            "llama" | "mistral" => {}
            "qwen2" => config.rope_neox = true,
            "qwen3" | "qwen3moe" => {
                config.rope_neox = true;
                config.qk_norm = true;
            }
            "olmoe" => {
                config.rope_neox = true;
                config.qk_norm = true;
                config.qk_norm_whole = true;
            }
            "gemma3" => gemma3(model, &mut config)?,
            "gpt-oss" => gpt_oss(model, &mut config)?,
            _ => unreachable!("checked against ARCHITECTURES"),
        }
        Ok(config)
    }

    /// Whether layer `il` attends through the sliding window: with a window, every layer but
    /// the last of each [`Config::swa_pattern`] (llama.cpp's `set_swa_pattern`).
    pub fn is_local_layer(&self, il: usize) -> bool {
        let p = self.swa_pattern;
        self.sliding_window.is_some() && (p == 0 || il % p < p - 1)
    }

    /// The name (within `blk.N.`) of the RMS norm before the feed-forward layer.
    pub fn ffn_norm_tensor(&self) -> &'static str {
        if self.architecture == "gpt-oss" {
            "post_attention_norm"
        } else {
            "ffn_norm"
        }
    }
}

/// Layer `il`'s router, when it has one.
pub(crate) fn router_name(il: usize) -> String {
    format!("blk.{il}.ffn_gate_inp.weight")
}

/// The mixture of experts of a model with routers: the architectures that always have them
/// (an error when the metadata do not say how many experts), and any other file whose layers
/// have a router (Mixtral's `llama` files); `None` for a dense model.
fn moe(model: &Model, arch: &str, n_layer: usize) -> Result<Option<MoeConfig>> {
    let always = matches!(arch, "qwen3moe" | "olmoe" | "gpt-oss");
    let Some(first) = (0..n_layer).find(|&il| model.tensor(&router_name(il)).is_some()) else {
        if always {
            bail!(
                "a '{arch}' model needs routers ('blk.N.ffn_gate_inp.weight'); the file has none"
            );
        }
        return Ok(None);
    };
    let key = |k: &str| format!("{arch}.{k}");
    let n_expert = metadata_usize(model, &key("expert_count"))?;
    let n_expert_used = metadata_usize(model, &key("expert_used_count"))?;
    if n_expert == 0 || n_expert_used == 0 || n_expert_used > n_expert {
        bail!("{n_expert_used} experts used of {n_expert} is not a mixture of experts");
    }
    // the width from the tensors, as for the dense layers; else from the metadata
    let tensor = |name: String| model.tensor(&name);
    let n_ff_expert = match tensor(format!("blk.{first}.ffn_gate_exps.weight"))
        .or_else(|| tensor(format!("blk.{first}.ffn_gate.0.weight")))
    {
        Some(t) if t.dims.len() >= 2 => t.dims[1] as usize,
        _ => metadata_usize(model, &key("expert_feed_forward_length"))
            .or_else(|_| metadata_usize(model, &key("feed_forward_length")))?,
    };
    // llama.cpp renormalizes for qwen3moe and llama (Mixtral) whatever the file says, and
    // never for olmoe and gpt-oss; a scale of 0 means none
    let weights_scale = metadata_f64(model, &key("expert_weights_scale"))
        .ok()
        .filter(|&s| s != 0.0)
        .unwrap_or(1.0);
    Ok(Some(MoeConfig {
        n_expert,
        n_expert_used,
        n_ff_expert,
        norm_weights: !matches!(arch, "olmoe" | "gpt-oss"),
        weights_scale,
        gating: if arch == "gpt-oss" {
            Gating::SoftmaxOfChosen
        } else {
            Gating::Softmax
        },
    }))
}

/// The RoPE scaling: the linear factor that divides the frequencies, or YaRN (with a linear
/// factor of 1); an error for the scalings the decoder does not implement (LongRoPE).
fn rope_scaling(model: &Model, arch: &str) -> Result<(f64, Option<Yarn>)> {
    let key = |k: &str| format!("{arch}.{k}");
    let kind = metadata(model, &key("rope.scaling.type")).and_then(|v| v.as_str());
    match kind {
        None | Some("none") | Some("linear") | Some("yarn") => {}
        Some(other) => {
            bail!("RoPE scaling '{other}' is not supported (none, linear and yarn are)")
        }
    }
    if kind == Some("none") {
        return Ok((1.0, None));
    }
    // llama.cpp reads `rope.scaling.factor`, then the older `rope.scale_linear`
    let factor = metadata_f64(model, &key("rope.scaling.factor"))
        .or_else(|_| metadata_f64(model, &key("rope.scale_linear")))
        .unwrap_or(1.0);
    let factor = if factor > 0.0 { factor } else { 1.0 };
    if kind != Some("yarn") {
        return Ok((factor, None));
    }
    let original = match metadata(model, &key("rope.scaling.original_context_length")) {
        Some(_) => metadata_usize(model, &key("rope.scaling.original_context_length"))?,
        None => metadata_usize(model, &key("context_length")).unwrap_or(4096),
    };
    if original == 0 {
        bail!("a YaRN original context of 0 positions");
    }
    let attn_factor = metadata_f64(model, &key("rope.scaling.attn_factor")).unwrap_or(1.0);
    Ok((
        1.0,
        Some(Yarn::new(factor as f32, original, attn_factor as f32)),
    ))
}

/// Gemma 3's departures from the Llama block (llama.cpp `llm_build_gemma3`; its converter
/// already stores every RMS norm weight as `1 + w`, so the norms are plain RMS norms here).
fn gemma3(model: &Model, c: &mut Config) -> Result<()> {
    c.rope_neox = true;
    c.gate = Gate::GeGlu;
    c.qk_norm = true;
    c.post_norms = true;
    c.embedding_scale = Some((c.n_embd as f64).sqrt());
    // Gemma's query_pre_attn_scalar: the head width, except for the 27B model (62 layers),
    // where it is n_embd / n_head; llama.cpp decides by the layer count as well.
    c.attention_scale = if c.n_layer == 62 {
        1.0 / ((c.n_embd / c.n_head) as f64).sqrt()
    } else {
        1.0 / (c.head_dim as f64).sqrt()
    };
    let window = metadata_usize(model, "gemma3.attention.sliding_window")?;
    if window == 0 {
        bail!("gemma3.attention.sliding_window is 0");
    }
    c.sliding_window = Some(window);
    c.rope_base_local = GEMMA3_LOCAL_ROPE_BASE;
    c.rope_scale_local = 1.0;
    c.local_rope_differs = true;
    c.final_softcap = metadata_f64(model, "gemma3.final_logit_softcapping")
        .ok()
        .filter(|&s| s > 0.0);
    Ok(())
}

/// gpt-oss's departures from the Llama block (llama.cpp `llama_model_openai_moe`): see the
/// module's documentation. The mixture of experts (gating, no renormalization) is set by
/// [`moe`].
fn gpt_oss(model: &Model, c: &mut Config) -> Result<()> {
    c.rope_neox = true;
    c.gate = Gate::SwiGluOai;
    c.attn_sinks = true;
    let window = metadata_usize(model, "gpt-oss.attention.sliding_window")?;
    if window == 0 {
        bail!("gpt-oss.attention.sliding_window is 0");
    }
    c.sliding_window = Some(window);
    let pattern = "gpt-oss.attention.sliding_window_pattern";
    c.swa_pattern = match metadata(model, pattern) {
        Some(_) => metadata_usize(model, pattern)?,
        None => GPT_OSS_SWA_PATTERN,
    };
    // the local layers may have a base of their own, scaled as the global layers are
    if let Ok(base) = metadata_f64(model, "gpt-oss.rope.freq_base_swa") {
        c.local_rope_differs = base != c.rope_base;
        c.rope_base_local = base;
    }
    Ok(())
}
