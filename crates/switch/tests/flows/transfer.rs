//! Call transfer through strowger on the simulated network (tests/net): blind transfer by
//! REFER from either party, its failure, attended transfer (REFER with Replaces), an INVITE
//! with Replaces, and the refusals; each leaves the call table empty once hung up.

use crate::net;

use net::*;
use sip::{HeaderName, Message, Method};
use std::time::{Duration, Instant};

/// Carol, the transfer target: 4XXX is bridged to her.
const CAROL: &str = "127.0.0.1:5091";

/// Rules in front of the test dialplan: 9196 echoes, 4XXX goes to Carol.
const RULES: &str = r#"
[[dialplan.contexts.default.rules]]
exten = "9196"
steps = ["answer", "echo"]
[[dialplan.contexts.default.rules]]
regex = "^4(\\d{3})$"
steps = ["bridge sip:${EXTEN}@127.0.0.1:5091 timeout=20"]
"#;

/// A switch with Alice (the caller), Bob (2XXX) and Carol (4XXX), all sending RTP.
fn setup(seed: u64) -> (Net, Id, Id, Id, Id) {
    let mut n = Net::new(seed);
    let sw = b2bua(&mut n, RULES);
    let a = n.ua(ALICE, "alice");
    let b = n.ua(BOB, "bob");
    let c = n.ua(CAROL, "carol");
    for ua in [a, b, c] {
        n.agent(ua).send_rtp = true;
    }
    (n, sw, a, b, c)
}

/// Alice calls Bob (2001) and both are answered: Alice's call and Bob's.
pub(crate) fn alice_calls_bob(n: &mut Net, a: Id, b: Id) -> (usize, usize) {
    let ca = n.invite(a, "sip:2001@127.0.0.1", SW);
    assert!(n.run_until(secs(5), confirmed(a, ca)));
    let cb = n.agent(b).last_index().unwrap();
    assert!(n.run_until(secs(5), confirmed(b, cb)));
    (ca, cb)
}

/// The NOTIFYs agent `ua` got in call `c`: the sipfrag status of each, after checking they
/// are refer events with a sipfrag body and a subscription state fit for their status.
pub(crate) fn notifies(n: &mut Net, ua: Id, c: usize) -> Vec<u16> {
    n.agent(ua)
        .call(c)
        .requests_of(&Method::Notify)
        .iter()
        .map(|m| {
            assert!(
                m.header(HeaderName::Event)
                    .is_some_and(|e| e.starts_with("refer")),
                "{m:?}"
            );
            let ct = m.header(HeaderName::ContentType).unwrap_or_default();
            assert!(ct.starts_with("message/sipfrag"), "{ct}");
            let frag = body(m);
            let status: u16 = frag
                .strip_prefix("SIP/2.0 ")
                .and_then(|r| r.get(..3))
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("sipfrag {frag:?}"));
            let state = m.header_named("Subscription-State").unwrap_or_default();
            match status {
                100..=199 => assert!(state.starts_with("active"), "{state}"),
                _ => assert!(state.starts_with("terminated"), "{state}"),
            }
            status
        })
        .collect()
}

/// The status of the last response agent `ua` got to a REFER in call `c`.
fn refer_status(n: &mut Net, ua: Id, c: usize) -> Option<u16> {
    n.agent(ua)
        .call(c)
        .responses_to("REFER")
        .last()
        .and_then(|m| m.status())
}

/// RTP packets agent `ua` gets during the next `d` of virtual time.
fn rtp_during(n: &mut Net, ua: Id, d: Duration) -> usize {
    let t: Instant = n.now;
    n.run_for(d);
    n.agent(ua).rtp.iter().filter(|(at, _, _)| *at > t).count()
}

/// RTP packets agent `ua` gets during the next `d` of virtual time that carry a phone's
/// audio (the agents' silence, not a tone strowger plays).
fn phone_during(n: &mut Net, ua: Id, d: Duration) -> usize {
    let (t, from) = (n.now, n.agent(ua).rtp.len());
    n.run_for(d);
    let agent = n.agent(ua);
    let recent = agent.rtp.iter().zip(&agent.rtp_payloads).skip(from);
    recent
        .filter(|((at, _, _), p)| *at > t && p.iter().all(|&b| b == 0xff))
        .count()
}

/// Whether agent `ua` got a BYE in call `c`.
pub(crate) fn got_bye(ua: Id, c: usize) -> impl FnMut(&mut Net) -> bool {
    move |n| !n.agent(ua).call(c).requests_of(&Method::Bye).is_empty()
}

/// Alice calls Bob; Bob consults Carol at `exten`, who answers as `policy` says, and once she
/// sent its first provisional response (within `ring_wait`) Bob refers Alice's call to that
/// consultation still ringing (a semi-attended transfer): Alice's call, Bob's call from Alice
/// and the consultation.
fn refer_to_ringing(
    n: &mut Net,
    (a, b, c): (Id, Id, Id),
    exten: &str,
    policy: Policy,
    ring_wait: Duration,
) -> (usize, usize, usize) {
    let ringing = policy.provisional[0].0;
    n.agent(c).policy = policy;
    let (ca, cb) = alice_calls_bob(n, a, b);
    let consult = n.invite(b, &format!("sip:{exten}@127.0.0.1"), SW);
    assert!(n.run_until(ring_wait, |n| invite_statuses(n, b, consult)
        .contains(&ringing)));
    let refer_to = refer_to_replacing(n, b, consult, exten);
    n.refer(b, cb, &refer_to);
    (ca, cb, consult)
}

/// `to`'s dialog of call `c` as a Refer-To header value with Replaces, escaped.
pub(crate) fn refer_to_replacing(n: &mut Net, ua: Id, c: usize, exten: &str) -> String {
    let r = n.agent(ua).replaces(c);
    let escaped = r
        .replace('%', "%25")
        .replace('@', "%40")
        .replace(';', "%3B")
        .replace('=', "%3D");
    format!("<sip:{exten}@127.0.0.1?Replaces={escaped}>")
}

/// Alice hangs up call `ca` and `other`'s call `co` ends with it; the switch is left empty:
/// no call, and once the timers of the ended calls ran out, no leg, map entry or timer.
fn hang_up_all(n: &mut Net, sw: Id, a: Id, ca: usize, other: Id, co: usize) {
    hang_up(n, a, ca, secs(5));
    assert!(n.run_until(secs(5), got_bye(other, co)));
    n.run_for(secs(1));
    assert_eq!(n.sw(sw).active_calls(), 0);
    n.run_for(secs(40));
    let counts = n.sw(sw).node().table_counts();
    assert_eq!(counts, switch::TableCounts::default());
}

