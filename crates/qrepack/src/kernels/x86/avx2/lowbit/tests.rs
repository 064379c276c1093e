//! The kernels of this module against the portable `vec_dot`s and the exact product
//! (`super::super::row_tests`, where the tolerance is derived), on random blocks (every quant
//! bit pattern, `-128` activations included), and on blocks at the edge of the integer ranges.

use super::*;
use crate::blocks::F16Bits;
use crate::rng::SplitMix64 as Rng;
use crate::types::GgmlType;
use crate::vecdot;

use super::super::row_tests::{avx2, compare_matmul, compare_rows, random, scale};

fn random_q8_0(rng: &mut Rng) -> BlockQ8_0 {
    BlockQ8_0 {
        d: F16Bits::from_f32(scale(rng)),
        ..random(rng)
    }
}

fn q8_0_values(a: &[BlockQ8_0]) -> Vec<f64> {
    a.iter()
        .flat_map(|b| b.qs.map(|q| f64::from(b.d.to_f32()) * f64::from(q)))
        .collect()
}

/// MXFP4 blocks with exponents 2^-20 .. 2^11: every code of the quants, finite products.
fn random_mxfp4(rng: &mut Rng) -> BlockMxfp4 {
    BlockMxfp4 {
        e: 108 + (rng.next_u64() % 32) as u8,
        ..random(rng)
    }
}

#[test]
fn mxfp4_equals_portable_and_exact() {
    let Some(cpu) = avx2() else { return };
    compare_rows(
        GgmlType::MXFP4,
        mxfp4_rows(cpu),
        vecdot::vec_dot_mxfp4_q8_0,
        random_mxfp4,
        random_q8_0,
        q8_0_values,
    );
    compare_matmul(GgmlType::MXFP4, random_mxfp4);
}

/// Every weight ±12 (codes 7 and 15) against `-128`: the largest pair sums of the products.
#[test]
fn mxfp4_extremes_are_exact() {
    let Some(cpu) = avx2() else { return };
    let a = BlockQ8_0 {
        d: F16Bits::from_f32(1.0),
        qs: [-128; 32],
    };
    for (code, value) in [(0x77u8, 12.0f32), (0xff, -12.0)] {
        // e = 127: the halved scale 2^-1 times the doubled values.
        let w = BlockMxfp4 {
            e: 127,
            qs: [code; 16],
        };
        let want = 32.0 * 0.5 * value * -128.0;
        let mut out = [0.0f32; 1];
        (mxfp4_rows(cpu).gemv)(&[w], &[a], &mut out);
        assert_eq!(out[0], want);
        assert_eq!(vecdot::vec_dot_mxfp4_q8_0(&[w], &[a]), want);
    }
}
