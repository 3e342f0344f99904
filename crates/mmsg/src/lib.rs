//! Datagrams received with one `recvmmsg(2)` into buffers owned by the batch, so a receive
//! allocates nothing, and one call both takes what is waiting and tells that nothing more is there
//! (where `recv_from` in a loop needs a second, empty call to learn it). With `timestamps`, each
//! datagram also carries the kernel's arrival time (SO_TIMESTAMPNS), so a load generator measures
//! jitter from when a packet arrived, not from when its frame loop got round to it. Datagrams to
//! send go out the same way, many per `sendmmsg(2)` ([`SendBatch`]). A socket bound to the wildcard
//! address can also learn each datagram's destination ([`enable_destinations`]) and send each
//! datagram from an address of its choosing ([`Outbox::push_from`]): one socket then stands for
//! many endpoints that each have an address of their own.

use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A received datagram's control data: its arrival stamp (32 bytes) and destination (up to 40).
const CMSG_SPACE: usize = 96;

/// Preallocated buffers, addresses and headers for one `recvmmsg(2)`.
pub struct Batch {
    size: usize,
    bufs: Vec<u8>,
    addrs: Vec<libc::sockaddr_storage>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    cmsgs: Vec<[u64; CMSG_SPACE / 8]>,
    /// Headers the last receive filled: the kernel rewrote their lengths, which the next one
    /// sets back (the rest of every header stays as [`Batch::new`] built it).
    filled: usize,
    timestamps: bool,
    /// The same moment on both clocks, to turn a kernel (realtime) stamp into an Instant.
    base: (Instant, Duration),
}

// SAFETY: the raw pointers in `iovs`/`hdrs` point into the batch's own heap buffers, which stay
// where they are when the batch moves (none of those vectors grows after `Batch::new`).
unsafe impl Send for Batch {}

