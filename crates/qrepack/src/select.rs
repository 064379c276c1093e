//! The selection table: for every layout, activation format and plain type, the kernels each
//! kernel set has for it, best set first. It is the only module that sees both the layouts and
//! the kernel sets, and the only place that ties them together.
//!
//! A matrix gets the kernels of the first row whose set the CPU has ([`CpuFeatures::has`]); the
//! `scalar` kernels close every entry, so every layout runs everywhere. Which sets appear in an
//! entry also decides auto-selection: a layout is chosen only on CPUs that have a SIMD set in its
//! entry (`Layout::best_for`), so a CPU without such kernels keeps ggml's row layout instead of
//! paying for a repack that would run portable code.
//!
//! Adding an instruction set = a folder under `kernels/` with its token and kernels, plus its
//! rows here. Adding a layout = its file under `layout/`, its `layouts!` row, its scalar block
//! product and its entry here.

use crate::activation::{
    ActQuantizer, ArmQ8KInterleaved, ArmQ8_0Interleaved, ChooseQuantizer, PlainBf16, PlainF16,
    PlainF32, PlainQ8K, PlainQ8_0, PlainQ8_0x2, PlainQ8_0x4, PlainQ8_1, Q8KInterleaved,
    Q8_0AbsInterleaved, Q8_0Interleaved, Q8_0SumsInterleaved,
};
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
use crate::blocks::BlockQ4Kx8;
#[cfg(target_arch = "aarch64")]
use crate::blocks::{
    BlockIq4Nlx4, BlockMxfp4x4, BlockQ4_0x4, BlockQ5Kx8, BlockQ6Kx8Ggml, BlockQ8_0x4,
};
#[cfg(target_arch = "x86_64")]
use crate::blocks::{
    BlockIq4Nlx8, BlockMxfp4x8, BlockQ4_0x8, BlockQ4_1x8, BlockQ5Kx8, BlockQ5_1x8, BlockQ8_0x4Abs,
    BlockQ8_0x4Sums, BlockQ8_0x8,
};
use crate::cpu::{CpuFeatures, KernelSet};
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
use crate::kernel_api::SetToken;
#[cfg(target_arch = "aarch64")]
use crate::kernels::aarch64::{self, dotprod, i8mm, neon, sve};
use crate::kernels::scalar;
#[cfg(target_arch = "x86_64")]
use crate::kernels::x86::{self, avx2, avx512, avx512bf16, avxvnni};
use crate::layout::iq4_nl::{Iq4Nl4x4, Iq4Nl8x8};
use crate::layout::mxfp4::{Mxfp4_4x4, Mxfp4_8x8};
use crate::layout::plain::{
    Plain, RowsBf16, RowsF16, RowsF32, RowsIq1M, RowsIq1S, RowsIq2S, RowsIq2Xs, RowsIq2Xxs,
    RowsIq3S, RowsIq3Xxs, RowsIq4Nl, RowsIq4Xs, RowsMxfp4, RowsNvfp4, RowsQ1_0, RowsQ2K, RowsQ2_0,
    RowsQ3K, RowsQ4K, RowsQ4_0, RowsQ4_1, RowsQ5K, RowsQ5_0, RowsQ5_1, RowsQ6K, RowsQ8K, RowsQ8_0,
    RowsQ8_1, RowsTq1_0, RowsTq2_0,
};
use crate::layout::q2_k::Q2K8x8;
use crate::layout::q4_0::{Q4_0_4x4, Q4_0_4x8, Q4_0_8x8};
use crate::layout::q4_1::{Q4_1_8x8, Q8_1Interleaved};
use crate::layout::q4_k::{Q4K8x4, Q4K8x8};
use crate::layout::q5_0::Q5_0_8x8;
use crate::layout::q5_1::Q5_1_8x8;
use crate::layout::q5_k::{Q5K8x4, Q5K8x8, Q5K8x8X86};
use crate::layout::q6_k::{Q6K8x4, Q6K8x8, Q6K8x8X86};
use crate::layout::q8_0::{Q8_0_4x4, Q8_0_4x8, Q8_0_8x8};
use crate::layout::{ChooseKernels, Kernels};

