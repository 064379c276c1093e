//! The one generic driver: packs a matrix into any [`PackedLayout`], quantizes activations and
//! runs the layout's kernels over whole row groups on the current rayon pool.

use bytemuck::Zeroable;
use rayon::prelude::*;

use crate::activation::{ActFormat, ActQuantizer, ChooseQuantizer};
use crate::blocks::collect_blocks;
use crate::cpu::CpuFeatures;
use crate::error::Error;
use crate::kernel_api::{GemmFn, TiledGemm, WideGemmFn};
use crate::layout::{ChooseKernels, Kernels, Layout, LayoutVisitor, PackedLayout, Quad, Row};
use crate::profile::{Phase, Timer};
use crate::scratch;
use crate::shared::SharedBytes;
use crate::types::GgmlType;

/// A matrix stored in some layout, with its kernels chosen: what `QMatrix` holds.
pub(crate) trait Engine: Send + Sync {
    fn layout(&self) -> Layout;
    fn kernel_name(&self) -> &'static str;
    /// `x`: `n` rows of `cols`; `y`: `n` rows of `rows`. Lengths are checked by the caller.
    fn matmul(&self, x: &[f32], n: usize, y: &mut [f32]);
    fn to_ggml_bytes(&self) -> Vec<u8>;
    fn stored_bytes(&self) -> usize;
    /// The blocks exactly as stored in the layout.
    fn packed_bytes(&self) -> &[u8];
}

/// The GEMM of row group `g` of a task with one quad, into a 4 x ROWS tile.
type GroupGemm<'a, L> = dyn FnMut(usize, &[Quad<L>], &mut [f32]) + 'a;

/// Called with (offset, len) of source bytes that have been packed and are no longer needed.
pub(crate) type Release<'a> = dyn Fn(usize, usize) + Sync + 'a;

/// Source bytes packed between two calls of a [`Release`] callback.
const RELEASE_STEP: usize = 4 << 20;

/// Where the packed blocks live: built in memory, or borrowed from shared bytes (a memory-mapped
/// repack cache) without copying.
enum Storage<P> {
    Owned(Vec<P>),
    Shared(SharedBytes),
}

impl<P: bytemuck::Pod> Storage<P> {
    #[inline]
    fn blocks(&self) -> &[P] {
        match self {
            Storage::Owned(v) => v,
            // Shared storage is only created after `try_cast_slice` succeeded on these bytes.
            Storage::Shared(b) => bytemuck::try_cast_slice(b.as_ref()).unwrap_or(&[]),
        }
    }
}

pub(crate) struct PackedEngine<L: ChooseKernels> {
    packed: Storage<L::Packed>,
    rows: usize,
    cols: usize,
    /// Blocks per row.
    nb: usize,
    kernels: Kernels<L>,
    /// The activation quantizers for this CPU, chosen with the kernels.
    quantizer: ActQuantizer<L::Act>,
}

impl<L: ChooseKernels> PackedEngine<L> {
    /// Packs `data` (ggml row layout of `L::WEIGHT_TYPE`, already length-checked).
    pub(crate) fn new(
        rows: usize,
        cols: usize,
        data: &[u8],
        cpu: &CpuFeatures,
        release: Option<&Release<'_>>,
    ) -> Result<Self, Error> {
        let ty: GgmlType = L::WEIGHT_TYPE;
        debug_assert_eq!(ty.block_size(), L::Act::BLOCK);
        let nb = cols / ty.block_size();
        let expected = ty.matrix_bytes(rows, cols)?;
        if data.len() != expected {
            return Err(Error::Shape(format!(
                "{rows} x {cols} {ty} needs {expected} bytes, got {}",
                data.len()
            )));
        }
        let r = L::ROWS;
        let mut packed = Vec::with_capacity(rows / r * nb);
        if r == 1 {
            packed = collect_blocks::<L::Packed>(data)?;
        } else {
            let row_bytes = ty.row_bytes(cols)?;
            let group_bytes = row_bytes * r;
            let mut group_rows: Vec<Vec<L::Weight>> = Vec::with_capacity(r);
            let mut released = 0;
            for (gi, g) in data.chunks_exact(group_bytes).enumerate() {
                group_rows.clear();
                for row in g.chunks_exact(row_bytes) {
                    group_rows.push(collect_blocks::<L::Weight>(row)?);
                }
                let mut column: Vec<L::Weight> = Vec::with_capacity(r);
                for b in 0..nb {
                    column.clear();
                    column.extend(group_rows.iter().map(|row| row[b]));
                    packed.push(L::pack(&column));
                }
                // Hand back the source bytes already packed, a few MiB at a time, so a large
                // tensor is never resident twice.
                let done = (gi + 1) * group_bytes;
                if let Some(release) = release {
                    if done - released >= RELEASE_STEP || done == data.len() {
                        release(released, done - released);
                        released = done;
                    }
                }
            }
        }
        Ok(PackedEngine {
            packed: Storage::Owned(packed),
            rows,
            cols,
            nb,
            kernels: L::kernels(cpu),
            quantizer: L::Act::quantizer(cpu),
        })
    }

