//! One load thread: its own SIP socket, its own calls and their RTP sockets, one event loop.
//!
//! Every call of a thread shares one RTP socket (every SDP offer names its port) and packets are
//! told apart by their source, the server's port for that call. A load generator must cost less
//! than what it loads: one socket read in batches of 64 per 5 ms tick spares the per-socket
//! system call and the thousands of kernel sockets that per-call ports cost. Each tick drains the
//! socket, then serves a quarter of the calls (slot % 4 == phase), so each call is visited every
//! 20 ms: it echoes what arrived or sends the frames that are due, and nothing is allocated per
//! packet. SIP is read in batches whenever the socket is readable, and call timers sit in one
//! heap.
//!
//! A server that tells calls apart by their far end's address (strowger's `rtp.shared_ports`) needs
//! an address per call: [`Addressing::SocketPerCall`] pays a socket per call for it, as phones do;
//! [`Addressing::AddressPerCall`] keeps the one socket, bound to the wildcard address on the
//! loopback device, gives each call its own loopback address on it, learns each datagram's call
//! from the address it was sent to (IP_PKTINFO) and sends each call's packets from its address.
//!
//! With `--tls-ca` a thread's SIP goes over one TLS connection instead ([`crate::tls`]); with
//! `--srtp` too, each call offers RTP/SAVP with its own SDES key and protects what it sends and
//! unprotects what arrives with the project's SRTP (crates/srtp), as an SRTP phone does.

use crate::report::{Progress, Report};
use crate::sipmsg::{scan, sdp_audio, Kind, Method};
use crate::tls::TlsLink;
use crate::uac::{
    answered_key, parse_call_id, write, write_ok, Call, Emit, Endpoint, Event, Failure, State,
    SDES_KEY_LEN,
};
use mmsg::{enable_destinations, enable_timestamps, set_dont_fragment, Batch, Outbox};
use rtp::packet::{RtpHeader, RtpPacket, HEADER_LEN};
use rtp::stats::ReceiveStats;
use rustc_hash::FxHashMap;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TICK: Duration = Duration::from_millis(5);
const PHASES: usize = 4;
const FRAME: Duration = Duration::from_millis(20);
const SAMPLES: u32 = 160;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RtpMode {
    /// Send back every packet that arrives, under our own SSRC, sequence and timestamps.
    Echo,
    /// 50 packets/s (a 440 Hz tone in the offered codec) per call, whatever arrives.
    Send,
    /// No RTP sockets (the SDP still offers a port).
    None,
}

/// Which address each call of a thread offers for RTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Addressing {
    /// The thread's one socket and address for every call.
    Shared,
    /// A socket (an even port of the thread's share) per call.
    SocketPerCall,
    /// The thread's one socket, and a loopback address per call (127.16+thread.x.y).
    AddressPerCall,
}

#[derive(Debug, Clone)]
pub struct Config {
    pub target: SocketAddr,
    pub ext: String,
    pub calls: u64,
    pub rate: f64,
    pub hold: Duration,
    pub rtp: RtpMode,
    /// The one codec offered; 20 ms packets on an 8 kHz RTP clock.
    pub codec: codec::Format,
    pub local_ip: IpAddr,
    /// Most calls up at once (0: no limit); like SIPp's -l.
    pub limit: u64,
    /// Even-aligned port range for RTP, split between threads.
    pub rtp_ports: (u16, u16),
    /// Which address each call offers for RTP.
    pub addressing: Addressing,
    /// Stop (counting what is still up as "unfinished") after this long.
    pub max_time: Duration,
    /// SIP over TLS, trusting the server certificates in this PEM file.
    pub tls_ca: Option<PathBuf>,
    /// SDES-SRTP (needs `tls_ca`): RTP/SAVP offers, every packet protected and checked.
    pub srtp: bool,
}

/// Where a thread's SIP goes.
enum SipLink {
    Udp(UdpSocket),
    Tls(Box<TlsLink>),
}

impl SipLink {
    /// Sends one message (a lost one is the retransmission timers' business over UDP, and a
    /// broken connection shows on the next read).
    fn send(&mut self, msg: &[u8], to: SocketAddr) {
        let _ = match self {
            SipLink::Udp(s) => s.send_to(msg, to).map(drop),
            SipLink::Tls(t) => t.send(msg),
        };
    }

    fn fd(&self) -> RawFd {
        match self {
            SipLink::Udp(s) => s.as_raw_fd(),
            SipLink::Tls(t) => t.as_raw_fd(),
        }
    }
}

/// A call's SRTP: its own key protects what it sends, the server's answer key checks what
/// arrives.
struct Srtp {
    tx: srtp::Context,
    rx: srtp::Context,
}

impl Srtp {
    fn new(local: &[u8], remote: &[u8]) -> Option<Srtp> {
        let suite = srtp::Suite::AesCm128HmacSha1_80;
        Some(Srtp {
            tx: srtp::Context::new(suite, local, srtp::Direction::Outbound).ok()?,
            rx: srtp::Context::new(suite, remote, srtp::Direction::Inbound).ok()?,
        })
    }
}