/// One entry per layout (or plain type): `Type { #[cfg] Token => constructor, ... ; scalar }`,
/// the SIMD rows best set first. Each constructor takes the set's token and returns the
/// layout's [`Kernels`].
macro_rules! kernel_table {
    ($( $ty:ty { $( #[$cfg:meta] $token:ty => $simd:expr, )* ; $scalar:expr } )*) => {$(
        impl ChooseKernels for $ty {
            const SETS: &'static [KernelSet] = &[
                $( #[$cfg] <$token as SetToken>::SET, )*
                KernelSet::Scalar,
            ];

            fn kernels(cpu: &CpuFeatures) -> Kernels<Self> {
                $(
                    #[$cfg]
                    if let Some(token) = <$token as SetToken>::new(cpu) {
                        return $simd(token);
                    }
                )*
                let _ = cpu;
                $scalar
            }
        }
    )*};
}

kernel_table! {
    // ggml's ARM layouts: 4x8 with i8mm, 4x4 with dotprod, as ggml chooses them.
    Q4_0_4x8 {
        #[cfg(target_arch = "aarch64")] aarch64::I8mm => i8mm::rows4x8_kernels::<BlockQ4_0x4>,
        ; scalar::kernels::<Q4_0_4x8>()
    }
    Q4_0_4x4 {
        #[cfg(target_arch = "aarch64")] aarch64::Dotprod => dotprod::rows4x4_kernels::<BlockQ4_0x4>,
        ; scalar::kernels::<Q4_0_4x4>()
    }
    Q8_0_4x8 {
        #[cfg(target_arch = "aarch64")] aarch64::Sve => sve::q8_0_kernels,
        #[cfg(target_arch = "aarch64")] aarch64::I8mm => i8mm::rows4x8_kernels::<BlockQ8_0x4>,
        ; scalar::kernels::<Q8_0_4x8>()
    }
    Q8_0_4x4 {
        #[cfg(target_arch = "aarch64")] aarch64::Dotprod => dotprod::rows4x4_kernels::<BlockQ8_0x4>,
        ; scalar::kernels::<Q8_0_4x4>()
    }
    // ggml's choice on ARM with SVE, i8mm and 256-bit vectors, above q4_0_4x8 (i8mm).
    Q4_0_8x8 {
        #[cfg(target_arch = "aarch64")] aarch64::Sve => sve::q4_0_kernels,
        #[cfg(target_arch = "x86_64")] x86::Avx512 => avx512::q4_0_kernels,
        #[cfg(target_arch = "x86_64")] x86::AvxVnni => avxvnni::nibble_kernels::<BlockQ4_0x8, BlockQ8_0x4Sums>,
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::nibble::q4_0_kernels,
        ; scalar::kernels::<Q4_0_8x8>()
    }
    Q4K8x8 {
        #[cfg(target_arch = "x86_64")] x86::Avx512 => avx512::q4_k_kernels,
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::k_quants::kernels::<BlockQ4Kx8>,
        #[cfg(target_arch = "aarch64")] aarch64::Sve => sve::q4_k_kernels,
        #[cfg(target_arch = "aarch64")] aarch64::I8mm => i8mm::k_quants::kernels::<BlockQ4Kx8>,
        ; scalar::kernels::<Q4K8x8>()
    }
    Q8_0_8x8 {
        #[cfg(target_arch = "x86_64")] x86::Avx512 => avx512::q8_0_kernels,
        #[cfg(target_arch = "x86_64")] x86::AvxVnni => avxvnni::nibble_kernels::<BlockQ8_0x8, BlockQ8_0x4Sums>,
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::nibble::kernels::<BlockQ8_0x8, BlockQ8_0x4Sums>,
        ; scalar::kernels::<Q8_0_8x8>()
    }
    // AVX2 measured against the plain AVX2 path: 1.5-2.0x at batch 1, 1.8-3.1x at batch >= 4.
    Q5_0_8x8 {
        #[cfg(target_arch = "x86_64")] x86::Avx512 => avx512::q5_0_kernels,
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::q5_0::kernels,
        ; scalar::kernels::<Q5_0_8x8>()
    }
    // AVX2 against the plain AVX2 path: 1.2-1.3x at batch 1, 1.6-2.1x at batch >= 4.
    Q6K8x8X86 {
        #[cfg(target_arch = "x86_64")] x86::Avx512 => avx512::q6_k_kernels,
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::q6_k::kernels,
        ; scalar::kernels::<Q6K8x8X86>()
    }
    // The plain path has no SIMD Q4_1 kernel: AVX2 is 9-14x faster at batch 1, 16-40x at >= 4.
    Q4_1_8x8 {
        #[cfg(target_arch = "x86_64")] x86::Avx512 => avx512::q4_1_kernels::<BlockQ4_1x8>,
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::q4_1::kernels::<BlockQ4_1x8>,
        ; scalar::kernels::<Q4_1_8x8>()
    }
    // Against the plain AVX2 path (4096x4096, 1 thread): 1.9-2.0x at batch 1, 2.5-2.8x at 32-512.
    Q5_1_8x8 {
        #[cfg(target_arch = "x86_64")] x86::Avx512 => avx512::q4_1_kernels::<BlockQ5_1x8>,
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::q4_1::kernels::<BlockQ5_1x8>,
        ; scalar::kernels::<Q5_1_8x8>()
    }
    // AVX2 against the plain AVX2 path: 1.06-1.14x at batch 1, 1.5-2.2x at batch >= 4.
    Q5K8x8X86 {
        #[cfg(target_arch = "x86_64")] x86::Avx512 => avx512::k_quant_kernels::<BlockQ5Kx8>,
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::k_quants::kernels::<BlockQ5Kx8>,
        ; scalar::kernels::<Q5K8x8X86>()
    }
    // ggml's AVX-512 layout, chosen on AVX2 too. Against the plain path of the same set
    // (4096x4096, 1 thread, best of 3 alternating, ms, plain vs q2_K_8x8): AVX-512 batch 1
    // 0.44 vs 0.28, 4 1.22 vs 0.54, 8 2.89 vs 1.05, 32 7.46 vs 3.38, 512 94.0 vs 51.2; AVX2
    // batch 1 0.40 vs 0.41 (best of 5; both stream the same bytes), 4 1.20 vs 0.77, 8 3.50 vs
    // 1.58, 32 9.02 vs 6.32, 512 120.6 vs 99.4.
    Q2K8x8 {
        #[cfg(target_arch = "x86_64")] x86::Avx512 => avx512::q2_k::q2_k_kernels,
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::q2_k::kernels,
        ; scalar::kernels::<Q2K8x8>()
    }
    // ggml's K-quant ARM layouts: 8x8 with i8mm, 8x4 with dotprod, as ggml chooses them.
    Q4K8x4 {
        #[cfg(target_arch = "aarch64")] aarch64::Dotprod => dotprod::k_quants::kernels::<BlockQ4Kx8>,
        ; scalar::kernels::<Q4K8x4>()
    }
    Q5K8x8 {
        #[cfg(target_arch = "aarch64")] aarch64::I8mm => i8mm::k_quants::kernels::<BlockQ5Kx8>,
        ; scalar::kernels::<Q5K8x8>()
    }
    Q5K8x4 {
        #[cfg(target_arch = "aarch64")] aarch64::Dotprod => dotprod::k_quants::kernels::<BlockQ5Kx8>,
        ; scalar::kernels::<Q5K8x4>()
    }
    Q6K8x8 {
        #[cfg(target_arch = "aarch64")] aarch64::I8mm => i8mm::k_quants::kernels::<BlockQ6Kx8Ggml>,
        ; scalar::kernels::<Q6K8x8>()
    }
    Q6K8x4 {
        #[cfg(target_arch = "aarch64")] aarch64::Dotprod => dotprod::k_quants::kernels::<BlockQ6Kx8Ggml>,
        ; scalar::kernels::<Q6K8x4>()
    }
    Iq4Nl4x4 {
        #[cfg(target_arch = "aarch64")] aarch64::Dotprod => dotprod::rows4x4_kernels::<BlockIq4Nlx4>,
        ; scalar::kernels::<Iq4Nl4x4>()
    }
    Iq4Nl8x8 {
        #[cfg(target_arch = "x86_64")] x86::Avx512 => avx512::table_kernels::<BlockIq4Nlx8, BlockQ8_0x4Abs>,
        #[cfg(target_arch = "x86_64")] x86::AvxVnni => avxvnni::nibble_kernels::<BlockIq4Nlx8, BlockQ8_0x4Abs>,
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::nibble::kernels::<BlockIq4Nlx8, BlockQ8_0x4Abs>,
        ; scalar::kernels::<Iq4Nl8x8>()
    }
    // ggml's MXFP4 layouts: 4x4 with dotprod, 8x8 with AVX2 (IQ4_NL's kernels, another table
    // and E8M0 scales).
    Mxfp4_4x4 {
        #[cfg(target_arch = "aarch64")] aarch64::Dotprod => dotprod::rows4x4_kernels::<BlockMxfp4x4>,
        ; scalar::kernels::<Mxfp4_4x4>()
    }
    // With AVX2 alone, the GEMM on unsigned weights, and from two quads on its 16-row tiles
    // (`avx2::nibble::tiles`, figures there). The GEMM against the row groups decoded per
    // call into the 8-row tiles of the plain MXFP4 rows (`avx2::q8_0_tiles`), 4096x4096, 2
    // threads, weights hot, min of 3 alternating runs, AMD EPYC Zen 3, 2026-12-07, ms: batch
    // 32 4.99 -> 4.35, 64 9.58 -> 8.78, 128 18.4 -> 17.5, 512 71.9 -> 70.5 (11008x4096 batch
    // 32 13.6 -> 12.2, 512 194 -> 196).
    Mxfp4_8x8 {
        #[cfg(target_arch = "x86_64")] x86::Avx512 => avx512::table_kernels::<BlockMxfp4x8, BlockQ8_0x4Sums>,
        #[cfg(target_arch = "x86_64")] x86::AvxVnni => avxvnni::nibble_kernels::<BlockMxfp4x8, BlockQ8_0x4Sums>,
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::nibble::mxfp4_kernels,
        ; scalar::kernels::<Mxfp4_8x8>()
    }

    Plain<RowsF32> {
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::vecdot::f32_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Neon => neon::vecdot::f32_rows,
        ; scalar::plain_kernels::<RowsF32>()
    }
    Plain<RowsF16> {
        #[cfg(target_arch = "x86_64")] x86::Avx512 => avx512::plain_f16::f16_rows,
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::plain_rows::f16_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Neon => neon::vecdot::f16_rows,
        ; scalar::plain_kernels::<RowsF16>()
    }
    Plain<RowsBf16> {
        #[cfg(target_arch = "x86_64")] x86::Avx512Bf16 => avx512bf16::bf16_rows,
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::plain_rows::bf16_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Neon => neon::plain_rows::bf16_rows,
        ; scalar::plain_kernels::<RowsBf16>()
    }
    Plain<RowsQ4_0> {
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::vecdot::q4_0_q8_0_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Neon => neon::vecdot::q4_0_rows,
        ; scalar::plain_kernels::<RowsQ4_0>()
    }
    Plain<RowsQ4_1> {
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::plain_rows::q4_1_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Neon => neon::vecdot::q4_1_rows,
        ; scalar::plain_kernels::<RowsQ4_1>()
    }
    Plain<RowsQ5_0> {
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::vecdot::q5_0_q8_0_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Neon => neon::vecdot::q5_0_rows,
        ; scalar::plain_kernels::<RowsQ5_0>()
    }
    Plain<RowsQ5_1> {
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::plain_rows::q5_1_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Neon => neon::plain_rows::q5_1_rows,
        ; scalar::plain_kernels::<RowsQ5_1>()
    }
    Plain<RowsQ8_0> {
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::vecdot::q8_0_q8_0_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Neon => neon::vecdot::q8_0_rows,
        ; scalar::plain_kernels::<RowsQ8_0>()
    }
    Plain<RowsQ8_1> {
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::plain_rows::q8_1_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Neon => neon::plain_rows::q8_1_rows,
        ; scalar::plain_kernels::<RowsQ8_1>()
    }
    Plain<RowsQ2K> {
        #[cfg(target_arch = "x86_64")] x86::Avx512 => avx512::plain_k_tiles::q2_k_rows,
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::plain_rows::q2_k_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Neon => neon::plain_rows::q2_k_rows,
        ; scalar::plain_kernels::<RowsQ2K>()
    }
    Plain<RowsQ3K> {
        #[cfg(target_arch = "x86_64")] x86::Avx512 => avx512::plain_k_tiles::q3_k_rows,
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::plain_rows::q3_k_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Neon => neon::plain_rows::q3_k_rows,
        ; scalar::plain_kernels::<RowsQ3K>()
    }
    Plain<RowsQ4K> {
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::vecdot::q4_k_q8_k_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Neon => neon::vecdot::q4_k_rows,
        ; scalar::plain_kernels::<RowsQ4K>()
    }
    Plain<RowsQ5K> {
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::vecdot::q5_k_q8_k_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Neon => neon::vecdot::q5_k_rows,
        ; scalar::plain_kernels::<RowsQ5K>()
    }
    Plain<RowsQ6K> {
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::vecdot::q6_k_q8_k_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Neon => neon::vecdot::q6_k_rows,
        ; scalar::plain_kernels::<RowsQ6K>()
    }
    Plain<RowsQ8K> {
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::plain_rows::q8_k_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Neon => neon::plain_rows::q8_k_rows,
        ; scalar::plain_kernels::<RowsQ8K>()
    }
    Plain<RowsIq4Nl> {
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::vecdot::iq4_nl_q8_0_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Neon => neon::vecdot::iq4_nl_rows,
        ; scalar::plain_kernels::<RowsIq4Nl>()
    }
    Plain<RowsIq4Xs> {
        #[cfg(target_arch = "x86_64")] x86::Avx512 => avx512::plain_k_tiles::iq4_xs_rows,
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::plain_rows::iq4_xs_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Neon => neon::plain_rows::iq4_xs_rows,
        ; scalar::plain_kernels::<RowsIq4Xs>()
    }
    // The grid, ternary and FP4 types, Q1_0 and Q2_0: AVX2 row blocks. 4096x4096, one thread,
    // weights hot, best of 30 at batch 1 in one sitting on a shared Zen 4 (noisy), ms: AVX2
    // (portable kernels, ggml 1.12.2's plain vec_dot): MXFP4 0.77 (9.0, 0.73), IQ2_XXS 1.21
    // (13, 1.11), IQ2_XS 1.45 (14, 1.06), IQ2_S 1.23 (9.8, 1.08), IQ3_XXS 1.33 (9.2, 2.0),
    // IQ3_S 1.84 (22, 1.73), IQ1_S 1.14 (8.4, 1.13), IQ1_M 1.64 (12, 1.02), TQ2_0 0.23 (3.6,
    // 0.28), TQ1_0 0.67 (4.8, 0.54), NVFP4 0.98 (11, 0.91), Q1_0 0.63 (9.0, 0.49), Q2_0 0.86
    // (14, 11.6). Batch 32 (each weight block decoded once per quad), AVX2 against ggml:
    // IQ2_XXS 17 vs 53, IQ3_S 20 vs 77, IQ1_M 19 vs 53, TQ1_0 8.9 vs 18, Q1_0 15 vs 16, NVFP4
    // 19 vs 30, MXFP4 18 vs 24.
    // From batch 8 on (TQ1_0 32; NVFP4 and Q1_0 4, see below) the blocks are decoded once per
    // call into tiles: two rows for the AVX2 GEMM (grid types), 16 rows side by side for AVX-512
    // VNNI (`grid_tiles`, `q8_0_tiles`).
    // 4096x4096, 2 threads, weights hot, best of 3 alternating on a shared Zen 4, 2026-12-06,
    // ms before -> after (q4_0_8x8 of the same set): AVX-512 batch 128 IQ2_XXS 37.3 -> 9.2,
    // IQ3_S 40.8 -> 9.6, IQ1_M 39.9 -> 9.9, TQ2_0 11.8 -> 8.9 (q4_0 6.8); batch 512 IQ2_XXS
    // 138 -> 29.5, IQ3_S 185 -> 31.1, IQ1_M 164 -> 33.9, TQ1_0 73 -> 31 (q4_0 25.7); AVX2 batch
    // 128 IQ2_XXS 35.1 -> 20.1, IQ3_S 41.4 -> 24.9 (q4_0 11.5), batch 512 IQ1_M 169 -> 82 (46).
    // Batch 1 on AVX-512 (below the tiles): IQ2_S, IQ1_M (`grid_gemv`) and TQ1_0 (`tq1_0_rows`)
    // have 512-bit GEMVs on activations prepared once per call. 2 threads, weights from DRAM
    // (`--cold-mb 1024`), best of 3 on a shared, busy Zen 4, 2026-12-06, ms AVX2 -> AVX-512
    // (ggml 1.12.2): 4096x4096 IQ2_S 0.62 -> 0.51 (0.56), IQ1_M 0.80 -> 0.60 (0.54), TQ1_0
    // 0.35 -> 0.26 (0.30); 11008x4096 IQ2_S 1.67 -> 1.37 (1.52), IQ1_M 2.11 -> 1.57 (1.51),
    // TQ1_0 0.91 -> 0.69 (0.80). IQ1_M's indices worked out ahead and IQ3_S's GEMV
    // (`grid_gemv`), 4096x4096, one thread, weights hot, best of 3 alternating on a shared,
    // busy Zen 4, 2026-12-06, GFLOP/s before -> after: IQ1_M 28.5 -> 38, IQ3_S (AVX2 before)
    // 17.8 -> 22.3; 2 threads, weights from DRAM: IQ1_M 4096x4096 0.53 ms (ggml 1.12.2 0.54).
    // On AArch64 one body per type serves NEON (smull/sadalp) and dotprod (sdot): the dotprod
    // build runs 6-43 % fewer instructions per weight block (disassembly, rustc 1.96); not timed
    // (no ARM hardware).
    Plain<RowsIq2Xxs> {
        #[cfg(target_arch = "x86_64")] x86::Avx512 => avx512::grid_tiles::iq2_xxs_rows,
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::grid::iq2_xxs_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Dotprod => neon::grid::sdot::iq2_xxs_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Neon => neon::grid::iq2_xxs_rows,
        ; scalar::plain_kernels::<RowsIq2Xxs>()
    }
    Plain<RowsIq2Xs> {
        #[cfg(target_arch = "x86_64")] x86::Avx512 => avx512::grid_tiles::iq2_xs_rows,
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::grid::iq2_xs_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Dotprod => neon::grid::sdot::iq2_xs_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Neon => neon::grid::iq2_xs_rows,
        ; scalar::plain_kernels::<RowsIq2Xs>()
    }
    Plain<RowsIq2S> {
        #[cfg(target_arch = "x86_64")] x86::Avx512 => avx512::grid_gemv::iq2_s_rows,
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::grid::iq2_s_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Dotprod => neon::grid::sdot::iq2_s_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Neon => neon::grid::iq2_s_rows,
        ; scalar::plain_kernels::<RowsIq2S>()
    }
    Plain<RowsIq3Xxs> {
        #[cfg(target_arch = "x86_64")] x86::Avx512 => avx512::grid_tiles::iq3_xxs_rows,
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::grid::iq3_xxs_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Dotprod => neon::grid::sdot::iq3_xxs_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Neon => neon::grid::iq3_xxs_rows,
        ; scalar::plain_kernels::<RowsIq3Xxs>()
    }
    Plain<RowsIq3S> {
        #[cfg(target_arch = "x86_64")] x86::Avx512 => avx512::grid_gemv::iq3_s_rows,
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::grid::iq3_s_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Dotprod => neon::grid::sdot::iq3_s_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Neon => neon::grid::iq3_s_rows,
        ; scalar::plain_kernels::<RowsIq3S>()
    }
    Plain<RowsIq1S> {
        #[cfg(target_arch = "x86_64")] x86::Avx512 => avx512::grid_tiles::iq1_s_rows,
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::grid::iq1_s_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Dotprod => neon::grid::sdot::iq1_s_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Neon => neon::grid::iq1_s_rows,
        ; scalar::plain_kernels::<RowsIq1S>()
    }
    Plain<RowsIq1M> {
        #[cfg(target_arch = "x86_64")] x86::Avx512 => avx512::grid_gemv::iq1_m_rows,
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::grid::iq1_m_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Dotprod => neon::grid::sdot::iq1_m_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Neon => neon::grid::iq1_m_rows,
        ; scalar::plain_kernels::<RowsIq1M>()
    }
    // With AVX2 alone the ternary types take 8-row tiles (`avx2::ternary_tiles`; TQ1_0 from
    // batch 8, TQ2_0 from 16): 4096x4096, 2 threads, Zen 4 capped at AVX2, 2026-12-06, ms, row
    // GEMM -> tiles (ggml `-march=haswell`): TQ1_0 batch 32 6.2 -> 3.6 (9.0), 512 88 -> 39-47
    // (148); TQ2_0 batch 32 4.0 -> 3.2 (4.0), 512 49 -> 41-45 (59). TQ1_0's AVX2 GEMV sums its
    // digits through differences of `⌊3^m b / 256⌋` against activations prepared once per call
    // (`avx2::prepared_rows`): 2 threads, weights from DRAM, best of 3, AMD EPYC Zen 3 (AVX2),
    // 2026-12-07, ms, row GEMV -> prepared (ggml 1.12.2 `-march=haswell`): 4096x4096 0.454 ->
    // 0.330 (0.357), 11008x4096 1.218 -> 0.846 (0.952).
    Plain<RowsTq1_0> {
        #[cfg(target_arch = "x86_64")] x86::Avx512 => avx512::tq1_0_rows::tq1_0_rows,
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::prepared_rows::tq1_0_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Dotprod => neon::lowbit::sdot::tq1_0_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Neon => neon::lowbit::tq1_0_rows,
        ; scalar::plain_kernels::<RowsTq1_0>()
    }
    Plain<RowsTq2_0> {
        #[cfg(target_arch = "x86_64")] x86::Avx512 => avx512::grid_tiles::tq2_0_rows,
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::ternary_tiles::tq2_0_tiled_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Dotprod => neon::lowbit::sdot::tq2_0_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Neon => neon::lowbit::tq2_0_rows,
        ; scalar::plain_kernels::<RowsTq2_0>()
    }
    Plain<RowsMxfp4> {
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::q8_0_tiles::mxfp4_tiled_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Dotprod => neon::lowbit::sdot::mxfp4_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Neon => neon::lowbit::mxfp4_rows,
        ; scalar::plain_kernels::<RowsMxfp4>()
    }
    // With AVX-512 VNNI, NVFP4 and Q1_0 take 16-row tiles from one quad on (`q8_0_tiles`), and
    // TQ2_0 its tiles from two (made by transposes of the stored quants, the offset term one
    // broadcast). 2 threads, min of 3, shared Zen 4 under other builds (noisy: the same case
    // moved by up to 2x between sittings), 2026-12-06, ms, before -> after (ggml 1.12.2, the
    // faster of repack on and off): 4096x4096 NVFP4 batch 32 9.5 -> 2.6 (14.8), 512 155 -> 37
    // (238); Q1_0 batch 32 9.9 -> 5.2 (11.2), 512 217 -> 63 (236); TQ2_0 batch 32 5.9 -> 3.4
    // (8.0); 11008x4096 NVFP4 batch 32 51 -> 14 (60), 512 688 -> 172 (869); Q1_0 batch 32 20 ->
    // 6.9 (22), 512 596 -> 176 (362); TQ2_0 batch 32 15.6 -> 7.6 (20.5). Ratios to ggml over
    // four sittings: NVFP4 0.15-0.24, Q1_0 0.16-0.49, TQ2_0 0.24-0.47. With AVX2, NVFP4 from
    // batch 8 and Q1_0 from 16 take 8-row tiles of the same form (`vpmaddubsw` in place of
    // `vpdpbusd`; see `avx2::q8_0_tiles` for the timings). Their AVX2 GEMVs run on activations
    // prepared once per call, four rows at a time (`avx2::prepared_rows`): 2 threads, weights
    // from DRAM (`--cold-mb 1024`), best of 3, AMD EPYC Zen 3 (AVX2), 2026-12-07, ms, row GEMV
    // -> prepared (ggml 1.12.2 `-march=haswell`): 4096x4096 NVFP4 0.659 -> 0.429 (0.636), Q1_0
    // 0.489 -> 0.262 (0.331); 11008x4096 NVFP4 1.145 (1.702), Q1_0 0.640 (0.904).
    Plain<RowsNvfp4> {
        #[cfg(target_arch = "x86_64")] x86::Avx512 => avx512::q8_0_tiles::nvfp4_tiled_rows,
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::prepared_rows::nvfp4_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Dotprod => neon::lowbit::sdot::nvfp4_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Neon => neon::lowbit::nvfp4_rows,
        ; scalar::plain_kernels::<RowsNvfp4>()
    }
    Plain<RowsQ1_0> {
        #[cfg(target_arch = "x86_64")] x86::Avx512 => avx512::q8_0_tiles::q1_0_tiled_rows,
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::prepared_rows::q1_0_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Dotprod => neon::lowbit::sdot::q1_0_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Neon => neon::lowbit::q1_0_rows,
        ; scalar::plain_kernels::<RowsQ1_0>()
    }
    Plain<RowsQ2_0> {
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::lowbit::q2_0_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Dotprod => neon::lowbit::sdot::q2_0_rows,
        #[cfg(target_arch = "aarch64")] aarch64::Neon => neon::lowbit::q2_0_rows,
        ; scalar::plain_kernels::<RowsQ2_0>()
    }
}

/// One entry per activation format: `[generics] Format { #[cfg] Token => constructor, ... }`;
/// the portable quantizers close every entry.
macro_rules! quantizer_table {
    ($( [$($generics:tt)*] $ty:ty { $( #[$cfg:meta] $token:ty => $simd:expr, )* } )*) => {$(
        impl<$($generics)*> ChooseQuantizer for $ty {
            fn quantizer(cpu: &CpuFeatures) -> ActQuantizer<Self> {
                $(
                    #[$cfg]
                    if let Some(token) = <$token as SetToken>::new(cpu) {
                        return $simd(token);
                    }
                )*
                let _ = cpu;
                ActQuantizer::scalar()
            }
        }
    )*};
}

quantizer_table! {
    [const IL: usize] Q8_0Interleaved<IL> {
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::quantize::q8_0_interleaved::<Self, IL>,
    }
    [const IL: usize] ArmQ8_0Interleaved<IL> {
        #[cfg(target_arch = "aarch64")] aarch64::Neon => neon::quantize::arm_q8_0_interleaved::<IL>,
    }
    [const OFFSET: i32] Q8_0SumsInterleaved<OFFSET> {
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::quantize::q8_0_sums_interleaved::<Self, OFFSET>,
    }
    [] Q8_0AbsInterleaved {
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::quantize::q8_0_abs_interleaved,
    }
    [] Q8_1Interleaved {
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::quantize::q8_1_interleaved,
    }
    [] Q8KInterleaved {
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::quantize::q8_k_interleaved,
    }
    [const IL: usize] ArmQ8KInterleaved<IL> {
        #[cfg(target_arch = "aarch64")] aarch64::Neon => neon::quantize::arm_q8_k_interleaved::<IL>,
    }
    [] PlainQ8_0 {
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::quantize::q8_0_plain,
        #[cfg(target_arch = "aarch64")] aarch64::Neon => neon::quantize::q8_0_plain,
    }
    [] PlainQ8_1 {
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::quantize::q8_1_plain,
        #[cfg(target_arch = "aarch64")] aarch64::Neon => neon::quantize::q8_1_plain,
    }
    [] PlainQ8K {
        #[cfg(target_arch = "x86_64")] x86::Avx2 => avx2::quantize::q8_k_plain,
        #[cfg(target_arch = "aarch64")] aarch64::Neon => neon::quantize::q8_k_plain,
    }
    [] PlainQ8_0x2 {}
    [] PlainQ8_0x4 {}
    [] PlainF16 {}
    [] PlainBf16 {}
    [] PlainF32 {}
}
