//! What listening for in-band DTMF costs a leg: the media engine's CPU per call-second for
//! the packets of bridged G.711 calls whose caller negotiated telephone-event (no detector,
//! as every leg was before) and whose caller did not (its audio is decoded and run through
//! the detector). The audio is speech (Debian's asterisk-core-sounds-en-wav), else noise.
//!
//! Run: `cargo bench -p media --bench dtmf` (bench/dtmf.sh compares the figure with a
//! playback call's). Prints the thread's CPU ns per call-second, the median of 5 passes.

use media::{Engine, Format, Law, LegConfig, Transmit};
use std::hint::black_box;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const CALLS: usize = 200;
const SECONDS: usize = 20;
const SPEECH: &str = "/usr/share/asterisk/sounds/en_US_f_Allison";

fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// `SECONDS` of µ-law audio: speech from the sound files, or noise without them.
fn audio() -> (Vec<u8>, &'static str) {
    let mut pcm: Vec<i16> = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(SPEECH)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.sort();
    for f in files {
        if let Ok(r) = hound::WavReader::open(&f) {
            if r.spec().sample_rate == 8000 && r.spec().channels == 1 {
                pcm.extend(r.into_samples::<i16>().map_while(Result::ok));
            }
        }
        if pcm.len() >= SECONDS * 8000 {
            break;
        }
    }
    let what = if pcm.len() >= SECONDS * 8000 {
        "speech"
    } else {
        let mut rng = fastrand::Rng::with_seed(1);
        pcm = (0..SECONDS * 8000).map(|_| rng.i16(-4000..4000)).collect();
        "noise"
    };
    pcm.truncate(SECONDS * 8000);
    (
        pcm.iter().map(|&s| Law::Pcmu.encode_sample(s)).collect(),
        what,
    )
}

fn cfg(port: u16, dtmf_pt: Option<u8>) -> LegConfig {
    LegConfig {
        payload_type: 0,
        format: Format::Pcmu,
        dtmf_pt,
        remote: Some(SocketAddr::from(([127, 0, 0, 1], port))),
        remote_rtcp: None,
        symmetric: false,
        media_timeout: None,
        hold_timeout: None,
        ptime_ms: 20,
    }
}

/// CPU ns per call-second for `CALLS` bridged calls whose callers' legs take `dtmf_pt`.
fn pass(ulaw: &[u8], dtmf_pt: Option<u8>) -> f64 {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(1);
    let callers: Vec<_> = (0..CALLS)
        .map(|i| {
            let a = e.add_leg(cfg(20_000 + 2 * i as u16, dtmf_pt), t0);
            let b = e.add_leg(cfg(30_000 + 2 * i as u16, Some(101)), t0);
            e.bridge(a, b);
            a
        })
        .collect();
    let mut pkt = [0u8; 12 + 160];
    pkt[0] = 0x80;
    let mut sink = |t: Transmit<'_>| {
        black_box(t.payload.len());
    };
    let start = thread_cpu();
    for (n, frame) in ulaw.chunks_exact(160).enumerate() {
        pkt[2..4].copy_from_slice(&(n as u16).to_be_bytes());
        pkt[4..8].copy_from_slice(&(160 * n as u32).to_be_bytes());
        pkt[12..].copy_from_slice(frame);
        let now = t0 + Duration::from_millis(20 * n as u64);
        for (i, &a) in callers.iter().enumerate() {
            let src = SocketAddr::from(([127, 0, 0, 1], 20_000 + 2 * i as u16));
            e.on_rtp(a, &pkt, src, now, &mut sink);
        }
        while e.poll_event().is_some() {}
    }
    let cpu = thread_cpu() - start;
    cpu.as_nanos() as f64 / (CALLS * SECONDS) as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let (ulaw, what) = audio();
    let off = median((0..5).map(|_| pass(&ulaw, Some(101))).collect());
    let on = median((0..5).map(|_| pass(&ulaw, None)).collect());
    println!("{CALLS} bridged G.711 calls, {SECONDS} s of {what} each, 20 ms packets");
    println!("| caller's leg | CPU ns per call-second |");
    println!("|---|---:|");
    println!("| telephone-event, no detector | {off:.0} |");
    println!("| no telephone-event, listened to for tones | {on:.0} |");
    println!("| detection alone | {:.0} |", on - off);
}
