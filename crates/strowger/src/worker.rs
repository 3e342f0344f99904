//! One worker thread: its own SIP sockets, its own calls and their RTP sockets, one event loop.
//!
//! Calls belong to the worker that Call-ID hashes to; a SIP message that the kernel hands to
//! another worker is passed over the inbox channel, so no lock sits on the call path. A
//! REGISTER is handled where it arrives while that worker keeps up (`Worker::deliver`). TCP
//! connections live on worker 0 (TCP is a small share of SIP traffic; see docs/architecture.md).

use crate::logging::{self, Dir};
use crate::overload::{Change, LoadWatch};
use crate::rtp_io::{MediaSockets, SHARED_BATCH};
use crate::sip_io::{self, Conn, ReadOutcome, TcpLimits};
use mio::net::{TcpListener, UdpSocket};
use mio::{Events, Interest, Poll, Token, Waker};
use sip::transaction::{Peer, Transport, Wire};
use sip::{Message, ParseError};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use switch::engine::Engine;
use switch::iax::{Route, Transmit};
use switch::{Clock, Event, Input, Level, Output};

const WAKER: Token = Token(0);
const IAX: Token = Token(999);
const UDP_BASE: usize = 1;
const LISTEN_BASE: usize = 1_000;
const CONN_BASE: usize = 1_000_000;
/// The media pass runs every 5 ms over a quarter of the legs, so each leg is still served every
/// 20 ms while the calls' frames leave in four bursts instead of one. One burst for 400 calls
/// overflowed a receiver's default socket buffer (SIPp lost ~20 % of echoed packets); ten
/// phases of 2 ms cost a quarter more CPU in wake-ups for no fewer drops (bench/RESULTS.md).
/// Ticks with no media to send come once per frame interval ([`Worker::needs_phases`]).
const TICK: Duration = Duration::from_millis(5);
const PHASES: u64 = 4;
/// SIP (and IAX2) datagrams taken per recvmmsg(2).
const SIP_BATCH: usize = 16;
/// Batches one socket may take in a row before timers, the inbox and other sockets get a turn.
const SIP_BURST: usize = 16;
/// A leg that relays nothing has its RTP read every this many frame intervals (80 ms: four
/// packets of 20 ms per read, DTMF seen at most 60 ms later).
const LAZY_RTP: u64 = 4;
/// A leg's own RTCP socket is read every this many visits (1 s; legs take turns). Reports come
/// every few seconds and carry their kernel arrival stamps, so round-trip times stay exact: a
/// read every 10th visit (200 ms) with the time of the read, as before, cost five system calls
/// per call-second and counted up to 200 ms of waiting in the socket into every round trip.
const RTCP_VISITS: u64 = 50;
/// A shared pair's RTCP socket is read every this many ticks (200 ms; pairs take turns): a few
/// hundred legs' reports arrive there at a few a second each, so a read every tick (5 ms) found
/// it empty nearly always, a system call per pair and tick for nothing. Reports keep their
/// kernel arrival stamps, so round-trip times stay exact.
const SHARED_RTCP_TICKS: u64 = 40;

/// What workers send each other.
pub enum Envelope {
    /// A message for a call this worker owns.
    Sip {
        msg: Message,
        peer: Peer,
        local: SocketAddr,
        /// It waited past [`Worker::sip_late`] in the socket.
        late: bool,
    },
    /// Bytes for a TCP or TLS peer (connections live on worker 0).
    TcpSend { to: Peer, bytes: Wire },
    /// An IAX2 datagram read from the IAX2 port by worker 0, for a call this worker owns.
    Iax { from: SocketAddr, bytes: Vec<u8> },
    /// Where an IAX2 peer registered from (or that it left), told by the worker that accepted
    /// its REGREQ: every worker keeps a copy (`switch::Event::IaxPeer`).
    IaxPeer {
        name: String,
        at: Option<(SocketAddr, Instant)>,
    },
    /// A TCP peer could not be reached (worker 0 holds the connections; every worker may have
    /// sent to it).
    Unreachable(Peer),
    /// A trunk's server stopped answering or answered again, told by the worker that saw it
    /// (`switch::Event::TrunkServer`).
    TrunkServer {
        trunk: usize,
        server: Peer,
        down_until: Option<Instant>,
    },
    /// The result of a store operation this worker's engine asked for.
    Store {
        token: u64,
        result: switch::registrar::StoreResult,
    },
    /// The answer to a DNS lookup this worker's engine asked for (`Event::Resolve`).
    Resolved {
        token: u64,
        result: Result<switch::trunks::Resolved, String>,
    },
    /// A source another worker banned (`switch::Event::Ban`): dropped here too.
    Ban { source: IpAddr, until: Instant },
    /// A prompt this worker's engine asked for, rendered by the speech thread (tts.rs).
    Prompt {
        token: u64,
        result: Result<Arc<media::Prompt>, String>,
    },
    /// The answer to a voicemail box operation this worker's engine asked for (voicemail_io.rs).
    Voicemail {
        token: u64,
        user: String,
        result: Result<store::voicemail::Mailbox, String>,
    },
    /// A voicemail box another worker's or node's operation changed
    /// (`switch::Input::MailboxChanged`).
    MailboxChanged {
        user: String,
        mailbox: store::voicemail::Mailbox,
    },
    /// Shrink the store connection's buffers, hand this worker's cache of freed chunks to a
    /// thread that returns them to their heaps (`crate::allocator::release_thread_cache`), and
    /// that thread here, to be joined before the trim.
    ReleaseCache(std::sync::mpsc::Sender<std::thread::JoinHandle<()>>),
    /// The TCP peer authenticated on another worker (connections live on worker 0).
    TcpAuthenticated { peer: SocketAddr },
    /// A transfer message from another worker's engine (`switch::Event::Crossing`).
    Crossing(Box<switch::Crossing>),
    /// A new configuration (crate::reload): the engine takes it.
    Reload(Arc<switch::Reload>),
    /// The process drains (SIGTERM): the engine refuses new calls.
    Drain,
    /// A control API command (api/), answered on `reply` when the engine has run it.
    Api {
        command: switch::control::Command,
        reply: tokio::sync::oneshot::Sender<switch::control::Reply>,
    },
    /// The event types some event-stream client subscribes to (`switch::Input::Watch`).
    Watch(u8),
    /// An AOR unregistered through the API (`switch::Input::Unregistered`).
    Unregistered(String),
}

/// Counters shared with the process (read by tests and the bench through the log on exit).
#[derive(Default)]
pub struct Counters {
    /// SIP datagrams and WebSocket messages that are no SIP message, dropped.
    pub dropped_unparseable: AtomicU64,
    /// SIP datagrams and TCP messages dropped unread: banned sources, or over their rate.
    pub dropped_guard: AtomicU64,
    /// TCP connections accepted and closed at once (banned source, or over a cap).
    pub tcp_refused: AtomicU64,
    /// TLS connections closed because their handshake stopped half way (`sip.tls_handshake_s`).
    pub tls_handshakes_cut: AtomicU64,
    /// Whole-call recordings that ended incomplete (audio dropped or not written).
    pub recordings_incomplete: Arc<AtomicU64>,
}

/// The workers' inboxes. A wake-up is a write to the target's eventfd and often a context
/// switch, so it is paid once per burst, not per message: senders post, then wake each target
/// once, and a target already woken and not yet draining is not woken again.
pub struct Mailboxes {
    senders: Vec<Sender<Envelope>>,
    wakers: Vec<Arc<Waker>>,
    /// Set by the wake that is pending; cleared by the target just before it drains.
    woken: Vec<AtomicBool>,
}

impl Mailboxes {
    pub fn new(senders: Vec<Sender<Envelope>>, wakers: Vec<Arc<Waker>>) -> Mailboxes {
        let woken = senders.iter().map(|_| AtomicBool::new(false)).collect();
        Mailboxes {
            senders,
            wakers,
            woken,
        }
    }

