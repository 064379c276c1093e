//! Every activation quantizer the selection table hands out (for each kernel set this CPU has)
//! writes the same bytes as the portable one, rows and quads, on data with rounding ties,
//! repeated maxima of both signs, zeros, tiny and huge values, NaN and infinities.

use bytemuck::Zeroable;
use qrepack::activation::{
    ActQuantizer, ArmQ8KInterleaved, ArmQ8_0Interleaved, ChooseQuantizer, PlainQ8K, PlainQ8_0,
    PlainQ8_1, Q8KInterleaved, Q8_0Interleaved,
};
use qrepack::cpu::CpuFeatures;
use qrepack::rng::SplitMix64;

/// Rows of 512 values (two Q8_K blocks, 16 Q8_0 blocks), each with a different pathology.
fn rows() -> Vec<Vec<f32>> {
    let mut rng = SplitMix64::new(77);
    let n = 512;
    let mut out: Vec<Vec<f32>> = Vec::new();
    out.push(rng.pm1_vec(n));
    out.push(rng.pm1_vec(n).iter().map(|v| v * 1e4).collect());
    out.push(vec![0.0; n]);
    // Exact rounding ties: multiples of 0.5 with amax 127 (scale 1).
    out.push((0..n).map(|i| ((i % 255) as f32 - 127.0) * 0.5).collect());
    // +amax and -amax in the same block, the negative one first.
    out.push((0..n).map(|i| [-3.0, 3.0, 1.0, 0.25][i % 4]).collect());
    out.push((0..n).map(|i| [3.0, -3.0, 1.0, 0.25][i % 4]).collect());
    // A tiny maximum (subnormal): the inverse scale overflows.
    out.push(
        (0..n)
            .map(|i| if i % 7 == 0 { 1e-40 } else { 0.0 })
            .collect(),
    );
    out.push(rng.pm1_vec(n).iter().map(|v| v * 1e-39).collect());
    // Non-finite values in one block only.
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let mut r = rng.pm1_vec(n);
        r[300] = bad;
        out.push(r);
    }
    out
}

fn check<A: ChooseQuantizer>(what: &str) -> usize {
    let data = rows();
    let cpu = *CpuFeatures::get();
    let scalar = ActQuantizer::<A>::scalar();
    let nb = data[0].len() / A::BLOCK;
    let mut checked = 0;
    for set in cpu.sets() {
        let q = A::quantizer(&cpu.capped(set));
        for (i, x) in data.iter().enumerate() {
            let mut fast = vec![A::Row::zeroed(); nb];
            let mut slow = vec![A::Row::zeroed(); nb];
            (q.row)(x, &mut fast);
            (scalar.row)(x, &mut slow);
            assert_eq!(
                bytemuck::cast_slice::<_, u8>(&fast),
                bytemuck::cast_slice::<_, u8>(&slow),
                "{what} row {i} on {set:?}"
            );
            checked += 1;
        }
        for start in 0..data.len() - 3 {
            let x: [&[f32]; 4] = [0, 1, 2, 3].map(|m| &data[start + m][..]);
            let mut fast = vec![A::Quad::zeroed(); A::quad_len(nb)];
            let mut slow = vec![A::Quad::zeroed(); A::quad_len(nb)];
            (q.quad)(x, &mut fast);
            (scalar.quad)(x, &mut slow);
            assert_eq!(
                bytemuck::cast_slice::<_, u8>(&fast),
                bytemuck::cast_slice::<_, u8>(&slow),
                "{what} quad from row {start} on {set:?}"
            );
            checked += 1;
        }
    }
    checked
}

#[test]
fn every_quantizer_writes_the_portable_bytes() {
    let mut checked = 0;
    checked += check::<PlainQ8_0>("PlainQ8_0");
    checked += check::<PlainQ8_1>("PlainQ8_1");
    checked += check::<PlainQ8K>("PlainQ8K");
    checked += check::<Q8_0Interleaved<8>>("Q8_0Interleaved<8>");
    checked += check::<Q8KInterleaved>("Q8KInterleaved");
    checked += check::<ArmQ8_0Interleaved<4>>("ArmQ8_0Interleaved<4>");
    checked += check::<ArmQ8_0Interleaved<8>>("ArmQ8_0Interleaved<8>");
    checked += check::<ArmQ8KInterleaved<4>>("ArmQ8KInterleaved<4>");
    checked += check::<ArmQ8KInterleaved<8>>("ArmQ8KInterleaved<8>");
    assert!(checked >= 9 * 19, "{checked}");
}
