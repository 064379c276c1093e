//! Q4_0 interleaved layouts: `q4_0_4x4`, `q4_0_4x8`, `q4_0_8x8`. On x86 the activations of
//! `q4_0_8x8` carry their block sums (`Q8_0SumsInterleaved`) for the unsigned-nibble kernels; on
//! AArch64 they are ggml's ARM quads (`ArmQ8_0Interleaved<8>`), the bytes ggml's SVE kernels read.
//!
//! ggml stores each nibble xor 8, so a packed nibble read as a signed 4-bit number is already the
//! weight `q - 8`.

use bytemuck::Zeroable;

use crate::activation::ArmQ8_0Interleaved;
#[cfg(not(target_arch = "aarch64"))]
use crate::activation::Q8_0SumsInterleaved;
use crate::blocks::{BlockQ4_0, BlockQ4_0x4, BlockQ4_0x8};
use crate::layout::{deinterleave_quants, interleave_quants, Layout, PackedLayout};
use crate::types::GgmlType;

macro_rules! q4_0_layout {
    ($name:ident, $layout:ident, $packed:ty, $act:ty, $rows:expr, $il:expr) => {
        #[doc = concat!("The `", stringify!($layout), "` layout.")]
        pub struct $name;

        impl PackedLayout for $name {
            const LAYOUT: Layout = Layout::$layout;
            const WEIGHT_TYPE: GgmlType = GgmlType::Q4_0;
            const ROWS: usize = $rows;
            const INTERLEAVE: usize = $il;
            type Weight = BlockQ4_0;
            type Packed = $packed;
            type Act = $act;

            fn pack(rows: &[BlockQ4_0]) -> $packed {
                let mut out = <$packed>::zeroed();
                for (d, r) in out.d.iter_mut().zip(rows) {
                    *d = r.d;
                }
                let qs: Vec<&[u8]> = rows.iter().map(|r| &r.qs[..]).collect();
                interleave_quants(&qs, $il, 0x88, &mut out.qs);
                out
            }

            fn unpack(p: &$packed, rows: &mut [BlockQ4_0]) {
                for (r, d) in rows.iter_mut().zip(&p.d) {
                    r.d = *d;
                }
                let mut qs: Vec<&mut [u8]> = rows.iter_mut().map(|r| &mut r.qs[..]).collect();
                deinterleave_quants(&p.qs, $il, 0x88, &mut qs);
            }
        }
    };
}

q4_0_layout!(Q4_0_4x4, Q4_0_4x4, BlockQ4_0x4, ArmQ8_0Interleaved<4>, 4, 4);
q4_0_layout!(Q4_0_4x8, Q4_0_4x8, BlockQ4_0x4, ArmQ8_0Interleaved<8>, 4, 8);
/// The activations of `q4_0_8x8`: ggml's x86 quads with their sums on x86, ggml's ARM quads on
/// AArch64 (each build's rounding, and the bytes its kernels read).
#[cfg(not(target_arch = "aarch64"))]
type Q4_0_8x8Act = Q8_0SumsInterleaved<8>;
/// The activations of `q4_0_8x8`: ggml's x86 quads with their sums on x86, ggml's ARM quads on
/// AArch64 (each build's rounding, and the bytes its kernels read).
#[cfg(target_arch = "aarch64")]
type Q4_0_8x8Act = ArmQ8_0Interleaved<8>;

q4_0_layout!(Q4_0_8x8, Q4_0_8x8, BlockQ4_0x8, Q4_0_8x8Act, 8, 8);
