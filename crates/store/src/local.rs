//! `local:PATH`: bindings and users in this process, sharded by AOR, kept on disk as a snapshot
//! at PATH plus a journal beside it (PATH.journal). Every change appends one line to the
//! journal before it is acknowledged: the AOR's whole new binding list, or the user's new
//! credentials, so replaying a line is idempotent. A restart reads the snapshot and replays
//! the journal. When the journal outgrows the data it describes, it is folded into a new
//! snapshot (written to a temporary file and renamed over PATH, so a crash leaves the old or the
//! new snapshot, never half of one) and started again empty.
//!
//! A binding change's line waits in memory until `commit`, which the worker calls before it sends
//! the replies of a batch of requests: one write for the batch, and still written to the kernel
//! before any of its changes is acknowledged, so a crash or restart of strowger loses nothing
//! acknowledged. (Users added or removed are written at once.) A background thread flushes the
//! journal to the disk once a second (and every snapshot is flushed before it replaces the old
//! one), so a power cut may lose the last second, and no change ever waits for the disk. A write
//! or flush that fails fails the next change (the failed batch's changes stay in memory).

use crate::packed::{Packed, Record};
use crate::{apply, Binding, Change, CredentialStore, Credentials, Error, LocationStore, Result};
use rustc_hash::{FxBuildHasher, FxHashMap};
use serde::{Deserialize, Serialize, Serializer};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fs::File;
use std::hash::BuildHasher;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

const SHARDS: usize = 16;
/// The journal is folded into the snapshot once it has this many lines and more lines than
/// twice the AORs and users it describes (so folding costs O(1) per change, amortised).
const MIN_FOLD: u64 = 4096;
const SYNC_EVERY: Duration = Duration::from_secs(1);

pub struct LocalStore {
    path: PathBuf,
    /// AOR → bindings, packed (crate::packed).
    shards: Vec<Mutex<Packed>>,
    /// By `user@domain`. Only operators add users, so a fast hash without a random key is safe
    /// here (a lookup's name may come from anyone, but it inserts nothing).
    users: Mutex<FxHashMap<String, Credentials>>,
    /// Lock order: a shard or `users`, then `journal` (a fold takes `users`, every shard in
    /// order, then `journal`).
    journal: Mutex<Journal>,
    sync: Arc<Flush>,
}

struct Journal {
    file: File,
    lines: u64,
    /// Lines not written yet (see `commit`).
    pending: Vec<u8>,
}

impl Journal {
    /// Writes the pending lines; a failure is also remembered to fail the next change.
    fn write_pending(&mut self, path: &Path, sync: &Flush) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let written = self.file.write_all(&self.pending);
        self.pending.clear();
        sync.dirty.store(true, Ordering::Relaxed);
        written.map_err(|e| {
            let e = write_error(&journal_path(path), e);
            *sync.failed.lock().unwrap() = Some(e.clone());
            e
        })
    }
}

/// Shared with the thread that flushes the journal.
struct Flush {
    /// Written since the last flush.
    dirty: AtomicBool,
    /// The store is gone: the thread ends.
    closed: AtomicBool,
    failed: Mutex<Option<Error>>,
}

impl Drop for LocalStore {
    fn drop(&mut self) {
        let _ = self.commit();
        self.sync.closed.store(true, Ordering::Relaxed);
    }
}

/// Flushes `file` once a second while something was written, until the store closes.
fn flush_loop(file: File, path: PathBuf, sync: Arc<Flush>) {
    while !sync.closed.load(Ordering::Relaxed) {
        std::thread::sleep(SYNC_EVERY);
        if sync.dirty.swap(false, Ordering::Relaxed) {
            if let Err(e) = file.sync_data() {
                *sync.failed.lock().unwrap() = Some(write_error(&path, e));
            }
        }
    }
}

#[derive(Serialize, Deserialize, Default)]
struct Snapshot {
    users: Vec<Credentials>,
    bindings: BTreeMap<String, Vec<Binding>>,
}

/// A [`Snapshot`] as it is written: borrowed from the locked shards, each AOR's bindings
/// decoded only as they are written.
#[derive(Serialize)]
struct SnapshotRef<'a> {
    users: Vec<Credentials>,
    bindings: Sorted<'a>,
}

/// The AORs' records in the order of their names, and the time that says which bindings live.
struct Sorted<'a>(Vec<Record<'a>>, u64);

