//! Call parking and pickup on the simulated network (tests/net), in virtual time: park by
//! dialling 700, retrieve by dialling the slot, an empty slot, the ring-back when a parked
//! call times out, directed and group pickup — on one worker, then on two, where the caller
//! who retrieves or picks up is handed to the worker holding the other call.

use crate::net;

use net::*;
use sip::Method;
use std::time::Duration;

/// Parking at 700 (slots 701-703), 799 parks in a short lot whose calls ring user 1003 back,
/// 798 in one whose calls go nowhere, 797 in one whose calls go to the echo test (9196); *8EXT picks up EXT's call, *8 a call of the caller's
/// pickup group (1001 and 1002); 1XXX rings the user.
const TOML: &str = r#"
[rtp]
media_timeout_s = 0
[security]
trusted = ["127.0.0.0/8", "::1"]
[registrar]
authenticate = false
keepalive_s = 0
[parking.default]
slots = "701-703"
timeout_s = 600
[parking.short]
slots = "731-732"
timeout_s = 5
[parking.nowhere]
slots = "741-742"
timeout_s = 5
[parking.fallback]
slots = "751-752"
timeout_s = 5
timeout_exten = "9196"
[pickup_groups]
sales = ["1001", "1002"]
[ring_groups.desk]
members = ["user/1001", "user/1003"]
strategy = "ringall"
[dialplan]
default_context = "default"
[[dialplan.contexts.default.rules]]
exten = "700"
steps = ["park"]
[[dialplan.contexts.default.rules]]
exten = "799"
steps = ["set PARKER=user/1003", "park short"]
[[dialplan.contexts.default.rules]]
exten = "798"
steps = ["park nowhere"]
[[dialplan.contexts.default.rules]]
exten = "797"
steps = ["park fallback"]
[[dialplan.contexts.default.rules]]
exten = "9196"
steps = ["answer", "echo"]
[[dialplan.contexts.default.rules]]
regex = "^7(0[1-9]|[1-4][0-9])$"
steps = ["retrieve"]
[[dialplan.contexts.default.rules]]
regex = "^\\*8(\\d+)$"
steps = ["pickup ${1}"]
[[dialplan.contexts.default.rules]]
exten = "*8"
steps = ["pickup"]
[[dialplan.contexts.default.rules]]
exten = "6000"
steps = ["bridge group/desk timeout=60"]
[[dialplan.contexts.default.rules]]
regex = "^1\\d{3}$"
steps = ["bridge user/${EXTEN} timeout=60"]
"#;

const CAROL: &str = "127.0.0.1:5062";
const DAVE: &str = "127.0.0.1:5063";

fn setup(seed: u64, workers: usize) -> (Net, Id, Id, Id) {
    let mut n = Net::new(seed);
    let sw = n.switch(TOML, &[SW], workers);
    for user in ["1001", "1002", "1003"] {
        n.sw(sw).shared.store.add_user(user, "strowger", "secret");
    }
    let a = n.ua(ALICE, "alice");
    let c = n.ua(CAROL, "1002");
    (n, sw, a, c)
}

/// A phone registered as `user` at `at` that rings and never answers by itself.
fn ringing_phone(n: &mut Net, at: &str, user: &str) -> Id {
    let p = n.ua(at, user);
    n.agent(p).policy = ua::Policy {
        provisional: vec![(180, false)],
        status: 480,
        after: Duration::from_secs(300),
    };
    n.register(p, SW, "strowger", 600);
    assert!(n.run_until(secs(2), registered([p])));
    p
}

/// Whether agent `ua` got RTP after `since`.
fn rtp_after(n: &mut Net, ua: Id, since: std::time::Instant) -> usize {
    n.agent(ua).rtp.iter().filter(|(t, ..)| *t > since).count()
}

