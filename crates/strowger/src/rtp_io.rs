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

/// Datagrams received with one `recvmmsg(2)`: at 50 packets/s a leg has at most a packet or two
/// waiting per tick, and one call both takes them and tells that nothing more is there, where
/// `recv_from` in a loop needs a second, empty call to learn it.
pub struct Batch {
    bufs: Vec<[u8; 2048]>,
    addrs: Vec<libc::sockaddr_storage>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
}

// SAFETY: the raw pointers in `iovs`/`hdrs` point into the batch's own heap buffers, which move
// with it; they are rebuilt before every call.
unsafe impl Send for Batch {}

impl Batch {
    pub fn new(n: usize) -> Batch {
        Batch {
            bufs: vec![[0u8; 2048]; n],
            // SAFETY: sockaddr_storage and mmsghdr are plain C structs; all-zero is valid.
            addrs: vec![unsafe { std::mem::zeroed() }; n],
            iovs: Vec::with_capacity(n),
            hdrs: vec![unsafe { std::mem::zeroed() }; n],
        }
    }

    /// Receives what is waiting on `sock` without blocking; returns how many datagrams.
    pub fn recv(&mut self, sock: &UdpSocket) -> usize {
        use std::os::fd::AsRawFd;
        self.iovs.clear();
        for b in self.bufs.iter_mut() {
            self.iovs.push(libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            });
        }
        for (i, h) in self.hdrs.iter_mut().enumerate() {
            h.msg_hdr.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
            h.msg_hdr.msg_namelen =
                std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_hdr.msg_iov = &mut self.iovs[i];
            h.msg_hdr.msg_iovlen = 1;
            h.msg_hdr.msg_control = std::ptr::null_mut();
            h.msg_hdr.msg_controllen = 0;
            h.msg_hdr.msg_flags = 0;
            h.msg_len = 0;
        }
        // SAFETY: every header points at a live buffer and address slot of this batch.
        let n = unsafe {
            libc::recvmmsg(
                sock.as_raw_fd(),
                self.hdrs.as_mut_ptr(),
                self.hdrs.len() as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        n.max(0) as usize
    }

    /// Datagram `i` of the last `recv` and its source (None for a family other than IPv4/IPv6).
    pub fn get(&self, i: usize) -> Option<(&[u8], SocketAddr)> {
        let len = self.hdrs[i].msg_len as usize;
        let src = sockaddr(&self.addrs[i])?;
        Some((&self.bufs[i][..len], src))
    }
}

fn sockaddr(s: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match s.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let a = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(SocketAddr::new(ip.into(), u16::from_be(a.sin_port)))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let a = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
            Some(SocketAddr::new(ip.into(), u16::from_be(a.sin6_port)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_receives_every_waiting_datagram_with_its_source() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut batch = Batch::new(4);
        assert_eq!(batch.recv(&rx), 0, "nothing waiting, no blocking");
        for i in 0..3u8 {
            tx.send_to(&[i; 172], rx.local_addr().unwrap()).unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(batch.recv(&rx), 3);
        for i in 0..3 {
            let (data, src) = batch.get(i).unwrap();
            assert_eq!(data, &[i as u8; 172][..]);
            assert_eq!(src, tx.local_addr().unwrap());
        }
    }
}
