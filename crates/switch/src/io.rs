//! The engine's one way in and one way out, in the manner of str0m's `Rtc`: the shell hands it
//! an [`Input`] with the time, then takes [`Output`]s until [`Output::Timeout`] says when to
//! come back. Nothing answers synchronously: what the engine needs from the world (a store
//! lookup, a prompt file, a recording file) goes out as an [`Event`] with a token and comes
//! back as an input carrying that token; RTP ports come from a pool of bound ports the shell
//! keeps topped up ([`Input::MediaPorts`]).

use crate::registrar::{StoreOp, StoreResult};
use sip::transaction::{Peer, Wire};
use sip::Message;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The time an input happens at: the monotonic clock for timers, the wall clock for CDRs and
/// nonces. Both come from the shell; the engine reads no clock.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    pub now: Instant,
    pub wall: SystemTime,
}

impl Clock {
    pub fn new(now: Instant, wall: SystemTime) -> Clock {
        Clock { now, wall }
    }

    /// The wall time at `t`, a monotonic instant near this clock's.
    pub fn wall_at(&self, t: Instant) -> SystemTime {
        match t.checked_duration_since(self.now) {
            Some(d) => self.wall + d,
            None => self.wall - self.now.duration_since(t),
        }
    }

    /// Whole Unix seconds now.
    pub fn unix(&self) -> u64 {
        self.wall
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d: Duration| d.as_secs())
    }
}

