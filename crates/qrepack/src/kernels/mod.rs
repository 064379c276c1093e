//! The kernel sets, one folder per instruction-set level: `scalar` (portable, every CPU),
//! `x86/{avx2, avxvnni, avx512}`, `aarch64/{neon, dotprod, i8mm}`. Each set exports the kernels it has for layouts, activation
//! formats and plain types, behind its [`SetToken`](crate::kernel_api::SetToken); the selection
//! table (`select.rs`) says which set serves what.

#[cfg(target_arch = "aarch64")]
pub(crate) mod aarch64;
#[cfg(test)]
pub(crate) mod row_tests;
pub(crate) mod scalar;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;
