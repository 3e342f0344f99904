//! Datagrams received with one `recvmmsg(2)` into buffers owned by the batch, so a receive
//! allocates nothing, and one call both takes what is waiting and tells that nothing more is there
//! (where `recv_from` in a loop needs a second, empty call to learn it). With `timestamps`, each
//! datagram also carries the kernel's arrival time (SO_TIMESTAMPNS), so a load generator measures
//! jitter from when a packet arrived, not from when its frame loop got round to it.

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
