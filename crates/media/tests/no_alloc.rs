//! Steady-state media costs no heap allocation: playback (G.711, GSM, Opus), echo, a PCMU↔PCMA
//! bridge, a transcoding PCMU↔GSM bridge, a frame leg bridged to an RTP leg and RTCP run
//! for a simulated minute under a counting allocator after a warm-up, and the count must not move.
//! (Per-packet allocations are what make a media engine slow at thousands of calls.)

use codec::{Format, G711};
use media::{Engine, Frame, LegConfig, Prompt, Transmit};
use rtp::RtpHeader;
use std::alloc::{GlobalAlloc, Layout, System};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn leg(law: G711, port: u16) -> LegConfig {
    let format = match law {
        G711::Pcmu => Format::Pcmu,
        G711::Pcma => Format::Pcma,
    };
    leg_of(format, port)
}

fn leg_of(format: Format, port: u16) -> LegConfig {
    LegConfig {
        payload_type: format.static_payload_type().unwrap_or(96),
        format,
        dtmf_pt: Some(101),
        remote: Some(addr(port)),
        remote_rtcp: None,
        symmetric: true,
        media_timeout: Some(Duration::from_secs(30)),
        hold_timeout: Some(Duration::from_secs(3600)),
        ptime_ms: 20,
    }
}

#[test]
fn a_minute_of_media_allocates_nothing() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(7);
    let pcm: Vec<i16> = (0..16000).map(|i| ((i % 100) as i16 - 50) * 200).collect();
    let prompt = Arc::new(Prompt::from_pcm("tone", &pcm));
    let play = e.add_leg(leg(G711::Pcmu, 6000), t0);
    e.play(play, prompt.clone(), true, true);
    let gsm_play = e.add_leg(leg_of(Format::Gsm, 6010), t0);
    e.play(gsm_play, prompt.clone(), true, true);
    let opus_play = e.add_leg(leg_of(Format::Opus, 6012), t0);
    e.play(opus_play, prompt, true, true);
    let (c, d) = (
        e.add_leg(leg(G711::Pcmu, 6014), t0),
        e.add_leg(leg_of(Format::Gsm, 6016), t0),
    );
    e.bridge(c, d);
    // A GSM frame: the 0xD signature nibble, then a quiet but valid frame.
    let mut gsm = [0u8; 33];
    gsm[0] = 0xD0;
    let echo = e.add_leg(leg(G711::Pcmu, 6002), t0);
    e.echo(echo);
    let (a, b) = (
        e.add_leg(leg(G711::Pcmu, 6004), t0),
        e.add_leg(leg(G711::Pcma, 6006), t0),
    );
    e.bridge(a, b);
    let (f, g) = (
        e.add_frame_leg(Format::Pcmu, Some(Duration::from_secs(30)), t0),
        e.add_leg(leg(G711::Pcma, 6018), t0),
    );
    e.bridge(f, g);

    let mut packet = [0u8; 172];
    let mut sent = 0u64;
    let mut run = |e: &mut Engine, frames: std::ops::Range<u32>, sent: &mut u64| {
        for n in frames {
            let now = t0 + Duration::from_millis(20) * n;
            let mut tx = |_: Transmit<'_>| *sent += 1;
            let frame = Frame::Voice {
                ts: n * 20,
                payload: &[0xFF; 160],
            };
            e.on_frame(f, frame, now, &mut tx);
            for (id, port) in [
                (echo, 6002),
                (a, 6004),
                (b, 6006),
                (c, 6014),
                (d, 6016),
                (g, 6018),
            ] {
                let h = RtpHeader {
                    marker: false,
                    payload_type: match port {
                        6006 | 6018 => 8,
                        6016 => 3,
                        _ => 0,
                    },
                    sequence: n as u16,
                    timestamp: n * 160,
                    ssrc: u32::from(port),
                };
                h.write(&mut packet).unwrap();
                if port == 6016 {
                    packet[12..45].copy_from_slice(&gsm);
                    e.on_rtp(id, &packet[..45], addr(port), now, &mut tx);
                } else {
                    e.on_rtp(id, &packet, addr(port), now, &mut tx);
                }
            }
            e.tick(now, &mut tx);
            while e.poll_event().is_some() {}
        }
    };
    // Warm-up: buffers, statistics and the event queue reach their working size.
    run(&mut e, 0..500, &mut sent);
    let warm = sent;
    COUNTING.store(true, Ordering::SeqCst);
    let mut steady = 0;
    run(&mut e, 500..3500, &mut steady);
    COUNTING.store(false, Ordering::SeqCst);
    assert!(
        warm > 0 && steady >= 8 * 3000,
        "media flowed: {steady} packets"
    );
    assert_eq!(
        ALLOCS.load(Ordering::SeqCst),
        0,
        "heap allocations in steady state"
    );
}
