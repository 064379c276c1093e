use bytemuck::Zeroable;

use crate::activation::{
    ActFormat, ChooseQuantizer, PlainQ8K, PlainQ8_0, PlainQ8_1, Q8KInterleaved, Q8_0AbsInterleaved,
    Q8_0Interleaved, Q8_0SumsInterleaved,
};
use crate::cpu::CpuFeatures;
// The Q8_1 quads of the `q4_1_8x8` layout.
use crate::layout::q4_1::Q8_1Interleaved as Q8_1x4;

/// The CPU, when it can run the AVX2 quantizers (the tests pass vacuously otherwise).
fn avx2_cpu() -> Option<&'static CpuFeatures> {
    let cpu = CpuFeatures::get();
    cpu.has(crate::cpu::KernelSet::Avx2).then_some(cpu)
}

use crate::rng::SplitMix64;

fn first_difference(want: &[u8], got: &[u8]) -> Option<usize> {
    want.iter().zip(got).position(|(a, b)| a != b)
}

/// Both quantizers of `A` against its portable ones on four rows, byte for byte.
fn check_format<A: ChooseQuantizer>(cpu: &CpuFeatures, rows: [&[f32]; 4], what: &str)
where
    A::Row: std::fmt::Debug,
    A::Quad: std::fmt::Debug,
{
    let q = A::quantizer(cpu);
    let name = std::any::type_name::<A>();
    let nb = rows[0].len() / A::BLOCK;
    for (r, row) in rows.iter().enumerate() {
        let mut want = vec![A::Row::zeroed(); nb];
        let mut got = vec![A::Row::zeroed(); nb];
        A::quantize_row(row, &mut want);
        (q.row)(row, &mut got);
        let (w, g) = (bytemuck::cast_slice(&want), bytemuck::cast_slice(&got));
        if let Some(at) = first_difference(w, g) {
            let blk = at / std::mem::size_of::<A::Row>();
            panic!(
                "{name} row {r} ({what}): byte {at} (block {blk}) differs\n\
                 want {:?}\n got {:?}\n input {:?}",
                want[blk],
                got[blk],
                &row[blk * A::BLOCK..(blk + 1) * A::BLOCK]
            );
        }
    }
    let mut want = vec![A::Quad::zeroed(); A::quad_len(nb)];
    let mut got = vec![A::Quad::zeroed(); A::quad_len(nb)];
    A::quantize_quad(rows, &mut want);
    (q.quad)(rows, &mut got);
    let (w, g) = (bytemuck::cast_slice(&want), bytemuck::cast_slice(&got));
    if let Some(at) = first_difference(w, g) {
        let blk = at / std::mem::size_of::<A::Quad>();
        panic!(
            "{name} quad ({what}): byte {at} (quad item {blk}) differs\nwant {:?}\n got {:?}",
            want[blk], got[blk]
        );
    }
}

/// Every format with an AVX2 quantizer, on four rows of equal length.
fn check_all(cpu: &CpuFeatures, rows: [&[f32]; 4], what: &str) {
    check_format::<Q8_0Interleaved<4>>(cpu, rows, what);
    check_format::<Q8_0Interleaved<8>>(cpu, rows, what);
    check_format::<Q8_0SumsInterleaved<8>>(cpu, rows, what);
    check_format::<Q8_0SumsInterleaved<128>>(cpu, rows, what);
    check_format::<Q8_0AbsInterleaved>(cpu, rows, what);
    check_format::<PlainQ8_0>(cpu, rows, what);
    check_format::<PlainQ8_1>(cpu, rows, what);
    check_format::<Q8_1x4>(cpu, rows, what);
    check_format::<Q8KInterleaved>(cpu, rows, what);
    check_format::<PlainQ8K>(cpu, rows, what);
}

/// `data` (length `4 * len`) as four rows.
fn quad_rows(data: &[f32]) -> [&[f32]; 4] {
    let len = data.len() / 4;
    [0, 1, 2, 3].map(|m| &data[m * len..(m + 1) * len])
}

