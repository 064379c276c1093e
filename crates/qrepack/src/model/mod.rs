//! Whole models: every weight of a GGUF file as a [`QMatrix`] / [`QExperts`], repacked in
//! parallel while streaming through the memory map, plus repack cache files that load with zero
//! copies.
//!
//! ```no_run
//! use qrepack::Model;
//! let model = Model::open("model.gguf").unwrap();
//! for t in model.tensors() {
//!     println!("{} {} {:?}: {}", t.name, t.type_name(), t.dims, t.became);
//! }
//! let wq = model.matrix("blk.0.attn_q.weight").unwrap();
//! # let _ = wq;
//! model.write_repacked("model.repacked.gguf".as_ref(), false).unwrap();
//! ```
// File bytes reach this module: no panicking shortcuts on them.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rayon::prelude::*;

use crate::cpu::CpuFeatures;
use crate::error::Error;
use crate::gguf::{checksum64, GgufFile, GgufValue, GgufWriter, TensorInfo};
use crate::layout::Layout;
use crate::matrix::{QExperts, QMatrix};
use crate::types::GgmlType;

mod stack;
pub use stack::Stack;

/// Metadata key marking a repack cache (`u32`, the cache format version).
pub const CACHE_VERSION_KEY: &str = "qrepack.version";
/// The cache format version written and understood. Version 2: `q5_K_8x8` and `q6_K_8x8` are
/// ggml's ARM layouts (qrepack's own x86 layouts of version 1 are now `q5_K_8x8_x86` and
/// `q6_K_8x8_x86`), so a version-1 cache is refused rather than misread.
pub const CACHE_VERSION: u32 = 2;
/// Metadata key with the CPU description of the machine that wrote the cache.
pub const CACHE_CPU_KEY: &str = "qrepack.cpu";
/// Prefix of the per-tensor layout keys (`qrepack.layout.<tensor name>`).
pub const CACHE_LAYOUT_PREFIX: &str = "qrepack.layout.";
/// Prefix of the per-tensor checksum keys (`qrepack.checksum.<tensor name>`, `u64`: the
/// [`checksum64`] of the stored bytes).
pub const CACHE_FNV_PREFIX: &str = "qrepack.checksum.";

/// How [`Model::open_with`] picks the layout of each matrix.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LayoutPolicy {
    /// The best layout for this CPU ([`Layout::best_for`]), else plain.
    #[default]
    Best,
    /// Keep every matrix in ggml's row layout (zero-copy views of the file).
    Plain,
    /// This layout where it fits the tensor's type and rows; the best one elsewhere.
    Force(Layout),
}

impl LayoutPolicy {
    fn choose(self, ty: GgmlType, rows: usize, cpu: &CpuFeatures) -> Layout {
        match self {
            LayoutPolicy::Best => Layout::best_for(ty, rows, cpu),
            LayoutPolicy::Plain => Layout::Plain,
            LayoutPolicy::Force(l) if l.weight_type() == Some(ty) && l.fits(ty, rows) => l,
            LayoutPolicy::Force(_) => Layout::best_for(ty, rows, cpu),
        }
    }
}

/// Progress of [`Model::open_with`], reported after each converted tensor (from worker
/// threads, in completion order).
#[derive(Clone, Debug)]
pub struct Progress {
    /// Weight tensors finished.
    pub tensors_done: usize,
    /// Weight tensors to convert.
    pub tensors_total: usize,
    /// Bytes of those tensors finished.
    pub bytes_done: u64,
    /// Bytes of all weight tensors.
    pub bytes_total: u64,
    /// The tensor just finished.
    pub current: String,
}

/// A progress callback.
pub type ProgressFn = Arc<dyn Fn(Progress) + Send + Sync>;

/// Options of [`Model::open_with`].
#[derive(Clone, Default)]
pub struct OpenOptions {
    /// How layouts are chosen.
    pub layout: LayoutPolicy,
    /// Called after each weight tensor.
    pub progress: Option<ProgressFn>,
    /// When the checksums of a repack cache's tensors are verified.
    pub checksums: Checksums,
    /// Tensors to build as one stacked matrix each ([`Model::stack`]) instead of one matrix
    /// each: a model that multiplies q, k and v (or gate and up) as one product then holds
    /// their weights once. From a repack cache, parts stored in the stack's layout are put
    /// together as stored (a copy, no repacking).
    pub stacks: Vec<Stack>,
}

