//! The ternary types TQ1_0 and TQ2_0, the FP4 types MXFP4 and NVFP4, and Q1_0 / Q2_0: decoding
//! to small signed integers (shared with the plain `vec_dot`s) and the dequantizers.

use super::grids::KVALUES_FP4;
use super::Real;
use crate::blocks::{
    e8m0_half_to_f32, ue4m3_half_to_f32, BlockMxfp4, BlockNvfp4, BlockQ1_0, BlockQ2_0, BlockTq1_0,
    BlockTq2_0,
};
use crate::types::QK_K;

/// The base-3 digit `n` (0..5) of a TQ1_0 byte, read as ggml does: the byte times `3^n`
/// (wrapping) is a fixed-point fraction of 1, and its top digit is `(b * 3) >> 8`.
#[inline]
fn trit(byte: u8, n: usize) -> i8 {
    const POW3: [u8; 5] = [1, 3, 9, 27, 81];
    let b = byte.wrapping_mul(POW3[n]);
    ((u16::from(b) * 3) >> 8) as i8 - 1
}

/// The 256 weights of a TQ1_0 block in {-1, 0, 1}, in order: digit `n` of `qs[j]` is weight
/// `32 n + j` for the first 32 bytes, `160 + 16 n + (j - 32)` for the next 16, and digit `n` of
/// `qh[j]` is weight `240 + 4 n + j`.
#[inline]
pub(crate) fn tq1_0_values(b: &BlockTq1_0) -> [i8; QK_K] {
    let mut q = [0i8; QK_K];
    let (head, rest) = q.split_at_mut(160);
    let (mid, tail) = rest.split_at_mut(80);
    for (n, out) in head.chunks_exact_mut(32).enumerate() {
        for (o, &byte) in out.iter_mut().zip(&b.qs[..32]) {
            *o = trit(byte, n);
        }
    }
    for (n, out) in mid.chunks_exact_mut(16).enumerate() {
        for (o, &byte) in out.iter_mut().zip(&b.qs[32..]) {
            *o = trit(byte, n);
        }
    }
    for (n, out) in tail.chunks_exact_mut(4).enumerate() {
        for (o, &byte) in out.iter_mut().zip(&b.qh) {
            *o = trit(byte, n);
        }
    }
    q
}

/// The 256 weights of a TQ2_0 block in {-1, 0, 1, 2}: bits `2l..2l+2` of `qs[32 h + m]` are
/// weight `128 h + 32 l + m`.
#[inline]
pub(crate) fn tq2_0_values(b: &BlockTq2_0) -> [i8; QK_K] {
    let mut q = [0i8; QK_K];
    for (out, bytes) in q.chunks_exact_mut(128).zip(b.qs.chunks_exact(32)) {
        for (l, o32) in out.chunks_exact_mut(32).enumerate() {
            for (o, &byte) in o32.iter_mut().zip(bytes) {
                *o = ((byte >> (2 * l)) & 3) as i8 - 1;
            }
        }
    }
    q
}

/// The 64 weights of a Q2_0 block in {-1, 0, 1, 2}: weight `j` in bits `2 (j % 4)` of byte `j / 4`.
#[inline]
pub(crate) fn q2_0_values(b: &BlockQ2_0) -> [i8; 64] {
    let mut q = [0i8; 64];
    for (j, o) in q.iter_mut().enumerate() {
        *o = ((b.qs[j / 4] >> (2 * (j % 4))) & 3) as i8 - 1;
    }
    q
}

/// The 128 signs of a Q1_0 block: bit `j % 8` of byte `j / 8` set is `+1`, clear is `-1`.
#[inline]
pub(crate) fn q1_0_values(b: &BlockQ1_0) -> [i8; 128] {
    let mut q = [0i8; 128];
    for (j, o) in q.iter_mut().enumerate() {
        *o = if (b.qs[j / 8] >> (j % 8)) & 1 == 1 {
            1
        } else {
            -1
        };
    }
    q
}

/// `N` doubled E2M1 values from `N / 2` bytes: the low nibbles first, then the high nibbles.
#[inline]
pub(crate) fn fp4_values<const N: usize>(qs: &[u8]) -> [i8; N] {
    let mut q = [0i8; N];
    let (lo, hi) = q.split_at_mut(N / 2);
    for ((l, h), &byte) in lo.iter_mut().zip(hi.iter_mut()).zip(qs) {
        *l = KVALUES_FP4[usize::from(byte & 0x0f)];
        *h = KVALUES_FP4[usize::from(byte >> 4)];
    }
    q
}

// ------------------------------------------------------------------------------------------------
// Dequantization
// ------------------------------------------------------------------------------------------------

/// `q * d` for every value, ggml's order for these types.
#[inline]
fn int_times<R: Real>(q: &[i8], d: R, y: &mut [R]) {
    for (v, &x) in y.iter_mut().zip(q) {
        *v = R::of_int(i32::from(x)) * d;
    }
}

pub(super) fn dq_tq1_0<R: Real>(b: &BlockTq1_0, y: &mut [R]) {
    int_times(&tq1_0_values(b), R::of_f16(b.d), y);
}

pub(super) fn dq_tq2_0<R: Real>(b: &BlockTq2_0, y: &mut [R]) {
    int_times(&tq2_0_values(b), R::of_f16(b.d), y);
}

pub(super) fn dq_q1_0<R: Real>(b: &BlockQ1_0, y: &mut [R]) {
    int_times(&q1_0_values(b), R::of_f16(b.d), y);
}

pub(super) fn dq_q2_0<R: Real>(b: &BlockQ2_0, y: &mut [R]) {
    int_times(&q2_0_values(b), R::of_f16(b.d), y);
}

pub(super) fn dq_mxfp4<R: Real>(b: &BlockMxfp4, y: &mut [R]) {
    int_times(
        &fp4_values::<32>(&b.qs),
        R::of_f32(e8m0_half_to_f32(b.e)),
        y,
    );
}

pub(super) fn dq_nvfp4<R: Real>(b: &BlockNvfp4, y: &mut [R]) {
    for (s, ys) in y.chunks_exact_mut(16).enumerate() {
        let q = fp4_values::<16>(&b.qs[8 * s..8 * s + 8]);
        int_times(&q, R::of_f32(ue4m3_half_to_f32(b.d[s])), ys);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trits_read_every_digit() {
        // 3^5 = 243 byte values hold five digits each, most significant first, as the
        // fixed-point fraction `value * 256 / 243` rounded up.
        for v in 0..243u32 {
            let byte = ((v * 256).div_ceil(243)) as u8;
            let mut rest = v;
            for n in (0..5).rev() {
                assert_eq!(
                    i32::from(trit(byte, n)) + 1,
                    (rest % 3) as i32,
                    "{v} digit {n}"
                );
                rest /= 3;
            }
        }
    }
}