    /// Posts and wakes at once (for threads that send one message at a time).
    pub fn send(&self, worker: usize, env: Envelope) {
        self.post(worker, env);
        self.wake(worker);
    }

    /// Queues a message without waking the target: call [`Mailboxes::wake`] after the burst.
    pub fn post(&self, worker: usize, env: Envelope) {
        let _ = self.senders[worker].send(env);
    }

    pub fn wake(&self, worker: usize) {
        if !self.woken[worker].swap(true, Ordering::AcqRel) {
            let _ = self.wakers[worker].wake();
        }
    }

    /// Called by `worker` before draining its inbox: a message posted after this wakes it anew.
    fn draining(&self, worker: usize) {
        self.woken[worker].store(false, Ordering::Release);
    }
}

/// A worker's place among the others: its id, its inbox and everyone's, and what the process
/// shares (the stop flag, the counters, the metrics board).
pub struct Crew {
    pub id: usize,
    pub workers: usize,
    pub inbox: Receiver<Envelope>,
    pub mail: Arc<Mailboxes>,
    pub stop: Arc<AtomicBool>,
    pub counters: Arc<Counters>,
    pub board: Arc<crate::metrics::Board>,
    /// Where the engine's notices go for the API's event stream.
    pub feed: Arc<crate::api::Feed>,
}

impl Crew {
    /// A crew of one worker (for a worker built alone, e.g. in a test), with `poll`'s waker.
    pub fn alone(poll: &Poll) -> std::io::Result<Crew> {
        let (tx, inbox) = std::sync::mpsc::channel();
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        Ok(Crew {
            id: 0,
            workers: 1,
            inbox,
            mail: Arc::new(Mailboxes::new(vec![tx], vec![waker])),
            stop: Arc::new(AtomicBool::new(false)),
            counters: Arc::new(Counters::default()),
            board: Arc::new(crate::metrics::Board::new(1, "local")),
            // No API serves a lone worker's events: the smallest backlog will do.
            feed: Arc::new(crate::api::Feed::new(16)),
        })
    }
}

/// The sockets a worker reads signalling from.
#[derive(Default)]
pub struct Sockets {
    /// SIP over UDP, with the address each is bound to ([`udp_sockets`]).
    pub udp: Vec<(UdpSocket, SocketAddr)>,
    /// SIP over TCP and TLS: the listeners (worker 0's only), with their transport.
    pub listeners: Vec<(TcpListener, SocketAddr, Transport)>,
    /// See [`Worker::iax`] and [`Worker::iax_reply`].
    pub iax: Option<UdpSocket>,
    pub iax_reply: Option<std::net::UdpSocket>,
}

pub struct Worker {
    pub id: usize,
    pub workers: usize,
    pub poll: Poll,
    pub inbox: Receiver<Envelope>,
    pub mail: Arc<Mailboxes>,
    pub udp: Vec<(UdpSocket, SocketAddr)>,
    pub listeners: Vec<(TcpListener, SocketAddr, Transport)>,
    /// What TLS connections are made from (worker 0's; None without TLS).
    pub tls: Option<Arc<sip_io::tls::Tls>>,
    /// What a WebSocket upgrade must carry (`sip.ws_*`; set by the runtime).
    pub ws: Arc<sip_io::ws::Policy>,
    pub conns: HashMap<usize, Conn>,
    pub conn_by_peer: HashMap<SocketAddr, usize>,
    pub next_conn: usize,
    pub engine: Engine,
    pub media: MediaSockets,
    pub host: crate::host::Host,
    pub stop: Arc<AtomicBool>,
    pub counters: Arc<Counters>,
    /// Where this worker publishes its metrics, once a second ([`Worker::publish`]).
    pub board: Arc<crate::metrics::Board>,
    pub next_publish: Instant,
    pub max_message: usize,
    pub batch: mmsg::Batch,
    pub ticks: u64,
    /// Whether this worker is past capacity (overload.rs).
    pub load: LoadWatch,
    /// A new INVITE that waited longer than this in the socket is refused (stateless 503): T1/5.
    /// The backlog only grows this deep when offered load exceeds what the worker serves (a
    /// media pass delays a datagram a few ms), and the caller would soon retransmit anyway.
    pub sip_late: Duration,
    /// UDP sockets (by index) left with datagrams when their burst budget ran out.
    pub unread: Vec<usize>,
    /// Workers posted to since the last wake-ups (bit per worker).
    pub to_wake: u64,
    /// When the next media pass is due.
    pub next_tick: Instant,
    /// The media passes run a phase each [`TICK`] (see [`Worker::needs_phases`]); false while
    /// they run over every leg each frame interval.
    pub spread: bool,
    /// The IAX2 socket: the configured address on worker 0, an ephemeral port of the same
    /// address on the others (for the calls they place).
    pub iax: Option<UdpSocket>,
    /// On workers other than 0, the IAX2 port itself, never read here: frames of the calls
    /// peers opened leave from it, the address the peers sent to.
    pub iax_reply: Option<std::net::UdpSocket>,
    /// IAX2 datagrams taken from the engine, sent together: a read of the port or a media tick
    /// yields a frame per call, and [`mmsg::SendBatch`] sends them with a fraction of the
    /// system calls and kernel work of a `send_to` each.
    pub iax_out: Vec<Transmit>,
    pub iax_send: mmsg::SendBatch,
    /// SIP datagrams taken from the engine, sent together by [`Worker::flush_sip`].
    pub sip_out: Vec<(SocketAddr, Wire)>,
    pub sip_send: mmsg::SendBatch,
    /// When the engine wants `Input::Timeout` next (its last `Output::Timeout`).
    pub deadline: Option<Instant>,
    /// Ports of spare RTP pairs bound since the engine was last told.
    pub fresh_ports: Vec<u16>,
    /// What TCP connections may hold (`[security]`; set by the runtime, defaults otherwise).
    pub tcp: TcpLimits,
    /// TCP connections open per source address.
    pub tcp_per_source: HashMap<IpAddr, usize>,
    /// When the TCP connections are next checked for idle and unauthenticated ones.
    pub next_conn_sweep: Instant,
    /// A listener's accept failed (out of descriptors): it is tried again on the next sweep,
    /// since its readiness is edge-triggered.
    pub accept_retry: bool,
    /// When TCP connections refused over a cap were last logged.
    pub tcp_refused_logged: Option<Instant>,
    pub feed: Arc<crate::api::Feed>,
    /// API commands the engine is running, by the token its answer will carry.
    pub api_replies: HashMap<u64, tokio::sync::oneshot::Sender<switch::control::Reply>>,
    pub api_next: u64,
}

/// Spare RTP pairs a worker keeps bound for new legs: more than a burst of SIP datagrams opens
/// between two top-ups (a batch of 16 bridged INVITEs takes 32).
pub const SPARE_PAIRS: usize = 64;

/// The time now, both clocks.
fn clock() -> Clock {
    Clock::new(Instant::now(), SystemTime::now())
}

