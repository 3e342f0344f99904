//! `redis://HOST:PORT`: an AOR's bindings are one JSON value whose key expires with the last
//! binding (SET … EXAT), changed in a WATCH/MULTI transaction sent as one pipeline; users are
//! keys too, listed through a set. One connection, re-opened after any error, so operations
//! fail while Redis is down and work again once it is back.

use crate::{
    apply, key, Binding, Change, CredentialStore, Credentials, LocationStore, Result, StoreError,
};
use redis::{Commands, Connection};
use std::sync::Mutex;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(2);
const USERS: &str = "strowger:users";

pub struct RedisStore {
    addr: String,
    client: Option<redis::Client>,
    conn: Mutex<Option<Connection>>,
}

impl RedisStore {
    pub fn new(host: &str, port: u16) -> RedisStore {
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_string()
        };
        let addr = format!("redis://{host}:{port}/");
        RedisStore {
            client: redis::Client::open(addr.as_str()).ok(),
            addr,
            conn: Mutex::new(None),
        }
    }

    fn with<T>(&self, mut f: impl FnMut(&mut Connection) -> redis::RedisResult<T>) -> Result<T> {
        let mut slot = self.conn.lock().unwrap();
        // A kept connection may have died with a restarted server: one more try on a new one.
        let reused = slot.is_some();
        for attempt in 0..2 {
            if slot.is_none() {
                let client = self.client.as_ref().ok_or_else(|| {
                    StoreError(format!("{}: not a valid Redis address", self.addr))
                })?;
                let c = client
                    .get_connection_with_timeout(TIMEOUT)
                    .map_err(|e| StoreError(format!("redis {}: cannot connect: {e}", self.addr)))?;
                let _ = c.set_read_timeout(Some(TIMEOUT));
                let _ = c.set_write_timeout(Some(TIMEOUT));
                *slot = Some(c);
            }
            let conn = slot.as_mut().expect("connected above");
            match f(conn) {
                Ok(v) => return Ok(v),
                Err(e) => {
                    *slot = None;
                    let dropped = e.is_io_error() || e.is_connection_dropped();
                    if !(reused && attempt == 0 && dropped) {
                        return Err(StoreError(format!("redis {}: {e}", self.addr)));
                    }
                }
            }
        }
        Err(StoreError(format!("redis {}: connection lost", self.addr)))
    }
}

fn decode(v: Option<String>) -> Vec<Binding> {
    v.and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_default()
}

impl LocationStore for RedisStore {
    fn update(&self, aor: &str, changes: &[Change], now: u64) -> Result<Vec<Binding>> {
        let k = key("loc", aor);
        self.with(|con| {
            redis::transaction(con, &[&k], |con, pipe| {
                let old: Option<String> = con.get(&k)?;
                let list = apply(decode(old), changes, now);
                match list.iter().map(|b| b.expires_at).max() {
                    Some(until) => {
                        let json = serde_json::to_string(&list).unwrap_or_default();
                        pipe.cmd("SET")
                            .arg(&k)
                            .arg(json)
                            .arg("EXAT")
                            .arg(until)
                            .ignore();
                    }
                    None => {
                        pipe.del(&k).ignore();
                    }
                }
                let done: Option<()> = pipe.query(con)?;
                Ok(done.map(|()| list))
            })
        })
    }

    fn lookup(&self, aor: &str, now: u64) -> Result<Vec<Binding>> {
        let k = key("loc", aor);
        let v: Option<String> = self.with(|con| con.get(&k))?;
        Ok(decode(v)
            .into_iter()
            .filter(|b| b.expires_at > now)
            .collect())
    }
}

impl CredentialStore for RedisStore {
    fn user(&self, user: &str, domain: &str) -> Result<Option<Credentials>> {
        let k = key("user", &format!("{user}@{domain}"));
        let v: Option<String> = self.with(|con| con.get(&k))?;
        Ok(v.and_then(|s| serde_json::from_str(&s).ok()))
    }

    fn put_user(&self, c: &Credentials) -> Result<()> {
        let name = format!("{}@{}", c.user, c.domain);
        let json = serde_json::to_string(c).map_err(|e| StoreError(e.to_string()))?;
        self.with(|con| {
            redis::pipe()
                .atomic()
                .set(key("user", &name), &json)
                .ignore()
                .sadd(USERS, &name)
                .ignore()
                .query(con)
        })
    }

    fn del_user(&self, user: &str, domain: &str) -> Result<bool> {
        let name = format!("{user}@{domain}");
        let (n, _): (u32, u32) = self.with(|con| {
            redis::pipe()
                .atomic()
                .del(key("user", &name))
                .srem(USERS, &name)
                .query(con)
        })?;
        Ok(n > 0)
    }

    fn users(&self) -> Result<Vec<Credentials>> {
        let names: Vec<String> = self.with(|con| con.smembers(USERS))?;
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<String> = names.iter().map(|n| key("user", n)).collect();
        let vals: Vec<Option<String>> =
            self.with(|con| redis::cmd("MGET").arg(&keys).query(con))?;
        let mut out: Vec<Credentials> = vals
            .into_iter()
            .flatten()
            .filter_map(|s| serde_json::from_str(&s).ok())
            .collect();
        out.sort_by(|a, b| (&a.domain, &a.user).cmp(&(&b.domain, &b.user)));
        Ok(out)
    }
}