#[test]
fn blind_transfer_from_the_callee_bridges_the_caller_to_the_target() {
    let (mut n, sw, a, b, c) = setup(1);
    let (ca, cb) = alice_calls_bob(&mut n, a, b);
    n.refer(b, cb, "<sip:4001@127.0.0.1>");
    assert!(n.run_until(secs(5), |n| refer_status(n, b, cb) == Some(202)));
    // Carol rings and answers; Bob hears 100 then 200.
    assert!(n.run_until(secs(5), |n| notifies(n, b, cb).len() == 2));
    assert_eq!(notifies(&mut n, b, cb), [100, 200]);
    let cc = n.agent(c).last_index().expect("Carol was called");
    assert_eq!(n.agent(c).call(cc).state, State::Confirmed);
    let inv = &n.agent(c).call(cc).requests[0];
    assert_eq!(inv.request_uri(), Some("sip:4001@127.0.0.1:5091"));
    // Bob hangs up as a transferor does; the call goes on between Alice and Carol.
    hang_up(&mut n, b, cb, secs(5));
    n.run_for(ms(200));
    let (to_alice, to_carol) = (rtp_during(&mut n, a, secs(1)), n.agent(c).rtp.len());
    assert!(to_alice > 40, "{to_alice} packets to Alice");
    assert!(
        rtp_during(&mut n, c, secs(1)) > 40,
        "{to_carol} packets to Carol"
    );
    assert_eq!(rtp_during(&mut n, b, secs(1)), 0, "nothing to Bob");
    assert_eq!(n.sw(sw).active_calls(), 1);
    hang_up_all(&mut n, sw, a, ca, c, cc);
    let cdr = one_cdr(&mut n, sw, "");
    assert_eq!(cdr["transferred_to"], "4001");
    assert_eq!(cdr["bridged_to"], "sip:4001@127.0.0.1:5091");
    assert_eq!(cdr["exten"], "2001");
}

#[test]
fn blind_transfer_from_the_caller_makes_the_callee_the_caller_and_byes_the_transferor() {
    let (mut n, sw, a, b, c) = setup(2);
    let (ca, cb) = alice_calls_bob(&mut n, a, b);
    n.refer(a, ca, "sip:4002@127.0.0.1");
    assert!(n.run_until(secs(5), |n| notifies(n, a, ca).len() == 2));
    assert_eq!(refer_status(&mut n, a, ca), Some(202));
    assert_eq!(notifies(&mut n, a, ca), [100, 200]);
    // Carol sees Bob's number as the caller.
    let cc = n.agent(c).last_index().expect("Carol was called");
    let from = n.agent(c).call(cc).requests[0]
        .header(HeaderName::From)
        .unwrap_or_default()
        .to_string();
    assert!(from.contains("sip:2001@"), "{from}");
    // Alice stays silent: strowger ends her leg after its grace.
    assert!(n.run_until(secs(5), got_bye(a, ca)));
    n.run_for(ms(200));
    assert!(rtp_during(&mut n, b, secs(1)) > 40, "Bob hears Carol");
    assert!(rtp_during(&mut n, c, secs(1)) > 40, "Carol hears Bob");
    assert_eq!(rtp_during(&mut n, a, secs(1)), 0, "nothing to Alice");
    // Bob is the caller now: his BYE ends the call and Carol's leg.
    hang_up_all(&mut n, sw, b, cb, c, cc);
    let cdr = one_cdr(&mut n, sw, "");
    assert_eq!(cdr["transferred_to"], "4002");
    assert_eq!(cdr["hangup_side"], "caller");
}

#[test]
fn blind_transfer_to_the_echo_app_and_from_a_call_to_an_app() {
    let (mut n, sw, a, b, _) = setup(3);
    let (ca, cb) = alice_calls_bob(&mut n, a, b);
    n.refer(b, cb, "<sip:9196@127.0.0.1>");
    assert!(n.run_until(secs(5), |n| notifies(n, b, cb).len() == 2));
    assert_eq!(notifies(&mut n, b, cb), [100, 200]);
    assert!(
        n.run_until(secs(5), got_bye(b, cb)),
        "the transferor released"
    );
    n.run_for(ms(200));
    assert!(rtp_during(&mut n, a, secs(1)) > 40, "Alice hears her echo");
    hang_up(&mut n, a, ca, secs(5));
    assert_eq!(n.sw(sw).active_calls(), 0);

    // Alone with the demo prompt, Alice moves herself to the echo.
    let ca = n.invite(a, "sip:44444@127.0.0.1", SW);
    assert!(n.run_until(secs(5), confirmed(a, ca)));
    n.refer(a, ca, "<sip:9196@127.0.0.1>");
    assert!(n.run_until(secs(5), |n| notifies(n, a, ca).len() == 2));
    assert_eq!(notifies(&mut n, a, ca), [100, 200]);
    n.run_for(secs(3));
    assert_eq!(
        n.agent(a).call(ca).state,
        State::Confirmed,
        "her call goes on"
    );
    assert!(rtp_during(&mut n, a, secs(1)) > 40);
    hang_up(&mut n, a, ca, secs(5));
    assert_eq!(n.sw(sw).active_calls(), 0);
    let cdrs = n.sw(sw).cdrs();
    assert_eq!(cdrs.len(), 2);
    assert!(
        cdrs.iter().all(|c| c["transferred_to"] == "9196"),
        "{cdrs:?}"
    );
}

/// A target that is busy: the transferor hears 486 and gets its party back, from either side.
#[test]
fn a_failed_blind_transfer_returns_the_transferee_to_the_transferor() {
    for from_caller in [false, true] {
        let (mut n, sw, a, b, c) = setup(4);
        n.agent(c).policy = Policy {
            provisional: vec![(180, false)],
            status: 486,
            after: ms(300),
        };
        let (ca, cb) = alice_calls_bob(&mut n, a, b);
        let (who, call) = if from_caller { (a, ca) } else { (b, cb) };
        n.refer(who, call, "<sip:4001@127.0.0.1>");
        assert!(n.run_until(secs(5), |n| notifies(n, who, call).len() == 2));
        assert_eq!(
            notifies(&mut n, who, call),
            [100, 486],
            "from_caller {from_caller}"
        );
        n.run_for(ms(200));
        assert!(rtp_during(&mut n, a, secs(1)) > 40, "Alice hears Bob again");
        assert!(rtp_during(&mut n, b, secs(1)) > 40, "Bob hears Alice again");
        n.run_for(secs(5));
        assert_eq!(n.agent(a).call(ca).state, State::Confirmed);
        assert_eq!(n.agent(b).call(cb).state, State::Confirmed);
        // The call is as it was: Alice's BYE ends Bob's leg.
        hang_up_all(&mut n, sw, a, ca, b, cb);
        let cdr = one_cdr(&mut n, sw, "");
        assert!(cdr["transferred_to"].is_null(), "{cdr}");
        assert_eq!(cdr["bridged_to"], "sip:2001@127.0.0.1:5090");
    }
}

