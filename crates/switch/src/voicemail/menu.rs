//! The retrieval menu as a state machine of keys in, words out: what a caller hears and what
//! is done to the box for each key, with Asterisk's VoiceMailMain layout (1 play, 4 previous,
//! 5 repeat, 6 next, 7 delete, 9 save, 0 mailbox options, # exit). No I/O: voicemail.rs plays
//! the prompts and runs the operations.

use store::voicemail::{audio, Folder, Greeting, Mailbox, MailboxOp, Message};

use crate::config::valid_pin;
use crate::ivr::say::number;

/// Wrong PINs before the caller is sent away.
const PIN_TRIES: u8 = 3;
/// Digits kept of what is typed for a PIN.
const PIN_DIGITS: usize = 16;

/// What a key made the menu say and do.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Said {
    /// Prompts in order: a name in `voicemail.sounds_dir` (`vm-intro`, `digits/2`), or a
    /// path in the data directory (a message, a greeting: it holds a `/` after `voicemail`).
    pub prompts: Vec<String>,
    pub ops: Vec<MailboxOp>,
    /// Record this greeting once the prompts are played.
    pub record: Option<Greeting>,
    /// The caller leaves the box once the prompts are played.
    pub leave: bool,
}

impl Said {
    fn say(prompts: &[&str]) -> Said {
        Said {
            prompts: prompts.iter().map(|p| p.to_string()).collect(),
            ..Said::default()
        }
    }

    fn then(mut self, more: Said) -> Said {
        self.prompts.extend(more.prompts);
        self.ops.extend(more.ops);
        self.record = self.record.or(more.record);
        self.leave |= more.leave;
        self
    }
}

#[derive(Debug, PartialEq, Eq)]
enum State {
    /// Typing the PIN (ended by `#`).
    Pin,
    Main,
    /// A message was played: 4 5 6 7 9 act on it.
    Message,
    /// Mailbox options: 1 unavailable and 2 busy greeting, 5 new PIN, * back.
    Options,
    /// Typing a new PIN (ended by `#`).
    NewPin,
}

/// One caller's place in one box.
pub(crate) struct Menu {
    user: String,
    /// The PIN to type (None: none asked).
    pin: Option<String>,
    typed: String,
    tries: u8,
    state: State,
    /// The messages as the box was opened with them, new first; the one at `at` is current.
    list: Vec<Message>,
    at: usize,
}

impl Menu {
    /// `user`'s box opened as listed; `pin`: the PIN to ask, if any.
    pub(crate) fn open(user: &str, pin: Option<String>, b: &Mailbox) -> (Menu, Said) {
        let mut m = Menu {
            user: user.to_string(),
            state: State::Pin,
            pin,
            typed: String::new(),
            tries: 0,
            list: b.new.iter().chain(&b.old).cloned().collect(),
            at: 0,
        };
        let said = match m.pin {
            Some(_) => Said::say(&["vm-password"]),
            None => m.welcome(),
        };
        (m, said)
    }

    /// The caller pressed `key`.
    pub(crate) fn key(&mut self, key: char) -> Said {
        match self.state {
            State::Pin => self.pin_key(key),
            State::NewPin => self.new_pin_key(key),
            State::Main => match key {
                '1' => {
                    self.at = 0;
                    self.play()
                }
                '0' => self.options(),
                '#' => Self::goodbye(),
                _ => self.main_menu(),
            },
            State::Message => match key {
                '4' if self.at > 0 => {
                    self.at -= 1;
                    self.play()
                }
                '4' => Said::say(&["vm-first"]).then(self.play()),
                '5' => self.play(),
                '6' if self.at + 1 < self.list.len() => {
                    self.at += 1;
                    self.play()
                }
                '6' => Said::say(&["vm-nomore"]).then(self.message_menu()),
                '7' => self.delete(),
                '9' => Said::say(&["vm-msgsaved"]).then(self.message_menu()),
                '0' => self.options(),
                '*' => self.main_menu(),
                '#' => Self::goodbye(),
                _ => self.message_menu(),
            },
            State::Options => match key {
                '1' => Self::record(Greeting::Unavail, "vm-rec-unv"),
                '2' => Self::record(Greeting::Busy, "vm-rec-busy"),
                '5' => {
                    self.state = State::NewPin;
                    self.typed.clear();
                    Said::say(&["vm-newpassword"])
                }
                '*' => self.main_menu(),
                '#' => Self::goodbye(),
                _ => self.options(),
            },
        }
    }