impl Worker {
    /// A worker ready to [`Worker::run`], its sockets registered with `poll` (whose waker the
    /// crew's mailboxes hold). `sip` gives the largest message and the lateness past which a
    /// new INVITE is refused (T1/5); the media sockets, whether RTP pairs are shared.
    pub fn new(
        crew: Crew,
        poll: Poll,
        sockets: Sockets,
        engine: Engine,
        media: MediaSockets,
        host: crate::host::Host,
        sip: &switch::config::Sip,
    ) -> std::io::Result<Worker> {
        // A shared pair's read takes many legs' packets at once; a leg's own, a few.
        let batch = match engine.shares_ports() {
            true => SHARED_BATCH,
            false => 8,
        };
        let mut w = Worker {
            id: crew.id,
            workers: crew.workers,
            poll,
            inbox: crew.inbox,
            mail: crew.mail,
            udp: sockets.udp,
            listeners: sockets.listeners,
            tls: None,
            ws: Arc::new(sip_io::ws::Policy::new(sip)),
            conns: HashMap::new(),
            conn_by_peer: HashMap::new(),
            next_conn: 0,
            engine,
            media,
            host,
            stop: crew.stop,
            counters: crew.counters,
            board: crew.board,
            next_publish: Instant::now(),
            max_message: sip.max_message_size,
            batch: mmsg::Batch::new(batch, 2048, true),
            ticks: 0,
            load: LoadWatch::new(Instant::now(), crate::metrics::thread_cpu()),
            sip_late: sip.t1 / 5,
            to_wake: 0,
            unread: Vec::new(),
            next_tick: Instant::now(),
            spread: true,
            iax: sockets.iax,
            iax_reply: sockets.iax_reply,
            iax_out: Vec::new(),
            iax_send: mmsg::SendBatch::new(),
            sip_out: Vec::with_capacity(64),
            sip_send: mmsg::SendBatch::new(),
            deadline: None,
            fresh_ports: Vec::new(),
            tcp: TcpLimits::default(),
            tcp_per_source: HashMap::new(),
            next_conn_sweep: Instant::now(),
            accept_retry: false,
            tcp_refused_logged: None,
            feed: crew.feed,
            api_replies: HashMap::new(),
            api_next: 0,
        };
        w.register()?;
        Ok(w)
    }

    pub fn register(&mut self) -> std::io::Result<()> {
        for (i, (s, _)) in self.udp.iter_mut().enumerate() {
            self.poll
                .registry()
                .register(s, Token(UDP_BASE + i), Interest::READABLE)?;
        }
        for (i, (l, _, _)) in self.listeners.iter_mut().enumerate() {
            self.poll
                .registry()
                .register(l, Token(LISTEN_BASE + i), Interest::READABLE)?;
        }
        if let Some(s) = self.iax.as_mut() {
            self.poll.registry().register(s, IAX, Interest::READABLE)?;
        }
        Ok(())
    }

    pub fn run(mut self) {
        let mut events = Events::with_capacity(1024);
        // One byte more than a message may have, so a longer datagram shows as too large.
        let mut sip_batch = mmsg::Batch::new(SIP_BATCH, self.max_message + 1, true);
        self.next_tick = Instant::now() + TICK;
        // Spare RTP pairs before the first call.
        self.drain(clock());
        let mut stopping: Option<Instant> = None;
        loop {
            let now = Instant::now();
            if stopping.is_none() && self.stop.load(Ordering::Relaxed) {
                // What the call table still holds when asked to stop: after a soak whose calls all
                // ended, anything but zeros is state a call left behind.
                let t = self.engine.table_counts();
                tracing::info!(
                    "worker {} at shutdown: {} calls, {} legs, {} Call-IDs, {} transactions, {} media \
                     legs, {} call timers ({} of ended calls, dropped when due), {} orphaned \
                     INVITEs",
                    self.id,
                    t.calls,
                    t.legs,
                    t.call_ids,
                    t.server_txs + t.client_txs,
                    t.media_legs,
                    t.live_timers,
                    t.timers - t.live_timers,
                    t.orphans
                );
                self.input(clock(), Input::Shutdown);
                stopping = Some(now + Duration::from_millis(300));
            }
            if stopping.is_some_and(|t| now >= t) {
                self.flush_sip();
                self.host.close_recordings(self.id);
                return;
            }
            if !self.spread && self.needs_phases() {
                // A call with RTP or a prompt began: its first pass now, not at the end of the
                // frame interval. The grid may move here: no leg's frames were due on it.
                self.spread = true;
                self.next_tick = self.next_tick.min(now);
            }
            let deadline = self
                .deadline
                .map_or(self.next_tick, |d| d.min(self.next_tick));
            let timeout = match self.unread.is_empty() {
                true => deadline.saturating_duration_since(now),
                false => Duration::ZERO,
            };
            if self.poll.poll(&mut events, Some(timeout)).is_err() {
                continue;
            }
            for ev in events.iter() {
                match ev.token() {
                    WAKER => self.drain_inbox(),
                    IAX => self.iax_ready(&mut sip_batch),
                    crate::store_io::PIPE => self.store_ready(),
                    Token(t) if t >= CONN_BASE => {
                        self.conn_ready(t, ev.is_readable(), ev.is_writable())
                    }
                    Token(t) if t >= LISTEN_BASE => self.accept(t - LISTEN_BASE),
                    Token(t) => self.udp_ready(t - UDP_BASE, &mut sip_batch),
                }
            }
            for idx in std::mem::take(&mut self.unread) {
                self.udp_ready(idx, &mut sip_batch);
            }
            let now = Instant::now();
            self.tick_if_due(now);
            if now >= self.next_conn_sweep {
                self.sweep_conns(now);
            }
            if now >= self.next_publish {
                self.publish(now);
            }
            if self.host.store_overdue(now) {
                self.store_ready();
            }
            // The engine said when it next has work (its last `Output::Timeout`).
            if self.deadline.is_some_and(|d| d <= now) {
                self.input(clock(), Input::Timeout);
            }
            self.flush_sip();
            self.flush_iax();
            self.wake_posted();
        }
    }

    /// Copies the engine's counts and this thread's CPU time to the metrics board: once a
    /// second, so the packets and messages in between pay nothing for the metrics.
    fn publish(&mut self, now: Instant) {
        self.next_publish = now + Duration::from_secs(1);
        let cpu = crate::metrics::thread_cpu();
        self.board.publish(self.id, self.engine.metrics(), cpu);
    }

    fn wake_posted(&mut self) {
        while self.to_wake != 0 {
            let w = self.to_wake.trailing_zeros() as usize;
            self.to_wake &= self.to_wake - 1;
            self.mail.wake(w);
        }
    }

    /// Runs the media pass when its tick is due. Also called between batches of a SIP burst, so
    /// a flood of signalling delays frames by at most one batch.
    fn tick_if_due(&mut self, now: Instant) {
        if now < self.next_tick {
            return;
        }
        self.watch_load(now, now - self.next_tick);
        self.spread = self.needs_phases();
        self.media_tick(self.next_tick, now);
        let step = match self.spread {
            true => TICK,
            false => TICK * PHASES as u32,
        };
        self.next_tick = next_tick(self.next_tick, step, now);
    }

    /// Whether the media passes must spread the legs over [`PHASES`] ticks: RTP sockets to
    /// drain, or prompts and tones whose frames leave on the ticks. Otherwise (no calls, or
    /// only IAX2 legs, whose voice is relayed as it arrives on the IAX2 port) a tick sends no
    /// media, and one pass over every leg per frame interval (RTCP, media timeouts) does with
    /// a quarter of the wake-ups (50 a second per worker instead of 200).
    fn needs_phases(&self) -> bool {
        !self.media.is_empty() || self.engine.media.generating()
    }

    /// IAX2 datagrams, read dry in batches: voice goes straight to the media legs, signalling
    /// through `process`. On worker 0 (the IAX2 port) each datagram first goes to the worker
    /// of its call.
    fn iax_ready(&mut self, batch: &mut mmsg::Batch) {
        let Some(sock) = self.iax.as_ref() else {
            return;
        };
        let clock = clock();
        let reads_port = self.id == 0 && self.workers > 1;
        loop {
            let n = batch.recv(sock);
            for i in 0..n {
                let Some((data, src)) = batch.get(i) else {
                    continue;
                };
                let route = if reads_port {
                    self.engine.iax_route(src, data)
                } else {
                    None
                };
                match route {
                    None => self
                        .engine
                        .handle_input(clock, Input::Iax { from: src, data }),
                    Some(Route::To(w)) if w == self.id => self
                        .engine
                        .handle_input(clock, Input::Iax { from: src, data }),
                    Some(Route::To(w)) => {
                        let bytes = data.to_vec();
                        post(
                            &self.mail,
                            &mut self.to_wake,
                            w,
                            Envelope::Iax { from: src, bytes },
                        )
                    }
                    Some(Route::Split(parts)) => {
                        for (w, bytes) in parts {
                            if w == self.id {
                                let data = &bytes[..];
                                self.engine
                                    .handle_input(clock, Input::Iax { from: src, data });
                            } else {
                                let iax = Envelope::Iax { from: src, bytes };
                                post(&self.mail, &mut self.to_wake, w, iax);
                            }
                        }
                    }
                }
            }
            if n < SIP_BATCH {
                break;
            }
        }
        self.input(clock, Input::Process);
        self.flush_iax();
    }

