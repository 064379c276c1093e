//! `q4_0_8x8` with 256-bit SVE (see the module docs of `sve` for the block's vectors).
//!
//! GEMV: each 8-byte piece of the activation row is broadcast to every 64-bit lane (`ld1rd`),
//! so one `sdot` of a quant vector adds, in lanes `2r` and `2r + 1`, half of row `r`'s products
//! with those 8 activations; `uzp1`/`uzp2` and an add give the 8 rows' sums.
//!
//! GEMM: each 128-bit segment of a quant vector is the 2x8 matrix of two weight rows, and
//! `ld1rqb` repeats the 16 bytes of two activation rows (the quad interleaves its rows by 8)
//! in both segments, so one `smmla` adds a 2x2 tile per segment: lane `4s + 2i + j` of
//! accumulator `(g, p)` is weight row `4g + 2s + i` times activation row `2p + j`. Four such
//! accumulators cover the 8 x 4 outputs; `uzp1`/`uzp2` turn them into activation rows.

use crate::blocks::{BlockQ4_0x8, BlockQ8_0, BlockQ8_0x4};
use crate::kernels::aarch64::target_entries;

target_entries! {
    "sve,i8mm";
    fn gemv_entry(w: &[BlockQ4_0x8], a: &[BlockQ8_0], out: &mut [f32]) => gemv_body;
    fn gemm_entry(w: &[BlockQ4_0x8], a: &[BlockQ8_0x4], out: &mut [f32]) => gemm_body;
}

/// The bits of the f32 1/16 (no SVE `fmov` immediate), the factor between the products of the
/// shifted nibbles and those of the weights.
const SIXTEENTH: u32 = 0x3d80_0000;

/// Every 8-row group in `w` (`a.len()` blocks each) times one activation row.
pub(crate) fn gemv(w: &[BlockQ4_0x8], a: &[BlockQ8_0], out: &mut [f32]) {
    gemv_entry(w, a, out)
}

/// One 8-row group (`w.len()` blocks) times one activation quad: 32 outputs, activation row
/// major.
pub(crate) fn gemm(w: &[BlockQ4_0x8], a: &[BlockQ8_0x4], out: &mut [f32]) {
    gemm_entry(w, a, out)
}

