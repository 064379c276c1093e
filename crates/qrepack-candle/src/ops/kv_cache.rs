//! The key/value cache of one layer and one sequence, in pages of [`PAGE`] positions.
//!
//! A page holds, for each key/value head, the head's keys of its positions one after the other
//! (and its values likewise), so that a decode step streams each head's keys and values as a
//! few long runs rather than a short row every `n_kv_head * head_dim` values. Appending fills
//! the last page and adds a new one when it is full: nothing cached ever moves, and the memory
//! held is the positions seen rounded up to a page (no doubling). The values are stored as f16
//! (as llama.cpp's default cache: half the bytes a decode step reads) or as f32.

use half::f16;
use half::slice::HalfFloatSliceExt;

/// Positions per page.
pub const PAGE: usize = 64;

/// The number format of a cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvType {
    /// IEEE half precision (the default, as llama.cpp's `-ctk f16 -ctv f16`).
    #[default]
    F16,
    /// Single precision: the keys and values exactly as computed.
    F32,
}

/// A value type a cache can store.
pub(crate) trait KvElem: Copy + Default + Send + Sync + 'static {
    /// Stores `src` into `dst` (same lengths).
    fn store(src: &[f32], dst: &mut [Self]);
    /// Loads `src` into `dst` (same lengths).
    fn load(src: &[Self], dst: &mut [f32]);
}

impl KvElem for f32 {
    fn store(src: &[f32], dst: &mut [f32]) {
        dst.copy_from_slice(src);
    }
    fn load(src: &[f32], dst: &mut [f32]) {
        dst.copy_from_slice(src);
    }
}

impl KvElem for f16 {
    fn store(src: &[f32], dst: &mut [f16]) {
        dst.convert_from_f32_slice(src);
    }
    fn load(src: &[f16], dst: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("f16c") {
            assert_eq!(src.len(), dst.len(), "f16 rows of different lengths");
            // SAFETY: F16C is present; the lengths are equal.
            unsafe { load_f16c(src, dst) };
            return;
        }
        src.convert_to_f32_slice(dst);
    }
}

/// [`KvElem::load`] of halves with F16C, 8 at a time (the `half` crate's slice conversion
/// checks the CPU and runs a short loop per call, a tenth of a prompt's attention).
///
/// # Safety
/// F16C; `src` and `dst` of the same length.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
unsafe fn load_f16c(src: &[f16], dst: &mut [f32]) {
    use std::arch::x86_64::*;
    let n = src.len();
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: `i + 8 <= n` halves and floats on either side.
        unsafe {
            let h = _mm_loadu_si128(src.as_ptr().add(i).cast());
            _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
        }
        i += 8;
    }
    for (d, s) in dst[i..].iter_mut().zip(&src[i..]) {
        *d = s.to_f32();
    }
}

/// One page: `n_kv_head` runs of `PAGE * head_dim` keys, the same of values.
#[derive(Clone, Debug)]
pub(crate) struct Page<E> {
    keys: Box<[E]>,
    values: Box<[E]>,
}

/// The pages of a cache, in its number format.
#[derive(Clone, Debug)]
pub(crate) enum Pages<'a> {
    F32(&'a [Page<f32>]),
    F16(&'a [Page<f16>]),
}

#[derive(Clone, Debug)]
enum Store {
    F32(Vec<Page<f32>>),
    F16(Vec<Page<f16>>),
}

/// Keys and values of the positions a sequence has seen in one layer.
#[derive(Clone, Debug)]
pub struct KvCache {
    n_kv_head: usize,
    head_dim: usize,
    len: usize,
    store: Store,
}

impl KvCache {
    /// An empty cache for `n_kv_head` heads of `head_dim` values, stored as `ty`.
    pub fn new(ty: KvType, n_kv_head: usize, head_dim: usize) -> KvCache {
        KvCache {
            n_kv_head,
            head_dim,
            len: 0,
            store: match ty {
                KvType::F16 => Store::F16(Vec::new()),
                KvType::F32 => Store::F32(Vec::new()),
            },
        }
    }

    /// Its number format.
    pub fn kv_type(&self) -> KvType {
        match self.store {
            Store::F16(_) => KvType::F16,
            Store::F32(_) => KvType::F32,
        }
    }

    /// Key/value heads.
    pub fn n_kv_head(&self) -> usize {
        self.n_kv_head
    }

    /// Width of one head.
    pub fn head_dim(&self) -> usize {
        self.head_dim
    }

    /// Positions cached.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position is cached.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forgets every position; the pages stay allocated for the next ones.
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Bytes the pages hold.
    pub fn bytes(&self) -> usize {
        let per_page = 2 * PAGE * self.n_kv_head * self.head_dim;
        match &self.store {
            Store::F16(p) => p.len() * per_page * 2,
            Store::F32(p) => p.len() * per_page * 4,
        }
    }

    /// Appends one position: its keys and values, `n_kv_head * head_dim` each (head `g` at
    /// `g * head_dim`). Panics if either has another length.
    pub fn push(&mut self, keys: &[f32], values: &[f32]) {
        let width = self.n_kv_head * self.head_dim;
        assert!(
            keys.len() == width && values.len() == width,
            "a position of {} key/value heads of {} needs {width} keys and values, got {} and {}",
            self.n_kv_head,
            self.head_dim,
            keys.len(),
            values.len()
        );
        let (n_kv_head, d, len) = (self.n_kv_head, self.head_dim, self.len);
        match &mut self.store {
            Store::F16(p) => push_into(p, n_kv_head, d, len, keys, values),
            Store::F32(p) => push_into(p, n_kv_head, d, len, keys, values),
        }
        self.len += 1;
    }

    /// The pages, the first `len().div_ceil(PAGE)` of which hold positions.
    pub(crate) fn pages(&self) -> Pages<'_> {
        match &self.store {
            Store::F16(p) => Pages::F16(p),
            Store::F32(p) => Pages::F32(p),
        }
    }
}

