//! SIP trunks on the simulated network (tests/net): a scripted agent plays the provider — a
//! registrar that challenges REGISTER (401) and a proxy that challenges INVITE (407) — and
//! strowger registers to it, calls out through it, takes its calls in by DID, and goes on to
//! the provider's next server (from the DNS) when one does not answer.

use crate::net;

use net::*;
use sip::transaction::{Peer, Transport};
use sip::{HeaderName, Message, Method};

/// The provider's live server, and one the DNS lists where nothing answers.
const PROVIDER: &str = "127.0.0.5:5060";
const DEAD: &str = "127.0.0.6:5060";

/// A one-worker switch with trunk "provider" at `host` (`extra`: more keys of that trunk).
/// Context default may dial out through it (0… numbers, and 8… with the trunk's name in a
/// variable); context lobby (reached by 7) lists no trunk; calls from the provider enter
/// from-provider, where 4930555 answers with an echo.
fn switch(n: &mut Net, host: &str, extra: &str) -> Id {
    switch_with(n, host, extra, 1)
}

/// `switch` with `workers` workers.
fn switch_with(n: &mut Net, host: &str, extra: &str, workers: usize) -> Id {
    n.switch(&config(host, extra), &[SW], workers)
}

/// The configuration `switch` gives a switch.
fn config(host: &str, extra: &str) -> String {
    format!(
        r#"
[rtp]
media_timeout_s = 0
[sip]
t1_ms = 100
# The office's phones (Alice) are trusted peers: their calls need no password here.
[security]
trusted = ["127.0.0.1"]
[[trunks]]
name = "provider"
host = "{host}"
username = "4930100"
password = "trunk-secret"
did_context = "from-provider"
strip = 1
prefix = "+49"
{extra}
[dialplan]
default_context = "default"
[dialplan.contexts.default]
trunks = ["provider"]
[[dialplan.contexts.default.rules]]
regex = "^0\\d+$"
steps = ["bridge trunk/provider/${{EXTEN}} timeout=30"]
[[dialplan.contexts.default.rules]]
regex = "^8\\d+$"
steps = ["set t=provider", "bridge trunk/${{t}}/${{EXTEN}} timeout=30"]
[[dialplan.contexts.default.rules]]
exten = "7"
steps = ["goto lobby"]
[[dialplan.contexts.lobby.rules]]
exten = "7"
steps = ["set t=provider", "bridge trunk/${{t}}/0301234 timeout=30"]
[[dialplan.contexts.from-provider.rules]]
exten = "4930555"
steps = ["answer", "echo"]
[[dialplan.contexts.from-provider.rules]]
prefix = ""
steps = ["hangup unallocated_number"]
"#
    )
}

/// The provider: challenges REGISTER and INVITE for the account 4930100 and answers calls.
fn provider(n: &mut Net, at: &str) -> Id {
    let p = n.ua(at, "provider");
    let realm = "provider.test".to_string();
    n.agent(p).auth = Some((realm, "4930100".into(), "trunk-secret".into()));
    n.agent(p).register_expires = 120;
    p
}

fn peer(s: &str) -> Peer {
    Peer {
        transport: Transport::Udp,
        addr: addr(s),
    }
}

/// The requests of `method` agent `ua` received, in order.
fn got(n: &mut Net, ua: Id, method: &Method) -> Vec<Message> {
    n.agent(ua)
        .requests_of(method)
        .into_iter()
        .cloned()
        .collect()
}

fn cseq(m: &Message) -> String {
    m.header(HeaderName::CSeq).unwrap_or_default().to_string()
}

