//! The ggml tensor element types qrepack understands.

use std::fmt;
use std::str::FromStr;

use crate::error::Error;

/// Number of weights in one K-quant super-block.
pub const QK_K: usize = 256;

/// A ggml element type, with ggml's numeric id (as stored in GGUF files).
///
/// ```
/// use qrepack::GgmlType;
/// let ty: GgmlType = "q4_K".parse().unwrap();
/// assert_eq!(ty, GgmlType::Q4_K);
/// assert_eq!(ty.id(), 12);
/// assert_eq!(ty.block_size(), 256);
/// assert_eq!(ty.block_bytes(), 144);
/// assert_eq!(ty.row_bytes(4096).unwrap(), 16 * 144);
/// assert!(ty.row_bytes(100).is_err());
/// ```
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GgmlType {
    /// 32-bit IEEE floats.
    F32,
    /// 16-bit IEEE floats.
    F16,
    /// bfloat16: the top half of an f32.
    BF16,
    /// 32 weights: an f16 scale and 4-bit quants (`d * (q - 8)`).
    Q4_0,
    /// 32 weights: an f16 scale and minimum, 4-bit quants (`d * q + m`).
    Q4_1,
    /// 32 weights: an f16 scale and 5-bit quants (`d * (q - 16)`).
    Q5_0,
    /// 32 weights: an f16 scale and minimum, 5-bit quants.
    Q5_1,
    /// 32 weights: an f16 scale and 8-bit quants.
    Q8_0,
    /// 32 weights: 8-bit quants, an f16 scale and the f16 sum of the weights (activations).
    Q8_1,
    /// 256 weights in 16 groups with 4-bit scales and minimums, 2-bit quants.
    Q2_K,
    /// 256 weights in 16 groups with 6-bit scales, 3-bit quants.
    Q3_K,
    /// 256 weights in 8 groups with 6-bit scales and minimums, 4-bit quants.
    Q4_K,
    /// 256 weights in 8 groups with 6-bit scales and minimums, 5-bit quants.
    Q5_K,
    /// 256 weights in 16 groups with 8-bit scales, 6-bit quants.
    Q6_K,
    /// 256 weights: an f32 scale, 8-bit quants and group sums (activations of the K-quants).
    Q8_K,
    /// 32 weights: an f16 scale and 4-bit indices into a non-linear table.
    IQ4_NL,
    /// 256 weights in 8 groups with 6-bit scales, 4-bit indices into the non-linear table.
    IQ4_XS,
    /// 256 weights: 2.06 bits each, 8-weight grid points with signs (importance-quantized).
    IQ2_XXS,
    /// 256 weights: 2.31 bits each, 8-weight grid points with signs and 4-bit scales.
    IQ2_XS,
    /// 256 weights: 3.06 bits each, 4-weight grid points with signs.
    IQ3_XXS,
    /// 256 weights: 1.56 bits each, 8-weight ternary grid points.
    IQ1_S,
    /// 256 weights: 3.44 bits each, 4-weight grid points with signs and scales.
    IQ3_S,
    /// 256 weights: 2.5 bits each, 8-weight grid points with signs and scales.
    IQ2_S,
    /// 256 weights: 1.75 bits each, 8-weight ternary grid points with 3-bit scales.
    IQ1_M,
    /// 256 ternary weights packed five to a byte (1.69 bits each).
    TQ1_0,
    /// 256 ternary weights at 2 bits each.
    TQ2_0,
    /// 32 weights: a shared E8M0 exponent and 4-bit E2M1 floats (OCP microscaling).
    MXFP4,
    /// 64 weights: E4M3 scales of 16 and 4-bit E2M1 floats.
    NVFP4,
    /// Binary weights: a scale and one sign bit per weight.
    Q1_0,
    /// 2-bit weights with a scale per block.
    Q2_0,
}