/// When [`Model::open_with`] verifies the per-tensor checksums of a repack cache.
///
/// Sizes, layouts and the presence of every checksum are always checked on open.
///
/// ```
/// use qrepack::model::{Checksums, OpenOptions};
/// let fast = OpenOptions { checksums: Checksums::OnFirstUse, ..OpenOptions::default() };
/// assert_eq!(OpenOptions::default().checksums, Checksums::OnOpen);
/// # let _ = fast;
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Checksums {
    /// Read every repacked tensor once while opening; a mismatch fails the open (the default).
    #[default]
    OnOpen,
    /// Open without reading tensor data (as fast as mapping the file); each matrix verifies its
    /// bytes before its first product, and every product of a corrupted one is an error.
    OnFirstUse,
}

impl fmt::Debug for OpenOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenOptions")
            .field("layout", &self.layout)
            .field("progress", &self.progress.is_some())
            .field("checksums", &self.checksums)
            .field("stacks", &self.stacks)
            .finish()
    }
}

/// What a tensor of the file became.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Became {
    /// A [`QMatrix`] in this layout; `note` says why it stayed plain, if it did.
    Matrix {
        /// The layout of its weights.
        layout: Layout,
        /// Mapped in place from the file (no copy).
        zero_copy: bool,
        /// Why it stayed plain, if it did.
        note: Option<String>,
    },
    /// A [`QExperts`] in this layout.
    Experts {
        /// The layout of every expert's weights.
        layout: Layout,
        /// Experts in the tensor.
        n_expert: usize,
        /// Why it stayed plain, if it did.
        note: Option<String>,
    },
    /// Not converted (only the raw bytes): the reason.
    Raw(String),
    /// Part of the stacked matrix of this name ([`OpenOptions::stacks`]).
    Stacked(String),
}

impl fmt::Display for Became {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Became::Matrix {
                layout,
                zero_copy,
                note,
            } => {
                write!(f, "{layout}")?;
                if *zero_copy {
                    f.write_str(" (mapped)")?;
                }
                if let Some(n) = note {
                    write!(f, " ({n})")?;
                }
                Ok(())
            }
            Became::Experts {
                layout,
                n_expert,
                note,
            } => {
                write!(f, "{n_expert} experts {layout}")?;
                if let Some(n) = note {
                    write!(f, " ({n})")?;
                }
                Ok(())
            }
            Became::Raw(reason) => f.write_str(reason),
            Became::Stacked(into) => write!(f, "stacked into {into}"),
        }
    }
}

/// One tensor of a [`Model`].
#[derive(Clone, Debug)]
pub struct ModelTensor {
    /// The tensor's name.
    pub name: String,
    /// ggml type id.
    pub type_id: u32,
    /// The type, when qrepack knows it.
    pub ty: Option<GgmlType>,
    /// Dimensions, ggml order (`ne0` = columns first).
    pub dims: Vec<u64>,
    /// What it became.
    pub became: Became,
}

impl ModelTensor {
    /// The type's name (`q4_0`, or `type 16` for types qrepack does not know).
    pub fn type_name(&self) -> String {
        match self.ty {
            Some(t) => t.name().to_string(),
            None => format!("type {}", self.type_id),
        }
    }
}

enum Built {
    Matrix(QMatrix, Became),
    Experts(QExperts, Became),
    Raw(String),
    Stacked(String),
}

/// A GGUF model whose weights are ready to multiply.
pub struct Model {
    gguf: GgufFile,
    tensors: Vec<ModelTensor>,
    index: HashMap<String, usize>,
    matrices: HashMap<String, QMatrix>,
    experts: HashMap<String, QExperts>,
    stacks: HashMap<String, QMatrix>,
    warnings: Vec<String>,
    is_cache: bool,
}

impl fmt::Debug for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Model")
            .field("gguf", &self.gguf)
            .field("matrices", &self.matrices.len())
            .field("experts", &self.experts.len())
            .field("stacks", &self.stacks.len())
            .field("is_cache", &self.is_cache)
            .finish()
    }
}

/// What to do with one tensor.
enum Plan {
    Raw(String),
    /// A part of the stacked matrix of this name: built with the stack.
    Stacked(String),
    Matrix {
        rows: usize,
        cols: usize,
        ty: GgmlType,
    },
    Experts {
        n: usize,
        rows: usize,
        cols: usize,
        ty: GgmlType,
    },
}

