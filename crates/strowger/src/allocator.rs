//! What the process asks of glibc's allocator so that memory falls back after a burst (of
//! registrations, of calls): fixed trim and mmap thresholds, and a trim when much is free or a
//! thread ended. glibc's per-thread cache of freed chunks stays at its default: limiting it to
//! one chunk a size (`GLIBC_TUNABLES=glibc.malloc.tcache_count=1`, which an operator may set)
//! lowers memory after a burst on a Redis or Memcached store but costs a bridged call about 3 %
//! more instructions (bench/RESULTS.md, 2026-11-27 14:45–14:53).

use std::sync::atomic::{AtomicBool, Ordering};

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

/// Set when a thread ends ([`thread_ending`]) until the next [`trim`].
static THREAD_ENDED: AtomicBool = AtomicBool::new(false);

/// A block that frees as a chunk of its thread's heap, at least glibc's 64 KiB that makes a free
/// try to shorten the heap (and under [`THRESHOLD`], so it is not given a mapping of its own).
const HEAP_TRIM_BLOCK: usize = 96 * 1024;

/// A thread is ending: glibc hands its cache of freed chunks back to its heap as it ends, so the
/// next [`trim`] gives back the pages they pinned. A thread's heap keeps its top (what lies past
/// its last chunk in use) until a free of at least 64 KiB in that heap shortens it: `malloc_trim`
/// never does, and a heap a burst grew kept hundreds of KiB of top resident after its thread
/// ended (bench/RESULTS.md). So the thread frees such a block in its own heap first.
pub fn thread_ending() {
    #[cfg(target_env = "gnu")]
    // SAFETY: a block allocated and freed here, used for nothing else.
    unsafe {
        let block = libc::malloc(HEAP_TRIM_BLOCK);
        libc::free(std::hint::black_box(block));
    }
    THREAD_ENDED.store(true, Ordering::Relaxed);
}

/// Gives free pages back to the system when something was just let go (`released`, or a thread
/// ended) or the allocator holds much more free memory than it uses: glibc keeps a heap's free
/// pages otherwise, and a burst would hold its peak for good.
pub fn trim(released: bool) {
    let released = THREAD_ENDED.swap(false, Ordering::Relaxed) || released;
    #[cfg(target_env = "gnu")]
    // SAFETY: mallinfo2 only reads the allocator's statistics, and malloc_trim only returns
    // free memory of its heaps.
    unsafe {
        let m = libc::mallinfo2();
        if released || trim_worthwhile(m.fordblks, m.uordblks) {
            libc::malloc_trim(0);
        }
    }
    #[cfg(not(target_env = "gnu"))]
    let _ = released;
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