/// This thread's share of the work.
pub struct Share {
    pub thread: u32,
    pub run: u32,
    pub calls: u64,
    pub rate: f64,
    pub limit: u64,
    pub ports: (u16, u16),
}

struct Slot {
    call: Call,
    /// The deadline last pushed on the heap for this slot.
    armed: Option<Instant>,
    /// Where the server sends this call's RTP from (its SDP answer), while the call has media.
    rtp_from: Option<SocketAddr>,
    /// The slot's own RTP socket and port (`SocketPerCall`), kept for the calls that reuse it.
    own: Option<(UdpSocket, u16)>,
    /// The slot's own address on the thread's socket (`AddressPerCall`), its packets' source.
    address: Option<IpAddr>,
    /// The server's SDES key from its answer, until the call is up and keyed.
    answer_key: Option<[u8; SDES_KEY_LEN]>,
    srtp: Option<Srtp>,
    stats: Option<ReceiveStats>,
    /// The first frame's arrival and RTP timestamp, and the smallest transit since (µs), for
    /// counting late arrivals.
    first_rx: Option<(Instant, u32)>,
    min_transit_us: i64,
    rx: u64,
    ssrc: u32,
    seq: u16,
    ts: u32,
    /// Frames sent since the call came up (send mode).
    frames: u64,
    /// Echo mode: payloads received and not yet sent back, played out one per 20 ms visit so the
    /// echoed stream keeps its own steady clock (a one-to-four-frame jitter buffer).
    ring: [[u8; RING_BYTES]; RING],
    ring_len: [u16; RING],
    ring_pt: u8,
    head: usize,
    queued: usize,
}

const RING: usize = 4;
const RING_BYTES: usize = 320;
/// Room for one packet of ours or the server's: header, the largest payload, SRTP's trailer.
const PACKET_BYTES: usize = 512;

pub struct Thread {
    cfg: Config,
    share: Share,
    ep: Endpoint,
    sip: SipLink,
    /// The RTP socket every call of this thread shares (none with `--rtp none`).
    rtp: Option<UdpSocket>,
    rtp_port: u16,
    /// The next port of the share to try for a slot's own socket.
    next_port: u16,
    /// Which call a packet belongs to, by the server address it came from.
    by_source: FxHashMap<SocketAddr, usize>,
    slots: Vec<Slot>,
    free: Vec<usize>,
    timers: BinaryHeap<Reverse<(Instant, usize, u32)>>,
    out: Vec<u8>,
    /// This tick's RTP, sent together (sendmmsg) at the end of the tick.
    outbox: Outbox,
    /// One second of tone as 50 packets in `cfg.codec`; send mode counts the echoes of them.
    tone: Vec<Vec<u8>>,
    report: Report,
    progress: Arc<Progress>,
    active: u64,
    up: u64,
    rtp_rx_pub: u64,
    rtp_tx_pub: u64,
}

/// A non-blocking UDP socket with buffers for bursts: 8 MiB (16 MiB for the shared RTP socket,
/// which takes a 5 ms burst of every call at once; as root past the system's rmem_max).
pub(crate) fn udp_socket(addr: SocketAddr, buffer: usize) -> std::io::Result<UdpSocket> {
    udp_socket_on(addr, buffer, None)
}

/// [`udp_socket`] bound to network device `device` too, if given (SO_BINDTODEVICE).
pub(crate) fn udp_socket_on(
    addr: SocketAddr,
    buffer: usize,
    device: Option<&[u8]>,
) -> std::io::Result<UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if device.is_some() {
        s.bind_device(device)?;
    }
    if s.set_recv_buffer_size(buffer).is_err() || s.recv_buffer_size().unwrap_or(0) < buffer {
        force_recv_buffer(&s, buffer);
    }
    let _ = s.set_send_buffer_size(buffer);
    s.bind(&addr.into())?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

/// SO_RCVBUFFORCE: a receive buffer past net.core.rmem_max (needs CAP_NET_ADMIN; else the
/// smaller buffer stays and a burst may overflow it, which the report shows as RTP loss).
fn force_recv_buffer(s: &socket2::Socket, bytes: usize) {
    mmsg::set_int_option(
        s,
        libc::SOL_SOCKET,
        libc::SO_RCVBUFFORCE,
        bytes as libc::c_int,
    );
}

