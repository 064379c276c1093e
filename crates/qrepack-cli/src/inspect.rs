//! `qrepack inspect MODEL`: what a GGUF file holds and what each tensor became.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use qrepack::gguf::GgufValue;
use qrepack::model::{Became, LayoutPolicy};
use qrepack::Model;
use serde_json::{json, Value};

use crate::load::{self, fmt_bytes, pct};
use crate::table::{Align, Table};

/// Hyperparameters shown when present (`<arch>.` is prefixed to the relative ones).
const HYPER: [&str; 14] = [
    "context_length",
    "embedding_length",
    "block_count",
    "feed_forward_length",
    "attention.head_count",
    "attention.head_count_kv",
    "attention.key_length",
    "attention.value_length",
    "attention.layer_norm_rms_epsilon",
    "rope.freq_base",
    "attention.sliding_window",
    "expert_count",
    "expert_used_count",
    "vocab_size",
];

fn value_json(v: &GgufValue) -> Value {
    match v {
        GgufValue::String(s) => json!(s),
        GgufValue::Bool(b) => json!(b),
        GgufValue::F32(f) => json!(f),
        GgufValue::F64(f) => json!(f),
        GgufValue::Array(t, items) => json!({"array": t.name(), "len": items.len()}),
        other => other
            .as_i64()
            .map(|i| json!(i))
            .or_else(|| other.as_u64().map(|u| json!(u)))
            .unwrap_or_else(|| json!(other.to_string())),
    }
}

/// Per-type totals.
#[derive(Default)]
struct TypeTotal {
    tensors: usize,
    bytes: u64,
    repacked_bytes: u64,
    layouts: BTreeMap<String, usize>,
}

