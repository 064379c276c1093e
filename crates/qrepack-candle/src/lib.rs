//! qrepack-candle: run GGUF models on [candle](https://github.com/huggingface/candle) with
//! qrepack's repacked quantized matrix products.
//!
//! * [`QLinear`]: a `candle_core::Module` computing `x W^T` with [`qrepack::QMatrix::matmul`]
//!   (f32 `[.., cols]` to `[.., rows]` on the CPU), built from a tensor of a qrepack
//!   [`Model`](qrepack::Model); [`QExpertsLinear`] does the same for mixture-of-experts tensors
//!   with [`qrepack::QExperts::matmul_id`].
//! * [`weights`]: the other tensors of the GGUF file (norms, biases, embeddings) as candle
//!   tensors, and metadata lookups.
//! * [`Llama`]: a Llama-family decoder (Llama 2/3.x, SmolLM2, Mistral, Qwen2, Qwen3, Gemma 3,
//!   and the mixtures of experts Qwen3-MoE, OLMoE, Mixtral)
//!   on raw f32 buffers and `QLinear`, configured from the GGUF metadata ([`config`]), with a
//!   KV cache.
//! * [`Tokenizer`]: the GPT-2 style byte-level BPE tokenizer that GGUF files carry.
//!
//! ```no_run
//! use std::sync::Arc;
//! use candle_core::{Device, Module, Tensor};
//! use qrepack_candle::QLinear;
//! let model = Arc::new(qrepack::Model::open("model.gguf").unwrap());
//! let up = QLinear::from_model(&model, "blk.0.ffn_up.weight").unwrap();
//! let x = Tensor::zeros((2, 7, up.cols()), candle_core::DType::F32, &Device::Cpu).unwrap();
//! let y = up.forward(&x).unwrap(); // [2, 7, rows]
//! # let _ = y;
//! ```
//!
//! qrepack runs on the current rayon thread pool (`RAYON_NUM_THREADS`), candle's own CPU
//! kernels on theirs (`CANDLE_NUM_THREADS`, then `RAYON_NUM_THREADS`).

mod build;
pub mod chat;
pub mod config;
mod decoder;
pub mod linear;
pub mod llama;
mod moe;
pub mod ops;
pub mod profile;
#[cfg(feature = "stock")]
pub mod stock;
pub mod tokenizer;
pub mod weights;

pub use chat::ChatTemplate;
pub use linear::{QExpertsLinear, QLinear};
pub use llama::{Backend, Config, Llama, LoadOptions};
pub use profile::{Phase, PhaseTimes};
pub use tokenizer::Tokenizer;
