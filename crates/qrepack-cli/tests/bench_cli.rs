//! `bench` and `sweep` through the `qrepack` binary on the small model of `common`: their
//! tables, JSON, plots, and the side-by-side lines of a ggml peer (a stand-in script here).

mod common;

use common::*;
use serde_json::Value;

/// A stand-in for the ggml peer in `dir`: a script that answers like `ggml_mm_bench` (1 ms
/// per product with repack, 2 ms without; q6_K fails as an unknown type).
#[cfg(unix)]
fn fake_peer(dir: &TempDir) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let peer = dir.path("fake_peer.sh");
    std::fs::write(
        &peer,
        r#"#!/bin/sh
case "$*" in *q6_K*) echo "unknown type" >&2; exit 1;; esac
case "$*" in
  *"--repack on"*) echo "RESULT type=x buft=CPU_REPACK layout=fake_8x8 mode=hot med_ms=1.0 min_ms=1.0";;
  *) echo "RESULT type=x buft=CPU layout=- mode=hot med_ms=2.0 min_ms=2.0";;
esac
"#,
    )
    .unwrap();
    std::fs::set_permissions(&peer, std::fs::Permissions::from_mode(0o755)).unwrap();
    peer
}

/// `sweep --vs ggml`: one more line per type, the peer's faster mode at every batch, and a
/// type the peer cannot run gets no line.
#[cfg(unix)]
#[test]
fn sweep_vs_ggml_adds_the_peer_line() {
    let dir = TempDir::new("sweep-vs-ggml");
    let peer = fake_peer(&dir);
    let svg = dir.path("vs.svg");
    let v = ok_json(&[
        "sweep",
        "--rows",
        "16",
        "--cols",
        "256",
        "--type",
        "q4_0,q6_K",
        "--batch",
        "1,4",
        "--reps",
        "1",
        "--vs",
        "ggml",
        "--peer",
        s(&peer),
        "--plot",
        s(&svg),
        "--json",
        "-q",
    ]);
    let series = v["series"].as_array().unwrap();
    let ggml: Vec<_> = series.iter().filter(|s| s["engine"] == "ggml").collect();
    assert_eq!(ggml.len(), 1, "{v}");
    assert_eq!(ggml[0]["type"], "q4_0");
    assert!(ggml[0]["layout"].is_null());
    for (p, batch) in ggml[0]["points"].as_array().unwrap().iter().zip([1.0, 4.0]) {
        assert_eq!(p["median_ms"], 1.0);
        let want = 2.0 * 16.0 * 256.0 * batch / 1e-3 * 1e-9;
        assert!((p["gflops"].as_f64().unwrap() - want).abs() < 1e-9, "{p}");
    }
    assert!(series
        .iter()
        .all(|s| s["engine"] == "ggml" || s["layout"].is_string()));
    let plot = std::fs::read_to_string(&svg).unwrap();
    assert!(plot.contains("q4_0 ggml") && !plot.contains("q6_K ggml"));
    usage_error(&["sweep", "--peer", s(&peer)], "--vs");
}

