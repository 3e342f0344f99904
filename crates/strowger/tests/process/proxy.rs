//! The proxy role: tests/configs/registrar.toml with `[proxy] domains = ["proxy.test"]`. A SIPp
//! phone registers as 1001 and answers (tests/sipp/uas_proxied.xml); a SIPp caller sends
//! INVITE sip:1001@proxy.test to strowger (tests/sipp/proxy_uac*.xml), which forwards it to the
//! phone; with Record-Route the ACK and BYE pass through strowger too.

use crate::common;

use common::net::free_port;
use common::sip::{sdp, Msg, Rtp, Uac, PCMU};
use common::sipp::{Scenario, Sipp, SippResult};
use common::switch::{config_path, Opts};
use common::{Strowger, TempDir};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn config(dir: &Path, proxy: &str) -> PathBuf {
    let store = format!("local:{}", dir.join("store.snap").display());
    let text = std::fs::read_to_string(config_path("registrar.toml"))
        .unwrap()
        .replace(
            "store = \"local:strowger-data/store.snap\"",
            &format!("store = \"{store}\""),
        )
        // The callers are strangers to the proxy: a trusted peer would skip its 407.
        .replace("trusted = [\"127.0.0.1\"]", "trusted = []")
        + &format!("\n[proxy]\ndomains = [\"proxy.test\"]\n{proxy}\n");
    let path = dir.join("proxy.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn start(label: &str, proxy: &str) -> (Strowger, TempDir) {
    let dir = TempDir::new(label);
    let s = Strowger::with(
        label,
        Opts {
            config_file: Some(config(dir.path(), proxy)),
            ..Opts::default()
        },
    );
    (s, dir)
}

/// 1001 registers from `port` (tests/sipp/register.xml), then answers there with the
/// `answering` scenario (tests/sipp/).
fn phone(s: &Strowger, port: u16, answering: &'static str) -> common::sipp::SippProcess {
    Sipp::new(Scenario::File("register.xml"))
        .service("1001")
        .port(port)
        .args(&["-au", "1001", "-ap", "secret-1001"])
        .run(s.sip, s.dir.path())
        .assert_ok(1);
    let p = Sipp::new(Scenario::File(answering))
        .port(port)
        .spawn(None, s.dir.path());
    std::thread::sleep(Duration::from_millis(300));
    p
}

fn request<'a>(r: &'a [Msg], method: &str) -> &'a Msg {
    r.iter()
        .find(|m| m.method() == Some(method))
        .unwrap_or_else(|| panic!("no {method} in {r:#?}"))
}

/// The INVITE reaches the phone with strowger's Via on top of the caller's and its
/// Record-Route; the caller's ACK and BYE follow the route set through strowger (their top Via
/// is strowger's at the phone); the phone's responses reach the caller; no CDR (no B2BUA call).
fn assert_proxied(s: &Strowger, caller: &SippResult, phone: &SippResult) {
    let ours = format!("127.0.0.1:{}", s.sip.port());
    let got = phone.received();
    let invite = request(&got, "INVITE");
    assert!(
        invite.start.starts_with("INVITE sip:1001@127.0.0.1:"),
        "{invite:?}"
    );
    let vias = invite.headers("via");
    assert_eq!(vias.len(), 2, "strowger's Via on the caller's: {invite:?}");
    assert!(vias[0].contains(&ours), "{invite:?}");
    let rr = invite.headers("record-route");
    assert_eq!(rr.len(), 1, "{invite:?}");
    assert!(
        rr[0].starts_with(&format!("<sip:{ours};lr;rr=")),
        "a signed Record-Route: {invite:?}"
    );
    for m in ["ACK", "BYE"] {
        let r = request(&got, m);
        assert!(
            r.header("via").is_some_and(|v| v.contains(&ours)),
            "the {m} passed through strowger: {r:?}"
        );
    }
    let answered = caller
        .received()
        .into_iter()
        .find(|m| m.status() == Some(200) && m.cseq_method() == Some("INVITE"))
        .expect("a 200 to the INVITE");
    assert_eq!(answered.headers("via").len(), 1, "{answered:?}");
    assert!(s.cdrs().is_empty(), "a proxied call is no B2BUA call");
}

/// One SIPp call to 1001@proxy.test through the proxy role, completed.
fn call_1001(s: &Strowger) -> SippResult {
    let caller = Sipp::new(Scenario::File("proxy_uac.xml"))
        .service("1001")
        .args(&["-key", "domain", "proxy.test"])
        .duration_ms(300)
        .run(s.sip, s.dir.path());
    caller.assert_ok(1);
    caller
}

