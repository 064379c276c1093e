//! Portable dot products of one weight row with one activation row (the plain path).
//!
//! Each function takes a row of weight blocks and a row of blocks of the weight type's
//! `vec_dot_type` (ggml's pairing: Q8_0 for Q4_0/Q5_0/Q8_0/IQ4_NL/MXFP4/NVFP4/Q1_0/Q2_0, Q8_1
//! for Q4_1/Q5_1/Q8_1, Q8_K for the K-quants, IQ4_XS, the IQ1/IQ2/IQ3 grid types and TQ1_0/TQ2_0,
//! and the same float type for F32/F16/BF16). Where a weight block spans several Q8_0 blocks
//! (NVFP4, Q1_0, Q2_0) the activation row holds one array of them per weight block.
//!
//! The arithmetic is that of ggml's portable kernels: the products of the quants are summed in
//! exact integer arithmetic, and only the per-block scaling and the accumulation over blocks
//! are done in `f32`, in the order ggml uses. Within a block the two scales are multiplied
//! together first and the product then scales the integer sum (the product of two f16 scales is
//! exact in `f32`, so this equals ggml's left-to-right `sumi * d_w * d_a` where it writes that).
//! The Q3_K..Q6_K kernels keep ggml's eight accumulation lanes (lane `l` collects the positions
//! `≡ l (mod 8)`), so their results are bit-identical to ggml's generic kernels as well. Float rows are multiplied in `f32` and
//! summed in `f64`, as ggml's scalar `vec_dot_f32`/`f16`/`bf16` do.
//!
//! The rows are paired block by block; when one row is longer, its extra blocks are ignored.
//!
//! ```
//! use qrepack::activation::quantize_block_q8_0;
//! use qrepack::blocks::{BlockQ4_0, F16Bits};
//! use qrepack::vecdot::vec_dot_q4_0_q8_0;
//!
//! // 32 weights 0.5 * (q - 8) with q = 9 everywhere, i.e. all 0.5.
//! let w = BlockQ4_0 { d: F16Bits::from_f32(0.5), qs: [0x99; 16] };
//! // Activations 1, 2, ..., 32; Q8_0 quantization rounds them, hence the tolerance.
//! let x: Vec<f32> = (1..=32).map(|i| i as f32).collect();
//! let a = quantize_block_q8_0(&x);
//! let dot = vec_dot_q4_0_q8_0(&[w], &[a]);
//! let exact: f32 = x.iter().map(|v| 0.5 * v).sum();
//! assert!((dot - exact).abs() < 1e-2 * exact);
//! ```

use crate::activation::Bf16Bits;
use crate::blocks::{
    k4_scale_min, BlockIq4Nl, BlockIq4Xs, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1,
    BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K, BlockQ8K, BlockQ8_0, BlockQ8_1, F16Bits,
    IQ4NL_LEVELS,
};
use crate::types::QK_K;

mod grid;
mod lowbit;

pub use grid::{
    vec_dot_iq1_m_q8_k, vec_dot_iq1_s_q8_k, vec_dot_iq2_s_q8_k, vec_dot_iq2_xs_q8_k,
    vec_dot_iq2_xxs_q8_k, vec_dot_iq3_s_q8_k, vec_dot_iq3_xxs_q8_k,
};
pub use lowbit::{
    vec_dot_mxfp4_q8_0, vec_dot_nvfp4_q8_0, vec_dot_q1_0_q8_0, vec_dot_q2_0_q8_0,
    vec_dot_tq1_0_q8_k, vec_dot_tq2_0_q8_k,
};

// ---------------------------------------------------------------------------------------------
// Float rows
// ---------------------------------------------------------------------------------------------

/// Sums `f32` products in `f64` and rounds the total once.
#[inline]
fn dot_f64_acc(products: impl Iterator<Item = f32>) -> f32 {
    products.fold(0.0f64, |acc, p| acc + p as f64) as f32
}

/// Dot product of two `f32` rows: each product rounded to `f32`, the sum kept in `f64`.
pub fn vec_dot_f32(w: &[f32], a: &[f32]) -> f32 {
    dot_f64_acc(w.iter().zip(a).map(|(&x, &y)| x * y))
}

/// Dot product of two f16 rows (the product of two halves is exact in `f32`; summed in `f64`).
pub fn vec_dot_f16(w: &[F16Bits], a: &[F16Bits]) -> f32 {
    dot_f64_acc(w.iter().zip(a).map(|(x, y)| (*x).to_f32() * (*y).to_f32()))
}

