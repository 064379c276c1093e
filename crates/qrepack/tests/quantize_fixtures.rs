//! `quantize` / `dequantize` against fixtures derived from ggml itself.
//!
//! The fixtures in `tests/fixtures/quant/` were made by `scripts/make_quant_fixtures.py` (see
//! there): f32 inputs, the bytes ggml (or the PyPI `gguf` package, cross-checked against ggml)
//! produces for them, and an FNV-1a digest of ggml's own dequantization of those bytes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use qrepack::quant::dequantize_f64;
use qrepack::{dequantize, quantize, quantize_with_importance, Error, GgmlType};

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/quant")
}

struct Input {
    rows: usize,
    cols: usize,
    x: Vec<f32>,
}

struct Case {
    ty: GgmlType,
    input: String,
    source: String,
    /// FNV-1a 64 of ggml's `to_float` output, `None` where ggml has no `to_float`.
    digest: Option<u64>,
    expected: Vec<u8>,
}

fn read(name: &str) -> Vec<u8> {
    let path = fixture_dir().join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn load() -> (BTreeMap<String, Input>, Vec<Case>) {
    let manifest = String::from_utf8(read("MANIFEST.txt")).unwrap();
    let mut inputs = BTreeMap::new();
    let mut cases = Vec::new();
    for line in manifest.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() == 3 {
            let (rows, cols) = (f[1].parse().unwrap(), f[2].parse().unwrap());
            let x: Vec<f32> = read(&format!("{}.f32", f[0]))
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            assert_eq!(x.len(), rows * cols, "{line}");
            inputs.insert(f[0].to_string(), Input { rows, cols, x });
        } else {
            assert_eq!(f.len(), 4, "bad manifest line {line}");
            cases.push(Case {
                ty: f[0].parse().unwrap(),
                input: f[1].to_string(),
                source: f[2].to_string(),
                digest: (f[3] != "-").then(|| u64::from_str_radix(f[3], 16).unwrap()),
                expected: read(&format!("{}.{}.bin", f[1], f[0])),
            });
        }
    }
    (inputs, cases)
}

/// The NaN every NaN of a dequantized fixture is written as before its digest.
const CANONICAL_NAN: f32 = f32::from_bits(0x7fc0_0000);

fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[test]
fn fixtures_cover_every_type() {
    let (inputs, cases) = load();
    let covered: BTreeSet<GgmlType> = cases.iter().map(|c| c.ty).collect();
    // (the types qrepack cannot quantize are checked against ggml in lowbit_types.rs)
    for ty in GgmlType::ALL.into_iter().filter(|t| t.is_quantizable()) {
        assert!(covered.contains(&ty), "no fixture for {ty}");
        let n = cases.iter().filter(|c| c.ty == ty).count();
        assert!(n >= 3, "only {n} fixtures for {ty}");
    }
    assert!(cases.iter().all(|c| inputs.contains_key(&c.input)));
}

#[test]
fn quantize_matches_ggml_bytes() {
    let (inputs, cases) = load();
    let mut failures = Vec::new();
    for c in &cases {
        let inp = &inputs[&c.input];
        let got = quantize(c.ty, &inp.x, inp.rows, inp.cols).unwrap();
        if let Some(m) = mismatch(c.ty, &got, &c.expected) {
            failures.push(format!("{} {} ({}): {m}", c.ty, c.input, c.source));
        }
    }
    assert!(failures.is_empty(), "mismatches:\n{}", failures.join("\n"));
}

/// How `got` differs from ggml's `expected` bytes of `ty`, if it does.
fn mismatch(ty: GgmlType, got: &[u8], expected: &[u8]) -> Option<String> {
    if got.len() != expected.len() {
        return Some(format!("{} bytes, ggml's {}", got.len(), expected.len()));
    }
    if got == expected {
        return None;
    }
    let bb = ty.block_bytes();
    let bad: Vec<usize> = got
        .chunks(bb)
        .zip(expected.chunks(bb))
        .enumerate()
        .filter(|(_, (a, b))| a != b)
        .map(|(i, _)| i)
        .collect();
    let nbytes = got.iter().zip(expected).filter(|(a, b)| a != b).count();
    Some(format!("{nbytes} bytes differ, blocks {bad:?}"))
}

