//! Engine behaviour, driven with injected `Instant`s.

use std::io::{Cursor, Seek, SeekFrom, Write};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use codec::{Codec, Format, G711};

use rtp::rtcp::{self, ReportBlock, RtcpPacket};
use rtp::{RtpHeader, RtpPacket, TelephoneEvent};

use crate::*;

fn fmt(law: G711) -> Format {
    match law {
        G711::Pcmu => Format::Pcmu,
        G711::Pcma => Format::Pcma,
    }
}

const MS: Duration = Duration::from_millis(1);

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn cfg(law: G711, port: u16) -> LegConfig {
    LegConfig {
        payload_type: if law == G711::Pcmu { 0 } else { 8 },
        format: fmt(law),
        dtmf_pt: Some(101),
        remote: Some(addr(port)),
        remote_rtcp: None,
        symmetric: false,
        media_timeout: None,
        hold_timeout: None,
        ptime_ms: 20,
    }
}

#[derive(Debug)]
struct Sent {
    leg: LegId,
    rtcp: bool,
    dst: SocketAddr,
    pinned: bool,
    data: Vec<u8>,
}

impl Sent {
    fn rtp(&self) -> RtpPacket<'_> {
        RtpPacket::parse(&self.data).unwrap()
    }
}

fn tick(e: &mut Engine, now: Instant) -> Vec<Sent> {
    let mut out = Vec::new();
    e.tick(now, &mut |t: Transmit<'_>| {
        out.push(Sent {
            leg: t.leg,
            rtcp: t.rtcp,
            dst: t.dst,
            pinned: t.pinned,
            data: t.payload.to_vec(),
        })
    });
    out
}

fn rtp_in(e: &mut Engine, id: LegId, data: &[u8], src: SocketAddr, now: Instant) -> Vec<Sent> {
    let mut out = Vec::new();
    e.on_rtp(id, data, src, now, &mut |t: Transmit<'_>| {
        out.push(Sent {
            leg: t.leg,
            rtcp: t.rtcp,
            dst: t.dst,
            pinned: t.pinned,
            data: t.payload.to_vec(),
        })
    });
    out
}

fn packet(pt: u8, seq: u16, ts: u32, marker: bool, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0; 12 + payload.len()];
    RtpHeader {
        marker,
        payload_type: pt,
        sequence: seq,
        timestamp: ts,
        ssrc: 0xCAFE,
    }
    .write_with_payload(payload, &mut buf)
    .unwrap();
    buf
}

fn events(e: &mut Engine) -> Vec<MediaEvent> {
    std::iter::from_fn(|| e.poll_event()).collect()
}

fn ramp_prompt(samples: usize) -> Arc<Prompt> {
    let pcm: Vec<i16> = (0..samples)
        .map(|i| ((i * 97) % 16000) as i16 - 8000)
        .collect();
    Arc::new(Prompt::from_pcm("ramp", &pcm))
}

/// Checks packets form one contiguous stream; returns the payloads joined.
fn contiguous(sent: &[Sent], samples: u32) -> Vec<u8> {
    for w in sent.windows(2) {
        let (a, b) = (w[0].rtp(), w[1].rtp());
        assert_eq!(b.sequence(), a.sequence().wrapping_add(1));
        assert_eq!(b.timestamp(), a.timestamp().wrapping_add(samples));
        assert_eq!(a.ssrc(), b.ssrc());
    }
    sent.iter()
        .flat_map(|s| s.rtp().payload().to_vec())
        .collect()
}

#[test]
fn playback_is_50_packets_per_second_of_the_encoded_prompt() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(1);
    let leg = e.add_leg(cfg(G711::Pcma, 4000), t0);
    let prompt = ramp_prompt(8000);
    e.play(leg, prompt.clone(), false, true);
    let mut sent = Vec::new();
    for i in 0..60 {
        sent.extend(tick(&mut e, t0 + 20 * MS * i));
        if i < 49 {
            assert!(e.poll_event().is_none(), "done early at tick {i}");
        }
    }
    assert_eq!(sent.len(), 50);
    assert!(sent
        .iter()
        .all(|s| !s.rtcp && s.dst == addr(4000) && s.leg == leg));
    assert!(sent[0].rtp().marker() && !sent[1].rtp().marker());
    assert_eq!(sent[0].rtp().payload_type(), 8);
    assert_eq!(contiguous(&sent, 160), prompt.encoded(G711::Pcma));
    assert_eq!(events(&mut e), vec![MediaEvent::PlaybackDone { leg }]);
}

#[test]
fn generating_counts_legs_with_a_prompt_or_a_tone_until_they_stop() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(1);
    let (a, b) = (
        e.add_leg(cfg(G711::Pcmu, 4000), t0),
        e.add_leg(cfg(G711::Pcmu, 4002), t0),
    );
    assert!(!e.generating(), "new legs are idle");
    e.echo(a);
    assert!(!e.generating(), "echo relays what arrives");
    e.play(a, ramp_prompt(800), false, true);
    e.tone(b, ToneSpec::dial());
    e.tone(b, ToneSpec::busy());
    assert!(e.generating());
    for i in 0..10 {
        tick(&mut e, t0 + 20 * MS * i);
    }
    assert_eq!(events(&mut e), vec![MediaEvent::PlaybackDone { leg: a }]);
    assert!(e.generating(), "the tone goes on");
    e.bridge(a, b);
    assert!(!e.generating(), "bridged: both relay");
    e.tone(a, ToneSpec::ringback());
    e.remove_leg(a);
    assert!(!e.generating(), "a removed leg plays nothing");
    e.play(b, ramp_prompt(8000), true, true);
    e.silence(b);
    assert!(!e.generating());
}

#[test]
fn looped_playback_wraps_without_finishing() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(2);
    let leg = e.add_leg(cfg(G711::Pcmu, 4000), t0);
    let prompt = ramp_prompt(250);
    e.play(leg, prompt.clone(), true, true);
    let sent: Vec<_> = (0..4)
        .flat_map(|i| tick(&mut e, t0 + 20 * MS * i))
        .collect();
    let expect: Vec<u8> = prompt
        .encoded(G711::Pcmu)
        .iter()
        .copied()
        .cycle()
        .take(640)
        .collect();
    assert_eq!(contiguous(&sent, 160), expect);
    assert!(events(&mut e).is_empty());
}

