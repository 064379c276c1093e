//! Dot products of the ternary types (TQ1_0, TQ2_0 with Q8_K rows), the FP4 types (MXFP4,
//! NVFP4) and Q1_0 / Q2_0 (with Q8_0 rows), in the arithmetic of ggml's portable kernels.
//!
//! A Q1_0 block (128 weights) meets four Q8_0 blocks, a Q2_0 or NVFP4 block (64 weights) two:
//! their activation rows are arrays of Q8_0 blocks, one array per weight block.

use super::{idot, sum_blocks};
use crate::blocks::{
    e8m0_half_to_f32, ue4m3_half_to_f32, BlockMxfp4, BlockNvfp4, BlockQ1_0, BlockQ2_0, BlockQ8K,
    BlockQ8_0, BlockTq1_0, BlockTq2_0,
};
use crate::quant::lowbit::{fp4_values, q1_0_values, q2_0_values, tq1_0_values, tq2_0_values};

/// TQ1_0 · Q8_K: per block `Σ t·a` scaled by `d_w·d_a`.
pub fn vec_dot_tq1_0_q8_k(w: &[BlockTq1_0], a: &[BlockQ8K]) -> f32 {
    sum_blocks(w, a, |wb, ab| {
        idot(&tq1_0_values(wb), &ab.qs) as f32 * (wb.d.to_f32() * ab.d)
    })
}

/// TQ2_0 · Q8_K: per block `Σ (q - 1)·a` scaled by `d_a·d_w`.
pub fn vec_dot_tq2_0_q8_k(w: &[BlockTq2_0], a: &[BlockQ8K]) -> f32 {
    sum_blocks(w, a, |wb, ab| {
        idot(&tq2_0_values(wb), &ab.qs) as f32 * (ab.d * wb.d.to_f32())
    })
}

/// Q1_0 · Q8_0: per block `d_w · Σ_k d_a[k]·Σ ±a` over its four Q8_0 blocks.
pub fn vec_dot_q1_0_q8_0(w: &[BlockQ1_0], a: &[[BlockQ8_0; 4]]) -> f32 {
    sum_blocks(w, a, |wb, ab| {
        let q = q1_0_values(wb);
        let inner = q.chunks_exact(32).zip(ab).fold(0.0f32, |acc, (qk, yk)| {
            acc + yk.d.to_f32() * idot(qk, &yk.qs) as f32
        });
        wb.d.to_f32() * inner
    })
}

/// Q2_0 · Q8_0: per block `d_w · Σ_k d_a[k]·Σ (q - 1)·a` over its two Q8_0 blocks.
pub fn vec_dot_q2_0_q8_0(w: &[BlockQ2_0], a: &[[BlockQ8_0; 2]]) -> f32 {
    sum_blocks(w, a, |wb, ab| {
        let q = q2_0_values(wb);
        let inner = q.chunks_exact(32).zip(ab).fold(0.0f32, |acc, (qk, yk)| {
            acc + yk.d.to_f32() * idot(qk, &yk.qs) as f32
        });
        wb.d.to_f32() * inner
    })
}

/// MXFP4 · Q8_0: per block `Σ v·a` (doubled E2M1 values `v`) scaled by `d_a·2^(e - 128)`.
pub fn vec_dot_mxfp4_q8_0(w: &[BlockMxfp4], a: &[BlockQ8_0]) -> f32 {
    sum_blocks(w, a, |wb, ab| {
        let d = ab.d.to_f32() * e8m0_half_to_f32(wb.e);
        d * idot(&fp4_values::<32>(&wb.qs), &ab.qs) as f32
    })
}

/// NVFP4 · Q8_0: per group of 16 `d_a·s·Σ v·a` with the group's UE4M3 scale `s` (halved), the
/// four groups of a block accumulated one by one.
pub fn vec_dot_nvfp4_q8_0(w: &[BlockNvfp4], a: &[[BlockQ8_0; 2]]) -> f32 {
    w.iter().zip(a).fold(0.0f32, |mut acc, (wb, ab)| {
        for s in 0..4 {
            let y = &ab[s / 2];
            let q = fp4_values::<16>(&wb.qs[8 * s..8 * s + 8]);
            let at = 16 * (s % 2);
            let sumi = idot(&q, &y.qs[at..at + 16]);
            acc += y.d.to_f32() * ue4m3_half_to_f32(wb.d[s]) * sumi as f32;
        }
        acc
    })
}