#[test]
fn proxied_call_is_record_routed_and_bye_passes_through() {
    let (s, _dir) = start("proxy", "record_route = true");
    let uas = phone(&s, free_port(), "uas_proxied.xml");
    let caller = call_1001(&s);
    let phone = uas.finish();
    phone.assert_ok(1);
    assert_proxied(&s, &caller, &phone);
}

/// Forking: 1001 registered from two SIPp phones of equal q, both get the INVITE; the one that
/// answers gets the call through strowger, the one that only rings gets a CANCEL saying the
/// call was completed elsewhere (RFC 3326) and its 487 stays with strowger.
#[test]
fn proxy_forks_to_both_contacts_and_cancels_the_one_that_did_not_answer() {
    let (s, _dir) = start("proxy-fork", "record_route = true");
    let answers = phone(&s, free_port(), "uas_proxied.xml");
    let rings = phone(&s, free_port(), "uas_ring_cancel_proxied.xml");
    let caller = call_1001(&s);
    let answered = answers.finish();
    answered.assert_ok(1);
    assert_proxied(&s, &caller, &answered);
    let rang = rings.finish();
    rang.assert_ok(1);
    let got = rang.received();
    let cancel = request(&got, "CANCEL");
    assert!(
        cancel
            .header("reason")
            .is_some_and(|r| r.contains("cause=200") && r.contains("Call completed elsewhere")),
        "{cancel:?}"
    );
    assert!(
        caller.received().iter().all(|m| m.status() != Some(487)),
        "the loser's 487 is not the caller's business\n{}",
        caller.evidence()
    );
}

/// With `authenticate = true` the first INVITE gets 407 with a Proxy-Authenticate challenge;
/// the INVITE with the credentials of user 1002 goes through.
#[test]
fn proxy_authentication_407_then_through() {
    let (s, _dir) = start("proxy-auth", "authenticate = true");
    let uas = phone(&s, free_port(), "uas_proxied.xml");
    let caller = Sipp::new(Scenario::File("proxy_uac_auth.xml"))
        .service("1001")
        .args(&["-key", "domain", "proxy.test"])
        .args(&["-au", "1002", "-ap", "secret-1002"])
        .duration_ms(300)
        .run(s.sip, s.dir.path());
    caller.assert_ok(1);
    let challenge = caller
        .received()
        .into_iter()
        .find(|m| m.status() == Some(407))
        .expect("a 407");
    assert!(
        challenge
            .header("proxy-authenticate")
            .is_some_and(|c| c.contains("realm=\"strowger\"")),
        "{challenge:?}"
    );
    let phone = uas.finish();
    phone.assert_ok(1);
    assert_proxied(&s, &caller, &phone);
    let invites = phone
        .received()
        .into_iter()
        .filter(|m| m.method() == Some("INVITE"))
        .count();
    assert_eq!(invites, 1, "only the authenticated INVITE is forwarded");
}

/// With the listen address itself as the proxied domain (so SIPp's and the hand client's
/// Request-URIs sip:USER@127.0.0.1:PORT are proxied): a CANCEL while the phone rings gets 200,
/// the phone gets the CANCEL and the caller 487 (tests/sipp/cancel.xml); an unknown user gets
/// 404 and a user without a binding 480, from strowger itself.
#[test]
fn proxy_cancel_404_and_480() {
    let dir = TempDir::new("proxy-cancel");
    let text = std::fs::read_to_string(config(dir.path(), ""))
        .unwrap()
        .replace("domains = [\"proxy.test\"]", "domains = [\"127.0.0.1\"]");
    let path = dir.path().join("proxy-ip.toml");
    std::fs::write(&path, text).unwrap();
    let s = Strowger::with(
        "proxy-cancel",
        Opts {
            config_file: Some(path),
            ..Opts::default()
        },
    );
    let port = free_port();
    let rings = phone(&s, port, "uas_ring_cancel_proxied.xml");
    Sipp::new(Scenario::File("cancel.xml"))
        .service("1001")
        .run(s.sip, s.dir.path())
        .assert_ok(1);
    let phone = rings.finish();
    phone.assert_ok(1);
    request(&phone.received(), "CANCEL");

    for (user, want) in [("1999", 404), ("1002", 480)] {
        let rtp = Rtp::bind();
        let mut uac = Uac::new(s.sip, user);
        let got = uac.invite(&sdp(rtp.port, &[PCMU], "sendrecv")).status();
        assert_eq!(got, Some(want), "INVITE {user}");
    }
    assert!(s.cdrs().is_empty(), "nothing went through the B2BUA");
}
