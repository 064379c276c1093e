//! The operator API: [`QMatrix`] (one weight matrix) and [`QExperts`] (mixture of experts).

use std::fmt;

use rayon::prelude::*;

use crate::cpu::CpuFeatures;
use crate::driver::{self, Engine, Release};
use crate::error::Error;
use crate::layout::Layout;
use crate::scratch;
use crate::shared::SharedBytes;
use crate::types::GgmlType;

/// A quantized weight matrix of `rows` outputs and `cols` inputs, stored in a [`Layout`].
///
/// Built from ggml's row layout (the bytes of a GGUF tensor of shape `[cols, rows]`), repacked
/// once, then multiplied any number of times from any thread.
///
/// ```
/// use qrepack::{quantize, GgmlType, Layout, QMatrix};
/// let (rows, cols) = (8, 256);
/// let w: Vec<f32> = (0..rows * cols).map(|i| (i as f32 * 0.37).sin()).collect();
/// let bytes = quantize(GgmlType::Q4_K, &w, rows, cols).unwrap();
/// let m = QMatrix::with_layout(GgmlType::Q4_K, rows, cols, &bytes, Layout::Q4_K_8x8).unwrap();
/// let x: Vec<f32> = (0..cols).map(|i| (i as f32 * 0.11).cos()).collect();
/// let mut y = vec![0.0; rows];
/// m.matmul(&x, 1, &mut y).unwrap();
/// let exact: f32 = (0..cols).map(|k| w[k] * x[k]).sum();
/// assert!((y[0] - exact).abs() < 0.05 * exact.abs().max(1.0));
/// ```
pub struct QMatrix {
    ty: GgmlType,
    rows: usize,
    cols: usize,
    engine: Box<dyn Engine>,
    /// A checksum of the stored bytes still to be verified before the first product.
    deferred: Option<DeferredCheck>,
}

/// The checksum a repack cache recorded for a tensor, verified once, on first use.
struct DeferredCheck {
    name: String,
    expected: u64,
    verdict: std::sync::OnceLock<Result<(), String>>,
}

fn check_matrix(ty: GgmlType, rows: usize, cols: usize, data: &[u8]) -> Result<(), Error> {
    if rows == 0 || cols == 0 {
        return Err(Error::Shape(format!(
            "a matrix needs at least one row and one column, got {rows} x {cols}"
        )));
    }
    let expected = ty.matrix_bytes(rows, cols)?;
    if data.len() != expected {
        return Err(Error::Shape(format!(
            "{rows} x {cols} {ty} weights take {expected} bytes, but {} were given",
            data.len()
        )));
    }
    Ok(())
}

impl QMatrix {
    /// Builds the matrix in the best layout for this CPU, or `plain` when no interleaved layout
    /// fits the type and row count.
    pub fn new(ty: GgmlType, rows: usize, cols: usize, data: &[u8]) -> Result<QMatrix, Error> {
        let cpu = CpuFeatures::get();
        QMatrix::build(ty, rows, cols, data, Layout::best_for(ty, rows, cpu), cpu)
    }

    /// Builds the matrix in `layout`; an error when the layout does not hold `ty` or does not
    /// divide `rows`.
    pub fn with_layout(
        ty: GgmlType,
        rows: usize,
        cols: usize,
        data: &[u8],
        layout: Layout,
    ) -> Result<QMatrix, Error> {
        QMatrix::build(ty, rows, cols, data, layout, CpuFeatures::get())
    }

    /// Builds the matrix in `layout` with the kernels for `cpu` (e.g. [`CpuFeatures::scalar`] to
    /// compare SIMD against the portable kernels in one process).
    pub fn with_layout_for_cpu(
        ty: GgmlType,
        rows: usize,
        cols: usize,
        data: &[u8],
        layout: Layout,
        cpu: &CpuFeatures,
    ) -> Result<QMatrix, Error> {
        QMatrix::build(ty, rows, cols, data, layout, cpu)
    }