fn plan(t: &TensorInfo) -> Plan {
    let Some(ty) = t.ty else {
        return Plan::Raw(if t.size_known() {
            format!("type id {} not supported by qrepack", t.type_id)
        } else {
            format!("unsupported type id {}", t.type_id)
        });
    };
    let dim = |i: usize| -> Option<usize> { usize::try_from(*t.dims.get(i)?).ok() };
    if t.dims.contains(&0) {
        return Plan::Raw("empty tensor".into());
    }
    match (t.dims.len(), dim(0), dim(1), dim(2)) {
        (2, Some(cols), Some(rows), _) => Plan::Matrix { rows, cols, ty },
        (3, Some(cols), Some(rows), Some(n)) => Plan::Experts { n, rows, cols, ty },
        (n @ (0 | 1), ..) => Plan::Raw(format!("not a weight: {n}-D")),
        (n, ..) => Plan::Raw(format!("not a weight: {n}-D")),
    }
}

/// Why a matrix of `ty` with `rows` rows ended up plain (None when it is not plain).
fn plain_note(layout: Layout, policy: LayoutPolicy, ty: GgmlType, rows: usize) -> Option<String> {
    if layout != Layout::Plain {
        return None;
    }
    if policy == LayoutPolicy::Plain {
        return Some("plain requested".into());
    }
    let candidates: Vec<Layout> = Layout::candidates(ty)
        .into_iter()
        .filter(|l| *l != Layout::Plain)
        .collect();
    if candidates.is_empty() {
        return Some(format!("kept plain: no interleaved layout for {ty}"));
    }
    let need = candidates
        .iter()
        .map(|l| l.rows_interleaved())
        .min()
        .unwrap_or(1);
    if candidates.iter().all(|l| !l.fits(ty, rows)) {
        return Some(format!("kept plain: rows {rows} not a multiple of {need}"));
    }
    Some("kept plain: no interleaved layout preferred on this CPU".into())
}

fn cache_layout(gguf: &GgufFile, name: &str) -> Result<Option<Layout>, Error> {
    let key = format!("{CACHE_LAYOUT_PREFIX}{name}");
    match gguf.get(&key) {
        None => Ok(None),
        Some(GgufValue::String(s)) => s
            .parse::<Layout>()
            .map(Some)
            .map_err(|_| Error::Format(format!("{key}: unknown layout '{s}'"))),
        Some(v) => Err(Error::Format(format!(
            "{key} must be a string, but is a {}",
            v.value_type()
        ))),
    }
}

fn verify_checksum(gguf: &GgufFile, t: &TensorInfo) -> Result<(), Error> {
    let want = recorded_checksum(gguf, t)?;
    let got = checksum64(gguf.tensor_bytes(t));
    if got != want {
        return Err(Error::Format(format!(
            "repack cache tensor '{}' is corrupted: checksum {got:016x}, expected {want:016x}",
            t.name
        )));
    }
    Ok(())
}

fn recorded_checksum(gguf: &GgufFile, t: &TensorInfo) -> Result<u64, Error> {
    let key = format!("{CACHE_FNV_PREFIX}{}", t.name);
    let want = match gguf.get(&key) {
        Some(GgufValue::U64(v)) => *v,
        Some(v) => {
            return Err(Error::Format(format!(
                "{key} must be a u64, but is a {}",
                v.value_type()
            )))
        }
        None => {
            return Err(Error::Format(format!(
                "repack cache tensor '{}' has no checksum ({key})",
                t.name
            )))
        }
    };
    Ok(want)
}

impl Model {
    /// Opens `path` with the default options (best layouts for this CPU).
    pub fn open(path: impl AsRef<Path>) -> Result<Model, Error> {
        Model::open_with(path, &OpenOptions::default())
    }

    /// Opens `path`: maps it, converts every weight tensor (in parallel over the rayon pool),
    /// releasing the mapped pages of each repacked tensor as soon as it is done.
    pub fn open_with(path: impl AsRef<Path>, options: &OpenOptions) -> Result<Model, Error> {
        let gguf = GgufFile::open(path)?;
        Model::from_gguf(gguf, options)
    }

