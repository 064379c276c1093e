//! A Llama-family decoder (Llama 2/3.x, SmolLM2, Mistral-style; Qwen2 with its q/k/v biases;
//! Qwen3; Gemma 3; the mixtures of experts Qwen3-MoE, OLMoE and Mixtral) that takes and returns
//! candle tensors, with every matrix product in a [`QLinear`](crate::QLinear) (the experts' in a
//! [`QExpertsLinear`](crate::QExpertsLinear)).
//!
//! The model is configured from the GGUF metadata (`<arch>.block_count`, ...; what each
//! architecture changes is in [`crate::config`]), takes token ids,
//! keeps a KV cache, and returns logits. Inside, the forward pass runs on raw f32 buffers
//! allocated once per batch shape (module `decoder`), with the kernels of [`crate::ops`], on
//! one rayon thread pool that the products share.

use std::sync::Arc;
use std::time::Instant;

use candle_core::{bail, Result, Tensor};
use qrepack::gguf::GgufFile;
use qrepack::model::{Checksums, LayoutPolicy, OpenOptions, Stack};
use qrepack::Model;

use crate::build::{check_block, vector, Builder};
use crate::config::router_name;
pub use crate::config::{Config, MoeConfig};
use crate::decoder::{layer_chunk_rows, Block, Dims, Ffn, GateUp, Linear, Qkv, Scratch};
use crate::ops::{self, Heads, KvCache, KvType, Rope, RopeStyle};
use crate::profile::{timed, Phase, PhaseTimes};
use crate::weights::QEmbedding;

/// Which matrix product the model's linear layers use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    /// qrepack ([`QLinear`](crate::QLinear)): repacked weights, the default.
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
    /// fewer, larger products (qrepack backend only). Takes effect when the [`Model`] was
    /// opened with [`stacks_for`]'s stacks ([`Llama::open`] does that), so that each weight
    /// is held once; otherwise the products stay separate.
    pub fuse: bool,
    /// Threads of the model's pool (products, attention and the elementwise kernels all run
    /// on it); `None`: as many as the current rayon pool has (`RAYON_NUM_THREADS`).
    pub threads: Option<usize>,
    /// The number format of the key/value cache: f16 (the default, as llama.cpp's) halves
    /// what a decode step reads from it; f32 keeps the keys and values exactly.
    pub kv_cache: KvType,
    /// Most positions of a sequence one pass runs at once (llama.cpp's `n_ubatch`): a longer
    /// prompt runs as consecutive passes of this many, so the buffers of a pass stay small
    /// (their memory grows with the rows) at no cost in speed.
    pub max_pass_positions: usize,
    /// Rows of one sequence a layer takes at once within a pass (its buffers hold this many
    /// rows; the layer's weights stay in cache from part to part); `None`: chosen from the
    /// model's size (128 rows, more where the buffers are small beside the weights).
    pub layer_rows: Option<usize>,
    /// Pass buffers (the model's and those of its products) that hold more than this many
    /// bytes and over four times what a pass needs are given back to the system before the
    /// pass: after a long prompt, the single-token steps that follow then do not keep the
    /// prompt's buffers. 0: whenever a pass is that much smaller.
    pub release_buffers_above: usize,
}

impl Default for LoadOptions {
    fn default() -> LoadOptions {
        LoadOptions {
            backend: Backend::Qrepack,
            fuse: true,
            threads: None,
            kv_cache: KvType::F16,
            max_pass_positions: 256,
            layer_rows: None,
            release_buffers_above: 1 << 20,
        }
    }
}

/// Name of layer `i`'s stacked q/k/v matrix ([`stacks_for`]).
fn qkv_stack(i: usize) -> String {
    format!("blk.{i}.attn_qkv.stacked")
}

/// Name of layer `i`'s stacked gate/up matrix ([`stacks_for`]).
fn gate_up_stack(i: usize) -> String {
    format!("blk.{i}.ffn_gate_up.stacked")
}

