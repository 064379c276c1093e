//! The model commands run through the `qrepack` binary on a small GGUF written here, plus the
//! whole flow on Gemma 3 270M when `QREPACK_GEMMA` points to its GGUF file:
//!
//! ```text
//! QREPACK_GEMMA=/path/gemma-3-270m-q4_k_m.gguf cargo test --release -p qrepack-cli -- --ignored
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;

use qrepack::cpu::CpuFeatures;
use qrepack::gguf::{GgufValue, GgufWriter};
use qrepack::{GgmlType, Layout, Model, QMatrix};

mod common;

use common::*;

#[test]
fn inspect_verify_bench_on_a_small_model() {
    let dir = TempDir::new("ivb");
    let m = dir.path("tiny.gguf");
    write_model(&m);
    let lib = Model::open(&m).unwrap();

    let v = ok_json(&["inspect", s(&m), "--json", "--metadata"]);
    assert_eq!(v["architecture"], "llama");
    assert_eq!(v["name"], "tiny test");
    assert_eq!(v["tensor_count"], 6);
    assert_eq!(v["matrices"], 5);
    assert_eq!(v["hyperparameters"]["llama.block_count"], 1);
    assert_eq!(v["alignment"], 32);
    assert_eq!(v["version"], 3);
    let tensors = v["tensors"].as_array().unwrap();
    let find = |n: &str| tensors.iter().find(|t| t["name"] == n).unwrap().clone();
    assert_eq!(find("blk.0.attn_norm.weight")["kind"], "raw");
    assert!(find("blk.0.attn_norm.weight")["note"]
        .as_str()
        .unwrap()
        .contains("1-D"));
    let k = find("blk.0.attn_k.weight");
    assert_eq!(k["layout"], "plain");
    assert!(k["note"].as_str().unwrap().contains("rows 7"), "{k}");
    for t in lib.tensors() {
        let j = find(&t.name);
        assert_eq!(j["became"], t.became.to_string());
        assert_eq!(j["shape"], {
            let d: Vec<String> = t.dims.iter().rev().map(|d| d.to_string()).collect();
            d.join("x")
        });
    }
    // per-type totals agree with what the library did
    for ty in v["types"].as_array().unwrap() {
        let name = ty["type"].as_str().unwrap();
        let (mut bytes, mut repacked) = (0u64, 0u64);
        for (t, info) in lib.tensors().iter().zip(lib.gguf().tensors()) {
            if t.type_name() == name {
                bytes += info.size;
                if lib
                    .matrix(&t.name)
                    .is_some_and(|m| m.layout() != Layout::Plain)
                {
                    repacked += info.size;
                }
            }
        }
        assert_eq!(ty["bytes"], bytes, "{name}");
        assert_eq!(ty["repacked_bytes"], repacked, "{name}");
    }
    let text = run(&["inspect", s(&m)]);
    assert!(text.status.success());
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("by type:") && text.contains("blk.0.ffn_up.weight"));

    let v = ok_json(&["verify", s(&m), "--batch", "1,5", "--json", "-q"]);
    assert_eq!(v["checked"], 5);
    assert_eq!(v["failed"], 0);
    assert!(v["worst_nmse_vs_ref"].as_f64().unwrap() <= 1e-9);
    for t in v["tensors"].as_array().unwrap() {
        assert_eq!(t["pass"], true, "{t}");
        assert_eq!(t["batches"].as_array().unwrap().len(), 2);
    }
    let v = ok_json(&["verify", s(&m), "--tensor", "blk.0.ffn_up.weight", "--json"]);
    assert_eq!(v["checked"], 1);
    fails(
        &["verify", s(&m), "--tensor", "nope"],
        "no tensor named 'nope'",
    );
    fails(
        &["verify", s(&m), "--tensor", "blk.0.attn_norm.weight"],
        "not a weight matrix",
    );
    fails(&["inspect", s(&dir.path("missing.gguf"))], "missing.gguf");
    std::fs::write(dir.path("junk.gguf"), b"GGUF\x03\0\0\0garbage").unwrap();
    fails(&["inspect", s(&dir.path("junk.gguf"))], "junk.gguf");

    let v = ok_json(&[
        "bench",
        s(&m),
        "--batch",
        "1,4",
        "--reps",
        "1",
        "--threads",
        "1",
        "--json",
        "-q",
    ]);
    // output.weight exists, so every matrix is timed
    assert_eq!(v["matrices_timed"], 5);
    let batches = v["batches"].as_array().unwrap();
    assert_eq!(batches.len(), 2);
    for b in batches {
        assert!(b["repacked_ms"].as_f64().unwrap() > 0.0);
        assert!(b["plain_ms"].as_f64().unwrap() > 0.0);
        assert!(b["repacked_tokens_per_s"].as_f64().unwrap() > 0.0);
    }
    let q4 = v["types"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["type"] == "q4_0")
        .unwrap()
        .clone();
    assert_eq!(q4["matrices"], 2);
    usage_error(
        &["bench", s(&m), "--type", "q4_0"],
        "'[MODEL]' cannot be used with '--type <TYPE>'",
    );
    usage_error(&["bench", s(&m), "--sweep"], "'--sweep'");
    usage_error(&["bench", s(&m), "--check"], "'--check'");
}

