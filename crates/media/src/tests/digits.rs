//! Digits across a bridge: heard as tones, as RFC 4733 events or from signalling, and sent on
//! in the form the other leg takes.

use super::*;
use crate::dtmf_detect::{frequencies, ToneDetector};

/// A leg without telephone-event.
fn plain(port: u16) -> LegConfig {
    LegConfig {
        dtmf_pt: None,
        ..cfg(G711::Pcmu, port)
    }
}

/// 20 ms µ-law packets: 200 ms of silence, `digit`'s tones for `ms`, 200 ms of silence.
fn tone_packets(digit: char, ms: usize) -> Vec<Vec<u8>> {
    let (r, c) = frequencies(digit).unwrap();
    let amp = 22_300.0 * 10f32.powf(-10.0 / 20.0);
    let mut pcm = vec![0i16; 1600];
    pcm.extend((0..ms * 8).map(|n| {
        let t = n as f32 / 8000.0;
        let w = 2.0 * std::f32::consts::PI * t;
        (amp * ((w * f32::from(r)).sin() + (w * f32::from(c)).sin())) as i16
    }));
    pcm.extend([0i16; 1600]);
    pcm.chunks(160)
        .map(|c| c.iter().map(|&s| G711::Pcmu.encode_sample(s)).collect())
        .collect()
}

/// Sends `packets` into leg `id` 20 ms apart from `t0`; what the engine sent.
fn feed(e: &mut Engine, id: LegId, packets: &[Vec<u8>], t0: Instant) -> Vec<Sent> {
    let mut out = Vec::new();
    for (i, p) in packets.iter().enumerate() {
        let (seq, ts) = (i as u16, 160 * i as u32);
        let at = t0 + 20 * MS * i as u32;
        out.extend(rtp_in(e, id, &packet(0, seq, ts, false, p), addr(4000), at));
    }
    out
}

/// The RFC 4733 packets among `sent`: (event, end, duration).
fn telephone_events(sent: &[Sent]) -> Vec<(u8, bool, u16)> {
    sent.iter()
        .filter(|s| s.rtp().payload_type() == 101)
        .map(|s| {
            let ev = TelephoneEvent::parse(s.rtp().payload()).unwrap();
            (ev.event, ev.end, ev.duration)
        })
        .collect()
}

/// The digits a detector hears in the µ-law audio among `sent`.
fn heard_in_audio(sent: &[Sent]) -> String {
    let mut det = ToneDetector::default();
    let mut found = String::new();
    for s in sent.iter().filter(|s| s.rtp().payload_type() == 0) {
        let pcm = s
            .rtp()
            .payload()
            .iter()
            .map(|&b| G711::Pcmu.decode_sample(b));
        det.push(pcm, |d| found.push(d.digit));
    }
    found
}

#[test]
fn tones_heard_on_a_leg_are_reported_and_sent_to_the_peer_as_events() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(1);
    let a = e.add_leg(plain(4000), t0);
    let b = e.add_leg(cfg(G711::Pcmu, 5000), t0);
    e.bridge(a, b);
    let sent = feed(&mut e, a, &tone_packets('7', 160), t0);
    let evs = events(&mut e);
    assert_eq!(evs.len(), 1, "{evs:?}");
    let MediaEvent::Dtmf {
        leg,
        digit,
        duration_ms,
    } = evs[0]
    else {
        panic!("{evs:?}");
    };
    assert_eq!((leg, digit), (a, '7'));
    assert!(
        (140..=180).contains(&duration_ms),
        "{duration_ms} ms of 160"
    );
    let tel = telephone_events(&sent);
    assert_eq!(tel.len(), 4, "a start and three ends: {tel:?}");
    let units = (duration_ms * 8) as u16;
    assert_eq!(
        tel,
        [
            (7, false, 160),
            (7, true, units),
            (7, true, units),
            (7, true, units)
        ]
    );
    // The audio goes on as it is.
    assert_eq!(heard_in_audio(&sent), "7");
}

#[test]
fn a_leg_without_telephone_event_is_listened_to_only_when_its_digits_are_read() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(3);
    // An echo, and a bridge to a peer that takes no digits either: nobody reads them.
    let echo = e.add_leg(plain(4000), t0);
    e.echo(echo);
    let (a, b) = (e.add_leg(plain(5000), t0), e.add_leg(plain(6000), t0));
    e.bridge(a, b);
    for leg in [echo, a] {
        feed(&mut e, leg, &tone_packets('5', 160), t0);
        assert_eq!(events(&mut e), [], "no detector on {leg:?}");
    }
    e.read_digits(echo);
    feed(&mut e, echo, &tone_packets('5', 160), t0 + 2000 * MS);
    assert!(matches!(
        events(&mut e)[..],
        [MediaEvent::Dtmf { digit: '5', .. }]
    ));
}

