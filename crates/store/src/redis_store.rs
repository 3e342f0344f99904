//! `redis://HOST:PORT` and `redis+cluster://HOST:PORT,HOST:PORT,…`: an AOR's bindings are one
//! JSON value whose key expires with the last binding (SET … EXAT). A change reads the value,
//! applies itself and writes it back with a compare-and-set script, retried when another
//! writer got there first; reads and the write touch one key, so the same two round trips work
//! on a single server and on a Redis Cluster (where MULTI cannot span nodes). Users are keys
//! too, listed through a set. Connections are pooled and dropped after any error, so
//! operations fail while Redis is down and work again once it is back.

use crate::{
    apply, key, Binding, Change, CredentialStore, Credentials, LocationStore, Result, StoreError,
};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::{ConnectionLike, Script};
use std::sync::Mutex;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(2);
const USERS: &str = "strowger:users";
/// Connections kept open: one per store thread (strowger runs 8).
const POOL: usize = 8;
const CAS_TRIES: usize = 16;

/// SET KEYS[1] to ARGV[2] expiring at unix time ARGV[3] (DEL when ARGV[2] is empty), only if it
/// still holds ARGV[1] ("" = absent). 1 when written, 0 when someone else changed it.
const CAS: &str = r"
local cur = redis.call('GET', KEYS[1])
if (cur or '') ~= ARGV[1] then return 0 end
if ARGV[2] == '' then redis.call('DEL', KEYS[1])
else redis.call('SET', KEYS[1], ARGV[2], 'EXAT', ARGV[3]) end
return 1";

enum Client {
    Single(redis::Client),
    Cluster(ClusterClient),
}

type Conn = Box<dyn ConnectionLike + Send>;

pub struct RedisStore {
    /// The URL as given, for errors.
    addr: String,
    client: std::result::Result<Client, String>,
    pool: Mutex<Vec<Conn>>,
    cas: Script,
}

fn node_url(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("redis://[{host}]:{port}/")
    } else {
        format!("redis://{host}:{port}/")
    }
}

impl RedisStore {
    pub fn new(host: &str, port: u16) -> RedisStore {
        let url = node_url(host, port);
        let client = redis::Client::open(url.as_str())
            .map(Client::Single)
            .map_err(|e| e.to_string());
        RedisStore::with_client(url, client)
    }

    /// A Redis Cluster reached through any of `nodes` (it learns the others from them).
    pub fn cluster(nodes: &[(String, u16)]) -> RedisStore {
        let urls: Vec<String> = nodes.iter().map(|(h, p)| node_url(h, *p)).collect();
        let client = ClusterClientBuilder::new(urls.clone())
            .connection_timeout(TIMEOUT)
            .response_timeout(TIMEOUT)
            .retries(2)
            .build()
            .map(Client::Cluster)
            .map_err(|e| e.to_string());
        RedisStore::with_client(format!("redis+cluster {}", urls.join(",")), client)
    }

    fn with_client(addr: String, client: std::result::Result<Client, String>) -> RedisStore {
        RedisStore {
            addr,
            client,
            pool: Mutex::new(Vec::new()),
            cas: Script::new(CAS),
        }
    }

    fn connect(&self) -> Result<Conn> {
        let client = self
            .client
            .as_ref()
            .map_err(|e| StoreError(format!("{}: not a valid Redis address: {e}", self.addr)))?;
        let err = |e: redis::RedisError| StoreError(format!("{}: cannot connect: {e}", self.addr));
        Ok(match client {
            Client::Single(c) => {
                let c = c.get_connection_with_timeout(TIMEOUT).map_err(err)?;
                let _ = c.set_read_timeout(Some(TIMEOUT));
                let _ = c.set_write_timeout(Some(TIMEOUT));
                Box::new(c)
            }
            Client::Cluster(c) => Box::new(c.get_connection().map_err(err)?),
        })
    }

