//! Where requests go through strowger on the simulated network (tests/net): loops and hop
//! limits, keep-alives to NATed phones, the proxy role's Record-Route, and calls handed between
//! workers by Call-ID.

use crate::net;

use net::*;
use sip::{HeaderName, Method};

/// A switch on `addrs` with `workers` workers whose registrar takes user 1001 unauthenticated.
fn registrar(n: &mut Net, addrs: &[&str], workers: usize) -> Id {
    let toml = config("[registrar]\nauthenticate = false\nkeepalive_s = 0\n");
    let sw = n.switch(&toml, addrs, workers);
    n.sw(sw).shared.store.add_user("1001", "strowger", "pw");
    sw
}

/// A proxy for example.com on `sw_at` (`proxy` adds to its `[proxy]` table) with Bob registered
/// as user 1002 from `bob_at` and answering by `policy`; returns the switch and Bob.
fn proxy_with_bob_at(
    n: &mut Net,
    proxy: &str,
    sw_at: &str,
    bob_at: &str,
    policy: Policy,
) -> (Id, Id) {
    let toml = config(&format!(
        "[registrar]\nauthenticate = false\nkeepalive_s = 0\n[proxy]\ndomains = [\"example.com\"]\n{proxy}"
    ));
    let sw = n.switch(&toml, &[sw_at], 1);
    n.sw(sw).shared.store.add_user("1002", "strowger", "pw");
    let b = n.ua(bob_at, "1002");
    n.agent(b).policy = policy;
    n.register(b, sw_at, "strowger", 600);
    assert!(n.run_until(secs(2), registered([b])));
    (sw, b)
}

/// `proxy_with_bob_at` on the IPv4 addresses, with Alice on the net.
fn proxy_with_bob(seed: u64, bob_policy: Policy) -> (Net, Id, Id, Id) {
    let mut n = Net::new(seed);
    let (sw, b) = proxy_with_bob_at(&mut n, "", SW, BOB, bob_policy);
    let a = n.ua(ALICE, "alice");
    (n, sw, a, b)
}

#[test]
fn max_forwards_zero_gets_483_and_one_reaches_the_callee_with_zero() {
    let mut n = Net::new(11);
    let sw = b2bua(&mut n, "");
    let a = n.ua(ALICE, "alice");
    let b = n.ua(BOB, "bob");
    let c = n.invite_with(a, "sip:2001@127.0.0.1", SW, &[("Max-Forwards", "0")]);
    assert!(n.run_until(secs(5), ended(a, c)));
    let st = invite_statuses(&mut n, a, c);
    assert_eq!(st.last(), Some(&483), "{st:?}");
    assert!(n.agent(b).calls.is_empty(), "nothing forwarded");

    let c = n.invite_with(a, "sip:2001@127.0.0.1", SW, &[("Max-Forwards", "1")]);
    assert!(n.run_until(secs(5), confirmed(a, c)));
    let inv = n.agent(b).last().requests[0].clone();
    assert_eq!(inv.header(HeaderName::MaxForwards), Some("0"));
    n.bye(a, c);
    n.run_for(secs(2));
    assert_eq!(n.sw(sw).active_calls(), 0);
}

/// A bridge whose target is strowger itself: the INVITE comes back carrying strowger's own Via
/// branch, is refused as a loop, and the caller gets that refusal rather than a call that dials
/// itself until Max-Forwards runs out.
#[test]
fn a_bridge_that_loops_back_into_strowger_is_refused_with_482() {
    let mut n = Net::new(12);
    let sw = b2bua(&mut n, "");
    let a = n.ua(ALICE, "alice");
    let c = n.invite(a, "sip:7001@127.0.0.1", SW);
    assert!(n.run_until(secs(10), ended(a, c)));
    // strowger answered its own looped INVITE with 482.
    let looped = n.sent(addr(SW), addr(SW), "482");
    assert_eq!(looped.len(), 1, "one loop detected");
    assert_eq!(
        n.sent(addr(SW), addr(SW), "INVITE").len(),
        1,
        "dialled once"
    );
    let st = invite_statuses(&mut n, a, c);
    assert_eq!(st.last(), Some(&482), "{st:?}");
    n.run_for(secs(40));
    assert_eq!(n.sw(sw).active_calls(), 0);
    assert_eq!(one_cdr(&mut n, sw, "")["sip_status"], 482);
}

