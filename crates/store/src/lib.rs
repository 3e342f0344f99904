//! Where strowger keeps registrations (the location service, RFC 3261 §10) and users'
//! credentials: in-process with a snapshot file (`local:PATH`), in Redis (`redis://HOST:PORT`),
//! a Redis Cluster (`redis+cluster://HOST:PORT,HOST:PORT,…`) or Memcached
//! (`memcached://HOST:PORT`).
//!
//! Every operation is blocking and may touch the network: the `strowger` binary runs them on
//! store threads, never on a worker. A backend that is down makes writes fail with
//! `Error::Unavailable` (nothing is reported as stored that was not); reads fall back to a
//! bounded cache of what this process last saw (`ReadCache`).

mod cache;
mod claims;
mod conn_pool;
mod forward;
mod local;
mod memcached;
mod packed;
pub mod pipe;
mod redis_store;
pub mod voicemail;

pub use cache::{ReadCache, CACHE_ENTRIES, USER_TTL_S};
pub use claims::{Claim, Claims, LocalClaims};
pub use forward::{Forward, Forwarding};
pub use local::LocalStore;
pub use memcached::MemcachedStore;
pub use redis_store::RedisStore;

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// One registered contact of an address-of-record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Binding {
    /// The Contact URI as the phone sent it.
    pub contact: String,
    /// Unix time (seconds) when the binding lapses.
    pub expires_at: u64,
    /// Contact q-value × 1000 (0..=1000).
    pub q: u16,
    /// Where the REGISTER came from (NAT: requests go there, not to the Contact host).
    pub received: SocketAddr,
    /// "udp" or "tcp".
    pub transport: String,
    /// Path header values (RFC 3327), in order.
    #[serde(default)]
    pub path: Vec<String>,
    /// `+sip.instance` and `reg-id` (RFC 5626).
    #[serde(default)]
    pub instance: Option<String>,
    #[serde(default)]
    pub reg_id: Option<u32>,
    pub call_id: String,
    pub cseq: u32,
}

impl Binding {
    /// Seconds left at `now` (0 when lapsed).
    pub fn remaining(&self, now: u64) -> u64 {
        self.expires_at.saturating_sub(now)
    }

    /// What makes two bindings the same RFC 5626 flow, so a new one replaces the old: the
    /// instance and reg-id, as one string ("" without an instance: then only the contact
    /// counts). The Redis update script compares these.
    pub(crate) fn instance_key(&self) -> String {
        match &self.instance {
            Some(i) => format!(
                "{i}\n{}",
                self.reg_id.map(|r| r.to_string()).unwrap_or_default()
            ),
            None => String::new(),
        }
    }
}

/// A change to an AOR's bindings, applied in order by `LocationStore::update`.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// Add or refresh (same contact URI replaces the old one).
    Put(Binding),
    /// Remove one contact.
    Remove { contact: String },
    /// Remove every contact (`Contact: *` with `Expires: 0`).
    RemoveAll,
    /// At most `max` bindings once the changes before it are applied (`registrar.max_contacts`).
    /// Decided where the change is applied, atomically with it, so that neither several workers
    /// nor several instances sharing a backend can each add the last binding allowed.
    Limit { max: usize, overflow: Overflow },
}

/// What a `Change::Limit` does when the changes before it would leave too many bindings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overflow {
    /// Nothing of the change set is applied (the registrar then answers 403), unless it leaves
    /// no more bindings than there were (a refresh after the limit was lowered).
    Refuse,
    /// The bindings that lapse first go, never one the change set itself put.
    ReplaceOldest,
}

impl Overflow {
    /// The name the Redis update script and `registrar.contacts_overflow` use.
    pub fn name(self) -> &'static str {
        match self {
            Overflow::Refuse => "refuse",
            Overflow::ReplaceOldest => "replace_oldest",
        }
    }
}

