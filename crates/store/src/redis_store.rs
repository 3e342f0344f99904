//! `redis://HOST:PORT` and `redis+cluster://HOST:PORT,HOST:PORT,…`: an AOR's bindings are one
//! hash (contact URI → the binding as JSON) whose key expires with the last binding. A change
//! is one round trip: a server-side script reads the hash, applies the changes, writes it back
//! and returns what remains, atomically, so instances sharing a Redis never lose each other's
//! changes and nothing is retried. The script touches one key, so it runs unchanged on a Redis
//! Cluster, where a change is acknowledged only once a replica has it too (`WAIT 1`, see
//! [`RedisStore::replicated`]), so a master's crash loses no acknowledged binding. (Bindings written by versions that kept them as one string under `strowger:loc:`
//! are not read: phones register again within their expiry.) Users are keys too, listed
//! through a set. Connections are pooled (`ConnPool`: closed once unused for a while) and dropped
//! after any error, so operations fail while Redis is down and work again once it is back.

use crate::claims::{Claim, Claims};
use crate::conn_pool::ConnPool;
use crate::{key, Binding, Change, CredentialStore, Credentials, Error, LocationStore, Result};
use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConnection};
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{ConnectionLike, ErrorKind, RedisError, Script, ServerErrorKind, Value};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(2);
const USERS: &str = "strowger:users";
/// Connections kept open at most: one per store thread (strowger runs up to 8).
const POOL: usize = 8;
/// How long a cluster change waits for a replica to acknowledge it (`WAIT 1 REPLICA_WAIT_MS`).
const REPLICA_WAIT_MS: u64 = 200;
/// After a `WAIT` no replica answered (a shard without one: a cluster with no replicas, or a
/// replica promoted and not yet given one of its own), changes are acknowledged without
/// waiting for this long, so such a shard costs one `REPLICA_WAIT_MS` per interval, not per
/// REGISTER.
const UNREPLICATED_FOR: Duration = Duration::from_secs(10);

/// Applies changes to the bindings hash KEYS[1] and returns the bindings left (JSON each), the
/// way `crate::apply` does: ARGV[1] is now (unix seconds), then per change `A` (remove all),
/// `R contact`, or `P contact instance expires_at json` where `instance` is
/// `Binding::instance_key` ("" without +sip.instance), or `L max overflow` (`Change::Limit`,
/// `Overflow::name`). Lapsed bindings are dropped; the key expires with the last binding left.
const UPDATE: &str = r"
local k, now = KEYS[1], tonumber(ARGV[1])
local function instance(b)
  if b.instance == cjson.null then return '' end
  local reg = b.reg_id == cjson.null and '' or tostring(b.reg_id)
  return b.instance .. '\n' .. reg
