//! The deterministic benchmark data, bit-for-bit the same as the ggml peer (`ggml_mm_bench.cpp`).
//!
//! The stream is the library's splitmix64 ([`qrepack::rng`]): the state is advanced *before*
//! each output, `u = (next() >> 40) * 2^-24` in `[0, 1)`, value `2u - 1` (computed in f64, then
//! rounded to f32, which is exact). The weights `W` are `rows x cols` row-major from `seed`, the
//! activations `X` are `batch x cols` row-major from `seed + 1`.
//!
//! splitmix64 is a counter-based generator (output `i` only depends on `seed + (i + 1) * GAMMA`),
//! so the large matrices are filled in parallel without changing a single value.

use anyhow::{bail, Context, Result};
use qrepack::rng::SplitMix64;
use qrepack::GgmlType;
use rayon::prelude::*;

/// `n` values of the stream seeded with `seed`, filled in parallel on the current rayon pool.
pub fn stream(seed: u64, n: usize) -> Vec<f32> {
    const CHUNK: usize = 1 << 16;
    let mut out = vec![0.0f32; n];
    out.par_chunks_mut(CHUNK).enumerate().for_each(|(c, dst)| {
        let mut g = SplitMix64::at(seed, (c * CHUNK) as u64);
        for v in dst {
            *v = g.uniform_pm1();
        }
    });
    out
}

/// The peer's weight matrix: `rows x cols` row-major from `seed`.
pub fn weights(seed: u64, rows: usize, cols: usize) -> Result<Vec<f32>> {
    Ok(stream(seed, elements(rows, cols)?))
}

/// The peer's activations: `batch x cols` row-major from `seed + 1`.
pub fn activations(seed: u64, batch: usize, cols: usize) -> Result<Vec<f32>> {
    Ok(stream(seed.wrapping_add(1), elements(batch, cols)?))
}

/// Most f32 values one matrix may hold (16 GiB): beyond that we refuse instead of aborting on
/// a failed allocation.
const MAX_ELEMENTS: usize = 1 << 32;

fn elements(rows: usize, cols: usize) -> Result<usize> {
    match rows.checked_mul(cols) {
        Some(n) if n <= MAX_ELEMENTS => Ok(n),
        _ => bail!("{rows} x {cols} is too large (more than {MAX_ELEMENTS} values)"),
    }
}