/// The thread's shared RTP socket: the first even port of its share that binds. For
/// `AddressPerCall`, bound to the wildcard address on the loopback device (so that it hears every
/// call's loopback address and nothing from another network) and told each datagram's destination.
fn rtp_socket(
    ip: IpAddr,
    (lo, hi): (u16, u16),
    addressing: Addressing,
) -> std::io::Result<(UdpSocket, u16)> {
    let per_call = addressing == Addressing::AddressPerCall;
    if per_call && !(ip.is_loopback() && ip.is_ipv4()) {
        return Err(std::io::Error::other(format!(
            "--address-per-call gives each call a 127/8 address: --local must be an IPv4 \
             loopback address, not {ip}"
        )));
    }
    let device = per_call.then(loopback_device).flatten();
    let mut last = std::io::Error::other(format!("empty RTP port range {lo}-{hi}"));
    for port in (lo..hi).step_by(2) {
        let bind = match per_call {
            true => SocketAddr::new(std::net::Ipv4Addr::UNSPECIFIED.into(), port),
            false => SocketAddr::new(ip, port),
        };
        match udp_socket_on(bind, 16 << 20, device) {
            Ok(s) => {
                enable_timestamps(&s);
                set_dont_fragment(&s);
                if per_call {
                    enable_destinations(&s);
                }
                return Ok((s, port));
            }
            Err(e) => last = e,
        }
    }
    Err(std::io::Error::new(
        last.kind(),
        format!("no RTP port free in {lo}-{hi} ({last}): give --rtp-ports a free range"),
    ))
}

/// The loopback device's name to bind a wildcard socket to, if this process may (any process
/// since Linux 5.7, CAP_NET_RAW before);
/// else None, with a warning: the socket then listens on every interface's address at its port,
/// though only loopback traffic is sent to it.
pub(crate) fn loopback_device() -> Option<&'static [u8]> {
    use socket2::{Domain, Socket, Type};
    let probe = Socket::new(Domain::IPV4, Type::DGRAM, None).ok()?;
    match probe.bind_device(Some(b"lo")) {
        Ok(()) => Some(b"lo"),
        Err(e) => {
            eprintln!(
                "strowger-load: --address-per-call cannot bind RTP to the loopback device ({e}; \
                 before Linux 5.7 that needs CAP_NET_RAW): its RTP sockets listen on the wildcard address"
            );
            None
        }
    }
}

/// Call `slot`'s own address on thread `thread`'s socket (`AddressPerCall`): 127.(16+thread).x.y,
/// with y in 1..=250, so never a network or broadcast-looking address.
pub(crate) fn call_address(thread: u32, slot: usize) -> Option<IpAddr> {
    let second = u8::try_from(16 + thread).ok()?;
    let third = u8::try_from(slot / 250).ok()?;
    Some(std::net::Ipv4Addr::new(127, second, third, (slot % 250) as u8 + 1).into())
}

/// The slot whose [`call_address`] on `thread` is `ip`.
fn slot_of(thread: u32, ip: IpAddr) -> Option<usize> {
    let IpAddr::V4(a) = ip else { return None };
    let [first, second, third, fourth] = a.octets();
    let ours = first == 127 && u32::from(second) == 16 + thread && (1..=250).contains(&fourth);
    ours.then(|| third as usize * 250 + fourth as usize - 1)
}

/// One second of a 440 Hz tone in `f`: 50 packets of 20 ms, encoded once before the calls start.
fn tone(f: codec::Format) -> Vec<Vec<u8>> {
    let pcm: Vec<i16> = (0..f.pcm_rate())
        .map(|i| {
            let x = (i as f64 * 440.0 * std::f64::consts::TAU / f.pcm_rate() as f64).sin();
            (x * 8000.0) as i16
        })
        .collect();
    codec::translate::encode_packets(f, &pcm)
}

impl Thread {
    pub fn new(cfg: Config, share: Share, progress: Arc<Progress>) -> std::io::Result<Thread> {
        let sip = match &cfg.tls_ca {
            Some(ca) => SipLink::Tls(Box::new(TlsLink::connect(
                cfg.target,
                cfg.local_ip,
                crate::tls::client_config(ca)?,
            )?)),
            None => SipLink::Udp(udp_socket(SocketAddr::new(cfg.local_ip, 0), 8 << 20)?),
        };
        let local = match &sip {
            SipLink::Udp(s) => s.local_addr()?,
            SipLink::Tls(t) => t.local_addr()?,
        };
        let (rtp, rtp_port) = match cfg.rtp {
            RtpMode::None => (None, share.ports.0),
            _ => {
                let (s, port) = rtp_socket(cfg.local_ip, share.ports, cfg.addressing)?;
                (Some(s), port)
            }
        };
        let (payload_type, sdp_codec) = crate::uac::sdp_codec(cfg.codec);
        let ep = Endpoint {
            server: cfg.target,
            local,
            ext: cfg.ext.clone(),
            run: share.run,
            thread: share.thread,
            payload_type,
            sdp_codec,
            tls: cfg.tls_ca.is_some(),
        };
        Ok(Thread {
            ep,
            sip,
            rtp,
            rtp_port,
            next_port: rtp_port + 2,
            by_source: FxHashMap::default(),
            slots: Vec::new(),
            free: Vec::new(),
            timers: BinaryHeap::new(),
            out: Vec::with_capacity(2048),
            outbox: Outbox::default(),
            tone: tone(cfg.codec),
            report: Report {
                setup_us: Vec::with_capacity(share.calls.min(10_000_000) as usize),
                ..Report::default()
            },
            progress,
            active: 0,
            up: 0,
            rtp_rx_pub: 0,
            rtp_tx_pub: 0,
            cfg,
            share,
        })
    }

