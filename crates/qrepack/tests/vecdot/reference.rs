//! The test's random blocks and its `f64` decoders of activation and weight blocks, written
//! from the block format descriptions one weight at a time (unlike the kernels' bulk decoding).

use std::mem::offset_of;

use bytemuck::{Pod, Zeroable};
use qrepack::activation::*;
use qrepack::blocks::*;
use qrepack::rng::SplitMix64;

// ---------------------------------------------------------------------------------------------
// Random numbers
// ---------------------------------------------------------------------------------------------

/// `qrepack::rng::SplitMix64` with the draws these tests need.
pub struct Rng(pub SplitMix64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0.next_u64()
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }
    /// A random sign times a log-uniform magnitude in [0.01, 0.1).
    pub fn scale(&mut self) -> f32 {
        let m = 10f64.powf(-2.0 + self.unit()) as f32;
        if self.coin() {
            -m
        } else {
            m
        }
    }
    /// Uniform in [-1, 1).
    pub fn sym(&mut self) -> f32 {
        (2.0 * self.unit() - 1.0) as f32
    }
    pub fn fill(&mut self, bytes: &mut [u8]) {
        for b in bytes {
            *b = self.next() as u8;
        }
    }
}

/// A block of random bytes whose f16 fields at `f16_at` hold random moderate scales.
pub fn random_block<B: Pod>(rng: &mut Rng, f16_at: &[usize]) -> B {
    let mut b = B::zeroed();
    let bytes = bytemuck::bytes_of_mut(&mut b);
    rng.fill(bytes);
    for &o in f16_at {
        bytes[o..o + 2].copy_from_slice(&F16Bits::from_f32(rng.scale()).0);
    }
    b
}

pub fn f16_value(h: F16Bits) -> f64 {
    h.to_f32() as f64
}

// ---------------------------------------------------------------------------------------------
// Activation blocks: random bytes or real quantizations, and their f64 values
// ---------------------------------------------------------------------------------------------

pub fn random_floats(rng: &mut Rng, n: usize) -> Vec<f32> {
    let amp = 1.0 + 10.0 * rng.unit() as f32;
    (0..n).map(|_| amp * rng.sym()).collect()
}

pub fn rand_q8_0(rng: &mut Rng) -> BlockQ8_0 {
    if rng.coin() {
        random_block(rng, &[offset_of!(BlockQ8_0, d)])
    } else {
        quantize_block_q8_0(&random_floats(rng, 32))
    }
}

pub fn rand_q8_1(rng: &mut Rng) -> BlockQ8_1 {
    if rng.coin() {
        let mut b: BlockQ8_1 = random_block(rng, &[offset_of!(BlockQ8_1, d)]);
        let sum: i32 = b.qs.iter().map(|&q| q as i32).sum();
        b.s = F16Bits::from_f32(b.d.to_f32() * sum as f32);
        b
    } else {
        quantize_block_q8_1(&random_floats(rng, 32))
    }
}

pub fn rand_q8_k(rng: &mut Rng) -> BlockQ8K {
    if rng.coin() {
        let mut b = BlockQ8K::zeroed();
        rng.fill(bytemuck::cast_slice_mut(&mut b.qs));
        b.d = rng.scale() / 10.0;
        for (g, s) in b.bsums.iter_mut().enumerate() {
            *s = b.qs[16 * g..16 * g + 16].iter().map(|&q| q as i16).sum();
        }
        b
    } else {
        quantize_block_q8_k(&random_floats(rng, 256))
    }
}

pub fn deq_q8_0(a: &BlockQ8_0) -> Vec<f64> {
    a.qs.iter().map(|&q| f16_value(a.d) * q as f64).collect()
}

pub fn deq_q8_1(a: &BlockQ8_1) -> Vec<f64> {
    a.qs.iter().map(|&q| f16_value(a.d) * q as f64).collect()
}

pub fn deq_q8_k(a: &BlockQ8K) -> Vec<f64> {
    a.qs.iter().map(|&q| a.d as f64 * q as f64).collect()
}

// ---------------------------------------------------------------------------------------------
// Weight decoders: each weight as (scale part, min part), in f64
// ---------------------------------------------------------------------------------------------

