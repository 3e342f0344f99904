//! Datagrams received with one `recvmmsg(2)` into buffers owned by the batch, so a receive
//! allocates nothing, and one call both takes what is waiting and tells that nothing more is there
//! (where `recv_from` in a loop needs a second, empty call to learn it). With `timestamps`, each
//! datagram also carries the kernel's arrival time (SO_TIMESTAMPNS), so a load generator measures
//! jitter from when a packet arrived, not from when its frame loop got round to it.
//!
//! [`Outbox`] is the sending half: datagrams to many destinations from one socket, queued into
//! preallocated slots and sent with one `sendmmsg(2)` per full batch.

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const CMSG_SPACE: usize = 64;

/// Preallocated buffers, addresses and headers for one `recvmmsg(2)`.
pub struct Batch {
    size: usize,
    bufs: Vec<u8>,
    addrs: Vec<libc::sockaddr_storage>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    cmsgs: Vec<[u64; CMSG_SPACE / 8]>,
    timestamps: bool,
    /// The same moment on both clocks, to turn a kernel (realtime) stamp into an Instant.
    base: (Instant, Duration),
}

// SAFETY: the raw pointers in `iovs`/`hdrs` point into the batch's own heap buffers, which move
// with it; they are rebuilt before every call.
unsafe impl Send for Batch {}

impl Batch {
    /// `n` datagrams of at most `size` bytes per receive; `timestamps` keeps the kernel's arrival
    /// stamps (the socket needs [`enable_timestamps`]).
    pub fn new(n: usize, size: usize, timestamps: bool) -> Batch {
        Batch {
            size,
            bufs: vec![0u8; n * size],
            // SAFETY: sockaddr_storage and mmsghdr are plain C structs; all-zero is valid.
            addrs: vec![unsafe { std::mem::zeroed() }; n],
            iovs: Vec::with_capacity(n),
            hdrs: vec![unsafe { std::mem::zeroed() }; n],
            cmsgs: vec![[0u64; CMSG_SPACE / 8]; n],
            timestamps,
            base: clocks(),
        }
    }

    /// How many datagrams one `recv` takes at most (fewer means the socket is drained).
    pub fn capacity(&self) -> usize {
        self.hdrs.len()
    }

    /// Receives what is waiting on `sock` without blocking; returns how many datagrams.
    pub fn recv(&mut self, sock: &impl AsRawFd) -> usize {
        self.iovs.clear();
        for b in self.bufs.chunks_mut(self.size) {
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
            if self.timestamps {
                h.msg_hdr.msg_control = self.cmsgs[i].as_mut_ptr().cast();
                h.msg_hdr.msg_controllen = CMSG_SPACE as _;
            } else {
                h.msg_hdr.msg_control = std::ptr::null_mut();
                h.msg_hdr.msg_controllen = 0;
            }
            h.msg_hdr.msg_flags = 0;
            h.msg_len = 0;
        }
        // SAFETY: every header points at a live buffer, address and control slot of this batch.
        let n = unsafe {
            libc::recvmmsg(
                sock.as_raw_fd(),
                self.hdrs.as_mut_ptr(),
                self.hdrs.len() as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if self.timestamps && n > 0 {
            // Re-read both clocks so a step of the realtime clock (NTP) skews no stamp for long.
            self.base = clocks();
        }
        n.max(0) as usize
    }

    /// Datagram `i` of the last `recv` and its source (None for a family other than IPv4/IPv6).
    pub fn get(&self, i: usize) -> Option<(&[u8], SocketAddr)> {
        let len = self.hdrs[i].msg_len as usize;
        let src = sockaddr(&self.addrs[i])?;
        Some((&self.bufs[i * self.size..i * self.size + len], src))
    }

    /// When datagram `i` arrived, if the batch asks for stamps and the kernel gave one.
    pub fn arrival(&self, i: usize) -> Option<Instant> {
        if !self.timestamps {
            return None;
        }
        let h = &self.hdrs[i].msg_hdr;
        // SAFETY: the control buffer was filled by the kernel for this header; the CMSG macros
        // walk it within msg_controllen.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(h);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                    let ts = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::timespec>());
                    let real = Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32);
                    let (base_i, base_r) = self.base;
                    return Some(if real >= base_r {
                        base_i + (real - base_r)
                    } else {
                        base_i.checked_sub(base_r - real).unwrap_or(base_i)
                    });
                }
                c = libc::CMSG_NXTHDR(h, c);
            }
        }
        None
    }
}

