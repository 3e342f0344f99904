//! Forwarding and failover on the simulated network (tests/net): users set their forwarding
//! with feature codes, a call to a user follows it when the user forwards every call, is busy
//! or does not answer; `goto` branches on conditions and the time of day; ring groups ring
//! their members all at once, in order, or round-robin, and cancel the members that lost.

use crate::net;

use net::*;
use sip::{HeaderName, Method};
use std::time::Instant;
use store::CredentialStore;

/// Users register unchallenged and call with their password (nobody is trusted by address);
/// 1XXX rings the user (5 s), then a voicemail (vm-1XXX answers for a second) when the user
/// was busy or did not answer; 2XXX is Bob.
const RULES: &str = r#"
[[dialplan.contexts.public.rules]]
exten = "*99"
steps = ["forward clear all"]
[[dialplan.contexts.default.rules]]
regex = '^\*72(\d+)$'
steps = ["forward set always ${1}", "answer", "hangup"]
[[dialplan.contexts.default.rules]]
exten = "*73"
steps = ["forward clear always", "answer", "hangup"]
[[dialplan.contexts.default.rules]]
regex = '^\*90(\d+)$'
steps = ["forward set busy ${1}", "answer", "hangup"]
[[dialplan.contexts.default.rules]]
regex = '^\*92(\d+)$'
steps = ["forward set noanswer ${1}", "answer", "hangup"]
[[dialplan.contexts.default.rules]]
regex = '^1\d{3}$'
steps = [
    "bridge user/${EXTEN} timeout=5",
    'goto default exten=vm-${EXTEN} if="${DIALSTATUS} =~ ^(BUSY|NOANSWER)$"',
]
[[dialplan.contexts.default.rules]]
regex = '^2(\d{3})$'
steps = ["bridge sip:${EXTEN}@${bridge_target} timeout=20"]
[[dialplan.contexts.default.rules]]
regex = '^vm-(\d+)$'
steps = ["answer", "wait 1", "hangup"]
[[dialplan.contexts.default.rules]]
exten = "5000"
steps = ['goto default exten=5001 time="fri 08:00-09:00"', "hangup call_rejected"]
[[dialplan.contexts.default.rules]]
exten = "5001"
steps = ["hangup user_busy"]
[[dialplan.contexts.default.rules]]
exten = "6000"
steps = ["bridge user/1002&user/1003&user/1004 timeout=10"]
[[dialplan.contexts.default.rules]]
exten = "6003"
steps = ["bridge user/1002&sip:2001@${bridge_target} timeout=10"]
[[dialplan.contexts.default.rules]]
exten = "6001"
steps = ["bridge group/seq timeout=20"]
[[dialplan.contexts.default.rules]]
exten = "6002"
steps = ["bridge group/rr timeout=20"]
[ring_groups.seq]
members = ["user/1002", "user/1003", "user/1004"]
strategy = "sequential"
member_timeout_s = 2
[ring_groups.rr]
members = ["user/1002", "user/1003", "user/1004"]
strategy = "roundrobin"
"#;

/// A one-worker switch with `RULES` and the time zone `tz`; users 1001-1004 with password
/// "pw".
fn switch(n: &mut Net, tz: &str) -> Id {
    switch_with(n, tz, 1, "")
}

/// `workers` workers, trusting `trusted` (e.g. "\"127.0.0.1\"": callers need no password).
fn switch_with(n: &mut Net, tz: &str, workers: usize, trusted: &str) -> Id {
    let toml = format!(
        "[rtp]\nmedia_timeout_s = 0\n[registrar]\nauthenticate = false\nkeepalive_s = 0\n\
         [security]\ntrusted = [{trusted}]\n[vars]\nbridge_target = \"{BOB}\"\n\
         [dialplan]\ntimezone = \"{tz}\"\n{RULES}"
    );
    let sw = n.switch(&toml, &[SW], workers);
    for u in ["1001", "1002", "1003", "1004"] {
        n.sw(sw).shared.store.add_user(u, "strowger", "pw");
    }
    sw
}

