//! The proxy role forking a call to every contact of its user (RFC 3261 §16.6, §16.7), on the
//! simulated network: contacts of equal q ring at once, lower q in turn; the first 2xx wins and
//! the rest are cancelled, a 6xx stops the fork, and with no answer the best final response
//! (challenges merged) goes to the caller.

use crate::net::*;
use sip::transaction::Transport;
use sip::{HeaderName, Method};

const DESK: &str = "127.0.0.1:5101";
const MOBILE: &str = "127.0.0.1:5102";
const HOME: &str = "127.0.0.1:5103";

/// A proxy for example.com (`proxy` adds to its `[proxy]` table) with user 1002's phones at
/// `phones` (address, Contact q parameter, answer policy) registered; returns the net, the
/// caller and the phones.
fn forking(seed: u64, proxy: &str, phones: &[(&str, &str, Policy)]) -> (Net, Id, Vec<Id>) {
    let mut n = Net::new(seed);
    let toml = config(&format!(
        "[registrar]\nauthenticate = false\nkeepalive_s = 0\n[proxy]\ndomains = [\"example.com\"]\n{proxy}"
    ));
    let sw = n.switch(&toml, &[SW], 1);
    n.sw(sw).shared.store.add_user("1002", "strowger", "pw");
    let mut ids = Vec::new();
    for (at, q, policy) in phones {
        let p = n.ua(at, "1002");
        n.agent(p).policy = policy.clone();
        n.agent(p).contact_params = q.to_string();
        n.register(p, SW, "strowger", 600);
        ids.push(p);
    }
    assert!(n.run_until(secs(2), |n| ids
        .iter()
        .all(|&p| n.agent(p).register_statuses == [200])));
    let a = n.ua(ALICE, "alice");
    (n, a, ids)
}

/// Rings, then answers `status` after `after` seconds.
fn rings(status: u16, after: u64) -> Policy {
    Policy {
        provisional: vec![(180, false)],
        status,
        after: secs(after),
    }
}

/// The phone's INVITEs and CANCELs.
fn got(n: &mut Net, p: Id) -> (usize, usize) {
    let calls = &n.agent(p).calls;
    let cancels = calls
        .iter()
        .map(|c| c.requests_of(&Method::Cancel).len())
        .sum();
    (calls.len(), cancels)
}

#[test]
fn equal_q_rings_in_parallel_the_first_answer_wins_and_the_other_is_cancelled() {
    let (mut n, a, p) = forking(
        40,
        "",
        &[(DESK, "", rings(200, 1)), (MOBILE, "", rings(200, 5))],
    );
    let c = n.invite(a, "sip:1002@example.com", SW);
    assert!(n.run_until(secs(3), confirmed(a, c)));
    assert_eq!(got(&mut n, p[0]), (1, 0));
    assert_eq!(
        got(&mut n, p[1]),
        (1, 1),
        "the mobile rang and was cancelled"
    );
    let cancel = n.agent(p[1]).last().requests_of(&Method::Cancel)[0].clone();
    assert_eq!(
        cancel.header(HeaderName::Reason),
        Some("SIP;cause=200;text=\"Call completed elsewhere\"")
    );
    n.run_for(secs(2));
    assert_eq!(n.agent(p[1]).last().state, State::Ended);
    assert_eq!(n.sent(addr(MOBILE), addr(SW), "487").len(), 1);
    let st = invite_statuses(&mut n, a, c);
    assert!(st.contains(&180) && !st.contains(&487), "{st:?}");
    assert_eq!(st.last(), Some(&200));
    n.bye(a, c);
    assert!(n.run_until(secs(2), |n| n.agent(p[0]).last().state == State::Ended));
    n.run_for(secs(40));
    assert_no_tx_events(&mut n, &[a, p[0], p[1]], "");
}

