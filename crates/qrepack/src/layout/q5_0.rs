//! Q5_0 interleaved layout `q5_0_8x8` (qrepack's own): eight rows of 32 weights, laid out so
//! that AVX2 decodes a row group with shifts and masks only.
//!
//! Byte layout of one packed block (176 bytes = 8 x 22, [`BlockQ5_0x8`]):
//!
//! * `d[8]`: the rows' f16 scales.
//! * `qs[128]`: the rows' nibble bytes in 8-byte chunks taken round-robin from the rows, as in
//!   `q4_0_8x8` but not xored: `qs[64k + 8r + i]` is byte `8k + i` of row `r` (`k` in 0..2). Read
//!   as four 32-byte vectors, vector `v = 2k + h` holds bytes `8k..8k + 8` of rows `4h..4h + 4`;
//!   its low nibbles are weights `8k + i`, its high nibbles weights `16 + 8k + i`.
//! * `qh[32]`: the 256 fifth bits as eight bit planes, one per decoded 32-byte vector: bit `t` of
//!   `qh[p]` is the fifth bit for byte lane `p` of decoded vector `t = 2v + s` (`s` = 0 for the low
//!   nibbles of vector `v`, 1 for the high ones), i.e. the fifth bit of weight
//!   `8k + p % 8 + 16s` of row `4h + p / 8`. Shifting the 32 bytes by `4 - t` bits and masking
//!   with `0x10` puts the fifth bit of all 32 lanes of vector `t` in place at once.
//!
//! Arithmetic: per row and block `Σ (q - 16)·a` in exact integers scaled by `d_w·d_a`, the same
//! as ggml's `vec_dot_q5_0_q8_0` (activation: Q8_0, four rows interleaved in 8-byte chunks, each
//! quad block also carrying `16 x` its rows' quant sums for the unsigned GEMM:
//! `Q8_0SumsInterleaved<16>`).

use bytemuck::Zeroable;

use crate::activation::Q8_0SumsInterleaved;
use crate::blocks::{BlockQ5_0, BlockQ5_0x8};
use crate::layout::{deinterleave_quants, interleave_quants, Layout, PackedLayout};
use crate::types::GgmlType;

/// The `q5_0_8x8` layout.
pub struct Q5_0_8x8;

const ROWS: usize = 8;
const CHUNK: usize = 8;

/// Row and weight index whose fifth bit is bit `t` of `qh[p]`.
#[inline]
fn plane_source(p: usize, t: usize) -> (usize, usize) {
    let (v, s) = (t / 2, t % 2);
    let (k, h) = (v / 2, v % 2);
    (4 * h + p / 8, 8 * k + p % 8 + 16 * s)
}

/// The unsigned 5-bit quant (0..32) of weight `i` of row `r` of a packed block.
#[inline]
pub(crate) fn packed_quant(w: &BlockQ5_0x8, r: usize, i: usize) -> u8 {
    quant_in_planes(&w.qs, &w.qh, r, i)
}

/// The unsigned 5-bit quant of weight `i` of row `r` from interleaved nibbles and bit planes
/// (shared with `q5_1_8x8`).
#[inline]
pub(crate) fn quant_in_planes(qs: &[u8; 128], qh: &[u8; 32], r: usize, i: usize) -> u8 {
    let (s, k) = (i / 16, (i % 16) / 8);
    let byte = qs[64 * k + 8 * r + i % 8];
    let nibble = if s == 0 { byte & 0x0f } else { byte >> 4 };
    let t = 2 * (2 * k + r / 4) + s;
    let p = 8 * (r % 4) + i % 8;
    nibble | (((qh[p] >> t) & 1) << 4)
}

/// The eight rows' fifth-bit words (`qh` of each row) as the 32 bit planes.
pub(crate) fn pack_planes(qh: [u32; ROWS]) -> [u8; 32] {
    let mut planes = [0u8; 32];
    for (p, plane) in planes.iter_mut().enumerate() {
        for t in 0..8 {
            let (r, i) = plane_source(p, t);
            *plane |= (((qh[r] >> i) & 1) as u8) << t;
        }
    }
    planes
}

/// Exact inverse of [`pack_planes`].
pub(crate) fn unpack_planes(planes: &[u8; 32]) -> [u32; ROWS] {
    let mut qh = [0u32; ROWS];
    for (pi, &plane) in planes.iter().enumerate() {
        for t in 0..8 {
            let (r, i) = plane_source(pi, t);
            qh[r] |= (((plane >> t) & 1) as u32) << i;
        }
    }
    qh
}

impl PackedLayout for Q5_0_8x8 {
    const LAYOUT: Layout = Layout::Q5_0_8x8;
    const WEIGHT_TYPE: GgmlType = GgmlType::Q5_0;
    const ROWS: usize = ROWS;
    const INTERLEAVE: usize = CHUNK;
    type Weight = BlockQ5_0;
    type Packed = BlockQ5_0x8;
    type Act = Q8_0SumsInterleaved<16>;

    fn pack(rows: &[BlockQ5_0]) -> BlockQ5_0x8 {
        let mut out = BlockQ5_0x8::zeroed();
        for (d, r) in out.d.iter_mut().zip(rows) {
            *d = r.d;
        }
        out.qh = pack_planes(std::array::from_fn(|r| u32::from_le_bytes(rows[r].qh)));
        let qs: Vec<&[u8]> = rows.iter().map(|r| &r.qs[..]).collect();
        interleave_quants(&qs, CHUNK, 0, &mut out.qs);
        out
    }

    fn unpack(p: &BlockQ5_0x8, rows: &mut [BlockQ5_0]) {
        let qh = unpack_planes(&p.qh);
        for ((row, d), h) in rows.iter_mut().zip(&p.d).zip(qh) {
            row.d = *d;
            row.qh = h.to_le_bytes();
        }
        let mut qs: Vec<&mut [u8]> = rows.iter_mut().map(|r| &mut r.qs[..]).collect();
        deinterleave_quants(&p.qs, CHUNK, 0, &mut qs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blocks::F16Bits;

    fn rows(seed: u64) -> Vec<BlockQ5_0> {
        let mut s = seed;
        let mut next = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 33) as u8
        };
        (0..ROWS)
            .map(|r| BlockQ5_0 {
                d: F16Bits::from_f32(0.01 * (r + 1) as f32),
                qh: std::array::from_fn(|_| next()),
                qs: std::array::from_fn(|_| next()),
            })
            .collect()
    }

    #[test]
    fn packed_quants_are_the_rows_quants() {
        let rows = rows(3);
        let p = Q5_0_8x8::pack(&rows);
        for (r, row) in rows.iter().enumerate() {
            let qh = u32::from_le_bytes(row.qh);
            for i in 0..32 {
                let nibble = if i < 16 {
                    row.qs[i] & 0x0f
                } else {
                    row.qs[i - 16] >> 4
                };
                let want = nibble | ((((qh >> i) & 1) as u8) << 4);
                assert_eq!(packed_quant(&p, r, i), want, "row {r} weight {i}");
            }
        }
        let mut back = vec![BlockQ5_0::zeroed(); ROWS];
        Q5_0_8x8::unpack(&p, &mut back);
        assert_eq!(back, rows);
    }

    #[test]
    fn every_plane_bit_has_one_source() {
        let mut seen = [[false; 32]; ROWS];
        for p in 0..32 {
            for t in 0..8 {
                let (r, i) = plane_source(p, t);
                assert!(!seen[r][i]);
                seen[r][i] = true;
            }
        }
    }
}
