//! What the process asks of glibc's allocator so that memory falls back after a burst (of
//! registrations, of calls): a small per-thread cache of freed chunks, fixed trim and mmap
//! thresholds, and a trim when much is free.

/// The setting asked of glibc at start: each thread's cache of freed chunks (the tcache) holds at
/// most this many of each size instead of 7. After a burst each thread's cache keeps the last
/// chunks it freed, scattered over the burst's pages, and `malloc_trim` cannot give a page back
/// while one of them lies on it: with Memcached or Redis as the store that kept RSS some 15–20 %
/// above its start after every registration had expired (bench/RESULTS.md, "glibc's per-thread
/// cache, not live data").
const TUNABLES: &str = "glibc.malloc.tcache_count=1";

use std::sync::atomic::{AtomicBool, Ordering};

/// What [`limit_thread_cache`] found, said in the log once logging is up.
#[derive(Debug, PartialEq)]
pub enum ThreadCache {
    /// The process runs with [`TUNABLES`] (it re-executed itself with them, or they were given).
    Limited,
    /// The operator's own `GLIBC_TUNABLES`, kept as given.
    Operator(String),
    /// Re-executing failed: the process runs with glibc's defaults.
    Failed(String),
    /// Not glibc: nothing to set.
    NotGlibc,
}

impl ThreadCache {
    /// Says what the allocator runs with: at debug level, or as a warning when setting it failed.
    pub fn log(&self) {
        match self {
            Self::Limited => tracing::debug!(
                "allocator: GLIBC_TUNABLES={TUNABLES} (set at start, the process re-executed itself \
                 once), so that memory falls back after a burst"
            ),
            Self::Operator(v) => tracing::debug!(
                "allocator: GLIBC_TUNABLES={v} from the environment, kept as given \
                 (strowger would set {TUNABLES})"
            ),
            Self::Failed(e) => tracing::warn!(
                "allocator: could not re-execute with GLIBC_TUNABLES={TUNABLES} ({e}); running \
                 with glibc's defaults, so memory may stay higher after a burst of registrations"
            ),
            Self::NotGlibc => {}
        }
    }
}

/// Makes the process run with [`TUNABLES`]: glibc reads `GLIBC_TUNABLES` only when a process
/// starts, and has no call that sets the cache's size later, so when the variable is not set this
/// re-executes the same binary, with the same arguments, once with it set (the process id stays).
/// An operator's own `GLIBC_TUNABLES` is left alone. Call first thing, before any thread starts.
pub fn limit_thread_cache() -> ThreadCache {
    if !cfg!(target_env = "gnu") {
        return ThreadCache::NotGlibc;
    }
    given(std::env::var_os("GLIBC_TUNABLES").as_deref())
        .unwrap_or_else(|| ThreadCache::Failed(reexec().to_string()))
}

/// What the process runs with given the `GLIBC_TUNABLES` it started with; `None` when it is
/// not set, so the process should re-execute itself with [`TUNABLES`].
fn given(tunables: Option<&std::ffi::OsStr>) -> Option<ThreadCache> {
    let v = tunables?;
    Some(if v == TUNABLES {
        ThreadCache::Limited
    } else {
        ThreadCache::Operator(v.to_string_lossy().into_owned())
    })
}

/// Replaces the process image with this binary and its arguments, [`TUNABLES`] set; returns only
/// on failure.
fn reexec() -> std::io::Error {
    use std::os::unix::process::CommandExt;
    let mut args = std::env::args_os();
    let arg0 = args.next();
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return e,
    };
    let mut cmd = std::process::Command::new(exe);
    if let Some(arg0) = arg0 {
        cmd.arg0(arg0);
    }
    cmd.args(args).env("GLIBC_TUNABLES", TUNABLES).exec()
}

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

/// A thread is ending: glibc hands its cache of freed chunks back to its heap as it ends, so the
/// next [`trim`] gives back the pages they pinned.
pub fn thread_ending() {
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
    use super::{given, ThreadCache, TUNABLES};
    use std::ffi::OsStr;

    #[test]
    fn re_executes_only_when_no_tunables_were_given_and_keeps_an_operators_own() {
        assert_eq!(given(None), None, "not set: re-execute with ours");
        assert_eq!(
            given(Some(OsStr::new(TUNABLES))),
            Some(ThreadCache::Limited),
            "after the re-execution: run, no second one"
        );
        assert_eq!(
            given(Some(OsStr::new("glibc.malloc.arena_max=2"))),
            Some(ThreadCache::Operator("glibc.malloc.arena_max=2".into())),
            "an operator's setting is kept as given"
        );
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
