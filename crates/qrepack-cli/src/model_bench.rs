//! `qrepack bench MODEL`: every weight matrix of a model timed at each batch, as loaded
//! (repacked) and plain; totals per batch and per type.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use qrepack::cpu::CpuFeatures;
use qrepack::model::LayoutPolicy;
use qrepack::{GgmlType, Layout, Model, QMatrix};
use serde::Serialize;

use crate::bench::Stats;
use crate::data;
use crate::load::{self, fmt_bytes, pct};
use crate::progress;
use crate::table::{fmt_ms, fmt_rate, Align, Table};
use crate::vs_ggml::{self, PeerTimes, Shape};

/// What to run.
pub struct ModelBench<'a> {
    pub path: &'a Path,
    pub batches: Vec<usize>,
    /// Timed passes over all matrices per batch (after one warm-up pass); `None`: 5 for
    /// batches up to 8, else 3.
    pub reps: Option<usize>,
    pub seed: u64,
    pub json: bool,
    pub per_tensor: bool,
    pub quiet: bool,
    /// Time the same shapes with ggml's peer benchmark at this path (`--vs ggml`).
    pub vs_ggml: Option<std::path::PathBuf>,
    /// Weights the peer rotates over for batches up to 3, in MiB.
    pub cold_mb: f64,
}

struct Entry<'m> {
    name: String,
    ty: GgmlType,
    rows: usize,
    cols: usize,
    bytes: usize,
    repacked: &'m QMatrix,
    plain: Option<QMatrix>,
}

impl Entry<'_> {
    fn plain(&self) -> &QMatrix {
        self.plain.as_ref().unwrap_or(self.repacked)
    }
}

/// The matrices a forward pass multiplies: all weights, except `token_embd.weight` when the model
/// has `output.weight` (then the embedding is only a row lookup), and for expert tensors only
/// `expert_used_count` experts (those one token is routed to).
fn entries<'m>(model: &'m Model, skipped: &mut Vec<String>) -> Result<Vec<Entry<'m>>> {
    let g = model.gguf();
    let arch = g
        .get("general.architecture")
        .and_then(|v| v.as_str())
        .unwrap_or("");
    let n_used = g
        .get(&format!("{arch}.expert_used_count"))
        .and_then(|v| v.as_u64())
        .map(|v| v as usize);
    let has_output = model.matrix("output.weight").is_some();
    let mut out = Vec::new();
    let plain_of = |m: &QMatrix, shared: Option<qrepack::SharedBytes>| -> Result<Option<QMatrix>> {
        if m.layout() == Layout::Plain {
            return Ok(None);
        }
        let (ty, rows, cols) = (m.ty(), m.rows(), m.cols());
        let p = match shared {
            // the file holds ggml's row layout: map it in place
            Some(s) if !model.is_cache() => QMatrix::from_packed(ty, rows, cols, Layout::Plain, s)?,
            _ => QMatrix::with_layout(ty, rows, cols, &m.to_ggml_bytes(), Layout::Plain)?,
        };
        Ok(Some(p))
    };
    for t in model.tensors() {
        let Some(info) = g.tensor(&t.name) else {
            continue;
        };
        if let Some(m) = model.matrix(&t.name) {
            if t.name == "token_embd.weight" && has_output {
                skipped.push(format!(
                    "{} (a row lookup: the model has output.weight)",
                    t.name
                ));
                continue;
            }
            out.push(Entry {
                name: t.name.clone(),
                ty: m.ty(),
                rows: m.rows(),
                cols: m.cols(),
                bytes: info.size as usize,
                repacked: m,
                plain: plain_of(m, Some(g.tensor_shared(info)))
                    .with_context(|| format!("plain copy of {}", t.name))?,
            });
        } else if let Some(e) = model.experts(&t.name) {
            let used = n_used.unwrap_or(e.n_expert()).min(e.n_expert());
            if used < e.n_expert() {
                skipped.push(format!(
                    "{}: {} of {} experts timed (expert_used_count)",
                    t.name,
                    used,
                    e.n_expert()
                ));
            }
            let per = info.size as usize / e.n_expert().max(1);
            for i in 0..used {
                let Some(m) = e.expert(i) else { continue };
                let shared = g.tensor_shared(info).slice(i * per, per);
                out.push(Entry {
                    name: format!("{}[{i}]", t.name),
                    ty: m.ty(),
                    rows: m.rows(),
                    cols: m.cols(),
                    bytes: per,
                    repacked: m,
                    plain: plain_of(m, shared)
                        .with_context(|| format!("plain copy of {}[{i}]", t.name))?,
                });
            }
        }
    }
    Ok(out)
}

