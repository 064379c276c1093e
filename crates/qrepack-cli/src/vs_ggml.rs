//! `qrepack bench MODEL --vs ggml`: the matmul part of a forward pass timed by ggml's own CPU
//! backend on the same shapes, through the peer benchmark binary (`ggml_mm_bench`, built by
//! the project's peer scripts from the ggml that llama.cpp ships).
//!
//! The peer is run once per distinct (type, rows, cols) and batch, with ggml's repack on and
//! off; a pass is the sum over the model's matrices of the faster mode's median. Batches up
//! to 3 rotate over copies of the weights (`--cold-mb`), as the weights of a whole model
//! stream from memory in a decode step.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Result};
use qrepack::GgmlType;

use crate::bench::Measurement;
use crate::table::{fmt_ms, Align, Table};

/// Where the peer is looked for when `--peer` is not given: `$QREPACK_GGML_PEER`, then the
/// peer scripts' default output.
pub fn default_peer() -> PathBuf {
    std::env::var_os("QREPACK_GGML_PEER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/ggml-peer/bin/ggml_mm_bench"))
}

/// One matrix shape of the model and how often a pass multiplies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Shape {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
}

/// ggml's medians for one shape at one batch, in seconds; `None` where the peer could not
/// run the type.
#[derive(Clone, Debug, PartialEq)]
pub struct PeerTimes {
    pub repack_on: Option<f64>,
    pub repack_off: Option<f64>,
    /// ggml's layout name with repack on (`-` when it kept the row layout).
    pub layout: Option<String>,
}