/// A phone of `user` at `addr`, registered, that answers calls as `policy` says and calls
/// with the user's password.
fn phone(n: &mut Net, addr: &str, user: &str, policy: Policy) -> Id {
    let p = n.ua(addr, user);
    n.agent(p).policy = policy;
    n.agent(p).credentials = Some((user.into(), "pw".into()));
    n.register(p, SW, "strowger", 600);
    assert!(n.run_until(secs(2), registered([p])), "{user} registered");
    p
}

fn answers() -> Policy {
    Policy::default()
}

fn busy() -> Policy {
    Policy {
        status: 486,
        ..Policy::default()
    }
}

/// Rings for a minute before answering: longer than any test waits.
fn rings() -> Policy {
    Policy {
        after: secs(60),
        ..Policy::default()
    }
}

/// The caller: user 1001 at ALICE, with its password.
fn alice(n: &mut Net) -> Id {
    let a = n.ua(ALICE, "1001");
    n.agent(a).credentials = Some(("1001".into(), "pw".into()));
    a
}

/// `ua` dials a feature code; strowger answers once it is stored and hangs up.
fn feature_code(n: &mut Net, ua: Id, code: &str) {
    let c = n.invite(ua, &format!("sip:{code}@127.0.0.1"), SW);
    assert!(n.run_until(secs(5), ended(ua, c)), "{code} done");
    assert!(
        invite_statuses(n, ua, c).contains(&200),
        "{code}: {:?}",
        invite_statuses(n, ua, c)
    );
}

/// The user's forwarding as the store has it.
fn forwarding(n: &mut Net, sw: Id, user: &str) -> store::Forwarding {
    let c = n.sw(sw).shared.store.user(user, "strowger").unwrap();
    c.unwrap().forward
}

/// When agent `ua` received its first INVITE (of any call), if it did.
fn first_invite(n: &mut Net, ua: Id) -> Option<Instant> {
    n.agent(ua)
        .received
        .iter()
        .find(|(_, _, m)| m.method() == Some(&Method::Invite))
        .map(|(t, ..)| *t)
}

/// Whether strowger cancelled agent `ua`'s incoming call `c`.
fn cancelled(n: &mut Net, ua: Id, c: usize) -> bool {
    !n.agent(ua).call(c).requests_of(&Method::Cancel).is_empty()
}

/// Alice calls `exten` and the call is answered; she hangs up and nothing is left.
fn call_answered(n: &mut Net, sw: Id, a: Id, exten: &str) {
    let c = n.invite(a, &format!("sip:{exten}@127.0.0.1"), SW);
    assert!(
        n.run_until(secs(30), confirmed(a, c)),
        "{exten}: {:?}",
        invite_statuses(n, a, c)
    );
    hang_up(n, a, c, secs(2));
    n.run_for(secs(1));
    assert_eq!(n.sw(sw).active_calls(), 0, "{exten}: no call left");
}

#[test]
fn unconditional_forwarding_set_and_cleared_by_feature_codes() {
    let mut n = Net::new(71);
    let sw = switch(&mut n, "UTC");
    let p2 = phone(&mut n, "127.0.0.1:5062", "1002", answers());
    let bob = n.ua(BOB, "bob");
    let a = alice(&mut n);

    feature_code(&mut n, p2, "*722001");
    assert_eq!(
        forwarding(&mut n, sw, "1002").always.as_deref(),
        Some("2001")
    );
    call_answered(&mut n, sw, a, "1002");
    assert_eq!(n.agent(bob).calls.len(), 1, "forwarded to Bob");
    assert_eq!(
        n.agent(p2).calls.len(),
        1,
        "1002's phone only dialled the code"
    );
    // Bob sees the call come from Alice.
    let from = n.agent(bob).calls[0].requests[0].header(HeaderName::From);
    assert!(from.unwrap().contains("sip:1001@"), "{from:?}");

    feature_code(&mut n, p2, "*73");
    assert!(forwarding(&mut n, sw, "1002").is_empty());
    call_answered(&mut n, sw, a, "1002");
    assert_eq!(n.agent(bob).calls.len(), 1, "not forwarded any more");
    assert_eq!(n.agent(p2).calls.len(), 3, "1002's phone rang");
}

