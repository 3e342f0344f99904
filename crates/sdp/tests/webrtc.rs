//! WebRTC offers and answers: a browser's offer answered with ICE-lite and DTLS-SRTP, and our
//! offer to a browser completed by its answer.

use std::net::{IpAddr, Ipv4Addr};

use sdp::{
    Caps, Codec, Direction, LocalSession, NegotiationError, SessionDescription, WebRtcLocal,
};

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
const PUBLIC: IpAddr = IpAddr::V4(Ipv4Addr::new(203, 0, 113, 9));
const THEIR_FP: &str = "sha-256 D2:FA:0E:C3:22:59:5E:14:95:69:92:3D:13:B4:84:24:2C:C2:A2:C0:3E:FD:34:8E:5E:EA:6F:AF:52:CE:E6:0F";

/// What Chromium offers through a SIP-over-WebSocket library (gathering complete).
const BROWSER_OFFER: &str = "v=0\r\n\
o=- 4611731400430051336 2 IN IP4 127.0.0.1\r\n\
s=-\r\n\
t=0 0\r\n\
a=group:BUNDLE 0\r\n\
a=extmap-allow-mixed\r\n\
a=msid-semantic: WMS stream\r\n\
m=audio 54321 UDP/TLS/RTP/SAVPF 111 63 9 0 8 13 110 126\r\n\
c=IN IP4 0.0.0.0\r\n\
a=rtcp:9 IN IP4 0.0.0.0\r\n\
a=candidate:1 1 udp 2122260223 192.168.1.5 54321 typ host generation 0\r\n\
a=ice-ufrag:EsAw\r\n\
a=ice-pwd:bP+XJMM09aR8AiX1jdukzR6Y\r\n\
a=ice-options:trickle\r\n\
a=fingerprint:sha-256 D2:FA:0E:C3:22:59:5E:14:95:69:92:3D:13:B4:84:24:2C:C2:A2:C0:3E:FD:34:8E:5E:EA:6F:AF:52:CE:E6:0F\r\n\
a=setup:actpass\r\n\
a=mid:0\r\n\
a=extmap:1 urn:ietf:params:rtp-hdrext:ssrc-audio-level\r\n\
a=sendrecv\r\n\
a=msid:stream track\r\n\
a=rtcp-mux\r\n\
a=rtpmap:111 opus/48000/2\r\n\
a=rtcp-fb:111 transport-cc\r\n\
a=fmtp:111 minptime=10;useinbandfec=1\r\n\
a=rtpmap:63 red/48000/2\r\n\
a=fmtp:63 111/111\r\n\
a=rtpmap:9 G722/8000\r\n\
a=rtpmap:0 PCMU/8000\r\n\
a=rtpmap:8 PCMA/8000\r\n\
a=rtpmap:13 CN/8000\r\n\
a=rtpmap:110 telephone-event/48000\r\n\
a=rtpmap:126 telephone-event/8000\r\n\
a=ssrc:1 cname:x\r\n";

fn local() -> WebRtcLocal {
    WebRtcLocal {
        ufrag: "ours".into(),
        pwd: "our-password-of-24-chars".into(),
        fingerprint: "sha-256 AA:BB".into(),
        candidate: Some(PUBLIC),
    }
}

fn caps(codecs: &[Codec]) -> Caps {
    Caps {
        codecs: codecs.to_vec(),
        dtmf_pt: Some(101),
    }
}

fn value<'a>(attrs: &'a [sdp::Attribute], name: &str) -> Option<Option<&'a str>> {
    attrs.iter().find_map(|a| match a {
        sdp::Attribute::Other { name: n, value } if n == name => Some(value.as_deref()),
        _ => None,
    })
}