    /// Runs `f` on a pooled connection; a connection that saw an error is dropped. A pooled
    /// connection may have died with a restarted server: then one more try on a new one.
    fn with<T>(
        &self,
        mut f: impl FnMut(&mut dyn ConnectionLike) -> redis::RedisResult<T>,
    ) -> Result<T> {
        let pooled = self.pool.lock().unwrap().pop();
        let reused = pooled.is_some();
        let mut conn = match pooled {
            Some(c) => c,
            None => self.connect()?,
        };
        let mut result = f(&mut *conn);
        if let Err(e) = &result {
            if reused && (e.is_io_error() || e.is_connection_dropped()) {
                // A restarted server leaves every pooled connection dead: drop them all.
                self.pool.lock().unwrap().clear();
                conn = self.connect()?;
                result = f(&mut *conn);
            }
        }
        match result {
            Ok(v) => {
                let mut pool = self.pool.lock().unwrap();
                if pool.len() < POOL {
                    pool.push(conn);
                }
                Ok(v)
            }
            Err(e) => Err(StoreError(format!("{}: {e}", self.addr))),
        }
    }

    fn get(&self, k: &str) -> Result<Option<String>> {
        self.with(|con| redis::cmd("GET").arg(k).query(con))
    }
}

fn decode(v: Option<&str>) -> Vec<Binding> {
    v.and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default()
}

impl LocationStore for RedisStore {
    fn update(&self, aor: &str, changes: &[Change], now: u64) -> Result<Vec<Binding>> {
        let k = key("loc", aor);
        for _ in 0..CAS_TRIES {
            let old = self.get(&k)?;
            let list = apply(decode(old.as_deref()), changes, now);
            let (json, until) = match list.iter().map(|b| b.expires_at).max() {
                Some(until) => (serde_json::to_string(&list).unwrap_or_default(), until),
                None => (String::new(), 0),
            };
            let old = old.unwrap_or_default();
            let written: i32 =
                self.with(|con| self.cas.key(&k).arg(&old).arg(&json).arg(until).invoke(con))?;
            if written == 1 {
                return Ok(list);
            }
        }
        Err(StoreError(format!(
            "{}: {k} kept changing under concurrent updates; try again",
            self.addr
        )))
    }

    fn lookup(&self, aor: &str, now: u64) -> Result<Vec<Binding>> {
        let v = self.get(&key("loc", aor))?;
        Ok(decode(v.as_deref())
            .into_iter()
            .filter(|b| b.expires_at > now)
            .collect())
    }
}

impl CredentialStore for RedisStore {
    fn user(&self, user: &str, domain: &str) -> Result<Option<Credentials>> {
        let v = self.get(&key("user", &format!("{user}@{domain}")))?;
        Ok(v.and_then(|s| serde_json::from_str(&s).ok()))
    }

    /// The user's key, then the index (separate commands: in a cluster they live on different
    /// nodes). An index entry without its key is skipped by `users`.
    fn put_user(&self, c: &Credentials) -> Result<()> {
        let name = format!("{}@{}", c.user, c.domain);
        let json = serde_json::to_string(c).map_err(|e| StoreError(e.to_string()))?;
        let k = key("user", &name);
        self.with(|con| redis::cmd("SET").arg(&k).arg(&json).query::<()>(con))?;
        self.with(|con| redis::cmd("SADD").arg(USERS).arg(&name).query::<()>(con))
    }

    fn del_user(&self, user: &str, domain: &str) -> Result<bool> {
        let name = format!("{user}@{domain}");
        let k = key("user", &name);
        let n: u32 = self.with(|con| redis::cmd("DEL").arg(&k).query(con))?;
        let _: u32 = self.with(|con| redis::cmd("SREM").arg(USERS).arg(&name).query(con))?;
        Ok(n > 0)
    }

    fn users(&self) -> Result<Vec<Credentials>> {
        let names: Vec<String> = self.with(|con| redis::cmd("SMEMBERS").arg(USERS).query(con))?;
        let mut out = Vec::new();
        for n in names {
            if let Some(c) = self
                .get(&key("user", &n))?
                .and_then(|s| serde_json::from_str(&s).ok())
            {
                out.push(c);
            }
        }
        out.sort_by(|a: &Credentials, b| (&a.domain, &a.user).cmp(&(&b.domain, &b.user)));
        Ok(out)
    }
}
