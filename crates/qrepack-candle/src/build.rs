//! Building a [`Llama`](crate::Llama)'s layers from a qrepack [`Model`]: each product by the
//! chosen backend ([`Backend`]), the fused q/k/v and gate/up stacks, the experts of a mixture,
//! and the checks of each block's widths against the configuration.

use std::borrow::Cow;
use std::sync::Arc;

use candle_core::quantized::{GgmlDType, QMatMul, QStorage, QTensor};
use candle_core::{bail, Device, Result};
use qrepack::{dequantize, GgmlType, Model};

use crate::config::{router_name, Config, MoeConfig};
use crate::decoder::{Block, Ffn, GateUp, Linear, Qkv, Weight};
use crate::linear::{QExpertsLinear, QLinear};
use crate::llama::{Backend, LoadOptions};
use crate::moe::{ExpertBiases, Experts, MoeFfn};
use crate::weights::ggml_bytes;

/// The GGUF type as candle's, for [`Backend::CandleQMatMul`].
pub(crate) fn candle_dtype(ty: GgmlType) -> Result<GgmlDType> {
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

/// A 1-D f32 tensor of the model (a norm weight or a bias), dequantized.
pub(crate) fn vector(model: &Model, name: &str) -> Result<Vec<f32>> {
    let (bytes, ty, dims) = ggml_bytes(model, name)?;
    let n: usize = dims.iter().product();
    dequantize(ty, &bytes, 1, n).map_err(candle_core::Error::wrap)
}

/// Builds the linear layers of one model.
pub(crate) struct Builder<'a> {
    pub model: &'a Arc<Model>,
    pub options: &'a LoadOptions,
}

