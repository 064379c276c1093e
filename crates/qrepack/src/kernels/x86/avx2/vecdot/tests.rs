//! Every AVX2 kernel against its portable counterpart in `crate::vecdot`, on random blocks
//! (all quant bit patterns, `-128` activations included) and on extreme blocks.
//!
//! Tolerance: `|simd − scalar| ≤ 1e-5 · (L + tiny)` with `L = Σ_i |w_i|·|a_i|`, where for
//! Q4_K/Q5_K `|w_i|` is `|d·sc·q| + |dmin·m|` (both parts of the weight, so that a
//! cancelling min term does not shrink the bound). A single wrong quant moves the result by
//! about `L / (number of weights)`, far more than the tolerance for the row lengths used.

use super::*;
use crate::blocks::{F16Bits, IQ4NL_LEVELS};
use crate::cpu::CpuFeatures;
use crate::quant::dequantize_f64;
use crate::types::GgmlType;
use crate::vecdot;
use bytemuck::Pod;

const COUNTS: &[usize] = &[1, 2, 3, 5, 16, 128];

use crate::rng::SplitMix64 as Rng;

/// Random scales and blocks on top of the shared generator.
impl Rng {
    /// Random sign times a magnitude in [0.001, 0.05).
    fn scale(&mut self) -> f32 {
        let m = 0.001 + 0.049 * self.unit();
        if self.next_u64() & 1 == 1 {
            -m
        } else {
            m
        }
    }
    fn half(&mut self) -> F16Bits {
        F16Bits::from_f32(self.scale())
    }
    /// A block of random bytes.
    fn block<B: Pod>(&mut self) -> B {
        let mut b = B::zeroed();
        for byte in bytemuck::bytes_of_mut(&mut b) {
            *byte = self.next_u64() as u8;
        }
        b
    }
}

fn random_q8_0(rng: &mut Rng) -> BlockQ8_0 {
    BlockQ8_0 {
        d: rng.half(),
        ..rng.block()
    }
}

fn random_q8_k(rng: &mut Rng) -> BlockQ8K {
    let mut b: BlockQ8K = rng.block();
    b.d = rng.scale();
    fix_bsums(&mut b);
    b
}

fn fix_bsums(b: &mut BlockQ8K) {
    for (s, g) in b.bsums.iter_mut().zip(b.qs.chunks_exact(16)) {
        *s = g.iter().map(|&q| q as i16).sum();
    }
}

/// Activations as `f64` values.
fn q8_0_values(a: &[BlockQ8_0]) -> Vec<f64> {
    a.iter()
        .flat_map(|b| b.qs.map(|q| b.d.to_f32() as f64 * q as f64))
        .collect()
}

fn q8_k_values(a: &[BlockQ8K]) -> Vec<f64> {
    a.iter()
        .flat_map(|b| b.qs.map(|q| b.d as f64 * q as f64))
        .collect()
}

/// `Σ |w_i|·|a_i|` with the weights of `ty` decoded exactly.
fn magnitude<W: Pod>(ty: GgmlType, w: &[W], a: &[f64]) -> f64 {
    let bytes: &[u8] = bytemuck::cast_slice(w);
    let wf = dequantize_f64(ty, bytes, 1, a.len()).unwrap();
    wf.iter().zip(a).map(|(x, y)| (x * y).abs()).sum()
}

fn check(what: &str, n: usize, simd: f32, scalar: f32, mag: f64) {
    let tol = 1e-5 * (mag + 1e-30);
    let err = (simd as f64 - scalar as f64).abs();
    assert!(
        err <= tol,
        "{what} nb={n}: simd {simd:e} vs scalar {scalar:e}: error {err:e} > {tol:e}"
    );
}

fn avx2() -> Option<Avx2> {
    crate::kernel_api::SetToken::new(CpuFeatures::get())
}

/// Random rows of `W` against Q8_0 rows, `reps` times per block count.
fn check_32<W: Pod>(
    ty: GgmlType,
    select: fn(Avx2) -> Dot<W, BlockQ8_0>,
    scalar: Dot<W, BlockQ8_0>,
    weight: impl Fn(&mut Rng) -> W,
) {
    let Some(cpu) = avx2() else { return };
    let simd = select(cpu);
    let mut rng = Rng::new(ty as u64 + 1);
    for &n in COUNTS {
        for _ in 0..20 {
            let w: Vec<W> = (0..n).map(|_| weight(&mut rng)).collect();
            let a: Vec<BlockQ8_0> = (0..n).map(|_| random_q8_0(&mut rng)).collect();
            let mag = magnitude(ty, &w, &q8_0_values(&a));
            check(&format!("{ty}"), n, simd(&w, &a), scalar(&w, &a), mag);
            // Rows of different lengths: the extra blocks are ignored.
            let got = simd(&w, &a[..n - 1]);
            assert_eq!(got == 0.0, n == 1);
            check(&format!("{ty} short"), n, got, scalar(&w, &a[..n - 1]), mag);
        }
    }
}

