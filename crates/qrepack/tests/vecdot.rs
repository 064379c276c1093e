//! Checks every plain-path dot product against an independent `f64` reference.
//!
//! The weight blocks are random bytes with random (moderate) float scales, the activation blocks
//! are either random bytes (full `i8` range, consistent `s`/`bsums`) or real quantizations of
//! random floats. The reference decodes both sides to `f64` with the small decoders below
//! (written from the block format descriptions, one weight at a time, deliberately unlike the
//! kernels' bulk decoding) and takes the dot product in `f64`.
//!
//! # Tolerance
//!
//! A kernel computes each block's integer sums exactly and then does a handful of `f32`
//! operations (widening the f16 scales is exact; one product of scales, one conversion of the
//! integer sum, one or two more products and a subtraction: at most 4 roundings of relative size
//! `u = 2^-24`), and then adds the `nb` block results (or the eight lanes plus the min term) in
//! `f32`. Every intermediate value is bounded by `L = Σ_i (|scale part of w_i| + |min part of
//! w_i|)·|a_i|` (plus `|m·s|` for the Q8_1 types), so the classic summation bound gives
//! `|got − exact| ≤ (nb + 4 + 9) · u · L` to first order. We allow `(nb + 16) · 2u · L`, twice
//! that. A single wrong quant changes the result by `|d·sc·Δq·a_i|`, about `1/(256·nb)` of `L`
//! for a 256-weight type and `1/(32·nb)` for a 32-weight one, i.e. hundreds of times the
//! tolerance, which the mutation test below checks explicitly.

use std::mem::{offset_of, size_of};

use bytemuck::{Pod, Zeroable};
use qrepack::activation::Bf16Bits;
use qrepack::blocks::*;
use qrepack::rng::SplitMix64;
use qrepack::vecdot::*;

const EPS32: f64 = f32::EPSILON as f64; // 2u

#[path = "vecdot/reference.rs"]
mod reference;

use reference::*;

// ---------------------------------------------------------------------------------------------
// The reference and the checks
// ---------------------------------------------------------------------------------------------

/// One weight type paired with its activation type.
struct Spec<W, A> {
    name: &'static str,
    rand_w: fn(&mut Rng) -> W,
    rand_a: fn(&mut Rng) -> A,
    deq_w: fn(&W) -> Vec<(f64, f64)>,
    deq_a: fn(&A) -> Vec<f64>,
    /// Q8_1 activations: the stored `s` (the activation block's own `d·Σq`, rounded to f16),
    /// which the format defines as the sum the min multiplies.
    act_sum: Option<fn(&A) -> f64>,
    kernel: fn(&[W], &[A]) -> f32,
    /// Offsets of the bytes of `W` holding float scales (never mutated).
    float_bytes: Vec<usize>,
}

impl<W: Pod, A: Pod> Spec<W, A> {
    /// The exact dot product and the magnitude bound `L` of the tolerance.
    fn reference(&self, w: &[W], a: &[A]) -> (f64, f64) {
        let (mut dot, mut mag) = (0.0, 0.0);
        for (wb, ab) in w.iter().zip(a) {
            let ws = (self.deq_w)(wb);
            let xs = (self.deq_a)(ab);
            assert_eq!(ws.len(), xs.len());
            for (&(s, m), &x) in ws.iter().zip(&xs) {
                dot += s * x;
                mag += s.abs() * x.abs();
                if self.act_sum.is_none() {
                    dot += m * x;
                    mag += m.abs() * x.abs();
                }
            }
            if let Some(sum) = self.act_sum {
                let m = ws[0].1;
                dot += m * sum(ab);
                mag += (m * sum(ab)).abs();
            }
        }
        (dot, mag)
    }

    fn tolerance(nb: usize, mag: f64) -> f64 {
        (nb as f64 + 16.0) * EPS32 * mag + f64::MIN_POSITIVE
    }

