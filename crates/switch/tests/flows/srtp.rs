//! SDES-SRTP in the engine: an offer with `a=crypto` keys is taken only from a caller
//! signalling over TLS, answered with strowger's own key, and the media strowger sends that
//! caller is SRTP that opens with that key (a forged packet is dropped, counted and logged);
//! the same offer over UDP, or plain RTP where
//! `rtp.srtp = "require"`, gets a 488 whose Warning says why. "require" holds for WebSocket
//! (WebRTC) legs too, and both ways: a phone that answers strowger's SRTP or WebRTC offer with
//! plain RTP is ACKed, then sent a BYE, and the caller gets 488.

use crate::net;

use net::*;
use sdp::SessionDescription;
use sip::transaction::{Peer, Transport};
use sip::Message;

/// RFC 4568 §4's example key.
const KEY: &str = "PS1uQCVeeCFCanVmcjkpPywjNWhcYD0mXXtxaVBR";
const CALLER_RTP: &str = "127.0.0.1:40000";

fn offer(proto: &str) -> String {
    format!(
        "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n\
         m=audio 40000 {proto} 0\r\na=rtpmap:0 PCMU/8000\r\n\
         a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:{KEY}\r\n"
    )
}

/// Calls the demo prompt (44444) from ALICE over `transport` with `sdp`; what strowger sent
/// ALICE within 200 ms: SIP responses and media.
fn call(n: &mut Net, sw: Id, transport: Transport, sdp: &str) -> (Vec<Message>, Vec<Packet>) {
    let alice = addr(ALICE);
    let via = match transport {
        Transport::Tls => "TLS",
        Transport::Ws => "WS",
        _ => "UDP",
    };
    let invite = format!(
        "INVITE sip:44444@{SW} SIP/2.0\r\nVia: SIP/2.0/{via} {alice};branch=z9hG4bK-s1\r\n\
         Max-Forwards: 70\r\nFrom: <sip:alice@{alice}>;tag=a1\r\nTo: <sip:44444@{SW}>\r\n\
         Call-ID: srtp@{alice}\r\nCSeq: 1 INVITE\r\nContact: <sip:alice@{alice}>\r\n\
         Content-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{sdp}",
        sdp.len()
    );
    let now = n.now;
    let node = n.sw(sw).node();
    let msg = Message::parse(invite.as_bytes(), false).unwrap();
    let peer = Peer {
        transport,
        addr: alice,
    };
    node.deliver_msg(msg, peer, addr(SW), false, now);
    let mut out = node.drain();
    for step in 1..=10 {
        node.advance(now + ms(20 * step));
        out.extend(node.drain());
    }
    let sip = out
        .iter()
        .filter(|p| !p.media && p.to == alice)
        .filter_map(|p| Message::parse(&p.bytes, true).ok())
        .collect();
    let media = out
        .into_iter()
        .filter(|p| p.media && p.to == addr(CALLER_RTP))
        .collect();
    (sip, media)
}

/// Re-INVITEs ALICE's call (answered with `ok`) over TLS with `sdp`; strowger's final response.
fn reinvite(n: &mut Net, sw: Id, ok: &Message, sdp: &str) -> Message {
    let alice = addr(ALICE);
    let to = ok.header(sip::HeaderName::To).unwrap();
    let invite = format!(
        "INVITE sip:44444@{SW} SIP/2.0\r\nVia: SIP/2.0/TLS {alice};branch=z9hG4bK-s2\r\n\
         Max-Forwards: 70\r\nFrom: <sip:alice@{alice}>;tag=a1\r\nTo: {to}\r\n\
         Call-ID: srtp@{alice}\r\nCSeq: 2 INVITE\r\nContact: <sip:alice@{alice}>\r\n\
         Content-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{sdp}",
        sdp.len()
    );
    let now = n.now + ms(400);
    let node = n.sw(sw).node();
    let msg = Message::parse(invite.as_bytes(), false).unwrap();
    let peer = Peer {
        transport: Transport::Tls,
        addr: alice,
    };
    node.deliver_msg(msg, peer, addr(SW), false, now);
    let answers: Vec<Message> = node
        .drain()
        .into_iter()
        .filter(|p| !p.media && p.to == alice)
        .filter_map(|p| Message::parse(&p.bytes, true).ok())
        .collect();
    final_response(&answers).clone()
}

