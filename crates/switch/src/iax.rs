//! IAX2 legs (RFC 5456) in the call engine. The worker's `iax2::Endpoint` runs the protocol;
//! this module turns its events into the same calls, dialplan runs and bridges SIP legs get:
//! an incoming NEW enters the dialplan with its called number, and `bridge iax2/PEER/EXTEN`
//! dials a peer. An IAX2 leg's media is a frame leg of the media engine: voice frames and
//! DTMF that arrive are handed to it as they are (`media::Frame`, with their timestamps), and
//! the frames it sends (`media::FrameOut`) go out as mini/full voice (or trunk) frames and
//! DTMF, so prompts, echo, recording, bridges and codec translation are the ones SIP legs use.

use crate::call::{Call, Leg, Signal, Wait};
use crate::cdr::{unix_seconds, Cdr};
use crate::config::{Iax2, IaxHost, IaxPeer};
use crate::control::Notice;
use crate::dialplan::cause::Cause;
use crate::dialplan::Vars;
use crate::engine::Engine;
use iax2::{format as fmt, CallId, EndReason, Event, NewCall};
pub use iax2::{Route, Transmit};
use media::{Format, Frame, FrameOut};
use rustc_hash::FxHashMap;
use sdp::LocalSession;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The IAX2 format bit of a media format, and back.
pub fn iax_format(f: Format) -> Option<u32> {
    Some(match f {
        Format::Pcmu => fmt::ULAW,
        Format::Pcma => fmt::ALAW,
        Format::Gsm => fmt::GSM,
        Format::G722 => fmt::G722,
        Format::Speex => fmt::SPEEX,
        Format::L16 => fmt::SLINEAR,
        _ => return None,
    })
}

pub fn media_format(bit: u32) -> Option<Format> {
    Some(match bit {
        fmt::ULAW => Format::Pcmu,
        fmt::ALAW => Format::Pcma,
        fmt::GSM => Format::Gsm,
        fmt::G722 => Format::G722,
        fmt::SPEEX => Format::Speex,
        fmt::SLINEAR => Format::L16,
        _ => return None,
    })
}

/// Where registered peers are. Each worker keeps a copy: the worker that accepts a REGREQ says
/// so (`Event::IaxPeer`), and the shell hands that to every worker (`Input::IaxPeer`), so a call
/// dialling a peer finds it on any worker without a lock.
#[derive(Default)]
pub struct Registry(HashMap<String, (SocketAddr, Instant)>);

impl Registry {
    pub fn get(&self, name: &str, now: Instant) -> Option<SocketAddr> {
        self.entry(name, now).map(|(a, _)| a)
    }

    /// Whether `name` registering from `addr` is news (first time, moved, or lapsed).
    fn is_new(&self, name: &str, addr: SocketAddr, now: Instant) -> bool {
        self.0.get(name).is_none_or(|&(a, u)| a != addr || u <= now)
    }

    /// Where `name` registered from and how long that lasts.
    fn entry(&self, name: &str, now: Instant) -> Option<(SocketAddr, Duration)> {
        self.0
            .get(name)
            .filter(|(_, until)| *until > now)
            .map(|(a, until)| (*a, *until - now))
    }
}

/// The file in the data directory that `strowger show peers` reads.
pub const PEERS_STATE: &str = "iax2-peers.json";

/// `[iax2]` and the calls per address, shared by the workers (read-only here; the count of
/// calls per address is the `iax2` endpoint's own).
pub struct Shared {
    pub cfg: Iax2,
    address_counts: Arc<iax2::AddressCounts>,
}

impl Shared {
    pub fn new(cfg: Iax2) -> Arc<Shared> {
        Arc::new(Shared {
            cfg,
            address_counts: Arc::default(),
        })
    }
}

/// An incoming call or registration waiting for the peer's MD5 answer.
enum Waiting {
    Call {
        info: iax2::CallInfo,
        peer: SocketAddr,
        name: Option<String>,
    },
    Register {
        name: String,
        peer: SocketAddr,
        refresh: u16,
        /// A REGREL: the peer leaves.
        release: bool,
    },
}

/// The IAX2 side of a media leg.
struct IaxMedia {
    call: CallId,
    format: u32,
    /// Timestamp (ms) of the last voice frame sent.
    tx_ts: Option<u32>,
}

/// The switch call an IAX2 call is a leg of.
struct IaxCall {
    call: usize,
    outbound: bool,
    /// The leg's media leg once it has one: a voice frame goes to it from here, without
    /// reading the call record (a cache miss per frame at a thousand calls).
    media: Option<media::LegId>,
}

/// One worker's IAX2: its endpoint and which call each IAX2 call and media leg belongs to.
pub struct Iax {
    ep: iax2::Endpoint,
    shared: Arc<Shared>,
    calls: FxHashMap<CallId, IaxCall>,
    /// By media leg index.
    legs: Vec<Option<IaxMedia>>,
    waiting: FxHashMap<CallId, Waiting>,
    regs: FxHashMap<iax2::RegId, String>,
    /// POKEs in flight (qualify), with the peer and address each tests; like registrations to
    /// providers, qualify is one worker's job.
    pokes: FxHashMap<CallId, (String, SocketAddr)>,
    next_qualify: Option<Instant>,
    /// Signalling events kept for `Engine::process`.
    deferred: VecDeque<Event>,
    /// Log lines and state files for the shell, taken by `Engine::poll_output`.
    events: VecDeque<crate::io::Event>,
    /// Where dynamic peers registered from (every worker's copy).
    registry: Registry,
    /// Worker 0 qualifies the peers and writes `show peers`' state: by peer name, the round
    /// trip of its last answered POKE, or None when it went unanswered.
    reach: Option<HashMap<String, Option<Duration>>>,
}