    pub fn run(mut self, stop: &AtomicBool) -> Report {
        let start = Instant::now();
        let mut sip_batch = Batch::new(64, 4096, false);
        let mut sip_stream = Vec::with_capacity(4096);
        let mut rtp_batch = Batch::new(64, 2048, true);
        let mut next_tick = start + TICK;
        let mut ticks: u64 = 0;
        let stop_at = start + self.cfg.max_time;
        let interval = Duration::from_secs_f64(1.0 / self.share.rate.max(1e-6));
        loop {
            let now = Instant::now();
            // Start the calls that are due (paced from the start, so a late turn catches up).
            let due = ((now - start).as_secs_f64() * self.share.rate) as u64 + 1;
            let due = due.min(self.share.calls);
            while self.report.attempted < due
                && (self.share.limit == 0 || self.active < self.share.limit)
                && now < stop_at
            {
                self.start_call(now);
            }
            if self.report.attempted >= self.share.calls && self.active == 0 {
                break;
            }
            if now >= stop_at || stop.load(Ordering::Relaxed) {
                break;
            }
            // Sleep until SIP arrives, the next tick, the next call start or the next timer.
            let mut wake = next_tick;
            if self.report.attempted < self.share.calls
                && (self.share.limit == 0 || self.active < self.share.limit)
            {
                let next_start = start + interval.mul_f64(self.report.attempted as f64);
                wake = wake.min(next_start);
            }
            if let Some(Reverse((t, _, _))) = self.timers.peek() {
                wake = wake.min(*t);
            }
            let writing = matches!(&self.sip, SipLink::Tls(t) if t.wants_write());
            wait_readable(self.sip.fd(), writing, wake.saturating_duration_since(now));
            // SIP.
            if !self.read_sip(&mut sip_batch, &mut sip_stream) {
                eprintln!("strowger-load: the server closed the TLS connection");
                break;
            }
            // Timers.
            let now = Instant::now();
            while let Some(&Reverse((t, slot, generation))) = self.timers.peek() {
                if t > now {
                    break;
                }
                self.timers.pop();
                let s = &mut self.slots[slot];
                if s.call.generation != generation || s.armed != Some(t) {
                    continue; // superseded
                }
                s.armed = None;
                let o = s.call.on_timer(now);
                self.apply(slot, o, now);
            }
            // Media: a quarter of the calls every 5 ms.
            if now >= next_tick {
                let late = now - next_tick;
                self.media_phase(ticks as usize % PHASES, now, late, &mut rtp_batch);
                ticks += 1;
                next_tick += TICK;
                if next_tick < now {
                    next_tick = now + TICK;
                }
                self.publish();
            }
        }
        let now = Instant::now();
        for slot in 0..self.slots.len() {
            if self.slots[slot].call.state != State::Free {
                self.slots[slot].call.state = State::Free;
                self.report.fail("unfinished");
                self.end_call(slot);
            }
        }
        self.publish();
        self.report.wall = now - start;
        self.report
    }

    /// Takes every SIP message that has arrived; false if the TLS connection is gone.
    fn read_sip(&mut self, batch: &mut Batch, stream: &mut Vec<u8>) -> bool {
        let target = self.cfg.target;
        loop {
            let n = match &mut self.sip {
                SipLink::Udp(sock) => batch.recv(sock),
                SipLink::Tls(link) => {
                    if link.receive().is_err() {
                        return false;
                    }
                    let _ = link.flush();
                    while let SipLink::Tls(link) = &mut self.sip {
                        if !link.next_message(stream) {
                            break;
                        }
                        self.on_sip(stream, target, Instant::now());
                    }
                    return true;
                }
            };
            let now = Instant::now();
            for i in 0..n {
                if let Some((data, src)) = batch.get(i) {
                    self.on_sip(data, src, now);
                }
            }
            if n < 64 {
                return true;
            }
        }
    }

    fn publish(&mut self) {
        let p = &self.progress;
        Progress::add(&p.rtp_rx, self.report.rtp_received - self.rtp_rx_pub);
        Progress::add(&p.rtp_tx, self.report.rtp_sent - self.rtp_tx_pub);
        self.rtp_rx_pub = self.report.rtp_received;
        self.rtp_tx_pub = self.report.rtp_sent;
        p.up.store(self.up, Ordering::Relaxed);
    }