impl PeerTimes {
    /// The faster of ggml's two modes (what a user would get by choosing well).
    pub fn best(&self) -> Option<f64> {
        match (self.repack_on, self.repack_off) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// One `RESULT` line of the peer.
fn parse_result(stdout: &str) -> Option<(f64, String, String)> {
    let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with("RESULT")).collect();
    // With --cold-mb the peer prints a hot line, then the cold one: take the cold one.
    let line = lines
        .iter()
        .find(|l| l.contains("mode=cold"))
        .or(lines.first())?;
    let field = |k: &str| {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='))
            .map(str::to_string)
    };
    let ms: f64 = field("med_ms")?.parse().ok()?;
    Some((
        ms * 1e-3,
        field("buft")?,
        field("layout").unwrap_or_default(),
    ))
}

/// Runs the peer on one shape and batch with repack `on` or off; `None` if it fails (a type
/// it cannot quantize, for example), with the reason on stderr unless `quiet`.
fn run_peer(
    peer: &Path,
    shape: Shape,
    batch: usize,
    threads: usize,
    on: bool,
    cold_mb: f64,
    quiet: bool,
) -> Option<(f64, String, String)> {
    let reps = if batch <= 3 {
        100
    } else if batch <= 32 {
        20
    } else {
        5
    };
    let mut cmd = Command::new(peer);
    cmd.args(["--type", shape.ty.name()])
        .args(["--M", &shape.rows.to_string()])
        .args(["--K", &shape.cols.to_string()])
        .args(["--N", &batch.to_string()])
        .args(["--threads", &threads.to_string()])
        .args(["--repack", if on { "on" } else { "off" }])
        .args(["--reps", &reps.to_string()]);
    if batch <= crate::bench::COLD_MAX_BATCH && cold_mb > 0.0 {
        cmd.args(["--cold-mb", &format!("{cold_mb}")]);
    }
    match cmd.output() {
        Ok(o) if o.status.success() => {
            let parsed = parse_result(&String::from_utf8_lossy(&o.stdout));
            if parsed.is_none() && !quiet {
                eprintln!("ggml peer: no RESULT line for {shape:?} batch {batch}");
            }
            parsed
        }
        Ok(o) => {
            if !quiet {
                let err = String::from_utf8_lossy(&o.stderr);
                eprintln!(
                    "ggml peer: {} {}x{} batch {batch} failed: {}",
                    shape.ty,
                    shape.rows,
                    shape.cols,
                    err.lines().last().unwrap_or("(no message)")
                );
            }
            None
        }
        Err(e) => {
            // The binary exists (`ensure_peer`) but could not be started: not executable, a
            // foreign architecture, a missing loader.
            if !quiet {
                eprintln!("ggml peer: cannot run {}: {e}", peer.display());
            }
            None
        }
    }
}

/// An error unless the peer binary exists.
pub fn ensure_peer(peer: &Path) -> Result<()> {
    if !peer.is_file() {
        bail!(
            "--vs ggml needs the ggml peer benchmark at {} (build it with the peer scripts, \
             e.g. `WORK=/tmp/ggml-peer ../shared/peer/build.sh`, or pass --peer PATH / set QREPACK_GGML_PEER)",
            peer.display()
        );
    }
    Ok(())
}

/// ggml's times for every distinct shape at every batch.
pub fn time_shapes(
    peer: &Path,
    shapes: &BTreeMap<Shape, usize>,
    batches: &[usize],
    threads: usize,
    cold_mb: f64,
    quiet: bool,
) -> Result<BTreeMap<(Shape, usize), PeerTimes>> {
    ensure_peer(peer)?;
    let pb = crate::progress::items(
        (shapes.len() * batches.len() * 2) as u64,
        "ggml peer",
        quiet,
    );
    let mut out = BTreeMap::new();
    for &batch in batches {
        for &shape in shapes.keys() {
            let on = run_peer(peer, shape, batch, threads, true, cold_mb, quiet);
            pb.inc(1);
            let off = run_peer(peer, shape, batch, threads, false, cold_mb, quiet);
            pb.inc(1);
            let layout = on.as_ref().map(|(_, buft, layout)| {
                if buft == "CPU_REPACK" {
                    layout.clone()
                } else {
                    "-".to_string()
                }
            });
            out.insert(
                (shape, batch),
                PeerTimes {
                    // With repack "on" but a type ggml does not repack, the peer falls back to
                    // its plain path: count that as plain only.
                    repack_on: on
                        .as_ref()
                        .filter(|(_, buft, _)| buft == "CPU_REPACK")
                        .map(|t| t.0),
                    repack_off: off.map(|t| t.0).or(on.map(|t| t.0)),
                    layout,
                },
            );
        }
    }
    pb.finish_and_clear();
    Ok(out)
}

/// Sums ggml's best time over a pass: `(seconds, matrices covered)`; matrices whose type the
/// peer could not run are left out (and counted in neither sum by the caller).
pub fn pass_time(
    shapes: &BTreeMap<Shape, usize>,
    times: &BTreeMap<(Shape, usize), PeerTimes>,
    batch: usize,
) -> (f64, usize) {
    let mut sum = 0.0;
    let mut covered = 0;
    for (&shape, &count) in shapes {
        if let Some(t) = times.get(&(shape, batch)).and_then(PeerTimes::best) {
            sum += t * count as f64;
            covered += count;
        }
    }
    (sum, covered)
}

/// ggml's times for the cases of a suite run: one peer run per distinct (type, shape, batch)
/// and ggml mode, on the same data (the peer's generator and seed).
pub fn time_measurements(
    peer: &Path,
    results: &[Measurement],
    threads: usize,
    cold_mb: f64,
    quiet: bool,
) -> Result<BTreeMap<(Shape, usize), PeerTimes>> {
    let mut by_batch: BTreeMap<usize, BTreeMap<Shape, usize>> = BTreeMap::new();
    for m in results {
        let shape = Shape {
            ty: m.ty,
            rows: m.rows,
            cols: m.cols,
        };
        by_batch.entry(m.batch).or_default().insert(shape, 1);
    }
    let mut out = BTreeMap::new();
    for (batch, shapes) in &by_batch {
        out.extend(time_shapes(
            peer,
            shapes,
            &[*batch],
            threads,
            cold_mb,
            quiet,
        )?);
    }
    Ok(out)
}

fn peer_times<'a>(
    m: &Measurement,
    times: &'a BTreeMap<(Shape, usize), PeerTimes>,
) -> Option<&'a PeerTimes> {
    let shape = Shape {
        ty: m.ty,
        rows: m.rows,
        cols: m.cols,
    };
    times.get(&(shape, m.batch))
}

/// qrepack's median over ggml's faster mode for one measurement.
fn ratio(m: &Measurement, t: &PeerTimes) -> Option<f64> {
    t.best().map(|g| m.stats.median / g)
}