#[test]
fn a_leg_with_telephone_event_is_listened_to_only_in_inband_mode() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(2);
    let a = e.add_leg(cfg(G711::Pcmu, 4000), t0);
    let b = e.add_leg(cfg(G711::Pcmu, 5000), t0);
    e.bridge(a, b);
    let sent = feed(&mut e, a, &tone_packets('7', 160), t0);
    assert_eq!(events(&mut e), []);
    assert_eq!(telephone_events(&sent), []);
    e.set_dtmf_mode(DtmfMode::Inband);
    let c = e.add_leg(cfg(G711::Pcmu, 6000), t0);
    feed(&mut e, c, &tone_packets('7', 160), t0);
    assert!(matches!(
        events(&mut e)[..],
        [MediaEvent::Dtmf { digit: '7', .. }]
    ));
}

#[test]
fn events_become_tones_for_a_peer_without_telephone_event() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(3);
    let a = e.add_leg(cfg(G711::Pcmu, 4000), t0);
    let b = e.add_leg(plain(5000), t0);
    e.bridge(a, b);
    let mut sent = Vec::new();
    for (i, (end, duration)) in [(false, 160), (true, 800), (true, 800)]
        .into_iter()
        .enumerate()
    {
        let mut ev = [0u8; 4];
        let event = TelephoneEvent {
            event: 11,
            end,
            volume: 10,
            duration,
        };
        event.write(&mut ev).unwrap();
        let pkt = packet(101, i as u16, 0, i == 0, &ev);
        sent.extend(rtp_in(&mut e, a, &pkt, addr(4000), t0 + 20 * MS * i as u32));
    }
    assert!(matches!(
        events(&mut e)[..],
        [MediaEvent::Dtmf { digit: '#', .. }]
    ));
    assert_eq!(telephone_events(&sent), [], "b took no telephone-event");
    // The silence a goes on sending carries the tones to b.
    let silence = vec![vec![G711::Pcmu.silence(); 160]; 20];
    let audio = feed(&mut e, a, &silence, t0 + 100 * MS);
    assert_eq!(heard_in_audio(&audio), "#");
}

#[test]
fn a_signalled_digit_goes_out_as_events_or_as_tones() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(4);
    let a = e.add_leg(plain(4000), t0);
    let b = e.add_leg(cfg(G711::Pcmu, 5000), t0);
    e.bridge(a, b);
    let mut sent = Vec::new();
    e.send_digit(b, '9', 160, t0, &mut |t: Transmit<'_>| {
        sent.push(Sent {
            leg: t.leg,
            rtcp: t.rtcp,
            dst: t.dst,
            pinned: t.pinned,
            data: t.payload.to_vec(),
        })
    });
    assert_eq!(
        telephone_events(&sent),
        [
            (9, false, 160),
            (9, true, 1280),
            (9, true, 1280),
            (9, true, 1280)
        ],
        "b takes RFC 4733"
    );
    assert!(sent.iter().all(|s| s.leg == b));
    e.send_digit(a, '9', 160, t0, &mut |_: Transmit<'_>| {
        panic!("a takes tones")
    });
    let silence = vec![vec![G711::Pcmu.silence(); 160]; 20];
    let audio = feed(&mut e, b, &silence, t0);
    assert_eq!(heard_in_audio(&audio), "9");
}

#[test]
fn in_info_mode_no_digit_is_regenerated_or_relayed_in_the_media() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(5);
    e.set_dtmf_mode(DtmfMode::Info);
    let a = e.add_leg(plain(4000), t0);
    let b = e.add_leg(cfg(G711::Pcmu, 5000), t0);
    e.bridge(a, b);
    let sent = feed(&mut e, a, &tone_packets('3', 160), t0);
    assert!(matches!(
        events(&mut e)[..],
        [MediaEvent::Dtmf { digit: '3', .. }]
    ));
    assert_eq!(telephone_events(&sent), []);
    let mut ev = [0u8; 4];
    let end = TelephoneEvent {
        event: 3,
        end: true,
        volume: 10,
        duration: 800,
    };
    end.write(&mut ev).unwrap();
    let sent = rtp_in(&mut e, b, &packet(101, 1, 0, true, &ev), addr(5000), t0);
    assert!(matches!(
        events(&mut e)[..],
        [MediaEvent::Dtmf { digit: '3', .. }]
    ));
    assert_eq!(sent.len(), 0, "the event is not relayed: {sent:?}");
    // Nor is a digit from a frame leg (IAX2) sent on as events.
    let f = e.add_frame_leg(Format::Pcmu, None, t0);
    let r = e.add_leg(cfg(G711::Pcmu, 6000), t0);
    e.bridge(f, r);
    for end in [false, true] {
        let digit = Frame::Digit { digit: '4', end };
        e.on_frame(f, digit, t0, &mut |t: Transmit<'_>| panic!("{t:?}"));
    }
    assert!(matches!(
        events(&mut e)[..],
        [MediaEvent::Dtmf { digit: '4', .. }]
    ));
}
