//! Opening a model for the model commands: progress, timing, errors naming the file.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use qrepack::model::{Became, Checksums, LayoutPolicy, ModelTensor, OpenOptions};
use qrepack::{Layout, Model};

use crate::progress;

/// Opens `path` with `policy`, a byte progress bar on stderr (unless `quiet`), and returns the
/// model and the time `Model::open_with` took.
pub fn open(path: &Path, policy: LayoutPolicy, quiet: bool) -> Result<(Model, Duration)> {
    open_with_checksums(path, policy, quiet, Checksums::OnOpen)
}

/// [`open`] with a choice of when repack-cache checksums are verified.
pub fn open_with_checksums(
    path: &Path,
    policy: LayoutPolicy,
    quiet: bool,
    checksums: Checksums,
) -> Result<(Model, Duration)> {
    let pb = progress::bytes(0, "open", quiet);
    let options = OpenOptions {
        layout: policy,
        progress: Some(progress::model_callback(&pb)),
        checksums,
        stacks: Vec::new(),
    };
    let t0 = Instant::now();
    let model = Model::open_with(path, &options);
    let took = t0.elapsed();
    pb.finish_and_clear();
    let model = model.with_context(|| format!("opening {}", path.display()))?;
    if !quiet {
        for w in model.warnings() {
            eprintln!("warning: {w}");
        }
    }
    Ok((model, took))
}

/// The layout a tensor ended up in (`None` for tensors that are not weights).
pub fn layout_of(t: &ModelTensor) -> Option<Layout> {
    match &t.became {
        Became::Matrix { layout, .. } | Became::Experts { layout, .. } => Some(*layout),
        Became::Raw(_) | Became::Stacked(_) => None,
    }
}

/// True when the tensor is held in an interleaved layout.
pub fn is_repacked(t: &ModelTensor) -> bool {
    layout_of(t).is_some_and(|l| l != Layout::Plain)
}

/// `rows x cols` (or `n x rows x cols`) of a tensor from its ggml dims.
pub fn shape_str(dims: &[u64]) -> String {
    let mut d: Vec<String> = dims.iter().rev().map(|v| v.to_string()).collect();
    if d.is_empty() {
        d.push("scalar".into());
    }
    d.join("x")
}

/// A byte count with a binary unit.
pub fn fmt_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// A percentage of `part` in `whole` (0 when `whole` is 0).
pub fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}
