//! `mxfp4_8x8`'s AVX2 GEMM on unsigned weights, in the form of Q4_0's (`imp::gemm_unsigned`):
//! the nibbles regrouped to one row per 32-bit lane, looked up as the doubled E2M1 values plus
//! 12 (unsigned bytes, 0 to 24), multiplied with 4-byte broadcasts of each activation row and
//! summed in `i16` with no sign fix-ups; the offset, 12 times each row's quant sum, comes from
//! the quad (`BlockQ8_0x4Sums` carries 128 times that sum).
//!
//! The two halves of a block (8 bytes of each row, then the next 8) are decoded and multiplied
//! one after the other, so that four decoded vectors are live, not eight, beside the four
//! accumulators. Against the signed GEMM (`maddubs(|a|, sign(w, a))` on the stored vectors) and
//! the per-call 8-row tiles of plain MXFP4 rows this is the fastest form at every batch on an
//! AVX2-only Zen 3 (the tiles' timings are in `select.rs`; batch 4 0.91-1.09 -> 0.75-0.81 ms,
//! 8 1.78-2.2 -> 1.45-1.69 at 4096x4096, 2 threads).
//!
//! # Exactness
//!
//! Four products of a byte `u <= 24` and an activation (`|a| <= 128`) per `i16` lane: at most
//! 12288 in magnitude, summed before the widening `madd`; the rest is exact `i32`
//! arithmetic. Only the order of the `f32` products and sums differs from the portable kernel.

use std::arch::x86_64::*;

use super::imp::{e8m0_half_x8, nibble_rows_half, row_order};
use crate::blocks::{BlockMxfp4x8, BlockQ8_0x4Sums};
use crate::quant::grids::KVALUES_FP4;

/// What makes every doubled E2M1 value (`|v| <= 12`) an unsigned byte.
const OFFSET: i8 = 12;

/// The GEMM of one 8-row group (`w`, one block per 32 columns) with one quad of activation
/// rows (`a`), into `out[8 m + r]` for activation row `m` and weight row `r`.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn gemm(w: &[BlockMxfp4x8], a: &[BlockQ8_0x4Sums], out: &mut [f32]) {
    // SAFETY: the caller's features; every pointer read comes from a fixed-size array field,
    // and `out` holds at least 32 floats (asserted below).
    unsafe {
        let order = row_order();
        let ones = _mm256_set1_epi16(1);
        let table = KVALUES_FP4.map(|v| v + OFFSET);
        let lut = _mm256_broadcastsi128_si256(_mm_loadu_si128(table.as_ptr().cast()));
        // Named accumulators: an array indexed in a loop stays on the stack.
        let mut acc0 = _mm256_setzero_ps();
        let mut acc1 = _mm256_setzero_ps();
        let mut acc2 = _mm256_setzero_ps();
        let mut acc3 = _mm256_setzero_ps();
        for (wb, ab) in w.iter().zip(a) {
            let q = ab.qs.as_ptr();
            // Row m's bytes 4i..4i + 4 sit at 32 (i / 2) + 8m + 4 (i % 2) in the quad.
            macro_rules! a4 {
                ($m:literal, $i:expr) => {
                    _mm256_set1_epi32(std::ptr::read_unaligned(
                        q.add(32 * ($i / 2) + 8 * $m + 4 * ($i % 2)) as *const i32,
                    ))
                };
            }
            // Half `h` of the block (weights 8h..8h + 8 and 16 + 8h..) against every row: four
            // products per `i16` lane (eight could pass 2^15), widened. The two halves one
            // after the other keep four decoded vectors live, not eight.
            macro_rules! half {
                ($h:literal) => {{
                    let w = nibble_rows_half::<$h>(&wb.qs, lut);
                    macro_rules! row {
                        ($m:literal) => {
                            _mm256_madd_epi16(
                                _mm256_add_epi16(
                                    _mm256_add_epi16(
                                        _mm256_maddubs_epi16(w[0][0], a4!($m, { 2 * $h })),
                                        _mm256_maddubs_epi16(w[0][1], a4!($m, { 2 * $h + 4 })),
                                    ),
                                    _mm256_add_epi16(
                                        _mm256_maddubs_epi16(w[1][0], a4!($m, { 2 * $h + 1 })),
                                        _mm256_maddubs_epi16(w[1][1], a4!($m, { 2 * $h + 5 })),
                                    ),
                                ),
                                ones,
                            )
                        };
                    }
                    [row!(0), row!(1), row!(2), row!(3)]
                }};
            }
            let low = half!(0);
            let high = half!(1);
            let dw = _mm256_permutevar8x32_ps(e8m0_half_x8(&wb.e), order);
            macro_rules! finish {
                ($m:literal, $acc:ident) => {
                    // 12 Σ a of the row, from the quad's 128 Σ a (a multiple of 128: exact).
                    let offset = _mm256_set1_epi32((ab.offsets[$m] >> 7) * i32::from(OFFSET));
                    let dots = _mm256_sub_epi32(_mm256_add_epi32(low[$m], high[$m]), offset);
                    let scale = _mm256_mul_ps(dw, _mm256_broadcast_ss(&ab.d[$m]));
                    $acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots), scale, $acc);
                };
            }
            finish!(0, acc0);
            finish!(1, acc1);
            finish!(2, acc2);
            finish!(3, acc3);
        }
        assert!(out.len() >= 32);
        for (m, acc_m) in [acc0, acc1, acc2, acc3].iter().enumerate() {
            // SAFETY: `out` holds at least 32 floats (asserted above).
            _mm256_storeu_ps(
                out.as_mut_ptr().add(8 * m),
                _mm256_permutevar8x32_ps(*acc_m, order),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::{CpuFeatures, KernelSet};

    /// Every nibble value against activations of -128 and 127 (the widest `i16` sums and the
    /// offset of the most negative row sum): exact integers, as the values' products.
    #[test]
    fn extremes_are_exact() {
        if !CpuFeatures::get().has(KernelSet::Avx2) {
            return;
        }
        for nibble in 0..16u8 {
            for q in [-128i8, 127] {
                // e = 128: the halved scale 2^0, so an output is 32 · value · a.
                let w = [BlockMxfp4x8 {
                    e: [128; 8],
                    qs: [nibble * 0x11; 128],
                }];
                let a = [BlockQ8_0x4Sums {
                    d: [1.0; 4],
                    offsets: [128 * 32 * i32::from(q); 4],
                    qs: [q; 128],
                }];
                let mut out = [f32::NAN; 32];
                // SAFETY: the CPU has AVX2, FMA and F16C (checked above).
                unsafe { gemm(&w, &a, &mut out) };
                let want = 32.0 * f32::from(KVALUES_FP4[usize::from(nibble)]) * f32::from(q);
                assert!(
                    out.iter().all(|&o| o == want),
                    "nibble {nibble}, a {q}: {out:?}"
                );
            }
        }
    }
}
