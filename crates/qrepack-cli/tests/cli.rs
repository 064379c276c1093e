//! Runs the built `qrepack` binary.

use std::process::{Command, Output};

fn qrepack(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_qrepack"))
        .args(args)
        .output()
        .expect("running qrepack")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn tiny_bench_prints_json_lines() {
    let o = qrepack(&[
        "bench",
        "--type",
        "q8_0",
        "--rows",
        "64",
        "--cols",
        "256",
        "--batch",
        "5",
        "--reps",
        "2",
        "--threads",
        "2",
        "--json",
    ]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let stdout = String::from_utf8(o.stdout.clone()).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one measurement expected:\n{stdout}");
    let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    for key in [
        "type",
        "rows",
        "cols",
        "batch",
        "threads",
        "layout",
        "kernels",
        "median_ms",
        "min_ms",
        "max_ms",
        "gflops",
        "weight_gbs",
        "reps",
        "mode",
    ] {
        assert!(v.get(key).is_some(), "key {key} missing in {v}");
    }
    assert_eq!(v["type"], "q8_0");
    assert_eq!(v["rows"], 64);
    assert_eq!(v["cols"], 256);
    assert_eq!(v["batch"], 5);
    assert_eq!(v["threads"], 2);
    assert_eq!(v["reps"], 2);
    assert_eq!(v["mode"], "hot");
    assert_eq!(v["chosen"], true);
    assert!(v["layout"].as_str().unwrap().starts_with("q8_0") || v["layout"] == "plain");
    assert!(v["weight_bytes"].as_u64().unwrap() >= 64 * 8 * 34);
    let (min, med, max) = (
        v["min_ms"].as_f64().unwrap(),
        v["median_ms"].as_f64().unwrap(),
        v["max_ms"].as_f64().unwrap(),
    );
    assert!(0.0 < min && min <= med && med <= max, "{v}");
    assert!(v["gflops"].as_f64().unwrap() > 0.0);
}

#[test]
fn small_batches_rotate_over_copies_and_compare_with_plain() {
    let o = qrepack(&[
        "bench",
        "--type",
        "q4_0",
        "--rows",
        "64",
        "--cols",
        "256",
        "--batch",
        "1,4",
        "--reps",
        "1",
        "--cold-mb",
        "0.05",
        "--vs-plain",
        "--check",
        "--json",
        "--quiet",
    ]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let rows: Vec<serde_json::Value> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(!rows.is_empty());
    for v in &rows {
        let cold = v["batch"] == 1;
        assert_eq!(v["mode"], if cold { "cold" } else { "hot" }, "{v}");
        // 64 x 256 q4_0 = 9216 bytes; 0.05 MiB needs 6 copies
        assert_eq!(v["copies"], if cold { 6 } else { 1 }, "{v}");
        let err = v["check_rel_rms_err"].as_f64().unwrap();
        assert!(err < 0.02, "result does not match the f64 reference: {v}");
        if v["layout"] != "plain" {
            assert!(v["speedup_vs_plain"].as_f64().unwrap() > 0.0, "{v}");
        }
    }
}

#[test]
fn table_output_has_a_header_and_one_line_per_measurement() {
    let o = qrepack(&[
        "bench", "--type", "q8_0", "--rows", "32", "--cols", "64", "--batch", "2", "--reps", "1",
        "--quiet",
    ]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let stdout = String::from_utf8(o.stdout.clone()).unwrap();
    assert!(stdout.contains("median ms"), "{stdout}");
    assert!(stdout.contains("32x64"), "{stdout}");
    assert!(o.stderr.is_empty(), "--quiet: {}", stderr(&o));
}

#[test]
fn bad_arguments_fail_cleanly() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["bench", "--type", "q9_9", "--rows", "64", "--cols", "256"],
            "unknown type 'q9_9'",
        ),
        (
            &["bench", "--type", "q4_0", "--rows", "64", "--cols", "100"],
            "multiple of 32",
        ),
        (
            &[
                "bench", "--type", "q8_0", "--rows", "64", "--cols", "256", "--layout", "q4_0_8x8",
            ],
            "holds q4_0 weights, not q8_0",
        ),
        (
            &[
                "bench", "--type", "q4_0", "--rows", "12", "--cols", "256", "--layout", "q4_0_8x8",
            ],
            "interleaves 8 rows",
        ),
        (&["bench", "--rows", "64"], "--cols <K>"),
        (&["bench", "--per-tensor"], "<MODEL>"),
        (
            &["bench", "--sweep", "--check"],
            "cannot be used with '--check'",
        ),
        (&["sweep", "--cols", "64"], "--rows <M>"),
        (
            &["bench", "--isa", "sse9"],
            "unknown instruction set 'sse9' (known: scalar, avx2",
        ),
        (
            &["sweep", "--isa", "bogus"],
            "unknown instruction set 'bogus'",
        ),
        (
            &[
                "bench", "--type", "q4_0", "--rows", "64", "--cols", "256", "--batch", "0",
            ],
            "at least 1",
        ),
        (&["bench", "--layout", "nope"], "unknown layout 'nope'"),
    ];
    for (args, msg) in cases {
        let o = qrepack(args);
        let err = stderr(&o);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(err.contains(msg), "{args:?}: expected {msg:?} in: {err}");
        assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
        assert!(o.stdout.is_empty(), "{args:?} printed to stdout");
    }
}

#[test]
fn usage_errors_exit_with_2() {
    for args in [
        &["bench", "--rows", "64"][..],
        &["bench", "--isa", "sse9"],
        &["bench", "--plot", "x.svg"],
    ] {
        let o = qrepack(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn isa_caps_the_kernels() {
    let args = [
        "bench", "--type", "q8_0", "--rows", "64", "--cols", "256", "--batch", "5", "--reps", "1",
        "--json", "-q",
    ];
    let mut with_isa = args.to_vec();
    with_isa.extend(["--isa", "scalar"]);
    let o = qrepack(&with_isa);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["kernels"], "scalar", "{v}");
    assert_eq!(v["cpu"], "scalar", "{v}");
    // --isa wins over a bogus QREPACK_ISA in the environment
    let o = Command::new(env!("CARGO_BIN_EXE_qrepack"))
        .args(&with_isa)
        .env("QREPACK_ISA", "bogus")
        .output()
        .unwrap();
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    // the environment alone caps too
    let o = Command::new(env!("CARGO_BIN_EXE_qrepack"))
        .args(args)
        .env("QREPACK_ISA", "scalar")
        .output()
        .unwrap();
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["kernels"], "scalar", "{v}");
}

#[test]
fn a_bogus_isa_in_the_environment_is_one_clear_line() {
    for cmd in [
        &["info"][..],
        &["info", "--json"],
        &["bench", "--type", "q4_0"],
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_qrepack"))
            .args(cmd)
            .env("QREPACK_ISA", "bogus")
            .output()
            .unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{cmd:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{cmd:?}: {err}");
        assert!(
            err.starts_with("error: QREPACK_ISA")
                && err.contains("'bogus'")
                && err.contains("avx2"),
            "{cmd:?}: {err}"
        );
        assert!(o.stdout.is_empty(), "{cmd:?} printed to stdout");
    }
}

#[test]
fn info_lists_the_kernel_sets_of_each_layout_and_type() {
    let o = qrepack(&["info", "--json", "--type", "q4_0,q6_K"]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for key in [
        "avx2",
        "avx512bw",
        "avx512vnni",
        "avxvnni",
        "force_scalar",
        "describe",
        "sve",
        "sve_vector_bits",
    ] {
        assert!(v["cpu"].get(key).is_some(), "cpu.{key} missing in {v}");
    }
    let kernels = v["kernels"].as_array().unwrap();
    // every candidate layout of each listed type, plain included
    let pairs: Vec<(String, String)> = kernels
        .iter()
        .map(|k| {
            (
                k["layout"].as_str().unwrap().to_string(),
                k["type"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for t in v["types"].as_array().unwrap() {
        for l in t["layouts"].as_array().unwrap() {
            let want = (
                l.as_str().unwrap().to_string(),
                t["type"].as_str().unwrap().to_string(),
            );
            assert!(pairs.contains(&want), "{want:?} missing in {pairs:?}");
        }
    }
    // q4_0: plain, q4_0_4x4, q4_0_4x8, q4_0_8x8; q6_K: plain, q6_K_8x8, q6_K_8x4, q6_K_8x8_x86
    assert_eq!(pairs.len(), 4 + 4);
    for k in kernels {
        let sets: Vec<&str> = k["sets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap())
            .collect();
        assert_eq!(sets.last(), Some(&"scalar"), "{k}");
        assert!(sets.contains(&k["selected"].as_str().unwrap()), "{k}");
    }

    // capped at scalar: everything gets the portable kernels
    let o = Command::new(env!("CARGO_BIN_EXE_qrepack"))
        .args(["info", "--json"])
        .env("QREPACK_ISA", "scalar")
        .output()
        .unwrap();
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["cpu"]["describe"], "scalar");
    assert_eq!(v["cpu"]["force_scalar"], true);
    assert_eq!(v["cpu"]["avx2"], false);
    assert_eq!(v["cpu"]["avx512bw"], false);
    for k in v["kernels"].as_array().unwrap() {
        assert_eq!(k["selected"], "scalar", "{k}");
    }
    let o = qrepack(&["info", "--type", "q4_0"]);
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(
        text.contains("kernel sets") && text.contains("selected"),
        "{text}"
    );
}

#[test]
fn info_lists_layouts_and_choices() {
    let o = qrepack(&["info", "--json", "--rows", "8"]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["cpu"]["describe"].is_string());
    let types = v["types"].as_array().unwrap();
    // a type with no interleaved layout (only plain) stays plain
    let bare = types
        .iter()
        .find(|t| t["layouts"].as_array().is_some_and(|l| l.len() == 1))
        .unwrap();
    assert_eq!(bare["chosen"], "plain", "{bare}");
    let q4 = types.iter().find(|t| t["type"] == "q4_0").unwrap();
    assert!(q4["layouts"].as_array().unwrap().len() > 1, "{q4}");
    assert!(v["layouts"]
        .as_array()
        .unwrap()
        .iter()
        .any(|l| l["name"] == "q4_0_8x8" && l["rows_interleaved"] == 8));

    let o = qrepack(&["info", "--rows", "7", "--type", "q4_0"]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let text = String::from_utf8(o.stdout.clone()).unwrap();
    assert!(text.contains("cpu features:"), "{text}");
    assert!(text.contains("q4_0_8x8"), "{text}");
}

#[test]
fn phases_split_each_call_and_add_up() {
    let o = qrepack(&[
        "bench",
        "--type",
        "q4_0,q8_0",
        "--rows",
        "64",
        "--cols",
        "256",
        "--batch",
        "1,6",
        "--reps",
        "3",
        "--threads",
        "2",
        "--phases",
        "--json",
    ]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let stdout = String::from_utf8(o.stdout.clone()).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    for line in lines {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let p = &v["phases"];
        let f = |k: &str| p[k].as_f64().unwrap_or_else(|| panic!("{k} in {line}"));
        let parts = f("quantize_us") + f("kernel_us") + f("other_us");
        assert!(
            (parts - f("total_us")).abs() <= 0.005, // whole nanoseconds per phase
            "{line}"
        );
        assert!(
            f("busy_us") + f("scheduling_us") <= f("kernel_us") + 0.005,
            "{line}"
        );
        assert!(f("imbalance_us") <= f("busy_us"), "{line}");
        assert!(f("tasks") >= 1.0, "{line}");
    }
    // The table form adds a second table.
    let o = qrepack(&[
        "bench", "--type", "q4_0", "--rows", "64", "--cols", "256", "--batch", "4", "--reps", "2",
        "--phases",
    ]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("where the time goes") && stdout.contains("scheduling us"),
        "{stdout}"
    );
}

#[test]
fn the_suite_option_goes_without_shapes() {
    let o = qrepack(&["bench", "--suite", "small", "--rows", "64", "--cols", "256"]);
    assert_eq!(o.status.code(), Some(2), "stderr: {}", stderr(&o));
    let o = qrepack(&["bench", "--suite", "tiny"]);
    assert_eq!(o.status.code(), Some(2), "stderr: {}", stderr(&o));
}
