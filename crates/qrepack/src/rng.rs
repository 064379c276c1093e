//! The splitmix64 generator behind every piece of deterministic data in the project: the unit
//! and integration tests, the benches, and the CLI's benchmark data, which is bit-for-bit the
//! ggml peer's (`ggml_mm_bench`), so a seed means the same matrix everywhere.
//!
//! The state is advanced *before* each output (`s += GAMMA`, then mixed). splitmix64 is
//! counter-based: output `i` of a stream seeded with `s` only depends on `s + (i + 1) * GAMMA`,
//! so a long stream can be filled in parallel chunks ([`SplitMix64::at`]) without changing a
//! value.
//!
//! ```
//! use qrepack::rng::SplitMix64;
//! let mut g = SplitMix64::new(0);
//! assert_eq!(g.next_u64(), 0xe220_a839_7b1d_cdaf); // Vigna's splitmix64.c, seed 0
//! let v = SplitMix64::new(42).uniform_pm1();
//! assert!((-1.0..1.0).contains(&v));
//! // Output 5 of a stream, reached directly:
//! let mut a = SplitMix64::new(7);
//! let fifth = (0..5).map(|_| a.next_u64()).last().unwrap();
//! assert_eq!(SplitMix64::at(7, 4).next_u64(), fifth);
//! ```

/// The splitmix64 increment ("golden gamma").
pub const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// A splitmix64 stream.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// The stream seeded with `seed`.
    pub const fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The stream seeded with `seed`, advanced past its first `skip` outputs.
    pub const fn at(seed: u64, skip: u64) -> Self {
        SplitMix64::new(seed.wrapping_add(skip.wrapping_mul(GAMMA)))
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GAMMA);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)` from the top 24 bits (exact in f32).
    #[inline]
    pub fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Uniform in `[-1, 1)`: `2u - 1`, exactly the peer's value.
    #[inline]
    pub fn uniform_pm1(&mut self) -> f32 {
        pm1(self.next_u64())
    }

    /// Uniform in `0..n` (`n > 0`; modulo bias is irrelevant for test data).
    #[inline]
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// `n` values of [`SplitMix64::uniform_pm1`].
    pub fn pm1_vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.uniform_pm1()).collect()
    }
}

/// The value `2u - 1` of one 64-bit output, computed as the peer computes it (in f64, then
/// rounded to f32, which is exact for 24-bit `u`).
#[inline]
pub fn pm1(r: u64) -> f32 {
    ((r >> 40) as f64 * (1.0 / 16_777_216.0) * 2.0 - 1.0) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_answers_and_skip() {
        // Vigna's splitmix64.c reference outputs for seed 0.
        let mut g = SplitMix64::new(0);
        assert_eq!(g.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(g.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(g.next_u64(), 0x06c4_5d18_8009_454f);
        let mut a = SplitMix64::new(99);
        let seq: Vec<u64> = (0..10).map(|_| a.next_u64()).collect();
        for (i, v) in seq.iter().enumerate() {
            assert_eq!(SplitMix64::at(99, i as u64).next_u64(), *v);
        }
    }

    #[test]
    fn pm1_matches_f32_formula() {
        let mut g = SplitMix64::new(5);
        for _ in 0..1000 {
            let r = g.next_u64();
            let f32_formula = ((r >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0;
            assert_eq!(pm1(r), f32_formula);
        }
    }
}
