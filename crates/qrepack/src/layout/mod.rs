//! Weight layouts: the plain ggml row layout and the interleaved ("repacked") ones.
//!
//! A layout is one type implementing [`PackedLayout`]: which ggml block it packs, how many rows
//! it interleaves, how it packs and unpacks one block column, which activation format it
//! consumes, and its GEMV/GEMM kernels. The generic driver (`driver.rs`) runs any of them. Adding
//! a layout means writing one file with such a type and naming it once in the `layouts!` table
//! below.

use std::fmt;
use std::str::FromStr;

use bytemuck::Pod;

use crate::activation::ActFormat;
use crate::cpu::CpuFeatures;
use crate::driver::{Engine, PackedEngine, Release};
use crate::error::Error;
use crate::shared::SharedBytes;
use crate::types::GgmlType;

/// Asks for the block `blocks_ahead` blocks after `block` (in the same matrix) to be brought
/// into L1, every cache line of it, ahead of a GEMV that streams the weights.
///
/// GEMVs that stream two row groups side by side ask for the next pair (`2 nb` blocks ahead):
/// their two streams restart at every pair of groups, too short for the hardware prefetcher
/// when rows are short (640 columns of Q8_0: 85 lines per stream), which then retrains at
/// every pair. Measured on the Zen 3 VM, 2 threads, batch 1: Q8_0 65536x640 1.74 -> 1.28 ms,
/// Q5_0 2048x640 0.059 -> 0.032 ms, Q4_0 4096x4096 0.30 -> 0.22 ms.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn prefetch_ahead<T>(block: &T, blocks_ahead: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    let size = std::mem::size_of::<T>();
    // Only an address to prefetch, never dereferenced, so past the end of the matrix is fine.
    let ahead = (block as *const T as *const i8).wrapping_add(blocks_ahead * size);
    let mut line = 0;
    while line < size {
        // SAFETY: a prefetch does not access memory architecturally and never faults.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(line)) };
        line += 64;
    }
}

/// The selector and safe entry points of a kernel file whose GEMV and GEMM are written once as
/// `#[inline(always)]` bodies `imp::gemv_body` / `imp::gemm_body` over AVX2 intrinsics: an
/// AVX2+FMA+F16C build, and for GEMM the same code built with AVX-512 VL, which gives the
/// compiler 32 vector registers (no accumulator spills) on CPUs that have it.
macro_rules! avx2_kernel_entries {
    ($packed:ty, $row:ty, $quad:ty) => {
        type Gemv = fn(&[$packed], &[$row], &mut [f32]);
        type Gemm = fn(&[$packed], &[$quad], &mut [f32]);

        /// The fastest kernels for `cpu` and their name, if it has AVX2+FMA+F16C.
        pub(crate) fn kernels(cpu: &crate::cpu::CpuFeatures) -> Option<(&'static str, Gemv, Gemm)> {
            #[cfg(target_arch = "x86_64")]
            {
                if cpu.has(crate::cpu::KernelSet::Avx2) && cpu.has(crate::cpu::KernelSet::Avx512) {
                    return Some(("avx2+avx512vl", entry::gemv, entry::gemm512));
                }
                if cpu.has(crate::cpu::KernelSet::Avx2) {
                    return Some(("avx2", entry::gemv, entry::gemm));
                }
            }
            let _ = cpu;
            None
        }

        #[cfg(target_arch = "x86_64")]
        mod entry {
            use super::*;

            #[target_feature(enable = "avx2,fma,f16c")]
            unsafe fn gemv_avx2(w: &[$packed], a: &[$row], out: &mut [f32]) {
                imp::gemv_body(w, a, out)
            }

            #[target_feature(enable = "avx2,fma,f16c")]
            unsafe fn gemm_avx2(w: &[$packed], a: &[$quad], out: &mut [f32]) {
                imp::gemm_body(w, a, out)
            }

            #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
            unsafe fn gemm_avx512vl(w: &[$packed], a: &[$quad], out: &mut [f32]) {
                imp::gemm_body(w, a, out)
            }

            pub(super) fn gemv(w: &[$packed], a: &[$row], out: &mut [f32]) {
                // SAFETY: only handed out by `kernels`, which checked AVX2+FMA+F16C.
                unsafe { gemv_avx2(w, a, out) }
            }

            pub(super) fn gemm(w: &[$packed], a: &[$quad], out: &mut [f32]) {
                // SAFETY: only handed out by `kernels`, which checked AVX2+FMA+F16C.
                unsafe { gemm_avx2(w, a, out) }
            }

            pub(super) fn gemm512(w: &[$packed], a: &[$quad], out: &mut [f32]) {
                // SAFETY: only handed out by `kernels`, which checked AVX2+FMA+F16C and
                // AVX-512 F/BW/VL (with VNNI).
                unsafe { gemm_avx512vl(w, a, out) }
            }
        }
    };
}

