//! strowger is no relay: each way of making the proxy role or the registrar send requests to a
//! third address — a preloaded Route, a Request-URI in a foreign domain, in-dialog requests with
//! a forged Route or forged tags, a Path, thousands of contacts — is refused, and a listener on
//! the third address receives nothing; what strowger's own Record-Route and trusted peers do
//! still works.

use crate::net;

use net::*;
use sip::{HeaderName, Message};

/// The third address an attacker wants strowger to send to.
const VICTIM: &str = "127.0.0.9:5099";
/// A trusted edge proxy (`security.trusted`).
const EDGE: &str = "127.0.0.5:5060";
const MALLORY: &str = "127.0.0.66:5061";

/// A proxy for example.com (`head` adds tables), Bob registered as 1002 at BOB, Alice and
/// Mallory on the net, and a listener at VICTIM; returns (net, switch, alice, mallory, bob,
/// victim).
fn proxy(seed: u64, head: &str) -> (Net, Id, Id, Id, Id, Id) {
    let mut n = Net::new(seed);
    // Strangers on loopback are strangers here: nobody is trusted unless `head` says so.
    let head = match head.contains("[security]") {
        true => head.to_string(),
        false => format!("{head}[security]\ntrusted = []\n"),
    };
    let toml = config(&format!(
        "[registrar]\nauthenticate = false\nkeepalive_s = 0\n[proxy]\ndomains = [\"example.com\"]\n{head}"
    ));
    let sw = n.switch(&toml, &[SW], 1);
    for u in ["1002", "1003", "1004", "1005"] {
        n.sw(sw).shared.store.add_user(u, "strowger", "pw");
    }
    let b = n.ua(BOB, "1002");
    n.register(b, SW, "strowger", 600);
    assert!(n.run_until(secs(2), registered([b])));
    let a = n.ua(ALICE, "alice");
    let m = n.ua(MALLORY, "mallory");
    let v = n.ua(VICTIM, "victim");
    (n, sw, a, m, b, v)
}

/// The status and Warning of the last final response agent `ua` got to its `method` requests
/// in call `c`.
fn refusal(n: &mut Net, ua: Id, c: usize, method: &str) -> (u16, String) {
    let r = last_response(n, ua, c, method);
    let warning = r.header(HeaderName::Warning).unwrap_or("").to_string();
    (r.status().unwrap(), warning)
}

fn assert_victim_untouched(n: &mut Net, v: Id) {
    let got: Vec<String> = n
        .agent(v)
        .received
        .iter()
        .map(|(_, from, m)| format!("{from}: {:?} {:?}", m.method(), m.status()))
        .collect();
    assert!(got.is_empty(), "the third address received {got:?}");
    assert!(n.agent(v).calls.is_empty());
}

/// The attack the issue reports: an anonymous INVITE for a number at a third address, its Route
/// naming strowger (by address or by name) and then the third address. Refused with 403 and a
/// Warning naming `security.trusted`, with or without `proxy.authenticate`; so is a Request-URI
/// in a foreign domain routed through strowger alone.
#[test]
fn preloaded_routes_and_foreign_domains_from_strangers_get_403() {
    for (seed, auth) in [(1, "false"), (2, "true")] {
        let (mut n, _, _, m, _, v) = proxy(seed, &format!("authenticate = {auth}\n"));
        let ruri = format!("sip:+15551234@{VICTIM}");
        for route in [
            format!("<sip:{SW};lr>, <sip:{VICTIM};lr>"),
            format!("<sip:strowger;lr>, <sip:{VICTIM};lr>"),
        ] {
            let c = n.invite_with(m, &ruri, SW, &[("Route", &route)]);
            assert!(n.run_until(secs(5), ended(m, c)), "{route}");
            let (status, warning) = refusal(&mut n, m, c, "INVITE");
            assert_eq!(status, 403, "authenticate={auth} {route}: {warning}");
            assert!(warning.contains("security.trusted"), "{warning}");
        }
        // A Route not naming strowger is no business of the proxy role: the B2BUA takes the
        // request, never follows a Route, and asks a stranger who it is.
        let c = n.invite_with(m, &ruri, SW, &[("Route", &format!("<sip:{VICTIM};lr>"))]);
        assert!(n.run_until(secs(5), ended(m, c)));
        assert_eq!(refusal(&mut n, m, c, "INVITE").0, 401);
        // strowger as outbound proxy for a domain it does not serve: a relay.
        let c = n.invite_with(m, &ruri, SW, &[("Route", &format!("<sip:{SW};lr>"))]);
        assert!(n.run_until(secs(5), ended(m, c)));
        let (status, warning) = refusal(&mut n, m, c, "INVITE");
        assert_eq!(status, 403, "{warning}");
        assert!(warning.contains("proxy.relay_for_users"), "{warning}");
        n.run_for(secs(40));
        assert_victim_untouched(&mut n, v);
    }
}

