//! AVX2 kernels for the 8-row, 8-byte layouts of 32-weight blocks (`q4_0_8x8`, `iq4_nl_8x8`,
//! `mxfp4_8x8`, `q8_0_8x8`).
//!
//! A packed block holds 128 quant bytes: four 32-byte vectors, each with 8 bytes of four rows.
//! Vector 0 = rows 0-3 bytes 0-7, vector 1 = rows 4-7 bytes 0-7, vector 2 = rows 0-3 bytes 8-15,
//! vector 3 = rows 4-7 bytes 8-15. Low nibbles of byte `b` multiply activation `b`, high nibbles
//! activation `b + 16`, so one 8-byte broadcast of the activations serves all four rows of a
//! vector. Nibbles become signed weights through a 16-entry `pshufb` table (Q4_0's signed
//! nibbles, IQ4_NL's levels or MXFP4's doubled E2M1 values), and the signed x signed byte product uses `maddubs(|w|, a*sign(w))`
//! (no overflow: |w|, |a| <= 127 so a pair sums to at most 32258).
//!
//! Integer sums per row and block are exact; each block's sum is scaled by `d_w * d_a` and added
//! in f32, so results equal the scalar kernel up to float summation order.

use std::arch::x86_64::*;

use crate::blocks::{BlockMxfp4x8, BlockQ4_0x8, BlockQ8_0, BlockQ8_0x4, BlockQ8_0x4Sums, F16Bits};
use crate::cpu::KernelSet;
use crate::kernel_api::Kernels;
use crate::kernels::x86::Avx2;

/// One 8-row packed block with 32 weights per row and one scale per row (an f16, or MXFP4's E8M0
/// exponent), as the kernels see it: nibbles through a table (`TABLE`), or plain signed bytes
/// (`q8_0_8x8`).
pub(crate) trait Nibble8x8: Copy + Send + Sync + 'static {
    /// Signed weight of each nibble value (unused for byte blocks).
    const TABLE: [i8; 16];
    /// True when no decoded weight can be -128 (so the activations may carry the sign).
    const NEVER_MIN_I8: bool;
    /// The eight rows' scales as f32, in row order.
    unsafe fn row_scales(&self) -> __m256;
    /// The weights as signed bytes in the four-vector order documented above.
    unsafe fn decode(&self) -> [[__m256i; 2]; 4];
    /// The weights plus 128 as unsigned bytes (for `vpdpbusd`, which multiplies u8 by i8).
    unsafe fn decode_biased(&self) -> [[__m256i; 2]; 4];
}

/// A block of four Q8_0 activation rows interleaved in chunks of 8 bytes, as the GEMMs read it:
/// ggml's [`BlockQ8_0x4`] or the same with f32 scales and sums ([`BlockQ8_0x4Sums`]).
pub(crate) trait Q8Quad: Copy + Send + Sync + 'static {
    /// The four rows' quants, row `m`'s bytes `8k..8k + 8` at `32k + 8m`.
    fn quants(&self) -> &[i8; 128];
    /// The four rows' scales.
    unsafe fn scales(&self) -> __m128;
    /// `|a|` for row `m`'s four 8-byte broadcasts `a` (bytes 0-7, 8-15, 16-23, 24-31): computed
    /// here, or loaded where the quad carries it.
    #[inline(always)]
    unsafe fn abs_broadcasts(&self, m: usize, a: [__m256i; 4]) -> [__m256i; 4] {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            let _ = m;
            imp::abs4(a)
        }
    }
}

impl Q8Quad for BlockQ8_0x4 {
    #[inline(always)]
    fn quants(&self) -> &[i8; 128] {
        &self.qs
    }
    #[inline(always)]
    unsafe fn scales(&self) -> __m128 {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            // SAFETY: four halves are 8 bytes; the caller guarantees F16C.
            _mm_cvtph_ps(_mm_loadl_epi64(self.d.as_ptr() as *const __m128i))
        }
    }
}

/// `quants` and `scales` of a quad block with `qs` and f32 scales `d`; `$extra` adds methods.
macro_rules! f32_scale_quad {
    ($t:ty { $($extra:item)* }) => {
        impl Q8Quad for $t {
            #[inline(always)]
            fn quants(&self) -> &[i8; 128] {
                &self.qs
            }
            #[inline(always)]
            unsafe fn scales(&self) -> __m128 { unsafe {
                // SAFETY: four floats are 16 bytes; the caller guarantees SSE.
                _mm_loadu_ps(self.d.as_ptr())
            }}
            $($extra)*
        }
    };
}

