//! Dialplan steps: the typed apps the call engine runs, and their one-line syntax
//! `APP [VALUE] [KEY=VALUE ...]`, e.g. `playback demo loop=true`, `hangup user_busy`.
//! A value with spaces is written in double quotes: `set greeting="hello world"`.

use std::time::Duration;

use super::cause::Cause;
use super::cond::{Expr, TimeSpec};
use super::groups::{Strategy, Turn};

/// One dialplan step, with variables already expanded.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// 200 OK (media starts).
    Answer,
    /// 180 Ringing.
    Ringing,
    /// 183 Session Progress with SDP: early media before answer.
    Progress,
    Playback {
        audio: Audio,
        looped: bool,
        /// Play the prompt encoded once for every call (true), or transcode it for
        /// this call as it plays (false: what a switch without a prompt cache pays).
        cache: bool,
    },
    /// Plays until `duration` elapses or, without one, until the call ends.
    Tone {
        tone: Tone,
        duration: Option<Duration>,
    },
    /// Returns the caller's audio until the call ends.
    Echo,
    /// Music on hold from `class` (default: the call's `MOH` variable, else `default`) until
    /// the call ends.
    Music {
        class: Option<String>,
    },
    /// Records the caller to a WAV file (relative to the data directory) until `#`,
    /// hangup or `max`; then the next step runs.
    Record {
        file: String,
        max: Duration,
    },
    /// Records the whole call in the background (call_recording.rs) to `file` (relative to the
    /// data directory) until it ends; the next step runs at once.
    RecordCall {
        file: String,
        mix: media::Mix,
        format: media::FileFormat,
    },
    /// Calls `uri` as a B-leg, relaying its early media; gives up after `timeout`. Several
    /// targets joined by `&`, or `group/NAME`, are a ring group rung by `strategy`, each
    /// member for `member_timeout` at most (None: the group's, or the whole `timeout`).
    Bridge {
        uri: String,
        timeout: Duration,
        strategy: Option<Strategy>,
        member_timeout: Option<Duration>,
        /// Where a round-robin of this step's `&` list starts next.
        turn: Turn,
    },
    Wait {
        duration: Duration,
    },
    /// Sets a variable for the steps that follow (and any context reached by goto).
    Set {
        name: String,
        value: String,
    },
    /// BYE when answered, else the cause's SIP status (see [`Cause::sip_status`]).
    Hangup {
        cause: Cause,
    },
    /// Continues with the first matching rule of another context, for `exten` (None: the
    /// call's `EXTEN`); with conditions, only when all hold, else the next step runs.
    Goto {
        context: String,
        exten: Option<String>,
        cond: Option<Expr>,
        time: Option<TimeSpec>,
    },
    /// Sets (`target` Some) or clears the calling user's forwarding of `kind` (None: every
    /// kind), kept in the store.
    Forward {
        kind: Option<store::Forward>,
        target: Option<String>,
    },
    /// Parks the caller in the first free slot of `lot` (parking.rs).
    Park {
        lot: String,
    },
    /// Connects the caller to the call parked in `slot` (the dialled extension by default).
    Retrieve {
        slot: String,
    },
    /// Connects the caller to a call ringing user `exten`, or without one to a call ringing
    /// a member of the caller's pickup groups (pickup.rs).
    Pickup {
        exten: Option<String>,
    },
    /// Waits in a call queue (queues.rs) until an agent answers; on max wait the program goes
    /// on with QUEUESTATUS set.
    Queue {
        queue: String,
    },
    /// The caller's user joins the queue as an agent.
    QueueLogin {
        queue: String,
    },
    /// The caller's user leaves the queue.
    QueueLogout {
        queue: String,
    },
    /// Plays a prompt that the caller's first digit stops; the digits typed are kept for the
    /// next `read` or `menu` (ivr.rs).
    Background {
        file: String,
    },
    /// Collects the caller's digits into variable `var`: ends on `max` digits (None: no
    /// limit), on `terminator` (not kept), or when `timeout` passes without a digit. `prompt`
    /// plays first unless digits were typed ahead, and a digit stops it.
    Read {
        var: String,
        max: Option<usize>,
        timeout: Duration,
        terminator: Option<char>,
        prompt: Option<String>,
    },
    /// Speaks `value` from the sound set (`[sounds] dir`), or as text through the speech
    /// engine (`[sounds] tts`).
    Say {
        kind: SayAs,
        value: String,
    },
    /// Runs the voice menu `[menus.NAME]` (ivr.rs).
    Menu {
        name: String,
    },
    /// Leaves a message in `user`'s voicemail box after its `greeting` (voicemail.rs).
    Voicemail {
        user: String,
        greeting: store::voicemail::Greeting,
    },
    /// The voicemail menu of `user`'s box (None: the caller's own).
    VoicemailMain {
        user: Option<String>,
    },
    /// Joins conference room `room` (conference.rs), after its PIN if it has one; when the
    /// room is full or locked, or the PIN is not given, the program goes on with CONFSTATUS set.
    Conference {
        room: String,
    },
}