#[test]
fn busy_forwarding_takes_a_busy_users_calls() {
    let mut n = Net::new(72);
    let sw = switch(&mut n, "UTC");
    let p2 = phone(&mut n, "127.0.0.1:5062", "1002", busy());
    let bob = n.ua(BOB, "bob");
    let a = alice(&mut n);
    // Without forwarding the program sees DIALSTATUS=BUSY: the voicemail answers.
    let c = n.invite(a, "sip:1002@127.0.0.1", SW);
    assert!(n.run_until(secs(10), confirmed(a, c)));
    assert!(n.run_until(secs(5), ended(a, c)), "the voicemail hangs up");
    assert_eq!(n.agent(bob).calls.len(), 0);

    // Busy forwarding: the phone rings (and says busy), then Bob gets the call.
    n.agent(p2).policy = answers();
    feature_code(&mut n, p2, "*902001");
    n.agent(p2).policy = busy();
    assert_eq!(forwarding(&mut n, sw, "1002").busy.as_deref(), Some("2001"));
    call_answered(&mut n, sw, a, "1002");
    assert_eq!(n.agent(p2).calls.len(), 3, "1002's phone was tried");
    assert_eq!(n.agent(bob).calls.len(), 1, "then Bob answered");
    let p2_rang = n
        .agent(p2)
        .received
        .iter()
        .filter(|(_, _, m)| m.method() == Some(&Method::Invite))
        .map(|(t, ..)| *t)
        .next_back();
    assert!(
        first_invite(&mut n, bob) > p2_rang,
        "Bob after the busy phone"
    );
}

#[test]
fn no_answer_forwarding_after_the_bridge_timeout() {
    let mut n = Net::new(73);
    let sw = switch(&mut n, "UTC");
    let p2 = phone(&mut n, "127.0.0.1:5062", "1002", answers());
    let bob = n.ua(BOB, "bob");
    let a = alice(&mut n);
    // Without forwarding the bridge's timeout is DIALSTATUS=NOANSWER: the voicemail answers.
    n.agent(p2).policy = rings();
    let start = n.elapsed();
    let c = n.invite(a, "sip:1002@127.0.0.1", SW);
    assert!(n.run_until(secs(10), confirmed(a, c)));
    assert!(n.elapsed() - start >= secs(5), "after the bridge's timeout");
    assert!(cancelled(&mut n, p2, 0));
    assert!(n.run_until(secs(5), ended(a, c)), "the voicemail hangs up");

    n.agent(p2).policy = answers();
    feature_code(&mut n, p2, "*922001");
    n.agent(p2).policy = rings();
    let start = n.elapsed();
    call_answered(&mut n, sw, a, "1002");
    // The phone rang for the bridge's 5 s, was cancelled, and Bob got the call.
    let rang = n.agent(p2).calls.len() - 1;
    assert!(
        cancelled(&mut n, p2, rang),
        "the ringing phone was cancelled"
    );
    assert_eq!(n.agent(bob).calls.len(), 1);
    assert!(n.elapsed() - start >= secs(5));
}

