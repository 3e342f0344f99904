//! Every timer with injected time, retransmission absorption, derived ACK/CANCEL, reliable 2xx,
//! TCP variants and RFC 2543 matching.

use super::*;
use crate::builder::ResponseBuilder;
use crate::header::HeaderName;

const MS: Duration = Duration::from_millis(1);

fn udp() -> Peer {
    Peer {
        transport: Transport::Udp,
        addr: "192.0.2.1:5060".parse().unwrap(),
    }
}

fn tcp() -> Peer {
    Peer {
        transport: Transport::Tcp,
        ..udp()
    }
}

fn layer() -> (Transactions, Instant) {
    (Transactions::new(Timers::default()), Instant::now())
}

/// A request as a UA sends it; `branch` goes into the top Via, `extra` is appended headers.
fn request(method: &str, branch: &str, cseq: u32, extra: &str) -> Vec<u8> {
    let via = if branch.is_empty() {
        String::new()
    } else {
        format!(";branch={branch}")
    };
    format!(
        "{method} sip:bob@example.com SIP/2.0\r\nVia: SIP/2.0/UDP pc.example.com:5060{via}\r\n\
Max-Forwards: 70\r\nFrom: <sip:alice@example.com>;tag=a1\r\nTo: <sip:bob@example.com>{extra}\r\n\
Call-ID: call-1\r\nCSeq: {cseq} {method}\r\nContent-Length: 0\r\n\r\n"
    )
    .into_bytes()
}

fn parse(bytes: &[u8]) -> Message {
    Message::parse(bytes, true).unwrap()
}

fn response(req: &[u8], status: u16, to_tag: Option<&str>) -> Vec<u8> {
    ResponseBuilder::new(&parse(req), status, "R", None, to_tag).finish(None)
}

fn transmits(tx: &mut Transactions) -> Vec<Transmit> {
    std::iter::from_fn(|| tx.poll_transmit()).collect()
}

/// Events other than Terminated.
fn events(tx: &mut Transactions) -> Vec<TxEvent> {
    std::iter::from_fn(|| tx.poll_event())
        .filter(|e| !matches!(e, TxEvent::Terminated(_)))
        .collect()
}

/// Fires every deadline up to `t0 + until`; returns the milliseconds (after t0) of each transmit.
fn run(tx: &mut Transactions, t0: Instant, until: Duration) -> Vec<u64> {
    let mut sent = Vec::new();
    while let Some(at) = tx.poll_timeout().filter(|&at| at <= t0 + until) {
        tx.handle_timeout(at);
        let ms = (at - t0).as_millis() as u64;
        sent.extend(transmits(tx).iter().map(|_| ms));
    }
    sent
}

const DOUBLING_TO_T2: [u64; 10] = [
    500, 1500, 3500, 7500, 11500, 15500, 19500, 23500, 27500, 31500,
];

fn first_line(t: &Transmit) -> String {
    String::from_utf8_lossy(&t.bytes)
        .lines()
        .next()
        .unwrap_or("")
        .to_string()
}

// ---- client INVITE ----

#[test]
fn timer_a_doubles_and_timer_b_times_out() {
    let (mut tx, t0) = layer();
    let inv = request("INVITE", "z9hG4bKc1", 1, "");
    let id = tx.send_request(inv.clone(), udp(), t0);
    assert_eq!(&*transmits(&mut tx)[0].bytes, &inv[..]);
    let sent = run(&mut tx, t0, Duration::from_secs(40));
    assert_eq!(sent, [500, 1500, 3500, 7500, 15500, 31500]);
    assert_eq!(events(&mut tx), [TxEvent::Timeout(id)]);
    assert!(tx.is_empty());
    assert_eq!(tx.poll_timeout(), None);
}

#[test]
fn provisional_stops_timer_a_and_b() {
    let (mut tx, t0) = layer();
    let inv = request("INVITE", "z9hG4bKc1", 1, "");
    let id = tx.send_request(inv.clone(), udp(), t0);
    transmits(&mut tx);
    let ringing = parse(&response(&inv, 180, Some("b1")));
    assert_eq!(tx.on_response(&ringing, t0 + 100 * MS), Some((id, true)));
    assert!(run(&mut tx, t0, Duration::from_secs(100)).is_empty());
    assert!(events(&mut tx).is_empty());
    assert_eq!(tx.len(), 1);
}

