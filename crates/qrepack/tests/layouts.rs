//! Every layout: repack/unpack identity, GEMV/GEMM against an f64 reference on awkward shapes,
//! SIMD against scalar kernels, and misuse errors.

mod common;

use common::{assert_close_rows, random_weights, reference_matmul_for};
use qrepack::cpu::{CpuFeatures, KernelSet};
use qrepack::rng::SplitMix64;
use qrepack::{Error, GgmlType, Layout, QMatrix};

/// Emulated AArch64 (the CI runs these tests under qemu for three CPU models, in a 15-minute
/// budget) gets the small shapes only; the big sweeps run natively on x86-64.
const EMULATED: bool = cfg!(target_arch = "aarch64");

const BATCHES: &[usize] = if EMULATED {
    &[1, 3, 4, 5, 9, 33]
} else {
    // 50: twelve quads, from which every per-call tile (AVX-512 Q8_0's too) is used
    &[1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 33, 50]
};

fn cols_for(ty: GgmlType) -> Vec<usize> {
    // one block (at least 32 columns), and longer rows
    let one = ty.block_size().max(32);
    match (ty.block_size() == 256, EMULATED) {
        (true, false) => vec![256, 512, 2560],
        (true, true) => vec![256, 512],
        (false, false) => vec![one, 640, 2560],
        (false, true) => vec![one, 640],
    }
}

fn check_layout(layout: Layout, ty: GgmlType, rows: usize, cols: usize, seed: u64) {
    let w = random_weights(ty, rows, cols, seed);
    for cpu in [CpuFeatures::get(), &CpuFeatures::scalar()] {
        let m = QMatrix::with_layout_for_cpu(ty, rows, cols, &w, layout, cpu).unwrap();
        assert_eq!(m.layout(), layout);
        assert_eq!(
            m.to_ggml_bytes(),
            w,
            "{layout} {ty} {rows}x{cols}: unpack(repack(w)) != w"
        );
        let row_bytes = w.len() / rows;
        for r in [0, rows / 2, rows - 1] {
            assert_eq!(
                m.ggml_row(r).unwrap(),
                &w[r * row_bytes..(r + 1) * row_bytes],
                "{layout} {ty} {rows}x{cols}: row {r}"
            );
        }
        assert!(m.ggml_row(rows).is_err());
        let mut rng = SplitMix64::new(seed ^ 0x5eed);
        for &n in BATCHES {
            let x = rng.pm1_vec(n * cols);
            let mut y = vec![f32::NAN; n * rows];
            m.matmul(&x, n, &mut y).unwrap();
            let want = reference_matmul_for(layout, ty, &w, rows, cols, &x, n);
            let what = format!(
                "{layout} {ty} {rows}x{cols} n={n} kernels={}",
                m.kernel_name()
            );
            assert_close_rows(&y, &want, rows, 1e-5, &what);
        }
    }
}

#[test]
fn interleaved_layouts_match_reference() {
    for &layout in Layout::ALL.iter().filter(|l| **l != Layout::Plain) {
        let ty = layout.weight_type().unwrap();
        let r = layout.rows_interleaved();
        for (i, cols) in cols_for(ty).into_iter().enumerate() {
            let row_counts = if EMULATED {
                vec![r, 3 * r]
            } else {
                vec![r, 2 * r, 5 * r]
            };
            for rows in row_counts {
                check_layout(layout, ty, rows, cols, 1000 + i as u64 * 17 + rows as u64);
            }
        }
    }
}

#[test]
fn plain_layout_matches_reference_for_every_type() {
    for ty in GgmlType::ALL {
        let cols = if ty.block_size() == 256 { 512 } else { 640 };
        for rows in [1, 3, 4, 5, 7, 8, 9] {
            check_layout(Layout::Plain, ty, rows, cols, 77 + rows as u64);
        }
    }
}

/// Every kernel family this CPU can run (AVX-512 VL VNNI, AVX-VNNI, AVX2), not just the best.
fn cpu_variants() -> Vec<CpuFeatures> {
    let cpu = *CpuFeatures::get();
    let mut v: Vec<CpuFeatures> = cpu.sets().map(|s| cpu.capped(s)).collect();
    v.dedup();
    v
}

#[test]
fn simd_kernels_equal_scalar_kernels() {
    for cpu in &cpu_variants() {
        simd_equals_scalar(cpu);
    }
}

