//! Frame legs: frames and digits in and out without RTP headers, bridged to RTP legs.

use super::*;

/// What a pass sent: datagrams, and frames for frame legs.
#[derive(Default)]
struct Out {
    sent: Vec<Sent>,
    voice: Vec<(LegId, u32, Vec<u8>)>,
    digits: Vec<(LegId, char, bool)>,
}

impl Output for Out {
    fn transmit(&mut self, t: Transmit<'_>) {
        self.sent.push(Sent {
            leg: t.leg,
            rtcp: t.rtcp,
            dst: t.dst,
            pinned: t.pinned,
            data: t.payload.to_vec(),
        });
    }

    fn frame(&mut self, f: FrameOut<'_>) {
        match f {
            FrameOut::Voice { leg, ts, payload } => self.voice.push((leg, ts, payload.to_vec())),
            FrameOut::Digit { leg, digit, end } => self.digits.push((leg, digit, end)),
        }
    }
}

fn frame_in(e: &mut Engine, id: LegId, frame: Frame<'_>, now: Instant) -> Out {
    let mut out = Out::default();
    e.on_frame(id, frame, now, &mut out);
    out
}

fn rtp_out(e: &mut Engine, id: LegId, data: &[u8], src: SocketAddr, now: Instant) -> Out {
    let mut out = Out::default();
    e.on_rtp(id, data, src, now, &mut out);
    out
}

/// The steps between consecutive timestamps.
fn steps(ts: impl IntoIterator<Item = u32>) -> Vec<u32> {
    let ts: Vec<u32> = ts.into_iter().collect();
    ts.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect()
}

/// A 440 Hz tone at 8 kHz.
fn tone8k(samples: usize) -> Vec<i16> {
    (0..samples)
        .map(|i| (8000.0 * (i as f64 * 440.0 * std::f64::consts::TAU / 8000.0).sin()) as i16)
        .collect()
}

#[test]
fn a_frame_leg_bridged_to_an_rtp_leg_relays_both_ways_keeping_timestamps() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(21);
    let f = e.add_frame_leg(Format::Pcmu, None, t0);
    let r = e.add_leg(cfg(G711::Pcmu, 4000), t0);
    e.bridge(f, r);

    // Frames at 1000, 1020, 1040 ms, then one at 1100 (two lost): RTP keeps the spacing.
    let mut rtp = Vec::new();
    for (i, ts) in [1000u32, 1020, 1040, 1100].into_iter().enumerate() {
        let payload = [i as u8 + 1; 160];
        let out = frame_in(
            &mut e,
            f,
            Frame::Voice {
                ts,
                payload: &payload,
            },
            t0 + 20 * MS * i as u32,
        );
        assert!(out.voice.is_empty() && out.digits.is_empty());
        rtp.extend(out.sent);
    }
    assert_eq!(rtp.len(), 4);
    assert!(rtp
        .iter()
        .all(|s| s.leg == r && s.dst == addr(4000) && !s.rtcp));
    assert_eq!(
        steps(rtp.iter().map(|s| s.rtp().timestamp())),
        [160, 160, 480]
    );
    assert_eq!(
        steps(rtp.iter().map(|s| s.rtp().sequence() as u32)),
        [1, 1, 1]
    );
    assert!(rtp[0].rtp().marker());
    assert_eq!(rtp[0].rtp().payload_type(), 0);
    assert_eq!(rtp[3].rtp().payload(), &[4; 160]);

    // RTP at 160-unit steps with a gap: frames keep the spacing in ms, without headers.
    let mut frames = Vec::new();
    for (i, ts) in [8000u32, 8160, 8640].into_iter().enumerate() {
        let payload = [0x10 + i as u8; 160];
        let data = packet(0, 7 + i as u16, ts, false, &payload);
        let out = rtp_out(&mut e, r, &data, addr(4000), t0 + 20 * MS * i as u32);
        assert!(out.sent.is_empty());
        frames.extend(out.voice);
    }
    assert_eq!(frames.len(), 3);
    assert!(frames.iter().all(|(leg, _, p)| *leg == f && p.len() == 160));
    assert_eq!(steps(frames.iter().map(|v| v.1)), [20, 60]);
    assert_eq!(frames[2].2, [0x12; 160]);

    let stats = e.stats(f).unwrap();
    assert_eq!((stats.packets_received, stats.bytes_received), (4, 640));
    assert_eq!((stats.packets_sent, stats.packets_lost), (3, 0));
}

