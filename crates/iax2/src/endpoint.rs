//! One IAX2 endpoint (RFC 5456), sans-IO: datagrams and the current `Instant` go in through
//! `handle` and `handle_timeout`; datagrams to send (`poll_transmit`), events (`poll_event`) and
//! the next deadline (`poll_timeout`) come out. Calls and registrations both ways, the reliable
//! full-frame layer, call tokens and trunking.

use crate::callno::{CallNumbers, Rng};
use crate::frame::{
    control, iax, set_retransmit_bit, Frame, FrameType, FullFrame, MiniFrame, TrunkBuilder,
};
use crate::ie::{self, IeBuilder, Ies};
use crate::md5::md5_result;
use crate::token::TokenIssuer;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;

/// Source call number of stateless replies (CALLTOKEN, PONG to POKE, REJECT over limit).
const STATELESS_CALL: u16 = 1;

/// The largest trunk frame sent (chan_iax2's default trunkmtu); more media goes in another.
pub const TRUNK_MTU: usize = 1240;

/// Size of our CALLTOKEN reply: header, IE header, token.
pub const CALLTOKEN_REPLY_LEN: usize = crate::frame::FULL_HEADER_LEN + 2 + crate::token::TOKEN_LEN;

#[derive(Clone, Debug)]
pub struct Config {
    /// Require the CALLTOKEN handshake before NEW or REGREQ sets up state (default on).
    pub call_tokens: bool,
    /// How long an issued call token is accepted.
    pub token_lifetime: Duration,
    /// Calls and registrations at once from one IP address (those it opened).
    pub max_calls_per_ip: usize,
    /// Where they are counted: shared by endpoints that share a port, so the limit holds for
    /// the process.
    pub address_counts: Arc<AddressCounts>,
    /// Addresses whose NEW or REGREQ without any CALLTOKEN element (clients older than call
    /// tokens) is let through; a request with the element still does the handshake.
    pub token_optional: Vec<IpAddr>,
    /// First retransmission interval of a full frame; doubles up to `retransmit_max`.
    pub retransmit_initial: Duration,
    pub retransmit_max: Duration,
    /// Retransmissions before giving up on the call.
    pub max_retransmits: u32,
    /// How long an ended call is kept to acknowledge retransmissions.
    pub linger: Duration,
    /// How long a released call number rests before reuse.
    pub callno_hold: Duration,
    /// Send mini-frame voice of all calls to one peer in meta trunk frames.
    pub trunk: bool,
    /// Trunk entries carry their own 16-bit timestamps.
    pub trunk_timestamps: bool,
    /// (count, index): this endpoint is one of `count` sharing a port (one per worker) and
    /// draws the call numbers n with n mod count = index; see `Endpoint::route`.
    pub callno_share: (u16, u16),
    /// How often queued trunk media is sent.
    pub trunk_interval: Duration,
    /// A registration client re-registers after this share of the granted refresh.
    pub register_retry: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            call_tokens: true,
            token_lifetime: Duration::from_secs(10),
            max_calls_per_ip: 2048,
            address_counts: Arc::default(),
            token_optional: Vec::new(),
            retransmit_initial: Duration::from_millis(500),
            retransmit_max: Duration::from_secs(4),
            max_retransmits: 4,
            linger: Duration::from_secs(3),
            callno_hold: Duration::from_secs(10),
            trunk: false,
            trunk_timestamps: true,
            callno_share: (1, 0),
            trunk_interval: Duration::from_millis(20),
            register_retry: Duration::from_secs(20),
        }
    }
}

/// Exchanges open per peer IP address. A lock is taken when a peer opens or ends one (a NEW
/// with a valid call token, its end), never per frame.
#[derive(Debug, Default)]
pub struct AddressCounts(Mutex<HashMap<IpAddr, usize>>);

impl AddressCounts {
    /// Counts one more for `ip` unless it has `max` already.
    fn try_take(&self, ip: IpAddr, max: usize) -> bool {
        let Ok(mut m) = self.0.lock() else {
            return false;
        };
        let n = m.entry(ip).or_insert(0);
        if *n >= max {
            return false;
        }
        *n += 1;
        true
    }

    fn give_back(&self, ip: IpAddr) {
        if let Ok(mut m) = self.0.lock() {
            if let Some(n) = m.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    m.remove(&ip);
                }
            }
        }
    }
}

/// A call (or a registration exchange) of this endpoint. Stale ids are ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CallId {
    callno: u16,
    gen: u32,
}

impl CallId {
    /// The local call number.
    pub fn number(self) -> u16 {
        self.callno
    }
}

/// A registration this endpoint keeps with a server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RegId(u64);

/// What a NEW asked for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallInfo {
    pub called_number: Option<String>,
    pub called_context: Option<String>,
    pub calling_number: Option<String>,
    pub calling_name: Option<String>,
    pub username: Option<String>,
    pub format: u32,
    pub capability: u32,
    pub version: Option<u16>,
}

/// Parameters of an outgoing call.
#[derive(Clone, Debug, Default)]
pub struct NewCall {
    pub called_number: String,
    pub called_context: Option<String>,
    pub calling_number: Option<String>,
    pub calling_name: Option<String>,
    pub username: Option<String>,
    /// Answers an MD5 AUTHREQ.
    pub secret: Option<String>,
    pub format: u32,
    pub capability: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndReason {
    /// The peer sent HANGUP.
    Hangup {
        cause: Option<String>,
        code: Option<u8>,
    },
    /// The peer sent REJECT (or REGREJ).
    Rejected {
        cause: Option<String>,
        code: Option<u8>,
    },
    /// A full frame was not acknowledged after every retransmission.
    Timeout,
    /// MD5 authentication failed (ours or the peer's).
    AuthFailed,
    /// The peer answered INVAL: it does not know the call.
    Invalid,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A NEW passed the call token check: answer with `authenticate`, `accept` or `reject`.
    Incoming {
        call: CallId,
        peer: SocketAddr,
        info: CallInfo,
    },
    /// A REGREQ (or, with `release`, a REGREL) passed the call token check: `authenticate`,
    /// `accept_registration` or `reject`.
    RegisterRequest {
        call: CallId,
        peer: SocketAddr,
        username: String,
        refresh: Option<u16>,
        release: bool,
    },
    /// The peer's MD5 answer (AUTHREP or REGREQ) matched.
    Authenticated {
        call: CallId,
    },
    Accepted {
        call: CallId,
        format: u32,
    },
    Ringing {
        call: CallId,
    },
    Answered {
        call: CallId,
    },
    Voice {
        call: CallId,
        ts: u32,
        format: u32,
        data: Vec<u8>,
    },
    Dtmf {
        call: CallId,
        digit: char,
        begin: bool,
    },
    /// Any other control frame (busy, congestion, hold, …).
    Control {
        call: CallId,
        subclass: u32,
    },
    /// PONG or LAGRP: the round trip of our PING, LAGRQ or POKE (a POKE's exchange then ends;
    /// if it is never answered, `Hangup` with `EndReason::Timeout` follows instead).
    Pong {
        call: CallId,
        rtt: Duration,
    },
    /// The call is over; its id is stale from now on.
    Hangup {
        call: CallId,
        reason: EndReason,
    },
    /// Our registration was acknowledged; it is refreshed before `refresh` seconds run out.
    Registered {
        reg: RegId,
        refresh: u16,
        apparent: Option<SocketAddr>,
    },
    /// Our registration was refused or timed out; it is tried again later.
    RegistrationFailed {
        reg: RegId,
        reason: EndReason,
    },
    /// The server acknowledged our REGREL: it no longer sends calls to us.
    Unregistered {
        reg: RegId,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    pub to: SocketAddr,
    pub bytes: Vec<u8>,
    /// Part of an exchange the peer opened (its NEW, REGREQ or REGREL) or a stateless reply:
    /// send it from the address the peer sent to. The rest (our calls, registrations, POKEs)
    /// may leave from another port, whose answers then come back there.
    pub inbound: bool,
}

/// Where a datagram read from a port shared by several endpoints belongs (`Endpoint::route`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// To the endpoint with this index (perhaps the reader itself).
    To(usize),
    /// A trunk frame carrying calls of several endpoints: one frame rebuilt for each.
    Split(Vec<(usize, Vec<u8>)>),
}

impl Role {
    fn inbound(self) -> bool {
        matches!(self, Role::CallIn | Role::RegIn)
    }
}

/// The endpoint of a frame that names no call number of ours: a stable hash of the peer's
/// address and call number, so the NEW and every later frame of the peer's call go to one
/// endpoint (the one whose number the NEW got).
fn spread(from: SocketAddr, src_call: u16, count: usize) -> usize {
    use std::hash::Hash;
    let mut h = std::hash::DefaultHasher::new();
    (from, src_call).hash(&mut h);
    (h.finish() % count as u64) as usize
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    UnknownCall,
    WrongState,
    NoCallNumber,
    Encoding,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Error::UnknownCall => "unknown or ended call",
            Error::WrongState => "not possible in the call's state",
            Error::NoCallNumber => "no free call number",
            Error::Encoding => "value cannot be encoded",
        })
    }
}

