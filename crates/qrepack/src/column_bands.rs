//! A zero-copy view of a row-major output matrix cut into bands of whole columns, so that
//! parallel tasks that each own some output columns (whole row groups) across every activation
//! row can store their results in place, with no per-task buffer to copy back afterwards.

use std::marker::PhantomData;
use std::ptr::NonNull;

/// Columns `start..start + width` of every row of an `n x stride` row-major `f32` matrix,
/// borrowed exclusively (as `&mut` borrows of those cells).
pub(crate) struct ColumnBand<'a> {
    /// Row 0, column `start`.
    first: NonNull<f32>,
    n: usize,
    stride: usize,
    width: usize,
    cells: PhantomData<&'a mut [f32]>,
}

// SAFETY: a band is an exclusive borrow of its cells (no other band or slice reaches them while
// it lives), so moving it to another thread is like moving a `&mut [f32]`.
unsafe impl Send for ColumnBand<'_> {}

impl<'a> ColumnBand<'a> {
    /// The band's part of row `i`: `width` floats.
    #[inline]
    pub(crate) fn row_mut(&mut self, i: usize) -> &mut [f32] {
        assert!(i < self.n, "row {i} of a band of {} rows", self.n);
        // SAFETY: row `i`, columns `start..start + width` lie inside the matrix the band was cut
        // from (`start + width <= stride`, `i < n`, `n * stride <= len`), belong to this band
        // alone, and `&mut self` keeps this slice the only live borrow of them.
        unsafe {
            std::slice::from_raw_parts_mut(self.first.as_ptr().add(i * self.stride), self.width)
        }
    }
}

/// Cuts `y`, `n` rows of `stride` floats, into bands of `width` columns from the left (the
/// last band keeps what is left). Every cell belongs to exactly one band.
pub(crate) fn column_bands(
    y: &mut [f32],
    n: usize,
    stride: usize,
    width: usize,
) -> Vec<ColumnBand<'_>> {
    assert!(width > 0 && y.len() == n * stride);
    let base = NonNull::from(&mut *y).cast::<f32>();
    (0..stride)
        .step_by(width)
        .map(|start| ColumnBand {
            // SAFETY: `start < stride <= y.len()` (when `n > 0`; with `n == 0` no row is ever
            // reached and `start` stays within the allocation's bounds plus zero).
            first: unsafe { base.add(if n == 0 { 0 } else { start }) },
            n,
            stride,
            width: width.min(stride - start),
            cells: PhantomData,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bands_cover_every_cell_once() {
        for (n, stride, width) in [(3, 10, 4), (1, 8, 8), (5, 7, 1), (2, 16, 20), (0, 6, 2)] {
            let mut y = vec![0.0f32; n * stride];
            let mut bands = column_bands(&mut y, n, stride, width);
            assert_eq!(bands.len(), stride.div_ceil(width));
            for (b, band) in bands.iter_mut().enumerate() {
                for i in 0..n {
                    for (c, v) in band.row_mut(i).iter_mut().enumerate() {
                        *v += (1000 * i + b * width + c) as f32 + 0.5;
                    }
                }
            }
            drop(bands);
            for i in 0..n {
                for c in 0..stride {
                    assert_eq!(y[i * stride + c], (1000 * i + c) as f32 + 0.5);
                }
            }
        }
    }

    #[test]
    #[should_panic]
    fn rows_past_the_end_are_refused() {
        let mut y = vec![0.0f32; 6];
        let mut bands = column_bands(&mut y, 2, 3, 2);
        bands[0].row_mut(2);
    }
}
