//! The NEON kernel set (every AArch64 CPU): the plain path's dot products (`vecdot`, and
//! `plain_rows` for BF16, Q5_1, Q8_1, Q2_K, Q3_K, Q8_K and IQ4_XS) and the activation
//! quantizers (`quantize`). The repacked ARM layouts need `sdot` or `smmla` (the
//! `dotprod` and `i8mm` sets); as in ggml, a CPU with NEON only keeps the plain layout.

pub(crate) mod plain_rows;
pub(crate) mod quantize;
pub(crate) mod vecdot;