/// FNV-1a 64 of the f32 bytes of `y`, every NaN written as [`CANONICAL_NAN`] (the sign and
/// payload of a NaN that `inf * 0` makes differ between x86 and ARM; ggml's digests are of its
/// x86 output, NaNs written the same way).
fn dequantized_digest(y: &[f32]) -> u64 {
    let bytes: Vec<u8> = y
        .iter()
        .map(|&v| if v.is_nan() { CANONICAL_NAN } else { v })
        .flat_map(|v| v.to_le_bytes())
        .collect();
    fnv1a64(&bytes)
}

#[test]
fn dequantize_matches_ggml_to_float() {
    let (inputs, cases) = load();
    let mut checked = BTreeSet::new();
    let mut failures = Vec::new();
    for c in &cases {
        let inp = &inputs[&c.input];
        let y = dequantize(c.ty, &c.expected, inp.rows, inp.cols).unwrap();
        match c.digest {
            Some(d) => {
                let got = dequantized_digest(&y);
                if got != d {
                    failures.push(format!(
                        "{} {}: f32 digest {got}, ggml's {d}",
                        c.ty, c.input
                    ));
                }
                checked.insert(c.ty);
            }
            None if c.ty == GgmlType::F32 => assert_eq!(y, inp.x),
            None => {}
        }
    }
    assert!(
        failures.is_empty(),
        "differs from ggml:\n{}",
        failures.join("\n")
    );
    // every type ggml can dequantize itself was compared bit for bit (the types qrepack cannot
    // quantize in lowbit_types.rs)
    for ty in GgmlType::ALL.into_iter().filter(|t| t.is_quantizable()) {
        if !matches!(ty, GgmlType::F32 | GgmlType::Q8_1 | GgmlType::Q8_K) {
            assert!(checked.contains(&ty), "{ty} not checked against ggml");
        }
    }
}

/// Worst-case reconstruction error of `ty` as `(relative, absolute)`: a fraction of the block's
/// largest magnitude, plus slack for scales in the f16 (or UE4M3) subnormal range.
fn tolerance(ty: GgmlType) -> (f32, f32) {
    let rel = match ty {
        GgmlType::F32 => 0.0,
        GgmlType::F16 => 1.0 / 2048.0,
        GgmlType::BF16 => 1.0 / 256.0,
        GgmlType::Q8_0 | GgmlType::Q8_1 | GgmlType::Q8_K => 0.6 / 127.0,
        GgmlType::Q4_0 => 0.13,
        GgmlType::Q5_0 => 0.066,
        GgmlType::Q4_1 => 0.07,
        GgmlType::Q5_1 => 0.035,
        GgmlType::Q6_K => 0.04,
        GgmlType::Q5_K => 0.06,
        GgmlType::Q4_K => 0.12,
        GgmlType::Q3_K => 0.3,
        GgmlType::Q2_K => 0.5,
        GgmlType::IQ4_NL => 0.13,
        GgmlType::IQ4_XS => 0.15,
        // The scale is 2^(floor(log2 amax) - 3): the widest gap between the E2M1 levels (8 and
        // 12 half-steps) is 4 half-steps, a quarter of amax at most, so half of it is an eighth.
        // Values between the top level and amax round down by less than amax / 4.
        GgmlType::MXFP4 => 0.25,
        // amax / 12 rounded to 3 mantissa bits (1/16 relative): half the widest gap (2 half-steps)
        // is amax / 6 (1 + 1/16), and the top level can fall short of amax by amax / 16.
        GgmlType::NVFP4 => 0.18,
        // {-1, 0, 1} (and 2 for Q2_0) times amax: half a step, plus the f16 rounding of amax.
        GgmlType::TQ1_0 | GgmlType::TQ2_0 | GgmlType::Q2_0 => 0.5 + 1.0 / 2048.0,
        // +-mean(|x|): a value of either sign may be off by up to amax.
        GgmlType::Q1_0 => 1.0 + 1.0 / 2048.0,
        // The grid types round each magnitude to an odd multiple of its group's scale (1..15
        // for IQ3, 1..5 for IQ2_S, so half a step is 1/15 or 1/5 of the group's largest
        // magnitude), but only some combinations of levels are grid points: a sub-group off the
        // grid moves to a neighbour a few steps away (a zero among large values of its four can
        // come back as 0.42 of them in IQ3_S). IQ3_XXS's bound is on magnitudes (see
        // `assert_round_trip`).
        GgmlType::IQ3_S => 0.5,
        GgmlType::IQ3_XXS => 0.55,
        GgmlType::IQ2_S => 0.65,
        // quantized only with an importance matrix (`round_trip_is_close` skips them; their
        // bytes are checked against ggml's in `quantize_with_importance_matches_ggml_bytes`)
        GgmlType::IQ2_XXS | GgmlType::IQ2_XS | GgmlType::IQ1_S | GgmlType::IQ1_M => f32::INFINITY,
    };
    let abs = match ty {
        _ if !ty.is_quantized() => 1e-7,
        // UE4M3 scales below 2^-9 (blocks with amax < 6 * 2^-9 = 0.012) round to 0 or to a
        // subnormal with a step of 2^-10 halved.
        GgmlType::NVFP4 => 0.012,
        _ => 1e-4,
    };
    (rel, abs)
}