/// Quantizes `w` (`rows x cols`, row-major) to `ty` with [`qrepack::quantize`], in row chunks on
/// the current rayon pool. ggml quantizes every row on its own (the peer splits rows over threads
/// the same way), so the bytes are those of one whole-matrix call. The types ggml quantizes only
/// with an importance matrix (IQ2_XXS, IQ2_XS, IQ1_S, IQ1_M) get a uniform one, every column
/// weighted 1, as the ggml peer gives them.
pub fn quantize(ty: GgmlType, w: &[f32], rows: usize, cols: usize) -> Result<Vec<u8>> {
    let row_bytes = ty.row_bytes(cols)?;
    let total = row_bytes
        .checked_mul(rows)
        .context("quantized matrix size overflows")?;
    let chunk_rows = rows.div_ceil(4 * rayon::current_num_threads()).max(1);
    let uniform = vec![1.0f32; cols];
    let parts: Vec<Vec<u8>> = w
        .par_chunks(chunk_rows * cols)
        .map(|c| {
            if ty.is_quantizable() {
                qrepack::quantize(ty, c, c.len() / cols, cols)
            } else {
                qrepack::quantize_with_importance(ty, c, c.len() / cols, cols, &uniform)
            }
        })
        .collect::<Result<_, _>>()
        .with_context(|| format!("quantizing {rows} x {cols} weights to {ty} failed"))?;
    let mut out = Vec::with_capacity(total);
    for p in parts {
        out.extend_from_slice(&p);
    }
    if out.len() != total {
        bail!(
            "quantizing {rows} x {cols} weights to {ty} gave {} bytes, expected {total}",
            out.len()
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use qrepack::rng::pm1;

    #[test]
    fn splitmix64_known_answers() {
        // Reference outputs of splitmix64 seeded with 0 (Vigna's splitmix64.c).
        let mut g = SplitMix64::new(0);
        assert_eq!(g.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(g.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(g.next_u64(), 0x06C4_5D18_8009_454F);
        // seed 42 (W) and 43 (X), computed from the recipe by hand (Python big integers)
        let mut g = SplitMix64::new(42);
        assert_eq!(g.next_u64(), 0xBDD7_3226_2FEB_6E95);
        assert_eq!(g.next_u64(), 0x28EF_E333_B266_F103);
        let mut g = SplitMix64::new(43);
        assert_eq!(g.next_u64(), 0xBA69_EC90_EB4F_EF88);
    }

    #[test]
    fn first_values_match_the_recipe() {
        // (0xBDD732262FEB6E95 >> 40) = 12441394 -> 2 * 12441394 / 2^24 - 1
        let w = weights(42, 1, 3).unwrap();
        assert_eq!(w[0], (2.0 * 12_441_394.0 / 16_777_216.0 - 1.0) as f32);
        assert_eq!(w[0], 0.483_129_74);
        assert_eq!(w[1], (2.0 * 2_682_851.0 / 16_777_216.0 - 1.0) as f32);
        assert_eq!(w[2], (2.0 * 4_674_151.0 / 16_777_216.0 - 1.0) as f32);
        let x = activations(42, 1, 3).unwrap();
        assert_eq!(x[0], (2.0 * 12_216_812.0 / 16_777_216.0 - 1.0) as f32);
        assert_eq!(x[1], (2.0 * 10_280_600.0 / 16_777_216.0 - 1.0) as f32);
        assert_eq!(x[2], (2.0 * 7_259_684.0 / 16_777_216.0 - 1.0) as f32);
    }

    #[test]
    fn parallel_fill_equals_the_sequential_stream() {
        let n = 3 * (1 << 16) + 123;
        let par = stream(42, n);
        let mut g = SplitMix64::new(42);
        for (i, v) in par.iter().enumerate() {
            assert_eq!(v.to_bits(), g.uniform_pm1().to_bits(), "index {i}");
        }
        // row-major: row 1 continues where row 0 stopped
        assert_eq!(weights(7, 2, 5).unwrap()[5..], stream(7, 10)[5..]);
    }

    #[test]
    fn values_are_in_range_and_exact_in_f32() {
        assert_eq!(pm1(0), -1.0);
        assert_eq!(pm1(u64::MAX), 1.0 - 2.0 / 16_777_216.0);
        for v in stream(1, 10_000) {
            assert!((-1.0..1.0).contains(&v));
            // 2u - 1 is a multiple of 2^-23: the f64 -> f32 rounding is exact
            assert_eq!((v as f64 * 8_388_608.0).fract(), 0.0);
        }
    }

    #[test]
    fn oversized_matrices_are_refused() {
        assert!(weights(42, usize::MAX, 2).is_err());
        assert!(weights(42, 1 << 20, 1 << 20).is_err());
    }

    #[test]
    fn importance_types_get_a_uniform_importance() {
        let (rows, cols) = (9, 512);
        let w = weights(3, rows, cols).unwrap();
        let ones = vec![1.0f32; cols];
        for ty in [GgmlType::IQ2_XXS, GgmlType::IQ1_M] {
            let whole = qrepack::quantize_with_importance(ty, &w, rows, cols, &ones).unwrap();
            assert_eq!(quantize(ty, &w, rows, cols).unwrap(), whole, "{ty}");
        }
        let whole = qrepack::quantize(GgmlType::Q4_0, &w, rows, cols).unwrap();
        assert_eq!(quantize(GgmlType::Q4_0, &w, rows, cols).unwrap(), whole);
    }
}
