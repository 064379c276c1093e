//! The scalar block products of the interleaved layouts: the arithmetic of each layout written
//! plainly, one block column times one activation block.

use crate::blocks::{e8m0_half_to_f32, BlockMxfp4x4, BlockMxfp4x8, IQ4NL_LEVELS, SIGNED_NIBBLE};
use crate::blocks::{
    BlockIq4Nlx4, BlockIq4Nlx8, BlockQ2Kx8, BlockQ4Kx8, BlockQ4_0x4, BlockQ4_0x8, BlockQ4_1x8,
    BlockQ5Kx8, BlockQ5_0x8, BlockQ5_1x8, BlockQ6Kx8, BlockQ6Kx8Ggml, BlockQ8K, BlockQ8_0,
    BlockQ8_0x4, BlockQ8_0x8, BlockQ8_1, F16Bits,
};
use crate::kernels::scalar::nibble;
use crate::kernels::scalar::BlockDot;
use crate::layout::iq4_nl::{Iq4Nl4x4, Iq4Nl8x8};
use crate::layout::mxfp4::{Mxfp4_4x4, Mxfp4_8x8};
use crate::layout::q2_k::{self, Q2K8x8};
use crate::layout::q4_0::{Q4_0_4x4, Q4_0_4x8, Q4_0_8x8};
use crate::layout::q4_1::Q4_1_8x8;
use crate::layout::q4_k::{self, packed_scale_min, Q4K8x4, Q4K8x8};
use crate::layout::q5_0::{self, Q5_0_8x8};
use crate::layout::q5_1::{self, Q5_1_8x8};
use crate::layout::q5_k::{self, Q5K8x8X86, Q5KArm};
use crate::layout::q6_k::{self, Q6K8x8X86, Q6KArm};
use crate::layout::q8_0::{Q8_0_4x4, Q8_0_4x8, Q8_0_8x8};
use crate::layout::PackedLayout;
use crate::quant::grids::KVALUES_FP4;

macro_rules! nibble_block_dot {
    ($($layout:ty: $packed:ty, $table:expr, |$w:ident, $r:ident| $scale:expr;)*) => {$(
        impl BlockDot for $layout {
            fn block_dot($w: &$packed, a: &BlockQ8_0, acc: &mut [f32]) {
                nibble::block_dot::<{ <$layout>::ROWS }, { <$layout>::INTERLEAVE }>(
                    &$table, |$r| $scale, &$w.qs, a, acc,
                )
            }
        }
    )*};
}

nibble_block_dot! {
    Q4_0_4x4: BlockQ4_0x4, SIGNED_NIBBLE, |w, r| w.d[r].to_f32();
    Q4_0_4x8: BlockQ4_0x4, SIGNED_NIBBLE, |w, r| w.d[r].to_f32();
    Q4_0_8x8: BlockQ4_0x8, SIGNED_NIBBLE, |w, r| w.d[r].to_f32();
    Iq4Nl4x4: BlockIq4Nlx4, IQ4NL_LEVELS, |w, r| w.d[r].to_f32();
    Iq4Nl8x8: BlockIq4Nlx8, IQ4NL_LEVELS, |w, r| w.d[r].to_f32();
    Mxfp4_4x4: BlockMxfp4x4, KVALUES_FP4, |w, r| e8m0_half_to_f32(w.e[r]);
    Mxfp4_8x8: BlockMxfp4x8, KVALUES_FP4, |w, r| e8m0_half_to_f32(w.e[r]);
}

/// Adds one Q4_K/Q5_K block column of 8 rows (`quant(r, e)`: the unsigned quant of weight `e`
/// of row `r`) times one Q8_K block: per row and super-block
/// `d_w·d_a·Σ_j sc_j Σ q·a - dmin_w·d_a·Σ_j m_j·(bsum_2j + bsum_2j+1)` in exact integers.
fn k4_block_dot(
    d: &[F16Bits; 8],
    dmin: &[F16Bits; 8],
    scales: &[u8; 96],
    quant: impl Fn(usize, usize) -> u8,
    a: &BlockQ8K,
    acc: &mut [f32],
) {
    for (r, o) in acc.iter_mut().enumerate().take(8) {
        let mut sumi = 0i32;
        let mut summ = 0i32;
        for sb in 0..8 {
            let (sc, mn) = packed_scale_min(scales, sb, r);
            let mut dot = 0i32;
            for e in 32 * sb..32 * sb + 32 {
                dot += quant(r, e) as i32 * a.qs[e] as i32;
            }
            sumi += sc as i32 * dot;
            summ += mn as i32 * (a.bsums[2 * sb] as i32 + a.bsums[2 * sb + 1] as i32);
        }
        *o += d[r].to_f32() * a.d * sumi as f32 - dmin[r].to_f32() * a.d * summ as f32;
    }
}

