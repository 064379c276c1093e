//! `qrepack repack IN -o OUT`: writes the repack cache of a model and times how fast it opens
//! compared with the original.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use qrepack::model::{Became, Checksums, LayoutPolicy};
use serde::Serialize;

use crate::load::{self, fmt_bytes, pct};
use crate::progress;

/// `path` made absolute with its symlinks resolved; for a file that does not exist yet, its
/// canonical directory joined with its name.
fn canonical(path: &Path) -> Result<PathBuf> {
    if let Ok(p) = path.canonicalize() {
        return Ok(p);
    }
    let name = path
        .file_name()
        .with_context(|| format!("{} is not a file path", path.display()))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let dir = dir
        .canonicalize()
        .with_context(|| format!("directory {} of the output", dir.display()))?;
    Ok(dir.join(name))
}

/// The JSON report of `repack` (keys in alphabetical order, as the reports always had them).
#[derive(Serialize)]
struct RepackJson {
    cache_copied_tensors: usize,
    cache_mapped_matrices: usize,
    cache_open_first_use_checksums_ms: f64,
    cache_open_ms: f64,
    cache_speedup: f64,
    cache_speedup_first_use_checksums: f64,
    input: String,
    input_bytes: u64,
    layouts: BTreeMap<String, LayoutJson>,
    open_repack_ms: f64,
    open_repack_warm_ms: f64,
    output: String,
    output_bytes: u64,
    repacked: Vec<RepackedJson>,
    repacked_bytes: u64,
    repacked_pct: f64,
    repacked_tensors: usize,
    weight_bytes: u64,
    write_ms: f64,
}

/// The weight tensors stored in one layout.
#[derive(Serialize)]
struct LayoutJson {
    bytes: u64,
    tensors: usize,
}

/// One repacked tensor.
#[derive(Serialize)]
struct RepackedJson {
    bytes: u64,
    layout: &'static str,
    name: String,
    #[serde(rename = "type")]
    ty: String,
}

