//! A Llama-family decoder (Llama, SmolLM2, Mistral-style; Qwen2 with its q/k/v biases) on
//! candle operations, with every matrix product in a [`QLinear`].
//!
//! The model is configured from the GGUF metadata (`<arch>.block_count`, ...), takes token ids,
//! keeps a KV cache, and returns logits.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

use candle_core::quantized::{GgmlDType, QMatMul, QStorage, QTensor};
use candle_core::{bail, DType, Device, Module, Result, Tensor, D};
use qrepack::{GgmlType, Model, QMatrix};

use crate::linear::QLinear;
use crate::profile::{timed, Phase, PhaseTimes};
use crate::weights::{ggml_bytes, metadata, metadata_f64, metadata_usize, tensor, QEmbedding};

/// The hyper-parameters of a Llama-family model, read from GGUF metadata.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// `general.architecture` (`llama`, `qwen2`, `mistral`).
    pub architecture: String,
    /// Transformer blocks.
    pub n_layer: usize,
    /// Model width.
    pub n_embd: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads (grouped-query attention when fewer than `n_head`).
    pub n_kv_head: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Epsilon of the RMS norms.
    pub rms_eps: f64,
    /// RoPE base frequency.
    pub rope_base: f64,
    /// RoPE rotates the halves of each head (GPT-NeoX, Qwen2) instead of neighbouring pairs
    /// (Llama, as its GGUF files store q and k).
    pub rope_neox: bool,
    /// Longest sequence (positions) the model supports.
    pub context_length: usize,
    /// Vocabulary size.
    pub vocab_size: usize,
}

impl Config {
    /// Reads the configuration from the model's metadata; an error for an unsupported
    /// architecture or a missing key.
    pub fn from_model(model: &Model) -> Result<Config> {
        let arch = match metadata(model, "general.architecture").and_then(|v| v.as_str()) {
            Some(a) => a.to_string(),
            None => bail!("the GGUF metadata have no 'general.architecture'"),
        };
        let rope_neox = match arch.as_str() {
            "llama" | "mistral" => false,
            "qwen2" => true,
            other => {
                bail!("architecture '{other}' is not supported (llama, mistral and qwen2 are)")
            }
        };
        let key = |k: &str| format!("{arch}.{k}");
        let n_embd = metadata_usize(model, &key("embedding_length"))?;
        let n_head = metadata_usize(model, &key("attention.head_count"))?;
        let n_kv_head = metadata_usize(model, &key("attention.head_count_kv")).unwrap_or(n_head);
        let head_dim =
            metadata_usize(model, &key("attention.key_length")).unwrap_or(n_embd / n_head.max(1));
        let rope_dim = metadata_usize(model, &key("rope.dimension_count")).unwrap_or(head_dim);
        if n_head == 0 || n_kv_head == 0 || n_head % n_kv_head != 0 {
            bail!("{n_head} query heads cannot share {n_kv_head} key/value heads");
        }
        if rope_dim != head_dim {
            bail!("partial RoPE ({rope_dim} of {head_dim} dims) is not supported");
        }
        if model.tensor("rope_freqs.weight").is_some() {
            bail!(
                "RoPE frequency factors (rope_freqs.weight, Llama 3.1 scaling) are not supported"
            );
        }
        let vocab_size = match metadata(model, &key("vocab_size")).and_then(|v| v.as_u64()) {
            Some(v) => v as usize,
            None => match model.tensor("token_embd.weight") {
                Some(t) if t.dims.len() == 2 => t.dims[1] as usize,
                _ => bail!("the model has no 2-D 'token_embd.weight'"),
            },
        };
        Ok(Config {
            n_layer: metadata_usize(model, &key("block_count"))?,
            n_embd,
            n_head,
            n_kv_head,
            head_dim,
            rms_eps: metadata_f64(model, &key("attention.layer_norm_rms_epsilon"))?,
            rope_base: metadata_f64(model, &key("rope.freq_base")).unwrap_or(10_000.0),
            rope_neox,
            context_length: metadata_usize(model, &key("context_length")).unwrap_or(4096),
            vocab_size,
            architecture: arch,
        })
    }
}

