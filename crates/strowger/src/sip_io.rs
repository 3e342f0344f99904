//! SIP transports: UDP sockets (one per worker and listen address, SO_REUSEPORT so the kernel
//! spreads datagrams over workers) and TCP connections with stream framing, TLS ones (tls.rs)
//! framed the same way inside their records, and WebSocket ones (ws.rs) over either, framed
//! a SIP message per WebSocket message.

pub mod page;
pub mod tls;
pub mod ws;

use crate::logging::{self, Dir};
use mio::net::{TcpListener, TcpStream, UdpSocket};
use sip::transaction::Transport;
use sip::{Message, ParseError};
use socket2::{Domain, Protocol, Socket, Type};
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// What TCP connections may hold (`[security]`): connections at once in all (lowered at start
/// to leave the RTP ports their descriptors, `crate::fds::tcp_cap`) and per source, how long
/// one may stay silent, how long one may stay without authenticating, and how long a TLS
/// handshake may take (`sip.tls_handshake_s`). TLS and WebSocket connections are TCP
/// connections here; WebSockets also have their own cap, upgrade time and ping interval
/// (`sip.ws_*`).
#[derive(Clone, Copy, Debug)]
pub struct TcpLimits {
    pub max: usize,
    pub per_source: usize,
    pub idle: Duration,
    pub unauthenticated: Duration,
    pub handshake: Duration,
    pub ws_max: usize,
    pub ws_handshake: Duration,
    pub ws_ping: Duration,
}

impl TcpLimits {
    pub fn new(cfg: &switch::config::Config, max: usize) -> TcpLimits {
        let s = &cfg.security;
        TcpLimits {
            max,
            per_source: s.tcp_max_per_source as usize,
            idle: s.tcp_idle,
            unauthenticated: s.tcp_unauthenticated,
            handshake: cfg.sip.tls.handshake,
            ws_max: cfg.sip.ws.max_connections,
            ws_handshake: cfg.sip.ws.handshake,
            ws_ping: cfg.sip.ws.ping,
        }
    }
}

impl Default for TcpLimits {
    /// What `[security]` defaults to.
    fn default() -> TcpLimits {
        TcpLimits {
            max: 4096,
            per_source: 32,
            idle: Duration::from_secs(120),
            unauthenticated: Duration::from_secs(30),
            handshake: Duration::from_secs(10),
            ws_max: 1024,
            ws_handshake: Duration::from_secs(10),
            ws_ping: Duration::from_secs(30),
        }
    }
}

/// A UDP socket bound with SO_REUSEPORT, so every worker can bind the same address.
pub fn udp_reuseport(addr: SocketAddr) -> io::Result<UdpSocket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    s.set_nonblocking(true)?;
    // Bursts of call set-ups arrive faster than one worker turn; a deep queue absorbs them
    // instead of dropping INVITEs (the sender would retransmit after T1 anyway).
    let _ = s.set_recv_buffer_size(4 << 20);
    let _ = s.set_send_buffer_size(4 << 20);
    s.bind(&addr.into())?;
    Ok(UdpSocket::from_std(s.into()))
}

pub fn tcp_listener(addr: SocketAddr) -> io::Result<TcpListener> {
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    s.set_reuse_address(true)?;
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    s.listen(1024)?;
    Ok(TcpListener::from_std(s.into()))
}

/// Why a TLS connection stopped half way through its handshake (`Conn::expired`).
pub const HANDSHAKE_UNFINISHED: &str = "TLS handshake unfinished (sip.tls_handshake_s)";
/// Why a WebSocket connection stopped before its upgrade was done.
pub const UPGRADE_UNFINISHED: &str = "WebSocket upgrade unfinished (sip.ws_handshake_s)";

/// One TCP connection: what was read but not framed yet, and what is waiting to be written.
pub struct Conn {
    pub stream: TcpStream,
    /// TLS on it: bytes read go through it before framing, and messages sent through it
    /// (rustls holds what waits to be written).
    tls: Option<Box<rustls::Connection>>,
    /// A WebSocket on it (inside TLS for `wss:`): what was read goes through it before
    /// parsing, one SIP message per WebSocket message, and what is sent is framed by it.
    ws: Option<Box<ws::Session>>,
    /// When it was last pinged for want of traffic (WebSockets only).
    pinged: Option<Instant>,
    pub peer: SocketAddr,
    pub local: SocketAddr,
    inbuf: Vec<u8>,
    outbuf: Vec<u8>,
    pub opened: Instant,
    /// When bytes last went either way.
    pub last: Instant,
    /// A REGISTER or authenticated request succeeded on it, strowger opened it, or its peer
    /// is whitelisted or trusted: it is not closed for want of authentication.
    pub authenticated: bool,
    /// WebSocket messages that were no SIP, dropped since the worker last took the count.
    pub garbage: u64,
}

