//! The shared row-kernel checks (`crate::kernels::row_tests`) for the AVX2 set.

use bytemuck::Pod;

use crate::cpu::{CpuFeatures, KernelSet};
use crate::kernel_api::SetToken;
use crate::kernels::x86::Avx2;
use crate::rng::SplitMix64 as Rng;
use crate::types::GgmlType;

pub(super) use crate::kernels::row_tests::{compare_rows, random};

/// The AVX2 token, when this CPU has the set.
pub(super) fn avx2() -> Option<Avx2> {
    Avx2::new(CpuFeatures::get())
}

/// `compare_matmul_on` for the AVX2 row of the table.
pub(super) fn compare_matmul<W: Pod>(ty: GgmlType, steps: usize, weight: impl Fn(&mut Rng) -> W) {
    crate::kernels::row_tests::compare_matmul_on(KernelSet::Avx2, ty, steps, weight);
}
