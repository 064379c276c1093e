//! Weight layouts: the plain ggml row layout and the interleaved ("repacked") ones.
//!
//! A layout is one type implementing [`PackedLayout`]: which ggml block it packs, how many rows
//! it interleaves, how it packs and unpacks one block column, and which activation format it
//! consumes. Layouts hold no kernels: the selection table (`select.rs`) gives each layout its
//! kernels from the kernel sets (`kernels/`), and the generic driver (`driver.rs`) runs any of
//! them. Adding a layout means writing one file with such a type, naming it once in the
//! `layouts!` table below and giving it a row in the selection table.

use std::fmt;
use std::str::FromStr;

use bytemuck::Pod;

use crate::activation::{ActFormat, ChooseQuantizer};
use crate::cpu::{CpuFeatures, KernelSet};
use crate::error::Error;
use crate::types::GgmlType;

pub(crate) mod iq4_nl;
pub(crate) mod mxfp4;
pub(crate) mod plain;
pub(crate) mod q2_k;
pub(crate) mod q4_0;
pub(crate) mod q4_1;
pub(crate) mod q4_k;
pub(crate) mod q5_0;
pub(crate) mod q5_1;
pub(crate) mod q5_k;
pub(crate) mod q6_k;
pub(crate) mod q8_0;

/// The activation row block of layout `L`.
pub type Row<L> = <<L as PackedLayout>::Act as ActFormat>::Row;
/// The activation quad block (four rows) of layout `L`.
pub type Quad<L> = <<L as PackedLayout>::Act as ActFormat>::Quad;

/// The kernels of layout `L` from one kernel set.
pub(crate) type Kernels<L> =
    crate::kernel_api::Kernels<<L as PackedLayout>::Packed, Row<L>, Quad<L>>;

/// A layout whose kernels the selection table (`select.rs`) knows: which kernel sets have
/// kernels for it, and the best of them for a CPU. Implemented there, for every row of the
/// `layouts!` table and every plain type, so a layout without a table row does not compile.
pub(crate) trait ChooseKernels: PackedLayout<Act: ChooseQuantizer> {
    /// The sets with kernels for this layout, best first, `scalar` last.
    const SETS: &'static [KernelSet];
    /// The kernels of the best set `cpu` has.
    fn kernels(cpu: &CpuFeatures) -> Kernels<Self>;
}

/// Something that runs generic code for the layout type behind a [`Layout`] value (the
/// `layouts!` table generates the dispatch, [`Layout::visit`]).
pub(crate) trait LayoutVisitor {
    type Output;
    fn visit<L: ChooseKernels>(self) -> Self::Output;
}

/// The sets of a layout type (see [`Layout::kernel_sets`]).
struct SetsOf;
impl LayoutVisitor for SetsOf {
    type Output = &'static [KernelSet];
    fn visit<L: ChooseKernels>(self) -> &'static [KernelSet] {
        L::SETS
    }
}