#[test]
fn a_forwarding_loop_stops_and_a_stranger_cannot_set_forwarding() {
    let mut n = Net::new(74);
    let sw = switch(&mut n, "UTC");
    let p2 = phone(&mut n, "127.0.0.1:5062", "1002", answers());
    let p3 = phone(&mut n, "127.0.0.1:5063", "1003", answers());
    let a = alice(&mut n);
    feature_code(&mut n, p2, "*721003");
    feature_code(&mut n, p3, "*721002");
    // 1002 → 1003 → 1002 → 1003: the third forwarding is the last one followed.
    call_answered(&mut n, sw, a, "1002");
    assert_eq!(
        n.agent(p3).calls.len(),
        2,
        "1003 rang after the forwardings"
    );
    assert_eq!(
        n.agent(p2).calls.len(),
        1,
        "1002's phone only dialled its code"
    );
    let logs = n.sw(sw).logs();
    assert!(logs.iter().any(|l| l.contains("not followed")), "{logs:?}");

    // A caller that is no user reaches the public context's `forward`: refused.
    let stranger = n.ua("127.0.0.1:5070", "mallory");
    let c = n.invite(stranger, "sip:*99@127.0.0.1", SW);
    assert!(n.run_until(secs(5), ended(stranger, c)));
    assert_eq!(invite_statuses(&mut n, stranger, c).last(), Some(&403));
    assert!(!forwarding(&mut n, sw, "1002").is_empty());
    assert_eq!(n.sw(sw).active_calls(), 0);
}

#[test]
fn goto_branches_on_the_time_of_day_in_the_configured_zone() {
    // The nodes' wall clock starts on Friday 2027-01-15 08:00 UTC: 03:00 in New York.
    for (tz, status) in [("UTC", 486), ("America/New_York", 403)] {
        let mut n = Net::new(75);
        let sw = switch(&mut n, tz);
        let a = alice(&mut n);
        let c = n.invite(a, "sip:5000@127.0.0.1", SW);
        assert!(n.run_until(secs(5), ended(a, c)));
        assert_eq!(invite_statuses(&mut n, a, c).last(), Some(&status), "{tz}");
        assert_eq!(n.sw(sw).active_calls(), 0);
    }
}

#[test]
fn a_users_phones_all_ring_and_the_others_are_cancelled() {
    let mut n = Net::new(76);
    let sw = switch(&mut n, "UTC");
    let desk = phone(&mut n, "127.0.0.1:5062", "1002", rings());
    let mobile = phone(
        &mut n,
        "127.0.0.1:5072",
        "1002",
        Policy {
            after: secs(1),
            ..Policy::default()
        },
    );
    let a = alice(&mut n);
    call_answered(&mut n, sw, a, "1002");
    assert_eq!(n.agent(desk).calls.len(), 1, "the desk phone rang");
    assert_eq!(n.agent(mobile).calls.len(), 1, "the mobile rang");
    assert!(cancelled(&mut n, desk, 0), "the desk phone was cancelled");
}

#[test]
fn ringall_rings_every_member_at_once_and_cancels_the_losers() {
    let mut n = Net::new(77);
    let sw = switch(&mut n, "UTC");
    let p2 = phone(&mut n, "127.0.0.1:5062", "1002", rings());
    let p3 = phone(
        &mut n,
        "127.0.0.1:5063",
        "1003",
        Policy {
            after: secs(1),
            ..Policy::default()
        },
    );
    let p4 = phone(&mut n, "127.0.0.1:5064", "1004", rings());
    let a = alice(&mut n);
    let c = n.invite(a, "sip:6000@127.0.0.1", SW);
    assert!(n.run_until(secs(5), confirmed(a, c)));
    let times: Vec<_> = [p2, p3, p4]
        .into_iter()
        .map(|p| first_invite(&mut n, p).unwrap())
        .collect();
    let spread = times
        .iter()
        .max()
        .unwrap()
        .duration_since(*times.iter().min().unwrap());
    assert!(spread < ms(100), "rung at once: {spread:?}");
    assert!(n.run_until(secs(2), |n| cancelled(n, p2, 0) && cancelled(n, p4, 0)));
    assert_eq!(n.agent(p3).call(0).state, State::Confirmed);
    hang_up(&mut n, a, c, secs(2));
    n.run_for(secs(1));
    assert_eq!(n.sw(sw).active_calls(), 0);
    assert_no_tx_events(&mut n, &[a, p2, p3, p4], "");
}

