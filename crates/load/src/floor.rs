//! The kernel's own cost for the packets of held playback+echo calls, measured in the same run as
//! strowger so that "CPU per call-second" can be judged as a ratio to it on a noisy machine.
//!
//! [`play`] does what strowger's I/O shell does for such calls and nothing else: a UDP socket per
//! call, connected to the far end, a 172-byte packet sent from each every 20 ms in the same four
//! 5 ms phases, and each socket's echoes read every fourth visit (80 ms), a recvmmsg per socket —
//! no SIP, no RTP state, no media engine. [`Sockets::One`]: every call shares one socket and the
//! echoes are read in batches of 64, the kernel's path without the per-call sockets.
//! [`Sockets::AddressPerCall`]: that one socket sends each call's packets from an address of its
//! own (as `strowger-load call --address-per-call`), so the echo's side is the packets of a server
//! with `rtp.shared_ports` — many far ends on one socket — and nothing else. [`echo`] is the far
//! end, a bare recvmmsg/sendmmsg echo (the floor ../shared/peers.md quotes): one socket that sends
//! every datagram back where it came from. [`relay`] is the same floor for proxied SIP calls: a
//! relay in the proxy's place that passes each datagram on unread.

use crate::run::{call_address, loopback_device, udp_socket, udp_socket_on};
use mmsg::{enable_timestamps, set_dont_fragment, Batch, SendBatch};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

const TICK: Duration = Duration::from_millis(5);
const PHASES: usize = 4;
/// A G.711 frame of 20 ms with its RTP header.
const PACKET: usize = 172;

/// What [`play`] sent and got back.
pub struct Outcome {
    pub sent: u64,
    pub received: u64,
}

/// How [`play`]'s calls send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sockets {
    /// A socket per call, connected to the echo.
    PerCall,
    /// One socket for every call, connected to the echo.
    One,
    /// One socket on the wildcard address of the loopback device, each call's packets sent from
    /// a 127/8 address of its own.
    AddressPerCall,
}

/// Plays `calls` calls' packets to `peer` for `seconds`.
pub fn play(peer: SocketAddr, calls: usize, seconds: f64, sockets: Sockets) -> io::Result<Outcome> {
    let one_socket = sockets != Sockets::PerCall;
    let local = SocketAddr::new(peer.ip(), 0);
    let socks = (0..if one_socket { 1 } else { calls })
        .map(|_| {
            // One socket takes a pass's echoes of every call at once; a call's socket (like
            // strowger's) keeps the default buffer.
            let s = match sockets {
                Sockets::PerCall => UdpSocket::bind(local)?,
                Sockets::One => udp_socket(local, 16 << 20)?,
                Sockets::AddressPerCall => {
                    let any = SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), 0);
                    udp_socket_on(any, 16 << 20, loopback_device())?
                }
            };
            // The options of strowger-load's RTP sockets, whose cost the kernel charges to
            // whoever sends to them: arrival stamps (once any socket asks, every datagram is
            // stamped as it is queued) and no IP ID per datagram.
            enable_timestamps(&s);
            set_dont_fragment(&s);
            if sockets != Sockets::AddressPerCall {
                s.connect(peer)?;
            }
            s.set_nonblocking(true)?;
            Ok(s)
        })
        .collect::<io::Result<Vec<_>>>()?;
    let from = (0..calls)
        .map(|call| match sockets {
            Sockets::AddressPerCall => call_address(0, call).map(Some).ok_or_else(|| {
                io::Error::other(format!("{calls} calls: more than one socket's addresses"))
            }),
            _ => Ok(None),
        })
        .collect::<io::Result<Vec<_>>>()?;
    let mut frame = [0u8; PACKET];
    frame[0] = 0x80;
    let mut batch = Batch::new(if one_socket { 64 } else { 8 }, 2048, false);
    let mut send = SendBatch::new();
    let mut out = Outcome {
        sent: 0,
        received: 0,
    };
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    let mut due = Instant::now();
    let mut tick = 0usize;
    while due < end {
        let phase = tick % PHASES;
        let cycle = tick / PHASES;
        frame[2..4].copy_from_slice(&(cycle as u16).to_be_bytes());
        let due_calls = (phase..calls).step_by(PHASES);
        if sockets == Sockets::AddressPerCall {
            let datagrams = due_calls.map(|c| (&frame[..], peer, from[c]));
            out.sent += send.send_from(&socks[0], datagrams) as u64;
        } else {
            for call in due_calls {
                let sock = &socks[if one_socket { 0 } else { call }];
                if sock.send(&frame).is_ok() {
                    out.sent += 1;
                }
                if !one_socket && (cycle + call).is_multiple_of(PHASES) {
                    out.received += batch.drain(sock, |_, _| {}) as u64;
                }
            }
        }
        if one_socket {
            out.received += batch.drain(&socks[0], |_, _| {}) as u64;
        }
        tick += 1;
        due += TICK;
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
    }
    Ok(out)
}