/// # Safety
/// The CPU must have SVE with 32-byte vectors, and the caller must be compiled with SVE.
#[inline(always)]
unsafe fn gemv_body(w: &[BlockQ4_0x8], a: &[BlockQ8_0], out: &mut [f32]) {
    let nb = a.len();
    if nb == 0 {
        out.fill(0.0);
        return;
    }
    assert!(w.len() / nb * 8 <= out.len(), "8 outputs per row group");
    for (group, o) in w.chunks_exact(nb).zip(out.chunks_exact_mut(8)) {
        // SAFETY: the loop reads `nb` blocks of `group` (144 bytes each: the scales at -16 from
        // the quants, the quants as four 32-byte vectors) and `nb` blocks of `a` (34 bytes
        // each: the scale, the quants as four 8-byte broadcasts), and writes the 8 floats of
        // `o`; the vector length is 32 bytes (the set's contract), so every access stays in
        // those slices. Only the declared registers change.
        unsafe {
            core::arch::asm!(
                "ptrue p0.b",
                "mov z31.s, #0",
                "2:",
                "ld1b {{ z0.b }}, p0/z, [{wq}]",
                "ld1b {{ z1.b }}, p0/z, [{wq}, #1, mul vl]",
                "ld1b {{ z2.b }}, p0/z, [{wq}, #2, mul vl]",
                "ld1b {{ z3.b }}, p0/z, [{wq}, #3, mul vl]",
                "add {aq}, {ad}, #2",
                "ld1rd {{ z4.d }}, p0/z, [{aq}]",
                "ld1rd {{ z5.d }}, p0/z, [{aq}, #8]",
                "ld1rd {{ z6.d }}, p0/z, [{aq}, #16]",
                "ld1rd {{ z7.d }}, p0/z, [{aq}, #24]",
                // The 8 weight scales, one f16 in the low half of each 32-bit lane.
                "ld1h {{ z16.s }}, p0/z, [{wq}, #-1, mul vl]",
                "ld1rh {{ z17.s }}, p0/z, [{ad}]",
                "lsl z18.b, z0.b, #4",
                "lsl z19.b, z1.b, #4",
                "lsl z20.b, z2.b, #4",
                "lsl z21.b, z3.b, #4",
                "and z0.b, z0.b, #0xf0",
                "and z1.b, z1.b, #0xf0",
                "and z2.b, z2.b, #0xf0",
                "and z3.b, z3.b, #0xf0",
                "mov z22.s, #0",
                "mov z23.s, #0",
                // Rows 0..4: weights 0..8, 8..16, 16..24, 24..32.
                "sdot z22.s, z18.b, z4.b",
                "sdot z22.s, z20.b, z5.b",
                "sdot z22.s, z0.b, z6.b",
                "sdot z22.s, z2.b, z7.b",
                // Rows 4..8.
                "sdot z23.s, z19.b, z4.b",
                "sdot z23.s, z21.b, z5.b",
                "sdot z23.s, z1.b, z6.b",
                "sdot z23.s, z3.b, z7.b",
                "fcvt z16.s, p0/m, z16.h",
                "fcvt z17.s, p0/m, z17.h",
                "uzp1 z24.s, z22.s, z23.s",
                "uzp2 z25.s, z22.s, z23.s",
                "add z24.s, z24.s, z25.s",
                "scvtf z24.s, p0/m, z24.s",
                "fmul z16.s, z16.s, z17.s",
                "fmla z31.s, p0/m, z24.s, z16.s",
                "add {wq}, {wq}, #144",
                "add {ad}, {ad}, #34",
                "subs {n}, {n}, #1",
                "b.ne 2b",
                "dup z30.s, {sixteenth:w}",
                "fmul z31.s, z31.s, z30.s",
                "st1w {{ z31.s }}, p0, [{o}]",
                wq = inout(reg) group.as_ptr().cast::<u8>().wrapping_add(16) => _,
                ad = inout(reg) a.as_ptr() => _,
                aq = out(reg) _,
                n = inout(reg) nb => _,
                o = in(reg) o.as_mut_ptr(),
                sixteenth = in(reg) SIXTEENTH,
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
}

/// # Safety
/// The CPU must have SVE with 32-byte vectors and i8mm, and the caller must be compiled with
/// both.
#[inline(always)]
unsafe fn gemm_body(w: &[BlockQ4_0x8], a: &[BlockQ8_0x4], out: &mut [f32]) {
    let out: &mut [f32; 32] = (&mut out[..32]).try_into().expect("32 outputs");
    let nb = w.len().min(a.len());
    if nb == 0 {
        out.fill(0.0);
        return;
    }
    // SAFETY: the loop reads `nb` blocks of `w` (144 bytes each, as in the GEMV) and `nb` quads
    // of `a` (136 bytes each: 16 bytes from the start for the scales, eight 16-byte pieces of
    // the quants), and writes the 32 floats of `out`; the vector length is 32 bytes (the set's
    // contract), so every access stays in those slices. Only the declared registers change.
    unsafe {
        core::arch::asm!(
            "ptrue p0.b",
            "mov z28.s, #0",
            "mov z29.s, #0",
            "mov z30.s, #0",
            "mov z31.s, #0",
            "2:",
            "ld1b {{ z0.b }}, p0/z, [{wq}]",
            "ld1b {{ z1.b }}, p0/z, [{wq}, #1, mul vl]",
            "ld1b {{ z2.b }}, p0/z, [{wq}, #2, mul vl]",
            "ld1b {{ z3.b }}, p0/z, [{wq}, #3, mul vl]",
            "add {aq}, {ad}, #8",
            // z16 + 2c + p: activation rows 2p, 2p + 1, weights 8c..8c + 8.
            "ld1rqb {{ z16.b }}, p0/z, [{aq}]",
            "ld1rqb {{ z17.b }}, p0/z, [{aq}, #16]",
            "ld1rqb {{ z18.b }}, p0/z, [{aq}, #32]",
            "ld1rqb {{ z19.b }}, p0/z, [{aq}, #48]",
            "ld1rqb {{ z20.b }}, p0/z, [{aq}, #64]",
            "ld1rqb {{ z21.b }}, p0/z, [{aq}, #80]",
            "ld1rqb {{ z22.b }}, p0/z, [{aq}, #96]",
            "ld1rqb {{ z23.b }}, p0/z, [{aq}, #112]",
            "lsl z4.b, z0.b, #4",
            "lsl z5.b, z1.b, #4",
            "lsl z6.b, z2.b, #4",
            "lsl z7.b, z3.b, #4",
            "and z0.b, z0.b, #0xf0",
            "and z1.b, z1.b, #0xf0",
            "and z2.b, z2.b, #0xf0",
            "and z3.b, z3.b, #0xf0",
            "mov z24.s, #0",
            "mov z25.s, #0",
            "mov z26.s, #0",
            "mov z27.s, #0",
            // Weights 0..8 (rows 0..4: z4, rows 4..8: z5).
            "smmla z24.s, z4.b, z16.b",
            "smmla z25.s, z4.b, z17.b",
            "smmla z26.s, z5.b, z16.b",
            "smmla z27.s, z5.b, z17.b",
            // Weights 8..16 (z6, z7).
            "smmla z24.s, z6.b, z18.b",
            "smmla z25.s, z6.b, z19.b",
            "smmla z26.s, z7.b, z18.b",
            "smmla z27.s, z7.b, z19.b",
            // Weights 16..24 (z0, z1).
            "smmla z24.s, z0.b, z20.b",
            "smmla z25.s, z0.b, z21.b",
            "smmla z26.s, z1.b, z20.b",
            "smmla z27.s, z1.b, z21.b",
            // Weights 24..32 (z2, z3).
            "smmla z24.s, z2.b, z22.b",
            "smmla z25.s, z2.b, z23.b",
            "smmla z26.s, z3.b, z22.b",
            "smmla z27.s, z3.b, z23.b",
            // Scales: weight row 4g + 2s + i (lane >> 1 of zip1 / zip2), activation row
            // 2p + (lane & 1) (64-bit element p repeated).
            "ld1h {{ z0.s }}, p0/z, [{wq}, #-1, mul vl]",
            "ld1h {{ z1.s }}, p0/z, [{ad}]",
            "fcvt z0.s, p0/m, z0.h",
            "fcvt z1.s, p0/m, z1.h",
            "zip1 z2.s, z0.s, z0.s",
            "zip2 z3.s, z0.s, z0.s",
            "dup z4.d, z1.d[0]",
            "dup z5.d, z1.d[1]",
            "scvtf z24.s, p0/m, z24.s",
            "scvtf z25.s, p0/m, z25.s",
            "scvtf z26.s, p0/m, z26.s",
            "scvtf z27.s, p0/m, z27.s",
            "fmul z6.s, z2.s, z4.s",
            "fmul z7.s, z2.s, z5.s",
            "fmul z0.s, z3.s, z4.s",
            "fmul z1.s, z3.s, z5.s",
            "fmla z28.s, p0/m, z24.s, z6.s",
            "fmla z29.s, p0/m, z25.s, z7.s",
            "fmla z30.s, p0/m, z26.s, z0.s",
            "fmla z31.s, p0/m, z27.s, z1.s",
            "add {wq}, {wq}, #144",
            "add {ad}, {ad}, #136",
            "subs {n}, {n}, #1",
            "b.ne 2b",
            "dup z0.s, {sixteenth:w}",
            "fmul z28.s, z28.s, z0.s",
            "fmul z29.s, z29.s, z0.s",
            "fmul z30.s, z30.s, z0.s",
            "fmul z31.s, z31.s, z0.s",
            // Activation row m = 2p + j: lanes j, j + 2, .. of (0, p), then of (1, p).
            "uzp1 z1.s, z28.s, z30.s",
            "uzp2 z2.s, z28.s, z30.s",
            "uzp1 z3.s, z29.s, z31.s",
            "uzp2 z4.s, z29.s, z31.s",
            "st1w {{ z1.s }}, p0, [{o}]",
            "st1w {{ z2.s }}, p0, [{o}, #1, mul vl]",
            "st1w {{ z3.s }}, p0, [{o}, #2, mul vl]",
            "st1w {{ z4.s }}, p0, [{o}, #3, mul vl]",
            wq = inout(reg) w.as_ptr().cast::<u8>().wrapping_add(16) => _,
            ad = inout(reg) a.as_ptr() => _,
            aq = out(reg) _,
            n = inout(reg) nb => _,
            o = in(reg) out.as_mut_ptr(),
            sixteenth = in(reg) SIXTEENTH,
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