impl std::error::Error for Error {}

/// Counters for what was dropped or answered statelessly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub malformed: u64,
    pub unknown_call: u64,
    pub tokens_sent: u64,
    /// Requests too small to be answered with a CALLTOKEN without amplification.
    pub token_replies_suppressed: u64,
    pub over_limit: u64,
    pub retransmits: u64,
    pub duplicates: u64,
    pub out_of_order: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    CallOut,
    CallIn,
    RegOut(u64),
    /// Our REGREL of a registration that `unregister` ended.
    RegRel(u64),
    RegIn,
    /// Our POKE: the exchange ends with the PONG.
    Poke,
}

struct Pending {
    oseqno: u8,
    bytes: Vec<u8>,
    due: Instant,
    interval: Duration,
    tries: u32,
}

struct Call {
    gen: u32,
    role: Role,
    peer: SocketAddr,
    local: u16,
    remote: u16,
    start: Instant,
    oseqno: u8,
    iseqno: u8,
    last_ts: u32,
    pending: VecDeque<Pending>,
    /// The first request (subclass, IEs) to send again with a call token.
    first: Option<(u32, Vec<u8>)>,
    token_tries: u8,
    secret: Option<String>,
    challenge: Option<String>,
    username: Option<String>,
    refresh: u16,
    tx_format: u32,
    tx_voice_ts: Option<u32>,
    rx_format: u32,
    rx_voice_ts: u32,
    ended: bool,
    linger_until: Option<Instant>,
    armed: Option<Instant>,
    /// This call's mini-frame voice goes in trunk frames (also when `Config::trunk` is off).
    trunk: bool,
}

impl Call {
    fn elapsed_ms(&self, now: Instant) -> u32 {
        now.saturating_duration_since(self.start).as_millis() as u32
    }

    /// Timestamps of signalling frames rise strictly, so each names one frame.
    fn next_ts(&mut self, now: Instant) -> u32 {
        let t = self.elapsed_ms(now).max(self.last_ts.wrapping_add(1));
        self.last_ts = t;
        t
    }

    /// Drops every queued frame the peer has received (sequence numbers before `iseqno`).
    fn ack_upto(&mut self, iseqno: u8) {
        self.pending
            .retain(|p| !(1..=128).contains(&iseqno.wrapping_sub(p.oseqno)));
    }