    fn blocks(&self, rng: &mut Rng, nb: usize) -> (Vec<W>, Vec<A>) {
        let w = (0..nb).map(|_| (self.rand_w)(rng)).collect();
        let a = (0..nb).map(|_| (self.rand_a)(rng)).collect();
        (w, a)
    }

    fn check(&self, w: &[W], a: &[A], what: &str) -> f64 {
        let got = (self.kernel)(w, a) as f64;
        let (exact, mag) = self.reference(w, a);
        let tol = Self::tolerance(w.len(), mag);
        assert!(
            (got - exact).abs() <= tol,
            "{} {what} nb={}: got {got}, exact {exact}, |diff| {} > tol {tol}",
            self.name,
            w.len(),
            (got - exact).abs()
        );
        tol
    }

    /// Random rows of several lengths, plus mismatched lengths (only the common blocks count).
    fn run(&self, seed: u64) {
        let mut rng = Rng(SplitMix64::new(seed));
        for nb in [1, 2, 3, 8] {
            for trial in 0..25 {
                let (w, a) = self.blocks(&mut rng, nb);
                self.check(&w, &a, &format!("trial {trial}"));
            }
        }
        let (w, a) = self.blocks(&mut rng, 3);
        let common = (self.kernel)(&w[..2], &a[..2]);
        assert_eq!(
            (self.kernel)(&w, &a[..2]),
            common,
            "{}: longer w",
            self.name
        );
        assert_eq!(
            (self.kernel)(&w[..2], &a),
            common,
            "{}: longer a",
            self.name
        );
        assert_eq!((self.kernel)(&[], &a), 0.0, "{}: empty", self.name);
    }

    /// Corrupts single weight bytes: the kernel must follow the reference, and most corruptions
    /// must move the result by far more than the tolerance (so the tolerance can tell a wrong
    /// decoding from rounding).
    fn mutations(&self, seed: u64) {
        let mut rng = Rng(SplitMix64::new(seed));
        let nb = 3;
        let trials = 60;
        let mut significant = 0;
        for _ in 0..trials {
            let (mut w, a) = self.blocks(&mut rng, nb);
            let (before, _) = self.reference(&w, &a);
            let b = rng.below(nb);
            let offset = loop {
                let o = rng.below(size_of::<W>());
                if !self.float_bytes.contains(&o) {
                    break o;
                }
            };
            let bytes = bytemuck::bytes_of_mut(&mut w[b]);
            bytes[offset] ^= 1 + rng.below(255) as u8;
            let tol = self.check(&w, &a, &format!("mutated byte {offset}"));
            let (after, _) = self.reference(&w, &a);
            if (after - before).abs() > 10.0 * tol {
                significant += 1;
                let got = (self.kernel)(&w, &a) as f64;
                assert!(
                    (got - before).abs() > 5.0 * tol,
                    "{}: mutation missed",
                    self.name
                );
            }
        }
        assert!(
            significant >= trials / 2,
            "{}: only {significant} of {trials} mutations were significant",
            self.name
        );
    }
}

macro_rules! spec {
    ($name:literal, $w:ty, [$($f:ident),*], $rand_a:ident, $deq_w:ident, $deq_a:ident,
     $act_sum:expr, $kernel:ident) => {
        Spec::<$w, _> {
            name: $name,
            rand_w: |rng| random_block(rng, &[$(offset_of!($w, $f)),*]),
            rand_a: $rand_a,
            deq_w: $deq_w,
            deq_a: $deq_a,
            act_sum: $act_sum,
            kernel: $kernel,
            float_bytes: vec![$(offset_of!($w, $f), offset_of!($w, $f) + 1),*],
        }
    };
}

fn q8_1_sum(a: &BlockQ8_1) -> f64 {
    f16_value(a.s)
}

macro_rules! type_test {
    ($test:ident, $spec:expr, $seed:expr) => {
        #[test]
        fn $test() {
            let spec = $spec;
            spec.run($seed);
            spec.mutations($seed ^ 0x5555);
        }
    };
}

