//! Quantization of f32 activation rows into the type a kernel consumes, exactly as ggml's x86
//! build does it.
//!
//! ggml's x86 code (which is what users of llama.cpp on this class of CPU run) computes the Q8_0
//! and Q8_1 inverse scale as `127 / amax` and rounds half to even; the generic C in the spec uses
//! `1 / d` and rounds half away from zero. The two differ only on exact ties and one-ulp scale
//! differences; qrepack follows the x86 build so that its results match ggml's `mul_mat` there.
//! Q8_K follows ggml's reference quantizer for single rows and the x86 4-row routine for quads
//! (they agree except when `+amax` and `-amax` both occur in a block).
//!
//! The functions here are the portable reference. [`ChooseQuantizer::quantizer`] hands out the
//! fastest versions for the CPU (from the kernel sets, through the selection table), which write
//! the same bytes, NaN and infinity cases included.

use bytemuck::{Pod, Zeroable};

use crate::blocks::{
    BlockQ8K, BlockQ8Kx4, BlockQ8_0, BlockQ8_0x4, BlockQ8_0x4Abs, BlockQ8_0x4Sums, BlockQ8_1,
    F16Bits,
};
use crate::cpu::CpuFeatures;
use crate::types::QK_K;

/// The activation quantizers of one format, chosen for a CPU.
///
/// Every choice produces the same bytes as the format's own `quantize_row` / `quantize_quad`
/// (the portable reference); only the speed differs. Choosing once, when a matrix is built,
/// keeps feature tests out of the per-call path.
///
/// ```
/// use bytemuck::Zeroable;
/// use qrepack::activation::{ActFormat, ChooseQuantizer, Q8_0Interleaved};
/// use qrepack::blocks::BlockQ8_0;
/// use qrepack::cpu::CpuFeatures;
///
/// let x: Vec<f32> = (0..64).map(|i| (i as f32 - 31.5) / 8.0).collect();
/// let q = Q8_0Interleaved::<8>::quantizer(CpuFeatures::get());
/// let mut fast = vec![BlockQ8_0::zeroed(); 2];
/// let mut reference = vec![BlockQ8_0::zeroed(); 2];
/// (q.row)(&x, &mut fast);
/// Q8_0Interleaved::<8>::quantize_row(&x, &mut reference);
/// assert_eq!(fast, reference);
/// ```
pub struct ActQuantizer<A: ActFormat + ?Sized> {
    /// Same contract as [`ActFormat::quantize_row`].
    pub row: fn(&[f32], &mut [A::Row]),
    /// Same contract as [`ActFormat::quantize_quad`].
    pub quad: fn([&[f32]; 4], &mut [A::Quad]),
}

// Derives would demand `A: Clone`; the fields are plain function pointers whatever `A` is.
impl<A: ActFormat + ?Sized> Clone for ActQuantizer<A> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<A: ActFormat + ?Sized> Copy for ActQuantizer<A> {}

impl<A: ActFormat> ActQuantizer<A> {
    /// The portable reference quantizers of `A`.
    pub fn scalar() -> Self {
        ActQuantizer {
            row: A::quantize_row,
            quad: A::quantize_quad,
        }
    }
}

/// An activation format whose quantizers the selection table knows (every format of the crate).
pub trait ChooseQuantizer: ActFormat + Sized {
    /// The fastest quantizers of this format for `cpu`, bit-identical to `quantize_row` and
    /// `quantize_quad`. Call once (e.g. when a matrix is built), not per row.
    fn quantizer(cpu: &CpuFeatures) -> ActQuantizer<Self>;
}

