//! Quantizers of the ternary types TQ1_0 and TQ2_0, the FP4 types MXFP4 and NVFP4, and Q1_0 /
//! Q2_0, bit-compatible with ggml's `quantize_row_*_ref`.
//!
//! None of them searches for a scale: each takes its scale from the block's largest magnitude
//! (or, for Q1_0, its mean magnitude) and rounds every weight on its own. What has to match ggml
//! is the exact f32 arithmetic and the C conversions whose results the bytes keep even for
//! inputs the format cannot represent (see [`c_round_to_int`]).

use super::grids::KVALUES_FP4;
use crate::blocks::{
    e8m0_half_to_f32, ue4m3_half_to_f32, BlockMxfp4, BlockNvfp4, BlockQ1_0, BlockQ2_0, BlockTq1_0,
    BlockTq2_0, F16Bits,
};
use crate::types::QK_K;

/// C's `(long) roundf(v)` / `lroundf(v)` on x86-64 (ties away from zero): values without an
/// integer in range (NaN, infinities, `|v| >= 2^63`) give the "integer indefinite"
/// `i64::MIN` that `cvttss2si` returns, where Rust's `as` would saturate. ggml's ternary and Q2_0
/// quantizers feed such values through when a block's scale is so small that its inverse
/// overflows, and the integer they get decides the stored bits.
#[inline]
fn c_round_to_int(v: f32) -> i64 {
    const LIMIT: f32 = 9_223_372_036_854_775_808.0; // 2^63
    let r = v.round();
    if r.is_nan() || r.abs() >= LIMIT {
        i64::MIN
    } else {
        r as i64
    }
}

/// The largest magnitude of `x` as ggml's `MAX(amax, fabsf(v))` folds it.
fn max_magnitude(x: &[f32]) -> f32 {
    x.iter()
        .fold(0.0f32, |m, &v| if m > v.abs() { m } else { v.abs() })
}

/// `1 / d`, or 0 for a zero scale (ggml's `d ? 1.0f/d : 0.0f`).
#[inline]
fn inverse_or_zero(d: f32) -> f32 {
    if d != 0.0 {
        1.0 / d
    } else {
        0.0
    }
}

/// The ternary digit (0, 1, 2 for -1, 0, +1) of `v` at inverse scale `id`, as the `int` ggml
/// computes: C truncates the `long` to 32 bits, so the indefinite value becomes 1.
#[inline]
fn ternary_digit(v: f32, id: f32) -> i32 {
    (c_round_to_int(v * id) as i32).wrapping_add(1)
}

/// Packs the digits of `x[m + n * stride]`, `n` in `0..count`, most significant first, into
/// the fraction `ceil(value * 256 / 243)` of the TQ1_0 byte, with ggml's 8-bit wrapping.
fn pack_trits(x: &[f32], m: usize, stride: usize, count: usize, id: f32) -> u8 {
    let mut q = 0u8;
    for n in 0..count {
        q = q
            .wrapping_mul(3)
            .wrapping_add(ternary_digit(x[m + n * stride], id) as u8);
    }
    // Four digits (the `qh` bytes) sit in the top four of five places.
    if count == 4 {
        q = q.wrapping_mul(3);
    }
    (u16::from(q) * 256).div_ceil(243) as u8
}

pub(super) fn q_tq1_0(x: &[f32]) -> BlockTq1_0 {
    let d = max_magnitude(x);
    let id = inverse_or_zero(d);
    let mut b = BlockTq1_0 {
        qs: [0; 48],
        qh: [0; 4],
        d: F16Bits::from_f32(d),
    };
    // Weights 0..160: five digits per byte of qs[0..32], 32 apart.
    for (m, q) in b.qs[..32].iter_mut().enumerate() {
        *q = pack_trits(&x[..160], m, 32, 5, id);
    }
    // Weights 160..240: five digits per byte of qs[32..48], 16 apart.
    for (m, q) in b.qs[32..].iter_mut().enumerate() {
        *q = pack_trits(&x[160..240], m, 16, 5, id);
    }
    // Weights 240..256: four digits per byte of qh, 4 apart.
    for (m, q) in b.qh.iter_mut().enumerate() {
        *q = pack_trits(&x[240..], m, 4, 4, id);
    }
    b
}