f32_scale_quad!(BlockQ8_0x4Sums {});
f32_scale_quad!(crate::blocks::BlockQ8_0x4Abs {
    #[inline(always)]
    unsafe fn abs_broadcasts(&self, m: usize, _a: [__m256i; 4]) -> [__m256i; 4] { unsafe {
        // Row m's bytes 8k..8k + 8 sit at 32k + 8m, as in `qs`.
        let mut out = [_mm256_setzero_si256(); 4];
        for (k, o) in out.iter_mut().enumerate() {
            let bytes: [u8; 8] = self.abs[32 * k + 8 * m..32 * k + 8 * m + 8]
                .try_into()
                .expect("8 bytes");
            *o = _mm256_set1_epi64x(i64::from_le_bytes(bytes));
        }
        out
    }}
});

const fn has_min_i8(table: [i8; 16]) -> bool {
    let mut i = 0;
    while i < 16 {
        if table[i] == i8::MIN {
            return true;
        }
        i += 1;
    }
    false
}

/// `TABLE` with 128 added to every entry, as unsigned bytes.
const fn biased(table: [i8; 16]) -> [u8; 16] {
    let mut out = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        out[i] = (table[i] as u8) ^ 0x80;
        i += 1;
    }
    out
}

macro_rules! nibble8x8 {
    ($($t:ty => $table:expr, |$b:ident| $scales:expr),*) => {$(
        impl Nibble8x8 for $t {
            const TABLE: [i8; 16] = $table;
            const NEVER_MIN_I8: bool = !has_min_i8($table);
            #[inline(always)]
            unsafe fn row_scales(&self) -> __m256 {
                let $b = self;
                // SAFETY: the caller guarantees AVX2 and F16C; the helper reads a fixed-size
                // field.
                unsafe { $scales }
            }
            #[inline(always)]
            unsafe fn decode(&self) -> [[__m256i; 2]; 4] { unsafe {
                // SAFETY: the table is 16 bytes; the caller guarantees AVX2.
                let lut = _mm256_broadcastsi128_si256(_mm_loadu_si128(
                    Self::TABLE.as_ptr() as *const __m128i,
                ));
                imp::decode(lut, &self.qs)
            }}
            #[inline(always)]
            unsafe fn decode_biased(&self) -> [[__m256i; 2]; 4] { unsafe {
                const BIASED: [u8; 16] = biased($table);
                // SAFETY: the table is 16 bytes; the caller guarantees AVX2.
                let lut = _mm256_broadcastsi128_si256(_mm_loadu_si128(
                    BIASED.as_ptr() as *const __m128i,
                ));
                imp::decode(lut, &self.qs)
            }}
        }
    )*};
}

/// `q8_0_8x8`: vector `2k + h` holds bytes `8k..8k+8` of rows `4h..4h+4`. Mapped onto the nibble
/// order, bytes 0-7 play "low nibbles of bytes 0-7", bytes 8-15 "low nibbles of 8-15", bytes 16-23
/// "high nibbles of 0-7" and bytes 24-31 "high nibbles of 8-15".
impl Nibble8x8 for crate::blocks::BlockQ8_0x8 {
    const TABLE: [i8; 16] = [0; 16];
    const NEVER_MIN_I8: bool = false;
    #[inline(always)]
    unsafe fn row_scales(&self) -> __m256 {
        // SAFETY: the caller guarantees F16C; `d` is 8 halves.
        unsafe { imp::f16x8(&self.d) }
    }
    #[inline(always)]
    unsafe fn decode(&self) -> [[__m256i; 2]; 4] {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            // No closures here: they would not inherit the caller's target features.
            let p = self.qs.as_ptr() as *const __m256i;
            // SAFETY: vectors 0..8 of 32 bytes lie inside the 256-byte array.
            [
                [_mm256_loadu_si256(p), _mm256_loadu_si256(p.add(4))],
                [_mm256_loadu_si256(p.add(1)), _mm256_loadu_si256(p.add(5))],
                [_mm256_loadu_si256(p.add(2)), _mm256_loadu_si256(p.add(6))],
                [_mm256_loadu_si256(p.add(3)), _mm256_loadu_si256(p.add(7))],
            ]
        }
    }
    #[inline(always)]
    unsafe fn decode_biased(&self) -> [[__m256i; 2]; 4] {
        // SAFETY: callers meet this function's contract: the CPU has the features of the
        // kernel set that calls it, and the slices are as long as the body reads.
        unsafe {
            let flip = _mm256_set1_epi8(-128);
            let mut w = self.decode();
            for pair in w.iter_mut() {
                pair[0] = _mm256_xor_si256(pair[0], flip);
                pair[1] = _mm256_xor_si256(pair[1], flip);
            }
            w
        }
    }
}
nibble8x8!(
    crate::blocks::BlockQ4_0x8 => crate::blocks::SIGNED_NIBBLE, |b| imp::f16x8(&b.d),
    crate::blocks::BlockIq4Nlx8 => crate::blocks::IQ4NL_LEVELS, |b| imp::f16x8(&b.d),
    crate::blocks::BlockMxfp4x8 => crate::quant::grids::KVALUES_FP4, |b| imp::e8m0_half_x8(&b.e)
);

