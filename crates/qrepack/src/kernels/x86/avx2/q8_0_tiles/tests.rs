use super::*;
use crate::blocks::F16Bits;
use crate::cpu::{CpuFeatures, KernelSet};
use crate::kernel_api::SetToken;
use crate::kernels::row_tests::{
    check, compare_matmul_shapes, exact_dot, q8_0s_values, random, random_q1_0, random_q8_0s,
    MatmulShapes,
};
use crate::rng::SplitMix64 as Rng;
use crate::types::GgmlType;
use crate::vecdot;

/// One tile of 8 rows of `nb` blocks times one quad, straight through the tile kernels,
/// against the portable `vec_dot` and the exact product.
fn compare_tile<W: DecodeChunks>(
    ty: GgmlType,
    kernels: Kernels<W, W::Act, W::Act>,
    portable: fn(&[W], &[W::Act]) -> f32,
    weight: impl Fn(&mut Rng) -> W,
    act: impl Fn(&mut Rng) -> W::Act,
    act_values: impl Fn(&[W::Act]) -> Vec<f64>,
    nbs: &[usize],
) {
    let tiled = kernels.tiled.expect("tiles");
    let mut rng = Rng::new(0x2a11e ^ ty.id() as u64);
    for &nb in nbs {
        let w: Vec<W> = (0..ROWS * nb).map(|_| weight(&mut rng)).collect();
        let mut tile = vec![0u64; (tiled.tile_words)(nb)];
        (tiled.make_tile)(&w, &mut tile);
        let a: Vec<W::Act> = (0..4 * nb).map(|_| act(&mut rng)).collect();
        let mut out = vec![f32::NAN; 4 * ROWS];
        (tiled.gemm)(&w, &tile, &a, &mut out);
        for m in 0..4 {
            let arow = &a[m * nb..(m + 1) * nb];
            let values = act_values(arow);
            for r in 0..ROWS {
                let row = &w[r * nb..(r + 1) * nb];
                let what = format!("{ty} avx2 tile blocks={nb} act {m} row {r}");
                let exact = exact_dot(ty, bytemuck::cast_slice(row), &values);
                check(&what, out[m * ROWS + r], portable(row, arow), exact, 4 * nb);
            }
        }
    }
}

#[test]
fn tiles_equal_portable_and_exact() {
    let Some(cpu) = Avx2::new(CpuFeatures::get()) else {
        return;
    };
    // 130 NVFP4 blocks are 260 chunks: whole pieces of flipped activations and a rest
    compare_tile(
        GgmlType::NVFP4,
        nvfp4_tiled_rows(cpu),
        vecdot::vec_dot_nvfp4_q8_0,
        random::<BlockNvfp4>,
        random_q8_0s::<2>,
        q8_0s_values::<2>,
        &[1, 2, 3, 8, 70, 130],
    );
    compare_tile(
        GgmlType::Q1_0,
        q1_0_tiled_rows(cpu),
        vecdot::vec_dot_q1_0_q8_0,
        random_q1_0,
        random_q8_0s::<4>,
        q8_0s_values::<4>,
        &[1, 2, 3, 9, 70],
    );
}

/// The largest products: every weight at its largest magnitude, both signs, against
/// activations of `-128` and `127`, where the 16-bit sums and a lane's start are at their
/// extremes.
#[test]
fn extremes_are_exact() {
    let Some(cpu) = Avx2::new(CpuFeatures::get()) else {
        return;
    };
    let one = F16Bits::from_f32(1.0);
    let acts = |q: i8| -> [BlockQ8_0; 4] {
        [BlockQ8_0 {
            d: one,
            qs: [q; 32],
        }; 4]
    };
    for q in [-128i8, 127] {
        // NVFP4: code 7 (12) and 15 (-12), scale byte 0x38 (1.0 halved: 0.5)
        for code in [0x77u8, 0xff, 0x7f] {
            let w = [BlockNvfp4 {
                d: [0x38; 4],
                qs: [code; 32],
            }; ROWS];
            let a = [[acts(q)[0], acts(q)[1]]; 4];
            let tiled = nvfp4_tiled_rows(cpu).tiled.expect("tiles");
            let mut tile = vec![0u64; (tiled.tile_words)(1)];
            (tiled.make_tile)(&w, &mut tile);
            let mut out = [f32::NAN; 4 * ROWS];
            (tiled.gemm)(&w, &tile, &a, &mut out);
            let want = vecdot::vec_dot_nvfp4_q8_0(&w[..1], &a[..1]);
            let exact = exact_dot(
                GgmlType::NVFP4,
                bytemuck::bytes_of(&w[0]),
                &q8_0s_values(&a[..1]),
            )
            .0;
            assert_eq!(f64::from(want), exact, "nvfp4 code {code:#x} act {q}");
            assert!(
                out.iter().all(|&o| o == want),
                "nvfp4 code {code:#x} act {q}: {out:?} vs {want}"
            );
        }
        // Q1_0: all bits set (+1) and none (-1)
        for bits in [0xffu8, 0x00] {
            let w = [BlockQ1_0 {
                d: one,
                qs: [bits; 16],
            }; ROWS];
            let a = [acts(q); 4];
            let tiled = q1_0_tiled_rows(cpu).tiled.expect("tiles");
            let mut tile = vec![0u64; (tiled.tile_words)(1)];
            (tiled.make_tile)(&w, &mut tile);
            let mut out = [f32::NAN; 4 * ROWS];
            (tiled.gemm)(&w, &tile, &a, &mut out);
            let want = if bits == 0 { -128.0 } else { 128.0 } * f32::from(q);
            assert_eq!(vecdot::vec_dot_q1_0_q8_0(&w[..1], &a[..1]), want);
            assert!(
                out.iter().all(|&o| o == want),
                "q1_0 bits {bits:#x} act {q}"
            );
        }
    }
}

/// Through `QMatrix::matmul` capped at AVX2: odd row counts (tiles, then the plain GEMM for
/// the rows left over, or no tile at all), rows of 1, 2, 3 and 70 blocks, and batches around
/// the threshold.
#[test]
fn matmul_with_tiles_equals_portable_and_exact() {
    let ns = [1, 2, 3, 4, 5, 7, 8, 9, 12, 15, 16, 17, 33];
    for rows in [1, 7, 9, 17, 21] {
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
}
