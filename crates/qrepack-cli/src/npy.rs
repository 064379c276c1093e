//! NumPy `.npy` files of little-endian f32 (`<f4`) arrays in C order, the format `qrepack matmul`
//! takes and writes. The header and the element codec are `ndarray-npy`'s; this module only
//! decides what is accepted (exactly `<f4` in C order) and words the errors for the CLI.

use std::path::Path;

use anyhow::{bail, Context, Result};
use ndarray_npy::npy::header::{Header, Layout, ParseHeaderError, ReadHeaderError};
use ndarray_npy::{ReadableElement, WritableElement};

/// An f32 array: its shape and its values in C order.
#[derive(Clone, Debug, PartialEq)]
pub struct Array {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

/// The header error in the words of the CLI.
fn header_error(e: ReadHeaderError) -> anyhow::Error {
    match e {
        ReadHeaderError::Io(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            anyhow::anyhow!("truncated .npy header")
        }
        ReadHeaderError::Io(e) => anyhow::Error::new(e).context("reading the .npy header"),
        ReadHeaderError::Parse(ParseHeaderError::MagicString) => {
            anyhow::anyhow!("not a .npy file (missing the \\x93NUMPY magic)")
        }
        ReadHeaderError::Parse(ParseHeaderError::Version { major, minor }) => anyhow::anyhow!(
            ".npy format version {major}.{minor} is not supported (1.0, 2.0, 3.0 are)"
        ),
        ReadHeaderError::Parse(ParseHeaderError::MissingKey(k)) => {
            // ndarray-npy 0.10 names a missing 'shape' "shaper"
            let k = if k == "shaper" { "shape" } else { k.as_str() };
            anyhow::anyhow!("the .npy header has no '{k}' entry")
        }
        ReadHeaderError::Parse(e) => anyhow::anyhow!("bad .npy header: {e}"),
    }
}

/// Parses a whole `.npy` file held in memory.
pub fn parse(bytes: &[u8]) -> Result<Array> {
    let mut rest = bytes;
    let header = Header::from_reader(&mut rest).map_err(header_error)?;
    // the descriptor as a Python literal, e.g. '<f4'
    let descr = header.type_descriptor.to_string();
    match descr.as_str() {
        "'<f4'" => {}
        "'|f4'" | "'=f4'" if cfg!(target_endian = "little") => {}
        d => bail!("dtype {d} is not supported: the array must be little-endian float32 ('<f4'); convert it with x.astype('<f4')"),
    }
    if header.layout == Layout::Fortran {
        bail!("the array is in Fortran order; save it in C order (np.ascontiguousarray)");
    }
    let shape = header.shape;
    let n = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .context("shape overflows")?;
    if Some(rest.len()) != n.checked_mul(4) {
        bail!(
            "shape {shape:?} needs {n} f32 values ({} bytes), but the file has {} data bytes",
            n.saturating_mul(4),
            rest.len()
        );
    }
    let data = f32::read_to_end_exact_vec(rest, &f32::type_descriptor(), n)
        .context("reading the .npy data")?;
    Ok(Array { shape, data })
}

/// Reads a `.npy` file.
pub fn read(path: &Path) -> Result<Array> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    parse(&bytes).with_context(|| format!("{}", path.display()))
}

/// The bytes of a `.npy` file (version 1.0 unless the header needs more) of `<f4` values in C
/// order.
pub fn to_bytes(shape: &[usize], data: &[f32]) -> Result<Vec<u8>> {
    let n: usize = shape.iter().product();
    if n != data.len() {
        bail!("shape {shape:?} holds {n} values, got {}", data.len());
    }
    let header = Header {
        type_descriptor: f32::type_descriptor(),
        layout: Layout::Standard,
        shape: shape.to_vec(),
    };
    let mut out = header.to_bytes().context("formatting the .npy header")?;
    out.reserve(4 * data.len());
    f32::write_slice(data, &mut out).context("formatting the .npy data")?;
    Ok(out)
}

