//! Per-thread scratch memory for the hot path: activation blocks and the transposed result are
//! carved out of one reusable buffer, so a steady stream of `matmul` calls allocates nothing.

use std::cell::RefCell;

use bytemuck::Pod;

use crate::page_buffer::PageBuffer;

// In mappings of their own: a prompt's products need far larger buffers than the single-token
// steps after it, and [`release_thread_scratch`] must give that memory back to the system.
thread_local! {
    static SCRATCH: RefCell<PageBuffer<u64>> = const { RefCell::new(PageBuffer::new()) };
    /// Weight tiles of the rayon tasks this thread runs (separate from `SCRATCH`, which the
    /// thread that called `matmul` holds while it takes part in the tasks).
    static TILES: RefCell<PageBuffer<u64>> = const { RefCell::new(PageBuffer::new()) };
    /// Gathered inputs and outputs of `QExperts::matmul_id`, held across its per-expert
    /// `matmul` calls (which take `SCRATCH`).
    static EXPERTS: RefCell<PageBuffer<u64>> = const { RefCell::new(PageBuffer::new()) };
}

/// Bytes `count` values of `T` take in an [`Arena`] (rounded up to 8 to keep the next piece
/// aligned).
pub(crate) fn arena_bytes<T: Pod>(count: usize) -> usize {
    (count * std::mem::size_of::<T>()).next_multiple_of(8)
}

/// A piece of scratch memory, 8-byte aligned, handed out front to back.
pub(crate) struct Arena<'a> {
    bytes: &'a mut [u8],
}

impl<'a> Arena<'a> {
    /// The next `count` values of `T` (contents unspecified: callers overwrite them) and the rest.
    ///
    /// The arena was sized with [`arena_bytes`] for every piece taken, the start of each piece
    /// is 8-byte aligned and all activation and result types have alignment <= 8, so the split
    /// and the cast cannot fail.
    pub(crate) fn take<T: Pod>(self, count: usize) -> (&'a mut [T], Arena<'a>) {
        const { assert!(std::mem::align_of::<T>() <= 8) };
        let len = count * std::mem::size_of::<T>();
        let (head, rest) = self.bytes.split_at_mut(arena_bytes::<T>(count));
        (
            bytemuck::cast_slice_mut(&mut head[..len]),
            Arena { bytes: rest },
        )
    }
}

/// Runs `f` with an arena of `bytes` bytes from this thread's scratch buffer, or from a fresh
/// allocation when the buffer is in use further up this thread's stack (rayon may run another
/// `matmul` on this thread while one waits for its tasks).
pub(crate) fn with_arena<R>(bytes: usize, f: impl FnOnce(Arena<'_>) -> R) -> R {
    with_buffer(&SCRATCH, bytes, f)
}

/// [`with_arena`] for weight tiles, from a second per-thread buffer.
pub(crate) fn with_tile_arena<R>(bytes: usize, f: impl FnOnce(Arena<'_>) -> R) -> R {
    with_buffer(&TILES, bytes, f)
}

/// [`with_arena`] for the routed rows of a mixture-of-experts product, from a third buffer.
pub(crate) fn with_expert_arena<R>(bytes: usize, f: impl FnOnce(Arena<'_>) -> R) -> R {
    with_buffer(&EXPERTS, bytes, f)
}

/// Frees this thread's scratch buffers. They grow back on the next product; a caller whose
/// products shrink for good (a prompt's, then single-token steps) calls this on each of its
/// threads so that the large buffers do not stay resident.
pub fn release_thread_scratch() {
    for key in [&SCRATCH, &TILES, &EXPERTS] {
        key.with(|cell| {
            // a buffer in use further up this thread's stack is left alone
            if let Ok(mut buf) = cell.try_borrow_mut() {
                buf.release();
            }
        });
    }
}

fn with_buffer<R>(
    key: &'static std::thread::LocalKey<RefCell<PageBuffer<u64>>>,
    bytes: usize,
    f: impl FnOnce(Arena<'_>) -> R,
) -> R {
    let words = bytes.div_ceil(8);
    key.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => {
            let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf.sized(words));
            f(Arena { bytes })
        }
        Err(_) => {
            let mut buf = vec![0u64; words];
            f(Arena {
                bytes: bytemuck::cast_slice_mut(&mut buf[..]),
            })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blocks::{BlockQ8Kx4, BlockQ8_0};

    #[test]
    fn pieces_are_disjoint_aligned_and_reentrant() {
        let total =
            arena_bytes::<BlockQ8_0>(3) + arena_bytes::<BlockQ8Kx4>(2) + arena_bytes::<f32>(5);
        with_arena(total, |arena| {
            let (a, rest) = arena.take::<BlockQ8_0>(3);
            let (b, rest) = rest.take::<BlockQ8Kx4>(2);
            let (c, _) = rest.take::<f32>(5);
            assert_eq!((a.len(), b.len(), c.len()), (3, 2, 5));
            assert_eq!(b.as_ptr() as usize % 4, 0);
            c.fill(1.0);
            // a nested use on the same thread gets its own memory
            with_arena(16, |inner| {
                let (d, _) = inner.take::<f32>(4);
                d.fill(2.0);
            });
            assert!(c.iter().all(|&v| v == 1.0));
            // releasing while the buffer is lent out keeps it
            release_thread_scratch();
            assert!(c.iter().all(|&v| v == 1.0));
        });
        release_thread_scratch();
        SCRATCH.with(|cell| assert_eq!(cell.borrow().capacity(), 0));
        // and it grows back
        with_arena(24, |arena| assert_eq!(arena.take::<f32>(6).0.len(), 6));
    }
}
