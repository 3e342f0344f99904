//! The call engine of one worker: SIP transactions, calls and their legs, the dialplan
//! interpreter and the media engine, driven by messages, media ticks and time (sans-IO).
//!
//! A call holds its legs, each with its role (call.rs): the caller's (strowger is its UAS) and at
//! most one callee's (strowger is its UAC, for `bridge`) once answered; while ringing a user with
//! several contacts, one leg per contact (forks, bridge.rs). Every input ends in `Engine::process`, which runs the call's dialplan
//! steps until one has to wait (for playback, a timer, DTMF, the callee or the caller).

use crate::call::{Call, Leg, LegIdx, LegRef, Signal, Wait};
use crate::calls::Calls;
use crate::cdr::{unix_seconds, Cdr};
use crate::dialog::Dialog;
use crate::dialplan::Dialplan;
use crate::io::{Clock, Event, Input, Level, Output};
use crate::media_out::MediaQueue;
use crate::metrics::{Refusal, REFUSALS};
use crate::ports::Ports;
use sdp::{Caps, SessionDescription};
use sip::header::{parse_u32, HeaderName};
use sip::transaction::{Incoming, Peer, ServerTxId, Timers, Transactions, Transport, TxEvent};
use sip::validate::{check_request, check_response};
use sip::{Message, Method, ResponseBuilder};
use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// Methods strowger answers (sent in Allow).
pub const ALLOW: &str =
    "INVITE, ACK, CANCEL, BYE, OPTIONS, UPDATE, INFO, REGISTER, REFER, NOTIFY, SUBSCRIBE";
/// Option tags strowger implements (sent in Supported; `sip.accept_require` lists those a
/// request may require).
pub const SUPPORTED: &[&str] = &["timer", "replaces"];

/// Whether any worker may handle `msg` rather than its Call-ID's owner: a REGISTER keeps no
/// call state (its bindings live in the store; one that answers a challenge goes to the worker
/// that issued the nonce, `nonce_owner`), and its retransmissions come from the same address,
/// so the kernel hands them to the same worker. Handling it where it arrived spares half of all
/// REGISTERs a hand-off between workers (two thread wake-ups). (A retransmission handled by
/// another worker than the first copy is answered as a new request: the same bindings again.)
pub fn stateless(msg: &Message) -> bool {
    msg.method() == Some(&Method::Register)
}

/// The worker that issued the nonce a request's digest answer carries (a REGISTER's
/// Authorization, or the Proxy-Authorization of a request for the proxy role): only its table
/// counts that nonce's uses, so the request goes there. Other requests' Authorization is not
/// followed: a call lives on its Call-ID's worker, which challenges a nonce of another worker's
/// again (auth.rs), and a phone that sends its credentials along on every request of a dialog
/// must not have them take its BYE to a worker that does not know the call.
pub fn nonce_owner(msg: &Message, workers: usize) -> Option<usize> {
    if workers <= 1 || !msg.is_request() {
        return None;
    }
    let authorization = match msg.method() {
        Some(&Method::Register) => msg.header(HeaderName::Authorization),
        _ => None,
    };
    let v = authorization.or_else(|| msg.header(HeaderName::ProxyAuthorization))?;
    let bytes = v.as_bytes();
    // `nonce=` as a parameter of its own (not the tail of `cnonce=`).
    let at = (0..bytes.len().saturating_sub(5)).find(|&i| {
        bytes[i..i + 6].eq_ignore_ascii_case(b"nonce=")
            && (i == 0 || !bytes[i - 1].is_ascii_alphanumeric())
    })?;
    let value = v[at + 6..].trim_start().trim_start_matches('"');
    let w = usize::from(sip::auth::Nonces::issuer(value)?);
    (w < workers).then_some(w)
}

/// The worker that owns a Call-ID: a stable hash, so every worker computes the same owner.
pub fn owner(call_id: &str, workers: usize) -> usize {
    if workers <= 1 {
        return 0;
    }
    let mut h = rustc_hash::FxHasher::default();
    call_id.hash(&mut h);
    (h.finish() >> 32) as usize % workers
}

/// Engine settings taken from the configuration.
#[derive(Clone, Debug)]
pub struct Settings {
    pub timers: Timers,
    /// `general.max_calls`, shared by all workers.
    pub slots: Arc<crate::CallSlots>,
    pub user_agent: String,
    pub media_timeout: Option<Duration>,
    pub hold_timeout: Option<Duration>,
    pub caps: Caps,
    pub symmetric_rtp: bool,
    /// `rtp.srtp`: SDES-SRTP on legs signalled over TLS.
    pub srtp: crate::sdes::SrtpPolicy,
    /// `rtp.webrtc_public_address`: the host candidate of WebRTC legs.
    pub webrtc_public_address: Option<std::net::IpAddr>,
    /// The DTLS certificate this worker's WebRTC legs present (its own: a leg moved here
    /// from another worker shakes hands anew, crossing.rs).
    pub webrtc_certificate: std::sync::Arc<webrtc::Certificate>,
    /// How digits are taken and given (`rtp.dtmf`).
    pub dtmf: media::DtmfMode,
    /// RFC 4028: the interval strowger asks for and the smallest it accepts.
    pub session_expires: u32,
    pub min_se: u32,
    /// Option tags accepted in Require (others get 420).
    pub accept_require: Vec<String>,
    pub retry_after_s: u32,
    /// The first UDP listen address (IAX2's SDP, a last resort for Contact).
    pub media_ip: IpAddr,
    /// The media addresses per family, from the listen addresses and `rtp.advertise_*`.
    pub media: crate::media_addr::MediaAddrs,
    pub default_context: String,
    /// The addresses SIP listens on, for Via and Contact.
    pub listen: Vec<(Transport, SocketAddr)>,
    pub data_dir: String,
    /// Which worker this is and how many there are (outbound Call-IDs must hash back here).
    pub worker: usize,
    pub workers: usize,
    /// `[registrar]`, with the secret that signs every worker's nonces.
    pub registrar: crate::registrar::Registrar,
    /// `[proxy]`: domains served as a stateful proxy.
    pub proxy: crate::config::Proxy,
    /// `[[dispatch]]`: the node sets an edge sends requests to.
    pub dispatch: Arc<[crate::config::DispatchSet]>,
    /// `[security]`: trusted peers and limits.
    pub security: crate::config::Security,
    /// `[[trunks]]`, shared by the workers.
    pub trunks: Arc<[crate::config::Trunk]>,
    /// `rtp.shared_ports`: legs that can be told apart by address share a few port pairs.
    pub shared_ports: bool,
    /// The largest SIP datagram strowger sends: `sip.max_message_size`, at most what UDP holds.
    pub max_datagram: usize,
    /// What the workers share so a call can join a call of another worker (handoff.rs): a
    /// fresh one here; the process gives every worker the same.
    pub rendezvous: Arc<crate::Rendezvous>,
    /// `[parking.LOT]` and `[pickup_groups]`.
    pub parking: Arc<crate::config::Parking>,
    /// `[queues]`: the waiting callers and agents. One board for all workers: the shell gives
    /// every worker's settings the same one (a board of its own per worker would split the
    /// queues).
    pub queues: Arc<crate::queues::Board>,
    /// The music-on-hold classes, loaded once by the shell and shared by the workers (only the
    /// built-in tune until the shell sets them).
    pub music: Arc<crate::moh::Music>,
    /// `[sounds]` and `[menus]` (ivr.rs).
    pub ivr: Arc<crate::config::Ivr>,
    /// `[voicemail]`: the boxes and their limits.
    pub voicemail: Arc<crate::config::Voicemail>,
    /// `[conferences.NAME]`: the rooms' PINs and sizes.
    pub conferences: Arc<crate::config::Conferences>,
    /// This node's URI (`cluster.node_uri`) when conference rooms, call queues and park slots
    /// are claimed in a store shared with other nodes; None: they stay on this node. The shell sets it.
    pub cluster: Option<Arc<str>>,
}

