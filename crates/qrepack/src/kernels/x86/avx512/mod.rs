//! The AVX-512 kernel set (F, BW, VL and VNNI): the 8x8 layouts of 32-weight blocks (Q4_0,
//! IQ4_NL, MXFP4, Q5_0, Q8_0) with 512-bit `vpdpbusd` on the stored blocks (`nibble.rs`) and, from a
//! few quads on, on per-call tiles of 16 rows, one row per lane (`rows16.rs`); the K-quant 8x8
//! layouts the same way (`k_gemv.rs` on the stored blocks, `k_rows16.rs` tiles, scales from
//! `k_scales.rs`); a 512-bit Q6_K GEMV (`q6_k_gemv.rs`). The Q4_1 and Q6_K GEMMs are the AVX2
//! bodies compiled with AVX-512 VL, which gives the compiler 32 vector registers (no
//! accumulator spills); the Q4_1 GEMV is the AVX2 one. F16 rows of the plain layout are
//! widened and multiplied in 512-bit `f32` vectors (`plain_f16.rs`). Plain grid, ternary, NVFP4
//! and Q1_0 rows take 16-row per-call tiles too (`grid_tiles.rs`, `q8_0_tiles.rs`).
//!
//! The GEMVs here ask for the weights 16 KiB ahead into L2 (`kernel_api::prefetch_l2`).

pub(crate) mod grid_gemv;
pub(crate) mod grid_tiles;
mod k_gemv;
mod k_rows16;
mod k_scales;
mod lanes;
mod nibble;
pub(crate) mod nvfp4_rows;
pub(crate) mod plain_f16;
pub(crate) mod plain_k_tiles;
pub(crate) mod q1_0_rows;
pub(crate) mod q2_k;
mod q6_k_gemv;
pub(crate) mod q8_0_tiles;
mod rows16;
pub(crate) mod tq1_0_rows;

use crate::blocks::{
    BlockQ4Kx8, BlockQ4_0x8, BlockQ5_0x8, BlockQ6Kx8, BlockQ8K, BlockQ8Kx4, BlockQ8_0,
    BlockQ8_0x4Sums, BlockQ8_0x8, BlockQ8_1x4,
};
use crate::cpu::KernelSet;
use crate::kernel_api::{Kernels, TiledGemm};
use crate::kernels::x86::avx2::k_quants::K8x8;
use crate::kernels::x86::avx2::{q4_1, q6_k};
use crate::kernels::x86::{target_entries, Avx512};
use nibble::{OffsetQuad, ZmmBlock};

/// `q4_0_8x8` with 512-bit `vpdpbusd` (all 8 rows of a group by 8 activations at once).
pub(crate) fn q4_0_kernels(_: Avx512) -> Kernels<BlockQ4_0x8, BlockQ8_0, BlockQ8_0x4Sums> {
    Kernels {
        wide: Some(wide_gemm::<BlockQ4_0x8, BlockQ8_0x4Sums>),
        tiled: Some(rows16_tiled(NIBBLE_TILE_MIN_QUADS)),
        ..Kernels::pair(
            KernelSet::Avx512,
            q4_0_gemv,
            offset_gemm::<BlockQ4_0x8, BlockQ8_0x4Sums>,
        )
    }
}

/// `q8_0_8x8` with 512-bit `vpdpbusd`: bytes + 128, `128 Σa` from the quads.
pub(crate) fn q8_0_kernels(_: Avx512) -> Kernels<BlockQ8_0x8, BlockQ8_0, BlockQ8_0x4Sums> {
    Kernels {
        wide: Some(wide_gemm::<BlockQ8_0x8, BlockQ8_0x4Sums>),
        tiled: Some(rows16_tiled(Q8_0_TILE_MIN_QUADS)),
        ..Kernels::pair(
            KernelSet::Avx512,
            zmm_gemv::<BlockQ8_0x8>,
            offset_gemm::<BlockQ8_0x8, BlockQ8_0x4Sums>,
        )
    }
}

