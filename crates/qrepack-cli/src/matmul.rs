//! `qrepack matmul MODEL --tensor NAME --input X.npy --output Y.npy`: one weight matrix applied
//! to activations from a NumPy file.

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use qrepack::cpu::CpuFeatures;
use qrepack::gguf::GgufFile;
use qrepack::model::{LayoutPolicy, CACHE_VERSION_KEY};
use qrepack::{Layout, QMatrix};
use serde::Serialize;

use crate::load;
use crate::npy;

pub struct MatmulArgs<'a> {
    pub model: &'a Path,
    pub tensor: &'a str,
    pub input: &'a Path,
    pub output: &'a Path,
    pub layout: Option<Layout>,
    pub json: bool,
    pub quiet: bool,
}

/// The JSON report of `matmul` (keys in alphabetical order, as the reports always had them).
#[derive(Debug, Serialize)]
struct MatmulJson<'a> {
    cols: usize,
    input: String,
    kernels: &'static str,
    layout: &'static str,
    matmul_ms: f64,
    n: usize,
    output: String,
    output_shape: &'a [usize],
    rows: usize,
    tensor: &'a str,
    #[serde(rename = "type")]
    ty: &'static str,
}

/// The matrix `name` of the file, in `layout` (or the one qrepack picks).
fn load_matrix(path: &Path, name: &str, layout: Option<Layout>, quiet: bool) -> Result<QMatrix> {
    let g = GgufFile::open(path).with_context(|| format!("opening {}", path.display()))?;
    let info = g
        .tensor(name)
        .with_context(|| format!("no tensor named '{name}' in {}", path.display()))?
        .clone();
    let ty = info.ty.with_context(|| {
        format!(
            "tensor '{name}' has type id {}, which qrepack cannot multiply",
            info.type_id
        )
    })?;
    if info.dims.len() != 2 {
        bail!(
            "tensor '{name}' has {} dimensions {:?}; matmul takes a 2-D weight matrix",
            info.dims.len(),
            info.dims
        );
    }
    let (cols, rows) = (info.dims[0] as usize, info.dims[1] as usize);
    let check = |l: Layout| -> Result<()> {
        if !l.fits(ty, rows) {
            bail!(
                "layout {l} does not fit tensor '{name}' ({rows}x{cols} {ty}); layouts for {ty}: {}",
                Layout::candidates(ty)
                    .iter()
                    .filter(|c| c.fits(ty, rows))
                    .map(|c| c.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        Ok(())
    };
    if let Some(l) = layout {
        check(l)?;
    }
    if g.get(CACHE_VERSION_KEY).is_some() {
        // a repack cache stores some tensors repacked: go through Model
        drop(g);
        let (model, _) = load::open(path, LayoutPolicy::Best, quiet)?;
        let m = model
            .matrix(name)
            .with_context(|| format!("tensor '{name}' is not a weight matrix"))?;
        return match layout {
            Some(l) if l != m.layout() => {
                Ok(QMatrix::with_layout(ty, rows, cols, &m.to_ggml_bytes(), l)?)
            }
            _ => Ok(QMatrix::with_layout(
                ty,
                rows,
                cols,
                &m.to_ggml_bytes(),
                m.layout(),
            )?),
        };
    }
    let l = layout.unwrap_or_else(|| Layout::best_for(ty, rows, CpuFeatures::get()));
    QMatrix::with_layout(ty, rows, cols, g.tensor_bytes(&info), l)
        .with_context(|| format!("tensor '{name}'"))
}

pub fn run(a: &MatmulArgs) -> Result<String> {
    let x = npy::read(a.input)?;
    let m = load_matrix(a.model, a.tensor, a.layout, a.quiet)?;
    let (rows, cols) = (m.rows(), m.cols());
    let (n, out_shape) = match x.shape.as_slice() {
        [c] if *c == cols => (1, vec![rows]),
        [n, c] if *c == cols => (*n, vec![*n, rows]),
        s => bail!(
            "{}: shape {s:?} does not fit tensor '{}' ({rows}x{cols}): the input must be [n, {cols}] (or [{cols}])",
            a.input.display(),
            a.tensor
        ),
    };
    if n == 0 {
        bail!("{}: the input has no rows", a.input.display());
    }
    let mut y = vec![0.0f32; n * rows];
    let t0 = Instant::now();
    m.matmul(&x.data, n, &mut y)?;
    let took = t0.elapsed();
    npy::write(a.output, &out_shape, &y)?;
    if a.json {
        let v = MatmulJson {
            cols,
            input: a.input.display().to_string(),
            kernels: m.kernel_name(),
            layout: m.layout().name(),
            matmul_ms: took.as_secs_f64() * 1e3,
            n,
            output: a.output.display().to_string(),
            output_shape: &out_shape,
            rows,
            tensor: a.tensor,
            ty: m.ty().name(),
        };
        Ok(format!("{}\n", serde_json::to_string(&v)?))
    } else {
        Ok(format!(
            "{}: {rows}x{cols} {} in {} ({} kernels), {n} row(s) in {:.3} ms -> {} {:?}\n",
            a.tensor,
            m.ty(),
            m.layout(),
            m.kernel_name(),
            took.as_secs_f64() * 1e3,
            a.output.display(),
            out_shape
        ))
    }
}