impl Settings {
    /// Worker `worker`'s settings: the configuration's, with what the workers share (the call
    /// slots, the registrar) and the addresses strowger listens and sends media on.
    pub fn new(
        cfg: &crate::config::Config,
        listen: &[(Transport, SocketAddr)],
        media_ip: IpAddr,
        slots: Arc<crate::CallSlots>,
        registrar: crate::registrar::Registrar,
        worker: usize,
        workers: usize,
    ) -> Settings {
        Settings {
            timers: Timers {
                t1: cfg.sip.t1,
                t2: cfg.sip.t2,
                t4: cfg.sip.t4,
            },
            slots,
            retry_after_s: cfg.general.retry_after_s,
            accept_require: cfg.sip.accept_require.clone(),
            user_agent: cfg.sip.user_agent.clone(),
            media_timeout: cfg.rtp.media_timeout,
            hold_timeout: cfg.rtp.hold_timeout,
            caps: cfg.rtp.caps(),
            symmetric_rtp: cfg.rtp.symmetric,
            srtp: cfg.rtp.srtp,
            webrtc_public_address: cfg.rtp.webrtc_public_address,
            webrtc_certificate: webrtc::Certificate::of_worker(worker),
            dtmf: cfg.rtp.dtmf,
            session_expires: cfg.sip.session_expires,
            min_se: cfg.sip.min_se,
            media_ip,
            media: crate::media_addr::MediaAddrs::new(listen, &cfg.rtp, media_ip),
            default_context: cfg.dialplan.default_context().to_string(),
            listen: listen.to_vec(),
            data_dir: cfg.general.data_dir.display().to_string(),
            worker,
            workers,
            registrar,
            proxy: cfg.proxy.clone(),
            dispatch: cfg.dispatch.clone().into(),
            security: cfg.security.clone(),
            trunks: cfg.trunks.clone().into(),
            shared_ports: cfg.rtp.shared_ports,
            max_datagram: cfg.sip.max_message_size.min(MAX_UDP_PAYLOAD),
            rendezvous: Arc::default(),
            parking: Arc::new(cfg.parking.clone()),
            queues: Arc::new(crate::queues::Board::new(&cfg.queues)),
            music: Arc::default(),
            ivr: Arc::new(cfg.ivr.clone()),
            voicemail: Arc::new(cfg.voicemail.clone()),
            conferences: Arc::new(cfg.conferences.clone()),
            cluster: None,
        }
    }
}

/// The largest UDP payload over IPv4 (65,535 less the IP and UDP headers).
pub const MAX_UDP_PAYLOAD: usize = 65_507;

/// Counters a worker keeps (for logs, the API and tests).
#[derive(Debug, Default, Clone, Copy)]
pub struct Stats {
    pub calls_started: u64,
    pub calls_rejected_busy: u64,
    pub requests_rejected: u64,
    pub responses_dropped: u64,
}

/// Counts an operator warning's occurrences and lets it through at most every 10 s, so a flood
/// of one failure costs a counter, not a log line each.
#[derive(Default)]
pub(crate) struct Throttle {
    last: Option<Instant>,
    count: u64,
}

impl Throttle {
    /// One more occurrence; `Some(n)` (occurrences since the last report) when it is time to say so.
    pub(crate) fn note(&mut self, now: Instant) -> Option<u64> {
        self.count += 1;
        if self
            .last
            .is_some_and(|t| now.saturating_duration_since(t) < Duration::from_secs(10))
        {
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.count))
    }
}

pub struct Engine {
    pub(crate) s: Settings,
    pub(crate) dialplan: Arc<Dialplan>,
    pub(crate) txs: Transactions,
    pub media: media::Engine,
    /// The calls, the maps that find them and their timers (calls.rs).
    pub(crate) calls: Calls,
    pub(crate) out: VecDeque<(Peer, Arc<[u8]>)>,
    pub(crate) rng: fastrand::Rng,
    pub stats: Stats,
    /// What the process's metrics read of this worker (metrics.rs).
    pub(crate) metrics: crate::metrics::Counts,
    pub(crate) overloaded: bool,
    /// The process is draining (`Input::Drain`): new calls are refused.
    pub(crate) draining: bool,
    /// Calls refused for want of an RTP port, logged at most every 10 s.
    pub(crate) no_port: Throttle,
    /// SRTP packets dropped for failing authentication or replay (sdes.rs).
    pub(crate) srtp_rejects: Throttle,
    /// Calls refused before they began, by [`Refusal`], logged at most every 10 s each.
    refusals: [Throttle; REFUSALS.len()],
    /// Media send errors reported by the shell, logged at most every 10 s (send_errors.rs).
    pub(crate) send_errors: Throttle,
    /// The registrar's store operations, nonces and keep-alives (registrar.rs).
    pub(crate) registrar: crate::registrar::RegistrarState,
    /// IAX2 legs, when `[iax2]` is on (iax.rs).
    pub(crate) iax: Option<Box<crate::iax::Iax>>,
    /// The proxy role's forwarded requests (proxy.rs).
    pub(crate) proxy: crate::proxy::Proxy,
    /// The dispatch sets' health and the requests dispatched (dispatch.rs).
    pub(crate) dispatch: crate::dispatch::Dispatch,
    /// What the engine asks of the shell, taken by `poll_output`.
    pub(crate) events: VecDeque<Event>,
    /// Media packets of the last inputs, taken by `poll_output`.
    pub(crate) media_out: MediaQueue,
    /// RTP port pairs the shell bound for legs.
    pub(crate) ports: Ports,
    /// Sources no leg announced heard on shared ports, and the moves they caused.
    pub(crate) strays: crate::strays::Strays,
    /// The time of the input being handled (wall time for CDRs and nonces).
    pub(crate) clock: Clock,
    /// Prompts loaded, and files asked of the shell (apps.rs).
    pub(crate) files: crate::apps::Files,
    /// Trunks to providers: their servers, registrations (trunks.rs).
    pub(crate) trunks: crate::trunks::Trunks,
    /// Rates, failed authentications, bans and scanners by source (guard.rs).
    pub(crate) guard: crate::guard::Guard,
    /// Admission's compiled patterns and the INVITEs waiting for their credentials (auth.rs).
    pub(crate) auth: crate::auth::AuthState,
    /// Call-IDs pinned to this worker (handoff.rs).
    pub(crate) handoffs: crate::handoff::HandOffs,
    /// This worker's parked calls (parking.rs).
    pub(crate) parking: crate::parking::Parking,
    /// This worker's calls on the ring board (pickup.rs).
    pub(crate) pickup: crate::pickup::Pickup,
    /// Calls joined by a retrieval or a pickup (joins.rs).
    pub(crate) joins: crate::joins::Joins,
    /// This worker's callers in call queues (queues.rs).
    pub(crate) queued: crate::queues::Queued,
    /// The calls in voicemail boxes (voicemail.rs).
    pub(crate) voicemail: crate::voicemail::Voicemail,
    /// The subscriptions to voicemail boxes (mwi.rs).
    pub(crate) mwi: crate::mwi::Mwi,
    /// This worker's conference rooms (conference.rs).
    pub(crate) conferences: crate::conference::Conferences,
    /// The shared store's claims as this worker last saw it (cluster.rs).
    pub(crate) cluster: crate::cluster::Cluster,
    /// The event types a client subscribes to (`Input::Watch`): make those `Event::Notice`s
    /// (control.rs).
    pub(crate) watched: u8,
}

