//! The control API's inputs on the simulated network (tests/net): a bridged call is listed with
//! its legs and hung up with a cause through `Input::Api`, and `Input::Watch` turns the event
//! stream's notices on and off.

use crate::net;

use net::*;
use sip::Method;
use switch::control::{Command, Notice, Reply};

/// Alice calls 2001, bridged to Bob: the confirmed call's index.
fn bridged(n: &mut Net, a: Id) -> usize {
    let c = n.invite(a, "sip:2001@127.0.0.1", SW);
    assert!(n.run_until(secs(5), confirmed(a, c)));
    c
}

fn setup() -> (Net, Id, Id, Id) {
    let mut n = Net::new(11);
    let sw = b2bua(&mut n, "");
    let a = n.ua(ALICE, "alice");
    let b = n.ua(BOB, "bob");
    (n, sw, a, b)
}

#[test]
fn a_bridged_call_is_listed_with_its_legs_and_hung_up_with_a_cause() {
    let (mut n, sw, a, b) = setup();
    let c = bridged(&mut n, a);
    let Reply::Calls(calls) = n.sw(sw).node().command(Command::Calls) else {
        panic!("Calls answers with Reply::Calls");
    };
    assert_eq!(calls.len(), 1, "{calls:?}");
    let call = &calls[0];
    let alice_id = n.agent(a).call(c).call_id.clone();
    assert_eq!(call.id, alice_id);
    assert_eq!((call.exten.as_str(), call.state), ("2001", "answered"));
    assert!(call.answer.is_some());
    let roles: Vec<_> = call
        .legs
        .iter()
        .map(|l| (l.role, l.direction, l.state, l.peer.as_str()))
        .collect();
    assert_eq!(
        roles,
        [("caller", "in", "up", ALICE), ("callee", "out", "up", BOB)]
    );
    let bob_id = n.agent(b).last().call_id.clone();
    assert_eq!(call.legs[1].call_id, bob_id);

    // An unknown call is not found; the real one is hung up: both phones get a BYE.
    let unknown = Command::Hangup {
        call_id: "nobody@x".into(),
        cause: 16,
    };
    assert!(matches!(
        n.sw(sw).node().command(unknown),
        Reply::Hangup(false)
    ));
    let hangup = Command::Hangup {
        call_id: alice_id.clone(),
        cause: 17,
    };
    assert!(matches!(
        n.sw(sw).node().command(hangup),
        Reply::Hangup(true)
    ));
    assert!(n.run_until(secs(5), |n| {
        ended(a, c)(n) && n.agent(b).last().state == State::Ended
    }));
    assert_eq!(n.agent(a).call(c).requests_of(&Method::Bye).len(), 1);
    assert_eq!(n.agent(b).last().requests_of(&Method::Bye).len(), 1);
    let cdrs = n.sw(sw).cdrs();
    assert_eq!(cdrs.len(), 1);
    assert_eq!(cdrs[0]["cause"], 17);
    assert_eq!(cdrs[0]["hangup_side"], "switch");
    assert_eq!(n.sw(sw).active_calls(), 0);
    let Reply::Stats(st) = n.sw(sw).node().command(Command::Stats) else {
        panic!("Stats answers with Reply::Stats");
    };
    assert_eq!((st.calls_active, st.calls_started), (0, 1));
}

/// Hung up while the callee rings: the callee's INVITE is cancelled and the caller gets the
/// cause's final response (busy: 486).
#[test]
fn a_ringing_call_hung_up_is_cancelled_and_refused_with_the_cause() {
    let (mut n, sw, a, b) = setup();
    n.agent(b).policy = ua::Policy {
        provisional: vec![(180, false)],
        status: 480,
        after: secs(300),
    };
    let c = n.invite(a, "sip:2001@127.0.0.1", SW);
    assert!(n.run_until(secs(2), |n| invite_statuses(n, a, c).contains(&180)));
    let Reply::Calls(calls) = n.sw(sw).node().command(Command::Calls) else {
        panic!("Calls answers with Reply::Calls");
    };
    assert_eq!(calls[0].state, "ringing");
    assert_eq!(calls[0].legs[1].state, "ringing");
    let hangup = Command::Hangup {
        call_id: calls[0].id.clone(),
        cause: 17,
    };
    assert!(matches!(
        n.sw(sw).node().command(hangup),
        Reply::Hangup(true)
    ));
    assert!(n.run_until(secs(5), ended(a, c)));
    assert_eq!(invite_statuses(&mut n, a, c).last(), Some(&486));
    assert_eq!(n.agent(b).last().requests_of(&Method::Cancel).len(), 1);
    assert_eq!(n.sw(sw).cdrs()[0]["sip_status"], 486);
}