/// How one activation row (and a group of four rows) is quantized for a kernel.
///
/// `Row` is one block of one row; `Quad` is one block of four rows. Kernels of interleaved
/// layouts read quads in ggml's interleaved form; the plain path reads four ordinary rows back to
/// back (`QUAD_IS_ROWS`).
pub trait ActFormat: Send + Sync + 'static {
    /// One block of one quantized row.
    type Row: Pod + Send + Sync;
    /// One block of four quantized rows (or a `Row` when `QUAD_IS_ROWS`).
    type Quad: Pod + Send + Sync;
    /// Activations per block.
    const BLOCK: usize;
    /// True when a group of four rows is simply four rows of `Row` blocks, one after the other.
    const QUAD_IS_ROWS: bool;
    /// True when the Q8_0 blocks are rounded as ggml's ARM build rounds them
    /// ([`quantize_block_q8_0_arm`]) rather than as its x86 build does.
    const ARM_ROUNDING: bool = false;
    /// Quantizes one row (`x.len() == out.len() * BLOCK`).
    fn quantize_row(x: &[f32], out: &mut [Self::Row]);
    /// Quantizes four rows into `out`: `nb` quads, or `4 * nb` rows when `QUAD_IS_ROWS`.
    fn quantize_quad(x: [&[f32]; 4], out: &mut [Self::Quad]);
    /// Number of `Quad` items holding four rows of `nb` blocks.
    fn quad_len(nb: usize) -> usize {
        if Self::QUAD_IS_ROWS {
            4 * nb
        } else {
            nb
        }
    }
}

#[inline]
fn amax(x: &[f32]) -> f32 {
    let m = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    // A NaN anywhere poisons the block's scale (as ggml's x86 max does), so it propagates to
    // every output that reads the block instead of silently quantizing to zero.
    if x.iter().any(|v| v.is_nan()) {
        f32::NAN
    } else {
        m
    }
}

#[inline]
fn to_i8_saturating(v: f32) -> i8 {
    // Adding and removing 1.5 * 2^23 rounds to nearest even in the default FP mode, inline
    // (`round_ties_even` is a libm call on baseline x86-64). Exact for |v| < 2^22, which the
    // clamp guarantees; NaN stays NaN and `as` maps it to 0, so nothing here is UB.
    const MAGIC: f32 = 12_582_912.0;
    ((v.clamp(-128.0, 127.0) + MAGIC) - MAGIC) as i8
}

/// One Q8_0 block from 32 values, ggml x86 style.
pub fn quantize_block_q8_0(x: &[f32]) -> BlockQ8_0 {
    let m = amax(x);
    let id = if m != 0.0 { 127.0 / m } else { 0.0 };
    let mut qs = [0i8; 32];
    for (q, &v) in qs.iter_mut().zip(x) {
        *q = to_i8_saturating(v * id);
    }
    BlockQ8_0 {
        d: F16Bits::from_f32(m / 127.0),
        qs,
    }
}

/// One Q8_1 block from 32 values, ggml x86 style (`s = d * sum(q)` with the unrounded `d`).
pub fn quantize_block_q8_1(x: &[f32]) -> BlockQ8_1 {
    let b = quantize_block_q8_0(x);
    let sum: i32 = b.qs.iter().map(|&q| q as i32).sum();
    BlockQ8_1 {
        d: b.d,
        s: F16Bits::from_f32(amax(x) / 127.0 * sum as f32),
        qs: b.qs,
    }
}

/// One Q8_K block from 256 values, as ggml's reference quantizer.
pub fn quantize_block_q8_k(x: &[f32]) -> BlockQ8K {
    if let Some(poisoned) = non_finite_q8_k(x) {
        return poisoned;
    }
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    q8_k_with_scale(x, if amax != 0.0 { -127.0 / max } else { 0.0 })
}

/// A block with NaN or infinite activations gets a NaN scale (and zero quants): every output
/// reading it becomes NaN, as with Q8_0, rather than whatever the integer conversion makes of it.
fn non_finite_q8_k(x: &[f32]) -> Option<BlockQ8K> {
    x.iter().any(|v| !v.is_finite()).then(|| BlockQ8K {
        d: f32::NAN,
        ..BlockQ8K::zeroed()
    })
}