    /// Converts the weights of an already opened file.
    pub fn from_gguf(gguf: GgufFile, options: &OpenOptions) -> Result<Model, Error> {
        let cpu = CpuFeatures::get();
        let is_cache = match gguf.get(CACHE_VERSION_KEY) {
            None => false,
            Some(GgufValue::U32(CACHE_VERSION)) => true,
            Some(v) => {
                return Err(Error::Format(format!(
                    "{CACHE_VERSION_KEY} is {v}; this qrepack reads repack caches of version \
                     {CACHE_VERSION}"
                )))
            }
        };
        let cache_cpu = gguf
            .get(CACHE_CPU_KEY)
            .and_then(|v| v.as_str())
            .unwrap_or("unknown CPU")
            .to_string();

        let (stack_plans, stacked_into) = stack::plan_stacks(&gguf, &options.stacks)?;
        let plans: Vec<Plan> = gguf
            .tensors()
            .iter()
            .map(|t| match stacked_into.get(t.name.as_str()) {
                Some(into) => Plan::Stacked(into.to_string()),
                None => plan(t),
            })
            .collect();
        let weight_total = plans.iter().filter(|p| !matches!(p, Plan::Raw(_))).count();
        let bytes_total: u64 = gguf
            .tensors()
            .iter()
            .zip(&plans)
            .filter(|(_, p)| !matches!(p, Plan::Raw(_)))
            .map(|(t, _)| t.size)
            .sum();
        let done = AtomicU64::new(0);
        let bytes_done = AtomicU64::new(0);
        let warnings = Mutex::new(Vec::new());
        let policy = options.layout;

        let build_one = |t: &TensorInfo, p: &Plan| -> Result<Built, Error> {
            let built = match *p {
                Plan::Raw(ref reason) => {
                    if is_cache && cache_layout(&gguf, &t.name)?.is_some() {
                        return Err(Error::Format(format!(
                            "repack cache tensor '{}' has a layout key but is not a weight",
                            t.name
                        )));
                    }
                    return Ok(Built::Raw(reason.clone()));
                }
                Plan::Stacked(ref into) => Built::Stacked(into.clone()),
                Plan::Matrix { rows, cols, ty } => {
                    let want = policy.choose(ty, rows, cpu);
                    let cached = if is_cache {
                        cache_layout(&gguf, &t.name)?
                    } else {
                        None
                    };
                    let tensor_err =
                        |e: Error| -> Error { Error::Format(format!("tensor '{}': {e}", t.name)) };
                    match cached {
                        Some(stored) => {
                            if stored.weight_type() != Some(ty) || !stored.fits(ty, rows) {
                                return Err(Error::Format(format!(
                                    "repack cache tensor '{}': layout {stored} does not hold \
                                     {rows} rows of {ty}",
                                    t.name
                                )));
                            }
                            let lazy = options.checksums == Checksums::OnFirstUse && stored == want;
                            if !lazy {
                                verify_checksum(&gguf, t)?;
                            }
                            let mut m =
                                QMatrix::from_packed(ty, rows, cols, stored, gguf.tensor_shared(t))
                                    .map_err(tensor_err)?;
                            if lazy {
                                m = m.with_deferred_check(&t.name, recorded_checksum(&gguf, t)?);
                            }
                            if stored == want {
                                let became = Became::Matrix {
                                    layout: stored,
                                    zero_copy: true,
                                    note: None,
                                };
                                Built::Matrix(m, became)
                            } else {
                                if let Ok(mut w) = warnings.lock() {
                                    w.push(format!(
                                        "tensor '{}': the cache stores layout {stored} (written \
                                         on {cache_cpu}), but {want} is chosen here ({}); \
                                         repacked again",
                                        t.name,
                                        cpu.describe()
                                    ));
                                }
                                let ggml = m.to_ggml_bytes();
                                drop(m);
                                let m2 = QMatrix::with_layout(ty, rows, cols, &ggml, want)
                                    .map_err(tensor_err)?;
                                let became = Became::Matrix {
                                    layout: want,
                                    zero_copy: false,
                                    note: plain_note(want, policy, ty, rows),
                                };
                                gguf.release_pages(t);
                                Built::Matrix(m2, became)
                            }
                        }
                        None if want == Layout::Plain => {
                            let m = QMatrix::from_packed(
                                ty,
                                rows,
                                cols,
                                Layout::Plain,
                                gguf.tensor_shared(t),
                            )
                            .map_err(tensor_err)?;
                            let became = Became::Matrix {
                                layout: Layout::Plain,
                                zero_copy: true,
                                note: plain_note(want, policy, ty, rows),
                            };
                            Built::Matrix(m, became)
                        }
                        None => {
                            let m = QMatrix::build_releasing(
                                ty,
                                rows,
                                cols,
                                gguf.tensor_bytes(t),
                                want,
                                cpu,
                                Some(&|off, len| gguf.release_tensor_range(t, off, len)),
                            )
                            .map_err(tensor_err)?;
                            gguf.release_pages(t);
                            let became = Became::Matrix {
                                layout: want,
                                zero_copy: false,
                                note: None,
                            };
                            Built::Matrix(m, became)
                        }
                    }
                }
                Plan::Experts { n, rows, cols, ty } => {
                    if is_cache && cache_layout(&gguf, &t.name)?.is_some() {
                        return Err(Error::Format(format!(
                            "repack cache tensor '{}': repacked experts are not supported",
                            t.name
                        )));
                    }
                    let want = policy.choose(ty, rows, cpu);
                    let e = if want == Layout::Plain {
                        QExperts::from_packed(ty, n, rows, cols, want, gguf.tensor_shared(t))
                    } else {
                        QExperts::with_layout(ty, n, rows, cols, gguf.tensor_bytes(t), want)
                    }
                    .map_err(|e| Error::Format(format!("tensor '{}': {e}", t.name)))?;
                    if want != Layout::Plain {
                        gguf.release_pages(t);
                    }
                    let became = Became::Experts {
                        layout: want,
                        n_expert: n,
                        note: plain_note(want, policy, ty, rows),
                    };
                    Built::Experts(e, became)
                }
            };
            let d = done.fetch_add(1, Ordering::Relaxed) + 1;
            let b = bytes_done.fetch_add(t.size, Ordering::Relaxed) + t.size;
            if let Some(progress) = &options.progress {
                progress(Progress {
                    tensors_done: d as usize,
                    tensors_total: weight_total,
                    bytes_done: b,
                    bytes_total,
                    current: t.name.clone(),
                });
            }
            Ok(built)
        };

        // Largest tensors first, so the pool is not left waiting on one big tensor at the end.
        let mut order: Vec<usize> = (0..plans.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(gguf.tensors().get(i).map_or(0, |t| t.size)));
        let mut results: Vec<(usize, Built)> = order
            .par_iter()
            .with_max_len(1)
            .map(|&i| {
                let (Some(t), Some(p)) = (gguf.tensors().get(i), plans.get(i)) else {
                    return Err(Error::Invalid("tensor index out of range".into()));
                };
                build_one(t, p).map(|b| (i, b))
            })
            .collect::<Result<_, _>>()?;
        results.sort_by_key(|(i, _)| *i);
        let stacks: HashMap<String, QMatrix> = stack_plans
            .par_iter()
            .with_max_len(1)
            .map(|p| {
                let m = if is_cache {
                    stack::build_stack_from_cache(&gguf, p, policy, cpu)
                } else {
                    stack::build_stack(&gguf, p, policy, cpu)
                };
                m.map(|m| (p.name.to_string(), m))
            })
            .collect::<Result<_, _>>()?;

        let mut tensors = Vec::with_capacity(results.len());
        let mut index = HashMap::with_capacity(results.len());
        let mut matrices = HashMap::new();
        let mut experts = HashMap::new();
        for ((_, built), t) in results.into_iter().zip(gguf.tensors()) {
            let became = match built {
                Built::Matrix(m, b) => {
                    matrices.insert(t.name.clone(), m);
                    b
                }
                Built::Experts(e, b) => {
                    experts.insert(t.name.clone(), e);
                    b
                }
                Built::Raw(r) => Became::Raw(r),
                Built::Stacked(into) => Became::Stacked(into),
            };
            index.insert(t.name.clone(), tensors.len());
            tensors.push(ModelTensor {
                name: t.name.clone(),
                type_id: t.type_id,
                ty: t.ty,
                dims: t.dims.clone(),
                became,
            });
        }
        if !is_cache {
            // the pages between copied tensors (each tensor kept the pages it shared with its
            // neighbours) are not needed either: only tensors read in place keep theirs
            let in_place = tensors.iter().zip(gguf.tensors()).filter(|(m, _)| {
                !matches!(
                    m.became,
                    Became::Matrix {
                        zero_copy: false,
                        ..
                    } | Became::Stacked(_)
                ) && !matches!(&m.became, Became::Experts { layout, .. } if *layout != Layout::Plain)
            });
            gguf.release_data_outside(in_place.map(|(_, t)| t));
        }
        let warnings = warnings.into_inner().unwrap_or_default();
        Ok(Model {
            gguf,
            tensors,
            index,
            matrices,
            experts,
            stacks,
            warnings,
            is_cache,
        })
    }