/// Medians of one batch: per matrix (repacked, plain) and the pass totals.
struct BatchTimes {
    batch: usize,
    reps: usize,
    per: Vec<(f64, f64)>,
    total: (f64, f64),
}

pub fn run(cfg: &ModelBench) -> Result<String> {
    if let Some(peer) = &cfg.vs_ggml {
        vs_ggml::ensure_peer(peer)?;
    }
    let (model, open_time) = load::open(cfg.path, LayoutPolicy::Best, cfg.quiet)?;
    let mut skipped = Vec::new();
    let list = entries(&model, &mut skipped)?;
    if list.is_empty() {
        anyhow::bail!("{} has no weight matrices to time", cfg.path.display());
    }
    let threads = rayon::current_num_threads();
    let max_rows = list.iter().map(|e| e.rows).max().unwrap_or(1);
    let mut all = Vec::new();
    for &batch in &cfg.batches {
        let reps = cfg.reps.unwrap_or(if batch <= 8 { 5 } else { 3 });
        // one activation matrix per distinct column count
        let mut xs: HashMap<usize, Vec<f32>> = HashMap::new();
        for e in &list {
            if let std::collections::hash_map::Entry::Vacant(v) = xs.entry(e.cols) {
                v.insert(data::activations(cfg.seed, batch, e.cols)?);
            }
        }
        let mut y = vec![0.0f32; batch * max_rows];
        let pb = progress::items(
            ((reps + 1) * 2 * list.len()) as u64,
            &format!("bench batch {batch}"),
            cfg.quiet,
        );
        let mut times: Vec<(Vec<f64>, Vec<f64>)> = vec![(Vec::new(), Vec::new()); list.len()];
        let mut totals: (Vec<f64>, Vec<f64>) = (Vec::new(), Vec::new());
        for rep in 0..=reps {
            for plain in [false, true] {
                let mut pass = 0.0;
                for (i, e) in list.iter().enumerate() {
                    let m = if plain { e.plain() } else { e.repacked };
                    let x = &xs[&e.cols];
                    let yy = &mut y[..batch * e.rows];
                    let t0 = Instant::now();
                    m.matmul(x, batch, yy)
                        .with_context(|| format!("{} batch {batch}", e.name))?;
                    let dt = t0.elapsed().as_secs_f64().max(1e-9);
                    pass += dt;
                    if rep > 0 {
                        if plain {
                            times[i].1.push(dt);
                        } else {
                            times[i].0.push(dt);
                        }
                    }
                    pb.inc(1);
                }
                if rep > 0 {
                    if plain {
                        totals.1.push(pass);
                    } else {
                        totals.0.push(pass);
                    }
                }
            }
        }
        pb.finish_and_clear();
        let bt = BatchTimes {
            batch,
            reps,
            per: times
                .iter()
                .map(|(r, p)| (Stats::of(r).median, Stats::of(p).median))
                .collect(),
            total: (Stats::of(&totals.0).median, Stats::of(&totals.1).median),
        };
        if !cfg.quiet {
            eprintln!(
                "batch {batch}: repacked {} ms, plain {} ms",
                fmt_ms(bt.total.0 * 1e3),
                fmt_ms(bt.total.1 * 1e3)
            );
        }
        all.push(bt);
    }
    let ggml = match &cfg.vs_ggml {
        Some(peer) => Some(versus_ggml(cfg, peer, &list, &all, threads)?),
        None => None,
    };
    report(
        cfg,
        &model,
        &list,
        &all,
        &skipped,
        RunInfo {
            open_s: open_time.as_secs_f64(),
            threads,
            ggml: ggml.as_ref(),
        },
    )
}

/// How the run went, for the report.
struct RunInfo<'a> {
    open_s: f64,
    threads: usize,
    ggml: Option<&'a VsGgml>,
}

