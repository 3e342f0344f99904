//! The call engine driven by hand-written SIP and injected time: what goes out on the wire and
//! into the CDR for each call flow, with no sockets and no sleeping. The engine is one `Node` of
//! the simulated network's (tests/net), driven here datagram by datagram.

use crate::net;

use net::{Node, Shared};
use sip::header::HeaderName;
use sip::Message;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const DIALPLAN: &str = concat!(
    r#"
[general]
max_calls = 2
retry_after_s = 7
[sip]
session_expires = 1800
min_se = 90
user_agent = "strowger-test"
[rtp]
media_timeout_s = 10
hold_timeout_s = 30
# Shows which legs the engine lets share a port.
shared_ports = true
[vars]
bridge_target = "127.0.0.1:5090"
# The caller is a trusted peer: its calls run in the default context unchallenged.
[security]
trusted = ["127.0.0.1"]
"#,
    net::basic_dialplan!(),
    r#"[[dialplan.contexts.default.rules]]
regex = "^2(\\d{3})$"
steps = ["bridge sip:${EXTEN}@${bridge_target} timeout=5"]
"#
);

const CALLER: &str = "127.0.0.1:5061";
const LOCAL: &str = "127.0.0.1:5060";

/// One engine (RTP ports from 20002 up, the demo prompt, CDRs kept in memory) and the clock.
struct Rig {
    node: Node,
    now: Instant,
    /// SIP the engine sent during `tick`, for the next `sent`.
    held: Vec<net::Packet>,
}

impl Drop for Rig {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.no_operator_messages();
        }
    }
}

impl Rig {
    fn new() -> Rig {
        let shared = Shared::new(DIALPLAN);
        Rig {
            node: Node::new(&shared, &[LOCAL.parse().unwrap()], 0, 1, 20002),
            now: Instant::now(),
            held: Vec::new(),
        }
    }

    fn send(&mut self, text: &str) {
        self.send_from(text, CALLER);
    }

    fn send_from(&mut self, text: &str, from: &str) {
        self.receive(text, from, false);
    }

    /// A message that waited `late` (too long) in the worker's socket.
    fn receive(&mut self, text: &str, from: &str, late: bool) {
        let bytes = text.replace('\n', "\r\n");
        Message::parse(bytes.as_bytes(), true).expect("test message frames");
        self.node.deliver_sip(
            bytes.as_bytes(),
            from.parse().unwrap(),
            LOCAL.parse().unwrap(),
            late,
            self.now,
        );
    }

    /// Advances time in 20 ms media ticks, running timers as the worker would.
    fn advance(&mut self, d: Duration) {
        let end = self.now + d;
        while self.now < end {
            self.now += Duration::from_millis(20);
            self.node.advance(self.now);
        }
    }

    /// Runs the media tick due 20 ms from now (the clock stays); the RTP it sends, by
    /// destination and payload type.
    fn tick(&mut self) -> Vec<(SocketAddr, u8)> {
        self.node.advance(self.now + Duration::from_millis(20));
        let (media, sip): (Vec<_>, Vec<_>) = self.node.drain().into_iter().partition(|p| p.media);
        self.held.extend(sip);
        self.no_operator_messages();
        media
            .into_iter()
            .map(|p| (p.to, p.bytes[1] & 0x7f))
            .collect()
    }

    /// Everything the engine wants to send, parsed, with its destination.
    fn sent(&mut self) -> Vec<(SocketAddr, Message)> {
        let mut all = std::mem::take(&mut self.held);
        all.extend(self.node.drain());
        let out = all
            .into_iter()
            .filter(|p| !p.media)
            .map(|p| {
                (
                    p.to,
                    Message::parse(&p.bytes, true).expect("strowger sends valid SIP"),
                )
            })
            .collect();
        self.no_operator_messages();
        out
    }

    fn statuses(&mut self) -> Vec<u16> {
        self.sent().iter().filter_map(|(_, m)| m.status()).collect()
    }

    fn cdrs(&self) -> &[serde_json::Value] {
        self.node.cdrs()
    }

    /// The engine had nothing to tell an operator but the refusals it reports
    /// ([`Rig::refusal_reports`]).
    fn no_operator_messages(&self) {
        let logs: Vec<_> = self
            .node
            .logs()
            .iter()
            .filter(|l| !l.starts_with(REFUSED))
            .collect();
        assert!(logs.is_empty(), "unexpected operator message: {logs:?}");
    }