/// Dot product of two bf16 rows (products exact in `f32`; summed in `f64`).
pub fn vec_dot_bf16(w: &[Bf16Bits], a: &[Bf16Bits]) -> f32 {
    dot_f64_acc(w.iter().zip(a).map(|(x, y)| x.to_f32() * y.to_f32()))
}

// ---------------------------------------------------------------------------------------------
// Integer helpers
// ---------------------------------------------------------------------------------------------

/// Exact integer dot product of two equally long runs of small integers.
#[inline]
fn idot(q: &[i8], a: &[i8]) -> i32 {
    q.iter().zip(a).map(|(&x, &y)| x as i32 * y as i32).sum()
}

/// Sums one `f32` contribution per block pair, in block order.
#[inline]
fn sum_blocks<W, A>(w: &[W], a: &[A], block: impl Fn(&W, &A) -> f32) -> f32 {
    w.iter()
        .zip(a)
        .fold(0.0f32, |acc, (wb, ab)| acc + block(wb, ab))
}

/// The 32 quants of 32 weights packed in 16 bytes: byte `j` holds weight `j` in its low nibble
/// and weight `j + 16` in its high nibble. `value` maps (nibble, index) to a quant.
#[inline]
fn nibble_block(qs: &[u8], value: impl Fn(u8, usize) -> i8) -> [i8; 32] {
    let mut q = [0i8; 32];
    let (lo, hi) = q.split_at_mut(16);
    for (j, ((&b, l), h)) in qs.iter().zip(lo).zip(hi).enumerate() {
        *l = value(b & 0x0f, j);
        *h = value(b >> 4, j + 16);
    }
    q
}

/// Bit `i` of the little-endian 32-bit high-bit field of Q5_0/Q5_1, moved to bit 4.
#[inline]
fn high_bit5(qh: u32, i: usize) -> u8 {
    (((qh >> i) & 1) as u8) << 4
}

// ---------------------------------------------------------------------------------------------
// 32-weight blocks
// ---------------------------------------------------------------------------------------------

/// Q4_0 · Q8_0: per block `Σ (q - 8)·a` scaled by `d_w·d_a`.
pub fn vec_dot_q4_0_q8_0(w: &[BlockQ4_0], a: &[BlockQ8_0]) -> f32 {
    sum_blocks(w, a, |wb, ab| {
        let q = nibble_block(&wb.qs, |n, _| n as i8 - 8);
        idot(&q, &ab.qs) as f32 * ((wb.d).to_f32() * (ab.d).to_f32())
    })
}

/// Q4_1 · Q8_1: per block `d_w·d_a·Σ q·a + m_w·s_a` (`s_a` is the activation block's
/// precomputed `d·Σ a`).
pub fn vec_dot_q4_1_q8_1(w: &[BlockQ4_1], a: &[BlockQ8_1]) -> f32 {
    sum_blocks(w, a, |wb, ab| {
        let q = nibble_block(&wb.qs, |n, _| n as i8);
        (wb.d).to_f32() * (ab.d).to_f32() * idot(&q, &ab.qs) as f32
            + (wb.m).to_f32() * (ab.s).to_f32()
    })
}

/// Q5_0 · Q8_0: per block `Σ (q - 16)·a` scaled by `d_w·d_a`; the fifth bit of weight `i` is
/// bit `i` of `qh`.
pub fn vec_dot_q5_0_q8_0(w: &[BlockQ5_0], a: &[BlockQ8_0]) -> f32 {
    sum_blocks(w, a, |wb, ab| {
        let qh = u32::from_le_bytes(wb.qh);
        let q = nibble_block(&wb.qs, |n, i| (n | high_bit5(qh, i)) as i8 - 16);
        idot(&q, &ab.qs) as f32 * ((wb.d).to_f32() * (ab.d).to_f32())
    })
}

/// Q5_1 · Q8_1: per block `d_w·d_a·Σ q·a + m_w·s_a` with 5-bit `q`.
pub fn vec_dot_q5_1_q8_1(w: &[BlockQ5_1], a: &[BlockQ8_1]) -> f32 {
    sum_blocks(w, a, |wb, ab| {
        let qh = u32::from_le_bytes(wb.qh);
        let q = nibble_block(&wb.qs, |n, i| (n | high_bit5(qh, i)) as i8);
        (wb.d).to_f32() * (ab.d).to_f32() * idot(&q, &ab.qs) as f32
            + (wb.m).to_f32() * (ab.s).to_f32()
    })
}

