//! MXFP4 interleaved layouts: `mxfp4_4x4` (ggml's NEON dot-product layout) and `mxfp4_8x8`
//! (its AVX2 layout). The bytes are those of IQ4_NL's layouts with an E8M0 exponent per row in
//! place of the f16 scale: nibbles index the doubled E2M1 values, and are stored as they are.

use bytemuck::Zeroable;

use crate::activation::{ArmQ8_0Interleaved, Q8_0SumsInterleaved};
use crate::blocks::{BlockMxfp4, BlockMxfp4x4, BlockMxfp4x8};
use crate::layout::{deinterleave_quants, interleave_quants, Layout, PackedLayout};
use crate::types::GgmlType;

macro_rules! mxfp4_layout {
    ($name:ident, $layout:ident, $packed:ty, $act:ty, $rows:expr, $il:expr) => {
        #[doc = concat!("The `", stringify!($layout), "` layout.")]
        pub struct $name;

        impl PackedLayout for $name {
            const LAYOUT: Layout = Layout::$layout;
            const WEIGHT_TYPE: GgmlType = GgmlType::MXFP4;
            const ROWS: usize = $rows;
            const INTERLEAVE: usize = $il;
            type Weight = BlockMxfp4;
            type Packed = $packed;
            type Act = $act;

            fn pack(rows: &[BlockMxfp4]) -> $packed {
                let mut out = <$packed>::zeroed();
                for (e, r) in out.e.iter_mut().zip(rows) {
                    *e = r.e;
                }
                let qs: Vec<&[u8]> = rows.iter().map(|r| &r.qs[..]).collect();
                interleave_quants(&qs, $il, 0, &mut out.qs);
                out
            }

            fn unpack(p: &$packed, rows: &mut [BlockMxfp4]) {
                for (r, e) in rows.iter_mut().zip(&p.e) {
                    r.e = *e;
                }
                let mut qs: Vec<&mut [u8]> = rows.iter_mut().map(|r| &mut r.qs[..]).collect();
                deinterleave_quants(&p.qs, $il, 0, &mut qs);
            }
        }
    };
}

mxfp4_layout!(
    Mxfp4_4x4,
    MXFP4_4x4,
    BlockMxfp4x4,
    ArmQ8_0Interleaved<4>,
    4,
    4
);
mxfp4_layout!(
    Mxfp4_8x8,
    MXFP4_8x8,
    BlockMxfp4x8,
    Q8_0SumsInterleaved<128>,
    8,
    8
);
