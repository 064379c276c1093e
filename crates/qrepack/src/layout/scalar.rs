//! Portable kernels shared by the interleaved layouts: a layout supplies the product of one
//! packed block with one activation block, and GEMV/GEMM follow from it.

use crate::activation::{ActFormat, InterleavedAct};
use crate::layout::{GemmFn, GemvFn, Kernels, PackedLayout};

type Row<L> = <<L as PackedLayout>::Act as ActFormat>::Row;
type Quad<L> = <<L as PackedLayout>::Act as ActFormat>::Quad;

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
    Kernels {
        name: "scalar",
        gemv: gemv::<L>,
        gemm: gemm::<L>,
        tiled: None,
    }
}

/// The SIMD kernels a selector found for this CPU (with their name), else the portable pair.
pub(crate) fn simd_or_scalar<L: BlockDot>(
    simd: Option<(&'static str, GemvFn<L>, GemmFn<L>)>,
) -> Kernels<L>
where
    L::Act: InterleavedAct,
{
    match simd {
        Some((name, gemv, gemm)) => Kernels {
            name,
            gemv,
            gemm,
            tiled: None,
        },
        None => kernels::<L>(),
    }
}

/// GEMV from [`BlockDot`], over every row group in `w` (`a.len()` blocks each).
pub(crate) fn gemv<L: BlockDot>(w: &[L::Packed], a: &[Row<L>], out: &mut [f32])
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
pub(crate) fn gemm<L: BlockDot>(w: &[L::Packed], a: &[Quad<L>], out: &mut [f32])
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
