//! The kernels of this module against the portable `vec_dot`s and the exact product
//! (`crate::kernels::row_tests`, where the tolerance is derived), on random blocks (every quant
//! bit pattern, `-128` activations included), and on blocks at the edge of the integer ranges.

use super::*;
use crate::blocks::F16Bits;
use crate::cpu::CpuFeatures;
use crate::kernel_api::SetToken;
use crate::kernels::row_tests::{
    compare_matmul_on, compare_rows, q8_0_values, q8_0s_values, q8_k_values, random, random_mxfp4,
    random_q1_0, random_q2_0, random_q8_0, random_q8_0s, random_q8_k, random_tq1_0, random_tq2_0,
};
use crate::rng::SplitMix64 as Rng;
use crate::types::GgmlType;
use crate::vecdot;

fn neon() -> Neon {
    Neon::new(CpuFeatures::get()).expect("every AArch64 CPU has NEON")
}

/// NVFP4 blocks with every scale byte (zero, subnormal, `0x7f` and the ignored top bit
/// included) and every quant code.
fn random_nvfp4(rng: &mut Rng) -> BlockNvfp4 {
    random(rng)
}

#[test]
fn mxfp4_equals_portable_and_exact() {
    compare_rows(
        GgmlType::MXFP4,
        1,
        mxfp4_rows(neon()),
        vecdot::vec_dot_mxfp4_q8_0,
        random_mxfp4,
        random_q8_0,
        q8_0_values,
    );
    compare_matmul_on(KernelSet::Neon, GgmlType::MXFP4, 1, random_mxfp4);
}

#[test]
fn nvfp4_equals_portable_and_exact() {
    compare_rows(
        GgmlType::NVFP4,
        4,
        nvfp4_rows(neon()),
        vecdot::vec_dot_nvfp4_q8_0,
        random_nvfp4,
        random_q8_0s::<2>,
        q8_0s_values::<2>,
    );
    compare_matmul_on(KernelSet::Neon, GgmlType::NVFP4, 4, random_nvfp4);
}

#[test]
fn q1_0_and_q2_0_equal_portable_and_exact() {
    compare_rows(
        GgmlType::Q1_0,
        4,
        q1_0_rows(neon()),
        vecdot::vec_dot_q1_0_q8_0,
        random_q1_0,
        random_q8_0s::<4>,
        q8_0s_values::<4>,
    );
    compare_matmul_on(KernelSet::Neon, GgmlType::Q1_0, 4, random_q1_0);
    compare_rows(
        GgmlType::Q2_0,
        2,
        q2_0_rows(neon()),
        vecdot::vec_dot_q2_0_q8_0,
        random_q2_0,
        random_q8_0s::<2>,
        q8_0s_values::<2>,
    );
    compare_matmul_on(KernelSet::Neon, GgmlType::Q2_0, 2, random_q2_0);
}

#[test]
fn ternary_types_equal_portable_and_exact() {
    compare_rows(
        GgmlType::TQ2_0,
        1,
        tq2_0_rows(neon()),
        vecdot::vec_dot_tq2_0_q8_k,
        random_tq2_0,
        random_q8_k,
        q8_k_values,
    );
    compare_matmul_on(KernelSet::Neon, GgmlType::TQ2_0, 1, random_tq2_0);
    compare_rows(
        GgmlType::TQ1_0,
        1,
        tq1_0_rows(neon()),
        vecdot::vec_dot_tq1_0_q8_k,
        random_tq1_0,
        random_q8_k,
        q8_k_values,
    );
    compare_matmul_on(KernelSet::Neon, GgmlType::TQ1_0, 1, random_tq1_0);
}

/// The extreme quants of every type against `-128`, every NVFP4 scale byte, and each TQ1_0
/// digit value in every position: exact products whose value follows from the encoding.
#[test]
fn lowbit_extremes_are_exact() {
    let cpu = neon();
    let one = F16Bits::from_f32(1.0);
    let a8 = BlockQ8_0 {
        d: one,
        qs: [-128; 32],
    };
    let mut out = [0.0f32; 1];
    for (code, value) in [(0x77u8, 12.0f32), (0xff, -12.0)] {
        // e = 127: the halved scale 2^-1 times the doubled values.
        let w = BlockMxfp4 {
            e: 127,
            qs: [code; 16],
        };
        (mxfp4_rows(cpu).gemv)(&[w], &[a8], &mut out);
        assert_eq!(out[0], 32.0 * 0.5 * value * -128.0, "MXFP4 code {code:#x}");
    }
    for byte in 0..=255u8 {
        // Scale group 1 only (the odd group of the first Q8_0 block), every quant 12.
        let w = BlockNvfp4 {
            d: [0, byte, 0, 0],
            qs: [0x77; 32],
        };
        let want = 16.0 * crate::blocks::ue4m3_half_to_f32(byte) * 12.0 * -128.0;
        (nvfp4_rows(cpu).gemv)(&[w], &[[a8; 2]], &mut out);
        assert_eq!(out[0], want, "NVFP4 scale byte {byte:#04x}");
    }
    for (bits, sign) in [(0x00u8, -1.0f32), (0xff, 1.0)] {
        let w = BlockQ1_0 {
            d: one,
            qs: [bits; 16],
        };
        (q1_0_rows(cpu).gemv)(&[w], &[[a8; 4]], &mut out);
        assert_eq!(out[0], 128.0 * sign * -128.0);
    }
    for (bits, q) in [(0x00u8, -1.0f32), (0xff, 2.0)] {
        let w = BlockQ2_0 {
            d: one,
            qs: [bits; 16],
        };
        (q2_0_rows(cpu).gemv)(&[w], &[[a8; 2]], &mut out);
        assert_eq!(out[0], 64.0 * q * -128.0);
    }
    let ak = BlockQ8K {
        d: 1.0,
        qs: [-128; 256],
        bsums: [-128 * 16; 16],
    };
    let w = BlockTq2_0 {
        qs: [0xff; 64],
        d: one,
    };
    (tq2_0_rows(cpu).gemv)(&[w], &[ak], &mut out);
    assert_eq!(out[0], 256.0 * 2.0 * -128.0);
    // TQ1_0: byte 0 is every digit 0 (weight -1), byte 0xff every digit 2 (weight 1).
    for (byte, weight) in [(0u8, -1.0f32), (0xff, 1.0)] {
        let w = BlockTq1_0 {
            qs: [byte; 48],
            qh: [byte; 4],
            d: one,
        };
        (tq1_0_rows(cpu).gemv)(&[w], &[ak], &mut out);
        assert_eq!(out[0], 256.0 * weight * -128.0, "TQ1_0 byte {byte:#x}");
    }
}