/// Whether a layout type's activations are rounded as ggml's ARM build does.
struct ArmRounding;
impl LayoutVisitor for ArmRounding {
    type Output = bool;
    fn visit<L: ChooseKernels>(self) -> bool {
        <L::Act as ActFormat>::ARM_ROUNDING
    }
}

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

            /// Runs `v` with the layout type behind this value (for `plain`, the plain layout of
            /// `ty`; for the others `ty` is their weight type, checked by the callers).
            pub(crate) fn visit<V: LayoutVisitor>(self, ty: GgmlType, v: V) -> V::Output {
                match self {
                    Layout::Plain => plain::visit(ty, v),
                    $(Layout::$variant => v.visit::<$imp>(),)*
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
    /// Q4_K, 8 rows, 8-byte chunks, regrouped sub-block scales (ggml's AVX2 and i8mm layout).
    Q4_K_8x8 = "q4_K_8x8" => q4_k::Q4K8x8,
    /// Q4_K, 8 rows, 4-byte chunks, regrouped sub-block scales (ggml's NEON dot-product layout).
    Q4_K_8x4 = "q4_K_8x4" => q4_k::Q4K8x4,
    /// Q8_0, 8 rows, 8-byte chunks (qrepack's own layout).
    Q8_0_8x8 = "q8_0_8x8" => q8_0::Q8_0_8x8,
    /// Q8_0, 4 rows, 4-byte chunks (ggml's NEON dot-product layout).
    Q8_0_4x4 = "q8_0_4x4" => q8_0::Q8_0_4x4,
    /// Q8_0, 4 rows, 8-byte chunks (ggml's NEON i8mm layout).
    Q8_0_4x8 = "q8_0_4x8" => q8_0::Q8_0_4x8,
    /// Q5_0, 8 rows, 8-byte chunks, fifth bits as bit planes (qrepack's own layout).
    Q5_0_8x8 = "q5_0_8x8" => q5_0::Q5_0_8x8,
    /// Q6_K, 8 rows, `ql` and `qh` in 8-byte chunks (ggml's NEON i8mm layout).
    Q6_K_8x8 = "q6_K_8x8" => q6_k::Q6K8x8,
    /// Q6_K, 8 rows, `ql` and `qh` in 4-byte chunks (ggml's NEON dot-product layout).
    Q6_K_8x4 = "q6_K_8x4" => q6_k::Q6K8x4,
    /// Q6_K, 8 rows, 8-byte chunks, quants re-packed 4 in 3 bytes (qrepack's own x86 layout).
    Q6_K_8x8_x86 = "q6_K_8x8_x86" => q6_k::Q6K8x8X86,
    /// Q4_1, 8 rows, 8-byte chunks, with interleaved Q8_1 activations (qrepack's own layout).
    Q4_1_8x8 = "q4_1_8x8" => q4_1::Q4_1_8x8,
    /// Q5_1, 8 rows, 8-byte chunks, fifth bits as bit planes, with interleaved Q8_1
    /// activations (qrepack's own layout).
    Q5_1_8x8 = "q5_1_8x8" => q5_1::Q5_1_8x8,
    /// Q5_K, 8 rows, `qs` and `qh` in 8-byte chunks (ggml's NEON i8mm layout).
    Q5_K_8x8 = "q5_K_8x8" => q5_k::Q5K8x8,
    /// Q5_K, 8 rows, `qs` and `qh` in 4-byte chunks (ggml's NEON dot-product layout).
    Q5_K_8x4 = "q5_K_8x4" => q5_k::Q5K8x4,
    /// Q5_K, 8 rows, 8-byte chunks, fifth bits as bit planes (qrepack's own x86 layout).
    Q5_K_8x8_x86 = "q5_K_8x8_x86" => q5_k::Q5K8x8X86,
    /// Q2_K, 8 rows, 8-byte chunks, (scale, min) bytes regrouped (ggml's AVX-512 layout).
    Q2_K_8x8 = "q2_K_8x8" => q2_k::Q2K8x8,
    /// IQ4_NL, 4 rows, 4-byte chunks.
    IQ4_NL_4x4 = "iq4_nl_4x4" => iq4_nl::Iq4Nl4x4,
    /// IQ4_NL, 8 rows, 8-byte chunks.
    IQ4_NL_8x8 = "iq4_nl_8x8" => iq4_nl::Iq4Nl8x8,
    /// MXFP4, 4 rows, 4-byte chunks (ggml's NEON dot-product layout).
    MXFP4_4x4 = "mxfp4_4x4" => mxfp4::Mxfp4_4x4,
    /// MXFP4, 8 rows, 8-byte chunks (ggml's AVX2 layout).
    MXFP4_8x8 = "mxfp4_8x8" => mxfp4::Mxfp4_8x8,
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

    pub(crate) fn check_fits(self, ty: GgmlType, rows: usize) -> Result<(), Error> {
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
            .filter_map(|l| l.preference(ty, cpu).map(|p| (p, l)))
            .max_by_key(|(p, _)| *p)
            .map(|(_, l)| l)
            .unwrap_or(Layout::Plain)
    }

    /// How much the layout is preferred on `cpu`: the rank of the best SIMD set that has
    /// kernels for it (`None` when only the portable kernels would run, which the plain layout
    /// does as well without repacking). ggml's order follows: 8x8 on AVX2/AVX-512, 4x8 with
    /// i8mm, 4x4 with dotprod.
    fn preference(self, ty: GgmlType, cpu: &CpuFeatures) -> Option<u8> {
        self.visit(ty, SetsOf)
            .iter()
            .copied()
            .filter(|s| *s != KernelSet::Scalar && cpu.has(*s))
            .map(KernelSet::rank)
            .max()
    }

    /// The kernel sets that have kernels for this layout holding `ty`, best first, ending with
    /// `scalar` (every layout has portable kernels).
    ///
    /// ```
    /// use qrepack::{cpu::KernelSet, GgmlType, Layout};
    /// let sets = Layout::Q4_0_8x8.kernel_sets(GgmlType::Q4_0);
    /// assert_eq!(sets.last(), Some(&KernelSet::Scalar));
    /// ```
    pub fn kernel_sets(self, ty: GgmlType) -> Vec<KernelSet> {
        match self.weight_type() {
            Some(t) if t != ty => Vec::new(),
            _ => self.visit(ty, SetsOf).to_vec(),
        }
    }

    /// The kernel set whose kernels a matrix of `ty` in this layout gets on `cpu`.
    ///
    /// ```
    /// use qrepack::{cpu::{CpuFeatures, KernelSet}, GgmlType, Layout};
    /// let set = Layout::Plain.kernel_set_for(GgmlType::Q6_K, &CpuFeatures::scalar());
    /// assert_eq!(set, KernelSet::Scalar);
    /// ```
    pub fn kernel_set_for(self, ty: GgmlType, cpu: &CpuFeatures) -> KernelSet {
        self.kernel_sets(ty)
            .into_iter()
            .find(|s| cpu.has(*s))
            .unwrap_or(KernelSet::Scalar)
    }

    /// True when the layout's Q8_0 activations are rounded as ggml's ARM build rounds them
    /// (ggml's 4-row ARM layouts, and `q4_0_8x8` on AArch64 as ggml's SVE build), false for
    /// ggml's x86 rounding.
    ///
    /// ```
    /// use qrepack::{GgmlType, Layout};
    /// assert!(Layout::Q4_0_4x8.arm_rounding(GgmlType::Q4_0));
    /// let arm = cfg!(target_arch = "aarch64");
    /// assert_eq!(Layout::Q4_0_8x8.arm_rounding(GgmlType::Q4_0), arm);
    /// ```
    pub fn arm_rounding(self, ty: GgmlType) -> bool {
        self.visit(ty, ArmRounding)
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
    if chunk == 8 {
        // the common chunk as whole words: this runs over every weight of a model at load
        let mask = u64::from_ne_bytes([xor; 8]);
        for (c, dst) in out.chunks_exact_mut(8).enumerate() {
            let at = (c / n) * 8;
            let src: [u8; 8] = rows[c % n][at..at + 8].try_into().expect("8 bytes");
            dst.copy_from_slice(&(u64::from_ne_bytes(src) ^ mask).to_ne_bytes());
        }
        return;
    }
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
