//! Boxes in Redis (`voicemail.store = "redis://…"`), so every node sharing that Redis reaches
//! every box. A box is a few keys with the user as hash tag (one slot): `…:INBOX` and `…:Old`
//! (sorted sets of message ids, scored by the time each was left), `…:msg:ID` (a hash: the
//! sidecar as JSON and the WAV bytes), `…:pin`, `…:greeting:busy|unavail` (WAV bytes) and
//! `…:seq` (numbers new messages). A change is one MULTI, with a PUBLISH on [`CHANNEL`] of
//! this process's origin and the user, so the other nodes refresh the message-waiting state
//! of their phones ([`RedisMailboxes::listen`]). One connection is kept and dropped after any
//! error: while Redis is down every operation fails within [`TIMEOUT`], and works again once
//! it is back.

use super::{checked_id, Folder, Greeting, Mailbox, MailboxOp, Message, Meta};
use redis::{Client, Commands, Connection};
use std::sync::Mutex;
use std::time::Duration;

/// How long an operation waits for Redis, connecting or answering.
const TIMEOUT: Duration = Duration::from_secs(1);

/// Where a changed box is announced: `ORIGIN USER`.
pub const CHANNEL: &str = "strowger:vm:changed";

/// What to check when Redis does not answer.
const CHECK: &str = "check voicemail.store in the configuration and that its Redis runs";

pub struct RedisMailboxes {
    client: Client,
    url: String,
    conn: Mutex<Option<Connection>>,
    /// This process among those publishing on the channel: its own changes are not news.
    origin: String,
}

fn key(user: &str, what: &str) -> String {
    format!("strowger:vm:{{{user}}}:{what}")
}

fn folder_key(user: &str, f: Folder) -> String {
    key(user, f.dir())
}

fn msg_key(user: &str, id: &str) -> String {
    key(user, &format!("msg:{id}"))
}

fn greeting_key(user: &str, g: Greeting) -> String {
    key(user, &format!("greeting:{}", g.name()))
}

impl RedisMailboxes {
    /// Whether `url` names a Redis (`redis://HOST:PORT[/DB]`); the error says why not.
    pub fn check_url(url: &str) -> Result<(), String> {
        if !url.starts_with("redis://") {
            return Err(format!("{url:?} is not a redis:// URL"));
        }
        Client::open(url)
            .map(|_| ())
            .map_err(|e| format!("{url:?}: {e}"))
    }

    /// Boxes in the Redis at `url`; nothing is connected until the first operation.
    pub fn new(url: &str) -> Result<RedisMailboxes, String> {
        Self::check_url(url)?;
        let client = Client::open(url).map_err(|e| e.to_string())?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Ok(RedisMailboxes {
            client,
            url: url.to_string(),
            conn: Mutex::new(None),
            origin: format!("{}-{}", std::process::id(), now.as_nanos()),
        })
    }

    fn failed(&self, e: redis::RedisError) -> String {
        format!("voicemail.store {}: {e} ({CHECK})", self.url)
    }

