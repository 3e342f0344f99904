//! Who may call what, on the simulated network (tests/net): unauthenticated callers get the same
//! 401 for every extension outside the public context, users are challenged and run in their
//! own context with their caller ID and call limit, and an unknown user, a wrong password and a
//! forbidden destination all get the same 403. Trusted peers are not challenged.

use crate::net;

use net::*;
use sip::{HeaderName, Message, Method};
use store::{CredentialStore, Credentials};
use switch::config::DEFAULT_TOML;

/// Nobody is trusted by address here (a trusted address no agent has), the `public` context
/// lists 9196 (echo), and the users' `office` context reaches 2XXX (Bob) and 44444 only.
const CONTEXTS: &str = r#"
[[dialplan.contexts.public.rules]]
exten = "9196"
steps = ["answer", "echo"]
[[dialplan.contexts.office.rules]]
regex = "^2(\\d{3})$"
steps = ["bridge sip:${EXTEN}@${bridge_target} timeout=20"]
[[dialplan.contexts.office.rules]]
exten = "44444"
steps = ["answer", "playback demo loop=true"]
"#;

/// A one-worker switch (or `workers`) on `SW` trusting only `trusted`, with `CONTEXTS`.
fn switch_trusting(n: &mut Net, trusted: &str, workers: usize) -> Id {
    let head = format!(
        "[security]\ntrusted = [{trusted}]\n[vars]\nbridge_target = \"{BOB}\"\nself = \"{SW}\"\n"
    );
    let toml = config(&head) + CONTEXTS;
    n.switch(&toml, &[SW], workers)
}

/// Adds a user with `password` and the call settings of `settings`.
fn add_user(n: &mut Net, sw: Id, user: &str, password: &str, settings: Credentials) {
    let c = Credentials {
        ..switch::registrar::credentials(user, "strowger", password)
    };
    let c = Credentials {
        context: settings.context,
        caller_id: settings.caller_id,
        max_calls: settings.max_calls,
        allow: settings.allow,
        ..c
    };
    n.sw(sw).shared.store.put_user(&c).unwrap();
}

/// A user whose calls run in `office`.
fn office() -> Credentials {
    Credentials {
        context: Some("office".into()),
        ..Credentials::default()
    }
}

/// A response as a caller could tell it from another: status line, header names in order,
/// and the values of the headers that are not copied from the request (Via, From, To, Call-ID
/// and CSeq are), with the fresh nonce and tag blanked.
fn shape(m: &Message) -> Vec<String> {
    let mut out = vec![format!("{:?} {:?}", m.status(), m.reason())];
    for (name, text, value) in m.headers() {
        let echoed = matches!(
            name,
            HeaderName::Via
                | HeaderName::From
                | HeaderName::To
                | HeaderName::CallId
                | HeaderName::CSeq
        );
        let value = match name {
            _ if echoed => String::new(),
            HeaderName::WwwAuthenticate => {
                let c = sip::auth::Challenge::parse(value).unwrap();
                assert_eq!(c.nonce.len(), 64, "a nonce of ours: {value}");
                value.replace(&c.nonce, "NONCE")
            }
            _ => value.to_string(),
        };
        out.push(format!("{text}: {value}"));
    }
    out.push(format!("body {}", m.body().len()));
    out
}

/// The final responses to agent `ua`'s INVITEs in call `c`.
fn finals(n: &mut Net, ua: Id, c: usize) -> Vec<Message> {
    n.agent(ua)
        .call(c)
        .responses_to("INVITE")
        .into_iter()
        .filter(|m| m.status().is_some_and(|s| s >= 200))
        .cloned()
        .collect()
}

/// Agent `ua` calls `exten` at `SW`; the call ends within 5 s and its final responses are
/// returned.
fn refused(n: &mut Net, ua: Id, exten: &str) -> Vec<Message> {
    let c = n.invite(ua, &format!("sip:{exten}@127.0.0.1"), SW);
    assert!(n.run_until(secs(5), ended(ua, c)), "{exten}: not refused");
    finals(n, ua, c)
}