#[test]
fn non_2xx_to_invite_is_acked_and_timer_d_ends() {
    let (mut tx, t0) = layer();
    let inv = request(
        "INVITE",
        "z9hG4bKc1",
        7,
        "\r\nRoute: <sip:p1.example.com;lr>",
    );
    let id = tx.send_request(inv.clone(), udp(), t0);
    transmits(&mut tx);
    let busy = parse(&response(&inv, 486, Some("b9")));
    assert_eq!(tx.on_response(&busy, t0 + MS), Some((id, true)));
    let out = transmits(&mut tx);
    assert_eq!(out.len(), 1);
    let ack = parse(&out[0].bytes);
    assert_eq!(ack.method(), Some(&Method::Ack));
    assert_eq!(ack.request_uri(), Some("sip:bob@example.com"));
    assert_eq!(
        ack.header(HeaderName::Via),
        Some("SIP/2.0/UDP pc.example.com:5060;branch=z9hG4bKc1")
    );
    assert_eq!(ack.count(HeaderName::Via), 1);
    assert_eq!(ack.header(HeaderName::CSeq), Some("7 ACK"));
    assert_eq!(
        ack.header(HeaderName::To),
        Some("<sip:bob@example.com>;tag=b9")
    );
    assert_eq!(
        ack.header(HeaderName::From),
        Some("<sip:alice@example.com>;tag=a1")
    );
    assert_eq!(ack.header(HeaderName::CallId), Some("call-1"));
    assert_eq!(
        ack.header(HeaderName::Route),
        Some("<sip:p1.example.com;lr>")
    );
    // Each retransmission of the final is absorbed and answered with the same ACK, once.
    for _ in 0..2 {
        assert_eq!(tx.on_response(&busy, t0 + 2 * MS), None);
        let again = transmits(&mut tx);
        assert_eq!(again.len(), 1);
        assert!(again[0].bytes.shares(&out[0].bytes));
    }
    // Timer D: 32 s over UDP.
    assert!(run(&mut tx, t0, Duration::from_millis(32_000)).is_empty());
    assert_eq!(tx.len(), 1);
    run(&mut tx, t0, Duration::from_millis(32_001));
    assert!(tx.is_empty());
    assert_eq!(tx.on_response(&busy, t0 + Duration::from_secs(33)), None);
}

#[test]
fn every_2xx_to_invite_reaches_the_tu_until_timer_m() {
    let (mut tx, t0) = layer();
    let inv = request("INVITE", "z9hG4bKc1", 1, "");
    let id = tx.send_request(inv.clone(), udp(), t0);
    let sent = transmits(&mut tx);
    let ok = parse(&response(&inv, 200, Some("b1")));
    assert_eq!(tx.on_response(&ok, t0 + MS), Some((id, true)));
    assert_eq!(tx.on_response(&ok, t0 + 600 * MS), Some((id, false)));
    assert_eq!(tx.on_response(&ok, t0 + 1600 * MS), Some((id, false)));
    assert!(
        transmits(&mut tx).is_empty(),
        "the TU sends the ACK for a 2xx"
    );
    assert_eq!(
        sent[0].bytes.holders(),
        1,
        "the INVITE is not held through timer M"
    );
    assert!(
        tx.cancel(id, t0 + 1700 * MS).is_none(),
        "answered: no CANCEL"
    );
    assert!(run(&mut tx, t0, Duration::from_secs(40)).is_empty());
    assert!(tx.is_empty());
    assert_eq!(tx.on_response(&ok, t0 + Duration::from_secs(41)), None);
}

#[test]
fn tcp_invite_has_no_timer_a_and_zero_timer_d() {
    let (mut tx, t0) = layer();
    let inv = request("INVITE", "z9hG4bKc1", 1, "");
    let id = tx.send_request(inv.clone(), tcp(), t0);
    transmits(&mut tx);
    assert!(run(&mut tx, t0, Duration::from_secs(31)).is_empty());
    let busy = parse(&response(&inv, 486, Some("b9")));
    assert_eq!(
        tx.on_response(&busy, t0 + Duration::from_secs(31)),
        Some((id, true))
    );
    assert_eq!(transmits(&mut tx).len(), 1, "the ACK");
    assert!(tx.is_empty(), "timer D is zero over TCP");

    // Timer B still fires over TCP.
    let id = tx.send_request(request("INVITE", "z9hG4bKc2", 2, ""), tcp(), t0);
    transmits(&mut tx);
    assert!(run(&mut tx, t0, Duration::from_secs(40)).is_empty());
    assert_eq!(events(&mut tx), [TxEvent::Timeout(id)]);
}

// ---- client non-INVITE ----