impl BlockDot for Q4K8x8 {
    fn block_dot(w: &BlockQ4Kx8, a: &BlockQ8K, acc: &mut [f32]) {
        let quant = |r, e| q4_k::packed_quant(&w.qs, 8, r, e);
        k4_block_dot(&w.d, &w.dmin, &w.scales, quant, a, acc)
    }
}

impl BlockDot for Q4K8x4 {
    fn block_dot(w: &BlockQ4Kx8, a: &BlockQ8K, acc: &mut [f32]) {
        let quant = |r, e| q4_k::packed_quant(&w.qs, 4, r, e);
        k4_block_dot(&w.d, &w.dmin, &w.scales, quant, a, acc)
    }
}

impl BlockDot for Q5K8x8X86 {
    fn block_dot(w: &BlockQ5Kx8, a: &BlockQ8K, acc: &mut [f32]) {
        let quant = |r, e| q5_k::packed_quant(w, r, e);
        k4_block_dot(&w.d, &w.dmin, &w.scales, quant, a, acc)
    }
}

impl<const IL: usize> BlockDot for Q5KArm<IL> {
    fn block_dot(w: &BlockQ5Kx8, a: &BlockQ8K, acc: &mut [f32]) {
        let quant = |r, e| q5_k::arm_packed_quant(w, IL, r, e);
        k4_block_dot(&w.d, &w.dmin, &w.scales, quant, a, acc)
    }
}

/// Adds one Q2_K block column of 8 rows times one Q8_K block: per row and super-block
/// `d_w·d_a·Σ_g sc_g Σ q·a - dmin_w·d_a·Σ_g m_g·bsum_g` in exact integers (ggml's generic
/// kernel adds its f32 partial sums in another order).
impl BlockDot for Q2K8x8 {
    fn block_dot(w: &BlockQ2Kx8, a: &BlockQ8K, acc: &mut [f32]) {
        for (r, o) in acc.iter_mut().enumerate().take(8) {
            let mut sumi = 0i32;
            let mut summ = 0i32;
            for g in 0..16 {
                let sm = w.scales[q2_k::scale_index(r, g)];
                let mut dot = 0i32;
                for e in 16 * g..16 * g + 16 {
                    dot += q2_k::packed_quant(w, r, e) as i32 * a.qs[e] as i32;
                }
                sumi += (sm & 0x0f) as i32 * dot;
                summ += (sm >> 4) as i32 * a.bsums[g] as i32;
            }
            *o += w.d[r].to_f32() * a.d * sumi as f32 - w.dmin[r].to_f32() * a.d * summ as f32;
        }
    }
}

/// Adds one Q6_K block column of 8 rows (`quant(r, e)`: the unsigned quant of weight `e` of row
/// `r`, group scales `scales[8g + r]`) times one Q8_K block: per row and super-block
/// `d_w·d_a·Σ_g sc_g Σ (q - 32)·a` in exact integers.
fn q6_k_block_dot(
    d: &[F16Bits; 8],
    scales: &[i8; 128],
    quant: impl Fn(usize, usize) -> u8,
    a: &BlockQ8K,
    acc: &mut [f32],
) {
    for (r, o) in acc.iter_mut().enumerate().take(8) {
        let mut sumi = 0i32;
        for g in 0..16 {
            let mut dot = 0i32;
            for i in 16 * g..16 * g + 16 {
                dot += (quant(r, i) as i32 - 32) * a.qs[i] as i32;
            }
            sumi += scales[8 * g + r] as i32 * dot;
        }
        *o += d[r].to_f32() * a.d * sumi as f32;
    }
}

