//! The checks the NVFP4, Q1_0 (and MXFP4) per-call tiles share, whatever their width (8 rows for
//! AVX2, 16 for AVX-512): one tile straight through its kernels against the portable `vec_dot`
//! and the exact product, and the extreme weights and activations.

use bytemuck::Pod;

use crate::blocks::{BlockMxfp4, BlockNvfp4, BlockQ1_0, BlockQ8_0, F16Bits};
use crate::kernel_api::TiledGemm;
use crate::kernels::row_tests::{
    check, exact_dot, q8_0_values, q8_0s_values, random, random_mxfp4, random_q1_0, random_q8_0,
    random_q8_0s,
};
use crate::rng::SplitMix64 as Rng;
use crate::types::GgmlType;
use crate::vecdot;

/// One tile of `rows` rows of `nb` blocks times each count of activation rows in `m_rows`
/// (whole quads the kernel takes), against the portable `vec_dot` and the exact product.
#[allow(clippy::too_many_arguments)]
fn compare_tile<W: Pod, A: Pod>(
    ty: GgmlType,
    tiled: TiledGemm<W, A>,
    rows: usize,
    m_rows: &[usize],
    portable: fn(&[W], &[A]) -> f32,
    weight: impl Fn(&mut Rng) -> W,
    act: impl Fn(&mut Rng) -> A,
    act_values: impl Fn(&[A]) -> Vec<f64>,
    nbs: &[usize],
) {
    let mut rng = Rng::new(0x711e ^ ty.id() as u64 ^ rows as u64);
    for &nb in nbs {
        let w: Vec<W> = (0..rows * nb).map(|_| weight(&mut rng)).collect();
        let mut tile = vec![0u64; (tiled.tile_words)(nb)];
        (tiled.make_tile)(&w, &mut tile);
        for &n in m_rows {
            let a: Vec<A> = (0..n * nb).map(|_| act(&mut rng)).collect();
            let mut out = vec![f32::NAN; n * rows];
            (tiled.gemm)(&w, &tile, &a, &mut out);
            for m in 0..n {
                let arow = &a[m * nb..(m + 1) * nb];
                let values = act_values(arow);
                for r in 0..rows {
                    let row = &w[r * nb..(r + 1) * nb];
                    let what = format!("{ty} {rows}-row tile blocks={nb} act {m} of {n} row {r}");
                    let exact = exact_dot(ty, bytemuck::cast_slice(row), &values);
                    check(&what, out[m * rows + r], portable(row, arow), exact, 4 * nb);
                }
            }
        }
    }
}

/// NVFP4's and Q1_0's tiles of `rows` rows on random blocks: 130 NVFP4 blocks are 260 chunks,
/// whole pieces of flipped activations and a rest.
pub(crate) fn tiles_equal_portable_and_exact(
    nvfp4: TiledGemm<BlockNvfp4, [BlockQ8_0; 2]>,
    q1_0: TiledGemm<BlockQ1_0, [BlockQ8_0; 4]>,
    rows: usize,
    m_rows: &[usize],
) {
    compare_tile(
        GgmlType::NVFP4,
        nvfp4,
        rows,
        m_rows,
        vecdot::vec_dot_nvfp4_q8_0,
        random::<BlockNvfp4>,
        random_q8_0s::<2>,
        q8_0s_values::<2>,
        &[1, 2, 3, 8, 70, 130],
    );
    compare_tile(
        GgmlType::Q1_0,
        q1_0,
        rows,
        m_rows,
        vecdot::vec_dot_q1_0_q8_0,
        random_q1_0,
        random_q8_0s::<4>,
        q8_0s_values::<4>,
        &[1, 2, 3, 9, 70],
    );
}

