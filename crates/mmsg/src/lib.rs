//! Datagrams received with one `recvmmsg(2)` into buffers owned by the batch, so a receive
//! allocates nothing, and one call both takes what is waiting and tells that nothing more is there
//! (where `recv_from` in a loop needs a second, empty call to learn it). With `timestamps`, each
//! datagram also carries the kernel's arrival time (SO_TIMESTAMPNS), so a load generator measures
//! jitter from when a packet arrived, not from when its frame loop got round to it. Datagrams to
//! send go out the same way, many per `sendmmsg(2)` ([`SendBatch`]).

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

    /// Receives until `sock` is dry (a batch short of [`Batch::capacity`]), handing each batch
    /// to `f` with its count of datagrams; returns how many in all.
    pub fn drain(&mut self, sock: &impl AsRawFd, mut f: impl FnMut(&Batch, usize)) -> usize {
        let mut all = 0;
        loop {
            let n = self.recv(sock);
            f(self, n);
            all += n;
            if n < self.capacity() {
                return all;
            }
        }
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

/// Headers and addresses for `sendmmsg(2)`, kept between sends so a send allocates nothing once
/// the batch has grown to the largest burst.
///
/// Consecutive datagrams of one size to one address (a voice frame per call to a peer that
/// carries many calls) go as one message with UDP generic segmentation offload (UDP_SEGMENT,
/// Linux 4.18): the kernel routes and builds one packet and splits it into the datagrams, where
/// it would pay that per datagram. Where the kernel refuses it, the batch sends them one by one
/// from then on. (As with TCP segmentation, a capture taken before the split, on loopback or
/// at a NIC that segments in hardware, shows such a message as one large datagram.)
pub struct SendBatch {
    addrs: Vec<libc::sockaddr_storage>,
    iovs: Vec<libc::iovec>,
    /// Per message: its first iovec, how many, and their size.
    runs: Vec<Run>,
    hdrs: Vec<libc::mmsghdr>,
    cmsgs: Vec<[u64; 4]>,
    gso: bool,
}

#[derive(Clone, Copy)]
struct Run {
    first: usize,
    count: usize,
    size: usize,
}

impl Default for SendBatch {
    fn default() -> SendBatch {
        SendBatch {
            addrs: Vec::new(),
            iovs: Vec::new(),
            runs: Vec::new(),
            hdrs: Vec::new(),
            cmsgs: Vec::new(),
            gso: true,
        }
    }
}

// SAFETY: the raw pointers in `iovs`/`hdrs` are only valid during `send`, which rebuilds them.
unsafe impl Send for SendBatch {}

/// Messages per `sendmmsg(2)` (the kernel takes at most UIO_MAXIOV, 1024).
const SEND_CHUNK: usize = 64;
/// Datagrams per segmented message (the kernel's UDP_MAX_SEGMENTS is 64 on older kernels).
const MAX_SEGMENTS: usize = 64;
/// Bytes per segmented message, within a UDP datagram's 65,507.
const MAX_GSO_BYTES: usize = 60_000;

impl SendBatch {
    pub fn new() -> SendBatch {
        SendBatch::default()
    }

    /// Sends every datagram of `msgs` from `sock` without blocking, in order, with as few
    /// system calls as it can. A datagram the kernel refuses (a full buffer, an unreachable
    /// address) is dropped and the rest still go, as with `send_to` one by one. Returns how
    /// many were sent.
    pub fn send<'a>(
        &mut self,
        sock: &impl AsRawFd,
        msgs: impl IntoIterator<Item = (&'a [u8], SocketAddr)>,
    ) -> usize {
        let mut sent = 0;
        let mut msgs = msgs.into_iter().peekable();
        while msgs.peek().is_some() {
            self.fill(&mut msgs);
            self.headers();
            let n = self.runs.len();
            let mut from = 0;
            while from < n {
                // SAFETY: headers `from..n` point at live addresses, iovecs and control data of
                // this batch, and the iovecs at the callers' slices, which outlive this call.
                let rc = unsafe {
                    libc::sendmmsg(
                        sock.as_raw_fd(),
                        self.hdrs[from..].as_mut_ptr(),
                        (n - from) as libc::c_uint,
                        libc::MSG_DONTWAIT,
                    )
                };
                if rc > 0 {
                    let done = from + rc as usize;
                    sent += self.runs[from..done].iter().map(|r| r.count).sum::<usize>();
                    from = done;
                } else {
                    // The message at `from` failed. A full buffer drops it; otherwise a
                    // segmented one's datagrams go one by one. Then the next message.
                    let full = matches!(
                        std::io::Error::last_os_error().raw_os_error(),
                        Some(libc::EAGAIN | libc::ENOBUFS)
                    );
                    if !full && self.runs[from].count > 1 {
                        sent += self.send_singly(sock, from);
                    }
                    from += 1;
                }
            }
        }
        sent
    }

    /// Takes up to [`SEND_CHUNK`] messages' worth of datagrams from `msgs`, joining each to the
    /// run before it when segmentation can carry both.
    fn fill<'a>(&mut self, msgs: &mut impl Iterator<Item = (&'a [u8], SocketAddr)>) {
        self.addrs.clear();
        self.iovs.clear();
        self.runs.clear();
        let mut last_to = None;
        while self.runs.len() < SEND_CHUNK {
            let Some((bytes, to)) = msgs.next() else {
                break;
            };
            let joins = self.runs.last().is_some_and(|r| {
                self.gso
                    && last_to == Some(to)
                    && r.size == bytes.len()
                    && r.count < MAX_SEGMENTS
                    && (r.count + 1) * r.size <= MAX_GSO_BYTES
            });
            self.iovs.push(libc::iovec {
                iov_base: bytes.as_ptr().cast_mut().cast(),
                iov_len: bytes.len(),
            });
            match self.runs.last_mut() {
                Some(r) if joins => r.count += 1,
                _ => {
                    self.runs.push(Run {
                        first: self.iovs.len() - 1,
                        count: 1,
                        size: bytes.len(),
                    });
                    self.addrs.push(storage(to));
                    last_to = Some(to);
                }
            }
        }
    }

    /// One header per run, with a UDP_SEGMENT control message when it holds more than one.
    fn headers(&mut self) {
        let n = self.runs.len();
        // SAFETY: mmsghdr is a plain C struct; all-zero is valid.
        self.hdrs.resize(n, unsafe { std::mem::zeroed() });
        self.cmsgs.resize(n, [0; 4]);
        for (i, h) in self.hdrs.iter_mut().enumerate() {
            let run = self.runs[i];
            h.msg_hdr.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
            h.msg_hdr.msg_namelen = socklen(&self.addrs[i]);
            h.msg_hdr.msg_iov = &mut self.iovs[run.first];
            h.msg_hdr.msg_iovlen = run.count as _;
            h.msg_hdr.msg_control = std::ptr::null_mut();
            h.msg_hdr.msg_controllen = 0;
            h.msg_len = 0;
            if run.count > 1 {
                segment(h, &mut self.cmsgs[i], run.size as u16);
            }
        }
    }

    /// Sends the datagrams of segmented message `i` one `sendmsg(2)` each. If they go where the
    /// message did not, the kernel does not take segmentation here: stop asking.
    fn send_singly(&mut self, sock: &impl AsRawFd, i: usize) -> usize {
        let run = self.runs[i];
        let mut h = self.hdrs[i].msg_hdr;
        h.msg_control = std::ptr::null_mut();
        h.msg_controllen = 0;
        h.msg_iovlen = 1;
        let mut sent = 0;
        for iov in &mut self.iovs[run.first..run.first + run.count] {
            h.msg_iov = iov;
            // SAFETY: the header points at a live address and iovec of this batch.
            if unsafe { libc::sendmsg(sock.as_raw_fd(), &h, libc::MSG_DONTWAIT) } >= 0 {
                sent += 1;
            }
        }
        if sent > 0 {
            self.gso = false;
        }
        sent
    }
}