    fn refusal_reports(&self) -> Vec<&String> {
        self.node
            .logs()
            .iter()
            .filter(|l| l.starts_with(REFUSED))
            .collect()
    }
}

/// How the engine's report of refused calls begins.
const REFUSED: &str = "new calls refused with 503";

fn invite(exten: &str, call_id: &str, sdp: bool, extra: &str) -> String {
    let body = if sdp {
        "v=0\no=- 1 1 IN IP4 127.0.0.1\ns=-\nc=IN IP4 127.0.0.1\nt=0 0\nm=audio 6000 RTP/AVP 0 101\na=rtpmap:101 telephone-event/8000\n"
    } else {
        ""
    };
    let len = body.replace('\n', "\r\n").len();
    let ct = if sdp {
        "Content-Type: application/sdp\n"
    } else {
        ""
    };
    format!(
        "INVITE sip:{exten}@127.0.0.1 SIP/2.0\nVia: SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bK-{call_id}\n\
From: <sip:alice@127.0.0.1>;tag=a1\nTo: <sip:{exten}@127.0.0.1>\nCall-ID: {call_id}\nCSeq: 1 INVITE\n\
Contact: <sip:alice@127.0.0.1:5061>\nMax-Forwards: 70\n{extra}{ct}Content-Length: {len}\n\n{body}"
    )
}

fn in_dialog(
    method: &str,
    call_id: &str,
    to_tag: &str,
    cseq: u32,
    branch: &str,
    body: &str,
) -> String {
    let len = body.replace('\n', "\r\n").len();
    let ct = if body.is_empty() {
        ""
    } else {
        "Content-Type: application/sdp\n"
    };
    format!(
        "{method} sip:alice@127.0.0.1:5061 SIP/2.0\nVia: SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bK-{branch}\n\
From: <sip:alice@127.0.0.1>;tag=a1\nTo: <sip:x@127.0.0.1>;tag={to_tag}\nCall-ID: {call_id}\nCSeq: {cseq} {method}\n\
Max-Forwards: 70\n{ct}Content-Length: {len}\n\n{body}"
    )
}

fn to_tag(m: &Message) -> String {
    let to = m.header(HeaderName::To).unwrap();
    sip::NameAddr::parse(to).unwrap().tag().unwrap().to_string()
}

#[test]
fn playback_call_answers_with_sdp_and_writes_a_cdr_on_bye() {
    let mut r = Rig::new();
    r.send(&invite("44444", "c1", true, ""));
    let sent = r.sent();
    let statuses: Vec<_> = sent.iter().filter_map(|(_, m)| m.status()).collect();
    assert_eq!(statuses, [100, 200]);
    let ok = &sent[1].1;
    assert_eq!(sent[1].0, CALLER.parse::<SocketAddr>().unwrap());
    let body = String::from_utf8_lossy(ok.body()).to_string();
    assert!(
        body.contains("m=audio 2000") && body.contains("RTP/AVP 0"),
        "{body}"
    );
    let tag = to_tag(ok);
    r.send(&in_dialog("ACK", "c1", &tag, 1, "ack1", ""));
    r.advance(Duration::from_secs(2));
    r.send(&in_dialog("BYE", "c1", &tag, 2, "bye1", ""));
    assert_eq!(r.statuses(), [200]);
    assert_eq!(r.cdrs().len(), 1);
    let cdr = &r.cdrs()[0];
    assert_eq!(cdr["exten"], "44444");
    assert_eq!(cdr["sip_status"], 200);
    assert_eq!(cdr["hangup_side"], "caller");
    assert_eq!(cdr["codec"], "PCMU");
    assert!(cdr["billable_s"].as_f64().unwrap() >= 1.9);
    assert_eq!(r.node.active_calls(), 0);
}