/// Writes a `.npy` file (through a temporary file renamed into place).
pub fn write(path: &Path, shape: &[usize], data: &[f32]) -> Result<()> {
    let bytes = to_bytes(shape, data)?;
    let name = path
        .file_name()
        .with_context(|| format!("{} is not a file path", path.display()))?;
    let tmp = path.with_file_name(format!(
        ".{}.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    std::fs::write(&tmp, &bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| {
        let _ = std::fs::remove_file(&tmp);
        format!("renaming {} to {}", tmp.display(), path.display())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAGIC: &[u8; 6] = b"\x93NUMPY";

    #[test]
    fn round_trip_and_alignment() {
        let data: Vec<f32> = (0..6).map(|i| i as f32 * 0.5 - 1.0).collect();
        let b = to_bytes(&[2, 3], &data).unwrap();
        assert_eq!(&b[..8], b"\x93NUMPY\x01\x00");
        let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
        assert_eq!((10 + hlen) % 64, 0);
        assert_eq!(b[10 + hlen - 1], b'\n');
        let h = std::str::from_utf8(&b[10..10 + hlen]).unwrap();
        assert!(h.starts_with("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)"));
        assert_eq!(&b[10 + hlen..10 + hlen + 4], &(-1.0f32).to_le_bytes());
        let a = parse(&b).unwrap();
        assert_eq!(a.shape, vec![2, 3]);
        assert_eq!(a.data, data);
        let b = to_bytes(&[3], &data[..3]).unwrap();
        let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
        let h = std::str::from_utf8(&b[10..10 + hlen]).unwrap();
        assert!(h.contains("'shape': (3,)"), "{h}");
        let a = parse(&b).unwrap();
        assert_eq!(a.shape, vec![3]);
        assert!(to_bytes(&[2, 2], &data).is_err());
    }

    fn with_header(h: &str, data_bytes: usize) -> Vec<u8> {
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&[1, 0]);
        b.extend_from_slice(&(h.len() as u16).to_le_bytes());
        b.extend_from_slice(h.as_bytes());
        b.extend(std::iter::repeat_n(0u8, data_bytes));
        b
    }

    #[test]
    fn numpy_headers_are_read() {
        // numpy's own spelling: a trailing ", " and padding, and a double-quoted key
        let h = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1), }          \n";
        let mut b = with_header(h, 0);
        b.extend_from_slice(&1.5f32.to_le_bytes());
        b.extend_from_slice(&(-2.0f32).to_le_bytes());
        let a = parse(&b).unwrap();
        assert_eq!((a.shape, a.data), (vec![2, 1], vec![1.5, -2.0]));
        let h = "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (0,)}\n";
        assert_eq!(parse(&with_header(h, 0)).unwrap().shape, vec![0]);
    }

    #[test]
    fn bad_files_are_errors_naming_the_problem() {
        let e = |b: &[u8]| format!("{:#}", parse(b).unwrap_err());
        assert!(e(b"hello world").contains("magic"));
        let f8 = with_header(
            "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }\n",
            16,
        );
        assert!(e(&f8).contains("'<f8'"));
        let be = with_header(
            "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }\n",
            8,
        );
        assert!(e(&be).contains("little-endian"));
        let fo = with_header(
            "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }\n",
            16,
        );
        assert!(e(&fo).contains("Fortran"));
        let short = with_header(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n",
            20,
        );
        assert!(e(&short).contains("needs 6 f32 values"));
        let long = with_header(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n",
            28,
        );
        assert!(e(&long).contains("28 data bytes"));
        let noshape = with_header("{'descr': '<f4', 'fortran_order': False, }\n", 0);
        assert!(e(&noshape).contains("'shape'"), "{}", e(&noshape));
        let mut trunc = to_bytes(&[2], &[1.0, 2.0]).unwrap();
        trunc.truncate(20);
        assert!(e(&trunc).contains("truncated"));
        let mut v9 = to_bytes(&[2], &[1.0, 2.0]).unwrap();
        v9[6] = 9;
        assert!(e(&v9).contains("version 9.0"));
        let scalar = with_header(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (), }\n",
            4,
        );
        assert_eq!(parse(&scalar).unwrap().shape, Vec::<usize>::new());
    }
}
