//! The kernels of this module against the portable `vec_dot`s and the exact product
//! (`super::super::row_tests`, where the tolerance is derived), on random blocks (every quant
//! bit pattern, `-128` activations included), and on blocks at the edge of the integer ranges.

use super::*;
use crate::blocks::F16Bits;
use crate::rng::SplitMix64 as Rng;
use crate::types::GgmlType;
use crate::vecdot;

use super::super::row_tests::{avx2, compare_matmul, compare_rows, random};
use crate::cpu::KernelSet;
use crate::kernels::row_tests::{compare_matmul_shapes, MatmulShapes};
use crate::kernels::row_tests::{
    q8_0_values, q8_0s_values, q8_k_values, random_mxfp4, random_q1_0, random_q2_0, random_q8_0,
    random_q8_0s, random_q8_k, random_tq1_0, random_tq2_0,
};

/// NVFP4 blocks with every scale byte (zero, subnormal, `0x7f` and the ignored top bit
/// included) and every quant code.
fn random_nvfp4(rng: &mut Rng) -> BlockNvfp4 {
    random(rng)
}

#[test]
fn ternary_types_equal_portable_and_exact() {
    let Some(cpu) = avx2() else { return };
    compare_rows(
        GgmlType::TQ2_0,
        1,
        tq2_0_rows(cpu),
        vecdot::vec_dot_tq2_0_q8_k,
        random_tq2_0,
        random_q8_k,
        q8_k_values,
    );
    compare_matmul(GgmlType::TQ2_0, 1, random_tq2_0);
    compare_rows(
        GgmlType::TQ1_0,
        1,
        tq1_0_rows(cpu),
        vecdot::vec_dot_tq1_0_q8_k,
        random_tq1_0,
        random_q8_k,
        q8_k_values,
    );
    compare_matmul(GgmlType::TQ1_0, 1, random_tq1_0);
}

#[test]
fn nvfp4_equals_portable_and_exact() {
    let Some(cpu) = avx2() else { return };
    compare_rows(
        GgmlType::NVFP4,
        4,
        nvfp4_rows(cpu),
        vecdot::vec_dot_nvfp4_q8_0,
        random_nvfp4,
        random_q8_0s::<2>,
        q8_0s_values::<2>,
    );
    compare_matmul(GgmlType::NVFP4, 4, random_nvfp4);
}

#[test]
fn q1_0_and_q2_0_equal_portable_and_exact() {
    let Some(cpu) = avx2() else { return };
    compare_rows(
        GgmlType::Q1_0,
        4,
        q1_0_rows(cpu),
        vecdot::vec_dot_q1_0_q8_0,
        random_q1_0,
        random_q8_0s::<4>,
        q8_0s_values::<4>,
    );
    compare_matmul(GgmlType::Q1_0, 4, random_q1_0);
    compare_rows(
        GgmlType::Q2_0,
        2,
        q2_0_rows(cpu),
        vecdot::vec_dot_q2_0_q8_0,
        random_q2_0,
        random_q8_0s::<2>,
        q8_0s_values::<2>,
    );
    compare_matmul(GgmlType::Q2_0, 2, random_q2_0);
}

