//! Q5_K interleaved layouts: ggml's `q5_K_8x8` and `q5_K_8x4` (its ARM layouts,
//! `block_q5_Kx8`), and qrepack's own `q5_K_8x8_x86`.
//!
//! ggml's (`Q5K8x8`, `Q5K8x4`): `q4_K_8x8`'s scales and nibbles (the nibbles in chunks of 8 or 4
//! bytes), plus each row's 32 `qh` bytes in chunks of the same size taken round-robin from the
//! rows: bit `s` of byte `l` of row `r` is the fifth bit of weight `32 s + l`.
//!
//! qrepack's `q5_K_8x8_x86` (`Q5K8x8X86`, its AVX2/AVX-512 layout): `q4_K_8x8` plus the fifth
//! bits as bit planes.
//!
//! Byte layout of one packed block (1408 bytes = 8 x 176, [`BlockQ5Kx8`]):
//!
//! * `d[8]`, `dmin[8]`: the rows' f16 scales and minimum scales.
//! * `scales[96]`: for each of the 8 sub-blocks `j`, the 8 rows' 6-bit (scale, min) pairs encoded
//!   with Q4_K's own 12-byte scheme, row `r` playing the role of sub-block `r` (as `q4_K_8x8`).
//! * `qs[1024]`: the rows' nibble bytes in 8-byte chunks taken round-robin from the rows
//!   (`qs[64c + 8r + i]` is byte `8c + i` of row `r`). As 32-byte vectors, vector
//!   `V = 8g + 2k + h` holds bytes `32g + 8k ..+8` of rows `4h..4h + 4`: low nibbles are weights
//!   `64g + 8k + i` (sub-block `2g`), high nibbles weights `64g + 32 + 8k + i` (sub-block `2g + 1`).
//! * `qh[256]`: the fifth bits as 64 bit planes of 32 bits, one per decoded vector
//!   `D = 2V + s` (`s` = 0 for low, 1 for high nibbles): bit `D % 8` of `qh[32 (D / 8) + p]` is
//!   the fifth bit for byte lane `p` of decoded vector `D`. So one 32-byte load serves 8 decoded
//!   vectors, each extracted with a shift by `4 - D % 8` and a mask `0x10`.
//!
//! Arithmetic: as ggml's `vec_dot_q5_K_q8_K`, per row and super-block
//! `d_w·d_a·Σ_j sc_j Σ q·a - dmin_w·d_a·Σ_j m_j·(bsum_2j + bsum_2j+1)` with exact integer sums.

use bytemuck::Zeroable;

use crate::activation::{ArmQ8KInterleaved, Q8KInterleaved};
use crate::blocks::{BlockQ5K, BlockQ5Kx8};
use crate::layout::q4_k::{interleaved_index, regroup_scales, row_scales};
use crate::layout::{deinterleave_quants, interleave_quants, Layout, PackedLayout};
use crate::types::GgmlType;

/// qrepack's `q5_K_8x8_x86` layout (fifth bits as bit planes).
pub struct Q5K8x8X86;

/// ggml's Q5_K layouts, interleaved in chunks of `IL` bytes.
pub struct Q5KArm<const IL: usize>;
/// ggml's `q5_K_8x8` (i8mm on ARM).
pub type Q5K8x8 = Q5KArm<8>;
/// ggml's `q5_K_8x4` (dotprod on ARM).
pub type Q5K8x4 = Q5KArm<4>;

/// The unsigned 5-bit quant (0..32) of weight `e` of row `r` of one of ggml's blocks
/// interleaved by `il`.
#[inline]
pub(crate) fn arm_packed_quant(p: &BlockQ5Kx8, il: usize, r: usize, e: usize) -> u8 {
    let (sb, l) = (e / 32, e % 32);
    let byte = p.qs[interleaved_index(il, r, 32 * (sb / 2) + l)];
    let nibble = if sb % 2 == 0 { byte & 0x0f } else { byte >> 4 };
    nibble | (((p.qh[interleaved_index(il, r, l)] >> sb) & 1) << 4)
}

impl<const IL: usize> PackedLayout for Q5KArm<IL> {
    const LAYOUT: Layout = if IL == 4 {
        Layout::Q5_K_8x4
    } else {
        Layout::Q5_K_8x8
    };
    const WEIGHT_TYPE: GgmlType = GgmlType::Q5_K;
    const ROWS: usize = ROWS;
    const INTERLEAVE: usize = IL;
    type Weight = BlockQ5K;
    type Packed = BlockQ5Kx8;
    type Act = ArmQ8KInterleaved<IL>;

    fn pack(rows: &[BlockQ5K]) -> BlockQ5Kx8 {
        let mut out = BlockQ5Kx8::zeroed();
        for (r, b) in rows.iter().enumerate() {
            out.d[r] = b.d;
            out.dmin[r] = b.dmin;
        }
        let row_fields: Vec<&[u8; 12]> = rows.iter().map(|b| &b.scales).collect();
        out.scales = regroup_scales(&row_fields);
        let qs: Vec<&[u8]> = rows.iter().map(|r| &r.qs[..]).collect();
        interleave_quants(&qs, IL, 0, &mut out.qs);
        let qh: Vec<&[u8]> = rows.iter().map(|r| &r.qh[..]).collect();
        interleave_quants(&qh, IL, 0, &mut out.qh);
        out
    }