impl Builder<'_> {
    pub fn bias(&self, weight: &str) -> Result<Option<Vec<f32>>> {
        let name = match weight.strip_suffix(".weight") {
            Some(stem) => format!("{stem}.bias"),
            None => return Ok(None),
        };
        match self.model.tensor(&name) {
            None => Ok(None),
            Some(_) => vector(self.model, &name).map(Some),
        }
    }

    pub fn weight(&self, name: &str) -> Result<Weight> {
        Ok(match self.options.backend {
            Backend::Qrepack => Weight::Qrepack(QLinear::from_model(self.model, name)?),
            Backend::CandleQMatMul => {
                let (bytes, ty, dims) = ggml_bytes(self.model, name)?;
                let [cols, rows] = dims[..] else {
                    bail!("'{name}' is not a matrix: dims {dims:?}");
                };
                let storage =
                    QStorage::from_data(Cow::Owned(bytes), &Device::Cpu, candle_dtype(ty)?)?;
                Weight::Candle {
                    matmul: QMatMul::from_qtensor(QTensor::new(storage, (rows, cols))?)?,
                    rows,
                    cols,
                }
            }
        })
    }

    pub fn linear(&self, name: &str) -> Result<Linear> {
        Ok(Linear {
            weight: self.weight(name)?,
            bias: self.bias(name)?,
        })
    }

    /// Layer `il`'s experts `part` (`gate`, `up` or `down`): the 3-D tensor
    /// `blk.N.ffn_{part}_exps.weight` (`[cols, rows, n_expert]` in GGUF) as qrepack's routed
    /// product, or one candle `QMatMul` per expert; or, in the first Mixtral files, the 2-D
    /// tensors `blk.N.ffn_{part}.E.weight` of each expert, one product each.
    pub fn experts(&self, il: usize, part: &str) -> Result<Experts> {
        let name = format!("blk.{il}.ffn_{part}_exps.weight");
        if self.model.tensor(&name).is_none() {
            let one = |e: usize| format!("blk.{il}.ffn_{part}.{e}.weight");
            if self.model.tensor(&one(0)).is_none() {
                bail!("the model has no expert tensor '{name}' (nor '{}')", one(0));
            }
            let experts = (0..)
                .map(one)
                .take_while(|n| self.model.tensor(n).is_some())
                .map(|n| self.linear(&n))
                .collect::<Result<Vec<_>>>()?;
            let (rows, cols) = (experts[0].rows(), experts[0].cols());
            if experts.iter().any(|l| l.rows() != rows || l.cols() != cols) {
                bail!("the experts 'blk.{il}.ffn_{part}.E.weight' differ in shape");
            }
            return Ok(Experts::Separate {
                experts,
                rows,
                cols,
            });
        }
        Ok(match self.options.backend {
            Backend::Qrepack => Experts::Qrepack(QExpertsLinear::from_model(self.model, &name)?),
            Backend::CandleQMatMul => {
                let (bytes, ty, dims) = ggml_bytes(self.model, &name)?;
                let [cols, rows, n] = dims[..] else {
                    bail!("'{name}' is not a 3-D expert tensor: dims {dims:?}");
                };
                let per = ty
                    .matrix_bytes(rows, cols)
                    .map_err(candle_core::Error::wrap)?;
                if n == 0 || bytes.len() != n * per {
                    bail!(
                        "'{name}' has {} bytes for {n} experts of {per}",
                        bytes.len()
                    );
                }
                let experts = bytes
                    .chunks_exact(per)
                    .map(|b| {
                        let storage = QStorage::from_data(
                            Cow::Owned(b.to_vec()),
                            &Device::Cpu,
                            candle_dtype(ty)?,
                        )?;
                        Ok(Linear {
                            weight: Weight::Candle {
                                matmul: QMatMul::from_qtensor(QTensor::new(
                                    storage,
                                    (rows, cols),
                                )?)?,
                                rows,
                                cols,
                            },
                            bias: None,
                        })
                    })
                    .collect::<Result<Vec<_>>>()?;
                Experts::Separate {
                    experts,
                    rows,
                    cols,
                }
            }
        })
    }

    /// Layer `il`'s mixture of experts.
    pub fn moe(&self, il: usize, moe: &MoeConfig) -> Result<MoeFfn> {
        Ok(MoeFfn {
            router: self.linear(&router_name(il))?,
            gate: self.experts(il, "gate")?,
            up: self.experts(il, "up")?,
            down: self.experts(il, "down")?,
            n_used: moe.n_expert_used,
            norm_weights: moe.norm_weights,
            weights_scale: moe.weights_scale as f32,
            gating: moe.gating,
            biases: ExpertBiases {
                gate: self.expert_bias(il, "gate")?,
                up: self.expert_bias(il, "up")?,
                down: self.expert_bias(il, "down")?,
            },
        })
    }

    /// Layer `il`'s per-expert biases of `part` (`blk.N.ffn_{part}_exps.bias`, one row per
    /// expert), when the model has them.
    fn expert_bias(&self, il: usize, part: &str) -> Result<Option<Vec<f32>>> {
        let name = format!("blk.{il}.ffn_{part}_exps.bias");
        match self.model.tensor(&name) {
            None => Ok(None),
            Some(_) => vector(self.model, &name).map(Some),
        }
    }

    /// The stacked matrix `stack` (the layers `names` side by side, outputs concatenated) as
    /// one linear layer, when fusing is on and the model was opened with that stack; else
    /// `None`.
    pub fn fused(&self, stack: &str, names: &[&str]) -> Result<Option<Linear>> {
        if !self.options.fuse || self.options.backend != Backend::Qrepack {
            return Ok(None);
        }
        if self.model.stack(stack).is_none() {
            return Ok(None);
        }
        let weight = QLinear::from_stack(self.model, stack)?;
        let mut biases = Vec::new();
        for name in names {
            biases.push(self.bias(name)?);
        }
        let bias = if biases.iter().any(Option::is_some) {
            let mut all = Vec::with_capacity(weight.rows());
            for (b, name) in biases.into_iter().zip(names) {
                match b {
                    Some(b) => all.extend(b),
                    None => {
                        let rows = match self.model.tensor(name).map(|t| &t.dims[..]) {
                            Some([_, rows]) => *rows as usize,
                            _ => bail!("'{name}' is not a matrix"),
                        };
                        all.extend(std::iter::repeat_n(0.0, rows));
                    }
                }
            }
            if all.len() != weight.rows() {
                bail!(
                    "the biases of {names:?} give {} values for {} outputs",
                    all.len(),
                    weight.rows()
                );
            }
            Some(all)
        } else {
            None
        };
        Ok(Some(Linear {
            weight: Weight::Qrepack(weight),
            bias,
        }))
    }
}

