//! `memcached://HOST:PORT`: a small pooled client over memcached's meta protocol (memcached
//! 1.6 or later: `mg`, `ms`, `md` with CAS ids returned). An AOR's bindings are one JSON value
//! expiring with the last binding, changed with compare-and-set (retried on a concurrent
//! change). The client remembers the value and CAS id it last saw of
//! each key (`seen`), so a change to a value no one else changed since — a phone refreshing its
//! registration through the same instance — is one round trip, and so is the first binding of
//! an AOR (an add); only a wrong guess costs a read. Users are keys, listed through an index
//! split over `USER_BUCKETS` values (so adding a user rewrites a small list, not one of every
//! user). A connection that fails is dropped, so operations fail while memcached is down and
//! recover once it is back.

use crate::cache::Bounded;
use crate::conn_pool::ConnPool;
use crate::pipe::{Answer, Ask, Pending, Pipe, Reply};
use crate::{
    apply, key, Binding, Change, CredentialStore, Credentials, Error, LocationStore, Result,
};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(2);
const POOL: usize = 8;
const USER_BUCKETS: u64 = 64;
const CAS_TRIES: usize = 16;

/// A value and its CAS id.
type Versioned = (Vec<u8>, u64);

/// The `mg` request for a value and its CAS id.
fn mg(k: &str) -> String {
    format!("mg {k} v c\r\n")
}

