//! The scalar kernels of the plain layout: each type's portable `vec_dot` (`crate::vecdot`),
//! once per weight row (GEMV) or once per activation row (GEMM).

use crate::activation::ActFormat;
use crate::cpu::KernelSet;
use crate::layout::plain::{
    Plain, PlainType, RowsBf16, RowsF16, RowsF32, RowsIq1M, RowsIq1S, RowsIq2S, RowsIq2Xs,
    RowsIq2Xxs, RowsIq3S, RowsIq3Xxs, RowsIq4Nl, RowsIq4Xs, RowsMxfp4, RowsNvfp4, RowsQ1_0,
    RowsQ2K, RowsQ2_0, RowsQ3K, RowsQ4K, RowsQ4_0, RowsQ4_1, RowsQ5K, RowsQ5_0, RowsQ5_1, RowsQ6K,
    RowsQ8K, RowsQ8_0, RowsQ8_1, RowsTq1_0, RowsTq2_0,
};
use crate::layout::Kernels;
use crate::vecdot;

type ActRow<D> = <<D as PlainType>::Act as ActFormat>::Row;

/// A plain type's portable dot product of one weight row with one activation row.
pub(crate) trait ScalarDot: PlainType {
    fn dot(w: &[Self::Weight], a: &[ActRow<Self>]) -> f32;
}

/// The portable GEMV/GEMM of the plain layout of `D`.
pub(crate) fn plain_kernels<D: ScalarDot>() -> Kernels<Plain<D>> {
    crate::kernel_api::Kernels::pair(KernelSet::Scalar, gemv::<D>, gemm::<D>)
}

/// One output per weight row in `w` (`a.len()` blocks each).
fn gemv<D: ScalarDot>(w: &[D::Weight], a: &[ActRow<D>], out: &mut [f32]) {
    for (o, row) in out.iter_mut().zip(w.chunks_exact(a.len().max(1))) {
        *o = D::dot(row, a);
    }
}

/// One output per activation row in `a` (four rows back to back, `w.len()` blocks each).
fn gemm<D: ScalarDot>(w: &[D::Weight], a: &[ActRow<D>], out: &mut [f32]) {
    for (o, row) in out.iter_mut().zip(a.chunks_exact(w.len().max(1))) {
        *o = D::dot(w, row);
    }
}

macro_rules! scalar_dots {
    ($($ty:ty => $dot:path;)*) => {$(
        impl ScalarDot for $ty {
            fn dot(w: &[Self::Weight], a: &[ActRow<Self>]) -> f32 {
                $dot(w, a)
            }
        }
    )*};
}

scalar_dots! {
    RowsF32 => vecdot::vec_dot_f32;
    RowsF16 => vecdot::vec_dot_f16;
    RowsBf16 => vecdot::vec_dot_bf16;
    RowsQ4_0 => vecdot::vec_dot_q4_0_q8_0;
    RowsQ4_1 => vecdot::vec_dot_q4_1_q8_1;
    RowsQ5_0 => vecdot::vec_dot_q5_0_q8_0;
    RowsQ5_1 => vecdot::vec_dot_q5_1_q8_1;
    RowsQ8_0 => vecdot::vec_dot_q8_0_q8_0;
    RowsQ8_1 => vecdot::vec_dot_q8_1_q8_1;
    RowsQ2K => vecdot::vec_dot_q2_k_q8_k;
    RowsQ3K => vecdot::vec_dot_q3_k_q8_k;
    RowsQ4K => vecdot::vec_dot_q4_k_q8_k;
    RowsQ5K => vecdot::vec_dot_q5_k_q8_k;
    RowsQ6K => vecdot::vec_dot_q6_k_q8_k;
    RowsQ8K => vecdot::vec_dot_q8_k_q8_k;
    RowsIq4Nl => vecdot::vec_dot_iq4_nl_q8_0;
    RowsIq4Xs => vecdot::vec_dot_iq4_xs_q8_k;
    RowsIq2Xxs => vecdot::vec_dot_iq2_xxs_q8_k;
    RowsIq2Xs => vecdot::vec_dot_iq2_xs_q8_k;
    RowsIq2S => vecdot::vec_dot_iq2_s_q8_k;
    RowsIq3Xxs => vecdot::vec_dot_iq3_xxs_q8_k;
    RowsIq3S => vecdot::vec_dot_iq3_s_q8_k;
    RowsIq1S => vecdot::vec_dot_iq1_s_q8_k;
    RowsIq1M => vecdot::vec_dot_iq1_m_q8_k;
    RowsTq1_0 => vecdot::vec_dot_tq1_0_q8_k;
    RowsTq2_0 => vecdot::vec_dot_tq2_0_q8_k;
    RowsMxfp4 => vecdot::vec_dot_mxfp4_q8_0;
    RowsNvfp4 => vecdot::vec_dot_nvfp4_q8_0;
    RowsQ1_0 => vecdot::vec_dot_q1_0_q8_0;
    RowsQ2_0 => vecdot::vec_dot_q2_0_q8_0;
}