    fn deadline(&self) -> Option<Instant> {
        let p = self.pending.iter().map(|p| p.due).min();
        match (p, self.linger_until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn id(&self) -> CallId {
        CallId {
            callno: self.local,
            gen: self.gen,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum TimerKey {
    Trunk,
    Call(u16, u32),
    Reg(u64),
}

#[derive(Default)]
struct Io {
    transmits: VecDeque<Transmit>,
    events: VecDeque<Event>,
    timers: BinaryHeap<Reverse<(Instant, TimerKey)>>,
}

impl Io {
    fn arm(&mut self, call: &mut Call, at: Option<Instant>) {
        if let Some(at) = at {
            if call.armed.is_none_or(|a| at < a) {
                call.armed = Some(at);
                self.timers
                    .push(Reverse((at, TimerKey::Call(call.local, call.gen))));
            }
        }
    }

    /// Sends a sequenced, acknowledged full frame on `call`.
    #[allow(clippy::too_many_arguments)]
    fn send_reliable(
        &mut self,
        cfg: &Config,
        call: &mut Call,
        ft: FrameType,
        subclass: u32,
        payload: &[u8],
        ts: Option<u32>,
        now: Instant,
    ) -> Result<(), Error> {
        let ts = match ts {
            Some(t) => t,
            None => call.next_ts(now),
        };
        let oseqno = call.oseqno;
        let bytes = FullFrame {
            src_call: call.local,
            dst_call: call.remote,
            retransmit: false,
            ts,
            oseqno,
            iseqno: call.iseqno,
            frame_type: ft,
            subclass,
            payload,
        }
        .to_vec()
        .map_err(|_| Error::Encoding)?;
        call.oseqno = call.oseqno.wrapping_add(1);
        self.transmits.push_back(Transmit {
            to: call.peer,
            bytes: bytes.clone(),
            inbound: call.role.inbound(),
        });
        let due = now + cfg.retransmit_initial;
        call.pending.push_back(Pending {
            oseqno,
            bytes,
            due,
            interval: cfg.retransmit_initial,
            tries: 0,
        });
        self.arm(call, Some(due));
        Ok(())
    }

    /// ACK, VNAK or INVAL: no sequence number of its own, never acknowledged.
    fn send_unsequenced(&mut self, call: &Call, subclass: u32, ts: u32) {
        let f = FullFrame {
            src_call: call.local,
            dst_call: call.remote,
            retransmit: false,
            ts,
            oseqno: call.oseqno,
            iseqno: call.iseqno,
            frame_type: FrameType::Iax,
            subclass,
            payload: &[],
        };
        if let Ok(bytes) = f.to_vec() {
            self.transmits.push_back(Transmit {
                to: call.peer,
                bytes,
                inbound: call.role.inbound(),
            });
        }
    }
}

struct RegClient {
    peer: SocketAddr,
    username: String,
    secret: String,
    refresh: u16,
    call: Option<u16>,
    due: Option<Instant>,
}

/// Random 64-bit values from the standard library's per-process SipHash keys (seeded from the
/// operating system), for the call token secret and the call number generator.
fn os_random() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0x1a2b);
    h.finish()
}

pub struct Endpoint {
    cfg: Config,
    epoch: Instant,
    rng: Rng,
    tokens: TokenIssuer,
    numbers: CallNumbers,
    calls: HashMap<u16, Call>,
    by_remote: HashMap<(SocketAddr, u16), u16>,
    regs: HashMap<u64, RegClient>,
    next_reg: u64,
    next_gen: u32,
    /// Queued trunk media by peer, and whether for calls it opened (they leave from the port
    /// it called; see `Transmit::inbound`).
    trunks: HashMap<(SocketAddr, bool), TrunkBuilder>,
    trunk_due: Option<Instant>,
    io: Io,
    stats: Stats,
}

impl Endpoint {
    /// An endpoint with a random token secret and call number sequence.
    pub fn new(cfg: Config, now: Instant) -> Endpoint {
        let mut secret = [0u8; 16];
        secret[..8].copy_from_slice(&os_random().to_le_bytes());
        secret[8..].copy_from_slice(&os_random().to_le_bytes());
        Endpoint::with_seed(cfg, secret, now)
    }

    /// An endpoint whose secret and call numbers come from `seed` (tests).
    pub fn with_seed(cfg: Config, seed: [u8; 16], now: Instant) -> Endpoint {
        let rng_seed = u64::from_le_bytes(seed[..8].try_into().unwrap_or([0; 8]))
            ^ u64::from_le_bytes(seed[8..].try_into().unwrap_or([0; 8])).rotate_left(17);
        Endpoint {
            tokens: TokenIssuer::new(seed, now, cfg.token_lifetime),
            numbers: CallNumbers::new(cfg.callno_hold, cfg.callno_share),
            cfg,
            epoch: now,
            rng: Rng::new(rng_seed),
            calls: HashMap::new(),
            by_remote: HashMap::new(),
            regs: HashMap::new(),
            next_reg: 1,
            next_gen: 1,
            trunks: HashMap::new(),
            trunk_due: None,
            io: Io::default(),
            stats: Stats::default(),
        }
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Calls and registration exchanges holding a call number (ended ones included while they
    /// linger).
    pub fn call_count(&self) -> usize {
        self.calls.len()
    }

    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.io.transmits.pop_front()
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.io.events.pop_front()
    }

    /// The earliest time `handle_timeout` has work (may be early, never late).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.io.timers.peek().map(|r| r.0 .0)
    }

    /// For the one endpoint that reads a port shared by `Config::callno_share`'s count: which
    /// endpoint `bytes` from `from` belong to. A full frame naming one of our call numbers goes
    /// to the endpoint that drew it; anything else (NEW, REGREQ, POKE, mini and trunk media)
    /// to this endpoint if it knows the peer's call number (the calls it placed from this
    /// port), else to `spread` of the peer's address and number: where the peer's NEW went.
    /// O(1) per frame (per entry of a trunk frame).
    pub fn route(&self, from: SocketAddr, bytes: &[u8]) -> Route {
        let (count, me) = (
            self.cfg.callno_share.0 as usize,
            self.cfg.callno_share.1 as usize,
        );
        if count <= 1 {
            return Route::To(me);
        }
        let by_peer = |src: u16| {
            if self.by_remote.contains_key(&(from, src)) {
                me
            } else {
                spread(from, src, count)
            }
        };
        match Frame::parse(bytes) {
            Ok(Frame::Full(f)) if f.dst_call > STATELESS_CALL => {
                Route::To(f.dst_call as usize % count)
            }
            Ok(Frame::Full(f)) => Route::To(by_peer(f.src_call)),
            Ok(Frame::Mini(m) | Frame::VideoMini(m)) => Route::To(by_peer(m.src_call)),
            Ok(Frame::Trunk(t)) => {
                let mut parts: Vec<(usize, TrunkBuilder)> = Vec::new();
                for e in t.entries() {
                    let w = by_peer(e.src_call);
                    let i = match parts.iter().position(|(o, _)| *o == w) {
                        Some(i) => i,
                        None => {
                            parts.push((w, TrunkBuilder::new(t.ts, t.timestamps)));
                            parts.len() - 1
                        }
                    };
                    let _ = parts[i].1.push(e.src_call, e.ts.unwrap_or(0), e.payload);
                }
                match parts.as_slice() {
                    [] => Route::To(me),
                    [(w, _)] => Route::To(*w),
                    _ => Route::Split(parts.into_iter().map(|(w, b)| (w, b.finish())).collect()),
                }
            }
            Err(_) => Route::To(me),
        }
    }

    /// The peer of a live call.
    pub fn peer(&self, call: CallId) -> Option<SocketAddr> {
        self.get(call).map(|c| c.peer)
    }

    fn get(&self, id: CallId) -> Option<&Call> {
        self.calls
            .get(&id.callno)
            .filter(|c| c.gen == id.gen && !c.ended)
    }

    fn new_call(
        &mut self,
        role: Role,
        peer: SocketAddr,
        remote: u16,
        now: Instant,
    ) -> Option<&mut Call> {
        let local = self.numbers.alloc(&mut self.rng, now)?;
        let gen = self.next_gen;
        self.next_gen = self.next_gen.wrapping_add(1);
        if remote != 0 {
            self.by_remote.insert((peer, remote), local);
        }
        let call = Call {
            gen,
            role,
            peer,
            local,
            remote,
            start: now,
            oseqno: 0,
            iseqno: 0,
            last_ts: 0,
            pending: VecDeque::new(),
            first: None,
            token_tries: 0,
            secret: None,
            challenge: None,
            username: None,
            refresh: 0,
            tx_format: 0,
            tx_voice_ts: None,
            rx_format: 0,
            rx_voice_ts: 0,
            ended: false,
            linger_until: None,
            armed: None,
            trunk: false,
        };
        Some(self.calls.entry(local).or_insert(call))
    }

    fn free(&mut self, callno: u16, now: Instant) {
        if let Some(c) = self.calls.remove(&callno) {
            if c.remote != 0 && self.by_remote.get(&(c.peer, c.remote)) == Some(&callno) {
                self.by_remote.remove(&(c.peer, c.remote));
            }
            if c.role.inbound() {
                self.cfg.address_counts.give_back(c.peer.ip());
            }
            if let Role::RegOut(r) = c.role {
                if let Some(reg) = self.regs.get_mut(&r) {
                    if reg.call == Some(callno) {
                        reg.call = None;
                    }
                }
            }
            self.numbers.release(callno, now);
        }
    }

    /// Marks a call ended; it lingers to acknowledge retransmissions, then is freed.
    fn end(io: &mut Io, cfg: &Config, call: &mut Call, now: Instant) {
        call.ended = true;
        call.linger_until = Some(now + cfg.linger);
        io.arm(call, call.linger_until);
    }

    // ---------------------------------------------------------------- outgoing requests

    /// Starts a call: NEW (with an empty CALLTOKEN to show support), then the handshake.
    pub fn call(&mut self, peer: SocketAddr, p: &NewCall, now: Instant) -> Result<CallId, Error> {
        let mut ies = IeBuilder::new();
        ies.u16(ie::VERSION, ie::PROTOCOL_VERSION)
            .str(ie::CALLED_NUMBER, &p.called_number);
        if let Some(v) = &p.called_context {
            ies.str(ie::CALLED_CONTEXT, v);
        }
        if let Some(v) = &p.calling_number {
            ies.str(ie::CALLING_NUMBER, v);
        }
        if let Some(v) = &p.calling_name {
            ies.str(ie::CALLING_NAME, v);
        }
        if let Some(v) = &p.username {
            ies.str(ie::USERNAME, v);
        }
        ies.u32(ie::FORMAT, p.format)
            .u32(ie::CAPABILITY, p.capability | p.format);
        let ies = ies.finish();
        let secret = p.secret.clone();
        let username = p.username.clone();
        let id = {
            let call = self
                .new_call(Role::CallOut, peer, 0, now)
                .ok_or(Error::NoCallNumber)?;
            call.secret = secret;
            call.username = username;
            call.first = Some((iax::NEW, ies));
            call.id()
        };
        self.send_first(id.callno, None, now);
        Ok(id)
    }

    /// Sends (again) the NEW or REGREQ that opens an exchange, with a call token if we have one.
    fn send_first(&mut self, callno: u16, token: Option<&[u8]>, now: Instant) {
        let Some(call) = self.calls.get_mut(&callno) else {
            return;
        };
        let Some((subclass, ies)) = call.first.clone() else {
            return;
        };
        let mut payload = ies;
        let mut b = IeBuilder::new();
        b.bytes(ie::CALLTOKEN, token.unwrap_or(&[]));
        payload.extend_from_slice(b.as_bytes());
        // A server that never answers with more than it was sent (as ours) needs room for the
        // CALLTOKEN reply: pad the request with an element receivers ignore.
        let short =
            CALLTOKEN_REPLY_LEN.saturating_sub(crate::frame::FULL_HEADER_LEN + payload.len());
        if token.is_none() && short > 0 {
            let pad = vec![0u8; short.saturating_sub(2)];
            payload.extend_from_slice(IeBuilder::new().bytes(ie::PADDING, &pad).as_bytes());
        }
        call.pending.clear();
        call.oseqno = 0;
        call.iseqno = 0;
        let _ = self.io.send_reliable(
            &self.cfg,
            call,
            FrameType::Iax,
            subclass,
            &payload,
            None,
            now,
        );
    }

    /// Registers with a server and keeps the registration refreshed.
    pub fn register(
        &mut self,
        peer: SocketAddr,
        username: &str,
        secret: &str,
        refresh: u16,
        now: Instant,
    ) -> RegId {
        let id = self.next_reg;
        self.next_reg += 1;
        self.regs.insert(
            id,
            RegClient {
                peer,
                username: username.to_string(),
                secret: secret.to_string(),
                refresh,
                call: None,
                due: None,
            },
        );
        self.start_register(id, now);
        RegId(id)
    }

    /// Ends a registration: it is no longer refreshed, and REGREL (answering the server's MD5
    /// challenge) tells the server to stop sending calls here; `Unregistered` follows its REGACK.
    pub fn unregister(&mut self, reg: RegId, now: Instant) {
        let Some(r) = self.regs.remove(&reg.0) else {
            return;
        };
        let mut ies = IeBuilder::new();
        ies.str(ie::USERNAME, &r.username);
        let Some(call) = self.new_call(Role::RegRel(reg.0), r.peer, 0, now) else {
            return;
        };
        call.secret = Some(r.secret);
        call.username = Some(r.username);
        call.first = Some((iax::REGREL, ies.finish()));
        let callno = call.local;
        self.send_first(callno, None, now);
    }

    /// Checks that `peer` answers (POKE, as chan_iax2's qualify does): `Pong` with the round
    /// trip, or `Hangup` with `EndReason::Timeout` once every retransmission went unanswered.
    pub fn poke(&mut self, peer: SocketAddr, now: Instant) -> Result<CallId, Error> {
        let id = self
            .new_call(Role::Poke, peer, 0, now)
            .ok_or(Error::NoCallNumber)?
            .id();
        let call = live(&mut self.calls, id)?;
        self.io
            .send_reliable(&self.cfg, call, FrameType::Iax, iax::POKE, &[], None, now)?;
        Ok(id)
    }

    fn start_register(&mut self, id: u64, now: Instant) {
        let Some(reg) = self.regs.get(&id) else {
            return;
        };
        let (peer, username, secret, refresh) = (
            reg.peer,
            reg.username.clone(),
            reg.secret.clone(),
            reg.refresh,
        );
        let mut ies = IeBuilder::new();
        ies.str(ie::USERNAME, &username).u16(ie::REFRESH, refresh);
        let callno = match self.new_call(Role::RegOut(id), peer, 0, now) {
            Some(call) => {
                call.secret = Some(secret);
                call.username = Some(username);
                call.refresh = refresh;
                call.first = Some((iax::REGREQ, ies.finish()));
                call.local
            }
            None => {
                self.schedule_reg(id, now + self.cfg.register_retry);
                return;
            }
        };
        if let Some(reg) = self.regs.get_mut(&id) {
            reg.call = Some(callno);
        }
        self.send_first(callno, None, now);
    }

    fn schedule_reg(&mut self, id: u64, at: Instant) {
        if let Some(reg) = self.regs.get_mut(&id) {
            reg.due = Some(at);
            self.io.timers.push(Reverse((at, TimerKey::Reg(id))));
        }
    }

    // ---------------------------------------------------------------- answering and in-call

    /// Challenges the peer of an incoming call (AUTHREQ) or registration (REGAUTH) with MD5;
    /// `Authenticated` follows if its answer matches `secret`.
    pub fn authenticate(&mut self, id: CallId, secret: &str, now: Instant) -> Result<(), Error> {
        let challenge = format!("{:09}", self.rng.below(1_000_000_000));
        let call = self
            .calls
            .get_mut(&id.callno)
            .filter(|c| c.gen == id.gen && !c.ended)
            .ok_or(Error::UnknownCall)?;
        let subclass = match call.role {
            Role::CallIn => iax::AUTHREQ,
            Role::RegIn => iax::REGAUTH,
            _ => return Err(Error::WrongState),
        };
        let mut ies = IeBuilder::new();
        if let Some(u) = &call.username {
            ies.str(ie::USERNAME, u);
        }
        ies.u16(ie::AUTHMETHODS, ie::AUTH_MD5)
            .str(ie::CHALLENGE, &challenge);
        call.secret = Some(secret.to_string());
        call.challenge = Some(challenge);
        self.io.send_reliable(
            &self.cfg,
            call,
            FrameType::Iax,
            subclass,
            ies.as_bytes(),
            None,
            now,
        )
    }

    /// Accepts an incoming call with `format` (ACCEPT).
    pub fn accept(&mut self, id: CallId, format: u32, now: Instant) -> Result<(), Error> {
        let cfg = self.cfg.clone();
        let call = live(&mut self.calls, id)?;
        if call.role != Role::CallIn {
            return Err(Error::WrongState);
        }
        let mut ies = IeBuilder::new();
        ies.u32(ie::FORMAT, format);
        call.challenge = None;
        self.io.send_reliable(
            &cfg,
            call,
            FrameType::Iax,
            iax::ACCEPT,
            ies.as_bytes(),
            None,
            now,
        )
    }

    /// Accepts a registration (REGACK) for `refresh` seconds; the exchange then ends.
    pub fn accept_registration(
        &mut self,
        id: CallId,
        refresh: u16,
        now: Instant,
    ) -> Result<(), Error> {
        let cfg = self.cfg.clone();
        let call = live(&mut self.calls, id)?;
        if call.role != Role::RegIn {
            return Err(Error::WrongState);
        }
        let mut ies = IeBuilder::new();
        if let Some(u) = &call.username {
            ies.str(ie::USERNAME, u);
        }
        ies.u16(ie::REFRESH, refresh)
            .addr(ie::APPARENT_ADDR, call.peer);
        self.io.send_reliable(
            &cfg,
            call,
            FrameType::Iax,
            iax::REGACK,
            ies.as_bytes(),
            None,
            now,
        )?;
        Self::end(&mut self.io, &cfg, call, now);
        Ok(())
    }

    /// Refuses an incoming call (REJECT) or registration (REGREJ).
    pub fn reject(&mut self, id: CallId, cause: &str, code: u8, now: Instant) -> Result<(), Error> {
        let cfg = self.cfg.clone();
        let call = live(&mut self.calls, id)?;
        let subclass = match call.role {
            Role::CallIn => iax::REJECT,
            Role::RegIn => iax::REGREJ,
            _ => return Err(Error::WrongState),
        };
        let mut ies = IeBuilder::new();
        ies.str(ie::CAUSE, cause).u8(ie::CAUSECODE, code);
        self.io.send_reliable(
            &cfg,
            call,
            FrameType::Iax,
            subclass,
            ies.as_bytes(),
            None,
            now,
        )?;
        Self::end(&mut self.io, &cfg, call, now);
        Ok(())
    }

    fn send_control(&mut self, id: CallId, subclass: u32, now: Instant) -> Result<(), Error> {
        let cfg = self.cfg.clone();
        let call = live(&mut self.calls, id)?;
        if call.remote == 0 {
            return Err(Error::WrongState);
        }
        self.io
            .send_reliable(&cfg, call, FrameType::Control, subclass, &[], None, now)
    }

    pub fn ringing(&mut self, id: CallId, now: Instant) -> Result<(), Error> {
        self.send_control(id, control::RINGING, now)
    }

    pub fn answer(&mut self, id: CallId, now: Instant) -> Result<(), Error> {
        self.send_control(id, control::ANSWER, now)
    }

    /// Ends a call (HANGUP with a Q.850 cause code).
    pub fn hangup(&mut self, id: CallId, code: u8, now: Instant) -> Result<(), Error> {
        let cfg = self.cfg.clone();
        let call = live(&mut self.calls, id)?;
        let mut ies = IeBuilder::new();
        ies.str(ie::CAUSE, "Normal Clearing")
            .u8(ie::CAUSECODE, code);
        if call.remote != 0 {
            self.io.send_reliable(
                &cfg,
                call,
                FrameType::Iax,
                iax::HANGUP,
                ies.as_bytes(),
                None,
                now,
            )?;
        } else {
            call.pending.clear();
        }
        Self::end(&mut self.io, &cfg, call, now);
        Ok(())
    }

    /// DTMF_BEGIN or DTMF_END for `digit`.
    pub fn send_dtmf(
        &mut self,
        id: CallId,
        digit: char,
        begin: bool,
        now: Instant,
    ) -> Result<(), Error> {
        if !digit.is_ascii() {
            return Err(Error::Encoding);
        }
        let cfg = self.cfg.clone();
        let call = live(&mut self.calls, id)?;
        if call.remote == 0 {
            return Err(Error::WrongState);
        }
        let ft = if begin {
            FrameType::DtmfBegin
        } else {
            FrameType::DtmfEnd
        };
        self.io
            .send_reliable(&cfg, call, ft, digit as u32, &[], None, now)
    }

    /// PING; the answer comes back as `Event::Pong`.
    pub fn ping(&mut self, id: CallId, now: Instant) -> Result<(), Error> {
        self.probe(id, iax::PING, now)
    }

    /// LAGRQ; the LAGRP comes back as `Event::Pong`.
    pub fn lagrq(&mut self, id: CallId, now: Instant) -> Result<(), Error> {
        self.probe(id, iax::LAGRQ, now)
    }

    fn probe(&mut self, id: CallId, subclass: u32, now: Instant) -> Result<(), Error> {
        let cfg = self.cfg.clone();
        let call = live(&mut self.calls, id)?;
        if call.remote == 0 {
            return Err(Error::WrongState);
        }
        self.io
            .send_reliable(&cfg, call, FrameType::Iax, subclass, &[], None, now)
    }

    /// Sends one voice frame in `format`, timestamped by the call's clock. The first frame, a
    /// format change and every wrap of the 16-bit mini timestamp go as full voice frames; the
    /// rest as mini frames, or into the peer's trunk frame in trunk mode.
    pub fn send_voice(
        &mut self,
        id: CallId,
        format: u32,
        data: &[u8],
        now: Instant,
    ) -> Result<(), Error> {
        self.send_voice_step(id, format, data, None, now)
    }

    /// `send_voice` for a stream whose frames are `step_ms` apart: each timestamp is the last
    /// one plus the step, so receivers that expect exact spacing see no jitter from when the
    /// frame happened to be sent; it falls back to the call's clock after a gap.
    pub fn send_voice_step(
        &mut self,
        id: CallId,
        format: u32,
        data: &[u8],
        step_ms: Option<u32>,
        now: Instant,
    ) -> Result<(), Error> {
        let cfg = &self.cfg;
        let call = self
            .calls
            .get_mut(&id.callno)
            .filter(|c| c.gen == id.gen && !c.ended)
            .ok_or(Error::UnknownCall)?;
        if call.remote == 0 || !matches!(call.role, Role::CallIn | Role::CallOut) {
            return Err(Error::WrongState);
        }
        let clock = call.elapsed_ms(now);
        let ts = match (call.tx_voice_ts, step_ms) {
            (Some(prev), Some(step)) if clock.abs_diff(prev.wrapping_add(step)) < 100 => {
                prev.wrapping_add(step)
            }
            (Some(prev), _) => clock.max(prev + 1),
            (None, _) => clock,
        };
        let full = match call.tx_voice_ts {
            None => true,
            Some(prev) => format != call.tx_format || (ts >> 16) != (prev >> 16),
        };
        call.tx_voice_ts = Some(ts);
        if full {
            call.tx_format = format;
            call.last_ts = call.last_ts.max(ts);
            return self
                .io
                .send_reliable(cfg, call, FrameType::Voice, format, data, Some(ts), now);
        }
        if cfg.trunk || call.trunk {
            let ms = now.saturating_duration_since(self.epoch).as_millis() as u32;
            let key = (call.peer, call.role.inbound());
            let t = self
                .trunks
                .entry(key)
                .or_insert_with(|| TrunkBuilder::new(ms, cfg.trunk_timestamps));
            // A full frame goes now and the next one starts, so no datagram outgrows a
            // receiver's buffer (chan_iax2's trunkmtu; a 20-call frame was 3.3 kB).
            if !t.is_empty() && t.len() + 6 + data.len() > TRUNK_MTU {
                let full = std::mem::replace(t, TrunkBuilder::new(ms, cfg.trunk_timestamps));
                self.io.transmits.push_back(Transmit {
                    to: key.0,
                    bytes: full.finish(),
                    inbound: key.1,
                });
            }
            t.push(call.local, ts as u16, data)
                .map_err(|_| Error::Encoding)?;
            if self.trunk_due.is_none() {
                let at = now + cfg.trunk_interval;
                self.trunk_due = Some(at);
                self.io.timers.push(Reverse((at, TimerKey::Trunk)));
            }
            return Ok(());
        }
        let mut bytes = Vec::with_capacity(4 + data.len());
        MiniFrame {
            src_call: call.local,
            ts: ts as u16,
            payload: data,
        }
        .write(&mut bytes)
        .map_err(|_| Error::Encoding)?;
        self.io.transmits.push_back(Transmit {
            to: call.peer,
            bytes,
            inbound: call.role.inbound(),
        });
        Ok(())
    }

    /// Sends this call's voice in meta trunk frames to its peer (for peers configured as trunks).
    pub fn set_trunk(&mut self, id: CallId, on: bool) -> Result<(), Error> {
        live(&mut self.calls, id)?.trunk = on;
        Ok(())
    }

    /// Sends every queued trunk frame now (also done by `handle_timeout` each trunk interval).
    pub fn flush_trunks(&mut self) {
        self.trunk_due = None;
        let mut peers: Vec<_> = self.trunks.drain().collect();
        peers.sort_by_key(|(a, _)| *a);
        for ((to, inbound), t) in peers {
            if !t.is_empty() {
                self.io.transmits.push_back(Transmit {
                    to,
                    bytes: t.finish(),
                    inbound,
                });
            }
        }
    }

    // ---------------------------------------------------------------- timers

    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(Reverse((at, key))) = self.io.timers.peek().copied() {
            if at > now {
                break;
            }
            self.io.timers.pop();
            match key {
                TimerKey::Trunk => {
                    if self.trunk_due == Some(at) {
                        self.flush_trunks();
                    }
                }
                TimerKey::Reg(id) => {
                    let due = self.regs.get(&id).and_then(|r| r.due);
                    if due == Some(at) {
                        if let Some(r) = self.regs.get_mut(&id) {
                            r.due = None;
                        }
                        self.start_register(id, now);
                    }
                }
                TimerKey::Call(callno, gen) => self.call_timer(callno, gen, at, now),
            }
        }
    }

    fn call_timer(&mut self, callno: u16, gen: u32, at: Instant, now: Instant) {
        let cfg = &self.cfg;
        let Some(call) = self.calls.get_mut(&callno) else {
            return;
        };
        if call.gen != gen || call.armed != Some(at) {
            return;
        }
        call.armed = None;
        let mut gave_up = false;
        for p in call.pending.iter_mut() {
            if p.due > now {
                continue;
            }
            if p.tries >= cfg.max_retransmits {
                gave_up = true;
                break;
            }
            p.tries += 1;
            p.interval = (p.interval * 2).min(cfg.retransmit_max);
            p.due = now + p.interval;
            set_retransmit_bit(&mut p.bytes);
            if p.bytes.len() >= 12 {
                p.bytes[2] = 0x80 | (call.remote >> 8) as u8;
                p.bytes[3] = call.remote as u8;
                p.bytes[9] = call.iseqno;
            }
            self.stats.retransmits += 1;
            self.io.transmits.push_back(Transmit {
                to: call.peer,
                bytes: p.bytes.clone(),
                inbound: call.role.inbound(),
            });
        }
        if gave_up {
            let (id, role, ended) = (call.id(), call.role, call.ended);
            if !ended {
                self.ended_event(id, role, EndReason::Timeout, now);
            }
            self.free(callno, now);
            return;
        }
        if call.linger_until.is_some_and(|t| t <= now) && call.pending.is_empty() {
            self.free(callno, now);
            return;
        }
        if call.linger_until.is_some_and(|t| t <= now) {
            call.linger_until = None;
        }
        let next = call.deadline();
        self.io.arm(call, next);
    }

    // ---------------------------------------------------------------- incoming datagrams

    /// One datagram from `from`.
    pub fn handle(&mut self, from: SocketAddr, bytes: &[u8], now: Instant) {
        match Frame::parse(bytes) {
            Ok(Frame::Full(f)) => self.on_full(from, f, bytes.len(), now),
            Ok(Frame::Mini(m)) => self.on_mini(from, m.src_call, Some(m.ts), m.payload),
            Ok(Frame::Trunk(t)) => {
                for e in t.entries() {
                    self.on_mini(from, e.src_call, e.ts, e.payload);
                }
            }
            Ok(Frame::VideoMini(_)) => self.stats.unknown_call += 1,
            Err(_) => self.stats.malformed += 1,
        }
    }

    fn on_mini(&mut self, from: SocketAddr, src: u16, ts: Option<u16>, data: &[u8]) {
        let Some(call) = self
            .by_remote
            .get(&(from, src))
            .and_then(|n| self.calls.get_mut(n))
        else {
            self.stats.unknown_call += 1;
            return;
        };
        if call.ended || call.rx_format == 0 {
            return;
        }
        let last = call.rx_voice_ts;
        let full_ts = match ts {
            Some(mini) => {
                let mut t = (last & 0xffff_0000) | mini as u32;
                if t < last && last - t > 0x8000 {
                    t = t.wrapping_add(0x1_0000);
                }
                t
            }
            None => last.wrapping_add(20),
        };
        call.rx_voice_ts = full_ts;
        self.io.events.push_back(Event::Voice {
            call: call.id(),
            ts: full_ts,
            format: call.rx_format,
            data: data.to_vec(),
        });
    }

    fn on_full(&mut self, from: SocketAddr, f: FullFrame<'_>, len: usize, now: Instant) {
        let found = if f.dst_call != 0 {
            self.calls
                .get(&f.dst_call)
                .filter(|c| {
                    c.peer == from
                        && (c.remote == 0 || c.remote == f.src_call || f.is_iax(iax::CALLTOKEN))
                })
                .map(|c| c.local)
        } else {
            self.by_remote.get(&(from, f.src_call)).copied()
        };
        if let Some(callno) = found {
            return self.on_call_frame(callno, f, now);
        }
        if f.dst_call == 0 && f.frame_type == FrameType::Iax {
            match f.subclass {
                iax::NEW | iax::REGREQ | iax::REGREL => return self.on_first(from, f, len, now),
                iax::POKE => {
                    self.stateless_reply(from, &f, iax::PONG, &[], len);
                    return;
                }
                _ => {}
            }
        }
        self.stats.unknown_call += 1;
        let answerable = !(f.frame_type == FrameType::Iax
            && matches!(f.subclass, iax::ACK | iax::INVAL | iax::CALLTOKEN));
        if f.dst_call > STATELESS_CALL && f.src_call != 0 && answerable {
            self.stateless_reply(from, &f, iax::INVAL, &[], len);
        }
    }

    /// A reply that sets up no state; sent only if it is no larger than the request, so it
    /// cannot amplify traffic towards a spoofed source.
    fn stateless_reply(
        &mut self,
        to: SocketAddr,
        req: &FullFrame<'_>,
        subclass: u32,
        ies: &[u8],
        req_len: usize,
    ) -> bool {
        let reply = FullFrame {
            src_call: STATELESS_CALL,
            dst_call: req.src_call,
            retransmit: false,
            ts: req.ts,
            oseqno: req.iseqno,
            iseqno: req.oseqno.wrapping_add(1),
            frame_type: FrameType::Iax,
            subclass,
            payload: ies,
        };
        match reply.to_vec() {
            Ok(bytes) if bytes.len() <= req_len => {
                self.io.transmits.push_back(Transmit {
                    to,
                    bytes,
                    inbound: true,
                });
                true
            }
            _ => false,
        }
    }

    /// NEW, REGREQ or REGREL for no known call: the call token gate, the per-address limit, then
    /// state.
    fn on_first(&mut self, from: SocketAddr, f: FullFrame<'_>, len: usize, now: Instant) {
        let Ok(ies) = Ies::parse(f.payload) else {
            self.stats.malformed += 1;
            return;
        };
        let legacy =
            ies.get(ie::CALLTOKEN).is_none() && self.cfg.token_optional.contains(&from.ip());
        if self.cfg.call_tokens && !legacy {
            let valid = ies
                .get(ie::CALLTOKEN)
                .is_some_and(|t| self.tokens.check(from, t, now));
            if !valid {
                let token = self.tokens.issue(from, now);
                let mut b = IeBuilder::new();
                b.str(ie::CALLTOKEN, &token);
                if self.stateless_reply(from, &f, iax::CALLTOKEN, b.as_bytes(), len) {
                    self.stats.tokens_sent += 1;
                } else {
                    self.stats.token_replies_suppressed += 1;
                }
                return;
            }
        }
        if f.src_call == 0 {
            self.stats.malformed += 1;
            return;
        }
        let reject = if f.subclass == iax::NEW {
            iax::REJECT
        } else {
            iax::REGREJ
        };
        // The limit guards against what others open: our own calls and POKEs do not count.
        let counts = &self.cfg.address_counts;
        if !counts.try_take(from.ip(), self.cfg.max_calls_per_ip) {
            self.stats.over_limit += 1;
            let mut b = IeBuilder::new();
            b.str(ie::CAUSE, "Too many calls").u8(ie::CAUSECODE, 34);
            self.stateless_reply(from, &f, reject, b.as_bytes(), len);
            return;
        }
        let role = if f.subclass == iax::NEW {
            Role::CallIn
        } else {
            Role::RegIn
        };
        let username = ies.str(ie::USERNAME).map(str::to_string);
        let Some(call) = self.new_call(role, from, f.src_call, now) else {
            self.cfg.address_counts.give_back(from.ip());
            self.stats.over_limit += 1;
            let mut b = IeBuilder::new();
            b.str(ie::CAUSE, "No call number").u8(ie::CAUSECODE, 34);
            self.stateless_reply(from, &f, reject, b.as_bytes(), len);
            return;
        };
        call.iseqno = f.oseqno.wrapping_add(1);
        call.username = username.clone();
        call.refresh = ies.u16(ie::REFRESH).unwrap_or(0);
        let release = f.subclass == iax::REGREL;
        let id = call.id();
        if let Some(call) = self.calls.get(&id.callno) {
            self.io.send_unsequenced(call, iax::ACK, f.ts);
        }
        let string = |id| ies.str(id).map(str::to_string);
        let event = match role {
            Role::CallIn => Event::Incoming {
                call: id,
                peer: from,
                info: CallInfo {
                    called_number: string(ie::CALLED_NUMBER),
                    called_context: string(ie::CALLED_CONTEXT),
                    calling_number: string(ie::CALLING_NUMBER),
                    calling_name: string(ie::CALLING_NAME),
                    username,
                    format: ies.u32(ie::FORMAT).unwrap_or(0),
                    capability: ies.u32(ie::CAPABILITY).unwrap_or(0),
                    version: ies.u16(ie::VERSION),
                },
            },
            _ => Event::RegisterRequest {
                call: id,
                peer: from,
                username: username.unwrap_or_default(),
                refresh: ies.u16(ie::REFRESH),
                release,
            },
        };
        self.io.events.push_back(event);
    }

    fn on_call_frame(&mut self, callno: u16, f: FullFrame<'_>, now: Instant) {
        let cfg = self.cfg.clone();
        let Some(call) = self.calls.get_mut(&callno) else {
            return;
        };
        if f.is_iax(iax::CALLTOKEN) {
            // The server wants a token before it sets up our NEW or REGREQ.
            let Ok(ies) = Ies::parse(f.payload) else {
                return;
            };
            let token = ies.get(ie::CALLTOKEN).unwrap_or(&[]).to_vec();
            if call.remote != 0 || call.first.is_none() || call.ended || token.is_empty() {
                return;
            }
            call.token_tries += 1;
            if call.token_tries > 2 {
                return;
            }
            return self.send_first(callno, Some(&token), now);
        }
        call.ack_upto(f.iseqno);
        if f.frame_type == FrameType::Iax && iax::is_unsequenced(f.subclass) {
            match f.subclass {
                iax::VNAK => {
                    for p in call.pending.iter_mut() {
                        p.due = now;
                    }
                    let at = Some(now);
                    self.io.arm(call, at);
                }
                iax::INVAL if !call.ended => {
                    let (id, role) = (call.id(), call.role);
                    Self::end(&mut self.io, &cfg, call, now);
                    call.pending.clear();
                    self.ended_event(id, role, EndReason::Invalid, now);
                }
                _ => {}
            }
            return self.maybe_free(callno, now);
        }
        if call.remote == 0 && f.src_call != 0 {
            call.remote = f.src_call;
            // A PONG comes from a stateless source number, which names no call of the peer.
            if call.role != Role::Poke {
                self.by_remote.insert((call.peer, f.src_call), callno);
            }
        }
        if f.oseqno != call.iseqno {
            if call.iseqno.wrapping_sub(f.oseqno) < 128 {
                self.stats.duplicates += 1;
                self.io.send_unsequenced(call, iax::ACK, f.ts);
            } else {
                self.stats.out_of_order += 1;
                self.io.send_unsequenced(call, iax::VNAK, f.ts);
            }
            return;
        }
        call.iseqno = call.iseqno.wrapping_add(1);
        self.io.send_unsequenced(call, iax::ACK, f.ts);
        if call.ended {
            return;
        }
        self.dispatch(callno, f, now);
        self.maybe_free(callno, now);
    }

    /// Frees an ended call whose frames are all acknowledged and whose linger is over.
    fn maybe_free(&mut self, callno: u16, now: Instant) {
        if let Some(c) = self.calls.get(&callno) {
            if c.ended && c.pending.is_empty() && c.linger_until.is_none_or(|t| t <= now) {
                self.free(callno, now);
            }
        }
    }

    fn ended_event(&mut self, id: CallId, role: Role, reason: EndReason, now: Instant) {
        match role {
            Role::RegOut(r) => {
                self.io.events.push_back(Event::RegistrationFailed {
                    reg: RegId(r),
                    reason,
                });
                self.schedule_reg(r, now + self.cfg.register_retry);
            }
            // Nobody waits for a REGREL: a server that refuses it lets the registration expire.
            Role::RegRel(_) => {}
            _ => self.io.events.push_back(Event::Hangup { call: id, reason }),
        }
    }

    fn dispatch(&mut self, callno: u16, f: FullFrame<'_>, now: Instant) {
        let cfg = self.cfg.clone();
        let Some(call) = self.calls.get_mut(&callno) else {
            return;
        };
        let id = call.id();
        let role = call.role;
        let io = &mut self.io;
        match f.frame_type {
            FrameType::Voice => {
                call.rx_format = f.subclass;
                call.rx_voice_ts = f.ts;
                io.events.push_back(Event::Voice {
                    call: id,
                    ts: f.ts,
                    format: f.subclass,
                    data: f.payload.to_vec(),
                });
            }
            FrameType::DtmfBegin | FrameType::DtmfEnd => {
                if let Some(digit) = char::from_u32(f.subclass) {
                    io.events.push_back(Event::Dtmf {
                        call: id,
                        digit,
                        begin: f.frame_type == FrameType::DtmfBegin,
                    });
                }
            }
            FrameType::Control => io.events.push_back(match f.subclass {
                control::RINGING => Event::Ringing { call: id },
                control::ANSWER => Event::Answered { call: id },
                s => Event::Control {
                    call: id,
                    subclass: s,
                },
            }),
            FrameType::Iax => {
                let Ok(ies) = Ies::parse(f.payload) else {
                    self.stats.malformed += 1;
                    return;
                };
                let cause = || EndReasonParts {
                    cause: ies.str(ie::CAUSE).map(str::to_string),
                    code: ies.u8(ie::CAUSECODE),
                };
                match (f.subclass, role) {
                    (iax::PING, _) => {
                        let _ = io.send_reliable(
                            &cfg,
                            call,
                            FrameType::Iax,
                            iax::PONG,
                            &[],
                            Some(f.ts),
                            now,
                        );
                    }
                    (iax::LAGRQ, _) => {
                        let _ = io.send_reliable(
                            &cfg,
                            call,
                            FrameType::Iax,
                            iax::LAGRP,
                            &[],
                            Some(f.ts),
                            now,
                        );
                    }
                    (iax::PONG, Role::Poke) => {
                        // Our timestamps may run a few ms ahead of the clock (they rise strictly).
                        let rtt = call.elapsed_ms(now).saturating_sub(f.ts);
                        Self::end(io, &cfg, call, now);
                        call.pending.clear();
                        io.events.push_back(Event::Pong {
                            call: id,
                            rtt: Duration::from_millis(rtt as u64),
                        });
                    }
                    (iax::PONG | iax::LAGRP, _) => {
                        // Our timestamps may run a few ms ahead of the clock (they rise strictly).
                        let rtt = call.elapsed_ms(now).saturating_sub(f.ts);
                        io.events.push_back(Event::Pong {
                            call: id,
                            rtt: Duration::from_millis(rtt as u64),
                        });
                    }
                    (iax::ACCEPT, Role::CallOut) => {
                        call.first = None;
                        io.events.push_back(Event::Accepted {
                            call: id,
                            format: ies.u32(ie::FORMAT).unwrap_or(0),
                        });
                    }
                    (iax::AUTHREQ, Role::CallOut)
                    | (iax::REGAUTH, Role::RegOut(_) | Role::RegRel(_)) => {
                        call.first = None;
                        let md5_ok = ies
                            .u16(ie::AUTHMETHODS)
                            .is_some_and(|m| m & ie::AUTH_MD5 != 0);
                        match (ies.str(ie::CHALLENGE), &call.secret, md5_ok) {
                            (Some(ch), Some(secret), true) => {
                                let result = md5_result(ch, secret);
                                let mut b = IeBuilder::new();
                                let subclass = if f.subclass == iax::AUTHREQ {
                                    iax::AUTHREP
                                } else {
                                    if let Some(u) = &call.username {
                                        b.str(ie::USERNAME, u);
                                    }
                                    if matches!(role, Role::RegRel(_)) {
                                        iax::REGREL
                                    } else {
                                        b.u16(ie::REFRESH, call.refresh);
                                        iax::REGREQ
                                    }
                                };
                                b.str(ie::MD5_RESULT, &result);
                                let _ = io.send_reliable(
                                    &cfg,
                                    call,
                                    FrameType::Iax,
                                    subclass,
                                    b.as_bytes(),
                                    None,
                                    now,
                                );
                            }
                            _ => {
                                if role == Role::CallOut {
                                    let mut b = IeBuilder::new();
                                    b.str(ie::CAUSE, "No authentication").u8(ie::CAUSECODE, 21);
                                    let _ = io.send_reliable(
                                        &cfg,
                                        call,
                                        FrameType::Iax,
                                        iax::HANGUP,
                                        b.as_bytes(),
                                        None,
                                        now,
                                    );
                                }
                                Self::end(io, &cfg, call, now);
                                self.ended_event(id, role, EndReason::AuthFailed, now);
                            }
                        }
                    }
                    (iax::AUTHREP, Role::CallIn) | (iax::REGREQ | iax::REGREL, Role::RegIn) => {
                        let good = match (&call.challenge, &call.secret, ies.str(ie::MD5_RESULT)) {
                            (Some(ch), Some(secret), Some(got)) => {
                                bool::from(md5_result(ch, secret).as_bytes().ct_eq(got.as_bytes()))
                            }
                            _ => false,
                        };
                        if good {
                            call.challenge = None;
                            io.events.push_back(Event::Authenticated { call: id });
                        } else if call.challenge.is_some() {
                            let mut b = IeBuilder::new();
                            b.str(ie::CAUSE, "Authentication failed")
                                .u8(ie::CAUSECODE, 21);
                            let subclass = if role == Role::CallIn {
                                iax::REJECT
                            } else {
                                iax::REGREJ
                            };
                            let _ = io.send_reliable(
                                &cfg,
                                call,
                                FrameType::Iax,
                                subclass,
                                b.as_bytes(),
                                None,
                                now,
                            );
                            Self::end(io, &cfg, call, now);
                            io.events.push_back(Event::Hangup {
                                call: id,
                                reason: EndReason::AuthFailed,
                            });
                        }
                    }
                    (iax::REGACK, Role::RegOut(r)) => {
                        call.first = None;
                        let refresh = ies.u16(ie::REFRESH).unwrap_or(call.refresh).max(1);
                        let apparent = ies.addr(ie::APPARENT_ADDR);
                        Self::end(io, &cfg, call, now);
                        io.events.push_back(Event::Registered {
                            reg: RegId(r),
                            refresh,
                            apparent,
                        });
                        let again = Duration::from_secs(refresh as u64) * 3 / 4;
                        self.schedule_reg(r, now + again.max(Duration::from_secs(1)));
                    }
                    (iax::REGACK, Role::RegRel(r)) => {
                        call.first = None;
                        Self::end(io, &cfg, call, now);
                        io.events.push_back(Event::Unregistered { reg: RegId(r) });
                    }
                    (iax::HANGUP, _) => {
                        let c = cause();
                        Self::end(io, &cfg, call, now);
                        call.pending.clear();
                        self.ended_event(
                            id,
                            role,
                            EndReason::Hangup {
                                cause: c.cause,
                                code: c.code,
                            },
                            now,
                        );
                    }
                    (iax::REJECT | iax::REGREJ, _) => {
                        let c = cause();
                        Self::end(io, &cfg, call, now);
                        call.pending.clear();
                        self.ended_event(
                            id,
                            role,
                            EndReason::Rejected {
                                cause: c.cause,
                                code: c.code,
                            },
                            now,
                        );
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
}

fn live(calls: &mut HashMap<u16, Call>, id: CallId) -> Result<&mut Call, Error> {
    calls
        .get_mut(&id.callno)
        .filter(|c| c.gen == id.gen && !c.ended)
        .ok_or(Error::UnknownCall)
}

struct EndReasonParts {
    cause: Option<String>,
    code: Option<u8>,
}