/// The proxy role forwards to a registered contact whose Path leads back to strowger itself (a
/// misconfigured edge proxy) and whose Contact is in a proxied domain: the request goes round
/// through strowger until Max-Forwards runs out, and the caller gets 483 Too Many Hops, never a
/// call (the proxy role does no loop detection of its own, RFC 3261 §16.3 step 4 is optional).
#[test]
fn a_proxied_request_looping_through_strowger_ends_in_483() {
    let mut n = Net::new(13);
    // The Path comes from a trusted edge (the phone's own address here).
    let toml = config(
        "[registrar]\nauthenticate = false\nkeepalive_s = 0\n[proxy]\ndomains = [\"127.0.0.1\"]\n\
         [security]\ntrusted = [\"127.0.0.1\"]\n",
    );
    let sw = n.switch(&toml, &[SW], 1);
    n.sw(sw).shared.store.add_user("1003", "strowger", "pw");
    let loopy = n.ua("127.0.0.1:5070", "1003");
    n.agent(loopy).contact = format!("sip:1003@{SW}");
    n.agent(loopy).register_headers = vec![("Path".into(), format!("<sip:{SW};lr>"))];
    n.register(loopy, SW, "strowger", 600);
    assert!(n.run_until(secs(2), |n| !n.agent(loopy).register_statuses.is_empty()));
    assert_eq!(n.agent(loopy).register_statuses, [200]);
    let a = n.ua(ALICE, "alice");
    let c = n.invite_with(a, "sip:1003@127.0.0.1", SW, &[("Max-Forwards", "10")]);
    assert!(n.run_until(secs(40), ended(a, c)));
    let st = invite_statuses(&mut n, a, c);
    assert_eq!(st.last(), Some(&483), "{st:?}");
    // Forwarded with Max-Forwards 9, 8, … 0; the last copy is refused.
    let hops = n.sent(addr(SW), addr(SW), "INVITE").len();
    assert_eq!(hops, 10, "{hops} hops for Max-Forwards 10");
    assert!(n.agent(loopy).calls.is_empty());
    n.run_for(secs(40));
    assert_eq!(n.sw(sw).active_calls(), 0);
}