/// A phone that uses strowger as its outbound proxy (a Route naming strowger alone) still
/// reaches a user of a proxied domain.
#[test]
fn strowger_as_outbound_proxy_for_its_own_domain_still_works() {
    let (mut n, _, a, _, b, v) = proxy(3, "");
    let c = n.invite_with(
        a,
        "sip:1002@example.com",
        SW,
        &[("Route", "<sip:127.0.0.1;lr>")],
    );
    assert!(n.run_until(secs(5), confirmed(a, c)));
    let inv = n.agent(b).last().requests[0].clone();
    assert!(
        inv.header(HeaderName::Route).is_none(),
        "our Route taken off"
    );
    hang_up(&mut n, a, c, secs(5));
    assert_victim_untouched(&mut n, v);
}

/// A phone that uses strowger as its outbound proxy and dials one of strowger's own extensions
/// reaches the dialplan, as without the Route.
#[test]
fn strowger_as_outbound_proxy_for_its_own_extensions_reaches_the_dialplan() {
    // 44444 is open to strangers (a public context), as in the default configuration.
    let public = "[[dialplan.contexts.public.rules]]\nexten = \"44444\"\nsteps = [\"answer\", \"playback demo loop=true\"]\n";
    let (mut n, sw, a, _, _, v) = proxy(12, public);
    for route in ["<sip:127.0.0.1;lr>", "<sip:strowger;lr>"] {
        let c = n.invite_with(a, "sip:44444@127.0.0.1", SW, &[("Route", route)]);
        assert!(n.run_until(secs(5), confirmed(a, c)), "{route}");
        assert_eq!(n.sw(sw).active_calls(), 1, "a B2BUA call");
        hang_up(&mut n, a, c, secs(5));
        assert!(n.run_until(secs(2), |n| n.sw(sw).active_calls() == 0));
    }
    assert_victim_untouched(&mut n, v);
}

/// With `proxy.relay_for_users`, a foreign domain is reached by an authenticated user only: the
/// anonymous caller is challenged (407), a wrong password gets 403 and reaches nobody, the
/// right one is forwarded.
#[test]
fn relay_for_users_forwards_authenticated_users_only() {
    let (mut n, _, _, m, _, v) = proxy(4, "relay_for_users = true\n");
    let ruri = format!("sip:+15551234@{VICTIM}");
    let route = format!("<sip:{SW};lr>");
    let c = n.invite_with(m, &ruri, SW, &[("Route", &route)]);
    assert!(n.run_until(secs(5), ended(m, c)));
    assert_eq!(invite_statuses(&mut n, m, c).last(), Some(&407));
    let challenge = last_response(&mut n, m, c, "INVITE")
        .header(HeaderName::ProxyAuthenticate)
        .map(|v| sip::auth::Challenge::parse(v).unwrap())
        .unwrap();
    let answer =
        |pw: &str| sip::auth::Authorization::build(&challenge, "1003", pw, "INVITE", &ruri, 1, "c");
    let wrong = answer("not-it");
    let c = n.invite_with(
        m,
        &ruri,
        SW,
        &[("Route", &route), ("Proxy-Authorization", &wrong)],
    );
    assert!(n.run_until(secs(5), ended(m, c)));
    assert_eq!(invite_statuses(&mut n, m, c).last(), Some(&403));
    n.run_for(secs(40));
    assert_victim_untouched(&mut n, v);

    let right = answer("pw");
    let c = n.invite_with(
        m,
        &ruri,
        SW,
        &[("Route", &route), ("Proxy-Authorization", &right)],
    );
    assert!(n.run_until(secs(5), confirmed(m, c)));
    let inv = n.agent(v).last().requests[0].clone();
    assert_eq!(inv.request_uri(), Some(ruri.as_str()));
    assert!(inv.header(HeaderName::ProxyAuthorization).is_none());
}