    /// A matrix whose bytes are already in layout `L` (e.g. from a repack cache file), used in
    /// place without copying when they are suitably aligned, copied otherwise.
    pub(crate) fn from_packed(
        rows: usize,
        cols: usize,
        bytes: SharedBytes,
        cpu: &CpuFeatures,
    ) -> Result<Self, Error> {
        let ty: GgmlType = L::WEIGHT_TYPE;
        let nb = cols / ty.block_size();
        let expected = ty.matrix_bytes(rows, cols)?;
        if bytes.len() != expected || !rows.is_multiple_of(L::ROWS) {
            return Err(Error::Shape(format!(
                "{rows} x {cols} {ty} in layout {} needs {expected} bytes, got {}",
                L::LAYOUT,
                bytes.len()
            )));
        }
        let packed = if bytemuck::try_cast_slice::<u8, L::Packed>(bytes.as_ref()).is_ok() {
            Storage::Shared(bytes)
        } else {
            Storage::Owned(collect_blocks::<L::Packed>(bytes.as_ref())?)
        };
        Ok(PackedEngine {
            packed,
            rows,
            cols,
            nb,
            kernels: L::kernels(cpu),
            quantizer: L::Act::quantizer(cpu),
        })
    }

    /// Same matrix, but with the portable kernels (for testing SIMD against scalar).
    #[allow(dead_code)]
    pub(crate) fn with_kernels(mut self, kernels: Kernels<L>) -> Self {
        self.kernels = kernels;
        self
    }

    fn quantize_activations(&self, x: &[f32], quads: &mut [Quad<L>], tail: &mut [Row<L>]) {
        let cols = self.cols;
        let quad_len = L::Act::quad_len(self.nb);
        let quantizer = self.quantizer;
        let quantize_quad = |(q, out): (usize, &mut [Quad<L>])| {
            let base = q * 4 * cols;
            let rows = [0, 1, 2, 3].map(|m| &x[base + m * cols..base + (m + 1) * cols]);
            (quantizer.quad)(rows, out);
        };
        // A few microseconds of quantization are not worth waking another thread for.
        if x.len() <= SERIAL_FLOATS {
            quads
                .chunks_mut(quad_len.max(1))
                .enumerate()
                .for_each(quantize_quad);
        } else {
            quads
                .par_chunks_mut(quad_len.max(1))
                .enumerate()
                .for_each(quantize_quad);
        }
        let first_tail = quads.len() / quad_len.max(1) * 4;
        let tail_x = &x[first_tail * cols..];
        if tail.len() <= self.nb || x.len() <= SERIAL_FLOATS {
            for (out, row) in tail
                .chunks_mut(self.nb.max(1))
                .zip(tail_x.chunks(cols.max(1)))
            {
                (quantizer.row)(row, out);
            }
        } else {
            tail.par_chunks_mut(self.nb.max(1))
                .zip(tail_x.par_chunks(cols.max(1)))
                .for_each(|(out, row)| (quantizer.row)(row, out));
        }
    }