impl Iax {
    /// The IAX2 side of worker `worker` of `workers` (it draws the call numbers of its share,
    /// so frames that name one reach it; see `Endpoint::route`). Worker 0 keeps the
    /// registrations to providers (`register = true` peers) and qualifies the peers.
    pub fn new(shared: Arc<Shared>, worker: u16, workers: u16, now: Instant) -> Iax {
        let c = &shared.cfg;
        let register = worker == 0;
        let cfg = iax2::Config {
            call_tokens: c.call_tokens,
            token_optional: c.calltoken_optional.clone(),
            max_calls_per_ip: c.max_calls_per_ip,
            address_counts: shared.address_counts.clone(),
            callno_share: (workers, worker),
            ..iax2::Config::default()
        };
        let ep = iax2::Endpoint::new(cfg, now);
        let next_qualify = (register && c.qualify > 0).then_some(now);
        let mut iax = Iax {
            ep,
            shared,
            calls: FxHashMap::default(),
            legs: Vec::new(),
            waiting: FxHashMap::default(),
            regs: FxHashMap::default(),
            pokes: FxHashMap::default(),
            next_qualify,
            deferred: VecDeque::new(),
            events: VecDeque::new(),
            registry: Registry::default(),
            reach: register.then(HashMap::new),
        };
        if register {
            iax.register_peers(now);
        }
        iax
    }

    /// Registers to every `register = true` peer with a fixed address that has no
    /// registration yet (worker 0's job).
    fn register_peers(&mut self, now: Instant) {
        let c = &self.shared.cfg;
        for p in c.peers.iter().filter(|p| p.register) {
            if self.regs.values().any(|n| *n == p.name) {
                continue;
            }
            if let (IaxHost::Static(addr), Some(secret)) = (p.host, &p.secret) {
                let id = self
                    .ep
                    .register(addr, &p.username, secret, c.register_refresh, now);
                self.regs.insert(id, p.name.clone());
            }
        }
    }

    /// A reload's `[iax2]`: peers and users added, removed or changed, guests, qualify and
    /// the refresh asked of providers take effect for what comes next (new calls, the next
    /// POKE); calls in progress go on. The listener and the endpoint's own settings (call
    /// tokens, calls per address) stay as at start (`reload::keep_restart_keys`). Worker 0
    /// releases (REGREL) the registrations of providers removed or changed and registers to
    /// those added or changed.
    pub(crate) fn reconfigure(&mut self, cfg: &Iax2, clock: crate::io::Clock) {
        let shared = Shared {
            cfg: cfg.clone(),
            address_counts: self.shared.address_counts.clone(),
        };
        let old = std::mem::replace(&mut self.shared, Arc::new(shared));
        let Some(reach) = self.reach.as_mut() else {
            return;
        };
        let now = clock.now;
        let new = &self.shared.cfg;
        let kept = |name: &str| {
            old.cfg.peer(name) == new.peer(name) && old.cfg.register_refresh == new.register_refresh
        };
        let released: Vec<(iax2::RegId, String)> = self
            .regs
            .iter()
            .filter(|(_, name)| !kept(name))
            .map(|(id, name)| (*id, name.clone()))
            .collect();
        reach.retain(|name, _| new.peer(name).is_some());
        self.pokes.retain(|_, (name, _)| new.peer(name).is_some());
        self.next_qualify = match (new.qualify, old.cfg.qualify == new.qualify) {
            (0, _) => None,
            (_, true) => self.next_qualify,
            (_, false) => Some(now),
        };
        for (id, name) in released {
            self.regs.remove(&id);
            self.ep.unregister(id, now);
            self.note(format!(
                "iax2: releasing the registration to {name} (removed or changed by a reload)"
            ));
        }
        self.register_peers(now);
        self.save(clock);
    }

    /// Each configured peer's state as JSON, for `strowger show peers`: where a dynamic peer
    /// registered from and until when (Unix seconds), and its last POKE's round trip.
    fn snapshot(&self, clock: crate::io::Clock) -> String {
        let now = clock.now;
        let wall = unix_seconds(clock.wall);
        let peers: serde_json::Map<String, serde_json::Value> = self
            .shared
            .cfg
            .peers
            .iter()
            .map(|p| {
                let reg = self.registry.entry(&p.name, now);
                let poke = self.reach.as_ref().and_then(|r| r.get(&p.name));
                let state = serde_json::json!({
                    "registered_from": reg.map(|(a, _)| a.to_string()),
                    "registered_until": reg.map(|(_, left)| (wall + left.as_secs_f64()).round()),
                    "reachable": poke.map(Option::is_some),
                    "rtt_ms": poke.copied().flatten().map(|d| d.as_millis() as u64),
                });
                (p.name.clone(), state)
            })
            .collect();
        serde_json::json!({ "written": wall.round(), "peers": peers }).to_string()
    }

