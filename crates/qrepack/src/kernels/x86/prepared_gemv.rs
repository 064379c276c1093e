//! The loop of the plain-row GEMVs that prepare each activation block once per call (AVX-512:
//! `nvfp4_rows`, `q1_0_rows`, `tq1_0_rows`, `grid_gemv`; AVX2: `avx2::prepared_rows`): pieces
//! of prepared blocks on the stack, weight rows four at a time against each piece, one vector
//! accumulator per row (16 or 8 lanes) summed at the end.

use std::arch::x86_64::*;
use std::mem::{size_of, MaybeUninit};

/// Weight rows multiplied side by side (sharing the prepared activations).
const ROWS_AT_ONCE: usize = 4;

/// Blocks of each row whose [`PreparedGemv::ahead`] is worked out before their products: the
/// stores have left the pipeline when the kernels load them again. A load right after a
/// 64-byte store of the same bytes waits for it (not forwarded on Zen 4), and reading them out
/// of the register instead (`vpextrw`) costs more than the loads.
pub(in crate::kernels::x86) const AHEAD_BLOCKS: usize = 8;

/// A vector of `f32` partial sums whose lanes add up to one output.
pub(in crate::kernels::x86) trait Accumulator: Copy {
    /// All lanes zero.
    ///
    /// # Safety
    /// The CPU must support the vector's instruction set.
    unsafe fn zero() -> Self;

    /// The sum of the lanes.
    ///
    /// # Safety
    /// The CPU must support the vector's instruction set.
    unsafe fn total(self) -> f32;
}

impl Accumulator for __m512 {
    #[inline(always)]
    unsafe fn zero() -> Self {
        // SAFETY: a register-only intrinsic of the caller's features (AVX-512 F).
        unsafe { _mm512_setzero_ps() }
    }

    #[inline(always)]
    unsafe fn total(self) -> f32 {
        // SAFETY: register-only intrinsics of the caller's features (AVX-512 F).
        unsafe { _mm512_reduce_add_ps(self) }
    }
}

impl Accumulator for __m256 {
    #[inline(always)]
    unsafe fn zero() -> Self {
        // SAFETY: a register-only intrinsic of the caller's features (AVX).
        unsafe { _mm256_setzero_ps() }
    }

    #[inline(always)]
    unsafe fn total(self) -> f32 {
        // SAFETY: register-only intrinsics of the caller's features (AVX, SSE3).
        unsafe {
            let v = _mm_add_ps(
                _mm256_castps256_ps128(self),
                _mm256_extractf128_ps::<1>(self),
            );
            let s = _mm_add_ps(v, _mm_movehl_ps(v, v));
            _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
        }
    }
}

/// A type whose GEMV prepares each activation block once per call.
pub(in crate::kernels::x86) trait PreparedGemv {
    /// The weight block.
    type Weight;
    /// The activation block (the weight type's `vec_dot_type` blocks of one weight block).
    type Act;
    /// An activation block as the kernel wants it.
    type Prep: Copy;
    /// Constants of the block kernel, set up once per call.
    type Consts: Copy;
    /// The per-row accumulator (`__m512` or `__m256`).
    type Acc: Accumulator;
    /// What a weight block's kernel reads from memory rather than from registers, worked out
    /// by [`PreparedGemv::ahead`] a few blocks before the kernel runs (see [`AHEAD_BLOCKS`]).
    type Ahead: Copy;

    /// A placeholder for the slots not yet prepared.
    ///
    /// # Safety
    /// The CPU must support the kernel set's features.
    unsafe fn empty() -> Self::Prep;

    /// The constants.
    ///
    /// # Safety
    /// The CPU must support the kernel set's features.
    unsafe fn consts() -> Self::Consts;

    /// `a` prepared.
    ///
    /// # Safety
    /// The CPU must support the kernel set's features.
    unsafe fn prepare(a: &Self::Act) -> Self::Prep;

    /// Writes what block `w`'s kernel reads back to `out`.
    ///
    /// # Safety
    /// The CPU must support the kernel set's features.
    unsafe fn ahead(w: &Self::Weight, c: Self::Consts, out: &mut MaybeUninit<Self::Ahead>);

    /// `acc` plus weight block `w` (with its [`PreparedGemv::ahead`]) times the prepared block
    /// `p`, in the lanes of [`PreparedGemv::Acc`] (summed at the end of the row).
    ///
    /// # Safety
    /// The CPU must support the kernel set's features.
    unsafe fn block(
        w: &Self::Weight,
        ahead: &Self::Ahead,
        p: &Self::Prep,
        c: Self::Consts,
        acc: Self::Acc,
    ) -> Self::Acc;

    /// `acc[r]` plus weight block `w[r]` times the prepared block `p` for each of `R` rows, for
    /// the types whose [`PreparedGemv::ahead`] keeps nothing: by default `ahead` and
    /// [`PreparedGemv::block`] row after row. A type whose prepared block fills most of the
    /// registers takes it piece by piece for all the rows instead, so that each piece is
    /// loaded once.
    ///
    /// # Safety
    /// The CPU must support the kernel set's features.
    #[inline(always)]
    unsafe fn blocks<const R: usize>(
        w: [&Self::Weight; R],
        p: &Self::Prep,
        c: Self::Consts,
        acc: &mut [Self::Acc; R],
    ) {
        for (block, acc) in w.into_iter().zip(acc) {
            let mut ahead = MaybeUninit::uninit();
            // SAFETY: the caller's features; `ahead` fills the slot `block` reads.
            unsafe {
                Self::ahead(block, c, &mut ahead);
                *acc = Self::block(block, ahead.assume_init_ref(), p, c, *acc);
            }
        }
    }
}