/// Which matrix product the model's linear layers use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    /// qrepack ([`QLinear`]): repacked weights, the default.
    #[default]
    Qrepack,
    /// candle-core's own `QMatMul` on the same ggml bytes (for comparisons).
    CandleQMatMul,
}

/// How [`Llama::load`] builds the model.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// The matrix product.
    pub backend: Backend,
    /// Multiply q, k, v (and gate, up) as one matrix where their types and widths agree:
    /// fewer, larger products. Costs a copy of those weights (qrepack backend only).
    pub fuse: bool,
}

impl Default for LoadOptions {
    fn default() -> LoadOptions {
        LoadOptions {
            backend: Backend::Qrepack,
            fuse: true,
        }
    }
}

/// The GGUF type as candle's, for [`Backend::CandleQMatMul`].
fn candle_dtype(ty: GgmlType) -> Result<GgmlDType> {
    Ok(match ty {
        GgmlType::F32 => GgmlDType::F32,
        GgmlType::F16 => GgmlDType::F16,
        GgmlType::BF16 => GgmlDType::BF16,
        GgmlType::Q4_0 => GgmlDType::Q4_0,
        GgmlType::Q4_1 => GgmlDType::Q4_1,
        GgmlType::Q5_0 => GgmlDType::Q5_0,
        GgmlType::Q5_1 => GgmlDType::Q5_1,
        GgmlType::Q8_0 => GgmlDType::Q8_0,
        GgmlType::Q8_1 => GgmlDType::Q8_1,
        GgmlType::Q2_K => GgmlDType::Q2K,
        GgmlType::Q3_K => GgmlDType::Q3K,
        GgmlType::Q4_K => GgmlDType::Q4K,
        GgmlType::Q5_K => GgmlDType::Q5K,
        GgmlType::Q6_K => GgmlDType::Q6K,
        GgmlType::Q8_K => GgmlDType::Q8K,
        other => bail!("candle-core has no {other} quantized type"),
    })
}

/// A matrix product without bias, by either backend.
#[derive(Clone, Debug)]
enum Weight {
    Qrepack(QLinear),
    Candle(QMatMul),
}

/// A linear layer: weight and optional bias.
#[derive(Clone, Debug)]
struct Linear {
    weight: Weight,
    bias: Option<Tensor>,
}

impl Module for Linear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = match &self.weight {
            Weight::Qrepack(l) => l.forward(x)?,
            Weight::Candle(m) => m.forward(x)?,
        };
        match &self.bias {
            Some(b) => y.broadcast_add(b),
            None => Ok(y),
        }
    }
}

/// Builds the linear layers of one model.
struct Builder<'a> {
    model: &'a Arc<Model>,
    options: &'a LoadOptions,
    device: &'a Device,
}

