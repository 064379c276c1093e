//! The low-bit weight types (IQ1_S/M, IQ2_XXS/XS/S, IQ3_XXS/S, TQ1_0/TQ2_0, MXFP4, NVFP4,
//! Q1_0, Q2_0) against ggml 1.12.2 itself:
//!
//! * the lookup tables (`quant::grids`) against the bytes of ggml's own tables
//!   (`fixtures/grids/tables.bin`, `scripts/dump_ggml_grids.c`);
//! * the dequantizers, bit for bit, against ggml's `dequantize_row_*` (`w_deq.f32`);
//! * `QMatrix::matmul` against ggml's `mul_mat` (`ggml_mm_bench --M 16 --K 512 --N 7 --repack off
//!   --dump`, `y_f32.bin`), for 1, 5 and 7 activation rows;
//! * each plain `vec_dot` against the f64 reference on random blocks (every bit pattern of the
//!   quants, awkward row counts and lengths);
//! * `quantize`, for the types it takes, against the bench's quantized weights (`w_q.bin`), and
//!   its refusal of the types ggml quantizes only with an importance matrix.
//!
//! `scripts/make_ggml_output_fixtures.sh` (`NEW_TYPES`) regenerates the fixtures.

mod common;

use std::path::PathBuf;

use qrepack::cpu::CpuFeatures;
use qrepack::quant::{dequantize_f64, grids};
use qrepack::rng::SplitMix64;
use qrepack::{dequantize, quantize, Error, GgmlType, Layout, QMatrix};

const M: usize = 16;
const K: usize = 512;
const N: usize = 7;

const TYPES: [GgmlType; 13] = [
    GgmlType::IQ2_XXS,
    GgmlType::IQ2_XS,
    GgmlType::IQ2_S,
    GgmlType::IQ3_XXS,
    GgmlType::IQ3_S,
    GgmlType::IQ1_S,
    GgmlType::IQ1_M,
    GgmlType::TQ1_0,
    GgmlType::TQ2_0,
    GgmlType::MXFP4,
    GgmlType::NVFP4,
    GgmlType::Q1_0,
    GgmlType::Q2_0,
];

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn ids_names_and_sizes_are_ggml_s() {
    let want = [
        ("iq2_xxs", 16, 256, 66),
        ("iq2_xs", 17, 256, 74),
        ("iq2_s", 22, 256, 82),
        ("iq3_xxs", 18, 256, 98),
        ("iq3_s", 21, 256, 110),
        ("iq1_s", 19, 256, 50),
        ("iq1_m", 29, 256, 56),
        ("tq1_0", 34, 256, 54),
        ("tq2_0", 35, 256, 66),
        ("mxfp4", 39, 32, 17),
        ("nvfp4", 40, 64, 36),
        ("q1_0", 41, 128, 18),
        ("q2_0", 42, 64, 18),
    ];
    for (ty, (name, id, bs, bb)) in TYPES.into_iter().zip(want) {
        assert_eq!(
            (ty.name(), ty.id(), ty.block_size(), ty.block_bytes()),
            (name, id, bs, bb)
        );
        assert_eq!(GgmlType::from_id(id), Some(ty));
        assert_eq!(name.parse::<GgmlType>().unwrap(), ty);
        let q8 = matches!(
            ty,
            GgmlType::MXFP4 | GgmlType::NVFP4 | GgmlType::Q1_0 | GgmlType::Q2_0
        );
        let vdt = if q8 { GgmlType::Q8_0 } else { GgmlType::Q8_K };
        assert_eq!(ty.vec_dot_type(), vdt, "{ty}");
    }
}

#[test]
fn grids_equal_ggml() {
    let mut ours: Vec<u8> = Vec::new();
    ours.extend_from_slice(&grids::KSIGNS_IQ2XS);
    ours.extend(grids::KVALUES_FP4.iter().map(|&v| v as u8));
    for t in [
        &grids::IQ2XXS_GRID[..],
        &grids::IQ2XS_GRID[..],
        &grids::IQ2S_GRID[..],
    ] {
        ours.extend(t.iter().flat_map(|v| v.to_le_bytes()));
    }
    for t in [&grids::IQ3XXS_GRID[..], &grids::IQ3S_GRID[..]] {
        ours.extend(t.iter().flat_map(|v| v.to_le_bytes()));
    }
    ours.extend(grids::IQ1S_GRID.iter().flat_map(|v| v.to_le_bytes()));
    assert_eq!(ours, read("grids/tables.bin"));
}

#[test]
fn dequantize_is_bit_identical_to_ggml() {
    for ty in TYPES {
        let w = read(&format!("ggml/{ty}_off/w_q.bin"));
        let want = f32s(&read(&format!("ggml/{ty}_off/w_deq.f32")));
        let got = dequantize(ty, &w, M, K).unwrap();
        let diff = got
            .iter()
            .zip(&want)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        assert_eq!(
            diff, 0,
            "{ty}: {diff} values differ from ggml's dequantizer"
        );
        // The exact f64 form agrees with ggml's f32 values to f32 rounding.
        let exact = dequantize_f64(ty, &w, M, K).unwrap();
        for (e, g) in exact.iter().zip(&got) {
            assert!(
                (e - f64::from(*g)).abs() <= 1e-6 * e.abs().max(1e-30),
                "{ty}"
            );
        }
    }
}