/// A trusted edge proxy may preload a Route: its request goes where the Route says.
#[test]
fn a_trusted_peer_may_preload_a_route() {
    let (mut n, _, _, _, _, v) = proxy(5, "[security]\ntrusted = [\"127.0.0.5\"]\n");
    let edge = n.ua(EDGE, "edge");
    let ruri = format!("sip:+15551234@{VICTIM}");
    let route = format!("<sip:{SW};lr>, <sip:{VICTIM};lr>");
    let c = n.invite_with(edge, &ruri, SW, &[("Route", &route)]);
    assert!(n.run_until(secs(5), confirmed(edge, c)));
    let inv = n.agent(v).last().requests[0].clone();
    assert_eq!(inv.request_uri(), Some(ruri.as_str()));
    assert_eq!(
        inv.header(HeaderName::Route),
        Some(format!("<sip:{VICTIM};lr>").as_str())
    );
    hang_up(&mut n, edge, c, secs(5));
}

/// A record-routed dialog: strowger's Record-Route is signed, and the dialog works end to end
/// through it (ACK, re-INVITE, BYE). In-dialog requests that try to use it elsewhere get 403 and
/// reach nobody: a party of the dialog pointing it at a third address, someone else replaying
/// its Route with its Call-ID and tags or with forged tags, and a Route naming strowger without
/// a signature.
#[test]
fn in_dialog_requests_follow_only_strowgers_own_record_route() {
    let (mut n, _, a, m, b, v) = proxy(6, "");
    let c = n.invite(a, "sip:1002@example.com", SW);
    assert!(n.run_until(secs(5), confirmed(a, c)));
    let rr = n.agent(a).call(c).route_set.clone();
    assert_eq!(rr.len(), 1);
    assert!(rr[0].starts_with(&format!("<sip:{SW};lr;rr=")), "{rr:?}");

    // Alice points her own dialog at the third address.
    let target = n.agent(a).call(c).remote_target.clone();
    n.agent(a).calls[c].remote_target = format!("sip:x@{VICTIM}");
    let hold = n.agent(a).sdp(&[0], "sendonly");
    n.reinvite(a, c, hold);
    assert!(n.run_until(secs(5), |n| {
        let last = last_response(n, a, c, "INVITE");
        last.status() >= Some(200) && last.header(HeaderName::CSeq) == Some("2 INVITE")
    }));
    let (status, warning) = refusal(&mut n, a, c, "INVITE");
    assert_eq!(status, 403, "{warning}");
    assert!(warning.contains("record-routed"), "{warning}");
    n.agent(a).calls[c].remote_target = target.clone();

    // Mallory replays the dialog's Route: with its Call-ID and tags, with forged tags, and a
    // Route naming strowger with no signature, each towards the third address.
    let (call_id, ftag, ttag) = {
        let call = n.agent(a).call(c);
        (
            call.call_id.clone(),
            call.local_tag.clone(),
            call.remote_tag.clone(),
        )
    };
    let unsigned = vec![format!("<sip:{SW};lr>")];
    for (i, (cid, from_tag, to_tag, routes)) in [
        (&call_id, &ftag, &ttag, &rr),
        (&call_id, &"forged".to_string(), &"forged2".to_string(), &rr),
        (&"other@x".to_string(), &ftag, &ttag, &rr),
        (&call_id, &ftag, &ttag, &unsigned),
    ]
    .into_iter()
    .enumerate()
    {
        let mc = n.invite(m, "sip:nobody@example.com", SW);
        assert!(n.run_until(secs(5), ended(m, mc)));
        let call = &mut n.agent(m).calls[mc];
        call.call_id = cid.clone();
        call.local_tag = from_tag.clone();
        call.remote_tag = to_tag.clone();
        call.route_set = routes.clone();
        call.remote_target = format!("sip:x@{VICTIM}");
        n.bye(m, mc);
        assert!(n.run_until(secs(5), bye_answered(m, mc)), "attempt {i}");
        let (status, warning) = refusal(&mut n, m, mc, "BYE");
        assert_eq!(status, 403, "attempt {i}: {warning}");
    }
    assert_victim_untouched(&mut n, v);

    // The dialog itself is untouched and ends normally through strowger.
    let resume = n.agent(a).sdp(&[0], "sendrecv");
    n.reinvite(a, c, resume);
    assert!(n.run_until(secs(5), |n| {
        let last = last_response(n, a, c, "INVITE");
        last.status() == Some(200) && last.header(HeaderName::CSeq) == Some("3 INVITE")
    }));
    n.run_for(secs(1));
    assert_eq!(n.sent(addr(SW), addr(BOB), "ACK").len(), 2);
    let bc = n.agent(b).last_index().unwrap();
    hang_up(&mut n, b, bc, secs(5));
    assert_eq!(n.sent(addr(SW), addr(ALICE), "BYE").len(), 1);
    assert_eq!(n.agent(a).call(c).state, State::Ended);
    n.run_for(secs(40));
    assert_victim_untouched(&mut n, v);
}

