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

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use memmap2::Mmap;

use crate::error::Error;
use crate::shared::SharedBytes;
use crate::types::GgmlType;

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

/// The type tag of a metadata value (`enum gguf_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgufValueType {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    F32,
    Bool,
    String,
    Array,
    U64,
    I64,
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
    const fn min_bytes(self) -> u64 {
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
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(GgufValueType, Vec<GgufValue>),
    U64(u64),
    I64(i64),
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

/// What holds the bytes of a file: a read-only memory map or an owned buffer.
enum Backing {
    Map(Mmap),
    Owned(Vec<u8>),
}

impl AsRef<[u8]> for Backing {
    fn as_ref(&self) -> &[u8] {
        match self {
            Backing::Map(m) => m,
            Backing::Owned(v) => v,
        }
    }
}

/// A parsed, validated GGUF file whose tensor data stay in place (memory-mapped or owned).
pub struct GgufFile {
    backing: Arc<Backing>,
    path: Option<PathBuf>,
    version: u32,
    alignment: u64,
    data_start: u64,
    /// Keys in file order; `values[i]` belongs to `keys[i]`.
    keys: Vec<String>,
    /// Decoded values. Large arrays (a vocabulary of 262144 strings, say) are only validated
    /// while parsing and decoded from `lazy` when first asked for, so opening a model does not
    /// pay for metadata it never reads.
    values: Vec<OnceLock<GgufValue>>,
    /// Byte range of each value not decoded yet.
    lazy: Vec<Option<(usize, usize)>>,
    key_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    names: HashMap<String, usize>,
}

impl fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("alignment", &self.alignment)
            .field("kvs", &self.keys.len())
            .field("tensors", &self.tensors.len())
            .field("file_size", &self.file_size())
            .finish()
    }
}