/// IQ4_NL / IQ4_XS levels, restated here from ggml-common.h.
pub const LEVELS: [i32; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// Nibble of weight `i` (0..32) in a 32-weight run packed in 16 bytes.
pub fn nib32(qs: &[u8], i: usize) -> i32 {
    let b = qs[i % 16];
    (if i < 16 { b & 15 } else { b >> 4 }) as i32
}

pub fn no_min(v: Vec<f64>) -> Vec<(f64, f64)> {
    v.into_iter().map(|x| (x, 0.0)).collect()
}

pub fn deq_q4_0(w: &BlockQ4_0) -> Vec<(f64, f64)> {
    no_min(
        (0..32)
            .map(|i| f16_value(w.d) * (nib32(&w.qs, i) - 8) as f64)
            .collect(),
    )
}

pub fn deq_q4_1(w: &BlockQ4_1) -> Vec<(f64, f64)> {
    (0..32)
        .map(|i| (f16_value(w.d) * nib32(&w.qs, i) as f64, f16_value(w.m)))
        .collect()
}

pub fn bit5(qh: &[u8; 4], i: usize) -> i32 {
    (((qh[i / 8] >> (i % 8)) & 1) as i32) << 4
}

pub fn deq_q5_0(w: &BlockQ5_0) -> Vec<(f64, f64)> {
    let q = |i| nib32(&w.qs, i) + bit5(&w.qh, i) - 16;
    no_min((0..32).map(|i| f16_value(w.d) * q(i) as f64).collect())
}

pub fn deq_q5_1(w: &BlockQ5_1) -> Vec<(f64, f64)> {
    let q = |i| nib32(&w.qs, i) + bit5(&w.qh, i);
    (0..32)
        .map(|i| (f16_value(w.d) * q(i) as f64, f16_value(w.m)))
        .collect()
}

pub fn deq_q8_0_w(w: &BlockQ8_0) -> Vec<(f64, f64)> {
    no_min(deq_q8_0(w))
}

pub fn deq_q8_1_w(w: &BlockQ8_1) -> Vec<(f64, f64)> {
    no_min(deq_q8_1(w))
}

pub fn deq_q8_k_w(w: &BlockQ8K) -> Vec<(f64, f64)> {
    no_min(deq_q8_k(w))
}

pub fn deq_iq4_nl(w: &BlockIq4Nl) -> Vec<(f64, f64)> {
    no_min(
        (0..32)
            .map(|i| f16_value(w.d) * LEVELS[nib32(&w.qs, i) as usize] as f64)
            .collect(),
    )
}

/// The 2-bit field of weight `i` (0..256) in a Q2_K/Q3_K `qs`: 128-weight halves of 32 bytes,
/// the four 32-weight quarters of a half in bits 0-1, 2-3, 4-5, 6-7.
pub fn crumb(qs: &[u8; 64], i: usize) -> i32 {
    let (half, quarter, l) = (i / 128, (i % 128) / 32, i % 32);
    ((qs[32 * half + l] >> (2 * quarter)) & 3) as i32
}

pub fn deq_q2_k(w: &BlockQ2K) -> Vec<(f64, f64)> {
    (0..256)
        .map(|i| {
            let sc = w.scales[i / 16];
            (
                f16_value(w.d) * (sc & 15) as f64 * crumb(&w.qs, i) as f64,
                -f16_value(w.dmin) * (sc >> 4) as f64,
            )
        })
        .collect()
}

pub fn deq_q3_k(w: &BlockQ3K) -> Vec<(f64, f64)> {
    let scale = |j: usize| {
        let low = if j < 8 {
            w.scales[j] & 15
        } else {
            w.scales[j - 8] >> 4
        };
        let high = (w.scales[8 + j % 4] >> (2 * (j / 4))) & 3;
        (low | (high << 4)) as i32 - 32
    };
    no_min(
        (0..256)
            .map(|i| {
                let high_set = w.hmask[i % 32] & (1 << (i / 32)) != 0;
                let q = crumb(&w.qs, i) - if high_set { 0 } else { 4 };
                f16_value(w.d) * scale(i / 16) as f64 * q as f64
            })
            .collect(),
    )
}

/// Scale and min of sub-block `j` of a Q4_K/Q5_K 12-byte field, restated independently.
pub fn six_bit(b: &[u8; 12], j: usize) -> (i32, i32) {
    let (s, m) = if j < 4 {
        (b[j] & 63, b[j + 4] & 63)
    } else {
        (
            (b[j + 4] & 15) | ((b[j - 4] >> 6) << 4),
            (b[j + 4] >> 4) | ((b[j] >> 6) << 4),
        )
    };
    (s as i32, m as i32)
}

/// The low nibble of weight `i` in a Q4_K/Q5_K `qs`: 64-weight chunks of 32 bytes, low nibbles
/// for the first 32 weights of a chunk.
pub fn nib_k(qs: &[u8; 128], i: usize) -> i32 {
    let b = qs[32 * (i / 64) + i % 32];
    (if i % 64 < 32 { b & 15 } else { b >> 4 }) as i32
}

pub fn deq_q4_k(w: &BlockQ4K) -> Vec<(f64, f64)> {
    (0..256)
        .map(|i| {
            let (sc, m) = six_bit(&w.scales, i / 32);
            (
                f16_value(w.d) * sc as f64 * nib_k(&w.qs, i) as f64,
                -f16_value(w.dmin) * m as f64,
            )
        })
        .collect()
}

pub fn deq_q5_k(w: &BlockQ5K) -> Vec<(f64, f64)> {
    (0..256)
        .map(|i| {
            let (sc, m) = six_bit(&w.scales, i / 32);
            let q = nib_k(&w.qs, i) + ((((w.qh[i % 32] >> (i / 32)) & 1) as i32) << 4);
            (
                f16_value(w.d) * sc as f64 * q as f64,
                -f16_value(w.dmin) * m as f64,
            )
        })
        .collect()
}

pub fn deq_q6_k(w: &BlockQ6K) -> Vec<(f64, f64)> {
    no_min(
        (0..256)
            .map(|i| {
                let (h, s, l) = (i / 128, (i % 128) / 32, i % 32);
                let low = (w.ql[64 * h + 32 * (s % 2) + l] >> (4 * (s / 2))) & 15;
                let high = (w.qh[32 * h + l] >> (2 * s)) & 3;
                let q = (low | (high << 4)) as i32 - 32;
                f16_value(w.d) * w.scales[i / 16] as f64 * q as f64
            })
            .collect(),
    )
}

pub fn deq_iq4_xs(w: &BlockIq4Xs) -> Vec<(f64, f64)> {
    let high = u16::from_le_bytes(w.scales_h);
    no_min(
        (0..256)
            .map(|i| {
                let sb = i / 32;
                let ls = ((w.scales_l[sb / 2] >> (4 * (sb % 2))) & 15) as i32
                    | (((high >> (2 * sb)) & 3) as i32) << 4;
                let q = LEVELS[nib32(&w.qs[16 * sb..16 * sb + 16], i % 32) as usize];
                f16_value(w.d) * (ls - 32) as f64 * q as f64
            })
            .collect(),
    )
}