    /// A matrix whose bytes are already stored in `layout` (for `plain`: ggml's row layout),
    /// e.g. a tensor of a memory-mapped GGUF file or of a repack cache. The bytes are used in
    /// place, without a copy, when their alignment allows (always, for the weight layouts).
    ///
    /// ```
    /// use qrepack::{quantize, GgmlType, Layout, QMatrix, SharedBytes};
    /// let w: Vec<f32> = (0..8 * 64).map(|i| (i as f32).sin()).collect();
    /// let bytes = quantize(GgmlType::Q4_0, &w, 8, 64).unwrap();
    /// let packed = QMatrix::with_layout(GgmlType::Q4_0, 8, 64, &bytes, Layout::Q4_0_8x8).unwrap();
    /// let shared = SharedBytes::new(packed.packed_bytes().to_vec());
    /// let again = QMatrix::from_packed(GgmlType::Q4_0, 8, 64, Layout::Q4_0_8x8, shared).unwrap();
    /// assert_eq!(again.to_ggml_bytes(), bytes);
    /// ```
    pub fn from_packed(
        ty: GgmlType,
        rows: usize,
        cols: usize,
        layout: Layout,
        bytes: SharedBytes,
    ) -> Result<QMatrix, Error> {
        check_matrix(ty, rows, cols, bytes.as_ref())?;
        let engine = driver::build_packed(layout, ty, (rows, cols), bytes, CpuFeatures::get())?;
        Ok(QMatrix {
            ty,
            rows,
            cols,
            engine,
            deferred: None,
        })
    }

    /// The weight bytes exactly as stored in [`QMatrix::layout`] (what a repack cache holds).
    pub fn packed_bytes(&self) -> &[u8] {
        self.engine.packed_bytes()
    }

    fn build(
        ty: GgmlType,
        rows: usize,
        cols: usize,
        data: &[u8],
        layout: Layout,
        cpu: &CpuFeatures,
    ) -> Result<QMatrix, Error> {
        QMatrix::build_releasing(ty, rows, cols, data, layout, cpu, None)
    }

    /// [`QMatrix::with_layout`] that calls `release(offset, len)` for source bytes it has
    /// finished packing, so a caller reading from a memory map can drop those pages early.
    pub(crate) fn build_releasing(
        ty: GgmlType,
        rows: usize,
        cols: usize,
        data: &[u8],
        layout: Layout,
        cpu: &CpuFeatures,
        release: Option<&Release<'_>>,
    ) -> Result<QMatrix, Error> {
        check_matrix(ty, rows, cols, data)?;
        let engine = driver::build(layout, ty, (rows, cols), &[data], cpu, release)?;
        Ok(QMatrix {
            ty,
            rows,
            cols,
            engine,
            deferred: None,
        })
    }

    /// [`QMatrix::with_layout`] for a matrix whose ggml rows lie in several places (the
    /// tensors of a stack), one part after the other, each holding whole groups of the
    /// layout's interleaved rows: packed from where they lie, without gathering them first.
    pub(crate) fn build_parts(
        ty: GgmlType,
        (rows, cols): (usize, usize),
        parts: &[&[u8]],
        layout: Layout,
        cpu: &CpuFeatures,
    ) -> Result<QMatrix, Error> {
        if rows == 0 || cols == 0 {
            return Err(Error::Shape(format!(
                "a matrix needs at least one row and one column, got {rows} x {cols}"
            )));
        }
        let engine = driver::build(layout, ty, (rows, cols), parts, cpu, None)?;
        Ok(QMatrix {
            ty,
            rows,
            cols,
            engine,
            deferred: None,
        })
    }