/// A Path from a phone is refused (403 naming `security.trusted`), so a call to that user
/// cannot be steered to a third address; a Path from a trusted edge proxy is stored and calls to
/// the user go through it.
#[test]
fn a_path_is_taken_from_trusted_edges_only() {
    let (mut n, _, a, _, _, v) = proxy(7, "[security]\ntrusted = [\"127.0.0.5\"]\n");
    let phone = n.ua("127.0.0.1:5071", "1003");
    n.agent(phone).register_headers = vec![("Path".into(), format!("<sip:{VICTIM};lr>"))];
    n.register(phone, SW, "strowger", 600);
    assert!(n.run_until(secs(2), |n| !n.agent(phone).register_statuses.is_empty()));
    assert_eq!(n.agent(phone).register_statuses, [403]);
    let warning = n
        .agent(phone)
        .received
        .iter()
        .find_map(|(_, _, m)| m.header(HeaderName::Warning).map(str::to_string))
        .unwrap_or_default();
    assert!(warning.contains("security.trusted"), "{warning}");
    let c = n.invite(a, "sip:1003@example.com", SW);
    assert!(n.run_until(secs(5), ended(a, c)));
    assert_eq!(invite_statuses(&mut n, a, c).last(), Some(&480));

    // Through the trusted edge: stored, and the INVITE goes to the edge with its Route.
    let edge = n.ua(EDGE, "1004");
    n.agent(edge).register_headers = vec![("Path".into(), format!("<sip:{EDGE};lr>"))];
    n.register(edge, SW, "strowger", 600);
    assert!(n.run_until(secs(2), registered([edge])));
    let c = n.invite(a, "sip:1004@example.com", SW);
    assert!(n.run_until(secs(5), confirmed(a, c)));
    let inv = n.agent(edge).last().requests[0].clone();
    assert_eq!(
        inv.header(HeaderName::Route),
        Some(format!("<sip:{EDGE};lr>").as_str())
    );
    hang_up(&mut n, a, c, secs(5));
    n.run_for(secs(40));
    assert_victim_untouched(&mut n, v);
}

/// The Contact headers of the last 200 agent `ua` got for a REGISTER.
fn registered_contacts(n: &mut Net, ua: Id) -> Vec<String> {
    let ok: Message = n
        .agent(ua)
        .received
        .iter()
        .rev()
        .map(|(_, _, m)| m)
        .find(|m| {
            m.status() == Some(200)
                && m.header(HeaderName::CSeq)
                    .is_some_and(|c| c.ends_with("REGISTER"))
        })
        .cloned()
        .expect("a 200 for a REGISTER");
    ok.all(HeaderName::Contact).map(str::to_string).collect()
}

/// Registers contact `k` of user 1005 from `phone` and waits for the answer.
fn register_contact(n: &mut Net, phone: Id, k: usize) -> u16 {
    n.agent(phone).contact = format!("sip:1005@127.0.0.1:{}", 6000 + k);
    let before = n.agent(phone).register_statuses.len();
    n.register(phone, SW, "strowger", 600);
    assert!(n.run_until(secs(2), |n| n.agent(phone).register_statuses.len() > before));
    *n.agent(phone).register_statuses.last().unwrap()
}

/// `registrar.max_contacts` (default 10) with `contacts_overflow = "refuse"`: the 11th contact
/// gets 403 naming the limit and the address of record; a refresh of one already there is
/// fine; 2,000 more attempts (200 REGISTERs of 10 contacts, and one of 11) change nothing.
#[test]
fn the_eleventh_contact_is_refused_and_two_thousand_change_nothing() {
    let (mut n, _, _, _, _, v) = proxy(8, "");
    let phone = n.ua("127.0.0.1:5072", "1005");
    for k in 0..10 {
        assert_eq!(register_contact(&mut n, phone, k), 200, "contact {k}");
    }
    assert_eq!(register_contact(&mut n, phone, 10), 403);
    let warning = n
        .agent(phone)
        .received
        .last()
        .and_then(|(_, _, m)| m.header(HeaderName::Warning).map(str::to_string))
        .unwrap_or_default();
    assert!(
        warning.contains("registrar.max_contacts (10)") && warning.contains("1005@strowger"),
        "{warning}"
    );
    assert_eq!(register_contact(&mut n, phone, 3), 200, "a refresh");
    assert_eq!(registered_contacts(&mut n, phone).len(), 10);

    for batch in 0..200 {
        let more: Vec<String> = (1..10)
            .map(|j| format!("<sip:1005@127.0.0.2:{}>", 10_000 + batch * 10 + j))
            .collect();
        n.agent(phone).register_headers = vec![("Contact".into(), more.join(", "))];
        assert_eq!(register_contact(&mut n, phone, 100 + batch), 403);
    }
    let eleven: Vec<String> = (0..10).map(|j| format!("<sip:x@127.0.0.3:{j}>")).collect();
    n.agent(phone).register_headers = vec![("Contact".into(), eleven.join(", "))];
    assert_eq!(register_contact(&mut n, phone, 99), 403);
    n.agent(phone).register_headers.clear();
    assert_eq!(register_contact(&mut n, phone, 3), 200);
    let contacts = registered_contacts(&mut n, phone);
    assert_eq!(contacts.len(), 10, "{contacts:?}");
    assert!(contacts.iter().all(|c| c.contains("127.0.0.1:60")));
    assert_victim_untouched(&mut n, v);
}

