//! `sdot` kernels of ggml's K-quant layouts interleaved in 4-byte chunks (`q4_K_8x4`,
//! `q5_K_8x4`, `q6_K_8x4`), decoded by [`KBlock`].
//!
//! A decoded vector holds 4 weights of 4 rows (row half `i % 2` of a quarter). One activation
//! row (GEMV): `sdot` by lane against the row's 16 bytes of the sub-block, 16 per sub-block for
//! the 8 rows. Four rows (GEMM): the quad interleaves its rows in 4-byte chunks too, so its
//! vector `c` holds weights `4c..4c + 4` of the four activation rows and `sdot` by lane `m` adds
//! activation row `m`'s products, 64 per sub-block for the 4 x 8 outputs. Each sub-block's (Q6_K:
//! 16-weight group's) integer sums are scaled in integers; the mins term of Q4_K/Q5_K comes
//! from the activations' block sums once per block column.

use std::arch::aarch64::*;

use crate::blocks::{BlockQ8K, BlockQ8Kx4};
use crate::cpu::KernelSet;
use crate::kernel_api::Kernels;
use crate::kernels::aarch64::asm::sdot_lane;
use crate::kernels::aarch64::kx8::{f16x8, min_sums, widen, KBlock};
use crate::kernels::aarch64::rows4::load16;
use crate::kernels::aarch64::{target_entries, Dotprod};

/// The GEMV/GEMM pair of a K-quant 8-row layout interleaved in 4-byte chunks.
pub(crate) fn kernels<P: KBlock>(_: Dotprod) -> Kernels<P, BlockQ8K, BlockQ8Kx4> {
    Kernels::pair(KernelSet::Dotprod, gemv::<P>, gemm::<P>)
}

target_entries! {
    "neon,dotprod";
    fn gemv<P: KBlock>(w: &[P], a: &[BlockQ8K], out: &mut [f32]) => gemv_body;
    fn gemm<P: KBlock>(w: &[P], a: &[BlockQ8Kx4], out: &mut [f32]) => gemm_body;
}

/// Adds `acc · scales(g)` to `sumi` (rows 0..4, rows 4..8) and clears `acc`.
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
unsafe fn flush<P: KBlock>(b: &P, g: usize, acc: &mut [int32x4_t; 2], sumi: &mut [int32x4_t; 2]) {
    // SAFETY: register-only NEON operations, which the caller has.
    unsafe {
        let s = widen(b.scales(g).0);
        for h in 0..2 {
            sumi[h] = vmlaq_s32(sumi[h], acc[h], s[h]);
            acc[h] = vdupq_n_s32(0);
        }
    }
}

/// The nibbles `HI` of pair `p` of block `b` times activation row `x`, scaled, into `sumi`.
///
/// # Safety
/// The CPU must have NEON and dotprod, and the caller must be compiled with them.
#[inline(always)]
unsafe fn row_half<P: KBlock, const HI: bool>(
    b: &P,
    x: &BlockQ8K,
    p: usize,
    sumi: &mut [int32x4_t; 2],
) {
    let sb = P::sub_block::<HI>(p);
    let xs: &[i8; 32] = x.qs[32 * sb..32 * sb + 32].try_into().expect("32 bytes");
    // SAFETY: the features are the caller's contract; the loads are bounds-checked.
    unsafe {
        let xv = [load16(xs, 0), load16(xs, 1)];
        let mut acc = [vdupq_n_s32(0); 2];
        for k in 0..4 {
            // Vector i: weights 4(2k + i / 2)..+4 of rows 4(i % 2)..+4, i.e. 4-byte group
            // (2k + i / 2) % 4 of the activation's 16-byte half k / 2.
            let v = b.decode::<HI>(p, k);
            let x = xv[k / 2];
            if k % 2 == 0 {
                acc[0] = sdot_lane::<0>(acc[0], v[0], x);
                acc[1] = sdot_lane::<0>(acc[1], v[1], x);
                acc[0] = sdot_lane::<1>(acc[0], v[2], x);
                acc[1] = sdot_lane::<1>(acc[1], v[3], x);
            } else {
                acc[0] = sdot_lane::<2>(acc[0], v[0], x);
                acc[1] = sdot_lane::<2>(acc[1], v[1], x);
                acc[0] = sdot_lane::<3>(acc[0], v[2], x);
                acc[1] = sdot_lane::<3>(acc[1], v[3], x);
                if P::GROUPS16 {
                    flush(b, 2 * sb + k / 2, &mut acc, sumi);
                }
            }
        }
        if !P::GROUPS16 {
            flush(b, 2 * sb, &mut acc, sumi);
        }
    }
}

