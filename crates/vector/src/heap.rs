//! Handing freed heap memory back to the system.

/// Returns the heap's free pages to the system. Many small blocks freed by several threads
/// (a graph's neighbour lists, say) otherwise stay resident in glibc's per-thread arenas,
/// and what is allocated next comes on top of them: a memory cgroup, and the peak RSS,
/// count both. Elsewhere than glibc, does nothing.
pub fn release_freed_memory() {
    // SAFETY: malloc_trim takes no pointers and only returns free pages to the system;
    // glibc makes it safe to call from any thread at any time.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    unsafe {
        libc::malloc_trim(0);
    }
}