    fn start_call(&mut self, now: Instant) {
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(Slot {
                    call: Call::new(now),
                    armed: None,
                    rtp_from: None,
                    own: None,
                    address: None,
                    answer_key: None,
                    srtp: None,
                    stats: None,
                    first_rx: None,
                    min_transit_us: 0,
                    rx: 0,
                    ssrc: 0,
                    seq: 0,
                    ts: 0,
                    frames: 0,
                    ring: [[0; RING_BYTES]; RING],
                    ring_len: [0; RING],
                    ring_pt: 0,
                    head: 0,
                    queued: 0,
                });
                self.slots.len() - 1
            }
        };
        let ip = self.cfg.local_ip;
        let local_rtp = match (self.cfg.addressing, self.rtp.is_some()) {
            (Addressing::SocketPerCall, true) => self
                .own_socket(slot)
                .map(|port| SocketAddr::new(ip, port))
                .ok_or("no-rtp-port"),
            (Addressing::AddressPerCall, true) => call_address(self.share.thread, slot)
                .map(|a| SocketAddr::new(a, self.rtp_port))
                .ok_or("no-rtp-address"),
            _ => Ok(SocketAddr::new(ip, self.rtp_port)),
        };
        let local_rtp = match local_rtp {
            Ok(a) => a,
            Err(why) => {
                self.report.attempted += 1;
                self.report.fail(why);
                Progress::add(&self.progress.attempted, 1);
                Progress::add(&self.progress.failed, 1);
                self.free.push(slot);
                return;
            }
        };
        self.report.attempted += 1;
        self.report.first_attempt.get_or_insert(now);
        self.report.last_attempt = Some(now);
        self.active += 1;
        self.report.max_concurrent = self.report.max_concurrent.max(self.active);
        Progress::add(&self.progress.attempted, 1);
        let s = &mut self.slots[slot];
        s.stats = None;
        s.first_rx = None;
        s.rx = 0;
        s.frames = 0;
        s.queued = 0;
        s.address = (self.cfg.addressing == Addressing::AddressPerCall).then(|| local_rtp.ip());
        let o = s.call.start(now, self.cfg.hold, local_rtp);
        s.call.sdes_key = self.cfg.srtp.then(|| {
            let mut key = [0; SDES_KEY_LEN];
            key.copy_from_slice(&srtp::master_key()[..SDES_KEY_LEN]);
            key
        });
        s.answer_key = None;
        s.srtp = None;
        // A per-call SSRC and random-looking start values (RFC 3550 §5.1).
        let mix = (slot as u32).wrapping_mul(0x9E37_79B9)
            ^ s.call.generation.wrapping_mul(0x85EB_CA6B)
            ^ self.share.run;
        s.ssrc = mix;
        s.seq = (mix >> 7) as u16;
        s.ts = mix.rotate_left(13);
        self.apply(slot, o, now);
    }

    /// The slot's own RTP socket's port, bound on its first call from the share's next free
    /// even port.
    fn own_socket(&mut self, slot: usize) -> Option<u16> {
        if let Some((_, port)) = &self.slots[slot].own {
            return Some(*port);
        }
        while self.next_port < self.share.ports.1 {
            let port = self.next_port;
            self.next_port += 2;
            if let Ok(sock) = udp_socket(SocketAddr::new(self.cfg.local_ip, port), 256 << 10) {
                enable_timestamps(&sock);
                set_dont_fragment(&sock);
                self.slots[slot].own = Some((sock, port));
                return Some(port);
            }
        }
        None
    }

    /// Sends what the call asked for, books its event, re-arms its timer.
    fn apply(&mut self, slot: usize, o: crate::uac::Out, now: Instant) {
        if let Some(what) = o.send {
            write(&mut self.out, &self.ep, slot, &self.slots[slot].call, what);
            let to = match what {
                Emit::Invite | Emit::AckFailure => self.cfg.target,
                // In-dialog requests go to the target too: loopback servers answer where the
                // INVITE went; a Contact elsewhere would need DNS or routing we do not do.
                Emit::Ack | Emit::Bye => self.cfg.target,
            };
            self.sip.send(&self.out, to);
            if o.retransmit {
                self.report.retransmissions += 1;
                Progress::add(&self.progress.retransmissions, 1);
            }
        }
        match o.event {
            Some(Event::Answered(setup)) => {
                let s = &mut self.slots[slot];
                if let Some(local) = s.call.sdes_key {
                    s.srtp = s.answer_key.and_then(|remote| Srtp::new(&local, &remote));
                    if s.srtp.is_none() {
                        self.report.srtp_unkeyed += 1;
                    }
                }
                if let Some(from) = self.slots[slot]
                    .call
                    .remote_rtp
                    .filter(|_| self.rtp.is_some())
                {
                    self.slots[slot].rtp_from = Some(from);
                    // A call with its own socket or address is found by it, not by source.
                    if self.cfg.addressing == Addressing::Shared {
                        self.by_source.insert(from, slot);
                    }
                }
                self.report.answered += 1;
                self.up += 1;
                self.report
                    .setup_us
                    .push(setup.as_micros().min(u32::MAX as u128) as u32);
            }
            Some(Event::Completed) => {
                self.report.completed += 1;
                Progress::add(&self.progress.completed, 1);
                self.end_call(slot);
            }
            Some(Event::Failed(f)) => {
                match f {
                    Failure::Status(code) => self.report.fail(&code.to_string()),
                    Failure::InviteTimeout => self.report.fail("timeout"),
                    Failure::ByeTimeout => self.report.fail("bye-timeout"),
                    Failure::RemoteBye => self.report.fail("remote-bye"),
                }
                Progress::add(&self.progress.failed, 1);
                self.end_call(slot);
            }
            None => {}
        }
        let s = &mut self.slots[slot];
        let next = s.call.next_timer();
        if next != s.armed {
            s.armed = next;
            if let Some(t) = next {
                self.timers.push(Reverse((t, slot, s.call.generation)));
            }
        }
        let _ = now;
    }

    /// Books the call's RTP figures and frees its slot.
    fn end_call(&mut self, slot: usize) {
        let s = &mut self.slots[slot];
        if s.call.answered_at.is_some() {
            self.up = self.up.saturating_sub(1);
        }
        if let Some(st) = s.stats.take() {
            let expected = st.expected() as u64;
            self.report.rtp_expected += expected;
            self.report.rtp_lost += st.lost().max(0) as u64;
            let j = st.jitter_duration().as_micros() as u64;
            self.report.jitter_sum_us += j;
            self.report.jitter_max_us = self.report.jitter_max_us.max(j);
            self.report.jitter_calls += 1;
        }
        if let Some(from) = s.rtp_from.take() {
            if self.by_source.get(&from) == Some(&slot) {
                self.by_source.remove(&from);
            }
        }
        s.armed = None;
        self.active -= 1;
        self.free.push(slot);
    }

    fn on_sip(&mut self, data: &[u8], src: SocketAddr, now: Instant) {
        let Some(m) = scan(data) else {
            return;
        };
        let Some((run, thread, slot, generation)) = parse_call_id(m.call_id) else {
            return;
        };
        let ours = run == self.share.run
            && thread == self.share.thread
            && self
                .slots
                .get(slot)
                .is_some_and(|s| s.call.generation == generation);
        match m.kind {
            Kind::Response(code) => {
                if !ours {
                    return;
                }
                let invite = m.cseq_method == Some(Method::Invite);
                let rtp = if invite && (200..300).contains(&code) {
                    if self.cfg.srtp {
                        self.slots[slot].answer_key = answered_key(m.body);
                    }
                    sdp_audio(m.body)
                } else {
                    None
                };
                let o = self.slots[slot].call.on_response(
                    code,
                    invite,
                    m.to_tag,
                    m.contact_uri,
                    rtp,
                    now,
                );
                self.apply(slot, o, now);
            }
            Kind::Request(Method::Bye) => {
                write_ok(&mut self.out, &m, "BYE");
                self.sip.send(&self.out, src);
                if ours {
                    let o = self.slots[slot].call.on_bye();
                    self.apply(slot, o, now);
                }
            }
            Kind::Request(Method::Options) => {
                write_ok(&mut self.out, &m, "OPTIONS");
                self.sip.send(&self.out, src);
            }
            _ => {}
        }
    }

    fn media_phase(&mut self, phase: usize, now: Instant, late: Duration, batch: &mut Batch) {
        let Thread {
            rtp,
            by_source,
            slots,
            report,
            outbox,
            tone,
            ep,
            cfg,
            share,
            ..
        } = self;
        let Some(sock) = rtp.as_ref() else {
            return;
        };
        let mode = cfg.rtp;
        let per_address = cfg.addressing == Addressing::AddressPerCall;
        // Everything that arrived since the last tick, filed under its call.
        batch.drain(sock, |batch, n| {
            for k in 0..n {
                let Some((data, src)) = batch.get(k) else {
                    continue;
                };
                // RTCP comes from the server's next port, which names no call; RTCP on the RTP
                // port (PT 200–204 in the second byte) is not media either.
                let slot = match per_address {
                    true => batch
                        .destination(k)
                        .and_then(|d| slot_of(share.thread, d))
                        .filter(|&i| slots.get(i).is_some_and(|s| s.rtp_from == Some(src))),
                    false => by_source.get(&src).copied(),
                };
                let Some(s) = slot.and_then(|i| slots.get_mut(i)) else {
                    continue;
                };
                s.take(data, batch.arrival(k).unwrap_or(now), mode, tone, report);
            }
        });
        // Calls with sockets of their own: this phase's, what arrived since their last visit.
        let mut i = phase;
        while i < slots.len() {
            let s = &mut slots[i];
            i += PHASES;
            let Some(own) = s.own.take() else {
                continue;
            };
            if s.rtp_from.is_some() {
                batch.drain(&own.0, |batch, n| {
                    for k in 0..n {
                        match batch.get(k) {
                            Some((data, src)) if Some(src) == s.rtp_from => {
                                s.take(data, batch.arrival(k).unwrap_or(now), mode, tone, report)
                            }
                            _ => {}
                        }
                    }
                });
            }
            s.own = Some(own);
        }
        // This phase's calls send what is due.
        let late_tick = late > FRAME;
        let mut i = phase;
        while i < slots.len() {
            let s = &mut slots[i];
            i += PHASES;
            let Some(dst) = s.rtp_from.and(s.call.remote_rtp) else {
                continue;
            };
            if s.call.state != State::Up {
                continue;
            }
            match mode {
                RtpMode::Echo => s.echo(dst, outbox, late_tick, report),
                RtpMode::Send => s.send_tone(dst, outbox, tone, ep.payload_type, now, report),
                RtpMode::None => {}
            }
            if let Some((own, _)) = &s.own {
                outbox.flush(own);
            }
        }
        outbox.flush(sock);
    }
}