/// Datagrams queued to leave together through a [`SendBatch`]: their bytes in one buffer that
/// keeps its capacity from flush to flush, so queueing allocates nothing in steady state.
#[derive(Default)]
pub struct Outbox {
    bytes: Vec<u8>,
    /// Where each datagram of `bytes` ends, and its destination.
    ends: Vec<(usize, SocketAddr)>,
    batch: SendBatch,
}

impl Outbox {
    /// Queues one datagram for `to`, made of `parts` in order (a header and a payload, say).
    pub fn push(&mut self, parts: &[&[u8]], to: SocketAddr) {
        for part in parts {
            self.bytes.extend_from_slice(part);
        }
        self.ends.push((self.bytes.len(), to));
    }

    /// Sends what is queued from `sock` ([`SendBatch::send`]) and empties the queue; returns
    /// how many datagrams the kernel took.
    pub fn flush(&mut self, sock: &impl AsRawFd) -> usize {
        if self.ends.is_empty() {
            return 0;
        }
        let bytes = &self.bytes;
        let mut start = 0;
        let msgs = self.ends.iter().map(|&(end, to)| {
            let msg = (&bytes[start..end], to);
            start = end;
            msg
        });
        let sent = self.batch.send(sock, msgs);
        self.bytes.clear();
        self.ends.clear();
        sent
    }
}

