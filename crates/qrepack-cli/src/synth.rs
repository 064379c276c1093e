//! `qrepack synth --preset P --mix M -o OUT`: writes a synthetic model (`qrepack::synth`), a
//! GGUF file with the names, shapes, types and metadata of a real model and random weights, to
//! measure model-level speed at sizes that cannot be downloaded.

use std::io::IsTerminal;
use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Result};
use qrepack::synth::{self, Mix, Options, Preset};
use serde::Serialize;

use crate::load::fmt_bytes;
use crate::progress;

/// The JSON report of `synth`.
#[derive(Serialize)]
struct SynthJson {
    output: String,
    preset: String,
    mix: String,
    tensors: usize,
    bytes: u64,
    write_s: f64,
}

/// Writes the file and returns the report (text or JSON). Progress goes to stderr: a bar on a
/// terminal, else a line per tenth of the file (scripts log it), nothing with `quiet`.
pub fn run(
    preset: Preset,
    mix: Mix,
    options: &Options,
    output: &Path,
    force: bool,
    json: bool,
    quiet: bool,
) -> Result<String> {
    // fail before any work: the writer checks again, atomically, when it links the file
    if !force && output.symlink_metadata().is_ok() {
        bail!(
            "{} already exists (pass --force to overwrite it)",
            output.display()
        );
    }
    let spec = preset.spec();
    let w = synth::writer(&spec, mix, options).map_err(|e| anyhow::anyhow!("{e}"))?;
    let tensors = synth::plan(&spec, mix, options)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .len();
    let total = w.file_size().map_err(|e| anyhow::anyhow!("{e}"))?;
    let lines = !quiet && !std::io::stderr().is_terminal();
    if lines {
        eprintln!(
            "synth: writing {preset} {mix} ({tensors} tensors, {}) to {}",
            fmt_bytes(total),
            output.display()
        );
    }
    let pb = progress::bytes(total, &format!("{preset} {mix}"), quiet);
    let mut tenth = 0;
    let t = Instant::now();
    w.write_to_with_progress(output, force, &mut |done, total| {
        pb.set_position(done);
        let now = done * 10 / total.max(1);
        if lines && now > tenth {
            tenth = now;
            eprintln!(
                "synth: {:>3}% {} of {} in {:.1} s",
                now * 10,
                fmt_bytes(done),
                fmt_bytes(total),
                t.elapsed().as_secs_f64()
            );
        }
    })
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    pb.finish_and_clear();
    let secs = t.elapsed().as_secs_f64();
    if json {
        let j = SynthJson {
            output: output.display().to_string(),
            preset: preset.to_string(),
            mix: mix.to_string(),
            tensors,
            bytes: total,
            write_s: secs,
        };
        return Ok(serde_json::to_string_pretty(&j)? + "\n");
    }
    Ok(format!(
        "wrote {}: {} ({}, {} layers, width {}, vocabulary {}), mix {mix}, {tensors} tensors, \
         {} in {secs:.1} s\n",
        output.display(),
        spec.name,
        spec.arch,
        spec.n_layer,
        spec.n_embd,
        spec.vocab,
        fmt_bytes(total),
    ))
}