#[test]
fn timer_e_caps_at_t2_and_timer_f_times_out() {
    let (mut tx, t0) = layer();
    let id = tx.send_request(request("OPTIONS", "z9hG4bKo1", 1, ""), udp(), t0);
    transmits(&mut tx);
    assert_eq!(run(&mut tx, t0, Duration::from_secs(40)), DOUBLING_TO_T2);
    assert_eq!(events(&mut tx), [TxEvent::Timeout(id)]);
    assert!(tx.is_empty());
}

#[test]
fn timer_e_is_t2_once_proceeding() {
    let (mut tx, t0) = layer();
    let req = request("BYE", "z9hG4bKo1", 2, ";tag=b1");
    let id = tx.send_request(req.clone(), udp(), t0);
    transmits(&mut tx);
    let trying = parse(&response(&req, 100, None));
    assert_eq!(tx.on_response(&trying, t0 + 200 * MS), Some((id, true)));
    let sent = run(&mut tx, t0, Duration::from_millis(13_000));
    assert_eq!(sent, [500, 4500, 8500, 12500]);
}

#[test]
fn final_to_non_invite_then_timer_k() {
    let (mut tx, t0) = layer();
    let req = request("OPTIONS", "z9hG4bKo1", 1, "");
    let id = tx.send_request(req.clone(), udp(), t0);
    let sent = transmits(&mut tx);
    let ok = parse(&response(&req, 200, Some("x")));
    assert_eq!(tx.on_response(&ok, t0 + 10 * MS), Some((id, true)));
    assert_eq!(
        tx.on_response(&ok, t0 + 20 * MS),
        None,
        "retransmission absorbed"
    );
    // No retransmissions after the final; timer K = T4.
    assert!(run(&mut tx, t0, Duration::from_millis(5_009)).is_empty());
    assert_eq!(tx.len(), 1);
    assert_eq!(
        sent[0].bytes.holders(),
        1,
        "the lingering transaction no longer holds the request"
    );
    run(&mut tx, t0, Duration::from_millis(5_010));
    assert!(tx.is_empty());
    assert!(events(&mut tx).is_empty());
}

#[test]
fn tcp_non_invite_has_no_timer_e_and_zero_timer_k() {
    let (mut tx, t0) = layer();
    let req = request("OPTIONS", "z9hG4bKo1", 1, "");
    let id = tx.send_request(req.clone(), tcp(), t0);
    transmits(&mut tx);
    assert!(run(&mut tx, t0, Duration::from_secs(10)).is_empty());
    let ok = parse(&response(&req, 200, Some("x")));
    assert_eq!(
        tx.on_response(&ok, t0 + Duration::from_secs(10)),
        Some((id, true))
    );
    assert!(tx.is_empty());

    let id = tx.send_request(request("OPTIONS", "z9hG4bKo2", 2, ""), tcp(), t0);
    transmits(&mut tx);
    assert!(run(&mut tx, t0, Duration::from_secs(40)).is_empty());
    assert_eq!(events(&mut tx), [TxEvent::Timeout(id)], "timer F");
}

#[test]
fn responses_match_branch_and_cseq_method_only() {
    let (mut tx, t0) = layer();
    let req = request("OPTIONS", "z9hG4bKo1", 1, "");
    tx.send_request(req.clone(), udp(), t0);
    let other_branch = response(&request("OPTIONS", "z9hG4bKzz", 1, ""), 200, None);
    let other_method = response(&request("INFO", "z9hG4bKo1", 1, ""), 200, None);
    assert_eq!(tx.on_response(&parse(&other_branch), t0), None);
    assert_eq!(tx.on_response(&parse(&other_method), t0), None);
    assert_eq!(
        tx.on_response(&parse(&req), t0),
        None,
        "a request is no response"
    );
}

// ---- CANCEL, client side ----

