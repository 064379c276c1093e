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
use crate::cpu::KernelSet;
use crate::kernels::row_tests::{compare_matmul_on, compare_matmul_shapes, MatmulShapes};
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

/// The per-call tiles (AVX2, and AVX-512 VNNI where the CPU has it) through `QMatrix::matmul`:
/// 37 rows (tiles and a row left over for the plain GEMM), rows of 1 to 3 blocks, 4 to 9
/// activation rows (one or two quads, with and without GEMV rows after them) and 33 (quads in
/// pairs and a single one), every third with all quants at `-128` or `127`; and 7 rows on
/// AVX-512, short of one of its tiles.
macro_rules! tile_tests {
    ($($test:ident: $ty:ident, $make:ident;)*) => {$(
        #[test]
        fn $test() {
            let shapes = MatmulShapes { rows: 37, nbs: &[1, 2, 3], ns: &[4, 5, 6, 7, 8, 9, 33] };
            for set in [KernelSet::Avx512, KernelSet::Avx2] {
                compare_matmul_shapes(set, GgmlType::$ty, 1, $make, &shapes);
            }
            // Fewer rows than one 16-row tile: every row on the plain GEMM.
            compare_matmul_on(KernelSet::Avx512, GgmlType::$ty, 1, $make);
        }
    )*};
}

tile_tests! {
    iq2_xxs_tiles_equal_portable_and_exact: IQ2_XXS, iq2_xxs;
    iq2_xs_tiles_equal_portable_and_exact: IQ2_XS, iq2_xs;
    iq2_s_tiles_equal_portable_and_exact: IQ2_S, iq2_s;
    iq3_xxs_tiles_equal_portable_and_exact: IQ3_XXS, iq3_xxs;
    iq3_s_tiles_equal_portable_and_exact: IQ3_S, iq3_s;
    iq1_s_tiles_equal_portable_and_exact: IQ1_S, iq1_s;
    iq1_m_tiles_equal_portable_and_exact: IQ1_M, iq1_m;
}

/// The tiles store a grid value plus 64 as an unsigned byte whose `maddubs` pairs must not
/// saturate: that needs every grid magnitude at most 62 (and the IQ1 grid's values in -1..=1).
#[test]
fn grid_magnitudes_fit_the_tile_bias() {
    use crate::quant::grids::{
        IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID,
    };
    let bytes8 = |g: &[u64]| -> Vec<i8> {
        g.iter()
            .flat_map(|p| p.to_le_bytes())
            .map(|b| b as i8)
            .collect()
    };
    let bytes4 = |g: &[u32]| -> Vec<i8> {
        g.iter()
            .flat_map(|p| p.to_le_bytes())
            .map(|b| b as i8)
            .collect()
    };
    let mut largest = 0;
    for v in [
        bytes8(&IQ2XXS_GRID),
        bytes8(&IQ2XS_GRID),
        bytes8(&IQ2S_GRID),
        bytes4(&IQ3XXS_GRID),
        bytes4(&IQ3S_GRID),
    ] {
        largest = largest.max(v.iter().map(|b| b.unsigned_abs()).max().expect("points"));
    }
    assert!(largest <= 62, "largest grid magnitude {largest}");
    assert_eq!(largest, 62, "the bound is tight (IQ3's largest value)");
    assert!(bytes8(&IQ1S_GRID).iter().all(|b| (-1..=1).contains(b)));
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

/// The GEMVs on prepared activations, whose blocks' indices or sign words are worked out
/// eight blocks ahead, on rows of 70 and 130 blocks (several pieces of prepared blocks, the
/// last chunk ahead partial) and 1 to 9 rows.
#[test]
fn prepared_gemvs_on_long_rows() {
    use crate::kernels::row_tests::q8_k_long_rows;
    let Some(cpu) = avx2() else { return };
    let iq1_s_gemv = iq1_s_rows(cpu).gemv;
    q8_k_long_rows(
        GgmlType::IQ1_S,
        iq1_s_gemv,
        vecdot::vec_dot_iq1_s_q8_k,
        iq1_s,
    );
    let iq1_m_gemv = iq1_m_rows(cpu).gemv;
    q8_k_long_rows(
        GgmlType::IQ1_M,
        iq1_m_gemv,
        vecdot::vec_dot_iq1_m_q8_k,
        iq1_m,
    );
    let iq2_xxs_gemv = iq2_xxs_rows(cpu).gemv;
    q8_k_long_rows(
        GgmlType::IQ2_XXS,
        iq2_xxs_gemv,
        vecdot::vec_dot_iq2_xxs_q8_k,
        iq2_xxs,
    );
    let iq2_xs_gemv = iq2_xs_rows(cpu).gemv;
    q8_k_long_rows(
        GgmlType::IQ2_XS,
        iq2_xs_gemv,
        vecdot::vec_dot_iq2_xs_q8_k,
        iq2_xs,
    );
    let iq3_s_gemv = iq3_s_rows(cpu).gemv;
    q8_k_long_rows(
        GgmlType::IQ3_S,
        iq3_s_gemv,
        vecdot::vec_dot_iq3_s_q8_k,
        iq3_s,
    );
}
