//! `local:PATH`: bindings and users in this process, sharded by AOR, with every change
//! persisted as a snapshot (written to a temporary file, then renamed over PATH, so a crash
//! leaves the old or the new snapshot, never half of one). A restart reads it back.

use crate::{
    apply, Binding, Change, CredentialStore, Credentials, LocationStore, Result, StoreError,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

const SHARDS: usize = 16;

pub struct LocalStore {
    path: PathBuf,
    shards: Vec<Mutex<HashMap<String, Vec<Binding>>>>,
    users: Mutex<BTreeMap<String, Credentials>>,
    /// Serialises snapshot writes.
    writing: Mutex<()>,
}

#[derive(Serialize, Deserialize, Default)]
struct Snapshot {
    users: Vec<Credentials>,
    bindings: BTreeMap<String, Vec<Binding>>,
}

fn user_key(user: &str, domain: &str) -> String {
    format!("{user}@{domain}")
}

impl LocalStore {
    /// Opens (or starts) the store at `path`; a missing file is an empty store.
    pub fn open(path: &Path) -> Result<LocalStore> {
        let snap: Snapshot = match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                StoreError(format!(
                    "{}: not a strowger store snapshot ({e}); move it away to start empty",
                    path.display()
                ))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Snapshot::default(),
            Err(e) => return Err(StoreError(format!("{}: cannot read: {e}", path.display()))),
        };
        let s = LocalStore {
            path: path.to_path_buf(),
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            users: Mutex::new(
                snap.users
                    .into_iter()
                    .map(|c| (user_key(&c.user, &c.domain), c))
                    .collect(),
            ),
            writing: Mutex::new(()),
        };
        for (aor, list) in snap.bindings {
            s.shard(&aor).lock().unwrap().insert(aor, list);
        }
        Ok(s)
    }

    fn shard(&self, aor: &str) -> &Mutex<HashMap<String, Vec<Binding>>> {
        let mut h = DefaultHasher::new();
        aor.hash(&mut h);
        &self.shards[h.finish() as usize % SHARDS]
    }

    fn persist(&self) -> Result<()> {
        let _w = self.writing.lock().unwrap();
        let mut snap = Snapshot {
            users: self.users.lock().unwrap().values().cloned().collect(),
            bindings: BTreeMap::new(),
        };
        for s in &self.shards {
            for (k, v) in s.lock().unwrap().iter() {
                snap.bindings.insert(k.clone(), v.clone());
            }
        }
        let bytes = serde_json::to_vec(&snap).map_err(|e| StoreError(e.to_string()))?;
        let err = |e: std::io::Error| {
            StoreError(format!(
                "{}: cannot write the store snapshot: {e} (check the directory exists and is writable)",
                self.path.display()
            ))
        };
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let mut f = std::fs::File::create(&tmp).map_err(err)?;
        f.write_all(&bytes).map_err(err)?;
        f.sync_data().map_err(err)?;
        std::fs::rename(&tmp, &self.path).map_err(err)
    }
}

impl LocationStore for LocalStore {
    fn update(&self, aor: &str, changes: &[Change], now: u64) -> Result<Vec<Binding>> {
        let list = {
            let mut shard = self.shard(aor).lock().unwrap();
            let old = shard.remove(aor).unwrap_or_default();
            let list = apply(old, changes, now);
            if !list.is_empty() {
                shard.insert(aor.to_string(), list.clone());
            }
            list
        };
        self.persist()?;
        Ok(list)
    }

    fn lookup(&self, aor: &str, now: u64) -> Result<Vec<Binding>> {
        let shard = self.shard(aor).lock().unwrap();
        Ok(shard
            .get(aor)
            .map(|l| l.iter().filter(|b| b.expires_at > now).cloned().collect())
            .unwrap_or_default())
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
        self.users
            .lock()
            .unwrap()
            .insert(user_key(&c.user, &c.domain), c.clone());
        self.persist()
    }

    fn del_user(&self, user: &str, domain: &str) -> Result<bool> {
        let had = self
            .users
            .lock()
            .unwrap()
            .remove(&user_key(user, domain))
            .is_some();
        if had {
            self.persist()?;
        }
        Ok(had)
    }

    fn users(&self) -> Result<Vec<Credentials>> {
        Ok(self.users.lock().unwrap().values().cloned().collect())
    }
}

#[cfg(test)]
mod tests {
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
        })
        .unwrap();
        drop(s);
        let s = LocalStore::open(&path).unwrap();
        assert_eq!(s.lookup("alice@x", 100).unwrap().len(), 2);
        assert_eq!(s.user("alice", "x").unwrap().unwrap().ha1_md5, "m");
        assert!(!dir.join("s.snap.tmp").exists());
        let l = s.update("alice@x", &[Change::RemoveAll], 100).unwrap();
        assert!(l.is_empty());
        assert!(s.del_user("alice", "x").unwrap());
        assert!(s.users().unwrap().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn corrupt_snapshot_says_what_to_do() {
        let path = std::env::temp_dir().join(format!("strowger-bad-{}.snap", std::process::id()));
        std::fs::write(&path, b"nope").unwrap();
        let e = LocalStore::open(&path).err().unwrap();
        assert!(e.0.contains("move it away"), "{e}");
        let _ = std::fs::remove_file(&path);
    }
}
