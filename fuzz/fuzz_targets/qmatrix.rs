//! `QMatrix::new`/`with_layout` + `matmul` on an arbitrary type, shape, layout and bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use qrepack::{GgmlType, Layout, QMatrix};

fuzz_target!(|data: &[u8]| {
    if data.len() < 6 {
        return;
    }
    let ty = GgmlType::ALL[data[0] as usize % GgmlType::ALL.len()];
    let layout = Layout::ALL[data[1] as usize % Layout::ALL.len()];
    let rows = 1 + data[2] as usize % 24;
    // Up to 12 blocks a row: past the 8 blocks the batch-1 kernels work out ahead.
    let cols = ty.block_size() * (1 + data[3] as usize % 12) + (data[4] as usize % 3);
    let n = 1 + data[5] as usize % 9;
    let bytes = &data[6..];
    let built = if data[1] & 0x80 != 0 {
        QMatrix::new(ty, rows, cols, bytes)
    } else {
        QMatrix::with_layout(ty, rows, cols, bytes, layout)
    };
    let Ok(m) = built else {
        return;
    };
    assert_eq!(m.to_ggml_bytes(), bytes);
    // Activations from the tail of the input, NaN and infinities included.
    let x: Vec<f32> = (0..n * cols)
        .map(|i| match bytes.get(i % bytes.len().max(1)).copied().unwrap_or(0) {
            0 => f32::NAN,
            1 => f32::INFINITY,
            b => (b as f32 - 128.0) / 16.0,
        })
        .collect();
    let mut y = vec![0.0f32; n * rows];
    m.matmul(&x, n, &mut y).expect("valid shapes");
});