fn q8_k_with_scale(x: &[f32], iscale: f32) -> BlockQ8K {
    let mut block = BlockQ8K::zeroed();
    if iscale == 0.0 {
        return block;
    }
    for (q, &v) in block.qs.iter_mut().zip(x) {
        *q = to_i8_saturating((iscale * v).min(127.0));
    }
    for (g, sum) in block.bsums.iter_mut().enumerate() {
        *sum = block.qs[g * 16..g * 16 + 16]
            .iter()
            .map(|&q| q as i16)
            .sum();
    }
    block.d = 1.0 / iscale;
    block
}

/// The x86 4-row routine's choice of sign: positive `amax` wins ties.
fn q8_k_quad_scale(x: &[f32]) -> f32 {
    let m = amax(x);
    if m == 0.0 {
        0.0
    } else if x.contains(&m) {
        -127.0 / m
    } else {
        127.0 / m
    }
}

/// One Q8_0 block from 32 values as ggml's ARM (NEON) build quantizes it: the scale is
/// `d = amax / 127` and the quants `round_half_even(v * (1 / d))`. The x86 build multiplies by
/// `127 / amax` instead, which differs from `1 / d` by an ulp now and then, and so a quant next
/// to a rounding tie can differ: the ARM layouts' activations are their own format
/// ([`ArmQ8_0Interleaved`]).
pub fn quantize_block_q8_0_arm(x: &[f32]) -> BlockQ8_0 {
    let m = amax(x);
    let d = m / 127.0;
    // NaN compares unequal to zero, so a NaN scale gives a NaN inverse (as the C `d ? .. : 0`).
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut qs = [0i8; 32];
    for (q, &v) in qs.iter_mut().zip(x) {
        *q = to_i8_saturating(v * id);
    }
    BlockQ8_0 {
        d: F16Bits::from_f32(d),
        qs,
    }
}

/// Q8_0 activations as ggml's ARM build quantizes them ([`quantize_block_q8_0_arm`]), four
/// rows interleaved in chunks of `IL` bytes (4 for the dot-product layouts `q4_0_4x4`,
/// `iq4_nl_4x4`, `q8_0_4x4`; 8 for the i8mm layouts `q4_0_4x8`, `q8_0_4x8`).
///
/// ```
/// use qrepack::activation::{quantize_block_q8_0_arm, ActFormat, ArmQ8_0Interleaved};
/// use qrepack::blocks::BlockQ8_0;
/// use bytemuck::Zeroable;
/// let x: Vec<f32> = (0..32).map(|i| (i as f32 - 15.5) / 3.0).collect();
/// let mut row = [BlockQ8_0::zeroed()];
/// ArmQ8_0Interleaved::<4>::quantize_row(&x, &mut row);
/// assert_eq!(row[0], quantize_block_q8_0_arm(&x));
/// ```
pub struct ArmQ8_0Interleaved<const IL: usize>;

impl<const IL: usize> ActFormat for ArmQ8_0Interleaved<IL> {
    type Row = BlockQ8_0;
    type Quad = BlockQ8_0x4;
    const BLOCK: usize = 32;
    const QUAD_IS_ROWS: bool = false;
    const ARM_ROUNDING: bool = true;

    fn quantize_row(x: &[f32], out: &mut [BlockQ8_0]) {
        for (b, xs) in out.iter_mut().zip(x.chunks_exact(32)) {
            *b = quantize_block_q8_0_arm(xs);
        }
    }

    fn quantize_quad(x: [&[f32]; 4], out: &mut [BlockQ8_0x4]) {
        for (i, quad) in out.iter_mut().enumerate() {
            let blocks = x.map(|row| quantize_block_q8_0_arm(&row[i * 32..i * 32 + 32]));
            *quad = interleave_q8_0(&blocks, IL);
        }
    }
}

/// Q8_0 activations, four rows interleaved in chunks of `IL` bytes (4 or 8).
pub struct Q8_0Interleaved<const IL: usize>;
/// Q8_K activations, four rows interleaved in chunks of 8 bytes.
pub struct Q8KInterleaved;