impl Builder<'_> {
    fn bias(&self, weight: &str) -> Result<Option<Tensor>> {
        let name = match weight.strip_suffix(".weight") {
            Some(stem) => format!("{stem}.bias"),
            None => return Ok(None),
        };
        crate::weights::tensor_opt(self.model, &name, self.device)
    }

    fn weight(&self, name: &str) -> Result<Weight> {
        Ok(match self.options.backend {
            Backend::Qrepack => Weight::Qrepack(QLinear::from_model(self.model, name)?),
            Backend::CandleQMatMul => {
                let (bytes, ty, dims) = ggml_bytes(self.model, name)?;
                let [cols, rows] = dims[..] else {
                    bail!("'{name}' is not a matrix: dims {dims:?}");
                };
                let storage =
                    QStorage::from_data(Cow::Owned(bytes), self.device, candle_dtype(ty)?)?;
                Weight::Candle(QMatMul::from_qtensor(QTensor::new(storage, (rows, cols))?)?)
            }
        })
    }

    fn linear(&self, name: &str) -> Result<Linear> {
        Ok(Linear {
            weight: self.weight(name)?,
            bias: self.bias(name)?,
        })
    }

    /// One linear layer computing the layers `names` side by side (outputs concatenated), when
    /// fusing is on and their types and widths agree; else `None`.
    fn fused(&self, names: &[&str]) -> Result<Option<Linear>> {
        if !self.options.fuse || self.options.backend != Backend::Qrepack {
            return Ok(None);
        }
        let mut matrices = Vec::new();
        for name in names {
            match self.model.matrix(name) {
                Some(m) => matrices.push(m),
                None => return Ok(None),
            }
        }
        let first = matrices[0];
        if matrices
            .iter()
            .any(|m| m.ty() != first.ty() || m.cols() != first.cols())
        {
            return Ok(None);
        }
        let rows: usize = matrices.iter().map(|m| m.rows()).sum();
        let bytes: Vec<u8> = matrices.iter().flat_map(|m| m.to_ggml_bytes()).collect();
        let matrix = QMatrix::new(first.ty(), rows, first.cols(), &bytes)
            .map_err(candle_core::Error::wrap)?;
        let mut biases = Vec::new();
        for name in names {
            biases.push(self.bias(name)?);
        }
        let bias = if biases.iter().any(Option::is_some) {
            let parts = biases
                .into_iter()
                .zip(&matrices)
                .map(|(b, m)| match b {
                    Some(b) => Ok(b),
                    None => Tensor::zeros(m.rows(), DType::F32, self.device),
                })
                .collect::<Result<Vec<_>>>()?;
            Some(Tensor::cat(&parts, 0)?)
        } else {
            None
        };
        Ok(Some(Linear {
            weight: Weight::Qrepack(QLinear::new(matrix)),
            bias,
        }))
    }
}

/// q, k, v as one product or three.
#[derive(Clone, Debug)]
enum Qkv {
    Fused(Linear),
    Split(Linear, Linear, Linear),
}

/// gate and up as one product or two.
#[derive(Clone, Debug)]
enum GateUp {
    Fused(Linear),
    Split(Linear, Linear),
}

/// The keys and values of the positions seen so far, in tensors that grow by doubling.
#[derive(Clone, Debug, Default)]
struct KvCache {
    /// `[batch, n_kv_head, capacity, head_dim]` each.
    kv: Option<(Tensor, Tensor)>,
    len: usize,
}

impl KvCache {
    /// Appends `k`, `v` (`[batch, n_kv_head, seq, head_dim]`, contiguous) and returns the keys
    /// and values of every position so far.
    fn append(&mut self, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let (b, h, seq, d) = k.dims4()?;
        let need = self.len + seq;
        let capacity = self.kv.as_ref().map_or(0, |(k, _)| k.dim(2).unwrap_or(0));
        if need > capacity {
            let new_cap = need.max(2 * capacity).max(256);
            let grown_k = Tensor::zeros((b, h, new_cap, d), k.dtype(), k.device())?;
            let grown_v = Tensor::zeros((b, h, new_cap, d), v.dtype(), v.device())?;
            if let Some((old_k, old_v)) = &self.kv {
                grown_k.slice_set(&old_k.narrow(2, 0, self.len)?.contiguous()?, 2, 0)?;
                grown_v.slice_set(&old_v.narrow(2, 0, self.len)?.contiguous()?, 2, 0)?;
            }
            self.kv = Some((grown_k, grown_v));
        }
        let Some((ck, cv)) = &self.kv else {
            bail!("internal: the KV cache was not allocated");
        };
        ck.slice_set(k, 2, self.len)?;
        cv.slice_set(v, 2, self.len)?;
        self.len = need;
        Ok((ck.narrow(2, 0, need)?, cv.narrow(2, 0, need)?))
    }
}

#[derive(Clone, Debug)]
struct Block {
    attn_norm: Tensor,
    qkv: Qkv,
    wo: Linear,
    ffn_norm: Tensor,
    gate_up: GateUp,
    down: Linear,
    cache: KvCache,
}

