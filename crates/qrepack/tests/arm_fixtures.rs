//! Against ggml's ARM build: `ggml_mm_bench --K 256 --M 12|16 --N 1..9|33 --dump` (and, for the
//! K-quant 8-row layouts, `--K 512 --M 24`) from ggml 1.12.2 (cui-llama.rn) cross-built for
//! aarch64 and run under `qemu-aarch64` (`-cpu max` for the i8mm choices, `-cpu neoverse-n1` for
//! the dotprod ones). The dumps hold ggml's quantized
//! and repacked weights, its quantized activations (quads of four rows, then the leftover rows)
//! and its `mul_mat` result; `scripts/make_arm_fixtures.sh` regenerates them. `q4_0_8x8_m16|24`
//! come from ggml's SVE build (`-march=armv8.6-a+sve+i8mm`) under `qemu-aarch64 -cpu
//! max,sve256=on`, where ggml runs its SVE kernels, as do the directories `*_sve` (`q8_0_4x8`,
//! `q4_K_8x8` through ggml's SVE GEMMs); `scripts/make_arm_sve_fixtures.sh`.
//!
//! `fixtures/arm_plain` holds the same build's plain path (`--repack off`, ggml's row vec_dots):
//! its quantized weights and `mul_mat` result for `--M 16 --K 256 --N 1..9|33` on the activations
//! of `fixtures/arm/x_33x256.bin`; `scripts/make_arm_plain_fixtures.sh` regenerates them.
//!
//! Every check runs on every architecture (the portable kernels and quantizers), and on an
//! AArch64 CPU once per kernel set it has.

mod common;

use std::path::PathBuf;

use bytemuck::Zeroable;
use qrepack::activation::{ArmQ8KInterleaved, ArmQ8_0Interleaved, ChooseQuantizer};
use qrepack::cpu::CpuFeatures;
use qrepack::{GgmlType, Layout, QMatrix};

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

/// (directory, ggml's layout, weight rows, columns): directories `<layout>_m<rows>` (256
/// columns) and `<layout>_m<rows>_k<columns>`, either with the suffix `_sve` (ggml's SVE build).
fn cases() -> Vec<(String, Layout, usize, usize)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(fixtures()).unwrap() {
        let entry = entry.unwrap();
        if !entry.file_type().unwrap().is_dir() {
            continue;
        }
        let dir = entry.file_name().into_string().unwrap();
        let layout = String::from_utf8(read(&format!("{dir}/layout.txt"))).unwrap();
        let layout: Layout = layout.trim().parse().unwrap();
        let shape = dir.rsplit_once("_m").unwrap().1;
        let shape = shape.strip_suffix("_sve").unwrap_or(shape);
        let (rows, cols) = shape.split_once("_k").unwrap_or((shape, "256"));
        let (rows, cols) = (rows.parse().unwrap(), cols.parse().unwrap());
        out.push((dir, layout, rows, cols));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(out.len() >= 22, "fixtures missing: {out:?}");
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
    for (dir, layout, rows, k) in cases() {
        let ty = layout.weight_type().unwrap();
        let w = read(&format!("{dir}/w_q.bin"));
        let m = QMatrix::with_layout(ty, rows, k, &w, layout).unwrap();
        assert_eq!(
            m.packed_bytes(),
            &read(&format!("{dir}/w_repacked.bin"))[..],
            "{dir}"
        );
        assert_eq!(m.to_ggml_bytes(), w, "{dir}: unpack");
    }
}

/// Our quantization of `n` rows of `k` columns in ggml's arrangement: quads, then leftover rows.
fn quantize<A: ChooseQuantizer>(x: &[f32], n: usize, k: usize, cpu: &CpuFeatures) -> Vec<u8> {
    let q = A::quantizer(cpu);
    let nb = k / A::BLOCK;
    let mut out = Vec::new();
    for g in 0..n / 4 {
        let rows: [&[f32]; 4] = [0, 1, 2, 3].map(|m| &x[(4 * g + m) * k..(4 * g + m + 1) * k]);
        let mut quads = vec![A::Quad::zeroed(); nb];
        (q.quad)(rows, &mut quads);
        out.extend_from_slice(bytemuck::cast_slice(&quads));
    }
    let tail = 4 * (n / 4);
    let mut rest = vec![A::Row::zeroed(); (n - tail) * nb];
    (q.row)(&x[tail * k..n * k], &mut rest);
    out.extend_from_slice(bytemuck::cast_slice(&rest));
    out
}