impl GgufFile {
    /// Maps and parses the file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile, Error> {
        let path = path.as_ref();
        let file = File::open(path)
            .map_err(|e| Error::Io(format!("cannot open {}: {e}", path.display())))?;
        // SAFETY: the map is read-only and private to this process; its bytes are only ever read
        // through bounds-checked slices. Like every memory-mapped reader (ggml's included) it
        // relies on the file not being truncated or rewritten in place while it is open: writers
        // of GGUF files (GgufWriter among them) replace files by rename, which leaves this
        // mapping intact.
        let map = unsafe { Mmap::map(&file) }
            .map_err(|e| Error::Io(format!("cannot map {}: {e}", path.display())))?;
        let mut g = GgufFile::parse(Backing::Map(map)).map_err(|e| prefix_path(e, path))?;
        g.path = Some(path.to_path_buf());
        Ok(g)
    }

    /// Parses a file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile, Error> {
        GgufFile::parse(Backing::Owned(bytes))
    }

    fn parse(backing: Backing) -> Result<GgufFile, Error> {
        let header = parse_header(backing.as_ref())?;
        let n = header.metadata.len();
        let mut key_index = HashMap::with_capacity(n);
        let mut keys = Vec::with_capacity(n);
        let mut values = Vec::with_capacity(n);
        let mut lazy = Vec::with_capacity(n);
        for (i, (k, v)) in header.metadata.into_iter().enumerate() {
            key_index.insert(k.clone(), i);
            keys.push(k);
            match v {
                Parsed::Value(v) => {
                    values.push(OnceLock::from(v));
                    lazy.push(None);
                }
                Parsed::Lazy(start, end) => {
                    values.push(OnceLock::new());
                    lazy.push(Some((start, end)));
                }
            }
        }
        let mut names = HashMap::with_capacity(header.tensors.len());
        for (i, t) in header.tensors.iter().enumerate() {
            names.insert(t.name.clone(), i);
        }
        Ok(GgufFile {
            backing: Arc::new(backing),
            path: None,
            version: header.version,
            alignment: header.alignment,
            data_start: header.data_start,
            keys,
            values,
            lazy,
            key_index,
            tensors: header.tensors,
            names,
        })
    }

    /// The path the file was opened from (`None` for [`GgufFile::from_bytes`]).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }
    /// GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }
    /// Alignment of the data section and of every tensor.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }
    /// Offset of the data section from the start of the file.
    pub fn data_start(&self) -> u64 {
        self.data_start
    }
    /// Every metadata key and value, in file order (each value decoded once, when first
    /// reached, and kept).
    ///
    /// ```
    /// use qrepack::gguf::{GgufFile, GgufValue, GgufWriter};
    /// let mut w = GgufWriter::new();
    /// w.add_kv("general.name", GgufValue::String("tiny".into())).unwrap();
    /// let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    /// let kvs: Vec<_> = f.metadata().collect();
    /// assert_eq!(kvs[0].0, "general.name");
    /// assert_eq!(kvs[0].1.as_str(), Some("tiny"));
    /// ```
    pub fn metadata(&self) -> impl Iterator<Item = (&str, &GgufValue)> + '_ {
        self.keys
            .iter()
            .enumerate()
            .filter_map(|(i, k)| Some((k.as_str(), self.value_at(i)?)))
    }
    /// Number of metadata entries.
    pub fn metadata_len(&self) -> usize {
        self.keys.len()
    }
    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.value_at(*self.key_index.get(key)?)
    }

    fn value_at(&self, i: usize) -> Option<&GgufValue> {
        let cell = self.values.get(i)?;
        Some(cell.get_or_init(|| {
            let (key, range) = (self.keys.get(i), self.lazy.get(i).copied().flatten());
            match (key, range) {
                (Some(key), Some((start, end))) => {
                    let mut c = Cursor {
                        buf: self.bytes().get(..end).unwrap_or_default(),
                        pos: start,
                    };
                    // `skip_value` ran the same checks over these bytes while parsing, so
                    // decoding cannot fail; an empty array stands in if it ever did.
                    c.value(GgufValueType::Array, 0, key)
                        .unwrap_or(GgufValue::Array(GgufValueType::U8, Vec::new()))
                }
                _ => GgufValue::Array(GgufValueType::U8, Vec::new()),
            }
        }))
    }
    /// Every tensor, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }
    /// The tensor called `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        let i = *self.names.get(name)?;
        self.tensors.get(i)
    }
    /// Size of the whole file in bytes.
    pub fn file_size(&self) -> u64 {
        self.bytes().len() as u64
    }
    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        (*self.backing).as_ref()
    }
    /// True when the data are memory-mapped (not held in an owned buffer).
    pub fn is_mapped(&self) -> bool {
        matches!(*self.backing, Backing::Map(_))
    }

    fn range(&self, t: &TensorInfo) -> Option<(usize, usize)> {
        let start = self.data_start.checked_add(t.offset)?;
        let end = start.checked_add(t.size)?;
        if end > self.file_size() {
            return None;
        }
        Some((usize::try_from(start).ok()?, usize::try_from(t.size).ok()?))
    }

    /// The data of `t` (empty when the size is unknown or `t` is not a tensor of this file).
    pub fn tensor_bytes(&self, t: &TensorInfo) -> &[u8] {
        self.range(t)
            .and_then(|(start, len)| self.bytes().get(start..start.checked_add(len)?))
            .unwrap_or(&[])
    }

    /// The data of `t` as a shared range of the map, without a copy (e.g. for
    /// [`crate::QMatrix::from_packed`]); empty when `t` does not lie inside this file.
    pub fn tensor_shared(&self, t: &TensorInfo) -> SharedBytes {
        let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = self.backing.clone();
        self.range(t)
            .and_then(|(start, len)| SharedBytes::from_arc(owner).slice(start, len))
            .unwrap_or_else(|| SharedBytes::new(Vec::new()))
    }

    /// Tells the kernel that the mapped pages of `t` are not needed any more (after they were
    /// copied elsewhere, e.g. repacked), so they stop counting as resident memory. They are read
    /// again from the file if touched later. Pages shared with neighbouring data are kept.
    /// A no-op for owned buffers and on non-Unix systems.
    pub fn release_pages(&self, t: &TensorInfo) {
        self.release_tensor_range(t, 0, usize::MAX);
    }

    /// Like [`GgufFile::release_pages`] for the bytes `offset .. offset + len` of tensor `t`
    /// only (clamped to the tensor): lets a large tensor give back its pages while it is being
    /// repacked.
    pub fn release_tensor_range(&self, t: &TensorInfo, offset: usize, len: usize) {
        #[cfg(unix)]
        if let (Backing::Map(map), Some((start, size))) = (&*self.backing, self.range(t)) {
            const PAGE: usize = 4096;
            let lo = start.saturating_add(offset.min(size));
            let hi = start.saturating_add(offset.saturating_add(len).min(size));
            let first = lo.div_ceil(PAGE).saturating_mul(PAGE);
            let end = hi / PAGE * PAGE;
            if end > first && end <= map.len() {
                // SAFETY: the map is a read-only, file-backed mapping that is never written, so
                // MADV_DONTNEED only drops page-table entries: a later access faults the same
                // bytes back in from the file (page cache). No Rust reference observes changed
                // contents, and the range lies inside the map (checked above).
                let _ = unsafe {
                    map.unchecked_advise_range(
                        memmap2::UncheckedAdvice::DontNeed,
                        first,
                        end - first,
                    )
                };
            }
        }
        #[cfg(not(unix))]
        let _ = (t, offset, len);
    }
}