/// Both phones answer at the same moment: the first 2xx goes on the caller's transaction and
/// the second is forwarded too (§16.7 step 5), a second dialog the caller ACKs and ends.
#[test]
fn a_second_2xx_is_forwarded_to_the_caller_too() {
    let (mut n, a, p) = forking(
        41,
        "",
        &[(DESK, "", rings(200, 1)), (MOBILE, "", rings(200, 1))],
    );
    let c = n.invite(a, "sip:1002@example.com", SW);
    assert!(n.run_until(secs(3), confirmed(a, c)));
    n.run_for(secs(1));
    let answered_by: std::collections::BTreeSet<String> = n
        .sent(addr(SW), addr(ALICE), "200")
        .iter()
        .filter_map(|t| t.msg())
        .filter_map(|m| m.header(HeaderName::Contact).map(str::to_string))
        .collect();
    assert_eq!(answered_by.len(), 2, "both phones' 2xx: {answered_by:?}");
    // The CANCEL to the phone whose 2xx was on its way crossed it: both calls are up, and the
    // caller ACKed what reached it.
    for phone in [p[0], p[1]] {
        assert_eq!(n.agent(phone).last().state, State::Confirmed);
    }
    assert!(n.sent(addr(ALICE), addr(SW), "ACK").len() >= 2);
}

/// Contacts of lower q ring only once the higher ones failed, or when the group's time
/// (`proxy.fork_timeout_s`) is up: then the group still ringing is cancelled.
#[test]
fn lower_q_rings_after_the_higher_fails_or_its_time_is_up() {
    let (mut n, a, p) = forking(
        42,
        "fork_timeout_s = 5\n",
        &[
            (DESK, ";q=1.0", rings(486, 1)),
            (MOBILE, ";q=0.5", rings(200, 60)),
            (HOME, ";q=0.1", rings(200, 1)),
        ],
    );
    let t0 = n.now;
    let c = n.invite(a, "sip:1002@example.com", SW);
    assert!(n.run_until(secs(20), confirmed(a, c)));
    let answered = n.now - t0;
    // The desk busy at 1 s, the mobile rings 5 s and is cancelled, home answers 1 s later.
    assert!(answered >= secs(7) && answered < secs(8), "{answered:?}");
    assert_eq!(got(&mut n, p[0]), (1, 0));
    assert_eq!(got(&mut n, p[1]), (1, 1), "the mobile's time was up");
    assert_eq!(got(&mut n, p[2]), (1, 0));
    let invited_at = |n: &Net, to: &str| {
        n.trace
            .iter()
            .find(|t| t.to == addr(to) && t.what() == "INVITE")
            .map(|t| t.sent - t0)
            .unwrap()
    };
    assert!(invited_at(&n, DESK) < secs(1));
    let mobile = invited_at(&n, MOBILE);
    assert!(mobile >= secs(1) && mobile < secs(2), "{mobile:?}");
    let home = invited_at(&n, HOME);
    assert!(home >= secs(6) && home < secs(7), "{home:?}");
    assert_eq!(invite_statuses(&mut n, a, c).last(), Some(&200));
}

/// A 6xx from one phone cancels the other and starts no lower group; the caller gets the 6xx.
#[test]
fn a_6xx_cancels_the_rest_and_is_what_the_caller_gets() {
    let (mut n, a, p) = forking(
        43,
        "",
        &[
            (DESK, "", rings(603, 1)),
            (MOBILE, "", rings(200, 30)),
            (HOME, ";q=0.1", rings(200, 0)),
        ],
    );
    let c = n.invite(a, "sip:1002@example.com", SW);
    assert!(n.run_until(secs(5), ended(a, c)));
    assert_eq!(invite_statuses(&mut n, a, c).last(), Some(&603));
    assert_eq!(got(&mut n, p[1]), (1, 1));
    assert_eq!(got(&mut n, p[2]), (0, 0), "no lower group after a 6xx");
}

