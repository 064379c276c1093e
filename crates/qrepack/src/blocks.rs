//! ggml's block structures, byte for byte.
//!
//! Weight blocks hold their f16 scales as raw little-endian bytes ([`F16Bits`]), so every weight
//! block has alignment 1 and any byte slice (a memory map, a `Vec<u8>`) can be viewed as a slice
//! of blocks without copying ([`view_blocks`]). The activation blocks that qrepack itself allocates
//! (`Q8_K`, `Q8_Kx4`) keep ggml's natural `f32`/`i16` fields.

use bytemuck::{Pod, Zeroable};
use half::f16;

use crate::error::Error;
use crate::types::QK_K;

/// An IEEE half stored as two little-endian bytes (ggml's `ggml_half`), alignment 1.
///
/// ```
/// use qrepack::blocks::F16Bits;
/// let h = F16Bits::from_f32(0.5);
/// assert_eq!(h.to_f32(), 0.5);
/// assert_eq!(h.0, 0x3800u16.to_le_bytes());
/// ```
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct F16Bits(pub [u8; 2]);

impl F16Bits {
    /// Rounds to nearest-even, as ggml's `GGML_FP32_TO_FP16` (F16C `vcvtps2ph`) does.
    #[inline]
    pub fn from_f32(x: f32) -> Self {
        F16Bits(f16::from_f32(x).to_bits().to_le_bytes())
    }
    /// Exact widening to f32, in integer operations: the `half` crate picks between hardware
    /// and software conversion at run time on every call, which costs more than a block's
    /// integer dot product.
    #[inline]
    pub fn to_f32(self) -> f32 {
        let bits = u16::from_le_bytes(self.0) as u32;
        let sign = (bits & 0x8000) << 16;
        let exp = (bits >> 10) & 0x1f;
        let man = bits & 0x3ff;
        let magnitude = match (exp, man) {
            (0, 0) => 0,
            (0, _) => {
                // Subnormal `man * 2^-24`: renormalise around its top set bit `p`.
                let p = 31 - man.leading_zeros();
                ((p + 103) << 23) | ((man << (23 - p)) & 0x7f_ffff)
            }
            (0x1f, _) => 0x7f80_0000 | (man << 13),
            _ => ((exp + 112) << 23) | (man << 13),
        };
        f32::from_bits(sign | magnitude)
    }
}

/// The 16 non-linear levels of IQ4_NL and IQ4_XS.
pub const IQ4NL_LEVELS: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// Q4_0 nibbles after the xor 8 of ggml's interleaved layouts: the nibble read as signed 4-bit
/// is the weight `q - 8`.
pub(crate) const SIGNED_NIBBLE: [i8; 16] = [0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1];

