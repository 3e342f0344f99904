//! What the process asks of glibc's allocator so that memory falls back after a burst (of
//! registrations, of calls): fixed trim and mmap thresholds, no fast bins, a trim when much is
//! free or a thread ended, and a way for a long-lived thread to hand its cache of freed chunks
//! back before a trim ([`release_thread_cache`]). glibc's per-thread cache stays at its default size: limiting it to
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

/// Free memory a trim leaves at the top of a heap. glibc's default (128 KiB) is kept by every
/// trim of every heap, and a thread heap, which grows without it, is shortened only by a trim:
/// the heaps of ended store threads each kept 160–240 KiB of top resident for good
/// (bench/RESULTS.md). Only the main heap grows by this much more than asked, which its few
/// allocations do not notice.
const TOP_PAD: i32 = 0;

/// Largest chunk glibc keeps in its fast bins: none. A chunk freed into a fast bin is not merged
/// with its neighbours; `malloc_trim` merges it later, into the heap's top too, but shortens only
/// the main heap's top. So the last small chunks of an ended store thread's heap, freed by the
/// workers they were handed to, left the whole heap one free top of 800 KiB that nothing gave
/// back, 150 KiB of it resident, in six such heaps after 20,000 registrations on Redis expired.
/// Merged at once, the free that empties a heap shortens it (bench/RESULTS.md, 2026-11-28).
/// glibc's per-thread cache stays in front, so the hot paths rarely reach the bins at all.
const MAX_FAST: i32 = 0;

/// Fixes the thresholds; before the threads start.
pub fn fix_thresholds() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets the allocator's parameters.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, THRESHOLD);
        libc::mallopt(libc::M_MMAP_THRESHOLD, THRESHOLD);
        libc::mallopt(libc::M_TOP_PAD, TOP_PAD);
        libc::mallopt(libc::M_MXFAST, MAX_FAST);
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

/// The smallest request of each of glibc's per-thread cache's sizes: chunks of 32 to 1040 bytes
/// in steps of 16, whose requests are 24 to 1032 bytes.
const CACHED_SIZES: std::ops::Range<usize> = 0..64;
/// How many chunks of each size [`release_thread_cache`] takes: the 7 the cache holds (glibc's
/// default `tcache_count`) and more, because a malloc that finds the cache empty refills it
/// with up to 7 more of its size from the heap's bins ("stashing"); taking several times 7
/// empties those bins too, so the cache is left empty (7 a size left 87 chunks over 82 pages in
/// a worker's cache).
const TAKEN_PER_SIZE: usize = 4 * 7;

/// Takes this thread's cache of freed chunks out and hands them to a thread that frees them into
/// their heaps as it ends, so the next [`trim`] can give back the pages they pinned; join it
/// first. A thread that freed a burst's last chunks keeps the last 7 of each size until it
/// allocates them again or ends (glibc has no call to empty it): a worker gone quiet after a
/// burst of registrations held 441 of them over 324 pages (1.3 MiB) of its heap for good
/// (bench/RESULTS.md). Taking them is a malloc of each size, cached ones first; the thread that
/// frees them caches 7 of each and returns them to the heaps when it ends, the rest at once.
/// A few hundred mallocs and a thread: for the 30 s sweep, not for a hot path.
pub fn release_thread_cache() -> Option<std::thread::JoinHandle<()>> {
    #[cfg(target_env = "gnu")]
    {
        let taken = Taken(
            CACHED_SIZES
                .flat_map(|i| std::iter::repeat_n(24 + 16 * i, TAKEN_PER_SIZE))
                // SAFETY: a plain allocation, freed when `Taken` drops.
                .map(|size| unsafe { libc::malloc(size) } as usize)
                .collect(),
        );
        std::thread::Builder::new()
            .name("release".into())
            .spawn(move || {
                drop(taken);
                thread_ending();
            })
            .ok()
    }
    #[cfg(not(target_env = "gnu"))]
    None
}

/// Chunks taken out of a thread's cache (their addresses), freed when dropped: on the thread
/// [`release_thread_cache`] starts, or where they were taken if it could not start.
#[cfg(target_env = "gnu")]
struct Taken(Vec<usize>);

#[cfg(target_env = "gnu")]
impl Drop for Taken {
    fn drop(&mut self) {
        for &chunk in &self.0 {
            // SAFETY: each came from malloc and is freed once.
            unsafe { libc::free(chunk as *mut libc::c_void) };
        }
    }
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
    /// Chunks a thread freed of one size, then reused for another size or not: in the thread's
    /// cache they cannot be (glibc keeps them for their own size); handed back to the heap they
    /// are, and a page under them could be given back.
    #[cfg(target_env = "gnu")]
    fn reused_after(release: bool) -> bool {
        std::thread::spawn(move || {
            // SAFETY: plain allocations, each freed once below.
            unsafe {
                let (freed, guards): (Vec<_>, Vec<_>) = (0..7)
                    .map(|_| (libc::malloc(1000), libc::malloc(16)))
                    .unzip();
                for &p in &freed {
                    libc::free(p);
                }
                if release {
                    super::release_thread_cache().map(|t| t.join());
                }
                let other: Vec<_> = (0..7).map(|_| libc::malloc(984)).collect();
                let reused = other.iter().any(|p| freed.contains(p));
                for p in other.into_iter().chain(guards) {
                    libc::free(p);
                }
                reused
            }
        })
        .join()
        .unwrap()
    }

    #[test]
    #[cfg(target_env = "gnu")]
    fn a_thread_s_cached_chunks_go_back_to_the_heap_when_released() {
        assert!(!reused_after(false), "cached, they stay with their size");
        assert!(reused_after(true), "released, another size takes them");
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
