//! Users' voicemail boxes: messages (WAV audio and a JSON sidecar of caller, time and
//! duration) in a new (`INBOX`) and an old (`Old`) folder, the user's own greetings and PIN.
//! Every operation answers with the box as it is afterwards, so one answer serves the menu
//! and the message-waiting counts alike.
//!
//! Two backends behind one [`Mailboxes`]: files in the data directory (one node), or Redis
//! (`redis_boxes.rs`: every node sharing it). Blocking operations, run by the shell off the
//! workers for the engine (`switch::Event::Voicemail`).

mod redis_boxes;

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub use redis_boxes::{RedisMailboxes, CHANNEL};

/// A folder of a box.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Folder {
    /// New messages, not heard yet.
    Inbox,
    /// Messages heard and kept.
    Old,
}

impl Folder {
    /// The directory name, as Asterisk names it.
    pub fn dir(self) -> &'static str {
        match self {
            Folder::Inbox => "INBOX",
            Folder::Old => "Old",
        }
    }
}

/// Which greeting a caller hears.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Greeting {
    /// The user is on the phone.
    Busy,
    /// The user did not answer or is not registered.
    Unavail,
}

impl Greeting {
    /// The name the dialplan uses, and the greeting's file name (`busy.wav`).
    pub fn name(self) -> &'static str {
        match self {
            Greeting::Busy => "busy",
            Greeting::Unavail => "unavail",
        }
    }

    pub fn from_name(s: &str) -> Option<Greeting> {
        [Greeting::Busy, Greeting::Unavail]
            .into_iter()
            .find(|g| g.name() == s)
    }
}

/// What the sidecar of a message keeps.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// The caller ID of who left it.
    pub caller: String,
    /// Unix seconds when it was left.
    pub time: u64,
    pub duration_s: u32,
}

/// One message of a box.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// Its name in its folder (file stem), unique in the box.
    pub id: String,
    pub folder: Folder,
    pub meta: Meta,
}

/// A box as an operation left it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mailbox {
    /// The new messages, then the old, each oldest first.
    pub new: Vec<Message>,
    pub old: Vec<Message>,
    /// The PIN the user set (None: the configured one holds).
    pub pin: Option<String>,
    /// The user recorded a busy / an unavailable greeting.
    pub busy_greeting: bool,
    pub unavail_greeting: bool,
    /// A deposit found the box full (the recording was dropped).
    pub full: bool,
}

/// What to do with a box.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MailboxOp {
    List,
    /// Files the recording at `recording` (relative to the data directory) as a new message,
    /// unless the box holds `max_messages` already (then the recording is removed).
    Deposit {
        recording: String,
        meta: Meta,
        max_messages: usize,
    },
    /// Moves a message to `Old` (heard, kept).
    Save {
        id: String,
    },
    Delete {
        id: String,
    },
    SetPin {
        pin: String,
    },
    /// Makes the recording at `recording` the user's greeting.
    SetGreeting {
        greeting: Greeting,
        recording: String,
    },
}

/// Where boxes are kept (`voicemail.store`). Recordings are made in the data directory either
/// way, and a deposit or a new greeting moves them into the box.
pub enum Mailboxes {
    Files(FileMailboxes),
    Redis {
        data_dir: PathBuf,
        redis: Box<RedisMailboxes>,
    },
}

impl Mailboxes {
    /// The boxes of `voicemail.store`: None, the data directory; else a Redis URL.
    pub fn new(data_dir: &Path, store: Option<&str>) -> Result<Mailboxes, String> {
        Ok(match store {
            None => Mailboxes::Files(FileMailboxes::new(data_dir)),
            Some(url) => Mailboxes::Redis {
                data_dir: data_dir.to_path_buf(),
                redis: Box::new(RedisMailboxes::new(url)?),
            },
        })
    }

