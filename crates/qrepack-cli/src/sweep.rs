//! `qrepack sweep` (alias `qrepack bench --sweep`): GFLOP/s against batch size per type,
//! interleaved vs plain, on one shape; a table, and an SVG line chart with `--plot`.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{bail, Context, Result};
use qrepack::cpu::CpuFeatures;
use qrepack::{GgmlType, Layout, QMatrix};
use serde::Serialize;

use crate::bench::{time_reps, Reps, Stats};
use crate::data;
use crate::progress;
use crate::table::{fmt_rate, Align, Table};

/// The default batches of the sweep.
pub const SWEEP_BATCHES: [usize; 10] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512];

/// What to sweep.
pub struct Sweep {
    pub types: Vec<GgmlType>,
    pub rows: usize,
    pub cols: usize,
    pub batches: Vec<usize>,
    pub reps: Reps,
    pub seed: u64,
    pub quiet: bool,
    /// ggml's product of each type as one more line (`--vs ggml`).
    pub ggml: Option<Peer>,
}

/// The types that have an interleaved layout (the default of `--sweep`).
pub fn default_types() -> Vec<GgmlType> {
    let mut v: Vec<GgmlType> = Layout::ALL.iter().filter_map(|l| l.weight_type()).collect();
    v.sort();
    v.dedup();
    v
}

/// Whose product a line of the chart times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Line {
    /// qrepack in this layout.
    Qrepack(Layout),
    /// ggml's own CPU backend (the peer benchmark), the faster of repack on and off per batch.
    Ggml,
}

/// One line of the chart: a type in one layout, or ggml's product of it.
#[derive(Clone, Debug)]
pub struct Series {
    pub ty: GgmlType,
    pub line: Line,
    /// (batch, median seconds, GFLOP/s)
    pub points: Vec<(usize, f64, f64)>,
}

impl Series {
    pub fn label(&self) -> String {
        match self.line {
            Line::Qrepack(layout) => format!("{} {layout}", self.ty),
            Line::Ggml => format!("{} ggml", self.ty),
        }
    }
}

/// The ggml peer to time beside qrepack: its binary and thread count.
pub struct Peer {
    pub binary: std::path::PathBuf,
    pub threads: usize,
}

pub fn run(cfg: &Sweep) -> Result<Vec<Series>> {
    let (rows, cols) = (cfg.rows, cfg.cols);
    for &ty in &cfg.types {
        ty.row_bytes(cols)
            .with_context(|| format!("--cols {cols} does not fit {ty}"))?;
    }
    let w = data::weights(cfg.seed, rows, cols)?;
    let xs: Vec<Vec<f32>> = cfg
        .batches
        .iter()
        .map(|&b| data::activations(cfg.seed, b, cols))
        .collect::<Result<_>>()?;
    let mut out = Vec::new();
    let n_series: usize = cfg
        .types
        .iter()
        .map(|&ty| {
            if Layout::best_for(ty, rows, CpuFeatures::get()) == Layout::Plain {
                1
            } else {
                2
            }
        })
        .sum();
    // the peer's runs of a type count as one step per batch
    let n_series = n_series + cfg.ggml.as_ref().map_or(0, |_| cfg.types.len());
    let pb = progress::items((n_series * cfg.batches.len()) as u64, "sweep", cfg.quiet);
    for &ty in &cfg.types {
        let q = data::quantize(ty, &w, rows, cols)?;
        let best = Layout::best_for(ty, rows, CpuFeatures::get());
        let mut layouts = vec![best];
        if best != Layout::Plain {
            layouts.push(Layout::Plain);
        }
        for layout in layouts {
            let m = QMatrix::with_layout(ty, rows, cols, &q, layout)?;
            let mut points = Vec::new();
            for (&batch, x) in cfg.batches.iter().zip(&xs) {
                pb.set_message(format!("{ty} {layout} batch {batch}"));
                let mut y = vec![0.0f32; batch * rows];
                let times = time_reps(std::slice::from_ref(&m), x, batch, &mut y, cfg.reps)?;
                let med = Stats::of(&times).median;
                let gflops = 2.0 * rows as f64 * cols as f64 * batch as f64 / med * 1e-9;
                points.push((batch, med, gflops));
                pb.inc(1);
            }
            out.push(Series {
                ty,
                line: Line::Qrepack(layout),
                points,
            });
        }
        if let Some(peer) = &cfg.ggml {
            pb.set_message(format!("{ty} ggml"));
            out.extend(ggml_series(peer, ty, cfg)?);
        }
    }
    pb.finish_and_clear();
    Ok(out)
}

