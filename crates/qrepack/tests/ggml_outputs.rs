//! Against ggml's own outputs: `ggml_mm_bench --M 16 --K 512 --N 7 --dump` from ggml 1.12.2
//! (cui-llama.rn, `-march=native`), with and without its CPU_REPACK buffer. The dumps hold ggml's
//! quantized weights, its repacked weights, its quantized activations and its `mul_mat` result;
//! the types ggml keeps in rows (Q2_K ... F16, `*_n33`) also with `--N 33`, which reaches the
//! plain path's per-call tiles and wide GEMMs. `scripts/make_ggml_output_fixtures.sh`
//! regenerates them.

mod common;

use std::path::PathBuf;

use bytemuck::Zeroable;
use qrepack::activation::{ActFormat, Q8KInterleaved, Q8_0Interleaved};
use qrepack::blocks::{BlockQ8K, BlockQ8Kx4, BlockQ8_0, BlockQ8_0x4};
use qrepack::{GgmlType, Layout, QMatrix};

const M: usize = 16;
const K: usize = 512;
const N: usize = 7;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/ggml")
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

/// Activation rows of the `*_n33` dumps.
const N_LONG: usize = 33;

/// Every dump: its directory, weight type, ggml's layout and activation rows.
fn cases() -> Vec<(String, GgmlType, Option<Layout>, usize)> {
    let mut out = Vec::new();
    let short = [
        "q4_0", "q4_K", "iq4_nl", "q8_0", "q5_0", "q6_K", "q4_1", "q5_K", "f16", "q3_K", "iq4_xs",
        "q5_1", "bf16", "q2_K", "mxfp4",
    ]
    .into_iter()
    .flat_map(|ty| [(ty, "on", N), (ty, "off", N)]);
    let long = ["q2_K", "q3_K", "iq4_xs", "q5_1", "bf16", "f16"]
        .into_iter()
        .map(|ty| (ty, "n33", N_LONG));
    for (ty, mode, n) in short.chain(long) {
        {
            let dir = format!("{ty}_{mode}");
            let layout = String::from_utf8(read(&format!("{dir}/layout.txt"))).unwrap();
            let layout = layout.trim().trim_start_matches("layout=");
            let layout = if layout == "none" {
                None
            } else {
                Some(layout.parse().unwrap())
            };
            out.push((dir, ty.parse().unwrap(), layout, n));
        }
    }
    out
}

#[test]
fn matmul_matches_ggml_within_nmse_1e9() {
    let x_long = f32s(&read("x_16x512x33.bin"));
    let x_short = f32s(&read("x_16x512x7.bin"));
    for (dir, ty, _, n) in cases() {
        let x = if n == N { &x_short } else { &x_long };
        let w = read(&format!("{dir}/w_q.bin"));
        let want = f32s(&read(&format!("{dir}/y_f32.bin")));
        for layout in Layout::candidates(ty).into_iter().filter(|l| l.fits(ty, M)) {
            let m = QMatrix::with_layout(ty, M, K, &w, layout).unwrap();
            let mut y = vec![0.0; n * M];
            m.matmul(x, n, &mut y).unwrap();
            let e = common::nmse(&y, &want);
            if ty == GgmlType::F16 {
                // ggml built with -march=native on a CPU with AVX512-FP16 accumulates f16 dot
                // products in f16 (nmse ~4e-7 from the exact result); elsewhere it accumulates
                // in f32. Either way qrepack must be at least as close to the exact product.
                let exact: Vec<f32> = common::reference_matmul(ty, &w, M, K, x, n)
                    .into_iter()
                    .map(|v| v as f32)
                    .collect();
                let (ours, theirs) = (common::nmse(&y, &exact), common::nmse(&want, &exact));
                assert!(
                    ours <= 1e-12 && (e <= 1e-9 || ours < theirs),
                    "{dir}: {ours:e} vs {theirs:e}"
                );
                continue;
            }
            assert!(e <= 1e-9, "{dir} as {layout}: nmse {e:e} against ggml");
        }
    }
}

#[test]
fn repacked_bytes_equal_ggml_repack() {
    for (dir, ty, layout, _) in cases() {
        let Some(layout) = layout else { continue };
        let w = read(&format!("{dir}/w_q.bin"));
        let m = QMatrix::with_layout(ty, M, K, &w, layout).unwrap();
        assert_eq!(
            m.packed_bytes(),
            &read(&format!("{dir}/w_repacked.bin"))[..],
            "{dir} {layout}"
        );
        assert_eq!(m.to_ggml_bytes(), w, "{dir}: unpack");
    }
}

#[test]
fn activation_quantization_equals_ggml() {
    let x = f32s(&read("x_16x512x7.bin"));
    let rows: [&[f32]; 4] = [0, 1, 2, 3].map(|m| &x[m * K..(m + 1) * K]);
    for (dir, _, layout, _) in cases() {
        let Some(layout) = layout else { continue };
        // ggml's x86 K-quant layouts (q4_K_8x8, q2_K_8x8) read Q8_K quads interleaved by 8.
        let got: Vec<u8> = if matches!(layout, Layout::Q4_K_8x8 | Layout::Q2_K_8x8) {
            let mut quads = vec![BlockQ8Kx4::zeroed(); K / 256];
            Q8KInterleaved::quantize_quad(rows, &mut quads);
            let mut tail = vec![BlockQ8K::zeroed(); (N - 4) * K / 256];
            Q8KInterleaved::quantize_row(&x[4 * K..], &mut tail);
            [
                bytemuck::cast_slice(&quads),
                bytemuck::cast_slice::<_, u8>(&tail),
            ]
            .concat()
        } else {
            assert_eq!(layout.interleave_bytes(), 8, "{dir}");
            let mut quads = vec![BlockQ8_0x4::zeroed(); K / 32];
            Q8_0Interleaved::<8>::quantize_quad(rows, &mut quads);
            let mut tail = vec![BlockQ8_0::zeroed(); (N - 4) * K / 32];
            Q8_0Interleaved::<8>::quantize_row(&x[4 * K..], &mut tail);
            [
                bytemuck::cast_slice(&quads),
                bytemuck::cast_slice::<_, u8>(&tail),
            ]
            .concat()
        };
        let want = read(&format!("{dir}/xq_repacked.bin"));
        assert_eq!(got.len(), want.len(), "{dir}");
        let diff = got.iter().zip(&want).filter(|(a, b)| a != b).count();
        assert_eq!(diff, 0, "{dir}: {diff} activation bytes differ from ggml");
    }
}
