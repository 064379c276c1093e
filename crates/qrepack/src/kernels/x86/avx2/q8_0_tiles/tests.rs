use super::*;
use crate::cpu::{CpuFeatures, KernelSet};
use crate::kernel_api::SetToken;
use crate::kernels::row_tests::{
    compare_matmul_layout, compare_matmul_shapes, random, random_mxfp4, random_q1_0, MatmulShapes,
};
use crate::kernels::x86::q8_0_tile_checks as checks;
use crate::types::GgmlType;
use crate::Layout;

#[test]
fn tiles_equal_portable_and_exact() {
    let Some(cpu) = Avx2::new(CpuFeatures::get()) else {
        return;
    };
    checks::tiles_equal_portable_and_exact(
        nvfp4_tiled_rows(cpu).tiled.expect("tiles"),
        q1_0_tiled_rows(cpu).tiled.expect("tiles"),
        2 * ROWS,
        &[4],
    );
}

#[test]
fn mxfp4_tiles_are_exact() {
    let Some(cpu) = Avx2::new(CpuFeatures::get()) else {
        return;
    };
    checks::mxfp4_tiles_are_exact(mxfp4_tiled_rows(cpu).tiled.expect("tiles"), ROWS, &[4]);
}

#[test]
fn extremes_are_exact() {
    let Some(cpu) = Avx2::new(CpuFeatures::get()) else {
        return;
    };
    checks::extremes_are_exact(
        nvfp4_tiled_rows(cpu).tiled.expect("tiles"),
        q1_0_tiled_rows(cpu).tiled.expect("tiles"),
        2 * ROWS,
    );
}

/// Through `QMatrix::matmul` capped at AVX2: odd row counts (tiles, then the plain GEMM for
/// the rows left over, or no tile at all), rows of 1, 2, 3 and 70 blocks, and batches around
/// the threshold.
#[test]
fn matmul_with_tiles_equals_portable_and_exact() {
    let ns = [1, 2, 3, 4, 5, 7, 8, 9, 12, 15, 16, 17, 33];
    for rows in [1, 7, 9, 17, 21, 33] {
        let shapes = MatmulShapes {
            rows,
            nbs: &[1, 2, 3],
            ns: &ns,
        };
        compare_matmul_shapes(
            KernelSet::Avx2,
            GgmlType::NVFP4,
            4,
            random::<BlockNvfp4>,
            &shapes,
        );
        compare_matmul_shapes(KernelSet::Avx2, GgmlType::Q1_0, 4, random_q1_0, &shapes);
        compare_matmul_shapes(KernelSet::Avx2, GgmlType::MXFP4, 1, random_mxfp4, &shapes);
    }
    let long = MatmulShapes {
        rows: 19,
        nbs: &[70],
        ns: &[8, 17, 33],
    };
    compare_matmul_shapes(
        KernelSet::Avx2,
        GgmlType::NVFP4,
        4,
        random::<BlockNvfp4>,
        &long,
    );
    compare_matmul_shapes(KernelSet::Avx2, GgmlType::Q1_0, 4, random_q1_0, &long);
    compare_matmul_shapes(KernelSet::Avx2, GgmlType::MXFP4, 1, random_mxfp4, &long);
}

/// `mxfp4_8x8` capped at AVX2 (the GEMV, and the GEMM on unsigned weights at every batch)
/// against the portable kernels and the exact product (one, two, three and five row groups; 1,
/// 3 and 70 blocks).
#[test]
fn mxfp4_8x8_equals_portable_and_exact() {
    for rows in [8, 16, 24, 40] {
        let shapes = MatmulShapes {
            rows,
            nbs: &[1, 3, 70],
            ns: &[1, 4, 7, 8, 9, 12, 17, 33],
        };
        compare_matmul_layout(
            Layout::MXFP4_8x8,
            KernelSet::Avx2,
            GgmlType::MXFP4,
            1,
            random_mxfp4,
            &shapes,
        );
    }
}