/// How `say` speaks its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SayAs {
    /// Digit by digit: 1234 is "one two three four".
    Digits,
    /// As a number: 1234 is "one thousand two hundred thirty four".
    Number,
    /// Letter by letter (digits as digits).
    Alpha,
    /// Through the speech engine.
    Text,
}

impl SayAs {
    const NAMES: [(&'static str, SayAs); 4] = [
        ("digits", SayAs::Digits),
        ("number", SayAs::Number),
        ("alpha", SayAs::Alpha),
        ("text", SayAs::Text),
    ];
}

/// What `playback` plays.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Audio {
    /// The announcement built into the binary, written `demo`.
    Demo,
    /// A WAV file, relative to the data directory unless absolute.
    File(String),
}

/// A call-progress tone: frequencies summed, played with an on/off cadence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tone {
    pub freqs_hz: Vec<u16>,
    /// Alternating on, off, on, off ... durations; empty plays continuously.
    pub cadence: Vec<Duration>,
}

/// North American precise tones (ANSI T1.401): name, frequencies, cadence in ms.
const TONES: [(&str, &[u16], &[u64]); 4] = [
    ("dial", &[350, 440], &[]),
    ("ringback", &[440, 480], &[2000, 4000]),
    ("busy", &[480, 620], &[500, 500]),
    ("congestion", &[480, 620], &[250, 250]),
];

/// App name, the key its bare value stands for, and its other keys.
const APPS: [(&str, Option<&str>, &[&str]); 28] = [
    ("answer", None, &[]),
    ("ringing", None, &[]),
    ("progress", None, &[]),
    ("playback", Some("file"), &["loop", "cache"]),
    ("tone", Some("tone"), &["cadence", "duration"]),
    ("echo", None, &[]),
    ("moh", Some("class"), &[]),
    ("record", Some("file"), &["max"]),
    (
        "bridge",
        Some("uri"),
        &["timeout", "strategy", "member_timeout"],
    ),
    ("wait", Some("seconds"), &[]),
    ("set", None, &[]),
    ("hangup", Some("cause"), &[]),
    ("goto", Some("context"), &["exten", "if", "time"]),
    ("forward", None, &[]),
    ("park", Some("lot"), &[]),
    ("retrieve", Some("slot"), &[]),
    ("pickup", Some("exten"), &[]),
    ("queue", Some("queue"), &[]),
    ("queue_login", Some("queue"), &[]),
    ("queue_logout", Some("queue"), &[]),
    ("background", Some("file"), &[]),
    (
        "read",
        Some("var"),
        &["digits", "timeout", "terminator", "prompt"],
    ),
    ("say", None, &[]),
    ("menu", Some("menu"), &[]),
    ("voicemail", None, &[]),
    ("voicemail_main", Some("user"), &[]),
    ("conference", Some("room"), &[]),
    ("record-call", Some("file"), &["mix", "format"]),
];

/// `read`'s defaults: the seconds it waits for each digit, and the digit that ends it.
const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(5);
const DEFAULT_TERMINATOR: char = '#';

const DEFAULT_RECORD_MAX: Duration = Duration::from_secs(60);
const DEFAULT_BRIDGE_TIMEOUT: Duration = Duration::from_secs(60);
/// The most digits one `read` collects.
pub(crate) const MAX_READ_DIGITS: usize = 64;
/// Longest duration any step accepts: a day.
const MAX_SECONDS: f64 = 86_400.0;