/// Which legs may share a port (rtp.shared_ports): those whose far end announced an address that
/// no other leg has — not a second call from the same RTP address, not a caller whose SDP names a
/// private address of another host (NAT) — and not an outbound leg whose far end is not known to
/// answer each call from an address of its own (tests/shared_ports.rs).
#[test]
fn a_leg_may_share_a_port_only_when_its_far_end_can_be_told_apart_by_address() {
    let mut r = Rig::new();
    let call = |id: &str, port: u16| {
        invite("44444", id, true, "").replace("m=audio 6000", &format!("m=audio {port}"))
    };
    // Sends the INVITE and returns the answer's To tag.
    let answered = |r: &mut Rig, invite: &str| {
        r.send(invite);
        let sent = r.sent();
        to_tag(
            &sent
                .iter()
                .find(|(_, m)| m.status() == Some(200))
                .unwrap()
                .1,
        )
    };
    // Hangs up (the test switch takes two calls at a time).
    let bye = |r: &mut Rig, id: &str, tag: &str| {
        r.send(&in_dialog("BYE", id, tag, 2, &format!("bye-{id}"), ""));
        r.sent();
    };
    let first = answered(&mut r, &call("first", 6000));
    let same = answered(&mut r, &call("same-address", 6000));
    assert_eq!(r.node.shareable(), [true, false]);
    bye(&mut r, "same-address", &same);
    // A call whose SDP names `ip` (as long as 127.0.0.1, so the Content-Length holds): whether
    // its leg may share; the call is then hung up.
    let media_at = |r: &mut Rig, id: &str, ip: &str| {
        let invite = call(id, 6002).replace("c=IN IP4 127.0.0.1", &format!("c=IN IP4 {ip}"));
        let tag = answered(r, &invite);
        bye(r, id, &tag);
        r.node.shareable().last().copied()
    };
    assert_eq!(
        media_at(&mut r, "nat", "10.0.0.77"),
        Some(false),
        "SDP names a private address of another host"
    );
    // Another host's address that is not private (a media server, an SBC) is taken at its word.
    assert_eq!(
        media_at(&mut r, "media-host", "127.0.0.9"),
        Some(true),
        "a routable address of its own"
    );
    bye(&mut r, "first", &first);
    r.send(&invite("2001", "bridged", true, "").replace("m=audio 6000", "m=audio 6004"));
    assert_eq!(
        r.node.shareable()[4..],
        [false],
        "the callee's leg, opened for strowger's offer to a far end not known to answer from addresses of its own"
    );
}

#[test]
fn retransmitted_invite_is_absorbed() {
    let mut r = Rig::new();
    let inv = invite("5555", "c2", true, "");
    r.send(&inv);
    assert_eq!(r.statuses(), [100, 180]);
    r.send(&inv);
    assert_eq!(
        r.statuses(),
        [180],
        "the retransmission gets the latest provisional again"
    );
    assert_eq!(r.node.active_calls(), 1);
}

#[test]
fn cancel_while_ringing_gives_487_and_a_cdr() {
    let mut r = Rig::new();
    r.send(&invite("5555", "c3", true, ""));
    r.sent();
    let cancel = "CANCEL sip:5555@127.0.0.1 SIP/2.0\nVia: SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bK-c3\n\
From: <sip:alice@127.0.0.1>;tag=a1\nTo: <sip:5555@127.0.0.1>\nCall-ID: c3\nCSeq: 1 CANCEL\nMax-Forwards: 70\nContent-Length: 0\n\n";
    r.send(cancel);
    let mut st = r.statuses();
    st.sort();
    assert_eq!(st, [200, 487]);
    assert_eq!(r.cdrs()[0]["sip_status"], 487);
    assert_eq!(r.cdrs()[0]["answer"], serde_json::Value::Null);
}

#[test]
fn over_the_call_limit_gets_503_with_retry_after() {
    let mut r = Rig::new();
    r.send(&invite("5555", "c4a", true, ""));
    r.send(&invite("5555", "c4b", true, ""));
    r.sent();
    r.send(&invite("5555", "c4c", true, ""));
    let sent = r.sent();
    assert_eq!(sent[0].1.status(), Some(503));
    assert_eq!(sent[0].1.header(HeaderName::RetryAfter), Some("7"));
}

#[test]
fn past_capacity_new_calls_get_503_and_calls_in_progress_go_on() {
    let mut r = Rig::new();
    r.send(&invite("44444", "c13a", true, ""));
    r.sent();
    r.node.set_overloaded(true);
    r.send(&invite("44444", "c13b", true, ""));
    assert_eq!(r.statuses(), [503]);
    r.send(&invite("44444", "c13d", true, ""));
    assert_eq!(r.statuses(), [503]);
    // Reported once, with its reason, not once per refused call.
    let reports = r.refusal_reports();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert!(reports[0].contains("(1 since the last report): a worker is past capacity"));
    assert_eq!(r.node.active_calls(), 1);
    r.node.set_overloaded(false);
    r.send(&invite("44444", "c13c", true, ""));
    assert_eq!(r.statuses(), [100, 200]);
}

