//! RTP and RTCP sockets of one worker: an even port for RTP and the next one for RTCP per leg,
//! taken round-robin from the worker's slice of the port range so a port is reused as late as
//! possible (a late packet of an ended call must not land in a new one).
//!
//! The sockets are not registered with epoll: the worker drains every leg once per 20 ms tick,
//! which costs one system call per leg and tick instead of a wake-up per packet.

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};

pub struct Pair {
    pub rtp: UdpSocket,
    pub rtcp: UdpSocket,
}

pub struct MediaSockets {
    ip: IpAddr,
    lo: u16,
    hi: u16,
    next: u16,
    legs: Vec<Option<Pair>>,
}

impl MediaSockets {
    /// `lo..hi` is this worker's slice (lo even, hi exclusive).
    pub fn new(ip: IpAddr, lo: u16, hi: u16) -> MediaSockets {
        MediaSockets {
            ip,
            lo,
            hi,
            next: lo,
            legs: Vec::new(),
        }
    }

    /// Binds a pair for `leg`; gives up after one sweep of the slice.
    pub fn open(&mut self, leg: usize) -> Option<u16> {
        let span = (self.hi - self.lo) / 2;
        for _ in 0..span {
            let port = self.next;
            self.next = if port + 2 >= self.hi {
                self.lo
            } else {
                port + 2
            };
            if let Ok(pair) = self.bind(port) {
                if self.legs.len() <= leg {
                    self.legs.resize_with(leg + 1, || None);
                }
                self.legs[leg] = Some(pair);
                return Some(port);
            }
        }
        None
    }

    fn bind(&self, port: u16) -> io::Result<Pair> {
        let rtp = UdpSocket::bind(SocketAddr::new(self.ip, port))?;
        let rtcp = UdpSocket::bind(SocketAddr::new(self.ip, port + 1))?;
        rtp.set_nonblocking(true)?;
        rtcp.set_nonblocking(true)?;
        Ok(Pair { rtp, rtcp })
    }

    pub fn close(&mut self, leg: usize) {
        if let Some(slot) = self.legs.get_mut(leg) {
            *slot = None;
        }
    }

    pub fn get(&self, leg: usize) -> Option<&Pair> {
        self.legs.get(leg).and_then(Option::as_ref)
    }

    /// Legs with open sockets, for the per-tick drain.
    pub fn open_legs(&self) -> impl Iterator<Item = (usize, &Pair)> {
        self.legs
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.as_ref().map(|p| (i, p)))
    }
}