fn prefix_path(e: Error, path: &Path) -> Error {
    match e {
        Error::Format(m) => Error::Format(format!("{}: {m}", path.display())),
        other => other,
    }
}

// ---------------------------------------------------------------------------------------------
// Parsing

/// A metadata value as parsed: decoded, or (large arrays) validated and left in the file.
enum Parsed {
    Value(GgufValue),
    Lazy(usize, usize),
}

/// Arrays with more elements than this are decoded on first use.
const LAZY_ARRAY_LEN: u64 = 1024;

struct Header {
    version: u32,
    alignment: u64,
    data_start: u64,
    metadata: Vec<(String, Parsed)>,
    tensors: Vec<TensorInfo>,
}

/// A bounds-checked little-endian reader over the file's bytes.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

fn fmt_err(msg: String) -> Error {
    Error::Format(msg)
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> u64 {
        self.buf.len().saturating_sub(self.pos) as u64
    }

    fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8], Error> {
        let left = self.remaining();
        if n > left {
            return Err(fmt_err(format!(
                "truncated in {}: needs {n} bytes at offset {}, only {left} left",
                what(),
                self.pos
            )));
        }
        // n <= left <= usize::MAX
        let n = n as usize;
        let end = self.pos.saturating_add(n);
        let s = self
            .buf
            .get(self.pos..end)
            .ok_or_else(|| fmt_err(format!("truncated in {} at offset {}", what(), self.pos)))?;
        self.pos = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N], Error> {
        let s = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32, Error> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64, Error> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn bytes_string(&mut self, what: &dyn Fn() -> String) -> Result<&'a [u8], Error> {
        let len = self.u64(&|| format!("the length of {}", what()))?;
        let left = self.remaining();
        if len > left {
            return Err(fmt_err(format!(
                "{} has length {len}, past the end of the file ({left} bytes left)",
                what()
            )));
        }
        self.take(len, what)
    }

    fn utf8_string(&mut self, what: &dyn Fn() -> String) -> Result<String, Error> {
        let b = self.bytes_string(what)?;
        String::from_utf8(b.to_vec()).map_err(|_| fmt_err(format!("{} is not valid UTF-8", what())))
    }

    fn value(&mut self, ty: GgufValueType, depth: usize, key: &str) -> Result<GgufValue, Error> {
        let what = || format!("the value of key '{key}'");
        Ok(match ty {
            GgufValueType::U8 => GgufValue::U8(u8::from_le_bytes(self.array(&what)?)),
            GgufValueType::I8 => GgufValue::I8(i8::from_le_bytes(self.array(&what)?)),
            GgufValueType::U16 => GgufValue::U16(u16::from_le_bytes(self.array(&what)?)),
            GgufValueType::I16 => GgufValue::I16(i16::from_le_bytes(self.array(&what)?)),
            GgufValueType::U32 => GgufValue::U32(u32::from_le_bytes(self.array(&what)?)),
            GgufValueType::I32 => GgufValue::I32(i32::from_le_bytes(self.array(&what)?)),
            GgufValueType::F32 => GgufValue::F32(f32::from_le_bytes(self.array(&what)?)),
            GgufValueType::Bool => {
                let [b] = self.array::<1>(&what)?;
                GgufValue::Bool(b != 0)
            }
            GgufValueType::U64 => GgufValue::U64(u64::from_le_bytes(self.array(&what)?)),
            GgufValueType::I64 => GgufValue::I64(i64::from_le_bytes(self.array(&what)?)),
            GgufValueType::F64 => GgufValue::F64(f64::from_le_bytes(self.array(&what)?)),
            GgufValueType::String => {
                let b = self.bytes_string(&what)?;
                GgufValue::String(String::from_utf8_lossy(b).into_owned())
            }
            GgufValueType::Array => {
                let (elem, n) = self.array_header(depth, key)?;
                // n <= left, so this allocation is bounded by the file size.
                let mut items = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
                for _ in 0..n {
                    items.push(self.value(elem, depth + 1, key)?);
                }
                GgufValue::Array(elem, items)
            }
        })
    }
}