#[test]
fn avx2_quantizers_are_selected_only_with_avx2() {
    fn differs<A: ChooseQuantizer>(cpu: &CpuFeatures) -> bool {
        let q = A::quantizer(cpu);
        q.row as *const () != A::quantize_row as *const ()
            && q.quad as *const () != A::quantize_quad as *const ()
    }
    let scalar = CpuFeatures::scalar();
    assert!(!differs::<Q8_0Interleaved<4>>(&scalar));
    assert!(!differs::<Q8_0SumsInterleaved<8>>(&scalar));
    assert!(!differs::<Q8KInterleaved>(&scalar));
    assert!(!differs::<PlainQ8_1>(&scalar));
    let Some(cpu) = avx2_cpu() else { return };
    assert!(differs::<Q8_0Interleaved<4>>(cpu));
    assert!(differs::<Q8_0Interleaved<8>>(cpu));
    assert!(differs::<Q8_0SumsInterleaved<8>>(cpu));
    assert!(differs::<Q8_0AbsInterleaved>(cpu));
    assert!(differs::<PlainQ8_0>(cpu));
    assert!(differs::<PlainQ8_1>(cpu));
    assert!(differs::<Q8_1x4>(cpu));
    assert!(differs::<Q8KInterleaved>(cpu));
    assert!(differs::<PlainQ8K>(cpu));
}

#[test]
fn avx2_activation_random_rows_match_scalar() {
    let Some(cpu) = avx2_cpu() else { return };
    for seed in 0..4u64 {
        for scale in [1e-3f32, 1.0, 1e3, 1e30, 1e-30] {
            for len in [32usize, 64, 96, 128, 160, 256, 512, 4096, 4096 + 32] {
                let mut g = SplitMix64::new(seed * 1000 + len as u64);
                let data: Vec<f32> = (0..4 * len).map(|_| g.uniform_pm1() * scale).collect();
                check_all(
                    cpu,
                    quad_rows(&data),
                    &format!("seed {seed} scale {scale} len {len}"),
                );
            }
        }
    }
}

/// Blocks of one kind of value, in a row of 512 values (two Q8_K blocks, sixteen Q8_0 ones)
/// whose other blocks are ordinary, so that the vector path and the fallback meet in one
/// quad and one group of four row blocks.
fn check_block_kinds(cpu: &CpuFeatures, kinds: &[(&str, Vec<f32>)]) {
    for (what, block) in kinds {
        let n = block.len();
        assert!(n == 32 || n == 256);
        for placement in 0..4 {
            let mut g = SplitMix64::new(placement as u64 + 77);
            let mut data: Vec<f32> = (0..4 * 512).map(|_| g.uniform_pm1()).collect();
            // Which rows and which block positions get the special block.
            for m in 0..4 {
                if placement == 0 && m != 2 {
                    continue;
                }
                let starts: &[usize] = match (n, placement) {
                    (256, 3) => &[0, 256],
                    (256, _) => &[256 * (m % 2)],
                    (_, 3) => &[0, 32, 64, 96, 128, 256, 480],
                    _ => &[32 * ((m + placement) % 16), 256],
                };
                for &s in starts {
                    data[m * 512 + s..m * 512 + s + n].copy_from_slice(block);
                }
            }
            check_all(
                cpu,
                quad_rows(&data),
                &format!("{what}, placement {placement}"),
            );
        }
    }
}

/// A block of `n` values: `f(i)` for each index.
fn blk(n: usize, f: impl Fn(usize) -> f32) -> Vec<f32> {
    (0..n).map(f).collect()
}

#[test]
fn avx2_activation_special_blocks_match_scalar() {
    let Some(cpu) = avx2_cpu() else { return };
    let tiny = f32::from_bits(1); // smallest subnormal
    let mut kinds: Vec<(&str, Vec<f32>)> = Vec::new();
    for n in [32usize, 256] {
        kinds.extend([
            ("zeros", vec![0.0; n]),
            ("negative zeros", vec![-0.0; n]),
            (
                "mixed zeros",
                blk(n, |i| if i % 3 == 0 { -0.0 } else { 0.0 }),
            ),
            ("one value", blk(n, |i| if i == n / 2 { 3.5 } else { 0.0 })),
            (
                "one negative value",
                blk(n, |i| if i == 5 { -3.5 } else { -0.0 }),
            ),
            (
                "one huge value",
                blk(n, |i| if i == 7 { 1e30 } else { (i as f32).sin() }),
            ),
            ("f32::MAX", blk(n, |i| if i == 3 { f32::MAX } else { 1.0 })),
            (
                "-f32::MAX",
                blk(n, |i| if i == 9 { -f32::MAX } else { -1e37 }),
            ),
            (
                "all f32::MAX",
                blk(n, |i| if i % 2 == 0 { f32::MAX } else { -f32::MAX }),
            ),
            ("subnormals", blk(n, |i| tiny * (i as f32 - 7.0))),
            (
                "subnormal max",
                blk(n, |i| if i == 1 { 1e-39 } else { 0.0 }),
            ),
            (
                "subnormals with a normal",
                blk(n, |i| if i == 4 { 1.0 } else { tiny * i as f32 }),
            ),
            (
                "min positive",
                blk(n, |i| if i == 2 { f32::MIN_POSITIVE } else { 0.0 }),
            ),
            (
                "below 127/MAX",
                blk(n, |i| 3.0e-37 * ((i % 5) as f32 - 2.0) / 2.0),
            ),
            (
                "near 127/MAX",
                blk(n, |i| if i == 0 { 127.0 / f32::MAX } else { 1e-38 }),
            ),
            (
                "just above 127/MAX",
                blk(n, |i| if i == 0 { 3.8e-37 } else { -1e-37 }),
            ),
            ("tiny normals", blk(n, |i| 1e-30 * (i as f32 + 0.25))),
            ("constant", vec![0.7; n]),
            ("negative constant", vec![-0.7; n]),
        ]);
    }
    check_block_kinds(cpu, &kinds);
}