end
local function live(t)
  local l = {}
  for c, v in pairs(t) do if v[2] > now then l[#l + 1] = c end end
  return l
end
local cur, all = {}, redis.call('HGETALL', k)
for i = 1, #all, 2 do
  local b = cjson.decode(all[i + 1])
  cur[all[i]] = {all[i + 1], b.expires_at, instance(b)}
end
local before, put = {}, {}
for c, v in pairs(cur) do before[c] = v end
local i = 2
while i <= #ARGV do
  local op = ARGV[i]
  if op == 'A' then cur = {}; i = i + 1
  elseif op == 'R' then cur[ARGV[i + 1]] = nil; i = i + 2
  elseif op == 'L' then
    local max, l = tonumber(ARGV[i + 1]), live(cur)
    if #l > max then
      if ARGV[i + 2] == 'replace_oldest' then
        table.sort(l, function(a, b)
          if (put[a] or false) ~= (put[b] or false) then return put[a] or false end
          return cur[a][2] > cur[b][2]
        end)
        for j = max + 1, #l do cur[l[j]] = nil end
      elseif #l > #live(before) then
        cur = {}
        for c, v in pairs(before) do cur[c] = v end
      end
    end
    i = i + 3
  else
    put[ARGV[i + 1]] = true
    local inst = ARGV[i + 2]
    if inst ~= '' then
      for c, v in pairs(cur) do if v[3] == inst then cur[c] = nil end end
    end
    cur[ARGV[i + 1]] = {ARGV[i + 4], tonumber(ARGV[i + 3]), inst}
    i = i + 5
  end
end
redis.call('DEL', k)
local out, fields, last = {}, {}, 0
for c, v in pairs(cur) do
  if v[2] > now then
    fields[#fields + 1] = c
    fields[#fields + 1] = v[1]
    out[#out + 1] = v[1]
    if v[2] > last then last = v[2] end
  end
end
if #fields > 0 then
  redis.call('HSET', k, unpack(fields))
  redis.call('EXPIREAT', k, last)
end
return out";

/// Claims the first free name of the claim set KEYS[1] (`crate::Claims::claim`): ARGV[1] is
/// now, ARGV[2] when the claim lapses (unix seconds), ARGV[3] the holder, then the names. A
/// field is `LAPSES HOLDER`; the key lives as long as its longest claim. Returns `{1, name}`
/// or `{0, holder of the first name}`.
const CLAIM: &str = r"
local k, now, untl, me = KEYS[1], tonumber(ARGV[1]), ARGV[2], ARGV[3]
local first
for i = 4, #ARGV do
  local v, h = redis.call('HGET', k, ARGV[i]), nil
  if v then
    local sp = string.find(v, ' ', 1, true)
    if tonumber(string.sub(v, 1, sp - 1)) > now then h = string.sub(v, sp + 1) end
  end
  if not h or h == me then
    redis.call('HSET', k, ARGV[i], untl .. ' ' .. me)
    local want = tonumber(untl) - now
    if redis.call('TTL', k) < want then redis.call('EXPIRE', k, want) end
    return {1, ARGV[i]}
  end
  first = first or h
end
return {0, first or ''}";

/// Gives up claim ARGV[1] of KEYS[1] if ARGV[2] holds it.
const RELEASE: &str = r"
local v = redis.call('HGET', KEYS[1], ARGV[1])
if v and string.sub(v, string.find(v, ' ', 1, true) + 1) == ARGV[2] then
  redis.call('HDEL', KEYS[1], ARGV[1])
end
return 0";

enum Client {
    Single(redis::Client),
    Cluster(ClusterClient),
}

enum Conn {
    Single(redis::Connection),
    Cluster(Box<ClusterConnection>),
}

impl Conn {
    fn like(&mut self) -> &mut dyn ConnectionLike {
        match self {
            Conn::Single(c) => c,
            Conn::Cluster(c) => &mut **c,
        }
    }
}

pub struct RedisStore {
    /// The URL as given, for errors.
    addr: String,
    client: Result<Client>,
    pool: Mutex<ConnPool<Conn>>,
    update: Script,
    claim: Script,
    release: Script,

    /// Until when changes skip `WAIT` (see `UNREPLICATED_FOR`).
    unreplicated_until: Mutex<Option<Instant>>,
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
            .map_err(|e| not_an_address(&url, e));
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
            .map_err(|e| not_an_address(&urls.join(","), e));
        RedisStore::with_client(format!("redis+cluster {}", urls.join(",")), client)
    }

    fn with_client(addr: String, client: Result<Client>) -> RedisStore {
        RedisStore {
            addr,
            client,
            pool: Mutex::new(ConnPool::new(POOL)),
            update: Script::new(UPDATE),
            claim: Script::new(CLAIM),
            release: Script::new(RELEASE),

            unreplicated_until: Mutex::new(None),
        }
    }

    fn connect(&self) -> Result<Conn> {
        let client = self.client.as_ref().map_err(Error::clone)?;
        let err = |e: RedisError| Error::Unavailable {
            backend: self.addr.clone(),
            reason: format!("cannot connect: {e}"),
        };
        Ok(match client {
            Client::Single(c) => {
                let c = c.get_connection_with_timeout(TIMEOUT).map_err(err)?;
                let _ = c.set_read_timeout(Some(TIMEOUT));
                let _ = c.set_write_timeout(Some(TIMEOUT));
                Conn::Single(c)
            }
            Client::Cluster(c) => Conn::Cluster(Box::new(c.get_connection().map_err(err)?)),
        })
    }

    /// On a cluster connection, after a change to `key`: waits up to `REPLICA_WAIT_MS` for a
    /// replica of the key's master to have it (`WAIT 1` on the connection that wrote it, so it
    /// counts that write). Redis replicates asynchronously, and a master killed before its
    /// replica had a change would lose it on failover; a REGISTER answered 200 after this
    /// survives the loss of any one node. An error (the master gone right after the write)
    /// fails the change, so the phone is told to retry rather than told it is registered. When
    /// no replica answers (a shard without one) the change stands, and `UNREPLICATED_FOR`
    /// spares the next ones the wait.
    fn replicated(&self, conn: &mut Conn, key: &str) -> redis::RedisResult<()> {
        let Conn::Cluster(c) = conn else {
            return Ok(());
        };
        let mut skip = self.unreplicated_until.lock().unwrap();
        if skip.is_some_and(|until| Instant::now() < until) {
            return Ok(());
        }
        drop(skip);
        let route = Route::with_key(key, SlotAddr::Master);
        let wait = redis::cmd("WAIT").arg(1).arg(REPLICA_WAIT_MS).clone();
        let acked = c.route_command(
            &wait,
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
        )?;
        if matches!(acked, Value::Int(0)) {
            skip = self.unreplicated_until.lock().unwrap();
            *skip = Some(Instant::now() + UNREPLICATED_FOR);
        }
        Ok(())
    }

    /// Runs `f` on a pooled connection; a connection that saw an error is dropped. A pooled
    /// connection may have died with a restarted server: then one more try on a new one.
    fn with<T>(&self, mut f: impl FnMut(&mut Conn) -> redis::RedisResult<T>) -> Result<T> {
        let pooled = self.pool.lock().unwrap().take();
        let reused = pooled.is_some();
        let mut conn = match pooled {
            Some(c) => c,
            None => self.connect()?,
        };
        let mut result = f(&mut conn);
        if let Err(e) = &result {
            if reused && (e.is_io_error() || e.is_connection_dropped()) {
                // A restarted server leaves every pooled connection dead: drop them all.
                self.pool.lock().unwrap().clear();
                conn = self.connect()?;
                result = f(&mut conn);
            }
        }
        match result {
            Ok(v) => {
                self.pool.lock().unwrap().give(conn, Instant::now());
                Ok(v)
            }
            Err(e) => Err(failed(&self.addr, e)),
        }
    }

    fn get(&self, k: &str) -> Result<Option<String>> {
        self.with(|con| redis::cmd("GET").arg(k).query(con.like()))
    }
}

/// A client that cannot be made: the URL is at fault.
fn not_an_address(url: &str, e: RedisError) -> Error {
    Error::Url {
        url: url.to_string(),
        problem: format!("not a valid Redis address: {e}"),
    }
}

/// An operation's error: Redis away (the connection failed, or the server or cluster cannot
/// serve yet: loading, failing over) or an answer refusing it.
fn failed(addr: &str, e: RedisError) -> Error {
    let away = e.is_io_error()
        || matches!(
            e.kind(),
            ErrorKind::ClusterConnectionNotFound
                | ErrorKind::Server(
                    ServerErrorKind::BusyLoading
                        | ServerErrorKind::TryAgain
                        | ServerErrorKind::ClusterDown
                        | ServerErrorKind::MasterDown
                )
        );
    let (backend, reason) = (addr.to_string(), e.to_string());
    match away {
        true => Error::Unavailable { backend, reason },
        false => Error::Refused { backend, reason },
    }
}

/// Bindings from their JSON texts (one that does not parse is skipped).
fn decode(values: Vec<String>) -> Vec<Binding> {
    values
        .iter()
        .filter_map(|v| serde_json::from_str(v).ok())
        .collect()
}

impl Claims for RedisStore {
    fn claim(
        &self,
        set: &str,
        names: &[String],
        holder: &str,
        now: u64,
        ttl_s: u64,
    ) -> Result<Claim> {
        let mut inv = self.claim.key(key("claims", set));
        inv.arg(now).arg(now + ttl_s).arg(holder).arg(names);
        let (taken, name): (i64, String) = self.with(|con| inv.invoke(con.like()))?;
        Ok(match taken {
            1 => Claim::Taken(name),
            _ => Claim::Held(name),
        })
    }

    fn release(&self, set: &str, name: &str, holder: &str) -> Result<()> {
        let mut inv = self.release.key(key("claims", set));
        inv.arg(name).arg(holder);
        self.with(|con| inv.invoke::<i64>(con.like())).map(drop)
    }

    fn holder(&self, set: &str, name: &str, now: u64) -> Result<Option<String>> {
        let k = key("claims", set);
        let v: Option<String> =
            self.with(|con| redis::cmd("HGET").arg(&k).arg(name).query(con.like()))?;
        Ok(v.and_then(|v| {
            let (until, h) = v.split_once(' ')?;
            (until.parse::<u64>().ok()? > now).then(|| h.to_string())
        }))
    }

    fn enrol(&self, roster: &str, member: &str, on: bool) -> Result<()> {
        let k = key("roster", roster);
        let cmd = redis::cmd("HSET")
            .arg(&k)
            .arg(member)
            .arg(u8::from(on))
            .clone();
        self.with(|con| cmd.query::<i64>(con.like())).map(drop)
    }

    fn roster(&self, roster: &str) -> Result<Vec<(String, bool)>> {
        let k = key("roster", roster);
        let all: Vec<(String, u8)> =
            self.with(|con| redis::cmd("HGETALL").arg(&k).query(con.like()))?;
        let mut members: Vec<(String, bool)> =
            all.into_iter().map(|(m, on)| (m, on == 1)).collect();
        members.sort();
        Ok(members)
    }
}

impl LocationStore for RedisStore {
    fn claims(&self) -> Option<&dyn Claims> {
        Some(self)
    }

    /// Redis expires the bindings itself; only unused connections close.
    fn expire(&self, _now: u64) -> usize {
        self.pool.lock().unwrap().close_idle(Instant::now())
    }

    fn update(&self, aor: &str, changes: &[Change], now: u64) -> Result<Vec<Binding>> {
        let k = key("aor", aor);
        let mut inv = self.update.key(&k);
        inv.arg(now);
        for c in changes {
            match c {
                Change::Put(b) => {
                    let json =
                        serde_json::to_string(b).map_err(|e| Error::encode("a binding", e))?;
                    inv.arg("P")
                        .arg(&b.contact)
                        .arg(b.instance_key())
                        .arg(b.expires_at)
                        .arg(json);
                }
                Change::Remove { contact } => {
                    inv.arg("R").arg(contact);
                }
                Change::RemoveAll => {
                    inv.arg("A");
                }
                Change::Limit { max, overflow } => {
                    inv.arg("L").arg(*max).arg(overflow.name());
                }
            }
        }
        self.with(|con| {
            let out = inv.invoke(con.like())?;
            self.replicated(con, &k)?;
            Ok(out)
        })
        .map(decode)
    }

    fn lookup(&self, aor: &str, now: u64) -> Result<Vec<Binding>> {
        let values: Vec<String> =
            self.with(|con| redis::cmd("HVALS").arg(key("aor", aor)).query(con.like()))?;
        Ok(decode(values)
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
        let json = serde_json::to_string(c).map_err(|e| Error::encode("credentials", e))?;
        let k = key("user", &name);
        self.with(|con| redis::cmd("SET").arg(&k).arg(&json).query::<()>(con.like()))?;
        self.with(|con| {
            redis::cmd("SADD")
                .arg(USERS)
                .arg(&name)
                .query::<()>(con.like())
        })
    }

    fn del_user(&self, user: &str, domain: &str) -> Result<bool> {
        let name = format!("{user}@{domain}");
        let k = key("user", &name);
        let n: u32 = self.with(|con| redis::cmd("DEL").arg(&k).query(con.like()))?;
        let _: u32 = self.with(|con| redis::cmd("SREM").arg(USERS).arg(&name).query(con.like()))?;
        Ok(n > 0)
    }

    fn users(&self) -> Result<Vec<Credentials>> {
        let names: Vec<String> =
            self.with(|con| redis::cmd("SMEMBERS").arg(USERS).query(con.like()))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_tell_redis_away_from_redis_refusing() {
        let away = [
            RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset)),
            RedisError::from((ErrorKind::Server(ServerErrorKind::BusyLoading), "loading")),
            RedisError::from((ErrorKind::Server(ServerErrorKind::ClusterDown), "down")),
        ];
        for e in away {
            let e = failed("redis://h:1/", e);
            assert!(e.is_unavailable(), "{e:?}");
            assert!(e.to_string().starts_with("redis://h:1/: "), "{e}");
        }
        let refused = [
            RedisError::from((
                ErrorKind::Server(ServerErrorKind::ResponseError),
                "WRONGTYPE",
            )),
            RedisError::from((ErrorKind::UnexpectedReturnType, "not a string")),
        ];
        for e in refused {
            let e = failed("redis://h:1/", e);
            assert!(matches!(e, Error::Refused { .. }), "{e:?}");
        }
    }
}
