//! Voicemail: the `voicemail USER [busy|unavail]` step leaves a message in a user's box, and
//! `voicemail_main [USER]` lets a user hear and manage the box by DTMF, with Asterisk's
//! VoiceMailMain keys. The boxes are kept by the shell (`Event::Voicemail`, `store::voicemail`);
//! this module holds each call's place in its box, and tells the message-waiting indication
//! (mwi.rs) of every box an answer shows.

mod menu;

use std::collections::VecDeque;
use std::time::{Duration, Instant, UNIX_EPOCH};

use rustc_hash::FxHashMap;
use store::voicemail::{Greeting, Mailbox, MailboxOp, Meta};

use crate::call::{Call, LegRef, Wait};
use crate::engine::Engine;
use crate::io::Event;
use menu::Menu;

/// Seconds a menu waits for a key before it says its choices again, and how often.
const KEY_TIMEOUT: Duration = Duration::from_secs(10);
const REPROMPTS: u8 = 3;

/// The calls in a box, and the box operations asked of the shell.
#[derive(Default)]
pub(crate) struct Voicemail {
    here: FxHashMap<usize, Visit>,
    asked: FxHashMap<u64, Asked>,
    next_token: u64,
}

/// An operation the shell runs; the call (with its generation) waits for it if it is `Some`.
struct Asked {
    call: Option<(usize, u64)>,
}

/// One call's place in one box.
struct Visit {
    gen: u64,
    user: String,
    /// Prompts (paths) still to play before what `stage` does next.
    prompts: VecDeque<String>,
    stage: Stage,
    /// Times the caller was asked for a key with no answer.
    unanswered: u8,
}

enum Stage {
    /// Leaving a message: the box's listing is asked for.
    Deposit(Greeting),
    /// The greeting plays; then the beep and the recording.
    Greeting,
    /// Recording the message to `file` since `since`; `until`: when its audio ended, if a run
    /// of silence ended it (the silence is not in it).
    Recording {
        file: String,
        since: Instant,
        until: Option<Instant>,
    },
    /// The box's listing is asked for, then the menu runs (`pin`: the one to ask).
    Opening { pin: Option<String> },
    /// The retrieval menu: its state machine (menu.rs).
    Menu(Box<Menu>),
    /// The menu's "record your greeting" plays, then the greeting is recorded (`recording`).
    NewGreeting {
        menu: Box<Menu>,
        greeting: Greeting,
        recording: bool,
    },
    /// The prompts end the visit; the program goes on.
    Leaving,
}

impl Engine {
    /// The `voicemail USER [busy|unavail]` step: answers, and asks for the box's listing (is it
    /// full, has the user a greeting of its own).
    pub(crate) fn voicemail_step(
        &mut self,
        call: usize,
        user: String,
        greeting: Greeting,
        now: Instant,
    ) {
        if !self.known_box(call, &user, now) || !self.answer(call, now) {
            return;
        }
        self.voicemail_open(call, user, Stage::Deposit(greeting));
    }

    /// The `voicemail_main [USER]` step: the caller's own box without USER; the PIN is asked
    /// unless the caller authenticated as the box's user and `voicemail.owner_skips_pin` is on.
    pub(crate) fn voicemail_main_step(&mut self, call: usize, user: Option<String>, now: Instant) {
        let caller = self
            .calls
            .get(call)
            .and_then(|c| c.user.as_ref())
            .map(|u| u.name.clone());
        let Some(user) = user.filter(|u| !u.is_empty()).or(caller.clone()) else {
            let why = "voicemail_main: no box named and the caller is not an authenticated user";
            self.warn_call(call, why.into());
            return self.hangup(call, 21, "switch", None, now);
        };
        if !self.known_box(call, &user, now) || !self.answer(call, now) {
            return;
        }
        let vm = &self.s.voicemail;
        let skip = vm.owner_skips_pin && caller.as_deref() == Some(user.as_str());
        let pin = (!skip).then(|| vm.mailboxes[&user].clone());
        self.voicemail_open(call, user, Stage::Opening { pin });
    }

    /// Whether `user` has a box (`[voicemail.mailboxes]`); a call to another is hung up.
    fn known_box(&mut self, call: usize, user: &str, now: Instant) -> bool {
        if self.s.voicemail.mailboxes.contains_key(user) {
            return true;
        }
        self.warn_call(
            call,
            format!("voicemail: user {user:?} has no box (add it to [voicemail.mailboxes] in the configuration)"),
        );
        self.hangup(call, 1, "switch", None, now);
        false
    }

    /// The call enters `user`'s box and waits for its listing.
    fn voicemail_open(&mut self, call: usize, user: String, stage: Stage) {
        let c = &mut self.calls[call];
        c.wait = Wait::Store;
        let s = Visit {
            gen: c.timer_gen,
            user: user.clone(),
            prompts: VecDeque::new(),
            stage,
            unanswered: 0,
        };
        self.voicemail.here.insert(call, s);
        self.ask_box(Some(call), &user, MailboxOp::List);
    }