/// Appends the `ms` request storing `data` under `k` as `mode` says, expiring at unix time
/// `exptime` (0 = never), asking for the new CAS id.
fn ms(out: &mut Vec<u8>, k: &str, data: &[u8], exptime: u64, mode: Mode) {
    let cond = match mode {
        Mode::Set => String::new(),
        Mode::Add => " ME".to_string(),
        Mode::Cas(cas) => format!(" C{cas}"),
    };
    out.extend_from_slice(format!("ms {k} {} c T{exptime}{cond}\r\n", data.len()).as_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// An AOR's bindings after `changes`, from its stored JSON value (None: absent): the new value
/// and its expiry (None: no binding left, delete it), and the bindings.
fn rebind(
    old: Option<&[u8]>,
    changes: &[Change],
    now: u64,
) -> (Option<(Vec<u8>, u64)>, Vec<Binding>) {
    let old: Vec<Binding> = old
        .and_then(|d| serde_json::from_slice(d).ok())
        .unwrap_or_default();
    let list = apply(old, changes, now);
    let new = list
        .iter()
        .map(|b| b.expires_at)
        .max()
        .map(|until| (serde_json::to_vec(&list).unwrap_or_default(), until));
    (new, list)
}

/// The key of a user's credentials.
fn user_key(user: &str, domain: &str) -> String {
    key("user", &format!("{user}@{domain}"))
}

pub struct MemcachedStore {
    addr: String,
    pool: Mutex<ConnPool<BufReader<TcpStream>>>,
    /// The value and CAS id of a key as this process last read or wrote it.
    seen: Mutex<Bounded<Versioned>>,
    /// How many keys `seen` holds at most.
    capacity: usize,
}

/// How `meta_set` stores.
enum Mode {
    /// Unconditionally.
    Set,
    /// Only if absent.
    Add,
    /// Only if the CAS id is still this one.
    Cas(u64),
}

impl MemcachedStore {
    /// `capacity`: the keys whose last value and CAS id are remembered.
    pub fn new(host: &str, port: u16, capacity: usize) -> MemcachedStore {
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_string()
        };
        MemcachedStore {
            addr: format!("{host}:{port}"),
            pool: Mutex::new(ConnPool::new(POOL)),
            seen: Mutex::new(Bounded::new(capacity)),
            capacity,
        }
    }

    fn backend(&self) -> String {
        format!("memcached {}", self.addr)
    }

    /// memcached cannot be reached, or the connection failed.
    fn away(&self, reason: impl std::fmt::Display) -> Error {
        Error::Unavailable {
            backend: self.backend(),
            reason: reason.to_string(),
        }
    }

    /// memcached answered, but not as asked.
    fn refused(&self, reason: impl std::fmt::Display) -> Error {
        Error::Refused {
            backend: self.backend(),
            reason: reason.to_string(),
        }
    }

    fn connect(&self) -> Result<BufReader<TcpStream>> {
        let addr = self
            .addr
            .to_socket_addrs()
            .map_err(|e| self.away(e))?
            .next()
            .ok_or_else(|| self.away("no address"))?;
        let s = TcpStream::connect_timeout(&addr, TIMEOUT)
            .map_err(|e| self.away(format!("cannot connect: {e}")))?;
        s.set_read_timeout(Some(TIMEOUT))
            .map_err(|e| self.away(e))?;
        s.set_write_timeout(Some(TIMEOUT))
            .map_err(|e| self.away(e))?;
        let _ = s.set_nodelay(true);
        Ok(BufReader::new(s))
    }

    /// Runs `f` on a pooled connection; a connection that saw an error is not returned. A pooled
    /// connection may have died with a restarted server: then one more try on a new one.
    fn with<T>(
        &self,
        mut f: impl FnMut(&mut BufReader<TcpStream>) -> std::io::Result<T>,
    ) -> Result<T> {
        let pooled = self.pool.lock().unwrap().take();
        let reused = pooled.is_some();
        let mut conn = match pooled {
            Some(c) => c,
            None => self.connect()?,
        };
        let mut result = f(&mut conn);
        if result.is_err() && reused {
            // A restarted server leaves every pooled connection dead: drop them all. It counts
            // CAS ids from 1 again, so what we saw before may carry an id it now gives to
            // another value: forget it.
            self.pool.lock().unwrap().clear();
            *self.seen.lock().unwrap() = Bounded::new(self.capacity);
            conn = self.connect()?;
            result = f(&mut conn);
        }
        match result {
            Ok(v) => {
                self.pool.lock().unwrap().give(conn, Instant::now());
                Ok(v)
            }
            // An error reply or one this client did not expect (`proto`); any other error is the
            // connection's.
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => Err(self.refused(e)),
            Err(e) => Err(self.away(e)),
        }
    }

    /// `mg`: the value and its CAS id.
    fn get(&self, k: &str) -> Result<Option<Versioned>> {
        self.with(|c| {
            c.get_mut().write_all(mg(k).as_bytes())?;
            let line = read_line(c)?;
            if line == "EN" {
                return Ok(None);
            }
            let mut parts = line.split(' ');
            let (Some("VA"), Some(n)) = (parts.next(), parts.next()) else {
                return Err(proto(&line));
            };
            let n: usize = n.parse().map_err(|_| proto(&line))?;
            let cas = flag(&line, 'c')?;
            let mut data = vec![0; n + 2];
            c.read_exact(&mut data)?;
            data.truncate(n);
            Ok(Some((data, cas)))
        })
    }

    /// Notes what `k` holds now (None: absent) until unix time `until`, when memcached
    /// forgets it and so may `seen`.
    fn saw(&self, k: &str, v: Option<Versioned>, until: u64) {
        let mut seen = self.seen.lock().unwrap();
        match v {
            Some(v) => seen.put_until(k, v, until),
            None => seen.remove(k),
        }
    }

    /// `ms`, expiring at unix time `exptime` (0 = never): the new CAS id when stored, None when
    /// the mode's condition failed (someone else changed the key).
    fn meta_set(&self, k: &str, data: &[u8], exptime: u64, mode: Mode) -> Result<Option<u64>> {
        let mut buf = Vec::new();
        ms(&mut buf, k, data, exptime, mode);
        self.with(|c| {
            c.get_mut().write_all(&buf)?;
            let line = read_line(c)?;
            match line.split(' ').next() {
                Some("HD") => flag(&line, 'c').map(Some),
                Some("NS" | "EX" | "NF") => Ok(None),
                _ => Err(proto(&line)),
            }
        })
    }

    /// `md`, only if the CAS id is still `cas` when given: whether it deleted.
    fn delete(&self, k: &str, cas: Option<u64>) -> Result<bool> {
        let cond = cas.map(|c| format!(" C{c}")).unwrap_or_default();
        self.with(|c| {
            c.get_mut()
                .write_all(format!("md {k}{cond}\r\n").as_bytes())?;
            let line = read_line(c)?;
            match line.as_str() {
                "HD" => Ok(true),
                "NF" | "EX" => Ok(false),
                _ => Err(proto(&line)),
            }
        })
    }

    /// Read-modify-write of one value with CAS: `f` gets the old value and returns the new one
    /// (None deletes) and its expiry. It first works on what `seen` holds — or on an absent
    /// value when nothing is known — and reads the value only when that guess proves wrong.
    fn modify<T>(
        &self,
        k: &str,
        mut f: impl FnMut(Option<&[u8]>) -> (Option<(Vec<u8>, u64)>, T),
    ) -> Result<T> {
        let mut old = self.seen.lock().unwrap().get(k);
        let mut read = false;
        for _ in 0..CAS_TRIES {
            let (new, out) = f(old.as_ref().map(|(d, _)| d.as_slice()));
            let cas = old.as_ref().map(|(_, cas)| *cas);
            // An exptime of 0 is memcached's "never".
            let until = new
                .as_ref()
                .map_or(0, |(_, exp)| if *exp == 0 { u64::MAX } else { *exp });
            let done = match new {
                Some((data, exp)) => {
                    let mode = cas.map_or(Mode::Add, Mode::Cas);
                    let stored = self.meta_set(k, &data, exp, mode)?;
                    stored.map(|cas| Some((data, cas)))
                }
                None if cas.is_some() => self.delete(k, cas)?.then_some(None),
                // Nothing to write to an absent value: done once it was read absent.
                None => read.then_some(None),
            };
            if let Some(now) = done {
                self.saw(k, now, until);
                return Ok(out);
            }
            old = self.get(k)?;
            read = true;
        }
        Err(Error::Contended {
            backend: self.backend(),
            key: k.to_string(),
        })
    }
}

/// The index value listing `name` (FNV-1a of the name picks one of `USER_BUCKETS`).
fn user_bucket(name: &str) -> String {
    format!("strowger:users:{}", crate::fnv1a(name) % USER_BUCKETS)
}

/// The number after return flag `f` in a meta reply line (`c` for the CAS id).
fn flag(line: &str, f: char) -> std::io::Result<u64> {
    line.split(' ')
        .skip(1)
        .find_map(|t| t.strip_prefix(f))
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| proto(line))
}