/// A phone whose Contact names a private address (behind NAT) gets an OPTIONS every
/// `keepalive_s` at the address its REGISTER came from; a phone reachable at its Contact none.
#[test]
fn a_natted_phone_gets_options_keepalives_and_a_direct_one_none() {
    let mut n = Net::new(14);
    let toml = config(
        "[registrar]\nauthenticate = false\nkeepalive_s = 15\nkeepalive = \"options\"\n[vars]\nbridge_target = \"127.0.0.1:5090\"\nself = \"127.0.0.1:5060\"\n",
    );
    let sw = n.switch(&toml, &[SW], 1);
    for u in ["1001", "1002"] {
        n.sw(sw).shared.store.add_user(u, "strowger", "pw");
    }
    let natted = n.ua("127.0.0.1:40000", "1001");
    n.agent(natted).contact = "sip:1001@192.168.1.20:5060".into();
    let direct = n.ua("127.0.0.1:5072", "1002");
    n.register(natted, SW, "strowger", 600);
    n.register(direct, SW, "strowger", 600);
    assert!(n.run_until(secs(2), registered([natted, direct])));
    let t0 = n.now;
    n.run_for(secs(46));
    let options: Vec<_> = n
        .agent(natted)
        .received
        .iter()
        .filter(|(_, _, m)| m.method() == Some(&Method::Options))
        .map(|(t, from, m)| (*t - t0, *from, m.request_uri().map(str::to_string)))
        .collect();
    assert_eq!(options.len(), 3, "{options:?}");
    for (i, (at, from, ruri)) in options.iter().enumerate() {
        let due = secs(15 * (i as u64 + 1));
        assert!(
            *at >= due - ms(100) && *at <= due + secs(1),
            "keep-alive {i} at {at:?}"
        );
        assert_eq!(*from, addr(SW));
        assert_eq!(ruri.as_deref(), Some("sip:1001@192.168.1.20:5060"));
    }
    // The phone answered each; strowger took the answers quietly.
    assert_eq!(n.sent(addr("127.0.0.1:40000"), addr(SW), "200").len(), 3);
    assert!(n.sw(sw).logs().is_empty(), "{:?}", n.sw(sw).logs());
    assert!(n.agent(direct).requests_of(&Method::Options).is_empty());
    assert!(n.agent(direct).non_sip.is_empty());

    // A call to the NATed phone reaches it through the address the keep-alives hold open.
    let a = n.ua(ALICE, "alice");
    let c = n.invite(a, "sip:1001@127.0.0.1", SW);
    assert!(n.run_until(secs(5), confirmed(a, c)));
    let inv = n.agent(natted).last().requests[0].clone();
    assert_eq!(inv.request_uri(), Some("sip:1001@192.168.1.20:5060"));
}

#[test]
fn crlf_keepalives_go_to_the_natted_phones_source_address() {
    let mut n = Net::new(15);
    let toml =
        config("[registrar]\nauthenticate = false\nkeepalive_s = 20\nkeepalive = \"crlf\"\n");
    let sw = n.switch(&toml, &[SW], 1);
    n.sw(sw).shared.store.add_user("1001", "strowger", "pw");
    let natted = n.ua("127.0.0.1:40002", "1001");
    n.agent(natted).contact = "sip:1001@10.1.2.3:5062".into();
    n.register(natted, SW, "strowger", 600);
    assert!(n.run_until(secs(2), registered([natted])));
    let t0 = n.now;
    n.run_for(secs(61));
    let crlf: Vec<_> = n
        .agent(natted)
        .non_sip
        .iter()
        .map(|(t, from, b)| (*t - t0, *from, b.clone()))
        .collect();
    assert_eq!(crlf.len(), 3, "{crlf:?}");
    for (at, from, bytes) in &crlf {
        assert_eq!(bytes.as_slice(), b"\r\n\r\n");
        assert_eq!(*from, addr(SW));
        assert!(*at >= secs(19), "{at:?}");
    }
    assert!(n.agent(natted).requests_of(&Method::Options).is_empty());

    // Unregistered, it gets no more.
    n.register(natted, SW, "strowger", 0);
    assert!(n.run_until(secs(2), |n| n.agent(natted).register_statuses == [200, 200]));
    n.run_for(secs(61));
    assert_eq!(n.agent(natted).non_sip.len(), 3);
}

/// The proxy role with Record-Route: the callee gets strowger's Record-Route, echoes it in its
/// 200, and every later request of the dialog — the caller's ACK, re-INVITE and BYE, the
/// callee's BYE — goes through strowger by its Route header.
#[test]
fn proxied_dialogs_follow_strowgers_record_route() {
    proxied_dialog(16, SW, ALICE, BOB);
}

#[test]
fn proxied_dialogs_follow_strowgers_record_route_over_ipv6() {
    proxied_dialog(17, "[::1]:5060", "[::1]:5061", "[::1]:5090");
}

