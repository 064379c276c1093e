//! What a kernel is, independent of any layout or instruction set: the GEMV/GEMM function
//! types over packed weight blocks and activation blocks, the per-call tiled GEMM, the proof
//! that a kernel set may run ([`SetToken`]) and the prefetch helper of the streaming GEMVs.
//!
//! This module sits below both the layouts (`layout/`) and the kernel sets (`kernels/`); only
//! the selection table (`select.rs`) sees both and ties a layout to its kernels.

use crate::cpu::{CpuFeatures, KernelSet};

/// A GEMV: every row group in `w` (`a.len()` blocks each) times one activation row, `ROWS`
/// outputs per group.
pub type GemvFn<P, R> = fn(&[P], &[R], &mut [f32]);

/// A GEMM: one row group (`a.len()` blocks) times a group of four activation rows, `4 * ROWS`
/// outputs, activation row major (`out[m * ROWS + j]`).
pub type GemmFn<P, Q> = fn(&[P], &[Q], &mut [f32]);

/// A GEMM of two row groups with two groups of four activation rows at once, where one
/// weight decode serves eight activation rows and one activation broadcast two row groups:
/// `out[i]` receives row group `w[i]`'s 8 x `ROWS` outputs, activation row major (the four rows
/// of `a[0]`, then those of `a[1]`).
pub type WideGemmFn<P, Q> = fn([&[P]; 2], [&[Q]; 2], [&mut [f32]; 2]);

/// The kernel of a [`TiledGemm`]: `w` the [`TiledGemm::groups`] row groups of one tile, the
/// tile, and 1 to [`TiledGemm::quads`] consecutive quads (`a.len()` a multiple of the blocks per
/// row) into `out`, activation row major: `4 * quads` rows of `groups * ROWS` outputs.
pub type TiledGemmFn<P, Q> = fn(&[P], &[u64], &[Q], &mut [f32]);

/// A GEMM that first turns the packed blocks of one or more row groups into a kernel-ready
/// *tile* (decoded scales, or the weights re-laid for wider vectors), once per call, and then
/// reuses the tile for every group of four activation rows; the driver uses it when a call
/// has at least [`TiledGemm::min_quads`] such groups.
///
/// Tiles are arrays of `u64` words (8-byte aligned); kernels read them with unaligned loads.
pub struct TiledGemm<P, Q> {
    /// Row groups in one tile (a task's last groups, short of a whole tile, take the plain
    /// GEMM).
    pub groups: usize,
    /// Most quads one kernel call takes.
    pub quads: usize,
    /// Fewest quads in a call for the tiles to pay for their making.
    pub min_quads: usize,
    /// Words of one tile for rows of `nb` blocks.
    pub tile_words: fn(nb: usize) -> usize,
    /// Fills the tile of `groups` row groups (`blocks.len() == groups * nb`, `tile.len() ==
    /// tile_words(nb)`).
    pub make_tile: fn(blocks: &[P], tile: &mut [u64]),
    /// The GEMM over the tile.
    pub gemm: TiledGemmFn<P, Q>,
}

impl<P, Q> Clone for TiledGemm<P, Q> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<P, Q> Copy for TiledGemm<P, Q> {}

/// The kernels of one layout from one kernel set, chosen once when a matrix is built.
pub struct Kernels<P, R, Q> {
    /// The set the kernels come from (for reports).
    pub set: KernelSet,
    /// One activation row.
    pub gemv: GemvFn<P, R>,
    /// Four activation rows.
    pub gemm: GemmFn<P, Q>,
    /// A GEMM over per-call weight tiles, where the set has one for the layout.
    pub tiled: Option<TiledGemm<P, Q>>,
    /// A GEMM of two row groups by two quads, where the set has one for the layout.
    pub wide: Option<WideGemmFn<P, Q>>,
}

impl<P, R, Q> Clone for Kernels<P, R, Q> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<P, R, Q> Copy for Kernels<P, R, Q> {}

impl<P, R, Q> Kernels<P, R, Q> {
    /// A GEMV/GEMM pair of `set` without a tiled GEMM.
    pub const fn pair(set: KernelSet, gemv: GemvFn<P, R>, gemm: GemmFn<P, Q>) -> Self {
        Kernels {
            set,
            gemv,
            gemm,
            tiled: None,
            wide: None,
        }
    }
}

