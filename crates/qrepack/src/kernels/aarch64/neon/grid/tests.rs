//! The kernels of this module against the portable `vec_dot`s and the exact product
//! (`crate::kernels::row_tests`, where the tolerance is derived), on random blocks (every bit
//! pattern of indices, signs and scales; `-128` activations included), and on blocks at the
//! edge of the integer ranges.

use super::*;
use crate::cpu::CpuFeatures;
use crate::kernel_api::SetToken;
use crate::kernels::row_tests::{
    compare_matmul_on, compare_rows, half, q8_k_values, random, random_iq1_m, random_q8_k,
};
use crate::quant::grids::KSIGNS_IQ2XS;
use crate::rng::SplitMix64 as Rng;
use crate::types::GgmlType;
use crate::vecdot;

fn neon() -> Neon {
    Neon::new(CpuFeatures::get()).expect("every AArch64 CPU has NEON")
}

/// Random bytes with a sane f16 scale.
macro_rules! with_half {
    ($($name:ident: $block:ident;)*) => {$(
        fn $name(rng: &mut Rng) -> $block {
            $block {
                d: half(rng),
                ..random(rng)
            }
        }
    )*};
}

with_half! {
    iq2_xxs: BlockIq2Xxs;
    iq2_xs: BlockIq2Xs;
    iq2_s: BlockIq2S;
    iq3_xxs: BlockIq3Xxs;
    iq3_s: BlockIq3S;
    iq1_s: BlockIq1S;
}