/// ggml's line for `ty`: the peer's median per batch (weights hot, as qrepack's are timed
/// here), the faster of its two modes; `None` if the peer ran no batch of the type.
fn ggml_series(peer: &Peer, ty: GgmlType, cfg: &Sweep) -> Result<Option<Series>> {
    use crate::vs_ggml::{time_shapes, Shape};
    let shape = Shape {
        ty,
        rows: cfg.rows,
        cols: cfg.cols,
    };
    let shapes = std::collections::BTreeMap::from([(shape, 1)]);
    let times = time_shapes(&peer.binary, &shapes, &cfg.batches, peer.threads, 0.0, true)?;
    let flops = 2.0 * cfg.rows as f64 * cfg.cols as f64;
    let points: Vec<(usize, f64, f64)> = cfg
        .batches
        .iter()
        .map(|&b| {
            let t = times.get(&(shape, b)).and_then(|t| t.best());
            t.map_or((b, f64::NAN, f64::NAN), |t| {
                (b, t, flops * b as f64 / t * 1e-9)
            })
        })
        .collect();
    Ok(points.iter().any(|p| p.2.is_finite()).then_some(Series {
        ty,
        line: Line::Ggml,
        points,
    }))
}

pub fn table(series: &[Series], batches: &[usize]) -> String {
    let mut cols: Vec<(String, Align)> = vec![("batch".into(), Align::Right)];
    for s in series {
        cols.push((s.label(), Align::Right));
    }
    let refs: Vec<(&str, Align)> = cols.iter().map(|(h, a)| (h.as_str(), *a)).collect();
    let mut t = Table::new(&refs);
    for (i, b) in batches.iter().enumerate() {
        let mut row = vec![b.to_string()];
        for s in series {
            row.push(s.points.get(i).map_or(String::new(), |p| {
                if p.2.is_finite() {
                    fmt_rate(p.2)
                } else {
                    "-".to_string()
                }
            }));
        }
        t.push(row);
    }
    t.render()
}

/// The JSON report of a sweep (keys in alphabetical order, as the reports always had them).
#[derive(Debug, Serialize)]
pub struct SweepJson {
    pub batches: Vec<usize>,
    pub cols: usize,
    pub cpu: String,
    pub rows: usize,
    pub seed: u64,
    pub series: Vec<SeriesJson>,
    pub threads: usize,
}

/// One line of the chart in the JSON report.
#[derive(Debug, Serialize)]
pub struct SeriesJson {
    /// `qrepack`, or `ggml` for the peer's line.
    pub engine: &'static str,
    /// qrepack's layout (`null` on ggml's line).
    pub layout: Option<&'static str>,
    pub points: Vec<PointJson>,
    #[serde(rename = "type")]
    pub ty: &'static str,
}

/// One point of a series (`null` figures where ggml could not run the batch).
#[derive(Debug, Serialize)]
pub struct PointJson {
    pub batch: usize,
    pub gflops: Option<f64>,
    pub median_ms: Option<f64>,
}

pub fn to_json(series: &[Series], cfg: &Sweep) -> SweepJson {
    SweepJson {
        batches: cfg.batches.clone(),
        cols: cfg.cols,
        cpu: CpuFeatures::get().describe(),
        rows: cfg.rows,
        seed: cfg.seed,
        series: series
            .iter()
            .map(|s| SeriesJson {
                engine: match s.line {
                    Line::Qrepack(_) => "qrepack",
                    Line::Ggml => "ggml",
                },
                layout: match s.line {
                    Line::Qrepack(l) => Some(l.name()),
                    Line::Ggml => None,
                },
                points: s
                    .points
                    .iter()
                    .map(|&(batch, t, gflops)| PointJson {
                        batch,
                        gflops: gflops.is_finite().then_some(gflops),
                        median_ms: t.is_finite().then_some(t * 1e3),
                    })
                    .collect(),
                ty: s.ty.name(),
            })
            .collect(),
        threads: rayon::current_num_threads(),
    }
}

const COLORS: [&str; 10] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
    "#7f7f7f", "#bcbd22",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A "nice" tick step (1, 2 or 5 times a power of ten) giving about `n` ticks up to `max`.
fn nice_step(max: f64, n: f64) -> f64 {
    let raw = (max / n).max(1e-12);
    let p = 10f64.powf(raw.log10().floor());
    let f = raw / p;
    let m = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    m * p
}