impl<const IL: usize> ActFormat for Q8_0Interleaved<IL> {
    type Row = BlockQ8_0;
    type Quad = BlockQ8_0x4;
    const BLOCK: usize = 32;
    const QUAD_IS_ROWS: bool = false;

    fn quantize_row(x: &[f32], out: &mut [BlockQ8_0]) {
        for (b, xs) in out.iter_mut().zip(x.chunks_exact(32)) {
            *b = quantize_block_q8_0(xs);
        }
    }

    fn quantize_quad(x: [&[f32]; 4], out: &mut [BlockQ8_0x4]) {
        for (i, quad) in out.iter_mut().enumerate() {
            let blocks = x.map(|row| quantize_block_q8_0(&row[i * 32..i * 32 + 32]));
            *quad = interleave_q8_0(&blocks, IL);
        }
    }
}

/// Q8_0 activations as [`Q8_0Interleaved<8>`], each quad block carrying its rows' scales as f32
/// and their quant sums times `OFFSET` ([`BlockQ8_0x4Sums`]).
///
/// The integers are exactly Q8_0's. The extras serve kernels that read weights `q - OFFSET`
/// as unsigned `q` (Q4_0's nibbles, `OFFSET = 8`): they take the offset term off and scale each
/// row with two loads, instead of recomputing both for every row group of a call.
///
/// ```
/// use qrepack::activation::{ActFormat, InterleavedAct, Q8_0SumsInterleaved};
/// use qrepack::blocks::BlockQ8_0x4Sums;
/// use bytemuck::Zeroable;
/// let rows: Vec<Vec<f32>> =
///     (0..4).map(|m| (0..32).map(|i| (i as f32 - m as f32) / 8.0).collect()).collect();
/// let mut quad = [BlockQ8_0x4Sums::zeroed()];
/// Q8_0SumsInterleaved::<8>::quantize_quad([&rows[0], &rows[1], &rows[2], &rows[3]], &mut quad);
/// for (m, row) in Q8_0SumsInterleaved::<8>::split_quad(&quad[0]).iter().enumerate() {
///     assert_eq!(quad[0].offsets[m], 8 * row.qs.iter().map(|&q| q as i32).sum::<i32>());
///     assert_eq!(quad[0].d[m], row.d.to_f32());
/// }
/// ```
pub struct Q8_0SumsInterleaved<const OFFSET: i32>;

impl<const OFFSET: i32> ActFormat for Q8_0SumsInterleaved<OFFSET> {
    type Row = BlockQ8_0;
    type Quad = BlockQ8_0x4Sums;
    const BLOCK: usize = 32;
    const QUAD_IS_ROWS: bool = false;

    fn quantize_row(x: &[f32], out: &mut [BlockQ8_0]) {
        Q8_0Interleaved::<8>::quantize_row(x, out)
    }

    fn quantize_quad(x: [&[f32]; 4], out: &mut [BlockQ8_0x4Sums]) {
        extend_q8_0_quads(
            x,
            out,
            Q8_0Interleaved::<8>::quantize_quad,
            with_offsets::<OFFSET>,
        )
    }
}

/// Quads of a format that extends ggml's Q8_0 quads (interleaved in chunks of 8 bytes): each
/// block column quantized by `plain` (the portable or the AVX2 quantizer, which agree byte for
/// byte), then `extend`ed.
pub(crate) fn extend_q8_0_quads<Q>(
    x: [&[f32]; 4],
    out: &mut [Q],
    plain: fn([&[f32]; 4], &mut [BlockQ8_0x4]),
    extend: fn(&BlockQ8_0x4) -> Q,
) {
    for (i, quad) in out.iter_mut().enumerate() {
        let mut block = [BlockQ8_0x4::zeroed()];
        plain(x.map(|row| &row[i * 32..(i + 1) * 32]), &mut block);
        *quad = extend(&block[0]);
    }
}

