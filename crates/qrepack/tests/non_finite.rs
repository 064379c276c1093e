//! What NaN and infinity do: a non-finite activation poisons the quantized block it falls in, so
//! every output of that activation row is NaN (ggml's x86 quantizer behaves the same way for
//! Q8_0; F16/BF16/F32 weights follow IEEE arithmetic, giving infinities or NaN); a NaN weight scale makes that weight row's outputs NaN. Never a panic, never UB, and
//! the other outputs stay finite.

mod common;

use common::random_weights;
use qrepack::blocks::F16Bits;
use qrepack::rng::SplitMix64;
use qrepack::{GgmlType, Layout, QMatrix};

fn cols_for(ty: GgmlType) -> usize {
    if ty.block_size() > 32 {
        512
    } else {
        64
    }
}

#[test]
fn non_finite_activations_poison_only_their_row() {
    let mut rng = SplitMix64::new(11);
    for &layout in Layout::ALL {
        for ty in GgmlType::ALL {
            let rows = 16;
            if !layout.fits(ty, rows) {
                continue;
            }
            let cols = cols_for(ty);
            let w = random_weights(ty, rows, cols, 3);
            let m = QMatrix::with_layout(ty, rows, cols, &w, layout).unwrap();
            for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
                let n = 6;
                let mut x = rng.pm1_vec(n * cols);
                let poisoned = (rng.next_u64() % n as u64) as usize;
                let at = (rng.next_u64() % cols as u64) as usize;
                x[poisoned * cols + at] = bad;
                let mut y = vec![0.0; n * rows];
                m.matmul(&x, n, &mut y).unwrap();
                for t in 0..n {
                    let out = &y[t * rows..(t + 1) * rows];
                    if t == poisoned && ty.is_quantized() {
                        assert!(
                            out.iter().all(|v| v.is_nan()),
                            "{layout} {ty} {bad}: row {t} {out:?}"
                        );
                    } else if t == poisoned {
                        // float weights follow IEEE arithmetic: +-inf or NaN
                        assert!(
                            out.iter().all(|v| !v.is_finite()),
                            "{layout} {ty} {bad}: row {t}"
                        );
                    } else {
                        assert!(
                            out.iter().all(|v| v.is_finite()),
                            "{layout} {ty} {bad}: row {t}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn nan_weight_scale_poisons_its_output_column() {
    for &layout in Layout::ALL {
        for ty in [
            GgmlType::Q4_0,
            GgmlType::Q4_K,
            GgmlType::IQ4_NL,
            GgmlType::Q8_0,
            GgmlType::Q6_K,
        ] {
            let rows = 8;
            if !layout.fits(ty, rows) {
                continue;
            }
            let cols = cols_for(ty);
            let mut w = random_weights(ty, rows, cols, 5);
            let row = 3;
            let offset = if ty == GgmlType::Q6_K { 208 } else { 0 };
            let at = row * ty.row_bytes(cols).unwrap() + offset;
            w[at..at + 2].copy_from_slice(&F16Bits::from_f32(f32::NAN).0);
            let m = QMatrix::with_layout(ty, rows, cols, &w, layout).unwrap();
            let n = 5;
            let x = SplitMix64::new(2).pm1_vec(n * cols);
            let mut y = vec![0.0; n * rows];
            m.matmul(&x, n, &mut y).unwrap();
            for t in 0..n {
                for r in 0..rows {
                    let v = y[t * rows + r];
                    assert_eq!(v.is_nan(), r == row, "{layout} {ty} token {t} row {r}: {v}");
                }
            }
        }
    }
}