#[test]
fn refused_refers_leave_the_call_as_it_was() {
    let (mut n, sw, a, b, c) = setup(5);
    let (ca, cb) = alice_calls_bob(&mut n, a, b);
    // Not strowger's host, not a SIP URI: 403 at once.
    for target in ["<sip:4001@192.0.2.7>", "<tel:+15551234>", "<sip:127.0.0.1>"] {
        n.refer(b, cb, target);
        assert!(n.run_until(secs(5), |n| refer_status(n, b, cb) == Some(403)));
        n.agent(b).calls[cb].responses.clear();
    }
    // No such extension in the call's context: accepted, then 404 in the NOTIFY.
    n.refer(b, cb, "<sip:8888@127.0.0.1>");
    assert!(n.run_until(secs(5), |n| notifies(n, b, cb).len() == 2));
    assert_eq!(notifies(&mut n, b, cb), [100, 404]);
    // A second REFER while one is under way: 491.
    n.agent(c).policy.after = secs(3);
    n.refer(b, cb, "<sip:4001@127.0.0.1>");
    assert!(n.run_until(secs(1), |n| refer_status(n, b, cb) == Some(202)));
    n.refer(b, cb, "<sip:9196@127.0.0.1>");
    assert!(n.run_until(secs(1), |n| refer_status(n, b, cb) == Some(491)));
    // Bob hangs up before Carol answers: she still gets Alice.
    hang_up(&mut n, b, cb, secs(5));
    let cc = n.agent(c).last_index().unwrap();
    assert!(n.run_until(secs(5), confirmed(c, cc)));
    n.run_for(ms(200));
    assert!(rtp_during(&mut n, c, secs(1)) > 40);
    // An attended transfer naming a dialog strowger does not have: 481, the call unchanged.
    let ca2 = n.invite(c, "sip:9196@127.0.0.1", SW);
    assert!(n.run_until(secs(5), confirmed(c, ca2)));
    let bogus = "<sip:4001@127.0.0.1?Replaces=nope%40x%3Bto-tag%3D1%3Bfrom-tag%3D2>";
    n.refer(c, cc, bogus);
    assert!(n.run_until(secs(5), |n| notifies(n, c, cc).len() == 2));
    assert_eq!(notifies(&mut n, c, cc), [100, 481]);
    hang_up(&mut n, c, ca2, secs(5));
    hang_up_all(&mut n, sw, a, ca, c, cc);
}

#[test]
fn attended_transfer_connects_the_transferee_with_the_consulted_party() {
    let (mut n, sw, a, b, c) = setup(6);
    let (ca, cb) = alice_calls_bob(&mut n, a, b);
    // Bob consults Carol in a second call.
    let consult = n.invite(b, "sip:4003@127.0.0.1", SW);
    assert!(n.run_until(secs(5), confirmed(b, consult)));
    let cc = n.agent(c).last_index().unwrap();
    let refer_to = refer_to_replacing(&mut n, b, consult, "4003");
    n.refer(b, cb, &refer_to);
    assert!(n.run_until(secs(5), |n| notifies(n, b, cb).len() == 2));
    assert_eq!(notifies(&mut n, b, cb), [100, 200]);
    // Both of Bob's dialogs end; Carol's goes on, now with Alice.
    assert!(n.run_until(secs(5), got_bye(b, consult)));
    assert!(n.run_until(secs(5), got_bye(b, cb)));
    assert_eq!(n.agent(c).calls.len(), 1, "no new call to Carol");
    n.run_for(ms(200));
    assert!(rtp_during(&mut n, a, secs(1)) > 40, "Alice hears Carol");
    assert!(rtp_during(&mut n, c, secs(1)) > 40, "Carol hears Alice");
    assert_eq!(rtp_during(&mut n, b, secs(1)), 0);
    assert_eq!(n.sw(sw).active_calls(), 1);
    hang_up_all(&mut n, sw, a, ca, c, cc);
    assert_eq!(n.sw(sw).cdrs().len(), 2);
}

#[test]
fn an_invite_with_replaces_takes_over_an_answered_leg_and_a_ringing_one() {
    let (mut n, sw, a, b, c) = setup(7);
    let (ca, cb) = alice_calls_bob(&mut n, a, b);
    // Carol takes Bob's place.
    let replaces = n.agent(b).replaces(cb);
    let cc = n.invite_with(c, "sip:2001@127.0.0.1", SW, &[("Replaces", &replaces)]);
    assert!(n.run_until(secs(5), confirmed(c, cc)));
    assert!(n.run_until(secs(5), got_bye(b, cb)));
    n.run_for(ms(200));
    assert!(rtp_during(&mut n, a, secs(1)) > 40, "Alice hears Carol");
    assert!(rtp_during(&mut n, c, secs(1)) > 40, "Carol hears Alice");
    // Replacing it again: it is gone (481); early-only on a confirmed dialog: 486.
    let again = n.invite_with(c, "sip:2001@127.0.0.1", SW, &[("Replaces", &replaces)]);
    assert!(n.run_until(secs(5), ended(c, again)));
    assert_eq!(invite_statuses(&mut n, c, again).last(), Some(&481));
    let theirs = format!("{};early-only", n.agent(c).replaces(cc));
    let early = n.invite_with(a, "sip:2001@127.0.0.1", SW, &[("Replaces", &theirs)]);
    assert!(n.run_until(secs(5), ended(a, early)));
    assert_eq!(invite_statuses(&mut n, a, early).last(), Some(&486));
    hang_up_all(&mut n, sw, a, ca, c, cc);

    // A pickup: Bob rings, Carol answers in his place (he gets CANCEL).
    n.agent(b).policy.after = secs(30);
    let ca = n.invite(a, "sip:2002@127.0.0.1", SW);
    assert!(n.run_until(secs(2), |n| invite_statuses(n, a, ca).contains(&180)));
    let cb = n.agent(b).last_index().unwrap();
    let replaces = n.agent(b).replaces(cb);
    let cc = n.invite_with(c, "sip:2002@127.0.0.1", SW, &[("Replaces", &replaces)]);
    assert!(n.run_until(secs(5), confirmed(c, cc)));
    assert!(n.run_until(secs(5), confirmed(a, ca)), "Alice answered");
    assert!(
        n.run_until(secs(5), ended(b, cb)),
        "Bob's ringing cancelled"
    );
    n.run_for(ms(200));
    assert!(rtp_during(&mut n, a, secs(1)) > 40);
    hang_up_all(&mut n, sw, a, ca, c, cc);
}

