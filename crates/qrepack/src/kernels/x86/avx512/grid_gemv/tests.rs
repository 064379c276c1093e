//! The GEMVs against the portable `vec_dot`s and the exact product (`kernels::row_tests`, where
//! the tolerance is derived) on random blocks (every bit pattern of indices, signs, shifts and
//! scales; `-128` activations included), on rows longer than one piece of prepared activations
//! with 1 to 9 rows, and on blocks at the edges of the integer ranges.

use super::*;
use crate::cpu::{CpuFeatures, KernelSet};
use crate::kernel_api::SetToken;
use crate::kernels::row_tests::{
    check, compare_matmul_on, compare_rows, exact_dot, half, q8_k_values, random, random_iq1_m,
    random_q8_k,
};
use crate::rng::SplitMix64 as Rng;
use crate::types::GgmlType;
use crate::vecdot;

fn iq2_s(rng: &mut Rng) -> BlockIq2S {
    BlockIq2S {
        d: half(rng),
        ..random(rng)
    }
}

fn iq3_s(rng: &mut Rng) -> BlockIq3S {
    BlockIq3S {
        d: half(rng),
        ..random(rng)
    }
}

/// `rows` weight rows of `nb` blocks (from `make`) times one activation row through `gemv`,
/// each output against `portable` and the exact product.
fn check_gemv<W: bytemuck::Pod>(
    ty: GgmlType,
    gemv: fn(&[W], &[BlockQ8K], &mut [f32]),
    portable: fn(&[W], &[BlockQ8K]) -> f32,
    w: &[W],
    a: &[BlockQ8K],
) {
    let nb = a.len();
    let rows = w.len() / nb;
    let act = q8_k_values(a);
    let mut out = vec![f32::NAN; rows];
    gemv(w, a, &mut out);
    for (r, &o) in out.iter().enumerate() {
        let row = &w[r * nb..(r + 1) * nb];
        let what = format!("{ty} gemv of {rows} rows of {nb} blocks, row {r}");
        let exact = exact_dot(ty, bytemuck::cast_slice(row), &act);
        check(&what, o, portable(row, a), exact, nb);
    }
}

/// Rows of 70 and 130 blocks (longer than one piece of 32 prepared blocks; the last piece
/// partial) and 1 to 9 rows (groups of four and the rows left over).
fn long_rows<W: bytemuck::Pod>(
    ty: GgmlType,
    gemv: fn(&[W], &[BlockQ8K], &mut [f32]),
    portable: fn(&[W], &[BlockQ8K]) -> f32,
    make: impl Fn(&mut Rng) -> W,
) {
    let mut rng = Rng::new(0x9e3 ^ ty.id() as u64);
    for nb in [70, 130] {
        let a: Vec<BlockQ8K> = (0..nb).map(|_| random_q8_k(&mut rng)).collect();
        for rows in 1..=9 {
            let w: Vec<W> = (0..rows * nb).map(|_| make(&mut rng)).collect();
            check_gemv(ty, gemv, portable, &w, &a);
        }
    }
}

/// Activations all `-128` or all `127` (with consistent `bsums`) times `w`.
fn extreme_activations<W: bytemuck::Pod>(
    ty: GgmlType,
    gemv: fn(&[W], &[BlockQ8K], &mut [f32]),
    portable: fn(&[W], &[BlockQ8K]) -> f32,
    w: &[W],
) {
    for q in [-128i8, 127] {
        let a = BlockQ8K {
            d: 0.01,
            qs: [q; 256],
            bsums: [16 * i16::from(q); 16],
        };
        check_gemv(ty, gemv, portable, w, &[a]);
    }
}

#[test]
fn iq2_s_equals_portable_and_exact() {
    let Some(cpu) = Avx512::new(CpuFeatures::get()) else {
        return;
    };
    let ty = GgmlType::IQ2_S;
    let (rows, dot) = (iq2_s_rows(cpu), vecdot::vec_dot_iq2_s_q8_k);
    compare_rows(ty, 1, rows, dot, iq2_s, random_q8_k, q8_k_values);
    compare_matmul_on(KernelSet::Avx512, ty, 1, iq2_s);
    long_rows(ty, rows.gemv, dot, iq2_s);
    // Largest indices and scales, every weight negated, then none.
    let mut rng = Rng::new(5);
    let w: Vec<BlockIq2S> = [0xff, 0]
        .map(|s| BlockIq2S {
            d: half(&mut rng),
            qs: std::array::from_fn(|i| if i < 32 { 0xff } else { s }),
            qh: [0xff; 8],
            scales: [0xff; 8],
        })
        .to_vec();
    extreme_activations(ty, rows.gemv, dot, &w);
}

#[test]
fn iq3_s_equals_portable_and_exact() {
    let Some(cpu) = Avx512::new(CpuFeatures::get()) else {
        return;
    };
    let ty = GgmlType::IQ3_S;
    let (rows, dot) = (iq3_s_rows(cpu), vecdot::vec_dot_iq3_s_q8_k);
    compare_rows(ty, 1, rows, dot, iq3_s, random_q8_k, q8_k_values);
    compare_matmul_on(KernelSet::Avx512, ty, 1, iq3_s);
    long_rows(ty, rows.gemv, dot, iq3_s);
    let mut rng = Rng::new(6);
    let w: Vec<BlockIq3S> = [0xff, 0]
        .map(|s| BlockIq3S {
            d: half(&mut rng),
            qs: [0xff; 64],
            qh: [0xff; 8],
            signs: [s; 32],
            scales: [0xff; 4],
        })
        .to_vec();
    extreme_activations(ty, rows.gemv, dot, &w);
}

#[test]
fn iq1_m_equals_portable_and_exact() {
    let Some(cpu) = Avx512::new(CpuFeatures::get()) else {
        return;
    };
    let ty = GgmlType::IQ1_M;
    let (rows, dot) = (iq1_m_rows(cpu), vecdot::vec_dot_iq1_m_q8_k);
    compare_rows(ty, 1, rows, dot, random_iq1_m, random_q8_k, q8_k_values);
    compare_matmul_on(KernelSet::Avx512, ty, 1, random_iq1_m);
    long_rows(ty, rows.gemv, dot, random_iq1_m);
    // Largest indices and scales with every shift negative, then every shift positive.
    let mut rng = Rng::new(7);
    let w: Vec<BlockIq1M> = [0xff, 0x77]
        .map(|qh| {
            let mut b = random_iq1_m(&mut rng);
            b.qs = [0xff; 32];
            b.qh = [qh; 16];
            for pair in b.scales.chunks_exact_mut(2) {
                pair[0] = 0xff;
                pair[1] |= 0x0f;
            }
            b
        })
        .to_vec();
    extreme_activations(ty, rows.gemv, dot, &w);
}
