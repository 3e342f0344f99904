//! Shared harness for strowger's black-box tests: free ports, temp dirs, the strowger process,
//! SIPp runs, a hand-written SIP/RTP client, G.711/WAV/DSP helpers and a tiny JSON reader for
//! the CDRs, Redis and Memcached servers, a PostgreSQL cluster. Std only, and deliberately independent of the project's own sip/sdp/rtp crates so
//! that a bug there cannot hide itself in the tests.
#![allow(dead_code)] // every test binary uses a different subset

pub mod api;
pub mod audio;
pub mod baresip;
pub mod group;
pub mod json;
pub mod net;
pub mod netns;
pub mod pcap;
pub mod postgres;
pub mod registrar;
pub mod servers;
pub mod sip;
pub mod sipp;
pub mod switch;
pub mod webdriver;
pub mod ws;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

#[allow(unused_imports)] // harness.rs never starts strowger
pub use switch::Strowger;

/// The workspace root (crates/strowger/../..).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Project test data: tests/ at the repo root (SIPp scenarios, configs).
pub fn tests_dir() -> PathBuf {
    repo_root().join("tests")
}

/// ../shared beside the repo (the conformance corpora).
pub fn shared_dir() -> PathBuf {
    repo_root().join("../shared")
}

/// A directory removed on drop, except when the test is failing: then it is kept and its
/// path printed, so SIPp traces and strowger's log can be read afterwards.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(label: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir()
            .join("strowger-tests")
            .join(format!("{label}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// A fresh subdirectory, unique within this dir.
    pub fn subdir(&self, label: &str) -> PathBuf {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = self
            .0
            .join(format!("{label}-{}", N.fetch_add(1, Ordering::Relaxed)));
        std::fs::create_dir_all(&dir).expect("create subdir");
        dir
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("test files kept in {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Polls `f` every 50 ms until it returns Some or `limit` passes.
pub fn wait_for<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let end = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The last `n` lines of `text`, for evidence in panic messages.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Reads a file as (lossy) text; empty if it does not exist.
pub fn read_text(path: &Path) -> String {
    std::fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}