    /// The layout the weights are stored in.
    pub fn layout(&self) -> Layout {
        self.engine.layout()
    }
    /// The ggml weight type.
    pub fn ty(&self) -> GgmlType {
        self.ty
    }
    /// Output features (weight rows).
    pub fn rows(&self) -> usize {
        self.rows
    }
    /// Input features (weight columns).
    pub fn cols(&self) -> usize {
        self.cols
    }
    /// The kernel family in use (`"scalar"`, `"avx2"` ...).
    pub fn kernel_name(&self) -> &'static str {
        self.engine.kernel_name()
    }
    /// Bytes of weight storage.
    pub fn stored_bytes(&self) -> usize {
        self.engine.stored_bytes()
    }

    /// `y = x W^T`: `x` holds `n` rows of `cols` activations, `y` receives `n` rows of `rows`.
    ///
    /// Groups of 4 activation rows go through the layout's GEMM, the remaining rows through GEMV;
    /// the weight rows are split over the current rayon pool in whole interleave groups.
    pub fn matmul(&self, x: &[f32], n: usize, y: &mut [f32]) -> Result<(), Error> {
        let want_x = n.checked_mul(self.cols);
        if want_x != Some(x.len()) {
            return Err(Error::Shape(format!(
                "x must hold n * cols = {n} * {} activations, but has {}",
                self.cols,
                x.len()
            )));
        }
        let want_y = n.checked_mul(self.rows);
        if want_y != Some(y.len()) {
            return Err(Error::Shape(format!(
                "y must hold n * rows = {n} * {} outputs, but has {}",
                self.rows,
                y.len()
            )));
        }
        self.verify_deferred()?;
        self.engine.matmul(x, n, y);
        Ok(())
    }

    /// Makes the first product check the stored bytes against `expected` ([`checksum64`]),
    /// and every product fail if they differ.
    ///
    /// [`checksum64`]: crate::gguf::checksum64
    pub(crate) fn with_deferred_check(mut self, name: &str, expected: u64) -> QMatrix {
        self.deferred = Some(DeferredCheck {
            name: name.to_string(),
            expected,
            verdict: std::sync::OnceLock::new(),
        });
        self
    }

    fn verify_deferred(&self) -> Result<(), Error> {
        let Some(check) = &self.deferred else {
            return Ok(());
        };
        check
            .verdict
            .get_or_init(|| {
                let got = crate::gguf::checksum64(self.engine.packed_bytes());
                if got == check.expected {
                    Ok(())
                } else {
                    Err(format!(
                        "repack cache tensor '{}' is corrupted: checksum {got:016x}, expected {:016x}",
                        check.name, check.expected
                    ))
                }
            })
            .clone()
            .map_err(Error::Format)
    }

    /// The weights in ggml's row layout, byte-identical to what was given, whatever the layout.
    pub fn to_ggml_bytes(&self) -> Vec<u8> {
        self.engine.to_ggml_bytes()
    }

    /// Row `row` of the weights in ggml's row layout (the bytes of one row of
    /// [`QMatrix::to_ggml_bytes`]), without unpacking the others: an embedding lookup in a
    /// table that is also a repacked output head. An error when `row` is out of range.
    ///
    /// ```
    /// use qrepack::{quantize, GgmlType, QMatrix};
    /// let w: Vec<f32> = (0..8 * 64).map(|i| (i % 7) as f32 - 3.0).collect();
    /// let bytes = quantize(GgmlType::Q8_0, &w, 8, 64).unwrap();
    /// let m = QMatrix::new(GgmlType::Q8_0, 8, 64, &bytes).unwrap();
    /// let row_bytes = bytes.len() / 8;
    /// assert_eq!(m.ggml_row(3).unwrap(), &bytes[3 * row_bytes..4 * row_bytes]);
    /// ```
    pub fn ggml_row(&self, row: usize) -> Result<Vec<u8>, Error> {
        if row >= self.rows {
            return Err(Error::Shape(format!(
                "row {row} of a matrix of {} rows",
                self.rows
            )));
        }
        let mut out = Vec::with_capacity(self.ty.row_bytes(self.cols)?);
        self.engine.ggml_row(row, &mut out);
        Ok(out)
    }
}

impl fmt::Debug for QMatrix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QMatrix")
            .field("ty", &self.ty)
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .field("layout", &self.layout())
            .field("kernels", &self.kernel_name())
            .finish()
    }
}

/// `n_expert` weight matrices of the same shape and type (a mixture-of-experts tensor, ggml shape
/// `[cols, rows, n_expert]`), multiplied per token with the experts the router picked.
///
/// ```
/// use qrepack::{quantize, GgmlType, QExperts, QMatrix};
/// let (experts, rows, cols) = (3, 8, 32);
/// let w: Vec<f32> = (0..experts * rows * cols).map(|i| (i as f32 * 0.3).sin()).collect();
/// let bytes = quantize(GgmlType::Q8_0, &w, experts * rows, cols).unwrap();
/// let moe = QExperts::new(GgmlType::Q8_0, experts, rows, cols, &bytes).unwrap();
/// // one token, two used experts (2 and 0), one activation row shared by both
/// let x = vec![0.25f32; cols];
/// let mut y = vec![0.0; 2 * rows];
/// moe.matmul_id(&x, 1, &[2, 0], 2, &mut y).unwrap();
/// assert!(moe.matmul_id(&x, 1, &[3, 0], 2, &mut y).is_err()); // no expert 3
/// ```
pub struct QExperts {
    ty: GgmlType,
    rows: usize,
    cols: usize,
    experts: Vec<QMatrix>,
}

