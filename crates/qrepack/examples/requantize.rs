//! Requantizes the weights of a GGUF model to another type.
//!
//! Every 2-D tensor whose row length is a multiple of 32 is dequantized (`qrepack::dequantize`)
//! and quantized again to TYPE (`q4_0` or `iq4_nl`) with `qrepack::quantize`; 1-D tensors and
//! tensors of other row lengths or unknown types are copied unchanged. The metadata are kept,
//! `general.file_type` is set to llama.cpp's value for TYPE (2 = MOSTLY_Q4_0, 25 =
//! MOSTLY_IQ4_NL), and the file is written atomically with `GgufWriter`.
//!
//! Usage:
//!
//! ```text
//! cargo run --release -p qrepack --example requantize -- IN.gguf OUT.gguf q4_0 [--force]
//! cargo run --release -p qrepack --example requantize -- gemma-3-270m-q4_k_m.gguf gemma-iq4_nl.gguf iq4_nl
//! ```
//!
//! The result is a model of lower quality than one quantized from the original f16/bf16 weights
//! (the errors of both quantizations add up); it is meant for testing and benchmarking.

use std::process::ExitCode;
use std::time::Instant;

use qrepack::gguf::{GgufFile, GgufValue, GgufWriter, TensorInfo};
use qrepack::model::CACHE_VERSION_KEY;
use qrepack::{dequantize, quantize, GgmlType};
use rayon::prelude::*;

const USAGE: &str = "usage: requantize IN.gguf OUT.gguf TYPE [--force]   (TYPE: q4_0 or iq4_nl)";

/// What happens to one tensor.
fn convert(g: &GgufFile, t: &TensorInfo, target: GgmlType) -> Result<Option<Vec<u8>>, String> {
    let Some(ty) = t.ty else { return Ok(None) };
    if t.dims.len() != 2 || ty == target {
        return Ok(None);
    }
    let (cols, rows) = (t.dims[0] as usize, t.dims[1] as usize);
    if cols % target.block_size() != 0 {
        return Ok(None);
    }
    let w = dequantize(ty, g.tensor_bytes(t), rows, cols)
        .map_err(|e| format!("dequantizing {}: {e}", t.name))?;
    // row chunks in parallel: ggml quantizes every row on its own
    let chunk = rows.div_ceil(64).max(1);
    let parts: Vec<Vec<u8>> = w
        .par_chunks(chunk * cols)
        .map(|c| quantize(target, c, c.len() / cols, cols))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("quantizing {}: {e}", t.name))?;
    Ok(Some(parts.concat()))
}

fn run(args: &[String]) -> Result<(), String> {
    let force = args.iter().any(|a| a == "--force");
    let pos: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let [input, output, ty] = pos.as_slice() else {
        return Err(USAGE.into());
    };
    let target: GgmlType = ty.parse().map_err(|e| format!("{e}\n{USAGE}"))?;
    let file_type = match target {
        GgmlType::Q4_0 => 2u32,
        GgmlType::IQ4_NL => 25,
        other => {
            return Err(format!(
                "target type {other} is not supported: use q4_0 or iq4_nl"
            ))
        }
    };
    let t0 = Instant::now();
    let g = GgufFile::open(input.as_str()).map_err(|e| e.to_string())?;
    if g.get(CACHE_VERSION_KEY).is_some() {
        return Err(format!(
            "{input} is a qrepack repack cache (repacked tensors); requantize the original model"
        ));
    }
    let converted: Vec<Option<Vec<u8>>> = g
        .tensors()
        .par_iter()
        .map(|t| convert(&g, t, target))
        .collect::<Result<_, _>>()?;

    let mut w = GgufWriter::new();
    for (k, v) in g.metadata() {
        w.add_kv(k, v.clone()).map_err(|e| e.to_string())?;
    }
    w.set_kv("general.file_type", GgufValue::U32(file_type))
        .map_err(|e| e.to_string())?;
    let (mut done, mut kept) = (0usize, 0usize);
    let (mut bytes_in, mut bytes_out) = (0u64, 0u64);
    for (t, c) in g.tensors().iter().zip(converted) {
        bytes_in += t.size;
        match c {
            Some(data) => {
                done += 1;
                bytes_out += data.len() as u64;
                w.add_tensor_owned(&t.name, &t.dims, target.id(), data)
            }
            None => {
                kept += 1;
                bytes_out += t.size;
                w.add_tensor_shared(&t.name, &t.dims, t.type_id, g.tensor_shared(t))
            }
        }
        .map_err(|e| e.to_string())?;
    }
    w.write_to(output.as_str(), force)
        .map_err(|e| e.to_string())?;
    println!(
        "{input} -> {output}: {done} tensors requantized to {target}, {kept} kept; {:.1} MiB -> {:.1} MiB of tensor data in {:.2} s",
        bytes_in as f64 / 1048576.0,
        bytes_out as f64 / 1048576.0,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
