//! IQ4_NL interleaved layouts: `iq4_nl_4x4` and `iq4_nl_8x8` (nibbles index the non-linear
//! levels; no xor, unlike Q4_0).

use bytemuck::Zeroable;

use crate::activation::{Q8_0AbsInterleaved, Q8_0Interleaved};
use crate::blocks::{BlockIq4Nl, BlockIq4Nlx4, BlockIq4Nlx8, BlockQ8_0, BlockQ8_0x4Abs};
use crate::cpu::CpuFeatures;
use crate::layout::avx2_nibble;
use crate::layout::nibble::{self, IQ4NL_NIBBLE};
use crate::layout::scalar::{self, BlockDot};
use crate::layout::{deinterleave_quants, interleave_quants, Kernels, Layout, PackedLayout};
use crate::types::GgmlType;

macro_rules! iq4_nl_layout {
    ($name:ident, $layout:ident, $packed:ty, $act:ty, $rows:expr, $il:expr, $pref:expr, $simd:expr) => {
        #[doc = concat!("The `", stringify!($layout), "` layout.")]
        pub struct $name;

        impl BlockDot for $name {
            fn block_dot(w: &$packed, a: &BlockQ8_0, acc: &mut [f32]) {
                nibble::block_dot::<$rows, $il>(&IQ4NL_NIBBLE, &w.d, &w.qs, a, acc)
            }
        }

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

            fn scalar_kernels() -> Kernels<Self> {
                scalar::kernels()
            }

            fn kernels(cpu: &CpuFeatures) -> Kernels<Self> {
                scalar::simd_or_scalar($simd(cpu))
            }

            fn preference(cpu: &CpuFeatures) -> Option<u32> {
                $pref(cpu)
            }
        }
    };
}

iq4_nl_layout!(
    Iq4Nl4x4,
    IQ4_NL_4x4,
    BlockIq4Nlx4,
    Q8_0Interleaved<4>,
    4,
    4,
    |_: &CpuFeatures| None,
    |_: &CpuFeatures| None
);
iq4_nl_layout!(
    Iq4Nl8x8,
    IQ4_NL_8x8,
    BlockIq4Nlx8,
    Q8_0AbsInterleaved,
    8,
    8,
    |_: &CpuFeatures| Some(10),
    |cpu: &CpuFeatures| avx2_nibble::kernels::<BlockIq4Nlx8, BlockQ8_0x4Abs>(cpu)
);