impl QExperts {
    /// Builds every expert in the best layout for this CPU (or `plain`).
    pub fn new(
        ty: GgmlType,
        n_expert: usize,
        rows: usize,
        cols: usize,
        data: &[u8],
    ) -> Result<QExperts, Error> {
        let layout = Layout::best_for(ty, rows, CpuFeatures::get());
        QExperts::with_layout(ty, n_expert, rows, cols, data, layout)
    }

    /// Builds every expert in `layout`.
    pub fn with_layout(
        ty: GgmlType,
        n_expert: usize,
        rows: usize,
        cols: usize,
        data: &[u8],
        layout: Layout,
    ) -> Result<QExperts, Error> {
        if n_expert == 0 {
            return Err(Error::Shape(
                "a mixture of experts needs at least one expert".into(),
            ));
        }
        if rows == 0 || cols == 0 {
            return Err(Error::Shape(format!(
                "each expert needs at least one row and one column, got {rows} x {cols}"
            )));
        }
        let per = ty.matrix_bytes(rows, cols)?;
        let total = per.checked_mul(n_expert).ok_or_else(|| {
            Error::Shape(format!("{n_expert} experts of {per} bytes overflow usize"))
        })?;
        if data.len() != total {
            return Err(Error::Shape(format!(
                "{n_expert} experts of {rows} x {cols} {ty} take {total} bytes, but {} were given",
                data.len()
            )));
        }
        let experts = data
            .par_chunks_exact(per)
            .map(|chunk| QMatrix::with_layout(ty, rows, cols, chunk, layout))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(QExperts {
            ty,
            rows,
            cols,
            experts,
        })
    }