#[test]
fn avx2_activation_non_finite_match_scalar() {
    let Some(cpu) = avx2_cpu() else { return };
    let mut kinds: Vec<(&str, Vec<f32>)> = Vec::new();
    let negative_nan = f32::from_bits(0xffc0_0001);
    let signalling_nan = f32::from_bits(0x7f80_0001);
    for n in [32usize, 256] {
        for at in [0, 1, 7, 8, 15, 16, 31, n - 1] {
            kinds.extend([
                ("NaN", blk(n, |i| if i == at { f32::NAN } else { i as f32 })),
                ("-NaN", blk(n, |i| if i == at { negative_nan } else { 0.5 })),
                (
                    "sNaN",
                    blk(n, |i| if i == at { signalling_nan } else { -0.5 }),
                ),
                (
                    "+inf",
                    blk(n, |i| if i == at { f32::INFINITY } else { i as f32 }),
                ),
                (
                    "-inf",
                    blk(n, |i| if i == at { f32::NEG_INFINITY } else { 2.0 }),
                ),
                (
                    "inf in zeros",
                    blk(n, |i| if i == at { f32::INFINITY } else { 0.0 }),
                ),
                (
                    "NaN in zeros",
                    blk(n, |i| if i == at { f32::NAN } else { -0.0 }),
                ),
            ]);
        }
        kinds.extend([
            (
                "NaN and inf",
                blk(n, |i| [f32::NAN, f32::INFINITY, 1.0][i % 3]),
            ),
            (
                "inf and -inf",
                blk(n, |i| [f32::NEG_INFINITY, 3.0, f32::INFINITY][i % 3]),
            ),
            ("all NaN", vec![f32::NAN; n]),
            ("all -inf", vec![f32::NEG_INFINITY; n]),
        ]);
    }
    check_block_kinds(cpu, &kinds);
}