/// The [`PreparedGemv`] items of a type whose kernel reads nothing back
/// ([`PreparedGemv::Ahead`] is `()`).
macro_rules! nothing_ahead {
    () => {
        type Ahead = ();

        #[inline(always)]
        unsafe fn ahead(_: &Self::Weight, _: Self::Consts, _: &mut std::mem::MaybeUninit<()>) {}
    };
}
pub(in crate::kernels::x86) use nothing_ahead;

/// `R` rows of `w` (`nb` blocks each) against the prepared blocks from block `first` on,
/// stored in (the first piece) or added to `out[..R]`.
///
/// # Safety
/// The CPU must support the kernel set's features.
#[inline(always)]
unsafe fn rows<T: PreparedGemv, const R: usize>(
    w: &[T::Weight],
    (nb, first): (usize, usize),
    prep: &[T::Prep],
    out: &mut [f32],
    store: bool,
) {
    // SAFETY: the caller's features; blocks are read through bounds-checked indexing.
    unsafe {
        let c = T::consts();
        let mut acc = [T::Acc::zero(); R];
        if size_of::<T::Ahead>() == 0 {
            // Nothing to keep (`()`): each block's `ahead` right before its product, in one
            // pass (the chunks below measured 3 % slower for IQ2_S when its indices were made
            // per point in the product).
            let row_blocks: [&[T::Weight]; R] =
                std::array::from_fn(|r| &w[r * nb + first..r * nb + first + prep.len()]);
            for (k, p) in prep.iter().enumerate() {
                let blocks: [&T::Weight; R] = std::array::from_fn(|r| &row_blocks[r][k]);
                for block in blocks {
                    crate::kernel_api::prefetch_l2(block, crate::kernel_api::GEMV_PREFETCH_BYTES);
                }
                T::blocks(blocks, p, c, &mut acc);
            }
        } else {
            // Not zeroed: each slot is written before it is read.
            let mut ahead = [[const { MaybeUninit::<T::Ahead>::uninit() }; R]; AHEAD_BLOCKS];
            for (chunk, ps) in prep.chunks(AHEAD_BLOCKS).enumerate() {
                let at = first + chunk * AHEAD_BLOCKS;
                for (k, ahead) in ahead.iter_mut().take(ps.len()).enumerate() {
                    for (r, ahead) in ahead.iter_mut().enumerate() {
                        T::ahead(&w[r * nb + at + k], c, ahead);
                    }
                }
                for (k, p) in ps.iter().enumerate() {
                    for (r, acc) in acc.iter_mut().enumerate() {
                        let block = &w[r * nb + at + k];
                        crate::kernel_api::prefetch_l2(
                            block,
                            crate::kernel_api::GEMV_PREFETCH_BYTES,
                        );
                        // `ahead` filled slots 0..ps.len() of every row above.
                        *acc = T::block(block, ahead[k][r].assume_init_ref(), p, c, *acc);
                    }
                }
            }
        }
        for (o, acc) in out.iter_mut().zip(acc) {
            let sum = acc.total();
            *o = if store { sum } else { *o + sum };
        }
    }
}

/// Every row of `w` (`a.len()` blocks each) times the activation row `a`, the activations
/// prepared `PIECE` blocks at a time (a longer row is multiplied piece by piece, each piece's
/// sums added to the outputs).
///
/// # Safety
/// The CPU must support the kernel set's features.
#[inline(always)]
pub(in crate::kernels::x86) unsafe fn gemv_body<T: PreparedGemv, const PIECE: usize>(
    w: &[T::Weight],
    a: &[T::Act],
    out: &mut [f32],
) {
    let nb = a.len();
    if nb == 0 {
        out.fill(0.0);
        return;
    }
    let n_rows = (w.len() / nb).min(out.len());
    // SAFETY: the caller's features; `prepare` fills the slots `rows` reads.
    unsafe {
        let mut prep = [T::empty(); PIECE];
        for (piece, a_piece) in a.chunks(PIECE).enumerate() {
            let first = piece * PIECE;
            for (slot, block) in prep.iter_mut().zip(a_piece) {
                *slot = T::prepare(block);
            }
            let prep = &prep[..a_piece.len()];
            let store = piece == 0;
            let mut r = 0;
            while r + ROWS_AT_ONCE <= n_rows {
                let rw = &w[r * nb..(r + ROWS_AT_ONCE) * nb];
                rows::<T, ROWS_AT_ONCE>(rw, (nb, first), prep, &mut out[r..], store);
                r += ROWS_AT_ONCE;
            }
            while r < n_rows {
                let rw = &w[r * nb..(r + 1) * nb];
                rows::<T, 1>(rw, (nb, first), prep, &mut out[r..], store);
                r += 1;
            }
        }
    }
}