/// A recorded leg playing a prompt records what it sent, the packets decoded: the µ-law
/// prompt's own linear audio copied by the tap (across the loop's wrap and, once a prompt that
/// does not loop ends, the silence of its last packet), the A-law packets decoded.
#[test]
fn a_recorded_leg_playing_a_prompt_records_the_packets_it_sent() {
    for (law, looped) in [(G711::Pcmu, true), (G711::Pcmu, false), (G711::Pcma, true)] {
        let t0 = Instant::now();
        let mut e = Engine::with_seed(3);
        let leg = e.add_leg(cfg(law, 4000), t0);
        let rec = e.record_call(leg, Mix::Stereo, t0).unwrap();
        e.play(leg, ramp_prompt(250), looped, true);
        let sent: Vec<_> = (0..50)
            .flat_map(|i| tick(&mut e, t0 + 20 * MS * i))
            .filter(|s| !s.rtcp)
            .collect();
        e.stop_call_recording(leg, t0 + 20 * MS * 50);
        let mut want = vec![0i16; 8000];
        let payload = contiguous(&sent, 160);
        assert_eq!(payload.len(), if looped { 8000 } else { 320 });
        law.decode(&payload, &mut want);
        let pcm: Vec<i16> = rec.blocks.try_iter().flatten().collect();
        assert_eq!(pcm.len(), 8000 * 2, "{law:?}");
        let (left, right): (Vec<i16>, Vec<i16>) = pcm.chunks(2).map(|s| (s[0], s[1])).unzip();
        assert!(left.iter().all(|&s| s == 0), "nothing was received");
        assert_eq!(right, want, "{law:?}, looped {looped}");
        assert!(rec.status.complete());
    }
}

/// Music on hold from a class of files: each track follows the last without an event, and the
/// list starts over after its last track, for as long as the leg plays it.
#[test]
fn a_playlist_plays_its_tracks_in_turn_without_finishing() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(2);
    let leg = e.add_leg(cfg(G711::Pcmu, 4000), t0);
    let track = |level: i16| Arc::new(Prompt::from_pcm("t", &[level; 320]));
    let (a, b) = (track(1000), track(-6000));
    let list = crate::Playlist::new(vec![a.clone(), b.clone()], false).unwrap();
    e.play_list(leg, Arc::new(list));
    assert!(e.generating());
    let sent: Vec<_> = (0..8)
        .flat_map(|i| tick(&mut e, t0 + 20 * MS * i))
        .collect();
    let (a, b) = (a.encoded(G711::Pcmu), b.encoded(G711::Pcmu));
    let expect = [a, b, a, b].concat();
    assert_eq!(contiguous(&sent, 160), expect);
    assert!(events(&mut e).is_empty(), "a playlist never ends");
    e.unbridge(leg);
    assert!(!e.generating(), "stopped by whatever plays next");
}

#[test]
fn late_ticks_catch_up_and_stalls_skip_ahead() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(3);
    let leg = e.add_leg(cfg(G711::Pcmu, 4000), t0);
    e.tone(leg, ToneSpec::dial());
    assert_eq!(tick(&mut e, t0).len(), 1);
    assert_eq!(
        tick(&mut e, t0 + 60 * MS).len(),
        3,
        "missed frames are emitted"
    );
    assert_eq!(e.stats(leg).unwrap().late_ticks, 1);
    let first = tick(&mut e, t0 + 80 * MS);
    // A one-second stall: five frames, then a jump that keeps the clock.
    let stalled = tick(&mut e, t0 + 1080 * MS);
    assert_eq!(stalled.len(), 5);
    let after = tick(&mut e, t0 + 1100 * MS);
    assert_eq!(after.len(), 1);
    let gap = after[0]
        .rtp()
        .timestamp()
        .wrapping_sub(first[0].rtp().timestamp());
    assert_eq!(gap, 1020 * 8);
}

/// One pass of `e` due on the grid at `due` and run at `now`: the RTP sent.
fn pass(e: &mut Engine, due: Instant, now: Instant) -> usize {
    let mut sent = 0;
    e.tick_phase(due, now, 0, 1, &mut |t: Transmit<'_>| {
        sent += usize::from(!t.rtcp);
    });
    sent
}

#[test]
fn a_late_pass_sends_what_was_due_on_its_grid_time_and_nothing_early() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(5);
    let leg = e.add_leg(cfg(G711::Pcmu, 4000), t0);
    e.tone(leg, ToneSpec::dial());
    // The first pass ran 4 ms late: the leg's frames still fall due on the grid (t0 + 20 k).
    assert_eq!(pass(&mut e, t0, t0 + 4 * MS), 1);
    // 12 ms late: frame 1 leaves late, and frame 2 (due at 40 ms) waits for its own pass;
    // scheduled on the run time it left now, 8 ms early (40 ≤ 32 + half a frame).
    assert_eq!(pass(&mut e, t0 + 20 * MS, t0 + 32 * MS), 1);
    assert_eq!(pass(&mut e, t0 + 40 * MS, t0 + 40 * MS), 1);
    // Passes that run back to back after a stall send a frame each.
    assert_eq!(pass(&mut e, t0 + 60 * MS, t0 + 95 * MS), 1);
    assert_eq!(pass(&mut e, t0 + 80 * MS, t0 + 95 * MS), 1);
    assert_eq!(pass(&mut e, t0 + 100 * MS, t0 + 100 * MS), 1);
    assert_eq!(e.stats(leg).unwrap().late_ticks, 0);
}

#[test]
fn jittery_ticks_keep_exact_rate_and_timestamps() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(4);
    let leg = e.add_leg(cfg(G711::Pcmu, 4000), t0);
    e.tone(leg, ToneSpec::busy());
    let mut rng = fastrand::Rng::with_seed(9);
    let mut sent = Vec::new();
    // Ten minutes of ticks, each up to 4 ms early or late (a quarter frame:
    // the first tick anchors the frame clock, the other quarter is slack).
    for i in 0..30_000u32 {
        let at = t0 + 20 * MS * i + Duration::from_micros(4_000)
            - Duration::from_micros(rng.u64(..8_000));
        sent.extend(tick(&mut e, at).into_iter().filter(|s| !s.rtcp));
    }
    assert!((29_999..=30_000).contains(&sent.len()), "{}", sent.len());
    contiguous(&sent, 160);
    assert_eq!(e.stats(leg).unwrap().late_ticks, 0);
}

