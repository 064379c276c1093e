//! What the plain-row kernels of the grid, ternary and FP4 types (`grid`, `lowbit`) share: the
//! sum of 16 byte products into four `i32` lanes, one way per kernel set, and the constructor
//! maker of their GEMV/GEMM pairs.
//!
//! The kernels are generic over [`Dot16`], so that one body serves the NEON set (`smull` and
//! `sadalp`: four instructions per 16 products) and, where it pays, the dotprod set (`sdot`:
//! one). Both sums are exact for every pair of signed bytes, `-128 · -128` included.

use std::arch::aarch64::*;

/// Four `i32` lanes plus the products of 16 signed bytes, each lane taking four of them (which
/// four is up to the implementation: the kernels only use the lanes' total or scale all four
/// lanes alike).
pub(crate) trait Dot16 {
    /// # Safety
    /// The CPU must have the instructions of the implementation, and the caller must be
    /// compiled with them.
    unsafe fn dot16(acc: int32x4_t, w: int8x16_t, a: int8x16_t) -> int32x4_t;
}

/// `smull`/`smull2` into `i16` and pairwise adds into the `i32` lanes (`sadalp`): plain NEON.
pub(crate) struct Widening;

impl Dot16 for Widening {
    #[inline(always)]
    unsafe fn dot16(acc: int32x4_t, w: int8x16_t, a: int8x16_t) -> int32x4_t {
        // SAFETY: NEON, the caller's contract.
        unsafe { super::vecdot::dot16(acc, w, a) }
    }
}

/// `sdot`: each lane adds the products of four adjacent bytes (the dotprod set).
pub(crate) struct Sdot;

impl Dot16 for Sdot {
    #[inline(always)]
    unsafe fn dot16(acc: int32x4_t, w: int8x16_t, a: int8x16_t) -> int32x4_t {
        // SAFETY: dotprod, the caller's contract (and compiled with it).
        unsafe { crate::kernels::aarch64::asm::sdot(acc, w, a) }
    }
}

/// The 16 bytes at `p` as a vector.
///
/// # Safety
/// The CPU must have NEON.
#[inline(always)]
pub(super) unsafe fn bytes16(p: &[u8; 16]) -> uint8x16_t {
    // SAFETY: NEON, the caller's contract; `p` is 16 bytes and `ld1` needs no alignment.
    unsafe { vld1q_u8(p.as_ptr()) }
}

/// The fixed-size piece of `b` at `at`.
#[inline(always)]
pub(super) fn sub<T, const N: usize>(b: &[T], at: usize) -> &[T; N] {
    b[at..at + N].try_into().expect("in bounds")
}

/// The little-endian `u16` number `i` of `b`.
#[inline(always)]
pub(super) fn le_u16(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes(*sub(b, 2 * i))
}

/// The little-endian `u32` at byte `at` of `b`.
#[inline(always)]
pub(super) fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(*sub(b, at))
}

/// The GEMV/GEMM pairs of plain rows from per-row dot products `body::<D>(w, a) -> f32`, for
/// one kernel set: `features; Token, KernelSet::Variant, D;` then one line per type.
macro_rules! dot_rows {
    ($features:literal; $token:ty, $set:expr, $dot:ty;
     $($(#[$m:meta])* $rows:ident, $entry:ident ($w:ty, $a:ty) => $body:ident;)*) => {
        $crate::kernel_api::target_entries! {
            $features;
            $(fn $entry(w: &[$w], a: &[$a]) -> f32 => $body::<$dot>;)*
        }
        $(
            $(#[$m])*
            pub(crate) fn $rows(_: $token) -> $crate::kernel_api::Kernels<$w, $a, $a> {
                /// One output per weight row in `w` (`a.len()` blocks each).
                fn gemv(w: &[$w], a: &[$a], out: &mut [f32]) {
                    for (o, row) in out.iter_mut().zip(w.chunks_exact(a.len().max(1))) {
                        *o = $entry(row, a);
                    }
                }
                /// The activation rows of `a` (`w.len()` blocks each) against one weight row.
                fn gemm(w: &[$w], a: &[$a], out: &mut [f32]) {
                    for (o, row) in out.iter_mut().zip(a.chunks_exact(w.len().max(1))) {
                        *o = $entry(w, row);
                    }
                }
                $crate::kernel_api::Kernels::pair($set, gemv, gemm)
            }
        )*
    };
}
pub(crate) use dot_rows;
