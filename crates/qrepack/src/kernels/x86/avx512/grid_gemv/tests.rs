//! The GEMVs against the portable `vec_dot`s and the exact product (`kernels::row_tests`, where
//! the tolerance is derived) on random blocks (every bit pattern of indices, signs, shifts and
//! scales; `-128` activations included), on rows longer than one piece of prepared activations
//! with 1 to 9 rows, and on blocks at the edges of the integer ranges (`-128` and `127`
//! activations).

use super::*;
use crate::blocks::BlockIq3S;
use crate::cpu::{CpuFeatures, KernelSet};
use crate::kernel_api::SetToken;
use crate::kernels::row_tests::{
    compare_matmul_on, compare_rows, half, q8_k_extreme_activations as extreme_activations,
    q8_k_long_rows as long_rows, q8_k_values, random, random_iq1_m, random_q8_k,
};
use crate::rng::SplitMix64 as Rng;
use crate::types::GgmlType;
use crate::vecdot;

fn iq2_s(rng: &mut Rng) -> BlockIq2S {
    BlockIq2S {
        d: half(rng),
        ..random(rng)
    }
}

#[test]
fn iq2_s_equals_portable_and_exact() {
    let Some(cpu) = Avx512::new(CpuFeatures::get()) else {
        return;
    };
    let ty = GgmlType::IQ2_S;
    let (rows, dot) = (iq2_s_rows(cpu), vecdot::vec_dot_iq2_s_q8_k);
    compare_rows(ty, 1, rows, dot, iq2_s, random_q8_k, q8_k_values);
    compare_matmul_on(KernelSet::Avx512, ty, 1, iq2_s);
    long_rows(ty, rows.gemv, dot, iq2_s);
    // Largest indices and scales, every weight negated, then none.
    let mut rng = Rng::new(5);
    let w: Vec<BlockIq2S> = [0xff, 0]
        .map(|s| BlockIq2S {
            d: half(&mut rng),
            qs: std::array::from_fn(|i| if i < 32 { 0xff } else { s }),
            qh: [0xff; 8],
            scales: [0xff; 8],
        })
        .to_vec();
    extreme_activations(ty, rows.gemv, dot, &w);
}

fn iq3_s(rng: &mut Rng) -> BlockIq3S {
    BlockIq3S {
        d: half(rng),
        ..random(rng)
    }
}

#[test]
fn iq3_s_equals_portable_and_exact() {
    let Some(cpu) = Avx512::new(CpuFeatures::get()) else {
        return;
    };
    let ty = GgmlType::IQ3_S;
    let (rows, dot) = (iq3_s_rows(cpu), vecdot::vec_dot_iq3_s_q8_k);
    compare_rows(ty, 1, rows, dot, iq3_s, random_q8_k, q8_k_values);
    compare_matmul_on(KernelSet::Avx512, ty, 1, iq3_s);
    long_rows(ty, rows.gemv, dot, iq3_s);
    // Largest indices and scales, every weight negated, then none.
    let mut rng = Rng::new(9);
    let w: Vec<BlockIq3S> = [0xff, 0]
        .map(|s| BlockIq3S {
            d: half(&mut rng),
            qs: [0xff; 64],
            qh: [0xff; 8],
            signs: [s; 32],
            scales: [0xff; 4],
        })
        .to_vec();
    extreme_activations(ty, rows.gemv, dot, &w);
}

#[test]
fn iq1_m_equals_portable_and_exact() {
    let Some(cpu) = Avx512::new(CpuFeatures::get()) else {
        return;
    };
    let ty = GgmlType::IQ1_M;
    let (rows, dot) = (iq1_m_rows(cpu), vecdot::vec_dot_iq1_m_q8_k);
    compare_rows(ty, 1, rows, dot, random_iq1_m, random_q8_k, q8_k_values);
    compare_matmul_on(KernelSet::Avx512, ty, 1, random_iq1_m);
    long_rows(ty, rows.gemv, dot, random_iq1_m);
    // Largest indices and scales with every shift negative, then every shift positive.
    let mut rng = Rng::new(7);
    let w: Vec<BlockIq1M> = [0xff, 0x77]
        .map(|qh| {
            let mut b = random_iq1_m(&mut rng);
            b.qs = [0xff; 32];
            b.qh = [qh; 16];
            for pair in b.scales.chunks_exact_mut(2) {
                pair[0] = 0xff;
                pair[1] |= 0x0f;
            }
            b
        })
        .to_vec();
    extreme_activations(ty, rows.gemv, dot, &w);
}