/// Checks `dequantize(quantize(x))` against `x`, block by block of `bs` values.
fn assert_round_trip(ty: GgmlType, what: &str, x: &[f32], rows: usize, cols: usize, bs: usize) {
    let q = quantize(ty, x, rows, cols).unwrap();
    let y = dequantize(ty, &q, rows, cols).unwrap();
    let (rel, abs) = tolerance(ty);
    for (b, (xs, ys)) in x.chunks(bs).zip(y.chunks(bs)).enumerate() {
        let amax = xs.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let tol = rel * amax + abs;
        for (a, r) in xs.iter().zip(ys) {
            // IQ3_XXS stores only even sign patterns: per 8 values, the one that costs the
            // least may come back with the wrong sign (checked below), the magnitudes are close
            let err = if ty == GgmlType::IQ3_XXS {
                (a.abs() - r.abs()).abs()
            } else {
                (a - r).abs()
            };
            assert!(
                err <= tol,
                "{ty} {what} block {b}: {a} -> {r} (amax {amax}, tol {tol})"
            );
        }
    }
    if ty == GgmlType::IQ3_XXS {
        for (k, (xs, ys)) in x.chunks(8).zip(y.chunks(8)).enumerate() {
            let flipped = xs
                .iter()
                .zip(ys)
                // below the absolute slack (groups too small to fit) signs mean nothing
                .filter(|(a, r)| a.abs() > abs && r.abs() > 0.0)
                .filter(|(a, r)| a.is_sign_negative() != r.is_sign_negative())
                .count();
            assert!(
                flipped <= 1,
                "{ty} {what} values {}..: {flipped} signs flipped",
                8 * k
            );
        }
    }
}

#[test]
fn round_trip_is_close() {
    let (inputs, _) = load();
    for ty in GgmlType::ALL.into_iter().filter(|t| t.is_quantizable()) {
        let bs = ty.block_size().max(32);
        for (name, inp) in &inputs {
            // The edge input holds values beyond the range of f16 scales, on purpose. In the gaps
            // input, IQ3_S blocks have all-zero groups: ggml (and so qrepack) then writes the
            // grid indices and signs of the groups after them one group early, so those groups
            // decode with their neighbours' points; the bytes are checked against ggml's.
            let ggml_shifts_groups = ty == GgmlType::IQ3_S && name.starts_with("gaps");
            if inp.cols % ty.block_size() != 0 || name.starts_with("edge") || ggml_shifts_groups {
                continue;
            }
            assert_round_trip(ty, name, &inp.x, inp.rows, inp.cols, bs);
        }
    }
}

#[test]
fn new_types_round_trip_across_magnitudes() {
    // Rows of several blocks whose 256-value stretches run from zeros and tiny values to the
    // largest magnitude each format's scale holds, with zeros sprinkled in.
    let cases = [
        (GgmlType::MXFP4, 1e30f32),
        (GgmlType::NVFP4, 2000.0),
        (GgmlType::TQ1_0, 3e4),
        (GgmlType::TQ2_0, 3e4),
        (GgmlType::Q1_0, 100.0),
        (GgmlType::Q2_0, 3e4),
        (GgmlType::IQ3_XXS, 1e3),
        (GgmlType::IQ3_S, 1e3),
        (GgmlType::IQ2_S, 1e3),
    ];
    let (rows, cols) = (3, 1024);
    let mut rng = qrepack::rng::SplitMix64::new(99);
    for (ty, huge) in cases {
        let scales = [
            0.0,
            1e-6,
            1e-3,
            0.5,
            1.0,
            20.0,
            huge,
            huge * 0.3,
            1e-2,
            7.0,
            0.0,
            1.0,
        ];
        let x: Vec<f32> = (0..rows * cols)
            .map(|i| {
                let v = rng.uniform_pm1() * scales[i / 256];
                if i % 13 == 0 {
                    0.0
                } else {
                    v
                }
            })
            .collect();
        // NVFP4 has a scale per 16 values: its error is bounded by their largest magnitude
        let bs = if ty == GgmlType::NVFP4 {
            16
        } else {
            ty.block_size()
        };
        assert_round_trip(ty, "magnitudes", &x, rows, cols, bs);
    }
}