/// What reading a connection gave.
pub enum ReadOutcome {
    Open,
    Closed,
}

impl Conn {
    pub fn new(stream: TcpStream, peer: SocketAddr, local: SocketAddr, now: Instant) -> Conn {
        Conn {
            stream,
            tls: None,
            ws: None,
            pinged: None,
            peer,
            local,
            inbuf: Vec::new(),
            outbuf: Vec::new(),
            opened: now,
            last: now,
            authenticated: false,
            garbage: 0,
        }
    }

    /// The same connection wrapped in TLS (`tls::Tls::accept` or `connect`).
    pub fn with_tls(mut self, tls: rustls::Connection) -> Conn {
        self.tls = Some(Box::new(tls));
        self
    }

    /// The same connection carrying a WebSocket (accepted by a `ws:` or `wss:` listener).
    pub fn with_ws(mut self, session: ws::Session) -> Conn {
        self.ws = Some(Box::new(session));
        self
    }

    pub fn transport(&self) -> Transport {
        match (&self.tls, &self.ws) {
            (None, None) => Transport::Tcp,
            (Some(_), None) => Transport::Tls,
            (None, Some(_)) => Transport::Ws,
            (Some(_), Some(_)) => Transport::Wss,
        }
    }

    /// Why it should be closed at `now`, if it should: silent past `idle`, unauthenticated
    /// past `unauthenticated` since it opened, or still in its TLS handshake past `handshake`.
    pub fn expired(&self, limits: &TcpLimits, now: Instant) -> Option<&'static str> {
        if now.saturating_duration_since(self.last) >= limits.idle {
            return Some("idle");
        }
        let age = now.saturating_duration_since(self.opened);
        if age >= limits.handshake && self.tls.as_ref().is_some_and(|t| t.is_handshaking()) {
            return Some(HANDSHAKE_UNFINISHED);
        }
        if age >= limits.ws_handshake && self.ws.as_ref().is_some_and(|w| !w.is_open()) {
            return Some(UPGRADE_UNFINISHED);
        }
        (!self.authenticated && age >= limits.unauthenticated).then_some("unauthenticated")
    }

    /// Takes bytes read from the socket: as they are, or decrypted; false when TLS failed.
    fn take(&mut self, mut bytes: &[u8]) -> bool {
        let Some(tls) = self.tls.as_mut() else {
            self.inbuf.extend_from_slice(bytes);
            return true;
        };
        while !bytes.is_empty() {
            if tls.read_tls(&mut bytes).is_err() {
                return false;
            }
            let state = match tls.process_new_packets() {
                Ok(state) => state,
                Err(e) => {
                    // The alert that tells the peer why.
                    let _ = tls.write_tls(&mut self.stream);
                    let fix = match **tls {
                        rustls::Connection::Client(_) => {
                            " (trust its CA with sip.tls_ca, or check the trunk's host)"
                        }
                        rustls::Connection::Server(_) => " (see sip.tls_client_ca)",
                    };
                    tracing::warn!("TLS with {} failed: {e}{fix}", self.peer);
                    return false;
                }
            };
            let n = state.plaintext_bytes_to_read();
            let start = self.inbuf.len();
            self.inbuf.resize(start + n, 0);
            if tls.reader().read_exact(&mut self.inbuf[start..]).is_err() {
                return false;
            }
            if state.peer_has_closed() {
                // Its close_notify: the socket's end follows, after the messages before it.
                break;
            }
        }
        // Handshake answers, or the messages that waited for the handshake.
        self.flush().is_ok()
    }

    /// Pings a WebSocket silent for `limits.ws_ping` (once per interval, and without counting
    /// as traffic: only its pong keeps the connection from `limits.idle`).
    pub fn keep_alive(&mut self, limits: &TcpLimits, now: Instant) {
        let due = |t: Instant| now.saturating_duration_since(t) >= limits.ws_ping;
        if !due(self.last) || !self.pinged.is_none_or(due) {
            return;
        }
        if let Some(ping) = self.ws.as_mut().and_then(|w| w.ping()) {
            self.pinged = Some(now);
            self.write(&ping);
        }
    }

    /// Feeds what was read into the WebSocket: SIP messages to `on_msg`, its answers (the
    /// upgrade's, pongs, closes) written back; false once it closed or was refused.
    fn unwrap_ws(&mut self, on_msg: &mut impl FnMut(Message)) -> bool {
        let (transport, peer, unsent) = (self.transport(), self.peer, self.unsent());
        let Some(session) = self.ws.as_mut() else {
            return true;
        };
        // A browser asks for the page's next file once it has the last: one asking while an
        // answer is still unsent is no browser, and would have strowger hold answer after
        // answer in memory.
        if session.served_page() && !session.is_open() && unsent {
            return false;
        }
        let mut garbage = 0;
        let (out, open) = session.receive(&self.inbuf, |f, bytes| match f {
            ws::Frame::Sip(m) => {
                if logging::sip_enabled() {
                    logging::sip(Dir::Received, transport, peer, bytes);
                }
                on_msg(*m)
            }
            ws::Frame::Garbage => {
                garbage += 1;
                tracing::debug!("a WebSocket message from {peer} is no SIP");
            }
            ws::Frame::Control => {}
        });
        self.garbage += garbage;
        self.inbuf.clear();
        if !out.is_empty() {
            self.write(&out);
        }
        open
    }

    /// Reads what is there and frames whole messages (Content-Length is mandatory on streams).
    /// A stream that cannot be framed is closed (RFC 3261 §18.3), keep-alive CRLFs are answered.
    pub fn read(&mut self, max_message: usize, mut on_msg: impl FnMut(Message)) -> ReadOutcome {
        let mut chunk = [0u8; 16384];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => return ReadOutcome::Closed,
                Ok(n) => {
                    self.last = Instant::now();
                    if !self.take(&chunk[..n]) {
                        return ReadOutcome::Closed;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return ReadOutcome::Closed,
            }
        }
        if self.ws.is_some() {
            return match self.unwrap_ws(&mut on_msg) {
                true => ReadOutcome::Open,
                false => ReadOutcome::Closed,
            };
        }
        loop {
            if self.inbuf.is_empty() {
                return ReadOutcome::Open;
            }
            match Message::parse(&self.inbuf, false) {
                Ok(m) => {
                    if logging::sip_enabled() {
                        let bytes = &self.inbuf[..m.consumed];
                        logging::sip(Dir::Received, self.transport(), self.peer, bytes);
                    }
                    self.inbuf.drain(..m.consumed);
                    on_msg(m);
                }
                Err(ParseError::KeepAlive) => {
                    // RFC 5626 §3.5.1: a double-CRLF ping gets a single-CRLF pong.
                    if self.inbuf.windows(4).any(|w| w == b"\r\n\r\n") {
                        self.send(b"\r\n");
                    }
                    self.inbuf.clear();
                    return ReadOutcome::Open;
                }
                Err(ParseError::Incomplete) if self.inbuf.len() <= max_message => {
                    return ReadOutcome::Open
                }
                Err(_) => return ReadOutcome::Closed,
            }
        }
    }

    /// Sends one SIP message (a WebSocket message of its own on a WebSocket).
    pub fn send(&mut self, bytes: &[u8]) {
        self.last = Instant::now();
        match self.ws.as_mut() {
            // Nothing to send before the upgrade: strowger only answers on a WebSocket.
            Some(session) => {
                if let Some(framed) = session.send(bytes) {
                    self.write(&framed);
                }
            }
            None => self.write(bytes),
        }
    }

    /// Writes bytes onto the stream, through TLS if it has it.
    fn write(&mut self, bytes: &[u8]) {
        if let Some(tls) = self.tls.as_mut() {
            // Held by rustls until the handshake is done; errors surface in `flush`.
            let _ = tls.writer().write_all(bytes);
            let _ = self.flush();
        } else if self.outbuf.is_empty() {
            match self.stream.write(bytes) {
                Ok(n) if n == bytes.len() => {}
                Ok(n) => self.outbuf.extend_from_slice(&bytes[n..]),
                Err(_) => self.outbuf.extend_from_slice(bytes),
            }
        } else {
            self.outbuf.extend_from_slice(bytes);
        }
    }

    /// Whether bytes wait to be written (a connection that closes so never delivered them).
    /// (On a TLS connection strowger opened, a handshake that never finished delivered nothing.)
    pub fn unsent(&self) -> bool {
        let undelivered = |t: &rustls::Connection| {
            t.wants_write() || (t.is_handshaking() && matches!(t, rustls::Connection::Client(_)))
        };
        !self.outbuf.is_empty() || self.tls.as_deref().is_some_and(undelivered)
    }

    /// Writes what is pending once the socket is writable again.
    pub fn flush(&mut self) -> io::Result<()> {
        if let Some(tls) = self.tls.as_mut() {
            while tls.wants_write() {
                match tls.write_tls(&mut self.stream) {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            return Ok(());
        }
        while !self.outbuf.is_empty() {
            match self.stream.write(&self.outbuf) {
                Ok(n) => {
                    self.outbuf.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}