    fn flush_iax(&mut self) {
        fn bytes(t: &Transmit) -> (&[u8], SocketAddr) {
            (&t.bytes, t.to)
        }
        let Some(sock) = self.iax.as_ref() else {
            return;
        };
        let out = &self.iax_out;
        // Frames of the calls peers opened leave from the IAX2 port they sent to.
        let reply = self.iax_reply.as_ref();
        if let Some(port) = reply {
            let inbound = out.iter().filter(|t| t.inbound);
            self.iax_send.send(port, inbound.map(bytes));
        }
        let own = out.iter().filter(|t| reply.is_none() || !t.inbound);
        self.iax_send.send(sock, own.map(bytes));
        self.iax_out.clear();
    }

    /// Backpressure, media side: when this worker's own work makes its media ticks late, it is
    /// past capacity and refuses new calls (stateless 503 + Retry-After) so the calls it has
    /// keep clean audio; ticks the host made late while the worker idled do not count
    /// (overload.rs). (The signalling side is judged per request: [`Worker::sip_late`].)
    fn watch_load(&mut self, now: Instant, late: Duration) {
        let Some(change) = self.load.tick(now, late, crate::metrics::thread_cpu) else {
            return;
        };
        let over = matches!(change, Change::Enter { .. });
        self.input(clock(), Input::Overloaded(over));
        self.feed.overload(self.id, over);
        match change {
            Change::Enter { late, busy } => tracing::warn!(
                "worker {} is past capacity (media ticks {} µs late on average while its thread was busy {:.0} % of the time): new calls get 503",
                self.id,
                late.as_micros(),
                busy * 100.0
            ),
            Change::Leave => tracing::info!("worker {} is back under capacity", self.id),
        }
    }

    fn owner(&self, msg: &Message) -> usize {
        switch::owner(
            msg.header(sip::HeaderName::CallId).unwrap_or(""),
            self.workers,
        )
    }

    /// A SIP message for a call this worker owns; `late` if it waited past [`Worker::sip_late`].
    fn handle_sip(&mut self, msg: Message, peer: Peer, local: SocketAddr, late: bool, at: Clock) {
        let sip = Input::Sip {
            msg,
            peer,
            local,
            late,
        };
        self.input(at, sip);
    }

    /// Hands the engine one input, then does what it asks.
    fn input(&mut self, clock: Clock, input: Input<'_>) {
        self.engine.handle_input(clock, input);
        self.drain(clock);
    }

    /// Takes the engine's outputs until it waits for time: SIP and IAX2 datagrams to their
    /// queues, media packets to their sockets, events done here (the answers to its requests
    /// go back in at once), and spare RTP pairs topped up.
    fn drain(&mut self, clock: Clock) {
        loop {
            match self.engine.poll_output() {
                Output::Sip(to, bytes) => {
                    if logging::sip_enabled() {
                        logging::sip(Dir::Sent, to.transport, to.addr, &bytes);
                    }
                    self.send_sip(to, bytes);
                }
                Output::Media(t) => self.media.transmit(t),
                Output::Iax(t) => self.iax_out.push(t),
                Output::Event(ev) => self.event(clock, ev),
                Output::Timeout(t) => {
                    self.deadline = t;
                    break;
                }
            }
        }
        // The batch's journal notes reach the kernel before its SIP messages are sent
        // (flush_sip): whatever a phone was told of a call, a killed node's journal knows.
        let host = &mut self.host;
        self.engine.take_journal(clock.wall, |w| host.journal(w));
        self.media.flush();
        while let Some((leg, packets)) = self.media.take_failed() {
            let failed = Input::MediaSendFailed { leg, packets };
            self.engine.handle_input(clock, failed);
        }
        if self.engine.spare_ports() < SPARE_PAIRS / 2 {
            self.media
                .top_up(SPARE_PAIRS, &mut self.fresh_ports, clock.now);
            if !self.fresh_ports.is_empty() {
                let ports = Input::MediaPorts(&self.fresh_ports);
                self.engine.handle_input(clock, ports);
                self.fresh_ports.clear();
            }
        }
    }

    /// A SIP message to send: UDP from this worker's socket (batched), TCP through worker 0.
    fn send_sip(&mut self, to: Peer, bytes: Wire) {
        match to.transport {
            // The engine answers 513 instead of building such a message; anything else that large
            // would fail in sendmmsg (EMSGSIZE) unseen.
            Transport::Udp if bytes.len() > switch::engine::MAX_UDP_PAYLOAD => tracing::warn!(
                "a SIP message of {} bytes to {} does not fit in a UDP datagram: not sent",
                bytes.len(),
                to.addr
            ),
            Transport::Udp => self.sip_out.push((to.addr, bytes)),
            _ if self.id == 0 => self.tcp_send(to, &bytes),
            _ => {
                let tcp = Envelope::TcpSend { to, bytes };
                post(&self.mail, &mut self.to_wake, 0, tcp);
            }
        }
    }

    fn event(&mut self, clock: Clock, ev: Event) {
        match ev {
            Event::MediaOpen {
                leg,
                port,
                shared,
                first,
                ip,
            } => self.media.attach(leg, port, shared, first, ip),
            Event::MediaClose { leg } => self.media.close(leg),
            Event::Store { token, op } => {
                if let Some(result) = self.host.store(token, *op) {
                    self.engine
                        .handle_input(clock, Input::Store { token, result });
                }
            }
            Event::Resolve { token, query } => {
                if let Err(e) = self.host.lookup(self.id, token, query) {
                    let result = Err(e);
                    self.engine
                        .handle_input(clock, Input::Resolved { token, result });
                }
            }
            Event::Prompt { token, name, .. } => {
                // Rendered speech and voicemail audio come back through the inbox.
                let started = match name.strip_prefix("tts:") {
                    Some(text) => Some(self.host.speak(self.id, token, text)),
                    None if name.starts_with("voicemail/") => {
                        Some(self.host.box_audio(self.id, token, &name))
                    }
                    None => None,
                };
                let result = match started {
                    Some(Ok(())) => return,
                    Some(Err(e)) => Err(e),
                    None => self.host.prompt(&name),
                };
                self.engine
                    .handle_input(clock, Input::Prompt { token, result });
            }
            Event::Recording { token, name } => {
                let result = self.host.recording(&name);
                self.engine
                    .handle_input(clock, Input::Recording { token, result });
            }
            Event::Voicemail { token, user, op } => {
                if let Err(e) = self.host.voicemail(self.id, token, user.clone(), op) {
                    let input = Input::Voicemail {
                        token,
                        user,
                        result: Err(e),
                    };
                    self.engine.handle_input(clock, input);
                }
            }
            Event::RecordCall {
                name,
                format,
                recording,
            } => self.host.record_call(
                self.id,
                &self.counters.recordings_incomplete,
                &name,
                format,
                recording,
            ),
            Event::IaxPeer { name, at } => {
                for w in (0..self.workers).filter(|&w| w != self.id) {
                    let name = name.clone();
                    post(
                        &self.mail,
                        &mut self.to_wake,
                        w,
                        Envelope::IaxPeer { name, at },
                    );
                }
                self.engine.handle_input(clock, Input::IaxPeer { name, at });
            }
            Event::TrunkServer {
                trunk,
                server,
                down_until,
            } => {
                for w in (0..self.workers).filter(|&w| w != self.id) {
                    let env = Envelope::TrunkServer {
                        trunk,
                        server,
                        down_until,
                    };
                    post(&self.mail, &mut self.to_wake, w, env);
                }
            }
            Event::Cdr(line) => self.host.cdr(line),
            Event::State { name, contents } => self.host.state(name, &contents),
            Event::Log {
                level,
                call_id,
                message,
            } => log(level, call_id.as_deref(), &message),
            Event::Security {
                source,
                user,
                reason,
            } => logging::security(format_args!(
                "auth_failed source={source} user={user:?} reason={reason:?}"
            )),
            Event::Scanner { source, user_agent } => logging::security(format_args!(
                "scanner source={source} user_agent={user_agent:?}"
            )),
            Event::Ban {
                source,
                until,
                seconds,
                reason,
            } => {
                logging::security(format_args!(
                    "banned source={source} reason={reason:?} for={seconds}s"
                ));
                for w in (0..self.workers).filter(|&w| w != self.id) {
                    let ban = Envelope::Ban { source, until };
                    post(&self.mail, &mut self.to_wake, w, ban);
                }
                self.close_conns_from(source);
            }
            Event::TcpAuthenticated { peer } => self.tcp_authenticated(peer),
            Event::HandOff(h) => {
                let switch::HandOff {
                    worker,
                    msg,
                    peer,
                    local,
                    late,
                } = *h;
                let sip = Envelope::Sip {
                    msg,
                    peer,
                    local,
                    late,
                };
                post(&self.mail, &mut self.to_wake, worker, sip);
            }
            Event::Api { token, reply } => {
                if let Some(tx) = self.api_replies.remove(&token) {
                    let _ = tx.send(reply);
                }
            }
            Event::Notice(n) => self.feed.notice(n),
            Event::Crossing(c) => {
                let worker = c.worker;
                post(&self.mail, &mut self.to_wake, worker, Envelope::Crossing(c));
            }
        }
    }

