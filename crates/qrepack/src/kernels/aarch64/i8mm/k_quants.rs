//! `smmla` kernels of ggml's K-quant layouts interleaved in 8-byte chunks (`q4_K_8x8`,
//! `q5_K_8x8`, `q6_K_8x8`), decoded by [`KBlock`].
//!
//! A decoded vector holds 8 weights of a row pair (`2i, 2i + 1`). Four activation rows (GEMM):
//! the quad interleaves its rows in 8-byte chunks, so its vector `2c + q` is the 2x8 matrix of
//! weights `8c..8c + 8` of activation rows `2q, 2q + 1`, and `smmla` adds its product with a
//! weight pair: 32 per sub-block for the 4 x 8 outputs. One activation row (GEMV): `sdot` of
//! each weight vector with the row's 8 bytes repeated, 16 per sub-block, and a pairwise add
//! gives the 8 rows. Scaling as in the dotprod kernels.

use std::arch::aarch64::*;

use crate::blocks::{BlockQ8K, BlockQ8Kx4};
use crate::cpu::KernelSet;
use crate::kernel_api::Kernels;
use crate::kernels::aarch64::asm::{sdot, smmla};
use crate::kernels::aarch64::dotprod::k_quants::scale_quad;
use crate::kernels::aarch64::kx8::{f16x8, min_sums, widen, KBlock};
use crate::kernels::aarch64::rows4::load16;
use crate::kernels::aarch64::{target_entries, I8mm};

/// The GEMV/GEMM pair of a K-quant 8-row layout interleaved in 8-byte chunks.
pub(crate) fn kernels<P: KBlock>(_: I8mm) -> Kernels<P, BlockQ8K, BlockQ8Kx4> {
    Kernels::pair(KernelSet::I8mm, gemv::<P>, gemm::<P>)
}

target_entries! {
    "neon,dotprod,i8mm";
    fn gemv<P: KBlock>(w: &[P], a: &[BlockQ8K], out: &mut [f32]) => gemv_body;
    fn gemm<P: KBlock>(w: &[P], a: &[BlockQ8Kx4], out: &mut [f32]) => gemm_body;
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
        let lo = vreinterpretq_s64_s8(load16(xs, 0));
        let hi = vreinterpretq_s64_s8(load16(xs, 1));
        // The activation's 8-byte chunk k in both halves of a vector.
        let xk = [
            vreinterpretq_s8_s64(vdupq_laneq_s64::<0>(lo)),
            vreinterpretq_s8_s64(vdupq_laneq_s64::<1>(lo)),
            vreinterpretq_s8_s64(vdupq_laneq_s64::<0>(hi)),
            vreinterpretq_s8_s64(vdupq_laneq_s64::<1>(hi)),
        ];
        let mut acc = [vdupq_n_s32(0); 4];
        for (k, x) in xk.iter().enumerate() {
            let v = b.decode::<HI>(p, k);
            for i in 0..4 {
                acc[i] = sdot(acc[i], v[i], *x);
            }
            if (P::GROUPS16 && k % 2 == 1) || k == 3 {
                let g = if P::GROUPS16 { 2 * sb + k / 2 } else { 2 * sb };
                let s = widen(b.scales(g).0);
                // Lanes of acc[i]: row 2i (two halves), row 2i + 1 (two halves).
                let rows = [vpaddq_s32(acc[0], acc[1]), vpaddq_s32(acc[2], acc[3])];
                for h in 0..2 {
                    sumi[h] = vmlaq_s32(sumi[h], rows[h], s[h]);
                }
                acc = [vdupq_n_s32(0); 4];
            }
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
/// (`[activation row pair][weight row pair]`, 2x2 tiles as `smmla` leaves them).
///
/// # Safety
/// The CPU must have NEON and i8mm, and the caller must be compiled with them.
#[inline(always)]
unsafe fn quad_half<P: KBlock, const HI: bool>(
    b: &P,
    q: &BlockQ8Kx4,
    p: usize,
    sumi: &mut [[int32x4_t; 4]; 2],
) {
    let sb = P::sub_block::<HI>(p);
    // SAFETY: the features are the caller's contract; the loads are bounds-checked.
    unsafe {
        let mut acc = [[vdupq_n_s32(0); 4]; 2];
        for k in 0..4 {
            let v = b.decode::<HI>(p, k);
            for (pair, a) in acc.iter_mut().enumerate() {
                let x = load16(&q.qs, 2 * (4 * sb + k) + pair);
                for i in 0..4 {
                    a[i] = smmla(a[i], x, v[i]);
                }
            }
            if (P::GROUPS16 && k % 2 == 1) || k == 3 {
                let g = if P::GROUPS16 { 2 * sb + k / 2 } else { 2 * sb };
                let [s0, s1] = widen(b.scales(g).0).map(|v| vreinterpretq_s64_s32(v));
                // The scales of weight rows 2i, 2i + 1, twice: a tile's columns.
                let s = [
                    vreinterpretq_s32_s64(vdupq_laneq_s64::<0>(s0)),
                    vreinterpretq_s32_s64(vdupq_laneq_s64::<1>(s0)),
                    vreinterpretq_s32_s64(vdupq_laneq_s64::<0>(s1)),
                    vreinterpretq_s32_s64(vdupq_laneq_s64::<1>(s1)),
                ];
                for (a, si) in acc.iter_mut().zip(sumi.iter_mut()) {
                    for i in 0..4 {
                        si[i] = vmlaq_s32(si[i], a[i], s[i]);
                        a[i] = vdupq_n_s32(0);
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
/// The CPU must have NEON and i8mm, and the caller must be compiled with them.
#[inline(always)]
unsafe fn gemm_body<P: KBlock>(w: &[P], a: &[BlockQ8Kx4], out: &mut [f32]) {
    let out: &mut [f32; 32] = (&mut out[..32]).try_into().expect("32 outputs");
    // SAFETY: the features are the caller's contract; loads are bounds-checked and the stores
    // write `out`.
    unsafe {
        let mut acc = [[vdupq_n_f32(0.0); 2]; 4];
        for (b, q) in w.iter().zip(a) {
            let mut tiles = [[vdupq_n_s32(0); 4]; 2];
            for p in 0..4 {
                quad_half::<P, false>(b, q, p, &mut tiles);
                quad_half::<P, true>(b, q, p, &mut tiles);
            }
            // Tile (pair, i) lanes: act row 2 pair x weight rows 2i, 2i + 1, then act row
            // 2 pair + 1 x the same.
            let mut sumi = [[vdupq_n_s32(0); 2]; 4];
            for (pair, t) in tiles.iter().enumerate() {
                let t = t.map(|v| vreinterpretq_s64_s32(v));
                for h in 0..2 {
                    let (x, y) = (t[2 * h], t[2 * h + 1]);
                    sumi[2 * pair][h] = vreinterpretq_s32_s64(vzip1q_s64(x, y));
                    sumi[2 * pair + 1][h] = vreinterpretq_s32_s64(vzip2q_s64(x, y));
                }
            }
            scale_quad(b, q, &sumi, &mut acc);
        }
        for (o, v) in out.chunks_exact_mut(4).zip(acc.iter().flatten()) {
            vst1q_f32(o.as_mut_ptr(), *v);
        }
    }
}