#[test]
fn cancel_waits_for_a_provisional() {
    let (mut tx, t0) = layer();
    let inv = request(
        "INVITE",
        "z9hG4bKc1",
        5,
        "\r\nRoute: <sip:p1.example.com;lr>",
    );
    let id = tx.send_request(inv.clone(), udp(), t0);
    transmits(&mut tx);
    let cancel = tx.cancel(id, t0 + MS).unwrap();
    assert_eq!(
        tx.cancel(id, t0 + MS),
        Some(cancel),
        "asking again gives the same CANCEL"
    );
    assert!(
        transmits(&mut tx).is_empty(),
        "no CANCEL before a provisional"
    );
    assert_eq!(
        run(&mut tx, t0, 600 * MS),
        [500],
        "only the INVITE is retransmitted"
    );

    let ringing = parse(&response(&inv, 180, Some("b1")));
    assert_eq!(tx.on_response(&ringing, t0 + 700 * MS), Some((id, true)));
    let out = transmits(&mut tx);
    assert_eq!(out.len(), 1);
    let c = parse(&out[0].bytes);
    assert_eq!(c.method(), Some(&Method::Cancel));
    assert_eq!(c.request_uri(), Some("sip:bob@example.com"));
    assert_eq!(
        c.header(HeaderName::Via),
        Some("SIP/2.0/UDP pc.example.com:5060;branch=z9hG4bKc1")
    );
    assert_eq!(c.header(HeaderName::CSeq), Some("5 CANCEL"));
    assert_eq!(c.header(HeaderName::To), Some("<sip:bob@example.com>"));
    assert_eq!(c.header(HeaderName::Route), Some("<sip:p1.example.com;lr>"));

    // The CANCEL is its own non-INVITE transaction (timer E) matched by CSeq method.
    assert_eq!(run(&mut tx, t0, 1200 * MS), [1200]);
    let ok = parse(&response(&out[0].bytes, 200, Some("b1")));
    assert_eq!(tx.on_response(&ok, t0 + 1300 * MS), Some((cancel, true)));
    let terminated = parse(&response(&inv, 487, Some("b1")));
    assert_eq!(
        tx.on_response(&terminated, t0 + 1400 * MS),
        Some((id, true))
    );
    assert_eq!(
        first_line(&transmits(&mut tx)[0]),
        "ACK sip:bob@example.com SIP/2.0"
    );
}

#[test]
fn a_cancel_may_say_why() {
    let (mut tx, t0) = layer();
    let inv = request("INVITE", "z9hG4bKc2", 1, "");
    let id = tx.send_request(inv.clone(), udp(), t0);
    transmits(&mut tx);
    let ringing = parse(&response(&inv, 180, Some("b1")));
    tx.on_response(&ringing, t0 + MS);
    let why = "SIP;cause=200;text=\"Call completed elsewhere\"";
    tx.cancel_because(id, Some(why), t0 + MS).unwrap();
    let out = transmits(&mut tx);
    let c = parse(&out[0].bytes);
    assert_eq!(c.method(), Some(&Method::Cancel));
    assert_eq!(c.header(HeaderName::Reason), Some(why));
}

#[test]
fn deferred_cancel_is_dropped_by_a_final() {
    let (mut tx, t0) = layer();
    let inv = request("INVITE", "z9hG4bKc1", 1, "");
    let id = tx.send_request(inv.clone(), udp(), t0);
    transmits(&mut tx);
    let cancel = tx.cancel(id, t0).unwrap();
    let busy = parse(&response(&inv, 486, Some("b1")));
    tx.on_response(&busy, t0 + MS);
    let out = transmits(&mut tx);
    assert_eq!(out.len(), 1);
    assert_eq!(first_line(&out[0]), "ACK sip:bob@example.com SIP/2.0");
    let ended: Vec<_> = std::iter::from_fn(|| tx.poll_event()).collect();
    assert!(ended.contains(&TxEvent::Terminated(TxId::Client(cancel))));
    assert_eq!(tx.len(), 1);
    assert_eq!(
        tx.cancel(id, t0 + MS),
        Some(cancel),
        "the stale id, harmless"
    );
    assert!(transmits(&mut tx).is_empty());
}

#[test]
fn cancel_needs_a_pending_invite() {
    let (mut tx, t0) = layer();
    let opt = tx.send_request(request("OPTIONS", "z9hG4bKo1", 1, ""), udp(), t0);
    assert_eq!(tx.cancel(opt, t0), None);
    let inv = request("INVITE", "z9hG4bKc1", 1, "");
    let id = tx.send_request(inv.clone(), udp(), t0);
    tx.on_response(&parse(&response(&inv, 200, Some("b"))), t0);
    assert_eq!(tx.cancel(id, t0), None, "already answered");
}

#[test]
fn timer_b_ends_a_deferred_cancel_too() {
    let (mut tx, t0) = layer();
    let id = tx.send_request(request("INVITE", "z9hG4bKc1", 1, ""), udp(), t0);
    tx.cancel(id, t0).unwrap();
    run(&mut tx, t0, Duration::from_secs(40));
    assert_eq!(events(&mut tx), [TxEvent::Timeout(id)]);
    assert!(tx.is_empty());
}