/// `REFER` and `replaces` are announced; a NOTIFY in a call is answered 200.
#[test]
fn allow_and_supported_name_refer_and_replaces() {
    let (mut n, _, a, _, _) = setup(8);
    let ca = n.invite(a, "sip:44444@127.0.0.1", SW);
    assert!(n.run_until(secs(5), confirmed(a, ca)));
    let ok: Message = last_response(&mut n, a, ca, "INVITE");
    let allow: Vec<&str> = ok.all(HeaderName::Allow).collect();
    assert!(
        allow.contains(&"REFER") && allow.contains(&"NOTIFY"),
        "{allow:?}"
    );
    assert!(ok.all(HeaderName::Supported).any(|s| s == "replaces"));
    let now = n.now;
    n.agent(a)
        .request(ca, Method::Notify, &[("Event", "dialog")], now);
    assert!(n.run_until(secs(2), |n| !n
        .agent(a)
        .call(ca)
        .responses_to("NOTIFY")
        .is_empty()));
    assert_eq!(last_response(&mut n, a, ca, "NOTIFY").status(), Some(200));
}

/// A thousand transfers leave nothing behind (see `transfer_cycles`).
#[test]
fn a_thousand_transfers_leave_no_state() {
    transfer_cycles(1_000);
}

/// Ten thousand: about 100 s in a debug build, so run on demand (`cargo test -p switch --test
/// transfer -- --ignored`).
#[test]
#[ignore = "long: 10,000 call cycles"]
fn ten_thousand_transfers_leave_no_state() {
    transfer_cycles(10_000);
}

/// `cycles` transfers, in every flavour that ends well (from the callee, from the caller, the
/// transferor hanging up itself or released by strowger), leave nothing behind: no call, leg,
/// map entry or timer. Fresh agents every `BATCH` cycles keep their own records short.
fn transfer_cycles(cycles: usize) {
    const BATCH: usize = 500;
    let mut n = Net::new(9);
    let rules = format!(
        "{RULES}[[dialplan.contexts.default.rules]]\nregex = \"^8(\\\\d{{5}})$\"\nsteps = [\"bridge sip:b@127.0.0.1:${{1}} timeout=20\"]\n"
    );
    let sw = b2bua(&mut n, &rules);
    let (mut a, mut b, mut bob) = (None, None, String::new());
    for i in 0..cycles {
        if i % BATCH == 0 {
            let k = i / BATCH;
            a = Some(n.ua(&format!("127.0.0.1:{}", 11_000 + k), "alice"));
            let port = 12_000 + k;
            b = Some(n.ua(&format!("127.0.0.1:{port}"), "bob"));
            bob = format!("sip:8{port:05}@127.0.0.1");
            n.trace.clear();
        }
        let (a, b) = (a.unwrap(), b.unwrap());
        let (ca, cb) = {
            let ca = n.invite(a, &bob, SW);
            assert!(n.run_until(secs(5), confirmed(a, ca)), "cycle {i}");
            (ca, n.agent(b).last_index().unwrap())
        };
        // Transferor and transferee by turns; every other transferor hangs up by itself.
        let (from, call, to, other) = match i % 2 {
            0 => (b, cb, a, ca),
            _ => (a, ca, b, cb),
        };
        n.refer(from, call, "<sip:9196@127.0.0.1>");
        let done = |n: &mut Net| n.agent(from).call(call).requests_of(&Method::Notify).len() == 2;
        assert!(n.run_until(secs(5), done), "cycle {i}");
        if i % 4 < 2 {
            n.bye(from, call);
        }
        assert!(
            n.run_until(secs(5), |n| n.agent(from).call(call).state == State::Ended),
            "cycle {i}"
        );
        n.bye(to, other);
        assert!(n.run_until(secs(5), bye_answered(to, other)), "cycle {i}");
        assert_eq!(n.sw(sw).active_calls(), 0, "cycle {i}");
    }
    n.run_for(secs(60));
    let counts = n.sw(sw).node().table_counts();
    assert_eq!(counts, switch::TableCounts::default());
    assert_eq!(n.sw(sw).cdrs().len(), cycles);
}

/// A transfer runs in the call's own context: a caller from the public context cannot reach
/// the default context's bridge target (404), only what the public context lists. A REFER
/// outside a dialog, or with another dialog's tags, is refused.
#[test]
fn a_transfer_reaches_only_the_calls_context() {
    let mut n = Net::new(10);
    let head = "[security]\ntrusted = []\npublic_context = \"public\"\n\
        [[dialplan.contexts.public.rules]]\nexten = \"44444\"\n\
        steps = [\"answer\", \"playback demo loop=true\"]\n\
        [[dialplan.contexts.public.rules]]\nexten = \"9196\"\nsteps = [\"answer\", \"echo\"]\n";
    let sw = b2bua(&mut n, head);
    let a = n.ua(ALICE, "alice");
    n.ua(BOB, "bob");
    let ca = n.invite(a, "sip:44444@127.0.0.1", SW);
    assert!(n.run_until(secs(5), confirmed(a, ca)));
    n.refer(a, ca, "<sip:2001@127.0.0.1>");
    assert!(n.run_until(secs(5), |n| notifies(n, a, ca).len() == 2));
    assert_eq!(notifies(&mut n, a, ca), [100, 404]);
    n.refer(a, ca, "<sip:9196@127.0.0.1>");
    assert!(n.run_until(secs(5), |n| notifies(n, a, ca).len() == 4));
    assert_eq!(notifies(&mut n, a, ca)[2..], [100, 200]);

    // Another dialog's tags: 481; no To tag (outside a dialog): 403.
    let tag = std::mem::replace(&mut n.agent(a).calls[ca].remote_tag, "other".into());
    n.refer(a, ca, "<sip:9196@127.0.0.1>");
    assert!(n.run_until(secs(5), |n| refer_status(n, a, ca) == Some(481)));
    n.agent(a).calls[ca].remote_tag.clear();
    n.refer(a, ca, "<sip:9196@127.0.0.1>");
    assert!(n.run_until(secs(5), |n| refer_status(n, a, ca) == Some(403)));
    n.agent(a).calls[ca].remote_tag = tag;
    hang_up(&mut n, a, ca, secs(5));
    assert_eq!(n.sw(sw).active_calls(), 0);
    assert_eq!(one_cdr(&mut n, sw, "")["context"], "public");
}