/// The pass against ggml's peer (`--vs ggml`).
struct VsGgml {
    peer: String,
    shapes: BTreeMap<Shape, usize>,
    times: BTreeMap<(Shape, usize), PeerTimes>,
    /// Per batch: qrepack's pass over the matrices ggml could time (sum of per-matrix
    /// medians), ggml's, and the number of those matrices.
    passes: Vec<(usize, f64, f64, usize)>,
    /// Per (shape, batch): qrepack's mean median over the matrices of that shape.
    ours: BTreeMap<(Shape, usize), f64>,
}

fn shape_of(e: &Entry) -> Shape {
    Shape {
        ty: e.ty,
        rows: e.rows,
        cols: e.cols,
    }
}

fn versus_ggml(
    cfg: &ModelBench,
    peer: &Path,
    list: &[Entry],
    all: &[BatchTimes],
    threads: usize,
) -> Result<VsGgml> {
    let mut shapes: BTreeMap<Shape, usize> = BTreeMap::new();
    for e in list {
        *shapes.entry(shape_of(e)).or_default() += 1;
    }
    let batches: Vec<usize> = all.iter().map(|b| b.batch).collect();
    let times = vs_ggml::time_shapes(peer, &shapes, &batches, threads, cfg.cold_mb, cfg.quiet)?;
    let mut ours: BTreeMap<(Shape, usize), f64> = BTreeMap::new();
    let mut passes = Vec::new();
    for bt in all {
        let (ggml_s, covered) = vs_ggml::pass_time(&shapes, &times, bt.batch);
        let mut our_s = 0.0;
        for (i, e) in list.iter().enumerate() {
            let shape = shape_of(e);
            *ours.entry((shape, bt.batch)).or_default() += bt.per[i].0 / shapes[&shape] as f64;
            if times
                .get(&(shape, bt.batch))
                .and_then(PeerTimes::best)
                .is_some()
            {
                our_s += bt.per[i].0;
            }
        }
        passes.push((bt.batch, our_s, ggml_s, covered));
    }
    Ok(VsGgml {
        peer: peer.display().to_string(),
        shapes,
        times,
        passes,
        ours,
    })
}

/// The JSON report of `bench MODEL` (keys in alphabetical order, as the reports always had them).
#[derive(Serialize)]
struct ModelBenchJson<'a> {
    batches: Vec<BatchJson>,
    bytes: u64,
    cpu: &'a str,
    file: String,
    is_cache: bool,
    matrices: Vec<MatrixJson<'a>>,
    matrices_timed: usize,
    open_ms: f64,
    repacked_bytes: u64,
    repacked_pct: f64,
    seed: u64,
    skipped: &'a [String],
    threads: usize,
    types: Vec<TypeJson<'a>>,
    /// `--vs ggml` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    vs_ggml: Option<VsGgmlJson>,
}

/// The `--vs ggml` part of the JSON report.
#[derive(Serialize)]
struct VsGgmlJson {
    batches: Vec<VsBatchJson>,
    peer: String,
    shapes: Vec<VsShapeJson>,
}

/// One batch: the pass over the matrices the peer could time.
#[derive(Serialize)]
struct VsBatchJson {
    batch: usize,
    ggml_ms: f64,
    matrices: usize,
    qrepack_ms: f64,
    ratio: f64,
}

/// One distinct matrix shape at one batch.
#[derive(Serialize)]
struct VsShapeJson {
    batch: usize,
    cols: usize,
    count: usize,
    ggml_layout: Option<String>,
    ggml_repack_off_ms: Option<f64>,
    ggml_repack_on_ms: Option<f64>,
    qrepack_ms: f64,
    rows: usize,
    #[serde(rename = "type")]
    ty: &'static str,
}

impl VsGgml {
    fn json(&self) -> VsGgmlJson {
        let ms = |v: Option<f64>| v.map(|s| s * 1e3);
        VsGgmlJson {
            batches: self
                .passes
                .iter()
                .map(|&(batch, ours, ggml, matrices)| VsBatchJson {
                    batch,
                    ggml_ms: ggml * 1e3,
                    matrices,
                    qrepack_ms: ours * 1e3,
                    ratio: ours / ggml,
                })
                .collect(),
            peer: self.peer.clone(),
            shapes: self
                .times
                .iter()
                .map(|(&(shape, batch), t)| VsShapeJson {
                    batch,
                    cols: shape.cols,
                    count: self.shapes[&shape],
                    ggml_layout: t.layout.clone(),
                    ggml_repack_off_ms: ms(t.repack_off),
                    ggml_repack_on_ms: ms(t.repack_on),
                    qrepack_ms: self.ours[&(shape, batch)] * 1e3,
                    rows: shape.rows,
                    ty: shape.ty.name(),
                })
                .collect(),
        }
    }

