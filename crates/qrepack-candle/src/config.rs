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

use candle_core::{bail, Result};
use qrepack::Model;

use crate::ops::Gate;
use crate::weights::{metadata, metadata_f64, metadata_usize};

/// The architectures [`Config::from_model`] accepts (`general.architecture`).
pub const ARCHITECTURES: &[&str] = &[
    "llama", "mistral", "qwen2", "qwen3", "qwen3moe", "olmoe", "gemma3",
];

/// Gemma 3's layer pattern: every sixth layer attends globally, the others through the sliding
/// window (llama.cpp's `set_swa_pattern(6)`: layer `il` is local when `il % 6 < 5`).
const GEMMA3_SWA_PATTERN: usize = 6;

/// RoPE base of Gemma 3's sliding-window layers (fixed by the model, not in the metadata).
const GEMMA3_LOCAL_ROPE_BASE: f64 = 10_000.0;

/// The mixture-of-experts feed-forward layers (llama.cpp `build_moe_ffn` with softmax gating):
/// per row, the router's logits `ffn_gate_inp x` over the experts, their softmax, the
/// `n_expert_used` largest, and the sum of those experts' SwiGLU outputs
/// `down_e(silu(gate_e x) * up_e x)` weighted by their probabilities (renormalized to sum 1
/// when [`MoeConfig::norm_weights`], then times [`MoeConfig::weights_scale`]).
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
    /// `rope.scaling.factor`; 1 for none).
    pub rope_scale: f64,
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
    /// local layers are Gemma 3's: all but every sixth ([`Config::is_local_layer`]); a query at
    /// position `p` sees the keys at `p - window + 1 ..= p`, as llama.cpp masks them.
    pub sliding_window: Option<usize>,
    /// RoPE base of the local layers.
    pub rope_base_local: f64,
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
        let mut config = Config {
            n_layer,
            n_embd,
            n_head,
            n_kv_head,
            head_dim,
            rms_eps: metadata_f64(model, &key("attention.layer_norm_rms_epsilon"))?,
            rope_base,
            rope_scale: rope_scale(model, &arch)?,
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
            rope_base_local: rope_base,
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
            _ => unreachable!("checked against ARCHITECTURES"),
        }
        Ok(config)
    }

    /// Whether layer `il` attends through the sliding window (with the local RoPE base): with a
    /// window, every layer but each sixth (`(il + 1) % 6 == 0` is global), Gemma 3's pattern.
    pub fn is_local_layer(&self, il: usize) -> bool {
        self.sliding_window.is_some() && il % GEMMA3_SWA_PATTERN < GEMMA3_SWA_PATTERN - 1
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
    let always = matches!(arch, "qwen3moe" | "olmoe");
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
    // never for olmoe; a scale of 0 means none
    let weights_scale = metadata_f64(model, &key("expert_weights_scale"))
        .ok()
        .filter(|&s| s != 0.0)
        .unwrap_or(1.0);
    Ok(Some(MoeConfig {
        n_expert,
        n_expert_used,
        n_ff_expert,
        norm_weights: arch != "olmoe",
        weights_scale,
    }))
}

/// Linear RoPE scaling: the factor that divides the frequencies; an error for the scalings the
/// decoder does not implement (YaRN, LongRoPE).
fn rope_scale(model: &Model, arch: &str) -> Result<f64> {
    let kind = metadata(model, &format!("{arch}.rope.scaling.type")).and_then(|v| v.as_str());
    match kind {
        None | Some("none") | Some("linear") => {}
        Some(other) => bail!("RoPE scaling '{other}' is not supported (none and linear are)"),
    }
    if kind == Some("none") {
        return Ok(1.0);
    }
    // llama.cpp reads `rope.scaling.factor`, then the older `rope.scale_linear`
    let factor = metadata_f64(model, &format!("{arch}.rope.scaling.factor"))
        .or_else(|_| metadata_f64(model, &format!("{arch}.rope.scale_linear")))
        .unwrap_or(1.0);
    Ok(if factor > 0.0 { factor } else { 1.0 })
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
    c.final_softcap = metadata_f64(model, "gemma3.final_logit_softcapping")
        .ok()
        .filter(|&s| s > 0.0);
    Ok(())
}