/// The phone that replaced a leg never ACKs strowger's 200: the call ends (as for a caller's
/// INVITE), its legs released, nothing left.
#[test]
fn a_replacing_invite_never_acked_ends_the_call() {
    let (mut n, sw, a, b, c) = setup(11);
    let (ca, cb) = alice_calls_bob(&mut n, a, b);
    let carol = addr(CAROL);
    n.drop_next(1000, move |p| {
        p.from == carol
            && Message::parse(&p.bytes, true).is_ok_and(|m| m.method() == Some(&Method::Ack))
    });
    let replaces = n.agent(b).replaces(cb);
    let cc = n.invite_with(c, "sip:2001@127.0.0.1", SW, &[("Replaces", &replaces)]);
    assert!(n.run_until(secs(5), confirmed(c, cc)));
    assert!(n.run_until(secs(5), got_bye(b, cb)));
    assert!(n.run_until(secs(40), got_bye(a, ca)), "the call ends");
    n.run_for(secs(40));
    assert_eq!(n.sw(sw).active_calls(), 0);
    assert_eq!(
        n.sw(sw).node().table_counts(),
        switch::TableCounts::default()
    );
}

/// As phones do, the transferor holds the call before it transfers: its party hears music,
/// then ringback while the target is dialled; the target is busy, so the party is back on hold
/// with music until the transferor resumes and the two are bridged again.
#[test]
fn a_held_party_returns_to_its_music_when_the_transfer_fails() {
    let (mut n, sw, a, b, c) = setup(12);
    n.agent(c).policy = Policy {
        provisional: vec![(180, false)],
        status: 486,
        after: ms(500),
    };
    let (ca, cb) = alice_calls_bob(&mut n, a, b);
    n.agent(b).send_rtp = false;
    n.agent(a).send_rtp = false;
    let hold = n.agent(b).sdp(&[0], "sendonly");
    n.reinvite(b, cb, hold);
    n.run_for(ms(300));
    assert!(rtp_during(&mut n, a, secs(1)) > 40, "Alice hears music");
    n.refer(b, cb, "<sip:4001@127.0.0.1>");
    assert!(n.run_until(secs(5), |n| notifies(n, b, cb).len() == 2));
    assert_eq!(notifies(&mut n, b, cb), [100, 486]);
    n.run_for(ms(200));
    assert!(
        rtp_during(&mut n, a, secs(1)) > 40,
        "music again, Bob still holds"
    );
    let resume = n.agent(b).sdp(&[0], "sendrecv");
    n.reinvite(b, cb, resume);
    n.run_for(ms(300));
    assert_eq!(rtp_during(&mut n, a, secs(1)), 0, "bridged to a silent Bob");
    n.agent(b).send_rtp = true;
    n.run_for(ms(100));
    assert!(rtp_during(&mut n, a, secs(1)) > 40, "Bob heard again");
    hang_up_all(&mut n, sw, a, ca, b, cb);
}

/// Hang-ups while the target rings: the transferee's ends everything (the target's ringing is
/// cancelled, the transferor hears 487 and gets BYE); after the transferor's own, a target that then fails
/// ends the call, since there is nobody to return to.
#[test]
fn hang_ups_while_the_target_rings_leave_nothing() {
    let (mut n, sw, a, b, c) = setup(13);
    n.agent(c).policy.after = secs(30);
    let (ca, cb) = alice_calls_bob(&mut n, a, b);
    n.refer(b, cb, "<sip:4001@127.0.0.1>");
    assert!(n.run_until(secs(5), |n| n.agent(c).last_index().is_some()));
    let cc = n.agent(c).last_index().unwrap();
    hang_up(&mut n, a, ca, secs(5));
    assert!(
        n.run_until(secs(5), ended(c, cc)),
        "Carol's ringing cancelled"
    );
    assert!(n.run_until(secs(5), got_bye(b, cb)), "Bob released");
    assert_eq!(notifies(&mut n, b, cb), [100, 487], "told before his BYE");
    n.run_for(secs(40));
    assert_eq!(
        n.sw(sw).node().table_counts(),
        switch::TableCounts::default()
    );

    n.agent(c).policy = Policy {
        provisional: vec![(180, false)],
        status: 486,
        after: secs(2),
    };
    let (ca, cb) = alice_calls_bob(&mut n, a, b);
    n.refer(b, cb, "<sip:4001@127.0.0.1>");
    assert!(n.run_until(secs(5), |n| notifies(n, b, cb).len() == 1));
    hang_up(&mut n, b, cb, secs(5));
    assert!(n.run_until(secs(10), got_bye(a, ca)), "Alice's call ends");
    assert_eq!(n.sw(sw).active_calls(), 0);
    n.run_for(secs(40));
    assert_eq!(
        n.sw(sw).node().table_counts(),
        switch::TableCounts::default()
    );
    assert_eq!(n.sw(sw).cdrs().len(), 2);
}

/// The attended transfer from the caller's side: Alice, who called Bob, consults Carol and
/// joins them; Bob takes the caller's place and his BYE ends the call with Carol.
#[test]
fn attended_transfer_by_the_caller_makes_the_callee_the_caller() {
    let (mut n, sw, a, b, c) = setup(14);
    let (ca, cb) = alice_calls_bob(&mut n, a, b);
    let consult = n.invite(a, "sip:4005@127.0.0.1", SW);
    assert!(n.run_until(secs(5), confirmed(a, consult)));
    let cc = n.agent(c).last_index().unwrap();
    let refer_to = refer_to_replacing(&mut n, a, consult, "4005");
    n.refer(a, ca, &refer_to);
    assert!(n.run_until(secs(5), |n| notifies(n, a, ca).len() == 2));
    assert_eq!(notifies(&mut n, a, ca), [100, 200]);
    assert!(n.run_until(secs(5), got_bye(a, consult)));
    assert!(n.run_until(secs(5), got_bye(a, ca)));
    n.run_for(ms(200));
    assert!(rtp_during(&mut n, b, secs(1)) > 40, "Bob hears Carol");
    assert!(rtp_during(&mut n, c, secs(1)) > 40, "Carol hears Bob");
    hang_up_all(&mut n, sw, b, cb, c, cc);
    assert_eq!(n.sw(sw).cdrs().len(), 2);
}