macro_rules! blocks {
    ($( $(#[$m:meta])* $name:ident [$size:expr] { $($field:ident : $fty:ty),* $(,)? } )*) => {$(
        $(#[$m])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
        // the fields carry ggml's names for its bytes; each struct's documentation says what
        // they hold
        #[allow(missing_docs)]
        pub struct $name { $(pub $field: $fty),* }
        const _: () = assert!(std::mem::size_of::<$name>() == $size);
    )*};
}

blocks! {
    /// 32 weights: `d * (q - 8)`, 4-bit `q`; low nibbles are weights 0..16, high nibbles 16..32.
    BlockQ4_0 [18] { d: F16Bits, qs: [u8; 16] }
    /// 32 weights: `d * q + m`.
    BlockQ4_1 [20] { d: F16Bits, m: F16Bits, qs: [u8; 16] }
    /// 32 weights: `d * (q - 16)` with the fifth bit of weight `j` in bit `j` of `qh`.
    BlockQ5_0 [22] { d: F16Bits, qh: [u8; 4], qs: [u8; 16] }
    /// 32 weights: `d * q + m`, 5-bit `q`.
    BlockQ5_1 [24] { d: F16Bits, m: F16Bits, qh: [u8; 4], qs: [u8; 16] }
    /// 32 weights: `d * q`, 8-bit `q`.
    BlockQ8_0 [34] { d: F16Bits, qs: [i8; 32] }
    /// 32 activations: `d * q`, with `s = d * sum(q)`.
    BlockQ8_1 [36] { d: F16Bits, s: F16Bits, qs: [i8; 32] }
    /// 256 weights in 16 groups of 16, 2-bit, 4-bit scales and mins.
    BlockQ2K [84] { scales: [u8; 16], qs: [u8; 64], d: F16Bits, dmin: F16Bits }
    /// 256 weights in 16 groups of 16, 3-bit, 6-bit scales.
    BlockQ3K [110] { hmask: [u8; 32], qs: [u8; 64], scales: [u8; 12], d: F16Bits }
    /// 256 weights in 8 groups of 32, 4-bit, 6-bit scales and mins packed in 12 bytes.
    BlockQ4K [144] { d: F16Bits, dmin: F16Bits, scales: [u8; 12], qs: [u8; 128] }
    /// 256 weights in 8 groups of 32, 5-bit, 6-bit scales and mins.
    BlockQ5K [176] { d: F16Bits, dmin: F16Bits, scales: [u8; 12], qh: [u8; 32], qs: [u8; 128] }
    /// 256 weights in 16 groups of 16, 6-bit, 8-bit scales.
    BlockQ6K [210] { ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: F16Bits }
    /// 256 activations: `d * q` with the sums of each 16 quants.
    BlockQ8K [292] { d: f32, qs: [i8; 256], bsums: [i16; 16] }
    /// 32 weights: `d * IQ4NL_LEVELS[q]`.
    BlockIq4Nl [18] { d: F16Bits, qs: [u8; 16] }
    /// 256 weights in 8 groups of 32: `d * (scale - 32) * IQ4NL_LEVELS[q]`, 6-bit scales.
    BlockIq4Xs [136] { d: F16Bits, scales_h: [u8; 2], scales_l: [u8; 4], qs: [u8; 128] }

    /// Four Q4_0 rows interleaved: the 4 scales, then quants in chunks of 4 or 8 bytes taken
    /// round-robin from the rows, each nibble xor 8 (signed form).
    BlockQ4_0x4 [72] { d: [F16Bits; 4], qs: [u8; 64] }
    /// Eight Q4_0 rows interleaved in chunks of 8 bytes, nibbles xor 8.
    BlockQ4_0x8 [144] { d: [F16Bits; 8], qs: [u8; 128] }
    /// Eight Q4_K rows (ggml's `block_q4_Kx8`): scales, mins, the 6-bit sub-block scales
    /// regrouped per sub-block (12 bytes for the 8 rows' sub-block `s`), quants in chunks of 8
    /// bytes (`q4_K_8x8`) or 4 bytes (`q4_K_8x4`).
    BlockQ4Kx8 [1152] { d: [F16Bits; 8], dmin: [F16Bits; 8], scales: [u8; 96], qs: [u8; 1024] }
    /// Four IQ4_NL rows interleaved in chunks of 4 bytes.
    BlockIq4Nlx4 [72] { d: [F16Bits; 4], qs: [u8; 64] }
    /// Eight IQ4_NL rows interleaved in chunks of 8 bytes.
    BlockIq4Nlx8 [144] { d: [F16Bits; 8], qs: [u8; 128] }

    /// Eight Q8_0 rows interleaved in chunks of 8 bytes (a qrepack layout; ggml has none on x86).
    BlockQ8_0x8 [272] { d: [F16Bits; 8], qs: [i8; 256] }

    /// Four activation rows of Q8_0 interleaved in chunks of 4 or 8 bytes.
    BlockQ8_0x4 [136] { d: [F16Bits; 4], qs: [i8; 128] }
    /// Four activation rows of Q8_K interleaved in chunks of 8 (or, for the ARM `8x4` layouts,
    /// 4) bytes, with ggml's bsums order.
    BlockQ8Kx4 [1168] { d: [f32; 4], qs: [i8; 1024], bsums: [i16; 64] }
    /// Four activation rows of Q8_0 interleaved in chunks of 8 bytes (as [`BlockQ8_0x4`]), with
    /// each row's scale widened to f32 and its quant sum times a weight offset (8 for Q4_0's
    /// nibbles): what a kernel for unsigned weights needs per row, prepared once per call
    /// instead of once per row group.
    BlockQ8_0x4Sums [160] { d: [f32; 4], offsets: [i32; 4], qs: [i8; 128] }
    /// Four activation rows of Q8_0 interleaved in chunks of 8 bytes (as [`BlockQ8_0x4`]), with
    /// the rows' scales widened to f32, 128 times each row's quant sum, and the absolute values
    /// of the quants in the same order: what a kernel that lets the activations carry the sign of
    /// a product needs per row, and one that biases its weights by 128.
    BlockQ8_0x4Abs [288] { d: [f32; 4], offsets: [i32; 4], qs: [i8; 128], abs: [u8; 128] }
}

const _: () = assert!(QK_K == 256);

blocks! {
    /// Eight Q5_0 rows: the 8 scales, the 256 fifth bits regrouped as bit planes (byte `p` bit
    /// `t` belongs to byte lane `p` of decoded vector `t`, see `layout/q5_0.rs`), and the
    /// nibbles in chunks of 8 bytes taken round-robin from the rows (not xored).
    BlockQ5_0x8 [176] { d: [F16Bits; 8], qh: [u8; 32], qs: [u8; 128] }
    /// Eight Q6_K rows: scales, the 16 sub-block scales regrouped per sub-block (`[g][row]`),
    /// and the 6-bit quants of four weights re-packed in three bytes `qa`, `qb`, `qc`, each
    /// array interleaved in chunks of 8 bytes (see `layout/q6_k.rs`).
    BlockQ6Kx8 [1680] { d: [F16Bits; 8], scales: [i8; 128], qa: [u8; 512], qb: [u8; 512], qc: [u8; 512] }
    /// Eight Q4_1 rows: scales, mins, nibbles in chunks of 8 bytes taken round-robin.
    BlockQ4_1x8 [160] { d: [F16Bits; 8], m: [F16Bits; 8], qs: [u8; 128] }
    /// Eight Q5_1 rows: scales, mins, the fifth bits as `q5_0_8x8`'s bit planes and the
    /// nibbles in chunks of 8 bytes taken round-robin (see `layout/q5_1.rs`).
    BlockQ5_1x8 [192] { d: [F16Bits; 8], m: [F16Bits; 8], qh: [u8; 32], qs: [u8; 128] }
    /// Four activation rows of Q8_1 interleaved in chunks of 8 bytes.
    BlockQ8_1x4 [144] { d: [F16Bits; 4], s: [F16Bits; 4], qs: [i8; 128] }
    /// Eight Q5_K rows: as [`BlockQ4Kx8`], plus the 2048 fifth bits, either as bit planes
    /// (qrepack's `q5_K_8x8_x86`) or as the rows' `qh` bytes in chunks of 4 or 8 bytes taken
    /// round-robin (ggml's `q5_K_8x4` and `q5_K_8x8`, its `block_q5_Kx8`); see `layout/q5_k.rs`.
    BlockQ5Kx8 [1408] { d: [F16Bits; 8], dmin: [F16Bits; 8], scales: [u8; 96], qh: [u8; 256], qs: [u8; 1024] }
    /// Eight Q6_K rows as ggml's `block_q6_Kx8` (the `q6_K_8x4` and `q6_K_8x8` layouts): the
    /// scales, the 16 group scales regrouped per group (`[g][row]`), then the rows' `ql` and
    /// `qh` bytes, each in chunks of 4 or 8 bytes taken round-robin from the rows.
    BlockQ6Kx8Ggml [1680] { d: [F16Bits; 8], scales: [i8; 128], ql: [u8; 1024], qh: [u8; 512] }
    /// Eight Q2_K rows as ggml's `block_q2_Kx8` (the `q2_K_8x8` layout): the scales and
    /// minimum scales, the rows' (scale, min) bytes regrouped in 16-byte runs (run `p` holds
    /// bytes `2p` and `2p + 1` of each row in turn), then the rows' quant bytes in chunks of 8
    /// taken round-robin from the rows; see `layout/q2_k.rs`.
    BlockQ2Kx8 [672] { d: [F16Bits; 8], dmin: [F16Bits; 8], scales: [u8; 128], qs: [u8; 512] }
}

blocks! {
    /// IQ2_XXS, 256 weights in 8 groups of 32: per group four 8-bit grid indices (into
    /// `IQ2XXS_GRID`) then a little-endian u32 with four 7-bit sign codes and a 4-bit scale; each
    /// group is 8 bytes of `qs` (ggml's `uint16_t qs[32]`, little-endian).
    BlockIq2Xxs [66] { d: F16Bits, qs: [u8; 64] }
    /// IQ2_XS, 256 weights: 32 little-endian u16 of a 9-bit grid index (`IQ2XS_GRID`) and a
    /// 7-bit sign code, and two 4-bit scales per 32 weights.
    BlockIq2Xs [74] { d: F16Bits, qs: [u8; 64], scales: [u8; 8] }
    /// IQ2_S, 256 weights: 32 low bytes of 10-bit grid indices (`IQ2S_GRID`) then 32 sign bytes
    /// in `qs`, the high index bits in `qh`, two 4-bit scales per 32 weights.
    BlockIq2S [82] { d: F16Bits, qs: [u8; 64], qh: [u8; 8], scales: [u8; 8] }
    /// IQ3_XXS, 256 weights: 64 8-bit grid indices (`IQ3XXS_GRID`, 4 weights each), then per
    /// 32 weights a little-endian u32 of four 7-bit sign codes and a 4-bit scale.
    BlockIq3Xxs [98] { d: F16Bits, qs: [u8; 96] }
    /// IQ3_S, 256 weights: 64 low bytes of 9-bit grid indices (`IQ3S_GRID`), their high bits,
    /// one sign bit per weight, two 4-bit scales per 64 weights.
    BlockIq3S [110] { d: F16Bits, qs: [u8; 64], qh: [u8; 8], signs: [u8; 32], scales: [u8; 4] }
    /// IQ1_S, 256 weights: 32 low bytes of 11-bit grid indices (`IQ1S_GRID`) and per 32 weights
    /// a little-endian u16 with the high index bits, a 3-bit scale and the sign of the shift.
    BlockIq1S [50] { d: F16Bits, qs: [u8; 32], qh: [u8; 16] }
    /// IQ1_M, 256 weights: 32 low index bytes, per 16 weights a byte of high index bits and
    /// shift signs, 3-bit scales; the f16 block scale is spread over the top nibbles of `scales`.
    BlockIq1M [56] { qs: [u8; 32], qh: [u8; 16], scales: [u8; 8] }
    /// TQ1_0, 256 ternary weights `d * (t - 1)`: five base-3 digits per byte of `qs` (240
    /// weights), four per byte of `qh` (16 weights).
    BlockTq1_0 [54] { qs: [u8; 48], qh: [u8; 4], d: F16Bits }
    /// TQ2_0, 256 ternary weights `d * (q - 1)`, 2-bit `q`.
    BlockTq2_0 [66] { qs: [u8; 64], d: F16Bits }
    /// MXFP4, 32 weights `2^(e - 128) * KVALUES_FP4[q]`: an E8M0 exponent and 4-bit E2M1 codes
    /// (low nibbles weights 0..16, high nibbles 16..32).
    BlockMxfp4 [17] { e: u8, qs: [u8; 16] }
    /// NVFP4, 64 weights in 4 groups of 16, each with a UE4M3 scale; E2M1 codes as MXFP4's per
    /// group of 16 (8 bytes: low nibbles weights 0..8, high nibbles 8..16).
    BlockNvfp4 [36] { d: [u8; 4], qs: [u8; 32] }
    /// Four MXFP4 rows interleaved in chunks of 4 bytes (ggml's `block_mxfp4x4`): the rows'
    /// exponents, then their codes round-robin.
    BlockMxfp4x4 [68] { e: [u8; 4], qs: [u8; 64] }
    /// Eight MXFP4 rows interleaved in chunks of 8 bytes (ggml's `block_mxfp4x8`).
    BlockMxfp4x8 [136] { e: [u8; 8], qs: [u8; 128] }
    /// Q1_0, 128 weights `±d`: bit `j` of the 128-bit field set means `+d`.
    BlockQ1_0 [18] { d: F16Bits, qs: [u8; 16] }
    /// Q2_0, 64 weights `d * (q - 1)`, 2-bit `q`, four per byte from the low bits up.
    BlockQ2_0 [18] { d: F16Bits, qs: [u8; 16] }
}

/// Views `bytes` as a slice of blocks without copying.
///
/// Fails when the length is not a whole number of blocks, or (only for the activation blocks
/// with `f32` fields) when the bytes are misaligned.
///
/// ```
/// use qrepack::blocks::{view_blocks, BlockQ4_0};
/// let bytes = [0u8; 36];
/// let blocks: &[BlockQ4_0] = view_blocks(&bytes).unwrap();
/// assert_eq!(blocks.len(), 2);
/// assert!(view_blocks::<BlockQ4_0>(&bytes[..35]).is_err());
/// ```
pub fn view_blocks<B: Pod>(bytes: &[u8]) -> Result<&[B], Error> {
    bytemuck::try_cast_slice(bytes).map_err(|e| {
        Error::Shape(format!(
            "{} bytes cannot be viewed as blocks of {} bytes: {e}",
            bytes.len(),
            std::mem::size_of::<B>()
        ))
    })
}

/// Copies `bytes` into a freshly allocated, properly aligned vector of blocks.
pub fn collect_blocks<B: Pod>(bytes: &[u8]) -> Result<Vec<B>, Error> {
    let size = std::mem::size_of::<B>();
    if !bytes.len().is_multiple_of(size) {
        return Err(Error::Shape(format!(
            "{} bytes are not a whole number of {size}-byte blocks",
            bytes.len()
        )));
    }
    Ok(bytes
        .chunks_exact(size)
        .map(bytemuck::pod_read_unaligned)
        .collect())
}

/// Half the value of an E8M0 exponent byte, `2^(e - 128)` (MXFP4's scale, halved because
/// `KVALUES_FP4` holds doubled E2M1 values); `e = 0` and `1` give the subnormals `2^-128` and
/// `2^-127`, as ggml's `GGML_E8M0_TO_FP32_HALF`.
///
/// ```
/// use qrepack::blocks::e8m0_half_to_f32;
/// assert_eq!(e8m0_half_to_f32(128), 1.0);
/// assert_eq!(e8m0_half_to_f32(0), f32::from_bits(1 << 21)); // 2^-128, subnormal
/// ```
#[inline]
pub fn e8m0_half_to_f32(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        u32::from(e - 1) << 23
    };
    f32::from_bits(bits)
}

/// Half the value of an unsigned E4M3 scale byte (NVFP4's scale, halved as for
/// [`e8m0_half_to_f32`]), as ggml's `ggml_ue4m3_to_fp32`: `0` and `0x7f` give zero, the top bit is
/// ignored.
///
/// ```
/// use qrepack::blocks::ue4m3_half_to_f32;
/// assert_eq!(ue4m3_half_to_f32(0x38), 0.5); // 1.0, halved
/// assert_eq!(ue4m3_half_to_f32(0x01), 2f32.powi(-10));
/// assert_eq!(ue4m3_half_to_f32(0x7f), 0.0);
/// ```
#[inline]
pub fn ue4m3_half_to_f32(x: u8) -> f32 {
    if x == 0 || x == 0x7f {
        return 0.0;
    }
    let exp = i32::from((x >> 3) & 0x0f);
    let man = i32::from(x & 7);
    // Both forms are small integers times a power of two: exact in f32.
    let pow2 = |k: i32| f32::from_bits(((127 + k) as u32) << 23);
    if exp == 0 {
        man as f32 * pow2(-10)
    } else {
        (8 + man) as f32 * pow2(exp - 11)
    }
}

/// Scale and min of sub-block `j` (0..8) from a Q4_K/Q5_K 12-byte scale field (6 bits each).
///
/// ```
/// use qrepack::blocks::{k4_scale_min, k4_pack_scales};
/// let s = [1, 2, 3, 63, 5, 6, 7, 8];
/// let m = [9, 10, 11, 12, 13, 14, 15, 62];
/// let packed = k4_pack_scales(&s, &m);
/// assert_eq!(k4_scale_min(&packed, 3), (63, 12));
/// assert_eq!(k4_scale_min(&packed, 7), (8, 62));
/// ```
#[inline]
pub fn k4_scale_min(q: &[u8; 12], j: usize) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Inverse of [`k4_scale_min`]: packs 8 six-bit scales and mins into 12 bytes.
pub fn k4_pack_scales(s: &[u8; 8], m: &[u8; 8]) -> [u8; 12] {
    let mut q = [0u8; 12];
    for j in 0..4 {
        q[j] = (s[j] & 63) | ((s[j + 4] & 48) << 2);
        q[j + 4] = (m[j] & 63) | ((m[j + 4] & 48) << 2);
        q[j + 8] = (s[j + 4] & 15) | ((m[j + 4] & 15) << 4);
    }
    q
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_widening_matches_half_on_every_value() {
        for h in 0..=u16::MAX {
            let ours = F16Bits(h.to_le_bytes()).to_f32();
            let theirs = f16::from_bits(h).to_f32();
            assert!(
                ours.to_bits() == theirs.to_bits() || (ours.is_nan() && theirs.is_nan()),
                "{h:#06x}: {ours:e} vs {theirs:e}"
            );
        }
    }
}