#[test]
fn g711_frames_are_transcoded_by_table_and_keep_their_timestamps() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(22);
    let f = e.add_frame_leg(Format::Pcma, None, t0);
    let r = e.add_leg(cfg(G711::Pcmu, 4000), t0);
    e.bridge(f, r);
    let pcm = tone8k(320);
    let mut alaw = [0u8; 160];
    G711::Pcma.encode(&pcm[..160], &mut alaw);
    let out = frame_in(
        &mut e,
        f,
        Frame::Voice {
            ts: 40,
            payload: &alaw,
        },
        t0,
    );
    let mut ulaw = [0u8; 160];
    G711::Pcma.transcode(G711::Pcmu, &alaw, &mut ulaw);
    assert_eq!(out.sent.len(), 1);
    assert_eq!(out.sent[0].rtp().payload(), ulaw);

    G711::Pcmu.encode(&pcm[160..], &mut ulaw);
    let mut frames = Vec::new();
    for i in 0..2u32 {
        let data = packet(0, i as u16, 5000 + 160 * i, false, &ulaw);
        frames.extend(rtp_out(&mut e, r, &data, addr(4000), t0 + 20 * MS * i).voice);
    }
    G711::Pcmu.transcode(G711::Pcma, &ulaw, &mut alaw);
    assert_eq!(frames.len(), 2);
    assert_eq!(frames[1].2, alaw);
    assert_eq!(steps(frames.iter().map(|v| v.1)), [20]);
}

#[test]
fn frames_of_another_codec_are_translated_both_ways() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(23);
    let f = e.add_frame_leg(Format::Gsm, None, t0);
    let r = e.add_leg(cfg(G711::Pcmu, 4000), t0);
    e.bridge(f, r);
    let tone = tone8k(8000);

    // GSM frames in: 20 ms µ-law RTP out, one contiguous stream carrying the tone.
    let mut enc = Format::Gsm.encoder();
    let mut rtp = Vec::new();
    for (i, chunk) in tone.chunks(160).enumerate() {
        let mut gsm = [0u8; 33];
        enc.encode(chunk, &mut gsm).unwrap();
        let ts = 20 * i as u32;
        rtp.extend(frame_in(&mut e, f, Frame::Voice { ts, payload: &gsm }, t0 + MS * ts).sent);
    }
    assert!(rtp.len() >= 48, "{} packets", rtp.len());
    let ulaw = contiguous(&rtp, 160);
    let mut pcm = vec![0; ulaw.len()];
    G711::Pcmu.decode(&ulaw, &mut pcm);
    let q = purity(&pcm[2000..], 8000.0, 440.0);
    assert!(q > 0.8, "GSM→PCMU 440 Hz purity {q:.2}");

    // µ-law RTP in: GSM frames out, 20 ms apart.
    let mut frames = Vec::new();
    for (i, chunk) in tone.chunks(160).enumerate() {
        let mut ulaw = [0u8; 160];
        G711::Pcmu.encode(chunk, &mut ulaw);
        let data = packet(0, i as u16, 160 * i as u32, false, &ulaw);
        frames.extend(rtp_out(&mut e, r, &data, addr(4000), t0 + 20 * MS * i as u32).voice);
    }
    assert!(frames.len() >= 48, "{} frames", frames.len());
    assert!(frames.iter().all(|(leg, _, p)| *leg == f && p.len() == 33));
    assert!(steps(frames.iter().map(|v| v.1)).iter().all(|&s| s == 20));
    let mut dec = Format::Gsm.decoder();
    let mut pcm = Vec::new();
    let mut buf = [0; 160];
    for (_, _, p) in &frames {
        let n = dec.decode(p, &mut buf).unwrap();
        pcm.extend_from_slice(&buf[..n]);
    }
    let q = purity(&pcm[2000..], 8000.0, 440.0);
    assert!(q > 0.8, "PCMU→GSM 440 Hz purity {q:.2}");
}

