//! Calls through strowger on the simulated network (tests/net): over IPv6, hold and codec
//! changes mid-call, early media, loss and reordering, shutdown, overload.

use crate::net;

use net::*;
use sip::{HeaderName, Message, Method};

/// A one-worker switch on 127.0.0.1:5060 whose 2XXX and 3XXX calls go to Bob, with Alice and
/// Bob (answers at once after 180) on the net; `head` adds configuration tables.
fn setup(seed: u64, head: &str) -> (Net, Id, Id, Id) {
    let mut n = Net::new(seed);
    let sw = b2bua(&mut n, head);
    let a = n.ua(ALICE, "alice");
    let b = n.ua(BOB, "bob");
    (n, sw, a, b)
}

/// RTP packets agent `ua` got after `since`, with their payload types.
fn rtp_since(n: &mut Net, ua: Id, since: std::time::Instant) -> Vec<u8> {
    n.agent(ua)
        .rtp
        .iter()
        .filter(|(t, _, _)| *t > since)
        .map(|(_, _, pt)| *pt)
        .collect()
}

/// The payload types of the RTP agent `ua` gets during the next `d` of virtual time.
fn rtp_during(n: &mut Net, ua: Id, d: std::time::Duration) -> Vec<u8> {
    let t = n.now;
    n.run_for(d);
    rtp_since(n, ua, t)
}

/// Agent `ua` sends an UPDATE in call `c` offering PCMU `direction`; within 2 s it is answered
/// (its `nth` answer) with a 200, which is returned.
fn update_answered(n: &mut Net, ua: Id, c: usize, direction: &str, nth: usize) -> Message {
    let offer = n.agent(ua).sdp(&[0], direction);
    n.update(ua, c, offer);
    assert!(n.run_until(secs(2), |n| n
        .agent(ua)
        .call(c)
        .responses_to("UPDATE")
        .len()
        == nth + 1));
    let ok = n.agent(ua).call(c).responses_to("UPDATE")[nth].clone();
    assert_eq!(ok.status(), Some(200));
    ok
}

#[test]
fn a_call_over_ipv6_is_bridged_answered_hung_up_and_leaves_a_cdr() {
    let mut n = Net::new(6);
    let toml = config("[vars]\nbridge_target = \"[::1]:5090\"\n");
    let sw = n.switch(&toml, &["[::1]:5060"], 1);
    let a = n.ua("[::1]:5061", "alice");
    let b = n.ua("[::1]:5090", "bob");
    n.agent(a).send_rtp = true;
    n.agent(b).send_rtp = true;
    let c = n.invite(a, "sip:2001@[::1]", "[::1]:5060");
    assert!(n.run_until(secs(5), confirmed(a, c)));
    assert_eq!(invite_statuses(&mut n, a, c), [100, 180, 200]);

    // The callee's INVITE came from strowger's IPv6 address, with IPv6 in Via and SDP.
    let sw_addr = addr("[::1]:5060");
    let inv = n.agent(b).last().requests[0].clone();
    assert_eq!(inv.request_uri(), Some("sip:2001@[::1]:5090"));
    let via = inv.header(HeaderName::Via).unwrap();
    assert!(via.starts_with("SIP/2.0/UDP [::1]:5060;"), "{via}");
    assert!(body(&inv).contains("c=IN IP6 ::1"), "{}", body(&inv));
    assert!(n
        .agent(b)
        .received
        .iter()
        .all(|(_, from, _)| *from == sw_addr));
    // The caller's answer is IPv6 SDP and audio flows both ways through strowger.
    let ok = last_response(&mut n, a, c, "INVITE");
    assert!(body(&ok).contains("c=IN IP6 ::1"), "{}", body(&ok));
    let t = n.now;
    n.run_for(secs(2));
    let to_alice = rtp_since(&mut n, a, t);
    let to_bob = rtp_since(&mut n, b, t);
    assert!(
        to_alice.len() > 50,
        "{} packets to the caller",
        to_alice.len()
    );
    assert!(to_bob.len() > 50, "{} packets to the callee", to_bob.len());
    assert!(n.agent(a).rtp.iter().all(|(_, from, _)| from.is_ipv6()));

    n.bye(a, c);
    assert!(
        n.run_until(secs(5), |n| n.agent(a).call(c).statuses().contains(&200)
            && n.agent(b).last().state == State::Ended)
    );
    assert_bye_ok(&mut n, a, c, "");
    assert_eq!(n.agent(b).last().requests_of(&Method::Bye).len(), 1);
    let cdr = one_cdr(&mut n, sw, "");
    assert_eq!(cdr["sip_status"], 200);
    assert_eq!(cdr["hangup_side"], "caller");
    assert_eq!(cdr["bridged_to"], "sip:2001@[::1]:5090");
    assert!(cdr["billable_s"].as_f64().unwrap() >= 1.9);
    assert_eq!(n.sw(sw).active_calls(), 0);
    assert!(n.undeliverable.is_empty(), "{:?}", n.undeliverable);
}

