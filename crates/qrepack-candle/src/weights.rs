//! The tensors of a GGUF model that are not matrix products (norms, embeddings, biases) as
//! candle [`Tensor`]s, metadata lookups, and a quantized embedding table.

use std::sync::Arc;

use candle_core::{bail, DType, Device, Result, Tensor};
use qrepack::gguf::GgufValue;
use qrepack::{dequantize, GgmlType, Model};

/// The ggml row-layout bytes of tensor `name`, its type and its dims (ggml order, `ne0`
/// first); matrices that qrepack repacked are unpacked again, so this also works on repack
/// caches.
pub fn ggml_bytes(model: &Model, name: &str) -> Result<(Vec<u8>, GgmlType, Vec<usize>)> {
    let Some(info) = model.tensor(name) else {
        bail!("the model has no tensor '{name}'");
    };
    let Some(ty) = info.ty else {
        bail!(
            "tensor '{name}' has ggml type id {}, which qrepack does not know",
            info.type_id
        );
    };
    let dims: Vec<usize> = info.dims.iter().map(|&d| d as usize).collect();
    let bytes = if let Some(m) = model.matrix(name) {
        m.to_ggml_bytes()
    } else if let Some(e) = model.experts(name) {
        (0..e.n_expert())
            .flat_map(|i| e.expert(i).map(|m| m.to_ggml_bytes()).unwrap_or_default())
            .collect()
    } else {
        match model.raw_bytes(name) {
            Some(b) => b.to_vec(),
            None => bail!("tensor '{name}' has no data"),
        }
    };
    Ok((bytes, ty, dims))
}

/// Tensor `name` of `model`, dequantized to f32, with candle's dimension order (the reverse of
/// ggml's: a GGUF `[cols, rows]` matrix becomes `[rows, cols]`).
pub fn tensor(model: &Model, name: &str, device: &Device) -> Result<Tensor> {
    let (bytes, ty, dims) = ggml_bytes(model, name)?;
    let cols = dims.first().copied().unwrap_or(1);
    let n: usize = dims.iter().product();
    let values = dequantize(ty, &bytes, n / cols.max(1), cols).map_err(candle_core::Error::wrap)?;
    let shape: Vec<usize> = dims.iter().rev().copied().collect();
    Tensor::from_vec(values, shape, device)
}

/// [`tensor`], or `None` when the model has no tensor `name`.
pub fn tensor_opt(model: &Model, name: &str, device: &Device) -> Result<Option<Tensor>> {
    match model.tensor(name) {
        None => Ok(None),
        Some(_) => tensor(model, name, device).map(Some),
    }
}

/// A metadata value of the model's GGUF file.
pub fn metadata<'a>(model: &'a Model, key: &str) -> Option<&'a GgufValue> {
    model.gguf().get(key)
}

/// A metadata value as an unsigned integer; an error naming the key when it is missing or not a
/// number.
pub fn metadata_usize(model: &Model, key: &str) -> Result<usize> {
    match metadata(model, key) {
        None => bail!("the GGUF metadata have no '{key}'"),
        Some(v) => match v.as_u64() {
            Some(x) => Ok(x as usize),
            None => bail!("the GGUF metadata key '{key}' is not an unsigned integer: {v}"),
        },
    }
}

/// A metadata value as a float; an error naming the key when it is missing or not a number.
pub fn metadata_f64(model: &Model, key: &str) -> Result<f64> {
    match metadata(model, key) {
        None => bail!("the GGUF metadata have no '{key}'"),
        Some(v) => match v.as_f64() {
            Some(x) => Ok(x),
            None => bail!("the GGUF metadata key '{key}' is not a number: {v}"),
        },
    }
}

/// The token ids of a u32 or i64 tensor of any shape, flattened (as i64, so that a negative
/// id is seen and refused by the caller).
pub(crate) fn flat_ids(ids: &Tensor) -> Result<Vec<i64>> {
    Ok(match ids.dtype() {
        DType::U32 => ids
            .flatten_all()?
            .to_vec1::<u32>()?
            .into_iter()
            .map(i64::from)
            .collect(),
        DType::I64 => ids.flatten_all()?.to_vec1::<i64>()?,
        other => bail!("token ids must be u32 or i64, got {other:?}"),
    })
}

/// A token embedding table kept quantized: each lookup dequantizes only the rows it needs
/// (a 49152 x 576 Q8_0 table stays 30 MB instead of 113 MB of f32).
#[derive(Clone)]
pub struct QEmbedding {
    table: Table,
    ty: GgmlType,
    vocab: usize,
    dim: usize,
    row_bytes: usize,
}

/// Where the embedding rows come from.
#[derive(Clone)]
enum Table {
    /// ggml rows, copied.
    Bytes(Arc<Vec<u8>>),
    /// A matrix of the model (the table doubles as the tied output head, repacked): rows are
    /// unpacked one at a time.
    Matrix { model: Arc<Model>, name: String },
    /// A tensor of the model kept as the file stores it.
    Raw { model: Arc<Model>, name: String },
}