/// Datagrams queued for one socket and sent with one `sendmmsg(2)` per `n`, each to its own
/// destination: a sender of many small packets to many peers pays one system call per batch
/// instead of one per packet.
pub struct Outbox {
    size: usize,
    bufs: Vec<u8>,
    lens: Vec<usize>,
    addrs: Vec<libc::sockaddr_storage>,
    addr_lens: Vec<libc::socklen_t>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    queued: usize,
}

// SAFETY: as for Batch, the raw pointers are rebuilt from the outbox's own buffers before a send.
unsafe impl Send for Outbox {}

impl Outbox {
    /// Room for `n` datagrams of at most `size` bytes.
    pub fn new(n: usize, size: usize) -> Outbox {
        Outbox {
            size,
            bufs: vec![0u8; n * size],
            lens: vec![0; n],
            // SAFETY: plain C structs; all-zero is valid.
            addrs: vec![unsafe { std::mem::zeroed() }; n],
            addr_lens: vec![0; n],
            iovs: Vec::with_capacity(n),
            hdrs: vec![unsafe { std::mem::zeroed() }; n],
            queued: 0,
        }
    }

    /// Queues a datagram written by `write` into a `size`-byte slot (it returns the length, or
    /// None to queue nothing), sending the batch first if it is full. Returns whether it was
    /// queued.
    pub fn push(
        &mut self,
        sock: &impl AsRawFd,
        to: SocketAddr,
        write: impl FnOnce(&mut [u8]) -> Option<usize>,
    ) -> bool {
        if self.queued == self.lens.len() {
            self.flush(sock);
        }
        let i = self.queued;
        let Some(len) = write(&mut self.bufs[i * self.size..(i + 1) * self.size]) else {
            return false;
        };
        self.lens[i] = len.min(self.size);
        self.addr_lens[i] = to_sockaddr(to, &mut self.addrs[i]);
        self.queued += 1;
        true
    }