impl Batch {
    /// `n` datagrams of at most `size` bytes per receive; `timestamps` keeps the kernel's arrival
    /// stamps (the socket needs [`enable_timestamps`]).
    pub fn new(n: usize, size: usize, timestamps: bool) -> Batch {
        let mut b = Batch {
            size,
            bufs: vec![0u8; n * size],
            // SAFETY: sockaddr_storage and mmsghdr are plain C structs; all-zero is valid.
            addrs: vec![unsafe { std::mem::zeroed() }; n],
            iovs: Vec::with_capacity(n),
            hdrs: vec![unsafe { std::mem::zeroed() }; n],
            cmsgs: vec![[0u64; CMSG_SPACE / 8]; n],
            filled: n,
            timestamps,
            base: clocks(),
        };
        // Every header points at its own buffer, address and control slot once and for all:
        // a receive then resets only what the kernel wrote into the headers it filled.
        for buf in b.bufs.chunks_mut(size) {
            b.iovs.push(libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: buf.len(),
            });
        }
        for (i, h) in b.hdrs.iter_mut().enumerate() {
            h.msg_hdr.msg_name = (&mut b.addrs[i] as *mut libc::sockaddr_storage).cast();
            h.msg_hdr.msg_iov = &mut b.iovs[i];
            h.msg_hdr.msg_iovlen = 1;
            // The kernel fills it only with what the socket asked for.
            h.msg_hdr.msg_control = b.cmsgs[i].as_mut_ptr().cast();
        }
        b
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
        for h in &mut self.hdrs[..self.filled] {
            h.msg_hdr.msg_namelen =
                std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_hdr.msg_controllen = CMSG_SPACE as _;
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
        // A failed call returns before the kernel writes a header back.
        self.filled = n.max(0) as usize;
        self.filled
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
        // SAFETY: the kernel sizes an SCM_TIMESTAMPNS message for a timespec.
        let ts: libc::timespec =
            unsafe { self.control(i, libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS)? };
        let real = Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32);
        let (base_i, base_r) = self.base;
        Some(if real >= base_r {
            base_i + (real - base_r)
        } else {
            base_i.checked_sub(base_r - real).unwrap_or(base_i)
        })
    }

    /// The address datagram `i` was sent to, if the socket asked for it ([`enable_destinations`]).
    pub fn destination(&self, i: usize) -> Option<IpAddr> {
        // SAFETY: the kernel sizes IP_PKTINFO and IPV6_PKTINFO messages for their structs.
        unsafe {
            if let Some(p) = self.control::<libc::in_pktinfo>(i, libc::IPPROTO_IP, libc::IP_PKTINFO)
            {
                return Some(std::net::Ipv4Addr::from(u32::from_be(p.ipi_addr.s_addr)).into());
            }
            let p: libc::in6_pktinfo = self.control(i, libc::IPPROTO_IPV6, libc::IPV6_PKTINFO)?;
            Some(std::net::Ipv6Addr::from(p.ipi6_addr.s6_addr).into())
        }
    }

    /// The data of datagram `i`'s control message of `level` and `kind`, read as a `T`.
    ///
    /// # Safety
    /// Such a message must carry at least a `T`.
    unsafe fn control<T>(&self, i: usize, level: libc::c_int, kind: libc::c_int) -> Option<T> {
        let h = &self.hdrs[i].msg_hdr;
        // SAFETY: the control buffer was filled by the kernel for this header; the CMSG macros
        // walk it within msg_controllen.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(h);
            while !c.is_null() {
                if (*c).cmsg_level == level && (*c).cmsg_type == kind {
                    return Some(std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<T>()));
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
    /// Per message: its first iovec, how many, their size and their source address.
    runs: Vec<Run>,
    hdrs: Vec<libc::mmsghdr>,
    cmsgs: Vec<[u64; 8]>,
    gso: bool,
}

#[derive(Clone, Copy)]
struct Run {
    first: usize,
    count: usize,
    size: usize,
    from: Option<IpAddr>,
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
        self.send_from(sock, msgs.into_iter().map(|(d, to)| (d, to, None)))
    }

    /// As [`SendBatch::send`], each datagram from the source address it names (IP_PKTINFO; the
    /// socket's own when `None`): a socket bound to the wildcard address sends for many.
    pub fn send_from<'a>(
        &mut self,
        sock: &impl AsRawFd,
        msgs: impl IntoIterator<Item = (&'a [u8], SocketAddr, Option<IpAddr>)>,
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
    fn fill<'a>(
        &mut self,
        msgs: &mut impl Iterator<Item = (&'a [u8], SocketAddr, Option<IpAddr>)>,
    ) {
        self.addrs.clear();
        self.iovs.clear();
        self.runs.clear();
        let mut last_to = None;
        while self.runs.len() < SEND_CHUNK {
            let Some((bytes, to, from)) = msgs.next() else {
                break;
            };
            let joins = self.runs.last().is_some_and(|r| {
                self.gso
                    && last_to == Some(to)
                    && r.from == from
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
                        from,
                    });
                    self.addrs.push(storage(to));
                    last_to = Some(to);
                }
            }
        }
    }

    /// One header per run, with a UDP_SEGMENT control message when it holds more than one and
    /// the source address when it names one.
    fn headers(&mut self) {
        let n = self.runs.len();
        // SAFETY: mmsghdr is a plain C struct; all-zero is valid.
        self.hdrs.resize(n, unsafe { std::mem::zeroed() });
        self.cmsgs.resize(n, [0; 8]);
        for (i, h) in self.hdrs.iter_mut().enumerate() {
            let run = self.runs[i];
            h.msg_hdr.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
            h.msg_hdr.msg_namelen = socklen(&self.addrs[i]);
            h.msg_hdr.msg_iov = &mut self.iovs[run.first];
            h.msg_hdr.msg_iovlen = run.count as _;
            h.msg_len = 0;
            let segments = (run.count > 1).then_some(run.size as u16);
            control(&mut h.msg_hdr, &mut self.cmsgs[i], segments, run.from);
        }
    }

    /// Sends the datagrams of segmented message `i` one `sendmsg(2)` each. If they go where the
    /// message did not, the kernel does not take segmentation here: stop asking.
    fn send_singly(&mut self, sock: &impl AsRawFd, i: usize) -> usize {
        let run = self.runs[i];
        let mut h = self.hdrs[i].msg_hdr;
        let mut buf = [0u64; 8];
        control(&mut h, &mut buf, None, run.from);
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
    /// Where each datagram of `bytes` ends, its destination and its source (if not the socket's).
    ends: Vec<(usize, SocketAddr, Option<IpAddr>)>,
    batch: SendBatch,
}