impl Cursor<'_> {
    /// Checks a value exactly as [`Cursor::value`] would decode it, without allocating.
    fn skip_value(&mut self, ty: GgufValueType, depth: usize, key: &str) -> Result<(), Error> {
        let what = || format!("the value of key '{key}'");
        match ty {
            GgufValueType::String => {
                self.bytes_string(&what)?;
            }
            GgufValueType::Array => {
                let (elem, n) = self.array_header(depth, key)?;
                if elem == GgufValueType::String {
                    for _ in 0..n {
                        if !self.skip_string_fast() {
                            self.skip_value(elem, depth + 1, key)?;
                        }
                    }
                } else if elem == GgufValueType::Array {
                    for _ in 0..n {
                        self.skip_value(elem, depth + 1, key)?;
                    }
                } else {
                    // Fixed-size elements: `array_header` checked that they fit.
                    self.take(n.saturating_mul(elem.min_bytes()), &what)?;
                }
            }
            fixed => {
                self.take(fixed.min_bytes(), &what)?;
            }
        }
        Ok(())
    }

    /// Steps over one string when it is complete (length and bytes inside the buffer); false
    /// (and nothing consumed) otherwise, so that the checked path can name the problem.
    #[inline]
    fn skip_string_fast(&mut self) -> bool {
        let Some(len) = self
            .buf
            .get(self.pos..self.pos.saturating_add(8))
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(u64::from_le_bytes)
        else {
            return false;
        };
        let end = usize::try_from(len)
            .ok()
            .and_then(|len| self.pos.checked_add(8)?.checked_add(len));
        match end {
            Some(end) if end <= self.buf.len() => {
                self.pos = end;
                true
            }
            _ => false,
        }
    }

    /// Element type and length of an array, checked against the depth limit and the bytes left.
    fn array_header(&mut self, depth: usize, key: &str) -> Result<(GgufValueType, u64), Error> {
        if depth >= MAX_ARRAY_DEPTH {
            return Err(fmt_err(format!(
                "key '{key}': arrays nested deeper than {MAX_ARRAY_DEPTH} levels"
            )));
        }
        let elem_id = self.u32(&|| format!("the array type of key '{key}'"))?;
        let elem = GgufValueType::from_id(elem_id)
            .ok_or_else(|| fmt_err(format!("key '{key}': unknown array element type {elem_id}")))?;
        let n = self.u64(&|| format!("the array length of key '{key}'"))?;
        let need = n.checked_mul(elem.min_bytes());
        let left = self.remaining();
        if need.is_none_or(|need| need > left) {
            return Err(fmt_err(format!(
                "key '{key}': array of {n} {elem} elements does not fit in the {left} \
                 bytes left in the file"
            )));
        }
        Ok((elem, n))
    }

    /// A top-level value: decoded, or for a large array validated and left for later.
    fn top_value(&mut self, ty: GgufValueType, key: &str) -> Result<Parsed, Error> {
        if ty == GgufValueType::Array {
            let start = self.pos;
            let mut peek = Cursor {
                buf: self.buf,
                pos: start,
            };
            let (_, n) = peek.array_header(0, key)?;
            if n > LAZY_ARRAY_LEN {
                self.skip_value(ty, 0, key)?;
                return Ok(Parsed::Lazy(start, self.pos));
            }
        }
        self.value(ty, 0, key).map(Parsed::Value)
    }
}

const MIN_KV_BYTES: u64 = 8 + 1 + 4 + 1;
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 1 + 4 + 4 + 8;