fn final_response(sip: &[Message]) -> &Message {
    sip.iter()
        .find(|m| m.status().is_some_and(|s| s >= 200))
        .unwrap_or_else(|| panic!("no final response: {sip:?}"))
}

#[test]
fn a_tls_caller_offering_sdes_gets_our_key_and_srtp_that_opens_with_it() {
    let mut n = Net::new(21);
    let sw = n.switch(&config(""), &[SW], 1);
    let (sip, media) = call(&mut n, sw, Transport::Tls, &offer("RTP/SAVP"));
    let ok = final_response(&sip);
    assert_eq!(ok.status(), Some(200));
    let answer = SessionDescription::parse(ok.body()).unwrap();
    let m = &answer.media[0];
    assert_eq!(m.proto, "RTP/SAVP");
    let ours = m.crypto().next().expect("a=crypto in the answer");
    assert_eq!(
        (ours.tag, ours.suite),
        (1, sdp::CryptoSuite::AesCm128HmacSha1_80)
    );
    let theirs = SessionDescription::parse(offer("RTP/SAVP").as_bytes()).unwrap();
    assert_ne!(ours.key, theirs.media[0].crypto().next().unwrap().key);

    // The prompt's packets open with the answered key, and are not plain RTP on the wire.
    let rtp: Vec<_> = media.iter().filter(|p| p.bytes[1] & 0x7f == 0).collect();
    assert!(rtp.len() >= 5, "{} RTP packets", rtp.len());
    let mut rx = srtp::Context::new(
        srtp::Suite::AesCm128HmacSha1_80,
        &ours.key,
        srtp::Direction::Inbound,
    )
    .unwrap();
    for p in rtp {
        let mut buf = p.bytes.clone();
        let n = rx.unprotect(&mut buf).expect("SRTP with the answered key");
        assert_eq!(n + 10, p.bytes.len(), "an 80-bit tag");
        assert_ne!(buf[12..n], p.bytes[12..n], "the payload was encrypted");
    }

    // A packet under another key, to the leg's port: dropped, counted, logged; the call stays.
    let leg = std::net::SocketAddr::new(addr(SW).ip(), m.port);
    let mut forged = media[0].bytes.clone();
    forged[2] ^= 0x40;
    let now = n.now + ms(300);
    let node = n.sw(sw).node();
    node.deliver_rtp(&forged, addr(CALLER_RTP), leg, now);
    node.advance(now);
    let scrape = n.sw(sw).scrape();
    assert!(
        scrape.contains("strowger_srtp_rejected_packets_total 1\n"),
        "{scrape}"
    );
    let logs = n.sw(sw).logs();
    assert!(
        logs.iter().any(|l| l.contains("dropped 1 SRTP packet(s)")),
        "{logs:?}"
    );
    assert_eq!(n.sw(sw).active_calls(), 1);

    // Hold by re-INVITE with the same key: the answer keeps strowger's key and suite.
    let hold = offer("RTP/SAVP").replace("a=crypto", "a=sendonly\r\na=crypto");
    let again = reinvite(&mut n, sw, ok, &hold);
    assert_eq!(again.status(), Some(200), "{again:?}");
    let again = SessionDescription::parse(again.body()).unwrap();
    let kept = again.media[0]
        .crypto()
        .next()
        .expect("a=crypto in the re-answer");
    assert_eq!((kept.tag, &kept.key), (1, &ours.key));
}