/// A small deterministic byte generator for arbitrary block contents.
fn noise_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 56) as u8
        })
        .collect()
}

fn assert_close_to_exact(ty: GgmlType, what: &str, y32: &[f32], y64: &[f64]) {
    assert_eq!(y32.len(), y64.len());
    for (i, (&a, &e)) in y32.iter().zip(y64).enumerate() {
        let a = f64::from(a);
        let ok = if e.is_nan() {
            a.is_nan()
        } else if e.is_infinite() {
            a == e
        } else if e.abs() >= f64::from(f32::MAX) {
            // beyond f32's range (MXFP4 with its largest exponents): f32 overflows
            a.abs() >= f64::from(f32::MAX) && a.signum() == e.signum()
        } else {
            // ggml's f32 arithmetic rounds at most twice; allow 2 ulp of f32 (plus f32 underflow)
            (a - e).abs() <= e.abs() * f64::powi(2.0, -22) + 1e-44
        };
        assert!(ok, "{ty} {what} value {i}: f32 {a} vs exact {e}");
    }
}

#[test]
fn dequantize_agrees_with_f64_reference() {
    let (inputs, cases) = load();
    for c in &cases {
        let inp = &inputs[&c.input];
        let y32 = dequantize(c.ty, &c.expected, inp.rows, inp.cols).unwrap();
        let y64 = dequantize_f64(c.ty, &c.expected, inp.rows, inp.cols).unwrap();
        assert_close_to_exact(c.ty, &c.input, &y32, &y64);
    }
    // arbitrary bytes (any bit pattern is a valid block; f16 scales may be NaN / inf)
    for ty in GgmlType::ALL {
        let (rows, cols) = (3, 512);
        let bytes = noise_bytes(ty.matrix_bytes(rows, cols).unwrap(), u64::from(ty.id()) + 1);
        let y32 = dequantize(ty, &bytes, rows, cols).unwrap();
        let y64 = dequantize_f64(ty, &bytes, rows, cols).unwrap();
        assert_close_to_exact(ty, "noise", &y32, &y64);
    }
}

#[test]
fn errors_not_panics() {
    let x = vec![0.5f32; 512];
    for ty in GgmlType::ALL {
        let bs = ty.block_size();
        // wrong input length
        assert!(
            matches!(quantize(ty, &x[..511], 2, 256), Err(Error::Shape(_))),
            "{ty}"
        );
        assert!(
            matches!(quantize(ty, &x, 1, 256), Err(Error::Shape(_))),
            "{ty}"
        );
        // partial block
        if bs > 1 {
            let cols = bs + bs / 2;
            assert!(
                matches!(quantize(ty, &x[..cols], 1, cols), Err(Error::Shape(_))),
                "{ty}"
            );
            assert!(dequantize(ty, &[0u8; 4096], 1, cols).is_err(), "{ty}");
            assert!(dequantize_f64(ty, &[0u8; 4096], 1, cols).is_err(), "{ty}");
        }
        // overflow
        assert!(quantize(ty, &x, usize::MAX, 2).is_err(), "{ty}");
        assert!(dequantize(ty, &[], usize::MAX, 256).is_err(), "{ty}");
        // wrong byte length
        let q = if ty.is_quantizable() {
            quantize(ty, &x, 2, 256).unwrap()
        } else {
            assert!(
                matches!(quantize(ty, &x, 2, 256), Err(Error::Unsupported(_))),
                "{ty}"
            );
            vec![0u8; ty.matrix_bytes(2, 256).unwrap()]
        };
        assert_eq!(q.len(), ty.matrix_bytes(2, 256).unwrap());
        assert!(
            matches!(dequantize(ty, &q[1..], 2, 256), Err(Error::Shape(_))),
            "{ty}"
        );
        assert!(matches!(
            dequantize_f64(ty, &q[..q.len() - 1], 2, 256),
            Err(Error::Shape(_))
        ));
        let mut longer = q.clone();
        longer.push(0);
        assert!(dequantize(ty, &longer, 2, 256).is_err(), "{ty}");
        // empty matrices are fine
        if ty.is_quantizable() {
            assert_eq!(quantize(ty, &[], 0, 256).unwrap(), Vec::<u8>::new());
        }
        assert_eq!(dequantize(ty, &[], 3, 0).unwrap(), Vec::<f32>::new());
    }
}