    fn render(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "\nagainst ggml (peer {}; per shape the faster of repack on/off, weights rotated for batches up to 3):",
            self.peer
        );
        let mut t = Table::new(&[
            ("batch", Align::Right),
            ("matrices", Align::Right),
            ("qrepack ms", Align::Right),
            ("ggml ms", Align::Right),
            ("qrepack / ggml", Align::Right),
        ]);
        for &(batch, ours, ggml, matrices) in &self.passes {
            t.push(vec![
                batch.to_string(),
                matrices.to_string(),
                fmt_ms(ours * 1e3),
                fmt_ms(ggml * 1e3),
                format!("{:.2}", ours / ggml),
            ]);
        }
        s.push_str(&t.render());
        let _ = writeln!(s, "\nper shape (median ms of one product):");
        let mut t = Table::new(&[
            ("type", Align::Left),
            ("shape", Align::Left),
            ("count", Align::Right),
            ("batch", Align::Right),
            ("qrepack", Align::Right),
            ("ggml repack", Align::Right),
            ("ggml plain", Align::Right),
            ("ggml layout", Align::Left),
            ("ratio", Align::Right),
        ]);
        let opt = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |s| fmt_ms(s * 1e3));
        for (&(shape, batch), pt) in &self.times {
            let ours = self.ours[&(shape, batch)];
            t.push(vec![
                shape.ty.to_string(),
                format!("{}x{}", shape.rows, shape.cols),
                self.shapes[&shape].to_string(),
                batch.to_string(),
                fmt_ms(ours * 1e3),
                opt(pt.repack_on),
                opt(pt.repack_off),
                pt.layout.clone().unwrap_or_else(|| "-".into()),
                pt.best()
                    .map_or_else(|| "-".to_string(), |g| format!("{:.2}", ours / g)),
            ]);
        }
        s.push_str(&t.render());
    }
}

/// The totals of one batch: one pass over all matrices.
#[derive(Serialize)]
struct BatchJson {
    batch: usize,
    plain_gflops: f64,
    plain_ms: f64,
    plain_tokens_per_s: f64,
    repacked_gflops: f64,
    repacked_ms: f64,
    repacked_tokens_per_s: f64,
    reps: usize,
    speedup: f64,
}

/// The matrices of one type.
#[derive(Serialize)]
struct TypeJson<'a> {
    batches: Vec<TypeBatchJson>,
    bytes: u64,
    layouts_bytes: &'a BTreeMap<String, u64>,
    matrices: usize,
    repacked_bytes: u64,
    repacked_pct: f64,
    #[serde(rename = "type")]
    ty: &'static str,
}

/// One type at one batch: sums of the per-matrix medians.
#[derive(Serialize)]
struct TypeBatchJson {
    batch: usize,
    plain_ms: f64,
    repacked_gflops: f64,
    repacked_ms: f64,
    speedup: f64,
}

/// One matrix.
#[derive(Serialize)]
struct MatrixJson<'a> {
    batches: Vec<MatrixBatchJson>,
    bytes: usize,
    cols: usize,
    kernels: &'static str,
    layout: &'static str,
    name: &'a str,
    rows: usize,
    #[serde(rename = "type")]
    ty: &'static str,
}

/// One matrix at one batch: the medians.
#[derive(Serialize)]
struct MatrixBatchJson {
    batch: usize,
    plain_ms: f64,
    repacked_ms: f64,
}

#[derive(Default)]
struct TypeRow {
    matrices: usize,
    bytes: u64,
    repacked_bytes: u64,
    layouts: BTreeMap<String, u64>,
    /// per batch: (repacked s, plain s, flop)
    time: Vec<(f64, f64, f64)>,
}