    /// Runs `op` on `user`'s box: the box as it is afterwards, or what went wrong.
    pub fn run(&self, user: &str, op: &MailboxOp) -> Result<Mailbox, String> {
        if !valid_user(user) {
            return Err(format!("{user:?} cannot name a voicemail box"));
        }
        match self {
            Mailboxes::Files(f) => f.run(user, op),
            Mailboxes::Redis { data_dir, redis } => redis.run(data_dir, user, op),
        }
    }

    /// The WAV bytes of a message or greeting, by its path in the data directory ([`audio`],
    /// [`greeting_file`]).
    pub fn audio(&self, path: &str) -> Result<Vec<u8>, String> {
        match self {
            Mailboxes::Files(f) => {
                let p = inside(&f.data_dir, path)?;
                std::fs::read(&p).map_err(|e| format!("{}: {e}", p.display()))
            }
            Mailboxes::Redis { redis, .. } => redis.audio(path),
        }
    }
}

/// Where boxes are kept: `<data_dir>/voicemail/<user>/`.
pub struct FileMailboxes {
    data_dir: PathBuf,
}

/// Whether `user` can name a box: letters, digits, `.`, `-`, `_`, not starting with a dot, so
/// it stays a directory of its own under `voicemail/`.
pub fn valid_user(user: &str) -> bool {
    !user.is_empty()
        && user.len() <= 64
        && !user.starts_with('.')
        && user
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// The box's directory, relative to the data directory.
pub fn box_dir(user: &str) -> String {
    format!("voicemail/{user}")
}

/// A message's audio, relative to the data directory.
pub fn audio(user: &str, m: &Message) -> String {
    format!("{}/{}/{}.wav", box_dir(user), m.folder.dir(), m.id)
}

/// A user's recorded greeting, relative to the data directory.
pub fn greeting_file(user: &str, g: Greeting) -> String {
    format!("{}/{}.wav", box_dir(user), g.name())
}

impl FileMailboxes {
    pub fn new(data_dir: impl Into<PathBuf>) -> FileMailboxes {
        FileMailboxes {
            data_dir: data_dir.into(),
        }
    }

    /// Runs `op` on `user`'s box; the error names the file and what went wrong.
    pub fn run(&self, user: &str, op: &MailboxOp) -> Result<Mailbox, String> {
        if !valid_user(user) {
            return Err(format!("{user:?} cannot name a voicemail box"));
        }
        let dir = self.data_dir.join(box_dir(user));
        let mut full = false;
        match op {
            MailboxOp::List => {}
            MailboxOp::Deposit {
                recording,
                meta,
                max_messages,
            } => {
                let src = inside(&self.data_dir, recording)?;
                let held = self.list(&dir)?;
                if held.new.len() + held.old.len() >= *max_messages {
                    full = true;
                    let _ = std::fs::remove_file(&src);
                } else {
                    let inbox = dir.join(Folder::Inbox.dir());
                    mkdir(&inbox)?;
                    let id = free_id(&inbox, meta.time);
                    let json = serde_json::to_string(meta).map_err(|e| e.to_string())?;
                    write(&inbox.join(format!("{id}.json")), json.as_bytes())?;
                    rename(&src, &inbox.join(format!("{id}.wav")))?;
                }
            }
            MailboxOp::Save { id } => {
                let from = dir.join(Folder::Inbox.dir());
                let to = dir.join(Folder::Old.dir());
                let id = checked_id(id)?;
                if from.join(format!("{id}.wav")).exists() {
                    for ext in ["json", "wav"] {
                        let name = format!("{id}.{ext}");
                        rename(&from.join(&name), &to.join(&name))?;
                    }
                }
            }
            MailboxOp::Delete { id } => {
                let id = checked_id(id)?;
                for folder in [Folder::Inbox, Folder::Old] {
                    for ext in ["wav", "json"] {
                        let _ = std::fs::remove_file(
                            dir.join(folder.dir()).join(format!("{id}.{ext}")),
                        );
                    }
                }
            }
            MailboxOp::SetPin { pin } => {
                mkdir(&dir)?;
                write(&dir.join("pin"), pin.as_bytes())?;
            }
            MailboxOp::SetGreeting {
                greeting,
                recording,
            } => {
                let src = inside(&self.data_dir, recording)?;
                rename(&src, &self.data_dir.join(greeting_file(user, *greeting)))?;
            }
        }
        let mut b = self.list(&dir)?;
        b.full = full;
        Ok(b)
    }

    fn list(&self, dir: &Path) -> Result<Mailbox, String> {
        let pin = std::fs::read_to_string(dir.join("pin"))
            .ok()
            .map(|p| p.trim().to_string())
            .filter(|p| !p.is_empty());
        Ok(Mailbox {
            new: folder(dir, Folder::Inbox)?,
            old: folder(dir, Folder::Old)?,
            pin,
            busy_greeting: dir.join("busy.wav").exists(),
            unavail_greeting: dir.join("unavail.wav").exists(),
            full: false,
        })
    }
}

/// A path relative to the data directory that stays inside it.
fn inside(data_dir: &Path, rel: &str) -> Result<PathBuf, String> {
    let p = Path::new(rel);
    if p.is_absolute()
        || p.components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        return Err(format!("{rel:?} is not a file in the data directory"));
    }
    Ok(data_dir.join(p))
}

