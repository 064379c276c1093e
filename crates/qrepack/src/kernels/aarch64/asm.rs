//! The instructions stable Rust has no intrinsics for yet: `sdot` (dotprod), `smmla` (i8mm) and
//! the f16 → f32 widening `fcvtl`. Each is one instruction in an `asm!` block without memory
//! access; the callers are `#[target_feature]` kernels of the set that has the instruction.

use std::arch::aarch64::*;
use std::arch::asm;

/// `acc[i] += Σ_k a[4i + k] · b[4i + k]` (signed bytes, four sums of four products).
///
/// # Safety
/// The CPU must have the dot-product extension, and the caller must be compiled with it
/// (`#[target_feature(enable = "dotprod")]`), so that the assembler accepts the instruction.
#[inline(always)]
pub(crate) unsafe fn sdot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    // SAFETY: a register-only instruction of the dotprod extension, which the caller has.
    unsafe {
        asm!(
            "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
            acc = inout(vreg) acc,
            a = in(vreg) a,
            b = in(vreg) b,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    acc
}

/// `acc[i] += Σ_k a[4i + k] · b[4L + k]`: every lane of `a` against the 4-byte group `L` of `b`.
///
/// # Safety
/// As [`sdot`].
#[inline(always)]
pub(crate) unsafe fn sdot_lane<const L: i32>(
    acc: int32x4_t,
    a: int8x16_t,
    b: int8x16_t,
) -> int32x4_t {
    const { assert!(L >= 0 && L < 4) };
    let mut acc = acc;
    // SAFETY: a register-only instruction of the dotprod extension, which the caller has.
    unsafe {
        asm!(
            "sdot {acc:v}.4s, {a:v}.16b, {b:v}.4b[{l}]",
            acc = inout(vreg) acc,
            a = in(vreg) a,
            b = in(vreg) b,
            l = const L,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    acc
}

/// `acc` as a 2x2 matrix `[c00, c01, c10, c11]` plus `a · bᵀ`, where `a` and `b` are 2x8
/// matrices of signed bytes (rows of 8 bytes): `c_ij += Σ_k a[8i + k] · b[8j + k]`.
///
/// # Safety
/// The CPU must have the int8 matrix multiply extension, and the caller must be compiled with
/// it (`#[target_feature(enable = "i8mm")]`).
#[inline(always)]
pub(crate) unsafe fn smmla(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    // SAFETY: a register-only instruction of the i8mm extension, which the caller has.
    unsafe {
        asm!(
            "smmla {acc:v}.4s, {a:v}.16b, {b:v}.16b",
            acc = inout(vreg) acc,
            a = in(vreg) a,
            b = in(vreg) b,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    acc
}

/// Four f16 values (raw bits, little-endian lanes) widened to f32, exactly.
///
/// # Safety
/// The CPU must have NEON (every AArch64 CPU does; `fcvtl` from half precision is part of the
/// base Advanced SIMD instruction set).
#[inline(always)]
pub(crate) unsafe fn f16x4_to_f32(bits: uint16x4_t) -> float32x4_t {
    let out: float32x4_t;
    // SAFETY: a register-only base Advanced SIMD instruction.
    unsafe {
        asm!(
            "fcvtl {o:v}.4s, {i:v}.4h",
            o = lateout(vreg) out,
            i = in(vreg) bits,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    out
}
