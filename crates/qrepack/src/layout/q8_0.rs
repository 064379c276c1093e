//! Q8_0 interleaved layout `q8_0_8x8` (qrepack's own; ggml repacks Q8_0 only on ARM): eight rows,
//! quants in 8-byte chunks taken round-robin from the rows, the eight f16 scales first.

use bytemuck::Zeroable;

use crate::activation::Q8_0Interleaved;
use crate::blocks::{BlockQ8_0, BlockQ8_0x4, BlockQ8_0x8};
use crate::cpu::CpuFeatures;
use crate::layout::avx2_nibble;
use crate::layout::scalar::{self, BlockDot};
use crate::layout::{Kernels, Layout, PackedLayout};
use crate::types::GgmlType;

/// The `q8_0_8x8` layout.
pub struct Q8_0_8x8;

const ROWS: usize = 8;
const CHUNK: usize = 8;

impl BlockDot for Q8_0_8x8 {
    fn block_dot(w: &BlockQ8_0x8, a: &BlockQ8_0, acc: &mut [f32]) {
        let mut sumi = [0i32; ROWS];
        for (c, chunk) in w.qs.chunks_exact(CHUNK).enumerate() {
            let base = (c / ROWS) * CHUNK;
            sumi[c % ROWS] += chunk
                .iter()
                .zip(&a.qs[base..base + CHUNK])
                .map(|(&q, &x)| q as i32 * x as i32)
                .sum::<i32>();
        }
        let da = a.d.to_f32();
        for ((o, s), d) in acc.iter_mut().zip(sumi).zip(&w.d) {
            *o += s as f32 * d.to_f32() * da;
        }
    }
}

impl PackedLayout for Q8_0_8x8 {
    const LAYOUT: Layout = Layout::Q8_0_8x8;
    const WEIGHT_TYPE: GgmlType = GgmlType::Q8_0;
    const ROWS: usize = ROWS;
    const INTERLEAVE: usize = CHUNK;
    type Weight = BlockQ8_0;
    type Packed = BlockQ8_0x8;
    type Act = Q8_0Interleaved<8>;

    fn pack(rows: &[BlockQ8_0]) -> BlockQ8_0x8 {
        let mut out = BlockQ8_0x8::zeroed();
        for (d, r) in out.d.iter_mut().zip(rows) {
            *d = r.d;
        }
        for (c, dst) in out.qs.chunks_exact_mut(CHUNK).enumerate() {
            let base = (c / ROWS) * CHUNK;
            dst.copy_from_slice(&rows[c % ROWS].qs[base..base + CHUNK]);
        }
        out
    }

    fn unpack(p: &BlockQ8_0x8, rows: &mut [BlockQ8_0]) {
        for (r, d) in rows.iter_mut().zip(&p.d) {
            r.d = *d;
        }
        for (c, src) in p.qs.chunks_exact(CHUNK).enumerate() {
            let base = (c / ROWS) * CHUNK;
            rows[c % ROWS].qs[base..base + CHUNK].copy_from_slice(src);
        }
    }

    fn scalar_kernels() -> Kernels<Self> {
        scalar::kernels()
    }

    fn kernels(cpu: &CpuFeatures) -> Kernels<Self> {
        scalar::simd_or_scalar(avx2_nibble::kernels::<BlockQ8_0x8, BlockQ8_0x4>(cpu))
    }

    fn preference(_cpu: &CpuFeatures) -> Option<u32> {
        Some(10)
    }
}
