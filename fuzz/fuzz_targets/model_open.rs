//! `Model` on an arbitrary file, tensor data included: parse, convert every weight, multiply.
#![no_main]

use libfuzzer_sys::fuzz_target;
use qrepack::gguf::GgufFile;
use qrepack::model::{Model, OpenOptions};

fuzz_target!(|data: &[u8]| {
    let Ok(file) = GgufFile::from_bytes(data.to_vec()) else {
        return;
    };
    let Ok(model) = Model::from_gguf(file, &OpenOptions::default()) else {
        return;
    };
    for t in model.tensors() {
        if let Some(m) = model.matrix(&t.name) {
            if m.cols() <= 1 << 16 && m.rows() <= 1 << 12 {
                let x = vec![0.5f32; m.cols()];
                let mut y = vec![0.0f32; m.rows()];
                let _ = m.matmul(&x, 1, &mut y);
            }
        }
    }
});
