//! Shared checks of the plain-layout row kernels of the low-bit types (the `grid` and `lowbit`
//! modules of AVX2 and NEON): each output against the portable kernel and against an f64
//! product of the same stored integers, and the random blocks they are checked on.
//!
//! # Tolerance
//!
//! Both the SIMD and the portable kernels compute every block's integer sums exactly, so they
//! differ from the exact product only through `f32` rounding: per block the scale product, the
//! integer-to-float conversions, the product with the sums and the sum of a type's two parts (at
//! most four roundings), then one rounding per block in the accumulation chain (one per scale
//! group for the types whose portable kernel adds every group of a block to the total, NVFP4's
//! four, or sums a block's Q8_0 blocks before scaling, Q1_0's four and Q2_0's two: `steps` per
//! block), three in the horizontal sum of the lanes and one for a type's final constant. With
//! `u = 2^-24` and `k = steps · blocks + 8` rounding steps along the longest chain, the
//! standard bound gives
//! `|computed − exact| ≤ γ_k · L`, `γ_k = k u / (1 − k u)`, where `L = Σ_i |w_i|·|a_i|` over the
//! exact weights and activations (every intermediate term is a partial sum of `w_i·a_i`, whose
//! magnitude `L` bounds). The f64 reference is exact to far below that, so the checks are
//!
//! * against the f64 reference: `γ_k · L`;
//! * against the portable kernel: `2 γ_k · L`.
//!
//! One wrong weight moves an output by about `L / weights`, far above either bound for the row
//! lengths used.

use bytemuck::Pod;

use crate::blocks::{BlockIq1M, BlockMxfp4, BlockQ1_0, BlockQ8K, BlockQ8_0, F16Bits};
use crate::blocks::{BlockQ2_0, BlockTq1_0, BlockTq2_0};
use crate::cpu::{CpuFeatures, KernelSet};
use crate::kernel_api::Kernels;
use crate::layout::Layout;
use crate::matrix::QMatrix;
use crate::quant::dequantize_f64;
use crate::reference::activations_f64;
use crate::rng::SplitMix64 as Rng;
use crate::types::GgmlType;

/// `γ_k` for `f32` (`u = 2^-24`).
pub(crate) fn gamma(k: usize) -> f64 {
    let ku = k as f64 * f64::from(f32::EPSILON) / 2.0;
    ku / (1.0 - ku)
}

/// A random sign times a magnitude in [0.001, 0.05).
pub(crate) fn scale(rng: &mut Rng) -> f32 {
    let m = 0.001 + 0.049 * rng.unit();
    if rng.next_u64() & 1 == 1 {
        -m
    } else {
        m
    }
}

/// A block of random bytes (every quant bit pattern).
pub(crate) fn random<B: Pod>(rng: &mut Rng) -> B {
    let mut b = B::zeroed();
    for byte in bytemuck::bytes_of_mut(&mut b) {
        *byte = rng.next_u64() as u8;
    }
    b
}

/// `(Σ w_i·a_i, Σ |w_i|·|a_i|)` in f64 from the exact weights of one row of `ty` and activation
/// values.
pub(crate) fn exact_dot(ty: GgmlType, w: &[u8], a: &[f64]) -> (f64, f64) {
    let wv = dequantize_f64(ty, w, 1, a.len()).expect("whole blocks");
    wv.iter()
        .zip(a)
        .fold((0.0, 0.0), |(s, l), (x, y)| (s + x * y, l + (x * y).abs()))
}

/// Checks one output against the portable value and the exact one, for `chain` roundings in
/// the accumulation (`steps · blocks`).
pub(crate) fn check(what: &str, got: f32, scalar: f32, exact: (f64, f64), chain: usize) {
    let (want, mag) = exact;
    let g = gamma(chain + 8);
    let tiny = 1e-30;
    let got = f64::from(got);
    let err = (got - want).abs();
    assert!(
        err <= g * mag + tiny,
        "{what}: {got:e} vs exact {want:e}, error {err:e} > γ·L = {:e}",
        g * mag
    );
    let err = (got - f64::from(scalar)).abs();
    assert!(
        err <= 2.0 * g * mag + tiny,
        "{what}: {got:e} vs scalar {scalar:e}, error {err:e} > 2γ·L = {:e}",
        2.0 * g * mag
    );
}