fn proxied_dialog(seed: u64, sw_at: &str, alice_at: &str, bob_at: &str) {
    let mut n = Net::new(seed);
    let (sw, b) = proxy_with_bob_at(
        &mut n,
        "record_route = true\n",
        sw_at,
        bob_at,
        Policy::default(),
    );
    let a = n.ua(alice_at, "alice");
    let c = n.invite(a, "sip:1002@example.com", sw_at);
    assert!(n.run_until(secs(5), confirmed(a, c)));

    let inv = n.agent(b).last().requests[0].clone();
    assert_eq!(
        inv.request_uri(),
        Some(format!("sip:1002@{bob_at}").as_str())
    );
    let rr = inv.header(HeaderName::RecordRoute).unwrap().to_string();
    assert!(rr.starts_with(&format!("<sip:{sw_at};lr;rr=")), "{rr}");
    assert_eq!(n.agent(a).call(c).route_set, std::slice::from_ref(&rr));
    assert_eq!(n.agent(b).last().route_set, std::slice::from_ref(&rr));
    assert_eq!(n.sw(sw).active_calls(), 0, "the proxy keeps no call");
    let (sw_a, alice, bob) = (addr(sw_at), addr(alice_at), addr(bob_at));

    // The ACK and a re-INVITE from the caller go to strowger and on to the callee.
    n.run_for(secs(1));
    assert_eq!(n.sent(alice, sw_a, "ACK").len(), 1);
    assert_eq!(n.sent(sw_a, bob, "ACK").len(), 1);
    assert!(n.sent(alice, bob, "ACK").is_empty());
    let hold = n.agent(a).sdp(&[0], "sendonly");
    n.reinvite(a, c, hold);
    assert!(n.run_until(secs(5), |n| n
        .agent(a)
        .call(c)
        .responses_to("INVITE")
        .iter()
        .any(
            |m| m.status() == Some(200) && m.header(HeaderName::CSeq) == Some("2 INVITE")
        )));
    let reinv = n.agent(b).last().requests_of(&Method::Invite)[1].clone();
    assert!(
        reinv.header(HeaderName::Route).is_none(),
        "strowger took its own Route off"
    );
    assert!(reinv.header(HeaderName::Via).unwrap().contains(sw_at));
    let ok = last_response(&mut n, a, c, "INVITE");
    assert!(body(&ok).contains("a=recvonly"));
    n.run_for(secs(1));
    assert_eq!(n.sent(sw_a, bob, "ACK").len(), 2, "the re-INVITE's ACK too");

    // The callee hangs up: its BYE goes through strowger to the caller's Contact.
    let bc = n.agent(b).last_index().unwrap();
    hang_up(&mut n, b, bc, secs(5));
    assert_eq!(n.sent(bob, sw_a, "BYE").len(), 1);
    assert_eq!(n.sent(sw_a, alice, "BYE").len(), 1);
    assert!(n.sent(bob, alice, "BYE").is_empty());
    assert_eq!(n.agent(a).call(c).state, State::Ended);
    assert!(n.undeliverable.is_empty(), "{:?}", n.undeliverable);
    assert_no_tx_events(&mut n, &[a, b], "");
}

/// A proxied, record-routed dialog under 10 % loss and reordering: retransmissions on both
/// sides of strowger (the 2xx and the ACK forwarded without a transaction included) carry it
/// through; every request is answered and no 2xx goes unACKed.
#[test]
fn a_proxied_dialog_survives_ten_percent_loss_and_reordering() {
    let mut lost = 0;
    for seed in 1..=8 {
        let (mut n, sw, a, b) = proxy_with_bob(300 + seed, Policy::default());
        let what = format!("seed {seed}");
        lossy_call(&mut n, sw, a, b, "sip:1002@example.com", SW, secs(2), &what);
        // Every BYE and ACK the callee got came through strowger.
        assert!(n
            .agent(b)
            .received
            .iter()
            .all(|(_, from, _)| *from == addr(SW)));
        lost += n.trace.iter().filter(|t| t.lost).count();
    }
    assert!(lost >= 8, "only {lost} SIP datagrams lost in all runs");
}