#[test]
fn every_kernel_family_matches_reference_on_awkward_shapes() {
    for cpu in &cpu_variants() {
        for &layout in Layout::ALL.iter().filter(|l| **l != Layout::Plain) {
            let ty = layout.weight_type().unwrap();
            let cols = if ty.block_size() == 256 { 512 } else { 640 };
            let rows = 3 * layout.rows_interleaved();
            let w = random_weights(ty, rows, cols, 404);
            let m = QMatrix::with_layout_for_cpu(ty, rows, cols, &w, layout, cpu).unwrap();
            let mut rng = SplitMix64::new(405);
            // 37: odd quads and a tail of one row after the last quad; 49: every tiled GEMM
            for n in [1, 3, 5, 8, 9, 37, 49] {
                let x = rng.pm1_vec(n * cols);
                let mut y = vec![0.0; n * rows];
                m.matmul(&x, n, &mut y).unwrap();
                let want = reference_matmul_for(layout, ty, &w, rows, cols, &x, n);
                let what = format!("{layout} {} n={n}", m.kernel_name());
                assert_close_rows(&y, &want, rows, 1e-5, &what);
            }
        }
    }
}

fn simd_equals_scalar(cpu: &CpuFeatures) {
    for &layout in Layout::ALL {
        for ty in GgmlType::ALL {
            if !layout.fits(ty, 16) {
                continue;
            }
            let cols = if ty.block_size() == 256 {
                768
            } else {
                3 * ty.block_size().max(32)
            };
            let rows = 16;
            let w = random_weights(ty, rows, cols, 5);
            let fast = QMatrix::with_layout_for_cpu(ty, rows, cols, &w, layout, cpu).unwrap();
            let slow =
                QMatrix::with_layout_for_cpu(ty, rows, cols, &w, layout, &CpuFeatures::scalar())
                    .unwrap();
            let mut rng = SplitMix64::new(9);
            // n >= 8: two or more activation quads, so tiled GEMMs run too (n >= 48: all)
            for n in [1, 4, 7, 9, 13, 51] {
                let x = rng.pm1_vec(n * cols);
                let (mut a, mut b) = (vec![0.0; n * rows], vec![0.0; n * rows]);
                fast.matmul(&x, n, &mut a).unwrap();
                slow.matmul(&x, n, &mut b).unwrap();
                let want: Vec<f64> = b.iter().map(|&v| v as f64).collect();
                let what = format!("{layout} {ty} {} vs scalar n={n}", fast.kernel_name());
                assert_close_rows(&a, &want, rows, 1e-5, &what);
            }
        }
    }
}

/// ggml's choice for the K-quants (`ggml_repack_get_optimal_repack_type`): on ARM the 8x8
/// layouts with i8mm, the 8x4 ones with dotprod, plain with NEON only or a row count that is not
/// a multiple of 8; on x86 with AVX2 qrepack's 8-row layouts.
#[test]
fn k_quant_layout_choice_follows_ggml() {
    for cpu in &cpu_variants() {
        for (ty, i8mm, dotprod, x86) in [
            (
                GgmlType::Q4_K,
                Layout::Q4_K_8x8,
                Layout::Q4_K_8x4,
                Layout::Q4_K_8x8,
            ),
            (
                GgmlType::Q5_K,
                Layout::Q5_K_8x8,
                Layout::Q5_K_8x4,
                Layout::Q5_K_8x8_x86,
            ),
            (
                GgmlType::Q6_K,
                Layout::Q6_K_8x8,
                Layout::Q6_K_8x4,
                Layout::Q6_K_8x8_x86,
            ),
        ] {
            let want = if cpu.has(KernelSet::I8mm) {
                i8mm
            } else if cpu.has(KernelSet::Dotprod) {
                dotprod
            } else if cpu.has(KernelSet::Avx2) {
                x86
            } else {
                Layout::Plain
            };
            let what = cpu.describe();
            assert_eq!(Layout::best_for(ty, 16, cpu), want, "{ty} on {what}");
            assert_eq!(Layout::best_for(ty, 24, cpu), want, "{ty} on {what}");
            assert_eq!(
                Layout::best_for(ty, 12, cpu),
                Layout::Plain,
                "{ty} on {what}"
            );
        }
    }
}

/// Q2_K: ggml repacks it into `q2_K_8x8` on AVX-512 only; qrepack also on AVX2, where its
/// kernels measured faster than the plain path from 4 activation rows on and the same at one
/// (see the selection table). Never on ARM, and
/// plain for a row count that is not a multiple of 8.
#[test]
fn q2_k_layout_choice() {
    for cpu in &cpu_variants() {
        let want = if cpu.has(KernelSet::Avx2) {
            Layout::Q2_K_8x8
        } else {
            Layout::Plain
        };
        let what = cpu.describe();
        assert_eq!(Layout::best_for(GgmlType::Q2_K, 16, cpu), want, "{what}");
        assert_eq!(
            Layout::best_for(GgmlType::Q2_K, 12, cpu),
            Layout::Plain,
            "{what}"
        );
    }
}

