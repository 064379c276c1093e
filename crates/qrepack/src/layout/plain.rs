//! The plain layout: ggml's own row layout, multiplied row by row with each type's `vec_dot`
//! against its `vec_dot_type`. Every type and every row count works here.

use crate::activation::Bf16Bits;
use crate::activation::{ActFormat, PlainBf16, PlainF16, PlainF32, PlainQ8K, PlainQ8_0, PlainQ8_1};
use crate::blocks::{
    BlockIq4Nl, BlockIq4Xs, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K,
    BlockQ5_0, BlockQ5_1, BlockQ6K, BlockQ8K, BlockQ8_0, BlockQ8_1, F16Bits,
};
use crate::cpu::CpuFeatures;
use crate::driver::{Engine, PackedEngine};
use crate::error::Error;
use crate::layout::{Kernels, Layout, PackedLayout};
use crate::shared::SharedBytes;
use crate::types::GgmlType;
use crate::vecdot;
use crate::vecdot_avx2::{self, RowKernels};

/// One weight type's plain dot product.
pub(crate) trait PlainDot: Send + Sync + 'static {
    type Weight: bytemuck::Pod + Send + Sync;
    type Act: ActFormat;
    const TYPE: GgmlType;
    fn dot(w: &[Self::Weight], a: &[<Self::Act as ActFormat>::Row]) -> f32;
    /// The SIMD kernels for `cpu`, if there are any.
    fn simd(cpu: &CpuFeatures) -> Option<RowKernels<Self::Weight, <Self::Act as ActFormat>::Row>>;
}

/// One output per weight row in `w` (`a.len()` blocks each).
fn gemv<D: PlainDot>(w: &[D::Weight], a: &[<D::Act as ActFormat>::Row], out: &mut [f32]) {
    for (o, row) in out.iter_mut().zip(w.chunks_exact(a.len().max(1))) {
        *o = D::dot(row, a);
    }
}

fn gemm<D: PlainDot>(w: &[D::Weight], a: &[<D::Act as ActFormat>::Quad], out: &mut [f32])
where
    D::Act: ActFormat<Quad = <D::Act as ActFormat>::Row>,
{
    let nb = w.len();
    for (o, row) in out.iter_mut().zip(a.chunks_exact(nb.max(1))) {
        *o = D::dot(w, row);
    }
}

/// The plain layout of the type `D`.
pub(crate) struct Plain<D>(std::marker::PhantomData<D>);

impl<D: PlainDot> PackedLayout for Plain<D>
where
    D::Act: ActFormat<Quad = <D::Act as ActFormat>::Row>,
{
    const LAYOUT: Layout = Layout::Plain;
    const WEIGHT_TYPE: GgmlType = D::TYPE;
    const ROWS: usize = 1;
    const INTERLEAVE: usize = 0;
    type Weight = D::Weight;
    type Packed = D::Weight;
    type Act = D::Act;

    fn pack(rows: &[D::Weight]) -> D::Weight {
        rows[0]
    }

    fn unpack(p: &D::Weight, rows: &mut [D::Weight]) {
        rows[0] = *p;
    }

    fn scalar_kernels() -> Kernels<Self> {
        Kernels {
            name: "scalar",
            gemv: gemv::<D>,
            gemm: gemm::<D>,
            tiled: None,
        }
    }

    fn kernels(cpu: &CpuFeatures) -> Kernels<Self> {
        match D::simd(cpu) {
            Some(k) => Kernels {
                name: "avx2",
                gemv: k.gemv,
                gemm: k.gemm,
                tiled: None,
            },
            None => Self::scalar_kernels(),
        }
    }
}

