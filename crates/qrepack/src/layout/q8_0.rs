//! Q8_0 interleaved layouts: `q8_0_8x8` (qrepack's own; ggml repacks Q8_0 only on ARM): eight
//! rows, quants in 8-byte chunks taken round-robin from the rows, the eight f16 scales first; and
//! ggml's ARM layouts `q8_0_4x4` (dotprod) and `q8_0_4x8` (i8mm), four rows in 4- or 8-byte chunks.

use bytemuck::Zeroable;

use crate::activation::{ArmQ8_0Interleaved, Q8_0SumsInterleaved};
use crate::blocks::{BlockQ8_0, BlockQ8_0x4, BlockQ8_0x8};
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
    // 128 x the quant sums ride along for the kernels that bias the weights by 128.
    type Act = Q8_0SumsInterleaved<128>;

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

macro_rules! q8_0_x4_layout {
    ($name:ident, $layout:ident, $il:expr) => {
        #[doc = concat!(
            "The `", stringify!($layout), "` layout (ggml's ARM layout): four rows, quants in ",
            stringify!($il), "-byte chunks taken round-robin from the rows, the four f16 scales first."
        )]
        pub struct $name;

        impl PackedLayout for $name {
            const LAYOUT: Layout = Layout::$layout;
            const WEIGHT_TYPE: GgmlType = GgmlType::Q8_0;
            const ROWS: usize = 4;
            const INTERLEAVE: usize = $il;
            type Weight = BlockQ8_0;
            type Packed = BlockQ8_0x4;
            type Act = ArmQ8_0Interleaved<$il>;

            fn pack(rows: &[BlockQ8_0]) -> BlockQ8_0x4 {
                let mut out = BlockQ8_0x4::zeroed();
                for (d, r) in out.d.iter_mut().zip(rows) {
                    *d = r.d;
                }
                for (c, dst) in out.qs.chunks_exact_mut($il).enumerate() {
                    let base = (c / 4) * $il;
                    dst.copy_from_slice(&rows[c % 4].qs[base..base + $il]);
                }
                out
            }

            fn unpack(p: &BlockQ8_0x4, rows: &mut [BlockQ8_0]) {
                for (r, d) in rows.iter_mut().zip(&p.d) {
                    r.d = *d;
                }
                for (c, src) in p.qs.chunks_exact($il).enumerate() {
                    let base = (c / 4) * $il;
                    rows[c % 4].qs[base..base + $il].copy_from_slice(src);
                }
            }
        }
    };
}

q8_0_x4_layout!(Q8_0_4x4, Q8_0_4x4, 4);
q8_0_x4_layout!(Q8_0_4x8, Q8_0_4x8, 8);