/// MXFP4: `mxfp4_8x8` on x86 (AVX2 and up) and `mxfp4_4x4` on ARM with dotprod, as ggml.
#[test]
fn mxfp4_layout_choice() {
    for cpu in &cpu_variants() {
        let want = if cpu.has(KernelSet::Avx2) {
            Layout::MXFP4_8x8
        } else if cpu.has(KernelSet::Dotprod) {
            Layout::MXFP4_4x4
        } else {
            Layout::Plain
        };
        let what = cpu.describe();
        assert_eq!(Layout::best_for(GgmlType::MXFP4, 16, cpu), want, "{what}");
        assert_eq!(
            Layout::best_for(GgmlType::MXFP4, 12, cpu),
            if cfg!(target_arch = "aarch64") && cpu.has(KernelSet::Dotprod) {
                Layout::MXFP4_4x4
            } else {
                Layout::Plain
            },
            "{what}"
        );
    }
}

/// `QREPACK_EXPECT_BEST=<set>` (scripts/test-aarch64.sh, once per qemu CPU model) makes sure the
/// detection finds the set the model has, so a run meant for a set never passes without it.
#[test]
fn detected_best_set_is_the_expected_one() {
    let want = std::env::var("QREPACK_EXPECT_BEST").unwrap_or_default();
    if !want.trim().is_empty() {
        assert_eq!(CpuFeatures::detect().best().name(), want.trim());
    }
}

#[test]
fn chosen_layout_fits_and_falls_back_to_plain() {
    let cpu = CpuFeatures::get();
    for ty in GgmlType::ALL {
        for rows in [1, 4, 8, 12, 16] {
            let l = Layout::best_for(ty, rows, cpu);
            assert!(l.fits(ty, rows), "{l} chosen for {ty} with {rows} rows");
        }
    }
    // 12 rows fit only ggml's 4-row ARM layouts, which need dotprod (as in ggml).
    let q4_0_12 = Layout::best_for(GgmlType::Q4_0, 12, cpu);
    if cpu.has(KernelSet::I8mm) {
        assert_eq!(q4_0_12, Layout::Q4_0_4x8);
    } else if cpu.has(KernelSet::Dotprod) {
        assert_eq!(q4_0_12, Layout::Q4_0_4x4);
    } else {
        assert_eq!(q4_0_12, Layout::Plain);
    }
    // Repacking only pays where SIMD kernels run: never on the portable set.
    for ty in GgmlType::ALL {
        assert_eq!(
            Layout::best_for(ty, 8, &CpuFeatures::scalar()),
            Layout::Plain
        );
    }
    // Otherwise the chosen layout has the best-ranked SIMD set among the layouts that fit.
    for ty in GgmlType::ALL {
        let simd_rank = |l: Layout| {
            l.kernel_sets(ty)
                .into_iter()
                .filter(|s| *s != KernelSet::Scalar && cpu.has(*s))
                .map(KernelSet::rank)
                .max()
        };
        let chosen = Layout::best_for(ty, 8, cpu);
        let best = Layout::candidates(ty)
            .into_iter()
            .filter(|l| *l != Layout::Plain && l.fits(ty, 8))
            .filter_map(simd_rank)
            .max();
        match best {
            None => assert_eq!(chosen, Layout::Plain, "{ty}"),
            Some(rank) => assert_eq!(simd_rank(chosen), Some(rank), "{ty}: {chosen}"),
        }
    }
    if cpu.has(KernelSet::Sve) {
        // ggml's choice with SVE, i8mm and 256-bit vectors; 12 rows keep the 4-row layout.
        assert_eq!(Layout::best_for(GgmlType::Q4_0, 8, cpu), Layout::Q4_0_8x8);
        assert_eq!(Layout::best_for(GgmlType::Q4_0, 12, cpu), Layout::Q4_0_4x8);
        for (layout, ty) in [
            (Layout::Q4_0_8x8, GgmlType::Q4_0),
            (Layout::Q8_0_4x8, GgmlType::Q8_0),
            (Layout::Q4_K_8x8, GgmlType::Q4_K),
        ] {
            assert_eq!(layout.kernel_set_for(ty, cpu), KernelSet::Sve, "{layout}");
        }
    } else if cpu.has(KernelSet::I8mm) {
        assert_eq!(Layout::best_for(GgmlType::Q4_0, 8, cpu), Layout::Q4_0_4x8);
        assert_eq!(Layout::best_for(GgmlType::Q8_0, 8, cpu), Layout::Q8_0_4x8);
        assert_eq!(
            Layout::best_for(GgmlType::IQ4_NL, 8, cpu),
            Layout::IQ4_NL_4x4
        );
    } else if cpu.has(KernelSet::Dotprod) {
        assert_eq!(Layout::best_for(GgmlType::Q4_0, 8, cpu), Layout::Q4_0_4x4);
        assert_eq!(Layout::best_for(GgmlType::Q8_0, 8, cpu), Layout::Q8_0_4x4);
    }
    if cpu.has(KernelSet::Avx2) {
        assert_eq!(Layout::best_for(GgmlType::Q4_0, 8, cpu), Layout::Q4_0_8x8);
        assert_eq!(Layout::best_for(GgmlType::Q4_K, 8, cpu), Layout::Q4_K_8x8);
    }
}

