//! The writer: [`GgufWriter`] (to any `Write`, or atomically to a path).
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::{align_up, tensor_size, GgufValue};
use super::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, GGUF_MAGIC, MAX_ARRAY_DEPTH, WRITE_VERSION};
use crate::error::Error;
use crate::shared::SharedBytes;

enum TensorData<'a> {
    Borrowed(&'a [u8]),
    Shared(SharedBytes),
    Owned(Vec<u8>),
    /// `unit` written `count` times: a large tensor whose content repeats (synthetic models)
    /// costs the memory of one unit, not of the tensor.
    Repeated {
        unit: SharedBytes,
        count: u64,
    },
}

impl TensorData<'_> {
    fn len(&self) -> u64 {
        match self {
            TensorData::Borrowed(b) => b.len() as u64,
            TensorData::Shared(s) => s.len() as u64,
            TensorData::Owned(v) => v.len() as u64,
            TensorData::Repeated { unit, count } => (unit.len() as u64).saturating_mul(*count),
        }
    }

    fn write<W: Write>(&self, w: &mut W) -> std::io::Result<()> {
        match self {
            TensorData::Borrowed(b) => w.write_all(b),
            TensorData::Shared(s) => w.write_all(s.as_ref()),
            TensorData::Owned(v) => w.write_all(v),
            TensorData::Repeated { unit, count } => {
                for _ in 0..*count {
                    w.write_all(unit.as_ref())?;
                }
                Ok(())
            }
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
        let len = data.len();
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

    /// Adds a tensor whose bytes are `unit` repeated to fill it, written without ever holding
    /// the whole tensor in memory: synthetic models of billions of weights repeat one
    /// quantized block of rows. The type id must be one ggml defines, and `unit` (not empty)
    /// must divide the tensor's size.
    ///
    /// ```
    /// use qrepack::gguf::{GgufFile, GgufWriter};
    /// use qrepack::SharedBytes;
    /// let mut w = GgufWriter::new();
    /// w.add_tensor_repeated("t", &[4, 3], 0, SharedBytes::new(vec![1u8; 16])).unwrap();
    /// let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    /// assert_eq!(f.tensor_bytes(f.tensor("t").unwrap()), &[1u8; 48][..]);
    /// ```
    pub fn add_tensor_repeated(
        &mut self,
        name: &str,
        dims: &[u64],
        type_id: u32,
        unit: SharedBytes,
    ) -> Result<(), Error> {
        let size = tensor_size(name, dims, type_id)
            .map_err(|e| match e {
                Error::Format(m) => Error::Invalid(m),
                other => other,
            })?
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "tensor '{name}': a repeated tensor needs a type id ggml defines, got {type_id}"
                ))
            })?;
        let unit_len = unit.len() as u64;
        if unit_len == 0 || size % unit_len != 0 {
            return Err(Error::Invalid(format!(
                "tensor '{name}' takes {size} bytes, not a whole number of {unit_len}-byte units"
            )));
        }
        let count = size / unit_len;
        self.push_tensor(name, dims, type_id, TensorData::Repeated { unit, count })
    }

    /// Bytes the file will take (header, padding and tensor data).
    pub fn file_size(&self) -> Result<u64, Error> {
        let align = self.alignment();
        let mut header = Vec::new();
        self.header(&mut header, align)?;
        let mut total = align_up(header.len() as u64, align);
        for t in &self.tensors {
            total = total
                .and_then(|o| o.checked_add(t.data.len()))
                .and_then(|o| align_up(o, align));
        }
        total.ok_or_else(|| Error::Invalid("file size overflows u64".into()))
    }

    /// The header: magic, counts, metadata and tensor descriptions (without padding).
    fn header(&self, buf: &mut Vec<u8>, align: u64) -> Result<(), Error> {
        buf.extend_from_slice(&GGUF_MAGIC);
        buf.extend_from_slice(&WRITE_VERSION.to_le_bytes());
        buf.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        buf.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (k, v) in &self.metadata {
            put_string(buf, k.as_bytes());
            buf.extend_from_slice(&v.value_type().id().to_le_bytes());
            put_value(buf, v);
        }
        let mut offset: u64 = 0;
        for t in &self.tensors {
            put_string(buf, t.name.as_bytes());
            buf.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                buf.extend_from_slice(&d.to_le_bytes());
            }
            buf.extend_from_slice(&t.type_id.to_le_bytes());
            buf.extend_from_slice(&offset.to_le_bytes());
            offset = offset
                .checked_add(t.data.len())
                .and_then(|o| align_up(o, align))
                .ok_or_else(|| Error::Invalid("tensor data overflow u64".into()))?;
        }
        Ok(())
    }

    /// Writes the file to `w` (buffer it: many small writes are made).
    pub fn write_into<W: Write>(&self, w: &mut W) -> Result<(), Error> {
        self.write_into_with_progress(w, &mut |_, _| {})
    }

    /// [`GgufWriter::write_into`], calling `progress(bytes written, file size)` after the
    /// header and after each tensor: writing a multi-gigabyte file takes a while.
    pub fn write_into_with_progress<W: Write>(
        &self,
        w: &mut W,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(), Error> {
        let total = self.file_size()?;
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
        self.header(&mut buf, align)?;
        w.write_all(&buf)?;
        let header_pad = pad(buf.len() as u64);
        write_zeros(w, header_pad)?;
        let mut done = buf.len() as u64 + header_pad as u64;
        progress(done, total);
        for t in &self.tensors {
            t.data.write(w)?;
            let len = t.data.len();
            let p = pad(len);
            write_zeros(w, p)?;
            done += len + p as u64;
            progress(done, total);
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
        self.write_to_with_progress(path, overwrite, &mut |_, _| {})
    }

    /// [`GgufWriter::write_to`] with the progress callback of
    /// [`GgufWriter::write_into_with_progress`].
    pub fn write_to_with_progress(
        &self,
        path: impl AsRef<Path>,
        overwrite: bool,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(), Error> {
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
            self.write_into_with_progress(&mut w, progress)
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use crate::gguf::GgufFile;

    /// A repeated tensor writes exactly the bytes of the same tensor given whole, and the
    /// progress ends at the file size, which is the length written.
    #[test]
    fn repeated_tensor_equals_whole_tensor() {
        let unit: Vec<u8> = (0..18u8).collect(); // one Q4_0 block
        let mut a = GgufWriter::new();
        let mut b = GgufWriter::new();
        for w in [&mut a, &mut b] {
            w.add_kv("general.name", GgufValue::String("r".into()))
                .unwrap();
            w.add_tensor_owned("first", &[3], 0, vec![7; 12]).unwrap();
        }
        a.add_tensor_repeated("q", &[64, 5], 2, SharedBytes::new(unit.clone()))
            .unwrap();
        b.add_tensor_owned("q", &[64, 5], 2, unit.repeat(10))
            .unwrap();
        let mut seen = Vec::new();
        let mut bytes = Vec::new();
        a.write_into_with_progress(&mut bytes, &mut |done, total| seen.push((done, total)))
            .unwrap();
        assert_eq!(bytes, b.to_bytes().unwrap());
        let size = a.file_size().unwrap();
        assert_eq!(size, bytes.len() as u64);
        assert_eq!(seen.len(), 3);
        assert_eq!(seen.last(), Some(&(size, size)));
        assert!(seen.windows(2).all(|p| p[0].0 < p[1].0));
        let f = GgufFile::from_bytes(bytes).unwrap();
        assert_eq!(f.tensor_bytes(f.tensor("q").unwrap()), &unit.repeat(10)[..]);
    }

    #[test]
    fn repeated_tensor_needs_a_dividing_unit_and_a_known_type() {
        let mut w = GgufWriter::new();
        let unit = |n: usize| SharedBytes::new(vec![0u8; n]);
        // 5 rows of two Q4_0 blocks: 180 bytes, not a multiple of 36 * 3
        assert!(w.add_tensor_repeated("a", &[64, 5], 2, unit(108)).is_err());
        assert!(w.add_tensor_repeated("b", &[64, 5], 2, unit(0)).is_err());
        assert!(w.add_tensor_repeated("c", &[64, 5], 999, unit(18)).is_err());
        assert!(w.add_tensor_repeated("d", &[60, 5], 2, unit(18)).is_err());
        w.add_tensor_repeated("e", &[64, 5], 2, unit(36)).unwrap();
        assert!(w.add_tensor_repeated("e", &[64, 5], 2, unit(36)).is_err());
    }
}
