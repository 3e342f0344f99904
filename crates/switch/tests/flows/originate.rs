//! Calls the control API places (`Command::Originate`): strowger rings FROM — a registered
//! user's phone or a URI at a trusted peer — and, once it answers, runs the dialplan for TO
//! on that leg; a user with no phone, or a URI at an untrusted host, fails as it should. And
//! the commands on a call in progress (`Command::Act`): digits, blind transfer, recording.

use crate::net;

use net::*;
use sip::Method;
use std::time::Duration;
use store::CredentialStore;
use switch::call_commands::{Action, Side};
use switch::control::{Command, Notice, Reply};
use switch::originate::{Originate, Refused};

const PHONE: &str = "127.0.0.1:5070";

fn setup() -> (Net, Id, Id) {
    let mut n = Net::new(21);
    let sw = b2bua(&mut n, "[registrar]\nauthenticate = false\n");
    for user in ["1001", "1002"] {
        let c = switch::registrar::credentials(user, "strowger", "pw");
        n.sw(sw).shared.store.put_user(&c).unwrap();
    }
    let p = n.ua(PHONE, "1001");
    (n, sw, p)
}

fn originate(n: &mut Net, sw: Id, id: &str, from: &str, to: &str) -> Result<(), Refused> {
    let o = Originate {
        call_id: id.into(),
        from: from.into(),
        to: to.into(),
        context: "default".into(),
        caller_id: None,
        timeout: Duration::from_secs(30),
    };
    match n.sw(sw).node().command(Command::Originate(Box::new(o))) {
        Reply::Originated(r) => r,
        _ => panic!("Originate answers with Reply::Originated"),
    }
}

/// Each notice as "kind id" (and the contact of `ringing` and `answered`, the cause of `ended`).
fn told(n: &mut Net, sw: Id) -> Vec<String> {
    let at = |contact: Option<String>| contact.map_or(String::new(), |c| format!(" at {c}"));
    n.sw(sw)
        .node()
        .take_notices()
        .into_iter()
        .filter_map(|t| match t {
            Notice::Created { call_id, .. } => Some(format!("created {call_id}")),
            Notice::Ringing { call_id, contact } => {
                Some(format!("ringing {call_id}{}", at(contact)))
            }
            Notice::Answered { call_id, contact } => {
                Some(format!("answered {call_id}{}", at(contact)))
            }
            Notice::Ended { call_id, cause, .. } => Some(format!("ended {call_id} {cause}")),
            _ => None,
        })
        .collect()
}

#[test]
fn a_registered_user_is_rung_and_once_answered_runs_the_dialplan_of_to() {
    let (mut n, sw, p) = setup();
    n.register(p, SW, "strowger", 600);
    assert!(n.run_until(secs(2), registered([p])));
    n.sw(sw).node().watch(true);
    // 44444 answers and plays the demo prompt in a loop: the phone hears it.
    originate(&mut n, sw, "o1@api", "1001", "44444").expect("placed");
    let Reply::Calls(calls) = n.sw(sw).node().command(Command::Calls) else {
        panic!("Calls answers with Reply::Calls");
    };
    assert_eq!(calls.len(), 1, "listed at once: {calls:?}");
    assert_eq!(
        (calls[0].id.as_str(), calls[0].state),
        ("o1@api", "ringing")
    );
    assert_eq!(calls[0].legs[0].direction, "out");
    assert!(n.run_until(secs(5), |n| n
        .agent(p)
        .calls
        .first()
        .is_some_and(|c| c.state == State::Confirmed)));
    let invite = &n.agent(p).calls[0].requests[0];
    assert_eq!(
        invite.header(sip::header::HeaderName::CallId),
        Some("o1@api")
    );
    assert!(
        invite
            .header(sip::header::HeaderName::From)
            .unwrap()
            .contains("sip:44444@"),
        "the phone is shown what it is connected to"
    );
    n.run_for(secs(1));
    let heard = n.agent(p).rtp.len();
    assert!(
        heard >= 40,
        "the playback reaches the phone: {heard} packets"
    );
    n.bye(p, 0);
    assert!(n.run_until(secs(5), bye_answered(p, 0)));
    let cdr = one_cdr(&mut n, sw, "the API's call");
    assert_eq!(cdr["call_id"], "o1@api");
    assert_eq!(
        (cdr["exten"].as_str(), cdr["context"].as_str()),
        (Some("44444"), Some("default"))
    );
    assert_eq!(
        (cdr["cause"].as_u64(), cdr["hangup_side"].as_str()),
        (Some(16), Some("caller"))
    );
    assert!(cdr["answer"].is_number(), "{cdr}");
    assert_eq!(
        told(&mut n, sw),
        [
            "created o1@api",
            "ringing o1@api at sip:1001@127.0.0.1:5070",
            "answered o1@api at sip:1001@127.0.0.1:5070",
            "ended o1@api 16"
        ]
    );
}