/// No type is left to portable code on the plain layout: every one has NEON kernels on AArch64
/// (so a NEON-only CPU runs none scalar) and AVX2 kernels on x86-64.
#[test]
fn plain_layout_has_simd_kernels_for_every_type() {
    let simd = if cfg!(target_arch = "aarch64") {
        Some(KernelSet::Neon)
    } else if cfg!(target_arch = "x86_64") {
        Some(KernelSet::Avx2)
    } else {
        None
    };
    for ty in GgmlType::ALL {
        let sets = Layout::Plain.kernel_sets(ty);
        if let Some(set) = simd {
            assert!(sets.contains(&set), "plain {ty}: {sets:?} lacks {set}");
        }
    }
}

#[test]
fn misuse_is_an_error_naming_the_problem() {
    let ty = GgmlType::Q4_0;
    let w = random_weights(ty, 8, 64, 1);
    let shape = |e: Error, needle: &str| {
        let msg = e.to_string();
        assert!(msg.contains(needle), "'{msg}' does not mention '{needle}'");
    };
    shape(QMatrix::new(ty, 8, 64, &w[1..]).unwrap_err(), "bytes");
    shape(QMatrix::new(ty, 8, 48, &w).unwrap_err(), "multiple of 32");
    shape(
        QMatrix::new(ty, 0, 64, &[]).unwrap_err(),
        "at least one row",
    );
    shape(
        QMatrix::with_layout(ty, 8, 64, &w, Layout::Q4_K_8x8).unwrap_err(),
        "q4_K",
    );
    let w12 = random_weights(ty, 12, 64, 1);
    shape(
        QMatrix::with_layout(ty, 12, 64, &w12, Layout::Q4_0_8x8).unwrap_err(),
        "multiple of 8",
    );
    let m = QMatrix::new(ty, 8, 64, &w).unwrap();
    let mut y = [0.0; 16];
    shape(
        m.matmul(&[0.0; 63], 1, &mut y[..8]).unwrap_err(),
        "x must hold",
    );
    shape(
        m.matmul(&[0.0; 128], 2, &mut y[..15]).unwrap_err(),
        "y must hold",
    );
    assert!(m.matmul(&[], 0, &mut []).is_ok());
    assert!("q4_0_9x9".parse::<Layout>().is_err());
}

#[test]
fn nan_activations_do_not_panic() {
    let ty = GgmlType::Q4_0;
    let w = random_weights(ty, 8, 64, 3);
    let m = QMatrix::new(ty, 8, 64, &w).unwrap();
    let mut x = vec![0.5f32; 5 * 64];
    x[3] = f32::NAN;
    x[70] = f32::INFINITY;
    let mut y = vec![0.0; 5 * 8];
    m.matmul(&x, 5, &mut y).unwrap();
}

/// A large product (many tasks, each storing into its own band of `y`'s columns, with a tail of
/// n % 4 rows and a final narrower band, as 8200 rows is not a multiple of any task's groups):
/// all of `y` is written, and right. The reference is evaluated on a sample of the outputs only.
#[test]
fn large_results_are_complete_and_right() {
    let (ty, rows, cols, n) = (GgmlType::Q4_0, 8200, 64, 1030);
    assert!(rows * n * 4 > 32 << 20);
    let w = random_weights(ty, rows, cols, 21);
    let m = QMatrix::new(ty, rows, cols, &w).unwrap();
    let x = SplitMix64::new(22).pm1_vec(n * cols);
    let mut y = vec![f32::NAN; n * rows];
    m.matmul(&x, n, &mut y).unwrap();
    assert!(y.iter().all(|v| v.is_finite()), "every output written");
    // Activation rows from both ends and the middle, against every weight row.
    for &t in &[0, 1, 3, 513, 1027, 1029] {
        let xt = &x[t * cols..(t + 1) * cols];
        let want = reference_matmul_for(m.layout(), ty, &w, rows, cols, xt, 1);
        let what = format!("{ty} {rows}x{cols} n={n}, activation row {t}");
        assert_close_rows(&y[t * rows..(t + 1) * rows], &want, rows, 1e-5, &what);
    }
}