#[test]
fn avx2_activation_ties_and_saturation_match_scalar() {
    let Some(cpu) = avx2_cpu() else { return };
    let mut kinds: Vec<(&str, Vec<f32>)> = Vec::new();
    for n in [32usize, 256] {
        for e in [-20i32, -3, 0, 5, 40] {
            let p = 2f32.powi(e);
            // amax = 127 * 2^e: the Q8_0 inverse scale is exactly 2^-e, and every k + 0.5
            // lands exactly on a tie after scaling.
            kinds.push((
                "Q8_0 ties",
                blk(n, |i| match i {
                    0 => 127.0 * p,
                    1 => -127.0 * p,
                    _ => ((i as f32 * 37.0) % 254.0 - 127.0 + 0.5) * p,
                }),
            ));
            // max = -127 * 2^e first: the Q8_K inverse scale is exactly 2^-e (positive).
            kinds.push((
                "Q8_K ties (negative max)",
                blk(n, |i| match i {
                    0 => -127.0 * p,
                    _ => ((i as f32 * 29.0) % 253.0 - 126.5) * p,
                }),
            ));
            kinds.push((
                "+-amax both, positive first",
                blk(n, |i| match i % 97 {
                    3 => 127.0 * p,
                    50 => -127.0 * p,
                    _ => ((i % 17) as f32 - 8.5) * p,
                }),
            ));
            kinds.push((
                "+-amax both, negative first",
                blk(n, |i| match i % 97 {
                    3 => -127.0 * p,
                    50 => 127.0 * p,
                    _ => ((i % 17) as f32 - 8.5) * p,
                }),
            ));
        }
        kinds.extend([
            (
                "alternating +-1",
                blk(n, |i| if i % 2 == 0 { 1.0 } else { -1.0 }),
            ),
            ("near amax", blk(n, |i| 1.0 - (i % 4) as f32 * f32::EPSILON)),
            (
                "near -amax",
                blk(n, |i| -1.0 + (i % 4) as f32 * f32::EPSILON / 2.0),
            ),
            ("half steps", blk(n, |i| (i as f32 - n as f32 / 2.0) * 0.5)),
            // amax = 3: 127/3 is inexact, so products near k + 0.5 round on either side.
            (
                "thirds",
                blk(n, |i| {
                    if i == 0 {
                        3.0
                    } else {
                        ((i % 255) as f32 - 127.0) * 3.0 / 254.0
                    }
                }),
            ),
        ]);
    }
    check_block_kinds(cpu, &kinds);
    // Every amax whose scaled values pass near ties: many scales, exhaustive over a pattern.
    let mut g = SplitMix64::new(5);
    for _ in 0..300 {
        let amax = (g.uniform_pm1().abs() + 0.01) * 2f32.powi(g.below(60) as i32 - 30);
        let mut data = Vec::with_capacity(4 * 256);
        for _ in 0..4 * 256 {
            let k = g.below(255) as f32 - 127.0;
            data.push((k + 0.5) / 127.0 * amax * if g.below(2) == 0 { 1.0 } else { -1.0 });
        }
        data[0] = amax;
        data[300] = -amax;
        check_all(cpu, quad_rows(&data), &format!("ties around amax {amax}"));
    }
}

/// Random rows salted with every kind of special value.
#[test]
fn avx2_activation_salted_random_rows_match_scalar() {
    let Some(cpu) = avx2_cpu() else { return };
    let specials = [
        0.0,
        -0.0,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MAX,
        -f32::MAX,
        f32::MIN_POSITIVE,
        f32::from_bits(1),
        -f32::from_bits(0x007f_ffff),
        1.0,
        -1.0,
        0.5,
    ];
    let mut g = SplitMix64::new(99);
    for round in 0..400 {
        let len = [256usize, 512, 1024][round % 3];
        let scale = 2f32.powi(g.below(200) as i32 - 100);
        // Most rounds salt sparsely, so that most blocks stay on the vector path.
        let rate = [2000usize, 300, 30, 3][round % 4];
        let data: Vec<f32> = (0..4 * len)
            .map(|_| {
                if g.below(rate) == 0 {
                    specials[g.below(specials.len())]
                } else if g.below(50) == 0 {
                    0.0
                } else {
                    g.uniform_pm1() * scale
                }
            })
            .collect();
        check_all(cpu, quad_rows(&data), &format!("salted round {round}"));
    }
}

/// Rows shorter or longer than the output, as the driver's tail rows may be.
#[test]
fn avx2_activation_row_lengths_match_scalar() {
    let Some(cpu) = avx2_cpu() else { return };
    let mut g = SplitMix64::new(3);
    let x: Vec<f32> = (0..4096 + 32 * 7).map(|_| g.uniform_pm1()).collect();
    let q = <Q8_0Interleaved<4> as ChooseQuantizer>::quantizer(cpu);
    let qk = <Q8KInterleaved as ChooseQuantizer>::quantizer(cpu);
    for (xl, nb) in [
        (4096 + 224, 128),
        (4096, 129),
        (4096 + 224, 135),
        (40, 3),
        (0, 2),
    ] {
        let x = &x[..xl];
        let mut want = vec![crate::blocks::BlockQ8_0::zeroed(); nb];
        let mut got = want.clone();
        <Q8_0Interleaved<4> as ActFormat>::quantize_row(x, &mut want);
        (q.row)(x, &mut got);
        assert_eq!(want, got, "Q8_0 {xl} values into {nb} blocks");
        let nbk = nb / 8;
        let mut want = vec![crate::blocks::BlockQ8K::zeroed(); nbk];
        let mut got = want.clone();
        <Q8KInterleaved as ActFormat>::quantize_row(x, &mut want);
        (qk.row)(x, &mut got);
        assert_eq!(
            bytemuck::cast_slice::<_, u8>(&want),
            bytemuck::cast_slice::<_, u8>(&got),
            "Q8_K {xl} values into {nbk} blocks"
        );
    }
}