/// Checks a block's widths against the configuration, so that a malformed file is an error
/// at load and not a wrong-sized buffer in a pass.
pub(crate) fn check_block(b: &Block, c: &Config, layer: usize) -> Result<()> {
    let (q_w, kv_w) = (c.n_head * c.head_dim, c.n_kv_head * c.head_dim);
    let qkv_ok = match &b.qkv {
        Qkv::Fused(l) => l.rows() == q_w + 2 * kv_w && l.cols() == c.n_embd,
        Qkv::Split(q, k, v) => {
            q.rows() == q_w
                && k.rows() == kv_w
                && v.rows() == kv_w
                && [q, k, v].iter().all(|l| l.cols() == c.n_embd)
        }
    };
    // q/k norms: per head, or (OLMoE) over all heads at once
    let (q_norm_w, k_norm_w) = if c.qk_norm_whole {
        (q_w, kv_w)
    } else {
        (c.head_dim, c.head_dim)
    };
    let ok = qkv_ok
        && b.wo.rows() == c.n_embd
        && b.wo.cols() == q_w
        && b.attn_norm.len() == c.n_embd
        && b.ffn_norm.len() == c.n_embd
        && b.q_norm.as_ref().is_none_or(|w| w.len() == q_norm_w)
        && b.k_norm.as_ref().is_none_or(|w| w.len() == k_norm_w)
        && [&b.post_attn_norm, &b.post_ffn_norm]
            .iter()
            .all(|w| w.as_ref().is_none_or(|w| w.len() == c.n_embd))
        && b.sinks.as_ref().is_none_or(|s| s.len() == c.n_head);
    if !ok {
        bail!(
            "block {layer}'s tensors do not fit a model {} wide with {} heads of {} ({} key/value \
             heads)",
            c.n_embd,
            c.n_head,
            c.head_dim,
            c.n_kv_head,
        );
    }
    match &b.ffn {
        Ffn::Dense { gate_up, down } => {
            let ff_ok = match gate_up {
                GateUp::Fused(l) => l.rows() == 2 * c.n_ff && l.cols() == c.n_embd,
                GateUp::Split(g, u) => {
                    g.rows() == c.n_ff
                        && u.rows() == c.n_ff
                        && g.cols() == c.n_embd
                        && u.cols() == c.n_embd
                }
            };
            if !ff_ok || down.rows() != c.n_embd || down.cols() != c.n_ff {
                bail!(
                    "block {layer}'s feed-forward tensors do not fit a model {} wide with {} \
                     feed-forward units",
                    c.n_embd,
                    c.n_ff
                );
            }
        }
        Ffn::Moe(m) => {
            let Some(moe) = &c.moe else {
                bail!("block {layer} has experts but the configuration has none");
            };
            let (e, ff) = (moe.n_expert, moe.n_ff_expert);
            let ok = m.router.rows() == e
                && m.router.cols() == c.n_embd
                && [&m.gate, &m.up]
                    .iter()
                    .all(|x| x.n_expert() == e && x.rows() == ff && x.cols() == c.n_embd)
                && m.down.n_expert() == e
                && m.down.rows() == c.n_embd
                && m.down.cols() == ff
                && (1..=e).contains(&m.n_used)
                && [
                    (&m.biases.gate, ff),
                    (&m.biases.up, ff),
                    (&m.biases.down, c.n_embd),
                ]
                .iter()
                .all(|(b, w)| b.as_ref().is_none_or(|b| b.len() == e * w));
            if !ok {
                bail!(
                    "block {layer}'s experts do not fit a model {} wide with {e} experts of {ff} \
                     feed-forward units, {} used per token",
                    c.n_embd,
                    moe.n_expert_used
                );
            }
        }
    }
    Ok(())
}