/// Q8_0 · Q8_0: per block `Σ q·a` scaled by `d_w·d_a`.
pub fn vec_dot_q8_0_q8_0(w: &[BlockQ8_0], a: &[BlockQ8_0]) -> f32 {
    sum_blocks(w, a, |wb, ab| {
        idot(&wb.qs, &ab.qs) as f32 * ((wb.d).to_f32() * (ab.d).to_f32())
    })
}

/// Q8_1 · Q8_1 (ggml has no such kernel): per block `Σ q·a` scaled by `d_w·d_a`; the `s` fields
/// are not needed.
pub fn vec_dot_q8_1_q8_1(w: &[BlockQ8_1], a: &[BlockQ8_1]) -> f32 {
    sum_blocks(w, a, |wb, ab| {
        idot(&wb.qs, &ab.qs) as f32 * ((wb.d).to_f32() * (ab.d).to_f32())
    })
}

/// IQ4_NL · Q8_0: per block `Σ LEVELS[q]·a` scaled by `d_w·d_a`.
pub fn vec_dot_iq4_nl_q8_0(w: &[BlockIq4Nl], a: &[BlockQ8_0]) -> f32 {
    sum_blocks(w, a, |wb, ab| {
        let q = nibble_block(&wb.qs, |n, _| IQ4NL_LEVELS[n as usize]);
        ((wb.d).to_f32() * (ab.d).to_f32()) * idot(&q, &ab.qs) as f32
    })
}

// ---------------------------------------------------------------------------------------------
// 256-weight super-blocks
// ---------------------------------------------------------------------------------------------

/// Eight integer accumulation lanes of one super-block: lane `l` holds
/// `Σ scale(i / 16) · q_i · a_i` over the positions `i ≡ l (mod 8)`.
#[inline]
fn scaled_lanes(q: &[i8; QK_K], a: &[i8; QK_K], scale16: impl Fn(usize) -> i32) -> [i32; 8] {
    let mut lanes = [0i32; 8];
    for (g, (qg, ag)) in q.chunks_exact(16).zip(a.chunks_exact(16)).enumerate() {
        let s = scale16(g);
        for (qh, ah) in qg.chunks_exact(8).zip(ag.chunks_exact(8)) {
            for ((lane, &x), &y) in lanes.iter_mut().zip(qh).zip(ah) {
                *lane += s * (x as i32 * y as i32);
            }
        }
    }
    lanes
}

/// ggml's eight `f32` accumulators for the Q3_K..Q6_K kernels.
struct FloatLanes([f32; 8]);

impl FloatLanes {
    fn new() -> Self {
        FloatLanes([0.0; 8])
    }

    /// Adds `d · lanes` lane by lane.
    #[inline]
    fn add(&mut self, d: f32, lanes: &[i32; 8]) {
        for (acc, &l) in self.0.iter_mut().zip(lanes) {
            *acc += d * l as f32;
        }
    }

    /// `start` plus the lanes, added in lane order.
    fn total(&self, start: f32) -> f32 {
        self.0.iter().fold(start, |acc, &l| acc + l)
    }
}

/// The quants of a 2-bit-packed super-block (Q2_K, and the low bits of Q3_K): each 128-weight
/// half uses 32 bytes, and bits `2s..2s+2` of byte `l` hold weight `32s + l` of that half.
#[inline]
fn crumbs(qs: &[u8; 64]) -> [i8; QK_K] {
    let mut q = [0i8; QK_K];
    for (dst, src) in q.chunks_exact_mut(128).zip(qs.chunks_exact(32)) {
        for (s, quarter) in dst.chunks_exact_mut(32).enumerate() {
            for (v, &b) in quarter.iter_mut().zip(src) {
                *v = ((b >> (2 * s)) & 3) as i8;
            }
        }
    }
    q
}

/// Sum of the Q8_K group sums weighted by per-group mins.
#[inline]
fn weighted_bsums(bsums: &[i16; 16], min16: impl Fn(usize) -> i32) -> i32 {
    bsums
        .iter()
        .enumerate()
        .map(|(g, &s)| s as i32 * min16(g))
        .sum()
}

