//! RTP and RTCP sockets of one worker: an even port for RTP and the next one for RTCP per leg,
//! taken from the worker's slice of the port range.
//!
//! Free ports wait in a FIFO queue, so a port is reused as late as possible (a late packet of an
//! ended call must not land in a new one) and taking one costs O(1) however full the range is:
//! when it is exhausted a new call is refused at once instead of sweeping every port.
//!
//! The sockets are not registered with epoll: the worker drains every leg once per tick, which
//! costs one system call per leg and tick instead of a wake-up per packet.

use std::cell::Cell;
use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

pub struct Pair {
    pub rtp: UdpSocket,
    pub rtcp: UdpSocket,
    port: u16,
    /// Where `rtp` is connected to, if anywhere.
    connected: Cell<Option<SocketAddr>>,
}

impl Pair {
    /// Sends an RTP packet. A connected socket skips the route lookup per send and lets the
    /// kernel drop packets from other sources, so the socket is connected while the media engine
    /// says the leg takes RTP from `dst` alone (`pinned`), and disconnected when that ends (a
    /// re-INVITE moved the far end).
    pub fn send_rtp(&self, payload: &[u8], dst: SocketAddr, pinned: bool) {
        let connected = self.connected.get();
        if pinned {
            if connected != Some(dst) && self.rtp.connect(dst).is_ok() {
                self.connected.set(Some(dst));
            }
            if self.connected.get() == Some(dst) {
                let _ = self.rtp.send(payload);
                return;
            }
        } else if connected.is_some() && disconnect(&self.rtp).is_ok() {
            self.connected.set(None);
        }
        let _ = self.rtp.send_to(payload, dst);
    }
}

