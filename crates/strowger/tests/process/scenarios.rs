//! The project's SIPp scenarios (tests/sipp/*.xml) against strowger running the test dialplan
//! tests/configs/scenarios.toml: call flows, in-dialog requests and error responses.

use crate::common;

use common::sip::{sdp, tag_of, Msg, Rtp, Uac, PCMU};
use common::sipp::{Scenario, Sipp, SippResult};
use common::switch::Cdr;
use common::Strowger;
use std::collections::BTreeSet;
use std::time::Duration;

fn start(label: &str) -> Strowger {
    Strowger::with_config(label, "scenarios.toml")
}

/// Runs tests/sipp/`file` once against `s`, dialling `exten`.
fn scenario(s: &Strowger, file: &'static str, exten: &str) -> SippResult {
    Sipp::new(Scenario::File(file))
        .service(exten)
        .run(s.sip, s.dir.path())
}

/// The single CDR the one call of a scenario must leave.
fn one_cdr(s: &Strowger) -> Cdr {
    let cdrs = s.wait_cdrs(1);
    assert_eq!(cdrs.len(), 1, "want exactly one CDR: {cdrs:#?}");
    cdrs.into_iter().next().unwrap()
}

#[test]
fn cancel_while_ringing() {
    let s = start("cancel");
    scenario(&s, "cancel.xml", "5555").assert_ok(1);
    let c = one_cdr(&s);
    assert_eq!(c.str("exten"), "5555", "{c:?}");
    assert!(
        c.is_null("answer"),
        "a cancelled call was never answered: {c:?}"
    );
    assert_eq!(c.num("sip_status"), 487.0, "{c:?}");
    assert_eq!(c.num("billable_s"), 0.0, "{c:?}");
    assert_eq!(c.str("hangup_side"), "caller", "{c:?}");
}

#[test]
fn caller_hangs_up() {
    let s = start("caller-bye");
    scenario(&s, "caller_bye.xml", "9196").assert_ok(1);
    let c = one_cdr(&s);
    c.assert_answered("9196");
    assert_eq!(c.str("hangup_side"), "caller", "{c:?}");
}

#[test]
fn switch_hangs_up() {
    let s = start("switch-bye");
    scenario(&s, "switch_bye.xml", "5556").assert_ok(1);
    let c = one_cdr(&s);
    c.assert_answered("5556");
    assert_eq!(c.str("hangup_side"), "switch", "{c:?}");
    let billable = c.num("billable_s");
    assert!(
        (1.5..4.0).contains(&billable),
        "answer, wait 2, hangup: {c:?}"
    );
}

#[test]
fn hold_and_unhold_by_reinvite() {
    let s = start("hold");
    scenario(&s, "hold.xml", "9196").assert_ok(1);
    one_cdr(&s).assert_answered("9196");
}

/// INVITE without SDP: offer in the 200, answer in the ACK, then media both ways (SIPp echoes
/// the demo back, so strowger must have sent and received RTP).
#[test]
fn invite_without_sdp() {
    let s = start("late-offer");
    Sipp::new(Scenario::File("late_offer.xml"))
        .service("44444")
        .rtp_echo()
        .run(s.sip, s.dir.path())
        .assert_ok(1);
    let c = one_cdr(&s);
    c.assert_answered("44444");
    assert!(c.num("packets_sent") >= 100.0, "3 s of demo sent: {c:?}");
    assert!(
        c.num("packets_received") >= 50.0,
        "SIPp echoed it back: {c:?}"
    );
}

/// The same INVITE sent twice (same branch, byte for byte) is absorbed by the server
/// transaction (RFC 3261 §17.2.1): only 200s with one To tag come back, and one call is made.
/// (Written with the hand client: SIPp aborts a call on any message arriving between two sends.)
#[test]
fn retransmitted_invite_is_absorbed() {
    let s = start("retrans");
    let rtp = Rtp::bind();
    let mut uac = Uac::new(s.sip, "9196");
    uac.send_invite(&sdp(rtp.port, &[PCMU], "sendrecv"));
    uac.retransmit();
    let msgs = uac.recv_all(Duration::from_millis(1500));
    let finals: Vec<&Msg> = msgs.iter().filter(|m| m.status() >= Some(200)).collect();
    assert!(!finals.is_empty(), "no final response: {msgs:#?}");
    let tags: BTreeSet<Option<String>> = finals
        .iter()
        .map(|m| m.header("to").and_then(tag_of))
        .collect();
    assert!(
        finals.iter().all(|m| m.status() == Some(200)) && tags.len() == 1,
        "want only 200s of one dialog, got: {finals:#?}"
    );
    uac.invite_answered(finals[0]);
    uac.ack("");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(uac.bye().status(), Some(200));
    one_cdr(&s).assert_answered("9196");
}

#[test]
fn options_answers_200_with_allow() {
    let s = start("options");
    scenario(&s, "options.xml", "9196").assert_ok(1);
}

#[test]
fn unknown_method_gets_501() {
    let s = start("unknown-method");
    scenario(&s, "unknown_method.xml", "9196").assert_ok(1);
}

#[test]
fn no_common_codec_gets_488() {
    let s = start("no-codec");
    scenario(&s, "no_codec.xml", "9196").assert_ok(1);
}

#[test]
fn unknown_number_gets_404() {
    let s = start("not-found");
    let mut uac = Uac::new(s.sip, "123456");
    let rtp = Rtp::bind();
    let resp = uac.invite(&sdp(rtp.port, &[PCMU], "sendrecv"));
    assert_eq!(resp.status(), Some(404), "{resp:?}");
}

/// With general.max_calls = 1 and one call up, 4 more INVITEs (different Call-IDs, so possibly
/// different workers) must each get 503 with Retry-After: 7; the held call still hangs up cleanly.
#[test]
fn over_max_calls_gets_503_with_retry_after() {
    let s = Strowger::with_config("max-calls", "max_calls.toml");
    let rtp = Rtp::bind();
    let mut held = Uac::new(s.sip, "9196");
    let resp = held.invite(&sdp(rtp.port, &[PCMU], "sendrecv"));
    assert_eq!(
        resp.status(),
        Some(200),
        "the first call is allowed: {resp:?}"
    );
    held.ack("");
    Sipp::new(Scenario::File("busy.xml"))
        .service("9196")
        .calls(4, 10, 1)
        .run(s.sip, s.dir.path())
        .assert_ok(4);
    assert_eq!(held.bye().status(), Some(200));
    // Once it is gone a new call is accepted again.
    std::thread::sleep(Duration::from_millis(200));
    let mut next = Uac::new(s.sip, "9196");
    let resp = next.invite(&sdp(rtp.port, &[PCMU], "sendrecv"));
    assert_eq!(resp.status(), Some(200), "capacity is released: {resp:?}");
    next.ack("");
    assert_eq!(next.bye().status(), Some(200));
}