/// A user's digest credentials: HA1 = H(user:realm:password) for MD5 and SHA-256 (RFC 8760),
/// and what the user's calls may do. The settings are optional in every backend's record: one
/// written before they existed reads as the defaults, and defaults are not written (so an older
/// strowger still reads a newer record, ignoring what it does not know).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credentials {
    pub user: String,
    pub domain: String,
    pub ha1_md5: String,
    pub ha1_sha256: String,
    /// The dialplan context the user's calls run in; None: `dialplan.default_context`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// The caller ID of the user's calls, `"Name" <number>` or a number; None: the user name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller_id: Option<String>,
    /// Calls the user may have at once; 0: no limit.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub max_calls: u32,
    /// Regular expressions the dialled extension must match one of; empty: anything the
    /// user's context routes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// Where the user's calls go instead, set from the phone (the dialplan's `forward` step).
    #[serde(default, skip_serializing_if = "Forwarding::is_empty")]
    pub forward: Forwarding,
    /// How the user's calls are recorded whole (a `RECORD_CALLS` value such as `stereo,opus`);
    /// None: as the dialplan says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record_calls: Option<String>,
    /// How the user's phones send and take digits (`auto`, `inband`, `info`); None: the
    /// switch's `rtp.dtmf`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtmf: Option<String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Why a store operation failed, as callers tell the cases apart: a backend that is away
/// (`is_unavailable`: try again later, serve reads from a cache) from a setting or data that a
/// person must fix. Each message names the problem and what to do about it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The store URL is malformed or names no store strowger knows.
    #[error("{url:?}: {problem} — {URL_HELP}")]
    Url { url: String, problem: String },
    /// The backend cannot be reached, or the connection failed during the operation (down,
    /// restarting, timed out, or still loading). Nothing was reported done that was not; the
    /// same operation works again once the backend is back.
    #[error("{backend}: {reason} (check the server is running and reachable)")]
    Unavailable { backend: String, reason: String },
    /// The backend answered, but refused the operation or replied in a way this client cannot
    /// read.
    #[error("{backend}: {reason}")]
    Refused { backend: String, reason: String },
    /// Other instances kept changing a value while this one tried to change it.
    #[error("{backend}: {key} kept changing under concurrent updates; try again")]
    Contended { backend: String, key: String },
    /// A local store's file holds something that is not a strowger store.
    #[error(
        "{}: not a strowger store snapshot ({reason}); move it away to start empty",
        path.display()
    )]
    Corrupt { path: PathBuf, reason: String },
    /// A local store's file cannot be read.
    #[error("{}: cannot read: {reason} (check it is a file strowger may read)", path.display())]
    Read { path: PathBuf, reason: String },
    /// A local store's file cannot be written or flushed to the disk.
    #[error(
        "{}: cannot write the store: {reason} (check the directory exists and is writable)",
        path.display()
    )]
    Write { path: PathBuf, reason: String },
    /// A record could not be encoded as JSON.
    #[error("cannot encode {what} as JSON: {reason}")]
    Encode { what: &'static str, reason: String },
}

