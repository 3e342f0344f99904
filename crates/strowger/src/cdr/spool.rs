//! The spool: CDRs the database has not taken yet, one JSON line each, in
//! `data_dir/cdr-spool.jsonl`. The writer appends to it while the database is down, a worker
//! when the writer's queue is full. The writer replays it by renaming it aside
//! (`cdr-spool.replay.jsonl`) and deletes that only once all its rows are committed, so a
//! crash or a stop mid-replay leaves them for the next try (the database skips those it has).
//!
//! Appenders take a shared `flock` and check that the file they opened is still the spool;
//! the writer takes the exclusive lock once after the rename. Then no append can land in the
//! renamed file after the writer started reading it, and appends never wait on each other.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

pub const SPOOL: &str = "cdr-spool.jsonl";
const REPLAY: &str = "cdr-spool.replay.jsonl";

/// Appends CDRs (JSON, no newline) to the spool at `path`, in one write.
pub fn append(path: &Path, cdrs: &[String]) -> io::Result<()> {
    let mut buf = String::with_capacity(cdrs.iter().map(|c| c.len() + 1).sum());
    for c in cdrs {
        buf.push_str(c);
        buf.push('\n');
    }
    loop {
        let mut f = OpenOptions::new().create(true).append(true).open(path)?;
        flock(&f, libc::LOCK_SH)?;
        // Renamed for replay between our open and our lock: append to the new spool instead.
        let opened = f.metadata()?;
        match fs::metadata(path) {
            Ok(m) if m.dev() == opened.dev() && m.ino() == opened.ino() => {
                return f.write_all(buf.as_bytes());
            }
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        }
    }
}

fn flock(f: &File, op: libc::c_int) -> io::Result<()> {
    // SAFETY: flock(2) on a descriptor `f` owns; the lock goes with it when it is closed.
    if unsafe { libc::flock(f.as_raw_fd(), op) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The writer's side of the spool.
pub struct Spool {
    path: PathBuf,
    replay: PathBuf,
    reading: Option<Replay>,
}

/// The renamed spool being replayed: `committed` is where the rows the database has end,
/// `read` where those handed out by [`Spool::next`] end.
struct Replay {
    file: BufReader<File>,
    committed: u64,
    read: u64,
}

impl Spool {
    pub fn new(dir: &Path) -> Spool {
        Spool {
            path: dir.join(SPOOL),
            replay: dir.join(REPLAY),
            reading: None,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn append(&self, cdrs: &[String]) -> io::Result<()> {
        append(&self.path, cdrs)
    }

    /// Whether CDRs wait in the spool (a stat or two: the writer asks once per batch).
    pub fn pending(&self) -> bool {
        self.reading.is_some()
            || self.replay.exists()
            || fs::metadata(&self.path).is_ok_and(|m| m.len() > 0)
    }

    /// Up to `n` spooled CDRs, oldest first; none when the spool is empty. Lines that are not
    /// a CDR with an id (a write torn by a crash) are skipped: the JSON-lines file has them.
    pub fn next(&mut self, n: usize) -> io::Result<Vec<String>> {
        let mut out = Vec::new();
        while out.is_empty() {
            let Some(r) = self.open()? else {
                return Ok(out);
            };
            let mut line = String::new();
            while out.len() < n {
                line.clear();
                let got = r.file.read_line(&mut line)?;
                if got == 0 {
                    break;
                }
                r.read += got as u64;
                let cdr = line.trim_end();
                if has_id(cdr) {
                    out.push(cdr.to_string());
                } else if !cdr.is_empty() {
                    tracing::warn!(
                        "cdr.database: skipping a spooled line that is no CDR: {:.80}",
                        cdr
                    );
                }
            }
            if out.is_empty() {
                // All of the renamed spool is in the database: look at the spool again.
                self.reading = None;
                fs::remove_file(&self.replay)?;
            }
        }
        Ok(out)
    }

    /// The CDRs `next` gave are committed: they are not given again.
    pub fn committed(&mut self) {
        if let Some(r) = &mut self.reading {
            r.committed = r.read;
        }
    }

    /// They were not: `next` gives them again.
    pub fn rewind(&mut self) -> io::Result<()> {
        if let Some(r) = &mut self.reading {
            r.file.seek(SeekFrom::Start(r.committed))?;
            r.read = r.committed;
        }
        Ok(())
    }

    /// The file being replayed: one left by an earlier run, or else the spool renamed.
    fn open(&mut self) -> io::Result<Option<&mut Replay>> {
        if self.reading.is_none() {
            if !self.replay.exists() {
                if !fs::metadata(&self.path).is_ok_and(|m| m.len() > 0) {
                    return Ok(None);
                }
                fs::rename(&self.path, &self.replay)?;
            }
            let file = File::open(&self.replay)?;
            // Waits out appends that opened the spool before the rename.
            flock(&file, libc::LOCK_EX)?;
            flock(&file, libc::LOCK_UN)?;
            self.reading = Some(Replay {
                file: BufReader::new(file),
                committed: 0,
                read: 0,
            });
        }
        Ok(self.reading.as_mut())
    }
}

fn has_id(line: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(line)
        .is_ok_and(|v| v.get("id").and_then(|id| id.as_str()).is_some())
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub fn cdrs(ids: std::ops::Range<u32>) -> Vec<String> {
        ids.map(|i| format!(r#"{{"id":"{i}"}}"#)).collect()
    }

    #[test]
    fn replays_in_order_and_forgets_only_what_was_committed() {
        let dir = tempdir();
        let mut s = Spool::new(&dir);
        assert!(!s.pending());
        s.append(&cdrs(0..5)).unwrap();
        assert!(s.pending());
        assert_eq!(s.next(3).unwrap(), cdrs(0..3));
        s.rewind().unwrap();
        assert_eq!(s.next(3).unwrap(), cdrs(0..3), "not committed: given again");
        s.committed();
        // Appended during the replay: after the renamed spool's rows.
        append(&dir.join(SPOOL), &cdrs(5..7)).unwrap();
        assert_eq!(s.next(3).unwrap(), cdrs(3..5));
        s.committed();
        assert_eq!(s.next(3).unwrap(), cdrs(5..7));
        s.committed();
        assert!(s.next(3).unwrap().is_empty());
        assert!(!s.pending());
    }

    #[test]
    fn a_replay_cut_short_resumes_in_the_next_run() {
        let dir = tempdir();
        let mut s = Spool::new(&dir);
        s.append(&cdrs(0..4)).unwrap();
        assert_eq!(s.next(2).unwrap(), cdrs(0..2));
        drop(s);
        let mut again = Spool::new(&dir);
        assert!(again.pending());
        assert_eq!(again.next(10).unwrap(), cdrs(0..4));
    }

    #[test]
    fn torn_and_foreign_lines_are_skipped() {
        let dir = tempdir();
        fs::write(
            dir.join(SPOOL),
            "{\"id\":\"a\"}\nnot json\n{\"no_id\":1}\n{\"id\":\"b\"}\n{\"id\":",
        )
        .unwrap();
        let mut s = Spool::new(&dir);
        assert_eq!(s.next(10).unwrap(), ["{\"id\":\"a\"}", "{\"id\":\"b\"}"]);
    }

    pub fn tempdir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "strowger-spool-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        fs::create_dir_all(&dir).unwrap();
        dir
    }
}
