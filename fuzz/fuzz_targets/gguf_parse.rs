//! The GGUF reader on arbitrary bytes: any input must give Ok or a clean Err.
#![no_main]

use libfuzzer_sys::fuzz_target;
use qrepack::gguf::GgufFile;

fuzz_target!(|data: &[u8]| {
    if let Ok(file) = GgufFile::from_bytes(data.to_vec()) {
        // Everything the reader hands out must be readable without panicking.
        for t in file.tensors() {
            let _ = file.tensor_bytes(t).len();
        }
        for (key, value) in file.metadata() {
            let _ = (key.len(), value.to_string().len());
        }
    }
});
