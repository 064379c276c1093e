//! Stacked matrices: several weight tensors of one type and width multiplied as one matrix
//! (q, k and v; gate and up), built once from the file, so that a model that fuses its
//! products holds each weight once.

// File bytes reach this module: no panicking shortcuts on them.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::HashMap;

use crate::cpu::CpuFeatures;
use crate::error::Error;
use crate::gguf::{GgufFile, TensorInfo};
use crate::layout::Layout;
use crate::matrix::QMatrix;
use crate::shared::SharedBytes;
use crate::types::GgmlType;

use super::{cache_layout, verify_checksum, LayoutPolicy};

/// Tensors to multiply as one matrix: `parts` stacked row-wise in the order given (the first
/// part's outputs first), under the new name `name`.
///
/// ```
/// use qrepack::model::Stack;
/// let qkv = Stack::new("blk.0.attn_qkv", ["blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight"]);
/// assert_eq!(qkv.parts.len(), 3);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stack {
    /// The stacked matrix's name ([`Model::stack`](super::Model::stack)); must not be a
    /// tensor of the file.
    pub name: String,
    /// The tensors, all 2-D, of one type and one column count.
    pub parts: Vec<String>,
}

impl Stack {
    /// A stack of `parts` named `name`.
    pub fn new<S: Into<String>>(
        name: impl Into<String>,
        parts: impl IntoIterator<Item = S>,
    ) -> Stack {
        Stack {
            name: name.into(),
            parts: parts.into_iter().map(Into::into).collect(),
        }
    }
}

/// A stack checked against the file: its parts, their type, width and total rows.
pub(super) struct StackPlan<'a> {
    pub name: &'a str,
    pub parts: Vec<&'a TensorInfo>,
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
}

/// Checks every stack against the file: parts exist, are 2-D, share a type and a width, and
/// belong to one stack only; stack names are new. Returns the plans and, for each part, the
/// stack it goes into.
pub(super) fn plan_stacks<'a>(
    gguf: &'a GgufFile,
    stacks: &'a [Stack],
) -> Result<(Vec<StackPlan<'a>>, HashMap<&'a str, &'a str>), Error> {
    let mut into: HashMap<&str, &str> = HashMap::new();
    let mut plans = Vec::with_capacity(stacks.len());
    for s in stacks {
        let bad = |why: String| Error::Invalid(format!("stack '{}': {why}", s.name));
        if gguf.tensor(&s.name).is_some() {
            return Err(bad("the name is a tensor of the file".into()));
        }
        if s.parts.is_empty() {
            return Err(bad("no parts".into()));
        }
        let mut parts = Vec::with_capacity(s.parts.len());
        let mut shape: Option<(GgmlType, usize)> = None;
        let mut rows = 0usize;
        for p in &s.parts {
            let t = gguf
                .tensor(p)
                .ok_or_else(|| bad(format!("no tensor '{p}'")))?;
            let (Some(ty), [cols, r]) = (t.ty, t.dims.as_slice()) else {
                return Err(bad(format!(
                    "'{p}' is not a 2-D tensor of a known type (dims {:?}, type id {})",
                    t.dims, t.type_id
                )));
            };
            let (Ok(cols), Ok(r)) = (usize::try_from(*cols), usize::try_from(*r)) else {
                return Err(bad(format!("'{p}' is too large")));
            };
            match shape {
                None => shape = Some((ty, cols)),
                Some(s0) if s0 != (ty, cols) => {
                    return Err(bad(format!(
                        "'{p}' is {ty} with {cols} columns, the first part {} with {}",
                        s0.0, s0.1
                    )))
                }
                Some(_) => {}
            }
            rows = rows
                .checked_add(r)
                .ok_or_else(|| bad("too many rows".into()))?;
            if let Some(other) = into.insert(p.as_str(), s.name.as_str()) {
                return Err(bad(format!("'{p}' is also a part of stack '{other}'")));
            }
            parts.push(t);
        }
        let Some((ty, cols)) = shape else {
            return Err(bad("no parts".into()));
        };
        plans.push(StackPlan {
            name: &s.name,
            parts,
            ty,
            rows,
            cols,
        });
    }
    Ok((plans, into))
}

