//! The x86-64 kernel sets: `avx2` (the 256-bit kernels of every layout, activation format and
//! plain type), `avxvnni` and `avx512` (the kernels that gain from `vpdpbusd` or from AVX-512's
//! 32 vector registers; the AVX2 bodies compiled again where that is all they need).

pub(crate) mod avx2;
pub(crate) mod avx512;
pub(crate) mod avxvnni;

crate::kernel_api::set_tokens! {
    /// Proof that the CPU has AVX2, FMA and F16C.
    Avx2;
    /// Proof that the CPU has AVX2, FMA, F16C and AVX-VNNI.
    AvxVnni;
    /// Proof that the CPU has AVX2, FMA, F16C and AVX-512 F, BW, VL and VNNI.
    Avx512;
}

/// Safe entry points for `#[inline(always)]` bodies written once over 256-bit intrinsics,
/// compiled here for one target-feature list: `$vis fn $name(args) -> ret` calls `$body(args)`
/// inside a `#[target_feature]` function. The safe function may only be handed out by a
/// constructor that took the set's token.
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

impl Avx512 {
    /// The AVX2 token of the same CPU: the AVX-512 set is only detected together with AVX2,
    /// FMA and F16C.
    pub(crate) fn avx2(self) -> Avx2 {
        Avx2(())
    }
}
