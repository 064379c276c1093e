//! `qrepack inspect MODEL`: what a GGUF file holds and what each tensor became.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use qrepack::cpu::CpuFeatures;
use qrepack::gguf::GgufValue;
use qrepack::model::{Became, LayoutPolicy};
use qrepack::Model;
use serde::Serialize;
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

/// The JSON report of `inspect` (keys in alphabetical order, as the reports always had them).
#[derive(Serialize)]
struct InspectJson<'a> {
    alignment: u64,
    architecture: &'a str,
    cpu: String,
    data_start: u64,
    experts: usize,
    file: String,
    file_size: u64,
    /// Metadata values as JSON (the hyperparameters present, by key).
    hyperparameters: BTreeMap<String, Value>,
    is_cache: bool,
    matrices: usize,
    metadata: Vec<MetadataJson<'a>>,
    metadata_count: usize,
    name: &'a str,
    open_ms: f64,
    raw: usize,
    repacked_bytes: u64,
    repacked_pct: f64,
    tensor_count: usize,
    tensors: Vec<TensorJson<'a>>,
    total_bytes: u64,
    types: Vec<TypeJson<'a>>,
    version: u32,
    warnings: &'a [String],
}

/// One tensor of the JSON report.
#[derive(Serialize)]
struct TensorJson<'a> {
    became: String,
    bytes: u64,
    dims: &'a [u64],
    /// The kernel set that runs the tensor's products on this CPU (as `bench --json`).
    kernels: Option<&'static str>,
    kind: &'static str,
    layout: Option<&'static str>,
    name: &'a str,
    note: Option<String>,
    offset: u64,
    repacked: bool,
    shape: String,
    #[serde(rename = "type")]
    ty: String,
    type_id: u32,
    zero_copy: Option<bool>,
}

/// One type's totals in the JSON report.
#[derive(Serialize)]
struct TypeJson<'a> {
    bytes: u64,
    layouts: &'a BTreeMap<String, usize>,
    repacked_bytes: u64,
    repacked_pct: f64,
    tensors: usize,
    #[serde(rename = "type")]
    ty: &'a str,
}

/// One metadata entry of the JSON report (with `--metadata`).
#[derive(Serialize)]
struct MetadataJson<'a> {
    key: &'a str,
    summary: String,
    #[serde(rename = "type")]
    ty: &'static str,
    value: Value,
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
            Became::Stacked(into) => ("stacked", None, None, Some(format!("into {into}"))),
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
        // The set the built matrix holds kernels of; for experts, the set their layout gets.
        let kernels = model.matrix(&t.name).map(|m| m.kernel_name()).or_else(|| {
            let (l, ty) = (layout?, t.ty?);
            Some(l.kernel_set_for(ty, CpuFeatures::get()).name())
        });
        tensors_json.push(TensorJson {
            became: t.became.to_string(),
            bytes: info.size,
            dims: &t.dims,
            kernels,
            kind,
            layout: layout.map(|l| l.name()),
            name: &t.name,
            note,
            offset: info.offset,
            repacked: load::is_repacked(t),
            shape: load::shape_str(&t.dims),
            ty: t.type_name(),
            type_id: t.type_id,
            zero_copy,
        });
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
        let types = by_type
            .iter()
            .map(|(ty, t)| TypeJson {
                bytes: t.bytes,
                layouts: &t.layouts,
                repacked_bytes: t.repacked_bytes,
                repacked_pct: pct(t.repacked_bytes, t.bytes),
                tensors: t.tensors,
                ty,
            })
            .collect();
        let meta = if metadata {
            g.metadata()
                .map(|(k, v)| MetadataJson {
                    key: k,
                    summary: v.to_string(),
                    ty: v.value_type().name(),
                    value: value_json(v),
                })
                .collect()
        } else {
            Vec::new()
        };
        let hp = hyper
            .iter()
            .map(|(k, v, _)| (k.clone(), v.clone()))
            .collect();
        let v = InspectJson {
            alignment: g.alignment(),
            architecture: &arch,
            cpu: qrepack::cpu::CpuFeatures::get().describe(),
            data_start: g.data_start(),
            experts,
            file: path.display().to_string(),
            file_size: g.file_size(),
            hyperparameters: hp,
            is_cache: model.is_cache(),
            matrices,
            metadata: meta,
            metadata_count: g.metadata_len(),
            name: &name,
            open_ms: summary.open_ms,
            raw,
            repacked_bytes: total_repacked,
            repacked_pct: pct(total_repacked, total_bytes),
            tensor_count: g.tensors().len(),
            tensors: tensors_json,
            total_bytes,
            types,
            version: g.version(),
            warnings: model.warnings(),
        };
        let v = serde_json::to_string(&v)?;
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