#[test]
fn notices_are_made_only_while_watched_and_tell_a_call_in_order() {
    let (mut n, sw, a, _) = setup();
    let c = bridged(&mut n, a);
    n.bye(a, c);
    assert!(n.run_until(secs(5), bye_answered(a, c)));
    assert!(n.sw(sw).node().take_notices().is_empty(), "nobody listens");

    n.sw(sw).node().watch(true);
    let c = bridged(&mut n, a);
    n.info(
        a,
        c,
        "application/dtmf-relay",
        "Signal=5\r\nDuration=160\r\n",
    );
    n.run_for(secs(1));
    n.bye(a, c);
    assert!(n.run_until(secs(5), bye_answered(a, c)));
    let id = n.agent(a).call(c).call_id.clone();
    let events: Vec<String> = n
        .sw(sw)
        .node()
        .take_notices()
        .iter()
        .map(|e| match e {
            Notice::Created { call_id, exten, .. } => {
                assert_eq!((call_id, exten.as_str()), (&id, "2001"));
                "created".to_string()
            }
            Notice::Ringing { call_id, .. } => format!("ringing {}", *call_id == id),
            Notice::Answered { call_id, .. } => format!("answered {}", *call_id == id),
            Notice::Bridged { to, .. } => format!("bridged {}", to.contains(BOB)),
            Notice::Dtmf { digit, .. } => format!("dtmf {digit}"),
            Notice::Ended { cause, cdr, .. } => format!("ended {cause} {}", cdr.call_id == id),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        events,
        [
            "created",
            "ringing true",
            "bridged true",
            "answered true",
            "dtmf 5",
            "ended 16 true"
        ]
    );

    n.sw(sw).node().watch(false);
    let c = bridged(&mut n, a);
    n.bye(a, c);
    assert!(n.run_until(secs(5), bye_answered(a, c)));
    assert!(
        n.sw(sw).node().take_notices().is_empty(),
        "nobody listens again"
    );
}

/// A client that wants only registrations costs a call nothing (no call notice is made), and
/// one that wants only calls is told no registration.
#[test]
fn notices_are_made_only_of_the_types_watched() {
    let mut n = Net::new(11);
    let sw = b2bua(&mut n, "[registrar]\nauthenticate = false\n");
    let a = n.ua(ALICE, "alice");
    n.ua(BOB, "bob");
    let p = n.ua("127.0.0.1:5070", "1001");
    let once = |n: &mut Net, mask: u8| -> Vec<&'static str> {
        n.sw(sw).node().watch_kinds(mask);
        let c = bridged(n, a);
        n.bye(a, c);
        assert!(n.run_until(secs(5), bye_answered(a, c)));
        n.register(p, SW, "strowger", 60);
        n.run_for(secs(1));
        n.sw(sw)
            .node()
            .take_notices()
            .iter()
            .map(|x| x.kind())
            .collect()
    };
    assert_eq!(
        once(&mut n, switch::control::REGISTRATION),
        ["registration"]
    );
    let calls = once(&mut n, switch::control::CALL);
    assert_eq!(
        calls, ["call"; 5],
        "created, ringing, bridged, answered, ended"
    );
}

/// While watched, a REGISTER's contact is told as added, a refresh as refreshed, a contact
/// left to lapse as expired (by the registrar's own timer) and an Expires: 0 as removed.
#[test]
fn registrations_are_told_added_refreshed_expired_and_removed_while_watched() {
    let mut n = Net::new(12);
    let sw = b2bua(
        &mut n,
        "[registrar]\nauthenticate = false\nmin_expires = 5\n",
    );
    n.sw(sw).node().watch(true);
    let p = n.ua("127.0.0.1:5070", "1001");
    let told = |n: &mut Net| -> Vec<String> {
        n.sw(sw)
            .node()
            .take_notices()
            .iter()
            .map(|x| match x {
                Notice::Added {
                    aor,
                    contact,
                    expires_in,
                } => {
                    assert_eq!(aor, "1001@strowger");
                    assert!(contact.contains("127.0.0.1:5070"), "{contact}");
                    format!("added {expires_in}")
                }
                Notice::Refreshed { expires_in, .. } => format!("refreshed {expires_in}"),
                Notice::Expired { aor, .. } => format!("expired {aor}"),
                Notice::Removed { aor, .. } => format!("removed {aor}"),
                other => format!("{other:?}"),
            })
            .collect()
    };
    n.register(p, SW, "strowger", 5);
    assert!(n.run_until(secs(2), registered([p])));
    assert_eq!(told(&mut n), ["added 5"]);
    n.run_for(secs(2));
    n.register(p, SW, "strowger", 5);
    n.run_for(secs(1));
    assert_eq!(told(&mut n), ["refreshed 5"]);
    n.run_for(secs(4));
    assert!(told(&mut n).is_empty(), "not lapsed yet");
    n.run_for(secs(2));
    assert_eq!(told(&mut n), ["expired 1001@strowger"]);
    n.register(p, SW, "strowger", 60);
    n.run_for(secs(1));
    n.register(p, SW, "strowger", 0);
    n.run_for(secs(1));
    assert_eq!(told(&mut n), ["added 60", "removed 1001@strowger"]);
}
