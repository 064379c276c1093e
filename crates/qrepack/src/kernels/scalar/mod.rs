//! The portable kernel set: the reference every SIMD set is tested against and the fallback on
//! every CPU. An interleaved layout supplies the product of one packed block with one
//! activation block ([`BlockDot`], in `layouts.rs`), and GEMV/GEMM follow from it; a plain type
//! supplies its `vec_dot` (`plain.rs`).

mod layouts;
mod nibble;
mod plain;

pub(crate) use plain::plain_kernels;

use crate::activation::InterleavedAct;
use crate::cpu::KernelSet;
use crate::layout::{Kernels, PackedLayout, Quad, Row};

/// A layout whose scalar kernel is "accumulate one block column into `ROWS` outputs".
pub(crate) trait BlockDot: PackedLayout
where
    Self::Act: InterleavedAct,
{
    /// Adds the products of block `w` (all `ROWS` rows) with activation block `a` to `acc`.
    fn block_dot(w: &Self::Packed, a: &Row<Self>, acc: &mut [f32]);
}

/// The portable kernel pair of a [`BlockDot`] layout.
pub(crate) fn kernels<L: BlockDot>() -> Kernels<L>
where
    L::Act: InterleavedAct,
{
    crate::kernel_api::Kernels::pair(KernelSet::Scalar, gemv::<L>, gemm::<L>)
}

/// GEMV from [`BlockDot`], over every row group in `w` (`a.len()` blocks each).
fn gemv<L: BlockDot>(w: &[L::Packed], a: &[Row<L>], out: &mut [f32])
where
    L::Act: InterleavedAct,
{
    out.fill(0.0);
    for (group, o) in w
        .chunks_exact(a.len().max(1))
        .zip(out.chunks_exact_mut(L::ROWS))
    {
        for (wb, ab) in group.iter().zip(a) {
            L::block_dot(wb, ab, o);
        }
    }
}

/// GEMM from [`BlockDot`]: each quad is split back into its four rows.
fn gemm<L: BlockDot>(w: &[L::Packed], a: &[Quad<L>], out: &mut [f32])
where
    L::Act: InterleavedAct,
{
    out.fill(0.0);
    let r = L::ROWS;
    for (wb, quad) in w.iter().zip(a) {
        let rows = L::Act::split_quad(quad);
        for (m, row) in rows.iter().enumerate() {
            L::block_dot(wb, row, &mut out[m * r..(m + 1) * r]);
        }
    }
}