#[test]
fn quantized_activations_are_byte_identical_to_ggml_arm() {
    let mut checked = 0;
    for (dir, layout, _, k) in cases() {
        let x = f32s(&read(&format!("x_33x{k}.bin")));
        let k_quant = layout.weight_type().unwrap().block_size() == 256;
        for &n in NS {
            let want = read(&format!("{dir}/xq_n{n}.bin"));
            for cpu in cpu_variants().iter().chain([&CpuFeatures::scalar()]) {
                let got = match (k_quant, layout.interleave_bytes()) {
                    (false, 4) => quantize::<ArmQ8_0Interleaved<4>>(&x, n, k, cpu),
                    (false, 8) => quantize::<ArmQ8_0Interleaved<8>>(&x, n, k, cpu),
                    (true, 4) => quantize::<ArmQ8KInterleaved<4>>(&x, n, k, cpu),
                    (true, 8) => quantize::<ArmQ8KInterleaved<8>>(&x, n, k, cpu),
                    (_, il) => panic!("{dir}: interleave {il}"),
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
    assert!(checked >= 220);
}

#[test]
fn matmul_matches_ggml_arm_within_nmse_1e9() {
    for (dir, layout, rows, k) in cases() {
        let x = f32s(&read(&format!("x_33x{k}.bin")));
        let ty = layout.weight_type().unwrap();
        let w = read(&format!("{dir}/w_q.bin"));
        for cpu in cpu_variants() {
            let m = QMatrix::with_layout_for_cpu(ty, rows, k, &w, layout, &cpu).unwrap();
            for &n in NS {
                let want = f32s(&read(&format!("{dir}/y_n{n}.bin")));
                let mut y = vec![f32::NAN; n * rows];
                m.matmul(&x[..n * k], n, &mut y).unwrap();
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

fn plain_fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/arm_plain")
}

fn read_plain(path: &str) -> Vec<u8> {
    std::fs::read(plain_fixtures().join(path)).unwrap_or_else(|e| panic!("arm_plain/{path}: {e}"))
}

/// (directory, weight type, weight rows) of the plain dumps: directories `<type>_m<rows>`, 256
/// columns.
fn plain_cases() -> Vec<(String, GgmlType, usize)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(plain_fixtures()).unwrap() {
        let dir = entry.unwrap().file_name().into_string().unwrap();
        let (ty, rows) = dir.rsplit_once("_m").unwrap();
        out.push((dir.clone(), ty.parse().unwrap(), rows.parse().unwrap()));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    for ty in [
        "q2_K", "q3_K", "iq4_xs", "q5_1", "bf16", "f16", "q4_1", "q5_0",
    ] {
        let ty: GgmlType = ty.parse().unwrap();
        assert!(out.iter().any(|c| c.1 == ty), "no plain fixture for {ty}");
    }
    out
}

/// ggml's plain path on ARM, pinned for every layout qrepack can hold the type in (the plain
/// rows among them) and every kernel set this CPU has.
#[test]
fn plain_matmul_matches_ggml_arm_within_nmse_1e9() {
    const K: usize = 256;
    let x = f32s(&read(&format!("x_33x{K}.bin")));
    let mut checked = 0;
    for (dir, ty, rows) in plain_cases() {
        let w = read_plain(&format!("{dir}/w_q.bin"));
        let layouts: Vec<Layout> = Layout::candidates(ty)
            .into_iter()
            .filter(|l| l.fits(ty, rows))
            .collect();
        assert!(layouts.contains(&Layout::Plain), "{dir}");
        for cpu in cpu_variants() {
            for &layout in &layouts {
                let m = QMatrix::with_layout_for_cpu(ty, rows, K, &w, layout, &cpu).unwrap();
                for &n in NS {
                    let want = f32s(&read_plain(&format!("{dir}/y_n{n}.bin")));
                    let mut y = vec![f32::NAN; n * rows];
                    m.matmul(&x[..n * K], n, &mut y).unwrap();
                    let e = common::nmse(&y, &want);
                    assert!(
                        e <= 1e-9,
                        "{dir} as {layout} n={n} kernels={}: nmse {e:e} against ggml's ARM build",
                        m.kernel_name()
                    );
                    checked += 1;
                }
            }
        }
    }
    assert!(checked >= 8 * NS.len());
}
