//! Growable scratch buffers in anonymous memory mappings of their own.
//!
//! The heap allocator keeps memory it was given back: a large buffer that a long prompt needed
//! and the single-token steps after it do not stays resident in its arena for as long as the
//! process runs (glibc also raises its mapping threshold as large blocks are freed, so later
//! large blocks land in the arenas too). A buffer in its own mapping returns its pages to the
//! system the moment it is released or replaced.

use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

use bytemuck::Pod;

/// A growable buffer of `T` whose memory is an anonymous mapping (or, where the system refuses
/// one, a heap allocation): [`PageBuffer::release`] and drop give the pages back at once.
///
/// Like a `Vec` it has a length, set by [`PageBuffer::sized`], and dereferences to that many
/// values.
pub struct PageBuffer<T> {
    store: Store<T>,
    len: usize,
    _values: PhantomData<T>,
}

enum Store<T> {
    Empty,
    Mapped(memmap2::MmapMut),
    Heap(Vec<T>),
}

impl<T: Pod> PageBuffer<T> {
    /// An empty buffer; nothing is mapped until [`PageBuffer::sized`] asks for room.
    pub const fn new() -> Self {
        PageBuffer {
            store: Store::Empty,
            len: 0,
            _values: PhantomData,
        }
    }

    /// Values the buffer holds without growing.
    pub fn capacity(&self) -> usize {
        self.room().len()
    }

    /// Bytes the buffer holds.
    pub fn capacity_bytes(&self) -> usize {
        self.capacity() * std::mem::size_of::<T>()
    }

    /// Its first [`PageBuffer::sized`] values.
    pub fn as_slice(&self) -> &[T] {
        &self.room()[..self.len]
    }

    /// Every value the memory holds.
    fn room(&self) -> &[T] {
        match &self.store {
            Store::Empty => &[],
            // page-aligned, and `sized` maps whole values
            Store::Mapped(m) => bytemuck::try_cast_slice(m.as_ref()).unwrap_or(&[]),
            Store::Heap(v) => v,
        }
    }

    fn room_mut(&mut self) -> &mut [T] {
        match &mut self.store {
            Store::Empty => &mut [],
            Store::Mapped(m) => bytemuck::try_cast_slice_mut(m.as_mut()).unwrap_or(&mut []),
            Store::Heap(v) => v,
        }
    }

    /// Sets the length to `n` and returns the values, growing the memory to hold them: values
    /// it held keep their contents, new memory is zero. The memory never shrinks here
    /// ([`PageBuffer::release`] gives it back).
    pub fn sized(&mut self, n: usize) -> &mut [T] {
        if n > self.capacity() {
            let mut grown = Self::with_capacity(n);
            let old = self.room();
            grown.room_mut()[..old.len()].copy_from_slice(old);
            *self = grown;
        }
        self.len = n;
        &mut self.room_mut()[..n]
    }

    /// Gives the buffer's memory back to the system; the length becomes 0.
    pub fn release(&mut self) {
        self.store = Store::Empty;
        self.len = 0;
    }

    /// A zeroed buffer of at least `n` values (whole pages when mapped).
    fn with_capacity(n: usize) -> Self {
        let size = std::mem::size_of::<T>().max(1);
        let bytes = (n * size).next_multiple_of(PAGE);
        let store = match memmap2::MmapMut::map_anon(bytes) {
            // a mapping whose length is not a whole number of values cannot be cast
            Ok(map) if bytes.is_multiple_of(size) => Store::Mapped(map),
            _ => Store::Heap(vec![T::zeroed(); n]),
        };
        PageBuffer {
            store,
            len: 0,
            _values: PhantomData,
        }
    }
}

impl<T: Pod> Deref for PageBuffer<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<T: Pod> DerefMut for PageBuffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        let n = self.len;
        &mut self.room_mut()[..n]
    }
}

/// The page size mappings are rounded to (a multiple of every system's on the platforms built).
const PAGE: usize = 4096;

impl<T: Pod> Default for PageBuffer<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Pod> Clone for PageBuffer<T> {
    fn clone(&self) -> Self {
        let mut copy = Self::new();
        copy.sized(self.len).copy_from_slice(self.as_slice());
        copy
    }
}

impl<T: Pod> fmt::Debug for PageBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PageBuffer")
            .field("len", &self.len)
            .field("capacity", &self.capacity())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_keeping_values_and_releases() {
        let mut b = PageBuffer::<f32>::new();
        assert_eq!(b.capacity(), 0);
        assert!(b.sized(0).is_empty());
        let first = b.sized(3);
        assert_eq!(first, &[0.0; 3]);
        first.copy_from_slice(&[1.0, 2.0, 3.0]);
        // whole pages: room for 1024 values without growing
        assert_eq!(b.capacity(), 1024);
        let grown = b.sized(5000);
        assert_eq!(&grown[..4], &[1.0, 2.0, 3.0, 0.0]);
        assert!(grown[4..].iter().all(|&v| v == 0.0));
        assert_eq!(b.capacity_bytes(), 20480);
        // asking for less keeps the room
        assert_eq!(b.sized(10).len(), 10);
        assert_eq!((b.len(), b.capacity()), (10, 5120));
        let copy = b.clone();
        assert_eq!(copy.as_slice(), b.as_slice());
        b[4] = 7.0;
        assert_eq!(b.sized(5000)[4], 7.0);
        b.release();
        assert_eq!((b.len(), b.capacity()), (0, 0));
        assert_eq!(copy[1], 2.0);
    }

    #[test]
    fn values_wider_than_a_float() {
        let mut b = PageBuffer::<u64>::new();
        b.sized(1000)
            .iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v = i as u64);
        assert_eq!(b.sized(2000)[999], 999);
        assert_eq!(format!("{b:?}"), "PageBuffer { len: 2000, capacity: 2048 }");
    }
}