impl Engine {
    /// A worker's engine; `now`/`wall`: the time it starts at.
    pub fn new(s: Settings, dialplan: Arc<Dialplan>, now: Instant, wall: SystemTime) -> Engine {
        let shared_ports = s.shared_ports;
        let mut engine = Engine {
            txs: Transactions::new(s.timers),
            media: media::Engine::new(),
            dialplan,
            calls: Calls::default(),
            out: VecDeque::new(),
            rng: fastrand::Rng::new(),
            stats: Stats::default(),
            metrics: Default::default(),
            overloaded: false,
            draining: false,
            no_port: Throttle::default(),
            srtp_rejects: Throttle::default(),
            refusals: Default::default(),
            send_errors: Throttle::default(),
            registrar: crate::registrar::RegistrarState::new(&s.registrar, s.worker),
            iax: None,
            proxy: crate::proxy::Proxy::new(&s.registrar.secret),
            dispatch: crate::dispatch::Dispatch::new(&s.dispatch, now),
            events: VecDeque::new(),
            media_out: MediaQueue::default(),
            ports: Ports::new(shared_ports),
            strays: Default::default(),
            clock: Clock::new(now, wall),
            files: crate::apps::Files::default(),
            trunks: crate::trunks::Trunks::new(&s.trunks),
            guard: crate::guard::Guard::new(&s.security),
            auth: crate::auth::AuthState::default(),
            handoffs: Default::default(),
            parking: Default::default(),
            pickup: Default::default(),
            joins: Default::default(),
            queued: crate::queues::Queued::default(),
            voicemail: Default::default(),
            mwi: Default::default(),
            conferences: Default::default(),
            cluster: Default::default(),
            watched: 0,
            s,
        };
        engine.trunks_start(now);
        engine.media.set_dtmf_mode(engine.s.dtmf);
        engine
    }

    /// Handles one input at `clock`; then take what it produced with [`Engine::poll_output`].
    pub fn handle_input(&mut self, clock: Clock, input: Input<'_>) {
        self.clock = clock;
        let now = clock.now;
        match input {
            Input::Sip {
                msg,
                peer,
                local,
                late,
            } => self.on_sip(msg, peer, local, late, now),
            Input::TooLarge { bytes, peer } => self.too_large(bytes, peer),
            Input::Rtp { leg, data, src } => self.on_rtp(leg, data, src, now),
            Input::Rtcp { leg, data, src } => {
                self.media
                    .on_rtcp(media::LegId::from_index(leg), data, src, now);
            }
            Input::StrayRtp { port, src } => {
                self.metrics.stray_rtp();
                self.strays.note(port, src, now);
            }
            Input::MediaSendFailed { leg, packets } => self.on_send_failed(leg, packets, now),
            Input::Iax { from, data } => self.on_iax(from, data, now),
            Input::MediaTick { due, phase, phases } => self.tick_phase(due, now, phase, phases),
            Input::Process => self.process(now),
            Input::Timeout => self.handle_timeout(now),
            Input::Store { token, result } => self.on_store_result(token, result, now),
            Input::Prompt { token, result } => self.on_prompt(token, result, now),
            Input::Recording { token, result } => self.on_recording(token, result, now),
            Input::Resolved { token, result } => self.on_resolved(token, result, now),
            Input::Voicemail {
                token,
                user,
                result,
            } => self.on_voicemail(token, user, result, now),
            Input::MailboxChanged { user, mailbox } => self.mwi_box(&user, &mailbox, false, now),
            Input::MediaPorts(ports) => self.ports.add_spare(ports),
            Input::IaxPeer { name, at } => {
                if let Some(iax) = self.iax.as_mut() {
                    iax.peer_moved(name, at, clock);
                }
            }
            Input::TrunkServer {
                trunk,
                server,
                down_until,
            } => self.trunk_server(trunk, server, down_until),
            Input::Unreachable(peer) if peer.transport.is_websocket() => {
                self.websocket_gone(peer, now)
            }
            Input::Unreachable(peer) => self.trunk_unreachable(peer, now),
            Input::Ban { source, until } => self.guard.ban(source, until),
            Input::Overloaded(on) => self.overloaded = on,
            Input::Reload(r) => self.reload(&r, now),
            Input::Drain => self.draining = true,
            Input::Shutdown => self.shutdown(now),
            Input::Crossing(c) => self.on_crossing(*c, now),
            Input::Api { token, command } => self.on_command(token, command, now),
            Input::Watch(on) => self.watched = on,
            Input::Unregistered(aor) => self.registrar.forget(&aor),
        }
    }