    fn unpack(p: &BlockQ5Kx8, rows: &mut [BlockQ5K]) {
        for (r, b) in rows.iter_mut().enumerate() {
            b.d = p.d[r];
            b.dmin = p.dmin[r];
            b.scales = row_scales(&p.scales, r);
        }
        let mut qs: Vec<&mut [u8]> = rows.iter_mut().map(|r| &mut r.qs[..]).collect();
        deinterleave_quants(&p.qs, IL, 0, &mut qs);
        let mut qh: Vec<&mut [u8]> = rows.iter_mut().map(|r| &mut r.qh[..]).collect();
        deinterleave_quants(&p.qh, IL, 0, &mut qh);
    }
}

const ROWS: usize = 8;

/// Row and weight index whose fifth bit is bit `t` of `qh[q]`.
#[inline]
fn plane_source(q: usize, t: usize) -> (usize, usize) {
    let (plane, p) = (q / 32, q % 32);
    let d = 8 * plane + t;
    let (v, s) = (d / 2, d % 2);
    let (g, k, h) = (v / 8, (v % 8) / 2, v % 2);
    (4 * h + p / 8, 64 * g + 32 * s + 8 * k + p % 8)
}

/// The unsigned 5-bit quant (0..32) of weight `w` of row `r` of a packed block.
#[inline]
pub(crate) fn packed_quant(p: &BlockQ5Kx8, r: usize, w: usize) -> u8 {
    let (g, s, l) = (w / 64, (w % 64) / 32, w % 32);
    let (k, i) = (l / 8, l % 8);
    let byte = p.qs[64 * (4 * g + k) + 8 * r + i];
    let nibble = if s == 0 { byte & 0x0f } else { byte >> 4 };
    let d = 2 * (8 * g + 2 * k + r / 4) + s;
    let lane = 8 * (r % 4) + i;
    nibble | (((p.qh[32 * (d / 8) + lane] >> (d % 8)) & 1) << 4)
}

impl PackedLayout for Q5K8x8X86 {
    const LAYOUT: Layout = Layout::Q5_K_8x8_x86;
    const WEIGHT_TYPE: GgmlType = GgmlType::Q5_K;
    const ROWS: usize = ROWS;
    const INTERLEAVE: usize = 8;
    type Weight = BlockQ5K;
    type Packed = BlockQ5Kx8;
    type Act = Q8KInterleaved;

    fn pack(rows: &[BlockQ5K]) -> BlockQ5Kx8 {
        let mut out = BlockQ5Kx8::zeroed();
        for (r, b) in rows.iter().enumerate() {
            out.d[r] = b.d;
            out.dmin[r] = b.dmin;
        }
        let row_fields: Vec<&[u8; 12]> = rows.iter().map(|b| &b.scales).collect();
        out.scales = regroup_scales(&row_fields);
        for (q, plane) in out.qh.iter_mut().enumerate() {
            for t in 0..8 {
                let (r, w) = plane_source(q, t);
                let bit = (rows[r].qh[w % 32] >> (w / 32)) & 1;
                *plane |= bit << t;
            }
        }
        let qs: Vec<&[u8]> = rows.iter().map(|r| &r.qs[..]).collect();
        interleave_quants(&qs, 8, 0, &mut out.qs);
        out
    }

    fn unpack(p: &BlockQ5Kx8, rows: &mut [BlockQ5K]) {
        for (r, b) in rows.iter_mut().enumerate() {
            b.d = p.d[r];
            b.dmin = p.dmin[r];
            b.scales = row_scales(&p.scales, r);
            b.qh = [0; 32];
        }
        for (q, &plane) in p.qh.iter().enumerate() {
            for t in 0..8 {
                let (r, w) = plane_source(q, t);
                rows[r].qh[w % 32] |= ((plane >> t) & 1) << (w / 32);
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
    fn packed_quants_are_the_rows_quants() {
        let mut s = 5u64;
        let mut next = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 33) as u8
        };
        let rows: Vec<BlockQ5K> = (0..ROWS)
            .map(|r| BlockQ5K {
                d: F16Bits::from_f32(0.01 * (r + 1) as f32),
                dmin: F16Bits::from_f32(0.002 * (r + 1) as f32),
                scales: std::array::from_fn(|_| next()),
                qh: std::array::from_fn(|_| next()),
                qs: std::array::from_fn(|_| next()),
            })
            .collect();
        let p = Q5K8x8X86::pack(&rows);
        for (r, row) in rows.iter().enumerate() {
            for w in 0..256 {
                let (j, l) = (w / 32, w % 32);
                let byte = row.qs[32 * (j / 2) + l];
                let nibble = if j % 2 == 0 { byte & 0x0f } else { byte >> 4 };
                let want = nibble | (((row.qh[l] >> j) & 1) << 4);
                assert_eq!(packed_quant(&p, r, w), want, "row {r} weight {w}");
            }
        }
        let mut back = vec![BlockQ5K::zeroed(); ROWS];
        Q5K8x8X86::unpack(&p, &mut back);
        assert_eq!(back, rows);
    }
}