macro_rules! grid_tests {
    ($($test:ident: $ty:ident, $rows:ident, $dot:ident, $make:ident;)*) => {$(
        #[test]
        fn $test() {
            compare_rows(
                GgmlType::$ty,
                1,
                $rows(neon()),
                vecdot::$dot,
                $make,
                random_q8_k,
                q8_k_values,
            );
            compare_matmul_on(KernelSet::Neon, GgmlType::$ty, 1, $make);
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
    iq1_m_equals_portable_and_exact: IQ1_M, iq1_m_rows, vec_dot_iq1_m_q8_k, random_iq1_m;
}

/// The parity rule gives ggml's sign table for every code.
#[test]
fn sign_bytes_are_ggml_table() {
    let codes: [u8; 128] = std::array::from_fn(|i| i as u8);
    let mut got = [0u8; 128];
    for (c, o) in codes.chunks_exact(16).zip(got.chunks_exact_mut(16)) {
        // SAFETY: NEON (every AArch64 CPU); both chunks are 16 bytes.
        unsafe { vst1q_u8(o.as_mut_ptr(), sign_bytes(vld1q_u8(c.as_ptr()))) };
    }
    assert_eq!(got, KSIGNS_IQ2XS);
}

/// `-128` activations against every sign negated and the largest scales and points: the
/// largest products of each type, exact and equal to the portable kernels.
#[test]
fn negated_points_against_minus_128_are_exact() {
    let cpu = neon();
    let act = BlockQ8K {
        d: 1.0,
        qs: [-128; 256],
        bsums: [-128 * 16; 16],
    };
    let one = F16Bits::from_f32(1.0);
    let mut out = [0.0f32; 1];
    let w = BlockIq2S {
        d: one,
        qs: [0xff; 64],
        qh: [0xff; 8],
        scales: [0xff; 8],
    };
    (iq2_s_rows(cpu).gemv)(&[w], &[act], &mut out);
    assert_eq!(out[0], vecdot::vec_dot_iq2_s_q8_k(&[w], &[act]));
    assert!(out[0] > 0.0, "negated points times -128 are positive");
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
    // Sign code 127 (eight negated weights with its parity bit), scale 15.
    let mut qs = [0u8; 64];
    for g in qs.chunks_exact_mut(8) {
        g[..4].fill(0xff);
        g[4..].copy_from_slice(&0xffff_ffffu32.to_le_bytes());
    }
    let w = BlockIq2Xxs { d: one, qs };
    (iq2_xxs_rows(cpu).gemv)(&[w], &[act], &mut out);
    assert_eq!(out[0], vecdot::vec_dot_iq2_xxs_q8_k(&[w], &[act]));
    let w = BlockIq2Xs {
        d: one,
        qs: [0xff; 64],
        scales: [0xff; 8],
    };
    (iq2_xs_rows(cpu).gemv)(&[w], &[act], &mut out);
    assert_eq!(out[0], vecdot::vec_dot_iq2_xs_q8_k(&[w], &[act]));
    let w = BlockIq3Xxs {
        d: one,
        qs: [0xff; 96],
    };
    (iq3_xxs_rows(cpu).gemv)(&[w], &[act], &mut out);
    assert_eq!(out[0], vecdot::vec_dot_iq3_xxs_q8_k(&[w], &[act]));
    // IQ1_S and IQ1_M: negative shifts at the largest scale.
    let w = BlockIq1S {
        d: one,
        qs: [0xff; 32],
        qh: [0xff; 16],
    };
    (iq1_s_rows(cpu).gemv)(&[w], &[act], &mut out);
    assert_eq!(out[0], vecdot::vec_dot_iq1_s_q8_k(&[w], &[act]));
    let mut w = BlockIq1M {
        qs: [0xff; 32],
        qh: [0xff; 16],
        scales: [0xff; 8],
    };
    // Block scale 1.0 (0x3c00) in the top nibbles of the scale words.
    for (k, nib) in [0x0u8, 0x0, 0xc, 0x3].into_iter().enumerate() {
        w.scales[2 * k + 1] = 0x0f | (nib << 4);
    }
    (iq1_m_rows(cpu).gemv)(&[w], &[act], &mut out);
    assert_eq!(out[0], vecdot::vec_dot_iq1_m_q8_k(&[w], &[act]));
    assert_ne!(out[0], 0.0);
}

/// The dotprod rows (the same bodies with `sdot`), where the CPU has the set.
#[test]
fn sdot_rows_equal_portable_and_exact() {
    let Some(cpu) = crate::kernels::aarch64::Dotprod::new(CpuFeatures::get()) else {
        return;
    };
    macro_rules! check {
        ($($ty:ident, $rows:ident, $dot:ident, $make:ident;)*) => {$(
            compare_rows(
                GgmlType::$ty,
                1,
                sdot::$rows(cpu),
                vecdot::$dot,
                $make,
                random_q8_k,
                q8_k_values,
            );
            compare_matmul_on(KernelSet::Dotprod, GgmlType::$ty, 1, $make);
        )*};
    }
    check! {
        IQ2_XXS, iq2_xxs_rows, vec_dot_iq2_xxs_q8_k, iq2_xxs;
        IQ2_XS, iq2_xs_rows, vec_dot_iq2_xs_q8_k, iq2_xs;
        IQ2_S, iq2_s_rows, vec_dot_iq2_s_q8_k, iq2_s;
        IQ3_XXS, iq3_xxs_rows, vec_dot_iq3_xxs_q8_k, iq3_xxs;
        IQ3_S, iq3_s_rows, vec_dot_iq3_s_q8_k, iq3_s;
        IQ1_S, iq1_s_rows, vec_dot_iq1_s_q8_k, iq1_s;
        IQ1_M, iq1_m_rows, vec_dot_iq1_m_q8_k, random_iq1_m;
    }
    let act = BlockQ8K {
        d: 1.0,
        qs: [-128; 256],
        bsums: [-128 * 16; 16],
    };
    let w = BlockIq2S {
        d: F16Bits::from_f32(1.0),
        qs: [0xff; 64],
        qh: [0xff; 8],
        scales: [0xff; 8],
    };
    let mut out = [0.0f32; 1];
    (sdot::iq2_s_rows(cpu).gemv)(&[w], &[act], &mut out);
    assert_eq!(out[0], vecdot::vec_dot_iq2_s_q8_k(&[w], &[act]));
}