pub(super) fn q_tq2_0(x: &[f32]) -> BlockTq2_0 {
    debug_assert_eq!(x.len(), QK_K);
    let d = max_magnitude(x);
    let id = inverse_or_zero(d);
    let mut b = BlockTq2_0 {
        qs: [0; 64],
        d: F16Bits::from_f32(d),
    };
    for (xs, qs) in x.chunks_exact(128).zip(b.qs.chunks_exact_mut(32)) {
        for (m, q) in qs.iter_mut().enumerate() {
            *q = (0..4).fold(0u8, |acc, n| {
                let digit = (ternary_digit(xs[m + 32 * n], id) & 3) as u8;
                acc.wrapping_add(digit << (2 * n))
            });
        }
    }
    b
}

/// Index into [`KVALUES_FP4`] of the level closest to `x` at half-step `e` (the error computed
/// as ggml does, in f32; the first of equally close levels wins).
fn best_fp4_index(x: f32, e: f32) -> u8 {
    let err = |i: usize| (f32::from(KVALUES_FP4[i]) * e - x).abs();
    let mut best = 0usize;
    let mut best_err = err(0);
    for i in 1..16 {
        let e_i = err(i);
        if e_i < best_err {
            best = i;
            best_err = e_i;
        }
    }
    best as u8
}

/// FP4 codes of `x` at half-step `d`: weight `j` in the low nibble of byte `j`, weight
/// `j + len / 2` in its high nibble.
fn pack_fp4(x: &[f32], d: f32, qs: &mut [u8]) {
    let (lo, hi) = x.split_at(x.len() / 2);
    for ((q, &a), &b) in qs.iter_mut().zip(lo).zip(hi) {
        *q = best_fp4_index(a, d) | (best_fp4_index(b, d) << 4);
    }
}

/// The largest magnitude as ggml's FP4 quantizers find it (`if (amax < fabsf(v))`: a NaN never
/// replaces it).
fn fp4_amax(x: &[f32]) -> f32 {
    x.iter()
        .fold(0.0f32, |m, &v| if m < v.abs() { v.abs() } else { m })
}

/// The E8M0 exponent that puts a block's largest magnitude among the top FP4 levels:
/// `floor(log2(amax)) - 2 + 127`, converted to a byte the way x86 C does (through a 32-bit
/// `int`, wrapping), so that the tiniest blocks wrap as in ggml.
fn mxfp4_exponent(amax: f32) -> u8 {
    if amax > 0.0 {
        // f32::log2 is the platform's log2f, the function ggml calls: a correctly rounded
        // substitute could differ just below a power of two, where the floor changes.
        let e = amax.log2().floor() - 2.0 + 127.0;
        let as_int = if e.is_nan() || e.abs() >= 2_147_483_648.0 {
            i32::MIN
        } else {
            e as i32
        };
        as_int as u8
    } else {
        0
    }
}

pub(super) fn q_mxfp4(x: &[f32]) -> BlockMxfp4 {
    let e = mxfp4_exponent(fp4_amax(x));
    let mut b = BlockMxfp4 { e, qs: [0; 16] };
    pack_fp4(x, e8m0_half_to_f32(e), &mut b.qs);
    b
}

/// ggml's rounding of a positive scale to UE4M3: the top three mantissa bits rounded by the
/// next one (half up, carrying into the exponent), saturating at 448 (`0x7e`), and below the
/// normal range `man * 2^-9` rounded half up, at most 7.
fn f32_to_ue4m3(x: f32) -> u8 {
    // NaN and non-positive values alike
    if x.is_nan() || x <= 0.0 {
        return 0;
    }
    let x = if x > 448.0 { 448.0 } else { x };
    let bits = x.to_bits();
    let exp = ((bits >> 23) & 0xff) as i32 - 127 + 7;
    let man = ((bits >> 20) & 7) as i32;
    if exp <= 0 {
        // x < 2^-6, so the product is far below i32's range.
        let sub = (x * 512.0 + 0.5) as i32;
        return if sub < 1 { 0 } else { sub.min(7) as u8 };
    }
    if exp >= 15 {
        return 0x7e;
    }
    let (exp, man) = match man + ((bits >> 19) & 1) as i32 {
        8 => (exp + 1, 0),
        m => (exp, m),
    };
    if exp >= 15 {
        0x7e
    } else {
        ((exp << 3) | man) as u8
    }
}

