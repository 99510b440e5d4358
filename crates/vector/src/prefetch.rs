//! Cache hints for data a search is about to read at random.

/// Hints the CPU to fetch the first `max_lines` cache lines of `data`; a graph search calls
/// this for every neighbour before computing any distance, so their misses overlap. The
/// hardware prefetcher follows on through a longer vector once its first lines are asked for.
#[inline]
pub fn prefetch<T>(data: &[T], max_lines: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        let start = data.as_ptr().cast::<u8>();
        let bytes = std::mem::size_of_val(data);
        for line in 0..bytes.div_ceil(64).min(max_lines) {
            // SAFETY: the intrinsic is unsafe only for its target feature, SSE, which every
            // x86_64 CPU has; a prefetch never faults, and `line * 64 < bytes`, so the
            // address lies inside `data` (`wrapping_add` needs no in-bounds proof anyway).
            unsafe {
                std::arch::x86_64::_mm_prefetch(
                    start.wrapping_add(line * 64).cast(),
                    std::arch::x86_64::_MM_HINT_T0,
                )
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (data, max_lines);
}