impl BlockDot for Q6K8x8X86 {
    fn block_dot(w: &BlockQ6Kx8, a: &BlockQ8K, acc: &mut [f32]) {
        q6_k_block_dot(&w.d, &w.scales, |r, e| q6_k::packed_quant(w, r, e), a, acc)
    }
}

impl<const IL: usize> BlockDot for Q6KArm<IL> {
    fn block_dot(w: &BlockQ6Kx8Ggml, a: &BlockQ8K, acc: &mut [f32]) {
        let quant = |r, e| q6_k::arm_packed_quant(w, IL, r, e);
        q6_k_block_dot(&w.d, &w.scales, quant, a, acc)
    }
}

/// Adds one block column of `R` Q8_0 rows interleaved in `IL`-byte chunks times one Q8_0 block.
fn q8_0_rows_dot<const R: usize, const IL: usize>(
    d: &[F16Bits],
    qs: &[i8],
    a: &BlockQ8_0,
    acc: &mut [f32],
) {
    let mut sumi = [0i32; R];
    for (c, chunk) in qs.chunks_exact(IL).enumerate() {
        let base = (c / R) * IL;
        sumi[c % R] += chunk
            .iter()
            .zip(&a.qs[base..base + IL])
            .map(|(&q, &x)| q as i32 * x as i32)
            .sum::<i32>();
    }
    let da = a.d.to_f32();
    for ((o, s), d) in acc.iter_mut().zip(sumi).zip(d) {
        *o += s as f32 * d.to_f32() * da;
    }
}

impl BlockDot for Q8_0_8x8 {
    fn block_dot(w: &BlockQ8_0x8, a: &BlockQ8_0, acc: &mut [f32]) {
        q8_0_rows_dot::<8, 8>(&w.d, &w.qs, a, acc)
    }
}

impl BlockDot for Q8_0_4x4 {
    fn block_dot(w: &BlockQ8_0x4, a: &BlockQ8_0, acc: &mut [f32]) {
        q8_0_rows_dot::<4, 4>(&w.d, &w.qs, a, acc)
    }
}

impl BlockDot for Q8_0_4x8 {
    fn block_dot(w: &BlockQ8_0x4, a: &BlockQ8_0, acc: &mut [f32]) {
        q8_0_rows_dot::<4, 8>(&w.d, &w.qs, a, acc)
    }
}

impl BlockDot for Q5_0_8x8 {
    fn block_dot(w: &BlockQ5_0x8, a: &BlockQ8_0, acc: &mut [f32]) {
        let da = a.d.to_f32();
        for (r, o) in acc.iter_mut().enumerate().take(8) {
            let mut sumi = 0i32;
            for (i, &x) in a.qs.iter().enumerate() {
                sumi += (q5_0::packed_quant(w, r, i) as i32 - 16) * x as i32;
            }
            *o += sumi as f32 * (w.d[r].to_f32() * da);
        }
    }
}

impl BlockDot for Q4_1_8x8 {
    fn block_dot(w: &BlockQ4_1x8, a: &BlockQ8_1, acc: &mut [f32]) {
        let mut sumi = [0i32; 8];
        for (c, chunk) in w.qs.chunks_exact(8).enumerate() {
            let base = (c / 8) * 8;
            for (i, &byte) in chunk.iter().enumerate() {
                sumi[c % 8] += (byte & 0x0f) as i32 * a.qs[base + i] as i32
                    + (byte >> 4) as i32 * a.qs[base + i + 16] as i32;
            }
        }
        let (da, sa) = (a.d.to_f32(), a.s.to_f32());
        for (r, (o, s)) in acc.iter_mut().zip(sumi).enumerate() {
            *o += w.d[r].to_f32() * da * s as f32 + w.m[r].to_f32() * sa;
        }
    }
}

impl BlockDot for Q5_1_8x8 {
    fn block_dot(w: &BlockQ5_1x8, a: &BlockQ8_1, acc: &mut [f32]) {
        let (da, sa) = (a.d.to_f32(), a.s.to_f32());
        for (r, o) in acc.iter_mut().enumerate().take(8) {
            let mut sumi = 0i32;
            for (i, &x) in a.qs.iter().enumerate() {
                sumi += q5_1::packed_quant(w, r, i) as i32 * x as i32;
            }
            *o += w.d[r].to_f32() * da * sumi as f32 + w.m[r].to_f32() * sa;
        }
    }
}