fn branch(m: &Message) -> String {
    let via = m.header(HeaderName::Via).unwrap_or_default();
    via.split("branch=")
        .nth(1)
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn registers_with_digest_and_refreshes_before_expiry() {
    let mut n = Net::new(1);
    let p = provider(&mut n, PROVIDER);
    let sw = switch(&mut n, "127.0.0.5", "register = true\nexpires = 120");
    assert!(n.run_until(secs(5), |n| n.agent(p).bindings.len() == 1));
    n.run_for(ms(50));
    assert_eq!(n.agent(p).bindings, ["sip:4930100@127.0.0.1:5060"]);
    let regs = got(&mut n, p, &Method::Register);
    assert_eq!(regs.len(), 2, "{regs:?}");
    assert!(regs[0].header(HeaderName::Authorization).is_none());
    assert!(regs[1].header(HeaderName::Authorization).is_some());
    assert_eq!(n.agent(p).challenged, ["REGISTER"]);
    // One Call-ID, CSeq up by one; To and From name the account at the trunk's domain.
    assert_eq!(
        regs[0].header(HeaderName::CallId),
        regs[1].header(HeaderName::CallId)
    );
    assert_eq!(
        (cseq(&regs[0]), cseq(&regs[1])),
        ("1 REGISTER".into(), "2 REGISTER".into())
    );
    assert_eq!(regs[0].request_uri(), Some("sip:127.0.0.5"));
    assert_eq!(
        regs[1].header(HeaderName::To),
        Some("<sip:4930100@127.0.0.5>")
    );
    assert!(
        n.sw(sw)
            .logs()
            .iter()
            .any(|l| l.contains("trunk provider: registered at 127.0.0.5:5060 for 120 s")),
        "{:?}",
        n.sw(sw).logs()
    );
    // Granted 120 s: refreshed at 60 s (challenged again), so it never lapses.
    n.run_for(secs(50));
    assert_eq!(got(&mut n, p, &Method::Register).len(), 2);
    n.run_for(secs(15));
    let regs = got(&mut n, p, &Method::Register);
    assert_eq!(regs.len(), 4, "refreshed once, with a challenge");
    assert_eq!(cseq(&regs[3]), "4 REGISTER");
    assert_eq!(
        regs[3].header(HeaderName::CallId),
        regs[0].header(HeaderName::CallId)
    );
    // Shutdown ends the registration.
    n.shutdown(sw);
    assert!(n.run_until(secs(5), |n| n.agent(p).bindings.is_empty()));
}

#[test]
fn a_reload_that_changes_a_trunk_registers_it_again_with_the_new_settings() {
    let mut n = Net::new(2);
    let p = provider(&mut n, PROVIDER);
    n.agent(p).register_expires = 3600;
    let sw = switch(&mut n, "127.0.0.5", "register = true\nexpires = 120");
    assert!(n.run_until(secs(5), |n| n.agent(p).bindings.len() == 1));
    n.run_for(ms(50)); // the 200 reaches strowger
    let before = got(&mut n, p, &Method::Register).len();

    n.reload(sw, &config("127.0.0.5", "register = true\nexpires = 900"));
    n.run_for(secs(5));
    let regs = got(&mut n, p, &Method::Register);
    let expires = |m: &Message| {
        m.header(HeaderName::Expires)
            .unwrap_or_default()
            .to_string()
    };
    let after: Vec<String> = regs[before..].iter().map(expires).collect();
    // Unregistered with the old registration (Expires 0), registered anew asking for 900 s.
    assert_eq!(after.first().map(String::as_str), Some("0"), "{after:?}");
    assert_eq!(after.last().map(String::as_str), Some("900"), "{after:?}");
    assert_eq!(n.agent(p).bindings, ["sip:4930100@127.0.0.1:5060"]);
    // A reload that leaves the trunk as it is sends nothing.
    let count = got(&mut n, p, &Method::Register).len();
    n.reload(sw, &config("127.0.0.5", "register = true\nexpires = 900"));
    n.run_for(secs(5));
    assert_eq!(got(&mut n, p, &Method::Register).len(), count);
}

#[test]
fn calls_out_answer_the_407_with_the_trunks_credentials() {
    let mut n = Net::new(2);
    let p = provider(&mut n, PROVIDER);
    let sw = switch(
        &mut n,
        "127.0.0.5",
        "caller_id = \"4930100\"\ncodecs = [\"PCMA\"]",
    );
    let a = n.ua(ALICE, "alice");
    let c = n.invite(a, "sip:0301234@127.0.0.1", SW);
    assert!(
        n.run_until(secs(5), confirmed(a, c)),
        "{:?}",
        invite_statuses(&mut n, a, c)
    );
    let invites = got(&mut n, p, &Method::Invite);
    assert_eq!(invites.len(), 2, "{invites:?}");
    // The number rewritten (strip 1, prefix +49), caller-ID the trunk's.
    assert_eq!(invites[0].request_uri(), Some("sip:+49301234@127.0.0.5"));
    assert!(invites[0]
        .header(HeaderName::From)
        .unwrap()
        .starts_with("<sip:4930100@127.0.0.5>;tag="));
    // The 407 was ACKed by the transaction layer; the answer is a new transaction of the same
    // call: same Call-ID and From tag, CSeq + 1, a new branch, the same offer.
    let acks = got(&mut n, p, &Method::Ack);
    assert_eq!(cseq(&acks[0]), "1 ACK");
    assert!(invites[0].header(HeaderName::ProxyAuthorization).is_none());
    let auth = invites[1]
        .header(HeaderName::ProxyAuthorization)
        .expect("credentials");
    let auth = sip::auth::Authorization::parse(auth).unwrap();
    assert_eq!(
        (auth.username.as_str(), auth.uri.as_str()),
        ("4930100", "sip:+49301234@127.0.0.5")
    );
    assert_eq!(
        invites[0].header(HeaderName::CallId),
        invites[1].header(HeaderName::CallId)
    );
    assert_eq!(
        invites[0].header(HeaderName::From),
        invites[1].header(HeaderName::From)
    );
    assert_eq!(
        (cseq(&invites[0]), cseq(&invites[1])),
        ("1 INVITE".into(), "2 INVITE".into())
    );
    assert_ne!(branch(&invites[0]), branch(&invites[1]));
    assert_eq!(invites[0].body(), invites[1].body());
    // The trunk's codecs alone are offered; the ACK of the 2xx carries the credentials too.
    let offer = body(&invites[0]);
    assert!(
        offer.contains("m=audio ") && offer.contains(" RTP/AVP 8 101\r\n"),
        "{offer}"
    );
    let acks = got(&mut n, p, &Method::Ack);
    assert_eq!(acks.len(), 2, "{acks:?}");
    assert_eq!(cseq(&acks[1]), "2 ACK");
    assert_eq!(
        acks[1].header(HeaderName::ProxyAuthorization),
        invites[1].header(HeaderName::ProxyAuthorization)
    );
    assert_eq!(n.agent(p).calls.len(), 1, "the provider took one call");
    hang_up(&mut n, a, c, secs(5));
    assert!(n.run_until(secs(2), |n| n.agent(p).last().state == State::Ended));
    let cdr = one_cdr(&mut n, sw, "");
    assert_eq!(cdr["trunk"], "provider");
    // The trunk's name from a variable works the same.
    let c = n.invite(a, "sip:8301234@127.0.0.1", SW);
    assert!(n.run_until(secs(5), confirmed(a, c)));
    hang_up(&mut n, a, c, secs(5));
}

#[test]
fn dial_out_only_from_contexts_that_list_the_trunk() {
    let mut n = Net::new(3);
    let p = provider(&mut n, PROVIDER);
    let sw = switch(&mut n, "127.0.0.5", "");
    let a = n.ua(ALICE, "alice");
    // 7 goes to context lobby, whose trunks list is empty: refused before any INVITE leaves.
    let c = n.invite(a, "sip:7@127.0.0.1", SW);
    assert!(n.run_until(secs(5), ended(a, c)));
    assert_eq!(invite_statuses(&mut n, a, c).last(), Some(&403));
    assert!(got(&mut n, p, &Method::Invite).is_empty());
    assert!(n
        .sw(sw)
        .logs()
        .iter()
        .any(|l| l.contains("context \"lobby\" may not dial out through trunk \"provider\"")));
}

#[test]
fn calls_in_enter_the_did_context_by_source_or_registration() {
    let mut n = Net::new(4);
    let p = provider(&mut n, PROVIDER);
    let sw = switch(&mut n, "127.0.0.5", "register = true");
    assert!(n.run_until(secs(5), |n| n.agent(p).bindings.len() == 1));
    // As after a registration: the Request-URI is our contact, the DID in To.
    let contact = n.agent(p).bindings[0].clone();
    let c = n.invite_with(p, &contact, SW, &[("To", "<sip:4930555@provider.test>")]);
    assert!(
        n.run_until(secs(5), confirmed(p, c)),
        "{:?}",
        invite_statuses(&mut n, p, c)
    );
    hang_up(&mut n, p, c, secs(5));
    // The DID in the Request-URI; another DID of the trunk has no rule: 404.
    let c = n.invite(p, "sip:4930555@127.0.0.1", SW);
    assert!(n.run_until(secs(5), confirmed(p, c)));
    hang_up(&mut n, p, c, secs(5));
    let c = n.invite(p, "sip:4930999@127.0.0.1", SW);
    assert!(n.run_until(secs(5), ended(p, c)));
    assert_eq!(invite_statuses(&mut n, p, c).last(), Some(&404));
    let cdrs = n.sw(sw).cdrs();
    assert_eq!(cdrs[0]["context"], "from-provider");
    assert_eq!(cdrs[0]["exten"], "4930555");
    assert_eq!(cdrs[0]["trunk"], "provider");
    // Anyone else dialling the DID is in the default context, which has no such rule.
    let a = n.ua(ALICE, "alice");
    let c = n.invite(a, "sip:4930555@127.0.0.1", SW);
    assert!(n.run_until(secs(5), ended(a, c)));
    assert_eq!(invite_statuses(&mut n, a, c).last(), Some(&404));
}

#[test]
fn calls_in_by_acl_with_did_rewriting() {
    let mut n = Net::new(5);
    // The provider's calls come from 127.0.0.7 (not its SIP server): matched by the acl.
    let other = n.ua("127.0.0.7:5060", "gateway");
    let _sw = switch(
        &mut n,
        "127.0.0.5",
        "acl = [\"127.0.0.7\"]\ndid_strip = 2\ndid_prefix = \"49\"",
    );
    let c = n.invite(other, "sip:0030555@127.0.0.1", SW);
    assert!(
        n.run_until(secs(5), confirmed(other, c)),
        "{:?}",
        invite_statuses(&mut n, other, c)
    );
    hang_up(&mut n, other, c, secs(5));
}

#[test]
fn the_next_srv_target_takes_over_when_the_first_does_not_answer() {
    let mut n = Net::new(6);
    n.dns
        .insert("provider.test".into(), vec![peer(DEAD), peer(PROVIDER)]);
    let p = provider(&mut n, PROVIDER);
    let sw = switch(&mut n, "provider.test", "register = true");
    // The first REGISTER goes to the dead server; after timer F (64 × T1 = 6.4 s) the second.
    assert!(n.run_until(secs(10), |n| n.agent(p).bindings.len() == 1));
    assert!(n.elapsed() >= ms(6400), "{:?}", n.elapsed());
    let lost: Vec<_> = n
        .undeliverable
        .iter()
        .filter(|pk| pk.to == addr(DEAD))
        .collect();
    assert!(!lost.is_empty());
    assert!(n
        .sw(sw)
        .node()
        .lookups()
        .contains(&"provider.test".to_string()));
    let regs = got(&mut n, p, &Method::Register);
    assert_eq!(regs[0].request_uri(), Some("sip:provider.test"));
    assert!(n.sw(sw).logs().iter().any(|l| l.contains(
        "registration at 127.0.0.6:5060 failed: no answer; trying the provider's next server"
    )));
    // A call then goes straight to the server that answers (the dead one is tried last).
    let sent_to_dead = n.undeliverable.len();
    let a = n.ua(ALICE, "alice");
    let c = n.invite(a, "sip:0301234@127.0.0.1", SW);
    assert!(n.run_until(secs(3), confirmed(a, c)));
    assert_eq!(
        got(&mut n, p, &Method::Invite)[0].request_uri(),
        Some("sip:+49301234@provider.test")
    );
    assert_eq!(
        n.undeliverable.len(),
        sent_to_dead,
        "nothing more to the dead server"
    );
    hang_up(&mut n, a, c, secs(5));
}

#[test]
fn a_call_fails_over_when_a_server_stays_silent_and_gives_up_when_none_is_left() {
    let mut n = Net::new(7);
    n.dns
        .insert("provider.test".into(), vec![peer(DEAD), peer(PROVIDER)]);
    let _p = provider(&mut n, PROVIDER);
    let sw = switch(&mut n, "provider.test", "");
    let a = n.ua(ALICE, "alice");
    let c = n.invite(a, "sip:0301234@127.0.0.1", SW);
    // Not even a 100 Trying within 8 × T1 (0.8 s): the next server, long before timer B.
    assert!(n.run_until(secs(3), confirmed(a, c)));
    assert!(n.elapsed() >= ms(800), "{:?}", n.elapsed());
    assert!(
        n.sw(sw)
            .logs()
            .iter()
            .any(|l| l.contains("127.0.0.6:5060 did not answer; trying 127.0.0.5:5060")),
        "{:?}",
        n.sw(sw).logs()
    );
    hang_up(&mut n, a, c, secs(5));
    // Only dead servers: the caller gets 408 once the last one timed out (timer B).
    let mut n = Net::new(8);
    n.dns.insert("provider.test".into(), vec![peer(DEAD)]);
    let _sw = switch(&mut n, "provider.test", "");
    let a = n.ua(ALICE, "alice");
    let c = n.invite(a, "sip:0301234@127.0.0.1", SW);
    assert!(n.run_until(secs(10), ended(a, c)));
    assert!(n.elapsed() >= ms(6400));
    assert_eq!(invite_statuses(&mut n, a, c).last(), Some(&408));
    // A host that does not resolve: 503 at once.
    let mut n = Net::new(9);
    let sw = switch(&mut n, "nowhere.test", "");
    let a = n.ua(ALICE, "alice");
    let c = n.invite(a, "sip:0301234@127.0.0.1", SW);
    assert!(n.run_until(secs(2), ended(a, c)));
    assert_eq!(invite_statuses(&mut n, a, c).last(), Some(&503));
    assert!(n
        .sw(sw)
        .logs()
        .iter()
        .any(|l| l.contains("trunk provider: cannot resolve nowhere.test")));
}

#[test]
fn a_slow_server_that_answers_after_the_failover_is_hung_up_on() {
    let mut n = Net::new(10);
    n.dns
        .insert("provider.test".into(), vec![peer(DEAD), peer(PROVIDER)]);
    let _p = provider(&mut n, PROVIDER);
    // The first server answers, but 2 s late (1 s each way): after the failover.
    let slow = n.ua(DEAD, "slow");
    let sw = switch(&mut n, "provider.test", "");
    let slow_link = Link {
        delay: secs(1),
        ..Link::default()
    };
    n.link(sw, slow, slow_link);
    let a = n.ua(ALICE, "alice");
    let c = n.invite(a, "sip:0301234@127.0.0.1", SW);
    assert!(n.run_until(secs(3), confirmed(a, c)));
    // Its late 200 is ACKed and its call ended with a BYE; the caller stays with the other.
    assert!(n.run_until(secs(6), |n| n
        .agent(slow)
        .calls
        .last()
        .is_some_and(|c| c.state == State::Ended)));
    let slow_got: Vec<String> = n
        .agent(slow)
        .received
        .iter()
        .map(|(_, _, m)| m.method().map_or(String::new(), ToString::to_string))
        .collect();
    assert!(
        slow_got.iter().any(|m| m == "ACK") && slow_got.iter().any(|m| m == "BYE"),
        "{slow_got:?}"
    );
    assert_eq!(n.agent(a).call(c).state, State::Confirmed);
    hang_up(&mut n, a, c, secs(5));
    assert_eq!(n.sw(sw).active_calls(), 0);
}

#[test]
fn every_worker_skips_the_server_the_registration_found_dead() {
    // Four workers: one registers (it finds the first server dead after timer F); calls
    // placed on any worker then go straight to the second.
    let mut n = Net::new(11);
    n.dns
        .insert("provider.test".into(), vec![peer(DEAD), peer(PROVIDER)]);
    let p = provider(&mut n, PROVIDER);
    let sw = switch_with(&mut n, "provider.test", "register = true", 4);
    assert!(n.run_until(secs(10), |n| n.agent(p).bindings.len() == 1));
    let dead_before = n.undeliverable.len();
    let a = n.ua(ALICE, "alice");
    for i in 0..6 {
        let c = n.invite(a, &format!("sip:030123{i}@127.0.0.1"), SW);
        assert!(n.run_until(secs(2), confirmed(a, c)), "call {i}");
        hang_up(&mut n, a, c, secs(5));
    }
    assert_eq!(
        n.undeliverable.len(),
        dead_before,
        "no INVITE went to the dead server"
    );
    assert_eq!(n.sw(sw).cdrs().len(), 6);
}

#[test]
fn an_unreachable_server_is_left_at_once() {
    // The shell reports that the first server cannot be reached (a refused TCP connection):
    // the REGISTER and the call go to the second at once, not after timer F or the silence.
    let mut n = Net::new(12);
    n.dns
        .insert("provider.test".into(), vec![peer(DEAD), peer(PROVIDER)]);
    let p = provider(&mut n, PROVIDER);
    let sw = switch(&mut n, "provider.test", "register = true");
    n.run_for(ms(10));
    n.sw(sw).node().unreachable(peer(DEAD));
    assert!(n.run_until(secs(1), |n| n.agent(p).bindings.len() == 1));
    assert!(n.elapsed() < ms(200), "{:?}", n.elapsed());
    // A call whose server becomes unreachable while it waits goes on too; with no server
    // left, the caller gets 503 at once.
    let mut n = Net::new(13);
    n.dns
        .insert("provider.test".into(), vec![peer(DEAD), peer(PROVIDER)]);
    let _p = provider(&mut n, PROVIDER);
    let sw = switch(&mut n, "provider.test", "");
    let a = n.ua(ALICE, "alice");
    let c = n.invite(a, "sip:0301234@127.0.0.1", SW);
    n.run_for(ms(20));
    n.sw(sw).node().unreachable(peer(DEAD));
    assert!(n.run_until(secs(1), confirmed(a, c)));
    assert!(n.elapsed() < ms(300), "{:?}", n.elapsed());
    hang_up(&mut n, a, c, secs(5));
    let mut n = Net::new(14);
    n.dns.insert("provider.test".into(), vec![peer(DEAD)]);
    let sw = switch(&mut n, "provider.test", "");
    let a = n.ua(ALICE, "alice");
    let c = n.invite(a, "sip:0301234@127.0.0.1", SW);
    n.run_for(ms(20));
    n.sw(sw).node().unreachable(peer(DEAD));
    assert!(n.run_until(secs(1), ended(a, c)));
    assert_eq!(invite_statuses(&mut n, a, c).last(), Some(&503));
}

/// A switch's configuration with registering trunks `(name, host)` (the provider's account on
/// each), all listed by context default: 0… dials out through "provider", 9… through "second";
/// calls in enter from-provider, where 4930555 answers with an echo.
fn trunks_config(trunks: &[(&str, &str)]) -> String {
    let mut toml = String::from(
        "[rtp]\nmedia_timeout_s = 0\n[sip]\nt1_ms = 100\n[security]\ntrusted = [\"127.0.0.1\"]\n",
    );
    for (name, host) in trunks {
        toml += &format!(
            "[[trunks]]\nname = \"{name}\"\nhost = \"{host}\"\nusername = \"4930100\"\n\
             password = \"trunk-secret\"\nregister = true\nexpires = 120\ndid_context = \"from-provider\"\n"
        );
    }
    let names: Vec<String> = trunks.iter().map(|(n, _)| format!("{n:?}")).collect();
    toml + &format!(
        r#"
[dialplan]
default_context = "default"
[dialplan.contexts.default]
trunks = [{}]
[[dialplan.contexts.default.rules]]
regex = "^0\\d+$"
steps = ["set t=provider", "bridge trunk/${{t}}/${{EXTEN}} timeout=30"]
[[dialplan.contexts.default.rules]]
regex = "^9\\d+$"
steps = ["set t=second", "bridge trunk/${{t}}/${{EXTEN}} timeout=30"]
[[dialplan.contexts.from-provider.rules]]
exten = "4930555"
steps = ["answer", "echo"]
"#,
        names.join(", ")
    )
}

#[test]
fn a_reload_removes_a_trunk_whose_call_goes_on_and_adds_one_that_registers_and_carries_calls() {
    let mut n = Net::new(21);
    let p = provider(&mut n, PROVIDER);
    let second = provider(&mut n, "127.0.0.7:5060");
    let sw = n.switch(&trunks_config(&[("provider", "127.0.0.5")]), &[SW], 1);
    assert!(n.run_until(secs(5), |n| n.agent(p).bindings.len() == 1));
    let a = n.ua(ALICE, "alice");
    let up = n.invite(a, "sip:0301234@127.0.0.1", SW);
    assert!(n.run_until(secs(5), confirmed(a, up)));

    n.reload(sw, &trunks_config(&[("second", "127.0.0.7")]));
    // The removed trunk is unregistered (its challenge answered), the added one registers.
    assert!(n.run_until(secs(5), |n| n.agent(p).bindings.is_empty()
        && n.agent(second).bindings.len() == 1));
    let expires: Vec<String> = got(&mut n, p, &Method::Register)
        .iter()
        .map(|m| {
            m.header(HeaderName::Expires)
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert_eq!(
        expires,
        ["120", "120", "0", "0"],
        "the un-REGISTER answers its 401"
    );
    // No refresh of the removed trunk follows.
    n.run_for(secs(120));
    assert_eq!(got(&mut n, p, &Method::Register).len(), 4);
    assert_eq!(
        n.agent(second).bindings.len(),
        1,
        "the added trunk refreshes"
    );
    assert!(got(&mut n, second, &Method::Register).len() >= 4);
    // The call through the removed trunk went on, and ends as calls end.
    assert_eq!(n.agent(a).call(up).state, State::Confirmed);
    hang_up(&mut n, a, up, secs(5));
    assert!(n.run_until(secs(2), |n| n.agent(p).last().state == State::Ended));
    // New calls: through the added trunk; the removed one is gone (404).
    let c = n.invite(a, "sip:9301234@127.0.0.1", SW);
    assert!(
        n.run_until(secs(5), confirmed(a, c)),
        "{:?}",
        invite_statuses(&mut n, a, c)
    );
    assert_eq!(n.agent(second).calls.len(), 1);
    hang_up(&mut n, a, c, secs(5));
    let c = n.invite(a, "sip:0301234@127.0.0.1", SW);
    assert!(n.run_until(secs(5), ended(a, c)));
    assert_eq!(invite_statuses(&mut n, a, c).last(), Some(&404));
    assert_eq!(
        n.agent(p).calls.len(),
        1,
        "no new call reached the removed trunk"
    );
}

/// A call set up through a trunk a reload removes goes on as it would have: the provider's
/// 407, arriving after the reload, is answered with the removed trunk's credentials, as is
/// the ACK of its 2xx, and the call ends normally.
#[test]
fn a_call_ringing_through_a_removed_trunk_is_answered_with_its_credentials() {
    let mut n = Net::new(23);
    let p = provider(&mut n, PROVIDER);
    n.agent(p).policy = Policy {
        provisional: vec![(180, false)],
        status: 200,
        after: secs(3),
    };
    let sw = n.switch(&trunks_config(&[("provider", "127.0.0.5")]), &[SW], 1);
    assert!(n.run_until(secs(5), |n| n.agent(p).bindings.len() == 1));
    let a = n.ua(ALICE, "alice");
    let c = n.invite(a, "sip:0301234@127.0.0.1", SW);
    // The provider has the INVITE; its 407 is on the way.
    assert!(n.run_until(secs(2), |n| !got(n, p, &Method::Invite).is_empty()));

    n.reload(sw, &trunks_config(&[("second", "127.0.0.7")]));
    assert!(n.run_until(secs(5), confirmed(a, c)));
    let invites = got(&mut n, p, &Method::Invite);
    assert_eq!(invites.len(), 2, "{invites:?}");
    assert!(invites[1].header(HeaderName::ProxyAuthorization).is_some());
    let acks = got(&mut n, p, &Method::Ack);
    assert_eq!(
        acks.last()
            .and_then(|m| m.header(HeaderName::ProxyAuthorization)),
        invites[1].header(HeaderName::ProxyAuthorization),
        "the ACK of the 2xx carries the removed trunk's credentials"
    );
    hang_up(&mut n, a, c, secs(5));
    assert!(n.run_until(secs(2), |n| n.agent(p).last().state == State::Ended));
    assert_eq!(one_cdr(&mut n, sw, "")["trunk"], "provider");
}

#[test]
fn a_reload_that_reorders_trunks_keeps_their_registrations_and_calls_in() {
    let mut n = Net::new(22);
    let p = provider(&mut n, PROVIDER);
    let second = provider(&mut n, "127.0.0.7:5060");
    let both = [("provider", "127.0.0.5"), ("second", "127.0.0.7")];
    let sw = n.switch(&trunks_config(&both), &[SW], 2);
    assert!(n.run_until(secs(5), |n| n.agent(p).bindings.len() == 1
        && n.agent(second).bindings.len() == 1));
    n.run_for(ms(50));
    let regs =
        |n: &mut Net| got(n, p, &Method::Register).len() + got(n, second, &Method::Register).len();
    let before = regs(&mut n);

    n.reload(sw, &trunks_config(&[both[1], both[0]]));
    n.run_for(secs(5));
    assert_eq!(regs(&mut n), before, "nothing registers anew");
    // Each trunk is still itself: calls in by its address, calls out by its name.
    let c = n.invite(p, "sip:4930555@127.0.0.1", SW);
    assert!(n.run_until(secs(5), confirmed(p, c)));
    hang_up(&mut n, p, c, secs(5));
    let a = n.ua(ALICE, "alice");
    let c = n.invite(a, "sip:0301234@127.0.0.1", SW);
    assert!(n.run_until(secs(5), confirmed(a, c)));
    hang_up(&mut n, a, c, secs(5));
    assert_eq!(n.agent(second).calls.len(), 0);
    let cdrs = n.sw(sw).cdrs();
    assert!(
        cdrs.iter()
            .any(|c| c["trunk"] == "provider" && c["context"] == "from-provider"),
        "{cdrs:?}"
    );
}