/// The GEMV over five weight rows and the GEMM of each row with a quad (and with three rows,
/// the path the GEMM takes for anything but a quad), for rows of 1, 2, 3, 8 and 17 blocks,
/// against `portable` and the exact product.
///
/// `act_values` gives the activation blocks' exact values; `ty` is the weight type, whose
/// exact dequantization gives the weights'; `steps` the roundings per block of the
/// accumulation (see the module's tolerance).
pub(crate) fn compare_rows<W: Pod, A: Pod>(
    ty: GgmlType,
    steps: usize,
    kernels: Kernels<W, A, A>,
    portable: fn(&[W], &[A]) -> f32,
    weight: impl Fn(&mut Rng) -> W,
    act: impl Fn(&mut Rng) -> A,
    act_values: impl Fn(&[A]) -> Vec<f64>,
) {
    const ROWS: usize = 5;
    let mut rng = Rng::new(0x5eed ^ ty.id() as u64);
    for nb in [1, 2, 3, 8, 17] {
        let w: Vec<W> = (0..ROWS * nb).map(|_| weight(&mut rng)).collect();
        let a: Vec<A> = (0..4 * nb).map(|_| act(&mut rng)).collect();
        let row = |r: usize| &w[r * nb..(r + 1) * nb];
        let arow = |m: usize| &a[m * nb..(m + 1) * nb];
        let exact =
            |r: usize, m: usize| exact_dot(ty, bytemuck::cast_slice(row(r)), &act_values(arow(m)));

        let mut out = [f32::NAN; ROWS];
        (kernels.gemv)(&w, arow(0), &mut out);
        for (r, &o) in out.iter().enumerate() {
            let what = format!("{ty} gemv blocks={nb} row {r}");
            check(&what, o, portable(row(r), arow(0)), exact(r, 0), steps * nb);
        }
        for r in 0..ROWS {
            let mut out = [f32::NAN; 4];
            (kernels.gemm)(row(r), &a, &mut out);
            for (m, &o) in out.iter().enumerate() {
                let what = format!("{ty} gemm blocks={nb} row {r} act {m}");
                check(&what, o, portable(row(r), arow(m)), exact(r, m), steps * nb);
            }
            let mut out = [f32::NAN; 3];
            (kernels.gemm)(row(r), &a[..3 * nb], &mut out);
            for (m, &o) in out.iter().enumerate() {
                let what = format!("{ty} gemm of 3 blocks={nb} row {r} act {m}");
                check(&what, o, portable(row(r), arow(m)), exact(r, m), steps * nb);
            }
        }
    }
}

/// A GEMV over rows of `nb` blocks (make them longer than a prepared piece of activations)
/// for 1 to 9 rows (groups of four and the rows left over), each output against the portable
/// kernel and the exact product; `steps` as for [`compare_rows`].
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn compare_long_gemv<W: Pod, A: Pod>(
    ty: GgmlType,
    steps: usize,
    nb: usize,
    gemv: fn(&[W], &[A], &mut [f32]),
    portable: fn(&[W], &[A]) -> f32,
    weight: impl Fn(&mut Rng) -> W,
    act: impl Fn(&mut Rng) -> A,
    act_values: impl Fn(&[A]) -> Vec<f64>,
) {
    let mut rng = Rng::new(0x1046 ^ ty.id() as u64);
    let a: Vec<A> = (0..nb).map(|_| act(&mut rng)).collect();
    let values = act_values(&a);
    for rows in 1..=9 {
        let w: Vec<W> = (0..rows * nb).map(|_| weight(&mut rng)).collect();
        let mut out = vec![f32::NAN; rows];
        gemv(&w, &a, &mut out);
        for (r, &o) in out.iter().enumerate() {
            let row = &w[r * nb..(r + 1) * nb];
            let what = format!("{ty} gemv of {rows} rows of {nb} blocks, row {r}");
            let exact = exact_dot(ty, bytemuck::cast_slice(row), &values);
            check(&what, o, portable(row, &a), exact, steps * nb);
        }
    }
}