fn parse_header(buf: &[u8]) -> Result<Header, Error> {
    let mut c = Cursor { buf, pos: 0 };
    let magic: [u8; 4] = c.array(&|| "the magic number".to_string())?;
    if magic != GGUF_MAGIC {
        return Err(fmt_err(format!(
            "not a GGUF file: magic is {magic:02x?}, expected \"GGUF\""
        )));
    }
    let version = c.u32(&|| "the version".to_string())?;
    match version {
        2 | 3 => {}
        1 => {
            return Err(fmt_err(
                "GGUF version 1 is not supported (only 2 and 3)".to_string(),
            ))
        }
        v if v.swap_bytes() <= 3 => {
            return Err(fmt_err(format!(
                "GGUF version {v} looks byte-swapped: big-endian files are not supported"
            )))
        }
        v => {
            return Err(fmt_err(format!(
                "GGUF version {v} is not supported (only 2 and 3)"
            )))
        }
    }
    let n_tensors = c.u64(&|| "the tensor count".to_string())?;
    let n_kv = c.u64(&|| "the metadata count".to_string())?;
    let left = c.remaining();
    let kv_need = n_kv.checked_mul(MIN_KV_BYTES);
    let t_need = n_tensors.checked_mul(MIN_TENSOR_INFO_BYTES);
    match (kv_need, t_need) {
        (Some(a), Some(b)) if a.checked_add(b).is_some_and(|s| s <= left) => {}
        _ => {
            return Err(fmt_err(format!(
                "header claims {n_tensors} tensors and {n_kv} metadata keys, which cannot fit \
                 in the {left} bytes of the file after the header"
            )))
        }
    }

    // Metadata.
    let mut metadata = Vec::with_capacity(usize::try_from(n_kv).unwrap_or(0));
    let mut seen = HashSet::with_capacity(metadata.capacity());
    for i in 0..n_kv {
        let key = c.utf8_string(&|| format!("the key of metadata entry {i}"))?;
        if key.is_empty() {
            return Err(fmt_err(format!("metadata entry {i} has an empty key")));
        }
        if !seen.insert(key.clone()) {
            return Err(fmt_err(format!("duplicate metadata key '{key}'")));
        }
        let ty_id = c.u32(&|| format!("the type of key '{key}'"))?;
        let ty = GgufValueType::from_id(ty_id)
            .ok_or_else(|| fmt_err(format!("key '{key}' has unknown value type {ty_id}")))?;
        let value = c.top_value(ty, &key)?;
        metadata.push((key, value));
    }

    let alignment = match metadata.iter().find(|(k, _)| k == ALIGNMENT_KEY) {
        None => DEFAULT_ALIGNMENT,
        Some((_, Parsed::Value(GgufValue::U32(a)))) if a.is_power_of_two() => u64::from(*a),
        Some((_, Parsed::Value(GgufValue::U32(a)))) => {
            return Err(fmt_err(format!(
                "{ALIGNMENT_KEY} is {a}, not a power of two"
            )))
        }
        Some((_, v)) => {
            let ty = match v {
                Parsed::Value(v) => v.value_type(),
                Parsed::Lazy(..) => GgufValueType::Array,
            };
            return Err(fmt_err(format!(
                "{ALIGNMENT_KEY} must be a u32, but is a {ty}"
            )));
        }
    };

    // Tensor infos.
    let mut tensors: Vec<TensorInfo> = Vec::with_capacity(usize::try_from(n_tensors).unwrap_or(0));
    let mut names = HashSet::with_capacity(tensors.capacity());
    for i in 0..n_tensors {
        let name = c.utf8_string(&|| format!("the name of tensor {i}"))?;
        if !names.insert(name.clone()) {
            return Err(fmt_err(format!("duplicate tensor name '{name}'")));
        }
        let what = |field: &str| format!("the {field} of tensor '{name}'");
        let n_dims = c.u32(&|| what("dimension count"))?;
        if n_dims > 4 {
            return Err(fmt_err(format!(
                "tensor '{name}' has {n_dims} dimensions (at most 4)"
            )));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            let d = c.u64(&|| what("dimensions"))?;
            if d > i64::MAX as u64 {
                return Err(fmt_err(format!(
                    "tensor '{name}' has a negative dimension ({})",
                    d as i64
                )));
            }
            dims.push(d);
        }
        let type_id = c.u32(&|| what("type"))?;
        let offset = c.u64(&|| what("offset"))?;
        let size = tensor_size(&name, &dims, type_id)?;
        tensors.push(TensorInfo {
            ty: GgmlType::from_id(type_id),
            name,
            dims,
            type_id,
            offset,
            size: size.unwrap_or(0),
        });
    }

    // Data section.
    let header_end = c.pos as u64;
    let file_size = buf.len() as u64;
    let data_start = align_up(header_end, alignment).ok_or_else(|| {
        fmt_err(format!(
            "data section start overflows (header ends at {header_end}, alignment {alignment})"
        ))
    })?;
    if !tensors.is_empty() && data_start > file_size {
        return Err(fmt_err(format!(
            "data section would start at {data_start}, past the end of the file ({file_size} bytes)"
        )));
    }
    let data_len = file_size.saturating_sub(data_start);
    let mut spans: Vec<(u64, u64, &str)> = Vec::with_capacity(tensors.len());
    for t in &tensors {
        if t.offset % alignment != 0 {
            return Err(fmt_err(format!(
                "tensor '{}': offset {} is not a multiple of the alignment {alignment}",
                t.name, t.offset
            )));
        }
        let end = t.offset.checked_add(t.size);
        if end.is_none_or(|end| end > data_len) || t.offset > data_len {
            return Err(fmt_err(format!(
                "tensor '{}': data [{}, +{}) reach past the end of the data section ({data_len} \
                 bytes; file truncated?)",
                t.name, t.offset, t.size
            )));
        }
        if t.size_known() && t.size > 0 {
            spans.push((t.offset, t.offset.saturating_add(t.size), &t.name));
        }
    }
    spans.sort_unstable();
    for w in spans.windows(2) {
        if let [(_, a_end, a), (b_start, _, b)] = w {
            if b_start < a_end {
                return Err(fmt_err(format!(
                    "tensors '{a}' and '{b}' overlap in the data section"
                )));
            }
        }
    }

    Ok(Header {
        version,
        alignment,
        data_start,
        metadata,
        tensors,
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

// ---------------------------------------------------------------------------------------------
// Writing

enum TensorData<'a> {
    Borrowed(&'a [u8]),
    Shared(SharedBytes),
    Owned(Vec<u8>),
}

impl TensorData<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            TensorData::Borrowed(b) => b,
            TensorData::Shared(s) => s.as_ref(),
            TensorData::Owned(v) => v,
        }
    }
}