fn report(
    cfg: &ModelBench,
    model: &Model,
    list: &[Entry],
    all: &[BatchTimes],
    skipped: &[String],
    info: RunInfo<'_>,
) -> Result<String> {
    let RunInfo {
        open_s,
        threads,
        ggml,
    } = info;
    let mut types: BTreeMap<GgmlType, TypeRow> = BTreeMap::new();
    for (i, e) in list.iter().enumerate() {
        let t = types.entry(e.ty).or_default();
        if t.time.is_empty() {
            t.time = vec![(0.0, 0.0, 0.0); all.len()];
        }
        t.matrices += 1;
        t.bytes += e.bytes as u64;
        let l = e.repacked.layout();
        if l != Layout::Plain {
            t.repacked_bytes += e.bytes as u64;
        }
        *t.layouts.entry(l.name().to_string()).or_default() += e.bytes as u64;
        for (b, bt) in all.iter().enumerate() {
            let flop = 2.0 * e.rows as f64 * e.cols as f64 * bt.batch as f64;
            t.time[b].0 += bt.per[i].0;
            t.time[b].1 += bt.per[i].1;
            t.time[b].2 += flop;
        }
    }
    let total_flop = |bt: &BatchTimes| -> f64 {
        list.iter()
            .map(|e| 2.0 * e.rows as f64 * e.cols as f64 * bt.batch as f64)
            .sum()
    };
    let total_bytes: u64 = list.iter().map(|e| e.bytes as u64).sum();
    let repacked_bytes: u64 = list
        .iter()
        .filter(|e| e.repacked.layout() != Layout::Plain)
        .map(|e| e.bytes as u64)
        .sum();
    let cpu = CpuFeatures::get().describe();

    if cfg.json {
        let batches = all
            .iter()
            .map(|bt| {
                let f = total_flop(bt);
                BatchJson {
                    batch: bt.batch,
                    plain_gflops: f / bt.total.1 * 1e-9,
                    plain_ms: bt.total.1 * 1e3,
                    plain_tokens_per_s: bt.batch as f64 / bt.total.1,
                    repacked_gflops: f / bt.total.0 * 1e-9,
                    repacked_ms: bt.total.0 * 1e3,
                    repacked_tokens_per_s: bt.batch as f64 / bt.total.0,
                    reps: bt.reps,
                    speedup: bt.total.1 / bt.total.0,
                }
            })
            .collect();
        let types_json = types
            .iter()
            .map(|(ty, t)| TypeJson {
                batches: all
                    .iter()
                    .zip(&t.time)
                    .map(|(bt, (r, p, f))| TypeBatchJson {
                        batch: bt.batch,
                        plain_ms: p * 1e3,
                        repacked_gflops: f / r * 1e-9,
                        repacked_ms: r * 1e3,
                        speedup: p / r,
                    })
                    .collect(),
                bytes: t.bytes,
                layouts_bytes: &t.layouts,
                matrices: t.matrices,
                repacked_bytes: t.repacked_bytes,
                repacked_pct: pct(t.repacked_bytes, t.bytes),
                ty: ty.name(),
            })
            .collect();
        let matrices = list
            .iter()
            .enumerate()
            .map(|(i, e)| MatrixJson {
                batches: all
                    .iter()
                    .map(|bt| MatrixBatchJson {
                        batch: bt.batch,
                        plain_ms: bt.per[i].1 * 1e3,
                        repacked_ms: bt.per[i].0 * 1e3,
                    })
                    .collect(),
                bytes: e.bytes,
                cols: e.cols,
                kernels: e.repacked.kernel_name(),
                layout: e.repacked.layout().name(),
                name: &e.name,
                rows: e.rows,
                ty: e.ty.name(),
            })
            .collect();
        let v = ModelBenchJson {
            batches,
            bytes: total_bytes,
            cpu: &cpu,
            file: cfg.path.display().to_string(),
            is_cache: model.is_cache(),
            matrices,
            matrices_timed: list.len(),
            open_ms: open_s * 1e3,
            repacked_bytes,
            repacked_pct: pct(repacked_bytes, total_bytes),
            seed: cfg.seed,
            skipped,
            threads,
            types: types_json,
            vs_ggml: ggml.map(VsGgml::json),
        };
        let v = serde_json::to_string(&v)?;
        return Ok(format!("{v}\n"));
    }

    let mut s = String::new();
    let _ = writeln!(
        s,
        "qrepack bench {}: {} matrices ({}, {:.1}% repacked), cpu {cpu}, {threads} thread(s), opened in {:.0} ms",
        cfg.path.display(),
        list.len(),
        fmt_bytes(total_bytes),
        pct(repacked_bytes, total_bytes),
        open_s * 1e3
    );
    let _ = writeln!(
        s,
        "each batch: one warm-up pass, then the median of timed passes over every matrix in file order (repacked and plain alternate)"
    );
    for k in skipped {
        let _ = writeln!(s, "not timed: {k}");
    }
    let _ = writeln!(s, "\nmatmul part of one forward pass:");
    let mut t = Table::new(&[
        ("batch", Align::Right),
        ("reps", Align::Right),
        ("repacked ms", Align::Right),
        ("plain ms", Align::Right),
        ("speedup", Align::Right),
        ("repacked tok/s", Align::Right),
        ("plain tok/s", Align::Right),
        ("repacked GFLOP/s", Align::Right),
    ]);
    for bt in all {
        t.push(vec![
            bt.batch.to_string(),
            bt.reps.to_string(),
            fmt_ms(bt.total.0 * 1e3),
            fmt_ms(bt.total.1 * 1e3),
            format!("{:.2}x", bt.total.1 / bt.total.0),
            fmt_rate(bt.batch as f64 / bt.total.0),
            fmt_rate(bt.batch as f64 / bt.total.1),
            fmt_rate(total_flop(bt) / bt.total.0 * 1e-9),
        ]);
    }
    s.push_str(&t.render());

    let _ = writeln!(s, "\nby type (sum of per-matrix medians):");
    let mut cols: Vec<(String, Align)> = vec![
        ("type".into(), Align::Left),
        ("matrices".into(), Align::Right),
        ("bytes".into(), Align::Right),
        ("% repacked".into(), Align::Right),
        ("layouts (bytes)".into(), Align::Left),
    ];
    for bt in all {
        cols.push((format!("b{} repacked ms", bt.batch), Align::Right));
        cols.push((format!("b{} plain ms", bt.batch), Align::Right));
    }
    let col_refs: Vec<(&str, Align)> = cols.iter().map(|(h, a)| (h.as_str(), *a)).collect();
    let mut tt = Table::new(&col_refs);
    for (ty, r) in &types {
        let mut row = vec![
            ty.to_string(),
            r.matrices.to_string(),
            fmt_bytes(r.bytes),
            format!("{:.1}", pct(r.repacked_bytes, r.bytes)),
            r.layouts
                .iter()
                .map(|(l, b)| format!("{l} {}", fmt_bytes(*b)))
                .collect::<Vec<_>>()
                .join(", "),
        ];
        for (rp, p, _) in &r.time {
            row.push(fmt_ms(rp * 1e3));
            row.push(fmt_ms(p * 1e3));
        }
        tt.push(row);
    }
    s.push_str(&tt.render());

    if let Some(g) = ggml {
        g.render(&mut s);
    }
    if cfg.per_tensor {
        let _ = writeln!(s, "\nper matrix (median ms):");
        let mut cols: Vec<(String, Align)> = vec![
            ("matrix".into(), Align::Left),
            ("type".into(), Align::Left),
            ("shape".into(), Align::Left),
            ("layout".into(), Align::Left),
        ];
        for bt in all {
            cols.push((format!("b{} repacked", bt.batch), Align::Right));
            cols.push((format!("b{} plain", bt.batch), Align::Right));
        }
        let col_refs: Vec<(&str, Align)> = cols.iter().map(|(h, a)| (h.as_str(), *a)).collect();
        let mut pt = Table::new(&col_refs);
        for (i, e) in list.iter().enumerate() {
            let mut row = vec![
                e.name.clone(),
                e.ty.to_string(),
                format!("{}x{}", e.rows, e.cols),
                e.repacked.layout().to_string(),
            ];
            for bt in all {
                row.push(fmt_ms(bt.per[i].0 * 1e3));
                row.push(fmt_ms(bt.per[i].1 * 1e3));
            }
            pt.push(row);
        }
        s.push_str(&pt.render());
    }
    Ok(s)
}