/// A Q8_0 quad interleaved in chunks of 8 bytes, with its rows' f32 scales and quant sums
/// times `OFFSET`.
pub(crate) fn with_offsets<const OFFSET: i32>(quad: &BlockQ8_0x4) -> BlockQ8_0x4Sums {
    let mut sums = [0i32; 4];
    for (c, chunk) in quad.qs.chunks_exact(8).enumerate() {
        sums[c % 4] += chunk.iter().map(|&q| q as i32).sum::<i32>();
    }
    BlockQ8_0x4Sums {
        d: quad.d.map(F16Bits::to_f32),
        offsets: sums.map(|s| OFFSET * s),
        qs: quad.qs,
    }
}

/// Q8_0 activations as [`Q8_0Interleaved<8>`], each quad block carrying its rows' scales as f32,
/// 128 times their quant sums and the absolute values of its quants ([`BlockQ8_0x4Abs`]).
///
/// The integers are exactly Q8_0's. The extras serve kernels for signed weights that are never
/// -128 (IQ4_NL's levels): the AVX2 ones multiply `|a|` by `w` with the sign of `a` (`|a|` is
/// computed once per call instead of once per row group), the AVX-512 ones multiply `w + 128`
/// by `a` and take off `128 Σa`.
///
/// ```
/// use qrepack::activation::{ActFormat, InterleavedAct, Q8_0AbsInterleaved};
/// use qrepack::blocks::BlockQ8_0x4Abs;
/// use bytemuck::Zeroable;
/// let rows: Vec<Vec<f32>> =
///     (0..4).map(|m| (0..32).map(|i| (i as f32 - 9.0 * m as f32) / 8.0).collect()).collect();
/// let mut quad = [BlockQ8_0x4Abs::zeroed()];
/// Q8_0AbsInterleaved::quantize_quad([&rows[0], &rows[1], &rows[2], &rows[3]], &mut quad);
/// for (q, a) in quad[0].qs.iter().zip(&quad[0].abs) {
///     assert_eq!(*a, q.unsigned_abs());
/// }
/// let row0: i32 = quad[0].qs.chunks(8).step_by(4).flatten().map(|&q| q as i32).sum();
/// assert_eq!(quad[0].offsets[0], 128 * row0);
/// let split = Q8_0AbsInterleaved::split_quad(&quad[0]);
/// assert_eq!(split[2].d.to_f32(), quad[0].d[2]);
/// ```
pub struct Q8_0AbsInterleaved;

impl ActFormat for Q8_0AbsInterleaved {
    type Row = BlockQ8_0;
    type Quad = BlockQ8_0x4Abs;
    const BLOCK: usize = 32;
    const QUAD_IS_ROWS: bool = false;

    fn quantize_row(x: &[f32], out: &mut [BlockQ8_0]) {
        Q8_0Interleaved::<8>::quantize_row(x, out)
    }

    fn quantize_quad(x: [&[f32]; 4], out: &mut [BlockQ8_0x4Abs]) {
        extend_q8_0_quads(x, out, Q8_0Interleaved::<8>::quantize_quad, with_abs)
    }
}

/// A Q8_0 quad interleaved in chunks of 8 bytes, with its rows' f32 scales, 128 times their
/// quant sums and `|q|`.
pub(crate) fn with_abs(quad: &BlockQ8_0x4) -> BlockQ8_0x4Abs {
    let summed = with_offsets::<128>(quad);
    BlockQ8_0x4Abs {
        d: summed.d,
        offsets: summed.offsets,
        qs: quad.qs,
        abs: quad.qs.map(i8::unsigned_abs),
    }
}

/// Interleaves one block of four Q8_0 rows in chunks of `il` bytes.
pub fn interleave_q8_0(rows: &[BlockQ8_0; 4], il: usize) -> BlockQ8_0x4 {
    let mut out = BlockQ8_0x4::zeroed();
    for (m, row) in rows.iter().enumerate() {
        out.d[m] = row.d;
        for (c, chunk) in row.qs.chunks_exact(il).enumerate() {
            let dst = (c * 4 + m) * il;
            out.qs[dst..dst + il].copy_from_slice(chunk);
        }
    }
    out
}