/// Random rows of `W` against Q8_K rows.
fn check_256<W: Pod>(
    ty: GgmlType,
    select: fn(Avx2) -> Dot<W, BlockQ8K>,
    scalar: Dot<W, BlockQ8K>,
    weight: impl Fn(&mut Rng) -> W,
    magnitude: impl Fn(&[W], &[f64]) -> f64,
) {
    let Some(cpu) = avx2() else { return };
    let simd = select(cpu);
    let mut rng = Rng::new(ty as u64 + 100);
    for &n in COUNTS {
        for _ in 0..10 {
            let w: Vec<W> = (0..n).map(|_| weight(&mut rng)).collect();
            let a: Vec<BlockQ8K> = (0..n).map(|_| random_q8_k(&mut rng)).collect();
            let mag = magnitude(&w, &q8_k_values(&a));
            check(&format!("{ty}"), n, simd(&w, &a), scalar(&w, &a), mag);
            check(
                &format!("{ty} short"),
                n,
                simd(&w[..n - 1], &a),
                scalar(&w[..n - 1], &a),
                mag,
            );
        }
    }
}

#[test]
fn q4_0() {
    check_32(GgmlType::Q4_0, q4_0_q8_0, vecdot::vec_dot_q4_0_q8_0, |r| {
        BlockQ4_0 {
            d: r.half(),
            ..r.block()
        }
    });
}

#[test]
fn q5_0() {
    check_32(GgmlType::Q5_0, q5_0_q8_0, vecdot::vec_dot_q5_0_q8_0, |r| {
        BlockQ5_0 {
            d: r.half(),
            ..r.block()
        }
    });
}

#[test]
fn q8_0() {
    check_32(
        GgmlType::Q8_0,
        q8_0_q8_0,
        vecdot::vec_dot_q8_0_q8_0,
        random_q8_0,
    );
}

#[test]
fn iq4_nl() {
    check_32(
        GgmlType::IQ4_NL,
        iq4_nl_q8_0,
        vecdot::vec_dot_iq4_nl_q8_0,
        |r| BlockIq4Nl {
            d: r.half(),
            ..r.block()
        },
    );
}

/// Both parts of a Q4_K/Q5_K weight counted separately.
fn k4_magnitude<W: Pod + Copy>(
    ty: GgmlType,
    w: &[W],
    a: &[f64],
    set: impl Fn(&mut W, F16Bits, F16Bits),
    get: impl Fn(&W) -> (F16Bits, F16Bits),
) -> f64 {
    let zero = F16Bits::from_f32(0.0);
    let part = |keep_d: bool| -> Vec<W> {
        w.iter()
            .map(|b| {
                let (d, dmin) = get(b);
                let mut b = *b;
                if keep_d {
                    set(&mut b, d, zero);
                } else {
                    set(&mut b, zero, dmin);
                }
                b
            })
            .collect()
    };
    magnitude(ty, &part(true), a) + magnitude(ty, &part(false), a)
}

#[test]
fn q4_k() {
    let ty = GgmlType::Q4_K;
    check_256(
        ty,
        q4_k_q8_k,
        vecdot::vec_dot_q4_k_q8_k,
        |r| BlockQ4K {
            d: r.half(),
            dmin: r.half(),
            ..r.block()
        },
        |w, a| {
            k4_magnitude(
                ty,
                w,
                a,
                |b, d, m| (b.d, b.dmin) = (d, m),
                |b| (b.d, b.dmin),
            )
        },
    );
}

#[test]
fn q5_k() {
    let ty = GgmlType::Q5_K;
    check_256(
        ty,
        q5_k_q8_k,
        vecdot::vec_dot_q5_k_q8_k,
        |r| BlockQ5K {
            d: r.half(),
            dmin: r.half(),
            ..r.block()
        },
        |w, a| {
            k4_magnitude(
                ty,
                w,
                a,
                |b, d, m| (b.d, b.dmin) = (d, m),
                |b| (b.d, b.dmin),
            )
        },
    );
}

#[test]
fn q6_k() {
    let ty = GgmlType::Q6_K;
    check_256(
        ty,
        q6_k_q8_k,
        vecdot::vec_dot_q6_k_q8_k,
        |r| BlockQ6K {
            d: r.half(),
            ..r.block()
        },
        |w, a| magnitude(ty, w, a),
    );
}

#[test]
fn q6_k_ignores_bsums() {
    // The portable Q6_K kernel does not read `bsums`; neither may this one.
    let Some(cpu) = avx2() else { return };
    let simd = q6_k_q8_k(cpu);
    let mut rng = Rng::new(7);
    let w: Vec<BlockQ6K> = (0..4).map(|_| rng.block()).collect();
    let mut a: Vec<BlockQ8K> = (0..4).map(|_| random_q8_k(&mut rng)).collect();
    let before = simd(&w, &a);
    for b in &mut a {
        b.bsums = [0x5555; 16];
    }
    assert_eq!(simd(&w, &a).to_bits(), before.to_bits());
}