#[test]
fn unauthenticated_invites_get_the_same_401_whether_the_user_or_extension_exists_or_not() {
    let mut n = Net::new(41);
    let sw = switch_trusting(&mut n, "\"10.9.9.9\"", 1);
    add_user(&mut n, sw, "1001", "pw-1001", Credentials::default());
    let a = n.ua(ALICE, "alice");
    let b = n.ua(BOB, "bob");
    // 1001 is a user (it used to get 480), 1999 is not (404), 2000 is the bridge target's
    // (rang Bob), 5555 rings (the default context's), 0 matches nothing anywhere.
    let mut shapes = Vec::new();
    for exten in ["1001", "1999", "2000", "5555", "0"] {
        let f = refused(&mut n, a, exten);
        assert_eq!(f.len(), 1, "{exten}: one final response: {f:?}");
        assert_eq!(f[0].status(), Some(401), "{exten}: {:?}", f[0]);
        let c = sip::auth::Challenge::parse(f[0].header(HeaderName::WwwAuthenticate).unwrap());
        let c = c.unwrap();
        assert_eq!((c.realm.as_str(), c.stale), ("strowger", false));
        shapes.push((exten, shape(&f[0])));
    }
    for (exten, s) in &shapes[1..] {
        assert_eq!(
            s, &shapes[0].1,
            "{exten} and {} answered alike",
            shapes[0].0
        );
    }
    assert!(n.agent(b).calls.is_empty(), "nothing reached Bob");
    assert_eq!(n.sw(sw).active_calls(), 0);
    assert!(n.sw(sw).cdrs().is_empty(), "no call was started");
    // A challenge is no failed digest: nothing for the ban logic.
    assert!(n.sw(sw).logs().is_empty(), "{:?}", n.sw(sw).logs());
}

#[test]
fn a_user_with_the_right_password_calls_in_its_own_context_with_its_caller_id() {
    let mut n = Net::new(42);
    let sw = switch_trusting(&mut n, "", 1);
    let settings = Credentials {
        caller_id: Some("\"Alice Smith\" <5551001>".into()),
        ..office()
    };
    add_user(&mut n, sw, "1001", "pw-1001", settings);
    let a = n.ua(ALICE, "1001");
    let b = n.ua(BOB, "bob");
    n.agent(a).credentials = Some(("1001".into(), "pw-1001".into()));
    let c = n.invite(a, "sip:2001@127.0.0.1", SW);
    assert!(n.run_until(secs(5), confirmed(a, c)));
    let st = invite_statuses(&mut n, a, c);
    assert_eq!(st.first(), Some(&401), "challenged first: {st:?}");
    assert_eq!(st.last(), Some(&200), "{st:?}");
    assert_eq!(n.agent(a).call(c).auth_attempts, 1);
    // Bob sees the user's caller ID, whatever Alice's From said.
    let invite = n.agent(b).last().requests[0].clone();
    let from = invite.header(HeaderName::From).unwrap();
    assert!(
        from.starts_with("\"Alice Smith\" <sip:5551001@127.0.0.1:5060>;tag="),
        "{from}"
    );
    hang_up(&mut n, a, c, secs(2));
    n.run_for(secs(1));
    let cdr = one_cdr(&mut n, sw, "");
    assert_eq!(cdr["context"], "office", "{cdr}");
    assert_eq!(cdr["user"], "1001", "{cdr}");
    assert_eq!(cdr["exten"], "2001", "{cdr}");

    // Its context only: 5555 rings in the default context, not in office.
    let f = refused(&mut n, a, "5555");
    assert_eq!(f.last().and_then(Message::status), Some(403));
    // No context of its own: the default context, CALLER its user name.
    add_user(&mut n, sw, "1002", "pw-1002", Credentials::default());
    let d = n.ua("127.0.0.1:5062", "1002");
    n.agent(d).credentials = Some(("1002".into(), "pw-1002".into()));
    let c = n.invite(d, "sip:5555@127.0.0.1", SW);
    assert!(n.run_until(secs(2), |n| invite_statuses(n, d, c).contains(&180)));
    n.cancel(d, c);
    assert!(n.run_until(secs(2), ended(d, c)));
    n.run_for(secs(1));
    let cdrs = n.sw(sw).cdrs();
    let cdr = cdrs.last().unwrap();
    assert_eq!(
        (&cdr["context"], &cdr["user"]),
        (&"default".into(), &"1002".into()),
        "{cdr}"
    );
}

