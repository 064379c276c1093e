//! Q2_K interleaved layout `q2_K_8x8` (ggml's `block_q2_Kx8`, which ggml picks on AVX-512).
//!
//! Byte layout of one packed block (672 bytes = 8 x 84, [`BlockQ2Kx8`]):
//!
//! * `d[8]`, `dmin[8]`: the rows' f16 scales and minimum scales.
//! * `scales[128]`: the rows' 16 (scale, min) bytes (low nibble the 4-bit scale of a 16-weight
//!   group, high nibble its min) regrouped so that one 16-byte run serves all rows for two
//!   groups: `scales[16p + 2r + h]` is byte `2p + h` of row `r`.
//! * `qs[512]`: the rows' 64 quant bytes in 8-byte chunks taken round-robin from the rows:
//!   `qs[64k + 8r + i]` is byte `8k + i` of row `r`. Q2_K's byte `b` holds, in bits `2s..2s+2`,
//!   weight `128 (b / 32) + 32 s + b % 32`, so the 64 bytes of chunk row `k` hold, for each
//!   shift `s`, 8 consecutive weights of every row, all in group `8 (k / 4) + 2 s + (k % 4) / 2`.
//!
//! Arithmetic: as ggml's `vec_dot_q2_K_q8_K`, per row and super-block
//! `d_w·d_a·Σ_g sc_g Σ q·a - dmin_w·d_a·Σ_g m_g·bsum_g` with exact integer sums.

use bytemuck::Zeroable;

use crate::activation::Q8KInterleaved;
use crate::blocks::{BlockQ2K, BlockQ2Kx8};
use crate::layout::{deinterleave_quants, interleave_quants, Layout, PackedLayout};
use crate::types::GgmlType;

/// The `q2_K_8x8` layout.
pub struct Q2K8x8;

const ROWS: usize = 8;

/// Index in `scales` of (scale, min) byte `g` (the 16-weight group) of row `r`.
#[inline]
pub(crate) fn scale_index(r: usize, g: usize) -> usize {
    16 * (g / 2) + 2 * r + g % 2
}

/// The 2-bit quant of weight `e` (0..256) of row `r` in a packed block.
#[inline]
pub(crate) fn packed_quant(p: &BlockQ2Kx8, r: usize, e: usize) -> u8 {
    let (half, s, l) = (e / 128, (e % 128) / 32, e % 32);
    let b = 32 * half + l;
    (p.qs[64 * (b / 8) + 8 * r + b % 8] >> (2 * s)) & 3
}

impl PackedLayout for Q2K8x8 {
    const LAYOUT: Layout = Layout::Q2_K_8x8;
    const WEIGHT_TYPE: GgmlType = GgmlType::Q2_K;
    const ROWS: usize = ROWS;
    const INTERLEAVE: usize = 8;
    type Weight = BlockQ2K;
    type Packed = BlockQ2Kx8;
    /// ggml's x86 quads: its only kernels for this layout are x86 ones.
    type Act = Q8KInterleaved;

    fn pack(rows: &[BlockQ2K]) -> BlockQ2Kx8 {
        let mut out = BlockQ2Kx8::zeroed();
        for (r, b) in rows.iter().enumerate() {
            out.d[r] = b.d;
            out.dmin[r] = b.dmin;
            for (g, &s) in b.scales.iter().enumerate() {
                out.scales[scale_index(r, g)] = s;
            }
        }
        let qs: Vec<&[u8]> = rows.iter().map(|r| &r.qs[..]).collect();
        interleave_quants(&qs, 8, 0, &mut out.qs);
        out
    }

    fn unpack(p: &BlockQ2Kx8, rows: &mut [BlockQ2K]) {
        for (r, b) in rows.iter_mut().enumerate() {
            b.d = p.d[r];
            b.dmin = p.dmin[r];
            for (g, s) in b.scales.iter_mut().enumerate() {
                *s = p.scales[scale_index(r, g)];
            }
        }
        let mut qs: Vec<&mut [u8]> = rows.iter_mut().map(|r| &mut r.qs[..]).collect();
        deinterleave_quants(&p.qs, 8, 0, &mut qs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blocks::F16Bits;

    #[test]
    fn packed_quants_and_scales_are_the_rows() {
        let mut s = 11u64;
        let mut next = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 33) as u8
        };
        let rows: Vec<BlockQ2K> = (0..ROWS)
            .map(|r| BlockQ2K {
                scales: std::array::from_fn(|_| next()),
                qs: std::array::from_fn(|_| next()),
                d: F16Bits::from_f32(0.01 * (r + 1) as f32),
                dmin: F16Bits::from_f32(0.003 * (r + 1) as f32),
            })
            .collect();
        let p = Q2K8x8::pack(&rows);
        for (r, row) in rows.iter().enumerate() {
            for e in 0..256 {
                let (half, s, l) = (e / 128, (e % 128) / 32, e % 32);
                let want = (row.qs[32 * half + l] >> (2 * s)) & 3;
                assert_eq!(packed_quant(&p, r, e), want, "row {r} weight {e}");
            }
            for g in 0..16 {
                assert_eq!(p.scales[scale_index(r, g)], row.scales[g]);
            }
        }
        let mut back = vec![BlockQ2K::zeroed(); ROWS];
        Q2K8x8::unpack(&p, &mut back);
        assert_eq!(back, rows);
    }
}