    /// The options again, after a greeting was recorded.
    pub(crate) fn options(&mut self) -> Said {
        self.state = State::Options;
        Said::say(&["vm-options"])
    }

    fn pin_key(&mut self, key: char) -> Said {
        if key != '#' {
            if self.typed.len() < PIN_DIGITS {
                self.typed.push(key);
            }
            return Said::default();
        }
        let typed = std::mem::take(&mut self.typed);
        if self.pin.as_deref() == Some(typed.as_str()) {
            return self.welcome();
        }
        self.tries += 1;
        if self.tries >= PIN_TRIES {
            return Said::say(&["vm-incorrect"]).then(Self::goodbye());
        }
        Said::say(&["vm-incorrect", "vm-password"])
    }

    fn new_pin_key(&mut self, key: char) -> Said {
        if key != '#' {
            if self.typed.len() < PIN_DIGITS {
                self.typed.push(key);
            }
            return Said::default();
        }
        let pin = std::mem::take(&mut self.typed);
        if !valid_pin(&pin) {
            return Said::say(&["vm-invalid-password"]).then(self.options());
        }
        let mut said = Said::say(&["vm-passchanged"]).then(self.options());
        said.ops.push(MailboxOp::SetPin { pin });
        said
    }

    /// "You have N new and M old messages", then the main menu.
    fn welcome(&mut self) -> Said {
        let new = self
            .list
            .iter()
            .filter(|m| m.folder == Folder::Inbox)
            .count();
        let old = self.list.len() - new;
        let mut said = Said::say(&["vm-youhave"]);
        if new + old == 0 {
            said.prompts
                .extend(["vm-no", "vm-messages"].map(String::from));
        } else {
            said.prompts.extend(count(new, "vm-INBOX"));
            said.prompts.push("vm-and".into());
            said.prompts.extend(count(old, "vm-Old"));
        }
        said.then(self.main_menu())
    }

    fn main_menu(&mut self) -> Said {
        self.state = State::Main;
        Said::say(&["vm-instructions"])
    }

    fn message_menu(&mut self) -> Said {
        self.state = State::Message;
        Said::say(&["vm-msginstruct"])
    }

    fn goodbye() -> Said {
        Said {
            leave: true,
            ..Said::say(&["vm-goodbye"])
        }
    }

    fn record(g: Greeting, prompt: &str) -> Said {
        Said {
            record: Some(g),
            ..Said::say(&[prompt, "beep"])
        }
    }

    /// "Message N", the message, and the message menu; a new message is heard, so it is kept
    /// as an old one from now (moved before it is played: the shell runs the move before it
    /// reads the prompts asked for later).
    fn play(&mut self) -> Said {
        let Some(m) = self.list.get_mut(self.at) else {
            return Said::say(&["vm-no", "vm-messages"]).then(self.main_menu());
        };
        let mut said = Said::say(&["vm-message"]);
        said.prompts.extend(number(self.at as u64 + 1));
        if m.folder == Folder::Inbox {
            said.ops.push(MailboxOp::Save { id: m.id.clone() });
            m.folder = Folder::Old;
        }
        said.prompts.push(audio(&self.user, m));
        said.then(self.message_menu())
    }

    fn delete(&mut self) -> Said {
        if self.at >= self.list.len() {
            return self.main_menu();
        }
        let m = self.list.remove(self.at);
        let mut said = Said::say(&["vm-deleted"]);
        said.ops.push(MailboxOp::Delete { id: m.id });
        if self.at < self.list.len() {
            said.then(self.play())
        } else {
            self.at = self.at.saturating_sub(1);
            said.prompts.push("vm-nomore".into());
            said.then(self.main_menu())
        }
    }
}