/// Every phone fails: the caller gets the best of their answers (a definite 486 over a 480
/// and a 5xx), once, after the last group.
#[test]
fn when_all_fail_the_best_response_goes_to_the_caller() {
    let (mut n, a, p) = forking(
        44,
        "",
        &[
            (DESK, "", rings(480, 1)),
            (MOBILE, "", rings(486, 2)),
            (HOME, ";q=0.1", rings(503, 1)),
        ],
    );
    let c = n.invite(a, "sip:1002@example.com", SW);
    assert!(n.run_until(secs(10), ended(a, c)));
    let st = invite_statuses(&mut n, a, c);
    assert_eq!(st.iter().filter(|s| **s >= 300).count(), 1, "{st:?}");
    assert_eq!(st.last(), Some(&486), "{st:?}");
    assert_eq!(
        got(&mut n, p[2]),
        (1, 0),
        "the lower q rang after the others failed"
    );
}

/// The caller cancels while two phones ring: both are cancelled, no lower group starts, and
/// the caller gets 487.
#[test]
fn the_callers_cancel_cancels_every_branch() {
    let (mut n, a, p) = forking(
        45,
        "",
        &[
            (DESK, "", rings(200, 30)),
            (MOBILE, "", rings(200, 30)),
            (HOME, ";q=0.1", rings(200, 0)),
        ],
    );
    let c = n.invite(a, "sip:1002@example.com", SW);
    assert!(n.run_until(secs(2), |n| invite_statuses(n, a, c).contains(&180)));
    n.cancel(a, c);
    assert!(n.run_until(secs(2), ended(a, c)));
    assert_eq!(invite_statuses(&mut n, a, c).last(), Some(&487));
    assert_eq!(got(&mut n, p[0]), (1, 1));
    assert_eq!(got(&mut n, p[1]), (1, 1));
    n.run_for(secs(40));
    assert_eq!(got(&mut n, p[2]), (0, 0));
    assert_no_tx_events(&mut n, &[a, p[0], p[1]], "");
}

/// Two phones each challenge the INVITE for their own realm: the caller gets one 407 with
/// both challenges (§16.7 step 7), so it can answer either.
#[test]
fn challenges_of_every_branch_are_merged() {
    let (mut n, a, p) = forking(
        46,
        "",
        &[(DESK, "", rings(200, 0)), (MOBILE, "", rings(200, 0))],
    );
    for (phone, realm) in [(p[0], "desk.example"), (p[1], "mobile.example")] {
        n.agent(phone).auth = Some((realm.into(), "1002".into(), "pw".into()));
    }
    let c = n.invite(a, "sip:1002@example.com", SW);
    assert!(n.run_until(secs(5), ended(a, c)));
    let last = last_response(&mut n, a, c, "INVITE");
    assert_eq!(last.status(), Some(407));
    let realms: Vec<&str> = last.all(HeaderName::ProxyAuthenticate).collect();
    assert_eq!(realms.len(), 2, "{realms:?}");
    assert!(
        realms.iter().any(|r| r.contains("desk.example")),
        "{realms:?}"
    );
    assert!(
        realms.iter().any(|r| r.contains("mobile.example")),
        "{realms:?}"
    );
}

/// A phone on a WebSocket whose connection is gone: the proxied caller hears 480 at once, not
/// after Timer B.
#[test]
fn a_proxied_call_to_a_gone_websocket_fails_at_once_with_480() {
    let phone = addr("127.0.0.1:40621");
    let (mut n, sw, to_phone) =
        crate::tls::register_then_dial(Transport::Ws, phone, "kq2ws9.invalid", "example.com");
    assert!(
        to_phone
            .iter()
            .any(|m| m.starts_with("INVITE sip:1001@kq2ws9.invalid;transport=ws ")),
        "{to_phone:?}"
    );
    crate::websocket::websocket_gone_fails_the_call_with_480(&mut n, sw, phone);
}