pub(in crate::kernels::x86) mod imp;
mod mxfp4;
mod tiles;

/// The AVX2 GEMV/GEMM of an 8x8 nibble (or byte) layout: signed bytes through the table.
pub(crate) fn kernels<P: Nibble8x8, Q: Q8Quad>(_: Avx2) -> Kernels<P, BlockQ8_0, Q> {
    Kernels::pair(KernelSet::Avx2, gemv::<P>, gemm::<P, Q>)
}

/// Q4_0's AVX2 kernels, which read the nibbles as unsigned bytes (no sign fix-ups, i16
/// accumulation; the activations carry the offset, `Q8_0SumsInterleaved<8>`).
pub(crate) fn q4_0_kernels(_: Avx2) -> Kernels<BlockQ4_0x8, BlockQ8_0, BlockQ8_0x4Sums> {
    Kernels::pair(KernelSet::Avx2, gemv_unsigned, gemm_unsigned)
}

/// `mxfp4_8x8`'s AVX2 kernels: the GEMV through the table, the GEMM on unsigned weights
/// (`mxfp4`).
pub(crate) fn mxfp4_kernels(token: Avx2) -> Kernels<BlockMxfp4x8, BlockQ8_0, BlockQ8_0x4Sums> {
    Kernels {
        gemm: mxfp4_gemm,
        tiled: Some(tiles::tiles::<BlockMxfp4x8>(MXFP4_TILE_MIN_QUADS)),
        ..kernels::<BlockMxfp4x8, BlockQ8_0x4Sums>(token)
    }
}

/// Quads from which MXFP4 takes the 24-row tiles (`tiles`).
const MXFP4_TILE_MIN_QUADS: usize = 2;

fn mxfp4_gemm(w: &[BlockMxfp4x8], a: &[BlockQ8_0x4Sums], out: &mut [f32]) {
    // SAFETY: only handed out by `mxfp4_kernels`, in exchange for an `Avx2` token.
    unsafe { mxfp4::gemm(w, a, out) }
}

fn gemv_unsigned(w: &[BlockQ4_0x8], a: &[BlockQ8_0], out: &mut [f32]) {
    // SAFETY: only handed out by `q4_0_kernels`, in exchange for an `Avx2` token.
    unsafe { imp::gemv_unsigned(w, a, out) }
}

fn gemm_unsigned(w: &[BlockQ4_0x8], a: &[BlockQ8_0x4Sums], out: &mut [f32]) {
    // SAFETY: only handed out by `q4_0_kernels`, in exchange for an `Avx2` token.
    unsafe { imp::gemm_unsigned(w, a, out) }
}

fn gemv<P: Nibble8x8>(w: &[P], a: &[BlockQ8_0], out: &mut [f32]) {
    // SAFETY: only handed out by `kernels`, in exchange for an `Avx2` token.
    unsafe { imp::gemv(w, a, out) }
}

fn gemm<P: Nibble8x8, Q: Q8Quad>(w: &[P], a: &[Q], out: &mut [f32]) {
    // SAFETY: only handed out by `kernels`, in exchange for an `Avx2` token.
    unsafe { imp::gemm(w, a, out) }
}

#[cfg(test)]
mod tests {
    use std::arch::x86_64::*;

    use crate::blocks::e8m0_half_to_f32;
    use crate::cpu::{CpuFeatures, KernelSet};

    #[target_feature(enable = "avx2")]
    unsafe fn decode(e: &[u8; 8]) -> [f32; 8] {
        let mut out = [0.0f32; 8];
        // SAFETY: AVX2, which the caller checked; `out` is 8 floats.
        unsafe { _mm256_storeu_ps(out.as_mut_ptr(), super::imp::e8m0_half_x8(e)) };
        out
    }

    /// Every exponent byte, the subnormal ones (0, 1) and 255 included, as the portable decode.
    #[test]
    fn e8m0_scales_equal_the_portable_decode() {
        if !CpuFeatures::get().has(KernelSet::Avx2) {
            return;
        }
        for first in (0..256).step_by(8) {
            let e: [u8; 8] = std::array::from_fn(|i| (first + i) as u8);
            // SAFETY: the CPU has AVX2 (checked above).
            let got = unsafe { decode(&e) };
            for (g, x) in got.iter().zip(e) {
                assert_eq!(g.to_bits(), e8m0_half_to_f32(x).to_bits(), "e = {x}");
            }
        }
    }
}