impl GgmlType {
    /// Every supported type, in ggml id order.
    pub const ALL: [GgmlType; 30] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q8_1,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::Q8_K,
        GgmlType::IQ2_XXS,
        GgmlType::IQ2_XS,
        GgmlType::IQ3_XXS,
        GgmlType::IQ1_S,
        GgmlType::IQ4_NL,
        GgmlType::IQ3_S,
        GgmlType::IQ2_S,
        GgmlType::IQ4_XS,
        GgmlType::IQ1_M,
        GgmlType::BF16,
        GgmlType::TQ1_0,
        GgmlType::TQ2_0,
        GgmlType::MXFP4,
        GgmlType::NVFP4,
        GgmlType::Q1_0,
        GgmlType::Q2_0,
    ];

    /// ggml's numeric type id (`enum ggml_type`).
    pub const fn id(self) -> u32 {
        match self {
            GgmlType::F32 => 0,
            GgmlType::F16 => 1,
            GgmlType::Q4_0 => 2,
            GgmlType::Q4_1 => 3,
            GgmlType::Q5_0 => 6,
            GgmlType::Q5_1 => 7,
            GgmlType::Q8_0 => 8,
            GgmlType::Q8_1 => 9,
            GgmlType::Q2_K => 10,
            GgmlType::Q3_K => 11,
            GgmlType::Q4_K => 12,
            GgmlType::Q5_K => 13,
            GgmlType::Q6_K => 14,
            GgmlType::Q8_K => 15,
            GgmlType::IQ4_NL => 20,
            GgmlType::IQ4_XS => 23,
            GgmlType::BF16 => 30,
            GgmlType::IQ2_XXS => 16,
            GgmlType::IQ2_XS => 17,
            GgmlType::IQ3_XXS => 18,
            GgmlType::IQ1_S => 19,
            GgmlType::IQ3_S => 21,
            GgmlType::IQ2_S => 22,
            GgmlType::IQ1_M => 29,
            GgmlType::TQ1_0 => 34,
            GgmlType::TQ2_0 => 35,
            GgmlType::MXFP4 => 39,
            GgmlType::NVFP4 => 40,
            GgmlType::Q1_0 => 41,
            GgmlType::Q2_0 => 42,
        }
    }

    /// The type with ggml id `id`, if qrepack supports it.
    ///
    /// ```
    /// use qrepack::GgmlType;
    /// assert_eq!(GgmlType::from_id(20), Some(GgmlType::IQ4_NL));
    /// assert_eq!(GgmlType::from_id(4), None); // removed Q4_2
    /// ```
    pub fn from_id(id: u32) -> Option<GgmlType> {
        GgmlType::ALL.iter().copied().find(|t| t.id() == id)
    }

    /// ggml's name for the type (`ggml_type_name`).
    pub const fn name(self) -> &'static str {
        match self {
            GgmlType::F32 => "f32",
            GgmlType::F16 => "f16",
            GgmlType::BF16 => "bf16",
            GgmlType::Q4_0 => "q4_0",
            GgmlType::Q4_1 => "q4_1",
            GgmlType::Q5_0 => "q5_0",
            GgmlType::Q5_1 => "q5_1",
            GgmlType::Q8_0 => "q8_0",
            GgmlType::Q8_1 => "q8_1",
            GgmlType::Q2_K => "q2_K",
            GgmlType::Q3_K => "q3_K",
            GgmlType::Q4_K => "q4_K",
            GgmlType::Q5_K => "q5_K",
            GgmlType::Q6_K => "q6_K",
            GgmlType::Q8_K => "q8_K",
            GgmlType::IQ4_NL => "iq4_nl",
            GgmlType::IQ4_XS => "iq4_xs",
            GgmlType::IQ2_XXS => "iq2_xxs",
            GgmlType::IQ2_XS => "iq2_xs",
            GgmlType::IQ3_XXS => "iq3_xxs",
            GgmlType::IQ1_S => "iq1_s",
            GgmlType::IQ3_S => "iq3_s",
            GgmlType::IQ2_S => "iq2_s",
            GgmlType::IQ1_M => "iq1_m",
            GgmlType::TQ1_0 => "tq1_0",
            GgmlType::TQ2_0 => "tq2_0",
            GgmlType::MXFP4 => "mxfp4",
            GgmlType::NVFP4 => "nvfp4",
            GgmlType::Q1_0 => "q1_0",
            GgmlType::Q2_0 => "q2_0",
        }
    }

    /// Number of weights in one block.
    pub const fn block_size(self) -> usize {
        match self {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => 1,
            GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q5_0
            | GgmlType::Q5_1
            | GgmlType::Q8_0
            | GgmlType::Q8_1
            | GgmlType::IQ4_NL
            | GgmlType::MXFP4 => 32,
            GgmlType::NVFP4 | GgmlType::Q2_0 => 64,
            GgmlType::Q1_0 => 128,
            GgmlType::IQ2_XXS
            | GgmlType::IQ2_XS
            | GgmlType::IQ3_XXS
            | GgmlType::IQ1_S
            | GgmlType::IQ3_S
            | GgmlType::IQ2_S
            | GgmlType::IQ1_M
            | GgmlType::TQ1_0
            | GgmlType::TQ2_0 => QK_K,
            GgmlType::Q2_K
            | GgmlType::Q3_K
            | GgmlType::Q4_K
            | GgmlType::Q5_K
            | GgmlType::Q6_K
            | GgmlType::Q8_K
            | GgmlType::IQ4_XS => QK_K,
        }
    }

    /// Bytes in one block.
    pub const fn block_bytes(self) -> usize {
        match self {
            GgmlType::F32 => 4,
            GgmlType::F16 | GgmlType::BF16 => 2,
            GgmlType::Q4_0 => 18,
            GgmlType::Q4_1 => 20,
            GgmlType::Q5_0 => 22,
            GgmlType::Q5_1 => 24,
            GgmlType::Q8_0 => 34,
            GgmlType::Q8_1 => 36,
            GgmlType::Q2_K => 84,
            GgmlType::Q3_K => 110,
            GgmlType::Q4_K => 144,
            GgmlType::Q5_K => 176,
            GgmlType::Q6_K => 210,
            GgmlType::Q8_K => 292,
            GgmlType::IQ4_NL => 18,
            GgmlType::IQ4_XS => 136,
            GgmlType::IQ2_XXS => 66,
            GgmlType::IQ2_XS => 74,
            GgmlType::IQ3_XXS => 98,
            GgmlType::IQ1_S => 50,
            GgmlType::IQ3_S => 110,
            GgmlType::IQ2_S => 82,
            GgmlType::IQ1_M => 56,
            GgmlType::TQ1_0 => 54,
            GgmlType::TQ2_0 => 66,
            GgmlType::MXFP4 => 17,
            GgmlType::NVFP4 => 36,
            GgmlType::Q1_0 => 18,
            GgmlType::Q2_0 => 18,
        }
    }

    /// True for the block-quantized types (everything but F32, F16 and BF16).
    pub const fn is_quantized(self) -> bool {
        !matches!(self, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
    }

    /// Bytes in one row of `cols` weights; an error when `cols` is not a whole number of blocks.
    pub fn row_bytes(self, cols: usize) -> Result<usize, Error> {
        if !cols.is_multiple_of(self.block_size()) {
            return Err(Error::Shape(format!(
                "{} rows need a multiple of {} columns, got {cols}",
                self.name(),
                self.block_size()
            )));
        }
        (cols / self.block_size())
            .checked_mul(self.block_bytes())
            .ok_or_else(|| {
                Error::Shape(format!("{cols} columns of {} overflow usize", self.name()))
            })
    }

    /// Bytes of a `rows` x `cols` matrix in ggml row layout.
    ///
    /// ```
    /// use qrepack::GgmlType;
    /// assert_eq!(GgmlType::Q8_0.matrix_bytes(2, 64).unwrap(), 2 * 2 * 34);
    /// ```
    pub fn matrix_bytes(self, rows: usize, cols: usize) -> Result<usize, Error> {
        self.row_bytes(cols)?
            .checked_mul(rows)
            .ok_or_else(|| Error::Shape(format!("{rows} x {cols} {} overflows usize", self.name())))
    }

    /// The type the activations are quantized to for this weight type's plain dot product
    /// (ggml's `vec_dot_type`).
    ///
    /// ```
    /// use qrepack::GgmlType;
    /// assert_eq!(GgmlType::Q4_0.vec_dot_type(), GgmlType::Q8_0);
    /// assert_eq!(GgmlType::Q6_K.vec_dot_type(), GgmlType::Q8_K);
    /// ```
    pub const fn vec_dot_type(self) -> GgmlType {
        match self {
            GgmlType::F32 => GgmlType::F32,
            GgmlType::F16 => GgmlType::F16,
            GgmlType::BF16 => GgmlType::BF16,
            GgmlType::Q4_0
            | GgmlType::Q5_0
            | GgmlType::Q8_0
            | GgmlType::IQ4_NL
            | GgmlType::MXFP4
            | GgmlType::NVFP4
            | GgmlType::Q1_0
            | GgmlType::Q2_0 => GgmlType::Q8_0,
            GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q8_1 => GgmlType::Q8_1,
            GgmlType::Q2_K
            | GgmlType::Q3_K
            | GgmlType::Q4_K
            | GgmlType::Q5_K
            | GgmlType::Q6_K
            | GgmlType::Q8_K
            | GgmlType::IQ4_XS
            | GgmlType::IQ2_XXS
            | GgmlType::IQ2_XS
            | GgmlType::IQ3_XXS
            | GgmlType::IQ1_S
            | GgmlType::IQ3_S
            | GgmlType::IQ2_S
            | GgmlType::IQ1_M
            | GgmlType::TQ1_0
            | GgmlType::TQ2_0 => GgmlType::Q8_K,
        }
    }

    /// True for the types [`crate::quantize`] can produce: all but IQ1_S, IQ1_M, IQ2_XXS and
    /// IQ2_XS, which ggml quantizes only with an importance matrix
    /// ([`crate::quantize_with_importance`] produces them); they load, dequantize and multiply
    /// all the same.
    ///
    /// ```
    /// use qrepack::GgmlType;
    /// assert!(GgmlType::Q4_K.is_quantizable());
    /// assert!(!GgmlType::IQ2_XXS.is_quantizable());
    /// ```
    pub const fn is_quantizable(self) -> bool {
        !matches!(
            self,
            GgmlType::IQ2_XXS | GgmlType::IQ2_XS | GgmlType::IQ1_S | GgmlType::IQ1_M
        )
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for GgmlType {
    type Err = Error;

    /// Parses ggml's names case-insensitively (`q4_k`, `Q4_K`, `IQ4_NL` ...).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        GgmlType::ALL
            .iter()
            .copied()
            .find(|t| t.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                let names: Vec<&str> = GgmlType::ALL.iter().map(|t| t.name()).collect();
                Error::Unsupported(format!("unknown type '{s}' (known: {})", names.join(", ")))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_ids_are_unique() {
        for ty in GgmlType::ALL {
            assert_eq!(ty.name().parse::<GgmlType>().unwrap(), ty);
            assert_eq!(ty.name().to_uppercase().parse::<GgmlType>().unwrap(), ty);
            assert_eq!(GgmlType::from_id(ty.id()), Some(ty));
            assert_eq!(ty.to_string(), ty.name());
        }
        assert!("q4_2".parse::<GgmlType>().is_err());
    }

    #[test]
    fn row_bytes_rejects_partial_blocks() {
        assert_eq!(GgmlType::Q4_0.row_bytes(64).unwrap(), 36);
        assert!(GgmlType::Q4_0.row_bytes(48).is_err());
        assert!(GgmlType::Q6_K.row_bytes(640).is_err());
        assert_eq!(GgmlType::F16.row_bytes(3).unwrap(), 6);
        assert!(GgmlType::Q4_0.matrix_bytes(usize::MAX, 64).is_err());
    }
}
