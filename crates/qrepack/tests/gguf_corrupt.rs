//! The GGUF reader against truncated, corrupted and hostile files: every case must be an error
//! (never a panic, a huge allocation or a slow scan), and valid files must round-trip.

use qrepack::gguf::{GgufFile, GgufValue, GgufValueType, GgufWriter};
use qrepack::{quantize, Error, GgmlType};

/// A hand-made GGUF encoder for files the writer refuses to produce.
#[derive(Default)]
struct Raw(Vec<u8>);

impl Raw {
    fn header(version: u32, n_tensors: u64, n_kv: u64) -> Raw {
        let mut r = Raw(b"GGUF".to_vec());
        r.u32(version).u64(n_tensors).u64(n_kv);
        r
    }
    fn u32(&mut self, v: u32) -> &mut Raw {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Raw {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn str(&mut self, s: &str) -> &mut Raw {
        self.u64(s.len() as u64);
        self.0.extend_from_slice(s.as_bytes());
        self
    }
    fn kv_u32(&mut self, key: &str, v: u32) -> &mut Raw {
        self.str(key).u32(4).u32(v)
    }
    fn tensor(&mut self, name: &str, dims: &[u64], ty: u32, offset: u64) -> &mut Raw {
        self.str(name).u32(dims.len() as u32);
        for &d in dims {
            self.u64(d);
        }
        self.u32(ty).u64(offset)
    }
    fn pad(&mut self, align: usize) -> &mut Raw {
        while !self.0.len().is_multiple_of(align) {
            self.0.push(0);
        }
        self
    }
    fn data(&mut self, n: usize) -> &mut Raw {
        self.0.extend((0..n).map(|i| i as u8));
        self
    }
    fn bytes(&self) -> Vec<u8> {
        self.0.clone()
    }
}

fn owned(f: &GgufFile) -> Vec<(String, GgufValue)> {
    f.metadata()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

fn format_err(bytes: Vec<u8>) -> String {
    match GgufFile::from_bytes(bytes) {
        Err(Error::Format(m)) => m,
        Err(e) => panic!("expected a format error, got {e}"),
        Ok(_) => panic!("expected a format error, the file was accepted"),
    }
}

fn every_value() -> Vec<(String, GgufValue)> {
    use GgufValue as V;
    vec![
        ("u8".into(), V::U8(200)),
        ("i8".into(), V::I8(-100)),
        ("u16".into(), V::U16(60000)),
        ("i16".into(), V::I16(-30000)),
        ("u32".into(), V::U32(4_000_000_000)),
        ("i32".into(), V::I32(-2_000_000_000)),
        ("f32".into(), V::F32(-1.5e-7)),
        ("bool.t".into(), V::Bool(true)),
        ("bool.f".into(), V::Bool(false)),
        ("string".into(), V::String("héllo, wörld".into())),
        ("string.empty".into(), V::String(String::new())),
        ("u64".into(), V::U64(u64::MAX)),
        ("i64".into(), V::I64(i64::MIN)),
        ("f64".into(), V::F64(std::f64::consts::PI)),
        (
            "array.u8".into(),
            V::Array(GgufValueType::U8, vec![V::U8(1), V::U8(2)]),
        ),
        ("array.empty".into(), V::Array(GgufValueType::F64, vec![])),
        (
            "array.string".into(),
            V::Array(
                GgufValueType::String,
                vec![V::String("a".into()), V::String("".into())],
            ),
        ),
        (
            "array.nested".into(),
            V::Array(
                GgufValueType::Array,
                vec![
                    V::Array(GgufValueType::I32, vec![V::I32(-1), V::I32(7)]),
                    V::Array(
                        GgufValueType::Array,
                        vec![V::Array(GgufValueType::Bool, vec![V::Bool(true)])],
                    ),
                ],
            ),
        ),
        (
            "array.every".into(),
            V::Array(
                GgufValueType::F32,
                (0..100).map(|i| V::F32(i as f32 * 0.5)).collect(),
            ),
        ),
    ]
}

#[test]
fn every_value_type_round_trips() {
    let mut w = GgufWriter::new();
    let kvs = every_value();
    for (k, v) in &kvs {
        w.add_kv(k, v.clone()).unwrap();
    }
    for t in GgufValueType::ALL {
        assert!(kvs
            .iter()
            .any(|(_, v)| v.value_type() == t || matches!(v, GgufValue::Array(e, _) if *e == t)));
    }
    let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.alignment(), 32);
    assert_eq!(owned(&f), kvs);
    assert_eq!(f.get("u32").and_then(|v| v.as_u64()), Some(4_000_000_000));
    assert_eq!(f.get("i8").and_then(|v| v.as_i64()), Some(-100));
    assert_eq!(f.get("i8").and_then(|v| v.as_u64()), None);
    assert_eq!(
        f.get("string").and_then(|v| v.as_str()),
        Some("héllo, wörld")
    );
    assert_eq!(
        f.get("array.u8")
            .and_then(|v| v.as_array())
            .map(|a| a.len()),
        Some(2)
    );
    let summary = f.get("array.every").unwrap().to_string();
    assert!(summary.starts_with("[f32; 100] [0, 0.5"), "{summary}");
    assert!(f.tensors().is_empty());
}

#[test]
fn writer_rejects_bad_input() {
    let mut w = GgufWriter::new();
    w.add_kv("a", GgufValue::U8(1)).unwrap();
    assert!(w.add_kv("a", GgufValue::U8(2)).is_err());
    assert!(w.add_kv("", GgufValue::U8(2)).is_err());
    assert!(w
        .add_kv(
            "mixed",
            GgufValue::Array(GgufValueType::U8, vec![GgufValue::I8(1)])
        )
        .is_err());
    assert!(w.set_alignment(3).is_err());
    assert!(w.set_alignment(0).is_err());
    assert!(w.add_kv("general.alignment", GgufValue::U64(64)).is_err());
    w.set_alignment(64).unwrap();
    assert!(w.add_tensor_owned("t", &[32], 2, vec![0; 17]).is_err()); // q4_0 block is 18
    assert!(w.add_tensor_owned("t", &[33], 2, vec![0; 18]).is_err()); // not whole blocks
    assert!(w
        .add_tensor_owned("t", &[1, 1, 1, 1, 1], 0, vec![0; 4])
        .is_err());
    assert!(w
        .add_tensor_owned(&"x".repeat(64), &[1], 0, vec![0; 4])
        .is_err());
    w.add_tensor_owned("t", &[32], 2, vec![0; 18]).unwrap();
    assert!(w.add_tensor_owned("t", &[32], 2, vec![0; 18]).is_err());
    let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    assert_eq!(f.alignment(), 64);
    assert_eq!(f.data_start() % 64, 0);
}

/// A small valid file: two kvs, three tensors whose data end exactly at the end of the file.
fn tiny() -> (Vec<u8>, u64) {
    let mut w = GgufWriter::new();
    w.add_kv("general.name", GgufValue::String("tiny".into()))
        .unwrap();
    w.add_kv(
        "arr",
        GgufValue::Array(GgufValueType::U16, vec![GgufValue::U16(3); 3]),
    )
    .unwrap();
    let x: Vec<f32> = (0..64).map(|i| (i as f32 * 0.3).sin()).collect();
    w.add_tensor_owned(
        "q",
        &[32, 2],
        2,
        quantize(GgmlType::Q4_0, &x, 2, 32).unwrap(),
    )
    .unwrap();
    w.add_tensor_owned("odd", &[3], 24, vec![1, 2, 3]).unwrap(); // i8, unknown to qrepack
    w.add_tensor_owned("f", &[8], 0, vec![7; 32]).unwrap();
    let bytes = w.to_bytes().unwrap();
    let f = GgufFile::from_bytes(bytes.clone()).unwrap();
    let t = f.tensor("f").unwrap();
    let end = f.data_start() + t.offset + t.size;
    assert_eq!(end, bytes.len() as u64);
    (bytes, end)
}

#[test]
fn tiny_file_reads_back() {
    let (bytes, _) = tiny();
    let f = GgufFile::from_bytes(bytes).unwrap();
    assert_eq!(f.tensors().len(), 3);
    let q = f.tensor("q").unwrap();
    assert_eq!((q.ty, q.size, q.offset), (Some(GgmlType::Q4_0), 36, 0));
    let odd = f.tensor("odd").unwrap();
    assert_eq!((odd.ty, odd.size, odd.size_known()), (None, 3, true));
    assert_eq!(f.tensor_bytes(odd), &[1, 2, 3]);
    assert_eq!(f.tensor_shared(odd).as_ref(), &[1, 2, 3]);
    assert_eq!(f.tensor_bytes(f.tensor("f").unwrap()), &[7; 32]);
    assert_eq!(f.get("general.name").unwrap().to_string(), "\"tiny\"");
}

#[test]
fn truncation_at_every_byte_fails() {
    let (bytes, end) = tiny();
    for n in 0..bytes.len() {
        let r = GgufFile::from_bytes(bytes[..n].to_vec());
        if (n as u64) < end {
            assert!(
                matches!(r, Err(Error::Format(_))),
                "truncated at {n} was accepted"
            );
        }
    }
}

#[test]
fn truncation_messages_name_the_section() {
    let (bytes, _) = tiny();
    assert!(format_err(bytes[..3].to_vec()).contains("magic"));
    assert!(format_err(bytes[..6].to_vec()).contains("version"));
    assert!(format_err(bytes[..12].to_vec()).contains("tensor count"));
    assert!(format_err(bytes[..30].to_vec()).contains("metadata keys"));
    // the counts fit from byte 24 + 2 * 14 + 3 * 25 on; the metadata ends at 93
    let m = format_err(bytes[..140].to_vec());
    assert!(m.contains("tensor 'q'") || m.contains("tensor 1"), "{m}");
    let mut r = Raw::header(3, 0, 2);
    r.str("general.name").u32(8).u64(4).data(2);
    let m = format_err(r.bytes());
    assert!(m.contains("general.name"), "{m}");
    let mut r = Raw::header(3, 0, 2);
    r.kv_u32("a", 1).u64(100).data(20);
    let m = format_err(r.bytes());
    assert!(m.contains("metadata entry 1"), "{m}");
    let f = GgufFile::from_bytes(bytes.clone()).unwrap();
    let last = f.tensor("f").unwrap();
    let m = format_err(bytes[..bytes.len() - 1].to_vec());
    assert!(m.contains("'f'"), "{m}");
    let _ = last;
}

#[test]
fn random_corruption_never_panics() {
    let (bytes, _) = tiny();
    let mut s = 0x1234_5678_9abc_def0u64;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    for _ in 0..20_000 {
        let mut b = bytes.clone();
        for _ in 0..1 + next() % 4 {
            let i = (next() % b.len() as u64) as usize;
            b[i] = next() as u8;
        }
        if let Ok(f) = GgufFile::from_bytes(b) {
            for t in f.tensors() {
                let _ = f.tensor_bytes(t);
            }
        }
    }
    for len in 0..2000usize {
        let mut b: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        if len >= 8 && len % 2 == 0 {
            b[..4].copy_from_slice(b"GGUF");
            b[4..8].copy_from_slice(&3u32.to_le_bytes());
        }
        let _ = GgufFile::from_bytes(b);
    }
}

#[test]
fn bad_magic_and_versions() {
    assert!(format_err(b"GGML\x03\0\0\0".to_vec()).contains("magic"));
    for v in [0u32, 1, 4, 0x0300_0000] {
        let m = format_err(Raw::header(v, 0, 0).bytes());
        assert!(m.contains("version"), "{m}");
    }
    assert!(format_err(Raw::header(0x0300_0000, 0, 0).bytes()).contains("big-endian"));
    GgufFile::from_bytes(Raw::header(2, 0, 0).bytes()).unwrap();
    GgufFile::from_bytes(Raw::header(3, 0, 0).bytes()).unwrap();
}

#[test]
fn huge_counts_fail_fast() {
    for (nt, nkv) in [
        (1_000_000_000_000u64, 0u64),
        (0, 1_000_000_000_000),
        (u64::MAX, u64::MAX),
        (u64::MAX / 25, 1),
        (1, 0),
        (0, 1),
    ] {
        let mut r = Raw::header(3, nt, nkv);
        r.data(20);
        let m = format_err(r.bytes());
        assert!(!m.is_empty());
    }
    // an array of 10^12 elements
    let mut r = Raw::header(3, 0, 1);
    r.str("arr").u32(9).u32(0).u64(1_000_000_000_000).data(100);
    assert!(format_err(r.bytes()).contains("'arr'"));
    let mut r = Raw::header(3, 0, 1);
    r.str("arr").u32(9).u32(8).u64(u64::MAX).data(100);
    assert!(format_err(r.bytes()).contains("'arr'"));
}

#[test]
fn string_lengths_past_the_end() {
    let mut r = Raw::header(3, 0, 1);
    r.u64(1 << 40).data(10);
    assert!(format_err(r.bytes()).contains("key of metadata entry 0"));
    let mut r = Raw::header(3, 0, 1);
    r.str("s").u32(8).u64(u64::MAX).data(10);
    assert!(format_err(r.bytes()).contains("'s'"));
    let mut r = Raw::header(3, 1, 0);
    r.u64(1000).data(40);
    assert!(format_err(r.bytes()).contains("name of tensor 0"));
    // a key that is not UTF-8
    let mut r = Raw::header(3, 0, 1);
    r.u64(2);
    r.0.extend_from_slice(&[0xff, 0xfe]);
    r.u32(0).0.push(1);
    assert!(format_err(r.bytes()).contains("UTF-8"));
}

#[test]
fn bad_value_types_and_nesting() {
    let mut r = Raw::header(3, 0, 1);
    r.str("k").u32(13).u32(0);
    assert!(format_err(r.bytes()).contains("unknown value type"));
    let mut r = Raw::header(3, 0, 1);
    r.str("k").u32(9).u32(77).u64(0);
    assert!(format_err(r.bytes()).contains("element type"));
    // arrays of arrays nested 10 000 deep: rejected, not a stack overflow
    let mut r = Raw::header(3, 0, 1);
    r.str("deep").u32(9);
    for _ in 0..10_000 {
        r.u32(9).u64(1);
    }
    r.u32(0).u64(0);
    assert!(format_err(r.bytes()).contains("nested"));
    let mut r = Raw::header(3, 0, 1);
    r.str("").u32(0).data(8);
    assert!(format_err(r.bytes()).contains("empty key"));
}

#[test]
fn duplicates_are_rejected() {
    let mut r = Raw::header(3, 0, 2);
    r.kv_u32("a", 1).kv_u32("a", 2);
    assert!(format_err(r.bytes()).contains("duplicate metadata key 'a'"));
    let mut r = Raw::header(3, 2, 0);
    r.tensor("t", &[8], 0, 0)
        .tensor("t", &[8], 0, 32)
        .pad(32)
        .data(64);
    assert!(format_err(r.bytes()).contains("duplicate tensor name 't'"));
}

#[test]
fn alignment_must_be_a_u32_power_of_two() {
    for a in [0u32, 3, 48, 0x8000_0001] {
        let mut r = Raw::header(3, 0, 1);
        r.kv_u32("general.alignment", a);
        assert!(format_err(r.bytes()).contains("general.alignment"), "{a}");
    }
    let mut r = Raw::header(3, 0, 1);
    r.str("general.alignment").u32(10).u64(32);
    assert!(format_err(r.bytes()).contains("u32"));
    // a huge alignment pushes the data section past the end
    let mut r = Raw::header(3, 1, 1);
    r.kv_u32("general.alignment", 1 << 31)
        .tensor("t", &[8], 0, 0)
        .data(64);
    assert!(format_err(r.bytes()).contains("data section"));
    // a good non-default alignment
    let mut r = Raw::header(3, 2, 1);
    r.kv_u32("general.alignment", 8)
        .tensor("a", &[1], 0, 0)
        .tensor("b", &[2], 0, 8)
        .pad(8)
        .data(16);
    let f = GgufFile::from_bytes(r.bytes()).unwrap();
    assert_eq!(f.alignment(), 8);
    assert_eq!(
        f.tensor_bytes(f.tensor("b").unwrap()),
        &[8, 9, 10, 11, 12, 13, 14, 15]
    );
}

#[test]
fn bad_tensor_infos() {
    let one = |dims: &[u64], ty: u32, off: u64, data: usize| {
        let mut r = Raw::header(3, 1, 0);
        r.tensor("t", dims, ty, off).pad(32).data(data);
        r.bytes()
    };
    // valid
    GgufFile::from_bytes(one(&[8], 0, 0, 32)).unwrap();
    assert!(format_err(one(&[8], 0, 1u64 << 50, 32)).contains("past the end"));
    assert!(format_err(one(&[8], 0, u64::MAX - 7, 32)).contains("'t'"));
    assert!(format_err(one(&[9], 0, 0, 32)).contains("past the end"));
    assert!(format_err(one(&[8], 0, 4, 64)).contains("not a multiple of the alignment"));
    assert!(format_err(one(&[1 << 32, 1 << 32, 1 << 32], 0, 0, 32)).contains("2^63"));
    assert!(format_err(one(&[u64::MAX], 0, 0, 32)).contains("negative"));
    assert!(format_err(one(&[1 << 62, 2], 0, 0, 32)).contains("'t'"));
    assert!(format_err(one(&[1 << 61], 0, 0, 32)).contains("past the end")); // 2^63 bytes
    assert!(format_err(one(&[1 << 61], 28, 0, 32)).contains("overflows")); // f64: 2^64 B
    assert!(format_err(one(&[33], 2, 0, 64)).contains("multiple of 32"));
    let mut r = Raw::header(3, 1, 0);
    r.str("t").u32(5);
    for _ in 0..5 {
        r.u64(1);
    }
    r.u32(0).u64(0).pad(32).data(32);
    assert!(format_err(r.bytes()).contains("5 dimensions"));
    // overlapping tensors
    let mut r = Raw::header(3, 2, 0);
    r.tensor("a", &[8], 0, 0)
        .tensor("b", &[16], 0, 32)
        .pad(32)
        .data(96);
    GgufFile::from_bytes(r.bytes()).unwrap();
    let mut r = Raw::header(3, 2, 0);
    r.tensor("a", &[16], 0, 32)
        .tensor("b", &[16], 0, 0)
        .pad(32)
        .data(96);
    assert!(format_err(r.bytes()).contains("overlap"));
}

#[test]
fn unknown_type_ids_are_listed_not_fatal() {
    let mut r = Raw::header(3, 2, 0);
    r.tensor("mystery", &[8, 8], 999, 0)
        .tensor("i16", &[33], 25, 0)
        .pad(32)
        .data(66);
    let f = GgufFile::from_bytes(r.bytes()).unwrap();
    let m = f.tensor("mystery").unwrap();
    assert_eq!((m.ty, m.size_known(), m.size), (None, false, 0));
    assert!(f.tensor_bytes(m).is_empty());
    // a ggml type qrepack does not multiply (I16): its size is known
    let i16t = f.tensor("i16").unwrap();
    assert_eq!((i16t.ty, i16t.size_known(), i16t.size), (None, true, 66));
    assert_eq!(i16t.type_name(), "type 25");
    // offset of an unknown-size tensor still checked
    let mut r = Raw::header(3, 1, 0);
    r.tensor("mystery", &[8], 999, 1 << 40).pad(32).data(32);
    assert!(format_err(r.bytes()).contains("'mystery'"));
}

#[test]
fn open_reports_io_errors_and_maps_files() {
    let dir = std::env::temp_dir().join(format!("qrepack-gguf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    assert!(matches!(
        GgufFile::open(dir.join("missing.gguf")),
        Err(Error::Io(_))
    ));
    let (bytes, _) = tiny();
    let p = dir.join("tiny.gguf");
    std::fs::write(&p, &bytes).unwrap();
    let f = GgufFile::open(&p).unwrap();
    assert!(f.is_mapped());
    assert_eq!(f.file_size(), bytes.len() as u64);
    let t = f.tensor("q").unwrap();
    let shared = f.tensor_shared(t);
    drop(f); // the shared range keeps the map alive
    assert_eq!(shared.len(), 36);
    std::fs::write(&p, &bytes[..bytes.len() - 5]).unwrap();
    let m = match GgufFile::open(&p) {
        Err(Error::Format(m)) => m,
        other => panic!("{other:?}"),
    };
    assert!(m.contains("tiny.gguf"), "{m}");
    // atomic writer: no overwrite without the flag
    let mut w = GgufWriter::new();
    w.add_kv("k", GgufValue::Bool(true)).unwrap();
    assert!(matches!(w.write_to(&p, false), Err(Error::Invalid(_))));
    w.write_to(&p, true).unwrap();
    assert_eq!(
        GgufFile::open(&p).unwrap().get("k"),
        Some(&GgufValue::Bool(true))
    );
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 1, "temp files left behind: {left:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Large arrays (a tokenizer vocabulary) are validated while parsing but decoded on first use:
/// the values must be the same, and truncation or a bad length inside them still fails the open.
#[test]
fn large_arrays_decode_lazily_and_are_validated_eagerly() {
    let tokens: Vec<GgufValue> = (0..5000)
        .map(|i| GgufValue::String(format!("tok{i}▁")))
        .collect();
    let scores: Vec<GgufValue> = (0..3000).map(|i| GgufValue::F32(i as f32 * 0.5)).collect();
    let nested: Vec<GgufValue> = (0..1500)
        .map(|i| GgufValue::Array(GgufValueType::U16, vec![GgufValue::U16(i); 3]))
        .collect();
    let kvs = vec![
        ("a.small".to_string(), GgufValue::U32(7)),
        (
            "tokenizer.ggml.tokens".to_string(),
            GgufValue::Array(GgufValueType::String, tokens.clone()),
        ),
        (
            "tokenizer.ggml.scores".to_string(),
            GgufValue::Array(GgufValueType::F32, scores),
        ),
        (
            "nested".to_string(),
            GgufValue::Array(GgufValueType::Array, nested),
        ),
        ("z.after".to_string(), GgufValue::String("end".into())),
    ];
    let mut w = GgufWriter::new();
    for (k, v) in &kvs {
        w.add_kv(k, v.clone()).unwrap();
    }
    let bytes = w.to_bytes().unwrap();
    let f = GgufFile::from_bytes(bytes.clone()).unwrap();
    assert_eq!(f.metadata_len(), kvs.len());
    assert_eq!(f.get("z.after").and_then(|v| v.as_str()), Some("end"));
    assert_eq!(
        f.get("tokenizer.ggml.tokens").and_then(|v| v.as_array()),
        Some(&tokens[..])
    );
    assert_eq!(owned(&f), kvs);
    let g = GgufFile::from_bytes(bytes.clone()).unwrap();
    assert_eq!(owned(&g), kvs);

    // Cut inside the string array: the open fails and names the key.
    let key = b"tokenizer.ggml.tokens";
    let at = bytes.windows(key.len()).position(|w| w == key).unwrap() + key.len();
    for cut in [at + 6, at + 20] {
        format_err(bytes[..cut].to_vec());
    }
    for cut in [at + 5000, at + 30000] {
        let m = format_err(bytes[..cut].to_vec());
        assert!(m.contains("tokenizer.ggml.tokens"), "{m}");
    }
    // One string length pointing past the end of the file.
    let mut bad = bytes.clone();
    let first_len = at + 4 + 8;
    bad[first_len..first_len + 8].copy_from_slice(&u64::MAX.to_le_bytes());
    let m = format_err(bad);
    assert!(m.contains("tokenizer.ggml.tokens"), "{m}");
}