impl ActFormat for Q8KInterleaved {
    type Row = BlockQ8K;
    type Quad = BlockQ8Kx4;
    const BLOCK: usize = QK_K;
    const QUAD_IS_ROWS: bool = false;

    fn quantize_row(x: &[f32], out: &mut [BlockQ8K]) {
        for (b, xs) in out.iter_mut().zip(x.chunks_exact(QK_K)) {
            *b = quantize_block_q8_k(xs);
        }
    }

    fn quantize_quad(x: [&[f32]; 4], out: &mut [BlockQ8Kx4]) {
        for (i, quad) in out.iter_mut().enumerate() {
            let blocks = x.map(|row| quantize_block_q8_k_quad_row(&row[i * QK_K..(i + 1) * QK_K]));
            *quad = interleave_q8_k(&blocks);
        }
    }
}

/// Q8_K activations as ggml's ARM build quantizes them for its K-quant layouts (`q4_K_8x4`,
/// `q4_K_8x8`, `q5_K_8x4`, ...): every row, in a quad or alone, with the reference quantizer
/// ([`quantize_block_q8_k`]: the scale's sign is that of the first value of largest magnitude),
/// quads interleaved in chunks of `IL` bytes (4 for the `8x4` layouts, 8 for the `8x8` ones).
/// ggml's x86 build picks the sign of quads differently ([`Q8KInterleaved`]); the products are
/// the same, the bytes are not.
///
/// ```
/// use qrepack::activation::{quantize_block_q8_k, ActFormat, ArmQ8KInterleaved, InterleavedAct};
/// use qrepack::blocks::BlockQ8Kx4;
/// use bytemuck::Zeroable;
/// let rows: Vec<Vec<f32>> =
///     (0..4).map(|m| (0..256).map(|i| ((i * 7 + m * 13) % 31) as f32 - 15.0).collect()).collect();
/// let mut quad = [BlockQ8Kx4::zeroed()];
/// ArmQ8KInterleaved::<4>::quantize_quad([&rows[0], &rows[1], &rows[2], &rows[3]], &mut quad);
/// let split = ArmQ8KInterleaved::<4>::split_quad(&quad[0]);
/// for (m, row) in rows.iter().enumerate() {
///     assert_eq!(split[m], quantize_block_q8_k(row));
/// }
/// ```
pub struct ArmQ8KInterleaved<const IL: usize>;

impl<const IL: usize> ActFormat for ArmQ8KInterleaved<IL> {
    type Row = BlockQ8K;
    type Quad = BlockQ8Kx4;
    const BLOCK: usize = QK_K;
    const QUAD_IS_ROWS: bool = false;

    fn quantize_row(x: &[f32], out: &mut [BlockQ8K]) {
        for (b, xs) in out.iter_mut().zip(x.chunks_exact(QK_K)) {
            *b = quantize_block_q8_k(xs);
        }
    }

    fn quantize_quad(x: [&[f32]; 4], out: &mut [BlockQ8Kx4]) {
        for (i, quad) in out.iter_mut().enumerate() {
            let blocks = x.map(|row| quantize_block_q8_k(&row[i * QK_K..(i + 1) * QK_K]));
            *quad = interleave_q8_k_by(&blocks, IL);
        }
    }
}

/// One row's block of a Q8_K quad (before interleaving), with the 4-row routine's scale sign.
pub(crate) fn quantize_block_q8_k_quad_row(xs: &[f32]) -> BlockQ8K {
    non_finite_q8_k(xs).unwrap_or_else(|| q8_k_with_scale(xs, q8_k_quad_scale(xs)))
}

/// Interleaves one block of four Q8_K rows in chunks of 8 bytes, with ggml's bsums order:
/// the sum of 16-group `g` of row `m` goes to `(g / 4) * 16 + m * 4 + g % 4`.
pub fn interleave_q8_k(rows: &[BlockQ8K; 4]) -> BlockQ8Kx4 {
    interleave_q8_k_by(rows, 8)
}