/// Every 8-row group in `w` (`a.len()` blocks each) times one activation row.
///
/// # Safety
/// The CPU must have NEON and dotprod, and the caller must be compiled with them.
#[inline(always)]
unsafe fn gemv_body<P: KBlock>(w: &[P], a: &[BlockQ8K], out: &mut [f32]) {
    if a.is_empty() {
        out.fill(0.0);
        return;
    }
    // SAFETY: the features are the caller's contract; loads are bounds-checked and the stores
    // write the 8-float output chunks.
    unsafe {
        for (group, o) in w.chunks_exact(a.len()).zip(out.chunks_exact_mut(8)) {
            let mut acc = [vdupq_n_f32(0.0); 2];
            for (b, x) in group.iter().zip(a) {
                let mut sumi = [vdupq_n_s32(0); 2];
                for p in 0..4 {
                    row_half::<P, false>(b, x, p, &mut sumi);
                    row_half::<P, true>(b, x, p, &mut sumi);
                }
                let dw = f16x8(b.d());
                for h in 0..2 {
                    acc[h] = vfmaq_f32(acc[h], vcvtq_f32_s32(sumi[h]), vmulq_n_f32(dw[h], x.d));
                }
                if !P::GROUPS16 {
                    let [mins] = min_sums::<P, 1>(b, |_, sb| x.bsums[2 * sb] + x.bsums[2 * sb + 1]);
                    let dm = f16x8(b.dmin());
                    for h in 0..2 {
                        let d = vmulq_n_f32(dm[h], x.d);
                        acc[h] = vfmsq_f32(acc[h], vcvtq_f32_s32(mins[h]), d);
                    }
                }
            }
            let (lo, hi) = o.split_at_mut(4);
            vst1q_f32(lo.as_mut_ptr(), acc[0]);
            vst1q_f32(hi.as_mut_ptr(), acc[1]);
        }
    }
}

/// The nibbles `HI` of pair `p` of block `b` times activation quad `q`, scaled, into `sumi`
/// (`[activation row][row half]`).
///
/// # Safety
/// The CPU must have NEON and dotprod, and the caller must be compiled with them.
#[inline(always)]
unsafe fn quad_half<P: KBlock, const HI: bool>(
    b: &P,
    q: &BlockQ8Kx4,
    p: usize,
    sumi: &mut [[int32x4_t; 2]; 4],
) {
    let sb = P::sub_block::<HI>(p);
    // SAFETY: the features are the caller's contract; the loads are bounds-checked.
    unsafe {
        let mut acc = [[vdupq_n_s32(0); 2]; 4];
        for k in 0..4 {
            let v = b.decode::<HI>(p, k);
            for j in 0..2 {
                // Chunk 2k + j of the sub-block: weights 4(2k + j)..+4 of the 4 activation rows.
                let x = load16(&q.qs, 8 * sb + 2 * k + j);
                for h in 0..2 {
                    let w = v[2 * j + h];
                    acc[0][h] = sdot_lane::<0>(acc[0][h], w, x);
                    acc[1][h] = sdot_lane::<1>(acc[1][h], w, x);
                    acc[2][h] = sdot_lane::<2>(acc[2][h], w, x);
                    acc[3][h] = sdot_lane::<3>(acc[3][h], w, x);
                }
            }
            if (P::GROUPS16 && k % 2 == 1) || k == 3 {
                let g = if P::GROUPS16 { 2 * sb + k / 2 } else { 2 * sb };
                let s = widen(b.scales(g).0);
                for (a, si) in acc.iter_mut().zip(sumi.iter_mut()) {
                    for h in 0..2 {
                        si[h] = vmlaq_s32(si[h], a[h], s[h]);
                        a[h] = vdupq_n_s32(0);
                    }
                }
            }
        }
    }
}

/// One 8-row group (`w.len()` blocks) times one activation quad: 32 outputs, activation row
/// major.
///
/// # Safety
/// The CPU must have NEON and dotprod, and the caller must be compiled with them.
#[inline(always)]
unsafe fn gemm_body<P: KBlock>(w: &[P], a: &[BlockQ8Kx4], out: &mut [f32]) {
    let out: &mut [f32; 32] = (&mut out[..32]).try_into().expect("32 outputs");
    // SAFETY: the features are the caller's contract; loads are bounds-checked and the stores
    // write `out`.
    unsafe {
        let mut acc = [[vdupq_n_f32(0.0); 2]; 4];
        for (b, q) in w.iter().zip(a) {
            let mut sumi = [[vdupq_n_s32(0); 2]; 4];
            for p in 0..4 {
                quad_half::<P, false>(b, q, p, &mut sumi);
                quad_half::<P, true>(b, q, p, &mut sumi);
            }
            scale_quad(b, q, &sumi, &mut acc);
        }
        for (o, v) in out.chunks_exact_mut(4).zip(acc.iter().flatten()) {
            vst1q_f32(o.as_mut_ptr(), *v);
        }
    }
}

/// Adds one block column's scaled sums (`[activation row][row half]`) to the f32 outputs: the
/// scales `d_w · d_a` and, for Q4_K/Q5_K, the mins term.
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
pub(crate) unsafe fn scale_quad<P: KBlock>(
    b: &P,
    q: &BlockQ8Kx4,
    sumi: &[[int32x4_t; 2]; 4],
    acc: &mut [[float32x4_t; 2]; 4],
) {
    // SAFETY: register-only NEON operations, which the caller has.
    unsafe {
        let dw = f16x8(b.d());
        for m in 0..4 {
            for h in 0..2 {
                let d = vmulq_n_f32(dw[h], q.d[m]);
                acc[m][h] = vfmaq_f32(acc[m][h], vcvtq_f32_s32(sumi[m][h]), d);
            }
        }
        if !P::GROUPS16 {
            let mins = min_sums::<P, 4>(b, |m, sb| {
                let i = (sb / 2) * 16 + 4 * m + 2 * (sb % 2);
                q.bsums[i] + q.bsums[i + 1]
            });
            let dm = f16x8(b.dmin());
            for m in 0..4 {
                for h in 0..2 {
                    let d = vmulq_n_f32(dm[h], q.d[m]);
                    acc[m][h] = vfmsq_f32(acc[m][h], vcvtq_f32_s32(mins[m][h]), d);
                }
            }
        }
    }
}