#[test]
fn echo_returns_payload_on_our_own_stream() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(5);
    let leg = e.add_leg(cfg(G711::Pcmu, 4000), t0);
    e.echo(leg);
    let payload: Vec<u8> = (0..160).map(|i| i as u8).collect();
    let a = rtp_in(
        &mut e,
        leg,
        &packet(0, 10, 1000, false, &payload),
        addr(4000),
        t0,
    );
    let b = rtp_in(
        &mut e,
        leg,
        &packet(0, 11, 1160, false, &payload),
        addr(4000),
        t0 + 20 * MS,
    );
    assert_eq!((a.len(), b.len()), (1, 1));
    let (pa, pb) = (a[0].rtp(), b[0].rtp());
    assert_eq!(pa.payload(), &payload[..]);
    assert_ne!(pa.ssrc(), 0xCAFE);
    assert!(pa.marker());
    assert_eq!(a[0].dst, addr(4000));
    assert_eq!(pb.sequence(), pa.sequence().wrapping_add(1));
    assert_eq!(pb.timestamp(), pa.timestamp().wrapping_add(160));
}

#[test]
fn bridge_relays_both_ways_with_transcoding() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(6);
    let a = e.add_leg(cfg(G711::Pcmu, 4000), t0);
    let b = e.add_leg(cfg(G711::Pcma, 5000), t0);
    e.bridge(a, b);
    let ulaw: Vec<u8> = (0..160).map(|i| (i * 3) as u8).collect();
    let out = rtp_in(&mut e, a, &packet(0, 1, 0, false, &ulaw), addr(4000), t0);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].leg, out[0].dst), (b, addr(5000)));
    let p = out[0].rtp();
    assert_eq!(p.payload_type(), 8);
    let mut alaw = vec![0; 160];
    G711::Pcmu.transcode(G711::Pcma, &ulaw, &mut alaw);
    assert_eq!(p.payload(), &alaw[..]);
    // A lost packet on the way in stays a gap on the way out.
    let next = rtp_in(
        &mut e,
        a,
        &packet(0, 3, 320, false, &ulaw),
        addr(4000),
        t0 + 40 * MS,
    );
    assert_eq!(next[0].rtp().sequence(), p.sequence().wrapping_add(2));
    assert_eq!(next[0].rtp().timestamp(), p.timestamp().wrapping_add(320));
    assert_eq!(next[0].rtp().ssrc(), p.ssrc());

    let back = rtp_in(
        &mut e,
        b,
        &packet(8, 100, 9999, false, &alaw),
        addr(5000),
        t0,
    );
    assert_eq!((back[0].leg, back[0].dst), (a, addr(4000)));
    assert_eq!(back[0].rtp().payload_type(), 0);
    let mut ulaw_back = vec![0; 160];
    G711::Pcma.transcode(G711::Pcmu, &alaw, &mut ulaw_back);
    assert_eq!(back[0].rtp().payload(), &ulaw_back[..]);

    // Same codec: bytes pass through untouched.
    let c = e.add_leg(cfg(G711::Pcmu, 6000), t0);
    e.bridge(a, c);
    assert!(
        rtp_in(
            &mut e,
            b,
            &packet(8, 101, 10159, false, &alaw),
            addr(5000),
            t0
        )
        .is_empty(),
        "b was left idle"
    );
    let out = rtp_in(&mut e, a, &packet(0, 4, 480, false, &ulaw), addr(4000), t0);
    assert_eq!(out[0].rtp().payload(), &ulaw[..]);
    assert_eq!(out[0].leg, c);
}

#[test]
fn dtmf_is_relayed_with_the_peer_pt_and_detected_once() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(7);
    let a = e.add_leg(cfg(G711::Pcmu, 4000), t0);
    let b = e.add_leg(
        LegConfig {
            dtmf_pt: Some(96),
            ..cfg(G711::Pcmu, 5000)
        },
        t0,
    );
    e.bridge(a, b);
    let mut relayed = Vec::new();
    let seq = [
        (false, 160),
        (false, 160),
        (false, 480),
        (true, 800),
        (true, 800),
        (true, 800),
    ];
    for (i, (end, duration)) in seq.into_iter().enumerate() {
        let mut ev = [0u8; 4];
        TelephoneEvent {
            event: 5,
            end,
            volume: 10,
            duration,
        }
        .write(&mut ev)
        .unwrap();
        relayed.extend(rtp_in(
            &mut e,
            a,
            &packet(101, i as u16, 8000, i == 0, &ev),
            addr(4000),
            t0 + 20 * MS * i as u32,
        ));
    }
    assert_eq!(
        events(&mut e),
        vec![MediaEvent::Dtmf {
            leg: a,
            digit: '5',
            duration_ms: 100
        }]
    );
    assert_eq!(relayed.len(), 6);
    assert!(relayed
        .iter()
        .all(|s| s.rtp().payload_type() == 96 && s.leg == b));
    let ts = relayed[0].rtp().timestamp();
    assert!(
        relayed.iter().all(|s| s.rtp().timestamp() == ts),
        "events keep their start timestamp"
    );
    assert_eq!(
        TelephoneEvent::parse(relayed[5].rtp().payload())
            .unwrap()
            .duration,
        800
    );

    // A peer without telephone-event gets no events.
    let c = e.add_leg(
        LegConfig {
            dtmf_pt: None,
            ..cfg(G711::Pcmu, 6000)
        },
        t0,
    );
    e.bridge(a, c);
    let mut ev = [0u8; 4];
    TelephoneEvent {
        event: 1,
        end: true,
        volume: 10,
        duration: 400,
    }
    .write(&mut ev)
    .unwrap();
    assert!(rtp_in(&mut e, a, &packet(101, 9, 16000, true, &ev), addr(4000), t0).is_empty());
    assert_eq!(
        events(&mut e),
        vec![MediaEvent::Dtmf {
            leg: a,
            digit: '1',
            duration_ms: 50
        }]
    );
}