/// A syntax error `offset` bytes into the step text.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct StepError {
    pub offset: usize,
    pub message: String,
}

impl Step {
    /// Whether the step reads the caller's digits (and so needs them from tones of a caller
    /// that sends them no other way).
    pub fn reads_digits(&self) -> bool {
        matches!(
            self,
            Step::Record { .. }
                | Step::Background { .. }
                | Step::Read { .. }
                | Step::Menu { .. }
                | Step::Voicemail { .. }
                | Step::VoicemailMain { .. }
                | Step::Conference { .. }
        )
    }

    /// Parses one step. Variables stay unexpanded in `file`, `uri` and `set` values;
    /// everything else must be literal so it can be checked here.
    pub(crate) fn parse(text: &str) -> Result<Step, StepError> {
        let mut tokens = tokenize(text)?.into_iter();
        let Some((_, app)) = tokens.next() else {
            return Err(error(
                0,
                format!("empty step — known apps: {}", app_names()),
            ));
        };
        let Some(&(_, bare_key, keys)) = APPS.iter().find(|(name, ..)| *name == app) else {
            return Err(error(
                0,
                format!("unknown app {app:?} — known apps: {}", app_names()),
            ));
        };
        if app == "forward" {
            return forward(tokens.collect(), text.len());
        }
        if app == "say" {
            return say(tokens.collect(), text.len());
        }
        if app == "voicemail" {
            return voicemail(tokens.collect(), text.len());
        }
        let mut args = Args {
            app: app.clone(),
            end: text.len(),
            given: Vec::new(),
        };
        for (offset, token) in tokens {
            let (key, value) = match split_key(&token) {
                Some((key, value)) => (key.to_owned(), value.to_owned()),
                None => match bare_key {
                    Some(key) if args.given.iter().all(|(k, ..)| k != key) => {
                        (key.to_owned(), token)
                    }
                    _ => {
                        return Err(error(
                            offset,
                            format!("unexpected {token:?} — {}", usage(&app)),
                        ))
                    }
                },
            };
            let known = app == "set" || bare_key == Some(&key) || keys.contains(&key.as_str());
            if !known || args.given.iter().any(|(k, ..)| *k == key) {
                let why = if known {
                    "given twice"
                } else {
                    "unknown option"
                };
                return Err(error(offset, format!("{why} {key:?} — {}", usage(&app))));
            }
            args.given.push((key, offset, value));
        }
        args.build()
    }

    /// This step with `${name}` references replaced by `lookup`.
    pub(crate) fn expand<'a>(&self, lookup: impl Fn(&str) -> Option<&'a str>) -> Step {
        let expand = |template: &str| super::vars::expand(template, &lookup);
        match self {
            Step::Playback {
                audio: Audio::File(file),
                looped,
                cache,
            } => Step::Playback {
                audio: Audio::named(expand(file)),
                looped: *looped,
                cache: *cache,
            },
            Step::Record { file, max } => Step::Record {
                file: expand(file),
                max: *max,
            },
            Step::RecordCall { file, mix, format } => Step::RecordCall {
                file: expand(file),
                mix: *mix,
                format: *format,
            },
            Step::Bridge {
                uri,
                timeout,
                strategy,
                member_timeout,
                turn,
            } => Step::Bridge {
                uri: expand(uri),
                timeout: *timeout,
                strategy: *strategy,
                member_timeout: *member_timeout,
                turn: turn.clone(),
            },
            Step::Goto {
                context,
                exten,
                cond,
                time,
            } => Step::Goto {
                context: context.clone(),
                exten: exten.as_deref().map(expand),
                cond: cond.as_ref().map(|c| c.expand(expand)),
                time: time.clone(),
            },
            Step::Forward { kind, target } => Step::Forward {
                kind: *kind,
                target: target.as_deref().map(expand),
            },
            Step::Music { class } => Step::Music {
                class: class.as_deref().map(expand),
            },
            Step::Set { name, value } => Step::Set {
                name: name.clone(),
                value: expand(value),
            },
            Step::Retrieve { slot } => Step::Retrieve { slot: expand(slot) },
            Step::Voicemail { user, greeting } => Step::Voicemail {
                user: expand(user),
                greeting: *greeting,
            },
            Step::VoicemailMain { user: Some(u) } => Step::VoicemailMain {
                user: Some(expand(u)),
            },
            Step::Conference { room } => Step::Conference { room: expand(room) },
            Step::Pickup { exten: Some(e) } => Step::Pickup {
                exten: Some(expand(e)).filter(|e| !e.is_empty()),
            },
            Step::Background { file } => Step::Background { file: expand(file) },
            Step::Read {
                var,
                max,
                timeout,
                terminator,
                prompt,
            } => Step::Read {
                var: var.clone(),
                max: *max,
                timeout: *timeout,
                terminator: *terminator,
                prompt: prompt.as_deref().map(expand),
            },
            Step::Say { kind, value } => Step::Say {
                kind: *kind,
                value: expand(value),
            },
            other => other.clone(),
        }
    }
}

