//! The independent reference: candle-transformers' stock `quantized_llama` (or
//! `quantized_qwen3`, `quantized_gemma3` for those architectures) on the same GGUF file, and
//! the comparison of the two models step by step (feature `stock`).

use std::io::Cursor;
use std::path::Path;
use std::sync::Arc;

use candle_core::quantized::gguf_file;
use candle_core::{bail, Device, Result, Tensor};
use candle_transformers::models::{quantized_gemma3, quantized_llama, quantized_qwen3};
use qrepack::gguf::{GgufFile, GgufWriter};
use qrepack::{dequantize, GgmlType, Model};

use crate::llama::{Llama, LoadOptions};

/// Types candle-core 0.11.1 can load.
fn candle_knows(ty: Option<GgmlType>) -> bool {
    use GgmlType::*;
    matches!(
        ty,
        Some(
            F32 | F16
                | BF16
                | Q4_0
                | Q4_1
                | Q5_0
                | Q5_1
                | Q8_0
                | Q8_1
                | Q2_K
                | Q3_K
                | Q4_K
                | Q5_K
                | Q6_K
                | Q8_K
        )
    )
}

/// The stock model of the file's architecture.
pub enum StockWeights {
    /// `quantized_llama` (llama, mistral, qwen2: it reads q/k/v biases when present).
    Llama(quantized_llama::ModelWeights),
    /// `quantized_qwen3`.
    Qwen3(quantized_qwen3::ModelWeights),
    /// `quantized_gemma3` (which has no way to clear its cache: it is loaded again).
    Gemma3(quantized_gemma3::ModelWeights),
}

impl StockWeights {
    fn load(arch: &str, bytes: &mut (impl std::io::Read + std::io::Seek)) -> Result<StockWeights> {
        let device = Device::Cpu;
        let ct = gguf_file::Content::read(bytes)?;
        Ok(match arch {
            "qwen3" => StockWeights::Qwen3(quantized_qwen3::ModelWeights::from_gguf(
                ct, bytes, &device,
            )?),
            "gemma3" => StockWeights::Gemma3(quantized_gemma3::ModelWeights::from_gguf(
                ct, bytes, &device,
            )?),
            _ => StockWeights::Llama(quantized_llama::ModelWeights::from_gguf(
                ct, bytes, &device,
            )?),
        })
    }
}

/// Where the stock model was loaded from, to load it again.
enum Origin {
    Path(std::path::PathBuf),
    Bytes(Vec<u8>),
}

/// candle-transformers' stock model of the file's architecture (see [`StockWeights`]), loaded
/// from a GGUF file. Tensors of types candle-core does not have (IQ4_NL, IQ4_XS) are
/// dequantized to f32 by qrepack first, so the stock model multiplies exactly the same weights
/// (in f32).
pub struct StockLlama {
    pub weights: StockWeights,
    /// The tensors given to candle as f32 because candle has no such type.
    pub dequantized: Vec<String>,
    arch: String,
    origin: Origin,
}

impl StockLlama {
    /// Loads `path` into the stock model.
    pub fn open(path: impl AsRef<Path>) -> Result<StockLlama> {
        let path = path.as_ref();
        let g = GgufFile::open(path).map_err(candle_core::Error::wrap)?;
        let foreign: Vec<String> = g
            .tensors()
            .iter()
            .filter(|t| !candle_knows(t.ty))
            .map(|t| t.name.clone())
            .collect();
        let arch = g
            .get("general.architecture")
            .and_then(|v| v.as_str())
            .unwrap_or("llama")
            .to_string();
        let origin = if foreign.is_empty() {
            Origin::Path(path.to_path_buf())
        } else {
            let mut w = GgufWriter::new();
            for (k, v) in g.metadata() {
                w.add_kv(k, v.clone()).map_err(candle_core::Error::wrap)?;
            }
            for t in g.tensors() {
                let bytes = g.tensor_bytes(t);
                if candle_knows(t.ty) {
                    w.add_tensor(&t.name, &t.dims, t.type_id, bytes)
                } else {
                    let Some(ty) = t.ty else {
                        bail!("tensor '{}' has an unknown type id {}", t.name, t.type_id)
                    };
                    let cols = t.dims.first().copied().unwrap_or(1) as usize;
                    let n = t.n_elements() as usize;
                    let x =
                        dequantize(ty, bytes, n / cols, cols).map_err(candle_core::Error::wrap)?;
                    let f: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
                    w.add_tensor_owned(&t.name, &t.dims, GgmlType::F32.id(), f)
                }
                .map_err(candle_core::Error::wrap)?;
            }
            Origin::Bytes(w.to_bytes().map_err(candle_core::Error::wrap)?)
        };
        Ok(StockLlama {
            weights: load(&arch, &origin)?,
            dequantized: foreign,
            arch,
            origin,
        })
    }