/// Alice parks by dialling 700 (answered at once, the slot told, music); Carol dials 701 and
/// is joined to her: each hears the other; Carol hangs up and Alice gets a BYE.
fn park_and_retrieve(n: &mut Net, sw: Id, a: Id, c: Id) {
    n.agent(a).send_rtp = true;
    n.agent(c).send_rtp = true;
    let parked = n.invite(a, "sip:700@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, parked)));
    // The slot's digits and then the music play to the parked caller.
    let t = n.now;
    n.run_for(secs(3));
    assert!(rtp_after(n, a, t) > 100, "Alice hears the slot and music");
    let r = n.invite(c, "sip:701@127.0.0.1", SW);
    assert!(
        n.run_until(secs(2), confirmed(c, r)),
        "{:?}",
        invite_statuses(n, c, r)
    );
    let t = n.now;
    n.run_for(secs(1));
    assert!(rtp_after(n, c, t) > 40, "Carol hears Alice");
    assert!(rtp_after(n, a, t) > 40, "Alice hears Carol");
    n.bye(c, r);
    assert!(n.run_until(secs(2), |n| n
        .agent(a)
        .call(parked)
        .requests_of(&Method::Bye)
        .len()
        == 1));
    assert!(n.run_until(secs(2), |n| n.sw(sw).active_calls() == 0));
    n.agent(a).send_rtp = false;
    n.agent(c).send_rtp = false;
}

#[test]
fn a_call_parked_at_700_is_retrieved_by_dialling_its_slot() {
    let (mut n, sw, a, c) = setup(1, 1);
    park_and_retrieve(&mut n, sw, a, c);
    // The slot is free again: the next call parks there too.
    park_and_retrieve(&mut n, sw, a, c);
    let cdrs = n.sw(sw).cdrs();
    assert_eq!(cdrs.len(), 4);
    assert!(n.sw(sw).shared.rendezvous.lots.is_empty());
}

/// A retrieved call is a two-party call like any: the retriever holds it and the parked
/// caller hears music until it resumes.
#[test]
fn holding_a_retrieved_call_plays_the_other_party_music() {
    let (mut n, _sw, a, c) = setup(13, 2);
    let parked = n.invite(a, "sip:700@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, parked)));
    let r = n.invite(c, "sip:701@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(c, r)));
    let quiet = |n: &mut Net| {
        let t = n.now;
        n.run_for(secs(1));
        rtp_after(n, a, t)
    };
    assert_eq!(quiet(&mut n), 0, "joined, nobody talks: silence");
    let hold = n.agent(c).sdp(&[0], "sendonly");
    n.reinvite(c, r, hold);
    n.run_for(ms(200));
    assert!(quiet(&mut n) > 40, "held: Alice hears music");
    let resume = n.agent(c).sdp(&[0], "sendrecv");
    n.reinvite(c, r, resume);
    n.run_for(ms(200));
    assert_eq!(quiet(&mut n), 0, "resumed: silence again");
}

/// A blind transfer to 700 parks the transferee (it takes the call's caller's place): the
/// transferor hears the transfer succeed and is told the slot while the transferee hears
/// music, and whoever dials the slot — on either worker — is joined to the transferee.
#[test]
fn a_blind_transfer_to_700_parks_the_transferee() {
    let (mut n, sw, a, c) = setup(15, 2);
    let b = n.ua("127.0.0.1:5091", "1001");
    n.register(b, SW, "strowger", 600);
    assert!(n.run_until(secs(2), registered([b])));
    for round in 0..4 {
        let ca = n.invite(a, "sip:1001@127.0.0.1", SW);
        assert!(n.run_until(secs(2), confirmed(a, ca)));
        let cb = n.agent(b).last_index().unwrap();
        n.refer(b, cb, "<sip:700@127.0.0.1>");
        assert!(n.run_until(secs(2), |n| n
            .agent(b)
            .call(cb)
            .requests_of(&Method::Notify)
            .iter()
            .any(|m| net::body(m).contains("200"))));
        // Bob, the transferor, is told the slot while Alice already hears music.
        let t = n.now;
        n.run_for(ms(800));
        assert!(
            rtp_after(&mut n, b, t) > 20,
            "round {round}: Bob hears the slot"
        );
        assert!(
            rtp_after(&mut n, a, t) > 20,
            "round {round}: Alice hears music"
        );
        n.bye(b, cb);
        assert!(n.run_until(secs(2), |n| n
            .sw(sw)
            .shared
            .rendezvous
            .lots
            .find("701")
            .is_some()));
        n.agent(a).send_rtp = true;
        let r = n.invite(c, "sip:701@127.0.0.1", SW);
        assert!(n.run_until(secs(2), confirmed(c, r)), "round {round}");
        let t = n.now;
        n.run_for(secs(1));
        assert!(
            rtp_after(&mut n, c, t) > 40,
            "round {round}: Carol hears Alice"
        );
        n.agent(a).send_rtp = false;
        n.bye(c, r);
        assert!(n.run_until(secs(2), |n| n.sw(sw).active_calls() == 0));
    }
}

#[test]
fn an_empty_slot_is_refused_with_404() {
    let (mut n, _sw, _a, c) = setup(2, 1);
    let r = n.invite(c, "sip:702@127.0.0.1", SW);
    assert!(n.run_until(secs(2), |n| n.agent(c).call(r).state == State::Ended));
    assert_eq!(invite_statuses(&mut n, c, r).last(), Some(&404));
}

#[test]
fn slots_are_taken_in_order_and_a_parked_callers_hang_up_frees_its_slot() {
    let (mut n, sw, a, c) = setup(3, 1);
    let first = n.invite(a, "sip:700@127.0.0.1", SW);
    let second = n.invite(c, "sip:700@127.0.0.1", SW);
    assert!(n.run_until(secs(2), |n| n.agent(a).call(first).state
        == State::Confirmed
        && n.agent(c).call(second).state == State::Confirmed));
    let lots = &n.sw(sw).shared.rendezvous.lots;
    let held: Vec<_> = ["701", "702", "703"]
        .iter()
        .map(|s| lots.find(s).is_some())
        .collect();
    assert_eq!(held, [true, true, false]);
    n.bye(a, first);
    assert!(n.run_until(secs(2), |n| n.sw(sw).active_calls() == 1));
    assert!(n.sw(sw).shared.rendezvous.lots.find("701").is_none());
    assert!(n.sw(sw).shared.rendezvous.lots.find("702").is_some());
}

#[test]
fn a_parked_call_that_times_out_rings_the_parker_back() {
    let (mut n, sw, a, _c) = setup(4, 1);
    let d = n.ua(DAVE, "1003");
    n.register(d, SW, "strowger", 600);
    assert!(n.run_until(secs(2), registered([d])));
    let parked = n.invite(a, "sip:799@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, parked)));
    assert!(n.sw(sw).shared.rendezvous.lots.find("731").is_some());
    // Nothing for 5 s, then Dave (PARKER=user/1003) rings, answers and talks to Alice.
    n.run_for(secs(4));
    assert!(n.agent(d).calls.is_empty());
    assert!(n.run_until(secs(3), |n| n
        .agent(d)
        .calls
        .first()
        .is_some_and(|c| c.state == State::Confirmed)));
    assert!(n.sw(sw).shared.rendezvous.lots.is_empty());
    n.agent(a).send_rtp = true;
    let t = n.now;
    n.run_for(secs(1));
    assert!(rtp_after(&mut n, d, t) > 40, "Dave hears Alice");
}

#[test]
fn a_parked_call_that_times_out_with_nobody_to_ring_back_is_hung_up() {
    let (mut n, sw, a, _c) = setup(5, 1);
    let parked = n.invite(a, "sip:798@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, parked)));
    assert!(n.run_until(secs(7), |n| !n
        .agent(a)
        .call(parked)
        .requests_of(&Method::Bye)
        .is_empty()));
    assert_eq!(n.sw(sw).active_calls(), 0);
    assert!(n.sw(sw).shared.rendezvous.lots.is_empty());
}

#[test]
fn a_parked_call_that_times_out_without_a_parker_goes_to_its_lots_timeout_exten() {
    let (mut n, sw, a, _c) = setup(12, 1);
    let parked = n.invite(a, "sip:797@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, parked)));
    n.run_for(secs(6));
    assert!(n.sw(sw).shared.rendezvous.lots.is_empty());
    // The echo test now: the music stopped, and Alice hears herself.
    let t = n.now;
    n.run_for(secs(1));
    assert_eq!(rtp_after(&mut n, a, t), 0, "no more music");
    n.agent(a).send_rtp = true;
    let t = n.now;
    n.run_for(secs(1));
    assert!(rtp_after(&mut n, a, t) > 40, "Alice hears her echo");
    n.bye(a, parked);
    assert!(n.run_until(secs(2), |n| n.sw(sw).active_calls() == 0));
    assert_eq!(n.sw(sw).cdrs()[0]["exten"], "9196");
}

/// Alice calls 1001, whose phone rings; `picker` dials `exten` and is joined to Alice, the
/// ringing phone gets a CANCEL.
fn pick_up(n: &mut Net, sw: Id, a: Id, picker: Id, phone: Id, exten: &str) {
    let call = n.invite(a, "sip:1001@127.0.0.1", SW);
    let rings = n.agent(phone).calls.len() + 1;
    assert!(n.run_until(secs(2), |n| n.agent(phone).calls.len() == rings));
    let ringing = rings - 1;
    n.agent(a).send_rtp = true;
    n.agent(picker).send_rtp = true;
    let p = n.invite(picker, &format!("sip:{exten}@127.0.0.1"), SW);
    assert!(
        n.run_until(secs(2), |n| n.agent(picker).call(p).state
            == State::Confirmed
            && n.agent(a).call(call).state == State::Confirmed),
        "picker {:?}, caller {:?}",
        invite_statuses(n, picker, p),
        invite_statuses(n, a, call)
    );
    assert!(n.run_until(secs(2), |n| !n
        .agent(phone)
        .call(ringing)
        .requests_of(&Method::Cancel)
        .is_empty()));
    let t = n.now;
    n.run_for(secs(1));
    assert!(rtp_after(n, a, t) > 40, "Alice hears the picker");
    assert!(rtp_after(n, picker, t) > 40, "the picker hears Alice");
    n.bye(a, call);
    assert!(n.run_until(secs(2), |n| n.sw(sw).active_calls() == 0));
    assert!(n.sw(sw).shared.rendezvous.ringing.is_empty());
    n.agent(a).send_rtp = false;
    n.agent(picker).send_rtp = false;
}

#[test]
fn a_call_ringing_a_user_is_picked_up_by_dialling_star_8_and_its_extension() {
    let (mut n, sw, a, c) = setup(6, 1);
    let phone = ringing_phone(&mut n, "127.0.0.1:5091", "1001");
    pick_up(&mut n, sw, a, c, phone, "*81001");
}

#[test]
fn star_8_picks_up_a_call_ringing_a_member_of_the_callers_pickup_group() {
    let (mut n, sw, a, c) = setup(7, 1);
    let phone = ringing_phone(&mut n, "127.0.0.1:5091", "1001");
    pick_up(&mut n, sw, a, c, phone, "*8");
}

/// A ring group rings two users at once: picking up either one's call answers the caller
/// and both phones stop ringing.
#[test]
fn a_call_ringing_a_ring_group_is_picked_up_by_any_members_extension() {
    let (mut n, sw, a, c) = setup(14, 2);
    let p1 = ringing_phone(&mut n, "127.0.0.1:5091", "1001");
    let p3 = ringing_phone(&mut n, "127.0.0.1:5093", "1003");
    let call = n.invite(a, "sip:6000@127.0.0.1", SW);
    assert!(n.run_until(secs(2), |n| !n.agent(p1).calls.is_empty()
        && !n.agent(p3).calls.is_empty()));
    let p = n.invite(c, "sip:*81003@127.0.0.1", SW);
    assert!(
        n.run_until(secs(2), |n| n.agent(c).call(p).state == State::Confirmed
            && n.agent(a).call(call).state == State::Confirmed)
    );
    for phone in [p1, p3] {
        assert!(n.run_until(secs(2), |n| !n
            .agent(phone)
            .call(0)
            .requests_of(&Method::Cancel)
            .is_empty()));
    }
    n.bye(a, call);
    assert!(n.run_until(secs(2), |n| n.sw(sw).active_calls() == 0));
    assert!(n.sw(sw).shared.rendezvous.ringing.is_empty());
}

#[test]
fn pickup_with_nothing_ringing_is_refused_with_480() {
    let (mut n, _sw, _a, c) = setup(8, 1);
    for exten in ["*81001", "*8"] {
        let r = n.invite(c, &format!("sip:{exten}@127.0.0.1"), SW);
        assert!(n.run_until(secs(2), |n| n.agent(c).call(r).state == State::Ended));
        assert_eq!(invite_statuses(&mut n, c, r).last(), Some(&480), "{exten}");
    }
}

/// With two workers, the calls land on either by their Call-IDs: retrieval and pickup work
/// whether the other call is on the same worker or not, the other worker's caller handed over
/// before anything was answered; the pins go once the calls are over.
#[test]
fn on_two_workers_retrieval_and_pickup_reach_the_other_calls_worker() {
    let (mut n, sw, a, c) = setup(9, 2);
    for _ in 0..10 {
        park_and_retrieve(&mut n, sw, a, c);
    }
    let parks = n.sw(sw).handed_off();
    assert!(
        parks > 0 && parks < 10,
        "handed over {parks} of 10 retrievals"
    );
    let phone = ringing_phone(&mut n, "127.0.0.1:5091", "1001");
    for i in 0..10 {
        let exten = if i % 2 == 0 { "*81001" } else { "*8" };
        pick_up(&mut n, sw, a, c, phone, exten);
    }
    let pickups = n.sw(sw).handed_off() - parks;
    assert!(
        pickups > 0 && pickups < 10,
        "handed over {pickups} of 10 pickups"
    );
    // Every handed-over call answered 100 Trying once, from the worker it ran on.
    for call in &n.agent(c).calls {
        let trying = call.statuses().iter().filter(|s| **s == 100).count();
        assert!(trying <= 1, "{:?}", call.statuses());
    }
    assert!(!n.sw(sw).shared.rendezvous.pins.is_empty());
    n.run_for(secs(70));
    assert!(
        n.sw(sw).shared.rendezvous.pins.is_empty(),
        "pins outlive their calls"
    );
}

/// An INVITE with Replaces (RFC 3891) is taken by the worker of the dialog it replaces
/// whatever its own Call-ID hashes to, and its Call-ID is pinned there: it replaces that
/// dialog's leg.
#[test]
fn an_invite_with_replaces_reaches_the_worker_of_the_dialog_it_replaces() {
    let (mut n, sw, a, carol) = setup(10, 2);
    let parked = n.invite(a, "sip:700@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, parked)));
    let replaced = n.agent(a).call(parked).call_id.clone();
    let there = switch::owner(&replaced, 2);
    // An agent whose first Call-ID hashes to the other worker.
    let user = (0..)
        .map(|i| format!("eve{i}"))
        .find(|u| switch::owner(&format!("call-{u}1@ua"), 2) != there)
        .unwrap();
    let e = n.ua(DAVE, &user);
    let (to_tag, from_tag) = {
        let c = n.agent(a).call(parked);
        (c.remote_tag.clone(), c.local_tag.clone())
    };
    let replaces = format!("{replaced};to-tag={to_tag};from-tag={from_tag}");
    let c = n.invite_with(e, "sip:700@127.0.0.1", SW, &[("Replaces", &replaces)]);
    let own = n.agent(e).call(c).call_id.clone();
    assert_ne!(switch::owner(&own, 2), there);
    assert!(n.run_until(secs(2), confirmed(e, c)));
    // It replaced Alice's leg in the call that worker holds (transfer.rs): Alice gets a BYE.
    assert!(n.run_until(secs(2), |n| !n
        .agent(a)
        .call(parked)
        .requests_of(&Method::Bye)
        .is_empty()));
    assert_eq!(n.sw(sw).workers[there].active_calls(), 1);
    assert_eq!(n.sw(sw).active_calls(), 1);
    assert_eq!(n.sw(sw).shared.rendezvous.pins.get(&own), Some(there));
    assert_eq!(
        n.sw(sw).handed_off(),
        0,
        "routed by dispatch, not handed over"
    );
    // Still parked, the new party is retrieved from its slot.
    let r = n.invite(carol, "sip:701@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(carol, r)));
    n.bye(e, c);
    assert!(n.run_until(secs(2), |n| n.sw(sw).active_calls() == 0));
    n.run_for(secs(40));
    assert!(n.sw(sw).shared.rendezvous.pins.is_empty());
}

/// Users who authenticate: the retriever's first INVITE is handed over before its challenge,
/// so the worker that keeps the call challenges it with its own nonce and the answer comes
/// back there through the pin — one 401, no second (stale) challenge. The parker is the user
/// who parked (PARKER).
#[test]
fn a_user_retrieves_a_call_parked_on_another_worker_after_one_challenge() {
    let mut n = Net::new(11);
    let toml = TOML.replace(
        "trusted = [\"127.0.0.0/8\", \"::1\"]",
        "trusted = []\npublic_context = \"\"",
    );
    let sw = n.switch(&toml, &[SW], 2);
    for user in ["1001", "1002"] {
        n.sw(sw).shared.store.add_user(user, "strowger", "secret");
    }
    let a = n.ua(ALICE, "1001");
    n.agent(a).credentials = Some(("1001".into(), "secret".into()));
    let mut crossed = 0;
    for i in 0..12 {
        let parked = n.invite(a, "sip:700@127.0.0.1", SW);
        assert!(n.run_until(secs(2), confirmed(a, parked)));
        // A phone of its own each time: Call-IDs are unique per agent name.
        let c = n.ua(&format!("127.0.0.1:{}", 5200 + i), &format!("carol{i}"));
        n.agent(c).credentials = Some(("1002".into(), "secret".into()));
        let r = n.invite(c, "sip:701@127.0.0.1", SW);
        assert!(
            n.run_until(secs(2), confirmed(c, r)),
            "{:?}",
            invite_statuses(&mut n, c, r)
        );
        let statuses = invite_statuses(&mut n, c, r);
        assert_eq!(
            statuses.iter().filter(|s| **s == 401).count(),
            1,
            "{statuses:?}"
        );
        let (ours, theirs) = (
            n.agent(a).call(parked).call_id.clone(),
            n.agent(c).call(r).call_id.clone(),
        );
        if switch::owner(&ours, 2) != switch::owner(&theirs, 2) {
            crossed += 1;
        }
        n.bye(c, r);
        assert!(n.run_until(secs(2), |n| n.sw(sw).active_calls() == 0));
    }
    assert!(crossed > 0, "no retrieval crossed workers");
    // Strangers' INVITEs to a slot are challenged by the worker holding the parked call, and
    // pin nothing.
    let parked = n.invite(a, "sip:700@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, parked)));
    n.run_for(secs(40));
    assert!(n.sw(sw).shared.rendezvous.pins.is_empty());
    let stranger = n.ua(DAVE, "mallory");
    let before = n.sw(sw).handed_off();
    for _ in 0..10 {
        let r = n.invite(stranger, "sip:701@127.0.0.1", SW);
        assert!(n.run_until(secs(2), |n| n.agent(stranger).call(r).state == State::Ended));
        assert_eq!(invite_statuses(&mut n, stranger, r), [401]);
    }
    assert!(n.sw(sw).handed_off() > before, "some were handed over");
    assert!(
        n.sw(sw).shared.rendezvous.pins.is_empty(),
        "and pinned nothing"
    );
    let parker = n.sw(sw).cdrs().iter().any(|c| c["user"] == "1001");
    assert!(parker, "the parker's calls are the user's");
}

/// Two switches on one store, each naming itself in `[cluster]`: Alice parks on the first and
/// gets 701, Dave parks on the second and gets 702 (701 is the first's); Carol dials 701 on the
/// second, which bridges her to the first, where she is joined to Alice. Once Alice's call
/// ends, 701 is free for the second switch too.
#[test]
fn a_call_parked_on_one_switch_is_retrieved_through_another() {
    const SW2: &str = "127.0.0.2:5060";
    let mut n = Net::new(21);
    let node = |addr: &str| format!("{TOML}\n[cluster]\nnode_uri = \"sip:{addr}\"\n");
    let one = n.switch(&node(SW), &[SW], 2);
    let two = n.switch_sharing(&node(SW2), &[SW2], 1, one);
    let (a, c, d) = (
        n.ua(ALICE, "alice"),
        n.ua(CAROL, "1002"),
        n.ua(DAVE, "dave"),
    );
    n.agent(a).send_rtp = true;
    n.agent(c).send_rtp = true;
    let parked = n.invite(a, "sip:700@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, parked)));
    let other = n.invite(d, "sip:700@127.0.0.2", SW2);
    assert!(n.run_until(secs(2), confirmed(d, other)));
    n.run_for(ms(500));
    let parked_in = |n: &mut Net, sw: Id, slot: &str| {
        let want = format!("parked in slot {slot} of lot default");
        n.sw(sw).logs().iter().filter(|l| l.contains(&want)).count()
    };
    assert_eq!(parked_in(&mut n, one, "701"), 1, "{:?}", n.sw(one).logs());
    assert_eq!(parked_in(&mut n, two, "702"), 1, "{:?}", n.sw(two).logs());

    let r = n.invite(c, "sip:701@127.0.0.2", SW2);
    assert!(
        n.run_until(secs(2), confirmed(c, r)),
        "{:?}",
        invite_statuses(&mut n, c, r)
    );
    let t = n.now;
    n.run_for(secs(1));
    assert!(rtp_after(&mut n, c, t) > 40, "Carol hears Alice");
    let logs = n.sw(two).logs();
    let bridged = "701 is on node sip:127.0.0.1:5060: bridged there";
    assert!(logs.iter().any(|l| l.contains(bridged)), "{logs:?}");
    n.bye(c, r);
    assert!(n.run_until(secs(2), |n| n
        .agent(a)
        .call(parked)
        .requests_of(&Method::Bye)
        .len()
        == 1));
    assert!(n.run_until(secs(2), |n| n.sw(one).active_calls() == 0));

    let again = n.invite(c, "sip:700@127.0.0.2", SW2);
    assert!(n.run_until(secs(2), confirmed(c, again)));
    n.run_for(ms(500));
    assert_eq!(parked_in(&mut n, two, "701"), 1, "{:?}", n.sw(two).logs());
}