#[test]
fn the_program_hangs_up_the_leg_it_runs_on() {
    let (mut n, sw, p) = setup();
    // A URI at a trusted peer (loopback here) is rung as it is, registered or not.
    let from = format!("sip:1001@{PHONE}");
    originate(&mut n, sw, "o2@api", &from, "6666").expect("placed");
    // 6666: answer, wait 1, hangup — strowger's BYE reaches the phone.
    assert!(n.run_until(secs(5), |n| n
        .agent(p)
        .calls
        .first()
        .is_some_and(|c| c.requests_of(&Method::Bye).len() == 1)));
    let cdr = one_cdr(&mut n, sw, "the API's call");
    assert_eq!(cdr["hangup_side"], "switch");
    assert!(cdr["billable_s"].as_f64().unwrap() >= 1.0, "{cdr}");
}

#[test]
fn a_user_with_no_phone_ends_the_call_with_its_cause() {
    let (mut n, sw, _) = setup();
    n.sw(sw).node().watch(true);
    originate(&mut n, sw, "o3@api", "1002", "44444").expect("placed: the lookup comes later");
    assert!(n.run_until(secs(2), |n| n.sw(sw).active_calls() == 0));
    let cdr = one_cdr(&mut n, sw, "the failed call");
    // 480 Temporarily Unavailable: Q.850 18, no user responding.
    assert_eq!(
        (cdr["cause"].as_u64(), cdr["sip_status"].as_u64()),
        (Some(18), Some(480))
    );
    assert_eq!(told(&mut n, sw), ["created o3@api", "ended o3@api 18"]);
    // No such user: 404, Q.850 1 (unallocated number).
    originate(&mut n, sw, "o8@api", "nobody", "44444").expect("placed");
    assert!(n.run_until(secs(2), |n| n.sw(sw).cdrs().len() == 2));
    let cdr = &n.sw(sw).cdrs()[1];
    assert_eq!(
        (cdr["cause"].as_u64(), cdr["sip_status"].as_u64()),
        (Some(1), Some(404))
    );
}

#[test]
fn a_phone_that_does_not_answer_is_cancelled_at_the_timeout() {
    let (mut n, sw, p) = setup();
    n.agent(p).policy.after = secs(3600);
    let o = Originate {
        call_id: "o4@api".into(),
        from: format!("sip:1001@{PHONE}"),
        to: "44444".into(),
        context: "default".into(),
        caller_id: Some("555".into()),
        timeout: secs(5),
    };
    assert!(matches!(
        n.sw(sw).node().command(Command::Originate(Box::new(o))),
        Reply::Originated(Ok(()))
    ));
    assert!(n.run_until(secs(10), |n| !n
        .agent(p)
        .requests_of(&Method::Cancel)
        .is_empty()));
    assert!(n.elapsed() >= secs(5), "rung until the timeout");
    let from = n.agent(p).calls[0].requests[0]
        .header(sip::header::HeaderName::From)
        .map(str::to_string);
    assert!(from.unwrap().contains("sip:555@"), "the caller ID given");
    let cdr = one_cdr(&mut n, sw, "the unanswered call");
    assert_eq!(
        (cdr["cause"].as_u64(), cdr["sip_status"].as_u64()),
        (Some(102), Some(408))
    );
    assert!(
        cdr["duration_s"].as_f64() >= Some(5.0),
        "rung until the timeout: {cdr}"
    );
}