type_test!(
    q4_0,
    spec!(
        "q4_0",
        BlockQ4_0,
        [d],
        rand_q8_0,
        deq_q4_0,
        deq_q8_0,
        None,
        vec_dot_q4_0_q8_0
    ),
    1
);
type_test!(
    q4_1,
    spec!(
        "q4_1",
        BlockQ4_1,
        [d, m],
        rand_q8_1,
        deq_q4_1,
        deq_q8_1,
        Some(q8_1_sum),
        vec_dot_q4_1_q8_1
    ),
    2
);
type_test!(
    q5_0,
    spec!(
        "q5_0",
        BlockQ5_0,
        [d],
        rand_q8_0,
        deq_q5_0,
        deq_q8_0,
        None,
        vec_dot_q5_0_q8_0
    ),
    3
);
type_test!(
    q5_1,
    spec!(
        "q5_1",
        BlockQ5_1,
        [d, m],
        rand_q8_1,
        deq_q5_1,
        deq_q8_1,
        Some(q8_1_sum),
        vec_dot_q5_1_q8_1
    ),
    4
);
type_test!(
    q8_0,
    spec!(
        "q8_0",
        BlockQ8_0,
        [d],
        rand_q8_0,
        deq_q8_0_w,
        deq_q8_0,
        None,
        vec_dot_q8_0_q8_0
    ),
    5
);
type_test!(
    q8_1,
    spec!(
        "q8_1",
        BlockQ8_1,
        [d, s],
        rand_q8_1,
        deq_q8_1_w,
        deq_q8_1,
        None,
        vec_dot_q8_1_q8_1
    ),
    6
);
type_test!(
    q2_k,
    spec!(
        "q2_K",
        BlockQ2K,
        [d, dmin],
        rand_q8_k,
        deq_q2_k,
        deq_q8_k,
        None,
        vec_dot_q2_k_q8_k
    ),
    7
);
type_test!(
    q3_k,
    spec!(
        "q3_K",
        BlockQ3K,
        [d],
        rand_q8_k,
        deq_q3_k,
        deq_q8_k,
        None,
        vec_dot_q3_k_q8_k
    ),
    8
);
type_test!(
    q4_k,
    spec!(
        "q4_K",
        BlockQ4K,
        [d, dmin],
        rand_q8_k,
        deq_q4_k,
        deq_q8_k,
        None,
        vec_dot_q4_k_q8_k
    ),
    9
);
type_test!(
    q5_k,
    spec!(
        "q5_K",
        BlockQ5K,
        [d, dmin],
        rand_q8_k,
        deq_q5_k,
        deq_q8_k,
        None,
        vec_dot_q5_k_q8_k
    ),
    10
);
type_test!(
    q6_k,
    spec!(
        "q6_K",
        BlockQ6K,
        [d],
        rand_q8_k,
        deq_q6_k,
        deq_q8_k,
        None,
        vec_dot_q6_k_q8_k
    ),
    11
);
type_test!(
    iq4_nl,
    spec!(
        "iq4_nl",
        BlockIq4Nl,
        [d],
        rand_q8_0,
        deq_iq4_nl,
        deq_q8_0,
        None,
        vec_dot_iq4_nl_q8_0
    ),
    12
);
type_test!(
    iq4_xs,
    spec!(
        "iq4_xs",
        BlockIq4Xs,
        [d],
        rand_q8_k,
        deq_iq4_xs,
        deq_q8_k,
        None,
        vec_dot_iq4_xs_q8_k
    ),
    13
);

/// Q8_K weights have an `f32` scale and `bsums` (unused by the dot product), so they are built
/// by hand.
fn rand_q8_k_weight(rng: &mut Rng) -> BlockQ8K {
    let mut b = rand_q8_k(rng);
    b.d = rng.scale();
    b
}

type_test!(
    q8_k,
    Spec::<BlockQ8K, BlockQ8K> {
        name: "q8_K",
        rand_w: rand_q8_k_weight,
        rand_a: rand_q8_k,
        deq_w: deq_q8_k_w,
        deq_a: deq_q8_k,
        act_sum: None,
        kernel: vec_dot_q8_k_q8_k,
        float_bytes: (0..4).collect(),
    },
    14
);