/// As [`interleave_q8_k`], in chunks of `il` bytes (4 or 8; the bsums order is the same).
pub fn interleave_q8_k_by(rows: &[BlockQ8K; 4], il: usize) -> BlockQ8Kx4 {
    let mut out = BlockQ8Kx4::zeroed();
    for (m, row) in rows.iter().enumerate() {
        out.d[m] = row.d;
        for (c, chunk) in row.qs.chunks_exact(il).enumerate() {
            let dst = (c * 4 + m) * il;
            out.qs[dst..dst + il].copy_from_slice(chunk);
        }
        for (g, &s) in row.bsums.iter().enumerate() {
            out.bsums[(g / 4) * 16 + m * 4 + g % 4] = s;
        }
    }
    out
}

/// Activation formats whose quads are interleaved: they can be split back into four rows.
pub trait InterleavedAct: ActFormat {
    /// The four rows of one quad block.
    fn split_quad(quad: &Self::Quad) -> [Self::Row; 4];
}

impl<const IL: usize> InterleavedAct for Q8_0Interleaved<IL> {
    fn split_quad(quad: &BlockQ8_0x4) -> [BlockQ8_0; 4] {
        let mut rows = [BlockQ8_0::zeroed(); 4];
        for (m, row) in rows.iter_mut().enumerate() {
            row.d = quad.d[m];
            for (c, chunk) in row.qs.chunks_exact_mut(IL).enumerate() {
                let src = (c * 4 + m) * IL;
                chunk.copy_from_slice(&quad.qs[src..src + IL]);
            }
        }
        rows
    }
}

impl<const IL: usize> InterleavedAct for ArmQ8_0Interleaved<IL> {
    fn split_quad(quad: &BlockQ8_0x4) -> [BlockQ8_0; 4] {
        Q8_0Interleaved::<IL>::split_quad(quad)
    }
}

/// The four Q8_0 rows of an extended quad (f32 scales `d`, quants `qs` in ggml's order).
fn split_extended_quad(d: &[f32; 4], qs: &[i8; 128]) -> [BlockQ8_0; 4] {
    // The scales were widened from f16, so narrowing them back is exact.
    let plain = BlockQ8_0x4 {
        d: d.map(F16Bits::from_f32),
        qs: *qs,
    };
    Q8_0Interleaved::<8>::split_quad(&plain)
}

impl<const OFFSET: i32> InterleavedAct for Q8_0SumsInterleaved<OFFSET> {
    fn split_quad(quad: &BlockQ8_0x4Sums) -> [BlockQ8_0; 4] {
        split_extended_quad(&quad.d, &quad.qs)
    }
}

impl InterleavedAct for Q8_0AbsInterleaved {
    fn split_quad(quad: &BlockQ8_0x4Abs) -> [BlockQ8_0; 4] {
        split_extended_quad(&quad.d, &quad.qs)
    }
}

impl InterleavedAct for Q8KInterleaved {
    fn split_quad(quad: &BlockQ8Kx4) -> [BlockQ8K; 4] {
        split_q8_k(quad, 8)
    }
}

impl<const IL: usize> InterleavedAct for ArmQ8KInterleaved<IL> {
    fn split_quad(quad: &BlockQ8Kx4) -> [BlockQ8K; 4] {
        split_q8_k(quad, IL)
    }
}

/// The four rows of a Q8_K quad interleaved in chunks of `il` bytes.
fn split_q8_k(quad: &BlockQ8Kx4, il: usize) -> [BlockQ8K; 4] {
    let mut rows = [BlockQ8K::zeroed(); 4];
    for (m, row) in rows.iter_mut().enumerate() {
        row.d = quad.d[m];
        for (c, chunk) in row.qs.chunks_exact_mut(il).enumerate() {
            let src = (c * 4 + m) * il;
            chunk.copy_from_slice(&quad.qs[src..src + il]);
        }
        for (g, s) in row.bsums.iter_mut().enumerate() {
            *s = quad.bsums[(g / 4) * 16 + m * 4 + g % 4];
        }
    }
    rows
}