/// Builds one stacked matrix from the parts' bytes in the file, then releases the parts'
/// mapped pages. When every part holds whole groups of the layout's interleaved rows (the
/// usual case: row counts are multiples of 8), the groups are packed from where they lie in
/// the file; otherwise from one temporary copy of the stacked ggml rows.
///
/// The copy is an anonymous mapping of its own rather than a heap allocation: unmapped when
/// dropped, its pages go back to the system at once, where freed heap blocks of this size
/// (tens of MB, one per layer and thread) would stay in the allocator's arenas and in the
/// process's resident memory.
pub(super) fn build_stack(
    gguf: &GgufFile,
    plan: &StackPlan<'_>,
    policy: LayoutPolicy,
    cpu: &CpuFeatures,
) -> Result<QMatrix, Error> {
    let layout = policy.choose(plan.ty, plan.rows, cpu);
    let group = layout.rows_interleaved().max(1);
    let whole_groups = plan.parts.iter().all(|t| {
        t.dims
            .get(1)
            .is_some_and(|&r| usize::try_from(r).is_ok_and(|r| r.is_multiple_of(group)))
    });
    if whole_groups {
        let parts: Vec<&[u8]> = plan.parts.iter().map(|t| gguf.tensor_bytes(t)).collect();
        let m = QMatrix::build_parts(plan.ty, (plan.rows, plan.cols), &parts, layout, cpu)
            .map_err(|e| Error::Format(format!("stack '{}': {e}", plan.name)))?;
        for t in &plan.parts {
            gguf.release_pages(t);
        }
        return Ok(m);
    }
    let total: usize = plan.parts.iter().map(|t| gguf.tensor_bytes(t).len()).sum();
    let mut bytes = memmap2::MmapMut::map_anon(total.max(1))
        .map_err(|e| Error::Io(format!("stack '{}': {e}", plan.name)))?;
    // the mapping holds `total` bytes (or 1 when that is 0), the parts' lengths summed
    let (stacked, _) = bytes.split_at_mut(total);
    let mut rest = &mut *stacked;
    for t in &plan.parts {
        let part = gguf.tensor_bytes(t);
        let (dst, tail) = rest.split_at_mut(part.len());
        dst.copy_from_slice(part);
        rest = tail;
    }
    let bytes = &*stacked;
    let m = QMatrix::build_releasing(plan.ty, plan.rows, plan.cols, bytes, layout, cpu, None)
        .map_err(|e| Error::Format(format!("stack '{}': {e}", plan.name)))?;
    for t in &plan.parts {
        gguf.release_pages(t);
    }
    Ok(m)
}

/// Builds one stacked matrix from the parts of a repack cache. Where every part is stored in
/// the layout the stack gets here, the stored bytes are put one after the other: a layout
/// keeps each group of interleaved rows together and every part holds whole groups, so that
/// is the stack repacked, without repacking. Otherwise the parts are turned back into ggml
/// rows and the stack is repacked. Each repacked part's checksum is verified here, whatever
/// [`OpenOptions::checksums`](super::OpenOptions::checksums) says: the stacked matrix has no
/// checksum of its own to check on first use.
pub(super) fn build_stack_from_cache(
    gguf: &GgufFile,
    plan: &StackPlan<'_>,
    policy: LayoutPolicy,
    cpu: &CpuFeatures,
) -> Result<QMatrix, Error> {
    let err = |e: Error| Error::Format(format!("stack '{}': {e}", plan.name));
    let want = policy.choose(plan.ty, plan.rows, cpu);
    let mut stored = Vec::with_capacity(plan.parts.len());
    for t in &plan.parts {
        let layout = cache_layout(gguf, &t.name)?.unwrap_or(Layout::Plain);
        let rows = usize::try_from(t.dims.get(1).copied().unwrap_or(0))
            .map_err(|_| err(Error::Invalid("too many rows".into())))?;
        let holds = layout == Layout::Plain || layout.weight_type() == Some(plan.ty);
        if !holds || !layout.fits(plan.ty, rows) {
            return Err(err(Error::Format(format!(
                "'{}': layout {layout} does not hold {rows} rows of {}",
                t.name, plan.ty
            ))));
        }
        if layout != Layout::Plain {
            verify_checksum(gguf, t)?;
        }
        stored.push((layout, rows));
    }
    let m = if stored.iter().all(|(l, _)| *l == want) {
        let total: usize = plan.parts.iter().map(|t| gguf.tensor_bytes(t).len()).sum();
        let mut bytes = Vec::with_capacity(total);
        for t in &plan.parts {
            bytes.extend_from_slice(gguf.tensor_bytes(t));
        }
        QMatrix::from_packed(plan.ty, plan.rows, plan.cols, want, SharedBytes::new(bytes))
            .map_err(err)?
    } else {
        let mut ggml = Vec::new();
        for (t, (layout, rows)) in plan.parts.iter().zip(&stored) {
            let part =
                QMatrix::from_packed(plan.ty, *rows, plan.cols, *layout, gguf.tensor_shared(t))
                    .map_err(err)?;
            ggml.extend_from_slice(&part.to_ggml_bytes());
        }
        QMatrix::build_releasing(plan.ty, plan.rows, plan.cols, &ggml, want, cpu, None)
            .map_err(err)?
    };
    for t in &plan.parts {
        gguf.release_pages(t);
    }
    Ok(m)
}