mod avx2_nibble;
mod avx2_q4_1;
mod avx2_q4k;
mod avx2_q5_0;
mod avx2_q6k;
mod iq4_nl;
mod nibble;
mod plain;
mod q4_0;
mod q4_1;
#[cfg(test)]
pub(crate) use q4_1::Q8_1Interleaved;
mod q4_k;
mod q5_0;
mod q5_k;
mod q6_k;
mod q8_0;
mod scalar;

/// The kernels of one layout, chosen once when a matrix is built.
///
/// `gemv` multiplies one or more interleaved row groups (`ROWS` weight rows each, `a.len()`
/// blocks per row) with one quantized activation row and writes `ROWS` outputs per group. `gemm` does the same for a group of four
/// activation rows and writes `4 * ROWS` outputs, activation row major (`out[m * ROWS + j]`).
pub struct Kernels<L: PackedLayout> {
    /// Kernel family for reports, e.g. `"scalar"` or `"avx2"`.
    pub name: &'static str,
    /// One activation row.
    pub gemv: GemvFn<L>,
    /// Four activation rows.
    pub gemm: GemmFn<L>,
    /// A GEMM over per-call weight tiles, for layouts that have one on this CPU.
    pub tiled: Option<TiledGemm<L>>,
}

/// A GEMM that first turns each row group's packed blocks into a kernel-ready *tile* (decoded
/// scales, say), once per call, and then reuses the tile for every group of four activation
/// rows; the driver uses it when a call has at least two such groups.
///
/// Tiles are arrays of `u64` words (8-byte aligned); kernels read them with unaligned loads.
pub struct TiledGemm<L: PackedLayout> {
    /// Words of the tile of one row group of `nb` blocks.
    pub tile_words: fn(nb: usize) -> usize,
    /// Fills the tile of one row group (`tile.len() == tile_words(blocks.len())`).
    pub make_tile: fn(blocks: &[L::Packed], tile: &mut [u64]),
    /// As [`Kernels::gemm`], with the group's tile.
    pub gemm: TiledGemmFn<L>,
}

/// The kernel of a [`TiledGemm`].
pub type TiledGemmFn<L> = fn(
    &[<L as PackedLayout>::Packed],
    &[u64],
    &[<<L as PackedLayout>::Act as ActFormat>::Quad],
    &mut [f32],
);

impl<L: PackedLayout> Clone for TiledGemm<L> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<L: PackedLayout> Copy for TiledGemm<L> {}

/// A GEMV kernel of layout `L`.
pub type GemvFn<L> =
    fn(&[<L as PackedLayout>::Packed], &[<<L as PackedLayout>::Act as ActFormat>::Row], &mut [f32]);
/// A GEMM kernel of layout `L`.
pub type GemmFn<L> = fn(
    &[<L as PackedLayout>::Packed],
    &[<<L as PackedLayout>::Act as ActFormat>::Quad],
    &mut [f32],
);

impl<L: PackedLayout> Clone for Kernels<L> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<L: PackedLayout> Copy for Kernels<L> {}

