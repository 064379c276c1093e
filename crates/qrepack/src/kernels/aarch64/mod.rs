//! The AArch64 kernel sets: `neon` (Advanced SIMD, every AArch64 CPU: the plain path's
//! `vec_dot`s and the activation quantizers), `dotprod` (the 4-row layouts interleaved in 4-byte
//! chunks, with `sdot`) and `i8mm` (the 4-row layouts interleaved in 8-byte chunks, with `smmla`
//! for four activation rows and `sdot` for one).
//!
//! Stable Rust has no `vdotq_s32`/`vmmlaq_s32` yet, so `asm` wraps the two instructions (and the
//! f16 widening `fcvtl`); everything else is `core::arch::aarch64`.

pub(crate) mod asm;
pub(crate) mod dotprod;
pub(crate) mod i8mm;
pub(crate) mod neon;
pub(crate) mod rows4;

crate::kernel_api::set_tokens! {
    /// Proof that the CPU has NEON (Advanced SIMD).
    Neon;
    /// Proof that the CPU has NEON and the dot-product instructions (`sdot`).
    Dotprod;
    /// Proof that the CPU has NEON, `sdot` and the int8 matrix multiply (`smmla`).
    I8mm;
}

/// Safe entry points for `#[inline(always)]` bodies compiled for one target-feature list:
/// `$vis fn $name(args) -> ret` calls `$body(args)` inside a `#[target_feature]` function. The
/// safe function may only be handed out by a constructor that took the set's token.
macro_rules! target_entries {
    ($features:literal; $(
        fn $name:ident $(<$($g:ident: $b:path),*>)? ($($arg:ident: $ty:ty),*) $(-> $ret:ty)? => $body:path;
    )*) => {$(
        fn $name $(<$($g: $b),*>)? ($($arg: $ty),*) $(-> $ret)? {
            #[target_feature(enable = $features)]
            unsafe fn entry $(<$($g: $b),*>)? ($($arg: $ty),*) $(-> $ret)? {
                // SAFETY: the caller's token proves the features; the body's own contract is
                // the kernel's argument contract, which the arguments meet.
                unsafe { $body($($arg),*) }
            }
            // SAFETY: only handed out by constructors that took a token of the set that
            // `$features` describes.
            unsafe { entry $(::<$($g),*>)? ($($arg),*) }
        }
    )*};
}
pub(crate) use target_entries;