    /// Experts whose bytes are already stored in `layout` (for `plain`: ggml's order, e.g. a
    /// 3-D tensor of a memory-mapped GGUF file), used in place without copying.
    ///
    /// ```
    /// use qrepack::{quantize, GgmlType, Layout, QExperts, SharedBytes};
    /// let w: Vec<f32> = (0..2 * 8 * 32).map(|i| (i as f32).cos()).collect();
    /// let bytes = quantize(GgmlType::Q8_0, &w, 16, 32).unwrap();
    /// let moe = QExperts::from_packed(GgmlType::Q8_0, 2, 8, 32, Layout::Plain, SharedBytes::new(bytes)).unwrap();
    /// assert_eq!(moe.n_expert(), 2);
    /// ```
    pub fn from_packed(
        ty: GgmlType,
        n_expert: usize,
        rows: usize,
        cols: usize,
        layout: Layout,
        bytes: SharedBytes,
    ) -> Result<QExperts, Error> {
        if n_expert == 0 {
            return Err(Error::Shape(
                "a mixture of experts needs at least one expert".into(),
            ));
        }
        let per = ty.matrix_bytes(rows, cols)?;
        if Some(bytes.len()) != per.checked_mul(n_expert) {
            return Err(Error::Shape(format!(
                "{n_expert} experts of {rows} x {cols} {ty} take {per} bytes each, but {} were given",
                bytes.len()
            )));
        }
        let experts = (0..n_expert)
            .map(|e| {
                let part = bytes
                    .slice(e * per, per)
                    .ok_or_else(|| Error::Shape(format!("expert {e} lies outside the bytes")))?;
                QMatrix::from_packed(ty, rows, cols, layout, part)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(QExperts {
            ty,
            rows,
            cols,
            experts,
        })
    }

    /// The layout of the experts.
    pub fn layout(&self) -> Layout {
        self.experts[0].layout()
    }
    /// The ggml weight type.
    pub fn ty(&self) -> GgmlType {
        self.ty
    }
    /// Number of experts.
    pub fn n_expert(&self) -> usize {
        self.experts.len()
    }
    /// Rows of each expert.
    pub fn rows(&self) -> usize {
        self.rows
    }
    /// Columns of each expert.
    pub fn cols(&self) -> usize {
        self.cols
    }
    /// One expert as a matrix.
    pub fn expert(&self, e: usize) -> Option<&QMatrix> {
        self.experts.get(e)
    }

    /// Routed product. `ids`: `n_tokens x n_used` expert indices. `x`: `n_tokens x x_rows x cols`
    /// where `x_rows` is 1 (one row shared by all used experts) or `n_used` (one row per used
    /// expert). `y`: `n_tokens x n_used x rows`. The same expert may appear twice for one token.
    ///
    /// The rows routed to each expert are gathered and multiplied together, so an expert with
    /// four or more rows runs GEMM.
    pub fn matmul_id(
        &self,
        x: &[f32],
        x_rows: usize,
        ids: &[i32],
        n_used: usize,
        y: &mut [f32],
    ) -> Result<(), Error> {
        if n_used == 0 {
            return Err(Error::Shape("n_used must be at least 1".into()));
        }
        if x_rows != 1 && x_rows != n_used {
            return Err(Error::Shape(format!(
                "x_rows must be 1 or n_used ({n_used}), got {x_rows}"
            )));
        }
        if !ids.len().is_multiple_of(n_used) {
            return Err(Error::Shape(format!(
                "ids has {} entries, not a multiple of n_used = {n_used}",
                ids.len()
            )));
        }
        let n_tokens = ids.len() / n_used;
        let (cols, rows) = (self.cols, self.rows);
        if Some(x.len())
            != n_tokens
                .checked_mul(x_rows)
                .and_then(|v| v.checked_mul(cols))
        {
            return Err(Error::Shape(format!(
                "x must hold n_tokens * x_rows * cols = {n_tokens} * {x_rows} * {cols} values, but has {}",
                x.len()
            )));
        }
        if Some(y.len()) != ids.len().checked_mul(rows) {
            return Err(Error::Shape(format!(
                "y must hold n_tokens * n_used * rows = {n_tokens} * {n_used} * {rows} values, but has {}",
                y.len()
            )));
        }
        let n_expert = self.experts.len();
        // Slot lists per expert, in token order.
        let mut routed: Vec<Vec<usize>> = vec![Vec::new(); n_expert];
        for (slot, &id) in ids.iter().enumerate() {
            let e = usize::try_from(id)
                .ok()
                .filter(|&e| e < n_expert)
                .ok_or_else(|| {
                    Error::Invalid(format!(
                        "expert id {id} at token {}, slot {} is out of range 0..{n_expert}",
                        slot / n_used,
                        slot % n_used
                    ))
                })?;
            routed[e].push(slot);
        }
        // Routed rows in expert order: expert e's rows start at row `first[e]`.
        let mut first = Vec::with_capacity(n_expert + 1);
        let mut order = Vec::with_capacity(ids.len());
        for slots in &routed {
            first.push(order.len());
            order.extend_from_slice(slots);
        }
        first.push(order.len());
        // Routed inputs and outputs live in a per-thread buffer reused across calls: a fresh
        // zeroed allocation of them per call cost a tenth of a small MoE product.
        let (xe_len, ye_len) = (order.len() * cols, order.len() * rows);
        let bytes = scratch::arena_bytes::<f32>(xe_len) + scratch::arena_bytes::<f32>(ye_len);
        scratch::with_expert_arena(bytes, |arena| {
            let (xe, rest) = arena.take::<f32>(xe_len);
            let (ye, _) = rest.take::<f32>(ye_len);
            xe.par_chunks_mut(cols.max(1))
                .zip(&order)
                .for_each(|(row, &slot)| {
                    let token = slot / n_used;
                    let xr = (slot % n_used) % x_rows;
                    let start = (token * x_rows + xr) * cols;
                    row.copy_from_slice(&x[start..start + cols]);
                });
            // One expert at a time, each a GEMM over all its rows, parallel inside over whole
            // row groups: both cores stay busy however skewed the routing is, without nesting
            // pools. Gathering the inputs and scattering the outputs happen once, in parallel,
            // for all.
            for (e, expert) in self.experts.iter().enumerate() {
                let (lo, hi) = (first[e], first[e + 1]);
                if hi > lo {
                    expert.engine.matmul(
                        &xe[lo * cols..hi * cols],
                        hi - lo,
                        &mut ye[lo * rows..hi * rows],
                    );
                }
            }
            let mut position = vec![0; ids.len()];
            for (i, &slot) in order.iter().enumerate() {
                position[slot] = i;
            }
            y.par_chunks_mut(rows.max(1))
                .zip(&position)
                .for_each(|(out, &i)| out.copy_from_slice(&ye[i * rows..(i + 1) * rows]));
        });
        Ok(())
    }
}

impl fmt::Debug for QExperts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QExperts")
            .field("ty", &self.ty)
            .field("n_expert", &self.experts.len())
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .field("layout", &self.layout())
            .finish()
    }
}