/// `QMatrix::matmul` of the plain layout on the kernel set `set` (when this CPU has it) against
/// the same matrix on the portable kernels and against the exact product of the stored integers
/// and the quantized activations, for 1 to 9 activation rows (GEMVs, quads and quads with GEMV
/// rows left over) and rows of 1, 2, 3 and 9 blocks. `weight` makes the random blocks; `steps`
/// as for [`compare_rows`].
pub(crate) fn compare_matmul_on<W: Pod>(
    set: KernelSet,
    ty: GgmlType,
    steps: usize,
    weight: impl Fn(&mut Rng) -> W,
) {
    let ns: Vec<usize> = (1..=9).collect();
    compare_matmul_shapes(
        set,
        ty,
        steps,
        weight,
        &MatmulShapes {
            rows: 7,
            nbs: &[1, 2, 3, 9],
            ns: &ns,
        },
    );
}

/// The shapes of [`compare_matmul_shapes`].
pub(crate) struct MatmulShapes<'a> {
    /// Weight rows.
    pub(crate) rows: usize,
    /// Blocks per row, one matrix each.
    pub(crate) nbs: &'a [usize],
    /// Activation rows, one product each.
    pub(crate) ns: &'a [usize],
}

/// [`compare_matmul_on`] for the given shapes. Every third product has activation rows of
/// values ±1 only, whose Q8_K quants are all `-128` or `127` (the extremes of the integer
/// products), the others uniform in [-1, 1).
pub(crate) fn compare_matmul_shapes<W: Pod>(
    set: KernelSet,
    ty: GgmlType,
    steps: usize,
    weight: impl Fn(&mut Rng) -> W,
    shapes: &MatmulShapes<'_>,
) {
    compare_matmul_layout(Layout::Plain, set, ty, steps, weight, shapes);
}

/// [`compare_matmul_shapes`] in `layout` (whose row count must fit `shapes.rows`).
pub(crate) fn compare_matmul_layout<W: Pod>(
    layout: Layout,
    set: KernelSet,
    ty: GgmlType,
    steps: usize,
    weight: impl Fn(&mut Rng) -> W,
    shapes: &MatmulShapes<'_>,
) {
    let cpu = CpuFeatures::get();
    if !cpu.has(set) {
        return;
    }
    let simd_cpu = cpu.capped(set);
    let mut rng = Rng::new(0xc0de ^ ty.id() as u64);
    let rows = shapes.rows;
    for &nb in shapes.nbs {
        let cols = nb * ty.block_size();
        let blocks: Vec<W> = (0..rows * nb).map(|_| weight(&mut rng)).collect();
        let bytes: &[u8] = bytemuck::cast_slice(&blocks);
        let simd = QMatrix::with_layout_for_cpu(ty, rows, cols, bytes, layout, &simd_cpu)
            .expect("matrix in the layout");
        assert_eq!(
            simd.kernel_name(),
            set.name(),
            "{ty}: the {set} row of the table"
        );
        let scalar = QMatrix::with_layout_for_cpu(
            ty,
            rows,
            cols,
            bytes,
            Layout::Plain,
            &CpuFeatures::scalar(),
        )
        .expect("plain matrix");
        for (k, &n) in shapes.ns.iter().enumerate() {
            let mut x = rng.pm1_vec(n * cols);
            if k % 3 == 2 {
                x.iter_mut()
                    .for_each(|v| *v = if *v < 0.0 { -1.0 } else { 1.0 });
            }
            let mut y = vec![f32::NAN; n * rows];
            let mut ys = vec![f32::NAN; n * rows];
            simd.matmul(&x, n, &mut y).expect("matmul");
            scalar.matmul(&x, n, &mut ys).expect("matmul");
            for m in 0..n {
                let a = activations_f64(ty, &x[m * cols..(m + 1) * cols]);
                for r in 0..rows {
                    let w = &bytes[r * nb * ty.block_bytes()..(r + 1) * nb * ty.block_bytes()];
                    let what =
                        format!("{ty} {layout} {set} matmul cols={cols} n={n} act {m} row {r}");
                    let i = m * rows + r;
                    check(&what, y[i], ys[i], exact_dot(ty, w, &a), steps * nb);
                }
            }
        }
    }
}

/// A random f16 scale (see [`scale`]).
pub(crate) fn half(rng: &mut Rng) -> F16Bits {
    F16Bits::from_f32(scale(rng))
}

/// A TQ1_0 block of random quants (every base-3 byte, out-of-range ones included) and a random
/// f16 scale.
pub(crate) fn random_tq1_0(rng: &mut Rng) -> BlockTq1_0 {
    BlockTq1_0 {
        d: half(rng),
        ..random(rng)
    }
}