#[test]
fn an_unknown_user_a_wrong_password_and_a_forbidden_destination_get_the_same_403() {
    let mut n = Net::new(43);
    let sw = switch_trusting(&mut n, "", 1);
    add_user(&mut n, sw, "1001", "right", office());
    let only_9 = Credentials {
        allow: vec!["^9".into()],
        ..Credentials::default()
    };
    add_user(&mut n, sw, "1003", "pw-1003", only_9);
    let b = n.ua(BOB, "bob");
    let mut cases = Vec::new();
    for (i, (user, password, exten, what)) in [
        ("1001", "wrong", "2001", "wrong password"),
        ("1999", "whatever", "2001", "unknown user"),
        ("1001", "right", "5555", "not in its context"),
        ("1003", "pw-1003", "2001", "not in its allow patterns"),
    ]
    .into_iter()
    .enumerate()
    {
        let ua = n.ua(&format!("127.0.0.1:{}", 5070 + i), user);
        n.agent(ua).credentials = Some((user.into(), password.into()));
        let f = refused(&mut n, ua, exten);
        let st: Vec<_> = f.iter().filter_map(Message::status).collect();
        assert_eq!(st, [401, 403], "{what}: challenged, then refused");
        cases.push((what, shape(&f[1])));
    }
    for (what, s) in &cases[1..] {
        assert_eq!(s, &cases[0].1, "{what} answered as a {}", cases[0].0);
    }
    assert!(n.agent(b).calls.is_empty(), "nothing reached Bob");
    assert!(n.sw(sw).cdrs().is_empty());
    // The failed digests are security events (the ban logic's input); the forbidden
    // destinations are an operator's business only.
    let logs = n.sw(sw).logs();
    let security: Vec<_> = logs.iter().filter(|l| l.starts_with("security:")).collect();
    assert_eq!(
        security,
        [
            "security: auth_failed source=127.0.0.1 user=\"1001\" reason=\"wrong password\"",
            "security: auth_failed source=127.0.0.1 user=\"1999\" reason=\"wrong password\"",
        ],
        "{logs:?}"
    );
    assert!(
        logs.iter()
            .any(|l| l.contains("user 1003 may not call \"2001\"")),
        "{logs:?}"
    );
}

#[test]
fn a_trusted_peer_is_not_challenged_and_calls_in_the_default_context() {
    let mut n = Net::new(44);
    let sw = switch_trusting(&mut n, "\"127.0.0.1\"", 1);
    let a = n.ua(ALICE, "alice");
    let b = n.ua(BOB, "bob");
    let c = n.invite(a, "sip:2001@127.0.0.1", SW);
    assert!(n.run_until(secs(5), confirmed(a, c)));
    let st = invite_statuses(&mut n, a, c);
    assert!(!st.contains(&401), "{st:?}");
    // Its From goes on as it came.
    let from = n.agent(b).last().requests[0]
        .header(HeaderName::From)
        .unwrap()
        .to_string();
    assert!(
        from.starts_with("<sip:alice@127.0.0.1:5061>;tag="),
        "{from}"
    );
    hang_up(&mut n, a, c, secs(2));
    n.run_for(secs(1));
    let cdr = one_cdr(&mut n, sw, "");
    assert_eq!(cdr["context"], "default", "{cdr}");
    assert!(cdr["user"].is_null(), "{cdr}");
    // Nothing in its context: 404, as before (a trusted peer may know what exists).
    let f = refused(&mut n, a, "0");
    assert_eq!(f[0].status(), Some(404));
}

