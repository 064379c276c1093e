//! The AVX2 kernel set (AVX2 with FMA and F16C): 256-bit kernels for every interleaved layout,
//! the activation quantizers and the plain types' `vec_dot` (`vecdot`, and `plain_rows` for the
//! types whose GEMM decodes each weight block once for four activation rows). Their `#[inline(always)]` bodies
//! are shared with the higher x86 sets, which compile them again with more features.

pub(crate) mod grid;
pub(crate) mod k_quants;
mod lanes;
pub(crate) mod lowbit;
pub(crate) mod nibble;
pub(crate) mod plain_rows;
pub(crate) mod plain_tiles;
pub(crate) mod prepared_rows;
pub(crate) mod q2_k;
pub(crate) mod q4_1;
pub(crate) mod q5_0;
pub(crate) mod q6_k;
pub(crate) mod q8_0_tiles;
pub(crate) mod quantize;
pub(crate) mod ternary_tiles;
pub(crate) mod vecdot;

#[cfg(test)]
mod row_tests;
