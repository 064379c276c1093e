//! `QLinear` and `QExpertsLinear` against candle's own products on the same quantized bytes.

use std::borrow::Cow;
use std::sync::Arc;

use candle_core::quantized::{GgmlDType, QMatMul, QStorage, QTensor};
use candle_core::{DType, Device, Module, Tensor};
use qrepack::gguf::{GgufFile, GgufWriter};
use qrepack::model::OpenOptions;
use qrepack::rng::SplitMix64;
use qrepack::{dequantize, quantize, GgmlType, Model, QExperts, QMatrix};
use qrepack_candle::{weights, QExpertsLinear, QLinear};

const ROWS: usize = 24;
const COLS: usize = 256;

fn weights_q4k(seed: u64) -> (Vec<u8>, Vec<f32>) {
    let w = SplitMix64::new(seed).pm1_vec(ROWS * COLS);
    let q = quantize(GgmlType::Q4_K, &w, ROWS, COLS).unwrap();
    let dq = dequantize(GgmlType::Q4_K, &q, ROWS, COLS).unwrap();
    (q, dq)
}

fn input(shape: &[usize], seed: u64) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_vec(SplitMix64::new(seed).pm1_vec(n), shape, &Device::Cpu).unwrap()
}

fn max_abs(t: &Tensor) -> f32 {
    t.abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar()
        .unwrap()
}

#[test]
fn leading_dims_and_values() {
    let (q, dq) = weights_q4k(1);
    let lin = QLinear::new(QMatrix::new(GgmlType::Q4_K, ROWS, COLS, &q).unwrap());
    assert_eq!((lin.rows(), lin.cols()), (ROWS, COLS));
    let w = Tensor::from_vec(dq, (ROWS, COLS), &Device::Cpu).unwrap();
    let candle = QMatMul::from_qtensor(
        QTensor::new(
            QStorage::from_data(Cow::Borrowed(&q), &Device::Cpu, GgmlDType::Q4K).unwrap(),
            (ROWS, COLS),
        )
        .unwrap(),
    )
    .unwrap();
    for shape in [&[COLS][..], &[5, COLS], &[2, 3, COLS], &[2, 1, 3, COLS]] {
        let x = input(shape, 2);
        let y = lin.forward(&x).unwrap();
        let mut want = shape.to_vec();
        *want.last_mut().unwrap() = ROWS;
        assert_eq!(y.dims(), &want[..]);
        // against the f32 product of the dequantized weights: activation quantization only
        let x2 = x.reshape(((), COLS)).unwrap();
        let exact = x2
            .matmul(&w.t().unwrap())
            .unwrap()
            .reshape(&want[..])
            .unwrap();
        let err = max_abs(&(&y - &exact).unwrap());
        assert!(err < 0.02 * max_abs(&exact), "{shape:?}: {err}");
        // against candle's own quantized product (rank >= 2 only)
        if shape.len() >= 2 {
            let c = candle.forward(&x).unwrap();
            let err = max_abs(&(&y - &c).unwrap());
            assert!(err < 1e-3 * max_abs(&c), "{shape:?} vs candle: {err}");
        }
    }
}

#[test]
fn non_contiguous_input() {
    let (q, _) = weights_q4k(3);
    let lin = QLinear::new(QMatrix::new(GgmlType::Q4_K, ROWS, COLS, &q).unwrap());
    // [COLS, 6] transposed: a strided [6, COLS] view; and a narrowed one with an offset
    let base = input(&[COLS, 6], 4);
    let xt = base.t().unwrap();
    assert!(!xt.is_contiguous());
    let y = lin.forward(&xt).unwrap();
    let y2 = lin.forward(&xt.contiguous().unwrap()).unwrap();
    assert_eq!(max_abs(&(&y - &y2).unwrap()), 0.0);
    let wide = input(&[3, 4, 2 * COLS], 5);
    let narrow = wide.narrow(2, 7, COLS).unwrap().transpose(0, 1).unwrap();
    let y = lin.forward(&narrow).unwrap();
    let y2 = lin.forward(&narrow.contiguous().unwrap()).unwrap();
    assert_eq!(y.dims(), &[4, 3, ROWS]);
    assert_eq!(max_abs(&(&y - &y2).unwrap()), 0.0);
    // an empty batch
    let empty = Tensor::zeros((0, COLS), DType::F32, &Device::Cpu).unwrap();
    assert_eq!(lin.forward(&empty).unwrap().dims(), &[0, ROWS]);
}