#[test]
fn the_public_context_reaches_the_echo_without_credentials() {
    let mut n = Net::new(45);
    let sw = switch_trusting(&mut n, "", 1);
    let a = n.ua(ALICE, "alice");
    let c = n.invite(a, "sip:9196@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, c)));
    assert_eq!(invite_statuses(&mut n, a, c), [100, 200]);
    hang_up(&mut n, a, c, secs(2));
    n.run_for(secs(1));
    let cdr = one_cdr(&mut n, sw, "");
    assert_eq!(
        (&cdr["context"], &cdr["exten"]),
        (&"public".into(), &"9196".into())
    );
    assert!(cdr["user"].is_null(), "{cdr}");
}

/// The limit holds across workers: the user's two phones' calls are on different workers (by
/// their Call-IDs), and a third call on either is busy.
#[test]
fn a_users_max_calls_is_enforced_across_workers() {
    let mut n = Net::new(46);
    let sw = switch_trusting(&mut n, "", 2);
    let two = Credentials {
        max_calls: 2,
        ..Credentials::default()
    };
    add_user(&mut n, sw, "1001", "pw", two);
    // An agent's first Call-ID is call-NAME1@ua: two phones whose first calls hash apart.
    let worker = |name: &str| switch::owner(&format!("call-{name}1@ua"), 2);
    let desk = n.ua(ALICE, "desk");
    let other = ["mobile", "tablet", "softphone", "laptop", "car"]
        .into_iter()
        .find(|name| worker(name) != worker("desk"))
        .unwrap();
    let mobile = n.ua("127.0.0.1:5062", other);
    for ua in [desk, mobile] {
        n.agent(ua).credentials = Some(("1001".into(), "pw".into()));
    }
    let ringing = |n: &mut Net, ua: Id, c: usize| invite_statuses(n, ua, c).contains(&180);
    let first = n.invite(desk, "sip:5555@127.0.0.1", SW);
    let second = n.invite(mobile, "sip:5555@127.0.0.1", SW);
    assert!(n.run_until(secs(2), |n| ringing(n, desk, first)
        && ringing(n, mobile, second)));
    let per_worker: Vec<usize> = n.sw(sw).workers.iter().map(|w| w.active_calls()).collect();
    assert_eq!(per_worker, [1, 1], "one call on each worker");
    for ua in [desk, mobile] {
        let f = refused(&mut n, ua, "5555");
        assert_eq!(
            f.last().and_then(Message::status),
            Some(486),
            "a third call is busy"
        );
    }
    n.cancel(desk, first);
    assert!(n.run_until(secs(2), ended(desk, first)));
    let again = n.invite(mobile, "sip:5555@127.0.0.1", SW);
    assert!(
        n.run_until(secs(2), |n| ringing(n, mobile, again)),
        "a call was freed"
    );
    assert_eq!(n.sw(sw).shared.slots.user_calls("1001"), 2);
    n.cancel(mobile, second);
    n.cancel(mobile, again);
    assert!(n.run_until(secs(2), |n| n.sw(sw).active_calls() == 0));
    assert_eq!(
        n.sw(sw).shared.slots.user_calls("1001"),
        0,
        "every call given back"
    );
}

/// The built-in configuration: a stranger hears the demo extensions without a password and is
/// challenged for everything else; the Server header names no version.
#[test]
fn the_default_configuration_lets_strangers_reach_the_demo_only() {
    let mut n = Net::new(47);
    let sw = n.switch(DEFAULT_TOML, &[SW], 1);
    n.sw(sw).shared.store.add_user("1001", "strowger", "pw");
    let a = n.ua(ALICE, "alice");
    let c = n.invite(a, "sip:44444@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, c)));
    let ok = last_response(&mut n, a, c, "INVITE");
    assert_eq!(ok.header(HeaderName::Server), Some("strowger"));
    hang_up(&mut n, a, c, secs(2));
    for exten in ["1001", "1002", "2000", "12345"] {
        let f = refused(&mut n, a, exten);
        assert_eq!(f[0].status(), Some(401), "{exten}");
        assert_eq!(f[0].header(HeaderName::Server), Some("strowger"));
    }
    let options = n.sent(addr(SW), addr(ALICE), "200");
    assert!(options.iter().all(|t| {
        let m = t.msg().unwrap();
        m.header(HeaderName::Server) == Some("strowger")
    }));
    assert!(n
        .agent(a)
        .received
        .iter()
        .all(|(_, _, m)| m.method() != Some(&Method::Invite)));
}

/// An INVITE from Alice for 5555 with Call-ID `call_id`, CSeq `cseq` and `auth` (header lines).
fn invite_text(call_id: &str, cseq: u32, auth: &str) -> String {
    let body = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio 6000 RTP/AVP 0\r\n";
    format!(
        "INVITE sip:5555@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP {ALICE};branch=z9hG4bK-{call_id}-{cseq}\r\n\
         From: <sip:1001@strowger>;tag=a1\r\nTo: <sip:5555@127.0.0.1>\r\nCall-ID: {call_id}\r\n\
         CSeq: {cseq} INVITE\r\nContact: <sip:1001@{ALICE}>\r\nMax-Forwards: 70\r\n{auth}\
         Content-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// What `node` sent since the last call, parsed.
fn sent(node: &mut Node) -> Vec<Message> {
    node.drain()
        .into_iter()
        .filter(|p| !p.media)
        .map(|p| Message::parse(&p.bytes, true).unwrap())
        .collect()
}

/// Worker 0 of a two-worker switch that trusts nobody, with user 1001 (password "pw").
fn worker_zero() -> (Node, std::time::Instant) {
    let shared = Shared::new(&(config("[security]\ntrusted = []\n") + CONTEXTS));
    shared.store.add_user("1001", "strowger", "pw");
    let node = Node::new(&shared, &[addr(SW)], 0, 2, 20002);
    (node, std::time::Instant::now())
}

/// The Authorization header line answering `challenge` as 1001 with password "pw".
fn answer(challenge: &sip::auth::Challenge) -> String {
    let v = sip::auth::Authorization::build(
        challenge,
        "1001",
        "pw",
        "INVITE",
        "sip:5555@127.0.0.1",
        1,
        "cn",
    );
    format!("Authorization: {v}\r\n")
}

/// A call lives on its Call-ID's worker, which counts the uses of the nonces it issued: a digest
/// answer to another worker's nonce (a phone reusing the last call's) is challenged again with
/// stale=true and a nonce of this worker's, which then lets the call in.
#[test]
fn a_nonce_another_worker_issued_is_challenged_again_as_stale() {
    let (mut node, now) = worker_zero();
    let deliver = |node: &mut Node, text: &str| {
        node.deliver_sip(text.as_bytes(), addr(ALICE), addr(SW), false, now);
        sent(node)
    };
    let out = deliver(&mut node, &invite_text("c1", 1, ""));
    let ask = out.iter().find(|m| m.status() == Some(401)).expect("a 401");
    let ours =
        sip::auth::Challenge::parse(ask.header(HeaderName::WwwAuthenticate).unwrap()).unwrap();
    assert_eq!(sip::auth::Nonces::issuer(&ours.nonce), Some(0));

    // Worker 1's nonce (same secret: the MAC is good), answered with the right password.
    let mut worker1 = sip::auth::Nonces::new([7; 32], 300, 16).with_issuer(1);
    // Nonces are bound to the address they were sent to (as an IPv6 or IPv4-mapped address).
    let bind = match addr(ALICE).ip() {
        std::net::IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        std::net::IpAddr::V6(a) => a.octets(),
    };
    let theirs = sip::auth::Challenge {
        nonce: worker1.issue(1_800_000_000, &bind),
        ..ours.clone()
    };
    let out = deliver(&mut node, &invite_text("c1", 2, &answer(&theirs)));
    let statuses: Vec<_> = out.iter().filter_map(Message::status).collect();
    assert_eq!(statuses, [401], "{out:?}");
    let again = sip::auth::Challenge::parse(out[0].header(HeaderName::WwwAuthenticate).unwrap());
    let again = again.unwrap();
    assert!(
        again.stale,
        "stale=true: the phone retries without asking its user"
    );
    assert_eq!(sip::auth::Nonces::issuer(&again.nonce), Some(0));

    let out = deliver(&mut node, &invite_text("c1", 3, &answer(&again)));
    let statuses: Vec<_> = out.iter().filter_map(Message::status).collect();
    assert_eq!(statuses, [100, 180], "in: 5555 rings");
    assert!(node.logs().is_empty(), "{:?}", node.logs());
}

/// A CANCEL while the caller's credentials are fetched: 200 to it, 487 to the INVITE at once,
/// and the credentials that come later start nothing.
#[test]
fn a_cancel_while_the_credentials_are_fetched_ends_the_invite() {
    let (mut node, now) = worker_zero();
    let deliver = |node: &mut Node, text: &str| {
        node.deliver_sip(text.as_bytes(), addr(ALICE), addr(SW), false, now);
        sent(node)
    };
    let out = deliver(&mut node, &invite_text("c2", 1, ""));
    let challenge =
        sip::auth::Challenge::parse(out[0].header(HeaderName::WwwAuthenticate).unwrap()).unwrap();
    node.hold_store();
    let invite = invite_text("c2", 2, &answer(&challenge));
    let out = deliver(&mut node, &invite);
    let statuses: Vec<_> = out.iter().filter_map(Message::status).collect();
    assert_eq!(statuses, [100], "Trying while the store is asked");
    let cancel = format!(
        "CANCEL sip:5555@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP {ALICE};branch=z9hG4bK-c2-2\r\n\
         From: <sip:1001@strowger>;tag=a1\r\nTo: <sip:5555@127.0.0.1>\r\nCall-ID: c2\r\n\
         CSeq: 2 CANCEL\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n"
    );
    let out = deliver(&mut node, &cancel);
    let answers: Vec<_> = out
        .iter()
        .map(|m| (m.status(), m.header(HeaderName::CSeq).unwrap().to_string()))
        .collect();
    assert_eq!(
        answers,
        [
            (Some(200), "2 CANCEL".to_string()),
            (Some(487), "2 INVITE".to_string())
        ]
    );
    node.release_store();
    assert!(sent(&mut node).is_empty(), "nothing more");
    assert_eq!(node.active_calls(), 0);
}

/// A stranger's INVITE is challenged without a transaction, as a REGISTER is: one 401, never
/// retransmitted while no ACK comes (a flood's INVITEs leave nothing behind), and the same
/// INVITE sent again gets a 401 again.
#[test]
fn a_strangers_invite_is_challenged_statelessly() {
    let (mut node, now) = worker_zero();
    node.deliver_sip(
        invite_text("s1", 1, "").as_bytes(),
        addr(ALICE),
        addr(SW),
        false,
        now,
    );
    let first: Vec<_> = sent(&mut node).iter().filter_map(Message::status).collect();
    assert_eq!(first, [401]);
    for s in 1..=40 {
        node.advance(now + std::time::Duration::from_secs(s));
    }
    assert!(sent(&mut node).is_empty(), "no retransmitted 401");
    assert_eq!(node.next_deadline(), None, "no transaction left");
    let later = now + std::time::Duration::from_secs(41);
    node.deliver_sip(
        invite_text("s1", 1, "").as_bytes(),
        addr(ALICE),
        addr(SW),
        false,
        later,
    );
    let again: Vec<_> = sent(&mut node).iter().filter_map(Message::status).collect();
    assert_eq!(again, [401]);
}