pub fn run(path: &Path, json_out: bool, metadata: bool, quiet: bool) -> Result<String> {
    let (model, open_time) = load::open(path, LayoutPolicy::Best, quiet)?;
    let g = model.gguf();
    let arch = g
        .get("general.architecture")
        .and_then(|v| v.as_str())
        .unwrap_or("")
        .to_string();
    let name = g
        .get("general.name")
        .and_then(|v| v.as_str())
        .unwrap_or("")
        .to_string();
    let mut hyper: Vec<(String, Value, String)> = Vec::new();
    for k in HYPER {
        let key = format!("{arch}.{k}");
        if let Some(v) = g.get(&key) {
            hyper.push((key, value_json(v), v.to_string()));
        }
    }
    for key in ["general.file_type", "general.quantization_version"] {
        if let Some(v) = g.get(key) {
            hyper.push((key.to_string(), value_json(v), v.to_string()));
        }
    }
    if let Some(tokens) = g.get("tokenizer.ggml.tokens").and_then(|v| v.as_array()) {
        hyper.push((
            "tokenizer.ggml.tokens (count)".into(),
            json!(tokens.len()),
            tokens.len().to_string(),
        ));
    }

    let mut by_type: BTreeMap<String, TypeTotal> = BTreeMap::new();
    let (mut matrices, mut experts, mut raw) = (0usize, 0usize, 0usize);
    let mut tensors_json = Vec::new();
    let mut table = Table::new(&[
        ("name", Align::Left),
        ("type", Align::Left),
        ("shape", Align::Left),
        ("bytes", Align::Right),
        ("became", Align::Left),
    ]);
    for (t, info) in model.tensors().iter().zip(g.tensors()) {
        let tt = by_type.entry(t.type_name()).or_default();
        tt.tensors += 1;
        tt.bytes += info.size;
        let (kind, layout, zero_copy, note) = match &t.became {
            Became::Matrix {
                layout,
                zero_copy,
                note,
            } => {
                matrices += 1;
                ("matrix", Some(*layout), Some(*zero_copy), note.clone())
            }
            Became::Experts { layout, note, .. } => {
                experts += 1;
                ("experts", Some(*layout), None, note.clone())
            }
            Became::Raw(r) => {
                raw += 1;
                ("raw", None, None, Some(r.clone()))
            }
        };
        if let Some(l) = layout {
            *tt.layouts.entry(l.name().to_string()).or_default() += 1;
        }
        if load::is_repacked(t) {
            tt.repacked_bytes += info.size;
        }
        table.push(vec![
            t.name.clone(),
            t.type_name(),
            load::shape_str(&t.dims),
            info.size.to_string(),
            t.became.to_string(),
        ]);
        tensors_json.push(json!({
            "name": t.name,
            "type": t.type_name(),
            "type_id": t.type_id,
            "dims": t.dims,
            "shape": load::shape_str(&t.dims),
            "bytes": info.size,
            "offset": info.offset,
            "kind": kind,
            "layout": layout.map(|l| l.name()),
            "repacked": load::is_repacked(t),
            "zero_copy": zero_copy,
            "note": note,
            "became": t.became.to_string(),
        }));
    }
    let total_bytes: u64 = by_type.values().map(|t| t.bytes).sum();
    let total_repacked: u64 = by_type.values().map(|t| t.repacked_bytes).sum();
    let summary = Summary {
        model: &model,
        path,
        arch: &arch,
        name: &name,
        counts: (matrices, experts, raw),
        open_ms: open_time.as_secs_f64() * 1e3,
    };

    if json_out {
        let types: Vec<Value> = by_type
            .iter()
            .map(|(ty, t)| {
                json!({
                    "type": ty,
                    "tensors": t.tensors,
                    "bytes": t.bytes,
                    "repacked_bytes": t.repacked_bytes,
                    "repacked_pct": pct(t.repacked_bytes, t.bytes),
                    "layouts": t.layouts,
                })
            })
            .collect();
        let meta: Vec<Value> = if metadata {
            g.metadata()
                .map(|(k, v)| json!({"key": k, "type": v.value_type().name(), "value": value_json(v), "summary": v.to_string()}))
                .collect()
        } else {
            Vec::new()
        };
        let mut hp = serde_json::Map::new();
        for (k, v, _) in &hyper {
            hp.insert(k.clone(), v.clone());
        }
        let v = json!({
            "file": path.display().to_string(),
            "file_size": g.file_size(),
            "version": g.version(),
            "alignment": g.alignment(),
            "data_start": g.data_start(),
            "metadata_count": g.metadata_len(),
            "tensor_count": g.tensors().len(),
            "architecture": arch,
            "name": name,
            "hyperparameters": Value::Object(hp),
            "matrices": matrices,
            "experts": experts,
            "raw": raw,
            "is_cache": model.is_cache(),
            "open_ms": summary.open_ms,
            "cpu": qrepack::cpu::CpuFeatures::get().describe(),
            "warnings": model.warnings(),
            "tensors": tensors_json,
            "types": types,
            "total_bytes": total_bytes,
            "repacked_bytes": total_repacked,
            "repacked_pct": pct(total_repacked, total_bytes),
            "metadata": meta,
        });
        return Ok(format!("{v}\n"));
    }

    let mut s = summary.render(&hyper);
    if metadata {
        let _ = writeln!(s, "\nmetadata:");
        let mut mt = Table::new(&[
            ("key", Align::Left),
            ("type", Align::Left),
            ("value", Align::Left),
        ]);
        for (k, v) in g.metadata() {
            mt.push(vec![
                k.to_string(),
                v.value_type().to_string(),
                v.to_string(),
            ]);
        }
        s.push_str(&mt.render());
    }
    let _ = writeln!(s, "\ntensors:");
    s.push_str(&table.render());
    let _ = writeln!(s, "\nby type:");
    let mut tt = Table::new(&[
        ("type", Align::Left),
        ("tensors", Align::Right),
        ("bytes", Align::Right),
        ("repacked", Align::Right),
        ("% repacked", Align::Right),
        ("layouts", Align::Left),
    ]);
    let layouts_str = |m: &BTreeMap<String, usize>| {
        m.iter()
            .map(|(l, n)| format!("{l} x{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    for (ty, t) in &by_type {
        tt.push(vec![
            ty.clone(),
            t.tensors.to_string(),
            fmt_bytes(t.bytes),
            fmt_bytes(t.repacked_bytes),
            format!("{:.1}", pct(t.repacked_bytes, t.bytes)),
            layouts_str(&t.layouts),
        ]);
    }
    tt.push(vec![
        "total".into(),
        g.tensors().len().to_string(),
        fmt_bytes(total_bytes),
        fmt_bytes(total_repacked),
        format!("{:.1}", pct(total_repacked, total_bytes)),
        String::new(),
    ]);
    s.push_str(&tt.render());
    Ok(s)
}

struct Summary<'a> {
    model: &'a Model,
    path: &'a Path,
    arch: &'a str,
    name: &'a str,
    counts: (usize, usize, usize),
    open_ms: f64,
}

impl Summary<'_> {
    fn render(&self, hyper: &[(String, Value, String)]) -> String {
        let g = self.model.gguf();
        let mut s = String::new();
        let _ = writeln!(s, "file:          {}", self.path.display());
        let _ = writeln!(
            s,
            "size:          {} ({} bytes)",
            fmt_bytes(g.file_size()),
            g.file_size()
        );
        let _ = writeln!(
            s,
            "gguf:          version {}, alignment {}, data at {}",
            g.version(),
            g.alignment(),
            g.data_start()
        );
        let _ = writeln!(s, "architecture:  {}", self.arch);
        let _ = writeln!(s, "name:          {}", self.name);
        let (m, e, r) = self.counts;
        let _ = writeln!(
            s,
            "counts:        {} metadata keys, {} tensors: {m} matrices, {e} expert tensors, {r} other",
            g.metadata_len(),
            g.tensors().len()
        );
        let _ = writeln!(
            s,
            "opened in:     {:.1} ms{} on {}",
            self.open_ms,
            if self.model.is_cache() {
                " (repack cache)"
            } else {
                ""
            },
            qrepack::cpu::CpuFeatures::get().describe()
        );
        for (k, _, v) in hyper {
            let _ = writeln!(s, "  {k} = {v}");
        }
        s
    }
}