/// Proof that the CPU may run the kernels of one set: a kernel set hands out its safe kernel
/// entry points only in exchange for its token, and a token only comes from a [`CpuFeatures`]
/// that has the set (and `CpuFeatures` cannot be forged).
pub(crate) trait SetToken: Copy {
    /// The set this token proves.
    const SET: KernelSet;
    /// The token, if `cpu` may run the set.
    fn new(cpu: &CpuFeatures) -> Option<Self>;
}

/// Declares the token types of kernel sets.
macro_rules! set_tokens {
    ($( $(#[$m:meta])* $name:ident; )*) => {$(
        $(#[$m])*
        #[derive(Clone, Copy, Debug)]
        pub(crate) struct $name(());

        impl $crate::kernel_api::SetToken for $name {
            const SET: $crate::cpu::KernelSet = $crate::cpu::KernelSet::$name;
            fn new(cpu: &$crate::cpu::CpuFeatures) -> Option<Self> {
                cpu.has(Self::SET).then_some($name(()))
            }
        }
    )*};
}
pub(crate) use set_tokens;

/// Safe entry points for `#[inline(always)]` bodies compiled for one target-feature list (any
/// architecture): `$vis fn $name(args) -> ret` calls `$body(args)`
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

/// How far ahead of the block it works on a streaming GEMV asks for weights
/// ([`prefetch_l2`]): far enough to cover the memory latency at full bandwidth, near enough
/// that the lines are still in L2 when the GEMV gets there. 8 to 16 blocks of Q6_K (13 to
/// 27 KiB) measured the same.
#[cfg(target_arch = "x86_64")]
pub(crate) const GEMV_PREFETCH_BYTES: usize = 16 * 1024;

/// Asks for every cache line of the block-sized region `distance` bytes after `block` to be
/// brought into L2 (`prefetcht1`).
///
/// Prefetches into L1 (`prefetcht0`) were dropped or came too late on Zen 4: a GEMV with
/// many instructions per byte then waited on every block. Q6_K 4096x4096, batch 1, weights
/// rotated, one thread: 1.6 ms without prefetch or with `prefetcht0`, 0.45 ms with
/// `prefetcht1` 8 or 16 blocks ahead (a bare read of the same bytes: 0.38 ms).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn prefetch_l2<T>(block: &T, distance: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};
    let size = std::mem::size_of::<T>();
    // Only an address to prefetch, never dereferenced, so past the end of the matrix is fine.
    let ahead = (block as *const T as *const i8).wrapping_add(distance);
    let mut line = 0;
    while line < size {
        // SAFETY: a prefetch does not access memory architecturally and never faults.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(ahead.wrapping_add(line)) };
        line += 64;
    }
}

/// Asks for the block `blocks_ahead` blocks after `block` (in the same matrix) to be brought
/// into L2, every cache line of it, ahead of a GEMV that streams the weights.
///
/// GEMVs that stream two row groups side by side ask for the next pair (`2 nb` blocks ahead):
/// their two streams restart at every pair of groups, too short for the hardware prefetcher
/// when rows are short (640 columns of Q8_0: 85 lines per stream), which then retrains at
/// every pair. Measured on the Zen 3 VM, 2 threads, batch 1: Q8_0 65536x640 1.74 -> 1.28 ms,
/// Q5_0 2048x640 0.059 -> 0.032 ms, Q4_0 4096x4096 0.30 -> 0.22 ms (into L1 then). Into L2
/// (`prefetcht1`) rather than L1 on Zen 4, weights rotated: Q5_0 2048x640 0.038 -> 0.027 ms,
/// Q4_1 4096x4096 0.27 -> 0.15 ms, Q4_0 (AVX2 kernels) 0.26 -> 0.22 ms.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn prefetch_ahead<T>(block: &T, blocks_ahead: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};
    let size = std::mem::size_of::<T>();
    // Only an address to prefetch, never dereferenced, so past the end of the matrix is fine.
    let ahead = (block as *const T as *const i8).wrapping_add(blocks_ahead * size);
    let mut line = 0;
    while line < size {
        // SAFETY: a prefetch does not access memory architecturally and never faults.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(ahead.wrapping_add(line)) };
        line += 64;
    }
}
