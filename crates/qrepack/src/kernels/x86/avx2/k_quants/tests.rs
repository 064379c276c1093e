use super::*;
use crate::blocks::{k4_pack_scales, k4_scale_min};
use bytemuck::Zeroable;

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn decoded(w: &BlockQ4Kx8) -> ([[[i16; 16]; 2]; 8], [[i16; 16]; 4]) {
    // SAFETY: callers meet this function's contract: the CPU has the features of the
    // kernel set that calls it, and the slices are as long as the body reads.
    unsafe {
        let sc = imp::block_scales_for_test(w);
        let mut s = [[[0i16; 16]; 2]; 8];
        let mut m = [[0i16; 16]; 4];
        for (sb, halves) in sc.0.iter().enumerate() {
            for (h, v) in halves.iter().enumerate() {
                _mm256_storeu_si256(s[sb][h].as_mut_ptr() as *mut __m256i, *v);
            }
        }
        for (p, v) in sc.1.iter().enumerate() {
            _mm256_storeu_si256(m[p].as_mut_ptr() as *mut __m256i, *v);
        }
        (s, m)
    }
}

/// The vector decoding of all eight sub-blocks against the bytewise definition, for every
/// 6-bit value in every position.
#[test]
fn vector_scale_decoding_matches_the_bytewise_definition() {
    if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("f16c")) {
        return;
    }
    for round in 0..64u32 {
        let mut w = BlockQ4Kx8::zeroed();
        let mut want = [[(0u8, 0u8); 8]; 8];
        for (sb, want_sb) in want.iter_mut().enumerate() {
            let v =
                |j: usize, salt: u32| ((round + 7 * sb as u32 + 13 * j as u32 + salt) % 64) as u8;
            let s: [u8; 8] = std::array::from_fn(|j| v(j, 0));
            let m: [u8; 8] = std::array::from_fn(|j| v(j, 29));
            let q = k4_pack_scales(&s, &m);
            w.scales[sb * 12..sb * 12 + 12].copy_from_slice(&q);
            for (j, slot) in want_sb.iter_mut().enumerate() {
                *slot = k4_scale_min(&q, j);
            }
        }
        // SAFETY: AVX2 and F16C were detected above.
        let (s, m) = unsafe { decoded(&w) };
        for sb in 0..8 {
            for j in 0..8 {
                let (scale, min) = want[sb][j];
                for lane in 0..4 {
                    assert_eq!(
                        s[sb][j / 4][4 * (j % 4) + lane],
                        scale as i16,
                        "sb {sb} row {j}"
                    );
                }
                assert_eq!(m[sb / 2][2 * j + sb % 2], min as i16, "sb {sb} row {j}");
            }
        }
    }
}