/// Everything that describes one weight layout (see the module docs).
pub trait PackedLayout: Sized + Send + Sync + 'static {
    /// The public name of the layout.
    const LAYOUT: Layout;
    /// The ggml weight type it holds.
    const WEIGHT_TYPE: GgmlType;
    /// Weight rows interleaved into one packed block (1 for the plain layout).
    const ROWS: usize;
    /// Bytes of quants taken from one row before moving to the next.
    const INTERLEAVE: usize;
    /// The ggml block of one row.
    type Weight: Pod + Send + Sync;
    /// One block column of `ROWS` rows.
    type Packed: Pod + Send + Sync;
    /// The activation format the kernels read.
    type Act: ActFormat;

    /// Packs block `i` of each of the `ROWS` rows (`rows.len() == ROWS`).
    fn pack(rows: &[Self::Weight]) -> Self::Packed;
    /// Exact inverse of [`PackedLayout::pack`].
    fn unpack(packed: &Self::Packed, rows: &mut [Self::Weight]);
    /// The portable kernels: the reference and the fallback on every CPU.
    fn scalar_kernels() -> Kernels<Self>;
    /// The fastest kernels for `cpu`.
    fn kernels(cpu: &CpuFeatures) -> Kernels<Self> {
        let _ = cpu;
        Self::scalar_kernels()
    }
    /// How much this layout is preferred on `cpu` among the layouts of its type (higher wins;
    /// `None`: never chosen automatically).
    fn preference(cpu: &CpuFeatures) -> Option<u32> {
        let _ = cpu;
        None
    }
}

