//! SRTP legs: keyed from SDP, bridged to plain legs without decoding, bad packets counted.

use super::*;
use sdp::{CryptoSuite, SrtpKeys};
use srtp::{Context, Direction, Suite, MAX_TRAILER};

/// The leg's keys and the far end's two contexts (it protects with the key we receive with).
fn keyed(e: &mut Engine, id: LegId) -> (Context, Context) {
    let keys = SrtpKeys {
        suite: CryptoSuite::AesCm128HmacSha1_80,
        local: vec![1; 30],
        remote: vec![2; 30],
    };
    e.set_srtp(id, Some(&keys)).unwrap();
    let suite = Suite::AesCm128HmacSha1_80;
    (
        Context::new(suite, &keys.remote, Direction::Outbound).unwrap(),
        Context::new(suite, &keys.local, Direction::Inbound).unwrap(),
    )
}

fn seal(far: &mut Context, plain: &[u8]) -> Vec<u8> {
    let mut buf = plain.to_vec();
    buf.resize(plain.len() + MAX_TRAILER, 0);
    let n = far.protect(&mut buf, plain.len()).unwrap();
    buf.truncate(n);
    buf
}

fn open(far: &mut Context, sent: &Sent) -> Vec<u8> {
    let mut buf = sent.data.clone();
    let n = far.unprotect(&mut buf).unwrap();
    buf.truncate(n);
    buf
}

#[test]
fn srtp_leg_bridged_to_a_plain_leg_reencrypts_the_same_payload_both_ways() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(11);
    let a = e.add_leg(cfg(G711::Pcmu, 4000), t0);
    let b = e.add_leg(cfg(G711::Pcmu, 5000), t0);
    let (mut far_tx, mut far_rx) = keyed(&mut e, a);
    e.bridge(a, b);
    let voice: Vec<u8> = (0..160).map(|i| (i * 7) as u8).collect();

    let out = rtp_in(
        &mut e,
        a,
        &seal(&mut far_tx, &packet(0, 1, 0, false, &voice)),
        addr(4000),
        t0,
    );
    assert_eq!((out.len(), out[0].leg), (1, b));
    assert_eq!(out[0].rtp().payload(), &voice[..], "plain on the RTP leg");

    let back = rtp_in(
        &mut e,
        b,
        &packet(0, 50, 8000, false, &voice),
        addr(5000),
        t0,
    );
    assert_eq!(back[0].leg, a);
    assert_eq!(
        back[0].data.len(),
        12 + 160 + 10,
        "an 80-bit tag is appended"
    );
    assert_ne!(
        &back[0].data[12..172],
        &voice[..],
        "encrypted on the SRTP leg"
    );
    let plain = open(&mut far_rx, &back[0]);
    assert_eq!(RtpPacket::parse(&plain).unwrap().payload(), &voice[..]);

    // Transcoded: the SRTP leg's µ-law reaches an A-law leg decrypted and converted.
    let c = e.add_leg(cfg(G711::Pcma, 6000), t0);
    e.bridge(a, c);
    let out = rtp_in(
        &mut e,
        a,
        &seal(&mut far_tx, &packet(0, 2, 160, false, &voice)),
        addr(4000),
        t0,
    );
    let mut alaw = vec![0; 160];
    G711::Pcmu.transcode(G711::Pcma, &voice, &mut alaw);
    assert_eq!((out[0].leg, out[0].rtp().payload()), (c, &alaw[..]));
    assert_eq!(e.stats(a).unwrap().srtp_rejected, 0);
}

#[test]
fn forged_and_replayed_packets_are_dropped_and_counted_and_the_stream_goes_on() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(12);
    let a = e.add_leg(cfg(G711::Pcmu, 4000), t0);
    let (mut far_tx, _) = keyed(&mut e, a);
    e.echo(a);
    let first = seal(&mut far_tx, &packet(0, 1, 0, false, &[0x55; 160]));
    assert_eq!(rtp_in(&mut e, a, &first, addr(4000), t0).len(), 1);
    assert!(
        rtp_in(&mut e, a, &first, addr(4000), t0).is_empty(),
        "replayed"
    );
    let mut wrong =
        Context::new(Suite::AesCm128HmacSha1_80, &[9; 30], Direction::Outbound).unwrap();
    let forged = seal(&mut wrong, &packet(0, 2, 160, false, &[0x55; 160]));
    assert!(
        rtp_in(&mut e, a, &forged, addr(4000), t0).is_empty(),
        "wrong key"
    );
    assert!(
        rtp_in(
            &mut e,
            a,
            &packet(0, 3, 320, false, &[0x55; 160]),
            addr(4000),
            t0
        )
        .is_empty(),
        "plain"
    );
    let next = seal(&mut far_tx, &packet(0, 4, 480, false, &[0x55; 160]));
    assert_eq!(rtp_in(&mut e, a, &next, addr(4000), t0).len(), 1);
    let stats = e.stats(a).unwrap();
    assert_eq!((stats.srtp_rejected, stats.packets_received), (3, 2));
    assert_eq!(e.totals().srtp_rejected, 3);
    let told = events(&mut e);
    assert_eq!(told, vec![MediaEvent::SrtpRejected { leg: a }; 3]);
}

#[test]
fn rtcp_is_protected_and_the_same_keys_again_keep_the_stream() {
    let t0 = Instant::now();
    let mut e = Engine::with_seed(13);
    let a = e.add_leg(cfg(G711::Pcmu, 4000), t0);
    let (mut far_tx, mut far_rx) = keyed(&mut e, a);
    e.echo(a);
    let first = seal(&mut far_tx, &packet(0, 1, 0, false, &[1; 160]));
    rtp_in(&mut e, a, &first, addr(4000), t0);
    // A re-INVITE with the same keys: the replay window survives, so the copy is refused.
    keyed(&mut e, a);
    assert!(rtp_in(&mut e, a, &first, addr(4000), t0).is_empty());
    let reports: Vec<_> = tick(&mut e, t0 + Duration::from_secs(10))
        .into_iter()
        .filter(|s| s.rtcp)
        .collect();
    assert_eq!(reports.len(), 1);
    let mut buf = reports[0].data.clone();
    let n = far_rx.unprotect_rtcp(&mut buf).unwrap();
    assert!(rtcp::parse_compound(&buf[..n]).all(|p| p.is_ok()));
    // The far end re-keys its direction alone: its new key opens, its old one no longer does,
    // and what we send still opens with our key.
    let keys = SrtpKeys {
        suite: CryptoSuite::AesCm128HmacSha1_80,
        local: vec![1; 30],
        remote: vec![3; 30],
    };
    e.set_srtp(a, Some(&keys)).unwrap();
    let old = seal(&mut far_tx, &packet(0, 2, 160, false, &[1; 160]));
    assert!(rtp_in(&mut e, a, &old, addr(4000), t0).is_empty());
    let mut far_tx =
        Context::new(Suite::AesCm128HmacSha1_80, &[3; 30], Direction::Outbound).unwrap();
    let new = seal(&mut far_tx, &packet(0, 3, 320, false, &[1; 160]));
    let echoed = rtp_in(&mut e, a, &new, addr(4000), t0);
    assert_eq!(echoed.len(), 1);
    open(&mut far_rx, &echoed[0]);
    // Plain again: what arrives is RTP.
    e.set_srtp(a, None).unwrap();
    assert_eq!(
        rtp_in(
            &mut e,
            a,
            &packet(0, 9, 1280, false, &[1; 160]),
            addr(4000),
            t0
        )
        .len(),
        1
    );
}
