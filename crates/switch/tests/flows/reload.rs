//! Reload and drain on the simulated network (tests/net): a new configuration handed to the
//! workers as `Input::Reload` changes the dialplan and limits while calls go on; `Input::Drain`
//! refuses new calls with 503 while calls in progress, their requests and REGISTERs are served.

use crate::net;

use net::*;
use sip::HeaderName;

/// A one-worker switch (2XXX bridged to Bob) with Alice and Bob; `head` adds tables.
fn setup(seed: u64, head: &str) -> (Net, Id, Id, Id) {
    let mut n = Net::new(seed);
    let sw = b2bua(&mut n, head);
    let a = n.ua(ALICE, "alice");
    let b = n.ua(BOB, "bob");
    (n, sw, a, b)
}

/// The configuration `b2bua` gives a switch, with `head` and `rules` (dialplan rules) added.
fn with_rules(head: &str, rules: &str) -> String {
    format!("{}\n{rules}", b2bua_config(head))
}

const EXTEN_6789: &str =
    "[[dialplan.contexts.default.rules]]\nexten = \"6789\"\nsteps = [\"answer\", \"wait 30\"]\n";

#[test]
fn a_reload_adds_an_extension_while_a_bridged_call_goes_on() {
    let (mut n, sw, a, _b) = setup(31, "");
    let carol = n.ua("127.0.0.1:5062", "carol");
    let c = n.invite(a, "sip:2001@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, c)));
    let before = n.invite(carol, "sip:6789@127.0.0.1", SW);
    assert!(n.run_until(secs(2), ended(carol, before)));
    assert_eq!(invite_statuses(&mut n, carol, before), [404]);

    n.reload(sw, &with_rules("", EXTEN_6789));
    let after = n.invite(carol, "sip:6789@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(carol, after)));
    // The call bridged before the reload is still up, and ends as calls end.
    n.run_for(secs(3));
    assert_eq!(n.agent(a).call(c).state, State::Confirmed);
    hang_up(&mut n, a, c, secs(2));
    hang_up(&mut n, carol, after, secs(2));
    assert_eq!(n.sw(sw).active_calls(), 0);
    let cdrs = n.sw(sw).cdrs();
    assert!(
        cdrs.iter()
            .any(|c| c["exten"] == "2001" && c["hangup_side"] == "caller"),
        "the bridged call ended by its caller, not by the reload: {cdrs:?}"
    );
}

#[test]
fn a_reload_lowers_max_calls_for_new_calls_only() {
    let (mut n, sw, a, b) = setup(32, "");
    let first = n.invite(a, "sip:44444@127.0.0.1", SW);
    let second = n.invite(b, "sip:44444@127.0.0.1", SW);
    assert!(n.run_until(secs(2), |n| confirmed(a, first)(n)
        && confirmed(b, second)(n)));

    n.reload(
        sw,
        &with_rules("[general]\nmax_calls = 1\nretry_after_s = 7\n", ""),
    );
    let carol = n.ua("127.0.0.1:5062", "carol");
    let refused = n.invite(carol, "sip:44444@127.0.0.1", SW);
    assert!(n.run_until(secs(2), ended(carol, refused)));
    let r = n.agent(carol).call(refused).responses_to("INVITE")[0].clone();
    assert_eq!(r.status(), Some(503));
    assert_eq!(
        r.header(HeaderName::RetryAfter),
        Some("7"),
        "the new retry_after_s"
    );
    assert_eq!(
        n.sw(sw).active_calls(),
        2,
        "the calls above the new limit go on"
    );
    hang_up(&mut n, a, first, secs(2));
    hang_up(&mut n, b, second, secs(2));
    let again = n.invite(carol, "sip:44444@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(carol, again)));
}

#[test]
fn draining_refuses_new_calls_with_503_and_serves_calls_in_progress_and_registers() {
    let head =
        "[general]\nretry_after_s = 11\n[registrar]\nauthenticate = false\nkeepalive_s = 0\n";
    let (mut n, sw, a, b) = setup(33, head);
    let c = n.invite(a, "sip:2001@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, c)));

    n.drain_calls(sw);
    let carol = n.ua("127.0.0.1:5062", "carol");
    let refused = n.invite(carol, "sip:44444@127.0.0.1", SW);
    assert!(n.run_until(secs(2), ended(carol, refused)));
    let r = n.agent(carol).call(refused).responses_to("INVITE")[0].clone();
    assert_eq!(r.status(), Some(503));
    assert_eq!(r.header(HeaderName::RetryAfter), Some("11"));
    // A phone still registers.
    let dave = n.ua("127.0.0.1:5063", "1001");
    n.register(dave, SW, "strowger", 600);
    assert!(n.run_until(secs(2), registered([dave])));
    // The call in progress takes a re-offer and ends on its own, both legs told.
    let offer = n.agent(a).sdp(&[0], "sendonly");
    n.update(a, c, offer);
    assert!(n.run_until(secs(2), |n| n
        .agent(a)
        .call(c)
        .responses_to("UPDATE")
        .first()
        .is_some_and(|r| r.status() == Some(200))));
    hang_up(&mut n, a, c, secs(2));
    assert!(n.run_until(secs(2), |n| n.agent(b).last().state == State::Ended));
    assert_eq!(n.sw(sw).active_calls(), 0);
    let cdrs = n.sw(sw).cdrs();
    assert_eq!(cdrs.len(), 1, "{cdrs:?}");
    assert_eq!(cdrs[0]["hangup_side"], "caller", "{cdrs:?}");
}