/// The messages of a folder, oldest first (those with a sidecar that reads).
fn folder(dir: &Path, f: Folder) -> Result<Vec<Message>, String> {
    let dir = dir.join(f.dir());
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    };
    let mut out: Vec<Message> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let id = name.strip_suffix(".json")?.to_string();
            let meta = serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok()?;
            dir.join(format!("{id}.wav")).exists().then_some(Message {
                id,
                folder: f,
                meta,
            })
        })
        .collect();
    out.sort_by(|a, b| (a.meta.time, &a.id).cmp(&(b.meta.time, &b.id)));
    Ok(out)
}

/// A message name that is free in `dir`: the time it was left, and a number if need be.
fn free_id(dir: &Path, time: u64) -> String {
    (0u32..)
        .map(|n| format!("msg{time}-{n}"))
        .find(|id| !dir.join(format!("{id}.json")).exists())
        .expect("a free name")
}

fn checked_id(id: &str) -> Result<&str, String> {
    if valid_user(id) {
        Ok(id)
    } else {
        Err(format!("{id:?} is not a message"))
    }
}

/// What to check when a box cannot be written.
const WRITABLE: &str = " (check general.data_dir is writable)";

fn mkdir(p: &Path) -> Result<(), String> {
    std::fs::create_dir_all(p).map_err(|e| format!("{}: {e}{WRITABLE}", p.display()))
}

fn write(p: &Path, bytes: &[u8]) -> Result<(), String> {
    std::fs::write(p, bytes).map_err(|e| format!("{}: {e}{WRITABLE}", p.display()))
}

