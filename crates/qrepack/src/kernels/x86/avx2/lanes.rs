//! Moving 32-bit words between the lanes of AVX2 vectors, for the per-call tiles that lay rows
//! side by side.

use std::arch::x86_64::*;

/// An 8 x 8 matrix of 32-bit words, one row per vector, transposed: word `k` of vector `r`
/// becomes word `r` of vector `k`.
///
/// # Safety
/// The CPU must support AVX2.
#[inline(always)]
pub(super) unsafe fn transpose8(v: [__m256i; 8]) -> [__m256i; 8] {
    // SAFETY: register-only intrinsics of the caller's features.
    unsafe {
        // pairs of rows interleaved by words, then by word pairs: each 128-bit half then holds
        // one word of four rows, and the halves are regrouped
        let t: [__m256i; 8] = std::array::from_fn(|i| {
            let (a, b) = (v[2 * (i / 2)], v[2 * (i / 2) + 1]);
            if i % 2 == 0 {
                _mm256_unpacklo_epi32(a, b)
            } else {
                _mm256_unpackhi_epi32(a, b)
            }
        });
        let u: [__m256i; 8] = std::array::from_fn(|i| {
            // i = 4g + c: rows 4g..4g + 4, word c of each half
            let (g, c) = (i / 4, i % 4);
            let (a, b) = (t[4 * g + c / 2], t[4 * g + 2 + c / 2]);
            if c % 2 == 0 {
                _mm256_unpacklo_epi64(a, b)
            } else {
                _mm256_unpackhi_epi64(a, b)
            }
        });
        std::array::from_fn(|k| {
            if k < 4 {
                _mm256_permute2x128_si256::<0x20>(u[k], u[4 + k])
            } else {
                _mm256_permute2x128_si256::<0x31>(u[k - 4], u[k])
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::{CpuFeatures, KernelSet};

    #[test]
    fn transpose8_swaps_rows_and_columns() {
        if !CpuFeatures::get().has(KernelSet::Avx2) {
            return;
        }
        let m: [[u32; 8]; 8] = std::array::from_fn(|r| std::array::from_fn(|k| (r * 8 + k) as u32));
        // SAFETY: AVX2 was checked above; the loads and stores go through 32-byte arrays.
        let t = unsafe {
            let rows = m.map(|row| _mm256_loadu_si256(row.as_ptr().cast()));
            transpose8(rows).map(|v| {
                let mut out = [0u32; 8];
                _mm256_storeu_si256(out.as_mut_ptr().cast(), v);
                out
            })
        };
        for (k, col) in t.iter().enumerate() {
            for (r, &word) in col.iter().enumerate() {
                assert_eq!(word, m[r][k], "word {r} of vector {k}");
            }
        }
    }
}