/// Under "require", a TLS caller's re-INVITE offering plain RTP gets 488 and changes nothing:
/// the call goes on, and the prompt keeps reaching the caller as SRTP under the answered key.
#[test]
fn require_refuses_a_plain_re_invite_with_488_and_the_call_keeps_its_srtp() {
    let mut n = Net::new(25);
    let head = "[rtp]\nmedia_timeout_s = 0\nsrtp = \"require\"\n";
    let sw = n.switch(&config(head), &[SW], 1);
    let (sip, _) = call(&mut n, sw, Transport::Tls, &offer("RTP/SAVP"));
    let ok = final_response(&sip);
    assert_eq!(ok.status(), Some(200), "{sip:?}");
    let answer = SessionDescription::parse(ok.body()).unwrap();
    let key = answer.media[0]
        .crypto()
        .next()
        .expect("a=crypto")
        .key
        .clone();

    let plain = "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n\
                 m=audio 40002 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n";
    let refused = reinvite(&mut n, sw, ok, plain);
    assert_eq!(refused.status(), Some(488), "{refused:?}");

    let mut now = n.now + ms(400);
    let node = n.sw(sw).node();
    let mut out = Vec::new();
    for _ in 0..10 {
        now += ms(20);
        node.advance(now);
        out.extend(node.drain());
    }
    let alice = addr(ALICE);
    let bye = out
        .iter()
        .filter(|p| !p.media && p.to == alice)
        .filter_map(|p| Message::parse(&p.bytes, true).ok())
        .find(|m| m.method() == Some(&sip::Method::Bye));
    assert!(bye.is_none(), "the call goes on: {bye:?}");
    assert_eq!(n.sw(sw).active_calls(), 1);
    let rtp: Vec<_> = out
        .iter()
        .filter(|p| p.media && p.bytes[1] & 0x7f == 0)
        .collect();
    assert!(
        rtp.len() >= 5 && rtp.iter().all(|p| p.to == addr(CALLER_RTP)),
        "the prompt still goes to the old address: {:?}",
        rtp.iter().map(|p| p.to).collect::<Vec<_>>()
    );
    let suite = srtp::Suite::AesCm128HmacSha1_80;
    let mut rx = srtp::Context::new(suite, &key, srtp::Direction::Inbound).unwrap();
    for p in rtp {
        let mut buf = p.bytes.clone();
        rx.unprotect(&mut buf)
            .expect("still SRTP with the answered key");
    }
}

#[test]
fn sdes_over_udp_is_refused_and_keys_on_plain_rtp_are_ignored() {
    let mut n = Net::new(22);
    let sw = n.switch(&config(""), &[SW], 1);
    let (sip, _) = call(&mut n, sw, Transport::Udp, &offer("RTP/SAVP"));
    let refused = final_response(&sip);
    assert_eq!(refused.status(), Some(488));
    let warning = refused.header_named("Warning").unwrap_or_default();
    assert!(warning.contains("needs SIP over TLS"), "{warning}");

    // Keys on RTP/AVP over UDP: answered plainly, no key back, plain RTP.
    let mut n = Net::new(23);
    let sw = n.switch(&config(""), &[SW], 1);
    let (sip, media) = call(&mut n, sw, Transport::Udp, &offer("RTP/AVP"));
    let ok = final_response(&sip);
    assert_eq!(ok.status(), Some(200));
    let answer = SessionDescription::parse(ok.body()).unwrap();
    assert_eq!(answer.media[0].crypto().count(), 0);
    let first = media.first().expect("RTP");
    assert_eq!(first.bytes.len(), 12 + 160, "plain G.711 without a tag");
}

#[test]
fn require_refuses_plain_rtp_on_tls_and_refuse_refuses_srtp() {
    let plain = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n\
                 m=audio 40000 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n";
    for (policy, transport, sdp, why) in [
        (
            "require",
            Transport::Tls,
            plain.to_string(),
            "rtp.srtp = \\\"require\\\"",
        ),
        // A WebSocket phone that offers no WebRTC.
        (
            "require",
            Transport::Ws,
            plain.to_string(),
            "rtp.srtp = \\\"require\\\"",
        ),
        (
            "refuse",
            Transport::Tls,
            offer("RTP/SAVP"),
            "rtp.srtp = \\\"refuse\\\"",
        ),
    ] {
        let mut n = Net::new(24);
        let head = format!("[rtp]\nmedia_timeout_s = 0\nsrtp = \"{policy}\"\n");
        let sw = n.switch(&config(&head), &[SW], 1);
        let (sip, _) = call(&mut n, sw, transport, &sdp);
        let refused = final_response(&sip);
        assert_eq!(refused.status(), Some(488), "{policy} {transport:?}");
        let warning = refused.header_named("Warning").unwrap_or_default();
        assert!(warning.contains(why), "{policy} {transport:?}: {warning}");
    }
    // Where SRTP is only offered, the WebSocket phone's plain offer is taken.
    let mut n = Net::new(24);
    let sw = n.switch(&config(""), &[SW], 1);
    let (sip, _) = call(&mut n, sw, Transport::Ws, plain);
    assert_eq!(final_response(&sip).status(), Some(200));
}

