//! The forward pass of a Llama-family decoder on raw f32 buffers: the layers' weights, the
//! key/value cache and the scratch buffers of one batch size, reused from pass to pass.
//!
//! One block serves every architecture of [`crate::config`]: the Llama block, with the
//! optional pieces of Qwen3 and Gemma 3 (norms of the q and k heads, norms after the attention
//! and feed-forward outputs, a sliding window, a RoPE of the layer's own) present or absent,
//! and a dense feed-forward layer or a mixture of experts ([`crate::moe`]).
//!
//! Every operation writes into a buffer that was sized once for the batch: the products
//! through [`QMatrix::matmul`](qrepack::QMatrix::matmul) straight into their output rows, the
//! elementwise kernels and the attention of [`crate::ops`] in place or into the next buffer,
//! and the keys and values appended to the cache without a copy of what it holds.

use candle_core::quantized::QMatMul;
use candle_core::{bail, Device, Module, Result, Tensor};

use qrepack::PageBuffer;

use crate::linear::QLinear;
use crate::moe::{MoeFfn, MoeScratch};
use crate::ops::{self, Attention, Gate, Heads, KvCache, Rope, Rows};
use crate::profile::{timed, Phase, PhaseTimes};

/// A matrix product without bias, by either backend.
#[derive(Clone, Debug)]
pub(crate) enum Weight {
    Qrepack(QLinear),
    Candle {
        matmul: QMatMul,
        rows: usize,
        cols: usize,
    },
}

/// A linear layer: weight and optional bias.
#[derive(Clone, Debug)]
pub(crate) struct Linear {
    pub weight: Weight,
    pub bias: Option<Vec<f32>>,
}

impl Linear {
    pub fn rows(&self) -> usize {
        match &self.weight {
            Weight::Qrepack(l) => l.rows(),
            Weight::Candle { rows, .. } => *rows,
        }
    }

    pub fn cols(&self) -> usize {
        match &self.weight {
            Weight::Qrepack(l) => l.cols(),
            Weight::Candle { cols, .. } => *cols,
        }
    }

    /// `y = x W^T + b` for `n` rows of `x`, into `y` (`n` rows of [`Linear::rows`]).
    pub fn forward_into(&self, x: &[f32], n: usize, y: &mut [f32]) -> Result<()> {
        match &self.weight {
            Weight::Qrepack(l) => l
                .matrix()
                .matmul(x, n, y)
                .map_err(candle_core::Error::wrap)?,
            Weight::Candle { matmul, cols, .. } => {
                let t = Tensor::from_slice(x, (n, *cols), &Device::Cpu)?;
                let out = matmul.forward(&t)?.flatten_all()?.to_vec1::<f32>()?;
                if out.len() != y.len() {
                    bail!("candle's product gave {} values for {}", out.len(), y.len());
                }
                y.copy_from_slice(&out);
            }
        }
        if let Some(b) = &self.bias {
            ops::add_bias(y, b);
        }
        Ok(())
    }
}

/// q, k, v as one product (outputs side by side) or three.
#[derive(Clone, Debug)]
pub(crate) enum Qkv {
    Fused(Linear),
    Split(Linear, Linear, Linear),
}

/// gate and up as one product (gate first) or two.
#[derive(Clone, Debug)]
pub(crate) enum GateUp {
    Fused(Linear),
    Split(Linear, Linear),
}

/// The feed-forward layer of a block.
#[derive(Clone, Debug)]
pub(crate) enum Ffn {
    /// `down(act(gate x) * up x)`.
    Dense { gate_up: GateUp, down: Linear },
    /// A mixture of experts.
    Moe(MoeFfn),
}

/// One transformer block.
#[derive(Clone, Debug)]
pub(crate) struct Block {
    pub attn_norm: Vec<f32>,
    pub qkv: Qkv,
    /// RMS norm weights of each q head and each k head, applied before RoPE (Qwen3, Gemma 3),
    /// or of the whole of q and of k when as wide as those (OLMoE).
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
    pub wo: Linear,
    /// RMS norm of the attention output before its residual add (Gemma 3).
    pub post_attn_norm: Option<Vec<f32>>,
    pub ffn_norm: Vec<f32>,
    pub ffn: Ffn,
    /// RMS norm of the feed-forward output before its residual add (Gemma 3).
    pub post_ffn_norm: Option<Vec<f32>>,
    /// Sliding attention window of this layer (`None`: every earlier position).
    pub window: Option<usize>,
    /// Per query head, the logit of the attention sink (gpt-oss).
    pub sinks: Option<Vec<f32>>,
    /// Which of the model's RoPEs rotates this layer's q and k (Gemma 3's local layers have a
    /// base frequency of their own).
    pub rope: usize,
    /// One cache per sequence of the batch.
    pub caches: Vec<KvCache>,
    /// An empty cache of this layer's shape and number format, copied for each sequence.
    pub empty_cache: KvCache,
}