fn proto(line: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("unexpected reply {line:?}"),
    )
}

fn read_line(c: &mut BufReader<TcpStream>) -> std::io::Result<String> {
    let mut line = String::new();
    if c.read_line(&mut line)? == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "connection closed",
        ));
    }
    let line = line.trim_end().to_string();
    if line.starts_with("SERVER_ERROR") || line.starts_with("CLIENT_ERROR") || line == "ERROR" {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, line));
    }
    Ok(line)
}

impl LocationStore for MemcachedStore {
    fn pipe(&self) -> Option<&dyn Pipe> {
        Some(self)
    }

    fn expire(&self, now: u64) -> usize {
        let closed = self.pool.lock().unwrap().close_idle(Instant::now());
        closed + self.seen.lock().unwrap().expire(now)
    }

    fn update(&self, aor: &str, changes: &[Change], now: u64) -> Result<Vec<Binding>> {
        self.modify(&key("loc", aor), |old| rebind(old, changes, now))
    }

    fn lookup(&self, aor: &str, now: u64) -> Result<Vec<Binding>> {
        let k = key("loc", aor);
        let v = self.get(&k)?;
        let list: Vec<Binding> = v
            .as_ref()
            .and_then(|(d, _)| serde_json::from_slice(d).ok())
            .unwrap_or_default();
        // The next REGISTER of a user just called is then one round trip.
        let until = list.iter().map(|b| b.expires_at).max().unwrap_or(now);
        self.saw(&k, v, until);
        Ok(list.into_iter().filter(|b| b.expires_at > now).collect())
    }
}

