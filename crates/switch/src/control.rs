//! The control API's side of the engine: commands in ([`Command`], by `Input::Api`), answers
//! out ([`Reply`], by `Event::Api`), and the notices the event stream carries ([`Notice`], by
//! `Event::Notice`), made only while the shell says someone listens (`Input::Watch`).
//!
//! A call is named by its caller's Call-ID: the same on every worker and in the CDR.

use crate::call::{Call, Leg, Role, Signal};
use crate::dialplan::Cause;
use crate::engine::Engine;
use crate::io::Event;
use serde::Serialize;
use std::time::Instant;

/// What the API asks of a worker's engine.
#[derive(Debug, Clone)]
pub enum Command {
    /// Every call of this worker ([`Reply::Calls`]).
    Calls,
    /// Hang up the call whose caller has this Call-ID with a Q.850 cause ([`Reply::Hangup`]).
    Hangup { call_id: String, cause: u8 },
    /// This worker's counters ([`Reply::Stats`]).
    Stats,
    /// Place a call (originate.rs), sent only to the worker its Call-ID hashes to
    /// ([`Reply::Originated`]).
    Originate(Box<crate::originate::Originate>),
    /// Act on the call whose caller has this Call-ID (call_commands.rs; [`Reply::Acted`]).
    Act {
        call_id: String,
        action: crate::call_commands::Action,
    },
}

/// A worker's answer to a [`Command`].
#[derive(Debug, Clone)]
pub enum Reply {
    Calls(Vec<CallInfo>),
    /// Whether this worker had the call (and so hung it up).
    Hangup(bool),
    Stats(WorkerStats),
    /// The call was placed (it rings FROM now), or why it cannot be.
    Originated(Result<(), crate::originate::Refused>),
    /// Done, or why not; None: this worker does not have the call.
    Acted(Option<Result<(), crate::originate::Refused>>),
}

/// A call as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct CallInfo {
    pub id: String,
    pub worker: usize,
    pub context: String,
    pub exten: String,
    pub from: String,
    pub to: String,
    pub user: Option<String>,
    /// "ringing" until the caller is answered, then "answered".
    pub state: &'static str,
    /// Unix seconds (millisecond precision).
    pub start: f64,
    pub answer: Option<f64>,
    pub duration_s: f64,
    pub legs: Vec<LegInfo>,
}

/// One leg of a call: who, how far it got, and its media so far.
#[derive(Debug, Clone, Serialize)]
pub struct LegInfo {
    pub call_id: String,
    /// "caller", "callee", "ringing" (a fork) or "transferor".
    pub role: &'static str,
    /// "in" (the far end called strowger) or "out".
    pub direction: &'static str,
    /// "ringing" or "up".
    pub state: &'static str,
    pub protocol: &'static str,
    pub peer: String,
    pub codec: Option<String>,
    pub rtp: Option<RtpInfo>,
}

/// A leg's media figures so far (`media::LegStats`).
#[derive(Debug, Clone, Serialize)]
pub struct RtpInfo {
    pub packets_sent: u64,
    pub bytes_sent: u64,
    pub packets_received: u64,
    pub bytes_received: u64,
    pub packets_lost: u64,
    pub jitter_ms: f64,
}

/// A worker's counters.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerStats {
    pub worker: usize,
    pub calls_active: usize,
    pub calls_started: u64,
    pub calls_rejected_busy: u64,
    pub requests_rejected: u64,
    pub overloaded: bool,
    /// SIP transactions by kind (`sip::transaction::Transactions::kinds`): which ones stay when
    /// the `sip_transactions` gauge does not return to 0 without calls.
    pub transactions: std::collections::BTreeMap<String, usize>,
}

/// The event stream's types (`?types=`), in the order of their bits in the mask the engine is
/// told (`Input::Watch`): a type nobody subscribes to costs the engine one branch, nothing more.
pub const KINDS: [&str; 5] = ["call", "dtmf", "registration", "peer", "overload"];
pub const CALL: u8 = 1;
pub const DTMF: u8 = 2;
pub const REGISTRATION: u8 = 4;
pub const PEER: u8 = 8;
pub const OVERLOAD: u8 = 16;