/// Something that happened outside the engine.
pub enum Input<'a> {
    /// A SIP message from `peer` to our address `local`; `late`: it waited too long in its
    /// socket (a signalling backlog), so if it opens a new call it is refused with 503.
    Sip {
        msg: Message,
        peer: Peer,
        local: SocketAddr,
        late: bool,
    },
    /// A datagram larger than `sip.max_message_size`: 513 if it frames as a request.
    TooLarge { bytes: &'a [u8], peer: Peer },
    /// An RTP packet for media leg `leg` (its own socket, or found by its source on a shared one).
    Rtp {
        leg: usize,
        data: &'a [u8],
        src: SocketAddr,
    },
    Rtcp {
        leg: usize,
        data: &'a [u8],
        src: SocketAddr,
    },
    /// An RTP packet on shared port `port` from a source no leg there announced: dropped, and
    /// counted toward moving an unheard leg onto a pair of its own (`strays`).
    StrayRtp { port: u16, src: SocketAddr },
    /// `packets` of media leg `leg`'s RTP the kernel refused to send (send error): counted as
    /// such in its CDR instead of as sent, and logged (at most every 10 s).
    MediaSendFailed { leg: usize, packets: u32 },
    /// An IAX2 datagram (voice is relayed at once, signalling handled by [`Input::Process`]).
    Iax { from: SocketAddr, data: &'a [u8] },
    /// One of `phases` media passes per 20 ms frame interval, due on the shell's tick grid at
    /// `due` (see `media::Engine::tick_phase`).
    MediaTick {
        due: Instant,
        phase: usize,
        phases: usize,
    },
    /// Media events and IAX2 signalling gathered by earlier inputs, then runnable dialplan steps
    /// (the shell sends it after a batch of media or IAX2 inputs).
    Process,
    /// The deadline of the last [`Output::Timeout`] passed.
    Timeout,
    /// The result of an [`Event::Store`].
    Store { token: u64, result: StoreResult },
    /// The prompt an [`Event::Prompt`] asked for, decoded, or why it could not be read.
    Prompt {
        token: u64,
        result: Result<Arc<media::Prompt>, String>,
    },
    /// The file an [`Event::Recording`] asked for, or why it could not be created.
    Recording {
        token: u64,
        result: Result<Box<dyn media::RecordSink>, String>,
    },
    /// The answer to an [`Event::Resolve`]: the provider's servers in order, or why not.
    Resolved {
        token: u64,
        result: Result<crate::trunks::Resolved, String>,
    },
    /// The answer to an [`Event::Voicemail`]: the box as the operation left it, or why not.
    Voicemail {
        token: u64,
        user: String,
        result: Result<store::voicemail::Mailbox, String>,
    },
    /// A box as another worker's operation left it (its [`Input::Voicemail`]), or another node's
    /// (boxes in Redis), handed to every other worker so their subscriptions to the box are told.
    MailboxChanged {
        user: String,
        mailbox: store::voicemail::Mailbox,
    },
    /// Newly bound RTP port pairs (RTP on the even port, RTCP on the next), ready for legs.
    MediaPorts(&'a [u16]),
    /// An IAX2 peer registered from an address until an instant, or left (None): what some
    /// worker's [`Event::IaxPeer`] said, handed to every worker.
    IaxPeer {
        name: String,
        at: Option<(SocketAddr, Instant)>,
    },
    /// A trunk's server stopped answering (`down_until`: tried last until then) or answered
    /// again (None): what some worker's [`Event::TrunkServer`] said, handed to the others.
    TrunkServer {
        trunk: usize,
        server: Peer,
        down_until: Option<Instant>,
    },
    /// What was sent to `Peer` could not be delivered: a TCP connection that could not be made,
    /// or broke with bytes unsent. A trunk's REGISTER or INVITE waiting on it goes on to the
    /// provider's next server at once, as after a timeout; for a WebSocket peer, whose
    /// connection is gone, an INVITE waiting on it fails with 480.
    Unreachable(Peer),
    /// A source another worker banned (its `Event::Ban`): dropped here too until `until`.
    Ban {
        source: std::net::IpAddr,
        until: Instant,
    },
    /// Past capacity (the shell's media ticks run late): new calls are refused with 503.
    Overloaded(bool),
    /// A new configuration (reload.rs): the dialplan and settings change; calls go on.
    Reload(Arc<crate::Reload>),
    /// The process is draining before it stops: new calls (INVITEs outside a dialog) get 503
    /// with Retry-After, while calls in progress, REGISTERs and in-dialog requests are served.
    Drain,
    /// The process is stopping: hang up every call.
    Shutdown,
    /// A transfer message another worker's `Event::Crossing` sent here.
    Crossing(Box<crate::crossing::Crossing>),
    /// A control API command (control.rs); answered by an [`Event::Api`] with `token`.
    Api {
        token: u64,
        command: crate::control::Command,
    },
    /// The event types some event-stream client subscribes to (bits of `control::KINDS`): the
    /// engine makes [`Event::Notice`]s of those only.
    Watch(u8),
    /// An address-of-record's bindings were removed through the API (which told its clients):
    /// the contacts the engine watched will not expire.
    Unregistered(String),
}

/// What the engine asks of the shell.
pub enum Output<'a> {
    /// SIP bytes to send to `Peer`.
    Sip(Peer, Wire),
    /// An RTP or RTCP packet of a media leg (it borrows the engine's buffer: send it before the
    /// next poll).
    Media(media::Transmit<'a>),
    /// An IAX2 datagram.
    Iax(iax2::Transmit),
    Event(Event),
    /// Nothing more to do before this deadline or the next input.
    Timeout(Option<Instant>),
}

/// Side effects and requests, each handled by the shell.
#[derive(Debug)]
pub enum Event {
    /// Media leg `leg` takes the bound pair at `port`: one of its own, or (`shared`) a shared
    /// pair that many legs use, told apart by their far ends' addresses (`rtp.shared_ports`).
    /// `first`: the pair was spare until now (a shared pair starts being shared). `ip`: the
    /// address the pair is bound on, of the leg's family (a spare pair of the other family is
    /// bound again there at the same port).
    MediaOpen {
        leg: usize,
        port: u16,
        shared: bool,
        first: bool,
        ip: std::net::IpAddr,
    },
    /// Media leg `leg` ended: its own pair can be closed, or it leaves its shared pair.
    MediaClose { leg: usize },
    /// A location/credential store operation; answer with [`Input::Store`] and the token.
    /// (Boxed: the largest operation would make every output that large to move.)
    Store { token: u64, op: Box<StoreOp> },
    /// Resolve a trunk's host per RFC 3263 (NAPTR, SRV, A/AAAA), off the worker; answer with
    /// [`Input::Resolved`] and the token.
    Resolve {
        token: u64,
        query: crate::trunks::DnsQuery,
    },
    /// Load a prompt by name (`demo`, or a file relative to the data directory); `cache`: it
    /// is a configured prompt worth keeping. Answer with [`Input::Prompt`].
    Prompt {
        token: u64,
        name: String,
        cache: bool,
    },
    /// Create a recording file (relative to the data directory). Answer with
    /// [`Input::Recording`].
    Recording { token: u64, name: String },
    /// Run an operation on a user's voicemail box (`store::voicemail`); answer with
    /// [`Input::Voicemail`] and the token, and hand a box an operation changed to every other
    /// worker as [`Input::MailboxChanged`].
    Voicemail {
        token: u64,
        user: String,
        op: store::voicemail::MailboxOp,
    },
    /// Write a whole-call recording (relative to the data directory) from its blocks until
    /// their channel disconnects, off the worker; no answer. A write error is the shell's to log
    /// and to mark in `recording.status`.
    RecordCall {
        name: String,
        format: media::FileFormat,
        recording: media::CallRecording,
    },
    /// An IAX2 peer registered (or left, None): hand it to every worker as [`Input::IaxPeer`],
    /// this one included, so each finds the peer when a call dials it.
    IaxPeer {
        name: String,
        at: Option<(SocketAddr, Instant)>,
    },
    /// A trunk's server stopped answering, or answered again: hand it to every other worker as
    /// [`Input::TrunkServer`], so their calls skip a dead server at once.
    TrunkServer {
        trunk: usize,
        server: Peer,
        down_until: Option<Instant>,
    },
    /// One call detail record (JSON, no newline), to append to the CDR log.
    Cdr(String),
    /// A request that failed authentication (or was refused as an attack): one line of the
    /// security log, which intrusion-prevention tools (fail2ban) read.
    Security {
        source: std::net::IpAddr,
        user: String,
        reason: &'static str,
    },
    /// A source banned for `seconds` (until `until`) for `reason` (`switch::guard`): hand it
    /// to every other worker as [`Input::Ban`], close its TCP connections, and write a line of
    /// the security log.
    Ban {
        source: std::net::IpAddr,
        until: Instant,
        seconds: u64,
        reason: &'static str,
    },
    /// A known scanner's request was dropped (the first from its source in a while): a line of
    /// the security log.
    Scanner {
        source: std::net::IpAddr,
        user_agent: String,
    },
    /// The TCP peer at this address authenticated (a REGISTER or an authenticated request
    /// succeeded): its connection is kept past `security.tcp_unauthenticated_s`.
    TcpAuthenticated { peer: SocketAddr },
    /// Something an operator should see; the text names the cause and the fix.
    Log {
        level: Level,
        call_id: Option<String>,
        message: String,
    },
    /// Replace a small state file in the data directory that commands outside the process read
    /// (`strowger show peers`).
    State {
        name: &'static str,
        contents: String,
    },
    /// A new call that must run on another worker (handoff.rs): post it to that worker's
    /// inbox as the SIP input it is. Nothing was answered or kept here, and its Call-ID is
    /// pinned there, so its retransmissions and what follows go there too.
    HandOff(Box<HandOff>),
    /// A transfer message for worker `Crossing::worker` (crossing.rs): post it to that worker's
    /// inbox, to be given to its engine as `Input::Crossing`.
    Crossing(Box<crate::crossing::Crossing>),
    /// The answer to an [`Input::Api`]: hand it to the API thread that asked.
    Api {
        token: u64,
        reply: crate::control::Reply,
    },
    /// Something for the event stream's clients (made only while [`Input::Watch`] is on).
    Notice(crate::control::Notice),
}

/// A SIP message for worker `worker`, as `Input::Sip` would have brought it there.
#[derive(Debug)]
pub struct HandOff {
    pub worker: usize,
    pub msg: Message,
    pub peer: Peer,
    pub local: SocketAddr,
    pub late: bool,
}

/// How much a log event matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Error,
    Warn,
    Info,
    Debug,
}