/// Q2_K · Q8_K: per super-block `d_w·d_a·Σ_g sc_g Σ q·a − dmin_w·d_a·Σ_g m_g·bsum_g`, with the
/// 4-bit scale `sc_g` in the low and the 4-bit min `m_g` in the high nibble of `scales[g]`.
pub fn vec_dot_q2_k_q8_k(w: &[BlockQ2K], a: &[BlockQ8K]) -> f32 {
    sum_blocks(w, a, |wb, ab| {
        let q = crumbs(&wb.qs);
        let isum: i32 = q
            .chunks_exact(16)
            .zip(ab.qs.chunks_exact(16))
            .zip(&wb.scales)
            .map(|((qg, ag), &sc)| (sc & 0x0f) as i32 * idot(qg, ag))
            .sum();
        let msum = weighted_bsums(&ab.bsums, |g| (wb.scales[g] >> 4) as i32);
        let dall = ab.d * (wb.d).to_f32();
        let dmin = ab.d * (wb.dmin).to_f32();
        dall * isum as f32 - dmin * msum as f32
    })
}

/// The 16 signed 6-bit Q3_K scales (already offset by −32) from their 12-byte packing: the low
/// nibbles come from bytes 0..8 (low then high nibbles), the top two bits from bytes 8..12.
#[inline]
pub(crate) fn q3_k_scales(p: &[u8; 12]) -> [i32; 16] {
    let mut s = [0i32; 16];
    for (j, v) in s.iter_mut().enumerate() {
        let low = if j < 8 { p[j] & 0x0f } else { p[j - 8] >> 4 };
        let high = (p[8 + j % 4] >> (2 * (j / 4))) & 3;
        *v = (low | (high << 4)) as i32 - 32;
    }
    s
}

/// Q3_K · Q8_K: per super-block `d_w·d_a·Σ_g (sc_g − 32) Σ q·a`, where each quant is its two
/// low bits minus 4 unless its `hmask` bit is set.
pub fn vec_dot_q3_k_q8_k(w: &[BlockQ3K], a: &[BlockQ8K]) -> f32 {
    let mut acc = FloatLanes::new();
    for (wb, ab) in w.iter().zip(a) {
        let mut q = crumbs(&wb.qs);
        // Weight `32k + l` (k = 0..8) has its high bit in bit `k` of `hmask[l]`.
        for (k, part) in q.chunks_exact_mut(32).enumerate() {
            for (v, &m) in part.iter_mut().zip(&wb.hmask) {
                if m & (1 << k) == 0 {
                    *v -= 4;
                }
            }
        }
        let scales = q3_k_scales(&wb.scales);
        let lanes = scaled_lanes(&q, &ab.qs, |g| scales[g]);
        acc.add((wb.d).to_f32() * ab.d, &lanes);
    }
    acc.total(0.0)
}

/// The 4-bit quants of a Q4_K/Q5_K super-block: each 64-weight chunk uses 32 bytes, low
/// nibbles first.
#[inline]
fn nibbles_k(qs: &[u8; 128]) -> [i8; QK_K] {
    let mut q = [0i8; QK_K];
    for (dst, src) in q.chunks_exact_mut(64).zip(qs.chunks_exact(32)) {
        let (lo, hi) = dst.split_at_mut(32);
        for ((l, h), &b) in lo.iter_mut().zip(hi).zip(src) {
            *l = (b & 0x0f) as i8;
            *h = (b >> 4) as i8;
        }
    }
    q
}

/// Shared Q4_K/Q5_K kernel given the decoded unsigned quants.
#[inline]
fn k4_block(
    q: &[i8; QK_K],
    d: F16Bits,
    dmin: F16Bits,
    scales: &[u8; 12],
    ab: &BlockQ8K,
    acc: &mut FloatLanes,
) -> f32 {
    let sm: [(u8, u8); 8] = std::array::from_fn(|j| k4_scale_min(scales, j));
    let msum = weighted_bsums(&ab.bsums, |g| sm[g / 2].1 as i32);
    let lanes = scaled_lanes(q, &ab.qs, |g| sm[g / 2].0 as i32);
    acc.add((d).to_f32() * ab.d, &lanes);
    (dmin).to_f32() * ab.d * msum as f32
}

/// Q4_K · Q8_K: per super-block `d_w·d_a·Σ_s sc_s Σ q·a − dmin_w·d_a·Σ_s m_s·(group sums)`,
/// with 6-bit scales and mins per 32 weights.
pub fn vec_dot_q4_k_q8_k(w: &[BlockQ4K], a: &[BlockQ8K]) -> f32 {
    let mut acc = FloatLanes::new();
    let mut mins = 0.0f32;
    for (wb, ab) in w.iter().zip(a) {
        let q = nibbles_k(&wb.qs);
        mins -= k4_block(&q, wb.d, wb.dmin, &wb.scales, ab, &mut acc);
    }
    acc.total(mins)
}

