//! Users' voicemail boxes: messages (WAV audio and a JSON sidecar of caller, time and
//! duration) in a new (`INBOX`) and an old (`Old`) folder, the user's own greetings and PIN.
//! Every operation answers with the box as it is afterwards, so one answer serves the menu
//! and the message-waiting counts alike.
//!
//! Blocking file operations, run by the shell for the engine (`switch::Event::Voicemail`).

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

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
                let src = self.inside(recording)?;
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
                let src = self.inside(recording)?;
                rename(&src, &self.data_dir.join(greeting_file(user, *greeting)))?;
            }
        }
        let mut b = self.list(&dir)?;
        b.full = full;
        Ok(b)
    }

    /// A path relative to the data directory that stays inside it.
    fn inside(&self, rel: &str) -> Result<PathBuf, String> {
        let p = Path::new(rel);
        if p.is_absolute()
            || p.components()
                .any(|c| matches!(c, std::path::Component::ParentDir))
        {
            return Err(format!("{rel:?} is not a file in the data directory"));
        }
        Ok(self.data_dir.join(p))
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

    #[test]
    fn deposit_save_delete_and_a_full_box() {
        let dir = std::env::temp_dir().join(format!("vm-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let boxes = FileMailboxes::new(&dir);
        let deposit = |n: u64| {
            let rec = format!("voicemail/1001/tmp/{n}.wav");
            std::fs::create_dir_all(dir.join("voicemail/1001/tmp")).unwrap();
            std::fs::write(dir.join(&rec), b"RIFF").unwrap();
            boxes.run(
                "1001",
                &MailboxOp::Deposit {
                    recording: rec,
                    meta: meta(n),
                    max_messages: 2,
                },
            )
        };
        let b = deposit(10).unwrap();
        assert_eq!(b.new.len(), 1);
        assert_eq!(b.new[0].meta, meta(10));
        assert!(dir.join(audio("1001", &b.new[0])).exists());
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
        assert!(dir.join(audio("1001", &b.old[0])).exists());
        let b = boxes.run("1001", &MailboxOp::Delete { id: first }).unwrap();
        assert_eq!((b.new.len(), b.old.len()), (1, 0));
        let b = boxes
            .run("1001", &MailboxOp::SetPin { pin: "9876".into() })
            .unwrap();
        assert_eq!(b.pin.as_deref(), Some("9876"));
        assert!(boxes.run("../etc", &MailboxOp::List).is_err());
        let escape = MailboxOp::Deposit {
            recording: "../../x.wav".into(),
            meta: meta(1),
            max_messages: 5,
        };
        assert!(boxes.run("1001", &escape).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
