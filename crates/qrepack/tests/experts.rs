//! `QExperts::matmul_id` against per-token `QMatrix::matmul` on the chosen experts.

mod common;

use common::random_weights;
use qrepack::cpu::CpuFeatures;
use qrepack::rng::SplitMix64;
use qrepack::{GgmlType, Layout, QExperts, QMatrix};

fn routed_equals_per_token(
    ty: GgmlType,
    layout: Layout,
    n_expert: usize,
    rows: usize,
    cols: usize,
) {
    let per = ty.matrix_bytes(rows, cols).unwrap();
    let w = random_weights(ty, n_expert * rows, cols, 31);
    let moe = QExperts::with_layout(ty, n_expert, rows, cols, &w, layout).unwrap();
    assert_eq!(moe.layout(), layout);
    let mut rng = SplitMix64::new(4);
    for (n_tokens, n_used) in [(1, 1), (3, 2), (9, 4), (16, 3)] {
        // random ids with deliberate duplicates inside a token
        let mut ids: Vec<i32> = (0..n_tokens * n_used)
            .map(|_| (rng.next_u64() % n_expert as u64) as i32)
            .collect();
        if n_used > 1 {
            ids[1] = ids[0];
        }
        for x_rows in [1, n_used] {
            let x = rng.pm1_vec(n_tokens * x_rows * cols);
            let mut y = vec![f32::NAN; n_tokens * n_used * rows];
            moe.matmul_id(&x, x_rows, &ids, n_used, &mut y).unwrap();
            for t in 0..n_tokens {
                for s in 0..n_used {
                    let e = ids[t * n_used + s] as usize;
                    let single =
                        QMatrix::with_layout(ty, rows, cols, &w[e * per..(e + 1) * per], layout)
                            .unwrap();
                    let xr = &x[(t * x_rows + s % x_rows) * cols..][..cols];
                    let mut want = vec![0.0; rows];
                    single.matmul(xr, 1, &mut want).unwrap();
                    let got = &y[(t * n_used + s) * rows..][..rows];
                    // same quantized integers; GEMM vs GEMV only changes f32 summation order
                    let num: f64 = got
                        .iter()
                        .zip(&want)
                        .map(|(a, b)| ((a - b) as f64).powi(2))
                        .sum();
                    let den: f64 = want.iter().map(|b| (*b as f64).powi(2)).sum();
                    assert!(
                        num <= 1e-9 * den,
                        "{ty} {layout} token {t} slot {s}: nmse {}",
                        num / den
                    );
                }
            }
        }
    }
}

#[test]
fn matmul_id_matches_per_token_matmul() {
    routed_equals_per_token(GgmlType::Q4_0, Layout::Q4_0_8x8, 5, 16, 64);
    routed_equals_per_token(GgmlType::Q4_K, Layout::Q4_K_8x8, 4, 8, 256);
    // 3 experts: the 16 tokens x 3 slots give each about 16 gathered rows (GEMM and tiles)
    routed_equals_per_token(GgmlType::Q2_K, Layout::Q2_K_8x8, 3, 16, 512);
    routed_equals_per_token(GgmlType::IQ4_NL, Layout::Plain, 3, 5, 96);
    routed_equals_per_token(GgmlType::Q6_K, Layout::Plain, 4, 7, 256);
}

#[test]
fn matmul_id_takes_the_plain_path_types_and_their_layouts() {
    routed_equals_per_token(GgmlType::Q5_1, Layout::Q5_1_8x8, 3, 16, 64);
    routed_equals_per_token(GgmlType::Q2_K, Layout::Plain, 3, 6, 256);
    routed_equals_per_token(GgmlType::Q3_K, Layout::Plain, 2, 4, 512);
    routed_equals_per_token(GgmlType::IQ4_XS, Layout::Plain, 3, 5, 256);
    routed_equals_per_token(GgmlType::BF16, Layout::Plain, 3, 5, 80);
    routed_equals_per_token(GgmlType::F16, Layout::Plain, 2, 6, 48);
}

/// gpt-oss's experts (MXFP4) in ggml's layouts, and `QExperts::new` choosing them as ggml does:
/// `mxfp4_8x8` with AVX2, `mxfp4_4x4` with dotprod.
#[test]
fn matmul_id_takes_mxfp4_experts_in_ggml_layouts() {
    let ty = GgmlType::MXFP4;
    routed_equals_per_token(ty, Layout::MXFP4_8x8, 3, 16, 96);
    routed_equals_per_token(ty, Layout::MXFP4_4x4, 4, 12, 64);
    routed_equals_per_token(ty, Layout::Plain, 3, 6, 64);
    // the choice itself is checked on every kernel set in `tests/layouts.rs`
    let want = Layout::best_for(ty, 16, CpuFeatures::get());
    let w = random_weights(ty, 2 * 16, 64, 8);
    let moe = QExperts::new(ty, 2, 16, 64, &w).unwrap();
    assert_eq!(moe.layout(), want);
}

#[test]
fn matmul_id_rejects_misuse() {
    let ty = GgmlType::Q8_0;
    let (ne, rows, cols) = (3, 8, 32);
    let w = random_weights(ty, ne * rows, cols, 1);
    let moe = QExperts::new(ty, ne, rows, cols, &w).unwrap();
    let x = vec![0.1f32; 2 * cols];
    let mut y = vec![0.0; 4 * rows];
    let err = |r: Result<(), qrepack::Error>, needle: &str| {
        let msg = r.unwrap_err().to_string();
        assert!(msg.contains(needle), "'{msg}' lacks '{needle}'");
    };
    err(
        moe.matmul_id(&x, 1, &[0, 3, 1, 2], 2, &mut y),
        "expert id 3",
    );
    err(
        moe.matmul_id(&x, 1, &[0, -1, 1, 2], 2, &mut y),
        "expert id -1",
    );
    err(moe.matmul_id(&x, 3, &[0, 1, 1, 2], 2, &mut y), "x_rows");
    err(
        moe.matmul_id(&x, 1, &[0, 1, 1], 2, &mut y),
        "multiple of n_used",
    );
    err(
        moe.matmul_id(&x[..cols], 1, &[0, 1, 1, 2], 2, &mut y),
        "x must hold",
    );
    err(
        moe.matmul_id(&x, 1, &[0, 1, 1, 2], 2, &mut y[1..]),
        "y must hold",
    );
    err(moe.matmul_id(&x, 1, &[], 0, &mut y), "n_used");
    assert!(QExperts::new(ty, ne, rows, cols, &w[1..]).is_err());
    assert!(QExperts::new(ty, 0, rows, cols, &[]).is_err());
    assert!(QExperts::with_layout(ty, ne, rows, cols, &w, Layout::Q4_0_8x8).is_err());
}