    /// The loop nest: kernels over whole row groups, parallel over the current rayon pool.
    /// `y_t` (one wave's results, `wave_groups(n) x ROWS x n` floats, only used when n > 1)
    /// receives them by row group first.
    fn run(&self, quads: &[Quad<L>], tail: &[Row<L>], n: usize, y: &mut [f32], y_t: &mut [f32]) {
        let r = L::ROWS;
        let nb = self.nb;
        let kernels = self.kernels;

        if n == 1 {
            let per_task = self.groups_per_task(n);
            // y is one row: row groups own disjoint slices of it directly. Rayon's own split
            // (pieces of about two tasks here) measured faster than one job per task for a
            // streaming GEMV: iq4_nl 4096x4096, 2 threads, weights cold, 0.32 -> 0.26 ms.
            // The tasks are few and large, so the pieces stay balanced.
            let section = Timer::begin();
            y.par_chunks_mut(per_task * r)
                .zip(self.packed.blocks().par_chunks(per_task * nb))
                .for_each(|(y_chunk, w_chunk)| {
                    let busy = Timer::begin();
                    (kernels.gemv)(w_chunk, tail, y_chunk);
                    busy.end(Phase::TaskBusy);
                });
            section.end(Phase::KernelWall);
            return;
        }

        // Weight tiles pay off once they serve two or more groups of activation rows.
        let tiled = kernels.tiled.filter(|_| n / 4 >= 2);
        let groups_total = self.rows / r;
        let wave = self.wave_groups(n);
        let blocks = self.packed.blocks();
        // Row groups go in waves whose results fit a bounded `y_t`, each gathered into its
        // columns of `y` before the next: a 262144-row output head at batch 512 would otherwise
        // need a 512 MiB `y_t` next to its 512 MiB `y`, kept by the thread afterwards.
        for g0 in (0..groups_total).step_by(wave.max(1)) {
            let g1 = (g0 + wave).min(groups_total);
            let y_t = &mut y_t[..(g1 - g0) * r * n];
            let section = Timer::begin();
            self.run_wave(&blocks[g0 * nb..g1 * nb], quads, tail, n, tiled, &mut *y_t);
            section.end(Phase::KernelWall);
            let gather = Timer::begin();
            self.gather(y_t, g0..g1, n, y);
            gather.end(Phase::Gather);
        }
    }