/// "N new messages": the number, the folder's word, message or messages.
fn count(n: usize, folder: &str) -> Vec<String> {
    let mut v = number(n as u64);
    v.push(folder.into());
    v.push(if n == 1 { "vm-message" } else { "vm-messages" }.into());
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use store::voicemail::Meta;

    fn msg(id: &str, folder: Folder) -> Message {
        Message {
            id: id.into(),
            folder,
            meta: Meta {
                caller: "2001".into(),
                time: 1,
                duration_s: 2,
            },
        }
    }

    fn keys(m: &mut Menu, keys: &str) -> Said {
        keys.chars().fold(Said::default(), |s, k| s.then(m.key(k)))
    }

    fn boxed() -> Mailbox {
        Mailbox {
            new: vec![msg("a", Folder::Inbox)],
            old: vec![msg("b", Folder::Old)],
            ..Mailbox::default()
        }
    }

    #[test]
    fn a_wrong_pin_is_refused_three_times_then_the_caller_leaves() {
        let (mut m, said) = Menu::open("1001", Some("4711".into()), &boxed());
        assert_eq!(said.prompts, ["vm-password"]);
        assert_eq!(keys(&mut m, "1").prompts, Vec::<String>::new());
        let s = keys(&mut m, "#");
        assert_eq!(s.prompts, ["vm-incorrect", "vm-password"]);
        assert!(!keys(&mut m, "0000#").leave);
        let s = keys(&mut m, "9999#");
        assert!(s.leave, "the third wrong PIN sends the caller away");
        assert!(s.ops.is_empty());
    }

    #[test]
    fn the_right_pin_says_the_counts_and_plays_new_then_old() {
        let (mut m, _) = Menu::open("1001", Some("4711".into()), &boxed());
        let s = keys(&mut m, "4711#");
        assert_eq!(
            s.prompts[..9],
            [
                "vm-youhave",
                "digits/1",
                "vm-INBOX",
                "vm-message",
                "vm-and",
                "digits/1",
                "vm-Old",
                "vm-message",
                "vm-instructions"
            ]
        );
        let s = m.key('1');
        assert_eq!(
            s.prompts[..3],
            ["vm-message", "digits/1", "voicemail/1001/Old/a.wav"]
        );
        assert_eq!(
            s.ops,
            [MailboxOp::Save { id: "a".into() }],
            "a new message heard is kept as old"
        );
        let s = m.key('5');
        assert_eq!(
            s.prompts[2], "voicemail/1001/Old/a.wav",
            "the repeat finds it in Old"
        );
        assert!(s.ops.is_empty());
        let s = m.key('6');
        assert_eq!(
            s.prompts[..3],
            ["vm-message", "digits/2", "voicemail/1001/Old/b.wav"]
        );
        assert_eq!(m.key('6').prompts[0], "vm-nomore");
        assert_eq!(m.key('4').prompts[2], "voicemail/1001/Old/a.wav");
        let s = m.key('7');
        assert_eq!(s.ops, [MailboxOp::Delete { id: "a".into() }]);
        assert_eq!(
            s.prompts[..4],
            [
                "vm-deleted",
                "vm-message",
                "digits/1",
                "voicemail/1001/Old/b.wav"
            ]
        );
        let s = m.key('7');
        assert_eq!(s.ops, [MailboxOp::Delete { id: "b".into() }]);
        assert_eq!(s.prompts, ["vm-deleted", "vm-nomore", "vm-instructions"]);
        assert_eq!(m.key('1').prompts[..2], ["vm-no", "vm-messages"]);
        assert!(m.key('#').leave);
    }

    #[test]
    fn options_record_greetings_and_change_the_pin() {
        let (mut m, said) = Menu::open("1001", None, &Mailbox::default());
        assert_eq!(said.prompts[..3], ["vm-youhave", "vm-no", "vm-messages"]);
        assert_eq!(m.key('0').prompts, ["vm-options"]);
        let s = m.key('2');
        assert_eq!(
            (s.record, s.prompts),
            (
                Some(Greeting::Busy),
                vec!["vm-rec-busy".into(), "beep".into()]
            )
        );
        m.options();
        assert_eq!(m.key('5').prompts, ["vm-newpassword"]);
        let s = keys(&mut m, "12#");
        assert_eq!(s.prompts[0], "vm-invalid-password");
        assert!(s.ops.is_empty());
        m.key('5');
        let s = keys(&mut m, "2468#");
        assert_eq!(s.ops, [MailboxOp::SetPin { pin: "2468".into() }]);
        assert_eq!(s.prompts, ["vm-passchanged", "vm-options"]);
    }
}