/// A file of the grid, ternary, FP4 and 1-2-bit types (ggml's own 16x512 weights, from qrepack's fixtures):
/// `inspect` lists them as plain matrices and `verify` passes each against the f64 reference.
#[test]
fn inspect_and_verify_the_grid_ternary_and_fp4_types() {
    let dir = TempDir::new("lowbit");
    let m = dir.path("lowbit.gguf");
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../qrepack/tests/fixtures/ggml");
    let names = [
        "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq1_s", "iq1_m", "tq1_0", "tq2_0",
        "mxfp4", "nvfp4", "q1_0", "q2_0",
    ];
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", GgufValue::String("test".into()))
        .unwrap();
    for name in names {
        let ty: GgmlType = name.parse().unwrap();
        let bytes = std::fs::read(fixtures.join(format!("{name}_off/w_q.bin"))).unwrap();
        w.add_tensor_owned(&format!("blk.0.{name}.weight"), &[512, 16], ty.id(), bytes)
            .unwrap();
    }
    w.write_to(&m, false).unwrap();
    let v = ok_json(&["inspect", s(&m), "--json"]);
    let tensors = v["tensors"].as_array().unwrap();
    assert_eq!(tensors.len(), names.len());
    assert_eq!(v["matrices"], names.len());
    for t in tensors {
        // MXFP4 takes ggml's repacked layout where this CPU has its kernels; the others have
        // none
        let ty: GgmlType = t["type"].as_str().unwrap().parse().unwrap();
        let want = Layout::best_for(ty, 16, CpuFeatures::get()).name();
        assert_eq!(t["layout"], want, "{t}");
        assert!(ty == GgmlType::MXFP4 || want == "plain", "{t}");
    }
    let v = ok_json(&["verify", s(&m), "--batch", "1,5", "--json", "-q"]);
    assert_eq!(v["checked"], names.len());
    assert_eq!(v["failed"], 0);
    assert!(v["worst_nmse_vs_ref"].as_f64().unwrap() <= 1e-9);
}