#[test]
fn digits_cross_between_frame_and_rtp_legs_and_are_reported_once() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(24);
    let f = e.add_frame_leg(Format::Pcmu, None, t0);
    let r = e.add_leg(cfg(G711::Pcmu, 4000), t0);
    e.bridge(f, r);
    frame_in(
        &mut e,
        f,
        Frame::Voice {
            ts: 0,
            payload: &[0xFF; 160],
        },
        t0,
    );

    // A digit on the frame leg: an RFC 4733 start, then its end three times, one timestamp.
    let down = frame_in(
        &mut e,
        f,
        Frame::Digit {
            digit: '5',
            end: false,
        },
        t0 + 20 * MS,
    );
    let again = frame_in(
        &mut e,
        f,
        Frame::Digit {
            digit: '5',
            end: false,
        },
        t0 + 40 * MS,
    );
    assert!(again.sent.is_empty());
    let up = frame_in(
        &mut e,
        f,
        Frame::Digit {
            digit: '5',
            end: true,
        },
        t0 + 140 * MS,
    );
    let pkts: Vec<_> = down.sent.iter().chain(&up.sent).collect();
    assert_eq!(pkts.len(), 4);
    let evs: Vec<_> = pkts
        .iter()
        .map(|s| TelephoneEvent::parse(s.rtp().payload()).unwrap())
        .collect();
    assert!(pkts.iter().all(|s| s.rtp().payload_type() == 101));
    assert!(pkts[0].rtp().marker() && !pkts[1].rtp().marker());
    assert_eq!(pkts[0].rtp().timestamp(), pkts[3].rtp().timestamp());
    assert_eq!(
        pkts[0].rtp().timestamp(),
        down.sent[0].rtp().timestamp(),
        "one event"
    );
    assert!(evs.iter().all(|ev| ev.event == 5));
    assert_eq!(
        evs.iter().map(|ev| ev.end).collect::<Vec<_>>(),
        [false, true, true, true]
    );
    assert_eq!(evs[3].duration, 960, "120 ms at 8 kHz");
    assert_eq!(
        steps(pkts.iter().map(|s| s.rtp().sequence() as u32)),
        [1, 1, 1]
    );
    assert_eq!(
        events(&mut e),
        [MediaEvent::Dtmf {
            leg: f,
            digit: '5',
            duration_ms: 120
        }]
    );

    // RFC 4733 events on the RTP leg: one begin and one end reach the frame leg.
    let mut digits = Vec::new();
    let mut seq = 50;
    for (end, duration) in [
        (false, 160),
        (false, 320),
        (true, 480),
        (true, 480),
        (true, 480),
    ] {
        let mut payload = [0u8; 4];
        let ev = TelephoneEvent {
            event: 11,
            end,
            volume: 10,
            duration,
        };
        ev.write(&mut payload).unwrap();
        seq += 1;
        let data = packet(101, seq, 9000, duration == 160, &payload);
        let out = rtp_out(&mut e, r, &data, addr(4000), t0);
        assert!(out.sent.is_empty() && out.voice.is_empty());
        digits.extend(out.digits);
    }
    assert_eq!(digits, [(f, '#', false), (f, '#', true)]);
    assert_eq!(
        events(&mut e),
        [MediaEvent::Dtmf {
            leg: r,
            digit: '#',
            duration_ms: 60
        }]
    );

    // An end without its begin is still one digit, both ways.
    let up = frame_in(
        &mut e,
        f,
        Frame::Digit {
            digit: '*',
            end: true,
        },
        t0 + 200 * MS,
    );
    assert_eq!(up.sent.len(), 3);
    assert!(up.sent[0].rtp().marker());
    assert_eq!(
        events(&mut e),
        [MediaEvent::Dtmf {
            leg: f,
            digit: '*',
            duration_ms: 40
        }]
    );
}