/// Every scale byte of NVFP4 (as the portable decoder reads it), and the extreme quants of the
/// 1- and 2-bit and ternary types against `-128`.
#[test]
fn lowbit_extremes_are_exact() {
    let Some(cpu) = avx2() else { return };
    let one = F16Bits::from_f32(1.0);
    let a8 = BlockQ8_0 {
        d: one,
        qs: [-128; 32],
    };
    let mut out = [0.0f32; 1];
    for byte in 0..=255u8 {
        // Scale group 0 only, every quant 12 (code 7).
        let w = BlockNvfp4 {
            d: [byte, 0, 0, 0],
            qs: [0x77; 32],
        };
        let want = 16.0 * crate::blocks::ue4m3_half_to_f32(byte) * 12.0 * -128.0;
        (nvfp4_rows(cpu).gemv)(&[w], &[[a8; 2]], &mut out);
        assert_eq!(out[0], want, "NVFP4 scale byte {byte:#04x}");
        assert_eq!(vecdot::vec_dot_nvfp4_q8_0(&[w], &[[a8; 2]]), want);
    }
    for (bits, sign) in [(0x00u8, -1.0f32), (0xff, 1.0)] {
        let w = BlockQ1_0 {
            d: one,
            qs: [bits; 16],
        };
        (q1_0_rows(cpu).gemv)(&[w], &[[a8; 4]], &mut out);
        assert_eq!(out[0], 128.0 * sign * -128.0);
    }
    for (bits, q) in [(0x00u8, -1.0f32), (0xff, 2.0)] {
        let w = BlockQ2_0 {
            d: one,
            qs: [bits; 16],
        };
        (q2_0_rows(cpu).gemv)(&[w], &[[a8; 2]], &mut out);
        assert_eq!(out[0], 64.0 * q * -128.0);
    }
    let ak = BlockQ8K {
        d: 1.0,
        qs: [-128; 256],
        bsums: [-128 * 16; 16],
    };
    let w = BlockTq2_0 {
        qs: [0xff; 64],
        d: one,
    };
    (tq2_0_rows(cpu).gemv)(&[w], &[ak], &mut out);
    assert_eq!(out[0], 256.0 * 2.0 * -128.0);
    // TQ1_0: byte 0 is every digit 0 (weight -1).
    let w = BlockTq1_0 {
        qs: [0; 48],
        qh: [0; 4],
        d: one,
    };
    (tq1_0_rows(cpu).gemv)(&[w], &[ak], &mut out);
    assert_eq!(out[0], 256.0 * 128.0);
}

#[test]
fn mxfp4_equals_portable_and_exact() {
    let Some(cpu) = avx2() else { return };
    compare_rows(
        GgmlType::MXFP4,
        1,
        mxfp4_rows(cpu),
        vecdot::vec_dot_mxfp4_q8_0,
        random_mxfp4,
        random_q8_0,
        q8_0_values,
    );
    compare_matmul(GgmlType::MXFP4, 1, random_mxfp4);
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

/// The AVX-512 16-row tiles of the ternary types through `QMatrix::matmul` (see the grid
/// types' `tile_tests`): 37 rows, 1 to 3 blocks, 4 to 9, 15 to 17, 31 to 33 and 49 activation
/// rows (TQ2_0 takes tiles from 2 quads on, TQ1_0 from 8); for TQ2_0, whose tiles are made by
/// transposes of 16 rows' quants, also odd row counts (no tile, one tile and a rest) and rows
/// of 70 blocks.
#[test]
fn ternary_tiles_equal_portable_and_exact() {
    let ns = [4, 5, 6, 7, 8, 9, 15, 16, 17, 31, 32, 33, 49];
    let shapes = MatmulShapes {
        rows: 37,
        nbs: &[1, 2, 3],
        ns: &ns,
    };
    for set in [KernelSet::Avx512, KernelSet::Avx2] {
        compare_matmul_shapes(set, GgmlType::TQ1_0, 1, random_tq1_0, &shapes);
        compare_matmul_shapes(set, GgmlType::TQ2_0, 1, random_tq2_0, &shapes);
    }
    for rows in [1, 15, 17, 33] {
        let shapes = MatmulShapes {
            rows,
            nbs: &[1, 2, 3],
            ns: &[7, 8, 9, 16, 33],
        };
        compare_matmul_shapes(KernelSet::Avx512, GgmlType::TQ2_0, 1, random_tq2_0, &shapes);
    }
    let long = MatmulShapes {
        rows: 33,
        nbs: &[70],
        ns: &[8, 17],
    };
    compare_matmul_shapes(KernelSet::Avx512, GgmlType::TQ2_0, 1, random_tq2_0, &long);
}