#[test]
fn repack_writes_a_cache_and_refuses_to_overwrite() {
    let dir = TempDir::new("repack");
    let m = dir.path("tiny.gguf");
    write_model(&m);
    let out = dir.path("tiny.repacked.gguf");
    let v = ok_json(&["repack", s(&m), "-o", s(&out), "--json", "-q"]);
    assert!(v["cache_open_ms"].as_f64().unwrap() > 0.0);
    assert!(v["open_repack_ms"].as_f64().unwrap() > 0.0);
    let lib = Model::open(&m).unwrap();
    let repacked = lib
        .tensors()
        .iter()
        .filter(|t| {
            lib.matrix(&t.name)
                .is_some_and(|m| m.layout() != Layout::Plain)
        })
        .count();
    assert_eq!(v["repacked_tensors"], repacked);
    let cache = Model::open(&out).unwrap();
    assert!(cache.is_cache());
    for (name, ..) in MATRICES {
        assert_eq!(
            cache.matrix(name).unwrap().to_ggml_bytes(),
            lib.matrix(name).unwrap().to_ggml_bytes()
        );
    }
    let before = std::fs::read(&out).unwrap();
    fails(&["repack", s(&m), "-o", s(&out)], "--force");
    assert_eq!(std::fs::read(&out).unwrap(), before);
    ok_json(&["repack", s(&m), "-o", s(&out), "--force", "--json", "-q"]);
    let orig = std::fs::read(&m).unwrap();
    fails(
        &["repack", s(&m), "-o", s(&m), "--force"],
        "input file itself",
    );
    // the same file by another path
    let alias = dir.0.join(".").join("tiny.gguf");
    fails(
        &["repack", s(&m), "-o", s(&alias), "--force"],
        "input file itself",
    );
    assert_eq!(std::fs::read(&m).unwrap(), orig);
    // inspect reads the cache
    let v = ok_json(&["inspect", s(&out), "--json", "-q"]);
    assert_eq!(v["is_cache"], true);
    // no temp files left behind
    let left: Vec<_> = std::fs::read_dir(&dir.0)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains("tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// `synth` writes a file the library opens with the preset's shape, reports it, refuses to
/// overwrite it without --force, and rejects unknown presets and mixes as usage errors.
#[test]
fn synth_writes_the_tiny_preset() {
    let dir = TempDir::new("synth");
    let m = dir.path("tiny.gguf");
    let v = ok_json(&[
        "synth",
        "--preset",
        "tiny",
        "--mix",
        "q4_k_m",
        "-o",
        s(&m),
        "--json",
    ]);
    assert_eq!(v["preset"], "tiny");
    assert_eq!(v["mix"], "q4_k_m");
    assert_eq!(v["tensors"], 20);
    assert_eq!(v["bytes"], std::fs::metadata(&m).unwrap().len());
    let model = Model::open(&m).unwrap();
    assert_eq!(model.tensors().len(), 20);
    let t = model.tensor("blk.1.ffn_gate.weight").unwrap();
    assert_eq!(
        (t.ty, t.dims.clone()),
        (Some(GgmlType::Q4_K), vec![256, 512])
    );
    let before = std::fs::read(&m).unwrap();
    fails(
        &["synth", "--preset", "tiny", "--mix", "q4_0", "-o", s(&m)],
        "already exists",
    );
    assert_eq!(std::fs::read(&m).unwrap(), before);
    let o = run(&["synth", "--preset", "tiny", "-o", s(&m), "--force"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("mix q4_0"));
    // the same seed gives the same file; progress lines go to stderr (not a terminal here)
    assert!(String::from_utf8_lossy(&o.stderr).contains("100%"));
    let q4_0 = std::fs::read(&m).unwrap();
    assert_ne!(q4_0, before);
    let m2 = dir.path("again.gguf");
    let o = run(&["synth", "--preset", "tiny", "-o", s(&m2), "-q"]);
    assert!(o.status.success() && o.stderr.is_empty());
    assert_eq!(std::fs::read(&m2).unwrap(), q4_0);
    usage_error(
        &["synth", "--preset", "llama-7b", "-o", s(&m2)],
        "unknown preset",
    );
    usage_error(
        &["synth", "--preset", "tiny", "--mix", "q8_0", "-o", s(&m2)],
        "unknown mix",
    );
    fails(
        &[
            "synth",
            "--preset",
            "qwen2.5-1.5b",
            "--rope-freqs",
            "-o",
            s(&dir.path("q.gguf")),
        ],
        "rope_freqs",
    );
}

fn write_npy(path: &Path, shape: &[usize], data: &[f32], descr: &str) {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape_s = if dims.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    };
    let mut h = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_s}, }}");
    while (10 + h.len() + 1) % 64 != 0 {
        h.push(' ');
    }
    h.push('\n');
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend_from_slice(&(h.len() as u16).to_le_bytes());
    b.extend_from_slice(h.as_bytes());
    for v in data {
        b.extend_from_slice(&v.to_le_bytes());
    }
    std::fs::write(path, b).unwrap();
}