/// Two workers of one switch behind one address: each datagram goes to the worker that owns its
/// Call-ID (`switch::owner`), as the real process hands them on. A bridged call's outbound leg
/// gets a Call-ID its own worker owns, so the callee's answers, ACKs and BYEs reach the worker
/// that holds the call.
#[test]
fn two_workers_hand_each_call_to_the_owner_of_its_call_id() {
    let mut n = Net::new(17);
    let toml = config(&format!(
        "[registrar]\nauthenticate = false\nkeepalive_s = 0\n[vars]\nbridge_target = \"{BOB}\"\nself = \"{SW}\"\n"
    ));
    let sw = n.switch(&toml, &[SW], 2);
    let a = n.ua(ALICE, "alice");
    let b = n.ua(BOB, "bob");
    let mut calls = Vec::new();
    for k in 1..=8 {
        let c = n.invite(a, &format!("sip:200{k}@127.0.0.1"), SW);
        calls.push(c);
    }
    assert!(n.run_until(secs(5), |n| calls
        .iter()
        .all(|c| n.agent(a).call(*c).state == State::Confirmed)));
    let mut per_worker = [0; 2];
    for (k, c) in calls.iter().enumerate() {
        let inbound = n.agent(a).call(*c).call_id.clone();
        let ruri = format!("sip:200{}@127.0.0.1:5090", k + 1);
        let outbound = n
            .agent(b)
            .calls
            .iter()
            .find(|bc| bc.requests[0].request_uri() == Some(ruri.as_str()))
            .map(|bc| bc.call_id.clone())
            .unwrap();
        let w = switch::owner(&inbound, 2);
        assert_eq!(
            switch::owner(&outbound, 2),
            w,
            "call {k}: outbound leg owned elsewhere"
        );
        per_worker[w] += 1;
    }
    assert!(
        per_worker.iter().all(|c| *c > 0),
        "both workers took calls: {per_worker:?}"
    );
    assert_eq!(n.sw(sw).workers[0].active_calls(), per_worker[0]);
    assert_eq!(n.sw(sw).workers[1].active_calls(), per_worker[1]);

    // Half hang up from the caller's side, half from the callee's.
    for (k, c) in calls.iter().enumerate() {
        if k % 2 == 0 {
            n.bye(a, *c);
        } else {
            let ruri = format!("sip:200{}@127.0.0.1:5090", k + 1);
            let bc = n
                .agent(b)
                .calls
                .iter()
                .position(|bc| bc.requests[0].request_uri() == Some(ruri.as_str()))
                .unwrap();
            n.bye(b, bc);
        }
    }
    assert!(n.run_until(secs(5), |n| n.sw(sw).active_calls() == 0));
    n.run_for(secs(1));
    assert!(n.agent(a).calls.iter().all(|c| c.state == State::Ended));
    assert!(n.agent(b).calls.iter().all(|c| c.state == State::Ended));
    for (w, count) in per_worker.iter().enumerate() {
        let cdrs = n.sw(sw).workers[w].cdrs().to_vec();
        assert_eq!(cdrs.len(), *count);
        for cdr in cdrs {
            assert_eq!(switch::owner(cdr["call_id"].as_str().unwrap(), 2), w);
            assert_eq!(cdr["sip_status"], 200);
        }
    }
    // No 481: nothing reached a worker that did not know its dialog.
    assert!(n.trace.iter().all(|t| t.what() != "481"));
}

/// A phone registers through whichever worker the kernel handed its REGISTER to; a call owned by
/// the other worker still finds it (one store for both).
#[test]
fn a_registration_taken_by_one_worker_serves_calls_on_the_other() {
    let mut n = Net::new(18);
    let sw = registrar(&mut n, &[SW], 2);
    let phone = n.ua("127.0.0.1:5081", "1001");
    n.register(phone, SW, "strowger", 600);
    assert!(n.run_until(secs(2), registered([phone])));
    let a = n.ua(ALICE, "alice");
    let mut owners = Vec::new();
    for _ in 0..4 {
        let c = n.invite(a, "sip:1001@127.0.0.1", SW);
        assert!(n.run_until(secs(5), confirmed(a, c)));
        owners.push(switch::owner(&n.agent(a).call(c).call_id, 2));
        n.bye(a, c);
        assert!(n.run_until(secs(5), |n| n.sw(sw).active_calls() == 0));
    }
    assert!(owners.contains(&0) && owners.contains(&1), "{owners:?}");
    assert_eq!(n.sw(sw).cdrs().len(), 4);
}