    /// One wave of the loop nest: `blocks` (whole row groups) against every activation row,
    /// into `y_t` laid out [group][activation row][row of the group].
    fn run_wave(
        &self,
        blocks: &[L::Packed],
        quads: &[Quad<L>],
        tail: &[Row<L>],
        n: usize,
        tiled: Option<TiledGemm<L::Packed, Quad<L>>>,
        y_t: &mut [f32],
    ) {
        let r = L::ROWS;
        let nb = self.nb;
        let quad_len = L::Act::quad_len(nb);
        let n_quads = quads.len() / quad_len.max(1);
        let kernels = self.kernels;
        let per_task = self.groups_per_task(n);
        // `y_t` is [group][activation row][row of the group]: each task owns whole groups, and
        // a kernel writes its 4 x r tile (and a GEMV its r outputs) in place, contiguously.
        // One rayon job per task (`with_max_len(1)`): rayon otherwise splits an indexed
        // iterator into about one piece per thread and only splits further when a piece is
        // stolen while unstarted, so a thread that finishes its half early sat idle while the
        // other ran on: q8_0 batch 512 split 128/128 tasks, 88 vs 110 ms.
        y_t.par_chunks_mut(per_task * r * n)
            .zip(blocks.par_chunks(per_task * nb))
            .with_max_len(1)
            .for_each(|(yt_chunk, w_chunk)| {
                let busy = Timer::begin();
                let groups = w_chunk.len() / nb;
                // Activations outer, weights inner: the task's weights stay in L2 while each
                // group of four activation rows is read once.
                let mut sweep = |gemm_group: &mut GroupGemm<'_, L>| {
                    for q in 0..n_quads {
                        let a = &quads[q * quad_len..(q + 1) * quad_len];
                        for g in 0..groups {
                            let at = (g * n + 4 * q) * r;
                            gemm_group(g, a, &mut yt_chunk[at..at + 4 * r]);
                        }
                    }
                };
                match tiled {
                    Some(t) => {
                        let words = (t.tile_words)(nb);
                        scratch::with_tile_arena(words * groups * 8, |arena| {
                            let (tiles, _) = arena.take::<u64>(words * groups);
                            for (g, group_tile) in tiles.chunks_exact_mut(words.max(1)).enumerate()
                            {
                                (t.make_tile)(&w_chunk[g * nb..(g + 1) * nb], group_tile);
                            }
                            sweep(&mut |g, a, out| {
                                let w = &w_chunk[g * nb..(g + 1) * nb];
                                (t.gemm)(w, &tiles[g * words..(g + 1) * words], a, out)
                            });
                        });
                    }
                    None => match kernels.wide {
                        Some(wide) => sweep_wide(
                            wide,
                            kernels.gemm,
                            w_chunk,
                            nb,
                            quads,
                            quad_len,
                            n,
                            r,
                            yt_chunk,
                        ),
                        None => sweep(&mut |g, a, out| {
                            (kernels.gemm)(&w_chunk[g * nb..(g + 1) * nb], a, out)
                        }),
                    },
                }
                for (t, a) in tail.chunks_exact(nb).enumerate() {
                    for g in 0..groups {
                        let at = (g * n + 4 * n_quads + t) * r;
                        (kernels.gemv)(
                            &w_chunk[g * nb..(g + 1) * nb],
                            a,
                            &mut yt_chunk[at..at + r],
                        );
                    }
                }
                busy.end(Phase::TaskBusy);
            });
    }

    /// Copies one wave's results (`y_t` of row groups `groups`) into their columns of `y`.
    ///
    /// Output rows are gathered a block at a time: for each group the block's pieces are
    /// contiguous in `y_t`. Row by row, the pieces sit `n * r` floats apart, a power of two for
    /// power-of-two batches, and all fall into the same few cache sets.
    fn gather(&self, y_t: &[f32], groups: std::ops::Range<usize>, n: usize, y: &mut [f32]) {
        let r = L::ROWS;
        let rows = self.rows;
        let gather_block = |(c, y_block): (usize, &mut [f32])| {
            let t0 = c * GATHER_ROWS;
            let block_rows = y_block.len() / rows;
            for (w, g) in groups.clone().enumerate() {
                let src = &y_t[(w * n + t0) * r..(w * n + t0 + block_rows) * r];
                let dst = y_block[g * r..].chunks_mut(rows);
                for (piece, dst_row) in src.chunks_exact(r).zip(dst) {
                    copy_piece::<L>(piece, dst_row);
                }
            }
        };
        if y_t.len() <= SERIAL_FLOATS {
            y.chunks_mut(GATHER_ROWS * rows)
                .enumerate()
                .for_each(gather_block);
        } else {
            y.par_chunks_mut(GATHER_ROWS * rows)
                .enumerate()
                .for_each(gather_block);
        }
    }

    /// Row groups per wave for `n` activation rows: whole tasks, as few waves as keep each
    /// wave's results within `WAVE_RESULT_BYTES` (at least one task per wave), and the groups
    /// spread evenly over the waves.
    fn wave_groups(&self, n: usize) -> usize {
        let groups = (self.rows / L::ROWS).max(1);
        let per_task = self.groups_per_task(n).max(1);
        let group_result_bytes = (n * L::ROWS * std::mem::size_of::<f32>()).max(1);
        let most = (WAVE_RESULT_BYTES / group_result_bytes / per_task).max(1) * per_task;
        let waves = groups.div_ceil(most);
        groups
            .div_ceil(waves)
            .next_multiple_of(per_task)
            .min(groups)
    }

    /// Row groups handed to one rayon task. With one activation row the weights stream once, so
    /// tasks only need to be large enough to amortise scheduling; with several, a task's weights
    /// are revisited for every group of four activation rows and should stay in L2.
    fn groups_per_task(&self, n: usize) -> usize {
        let groups = (self.rows / L::ROWS).max(1);
        let threads = rayon::current_num_threads().max(1);
        let group_bytes = (L::ROWS * self.nb * std::mem::size_of::<L::Weight>()).max(1);
        // A few tasks per thread let work stealing even out a late or busy core.
        let balanced = groups.div_ceil(threads * 4);
        if n == 1 {
            // Each task costs a microsecond or so of scheduling; give it ~256 KiB of weights
            // (tens of microseconds of streaming), but as a whole number of tasks per thread,
            // at least one each: a small matrix still goes to every thread (one thread alone
            // streams at well under the machine's bandwidth), and three tasks on two threads
            // would leave one thread a third of the time idle.
            let matrix_bytes = groups * group_bytes;
            let tasks = matrix_bytes
                .div_ceil(MIN_GEMV_TASK_BYTES)
                .clamp(1, threads * 4)
                .next_multiple_of(threads)
                .min(matrix_bytes.div_ceil(MIN_GEMV_PIECE_BYTES).max(1));
            groups.div_ceil(tasks)
        } else {
            balanced.min((L2_WEIGHT_BUDGET / group_bytes).max(1))
        }
    }
}