struct WriterTensor<'a> {
    name: String,
    dims: Vec<u64>,
    type_id: u32,
    data: TensorData<'a>,
}

/// Builds a GGUF v3 file: metadata of any type and tensors (borrowed, shared or owned bytes),
/// written to any `Write` or atomically to a path ([`GgufWriter::write_to`]).
///
/// Tensors are laid out in the order added, each at an offset that is a multiple of the
/// alignment (`general.alignment` if set, else 32), as ggml writes them.
#[derive(Default)]
pub struct GgufWriter<'a> {
    metadata: Vec<(String, GgufValue)>,
    tensors: Vec<WriterTensor<'a>>,
}

fn check_value(v: &GgufValue, key: &str, depth: usize) -> Result<(), Error> {
    if let GgufValue::Array(t, items) = v {
        if depth >= MAX_ARRAY_DEPTH {
            return Err(Error::Invalid(format!(
                "key '{key}': arrays nested deeper than {MAX_ARRAY_DEPTH} levels"
            )));
        }
        for item in items {
            if item.value_type() != *t {
                return Err(Error::Invalid(format!(
                    "key '{key}': array of {t} holds a {}",
                    item.value_type()
                )));
            }
            check_value(item, key, depth + 1)?;
        }
    }
    Ok(())
}

