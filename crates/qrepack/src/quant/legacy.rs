//! The legacy 32-weight types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and Q8_1.

use super::{nibble, signed_absmax, Real};
use crate::blocks::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ8_1, F16Bits};

// ------------------------------------------------------------------------------------------------
// Dequantization
// ------------------------------------------------------------------------------------------------

/// The 5-bit quant of weight `j` (0..32) of a Q5_0/Q5_1 block.
#[inline]
fn nibble5(qs: &[u8; 16], qh: &[u8; 4], j: usize) -> u8 {
    let high = ((u32::from_le_bytes(*qh) >> j) & 1) as u8;
    nibble(qs, j) | (high << 4)
}

pub(super) fn dq_q4_0<R: Real>(b: &BlockQ4_0, y: &mut [R]) {
    let d = R::of_f16(b.d);
    for (j, v) in y.iter_mut().enumerate() {
        *v = R::of_int(i32::from(nibble(&b.qs, j)) - 8) * d;
    }
}

pub(super) fn dq_q4_1<R: Real>(b: &BlockQ4_1, y: &mut [R]) {
    let (d, m) = (R::of_f16(b.d), R::of_f16(b.m));
    for (j, v) in y.iter_mut().enumerate() {
        *v = R::of_int(i32::from(nibble(&b.qs, j))) * d + m;
    }
}

pub(super) fn dq_q5_0<R: Real>(b: &BlockQ5_0, y: &mut [R]) {
    let d = R::of_f16(b.d);
    for (j, v) in y.iter_mut().enumerate() {
        *v = R::of_int(i32::from(nibble5(&b.qs, &b.qh, j)) - 16) * d;
    }
}

pub(super) fn dq_q5_1<R: Real>(b: &BlockQ5_1, y: &mut [R]) {
    let (d, m) = (R::of_f16(b.d), R::of_f16(b.m));
    for (j, v) in y.iter_mut().enumerate() {
        *v = R::of_int(i32::from(nibble5(&b.qs, &b.qh, j))) * d + m;
    }
}

pub(super) fn dq_q8_0<R: Real>(b: &BlockQ8_0, y: &mut [R]) {
    let d = R::of_f16(b.d);
    for (v, &q) in y.iter_mut().zip(&b.qs) {
        *v = R::of_int(i32::from(q)) * d;
    }
}

pub(super) fn dq_q8_1<R: Real>(b: &BlockQ8_1, y: &mut [R]) {
    let d = R::of_f16(b.d);
    for (v, &q) in y.iter_mut().zip(&b.qs) {
        *v = R::of_int(i32::from(q)) * d;
    }
}

// ------------------------------------------------------------------------------------------------
// Quantization
// ------------------------------------------------------------------------------------------------

pub(super) fn q_q4_0(x: &[f32]) -> BlockQ4_0 {
    let (_, max) = signed_absmax(x);
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut b = BlockQ4_0 {
        d: F16Bits::from_f32(d),
        qs: [0; 16],
    };
    for j in 0..16 {
        let q0 = ((x[j] * id + 8.5) as i8).min(15) as u8;
        let q1 = ((x[j + 16] * id + 8.5) as i8).min(15) as u8;
        b.qs[j] = q0 | (q1 << 4);
    }
    b
}

/// Minimum and maximum of a block as ggml's Q4_1/Q5_1 compute them.
fn min_max(x: &[f32]) -> (f32, f32) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

pub(super) fn q_q4_1(x: &[f32]) -> BlockQ4_1 {
    let (min, max) = min_max(x);
    let d = (max - min) / 15.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut b = BlockQ4_1 {
        d: F16Bits::from_f32(d),
        m: F16Bits::from_f32(min),
        qs: [0; 16],
    };
    for j in 0..16 {
        let q0 = (((x[j] - min) * id + 0.5) as i8).min(15) as u8;
        let q1 = (((x[j + 16] - min) * id + 0.5) as i8).min(15) as u8;
        b.qs[j] = q0 | (q1 << 4);
    }
    b
}