impl Error {
    /// The backend is away for now (not a setting or data to fix): a read may be answered from
    /// a cache, and the operation can be tried again later.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Error::Unavailable { .. })
    }

    pub(crate) fn encode(what: &'static str, e: serde_json::Error) -> Error {
        Error::Encode {
            what,
            reason: e.to_string(),
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

pub trait LocationStore: Send + Sync {
    /// Applies `changes` to `aor` and returns its bindings still valid at `now` (unix seconds).
    /// A store may hold the change back from its backing file until [`LocationStore::commit`]:
    /// acknowledge an update only after committing it.
    fn update(&self, aor: &str, changes: &[Change], now: u64) -> Result<Vec<Binding>>;
    /// Writes out the updates held back so far (the local store's journal lines), so a batch of
    /// REGISTERs costs one write. The network stores write as they go: nothing to do.
    fn commit(&self) -> Result<()> {
        Ok(())
    }
    /// The bindings of `aor` valid at `now`.
    fn lookup(&self, aor: &str, now: u64) -> Result<Vec<Binding>>;
    /// This store's common operations as requests over the caller's own connection, when it
    /// has them (`pipe`).
    fn pipe(&self) -> Option<&dyn pipe::Pipe> {
        None
    }
    /// What nodes sharing this backend claim for a while (conference rooms, park slots), when
    /// the backend takes claims atomically; None (Memcached): they stay on each node.
    fn claims(&self) -> Option<&dyn Claims> {
        None
    }
    /// How many bindings are valid at `now`, for the metrics, when the store can count them
    /// without a scan of its backend (the local store); None otherwise.
    fn bindings(&self, _now: u64) -> Option<u64> {
        None
    }
    /// Forgets what lapsed by `now` and gives back the room of maps that have emptied, and
    /// closes connections that went unused (`conn_pool`), so memory falls with the load; called
    /// every [`EXPIRE_EVERY_S`] seconds off the workers. Returns how many entries and
    /// connections went. (A lapsed binding is never answered anyway; this only frees it.)
    fn expire(&self, _now: u64) -> usize {
        0
    }
}

/// How often [`LocationStore::expire`] runs.
pub const EXPIRE_EVERY_S: u64 = 30;

pub trait CredentialStore: Send + Sync {
    /// The user's credentials as the backend has them now.
    fn user(&self, user: &str, domain: &str) -> Result<Option<Credentials>>;
    /// The user's credentials as read from the backend less than `USER_TTL_S` before
    /// `now` (unix seconds), without I/O; None when this store keeps no such copy. `Some(None)`:
    /// no such user.
    fn recent_user(&self, _user: &str, _domain: &str, _now: u64) -> Option<Option<Credentials>> {
        None
    }
    /// Adds or replaces a user.
    fn put_user(&self, c: &Credentials) -> Result<()>;
    /// Removes a user (and says whether it existed).
    fn del_user(&self, user: &str, domain: &str) -> Result<bool>;
    fn users(&self) -> Result<Vec<Credentials>>;
    /// Sets (`target` Some) or clears one kind of the user's forwarding, every kind for `kind`
    /// None; false when there is no such user. A read and a write: the last of two changes at
    /// once wins, as when a phone sets the same thing twice.
    fn set_forward(
        &self,
        user: &str,
        domain: &str,
        kind: Option<Forward>,
        target: Option<&str>,
    ) -> Result<bool> {
        let Some(mut c) = self.user(user, domain)? else {
            return Ok(false);
        };
        let kinds = match &kind {
            Some(k) => std::slice::from_ref(k),
            None => &Forward::ALL[..],
        };
        for k in kinds {
            c.forward.set(*k, target.map(str::to_owned));
        }
        self.put_user(&c)?;
        Ok(true)
    }
}

/// Both services of one backend.
pub trait Store: LocationStore + CredentialStore {}
impl<T: LocationStore + CredentialStore> Store for T {}

/// A parsed store URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreUrl {
    Local(PathBuf),
    Redis(String, u16),
    /// Any of the cluster's nodes (at least one).
    RedisCluster(Vec<(String, u16)>),
    Memcached(String, u16),
}

const URL_HELP: &str = "use local:PATH (e.g. local:strowger-data/store.snap), \
                        redis://HOST:PORT (e.g. redis://127.0.0.1:6379), \
                        redis+cluster://HOST:PORT,HOST:PORT,... (any nodes of a Redis Cluster) or \
                        memcached://HOST:PORT (e.g. memcached://127.0.0.1:11211)";

/// `HOST[:PORT]` of a network store URL, with IPv6 hosts in brackets.
fn host_port(s: &str, scheme: &str, rest: &str, default_port: u16) -> Result<(String, u16)> {
    let (host, port) = match rest.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => match p.parse::<u16>() {
            Ok(p) if p > 0 => (h, p),
            _ => {
                return Err(bad_url(
                    s,
                    format!("port {p:?} is not a number from 1 to 65535"),
                ))
            }
        },
        _ => (rest, default_port),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() || host.contains('/') || host.contains('@') {
        return Err(bad_url(
            s,
            format!("expected {scheme}://HOST:PORT (no user, password or path)"),
        ));
    }
    Ok((host.to_string(), port))
}

fn bad_url(url: &str, problem: impl Into<String>) -> Error {
    Error::Url {
        url: url.to_string(),
        problem: problem.into(),
    }
}

impl std::str::FromStr for StoreUrl {
    type Err = Error;

    fn from_str(s: &str) -> Result<StoreUrl> {
        if let Some(path) = s.strip_prefix("local:") {
            if path.is_empty() {
                return Err(bad_url(s, "local: needs a file path"));
            }
            return Ok(StoreUrl::Local(PathBuf::from(path)));
        }
        if let Some(r) = s.strip_prefix("redis+cluster://") {
            let nodes = r
                .trim_end_matches('/')
                .split(',')
                .map(|n| host_port(s, "redis+cluster", n.trim(), 6379))
                .collect::<Result<Vec<_>>>()?;
            return Ok(StoreUrl::RedisCluster(nodes));
        }
        let (scheme, rest, default_port) = if let Some(r) = s.strip_prefix("redis://") {
            ("redis", r, 6379)
        } else if let Some(r) = s.strip_prefix("memcached://") {
            ("memcached", r, 11211)
        } else {
            return Err(bad_url(s, "unknown store"));
        };
        let (host, port) = host_port(s, scheme, rest.trim_end_matches('/'), default_port)?;
        Ok(match scheme {
            "redis" => StoreUrl::Redis(host, port),
            _ => StoreUrl::Memcached(host, port),
        })
    }
}

/// Opens the store a URL names. Network backends connect lazily: a backend that is down now
/// makes operations fail until it is back, it does not stop strowger from starting. They are
/// read through a `ReadCache` of [`CACHE_ENTRIES`] AORs and as many users.
pub fn open(url: &str) -> Result<Arc<dyn Store>> {
    open_with_cache(url, CACHE_ENTRIES)
}

/// [`open`], a network backend's read cache holding `cache_entries` AORs and as many users
/// (`registrar.cache_entries`).
pub fn open_with_cache(url: &str, cache_entries: usize) -> Result<Arc<dyn Store>> {
    let parsed: StoreUrl = url.parse()?;
    let n = cache_entries;
    Ok(match parsed {
        StoreUrl::Local(path) => Arc::new(LocalStore::open(&path)?),
        StoreUrl::Redis(h, p) => Arc::new(ReadCache::new(RedisStore::new(&h, p), n)),
        StoreUrl::RedisCluster(nodes) => Arc::new(ReadCache::new(RedisStore::cluster(&nodes), n)),
        StoreUrl::Memcached(h, p) => Arc::new(ReadCache::new(MemcachedStore::new(&h, p, n), n)),
    })
}

/// Applies changes to a list of bindings (shared by the backends that store an AOR as one value),
/// dropping lapsed ones; returns the bindings valid at `now`.
pub fn apply(mut list: Vec<Binding>, changes: &[Change], now: u64) -> Vec<Binding> {
    let before = list.clone();
    for c in changes {
        match c {
            Change::Put(b) => {
                list.retain(|x| {
                    x.contact != b.contact
                        && !(b.instance.is_some()
                            && x.instance == b.instance
                            && x.reg_id == b.reg_id)
                });
                list.push(b.clone());
            }
            Change::Remove { contact } => list.retain(|x| &x.contact != contact),
            Change::RemoveAll => list.clear(),
            Change::Limit { max, overflow } => {
                list.retain(|b| b.expires_at > now);
                if list.len() <= *max {
                    continue;
                }
                match overflow {
                    Overflow::Refuse => {
                        let had = before.iter().filter(|b| b.expires_at > now).count();
                        if list.len() > had {
                            list.clone_from(&before);
                        }
                    }
                    Overflow::ReplaceOldest => {
                        let put: std::collections::HashSet<&str> = changes
                            .iter()
                            .filter_map(|c| match c {
                                Change::Put(b) => Some(b.contact.as_str()),
                                _ => None,
                            })
                            .collect();
                        // What this change set put first, then the latest to lapse.
                        list.sort_by_key(|b| {
                            (
                                !put.contains(b.contact.as_str()),
                                std::cmp::Reverse(b.expires_at),
                            )
                        });
                        list.truncate(*max);
                    }
                }
            }
        }
    }
    list.retain(|b| b.expires_at > now);
    list
}

/// The key an AOR is stored under in the network backends (safe for memcached: no spaces or
/// control characters, at most 250 bytes).
pub(crate) fn key(kind: &str, name: &str) -> String {
    let mut k = format!("strowger:{kind}:");
    for ch in name.chars() {
        if ch.is_ascii_graphic() && ch != '%' {
            k.push(ch);
        } else {
            for b in ch.to_string().bytes() {
                k.push_str(&format!("%{b:02X}"));
            }
        }
    }
    if k.len() > 250 {
        // Long names are rare; keep them distinct with a stable hash.
        k.truncate(230);
        k.push_str(&format!("#{:016x}", fnv1a(name)));
    }
    k
}

/// FNV-1a: a hash that is the same in every process and version (unlike std's), for keys
/// other instances must find.
pub(crate) fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf29ce484222325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            "local:/tmp/x.snap".parse(),
            Ok(StoreUrl::Local("/tmp/x.snap".into()))
        );
        assert_eq!(
            "redis://127.0.0.1:6380".parse(),
            Ok(StoreUrl::Redis("127.0.0.1".into(), 6380))
        );
        assert_eq!(
            "redis://localhost".parse(),
            Ok(StoreUrl::Redis("localhost".into(), 6379))
        );
        assert_eq!(
            "memcached://[::1]:11311".parse(),
            Ok(StoreUrl::Memcached("::1".into(), 11311))
        );
        let e = "mysql://x".parse::<StoreUrl>().unwrap_err().to_string();
        assert!(
            e.starts_with("\"mysql://x\": unknown store — use local:PATH"),
            "{e}"
        );
        assert!(e.contains("redis://HOST:PORT"), "{e}");
        let e = "redis://h:99999".parse::<StoreUrl>().unwrap_err();
        assert!(
            matches!(&e, Error::Url { problem, .. } if problem.contains("port")),
            "{e}"
        );
        assert!(!e.is_unavailable());
        assert!("local:".parse::<StoreUrl>().is_err());
        assert_eq!(
            "redis+cluster://127.0.0.1:7000,[::1]:7001,h".parse(),
            Ok(StoreUrl::RedisCluster(vec![
                ("127.0.0.1".into(), 7000),
                ("::1".into(), 7001),
                ("h".into(), 6379)
            ]))
        );
        let e = "redis+cluster://a:1,,b:2".parse::<StoreUrl>().unwrap_err();
        assert!(e.to_string().contains("redis+cluster://HOST:PORT"), "{e}");
    }

    #[test]
    fn credentials_without_settings_read_as_defaults_and_defaults_are_not_written() {
        let old = r#"{"user":"a","domain":"x","ha1_md5":"m","ha1_sha256":"s"}"#;
        let c: Credentials = serde_json::from_str(old).unwrap();
        assert_eq!(
            c,
            Credentials {
                user: "a".into(),
                domain: "x".into(),
                ha1_md5: "m".into(),
                ha1_sha256: "s".into(),
                ..Credentials::default()
            }
        );
        assert_eq!(serde_json::to_string(&c).unwrap(), old);
        let full = Credentials {
            context: Some("office".into()),
            caller_id: Some("\"Alice\" <1001>".into()),
            max_calls: 2,
            allow: vec!["^1".into()],
            forward: Forwarding {
                noanswer: Some("2001".into()),
                ..Forwarding::default()
            },
            ..c
        };
        let json = serde_json::to_string(&full).unwrap();
        assert_eq!(serde_json::from_str::<Credentials>(&json).unwrap(), full);
    }

    #[test]
    fn keys_are_memcached_safe() {
        assert_eq!(
            key("loc", "alice@example.com"),
            "strowger:loc:alice@example.com"
        );
        assert_eq!(key("loc", "a b"), "strowger:loc:a%20b");
        assert!(key("loc", &"x".repeat(400)).len() <= 250);
    }
}