    /// The logits after the last of `ids` (`[1, seq]`) at positions `pos..`: `[1, vocab]`.
    pub fn forward(&mut self, ids: &Tensor, pos: usize) -> Result<Tensor> {
        match &mut self.weights {
            StockWeights::Llama(w) => w.forward(ids, pos),
            StockWeights::Qwen3(w) => w.forward(ids, pos),
            StockWeights::Gemma3(w) => w.forward(ids, pos),
        }
    }

    /// Forgets the cached positions.
    pub fn clear_kv_cache(&mut self) -> Result<()> {
        match &mut self.weights {
            StockWeights::Llama(w) => w.clear_kv_cache(),
            StockWeights::Qwen3(w) => w.clear_kv_cache(),
            StockWeights::Gemma3(_) => self.weights = load(&self.arch, &self.origin)?,
        }
        Ok(())
    }
}

fn load(arch: &str, origin: &Origin) -> Result<StockWeights> {
    match origin {
        Origin::Path(p) => StockWeights::load(arch, &mut std::fs::File::open(p)?),
        Origin::Bytes(b) => StockWeights::load(arch, &mut Cursor::new(b)),
    }
}

/// One compared step.
#[derive(Clone, Debug)]
pub struct Step {
    /// The stock model's greedy token (fed to both models for the next step).
    pub stock_token: u32,
    /// qrepack-candle's greedy token.
    pub token: u32,
    /// Top-2 gap of each model's logits.
    pub stock_gap: f32,
    pub gap: f32,
    /// How many of the stock top 5 are in qrepack-candle's top 5.
    pub top5_shared: usize,
    /// Largest |logit difference| over the whole vocabulary.
    pub max_diff: f32,
    /// Largest |logit difference| over the stock top 5.
    pub max_diff_top5: f32,
    /// The stock logits at ranks 5 and 6 (a near-tie there can swap the fifth token).
    pub stock_rank5_gap: f32,
}

/// The result of [`compare`].
#[derive(Clone, Debug)]
pub struct Comparison {
    pub steps: Vec<Step>,
}

/// A near-tie: the top-2 logits within this of each other, in either model.
pub const NEAR_TIE: f32 = 0.1;

impl Comparison {
    /// The first step whose top-2 logits are within [`NEAR_TIE`] in either model.
    pub fn first_near_tie(&self) -> Option<usize> {
        self.steps
            .iter()
            .position(|s| s.stock_gap < NEAR_TIE || s.gap < NEAR_TIE)
    }

    /// The steps up to which the greedy tokens must agree: up to the first near-tie, and at
    /// least the first 8.
    pub fn must_agree(&self) -> usize {
        self.first_near_tie()
            .unwrap_or(self.steps.len())
            .max(8)
            .min(self.steps.len())
    }

    /// Largest logit difference over every step.
    pub fn max_diff(&self) -> f32 {
        self.steps.iter().map(|s| s.max_diff).fold(0.0, f32::max)
    }

    /// The acceptance criteria: the greedy tokens agree at every step before the first
    /// near-tie, and at every one of the first 8 steps that is not itself a near-tie (where the
    /// reference's own top 2 are within [`NEAR_TIE`], either token is a correct greedy
    /// choice); at least 4 of the top 5 shared at every step. `Err` says which failed.
    pub fn check(&self) -> std::result::Result<(), String> {
        self.check_tokens(false)?;
        self.check_top5()
    }

    /// [`Comparison::check`] read literally: the tokens must also agree at near-tie steps
    /// among the first 8.
    pub fn check_strict(&self) -> std::result::Result<(), String> {
        self.check_tokens(true)?;
        self.check_top5()
    }