#[test]
fn media_timeout_fires_once_and_not_on_hold() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(8);
    let leg = e.add_leg(
        LegConfig {
            media_timeout: Some(Duration::from_secs(2)),
            ..cfg(G711::Pcmu, 4000)
        },
        t0,
    );
    let at = |e: &mut Engine, ms: u64| {
        tick(e, t0 + MS * ms as u32);
        events(e)
    };
    assert!(at(&mut e, 0).is_empty());
    assert!(at(&mut e, 1980).is_empty());
    assert_eq!(at(&mut e, 2000), vec![MediaEvent::MediaTimeout { leg }]);
    assert!(at(&mut e, 3000).is_empty(), "reported once");
    rtp_in(
        &mut e,
        leg,
        &packet(0, 1, 0, false, &[0xFF; 160]),
        addr(4000),
        t0 + 3100 * MS,
    );
    assert!(at(&mut e, 5000).is_empty());
    assert_eq!(
        at(&mut e, 5100),
        vec![MediaEvent::MediaTimeout { leg }],
        "re-armed by RTP"
    );

    let held = e.add_leg(
        LegConfig {
            media_timeout: Some(Duration::from_secs(2)),
            ..cfg(G711::Pcmu, 4000)
        },
        t0,
    );
    e.update_leg(
        held,
        LegUpdate {
            payload_type: 0,
            format: Format::Pcmu,
            dtmf_pt: None,
            remote: Some(addr(4000)),
            remote_rtcp: None,
            sends: true,
            receives: false,
            symmetric: false,
        },
    );
    for s in 0..10 {
        tick(&mut e, t0 + Duration::from_secs(6 + s));
    }
    assert!(!events(&mut e).contains(&MediaEvent::MediaTimeout { leg: held }));
}

#[test]
fn held_leg_times_out_unless_it_sends_rtcp() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(8);
    let held = LegConfig {
        media_timeout: Some(Duration::from_secs(2)),
        hold_timeout: Some(Duration::from_secs(30)),
        ..cfg(G711::Pcmu, 4000)
    };
    let silent = e.add_leg(held.clone(), t0);
    let reporting = e.add_leg(held, t0);
    let hold = LegUpdate {
        payload_type: 0,
        format: Format::Pcmu,
        dtmf_pt: None,
        remote: Some(addr(4000)),
        remote_rtcp: None,
        sends: true,
        receives: false,
        symmetric: false,
    };
    let mut buf = [0u8; 128];
    let n = rtcp::write_report(&mut buf, 0xCAFE, None, &[], b"far").unwrap();
    let rr = &buf[..n];
    // Held at 1 s; from then on only RTCP every 5 s on one leg, nothing on the other.
    tick(&mut e, t0);
    e.update_leg(silent, hold.clone());
    e.update_leg(reporting, hold);
    let mut fired = Vec::new();
    for ms in (1000..=60_000).step_by(20) {
        let now = t0 + MS * ms;
        if ms % 5000 == 0 {
            e.on_rtcp(reporting, rr, addr(4001), now);
        }
        tick(&mut e, now);
        fired.extend(events(&mut e).into_iter().map(|ev| (ms, ev)));
    }
    // The clock restarts at the first tick after the hold (1000 ms): 30 s later, once.
    assert_eq!(
        fired,
        vec![(31_000, MediaEvent::MediaTimeout { leg: silent })]
    );
}

/// A symmetric leg whose SDP gave port `port`, playing a dial tone.
fn symmetric_leg_playing_to(port: u16) -> (Instant, Engine, LegId) {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(9);
    let leg = e.add_leg(
        LegConfig {
            symmetric: true,
            ..cfg(G711::Pcmu, port)
        },
        t0,
    );
    e.tone(leg, ToneSpec::dial());
    (t0, e, leg)
}

#[test]
fn symmetric_leg_latches_to_the_packet_source() {
    let (t0, mut e, leg) = symmetric_leg_playing_to(4000);
    assert_eq!(tick(&mut e, t0)[0].dst, addr(4000));
    rtp_in(
        &mut e,
        leg,
        &packet(0, 1, 0, false, &[0xFF; 160]),
        addr(6000),
        t0 + 10 * MS,
    );
    assert_eq!(
        events(&mut e),
        vec![MediaEvent::RemoteLatched {
            leg,
            addr: addr(6000)
        }]
    );
    assert_eq!(tick(&mut e, t0 + 20 * MS)[0].dst, addr(6000));
    // Once latched, other sources are ignored.
    rtp_in(
        &mut e,
        leg,
        &packet(0, 2, 160, false, &[0xFF; 160]),
        addr(7000),
        t0 + 30 * MS,
    );
    assert_eq!(tick(&mut e, t0 + 40 * MS)[0].dst, addr(6000));
    assert_eq!(e.stats(leg).unwrap().rejected, 1);
    assert!(events(&mut e).is_empty());
}

/// RTP bleed: whoever sprays a switch's port range may reach a new leg before its far end and
/// latch it. The address the far end's SDP gave takes the leg back at its first packet, and the
/// intruder is ignored from then on.
#[test]
fn the_announced_address_takes_its_leg_back_from_a_source_that_latched_first() {
    let (t0, mut e, leg) = symmetric_leg_playing_to(4000);
    let from = |e: &mut Engine, src: u16, seq: u16, at: Duration| {
        let p = packet(0, seq, 160 * u32::from(seq), false, &[0xFF; 160]);
        rtp_in(e, leg, &p, addr(src), t0 + at);
    };
    from(&mut e, 6666, 1, 5 * MS);
    let sent = &tick(&mut e, t0 + 10 * MS)[0];
    assert_eq!(sent.dst, addr(6666), "latched first");
    assert!(
        !sent.pinned,
        "the socket stays open to the announced address"
    );
    from(&mut e, 4000, 2, 15 * MS);
    let sent = &tick(&mut e, t0 + 20 * MS)[0];
    assert_eq!(sent.dst, addr(4000), "taken back");
    assert!(sent.pinned);
    from(&mut e, 6666, 3, 25 * MS);
    assert_eq!(tick(&mut e, t0 + 40 * MS)[0].dst, addr(4000));
    assert_eq!(
        e.stats(leg).unwrap().rejected,
        1,
        "the intruder, once latched out"
    );
    assert_eq!(
        events(&mut e),
        [6666, 4000].map(|p| MediaEvent::RemoteLatched { leg, addr: addr(p) })
    );
}