impl Audio {
    fn named(name: String) -> Audio {
        if name == "demo" {
            Audio::Demo
        } else {
            Audio::File(name)
        }
    }
}

impl Tone {
    fn parse(name: &str) -> Result<Tone, String> {
        if let Some((_, freqs, cadence)) = TONES.iter().find(|(n, ..)| *n == name) {
            return Ok(Tone {
                freqs_hz: freqs.to_vec(),
                cadence: cadence
                    .iter()
                    .map(|ms| Duration::from_millis(*ms))
                    .collect(),
            });
        }
        let freqs: Option<Vec<u16>> = name
            .split('+')
            .map(|f| f.parse().ok().filter(|hz| (20..=4000).contains(hz)))
            .collect();
        freqs.map(|freqs_hz| Tone { freqs_hz, cadence: Vec::new() }).ok_or_else(|| {
            let names: Vec<_> = TONES.iter().map(|(n, ..)| *n).collect();
            format!(
                "unknown tone {name:?} — expected {} or frequencies 20-4000 Hz joined by +, e.g. 350+440",
                names.join(", ")
            )
        })
    }
}

/// The arguments of one step, keyed by name, with their offsets in the step text.
struct Args {
    app: String,
    end: usize,
    given: Vec<(String, usize, String)>,
}

impl Args {
    fn take(&mut self, key: &str) -> Option<(usize, String)> {
        let i = self.given.iter().position(|(k, ..)| k == key)?;
        let (_, offset, value) = self.given.remove(i);
        Some((offset, value))
    }

    fn required(&mut self, key: &str) -> Result<String, StepError> {
        self.take(key)
            .map(|(_, v)| v)
            .ok_or_else(|| error(self.end, format!("missing {key} — {}", usage(&self.app))))
    }

    /// The value under `key` converted by `convert`, or `default` when absent.
    fn optional<T>(
        &mut self,
        key: &str,
        default: T,
        convert: impl Fn(&str) -> Result<T, String>,
    ) -> Result<T, StepError> {
        match self.take(key) {
            Some((offset, value)) => {
                convert(&value).map_err(|m| error(offset, format!("{key}: {m}")))
            }
            None => Ok(default),
        }
    }

    fn converted<T>(
        &mut self,
        key: &str,
        convert: impl Fn(&str) -> Result<T, String>,
    ) -> Result<T, StepError> {
        let offset = self
            .given
            .iter()
            .find(|(k, ..)| k == key)
            .map_or(self.end, |(_, o, _)| *o);
        let value = self.required(key)?;
        convert(&value).map_err(|m| error(offset, format!("{key}: {m}")))
    }