fn push_into<E: KvElem>(
    pages: &mut Vec<Page<E>>,
    n_kv_head: usize,
    d: usize,
    len: usize,
    keys: &[f32],
    values: &[f32],
) {
    let (page, slot) = (len / PAGE, len % PAGE);
    if page == pages.len() {
        let size = n_kv_head * PAGE * d;
        pages.push(Page {
            keys: vec![E::default(); size].into_boxed_slice(),
            values: vec![E::default(); size].into_boxed_slice(),
        });
    }
    let p = &mut pages[page];
    for g in 0..n_kv_head {
        let at = (g * PAGE + slot) * d;
        E::store(&keys[g * d..][..d], &mut p.keys[at..at + d]);
        E::store(&values[g * d..][..d], &mut p.values[at..at + d]);
    }
}

/// The keys and values of head `g` at positions `lo..hi`, as runs of consecutive positions
/// (one per page touched): `(keys, values)`, `count * d` values each.
pub(crate) fn runs<E>(
    pages: &[Page<E>],
    d: usize,
    g: usize,
    lo: usize,
    hi: usize,
) -> impl Iterator<Item = (&[E], &[E])> {
    let mut p = lo;
    std::iter::from_fn(move || {
        if p >= hi {
            return None;
        }
        let (page, slot) = (p / PAGE, p % PAGE);
        let count = (PAGE - slot).min(hi - p);
        let at = (g * PAGE + slot) * d;
        let pg = &pages[page];
        p += count;
        Some((&pg.keys[at..at + count * d], &pg.values[at..at + count * d]))
    })
}

/// Copies head `g`'s keys and values of positions `lo..hi` into `keys` and `values` as f32
/// rows of `d` (resized to `(hi - lo) * d`).
pub(crate) fn gather<E: KvElem>(
    pages: &[Page<E>],
    d: usize,
    g: usize,
    (lo, hi): (usize, usize),
    keys: &mut Vec<f32>,
    values: &mut Vec<f32>,
) {
    keys.resize((hi - lo) * d, 0.0);
    values.resize((hi - lo) * d, 0.0);
    let mut at = 0;
    for (k, v) in runs(pages, d, g, lo, hi) {
        E::load(k, &mut keys[at..at + k.len()]);
        E::load(v, &mut values[at..at + v.len()]);
        at += k.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_read_back_across_pages() {
        for ty in [KvType::F32, KvType::F16] {
            let (n_kv, d) = (3, 8);
            let mut c = KvCache::new(ty, n_kv, d);
            // small integers are exact in f16
            let row = |p: usize, s: f32| -> Vec<f32> {
                (0..n_kv * d)
                    .map(|i| s * (p * 7 + i) as f32 % 1000.0)
                    .collect()
            };
            let n = 2 * PAGE + 37;
            for p in 0..n {
                c.push(&row(p, 1.0), &row(p, -1.0));
            }
            assert_eq!(c.len(), n);
            assert_eq!(c.kv_type(), ty);
            let size = if ty == KvType::F16 { 2 } else { 4 };
            assert_eq!(c.bytes(), 3 * 2 * PAGE * n_kv * d * size);
            for g in 0..n_kv {
                for (lo, hi) in [(0, n), (5, 6), (PAGE - 1, PAGE + 1), (PAGE + 44, n)] {
                    let (mut k, mut v) = (Vec::new(), Vec::new());
                    match c.pages() {
                        Pages::F32(p) => gather(p, d, g, (lo, hi), &mut k, &mut v),
                        Pages::F16(p) => gather(p, d, g, (lo, hi), &mut k, &mut v),
                    }
                    for p in lo..hi {
                        let want = &row(p, 1.0)[g * d..][..d];
                        assert_eq!(&k[(p - lo) * d..][..d], want, "{ty:?} head {g} pos {p}");
                        let want = &row(p, -1.0)[g * d..][..d];
                        assert_eq!(&v[(p - lo) * d..][..d], want);
                    }
                }
            }
            c.clear();
            assert!(c.is_empty());
            c.push(&row(9, 1.0), &row(9, 1.0));
            assert_eq!(c.len(), 1);
        }
    }

    #[test]
    #[should_panic(expected = "needs 24 keys")]
    fn wrong_width_is_refused() {
        KvCache::new(KvType::F32, 3, 8).push(&[0.0; 23], &[0.0; 24]);
    }
}