#[test]
fn non_finite_input_does_not_panic() {
    let mut x: Vec<f32> = (0..512).map(|i| (i as f32 * 0.37).sin()).collect();
    x[3] = f32::NAN;
    x[40] = f32::INFINITY;
    x[300] = f32::NEG_INFINITY;
    x[301] = 1e38;
    x[302] = -1e38;
    for ty in GgmlType::ALL.into_iter().filter(|t| t.is_quantizable()) {
        let q = quantize(ty, &x, 2, 256).unwrap();
        assert_eq!(q.len(), ty.matrix_bytes(2, 256).unwrap());
        let _ = dequantize(ty, &q, 2, 256).unwrap();
    }
}

/// A fixture quantized by ggml with an importance matrix (`MANIFEST_IMATRIX.txt`).
struct WeightedCase {
    ty: GgmlType,
    input: String,
    importance: String,
    digest: u64,
    expected: Vec<u8>,
}

/// The inputs and importance vectors of `MANIFEST_IMATRIX.txt`, by name.
type WeightedInputs = (BTreeMap<String, Input>, BTreeMap<String, Vec<f32>>);

/// The inputs, importance vectors and cases of `MANIFEST_IMATRIX.txt`.
fn load_weighted() -> (WeightedInputs, Vec<WeightedCase>) {
    let manifest = String::from_utf8(read("MANIFEST_IMATRIX.txt")).unwrap();
    let floats = |name: String| -> Vec<f32> {
        read(&name)
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    };
    let (mut inputs, mut imps, mut cases) = (BTreeMap::new(), BTreeMap::new(), Vec::new());
    for line in manifest.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.len() {
            2 => {
                let v = floats(format!("{}.imp.f32", f[0]));
                assert_eq!(v.len(), f[1].parse::<usize>().unwrap(), "{line}");
                imps.insert(f[0].to_string(), v);
            }
            3 => {
                let (rows, cols) = (f[1].parse().unwrap(), f[2].parse().unwrap());
                let x = floats(format!("{}.f32", f[0]));
                assert_eq!(x.len(), rows * cols, "{line}");
                inputs.insert(f[0].to_string(), Input { rows, cols, x });
            }
            5 => cases.push(WeightedCase {
                ty: f[0].parse().unwrap(),
                input: f[1].to_string(),
                importance: f[2].to_string(),
                digest: u64::from_str_radix(f[4], 16).unwrap(),
                expected: read(&format!("{}.{}.{}.bin", f[1], f[2], f[0])),
            }),
            _ => panic!("bad manifest line {line}"),
        }
    }
    ((inputs, imps), cases)
}

#[test]
fn quantize_with_importance_matches_ggml_bytes() {
    let ((inputs, imps), cases) = load_weighted();
    let mut failures = Vec::new();
    let mut covered = BTreeMap::<GgmlType, BTreeSet<&str>>::new();
    for c in &cases {
        let (inp, imp) = (&inputs[&c.input], &imps[&c.importance]);
        let got = quantize_with_importance(c.ty, &inp.x, inp.rows, inp.cols, imp).unwrap();
        if let Some(m) = mismatch(c.ty, &got, &c.expected) {
            failures.push(format!("{} {} {}: {m}", c.ty, c.input, c.importance));
        }
        // ggml's own dequantization of its bytes, as a second check of the fixture
        let y = dequantize(c.ty, &c.expected, inp.rows, inp.cols).unwrap();
        if dequantized_digest(&y) != c.digest {
            failures.push(format!("{} {} {}: f32 digest", c.ty, c.input, c.importance));
        }
        covered
            .entry(c.ty)
            .or_default()
            .insert(c.importance.split('_').next().unwrap());
    }
    assert!(failures.is_empty(), "mismatches:\n{}", failures.join("\n"));
    // uniform and random importance for every type that needs an importance matrix, and for
    // every other type whose quantizer uses it
    let weighted = [
        GgmlType::IQ3_XXS,
        GgmlType::IQ3_S,
        GgmlType::IQ2_S,
        GgmlType::IQ4_NL,
        GgmlType::IQ4_XS,
    ];
    let needs = GgmlType::ALL.into_iter().filter(|t| !t.is_quantizable());
    for ty in needs.chain(weighted) {
        let kinds: Vec<&str> = covered[&ty].iter().copied().collect();
        assert_eq!(kinds, ["ones", "rand"], "{ty}");
        assert!(cases.iter().filter(|c| c.ty == ty).count() >= 10, "{ty}");
    }
}

