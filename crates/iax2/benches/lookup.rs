//! The cost of finding a call as calls grow (the failure mode of chan_iax2 once call numbers
//! were random: a linear search per frame held capacity to 16 channels, seed paper 003).
//!
//! For each count, an endpoint holds that many answered calls from 300 peer ports, and frames
//! arrive for them in a shuffled order (as 20 ms media does: every call in turn, no locality):
//! - mini frame: found by (peer address, peer's call number), voice event produced;
//! - full ACK: found by our call number and checked against the peer address;
//! - route: worker 0's choice of worker for a mini frame (`Endpoint::route`, 2 workers, half
//!   the calls its own);
//! - linear: the same (address, number) search as a scan of a list, for comparison.
//!
//! Run: `cargo bench -p iax2 --bench lookup`. Prints a Markdown table of the thread's CPU ns
//! per frame (the median of 5 passes).

use iax2::frame::{iax, FrameType, FullFrame, MiniFrame};
use iax2::ie::{self, IeBuilder};
use iax2::{format, Config, Endpoint, Event};
use std::hint::black_box;
use std::net::SocketAddr;
use std::time::Instant;

const COUNTS: [usize; 7] = [100, 300, 1_000, 3_000, 10_000, 20_000, 30_000];
/// Frames per pass for the O(1) paths.
const FRAMES: usize = 1_000_000;

fn peer_of(i: usize) -> SocketAddr {
    SocketAddr::new([10, 0, 0, 1].into(), 10_000 + (i % 300) as u16)
}

fn remote_of(i: usize) -> u16 {
    (1 + i / 300) as u16
}

fn full(src: u16, dst: u16, ft: FrameType, subclass: u32, oseq: u8, payload: &[u8]) -> Vec<u8> {
    FullFrame {
        src_call: src,
        dst_call: dst,
        retransmit: false,
        ts: 40,
        oseqno: oseq,
        iseqno: 1,
        frame_type: ft,
        subclass,
        payload,
    }
    .to_vec()
    .unwrap()
}

/// An endpoint with `n` calls, each past its first (full) voice frame; our call numbers.
fn setup(n: usize, workers: u16) -> (Endpoint, Vec<u16>) {
    let now = Instant::now();
    let cfg = Config {
        call_tokens: false,
        max_calls_per_ip: usize::MAX,
        callno_share: (workers, 0),
        ..Config::default()
    };
    let mut ep = Endpoint::with_seed(cfg, [7; 16], now);
    let mut ies = IeBuilder::new();
    ies.str(ie::CALLED_NUMBER, "2000")
        .u32(ie::FORMAT, format::ULAW)
        .u32(ie::CAPABILITY, format::ULAW);
    let ies = ies.finish();
    let mut ours = Vec::with_capacity(n);
    for i in 0..n {
        ep.handle(
            peer_of(i),
            &full(remote_of(i), 0, FrameType::Iax, iax::NEW, 0, &ies),
            now,
        );
        let Some(Event::Incoming { call, .. }) = ep.poll_event() else {
            panic!("call {i} not set up")
        };
        ep.accept(call, format::ULAW, now).unwrap();
        let voice = full(
            remote_of(i),
            call.number(),
            FrameType::Voice,
            format::ULAW,
            1,
            &[0; 160],
        );
        ep.handle(peer_of(i), &voice, now);
        while ep.poll_event().is_some() {}
        ours.push(call.number());
    }
    while ep.poll_transmit().is_some() {}
    (ep, ours)
}

/// A fixed pseudo-random permutation of 0..n (every call once per round, in no order).
fn shuffled(n: usize) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for i in (1..n).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
    v
}

/// CPU time of this thread in ns: unlike the wall clock it excludes the time the thread waits
/// while other processes run (the benchmark machine is shared).
fn thread_cpu_ns() -> u128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u128 * 1_000_000_000 + ts.tv_nsec as u128
}

/// Median CPU ns per frame of 5 passes of `frames` calls of `f`.
fn measure(frames: usize, mut f: impl FnMut(usize)) -> f64 {
    let mut runs: Vec<f64> = (0..5)
        .map(|_| {
            let t = thread_cpu_ns();
            for k in 0..frames {
                f(k);
            }
            (thread_cpu_ns() - t) as f64 / frames as f64
        })
        .collect();
    runs.sort_by(f64::total_cmp);
    runs[2]
}

fn main() {
    println!(
        "| calls | mini frame (ns) | full ACK (ns) | route, 2 workers (ns) | linear search (ns) |"
    );
    println!("| --- | --- | --- | --- | --- |");
    for n in COUNTS {
        let (mut ep, ours) = setup(n, 1);
        let order = shuffled(n);
        let minis: Vec<(SocketAddr, Vec<u8>)> = order
            .iter()
            .map(|&i| {
                let mut b = Vec::new();
                MiniFrame {
                    src_call: remote_of(i),
                    ts: 60,
                    payload: &[0x55; 160],
                }
                .write(&mut b)
                .unwrap();
                (peer_of(i), b)
            })
            .collect();
        let now = Instant::now();
        let mini = measure(FRAMES, |k| {
            let (from, b) = &minis[k % n];
            ep.handle(*from, b, now);
            black_box(ep.poll_event());
        });
        // ACK of our frame (ACCEPT, oseqno 0): found by our number, nothing to send back.
        let acks: Vec<(SocketAddr, Vec<u8>)> = order
            .iter()
            .map(|&i| {
                (
                    peer_of(i),
                    full(remote_of(i), ours[i], FrameType::Iax, iax::ACK, 2, &[]),
                )
            })
            .collect();
        let ack = measure(FRAMES, |k| {
            let (from, b) = &acks[k % n];
            ep.handle(*from, b, now);
        });
        assert_eq!(ep.stats().unknown_call, 0, "every frame found its call");
        // Worker 0 of 2 holds half the calls; the other half it hands over.
        let (router, _) = setup(n / 2, 2);
        let route = measure(FRAMES, |k| {
            let (from, b) = &minis[k % n];
            black_box(router.route(*from, b));
        });
        // The search chan_iax2 did before its hash table, over the same calls.
        let list: Vec<(SocketAddr, u16, u16)> = (0..n)
            .map(|i| (peer_of(i), remote_of(i), ours[i]))
            .collect();
        let lookups = (20_000_000 / n).clamp(2_000, FRAMES);
        let linear = measure(lookups, |k| {
            let i = order[k % n];
            let key = (peer_of(i), remote_of(i));
            black_box(list.iter().find(|(p, r, _)| (*p, *r) == key).map(|c| c.2));
        });
        println!("| {n} | {mini:.0} | {ack:.0} | {route:.0} | {linear:.0} |");
    }
}