/// The table layouts (`iq4_nl_8x8`, `P = BlockIq4Nlx8`; `mxfp4_8x8`, `BlockMxfp4x8`) with
/// 512-bit `vpdpbusd`: values + 128 from a table, `128 Σa` from the quads (`Q`: IQ4_NL's
/// `BlockQ8_0x4Abs`, MXFP4's `BlockQ8_0x4Sums`).
pub(crate) fn table_kernels<P: ZmmBlock, Q: OffsetQuad>(_: Avx512) -> Kernels<P, BlockQ8_0, Q> {
    Kernels {
        wide: Some(wide_gemm::<P, Q>),
        tiled: Some(rows16_tiled(NIBBLE_TILE_MIN_QUADS)),
        ..Kernels::pair(KernelSet::Avx512, zmm_gemv::<P>, offset_gemm::<P, Q>)
    }
}

/// The 16-row tiles of two row groups of a 32-weight 8x8 layout (`rows16.rs`), two quads a
/// call, from `min_quads` quads on (below, the 8x8 kernels run on the stored blocks).
fn rows16_tiled<P: ZmmBlock, Q: OffsetQuad>(min_quads: usize) -> TiledGemm<P, Q> {
    TiledGemm {
        groups: 2,
        quads: 2,
        min_quads,
        tile_words: |nb| nb * rows16::BLOCK_WORDS,
        make_tile: rows16_tile::<P>,
        gemm: rows16_gemm::<P, Q>,
    }
}

/// Quads from which Q4_0 and IQ4_NL take the 16-row tiles. Making a tile reads the row
/// group once more and writes bytes twice the size of its nibbles; measured on Zen 4 (2
/// threads, 4096x4096, tile / 8x8 time): batch 8 1.07, 12 0.95-0.97, 16 0.97-1.03, 32 0.75-0.84.
const NIBBLE_TILE_MIN_QUADS: usize = 3;

/// Quads from which Q8_0 takes the 16-row tiles: its 8x8 kernels need no unpacking, so the
/// tile's extra pass pays later (batch 8 1.44, 16 1.17, 32 1.04, 48 0.94, 64 0.82).
const Q8_0_TILE_MIN_QUADS: usize = 12;

/// Quads from which the K-quants take the 16-row tiles (`k_rows16.rs`); below, the 8x8 GEMM
/// decodes the stored blocks. Zen 4, 2 threads, 4096x4096, tile / 8x8 time: batch 8
/// 1.09-1.12 (q5_K 0.96), 12 0.85-0.90, 32 0.89-0.91, 512 0.93-0.96.
const K_TILE_MIN_QUADS: usize = 3;

/// The K-quant 8x8 layouts: 512-bit GEMV and one-quad GEMM on the stored blocks, 16-row
/// tiles from `K_TILE_MIN_QUADS` quads on, `vpdpbusd` for the byte products.
pub(crate) fn k_quant_kernels<P: K8x8>(_: Avx512) -> Kernels<P, BlockQ8K, BlockQ8Kx4> {
    Kernels {
        set: KernelSet::Avx512,
        gemv: k_gemv::<P>,
        gemm: k_gemm::<P>,
        tiled: Some(TiledGemm {
            groups: 2,
            quads: 2,
            min_quads: K_TILE_MIN_QUADS,
            tile_words: |nb| nb * k_rows16::BLOCK_WORDS,
            make_tile: k_rows16_tile::<P>,
            gemm: k_rows16_gemm::<P>,
        }),
        wide: None,
    }
}

/// `q4_K_8x8`: the K-quant kernels with a GEMV of its own (`k_gemv::q4_k_gemv_body`).
pub(crate) fn q4_k_kernels(t: Avx512) -> Kernels<BlockQ4Kx8, BlockQ8K, BlockQ8Kx4> {
    Kernels {
        gemv: q4_k_gemv,
        ..k_quant_kernels::<BlockQ4Kx8>(t)
    }
}