/// With `contacts_overflow = "replace_oldest"` the 11th contact is taken and the one that
/// lapses first goes.
#[test]
fn replace_oldest_makes_room_for_the_new_contact() {
    let mut n = Net::new(9);
    let toml = config(
        "[registrar]\nauthenticate = false\nkeepalive_s = 0\ncontacts_overflow = \"replace_oldest\"\n",
    );
    let sw = n.switch(&toml, &[SW], 1);
    n.sw(sw).shared.store.add_user("1005", "strowger", "pw");
    let phone = n.ua("127.0.0.1:5072", "1005");
    for k in 0..12 {
        assert_eq!(register_contact(&mut n, phone, k), 200, "contact {k}");
        n.run_for(secs(1));
    }
    let contacts = registered_contacts(&mut n, phone);
    assert_eq!(contacts.len(), 10, "{contacts:?}");
    for gone in [6000, 6001] {
        assert!(
            !contacts.iter().any(|c| c.contains(&format!(":{gone}>"))),
            "{contacts:?}"
        );
    }
    assert!(contacts.iter().any(|c| c.contains(":6011>")));
}

/// A response that does not fit in a UDP datagram (here `sip.max_message_size = 2000`: ten
/// contacts of some 200 bytes) is answered 513 with a Warning, not left unsent.
#[test]
fn a_response_too_large_for_udp_is_513_not_silence() {
    let mut n = Net::new(10);
    let toml = config(
        "[sip]\nmax_message_size = 2000\n[registrar]\nauthenticate = false\nkeepalive_s = 0\n",
    );
    let sw = n.switch(&toml, &[SW], 1);
    n.sw(sw).shared.store.add_user("1005", "strowger", "pw");
    let phone = n.ua("127.0.0.1:5072", "1005");
    let long = "x".repeat(180);
    let mut statuses = Vec::new();
    for k in 0..10 {
        n.agent(phone).contact = format!("sip:1005@127.0.0.1:{};{long}", 6000 + k);
        let before = n.agent(phone).register_statuses.len();
        n.register(phone, SW, "strowger", 600);
        assert!(n.run_until(secs(2), |n| n.agent(phone).register_statuses.len() > before));
        statuses.push(*n.agent(phone).register_statuses.last().unwrap());
    }
    assert_eq!(statuses[0], 200);
    assert_eq!(statuses.last(), Some(&513), "{statuses:?}");
    let r = &n.agent(phone).received.last().unwrap().2;
    let warning = r.header(HeaderName::Warning).unwrap_or("");
    assert!(warning.contains("UDP"), "{warning}");
    assert!(n.trace.iter().all(|t| t.bytes.len() <= 2000));
}

/// A BYE whose Route names strowger with a made-up signature, in no dialog strowger routed,
/// gets 403 too.
#[test]
fn a_stray_in_dialog_request_with_strowgers_route_gets_403() {
    let (mut n, _, _, m, _, v) = proxy(11, "");
    let mc = n.invite(m, "sip:nobody@example.com", SW);
    assert!(n.run_until(secs(5), ended(m, mc)));
    let call = &mut n.agent(m).calls[mc];
    call.remote_tag = "made-up".into();
    call.route_set = vec![format!("<sip:{SW};lr;rr=000000000000000000000000>")];
    call.remote_target = format!("sip:x@{VICTIM}");
    n.bye(m, mc);
    assert!(n.run_until(secs(5), bye_answered(m, mc)));
    assert_eq!(refusal(&mut n, m, mc, "BYE").0, 403);
    assert_victim_untouched(&mut n, v);
}
