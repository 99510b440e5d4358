use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;

use crate::SECTOR;

/// A zeroed heap buffer aligned to [`SECTOR`], as O_DIRECT requires.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the buffer is plain memory owned by this value alone (no aliasing pointer is
// kept elsewhere), so moving it to another thread is sound.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only read (`as_slice`); writing needs `&mut self`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    pub fn new(len: usize) -> Self {
        let alloc_len = crate::round_up_to_sector(len.max(1));
        let layout = Layout::from_size_align(alloc_len, SECTOR).expect("sector layout");
        // SAFETY: layout has non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        Self { ptr, len }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for len bytes for the lifetime of self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: ptr is valid for len bytes and uniquely borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let alloc_len = crate::round_up_to_sector(self.len.max(1));
        let layout = Layout::from_size_align(alloc_len, SECTOR).expect("sector layout");
        // SAFETY: allocated in new() with this same layout.
        unsafe { dealloc(self.ptr.as_ptr(), layout) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_sector_aligned_and_zeroed() {
        for len in [1, 100, 4096, 10_000] {
            let mut b = AlignedBuf::new(len);
            assert_eq!(b.as_mut_ptr() as usize % SECTOR, 0);
            assert_eq!(b.len(), len);
            assert!(b.as_slice().iter().all(|&x| x == 0));
        }
    }
}