/// A Llama-family decoder on candle, its products in [`QLinear`] (or candle's `QMatMul`).
///
/// ```no_run
/// use candle_core::{Device, Tensor};
/// use qrepack_candle::Llama;
/// let mut llama = Llama::open("SmolLM2-135M-Instruct.Q4_0.gguf").unwrap();
/// let ids = Tensor::new(&[[1u32, 504, 3575]], &Device::Cpu).unwrap();
/// let logits = llama.forward(&ids, 0).unwrap(); // [1, vocab]: the next token after 3575
/// # let _ = logits;
/// ```
#[derive(Clone, Debug)]
pub struct Llama {
    config: Config,
    embedding: QEmbedding,
    blocks: Vec<Block>,
    output_norm: Tensor,
    output: Linear,
    /// `[context_length, head_dim / 2]` each.
    cos: Tensor,
    sin: Tensor,
    device: Device,
    /// Time per phase while profiling.
    profile: Option<PhaseTimes>,
}

impl Llama {
    /// Opens a GGUF file with qrepack (repacking the weights for this CPU) and builds the model.
    pub fn open(path: impl AsRef<std::path::Path>) -> Result<Llama> {
        let model = Model::open(path).map_err(candle_core::Error::wrap)?;
        Llama::load(Arc::new(model), &LoadOptions::default())
    }

    /// Builds the model from an opened qrepack [`Model`].
    pub fn load(model: Arc<Model>, options: &LoadOptions) -> Result<Llama> {
        let device = Device::Cpu;
        let config = Config::from_model(&model)?;
        let b = Builder {
            model: &model,
            options,
            device: &device,
        };
        let mut blocks = Vec::with_capacity(config.n_layer);
        for i in 0..config.n_layer {
            let n = |s: &str| format!("blk.{i}.{s}.weight");
            let (q, k, v) = (n("attn_q"), n("attn_k"), n("attn_v"));
            let qkv = match b.fused(&[&q, &k, &v])? {
                Some(l) => Qkv::Fused(l),
                None => Qkv::Split(b.linear(&q)?, b.linear(&k)?, b.linear(&v)?),
            };
            let (gate, up) = (n("ffn_gate"), n("ffn_up"));
            let gate_up = match b.fused(&[&gate, &up])? {
                Some(l) => GateUp::Fused(l),
                None => GateUp::Split(b.linear(&gate)?, b.linear(&up)?),
            };
            blocks.push(Block {
                attn_norm: tensor(&model, &n("attn_norm"), &device)?,
                qkv,
                wo: b.linear(&n("attn_output"))?,
                ffn_norm: tensor(&model, &n("ffn_norm"), &device)?,
                gate_up,
                down: b.linear(&n("ffn_down"))?,
                cache: KvCache::default(),
            });
        }
        // a separate output head, or the embedding table (tied)
        let head = if model.tensor("output.weight").is_some() {
            "output.weight"
        } else {
            "token_embd.weight"
        };
        let (cos, sin) = rope_tables(&config, &device)?;
        Ok(Llama {
            embedding: QEmbedding::from_model(&model, "token_embd.weight")?,
            output_norm: tensor(&model, "output_norm.weight", &device)?,
            output: b.linear(head)?,
            blocks,
            cos,
            sin,
            device,
            config,
            profile: None,
        })
    }

    /// Turns the per-phase timing of forward passes on or off (off by default; on, each group
    /// of operations is timed, which costs a clock read per group).
    pub fn set_profiling(&mut self, on: bool) {
        self.profile = on.then(PhaseTimes::default);
    }