/// Fewest rows of one sequence a layer takes at once.
const MIN_LAYER_CHUNK_ROWS: usize = 128;

/// Rows of a pass the feed-forward layer takes at once (several sequences' rows go through the
/// rest of a layer together).
const FFN_CHUNK_ROWS: usize = 64;

/// What the decoder needs of the configuration.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Dims {
    pub n_embd: usize,
    pub heads: Heads,
    /// Width of the dense feed-forward layers.
    pub n_ff: usize,
    pub eps: f32,
    pub gate: Gate,
    /// Factor on the attention scores (`1 / sqrt(head_dim)` unless the model says otherwise).
    pub attn_scale: f32,
    /// Rows of one sequence a layer takes at once ([`layer_chunk_rows`]).
    pub chunk_rows: usize,
}

/// The rows of one sequence a layer takes at once, for a model of `model_bytes` whose layer
/// buffers take `row_bytes` a row: as many as keep the buffers within 1/64 of the model (at
/// least [`MIN_LAYER_CHUNK_ROWS`], a multiple of 32, at most `max_rows`). A part's buffers are
/// what a pass holds beyond the residual stream; the layer's weights stay in cache from part to
/// part, but each part makes its products' per-call weight tiles again: a 512-token SmolLM2
/// prompt (2 threads, Zen 4) ran 1 % slower in parts of 128 rows than in whole passes of 256,
/// 5 % slower in parts of 64. Large models, whose buffers are small beside their weights, keep
/// whole passes.
pub(crate) fn layer_chunk_rows(model_bytes: u64, row_bytes: usize, max_rows: usize) -> usize {
    let budget = usize::try_from(model_bytes / 64).unwrap_or(usize::MAX);
    let rows = budget / row_bytes.max(1) / 32 * 32;
    rows.max(MIN_LAYER_CHUNK_ROWS).min(max_rows.max(1))
}

/// Buffers of one batch shape, `rows = batch * seq` rows each; grown when the shape needs more,
/// given back to the system when passes become much smaller (`Llama`'s
/// `release_oversized_buffers`). Each is a mapping of its own, so that releasing them returns
/// their pages.
#[derive(Clone, Debug, Default)]
pub(crate) struct Scratch {
    /// The residual stream.
    x: PageBuffer<f32>,
    /// Normed input of a sub-layer.
    h: PageBuffer<f32>,
    /// q (and k, v when fused) rows.
    qkv: PageBuffer<f32>,
    /// k and v rows when the products are split.
    k: PageBuffer<f32>,
    v: PageBuffer<f32>,
    /// Attention output, `n_head * head_dim` per row.
    attn: PageBuffer<f32>,
    /// Output of the attention or feed-forward projection back to the model width.
    proj: PageBuffer<f32>,
    /// gate (and up when fused) rows.
    gate_up: PageBuffer<f32>,
    /// up rows when split.
    up: PageBuffer<f32>,
    /// The gated activation.
    act: PageBuffer<f32>,
    /// The buffers of the mixture-of-experts layers.
    moe: MoeScratch,
}

/// The first `n` values of `v`, grown (never shrunk) to hold them.
pub(crate) fn sized<T: Clone + Default>(v: &mut Vec<T>, n: usize) -> &mut [T] {
    v.resize(n, T::default());
    &mut v[..n]
}

impl Block {
    /// Runs the block on the `batch * seq` rows of `s.x` at positions `pos..pos + seq` (the
    /// positions `rope` was set to).
    ///
    /// One sequence's rows go through in parts of [`Dims::chunk_rows`] ([`layer_chunk_rows`]).
    pub fn forward(
        &mut self,
        s: &mut Scratch,
        d: &Dims,
        rope: &Rope,
        (batch, seq, pos): (usize, usize, usize),
        prof: &mut Option<PhaseTimes>,
    ) -> Result<()> {
        let mut x = std::mem::take(&mut s.x);
        let chunk = d.chunk_rows.max(1);
        let done = if batch == 1 {
            x.chunks_mut(chunk * d.n_embd)
                .enumerate()
                .try_for_each(|(i, part)| {
                    let n = part.len() / d.n_embd;
                    let first = pos + i * chunk;
                    self.forward_rows(part, s, d, rope, (1, n, first), prof)
                })
        } else {
            self.forward_rows(&mut x, s, d, rope, (batch, seq, pos), prof)
        };
        s.x = x;
        done
    }

