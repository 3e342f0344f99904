//! Free loopback ports. Tests run in parallel threads (and other engineers run suites on the
//! same machine), so every port handed out is remembered until it is given back (a strowger's
//! RTP range, when that strowger is gone) and checked free on 127.0.0.1 right before use.

use std::collections::hash_map::RandomState;
use std::collections::BTreeSet;
use std::hash::{BuildHasher, Hasher};
use std::net::{TcpListener, UdpSocket};
use std::sync::Mutex;

static TAKEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

fn udp_free(port: u16) -> bool {
    UdpSocket::bind(("127.0.0.1", port)).is_ok()
}

fn tcp_free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

fn random_u64() -> u64 {
    RandomState::new().build_hasher().finish()
}

/// A port free for both UDP and TCP (strowger's `--sip-listen` binds both), taken from the
/// kernel by binding port 0.
pub fn free_port() -> u16 {
    for _ in 0..100 {
        let port = UdpSocket::bind("127.0.0.1:0")
            .and_then(|s| s.local_addr())
            .expect("bind an ephemeral UDP port")
            .port();
        let mut taken = TAKEN.lock().unwrap();
        if !taken.contains(&port) && tcp_free(port) {
            taken.insert(port);
            return port;
        }
    }
    panic!("no free UDP+TCP port on 127.0.0.1 after 100 tries");
}

/// The start of `len` consecutive free UDP ports, even-aligned (RTP on even, RTCP on odd).
/// Picked below the kernel's ephemeral range so that short-lived client sockets do not land in it.
/// Small ranges (a SIPp's or a phone's media ports, never given back) come from their own band so
/// that they cannot fragment the band of strowgers' ranges (up to 512: 250 held calls with a
/// pair each, across workers). The band is scanned from a random start, so a range is found
/// whenever one is free.
pub fn free_port_range(len: u16) -> u16 {
    assert!(len > 0 && len <= 512);
    let (base, span): (u32, u32) = if len <= 16 {
        (10000, 10000)
    } else {
        (20000, 12000)
    };
    let len32 = u32::from(len);
    let start = (random_u64() % u64::from(span)) as u32 & !1;
    let mut taken = TAKEN.lock().unwrap();
    for step in (0..span).step_by(2) {
        let lo = base + (start + step) % span;
        if lo + len32 > base + span {
            continue;
        }
        let (lo, hi) = (lo as u16, (lo + len32) as u16);
        if taken.range(lo..hi).next().is_none() && (lo..hi).all(udp_free) {
            taken.extend(lo..hi);
            return lo;
        }
    }
    panic!(
        "no {len} free consecutive UDP ports on 127.0.0.1 in {base}..{}",
        base + span
    );
}

/// Gives back a range from [`free_port_range`] whose user has closed it: every test of the
/// crate runs in one process, and their strowgers' RTP ranges would fill the span otherwise.
pub fn release_port_range(lo: u16, len: u16) {
    let mut taken = TAKEN.lock().unwrap();
    for p in lo..lo + len {
        taken.remove(&p);
    }
}