impl Outbox {
    /// Queues one datagram for `to`, made of `parts` in order (a header and a payload, say).
    pub fn push(&mut self, parts: &[&[u8]], to: SocketAddr) {
        self.push_from(parts, to, None);
    }

    /// Queues one datagram for `to` from source address `from` ([`SendBatch::send_from`]).
    pub fn push_from(&mut self, parts: &[&[u8]], to: SocketAddr, from: Option<IpAddr>) {
        for part in parts {
            self.bytes.extend_from_slice(part);
        }
        self.ends.push((self.bytes.len(), to, from));
    }

    /// Sends what is queued from `sock` ([`SendBatch::send`]) and empties the queue; returns
    /// how many datagrams the kernel took.
    pub fn flush(&mut self, sock: &impl AsRawFd) -> usize {
        if self.ends.is_empty() {
            return 0;
        }
        let bytes = &self.bytes;
        let mut start = 0;
        let msgs = self.ends.iter().map(|&(end, to, from)| {
            let msg = (&bytes[start..end], to, from);
            start = end;
            msg
        });
        let sent = self.batch.send_from(sock, msgs);
        self.bytes.clear();
        self.ends.clear();
        sent
    }
}

/// Sets `h`'s control messages, written into `buf`: UDP_SEGMENT of `segments` bytes each, and
/// the source address `from` (IP_PKTINFO / IPV6_PKTINFO); none at all when neither is asked.
fn control(h: &mut libc::msghdr, buf: &mut [u64; 8], segments: Option<u16>, from: Option<IpAddr>) {
    h.msg_control = std::ptr::null_mut();
    h.msg_controllen = 0;
    if segments.is_none() && from.is_none() {
        return;
    }
    *buf = [0; 8];
    h.msg_control = buf.as_mut_ptr().cast();
    // SAFETY: the messages' CMSG_SPACE (24 + at most 40 bytes) fits the 64-byte buffer, and each
    // is written at the header the CMSG macros give within msg_controllen.
    unsafe {
        let space = |len: usize| libc::CMSG_SPACE(len as u32) as usize;
        let pktinfo = match from {
            Some(IpAddr::V4(_)) => space(std::mem::size_of::<libc::in_pktinfo>()),
            Some(IpAddr::V6(_)) => space(std::mem::size_of::<libc::in6_pktinfo>()),
            None => 0,
        };
        h.msg_controllen =
            (segments.map_or(0, |_| space(std::mem::size_of::<u16>())) + pktinfo) as _;
        let mut c = libc::CMSG_FIRSTHDR(h);
        if let Some(size) = segments {
            put(c, libc::SOL_UDP, libc::UDP_SEGMENT, size);
            c = libc::CMSG_NXTHDR(h, c);
        }
        match from {
            Some(IpAddr::V4(a)) => {
                let mut p: libc::in_pktinfo = std::mem::zeroed();
                p.ipi_spec_dst.s_addr = u32::from(a).to_be();
                put(c, libc::IPPROTO_IP, libc::IP_PKTINFO, p);
            }
            Some(IpAddr::V6(a)) => {
                let mut p: libc::in6_pktinfo = std::mem::zeroed();
                p.ipi6_addr.s6_addr = a.octets();
                put(c, libc::IPPROTO_IPV6, libc::IPV6_PKTINFO, p);
            }
            None => {}
        }
    }
}

