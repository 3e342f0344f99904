//! What the process asks of glibc's allocator so that memory falls back after a burst (of
//! registrations, of calls): fixed trim and mmap thresholds, each thread's cache of freed chunks
//! handed back now and then, and a trim when much is free.

/// Largest top of a heap kept when a free leaves it that large, and smallest block given its
/// own mapping. glibc's defaults, but fixed: by default, freeing a mapped block (a grown hash
/// table) raises the trim threshold to twice that block's size, up to 64 MiB, for good; and
/// `malloc_trim` never shortens a thread's heap from the top (only the main heap's), so the tops
/// of the heaps of threads that first allocate under load stayed resident, megabytes each.
const THRESHOLD: i32 = 128 * 1024;

/// Fixes the thresholds; before the threads start.
pub fn fix_thresholds() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets the allocator's parameters.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, THRESHOLD);
        libc::mallopt(libc::M_MMAP_THRESHOLD, THRESHOLD);
    }
}

/// Gives free pages back to the system when something was just let go (`released`) or the
/// allocator holds much more free memory than it uses: glibc keeps a heap's free pages
/// otherwise, and a burst would hold its peak for good.
pub fn trim(released: bool) {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallinfo2 only reads the allocator's statistics, and malloc_trim only returns
    // free memory of its heaps.
    unsafe {
        let m = libc::mallinfo2();
        if released || trim_worthwhile(m.fordblks, m.uordblks) {
            // What this thread just let go sits in its own cache first.
            release_thread_cache();
            libc::malloc_trim(0);
        }
    }
    #[cfg(not(target_env = "gnu"))]
    let _ = released;
}

/// How often a thread that allocates under load hands its allocator cache back
/// ([`release_thread_cache`]): a few thousand allocations each time, a few tens of µs.
pub const RELEASE_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// Hands back to the heap the chunks that glibc's per-thread cache (tcache: up to 7 freed chunks
/// of each size up to 1 KiB, kept for the thread's next allocation of that size) holds for the
/// calling thread; a later [`trim`] can then give their pages back. After a burst those are the
/// last chunks the thread freed, spread over the pages the burst used, and each kept its page
/// resident: some 2 MiB after 20,000 REGISTERs on Memcached. The cache is refilled with chunks
/// allocated now, which the heap takes from the holes beside what is still live.
pub fn release_thread_cache() {
    #[cfg(target_env = "gnu")]
    {
        /// glibc's tcache_count: what the cache holds per size.
        const PER_SIZE: usize = 7;
        let mut cached = [std::ptr::null_mut(); PER_SIZE];
        let mut fresh = [std::ptr::null_mut(); PER_SIZE];
        // One request size per cache bin: chunks of 32 to 1,040 bytes, 16 apart.
        for size in (24..=1032).step_by(16) {
            // SAFETY: every pointer malloc returns is freed once, here, and never read or written.
            unsafe {
                for p in cached.iter_mut().chain(fresh.iter_mut()) {
                    *p = libc::malloc(size);
                }
                // The fresh chunks fill the cache; the ones it held go past its room, to the heap.
                for p in fresh.iter().chain(cached.iter()) {
                    libc::free(*p);
                }
            }
        }
    }
}

/// Whether `free` bytes held by the allocator are worth handing back: over 16 MiB and more than
/// what is in use (`used`), so a steady load, whose free memory is reused at once, never pays for
/// a trim that would only be undone.
#[cfg_attr(not(target_env = "gnu"), allow(dead_code))]
fn trim_worthwhile(free: usize, used: usize) -> bool {
    free > 16 << 20 && free > used
}

#[cfg(test)]
mod tests {
    #[cfg(target_env = "gnu")]
    #[test]
    fn the_chunks_a_thread_freed_last_go_back_to_the_heap() {
        // A thread of its own: its cache starts empty.
        std::thread::spawn(|| unsafe {
            let old: Vec<_> = (0..7).map(|_| libc::malloc(200)).collect();
            for &p in &old {
                libc::free(p);
            }
            let again = libc::malloc(200);
            assert_eq!(again, old[6], "the cache gives the last freed chunk first");
            libc::free(again);
            super::release_thread_cache();
            let next: Vec<_> = (0..7).map(|_| libc::malloc(200)).collect();
            assert!(
                next.iter().all(|p| !old.contains(p)),
                "the chunks freed before the release are no longer cached"
            );
            for p in next {
                libc::free(p);
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    fn only_a_large_surplus_of_free_memory_is_trimmed() {
        use super::trim_worthwhile;
        assert!(trim_worthwhile(100 << 20, 60 << 20), "after a burst");
        assert!(!trim_worthwhile(10 << 20, 1 << 20), "too little to matter");
        assert!(
            !trim_worthwhile(40 << 20, 80 << 20),
            "a steady load's reuse"
        );
    }
}
