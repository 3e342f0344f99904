//! A bounded read cache in front of a network backend. Bindings are answered from it only when
//! the backend is unavailable (`Error::is_unavailable`; a backend that answers with an error is
//! not hidden behind old data): while Redis or Memcached is away, calls to users who registered (or were
//! looked up) before still find them, and instances sharing a backend always see each other's
//! changes. Users' credentials are also answered from it for `USER_TTL_S` after they were read
//! (`recent_user`), sparing a round trip per authenticated request. A failed write never looks
//! stored.
//!
//! When the backend answers again after being unavailable, what it lost is written back: every cached
//! AOR with live bindings and every cached user the backend no longer has (a restarted
//! memcached, or a Redis without persistence, comes back empty). Only missing keys are
//! restored, so a backend that kept its data is left as it is.

use crate::pipe::{Answer, Ask, Pending, Pipe, Reply};
use crate::{Binding, Change, CredentialStore, Credentials, Error, LocationStore, Result};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// What one cache remembers at most by default (`registrar.cache_entries`): the oldest entries
/// are forgotten first. At about 1 KB per AOR with its bindings, 20,000 hold some 20 MB, while
/// the backend holds every binding.
pub const CACHE_ENTRIES: usize = 20_000;

/// How long credentials read from the backend answer `recent_user`. A password changed or a
/// user removed by another process (`strowger user passwd|del`) is therefore honoured by a
/// running instance within this time: a bound, not a cache invalidation, because Memcached
/// cannot tell anyone of a change. It widens little: bindings made with the old password live
/// on until they expire anyway, and a new password is never refused (a denial against a recent
/// copy is checked again against the backend).
pub const USER_TTL_S: u64 = 30;

/// `inner` with a bounded copy of the last value read or written per AOR and per user.
pub struct ReadCache<S> {
    inner: S,
    bindings: Mutex<Bounded<Vec<Binding>>>,
    /// A user's credentials (None: no such user) and when they were read (unix seconds).
    users: Mutex<Bounded<(Option<Credentials>, u64)>>,
    /// The backend was unavailable: before the next operation, what it lost is written back.
    failing: AtomicBool,
    restoring: Mutex<()>,
}

impl<S: LocationStore + CredentialStore> ReadCache<S> {
    pub fn new(inner: S, capacity: usize) -> ReadCache<S> {
        ReadCache {
            inner,
            bindings: Mutex::new(Bounded::new(capacity)),
            users: Mutex::new(Bounded::new(capacity)),
            failing: AtomicBool::new(false),
            restoring: Mutex::new(()),
        }
    }

    /// Runs `op` on the backend, noting whether it was unavailable. After that, what the backend
    /// lost is restored first (by one thread; the others wait for it), so the operation sees it.
    fn via<T>(&self, now: u64, op: impl FnOnce(&S) -> Result<T>) -> Result<T> {
        if self.failing.load(Ordering::Relaxed) {
            let _one = self.restoring.lock().unwrap();
            if self.failing.load(Ordering::Relaxed) && self.restore(now).is_ok() {
                self.failing.store(false, Ordering::Relaxed);
            }
        }
        let r = op(&self.inner);
        if r.as_ref().is_err_and(Error::is_unavailable) {
            self.failing.store(true, Ordering::Relaxed);
        }
        r
    }

    /// Writes back the cached AORs with live bindings and the cached users the backend does
    /// not have; stops at the first error (the backend is still away).
    fn restore(&self, now: u64) -> Result<()> {
        let bindings = self.bindings.lock().unwrap().entries();
        for (aor, list) in bindings {
            let live: Vec<Change> = list
                .into_iter()
                .filter(|b| b.expires_at > now)
                .map(Change::Put)
                .collect();
            if !live.is_empty() && self.inner.lookup(&aor, now)?.is_empty() {
                self.inner.update(&aor, &live, now)?;
            }
        }
        let users = self.users.lock().unwrap().entries();
        for c in users.into_iter().filter_map(|(_, (c, _))| c) {
            if self.inner.user(&c.user, &c.domain)?.is_none() {
                self.inner.put_user(&c)?;
            }
        }
        Ok(())
    }
}

