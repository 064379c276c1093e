//! `qrepack verify MODEL`: every weight matrix multiplied in its chosen layout, against the
//! plain layout and against the f64 reference (`qrepack::reference`) on sampled rows.

use std::path::Path;

use anyhow::{bail, Context, Result};
use qrepack::model::LayoutPolicy;
use qrepack::{GgmlType, Layout, Model, QMatrix};
use rayon::prelude::*;
use serde::Serialize;

use crate::data;
use crate::load;
use crate::progress;
use crate::table::{Align, Table};

/// Largest normalized MSE that passes (against plain and against the f64 reference).
pub const MAX_NMSE: f64 = 1e-9;

/// One weight matrix of a model (an expert counts as a matrix of its own).
pub struct Weight<'a> {
    pub name: String,
    pub tensor: String,
    pub matrix: &'a QMatrix,
}

/// Every weight matrix of `model`, in file order (`name[e]` for expert `e` of a 3-D tensor).
pub fn weights(model: &Model) -> Vec<Weight<'_>> {
    let mut out = Vec::new();
    for t in model.tensors() {
        if let Some(m) = model.matrix(&t.name) {
            out.push(Weight {
                name: t.name.clone(),
                tensor: t.name.clone(),
                matrix: m,
            });
        } else if let Some(e) = model.experts(&t.name) {
            for i in 0..e.n_expert() {
                if let Some(m) = e.expert(i) {
                    out.push(Weight {
                        name: format!("{}[{i}]", t.name),
                        tensor: t.name.clone(),
                        matrix: m,
                    });
                }
            }
        }
    }
    out
}

/// `sum (a - b)^2 / sum b^2` (0 when both are all zero).
pub fn nmse(got: impl Iterator<Item = f64>, want: impl Iterator<Item = f64>) -> f64 {
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (g, w) in got.zip(want) {
        num += (g - w) * (g - w);
        den += w * w;
    }
    if num == 0.0 {
        0.0
    } else if !num.is_finite() {
        f64::INFINITY
    } else {
        num / den.max(1e-300)
    }
}

/// `count` row indices spread evenly over `rows` (all of them when there are fewer).
pub fn sample_rows(rows: usize, count: usize) -> Vec<usize> {
    if rows <= count {
        return (0..rows).collect();
    }
    let mut v: Vec<usize> = (0..count).map(|i| i * rows / count).collect();
    v.dedup();
    if v.last() != Some(&(rows - 1)) {
        v.push(rows - 1);
    }
    v
}

/// Result of one batch.
#[derive(Clone, Debug)]
pub struct BatchResult {
    pub batch: usize,
    pub vs_plain: f64,
    pub vs_ref: f64,
    pub plain_vs_ref: f64,
}

/// Result of one weight matrix.
#[derive(Clone, Debug)]
pub struct Verified {
    pub name: String,
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub layout: Layout,
    pub ref_rows: usize,
    pub batches: Vec<BatchResult>,
}

impl Verified {
    pub fn worst_vs_plain(&self) -> f64 {
        self.batches.iter().map(|b| b.vs_plain).fold(0.0, f64::max)
    }
    pub fn worst_vs_ref(&self) -> f64 {
        self.batches.iter().map(|b| b.vs_ref).fold(0.0, f64::max)
    }
    pub fn pass(&self) -> bool {
        // NaN fails: the comparisons are false
        self.batches
            .iter()
            .all(|b| b.vs_plain <= MAX_NMSE && b.vs_ref <= MAX_NMSE)
    }
}

/// Seed of a tensor's activations: the seed mixed with the tensor's name.
fn tensor_seed(seed: u64, name: &str) -> u64 {
    seed ^ qrepack::gguf::fnv1a64(name.as_bytes())
}