/// The credentials read and the binding written over the last value seen, as in `user` and
/// `modify`, one request each.
impl Pipe for MemcachedStore {
    fn addr(&self) -> &str {
        &self.addr
    }

    fn begin(&self, ask: &Ask, out: &mut Vec<u8>) -> Option<Pending> {
        match ask {
            Ask::User { user, domain } => {
                out.extend_from_slice(mg(&user_key(user, domain)).as_bytes());
                Some(Pending::User {
                    user: user.clone(),
                    domain: domain.clone(),
                })
            }
            Ask::Update { aor, changes, now } => {
                let k = key("loc", aor);
                let old = self.seen.lock().unwrap().get(&k);
                // Removing the last binding is a delete: the store thread's business.
                let (Some((data, until)), list) =
                    rebind(old.as_ref().map(|(d, _)| d.as_slice()), changes, *now)
                else {
                    return None;
                };
                let mode = old.map_or(Mode::Add, |(_, cas)| Mode::Cas(cas));
                ms(out, &k, &data, until, mode);
                Some(Pending::Update {
                    aor: aor.clone(),
                    key: k,
                    data,
                    list,
                })
            }
        }
    }

    fn finish(&self, pending: Pending, reply: Reply) -> Option<Answer> {
        match (pending, reply) {
            (Pending::User { .. }, Reply::Value(d, _)) => {
                Some(Answer::User(serde_json::from_slice(&d).ok()))
            }
            (Pending::User { .. }, Reply::Miss) => Some(Answer::User(None)),
            (
                Pending::Update {
                    key, data, list, ..
                },
                Reply::Stored(cas),
            ) => {
                let until = list.iter().map(|b| b.expires_at).max().unwrap_or(0);
                self.saw(&key, Some((data, cas)), until);
                Some(Answer::Bindings(list))
            }
            _ => None,
        }
    }
}

impl MemcachedStore {
    fn index(&self, name: &str, add: bool) -> Result<()> {
        self.modify(&user_bucket(name), |old| {
            let mut names: Vec<String> = old
                .and_then(|d| serde_json::from_slice(d).ok())
                .unwrap_or_default();
            names.retain(|n| n != name);
            if add {
                names.push(name.to_string());
            }
            (
                Some((serde_json::to_vec(&names).unwrap_or_default(), 0)),
                (),
            )
        })
    }
}

impl CredentialStore for MemcachedStore {
    fn user(&self, user: &str, domain: &str) -> Result<Option<Credentials>> {
        let v = self.get(&user_key(user, domain))?;
        Ok(v.and_then(|(d, _)| serde_json::from_slice(&d).ok()))
    }

    fn put_user(&self, c: &Credentials) -> Result<()> {
        let name = format!("{}@{}", c.user, c.domain);
        let json = serde_json::to_vec(c).map_err(|e| Error::encode("credentials", e))?;
        if self
            .meta_set(&key("user", &name), &json, 0, Mode::Set)?
            .is_none()
        {
            return Err(self.refused("set refused"));
        }
        self.index(&name, true)
    }

    fn del_user(&self, user: &str, domain: &str) -> Result<bool> {
        let name = format!("{user}@{domain}");
        let had = self.delete(&key("user", &name), None)?;
        self.index(&name, false)?;
        Ok(had)
    }

    fn users(&self) -> Result<Vec<Credentials>> {
        let mut names: Vec<String> = Vec::new();
        for b in 0..USER_BUCKETS {
            let bucket: Vec<String> = self
                .get(&format!("strowger:users:{b}"))?
                .and_then(|(d, _)| serde_json::from_slice(&d).ok())
                .unwrap_or_default();
            names.extend(bucket);
        }
        let mut out = Vec::new();
        for n in names {
            let v = self.get(&key("user", &n))?;
            if let Some(c) = v.and_then(|(d, _)| serde_json::from_slice(&d).ok()) {
                out.push(c);
            }
        }
        out.sort_by(|a: &Credentials, b| (&a.domain, &a.user).cmp(&(&b.domain, &b.user)));
        Ok(out)
    }
}