    fn check_tokens(&self, strict: bool) -> std::result::Result<(), String> {
        for (i, s) in self.steps.iter().enumerate().take(self.must_agree()) {
            let tie = s.stock_gap < NEAR_TIE || s.gap < NEAR_TIE;
            if s.token != s.stock_token && (strict || !tie) {
                return Err(format!(
                    "step {i}: greedy token {} but stock {} (top-2 gaps: stock {:.3}, qrepack {:.3})",
                    s.token, s.stock_token, s.stock_gap, s.gap
                ));
            }
        }
        Ok(())
    }

    fn check_top5(&self) -> std::result::Result<(), String> {
        for (i, s) in self.steps.iter().enumerate() {
            if s.top5_shared < 4 {
                return Err(format!(
                    "step {i}: only {} of the top 5 shared",
                    s.top5_shared
                ));
            }
        }
        Ok(())
    }
}

fn top(logits: &[f32], k: usize) -> Vec<u32> {
    let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
    idx.sort_by(|&a, &b| {
        logits[b as usize]
            .total_cmp(&logits[a as usize])
            .then(a.cmp(&b))
    });
    idx.truncate(k);
    idx
}

fn gap(logits: &[f32]) -> f32 {
    let t = top(logits, 2);
    logits[t[0] as usize] - logits[t[1] as usize]
}

/// Runs `prompt` through both models and then `steps` greedy steps, each feeding the stock
/// model's greedy token to both, and compares the logits at every step.
pub fn compare(
    model: Arc<Model>,
    stock: &mut StockLlama,
    prompt: &[u32],
    steps: usize,
) -> Result<Comparison> {
    compare_with(model, &LoadOptions::default(), stock, prompt, steps)
}

/// [`compare`] with the model built with `options` (e.g. candle's `QMatMul` as the backend,
/// which checks the model code alone against the stock model).
pub fn compare_with(
    model: Arc<Model>,
    options: &LoadOptions,
    stock: &mut StockLlama,
    prompt: &[u32],
    steps: usize,
) -> Result<Comparison> {
    let mut ours = Llama::load(model, options)?;
    compare_llama(&mut ours, stock, prompt, steps)
}

/// [`compare`] with a model already built (and its cache empty), e.g. from a changed
/// configuration ([`Llama::load_with_config`]).
pub fn compare_llama(
    ours: &mut Llama,
    stock: &mut StockLlama,
    prompt: &[u32],
    steps: usize,
) -> Result<Comparison> {
    let dev = Device::Cpu;
    let ids = Tensor::new(prompt, &dev)?.unsqueeze(0)?;
    let mut a: Vec<f32> = ours.forward(&ids, 0)?.squeeze(0)?.to_vec1()?;
    let mut b: Vec<f32> = stock.forward(&ids, 0)?.squeeze(0)?.to_vec1()?;
    let mut out = Vec::new();
    for step in 0..steps {
        if a.len() != b.len() {
            bail!("vocabulary sizes differ: {} vs {}", a.len(), b.len());
        }
        let (ta, tb) = (top(&a, 5), top(&b, 5));
        let diffs = a.iter().zip(&b).map(|(x, y)| (x - y).abs());
        out.push(Step {
            stock_token: tb[0],
            token: ta[0],
            stock_gap: gap(&b),
            gap: gap(&a),
            top5_shared: tb.iter().filter(|t| ta.contains(t)).count(),
            max_diff: diffs.fold(0.0, f32::max),
            stock_rank5_gap: {
                let t6 = top(&b, 6);
                b[t6[4] as usize] - b[t6[5] as usize]
            },
            max_diff_top5: tb
                .iter()
                .map(|&t| (a[t as usize] - b[t as usize]).abs())
                .fold(0.0, f32::max),
        });
        if step + 1 == steps {
            break;
        }
        let next = Tensor::new(&[[tb[0]]], &dev)?;
        let pos = prompt.len() + step;
        a = ours.forward(&next, pos)?.squeeze(0)?.to_vec1()?;
        b = stock.forward(&next, pos)?.squeeze(0)?.to_vec1()?;
    }
    Ok(Comparison { steps: out })
}