impl Slot {
    /// An RTP datagram from the server for this call: RTCP on the RTP port (PT 200–204 in the
    /// second byte) and what does not parse are not media. An SRTP call's packet counts only if
    /// it authenticates under the server's key; it is then decrypted on the stack.
    fn take(
        &mut self,
        data: &[u8],
        at: Instant,
        mode: RtpMode,
        tone: &[Vec<u8>],
        report: &mut Report,
    ) {
        if data.len() < 2 || (200..=204).contains(&data[1]) {
            return;
        }
        let mut clear: [u8; PACKET_BYTES];
        let data = match (&mut self.srtp, self.call.sdes_key) {
            (_, None) => data,
            (Some(srtp), Some(_)) if data.len() <= PACKET_BYTES => {
                clear = [0; PACKET_BYTES];
                let clear = &mut clear[..data.len()];
                clear.copy_from_slice(data);
                match srtp.rx.unprotect(clear) {
                    Ok(len) => &clear[..len],
                    Err(_) => {
                        report.srtp_rejected += 1;
                        return;
                    }
                }
            }
            _ => {
                report.srtp_rejected += 1;
                return;
            }
        };
        if let Ok(pkt) = RtpPacket::parse(data) {
            self.receive(&pkt, at, mode, tone, report);
        }
    }