/// A `Cursor` the test can still read after handing it to the engine.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Cursor<Vec<u8>>>>);

impl Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().write(b)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Seek for Shared {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        self.0.lock().unwrap().seek(pos)
    }
}

#[test]
fn recording_fills_gaps_by_timestamp() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(10);
    let leg = e.add_leg(cfg(G711::Pcma, 4000), t0);
    let sink = Shared::default();
    e.record(leg, Box::new(sink.clone())).unwrap();
    let frame = |v: i16| vec![G711::Pcma.encode_sample(v); 160];
    // Packet 2 (ts 320) is lost; packet 1 arrives twice, late the second time.
    for (seq, ts, v) in [
        (0u16, 0u32, 1000),
        (1, 160, 2000),
        (3, 480, 3000),
        (1, 160, 2000),
    ] {
        rtp_in(
            &mut e,
            leg,
            &packet(8, seq, 5000 + ts, false, &frame(v)),
            addr(4000),
            t0,
        );
    }
    assert_eq!(e.silence(leg).unwrap().unwrap(), 640);
    let bytes = sink.0.lock().unwrap().get_ref().clone();
    let mut reader = hound::WavReader::new(&bytes[..]).unwrap();
    assert_eq!(reader.spec().sample_rate, 8000);
    let samples: Vec<i16> = reader.samples::<i16>().map(Result::unwrap).collect();
    let level = |v: i16| G711::Pcma.decode_sample(G711::Pcma.encode_sample(v));
    assert_eq!(samples.len(), 640);
    assert!(samples[..160].iter().all(|&s| s == level(1000)));
    assert!(samples[160..320].iter().all(|&s| s == level(2000)));
    assert!(
        samples[320..480].iter().all(|&s| s == 0),
        "lost packet became silence"
    );
    assert!(samples[480..].iter().all(|&s| s == level(3000)));
}

/// 1 s of speech, a 0.5 s pause (kept: speech follows), 1 s of speech, then quiet: the
/// recording ends after 2 s of quiet, and the file holds the speech and the pause only.
#[test]
fn recording_ends_on_silence_and_leaves_it_out() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(12);
    let leg = e.add_leg(cfg(G711::Pcmu, 4000), t0);
    let sink = Shared::default();
    let end = SilenceEnd {
        level: 200,
        after: Duration::from_secs(2),
    };
    e.record_until(leg, Box::new(sink.clone()), Some(end))
        .unwrap();
    let loud = vec![G711::Pcmu.encode_sample(3000); 160];
    let quiet = vec![G711::Pcmu.encode_sample(40); 160];
    // Packets of 20 ms: 50 loud, 25 quiet, 50 loud, then quiet ones until it ends.
    let plan = (0..50)
        .map(|_| loud.clone())
        .chain((0..25).map(|_| quiet.clone()))
        .chain((0..50).map(|_| loud.clone()))
        .chain((0..200).map(|_| quiet.clone()));
    let mut sent = 0;
    for (seq, payload) in plan.enumerate() {
        let now = t0 + 20 * MS * seq as u32;
        let ts = 160 * seq as u32;
        rtp_in(
            &mut e,
            leg,
            &packet(0, seq as u16, ts, false, &payload),
            addr(4000),
            now,
        );
        sent += 1;
        if events(&mut e)
            .iter()
            .any(|ev| matches!(ev, MediaEvent::RecordingSilent { leg: l } if *l == leg))
        {
            break;
        }
    }
    assert_eq!(sent, 125 + 100, "ended on the 100th quiet packet (2 s)");
    assert!(
        e.silence(leg).is_none(),
        "the recording was finished already"
    );
    let bytes = sink.0.lock().unwrap().get_ref().clone();
    let samples: Vec<i16> = hound::WavReader::new(&bytes[..])
        .unwrap()
        .samples::<i16>()
        .map(Result::unwrap)
        .collect();
    assert_eq!(samples.len(), 125 * 160, "the trailing silence is left out");
    assert!(samples[50 * 160..75 * 160].iter().all(|s| s.abs() < 100));
    assert!(samples[124 * 160..].iter().all(|s| s.abs() > 2000));
}

#[test]
fn rtcp_reports_and_round_trip_time() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(11);
    let leg = e.add_leg(cfg(G711::Pcmu, 4000), t0);
    e.tone(leg, ToneSpec::ringback());
    let mut rtp_sent = 0;
    let mut reports = Vec::new();
    for i in 0..400u32 {
        let now = t0 + 20 * MS * i;
        if i % 4 != 3 {
            // The far end sends too (losing every fourth), so our report has a block about it.
            rtp_in(
                &mut e,
                leg,
                &packet(0, i as u16, 160 * i, false, &[0xFF; 160]),
                addr(4000),
                now,
            );
        }
        for s in tick(&mut e, now) {
            if s.rtcp {
                reports.push((now, rtp_sent, s));
            } else {
                rtp_sent += 1;
            }
        }
    }
    assert!(
        !reports.is_empty() && reports[0].0 >= t0 + Duration::from_millis(1250),
        "first report too early"
    );
    assert!(
        reports[0].0 <= t0 + Duration::from_millis(3750),
        "first report after half an interval (RFC 3550 §6.2)"
    );
    let (sr_at, sent_before, sr) = &reports[0];
    assert_eq!(sr.dst, addr(4001));
    let pkts: Vec<_> = rtcp::parse_compound(&sr.data)
        .collect::<Result<_, _>>()
        .unwrap();
    let RtcpPacket::SenderReport {
        ssrc,
        info,
        mut blocks,
    } = pkts[0]
    else {
        panic!("not an SR: {:?}", pkts[0])
    };
    assert_eq!(info.packet_count, *sent_before);
    let block = blocks.next().expect("report block about the far end");
    assert_eq!(block.ssrc, 0xCAFE);
    assert!(
        (56..=72).contains(&block.fraction_lost),
        "a quarter missing: {}",
        block.fraction_lost
    );
    assert!(matches!(pkts[1], RtcpPacket::Sdes(_)));

    // The far end's RR: it held our SR 100 ms and answers 300 ms after we sent it.
    let rb = ReportBlock {
        ssrc,
        fraction_lost: 12,
        cumulative_lost: 3,
        lsr: rtcp::ntp_short(info.ntp),
        dlsr: rtcp::duration_to_short(100 * MS),
        ..Default::default()
    };
    let mut buf = [0u8; 128];
    let n = rtcp::write_report(&mut buf, 0xCAFE, None, &[rb], b"far").unwrap();
    e.on_rtcp(leg, &buf[..n], addr(4001), *sr_at + 300 * MS);
    let stats = e.stats(leg).unwrap();
    let rtt = stats.rtt.unwrap();
    assert!(rtt.abs_diff(200 * MS) < MS, "rtt {rtt:?}");
    assert_eq!(
        (stats.remote_fraction_lost, stats.remote_packets_lost),
        (Some(12), Some(3))
    );
    assert!(stats.packets_lost > 0 && stats.packets_received == 300);
}

