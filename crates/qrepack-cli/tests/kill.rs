//! A `qrepack repack` killed at any moment leaves either the old OUT (byte for byte) or no OUT,
//! or a complete, valid cache: never a partial file under OUT's name.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use qrepack::gguf::GgufWriter;
use qrepack::{GgmlType, Model};

const BIN: &str = env!("CARGO_BIN_EXE_qrepack");

struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        let p = std::env::temp_dir().join(format!("qrepack-kill-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// ~24 MiB of Q8_0 weights (random bytes with small scales): big enough that writing the cache
/// takes a while, so the kills land before, during and after the write.
fn write_model(path: &Path) {
    let (rows, cols) = (768usize, 4096usize);
    let ty = GgmlType::Q8_0;
    let mut s = 1u64;
    let mut bytes: Vec<u8> = (0..ty.matrix_bytes(rows, cols).unwrap())
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 33) as u8
        })
        .collect();
    for block in bytes.chunks_exact_mut(34) {
        block[0..2].copy_from_slice(&qrepack::blocks::F16Bits::from_f32(0.01).0);
    }
    let tensors: Vec<(String, Vec<u8>)> = (0..4)
        .map(|i| (format!("blk.{i}.ffn_up.weight"), bytes.clone()))
        .collect();
    let mut w = GgufWriter::new();
    for (name, data) in &tensors {
        w.add_tensor(name, &[cols as u64, rows as u64], ty.id(), data)
            .unwrap();
    }
    w.write_to(path, false).unwrap();
}

#[test]
fn killed_repack_never_leaves_a_partial_output() {
    let dir = TempDir::new();
    let input = dir.0.join("in.gguf");
    write_model(&input);
    let out = dir.0.join("out.gguf");
    let old = b"an older file the user owns".to_vec();
    let mut outcomes = [0usize; 3]; // old kept, absent, new complete
    for (trial, delay_ms) in [0u64, 2, 5, 10, 20, 40, 80, 160, 320, 640]
        .iter()
        .enumerate()
    {
        // half the trials start from an existing OUT replaced with --force
        let with_old = trial % 2 == 0;
        if with_old {
            std::fs::write(&out, &old).unwrap();
        } else {
            let _ = std::fs::remove_file(&out);
        }
        let mut cmd = Command::new(BIN);
        cmd.arg("repack").arg(&input).arg("-o").arg(&out).arg("-q");
        if with_old {
            cmd.arg("--force");
        }
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(*delay_ms));
        let _ = child.kill(); // SIGKILL: no cleanup code runs
        let _ = child.wait();
        match std::fs::read(&out) {
            Err(_) => {
                assert!(!with_old, "delay {delay_ms} ms: the old OUT vanished");
                outcomes[1] += 1;
            }
            Ok(bytes) if bytes == old => outcomes[0] += 1,
            Ok(_) => {
                let model = Model::open(&out).unwrap_or_else(|e| {
                    panic!("delay {delay_ms} ms: OUT is not a valid cache: {e}")
                });
                assert!(model.is_cache(), "delay {delay_ms} ms");
                outcomes[2] += 1;
            }
        }
    }
    // The input is never touched.
    assert!(Model::open(&input).is_ok());
    eprintln!(
        "old kept {}, absent {}, complete {}",
        outcomes[0], outcomes[1], outcomes[2]
    );
}
