//! Q4_K interleaved layout `q4_K_8x8`.
//!
//! Eight rows' super-blocks: their scales `d` and `dmin`, then for each of the 8 sub-blocks the
//! 8 rows' 6-bit (scale, min) pairs encoded with Q4_K's own 12-byte scheme (row `r` plays the role
//! of sub-block `r`), then the quants in 8-byte chunks taken round-robin from the rows.

use bytemuck::Zeroable;

use crate::activation::Q8KInterleaved;
use crate::blocks::{k4_pack_scales, k4_scale_min, BlockQ4K, BlockQ4Kx8};
use crate::layout::{deinterleave_quants, interleave_quants, Layout, PackedLayout};
use crate::types::GgmlType;

/// The `q4_K_8x8` layout.
pub struct Q4K8x8;

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
    type Act = Q8KInterleaved;

    fn pack(rows: &[BlockQ4K]) -> BlockQ4Kx8 {
        let mut out = BlockQ4Kx8::zeroed();
        for (r, b) in rows.iter().enumerate() {
            out.d[r] = b.d;
            out.dmin[r] = b.dmin;
        }
        let row_fields: Vec<&[u8; 12]> = rows.iter().map(|b| &b.scales).collect();
        out.scales = regroup_scales(&row_fields);
        let qs: Vec<&[u8]> = rows.iter().map(|r| &r.qs[..]).collect();
        interleave_quants(&qs, 8, 0, &mut out.qs);
        out
    }

    fn unpack(p: &BlockQ4Kx8, rows: &mut [BlockQ4K]) {
        for (r, b) in rows.iter_mut().enumerate() {
            b.d = p.d[r];
            b.dmin = p.dmin[r];
            b.scales = row_scales(&p.scales, r);
        }
        let mut qs: Vec<&mut [u8]> = rows.iter_mut().map(|r| &mut r.qs[..]).collect();
        deinterleave_quants(&p.qs, 8, 0, &mut qs);
    }
}
