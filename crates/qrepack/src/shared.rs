//! Bytes shared without copying: a range of a memory map (or any owned buffer) that several
//! matrices can borrow from at once.

use std::sync::Arc;

/// An immutable byte range kept alive by a shared owner (e.g. a memory-mapped GGUF file).
///
/// ```
/// use qrepack::SharedBytes;
/// let all = SharedBytes::new(vec![1u8, 2, 3, 4, 5]);
/// let mid = all.slice(1, 3).unwrap();
/// assert_eq!(mid.as_ref(), &[2, 3, 4]);
/// assert!(all.slice(4, 2).is_none());
/// ```
#[derive(Clone)]
pub struct SharedBytes {
    owner: Arc<dyn AsRef<[u8]> + Send + Sync>,
    start: usize,
    len: usize,
}

impl SharedBytes {
    /// Shares all of `owner`.
    pub fn new<T: AsRef<[u8]> + Send + Sync + 'static>(owner: T) -> SharedBytes {
        let len = owner.as_ref().len();
        SharedBytes {
            owner: Arc::new(owner),
            start: 0,
            len,
        }
    }

    /// Shares all of an already shared owner.
    pub fn from_arc(owner: Arc<dyn AsRef<[u8]> + Send + Sync>) -> SharedBytes {
        let len = (*owner).as_ref().len();
        SharedBytes {
            owner,
            start: 0,
            len,
        }
    }

    /// `len` bytes from `offset` (relative to this range), if they lie inside it.
    pub fn slice(&self, offset: usize, len: usize) -> Option<SharedBytes> {
        let end = offset.checked_add(len)?;
        (end <= self.len).then(|| SharedBytes {
            owner: Arc::clone(&self.owner),
            start: self.start + offset,
            len,
        })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl AsRef<[u8]> for SharedBytes {
    fn as_ref(&self) -> &[u8] {
        let all = (*self.owner).as_ref();
        // The range was checked against the owner's length when it was made, and owners are
        // immutable; `get` keeps this panic-free regardless.
        all.get(self.start..self.start + self.len).unwrap_or(&[])
    }
}

impl std::fmt::Debug for SharedBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedBytes({} bytes at {})", self.len, self.start)
    }
}