/// The largest products: every weight at its largest magnitude, both signs, against activations
/// of `-128` and `127`, where a lane's sums and start are at their extremes; one quad through
/// tiles of `rows` rows.
pub(crate) fn extremes_are_exact(
    nvfp4: TiledGemm<BlockNvfp4, [BlockQ8_0; 2]>,
    q1_0: TiledGemm<BlockQ1_0, [BlockQ8_0; 4]>,
    rows: usize,
) {
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
            let w = vec![
                BlockNvfp4 {
                    d: [0x38; 4],
                    qs: [code; 32],
                };
                rows
            ];
            let a = [[acts(q)[0], acts(q)[1]]; 4];
            let what = format!("nvfp4 code {code:#x} act {q}");
            let want = vecdot::vec_dot_nvfp4_q8_0(&w[..1], &a[..1]);
            let values = q8_0s_values(&a[..1]);
            tile_equals_exactly(&what, nvfp4, GgmlType::NVFP4, &w, &a, &values, want);
        }
        // Q1_0: all bits set (+1) and none (-1)
        for bits in [0xffu8, 0x00] {
            let w = vec![
                BlockQ1_0 {
                    d: one,
                    qs: [bits; 16],
                };
                rows
            ];
            let a = [acts(q); 4];
            let mut tile = vec![0u64; (q1_0.tile_words)(1)];
            (q1_0.make_tile)(&w, &mut tile);
            let mut out = vec![f32::NAN; 4 * rows];
            (q1_0.gemm)(&w, &tile, &a, &mut out);
            let want = if bits == 0 { -128.0 } else { 128.0 } * f32::from(q);
            assert_eq!(vecdot::vec_dot_q1_0_q8_0(&w[..1], &a[..1]), want);
            assert!(
                out.iter().all(|&o| o == want),
                "q1_0 bits {bits:#x} act {q}"
            );
        }
    }
}

/// MXFP4's tiles of `rows` rows: random blocks (130 blocks, whole pieces of flipped activations
/// and a rest), then the largest products, where one chunk's 16-bit sums would pass `i16`
/// unless each half is widened on its own.
pub(crate) fn mxfp4_tiles_are_exact(
    mxfp4: TiledGemm<BlockMxfp4, BlockQ8_0>,
    rows: usize,
    m_rows: &[usize],
) {
    compare_tile(
        GgmlType::MXFP4,
        mxfp4,
        rows,
        m_rows,
        vecdot::vec_dot_mxfp4_q8_0,
        random_mxfp4,
        random_q8_0,
        q8_0_values,
        &[1, 2, 3, 16, 17, 70, 130],
    );
    let one = F16Bits::from_f32(1.0);
    for q in [-128i8, 127] {
        // code 7 (12) and 15 (-12) in both nibbles and mixed, scale byte 128 (1.0 halved: 1.0)
        for code in [0x77u8, 0xff, 0x7f] {
            let w = vec![
                BlockMxfp4 {
                    e: 128,
                    qs: [code; 16]
                };
                rows
            ];
            let a = [BlockQ8_0 {
                d: one,
                qs: [q; 32],
            }; 4];
            let what = format!("mxfp4 code {code:#x} act {q}");
            let want = vecdot::vec_dot_mxfp4_q8_0(&w[..1], &a[..1]);
            let values = q8_0_values(&a[..1]);
            tile_equals_exactly(&what, mxfp4, GgmlType::MXFP4, &w, &a, &values, want);
        }
    }
}

/// One quad through a tile of `w` (equal rows of one block each): the portable `want` must be
/// the exact product of the first row and the activations of `values`, and every output equal
/// to it.
fn tile_equals_exactly<W: Pod, A: Pod>(
    what: &str,
    tiled: TiledGemm<W, A>,
    ty: GgmlType,
    w: &[W],
    a: &[A],
    values: &[f64],
    want: f32,
) {
    let mut tile = vec![0u64; (tiled.tile_words)(1)];
    (tiled.make_tile)(w, &mut tile);
    let mut out = vec![f32::NAN; 4 * w.len()];
    (tiled.gemm)(w, &tile, a, &mut out);
    let exact = exact_dot(ty, bytemuck::bytes_of(&w[0]), values).0;
    assert_eq!(f64::from(want), exact, "{what}");
    assert!(
        out.iter().all(|&o| o == want),
        "{what}: {out:?} against {want}"
    );
}
