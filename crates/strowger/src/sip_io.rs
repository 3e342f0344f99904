//! SIP transports: UDP sockets (one per worker and listen address, SO_REUSEPORT so the kernel
//! spreads datagrams over workers) and TCP connections with stream framing.

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
/// one may stay silent, and how long one may stay without authenticating.
#[derive(Clone, Copy, Debug)]
pub struct TcpLimits {
    pub max: usize,
    pub per_source: usize,
    pub idle: Duration,
    pub unauthenticated: Duration,
}

impl TcpLimits {
    pub fn new(s: &switch::config::Security, max: usize) -> TcpLimits {
        TcpLimits {
            max,
            per_source: s.tcp_max_per_source as usize,
            idle: s.tcp_idle,
            unauthenticated: s.tcp_unauthenticated,
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

/// One TCP connection: what was read but not framed yet, and what is waiting to be written.
pub struct Conn {
    pub stream: TcpStream,
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
            peer,
            local,
            inbuf: Vec::new(),
            outbuf: Vec::new(),
            opened: now,
            last: now,
            authenticated: false,
        }
    }

    /// Why it should be closed at `now`, if it should: silent past `idle`, or unauthenticated
    /// past `unauthenticated` since it opened.
    pub fn expired(&self, limits: &TcpLimits, now: Instant) -> Option<&'static str> {
        if now.saturating_duration_since(self.last) >= limits.idle {
            return Some("idle");
        }
        let age = now.saturating_duration_since(self.opened);
        (!self.authenticated && age >= limits.unauthenticated).then_some("unauthenticated")
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
                    self.inbuf.extend_from_slice(&chunk[..n]);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return ReadOutcome::Closed,
            }
        }
        loop {
            if self.inbuf.is_empty() {
                return ReadOutcome::Open;
            }
            match Message::parse(&self.inbuf, false) {
                Ok(m) => {
                    if logging::sip_enabled() {
                        let bytes = &self.inbuf[..m.consumed];
                        logging::sip(Dir::Received, Transport::Tcp, self.peer, bytes);
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

    pub fn send(&mut self, bytes: &[u8]) {
        self.last = Instant::now();
        if self.outbuf.is_empty() {
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
    pub fn unsent(&self) -> bool {
        !self.outbuf.is_empty()
    }

    /// Writes what is pending once the socket is writable again.
    pub fn flush(&mut self) -> io::Result<()> {
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