/// The GEMM sweep of one task with a two-group, two-quad kernel: pairs of quads outside, pairs
/// of row groups inside, the odd group or quad left over by the four-row GEMM. `yt` is the
/// task's `[group][activation row][row of group]` results (`n` activation rows, `r` rows per
/// group).
#[allow(clippy::too_many_arguments)]
fn sweep_wide<P, Q>(
    wide: WideGemmFn<P, Q>,
    gemm: GemmFn<P, Q>,
    w: &[P],
    nb: usize,
    quads: &[Q],
    quad_len: usize,
    n: usize,
    r: usize,
    yt: &mut [f32],
) {
    let groups = w.len() / nb.max(1);
    let n_quads = quads.len() / quad_len.max(1);
    let quad = |q: usize| &quads[q * quad_len..(q + 1) * quad_len];
    let group = |g: usize| &w[g * nb..(g + 1) * nb];
    let mut q = 0;
    while q + 2 <= n_quads {
        let (a0, a1) = (quad(q), quad(q + 1));
        let mut g = 0;
        while g + 2 <= groups {
            // Group g's eight rows for quads q, q + 1 start at (g n + 4q) r, group g + 1's at
            // ((g + 1) n + 4q) r: disjoint, as (g n + 4q + 8) r <= (g + 1) n r.
            let (head, tail) = yt.split_at_mut(((g + 1) * n + 4 * q) * r);
            let at = (g * n + 4 * q) * r;
            let out0 = &mut head[at..at + 8 * r];
            let out1 = &mut tail[..8 * r];
            wide([group(g), group(g + 1)], [a0, a1], [out0, out1]);
            g += 2;
        }
        if g < groups {
            let at = (g * n + 4 * q) * r;
            gemm(group(g), a0, &mut yt[at..at + 4 * r]);
            gemm(group(g), a1, &mut yt[at + 4 * r..at + 8 * r]);
        }
        q += 2;
    }
    if q < n_quads {
        for g in 0..groups {
            let at = (g * n + 4 * q) * r;
            gemm(group(g), quad(q), &mut yt[at..at + 4 * r]);
        }
    }
}

/// `dst[..ROWS] = src` for one row group's piece of an output row, with the length a constant
/// of the layout (a generic `copy_from_slice` calls `memmove` for every 32 bytes).
#[inline(always)]
fn copy_piece<L: PackedLayout>(src: &[f32], dst: &mut [f32]) {
    for (d, s) in dst[..L::ROWS].iter_mut().zip(&src[..L::ROWS]) {
        *d = *s;
    }
}

/// Bytes of results one wave of row groups may hold before they are gathered into the output.
/// Large enough for the matrices of 7B-class models (11008 rows) at batch 512 to run in one
/// wave (a second wave, with its barrier, measured 1 % slower there); it bounds the scratch of
/// a 262144-row output head at batch 512 to 32 MiB instead of 512 MiB.
const WAVE_RESULT_BYTES: usize = 32 << 20;

/// Activations to quantize, or results to gather, below which one thread does it alone: about
/// five microseconds of work, the order of waking a second thread and joining it.
const SERIAL_FLOATS: usize = 32 * 1024;

/// Output rows gathered together from the per-group results (one task's worth).
const GATHER_ROWS: usize = 16;

/// Weight bytes below which a batch-1 task is not worth scheduling on its own.
const MIN_GEMV_TASK_BYTES: usize = 256 * 1024;

/// Weight bytes below which a batch-1 task is not worth waking a second thread for.
const MIN_GEMV_PIECE_BYTES: usize = 16 * 1024;

/// Weight bytes a GEMM task keeps hot while it sweeps over the activations: a fifth of a 512 KiB
/// L2, which two threads may share when the vCPUs are siblings of one core (96 KiB measured 2-3 %
/// faster than 192 KiB at batch 512 on the 2-vCPU Zen 3 VM, 48 KiB the same as 96 KiB).
const L2_WEIGHT_BUDGET: usize = 96 * 1024;

impl<L: ChooseKernels> Engine for PackedEngine<L> {
    fn layout(&self) -> Layout {
        L::LAYOUT
    }