/// `bridge user/NAME` rings every contact of the user at once: the first to answer gets the
/// call and the other is cancelled (487 from it), over the network.
#[test]
fn a_user_with_two_phones_rings_both_and_the_loser_is_cancelled() {
    let mut n = Net::new(19);
    let sw = registrar(&mut n, &[SW], 1);
    let desk = n.ua("127.0.0.1:5101", "1001");
    let mobile = n.ua("127.0.0.1:5102", "1001");
    for (p, after) in [(desk, 1), (mobile, 5)] {
        n.agent(p).policy = Policy {
            provisional: vec![(180, false)],
            status: 200,
            after: secs(after),
        };
        n.register(p, SW, "strowger", 600);
    }
    assert!(n.run_until(secs(2), registered([desk, mobile])));
    let a = n.ua(ALICE, "alice");
    let c = n.invite(a, "sip:1001@127.0.0.1", SW);
    assert!(n.run_until(secs(3), confirmed(a, c)));
    assert_eq!(n.agent(desk).calls.len(), 1);
    assert_eq!(n.agent(mobile).calls.len(), 1, "both phones rang");
    n.run_for(secs(2));
    let lost = n.agent(mobile).last();
    assert_eq!(lost.state, State::Ended);
    assert_eq!(lost.requests_of(&Method::Cancel).len(), 1);
    assert_eq!(n.sent(addr("127.0.0.1:5102"), addr(SW), "487").len(), 1);
    assert_eq!(n.agent(desk).last().state, State::Confirmed);
    n.bye(a, c);
    assert!(n.run_until(secs(2), |n| n.agent(desk).last().state == State::Ended));
    assert_eq!(
        one_cdr(&mut n, sw, "")["bridged_to"],
        "sip:1001@127.0.0.1:5101"
    );
    assert_eq!(n.sw(sw).active_calls(), 0);
}

/// A CANCEL for a proxied INVITE: strowger answers it, CANCELs downstream, and relays the
/// callee's 487 (RFC 3261 §16.10); every transaction ends cleanly.
#[test]
fn a_cancel_is_forwarded_by_the_proxy_and_the_487_relayed() {
    let ring = Policy {
        provisional: vec![(180, false)],
        status: 200,
        after: secs(30),
    };
    let (mut n, _, a, b) = proxy_with_bob(20, ring);
    let c = n.invite(a, "sip:1002@example.com", SW);
    assert!(n.run_until(secs(2), |n| invite_statuses(n, a, c).contains(&180)));
    n.cancel(a, c);
    assert!(n.run_until(secs(2), ended(a, c)));
    assert_eq!(invite_statuses(&mut n, a, c).last(), Some(&487));
    let cancel = n.agent(a).call(c).responses_to("CANCEL");
    assert_eq!(cancel.len(), 1);
    assert_eq!(cancel[0].status(), Some(200));
    assert_eq!(n.agent(b).last().requests_of(&Method::Cancel).len(), 1);
    assert_eq!(n.agent(b).last().state, State::Ended);
    assert_eq!(n.sent(addr(SW), addr(BOB), "CANCEL").len(), 1);
    assert_eq!(
        n.sent(addr(BOB), addr(SW), "487").len(),
        1,
        "no 487 retransmitted"
    );
    n.run_for(secs(40));
    assert_no_tx_events(&mut n, &[a, b], "");
    assert_eq!(
        n.agent(b).calls.len(),
        1,
        "the callee was not called again after its 487"
    );
}