macro_rules! layouts {
    ($( $(#[$m:meta])* $variant:ident = $name:literal => $imp:ty ),* $(,)?) => {
        /// A weight layout, named as ggml names it: `<type>_<R>x<I>` interleaves `R` rows in chunks
        /// of `I` bytes. `plain` is ggml's own row layout.
        ///
        /// ```
        /// use qrepack::{GgmlType, Layout};
        /// let l: Layout = "q4_0_8x8".parse().unwrap();
        /// assert_eq!(l.rows_interleaved(), 8);
        /// assert_eq!(l.interleave_bytes(), 8);
        /// assert_eq!(l.weight_type(), Some(GgmlType::Q4_0));
        /// assert_eq!(l.to_string(), "q4_0_8x8");
        /// ```
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Layout {
            /// ggml's row layout, multiplied row by row with the type's `vec_dot`.
            Plain,
            $( $(#[$m])* $variant, )*
        }

        impl Layout {
            /// Every layout.
            pub const ALL: &'static [Layout] = &[Layout::Plain, $(Layout::$variant),*];

            /// ggml's name of the layout.
            pub const fn name(self) -> &'static str {
                match self {
                    Layout::Plain => "plain",
                    $(Layout::$variant => $name,)*
                }
            }

            /// The weight type this layout holds (`None` for `plain`, which holds any).
            pub const fn weight_type(self) -> Option<GgmlType> {
                match self {
                    Layout::Plain => None,
                    $(Layout::$variant => Some(<$imp as PackedLayout>::WEIGHT_TYPE),)*
                }
            }

            /// Rows interleaved (1 for `plain`).
            pub const fn rows_interleaved(self) -> usize {
                match self {
                    Layout::Plain => 1,
                    $(Layout::$variant => <$imp as PackedLayout>::ROWS,)*
                }
            }

            /// Bytes taken from one row per interleave step (0 for `plain`).
            pub const fn interleave_bytes(self) -> usize {
                match self {
                    Layout::Plain => 0,
                    $(Layout::$variant => <$imp as PackedLayout>::INTERLEAVE,)*
                }
            }

            fn preference(self, cpu: &CpuFeatures) -> Option<u32> {
                match self {
                    Layout::Plain => None,
                    $(Layout::$variant => <$imp as PackedLayout>::preference(cpu),)*
                }
            }

            pub(crate) fn build(
                self,
                ty: GgmlType,
                rows: usize,
                cols: usize,
                data: &[u8],
                cpu: &CpuFeatures,
                release: Option<&Release<'_>>,
            ) -> Result<Box<dyn Engine>, Error> {
                self.check_fits(ty, rows)?;
                match self {
                    Layout::Plain => plain::build(ty, rows, cols, data, cpu),
                    $(Layout::$variant => Ok(Box::new(PackedEngine::<$imp>::new(rows, cols, data, cpu, release)?)),)*
                }
            }

            /// Like `build`, but `bytes` are already in this layout; used in place when possible.
            pub(crate) fn build_packed(
                self,
                ty: GgmlType,
                rows: usize,
                cols: usize,
                bytes: SharedBytes,
                cpu: &CpuFeatures,
            ) -> Result<Box<dyn Engine>, Error> {
                self.check_fits(ty, rows)?;
                match self {
                    Layout::Plain => plain::build_packed(ty, rows, cols, bytes, cpu),
                    $(Layout::$variant => Ok(Box::new(PackedEngine::<$imp>::from_packed(rows, cols, bytes, cpu)?)),)*
                }
            }
        }
    };
}

layouts! {
    /// Q4_0, 4 rows, 4-byte chunks (ggml's NEON dot-product layout).
    Q4_0_4x4 = "q4_0_4x4" => q4_0::Q4_0_4x4,
    /// Q4_0, 4 rows, 8-byte chunks (ggml's NEON i8mm layout).
    Q4_0_4x8 = "q4_0_4x8" => q4_0::Q4_0_4x8,
    /// Q4_0, 8 rows, 8-byte chunks (ggml's AVX2 layout).
    Q4_0_8x8 = "q4_0_8x8" => q4_0::Q4_0_8x8,
    /// Q4_K, 8 rows, 8-byte chunks, regrouped sub-block scales.
    Q4_K_8x8 = "q4_K_8x8" => q4_k::Q4K8x8,
    /// Q8_0, 8 rows, 8-byte chunks (qrepack's own layout).
    Q8_0_8x8 = "q8_0_8x8" => q8_0::Q8_0_8x8,
    /// Q5_0, 8 rows, 8-byte chunks, fifth bits as bit planes (qrepack's own layout).
    Q5_0_8x8 = "q5_0_8x8" => q5_0::Q5_0_8x8,
    /// Q6_K, 8 rows, 8-byte chunks, quants re-packed 4 in 3 bytes (qrepack's own layout).
    Q6_K_8x8 = "q6_K_8x8" => q6_k::Q6K8x8,
    /// Q4_1, 8 rows, 8-byte chunks, with interleaved Q8_1 activations (qrepack's own layout).
    Q4_1_8x8 = "q4_1_8x8" => q4_1::Q4_1_8x8,
    /// Q5_K, 8 rows, 8-byte chunks, fifth bits as bit planes (qrepack's own layout).
    Q5_K_8x8 = "q5_K_8x8" => q5_k::Q5K8x8,
    /// IQ4_NL, 4 rows, 4-byte chunks.
    IQ4_NL_4x4 = "iq4_nl_4x4" => iq4_nl::Iq4Nl4x4,
    /// IQ4_NL, 8 rows, 8-byte chunks.
    IQ4_NL_8x8 = "iq4_nl_8x8" => iq4_nl::Iq4Nl8x8,
}

impl Layout {
    /// True when a matrix of `ty` with `rows` rows can be stored in this layout.
    ///
    /// ```
    /// use qrepack::{GgmlType, Layout};
    /// assert!(Layout::Q4_0_8x8.fits(GgmlType::Q4_0, 16));
    /// assert!(!Layout::Q4_0_8x8.fits(GgmlType::Q4_0, 12));
    /// assert!(!Layout::Q4_0_8x8.fits(GgmlType::Q8_0, 16));
    /// assert!(Layout::Plain.fits(GgmlType::Q6_K, 3));
    /// ```
    pub fn fits(self, ty: GgmlType, rows: usize) -> bool {
        self.check_fits(ty, rows).is_ok()
    }

    fn check_fits(self, ty: GgmlType, rows: usize) -> Result<(), Error> {
        if let Some(wt) = self.weight_type() {
            if wt != ty {
                return Err(Error::Invalid(format!(
                    "layout {self} holds {wt} weights, not {ty}"
                )));
            }
        }
        let r = self.rows_interleaved();
        if !rows.is_multiple_of(r) {
            return Err(Error::Invalid(format!(
                "layout {self} interleaves {r} rows, but the matrix has {rows} rows (not a multiple of {r})"
            )));
        }
        Ok(())
    }

    /// The layout qrepack picks for a `rows`-row matrix of `ty` on `cpu`: the most preferred
    /// interleaved layout that fits, else `plain`.
    ///
    /// ```
    /// use qrepack::{cpu::CpuFeatures, GgmlType, Layout};
    /// let cpu = CpuFeatures::get();
    /// assert_eq!(Layout::best_for(GgmlType::Q4_0, 7, cpu), Layout::Plain);
    /// assert_eq!(Layout::best_for(GgmlType::F16, 8, cpu), Layout::Plain);
    /// ```
    pub fn best_for(ty: GgmlType, rows: usize, cpu: &CpuFeatures) -> Layout {
        Layout::ALL
            .iter()
            .copied()
            .filter(|l| l.weight_type() == Some(ty) && l.fits(ty, rows))
            .filter_map(|l| l.preference(cpu).map(|p| (p, l)))
            .max_by_key(|(p, _)| *p)
            .map(|(_, l)| l)
            .unwrap_or(Layout::Plain)
    }

    /// The kernel sets that have kernels for this layout holding `ty`, best first, ending with
    /// `scalar` (every layout has portable kernels).
    ///
    /// ```
    /// use qrepack::{cpu::KernelSet, GgmlType, Layout};
    /// let sets = Layout::Q4_0_8x8.kernel_sets(GgmlType::Q4_0);
    /// assert_eq!(sets.last(), Some(&KernelSet::Scalar));
    /// ```
    pub fn kernel_sets(self, ty: GgmlType) -> Vec<crate::cpu::KernelSet> {
        let _ = ty;
        vec![crate::cpu::KernelSet::Scalar]
    }

    /// The kernel set whose kernels a matrix of `ty` in this layout gets on `cpu`.
    ///
    /// ```
    /// use qrepack::{cpu::{CpuFeatures, KernelSet}, GgmlType, Layout};
    /// let set = Layout::Plain.kernel_set_for(GgmlType::Q6_K, &CpuFeatures::scalar());
    /// assert_eq!(set, KernelSet::Scalar);
    /// ```
    pub fn kernel_set_for(self, ty: GgmlType, cpu: &CpuFeatures) -> crate::cpu::KernelSet {
        self.kernel_sets(ty)
            .into_iter()
            .find(|s| cpu.has(*s))
            .unwrap_or(crate::cpu::KernelSet::Scalar)
    }

    /// Layouts that can hold `ty` (always including `plain`).
    pub fn candidates(ty: GgmlType) -> Vec<Layout> {
        Layout::ALL
            .iter()
            .copied()
            .filter(|l| l.weight_type().is_none_or(|t| t == ty))
            .collect()
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Layout {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Layout::ALL
            .iter()
            .copied()
            .find(|l| l.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                let names: Vec<&str> = Layout::ALL.iter().map(|l| l.name()).collect();
                Error::Unsupported(format!(
                    "unknown layout '{s}' (known: {})",
                    names.join(", ")
                ))
            })
    }
}

/// Copies `INTERLEAVE`-byte chunks of each row's quants round-robin into `out`, xoring every byte
/// with `xor` (ggml's Q4_0 layouts store nibbles as `q ^ 8`, i.e. in signed form).
pub(crate) fn interleave_quants(rows: &[&[u8]], chunk: usize, xor: u8, out: &mut [u8]) {
    let n = rows.len();
    for (c, dst) in out.chunks_exact_mut(chunk).enumerate() {
        let src = &rows[c % n][(c / n) * chunk..(c / n) * chunk + chunk];
        for (d, s) in dst.iter_mut().zip(src) {
            *d = s ^ xor;
        }
    }
}

/// Inverse of [`interleave_quants`]: `rows[r]` receives its chunks back.
pub(crate) fn deinterleave_quants(packed: &[u8], chunk: usize, xor: u8, rows: &mut [&mut [u8]]) {
    let n = rows.len();
    for (c, src) in packed.chunks_exact(chunk).enumerate() {
        let dst = &mut rows[c % n][(c / n) * chunk..(c / n) * chunk + chunk];
        for (d, s) in dst.iter_mut().zip(src) {
            *d = s ^ xor;
        }
    }
}
