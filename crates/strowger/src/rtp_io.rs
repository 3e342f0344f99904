//! RTP and RTCP sockets of one worker: an even port for RTP and the next one for RTCP per leg,
//! taken from the worker's slice of the port range ([`PortPool`]: which ports are free, and which
//! another program holds).
//!
//! With `rtp.shared_ports` the legs share a few pairs instead (one per 256 legs), told apart by
//! their far ends' addresses: one recvmmsg(2) and one sendmmsg(2) then carry many calls' packets,
//! and the kernel walks a few sockets instead of one per call.
//!
//! Spare pairs are bound on the first media address; a leg of the other address family
//! (`switch::Event::MediaOpen` names the address) gets its pair bound again there at the same
//! port, so the port the engine chose and the socket the packets use still agree.
//!
//! The sockets are not registered with epoll: the worker drains every leg once per tick, which
//! costs one system call per leg (or shared pair) and tick instead of a wake-up per packet.

use std::cell::{Cell, RefCell};
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use crate::rtp_ports::PortPool;

pub struct Pair {
    pub rtp: UdpSocket,
    pub rtcp: UdpSocket,
    pub(crate) port: u16,
    /// Bound on an IPv6 address: a shared pair's datagram to an IPv4 far end cannot leave.
    v6: bool,
    /// Where `rtp` is connected to, if anywhere.
    connected: Cell<Option<SocketAddr>>,
}

impl Pair {
    /// Sends an RTP packet. A connected socket skips the route lookup per send and lets the
    /// kernel drop packets from other sources, so the socket is connected while the media engine
    /// says the leg takes RTP from `dst` alone (`pinned`), and disconnected when that ends (a
    /// re-INVITE moved the far end). False: the kernel refused it.
    pub fn send_rtp(&self, payload: &[u8], dst: SocketAddr, pinned: bool) -> bool {
        let connected = self.connected.get();
        if pinned {
            if connected != Some(dst) && self.rtp.connect(dst).is_ok() {
                self.connected.set(Some(dst));
            }
            if self.connected.get() == Some(dst) {
                return self.rtp.send(payload).is_ok();
            }
        } else if connected.is_some() && disconnect(&self.rtp).is_ok() {
            self.connected.set(None);
        }
        self.rtp.send_to(payload, dst).is_ok()
    }
}