    /// Asks the shell to run `op` on `user`'s box; `call` waits for the answer.
    pub(crate) fn ask_box(&mut self, call: Option<usize>, user: &str, op: MailboxOp) {
        let call = call.and_then(|c| Some((c, self.calls.get(c)?.timer_gen)));
        let vm = &mut self.voicemail;
        vm.next_token += 1;
        let token = vm.next_token;
        vm.asked.insert(token, Asked { call });
        self.events.push_back(Event::Voicemail {
            token,
            user: user.to_string(),
            op,
        });
    }

    /// The shell's answer to an `Event::Voicemail`.
    pub(crate) fn on_voicemail(
        &mut self,
        token: u64,
        user: String,
        result: Result<Mailbox, String>,
        now: Instant,
    ) {
        let asked = self.voicemail.asked.remove(&token).and_then(|a| a.call);
        let mailbox = match result {
            Ok(b) => b,
            Err(e) => {
                self.warn(format!("voicemail box {user}: {e}"));
                if let Some((call, _)) = asked {
                    self.hangup(call, 41, "switch", None, now);
                }
                return;
            }
        };
        self.mwi_box(&user, &mailbox, true, now);
        let Some((call, gen)) = asked else {
            return;
        };
        let waiting = self
            .calls
            .get(call)
            .is_some_and(|c| c.timer_gen == gen && c.wait == Wait::Store);
        let Some(s) = self.voicemail.here.get_mut(&call) else {
            return;
        };
        if s.gen != gen || !waiting {
            return;
        }
        let max = self.s.voicemail.max_messages;
        let said = match std::mem::replace(&mut s.stage, Stage::Leaving) {
            Stage::Deposit(_) if mailbox.new.len() + mailbox.old.len() >= max => {
                ["vm-mailboxfull", "vm-goodbye"].map(String::from).to_vec()
            }
            Stage::Deposit(g) => {
                s.stage = Stage::Greeting;
                let own = match g {
                    Greeting::Busy => mailbox.busy_greeting,
                    Greeting::Unavail => mailbox.unavail_greeting,
                };
                let mut said = Vec::new();
                if own {
                    said.push(store::voicemail::greeting_file(&s.user, g));
                } else {
                    said.push("vm-theperson".to_string());
                    said.extend(
                        s.user
                            .chars()
                            .filter(char::is_ascii_digit)
                            .map(|d| format!("digits/{d}")),
                    );
                    said.push(match g {
                        Greeting::Busy => "vm-isonphone".to_string(),
                        Greeting::Unavail => "vm-isunavail".to_string(),
                    });
                }
                said.extend(["vm-intro", "beep"].map(String::from));
                said
            }
            Stage::Opening { pin } => {
                let pin = pin.map(|configured| mailbox.pin.clone().unwrap_or(configured));
                let (menu, said) = Menu::open(&s.user, pin, &mailbox);
                s.stage = Stage::Menu(Box::new(menu));
                said.prompts
            }
            other => {
                s.stage = other;
                Vec::new()
            }
        };
        self.say(call, &said);
        self.calls[call].wait = Wait::None;
        self.calls.run_later(call);
        self.run_pending(now);
    }

    /// Queues prompts for the call: names in `voicemail.sounds_dir`, or files of a box.
    fn say(&mut self, call: usize, prompts: &[String]) {
        let sounds = self.s.voicemail.sounds_dir.trim_end_matches('/');
        let paths = prompts.iter().map(|p| match p.starts_with("voicemail/") {
            true => p.clone(),
            false => format!("{sounds}/{p}.wav"),
        });
        if let Some(s) = self.voicemail.here.get_mut(&call) {
            s.prompts.extend(paths);
        }
    }

    /// A call in a box: plays what is to be said, then does what its stage does next. False
    /// if the call is in no box (its program goes on).
    pub(crate) fn voicemail_run(&mut self, call: usize, now: Instant) -> bool {
        let gen = self.calls.get(call).map_or(0, |c| c.timer_gen);
        let Some(s) = self.voicemail.here.get_mut(&call) else {
            return false;
        };
        if s.gen != gen {
            self.voicemail.here.remove(&call);
            return false;
        }
        if let Some(p) = s.prompts.pop_front() {
            self.play_file(call, Call::CALLER, p, false, true);
            return true;
        }
        let tmp = |name: &str| {
            format!(
                "{}/tmp/{}.wav",
                store::voicemail::box_dir(&s.user),
                file_safe(name)
            )
        };
        let max = Duration::from_secs(self.s.voicemail.max_message_s);
        let end = self.s.voicemail.silence;
        match &mut s.stage {
            Stage::Greeting => {
                let file = tmp(self.calls[call].caller().call_id());
                s.stage = Stage::Recording {
                    file: file.clone(),
                    since: now,
                    until: None,
                };
                self.record(call, file, max, end);
            }
            Stage::Recording { .. } => {
                self.deposit(call, now);
                let s = self.voicemail.here.get_mut(&call).expect("found above");
                s.stage = Stage::Leaving;
                self.say(call, &["vm-msgsaved".to_string(), "vm-goodbye".to_string()]);
                self.calls.run_later(call);
            }
            Stage::NewGreeting {
                greeting,
                recording: recording @ false,
                ..
            } => {
                *recording = true;
                let file = tmp(greeting.name());
                self.record(call, file, max, end);
            }
            Stage::NewGreeting { .. } => {
                let Stage::NewGreeting {
                    mut menu, greeting, ..
                } = std::mem::replace(&mut s.stage, Stage::Leaving)
                else {
                    unreachable!("matched above")
                };
                let recording = tmp(greeting.name());
                let user = s.user.clone();
                let said = menu.options();
                s.stage = Stage::Menu(menu);
                self.ask_box(
                    None,
                    &user,
                    MailboxOp::SetGreeting {
                        greeting,
                        recording,
                    },
                );
                self.say(call, &said.prompts);
                self.calls.run_later(call);
            }
            Stage::Menu(_) if s.unanswered >= REPROMPTS => {
                s.stage = Stage::Leaving;
                self.say(call, &["vm-goodbye".to_string()]);
                self.calls.run_later(call);
            }
            Stage::Menu(_) => {
                s.unanswered += 1;
                let until = now + KEY_TIMEOUT;
                self.calls[call].wait = Wait::Timer(until);
                self.calls.arm(call, until);
            }
            Stage::Leaving => {
                self.voicemail.here.remove(&call);
                return false;
            }
            Stage::Deposit(_) | Stage::Opening { .. } => self.calls[call].wait = Wait::Store,
        }
        true
    }