/// Transfers in a row: Alice sends Bob to Carol, and Bob at once sends Carol to the echo; the
/// first transferor, still in its grace, is released right then, and Carol hears herself.
#[test]
fn a_transferred_party_transfers_again() {
    let (mut n, sw, a, b, c) = setup(15);
    let (ca, cb) = alice_calls_bob(&mut n, a, b);
    n.refer(a, ca, "<sip:4001@127.0.0.1>");
    assert!(n.run_until(secs(5), |n| notifies(n, a, ca).len() == 2));
    n.refer(b, cb, "<sip:9196@127.0.0.1>");
    assert!(
        n.run_until(secs(1), got_bye(a, ca)),
        "Alice released at once"
    );
    assert!(n.run_until(secs(5), |n| notifies(n, b, cb).len() == 2));
    assert_eq!(notifies(&mut n, b, cb), [100, 200]);
    assert!(n.run_until(secs(5), got_bye(b, cb)));
    n.run_for(ms(200));
    let cc = n.agent(c).last_index().unwrap();
    assert!(rtp_during(&mut n, c, secs(1)) > 40, "Carol hears her echo");
    hang_up(&mut n, c, cc, secs(5));
    n.run_for(secs(40));
    assert_eq!(
        n.sw(sw).node().table_counts(),
        switch::TableCounts::default()
    );
    let cdr = one_cdr(&mut n, sw, "");
    assert_eq!(cdr["transferred_to"], "9196");
}

/// Bob consults Carol, who is still ringing, and Bob transfers Alice to her (REFER with
/// Replaces naming his ringing call, a semi-attended transfer) and hangs up: Alice hears Carol
/// ring, then Carol herself once she answers. Carol rang once; Bob's consultation ended;
/// Alice's CDR names Carol's extension.
#[test]
fn a_semi_attended_transfer_hands_the_ringing_target_to_the_transferee() {
    let (mut n, sw, a, b, c) = setup(16);
    let policy = Policy {
        provisional: vec![(180, false)],
        status: 200,
        after: secs(4),
    };
    let (ca, cb, consult) = refer_to_ringing(&mut n, (a, b, c), "4007", policy, secs(2));
    assert!(n.run_until(secs(1), |n| notifies(n, b, cb) == [100]));
    // The consultation call ends without an answer; Bob hangs up before Carol answers.
    assert!(n.run_until(secs(1), ended(b, consult)));
    assert!(invite_statuses(&mut n, b, consult).last() >= Some(&300));
    n.bye(b, cb);
    assert!(n.run_until(secs(1), bye_answered(b, cb)));
    assert!(
        rtp_during(&mut n, a, ms(500)) > 15,
        "Alice hears the ringback"
    );
    let cc = n.agent(c).last_index().unwrap();
    assert!(n.run_until(secs(5), confirmed(c, cc)));
    assert_eq!(n.agent(c).calls.len(), 1, "Carol rang once");
    n.run_for(ms(200));
    assert!(rtp_during(&mut n, a, secs(1)) > 40, "Alice hears Carol");
    assert!(rtp_during(&mut n, c, secs(1)) > 40, "Carol hears Alice");
    assert_eq!(n.sw(sw).active_calls(), 1);
    hang_up_all(&mut n, sw, a, ca, c, cc);
    let cdrs = n.sw(sw).cdrs();
    assert_eq!(cdrs.len(), 2, "{cdrs:?}");
    let to: Vec<_> = cdrs.iter().map(|c| c["transferred_to"].clone()).collect();
    assert!(to.contains(&"4007".into()), "{cdrs:?}");
}

/// The transferor stays for the outcome of a semi-attended transfer: the NOTIFY 200 comes when
/// the target answers, and strowger releases the transferor's leg after it.
#[test]
fn a_semi_attended_transfer_reports_the_targets_answer() {
    let (mut n, sw, a, b, c) = setup(17);
    let policy = Policy {
        provisional: vec![(180, false)],
        status: 200,
        after: secs(2),
    };
    let (ca, cb, _) = refer_to_ringing(&mut n, (a, b, c), "4008", policy, secs(1));
    assert!(n.run_until(secs(5), |n| notifies(n, b, cb).len() == 2));
    assert_eq!(notifies(&mut n, b, cb), [100, 200]);
    assert!(n.run_until(secs(5), got_bye(b, cb)));
    let cc = n.agent(c).last_index().unwrap();
    n.run_for(ms(200));
    assert!(rtp_during(&mut n, c, secs(1)) > 40, "Carol hears Alice");
    hang_up_all(&mut n, sw, a, ca, c, cc);
}

/// Alice calls Bob, and Bob consults Carol (answering by `carol`) in a call that another worker
/// of a two-worker switch holds (Bob is picked so that its Call-ID hashes there): once Carol
/// rings, `check` runs with the net, the switch, Alice, Bob, Carol, the two calls' indexes at
/// Bob (the first, the consultation), Alice's call and the workers of the two calls.
fn across_workers(
    seed: u64,
    carol: Policy,
    check: impl Fn(&mut Net, Id, [Id; 3], [usize; 3], [usize; 2]),
) {
    for k in 0..32 {
        let mut n = Net::new(seed + k);
        let toml = format!("{RULES}\n[vars]\nbridge_target = \"{BOB}\"\nself = \"{SW}\"\n");
        let sw = n.switch(&config(&toml), &[SW], 2);
        let a = n.ua(ALICE, "alice");
        let b = n.ua(BOB, &format!("bob{k}"));
        let c = n.ua(CAROL, "carol");
        for ua in [a, b, c] {
            n.agent(ua).send_rtp = true;
        }
        n.agent(c).policy = carol.clone();
        let (ca, cb) = alice_calls_bob(&mut n, a, b);
        let consult = n.invite(b, "sip:4003@127.0.0.1", SW);
        assert!(n.run_until(secs(2), |n| invite_statuses(n, b, consult).contains(&180)));
        let here = switch::owner(&n.agent(a).call(ca).call_id, 2);
        let there = switch::owner(&n.agent(b).call(consult).call_id, 2);
        if here != there {
            return check(&mut n, sw, [a, b, c], [cb, consult, ca], [here, there]);
        }
    }
    panic!("no consultation call landed on the other worker");
}