#[test]
fn a_uri_at_an_untrusted_host_or_a_bad_request_is_refused() {
    let (mut n, sw, _) = setup();
    let r = originate(&mut n, sw, "o5@api", "sip:x@192.0.2.1", "44444").unwrap_err();
    assert_eq!(r.status, 403);
    assert!(r.message.contains("security.trusted"), "{}", r.message);
    let r = originate(&mut n, sw, "o6@api", "1001", "no-such-exten").unwrap_err();
    assert_eq!(r.status, 400, "{}", r.message);
    let r = originate(&mut n, sw, "o7@api", "http://x", "44444").unwrap_err();
    assert_eq!(r.status, 400, "{}", r.message);
    assert_eq!(n.sw(sw).active_calls(), 0);
    assert!(n.sw(sw).cdrs().is_empty(), "nothing was placed");
    // A stopping switch places nothing.
    n.drain_calls(sw);
    let r = originate(&mut n, sw, "o10@api", "1001", "44444").unwrap_err();
    assert_eq!(r.status, 503, "{}", r.message);
}

/// Alice calls 2001, bridged to Bob; `rtp` goes in the `[rtp]` table.
fn bridged(seed: u64, rtp: &str) -> (Net, Id, Id, Id, String) {
    let mut n = Net::new(seed);
    let sw = b2bua(&mut n, &format!("[rtp]\nmedia_timeout_s = 0\n{rtp}"));
    let a = n.ua(ALICE, "alice");
    let b = n.ua(BOB, "bob");
    let c = n.invite(a, "sip:2001@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, c)));
    let id = n.agent(a).call(c).call_id.clone();
    (n, sw, a, b, id)
}

fn act(n: &mut Net, sw: Id, call_id: &str, action: Action) -> Option<Result<(), Refused>> {
    let cmd = Command::Act {
        call_id: call_id.into(),
        action,
    };
    match n.sw(sw).node().command(cmd) {
        Reply::Acted(r) => r,
        _ => panic!("Act answers with Reply::Acted"),
    }
}

#[test]
fn digits_from_the_caller_reach_the_callee_in_its_form_and_the_event_stream() {
    let (mut n, sw, _, b, id) = bridged(31, "dtmf = \"info\"\n");
    n.sw(sw).node().watch(true);
    let digits = |leg| Action::Dtmf {
        digits: "4#".into(),
        leg,
    };
    assert!(
        act(&mut n, sw, "nobody@x", digits(Side::Caller)).is_none(),
        "no such call"
    );
    assert_eq!(act(&mut n, sw, &id, digits(Side::Caller)), Some(Ok(())));
    n.run_for(ms(300));
    // Bob takes digits by INFO (rtp.dtmf = "info"): two INFOs, in order.
    let infos: Vec<String> = n
        .agent(b)
        .last()
        .requests_of(&Method::Info)
        .iter()
        .map(|m| body(m))
        .collect();
    assert_eq!(
        infos,
        [
            "Signal=4\r\nDuration=100\r\n",
            "Signal=#\r\nDuration=100\r\n"
        ]
    );
    let dtmf: Vec<char> = n
        .sw(sw)
        .node()
        .take_notices()
        .into_iter()
        .filter_map(|t| match t {
            Notice::Dtmf { digit, .. } => Some(digit),
            _ => None,
        })
        .collect();
    assert_eq!(dtmf, ['4', '#']);
}

#[test]
fn a_caller_alone_in_an_app_has_no_callee_to_press_for() {
    let (mut n, sw, p) = setup();
    let from = format!("sip:1001@{PHONE}");
    originate(&mut n, sw, "o9@api", &from, "44444").expect("placed");
    let callee = Action::Dtmf {
        digits: "1".into(),
        leg: Side::Callee,
    };
    // Ringing: not even the caller is up.
    let r = act(
        &mut n,
        sw,
        "o9@api",
        Action::Dtmf {
            digits: "1".into(),
            leg: Side::Caller,
        },
    );
    assert_eq!(r.unwrap().unwrap_err().status, 409);
    assert!(n.run_until(secs(5), |n| n
        .agent(p)
        .calls
        .first()
        .is_some_and(|c| c.state == State::Confirmed)));
    let r = act(&mut n, sw, "o9@api", callee).unwrap().unwrap_err();
    assert_eq!(r.status, 409, "{}", r.message);
    let t = Action::Transfer {
        to: "6666".into(),
        leg: Side::Caller,
    };
    assert_eq!(
        act(&mut n, sw, "o9@api", t).unwrap().unwrap_err().status,
        409,
        "not bridged"
    );
}

#[test]
fn a_bridged_caller_is_transferred_blind_and_the_callee_released() {
    let (mut n, sw, a, b, id) = bridged(32, "");
    let to = |to: &str| Action::Transfer {
        to: to.into(),
        leg: Side::Caller,
    };
    let r = act(&mut n, sw, &id, to("0000")).unwrap().unwrap_err();
    assert_eq!(r.status, 400, "{}", r.message);
    assert!(
        r.message.contains("dialplan.contexts.default"),
        "{}",
        r.message
    );
    // 6666 answers, waits a second and hangs up: Alice gets its BYE; Bob is released.
    assert_eq!(act(&mut n, sw, &id, to("6666")), Some(Ok(())));
    let byes = |n: &mut Net, ua: Id| n.agent(ua).last().requests_of(&Method::Bye).len();
    assert!(n.run_until(secs(10), |n| byes(n, a) + byes(n, b) == 2));
    assert_eq!(n.sw(sw).active_calls(), 0);
    assert_eq!(byes(&mut n, b), 1, "the callee released");
    assert_eq!(
        n.agent(b).last().requests_of(&Method::Notify).len(),
        0,
        "no REFER, so no NOTIFY"
    );
    assert_eq!(
        n.agent(a).last().requests_of(&Method::Bye).len(),
        1,
        "6666 hung up"
    );
    let cdr = one_cdr(&mut n, sw, "the transferred call");
    assert_eq!(cdr["transferred_to"], "6666");
    assert_eq!(cdr["hangup_side"], "switch");
}

#[test]
fn a_call_is_recorded_from_when_asked_until_stopped() {
    let (mut n, sw, a, _, id) = bridged(33, "");
    assert_eq!(
        act(&mut n, sw, &id, Action::StopRecording)
            .unwrap()
            .unwrap_err()
            .status,
        409
    );
    let bad = Action::Record {
        file: Some("../x.wav".into()),
    };
    assert_eq!(act(&mut n, sw, &id, bad).unwrap().unwrap_err().status, 400);
    let rec = Action::Record {
        file: Some("calls/api.wav".into()),
    };
    assert_eq!(act(&mut n, sw, &id, rec.clone()), Some(Ok(())));
    assert_eq!(
        act(&mut n, sw, &id, rec).unwrap().unwrap_err().status,
        409,
        "once"
    );
    n.run_for(secs(1));
    assert_eq!(act(&mut n, sw, &id, Action::StopRecording), Some(Ok(())));
    let names: Vec<String> = n
        .sw(sw)
        .node()
        .recordings()
        .iter()
        .map(|(f, _)| f.clone())
        .collect();
    assert_eq!(names, ["calls/api.wav"]);
    n.run_for(secs(1));
    n.bye(a, 0);
    assert!(n.run_until(secs(5), bye_answered(a, 0)));
    let cdr = one_cdr(&mut n, sw, "the recorded call");
    assert_eq!(cdr["recording"], "calls/api.wav");
    let secs = cdr["recording_s"].as_f64().unwrap();
    assert!(
        (0.9..1.5).contains(&secs),
        "recorded from start to stop only: {secs} s"
    );
}

#[test]
fn a_muted_caller_is_not_heard_a_deaf_callee_hears_nothing_and_both_resume() {
    let (mut n, sw, a, b, id) = bridged(34, "");
    n.agent(a).send_rtp = true;
    n.agent(b).send_rtp = true;
    // RTP packets agent `ua` gets in the next second.
    let heard = |n: &mut Net, ua: Id| {
        let from = n.agent(ua).rtp.len();
        n.run_for(secs(1));
        n.agent(ua).rtp.len() - from
    };
    let mute = |leg, muted, deaf| Action::Mute { leg, muted, deaf };
    assert!(heard(&mut n, b) >= 45, "Alice is heard");
    assert_eq!(
        act(&mut n, sw, &id, mute(Side::Caller, true, false)),
        Some(Ok(()))
    );
    n.run_for(ms(100));
    assert_eq!(heard(&mut n, b), 0, "Alice muted");
    assert!(heard(&mut n, a) >= 45, "Alice still hears Bob");
    assert_eq!(
        act(&mut n, sw, &id, mute(Side::Caller, false, false)),
        Some(Ok(()))
    );
    n.run_for(ms(100));
    assert!(heard(&mut n, b) >= 45, "Alice heard again");
    assert_eq!(
        act(&mut n, sw, &id, mute(Side::Callee, false, true)),
        Some(Ok(()))
    );
    n.run_for(ms(100));
    assert_eq!(heard(&mut n, b), 0, "Bob is deaf");
    assert!(heard(&mut n, a) >= 45, "Bob is still heard");
    assert_eq!(
        act(&mut n, sw, &id, mute(Side::Callee, false, false)),
        Some(Ok(()))
    );
    n.run_for(ms(100));
    assert!(heard(&mut n, b) >= 45, "Bob hears again");
    n.bye(a, 0);
    assert!(n.run_until(secs(5), bye_answered(a, 0)));
}

#[test]
fn a_prompt_played_over_a_bridge_is_heard_and_then_the_party_again() {
    let (mut n, sw, a, b, id) = bridged(35, "");
    n.agent(a).send_rtp = true;
    n.agent(b).send_rtp = true;
    // Bob speaks a constant payload, so what Alice hears tells Bob from the prompt.
    n.agent(b).voice = vec![0x55; 160];
    // What Alice hears in the next `d`: packets of Bob's voice, and others.
    let heard = |n: &mut Net, d: Duration| {
        let from = n.agent(a).rtp_payloads.len();
        n.run_for(d);
        let got = &n.agent(a).rtp_payloads[from..];
        let bob = got.iter().filter(|p| p.iter().all(|&x| x == 0x55)).count();
        (bob, got.len() - bob)
    };
    assert!(heard(&mut n, secs(1)).0 >= 45, "Alice hears Bob");
    let play = |file: &str, leg| Action::Play {
        file: file.into(),
        leg,
    };
    for bad in ["../etc/x.wav", "/tmp/x.wav", "x.mp3", "a//b.wav"] {
        let r = act(&mut n, sw, &id, play(bad, Side::Caller));
        assert_eq!(r.unwrap().unwrap_err().status, 400, "{bad}");
    }
    assert_eq!(
        act(&mut n, sw, &id, play("sounds/notice.wav", Side::Caller)),
        Some(Ok(()))
    );
    assert!(n
        .sw(sw)
        .node()
        .prompts()
        .contains(&"sounds/notice.wav".to_string()));
    // The test prompt lasts a second: Alice hears it, and not Bob; Bob hears nothing meanwhile.
    let b_from = n.agent(b).rtp.len();
    let (bob, prompt) = heard(&mut n, ms(900));
    assert_eq!(bob, 0, "Bob is not heard over the prompt");
    assert!(prompt >= 40, "Alice hears the prompt: {prompt} packets");
    assert_eq!(n.agent(b).rtp.len() - b_from, 0, "Bob hears silence");
    n.run_for(ms(300));
    let (bob, other) = heard(&mut n, secs(1));
    assert!(
        bob >= 45 && other == 0,
        "the bridge is back: {bob} of Bob, {other} else"
    );
    let b_from = n.agent(b).rtp.len();
    n.run_for(secs(1));
    assert!(
        n.agent(b).rtp.len() - b_from >= 45,
        "Bob hears Alice again after the prompt"
    );
    n.bye(a, 0);
    assert!(n.run_until(secs(5), bye_answered(a, 0)));
}

#[test]
fn a_prompt_is_refused_for_a_call_that_is_not_bridged() {
    let (mut n, sw, p) = setup();
    let from = format!("sip:1001@{PHONE}");
    originate(&mut n, sw, "o10@api", &from, "44444").expect("placed");
    assert!(n.run_until(secs(5), |n| n
        .agent(p)
        .calls
        .first()
        .is_some_and(|c| c.state == State::Confirmed)));
    let play = Action::Play {
        file: "demo".into(),
        leg: Side::Caller,
    };
    let r = act(&mut n, sw, "o10@api", play).unwrap().unwrap_err();
    assert_eq!(r.status, 409, "{}", r.message);
}

const SOFTPHONE: &str = "127.0.0.1:5071";

/// User 1001 with two phones: the desk phone (`PHONE`), and a softphone registered after it
/// (the most recently refreshed, so its leg is the caller's until another answers).
fn two_phones() -> (Net, Id, Id, Id) {
    let (n, sw, desk) = setup();
    register_softphone(n, sw, desk)
}

fn register_softphone(mut n: Net, sw: Id, desk: Id) -> (Net, Id, Id, Id) {
    let soft = n.ua(SOFTPHONE, "1001");
    n.register(desk, SW, "strowger", 600);
    assert!(n.run_until(secs(2), registered([desk])));
    n.run_for(secs(2));
    n.register(soft, SW, "strowger", 600);
    assert!(n.run_until(secs(2), registered([soft])));
    n.sw(sw).node().watch(true);
    (n, sw, desk, soft)
}

/// Once the timers of the ended call ran out, the switch holds no leg, map entry or timer: no
/// fork's Call-ID, INVITE or media leg was left behind.
fn left_empty(n: &mut Net, sw: Id) {
    assert_eq!(n.sw(sw).active_calls(), 0);
    n.run_for(secs(40));
    assert_eq!(
        n.sw(sw).node().table_counts(),
        switch::TableCounts::default()
    );
}

fn invited_with(n: &mut Net, phone: Id, call_id: &str) -> bool {
    n.agent(phone)
        .calls
        .first()
        .is_some_and(|c| c.requests[0].header(sip::header::HeaderName::CallId) == Some(call_id))
}

#[test]
fn every_phone_of_a_user_rings_and_the_first_to_answer_gets_the_call() {
    let (mut n, sw, desk, soft) = two_phones();
    n.agent(desk).policy.after = secs(1);
    n.agent(soft).policy.after = secs(3600);
    originate(&mut n, sw, "o11@api", "1001", "44444").expect("placed");
    // Both rang, with the API's id as Call-ID, listed as one call with a leg to each.
    assert!(n.run_until(ms(500), |n| invited_with(n, desk, "o11@api")
        && invited_with(n, soft, "o11@api")));
    let Reply::Calls(calls) = n.sw(sw).node().command(Command::Calls) else {
        panic!("Calls answers with Reply::Calls");
    };
    let legs: Vec<(&str, &str, &str)> = calls[0]
        .legs
        .iter()
        .map(|l| (l.call_id.as_str(), l.role, l.direction))
        .collect();
    assert_eq!(
        legs,
        [("o11@api", "caller", "out"), ("o11@api", "ringing", "out")]
    );
    assert!(n.run_until(secs(5), |n| n
        .agent(desk)
        .calls
        .first()
        .is_some_and(|c| c.state == State::Confirmed)));
    // The softphone was cancelled.
    assert!(n.run_until(secs(1), |n| n.agent(soft).last().state == State::Ended));
    let cancels = n.agent(soft).requests_of(&Method::Cancel);
    assert_eq!(cancels.len(), 1);
    assert_eq!(
        cancels[0].header(sip::header::HeaderName::Reason),
        Some("SIP;cause=200;text=\"Call completed elsewhere\""),
        "the softphone logs no missed call"
    );
    assert_eq!(n.agent(desk).requests_of(&Method::Cancel).len(), 0);
    n.run_for(secs(1));
    assert!(
        n.agent(desk).rtp.len() >= 40,
        "the playback reaches the desk phone"
    );
    // Listed under the same id, with the desk phone's leg alone.
    let Reply::Calls(calls) = n.sw(sw).node().command(Command::Calls) else {
        panic!("Calls answers with Reply::Calls");
    };
    assert_eq!(
        (calls[0].id.as_str(), calls[0].state),
        ("o11@api", "answered")
    );
    assert_eq!(calls[0].legs.len(), 1, "{calls:?}");
    assert!(calls[0].legs[0].peer.ends_with(":5070"), "{calls:?}");
    // The API hangs it up by that id: the desk phone gets the BYE.
    let hangup = Command::Hangup {
        call_id: "o11@api".into(),
        cause: 16,
    };
    assert!(matches!(
        n.sw(sw).node().command(hangup),
        Reply::Hangup(true)
    ));
    assert!(n.run_until(secs(2), |n| n.agent(desk).last().state == State::Ended));
    assert_eq!(n.agent(desk).requests_of(&Method::Bye).len(), 1);
    let told = told(&mut n, sw);
    assert!(
        told.contains(&"answered o11@api at sip:1001@127.0.0.1:5070".to_string()),
        "{told:?}"
    );
    let rang = told
        .iter()
        .filter(|t| t.starts_with("ringing o11@api at"))
        .count();
    assert_eq!(rang, 2, "each phone's ringing: {told:?}");
    assert_eq!(told.last().map(String::as_str), Some("ended o11@api 16"));
    assert_eq!(n.sw(sw).active_calls(), 0);
    assert_eq!(one_cdr(&mut n, sw, "the API's call")["call_id"], "o11@api");
    left_empty(&mut n, sw);
}

#[test]
fn a_busy_phone_drops_out_and_the_other_still_answers() {
    let (mut n, sw, desk, soft) = two_phones();
    // The softphone's leg (the caller's) is busy at once; the desk phone answers later.
    n.agent(soft).policy.status = 486;
    n.agent(desk).policy.after = secs(1);
    originate(&mut n, sw, "o12@api", "1001", "44444").expect("placed");
    assert!(n.run_until(secs(5), |n| n
        .agent(desk)
        .calls
        .first()
        .is_some_and(|c| c.state == State::Confirmed)));
    assert_eq!(n.agent(soft).last().state, State::Ended);
    n.run_for(secs(1));
    assert!(
        n.agent(desk).rtp.len() >= 40,
        "the playback reaches the desk phone"
    );
    n.bye(desk, 0);
    assert!(n.run_until(secs(2), bye_answered(desk, 0)));
    assert_eq!(n.sw(sw).active_calls(), 0);
    let cdr = one_cdr(&mut n, sw, "the API's call");
    assert_eq!(
        (cdr["call_id"].as_str(), cdr["cause"].as_u64()),
        (Some("o12@api"), Some(16))
    );
    left_empty(&mut n, sw);
}

#[test]
fn when_every_phone_is_busy_the_call_fails_busy() {
    let (mut n, sw, desk, soft) = two_phones();
    n.agent(soft).policy.status = 486;
    n.agent(desk).policy.status = 480;
    originate(&mut n, sw, "o13@api", "1001", "44444").expect("placed");
    assert!(n.run_until(secs(3), |n| n.sw(sw).active_calls() == 0));
    // 486 is a definite answer and beats 480 (`better_final`): Q.850 17, user busy.
    let cdr = one_cdr(&mut n, sw, "the failed call");
    assert_eq!(
        (cdr["sip_status"].as_u64(), cdr["cause"].as_u64()),
        (Some(486), Some(17))
    );
    assert_eq!(
        told(&mut n, sw).last().map(String::as_str),
        Some("ended o13@api 17")
    );
    for phone in [desk, soft] {
        assert!(n.agent(phone).requests_of(&Method::Cancel).is_empty());
    }
    left_empty(&mut n, sw);
}

#[test]
fn a_second_answer_crossing_the_cancel_is_acked_and_hung_up() {
    let (mut n, sw, desk, soft) = two_phones();
    // Both answer at the same instant: one 200 wins, the other is already on its way.
    for phone in [desk, soft] {
        n.agent(phone).policy.after = secs(1);
    }
    originate(&mut n, sw, "o14@api", "1001", "44444").expect("placed");
    n.run_for(secs(3));
    let up: Vec<Id> = [desk, soft]
        .into_iter()
        .filter(|&p| n.agent(p).last().state == State::Confirmed)
        .collect();
    assert_eq!(up.len(), 1, "one phone has the call");
    let loser = if up[0] == desk { soft } else { desk };
    let lost = n.agent(loser).last();
    assert_eq!(lost.state, State::Ended);
    assert_eq!(
        (
            lost.requests_of(&Method::Ack).len(),
            lost.requests_of(&Method::Bye).len()
        ),
        (1, 1),
        "its 200 was ACKed, then ended by a BYE"
    );
    assert!(
        n.agent(up[0]).rtp.len() >= 40,
        "the winner hears the playback"
    );
    n.bye(up[0], 0);
    assert!(n.run_until(secs(2), bye_answered(up[0], 0)));
    assert_eq!(n.sw(sw).active_calls(), 0);
    assert_eq!(one_cdr(&mut n, sw, "the API's call")["call_id"], "o14@api");
    assert!(n.trace.iter().all(|t| t.what() != "481"));
    left_empty(&mut n, sw);
}

#[test]
fn phones_that_do_not_answer_are_all_cancelled_at_the_timeout() {
    let (mut n, sw, desk, soft) = two_phones();
    for phone in [desk, soft] {
        n.agent(phone).policy.after = secs(3600);
    }
    let o = Originate {
        call_id: "o15@api".into(),
        from: "1001".into(),
        to: "44444".into(),
        context: "default".into(),
        caller_id: None,
        timeout: secs(5),
    };
    n.sw(sw).node().command(Command::Originate(Box::new(o)));
    assert!(n.run_until(secs(10), |n| n.sw(sw).active_calls() == 0));
    n.run_for(secs(1));
    for phone in [desk, soft] {
        let cancels = n.agent(phone).requests_of(&Method::Cancel);
        assert_eq!(cancels.len(), 1);
        assert_eq!(
            cancels[0].header(sip::header::HeaderName::Reason),
            None,
            "nobody answered: a missed call"
        );
        assert_eq!(n.agent(phone).last().state, State::Ended);
    }
    let cdr = one_cdr(&mut n, sw, "the unanswered call");
    assert_eq!(
        (cdr["cause"].as_u64(), cdr["sip_status"].as_u64()),
        (Some(102), Some(408))
    );
    assert!(
        cdr["duration_s"].as_f64() >= Some(5.0),
        "rung until the timeout: {cdr}"
    );
    left_empty(&mut n, sw);
}

/// On a two-worker switch the API sends the call to the worker its id hashes to; every fork
/// carries that id as its Call-ID, so both phones' answers come back to that worker.
#[test]
fn the_forks_of_a_placed_call_on_two_workers_come_back_to_its_worker() {
    let mut n = Net::new(46);
    let toml = "[registrar]\nauthenticate = false\n[vars]\nself = \"127.0.0.1:5060\"\n";
    let sw = n.switch(&config(toml), &[SW], 2);
    let c = switch::registrar::credentials("1001", "strowger", "pw");
    n.sw(sw).shared.store.put_user(&c).unwrap();
    let desk = n.ua(PHONE, "1001");
    let (mut n, sw, desk, soft) = register_softphone(n, sw, desk);
    n.agent(desk).policy.after = secs(1);
    n.agent(soft).policy.after = secs(3600);
    // `node()` is worker 0: an id it owns, as the API would choose.
    let id = (0..)
        .map(|k| format!("o2w{k}@api"))
        .find(|id| switch::owner(id, 2) == 0)
        .unwrap();
    originate(&mut n, sw, &id, "1001", "44444").expect("placed");
    assert!(n.run_until(secs(5), |n| n
        .agent(desk)
        .calls
        .first()
        .is_some_and(|c| c.state == State::Confirmed)));
    assert!(n.run_until(secs(1), |n| n.agent(soft).last().state == State::Ended));
    n.run_for(secs(1));
    assert!(
        n.agent(desk).rtp.len() >= 40,
        "the playback reaches the desk phone"
    );
    n.bye(desk, 0);
    assert!(n.run_until(secs(2), bye_answered(desk, 0)));
    assert_eq!(
        one_cdr(&mut n, sw, "the API's call")["call_id"],
        id.as_str()
    );
    assert!(n.trace.iter().all(|t| t.what() != "481"));
    left_empty(&mut n, sw);
    let other = n.sw(sw).workers[1].table_counts();
    assert_eq!(other, switch::TableCounts::default());
}