fn read_npy(path: &Path) -> (String, Vec<f32>) {
    let b = std::fs::read(path).unwrap();
    assert_eq!(&b[..8], b"\x93NUMPY\x01\x00");
    let hl = u16::from_le_bytes([b[8], b[9]]) as usize;
    assert_eq!((10 + hl) % 64, 0);
    let h = String::from_utf8(b[10..10 + hl].to_vec()).unwrap();
    let data = b[10 + hl..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    (h, data)
}

#[test]
fn matmul_matches_the_library() {
    let dir = TempDir::new("matmul");
    let m = dir.path("tiny.gguf");
    write_model(&m);
    let lib = Model::open(&m).unwrap();
    let (x_path, y_path) = (dir.path("x.npy"), dir.path("y.npy"));
    for (name, ty, rows, cols) in MATRICES {
        let n = 3;
        let x = values(n * cols, 7);
        write_npy(&x_path, &[n, cols], &x, "<f4");
        let lm = lib.matrix(name).unwrap();
        for layout in [None, Some(Layout::Plain)] {
            let mut args = vec![
                "matmul",
                s(&m),
                "--tensor",
                name,
                "--input",
                s(&x_path),
                "--output",
                s(&y_path),
                "--json",
                "-q",
            ];
            let want_layout = layout.unwrap_or(lm.layout());
            if let Some(l) = layout {
                args.extend(["--layout", l.name()]);
            }
            let v = ok_json(&args);
            assert_eq!(v["layout"], want_layout.name());
            assert_eq!(v["output_shape"], serde_json::json!([n, rows]));
            let (h, y) = read_npy(&y_path);
            assert!(h.contains(&format!("'shape': ({n}, {rows})")), "{h}");
            assert!(h.contains("'descr': '<f4'") && h.contains("'fortran_order': False"));
            let qm =
                QMatrix::with_layout(ty, rows, cols, &lm.to_ggml_bytes(), want_layout).unwrap();
            let mut want = vec![0.0f32; n * rows];
            qm.matmul(&x, n, &mut want).unwrap();
            assert_eq!(y, want, "{name} {want_layout}");
        }
    }
    // 1-D input gives 1-D output
    let (name, _, rows, cols) = MATRICES[0];
    write_npy(&x_path, &[cols], &values(cols, 3), "<f4");
    ok_json(&[
        "matmul",
        s(&m),
        "--tensor",
        name,
        "--input",
        s(&x_path),
        "--output",
        s(&y_path),
        "--json",
    ]);
    let (h, y) = read_npy(&y_path);
    assert!(h.contains(&format!("({rows},)")), "{h}");
    assert_eq!(y.len(), rows);
    // errors
    let base = |inp: &Path| {
        vec![
            "matmul".to_string(),
            s(&m).to_string(),
            "--tensor".into(),
            name.into(),
            "--input".into(),
            s(inp).to_string(),
            "--output".into(),
            s(&y_path).to_string(),
        ]
    };
    let fail_with = |args: Vec<String>, needle: &str| {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        fails(&a, needle);
    };
    write_npy(&x_path, &[2, cols + 32], &values(2 * (cols + 32), 3), "<f4");
    fail_with(base(&x_path), "does not fit");
    let f8 = dir.path("x8.npy");
    write_npy(&f8, &[1, cols / 2], &values(cols, 3), "<f8");
    fail_with(base(&f8), "'<f8'");
    write_npy(&x_path, &[1, cols], &values(cols, 3), "<f4");
    let mut a = base(&x_path);
    a.extend(["--layout".into(), "q8_0_8x8".into()]);
    fail_with(a, "does not fit");
    let mut a = base(&x_path);
    a[3] = "blk.0.attn_norm.weight".into();
    fail_with(a, "dimensions");
    let mut a = base(&x_path);
    a[3] = "missing".into();
    fail_with(a, "no tensor named");
}

/// The whole flow on Gemma 3 270M (QREPACK_GEMMA=/path/to/gemma-3-270m-q4_k_m.gguf).
#[test]
#[ignore]
fn gemma_flow() {
    let Ok(model) = std::env::var("QREPACK_GEMMA") else {
        panic!("set QREPACK_GEMMA to the Gemma 3 270M Q4_K_M GGUF file");
    };
    let model = PathBuf::from(model);
    let dir = TempDir::new("gemma");
    let v = ok_json(&["inspect", s(&model), "--json", "-q"]);
    assert_eq!(v["architecture"], "gemma3");
    assert!(v["repacked_pct"].as_f64().unwrap() > 50.0);
    let v = ok_json(&["verify", s(&model), "--json", "-q"]);
    assert_eq!(
        v["failed"], 0,
        "worst nmse vs plain {}, vs ref {}",
        v["worst_nmse_vs_plain"], v["worst_nmse_vs_ref"]
    );
    let v = ok_json(&[
        "bench",
        s(&model),
        "--batch",
        "1,16",
        "--reps",
        "2",
        "--json",
        "-q",
    ]);
    assert_eq!(v["batches"].as_array().unwrap().len(), 2);
    let out = dir.path("gemma.repacked.gguf");
    let v = ok_json(&["repack", s(&model), "-o", s(&out), "--json", "-q"]);
    assert!(v["cache_open_ms"].as_f64().unwrap() < v["open_repack_warm_ms"].as_f64().unwrap());
    let v = ok_json(&["verify", s(&out), "--json", "-q", "--batch", "1"]);
    assert_eq!(v["failed"], 0);
    // requantized to q4_0 and iq4_nl by the example (built by cargo for this test run)
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let st = Command::new(env!("CARGO"))
        .current_dir(&root)
        .args([
            "build",
            "--release",
            "-q",
            "-p",
            "qrepack",
            "--example",
            "requantize",
        ])
        .status()
        .unwrap();
    assert!(st.success());
    let exe = root.join("target/release/examples/requantize");
    for ty in ["q4_0", "iq4_nl"] {
        let q = dir.path(&format!("gemma-{ty}.gguf"));
        let st = Command::new(&exe)
            .args([s(&model), s(&q), ty])
            .status()
            .unwrap();
        assert!(st.success(), "requantize {ty}");
        let v = ok_json(&["verify", s(&q), "--json", "-q"]);
        assert_eq!(v["failed"], 0, "{ty}");
        let v = ok_json(&["inspect", s(&q), "--json", "-q"]);
        assert!(v["types"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["type"] == ty));
    }
}
