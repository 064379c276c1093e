//! Whole-model loading: GGUF fixtures written by the tests, opened with `Model`, compared with
//! matrices built directly from the same bytes; repack caches written, reopened and corrupted.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use qrepack::gguf::{GgufFile, GgufValue, GgufValueType, GgufWriter};
use qrepack::model::{Became, Checksums, LayoutPolicy, OpenOptions, Progress, Stack};
use qrepack::rng::SplitMix64;
use qrepack::{quantize, Error, GgmlType, Layout, Model, QExperts, QMatrix};

struct TempDir(PathBuf);
impl TempDir {
    fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "qrepack-model-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// (name, type, rows, cols): the 2-D weights of the fixture.
const MATRICES: &[(&str, GgmlType, usize, usize)] = &[
    ("blk.0.q4_0", GgmlType::Q4_0, 16, 640),
    ("blk.0.q4_0.r7", GgmlType::Q4_0, 7, 640),
    ("blk.0.q4_k", GgmlType::Q4_K, 16, 2560),
    ("blk.0.q4_k.r12", GgmlType::Q4_K, 12, 512),
    ("blk.0.iq4_nl", GgmlType::IQ4_NL, 12, 640),
    ("blk.0.iq4_nl.r8", GgmlType::IQ4_NL, 8, 2560),
    ("blk.0.q8_0", GgmlType::Q8_0, 8, 2560),
    ("blk.0.q8_0.r12", GgmlType::Q8_0, 12, 640),
    ("blk.0.q6_k", GgmlType::Q6_K, 8, 512),
    ("blk.0.f16", GgmlType::F16, 7, 64),
];
const EXPERTS: (&str, GgmlType, usize, usize, usize) =
    ("blk.0.ffn_experts", GgmlType::Q4_0, 3, 8, 640);

struct Fixture {
    weights: Vec<(String, GgmlType, usize, usize, Vec<u8>)>,
    experts: Vec<u8>,
}

fn write_fixture(path: &Path) -> Fixture {
    let mut rng = SplitMix64::new(42);
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", GgufValue::String("test".into()))
        .unwrap();
    w.add_kv(
        "tokenizer.ggml.tokens",
        GgufValue::Array(
            GgufValueType::String,
            (0..50)
                .map(|i| GgufValue::String(format!("tok{i}")))
                .collect(),
        ),
    )
    .unwrap();
    w.add_kv("test.layers", GgufValue::U32(1)).unwrap();
    let mut weights = Vec::new();
    for &(name, ty, rows, cols) in MATRICES {
        let bytes = quantize(ty, &rng.pm1_vec(rows * cols), rows, cols).unwrap();
        weights.push((name.to_string(), ty, rows, cols, bytes));
    }
    for (name, ty, rows, cols, bytes) in &weights {
        w.add_tensor(name, &[*cols as u64, *rows as u64], ty.id(), bytes)
            .unwrap();
    }
    let norm: Vec<u8> = rng
        .pm1_vec(640)
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    w.add_tensor_owned("blk.0.norm", &[640], 0, norm).unwrap();
    let (name, ty, n, rows, cols) = EXPERTS;
    let experts = quantize(ty, &rng.pm1_vec(n * rows * cols), n * rows, cols).unwrap();
    w.add_tensor(
        name,
        &[cols as u64, rows as u64, n as u64],
        ty.id(),
        &experts,
    )
    .unwrap();
    // a type ggml knows but qrepack does not multiply (i8): listed, copied, never converted
    w.add_tensor_owned("blk.0.i8", &[256, 2], 24, vec![0x5a; 2 * 256])
        .unwrap();
    // an IQ2_XXS tensor of arbitrary bytes: a plain matrix like any other
    w.add_tensor_owned("blk.0.iq2", &[256, 2], 16, vec![0x5a; 2 * 66])
        .unwrap();
    w.write_to(path, false).unwrap();
    Fixture { weights, experts }
}

fn product(m: &QMatrix, n: usize, seed: u64) -> Vec<f32> {
    let x = SplitMix64::new(seed).pm1_vec(n * m.cols());
    let mut y = vec![0.0; n * m.rows()];
    m.matmul(&x, n, &mut y).unwrap();
    y
}

/// Every matrix of `model` gives exactly the results of `reference(ty, rows, cols, bytes)`.
fn check_matrices(
    model: &Model,
    fx: &Fixture,
    reference: impl Fn(GgmlType, usize, usize, &[u8]) -> QMatrix,
) {
    for (name, ty, rows, cols, bytes) in &fx.weights {
        let m = model
            .matrix(name)
            .unwrap_or_else(|| panic!("{name} missing"));
        let r = reference(*ty, *rows, *cols, bytes);
        assert_eq!(m.layout(), r.layout(), "{name}");
        assert_eq!((m.rows(), m.cols(), m.ty()), (*rows, *cols, *ty));
        for n in [1, 5] {
            assert_eq!(product(m, n, 7), product(&r, n, 7), "{name} batch {n}");
        }
        assert_eq!(&m.to_ggml_bytes(), bytes, "{name}");
    }
    let (name, ty, n, rows, cols) = EXPERTS;
    let e = model.experts(name).unwrap();
    let per = ty.matrix_bytes(rows, cols).unwrap();
    let want = reference(ty, rows, cols, &fx.experts[..per]).layout();
    assert_eq!(e.layout(), want, "{name}");
    let r = QExperts::with_layout(ty, n, rows, cols, &fx.experts, want).unwrap();
    assert_eq!((e.n_expert(), e.rows(), e.cols()), (n, rows, cols));
    let x = SplitMix64::new(9).pm1_vec(2 * cols);
    let ids = [2, 0, 1, 2];
    let (mut y1, mut y2) = (vec![0.0; 4 * rows], vec![0.0; 4 * rows]);
    e.matmul_id(&x, 1, &ids, 2, &mut y1).unwrap();
    r.matmul_id(&x, 1, &ids, 2, &mut y2).unwrap();
    assert_eq!(y1, y2);
}

#[test]
fn open_matches_direct_matrices() {
    let dir = TempDir::new("open");
    let path = dir.path("m.gguf");
    let fx = write_fixture(&path);
    let model = Model::open(&path).unwrap();
    check_matrices(&model, &fx, |ty, r, c, b| {
        QMatrix::new(ty, r, c, b).unwrap()
    });
    assert!(!model.is_cache());
    assert!(model.warnings().is_empty());
    let norm = model.tensor("blk.0.norm").unwrap();
    assert_eq!(norm.became, Became::Raw("not a weight: 1-D".into()));
    assert_eq!(model.raw_bytes("blk.0.norm").unwrap().len(), 640 * 4);
    let i8t = model.tensor("blk.0.i8").unwrap();
    assert!(
        i8t.became.to_string().contains("type id 24"),
        "{}",
        i8t.became
    );
    assert!(model.matrix("blk.0.i8").is_none());
    let iq2 = model.matrix("blk.0.iq2").unwrap();
    assert_eq!((iq2.ty(), iq2.layout()), (GgmlType::IQ2_XXS, Layout::Plain));
    let direct = QMatrix::new(GgmlType::IQ2_XXS, 2, 256, &[0x5a; 2 * 66]).unwrap();
    assert_eq!(product(iq2, 3, 5), product(&direct, 3, 5));
    // plain matrices are views of the file
    let r7 = model.tensor("blk.0.q4_0.r7").unwrap();
    match &r7.became {
        Became::Matrix {
            layout: Layout::Plain,
            zero_copy: true,
            note: Some(n),
        } => assert!(n.contains("rows 7 not a multiple of"), "{n}"),
        other => panic!("{other:?}"),
    }
    let f16 = model.tensor("blk.0.f16").unwrap().became.to_string();
    assert!(f16.contains("no interleaved layout for f16"), "{f16}");
    for t in model.tensors() {
        println!(
            "{:<20} {:<8} {:?}: {}",
            t.name,
            t.type_name(),
            t.dims,
            t.became
        );
    }
    assert_eq!(model.tensors().len(), MATRICES.len() + 4);
    assert_eq!(
        model.gguf().get("test.layers").and_then(|v| v.as_u64()),
        Some(1)
    );
}

/// Stacked matrices multiply as their parts one after the other, hold the parts' bytes in
/// order, replace the parts, and bad stacks are clear errors.
#[test]
fn stacks_replace_their_parts() {
    let dir = TempDir::new("stacks");
    let path = dir.path("m.gguf");
    let fx = write_fixture(&path);
    let parts = ["blk.0.q4_0", "blk.0.q4_0.r7"];
    let opts = OpenOptions {
        stacks: vec![Stack::new("qq", parts), Stack::new("kk", ["blk.0.q4_k"])],
        ..OpenOptions::default()
    };
    let model = Model::open_with(&path, &opts).unwrap();
    let plain = Model::open(&path).unwrap();
    let stacked = model.stack("qq").expect("the stack");
    assert_eq!((stacked.rows(), stacked.cols()), (23, 640));
    let mut want_bytes = Vec::new();
    for p in parts {
        assert!(model.matrix(p).is_none(), "{p} was built on its own too");
        assert_eq!(
            model.tensor(p).unwrap().became,
            Became::Stacked("qq".into())
        );
        let (_, _, _, _, bytes) = fx.weights.iter().find(|w| w.0 == p).unwrap();
        want_bytes.extend_from_slice(bytes);
    }
    assert_eq!(stacked.to_ggml_bytes(), want_bytes);
    // The stacked product is the parts' products side by side, row by row; the stack's own
    // layout may differ from the parts', so compare with a matrix built directly.
    let direct =
        QMatrix::with_layout(GgmlType::Q4_0, 23, 640, &want_bytes, stacked.layout()).unwrap();
    for n in [1, 4, 6] {
        let y = product(stacked, n, 3);
        assert_eq!(y, product(&direct, n, 3), "batch {n}");
        let (a, b) = (
            plain.matrix(parts[0]).unwrap(),
            plain.matrix(parts[1]).unwrap(),
        );
        let (ya, yb) = (product(a, n, 3), product(b, n, 3));
        for r in 0..n {
            let row = &y[r * 23..(r + 1) * 23];
            let want: Vec<f32> = ya[r * 16..(r + 1) * 16]
                .iter()
                .chain(&yb[r * 7..(r + 1) * 7])
                .copied()
                .collect();
            for (g, w) in row.iter().zip(&want) {
                assert!(
                    (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
                    "batch {n} row {r}: {g} vs {w}"
                );
            }
        }
    }
    assert_eq!(
        model.stack("kk").unwrap().to_ggml_bytes(),
        plain.matrix("blk.0.q4_k").unwrap().to_ggml_bytes()
    );
    // Other tensors are untouched; a stacked model is not written as a cache.
    assert!(model.matrix("blk.0.q8_0").is_some());
    assert!(model.write_repacked(&dir.path("c.gguf"), false).is_err());

    // From a repack cache: the stored parts put together, the same matrix as from the file.
    let cache = dir.path("cache.gguf");
    plain.write_repacked(&cache, false).unwrap();
    let cached = Model::open_with(&cache, &opts).unwrap();
    assert!(cached.is_cache());
    let from_cache = cached.stack("qq").expect("the stack from the cache");
    assert_eq!(from_cache.layout(), stacked.layout());
    assert_eq!(from_cache.to_ggml_bytes(), want_bytes);
    for n in [1, 5] {
        assert_eq!(
            product(from_cache, n, 4),
            product(stacked, n, 4),
            "cache batch {n}"
        );
    }
    assert!(cached.matrix(parts[0]).is_none());
    assert_eq!(
        cached.stack("kk").unwrap().to_ggml_bytes(),
        plain.matrix("blk.0.q4_k").unwrap().to_ggml_bytes()
    );

    let bad = |stacks: Vec<Stack>| {
        let opts = OpenOptions {
            stacks,
            ..OpenOptions::default()
        };
        match Model::open_with(&path, &opts) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("a bad stack was accepted"),
        }
    };
    assert!(bad(vec![Stack::new("s", ["nope"])]).contains("no tensor 'nope'"));
    assert!(bad(vec![Stack::new("s", ["blk.0.q4_0", "blk.0.q8_0.r12"])]).contains("columns"));
    assert!(bad(vec![Stack::new("blk.0.f16", ["blk.0.q4_0"])]).contains("is a tensor"));
    assert!(bad(vec![
        Stack::new("a", ["blk.0.q4_0"]),
        Stack::new("b", ["blk.0.q4_0"])
    ])
    .contains("also a part"));
    assert!(bad(vec![Stack::new("s", ["blk.0.ffn_experts"])]).contains("2-D"));
    assert!(bad(vec![Stack::new("s", Vec::<String>::new())]).contains("no parts"));
}

#[test]
fn layout_policies() {
    let dir = TempDir::new("policy");
    let path = dir.path("m.gguf");
    let fx = write_fixture(&path);
    let plain = OpenOptions {
        layout: LayoutPolicy::Plain,
        ..OpenOptions::default()
    };
    let model = Model::open_with(&path, &plain).unwrap();
    check_matrices(&model, &fx, |ty, r, c, b| {
        QMatrix::with_layout(ty, r, c, b, Layout::Plain).unwrap()
    });
    for (name, ..) in &fx.weights {
        assert!(matches!(
            model.tensor(name).unwrap().became,
            Became::Matrix {
                zero_copy: true,
                ..
            }
        ));
    }
    let force = OpenOptions {
        layout: LayoutPolicy::Force(Layout::Q4_0_4x4),
        ..OpenOptions::default()
    };
    let model = Model::open_with(&path, &force).unwrap();
    check_matrices(&model, &fx, |ty, r, c, b| {
        if Layout::Q4_0_4x4.fits(ty, r) {
            QMatrix::with_layout(ty, r, c, b, Layout::Q4_0_4x4).unwrap()
        } else {
            QMatrix::new(ty, r, c, b).unwrap()
        }
    });
    assert_eq!(
        model.matrix("blk.0.q4_0").unwrap().layout(),
        Layout::Q4_0_4x4
    );
}

#[test]
fn progress_is_reported() {
    let dir = TempDir::new("progress");
    let path = dir.path("m.gguf");
    write_fixture(&path);
    let seen: Arc<Mutex<Vec<Progress>>> = Arc::default();
    let s2 = Arc::clone(&seen);
    let opts = OpenOptions {
        progress: Some(Arc::new(move |p| s2.lock().unwrap().push(p))),
        ..OpenOptions::default()
    };
    Model::open_with(&path, &opts).unwrap();
    let seen = seen.lock().unwrap();
    // the matrices, the experts and the IQ2_XXS tensor
    assert_eq!(seen.len(), MATRICES.len() + 2);
    let last = seen.iter().max_by_key(|p| p.tensors_done).unwrap();
    assert_eq!(last.tensors_done, last.tensors_total);
    assert_eq!(last.bytes_done, last.bytes_total);
}

#[test]
fn repack_cache_round_trip() {
    let dir = TempDir::new("cache");
    let path = dir.path("m.gguf");
    let cache = dir.path("m.repacked.gguf");
    let fx = write_fixture(&path);
    let model = Model::open(&path).unwrap();
    model.write_repacked(&cache, false).unwrap();

    // the cache is a valid GGUF with the same tensors, names, dims and type ids
    let g = GgufFile::open(&cache).unwrap();
    for (a, b) in model.gguf().tensors().iter().zip(g.tensors()) {
        assert_eq!((&a.name, &a.dims, a.type_id), (&b.name, &b.dims, b.type_id));
    }
    assert_eq!(
        g.get("qrepack.version"),
        Some(&GgufValue::U32(qrepack::model::CACHE_VERSION))
    );
    assert!(g.get("qrepack.cpu").and_then(|v| v.as_str()).is_some());
    assert_eq!(
        g.get("general.architecture").and_then(|v| v.as_str()),
        Some("test")
    );
    let repacked: Vec<&str> = fx
        .weights
        .iter()
        .filter(|w| model.matrix(&w.0).unwrap().layout() != Layout::Plain)
        .map(|w| w.0.as_str())
        .collect();
    for name in &repacked {
        let layout = model.matrix(name).unwrap().layout();
        assert_eq!(
            g.get(&format!("qrepack.layout.{name}")),
            Some(&GgufValue::String(layout.name().into()))
        );
    }

    let again = Model::open(&cache).unwrap();
    assert!(again.is_cache());
    assert!(again.warnings().is_empty(), "{:?}", again.warnings());
    check_matrices(&again, &fx, |ty, r, c, b| {
        QMatrix::new(ty, r, c, b).unwrap()
    });
    for name in &repacked {
        assert!(matches!(
            again.tensor(name).unwrap().became,
            Became::Matrix {
                zero_copy: true,
                ..
            }
        ));
    }
    // a cache of a cache is the same file
    let cache2 = dir.path("m.repacked2.gguf");
    again.write_repacked(&cache2, false).unwrap();
    assert_eq!(
        std::fs::read(&cache).unwrap(),
        std::fs::read(&cache2).unwrap()
    );

    // opened with another policy: rebuilt, with a warning, same results
    let plain = OpenOptions {
        layout: LayoutPolicy::Plain,
        ..OpenOptions::default()
    };
    let p = Model::open_with(&cache, &plain).unwrap();
    if !repacked.is_empty() {
        assert_eq!(p.warnings().len(), repacked.len());
        assert!(p.warnings()[0].contains("repacked again"));
    }
    check_matrices(&p, &fx, |ty, r, c, b| {
        QMatrix::with_layout(ty, r, c, b, Layout::Plain).unwrap()
    });
}

#[test]
fn cache_writes_refuse_to_overwrite() {
    let dir = TempDir::new("overwrite");
    let path = dir.path("m.gguf");
    write_fixture(&path);
    let model = Model::open(&path).unwrap();
    let out = dir.path("out.gguf");
    std::fs::write(&out, b"precious").unwrap();
    assert!(matches!(
        model.write_repacked(&out, false),
        Err(Error::Invalid(_))
    ));
    assert_eq!(std::fs::read(&out).unwrap(), b"precious");
    model.write_repacked(&out, true).unwrap();
    assert!(Model::open(&out).unwrap().is_cache());
    // never onto the input, even with overwrite
    let before = std::fs::read(&path).unwrap();
    assert!(model.write_repacked(&path, true).is_err());
    assert_eq!(std::fs::read(&path).unwrap(), before);
    let names: Vec<_> = std::fs::read_dir(&dir.0).unwrap().collect();
    assert_eq!(names.len(), 2, "temp files left behind");
}

#[test]
fn corrupted_caches_are_rejected() {
    let dir = TempDir::new("corrupt");
    let path = dir.path("m.gguf");
    write_fixture(&path);
    let model = Model::open(&path).unwrap();
    let cache = dir.path("c.gguf");
    model.write_repacked(&cache, false).unwrap();
    let g = GgufFile::open(&cache).unwrap();
    let target = model
        .tensors()
        .iter()
        .find(|t| matches!(t.became, Became::Matrix { layout, .. } if layout != Layout::Plain));
    let Some(target) = target else {
        eprintln!("no repacked layout on this CPU; nothing to corrupt");
        return;
    };
    let t = g.tensor(&target.name).unwrap().clone();
    let good = std::fs::read(&cache).unwrap();
    let at = (g.data_start() + t.offset + t.size / 2) as usize;
    drop(g);
    let mut bad = good.clone();
    bad[at] ^= 0x10;
    let bad_path = dir.path("bad.gguf");
    std::fs::write(&bad_path, &bad).unwrap();
    match Model::open(&bad_path) {
        Err(Error::Format(m)) => {
            assert!(m.contains("corrupted") && m.contains(&target.name), "{m}")
        }
        other => panic!("{other:?}"),
    }
    // verified on first use instead: the open succeeds, every product of the corrupted matrix
    // fails naming it, the intact ones multiply as from the good file
    let lazy = OpenOptions {
        checksums: Checksums::OnFirstUse,
        ..OpenOptions::default()
    };
    let opened = Model::open_with(&bad_path, &lazy).unwrap();
    let good_model = Model::open_with(&cache, &lazy).unwrap();
    for t in opened.tensors() {
        let (Some(m), Some(g)) = (opened.matrix(&t.name), good_model.matrix(&t.name)) else {
            continue;
        };
        let x: Vec<f32> = (0..m.cols()).map(|i| (i % 7) as f32 - 3.0).collect();
        let mut y = vec![0.0f32; m.rows()];
        let mut y_good = vec![0.0f32; m.rows()];
        g.matmul(&x, 1, &mut y_good).unwrap();
        for _ in 0..2 {
            match m.matmul(&x, 1, &mut y) {
                Err(Error::Format(e)) if t.name == target.name => {
                    assert!(e.contains("corrupted") && e.contains(&target.name), "{e}")
                }
                Ok(()) if t.name != target.name => assert_eq!(y, y_good, "{}", t.name),
                other => panic!("{}: {other:?}", t.name),
            }
        }
    }
    // truncated cache
    std::fs::write(&bad_path, &good[..good.len() - 100]).unwrap();
    assert!(matches!(Model::open(&bad_path), Err(Error::Format(_))));
    // a layout key naming a layout of another type
    let mut w = GgufWriter::new();
    let src = GgufFile::open(&cache).unwrap();
    for (k, v) in src.metadata() {
        let v = if k == format!("qrepack.layout.{}", target.name) {
            GgufValue::String("no_such_layout".into())
        } else {
            v.clone()
        };
        w.add_kv(k, v).unwrap();
    }
    for t in src.tensors() {
        w.add_tensor(&t.name, &t.dims, t.type_id, src.tensor_bytes(t))
            .unwrap();
    }
    w.write_to(&bad_path, true).unwrap();
    match Model::open(&bad_path) {
        Err(Error::Format(m)) => assert!(m.contains("no_such_layout"), "{m}"),
        other => panic!("{other:?}"),
    }
}

fn rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Open times of a ~100 MB file: plain (mapped), repacked, and from a repack cache.
/// `cargo test -p qrepack --release --test model -- --ignored --nocapture`
#[test]
#[ignore]
fn bench_open_100mb() {
    use std::time::Instant;
    let dir = TempDir::new("bench");
    let path = dir.path("big.gguf");
    let cache = dir.path("big.cache.gguf");
    {
        let mut rng = SplitMix64::new(1);
        let mut w = GgufWriter::new();
        let shapes: &[(&str, GgmlType, usize, usize)] = &[
            ("a.q", GgmlType::Q4_0, 4096, 4096),
            ("a.k", GgmlType::Q4_0, 4096, 4096),
            ("a.v", GgmlType::Q4_0, 4096, 4096),
            ("a.o", GgmlType::Q4_0, 4096, 4096),
            ("f.up", GgmlType::Q4_K, 11008, 4096),
            ("f.gate", GgmlType::Q4_K, 11008, 4096),
            ("f.down", GgmlType::Q8_0, 4096, 4096),
        ];
        for &(name, ty, rows, cols) in shapes {
            let bytes = quantize(ty, &rng.pm1_vec(rows * cols), rows, cols).unwrap();
            w.add_tensor_owned(name, &[cols as u64, rows as u64], ty.id(), bytes)
                .unwrap();
        }
        w.write_to(&path, false).unwrap();
    }
    let mb = std::fs::metadata(&path).unwrap().len() as f64 / 1e6;
    println!("file: {mb:.1} MB, {} threads", rayon::current_num_threads());
    let time = |label: &str, f: &dyn Fn() -> Model| {
        let before = rss_mb();
        let t = Instant::now();
        let m = f();
        let dt = t.elapsed().as_secs_f64();
        println!(
            "{label:<28} {:>8.1} ms  ({:>6.0} MB/s)  RSS +{:.0} MB",
            dt * 1e3,
            mb / dt,
            rss_mb() - before
        );
        m
    };
    let plain = OpenOptions {
        layout: LayoutPolicy::Plain,
        ..OpenOptions::default()
    };
    for _ in 0..2 {
        drop(time("open plain (mapped)", &|| {
            Model::open_with(&path, &plain).unwrap()
        }));
        let m = time("open + repack (best)", &|| Model::open(&path).unwrap());
        let t = Instant::now();
        m.write_repacked(&cache, true).unwrap();
        println!(
            "{:<28} {:>8.1} ms",
            "write cache",
            t.elapsed().as_secs_f64() * 1e3
        );
        drop(m);
        let c = time("open cache (mapped+fnv)", &|| Model::open(&cache).unwrap());
        assert!(c.warnings().is_empty());
    }
}

/// Writes the fixture and its repack cache to `$QREPACK_FIXTURE_DIR` (to check them with other
/// GGUF readers, e.g. `gguf-dump` of the `gguf` Python package).
#[test]
#[ignore]
fn write_fixture_for_inspection() {
    let Some(dir) = std::env::var_os("QREPACK_FIXTURE_DIR") else {
        return;
    };
    let dir = PathBuf::from(dir);
    if let Ok(f) = GgufFile::open(dir.join("py.gguf")) {
        for (k, v) in f.metadata() {
            println!("{k} ({}) = {v}", v.value_type());
        }
        for t in f.tensors() {
            println!("{} {} {:?} {} bytes", t.name, t.type_name(), t.dims, t.size);
        }
    }
    let src = dir.join("fixture.gguf");
    let _ = std::fs::remove_file(&src);
    write_fixture(&src);
    let model = Model::open(&src).unwrap();
    model
        .write_repacked(&dir.join("fixture.repacked.gguf"), true)
        .unwrap();
}