pub fn run(
    input: &Path,
    output: &Path,
    force: bool,
    json_out: bool,
    quiet: bool,
) -> Result<String> {
    let cin = input
        .canonicalize()
        .with_context(|| format!("cannot open {}", input.display()))?;
    let cout = canonical(output)?;
    if cin == cout {
        bail!(
            "the output {} is the input file itself; write the cache to another path",
            output.display()
        );
    }
    if output.symlink_metadata().is_ok() {
        if !force {
            bail!(
                "{} already exists; pass --force to overwrite it",
                output.display()
            );
        }
        if output.is_dir() {
            bail!("{} is a directory", output.display());
        }
    }

    let (model, open_time) = load::open(input, LayoutPolicy::Best, quiet)?;
    if model.is_cache() && !quiet {
        eprintln!(
            "note: {} is already a repack cache; writing it again",
            input.display()
        );
    }
    let pb = progress::items(1, "write cache", quiet);
    let t0 = Instant::now();
    model
        .write_repacked(output, force)
        .with_context(|| format!("writing the repack cache {}", output.display()))?;
    let write_time = t0.elapsed();
    pb.finish_and_clear();

    // what was repacked, by layout
    let mut by_layout: BTreeMap<String, (usize, u64)> = BTreeMap::new();
    let mut repacked = Vec::new();
    let (mut weight_bytes, mut repacked_bytes) = (0u64, 0u64);
    for (t, info) in model.tensors().iter().zip(model.gguf().tensors()) {
        if let Became::Matrix { layout, .. } | Became::Experts { layout, .. } = &t.became {
            weight_bytes += info.size;
            let e = by_layout.entry(layout.name().to_string()).or_default();
            e.0 += 1;
            e.1 += info.size;
            if load::is_repacked(t) {
                repacked_bytes += info.size;
                repacked.push(RepackedJson {
                    bytes: info.size,
                    layout: layout.name(),
                    name: t.name.clone(),
                    ty: t.type_name(),
                });
            }
        }
    }
    let input_size = model.gguf().file_size();
    drop(model);

    // the cache opens without repacking: measure it
    let (cache, cache_time) = load::open(output, LayoutPolicy::Best, quiet)?;
    if !cache.is_cache() {
        bail!(
            "{} was written but does not read back as a repack cache",
            output.display()
        );
    }
    let mapped = cache
        .tensors()
        .iter()
        .filter(|t| {
            matches!(
                t.became,
                Became::Matrix {
                    zero_copy: true,
                    ..
                }
            )
        })
        .count();
    let copied = cache
        .tensors()
        .iter()
        .filter(|t| {
            matches!(
                t.became,
                Became::Matrix {
                    zero_copy: false,
                    ..
                } | Became::Experts { .. }
            )
        })
        .count();
    let output_size = cache.gguf().file_size();
    drop(cache);
    // and without reading tensor data on open (checksums verified on each matrix's first use)
    let (_, lazy_time) =
        load::open_with_checksums(output, LayoutPolicy::Best, quiet, Checksums::OnFirstUse)?;

    // the original again, now that its pages are in the page cache too (a fair comparison)
    let (_, reopen_time) = load::open(input, LayoutPolicy::Best, quiet)?;

    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    if json_out {
        let repacked_tensors = repacked.len();
        let v = RepackJson {
            cache_copied_tensors: copied,
            cache_mapped_matrices: mapped,
            cache_open_first_use_checksums_ms: ms(lazy_time),
            cache_open_ms: ms(cache_time),
            cache_speedup: reopen_time.as_secs_f64() / cache_time.as_secs_f64().max(1e-9),
            cache_speedup_first_use_checksums: reopen_time.as_secs_f64()
                / lazy_time.as_secs_f64().max(1e-9),
            input: input.display().to_string(),
            input_bytes: input_size,
            layouts: by_layout
                .iter()
                .map(|(l, &(tensors, bytes))| (l.clone(), LayoutJson { bytes, tensors }))
                .collect(),
            open_repack_ms: ms(open_time),
            open_repack_warm_ms: ms(reopen_time),
            output: output.display().to_string(),
            output_bytes: output_size,
            repacked,
            repacked_bytes,
            repacked_pct: pct(repacked_bytes, weight_bytes),
            repacked_tensors,
            weight_bytes,
            write_ms: ms(write_time),
        };
        let v = serde_json::to_string(&v)?;
        return Ok(format!("{v}\n"));
    }
    let mut s = String::new();
    let _ = writeln!(
        s,
        "repacked {} of {} weight tensors ({} of {}, {:.1}%):",
        repacked.len(),
        by_layout.values().map(|v| v.0).sum::<usize>(),
        fmt_bytes(repacked_bytes),
        fmt_bytes(weight_bytes),
        pct(repacked_bytes, weight_bytes)
    );
    for (l, (n, b)) in &by_layout {
        let _ = writeln!(s, "  {l:<12} {n:>5} tensors  {}", fmt_bytes(*b));
    }
    let _ = writeln!(
        s,
        "wrote {} ({}) in {:.1} ms",
        output.display(),
        fmt_bytes(output_size),
        ms(write_time)
    );
    let _ = writeln!(s, "open times:");
    let _ = writeln!(
        s,
        "  original, open + repack:          {:>9.1} ms (first open)",
        ms(open_time)
    );
    let _ = writeln!(
        s,
        "  original, open + repack (warm):   {:>9.1} ms",
        ms(reopen_time)
    );
    let _ = writeln!(
        s,
        "  repack cache, open:               {:>9.1} ms ({mapped} matrices mapped in place, {copied} converted) -> {:.1}x faster",
        ms(cache_time),
        reopen_time.as_secs_f64() / cache_time.as_secs_f64().max(1e-9)
    );
    let _ = writeln!(
        s,
        "  repack cache, open, checksums on first use: {:>6.1} ms -> {:.1}x faster",
        ms(lazy_time),
        reopen_time.as_secs_f64() / lazy_time.as_secs_f64().max(1e-9)
    );
    Ok(s)
}
