//! Is the audio really carried? A hand-written SIP/RTP client (tests/common/sip.rs) calls the
//! demo, echo and record extensions and checks the RTP stream and the decoded audio.

use crate::common;

use common::audio::{best_correlation, dominant_freq, read_wav, rms, tone, tone_purity};
use common::sip::{call, frames, pcm, Rtp, RtpPkt};
use common::Strowger;
use std::time::{Duration, Instant};

/// One stream, 20 ms PCMU packets: contiguous sequence numbers, timestamps +160, ~50/s.
fn assert_clean_stream(pkts: &[RtpPkt]) {
    assert!(pkts.len() > 100, "only {} RTP packets", pkts.len());
    for w in pkts.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        assert_eq!(
            (b.pt, b.ssrc, b.payload.len()),
            (0, a.ssrc, 160),
            "packet {b:?}"
        );
        assert_eq!(
            b.seq,
            a.seq.wrapping_add(1),
            "sequence gap/reorder after {}",
            a.seq
        );
        assert_eq!(
            b.ts,
            a.ts.wrapping_add(160),
            "timestamp step at seq {}",
            b.seq
        );
    }
    let span = pkts.last().unwrap().at - pkts[0].at;
    let rate = (pkts.len() - 1) as f64 / span.as_secs_f64();
    println!("{} packets at {rate:.2}/s", pkts.len());
    assert!(
        (45.0..55.0).contains(&rate),
        "{rate:.1} packets/s, want ~50"
    );
}

/// 44444: ~3 s of what arrives must be demo.wav from its start (±0.5 s), sent as a clean
/// 20 ms PCMU stream.
#[test]
fn demo_stream_is_the_announcement() {
    let s = Strowger::start("media-demo");
    let mut rtp = Rtp::bind();
    let mut uac = call(&s, "44444", &mut rtp);
    let pkts = rtp.recv_for(Duration::from_millis(3200));
    assert_eq!(uac.bye().status(), Some(200));
    assert_clean_stream(&pkts);
    let got = pcm(&pkts);
    let demo = read_wav(&common::repo_root().join("assets/demo.wav"));
    let (c, lag) = best_correlation(&got, &demo.samples, 4000, 16000, -4000..=4000);
    println!(
        "44444: {} packets, correlation {c:.3} at lag {lag}",
        pkts.len()
    );
    assert!(
        c > 0.9,
        "received audio vs assets/demo.wav: best correlation {c:.3} at lag {lag} samples"
    );
}

/// 9196: a 1 kHz tone in 100 distinct packets must come back
/// byte for byte, in order, promptly.
#[test]
fn echo_returns_our_payloads() {
    let s = Strowger::start("media-echo");
    let mut rtp = Rtp::bind();
    let mut uac = call(&s, "9196", &mut rtp);
    // The first byte numbers the packet: µ-law quantisation alone would repeat payloads.
    let sent: Vec<Vec<u8>> = frames(&tone(1000.0, 160 * 100, 8000.0))
        .into_iter()
        .enumerate()
        .map(|(i, mut f)| {
            f[0] = i as u8;
            f
        })
        .collect();
    let start = Instant::now();
    let back = rtp.send_frames(&sent, Duration::from_millis(500));
    assert_eq!(uac.bye().status(), Some(200));
    let ours: Vec<&RtpPkt> = back.iter().filter(|p| sent.contains(&p.payload)).collect();
    assert!(
        ours.len() >= 95,
        "{} of 100 payloads echoed unchanged ({} packets back in all)",
        ours.len(),
        back.len()
    );
    let order: Vec<usize> = ours
        .iter()
        .map(|p| sent.iter().position(|f| *f == p.payload).unwrap())
        .collect();
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "echo out of order: {order:?}"
    );
    // Packet i left at start + 20 ms·i; its echo should follow within 200 ms.
    let late = ours
        .iter()
        .zip(&order)
        .map(|(p, &i)| p.at - start - Duration::from_millis(20 * i as u64))
        .max()
        .unwrap();
    println!("9196: {} of 100 echoed, delay up to {late:?}", ours.len());
    assert!(
        late < Duration::from_millis(200),
        "echo delay up to {late:?}"
    );
}

/// 9197: record ~3 s of 440 Hz ended by '#', then hear it back. The WAV in the data dir must
/// be 8 kHz mono 440 Hz, and the playback must decode to 440 Hz and start well before the
/// 10 s recording limit (i.e. the '#' was honoured).
#[test]
fn record_then_playback() {
    let s = Strowger::start("media-record");
    let mut rtp = Rtp::bind();
    let uac = call(&s, "9197", &mut rtp);
    rtp.send_frames(&frames(&tone(440.0, 8000 * 3, 8000.0)), Duration::ZERO);
    rtp.dtmf('#');
    let after_hash = rtp.recv_for(Duration::from_secs(5));
    uac.expect_request("BYE", Duration::from_secs(10));

    let recs: Vec<_> = std::fs::read_dir(s.data_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "wav"))
        .collect();
    assert_eq!(recs.len(), 1, "one recording in the data dir: {recs:?}");
    let wav = read_wav(&recs[0]);
    assert_eq!((wav.rate, wav.channels), (8000, 1), "{}", recs[0].display());
    let secs = wav.samples.len() as f64 / 8000.0;
    println!(
        "9197: recording {secs:.2} s, {} packets after '#'",
        after_hash.len()
    );
    assert!(
        (2.5..4.0).contains(&secs),
        "recording is {secs:.2} s, sent 3 s of tone"
    );
    let f = dominant_freq(&wav.samples);
    assert_eq!(f, 440.0, "recording's dominant frequency");
    assert!(
        tone_purity(&wav.samples, 440.0) > 0.8,
        "recording is mostly the tone"
    );

    let played = pcm(&after_hash);
    let loud: Vec<i16> = played
        .chunks(160)
        .filter(|c| rms(c) > 1000.0)
        .flatten()
        .copied()
        .collect();
    assert!(
        loud.len() >= 8000 * 2,
        "want ≥2 s of playback within 5 s of '#', got {:.2} s of audio ({} packets)",
        loud.len() as f64 / 8000.0,
        after_hash.len()
    );
    assert_eq!(dominant_freq(&loud), 440.0, "playback's dominant frequency");
}
