//! Against ggml's ARM build: `ggml_mm_bench --K 256 --M 12|16 --N 1..9|33 --dump` from ggml
//! 1.12.2 (cui-llama.rn) cross-built for aarch64 and run under `qemu-aarch64` (`-cpu max` for
//! the i8mm choices, `-cpu neoverse-n1` for the dotprod ones). The dumps hold ggml's quantized
//! and repacked weights, its quantized activations (quads of four rows, then the leftover rows)
//! and its `mul_mat` result; `scripts/make_arm_fixtures.sh` regenerates them.
//!
//! Every check runs on every architecture (the portable kernels and quantizers), and on an
//! AArch64 CPU once per kernel set it has.

mod common;

use std::path::PathBuf;

use bytemuck::Zeroable;
use qrepack::activation::{ArmQ8_0Interleaved, ChooseQuantizer};
use qrepack::blocks::{BlockQ8_0, BlockQ8_0x4};
use qrepack::cpu::CpuFeatures;
use qrepack::{Layout, QMatrix};

const K: usize = 256;
const NS: &[usize] = &[1, 2, 3, 4, 5, 6, 7, 8, 9, 33];

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/arm")
}

fn read(path: &str) -> Vec<u8> {
    std::fs::read(fixtures().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// (directory, ggml's layout, weight rows).
fn cases() -> Vec<(String, Layout, usize)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(fixtures()).unwrap() {
        let entry = entry.unwrap();
        if !entry.file_type().unwrap().is_dir() {
            continue;
        }
        let dir = entry.file_name().into_string().unwrap();
        let layout = String::from_utf8(read(&format!("{dir}/layout.txt"))).unwrap();
        let layout: Layout = layout.trim().parse().unwrap();
        let rows: usize = dir.rsplit_once("_m").unwrap().1.parse().unwrap();
        out.push((dir, layout, rows));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(out.len() >= 11, "fixtures missing: {out:?}");
    out
}

fn cpu_variants() -> Vec<CpuFeatures> {
    let cpu = *CpuFeatures::get();
    let mut v: Vec<CpuFeatures> = cpu.sets().map(|s| cpu.capped(s)).collect();
    v.dedup();
    v
}

#[test]
fn repacked_weights_are_byte_identical_to_ggml_arm() {
    for (dir, layout, rows) in cases() {
        let ty = layout.weight_type().unwrap();
        let w = read(&format!("{dir}/w_q.bin"));
        let m = QMatrix::with_layout(ty, rows, K, &w, layout).unwrap();
        assert_eq!(
            m.packed_bytes(),
            &read(&format!("{dir}/w_repacked.bin"))[..],
            "{dir}"
        );
        assert_eq!(m.to_ggml_bytes(), w, "{dir}: unpack");
    }
}

/// Our quantization of `n` rows in ggml's arrangement: quads, then leftover rows.
fn quantize<const IL: usize>(x: &[f32], n: usize, cpu: &CpuFeatures) -> Vec<u8> {
    let q = ArmQ8_0Interleaved::<IL>::quantizer(cpu);
    let nb = K / 32;
    let mut out = Vec::new();
    for g in 0..n / 4 {
        let rows: [&[f32]; 4] = [0, 1, 2, 3].map(|m| &x[(4 * g + m) * K..(4 * g + m + 1) * K]);
        let mut quads = vec![BlockQ8_0x4::zeroed(); nb];
        (q.quad)(rows, &mut quads);
        out.extend_from_slice(bytemuck::cast_slice(&quads));
    }
    let tail = 4 * (n / 4);
    let mut rest = vec![BlockQ8_0::zeroed(); (n - tail) * nb];
    (q.row)(&x[tail * K..n * K], &mut rest);
    out.extend_from_slice(bytemuck::cast_slice(&rest));
    out
}

#[test]
fn quantized_activations_are_byte_identical_to_ggml_arm() {
    let x = f32s(&read(&format!("x_33x{K}.bin")));
    let mut checked = 0;
    for (dir, layout, _) in cases() {
        if layout.weight_type() == Some(qrepack::GgmlType::Q4_K) {
            continue; // Q8_K quads: see k_quant_activations_match_ggml_arm_values
        }
        for &n in NS {
            let want = read(&format!("{dir}/xq_n{n}.bin"));
            for cpu in cpu_variants().iter().chain([&CpuFeatures::scalar()]) {
                let got = match layout.interleave_bytes() {
                    4 => quantize::<4>(&x, n, cpu),
                    8 => quantize::<8>(&x, n, cpu),
                    il => panic!("{dir}: interleave {il}"),
                };
                assert_eq!(got.len(), want.len(), "{dir} n={n}");
                let diff = got.iter().zip(&want).filter(|(a, b)| a != b).count();
                assert_eq!(
                    diff,
                    0,
                    "{dir} n={n} {}: {diff} bytes differ",
                    cpu.describe()
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 100);
}

#[test]
fn matmul_matches_ggml_arm_within_nmse_1e9() {
    let x = f32s(&read(&format!("x_33x{K}.bin")));
    for (dir, layout, rows) in cases() {
        let ty = layout.weight_type().unwrap();
        let w = read(&format!("{dir}/w_q.bin"));
        for cpu in cpu_variants() {
            let m = QMatrix::with_layout_for_cpu(ty, rows, K, &w, layout, &cpu).unwrap();
            for &n in NS {
                let want = f32s(&read(&format!("{dir}/y_n{n}.bin")));
                let mut y = vec![f32::NAN; n * rows];
                m.matmul(&x[..n * K], n, &mut y).unwrap();
                let e = common::nmse(&y, &want);
                assert!(
                    e <= 1e-9,
                    "{dir} n={n} kernels={}: nmse {e:e} against ggml's ARM build",
                    m.kernel_name()
                );
            }
        }
    }
}
