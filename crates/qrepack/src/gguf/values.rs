//! Metadata values ([`GgufValue`], [`GgufValueType`]) and tensor descriptions ([`TensorInfo`]).
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::fmt;

use super::ggml_type_traits;
use crate::types::GgmlType;

/// The type tag of a metadata value (`enum gguf_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgufValueType {
    /// `u8`.
    U8,
    /// `i8`.
    I8,
    /// `u16`.
    U16,
    /// `i16`.
    I16,
    /// `u32`.
    U32,
    /// `i32`.
    I32,
    /// `f32`.
    F32,
    /// A boolean (one byte).
    Bool,
    /// A UTF-8 string with its u64 length.
    String,
    /// An array of one element type.
    Array,
    /// `u64`.
    U64,
    /// `i64`.
    I64,
    /// `f64`.
    F64,
}

impl GgufValueType {
    /// Every type, in id order.
    pub const ALL: [GgufValueType; 13] = [
        GgufValueType::U8,
        GgufValueType::I8,
        GgufValueType::U16,
        GgufValueType::I16,
        GgufValueType::U32,
        GgufValueType::I32,
        GgufValueType::F32,
        GgufValueType::Bool,
        GgufValueType::String,
        GgufValueType::Array,
        GgufValueType::U64,
        GgufValueType::I64,
        GgufValueType::F64,
    ];

    /// The id stored in files.
    pub const fn id(self) -> u32 {
        match self {
            GgufValueType::U8 => 0,
            GgufValueType::I8 => 1,
            GgufValueType::U16 => 2,
            GgufValueType::I16 => 3,
            GgufValueType::U32 => 4,
            GgufValueType::I32 => 5,
            GgufValueType::F32 => 6,
            GgufValueType::Bool => 7,
            GgufValueType::String => 8,
            GgufValueType::Array => 9,
            GgufValueType::U64 => 10,
            GgufValueType::I64 => 11,
            GgufValueType::F64 => 12,
        }
    }

    /// The type with file id `id`.
    pub fn from_id(id: u32) -> Option<GgufValueType> {
        GgufValueType::ALL.iter().copied().find(|t| t.id() == id)
    }

    /// The fewest bytes one value of this type takes in a file.
    pub(super) const fn min_bytes(self) -> u64 {
        match self {
            GgufValueType::U8 | GgufValueType::I8 | GgufValueType::Bool => 1,
            GgufValueType::U16 | GgufValueType::I16 => 2,
            GgufValueType::U32 | GgufValueType::I32 | GgufValueType::F32 => 4,
            GgufValueType::U64 | GgufValueType::I64 | GgufValueType::F64 => 8,
            GgufValueType::String => 8,
            GgufValueType::Array => 12,
        }
    }

    /// The name used in summaries (`u32`, `string` ...).
    pub const fn name(self) -> &'static str {
        match self {
            GgufValueType::U8 => "u8",
            GgufValueType::I8 => "i8",
            GgufValueType::U16 => "u16",
            GgufValueType::I16 => "i16",
            GgufValueType::U32 => "u32",
            GgufValueType::I32 => "i32",
            GgufValueType::F32 => "f32",
            GgufValueType::Bool => "bool",
            GgufValueType::String => "string",
            GgufValueType::Array => "array",
            GgufValueType::U64 => "u64",
            GgufValueType::I64 => "i64",
            GgufValueType::F64 => "f64",
        }
    }
}

impl fmt::Display for GgufValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One metadata value. Arrays carry their element type (so empty arrays keep it) and may nest.
#[derive(Clone, Debug, PartialEq)]
pub enum GgufValue {
    /// A `u8`.
    U8(u8),
    /// A `i8`.
    I8(i8),
    /// A `u16`.
    U16(u16),
    /// A `i16`.
    I16(i16),
    /// A `u32`.
    U32(u32),
    /// A `i32`.
    I32(i32),
    /// A `f32`.
    F32(f32),
    /// A boolean.
    Bool(bool),
    /// A string.
    String(String),
    /// An array: its element type and the elements.
    Array(GgufValueType, Vec<GgufValue>),
    /// A `u64`.
    U64(u64),
    /// A `i64`.
    I64(i64),
    /// A `f64`.
    F64(f64),
}

