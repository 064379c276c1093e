//! A small reader and writer of NumPy `.npy` files holding little-endian f32 (`<f4`) arrays in
//! C order, the format `qrepack matmul` takes and writes.

use std::path::Path;

use anyhow::{bail, Context, Result};

const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// An f32 array: its shape and its values in C order.
#[derive(Clone, Debug, PartialEq)]
pub struct Array {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

/// The value of `key` in the header dict (`'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }`).
fn dict_value<'a>(header: &'a str, key: &str) -> Result<&'a str> {
    let pat = format!("'{key}':");
    let start = header
        .find(&pat)
        .or_else(|| header.find(&format!("\"{key}\":")))
        .with_context(|| format!("header has no '{key}' entry: {header}"))?
        + pat.len();
    let rest = header[start..].trim_start();
    // a tuple runs to its ')', anything else to the next ',' or '}'
    let end = if rest.starts_with('(') {
        rest.find(')').map(|i| i + 1)
    } else {
        rest.find([',', '}'])
    }
    .with_context(|| format!("header entry '{key}' is not terminated: {header}"))?;
    Ok(rest[..end].trim())
}

fn parse_shape(s: &str) -> Result<Vec<usize>> {
    let inner = s
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .with_context(|| format!("shape must be a tuple, got {s}"))?;
    inner
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            p.trim_end_matches('L')
                .parse::<usize>()
                .with_context(|| format!("bad dimension '{p}' in shape {s}"))
        })
        .collect()
}

/// Parses a whole `.npy` file held in memory.
pub fn parse(bytes: &[u8]) -> Result<Array> {
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        bail!("not a .npy file (missing the \\x93NUMPY magic)");
    }
    let (major, minor) = (bytes[6], bytes[7]);
    let (header_len, start) = match major {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10usize),
        2 | 3 => {
            if bytes.len() < 12 {
                bail!("truncated .npy header");
            }
            (
                u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
                12,
            )
        }
        _ => bail!(".npy format version {major}.{minor} is not supported (1.0, 2.0, 3.0 are)"),
    };
    let end = start
        .checked_add(header_len)
        .filter(|&e| e <= bytes.len())
        .context("truncated .npy header")?;
    let header = std::str::from_utf8(&bytes[start..end]).context(".npy header is not text")?;
    let header = header.trim();
    if !header.starts_with('{') || !header.ends_with('}') {
        bail!(".npy header is not a dict: {header}");
    }
    let descr = dict_value(header, "descr")?.trim_matches(|c| c == '\'' || c == '"');
    match descr {
        "<f4" => {}
        "|f4" | "=f4" if cfg!(target_endian = "little") => {}
        d => bail!("dtype '{d}' is not supported: the array must be little-endian float32 ('<f4'); convert it with x.astype('<f4')"),
    }
    match dict_value(header, "fortran_order")? {
        "False" => {}
        "True" => bail!("the array is in Fortran order; save it in C order (np.ascontiguousarray)"),
        v => bail!("bad fortran_order value '{v}'"),
    }
    let shape = parse_shape(dict_value(header, "shape")?)?;
    let n = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .context("shape overflows")?;
    let data = &bytes[end..];
    if Some(data.len()) != n.checked_mul(4) {
        bail!(
            "shape {shape:?} needs {n} f32 values ({} bytes), but the file has {} data bytes",
            n.saturating_mul(4),
            data.len()
        );
    }
    let data = data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Ok(Array { shape, data })
}

/// Reads a `.npy` file.
pub fn read(path: &Path) -> Result<Array> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    parse(&bytes).with_context(|| format!("{}", path.display()))
}

/// The bytes of a version 1.0 `.npy` file of `<f4` values in C order.
pub fn to_bytes(shape: &[usize], data: &[f32]) -> Result<Vec<u8>> {
    let n: usize = shape.iter().product();
    if n != data.len() {
        bail!("shape {shape:?} holds {n} values, got {}", data.len());
    }
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape_s = if dims.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    };
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape_s}, }}");
    // pad with spaces so that the data start at a multiple of 64, header ending in '\n'
    let total = 10 + header.len() + 1;
    header.push_str(&" ".repeat(total.next_multiple_of(64) - total));
    header.push('\n');
    let hlen = u16::try_from(header.len()).context("shape too long for a .npy v1 header")?;
    let mut out = Vec::with_capacity(10 + header.len() + 4 * data.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&hlen.to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for v in data {
        out.extend_from_slice(&v.to_le_bytes());
    }
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

    #[test]
    fn round_trip_and_alignment() {
        let data: Vec<f32> = (0..6).map(|i| i as f32 * 0.5 - 1.0).collect();
        let b = to_bytes(&[2, 3], &data).unwrap();
        let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
        assert_eq!((10 + hlen) % 64, 0);
        assert_eq!(b[10 + hlen - 1], b'\n');
        let a = parse(&b).unwrap();
        assert_eq!(a.shape, vec![2, 3]);
        assert_eq!(a.data, data);
        let a = parse(&to_bytes(&[3], &data[..3]).unwrap()).unwrap();
        assert_eq!(a.shape, vec![3]);
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
        let noshape = with_header("{'descr': '<f4', 'fortran_order': False, }\n", 0);
        assert!(e(&noshape).contains("'shape'"));
        let mut trunc = to_bytes(&[2], &[1.0, 2.0]).unwrap();
        trunc.truncate(20);
        assert!(e(&trunc).contains("truncated"));
        let scalar = with_header(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (), }\n",
            4,
        );
        assert_eq!(parse(&scalar).unwrap().shape, Vec::<usize>::new());
    }
}
