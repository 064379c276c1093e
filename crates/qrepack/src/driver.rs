//! The one generic driver: packs a matrix into any [`PackedLayout`], quantizes activations and
//! runs the layout's kernels over whole row groups on the current rayon pool.

use bytemuck::Zeroable;
use rayon::prelude::*;

use crate::activation::{ActFormat, ActQuantizer, ChooseQuantizer};
use crate::blocks::collect_blocks;
use crate::column_bands::{column_bands, ColumnBand};
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
    /// Row `row` (checked by the caller) in ggml's row layout, appended to `out`.
    fn ggml_row(&self, row: usize, out: &mut Vec<u8>);
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

/// Where the packed blocks live: built in memory (on the heap, or for large matrices in an
/// anonymous mapping backed by huge pages where the OS grants them), or borrowed from shared
/// bytes (a memory-mapped repack cache) without copying.
enum Storage<P> {
    Owned(Vec<P>),
    HugePages(memmap2::MmapMut),
    Shared(SharedBytes),
}

impl<P: bytemuck::Pod> Storage<P> {
    /// Room for `count` blocks (zeroed), to be filled through [`Storage::blocks_mut`].
    fn zeroed(count: usize) -> Storage<P> {
        let bytes = count * std::mem::size_of::<P>();
        if bytes >= HUGE_PAGE_MIN_BYTES {
            if let Ok(map) = memmap2::MmapOptions::new().len(bytes).map_anon() {
                // Only a hint: without transparent huge pages the mapping keeps 4 KiB pages.
                #[cfg(target_os = "linux")]
                let _ = map.advise(memmap2::Advice::HugePage);
                return Storage::HugePages(map);
            }
        }
        Storage::Owned(vec![P::zeroed(); count])
    }

    #[inline]
    fn blocks(&self) -> &[P] {
        match self {
            Storage::Owned(v) => v,
            // Page-aligned, and sized for whole blocks by `zeroed`.
            Storage::HugePages(m) => bytemuck::try_cast_slice(m.as_ref()).unwrap_or(&[]),
            // Shared storage is only created after `try_cast_slice` succeeded on these bytes.
            Storage::Shared(b) => bytemuck::try_cast_slice(b.as_ref()).unwrap_or(&[]),
        }
    }

    fn blocks_mut(&mut self) -> &mut [P] {
        match self {
            Storage::Owned(v) => v,
            Storage::HugePages(m) => bytemuck::try_cast_slice_mut(m.as_mut()).unwrap_or(&mut []),
            Storage::Shared(_) => &mut [],
        }
    }
}