/// `q4_1_8x8` (`P = BlockQ4_1x8`) and `q5_1_8x8` (`BlockQ5_1x8`): the AVX2 GEMV, the GEMM
/// with 32 registers.
pub(crate) fn q4_1_kernels<P: q4_1::MinBlockX8>(
    t: Avx512,
) -> Kernels<P, crate::blocks::BlockQ8_1, BlockQ8_1x4> {
    Kernels {
        set: KernelSet::Avx512,
        gemm: q4_1_gemm::<P>,
        ..q4_1::kernels::<P>(t.avx2())
    }
}

/// `q5_0_8x8` with 512-bit `vpdpbusd`, as Q4_0 (the fifth bits or-ed into the nibbles).
pub(crate) fn q5_0_kernels(_: Avx512) -> Kernels<BlockQ5_0x8, BlockQ8_0, BlockQ8_0x4Sums> {
    Kernels {
        wide: Some(wide_gemm::<BlockQ5_0x8, BlockQ8_0x4Sums>),
        tiled: Some(rows16_tiled(NIBBLE_TILE_MIN_QUADS)),
        ..Kernels::pair(
            KernelSet::Avx512,
            zmm_gemv::<BlockQ5_0x8>,
            offset_gemm::<BlockQ5_0x8, BlockQ8_0x4Sums>,
        )
    }
}

/// `q6_K_8x8_x86`: the AVX2 loop nest with `vpdpbusd` for the byte products, 32 registers.
pub(crate) fn q6_k_kernels(_: Avx512) -> Kernels<BlockQ6Kx8, BlockQ8K, BlockQ8Kx4> {
    Kernels::pair(KernelSet::Avx512, q6_k_gemv, q6_k_gemm)
}

target_entries! { "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni";
    fn q4_0_gemv(w: &[BlockQ4_0x8], a: &[BlockQ8_0], out: &mut [f32]) => nibble::gemv_body::<BlockQ4_0x8>;
    fn offset_gemm<P: ZmmBlock, Q: OffsetQuad>(w: &[P], a: &[Q], out: &mut [f32]) => nibble::gemm_body;
    fn zmm_gemv<P: ZmmBlock>(w: &[P], a: &[BlockQ8_0], out: &mut [f32]) => nibble::gemv_body;
    fn rows16_tile<P: ZmmBlock>(w: &[P], tile: &mut [u64]) => rows16::make_tile_body;
    fn rows16_gemm<P: ZmmBlock, Q: OffsetQuad>(w: &[P], tile: &[u64], a: &[Q], out: &mut [f32]) => rows16::tiled_gemm_body;
    fn wide_gemm<P: ZmmBlock, Q: OffsetQuad>(w: [&[P]; 2], a: [&[Q]; 2], out: [&mut [f32]; 2]) => nibble::wide_gemm_body;
    fn q6_k_gemv(w: &[BlockQ6Kx8], a: &[BlockQ8K], out: &mut [f32]) => q6_k_gemv::gemv_body;
    fn q6_k_gemm(w: &[BlockQ6Kx8], a: &[BlockQ8Kx4], out: &mut [f32]) => q6_k::imp::gemm_body_vnni;
    fn k_gemv<P: K8x8>(w: &[P], a: &[BlockQ8K], out: &mut [f32]) => k_gemv::gemv_body;
    fn q4_k_gemv(w: &[BlockQ4Kx8], a: &[BlockQ8K], out: &mut [f32]) => k_gemv::q4_k_gemv_body;
    fn k_gemm<P: K8x8>(w: &[P], a: &[BlockQ8Kx4], out: &mut [f32]) => k_gemv::gemm_body;
    fn k_rows16_tile<P: K8x8>(w: &[P], tile: &mut [u64]) => k_rows16::make_tile_body;
    fn k_rows16_gemm<P: K8x8>(w: &[P], tile: &[u64], a: &[BlockQ8Kx4], out: &mut [f32]) => k_rows16::tiled_gemm_body;
}

target_entries! { "avx2,fma,f16c,avx512f,avx512bw,avx512vl";
    fn q4_1_gemm<P: q4_1::MinBlockX8>(w: &[P], a: &[BlockQ8_1x4], out: &mut [f32]) => q4_1::imp::gemm_body;
}