    /// Runs `f` on the connection (made if need be); an error drops it.
    fn with<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> redis::RedisResult<T>,
    ) -> Result<T, String> {
        let mut held = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if held.is_none() {
            let c = self
                .client
                .get_connection_with_timeout(TIMEOUT)
                .map_err(|e| self.failed(e))?;
            c.set_read_timeout(Some(TIMEOUT))
                .map_err(|e| self.failed(e))?;
            c.set_write_timeout(Some(TIMEOUT))
                .map_err(|e| self.failed(e))?;
            *held = Some(c);
        }
        let r = f(held.as_mut().expect("connected above"));
        if r.is_err() {
            *held = None;
        }
        r.map_err(|e| self.failed(e))
    }

    /// Runs `op` on `user`'s box; `data_dir` holds the recordings a deposit or greeting names
    /// (they are moved into Redis).
    pub(super) fn run(
        &self,
        data_dir: &std::path::Path,
        user: &str,
        op: &MailboxOp,
    ) -> Result<Mailbox, String> {
        let mut full = false;
        let announce = |p: &mut redis::Pipeline| {
            p.publish(CHANNEL, format!("{} {user}", self.origin))
                .ignore();
        };
        match op {
            MailboxOp::List => {}
            MailboxOp::Deposit {
                recording,
                meta,
                max_messages,
            } => {
                let src = super::inside(data_dir, recording)?;
                let held = self.list(user)?;
                if held.new.len() + held.old.len() >= *max_messages {
                    full = true;
                } else {
                    let wav = read(&src)?;
                    let json = serde_json::to_string(meta).map_err(|e| e.to_string())?;
                    self.with(|c| {
                        let n: u64 = c.incr(key(user, "seq"), 1)?;
                        let id = format!("msg{}-{n}", meta.time);
                        let mut p = redis::pipe();
                        p.atomic()
                            .hset_multiple(
                                msg_key(user, &id),
                                &[("meta", json.as_bytes()), ("audio", &wav[..])],
                            )
                            .ignore()
                            .zadd(folder_key(user, Folder::Inbox), &id, meta.time)
                            .ignore();
                        announce(&mut p);
                        p.exec(c)
                    })?;
                }
                let _ = std::fs::remove_file(&src);
            }
            MailboxOp::Save { id } => {
                let id = checked_id(id)?;
                self.with(|c| {
                    let inbox = folder_key(user, Folder::Inbox);
                    let Some(score): Option<f64> = c.zscore(&inbox, id)? else {
                        return Ok(());
                    };
                    let mut p = redis::pipe();
                    p.atomic()
                        .zrem(&inbox, id)
                        .ignore()
                        .zadd(folder_key(user, Folder::Old), id, score)
                        .ignore();
                    announce(&mut p);
                    p.exec(c)
                })?;
            }
            MailboxOp::Delete { id } => {
                let id = checked_id(id)?;
                self.with(|c| {
                    let mut p = redis::pipe();
                    p.atomic()
                        .zrem(folder_key(user, Folder::Inbox), id)
                        .ignore()
                        .zrem(folder_key(user, Folder::Old), id)
                        .ignore()
                        .del(msg_key(user, id))
                        .ignore();
                    announce(&mut p);
                    p.exec(c)
                })?;
            }
            MailboxOp::SetPin { pin } => self.with(|c| c.set::<_, _, ()>(key(user, "pin"), pin))?,
            MailboxOp::SetGreeting {
                greeting,
                recording,
            } => {
                let src = super::inside(data_dir, recording)?;
                let wav = read(&src)?;
                self.with(|c| c.set::<_, _, ()>(greeting_key(user, *greeting), wav))?;
                let _ = std::fs::remove_file(&src);
            }
        }
        let mut b = self.list(user)?;
        b.full = full;
        Ok(b)
    }

    fn list(&self, user: &str) -> Result<Mailbox, String> {
        type Listing = (Vec<String>, Vec<String>, Option<String>, bool, bool);
        let (new, old, pin, busy, unavail): Listing = self.with(|c| {
            redis::pipe()
                .zrange(folder_key(user, Folder::Inbox), 0, -1)
                .zrange(folder_key(user, Folder::Old), 0, -1)
                .get(key(user, "pin"))
                .exists(greeting_key(user, Greeting::Busy))
                .exists(greeting_key(user, Greeting::Unavail))
                .query(c)
        })?;
        let ids: Vec<(&String, Folder)> = new
            .iter()
            .map(|id| (id, Folder::Inbox))
            .chain(old.iter().map(|id| (id, Folder::Old)))
            .collect();
        let metas: Vec<Option<Vec<u8>>> = match ids.is_empty() {
            true => Vec::new(),
            false => self.with(|c| {
                let mut p = redis::pipe();
                for (id, _) in &ids {
                    p.hget(msg_key(user, id), "meta");
                }
                p.query(c)
            })?,
        };
        let mut b = Mailbox {
            pin: pin.filter(|p| !p.is_empty()),
            busy_greeting: busy,
            unavail_greeting: unavail,
            ..Mailbox::default()
        };
        for ((id, folder), meta) in ids.into_iter().zip(metas) {
            let Some(meta) = meta.and_then(|m| serde_json::from_slice::<Meta>(&m).ok()) else {
                continue;
            };
            let m = Message {
                id: id.clone(),
                folder,
                meta,
            };
            match folder {
                Folder::Inbox => b.new.push(m),
                Folder::Old => b.old.push(m),
            }
        }
        Ok(b)
    }

    /// A message's or greeting's WAV bytes by the path the file backend keeps it at
    /// (`voicemail/USER/FOLDER/ID.wav`, `voicemail/USER/busy.wav`). The folder is not needed:
    /// a message is found by its id wherever it is.
    pub(super) fn audio(&self, path: &str) -> Result<Vec<u8>, String> {
        let parts: Vec<&str> = path
            .strip_prefix("voicemail/")
            .and_then(|p| p.strip_suffix(".wav"))
            .map(|p| p.split('/').collect())
            .unwrap_or_default();
        let (k, field) = match parts[..] {
            [user, _folder, id] => (msg_key(user, checked_id(id)?), Some("audio")),
            [user, g] => match Greeting::from_name(g) {
                Some(g) => (greeting_key(user, g), None),
                None => return Err(format!("{path}: no such greeting")),
            },
            _ => return Err(format!("{path} is not a voicemail box's audio")),
        };
        if !super::valid_user(parts[0]) {
            return Err(format!("{path} is not a voicemail box's audio"));
        }
        let wav: Option<Vec<u8>> = self.with(|c| match field {
            Some(f) => c.hget(&k, f),
            None => c.get(&k),
        })?;
        wav.ok_or_else(|| format!("{path}: not in voicemail.store {}", self.url))
    }

    /// Listens for boxes other processes changed, calling `changed(user)` for each, until the
    /// connection fails (the error says why; call again to listen anew).
    pub fn listen(&self, mut changed: impl FnMut(&str)) -> Result<(), String> {
        let mut c = self
            .client
            .get_connection_with_timeout(TIMEOUT)
            .map_err(|e| self.failed(e))?;
        let mut sub = c.as_pubsub();
        sub.subscribe(CHANNEL).map_err(|e| self.failed(e))?;
        loop {
            let msg = sub.get_message().map_err(|e| self.failed(e))?;
            let Ok(text) = std::str::from_utf8(msg.get_payload_bytes()) else {
                continue;
            };
            match text.split_once(' ') {
                Some((origin, user)) if origin != self.origin && super::valid_user(user) => {
                    changed(user)
                }
                _ => {}
            }
        }
    }
}

fn read(p: &std::path::Path) -> Result<Vec<u8>, String> {
    std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))
}