/// Q5_K · Q8_K: as Q4_K with a fifth bit: weight `32k + l` has it in bit `k` of `qh[l]`.
pub fn vec_dot_q5_k_q8_k(w: &[BlockQ5K], a: &[BlockQ8K]) -> f32 {
    let mut acc = FloatLanes::new();
    let mut mins = 0.0f32;
    for (wb, ab) in w.iter().zip(a) {
        let mut q = nibbles_k(&wb.qs);
        for (k, part) in q.chunks_exact_mut(32).enumerate() {
            for (v, &h) in part.iter_mut().zip(&wb.qh) {
                *v |= (((h >> k) & 1) << 4) as i8;
            }
        }
        mins -= k4_block(&q, wb.d, wb.dmin, &wb.scales, ab, &mut acc);
    }
    acc.total(mins)
}

/// Q6_K · Q8_K: per super-block `d_w·d_a·Σ_g sc_g Σ (q − 32)·a` with signed 8-bit scales per
/// 16 weights. In each 128-weight half, quarter `s` takes its low nibbles from
/// `ql[64h + 32(s % 2) + l]` (low nibble for `s < 2`, high otherwise) and its top two bits from
/// bits `2s..2s+2` of `qh[32h + l]`.
pub fn vec_dot_q6_k_q8_k(w: &[BlockQ6K], a: &[BlockQ8K]) -> f32 {
    let mut acc = FloatLanes::new();
    for (wb, ab) in w.iter().zip(a) {
        let mut q = [0i8; QK_K];
        let halves = q
            .chunks_exact_mut(128)
            .zip(wb.ql.chunks_exact(64))
            .zip(wb.qh.chunks_exact(32));
        for ((dst, ql), qh) in halves {
            for (s, quarter) in dst.chunks_exact_mut(32).enumerate() {
                let low = &ql[32 * (s % 2)..32 * (s % 2) + 32];
                let nib_shift = 4 * (s / 2);
                for ((v, &l), &h) in quarter.iter_mut().zip(low).zip(qh) {
                    let u = ((l >> nib_shift) & 0x0f) | (((h >> (2 * s)) & 3) << 4);
                    *v = u as i8 - 32;
                }
            }
        }
        let lanes = scaled_lanes(&q, &ab.qs, |g| wb.scales[g] as i32);
        acc.add((wb.d).to_f32() * ab.d, &lanes);
    }
    acc.total(0.0)
}

/// Q8_K · Q8_K (ggml has no such kernel): per super-block `Σ q·a` scaled by `d_w·d_a`.
pub fn vec_dot_q8_k_q8_k(w: &[BlockQ8K], a: &[BlockQ8K]) -> f32 {
    sum_blocks(w, a, |wb, ab| idot(&wb.qs, &ab.qs) as f32 * (wb.d * ab.d))
}

/// IQ4_XS · Q8_K: per 32-weight sub-block `s`, `d_w·d_a·(ls_s − 32)·Σ LEVELS[q]·a`, where the
/// 6-bit `ls_s` has its low nibble in `scales_l` and its top two bits in bits `2s..2s+2` of
/// the little-endian `scales_h`; sub-block `s` uses the 16 bytes `qs[16s..]`, low nibbles first.
pub fn vec_dot_iq4_xs_q8_k(w: &[BlockIq4Xs], a: &[BlockQ8K]) -> f32 {
    let mut sum = 0.0f32;
    for (wb, ab) in w.iter().zip(a) {
        let d = (wb.d).to_f32() * ab.d;
        let high = u16::from_le_bytes(wb.scales_h);
        let subs = wb.qs.chunks_exact(16).zip(ab.qs.chunks_exact(32));
        for (s, (qs, act)) in subs.enumerate() {
            let low = (wb.scales_l[s / 2] >> (4 * (s % 2))) & 0x0f;
            let ls = (low | ((((high >> (2 * s)) & 3) as u8) << 4)) as i32 - 32;
            let q = nibble_block(qs, |n, _| IQ4NL_LEVELS[n as usize]);
            sum += d * ls as f32 * idot(&q, act) as f32;
        }
    }
    sum
}