/// The bit of a type of [`KINDS`].
pub fn kind_bit(kind: &str) -> u8 {
    KINDS.iter().position(|k| *k == kind).map_or(0, |i| 1 << i)
}

/// Something the event stream tells its clients (with `type` and the time added by the shell).
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Notice {
    /// A call was admitted and its program starts.
    Created {
        call_id: String,
        from: String,
        to: String,
        context: String,
        exten: String,
    },
    /// The caller was told the call rings (180); or, for a call the API placed, one of FROM's
    /// contacts rings (`contact`).
    Ringing {
        call_id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        contact: Option<String>,
    },
    /// The caller was answered (200); or, for a call the API placed, FROM answered on
    /// `contact`.
    Answered {
        call_id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        contact: Option<String>,
    },
    /// A callee answered and the two are joined.
    Bridged { call_id: String, to: String },
    /// The call ended; `cdr` is its call detail record, serialised by the shell, not the worker.
    Ended {
        call_id: String,
        cause: u8,
        cdr: Box<crate::cdr::Cdr>,
    },
    /// A digit from the caller's or the callee's phone.
    Dtmf { call_id: String, digit: char },
    /// A contact was registered that was not (registration events: crate::reg_watch).
    Added {
        aor: String,
        contact: String,
        expires_in: u64,
    },
    /// A registered contact was registered again, for `expires_in` seconds from now.
    Refreshed {
        aor: String,
        contact: String,
        expires_in: u64,
    },
    /// A contact's registration lapsed with no refresh.
    Expired { aor: String, contact: String },
    /// A contact was unregistered (Expires: 0, or through the API).
    Removed { aor: String, contact: String },
    /// An IAX2 peer answered a POKE again, or stopped answering (made on a change only).
    Reachable {
        peer: String,
        reachable: bool,
        rtt_ms: Option<u64>,
    },
}

impl Notice {
    /// The stream a client subscribes to for it (`?types=`).
    pub fn kind(&self) -> &'static str {
        match self {
            Notice::Dtmf { .. } => "dtmf",
            Notice::Added { .. }
            | Notice::Refreshed { .. }
            | Notice::Expired { .. }
            | Notice::Removed { .. } => "registration",
            Notice::Reachable { .. } => "peer",
            _ => "call",
        }
    }
}

impl Engine {
    /// Runs an API command; its answer goes out as `Event::Api` with `token`.
    pub(crate) fn on_command(&mut self, token: u64, cmd: Command, now: Instant) {
        let reply = match cmd {
            Command::Calls => Reply::Calls(self.call_infos(now)),
            Command::Hangup { call_id, cause } => {
                let found = self.calls.leg_by_call_id(&call_id).map(|l| l.call);
                let found = found.filter(|&c| self.calls[c].caller().call_id() == call_id);
                if let Some(call) = found {
                    self.hangup(call, cause, "switch", None, now);
                }
                Reply::Hangup(found.is_some())
            }
            Command::Stats => Reply::Stats(WorkerStats {
                worker: self.s.worker,
                calls_active: self.calls.len(),
                calls_started: self.stats.calls_started,
                calls_rejected_busy: self.stats.calls_rejected_busy,
                requests_rejected: self.stats.requests_rejected,
                overloaded: self.overloaded,
                transactions: self.txs.kinds(),
            }),
            Command::Originate(o) => Reply::Originated(self.originate(*o, now)),
            Command::Act { call_id, action } => Reply::Acted(self.act(&call_id, action, now)),
        };
        self.events.push_back(Event::Api { token, reply });
    }