#[test]
fn packets_the_shell_could_not_send_are_send_errors_not_sent() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(13);
    let a = e.add_leg(cfg(G711::Pcmu, 4000), t0);
    let b = e.add_leg(cfg(G711::Pcmu, 5000), t0);
    e.bridge(a, b);
    for seq in 1..=3 {
        let p = packet(0, seq, 160 * u32::from(seq), false, &[0xFF; 160]);
        rtp_in(&mut e, a, &p, addr(4000), t0);
    }
    assert_eq!(e.stats(b).unwrap().packets_sent, 3);
    e.send_failed(b, 2);
    let s = e.stats(b).unwrap();
    assert_eq!((s.packets_sent, s.send_errors), (1, 2));
    e.send_failed(b, 5);
    let s = e.stats(b).unwrap();
    assert_eq!(
        (s.packets_sent, s.send_errors),
        (0, 3),
        "no more than were sent"
    );
}

#[test]
fn remove_leg_returns_stats_and_idles_the_peer() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(12);
    let a = e.add_leg(cfg(G711::Pcmu, 4000), t0);
    let b = e.add_leg(cfg(G711::Pcma, 5000), t0);
    e.bridge(a, b);
    rtp_in(
        &mut e,
        a,
        &packet(0, 1, 0, false, &[0xFF; 160]),
        addr(4000),
        t0,
    );
    let stats = e.remove_leg(a).unwrap();
    assert_eq!(
        (stats.codec, stats.packets_received, stats.bytes_received),
        ("PCMU", 1, 160)
    );
    assert_eq!(e.stats(b).unwrap().packets_sent, 1);
    assert!(rtp_in(
        &mut e,
        b,
        &packet(8, 1, 0, false, &[0xD5; 160]),
        addr(5000),
        t0
    )
    .is_empty());
    assert!(e.remove_leg(a).is_none());
}

#[test]
fn hostile_datagrams_never_panic() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(13);
    let a = e.add_leg(cfg(G711::Pcmu, 4000), t0);
    let b = e.add_leg(
        LegConfig {
            symmetric: true,
            ..cfg(G711::Pcma, 5000)
        },
        t0,
    );
    let c = e.add_leg(cfg(G711::Pcmu, 6000), t0);
    e.bridge(a, b);
    e.echo(c);
    e.record(c, Box::new(Cursor::new(Vec::new()))).unwrap();
    let mut rng = fastrand::Rng::with_seed(14);
    let mut buf = [0u8; 1600];
    for i in 0..50_000u32 {
        let len = rng.usize(..buf.len());
        rng.fill(&mut buf[..len]);
        if len > 1 && rng.bool() {
            buf[0] = 0x80 | (buf[0] & 0x3F);
            buf[1] = [0, 8, 101, 200, 201, 202, 203][rng.usize(..7)] | (buf[1] & 0x80);
        }
        let leg = [a, b, c, LegId::from_index(99)][rng.usize(..4)];
        let now = t0 + MS * i;
        e.on_rtp(leg, &buf[..len], addr(4000), now, &mut |t: Transmit<'_>| {
            assert!(t.payload.len() <= 1500)
        });
        e.on_rtcp(leg, &buf[..len], addr(4001), now);
        if i % 20 == 0 {
            e.tick(now, &mut |_: Transmit<'_>| {});
        }
    }
    let _ = events(&mut e);
}

fn cfg_of(format: Format, pt: u8, port: u16) -> LegConfig {
    LegConfig {
        payload_type: pt,
        format,
        ..cfg(G711::Pcmu, port)
    }
}

/// A 440 Hz tone as a prompt.
fn tone_prompt(samples: usize) -> Arc<Prompt> {
    let pcm: Vec<i16> = (0..samples)
        .map(|i| (8000.0 * (i as f64 * 440.0 * std::f64::consts::TAU / 8000.0).sin()) as i16)
        .collect();
    Arc::new(Prompt::from_pcm("tone", &pcm))
}

/// Goertzel power of `freq` over the energy of `x` (1.0 for a pure tone).
fn purity(x: &[i16], rate: f64, freq: f64) -> f64 {
    let w = std::f64::consts::TAU * freq / rate;
    let (mut s1, mut s2) = (0.0, 0.0);
    for &v in x {
        let s = f64::from(v) + 2.0 * w.cos() * s1 - s2;
        s2 = s1;
        s1 = s;
    }
    let power = (s1 * s1 + s2 * s2 - 2.0 * w.cos() * s1 * s2) / (x.len() as f64).powi(2);
    let energy: f64 = x.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / x.len() as f64;
    4.0 * power / (2.0 * energy.max(1e-9))
}