    /// The TCP peer at `peer` authenticated: its connection stays past the unauthenticated
    /// lifetime (connections live on worker 0).
    fn tcp_authenticated(&mut self, peer: SocketAddr) {
        if self.id != 0 {
            let env = Envelope::TcpAuthenticated { peer };
            post(&self.mail, &mut self.to_wake, 0, env);
            return;
        }
        if let Some(c) = self
            .conn_by_peer
            .get(&peer)
            .and_then(|t| self.conns.get_mut(t))
        {
            c.authenticated = true;
        }
    }

    /// Closes every TCP connection from a banned source.
    fn close_conns_from(&mut self, source: IpAddr) {
        let from: Vec<usize> = self
            .conns
            .iter()
            .filter(|(_, c)| switch::acl::canonical(c.peer.ip()) == source)
            .map(|(t, _)| *t)
            .collect();
        for t in from {
            self.close_conn(t);
        }
    }

    /// Closes the TCP connections silent past `security.tcp_idle_s` or unauthenticated past
    /// `security.tcp_unauthenticated_s`, pings the WebSockets gone quiet (`sip.ws_ping_s`),
    /// and retries a listener that ran out of descriptors. Runs once a second.
    fn sweep_conns(&mut self, now: Instant) {
        self.next_conn_sweep = now + Duration::from_secs(1);
        let expired: Vec<(usize, &'static str)> = self
            .conns
            .iter()
            .filter_map(|(t, c)| c.expired(&self.tcp, now).map(|why| (*t, why)))
            .collect();
        for (t, why) in expired {
            if let Some(c) = self.conns.get(&t) {
                tracing::debug!("closing the TCP connection from {} ({why})", c.peer);
            }
            if why == sip_io::HANDSHAKE_UNFINISHED {
                self.counters
                    .tls_handshakes_cut
                    .fetch_add(1, Ordering::Relaxed);
            }
            self.close_conn(t);
        }
        for c in self.conns.values_mut() {
            c.keep_alive(&self.tcp, now);
        }
        if std::mem::take(&mut self.accept_retry) {
            for i in 0..self.listeners.len() {
                self.accept(i);
            }
        }
    }

    /// Handles `msg` here or posts it to its Call-ID's worker (a digest answer: to the worker
    /// that issued its nonce). A REGISTER (`switch::stateless`)
    /// stays here while the worker keeps up (`keeping_up`: its last read left the socket
    /// empty), sparing the other worker a wake-up; a worker reading full batches spreads them,
    /// so one busy source — an edge proxy, a load generator — still uses every worker.
    fn deliver(
        &mut self,
        msg: Message,
        peer: Peer,
        local: SocketAddr,
        late: bool,
        keeping_up: bool,
        at: Clock,
    ) {
        let owner = match switch::nonce_owner(&msg, self.workers) {
            // A digest answer goes to the worker that counts its nonce's uses.
            Some(w) => w,
            None if keeping_up && switch::stateless(&msg) => self.id,
            // A call pinned to another worker (it joined a call there), or an INVITE with
            // Replaces: one relaxed atomic load while nothing is pinned.
            None => match self.engine.pins().route(&msg, self.workers) {
                Some(w) => w,
                None => self.owner(&msg),
            },
        };
        if owner == self.id {
            self.handle_sip(msg, peer, local, late, at);
        } else {
            let sip = Envelope::Sip {
                msg,
                peer,
                local,
                late,
            };
            post(&self.mail, &mut self.to_wake, owner, sip);
        }
    }

    /// Reads the socket dry (its readiness is edge-triggered), a batch per system call, or
    /// [`SIP_BURST`] batches and notes it in `unread`.
    fn udp_ready(&mut self, idx: usize, batch: &mut mmsg::Batch) {
        let mut budget = SIP_BURST;
        loop {
            let Some((sock, local)) = self.udp.get(idx) else {
                return;
            };
            let local = *local;
            let n = batch.recv(sock);
            // One reading of the clocks per batch: its datagrams arrived together.
            let at = clock();
            let now = at.now;
            // A datagram that waited is the worker's backlog only while the worker is busy; a
            // host that kept it off the core delayed it, and refusing the call helps no one.
            let backlogged = self.load.busy();
            let mut dropped = 0;
            for i in 0..n {
                let Some((data, src)) = batch.get(i) else {
                    continue;
                };
                // Banned sources (and sources over their rate) cost one lookup, nothing more.
                if !self.engine.admit(src.ip(), now) {
                    dropped += 1;
                    continue;
                }
                let peer = Peer {
                    transport: Transport::Udp,
                    addr: src,
                };
                if logging::sip_enabled() {
                    logging::sip(Dir::Received, Transport::Udp, src, data);
                }
                if data.len() > self.max_message {
                    self.input(at, Input::TooLarge { bytes: data, peer });
                    self.flush_sip();
                    continue;
                }
                let late = backlogged
                    && batch
                        .arrival(i)
                        .is_some_and(|t| now.saturating_duration_since(t) > self.sip_late);
                match Message::parse(data, true) {
                    Ok(msg) => self.deliver(msg, peer, local, late, n < SIP_BATCH, at),
                    Err(ParseError::KeepAlive) => {}
                    Err(_) => {
                        self.counters
                            .dropped_unparseable
                            .fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            if dropped > 0 {
                self.counters
                    .dropped_guard
                    .fetch_add(dropped, Ordering::Relaxed);
                // A ban just decided leaves as an event: hand it to the other workers now.
                if self.engine.has_events() {
                    self.drain(at);
                }
            }
            if n < SIP_BATCH {
                return;
            }
            // More is waiting: answer what this batch asked and hand over what it posted before
            // reading on, so a flood delays replies by one batch, not until it stops.
            self.flush_sip();
            self.wake_posted();
            self.tick_if_due(Instant::now());
            budget -= 1;
            if budget == 0 {
                // The socket is not dry, and its readiness is edge-triggered: the main loop
                // comes back to it after running timers and the other sockets.
                self.unread.push(idx);
                return;
            }
        }
    }

    fn accept(&mut self, idx: usize) {
        loop {
            let Some((l, local, transport)) = self.listeners.get(idx) else {
                return;
            };
            let (local, transport) = (*local, *transport);
            match l.accept() {
                Ok((stream, peer)) => {
                    let now = Instant::now();
                    if let Some(why) = self.refuse_conn(peer.ip(), transport, now) {
                        // Accepted and closed at once: the peer sees the connection reset.
                        drop(stream);
                        self.counters.tcp_refused.fetch_add(1, Ordering::Relaxed);
                        self.log_refused(peer.ip(), why, now);
                        continue;
                    }
                    let _ = stream.set_nodelay(true);
                    let mut conn = Conn::new(stream, peer, local, now);
                    if matches!(transport, Transport::Tls | Transport::Wss) {
                        let Some(mut tls) = self.tls.as_ref().and_then(|t| t.accept()) else {
                            continue;
                        };
                        if transport.is_websocket() {
                            // The phone page's script is past rustls's 64 KiB of unsent data;
                            // what waits is bounded by its one answer at a time (`Conn`).
                            tls.set_buffer_limit(None);
                        }
                        conn = conn.with_tls(tls);
                    }
                    if transport.is_websocket() {
                        let ws = sip_io::ws::Session::new(self.ws.clone(), self.max_message);
                        conn = conn.with_ws(ws);
                    }
                    conn.authenticated = self.engine.exempt(peer.ip());
                    self.add_conn(conn);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Out of descriptors (EMFILE/ENFILE) or the like: the pending connections
                    // stay in the backlog and the listener will not signal again; try later.
                    self.accept_retry = true;
                    tracing::warn!("cannot accept a TCP connection on {local}: {e}");
                    return;
                }
            }
        }
    }

    /// Why a new TCP connection from `ip` is refused, if it is: a banned source, all
    /// connections taken (`security.tcp_max`, and `sip.ws_max_connections` for a WebSocket),
    /// or its own taken (`security.tcp_max_per_source`,
    /// whitelisted and trusted sources aside).
    fn refuse_conn(&self, ip: IpAddr, transport: Transport, now: Instant) -> Option<&'static str> {
        if self.engine.banned(ip, now) {
            return Some("banned");
        }
        if self.conns.len() >= self.tcp.max {
            return Some("security.tcp_max");
        }
        // Counted only when a WebSocket comes: accepts are rare next to messages.
        if transport.is_websocket()
            && self
                .conns
                .values()
                .filter(|c| c.transport().is_websocket())
                .count()
                >= self.tcp.ws_max
        {
            return Some("sip.ws_max_connections");
        }
        let mine = self.tcp_per_source.get(&ip).copied().unwrap_or(0);
        (mine >= self.tcp.per_source && !self.engine.exempt(ip))
            .then_some("security.tcp_max_per_source")
    }

    /// Refused connections are logged at most every 10 s (a connection flood is many).
    fn log_refused(&mut self, ip: IpAddr, why: &str, now: Instant) {
        if why == "banned"
            || self
                .tcp_refused_logged
                .is_some_and(|t| now.saturating_duration_since(t) < Duration::from_secs(10))
        {
            return;
        }
        self.tcp_refused_logged = Some(now);
        tracing::warn!(
            "refusing TCP connections from {ip}: {why} reached ({} refused so far)",
            self.counters.tcp_refused.load(Ordering::Relaxed)
        );
    }

    fn conn_ready(&mut self, token: usize, readable: bool, writable: bool) {
        let Some(conn) = self.conns.get_mut(&token) else {
            return;
        };
        if writable && conn.flush().is_err() {
            self.close_conn(token);
            return;
        }
        if !readable {
            return;
        }
        let (peer, local, transport) = (conn.peer, conn.local, conn.transport());
        let mut msgs = Vec::new();
        let outcome = conn.read(self.max_message, |m| msgs.push(m));
        let garbage = std::mem::take(&mut conn.garbage);
        if garbage > 0 {
            self.counters
                .dropped_unparseable
                .fetch_add(garbage, Ordering::Relaxed);
        }
        let at = clock();
        for m in msgs {
            if !self.engine.admit(peer.ip(), at.now) {
                self.counters.dropped_guard.fetch_add(1, Ordering::Relaxed);
                self.drain(at);
                self.close_conn(token);
                return;
            }
            self.deliver(
                m,
                Peer {
                    transport,
                    addr: peer,
                },
                local,
                false,
                true,
                at,
            );
        }
        if let ReadOutcome::Closed = outcome {
            self.close_conn(token);
        }
    }

    fn close_conn(&mut self, token: usize) {
        if let Some(mut c) = self.conns.remove(&token) {
            let _ = self.poll.registry().deregister(&mut c.stream);
            if self.conn_by_peer.get(&c.peer) == Some(&token) {
                self.conn_by_peer.remove(&c.peer);
            }
            let ip = c.peer.ip();
            if let Some(n) = self.tcp_per_source.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    self.tcp_per_source.remove(&ip);
                }
            }
            if c.unsent() || c.transport().is_websocket() {
                // Never delivered: what waits on it (a trunk's REGISTER or INVITE) fails over.
                // A WebSocket's phone is gone with it: its INVITEs fail now (RFC 7118 §5).
                self.unreachable(Peer {
                    transport: c.transport(),
                    addr: c.peer,
                });
            }
        }
    }

    /// Tells every worker's engine that `peer` cannot be reached (any of them may wait on it).
    fn unreachable(&mut self, peer: Peer) {
        for w in (0..self.workers).filter(|&w| w != self.id) {
            post(
                &self.mail,
                &mut self.to_wake,
                w,
                Envelope::Unreachable(peer),
            );
        }
        self.input(clock(), Input::Unreachable(peer));
    }

    fn drain_inbox(&mut self) {
        self.mail.draining(self.id);
        let now = clock();
        while let Ok(env) = self.inbox.try_recv() {
            match env {
                Envelope::Sip {
                    msg,
                    peer,
                    local,
                    late,
                } => self.handle_sip(msg, peer, local, late, now),
                Envelope::TcpSend { to, bytes } => self.tcp_send(to, &bytes),
                Envelope::Iax { from, bytes } => {
                    let data = &bytes[..];
                    self.input(now, Input::Iax { from, data });
                }
                Envelope::Store { token, result } => {
                    self.input(now, Input::Store { token, result });
                }
                Envelope::Resolved { token, result } => {
                    self.input(now, Input::Resolved { token, result });
                }
                Envelope::Prompt { token, result } => {
                    self.input(now, Input::Prompt { token, result });
                }
                Envelope::IaxPeer { name, at } => {
                    self.input(now, Input::IaxPeer { name, at });
                }
                Envelope::Unreachable(peer) => self.input(now, Input::Unreachable(peer)),
                Envelope::Voicemail {
                    token,
                    user,
                    result,
                } => {
                    let input = Input::Voicemail {
                        token,
                        user,
                        result,
                    };
                    self.input(now, input);
                }
                Envelope::MailboxChanged { user, mailbox } => {
                    self.input(now, Input::MailboxChanged { user, mailbox });
                }
                Envelope::TrunkServer {
                    trunk,
                    server,
                    down_until,
                } => {
                    let input = Input::TrunkServer {
                        trunk,
                        server,
                        down_until,
                    };
                    self.input(now, input);
                }
                Envelope::Ban { source, until } => {
                    self.input(now, Input::Ban { source, until });
                    self.close_conns_from(source);
                }
                Envelope::TcpAuthenticated { peer } => self.tcp_authenticated(peer),
                Envelope::Crossing(c) => self.input(now, Input::Crossing(c)),
                Envelope::Reload(r) => {
                    self.reconfigure(&r.config);
                    self.input(now, Input::Reload(r));
                }
                Envelope::Drain => self.input(now, Input::Drain),
                Envelope::Api { command, reply } => {
                    self.api_next += 1;
                    let token = self.api_next;
                    self.api_replies.insert(token, reply);
                    self.input(now, Input::Api { token, command });
                }
                Envelope::Watch(on) => self.input(now, Input::Watch(on)),
                Envelope::Unregistered(aor) => self.input(now, Input::Unregistered(aor)),
                Envelope::ReleaseCache(back) => {
                    self.host.shrink_store();
                    if let Some(t) = crate::allocator::release_thread_cache() {
                        let _ = back.send(t);
                    }
                }
            }
        }
    }

    /// The shell's part of a reload: the WebSocket policy (`sip.ws_path`, `sip.ws_origins`)
    /// for upgrades from now on, and the connection limits (`sip.ws_*`, `security.tcp_*`)
    /// for every connection. The connection cap stays as the start fitted it to the file
    /// descriptors (`security.tcp_max` needs a restart).
    fn reconfigure(&mut self, cfg: &switch::config::Config) {
        self.ws = Arc::new(sip_io::ws::Policy::new(&cfg.sip));
        self.tcp = TcpLimits::new(cfg, self.tcp.max);
    }

    /// Store operations finished on the worker's own store connection.
    fn store_ready(&mut self) {
        let now = clock();
        for (token, result) in self.host.store_ready(now.now) {
            self.input(now, Input::Store { token, result });
        }
    }

    /// Sends over the peer's connection (RFC 5923: a phone's own connection carries requests to
    /// it too), or over a new one.
    fn tcp_send(&mut self, to: Peer, bytes: &[u8]) {
        if let Some(conn) = self
            .conn_by_peer
            .get(&to.addr)
            .and_then(|t| self.conns.get_mut(t))
        {
            conn.send(bytes);
            return;
        }
        if to.transport.is_websocket() {
            // Its phone's connection is gone, and no other reaches it (RFC 7118 §5).
            self.unreachable(to);
            return;
        }
        // No connection yet (a request strowger originates over TCP or TLS): connect, then send.
        let tls = match to.transport {
            Transport::Tls => match self.tls.as_ref().and_then(|t| t.connect(to.addr, bytes)) {
                Some(tls) => Some(tls),
                None => return,
            },
            _ => None,
        };
        let Ok(stream) = mio::net::TcpStream::connect(to.addr) else {
            return;
        };
        let local = self
            .listeners
            .iter()
            .find(|l| l.2 == to.transport)
            .or(self.listeners.first())
            .map_or(to.addr, |l| l.1);
        let mut conn = Conn::new(stream, to.addr, local, Instant::now());
        if let Some(tls) = tls {
            conn = conn.with_tls(tls);
        }
        // strowger opened it: the peer need not prove anything to keep it.
        conn.authenticated = true;
        if let Some(conn) = self.add_conn(conn) {
            conn.send(bytes);
        }
    }

    /// Registers a new connection with the poll and indexes it by peer; None (and the
    /// connection dropped) when the poll refuses it.
    fn add_conn(&mut self, mut conn: Conn) -> Option<&mut Conn> {
        let token = CONN_BASE + self.next_conn;
        self.next_conn += 1;
        self.poll
            .registry()
            .register(
                &mut conn.stream,
                Token(token),
                Interest::READABLE | Interest::WRITABLE,
            )
            .ok()?;
        self.conn_by_peer.insert(conn.peer, token);
        *self.tcp_per_source.entry(conn.peer.ip()).or_insert(0) += 1;
        Some(self.conns.entry(token).or_insert(conn))
    }

    /// Sends what the engine queued, UDP datagrams a `sendmmsg(2)` per [`SIP_BATCH`] × 4: one
    /// system call, and one wake-up of a peer that sent a batch, instead of one each. A flood's
    /// answers can take milliseconds to send: the media pass runs between chunks when it falls due.
    fn flush_sip(&mut self) {
        self.host.store_flush();
        while !self.sip_out.is_empty() {
            let chunk = self.sip_out.len().min(SIP_BATCH * 4);
            for v6 in [false, true] {
                let family = self.sip_out[..chunk]
                    .iter()
                    .filter(|(a, _)| a.is_ipv6() == v6);
                let datagrams = family.map(|(a, b)| (&b[..], *a));
                if let Some((s, _)) = self.udp.iter().find(|(_, a)| a.is_ipv6() == v6) {
                    self.sip_send.send(s, datagrams);
                }
            }
            self.sip_out.drain(..chunk);
            self.tick_if_due(Instant::now());
        }
    }

    /// The media pass due on the tick grid at `due`, run at `now`.
    fn media_tick(&mut self, due: Instant, now: Instant) {
        self.ticks = self.ticks.wrapping_add(1);
        let (phase, phases) = match self.spread {
            true => ((self.ticks % PHASES) as usize, PHASES as usize),
            false => (0, 1),
        };
        let (ticks, cycle) = (self.ticks, self.ticks / PHASES);
        let batch = &mut self.batch;
        let media = &self.media;
        let engine = &mut self.engine;
        // One wall-clock reading per pass; each packet's input carries its arrival time.
        let wall = SystemTime::now();
        let at = |stamp: Option<Instant>| {
            let (t, age) = arrived(stamp, now);
            Clock::new(t, wall - age)
        };
        for (leg, pair) in media.own_pairs().filter(|(leg, _)| leg % phases == phase) {
            // A leg whose packets go nowhere at once is read every LAZY_RTP-th visit, a few
            // packets per system call instead of one (legs take turns, to spread the reads).
            if engine.relays_rtp(leg) || (cycle + leg as u64).is_multiple_of(LAZY_RTP) {
                batch.drain(&pair.rtp, |batch, n| {
                    for i in 0..n {
                        if let Some((data, src)) = batch.get(i) {
                            engine
                                .handle_input(at(batch.arrival(i)), Input::Rtp { leg, data, src });
                        }
                    }
                });
            }
            if (cycle + leg as u64).is_multiple_of(RTCP_VISITS) {
                for i in 0..batch.recv(&pair.rtcp) {
                    if let Some((data, src)) = batch.get(i) {
                        engine.handle_input(at(batch.arrival(i)), Input::Rtcp { leg, data, src });
                    }
                }
            }
        }
        // Shared pairs' RTP is read on every pass: what arrived for any leg since the last one.
        // A datagram from an address no leg of that pair sends to is dropped; one from an
        // address no leg at all sends to is the engine's to count (`Input::StrayRtp`).
        for (i, shared) in media.shared().iter().enumerate() {
            let port = shared.pair.port;
            batch.drain(&shared.pair.rtp, |batch, n| {
                // Every packet is another call's: find the batch's legs and start loading
                // them before the first is handled, so that their cache misses overlap.
                let mut legs = [None; SHARED_BATCH];
                for (j, slot) in legs.iter_mut().enumerate().take(n) {
                    let src = batch.get(j).map(|(_, src)| src);
                    *slot = src
                        .and_then(|s| engine.rtp_leg_from(s))
                        .filter(|&l| media.shares(l, i));
                    if let Some(leg) = *slot {
                        engine.prefetch_leg(leg);
                    }
                }
                for (j, leg) in legs.into_iter().enumerate().take(n) {
                    let Some((data, src)) = batch.get(j) else {
                        continue;
                    };
                    let input = match leg {
                        Some(leg) => Input::Rtp { leg, data, src },
                        None if engine.rtp_leg_from(src).is_none() => Input::StrayRtp { port, src },
                        None => continue,
                    };
                    engine.handle_input(at(batch.arrival(j)), input);
                }
            });
            if !(ticks + i as u64).is_multiple_of(SHARED_RTCP_TICKS) {
                continue;
            }
            batch.drain(&shared.pair.rtcp, |batch, n| {
                for j in 0..n {
                    let Some((data, src)) = batch.get(j) else {
                        continue;
                    };
                    if let Some(leg) = engine.rtcp_leg_from(src).filter(|&l| media.shares(l, i)) {
                        engine.handle_input(at(batch.arrival(j)), Input::Rtcp { leg, data, src });
                    }
                }
            });
        }
        let clock = Clock::new(now, wall);
        engine.handle_input(clock, Input::MediaTick { due, phase, phases });
        self.input(clock, Input::Process);
        self.flush_iax();
    }
}

/// The tick `step` after one due at `due` that ran at `now`. Ticks stay on their first 5 ms
/// grid: a leg's frames fall due on the grid its first visit set, so a grid that slid by a late
/// tick would send them up to half a frame early or late from then on (the engine sends what is
/// due within half a frame), and a few such slides add up to a whole frame of jitter. Ticks missed
/// by less than a cycle run back to back; a longer stall skips whole cycles, which keeps every
/// phase on its grid.
fn next_tick(due: Instant, step: Duration, now: Instant) -> Instant {
    let cycle = TICK * PHASES as u32;
    let next = due + step;
    match now.checked_duration_since(next) {
        Some(behind) if behind >= cycle => {
            next + cycle * (behind.as_nanos() / cycle.as_nanos()) as u32
        }
        _ => next,
    }
}

/// A packet's kernel arrival time and how long before `now` that was, if it is plausible (the
/// stamp is wall-clock time turned into an `Instant`, so a clock step could put it in the future
/// or long ago); else `now`. One subtraction per packet gives both.
fn arrived(stamp: Option<Instant>, now: Instant) -> (Instant, Duration) {
    stamp
        .and_then(|t| Some((t, now.checked_duration_since(t)?)))
        .filter(|&(_, age)| age < Duration::from_secs(1))
        .unwrap_or((now, Duration::ZERO))
}

/// An engine's log event, with its call's Call-ID as a field.
fn log(level: Level, call_id: Option<&str>, message: &str) {
    match (level, call_id) {
        (Level::Error, Some(call_id)) => tracing::error!(call_id, "{message}"),
        (Level::Error, None) => tracing::error!("{message}"),
        (Level::Warn, Some(call_id)) => tracing::warn!(call_id, "{message}"),
        (Level::Warn, None) => tracing::warn!("{message}"),
        (Level::Info, Some(call_id)) => tracing::info!(call_id, "{message}"),
        (Level::Info, None) => tracing::info!("{message}"),
        (Level::Debug, Some(call_id)) => tracing::debug!(call_id, "{message}"),
        (Level::Debug, None) => tracing::debug!("{message}"),
    }
}

/// Hands an envelope to worker `w`, woken once at the end of the loop turn (`wake_posted`).
fn post(mail: &Mailboxes, to_wake: &mut u64, w: usize, env: Envelope) {
    mail.post(w, env);
    *to_wake |= 1 << w;
}

pub fn udp_sockets(listen: &[SocketAddr]) -> std::io::Result<Vec<(UdpSocket, SocketAddr)>> {
    listen
        .iter()
        .map(|a| {
            let sock = sip_io::udp_reuseport(*a)?;
            // Arrival stamps tell how long requests queued: the signalling overload signal.
            mmsg::enable_timestamps(&sock);
            Ok((sock, *a))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A log sink the test reads back.
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A worker built in-process from the embedded configuration answers an OPTIONS, traces
    /// both messages at debug with the Call-ID, and stops on the stop flag.
    #[test]
    fn a_worker_built_alone_answers_and_traces_sip() {
        let port = std::net::UdpSocket::bind("127.0.0.1:0")
            .and_then(|s| s.local_addr())
            .unwrap()
            .port();
        let mut cfg = switch::config::Config::embedded();
        cfg.override_sip_listen(&format!("127.0.0.1:{port}"))
            .unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let listen = [(Transport::Udp, addr)];
        let data = std::env::temp_dir().join(format!("strowger-worker-{}", std::process::id()));
        let settings = switch::Settings::new(
            &cfg,
            &listen,
            addr.ip(),
            Arc::new(switch::CallSlots::new(10)),
            switch::registrar::Registrar::new(&cfg.registrar, [7; 32]),
            0,
            1,
        );
        let (now, wall) = (Instant::now(), SystemTime::now());
        let engine = Engine::new(settings, Arc::new(cfg.dialplan.clone()), now, wall);
        let poll = Poll::new().unwrap();
        let crew = Crew::alone(&poll).unwrap();
        let stop = crew.stop.clone();
        let sockets = Sockets {
            udp: udp_sockets(&[addr]).unwrap(),
            ..Sockets::default()
        };
        let media = MediaSockets::new(addr.ip(), 0, 0);
        let host = crate::host::Host::new(data.clone(), data.join("cdr.jsonl"));
        let w = Worker::new(crew, poll, sockets, engine, media, host, &cfg.sip).unwrap();
        let sink = Sink::default();
        let log = sink.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(move || log.clone())
            .with_ansi(false)
            .finish();
        let running =
            std::thread::spawn(move || tracing::subscriber::with_default(subscriber, || w.run()));

        let phone = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let me = phone.local_addr().unwrap();
        let options = format!(
            "OPTIONS sip:{addr} SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bK-w1\r\n\
             Max-Forwards: 70\r\nFrom: <sip:t@{me}>;tag=1\r\nTo: <sip:{addr}>\r\n\
             Call-ID: in-process-1\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n"
        );
        phone
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        phone.send_to(options.as_bytes(), addr).unwrap();
        let mut buf = [0u8; 4096];
        let n = phone.recv(&mut buf).expect("an answer to the OPTIONS");
        assert!(buf[..n].starts_with(b"SIP/2.0 200 OK\r\n"));
        stop.store(true, Ordering::Relaxed);
        // The worker notices the flag on its next turn (a tick at most) and leaves 300 ms later.
        running.join().unwrap();
        let _ = std::fs::remove_dir_all(&data);

        let log = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        let traced = |what: &str| {
            log.lines().any(|l| {
                l.contains("strowger::sip:")
                    && l.contains("call_id=\"in-process-1\"")
                    && l.contains(what)
            })
        };
        assert!(traced(&format!("SIP received from udp:{me}")), "{log}");
        assert!(traced(&format!("SIP sent to udp:{me}")), "{log}");
        assert!(log.lines().any(|l| l == "SIP/2.0 200 OK"), "{log}");
    }

    #[test]
    fn kernel_arrival_stamps_are_used_only_when_plausible() {
        let now = Instant::now() + Duration::from_secs(10);
        let earlier = now - Duration::from_millis(60);
        let ms = Duration::from_millis;
        assert_eq!(arrived(Some(earlier), now), (earlier, ms(60)));
        assert_eq!(arrived(None, now), (now, ms(0)));
        assert_eq!(arrived(Some(now + ms(5)), now), (now, ms(0)));
        assert_eq!(arrived(Some(now - ms(2000)), now), (now, ms(0)));
    }

    #[test]
    fn ticks_keep_their_grid_through_late_turns_and_stalls() {
        let t0 = Instant::now();
        let ms = |n: u64| Duration::from_millis(n);
        // On time or a little late: the next is one tick on.
        assert_eq!(next_tick(t0, TICK, t0 + ms(1)), t0 + ms(5));
        // A tick and a half late: the missed one runs now, still on the grid.
        assert_eq!(next_tick(t0, TICK, t0 + ms(8)), t0 + ms(5));
        // One pass per cycle (no phases needed): a whole cycle on, on the same grid.
        assert_eq!(next_tick(t0, TICK * 4, t0 + ms(3)), t0 + ms(20));
        // Past a whole cycle behind: whole cycles are skipped, the grid kept (5 + 20 k ms).
        let next = next_tick(t0, TICK, t0 + ms(47));
        assert_eq!(next, t0 + ms(45));
        assert_eq!((next - t0).as_millis() % 5, 0);
        assert!(next <= t0 + ms(47) && t0 + ms(47) < next + ms(20));
    }
}
