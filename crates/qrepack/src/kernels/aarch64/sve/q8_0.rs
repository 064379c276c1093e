//! `q8_0_4x8` GEMM with 256-bit SVE: quant vector `c` of a block column (32 bytes) is weights
//! `8c..8c + 8` of rows 0..4, two rows per 128-bit segment, and `ld1rqb` repeats the 16 bytes
//! of activation rows `2p, 2p + 1` at the same weights in both segments. One `smmla` per
//! vector and activation pair adds a 2x2 tile per segment: lane `4s + 2i + j` of accumulator
//! `p` is weight row `2s + i` times activation row `2p + j`.

use crate::blocks::BlockQ8_0x4;
use crate::kernels::aarch64::target_entries;

target_entries! {
    "sve,i8mm";
    fn gemm_entry(w: &[BlockQ8_0x4], a: &[BlockQ8_0x4], out: &mut [f32]) => gemm_body;
}

/// One 4-row group (`w.len()` blocks) times one activation quad: 16 outputs, activation row
/// major.
pub(crate) fn gemm(w: &[BlockQ8_0x4], a: &[BlockQ8_0x4], out: &mut [f32]) {
    gemm_entry(w, a, out)
}

/// # Safety
/// The CPU must have SVE with 32-byte vectors and i8mm, and the caller must be compiled with
/// both.
#[inline(always)]
unsafe fn gemm_body(w: &[BlockQ8_0x4], a: &[BlockQ8_0x4], out: &mut [f32]) {
    let out: &mut [f32; 16] = (&mut out[..16]).try_into().expect("16 outputs");
    let nb = w.len().min(a.len());
    if nb == 0 {
        out.fill(0.0);
        return;
    }
    // SAFETY: the loop reads `nb` blocks of `w` and `nb` quads of `a` (136 bytes each: 16 bytes
    // from the start for the scales, then the quants after the 8 bytes of scales, as four
    // 32-byte vectors or eight 16-byte pieces), and writes the 16 floats of `out` (four 16-byte
    // stores); the vector length is 32 bytes (the set's contract), so every access stays in
    // those slices. Only the declared registers change.
    unsafe {
        core::arch::asm!(
            "ptrue p0.b",
            "mov z30.s, #0",
            "mov z31.s, #0",
            "2:",
            "add {wq}, {w}, #8",
            "add {aq}, {a}, #8",
            "ld1b {{ z0.b }}, p0/z, [{wq}]",
            "ld1b {{ z1.b }}, p0/z, [{wq}, #1, mul vl]",
            "ld1b {{ z2.b }}, p0/z, [{wq}, #2, mul vl]",
            "ld1b {{ z3.b }}, p0/z, [{wq}, #3, mul vl]",
            // z16 + 2c + p: activation rows 2p, 2p + 1, weights 8c..8c + 8.
            "ld1rqb {{ z16.b }}, p0/z, [{aq}]",
            "ld1rqb {{ z17.b }}, p0/z, [{aq}, #16]",
            "ld1rqb {{ z18.b }}, p0/z, [{aq}, #32]",
            "ld1rqb {{ z19.b }}, p0/z, [{aq}, #48]",
            "ld1rqb {{ z20.b }}, p0/z, [{aq}, #64]",
            "ld1rqb {{ z21.b }}, p0/z, [{aq}, #80]",
            "ld1rqb {{ z22.b }}, p0/z, [{aq}, #96]",
            "ld1rqb {{ z23.b }}, p0/z, [{aq}, #112]",
            "mov z24.s, #0",
            "mov z25.s, #0",
            "smmla z24.s, z0.b, z16.b",
            "smmla z25.s, z0.b, z17.b",
            "smmla z24.s, z1.b, z18.b",
            "smmla z25.s, z1.b, z19.b",
            "smmla z24.s, z2.b, z20.b",
            "smmla z25.s, z2.b, z21.b",
            "smmla z24.s, z3.b, z22.b",
            "smmla z25.s, z3.b, z23.b",
            // Scales: weight row lane >> 1 (zip1), activation row 2p + (lane & 1) (64-bit
            // element p repeated).
            "ld1h {{ z4.s }}, p0/z, [{w}]",
            "ld1h {{ z5.s }}, p0/z, [{a}]",
            "fcvt z4.s, p0/m, z4.h",
            "fcvt z5.s, p0/m, z5.h",
            "zip1 z4.s, z4.s, z4.s",
            "dup z6.d, z5.d[0]",
            "dup z7.d, z5.d[1]",
            "scvtf z24.s, p0/m, z24.s",
            "scvtf z25.s, p0/m, z25.s",
            "fmul z6.s, z6.s, z4.s",
            "fmul z7.s, z7.s, z4.s",
            "fmla z30.s, p0/m, z24.s, z6.s",
            "fmla z31.s, p0/m, z25.s, z7.s",
            "add {w}, {w}, #136",
            "add {a}, {a}, #136",
            "subs {n}, {n}, #1",
            "b.ne 2b",
            // Even lanes: activation rows 0 (low half) and 2; odd lanes: rows 1 and 3.
            "uzp1 z0.s, z30.s, z31.s",
            "uzp2 z1.s, z30.s, z31.s",
            // The low 128 bits of a z register are its NEON q register.
            "stp q0, q1, [{o}]",
            "ext z0.b, z0.b, z0.b, #16",
            "ext z1.b, z1.b, z1.b, #16",
            "stp q0, q1, [{o}, #32]",
            w = inout(reg) w.as_ptr() => _,
            a = inout(reg) a.as_ptr() => _,
            wq = out(reg) _,
            aq = out(reg) _,
            n = inout(reg) nb => _,
            o = in(reg) out.as_mut_ptr(),
            out("p0") _,
            out("v0") _, out("v1") _, out("v2") _, out("v3") _,
            out("v4") _, out("v5") _, out("v6") _, out("v7") _,
            out("v16") _, out("v17") _, out("v18") _, out("v19") _,
            out("v20") _, out("v21") _, out("v22") _, out("v23") _,
            out("v24") _, out("v25") _, out("v30") _, out("v31") _,
            options(nostack)
        );
    }
}