/// One activation at a time against every TQ1_0 byte value: each weight position reads the
/// digit the portable decoder reads.
#[test]
fn tq1_0_reads_every_digit_in_place() {
    let cpu = neon();
    let mut rng = Rng::new(10);
    let w: Vec<BlockTq1_0> = (0..=255u8)
        .map(|b| BlockTq1_0 {
            qs: [b; 48],
            qh: [b.wrapping_add(17); 4],
            d: F16Bits::from_f32(1.0),
        })
        .collect();
    for pos in [0, 31, 32, 159, 160, 175, 239, 240, 243, 255] {
        let mut a = BlockQ8K {
            d: 1.0,
            qs: [0; 256],
            bsums: [0; 16],
        };
        a.qs[pos] = if rng.next_u64() & 1 == 1 { -128 } else { 127 };
        a.bsums[pos / 16] = i16::from(a.qs[pos]);
        let mut out = vec![0.0f32; w.len()];
        (tq1_0_rows(cpu).gemv)(&w, &[a], &mut out);
        for (r, &o) in out.iter().enumerate() {
            let want = vecdot::vec_dot_tq1_0_q8_k(&w[r..r + 1], &[a]);
            assert_eq!(o, want, "byte {r} position {pos}");
        }
    }
}

/// The dotprod rows (the same bodies with `sdot`), where the CPU has the set.
#[test]
fn sdot_rows_equal_portable_and_exact() {
    let Some(cpu) = crate::kernels::aarch64::Dotprod::new(CpuFeatures::get()) else {
        return;
    };
    compare_rows(
        GgmlType::MXFP4,
        1,
        sdot::mxfp4_rows(cpu),
        vecdot::vec_dot_mxfp4_q8_0,
        random_mxfp4,
        random_q8_0,
        q8_0_values,
    );
    compare_rows(
        GgmlType::NVFP4,
        4,
        sdot::nvfp4_rows(cpu),
        vecdot::vec_dot_nvfp4_q8_0,
        random_nvfp4,
        random_q8_0s::<2>,
        q8_0s_values::<2>,
    );
    compare_rows(
        GgmlType::Q1_0,
        4,
        sdot::q1_0_rows(cpu),
        vecdot::vec_dot_q1_0_q8_0,
        random_q1_0,
        random_q8_0s::<4>,
        q8_0s_values::<4>,
    );
    compare_rows(
        GgmlType::Q2_0,
        2,
        sdot::q2_0_rows(cpu),
        vecdot::vec_dot_q2_0_q8_0,
        random_q2_0,
        random_q8_0s::<2>,
        q8_0s_values::<2>,
    );
    compare_rows(
        GgmlType::TQ1_0,
        1,
        sdot::tq1_0_rows(cpu),
        vecdot::vec_dot_tq1_0_q8_k,
        random_tq1_0,
        random_q8_k,
        q8_k_values,
    );
    compare_rows(
        GgmlType::TQ2_0,
        1,
        sdot::tq2_0_rows(cpu),
        vecdot::vec_dot_tq2_0_q8_k,
        random_tq2_0,
        random_q8_k,
        q8_k_values,
    );
    compare_matmul_on(KernelSet::Dotprod, GgmlType::MXFP4, 1, random_mxfp4);
    compare_matmul_on(KernelSet::Dotprod, GgmlType::NVFP4, 4, random_nvfp4);
    compare_matmul_on(KernelSet::Dotprod, GgmlType::Q1_0, 4, random_q1_0);
    compare_matmul_on(KernelSet::Dotprod, GgmlType::Q2_0, 2, random_q2_0);
    compare_matmul_on(KernelSet::Dotprod, GgmlType::TQ1_0, 1, random_tq1_0);
    compare_matmul_on(KernelSet::Dotprod, GgmlType::TQ2_0, 1, random_tq2_0);
    // The largest products against -128.
    let a8 = BlockQ8_0 {
        d: F16Bits::from_f32(1.0),
        qs: [-128; 32],
    };
    let w = BlockMxfp4 {
        e: 127,
        qs: [0xff; 16],
    };
    let mut out = [0.0f32; 1];
    (sdot::mxfp4_rows(cpu).gemv)(&[w], &[a8], &mut out);
    assert_eq!(out[0], 32.0 * 0.5 * -12.0 * -128.0);
}
