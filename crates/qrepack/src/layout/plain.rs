//! The plain layout: ggml's own row layout, multiplied row by row with each type's `vec_dot`
//! against its `vec_dot_type`. Every type and every row count works here.

use crate::activation::Bf16Bits;
use crate::activation::{
    ActFormat, PlainBf16, PlainF16, PlainF32, PlainQ8K, PlainQ8_0, PlainQ8_0x2, PlainQ8_0x4,
    PlainQ8_1,
};
use crate::blocks::{
    BlockIq1M, BlockIq1S, BlockIq2S, BlockIq2Xs, BlockIq2Xxs, BlockIq3S, BlockIq3Xxs, BlockIq4Nl,
    BlockIq4Xs, BlockMxfp4, BlockNvfp4, BlockQ1_0, BlockQ2K, BlockQ2_0, BlockQ3K, BlockQ4K,
    BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K, BlockQ8K, BlockQ8_0, BlockQ8_1,
    BlockTq1_0, BlockTq2_0, F16Bits,
};
use crate::layout::{Layout, LayoutVisitor, PackedLayout};
use crate::types::GgmlType;

/// One weight type in ggml's row layout, with the activation format of its `vec_dot`.
pub(crate) trait PlainType: Send + Sync + 'static {
    type Weight: bytemuck::Pod + Send + Sync;
    /// The format whose rows the type's `vec_dot` takes (a quad is four rows back to back).
    type Act: ActFormat<Quad = <Self::Act as ActFormat>::Row>;
    const TYPE: GgmlType;
}

/// The plain layout of the type `D`.
pub(crate) struct Plain<D>(std::marker::PhantomData<D>);

impl<D: PlainType> PackedLayout for Plain<D> {
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
}

macro_rules! plain_types {
    ($($name:ident: $ty:ident, $w:ty, $act:ty;)*) => {
        $(
            #[doc = concat!("`", stringify!($ty), "` weights in rows.")]
            pub(crate) struct $name;
            impl PlainType for $name {
                type Weight = $w;
                type Act = $act;
                const TYPE: GgmlType = GgmlType::$ty;
            }
        )*

        /// Runs `v` with the plain layout of `ty`.
        pub(crate) fn visit<V: LayoutVisitor>(ty: GgmlType, v: V) -> V::Output {
            match ty {
                $(GgmlType::$ty => v.visit::<Plain<$name>>(),)*
            }
        }
    };
}

plain_types! {
    RowsF32: F32, f32, PlainF32;
    RowsF16: F16, F16Bits, PlainF16;
    RowsBf16: BF16, Bf16Bits, PlainBf16;
    RowsQ4_0: Q4_0, BlockQ4_0, PlainQ8_0;
    RowsQ4_1: Q4_1, BlockQ4_1, PlainQ8_1;
    RowsQ5_0: Q5_0, BlockQ5_0, PlainQ8_0;
    RowsQ5_1: Q5_1, BlockQ5_1, PlainQ8_1;
    RowsQ8_0: Q8_0, BlockQ8_0, PlainQ8_0;
    RowsQ8_1: Q8_1, BlockQ8_1, PlainQ8_1;
    RowsQ2K: Q2_K, BlockQ2K, PlainQ8K;
    RowsQ3K: Q3_K, BlockQ3K, PlainQ8K;
    RowsQ4K: Q4_K, BlockQ4K, PlainQ8K;
    RowsQ5K: Q5_K, BlockQ5K, PlainQ8K;
    RowsQ6K: Q6_K, BlockQ6K, PlainQ8K;
    RowsQ8K: Q8_K, BlockQ8K, PlainQ8K;
    RowsIq4Nl: IQ4_NL, BlockIq4Nl, PlainQ8_0;
    RowsIq4Xs: IQ4_XS, BlockIq4Xs, PlainQ8K;
    RowsIq2Xxs: IQ2_XXS, BlockIq2Xxs, PlainQ8K;
    RowsIq2Xs: IQ2_XS, BlockIq2Xs, PlainQ8K;
    RowsIq2S: IQ2_S, BlockIq2S, PlainQ8K;
    RowsIq3Xxs: IQ3_XXS, BlockIq3Xxs, PlainQ8K;
    RowsIq3S: IQ3_S, BlockIq3S, PlainQ8K;
    RowsIq1S: IQ1_S, BlockIq1S, PlainQ8K;
    RowsIq1M: IQ1_M, BlockIq1M, PlainQ8K;
    RowsTq1_0: TQ1_0, BlockTq1_0, PlainQ8K;
    RowsTq2_0: TQ2_0, BlockTq2_0, PlainQ8K;
    RowsMxfp4: MXFP4, BlockMxfp4, PlainQ8_0;
    RowsNvfp4: NVFP4, BlockNvfp4, PlainQ8_0x2;
    RowsQ1_0: Q1_0, BlockQ1_0, PlainQ8_0x4;
    RowsQ2_0: Q2_0, BlockQ2_0, PlainQ8_0x2;
}
