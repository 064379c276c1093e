//! The ternary tiles against the portable `vec_dot`s and the exact product (tolerance from
//! `crate::kernels::row_tests`): one tile straight through its kernels, the extreme quants and
//! activations, and `QMatrix::matmul` capped at AVX2 around the tile threshold.

use bytemuck::Pod;

use super::*;
use crate::blocks::F16Bits;
use crate::cpu::{CpuFeatures, KernelSet};
use crate::kernel_api::SetToken;
use crate::kernels::row_tests::{
    check, compare_matmul_shapes, exact_dot, q8_k_values, random_q8_k, random_tq1_0, random_tq2_0,
    MatmulShapes,
};
use crate::rng::SplitMix64 as Rng;
use crate::types::GgmlType;
use crate::vecdot;

/// One tile (of `tiled.groups` rows) of each block count in `nbs` times one quad, against `portable` and the
/// exact product.
fn compare_tile<W: Pod>(
    ty: GgmlType,
    tiled: TiledGemm<W, BlockQ8K>,
    portable: fn(&[W], &[BlockQ8K]) -> f32,
    weight: impl Fn(&mut Rng) -> W,
    w_override: Option<W>,
) {
    let mut rng = Rng::new(0x7e57 ^ ty.id() as u64);
    for nb in [1, 2, 3, 17] {
        let rows = tiled.groups;
        let w: Vec<W> = (0..rows * nb)
            .map(|_| w_override.unwrap_or_else(|| weight(&mut rng)))
            .collect();
        let mut tile = vec![0u64; (tiled.tile_words)(nb)];
        (tiled.make_tile)(&w, &mut tile);
        let a: Vec<BlockQ8K> = (0..4 * nb).map(|_| random_q8_k(&mut rng)).collect();
        let mut out = vec![f32::NAN; 4 * rows];
        (tiled.gemm)(&w, &tile, &a, &mut out);
        for m in 0..4 {
            let arow = &a[m * nb..(m + 1) * nb];
            let values = q8_k_values(arow);
            for r in 0..rows {
                let row = &w[r * nb..(r + 1) * nb];
                let what = format!("{ty} tile blocks={nb} act {m} row {r}");
                let exact = exact_dot(ty, bytemuck::cast_slice(row), &values);
                check(&what, out[m * rows + r], portable(row, arow), exact, nb);
            }
        }
    }
}

#[test]
fn tiles_equal_portable_and_exact() {
    let Some(cpu) = Avx2::new(CpuFeatures::get()) else {
        return;
    };
    let tq2_0 = tq2_0_tiled_rows(cpu).tiled.expect("tiles");
    let tq1_0 = tq1_0_tiled_rows(cpu).tiled.expect("tiles");
    compare_tile(
        GgmlType::TQ2_0,
        tq2_0,
        vecdot::vec_dot_tq2_0_q8_k,
        random_tq2_0,
        None,
    );
    compare_tile(
        GgmlType::TQ1_0,
        tq1_0,
        vecdot::vec_dot_tq1_0_q8_k,
        random_tq1_0,
        None,
    );
    // every quant 3 (the largest `maddubs` pairs) and 0, against random activations
    let one = F16Bits::from_f32(1.0);
    for qs in [0xffu8, 0x00] {
        let w = BlockTq2_0 {
            qs: [qs; 64],
            d: one,
        };
        compare_tile(
            GgmlType::TQ2_0,
            tq2_0,
            vecdot::vec_dot_tq2_0_q8_k,
            random_tq2_0,
            Some(w),
        );
    }
}

/// Every quant `3` against activations of `-128` and `127`: the 16-bit sums at their extremes,
/// exact to the last bit.
#[test]
fn extremes_are_exact() {
    let Some(cpu) = Avx2::new(CpuFeatures::get()) else {
        return;
    };
    let tiled = tq2_0_tiled_rows(cpu).tiled.expect("tiles");
    let one = F16Bits::from_f32(1.0);
    for q in [-128i8, 127] {
        let w = vec![
            BlockTq2_0 {
                qs: [0xff; 64],
                d: one
            };
            tiled.groups
        ];
        let a = BlockQ8K {
            d: 1.0,
            qs: [q; 256],
            bsums: [16 * i16::from(q); 16],
        };
        let acts = [a; 4];
        let mut tile = vec![0u64; (tiled.tile_words)(1)];
        (tiled.make_tile)(&w, &mut tile);
        let mut out = vec![f32::NAN; 4 * tiled.groups];
        (tiled.gemm)(&w, &tile, &acts, &mut out);
        let want = vecdot::vec_dot_tq2_0_q8_k(&w[..1], &acts[..1]);
        assert_eq!(want, 2.0 * 256.0 * f32::from(q));
        assert!(out.iter().all(|&o| o == want), "act {q}: {out:?}");
    }
}

/// Through `QMatrix::matmul` capped at AVX2: row counts with and without whole tiles, rows of 1,
/// 2 and 5 blocks, and batches around the threshold.
#[test]
fn matmul_with_tiles_equals_portable_and_exact() {
    let ns = [1, 4, 5, 7, 8, 9, 12, 16, 17, 33];
    for rows in [7, 9, 16, 17, 21, 33] {
        let shapes = MatmulShapes {
            rows,
            nbs: &[1, 2, 5],
            ns: &ns,
        };
        compare_matmul_shapes(KernelSet::Avx2, GgmlType::TQ2_0, 1, random_tq2_0, &shapes);
        compare_matmul_shapes(KernelSet::Avx2, GgmlType::TQ1_0, 1, random_tq1_0, &shapes);
    }
}