/// Packed matrices from this size on go to huge pages: a batch-1 product streams its weights
/// from memory, and with 4 KiB pages every page costs a TLB miss. Zen 4 VM, 2 threads, weights
/// rotated, 4096x4096: q4_K 0.45 -> 0.38 ms, q4_0 0.45 -> 0.38, q8_0 0.71 -> 0.58 (best of 5).
const HUGE_PAGE_MIN_BYTES: usize = 4 << 20;

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
    /// Packs `parts` (ggml row layout of `L::WEIGHT_TYPE`: the matrix's rows, one part
    /// after the other, each holding whole groups of `L::ROWS` rows).
    pub(crate) fn new(
        rows: usize,
        cols: usize,
        parts: &[&[u8]],
        cpu: &CpuFeatures,
        release: Option<&Release<'_>>,
    ) -> Result<Self, Error> {
        let ty: GgmlType = L::WEIGHT_TYPE;
        debug_assert_eq!(ty.block_size(), L::Act::BLOCK);
        let nb = cols / ty.block_size();
        let expected = ty.matrix_bytes(rows, cols)?;
        let total: usize = parts.iter().map(|p| p.len()).sum();
        if total != expected {
            return Err(Error::Shape(format!(
                "{rows} x {cols} {ty} needs {expected} bytes, got {total}"
            )));
        }
        let r = L::ROWS;
        let row_bytes = ty.row_bytes(cols)?;
        let group_bytes = row_bytes * r;
        if let Some(p) = parts.iter().find(|p| !p.len().is_multiple_of(group_bytes)) {
            return Err(Error::Shape(format!(
                "a part of {} bytes is not whole groups of {r} rows of {row_bytes} bytes",
                p.len()
            )));
        }
        let packed = if r == 1 {
            // The ggml rows as they are, but in their own (huge-page) storage like a packed
            // layout: a batch-1 product streams these bytes from memory just the same.
            let count = total / std::mem::size_of::<L::Packed>().max(1);
            let mut plain = Storage::zeroed(count);
            let mut rest = bytemuck::cast_slice_mut::<L::Packed, u8>(plain.blocks_mut());
            for p in parts {
                let (dst, tail) = rest.split_at_mut(p.len());
                dst.copy_from_slice(p);
                rest = tail;
            }
            plain
        } else {
            let mut packed = Storage::zeroed(rows / r * nb);
            let out = packed.blocks_mut();
            let block_bytes = std::mem::size_of::<L::Weight>();
            let mut column: Vec<L::Weight> = Vec::with_capacity(r);
            let mut released = 0;
            let groups = parts.iter().flat_map(|p| p.chunks_exact(group_bytes));
            for (gi, g) in groups.enumerate() {
                // block `b` of each of the group's rows, read straight from the source bytes
                // (unaligned reads: GGUF aligns tensors, not blocks)
                for (b, slot) in out[gi * nb..(gi + 1) * nb].iter_mut().enumerate() {
                    column.clear();
                    column.extend((0..r).map(|row| {
                        let at = row * row_bytes + b * block_bytes;
                        bytemuck::pod_read_unaligned::<L::Weight>(&g[at..at + block_bytes])
                    }));
                    *slot = L::pack(&column);
                }
                // Hand back the source bytes already packed, a few MiB at a time, so a large
                // tensor is never resident twice.
                let done = (gi + 1) * group_bytes;
                if let Some(release) = release {
                    if done - released >= RELEASE_STEP || done == total {
                        release(released, done - released);
                        released = done;
                    }
                }
            }
            packed
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
    /// Each task owns whole row groups, that is a band of `y`'s columns across every
    /// activation row, and stores its kernels' tiles there directly.
    fn run(&self, quads: &[Quad<L>], tail: &[Row<L>], n: usize, y: &mut [f32]) {
        let r = L::ROWS;
        let nb = self.nb;
        let kernels = self.kernels;
        let per_task = self.groups_per_task(n);
        let blocks = self.packed.blocks();

        if n == 1 {
            // y is one row: row groups own disjoint slices of it directly. Rayon's own split
            // (pieces of about two tasks here) measured faster than one job per task for a
            // streaming GEMV: iq4_nl 4096x4096, 2 threads, weights cold, 0.32 -> 0.26 ms.
            // The tasks are few and large, so the pieces stay balanced.
            let section = Timer::begin();
            y.par_chunks_mut(per_task * r)
                .zip(blocks.par_chunks(per_task * nb))
                .for_each(|(y_chunk, w_chunk)| {
                    let busy = Timer::begin();
                    (kernels.gemv)(w_chunk, tail, y_chunk);
                    busy.end(Phase::TaskBusy);
                });
            section.end(Phase::KernelWall);
            return;
        }

        // Weight tiles pay off once they serve enough groups of activation rows.
        let tiled = kernels.tiled.filter(|t| {
            let fits = t.groups * L::ROWS <= MAX_TILE_WIDTH && t.quads <= MAX_TILE_QUADS;
            debug_assert!(fits);
            n / 4 >= t.min_quads && fits
        });
        // Tasks of whole tiles, whose tiles (re-read for every quad) stay in L2 as well.
        let per_task = tiled.map_or(per_task, |t| {
            let tile_group_bytes = ((t.tile_words)(nb) * 8 / t.groups).max(1);
            per_task
                .min((L2_TILE_BUDGET / tile_group_bytes).max(1))
                .next_multiple_of(t.groups)
        });
        let section = Timer::begin();
        // One rayon job per task (`with_max_len(1)`): rayon otherwise splits an indexed
        // iterator into about one piece per thread and only splits further when a piece is
        // stolen while unstarted, so a thread that finishes its half early sat idle while the
        // other ran on: q8_0 batch 512 split 128/128 tasks, 88 vs 110 ms.
        column_bands(y, n, self.rows, per_task * r)
            .into_par_iter()
            .zip(blocks.par_chunks(per_task * nb))
            .with_max_len(1)
            .for_each(|(mut band, w_chunk)| {
                let busy = Timer::begin();
                self.run_task(w_chunk, quads, tail, tiled, &mut band);
                busy.end(Phase::TaskBusy);
            });
        section.end(Phase::KernelWall);
    }

    /// One task of the loop nest: the row groups `w` against every activation row, into the
    /// task's band of output columns.
    fn run_task(
        &self,
        w: &[L::Packed],
        quads: &[Quad<L>],
        tail: &[Row<L>],
        tiled: Option<TiledGemm<L::Packed, Quad<L>>>,
        band: &mut ColumnBand<'_>,
    ) {
        let r = L::ROWS;
        let nb = self.nb;
        let quad_len = L::Act::quad_len(nb);
        let n_quads = quads.len() / quad_len.max(1);
        let kernels = self.kernels;
        let groups = w.len() / nb;
        let group = |g: usize| &w[g * nb..(g + 1) * nb];
        // Activations outer, weights inner: the task's weights stay in L2 while each group of
        // four activation rows is read once.
        let sweep = |band: &mut ColumnBand<'_>, gemm_group: &mut GroupGemm<'_, L>| {
            let mut tile = [0.0f32; 4 * MAX_ROWS];
            let tile = &mut tile[..4 * r];
            for q in 0..n_quads {
                let a = &quads[q * quad_len..(q + 1) * quad_len];
                for g in 0..groups {
                    gemm_group(g, a, tile);
                    store_tile::<L>(band, 4 * q, g, tile);
                }
            }
        };
        match tiled {
            Some(t) => {
                let words = (t.tile_words)(nb);
                // Whole tiles; the last groups, short of one, take the plain GEMM.
                let n_tiles = groups / t.groups;
                let tile_groups = |i: usize| &w[i * t.groups * nb..(i + 1) * t.groups * nb];
                scratch::with_tile_arena(words * n_tiles * 8, |arena| {
                    let (tiles, _) = arena.take::<u64>(words * n_tiles);
                    for (i, tile) in tiles.chunks_exact_mut(words.max(1)).enumerate() {
                        (t.make_tile)(tile_groups(i), tile);
                    }
                    let mut out = [0.0f32; 4 * MAX_TILE_WIDTH * MAX_TILE_QUADS];
                    let width = t.groups * r;
                    for q in (0..n_quads).step_by(t.quads) {
                        let quads_here = t.quads.min(n_quads - q);
                        let a = &quads[q * quad_len..(q + quads_here) * quad_len];
                        let out = &mut out[..4 * quads_here * width];
                        for (i, tile) in tiles.chunks_exact(words.max(1)).enumerate() {
                            (t.gemm)(tile_groups(i), tile, a, out);
                            store_rows(band, 4 * q, i * width, width, out);
                        }
                        let out = &mut out[..4 * r];
                        for g in n_tiles * t.groups..groups {
                            for (k, a) in a.chunks_exact(quad_len).enumerate() {
                                (kernels.gemm)(group(g), a, out);
                                store_rows(band, 4 * (q + k), g * r, r, out);
                            }
                        }
                    }
                });
            }
            None => match kernels.wide {
                Some(wide) => sweep_wide::<L>(wide, kernels.gemm, w, nb, quads, quad_len, band),
                None => sweep(band, &mut |g, a, out| (kernels.gemm)(group(g), a, out)),
            },
        }
        // The last n % 4 rows: one GEMV over all of the task's groups writes the band's part of
        // the row in one go.
        for (t, a) in tail.chunks_exact(nb).enumerate() {
            (kernels.gemv)(w, a, band.row_mut(4 * n_quads + t));
        }
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
/// of row groups inside, the odd group or quad left over by the four-row GEMM.
fn sweep_wide<L: PackedLayout>(
    wide: WideGemmFn<L::Packed, Quad<L>>,
    gemm: GemmFn<L::Packed, Quad<L>>,
    w: &[L::Packed],
    nb: usize,
    quads: &[Quad<L>],
    quad_len: usize,
    band: &mut ColumnBand<'_>,
) {
    let r = L::ROWS;
    let groups = w.len() / nb.max(1);
    let n_quads = quads.len() / quad_len.max(1);
    let quad = |q: usize| &quads[q * quad_len..(q + 1) * quad_len];
    let group = |g: usize| &w[g * nb..(g + 1) * nb];
    let mut tiles = [[0.0f32; 8 * MAX_ROWS]; 2];
    let [tile0, tile1] = &mut tiles;
    let (tile0, tile1) = (&mut tile0[..8 * r], &mut tile1[..8 * r]);
    let mut q = 0;
    while q + 2 <= n_quads {
        let (a0, a1) = (quad(q), quad(q + 1));
        let mut g = 0;
        while g + 2 <= groups {
            wide(
                [group(g), group(g + 1)],
                [a0, a1],
                [&mut *tile0, &mut *tile1],
            );
            store_tile::<L>(band, 4 * q, g, tile0);
            store_tile::<L>(band, 4 * q, g + 1, tile1);
            g += 2;
        }
        if g < groups {
            gemm(group(g), a0, &mut tile0[..4 * r]);
            gemm(group(g), a1, &mut tile0[4 * r..]);
            store_tile::<L>(band, 4 * q, g, tile0);
        }
        q += 2;
    }
    if q < n_quads {
        let tile = &mut tile0[..4 * r];
        for g in 0..groups {
            gemm(group(g), quad(q), tile);
            store_tile::<L>(band, 4 * q, g, tile);
        }
    }
}

/// Stores a kernel's tile (activation row major, `ROWS` outputs per activation row) into the
/// band's rows from `first_row` on, at row group `g` of the band.
#[inline(always)]
fn store_tile<L: PackedLayout>(
    band: &mut ColumnBand<'_>,
    first_row: usize,
    g: usize,
    tile: &[f32],
) {
    let r = L::ROWS;
    for (m, piece) in tile.chunks_exact(r).enumerate() {
        copy_piece::<L>(piece, &mut band.row_mut(first_row + m)[g * r..]);
    }
}

/// Stores a tile of `width` outputs per activation row into the band's rows from `first_row`
/// on, at column `column` of the band.
#[inline(always)]
fn store_rows(
    band: &mut ColumnBand<'_>,
    first_row: usize,
    column: usize,
    width: usize,
    tile: &[f32],
) {
    for (m, piece) in tile.chunks_exact(width).enumerate() {
        band.row_mut(first_row + m)[column..column + width].copy_from_slice(piece);
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

/// Activations to quantize below which one thread does it alone: about
/// five microseconds of work, the order of waking a second thread and joining it.
const SERIAL_FLOATS: usize = 32 * 1024;

/// Most rows a row group of any layout has (the size of the kernels' local result tiles).
const MAX_ROWS: usize = 16;

/// Most outputs per activation row of one tile of a tiled GEMM (its row groups times the rows
/// of a group): two 16-row groups, or 16 plain rows.
const MAX_TILE_WIDTH: usize = 2 * MAX_ROWS;

/// Most quads a tiled GEMM takes in one call.
const MAX_TILE_QUADS: usize = 2;

/// Weight bytes below which a batch-1 task is not worth scheduling on its own.
const MIN_GEMV_TASK_BYTES: usize = 256 * 1024;

/// Weight bytes below which a batch-1 task is not worth waking a second thread for.
const MIN_GEMV_PIECE_BYTES: usize = 16 * 1024;

/// Weight bytes a GEMM task keeps hot while it sweeps over the activations: a fifth of a 512 KiB
/// L2, which two threads may share when the vCPUs are siblings of one core (96 KiB measured 2-3 %
/// faster than 192 KiB at batch 512 on the 2-vCPU Zen 3 VM, 48 KiB the same as 96 KiB).
const L2_WEIGHT_BUDGET: usize = 96 * 1024;

/// The most bytes of per-call tiles one task makes and sweeps for every quad. Tiles hold 1-1.5
/// bytes a weight where the stored blocks hold 0.14-0.56, so a task cut by
/// [`L2_WEIGHT_BUDGET`] alone made up to a megabyte of Q1_0 tiles. 4096x4096, 2 threads, Zen 4,
/// best of 3 alternating, ms, no limit -> 256 KiB (-> 128 KiB): AVX2 Q1_0 batch 32 4.81 -> 3.88
/// (3.72), 512 61.9 -> 53.8 (56.5); NVFP4 batch 32 5.54 -> 4.72 (4.63); TQ2_0 batch 32 2.84
/// -> 2.47 (2.52); AVX-512 Q1_0 batch 32 2.62 -> 2.30 (2.37), 512 39.1 -> 35.3 (36.0); the
/// others (MXFP4, IQ2_XXS, TQ2_0 at 512) within the noise.
const L2_TILE_BUDGET: usize = 256 * 1024;

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
        let bytes = scratch::arena_bytes::<Quad<L>>(n_quads * quad_len)
            + scratch::arena_bytes::<Row<L>>(tail_rows * self.nb);
        let call = Timer::begin();
        scratch::with_arena(bytes, |arena| {
            let (quads, rest) = arena.take::<Quad<L>>(n_quads * quad_len);
            let (tail, _) = rest.take::<Row<L>>(tail_rows * self.nb);
            let quantize = Timer::begin();
            self.quantize_activations(x, quads, tail);
            quantize.end(Phase::Quantize);
            self.run(quads, tail, n, y);
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

    fn ggml_row(&self, row: usize, out: &mut Vec<u8>) {
        let (r, nb) = (L::ROWS, self.nb);
        let group = &self.packed.blocks()[row / r * nb..(row / r + 1) * nb];
        if r == 1 {
            out.extend_from_slice(bytemuck::cast_slice(group));
            return;
        }
        let mut column = vec![L::Weight::zeroed(); r];
        for p in group {
            L::unpack(p, &mut column);
            out.extend_from_slice(bytemuck::bytes_of(&column[row % r]));
        }
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
    parts: &[&[u8]],
    cpu: &CpuFeatures,
    release: Option<&Release<'_>>,
) -> Result<Box<dyn Engine>, Error> {
    struct Build<'a, 'r> {
        rows: usize,
        cols: usize,
        parts: &'a [&'a [u8]],
        cpu: &'a CpuFeatures,
        release: Option<&'a Release<'r>>,
    }
    impl LayoutVisitor for Build<'_, '_> {
        type Output = Result<Box<dyn Engine>, Error>;
        fn visit<L: ChooseKernels>(self) -> Self::Output {
            let engine =
                PackedEngine::<L>::new(self.rows, self.cols, self.parts, self.cpu, self.release)?;
            Ok(Box::new(engine))
        }
    }
    layout.check_fits(ty, rows)?;
    layout.visit(
        ty,
        Build {
            rows,
            cols,
            parts,
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
