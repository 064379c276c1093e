use super::*;

fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

#[test]
fn q8_0_block_bounds_and_scale() {
    let x = data(32, 1);
    let b = quantize_block_q8_0(&x);
    let m = amax(&x);
    assert_eq!(b.d, F16Bits::from_f32(m / 127.0));
    let imax = x.iter().position(|v| v.abs() == m).unwrap();
    assert_eq!(b.qs[imax].unsigned_abs(), 127);
    for (q, v) in b.qs.iter().zip(&x) {
        assert!((*q as f32 - v * 127.0 / m).abs() <= 0.5 + 1e-4);
    }
}

#[test]
fn summed_quads_are_ggml_quads_with_scaled_sums() {
    // Rows of different magnitudes and signs, so sums are large, small and negative.
    let x: Vec<f32> = data(4 * 256, 11)
        .iter()
        .enumerate()
        .map(|(i, v)| v * [1.0, -3.0, 1e-3, 40.0][i / 256] + if i < 256 { 0.6 } else { 0.0 })
        .collect();
    let rows: [&[f32]; 4] = [0, 1, 2, 3].map(|m| &x[m * 256..(m + 1) * 256]);
    let mut plain = vec![BlockQ8_0x4::zeroed(); 8];
    Q8_0Interleaved::<8>::quantize_quad(rows, &mut plain);
    let mut by8 = vec![BlockQ8_0x4Sums::zeroed(); 8];
    Q8_0SumsInterleaved::<8>::quantize_quad(rows, &mut by8);
    let mut by16 = vec![BlockQ8_0x4Sums::zeroed(); 8];
    Q8_0SumsInterleaved::<16>::quantize_quad(rows, &mut by16);
    let mut signs = [false; 2];
    for ((p, a), b) in plain.iter().zip(&by8).zip(&by16) {
        assert_eq!((a.qs, b.qs), (p.qs, p.qs));
        for (m, row) in Q8_0Interleaved::<8>::split_quad(p).iter().enumerate() {
            let sum: i32 = row.qs.iter().map(|&q| q as i32).sum();
            assert_eq!((a.offsets[m], b.offsets[m]), (8 * sum, 16 * sum));
            assert_eq!((a.d[m], b.d[m]), (row.d.to_f32(), row.d.to_f32()));
            signs[usize::from(sum < 0)] = true;
        }
        assert_eq!(
            Q8_0SumsInterleaved::<8>::split_quad(a),
            Q8_0Interleaved::<8>::split_quad(p)
        );
    }
    assert_eq!(signs, [true, true], "both signs of sums were exercised");
}

#[test]
fn q8_k_bsums_are_group_sums_and_quad_matches_rows() {
    let x = data(4 * 512, 7);
    let rows: [&[f32]; 4] = [&x[0..512], &x[512..1024], &x[1024..1536], &x[1536..2048]];
    let mut quads = vec![BlockQ8Kx4::zeroed(); 2];
    Q8KInterleaved::quantize_quad(rows, &mut quads);
    for (m, row) in rows.iter().enumerate() {
        let mut single = vec![BlockQ8K::zeroed(); 2];
        Q8KInterleaved::quantize_row(row, &mut single);
        for (i, b) in single.iter().enumerate() {
            assert_eq!(quads[i].d[m], b.d);
            for g in 0..16 {
                let s: i16 = b.qs[g * 16..g * 16 + 16].iter().map(|&q| q as i16).sum();
                assert_eq!(b.bsums[g], s);
                assert_eq!(quads[i].bsums[(g / 4) * 16 + m * 4 + g % 4], s);
            }
            for j in 0..256 {
                assert_eq!(quads[i].qs[(j / 8) * 32 + m * 8 + j % 8], b.qs[j]);
            }
        }
    }
}

#[test]
fn rounding_is_half_to_even_and_saturating() {
    for (v, q) in [
        (0.5f32, 0i8),
        (1.5, 2),
        (2.5, 2),
        (-0.5, 0),
        (-1.5, -2),
        (126.5, 126),
        (127.4, 127),
    ] {
        assert_eq!(to_i8_saturating(v), q, "{v}");
    }
    assert_eq!(to_i8_saturating(1e9), 127);
    assert_eq!(to_i8_saturating(-1e9), -128);
    assert_eq!(to_i8_saturating(f32::NAN), 0);
    for i in -2000..2000 {
        let v = i as f32 * 0.0637;
        assert_eq!(
            to_i8_saturating(v),
            v.round_ties_even().clamp(-128.0, 127.0) as i8
        );
    }
}

#[test]
fn zero_rows_quantize_to_zero() {
    let x = [0.0f32; 256];
    let b = quantize_block_q8_k(&x);
    assert_eq!(b.d, 0.0);
    assert!(b.qs.iter().all(|&q| q == 0));
    let b0 = quantize_block_q8_0(&x[..32]);
    assert_eq!(b0.d.to_f32(), 0.0);
}