#[test]
fn playback_encodes_to_the_leg_format() {
    for (format, pt, bytes) in [
        (Format::Gsm, 3, 33),
        (Format::G722, 9, 160),
        (Format::G726, 96, 80),
        (Format::Speex, 97, 0),
        (Format::Opus, 98, 0),
        (Format::L16, 99, 320),
    ] {
        let t0 = Instant::now();
        let mut e = Engine::with_seed(3);
        let leg = e.add_leg(cfg_of(format, pt, 4000), t0);
        e.play(leg, tone_prompt(8000), false, true);
        let mut sent = Vec::new();
        for i in 0..60 {
            sent.extend(tick(&mut e, t0 + 20 * MS * i));
        }
        assert_eq!(sent.len(), 50, "{format}");
        assert_eq!(
            events(&mut e),
            vec![MediaEvent::PlaybackDone { leg }],
            "{format}"
        );
        contiguous(&sent, format.clock_units_in(20));
        let mut dec = format.decoder();
        let mut pcm = Vec::new();
        let mut buf = vec![0; 5760];
        for s in &sent {
            let p = s.rtp();
            assert_eq!(p.payload_type(), pt);
            if bytes > 0 {
                assert_eq!(p.payload().len(), bytes, "{format}");
            }
            let n = dec.decode(p.payload(), &mut buf).unwrap();
            assert_eq!(n, format.samples_in(20), "{format}");
            pcm.extend_from_slice(&buf[..n]);
        }
        let rate = f64::from(format.pcm_rate());
        let q = purity(&pcm[pcm.len() / 4..], rate, 440.0);
        assert!(q > 0.8, "{format}: 440 Hz purity {q:.2}");
        assert_eq!(e.stats(leg).unwrap().codec, format.encoding_name());
    }
}

#[test]
fn echo_of_a_coded_format_is_unchanged() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(4);
    let leg = e.add_leg(cfg_of(Format::Opus, 111, 4000), t0);
    e.echo(leg);
    let payload: Vec<u8> = (0..57).collect();
    let out = rtp_in(
        &mut e,
        leg,
        &packet(111, 9, 960, false, &payload),
        addr(4000),
        t0,
    );
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].rtp().payload(), &payload[..]);
    assert_eq!(out[0].rtp().payload_type(), 111);
}

#[test]
fn bridge_translates_between_formats() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(5);
    let a = e.add_leg(cfg(G711::Pcmu, 4000), t0);
    let b = e.add_leg(cfg_of(Format::Gsm, 3, 5000), t0);
    let c = e.add_leg(cfg_of(Format::Opus, 100, 6000), t0);
    e.bridge(a, b);
    let tone: Vec<i16> = (0..8000)
        .map(|i| (8000.0 * (i as f64 * 440.0 * std::f64::consts::TAU / 8000.0).sin()) as i16)
        .collect();
    let mut gsm = Vec::new();
    for (i, f) in tone.chunks(160).enumerate() {
        let mut ulaw = vec![0; 160];
        G711::Pcmu.encode(f, &mut ulaw);
        let at = t0 + 20 * MS * i as u32;
        gsm.extend(rtp_in(
            &mut e,
            a,
            &packet(0, i as u16, 160 * i as u32, false, &ulaw),
            addr(4000),
            at,
        ));
    }
    assert_eq!(gsm.len(), 50);
    assert!(gsm
        .iter()
        .all(|s| s.dst == addr(5000) && s.rtp().payload().len() == 33));
    contiguous(&gsm, 160);
    let mut dec = Format::Gsm.decoder();
    let mut pcm = Vec::new();
    let mut buf = vec![0; 160];
    for s in &gsm {
        let n = dec.decode(s.rtp().payload(), &mut buf).unwrap();
        pcm.extend_from_slice(&buf[..n]);
    }
    let q = purity(&pcm[2000..], 8000.0, 440.0);
    assert!(q > 0.8, "PCMU→GSM 440 Hz purity {q:.2}");

    // Re-bridged to an Opus leg: GSM packets come out as 20 ms Opus on a 48 kHz clock.
    e.bridge(b, c);
    let mut enc = Format::Gsm.encoder();
    let mut opus = Vec::new();
    for (i, f) in tone.chunks(160).enumerate() {
        let mut frame = [0u8; 33];
        enc.encode(f, &mut frame).unwrap();
        let at = t0 + 20 * MS * (50 + i as u32);
        opus.extend(rtp_in(
            &mut e,
            b,
            &packet(3, i as u16, 160 * i as u32, false, &frame),
            addr(5000),
            at,
        ));
    }
    assert!(opus.len() >= 48, "{} Opus packets", opus.len());
    contiguous(&opus, 960);
    assert!(opus
        .iter()
        .all(|s| s.rtp().payload_type() == 100 && s.dst == addr(6000)));
    // Unbridged, the leg passes nothing on.
    e.unbridge(b);
    assert!(rtp_in(
        &mut e,
        b,
        &packet(3, 99, 0, false, &[0xD0; 33]),
        addr(5000),
        t0
    )
    .is_empty());
}

#[test]
fn recording_decodes_any_format_to_8khz() {
    for format in [Format::Gsm, Format::G722, Format::Opus] {
        let t0 = Instant::now();
        let mut e = Engine::with_seed(11);
        let leg = e.add_leg(cfg_of(format, 96, 4000), t0);
        let sink = Shared::default();
        e.record(leg, Box::new(sink.clone())).unwrap();
        let rate = format.pcm_rate() as f64;
        let tone: Vec<i16> = (0..format.pcm_rate() as usize)
            .map(|i| (8000.0 * (i as f64 * 440.0 * std::f64::consts::TAU / rate).sin()) as i16)
            .collect();
        let mut enc = format.encoder();
        let units = format.clock_units_in(20);
        for (i, f) in tone.chunks(format.samples_in(20)).enumerate() {
            let mut out = vec![0; 1500];
            let n = enc.encode(f, &mut out).unwrap();
            // Packet 10 is lost.
            if i != 10 {
                let p = packet(96, i as u16, units * i as u32, false, &out[..n]);
                rtp_in(&mut e, leg, &p, addr(4000), t0);
            }
        }
        let n = e.silence(leg).unwrap().unwrap();
        assert!((7900..=8000).contains(&n), "{format}: {n} samples for 1 s");
        let bytes = sink.0.lock().unwrap().get_ref().clone();
        let mut reader = hound::WavReader::new(&bytes[..]).unwrap();
        assert_eq!(reader.spec().sample_rate, 8000);
        let samples: Vec<i16> = reader.samples::<i16>().map(Result::unwrap).collect();
        let q = purity(&samples[2000..], 8000.0, 440.0);
        assert!(q > 0.7, "{format}: recording's 440 Hz purity {q:.2}");
    }
}