    fn build(mut self) -> Result<Step, StepError> {
        Ok(match self.app.as_str() {
            "answer" => Step::Answer,
            "ringing" => Step::Ringing,
            "progress" => Step::Progress,
            "echo" => Step::Echo,
            "moh" => Step::Music {
                class: self.take("class").map(|(_, v)| v),
            },
            "playback" => Step::Playback {
                audio: Audio::named(self.required("file")?),
                looped: self.optional("loop", false, boolean)?,
                cache: self.optional("cache", true, boolean)?,
            },
            "tone" => {
                let mut tone = self.converted("tone", Tone::parse)?;
                if let Some(cadence) = self.optional("cadence", None, |v| cadence(v).map(Some))? {
                    tone.cadence = cadence;
                }
                Step::Tone {
                    tone,
                    duration: self.optional("duration", None, |v| seconds(v).map(Some))?,
                }
            }
            "record" => Step::Record {
                file: self.required("file")?,
                max: self.optional("max", DEFAULT_RECORD_MAX, seconds)?,
            },
            "record-call" => Step::RecordCall {
                file: self.required("file")?,
                mix: self.optional("mix", media::Mix::Mono, crate::call_recording::parse_mix)?,
                format: self.optional(
                    "format",
                    media::FileFormat::Wav,
                    crate::call_recording::parse_format,
                )?,
            },
            "bridge" => Step::Bridge {
                uri: self.required("uri")?,
                timeout: self.optional("timeout", DEFAULT_BRIDGE_TIMEOUT, seconds)?,
                strategy: self.optional("strategy", None, |v| Strategy::parse(v).map(Some))?,
                member_timeout: self.optional("member_timeout", None, |v| seconds(v).map(Some))?,
                turn: Turn::default(),
            },
            "wait" => Step::Wait {
                duration: self.converted("seconds", seconds)?,
            },
            "set" => match self.given.pop() {
                Some((name, _, value)) if self.given.is_empty() => Step::Set { name, value },
                Some((_, offset, _)) => {
                    return Err(error(
                        offset,
                        format!("set takes one NAME=VALUE — {}", usage("set")),
                    ))
                }
                None => {
                    return Err(error(
                        self.end,
                        format!("missing NAME=VALUE — {}", usage("set")),
                    ))
                }
            },
            "hangup" => Step::Hangup {
                cause: self.optional("cause", Cause::NORMAL_CLEARING, |v| {
                    Cause::parse(v).ok_or_else(|| {
                        format!(
                            "unknown cause {v:?} — expected a Q.850 number or one of {}",
                            Cause::names().collect::<Vec<_>>().join(", ")
                        )
                    })
                })?,
            },
            "park" => Step::Park {
                lot: self.optional("lot", crate::config::DEFAULT_LOT.to_string(), |v| {
                    Ok(v.to_string())
                })?,
            },
            "retrieve" => Step::Retrieve {
                slot: self.optional("slot", "${EXTEN}".to_string(), |v| Ok(v.to_string()))?,
            },
            "pickup" => Step::Pickup {
                exten: self.optional("exten", None, |v| Ok(Some(v.to_string())))?,
            },
            "queue" => Step::Queue {
                queue: self.required("queue")?,
            },
            "queue_login" => Step::QueueLogin {
                queue: self.required("queue")?,
            },
            "queue_logout" => Step::QueueLogout {
                queue: self.required("queue")?,
            },
            "background" => Step::Background {
                file: self.required("file")?,
            },
            "read" => Step::Read {
                var: self.converted("var", |v| {
                    identifier(v)
                        .then(|| v.to_string())
                        .ok_or_else(|| format!("{v:?} — expected a variable name"))
                })?,
                max: self.optional("digits", None, |v| {
                    v.parse()
                        .ok()
                        .filter(|n| (1..=MAX_READ_DIGITS).contains(n))
                        .map(Some)
                        .ok_or_else(|| format!("{v:?} — expected 1 to {MAX_READ_DIGITS}"))
                })?,
                timeout: self.optional("timeout", DEFAULT_READ_TIMEOUT, seconds)?,
                terminator: self.optional("terminator", Some(DEFAULT_TERMINATOR), |v| {
                    match v.chars().collect::<Vec<_>>()[..] {
                        _ if v == "none" => Ok(None),
                        [c] if "0123456789*#ABCD".contains(c) => Ok(Some(c)),
                        _ => Err(format!("{v:?} — expected one of 0-9 * # A-D, or none")),
                    }
                })?,
                prompt: self.take("prompt").map(|(_, v)| v),
            },
            "menu" => Step::Menu {
                name: self.required("menu")?,
            },
            "voicemail_main" => Step::VoicemailMain {
                user: self.take("user").map(|(_, v)| v),
            },
            "conference" => Step::Conference {
                room: self.required("room")?,
            },
            _ => Step::Goto {
                context: self.required("context")?,
                exten: self.take("exten").map(|(_, v)| v),
                cond: self.optional("if", None, |v| Expr::parse(v).map(Some))?,
                time: self.optional("time", None, |v| TimeSpec::parse(v).map(Some))?,
            },
        })
    }
}