#[test]
fn a_browser_offer_is_answered_passive_with_ice_lite_bundle_and_opus() {
    let offer: SessionDescription = BROWSER_OFFER.parse().unwrap();
    let mut s = LocalSession::new(7, LOCAL).with_webrtc(local());
    let (answer, n) = s
        .answer(&offer, &caps(&[Codec::OPUS, Codec::PCMU]), 30000)
        .unwrap();
    assert_eq!((n.pt, n.codec), (111, Codec::OPUS));
    assert_eq!(n.dtmf_pt, Some(110), "telephone-event at Opus's clock");
    assert_eq!(
        n.direction,
        Direction::SendRecv,
        "c=0.0.0.0 is not hold here"
    );
    let remote = n.webrtc.expect("a WebRTC stream");
    assert_eq!(
        (remote.ufrag.as_str(), remote.pwd.as_str()),
        ("EsAw", "bP+XJMM09aR8AiX1jdukzR6Y")
    );
    assert_eq!(remote.fingerprint, THEIR_FP);
    assert!(!remote.dtls_client, "the browser connects");
    assert_eq!(n.srtp, None);

    let m = &answer.media[0];
    assert_eq!(m.proto, "UDP/TLS/RTP/SAVPF");
    assert_eq!(m.port, 30000);
    let a = &m.attributes;
    assert_eq!(value(a, "setup"), Some(Some("passive")));
    assert_eq!(value(a, "mid"), Some(Some("0")));
    assert_eq!(value(a, "rtcp-mux"), Some(None));
    assert_eq!(value(a, "ice-ufrag"), Some(Some("ours")));
    assert_eq!(value(a, "ice-pwd"), Some(Some("our-password-of-24-chars")));
    assert_eq!(value(a, "fingerprint"), Some(Some("sha-256 AA:BB")));
    assert_eq!(
        value(a, "candidate"),
        Some(Some("1 1 udp 2130706431 203.0.113.9 30000 typ host"))
    );
    assert_eq!(value(a, "end-of-candidates"), Some(None));
    assert_eq!(value(&answer.attributes, "ice-lite"), Some(None));
    assert_eq!(value(&answer.attributes, "group"), Some(Some("BUNDLE 0")));
    // Written and read back unchanged.
    let text = answer.to_string();
    assert_eq!(text.parse::<SessionDescription>().unwrap(), answer);
    assert!(text.contains("a=rtpmap:111 opus/48000/2\r\n"), "{text}");

    // Opus even where the configuration lists G.711 alone or first: every browser has it.
    let mut s = LocalSession::new(8, LOCAL).with_webrtc(local());
    let (_, n) = s.answer(&offer, &caps(&[Codec::PCMU]), 30002).unwrap();
    assert_eq!((n.pt, n.codec), (111, Codec::OPUS));
    // G.711 fallback: an offer without Opus is answered PCMU.
    let no_opus: SessionDescription = BROWSER_OFFER
        .replace("111 63 9 0 8", "9 0 8")
        .parse()
        .unwrap();
    let mut s = LocalSession::new(8, LOCAL).with_webrtc(local());
    let (_, n) = s.answer(&no_opus, &caps(&[Codec::PCMU]), 30002).unwrap();
    assert_eq!((n.pt, n.codec), (0, Codec::PCMU));
}

#[test]
fn a_browser_offer_is_refused_without_webrtc_or_its_ice_dtls_and_mux_lines() {
    let offer: SessionDescription = BROWSER_OFFER.parse().unwrap();
    let plain = LocalSession::new(7, LOCAL).answer(&offer, &caps(&[Codec::OPUS]), 30000);
    assert_eq!(plain.err(), Some(NegotiationError::Srtp));
    for line in [
        "a=rtcp-mux\r\n",
        "a=ice-pwd:bP+XJMM09aR8AiX1jdukzR6Y\r\n",
        "a=setup:actpass\r\n",
    ] {
        let offer: SessionDescription = BROWSER_OFFER.replace(line, "").parse().unwrap();
        let mut s = LocalSession::new(7, LOCAL).with_webrtc(local());
        let r = s.answer(&offer, &caps(&[Codec::OPUS]), 30000);
        assert_eq!(r.err(), Some(NegotiationError::Srtp), "without {line}");
    }
}