impl std::fmt::Debug for QEmbedding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QEmbedding")
            .field("ty", &self.ty)
            .field("vocab", &self.vocab)
            .field("dim", &self.dim)
            .finish()
    }
}

impl QEmbedding {
    /// The embedding table `name` (GGUF dims `[dim, vocab]`) of `model`.
    pub fn from_model(model: &Model, name: &str) -> Result<QEmbedding> {
        let (bytes, ty, dims) = ggml_bytes(model, name)?;
        let [dim, vocab] = dims[..] else {
            bail!("embedding '{name}' must have 2 dimensions, has {dims:?}");
        };
        let row_bytes = ty.row_bytes(dim).map_err(candle_core::Error::wrap)?;
        Ok(QEmbedding {
            table: Table::Bytes(Arc::new(bytes)),
            ty,
            vocab,
            dim,
            row_bytes,
        })
    }

    /// The embedding table `name` of a shared `model`, without a copy: rows are read from the
    /// model's matrix (unpacked one by one from its layout) or from the file's bytes.
    pub fn from_shared_model(model: &Arc<Model>, name: &str) -> Result<QEmbedding> {
        let Some(info) = model.tensor(name) else {
            bail!("the model has no tensor '{name}'");
        };
        let Some(ty) = info.ty else {
            bail!(
                "tensor '{name}' has ggml type id {}, which qrepack does not know",
                info.type_id
            );
        };
        let [dim, vocab] = info.dims[..] else {
            bail!(
                "embedding '{name}' must have 2 dimensions, has {:?}",
                info.dims
            );
        };
        let (dim, vocab) = (dim as usize, vocab as usize);
        let row_bytes = ty.row_bytes(dim).map_err(candle_core::Error::wrap)?;
        let table = if model.matrix(name).is_some() {
            Table::Matrix {
                model: Arc::clone(model),
                name: name.to_string(),
            }
        } else if model
            .raw_bytes(name)
            .is_some_and(|b| b.len() == row_bytes * vocab && !model.is_cache())
        {
            Table::Raw {
                model: Arc::clone(model),
                name: name.to_string(),
            }
        } else {
            return QEmbedding::from_model(model, name);
        };
        Ok(QEmbedding {
            table,
            ty,
            vocab,
            dim,
            row_bytes,
        })
    }

    /// Row `id` (in range) in ggml's layout.
    fn row(&self, id: usize) -> std::result::Result<std::borrow::Cow<'_, [u8]>, String> {
        use std::borrow::Cow;
        let range = id * self.row_bytes..(id + 1) * self.row_bytes;
        match &self.table {
            Table::Bytes(b) => Ok(Cow::Borrowed(&b[range])),
            Table::Matrix { model, name } => {
                let m = model
                    .matrix(name)
                    .ok_or_else(|| format!("the model lost matrix '{name}'"))?;
                m.ggml_row(id).map(Cow::Owned).map_err(|e| e.to_string())
            }
            Table::Raw { model, name } => model
                .raw_bytes(name)
                .and_then(|b| b.get(range))
                .map(Cow::Borrowed)
                .ok_or_else(|| format!("tensor '{name}' has no row {id}")),
        }
    }

    /// Embedding width.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Number of tokens.
    pub fn vocab(&self) -> usize {
        self.vocab
    }

    /// Row `id` of the table as f32, into `out` (`dim` values); an error naming the id when it
    /// is outside the vocabulary.
    pub fn row_into(&self, id: usize, out: &mut [f32]) -> std::result::Result<(), String> {
        if id >= self.vocab {
            return Err(format!(
                "token id {id} is outside the vocabulary (0..{})",
                self.vocab
            ));
        }
        if out.len() != self.dim {
            return Err(format!(
                "an embedding row has {} values, not {}",
                self.dim,
                out.len()
            ));
        }
        let bytes = self.row(id)?;
        let row = dequantize(self.ty, &bytes, 1, self.dim).map_err(|e| e.to_string())?;
        out.copy_from_slice(&row);
        Ok(())
    }

    /// The rows of `ids` (u32 or i64, any shape) as f32: shape `[ids.., dim]`.
    pub fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        let flat = flat_ids(ids)?;
        let mut out = Vec::with_capacity(flat.len() * self.dim);
        for &id in &flat {
            let Some(row) = usize::try_from(id).ok().filter(|&i| i < self.vocab) else {
                bail!(
                    "token id {id} is outside the vocabulary (0..{})",
                    self.vocab
                );
            };
            let bytes = self.row(row).map_err(candle_core::Error::msg)?;
            out.extend(dequantize(self.ty, &bytes, 1, self.dim).map_err(candle_core::Error::wrap)?);
        }
        let mut shape = ids.dims().to_vec();
        shape.push(self.dim);
        Tensor::from_vec(out, shape, ids.device())
    }
}
