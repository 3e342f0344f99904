//! The registration state machine with injected time: challenge, refresh, failover, back-off.

use super::*;
use sip::transaction::Transport;

fn peer(s: &str) -> Peer {
    Peer {
        transport: Transport::Udp,
        addr: s.parse().unwrap(),
    }
}

fn account() -> Account {
    Account {
        auth_user: "alice".into(),
        password: "secret".into(),
        uri: "sip:provider.test".into(),
        expires: 600,
    }
}

/// A response to our REGISTER with `extra` header lines.
fn response(status: u16, extra: &str) -> Message {
    let text = format!(
        "SIP/2.0 {status} Whatever\r\nVia: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bK-sw1\r\nFrom: <sip:alice@provider.test>;tag=a\r\nTo: <sip:alice@provider.test>;tag=b\r\nCall-ID: r@x\r\nCSeq: 1 REGISTER\r\n{extra}Content-Length: 0\r\n\r\n"
    );
    Message::parse(text.as_bytes(), true).unwrap()
}

const CHALLENGE: &str =
    "WWW-Authenticate: Digest realm=\"provider.test\", nonce=\"n1\", qop=\"auth\"\r\n";

fn sent(n: &Next) -> (Peer, u32, Option<&str>) {
    match n {
        Next::Send { to, cseq, auth, .. } => (*to, *cseq, auth.as_ref().map(|(h, _)| *h)),
        other => panic!("expected a REGISTER, got {other:?}"),
    }
}

#[test]
fn challenge_answered_then_refreshed_before_expiry() {
    let t0 = Instant::now();
    let targets = [peer("192.0.2.10:5060"), peer("192.0.2.11:5060")];
    let mut r = Registration::new(account(), t0);
    assert_eq!(r.poll(t0, &[], false), Next::Resolve);
    let (next, _) = r.resolved(t0, &targets);
    assert_eq!(sent(&next), (targets[0], 1, None));
    // 401: answered once, CSeq up, to the same server.
    let (next, outcome) = r.on_response(&response(401, CHALLENGE), t0, &targets, "c1");
    assert_eq!(outcome, Outcome::Retrying);
    assert_eq!(sent(&next), (targets[0], 2, Some("Authorization")));
    let Next::Send {
        auth: Some((_, header)),
        ..
    } = &next
    else {
        unreachable!()
    };
    let a = Authorization::parse(header).unwrap();
    assert_eq!(
        (a.username.as_str(), a.uri.as_str(), a.nc.as_deref()),
        ("alice", "sip:provider.test", Some("00000001"))
    );
    assert!(a.verify(
        &sip::auth::ha1(a.algorithm, "alice", "provider.test", "secret"),
        "REGISTER"
    ));
    // 200 granting 120 s (our contact's expires wins over the header): refresh at 60 s.
    let ok = response(
        200,
        "Contact: <sip:alice@198.51.100.9:5060>;expires=3600, <sip:alice@192.0.2.1:5060>;expires=120\r\nExpires: 900\r\n",
    );
    let (next, outcome) = r.on_response(&ok, t0, &targets, "c2");
    assert_eq!(next, Next::Wait);
    assert_eq!(
        outcome,
        Outcome::Registered {
            at: targets[0],
            granted: 120
        }
    );
    assert!(r.registered(t0 + Duration::from_secs(119)));
    assert!(!r.registered(t0 + Duration::from_secs(120)));
    assert_eq!(r.deadline(), Some(t0 + Duration::from_secs(60)));
    assert_eq!(
        r.poll(t0 + Duration::from_secs(59), &targets, true),
        Next::Wait
    );
    // The refresh: same server, next CSeq, a fresh challenge answered again.
    let t1 = t0 + Duration::from_secs(60);
    assert_eq!(sent(&r.poll(t1, &targets, true)), (targets[0], 3, None));
    let (next, _) = r.on_response(&response(401, CHALLENGE), t1, &targets, "c3");
    assert_eq!(sent(&next), (targets[0], 4, Some("Authorization")));
    // A long registration is refreshed a minute before it ends.
    assert_eq!(refresh_after(3600), Duration::from_secs(3540));
    assert_eq!(refresh_after(60), Duration::from_secs(30));
}

