//! Memory that a graph search reads at random, backed by 2 MiB pages where the kernel allows.
//!
//! A search touches a few hundred vectors and neighbour lists scattered over tens or hundreds
//! of megabytes: with 4 KiB pages nearly every one of those reads also misses the TLB and
//! walks the page table. Transparent huge pages cut the pages to map by 512x, so the whole
//! array fits the TLB. Kernels set to `madvise` (a common default) give them only to memory
//! that asks, before it is first touched; these helpers ask.

/// Below this an allocation keeps ordinary pages: a huge page would be mostly empty.
const MIN_BYTES: usize = 4 << 20;
const PAGE: usize = 4096;

/// An empty vector with room for `capacity` items, its memory marked for huge pages before
/// anything is written to it. Fill it without growing past `capacity` (a reallocation
/// would land in unmarked memory).
pub fn vec_with_huge_pages<T>(capacity: usize) -> Vec<T> {
    let v: Vec<T> = Vec::with_capacity(capacity);
    advise_huge_pages(v.as_ptr().cast(), v.capacity() * std::mem::size_of::<T>());
    v
}

/// A copy of `src` in memory marked for huge pages.
pub fn to_huge_pages<T: Copy>(src: &[T]) -> Vec<T> {
    let mut v = vec_with_huge_pages(src.len());
    v.extend_from_slice(src);
    v
}

/// `len` copies of `value` in memory marked for huge pages.
pub fn filled_with_huge_pages<T: Clone>(value: T, len: usize) -> Vec<T> {
    let mut v = vec_with_huge_pages(len);
    v.resize(len, value);
    v
}

/// Asks the kernel to back the whole pages inside `[start, start + bytes)` with huge pages.
/// A hint only: where the kernel has them off, or the call fails, memory stays as it was.
fn advise_huge_pages(start: *const u8, bytes: usize) {
    if bytes < MIN_BYTES {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        let first = (start as usize).next_multiple_of(PAGE);
        let end = (start as usize + bytes) / PAGE * PAGE;
        if end <= first {
            return;
        }
        // SAFETY: madvise with MADV_HUGEPAGE changes only which page size the kernel
        // prefers for the range; it never changes the mapping's contents, permissions or
        // validity, so no Rust reference can observe it. The range is page-aligned (as the
        // call requires) and lies inside the caller's live allocation, rounded inwards, so
        // no memory of anyone else is advised. An error (e.g. EINVAL on a kernel without
        // THP) is ignored: the memory then keeps ordinary pages.
        unsafe {
            libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (start, bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_and_fills_hold_what_was_asked_for() {
        let src: Vec<u32> = (0..(3 << 20)).collect();
        let copy = to_huge_pages(&src);
        assert_eq!(copy, src);
        let filled = filled_with_huge_pages(7u16, 5 << 20);
        assert_eq!(filled.len(), 5 << 20);
        assert!(filled.iter().all(|&x| x == 7));
        let small = to_huge_pages(&[1.5f32, 2.5]);
        assert_eq!(small, [1.5, 2.5]);
        assert!(vec_with_huge_pages::<u64>(0).is_empty());
    }

    /// The flags of the mapping holding `addr`, from /proc/self/smaps.
    #[cfg(target_os = "linux")]
    fn mapping_flags(addr: usize) -> Option<String> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut inside = false;
        for line in smaps.lines() {
            let range = line.split_whitespace().next().unwrap_or("");
            if let Some((lo, hi)) = range.split_once('-') {
                if let (Ok(lo), Ok(hi)) =
                    (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                {
                    inside = (lo..hi).contains(&addr);
                    continue;
                }
            }
            if inside {
                if let Some(flags) = line.strip_prefix("VmFlags:") {
                    return Some(flags.trim().to_string());
                }
            }
        }
        None
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn large_allocations_are_marked_for_huge_pages_and_small_ones_are_not() {
        // The kernel may have THP compiled out or set to `never`; it still records the
        // advice ("hg") on the mapping wherever madvise succeeded, which is what we check.
        let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled");
        if thp.is_err() {
            return;
        }
        let big: Vec<u8> = vec_with_huge_pages(16 << 20);
        let middle = big.as_ptr() as usize + (8 << 20);
        let flags = mapping_flags(middle).expect("the allocation is mapped");
        assert!(flags.split(' ').any(|f| f == "hg"), "flags {flags}");
        // Below MIN_BYTES nothing is advised. Checked on a fresh mapping of our own: a
        // small Vec may land in heap memory a freed large one left advised.
        const LEN: usize = 8 << 20;
        // SAFETY: a new private anonymous mapping (no file, no address hint); nothing else
        // refers to it, and it is unmapped below before the test returns.
        let region = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(region, libc::MAP_FAILED);
        let has_hg = || {
            let flags = mapping_flags(region as usize).expect("mapped");
            flags.split(' ').any(|f| f == "hg")
        };
        advise_huge_pages(region as *const u8, 64 << 10);
        let small_advised = has_hg();
        advise_huge_pages(region as *const u8, LEN);
        let large_advised = has_hg();
        // SAFETY: the mapping made above, its full length, not referenced after this.
        unsafe { libc::munmap(region, LEN) };
        assert!(!small_advised, "64 KiB was advised");
        assert!(large_advised, "8 MiB was not advised");
    }
}