/// Adds a UDP_SEGMENT control message of `size` (in `buf`) to `h`.
fn segment(h: &mut libc::mmsghdr, buf: &mut [u64; 4], size: u16) {
    h.msg_hdr.msg_control = buf.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE of a u16 (24 bytes) fits the 32-byte buffer; the CMSG macros walk it
    // within msg_controllen.
    unsafe {
        h.msg_hdr.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<u16>() as u32) as _;
        let c = libc::CMSG_FIRSTHDR(&h.msg_hdr);
        (*c).cmsg_level = libc::SOL_UDP;
        (*c).cmsg_type = libc::UDP_SEGMENT;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<u16>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), size);
    }
}

/// `addr` as a C socket address.
fn storage(addr: SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: sockaddr_storage is a plain C struct; all-zero is valid.
    let mut s: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            let sin = unsafe {
                &mut *(&mut s as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>()
            };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr.s_addr = u32::from(*a.ip()).to_be();
        }
        SocketAddr::V6(a) => {
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            let sin6 = unsafe {
                &mut *(&mut s as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            sin6.sin6_flowinfo = a.flowinfo();
            sin6.sin6_scope_id = a.scope_id();
        }
    }
    s
}

fn socklen(s: &libc::sockaddr_storage) -> libc::socklen_t {
    let len = match s.ss_family as libc::c_int {
        libc::AF_INET => std::mem::size_of::<libc::sockaddr_in>(),
        _ => std::mem::size_of::<libc::sockaddr_in6>(),
    };
    len as libc::socklen_t
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

    #[test]
    fn a_send_batch_sends_in_order_to_each_address_and_skips_a_refused_datagram() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("[::1]:0").ok();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut batch = SendBatch::new();
        let to_a = a.local_addr().unwrap();
        // Runs of equal datagrams to one address longer than a segmented message takes, one
        // of another size, and an IPv6 address in the middle that an IPv4 socket refuses.
        let mut bytes: Vec<Vec<u8>> = (0..200u32).map(|i| i.to_be_bytes().to_vec()).collect();
        bytes[100].push(0xff);
        let v6: SocketAddr = "[::1]:9".parse().unwrap();
        let msgs = bytes
            .iter()
            .enumerate()
            .map(|(i, d)| (&d[..], if i == 70 { v6 } else { to_a }));
        assert_eq!(batch.send(&tx, msgs), 199);
        a.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        let mut got = Vec::new();
        for _ in 0..199 {
            let mut buf = [0u8; 8];
            let (n, src) = a.recv_from(&mut buf).unwrap();
            assert_eq!(src, tx.local_addr().unwrap());
            got.push(buf[..n].to_vec());
        }
        bytes.remove(70);
        assert_eq!(got, bytes, "each datagram whole, in order");
        assert!(batch.gso, "loopback takes segmented messages");
        if let Some(b) = b {
            let tx6 = UdpSocket::bind("[::1]:0").unwrap();
            let to_b = b.local_addr().unwrap();
            assert_eq!(batch.send(&tx6, [(&b"six"[..], to_b)]), 1);
            b.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
            let mut buf = [0u8; 8];
            assert_eq!(b.recv(&mut buf).unwrap(), 3);
        }
    }
}

#[cfg(test)]
mod plain {
    use super::*;
    use std::net::UdpSocket;

    #[test]
    fn an_outbox_sends_its_datagrams_in_order_on_flush_and_starts_empty_again() {
        let rx: Vec<UdpSocket> = (0..2)
            .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
            .collect();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut out = Outbox::default();
        out.push(&[b"head", b"-one"], rx[0].local_addr().unwrap());
        out.push(&[b"two"], rx[1].local_addr().unwrap());
        out.push(&[b"three"], rx[0].local_addr().unwrap());
        assert_eq!(out.flush(&tx), 3);
        assert_eq!(out.flush(&tx), 0, "nothing left to send");
        let mut got = Vec::new();
        for (sock, n) in [(&rx[0], 2), (&rx[1], 1)] {
            sock.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
            for _ in 0..n {
                let mut buf = [0u8; 16];
                let len = sock.recv(&mut buf).unwrap();
                got.push(String::from_utf8_lossy(&buf[..len]).into_owned());
            }
        }
        assert_eq!(got, ["head-one", "three", "two"]);
    }

    #[test]
    fn drain_reads_batch_after_batch_until_the_socket_is_dry() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        for i in 0..10u8 {
            tx.send_to(&[i], rx.local_addr().unwrap()).unwrap();
        }
        let mut batch = Batch::new(4, 64, false);
        let mut seen = Vec::new();
        let mut sizes = Vec::new();
        let all = batch.drain(&rx, |b, n| {
            sizes.push(n);
            seen.extend((0..n).map(|i| b.get(i).unwrap().0[0]));
        });
        assert_eq!(all, 10);
        assert_eq!(sizes, [4, 4, 2], "a short batch ends it");
        assert_eq!(seen, (0..10).collect::<Vec<u8>>());
        assert_eq!(batch.drain(&rx, |_, _| {}), 0, "dry: one empty read");
    }

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