/// A map that forgets its oldest insertions past `capacity` entries, and the entries that
/// lapsed when told the time ([`Bounded::expire`]).
pub(crate) struct Bounded<V> {
    capacity: usize,
    /// Value, generation, and the unix time it lapses (u64::MAX: never).
    map: HashMap<String, (V, u64, u64)>,
    /// Insertion order as (key, generation): a key re-inserted later has a newer generation,
    /// so its stale queue entry does not evict it.
    order: VecDeque<(String, u64)>,
    generation: u64,
}

impl<V: Clone> Bounded<V> {
    pub(crate) fn new(capacity: usize) -> Bounded<V> {
        Bounded {
            capacity: capacity.max(1),
            map: HashMap::new(),
            order: VecDeque::new(),
            generation: 0,
        }
    }

    pub(crate) fn put(&mut self, k: &str, v: V) {
        self.put_until(k, v, u64::MAX);
    }

    /// Remembers `v` for `k` until unix time `until`.
    pub(crate) fn put_until(&mut self, k: &str, v: V, until: u64) {
        self.generation += 1;
        self.map.insert(k.to_string(), (v, self.generation, until));
        self.order.push_back((k.to_string(), self.generation));
        while self.map.len() > self.capacity || self.order.len() > 2 * self.capacity {
            let Some((old, gen)) = self.order.pop_front() else {
                break;
            };
            if self.map.get(&old).is_some_and(|(_, g, _)| *g == gen) {
                self.map.remove(&old);
            }
        }
    }

    pub(crate) fn get(&self, k: &str) -> Option<V> {
        self.map.get(k).map(|(v, _, _)| v.clone())
    }

    /// Forgets the entries lapsed at `now`, and gives back the room of a map and queue that
    /// have shrunk to under a quarter of it; how many went.
    pub(crate) fn expire(&mut self, now: u64) -> usize {
        self.retain(|_, _, until| until > now)
    }

    /// Keeps the entries `keep(key, value, lapse time)` says, and gives back the room of a map
    /// and queue that have shrunk to under a quarter of it; how many went.
    fn retain(&mut self, mut keep: impl FnMut(&str, &V, u64) -> bool) -> usize {
        let before = self.map.len();
        self.map.retain(|k, (v, _, until)| keep(k, v, *until));
        let map = &self.map;
        self.order
            .retain(|(k, gen)| map.get(k).is_some_and(|(_, g, _)| g == gen));
        if self.map.capacity() > 64 && self.map.len() < self.map.capacity() / 4 {
            self.map.shrink_to(self.map.len() * 2);
        }
        if self.order.capacity() > 64 && self.order.len() < self.order.capacity() / 4 {
            self.order.shrink_to(self.order.len() * 2);
        }
        before - self.map.len()
    }

    /// Forgets `k` (its queue entry goes when it reaches the front).
    pub(crate) fn remove(&mut self, k: &str) {
        self.map.remove(k);
    }

    fn entries(&self) -> Vec<(String, V)> {
        self.map
            .iter()
            .map(|(k, (v, _, _))| (k.clone(), v.clone()))
            .collect()
    }
}

fn user_key(user: &str, domain: &str) -> String {
    format!("{user}@{domain}")
}

/// The backend's pipe, keeping the caches as the blocking calls do; while the backend is
/// failing every operation goes the blocking way, which restores what it lost first.
impl<S: LocationStore + CredentialStore> Pipe for ReadCache<S> {
    fn addr(&self) -> &str {
        self.inner.pipe().map_or("", |p| p.addr())
    }

    fn begin(&self, ask: &Ask, out: &mut Vec<u8>) -> Option<Pending> {
        if self.failing.load(Ordering::Relaxed) {
            return None;
        }
        self.inner.pipe()?.begin(ask, out)
    }