#[test]
fn past_capacity_refusals_are_stateless_and_in_dialog_requests_are_served() {
    let mut r = Rig::new();
    let ringing = invite("5555", "c14a", true, "");
    r.send(&ringing);
    r.send(&invite("44444", "c14b", true, ""));
    let ok = r
        .sent()
        .into_iter()
        .find(|(_, m)| m.status() == Some(200))
        .unwrap()
        .1;
    r.send(&in_dialog("ACK", "c14b", &to_tag(&ok), 1, "c14b-ack", ""));
    r.node.set_overloaded(true);
    let refused = invite("44444", "c14c", true, "");
    r.send(&refused);
    let sent = r.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].1.status(), Some(503));
    assert_eq!(sent[0].1.header(HeaderName::RetryAfter), Some("7"));
    // No transaction was made: nothing is retransmitted, a retransmitted INVITE is refused
    // again and the ACK for the 503 is absorbed.
    r.advance(Duration::from_secs(2));
    assert_eq!(r.statuses(), Vec::<u16>::new());
    r.send(&refused);
    assert_eq!(r.statuses(), [503]);
    r.send(
        &in_dialog("ACK", "c14c", &to_tag(&sent[0].1), 1, "c14c", "")
            .replace("alice@127.0.0.1:5061 SIP", "44444@127.0.0.1 SIP"),
    );
    assert_eq!(r.statuses(), Vec::<u16>::new());
    // Calls from before the overload go on: a retransmitted INVITE is absorbed, a BYE served.
    r.send(&ringing);
    assert_eq!(r.statuses(), [180]);
    r.send(&in_dialog("BYE", "c14b", &to_tag(&ok), 2, "c14b-bye", ""));
    assert_eq!(r.statuses(), [200]);
    assert_eq!(r.node.active_calls(), 1);
}

#[test]
fn a_new_call_that_queued_too_long_is_refused_and_the_next_one_admitted() {
    let mut r = Rig::new();
    r.send(&invite("44444", "c15a", true, ""));
    let ok = r
        .sent()
        .into_iter()
        .find(|(_, m)| m.status() == Some(200))
        .unwrap()
        .1;
    r.receive(&invite("44444", "c15b", true, ""), CALLER, true);
    assert_eq!(r.statuses(), [503]);
    r.send(&invite("44444", "c15c", true, ""));
    assert_eq!(r.statuses(), [100, 200], "lateness marks one message only");
    r.receive(
        &in_dialog("BYE", "c15a", &to_tag(&ok), 2, "c15a-bye", ""),
        CALLER,
        true,
    );
    assert_eq!(
        r.statuses(),
        [200],
        "a late request of a call in progress is served"
    );
}

#[test]
fn strowger_hangs_up_with_bye() {
    let mut r = Rig::new();
    r.send(&invite("6666", "c5", true, ""));
    let tag = to_tag(&r.sent()[1].1);
    r.send(&in_dialog("ACK", "c5", &tag, 1, "ack5", ""));
    r.advance(Duration::from_millis(1100));
    let sent = r.sent();
    let bye = sent
        .iter()
        .find(|(_, m)| m.method() == Some(&sip::Method::Bye))
        .expect("a BYE");
    assert_eq!(bye.1.request_uri(), Some("sip:alice@127.0.0.1:5061"));
    assert_eq!(r.cdrs()[0]["hangup_side"], "switch");
}

#[test]
fn invite_without_sdp_gets_an_offer_and_the_ack_answers_it() {
    let mut r = Rig::new();
    r.send(&invite("44444", "c6", false, ""));
    let ok = r.sent().pop().unwrap().1;
    let offer = String::from_utf8_lossy(ok.body()).to_string();
    assert!(offer.contains("RTP/AVP 0 8 101"), "{offer}");
    let answer =
        "v=0\no=- 1 1 IN IP4 127.0.0.1\ns=-\nc=IN IP4 127.0.0.1\nt=0 0\nm=audio 7000 RTP/AVP 8\n";
    r.send(&in_dialog("ACK", "c6", &to_tag(&ok), 1, "ack6", answer));
    let frames = r.tick();
    assert!(
        frames.contains(&("127.0.0.1:7000".parse().unwrap(), 8)),
        "PCMA to the answer's address: {frames:?}"
    );
}