    /// Rewrites `show peers`' state file (worker 0's job).
    fn save(&mut self, clock: crate::io::Clock) {
        if self.reach.is_some() {
            let contents = self.snapshot(clock);
            self.events.push_back(crate::io::Event::State {
                name: PEERS_STATE,
                contents,
            });
        }
    }

    /// The next IAX2 datagram to send (`Engine::poll_output`).
    pub(crate) fn poll_transmit(&mut self) -> Option<iax2::Transmit> {
        self.ep.poll_transmit()
    }

    /// The next event for the shell (`Engine::poll_output`).
    pub(crate) fn poll_event(&mut self) -> Option<crate::io::Event> {
        self.events.pop_front()
    }

    /// Where a peer registered from now (`at`), or that it left (None).
    pub(crate) fn peer_moved(
        &mut self,
        name: String,
        at: Option<(SocketAddr, Instant)>,
        clock: crate::io::Clock,
    ) {
        match at {
            Some(at) => self.registry.0.insert(name, at),
            None => self.registry.0.remove(&name),
        };
        self.save(clock);
    }

    /// POKEs every peer with a known address (fixed, or where it registered from) that has no
    /// POKE in flight, every `qualify_s`.
    fn qualify(&mut self, now: Instant) {
        if self.next_qualify.is_none_or(|t| t > now) {
            return;
        }
        let every = Duration::from_secs(u64::from(self.shared.cfg.qualify));
        self.next_qualify = Some(now + every);
        for p in &self.shared.cfg.peers {
            let addr = match p.host {
                IaxHost::Static(a) => Some(a),
                IaxHost::Dynamic => self.registry.get(&p.name, now),
            };
            let Some(addr) = addr else { continue };
            if self.pokes.values().any(|(n, _)| *n == p.name) {
                continue;
            }
            if let Ok(id) = self.ep.poke(addr, now) {
                self.pokes.insert(id, (p.name.clone(), addr));
            }
        }
    }

    /// A POKE's outcome: kept for `show peers`, logged when the peer's reachability changes.
    fn poked(&mut self, call: CallId, rtt: Option<Duration>, clock: crate::io::Clock) {
        let Some((name, addr)) = self.pokes.remove(&call) else {
            return;
        };
        let Some(reach) = self.reach.as_mut() else {
            return;
        };
        let was = reach.insert(name.clone(), rtt);
        self.save(clock);
        let message = match (was, rtt) {
            (Some(Some(_)), Some(_)) | (Some(None), None) => return,
            (_, Some(rtt)) => format!(
                "iax2: peer {name} at {addr} is reachable ({} ms round trip)",
                rtt.as_millis()
            ),
            (_, None) => format!(
                "iax2: peer {name} at {addr} is unreachable: no PONG to POKE; check its host in [[iax2.peers]] and that it is running"
            ),
        };
        // A change of reachability is rare: made whether or not a client listens (the shell's
        // feed drops it when none does).
        let n = Notice::Reachable {
            peer: name,
            reachable: rtt.is_some(),
            rtt_ms: rtt.map(|d| d.as_millis() as u64),
        };
        self.events.push_back(crate::io::Event::Notice(n));
        self.note(message);
    }

    /// A line for the operator about a peer.
    fn note(&mut self, message: String) {
        self.events.push_back(crate::io::Event::Log {
            level: crate::io::Level::Info,
            call_id: None,
            message,
        });
    }

    /// At shutdown: REGREL to every provider, so none sends calls to a switch that is gone.
    fn release_registrations(&mut self, now: Instant) {
        self.next_qualify = None;
        for reg in self.regs.keys() {
            self.ep.unregister(*reg, now);
        }
    }

    fn peer_named(&self, name: &str) -> Option<&IaxPeer> {
        self.shared.cfg.peer(name)
    }

    /// Where the media engine's output goes while IAX2 is on (see [`Output`]).
    pub(crate) fn output<'a>(
        &'a mut self,
        now: Instant,
        tx: &'a mut dyn FnMut(media::Transmit<'_>),
    ) -> Output<'a> {
        Output { iax: self, now, tx }
    }

    /// Sends a frame the media engine emits on an IAX2 leg as IAX2 voice or DTMF.
    fn send_frame(&mut self, f: FrameOut<'_>, now: Instant) {
        let leg = match f {
            FrameOut::Voice { leg, .. } | FrameOut::Digit { leg, .. } => leg,
        };
        let Some(m) = self.legs.get_mut(leg.index()).and_then(Option::as_mut) else {
            return;
        };
        match f {
            FrameOut::Voice { ts, payload, .. } => {
                // Frames are spaced by their timestamps, not by when a media tick sent them.
                let step = m.tx_ts.map(|t| ts.wrapping_sub(t));
                m.tx_ts = Some(ts);
                let step = step.filter(|s| (1..=200).contains(s));
                let _ = self
                    .ep
                    .send_voice_step(m.call, m.format, payload, step, now);
            }
            FrameOut::Digit { digit, end, .. } => {
                let _ = self.ep.send_dtmf(m.call, digit, !end, now);
            }
        }
    }
}