impl GgufValue {
    /// The value's type tag.
    pub fn value_type(&self) -> GgufValueType {
        match self {
            GgufValue::U8(_) => GgufValueType::U8,
            GgufValue::I8(_) => GgufValueType::I8,
            GgufValue::U16(_) => GgufValueType::U16,
            GgufValue::I16(_) => GgufValueType::I16,
            GgufValue::U32(_) => GgufValueType::U32,
            GgufValue::I32(_) => GgufValueType::I32,
            GgufValue::F32(_) => GgufValueType::F32,
            GgufValue::Bool(_) => GgufValueType::Bool,
            GgufValue::String(_) => GgufValueType::String,
            GgufValue::Array(..) => GgufValueType::Array,
            GgufValue::U64(_) => GgufValueType::U64,
            GgufValue::I64(_) => GgufValueType::I64,
            GgufValue::F64(_) => GgufValueType::F64,
        }
    }

    /// Any integer that is not negative, as `u64`.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            GgufValue::U8(v) => Some(v.into()),
            GgufValue::U16(v) => Some(v.into()),
            GgufValue::U32(v) => Some(v.into()),
            GgufValue::U64(v) => Some(v),
            GgufValue::I8(v) => u64::try_from(v).ok(),
            GgufValue::I16(v) => u64::try_from(v).ok(),
            GgufValue::I32(v) => u64::try_from(v).ok(),
            GgufValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// Any integer that fits `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            GgufValue::U8(v) => Some(v.into()),
            GgufValue::U16(v) => Some(v.into()),
            GgufValue::U32(v) => Some(v.into()),
            GgufValue::U64(v) => i64::try_from(v).ok(),
            GgufValue::I8(v) => Some(v.into()),
            GgufValue::I16(v) => Some(v.into()),
            GgufValue::I32(v) => Some(v.into()),
            GgufValue::I64(v) => Some(v),
            _ => None,
        }
    }

    /// Any number as `f64`.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            GgufValue::F32(v) => Some(v.into()),
            GgufValue::F64(v) => Some(v),
            _ => self.as_i64().map(|v| v as f64),
        }
    }

    /// A bool.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            GgufValue::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// A string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// The elements of an array.
    pub fn as_array(&self) -> Option<&[GgufValue]> {
        match self {
            GgufValue::Array(_, v) => Some(v),
            _ => None,
        }
    }
}

const SUMMARY_STRING: usize = 60;
const SUMMARY_ITEMS: usize = 6;

impl fmt::Display for GgufValue {
    /// A one-line summary: long strings are cut, arrays show their type, length and first items.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GgufValue::U8(v) => write!(f, "{v}"),
            GgufValue::I8(v) => write!(f, "{v}"),
            GgufValue::U16(v) => write!(f, "{v}"),
            GgufValue::I16(v) => write!(f, "{v}"),
            GgufValue::U32(v) => write!(f, "{v}"),
            GgufValue::I32(v) => write!(f, "{v}"),
            GgufValue::F32(v) => write!(f, "{v}"),
            GgufValue::Bool(v) => write!(f, "{v}"),
            GgufValue::U64(v) => write!(f, "{v}"),
            GgufValue::I64(v) => write!(f, "{v}"),
            GgufValue::F64(v) => write!(f, "{v}"),
            GgufValue::String(s) => {
                if s.chars().count() > SUMMARY_STRING {
                    let cut: String = s.chars().take(SUMMARY_STRING).collect();
                    write!(f, "{:?}... ({} bytes)", cut, s.len())
                } else {
                    write!(f, "{s:?}")
                }
            }
            GgufValue::Array(t, items) => {
                write!(f, "[{t}; {}] [", items.len())?;
                for (i, item) in items.iter().take(SUMMARY_ITEMS).enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{item}")?;
                }
                if items.len() > SUMMARY_ITEMS {
                    f.write_str(", ...")?;
                }
                f.write_str("]")
            }
        }
    }
}

/// One tensor of a GGUF file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// The tensor's name.
    pub name: String,
    /// Dimensions in ggml order: `ne0` (elements of one row, the columns) first.
    pub dims: Vec<u64>,
    /// ggml type id as stored.
    pub type_id: u32,
    /// The type, when qrepack knows it.
    pub ty: Option<GgmlType>,
    /// Offset of the data from the start of the data section.
    pub offset: u64,
    /// Bytes of data; 0 when the type id is unknown to ggml (see [`TensorInfo::size_known`]).
    pub size: u64,
}

impl TensorInfo {
    /// True when ggml defines the type id, so [`TensorInfo::size`] is the real size.
    pub fn size_known(&self) -> bool {
        ggml_type_traits(self.type_id).is_some()
    }

    /// Number of elements.
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// The type's name (`q4_0`, or `type 16` for types qrepack does not know).
    pub fn type_name(&self) -> String {
        match self.ty {
            Some(t) => t.name().to_string(),
            None => format!("type {}", self.type_id),
        }
    }
}