#[test]
fn matmul_matches_ggml_within_nmse_1e9() {
    let x = f32s(&read("ggml/x_16x512x7.bin"));
    let cpu = CpuFeatures::detect();
    for ty in TYPES {
        let w = read(&format!("ggml/{ty}_off/w_q.bin"));
        let want = f32s(&read(&format!("ggml/{ty}_off/y_f32.bin")));
        let layouts: Vec<Layout> = Layout::candidates(ty)
            .into_iter()
            .filter(|l| l.fits(ty, M))
            .collect();
        assert!(layouts.contains(&Layout::Plain), "{ty}");
        for layout in layouts {
            for set_cpu in cpu.sets().map(|s| cpu.capped(s)) {
                let m = QMatrix::with_layout_for_cpu(ty, M, K, &w, layout, &set_cpu).unwrap();
                for n in [1, 5, N] {
                    let mut y = vec![0.0; n * M];
                    m.matmul(&x[..n * K], n, &mut y).unwrap();
                    let e = common::nmse(&y, &want[..n * M]);
                    assert!(
                        e <= 1e-9,
                        "{ty} as {layout}, n = {n}: nmse {e:e} against ggml"
                    );
                }
                assert_eq!(m.to_ggml_bytes(), w, "{ty}: unpack");
            }
        }
        // The f64 reference agrees with ggml as well.
        let exact: Vec<f32> = common::reference_matmul(ty, &w, M, K, &x, N)
            .into_iter()
            .map(|v| v as f32)
            .collect();
        let e = common::nmse(&exact, &want);
        assert!(e <= 1e-9, "{ty}: reference nmse {e:e} against ggml");
    }
}

#[test]
fn vec_dots_match_the_f64_reference_on_random_blocks() {
    let cpu = CpuFeatures::detect();
    let mut rng = SplitMix64::new(26);
    for ty in TYPES {
        for (rows, blocks) in [(1, 1), (3, 2), (7, 3), (17, 1), (5, 5)] {
            let cols = blocks * ty.block_size();
            let w = common::random_weights(ty, rows, cols, rng.next_u64());
            for set_cpu in cpu.sets().map(|s| cpu.capped(s)) {
                let m = QMatrix::with_layout_for_cpu(ty, rows, cols, &w, Layout::Plain, &set_cpu)
                    .unwrap();
                for n in [1, 4, 6] {
                    let x = rng.pm1_vec(n * cols);
                    let want = common::reference_matmul(ty, &w, rows, cols, &x, n);
                    let mut y = vec![0.0; n * rows];
                    m.matmul(&x, n, &mut y).unwrap();
                    common::assert_close_rows(
                        &y,
                        &want,
                        rows,
                        1e-5,
                        &format!("{ty} {rows}x{cols} n={n}"),
                    );
                }
            }
        }
    }
}

#[test]
fn random_blocks_dequantize_to_the_exact_values() {
    // Every bit pattern: f32 dequantization is the f64 one rounded (one rounding at most).
    let mut rng = SplitMix64::new(2026);
    for ty in TYPES {
        let cols = 4 * ty.block_size();
        let w = common::random_weights(ty, 9, cols, rng.next_u64());
        let got = dequantize(ty, &w, 9, cols).unwrap();
        let exact = dequantize_f64(ty, &w, 9, cols).unwrap();
        for (i, (e, g)) in exact.iter().zip(&got).enumerate() {
            assert!(
                (e - f64::from(*g)).abs() <= 2f64.powi(-23) * e.abs(),
                "{ty} value {i}: {g} vs exact {e}"
            );
        }
    }
}

#[test]
fn quantize_refuses_the_types_it_cannot_reproduce() {
    let x = vec![0.25f32; 256];
    for ty in TYPES.into_iter().filter(|t| !t.is_quantizable()) {
        match quantize(ty, &x, 1, 256) {
            Err(Error::Unsupported(msg)) => assert!(msg.contains(ty.name()), "{msg}"),
            other => panic!("{ty}: {other:?}"),
        }
    }
    // ggml itself quantizes these only with an importance matrix
    for ty in [
        GgmlType::IQ2_XXS,
        GgmlType::IQ2_XS,
        GgmlType::IQ1_S,
        GgmlType::IQ1_M,
    ] {
        assert!(!ty.is_quantizable());
        match quantize(ty, &x, 1, 256) {
            Err(Error::Unsupported(msg)) => {
                assert!(msg.contains(ty.name()), "{msg}");
                assert!(msg.contains("importance matrix"), "{msg}");
            }
            other => panic!("{ty}: {other:?}"),
        }
    }
}

#[test]
fn quantize_reproduces_the_weights_of_ggml_mul_mat() {
    // The peer benchmark's W: splitmix64 seed 42, quantized by ggml_quantize_chunk (the build
    // with ggml's default floating-point contraction; the per-type fixtures in
    // quantize_fixtures.rs come from a build without it).
    let mut rng = SplitMix64::new(42);
    let x: Vec<f32> = (0..M * K).map(|_| rng.uniform_pm1()).collect();
    for ty in TYPES.into_iter().filter(|t| t.is_quantizable()) {
        let want = read(&format!("ggml/{ty}_off/w_q.bin"));
        assert!(quantize(ty, &x, M, K).unwrap() == want, "{ty}");
    }
}