/// A callee that answers the CANCEL but never its INVITE (or a callee gone quiet): the INVITE
/// times out 64*T1 after the CANCEL went out, a later provisional notwithstanding, and leaves
/// nothing behind. Both ways a CANCEL starts: at once in Proceeding, and held for a provisional.
#[test]
fn a_cancelled_invite_without_a_final_ends_64_t1_after_its_cancel() {
    for held in [false, true] {
        let (mut tx, t0) = layer();
        let inv = request("INVITE", "z9hG4bKc1", 1, "");
        let id = tx.send_request(inv.clone(), udp(), t0);
        let ringing = parse(&response(&inv, 180, Some("b1")));
        let (cancel, sent_at) = if held {
            let cancel = tx.cancel(id, t0 + MS).unwrap();
            tx.on_response(&ringing, t0 + 700 * MS);
            (cancel, t0 + 700 * MS)
        } else {
            tx.on_response(&ringing, t0 + 100 * MS);
            (tx.cancel(id, t0 + 1000 * MS).unwrap(), t0 + 1000 * MS)
        };
        let out = transmits(&mut tx);
        let c = out.last().unwrap();
        assert_eq!(parse(&c.bytes).method(), Some(&Method::Cancel), "{held}");
        let ok = parse(&response(&c.bytes, 200, Some("b1")));
        assert_eq!(tx.on_response(&ok, sent_at + 50 * MS), Some((cancel, true)));
        // A provisional after the CANCEL does not stop the wait for the final.
        tx.on_response(&ringing, sent_at + 100 * MS);
        let wait = Timers::default().t1 * 64;
        run(&mut tx, t0, sent_at - t0 + wait - MS);
        let waiting = BTreeMap::from([("client INVITE Proceeding".to_string(), 1)]);
        assert_eq!(tx.kinds(), waiting, "{held}: only the INVITE, on its timer");
        run(&mut tx, t0, sent_at - t0 + wait);
        assert_eq!(events(&mut tx), [TxEvent::Timeout(id)], "{held}");
        assert!(tx.is_empty(), "{held}: {:?}", tx.kinds());
        assert_eq!(tx.poll_timeout(), None);
    }
}

// ---- server INVITE ----

#[test]
fn invite_retransmission_resends_the_latest_provisional() {
    let (mut tx, t0) = layer();
    let inv = request("INVITE", "z9hG4bKs1", 1, "");
    let Incoming::New(id) = tx.on_request(&parse(&inv), udp(), t0) else {
        panic!("new")
    };
    assert_eq!(
        tx.on_request(&parse(&inv), udp(), t0),
        Incoming::Retransmission
    );
    assert!(
        transmits(&mut tx).is_empty(),
        "nothing to re-send yet, and no auto 100"
    );
    tx.respond(id, 100, response(&inv, 100, None), t0);
    tx.respond(id, 180, response(&inv, 180, Some("t")), t0);
    assert_eq!(transmits(&mut tx).len(), 2);
    assert_eq!(
        tx.on_request(&parse(&inv), udp(), t0),
        Incoming::Retransmission
    );
    let out = transmits(&mut tx);
    assert_eq!(out.len(), 1);
    assert_eq!(first_line(&out[0]), "SIP/2.0 180 R");
    assert_eq!(out[0].to, udp());
    assert!(run(&mut tx, t0, Duration::from_secs(100)).is_empty());
    assert_eq!(tx.len(), 1, "Proceeding has no timer: the TU must answer");
}

#[test]
fn timer_g_retransmits_until_ack_then_timer_i() {
    let (mut tx, t0) = layer();
    let inv = request("INVITE", "z9hG4bKs1", 1, "");
    let Incoming::New(id) = tx.on_request(&parse(&inv), udp(), t0) else {
        panic!("new")
    };
    tx.respond(id, 486, response(&inv, 486, Some("t")), t0);
    assert_eq!(transmits(&mut tx).len(), 1);
    assert_eq!(run(&mut tx, t0, 4 * 1000 * MS), [500, 1500, 3500]);
    assert_eq!(
        tx.on_request(&parse(&inv), udp(), t0 + 4000 * MS),
        Incoming::Retransmission
    );
    assert_eq!(transmits(&mut tx).len(), 1);

    let ack = request("ACK", "z9hG4bKs1", 1, ";tag=t");
    assert_eq!(
        tx.on_request(&parse(&ack), udp(), t0 + 5000 * MS),
        Incoming::AckNon2xx
    );
    assert_eq!(
        tx.on_request(&parse(&ack), udp(), t0 + 6000 * MS),
        Incoming::AckNon2xx
    );
    // Confirmed: no more G; timer I = T4 after the first ACK.
    assert!(run(&mut tx, t0, 9999 * MS).is_empty());
    assert_eq!(tx.len(), 1);
    run(&mut tx, t0, 10_000 * MS);
    assert!(tx.is_empty());
    assert!(events(&mut tx).is_empty());
}

