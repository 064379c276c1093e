//! The kernels of this module against the portable `vec_dot`s and the exact product
//! (`super::super::row_tests`, where the tolerance is derived), on random blocks (every bit
//! pattern of indices, signs and scales; `-128` activations included), and on blocks at the
//! edge of the integer ranges.

use super::*;
use crate::blocks::F16Bits;
use crate::rng::SplitMix64 as Rng;
use crate::types::GgmlType;
use crate::vecdot;

use super::super::row_tests::{avx2, compare_matmul, compare_rows, random};
use crate::kernels::row_tests::{half, q8_k_values, random_iq1_m as iq1_m, random_q8_k};

fn iq2_xxs(rng: &mut Rng) -> BlockIq2Xxs {
    BlockIq2Xxs {
        d: half(rng),
        ..random(rng)
    }
}

fn iq2_xs(rng: &mut Rng) -> BlockIq2Xs {
    BlockIq2Xs {
        d: half(rng),
        ..random(rng)
    }
}

fn iq2_s(rng: &mut Rng) -> BlockIq2S {
    BlockIq2S {
        d: half(rng),
        ..random(rng)
    }
}

fn iq3_xxs(rng: &mut Rng) -> BlockIq3Xxs {
    BlockIq3Xxs {
        d: half(rng),
        ..random(rng)
    }
}

fn iq3_s(rng: &mut Rng) -> BlockIq3S {
    BlockIq3S {
        d: half(rng),
        ..random(rng)
    }
}

fn iq1_s(rng: &mut Rng) -> BlockIq1S {
    BlockIq1S {
        d: half(rng),
        ..random(rng)
    }
}

macro_rules! grid_tests {
    ($($test:ident: $ty:ident, $rows:ident, $dot:ident, $make:ident;)*) => {$(
        #[test]
        fn $test() {
            let Some(cpu) = avx2() else { return };
            compare_rows(
                GgmlType::$ty,
                1,
                $rows(cpu),
                vecdot::$dot,
                $make,
                random_q8_k,
                q8_k_values,
            );
            compare_matmul(GgmlType::$ty, 1, $make);
        }
    )*};
}

grid_tests! {
    iq2_xxs_equals_portable_and_exact: IQ2_XXS, iq2_xxs_rows, vec_dot_iq2_xxs_q8_k, iq2_xxs;
    iq2_xs_equals_portable_and_exact: IQ2_XS, iq2_xs_rows, vec_dot_iq2_xs_q8_k, iq2_xs;
    iq2_s_equals_portable_and_exact: IQ2_S, iq2_s_rows, vec_dot_iq2_s_q8_k, iq2_s;
    iq3_xxs_equals_portable_and_exact: IQ3_XXS, iq3_xxs_rows, vec_dot_iq3_xxs_q8_k, iq3_xxs;
    iq3_s_equals_portable_and_exact: IQ3_S, iq3_s_rows, vec_dot_iq3_s_q8_k, iq3_s;
    iq1_s_equals_portable_and_exact: IQ1_S, iq1_s_rows, vec_dot_iq1_s_q8_k, iq1_s;
    iq1_m_equals_portable_and_exact: IQ1_M, iq1_m_rows, vec_dot_iq1_m_q8_k, iq1_m;
}

/// `-128` activations against every sign negated: the case that applying the signs to the
/// activations would get wrong, and the largest products of each type.
#[test]
fn negated_points_against_minus_128_are_exact() {
    let Some(cpu) = avx2() else { return };
    let act = BlockQ8K {
        d: 1.0,
        qs: [-128; 256],
        bsums: [-128 * 16; 16],
    };
    let one = F16Bits::from_f32(1.0);
    let mut out = [0.0f32; 1];
    // IQ2_S: index 1023 (the last point) with all 8 signs set, scales 15.
    let w = BlockIq2S {
        d: one,
        qs: [0xff; 64],
        qh: [0xff; 8],
        scales: [0xff; 8],
    };
    (iq2_s_rows(cpu).gemv)(&[w], &[act], &mut out);
    assert_eq!(out[0], vecdot::vec_dot_iq2_s_q8_k(&[w], &[act]));
    assert!(out[0] > 0.0, "negated points times -128 are positive");
    // IQ3_S: index 511 with all signs set, scale 15.
    let w = BlockIq3S {
        d: one,
        qs: [0xff; 64],
        qh: [0xff; 8],
        signs: [0xff; 32],
        scales: [0xff; 4],
    };
    (iq3_s_rows(cpu).gemv)(&[w], &[act], &mut out);
    assert_eq!(out[0], vecdot::vec_dot_iq3_s_q8_k(&[w], &[act]));
    assert!(out[0] > 0.0);
    // IQ2_XXS: sign code 127 (eight negated weights with its parity bit), scale 15.
    let mut qs = [0u8; 64];
    for g in qs.chunks_exact_mut(8) {
        g[..4].fill(0xff);
        g[4..].copy_from_slice(&0xffff_ffffu32.to_le_bytes());
    }
    let w = BlockIq2Xxs { d: one, qs };
    (iq2_xxs_rows(cpu).gemv)(&[w], &[act], &mut out);
    assert_eq!(out[0], vecdot::vec_dot_iq2_xxs_q8_k(&[w], &[act]));
    // IQ1_S: the negative shift at the largest scale.
    let w = BlockIq1S {
        d: one,
        qs: [0xff; 32],
        qh: [0xff; 16],
    };
    (iq1_s_rows(cpu).gemv)(&[w], &[act], &mut out);
    assert_eq!(out[0], vecdot::vec_dot_iq1_s_q8_k(&[w], &[act]));
}
