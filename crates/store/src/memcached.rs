//! `memcached://HOST:PORT`: a small pooled client over the memcached text protocol. An AOR's
//! bindings are one JSON value expiring with the last binding, changed with gets/cas (retried
//! on a concurrent change); users are keys, listed through an index split over `USER_BUCKETS`
//! values (so adding a user rewrites a small list, not one of every user). A connection that
//! fails is dropped, so operations fail while memcached is down and recover once it is back.

use crate::{
    apply, key, Binding, Change, CredentialStore, Credentials, LocationStore, Result, StoreError,
};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Mutex;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(2);
const POOL: usize = 8;
const USER_BUCKETS: u64 = 64;
const CAS_TRIES: usize = 16;

pub struct MemcachedStore {
    addr: String,
    pool: Mutex<Vec<BufReader<TcpStream>>>,
}

/// Result of a conditional store.
#[derive(PartialEq)]
enum Stored {
    Yes,
    /// EXISTS / NOT_STORED / NOT_FOUND: someone else changed it; read again.
    Conflict,
}

impl MemcachedStore {
    pub fn new(host: &str, port: u16) -> MemcachedStore {
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_string()
        };
        MemcachedStore {
            addr: format!("{host}:{port}"),
            pool: Mutex::new(Vec::new()),
        }
    }

    fn err(&self, e: impl std::fmt::Display) -> StoreError {
        StoreError(format!("memcached {}: {e}", self.addr))
    }

    fn connect(&self) -> Result<BufReader<TcpStream>> {
        let addr = self
            .addr
            .to_socket_addrs()
            .map_err(|e| self.err(e))?
            .next()
            .ok_or_else(|| self.err("no address"))?;
        let s = TcpStream::connect_timeout(&addr, TIMEOUT)
            .map_err(|e| self.err(format!("cannot connect: {e}")))?;
        s.set_read_timeout(Some(TIMEOUT)).map_err(|e| self.err(e))?;
        s.set_write_timeout(Some(TIMEOUT))
            .map_err(|e| self.err(e))?;
        let _ = s.set_nodelay(true);
        Ok(BufReader::new(s))
    }

    /// Runs `f` on a pooled connection; a connection that saw an error is not returned. A pooled
    /// connection may have died with a restarted server: then one more try on a new one.
    fn with<T>(
        &self,
        mut f: impl FnMut(&mut BufReader<TcpStream>) -> std::io::Result<T>,
    ) -> Result<T> {
        let pooled = self.pool.lock().unwrap().pop();
        let reused = pooled.is_some();
        let mut conn = match pooled {
            Some(c) => c,
            None => self.connect()?,
        };
        let mut result = f(&mut conn);
        if result.is_err() && reused {
            // A restarted server leaves every pooled connection dead: drop them all.
            self.pool.lock().unwrap().clear();
            conn = self.connect()?;
            result = f(&mut conn);
        }
        match result {
            Ok(v) => {
                let mut pool = self.pool.lock().unwrap();
                if pool.len() < POOL {
                    pool.push(conn);
                }
                Ok(v)
            }
            Err(e) => Err(self.err(e)),
        }
    }

    /// `gets`: the value and its CAS id.
    fn gets(&self, k: &str) -> Result<Option<(Vec<u8>, u64)>> {
        self.with(|c| {
            c.get_mut().write_all(format!("gets {k}\r\n").as_bytes())?;
            let mut out = None;
            loop {
                let line = read_line(c)?;
                if line == "END" {
                    return Ok(out);
                }
                let parts: Vec<&str> = line.split(' ').collect();
                if parts.len() < 5 || parts[0] != "VALUE" {
                    return Err(proto(&line));
                }
                let n: usize = parts[3].parse().map_err(|_| proto(&line))?;
                let cas: u64 = parts[4].parse().map_err(|_| proto(&line))?;
                let mut data = vec![0; n + 2];
                c.read_exact(&mut data)?;
                data.truncate(n);
                out = Some((data, cas));
            }
        })
    }

    /// `set`, `add` or `cas` (with `cas`), expiring at unix time `exptime` (0 = never).
    fn store(
        &self,
        cmd: &str,
        k: &str,
        data: &[u8],
        exptime: u64,
        cas: Option<u64>,
    ) -> Result<Stored> {
        self.with(|c| {
            let mut req = format!("{cmd} {k} 0 {exptime} {}", data.len());
            if let Some(cas) = cas {
                req.push_str(&format!(" {cas}"));
            }
            req.push_str("\r\n");
            let mut buf = req.into_bytes();
            buf.extend_from_slice(data);
            buf.extend_from_slice(b"\r\n");
            c.get_mut().write_all(&buf)?;
            let line = read_line(c)?;
            match line.as_str() {
                "STORED" => Ok(Stored::Yes),
                "EXISTS" | "NOT_STORED" | "NOT_FOUND" => Ok(Stored::Conflict),
                _ => Err(proto(&line)),
            }
        })
    }

    fn delete(&self, k: &str) -> Result<bool> {
        self.with(|c| {
            c.get_mut()
                .write_all(format!("delete {k}\r\n").as_bytes())?;
            let line = read_line(c)?;
            match line.as_str() {
                "DELETED" => Ok(true),
                "NOT_FOUND" => Ok(false),
                _ => Err(proto(&line)),
            }
        })
    }

    /// Read-modify-write of one value with gets/cas: `f` gets the old value and returns the new
    /// one (None deletes) and its expiry.
    fn modify<T>(
        &self,
        k: &str,
        mut f: impl FnMut(Option<&[u8]>) -> (Option<(Vec<u8>, u64)>, T),
    ) -> Result<T> {
        for _ in 0..CAS_TRIES {
            let old = self.gets(k)?;
            let (new, out) = f(old.as_ref().map(|(d, _)| d.as_slice()));
            let stored = match (new, &old) {
                (Some((data, exp)), Some((_, cas))) => {
                    self.store("cas", k, &data, exp, Some(*cas))?
                }
                (Some((data, exp)), None) => self.store("add", k, &data, exp, None)?,
                (None, Some(_)) => {
                    self.delete(k)?;
                    Stored::Yes
                }
                (None, None) => Stored::Yes,
            };
            if stored == Stored::Yes {
                return Ok(out);
            }
        }
        Err(self.err(format!(
            "{k} kept changing under concurrent updates; try again"
        )))
    }
}

