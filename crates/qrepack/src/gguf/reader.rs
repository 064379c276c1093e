//! The validating, zero-copy reader: [`GgufFile`], the bounds-checked parser and tensor views.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use memmap2::Mmap;

use super::{align_up, tensor_size, GgufValue, GgufValueType, TensorInfo};
use super::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, GGUF_MAGIC, MAX_ARRAY_DEPTH};
use crate::error::Error;
use crate::shared::SharedBytes;
use crate::types::GgmlType;

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

    /// The strings of the array `key`, as views into the file: unlike [`GgufFile::get`], a
    /// large array is not decoded into (and kept as) one [`GgufValue`] per element, which for
    /// a vocabulary of 262144 tokens is tens of megabytes. `None` when `key` is missing or not
    /// an array of valid UTF-8 strings.
    ///
    /// ```
    /// use qrepack::gguf::{GgufFile, GgufValue, GgufValueType, GgufWriter};
    /// let mut w = GgufWriter::new();
    /// let words = ["a", "bc"].map(|s| GgufValue::String(s.into())).to_vec();
    /// w.add_kv("tokens", GgufValue::Array(GgufValueType::String, words)).unwrap();
    /// let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    /// assert_eq!(f.str_array("tokens"), Some(vec!["a", "bc"]));
    /// assert_eq!(f.str_array("missing"), None);
    /// ```
    pub fn str_array(&self, key: &str) -> Option<Vec<&str>> {
        let i = *self.key_index.get(key)?;
        match self.undecoded_array(i, key) {
            Some((mut c, elem, n)) => {
                if elem != GgufValueType::String {
                    return None;
                }
                let mut out = Vec::with_capacity(usize::try_from(n).ok()?);
                for _ in 0..n {
                    let b = c.bytes_string(&String::new).ok()?;
                    out.push(std::str::from_utf8(b).ok()?);
                }
                Some(out)
            }
            _ => self
                .value_at(i)?
                .as_array()?
                .iter()
                .map(GgufValue::as_str)
                .collect(),
        }
    }

    /// The numbers of the array `key` (any integer, float or bool element type) as f64,
    /// decoded straight from the file as [`GgufFile::str_array`] does; `None` when `key` is
    /// missing or not an array of numbers.
    ///
    /// ```
    /// use qrepack::gguf::{GgufFile, GgufValue, GgufValueType, GgufWriter};
    /// let mut w = GgufWriter::new();
    /// let scores = [0.5f32, -2.0].map(GgufValue::F32).to_vec();
    /// w.add_kv("scores", GgufValue::Array(GgufValueType::F32, scores)).unwrap();
    /// let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    /// assert_eq!(f.number_array("scores"), Some(vec![0.5, -2.0]));
    /// ```
    pub fn number_array(&self, key: &str) -> Option<Vec<f64>> {
        let i = *self.key_index.get(key)?;
        let number = |v: &GgufValue| {
            v.as_f64()
                .or_else(|| v.as_bool().map(|b| f64::from(u8::from(b))))
        };
        match self.undecoded_array(i, key) {
            Some((mut c, elem, n)) => {
                if matches!(elem, GgufValueType::String | GgufValueType::Array) {
                    return None;
                }
                let mut out = Vec::with_capacity(usize::try_from(n).ok()?);
                for _ in 0..n {
                    out.push(number(&c.value(elem, 1, key).ok()?)?);
                }
                Some(out)
            }
            _ => self.value_at(i)?.as_array()?.iter().map(number).collect(),
        }
    }

    /// A cursor at the first element of value `i`, its element type and count, when `i` is
    /// an array left in the file and not decoded yet (validated while parsing).
    fn undecoded_array(&self, i: usize, key: &str) -> Option<(Cursor<'_>, GgufValueType, u64)> {
        let (start, end) = self.lazy.get(i).copied().flatten()?;
        if self.values.get(i)?.get().is_some() {
            return None;
        }
        let mut c = Cursor {
            buf: self.bytes().get(..end)?,
            pos: start,
        };
        let (elem, n) = c.array_header(0, key).ok()?;
        Some((c, elem, n))
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
        if let Some((start, size)) = self.range(t) {
            let lo = start.saturating_add(offset.min(size));
            let hi = start.saturating_add(offset.saturating_add(len).min(size));
            self.release_bytes(lo, hi);
        }
    }

    /// Like [`GgufFile::release_pages`] for the header and metadata (everything before the
    /// tensor data): once what a caller needs of the metadata has been copied out (a tokenizer's
    /// vocabulary, a model's configuration), its pages stop counting as resident memory. The
    /// metadata stay readable: a later access reads them again from the file.
    pub fn release_metadata_pages(&self) {
        let end = usize::try_from(self.data_start()).unwrap_or(usize::MAX);
        self.release_bytes(0, end);
    }

    /// Like [`GgufFile::release_pages`] for all the tensor data outside the tensors in `keep`
    /// (those still read in place): once the others were copied elsewhere, the pages they
    /// shared with each other go too. Pages shared with a kept tensor stay.
    pub(crate) fn release_data_outside<'a>(&self, keep: impl Iterator<Item = &'a TensorInfo>) {
        let mut kept: Vec<(usize, usize)> = keep
            .filter_map(|t| self.range(t))
            .map(|(start, len)| (start, start + len))
            .collect();
        kept.sort_unstable();
        let mut from = usize::try_from(self.data_start()).unwrap_or(usize::MAX);
        for (start, end) in kept {
            if start > from {
                self.release_bytes(from, start);
            }
            from = from.max(end);
        }
        self.release_bytes(from, usize::MAX);
    }

    /// Drops the whole pages of the mapping inside `lo..hi` (see [`GgufFile::release_pages`]).
    fn release_bytes(&self, lo: usize, hi: usize) {
        #[cfg(unix)]
        if let Backing::Map(map) = &*self.backing {
            const PAGE: usize = 4096;
            let first = lo.div_ceil(PAGE).saturating_mul(PAGE);
            let end = hi.min(map.len()) / PAGE * PAGE;
            if end > first {
                // SAFETY: the map is a read-only, file-backed mapping that is never written, so
                // MADV_DONTNEED only drops page-table entries: a later access faults the same
                // bytes back in from the file (page cache). No Rust reference observes changed
                // contents, and the range lies inside the map (clamped above).
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
        let _ = (lo, hi);
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