#[test]
fn timer_h_reports_a_missing_ack() {
    let (mut tx, t0) = layer();
    let inv = request("INVITE", "z9hG4bKs1", 1, "");
    let Incoming::New(id) = tx.on_request(&parse(&inv), udp(), t0) else {
        panic!("new")
    };
    tx.respond(id, 404, response(&inv, 404, Some("t")), t0);
    transmits(&mut tx);
    assert_eq!(run(&mut tx, t0, Duration::from_secs(40)), DOUBLING_TO_T2);
    assert_eq!(events(&mut tx), [TxEvent::ServerNoAck(id)]);
    assert!(tx.is_empty());
}

#[test]
fn tcp_invite_server_has_no_timer_g_and_zero_timer_i() {
    let (mut tx, t0) = layer();
    let inv = request("INVITE", "z9hG4bKs1", 1, "");
    let Incoming::New(id) = tx.on_request(&parse(&inv), tcp(), t0) else {
        panic!("new")
    };
    tx.respond(id, 486, response(&inv, 486, Some("t")), t0);
    assert_eq!(transmits(&mut tx)[0].to, tcp());
    assert!(run(&mut tx, t0, Duration::from_secs(5)).is_empty());
    let ack = request("ACK", "z9hG4bKs1", 1, ";tag=t");
    assert_eq!(
        tx.on_request(&parse(&ack), tcp(), t0 + 5000 * MS),
        Incoming::AckNon2xx
    );
    assert!(tx.is_empty(), "timer I is zero over TCP");

    // Timer H still runs over TCP.
    let inv = request("INVITE", "z9hG4bKs2", 2, "");
    let Incoming::New(id) = tx.on_request(&parse(&inv), tcp(), t0) else {
        panic!("new")
    };
    tx.respond(id, 486, response(&inv, 486, Some("t")), t0);
    transmits(&mut tx);
    assert!(run(&mut tx, t0, Duration::from_secs(40)).is_empty());
    assert_eq!(events(&mut tx), [TxEvent::ServerNoAck(id)]);
}

#[test]
fn reliable_2xx_stops_on_ack() {
    let (mut tx, t0) = layer();
    let inv = request("INVITE", "z9hG4bKs1", 1, "");
    let Incoming::New(id) = tx.on_request(&parse(&inv), udp(), t0) else {
        panic!("new")
    };
    tx.respond(id, 200, response(&inv, 200, Some("t")), t0);
    let ok = transmits(&mut tx);
    assert_eq!(run(&mut tx, t0, 4 * 1000 * MS), [500, 1500, 3500]);
    // An INVITE retransmission is absorbed with the 2xx (RFC 6026 Accepted), not a new call.
    assert_eq!(
        tx.on_request(&parse(&inv), udp(), t0 + 3600 * MS),
        Incoming::Retransmission
    );
    let again = transmits(&mut tx);
    assert!(again[0].bytes.shares(&ok[0].bytes), "shared, not copied");
    drop(again);
    // The ACK for a 2xx has its own branch: matched by Call-ID and CSeq, handed to the TU.
    let ack = request("ACK", "z9hG4bKnew", 1, ";tag=t");
    assert_eq!(
        tx.on_request(&parse(&ack), udp(), t0 + 4000 * MS),
        Incoming::Ack
    );
    // The ACK proves the 2xx arrived: the transaction lingers for timer L without it, and a
    // late INVITE retransmission is absorbed in silence.
    assert_eq!(ok[0].bytes.holders(), 1, "the 2xx is no longer held");
    assert_eq!(
        tx.on_request(&parse(&inv), udp(), t0 + 4100 * MS),
        Incoming::Retransmission
    );
    assert!(transmits(&mut tx).is_empty());
    assert_eq!(tx.len(), 1);
    assert!(run(&mut tx, t0, Duration::from_secs(100)).is_empty());
    assert!(events(&mut tx).is_empty());
    assert!(tx.is_empty(), "timer L ended the Accepted state");
}

#[test]
fn unacked_2xx_gives_up_after_64_t1() {
    let (mut tx, t0) = layer();
    let inv = request("INVITE", "z9hG4bKs1", 9, "");
    let Incoming::New(id) = tx.on_request(&parse(&inv), tcp(), t0) else {
        panic!("new")
    };
    tx.respond(id, 200, response(&inv, 200, Some("t")), t0);
    transmits(&mut tx);
    // Retransmitted even over TCP: a later hop may be UDP (§13.3.1.4).
    assert_eq!(run(&mut tx, t0, Duration::from_secs(40)), DOUBLING_TO_T2);
    assert_eq!(
        events(&mut tx),
        [TxEvent::AckTimeout {
            call_id: "call-1".into(),
            cseq: 9
        }]
    );
    assert!(tx.is_empty());
}