    /// [`Block::forward`] on the `batch * seq` rows of `x`.
    fn forward_rows(
        &mut self,
        x: &mut [f32],
        s: &mut Scratch,
        d: &Dims,
        rope: &Rope,
        (batch, seq, pos): (usize, usize, usize),
        prof: &mut Option<PhaseTimes>,
    ) -> Result<()> {
        let rows = batch * seq;
        let h = d.heads;
        let (q_w, kv_w) = (h.n_head * h.head_dim, h.n_kv_head * h.head_dim);
        timed(prof, Phase::Elementwise, || {
            ops::rms_norm(x, &self.attn_norm, d.eps, s.h.sized(rows * d.n_embd));
            Ok(())
        })?;
        // q, k and v rows: where each starts and the distance between rows
        let (q_layout, k_layout, v_layout) = timed(prof, Phase::Products, || match &self.qkv {
            Qkv::Fused(l) => {
                let stride = l.rows();
                l.forward_into(&s.h, rows, s.qkv.sized(rows * stride))?;
                Ok(((stride, 0), (stride, q_w), (stride, q_w + kv_w)))
            }
            Qkv::Split(q, k, v) => {
                q.forward_into(&s.h, rows, s.qkv.sized(rows * q_w))?;
                k.forward_into(&s.h, rows, s.k.sized(rows * kv_w))?;
                v.forward_into(&s.h, rows, s.v.sized(rows * kv_w))?;
                Ok(((q_w, 0), (kv_w, 0), (kv_w, 0)))
            }
        })?;
        let fused = matches!(self.qkv, Qkv::Fused(_));
        timed(prof, Phase::Elementwise, || {
            // the head norms see every row at once: unlike RoPE they do not depend on position;
            // a norm as wide as all heads takes them as one vector
            if let Some(w) = &self.q_norm {
                let n = q_w / w.len();
                ops::rms_norm_heads(&mut s.qkv, q_layout.0, q_layout.1, n, w, d.eps);
            }
            if let Some(w) = &self.k_norm {
                let k_buf = if fused { &mut s.qkv } else { &mut s.k };
                let n = kv_w / w.len();
                ops::rms_norm_heads(k_buf, k_layout.0, k_layout.1, n, w, d.eps);
            }
            for b in 0..batch {
                let q_rows = &mut s.qkv[b * seq * q_layout.0..][..seq * q_layout.0];
                rope.apply_at(pos, q_rows, q_layout.0, q_layout.1, h.n_head);
                let k_rows = if fused {
                    &mut s.qkv[b * seq * k_layout.0..][..seq * k_layout.0]
                } else {
                    &mut s.k[b * seq * k_layout.0..][..seq * k_layout.0]
                };
                rope.apply_at(pos, k_rows, k_layout.0, k_layout.1, h.n_kv_head);
            }
            Ok(())
        })?;
        timed(prof, Phase::Attention, || {
            let attn = s.attn.sized(rows * q_w);
            for (b, cache) in self.caches.iter_mut().enumerate().take(batch) {
                let (k_src, v_src) = if fused {
                    (&s.qkv, &s.qkv)
                } else {
                    (&s.k, &s.v)
                };
                for r in 0..seq {
                    let row = b * seq + r;
                    cache.push(
                        &k_src[row * k_layout.0 + k_layout.1..][..kv_w],
                        &v_src[row * v_layout.0 + v_layout.1..][..kv_w],
                    );
                }
                let a = Attention {
                    heads: h,
                    queries: Rows {
                        data: &s.qkv[b * seq * q_layout.0..],
                        stride: q_layout.0,
                        offset: q_layout.1,
                    },
                    seq,
                    first_pos: pos,
                    cache,
                    scale: d.attn_scale,
                    window: self.window,
                    sinks: self.sinks.as_deref(),
                };
                a.run(&mut attn[b * seq * q_w..][..seq * q_w])
                    .map_err(candle_core::Error::msg)?;
            }
            Ok(())
        })?;
        timed(prof, Phase::Products, || {
            self.wo
                .forward_into(&s.attn, rows, s.proj.sized(rows * d.n_embd))
        })?;
        timed(prof, Phase::Elementwise, || {
            if let Some(w) = &self.post_attn_norm {
                ops::rms_norm_in_place(&mut s.proj, w, d.eps);
            }
            ops::add_in_place(x, &s.proj);
            ops::rms_norm(x, &self.ffn_norm, d.eps, &mut s.h);
            Ok(())
        })?;
        let (gate_up, down) = match &self.ffn {
            Ffn::Dense { gate_up, down } => (gate_up, down),
            Ffn::Moe(moe) => {
                moe.forward(&s.h, rows, d.gate, &mut s.moe, &mut s.proj, prof)?;
                return timed(prof, Phase::Elementwise, || {
                    self.finish_ffn(x, s, d);
                    Ok(())
                });
            }
        };
        let ff = d.n_ff;
        // the feed-forward runs on chunks of rows: its buffers are the widest of a pass (three
        // times the feed-forward width per row), and a chunk's weights stay in cache for the next
        for start in (0..rows).step_by(FFN_CHUNK_ROWS) {
            let n = FFN_CHUNK_ROWS.min(rows - start);
            let input = &s.h[start * d.n_embd..][..n * d.n_embd];
            let (stride, up_src) = timed(prof, Phase::Products, || match gate_up {
                GateUp::Fused(l) => {
                    l.forward_into(input, n, s.gate_up.sized(n * 2 * ff))?;
                    Ok((2 * ff, false))
                }
                GateUp::Split(g, u) => {
                    g.forward_into(input, n, s.gate_up.sized(n * ff))?;
                    u.forward_into(input, n, s.up.sized(n * ff))?;
                    Ok((ff, true))
                }
            })?;
            timed(prof, Phase::Elementwise, || {
                let act = s.act.sized(n * ff);
                if up_src {
                    ops::gated_split(d.gate, &s.gate_up, &s.up, act, ff);
                } else {
                    ops::gated(d.gate, &s.gate_up, stride, (0, ff), act, ff);
                }
                Ok(())
            })?;
            timed(prof, Phase::Products, || {
                down.forward_into(&s.act, n, &mut s.proj[start * d.n_embd..][..n * d.n_embd])
            })?;
        }
        timed(prof, Phase::Elementwise, || {
            self.finish_ffn(x, s, d);
            Ok(())
        })
    }