/// A Q2_0 block of random quants and a random f16 scale.
pub(crate) fn random_q2_0(rng: &mut Rng) -> BlockQ2_0 {
    BlockQ2_0 {
        d: half(rng),
        ..random(rng)
    }
}

/// A TQ2_0 block of random quants (`3` included) and a random f16 scale.
pub(crate) fn random_tq2_0(rng: &mut Rng) -> BlockTq2_0 {
    BlockTq2_0 {
        d: half(rng),
        ..random(rng)
    }
}

/// A Q8_K block of random quants (`-128` included) with consistent `bsums`.
pub(crate) fn random_q8_k(rng: &mut Rng) -> BlockQ8K {
    let mut b: BlockQ8K = random(rng);
    b.d = scale(rng);
    for (s, g) in b.bsums.iter_mut().zip(b.qs.chunks_exact(16)) {
        *s = g.iter().map(|&q| i16::from(q)).sum();
    }
    b
}

/// The exact values of Q8_K activation blocks.
pub(crate) fn q8_k_values(a: &[BlockQ8K]) -> Vec<f64> {
    a.iter()
        .flat_map(|b| b.qs.map(|q| f64::from(b.d) * f64::from(q)))
        .collect()
}

/// A Q8_0 block of random quants (`-128` included).
pub(crate) fn random_q8_0(rng: &mut Rng) -> BlockQ8_0 {
    BlockQ8_0 {
        d: half(rng),
        ..random(rng)
    }
}

/// The exact values of Q8_0 activation blocks.
pub(crate) fn q8_0_values(a: &[BlockQ8_0]) -> Vec<f64> {
    a.iter()
        .flat_map(|b| b.qs.map(|q| f64::from(b.d.to_f32()) * f64::from(q)))
        .collect()
}

/// `K` random Q8_0 blocks: the activations of one NVFP4, Q1_0 or Q2_0 block.
pub(crate) fn random_q8_0s<const K: usize>(rng: &mut Rng) -> [BlockQ8_0; K] {
    std::array::from_fn(|_| random_q8_0(rng))
}

/// The exact values of grouped Q8_0 activation blocks.
pub(crate) fn q8_0s_values<const K: usize>(a: &[[BlockQ8_0; K]]) -> Vec<f64> {
    q8_0_values(a.as_flattened())
}

/// IQ1_M with a sane block scale in the top nibbles of its four scale words.
pub(crate) fn random_iq1_m(rng: &mut Rng) -> BlockIq1M {
    let mut b: BlockIq1M = random(rng);
    let bits = u16::from_le_bytes(half(rng).0);
    for w in 0..4 {
        let hi = &mut b.scales[2 * w + 1];
        *hi = (*hi & 0x0f) | ((((bits >> (4 * w)) & 0x0f) as u8) << 4);
    }
    b
}

/// MXFP4 blocks with exponents 2^-20 .. 2^11: every code of the quants, finite products.
pub(crate) fn random_mxfp4(rng: &mut Rng) -> BlockMxfp4 {
    BlockMxfp4 {
        e: 108 + (rng.next_u64() % 32) as u8,
        ..random(rng)
    }
}

/// Q1_0 blocks with random bits and a random f16 scale.
pub(crate) fn random_q1_0(rng: &mut Rng) -> BlockQ1_0 {
    BlockQ1_0 {
        d: half(rng),
        ..random(rng)
    }
}

/// `rows` weight rows of `nb` blocks (from `make`) times one activation row through `gemv`,
/// each output against `portable` and the exact product.
#[cfg(target_arch = "x86_64")]
pub(crate) fn check_q8_k_gemv<W: bytemuck::Pod>(
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

/// GEMVs of Q8_K activations on rows of 70 and 130 blocks (longer than a piece of 32 prepared
/// blocks, the last piece partial) and 1 to 9 rows (groups of four and the rows left over).
#[cfg(target_arch = "x86_64")]
pub(crate) fn q8_k_long_rows<W: bytemuck::Pod>(
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
            check_q8_k_gemv(ty, gemv, portable, &w, &a);
        }
    }
}

/// Activations all `-128` or all `127` (with consistent `bsums`) times `w`.
#[cfg(target_arch = "x86_64")]
pub(crate) fn q8_k_extreme_activations<W: bytemuck::Pod>(
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
        check_q8_k_gemv(ty, gemv, portable, w, &[a]);
    }
}