    fn finish(&self, pending: Pending, reply: Reply) -> Option<Answer> {
        // The answer is an AOR's bindings or a user's credentials: what the cache keys them by.
        let key = match &pending {
            Pending::User { user, domain } => user_key(user, domain),
            Pending::Update { aor, .. } => aor.clone(),
        };
        let answer = self.inner.pipe()?.finish(pending, reply)?;
        match &answer {
            Answer::Bindings(list) => self.bindings.lock().unwrap().put_bindings(&key, list),
            Answer::User(c) => self
                .users
                .lock()
                .unwrap()
                .put(&key, (c.clone(), unix_now())),
        }
        Some(answer)
    }
}

impl<S: LocationStore + CredentialStore> LocationStore for ReadCache<S> {
    fn pipe(&self) -> Option<&dyn Pipe> {
        self.inner.pipe().map(|_| self as &dyn Pipe)
    }

    /// Claims are never cached: a node that cannot reach the backend holds nothing for others.
    fn claims(&self) -> Option<&dyn crate::Claims> {
        self.inner.claims()
    }

    fn commit(&self) -> Result<()> {
        self.inner.commit()
    }

    fn update(&self, aor: &str, changes: &[Change], now: u64) -> Result<Vec<Binding>> {
        let list = self.via(now, |s| s.update(aor, changes, now))?;
        self.bindings.lock().unwrap().put_bindings(aor, &list);
        Ok(list)
    }

    /// Also forgets the credentials of users read more than `USER_TTL_S` ago who have no live
    /// binding cached: without this every user who ever registered stayed cached (up to
    /// `registrar.cache_entries`) after all bindings expired. Those with one stay for an outage:
    /// their phones re-register against the cached copy, and a restarted backend gets them back.
    fn expire(&self, now: u64) -> usize {
        let mut bindings = self.bindings.lock().unwrap();
        let mut gone = bindings.expire(now);
        gone += self
            .users
            .lock()
            .unwrap()
            .retain(|k, (_, read), _| now < read + USER_TTL_S || bindings.map.contains_key(k));
        drop(bindings);
        gone + self.inner.expire(now)
    }

    fn lookup(&self, aor: &str, now: u64) -> Result<Vec<Binding>> {
        match self.via(now, |s| s.lookup(aor, now)) {
            Ok(list) => {
                self.bindings.lock().unwrap().put_bindings(aor, &list);
                Ok(list)
            }
            Err(e) if e.is_unavailable() => match self.bindings.lock().unwrap().get(aor) {
                Some(list) => Ok(list.into_iter().filter(|b| b.expires_at > now).collect()),
                None => Err(e),
            },
            Err(e) => Err(e),
        }
    }
}

impl Bounded<Vec<Binding>> {
    /// An AOR's bindings, remembered until the last of them lapses (an AOR with none until the
    /// next [`Bounded::expire`]).
    fn put_bindings(&mut self, aor: &str, list: &[Binding]) {
        let until = list.iter().map(|b| b.expires_at).max().unwrap_or(0);
        self.put_until(aor, list.to_vec(), until);
    }
}

impl<S: LocationStore + CredentialStore> CredentialStore for ReadCache<S> {
    fn user(&self, user: &str, domain: &str) -> Result<Option<Credentials>> {
        let k = user_key(user, domain);
        let now = unix_now();
        match self.via(now, |s| s.user(user, domain)) {
            Ok(c) => {
                self.users.lock().unwrap().put(&k, (c.clone(), now));
                Ok(c)
            }
            Err(e) if e.is_unavailable() => {
                self.users.lock().unwrap().get(&k).map(|(c, _)| c).ok_or(e)
            }
            Err(e) => Err(e),
        }
    }

    fn recent_user(&self, user: &str, domain: &str, now: u64) -> Option<Option<Credentials>> {
        let (c, read) = self.users.lock().unwrap().get(&user_key(user, domain))?;
        (now < read + USER_TTL_S).then_some(c)
    }

    fn put_user(&self, c: &Credentials) -> Result<()> {
        self.via(unix_now(), |s| s.put_user(c))?;
        let k = user_key(&c.user, &c.domain);
        self.users
            .lock()
            .unwrap()
            .put(&k, (Some(c.clone()), unix_now()));
        Ok(())
    }