#[test]
fn reinvite_hold_is_answered_recvonly() {
    let mut r = Rig::new();
    r.send(&invite("44444", "c7", true, ""));
    let tag = to_tag(&r.sent()[1].1);
    r.send(&in_dialog("ACK", "c7", &tag, 1, "ack7", ""));
    let hold = "v=0\no=- 1 2 IN IP4 127.0.0.1\ns=-\nc=IN IP4 127.0.0.1\nt=0 0\nm=audio 6000 RTP/AVP 0\na=sendonly\n";
    r.send(&in_dialog("INVITE", "c7", &tag, 2, "hold7", hold));
    let ok = r.sent().pop().unwrap().1;
    assert_eq!(ok.status(), Some(200));
    assert!(String::from_utf8_lossy(ok.body()).contains("a=recvonly"));
    // On hold strowger sends nothing, and the media timeout does not fire.
    r.send(&in_dialog("ACK", "c7", &tag, 2, "ack7b", ""));
    let sent = r.tick().len();
    assert_eq!(sent, 0);
    r.advance(Duration::from_secs(12));
    assert_eq!(r.node.active_calls(), 1);
}

/// A caller holding the call by re-INVITE is hung up once it has sent neither RTP nor RTCP for
/// `rtp.hold_timeout_s` (30 here), as if it had vanished; its RTCP reports keep it alive.
#[test]
fn a_held_caller_that_sends_nothing_is_hung_up_after_the_hold_timeout() {
    let mut r = Rig::new();
    let hold = "v=0\no=- 1 2 IN IP4 127.0.0.1\ns=-\nc=IN IP4 127.0.0.1\nt=0 0\nm=audio 6000 RTP/AVP 0\na=sendonly\n";
    // An RTCP receiver report without report blocks, from the caller's RTCP port.
    let rr = [0x80, 201, 0, 1, 0xCA, 0xFE, 0xCA, 0xFE];
    for (call, reports) in [("c30", false), ("c31", true)] {
        r.send(&invite("44444", call, true, ""));
        let ok = r.sent().pop().unwrap().1;
        let tag = to_tag(&ok);
        let port: u16 = net::body(&ok)
            .lines()
            .find_map(|l| l.strip_prefix("m=audio "))
            .and_then(|l| l.split(' ').next())
            .and_then(|p| p.parse().ok())
            .expect("an audio port in the answer");
        let rtcp_to: SocketAddr = format!("127.0.0.1:{}", port + 1).parse().unwrap();
        r.send(&in_dialog("ACK", call, &tag, 1, &format!("{call}a"), ""));
        r.send(&in_dialog(
            "INVITE",
            call,
            &tag,
            2,
            &format!("{call}h"),
            hold,
        ));
        assert_eq!(r.sent().pop().unwrap().1.status(), Some(200));
        r.send(&in_dialog("ACK", call, &tag, 2, &format!("{call}b"), ""));
        if reports {
            for _ in 0..12 {
                r.advance(Duration::from_secs(5));
                r.node
                    .deliver_rtp(&rr, "127.0.0.1:6001".parse().unwrap(), rtcp_to, r.now);
            }
            assert_eq!(r.node.active_calls(), 1, "alive by RTCP after 60 s on hold");
        }
        // From the hold, or the last report.
        r.advance(Duration::from_secs(29));
        assert_eq!(
            r.node.active_calls(),
            1,
            "{call}: held, within the hold timeout"
        );
        r.advance(Duration::from_secs(2));
        assert_eq!(r.node.active_calls(), 0, "{call}: past the hold timeout");
        assert!(r
            .sent()
            .iter()
            .any(|(_, m)| m.method() == Some(&sip::Method::Bye)));
    }
    let cdrs = r.cdrs();
    assert_eq!(cdrs.len(), 2);
    assert!(cdrs.iter().all(|c| c["cause"] == 41), "{cdrs:?}");
}

#[test]
fn media_timeout_hangs_up() {
    let mut r = Rig::new();
    r.send(&invite("44444", "c8", true, ""));
    let tag = to_tag(&r.sent()[1].1);
    r.send(&in_dialog("ACK", "c8", &tag, 1, "ack8", ""));
    r.advance(Duration::from_secs(11));
    assert_eq!(r.node.active_calls(), 0);
    assert!(r
        .sent()
        .iter()
        .any(|(_, m)| m.method() == Some(&sip::Method::Bye)));
    assert_eq!(r.cdrs()[0]["cause"], 41);
}

