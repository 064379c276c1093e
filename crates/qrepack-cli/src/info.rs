//! `qrepack info`: CPU features, the layouts, which layout each type gets, and the kernel sets of
//! each layout and type.

use qrepack::cpu::{
    sve_vector_bits, CpuFeatures, KernelSet, FORCE_SCALAR_ENV, ISA_ENV, SVE_SET_BITS,
};
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

/// A non-empty environment variable.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// True when the CPU has AVX512BW and no cap below `avx512` forbids it.
fn avx512bw(cpu: &CpuFeatures) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512bw")
            && cpu.has(KernelSet::Avx2)
            && cpu.cap().is_none_or(|c| c == KernelSet::Avx512)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = cpu;
        false
    }
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
    /// The kernel sets of each (layout, type) of the listed types.
    pub kernels: Vec<KernelsJson>,
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
    /// The `QREPACK_ISA` (or `QREPACK_FORCE_SCALAR`) cap, if any.
    pub cap: Option<&'static str>,
    pub describe: String,
    pub force_scalar: bool,
    /// The kernel sets this CPU may run, best first.
    pub sets: Vec<&'static str>,
    /// True on an AArch64 CPU with SVE (no kernels use it; reported for reference).
    pub sve: bool,
    /// The SVE vector length in bits, if the CPU has SVE.
    pub sve_vector_bits: Option<u32>,
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

/// The kernel sets one layout has for one type, and the one this CPU gets.
#[derive(Debug, Serialize)]
pub struct KernelsJson {
    pub layout: &'static str,
    #[serde(rename = "type")]
    pub ty: &'static str,
    /// Best first, ending with `scalar`.
    pub sets: Vec<&'static str>,
    pub selected: &'static str,
}

impl Info {
    /// Every (layout, type) of the listed types: each type's candidate layouts (plain first).
    fn kernel_rows(&self, cpu: &CpuFeatures) -> Vec<KernelsJson> {
        let mut out = Vec::new();
        for &ty in &self.types {
            for l in Layout::candidates(ty) {
                out.push(KernelsJson {
                    layout: l.name(),
                    ty: ty.name(),
                    sets: l.kernel_sets(ty).into_iter().map(KernelSet::name).collect(),
                    selected: l.kernel_set_for(ty, cpu).name(),
                });
            }
        }
        out
    }

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
                avx512bw: avx512bw(cpu),
                avx512vnni: cpu.has(KernelSet::Avx512),
                avxvnni: cpu.has(KernelSet::AvxVnni),
                cap: cpu.cap().map(KernelSet::name),
                describe: cpu.describe(),
                force_scalar: cpu.force_scalar(),
                sets: cpu.sets().map(KernelSet::name).collect(),
                sve: sve_vector_bits().is_some(),
                sve_vector_bits: sve_vector_bits(),
            },
            kernels: self.kernel_rows(cpu),
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
        if cfg!(target_arch = "aarch64") {
            out.push_str(&match sve_vector_bits() {
                Some(bits) if bits == SVE_SET_BITS && cpu.has(KernelSet::Sve) => {
                    format!("sve: {bits}-bit vectors (sve kernel set)\n")
                }
                Some(bits) if bits == SVE_SET_BITS => format!(
                    "sve: {bits}-bit vectors (sve kernel set off: no i8mm, or {ISA_ENV} caps it)\n"
                ),
                Some(bits) => format!(
                    "sve: {bits}-bit vectors (the sve kernel set needs {SVE_SET_BITS}-bit vectors; NEON sets run)\n"
                ),
                None => "sve: no\n".to_string(),
            });
        }
        out.push_str(&format!(
            "{FORCE_SCALAR_ENV}: {}\n",
            match std::env::var(FORCE_SCALAR_ENV).ok() {
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
            "{ISA_ENV}: {}\n",
            match (env(ISA_ENV), cpu.cap()) {
                (Some(v), Some(cap)) => format!("{v:?} (kernel sets capped at {cap})"),
                (Some(v), None) => format!("{v:?}"),
                (None, _) => "not set".to_string(),
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

        out.push_str(
            "\nkernel sets by layout and type (best first; selected: the one this CPU runs):\n",
        );
        let mut t = Table::new(&[
            ("layout", Align::Left),
            ("type", Align::Left),
            ("kernel sets", Align::Left),
            ("selected", Align::Left),
        ]);
        for k in self.kernel_rows(cpu) {
            t.push(vec![
                k.layout.to_string(),
                k.ty.to_string(),
                k.sets.join(", "),
                k.selected.to_string(),
            ]);
        }
        out.push_str(&t.render());
        out
    }
}