#[test]
fn tu_retransmits_2xx_itself_when_asked() {
    let mut tx = Transactions::new(Timers::default()).with_reliable_2xx(false);
    let t0 = Instant::now();
    let inv = request("INVITE", "z9hG4bKs1", 1, "");
    let Incoming::New(id) = tx.on_request(&parse(&inv), udp(), t0) else {
        panic!("new")
    };
    let ok = response(&inv, 200, Some("t"));
    tx.respond(id, 200, ok.clone(), t0);
    assert!(run(&mut tx, t0, 1000 * MS).is_empty());
    tx.respond(id, 200, ok, t0 + 1000 * MS);
    tx.respond(id, 486, response(&inv, 486, Some("t")), t0 + 1000 * MS);
    assert_eq!(
        transmits(&mut tx).len(),
        2,
        "the 2xx twice, the late 486 never"
    );
    run(&mut tx, t0, Duration::from_secs(40));
    assert!(
        events(&mut tx).is_empty(),
        "no AckTimeout: the TU owns retransmission"
    );
    assert!(tx.is_empty());
}

// ---- server non-INVITE ----

#[test]
fn non_invite_retransmission_and_timer_j() {
    let (mut tx, t0) = layer();
    let req = request("OPTIONS", "z9hG4bKn1", 1, "");
    let Incoming::New(id) = tx.on_request(&parse(&req), udp(), t0) else {
        panic!("new")
    };
    assert_eq!(
        tx.on_request(&parse(&req), udp(), t0),
        Incoming::Retransmission
    );
    assert!(transmits(&mut tx).is_empty(), "Trying: absorbed silently");
    tx.respond(id, 200, response(&req, 200, Some("t")), t0);
    assert_eq!(transmits(&mut tx).len(), 1);
    for _ in 0..3 {
        assert_eq!(
            tx.on_request(&parse(&req), udp(), t0 + MS),
            Incoming::Retransmission
        );
        assert_eq!(
            transmits(&mut tx).len(),
            1,
            "exactly once per retransmission"
        );
    }
    assert!(
        run(&mut tx, t0, 31_999 * MS).is_empty(),
        "no timer G for non-INVITE"
    );
    assert_eq!(tx.len(), 1);
    run(&mut tx, t0, 32_000 * MS);
    assert!(tx.is_empty());
    // After J the same request is new again.
    assert!(matches!(
        tx.on_request(&parse(&req), udp(), t0 + 33_000 * MS),
        Incoming::New(_)
    ));
}

#[test]
fn tcp_timer_j_is_zero() {
    let (mut tx, t0) = layer();
    let req = request("OPTIONS", "z9hG4bKn1", 1, "");
    let Incoming::New(id) = tx.on_request(&parse(&req), tcp(), t0) else {
        panic!("new")
    };
    tx.respond(id, 200, response(&req, 200, Some("t")), t0);
    assert!(tx.is_empty());
    assert_eq!(tx.poll_timeout(), None);
}

// ---- matching ----

#[test]
fn server_matching_uses_branch_sent_by_and_method() {
    let (mut tx, t0) = layer();
    let inv = request("INVITE", "z9hG4bKs1", 1, "");
    let Incoming::New(invite) = tx.on_request(&parse(&inv), udp(), t0) else {
        panic!("new")
    };
    // Same branch, other sent-by: another transaction.
    let moved = String::from_utf8(inv.clone())
        .unwrap()
        .replace("pc.example.com", "other.example.com");
    assert!(matches!(
        tx.on_request(&parse(moved.as_bytes()), udp(), t0),
        Incoming::New(_)
    ));
    // CANCEL: same branch, its own transaction, pointing at the INVITE.
    let cancel = request("CANCEL", "z9hG4bKs1", 1, "");
    let Incoming::Cancel {
        cancel: c,
        invite: Some(i),
    } = tx.on_request(&parse(&cancel), udp(), t0)
    else {
        panic!("cancel")
    };
    assert_eq!(i, invite);
    assert_eq!(
        tx.on_request(&parse(&cancel), udp(), t0),
        Incoming::Retransmission
    );
    tx.respond(c, 200, response(&cancel, 200, Some("t")), t0);
    tx.respond(i, 487, response(&inv, 487, Some("t")), t0);
    let out = transmits(&mut tx);
    assert_eq!(out.len(), 2);
    assert_eq!(
        tx.on_request(&parse(&cancel), udp(), t0),
        Incoming::Retransmission
    );
    assert_eq!(first_line(&transmits(&mut tx)[0]), "SIP/2.0 200 R");
    // A CANCEL for nothing: the TU answers 481.
    let stray = request("CANCEL", "z9hG4bKzz", 1, "");
    assert!(matches!(
        tx.on_request(&parse(&stray), udp(), t0),
        Incoming::Cancel { invite: None, .. }
    ));
    // An ACK matching nothing goes to the TU.
    let ack = request("ACK", "z9hG4bKzz", 3, ";tag=x");
    assert_eq!(tx.on_request(&parse(&ack), udp(), t0), Incoming::Ack);
}