/// The matrices a Llama-family model multiplies as one: each layer's q, k and v, and its gate
/// and up, where the parts share a type and a width. Pass them to
/// [`OpenOptions::stacks`](qrepack::model::OpenOptions::stacks) so that [`Model`] builds each
/// stacked matrix once, in place of its parts; [`Llama::open`] does this.
///
/// ```no_run
/// use std::sync::Arc;
/// use qrepack::gguf::GgufFile;
/// use qrepack::model::OpenOptions;
/// use qrepack::Model;
/// use qrepack_candle::{llama::stacks_for, Llama, LoadOptions};
/// let gguf = GgufFile::open("model.gguf").unwrap();
/// let options = OpenOptions { stacks: stacks_for(&gguf), ..OpenOptions::default() };
/// let model = Model::from_gguf(gguf, &options).unwrap();
/// let llama = Llama::load(Arc::new(model), &LoadOptions::default()).unwrap();
/// # let _ = llama;
/// ```
pub fn stacks_for(gguf: &GgufFile) -> Vec<Stack> {
    let same_shape = |names: &[String]| -> bool {
        let infos: Vec<_> = names.iter().map(|n| gguf.tensor(n)).collect();
        let Some(Some(first)) = infos.first() else {
            return false;
        };
        infos.iter().all(|t| {
            t.is_some_and(|t| {
                t.dims.len() == 2
                    && t.ty.is_some()
                    && t.ty == first.ty
                    && t.dims.first() == first.dims.first()
            })
        })
    };
    let mut stacks = Vec::new();
    for i in 0.. {
        let n = |s: &str| format!("blk.{i}.{s}.weight");
        if gguf.tensor(&n("attn_norm")).is_none() {
            break;
        }
        let qkv = [n("attn_q"), n("attn_k"), n("attn_v")];
        if same_shape(&qkv) {
            stacks.push(Stack::new(qkv_stack(i), qkv));
        }
        let gate_up = [n("ffn_gate"), n("ffn_up")];
        if same_shape(&gate_up) {
            stacks.push(Stack::new(gate_up_stack(i), gate_up));
        }
    }
    stacks
}

/// A Llama-family decoder: candle tensors in and out, its products in [`QLinear`](crate::QLinear) (or
/// candle's `QMatMul`), the rest on preallocated buffers.
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
    dims: Dims,
    embedding: QEmbedding,
    blocks: Vec<Block>,
    output_norm: Vec<f32>,
    output: Linear,
    /// The RoPE of the global layers, then (with a sliding window) that of the local ones.
    ropes: Vec<Rope>,
    scratch: Scratch,
    /// Positions cached, and the batch size they were cached with.
    cached: usize,
    batch: usize,
    /// [`LoadOptions::max_pass_positions`].
    max_pass_positions: usize,
    /// [`LoadOptions::release_buffers_above`].
    release_buffers_above: usize,
    pool: Arc<rayon::ThreadPool>,
    /// Time per phase while profiling.
    profile: Option<PhaseTimes>,
}

impl Llama {
    /// Opens a GGUF file with qrepack (repacking the weights for this CPU, q/k/v and gate/up
    /// stacked) and builds the model.
    pub fn open(path: impl AsRef<std::path::Path>) -> Result<Llama> {
        Llama::open_with(path, &LoadOptions::default())
    }

    /// [`Llama::open`] with options: with fusing on (and the qrepack backend), the model is
    /// opened with [`stacks_for`]'s stacks. A repack cache's matrices check their bytes on
    /// first use ([`Checksums::OnFirstUse`]: a corrupted one fails every product), so the
    /// load does not read the whole cache once more; stacked parts are verified as they load.
    pub fn open_with(path: impl AsRef<std::path::Path>, options: &LoadOptions) -> Result<Llama> {
        let gguf = GgufFile::open(path).map_err(candle_core::Error::wrap)?;
        let open = OpenOptions {
            stacks: if options.fuse && options.backend == Backend::Qrepack {
                stacks_for(&gguf)
            } else {
                Vec::new()
            },
            layout: match options.backend {
                Backend::Qrepack => LayoutPolicy::Best,
                Backend::CandleQMatMul => LayoutPolicy::Plain,
            },
            checksums: Checksums::OnFirstUse,
            ..OpenOptions::default()
        };
        let model = Model::from_gguf(gguf, &open).map_err(candle_core::Error::wrap)?;
        Llama::load(Arc::new(model), options)
    }