#[test]
fn clear_errors() {
    let (q, _) = weights_q4k(6);
    let lin = QLinear::new(QMatrix::new(GgmlType::Q4_K, ROWS, COLS, &q).unwrap());
    let e = lin
        .forward(&input(&[2, COLS], 1).to_dtype(DType::F16).unwrap())
        .unwrap_err();
    assert!(e.to_string().contains("must be f32"), "{e}");
    let e = lin.forward(&input(&[2, COLS + 1], 1)).unwrap_err();
    assert!(e.to_string().contains("last dimension must be 256"), "{e}");
    let e = lin
        .forward(&Tensor::new(1f32, &Device::Cpu).unwrap())
        .unwrap_err();
    assert!(e.to_string().contains("last dimension"), "{e}");
}

fn tiny_model() -> Arc<Model> {
    let (q, _) = weights_q4k(7);
    let mut w = GgufWriter::new();
    w.add_tensor_owned(
        "m.weight",
        &[COLS as u64, ROWS as u64],
        GgmlType::Q4_K.id(),
        q,
    )
    .unwrap();
    let norm: Vec<u8> = (0..COLS).flat_map(|i| (i as f32).to_le_bytes()).collect();
    w.add_tensor_owned("n.weight", &[COLS as u64], GgmlType::F32.id(), norm)
        .unwrap();
    let experts: Vec<f32> = SplitMix64::new(8).pm1_vec(4 * 16 * 64);
    let eq = quantize(GgmlType::Q4_0, &experts, 4 * 16, 64).unwrap();
    w.add_tensor_owned("e.weight", &[64, 16, 4], GgmlType::Q4_0.id(), eq)
        .unwrap();
    let g = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    Arc::new(Model::from_gguf(g, &OpenOptions::default()).unwrap())
}

#[test]
fn from_model_and_weights() {
    let model = tiny_model();
    let lin = QLinear::from_model(&model, "m.weight").unwrap();
    assert_eq!((lin.rows(), lin.cols()), (ROWS, COLS));
    let e = QLinear::from_model(&model, "nope").unwrap_err();
    assert!(e.to_string().contains("no tensor 'nope'"), "{e}");
    let e = QLinear::from_model(&model, "n.weight").unwrap_err();
    assert!(e.to_string().contains("is not a matrix"), "{e}");
    let n = weights::tensor(&model, "n.weight", &Device::Cpu).unwrap();
    assert_eq!(n.dims(), &[COLS]);
    assert_eq!(n.get(5).unwrap().to_scalar::<f32>().unwrap(), 5.0);
    let m = weights::tensor(&model, "m.weight", &Device::Cpu).unwrap();
    assert_eq!(m.dims(), &[ROWS, COLS]);
    assert!(weights::tensor_opt(&model, "nope", &Device::Cpu)
        .unwrap()
        .is_none());
}

#[test]
fn experts_match_per_expert_products() {
    let model = tiny_model();
    let ex = QExpertsLinear::from_model(&model, "e.weight").unwrap();
    let experts: &QExperts = ex.experts();
    assert_eq!(
        (experts.n_expert(), experts.rows(), experts.cols()),
        (4, 16, 64)
    );
    let x = input(&[5, 64], 9);
    let ids = Tensor::new(&[[0u32, 3], [1, 1], [2, 0], [3, 2], [0, 1]], &Device::Cpu).unwrap();
    let y = ex.forward(&x, &ids).unwrap();
    assert_eq!(y.dims(), &[5, 2, 16]);
    let ids_v: Vec<Vec<u32>> = ids.to_vec2().unwrap();
    for (t, row) in ids_v.iter().enumerate() {
        for (j, &e) in row.iter().enumerate() {
            let one = QLinear::new(
                QMatrix::new(
                    GgmlType::Q4_0,
                    16,
                    64,
                    &experts.expert(e as usize).unwrap().to_ggml_bytes(),
                )
                .unwrap(),
            );
            let want = one.forward(&x.get(t).unwrap()).unwrap();
            let got = y.get(t).unwrap().get(j).unwrap();
            let err = max_abs(&(&got - &want).unwrap());
            assert!(err < 1e-4, "token {t} slot {j}: {err}");
        }
    }
    // one row per used expert, and i64 ids
    let x3 = input(&[5, 2, 64], 10);
    let y3 = ex.forward(&x3, &ids.to_dtype(DType::I64).unwrap()).unwrap();
    assert_eq!(y3.dims(), &[5, 2, 16]);
    assert!(ex
        .forward(&x3, &Tensor::new(&[[9u32, 0]], &Device::Cpu).unwrap())
        .is_err());
    let bad = Tensor::new(&[[9u32, 0]; 5], &Device::Cpu).unwrap();
    assert!(ex.forward(&x3, &bad).is_err());
}