/// Attended transfer across workers: the consultation's worker sends Carol's leg to the worker
/// of Alice's call, which re-INVITEs her to a port of its own. Bob gets NOTIFY 100 then 200 and
/// both his dialogs end; Alice and Carol hear each other in one call on Alice's worker, whose
/// CDR names Carol; once hung up, no worker keeps a call, a leg or a pin.
#[test]
fn attended_transfer_across_workers_moves_the_consulted_party_to_the_transferee() {
    let carol = Policy::default();
    across_workers(
        30,
        carol,
        |n, sw, [a, b, c], [cb, consult, ca], [here, there]| {
            assert!(n.run_until(secs(5), confirmed(b, consult)));
            let cc = n.agent(c).last_index().unwrap();
            let before = n.agent(c).call(cc).remote_media;
            let refer_to = refer_to_replacing(n, b, consult, "4003");
            n.refer(b, cb, &refer_to);
            assert!(n.run_until(secs(5), |n| notifies(n, b, cb).len() == 2));
            assert_eq!(notifies(n, b, cb), [100, 200]);
            assert!(n.run_until(secs(5), got_bye(b, consult)));
            assert!(n.run_until(secs(5), got_bye(b, cb)));
            assert_eq!(n.agent(c).calls.len(), 1, "no new call to Carol");
            let invites = n.agent(c).call(cc).requests_of(&Method::Invite).len();
            assert_eq!(invites, 2, "Carol's call and one re-INVITE");
            let after = n.agent(c).call(cc).remote_media;
            assert_ne!(after, before, "Carol's media moved to another port");
            n.run_for(ms(200));
            assert!(rtp_during(n, a, secs(1)) > 40, "Alice hears Carol");
            assert!(rtp_during(n, c, secs(1)) > 40, "Carol hears Alice");
            assert_eq!(rtp_during(n, b, secs(1)), 0);
            assert_eq!(n.sw(sw).workers[here].active_calls(), 1);
            assert_eq!(n.sw(sw).workers[there].active_calls(), 0);
            hang_up(n, a, ca, secs(5));
            assert!(n.run_until(secs(5), got_bye(c, cc)));
            n.run_for(secs(70));
            for w in 0..2 {
                let counts = n.sw(sw).workers[w].table_counts();
                assert_eq!(counts, switch::TableCounts::default(), "worker {w}");
            }
            assert!(
                n.sw(sw).shared.rendezvous.pins.is_empty(),
                "pins outlive the call"
            );
            let cdrs = n.sw(sw).cdrs();
            assert_eq!(cdrs.len(), 2, "{cdrs:?}");
            let to: Vec<_> = cdrs
                .iter()
                .filter_map(|c| c["transferred_to"].as_str())
                .collect();
            assert!(to.len() == 1 && to[0].contains("4003"), "{cdrs:?}");
        },
    );
}

/// Across workers, Carol answers the re-INVITE that moves her with 491 (an offer of her own
/// crossed it): strowger, which chose her dialog's Call-ID, sends the offer again 2.1 to 4 s
/// later (RFC 3261 §14.1), and its answer completes the transfer: Alice and Carol hear each
/// other.
#[test]
fn across_workers_a_491_to_the_moving_re_invite_is_retried_and_the_transfer_completes() {
    across_workers(
        40,
        Policy::default(),
        |n, sw, [a, b, c], [cb, consult, ca], [here, _]| {
            assert!(n.run_until(secs(5), confirmed(b, consult)));
            let cc = n.agent(c).last_index().unwrap();
            n.agent(c).reinvite_refusals = vec![491];
            let refer_to = refer_to_replacing(n, b, consult, "4003");
            n.refer(b, cb, &refer_to);
            assert!(n.run_until(secs(10), |n| notifies(n, b, cb).len() == 2));
            assert_eq!(notifies(n, b, cb), [100, 200]);
            let call_id = n.agent(c).call(cc).call_id.clone();
            let reinvites: Vec<Instant> = n
                .agent(c)
                .received
                .iter()
                .filter(|(_, _, m)| {
                    m.method() == Some(&Method::Invite)
                        && m.header(HeaderName::CallId) == Some(call_id.as_str())
                        && m.header(HeaderName::To).is_some_and(|t| t.contains("tag="))
                })
                .map(|(t, _, _)| *t)
                .collect();
            assert_eq!(reinvites.len(), 2, "the re-INVITE, then once more");
            let wait = reinvites[1] - reinvites[0];
            assert!(
                (ms(2100)..=ms(4000)).contains(&wait),
                "the owner of the Call-ID waits 2.1-4 s: {wait:?}"
            );
            n.run_for(ms(200));
            assert!(rtp_during(n, a, secs(1)) > 40, "Alice hears Carol");
            assert!(rtp_during(n, c, secs(1)) > 40, "Carol hears Alice");
            assert_eq!(n.sw(sw).workers[here].active_calls(), 1);
            hang_up(n, a, ca, secs(5));
            assert!(n.run_until(secs(5), got_bye(c, cc)));
        },
    );
}

/// A semi-attended transfer across workers: the consultation's worker cannot move Carol's
/// ringing (its INVITE is that worker's transaction), so it cancels it and Alice's worker
/// dials Carol's extension for Alice, as a blind transfer does. Bob hangs up; Carol rings
/// again, answers, and she and Alice hear each other; Alice's CDR names Carol's extension.
#[test]
fn a_semi_attended_transfer_across_workers_dials_the_target_again() {
    let carol = Policy {
        provisional: vec![(180, false)],
        status: 200,
        after: secs(4),
    };
    across_workers(
        60,
        carol,
        |n, sw, [a, b, c], [cb, consult, ca], [here, _]| {
            let refer_to = refer_to_replacing(n, b, consult, "4003");
            n.refer(b, cb, &refer_to);
            assert!(n.run_until(secs(1), |n| notifies(n, b, cb) == [100]));
            assert!(n.run_until(secs(1), ended(b, consult)));
            n.bye(b, cb);
            assert!(n.run_until(secs(1), bye_answered(b, cb)));
            assert!(
                n.run_until(secs(1), ended(c, 0)),
                "the first ringing cancelled"
            );
            assert!(n.run_until(secs(6), |n| n.agent(c).calls.len() == 2));
            assert!(n.run_until(secs(6), confirmed(c, 1)));
            n.run_for(ms(200));
            assert!(rtp_during(n, a, secs(1)) > 40, "Alice hears Carol");
            assert!(rtp_during(n, c, secs(1)) > 40, "Carol hears Alice");
            assert_eq!(n.sw(sw).workers[here].active_calls(), 1);
            assert_eq!(n.sw(sw).active_calls(), 1);
            hang_up(n, a, ca, secs(5));
            assert!(n.run_until(secs(5), got_bye(c, 1)));
            n.run_for(secs(70));
            for w in 0..2 {
                let counts = n.sw(sw).workers[w].table_counts();
                assert_eq!(counts, switch::TableCounts::default(), "worker {w}");
            }
            let cdrs = n.sw(sw).cdrs();
            assert_eq!(cdrs.len(), 2, "{cdrs:?}");
            let to: Vec<_> = cdrs.iter().map(|c| c["transferred_to"].clone()).collect();
            assert!(to.contains(&"4003".into()), "{cdrs:?}");
        },
    );
}