/// Waits up to 100 ms for `sock` to have a datagram, so the loops around it see their end time.
fn wait_readable(sock: &UdpSocket) {
    let mut pfd = libc::pollfd {
        fd: sock.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd, for a socket that outlives the call.
    unsafe { libc::poll(&mut pfd, 1, 100) };
}

/// Sends every datagram arriving at `listen` back to its source, for `seconds`; returns how many.
pub fn echo(listen: SocketAddr, seconds: f64) -> io::Result<u64> {
    let sock = udp_socket(listen, 16 << 20)?;
    // As strowger's media sockets: no IP ID to hash per datagram of an unconnected socket.
    set_dont_fragment(&sock);
    let mut batch = Batch::new(64, 2048, false);
    let mut send = SendBatch::new();
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    let mut echoed = 0;
    while Instant::now() < end {
        wait_readable(&sock);
        batch.drain(&sock, |batch, n| {
            echoed += send.send(&sock, (0..n).filter_map(|i| batch.get(i))) as u64;
        });
    }
    Ok(echoed)
}

/// How many datagrams [`relay`] reads a `recvmmsg(2)`: strowger's SIP batch.
const SIP_BATCH: usize = 16;

/// What [`relay`] passed on, each way.
pub struct Relayed {
    pub to_callee: u64,
    pub to_caller: u64,
}

/// Passes every datagram arriving at `listen` from anywhere but `callee` on to `callee`, and every
/// one from `callee` back to the last other source (the caller), for `seconds`: the kernel's
/// share of a proxied call (a SIPp caller sends every request of a call to the address it
/// was given, so ACK and BYE come this way without a Record-Route). Reads and writes as
/// strowger's worker does: `recvmmsg(2)` of up to 16 with arrival stamps, `sendmmsg(2)` back.
pub fn relay(listen: SocketAddr, callee: SocketAddr, seconds: f64) -> io::Result<Relayed> {
    let sock = udp_socket(listen, 16 << 20)?;
    let mut batch = Batch::new(SIP_BATCH, 65536, true);
    let mut send = SendBatch::new();
    let mut caller: Option<SocketAddr> = None;
    let mut out = Relayed {
        to_callee: 0,
        to_caller: 0,
    };
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    while Instant::now() < end {
        wait_readable(&sock);
        batch.drain(&sock, |batch, n| {
            let hops = (0..n)
                .filter_map(|i| batch.get(i))
                .filter_map(|(data, src)| {
                    if src == callee {
                        out.to_caller += 1;
                        caller.map(|c| (data, c))
                    } else {
                        caller = Some(src);
                        out.to_callee += 1;
                        Some((data, callee))
                    }
                });
            send.send(&sock, hops);
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_call_sends_fifty_packets_a_second_and_reads_the_echoes() {
        let listen: SocketAddr = {
            let s = UdpSocket::bind("127.0.0.1:0").unwrap();
            s.local_addr().unwrap()
        };
        let far = std::thread::spawn(move || echo(listen, 2.5).unwrap());
        std::thread::sleep(Duration::from_millis(50));
        for sockets in [Sockets::PerCall, Sockets::One, Sockets::AddressPerCall] {
            let o = play(listen, 20, 0.5, sockets).unwrap();
            // 20 calls × 50 packets/s × 0.5 s, give or take a tick at either end.
            assert!((480..=520).contains(&o.sent), "sent {}", o.sent);
            // Echoes still in flight at the end (up to 80 ms of them) are not read.
            assert!(
                o.received >= o.sent * 8 / 10,
                "{} of {}",
                o.received,
                o.sent
            );
        }
        assert!(far.join().unwrap() >= 1440);
    }

    #[test]
    fn the_relay_passes_requests_to_the_callee_and_answers_back_to_the_caller() {
        let free = || {
            let s = UdpSocket::bind("127.0.0.1:0").unwrap();
            s.local_addr().unwrap()
        };
        let (listen, callee_addr) = (free(), free());
        let relay = std::thread::spawn(move || relay(listen, callee_addr, 1.0).unwrap());
        std::thread::sleep(Duration::from_millis(50));
        let caller = UdpSocket::bind("127.0.0.1:0").unwrap();
        let callee = UdpSocket::bind(callee_addr).unwrap();
        for s in [&caller, &callee] {
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        }
        let mut buf = [0u8; 2048];
        for i in 0..5u8 {
            caller.send_to(&[b'Q', i], listen).unwrap();
            let (n, src) = callee.recv_from(&mut buf).unwrap();
            assert_eq!((&buf[..n], src), (&[b'Q', i][..], listen));
            callee.send_to(&[b'A', i], listen).unwrap();
            let (n, src) = caller.recv_from(&mut buf).unwrap();
            assert_eq!((&buf[..n], src), (&[b'A', i][..], listen));
        }
        let r = relay.join().unwrap();
        assert_eq!((r.to_callee, r.to_caller), (5, 5));
    }

    #[test]
    fn an_address_per_call_sends_each_calls_packets_from_its_own_address() {
        let far = UdpSocket::bind("127.0.0.1:0").unwrap();
        far.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let peer = far.local_addr().unwrap();
        let o = play(peer, 20, 0.1, Sockets::AddressPerCall).unwrap();
        let mut from = std::collections::HashMap::new();
        let mut buf = [0u8; 2048];
        for _ in 0..o.sent {
            let (_, src) = far.recv_from(&mut buf).unwrap();
            *from.entry(src).or_insert(0) += 1;
        }
        let ips: std::collections::BTreeSet<_> = from.keys().map(|a| a.ip()).collect();
        let want = (1..=20)
            .map(|i| std::net::Ipv4Addr::new(127, 16, 0, i).into())
            .collect();
        assert_eq!(ips, want, "one source address per call");
        assert!(from.values().all(|&n| n >= 4), "{from:?}");
    }
}