/// The media engine's output on a worker with IAX2: frames of IAX2 legs go out as IAX2 voice
/// and DTMF, datagrams to `tx` (the RTP sockets).
pub(crate) struct Output<'a> {
    iax: &'a mut Iax,
    now: Instant,
    tx: &'a mut dyn FnMut(media::Transmit<'_>),
}

impl media::Output for Output<'_> {
    fn transmit(&mut self, t: media::Transmit<'_>) {
        (self.tx)(t)
    }

    fn frame(&mut self, f: FrameOut<'_>) {
        self.iax.send_frame(f, self.now)
    }
}

impl Engine {
    /// Turns IAX2 on for this worker.
    pub fn enable_iax2(&mut self, iax: Iax) {
        self.iax = Some(Box::new(iax));
    }

    /// Where a datagram read from the IAX2 port belongs: this worker or another
    /// (`iax2::Endpoint::route`).
    pub fn iax_route(&self, from: SocketAddr, bytes: &[u8]) -> Option<iax2::Route> {
        Some(self.iax.as_ref()?.ep.route(from, bytes))
    }

    /// Counters of this worker's IAX2 endpoint.
    pub fn iax_stats(&self) -> Option<iax2::Stats> {
        self.iax.as_ref().map(|i| i.ep.stats())
    }

