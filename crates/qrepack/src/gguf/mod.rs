//! GGUF files (versions 2 and 3, little-endian): a validating, zero-copy reader ([`GgufFile`])
//! and an atomic writer ([`GgufWriter`]).
//!
//! The reader maps the file into memory and checks every count, length, size and offset against
//! the file size before using it, so a truncated or hostile file is an [`Error::Format`] naming
//! the section, key or tensor at fault: never a panic, an out-of-bounds read or a huge
//! allocation. Tensor data are views into the map ([`GgufFile::tensor_bytes`],
//! [`GgufFile::tensor_shared`]).
//!
//! ```
//! use qrepack::gguf::{GgufFile, GgufValue, GgufWriter};
//! use qrepack::{quantize, GgmlType};
//! let w: Vec<f32> = (0..8 * 64).map(|i| (i as f32 * 0.1).sin()).collect();
//! let bytes = quantize(GgmlType::Q4_0, &w, 8, 64).unwrap();
//! let mut writer = GgufWriter::new();
//! writer.add_kv("general.name", GgufValue::String("tiny".into())).unwrap();
//! writer.add_tensor_owned("w", &[64, 8], GgmlType::Q4_0.id(), bytes.clone()).unwrap();
//! let file = GgufFile::from_bytes(writer.to_bytes().unwrap()).unwrap();
//! assert_eq!(file.get("general.name").and_then(|v| v.as_str()), Some("tiny"));
//! let t = file.tensor("w").unwrap();
//! assert_eq!(t.dims, vec![64, 8]);
//! assert_eq!(file.tensor_bytes(t), &bytes[..]);
//! ```
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

// values: metadata values and tensor descriptions; reader: the validating parser and GgufFile;
// writer: GgufWriter; checksums: the hashes of repack cache tensors. Shared here: the format
// constants, ggml's type sizes and the alignment arithmetic.
mod checksums;
mod reader;
mod values;
mod writer;

pub use checksums::{checksum64, fnv1a64};
pub use reader::GgufFile;
pub use values::{GgufValue, GgufValueType, TensorInfo};
pub use writer::GgufWriter;

use crate::error::Error;

/// The four bytes every GGUF file starts with.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// Alignment of the data section and of every tensor when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// The metadata key that sets the alignment (a `u32` power of two).
pub const ALIGNMENT_KEY: &str = "general.alignment";
/// Arrays nested deeper than this are rejected (protects the stack against hostile files).
pub const MAX_ARRAY_DEPTH: usize = 16;
/// The GGUF version [`GgufWriter`] writes.
pub const WRITE_VERSION: u32 = 3;

/// `(weights per block, bytes per block)` of every ggml type id, including the types qrepack
/// cannot multiply; `None` for ids ggml does not define (or no longer stores in files).
///
/// ```
/// use qrepack::{gguf::ggml_type_traits, GgmlType};
/// assert_eq!(ggml_type_traits(GgmlType::Q4_K.id()), Some((256, 144)));
/// assert_eq!(ggml_type_traits(16), Some((256, 66))); // iq2_xxs
/// assert_eq!(ggml_type_traits(4), None); // removed q4_2
/// ```
pub fn ggml_type_traits(id: u32) -> Option<(u64, u64)> {
    Some(match id {
        0 => (1, 4),
        1 => (1, 2),
        2 => (32, 18),
        3 => (32, 20),
        6 => (32, 22),
        7 => (32, 24),
        8 => (32, 34),
        9 => (32, 36),
        10 => (256, 84),
        11 => (256, 110),
        12 => (256, 144),
        13 => (256, 176),
        14 => (256, 210),
        15 => (256, 292),
        16 => (256, 66),
        17 => (256, 74),
        18 => (256, 98),
        19 => (256, 50),
        20 => (32, 18),
        21 => (256, 110),
        22 => (256, 82),
        23 => (256, 136),
        24 => (1, 1),
        25 => (1, 2),
        26 => (1, 4),
        27 => (1, 8),
        28 => (1, 8),
        29 => (256, 56),
        30 => (1, 2),
        34 => (256, 54),
        35 => (256, 66),
        39 => (32, 17),
        40 => (64, 36),
        41 => (128, 18),
        42 => (64, 18),
        _ => return None,
    })
}

/// Bytes of a tensor of ggml type `type_id` with dimensions `dims` (ne0 first); `Ok(None)` when
/// the type id is unknown, an error when the row length is not a whole number of blocks or the
/// size overflows `u64`.
pub fn tensor_size(name: &str, dims: &[u64], type_id: u32) -> Result<Option<u64>, Error> {
    let mut n: u64 = 1;
    for &d in dims {
        n = n
            .checked_mul(d)
            .filter(|&n| n <= i64::MAX as u64)
            .ok_or_else(|| {
                Error::Format(format!(
                    "tensor '{name}': dimensions {dims:?} multiply past the 2^63 element limit"
                ))
            })?;
    }
    let Some((blck, bytes)) = ggml_type_traits(type_id) else {
        return Ok(None);
    };
    let ne0 = dims.first().copied().unwrap_or(1);
    if ne0 % blck != 0 {
        return Err(Error::Format(format!(
            "tensor '{name}': type id {type_id} needs rows that are a multiple of {blck} \
             elements, but ne0 = {ne0}"
        )));
    }
    (n / blck).checked_mul(bytes).map(Some).ok_or_else(|| {
        Error::Format(format!(
            "tensor '{name}': size of dimensions {dims:?} overflows u64"
        ))
    })
}

fn align_up(x: u64, a: u64) -> Option<u64> {
    let rem = x % a;
    if rem == 0 {
        Some(x)
    } else {
        x.checked_add(a - rem)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::GgmlType;

    #[test]
    fn type_traits_match_qrepack_types() {
        for t in GgmlType::ALL {
            assert_eq!(
                ggml_type_traits(t.id()),
                Some((t.block_size() as u64, t.block_bytes() as u64)),
                "{t}"
            );
        }
    }
}