    fn call_infos(&self, now: Instant) -> Vec<CallInfo> {
        let wall = |t: Instant| crate::cdr::unix_seconds(self.clock.wall_at(t));
        self.calls
            .ids()
            .into_iter()
            .map(|id| {
                let c = &self.calls[id];
                CallInfo {
                    id: c.caller().call_id().to_string(),
                    worker: self.s.worker,
                    context: c.cdr.context.clone(),
                    exten: c.cdr.exten.clone(),
                    from: c.cdr.from.clone(),
                    to: c.cdr.to.clone(),
                    user: c.cdr.user.clone(),
                    state: if c.answered { "answered" } else { "ringing" },
                    start: wall(c.started),
                    answer: c.answered_at.map(wall),
                    duration_s: now.duration_since(c.started).as_secs_f64(),
                    legs: c.legs().map(|(_, l)| self.leg_info(c, l)).collect(),
                }
            })
            .collect()
    }

    fn leg_info(&self, c: &Call, l: &Leg) -> LegInfo {
        let stats = l.media.and_then(|m| self.media.stats(m));
        let caller = l.role == Role::Caller;
        // A caller without an INVITE of its own is one the API called (originate.rs).
        let inbound = caller && (c.invite.is_some() || l.iax().is_some());
        LegInfo {
            call_id: l.call_id().to_string(),
            role: match l.role {
                Role::Caller => "caller",
                Role::Callee => "callee",
                Role::Ringing => "ringing",
                Role::Transferor => "transferor",
            },
            direction: if inbound { "in" } else { "out" },
            state: match (caller, c.answered, l.confirmed) {
                (true, true, _) | (false, _, true) => "up",
                _ => "ringing",
            },
            protocol: match l.signal {
                Signal::Sip(_) => "sip",
                Signal::Iax { .. } => "iax2",
            },
            peer: l.peer_addr().to_string(),
            codec: l
                .negotiated
                .as_ref()
                .map(|n| n.codec.name.to_string())
                .or_else(|| stats.as_ref().map(|s| s.codec.to_string())),
            rtp: stats.map(|s| RtpInfo {
                packets_sent: s.packets_sent,
                bytes_sent: s.bytes_sent,
                packets_received: s.packets_received,
                bytes_received: s.bytes_received,
                packets_lost: s.packets_lost,
                jitter_ms: s.jitter_ms,
            }),
        }
    }

    /// Tells the event stream `notice`, of type `kind` (a bit of [`KINDS`]) — only while a client
    /// subscribes to it (`Input::Watch`), so nobody listening costs one branch.
    pub(crate) fn notice(&mut self, kind: u8, notice: impl FnOnce(&Engine) -> Option<Notice>) {
        if self.watched & kind != 0 {
            if let Some(n) = notice(self) {
                self.events.push_back(Event::Notice(n));
            }
        }
    }

    /// A new call's notice.
    pub(crate) fn created_notice(&mut self, call: usize) {
        self.notice(CALL, |e| {
            let c = e.calls.get(call)?;
            Some(Notice::Created {
                call_id: c.caller().call_id().to_string(),
                from: c.cdr.from.clone(),
                to: c.cdr.to.clone(),
                context: c.cdr.context.clone(),
                exten: c.cdr.exten.clone(),
            })
        });
    }

    /// A notice of type `kind` about call `call` made from its caller's Call-ID.
    pub(crate) fn call_notice(
        &mut self,
        call: usize,
        kind: u8,
        make: impl FnOnce(String) -> Notice,
    ) {
        self.notice(kind, |e| {
            let id = e.calls.get(call)?.caller().call_id().to_string();
            Some(make(id))
        });
    }
}

/// The cause an API client names: a Q.850 name or number (`Cause::parse`), or `normal`,
/// `busy`, `rejected`, `noanswer` for the common ones.
pub fn cause_named(name: &str) -> Option<u8> {
    let alias = match name {
        "normal" => Some(Cause::NORMAL_CLEARING.0),
        "busy" => Some(17),
        "rejected" => Some(21),
        "noanswer" => Some(19),
        _ => None,
    };
    alias.or_else(|| Cause::parse(name).map(|c| c.0))
}
