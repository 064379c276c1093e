//! The decoder's kernels other than the matrix products: pure functions on f32 rows, each
//! tested against an f64 reference.
//!
//! They are compiled for AVX-512, AVX2 + FMA and NEON beside the portable baseline, and the
//! version for the running CPU is picked at the first call (`multiversion`).

mod attention;
#[cfg(target_arch = "x86_64")]
mod attention_row;
#[cfg(target_arch = "x86_64")]
mod attention_tile;
mod elementwise;
mod gated;
mod kv_cache;
mod math;
#[cfg(target_arch = "x86_64")]
mod wide;

pub use attention::{Attention, Heads, Rows};
pub use elementwise::{
    add_bias, add_in_place, rms_norm, rms_norm_heads, rms_norm_in_place, Rope, RopeStyle, Yarn,
};
pub use gated::{gated, gated_split, Gate};
pub use kv_cache::{KvCache, KvType, PAGE};