#[test]
fn rfc2543_requests_match_without_a_cookie() {
    let (mut tx, t0) = layer();
    for branch in ["", "old-style-1"] {
        let inv = request("INVITE", branch, 1, "");
        let Incoming::New(id) = tx.on_request(&parse(&inv), udp(), t0) else {
            panic!("new")
        };
        assert_eq!(
            tx.on_request(&parse(&inv), udp(), t0),
            Incoming::Retransmission
        );
        tx.respond(id, 486, response(&inv, 486, Some("t")), t0);
        transmits(&mut tx);
        let cancel = request("CANCEL", branch, 1, "");
        assert!(matches!(
            tx.on_request(&parse(&cancel), udp(), t0),
            Incoming::Cancel { invite: Some(i), .. } if i == id
        ));
        // The ACK carries our To tag, which the INVITE did not have.
        let ack = request("ACK", branch, 1, ";tag=t");
        assert_eq!(tx.on_request(&parse(&ack), udp(), t0), Incoming::AckNon2xx);
        let next = request("INVITE", branch, 2, "");
        assert!(matches!(
            tx.on_request(&parse(&next), udp(), t0),
            Incoming::New(_)
        ));
        // Non-INVITE: the To tag counts.
        let bye = request("BYE", branch, 3, ";tag=t");
        assert!(matches!(
            tx.on_request(&parse(&bye), udp(), t0),
            Incoming::New(_)
        ));
        assert_eq!(
            tx.on_request(&parse(&bye), udp(), t0),
            Incoming::Retransmission
        );
        let bye2 = request("BYE", branch, 3, ";tag=other");
        assert!(matches!(
            tx.on_request(&parse(&bye2), udp(), t0),
            Incoming::New(_)
        ));
        tx = Transactions::new(Timers::default());
    }
}

#[test]
fn junk_and_stale_ids_are_harmless() {
    let (mut tx, t0) = layer();
    let no_via = b"OPTIONS sip:a@b SIP/2.0\r\nCSeq: 1 OPTIONS\r\nCall-ID: x\r\n\r\n";
    assert_eq!(tx.on_request(&parse(no_via), udp(), t0), Incoming::Invalid);
    let no_cseq = b"INVITE sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP h\r\n\r\n";
    assert_eq!(tx.on_request(&parse(no_cseq), udp(), t0), Incoming::Invalid);
    let resp = b"SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP h;branch=z9hG4bKq\r\nCSeq: 1 INVITE\r\n\r\n";
    assert_eq!(tx.on_response(&parse(resp), t0), None);
    // A request the layer cannot parse still gets a transaction that times out.
    let id = tx.send_request(b"garbage".to_vec(), udp(), t0);
    run(&mut tx, t0, Duration::from_secs(40));
    assert_eq!(events(&mut tx), [TxEvent::Timeout(id)]);
    assert_eq!(tx.cancel(id, t0), None);
    tx.respond(ServerTxId(12345), 200, b"x".to_vec(), t0);
    assert!(transmits(&mut tx).is_empty() && tx.is_empty());
}

#[test]
fn layer_can_move_between_threads() {
    fn send<T: Send>() {}
    send::<Transactions>();
}

#[test]
fn a_backlog_of_timers_is_swept_in_slices() {
    let (mut tx, t0) = layer();
    let n = TIMERS_PER_CALL + 10;
    for i in 0..n {
        let req = request("OPTIONS", &format!("z9hG4bKs{i}"), 1, "");
        let Incoming::New(id) = tx.on_request(&parse(&req), udp(), t0) else {
            panic!("new")
        };
        tx.respond(id, 200, response(&req, 200, Some("t")), t0);
    }
    transmits(&mut tx);
    let late = t0 + 40_000 * MS;
    tx.handle_timeout(late);
    assert_eq!(tx.len(), 10, "one slice ended");
    assert!(
        tx.poll_timeout().is_some_and(|at| at <= late),
        "the rest is due at once"
    );
    tx.handle_timeout(late);
    assert!(tx.is_empty());
}