/// The index value listing `name` (FNV-1a of the name picks one of `USER_BUCKETS`).
fn user_bucket(name: &str) -> String {
    format!("strowger:users:{}", crate::fnv1a(name) % USER_BUCKETS)
}

fn proto(line: &str) -> std::io::Error {
    std::io::Error::other(format!("unexpected reply {line:?}"))
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
        return Err(std::io::Error::other(line));
    }
    Ok(line)
}

impl LocationStore for MemcachedStore {
    fn update(&self, aor: &str, changes: &[Change], now: u64) -> Result<Vec<Binding>> {
        self.modify(&key("loc", aor), |old| {
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
        })
    }

    fn lookup(&self, aor: &str, now: u64) -> Result<Vec<Binding>> {
        let v = self.gets(&key("loc", aor))?;
        let list: Vec<Binding> = v
            .and_then(|(d, _)| serde_json::from_slice(&d).ok())
            .unwrap_or_default();
        Ok(list.into_iter().filter(|b| b.expires_at > now).collect())
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
        let v = self.gets(&key("user", &format!("{user}@{domain}")))?;
        Ok(v.and_then(|(d, _)| serde_json::from_slice(&d).ok()))
    }

    fn put_user(&self, c: &Credentials) -> Result<()> {
        let name = format!("{}@{}", c.user, c.domain);
        let json = serde_json::to_vec(c).map_err(|e| self.err(e))?;
        if self.store("set", &key("user", &name), &json, 0, None)? != Stored::Yes {
            return Err(self.err("set refused"));
        }
        self.index(&name, true)
    }

    fn del_user(&self, user: &str, domain: &str) -> Result<bool> {
        let name = format!("{user}@{domain}");
        let had = self.delete(&key("user", &name))?;
        self.index(&name, false)?;
        Ok(had)
    }

    fn users(&self) -> Result<Vec<Credentials>> {
        let mut names: Vec<String> = Vec::new();
        for b in 0..USER_BUCKETS {
            let bucket: Vec<String> = self
                .gets(&format!("strowger:users:{b}"))?
                .and_then(|(d, _)| serde_json::from_slice(&d).ok())
                .unwrap_or_default();
            names.extend(bucket);
        }
        let mut out = Vec::new();
        for n in names {
            let v = self.gets(&key("user", &n))?;
            if let Some(c) = v.and_then(|(d, _)| serde_json::from_slice(&d).ok()) {
                out.push(c);
            }
        }
        out.sort_by(|a: &Credentials, b| (&a.domain, &a.user).cmp(&(&b.domain, &b.user)));
        Ok(out)
    }
}