#[cfg(unix)]
#[test]
fn bench_vs_ggml_sums_the_peer_over_the_shapes() {
    let dir = TempDir::new("vs-ggml");
    let m = dir.path("tiny.gguf");
    write_model(&m);
    let peer = fake_peer(&dir);
    let v = ok_json(&[
        "bench",
        s(&m),
        "--batch",
        "1,8",
        "--reps",
        "1",
        "--threads",
        "1",
        "--json",
        "-q",
        "--vs",
        "ggml",
        "--peer",
        s(&peer),
    ]);
    let vs = &v["vs_ggml"];
    let batches = vs["batches"].as_array().unwrap();
    assert_eq!(batches.len(), 2, "{vs}");
    for b in batches {
        // 5 matrices, of which the q6_K one the peer cannot run: 4 x 1 ms.
        assert_eq!(b["matrices"], 4, "{b}");
        assert!((b["ggml_ms"].as_f64().unwrap() - 4.0).abs() < 1e-9, "{b}");
        assert!(b["qrepack_ms"].as_f64().unwrap() > 0.0, "{b}");
    }
    let shapes = vs["shapes"].as_array().unwrap();
    assert_eq!(
        shapes.len(),
        2 * 5,
        "one per distinct shape and batch: {vs}"
    );
    let q6 = shapes.iter().find(|s| s["type"] == "q6_K").unwrap();
    assert!(q6["ggml_repack_on_ms"].is_null() && q6["ggml_repack_off_ms"].is_null());
    // The table form names the peer and the ratio column.
    let o = run(&[
        "bench",
        s(&m),
        "--batch",
        "1",
        "--reps",
        "1",
        "-q",
        "--vs",
        "ggml",
        "--peer",
        s(&peer),
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.contains("against ggml") && out.contains("fake_8x8"),
        "{out}"
    );
    // A missing peer is one clear error, before any timing.
    fails(
        &[
            "bench",
            s(&m),
            "--vs",
            "ggml",
            "--peer",
            s(&dir.path("none")),
            "-q",
        ],
        "needs the ggml peer benchmark",
    );
    usage_error(&["bench", "--vs", "ggml", "--sweep"], "'--sweep'");

    // A suite case (one custom shape) against the same peer: ggml's two modes beside
    // qrepack's time in each JSON line, and the ratio to the faster mode (1 ms).
    let o = run(&[
        "bench",
        "--type",
        "q4_0,q5_1",
        "--rows",
        "16",
        "--cols",
        "64",
        "--batch",
        "1,5",
        "--reps",
        "2",
        "--threads",
        "1",
        "--json",
        "-q",
        "--vs",
        "ggml",
        "--peer",
        s(&peer),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let lines: Vec<Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4, "{lines:?}");
    for l in &lines {
        assert_eq!(l["ggml_repack_ms"], 1.0, "{l}");
        assert_eq!(l["ggml_plain_ms"], 2.0, "{l}");
        assert_eq!(l["ggml_layout"], "fake_8x8", "{l}");
        let ratio = l["vs_ggml"].as_f64().unwrap();
        assert!(
            (ratio - l["median_ms"].as_f64().unwrap()).abs() < 1e-9,
            "{l}"
        );
    }
    let o = run(&[
        "bench",
        "--type",
        "q4_0",
        "--rows",
        "16",
        "--cols",
        "64",
        "--batch",
        "1",
        "--reps",
        "1",
        "-q",
        "--vs",
        "ggml",
        "--peer",
        s(&peer),
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.contains("qrepack / ggml") && out.contains("fake_8x8"),
        "{out}"
    );
}

#[test]
fn sweep_plot() {
    let dir = TempDir::new("sweep");
    let svg = dir.path("s.svg");
    // the same sweep through `bench --sweep` and through `sweep`
    let sweep = |command: &[&str], plot: &std::path::Path| {
        let shape = ["--rows", "16", "--cols", "64", "--type", "q4_0,q8_0"];
        let rest = [
            "--batch", "1,2,4,8", "--reps", "1", "--json", "-q", "--plot",
        ];
        let mut args: Vec<&str> = command.to_vec();
        args.extend(shape);
        args.extend(rest);
        args.push(s(plot));
        ok_json(&args)
    };
    let v = sweep(&["bench", "--sweep"], &svg);
    let series = v["series"].as_array().unwrap();
    assert!(series.len() >= 2);
    assert_eq!(series[0]["points"].as_array().unwrap().len(), 4);
    let plot = std::fs::read_to_string(&svg).unwrap();
    assert!(plot.starts_with("<svg") && plot.contains("<polyline"));
    usage_error(&["bench", "--plot", s(&svg)], "--sweep");

    // `qrepack sweep` is the same command as `bench --sweep`
    let svg2 = dir.path("s2.svg");
    let w = sweep(&["sweep"], &svg2);
    for key in ["rows", "cols", "seed", "threads", "cpu", "batches"] {
        assert_eq!(v[key], w[key], "{key}");
    }
    let labels = |v: &Value| -> Vec<(Value, Value, usize)> {
        v["series"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let n = s["points"].as_array().unwrap().len();
                (s["type"].clone(), s["layout"].clone(), n)
            })
            .collect()
    };
    assert_eq!(labels(&v), labels(&w));
    assert!(std::fs::read_to_string(&svg2)
        .unwrap()
        .contains("<polyline"));
}