    /// The feed-forward output in `s.proj`: its norm (Gemma 3), then the residual add.
    fn finish_ffn(&self, x: &mut [f32], s: &mut Scratch, d: &Dims) {
        if let Some(w) = &self.post_ffn_norm {
            ops::rms_norm_in_place(&mut s.proj, w, d.eps);
        }
        ops::add_in_place(x, &s.proj);
    }

    /// Forgets every cached position; `batch` caches from now on.
    pub fn reset(&mut self, batch: usize) {
        let empty = &self.empty_cache;
        self.caches.resize_with(batch, || empty.clone());
        self.caches.iter_mut().for_each(KvCache::clear);
    }

    /// Bytes the caches hold.
    pub fn cache_bytes(&self) -> usize {
        self.caches.iter().map(KvCache::bytes).sum()
    }
}

/// The scratch of a pass: the residual stream to fill before the blocks run.
impl Scratch {
    pub fn residual(&mut self, n: usize) -> &mut [f32] {
        self.x.sized(n)
    }

    pub fn residual_rows(&self) -> &[f32] {
        &self.x
    }

    /// Bytes its buffers hold.
    pub fn held_bytes(&self) -> usize {
        let floats = [
            &self.x,
            &self.h,
            &self.qkv,
            &self.k,
            &self.v,
            &self.attn,
            &self.proj,
            &self.gate_up,
            &self.up,
            &self.act,
        ];
        floats.iter().map(|v| v.capacity_bytes()).sum::<usize>() + self.moe.held_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_parts_grow_with_the_model_and_stay_within_a_pass() {
        // a 92 MB model at 29 KB a row: the minimum
        assert_eq!(layer_chunk_rows(92_000_000, 29_184, 256), 128);
        // 700 MB at 135 KB a row: 81 rows fit 1/64 of the model, below the minimum
        assert_eq!(layer_chunk_rows(700_000_000, 135_000, 256), 128);
        // 2 GB at 100 KB a row: 312 rows fit, rounded down to 288
        assert_eq!(layer_chunk_rows(2_000_000_000, 100_000, 512), 288);
        // 4.5 GB at 250 KB a row: 281 rows fit, capped by the pass
        assert_eq!(layer_chunk_rows(4_500_000_000, 250_000, 256), 256);
        // never above the pass, never zero
        assert_eq!(layer_chunk_rows(10, 0, 16), 16);
        assert_eq!(layer_chunk_rows(u64::MAX, 1, 0), 1);
    }
}