/// The table of a suite run against ggml: one line per measured layout.
pub fn comparison_table(
    results: &[Measurement],
    times: &BTreeMap<(Shape, usize), PeerTimes>,
) -> Table {
    let mut t = Table::new(&[
        ("type", Align::Left),
        ("shape", Align::Left),
        ("batch", Align::Right),
        ("layout", Align::Left),
        ("kernels", Align::Left),
        ("qrepack ms", Align::Right),
        ("ggml repack ms", Align::Right),
        ("ggml plain ms", Align::Right),
        ("ggml layout", Align::Left),
        ("qrepack / ggml", Align::Right),
    ]);
    let ms = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |s| fmt_ms(s * 1e3));
    for m in results {
        let peer = peer_times(m, times);
        t.push(vec![
            m.ty.to_string(),
            format!("{}x{}", m.rows, m.cols),
            m.batch.to_string(),
            m.layout.to_string(),
            m.kernels.to_string(),
            fmt_ms(m.stats.median * 1e3),
            ms(peer.and_then(|p| p.repack_on)),
            ms(peer.and_then(|p| p.repack_off)),
            peer.and_then(|p| p.layout.clone())
                .unwrap_or_else(|| "-".to_string()),
            peer.and_then(|p| ratio(m, p))
                .map_or_else(|| "-".to_string(), |r| format!("{r:.2}")),
        ]);
    }
    t
}

/// A `bench --json` line with ggml's times for the same case beside qrepack's.
pub fn json_line_with_peer(
    m: &Measurement,
    times: &BTreeMap<(Shape, usize), PeerTimes>,
) -> Result<String> {
    let mut v = serde_json::to_value(m.json())?;
    let peer = peer_times(m, times);
    if let Some(obj) = v.as_object_mut() {
        let ms = |s: Option<f64>| serde_json::json!(s.map(|s| s * 1e3));
        obj.insert("ggml_repack_ms".into(), ms(peer.and_then(|p| p.repack_on)));
        obj.insert("ggml_plain_ms".into(), ms(peer.and_then(|p| p.repack_off)));
        obj.insert(
            "ggml_layout".into(),
            serde_json::json!(peer.and_then(|p| p.layout.clone())),
        );
        obj.insert(
            "vs_ggml".into(),
            serde_json::json!(peer.and_then(|p| ratio(m, p))),
        );
    }
    Ok(serde_json::to_string(&v)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_lines_prefer_the_cold_one() {
        let out = "x\nRESULT type=q4_0 buft=CPU_REPACK layout=q4_0_8x8 mode=hot med_ms=0.5 min_ms=0.4\n\
                   RESULT type=q4_0 buft=CPU_REPACK layout=q4_0_8x8 mode=cold med_ms=0.75 min_ms=0.7\n";
        let (s, buft, layout) = parse_result(out).unwrap();
        assert!((s - 0.75e-3).abs() < 1e-12);
        assert_eq!((buft.as_str(), layout.as_str()), ("CPU_REPACK", "q4_0_8x8"));
        assert!(parse_result("no result\n").is_none());
        assert!(parse_result("RESULT buft=CPU med_ms=abc\n").is_none());
    }

    #[test]
    fn passes_sum_the_best_mode_times_the_count() {
        let a = Shape {
            ty: GgmlType::Q4_0,
            rows: 64,
            cols: 256,
        };
        let b = Shape {
            ty: GgmlType::Q6_K,
            rows: 32,
            cols: 256,
        };
        let shapes = BTreeMap::from([(a, 3), (b, 2)]);
        let times = BTreeMap::from([
            (
                (a, 1),
                PeerTimes {
                    repack_on: Some(1.0),
                    repack_off: Some(2.0),
                    layout: Some("q4_0_8x8".into()),
                },
            ),
            (
                (b, 1),
                PeerTimes {
                    repack_on: None,
                    repack_off: None,
                    layout: None,
                },
            ),
        ]);
        assert_eq!(pass_time(&shapes, &times, 1), (3.0, 3));
        assert_eq!(pass_time(&shapes, &times, 8), (0.0, 0));
    }
}