#[test]
fn session_timer_is_granted_and_enforced() {
    let mut r = Rig::new();
    r.send(&invite(
        "44444",
        "c9",
        true,
        "Session-Expires: 30\nSupported: timer\n",
    ));
    assert_eq!(r.sent()[0].1.status(), Some(422), "below Min-SE 90");
    r.send(&invite(
        "44444",
        "c9b",
        true,
        "Session-Expires: 90\nSupported: timer\n",
    ));
    let ok = r.sent().pop().unwrap().1;
    assert_eq!(
        ok.header(HeaderName::SessionExpires),
        Some("90;refresher=uac")
    );
    assert_eq!(ok.header(HeaderName::Require), Some("timer"));
}

#[test]
fn bridge_relays_ringing_and_answer_and_acks_the_callee() {
    let mut r = Rig::new();
    r.send(&invite("2001", "c10", true, ""));
    let sent = r.sent();
    let out = sent
        .iter()
        .find(|(_, m)| m.method() == Some(&sip::Method::Invite))
        .expect("outbound INVITE");
    assert_eq!(out.0, "127.0.0.1:5090".parse::<SocketAddr>().unwrap());
    assert_eq!(out.1.request_uri(), Some("sip:2001@127.0.0.1:5090"));
    assert_eq!(out.1.header(HeaderName::MaxForwards), Some("69"));
    let req = out.1.clone();
    let reply = |status: &str, body: &str| {
        let via = req.header(HeaderName::Via).unwrap();
        let from = req.header(HeaderName::From).unwrap();
        let call_id = req.header(HeaderName::CallId).unwrap();
        let ct = if body.is_empty() {
            ""
        } else {
            "Content-Type: application/sdp\n"
        };
        let len = body.replace('\n', "\r\n").len();
        format!(
            "SIP/2.0 {status}\nVia: {via}\nFrom: {from}\nTo: <sip:2001@127.0.0.1:5090>;tag=b1\nCall-ID: {call_id}\n\
CSeq: 1 INVITE\nContact: <sip:uas@127.0.0.1:5090>\n{ct}Content-Length: {len}\n\n{body}"
        )
    };
    r.send_from(&reply("180 Ringing", ""), "127.0.0.1:5090");
    assert_eq!(r.statuses(), [180]);
    let sdp =
        "v=0\no=- 1 1 IN IP4 127.0.0.1\ns=-\nc=IN IP4 127.0.0.1\nt=0 0\nm=audio 8000 RTP/AVP 0\n";
    r.send_from(&reply("200 OK", sdp), "127.0.0.1:5090");
    let sent = r.sent();
    assert!(sent
        .iter()
        .any(|(to, m)| m.method() == Some(&sip::Method::Ack)
            && *to == "127.0.0.1:5090".parse().unwrap()));
    assert!(sent
        .iter()
        .any(|(to, m)| m.status() == Some(200) && *to == CALLER.parse().unwrap()));
    // The callee hangs up: the caller gets a BYE, the CDR names the callee.
    let bye = format!(
        "BYE sip:strowger@127.0.0.1:5060 SIP/2.0\nVia: SIP/2.0/UDP 127.0.0.1:5090;branch=z9hG4bK-b2\n\
From: <sip:2001@127.0.0.1:5090>;tag=b1\nTo: {}\nCall-ID: {}\nCSeq: 2 BYE\nMax-Forwards: 70\nContent-Length: 0\n\n",
        req.header(HeaderName::From).unwrap(),
        req.header(HeaderName::CallId).unwrap()
    );
    r.send_from(&bye, "127.0.0.1:5090");
    let sent = r.sent();
    assert!(sent
        .iter()
        .any(|(to, m)| m.method() == Some(&sip::Method::Bye) && *to == CALLER.parse().unwrap()));
    assert_eq!(r.cdrs()[0]["hangup_side"], "callee");
    assert_eq!(r.cdrs()[0]["bridged_to"], "sip:2001@127.0.0.1:5090");
}

