//! [`QLinear`] and [`QExpertsLinear`]: qrepack products as candle operations.
//!
//! Both run as candle custom operations (`apply_op1_no_bwd` / `apply_op2_no_bwd`), whose CPU
//! forward pass hands the f32 activations to [`QMatrix::matmul`] / [`QExperts::matmul_id`]. No
//! gradient is defined: these are inference layers.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use candle_core::{
    bail, CpuStorage, CustomOp1, CustomOp2, DType, Layout, Module, Result, Shape, Tensor,
};
use qrepack::{Model, QExperts, QMatrix};

/// Where a layer's weights live: owned, or inside a shared [`Model`].
enum Source<T> {
    Owned(T),
    Model {
        model: Arc<Model>,
        name: String,
    },
    /// A stacked matrix of the model ([`Model::stack`]).
    Stack {
        model: Arc<Model>,
        name: String,
    },
}

/// A linear layer without bias, `y = x W^T`, whose weights are a qrepack [`QMatrix`].
///
/// Maps an f32 tensor of shape `[.., cols]` (any number of leading dimensions, contiguous or
/// not) to `[.., rows]` on the CPU. Other dtypes and devices are an error naming the problem.
///
/// Cloning is cheap (the matrix is shared).
#[derive(Clone)]
pub struct QLinear {
    source: Arc<Source<QMatrix>>,
}

impl QLinear {
    /// A layer owning `matrix`.
    pub fn new(matrix: QMatrix) -> QLinear {
        QLinear {
            source: Arc::new(Source::Owned(matrix)),
        }
    }

    /// The layer of the 2-D weight tensor `name` of `model` (shared, no copy).
    pub fn from_model(model: &Arc<Model>, name: &str) -> Result<QLinear> {
        if model.matrix(name).is_none() {
            bail!("{}", missing(model, name, "matrix"));
        }
        Ok(QLinear {
            source: Arc::new(Source::Model {
                model: Arc::clone(model),
                name: name.to_string(),
            }),
        })
    }

    /// The layer of the stacked matrix `name` of `model` ([`Model::stack`]; shared, no copy).
    pub fn from_stack(model: &Arc<Model>, name: &str) -> Result<QLinear> {
        if model.stack(name).is_none() {
            bail!("the model has no stacked matrix '{name}'");
        }
        Ok(QLinear {
            source: Arc::new(Source::Stack {
                model: Arc::clone(model),
                name: name.to_string(),
            }),
        })
    }

    /// The qrepack matrix.
    pub fn matrix(&self) -> &QMatrix {
        match &*self.source {
            Source::Owned(m) => m,
            // `from_stack` checked the name, and a `Model`'s stacks never change.
            Source::Stack { model, name } => model
                .stack(name)
                .expect("QLinear::from_stack checked that the stack exists"),
            // `from_model` checked the name, and a `Model`'s matrices never change.
            Source::Model { model, name } => model
                .matrix(name)
                .expect("QLinear::from_model checked that the matrix exists"),
        }
    }

    /// Output features.
    pub fn rows(&self) -> usize {
        self.matrix().rows()
    }

    /// Input features.
    pub fn cols(&self) -> usize {
        self.matrix().cols()
    }
}

impl fmt::Debug for QLinear {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.matrix();
        f.debug_struct("QLinear")
            .field("ty", &m.ty())
            .field("rows", &m.rows())
            .field("cols", &m.cols())
            .field("layout", &m.layout())
            .finish()
    }
}

fn missing(model: &Model, name: &str, what: &str) -> String {
    match model.tensor(name) {
        None => format!("the model has no tensor '{name}'"),
        Some(t) => format!(
            "tensor '{name}' ({}, dims {:?}) is not a {what}: {}",
            t.type_name(),
            t.dims,
            t.became
        ),
    }
}

/// Checks what every qrepack operation needs of its input tensor.
fn check_input(what: &str, x: &Tensor) -> Result<()> {
    if !x.device().is_cpu() {
        bail!(
            "{what}: qrepack runs on the CPU, but the input is on {:?}",
            x.device().location()
        );
    }
    if x.dtype() != DType::F32 {
        bail!(
            "{what}: the input must be f32, got {:?} (convert with `to_dtype(DType::F32)`)",
            x.dtype()
        );
    }
    Ok(())
}