#[test]
fn iq4_levels_match_the_crate() {
    assert_eq!(LEVELS.map(|v| v as i8), IQ4NL_LEVELS);
}

// ---------------------------------------------------------------------------------------------
// Float rows
// ---------------------------------------------------------------------------------------------

/// Float dot products: each product is exact (f16, bf16) or rounded once (f32), the sum is kept
/// in f64 and rounded to f32 once, so `|got − exact| ≤ 2u·L + 2u·L` with `L = Σ|w_i a_i|`.
fn check_float<T: Copy>(
    name: &str,
    make: fn(f32) -> T,
    value: fn(T) -> f64,
    kernel: fn(&[T], &[T]) -> f32,
    seed: u64,
) {
    let mut rng = Rng(SplitMix64::new(seed));
    for n in [0, 1, 2, 3, 8, 31, 100, 1000] {
        for _ in 0..10 {
            let w: Vec<T> = (0..n).map(|_| make(4.0 * rng.sym())).collect();
            let a: Vec<T> = (0..n).map(|_| make(4.0 * rng.sym())).collect();
            let exact: f64 = w.iter().zip(&a).map(|(&x, &y)| value(x) * value(y)).sum();
            let mag: f64 = w
                .iter()
                .zip(&a)
                .map(|(&x, &y)| (value(x) * value(y)).abs())
                .sum();
            let got = kernel(&w, &a) as f64;
            let tol = 2.0 * EPS32 * mag + f64::MIN_POSITIVE;
            assert!(
                (got - exact).abs() <= tol,
                "{name} n={n}: got {got}, exact {exact}, tol {tol}"
            );
            if n > 0 {
                // One changed element must show.
                let mut w2 = w.clone();
                let i = rng.below(n);
                w2[i] = make(value(w[i]) as f32 + 1.0);
                let delta = (value(w2[i]) - value(w[i])) * value(a[i]);
                let tol2 = tol + 2.0 * EPS32 * (value(w2[i]) * value(a[i])).abs();
                if delta.abs() > 10.0 * tol2 {
                    let got2 = kernel(&w2, &a) as f64;
                    let err = (got2 - got - delta).abs();
                    assert!(err <= tol + tol2, "{name}: change missed");
                }
            }
        }
        // Mismatched lengths: only the common prefix counts.
        if n >= 2 {
            let w: Vec<T> = (0..n).map(|_| make(rng.sym())).collect();
            let a: Vec<T> = (0..n - 1).map(|_| make(rng.sym())).collect();
            assert_eq!(kernel(&w, &a), kernel(&w[..n - 1], &a), "{name}: lengths");
        }
    }
}

#[test]
fn f32_rows() {
    check_float("f32", |x| x, |x| x as f64, vec_dot_f32, 21);
}

#[test]
fn f16_rows() {
    check_float("f16", F16Bits::from_f32, f16_value, vec_dot_f16, 22);
}

#[test]
fn bf16_rows() {
    check_float(
        "bf16",
        Bf16Bits::from_f32,
        |x| x.to_f32() as f64,
        vec_dot_bf16,
        23,
    );
}

/// f32 products are rounded before the f64 sum, exactly like ggml's scalar path.
#[test]
fn f32_products_rounded_before_summing() {
    let w = [1.0 + f32::EPSILON, 1.0];
    let a = [1.0 + f32::EPSILON, -1.0];
    // (1 + e)^2 = 1 + 2e + e^2 rounds to 1 + 2e in f32.
    assert_eq!(vec_dot_f32(&w, &a), 2.0 * f32::EPSILON);
}

// ---------------------------------------------------------------------------------------------
// Hand-computed cases
// ---------------------------------------------------------------------------------------------

