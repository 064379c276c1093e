//! Q4_K interleaved layouts `q4_K_8x8` and `q4_K_8x4` (ggml's `block_q4_Kx8`).
//!
//! Eight rows' super-blocks: their scales `d` and `dmin`, then for each of the 8 sub-blocks the
//! 8 rows' 6-bit (scale, min) pairs encoded with Q4_K's own 12-byte scheme (row `r` plays the role
//! of sub-block `r`), then the quants in 8-byte (`8x8`) or 4-byte (`8x4`) chunks taken
//! round-robin from the rows. ggml builds both on ARM (`8x8` with i8mm, `8x4` with dotprod) and
//! `8x8` on x86 with the same bytes; only the activations' quads differ (interleaved by 8 or 4,
//! and the x86 quads pick the sign of their scale differently, see [`ArmQ8KInterleaved`]).

use bytemuck::Zeroable;

use crate::activation::ArmQ8KInterleaved;
#[cfg(not(target_arch = "aarch64"))]
use crate::activation::Q8KInterleaved;
use crate::blocks::{k4_pack_scales, k4_scale_min, BlockQ4K, BlockQ4Kx8};
use crate::layout::{deinterleave_quants, interleave_quants, Layout, PackedLayout};
use crate::types::GgmlType;

/// The `q4_K_8x8` layout.
pub struct Q4K8x8;
/// The `q4_K_8x4` layout (ggml's dot-product layout on ARM).
pub struct Q4K8x4;

/// Index in an 8-row interleaved quant array (chunks of `il` bytes taken round-robin from the
/// rows) of byte `j` of row `r`.
#[inline]
pub(crate) fn interleaved_index(il: usize, r: usize, j: usize) -> usize {
    (j / il) * 8 * il + r * il + j % il
}

/// The 4-bit quant of weight `e` (0..256) of row `r` in a `block_q4_Kx8` interleaved by `il`.
#[inline]
pub(crate) fn packed_quant(qs: &[u8; 1024], il: usize, r: usize, e: usize) -> u8 {
    let (sb, l) = (e / 32, e % 32);
    let byte = qs[interleaved_index(il, r, 32 * (sb / 2) + l)];
    if sb % 2 == 0 {
        byte & 0x0f
    } else {
        byte >> 4
    }
}

fn pack_by(rows: &[BlockQ4K], il: usize) -> BlockQ4Kx8 {
    let mut out = BlockQ4Kx8::zeroed();
    for (r, b) in rows.iter().enumerate() {
        out.d[r] = b.d;
        out.dmin[r] = b.dmin;
    }
    let row_fields: Vec<&[u8; 12]> = rows.iter().map(|b| &b.scales).collect();
    out.scales = regroup_scales(&row_fields);
    let qs: Vec<&[u8]> = rows.iter().map(|r| &r.qs[..]).collect();
    interleave_quants(&qs, il, 0, &mut out.qs);
    out
}

fn unpack_by(p: &BlockQ4Kx8, rows: &mut [BlockQ4K], il: usize) {
    for (r, b) in rows.iter_mut().enumerate() {
        b.d = p.d[r];
        b.dmin = p.dmin[r];
        b.scales = row_scales(&p.scales, r);
    }
    let mut qs: Vec<&mut [u8]> = rows.iter_mut().map(|r| &mut r.qs[..]).collect();
    deinterleave_quants(&p.qs, il, 0, &mut qs);
}

/// The (scale, min) of sub-block `sb` of row `r` in a packed block.
#[inline]
pub(crate) fn packed_scale_min(scales: &[u8; 96], sb: usize, r: usize) -> (u8, u8) {
    let mut group = [0u8; 12];
    group.copy_from_slice(&scales[sb * 12..sb * 12 + 12]);
    k4_scale_min(&group, r)
}

/// The 8 rows' 12-byte scale fields regrouped per sub-block (shared by q4_K_8x8 and q5_K_8x8).
pub(crate) fn regroup_scales(rows: &[&[u8; 12]]) -> [u8; 96] {
    let mut out = [0u8; 96];
    for sb in 0..8 {
        let mut s = [0u8; 8];
        let mut m = [0u8; 8];
        for (r, scales) in rows.iter().enumerate() {
            (s[r], m[r]) = k4_scale_min(scales, sb);
        }
        out[sb * 12..sb * 12 + 12].copy_from_slice(&k4_pack_scales(&s, &m));
    }
    out
}

/// Row `r`'s own 12-byte scale field back from the regrouped form.
pub(crate) fn row_scales(scales: &[u8; 96], r: usize) -> [u8; 12] {
    let mut s = [0u8; 8];
    let mut m = [0u8; 8];
    for sb in 0..8 {
        (s[sb], m[sb]) = packed_scale_min(scales, sb, r);
    }
    k4_pack_scales(&s, &m)
}

impl PackedLayout for Q4K8x8 {
    const LAYOUT: Layout = Layout::Q4_K_8x8;
    const WEIGHT_TYPE: GgmlType = GgmlType::Q4_K;
    const ROWS: usize = 8;
    const INTERLEAVE: usize = 8;
    type Weight = BlockQ4K;
    type Packed = BlockQ4Kx8;
    /// ggml's x86 quads on x86, its ARM quads on ARM: the bytes each build's kernels read.
    #[cfg(not(target_arch = "aarch64"))]
    type Act = Q8KInterleaved;
    /// ggml's x86 quads on x86, its ARM quads on ARM: the bytes each build's kernels read.
    #[cfg(target_arch = "aarch64")]
    type Act = ArmQ8KInterleaved<8>;

    fn pack(rows: &[BlockQ4K]) -> BlockQ4Kx8 {
        pack_by(rows, 8)
    }

    fn unpack(p: &BlockQ4Kx8, rows: &mut [BlockQ4K]) {
        unpack_by(p, rows, 8)
    }
}

impl PackedLayout for Q4K8x4 {
    const LAYOUT: Layout = Layout::Q4_K_8x4;
    const WEIGHT_TYPE: GgmlType = GgmlType::Q4_K;
    const ROWS: usize = 8;
    const INTERLEAVE: usize = 4;
    type Weight = BlockQ4K;
    type Packed = BlockQ4Kx8;
    type Act = ArmQ8KInterleaved<4>;

    fn pack(rows: &[BlockQ4K]) -> BlockQ4Kx8 {
        pack_by(rows, 4)
    }

    fn unpack(p: &BlockQ4Kx8, rows: &mut [BlockQ4K]) {
        unpack_by(p, rows, 4)
    }
}
