//! Q5_1 interleaved layout `q5_1_8x8` (qrepack's own): `q5_0_8x8`'s quants with `q4_1_8x8`'s
//! minimums and activations.
//!
//! Byte layout of one packed block (192 bytes = 8 x 24, [`BlockQ5_1x8`]): the rows' f16 scales
//! `d[8]`, their f16 minimums `m[8]`, the 256 fifth bits as the eight bit planes of
//! `q5_0_8x8` (`qh[32]`: bit `t` of `qh[p]` goes to byte lane `p` of decoded vector `t`), and
//! the nibble bytes in 8-byte chunks taken round-robin from the rows (`qs[64k + 8r + i]` is
//! byte `8k + i` of row `r`), so that the AVX2 decode of `q5_0_8x8` applies unchanged.
//!
//! Arithmetic: per row and block `d_w·d_a·Σ q·a + m_w·s_a` with the exact integer `Σ q·a` of
//! the unsigned 5-bit quants and the activation block's f16 `s = d·Σ a` (Q8_1, four rows
//! interleaved in 8-byte chunks, as for `q4_1_8x8`): ggml's `vec_dot_q5_1_q8_1`.

use bytemuck::Zeroable;

use crate::blocks::{BlockQ5_1, BlockQ5_1x8};
use crate::layout::q4_1::Q8_1Interleaved;
use crate::layout::q5_0::{pack_planes, quant_in_planes, unpack_planes};
use crate::layout::{deinterleave_quants, interleave_quants, Layout, PackedLayout};
use crate::types::GgmlType;

/// The `q5_1_8x8` layout.
pub struct Q5_1_8x8;

const ROWS: usize = 8;
const CHUNK: usize = 8;

/// The unsigned 5-bit quant (0..32) of weight `i` of row `r` of a packed block.
#[inline]
pub(crate) fn packed_quant(w: &BlockQ5_1x8, r: usize, i: usize) -> u8 {
    quant_in_planes(&w.qs, &w.qh, r, i)
}

impl PackedLayout for Q5_1_8x8 {
    const LAYOUT: Layout = Layout::Q5_1_8x8;
    const WEIGHT_TYPE: GgmlType = GgmlType::Q5_1;
    const ROWS: usize = ROWS;
    const INTERLEAVE: usize = CHUNK;
    type Weight = BlockQ5_1;
    type Packed = BlockQ5_1x8;
    type Act = Q8_1Interleaved;

    fn pack(rows: &[BlockQ5_1]) -> BlockQ5_1x8 {
        let mut out = BlockQ5_1x8::zeroed();
        for (r, b) in rows.iter().enumerate() {
            out.d[r] = b.d;
            out.m[r] = b.m;
        }
        out.qh = pack_planes(std::array::from_fn(|r| u32::from_le_bytes(rows[r].qh)));
        let qs: Vec<&[u8]> = rows.iter().map(|r| &r.qs[..]).collect();
        interleave_quants(&qs, CHUNK, 0, &mut out.qs);
        out
    }

    fn unpack(p: &BlockQ5_1x8, rows: &mut [BlockQ5_1]) {
        let qh = unpack_planes(&p.qh);
        for (r, (row, h)) in rows.iter_mut().zip(qh).enumerate() {
            row.d = p.d[r];
            row.m = p.m[r];
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

    #[test]
    fn packed_quants_are_the_rows_quants_and_unpack_inverts() {
        let mut s = 7u64;
        let mut next = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 33) as u8
        };
        let rows: Vec<BlockQ5_1> = (0..ROWS)
            .map(|r| BlockQ5_1 {
                d: F16Bits::from_f32(0.01 * (r + 1) as f32),
                m: F16Bits::from_f32(-0.02 * (r + 1) as f32),
                qh: std::array::from_fn(|_| next()),
                qs: std::array::from_fn(|_| next()),
            })
            .collect();
        let p = Q5_1_8x8::pack(&rows);
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
        let mut back = vec![BlockQ5_1::zeroed(); ROWS];
        Q5_1_8x8::unpack(&p, &mut back);
        assert_eq!(back, rows);
    }
}