    /// Sends what is queued; returns how many datagrams the kernel took (the rest, if a send
    /// fails part-way, are dropped as a full socket buffer would drop them).
    pub fn flush(&mut self, sock: &impl AsRawFd) -> usize {
        let n = std::mem::take(&mut self.queued);
        if n == 0 {
            return 0;
        }
        self.iovs.clear();
        for (i, &len) in self.lens[..n].iter().enumerate() {
            self.iovs.push(libc::iovec {
                iov_base: self.bufs[i * self.size..].as_mut_ptr().cast(),
                iov_len: len,
            });
        }
        for i in 0..n {
            let h = &mut self.hdrs[i];
            h.msg_hdr.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
            h.msg_hdr.msg_namelen = self.addr_lens[i];
            h.msg_hdr.msg_iov = &mut self.iovs[i];
            h.msg_hdr.msg_iovlen = 1;
            h.msg_hdr.msg_control = std::ptr::null_mut();
            h.msg_hdr.msg_controllen = 0;
            h.msg_hdr.msg_flags = 0;
            h.msg_len = 0;
        }
        let (mut sent, mut took) = (0, 0);
        while sent < n {
            // SAFETY: headers sent..n point at live buffers and addresses of this outbox.
            let rc = unsafe {
                libc::sendmmsg(
                    sock.as_raw_fd(),
                    self.hdrs[sent..].as_mut_ptr(),
                    (n - sent) as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if rc <= 0 {
                // The first datagram failed (e.g. the far port is closed): skip it, keep on.
                sent += 1;
                continue;
            }
            sent += rc as usize;
            took += rc as usize;
        }
        took
    }
}

/// Writes `a` as a C socket address; returns its length.
fn to_sockaddr(a: SocketAddr, s: &mut libc::sockaddr_storage) -> libc::socklen_t {
    match a {
        SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_storage is large enough and aligned for a sockaddr_in.
            let sin =
                unsafe { &mut *(s as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = v4.port().to_be();
            sin.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        SocketAddr::V6(v6) => {
            // SAFETY: sockaddr_storage is large enough and aligned for a sockaddr_in6.
            let sin6 =
                unsafe { &mut *(s as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = v6.port().to_be();
            sin6.sin6_flowinfo = v6.flowinfo();
            sin6.sin6_addr.s6_addr = v6.ip().octets();
            sin6.sin6_scope_id = v6.scope_id();
            std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}

/// This moment on the monotonic and the realtime clock.
fn clocks() -> (Instant, Duration) {
    let real = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    (Instant::now(), real)
}

/// Asks the kernel to stamp each datagram's arrival (read back by [`Batch::arrival`]).
pub fn enable_timestamps(sock: &impl AsRawFd) {
    let on: libc::c_int = 1;
    // SAFETY: a plain setsockopt with an int argument.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
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
    use std::net::UdpSocket;

    #[test]
    fn receives_a_batch_with_sources_and_kernel_arrival_times() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        enable_timestamps(&rx);
        // The kernel turns stamping on through a deferred static key; until then a datagram is
        // stamped when it is read. Give it a moment, as a load run's first calls do.
        std::thread::sleep(Duration::from_millis(50));
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut batch = Batch::new(4, 2048, true);
        assert_eq!(batch.recv(&rx), 0, "nothing waiting, no blocking");
        let sent = Instant::now();
        for i in 0..3u8 {
            tx.send_to(&[i; 172], rx.local_addr().unwrap()).unwrap();
        }
        std::thread::sleep(Duration::from_millis(60));
        let later = Instant::now();
        assert_eq!(batch.recv(&rx), 3);
        for i in 0..3 {
            let (data, src) = batch.get(i).unwrap();
            assert_eq!(data, &[i as u8; 172][..]);
            assert_eq!(src, tx.local_addr().unwrap());
            let at = batch.arrival(i).unwrap();
            // Stamped on arrival, well before we read it (the clocks agree within a few ms).
            assert!(
                at < later - Duration::from_millis(30),
                "{:?}",
                later.saturating_duration_since(at)
            );
            assert!(at + Duration::from_millis(15) > sent);
        }
    }
}

#[cfg(test)]
mod plain {
    use super::*;
    use std::net::UdpSocket;

    #[test]
    fn without_stamps_a_batch_gives_data_and_sources_only() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut batch = Batch::new(2, 2048, false);
        for i in 0..3u8 {
            tx.send_to(&[i; 20], rx.local_addr().unwrap()).unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(batch.recv(&rx), 2, "no more than the batch holds");
        assert_eq!(batch.get(1).unwrap().0, &[1u8; 20][..]);
        assert_eq!(batch.arrival(0), None);
        assert_eq!(batch.recv(&rx), 1, "the rest on the next call");
        assert_eq!(
            batch.get(0).unwrap(),
            (&[2u8; 20][..], tx.local_addr().unwrap())
        );
    }
}

#[cfg(test)]
mod outbox {
    use super::*;
    use std::net::UdpSocket;

    #[test]
    fn sends_a_batch_to_several_destinations_in_order() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("[::1]:0").ok();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut out = Outbox::new(2, 64);
        for i in 0..5u8 {
            let queued = out.push(&tx, a.local_addr().unwrap(), |buf| {
                buf[..3].copy_from_slice(&[i; 3]);
                Some(3)
            });
            assert!(queued);
        }
        assert!(!out.push(&tx, a.local_addr().unwrap(), |_| None));
        assert_eq!(
            out.flush(&tx),
            1,
            "the fifth; four went when the batch filled"
        );
        assert_eq!(out.flush(&tx), 0);
        std::thread::sleep(Duration::from_millis(20));
        let mut batch = Batch::new(8, 64, false);
        assert_eq!(batch.recv(&a), 5);
        for i in 0..5 {
            assert_eq!(
                batch.get(i).unwrap(),
                (&[i as u8; 3][..], tx.local_addr().unwrap())
            );
        }
        // A v4 socket cannot reach a v6 destination: that datagram is dropped, the next goes.
        if let Some(b) = b {
            out.push(&tx, b.local_addr().unwrap(), |buf| Some(buf.len().min(1)));
            out.push(&tx, a.local_addr().unwrap(), |buf| {
                buf[0] = 9;
                Some(1)
            });
            assert_eq!(out.flush(&tx), 1);
            std::thread::sleep(Duration::from_millis(20));
            assert_eq!(batch.recv(&a), 1);
            assert_eq!(batch.get(0).unwrap().0, &[9u8][..]);
        }
    }
}
