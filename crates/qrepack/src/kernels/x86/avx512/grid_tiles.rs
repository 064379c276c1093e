//! Per-call tiles of the plain grid rows (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S,
//! IQ1_M) multiplied with AVX-512 VNNI: the AVX2 set's decoded blocks (`avx2::plain_tiles`,
//! decoded by `avx2::grid`) through the `maddubs` + `vpdpwssd` product of `plain_k_tiles`.
//!
//! The tile holds each weight as an unsigned byte `u`: the signed grid value plus 64 (`2..=126`,
//! the grids' largest magnitude is 62) or the IQ1 types' `8 q + δ + 9` (`0..=18`), with the
//! group scales (odd, at most 31) and the offsets `64 · scale` or `9 · scale` that come off with
//! the activations' `bsums`. Every integer is exact: a `maddubs` pair is at most
//! `2 · 126 · 128 = 32256 < 2^15`, a lane of a block's scaled sum at most
//! `4 · 2 · 32256 · 31 < 2^23`, a lane of the offset sum at most `2 · 64 · 31 · 2048 < 2^23`,
//! so their difference converts to `f32` exactly.

use crate::blocks::{BlockIq1M, BlockIq1S, BlockIq2S, BlockIq2Xs, BlockIq2Xxs, BlockIq3S};
use crate::blocks::{BlockIq3Xxs, BlockQ8K};
use crate::cpu::KernelSet;
use crate::kernel_api::Kernels;
use crate::kernels::x86::avx2::grid;
use crate::kernels::x86::avx2::plain_tiles::{make_tile_body, DecodeK};
use crate::kernels::x86::{target_entries, Avx512};

use super::plain_k_tiles::{gemm_body, vnni_tiles, Arith};

target_entries! { "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni";
    fn grid_tile<W: DecodeK>(blocks: &[W], tile: &mut [u64]) => make_tile_body::<W>;
    fn grid_tiled_gemm<W: DecodeK>(w: &[W], tile: &[u64], a: &[BlockQ8K], out: &mut [f32]) => gemm_body::<W, { Arith::Pairs as u8 }>;
}

/// The AVX-512 rows of each grid type: the AVX2 GEMV and one-quad GEMM, the VNNI tiles.
macro_rules! grid_rows {
    ($($block:ty => $ctor:ident;)*) => {$(
        #[doc = concat!("Plain `", stringify!($block), "` rows: the AVX2 GEMV and one-quad GEMM, the VNNI tiles.")]
        pub(crate) fn $ctor(token: Avx512) -> Kernels<$block, BlockQ8K, BlockQ8K> {
            Kernels {
                set: KernelSet::Avx512,
                tiled: Some(vnni_tiles(grid_tile::<$block>, grid_tiled_gemm::<$block>)),
                ..grid::$ctor(token.avx2())
            }
        }
    )*};
}

grid_rows! {
    BlockIq2Xxs => iq2_xxs_rows;
    BlockIq2Xs => iq2_xs_rows;
    BlockIq2S => iq2_s_rows;
    BlockIq3Xxs => iq3_xxs_rows;
    BlockIq3S => iq3_s_rows;
    BlockIq1S => iq1_s_rows;
    BlockIq1M => iq1_m_rows;
}