/// strowger listening on IPv4 and IPv6 at once, as the default configuration does
/// (`127.0.0.1:5060` and `[::1]:5060`): a caller over IPv6 must be given IPv6 media in the SDP
/// answer, or an IPv6-only phone cannot send or receive audio.
#[test]
fn a_dual_stack_switch_answers_an_ipv6_caller_with_ipv6_media() {
    let mut n = Net::new(61);
    let sw = n.switch(&config(""), &["127.0.0.1:5060", "[::1]:5060"], 1);
    let a = n.ua("[::1]:5061", "alice");
    let c = n.invite(a, "sip:44444@[::1]", "[::1]:5060");
    assert!(n.run_until(secs(2), confirmed(a, c)));
    let ok = last_response(&mut n, a, c, "INVITE");
    // Signalling is IPv6 all the way.
    assert!(n
        .agent(a)
        .received
        .iter()
        .all(|(_, from, _)| from.is_ipv6()));
    assert!(body(&ok).contains("c=IN IP6 ::1"), "{}", body(&ok));
    assert!(!rtp_during(&mut n, a, secs(1)).is_empty());
    assert!(n.agent(a).rtp.iter().all(|(_, from, _)| from.is_ipv6()));
    assert_eq!(n.sw(sw).active_calls(), 1);
}