/// Verifies one matrix at each batch.
pub fn verify_one(
    name: &str,
    m: &QMatrix,
    batches: &[usize],
    seed: u64,
    ref_rows: usize,
) -> Result<Verified> {
    let (ty, rows, cols) = (m.ty(), m.rows(), m.cols());
    let ggml = m.to_ggml_bytes();
    let plain_owned;
    let plain = if m.layout() == Layout::Plain {
        m
    } else {
        plain_owned = QMatrix::with_layout(ty, rows, cols, &ggml, Layout::Plain)?;
        &plain_owned
    };
    let sampled = sample_rows(rows, ref_rows);
    let mut out = Vec::new();
    for &n in batches {
        let x = data::stream(tensor_seed(seed, name).wrapping_add(n as u64), n * cols);
        let mut y = vec![0.0f32; n * rows];
        let mut yp = vec![0.0f32; n * rows];
        m.matmul(&x, n, &mut y)?;
        plain.matmul(&x, n, &mut yp)?;
        let vs_plain = nmse(y.iter().map(|&v| v as f64), yp.iter().map(|&v| v as f64));
        let r = qrepack::reference::matmul_f64(ty, &ggml, rows, cols, &x, n, Some(&sampled))?;
        let pick = |y: &[f32]| -> Vec<f64> {
            (0..n)
                .flat_map(|t| sampled.iter().map(move |&i| (t, i)))
                .map(|(t, i)| y[t * rows + i] as f64)
                .collect()
        };
        let vs_ref = nmse(pick(&y).into_iter(), r.iter().copied());
        let plain_vs_ref = nmse(pick(&yp).into_iter(), r.iter().copied());
        out.push(BatchResult {
            batch: n,
            vs_plain,
            vs_ref,
            plain_vs_ref,
        });
    }
    Ok(Verified {
        name: name.to_string(),
        ty,
        rows,
        cols,
        layout: m.layout(),
        ref_rows: sampled.len(),
        batches: out,
    })
}

fn fmt_nmse(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else {
        format!("{v:.2e}")
    }
}

/// The JSON report of `verify` (keys in alphabetical order, as the reports always had them).
#[derive(Serialize)]
struct VerifyJson<'a> {
    batches: &'a [usize],
    checked: usize,
    failed: usize,
    file: String,
    pass: bool,
    seed: u64,
    tensors: Vec<VerifiedJson<'a>>,
    threshold: f64,
    worst_nmse_vs_plain: f64,
    worst_nmse_vs_ref: f64,
}

/// One matrix of the JSON report: the worst over its batches, and each batch.
#[derive(Serialize)]
struct VerifiedJson<'a> {
    batches: Vec<BatchJson>,
    cols: usize,
    layout: &'static str,
    name: &'a str,
    nmse_vs_plain: f64,
    nmse_vs_ref: f64,
    pass: bool,
    ref_rows: usize,
    rows: usize,
    #[serde(rename = "type")]
    ty: &'static str,
}

/// One batch of a matrix in the JSON report.
#[derive(Serialize)]
struct BatchJson {
    batch: usize,
    nmse_plain_vs_ref: f64,
    nmse_vs_plain: f64,
    nmse_vs_ref: f64,
}