#[test]
fn a_wrong_password_backs_off_instead_of_looping() {
    let t0 = Instant::now();
    let targets = [peer("192.0.2.10:5060")];
    let mut r = Registration::new(account(), t0);
    r.poll(t0, &targets, true);
    let (next, _) = r.on_response(&response(401, CHALLENGE), t0, &targets, "c");
    assert_eq!(sent(&next).2, Some("Authorization"));
    // The answer is challenged again (not stale): refused credentials, a back-off of 5 s.
    let (next, outcome) = r.on_response(&response(401, CHALLENGE), t0, &targets, "c");
    assert_eq!(next, Next::Wait);
    assert!(matches!(outcome, Outcome::Failed { retry: Some(d), .. } if d == BACKOFF_MIN));
    // A stale nonce is answered anew.
    let t1 = t0 + BACKOFF_MIN;
    r.poll(t1, &targets, true);
    r.on_response(
        &response(407, &CHALLENGE.replace("WWW-", "Proxy-")),
        t1,
        &targets,
        "c",
    );
    let stale = CHALLENGE.replace("qop", "stale=true, qop");
    let (next, _) = r.on_response(&response(401, &stale), t1, &targets, "c");
    assert_eq!(sent(&next).2, Some("Authorization"));
}

#[test]
fn no_answer_fails_over_to_the_next_server_then_backs_off_doubling() {
    let t0 = Instant::now();
    let targets = [peer("192.0.2.10:5060"), peer("192.0.2.11:5060")];
    let mut r = Registration::new(account(), t0);
    assert_eq!(sent(&r.poll(t0, &targets, true)).0, targets[0]);
    // Timer F on the first: the second at once.
    let t1 = t0 + Duration::from_secs(32);
    let (next, outcome) = r.on_timeout(t1, &targets);
    assert_eq!(sent(&next).0, targets[1]);
    assert!(matches!(outcome, Outcome::Failed { retry: None, .. }));
    // 503 from the second: the round is over; 5 s, then 10 s, 20 s … up to 300 s.
    let (next, outcome) = r.on_response(&response(503, ""), t1, &targets, "c");
    assert_eq!(next, Next::Wait);
    assert!(
        matches!(outcome, Outcome::Failed { retry: Some(d), .. } if d == Duration::from_secs(5))
    );
    let mut waits = Vec::new();
    for _ in 0..8 {
        let now = r.deadline().unwrap();
        waits.push((now - t1).as_secs());
        let first = sent(&r.poll(now, &targets, true)).0;
        assert_eq!(first, targets[0], "a new round starts from the best server");
        r.on_timeout(now, &targets);
        let (_, outcome) = r.on_timeout(now, &targets);
        let Outcome::Failed { retry: Some(d), .. } = outcome else {
            panic!("{outcome:?}")
        };
        assert!(d <= BACKOFF_MAX);
        let _ = d;
    }
    let gaps: Vec<u64> = waits.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(gaps, [10, 20, 40, 80, 160, 300, 300]);
    // Success resets the back-off, and the working server is kept for refreshes.
    let now = r.deadline().unwrap();
    r.poll(now, &targets, true);
    let (next, _) = r.on_timeout(now, &targets);
    assert_eq!(sent(&next).0, targets[1]);
    let (_, outcome) = r.on_response(&response(200, "Expires: 600\r\n"), now, &targets, "c");
    assert_eq!(
        outcome,
        Outcome::Registered {
            at: targets[1],
            granted: 600
        }
    );
    let refresh = r.deadline().unwrap();
    assert_eq!(sent(&r.poll(refresh, &targets, true)).0, targets[1]);
}

#[test]
fn interval_too_brief_is_retried_with_min_expires_and_shutdown_unregisters() {
    let t0 = Instant::now();
    let targets = [peer("192.0.2.10:5060")];
    let mut r = Registration::new(account(), t0);
    r.poll(t0, &targets, true);
    let (next, _) = r.on_response(&response(423, "Min-Expires: 1800\r\n"), t0, &targets, "c");
    assert!(matches!(
        next,
        Next::Send {
            expires: 1800,
            cseq: 2,
            ..
        }
    ));
    r.on_response(&response(200, "Expires: 1800\r\n"), t0, &targets, "c");
    let bye = r.unregister(t0 + Duration::from_secs(1)).unwrap();
    assert!(matches!(
        bye,
        Next::Send {
            expires: 0,
            cseq: 3,
            ..
        }
    ));
    assert!(r.unregister(t0 + Duration::from_secs(1)).is_none());
    // An expired DNS answer is looked up again before the refresh.
    let mut r = Registration::new(account(), t0);
    assert_eq!(r.poll(t0, &targets, false), Next::Resolve);
    let (next, outcome) = r.resolved(t0, &[]);
    assert_eq!(next, Next::Wait);
    assert!(matches!(
        outcome,
        Some(Outcome::Failed { retry: Some(_), .. })
    ));
}