/// Dissolves a UDP socket's association (connect(2) to AF_UNSPEC), so it takes any source again.
fn disconnect(sock: &UdpSocket) -> io::Result<()> {
    // SAFETY: a zeroed sockaddr with family AF_UNSPEC is what connect(2) expects for this.
    let rc = unsafe {
        let mut sa: libc::sockaddr = std::mem::zeroed();
        sa.sa_family = libc::AF_UNSPEC as libc::sa_family_t;
        libc::connect(
            sock.as_raw_fd(),
            &sa,
            std::mem::size_of::<libc::sockaddr>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

pub struct MediaSockets {
    ip: IpAddr,
    free: VecDeque<u16>,
    legs: Vec<Option<Pair>>,
    /// Legs with sockets.
    open: usize,
}

/// Ports tried per new leg before giving up: a port of the range may be held by another program,
/// which then goes to the back of the queue.
const TRIES: usize = 8;

impl MediaSockets {
    /// `lo..hi` is this worker's slice (lo even, hi exclusive).
    pub fn new(ip: IpAddr, lo: u16, hi: u16) -> MediaSockets {
        MediaSockets {
            ip,
            free: (lo..hi.saturating_sub(1)).step_by(2).collect(),
            legs: Vec::new(),
            open: 0,
        }
    }

    /// Binds a pair for `leg`, or None when no port of the slice is free.
    pub fn open(&mut self, leg: usize) -> Option<u16> {
        for _ in 0..TRIES.min(self.free.len()) {
            let port = self.free.pop_front()?;
            match self.bind(port) {
                Ok(pair) => {
                    if self.legs.len() <= leg {
                        self.legs.resize_with(leg + 1, || None);
                    }
                    match self.legs[leg].replace(pair) {
                        Some(old) => self.free.push_back(old.port),
                        None => self.open += 1,
                    }
                    return Some(port);
                }
                Err(_) => self.free.push_back(port),
            }
        }
        None
    }

    fn bind(&self, port: u16) -> io::Result<Pair> {
        let rtp = UdpSocket::bind(SocketAddr::new(self.ip, port))?;
        let rtcp = UdpSocket::bind(SocketAddr::new(self.ip, port + 1))?;
        rtp.set_nonblocking(true)?;
        rtcp.set_nonblocking(true)?;
        // Packets read a few frames late (legs that relay nothing) keep their arrival time.
        mmsg::enable_timestamps(&rtp);
        Ok(Pair {
            rtp,
            rtcp,
            port,
            connected: Cell::new(None),
        })
    }

    pub fn close(&mut self, leg: usize) {
        if let Some(pair) = self.legs.get_mut(leg).and_then(Option::take) {
            self.free.push_back(pair.port);
            self.open -= 1;
        }
    }

    pub fn get(&self, leg: usize) -> Option<&Pair> {
        self.legs.get(leg).and_then(Option::as_ref)
    }

    /// Whether no leg has sockets (none to drain).
    pub fn is_empty(&self) -> bool {
        self.open == 0
    }

    /// Legs with open sockets, for the per-tick drain.
    pub fn open_legs(&self) -> impl Iterator<Item = (usize, &Pair)> {
        self.legs
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.as_ref().map(|p| (i, p)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn free_slice(pairs: u16) -> (u16, u16) {
        // Find a run of free even ports by binding and dropping them.
        for base in (20_000..60_000).step_by(200) {
            let ok =
                (base..base + 2 * pairs).all(|p| UdpSocket::bind((Ipv4Addr::LOCALHOST, p)).is_ok());
            if ok {
                return (base, base + 2 * pairs);
            }
        }
        panic!("no free port run");
    }

    #[test]
    fn ports_are_reused_last_and_exhaustion_is_refused_at_once() {
        let (lo, hi) = free_slice(3);
        let mut m = MediaSockets::new(Ipv4Addr::LOCALHOST.into(), lo, hi);
        assert_eq!(m.open(0), Some(lo));
        assert_eq!(m.open(1), Some(lo + 2));
        assert_eq!(m.open(2), Some(lo + 4));
        assert_eq!(m.open(3), None, "all three pairs in use");
        m.close(1);
        m.close(0);
        assert_eq!(
            m.open(4),
            Some(lo + 2),
            "the first port freed is the first reused"
        );
        assert_eq!(m.open(5), Some(lo));
        assert!(m.get(1).is_none() && m.get(4).is_some());
        assert_eq!(m.open_legs().count(), 3);
        for leg in [2, 4, 5] {
            assert!(!m.is_empty());
            m.close(leg);
        }
        m.close(5);
        assert!(m.is_empty(), "a leg closed twice counts once");
    }

    #[test]
    fn a_pinned_leg_connects_and_takes_no_other_source_until_unpinned() {
        let (lo, hi) = free_slice(1);
        let mut m = MediaSockets::new(Ipv4Addr::LOCALHOST.into(), lo, hi);
        let port = m.open(0).unwrap();
        let far = UdpSocket::bind("127.0.0.1:0").unwrap();
        let other = UdpSocket::bind("127.0.0.1:0").unwrap();
        far.set_read_timeout(Some(std::time::Duration::from_secs(1)))
            .unwrap();
        let pair = m.get(0).unwrap();
        pair.rtp
            .set_read_timeout(Some(std::time::Duration::from_millis(200)))
            .unwrap();
        pair.rtp.set_nonblocking(false).unwrap();
        let here = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let got = || pair.rtp.recv_from(&mut [0u8; 64]).ok();

        pair.send_rtp(b"pinned", far.local_addr().unwrap(), true);
        assert_eq!(far.recv(&mut [0u8; 64]).unwrap(), 6);
        other.send_to(b"stray", here).unwrap();
        far.send_to(b"far", here).unwrap();
        assert_eq!(
            got(),
            Some((3, far.local_addr().unwrap())),
            "the stray packet was dropped"
        );

        pair.send_rtp(b"moved", other.local_addr().unwrap(), false);
        other.send_to(b"other", here).unwrap();
        assert_eq!(
            got(),
            Some((5, other.local_addr().unwrap())),
            "unpinned: any source again"
        );
    }

    #[test]
    fn a_port_held_by_another_program_is_skipped() {
        // Tests in parallel take ports too: retry if the run found free was taken meanwhile.
        let (lo, hi, _held) = (0..50)
            .find_map(|_| {
                let (lo, hi) = free_slice(2);
                let held = UdpSocket::bind((Ipv4Addr::LOCALHOST, lo + 1)).ok()?;
                Some((lo, hi, held))
            })
            .expect("a free port run");
        let mut m = MediaSockets::new(Ipv4Addr::LOCALHOST.into(), lo, hi);
        assert_eq!(m.open(0), Some(lo + 2));
        assert_eq!(m.open(1), None, "the held pair is still held");
    }
}