/// Runs `verify`; returns the report and whether everything passed.
pub fn run(
    path: &Path,
    batches: &[usize],
    tensors: &[String],
    seed: u64,
    ref_rows: usize,
    json_out: bool,
    quiet: bool,
) -> Result<(String, bool)> {
    let (model, _) = load::open(path, LayoutPolicy::Best, quiet)?;
    let all = weights(&model);
    let selected: Vec<&Weight> = if tensors.is_empty() {
        all.iter().collect()
    } else {
        let mut v = Vec::new();
        for want in tensors {
            let hits: Vec<&Weight> = all
                .iter()
                .filter(|w| &w.name == want || &w.tensor == want)
                .collect();
            if hits.is_empty() {
                match model.tensor(want) {
                    Some(t) => bail!(
                        "tensor '{want}' is not a weight matrix ({}: {})",
                        t.type_name(),
                        t.became
                    ),
                    None => bail!("no tensor named '{want}' in {}", path.display()),
                }
            }
            v.extend(hits);
        }
        v
    };
    if selected.is_empty() {
        bail!("{} has no weight matrices to verify", path.display());
    }
    let pb = progress::items(selected.len() as u64, "verify", quiet);
    let mut results: Vec<(usize, Verified)> = selected
        .par_iter()
        .enumerate()
        .with_max_len(1)
        .map(|(i, w)| {
            let r = verify_one(&w.name, w.matrix, batches, seed, ref_rows)
                .with_context(|| format!("verifying {}", w.name));
            pb.inc(1);
            pb.set_message(w.name.clone());
            r.map(|v| (i, v))
        })
        .collect::<Result<_>>()?;
    pb.finish_and_clear();
    results.sort_by_key(|(i, _)| *i);
    let results: Vec<Verified> = results.into_iter().map(|(_, v)| v).collect();
    let failed = results.iter().filter(|v| !v.pass()).count();
    let worst_plain = results
        .iter()
        .map(|v| v.worst_vs_plain())
        .fold(0.0, f64::max);
    let worst_ref = results.iter().map(|v| v.worst_vs_ref()).fold(0.0, f64::max);
    let ok = failed == 0;

    if json_out {
        let list = results
            .iter()
            .map(|v| VerifiedJson {
                batches: v
                    .batches
                    .iter()
                    .map(|b| BatchJson {
                        batch: b.batch,
                        nmse_plain_vs_ref: b.plain_vs_ref,
                        nmse_vs_plain: b.vs_plain,
                        nmse_vs_ref: b.vs_ref,
                    })
                    .collect(),
                cols: v.cols,
                layout: v.layout.name(),
                name: &v.name,
                nmse_vs_plain: v.worst_vs_plain(),
                nmse_vs_ref: v.worst_vs_ref(),
                pass: v.pass(),
                ref_rows: v.ref_rows,
                rows: v.rows,
                ty: v.ty.name(),
            })
            .collect();
        let v = VerifyJson {
            batches,
            checked: results.len(),
            failed,
            file: path.display().to_string(),
            pass: ok,
            seed,
            tensors: list,
            threshold: MAX_NMSE,
            worst_nmse_vs_plain: worst_plain,
            worst_nmse_vs_ref: worst_ref,
        };
        let v = serde_json::to_string(&v)?;
        return Ok((format!("{v}\n"), ok));
    }
    let mut t = Table::new(&[
        ("tensor", Align::Left),
        ("type", Align::Left),
        ("shape", Align::Left),
        ("layout", Align::Left),
        ("nmse vs plain", Align::Right),
        ("nmse vs f64 ref", Align::Right),
        ("plain vs ref", Align::Right),
        ("", Align::Left),
    ]);
    for v in &results {
        let plain_ref = v.batches.iter().map(|b| b.plain_vs_ref).fold(0.0, f64::max);
        t.push(vec![
            v.name.clone(),
            v.ty.to_string(),
            format!("{}x{}", v.rows, v.cols),
            v.layout.to_string(),
            fmt_nmse(v.worst_vs_plain()),
            fmt_nmse(v.worst_vs_ref()),
            fmt_nmse(plain_ref),
            if v.pass() { "PASS" } else { "FAIL" }.into(),
        ]);
    }
    let mut s = format!(
        "qrepack verify {}: batches {:?}, seed {seed}, f64 reference on up to {ref_rows} rows per matrix, threshold nmse <= {MAX_NMSE:e}\n\n",
        path.display(),
        batches
    );
    s.push_str(&t.render());
    s.push_str(&format!(
        "\n{} matrices: {} passed, {failed} failed; worst nmse vs plain {}, vs f64 reference {}\n{}\n",
        results.len(),
        results.len() - failed,
        fmt_nmse(worst_plain),
        fmt_nmse(worst_ref),
        if ok { "PASS" } else { "FAIL" }
    ));
    Ok((s, ok))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampled_rows_cover_both_ends() {
        assert_eq!(sample_rows(5, 64), vec![0, 1, 2, 3, 4]);
        let s = sample_rows(1000, 64);
        assert!(s.len() <= 65 && s[0] == 0 && *s.last().unwrap() == 999);
        assert!(s.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn nmse_handles_zero_and_nan() {
        assert_eq!(nmse([0.0].into_iter(), [0.0].into_iter()), 0.0);
        assert!((nmse([1.1].into_iter(), [1.0].into_iter()) - 0.01).abs() < 1e-12);
        assert!(nmse([f64::NAN].into_iter(), [1.0].into_iter()) > MAX_NMSE);
    }

    #[test]
    fn a_quantized_matrix_passes() {
        let (rows, cols) = (16, 256);
        let w = data::weights(1, rows, cols).unwrap();
        for ty in [
            GgmlType::Q4_0,
            GgmlType::Q4_1,
            GgmlType::Q4_K,
            GgmlType::Q6_K,
            GgmlType::F16,
        ] {
            let q = qrepack::quantize(ty, &w, rows, cols).unwrap();
            let m = QMatrix::new(ty, rows, cols, &q).unwrap();
            let v = verify_one("w", &m, &[1, 5], 7, 8).unwrap();
            assert!(v.pass(), "{ty}: {v:?}");
        }
    }
}