/// Small hand-checked blocks, so that a consistent misreading shared by the kernel and the
/// reference decoders above would still be caught.
#[test]
fn hand_computed_blocks() {
    // Q4_0: weight j (low nibble) = 9 - 8 = 1, weight j + 16 (high nibble) = 10 - 8 = 2.
    let w = BlockQ4_0 {
        d: F16Bits::from_f32(0.5),
        qs: [0xa9; 16],
    };
    let mut qs = [0i8; 32];
    qs[3] = 4; // times weight 1
    qs[20] = -3; // times weight 2
    let a = BlockQ8_0 {
        d: F16Bits::from_f32(0.25),
        qs,
    };
    // 0.5 * 0.25 * (4 * 1 + (-3) * 2) = -0.25
    assert_eq!(vec_dot_q4_0_q8_0(&[w], &[a]), -0.25);

    // Q5_0: set the fifth bit of weight 20 (bit 20 of qh): nibble 10 | 16 = 26 -> 26 - 16 = 10.
    let w5 = BlockQ5_0 {
        d: F16Bits::from_f32(0.5),
        qh: [0, 0, 0x10, 0],
        qs: [0xa9; 16],
    };
    // weight 3 = 9 - 16 = -7; 0.125 * (4 * -7 + (-3) * 10) = -7.25
    assert_eq!(vec_dot_q5_0_q8_0(&[w5], &[a]), -7.25);

    // Q4_1 with a min: 0.125 * (4 * 9 + (-3) * 10) + m * s = 0.75 + 2 * 1.5 = 3.75
    let w1 = BlockQ4_1 {
        d: F16Bits::from_f32(0.5),
        m: F16Bits::from_f32(2.0),
        qs: [0xa9; 16],
    };
    let a1 = BlockQ8_1 {
        d: F16Bits::from_f32(0.25),
        s: F16Bits::from_f32(1.5),
        qs,
    };
    assert_eq!(vec_dot_q4_1_q8_1(&[w1], &[a1]), 3.75);

    // Q6_K: weight 200 (half 1, quarter 2, l = 8): high nibble of ql[64 + 8], bits 4-5 of
    // qh[32 + 8]; scale of group 200 / 16 = 12.
    let mut w6 = BlockQ6K::zeroed();
    w6.ql[72] = 0x50; // low 4 bits of q = 5
    w6.qh[40] = 0x20; // top 2 bits of q = 2 -> q = 37, minus 32 = 5
    w6.scales[12] = -3;
    w6.d = F16Bits::from_f32(0.5);
    let mut a6 = BlockQ8K::zeroed();
    a6.d = 0.25;
    a6.qs[200] = 7;
    a6.bsums[12] = 7;
    // Every other weight is (0 - 32) times a zero activation.
    // 0.5 * 0.25 * (-3) * 5 * 7 = -13.125
    assert_eq!(vec_dot_q6_k_q8_k(&[w6], &[a6]), -13.125);

    // Q4_K: sub-block 5 (weights 160..192), scale 3 and min 2; weight 170 is the high nibble of
    // qs[32 * 2 + 10]. All other weights are 0 but still pay the min of their sub-block.
    let mut w4 = BlockQ4K::zeroed();
    let mut s = [0u8; 8];
    let mut m = [0u8; 8];
    s[5] = 3;
    m[5] = 2;
    w4.scales = k4_pack_scales(&s, &m);
    w4.qs[74] = 0x60; // q = 6
    w4.d = F16Bits::from_f32(1.0);
    w4.dmin = F16Bits::from_f32(0.5);
    let mut a4 = BlockQ8K::zeroed();
    a4.d = 0.5;
    a4.qs[170] = 2;
    a4.qs[161] = -1;
    a4.bsums[10] = 2 - 1; // group 170 / 16 = 10 also holds 161
                          // 0.5 * (3 * 6 * 2) - 0.5 * 0.5 * 2 * (2 - 1) = 18 - 0.5 = 17.5
    assert_eq!(vec_dot_q4_k_q8_k(&[w4], &[a4]), 17.5);
}