    /// Books an RTP packet of this call and, in echo mode, queues its payload to go back; in
    /// send mode, counts it if it is one of the tone's packets (the server echoed it intact).
    fn receive(
        &mut self,
        pkt: &RtpPacket,
        at: Instant,
        mode: RtpMode,
        tone: &[Vec<u8>],
        report: &mut Report,
    ) {
        self.rx += 1;
        report.rtp_received += 1;
        if mode == RtpMode::Send && tone.iter().any(|t| t.as_slice() == pkt.payload()) {
            report.tone_echoed += 1;
        }
        match self.stats.as_mut() {
            Some(st) => {
                st.on_packet(pkt.sequence());
            }
            None => self.stats = Some(ReceiveStats::new(pkt.sequence(), 8000, at)),
        }
        if let Some(st) = self.stats.as_mut() {
            st.on_timestamp(pkt.timestamp(), at);
        }
        if late_arrival(
            &mut self.first_rx,
            &mut self.min_transit_us,
            pkt.timestamp(),
            at,
        ) {
            report.late_arrivals += 1;
        }
        if mode == RtpMode::Echo && self.call.state == State::Up {
            let p = pkt.payload();
            let len = p.len().min(RING_BYTES);
            if self.queued == RING {
                self.head = (self.head + 1) % RING; // full: the oldest goes
                self.queued -= 1;
            }
            let at = (self.head + self.queued) % RING;
            self.ring[at][..len].copy_from_slice(&p[..len]);
            self.ring_len[at] = len as u16;
            self.ring_pt = pkt.payload_type();
            self.queued += 1;
        }
    }

    /// One frame per visit in steady state; after a late visit, all but one of the backlog (the
    /// one kept absorbs a packet that arrives just after its visit).
    fn echo(&mut self, dst: SocketAddr, outbox: &mut Outbox, late_tick: bool, report: &mut Report) {
        let frames = if self.queued >= 2 {
            self.queued - 1
        } else {
            self.queued
        };
        for _ in 0..frames {
            let len = self.ring_len[self.head] as usize;
            let (head, pt) = (self.head, self.ring_pt);
            let payload = self.ring[head];
            if self.send(dst, outbox, pt, &payload[..len]) {
                report.rtp_sent += 1;
                if late_tick {
                    report.late_frames += 1;
                }
            }
            self.head = (self.head + 1) % RING;
            self.queued -= 1;
        }
    }