/// Across workers, a REFER whose Replaces names no dialog of the other worker (a wrong tag)
/// fails there: Bob hears 481 and gets Alice back, and his consultation with Carol is left as
/// it was; a transferor that hangs up at once still completes a good transfer.
#[test]
fn across_workers_a_refused_transfer_returns_the_transferee_and_a_good_one_needs_no_transferor() {
    across_workers(
        90,
        Policy::default(),
        |n, sw, [a, b, c], [cb, consult, ca], _| {
            assert!(n.run_until(secs(5), confirmed(b, consult)));
            let cc = n.agent(c).last_index().unwrap();
            let good = refer_to_replacing(n, b, consult, "4003");
            n.refer(b, cb, &good.replace("to-tag%3D", "to-tag%3Dwrong"));
            assert!(n.run_until(secs(5), |n| notifies(n, b, cb).len() == 2));
            assert_eq!(notifies(n, b, cb), [100, 481]);
            n.run_for(ms(200));
            assert!(
                phone_during(n, a, secs(1)) > 40,
                "Alice hears Bob again, not ringback"
            );
            let bob_hears = rtp_during(n, b, secs(1));
            assert!(bob_hears > 80, "Bob hears Alice and Carol: {bob_hears}");
            assert_eq!(n.sw(sw).active_calls(), 2);
            // Now the right dialog, and Bob hangs up at once.
            n.refer(b, cb, &good);
            n.bye(b, cb);
            assert!(n.run_until(secs(5), got_bye(b, consult)));
            n.run_for(ms(500));
            assert!(rtp_during(n, a, secs(1)) > 40, "Alice hears Carol");
            assert!(rtp_during(n, c, secs(1)) > 40, "Carol hears Alice");
            assert_eq!(n.sw(sw).active_calls(), 1);
            hang_up(n, a, ca, secs(5));
            assert!(n.run_until(secs(5), got_bye(c, cc)));
            n.run_for(secs(70));
            for w in 0..2 {
                let counts = n.sw(sw).workers[w].table_counts();
                assert_eq!(counts, switch::TableCounts::default(), "worker {w}");
            }
            assert!(n.sw(sw).shared.rendezvous.pins.is_empty());
        },
    );
}

/// A semi-attended transfer to a target sending early media (183 with SDP): the transferee
/// hears the target's own audio at once instead of ringback, then the answered target.
#[test]
fn a_semi_attended_transfer_passes_the_targets_early_media_to_the_transferee() {
    let (mut n, sw, a, b, c) = setup(18);
    let policy = Policy {
        provisional: vec![(183, true)],
        status: 200,
        after: secs(3),
    };
    let (ca, cb, _) = refer_to_ringing(&mut n, (a, b, c), "4009", policy, secs(1));
    assert!(n.run_until(secs(1), |n| notifies(n, b, cb) == [100]));
    n.run_for(ms(100));
    let cc = n.agent(c).last_index().unwrap();
    assert_ne!(
        n.agent(c).call(cc).state,
        State::Confirmed,
        "Carol still rings"
    );
    assert!(
        phone_during(&mut n, a, secs(1)) > 40,
        "Alice hears Carol's early media"
    );
    assert!(n.run_until(secs(5), |n| notifies(n, b, cb).len() == 2));
    assert_eq!(notifies(&mut n, b, cb), [100, 200]);
    assert!(n.run_until(secs(5), got_bye(b, cb)));
    assert!(phone_during(&mut n, a, secs(1)) > 40, "Alice hears Carol");
    assert!(rtp_during(&mut n, c, secs(1)) > 40, "Carol hears Alice");
    hang_up_all(&mut n, sw, a, ca, c, cc);
}

/// A hundred attended transfers on two workers, each consultation on whichever worker its
/// Call-ID gives (about half of them the other worker): every one completes, and once the
/// calls are over no worker keeps a call, a leg, a timer or a pin.
#[test]
fn a_hundred_attended_transfers_on_two_workers_leave_no_state() {
    let mut n = Net::new(120);
    let toml = format!("{RULES}\n[vars]\nbridge_target = \"{BOB}\"\nself = \"{SW}\"\n");
    let sw = n.switch(&config(&toml), &[SW], 2);
    let (a, b, c) = (n.ua(ALICE, "alice"), n.ua(BOB, "bob"), n.ua(CAROL, "carol"));
    let mut crossed = 0;
    for i in 0..100 {
        let (ca, cb) = alice_calls_bob(&mut n, a, b);
        let consult = n.invite(b, "sip:4003@127.0.0.1", SW);
        assert!(n.run_until(secs(5), confirmed(b, consult)), "cycle {i}");
        let cc = n.agent(c).last_index().unwrap();
        let owner =
            |n: &mut Net, ua: Id, call: usize| switch::owner(&n.agent(ua).call(call).call_id, 2);
        if owner(&mut n, a, ca) != owner(&mut n, b, consult) {
            crossed += 1;
        }
        let refer_to = refer_to_replacing(&mut n, b, consult, "4003");
        n.refer(b, cb, &refer_to);
        assert!(
            n.run_until(secs(5), |n| notifies(n, b, cb).len() == 2),
            "cycle {i}"
        );
        assert_eq!(notifies(&mut n, b, cb), [100, 200], "cycle {i}");
        assert!(n.run_until(secs(5), got_bye(b, cb)), "cycle {i}");
        hang_up(&mut n, a, ca, secs(5));
        assert!(n.run_until(secs(5), got_bye(c, cc)), "cycle {i}");
        assert_eq!(n.sw(sw).active_calls(), 0, "cycle {i}");
    }
    assert!(
        crossed > 20 && crossed < 80,
        "{crossed} of 100 crossed workers"
    );
    n.run_for(secs(70));
    for w in 0..2 {
        let counts = n.sw(sw).workers[w].table_counts();
        assert_eq!(counts, switch::TableCounts::default(), "worker {w}");
    }
    assert!(n.sw(sw).shared.rendezvous.pins.is_empty());
    assert_eq!(n.sw(sw).cdrs().len(), 200);
}