/// The elements of `storage` seen through `layout`, in row-major order: borrowed when they are
/// contiguous, gathered otherwise.
fn f32_elements<'a>(storage: &'a CpuStorage, layout: &Layout) -> Result<Cow<'a, [f32]>> {
    let data = storage.as_slice::<f32>()?;
    if let Some((start, end)) = layout.contiguous_offsets() {
        return Ok(Cow::Borrowed(&data[start..end]));
    }
    let dims = layout.dims();
    let stride = layout.stride();
    let n = layout.shape().elem_count();
    let mut out = Vec::with_capacity(n);
    if n == 0 {
        return Ok(Cow::Owned(out));
    }
    // Odometer over every dimension but the last, whose elements are copied in one loop.
    let rank = dims.len();
    let (last, last_stride) = match rank {
        0 => (1, 1),
        _ => (dims[rank - 1], stride[rank - 1]),
    };
    let outer = rank.saturating_sub(1);
    let mut index = vec![0usize; outer];
    let mut offset = layout.start_offset();
    loop {
        out.extend((0..last).map(|i| data[offset + i * last_stride]));
        // advance the odometer
        let mut d = outer;
        loop {
            if d == 0 {
                return Ok(Cow::Owned(out));
            }
            d -= 1;
            index[d] += 1;
            offset += stride[d];
            if index[d] < dims[d] {
                break;
            }
            offset -= stride[d] * dims[d];
            index[d] = 0;
        }
    }
}

impl Module for QLinear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        check_input("QLinear", x)?;
        let cols = self.cols();
        match x.dims().last() {
            Some(&c) if c == cols => {}
            _ => bail!(
                "QLinear: the input's last dimension must be {cols} (the matrix is {} x {cols}), \
                 got shape {:?}",
                self.rows(),
                x.dims()
            ),
        }
        x.apply_op1_no_bwd(self)
    }
}

impl CustomOp1 for QLinear {
    fn name(&self) -> &'static str {
        "qrepack-matmul"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let m = self.matrix();
        let (rows, cols) = (m.rows(), m.cols());
        let dims = layout.dims();
        if dims.last() != Some(&cols) {
            bail!("QLinear: input shape {dims:?} does not end in {cols}");
        }
        let x = f32_elements(storage, layout)?;
        let n = x.len() / cols;
        let mut y = vec![0f32; n * rows];
        if n > 0 {
            m.matmul(&x, n, &mut y).map_err(candle_core::Error::wrap)?;
        }
        let mut out = dims.to_vec();
        if let Some(last) = out.last_mut() {
            *last = rows;
        }
        Ok((CpuStorage::F32(y), Shape::from(out)))
    }
}

/// The experts of a mixture-of-experts tensor (`[cols, rows, n_expert]` in GGUF), multiplied
/// with [`QExperts::matmul_id`]: each token's rows go through the experts chosen for it.
#[derive(Clone)]
pub struct QExpertsLinear {
    source: Arc<Source<QExperts>>,
}

impl QExpertsLinear {
    /// A layer owning `experts`.
    pub fn new(experts: QExperts) -> QExpertsLinear {
        QExpertsLinear {
            source: Arc::new(Source::Owned(experts)),
        }
    }

    /// The layer of the 3-D expert tensor `name` of `model` (shared, no copy).
    pub fn from_model(model: &Arc<Model>, name: &str) -> Result<QExpertsLinear> {
        if model.experts(name).is_none() {
            bail!("{}", missing(model, name, "3-D expert tensor"));
        }
        Ok(QExpertsLinear {
            source: Arc::new(Source::Model {
                model: Arc::clone(model),
                name: name.to_string(),
            }),
        })
    }

    /// The qrepack experts.
    pub fn experts(&self) -> &QExperts {
        match &*self.source {
            Source::Owned(e) => e,
            Source::Model { model, name } => model
                .experts(name)
                .expect("QExpertsLinear::from_model checked that the experts exist"),
            Source::Stack { .. } => unreachable!("QExpertsLinear is never built from a stack"),
        }
    }

