//! What the CLI's integration tests share: the binary, a temporary directory, a small model
//! file, and ways to run the binary and check its output.
// Each test crate uses its own part of these.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use qrepack::gguf::{GgufValue, GgufWriter};
use qrepack::{quantize, GgmlType};
use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_qrepack");

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("qrepack-cli-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// (name, type, rows, cols) of the small model's matrices.
pub const MATRICES: [(&str, GgmlType, usize, usize); 5] = [
    ("blk.0.attn_q.weight", GgmlType::Q4_0, 16, 64),
    ("blk.0.attn_k.weight", GgmlType::Q4_0, 7, 64),
    ("blk.0.ffn_up.weight", GgmlType::Q4_K, 16, 256),
    ("blk.0.ffn_down.weight", GgmlType::Q6_K, 16, 256),
    ("output.weight", GgmlType::Q8_0, 7, 64),
];

/// Writes the small model: the matrices above and a 1-D f32 norm.
pub fn write_model(path: &Path) {
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", GgufValue::String("llama".into()))
        .unwrap();
    w.add_kv("general.name", GgufValue::String("tiny test".into()))
        .unwrap();
    w.add_kv("llama.block_count", GgufValue::U32(1)).unwrap();
    w.add_kv("llama.embedding_length", GgufValue::U32(64))
        .unwrap();
    w.add_kv("llama.context_length", GgufValue::U32(128))
        .unwrap();
    for (i, (name, ty, rows, cols)) in MATRICES.iter().enumerate() {
        let q = quantize(*ty, &values(rows * cols, i as u64 + 1), *rows, *cols).unwrap();
        w.add_tensor_owned(name, &[*cols as u64, *rows as u64], ty.id(), q)
            .unwrap();
    }
    let norm: Vec<u8> = values(64, 99)
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    w.add_tensor_owned("blk.0.attn_norm.weight", &[64], GgmlType::F32.id(), norm)
        .unwrap();
    w.write_to(path, true).unwrap();
}

pub fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

pub fn ok_json(args: &[&str]) -> Value {
    let o = run(args);
    assert!(
        o.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{args:?}: not JSON ({e}): {}",
            String::from_utf8_lossy(&o.stdout)
        )
    })
}

pub fn fails(args: &[&str], needle: &str) {
    let o = run(args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{args:?} should fail: {err}");
    assert!(err.contains(needle), "{args:?}: {err:?} lacks {needle:?}");
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
}

/// A usage error: clap's exit code 2 and a message containing `needle`.
pub fn usage_error(args: &[&str], needle: &str) {
    let o = run(args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{args:?} should fail: {err}");
    assert!(err.contains(needle), "{args:?}: {err:?} lacks {needle:?}");
    assert!(o.stdout.is_empty(), "{args:?} printed to stdout");
}

pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}