#[test]
fn frame_legs_bridged_together_pass_frames_and_digits() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(25);
    let a = e.add_frame_leg(Format::Gsm, None, t0);
    let b = e.add_frame_leg(Format::Gsm, None, t0);
    e.bridge(a, b);
    let mut out = Out::default();
    for (i, ts) in [100u32, 120, 160].into_iter().enumerate() {
        let frame = Frame::Voice {
            ts,
            payload: &[0xD0 + i as u8; 33],
        };
        e.on_frame(a, frame, t0 + 20 * MS * i as u32, &mut out);
    }
    e.on_frame(
        a,
        Frame::Digit {
            digit: '1',
            end: false,
        },
        t0,
        &mut out,
    );
    e.on_frame(
        a,
        Frame::Digit {
            digit: '1',
            end: true,
        },
        t0 + 100 * MS,
        &mut out,
    );
    assert!(out.sent.is_empty());
    assert!(out.voice.iter().all(|v| v.0 == b));
    assert_eq!(steps(out.voice.iter().map(|v| v.1)), [20, 40]);
    assert_eq!(out.voice[2].2, [0xD2; 33]);
    assert_eq!(out.digits, [(b, '1', false), (b, '1', true)]);
}

#[test]
fn a_frame_leg_plays_prompts_as_frames_and_sends_no_rtcp() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(26);
    let f = e.add_frame_leg(Format::Pcmu, Some(Duration::from_secs(1)), t0);
    e.play(f, ramp_prompt(8000), false, true);
    let mut out = Out::default();
    for i in 0..400u32 {
        e.tick(t0 + 20 * MS * i, &mut out);
    }
    assert!(out.sent.is_empty(), "no RTP, no RTCP");
    assert_eq!(out.voice.len(), 50);
    assert!(out.voice.iter().all(|v| v.0 == f && v.2.len() == 160));
    assert!(steps(out.voice.iter().map(|v| v.1))
        .iter()
        .all(|&s| s == 20));
    let evs = events(&mut e);
    assert!(evs.contains(&MediaEvent::PlaybackDone { leg: f }));
    assert!(
        evs.contains(&MediaEvent::MediaTimeout { leg: f }),
        "{evs:?}"
    );

    // A datagram handed to a frame leg is not RTP of it; a frame to an RTP leg is not either.
    let r = e.add_leg(cfg(G711::Pcmu, 4000), t0);
    let data = packet(0, 1, 0, false, &[0; 160]);
    rtp_out(&mut e, f, &data, addr(4000), t0);
    frame_in(
        &mut e,
        r,
        Frame::Voice {
            ts: 0,
            payload: &[0; 160],
        },
        t0,
    );
    assert_eq!(e.stats(f).unwrap().rejected, 1);
    assert_eq!(e.stats(r).unwrap().rejected, 1);
}

#[test]
fn a_frame_legs_recording_fills_gaps_by_the_frames_timestamps() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(27);
    let f = e.add_frame_leg(Format::Pcma, None, t0);
    let sink = Shared::default();
    e.record(f, Box::new(sink.clone())).unwrap();
    // The frame at 40 ms is lost.
    for (ts, v) in [(0u32, 1000), (20, 2000), (60, 3000)] {
        let payload = [G711::Pcma.encode_sample(v); 160];
        frame_in(
            &mut e,
            f,
            Frame::Voice {
                ts,
                payload: &payload,
            },
            t0,
        );
    }
    assert_eq!(e.silence(f).unwrap().unwrap(), 640);
    let bytes = sink.0.lock().unwrap().get_ref().clone();
    let samples: Vec<i16> = hound::WavReader::new(&bytes[..])
        .unwrap()
        .samples::<i16>()
        .map(Result::unwrap)
        .collect();
    assert!(
        samples[320..480].iter().all(|&s| s == 0),
        "lost frame became silence"
    );
    assert!(samples[480..].iter().all(|&s| s != 0));
}