    /// `x`: `[n_tokens, cols]` (every chosen expert sees the token's row) or
    /// `[n_tokens, n_used, cols]` (one row per chosen expert); `ids`: `[n_tokens, n_used]`
    /// expert indices (u8, u32, i32 or i64). Returns `[n_tokens, n_used, rows]`.
    pub fn forward(&self, x: &Tensor, ids: &Tensor) -> Result<Tensor> {
        check_input("QExpertsLinear", x)?;
        if !ids.device().is_cpu() {
            bail!("QExpertsLinear: the expert ids must be on the CPU");
        }
        let (n_tokens, n_used) = ids.dims2()?;
        let cols = self.experts().cols();
        let ok = match *x.dims() {
            [t, c] => t == n_tokens && c == cols,
            [t, r, c] => t == n_tokens && (r == 1 || r == n_used) && c == cols,
            _ => false,
        };
        if !ok {
            bail!(
                "QExpertsLinear: x must be [{n_tokens}, {cols}] or [{n_tokens}, 1 or {n_used}, \
                 {cols}] for ids of shape {:?}, got {:?}",
                ids.dims(),
                x.dims()
            );
        }
        x.apply_op2_no_bwd(ids, self)
    }
}

impl fmt::Debug for QExpertsLinear {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = self.experts();
        f.debug_struct("QExpertsLinear")
            .field("ty", &e.ty())
            .field("n_expert", &e.n_expert())
            .field("rows", &e.rows())
            .field("cols", &e.cols())
            .field("layout", &e.layout())
            .finish()
    }
}

fn ids_as_i32(storage: &CpuStorage, layout: &Layout) -> Result<Vec<i32>> {
    fn gather<T: Copy>(
        data: &[T],
        layout: &Layout,
        f: impl Fn(T) -> Option<i32>,
    ) -> Result<Vec<i32>> {
        let (d0, d1) = layout.shape().dims2()?;
        let s = layout.stride();
        let mut out = Vec::with_capacity(d0 * d1);
        for i in 0..d0 {
            for j in 0..d1 {
                let v = data[layout.start_offset() + i * s[0] + j * s[1]];
                match f(v) {
                    Some(v) => out.push(v),
                    None => bail!("QExpertsLinear: an expert id is out of range"),
                }
            }
        }
        Ok(out)
    }
    match storage {
        CpuStorage::U8(d) => gather(d, layout, |v| Some(i32::from(v))),
        CpuStorage::U32(d) => gather(d, layout, |v| i32::try_from(v).ok()),
        CpuStorage::I32(d) => gather(d, layout, Some),
        CpuStorage::I64(d) => gather(d, layout, |v| i32::try_from(v).ok()),
        other => bail!(
            "QExpertsLinear: expert ids must be u8, u32, i32 or i64, got {:?}",
            candle_core::backend::BackendStorage::dtype(other)
        ),
    }
}

impl CustomOp2 for QExpertsLinear {
    fn name(&self) -> &'static str {
        "qrepack-matmul-id"
    }

    fn cpu_fwd(
        &self,
        xs: &CpuStorage,
        xl: &Layout,
        ids: &CpuStorage,
        il: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let e = self.experts();
        let ids = ids_as_i32(ids, il)?;
        let (n_tokens, n_used) = il.shape().dims2()?;
        let x = f32_elements(xs, xl)?;
        let x_rows = match xl.dims() {
            [_, _] => 1,
            [_, r, _] => *r,
            d => bail!("QExpertsLinear: x must have 2 or 3 dimensions, got {d:?}"),
        };
        let mut y = vec![0f32; n_tokens * n_used * e.rows()];
        if n_tokens > 0 {
            e.matmul_id(&x, x_rows, &ids, n_used, &mut y)
                .map_err(candle_core::Error::wrap)?;
        }
        Ok((
            CpuStorage::F32(y),
            Shape::from((n_tokens, n_used, e.rows())),
        ))
    }
}