    fn kernel_name(&self) -> &'static str {
        self.kernels.set.name()
    }

    fn matmul(&self, x: &[f32], n: usize, y: &mut [f32]) {
        if n == 0 || self.rows == 0 {
            return;
        }
        let quad_len = L::Act::quad_len(self.nb);
        let n_quads = n / 4;
        let tail_rows = n % 4;
        let y_t_len = if n == 1 {
            0
        } else {
            self.wave_groups(n) * L::ROWS * n
        };
        let bytes = scratch::arena_bytes::<Quad<L>>(n_quads * quad_len)
            + scratch::arena_bytes::<Row<L>>(tail_rows * self.nb)
            + scratch::arena_bytes::<f32>(y_t_len);
        let call = Timer::begin();
        scratch::with_arena(bytes, |arena| {
            let (quads, rest) = arena.take::<Quad<L>>(n_quads * quad_len);
            let (tail, rest) = rest.take::<Row<L>>(tail_rows * self.nb);
            let (y_t, _) = rest.take::<f32>(y_t_len);
            let quantize = Timer::begin();
            self.quantize_activations(x, quads, tail);
            quantize.end(Phase::Quantize);
            self.run(quads, tail, n, y, y_t);
        });
        call.end(Phase::Total);
    }

    fn to_ggml_bytes(&self) -> Vec<u8> {
        let r = L::ROWS;
        if r == 1 {
            return bytemuck::cast_slice(self.packed.blocks()).to_vec();
        }
        let nb = self.nb;
        let mut out: Vec<L::Weight> = vec![L::Weight::zeroed(); self.rows * nb];
        let mut column = vec![L::Weight::zeroed(); r];
        for (g, group) in self.packed.blocks().chunks_exact(nb).enumerate() {
            for (b, p) in group.iter().enumerate() {
                L::unpack(p, &mut column);
                for (j, w) in column.iter().enumerate() {
                    out[(g * r + j) * nb + b] = *w;
                }
            }
        }
        bytemuck::cast_slice(&out).to_vec()
    }

    fn packed_bytes(&self) -> &[u8] {
        bytemuck::cast_slice(self.packed.blocks())
    }

    fn stored_bytes(&self) -> usize {
        std::mem::size_of_val(self.packed.blocks())
    }
}

/// Builds the engine of `layout` for a `rows x cols` matrix of `ty` from ggml row-layout bytes,
/// with the kernels the selection table gives `cpu`.
pub(crate) fn build(
    layout: Layout,
    ty: GgmlType,
    (rows, cols): (usize, usize),
    data: &[u8],
    cpu: &CpuFeatures,
    release: Option<&Release<'_>>,
) -> Result<Box<dyn Engine>, Error> {
    struct Build<'a, 'r> {
        rows: usize,
        cols: usize,
        data: &'a [u8],
        cpu: &'a CpuFeatures,
        release: Option<&'a Release<'r>>,
    }
    impl LayoutVisitor for Build<'_, '_> {
        type Output = Result<Box<dyn Engine>, Error>;
        fn visit<L: ChooseKernels>(self) -> Self::Output {
            let engine =
                PackedEngine::<L>::new(self.rows, self.cols, self.data, self.cpu, self.release)?;
            Ok(Box::new(engine))
        }
    }
    layout.check_fits(ty, rows)?;
    layout.visit(
        ty,
        Build {
            rows,
            cols,
            data,
            cpu,
            release,
        },
    )
}

/// As [`build`], from bytes already in `layout`, used in place when possible.
pub(crate) fn build_packed(
    layout: Layout,
    ty: GgmlType,
    (rows, cols): (usize, usize),
    bytes: SharedBytes,
    cpu: &CpuFeatures,
) -> Result<Box<dyn Engine>, Error> {
    struct BuildPacked<'a> {
        rows: usize,
        cols: usize,
        bytes: SharedBytes,
        cpu: &'a CpuFeatures,
    }
    impl LayoutVisitor for BuildPacked<'_> {
        type Output = Result<Box<dyn Engine>, Error>;
        fn visit<L: ChooseKernels>(self) -> Self::Output {
            let engine =
                PackedEngine::<L>::from_packed(self.rows, self.cols, self.bytes, self.cpu)?;
            Ok(Box::new(engine))
        }
    }
    layout.check_fits(ty, rows)?;
    layout.visit(
        ty,
        BuildPacked {
            rows,
            cols,
            bytes,
            cpu,
        },
    )
}