/// Rows longer than the GEMVs' pieces of activation blocks (the AVX-512 GEMVs prepare 1024
/// blocks of 32, or 128 super-blocks, at a time and add up the pieces' sums): 2 x 1024 + 3
/// blocks of 32 (1024 + 6 under emulation), 4 x 128 + 3 super-blocks (2 x 128 + 4).
#[test]
fn long_rows_match_reference() {
    for cpu in &cpu_variants() {
        for &layout in Layout::ALL.iter().filter(|l| **l != Layout::Plain) {
            let ty = layout.weight_type().unwrap();
            let blocks = match (ty.block_size(), EMULATED) {
                (32, false) => 2051,
                (32, true) => 1030,
                (_, false) => 515,
                (_, true) => 260,
            };
            let cols = ty.block_size() * blocks;
            let rows = layout.rows_interleaved();
            let w = random_weights(ty, rows, cols, 515);
            let m = QMatrix::with_layout_for_cpu(ty, rows, cols, &w, layout, cpu).unwrap();
            let mut rng = SplitMix64::new(516);
            for n in [1, 5] {
                let x = rng.pm1_vec(n * cols);
                let mut y = vec![f32::NAN; n * rows];
                m.matmul(&x, n, &mut y).unwrap();
                let want = reference_matmul_for(layout, ty, &w, rows, cols, &x, n);
                let what = format!("{layout} {} {rows}x{cols} n={n}", m.kernel_name());
                assert_close_rows(&y, &want, rows, 1e-5, &what);
            }
        }
    }
}

/// MXFP4's layouts with exponents over a wide range (the generic tests draw them from eight
/// values), rows of one, two and three blocks, and one to five row groups (a tiled GEMM's whole
/// tiles and the groups left over): every kernel set against the f64 reference and against its
/// scalar twin.
#[test]
fn mxfp4_layouts_over_wide_exponents_and_short_rows() {
    let ty = GgmlType::MXFP4;
    let batches: &[usize] = if EMULATED {
        &[1, 3, 4, 5, 13]
    } else {
        &[1, 2, 3, 4, 5, 8, 9, 13, 37, 50]
    };
    for layout in [Layout::MXFP4_8x8, Layout::MXFP4_4x4] {
        let r = layout.rows_interleaved();
        for (i, cols) in [32, 64, 96, 640].into_iter().enumerate() {
            for rows in [r, 3 * r, 5 * r] {
                let mut w = random_weights(ty, rows, cols, 900 + 7 * i as u64 + rows as u64);
                let mut rng = SplitMix64::new(rows as u64 * 31 + cols as u64);
                for block in w.chunks_exact_mut(ty.block_bytes()) {
                    // 2^-28 .. 2^27: exponent bytes whose field is 99..154
                    block[0] = 100 + (rng.next_u64() % 56) as u8;
                }
                let slow = QMatrix::with_layout_for_cpu(
                    ty,
                    rows,
                    cols,
                    &w,
                    layout,
                    &CpuFeatures::scalar(),
                )
                .unwrap();
                for cpu in &cpu_variants() {
                    let fast =
                        QMatrix::with_layout_for_cpu(ty, rows, cols, &w, layout, cpu).unwrap();
                    for &n in batches {
                        let x = rng.pm1_vec(n * cols);
                        let (mut a, mut b) = (vec![f32::NAN; n * rows], vec![0.0; n * rows]);
                        fast.matmul(&x, n, &mut a).unwrap();
                        slow.matmul(&x, n, &mut b).unwrap();
                        let what = format!("{layout} {rows}x{cols} n={n} {}", fast.kernel_name());
                        let want = reference_matmul_for(layout, ty, &w, rows, cols, &x, n);
                        assert_close_rows(&a, &want, rows, 1e-5, &what);
                        let scalar: Vec<f64> = b.iter().map(|&v| v as f64).collect();
                        assert_close_rows(&a, &scalar, rows, 1e-5, &format!("{what} vs scalar"));
                    }
                }
            }
        }
    }
}