#[test]
fn busy_callee_is_relayed_to_the_caller() {
    let mut r = Rig::new();
    r.send(&invite("2002", "c11", true, ""));
    let req = r
        .sent()
        .into_iter()
        .find(|(_, m)| m.method() == Some(&sip::Method::Invite))
        .unwrap()
        .1;
    let busy = format!(
        "SIP/2.0 486 Busy Here\nVia: {}\nFrom: {}\nTo: <sip:2002@127.0.0.1:5090>;tag=b9\nCall-ID: {}\nCSeq: 1 INVITE\nContent-Length: 0\n\n",
        req.header(HeaderName::Via).unwrap(),
        req.header(HeaderName::From).unwrap(),
        req.header(HeaderName::CallId).unwrap()
    );
    r.send_from(&busy, "127.0.0.1:5090");
    let sent = r.sent();
    assert!(
        sent.iter()
            .any(|(_, m)| m.method() == Some(&sip::Method::Ack)),
        "non-2xx ACKed by the transaction layer"
    );
    assert!(sent
        .iter()
        .any(|(to, m)| m.status() == Some(486) && *to == CALLER.parse().unwrap()));
    assert_eq!(r.cdrs()[0]["sip_status"], 486);
}

#[test]
fn oversized_request_gets_513() {
    let mut r = Rig::new();
    let big = invite(
        "44444",
        "c14",
        true,
        &format!("X-Padding: {}\n", "a".repeat(70_000)),
    )
    .replace('\n', "\r\n");
    r.node.too_large(big.as_bytes(), CALLER.parse().unwrap());
    assert_eq!(r.statuses(), [513]);
    assert_eq!(r.node.active_calls(), 0);
}

#[test]
fn unknown_extension_gets_404_and_options_gets_allow() {
    let mut r = Rig::new();
    r.send(&invite("777", "c12", true, ""));
    assert_eq!(r.statuses(), [404]);
    r.send("OPTIONS sip:127.0.0.1 SIP/2.0\nVia: SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bK-o1\nFrom: <sip:a@b>;tag=1\nTo: <sip:127.0.0.1>\nCall-ID: o1\nCSeq: 1 OPTIONS\nMax-Forwards: 70\nContent-Length: 0\n\n");
    let ok = r.sent().pop().unwrap().1;
    assert_eq!(ok.status(), Some(200));
    assert!(ok.header(HeaderName::Allow).unwrap().contains("INVITE"));
}

#[test]
fn a_digest_answer_names_the_worker_that_issued_its_nonce() {
    let secret = [5; 32];
    let mut worker3 = sip::auth::Nonces::new(secret, 300, 16).with_issuer(3);
    let nonce = worker3.issue(1_000, b"");
    let register = |auth: &str| {
        let text = format!(
            "REGISTER sip:127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bK-n1\r\n\
From: <sip:1001@strowger>;tag=1\r\nTo: <sip:1001@strowger>\r\nCall-ID: n1\r\nCSeq: 2 REGISTER\r\n\
Max-Forwards: 70\r\n{auth}Content-Length: 0\r\n\r\n"
        );
        Message::parse(text.as_bytes(), true).unwrap()
    };
    let answer = format!(
        "Authorization: Digest username=\"1001\", realm=\"strowger\", cnonce=\"00ff{nonce}\", \
nonce=\"{nonce}\", uri=\"sip:127.0.0.1\", response=\"0\", qop=auth, nc=00000001\r\n"
    );
    assert_eq!(switch::nonce_owner(&register(&answer), 4), Some(3));
    assert_eq!(
        switch::nonce_owner(&register(&answer), 2),
        None,
        "no such worker"
    );
    assert_eq!(
        switch::nonce_owner(&register(""), 4),
        None,
        "no digest answer"
    );
    // A call stays on its Call-ID's worker whatever nonce its INVITE (or a BYE that carries
    // the credentials along) answers; that worker challenges a nonce of another's again. The
    // proxy role's answers (Proxy-Authorization) go to their nonce's worker.
    let request = |method: &str, auth: &str| {
        let text = format!(
            "{method} sip:1002@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bK-n2\r\n\
From: <sip:1001@strowger>;tag=1\r\nTo: <sip:1002@strowger>\r\nCall-ID: n2\r\nCSeq: 2 {method}\r\n\
Max-Forwards: 70\r\n{auth}Content-Length: 0\r\n\r\n"
        );
        Message::parse(text.as_bytes(), true).unwrap()
    };
    assert_eq!(switch::nonce_owner(&request("INVITE", &answer), 4), None);
    assert_eq!(switch::nonce_owner(&request("BYE", &answer), 4), None);
    let proxied = answer.replace("Authorization:", "Proxy-Authorization:");
    assert_eq!(
        switch::nonce_owner(&request("INVITE", &proxied), 4),
        Some(3)
    );
}