    /// A digit of a call's caller: true if the menu took it (a recording's `#` is left to end
    /// it where every recording ends).
    pub(crate) fn voicemail_digit(&mut self, at: LegRef, digit: char) -> bool {
        let call = at.call;
        let Some(s) = self.voicemail.here.get_mut(&call) else {
            return false;
        };
        let c = &self.calls[call];
        if at.leg != Call::CALLER || s.gen != c.timer_gen {
            return false;
        }
        let listening = matches!(c.wait, Wait::Playback | Wait::File | Wait::Timer(_));
        let said = match &mut s.stage {
            // `#` skips a greeting to the beep.
            Stage::Greeting if digit == '#' && listening => {
                s.prompts.retain(|p| p.ends_with("/beep.wav"));
                self.interrupt(call);
                return true;
            }
            Stage::Menu(menu) if listening => menu.key(digit),
            Stage::Menu(_) => return true,
            _ => return false,
        };
        s.unanswered = 0;
        s.prompts.clear();
        let user = s.user.clone();
        for op in said.ops {
            self.ask_box(None, &user, op);
        }
        if said.leave || said.record.is_some() {
            let s = self.voicemail.here.get_mut(&call).expect("found above");
            let Stage::Menu(menu) = std::mem::replace(&mut s.stage, Stage::Leaving) else {
                unreachable!("matched above")
            };
            if let Some(greeting) = said.record {
                s.stage = Stage::NewGreeting {
                    menu,
                    greeting,
                    recording: false,
                };
            }
        }
        self.say(call, &said.prompts);
        self.interrupt(call);
        true
    }

    /// Stops what the caller hears and lets the visit go on at once.
    fn interrupt(&mut self, call: usize) {
        let c = &mut self.calls[call];
        if let Some(m) = c.caller().media {
            self.media.silence(m);
        }
        c.wait = Wait::None;
        self.calls.run_later(call);
    }

    /// Files the message the call is recording in its box (the call goes on, or has ended).
    fn deposit(&mut self, call: usize, now: Instant) {
        let Some(s) = self.voicemail.here.get(&call) else {
            return;
        };
        let Stage::Recording { file, since, until } = &s.stage else {
            return;
        };
        let until = until.unwrap_or(now);
        let caller = self
            .calls
            .get(call)
            .and_then(|c| c.vars.get("CALLER").map(str::to_string))
            .unwrap_or_default();
        let time = self.clock.wall_at(*since).duration_since(UNIX_EPOCH);
        let meta = Meta {
            caller,
            time: time.map_or(0, |d| d.as_secs()),
            duration_s: u32::try_from(until.saturating_duration_since(*since).as_secs())
                .unwrap_or(u32::MAX),
        };
        let op = MailboxOp::Deposit {
            recording: file.clone(),
            meta,
            max_messages: self.s.voicemail.max_messages,
        };
        let user = s.user.clone();
        self.ask_box(None, &user, op);
    }

    /// A run of silence ended the call's recording at `now`: a message's audio ended that long
    /// before.
    pub(crate) fn voicemail_silent(&mut self, call: usize, now: Instant) {
        let after = self.s.voicemail.silence.map_or(Duration::ZERO, |e| e.after);
        if let Some(Visit {
            stage: Stage::Recording { until, .. },
            ..
        }) = self.voicemail.here.get_mut(&call)
        {
            *until = Some(now.checked_sub(after).unwrap_or(now));
        }
    }

    /// A call ends: a message it was recording is kept (hanging up is how most callers end
    /// theirs).
    pub(crate) fn voicemail_ended(&mut self, call: usize, now: Instant) {
        self.deposit(call, now);
        self.voicemail.here.remove(&call);
    }
}

/// A Call-ID as a file name: what is not a letter, digit or `-` becomes `_`.
fn file_safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}