#[test]
fn our_offer_to_a_browser_is_actpass_and_its_answer_picks_the_role() {
    let mut s = LocalSession::new(9, LOCAL).with_webrtc(WebRtcLocal {
        candidate: None,
        ..local()
    });
    let offer = s.offer(&caps(&[Codec::OPUS, Codec::PCMU]), 31000);
    let text = offer.to_string();
    assert!(
        text.contains("m=audio 31000 UDP/TLS/RTP/SAVPF 96 0 101\r\n"),
        "{text}"
    );
    assert!(text.contains("a=setup:actpass\r\n"), "{text}");
    assert!(text.contains("a=candidate:1 1 udp 2130706431 127.0.0.1 31000 typ host\r\n"));
    assert!(
        text.contains("t=0 0\r\na=ice-lite\r\na=group:BUNDLE 0\r\n"),
        "{text}"
    );
    assert_eq!(text.parse::<SessionDescription>().unwrap(), offer);

    let browser_answer = |setup: &str| -> SessionDescription {
        BROWSER_OFFER
            .replace("a=setup:actpass", setup)
            .replace("111 63 9 0 8 13 110 126", "96")
            .replace("a=rtpmap:111 opus", "a=rtpmap:96 opus")
            .parse()
            .unwrap()
    };
    let n = s
        .accept_answer(&offer, &browser_answer("a=setup:active"))
        .unwrap();
    assert_eq!(n.codec, Codec::OPUS);
    assert!(!n.webrtc.unwrap().dtls_client);
    let n = s
        .accept_answer(&offer, &browser_answer("a=setup:passive"))
        .unwrap();
    assert!(n.webrtc.unwrap().dtls_client);
    let without = browser_answer("a=setup:active")
        .to_string()
        .replace(&format!("a=fingerprint:{THEIR_FP}\r\n"), "");
    let r = s.accept_answer(&offer, &without.parse().unwrap());
    assert_eq!(r.err(), Some(NegotiationError::Srtp));
    let garbled = browser_answer("a=setup:active")
        .to_string()
        .replace(THEIR_FP, "sha-256 not-hex");
    let r = s.accept_answer(&offer, &garbled.parse().unwrap());
    assert_eq!(r.err(), Some(NegotiationError::Srtp));
    // A phone on a WebSocket that is no browser answers plain RTP: taken plainly.
    let plain = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n\
                 m=audio 4000 RTP/AVP 0\r\n";
    let n = s.accept_answer(&offer, &plain.parse().unwrap()).unwrap();
    assert_eq!((n.codec, n.webrtc), (Codec::PCMU, None));
    // Where SRTP is required, that plain answer is refused; a browser's is still taken.
    let strict = s.clone().requiring_srtp();
    let r = strict.accept_answer(&offer, &plain.parse().unwrap());
    assert_eq!(r.err(), Some(NegotiationError::Srtp));
    let n = strict.accept_answer(&offer, &browser_answer("a=setup:active"));
    assert!(n.unwrap().webrtc.is_some());
}

#[test]
fn a_webrtc_session_that_requires_srtp_refuses_a_plain_offer() {
    let plain: SessionDescription = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\n\
                                     c=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio 4000 RTP/AVP 0\r\n"
        .parse()
        .unwrap();
    let mut offering = LocalSession::new(7, LOCAL).with_webrtc(local());
    let (_, n) = offering
        .answer(&plain, &caps(&[Codec::PCMU]), 30000)
        .unwrap();
    assert!(n.webrtc.is_none() && n.srtp.is_none(), "taken plainly");
    let mut strict = LocalSession::new(7, LOCAL)
        .with_webrtc(local())
        .requiring_srtp();
    let r = strict.answer(&plain, &caps(&[Codec::PCMU]), 30000);
    assert_eq!(r.err(), Some(NegotiationError::Srtp));
    let browser: SessionDescription = BROWSER_OFFER.parse().unwrap();
    assert!(strict
        .answer(&browser, &caps(&[Codec::OPUS]), 30000)
        .is_ok());
}
