//! The NEON kernel set (every AArch64 CPU): the plain path's dot products (`vecdot`) and the
//! activation quantizers (`quantize`). The repacked ARM layouts need `sdot` or `smmla` (the
//! `dotprod` and `i8mm` sets); as in ggml, a CPU with NEON only keeps the plain layout.

pub(crate) mod quantize;
pub(crate) mod vecdot;