/// Every weight type against the f64 product of the dequantized weights, within the bound
/// that activation quantization allows: ggml quantizes each block of `B` activations (32, or
/// 256 for the K types) to 8 bits with step `d = amax / 127`, so each activation moves by at
/// most `d / 2` and output `j` by at most `sum_blocks d/2 * sum_{i in block} |w_ji|` (plus f32
/// rounding: 1e-5 of the magnitude). candle's own product is checked against the same bound.
#[test]
fn every_type_within_the_activation_quantization_bound() {
    let cases = [
        (GgmlType::Q4_0, Some(GgmlDType::Q4_0)),
        (GgmlType::Q4_1, Some(GgmlDType::Q4_1)),
        (GgmlType::Q5_0, Some(GgmlDType::Q5_0)),
        (GgmlType::Q5_1, Some(GgmlDType::Q5_1)),
        (GgmlType::Q8_0, Some(GgmlDType::Q8_0)),
        (GgmlType::Q4_K, Some(GgmlDType::Q4K)),
        (GgmlType::Q5_K, Some(GgmlDType::Q5K)),
        (GgmlType::Q6_K, Some(GgmlDType::Q6K)),
        (GgmlType::IQ4_NL, None),
    ];
    let (rows, cols) = (40, 512);
    for (ty, cty) in cases {
        let w = SplitMix64::new(11).pm1_vec(rows * cols);
        let q = quantize(ty, &w, rows, cols).unwrap();
        let dq = dequantize(ty, &q, rows, cols).unwrap();
        let act_block = if ty.block_size() == 256 { 256 } else { 32 };
        for n in [1usize, 4, 9] {
            let xv = SplitMix64::new(12 + n as u64).pm1_vec(n * cols);
            let x = Tensor::from_vec(xv.clone(), (n, cols), &Device::Cpu).unwrap();
            let lin = QLinear::new(QMatrix::new(ty, rows, cols, &q).unwrap());
            let y: Vec<Vec<f32>> = lin.forward(&x).unwrap().to_vec2().unwrap();
            let candle: Option<Vec<Vec<f32>>> = cty.map(|cty| {
                let storage = QStorage::from_data(Cow::Borrowed(&q), &Device::Cpu, cty).unwrap();
                let m =
                    QMatMul::from_qtensor(QTensor::new(storage, (rows, cols)).unwrap()).unwrap();
                m.forward(&x).unwrap().to_vec2().unwrap()
            });
            for t in 0..n {
                let xr = &xv[t * cols..(t + 1) * cols];
                for j in 0..rows {
                    let wr = &dq[j * cols..(j + 1) * cols];
                    let exact: f64 = xr.iter().zip(wr).map(|(a, b)| *a as f64 * *b as f64).sum();
                    let mut bound = 0.0f64;
                    let mut magnitude = 0.0f64;
                    for (xb, wb) in xr.chunks(act_block).zip(wr.chunks(act_block)) {
                        let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs())) as f64;
                        let wsum: f64 = wb.iter().map(|v| v.abs() as f64).sum();
                        bound += amax / 127.0 / 2.0 * wsum;
                        magnitude += amax * wsum;
                    }
                    let bound = bound + 1e-5 * magnitude;
                    let err = (y[t][j] as f64 - exact).abs();
                    assert!(
                        err <= bound,
                        "{ty} n={n} [{t},{j}]: qrepack error {err} > {bound}"
                    );
                    if let Some(c) = &candle {
                        let err = (c[t][j] as f64 - exact).abs();
                        assert!(
                            err <= bound,
                            "{ty} n={n} [{t},{j}]: candle error {err} > {bound}"
                        );
                    }
                }
            }
        }
    }
}

/// An embedding table read in place (from the repacked matrix it also is, or from the file's
/// bytes) gives the rows of the copied table, and refuses ids outside the vocabulary.
#[test]
fn shared_embedding_tables_equal_copied_ones() {
    let model = tiny_model();
    for name in ["m.weight", "n.weight"] {
        let copied = weights::QEmbedding::from_model(&model, name);
        let shared = weights::QEmbedding::from_shared_model(&model, name);
        if name == "n.weight" {
            // 1-D: not an embedding table, either way
            assert!(copied.is_err() && shared.is_err());
            continue;
        }
        let (copied, shared) = (copied.unwrap(), shared.unwrap());
        assert!(model.matrix(name).unwrap().layout() != qrepack::Layout::Plain);
        let ids = Tensor::new(&[0u32, 5, 23, 17, 5], &Device::Cpu).unwrap();
        let a = copied.forward(&ids).unwrap().flatten_all().unwrap();
        let b = shared.forward(&ids).unwrap().flatten_all().unwrap();
        assert_eq!(a.to_vec1::<f32>().unwrap(), b.to_vec1::<f32>().unwrap());
        let mut row = vec![0.0f32; COLS];
        shared.row_into(23, &mut row).unwrap();
        assert_eq!(&row[..], &a.to_vec1::<f32>().unwrap()[2 * COLS..3 * COLS]);
        assert!(shared.row_into(ROWS, &mut row).is_err());
        let bad = Tensor::new(&[ROWS as u32], &Device::Cpu).unwrap();
        assert!(shared.forward(&bad).is_err());
    }
}