pub(super) fn q_nvfp4(x: &[f32]) -> BlockNvfp4 {
    let mut b = BlockNvfp4 {
        d: [0; 4],
        qs: [0; 32],
    };
    for (s, xs) in x.chunks_exact(16).enumerate() {
        let ue = f32_to_ue4m3(fp4_amax(xs) / 6.0);
        b.d[s] = ue;
        pack_fp4(xs, ue4m3_half_to_f32(ue), &mut b.qs[8 * s..8 * s + 8]);
    }
    b
}

pub(super) fn q_q1_0(x: &[f32]) -> BlockQ1_0 {
    let sum = x.iter().fold(0.0f32, |s, v| s + v.abs());
    let mut b = BlockQ1_0 {
        d: F16Bits::from_f32(sum / x.len() as f32),
        qs: [0; 16],
    };
    for (j, &v) in x.iter().enumerate() {
        // `>=` keeps -0.0 positive and leaves NaN negative, as ggml does.
        if v >= 0.0 {
            b.qs[j / 8] |= 1 << (j % 8);
        }
    }
    b
}

pub(super) fn q_q2_0(x: &[f32]) -> BlockQ2_0 {
    let amax = x
        .iter()
        .fold(0.0f32, |m, &v| if v.abs() > m { v.abs() } else { m });
    let id = if amax > 0.0 { 1.0 / amax } else { 0.0 };
    let mut b = BlockQ2_0 {
        d: F16Bits::from_f32(amax),
        qs: [0; 16],
    };
    for (j, &v) in x.iter().enumerate() {
        // `(int)roundf(..)`: the indefinite value (a NaN product) is i32::MIN, clamped to 0.
        let r = c_round_to_int(v * id);
        let q = if r == i64::MIN || r < i64::from(i32::MIN) || r > i64::from(i32::MAX) {
            i32::MIN
        } else {
            r as i32
        };
        let q = q.saturating_add(1).clamp(0, 3) as u8;
        b.qs[j / 4] |= q << (2 * (j % 4));
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_rounding_ties_away_and_has_no_saturation() {
        assert_eq!(c_round_to_int(0.5), 1);
        assert_eq!(c_round_to_int(-0.5), -1);
        assert_eq!(c_round_to_int(1.49), 1);
        assert_eq!(c_round_to_int(f32::NAN), i64::MIN);
        assert_eq!(c_round_to_int(f32::INFINITY), i64::MIN);
        assert_eq!(c_round_to_int(-1e30), i64::MIN);
        // the indefinite value truncated to a C int is 0, plus one: the digit of a zero
        assert_eq!(ternary_digit(0.0, f32::INFINITY), 1);
    }

    #[test]
    fn ue4m3_rounding() {
        for code in (1..0x78u8).chain([0x7e]) {
            // every code's own value (doubled back from the halved decoder) maps to itself
            let v = 2.0 * ue4m3_half_to_f32(code);
            assert_eq!(f32_to_ue4m3(v), code, "{code:#x}");
        }
        assert_eq!(f32_to_ue4m3(1e9), 0x7e);
        assert_eq!(f32_to_ue4m3(-1.0), 0);
        assert_eq!(f32_to_ue4m3(f32::NAN), 0);
        assert_eq!(f32_to_ue4m3(1e-9), 0);
        // halfway between 1.0 and 1.125 rounds up
        assert_eq!(f32_to_ue4m3(1.0625), 0x39);
    }

    #[test]
    fn trit_bytes_decode_back() {
        let mut x = [0.0f32; QK_K];
        for (i, v) in x.iter_mut().enumerate() {
            *v = [(-1.0), 0.0, 1.0][i * 7 % 3];
        }
        let b = q_tq1_0(&x);
        let q = super::super::lowbit::tq1_0_values(&b);
        for (i, (&v, &t)) in x.iter().zip(&q).enumerate() {
            assert_eq!(v, f32::from(t), "weight {i}");
        }
    }
}
