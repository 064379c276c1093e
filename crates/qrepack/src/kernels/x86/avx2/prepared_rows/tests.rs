use super::*;
use crate::blocks::F16Bits;
use crate::cpu::{CpuFeatures, KernelSet};
use crate::kernel_api::SetToken;
use crate::kernels::row_tests::{
    compare_long_gemv, compare_matmul_on, compare_rows, q8_0s_values, q8_k_extreme_activations,
    q8_k_long_rows, q8_k_values, random, random_q1_0, random_q8_0s, random_q8_k, random_tq1_0,
};
use crate::types::GgmlType;
use crate::vecdot;

#[test]
fn q1_0_equals_portable_and_exact() {
    let Some(cpu) = Avx2::new(CpuFeatures::get()) else {
        return;
    };
    compare_rows(
        GgmlType::Q1_0,
        4,
        q1_0_rows(cpu),
        vecdot::vec_dot_q1_0_q8_0,
        random_q1_0,
        random_q8_0s::<4>,
        q8_0s_values::<4>,
    );
    compare_matmul_on(KernelSet::Avx2, GgmlType::Q1_0, 4, random_q1_0);
}

/// Rows longer than one piece of prepared activations (70 blocks, 8960 columns).
#[test]
fn q1_0_long_rows_and_odd_row_counts() {
    if Avx2::new(CpuFeatures::get()).is_none() {
        return;
    }
    compare_long_gemv(
        GgmlType::Q1_0,
        4,
        70,
        q1_0_prepared_gemv,
        vecdot::vec_dot_q1_0_q8_0,
        random_q1_0,
        random_q8_0s::<4>,
        q8_0s_values::<4>,
    );
}

/// Every weight bit set, then none, against activations of -128 and 127: the sign flips and
/// `|a|` of -128 are exact.
#[test]
fn q1_0_extreme_activations() {
    if Avx2::new(CpuFeatures::get()).is_none() {
        return;
    }
    let one = F16Bits::from_f32(1.0);
    for (byte, act) in [(0xff, -128), (0x00, -128), (0xff, 127), (0x5a, -128)] {
        let w = [BlockQ1_0 {
            d: one,
            qs: [byte; 16],
        }];
        let a = [[BlockQ8_0 {
            d: one,
            qs: [act; 32],
        }; 4]];
        let mut out = [f32::NAN];
        q1_0_prepared_gemv(&w, &a, &mut out);
        assert_eq!(
            out[0],
            vecdot::vec_dot_q1_0_q8_0(&w, &a),
            "byte {byte:#x}, act {act}"
        );
    }
}

#[test]
fn nvfp4_equals_portable_and_exact() {
    let Some(cpu) = Avx2::new(CpuFeatures::get()) else {
        return;
    };
    compare_rows(
        GgmlType::NVFP4,
        4,
        nvfp4_rows(cpu),
        vecdot::vec_dot_nvfp4_q8_0,
        random::<BlockNvfp4>,
        random_q8_0s::<2>,
        q8_0s_values::<2>,
    );
    compare_matmul_on(KernelSet::Avx2, GgmlType::NVFP4, 4, random::<BlockNvfp4>);
}

/// Rows longer than one piece of prepared activations (130 blocks, 8320 columns).
#[test]
fn nvfp4_long_rows_and_odd_row_counts() {
    if Avx2::new(CpuFeatures::get()).is_none() {
        return;
    }
    compare_long_gemv(
        GgmlType::NVFP4,
        4,
        130,
        nvfp4_prepared_gemv,
        vecdot::vec_dot_nvfp4_q8_0,
        random::<BlockNvfp4>,
        random_q8_0s::<2>,
        q8_0s_values::<2>,
    );
}

/// Random blocks (every byte value, beyond the 243 that ggml's quantizer writes), rows longer
/// than a prepared piece, and every byte value in every position against `-128` and `127`
/// activations.
#[test]
fn tq1_0_equals_portable_and_exact() {
    let Some(cpu) = Avx2::new(CpuFeatures::get()) else {
        return;
    };
    let ty = GgmlType::TQ1_0;
    let (rows, dot) = (tq1_0_rows(cpu), vecdot::vec_dot_tq1_0_q8_k);
    compare_rows(ty, 1, rows, dot, random_tq1_0, random_q8_k, q8_k_values);
    compare_matmul_on(KernelSet::Avx2, ty, 1, random_tq1_0);
    q8_k_long_rows(ty, rows.gemv, dot, random_tq1_0);
    let w: Vec<BlockTq1_0> = (0..=255u8)
        .map(|b| BlockTq1_0 {
            qs: [b; 48],
            qh: [b; 4],
            d: F16Bits::from_f32(0.75),
        })
        .collect();
    q8_k_extreme_activations(ty, rows.gemv, dot, &w);
}