    /// Builds the model from an opened qrepack [`Model`].
    pub fn load(model: Arc<Model>, options: &LoadOptions) -> Result<Llama> {
        let config = Config::from_model(&model)?;
        Llama::load_with_config(model, config, options)
    }

    /// [`Llama::load`] with a configuration given instead of read: [`Config::from_model`]'s,
    /// changed (e.g. another gate, to mirror a reference implementation that differs there).
    /// The tensors must still fit it; an error says where they do not.
    pub fn load_with_config(
        model: Arc<Model>,
        config: Config,
        options: &LoadOptions,
    ) -> Result<Llama> {
        let b = Builder {
            model: &model,
            options,
        };
        let mut blocks = Vec::with_capacity(config.n_layer);
        let optional = |on: bool, name: &str| on.then(|| vector(&model, name)).transpose();
        for i in 0..config.n_layer {
            let n = |s: &str| format!("blk.{i}.{s}.weight");
            let local = config.is_local_layer(i);
            let (q, k, v) = (n("attn_q"), n("attn_k"), n("attn_v"));
            let qkv = match b.fused(&qkv_stack(i), &[&q, &k, &v])? {
                Some(l) => Qkv::Fused(l),
                None => Qkv::Split(b.linear(&q)?, b.linear(&k)?, b.linear(&v)?),
            };
            let ffn = match &config.moe {
                Some(moe) if model.tensor(&router_name(i)).is_some() => Ffn::Moe(b.moe(i, moe)?),
                _ => {
                    let (gate, up) = (n("ffn_gate"), n("ffn_up"));
                    let gate_up = match b.fused(&gate_up_stack(i), &[&gate, &up])? {
                        Some(l) => GateUp::Fused(l),
                        None => GateUp::Split(b.linear(&gate)?, b.linear(&up)?),
                    };
                    Ffn::Dense {
                        gate_up,
                        down: b.linear(&n("ffn_down"))?,
                    }
                }
            };
            let block = Block {
                attn_norm: vector(&model, &n("attn_norm"))?,
                qkv,
                q_norm: optional(config.qk_norm, &n("attn_q_norm"))?,
                k_norm: optional(config.qk_norm, &n("attn_k_norm"))?,
                wo: b.linear(&n("attn_output"))?,
                post_attn_norm: optional(config.post_norms, &n("post_attention_norm"))?,
                ffn_norm: vector(&model, &n(config.ffn_norm_tensor()))?,
                ffn,
                post_ffn_norm: optional(config.post_norms, &n("post_ffw_norm"))?,
                window: if local { config.sliding_window } else { None },
                sinks: optional(config.attn_sinks, &n("attn_sinks"))?,
                rope: usize::from(local && config.local_rope_differs),
                caches: Vec::new(),
                empty_cache: KvCache::new(options.kv_cache, config.n_kv_head, config.head_dim),
            };
            check_block(&block, &config, i)?;
            blocks.push(block);
        }
        // a separate output head, or the embedding table (tied)
        let head = if model.tensor("output.weight").is_some() {
            "output.weight"
        } else {
            "token_embd.weight"
        };
        let output_norm = vector(&model, "output_norm.weight")?;
        if output_norm.len() != config.n_embd {
            bail!(
                "output_norm.weight has {} values for a model {} wide",
                output_norm.len(),
                config.n_embd
            );
        }
        let output = b.linear(head)?;
        if output.cols() != config.n_embd {
            bail!(
                "the output head takes {} inputs, not {}",
                output.cols(),
                config.n_embd
            );
        }
        let embedding = QEmbedding::from_shared_model(&model, "token_embd.weight")?;
        if embedding.dim() != config.n_embd {
            bail!(
                "the embedding is {} wide, not {}",
                embedding.dim(),
                config.n_embd
            );
        }
        let threads = options
            .threads
            .unwrap_or_else(rayon::current_num_threads)
            .max(1);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("qrepack-candle-{i}"))
            .build()
            .map_err(candle_core::Error::wrap)?;
        let ropes = ropes(&model, &config)?;
        // everything needed of the metadata has been read: their pages need not stay resident
        model.gguf().release_metadata_pages();
        Ok(Llama {
            dims: Dims {
                n_embd: config.n_embd,
                heads: Heads {
                    n_head: config.n_head,
                    n_kv_head: config.n_kv_head,
                    head_dim: config.head_dim,
                },
                n_ff: config.n_ff,
                eps: config.rms_eps as f32,
                gate: config.gate,
                attn_scale: config.attention_scale as f32,
                chunk_rows: options.layer_rows.unwrap_or_else(|| {
                    layer_chunk_rows(
                        model.gguf().file_size(),
                        layer_row_bytes(&config),
                        options.max_pass_positions,
                    )
                }),
            },
            ropes,
            embedding,
            output_norm,
            output,
            blocks,
            scratch: Scratch::default(),
            cached: 0,
            batch: 1,
            max_pass_positions: options.max_pass_positions,
            release_buffers_above: options.release_buffers_above,
            pool: Arc::new(pool),
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

    /// Threads of the model's pool.
    pub fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }

    /// Positions in the KV cache.
    pub fn cached_len(&self) -> usize {
        self.cached
    }

    /// Bytes the KV cache holds (allocated, for every layer and sequence).
    pub fn cache_bytes(&self) -> usize {
        self.blocks.iter().map(Block::cache_bytes).sum()
    }

    /// Forgets every cached position.
    pub fn clear_cache(&mut self) {
        self.cached = 0;
        let batch = self.batch;
        for b in &mut self.blocks {
            b.reset(batch);
        }
    }

    /// Runs `ids` (`[batch, seq]`, u32 or i64) at positions `pos..pos + seq` (`pos` must equal
    /// [`Llama::cached_len`]) and returns the logits after the last token: `[batch, vocab]`.
    pub fn forward(&mut self, ids: &Tensor, pos: usize) -> Result<Tensor> {
        self.run(ids, pos, false)
    }

    /// [`Llama::forward`] returning the logits after every token: `[batch, seq, vocab]`.
    pub fn forward_all(&mut self, ids: &Tensor, pos: usize) -> Result<Tensor> {
        self.run(ids, pos, true)
    }

    fn run(&mut self, ids: &Tensor, pos: usize, every_position: bool) -> Result<Tensor> {
        let start = Instant::now();
        let (batch, seq) = ids.dims2()?;
        let flat = token_ids(ids)?;
        let pool = Arc::clone(&self.pool);
        self.release_oversized_buffers(batch, seq.min(self.max_pass_positions.max(1)));
        let logits = pool.install(|| self.pass(&flat, batch, seq, pos, every_position))?;
        if let Some(t) = &mut self.profile {
            t.passes += 1;
            t.total += start.elapsed();
        }
        let vocab = self.output.rows();
        if every_position {
            Tensor::from_vec(logits, (batch, seq, vocab), ids.device())
        } else {
            Tensor::from_vec(logits, (batch, vocab), ids.device())
        }
    }

    /// Frees the pass buffers (the model's and those of qrepack's products on every thread
    /// of the pool) when they hold far more than a pass of `batch` sequences of `seq` positions
    /// needs: after a prompt,
    /// the single-token steps that follow would otherwise keep the prompt's buffers resident
    /// for as long as the model generates (5 MB of SmolLM2's 122 MB while generating after a
    /// 512-token prompt). Buffers grow back when a long pass comes again.
    fn release_oversized_buffers(&mut self, batch: usize, seq: usize) {
        let d = &self.dims;
        // one sequence's rows go through the layers in parts, a batch's all at once
        let layer_rows = if batch == 1 {
            seq.min(d.chunk_rows.max(1))
        } else {
            batch * seq
        };
        let needed = layer_rows * layer_row_bytes(&self.config) + batch * seq * d.n_embd * 4;
        if self.scratch.held_bytes() > (4 * needed).max(self.release_buffers_above) {
            self.scratch = Scratch::default();
            self.pool.broadcast(|_| qrepack::release_thread_scratch());
        }
    }

    /// The forward pass of `batch` sequences of `seq` positions from `pos` on the model's
    /// pool, in passes of at most `max_pass_positions` positions; the logits of the last
    /// position of each sequence (or of every position), row after row.
    fn pass(
        &mut self,
        ids: &[u32],
        batch: usize,
        seq: usize,
        pos: usize,
        every_position: bool,
    ) -> Result<Vec<f32>> {
        let step = self.max_pass_positions.max(1);
        if seq <= step {
            return self.pass_part(ids, batch, seq, pos, every_position);
        }
        let vocab = self.output.rows();
        let mut all = if every_position {
            vec![0.0f32; batch * seq * vocab]
        } else {
            Vec::new()
        };
        let mut part_ids = Vec::with_capacity(batch * step);
        let mut start = 0;
        while start < seq {
            let len = step.min(seq - start);
            part_ids.clear();
            for b in 0..batch {
                part_ids.extend_from_slice(&ids[b * seq + start..][..len]);
            }
            let last = start + len == seq;
            let logits = self.pass_part(&part_ids, batch, len, pos + start, every_position)?;
            if every_position {
                // rows [b][start..start + len] of the [batch][seq] result
                for (b, rows) in logits.chunks_exact(len * vocab).enumerate() {
                    all[(b * seq + start) * vocab..][..len * vocab].copy_from_slice(rows);
                }
            } else if last {
                all = logits;
            }
            start += len;
        }
        Ok(all)
    }

    /// One forward pass on the model's pool; the logits of the last position of each sequence
    /// (or of every position), row after row.
    fn pass_part(
        &mut self,
        ids: &[u32],
        batch: usize,
        seq: usize,
        pos: usize,
        every_position: bool,
    ) -> Result<Vec<f32>> {
        if seq == 0 || batch == 0 {
            bail!("forward needs at least one token");
        }
        if pos != self.cached {
            bail!(
                "position {pos} does not follow the {} cached positions (clear_cache to restart)",
                self.cached
            );
        }
        if pos + seq > self.config.context_length {
            bail!(
                "{} positions exceed the context length {}",
                pos + seq,
                self.config.context_length
            );
        }
        if pos == 0 {
            self.batch = batch;
            self.clear_cache();
        } else if batch != self.batch {
            bail!(
                "a batch of {batch} cannot continue the {} cached sequences",
                self.batch
            );
        }
        let d = self.dims;
        let rows = batch * seq;
        let x = self.scratch.residual(rows * d.n_embd);
        for (row, id) in x.chunks_exact_mut(d.n_embd).zip(ids) {
            self.embedding
                .row_into(*id as usize, row)
                .map_err(candle_core::Error::msg)?;
        }
        if let Some(scale) = self.config.embedding_scale {
            let scale = scale as f32;
            x.iter_mut().for_each(|v| *v *= scale);
        }
        timed(&mut self.profile, Phase::Elementwise, || {
            for rope in &mut self.ropes {
                rope.set_positions(pos, seq);
            }
            Ok(())
        })?;
        for block in &mut self.blocks {
            let done = block.forward(
                &mut self.scratch,
                &d,
                &self.ropes[block.rope],
                (batch, seq, pos),
                &mut self.profile,
            );
            if let Err(e) = done {
                // a failed pass leaves the caches of some layers longer than others
                self.cached = 0;
                let b = self.batch;
                self.blocks.iter_mut().for_each(|bl| bl.reset(b));
                return Err(e);
            }
        }
        self.cached += seq;
        // the output head: every row, or the last of each sequence
        let picked: Vec<usize> = if every_position {
            (0..rows).collect()
        } else {
            (0..batch).map(|b| b * seq + seq - 1).collect()
        };
        let n = picked.len();
        let mut normed = vec![0.0f32; n * d.n_embd];
        timed(&mut self.profile, Phase::Elementwise, || {
            let x = self.scratch.residual_rows();
            let mut gathered = vec![0.0f32; n * d.n_embd];
            for (dst, &r) in gathered.chunks_exact_mut(d.n_embd).zip(&picked) {
                dst.copy_from_slice(&x[r * d.n_embd..][..d.n_embd]);
            }
            ops::rms_norm(&gathered, &self.output_norm, d.eps, &mut normed);
            Ok(())
        })?;
        let mut logits = vec![0.0f32; n * self.output.rows()];
        timed(&mut self.profile, Phase::Products, || {
            self.output.forward_into(&normed, n, &mut logits)
        })?;
        if let Some(cap) = self.config.final_softcap {
            let cap = cap as f32;
            logits.iter_mut().for_each(|l| *l = cap * (*l / cap).tanh());
        }
        Ok(logits)
    }
}

/// Bytes of a layer's buffers per row of a pass: the normed input, the projections back to the
/// model width, q/k/v, the attention output and the feed-forward's gate, up and activation.
fn layer_row_bytes(c: &Config) -> usize {
    let q = c.n_head * c.head_dim;
    let kv = c.n_kv_head * c.head_dim;
    4 * (2 * c.n_embd + q + 2 * kv + q + 3 * c.n_ff)
}

/// The model's RoPEs: the global layers' (with the `rope_freqs.weight` divisors, linear
/// scaling or YaRN), then the local layers' when they have one of their own.
fn ropes(model: &Model, c: &Config) -> Result<Vec<Rope>> {
    let style = if c.rope_neox {
        RopeStyle::Halves
    } else {
        RopeStyle::Interleaved
    };
    let half = c.head_dim / 2;
    let mut factors = if c.rope_freq_factors {
        let f = vector(model, "rope_freqs.weight")?;
        if f.len() != half {
            bail!(
                "rope_freqs.weight has {} factors for heads {} wide (want {half})",
                f.len(),
                c.head_dim
            );
        }
        f
    } else {
        vec![1.0; half]
    };
    // linear scaling multiplies each angle by 1 / factor: one more divisor per frequency
    factors.iter_mut().for_each(|f| *f *= c.rope_scale as f32);
    let extend = |rope: Rope, base: f64| match &c.yarn {
        Some(y) => rope.with_yarn(base as f32, y),
        None => rope,
    };
    let global = Rope::new(style, c.head_dim, c.rope_base as f32, Some(&factors));
    let mut ropes = vec![extend(global, c.rope_base)];
    if c.sliding_window.is_some() && c.local_rope_differs {
        let scale = vec![c.rope_scale_local as f32; half];
        let local = Rope::new(style, c.head_dim, c.rope_base_local as f32, Some(&scale));
        ropes.push(extend(local, c.rope_base_local));
    }
    Ok(ropes)
}

/// The token ids of `[batch, seq]` u32 or i64 tensor, row after row.
fn token_ids(ids: &Tensor) -> Result<Vec<u32>> {
    crate::weights::flat_ids(ids)?
        .into_iter()
        .map(|id| {
            u32::try_from(id).map_err(|_| {
                candle_core::Error::msg(format!("token id {id} is negative or too large"))
            })
        })
        .collect()
}