    /// What the last inputs produced, one at a time, until [`Output::Timeout`].
    pub fn poll_output(&mut self) -> Output<'_> {
        // ACKs and stateless replies before the transactions' messages: an ACK to a 2xx leaves
        // before a BYE that ends the same dialog at once (RFC 3261 §13.2.2.4).
        if let Some((peer, bytes)) = self.out.pop_front() {
            self.metrics.sip_out(&bytes);
            return Output::Sip(peer, bytes.into());
        }
        if let Some(t) = self.txs.poll_transmit() {
            self.metrics.sip_out(&t.bytes);
            return Output::Sip(t.to, t.bytes);
        }
        if let Some(t) = self.iax.as_mut().and_then(|i| i.poll_transmit()) {
            return Output::Iax(t);
        }
        if let Some(ev) = self.events.pop_front() {
            return Output::Event(ev);
        }
        if let Some(ev) = self.iax.as_mut().and_then(|i| i.poll_event()) {
            return Output::Event(ev);
        }
        if self.media_out.has_more() {
            return match self.media_out.pop() {
                Some(t) => Output::Media(t),
                None => Output::Timeout(None),
            };
        }
        Output::Timeout(self.next_deadline())
    }

    /// The Call-IDs pinned to a worker, which dispatch asks before hashing (pins.rs).
    pub fn pins(&self) -> &crate::Pins {
        &self.s.rendezvous.pins
    }

    /// Starts noting the calls set up, answered and ended in a journal (journal.rs), for the
    /// shell to write with [`Engine::take_journal`].
    pub fn keep_journal(&mut self) {
        self.calls.journal = Some(crate::journal::Journal::default());
    }

    /// Hands `write` what the journal has to write at `wall`, if anything (nothing without
    /// a journal).
    pub fn take_journal(
        &mut self,
        wall: std::time::SystemTime,
        write: impl FnOnce(crate::journal::Write),
    ) {
        if self.calls.journal.is_some() {
            let ms = wall
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            self.calls.take_journal(ms.as_millis() as u64, write);
        }
    }

    /// Whether legs share a few port pairs (`rtp.shared_ports`).
    pub fn shares_ports(&self) -> bool {
        self.s.shared_ports
    }

    /// Spare RTP port pairs left; the shell binds more when this runs low.
    pub fn spare_ports(&self) -> usize {
        self.ports.spare()
    }

    /// An operator message about `call_id`'s call, or about the switch.
    pub(crate) fn log(&mut self, level: Level, call_id: Option<&str>, message: String) {
        self.events.push_back(Event::Log {
            level,
            call_id: call_id.map(str::to_string),
            message,
        });
    }

    pub(crate) fn warn(&mut self, message: String) {
        self.log(Level::Warn, None, message);
    }

    /// A warning about call `call`, with its Call-ID.
    pub(crate) fn warn_call(&mut self, call: usize, message: String) {
        let call_id = self
            .calls
            .get(call)
            .map(|c| c.caller().call_id().to_string());
        self.log(Level::Warn, call_id.as_deref(), message);
    }

    pub fn active_calls(&self) -> usize {
        self.calls.len()
    }

    /// This worker's counts for the metrics, its levels (calls, RTP totals, transcodings)
    /// taken now. The shell reads it once a second, not per packet.
    pub fn metrics(&mut self) -> &crate::metrics::Counts {
        let [legs, media_legs, timers] = self.calls.gauges();
        let table = [legs, self.txs.len(), media_legs, timers];
        self.metrics
            .take_levels(self.calls.len(), table, &self.media);
        self.metrics.take_nodes(self.dispatch.node_counts());
        &self.metrics
    }

    /// What the call table holds (tests check that calls leave nothing behind).
    pub fn table_counts(&self) -> crate::TableCounts {
        self.calls.counts()
    }

    /// When `handle_timeout` wants to run next.
    fn next_deadline(&self) -> Option<Instant> {
        let call = self.calls.next_timer();
        let keepalive = self.registrar.next_deadline();
        [
            call,
            self.txs.poll_timeout(),
            self.iax_deadline(),
            keepalive,
            self.trunks.next_deadline(),
            self.pins_deadline(),
            self.parking.next_deadline(),
            self.conferences.next_deadline(),
            self.queued.next_deadline(),
            self.mwi.next_deadline(),
            self.dispatch.next_deadline(),
            self.proxy.next_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The Retry-After header of a 503 for a new call refused when full, counted as such.
    fn refuse_busy(&mut self) -> [(&'static str, String); 1] {
        self.stats.calls_rejected_busy += 1;
        self.retry_after()
    }

    /// When a refused client may try again (`general.retry_after_s`).
    pub(crate) fn retry_after(&self) -> [(&'static str, String); 1] {
        [("Retry-After", self.s.retry_after_s.to_string())]
    }

    pub(crate) fn tag(&mut self) -> String {
        format!("{:016x}", self.rng.u64(..))
    }

    pub(crate) fn branch(&mut self) -> String {
        format!("z9hG4bK-sw{:016x}", self.rng.u64(..))
    }

    /// A datagram larger than `max_message_size`: 513 if it frames as a request, else dropped.
    fn too_large(&mut self, bytes: &[u8], peer: Peer) {
        self.metrics.too_large();
        if let Ok(m) = Message::parse(bytes, true) {
            if m.is_request() && m.method() != Some(&Method::Ack) {
                let b = ResponseBuilder::new(&m, 513, "Message Too Large", Some(peer.addr), None);
                self.out.push_back((peer, b.finish(None).into()));
            }
        }
    }

    // ---------------------------------------------------------------------------------------
    // SIP in
    // ---------------------------------------------------------------------------------------

    /// A SIP message from `peer` to our address `local`. `late`: it waited too long in its socket
    /// (a signalling backlog), so if it opens a new call it is refused with a stateless 503, while
    /// requests of calls in progress are served. Refusing by each request's own wait admits what
    /// the worker can serve in time and sheds the rest, so a flood neither stalls the queue nor
    /// starves admission.
    fn on_sip(&mut self, msg: Message, peer: Peer, local: SocketAddr, late: bool, now: Instant) {
        self.metrics.sip_in(&msg);
        if msg.is_request() && self.screen(&msg, peer, now) {
            return;
        }
        if msg.is_request() {
            self.on_request(msg, peer, local, late, now);
        } else {
            self.on_response(msg, now);
        }
        self.run_pending(now);
    }

    pub(crate) fn reject_stateless(
        &mut self,
        req: &Message,
        peer: Peer,
        status: u16,
        reason: &str,
        extra: &[(&str, String)],
    ) {
        if req.method() == Some(&Method::Ack) {
            return;
        }
        let tag = self.tag();
        let mut b = ResponseBuilder::new(req, status, reason, Some(peer.addr), Some(&tag));
        for (n, v) in extra {
            b.header_str(n, v);
        }
        b.header_str("Server", &self.s.user_agent);
        self.out.push_back((peer, b.finish(None).into()));
    }

    /// Past capacity or draining, a new INVITE (no To tag, no transaction yet) is refused
    /// without creating a transaction: the 503 costs no state, and a retransmitted INVITE is
    /// simply refused again.
    fn refuses_statelessly(&mut self, msg: &Message, late: bool) -> Option<Refusal> {
        let why = if self.draining {
            Refusal::Draining
        } else if self.overloaded {
            Refusal::Overloaded
        } else if late {
            Refusal::SignallingLate
        } else if self.s.slots.in_use() >= self.s.slots.max() {
            Refusal::MaxCalls
        } else {
            return None;
        };
        (msg.method() == Some(&Method::Invite)
            && msg.to_addr().ok().is_some_and(|t| t.tag().is_none())
            && !self.txs.has_server(msg))
        .then_some(why)
    }

    /// Counts a new call refused with 503 by its reason, and says so once per 10 s per reason.
    pub(crate) fn note_refusal(&mut self, why: Refusal, now: Instant) {
        self.metrics.refused(why);
        if let Some(n) = self.refusals[why as usize].note(now) {
            self.warn(format!(
                "new calls refused with 503 ({n} since the last report): {}",
                why.explain()
            ));
        }
    }

    fn on_request(
        &mut self,
        msg: Message,
        peer: Peer,
        local: SocketAddr,
        late: bool,
        now: Instant,
    ) {
        let accept: Vec<&str> = self.s.accept_require.iter().map(String::as_str).collect();
        if let Err(r) = check_request(&msg, &accept) {
            self.stats.requests_rejected += 1;
            let mut extra = vec![(
                "Warning",
                format!("399 strowger \"{}\"", r.warning.replace('"', "'")),
            )];
            if r.status == 501 || r.status == 405 {
                extra.push(("Allow", ALLOW.to_string()));
            }
            if !r.unsupported.is_empty() {
                extra.push(("Unsupported", r.unsupported.join(", ")));
            }
            self.reject_stateless(&msg, peer, r.status, r.reason, &extra);
            return;
        }
        let Some(msg) = self.hand_off(msg, peer, local, late, now) else {
            return;
        };
        let Some(msg) = self.dispatch_hand_off(msg, peer, local, late) else {
            return;
        };
        if let Some(why) = self.refuses_statelessly(&msg, late) {
            self.note_refusal(why, now);
            let retry = self.refuse_busy();
            self.reject_stateless(&msg, peer, 503, "Service Unavailable", &retry);
            return;
        }
        if self.challenge_statelessly(&msg, peer) || self.challenge_call_statelessly(&msg, peer) {
            self.unpin_challenged(&msg);
            return;
        }
        match self.txs.on_request(&msg, peer, now) {
            Incoming::New(stx) => self.new_request(stx, msg, peer, local, now),
            Incoming::Ack => {
                if !self.proxy_ack(&msg, peer, now) {
                    self.on_ack(&msg, now)
                }
            }
            Incoming::Cancel { cancel, invite } => {
                if !self.proxy_cancel(cancel, invite, &msg, peer, now)
                    && !self.cancel_authenticating(cancel, invite, &msg, peer, now)
                {
                    self.on_cancel(cancel, invite, &msg, peer, now)
                }
            }
            Incoming::Retransmission => self.metrics.retransmission(),
            Incoming::AckNon2xx | Incoming::Invalid => {}
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn respond(
        &mut self,
        stx: ServerTxId,
        req: &Message,
        peer: Peer,
        status: u16,
        reason: &str,
        to_tag: Option<&str>,
        extra: &[(&str, String)],
        body: Option<&[u8]>,
        now: Instant,
    ) {
        let mut bytes = self.response_bytes(req, peer, status, reason, to_tag, extra, body);
        let mut status = status;
        if peer.transport == Transport::Udp && bytes.len() > self.s.max_datagram {
            // It would be lost on the way (EMSGSIZE): say so rather than leave the peer waiting.
            let w = format!(
                "399 strowger \"the {status} response ({} bytes) does not fit in a UDP datagram \
                 ({} bytes, sip.max_message_size); use TCP\"",
                bytes.len(),
                self.s.max_datagram
            );
            status = 513;
            let reason = "Message Too Large";
            bytes = self.response_bytes(req, peer, status, reason, to_tag, &[("Warning", w)], None);
        }
        self.txs.respond(stx, status, bytes, now);
    }

    /// A final response in a new dialog role (a To tag of ours) with no body: what every
    /// refusal of a request sends.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn reply(
        &mut self,
        stx: ServerTxId,
        req: &Message,
        peer: Peer,
        status: u16,
        reason: &str,
        extra: &[(&str, String)],
        now: Instant,
    ) {
        let tag = self.tag();
        self.respond(stx, req, peer, status, reason, Some(&tag), extra, None, now);
    }

    fn new_request(
        &mut self,
        stx: ServerTxId,
        msg: Message,
        peer: Peer,
        local: SocketAddr,
        now: Instant,
    ) {
        let method = msg.method().cloned().unwrap_or(Method::Options);
        let call_id = msg
            .header(HeaderName::CallId)
            .unwrap_or_default()
            .to_string();
        let to_tag = msg.to_addr().ok().and_then(|n| n.tag().map(str::to_string));
        let existing = self.calls.leg_by_call_id(&call_id);
        if (method != Method::Register || self.dispatches_register(&msg))
            && existing.is_none()
            && self.proxies(&msg)
        {
            return self.proxy_request(stx, msg, peer, now);
        }
        match (method, to_tag, existing) {
            (Method::Invite, None, None) => self.new_call(stx, msg, peer, local, now),
            (Method::Invite, None, Some(_)) => {
                // A second initial INVITE with a known Call-ID but another branch: a fork or loop.
                self.respond(stx, &msg, peer, 482, "Loop Detected", None, &[], None, now);
            }
            (Method::Register, _, _) => self.on_register(stx, msg, peer, now),
            (Method::Options, None, _) => {
                let tag = self.tag();
                let extra = [
                    ("Allow", ALLOW.to_string()),
                    ("Accept", "application/sdp".to_string()),
                    ("Supported", SUPPORTED.join(", ")),
                ];
                self.respond(stx, &msg, peer, 200, "OK", Some(&tag), &extra, None, now);
            }
            (m, Some(_), Some(at)) if in_dialog_method(&m) => {
                self.in_dialog(stx, msg, peer, at.call, at.leg, now);
            }
            (Method::Refer, None, _) => {
                let w = "399 strowger \"REFER is taken only inside a call\"";
                let extra = [("Warning", w.to_string())];
                self.reply(stx, &msg, peer, 403, "Forbidden", &extra, now);
            }
            (Method::Subscribe, _, _) => self.on_subscribe(stx, msg, peer, local, now),
            (m, _, _) if in_dialog_method(&m) => {
                self.respond(
                    stx,
                    &msg,
                    peer,
                    481,
                    "Call/Transaction Does Not Exist",
                    None,
                    &[],
                    None,
                    now,
                );
            }
            _ => {
                let tag = self.tag();
                self.respond(
                    stx,
                    &msg,
                    peer,
                    405,
                    "Method Not Allowed",
                    Some(&tag),
                    &[("Allow", ALLOW.to_string())],
                    None,
                    now,
                );
            }
        }
    }

    fn new_call(
        &mut self,
        stx: ServerTxId,
        msg: Message,
        peer: Peer,
        local: SocketAddr,
        now: Instant,
    ) {
        let reject = |e: &mut Engine, status: u16, reason: &str, extra: &[(&str, String)]| {
            e.reply(stx, &msg, peer, status, reason, extra, now)
        };
        // A request carrying one of our own branches came back to us: a routing loop.
        if msg
            .all(HeaderName::Via)
            .skip(1)
            .any(|v| v.contains("branch=z9hG4bK-sw"))
        {
            return reject(self, 482, "Loop Detected", &[]);
        }
        // Cheap early refusal when full; the slot itself is taken when the call is created.
        if self.overloaded || self.s.slots.in_use() >= self.s.slots.max() {
            let retry = self.refuse_busy();
            return reject(self, 503, "Service Unavailable", &retry);
        }
        if let Some((status, reason)) = content_refusal(&msg) {
            let extra = [("Accept", "application/sdp".to_string())];
            return reject(self, status, reason, &extra);
        }
        let session_expires = match self.session_timer(&msg) {
            Ok(se) => se,
            Err(()) => {
                return reject(
                    self,
                    422,
                    "Session Interval Too Small",
                    &[("Min-SE", self.s.min_se.to_string())],
                )
            }
        };
        self.admit_call(stx, msg, peer, local, session_expires, now);
    }

    /// A new call admitted (auth.rs: a trusted peer's, the public context's or a user's) with
    /// the rule it runs: its SDP answered, an RTP slot taken, and its program started.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start_call(
        &mut self,
        stx: ServerTxId,
        msg: Message,
        peer: Peer,
        local: SocketAddr,
        session_expires: Option<u32>,
        a: crate::auth::Admitted,
        now: Instant,
    ) {
        let reject = |e: &mut Engine, status: u16, reason: &str, extra: &[(&str, String)]| {
            e.reply(stx, &msg, peer, status, reason, extra, now)
        };
        let offer = if msg.body().is_empty() {
            None
        } else {
            match SessionDescription::parse(msg.body()) {
                Ok(o) => Some(o),
                Err(e) => {
                    return reject(
                        self,
                        400,
                        "Bad Request",
                        &[(
                            "Warning",
                            format!("399 strowger \"SDP line {}: {}\"", e.line, e.reason),
                        )],
                    )
                }
            }
        };
        let from = msg.header(HeaderName::From).unwrap_or_default();

        let local_tag = self.tag();
        let contact = format!(
            "<sip:strowger@{}{}>",
            SocketAddr::new(self.s.media.announce(local.ip()), local.port()),
            transport_param(peer.transport)
        );
        let Some(dialog) = Dialog::uas(&msg, peer, local_tag, contact) else {
            return reject(self, 400, "Bad Request", &[]);
        };
        // The answer is of the offer's family, or of the signalling's without an offer.
        let remote = offer.as_ref().and_then(crate::media_addr::offered_addr);
        let media = self.s.media.for_remote(remote.unwrap_or(peer.addr.ip()));
        let mut sdp_session = self.local_session(media.announce, peer.transport);
        let negotiated = match &offer {
            Some(o) => match sdp_session.answer(o, &self.s.caps, 0) {
                Ok((_, n)) => Some(n),
                Err(e) => {
                    let warning = match e {
                        sdp::NegotiationError::Srtp => self.srtp_refusal(peer.transport),
                        _ => format!(
                            "305 strowger \"no common codec: strowger offers {}\"",
                            offered_codecs(&self.s.caps)
                        ),
                    };
                    return reject(self, 488, "Not Acceptable Here", &[("Warning", warning)]);
                }
            },
            None => None,
        };

        if msg.header_named("Replaces").is_some() {
            let leg = Leg::new(Signal::Sip(dialog), sdp_session, offer, negotiated);
            return self.invite_replaces(stx, &msg, peer, leg, &a.context, now);
        }
        let crate::auth::Admitted {
            context,
            exten,
            vars,
            program,
            user,
            trying,
            trunk,
            dtmf,
        } = a;
        if !self.s.slots.try_take() {
            let retry = self.refuse_busy();
            return reject(self, 503, "Service Unavailable", &retry);
        }
        if !trying {
            self.respond(stx, &msg, peer, 100, "Trying", None, &[], None, now);
        }
        self.stats.calls_started += 1;
        let cdr = Cdr {
            call_id: dialog.call_id.clone(),
            from: from.to_string(),
            to: msg.header(HeaderName::To).unwrap_or_default().to_string(),
            exten,
            context,
            trunk,
            user: user.as_ref().map(|u| u.name.clone()),
            start: unix_seconds(self.clock.wall_at(now)),
            ..Cdr::default()
        };
        let mut leg = Leg::new(Signal::Sip(dialog), sdp_session, offer, negotiated);
        leg.dtmf = dtmf;
        let mut call = Call::new(
            leg,
            Some(msg),
            Some(stx),
            program,
            vars,
            cdr,
            now,
            session_expires,
        );
        call.user = user;
        let id = self.calls.add(call);
        self.created_notice(id);
        self.calls.run_later(id);
    }

    /// RFC 4028: the interval for this call, or Err when the caller's is below Min-SE (→ 422).
    fn session_timer(&self, msg: &Message) -> Result<Option<u32>, ()> {
        let Some(se) = msg.header(HeaderName::SessionExpires) else {
            return Ok(None);
        };
        let secs = se
            .split(';')
            .next()
            .and_then(parse_u32)
            .unwrap_or(self.s.session_expires);
        if secs < self.s.min_se {
            return Err(());
        }
        Ok(Some(secs))
    }

    #[allow(clippy::too_many_arguments)]
    fn in_dialog(
        &mut self,
        stx: ServerTxId,
        msg: Message,
        peer: Peer,
        call: usize,
        at: LegIdx,
        now: Instant,
    ) {
        let method = msg.method().cloned().unwrap_or(Method::Options);
        let Some(c) = self.calls.get_mut(call) else {
            return;
        };
        let Some(dialog) = c.leg_mut(at).and_then(Leg::dialog_mut) else {
            return;
        };
        if !dialog.accept_remote_cseq(&msg) {
            self.respond(
                stx,
                &msg,
                peer,
                500,
                "Server Internal Error",
                None,
                &[("Warning", "399 strowger \"CSeq out of order\"".into())],
                None,
                now,
            );
            return;
        }
        match method {
            Method::Bye => {
                self.respond(stx, &msg, peer, 200, "OK", None, &[], None, now);
                if self.transferor_left(LegRef { call, leg: at }, now) {
                    return;
                }
                let outbound = at != Call::CALLER;
                let side = if outbound { "callee" } else { "caller" };
                let cause = msg
                    .header(HeaderName::Reason)
                    .and_then(|r| r.split("cause=").nth(1))
                    .and_then(|c| c.split(';').next())
                    .and_then(|c| c.trim().parse::<u8>().ok())
                    .unwrap_or(16);
                self.hangup(call, cause, side, Some(outbound), now);
            }
            Method::Invite | Method::Update => self.reoffer(stx, msg, peer, call, at, now),
            Method::Refer => self.on_refer(stx, msg, peer, LegRef { call, leg: at }, now),
            Method::Info => self.on_info(stx, &msg, peer, LegRef { call, leg: at }, now),
            _ => self.respond(
                stx,
                &msg,
                peer,
                200,
                "OK",
                None,
                &[("Allow", ALLOW.to_string())],
                None,
                now,
            ),
        }
    }

    /// A re-INVITE or UPDATE: answer the new offer (hold, resume, new address or codec) for this
    /// leg alone; strowger anchors the media, so the other leg needs no renegotiation.
    #[allow(clippy::too_many_arguments)]
    fn reoffer(
        &mut self,
        stx: ServerTxId,
        msg: Message,
        peer: Peer,
        call: usize,
        at: LegIdx,
        now: Instant,
    ) {
        let caps = self.s.caps.clone();
        let se = self.session_timer(&msg).ok().flatten();
        let Some(leg) = self.calls.get(call).and_then(|c| c.leg(at)) else {
            return;
        };
        // RFC 3311 §5.2: a new offer while the caller's last one waits for our answer (an early
        // UPDATE after a 180 without SDP) is refused with 500 and Retry-After.
        let unanswered = leg.remote_offer.is_some() && leg.local_body.is_none();
        if unanswered && !msg.body().is_empty() {
            let extra = [("Retry-After", "1".to_string())];
            let reason = "Offer Pending";
            return self.respond(stx, &msg, peer, 500, reason, None, &extra, None, now);
        }
        // An early dialog's first offer: the leg needs its RTP port for the answer.
        if leg.media.is_none() && leg.iax().is_none() && !self.ensure_media(call, at, now) {
            let extra = self.retry_after();
            let reason = "Service Unavailable";
            return self.respond(stx, &msg, peer, 503, reason, None, &extra, None, now);
        }
        let Some(c) = self.calls.get_mut(call) else {
            return;
        };
        let Some(leg) = c.leg_mut(at) else {
            return;
        };
        let Some(contact) = leg.dialog().map(|d| d.local_contact.clone()) else {
            return;
        };
        let mut held = None;
        let body = if msg.body().is_empty() {
            if msg.method() == Some(&Method::Invite) {
                // Offer in our 200, answer in the ACK (RFC 3264 §5 / RFC 3261 §13.2.1).
                let offer = leg.sdp.offer(&caps, leg.port);
                let body = offer.to_string();
                leg.our_offer = Some(offer);
                Some(body)
            } else {
                None
            }
        } else {
            let Ok(offer) = SessionDescription::parse(msg.body()) else {
                self.respond(stx, &msg, peer, 400, "Bad Request", None, &[], None, now);
                return;
            };
            match leg.sdp.answer(&offer, &caps, leg.port) {
                Ok((answer, neg)) => {
                    if let Some(m) = leg.media {
                        self.media
                            .update_leg(m, leg_update(&neg, self.s.symmetric_rtp));
                        crate::sdes::Keying::of(Some(&neg), &leg.sdp, &self.s.webrtc_certificate)
                            .apply(&mut self.media, m, now);
                    }
                    held = Some(crate::hold::holds(&neg));
                    leg.negotiated = Some(neg);
                    Some(answer.to_string())
                }
                Err(_) => {
                    self.respond(
                        stx,
                        &msg,
                        peer,
                        488,
                        "Not Acceptable Here",
                        None,
                        &[],
                        None,
                        now,
                    );
                    return;
                }
            }
        };
        let mut extra = vec![("Contact", contact), ("Allow", ALLOW.to_string())];
        if let Some(se) = se {
            c.refresh_session(se, now);
            extra.push(("Session-Expires", format!("{se};refresher=uac")));
            extra.push(("Require", "timer".to_string()));
            if let Some(d) = c.session_deadline {
                self.calls.arm(call, d);
            }
        }
        let is_invite = msg.method() == Some(&Method::Invite);
        if is_invite {
            let bytes = self.response_bytes(
                &msg,
                peer,
                200,
                "OK",
                None,
                &extra,
                body.as_deref().map(str::as_bytes),
            );
            self.txs.respond(stx, 200, bytes, now);
        } else {
            self.respond(
                stx,
                &msg,
                peer,
                200,
                "OK",
                None,
                &extra,
                body.as_deref().map(str::as_bytes),
                now,
            );
        }
        if let Some(held) = held {
            self.set_held(call, at, held);
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn response_bytes(
        &self,
        req: &Message,
        peer: Peer,
        status: u16,
        reason: &str,
        to_tag: Option<&str>,
        extra: &[(&str, String)],
        body: Option<&[u8]>,
    ) -> Vec<u8> {
        let mut b = ResponseBuilder::new(req, status, reason, Some(peer.addr), to_tag);
        for (n, v) in extra {
            b.header_str(n, v);
        }
        b.header_str("Server", &self.s.user_agent);
        b.finish(body.map(|b| ("application/sdp", b)))
    }

    /// The address strowger is reached at on the transport and address family of `peer`.
    pub(crate) fn local_for(&self, peer: Peer) -> SocketAddr {
        self.s
            .listen
            .iter()
            .find(|(t, a)| *t == peer.transport && a.is_ipv6() == peer.addr.is_ipv6())
            .or_else(|| self.s.listen.first())
            .map_or(SocketAddr::new(self.s.media_ip, 5060), |(_, a)| {
                SocketAddr::new(self.s.media.announce(a.ip()), a.port())
            })
    }

    /// Media settings of a leg from what its SDP negotiated (or a silent leg until it does).
    pub(crate) fn leg_config(&self, call: usize, at: LegIdx) -> media::LegConfig {
        let neg = self
            .calls
            .get(call)
            .and_then(|c| c.leg(at))
            .and_then(|l| l.negotiated.as_ref());
        leg_config(neg, &self.s)
    }

    fn on_ack(&mut self, msg: &Message, now: Instant) {
        let call_id = msg.header(HeaderName::CallId).unwrap_or_default();
        let Some(at) = self.calls.leg_by_call_id(call_id) else {
            return;
        };
        let symmetric = self.s.symmetric_rtp;
        let Some(c) = self.calls.get_mut(at.call) else {
            return;
        };
        let Some(leg) = c.leg_mut(at.leg) else {
            return;
        };
        if msg.body().is_empty() {
            return;
        }
        let Some(offer) = leg.our_offer.take() else {
            return;
        };
        let Ok(answer) = SessionDescription::parse(msg.body()) else {
            return;
        };
        match leg.sdp.accept_answer(&offer, &answer) {
            Ok(neg) => {
                if let Some(m) = leg.media {
                    self.media.update_leg(m, leg_update(&neg, symmetric));
                    crate::sdes::Keying::of(Some(&neg), &leg.sdp, &self.s.webrtc_certificate)
                        .apply(&mut self.media, m, now);
                }
                let held = crate::hold::holds(&neg);
                leg.negotiated = Some(neg);
                self.set_held(at.call, at.leg, held);
            }
            // The answer to the offer of our 2xx (the INVITE had none) cannot be taken: the
            // call ends with a BYE (RFC 3261 §13.2.2.4 from the answerer's side).
            Err(e) => {
                self.note_refused_answer(at.call, e, "the call");
                self.hangup(at.call, 88, "switch", None, now);
            }
        }
    }

    fn on_cancel(
        &mut self,
        cancel: ServerTxId,
        invite: Option<ServerTxId>,
        msg: &Message,
        peer: Peer,
        now: Instant,
    ) {
        let call = invite.and_then(|i| self.calls.call_by_server_tx(i));
        match call {
            Some(call) if self.calls.get(call).is_some_and(|c| c.invite_tx.is_some()) => {
                self.respond(cancel, msg, peer, 200, "OK", None, &[], None, now);
                self.hangup(call, 127, "caller", Some(false), now);
            }
            _ => self.respond(
                cancel,
                msg,
                peer,
                481,
                "Call/Transaction Does Not Exist",
                None,
                &[],
                None,
                now,
            ),
        }
    }

    fn on_response(&mut self, msg: Message, now: Instant) {
        if check_response(&msg).is_err() {
            self.stats.responses_dropped += 1;
            return;
        }
        let Some((ctx, first)) = self.txs.on_response(&msg, now) else {
            return;
        };
        if self.proxy_response(ctx, &msg, first, now)
            || self.trunk_response(ctx, &msg, now)
            || self.probe_answered(ctx, &msg)
        {
            return;
        }
        if msg.status().is_some_and(|s| s >= 200) && self.mwi_answered(ctx, msg.status()) {
            return;
        }
        if self.calls.is_orphan(ctx) {
            let status = msg.status().unwrap_or(500);
            if status >= 200 {
                if let Some(dialog) = self.calls.take_orphan(ctx).filter(|_| status < 300) {
                    self.orphan_answer(dialog, &msg, now);
                }
            }
            return;
        }
        let status = msg.status().unwrap_or(500);
        if !first {
            // A retransmitted 2xx: our ACK was lost; send it again. Its transaction's entry went
            // with the first 2xx, so the leg is found by its dialog's Call-ID.
            if (200..300).contains(&status) {
                let leg = msg
                    .header(HeaderName::CallId)
                    .and_then(|id| self.calls.leg_by_call_id(id))
                    .and_then(|at| self.calls.get(at.call)?.leg(at.leg));
                if let Some(ack) = leg.and_then(|l| l.ack.clone()) {
                    self.out.push_back(ack);
                }
            }
            return;
        }
        let Some(at) = self.calls.leg_by_client_tx(ctx, status >= 200) else {
            return;
        };
        if self.reinvite_glare(at, ctx, status, now) {
            return;
        }
        if self.moving(at) {
            return self.moved_response(at, &msg, status, now);
        }
        // A call the API placed, while unanswered: strowger's INVITE to one of FROM's contacts.
        if self
            .calls
            .get(at.call)
            .is_some_and(Engine::unanswered_origin)
        {
            return self.origin_response(at, &msg, status, now);
        }
        if at.leg == Call::CALLER {
            return;
        }
        if !self.select_fork(at, ctx) {
            return;
        }
        self.trunk_heard(at);
        if status >= 300 && self.trunk_retry(at, Some(&msg), status, now) {
            return;
        }
        self.bridge_response(at.call, &msg, status, now);
    }

    // ---------------------------------------------------------------------------------------
    // Time and media
    // ---------------------------------------------------------------------------------------

    fn on_rtp(&mut self, leg: usize, data: &[u8], src: SocketAddr, now: Instant) {
        let leg = media::LegId::from_index(leg);
        let out = &mut self.media_out;
        let tx: &mut dyn FnMut(media::Transmit<'_>) = &mut |t| out.push(t);
        match self.iax.as_mut() {
            Some(iax) => self
                .media
                .on_rtp(leg, data, src, now, &mut iax.output(now, tx)),
            None => self.media.on_rtp(leg, data, src, now, tx),
        }
    }

    /// The media leg whose far end sends RTP from `src` (legs sharing a socket).
    pub fn rtp_leg_from(&self, src: SocketAddr) -> Option<usize> {
        self.media.rtp_leg_from(src).map(media::LegId::index)
    }

    /// See `media::Engine::prefetch`.
    pub fn prefetch_leg(&self, leg: usize) {
        self.media.prefetch(media::LegId::from_index(leg));
    }

    /// The media leg whose far end sends RTCP from `src` (legs sharing a socket).
    pub fn rtcp_leg_from(&self, src: SocketAddr) -> Option<usize> {
        self.media.rtcp_leg_from(src).map(media::LegId::index)
    }

    /// Whether the leg's RTP must be read every frame interval (its packets are relayed).
    pub fn relays_rtp(&self, leg: usize) -> bool {
        self.media.relays(media::LegId::from_index(leg))
    }

    /// One of `phases` passes per 20 ms frame interval, due on the shell's tick grid at `due`
    /// and run at `now` (see `media::Engine::tick_phase`).
    fn tick_phase(&mut self, due: Instant, now: Instant, phase: usize, phases: usize) {
        self.metrics.tick(now.saturating_duration_since(due));
        let out = &mut self.media_out;
        let tx: &mut dyn FnMut(media::Transmit<'_>) = &mut |t| out.push(t);
        match self.iax.as_mut() {
            Some(iax) => self
                .media
                .tick_phase(due, now, phase, phases, &mut iax.output(now, tx)),
            None => self.media.tick_phase(due, now, phase, phases, tx),
        }
        if phase == 0 && self.strays.due(now) {
            self.move_unheard(now);
        }
    }

    /// Media events, then dialplan steps that became runnable.
    fn process(&mut self, now: Instant) {
        self.iax_signalling(now);
        while let Some(ev) = self.media.poll_event() {
            self.media_event(ev, now);
        }
        self.run_pending(now);
    }

    fn media_event(&mut self, ev: media::MediaEvent, now: Instant) {
        use media::MediaEvent as E;
        let leg = match &ev {
            E::PlaybackDone { leg }
            | E::Dtmf { leg, .. }
            | E::MediaTimeout { leg }
            | E::RemoteLatched { leg, .. }
            | E::Talking { leg, .. }
            | E::RecordingSilent { leg }
            | E::SrtpRejected { leg }
            | E::DtlsFailed { leg, .. } => leg.index(),
        };
        let Some(call) = self.calls.leg_by_media(leg).map(|at| at.call) else {
            return;
        };
        let Some(c) = self.calls.get_mut(call) else {
            return;
        };
        match ev {
            E::PlaybackDone { .. } => {
                if matches!(c.wait, Wait::Playback) {
                    c.wait = Wait::None;
                    self.calls.run_later(call);
                } else if c.api_prompt {
                    self.api_prompt_done(call);
                } else {
                    self.queue_playback_done(call, now);
                }
            }
            E::Dtmf {
                digit, duration_ms, ..
            } => {
                let at = self.calls.leg_by_media(leg).expect("found above");
                self.digit(at, digit, now);
                self.digit_to_peer(at, digit, duration_ms, false, now);
            }
            E::MediaTimeout { .. } => self.hangup(call, 41, "switch", None, now),
            E::RemoteLatched { .. } => {}
            E::Talking { talking, .. } => self.conference_talking(call, talking),
            E::RecordingSilent { .. } if matches!(c.wait, Wait::Record { .. }) => {
                self.voicemail_silent(call, now);
                self.stop_recording(call);
                self.calls.run_later(call);
                self.run_pending(now);
            }
            E::RecordingSilent { .. } => {}
            E::SrtpRejected { .. } => self.srtp_rejected(call, now),
            E::DtlsFailed { error, .. } => {
                self.warn_call(call, format!("{error}: the call carries no media and ends"));
                self.hangup(call, 41, "switch", None, now);
            }
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.iax_timeout(now);
        self.send_keepalives(now);
        self.tell_expired(now);
        self.trunk_timers(now);
        self.sweep_pins(now);
        self.park_timeouts(now);
        self.conference_renewals(now);
        self.queue_tick(now);
        self.mwi_timeouts(now);
        self.dispatch_timers(now);
        self.proxy_timers(now);
        self.txs.handle_timeout(now);
        while let Some(ev) = self.txs.poll_event() {
            match ev {
                TxEvent::Timeout(ctx) if self.proxy_timeout(ctx, now) => {}
                TxEvent::Timeout(ctx) if self.trunk_tx_timeout(ctx, now) => {}
                TxEvent::Timeout(ctx) if self.mwi_answered(ctx, None) => {}
                TxEvent::Terminated(sip::transaction::TxId::Client(ctx)) => {
                    self.proxy_forget(ctx);
                    self.calls.take_orphan(ctx);
                }
                TxEvent::Timeout(ctx) => {
                    if let Some(at) = self.calls.leg_by_client_tx(ctx, true) {
                        if self.moving(at) {
                            self.move_failed(at, 408);
                        } else if self
                            .calls
                            .get(at.call)
                            .is_some_and(Engine::unanswered_origin)
                        {
                            self.origin_leg_failed(at, 408, now);
                        } else if self.select_fork(at, ctx) && !self.trunk_retry(at, None, 408, now)
                        {
                            self.leg_failed(at.call, 408, now);
                        }
                    }
                }
                TxEvent::ServerNoAck(stx) => {
                    if let Some(call) = self.calls.call_by_server_tx(stx) {
                        self.hangup(call, 102, "switch", None, now);
                    }
                }
                TxEvent::AckTimeout { call_id, .. } => {
                    if let Some(at) = self.calls.leg_by_call_id(&call_id) {
                        self.hangup(at.call, 102, "switch", None, now);
                    }
                }
                _ => {}
            }
        }
        while let Some(call) = self.calls.pop_due(now) {
            self.trunk_silence(call, now);
            self.transfer_timer(call, now);
            self.reinvite_timer(call, now);
            let c = &mut self.calls[call];
            if c.session_deadline.is_some_and(|d| d <= now) {
                self.hangup(call, 102, "switch", None, now);
                continue;
            }
            match c.wait {
                Wait::Timer(until) if until <= now => {
                    c.wait = Wait::None;
                    self.calls.run_later(call);
                }
                Wait::Record { until } if until <= now => {
                    self.stop_recording(call);
                    self.calls.run_later(call);
                }
                Wait::Bridge { until } if until <= now => {
                    self.bridge_failed(call, 408, now);
                }
                Wait::Answer { until } if until <= now => self.origin_failed(call, 408, now),
                Wait::Digits => self.ivr_timeout(call, now),
                _ => {}
            }
        }
        self.run_pending(now);
    }

    /// Hangs up every call (process shutdown).
    fn shutdown(&mut self, now: Instant) {
        for id in self.calls.ids() {
            self.hangup(id, 16, "switch", None, now);
        }
        self.iax_shutdown(now);
        self.trunks_shutdown(now);
    }
}

/// The requests strowger takes within a dialog of its calls (others get 405); outside one, 481.
fn in_dialog_method(m: &Method) -> bool {
    matches!(
        m,
        Method::Bye
            | Method::Invite
            | Method::Update
            | Method::Info
            | Method::Options
            | Method::Refer
            | Method::Notify
    )
}

/// 415 for a body that is not SDP, 406 for an Accept that excludes SDP: what a new INVITE is
/// refused for before anything else is asked of it (RFC 3261 §21.4.7, §21.4.19).
pub(crate) fn content_refusal(msg: &Message) -> Option<(u16, &'static str)> {
    if !msg.body().is_empty() {
        let ct = msg
            .header(HeaderName::ContentType)
            .unwrap_or("application/sdp");
        if !ct.to_ascii_lowercase().starts_with("application/sdp") {
            return Some((415, "Unsupported Media Type"));
        }
    }
    let takes_sdp = |a: &str| {
        let a = a.to_ascii_lowercase();
        a.starts_with("application/sdp") || a.starts_with("*/*") || a.starts_with("application/*")
    };
    if msg.count(HeaderName::Accept) > 0 && !msg.all(HeaderName::Accept).any(takes_sdp) {
        return Some((406, "Not Acceptable"));
    }
    None
}

pub(crate) fn transport_param(t: Transport) -> &'static str {
    match t {
        Transport::Udp => "",
        Transport::Tcp => ";transport=tcp",
        Transport::Tls => ";transport=tls",
        Transport::Ws => ";transport=ws",
        Transport::Wss => ";transport=wss",
    }
}

/// Media settings from negotiated SDP; without SDP yet, a leg that waits for the peer's address.
pub(crate) fn leg_config(neg: Option<&sdp::Negotiated>, s: &Settings) -> media::LegConfig {
    media::LegConfig {
        payload_type: neg.map_or(0, |n| n.pt),
        format: neg.map_or(media::Format::Pcmu, |n| format_of(&n.codec)),
        dtmf_pt: neg.and_then(|n| n.dtmf_pt),
        // A WebRTC leg's media goes where ICE checks come from.
        remote: neg.filter(|n| n.webrtc.is_none()).map(|n| n.remote),
        remote_rtcp: neg.filter(|n| n.webrtc.is_none()).map(|n| n.remote_rtcp),
        symmetric: s.symmetric_rtp,
        media_timeout: s.media_timeout,
        hold_timeout: s.hold_timeout,
        ptime_ms: neg.map_or(20, |n| n.ptime),
    }
}

pub(crate) fn leg_update(neg: &sdp::Negotiated, symmetric: bool) -> media::LegUpdate {
    media::LegUpdate {
        payload_type: neg.pt,
        format: format_of(&neg.codec),
        dtmf_pt: neg.dtmf_pt,
        remote: neg.webrtc.is_none().then_some(neg.remote),
        remote_rtcp: neg.webrtc.is_none().then_some(neg.remote_rtcp),
        sends: neg.direction.sends(),
        receives: neg.direction.receives(),
        symmetric,
    }
}

/// The media format of a negotiated codec (PCMU for anything the codec crate does not know,
/// which the configuration never offers).
fn format_of(codec: &sdp::Codec) -> media::Format {
    media::Format::from_rtpmap(codec.name, codec.clock, codec.fmtp).unwrap_or(media::Format::Pcmu)
}

/// `PCMU, PCMA, speex/16000`: the codecs we offer, for a Warning header.
fn offered_codecs(caps: &sdp::Caps) -> String {
    let names: Vec<String> = caps
        .codecs
        .iter()
        .map(|c| match c.static_pt {
            Some(_) => c.name.to_string(),
            None => format!("{}/{}", c.name, c.clock),
        })
        .collect();
    names.join(", ")
}

#[cfg(test)]
mod throttle_tests {
    use super::Throttle;
    use std::time::{Duration, Instant};

    #[test]
    fn a_warning_repeats_at_most_every_ten_seconds_with_its_count() {
        let t0 = Instant::now();
        let mut t = Throttle::default();
        assert_eq!(t.note(t0), Some(1));
        for i in 1..=500 {
            assert_eq!(t.note(t0 + Duration::from_millis(i * 10)), None);
        }
        assert_eq!(t.note(t0 + Duration::from_secs(10)), Some(501));
        assert_eq!(t.note(t0 + Duration::from_secs(11)), None);
    }
}