#[test]
fn sequential_hunts_past_a_busy_and_a_silent_member() {
    let mut n = Net::new(78);
    let sw = switch(&mut n, "UTC");
    let p2 = phone(&mut n, "127.0.0.1:5062", "1002", busy());
    let p3 = phone(&mut n, "127.0.0.1:5063", "1003", rings());
    let p4 = phone(&mut n, "127.0.0.1:5064", "1004", answers());
    let a = alice(&mut n);
    call_answered(&mut n, sw, a, "6001");
    let t: Vec<Instant> = [p2, p3, p4]
        .into_iter()
        .map(|p| first_invite(&mut n, p).unwrap())
        .collect();
    assert!(t[0] < t[1] && t[1] < t[2], "in order: {t:?}");
    // 1003 rang for its member_timeout_s (2 s), then was cancelled.
    assert!(t[2].duration_since(t[1]) >= secs(2));
    assert!(cancelled(&mut n, p3, 0));
    assert_eq!(n.agent(p4).calls.len(), 1);
}

/// Two workers: the calls land on either, and the turn is one for both.
#[test]
fn roundrobin_starts_one_member_further_each_call() {
    let mut n = Net::new(79);
    let sw = switch_with(&mut n, "UTC", 2, "");
    let phones: Vec<Id> = ["1002", "1003", "1004"]
        .iter()
        .enumerate()
        .map(|(i, u)| phone(&mut n, &format!("127.0.0.1:506{}", i + 2), u, answers()))
        .collect();
    let a = alice(&mut n);
    for round in 0..6 {
        call_answered(&mut n, sw, a, "6002");
        let rung: Vec<usize> = phones.iter().map(|p| n.agent(*p).calls.len()).collect();
        // Each call is answered by the first member it tries: member `round % 3`.
        let mut want = [0; 3];
        for r in 0..=round {
            want[r % 3] += 1;
        }
        assert_eq!(rung, want, "after call {round}");
    }
    let per_worker: Vec<usize> = n.sw(sw).workers.iter().map(|w| w.cdrs().len()).collect();
    assert!(
        per_worker.iter().all(|&c| c > 0),
        "both workers took calls: {per_worker:?}"
    );
}

/// A ringall of a user and a SIP URI: the URI's busy does not end the bridge while the user's
/// phones are still being looked up; then the user's phone answers.
#[test]
fn ringall_waits_for_a_members_lookup_before_failing() {
    let mut n = Net::new(80);
    // Alice is trusted here, so the lookup of 1002's phones is the call's one store operation.
    let sw = switch_with(&mut n, "UTC", 1, "\"127.0.0.1\"");
    let p2 = phone(
        &mut n,
        "127.0.0.1:5062",
        "1002",
        Policy {
            after: secs(1),
            ..Policy::default()
        },
    );
    let bob = n.ua(BOB, "bob");
    n.agent(bob).policy = busy();
    let a = alice(&mut n);
    n.sw(sw).node().hold_store();
    let c = n.invite(a, "sip:6003@127.0.0.1", SW);
    assert!(n.run_until(secs(2), |n| n.agent(bob).calls.len() == 1));
    assert!(n.run_until(secs(2), |n| n.agent(bob).calls[0].state == State::Ended));
    n.run_for(secs(1));
    assert_eq!(
        n.agent(a).call(c).state,
        State::Calling,
        "still ringing 1002"
    );
    n.sw(sw).node().release_store();
    assert!(n.run_until(secs(5), confirmed(a, c)));
    assert_eq!(n.agent(p2).calls.len(), 1);
    hang_up(&mut n, a, c, secs(2));
    n.run_for(secs(1));
    assert_eq!(n.sw(sw).active_calls(), 0);
}
