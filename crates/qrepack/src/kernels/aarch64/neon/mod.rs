//! The NEON kernel set (every AArch64 CPU): the plain path's dot products (`vecdot`, and
//! `plain_rows` for BF16, Q5_1, Q8_1, Q2_K, Q3_K, Q8_K and IQ4_XS; `grid` for the IQ1/IQ2/IQ3
//! grid types; `lowbit` for the ternary and FP4 types, Q1_0 and Q2_0) and the activation
//! quantizers (`quantize`). The repacked ARM layouts need `sdot` or `smmla` (the `dotprod` and
//! `i8mm` sets); as in ggml, a CPU with NEON only keeps the plain layout.

pub(crate) mod dot;
pub(crate) mod grid;
pub(crate) mod lowbit;
pub(crate) mod plain_rows;
pub(crate) mod quantize;
pub(crate) mod vecdot;