/// `voicemail USER [busy|unavail]`: positional, as in Asterisk's `VoiceMail(USER,b|u)`.
fn voicemail(tokens: Vec<(usize, String)>, end: usize) -> Result<Step, StepError> {
    let mut it = tokens.into_iter();
    let Some((_, user)) = it.next() else {
        return Err(error(end, format!("missing USER — {}", usage("voicemail"))));
    };
    let greeting = match it.next() {
        None => store::voicemail::Greeting::Unavail,
        Some((offset, g)) => store::voicemail::Greeting::from_name(&g).ok_or_else(|| {
            error(
                offset,
                format!("unknown greeting {g:?} — {}", usage("voicemail")),
            )
        })?,
    };
    if let Some((offset, extra)) = it.next() {
        return Err(error(
            offset,
            format!("unexpected {extra:?} — {}", usage("voicemail")),
        ));
    }
    Ok(Step::Voicemail { user, greeting })
}

/// `forward set KIND NUMBER` / `forward clear KIND|all`: positional, unlike the other apps.
fn forward(tokens: Vec<(usize, String)>, end: usize) -> Result<Step, StepError> {
    let bad = |offset: usize, what: &str| error(offset, format!("{what} — {}", usage("forward")));
    let mut it = tokens.into_iter();
    let (offset, action) = it.next().ok_or_else(|| bad(end, "missing set or clear"))?;
    let set = match action.as_str() {
        "set" => true,
        "clear" => false,
        other => return Err(bad(offset, &format!("unexpected {other:?}"))),
    };
    let (offset, kind) = it.next().ok_or_else(|| bad(end, "missing the kind"))?;
    let kind = match store::Forward::from_name(&kind) {
        Some(k) => Some(k),
        None if kind == "all" && !set => None,
        None => return Err(bad(offset, &format!("unknown kind {kind:?}"))),
    };
    let target = match (set, it.next()) {
        (true, Some((offset, number))) if !number.contains("${") && !dialable(&number) => {
            return Err(bad(
                offset,
                &format!("{number:?} is not a number to forward to"),
            ))
        }
        (true, Some((_, number))) => Some(number),
        (true, None) => return Err(bad(end, "missing the NUMBER to forward to")),
        (false, None) => None,
        (false, Some((offset, extra))) => {
            return Err(bad(offset, &format!("unexpected {extra:?}")))
        }
    };
    if let Some((offset, extra)) = it.next() {
        return Err(bad(offset, &format!("unexpected {extra:?}")));
    }
    Ok(Step::Forward { kind, target })
}

/// `say digits|number|alpha|text VALUE`: positional, like `forward`.
fn say(tokens: Vec<(usize, String)>, end: usize) -> Result<Step, StepError> {
    let bad = |offset: usize, what: &str| error(offset, format!("{what} — {}", usage("say")));
    let mut it = tokens.into_iter();
    let (offset, kind) = it.next().ok_or_else(|| bad(end, "missing what to say"))?;
    let Some(&(_, kind)) = SayAs::NAMES.iter().find(|(n, _)| *n == kind) else {
        return Err(bad(offset, &format!("unexpected {kind:?}")));
    };
    let (offset, value) = it.next().ok_or_else(|| bad(end, "missing the VALUE"))?;
    let literal = !value.contains("${");
    if literal && kind == SayAs::Number && value.parse::<u64>().is_err() {
        return Err(bad(offset, &format!("{value:?} is not a number")));
    }
    if let Some((offset, extra)) = it.next() {
        return Err(bad(offset, &format!("unexpected {extra:?}")));
    }
    Ok(Step::Say { kind, value })
}