macro_rules! plain_types {
    ($($name:ident: $ty:ident, $w:ty, $act:ty, $dot:path $(, $simd:path)?;)*) => {
        $(
            pub(crate) struct $name;
            impl PlainDot for $name {
                type Weight = $w;
                type Act = $act;
                const TYPE: GgmlType = GgmlType::$ty;
                fn dot(w: &[$w], a: &[<$act as ActFormat>::Row]) -> f32 {
                    $dot(w, a)
                }
                #[allow(unused_variables, unreachable_code)]
                fn simd(cpu: &CpuFeatures) -> Option<RowKernels<$w, <$act as ActFormat>::Row>> {
                    $(return $simd(cpu);)?
                    None
                }
            }
        )*

        pub(crate) fn build(
            ty: GgmlType,
            rows: usize,
            cols: usize,
            data: &[u8],
            cpu: &CpuFeatures,
        ) -> Result<Box<dyn Engine>, Error> {
            match ty {
                $(GgmlType::$ty => Ok(Box::new(PackedEngine::<Plain<$name>>::new(rows, cols, data, cpu, None)?)),)*
            }
        }

        pub(crate) fn build_packed(
            ty: GgmlType,
            rows: usize,
            cols: usize,
            bytes: SharedBytes,
            cpu: &CpuFeatures,
        ) -> Result<Box<dyn Engine>, Error> {
            match ty {
                $(GgmlType::$ty => Ok(Box::new(PackedEngine::<Plain<$name>>::from_packed(rows, cols, bytes, cpu)?)),)*
            }
        }
    };
}

plain_types! {
    DotF32: F32, f32, PlainF32, vecdot::vec_dot_f32, vecdot_avx2::f32_rows;
    DotF16: F16, F16Bits, PlainF16, vecdot::vec_dot_f16, vecdot_avx2::f16_rows;
    DotBf16: BF16, Bf16Bits, PlainBf16, vecdot::vec_dot_bf16;
    DotQ4_0: Q4_0, BlockQ4_0, PlainQ8_0, vecdot::vec_dot_q4_0_q8_0, vecdot_avx2::q4_0_q8_0_rows;
    DotQ4_1: Q4_1, BlockQ4_1, PlainQ8_1, vecdot::vec_dot_q4_1_q8_1;
    DotQ5_0: Q5_0, BlockQ5_0, PlainQ8_0, vecdot::vec_dot_q5_0_q8_0, vecdot_avx2::q5_0_q8_0_rows;
    DotQ5_1: Q5_1, BlockQ5_1, PlainQ8_1, vecdot::vec_dot_q5_1_q8_1;
    DotQ8_0: Q8_0, BlockQ8_0, PlainQ8_0, vecdot::vec_dot_q8_0_q8_0, vecdot_avx2::q8_0_q8_0_rows;
    DotQ8_1: Q8_1, BlockQ8_1, PlainQ8_1, vecdot::vec_dot_q8_1_q8_1;
    DotQ2K: Q2_K, BlockQ2K, PlainQ8K, vecdot::vec_dot_q2_k_q8_k;
    DotQ3K: Q3_K, BlockQ3K, PlainQ8K, vecdot::vec_dot_q3_k_q8_k;
    DotQ4K: Q4_K, BlockQ4K, PlainQ8K, vecdot::vec_dot_q4_k_q8_k, vecdot_avx2::q4_k_q8_k_rows;
    DotQ5K: Q5_K, BlockQ5K, PlainQ8K, vecdot::vec_dot_q5_k_q8_k, vecdot_avx2::q5_k_q8_k_rows;
    DotQ6K: Q6_K, BlockQ6K, PlainQ8K, vecdot::vec_dot_q6_k_q8_k, vecdot_avx2::q6_k_q8_k_rows;
    DotQ8K: Q8_K, BlockQ8K, PlainQ8K, vecdot::vec_dot_q8_k_q8_k;
    DotIq4Nl: IQ4_NL, BlockIq4Nl, PlainQ8_0, vecdot::vec_dot_iq4_nl_q8_0, vecdot_avx2::iq4_nl_q8_0_rows;
    DotIq4Xs: IQ4_XS, BlockIq4Xs, PlainQ8K, vecdot::vec_dot_iq4_xs_q8_k;
}