    /// One datagram from the IAX2 socket. Voice and DTMF are handled at once (RTP goes out for
    /// SIP legs bridged to IAX2 legs); signalling waits for `process`.
    pub(crate) fn on_iax(&mut self, from: SocketAddr, bytes: &[u8], now: Instant) {
        let Some(iax) = self.iax.as_mut() else {
            return;
        };
        iax.ep.handle(from, bytes, now);
        let mut out = std::mem::take(&mut self.media_out);
        let tx: &mut dyn FnMut(media::Transmit<'_>) = &mut |t| out.push(t);
        while let Some(ev) = self.iax.as_mut().and_then(|i| i.ep.poll_event()) {
            match ev {
                Event::Voice { call, ts, data, .. } => {
                    if let Some(m) = self.iax_media_leg(call) {
                        let payload = &data[..];
                        self.iax_inject(m, Frame::Voice { ts, payload }, now, tx);
                    }
                }
                Event::Dtmf { call, digit, begin } => {
                    if let Some(m) = self.iax_media_leg(call) {
                        self.iax_inject(m, Frame::Digit { digit, end: !begin }, now, tx);
                    }
                }
                ev => {
                    if let Some(iax) = self.iax.as_mut() {
                        iax.deferred.push_back(ev);
                    }
                }
            }
        }
        self.media_out = out;
    }

    /// IAX2 retransmissions, registrations and trunk frames that are due.
    pub(crate) fn iax_timeout(&mut self, now: Instant) {
        if let Some(iax) = self.iax.as_mut() {
            iax.qualify(now);
            if iax.ep.poll_timeout().is_some_and(|t| t <= now) {
                iax.ep.handle_timeout(now);
            }
        }
        self.iax_signalling(now);
    }

    pub(crate) fn iax_deadline(&self) -> Option<Instant> {
        let iax = self.iax.as_ref()?;
        match (iax.ep.poll_timeout(), iax.next_qualify) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// At shutdown: REGREL to the providers strowger registered to.
    pub(crate) fn iax_shutdown(&mut self, now: Instant) {
        if let Some(iax) = self.iax.as_mut() {
            iax.release_registrations(now);
        }
    }

    /// Signalling events: deferred ones from datagrams, then the endpoint's own.
    pub(crate) fn iax_signalling(&mut self, now: Instant) {
        loop {
            let Some(iax) = self.iax.as_mut() else {
                return;
            };
            let Some(ev) = iax.deferred.pop_front().or_else(|| iax.ep.poll_event()) else {
                return;
            };
            // Outside `on_iax` no RTP socket is at hand; voice here only reaches IAX2 legs.
            let _ = self.iax_event(ev, now, &mut |_| {});
        }
    }

    fn iax_event(
        &mut self,
        ev: Event,
        now: Instant,
        tx: &mut dyn FnMut(media::Transmit<'_>),
    ) -> Option<()> {
        match ev {
            Event::Incoming { call, peer, info } => return self.iax_new(call, peer, info, now),
            Event::RegisterRequest {
                call,
                peer,
                username,
                refresh,
                release,
            } => {
                let iax = self.iax.as_mut()?;
                let known = iax
                    .peer_named(&username)
                    .filter(|p| p.host == IaxHost::Dynamic)
                    .and_then(|p| p.secret.clone());
                let Some(secret) = known else {
                    let _ = iax.ep.reject(call, "No such peer", 21, now);
                    self.warn(format!(
                        "iax2: registration from {peer} as {username:?} refused: add it as [[iax2.peers]] with host = \"dynamic\" and a secret"
                    ));
                    return None;
                };
                let max = iax.shared.cfg.register_refresh;
                let refresh = refresh.unwrap_or(max).clamp(10, max);
                let _ = iax.ep.authenticate(call, &secret, now);
                let w = Waiting::Register {
                    name: username,
                    peer,
                    refresh,
                    release,
                };
                iax.waiting.insert(call, w);
            }
            Event::Authenticated { call } => {
                let iax = self.iax.as_mut()?;
                match iax.waiting.remove(&call)? {
                    Waiting::Call { info, peer, name } => {
                        let p = name.and_then(|n| iax.peer_named(&n).cloned());
                        self.iax_incoming(call, peer, info, p.as_ref(), now);
                    }
                    Waiting::Register {
                        name,
                        peer,
                        release: true,
                        ..
                    } => {
                        iax.note(format!("iax2: peer {name} at {peer} unregistered (REGREL)"));
                        let at = None;
                        iax.events.push_back(crate::io::Event::IaxPeer { name, at });
                        let _ = iax.ep.accept_registration(call, 0, now);
                    }
                    Waiting::Register {
                        name,
                        peer,
                        refresh,
                        ..
                    } => {
                        let until = now + Duration::from_secs(u64::from(refresh) + 10);
                        if iax.registry.is_new(&name, peer, now) {
                            iax.note(format!(
                                "iax2: peer {name} registered from {peer} for {refresh} s"
                            ));
                        }
                        let at = Some((peer, until));
                        iax.events.push_back(crate::io::Event::IaxPeer { name, at });
                        let _ = iax.ep.accept_registration(call, refresh, now);
                    }
                }
            }
            Event::Accepted { call, format } => {
                let (c, true) = self.iax_call(call)? else {
                    return None;
                };
                self.iax_set_format(c, true, format);
            }
            Event::Ringing { call } => {
                let (c, true) = self.iax_call(call)? else {
                    return None;
                };
                if !self.calls.get(c)?.early_media {
                    self.provisional(c, 180, "Ringing", false, now);
                }
            }
            Event::Answered { call } => {
                let (c, true) = self.iax_call(call)? else {
                    return None;
                };
                let losers = self.calls.get_mut(c)?.take_ringing();
                for mut leg in losers {
                    self.release_outbound(&mut leg, 26, true, now);
                }
                self.calls[c].callee_mut()?.confirmed = true;
                if !self.answer(c, now) {
                    return None;
                }
                let cl = &self.calls[c];
                if let (Some(a), Some(b)) = (cl.caller().media, cl.callee()?.media) {
                    self.media.bridge(a, b);
                }
                self.calls[c].wait = Wait::Forever;
                self.dial_answered(c);
            }
            Event::Voice { call, ts, data, .. } => {
                let m = self.iax_media_leg(call)?;
                self.iax_inject(m, Frame::Voice { ts, payload: &data }, now, tx);
            }
            Event::Dtmf { call, digit, begin } => {
                let m = self.iax_media_leg(call)?;
                self.iax_inject(m, Frame::Digit { digit, end: !begin }, now, tx);
            }
            Event::Control { call, subclass } => {
                let (c, true) = self.iax_call(call)? else {
                    return None;
                };
                let status = match subclass {
                    iax2::frame::control::BUSY => 486,
                    iax2::frame::control::CONGESTION => 503,
                    _ => return None,
                };
                if !self.calls.get(c)?.answered {
                    self.bridge_failed(c, status, now);
                }
            }
            Event::Hangup { call, reason } => {
                let iax = self.iax.as_mut()?;
                if iax.pokes.contains_key(&call) {
                    iax.poked(call, None, self.clock);
                    return None;
                }
                iax.waiting.remove(&call);
                let IaxCall {
                    call: c, outbound, ..
                } = iax.calls.remove(&call)?;
                let code = match &reason {
                    EndReason::Hangup { code, .. } | EndReason::Rejected { code, .. } => {
                        code.unwrap_or(16)
                    }
                    EndReason::Timeout => 102,
                    EndReason::AuthFailed => 21,
                    EndReason::Invalid => 41,
                };
                let cl = self.calls.get_mut(c)?;
                let answered = cl.answered;
                // The IAX2 call is over: its leg must not send HANGUP for it again.
                let leg = match outbound {
                    true => cl.callee_mut()?,
                    false => cl.caller_mut(),
                };
                leg.take_iax();
                let confirmed = leg.confirmed;
                if outbound && !(answered && confirmed) {
                    self.bridge_failed(c, Cause(code).sip_status(), now);
                } else {
                    let side = if outbound { "callee" } else { "caller" };
                    self.hangup(c, code, side, Some(outbound), now);
                }
            }
            Event::Pong { call, rtt } => self.iax.as_mut()?.poked(call, Some(rtt), self.clock),
            Event::Registered { reg, refresh, .. } => {
                let name = self.iax.as_ref()?.regs.get(&reg)?;
                let msg = format!("iax2: registered to {name} for {refresh} s");
                self.log(crate::io::Level::Info, None, msg);
            }
            Event::RegistrationFailed { reg, reason } => {
                let name = self.iax.as_ref()?.regs.get(&reg)?;
                self.warn(format!(
                    "iax2: registration to {name} failed ({reason:?}): check its host, username and secret in [[iax2.peers]]; retrying"
                ));
            }
            Event::Unregistered { reg } => {
                let name = self.iax.as_ref()?.regs.get(&reg)?;
                let msg = format!("iax2: unregistered from {name} (REGREL)");
                self.log(crate::io::Level::Info, None, msg);
            }
        }
        Some(())
    }

    /// The switch call and side of an IAX2 call.
    fn iax_call(&self, call: CallId) -> Option<(usize, bool)> {
        let c = self.iax.as_ref()?.calls.get(&call)?;
        Some((c.call, c.outbound))
    }

    /// The media leg of an IAX2 call.
    fn iax_media_leg(&self, call: CallId) -> Option<media::LegId> {
        self.iax.as_ref()?.calls.get(&call)?.media
    }

    /// A NEW that passed the call token check: authenticate a named peer (MD5), trust a peer
    /// without a secret by its address, take a guest if allowed, refuse the rest.
    fn iax_new(
        &mut self,
        call: CallId,
        peer: SocketAddr,
        info: iax2::CallInfo,
        now: Instant,
    ) -> Option<()> {
        let iax = self.iax.as_mut()?;
        let named = info
            .username
            .as_deref()
            .and_then(|u| iax.peer_named(u))
            .cloned();
        match named {
            Some(p) => match &p.secret {
                Some(secret) => {
                    let _ = iax.ep.authenticate(call, secret, now);
                    let name = Some(p.name);
                    iax.waiting.insert(call, Waiting::Call { info, peer, name });
                }
                None if matches!(p.host, IaxHost::Static(a) if a.ip() == peer.ip()) => {
                    self.iax_incoming(call, peer, info, Some(&p), now)
                }
                None => {
                    let _ = iax.ep.reject(call, "Unknown peer address", 21, now);
                }
            },
            None if iax.shared.cfg.allow_guests && info.username.is_none() => {
                self.iax_incoming(call, peer, info, None, now)
            }
            None => {
                let _ = iax.ep.reject(call, "No authority found", 21, now);
                self.warn(format!(
                    "iax2: call from {peer} as {:?} refused: add it as [[iax2.peers]] (or set iax2.allow_guests)",
                    info.username.unwrap_or_default()
                ));
            }
        }
        Some(())
    }

    /// An incoming IAX2 call that may proceed: ACCEPT with a format both sides have, a media
    /// leg in that format, and the dialplan from its called number.
    fn iax_incoming(
        &mut self,
        call: CallId,
        from: SocketAddr,
        info: iax2::CallInfo,
        peer: Option<&IaxPeer>,
        now: Instant,
    ) {
        let Some(iax) = self.iax.as_mut() else {
            return;
        };
        let ours: Vec<Format> = match peer {
            Some(p) => p.codecs.clone(),
            None => self
                .s
                .caps
                .codecs
                .iter()
                .filter_map(|c| Format::from_rtpmap(c.name, c.clock, c.fmtp))
                .collect(),
        };
        let ours: Vec<u32> = ours.into_iter().filter_map(iax_format).collect();
        // The caller's preferred format if we have it, else our first one it can take.
        let format = ours
            .iter()
            .copied()
            .find(|f| *f == info.format)
            .or_else(|| ours.iter().copied().find(|f| info.capability & f != 0));
        let Some(format) = format else {
            let _ = iax.ep.reject(call, "No common format", 58, now);
            return;
        };
        let exten = info.called_number.clone().unwrap_or_else(|| "s".into());
        let caller = info.calling_number.clone().unwrap_or_default();
        let context = peer
            .and_then(|p| p.context.clone())
            .unwrap_or_else(|| self.s.default_context.clone());
        let call_id = format!("iax2-{:016x}@strowger", self.rng.u64(..));
        let vars = Vars::for_call(&exten, &caller, &call_id, &self.s.data_dir);
        let Some(program) = self.dialplan.route(&context, &exten, &vars) else {
            let _ = iax.ep.reject(call, "No such extension", 1, now);
            return;
        };
        if self.overloaded || self.draining || !self.s.slots.try_take() {
            self.stats.calls_rejected_busy += 1;
            let _ = iax.ep.reject(call, "Switch congestion", 34, now);
            return;
        }
        if iax.ep.accept(call, format, now).is_err() {
            self.s.slots.give_back();
            return;
        }
        if peer.is_some_and(|p| p.trunk) {
            let _ = iax.ep.set_trunk(call, true);
        }
        self.stats.calls_started += 1;
        let name = info.calling_name.clone().unwrap_or_default();
        let cdr = Cdr {
            call_id: call_id.clone(),
            from: format!("\"{name}\" <iax2:{caller}@{from}>"),
            to: format!("<iax2:{exten}>"),
            exten,
            context,
            start: unix_seconds(self.clock.wall_at(now)),
            ..Cdr::default()
        };
        let leg = self.iax_leg(call_id, from, call);
        let c = Call::new(leg, None, None, program, vars, cdr, now, None);
        let id = self.calls.add(c);
        self.created_notice(id);
        if let Some(iax) = self.iax.as_mut() {
            let c = IaxCall {
                call: id,
                outbound: false,
                media: None,
            };
            iax.calls.insert(call, c);
        }
        if !self.ensure_media(id, Call::CALLER, now) {
            self.hangup(id, 34, "switch", None, now);
            return;
        }
        self.iax_set_format(id, false, format);
        self.calls.run_later(id);
    }

    /// A call leg signalled over IAX2 (`call_id` names it: the key of CDRs and per-call files).
    fn iax_leg(&mut self, call_id: String, peer: SocketAddr, call: CallId) -> Leg {
        let signal = Signal::Iax {
            call: Some(call),
            call_id,
            peer,
        };
        let sdp = LocalSession::new(self.rng.u64(..u64::MAX / 2), self.s.media_ip);
        Leg::new(signal, sdp, None, None)
    }

    /// `bridge iax2/PEER/EXTEN`: dials EXTEN at a configured peer (its fixed host, or where it
    /// registered from).
    pub(crate) fn dial_iax(&mut self, call: usize, target: &str, timeout: Duration, now: Instant) {
        let (name, exten) = target.split_once('/').unwrap_or((target, "s"));
        let Some(iax) = self.iax.as_mut() else {
            let msg = "bridge iax2/…: IAX2 is off: set iax2.listen (or --iax-listen)";
            self.warn_call(call, msg.into());
            return self.bridge_failed(call, 503, now);
        };
        let Some(p) = iax.peer_named(name).cloned() else {
            let msg = format!("bridge iax2/{target}: no [[iax2.peers]] named {name:?}");
            self.warn_call(call, msg);
            return self.bridge_failed(call, 404, now);
        };
        let addr = match p.host {
            IaxHost::Static(a) => a,
            IaxHost::Dynamic => match iax.registry.get(&p.name, now) {
                Some(a) => a,
                None => return self.bridge_failed(call, 480, now),
            },
        };
        let Some(&first) = p.codecs.first() else {
            return self.bridge_failed(call, 488, now);
        };
        let format = iax_format(first).unwrap_or(fmt::ULAW);
        let capability = p
            .codecs
            .iter()
            .filter_map(|f| iax_format(*f))
            .fold(0, |a, b| a | b);
        let c = &self.calls[call];
        let new = NewCall {
            called_number: exten.to_string(),
            calling_number: Some(c.vars.get("CALLER").unwrap_or_default().to_string())
                .filter(|s| !s.is_empty()),
            username: Some(p.username.clone()),
            secret: p.secret.clone(),
            format,
            capability,
            ..NewCall::default()
        };
        let Ok(id) = iax.ep.call(addr, &new, now) else {
            return self.bridge_failed(call, 503, now);
        };
        if p.trunk {
            let _ = iax.ep.set_trunk(id, true);
        }
        let c = IaxCall {
            call,
            outbound: true,
            media: None,
        };
        iax.calls.insert(id, c);
        let call_id = format!("iax2-{:016x}@strowger", self.rng.u64(..));
        let leg = self.iax_leg(call_id, addr, id);
        let leg = self.calls[call].set_callee(leg);
        if !self.ensure_media(call, leg, now) {
            return self.bridge_failed(call, 503, now);
        }
        self.iax_set_format(call, true, format);
        let until = now + timeout;
        let c = &mut self.calls[call];
        c.wait = Wait::Bridge { until };
        c.cdr.bridged_to = Some(format!("iax2/{target}"));
        self.calls.arm(call, until);
    }

    /// A new media leg for IAX2 call `call`: a frame leg (no socket; its frames go through
    /// `Iax::send_frame`), in µ-law until the call's format is known.
    pub(crate) fn iax_media(&mut self, call: CallId, now: Instant) -> media::LegId {
        let leg = self
            .media
            .add_frame_leg(Format::Pcmu, self.s.media_timeout, now);
        let Some(iax) = self.iax.as_mut() else {
            return leg;
        };
        if let Some(c) = iax.calls.get_mut(&call) {
            c.media = Some(leg);
        }
        let i = leg.index();
        if iax.legs.len() <= i {
            iax.legs.resize_with(i + 1, || None);
        }
        iax.legs[i] = Some(IaxMedia {
            call,
            format: fmt::ULAW,
            tx_ts: None,
        });
        leg
    }

    /// The leg's IAX2 format became `bit` (ACCEPT): the media leg follows, with its bridge.
    fn iax_set_format(&mut self, call: usize, outbound: bool, bit: u32) {
        let Some(format) = media_format(bit) else {
            return;
        };
        let Some(leg) = self.calls.get(call).and_then(|c| {
            if outbound {
                c.callee()
            } else {
                Some(c.caller())
            }
        }) else {
            return;
        };
        let Some(m) = leg.media else { return };
        if let Some(x) = self
            .iax
            .as_mut()
            .and_then(|i| i.legs.get_mut(m.index()))
            .and_then(Option::as_mut)
        {
            x.format = bit;
        }
        self.media.set_format(m, format);
    }

    /// Ends the IAX2 side of a leg: HANGUP if `notify` and the call is up, mappings dropped.
    pub(crate) fn iax_release(&mut self, leg: &mut Leg, q850: u8, notify: bool, now: Instant) {
        let Some(iax) = self.iax.as_mut() else {
            return;
        };
        if let Some(id) = leg.take_iax() {
            iax.calls.remove(&id);
            if notify {
                let _ = iax.ep.hangup(id, q850, now);
            }
        }
        if let Some(slot) = leg.media.and_then(|m| iax.legs.get_mut(m.index())) {
            *slot = None;
        }
    }

    /// The IAX2 legs of `call` after a transfer moved a leg into it or into the caller's place:
    /// each IAX2 call follows its leg (its call, and whether it is the caller's side).
    pub(crate) fn iax_rehome(&mut self, call: usize) {
        let (Some(iax), Some(c)) = (self.iax.as_mut(), self.calls.get(call)) else {
            return;
        };
        for (i, leg) in c.legs() {
            if let Some(x) = leg.iax().and_then(|id| iax.calls.get_mut(&id)) {
                x.call = call;
                x.outbound = i != Call::CALLER;
            }
        }
    }

    /// Answers an incoming IAX2 call (ANSWER), once.
    pub(crate) fn iax_answer(&mut self, call: usize, now: Instant) -> bool {
        let Some(c) = self.calls.get_mut(call) else {
            return false;
        };
        if c.answered {
            return true;
        }
        let (Some(iax), Some(id)) = (self.iax.as_mut(), c.caller().iax()) else {
            return false;
        };
        if iax.ep.answer(id, now).is_err() {
            return false;
        }
        c.answered = true;
        c.answered_at = Some(now);
        self.metrics
            .set_up(now.saturating_duration_since(c.started));
        let at = unix_seconds(self.clock.wall_at(now));
        c.cdr.answer = Some(at);
        c.caller_mut().confirmed = true;
        self.calls.answered(call, at);
        self.call_notice(call, crate::control::CALL, |call_id| Notice::Answered {
            call_id,
            contact: None,
        });
        true
    }

    /// RINGING to an IAX2 caller (for 180, and for 183: IAX2 media flows once accepted).
    pub(crate) fn iax_ringing(&mut self, call: usize, early: bool, now: Instant) {
        let Some(c) = self.calls.get_mut(call) else {
            return;
        };
        if c.answered {
            return;
        }
        c.early_media |= early;
        if let (Some(iax), Some(id)) = (self.iax.as_mut(), c.caller().iax()) {
            let _ = iax.ep.ringing(id, now);
        }
    }

    /// A voice frame or DTMF of an IAX2 leg, handed to its media leg as it came.
    fn iax_inject(
        &mut self,
        leg: media::LegId,
        frame: Frame<'_>,
        now: Instant,
        tx: &mut dyn FnMut(media::Transmit<'_>),
    ) {
        let Engine { media, iax, .. } = self;
        if let Some(iax) = iax.as_mut() {
            media.on_frame(leg, frame, now, &mut iax.output(now, tx));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use iax2::frame::{iax, Frame, FrameType};

    fn iax2(peers: &str) -> Iax2 {
        let toml = format!(
            "[iax2]\nlisten = \"127.0.0.1:4569\"\nqualify_s = 0\n{peers}\
             [[dialplan.contexts.default.rules]]\nexten = \"1\"\nsteps = [\"echo\"]\n"
        );
        let cfg = Config::from_str(&toml, "test.toml").unwrap_or_else(|e| panic!("{e:?}"));
        cfg.iax2
    }

    fn provider(name: &str, addr: &str) -> String {
        format!(
            "[[iax2.peers]]\nname = \"{name}\"\nhost = \"{addr}\"\nsecret = \"s\"\nregister = true\n"
        )
    }

    /// The IAX control frames `iax` sends now: (subclass, to).
    fn sent(iax: &mut Iax) -> Vec<(u32, SocketAddr)> {
        std::iter::from_fn(|| iax.poll_transmit())
            .filter_map(|t| match Frame::parse(&t.bytes) {
                Ok(Frame::Full(f)) if f.frame_type == FrameType::Iax => Some((f.subclass, t.to)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_reload_releases_a_removed_provider_registers_an_added_one_and_swaps_the_peers() {
        let now = Instant::now();
        let clock = crate::io::Clock::new(now, std::time::SystemTime::now());
        let (old, new) = (
            "127.0.0.9:4569".parse().unwrap(),
            "127.0.0.10:4569".parse().unwrap(),
        );
        let mut w0 = Iax::new(
            Shared::new(iax2(&provider("old", "127.0.0.9:4569"))),
            0,
            2,
            now,
        );
        let mut w1 = Iax::new(
            Shared::new(iax2(&provider("old", "127.0.0.9:4569"))),
            1,
            2,
            now,
        );
        assert_eq!(sent(&mut w0), [(iax::REGREQ, old)]);
        assert!(sent(&mut w1).is_empty(), "worker 0 registers");

        let cfg = iax2(&provider("new", "127.0.0.10:4569"));
        w0.reconfigure(&cfg, clock);
        w1.reconfigure(&cfg, clock);
        let out = sent(&mut w0);
        assert!(out.contains(&(iax::REGREL, old)), "{out:?}");
        assert!(out.contains(&(iax::REGREQ, new)), "{out:?}");
        assert!(sent(&mut w1).is_empty());
        for w in [&w0, &w1] {
            assert!(w.peer_named("old").is_none() && w.peer_named("new").is_some());
        }
        // The same configuration again changes nothing.
        w0.reconfigure(&cfg, clock);
        assert!(sent(&mut w0).is_empty());
    }
}
