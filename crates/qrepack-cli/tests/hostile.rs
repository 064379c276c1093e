//! The hostile files of the reliability issue, through the binary: a clean error naming the
//! problem and exit code 1, never a panic. (Time and memory are measured, not asserted: see
//! docs/RELIABILITY.md.)

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_qrepack");

fn string(s: &str) -> Vec<u8> {
    let mut v = (s.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(s.as_bytes());
    v
}

fn header(n_tensors: u64, n_kv: u64) -> Vec<u8> {
    let mut v = b"GGUF".to_vec();
    v.extend_from_slice(&3u32.to_le_bytes());
    v.extend_from_slice(&n_tensors.to_le_bytes());
    v.extend_from_slice(&n_kv.to_le_bytes());
    v
}

fn tensor(dims: &[u64], offset: u64) -> Vec<u8> {
    let mut v = string("t");
    v.extend_from_slice(&(dims.len() as u32).to_le_bytes());
    for d in dims {
        v.extend_from_slice(&d.to_le_bytes());
    }
    v.extend_from_slice(&0u32.to_le_bytes());
    v.extend_from_slice(&offset.to_le_bytes());
    v
}

#[test]
fn hostile_files_give_clean_errors() {
    let dir = std::env::temp_dir().join(format!("qrepack-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut s = 99u64;
    let random: Vec<u8> = (0..1 << 16)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 33) as u8
        })
        .collect();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("random", random, "not a GGUF file"),
        (
            "dims",
            [header(1, 0), tensor(&[1 << 32; 4], 0), vec![0; 64]].concat(),
            "2^63",
        ),
        (
            "count",
            [header(1_000_000_000_000, 0), vec![0; 64]].concat(),
            "1000000000000 tensors",
        ),
        (
            "offset",
            [header(1, 0), tensor(&[32, 8], 1 << 40), vec![0; 1024]].concat(),
            "past the end",
        ),
    ];
    for (name, bytes, needle) in cases {
        let path = dir.join(format!("{name}.gguf"));
        std::fs::write(&path, bytes).unwrap();
        for cmd in ["inspect", "verify"] {
            let out = Command::new(BIN).arg(cmd).arg(&path).output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{cmd} {name}: {err}");
            assert!(
                err.contains(needle),
                "{cmd} {name}: '{err}' lacks '{needle}'"
            );
            assert!(!err.contains("panicked"), "{cmd} {name}: {err}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