impl<'a> GgufWriter<'a> {
    /// An empty file.
    pub fn new() -> GgufWriter<'a> {
        GgufWriter::default()
    }

    /// Adds a metadata entry; an error for an empty or duplicate key, an array whose items do
    /// not all have its element type, or a bad `general.alignment`.
    pub fn add_kv(&mut self, key: &str, value: GgufValue) -> Result<(), Error> {
        if key.is_empty() {
            return Err(Error::Invalid("metadata keys must not be empty".into()));
        }
        if self.metadata.iter().any(|(k, _)| k == key) {
            return Err(Error::Invalid(format!("duplicate metadata key '{key}'")));
        }
        check_value(&value, key, 0)?;
        if key == ALIGNMENT_KEY && !matches!(value, GgufValue::U32(a) if a.is_power_of_two()) {
            return Err(Error::Invalid(format!(
                "{ALIGNMENT_KEY} must be a u32 power of two, got {value}"
            )));
        }
        self.metadata.push((key.to_string(), value));
        Ok(())
    }

    /// Sets (adds or replaces) a metadata entry.
    pub fn set_kv(&mut self, key: &str, value: GgufValue) -> Result<(), Error> {
        let old = self.metadata.iter().position(|(k, _)| k == key);
        let removed = old.map(|i| self.metadata.remove(i));
        if let Err(e) = self.add_kv(key, value) {
            if let (Some(i), Some(kv)) = (old, removed) {
                self.metadata.insert(i, kv);
            }
            return Err(e);
        }
        Ok(())
    }

    /// Sets the alignment (stored as `general.alignment`).
    pub fn set_alignment(&mut self, alignment: u32) -> Result<(), Error> {
        self.set_kv(ALIGNMENT_KEY, GgufValue::U32(alignment))
    }

    /// The metadata added so far.
    pub fn metadata(&self) -> &[(String, GgufValue)] {
        &self.metadata
    }

    fn alignment(&self) -> u64 {
        match self.metadata.iter().find(|(k, _)| k == ALIGNMENT_KEY) {
            Some((_, GgufValue::U32(a))) => u64::from(*a),
            _ => DEFAULT_ALIGNMENT,
        }
    }

    fn push_tensor(
        &mut self,
        name: &str,
        dims: &[u64],
        type_id: u32,
        data: TensorData<'a>,
    ) -> Result<(), Error> {
        if name.is_empty() || name.len() >= 64 {
            return Err(Error::Invalid(format!(
                "tensor name '{name}' must have 1 to 63 bytes (ggml's limit)"
            )));
        }
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(Error::Invalid(format!("duplicate tensor name '{name}'")));
        }
        if dims.len() > 4 {
            return Err(Error::Invalid(format!(
                "tensor '{name}' has {} dimensions (at most 4)",
                dims.len()
            )));
        }
        let size = tensor_size(name, dims, type_id).map_err(|e| match e {
            Error::Format(m) => Error::Invalid(m),
            other => other,
        })?;
        let len = data.bytes().len() as u64;
        if let Some(size) = size {
            if size != len {
                return Err(Error::Invalid(format!(
                    "tensor '{name}' with dimensions {dims:?} and type id {type_id} takes \
                     {size} bytes, but {len} were given"
                )));
            }
        }
        self.tensors.push(WriterTensor {
            name: name.to_string(),
            dims: dims.to_vec(),
            type_id,
            data,
        });
        Ok(())
    }

    /// Adds a tensor whose bytes are borrowed (dims in ggml order, `ne0` first). For type ids
    /// ggml defines, the byte count must match the dimensions.
    pub fn add_tensor(
        &mut self,
        name: &str,
        dims: &[u64],
        type_id: u32,
        data: &'a [u8],
    ) -> Result<(), Error> {
        self.push_tensor(name, dims, type_id, TensorData::Borrowed(data))
    }

    /// Adds a tensor whose bytes are shared (e.g. a range of a mapped file).
    pub fn add_tensor_shared(
        &mut self,
        name: &str,
        dims: &[u64],
        type_id: u32,
        data: SharedBytes,
    ) -> Result<(), Error> {
        self.push_tensor(name, dims, type_id, TensorData::Shared(data))
    }

    /// Adds a tensor that owns its bytes.
    pub fn add_tensor_owned(
        &mut self,
        name: &str,
        dims: &[u64],
        type_id: u32,
        data: Vec<u8>,
    ) -> Result<(), Error> {
        self.push_tensor(name, dims, type_id, TensorData::Owned(data))
    }

    /// Writes the file to `w` (buffer it: many small writes are made).
    pub fn write_into<W: Write>(&self, w: &mut W) -> Result<(), Error> {
        let align = self.alignment();
        let pad = |pos: u64| -> usize {
            let r = pos % align;
            if r == 0 {
                0
            } else {
                usize::try_from(align - r).unwrap_or(0)
            }
        };
        let mut buf = Vec::new();
        buf.extend_from_slice(&GGUF_MAGIC);
        buf.extend_from_slice(&WRITE_VERSION.to_le_bytes());
        buf.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        buf.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (k, v) in &self.metadata {
            put_string(&mut buf, k.as_bytes());
            buf.extend_from_slice(&v.value_type().id().to_le_bytes());
            put_value(&mut buf, v);
        }
        let mut offset: u64 = 0;
        for t in &self.tensors {
            put_string(&mut buf, t.name.as_bytes());
            buf.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                buf.extend_from_slice(&d.to_le_bytes());
            }
            buf.extend_from_slice(&t.type_id.to_le_bytes());
            buf.extend_from_slice(&offset.to_le_bytes());
            let len = t.data.bytes().len() as u64;
            offset = offset
                .checked_add(len)
                .and_then(|o| align_up(o, align))
                .ok_or_else(|| Error::Invalid("tensor data overflow u64".into()))?;
        }
        w.write_all(&buf)?;
        write_zeros(w, pad(buf.len() as u64))?;
        for t in &self.tensors {
            let b = t.data.bytes();
            w.write_all(b)?;
            write_zeros(w, pad(b.len() as u64))?;
        }
        w.flush()?;
        Ok(())
    }

    /// The whole file in memory.
    pub fn to_bytes(&self) -> Result<Vec<u8>, Error> {
        let mut v = Vec::new();
        self.write_into(&mut v)?;
        Ok(v)
    }

    /// Writes the file to `path` atomically: into a temporary file in the same directory, which
    /// is synced and then renamed over `path`, so readers see the old file or the complete new
    /// one, never a partial one. An existing `path` is an error unless `overwrite`.
    pub fn write_to(&self, path: impl AsRef<Path>, overwrite: bool) -> Result<(), Error> {
        let path = path.as_ref();
        if !overwrite && path.symlink_metadata().is_ok() {
            return Err(Error::Invalid(format!(
                "{} already exists (pass overwrite to replace it)",
                path.display()
            )));
        }
        let file_name = path
            .file_name()
            .ok_or_else(|| Error::Invalid(format!("{} is not a file path", path.display())))?;
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let tmp = dir.join(format!(
            ".{}.tmp-{}-{}",
            file_name.to_string_lossy(),
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let result = (|| -> Result<(), Error> {
            let file = File::options()
                .write(true)
                .create_new(true)
                .open(&tmp)
                .map_err(|e| Error::Io(format!("cannot create {}: {e}", tmp.display())))?;
            let mut w = BufWriter::with_capacity(1 << 20, file);
            self.write_into(&mut w)
                .map_err(|e| Error::Io(format!("writing {}: {e}", tmp.display())))?;
            let file = w
                .into_inner()
                .map_err(|e| Error::Io(format!("writing {}: {e}", tmp.display())))?;
            file.sync_all()?;
            drop(file);
            if overwrite {
                std::fs::rename(&tmp, path)
                    .map_err(|e| Error::Io(format!("cannot rename to {}: {e}", path.display())))?;
            } else {
                // A hard link fails if `path` appeared meanwhile: no overwrite, even in a race.
                std::fs::hard_link(&tmp, path).map_err(|e| {
                    if e.kind() == std::io::ErrorKind::AlreadyExists {
                        Error::Invalid(format!(
                            "{} already exists (pass overwrite to replace it)",
                            path.display()
                        ))
                    } else {
                        Error::Io(format!("cannot create {}: {e}", path.display()))
                    }
                })?;
                let _ = std::fs::remove_file(&tmp);
            }
            // Make the rename itself durable.
            if let Ok(d) = File::open(&dir) {
                let _ = d.sync_all();
            }
            Ok(())
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }
}

fn write_zeros<W: Write>(w: &mut W, mut n: usize) -> Result<(), Error> {
    const ZEROS: [u8; 4096] = [0; 4096];
    while n > 0 {
        let k = n.min(ZEROS.len());
        w.write_all(ZEROS.get(..k).unwrap_or(&[]))?;
        n -= k;
    }
    Ok(())
}

fn put_string(buf: &mut Vec<u8>, s: &[u8]) {
    buf.extend_from_slice(&(s.len() as u64).to_le_bytes());
    buf.extend_from_slice(s);
}

fn put_value(buf: &mut Vec<u8>, v: &GgufValue) {
    match v {
        GgufValue::U8(x) => buf.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I8(x) => buf.extend_from_slice(&x.to_le_bytes()),
        GgufValue::U16(x) => buf.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I16(x) => buf.extend_from_slice(&x.to_le_bytes()),
        GgufValue::U32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        GgufValue::F32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        GgufValue::Bool(x) => buf.push(u8::from(*x)),
        GgufValue::U64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        GgufValue::F64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        GgufValue::String(s) => put_string(buf, s.as_bytes()),
        GgufValue::Array(t, items) => {
            buf.extend_from_slice(&t.id().to_le_bytes());
            buf.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                put_value(buf, item);
            }
        }
    }
}

/// 64-bit FNV-1a of `bytes` (the checksum of repack cache tensors).
///
/// ```
/// assert_eq!(qrepack::gguf::fnv1a64(b""), 0xcbf29ce484222325);
/// assert_eq!(qrepack::gguf::fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
/// ```
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Checksum of a repack cache tensor: FNV-1a-style over 8-byte little-endian words in four
/// interleaved lanes (independent multiply chains, so it runs at memory speed), per 1 MiB chunk
/// in parallel; the chunk digests and the length are then combined with FNV-1a. Detects
/// truncation, reordering and any changed byte with overwhelming probability.
///
/// ```
/// use qrepack::gguf::checksum64;
/// assert_ne!(checksum64(&[0; 8]), checksum64(&[0; 16]));
/// assert_ne!(checksum64(b"abcdefgh"), checksum64(b"abcdefgi"));
/// let big = vec![7u8; 3 << 20];
/// let mut changed = big.clone();
/// changed[2 << 20] ^= 1;
/// assert_ne!(checksum64(&big), checksum64(&changed));
/// ```
pub fn checksum64(bytes: &[u8]) -> u64 {
    use rayon::prelude::*;
    const CHUNK: usize = 1 << 20;
    let digests: Vec<u64> = bytes.par_chunks(CHUNK).map(chunk_digest).collect();
    let mut h = FNV_OFFSET;
    for d in digests.iter().chain(std::iter::once(&(bytes.len() as u64))) {
        h ^= d;
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

fn chunk_digest(chunk: &[u8]) -> u64 {
    let mut lanes = [FNV_OFFSET, FNV_OFFSET ^ 1, FNV_OFFSET ^ 2, FNV_OFFSET ^ 3];
    let mut blocks = chunk.chunks_exact(32);
    for b in &mut blocks {
        for (lane, w) in lanes.iter_mut().zip(b.chunks_exact(8)) {
            let mut a = [0u8; 8];
            a.copy_from_slice(w);
            *lane = (*lane ^ u64::from_le_bytes(a)).wrapping_mul(FNV_PRIME);
        }
    }
    let mut h = FNV_OFFSET;
    for lane in lanes {
        h = (h ^ lane).wrapping_mul(FNV_PRIME);
    }
    for &b in blocks.remainder() {
        h = (h ^ u64::from(b)).wrapping_mul(FNV_PRIME);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

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