#[test]
fn legs_sharing_a_socket_are_told_apart_by_their_far_ends_address() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(1);
    let a = e.add_leg(cfg(G711::Pcmu, 4000), t0);
    let b = e.add_leg(cfg(G711::Pcmu, 4002), t0);
    let latching = e.add_leg(
        LegConfig {
            remote: None,
            symmetric: true,
            ..cfg(G711::Pcmu, 0)
        },
        t0,
    );
    assert_eq!(e.rtp_leg_from(addr(4000)), Some(a));
    assert_eq!(e.rtp_leg_from(addr(4002)), Some(b));
    assert_eq!(e.rtcp_leg_from(addr(4003)), Some(b), "RTCP from RTP + 1");
    assert_eq!(e.rtp_leg_from(addr(4004)), None, "nobody's address");
    assert_eq!(e.rtcp_leg_from(addr(0)), None);

    // A leg that latches to its first packet's source is found there from then on.
    rtp_in(
        &mut e,
        latching,
        &packet(0, 1, 0, false, &[0xff; 160]),
        addr(5000),
        t0,
    );
    assert_eq!(e.rtp_leg_from(addr(5000)), Some(latching));

    // A re-INVITE moves the far end; the old address no longer reaches the leg.
    e.update_leg(
        a,
        LegUpdate {
            payload_type: 0,
            format: Format::Pcmu,
            dtmf_pt: Some(101),
            remote: Some(addr(4010)),
            remote_rtcp: None,
            sends: true,
            receives: true,
            symmetric: false,
        },
    );
    assert_eq!(e.rtp_leg_from(addr(4000)), None);
    assert_eq!(e.rtp_leg_from(addr(4010)), Some(a));

    // A second leg with the same far end leaves the first its entry, and ending takes only a
    // leg's own entry.
    let repeated = e.add_leg(cfg(G711::Pcmu, 4002), t0);
    assert_eq!(
        e.rtp_leg_from(addr(4002)),
        Some(b),
        "the first leg keeps it"
    );
    e.remove_leg(repeated);
    assert_eq!(e.rtp_leg_from(addr(4002)), Some(b));
    e.remove_leg(b);
    assert_eq!(e.rtp_leg_from(addr(4002)), None);
}

#[test]
fn a_removed_legs_index_is_reused_and_prefetching_any_index_is_harmless() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(1);
    let a = e.add_leg(cfg(G711::Pcmu, 4000), t0);
    let b = e.add_leg(cfg(G711::Pcmu, 4002), t0);
    let c = e.add_leg(cfg(G711::Pcmu, 4004), t0);
    assert!(e.remove_leg(b).is_some());
    assert!(e.remove_leg(b).is_none(), "removed once");
    assert!(e.stats(b).is_none());
    for id in [a, b, c, LegId::from_index(1 << 20)] {
        e.prefetch(id);
    }
    let d = e.add_leg(cfg(G711::Pcmu, 4006), t0);
    assert_eq!(d, b, "the freed index is taken again");
    assert_eq!(e.rtp_leg_from(addr(4006)), Some(d));
    // Bridged with the later leg first, each side relays to the other.
    e.bridge(c, a);
    let frame = packet(0, 1, 0, false, &[0x55; 160]);
    assert_eq!(rtp_in(&mut e, c, &frame, addr(4004), t0)[0].dst, addr(4000));
    assert_eq!(rtp_in(&mut e, a, &frame, addr(4000), t0)[0].dst, addr(4004));
}

mod digits;
mod frames;
mod srtp_legs;

/// Three legs in a room, two of them speaking: the engine mixes on its ticks and each leg gets
/// the others' voices in its own law, never its own; a leg started on something else leaves.
#[test]
fn room_members_hear_the_others_in_their_own_format() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(7);
    let legs = [
        e.add_leg(cfg(G711::Pcmu, 4000), t0),
        e.add_leg(cfg(G711::Pcmu, 4002), t0),
        e.add_leg(cfg(G711::Pcma, 4004), t0),
    ];
    let room = e.add_room(8000, 3);
    for &l in &legs {
        e.join_room(l, room);
    }
    let says = [1000i16, 0, 3000];
    let mut last = [0i16; 3];
    for n in 0..10u16 {
        let now = t0 + MS * 20 * u32::from(n);
        for (i, &l) in legs.iter().enumerate() {
            let law = if i == 2 { G711::Pcma } else { G711::Pcmu };
            let mut body = [0u8; 160];
            law.encode(&[says[i]; 160], &mut body);
            let pt = if i == 2 { 8 } else { 0 };
            let data = packet(pt, n, u32::from(n) * 160, n == 0, &body);
            assert!(rtp_in(&mut e, l, &data, addr(4000 + 2 * i as u16), now).is_empty());
        }
        for s in tick(&mut e, now).iter().filter(|s| !s.rtcp) {
            let i = legs.iter().position(|&l| l == s.leg).unwrap();
            let law = if i == 2 { G711::Pcma } else { G711::Pcmu };
            assert_eq!(s.dst, addr(4000 + 2 * i as u16));
            let mut pcm = [0i16; 160];
            law.decode(s.rtp().payload(), &mut pcm);
            last[i] = pcm[80];
        }
    }
    let near = |got: i16, want: i16| (i32::from(got) - i32::from(want)).abs() <= want as i32 / 16;
    assert!(
        near(last[0], 3000) && near(last[1], 4000) && near(last[2], 1000),
        "{last:?}"
    );
    assert!(e.generating(), "a room mixes on the ticks");
    e.echo(legs[0]);
    let now = t0 + MS * 200;
    let sent = tick(&mut e, now);
    assert!(
        sent.iter().all(|s| s.rtcp || s.leg != legs[0]),
        "echo alone now"
    );
    e.remove_room(room);
    assert!(!e.generating());
    assert!(tick(&mut e, now + MS * 20).iter().all(|s| s.rtcp));
}
