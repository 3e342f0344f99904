//! Self-checks of the test harness's own codecs and parsers (tests/common), so that a broken
//! helper fails here rather than making a strowger test pass or fail for the wrong reason.

use crate::common;

use common::audio::{best_correlation, dominant_freq, tone, tone_purity, ulaw_decode, ulaw_encode};
use common::json::Json;
use common::pcap::rtp_segments;
use common::sip::{sdp_audio, tag_of, uri_of, Msg};

#[test]
fn ulaw_matches_g711_reference_points_and_round_trips() {
    // G.711 table values: 0xFF (and 0x7F) are zero, 0x80/0x00 the extremes.
    assert_eq!(ulaw_decode(0xff), 0);
    assert_eq!(ulaw_decode(0x80), 32124);
    assert_eq!(ulaw_decode(0x00), -32124);
    for b in 0..=255u8 {
        if b != 0x7f {
            assert_eq!(ulaw_encode(ulaw_decode(b)), b, "byte {b:#04x}");
        }
    }
    for s in [-30000i16, -1000, -5, 0, 7, 1000, 30000] {
        let back = ulaw_decode(ulaw_encode(s));
        let err = (i32::from(back) - i32::from(s)).abs();
        assert!(err <= i32::from(s).abs() / 16 + 8, "{s} -> {back}");
    }
}

#[test]
fn correlation_finds_a_known_lag_and_tones_their_frequency() {
    let reference: Vec<i16> = (0..20000)
        .map(|i| (((i * 7919) % 2003) as i16 - 1000) * 10)
        .collect();
    let sig: Vec<i16> = reference[300..].to_vec(); // sig[i] = reference[i + 300]
    let (c, lag) = best_correlation(&sig, &reference, 1000, 8000, -2000..=2000);
    assert!(c > 0.99 && lag == 300, "{c} {lag}");
    let noise: Vec<i16> = (0..20000)
        .map(|i| ((i * 7331 % 4001) as i16 - 2000) * 7)
        .collect();
    let (c, _) = best_correlation(&noise, &reference, 1000, 8000, -2000..=2000);
    assert!(c < 0.5, "unrelated signals correlate {c}");
    assert_eq!(dominant_freq(&tone(1000.0, 8000, 8000.0)), 1000.0);
    assert!(tone_purity(&tone(440.0, 8000, 8000.0), 440.0) > 0.9);
    assert!(tone_purity(&tone(440.0, 8000, 8000.0), 1000.0) < 0.1);
}

#[test]
fn json_reads_a_cdr_like_line() {
    let v = Json::parse(r#"{"a":"x\"y","n":-1.5e1,"z":null,"l":[1, true],"u":"\u00e9"}"#).unwrap();
    assert_eq!(v.get("a").and_then(Json::as_str), Some("x\"y"));
    assert_eq!(v.get("n").and_then(Json::as_f64), Some(-15.0));
    assert_eq!(v.get("z"), Some(&Json::Null));
    assert_eq!(v.get("u").and_then(Json::as_str), Some("é"));
    assert!(Json::parse("{\"a\":1} x").is_err());
}

#[test]
fn sip_parser_handles_compact_and_folded_headers() {
    let m = Msg::parse(
        b"SIP/2.0 200 OK\r\nv: SIP/2.0/UDP a;branch=z9hG4bK1\r\nt: <sip:x@h>\r\n ;tag=abc\r\n\
          m: <sip:s@127.0.0.1:5080>\r\nCSeq: 1 INVITE\r\nl: 60\r\n\r\n\
          v=0\r\nc=IN IP4 127.0.0.1\r\nm=audio 20000 RTP/AVP 0 101\r\n",
    )
    .unwrap();
    assert_eq!(m.status(), Some(200));
    assert_eq!(m.cseq_method(), Some("INVITE"));
    assert_eq!(m.header("to").and_then(tag_of).as_deref(), Some("abc"));
    assert_eq!(uri_of(m.header("contact").unwrap()), "sip:s@127.0.0.1:5080");
    let (addr, pts) = sdp_audio(&m.body);
    assert_eq!(
        (addr.to_string().as_str(), pts),
        ("127.0.0.1:20000", vec![0, 101])
    );
}

/// A segmented message of two voice packets, as a loopback capture shows it, reads as the two
/// packets; a single packet, an RTCP report and a packet of another SSRC after it stay whole.
#[test]
fn a_captured_segmented_message_reads_as_its_rtp_packets() {
    let packet = |seq: u8, ssrc: u8| {
        let mut p = vec![0x80, 0, 0, seq, 0, 0, 0, 160, 0, 0, 0, ssrc];
        p.extend(std::iter::repeat_n(0xff, 160));
        p
    };
    let two = [packet(1, 7), packet(2, 7)].concat();
    assert_eq!(rtp_segments(&two), [&packet(1, 7)[..], &packet(2, 7)[..]]);
    assert_eq!(rtp_segments(&packet(1, 7)), [&packet(1, 7)[..]]);
    let others = [packet(1, 7), packet(2, 8)].concat();
    assert_eq!(rtp_segments(&others), [&others[..]]);
    let mut report = [packet(1, 7), packet(2, 7)].concat();
    report[1] = 200;
    assert_eq!(rtp_segments(&report), [&report[..]]);
}