/// Binds the RTP port `port` and the RTCP port after it on `ip`.
fn bind(ip: IpAddr, port: u16) -> io::Result<Pair> {
    let rtp = UdpSocket::bind(SocketAddr::new(ip, port))?;
    let rtcp = UdpSocket::bind(SocketAddr::new(ip, port + 1))?;
    rtp.set_nonblocking(true)?;
    rtcp.set_nonblocking(true)?;
    // Packets read a few frames late (legs that relay nothing, RTCP) keep their arrival time.
    mmsg::enable_timestamps(&rtp);
    mmsg::enable_timestamps(&rtcp);
    mmsg::set_dont_fragment(&rtp);
    mmsg::set_dont_fragment(&rtcp);
    Ok(Pair {
        rtp,
        rtcp,
        port,
        v6: ip.is_ipv6(),
        connected: Cell::new(None),
    })
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

/// A leg's sockets: a pair of its own, or one of the worker's shared pairs (`rtp.shared_ports`).
enum LegPorts {
    Own(Pair),
    Shared(usize),
}

/// A pair many legs use, told apart by their far ends' addresses (`media::Engine::rtp_leg_from`).
pub struct SharedPair {
    pub pair: Pair,
    legs: usize,
    /// RTP for this socket queued during a pass, sent by [`MediaSockets::flush`] in batches of
    /// 64 per sendmmsg(2) instead of a send each.
    out: RefCell<mmsg::Outbox>,
}

/// Datagrams a shared pair's read takes at once (one recvmmsg(2)): twice the 64 its 256 legs
/// queue between two passes, so that a pass reads a pair with one system call, where a batch
/// of just 64 took a second one to find the socket dry.
pub const SHARED_BATCH: usize = 128;

pub struct MediaSockets {
    ip: IpAddr,
    ports: PortPool,
    /// Bound pairs no leg uses yet, handed to the engine (`switch::Input::MediaPorts`).
    spare: Vec<Pair>,
    legs: Vec<Option<LegPorts>>,
    /// Legs with sockets.
    open: usize,
    /// The worker's shared pairs (`rtp.shared_ports`), as the engine opened them.
    shared: Vec<SharedPair>,
    /// No free port could be bound (the range is used up, or held by other programs): spare
    /// pairs are sought again once a leg gives a port back or [`RETRY`] later, not on every
    /// top-up (each costs a bind(2) per port set aside).
    starved: Option<Instant>,
    /// The exhaustion was logged: once per episode (until a pair is bound again), not per
    /// refused call.
    told: bool,
    /// RTP the kernel refused since the last [`MediaSockets::take_failed`]: (leg, packets).
    failed: RefCell<Vec<(usize, u32)>>,
}

/// How long a starved worker waits before trying the range again (ports another program held
/// may be free by then).
const RETRY: Duration = Duration::from_secs(1);

impl MediaSockets {
    /// `lo..hi` is this worker's slice (lo even, hi exclusive).
    pub fn new(ip: IpAddr, lo: u16, hi: u16) -> MediaSockets {
        MediaSockets {
            ip,
            ports: PortPool::new(lo, hi),
            spare: Vec::new(),
            legs: Vec::new(),
            open: 0,
            shared: Vec::new(),
            starved: None,
            told: false,
            failed: RefCell::default(),
        }
    }

    /// Binds spare pairs until `want` wait; the ports of the new ones go to `fresh`.
    pub fn top_up(&mut self, want: usize, fresh: &mut Vec<u16>, now: Instant) {
        if self.starved.is_some_and(|t| now < t + RETRY) {
            return;
        }
        self.starved = None;
        while self.spare.len() < want {
            let Some((_, pair)) = self.ports.take(now, |port| bind(self.ip, port)) else {
                self.starved = Some(now);
                // Told when the last spare pair is gone, the next call's being refused.
                if self.spare.is_empty() && !std::mem::replace(&mut self.told, true) {
                    tracing::warn!(
                        "rtp.ports is used up on this worker ({} pairs in use, {} set aside as held by another program): new calls get 503; widen rtp.ports or free its ports",
                        self.ports.in_use(),
                        self.ports.set_aside()
                    );
                }
                return;
            };
            self.told = false;
            fresh.push(pair.port);
            self.spare.push(pair);
        }
    }

    /// Gives `leg` the pair the engine chose (`switch::Event::MediaOpen`): a spare one of its
    /// own, a spare one that starts being shared (`first`), or a shared one; on `ip`.
    pub fn attach(&mut self, leg: usize, port: u16, shared: bool, first: bool, ip: IpAddr) {
        let ports = if shared && !first {
            match self.shared.iter().position(|s| s.pair.port == port) {
                Some(i) => {
                    self.shared[i].legs += 1;
                    LegPorts::Shared(i)
                }
                None => return,
            }
        } else {
            let Some(i) = self.spare.iter().position(|p| p.port == port) else {
                return;
            };
            // What a scan of the range left in a spare pair reaches the leg as a scan during the
            // call would: the address the far end announced takes the leg back (media::Engine).
            let mut pair = self.spare.swap_remove(i);
            if ip != self.ip {
                drop(pair);
                pair = match bind(ip, port) {
                    Ok(pair) => pair,
                    Err(e) => {
                        tracing::warn!("cannot bind RTP port {port} on {ip}: {e} — the call has no audio (another program holds it? narrow rtp.ports)");
                        self.ports.give_back(port);
                        return;
                    }
                };
            }
            if shared {
                // Many legs' packets wait here between passes: ask for room (the kernel caps
                // it at net.core.rmem_max).
                let _ = socket2::SockRef::from(&pair.rtp).set_recv_buffer_size(1 << 22);
                self.shared.push(SharedPair {
                    pair,
                    legs: 1,
                    out: RefCell::default(),
                });
                LegPorts::Shared(self.shared.len() - 1)
            } else {
                LegPorts::Own(pair)
            }
        };
        if self.legs.len() <= leg {
            self.legs.resize_with(leg + 1, || None);
        }
        match self.legs[leg].replace(ports) {
            Some(old) => self.release(old),
            None => self.open += 1,
        }
    }

    fn release(&mut self, ports: LegPorts) {
        match ports {
            LegPorts::Own(pair) => {
                self.ports.give_back(pair.port);
                self.starved = None;
            }
            LegPorts::Shared(i) => {
                if let Some(s) = self.shared.get_mut(i) {
                    s.legs -= 1;
                }
            }
        }
    }

    pub fn close(&mut self, leg: usize) {
        if let Some(ports) = self.legs.get_mut(leg).and_then(Option::take) {
            self.release(ports);
            self.open -= 1;
        }
    }

    /// Whether no leg has sockets (none to drain).
    pub fn is_empty(&self) -> bool {
        self.open == 0
    }

    /// Legs with a pair of their own, for the per-tick drain.
    pub fn own_pairs(&self) -> impl Iterator<Item = (usize, &Pair)> {
        self.legs.iter().enumerate().filter_map(|(i, p)| match p {
            Some(LegPorts::Own(p)) => Some((i, p)),
            _ => None,
        })
    }

    /// The shared pairs (none when each leg has its own).
    pub fn shared(&self) -> &[SharedPair] {
        &self.shared
    }

    /// Whether `leg` uses shared pair `i` (a packet there from its far end is its).
    pub fn shares(&self, leg: usize, i: usize) -> bool {
        matches!(self.legs.get(leg), Some(Some(LegPorts::Shared(j))) if *j == i)
    }

    /// Sends what the media engine emits from the leg's RTP or RTCP socket; RTP from a shared
    /// pair waits for [`MediaSockets::flush`] (one of the other family would fail there unseen,
    /// so it fails here). RTP the kernel refuses is noted for [`MediaSockets::take_failed`].
    pub fn transmit(&self, t: media::Transmit<'_>) {
        let leg = t.leg.index();
        let sent = match self.legs.get(leg) {
            Some(Some(LegPorts::Own(pair))) if t.rtcp => {
                let _ = pair.rtcp.send_to(t.payload, t.dst);
                true
            }
            Some(Some(LegPorts::Own(pair))) => pair.send_rtp(t.payload, t.dst, t.pinned),
            Some(Some(LegPorts::Shared(i))) => {
                let s = &self.shared()[*i];
                if t.rtcp {
                    let _ = s.pair.rtcp.send_to(t.payload, t.dst);
                    true
                } else if t.dst.is_ipv6() != s.pair.v6 {
                    false
                } else {
                    s.out.borrow_mut().push(&[t.payload], t.dst);
                    true
                }
            }
            _ => true,
        };
        if !sent {
            let mut failed = self.failed.borrow_mut();
            match failed.last_mut() {
                Some((l, n)) if *l == leg => *n += 1,
                _ => failed.push((leg, 1)),
            }
        }
    }

    /// The next leg with RTP the kernel refused, and how many packets.
    pub fn take_failed(&mut self) -> Option<(usize, u32)> {
        self.failed.get_mut().pop()
    }

    /// Sends the RTP queued for the shared pairs.
    pub fn flush(&mut self) {
        for s in &self.shared {
            s.out.borrow_mut().flush(&s.pair.rtp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    fn free_slice(pairs: u16) -> (u16, u16) {
        // Find a run of free even ports by binding and dropping them. Each call starts where the
        // last one stopped: the tests run in parallel, and two must not find the same run.
        static NEXT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(20_000);
        let start = NEXT.fetch_add(200, std::sync::atomic::Ordering::Relaxed);
        for base in (start..60_000).step_by(200) {
            let ok =
                (base..base + 2 * pairs).all(|p| UdpSocket::bind((Ipv4Addr::LOCALHOST, p)).is_ok());
            if ok {
                return (base, base + 2 * pairs);
            }
        }
        panic!("no free port run");
    }

    /// Binds one spare pair and gives it to `leg` as its own; its port.
    fn open(m: &mut MediaSockets, leg: usize) -> Option<u16> {
        let mut fresh = Vec::new();
        m.top_up(1, &mut fresh, Instant::now());
        let port = *fresh.first()?;
        m.attach(leg, port, false, true, LO);
        Some(port)
    }

    #[test]
    fn ports_are_reused_last_and_exhaustion_is_refused_at_once() {
        let (lo, hi) = free_slice(3);
        let mut m = MediaSockets::new(Ipv4Addr::LOCALHOST.into(), lo, hi);
        assert_eq!(open(&mut m, 0), Some(lo));
        assert_eq!(open(&mut m, 1), Some(lo + 2));
        assert_eq!(open(&mut m, 2), Some(lo + 4));
        assert_eq!(open(&mut m, 3), None, "all three pairs in use");
        m.close(1);
        m.close(0);
        assert_eq!(
            open(&mut m, 4),
            Some(lo + 2),
            "the first port freed is the first reused"
        );
        assert_eq!(open(&mut m, 5), Some(lo));
        assert_eq!(
            m.own_pairs().map(|(leg, _)| leg).collect::<Vec<_>>(),
            [2, 4, 5]
        );
        for leg in [2, 4, 5] {
            assert!(!m.is_empty());
            m.close(leg);
        }
        m.close(5);
        assert!(m.is_empty(), "a leg closed twice counts once");
    }

    #[test]
    fn spare_pairs_are_bound_ahead_and_only_a_spare_one_is_attached() {
        let (lo, hi) = free_slice(3);
        let mut m = MediaSockets::new(Ipv4Addr::LOCALHOST.into(), lo, hi);
        let mut fresh = Vec::new();
        m.top_up(2, &mut fresh, Instant::now());
        assert_eq!(fresh, [lo, lo + 2]);
        m.top_up(2, &mut fresh, Instant::now());
        assert_eq!(fresh.len(), 2, "already two spare");
        m.attach(7, lo, false, true, LO);
        assert!(!m.shares(7, 0) && !m.is_empty());
        m.attach(8, lo + 4, false, true, LO);
        assert_eq!(
            m.own_pairs().count(),
            1,
            "a port that is not spare is not attached"
        );
    }

    #[test]
    fn a_leg_of_the_other_family_gets_its_pair_bound_there_at_the_same_port() {
        let (lo, hi) = free_slice(2);
        let mut m = MediaSockets::new(LO, lo, hi);
        let mut fresh = Vec::new();
        m.top_up(2, &mut fresh, Instant::now());
        let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
        m.attach(0, lo, false, true, v6);
        m.attach(1, lo + 2, true, true, v6);
        let (_, own) = m.own_pairs().next().unwrap();
        assert_eq!(own.rtp.local_addr().unwrap(), SocketAddr::new(v6, lo));
        assert_eq!(own.rtcp.local_addr().unwrap(), SocketAddr::new(v6, lo + 1));
        let shared = &m.shared()[0].pair;
        assert_eq!(
            shared.rtp.local_addr().unwrap(),
            SocketAddr::new(v6, lo + 2)
        );
        // It carries IPv6 audio.
        let far = UdpSocket::bind((Ipv6Addr::LOCALHOST, 0)).unwrap();
        far.send_to(b"rtp", SocketAddr::new(v6, lo)).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let mut buf = [0; 16];
        let (n, from) = own.rtp.recv_from(&mut buf).unwrap();
        assert_eq!((&buf[..n], from), (&b"rtp"[..], far.local_addr().unwrap()));
    }

    #[test]
    fn rtp_the_kernel_refuses_is_noted_per_leg_and_a_shared_pair_refuses_the_other_family() {
        let (lo, hi) = free_slice(2);
        let mut m = MediaSockets::new(LO, lo, hi);
        let mut fresh = Vec::new();
        m.top_up(2, &mut fresh, Instant::now());
        m.attach(0, lo, false, true, IpAddr::V6(Ipv6Addr::LOCALHOST));
        m.attach(1, lo + 2, true, true, LO);
        let far4 = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let far6 = UdpSocket::bind((Ipv6Addr::LOCALHOST, 0)).unwrap();
        let send = |m: &MediaSockets, leg: usize, dst: SocketAddr| {
            m.transmit(media::Transmit {
                leg: media::LegId::from_index(leg),
                rtcp: false,
                dst,
                pinned: false,
                payload: b"rtp",
            })
        };
        for _ in 0..3 {
            send(&m, 0, far4.local_addr().unwrap());
        }
        send(&m, 0, far6.local_addr().unwrap());
        send(&m, 1, far6.local_addr().unwrap());
        send(&m, 1, far4.local_addr().unwrap());
        m.flush();
        let mut failed = std::iter::from_fn(|| m.take_failed()).collect::<Vec<_>>();
        failed.sort();
        assert_eq!(failed, [(0, 3), (1, 1)]);
        let mut buf = [0; 16];
        far4.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        far6.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        assert_eq!(
            far4.recv(&mut buf).unwrap(),
            3,
            "the shared pair's IPv4 datagram left"
        );
        assert_eq!(
            far6.recv(&mut buf).unwrap(),
            3,
            "the own pair's IPv6 datagram left"
        );
    }

    #[test]
    fn a_pinned_leg_connects_and_takes_no_other_source_until_unpinned() {
        let (lo, hi) = free_slice(1);
        let mut m = MediaSockets::new(Ipv4Addr::LOCALHOST.into(), lo, hi);
        let port = open(&mut m, 0).unwrap();
        let far = UdpSocket::bind("127.0.0.1:0").unwrap();
        let other = UdpSocket::bind("127.0.0.1:0").unwrap();
        far.set_read_timeout(Some(std::time::Duration::from_secs(1)))
            .unwrap();
        let pair = m.own_pairs().next().unwrap().1;
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
    fn shared_legs_join_the_pair_the_engine_names_and_their_rtp_leaves_on_flush() {
        let (lo, hi) = free_slice(3);
        let mut m = MediaSockets::new(Ipv4Addr::LOCALHOST.into(), lo, hi);
        let mut fresh = Vec::new();
        m.top_up(3, &mut fresh, Instant::now());
        m.attach(0, lo, true, true, LO);
        m.attach(1, lo, true, false, LO);
        m.attach(2, lo + 2, false, true, LO);
        m.attach(3, lo + 4, true, true, LO);
        assert!(m.shares(0, 0) && m.shares(1, 0) && m.shares(3, 1) && !m.shares(2, 0));
        assert_eq!(m.own_pairs().map(|(leg, _)| leg).collect::<Vec<_>>(), [2]);
        m.close(2);
        m.close(3);

        let far: Vec<UdpSocket> = (0..2)
            .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
            .collect();
        for (leg, payload) in [(0, &b"zero"[..]), (1, b"one")] {
            m.transmit(media::Transmit {
                leg: media::LegId::from_index(leg),
                rtcp: false,
                dst: far[leg].local_addr().unwrap(),
                pinned: true,
                payload,
            });
        }
        far[0].set_nonblocking(true).unwrap();
        assert!(
            far[0].recv(&mut [0; 8]).is_err(),
            "nothing leaves before the flush"
        );
        m.flush();
        let shared = SocketAddr::from((Ipv4Addr::LOCALHOST, lo));
        for (sock, payload) in far.iter().zip([&b"zero"[..], b"one"]) {
            sock.set_read_timeout(Some(std::time::Duration::from_secs(1)))
                .unwrap();
            sock.set_nonblocking(false).unwrap();
            let mut buf = [0; 8];
            let (n, from) = sock.recv_from(&mut buf).unwrap();
            assert_eq!((&buf[..n], from), (payload, shared));
        }
        for leg in 0..2 {
            m.close(leg);
        }
        assert!(m.is_empty());
    }

    #[test]
    fn a_range_held_by_another_program_is_tried_again_a_second_later() {
        let (lo, hi, held) = (0..50)
            .find_map(|_| {
                let (lo, hi) = free_slice(1);
                let held = UdpSocket::bind((Ipv4Addr::LOCALHOST, lo)).ok()?;
                Some((lo, hi, held))
            })
            .expect("a free port run");
        let mut m = MediaSockets::new(Ipv4Addr::LOCALHOST.into(), lo, hi);
        let (t0, mut fresh) = (Instant::now(), Vec::new());
        m.top_up(1, &mut fresh, t0);
        assert!(fresh.is_empty(), "the only pair is held");
        drop(held);
        m.top_up(1, &mut fresh, t0 + Duration::from_millis(500));
        assert!(fresh.is_empty(), "no bind(2) on every top-up while starved");
        m.top_up(1, &mut fresh, t0 + RETRY);
        assert_eq!(fresh, [lo], "tried again after RETRY");
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
        assert_eq!(open(&mut m, 0), Some(lo + 2));
        assert_eq!(open(&mut m, 1), None, "the held pair is still held");
    }
}
