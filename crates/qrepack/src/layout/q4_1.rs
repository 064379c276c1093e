//! Q4_1 interleaved layout `q4_1_8x8` (qrepack's own), with its activation format: Q8_1, four
//! rows interleaved in 8-byte chunks ([`Q8_1Interleaved`]).
//!
//! Byte layout of one packed block (160 bytes = 8 x 20, [`BlockQ4_1x8`]): the rows' f16 scales
//! `d[8]`, their f16 minimums `m[8]`, then the nibble bytes in 8-byte chunks taken round-robin
//! from the rows (`qs[64k + 8r + i]` is byte `8k + i` of row `r`; low nibbles are weights
//! `8k + i`, high nibbles weights `16 + 8k + i`), as in `q4_0_8x8` but not xored.
//!
//! Arithmetic: per row and block `d_w·d_a·Σ q·a + m_w·s_a` with the exact integer `Σ q·a` and the
//! activation block's f16 `s = d·Σ a`, the same as ggml's `vec_dot_q4_1_q8_1`.

use bytemuck::Zeroable;

use crate::activation::{quantize_block_q8_1, ActFormat, InterleavedAct};
use crate::blocks::{BlockQ4_1, BlockQ4_1x8, BlockQ8_1, BlockQ8_1x4};
use crate::layout::{deinterleave_quants, interleave_quants, Layout, PackedLayout};
use crate::types::GgmlType;

/// The `q4_1_8x8` layout.
pub struct Q4_1_8x8;

/// Q8_1 activations, four rows interleaved in chunks of 8 bytes (row `m`'s bytes `8c..8c + 8`
/// at `32c + 8m`).
pub struct Q8_1Interleaved;

const ROWS: usize = 8;
const CHUNK: usize = 8;

impl ActFormat for Q8_1Interleaved {
    type Row = BlockQ8_1;
    type Quad = BlockQ8_1x4;
    const BLOCK: usize = 32;
    const QUAD_IS_ROWS: bool = false;

    fn quantize_row(x: &[f32], out: &mut [BlockQ8_1]) {
        for (b, xs) in out.iter_mut().zip(x.chunks_exact(32)) {
            *b = quantize_block_q8_1(xs);
        }
    }

    fn quantize_quad(x: [&[f32]; 4], out: &mut [BlockQ8_1x4]) {
        for (i, quad) in out.iter_mut().enumerate() {
            *quad = BlockQ8_1x4::zeroed();
            for (m, row) in x.iter().enumerate() {
                let b = quantize_block_q8_1(&row[i * 32..i * 32 + 32]);
                quad.d[m] = b.d;
                quad.s[m] = b.s;
                for (c, chunk) in b.qs.chunks_exact(CHUNK).enumerate() {
                    let dst = (c * 4 + m) * CHUNK;
                    quad.qs[dst..dst + CHUNK].copy_from_slice(chunk);
                }
            }
        }
    }
}

impl InterleavedAct for Q8_1Interleaved {
    fn split_quad(quad: &BlockQ8_1x4) -> [BlockQ8_1; 4] {
        let mut rows = [BlockQ8_1::zeroed(); 4];
        for (m, row) in rows.iter_mut().enumerate() {
            row.d = quad.d[m];
            row.s = quad.s[m];
            for (c, chunk) in row.qs.chunks_exact_mut(CHUNK).enumerate() {
                let src = (c * 4 + m) * CHUNK;
                chunk.copy_from_slice(&quad.qs[src..src + CHUNK]);
            }
        }
        rows
    }
}

impl PackedLayout for Q4_1_8x8 {
    const LAYOUT: Layout = Layout::Q4_1_8x8;
    const WEIGHT_TYPE: GgmlType = GgmlType::Q4_1;
    const ROWS: usize = ROWS;
    const INTERLEAVE: usize = CHUNK;
    type Weight = BlockQ4_1;
    type Packed = BlockQ4_1x8;
    type Act = Q8_1Interleaved;

    fn pack(rows: &[BlockQ4_1]) -> BlockQ4_1x8 {
        let mut out = BlockQ4_1x8::zeroed();
        for (r, b) in rows.iter().enumerate() {
            out.d[r] = b.d;
            out.m[r] = b.m;
        }
        let qs: Vec<&[u8]> = rows.iter().map(|r| &r.qs[..]).collect();
        interleave_quants(&qs, CHUNK, 0, &mut out.qs);
        out
    }

    fn unpack(p: &BlockQ4_1x8, rows: &mut [BlockQ4_1]) {
        for (r, b) in rows.iter_mut().enumerate() {
            b.d = p.d[r];
            b.m = p.m[r];
        }
        let mut qs: Vec<&mut [u8]> = rows.iter_mut().map(|r| &mut r.qs[..]).collect();
        deinterleave_quants(&p.qs, CHUNK, 0, &mut qs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::activation::ChooseQuantizer;
    use crate::cpu::CpuFeatures;

    #[test]
    fn quads_hold_the_rows_blocks() {
        let x: Vec<f32> = (0..4 * 64)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect();
        let rows: [&[f32]; 4] = [&x[0..64], &x[64..128], &x[128..192], &x[192..256]];
        let mut quads = vec![BlockQ8_1x4::zeroed(); 2];
        Q8_1Interleaved::quantize_quad(rows, &mut quads);
        for (m, row) in rows.iter().enumerate() {
            let mut single = vec![BlockQ8_1::zeroed(); 2];
            Q8_1Interleaved::quantize_row(row, &mut single);
            for (i, b) in single.iter().enumerate() {
                assert_eq!(Q8_1Interleaved::split_quad(&quads[i])[m], *b);
            }
        }
    }

    #[test]
    fn chosen_quantizer_equals_the_scalar_one() {
        let cols = 4096 + 32;
        let x: Vec<f32> = (0..4 * cols)
            .map(|i| ((i * 7919 % 2003) as f32 - 1001.0) / 13.0)
            .collect();
        let rows: [&[f32]; 4] = [0, 1, 2, 3].map(|m| &x[m * cols..(m + 1) * cols]);
        let q = Q8_1Interleaved::quantizer(CpuFeatures::get());
        let (mut fast, mut slow) = (
            vec![BlockQ8_1x4::zeroed(); cols / 32],
            vec![BlockQ8_1x4::zeroed(); cols / 32],
        );
        (q.quad)(rows, &mut fast);
        Q8_1Interleaved::quantize_quad(rows, &mut slow);
        assert_eq!(
            bytemuck::cast_slice::<_, u8>(&fast),
            bytemuck::cast_slice::<_, u8>(&slow)
        );
        let (mut fast, mut slow) = (
            vec![BlockQ8_1::zeroed(); cols / 32],
            vec![BlockQ8_1::zeroed(); cols / 32],
        );
        (q.row)(rows[1], &mut fast);
        Q8_1Interleaved::quantize_row(rows[1], &mut slow);
        assert_eq!(fast, slow);
    }
}