    fn del_user(&self, user: &str, domain: &str) -> Result<bool> {
        let had = self.via(unix_now(), |s| s.del_user(user, domain))?;
        self.users
            .lock()
            .unwrap()
            .put(&user_key(user, domain), (None, unix_now()));
        Ok(had)
    }

    fn users(&self) -> Result<Vec<Credentials>> {
        self.via(unix_now(), |s| s.users())
    }
}

/// Credential calls carry no time; restoring bindings after one needs it to skip lapsed ones.
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::tests::binding;

    /// A backend that can be switched off, as a killed server is, or made to refuse.
    #[derive(Default)]
    struct Flaky {
        down: AtomicBool,
        refusing: AtomicBool,
        data: Mutex<HashMap<String, Vec<Binding>>>,
    }

    impl CredentialStore for Flaky {
        fn user(&self, _: &str, _: &str) -> Result<Option<Credentials>> {
            self.check().map(|()| None)
        }
        fn put_user(&self, _: &Credentials) -> Result<()> {
            self.check()
        }
        fn del_user(&self, _: &str, _: &str) -> Result<bool> {
            self.check().map(|()| false)
        }
        fn users(&self) -> Result<Vec<Credentials>> {
            self.check().map(|()| Vec::new())
        }
    }

    impl Flaky {
        fn check(&self) -> Result<()> {
            if self.down.load(Ordering::Relaxed) {
                return Err(Error::Unavailable {
                    backend: "flaky".into(),
                    reason: "connection refused".into(),
                });
            }
            if self.refusing.load(Ordering::Relaxed) {
                return Err(Error::Refused {
                    backend: "flaky".into(),
                    reason: "ERR unknown command".into(),
                });
            }
            Ok(())
        }
    }

    impl LocationStore for Flaky {
        fn update(&self, aor: &str, changes: &[Change], now: u64) -> Result<Vec<Binding>> {
            self.check()?;
            let mut d = self.data.lock().unwrap();
            let list = crate::apply(d.remove(aor).unwrap_or_default(), changes, now);
            d.insert(aor.into(), list.clone());
            Ok(list)
        }

        fn lookup(&self, aor: &str, _now: u64) -> Result<Vec<Binding>> {
            self.check()?;
            Ok(self
                .data
                .lock()
                .unwrap()
                .get(aor)
                .cloned()
                .unwrap_or_default())
        }
    }

    #[test]
    fn serves_reads_only_while_the_backend_fails() {
        let c = ReadCache::new(Flaky::default(), 2);
        c.update("a@x", &[Change::Put(binding("sip:a@h", 200))], 100)
            .unwrap();
        // Another writer changes the backend: a working backend is always asked.
        c.inner.data.lock().unwrap().clear();
        assert!(c.lookup("a@x", 100).unwrap().is_empty());
        c.update("a@x", &[Change::Put(binding("sip:a@h", 200))], 100)
            .unwrap();

        c.inner.down.store(true, Ordering::Relaxed);
        assert_eq!(c.lookup("a@x", 100).unwrap().len(), 1, "from the cache");
        assert!(
            c.lookup("a@x", 250).unwrap().is_empty(),
            "lapsed in the cache"
        );
        assert!(c.lookup("b@x", 100).is_err(), "never seen: the error");
        let put = c.update("a@x", &[Change::RemoveAll], 100);
        assert!(
            put.is_err(),
            "a write is never reported stored when it failed"
        );

        // The backend comes back empty (a restarted memcached): restored before the next read.
        c.inner.data.lock().unwrap().clear();
        c.inner.down.store(false, Ordering::Relaxed);
        assert_eq!(c.lookup("a@x", 100).unwrap().len(), 1, "restored");
        assert_eq!(c.inner.data.lock().unwrap()["a@x"].len(), 1);
    }

    #[test]
    fn a_backend_that_refuses_is_not_hidden_behind_the_cache() {
        let c = ReadCache::new(Flaky::default(), 2);
        c.update("a@x", &[Change::Put(binding("sip:a@h", 200))], 100)
            .unwrap();
        assert_eq!(c.user("a", "x").unwrap(), None);
        c.inner.refusing.store(true, Ordering::Relaxed);
        let e = c.lookup("a@x", 100).unwrap_err();
        assert!(matches!(e, Error::Refused { .. }), "{e}");
        assert!(!e.is_unavailable());
        assert!(c.user("a", "x").is_err());
        // Nothing was lost: nothing to restore once it answers again.
        assert!(!c.failing.load(Ordering::Relaxed));
    }

    #[test]
    fn credentials_answer_without_io_for_a_while() {
        let c = ReadCache::new(Flaky::default(), 2);
        let now = unix_now();
        assert_eq!(c.recent_user("a", "x", now), None, "never read");
        assert_eq!(c.user("a", "x").unwrap(), None);
        assert_eq!(
            c.recent_user("a", "x", now),
            Some(None),
            "read: no such user"
        );
        assert_eq!(
            c.recent_user("a", "x", now + USER_TTL_S + 1),
            None,
            "too old"
        );
        let a = Credentials {
            user: "a".into(),
            domain: "x".into(),
            ha1_md5: "m".into(),
            ha1_sha256: "s".into(),
            ..Credentials::default()
        };
        c.put_user(&a).unwrap();
        assert_eq!(
            c.recent_user("a", "x", now),
            Some(Some(a)),
            "changed here: at once"
        );
        c.del_user("a", "x").unwrap();
        assert_eq!(c.recent_user("a", "x", now), Some(None));
    }

    #[test]
    fn lapsed_entries_go_when_told_the_time() {
        let c = ReadCache::new(Flaky::default(), 1_000);
        for i in 0..500u64 {
            let b = binding("sip:a@h", if i < 5 { 900 } else { 200 });
            c.update(&format!("{i}@x"), &[Change::Put(b)], 100).unwrap();
        }
        assert_eq!(c.expire(150), 0);
        assert_eq!(
            c.expire(200),
            495,
            "the cached AORs whose bindings all lapsed"
        );
        let cache = c.bindings.lock().unwrap();
        assert_eq!((cache.map.len(), cache.order.len()), (5, 5));
        assert!(cache.map.capacity() < 64 && cache.order.capacity() < 64);
        assert!(cache.get("4@x").is_some() && cache.get("5@x").is_none());
        drop(cache);
        // Served from the cache while the backend is away: the live one only.
        c.inner.down.store(true, Ordering::Relaxed);
        assert_eq!(c.lookup("4@x", 200).unwrap().len(), 1);
        assert!(c.lookup("5@x", 200).is_err());
    }

    #[test]
    fn credentials_go_with_the_last_binding_and_give_back_their_room() {
        let c = ReadCache::new(Flaky::default(), 1_000);
        let now = unix_now();
        for i in 0..500u64 {
            assert_eq!(c.user(&i.to_string(), "x").unwrap(), None);
        }
        let b = binding("sip:a@h", now + 900);
        c.update("7@x", &[Change::Put(b)], now).unwrap();
        assert_eq!(c.expire(now), 0, "read just now: kept");
        assert_eq!(c.users.lock().unwrap().map.len(), 500);
        let later = now + USER_TTL_S;
        assert_eq!(c.expire(later), 499, "read long ago, no binding cached");
        let users = c.users.lock().unwrap();
        assert_eq!((users.map.len(), users.order.len()), (1, 1));
        assert!(users.map.capacity() < 64 && users.order.capacity() < 64);
        drop(users);
        c.inner.down.store(true, Ordering::Relaxed);
        assert_eq!(c.user("7", "x").unwrap(), None, "one with a binding stays");
        assert!(c.user("8", "x").is_err());
        assert_eq!(c.expire(now + 901), 2, "its binding lapsed, then it");
    }

    #[test]
    fn forgets_the_oldest_past_capacity() {
        let mut b = Bounded::new(2);
        b.put("a", 1);
        b.put("b", 2);
        b.put("a", 3);
        b.put("c", 4);
        assert_eq!(b.get("b"), None, "the oldest goes first");
        assert_eq!((b.get("a"), b.get("c")), (Some(3), Some(4)));
        for i in 0..100 {
            b.put("a", i);
        }
        assert!(b.order.len() <= 4, "re-inserting one key stays bounded");
    }
}
