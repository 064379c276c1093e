//! `q4_K_8x8` GEMM with 256-bit SVE. The block's quants are 4 pairs of 256 bytes (bytes
//! `32p..32p + 32` of every row: the low nibbles sub-block `2p`, the high ones `2p + 1`), each 4
//! quarters of 64 bytes (bytes `8k..8k + 8` of rows 0..8), so quarter vector `g` (32 bytes)
//! holds rows `4g..4g + 4`, two per 128-bit segment, as the quants of `q4_0_8x8`. The activation
//! quad interleaves its rows by 8: `ld1rqb` repeats the 16 bytes of rows `2p', 2p' + 1` at the
//! same 8 weights in both segments, and `smmla` adds a 2x2 tile per segment (lane `4s + 2i + j`
//! of accumulator `(g, p')`: weight row `4g + 2s + i`, activation row `2p' + j`).
//!
//! The `asm!` block gives, per block column and quad, the 32 sums `Σ_sb sc_sb · Σ q · a` in
//! exact integers (the 6-bit scales decoded before it, with NEON); the f32 scales and the mins
//! are the i8mm kernels' ([`scale_quad`]).

use std::arch::aarch64::*;

use crate::blocks::{BlockQ4Kx8, BlockQ8Kx4};
use crate::kernels::aarch64::dotprod::k_quants::scale_quad;
use crate::kernels::aarch64::kx8::{widen, KBlock};
use crate::kernels::aarch64::target_entries;

target_entries! {
    "neon,dotprod,i8mm,sve";
    fn gemm_entry(w: &[BlockQ4Kx8], a: &[BlockQ8Kx4], out: &mut [f32]) => gemm_body;
}

/// One 8-row group (`w.len()` blocks) times one activation quad: 32 outputs, activation row
/// major.
pub(crate) fn gemm(w: &[BlockQ4Kx8], a: &[BlockQ8Kx4], out: &mut [f32]) {
    gemm_entry(w, a, out)
}

/// # Safety
/// The CPU must have SVE with 32-byte vectors and i8mm, and the caller must be compiled with
/// both.
#[inline(always)]
unsafe fn gemm_body(w: &[BlockQ4Kx8], a: &[BlockQ8Kx4], out: &mut [f32]) {
    let out: &mut [f32; 32] = (&mut out[..32]).try_into().expect("32 outputs");
    // SAFETY: the features are the caller's contract; the NEON loads and stores are of arrays
    // of the right length, and the asm block's accesses are stated at the block.
    unsafe {
        let mut acc = [[vdupq_n_f32(0.0); 2]; 4];
        for (b, q) in w.iter().zip(a) {
            // The 8 rows' scales of sub-block sb at 8 sb.
            let mut sc = [0i32; 64];
            for (sb, s) in sc.chunks_exact_mut(8).enumerate() {
                let [lo, hi] = widen(b.scales(2 * sb).0);
                vst1q_s32(s.as_mut_ptr(), lo);
                vst1q_s32(s[4..].as_mut_ptr(), hi);
            }
            let mut sums = [0i32; 32];
            block_sums(b, q, &sc, &mut sums);
            let sumi: [[int32x4_t; 2]; 4] = std::array::from_fn(|m| {
                [
                    vld1q_s32(sums[8 * m..].as_ptr()),
                    vld1q_s32(sums[8 * m + 4..].as_ptr()),
                ]
            });
            scale_quad(b, q, &sumi, &mut acc);
        }
        for (o, v) in out.chunks_exact_mut(4).zip(acc.iter().flatten()) {
            vst1q_f32(o.as_mut_ptr(), *v);
        }
    }
}

