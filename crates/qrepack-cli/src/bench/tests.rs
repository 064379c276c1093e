use super::*;

#[test]
fn stats_interpolate_like_the_peer() {
    let s = Stats::of(&[4.0, 1.0, 3.0, 2.0]);
    assert_eq!(s.median, 2.5);
    assert_eq!(s.min, 1.0);
    assert_eq!(s.max, 4.0);
    assert!((s.p10 - 1.3).abs() < 1e-12);
    assert!((s.p90 - 3.7).abs() < 1e-12);
    assert_eq!(Stats::of(&[7.0]).median, 7.0);
}

#[test]
fn json_lines_keep_the_key_order_and_parse() {
    let mut m = Measurement {
        ty: GgmlType::Q4_0,
        rows: 64,
        cols: 256,
        batch: 1,
        threads: 2,
        layout: Layout::Q4_0_8x8,
        chosen: true,
        kernels: "avx2",
        mode: "hot",
        copies: 1,
        reps: 3,
        stats: Stats::of(&[1e-3, 2e-3]),
        weight_bytes: 9216,
        speedup_vs_plain: None,
        seed: 42,
        check: None,
        phases: None,
    };
    let line = m.to_json_line().unwrap();
    let keys = [
        "type",
        "rows",
        "cols",
        "batch",
        "threads",
        "layout",
        "chosen",
        "kernels",
        "mode",
        "copies",
        "reps",
        "median_ms",
        "min_ms",
        "max_ms",
        "p10_ms",
        "p90_ms",
        "gflops",
        "weight_gbs",
        "weight_bytes",
        "speedup_vs_plain",
        "seed",
        "cpu",
    ];
    let at: Vec<usize> = keys
        .iter()
        .map(|k| line.find(&format!("\"{k}\":")).unwrap())
        .collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "{line}");
    assert!(line.starts_with(r#"{"type":"q4_0","rows":64,"cols":256,"batch":1,"#));
    assert!(line.contains(r#""median_ms":1.5,"#), "{line}");
    assert!(line.contains(r#""speedup_vs_plain":null,"#), "{line}");
    assert!(!line.contains("check_"), "{line}");
    m.check = Some(Check {
        samples: 64,
        rel_rms_err: 0.25,
        max_abs_err: f64::NAN,
    });
    m.speedup_vs_plain = Some(2.0);
    let line = m.to_json_line().unwrap();
    assert!(
        line.ends_with(r#","check_samples":64,"check_rel_rms_err":0.25,"check_max_abs_err":null}"#),
        "{line}"
    );
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["speedup_vs_plain"], 2.0);
}

fn cfg(layouts: LayoutSel) -> Config {
    Config {
        types: vec![GgmlType::Q4_0],
        shapes: vec![(64, 256)],
        batches: vec![1, 8],
        layouts,
        reps: Reps::Fixed(1),
        cold_mb: 0.0,
        seed: 42,
        progress: false,
        check: false,
        phases: false,
        skip_unfit: false,
    }
}

#[test]
fn validation_names_the_problem() {
    let mut c = cfg(LayoutSel::Fixed(vec![Layout::Q4_0_8x8]));
    assert!(c.validate().is_ok());
    c.shapes = vec![(12, 256)];
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("interleaves 8 rows"), "{e}");
    c.types = vec![GgmlType::Q8_0];
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("holds q4_0 weights, not q8_0"), "{e}");
    let mut c = cfg(LayoutSel::Auto { vs_plain: true });
    c.shapes = vec![(64, 100)];
    let e = format!("{:#}", c.validate().unwrap_err());
    assert!(
        e.contains("--cols 100") && e.contains("multiple of 32"),
        "{e}"
    );
    c.shapes = vec![(64, 256)];
    c.batches = vec![0];
    assert!(c.validate().is_err());
}

#[test]
fn auto_layouts_put_the_choice_first_and_plain_once() {
    let c = cfg(LayoutSel::Auto { vs_plain: true });
    let l = c.layouts_for(GgmlType::Q4_0, 64);
    assert_eq!(
        l[0],
        Layout::best_for(GgmlType::Q4_0, 64, CpuFeatures::get())
    );
    assert_eq!(l.iter().filter(|&&x| x == Layout::Plain).count(), 1);
    // a type without an interleaved layout gets plain only
    let bare = GgmlType::ALL
        .into_iter()
        .find(|&t| Layout::candidates(t) == [Layout::Plain])
        .unwrap();
    assert_eq!(c.layouts_for(bare, 64), vec![Layout::Plain]);
    assert_eq!(c.layouts_for(GgmlType::Q4_0, 7), vec![Layout::Plain]);
    let no_plain = cfg(LayoutSel::Auto { vs_plain: false });
    assert_eq!(no_plain.layouts_for(GgmlType::Q4_0, 64), l[..1].to_vec());
    assert_eq!(c.count(), l.len() * 2);
}
