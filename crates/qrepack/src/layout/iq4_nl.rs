//! IQ4_NL interleaved layouts: `iq4_nl_4x4` and `iq4_nl_8x8` (nibbles index the non-linear
//! levels; no xor, unlike Q4_0).

use bytemuck::Zeroable;

use crate::activation::{ArmQ8_0Interleaved, Q8_0AbsInterleaved};
use crate::blocks::{BlockIq4Nl, BlockIq4Nlx4, BlockIq4Nlx8};
use crate::layout::{deinterleave_quants, interleave_quants, Layout, PackedLayout};
use crate::types::GgmlType;

macro_rules! iq4_nl_layout {
    ($name:ident, $layout:ident, $packed:ty, $act:ty, $rows:expr, $il:expr) => {
        #[doc = concat!("The `", stringify!($layout), "` layout.")]
        pub struct $name;

        impl PackedLayout for $name {
            const LAYOUT: Layout = Layout::$layout;
            const WEIGHT_TYPE: GgmlType = GgmlType::IQ4_NL;
            const ROWS: usize = $rows;
            const INTERLEAVE: usize = $il;
            type Weight = BlockIq4Nl;
            type Packed = $packed;
            type Act = $act;

            fn pack(rows: &[BlockIq4Nl]) -> $packed {
                let mut out = <$packed>::zeroed();
                for (d, r) in out.d.iter_mut().zip(rows) {
                    *d = r.d;
                }
                let qs: Vec<&[u8]> = rows.iter().map(|r| &r.qs[..]).collect();
                interleave_quants(&qs, $il, 0, &mut out.qs);
                out
            }

            fn unpack(p: &$packed, rows: &mut [BlockIq4Nl]) {
                for (r, d) in rows.iter_mut().zip(&p.d) {
                    r.d = *d;
                }
                let mut qs: Vec<&mut [u8]> = rows.iter_mut().map(|r| &mut r.qs[..]).collect();
                deinterleave_quants(&p.qs, $il, 0, &mut qs);
            }
        }
    };
}

iq4_nl_layout!(
    Iq4Nl4x4,
    IQ4_NL_4x4,
    BlockIq4Nlx4,
    ArmQ8_0Interleaved<4>,
    4,
    4
);
iq4_nl_layout!(Iq4Nl8x8, IQ4_NL_8x8, BlockIq4Nlx8, Q8_0AbsInterleaved, 8, 8);