impl Serialize for Sorted<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|r| (r.aor(), r.live(self.1))))
    }
}

/// One journal line (borrowed when written, owned when read).
#[derive(Serialize, Deserialize)]
enum Entry<'a> {
    Aor(Cow<'a, str>, Cow<'a, [Binding]>),
    /// Boxed: the largest entry by far, read and written once per user change.
    User(Box<Credentials>),
    DelUser(String),
}

fn user_key(user: &str, domain: &str) -> String {
    format!("{user}@{domain}")
}

impl LocalStore {
    /// Opens (or starts) the store at `path`; a missing file is an empty store.
    pub fn open(path: &Path) -> Result<LocalStore> {
        let snap: Snapshot = match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| Error::Corrupt {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Snapshot::default(),
            Err(e) => return Err(read_error(path, e)),
        };
        let mut users: FxHashMap<String, Credentials> = snap
            .users
            .into_iter()
            .map(|c| (user_key(&c.user, &c.domain), c))
            .collect();
        let mut bindings = snap.bindings;
        let jpath = journal_path(path);
        let mut lines = 0;
        match File::open(&jpath) {
            Ok(f) => {
                for line in BufReader::new(f).lines() {
                    let line = line.map_err(|e| read_error(&jpath, e))?;
                    // A line cut short by a crash is the last one: what it held was never
                    // acknowledged.
                    let Ok(entry) = serde_json::from_str::<Entry>(&line) else {
                        break;
                    };
                    lines += 1;
                    match entry {
                        Entry::Aor(aor, list) if list.is_empty() => {
                            bindings.remove(&*aor);
                        }
                        Entry::Aor(aor, list) => {
                            bindings.insert(aor.into_owned(), list.into_owned());
                        }
                        Entry::User(c) => {
                            users.insert(user_key(&c.user, &c.domain), *c);
                        }
                        Entry::DelUser(k) => {
                            users.remove(&k);
                        }
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(read_error(&jpath, e)),
        }
        let err = |e: std::io::Error| write_error(path, e);
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&jpath)
            .map_err(err)?;
        let sync = Arc::new(Flush {
            dirty: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            failed: Mutex::new(None),
        });
        let flushed = file.try_clone().map_err(err)?;
        let (sync2, jpath2) = (sync.clone(), jpath.clone());
        std::thread::Builder::new()
            .name("store-flush".into())
            .spawn(move || flush_loop(flushed, jpath2, sync2))
            .map_err(err)?;
        let s = LocalStore {
            path: path.to_path_buf(),
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            users: Mutex::new(users),
            journal: Mutex::new(Journal {
                file,
                lines,
                pending: Vec::with_capacity(64 * 1024),
            }),
            sync,
        };
        for (aor, list) in bindings {
            s.shard(&aor).lock().unwrap().put(&aor, &list);
        }
        // Start from a fresh snapshot and an empty journal (lapsed bindings are dropped by
        // later folds, which know the time).
        s.fold(0, 0)?;
        Ok(s)
    }

    /// The shard of an AOR. A fast hash picks it (an AOR that anyone may choose can at worst
    /// crowd one of the 16 locks); the shard's own map keeps the keyed hash.
    fn shard(&self, aor: &str) -> &Mutex<Packed> {
        &self.shards[(FxBuildHasher.hash_one(aor) >> 32) as usize % SHARDS]
    }

    /// Appends one entry to the pending lines (the caller holds the lock of what it changed);
    /// `now`: written at once. Returns the journal's length in lines.
    fn append(&self, e: &Entry<'_>, now: bool) -> Result<u64> {
        if let Some(e) = self.sync.failed.lock().unwrap().take() {
            return Err(e);
        }
        let mut j = self.journal.lock().unwrap();
        let start = j.pending.len();
        if let Err(e) = serde_json::to_writer(&mut j.pending, e) {
            j.pending.truncate(start);
            return Err(Error::encode("a journal line", e));
        }
        j.pending.push(b'\n');
        j.lines += 1;
        if now {
            j.write_pending(&self.path, &self.sync)?;
        }
        Ok(j.lines)
    }

    /// Folds the journal into a snapshot when it has grown past `MIN_FOLD` lines and twice the
    /// records it describes. Called with no lock held.
    fn fold_if_due(&self, lines: u64, now: u64) -> Result<()> {
        if lines < MIN_FOLD {
            return Ok(());
        }
        // Shards are not locked together here: the figure only paces folding.
        let records = self.users.lock().unwrap().len()
            + self
                .shards
                .iter()
                .map(|s| s.lock().unwrap().len())
                .sum::<usize>();
        if lines > 2 * records as u64 {
            self.fold(now, MIN_FOLD)?;
        }
        Ok(())
    }

    /// Writes a snapshot of everything and empties the journal, dropping lapsed bindings, if
    /// the journal still has `at_least` lines once the locks are held.
    fn fold(&self, now: u64, at_least: u64) -> Result<()> {
        let users = self.users.lock().unwrap();
        let mut shards: Vec<MutexGuard<'_, Packed>> =
            self.shards.iter().map(|s| s.lock().unwrap()).collect();
        let mut j = self.journal.lock().unwrap();
        if j.lines < at_least {
            return Ok(()); // another thread folded it meanwhile
        }
        for shard in shards.iter_mut() {
            shard.retain(|r| r.lapses() > now);
        }
        // Borrowed and written as it is encoded: a copy of every binding, or the whole text in
        // memory, would double the store's memory at each fold.
        let mut records: Vec<Record<'_>> = shards.iter().flat_map(|s| s.iter()).collect();
        records.sort_unstable_by_key(|r| r.aor());
        let snap = SnapshotRef {
            users: sorted_users(&users),
            bindings: Sorted(records, now),
        };
        let err = |e: std::io::Error| write_error(&self.path, e);
        // Per process: two processes opening one store (a mistake, but a possible one) must not
        // rename each other's half-written snapshot.
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(format!(".tmp{}", std::process::id()));
        let tmp = PathBuf::from(tmp);
        let mut f = std::io::BufWriter::new(File::create(&tmp).map_err(err)?);
        serde_json::to_writer(&mut f, &snap).map_err(|e| Error::encode("the snapshot", e))?;
        let f = f.into_inner().map_err(|e| err(e.into_error()))?;
        f.sync_data().map_err(err)?;
        std::fs::rename(&tmp, &self.path).map_err(err)?;
        // The snapshot holds what the pending lines say.
        j.pending.clear();
        j.file.set_len(0).map_err(err)?;
        j.lines = 0;
        Ok(())
    }
}

fn journal_path(path: &Path) -> PathBuf {
    let mut p = path.to_path_buf().into_os_string();
    p.push(".journal");
    PathBuf::from(p)
}

fn write_error(path: &Path, e: std::io::Error) -> Error {
    Error::Write {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

fn read_error(path: &Path, e: std::io::Error) -> Error {
    Error::Read {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

impl LocationStore for LocalStore {
    fn commit(&self) -> Result<()> {
        let mut j = self.journal.lock().unwrap();
        j.write_pending(&self.path, &self.sync)
    }

    fn update(&self, aor: &str, changes: &[Change], now: u64) -> Result<Vec<Binding>> {
        let (list, lines) = {
            let mut shard = self.shard(aor).lock().unwrap();
            let old = shard.get(aor).map(|r| r.bindings()).unwrap_or_default();
            let list = apply(old, changes, now);
            // Journal first: a change that cannot be written is not made.
            let lines = self.append(&Entry::Aor(aor.into(), (&list[..]).into()), false)?;
            shard.put(aor, &list);
            (list, lines)
        };
        self.fold_if_due(lines, now)?;
        Ok(list)
    }

    fn lookup(&self, aor: &str, now: u64) -> Result<Vec<Binding>> {
        let shard = self.shard(aor).lock().unwrap();
        Ok(shard.get(aor).map(|r| r.live(now)).unwrap_or_default())
    }

    fn expire(&self, now: u64) -> usize {
        let mut gone = 0;
        for shard in &self.shards {
            gone += shard.lock().unwrap().retain(|r| r.lapses() > now);
        }
        gone
    }

    fn bindings(&self, now: u64) -> Option<u64> {
        let shards = self.shards.iter();
        Some(
            shards
                .map(|s| {
                    let s = s.lock().unwrap();
                    s.iter().map(|r| r.live_count(now) as u64).sum::<u64>()
                })
                .sum(),
        )
    }
}

impl CredentialStore for LocalStore {
    fn user(&self, user: &str, domain: &str) -> Result<Option<Credentials>> {
        Ok(self
            .users
            .lock()
            .unwrap()
            .get(&user_key(user, domain))
            .cloned())
    }

    fn put_user(&self, c: &Credentials) -> Result<()> {
        let lines = {
            let mut users = self.users.lock().unwrap();
            let lines = self.append(&Entry::User(Box::new(c.clone())), true)?;
            users.insert(user_key(&c.user, &c.domain), c.clone());
            lines
        };
        self.fold_if_due(lines, unix_now())
    }

    fn del_user(&self, user: &str, domain: &str) -> Result<bool> {
        let k = user_key(user, domain);
        let lines = {
            let mut users = self.users.lock().unwrap();
            if !users.contains_key(&k) {
                return Ok(false);
            }
            let lines = self.append(&Entry::DelUser(k.clone()), true)?;
            users.remove(&k);
            lines
        };
        self.fold_if_due(lines, unix_now())?;
        Ok(true)
    }

    fn users(&self) -> Result<Vec<Credentials>> {
        Ok(sorted_users(&self.users.lock().unwrap()))
    }
}

/// Users in a stable order (by user, then domain), for listings and snapshots.
fn sorted_users(users: &FxHashMap<String, Credentials>) -> Vec<Credentials> {
    let mut v: Vec<Credentials> = users.values().cloned().collect();
    v.sort_by(|a, b| (&a.user, &a.domain).cmp(&(&b.user, &b.domain)));
    v
}

/// Credential calls carry no time; a fold after one needs it to drop lapsed bindings.
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn binding(contact: &str, expires_at: u64) -> Binding {
        Binding {
            contact: contact.into(),
            expires_at,
            q: 1000,
            received: "127.0.0.1:5070".parse().unwrap(),
            transport: "udp".into(),
            path: vec![],
            instance: None,
            reg_id: None,
            call_id: "c1".into(),
            cseq: 1,
        }
    }

    #[test]
    fn updates_reach_the_journal_file_in_one_write_at_commit() {
        let dir = std::env::temp_dir().join(format!("strowger-commit-{}", std::process::id()));
        let path = dir.join("s.snap");
        let _ = std::fs::remove_dir_all(&dir);
        let s = LocalStore::open(&path).unwrap();
        let journal = || std::fs::read_to_string(journal_path(&path)).unwrap();
        for (i, aor) in ["a@x", "b@x", "c@x"].iter().enumerate() {
            let b = binding(&format!("sip:{i}@1.2.3.4"), 200);
            s.update(aor, &[Change::Put(b)], 100).unwrap();
        }
        assert_eq!(journal(), "", "held back until commit");
        s.commit().unwrap();
        assert_eq!(journal().lines().count(), 3);
        s.commit().unwrap();
        assert_eq!(journal().lines().count(), 3, "nothing written twice");
        // What a process that stops between an update and its commit leaves: only what was
        // committed (the update was never acknowledged). Dropping commits the rest.
        s.update("d@x", &[Change::Put(binding("sip:d@1.2.3.4", 200))], 100)
            .unwrap();
        assert_eq!(journal().lines().count(), 3);
        drop(s);
        let s = LocalStore::open(&path).unwrap();
        for aor in ["a@x", "b@x", "c@x", "d@x"] {
            assert_eq!(s.lookup(aor, 100).unwrap().len(), 1, "{aor}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn lapsed_bindings_are_swept_and_their_room_given_back() {
        let dir = std::env::temp_dir().join(format!("strowger-expire-{}", std::process::id()));
        let path = dir.join("s.snap");
        let _ = std::fs::remove_dir_all(&dir);
        let s = LocalStore::open(&path).unwrap();
        let room = |s: &LocalStore| {
            s.shards
                .iter()
                .map(|m| m.lock().unwrap().room())
                .sum::<usize>()
        };
        for i in 0..5_000 {
            let b = binding(&format!("sip:{i}@1.2.3.4"), if i < 10 { 900 } else { 200 });
            s.update(&format!("{i}@x"), &[Change::Put(b)], 100).unwrap();
        }
        let full = room(&s);
        assert_eq!(s.expire(150), 0, "nothing lapsed yet");
        assert_eq!(s.expire(200), 4_990);
        assert_eq!(s.bindings(200), Some(10));
        assert_eq!(s.lookup("3@x", 200).unwrap().len(), 1);
        assert!(room(&s) < full / 8, "room {} of {full}", room(&s));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bindings_expire_and_survive_a_restart() {
        let dir = std::env::temp_dir().join(format!("strowger-store-{}", std::process::id()));
        let path = dir.join("s.snap");
        let _ = std::fs::remove_file(&path);
        let s = LocalStore::open(&path).unwrap();
        let a = binding("sip:a@1.2.3.4", 200);
        let b = binding("sip:b@1.2.3.4", 150);
        let l = s
            .update(
                "alice@x",
                &[Change::Put(a.clone()), Change::Put(b.clone())],
                100,
            )
            .unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!(s.lookup("alice@x", 160).unwrap(), vec![a.clone()]);
        s.put_user(&Credentials {
            user: "alice".into(),
            domain: "x".into(),
            ha1_md5: "m".into(),
            ha1_sha256: "s".into(),
            ..Credentials::default()
        })
        .unwrap();
        drop(s);
        let s = LocalStore::open(&path).unwrap();
        assert_eq!(s.lookup("alice@x", 100).unwrap().len(), 2);
        assert_eq!(s.user("alice", "x").unwrap().unwrap().ha1_md5, "m");
        // Forwarding set from a phone is part of the user's record, journal and snapshot.
        assert!(s
            .set_forward("alice", "x", Some(crate::Forward::Busy), Some("2001"))
            .unwrap());
        assert!(!s.set_forward("nobody", "x", None, None).unwrap());
        drop(s);
        let s = LocalStore::open(&path).unwrap();
        let c = s.user("alice", "x").unwrap().unwrap();
        assert_eq!(c.forward.target(crate::Forward::Busy), Some("2001"));
        assert_eq!(c.ha1_md5, "m");
        s.set_forward("alice", "x", None, None).unwrap();
        assert!(s.user("alice", "x").unwrap().unwrap().forward.is_empty());
        assert!(!dir
            .join(format!("s.snap.tmp{}", std::process::id()))
            .exists());
        let l = s.update("alice@x", &[Change::RemoveAll], 100).unwrap();
        assert!(l.is_empty());
        assert!(s.del_user("alice", "x").unwrap());
        assert!(s.users().unwrap().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Thousands of changes (past a fold) and a line cut short by a crash: a reopened store
    /// has every acknowledged change and nothing of the cut line.
    #[test]
    fn journal_replays_across_folds_and_ignores_a_torn_line() {
        let dir = std::env::temp_dir().join(format!("strowger-journal-{}", std::process::id()));
        let path = dir.join("s.snap");
        let _ = std::fs::remove_dir_all(&dir);
        let s = LocalStore::open(&path).unwrap();
        let n = (MIN_FOLD as usize * 3).div_ceil(100) * 100;
        for i in 0..n {
            let aor = format!("u{}@x", i % 100);
            let b = binding(&format!("sip:{i}@h"), 1_000 + i as u64);
            s.update(&aor, &[Change::RemoveAll, Change::Put(b)], 100)
                .unwrap();
        }
        s.update("u0@x", &[Change::RemoveAll], 100).unwrap();
        let lines = s.journal.lock().unwrap().lines;
        assert!(lines < MIN_FOLD, "folded on the way: {lines} lines left");
        drop(s);
        let mut j = std::fs::OpenOptions::new()
            .append(true)
            .open(journal_path(&path))
            .unwrap();
        j.write_all(b"{\"Aor\":[\"u1@x\",[{\"contact\":").unwrap();
        drop(j);

        let s = LocalStore::open(&path).unwrap();
        assert!(s.lookup("u0@x", 100).unwrap().is_empty(), "removed last");
        let last = n - 1;
        let l = s.lookup("u99@x", 100).unwrap();
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].contact, format!("sip:{last}@h"));
        assert_eq!(
            s.lookup("u1@x", 100).unwrap()[0].contact,
            format!("sip:{}@h", n - 99)
        );
        assert_eq!(
            std::fs::metadata(journal_path(&path)).unwrap().len(),
            0,
            "folded at open"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn corrupt_snapshot_says_what_to_do() {
        let path = std::env::temp_dir().join(format!("strowger-bad-{}.snap", std::process::id()));
        std::fs::write(&path, b"nope").unwrap();
        let e = LocalStore::open(&path).err().unwrap();
        assert!(matches!(e, Error::Corrupt { .. }), "{e}");
        assert!(e.to_string().contains("move it away"), "{e}");
        let _ = std::fs::remove_file(&path);
    }
}