/// `sums[8m + r] = Σ_sb sc[8 sb + r] · Σ_e q_r[32 sb + e] · a_m[32 sb + e]` for one block column
/// `b` and quad `q` (`q_r` the unsigned nibbles of row `r`).
///
/// # Safety
/// The CPU must have SVE with 32-byte vectors and i8mm, and the caller must be compiled with
/// both.
#[inline(always)]
unsafe fn block_sums(b: &BlockQ4Kx8, q: &BlockQ8Kx4, sc: &[i32; 64], sums: &mut [i32; 32]) {
    // SAFETY: each of the 4 pair iterations reads 256 bytes of `b.qs` (8 vectors of 32 bytes),
    // 256 bytes of `q.qs` (sixteen 16-byte pieces, through `{al}` and `{ah}` = `{al}` + 128) and
    // 64 bytes of `sc`; the pointers advance by those amounts, so the 4 iterations stay within
    // the 1024-byte arrays and `sc`. The stores write the 128 bytes of `sums`. The vector length
    // is 32 bytes (the set's contract). Only the declared registers change.
    unsafe {
        core::arch::asm!(
            "ptrue p0.b",
            "mov z24.s, #0",
            "mov z25.s, #0",
            "mov z26.s, #0",
            "mov z27.s, #0",
            "mov {n}, #4",
            "2:",
            "add {ah}, {al}, #128",
            "mov z16.s, #0",
            "mov z17.s, #0",
            "mov z18.s, #0",
            "mov z19.s, #0",
            "mov z20.s, #0",
            "mov z21.s, #0",
            "mov z22.s, #0",
            "mov z23.s, #0",
            // Quarter k: weights z0 (rows 0..4), z1 (rows 4..8); activations of the low
            // sub-block z4 (rows 0, 1), z5 (rows 2, 3), of the high one z6, z7.
            "ld1b {{ z0.b }}, p0/z, [{wq}]",
            "ld1b {{ z1.b }}, p0/z, [{wq}, #1, mul vl]",
            "ld1rqb {{ z4.b }}, p0/z, [{al}]",
            "ld1rqb {{ z5.b }}, p0/z, [{al}, #16]",
            "ld1rqb {{ z6.b }}, p0/z, [{ah}]",
            "ld1rqb {{ z7.b }}, p0/z, [{ah}, #16]",
            "lsr z2.b, z0.b, #4",
            "lsr z3.b, z1.b, #4",
            "and z0.b, z0.b, #0xf",
            "and z1.b, z1.b, #0xf",
            "smmla z16.s, z0.b, z4.b",
            "smmla z17.s, z0.b, z5.b",
            "smmla z18.s, z1.b, z4.b",
            "smmla z19.s, z1.b, z5.b",
            "smmla z20.s, z2.b, z6.b",
            "smmla z21.s, z2.b, z7.b",
            "smmla z22.s, z3.b, z6.b",
            "smmla z23.s, z3.b, z7.b",
            "ld1b {{ z0.b }}, p0/z, [{wq}, #2, mul vl]",
            "ld1b {{ z1.b }}, p0/z, [{wq}, #3, mul vl]",
            "ld1rqb {{ z4.b }}, p0/z, [{al}, #32]",
            "ld1rqb {{ z5.b }}, p0/z, [{al}, #48]",
            "ld1rqb {{ z6.b }}, p0/z, [{ah}, #32]",
            "ld1rqb {{ z7.b }}, p0/z, [{ah}, #48]",
            "lsr z2.b, z0.b, #4",
            "lsr z3.b, z1.b, #4",
            "and z0.b, z0.b, #0xf",
            "and z1.b, z1.b, #0xf",
            "smmla z16.s, z0.b, z4.b",
            "smmla z17.s, z0.b, z5.b",
            "smmla z18.s, z1.b, z4.b",
            "smmla z19.s, z1.b, z5.b",
            "smmla z20.s, z2.b, z6.b",
            "smmla z21.s, z2.b, z7.b",
            "smmla z22.s, z3.b, z6.b",
            "smmla z23.s, z3.b, z7.b",
            "ld1b {{ z0.b }}, p0/z, [{wq}, #4, mul vl]",
            "ld1b {{ z1.b }}, p0/z, [{wq}, #5, mul vl]",
            "ld1rqb {{ z4.b }}, p0/z, [{al}, #64]",
            "ld1rqb {{ z5.b }}, p0/z, [{al}, #80]",
            "ld1rqb {{ z6.b }}, p0/z, [{ah}, #64]",
            "ld1rqb {{ z7.b }}, p0/z, [{ah}, #80]",
            "lsr z2.b, z0.b, #4",
            "lsr z3.b, z1.b, #4",
            "and z0.b, z0.b, #0xf",
            "and z1.b, z1.b, #0xf",
            "smmla z16.s, z0.b, z4.b",
            "smmla z17.s, z0.b, z5.b",
            "smmla z18.s, z1.b, z4.b",
            "smmla z19.s, z1.b, z5.b",
            "smmla z20.s, z2.b, z6.b",
            "smmla z21.s, z2.b, z7.b",
            "smmla z22.s, z3.b, z6.b",
            "smmla z23.s, z3.b, z7.b",
            "ld1b {{ z0.b }}, p0/z, [{wq}, #6, mul vl]",
            "ld1b {{ z1.b }}, p0/z, [{wq}, #7, mul vl]",
            "ld1rqb {{ z4.b }}, p0/z, [{al}, #96]",
            "ld1rqb {{ z5.b }}, p0/z, [{al}, #112]",
            "ld1rqb {{ z6.b }}, p0/z, [{ah}, #96]",
            "ld1rqb {{ z7.b }}, p0/z, [{ah}, #112]",
            "lsr z2.b, z0.b, #4",
            "lsr z3.b, z1.b, #4",
            "and z0.b, z0.b, #0xf",
            "and z1.b, z1.b, #0xf",
            "smmla z16.s, z0.b, z4.b",
            "smmla z17.s, z0.b, z5.b",
            "smmla z18.s, z1.b, z4.b",
            "smmla z19.s, z1.b, z5.b",
            "smmla z20.s, z2.b, z6.b",
            "smmla z21.s, z2.b, z7.b",
            "smmla z22.s, z3.b, z6.b",
            "smmla z23.s, z3.b, z7.b",
            // Scales of weight row 4g + 2s + i: lane >> 1 of zip1 (g = 0) / zip2 (g = 1).
            "ld1w {{ z28.s }}, p0/z, [{sc}]",
            "ld1w {{ z29.s }}, p0/z, [{sc}, #1, mul vl]",
            "zip1 z30.s, z28.s, z28.s",
            "zip2 z31.s, z28.s, z28.s",
            "mla z24.s, p0/m, z16.s, z30.s",
            "mla z25.s, p0/m, z17.s, z30.s",
            "mla z26.s, p0/m, z18.s, z31.s",
            "mla z27.s, p0/m, z19.s, z31.s",
            "zip1 z30.s, z29.s, z29.s",
            "zip2 z31.s, z29.s, z29.s",
            "mla z24.s, p0/m, z20.s, z30.s",
            "mla z25.s, p0/m, z21.s, z30.s",
            "mla z26.s, p0/m, z22.s, z31.s",
            "mla z27.s, p0/m, z23.s, z31.s",
            "add {wq}, {wq}, #256",
            "add {al}, {al}, #256",
            "add {sc}, {sc}, #64",
            "subs {n}, {n}, #1",
            "b.ne 2b",
            // Activation row m = 2p' + j: lanes j, j + 2, .. of (0, p'), then of (1, p').
            "uzp1 z0.s, z24.s, z26.s",
            "uzp2 z1.s, z24.s, z26.s",
            "uzp1 z2.s, z25.s, z27.s",
            "uzp2 z3.s, z25.s, z27.s",
            "st1w {{ z0.s }}, p0, [{o}]",
            "st1w {{ z1.s }}, p0, [{o}, #1, mul vl]",
            "st1w {{ z2.s }}, p0, [{o}, #2, mul vl]",
            "st1w {{ z3.s }}, p0, [{o}, #3, mul vl]",
            wq = inout(reg) b.qs.as_ptr() => _,
            al = inout(reg) q.qs.as_ptr() => _,
            ah = out(reg) _,
            sc = inout(reg) sc.as_ptr() => _,
            n = out(reg) _,
            o = in(reg) sums.as_mut_ptr(),
            out("p0") _,
            out("v0") _, out("v1") _, out("v2") _, out("v3") _,
            out("v4") _, out("v5") _, out("v6") _, out("v7") _,
            out("v16") _, out("v17") _, out("v18") _, out("v19") _,
            out("v20") _, out("v21") _, out("v22") _, out("v23") _,
            out("v24") _, out("v25") _, out("v26") _, out("v27") _,
            out("v28") _, out("v29") _, out("v30") _, out("v31") _,
            options(nostack)
        );
    }
}