    /// Every tensor of the file, in file order, with what it became.
    pub fn tensors(&self) -> &[ModelTensor] {
        &self.tensors
    }
    /// One tensor's entry.
    pub fn tensor(&self, name: &str) -> Option<&ModelTensor> {
        self.tensors.get(*self.index.get(name)?)
    }
    /// The matrix made of the 2-D tensor `name`.
    pub fn matrix(&self, name: &str) -> Option<&QMatrix> {
        self.matrices.get(name)
    }
    /// The stacked matrix `name` of [`OpenOptions::stacks`].
    pub fn stack(&self, name: &str) -> Option<&QMatrix> {
        self.stacks.get(name)
    }
    /// The experts made of the 3-D tensor `name`.
    pub fn experts(&self, name: &str) -> Option<&QExperts> {
        self.experts.get(name)
    }
    /// The raw bytes of any tensor (as stored in the file: repacked for the repacked tensors of
    /// a cache).
    pub fn raw_bytes(&self, name: &str) -> Option<&[u8]> {
        self.gguf.tensor(name).map(|t| self.gguf.tensor_bytes(t))
    }
    /// The underlying file.
    pub fn gguf(&self) -> &GgufFile {
        &self.gguf
    }
    /// True when the file is a repack cache (written by [`Model::write_repacked`]).
    pub fn is_cache(&self) -> bool {
        self.is_cache
    }
    /// Warnings collected while opening (e.g. a cache made on another CPU).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Writes a repack cache: a valid GGUF file with the same metadata, tensor names, dims and
    /// type ids, in which every repacked matrix is stored in its layout (recorded under
    /// `qrepack.layout.<name>` with a checksum ([`checksum64`]) under
    /// `qrepack.checksum.<name>`), so that [`Model::open`] maps it back without repacking. Atomic (temp file + rename); an existing
    /// `out` is an error unless `overwrite`, and the model's own file is never overwritten.
    pub fn write_repacked(&self, out: &Path, overwrite: bool) -> Result<(), Error> {
        if let Some(input) = self.gguf.path() {
            if same_file(input, out) {
                return Err(Error::Invalid(format!(
                    "{} is the model's own file; write the cache elsewhere",
                    out.display()
                )));
            }
        }
        if !self.stacks.is_empty() {
            return Err(Error::Invalid(
                "a model opened with stacked matrices cannot be written as a repack cache; \
                 open it without stacks"
                    .into(),
            ));
        }
        let mut w = GgufWriter::new();
        for (k, v) in self.gguf.metadata() {
            if k.starts_with("qrepack.") {
                continue;
            }
            w.add_kv(k, v.clone())?;
        }
        w.add_kv(CACHE_VERSION_KEY, GgufValue::U32(CACHE_VERSION))?;
        w.add_kv(
            CACHE_CPU_KEY,
            GgufValue::String(CpuFeatures::get().describe()),
        )?;
        // Checksums of the repacked tensors, computed in parallel.
        let sums: Vec<(String, Layout, u64)> = self
            .gguf
            .tensors()
            .par_iter()
            .filter_map(|t| {
                let m = self.matrices.get(&t.name)?;
                (m.layout() != Layout::Plain)
                    .then(|| (t.name.clone(), m.layout(), checksum64(m.packed_bytes())))
            })
            .collect();
        for (name, layout, sum) in &sums {
            w.add_kv(
                &format!("{CACHE_LAYOUT_PREFIX}{name}"),
                GgufValue::String(layout.name().to_string()),
            )?;
            w.add_kv(&format!("{CACHE_FNV_PREFIX}{name}"), GgufValue::U64(*sum))?;
        }
        for t in self.gguf.tensors() {
            if !t.size_known() {
                return Err(Error::Unsupported(format!(
                    "tensor '{}' has type id {} whose size is unknown; it cannot be copied",
                    t.name, t.type_id
                )));
            }
            let data: &[u8] = match self.matrices.get(&t.name) {
                Some(m) => m.packed_bytes(),
                None => self.gguf.tensor_bytes(t),
            };
            w.add_tensor(&t.name, &t.dims, t.type_id, data)?;
        }
        w.write_to(out, overwrite)
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if let (Ok(ma), Ok(mb)) = (std::fs::metadata(a), std::fs::metadata(b)) {
            return ma.dev() == mb.dev() && ma.ino() == mb.ino();
        }
    }
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}