/// The callee never answers at all (every datagram to it is lost): the proxy's Timer B gives
/// the caller 408.
#[test]
fn a_proxied_invite_nobody_answers_gets_408() {
    let (mut n, _, a, _) = proxy_with_bob(21, Policy::default());
    let bob = addr(BOB);
    n.drop_next(usize::MAX, move |p| p.to == bob);
    let c = n.invite(a, "sip:1002@example.com", SW);
    assert!(n.run_until(secs(40), ended(a, c)));
    let st = invite_statuses(&mut n, a, c);
    assert_eq!(st, [100, 408]);
    let took = n.elapsed();
    assert!(took >= secs(31) && took <= secs(34), "408 after {took:?}");
}

/// A bridge whose callee never answers (every datagram to it is lost) gives up at its own
/// timeout (20 s here), before the transaction's 32 s, and the caller gets a final error.
#[test]
fn a_bridge_to_a_silent_callee_gives_up_at_its_timeout() {
    let mut n = Net::new(22);
    let sw = b2bua(&mut n, "");
    let a = n.ua(ALICE, "alice");
    let bob = addr(BOB);
    n.drop_next(usize::MAX, move |p| p.to == bob);
    let t0 = n.now;
    let c = n.invite(a, "sip:2001@127.0.0.1", SW);
    assert!(n.run_until(secs(40), ended(a, c)));
    let took = n.now - t0;
    assert!(
        took >= secs(20) && took < secs(21),
        "gave up after {took:?}"
    );
    let st = invite_statuses(&mut n, a, c);
    assert_eq!(st.last(), Some(&408), "{st:?}");
    n.run_for(secs(40));
    assert_eq!(n.sw(sw).active_calls(), 0);
    assert_eq!(one_cdr(&mut n, sw, "")["sip_status"], 408);
    assert!(n.sw(sw).logs().is_empty(), "{:?}", n.sw(sw).logs());
}

/// Forking on a two-worker switch: every fork's Call-ID is owned by the worker of its call, so
/// the losing phone's 487 and the winner's 200, ACK and BYE all reach that worker.
#[test]
fn forks_of_a_call_on_two_workers_come_back_to_its_worker() {
    let mut n = Net::new(23);
    let sw = registrar(&mut n, &[SW, "[::1]:5060"], 2);
    let desk = n.ua("127.0.0.1:5101", "1001");
    let mobile = n.ua("[::1]:5102", "1001");
    n.agent(mobile).policy.after = secs(30);
    n.register(desk, SW, "strowger", 600);
    n.register(mobile, "[::1]:5060", "strowger", 600);
    assert!(n.run_until(secs(2), registered([desk, mobile])));
    let a = n.ua(ALICE, "alice");
    for k in 0..6 {
        let c = n.invite(a, "sip:1001@127.0.0.1", SW);
        assert!(n.run_until(secs(3), confirmed(a, c)), "call {k}");
        let w = switch::owner(&n.agent(a).call(c).call_id, 2);
        for phone in [desk, mobile] {
            let forked = n.agent(phone).last().call_id.clone();
            assert_eq!(
                switch::owner(&forked, 2),
                w,
                "call {k}: a fork owned elsewhere"
            );
        }
        n.run_for(secs(1));
        assert_eq!(
            n.agent(mobile).last().state,
            State::Ended,
            "call {k}: cancelled"
        );
        n.bye(a, c);
        assert!(
            n.run_until(secs(3), |n| n.agent(desk).last().state == State::Ended),
            "call {k}"
        );
    }
    assert_eq!(n.sw(sw).active_calls(), 0);
    assert_eq!(n.sw(sw).cdrs().len(), 6);
    assert!(n.trace.iter().all(|t| t.what() != "481"));
    // The IPv6 phone was reached from strowger's IPv6 address.
    assert!(n
        .agent(mobile)
        .received
        .iter()
        .all(|(_, from, _)| from.is_ipv6()));
}