/// Whether `name` can name a variable: letters, digits and `_`, not starting with a digit.
fn identifier(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Whether `target` can be a forward target: what a phone can dial (digits, letters, `*#+._-`).
pub(crate) fn dialable(target: &str) -> bool {
    (1..=64).contains(&target.len())
        && target
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"*#+._-".contains(&b))
}

fn error(offset: usize, message: String) -> StepError {
    StepError { offset, message }
}

fn app_names() -> String {
    APPS.iter()
        .map(|(name, ..)| *name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A one-line reminder of an app's syntax, for error messages.
fn usage(app: &str) -> String {
    let example = match app {
        "playback" => "playback FILE|demo [loop=true] [cache=false]",
        "tone" => "tone ringback|busy|congestion|dial|HZ+HZ [cadence=MS,MS,...] [duration=S]",
        "record" => "record FILE [max=S]",
        "record-call" => "record-call FILE [mix=mono|stereo] [format=wav|opus]",
        "moh" => "moh [CLASS]",
        "bridge" => "bridge URI[&URI...]|group/NAME [timeout=S] [strategy=ringall|sequential|roundrobin] [member_timeout=S]",
        "wait" => "wait S",
        "set" => "set NAME=VALUE",
        "hangup" => "hangup [CAUSE]",
        "goto" => "goto CONTEXT [exten=EXT] [if=\"A = B\"] [time=\"mon-fri 09:00-17:30\"]",
        "forward" => "forward set always|busy|noanswer NUMBER, or forward clear always|busy|noanswer|all",
        "park" => "park [LOT]",
        "retrieve" => "retrieve [SLOT]",
        "pickup" => "pickup [EXTEN]",
        "voicemail" => "voicemail USER [busy|unavail]",
        "voicemail_main" => "voicemail_main [USER]",
        "queue" | "queue_login" | "queue_logout" => return format!("usage: {app} QUEUE"),
        "background" => "background FILE",
        "read" => "read VAR [digits=N] [timeout=S] [terminator=#|none] [prompt=FILE]",
        "say" => "say digits|number|alpha|text VALUE",
        "menu" => "menu NAME",
        "conference" => "conference ROOM",
        other => other,
    };
    format!("usage: {example}")
}

/// `key=value` when the text before `=` is an identifier; a URI such as
/// `sip:a@b;transport=tcp` is a bare value.
fn split_key(token: &str) -> Option<(&str, &str)> {
    let (key, value) = token.split_once('=')?;
    identifier(key).then_some((key, value))
}

/// Whitespace-separated tokens with their offsets; double quotes group and are removed.
fn tokenize(text: &str) -> Result<Vec<(usize, String)>, StepError> {
    let mut tokens = Vec::new();
    let mut current: Option<(usize, String)> = None;
    let mut quote = None;
    for (i, c) in text.char_indices() {
        match (c, quote) {
            ('"', None) => quote = Some(i),
            ('"', Some(_)) => quote = None,
            (c, None) if c.is_whitespace() => {
                tokens.extend(current.take());
                continue;
            }
            _ => {}
        }
        let (_, token) = current.get_or_insert_with(|| (i, String::new()));
        if c != '"' {
            token.push(c);
        }
    }
    if let Some(offset) = quote {
        return Err(error(offset, "unterminated quote".into()));
    }
    tokens.extend(current);
    Ok(tokens)
}

fn boolean(v: &str) -> Result<bool, String> {
    v.parse()
        .map_err(|_| format!("{v:?} — expected true or false"))
}

fn seconds(v: &str) -> Result<Duration, String> {
    v.parse::<f64>()
        .ok()
        .filter(|s| *s > 0.0 && *s <= MAX_SECONDS)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("{v:?} — expected seconds, more than 0 and at most {MAX_SECONDS}"))
}

fn cadence(v: &str) -> Result<Vec<Duration>, String> {
    v.split(',')
        .map(|ms| {
            ms.parse()
                .ok()
                .filter(|ms| (1..=60_000).contains(ms))
                .map(Duration::from_millis)
        })
        .collect::<Option<_>>()
        .ok_or_else(|| format!("{v:?} — expected on,off,... milliseconds, e.g. 2000,4000"))
}
