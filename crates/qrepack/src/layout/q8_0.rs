//! Q8_0 interleaved layout `q8_0_8x8` (qrepack's own; ggml repacks Q8_0 only on ARM): eight rows,
//! quants in 8-byte chunks taken round-robin from the rows, the eight f16 scales first.

use bytemuck::Zeroable;

use crate::activation::Q8_0Interleaved;
use crate::blocks::{BlockQ8_0, BlockQ8_0x8};
use crate::layout::{Layout, PackedLayout};
use crate::types::GgmlType;

/// The `q8_0_8x8` layout.
pub struct Q8_0_8x8;

const ROWS: usize = 8;
const CHUNK: usize = 8;

impl PackedLayout for Q8_0_8x8 {
    const LAYOUT: Layout = Layout::Q8_0_8x8;
    const WEIGHT_TYPE: GgmlType = GgmlType::Q8_0;
    const ROWS: usize = ROWS;
    const INTERLEAVE: usize = CHUNK;
    type Weight = BlockQ8_0;
    type Packed = BlockQ8_0x8;
    type Act = Q8_0Interleaved<8>;

    fn pack(rows: &[BlockQ8_0]) -> BlockQ8_0x8 {
        let mut out = BlockQ8_0x8::zeroed();
        for (d, r) in out.d.iter_mut().zip(rows) {
            *d = r.d;
        }
        for (c, dst) in out.qs.chunks_exact_mut(CHUNK).enumerate() {
            let base = (c / ROWS) * CHUNK;
            dst.copy_from_slice(&rows[c % ROWS].qs[base..base + CHUNK]);
        }
        out
    }

    fn unpack(p: &BlockQ8_0x8, rows: &mut [BlockQ8_0]) {
        for (r, d) in rows.iter_mut().zip(&p.d) {
            r.d = *d;
        }
        for (c, src) in p.qs.chunks_exact(CHUNK).enumerate() {
            let base = (c / ROWS) * CHUNK;
            rows[c % ROWS].qs[base..base + CHUNK].copy_from_slice(src);
        }
    }
}