/// Saturation corners: every weight and activation byte at its extremes, all combinations.
#[test]
fn extreme_bytes() {
    let Some(cpu) = avx2() else { return };
    let fills = [0x00u8, 0x0f, 0x77, 0x7f, 0x80, 0x88, 0xf0, 0xff];
    let one = F16Bits::from_f32(1.0);
    for &wf in &fills {
        for &af in &fills {
            let a0 = BlockQ8_0 {
                d: one,
                qs: [af as i8; 32],
            };
            let a0 = [a0; 3];
            let mut ak = BlockQ8K {
                d: 1.0,
                qs: [af as i8; 256],
                bsums: [0; 16],
            };
            fix_bsums(&mut ak);
            let ak = [ak; 3];
            let what = format!("w {wf:#04x} a {af:#04x}");
            let eq = |name: &str, simd: f32, scalar: f32| {
                assert_eq!(simd, scalar, "{name} {what}");
            };
            let w = [BlockQ4_0 {
                d: one,
                qs: [wf; 16],
            }; 3];
            eq(
                "q4_0",
                q4_0_q8_0(cpu)(&w, &a0),
                vecdot::vec_dot_q4_0_q8_0(&w, &a0),
            );
            let w = [BlockQ5_0 {
                d: one,
                qh: [wf; 4],
                qs: [wf; 16],
            }; 3];
            eq(
                "q5_0",
                q5_0_q8_0(cpu)(&w, &a0),
                vecdot::vec_dot_q5_0_q8_0(&w, &a0),
            );
            let w = [BlockQ8_0 {
                d: one,
                qs: [wf as i8; 32],
            }; 3];
            eq(
                "q8_0",
                q8_0_q8_0(cpu)(&w, &a0),
                vecdot::vec_dot_q8_0_q8_0(&w, &a0),
            );
            let w = [BlockIq4Nl {
                d: one,
                qs: [wf; 16],
            }; 3];
            eq(
                "iq4_nl",
                iq4_nl_q8_0(cpu)(&w, &a0),
                vecdot::vec_dot_iq4_nl_q8_0(&w, &a0),
            );
            let w = [BlockQ4K {
                d: one,
                dmin: one,
                scales: [wf; 12],
                qs: [wf; 128],
            }; 3];
            eq(
                "q4_k",
                q4_k_q8_k(cpu)(&w, &ak),
                vecdot::vec_dot_q4_k_q8_k(&w, &ak),
            );
            let w = [BlockQ5K {
                d: one,
                dmin: one,
                scales: [wf; 12],
                qh: [wf; 32],
                qs: [wf; 128],
            }; 3];
            eq(
                "q5_k",
                q5_k_q8_k(cpu)(&w, &ak),
                vecdot::vec_dot_q5_k_q8_k(&w, &ak),
            );
            let w = [BlockQ6K {
                ql: [wf; 128],
                qh: [wf; 64],
                scales: [wf as i8; 16],
                d: one,
            }; 3];
            eq(
                "q6_k",
                q6_k_q8_k(cpu)(&w, &ak),
                vecdot::vec_dot_q6_k_q8_k(&w, &ak),
            );
        }
    }
    // The IQ4_NL table as loaded by the kernel: one block per level.
    for (n, &level) in IQ4NL_LEVELS.iter().enumerate() {
        let w = [BlockIq4Nl {
            d: one,
            qs: [(n as u8) * 0x11; 16],
        }];
        let a = [BlockQ8_0 {
            d: one,
            qs: [1; 32],
        }];
        assert_eq!(iq4_nl_q8_0(cpu)(&w, &a), 32.0 * level as f32);
    }
}

#[test]
fn floats() {
    let Some(cpu) = avx2() else { return };
    let f32_simd = f32(cpu);
    let mut rng = Rng::new(3);
    let lens = [0, 1, 7, 8, 9, 31, 32, 33, 64, 96, 100, 160, 512, 4095, 4096];
    for &len in lens
        .iter()
        .chain(COUNTS.iter().map(|n| n * 32).collect::<Vec<_>>().iter())
    {
        let x: Vec<f32> = (0..len).map(|_| 2.0 * rng.unit() - 1.0).collect();
        let y: Vec<f32> = (0..len).map(|_| 2.0 * rng.unit() - 1.0).collect();
        let mag: f64 = x.iter().zip(&y).map(|(a, b)| (a * b).abs() as f64).sum();
        check(
            "f32",
            len,
            f32_simd(&x, &y),
            vecdot::vec_dot_f32(&x, &y),
            mag,
        );
        if len > 0 {
            let m = len - 1;
            check(
                "f32 short",
                len,
                f32_simd(&x[..m], &y),
                vecdot::vec_dot_f32(&x[..m], &y),
                mag,
            );
        }
    }
}

#[test]
fn scalar_cpu_gets_no_token() {
    let token: Option<Avx2> = crate::kernel_api::SetToken::new(&CpuFeatures::scalar());
    assert!(token.is_none());
    let capped = CpuFeatures::get().capped(crate::cpu::KernelSet::Scalar);
    assert!(<Avx2 as crate::kernel_api::SetToken>::new(&capped).is_none());
}
