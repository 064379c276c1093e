//! Requantizes the weight matrices of a GGUF model to another ggml type, with llama.cpp's
//! fallbacks for rows that the type's blocks do not divide (Q4_K -> Q5_0, Q5_K -> Q5_1,
//! Q6_K -> Q8_0, Q2_K/Q3_K/IQ4_XS -> IQ4_NL).
//!
//! ```text
//! cargo run --release -p qrepack-candle --example requantize -- IN.gguf OUT.gguf TYPE [--all]
//! ```
//!
//! TYPE is any type `qrepack::quantize` writes (`q4_0`, `q4_K`, `iq4_nl`, `q8_0`, ...). The
//! token embedding (`token_embd.weight`, which is also the output head of tied models) keeps
//! its type unless `--all`; 1-D tensors are copied. Used to make the SmolLM2-135M variants
//! of `scripts/smollm2.sh` from its Q4_1 file: a model of lower quality than one quantized
//! from the original weights, meant for testing and benchmarking.

use std::process::ExitCode;

use qrepack::gguf::{GgufFile, GgufValue, GgufWriter, TensorInfo};
use qrepack::{dequantize, quantize, GgmlType};

const USAGE: &str = "usage: requantize IN.gguf OUT.gguf TYPE [--all]";

/// llama.cpp's type for rows that `ty`'s blocks do not divide.
fn fallback(ty: GgmlType) -> GgmlType {
    match ty {
        GgmlType::Q4_K => GgmlType::Q5_0,
        GgmlType::Q5_K => GgmlType::Q5_1,
        GgmlType::Q6_K => GgmlType::Q8_0,
        GgmlType::Q2_K | GgmlType::Q3_K | GgmlType::IQ4_XS => GgmlType::IQ4_NL,
        other => other,
    }
}

/// llama.cpp's `general.file_type` for a model mostly of `ty`.
fn file_type(ty: GgmlType) -> Option<u32> {
    Some(match ty {
        GgmlType::F32 => 0,
        GgmlType::F16 => 1,
        GgmlType::Q4_0 => 2,
        GgmlType::Q4_1 => 3,
        GgmlType::Q8_0 => 7,
        GgmlType::Q5_0 => 8,
        GgmlType::Q5_1 => 9,
        GgmlType::Q2_K => 10,
        GgmlType::Q3_K => 12,
        GgmlType::Q4_K => 15,
        GgmlType::Q5_K => 17,
        GgmlType::Q6_K => 18,
        GgmlType::IQ4_NL => 25,
        GgmlType::IQ4_XS => 30,
        GgmlType::BF16 => 32,
        _ => return None,
    })
}

fn convert(
    g: &GgufFile,
    t: &TensorInfo,
    target: GgmlType,
    all: bool,
) -> Result<Option<(GgmlType, Vec<u8>)>, String> {
    let Some(ty) = t.ty else { return Ok(None) };
    if t.dims.len() != 2 || (!all && t.name == "token_embd.weight") {
        return Ok(None);
    }
    let (cols, rows) = (t.dims[0] as usize, t.dims[1] as usize);
    let mut to = target;
    if cols % to.block_size() != 0 {
        to = fallback(to);
        if cols % to.block_size() != 0 {
            return Ok(None);
        }
    }
    if to == ty {
        return Ok(None);
    }
    let w =
        dequantize(ty, g.tensor_bytes(t), rows, cols).map_err(|e| format!("{}: {e}", t.name))?;
    let q = quantize(to, &w, rows, cols).map_err(|e| format!("{}: {e}", t.name))?;
    Ok(Some((to, q)))
}

fn run(args: &[String]) -> Result<(), String> {
    let all = args.iter().any(|a| a == "--all");
    let pos: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let [input, output, ty] = pos.as_slice() else {
        return Err(USAGE.into());
    };
    let target: GgmlType = ty.parse().map_err(|e| format!("{e}\n{USAGE}"))?;
    let g = GgufFile::open(input.as_str()).map_err(|e| e.to_string())?;
    if g.get(qrepack::model::CACHE_VERSION_KEY).is_some() {
        return Err(format!(
            "{input} is a qrepack repack cache; requantize the original model"
        ));
    }
    let mut w = GgufWriter::new();
    for (k, v) in g.metadata() {
        w.add_kv(k, v.clone()).map_err(|e| e.to_string())?;
    }
    if let Some(ft) = file_type(target) {
        w.set_kv("general.file_type", GgufValue::U32(ft))
            .map_err(|e| e.to_string())?;
    }
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for t in g.tensors() {
        match convert(&g, t, target, all)? {
            Some((to, bytes)) => {
                *counts.entry(to.name().to_string()).or_default() += 1;
                w.add_tensor_owned(&t.name, &t.dims, to.id(), bytes)
            }
            None => {
                *counts.entry(t.type_name()).or_default() += 1;
                w.add_tensor(&t.name, &t.dims, t.type_id, g.tensor_bytes(t))
            }
        }
        .map_err(|e| e.to_string())?;
    }
    w.write_to(output.as_str(), true)
        .map_err(|e| e.to_string())?;
    let summary: Vec<String> = counts.iter().map(|(k, n)| format!("{n} {k}")).collect();
    eprintln!("wrote {output}: {}", summary.join(", "));
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("requantize: {e}");
            ExitCode::FAILURE
        }
    }
}
