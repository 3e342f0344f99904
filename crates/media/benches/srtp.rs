//! What SDES-SRTP costs a bridged call in the media engine: CPU per call-second for the packets
//! of bridged G.711 calls relayed both ways, plain RTP on both legs against an SRTP caller
//! (AES_CM_128_HMAC_SHA1_80: each packet from it unprotected, each packet to it protected)
//! bridged to a plain callee. The caller's packets are sealed before the clock starts, so
//! only strowger's side is measured; sockets are not (the engine alone).
//!
//! Run: `cargo bench -p media --bench srtp`. Prints the thread's CPU ns per call-second, the
//! median of 5 passes of each, interleaved.

use media::{Engine, Format, LegConfig, Transmit};
use sdp::{CryptoSuite, SrtpKeys};
use std::hint::black_box;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const CALLS: usize = 200;
const SECONDS: usize = 20;

fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn cfg(port: u16) -> LegConfig {
    LegConfig {
        payload_type: 0,
        format: Format::Pcmu,
        dtmf_pt: None,
        remote: Some(addr(port)),
        remote_rtcp: None,
        symmetric: false,
        media_timeout: None,
        hold_timeout: None,
        ptime_ms: 20,
    }
}

fn keys() -> SrtpKeys {
    SrtpKeys {
        suite: CryptoSuite::AesCm128HmacSha1_80,
        local: vec![1; 30],
        remote: vec![2; 30],
    }
}

/// The caller's packets, one per 20 ms: sealed with the caller's key when `srtp`.
fn packets(srtp: bool) -> Vec<Vec<u8>> {
    let mut far = srtp::Context::new(
        srtp::Suite::AesCm128HmacSha1_80,
        &keys().remote,
        srtp::Direction::Outbound,
    )
    .unwrap();
    (0..SECONDS * 50)
        .map(|n| {
            let mut p = vec![0u8; 12 + 160 + srtp::MAX_TRAILER];
            p[0] = 0x80;
            p[2..4].copy_from_slice(&(n as u16).to_be_bytes());
            p[4..8].copy_from_slice(&(160 * n as u32).to_be_bytes());
            p[12..172]
                .iter_mut()
                .enumerate()
                .for_each(|(i, b)| *b = (i * 7 + n) as u8);
            let len = if srtp {
                far.protect(&mut p, 172).unwrap()
            } else {
                172
            };
            p.truncate(len);
            p
        })
        .collect()
}

/// CPU ns per call-second for `CALLS` bridged calls, each packet relayed both ways.
fn pass(from_caller: &[Vec<u8>], srtp: bool) -> f64 {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(1);
    let calls: Vec<_> = (0..CALLS)
        .map(|i| {
            let a = e.add_leg(cfg(20_000 + 2 * i as u16), t0);
            let b = e.add_leg(cfg(30_000 + 2 * i as u16), t0);
            if srtp {
                e.set_srtp(a, Some(&keys())).unwrap();
            }
            e.bridge(a, b);
            (a, b)
        })
        .collect();
    let mut from_callee = [0u8; 172];
    from_callee[0] = 0x80;
    let mut sink = |t: Transmit<'_>| {
        black_box(t.payload.len());
    };
    let start = thread_cpu();
    for (n, pkt) in from_caller.iter().enumerate() {
        from_callee[2..4].copy_from_slice(&(n as u16).to_be_bytes());
        let now = t0 + Duration::from_millis(20 * n as u64);
        for (i, &(a, b)) in calls.iter().enumerate() {
            e.on_rtp(a, pkt, addr(20_000 + 2 * i as u16), now, &mut sink);
            e.on_rtp(b, &from_callee, addr(30_000 + 2 * i as u16), now, &mut sink);
        }
        while e.poll_event().is_some() {}
    }
    let cpu = thread_cpu() - start;
    let rejected: u64 = calls
        .iter()
        .map(|&(a, _)| e.stats(a).unwrap().srtp_rejected)
        .sum();
    assert_eq!(rejected, 0, "every sealed packet opened");
    cpu.as_nanos() as f64 / (CALLS * SECONDS) as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let (plain_in, srtp_in) = (packets(false), packets(true));
    let (mut plain, mut srtp) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        plain.push(pass(&plain_in, false));
        srtp.push(pass(&srtp_in, true));
    }
    let (plain, srtp) = (median(plain), median(srtp));
    println!("{CALLS} bridged G.711 calls, {SECONDS} s each, 20 ms packets relayed both ways");
    println!("| caller's leg | CPU ns per call-second |");
    println!("|---|---:|");
    println!("| plain RTP | {plain:.0} |");
    println!("| SDES-SRTP (AES_CM_128_HMAC_SHA1_80) | {srtp:.0} |");
    println!("| ratio | ×{:.2} |", srtp / plain);
}