/// Splits 32 5-bit levels into low nibbles and the high-bit word of Q5_0/Q5_1.
fn pack_q5(levels: &[u8; 32]) -> ([u8; 16], [u8; 4]) {
    let mut qs = [0u8; 16];
    let mut qh = 0u32;
    for j in 0..16 {
        qs[j] = (levels[j] & 0x0f) | ((levels[j + 16] & 0x0f) << 4);
        qh |= u32::from(levels[j] >> 4 & 1) << j;
        qh |= u32::from(levels[j + 16] >> 4 & 1) << (j + 16);
    }
    (qs, qh.to_le_bytes())
}

pub(super) fn q_q5_0(x: &[f32]) -> BlockQ5_0 {
    let (_, max) = signed_absmax(x);
    let d = max / -16.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut levels = [0u8; 32];
    for (l, &v) in levels.iter_mut().zip(x) {
        *l = ((v * id + 16.5) as i8).min(31) as u8;
    }
    let (qs, qh) = pack_q5(&levels);
    BlockQ5_0 {
        d: F16Bits::from_f32(d),
        qh,
        qs,
    }
}

pub(super) fn q_q5_1(x: &[f32]) -> BlockQ5_1 {
    let (min, max) = min_max(x);
    let d = (max - min) / 31.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut levels = [0u8; 32];
    for (l, &v) in levels.iter_mut().zip(x) {
        *l = ((v - min) * id + 0.5) as u8;
    }
    let (qs, qh) = pack_q5(&levels);
    BlockQ5_1 {
        d: F16Bits::from_f32(d),
        m: F16Bits::from_f32(min),
        qh,
        qs,
    }
}

pub(super) fn q_q8_0(x: &[f32]) -> BlockQ8_0 {
    let amax = x
        .iter()
        .fold(0.0f32, |a, v| if a > v.abs() { a } else { v.abs() });
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut b = BlockQ8_0 {
        d: F16Bits::from_f32(d),
        qs: [0; 32],
    };
    for (q, &v) in b.qs.iter_mut().zip(x) {
        *q = (v * id).round() as i8;
    }
    b
}

pub(super) fn q_q8_1(x: &[f32]) -> BlockQ8_1 {
    let amax = x
        .iter()
        .fold(0.0f32, |a, v| if a > v.abs() { a } else { v.abs() });
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut qs = [0i8; 32];
    for (q, &v) in qs.iter_mut().zip(x) {
        *q = (v * id).round() as i8;
    }
    let sum: i32 = qs.iter().map(|&q| i32::from(q)).sum();
    BlockQ8_1 {
        d: F16Bits::from_f32(d),
        s: F16Bits::from_f32(sum as f32 * d),
        qs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::dequantize;
    use crate::types::GgmlType;

    #[test]
    fn q4_0_block_by_hand() {
        // max magnitude -4 (negative): d = -4 / -8 = 0.5, so x = 0.5 * (q - 8)
        let mut x = [0.0f32; 32];
        x[0] = -4.0;
        x[1] = 3.5;
        x[16] = 1.0;
        x[17] = 0.25; // 0.5 * 0.5 + 8.5 = 9 after truncation -> rounds up
        let b = q_q4_0(&x);
        assert_eq!(b.d, F16Bits::from_f32(0.5));
        assert_eq!(b.qs[0], 10 << 4);
        assert_eq!(b.qs[1], 15 | (9 << 4));
        assert_eq!(b.qs[2], 8 | (8 << 4));
        let y = dequantize(GgmlType::Q4_0, bytemuck::bytes_of(&b), 1, 32).unwrap();
        assert_eq!(&y[..2], &[-4.0, 3.5]);
        assert_eq!(&y[16..18], &[1.0, 0.5]);
    }
}
