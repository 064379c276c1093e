//! qrepack: fast multiplication of ggml-quantized weight matrices on CPUs.
//!
//! Weights arrive as ggml blocks in ggml's row layout (as in a GGUF file). [`QMatrix`] rewrites
//! them once into an interleaved layout chosen for this CPU (or keeps them plain when none fits),
//! and multiplies them with f32 activations, which are quantized on the fly exactly as ggml does.
//!
//! ```
//! use qrepack::{quantize, GgmlType, QMatrix};
//! let (rows, cols) = (16, 64);
//! let w: Vec<f32> = (0..rows * cols).map(|i| ((i * 7 % 13) as f32 - 6.0) / 6.0).collect();
//! let bytes = quantize(GgmlType::Q4_0, &w, rows, cols).unwrap();
//! let m = QMatrix::new(GgmlType::Q4_0, rows, cols, &bytes).unwrap();
//! let x = vec![0.5f32; 2 * cols];
//! let mut y = vec![0.0f32; 2 * rows];
//! m.matmul(&x, 2, &mut y).unwrap();
//! assert_eq!(m.to_ggml_bytes(), bytes);
//! ```

#![warn(missing_docs)]

pub mod activation;
pub mod blocks;
mod column_bands;
pub mod cpu;
mod driver;
pub mod error;
pub mod gguf;
mod kernel_api;
mod kernels;
pub mod layout;
mod matrix;
pub mod model;
mod page_buffer;
pub mod profile;
pub mod quant;
pub mod reference;
pub mod rng;
mod scratch;
mod select;
mod shared;
pub mod synth;
pub mod types;
pub mod vecdot;

pub use error::{Error, Result};
pub use layout::Layout;
pub use matrix::{QExperts, QMatrix};
pub use model::Model;
pub use page_buffer::PageBuffer;
pub use quant::{dequantize, quantize, quantize_with_importance};
pub use scratch::release_thread_scratch;
pub use shared::SharedBytes;
pub use types::GgmlType;