    /// The phase times summed since profiling was turned on or last taken, and a fresh start;
    /// `None` when profiling is off.
    pub fn take_profile(&mut self) -> Option<PhaseTimes> {
        let t = self.profile?;
        self.profile = Some(PhaseTimes::default());
        Some(t)
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Positions in the KV cache.
    pub fn cached_len(&self) -> usize {
        self.blocks.first().map_or(0, |b| b.cache.len)
    }

    /// Forgets every cached position.
    pub fn clear_cache(&mut self) {
        for b in &mut self.blocks {
            b.cache = KvCache::default();
        }
    }

    /// Runs `ids` (`[batch, seq]`, u32) at positions `pos..pos + seq` (`pos` must equal
    /// [`Llama::cached_len`]) and returns the logits after the last token: `[batch, vocab]`.
    pub fn forward(&mut self, ids: &Tensor, pos: usize) -> Result<Tensor> {
        let start = Instant::now();
        let h = self.hidden(ids, pos)?;
        let seq = h.dim(1)?;
        let last = h.narrow(1, seq - 1, 1)?;
        let out = self.head(&last)?.squeeze(1);
        self.count_pass(start);
        out
    }

    /// [`Llama::forward`] returning the logits after every token: `[batch, seq, vocab]`.
    pub fn forward_all(&mut self, ids: &Tensor, pos: usize) -> Result<Tensor> {
        let start = Instant::now();
        let h = self.hidden(ids, pos)?;
        let out = self.head(&h);
        self.count_pass(start);
        out
    }

    fn count_pass(&mut self, start: Instant) {
        if let Some(t) = &mut self.profile {
            t.passes += 1;
            t.total += start.elapsed();
        }
    }

    fn head(&mut self, h: &Tensor) -> Result<Tensor> {
        let eps = self.config.rms_eps as f32;
        let h = timed(&mut self.profile, Phase::Elementwise, || {
            candle_nn::ops::rms_norm(h, &self.output_norm, eps)
        })?;
        timed(&mut self.profile, Phase::Products, || {
            self.output.forward(&h)
        })
    }

    fn hidden(&mut self, ids: &Tensor, pos: usize) -> Result<Tensor> {
        let (_, seq) = ids.dims2()?;
        if seq == 0 {
            bail!("forward needs at least one token");
        }
        if pos != self.cached_len() {
            bail!(
                "position {pos} does not follow the {} cached positions (clear_cache to restart)",
                self.cached_len()
            );
        }
        if pos + seq > self.config.context_length {
            bail!(
                "{} positions exceed the context length {}",
                pos + seq,
                self.config.context_length
            );
        }
        let cos = self.cos.narrow(0, pos, seq)?;
        let sin = self.sin.narrow(0, pos, seq)?;
        let mask = if seq > 1 {
            Some(causal_mask(seq, pos, &self.device)?)
        } else {
            None
        };
        let mut x = self.embedding.forward(ids)?;
        let cfg = &self.config;
        let prof = &mut self.profile;
        let eps = cfg.rms_eps as f32;
        for block in &mut self.blocks {
            let h = timed(prof, Phase::Elementwise, || {
                candle_nn::ops::rms_norm(&x, &block.attn_norm, eps)
            })?;
            let a = block.attention(&h, cfg, &cos, &sin, mask.as_ref(), prof)?;
            x = timed(prof, Phase::Elementwise, || x + a)?;
            let h = timed(prof, Phase::Elementwise, || {
                candle_nn::ops::rms_norm(&x, &block.ffn_norm, eps)
            })?;
            let f = block.mlp(&h, prof)?;
            x = timed(prof, Phase::Elementwise, || x + f)?;
        }
        Ok(x)
    }
}

/// `cos` and `sin` of every position and frequency: `[context_length, head_dim / 2]` each.
fn rope_tables(cfg: &Config, device: &Device) -> Result<(Tensor, Tensor)> {
    let half = cfg.head_dim / 2;
    // theta_i = base^(-2i / head_dim), computed in f32 like llama.cpp and candle-transformers
    let base = cfg.rope_base as f32;
    let inv_freq: Vec<f32> = (0..half)
        .map(|i| 1.0 / base.powf((2 * i) as f32 / cfg.head_dim as f32))
        .collect();
    let inv_freq = Tensor::from_vec(inv_freq, (1, half), device)?;
    let positions = Tensor::arange(0u32, cfg.context_length as u32, device)?
        .to_dtype(DType::F32)?
        .reshape((cfg.context_length, 1))?;
    let angles = positions.broadcast_mul(&inv_freq)?;
    Ok((angles.cos()?, angles.sin()?))
}

/// Additive mask `[seq, pos + seq]`: 0 where token `i` (at position `pos + i`) may attend to
/// position `j`, minus infinity after it.
fn causal_mask(seq: usize, pos: usize, device: &Device) -> Result<Tensor> {
    let kv = pos + seq;
    let mask: Vec<f32> = (0..seq)
        .flat_map(|i| (0..kv).map(move |j| if j > pos + i { f32::NEG_INFINITY } else { 0.0 }))
        .collect();
    Tensor::from_vec(mask, (seq, kv), device)
}

impl Block {
    fn attention(
        &mut self,
        x: &Tensor,
        cfg: &Config,
        cos: &Tensor,
        sin: &Tensor,
        mask: Option<&Tensor>,
        prof: &mut Option<PhaseTimes>,
    ) -> Result<Tensor> {
        let (b, seq, _) = x.dims3()?;
        let (hd, nh, nkv) = (cfg.head_dim, cfg.n_head, cfg.n_kv_head);
        let (q, k, v) = timed(prof, Phase::Products, || match &self.qkv {
            Qkv::Fused(l) => {
                let qkv = l.forward(x)?;
                Ok((
                    qkv.narrow(D::Minus1, 0, nh * hd)?,
                    qkv.narrow(D::Minus1, nh * hd, nkv * hd)?,
                    qkv.narrow(D::Minus1, (nh + nkv) * hd, nkv * hd)?,
                ))
            }
            Qkv::Split(q, k, v) => Ok((q.forward(x)?, k.forward(x)?, v.forward(x)?)),
        })?;
        // [b, seq, heads * hd] -> [b, heads, seq, hd]
        let heads = |t: Tensor, n: usize| -> Result<Tensor> {
            t.reshape((b, seq, n, hd))?.transpose(1, 2)?.contiguous()
        };
        let rope = |t: &Tensor| -> Result<Tensor> {
            if cfg.rope_neox {
                candle_nn::rotary_emb::rope(t, cos, sin)
            } else {
                candle_nn::rotary_emb::rope_i(t, cos, sin)
            }
        };
        let (q, k, v) = timed(prof, Phase::Elementwise, || {
            let q = (rope(&heads(q, nh)?)? * (1.0 / (hd as f64).sqrt()))?;
            Ok((q, rope(&heads(k, nkv)?)?, heads(v, nkv)?))
        })?;
        let y = timed(prof, Phase::Attention, || {
            let (k, v) = self.cache.append(&k, &v)?;
            let kv_len = k.dim(2)?;
            // Grouped-query attention without copying k and v: the query heads that share a
            // key/value head are consecutive, so they are stacked into one matrix per kv head.
            let group = nh / nkv;
            let q = q.reshape((b, nkv, group * seq, hd))?;
            let scores = q.matmul(&k.t()?)?;
            let scores = match mask {
                Some(m) => scores
                    .reshape((b, nkv, group, seq, kv_len))?
                    .broadcast_add(m)?
                    .reshape((b, nkv, group * seq, kv_len))?,
                None => scores,
            };
            let p = candle_nn::ops::softmax_last_dim(&scores)?;
            let y = p.matmul(&v)?; // [b, nkv, group * seq, hd]
            y.reshape((b, nh, seq, hd))?
                .transpose(1, 2)?
                .reshape((b, seq, nh * hd))
        })?;
        timed(prof, Phase::Products, || self.wo.forward(&y))
    }

    fn mlp(&self, x: &Tensor, prof: &mut Option<PhaseTimes>) -> Result<Tensor> {
        let (gate, up) = timed(prof, Phase::Products, || match &self.gate_up {
            GateUp::Fused(l) => {
                let gu = l.forward(x)?;
                let ff = gu.dim(D::Minus1)? / 2;
                Ok((gu.narrow(D::Minus1, 0, ff)?, gu.narrow(D::Minus1, ff, ff)?))
            }
            GateUp::Split(g, u) => Ok((g.forward(x)?, u.forward(x)?)),
        })?;
        let act = timed(prof, Phase::Elementwise, || gate.silu()? * up)?;
        timed(prof, Phase::Products, || self.down.forward(&act))
    }
}