#[test]
fn update_puts_an_answered_call_on_hold_and_back() {
    let (mut n, sw, a, _) = setup(2, "");
    let c = n.invite(a, "sip:44444@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, c)));
    assert!(
        rtp_during(&mut n, a, secs(1)).len() > 40,
        "the prompt plays"
    );

    let ok = update_answered(&mut n, a, c, "sendonly", 0);
    assert!(body(&ok).contains("a=recvonly"), "{}", body(&ok));
    // On hold strowger sends nothing.
    n.run_for(ms(100));
    assert_eq!(
        rtp_during(&mut n, a, secs(1)).len(),
        0,
        "no audio while on hold"
    );

    let ok = update_answered(&mut n, a, c, "sendrecv", 1);
    assert!(body(&ok).contains("a=sendrecv"), "{}", body(&ok));
    n.run_for(ms(100));
    assert!(
        rtp_during(&mut n, a, secs(1)).len() > 40,
        "audio again once resumed"
    );
    assert_eq!(n.sw(sw).active_calls(), 1);
}

#[test]
fn a_reinvite_changes_the_codec_from_pcmu_to_pcma() {
    let (mut n, _, a, _) = setup(3, "");
    n.agent(a).codecs = vec![0];
    let c = n.invite(a, "sip:44444@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, c)));
    let ok = last_response(&mut n, a, c, "INVITE");
    assert!(body(&ok).contains("RTP/AVP 0"), "{}", body(&ok));
    let before = rtp_during(&mut n, a, secs(1));
    assert!(
        !before.is_empty() && before.iter().all(|pt| *pt == 0),
        "{before:?}"
    );

    n.agent(a).codecs = vec![8];
    let offer = n.agent(a).sdp(&[8], "sendrecv");
    n.reinvite(a, c, offer);
    assert!(n.run_until(secs(2), |n| n
        .agent(a)
        .call(c)
        .responses_to("INVITE")
        .iter()
        .any(|m| {
            m.status() == Some(200)
                && m.header(HeaderName::CSeq)
                    .is_some_and(|s| s.starts_with('2'))
        })));
    let ok = last_response(&mut n, a, c, "INVITE");
    let sdp = body(&ok);
    let m_line = sdp.lines().find(|l| l.starts_with("m=audio")).unwrap();
    assert!(
        m_line.ends_with("RTP/AVP 8"),
        "answered with PCMA alone: {sdp}"
    );
    assert!(
        sdp.contains("a=rtpmap:8 PCMA/8000") || !sdp.contains("rtpmap"),
        "{sdp}"
    );
    // The answer's ACK went out, and the audio is PCMA from then on.
    assert!(n.sent(addr(ALICE), addr(SW), "ACK").iter().any(|t| t
        .msg()
        .unwrap()
        .header(HeaderName::CSeq)
        == Some("2 ACK")));
    n.run_for(ms(100));
    let after = rtp_during(&mut n, a, secs(1));
    assert!(
        !after.is_empty() && after.iter().all(|pt| *pt == 8),
        "{after:?}"
    );
}

#[test]
fn the_callees_early_media_reaches_the_caller_in_a_183_with_sdp() {
    let (mut n, _, a, b) = setup(4, "");
    n.agent(b).policy = Policy {
        provisional: vec![(183, true)],
        status: 200,
        after: secs(3),
    };
    n.agent(b).send_rtp = true;
    let c = n.invite(a, "sip:2001@127.0.0.1", SW);
    assert!(n.run_until(secs(2), |n| invite_statuses(n, a, c).contains(&183)));
    let early = n
        .agent(a)
        .call(c)
        .responses_to("INVITE")
        .into_iter()
        .find(|m| m.status() == Some(183))
        .cloned()
        .unwrap();
    let sdp = body(&early);
    assert!(
        sdp.contains("m=audio") && sdp.contains("c=IN IP4 127.0.0.1"),
        "183 without SDP: {sdp:?}"
    );
    // The callee's early media is relayed before anyone answered.
    let t = n.now;
    n.run_for(secs(1));
    assert_eq!(n.agent(a).call(c).state, State::Calling);
    assert!(rtp_since(&mut n, a, t).len() > 40, "early media relayed");
    assert!(n.run_until(secs(5), confirmed(a, c)));
    let statuses = invite_statuses(&mut n, a, c);
    assert!(
        !statuses.contains(&180),
        "no ringing once early media runs: {statuses:?}"
    );
    assert_eq!(statuses.last(), Some(&200));
}

#[test]
fn progress_then_bridge_keeps_one_early_answer_through_the_callees_183_and_200() {
    let (mut n, _, a, b) = setup(5, "");
    n.agent(b).policy = Policy {
        provisional: vec![(183, true)],
        status: 200,
        after: secs(2),
    };
    let c = n.invite(a, "sip:3001@127.0.0.1", SW);
    assert!(n.run_until(secs(5), confirmed(a, c)));
    let responses: Vec<Message> = n
        .agent(a)
        .call(c)
        .responses_to("INVITE")
        .into_iter()
        .cloned()
        .collect();
    let firsts: Vec<u16> = responses.iter().filter_map(|m| m.status()).collect();
    assert_eq!(firsts.first(), Some(&100));
    assert_eq!(firsts.last(), Some(&200));
    let progress: Vec<&Message> = responses
        .iter()
        .filter(|m| m.status() == Some(183))
        .collect();
    assert!(!progress.is_empty(), "{firsts:?}");
    // The dialplan's own 183 and any the callee's early media causes carry the same SDP, and the
    // 200 answers with it too (one offer, one answer).
    let first_sdp = body(progress[0]);
    assert!(first_sdp.contains("m=audio"), "{first_sdp:?}");
    for p in &progress {
        assert_eq!(body(p), first_sdp);
    }
    assert_eq!(body(responses.last().unwrap()), first_sdp);
    // The callee was dialled after strowger's own 183.
    assert_eq!(n.agent(b).calls.len(), 1);
    assert_eq!(n.agent(b).last().state, State::Confirmed);
}

/// Loss and reordering on both links: retransmissions carry the call through, and it ends with
/// one call at the callee and one CDR.
#[test]
fn a_bridged_call_survives_ten_percent_loss_and_reordering() {
    let mut lost = 0;
    for seed in 1..=8 {
        let (mut n, sw, a, b) = setup(100 + seed, "");
        let what = format!("seed {seed}");
        // Every request was answered, every 2xx ACKed (a lost ACK is sent again).
        lossy_call(&mut n, sw, a, b, "sip:2001@127.0.0.1", SW, secs(3), &what);
        assert_eq!(n.sw(sw).active_calls(), 0, "{what}");
        let cdr = one_cdr(&mut n, sw, &what);
        assert_eq!(cdr["sip_status"], 200, "{what}");
        assert_eq!(cdr["hangup_side"], "caller", "{what}");
        lost += n.trace.iter().filter(|t| t.lost).count();
    }
    assert!(lost >= 8, "only {lost} SIP datagrams lost in all runs");
}

#[test]
fn shutdown_hangs_up_every_call_with_byes_retransmitted_until_answered() {
    let (mut n, sw, a, b) = setup(7, "");
    let carol = n.ua("127.0.0.1:5062", "carol");
    let dave = n.ua("127.0.0.1:5063", "dave");
    let bridged = n.invite(a, "sip:2001@127.0.0.1", SW);
    let playing = n.invite(carol, "sip:44444@127.0.0.1", SW);
    let ringing = n.invite(dave, "sip:5555@127.0.0.1", "127.0.0.1:5060");
    assert!(n.run_until(secs(2), |n| n.agent(a).call(bridged).state
        == State::Confirmed
        && n.agent(carol).call(playing).state == State::Confirmed
        && invite_statuses(n, dave, ringing).contains(&180)));
    assert_eq!(n.sw(sw).active_calls(), 3);

    // The first three BYEs to Alice are lost.
    let (sw_addr, alice) = (addr(SW), addr(ALICE));
    n.drop_next(3, move |p| {
        p.from == sw_addr && p.to == alice && p.bytes.starts_with(b"BYE ")
    });
    n.shutdown(sw);
    assert!(n.run_until(secs(30), ended(a, bridged)));
    let byes = n.sent(sw_addr, alice, "BYE");
    assert_eq!(byes.len(), 4, "three lost, the fourth arrived");
    assert!(byes[..3].iter().all(|t| t.lost) && !byes[3].lost);
    assert!(
        byes[1].sent - byes[0].sent >= ms(500) && byes[2].sent - byes[1].sent >= ms(1000),
        "timer E backs off"
    );
    // Answered: no more retransmissions.
    n.run_for(secs(30));
    assert_eq!(n.sent(sw_addr, alice, "BYE").len(), 4);
    assert_eq!(n.agent(a).call(bridged).requests_of(&Method::Bye).len(), 1);
    assert_eq!(n.agent(b).last().requests_of(&Method::Bye).len(), 1);
    assert_eq!(n.agent(carol).call(playing).state, State::Ended);
    let dave_final = invite_statuses(&mut n, dave, ringing);
    assert!(
        dave_final.last().is_some_and(|s| *s >= 400),
        "the ringing caller gets a final error: {dave_final:?}"
    );
    assert_eq!(n.sw(sw).active_calls(), 0);
    let cdrs = n.sw(sw).cdrs();
    assert_eq!(cdrs.len(), 3);
    for cdr in &cdrs {
        assert_eq!(cdr["hangup_side"], "switch", "{cdr}");
        assert_eq!(cdr["cause"], 16, "{cdr}");
    }
}

#[test]
fn an_overloaded_switch_refuses_new_calls_with_503_and_serves_byes() {
    let (mut n, sw, a, b) = setup(8, "[general]\nretry_after_s = 9\n");
    let c = n.invite(a, "sip:44444@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, c)));
    n.sw(sw).node().set_overloaded(true);
    let refused = n.invite(b, "sip:44444@127.0.0.1", SW);
    assert!(n.run_until(secs(2), ended(b, refused)));
    let r = n.agent(b).call(refused).responses_to("INVITE")[0].clone();
    assert_eq!(r.status(), Some(503));
    assert_eq!(r.header(HeaderName::RetryAfter), Some("9"));
    // The refused caller's ACK is absorbed and nothing is retransmitted to it.
    n.run_for(secs(5));
    assert_eq!(n.sent(addr(SW), addr(BOB), "503").len(), 1);
    let scrape = n.sw(sw).scrape();
    for (reason, refused) in [("overloaded", 1), ("max_calls", 0), ("no_rtp_port", 0)] {
        let series = format!("strowger_calls_refused_total{{reason=\"{reason}\"}} {refused}\n");
        assert!(scrape.contains(&series), "{series} in:\n{scrape}");
    }
    hang_up(&mut n, a, c, secs(2));
    assert_eq!(n.sw(sw).cdrs().len(), 1);
    assert_eq!(n.sw(sw).active_calls(), 0);
    // Back from overload, calls are admitted again.
    n.sw(sw).node().set_overloaded(false);
    let again = n.invite(b, "sip:44444@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(b, again)));
}

#[test]
fn requests_that_queued_too_long_refuse_new_calls_but_not_byes() {
    let (mut n, sw, a, b) = setup(9, "");
    let c = n.invite(a, "sip:44444@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, c)));
    n.sw(sw).late = true;
    let refused = n.invite(b, "sip:44444@127.0.0.1", SW);
    assert!(n.run_until(secs(2), ended(b, refused)));
    assert_eq!(invite_statuses(&mut n, b, refused), [503]);
    hang_up(&mut n, a, c, secs(2));
    assert_eq!(n.sw(sw).cdrs().len(), 1);
}

#[test]
fn at_max_calls_a_new_call_gets_503_until_one_ends() {
    let (mut n, sw, a, b) = setup(10, "[general]\nmax_calls = 1\nretry_after_s = 4\n");
    let c = n.invite(a, "sip:44444@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, c)));
    let refused = n.invite(b, "sip:44444@127.0.0.1", SW);
    assert!(n.run_until(secs(2), ended(b, refused)));
    let r = n.agent(b).call(refused).responses_to("INVITE")[0].clone();
    assert_eq!(r.status(), Some(503));
    assert_eq!(r.header(HeaderName::RetryAfter), Some("4"));
    hang_up(&mut n, a, c, secs(2));
    let admitted = n.invite(b, "sip:44444@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(b, admitted)));
    assert_eq!(n.sw(sw).active_calls(), 1);
}

/// The caller cancels just as the callee answers, the CANCEL and the 200 crossing at strowger
/// in either order: whichever wins, the callee's leg is ended (CANCEL, or ACK and BYE for its
/// 200), nothing stays up and one CDR is written.
#[test]
fn a_cancel_crossing_the_callees_200_leaves_no_call_behind() {
    for offset_ms in [0u64, 3, 5, 7, 10, 20] {
        let (mut n, sw, a, b) = setup(40 + offset_ms, "");
        n.agent(b).policy = Policy {
            provisional: vec![(180, false)],
            status: 200,
            after: secs(1),
        };
        let c = n.invite(a, "sip:2001@127.0.0.1", SW);
        // The 200 leaves Bob 1 s after the INVITE reached him (10 ms after it left Alice) and
        // reaches strowger 5 ms later; the CANCEL takes 5 ms from Alice to strowger.
        n.run_for(ms(1000 + offset_ms));
        n.cancel(a, c);
        n.run_for(secs(40));
        let what = format!("offset {offset_ms} ms");
        let alice = invite_statuses(&mut n, a, c);
        let last = *alice.last().unwrap();
        assert!(last == 487 || last == 200, "{what}: {alice:?}");
        if last == 200 {
            // The answer won: the caller hangs up the call it got.
            n.bye(a, c);
            n.run_for(secs(5));
        }
        assert_eq!(n.agent(b).calls.len(), 1, "{what}");
        let bob = n.agent(b).last();
        assert_eq!(bob.state, State::Ended, "{what}: the callee's leg ended");
        let ended_by = bob.requests_of(&Method::Cancel).len() + bob.requests_of(&Method::Bye).len();
        assert!(ended_by >= 1, "{what}: CANCEL or BYE to the callee");
        if bob.requests_of(&Method::Bye).len() == 1 {
            assert_eq!(
                bob.requests_of(&Method::Ack).len(),
                1,
                "{what}: the 200 was ACKed before the BYE"
            );
        }
        assert_eq!(n.sw(sw).active_calls(), 0, "{what}");
        assert_eq!(n.sw(sw).cdrs().len(), 1, "{what}");
        assert!(n.sw(sw).logs().is_empty(), "{what}: {:?}", n.sw(sw).logs());
    }
}

/// strowger anchors the media, so the callee putting its leg on hold is answered by strowger
/// and the caller hears of it nothing (no re-INVITE on its leg).
#[test]
fn the_callee_holds_its_leg_by_reinvite_and_the_caller_is_not_asked() {
    let (mut n, _, a, b) = setup(12, "");
    let c = n.invite(a, "sip:2001@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, c)));
    let bc = n.agent(b).last_index().unwrap();
    let hold = n.agent(b).sdp(&[0], "sendonly");
    n.reinvite(b, bc, hold);
    assert!(n.run_until(secs(2), |n| n
        .agent(b)
        .call(bc)
        .responses_to("INVITE")
        .len()
        == 1));
    let ok = n.agent(b).call(bc).responses_to("INVITE")[0].clone();
    assert_eq!(ok.status(), Some(200));
    assert!(body(&ok).contains("a=recvonly"), "{}", body(&ok));
    n.run_for(secs(1));
    assert_eq!(n.agent(b).call(bc).requests_of(&Method::Invite).len(), 1);
    assert_eq!(
        n.agent(a).call(c).requests.len(),
        0,
        "nothing in the caller's dialog"
    );
    assert_eq!(
        n.sent(addr(BOB), addr(SW), "ACK").len(),
        1,
        "Bob ACKed strowger's 200"
    );
}

/// The ACK strowger sends for the callee's 200 is lost: the callee retransmits its 200, and
/// strowger must ACK each retransmission (RFC 3261 §13.2.2.4), or the callee gives up after
/// 64*T1 and hangs up a call both sides are talking on.
#[test]
fn a_lost_ack_to_the_callee_is_sent_again_for_its_retransmitted_200() {
    let (mut n, sw, a, b) = setup(62, "");
    let (sw_a, bob) = (addr(SW), addr(BOB));
    n.drop_next(1, move |p| {
        p.from == sw_a && p.to == bob && p.bytes.starts_with(b"ACK ")
    });
    let c = n.invite(a, "sip:2001@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, c)));
    n.run_for(secs(5));
    let acks = n.sent(sw_a, bob, "ACK");
    assert_eq!(
        acks.len(),
        2,
        "the lost ACK, then one for the retransmitted 200"
    );
    assert_eq!(n.agent(b).last().requests_of(&Method::Ack).len(), 1);
    n.run_for(secs(40));
    assert_no_tx_events(&mut n, &[b], "");
    assert_eq!(
        n.agent(b).last().state,
        State::Confirmed,
        "the callee kept the call"
    );
    assert_eq!(n.sw(sw).active_calls(), 1);
}

/// RFC 4028 over the network: a caller that asked for a 90 s session interval and never
/// refreshes it is hung up by strowger before the interval runs out; one that refreshes by
/// re-INVITE keeps its call for another interval.
#[test]
fn a_session_timer_ends_an_unrefreshed_call_and_a_refresh_keeps_it() {
    let (mut n, sw, a, b) = setup(13, "");
    let timer = [("Session-Expires", "90"), ("Supported", "timer")];
    let quiet = n.invite_with(a, "sip:44444@127.0.0.1", SW, &timer);
    let refreshing = n.invite_with(b, "sip:44444@127.0.0.1", SW, &timer);
    assert!(n.run_until(secs(2), |n| n.agent(a).call(quiet).state
        == State::Confirmed
        && n.agent(b).call(refreshing).state == State::Confirmed));
    let t0 = n.now;
    let ok = last_response(&mut n, a, quiet, "INVITE");
    assert_eq!(
        ok.header(HeaderName::SessionExpires),
        Some("90;refresher=uac")
    );

    // Bob refreshes at 40 s.
    n.run_for(secs(40));
    n.agent(b).dialog_headers = vec![("Session-Expires".into(), "90;refresher=uac".into())];
    let offer = n.agent(b).sdp(&[0], "sendrecv");
    n.reinvite(b, refreshing, offer);
    assert!(n.run_until(secs(2), |n| n
        .agent(b)
        .call(refreshing)
        .responses_to("INVITE")
        .len()
        >= 3));
    let refreshed = last_response(&mut n, b, refreshing, "INVITE");
    assert_eq!(refreshed.status(), Some(200));
    assert_eq!(
        refreshed.header(HeaderName::SessionExpires),
        Some("90;refresher=uac")
    );

    // Alice's call ends a little before 90 s without a refresh, with a BYE from strowger.
    assert!(n.run_until(secs(60), ended(a, quiet)));
    let ended = n.now - t0;
    assert!(
        ended >= secs(50) && ended < secs(90),
        "ended after {ended:?}"
    );
    assert_eq!(n.agent(a).call(quiet).requests_of(&Method::Bye).len(), 1);
    assert_eq!(
        n.agent(b).call(refreshing).state,
        State::Confirmed,
        "refreshed at 40 s"
    );
    assert_eq!(one_cdr(&mut n, sw, "")["hangup_side"], "switch");
    // Bob's call lasts until a little before 40 + 90 s.
    assert!(n.run_until(secs(60), |n| n.agent(b).call(refreshing).state
        == State::Ended));
    let ended = n.now - t0;
    assert!(
        ended >= secs(90) && ended < secs(130),
        "ended after {ended:?}"
    );
}

/// RFC 3311: an UPDATE in the early dialog renegotiates the session once strowger answered the
/// INVITE's offer (183 with SDP); before that (a 180 without SDP) the caller's first offer still
/// waits for its answer, and a second one is refused with 500 and Retry-After (§5.2).
#[test]
fn an_update_in_the_early_dialog_is_answered_with_sdp_once_the_offer_was_answered() {
    let (mut n, sw, a, _) = setup(14, "");
    let early = n.invite(a, "sip:5556@127.0.0.1", SW);
    let ringing = n.invite(a, "sip:5555@127.0.0.1", SW);
    assert!(
        n.run_until(secs(2), |n| invite_statuses(n, a, early).contains(&183)
            && invite_statuses(n, a, ringing).contains(&180))
    );
    for c in [early, ringing] {
        let hold = n.agent(a).sdp(&[0], "sendonly");
        n.update(a, c, hold);
    }
    assert!(n.run_until(secs(2), |n| [early, ringing].iter().all(|&c| n
        .agent(a)
        .call(c)
        .responses_to("UPDATE")
        .len()
        == 1)));
    let ok = n.agent(a).call(early).responses_to("UPDATE")[0].clone();
    assert_eq!(ok.status(), Some(200));
    let sdp = body(&ok);
    let m_line = sdp.lines().find(|l| l.starts_with("m=audio")).unwrap_or("");
    assert!(!m_line.starts_with("m=audio 0 "), "stream accepted: {sdp}");
    assert!(sdp.contains("a=recvonly"), "{sdp}");
    let refused = n.agent(a).call(ringing).responses_to("UPDATE")[0].clone();
    assert_eq!(refused.status(), Some(500));
    assert!(refused.header(HeaderName::RetryAfter).is_some());
    for c in [early, ringing] {
        assert_eq!(n.agent(a).call(c).state, State::Calling, "still ringing");
    }
    assert_eq!(n.sw(sw).active_calls(), 2);
}

/// The old way to hold (RFC 2543, still sent by some phones): a re-INVITE whose connection
/// address is 0.0.0.0. strowger must not send RTP to 0.0.0.0 (on Linux that reaches the local
/// host) and resumes when the real address comes back.
#[test]
fn a_hold_with_connection_address_zero_stops_the_audio() {
    let (mut n, _, a, _) = setup(15, "");
    let c = n.invite(a, "sip:44444@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, c)));
    let hold = n
        .agent(a)
        .sdp(&[0], "sendrecv")
        .replace("c=IN IP4 127.0.0.1", "c=IN IP4 0.0.0.0");
    n.reinvite(a, c, hold);
    assert!(n.run_until(secs(2), |n| n
        .agent(a)
        .call(c)
        .responses_to("INVITE")
        .iter()
        .any(|m| m.header(HeaderName::CSeq) == Some("2 INVITE"))));
    let ok = last_response(&mut n, a, c, "INVITE");
    assert_eq!(ok.status(), Some(200));
    n.run_for(ms(100));
    let t = n.now;
    n.run_for(secs(1));
    let to_zero: Vec<_> = n
        .media_undeliverable
        .iter()
        .filter(|(at, _, to)| *at > t && to.ip().is_unspecified())
        .collect();
    assert!(
        to_zero.is_empty(),
        "{} RTP packets to 0.0.0.0",
        to_zero.len()
    );
    assert!(rtp_since(&mut n, a, t).is_empty(), "no audio on hold");

    let resume = n.agent(a).sdp(&[0], "sendrecv");
    n.reinvite(a, c, resume);
    assert!(n.run_until(secs(2), |n| n
        .agent(a)
        .call(c)
        .responses_to("INVITE")
        .iter()
        .any(|m| m.header(HeaderName::CSeq) == Some("3 INVITE"))));
    n.run_for(ms(100));
    assert!(rtp_during(&mut n, a, secs(1)).len() > 40, "audio again");
}
