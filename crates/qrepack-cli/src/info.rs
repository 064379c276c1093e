//! `qrepack info`: CPU features, the layouts, and which layout each type gets.

use qrepack::cpu::{CpuFeatures, KernelSet};
use qrepack::{GgmlType, Layout, QMatrix};
use serde::Serialize;

use crate::table::{Align, Table};

/// The kernel family `layout` runs for `ty` on this CPU, found by building the smallest matrix
/// (all-zero blocks) in it; `None` when the library refuses.
pub fn kernels_of(layout: Layout, ty: GgmlType) -> Option<&'static str> {
    let rows = layout.rows_interleaved();
    let cols = ty.block_size();
    let bytes = vec![0u8; ty.matrix_bytes(rows, cols).ok()?];
    QMatrix::with_layout(ty, rows, cols, &bytes, layout)
        .ok()
        .map(|m| m.kernel_name())
}

fn force_scalar_env() -> Option<String> {
    std::env::var("QREPACK_FORCE_SCALAR").ok()
}

/// What `info` reports, for `types` and a matrix of `rows` rows.
pub struct Info {
    pub types: Vec<GgmlType>,
    pub rows: usize,
}

/// The JSON report of `info` (keys in alphabetical order, as the reports always had them).
#[derive(Debug, Serialize)]
pub struct InfoJson {
    pub cpu: CpuJson,
    pub layouts: Vec<LayoutJson>,
    pub rows: usize,
    pub threads: usize,
    pub types: Vec<TypeJson>,
    pub version: &'static str,
}

/// What this CPU may run (after the `QREPACK_ISA` cap).
#[derive(Debug, Serialize)]
pub struct CpuJson {
    pub avx2: bool,
    pub avx512bw: bool,
    pub avx512vnni: bool,
    pub avxvnni: bool,
    pub describe: String,
    pub force_scalar: bool,
}

/// One layout.
#[derive(Debug, Serialize)]
pub struct LayoutJson {
    pub interleave_bytes: usize,
    pub kernels: Option<&'static str>,
    pub name: &'static str,
    pub rows_interleaved: usize,
    #[serde(rename = "type")]
    pub ty: Option<&'static str>,
}

/// One type and the layout it gets.
#[derive(Debug, Serialize)]
pub struct TypeJson {
    pub block_bytes: usize,
    pub block_size: usize,
    pub chosen: &'static str,
    pub fitting_layouts: Vec<&'static str>,
    pub id: u32,
    pub kernels: Option<&'static str>,
    pub layouts: Vec<&'static str>,
    #[serde(rename = "type")]
    pub ty: &'static str,
}

impl Info {
    pub fn to_json(&self) -> InfoJson {
        let cpu = CpuFeatures::get();
        let layouts = Layout::ALL
            .iter()
            .map(|&l| LayoutJson {
                interleave_bytes: l.interleave_bytes(),
                kernels: l.weight_type().and_then(|t| kernels_of(l, t)),
                name: l.name(),
                rows_interleaved: l.rows_interleaved(),
                ty: l.weight_type().map(|t| t.name()),
            })
            .collect();
        let types = self
            .types
            .iter()
            .map(|&ty| {
                let chosen = Layout::best_for(ty, self.rows, cpu);
                let candidates = Layout::candidates(ty);
                TypeJson {
                    block_bytes: ty.block_bytes(),
                    block_size: ty.block_size(),
                    chosen: chosen.name(),
                    fitting_layouts: candidates
                        .iter()
                        .filter(|l| l.fits(ty, self.rows))
                        .map(|l| l.name())
                        .collect(),
                    id: ty.id(),
                    kernels: kernels_of(chosen, ty),
                    layouts: candidates.iter().map(|l| l.name()).collect(),
                    ty: ty.name(),
                }
            })
            .collect();
        InfoJson {
            cpu: CpuJson {
                avx2: cpu.has(KernelSet::Avx2),
                avx512bw: cpu.has(KernelSet::Avx512),
                avx512vnni: cpu.has(KernelSet::Avx512),
                avxvnni: cpu.has(KernelSet::AvxVnni),
                describe: cpu.describe(),
                force_scalar: cpu.force_scalar(),
            },
            layouts,
            rows: self.rows,
            threads: rayon::current_num_threads(),
            types,
            version: env!("CARGO_PKG_VERSION"),
        }
    }

    pub fn render(&self) -> String {
        let cpu = CpuFeatures::get();
        let mut out = String::new();
        out.push_str(&format!("qrepack {}\n", env!("CARGO_PKG_VERSION")));
        out.push_str(&format!("cpu features: {}\n", cpu.describe()));
        out.push_str(&format!(
            "QREPACK_FORCE_SCALAR: {}\n",
            match force_scalar_env() {
                Some(v) => format!(
                    "{v:?} ({})",
                    if cpu.force_scalar() {
                        "scalar kernels forced"
                    } else {
                        "ignored"
                    }
                ),
                None => "not set".to_string(),
            }
        ));
        out.push_str(&format!(
            "threads: {}\n\nlayouts:\n",
            rayon::current_num_threads()
        ));

        let mut t = Table::new(&[
            ("name", Align::Left),
            ("type", Align::Left),
            ("rows interleaved", Align::Right),
            ("bytes interleaved", Align::Right),
            ("kernels", Align::Left),
        ]);
        for &l in Layout::ALL {
            t.push(vec![
                l.name().to_string(),
                l.weight_type().map_or("any".to_string(), |t| t.to_string()),
                l.rows_interleaved().to_string(),
                match l.interleave_bytes() {
                    0 => "-".to_string(),
                    b => b.to_string(),
                },
                l.weight_type()
                    .and_then(|t| kernels_of(l, t))
                    .unwrap_or("per type")
                    .to_string(),
            ]);
        }
        out.push_str(&t.render());

        out.push_str(&format!(
            "\ntypes (layout chosen for a {}-row matrix):\n",
            self.rows
        ));
        let mut t = Table::new(&[
            ("type", Align::Left),
            ("block", Align::Right),
            ("bytes/block", Align::Right),
            ("layouts", Align::Left),
            ("chosen", Align::Left),
            ("kernels", Align::Left),
        ]);
        for &ty in &self.types {
            let chosen = Layout::best_for(ty, self.rows, cpu);
            let layouts: Vec<String> = Layout::candidates(ty)
                .iter()
                .map(|l| {
                    if l.fits(ty, self.rows) {
                        l.name().to_string()
                    } else {
                        format!("({})", l.name())
                    }
                })
                .collect();
            t.push(vec![
                ty.to_string(),
                ty.block_size().to_string(),
                ty.block_bytes().to_string(),
                layouts.join(", "),
                chosen.to_string(),
                kernels_of(chosen, ty).unwrap_or("-").to_string(),
            ]);
        }
        out.push_str(&t.render());
        out.push_str("(parenthesized: does not fit that row count)\n");

        out
    }
}