/// A UDP caller dials 1001, registered over `transport`, which answers strowger's offer with
/// plain RTP; `extra` heads the configuration. What 1001 and the caller got afterwards, and
/// the switch's metrics and log.
fn callee_answers_plain(
    transport: Transport,
    extra: &str,
) -> (Vec<Message>, Vec<Message>, String, Vec<String>) {
    let phone = addr("127.0.0.1:40640");
    let (mut n, sw, to_phone) =
        crate::tls::register_then_dial_with(transport, phone, "plain.invalid", "", extra);
    let invite = to_phone
        .iter()
        .find(|m| m.starts_with("INVITE "))
        .expect("an INVITE to 1001");
    let invite = Message::parse(invite.as_bytes(), false).unwrap();
    let offered = SessionDescription::parse(invite.body()).unwrap();
    assert!(
        offered.media[0].crypto().next().is_some() || offered.media[0].is_webrtc(),
        "strowger offers SRTP over {transport:?}: {offered}"
    );
    let plain = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n\
                 m=audio 40700 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n";
    let ok = crate::webrtc_legs::ok_to(&invite, plain);
    let mut now = n.now;
    let node = n.sw(sw).node();
    let peer = Peer {
        transport,
        addr: phone,
    };
    node.deliver_msg(ok, peer, addr(SW), false, now);
    let mut out = node.drain();
    for _ in 0..10 {
        now += ms(20);
        node.advance(now);
        out.extend(node.drain());
    }
    let sip_to = |to| {
        out.iter()
            .filter(|p| !p.media && p.to == to)
            .filter_map(|p| Message::parse(&p.bytes, true).ok())
            .collect::<Vec<_>>()
    };
    let (to_phone, to_alice) = (sip_to(phone), sip_to(addr(ALICE)));
    let sw = n.sw(sw);
    (to_phone, to_alice, sw.scrape(), sw.logs())
}

#[test]
fn require_ends_a_callee_that_answers_plain_rtp_with_ack_then_bye_and_the_caller_gets_488() {
    let require = "[rtp]\nmedia_timeout_s = 0\nsrtp = \"require\"\n";
    for transport in [Transport::Tls, Transport::Ws] {
        let (to_phone, to_alice, metrics, logs) = callee_answers_plain(transport, require);
        let methods: Vec<String> = to_phone
            .iter()
            .filter_map(|m| m.method().map(|m| m.to_string()))
            .collect();
        assert_eq!(methods, ["ACK", "BYE"], "{transport:?}: {to_phone:?}");
        let bye = &to_phone[1];
        assert_eq!(
            bye.header_named("Reason"),
            Some("Q.850;cause=88"),
            "{transport:?}"
        );
        assert_eq!(
            final_response(&to_alice).status(),
            Some(488),
            "{transport:?}: {to_alice:?}"
        );
        assert!(
            metrics.contains("strowger_sdp_answers_refused_total 1\n"),
            "{transport:?}: {metrics}"
        );
        assert!(
            logs.iter()
                .any(|l| l.contains("rtp.srtp = \"require\"") && l.contains("plain RTP")),
            "{transport:?}: {logs:?}"
        );
    }
    // Where SRTP is only offered, the same plain answers are taken: the caller is answered.
    for transport in [Transport::Tls, Transport::Ws] {
        let (to_phone, to_alice, metrics, _) = callee_answers_plain(transport, "");
        assert!(
            !to_phone
                .iter()
                .any(|m| m.method() == Some(&sip::Method::Bye)),
            "{to_phone:?}"
        );
        assert_eq!(final_response(&to_alice).status(), Some(200));
        assert!(metrics.contains("strowger_sdp_answers_refused_total 0\n"));
    }
}