/// Writes a control message of `level` and `kind` carrying `data` at `c`.
///
/// # Safety
/// `c` must point at a header with room for CMSG_SPACE of a `T` after it.
unsafe fn put<T>(c: *mut libc::cmsghdr, level: libc::c_int, kind: libc::c_int, data: T) {
    // SAFETY: as the caller promises.
    unsafe {
        (*c).cmsg_level = level;
        (*c).cmsg_type = kind;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<T>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<T>(), data);
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
    set_int_option(sock, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1);
}

/// Sets the don't-fragment bit on the IPv4 datagrams `sock` sends (IP_PMTUDISC_DO), for media:
/// a voice frame is far below any path MTU, and an atomic datagram carries IP ID 0 (RFC 6864),
/// where the default (IP_PMTUDISC_WANT) has an unconnected socket hash a per-destination IP ID
/// for every datagram, several per cent of a socket's send cost when it serves many far ends.
/// A datagram larger than the path MTU is refused (EMSGSIZE) instead of fragmented.
pub fn set_dont_fragment(sock: &impl AsRawFd) {
    // An IPv6 socket refuses it harmlessly.
    set_int_option(
        sock,
        libc::IPPROTO_IP,
        libc::IP_MTU_DISCOVER,
        libc::IP_PMTUDISC_DO,
    );
}

/// Asks the kernel to tell each datagram's destination address (read back by
/// [`Batch::destination`]), for a socket bound to the wildcard address that answers for many.
pub fn enable_destinations(sock: &impl AsRawFd) {
    // The option of the other family fails harmlessly.
    set_int_option(sock, libc::IPPROTO_IP, libc::IP_PKTINFO, 1);
    set_int_option(sock, libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO, 1);
}

/// setsockopt(2) with an int value; false if the kernel refused it.
pub fn set_int_option(
    sock: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> bool {
    // SAFETY: a plain setsockopt with an int argument of the right size.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
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
    fn a_wildcard_socket_learns_each_datagrams_destination_and_answers_from_it() {
        // Bound to the wildcard address on the loopback device only: 127.0.0.0/8 is all local.
        let any = UdpSocket::bind("0.0.0.0:0").unwrap();
        // SAFETY: a setsockopt with the device name's bytes; refused without CAP_NET_RAW, which
        // only widens what the test's socket hears.
        unsafe {
            libc::setsockopt(
                any.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_BINDTODEVICE,
                c"lo".as_ptr().cast(),
                3,
            );
        }
        enable_destinations(&any);
        let port = any.local_addr().unwrap().port();
        let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
        let ends: Vec<IpAddr> = ["127.16.0.5", "127.16.1.9"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        for (i, e) in ends.iter().enumerate() {
            peer.send_to(&[i as u8], SocketAddr::new(*e, port)).unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
        let mut batch = Batch::new(4, 64, false);
        assert_eq!(batch.recv(&any), 2);
        let mut out = Outbox::default();
        for i in 0..2 {
            let (data, src) = batch.get(i).unwrap();
            let dst = batch.destination(i).unwrap();
            assert_eq!(dst, ends[data[0] as usize]);
            // Three equal answers from the address each was sent to: one segmented message.
            for _ in 0..3 {
                out.push_from(&[data], src, Some(dst));
            }
        }
        assert_eq!(out.flush(&any), 6);
        assert!(out.batch.gso, "segmented, with a source address");
        peer.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        for i in 0..6 {
            let mut buf = [0u8; 8];
            let (n, from) = peer.recv_from(&mut buf).unwrap();
            assert_eq!(&buf[..n], &[(i / 3) as u8]);
            assert_eq!(from, SocketAddr::new(ends[i / 3], port));
        }
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
