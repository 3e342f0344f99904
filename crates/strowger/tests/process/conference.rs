//! A conference room in the real process: five hand-written phones (two PCMU, two G.722, one
//! Opus) dial room 8000 of the default configuration, each sending its own tone; what each
//! receives, decoded, must hold the other four tones and not its own (Goertzel per tone).

use crate::common;

use codec::Format;
use common::audio::goertzel;
use common::sip::{sdp, sdp_audio, Rtp, RtpPkt, Uac, DTMF};
use common::switch::Opts;
use common::Strowger;
use std::time::{Duration, Instant};

/// The phones: codec, payload type and rtpmap offered, and the tone each says (Hz), away from
/// the room's join and leave cues (880 and 440 Hz).
const PHONES: [(Format, u8, &str, f64); 5] = [
    (Format::Pcmu, 0, "PCMU/8000", 500.0),
    (Format::Pcmu, 0, "PCMU/8000", 700.0),
    (Format::G722, 9, "G722/8000", 1100.0),
    (Format::G722, 9, "G722/8000", 1300.0),
    (Format::Opus, 111, "opus/48000/2", 1700.0),
];
/// How long each phone talks.
const TALK: Duration = Duration::from_secs(3);

/// Strowger with the default configuration, trusting 127.0.0.1, offering G.722 and Opus too,
/// its room 8000 mixing all five phones (`loudest = 5`).
fn start() -> (Strowger, common::TempDir) {
    let dir = common::TempDir::new("conference-config");
    let default =
        common::switch::trusting_loopback(include_str!("../../../switch/src/default.toml"));
    let config = default.replace(
        "codecs = [\"PCMU\", \"PCMA\"]",
        "codecs = [\"PCMU\", \"PCMA\", \"G722\", \"opus\"]",
    ) + "\n[conferences.8000]\nloudest = 5\n";
    assert!(
        config.contains("\"G722\", \"opus\"]"),
        "default.toml's codecs line moved"
    );
    let path = dir.path().join("strowger.toml");
    std::fs::write(&path, config).unwrap();
    let s = Strowger::with(
        "conference",
        Opts {
            config_file: Some(path),
            ..Opts::default()
        },
    );
    (s, dir)
}

/// `TALK` of a `hz` tone as packets of `format`, 20 ms each.
fn packets(format: Format, hz: f64) -> Vec<Vec<u8>> {
    let rate = format.pcm_rate();
    let n = (rate as u128 * TALK.as_millis() / 1000) as usize;
    let pcm: Vec<i16> = (0..n)
        .map(|i| (5000.0 * (std::f64::consts::TAU * hz * i as f64 / f64::from(rate)).sin()) as i16)
        .collect();
    codec::translate::encode_packets(format, &pcm)
}

/// Sends `frames` paced at 20 ms (timestamps `step` apart) while collecting what arrives.
fn talk(mut rtp: Rtp, pt: u8, step: u32, frames: Vec<Vec<u8>>) -> Vec<RtpPkt> {
    let start = Instant::now();
    let mut got = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        rtp.send(pt, i == 0, f, step);
        let due = start + Duration::from_millis(20 * (i as u64 + 1));
        got.extend(rtp.recv_for(due.saturating_duration_since(Instant::now())));
    }
    got
}

/// The packets of `pt` decoded with `format`, at 8 kHz.
fn decode(pkts: &[RtpPkt], pt: u8, format: Format) -> Vec<i16> {
    let mut dec = format.decoder();
    let mut pcm = Vec::new();
    let mut buf = vec![0i16; 5760];
    for p in pkts.iter().filter(|p| p.pt == pt) {
        let n = dec.decode(&p.payload, &mut buf).expect("payload decodes");
        pcm.extend_from_slice(&buf[..n]);
    }
    codec::resample::resample(&pcm, format.pcm_rate(), 8000)
}

#[test]
fn five_callers_in_three_codecs_each_hear_the_other_four_and_not_themselves() {
    let (s, _config) = start();
    let (mut uacs, mut rtps) = (Vec::new(), Vec::new());
    for &(format, pt, rtpmap, _) in &PHONES {
        let mut rtp = Rtp::bind();
        let mut uac = Uac::new(s.sip, "8000");
        let resp = uac.invite(&sdp(rtp.port, &[(pt, rtpmap), DTMF], "sendrecv"));
        assert_eq!(resp.status(), Some(200), "{format} caller: {resp:?}");
        let (addr, pts) = sdp_audio(&resp.body);
        assert_eq!(pts.first(), Some(&pt), "{format} answered: {}", resp.body);
        rtp.remote = Some(addr);
        uac.ack("");
        uacs.push(uac);
        rtps.push(rtp);
    }
    let talking: Vec<_> = rtps
        .into_iter()
        .zip(&PHONES)
        .map(|(rtp, &(format, pt, _, hz))| {
            let step = format.clock_units_in(20);
            let frames = packets(format, hz);
            std::thread::spawn(move || talk(rtp, pt, step, frames))
        })
        .collect();
    let heard: Vec<Vec<RtpPkt>> = talking.into_iter().map(|t| t.join().unwrap()).collect();
    for uac in &mut uacs {
        assert_eq!(uac.bye().status(), Some(200));
    }

    for (got, &(format, pt, _, own)) in heard.iter().zip(&PHONES) {
        let pcm = decode(got, pt, format);
        assert!(
            pcm.len() > 8000 * 2,
            "{own} Hz {format} caller got {} samples",
            pcm.len()
        );
        // The last second and a half: every phone talking, past the cues and the queues' priming.
        let tail = &pcm[pcm.len() - 12000..];
        let amplitude = |hz: f64| 2.0 * goertzel(tail, hz).sqrt();
        let all: Vec<(f64, f64)> = PHONES.iter().map(|p| (p.3, amplitude(p.3))).collect();
        println!("{own} Hz {format} caller hears {all:?}");
        for &(hz, a) in &all {
            match hz == own {
                true => assert!(a < 250.0, "{own} Hz {format} caller hears itself: {all:?}"),
                false => assert!(a > 2000.0, "{own} Hz {format} caller misses {hz}: {all:?}"),
            }
        }
    }
}