/// An SVG line chart of GFLOP/s against batch (log2 x-axis): one colour per type, solid for
/// the interleaved layout, dashed for plain, dotted for ggml.
pub fn svg(series: &[Series], title: &str) -> String {
    let (w, h) = (900.0, 560.0);
    let (left, right, top, bottom) = (70.0, 200.0, 50.0, 60.0);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let xs: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| (p.0 as f64).log2()))
        .collect();
    let xmin = xs.iter().copied().fold(f64::INFINITY, f64::min).min(0.0);
    let xmax = xs.iter().copied().fold(0.0, f64::max).max(xmin + 1.0);
    let ymax_data = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.2))
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let step = nice_step(ymax_data.max(1e-9) * 1.05, 6.0);
    let ymax = (ymax_data * 1.05 / step).ceil().max(1.0) * step;
    let px = |x: f64| left + (x - xmin) / (xmax - xmin) * pw;
    let py = |y: f64| top + ph - y / ymax * ph;

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="28" text-anchor="middle" font-size="16">{}</text>"#,
        left + pw / 2.0,
        esc(title)
    );
    // grid and y ticks
    let mut y = 0.0;
    while y <= ymax + step * 1e-6 {
        let yy = py(y);
        let _ = writeln!(
            s,
            r##"<line x1="{left}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#e0e0e0"/>"##,
            left + pw
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            left - 6.0,
            yy + 4.0,
            fmt_rate(y)
        );
        y += step;
    }
    // x ticks at powers of two
    let mut e = xmin.ceil() as i64;
    while e as f64 <= xmax + 1e-9 {
        let xx = px(e as f64);
        let _ = writeln!(
            s,
            r##"<line x1="{xx:.1}" y1="{top}" x2="{xx:.1}" y2="{:.1}" stroke="#f0f0f0"/>"##,
            top + ph
        );
        let _ = writeln!(
            s,
            r#"<text x="{xx:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            top + ph + 18.0,
            1u64 << e.clamp(0, 62)
        );
        e += 1;
    }
    // axes
    let _ = writeln!(
        s,
        r#"<line x1="{left}" y1="{top}" x2="{left}" y2="{:.1}" stroke="black"/>"#,
        top + ph
    );
    let _ = writeln!(
        s,
        r#"<line x1="{left}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="black"/>"#,
        top + ph,
        left + pw,
        top + ph
    );
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">batch (activation rows, log2 scale)</text>"#,
        left + pw / 2.0,
        h - 15.0
    );
    let _ = writeln!(
        s,
        r#"<text x="18" y="{:.1}" text-anchor="middle" transform="rotate(-90 18 {:.1})">GFLOP/s</text>"#,
        top + ph / 2.0,
        top + ph / 2.0
    );
    // lines and legend
    let mut types: Vec<GgmlType> = series.iter().map(|s| s.ty).collect();
    types.dedup();
    for (i, sr) in series.iter().enumerate() {
        let ci = types.iter().position(|&t| t == sr.ty).unwrap_or(0) % COLORS.len();
        let color = COLORS[ci];
        let dash = match sr.line {
            Line::Qrepack(Layout::Plain) => r#" stroke-dasharray="6 4""#,
            Line::Qrepack(_) => "",
            Line::Ggml => r#" stroke-dasharray="2 3""#,
        };
        let pts: Vec<String> = sr
            .points
            .iter()
            .filter(|p| p.2.is_finite())
            .map(|p| format!("{:.1},{:.1}", px((p.0 as f64).log2()), py(p.2)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2"{dash} points="{}"/>"#,
            pts.join(" ")
        );
        for p in &pts {
            let (cx, cy) = p.split_once(',').unwrap_or(("0", "0"));
            let _ = writeln!(s, r#"<circle cx="{cx}" cy="{cy}" r="2.5" fill="{color}"/>"#);
        }
        let ly = top + 10.0 + i as f64 * 20.0;
        let lx = left + pw + 15.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{color}" stroke-width="2"{dash}/>"#,
            lx + 30.0
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}">{}</text>"#,
            lx + 36.0,
            ly + 4.0,
            esc(&sr.label())
        );
    }
    s.push_str("</svg>\n");
    s
}

/// Writes the chart to `path`.
pub fn write_svg(path: &Path, series: &[Series], title: &str) -> Result<()> {
    if series.is_empty() {
        bail!("nothing to plot");
    }
    std::fs::write(path, svg(series, title)).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn svg_has_axes_legend_and_lines() {
        let s = vec![
            Series {
                ty: GgmlType::Q4_0,
                line: Line::Qrepack(Layout::Q4_0_8x8),
                points: vec![(1, 1e-3, 10.0), (2, 1e-3, 20.0), (512, 1e-2, 95.0)],
            },
            Series {
                ty: GgmlType::Q4_0,
                line: Line::Qrepack(Layout::Plain),
                points: vec![(1, 1e-3, 8.0), (2, 1e-3, 12.0), (512, 1e-2, 40.0)],
            },
            Series {
                ty: GgmlType::Q4_0,
                line: Line::Ggml,
                points: vec![(1, 1e-3, 9.0), (2, f64::NAN, f64::NAN), (512, 1e-2, 60.0)],
            },
        ];
        let svg = svg(&s, "q4_0 <4096x4096>");
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 3);
        assert!(svg.contains(r#"stroke-dasharray="6 4""#));
        assert!(svg.contains(r#"stroke-dasharray="2 3""#));
        assert!(svg.contains("q4_0 q4_0_8x8") && svg.contains("q4_0 plain"));
        assert!(svg.contains("q4_0 ggml"));
        // the batch ggml did not run is left out of its line, not drawn at NaN
        assert!(!svg.contains("NaN"));
        assert!(svg.contains("&lt;4096x4096&gt;"));
        assert!(svg.contains(">512<"));
        assert_eq!(nice_step(95.0, 6.0), 20.0);
    }
}