    /// Send mode: frame k is due at answer + k·20 ms; sends every frame that is due.
    fn send_tone(
        &mut self,
        dst: SocketAddr,
        outbox: &mut Outbox,
        tone: &[Vec<u8>],
        pt: u8,
        now: Instant,
        report: &mut Report,
    ) {
        let Some(up_at) = self.call.answered_at else {
            return;
        };
        let due = ((now - up_at).as_micros() / FRAME.as_micros()) as u64 + 1;
        while self.frames < due {
            let k = self.frames;
            if self.send(dst, outbox, pt, &tone[k as usize % tone.len()]) {
                report.rtp_sent += 1;
                if now.saturating_duration_since(up_at + FRAME * k as u32) > FRAME + TICK {
                    report.late_frames += 1;
                }
            }
        }
    }

    /// Queues the call's next packet (its own SSRC, sequence and timestamp) and advances them.
    fn send(&mut self, dst: SocketAddr, outbox: &mut Outbox, pt: u8, payload: &[u8]) -> bool {
        let h = RtpHeader {
            marker: self.frames == 0,
            payload_type: pt,
            sequence: self.seq,
            timestamp: self.ts,
            ssrc: self.ssrc,
        };
        let mut head = [0u8; HEADER_LEN];
        let len = HEADER_LEN + payload.len();
        let sent = h.write(&mut head).is_ok()
            && match (&mut self.srtp, self.call.sdes_key) {
                (_, None) => {
                    outbox.push_from(&[&head, payload], dst, self.address);
                    true
                }
                (Some(srtp), Some(_)) if len + srtp::MAX_TRAILER <= PACKET_BYTES => {
                    let mut packet = [0u8; PACKET_BYTES];
                    packet[..HEADER_LEN].copy_from_slice(&head);
                    packet[HEADER_LEN..len].copy_from_slice(payload);
                    match srtp.tx.protect(&mut packet, len) {
                        Ok(n) => {
                            outbox.push_from(&[&packet[..n]], dst, self.address);
                            true
                        }
                        Err(_) => false,
                    }
                }
                // An SRTP call the server answered without a key sends nothing.
                _ => false,
            };
        self.seq = self.seq.wrapping_add(1);
        self.ts = self.ts.wrapping_add(SAMPLES);
        self.frames += 1;
        sent
    }
}

/// Whether a frame with RTP timestamp `ts` (8 kHz) arriving `at` is more than one frame later
/// than the call's earliest frame: its transit (arrival minus the timestamp's time, both from the
/// first frame) exceeds the smallest transit so far by over 20 ms.
fn late_arrival(first: &mut Option<(Instant, u32)>, min: &mut i64, ts: u32, at: Instant) -> bool {
    let Some((at0, ts0)) = *first else {
        *first = Some((at, ts));
        *min = 0;
        return false;
    };
    let elapsed = at.saturating_duration_since(at0).as_micros() as i64;
    let media = i64::from(ts.wrapping_sub(ts0) as i32) * 125;
    let transit = elapsed - media;
    *min = (*min).min(transit);
    transit - *min > FRAME.as_micros() as i64
}

/// Blocks up to `timeout` (µs precision) until `fd` is readable (or writable, if `writing`).
fn wait_readable(fd: RawFd, writing: bool, timeout: Duration) {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN | if writing { libc::POLLOUT } else { 0 },
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: one valid pollfd, a valid timespec, no signal mask.
    unsafe {
        libc::ppoll(&mut pfd, 1, &ts, std::ptr::null());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_is_late_when_its_transit_exceeds_the_smallest_by_a_frame() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let (mut first, mut min) = (None, 0);
        let mut late = |ts: u32, at: Instant| late_arrival(&mut first, &mut min, ts, at);
        assert!(!late(1000, t0));
        assert!(!late(1160, t0 + ms(20)), "on time");
        assert!(!late(1320, t0 + ms(55)), "15 ms late: within a frame");
        assert!(late(1480, t0 + ms(82)), "22 ms late");
        assert!(
            !late(1640, t0 + ms(75)),
            "early: the new smallest transit (-5 ms)"
        );
        assert!(
            late(1800, t0 + ms(117)),
            "17 ms late, but 22 ms after the smallest transit"
        );
    }

    #[test]
    fn each_call_address_is_distinct_and_leads_back_to_its_slot_and_thread() {
        let mut seen = std::collections::HashSet::new();
        for thread in [0, 1, 7] {
            for slot in (0..64_000).step_by(7).chain([249, 250, 251, 63_999]) {
                let a = call_address(thread, slot).unwrap();
                assert!(a.is_loopback(), "{a}");
                assert!(seen.insert(a), "{a} twice");
                assert_eq!(slot_of(thread, a), Some(slot), "{a}");
                assert_eq!(slot_of(thread + 1, a), None, "{a} is not the next thread's");
            }
        }
        assert_eq!(call_address(0, 64_000), None, "past 256 × 250 addresses");
        assert_eq!(slot_of(0, "127.16.0.0".parse().unwrap()), None);
        assert_eq!(slot_of(0, "127.0.0.1".parse().unwrap()), None);
    }
}