#[test]
fn quantize_with_importance_elsewhere() {
    let (inputs, _) = load();
    let inp = &inputs["rand_3x512"];
    let ones = vec![1.0f32; inp.cols];
    for ty in GgmlType::ALL {
        let weighted = quantize_with_importance(ty, &inp.x, inp.rows, inp.cols, &ones);
        match ty {
            // types whose ggml quantizers ignore the importance: the plain bytes
            GgmlType::F32
            | GgmlType::F16
            | GgmlType::BF16
            | GgmlType::Q8_0
            | GgmlType::Q8_1
            | GgmlType::Q8_K
            | GgmlType::MXFP4
            | GgmlType::NVFP4
            | GgmlType::TQ1_0
            | GgmlType::TQ2_0 => {
                assert_eq!(
                    weighted.unwrap(),
                    quantize(ty, &inp.x, inp.rows, inp.cols).unwrap()
                )
            }
            // the grid and IQ4 types use it (checked against ggml above)
            GgmlType::IQ2_XXS
            | GgmlType::IQ2_XS
            | GgmlType::IQ1_S
            | GgmlType::IQ1_M
            | GgmlType::IQ3_XXS
            | GgmlType::IQ3_S
            | GgmlType::IQ2_S
            | GgmlType::IQ4_NL
            | GgmlType::IQ4_XS => {
                assert_eq!(weighted.unwrap().len(), ty.matrix_bytes(3, 512).unwrap())
            }
            _ => assert!(matches!(weighted, Err(Error::Unsupported(_))), "{ty}"),
        }
        // one importance value per column, no more, no less
        for n in [inp.cols - 1, inp.cols + 1, 0] {
            let r = quantize_with_importance(ty, &inp.x, inp.rows, inp.cols, &vec![1.0; n]);
            assert!(matches!(r, Err(Error::Shape(_))), "{ty} {n}");
        }
        assert!(matches!(
            quantize_with_importance(ty, &inp.x[1..], inp.rows, inp.cols, &ones),
            Err(Error::Shape(_))
        ));
    }
    // the types that need an importance matrix still refuse plain `quantize`
    for ty in GgmlType::ALL.into_iter().filter(|t| !t.is_quantizable()) {
        assert!(matches!(
            quantize(ty, &inp.x, inp.rows, inp.cols),
            Err(Error::Unsupported(_))
        ));
        assert!(quantize_with_importance(ty, &[], 0, 256, &ones[..256])
            .unwrap()
            .is_empty());
        assert!(quantize_with_importance(ty, &[], 5, 0, &[])
            .unwrap()
            .is_empty());
    }
}

#[test]
fn quantize_with_importance_survives_non_finite_values() {
    let mut x: Vec<f32> = (0..512).map(|i| (i as f32 * 0.37).sin()).collect();
    x[3] = f32::NAN;
    x[40] = f32::INFINITY;
    x[300] = f32::NEG_INFINITY;
    x[301] = 3e38;
    x[302] = -3e38;
    let mut imp: Vec<f32> = (0..256).map(|i| (i % 7) as f32).collect();
    imp[9] = f32::NAN;
    imp[10] = f32::INFINITY;
    for ty in [
        GgmlType::IQ2_XXS,
        GgmlType::IQ2_XS,
        GgmlType::IQ1_S,
        GgmlType::IQ1_M,
        GgmlType::IQ3_XXS,
        GgmlType::IQ3_S,
        GgmlType::IQ2_S,
        GgmlType::IQ4_NL,
        GgmlType::IQ4_XS,
    ] {
        let q = quantize_with_importance(ty, &x, 2, 256, &imp).unwrap();
        assert_eq!(q.len(), ty.matrix_bytes(2, 256).unwrap());
        let _ = dequantize(ty, &q, 2, 256).unwrap();
    }
}