fn rename(from: &Path, to: &Path) -> Result<(), String> {
    if let Some(parent) = to.parent() {
        mkdir(parent)?;
    }
    std::fs::rename(from, to)
        .map_err(|e| format!("{} → {}: {e}{WRITABLE}", from.display(), to.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(time: u64) -> Meta {
        Meta {
            caller: "2001".into(),
            time,
            duration_s: 3,
        }
    }

    /// The same operations on either backend: deposits until the box is full, save, delete,
    /// PIN, a greeting, the audio read back by its path, and names that would escape.
    fn exercise(boxes: &Mailboxes, dir: &Path) {
        let recording = |name: &str, bytes: &[u8]| {
            let rec = format!("voicemail/1001/tmp/{name}.wav");
            std::fs::create_dir_all(dir.join("voicemail/1001/tmp")).unwrap();
            std::fs::write(dir.join(&rec), bytes).unwrap();
            rec
        };
        let deposit = |n: u64| {
            let recording = recording(&n.to_string(), format!("RIFF{n}").as_bytes());
            boxes.run(
                "1001",
                &MailboxOp::Deposit {
                    recording,
                    meta: meta(n),
                    max_messages: 2,
                },
            )
        };
        let b = deposit(10).unwrap();
        assert_eq!(b.new.len(), 1);
        assert_eq!(b.new[0].meta, meta(10));
        assert_eq!(boxes.audio(&audio("1001", &b.new[0])).unwrap(), b"RIFF10");
        assert!(
            !dir.join("voicemail/1001/tmp/10.wav").exists(),
            "moved into the box"
        );
        let b = deposit(11).unwrap();
        assert_eq!((b.new.len(), b.full), (2, false));
        let b = deposit(12).unwrap();
        assert!(b.full, "a third message does not fit in a box of two");
        assert_eq!(b.new.len(), 2);
        assert!(!dir.join("voicemail/1001/tmp/12.wav").exists());
        let first = b.new[0].id.clone();
        let b = boxes
            .run("1001", &MailboxOp::Save { id: first.clone() })
            .unwrap();
        assert_eq!((b.new.len(), b.old.len()), (1, 1));
        assert_eq!(b.old[0].id, first);
        assert_eq!(boxes.audio(&audio("1001", &b.old[0])).unwrap(), b"RIFF10");
        let b = boxes.run("1001", &MailboxOp::Delete { id: first }).unwrap();
        assert_eq!((b.new.len(), b.old.len()), (1, 0));
        assert_eq!(b.new[0].meta, meta(11));
        let b = boxes
            .run("1001", &MailboxOp::SetPin { pin: "9876".into() })
            .unwrap();
        assert_eq!(b.pin.as_deref(), Some("9876"));
        let greeting = MailboxOp::SetGreeting {
            greeting: Greeting::Busy,
            recording: recording("busy", b"RIFFbusy"),
        };
        let b = boxes.run("1001", &greeting).unwrap();
        assert!(b.busy_greeting && !b.unavail_greeting);
        let file = greeting_file("1001", Greeting::Busy);
        assert_eq!(boxes.audio(&file).unwrap(), b"RIFFbusy");
        assert!(boxes.audio("voicemail/1001/INBOX/gone.wav").is_err());
        assert!(boxes.run("../etc", &MailboxOp::List).is_err());
        let escape = MailboxOp::Deposit {
            recording: "../../x.wav".into(),
            meta: meta(1),
            max_messages: 5,
        };
        assert!(boxes.run("1001", &escape).is_err());
    }

    fn temp_dir(label: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("vm-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn file_boxes() {
        let dir = temp_dir("files");
        exercise(&Mailboxes::new(&dir, None).unwrap(), &dir);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A redis-server of its own on a free loopback port (scripts/setup.sh installs it): the same
    /// behaviour as files; other handles on it (other nodes) hear of the changes; with Redis
    /// gone an operation fails, naming `voicemail.store`.
    #[test]
    fn redis_boxes_and_their_announcements() {
        let dir = temp_dir("redis");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut server = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server (run scripts/setup.sh)");
        let url = format!("redis://127.0.0.1:{port}");
        let up = (0..100).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(50));
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        assert!(up, "redis-server did not start");
        let (tx, rx) = std::sync::mpsc::channel();
        for listener in [
            RedisMailboxes::new(&url).unwrap(),
            RedisMailboxes::new(&url).unwrap(),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let _ = listener.listen(|user| {
                    let _ = tx.send(user.to_string());
                });
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
        let boxes = Mailboxes::new(&dir, Some(&url)).unwrap();
        exercise(&boxes, &dir);
        let heard = rx.recv_timeout(std::time::Duration::from_secs(2));
        assert_eq!(heard.as_deref(), Ok("1001"));

        let _ = server.kill();
        let _ = server.wait();
        let e = boxes.run("1001", &MailboxOp::List).unwrap_err();
        assert!(e.contains("voicemail.store"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