macro_rules! plain_format {
    (
        $(#[$m:meta])* $name:ident, $row:ty, $block:expr, |$x:ident, $out:ident| $body:block
    ) => {
        $(#[$m])*
        pub struct $name;
        impl ActFormat for $name {
            type Row = $row;
            type Quad = $row;
            const BLOCK: usize = $block;
            const QUAD_IS_ROWS: bool = true;
            fn quantize_row($x: &[f32], $out: &mut [$row]) $body
            fn quantize_quad(x: [&[f32]; 4], out: &mut [$row]) {
                let nb = out.len() / 4;
                for (row, dst) in x.iter().zip(out.chunks_exact_mut(nb.max(1))) {
                    Self::quantize_row(row, dst);
                }
            }
        }
    };
}

mod grouped;
pub use grouped::{PlainQ8_0x2, PlainQ8_0x4};

plain_format!(
    /// Plain Q8_0 rows (the vec_dot type of Q4_0, Q5_0, Q8_0, IQ4_NL and MXFP4).
    PlainQ8_0, BlockQ8_0, 32, |x, out| {
    for (b, xs) in out.iter_mut().zip(x.chunks_exact(32)) {
        *b = quantize_block_q8_0(xs);
    }
});
plain_format!(
    /// Plain Q8_1 rows (the vec_dot type of Q4_1 and Q5_1).
    PlainQ8_1, BlockQ8_1, 32, |x, out| {
    for (b, xs) in out.iter_mut().zip(x.chunks_exact(32)) {
        *b = quantize_block_q8_1(xs);
    }
});
plain_format!(
    /// Plain Q8_K rows (the vec_dot type of the K-quants and IQ4_XS).
    PlainQ8K, BlockQ8K, QK_K, |x, out| {
    for (b, xs) in out.iter_mut().zip(x.chunks_exact(QK_K)) {
        *b = quantize_block_q8_k(xs);
    }
});
plain_format!(
    /// Activations rounded to f16 (the vec_dot type of F16).
    PlainF16, F16Bits, 1, |x, out| {
    for (h, &v) in out.iter_mut().zip(x) {
        *h = F16Bits::from_f32(v);
    }
});
plain_format!(
    /// Activations rounded to bf16 (the vec_dot type of BF16).
    PlainBf16, Bf16Bits, 1, |x, out| {
    for (h, &v) in out.iter_mut().zip(x) {
        *h = Bf16Bits::from_f32(v);
    }
});
plain_format!(
    /// Activations kept as f32.
    PlainF32, f32, 1, |x, out| {
    out.copy_from_slice(&x[..out.len()]);
});

/// A bfloat16 stored as two little-endian bytes, alignment 1.
///
/// ```
/// use qrepack::activation::Bf16Bits;
/// assert_eq!(Bf16Bits::from_f32(1.0).to_f32(), 1.0);
/// // rounds to nearest even like ggml_compute_fp32_to_bf16
/// assert_eq!(Bf16Bits::from_f32(1.0 + 1.0 / 256.0).to_f32(), 1.0);
/// ```
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct Bf16Bits(pub [u8; 2]);

impl Bf16Bits {
    /// ggml's rounding: nearest even, NaN kept quiet.
    #[inline]
    pub fn from_f32(x: f32) -> Self {
        let u = x.to_bits();
        let h = if (u & 0x7fff_ffff) > 0x7f80_0000 {
            (u >> 16) | 64
        } else {
            (u + (0x7fff + ((u >> 16) & 1))) >> 16
        };
        Bf16Bits((h as u16).to_le_bytes())
    }
    /// Exact widening to f32.
    #[inline]
    pub fn to_f32(self) -> f32 {
        f32::from_bits((u16::from_le_bytes(self.0) as u32) << 16)
    }
}

#[cfg(test)]
mod tests;
