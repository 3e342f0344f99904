//! SIP INFO digits on the simulated network (tests/net): the answers RFC 6086 asks for, and a
//! digit from one party of a bridged call reaching the other as INFO (`rtp.dtmf = "info"`, or
//! the `dtmf` of that party's user or trunk) or as tones in its audio (it negotiated no
//! telephone-event).

use crate::net;

use net::*;
use sip::Method;
use std::time::Duration;

/// A bridged call from Alice to Bob (2001), both sending silence (µ-law 0xff) every 20 ms.
fn bridged(seed: u64, rtp: &str) -> (Net, Id, Id, usize, usize) {
    let mut n = Net::new(seed);
    b2bua(&mut n, &format!("[rtp]\nmedia_timeout_s = 0\n{rtp}"));
    let a = n.ua(ALICE, "alice");
    let b = n.ua(BOB, "bob");
    n.agent(a).send_rtp = true;
    n.agent(b).send_rtp = true;
    let c = n.invite(a, "sip:2001@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, c)));
    let bc = n.agent(b).last_index().unwrap();
    (n, a, b, c, bc)
}

/// The statuses of the INFOs agent `ua` sent in call `c`.
fn info_statuses(n: &mut Net, ua: Id, c: usize) -> Vec<u16> {
    let call = n.agent(ua).call(c);
    call.responses_to("INFO")
        .iter()
        .filter_map(|m| m.status())
        .collect()
}

#[test]
fn info_bodies_get_200_415_or_400() {
    let (mut n, a, _, c, _) = bridged(1, "");
    n.info(
        a,
        c,
        "application/dtmf-relay",
        "Signal=5\r\nDuration=160\r\n",
    );
    n.run_for(ms(200));
    n.info(a, c, "application/dtmf", "7");
    n.run_for(ms(200));
    n.info(a, c, "text/plain", "5");
    n.run_for(ms(200));
    n.info(a, c, "application/dtmf-relay", "Signal=+");
    n.run_for(ms(200));
    assert_eq!(info_statuses(&mut n, a, c), [200, 200, 415, 400]);
    let call = n.agent(a).call(c);
    let refused = call.responses_to("INFO")[2];
    let accept: Vec<&str> = refused.all(sip::HeaderName::Accept).collect();
    assert_eq!(accept, ["application/dtmf-relay", "application/dtmf"]);
}

#[test]
fn in_info_mode_an_info_digit_reaches_the_other_party_as_info() {
    let (mut n, a, b, c, bc) = bridged(2, "dtmf = \"info\"\n");
    n.info(a, c, "application/dtmf", "#");
    n.run_for(ms(300));
    assert_eq!(info_statuses(&mut n, a, c), [200]);
    let infos: Vec<String> = n
        .agent(b)
        .call(bc)
        .requests_of(&Method::Info)
        .iter()
        .map(|m| body(m))
        .collect();
    assert_eq!(infos, ["Signal=#\r\nDuration=100\r\n"]);
}

/// What agent `ua` hears during the next `d`: packets carrying sound (not the agents' silence).
fn loud(n: &mut Net, ua: Id, d: Duration) -> usize {
    let from = n.agent(ua).rtp_payloads.len();
    n.run_for(d);
    let got = &n.agent(ua).rtp_payloads[from..];
    got.iter().filter(|p| p.iter().any(|&b| b != 0xff)).count()
}

#[test]
fn an_info_digit_reaches_a_party_without_telephone_event_as_tones() {
    let (mut n, a, b, c, _) = bridged(3, "");
    assert_eq!(loud(&mut n, b, secs(1)), 0, "Alice's silence relayed");
    n.info(
        a,
        c,
        "application/dtmf-relay",
        "Signal=1\r\nDuration=200\r\n",
    );
    let tones = loud(&mut n, b, ms(500));
    assert!(
        (9..=11).contains(&tones),
        "200 ms of tones in 20 ms packets: {tones}"
    );
    assert_eq!(loud(&mut n, b, secs(1)), 0, "then silence again");
}

/// The INFO digits agent `ua` got in its call `c`.
fn infos_at(n: &mut Net, ua: Id, c: usize) -> Vec<String> {
    let call = n.agent(ua).call(c);
    call.requests_of(&Method::Info)
        .iter()
        .map(|m| body(m))
        .collect()
}

/// In a confirmed call between Alice (`a`, her call `c`) and Bob (`b`, his call `bc`), both
/// sending silence, Alice sends 1 by INFO, then Bob 2: what each then got, as INFO bodies and
/// as packets of tones.
struct Crossed {
    alice_infos: Vec<String>,
    alice_tones: usize,
    bob_infos: Vec<String>,
    bob_tones: usize,
}

fn cross_digits(n: &mut Net, (a, c): (Id, usize), (b, bc): (Id, usize)) -> Crossed {
    assert_eq!(
        loud(n, b, ms(500)) + loud(n, a, ms(1)),
        0,
        "silence relayed"
    );
    n.info(
        a,
        c,
        "application/dtmf-relay",
        "Signal=1\r\nDuration=200\r\n",
    );
    let bob_tones = loud(n, b, ms(600));
    n.info(
        b,
        bc,
        "application/dtmf-relay",
        "Signal=2\r\nDuration=200\r\n",
    );
    let alice_tones = loud(n, a, ms(600));
    Crossed {
        alice_infos: infos_at(n, a, c),
        alice_tones,
        bob_infos: infos_at(n, b, bc),
        bob_tones,
    }
}

/// Tones of a 200 ms digit in 20 ms packets, or none.
fn tones_of_one_digit(packets: usize) -> bool {
    (9..=11).contains(&packets)
}

#[test]
fn a_calling_users_dtmf_mode_gives_its_phone_digits_by_info_and_the_callee_its_own_form() {
    let mut n = Net::new(4);
    let sw = b2bua(&mut n, "[security]\ntrusted = [\"10.9.9.9\"]\n");
    let user = store::Credentials {
        dtmf: Some("info".into()),
        ..switch::registrar::credentials("1001", "strowger", "pw-1001")
    };
    store::CredentialStore::put_user(&*n.sw(sw).shared.store, &user).unwrap();
    let a = n.ua(ALICE, "1001");
    let b = n.ua(BOB, "bob");
    n.agent(a).credentials = Some(("1001".into(), "pw-1001".into()));
    n.agent(a).send_rtp = true;
    n.agent(b).send_rtp = true;
    let c = n.invite(a, "sip:2001@127.0.0.1", SW);
    assert!(n.run_until(secs(5), confirmed(a, c)));
    let bc = n.agent(b).last_index().unwrap();
    let got = cross_digits(&mut n, (a, c), (b, bc));
    // rtp.dtmf is auto: Bob (no telephone-event) hears Alice's 1 as tones, no INFO.
    assert!(got.bob_infos.is_empty(), "{:?}", got.bob_infos);
    assert!(
        tones_of_one_digit(got.bob_tones),
        "{} packets of tones",
        got.bob_tones
    );
    // Alice's user takes digits by INFO: Bob's 2 reaches her so, not in her audio.
    assert_eq!(got.alice_infos, ["Signal=2\r\nDuration=200\r\n"]);
    assert_eq!(got.alice_tones, 0);
}

#[test]
fn a_called_users_dtmf_mode_gives_its_phone_digits_by_info() {
    let mut n = Net::new(5);
    let toml = format!(
        "[registrar]\nauthenticate = false\nkeepalive_s = 0\n{TRUST_LOOPBACK}\n[vars]\nbridge_target = \"{BOB}\"\nself = \"{SW}\"\n"
    );
    let sw = n.switch(&config(&toml), &[SW], 1);
    let user = store::Credentials {
        dtmf: Some("info".into()),
        ..switch::registrar::credentials("1002", "strowger", "pw")
    };
    store::CredentialStore::put_user(&*n.sw(sw).shared.store, &user).unwrap();
    let a = n.ua(ALICE, "alice");
    let b = n.ua(BOB, "1002");
    n.register(b, SW, "strowger", 600);
    assert!(n.run_until(secs(2), registered([b])), "1002 registered");
    n.agent(a).send_rtp = true;
    n.agent(b).send_rtp = true;
    let c = n.invite(a, "sip:1002@127.0.0.1", SW);
    assert!(n.run_until(secs(5), confirmed(a, c)));
    let bc = n.agent(b).last_index().unwrap();
    let got = cross_digits(&mut n, (a, c), (b, bc));
    assert_eq!(got.bob_infos, ["Signal=1\r\nDuration=200\r\n"]);
    assert_eq!(got.bob_tones, 0);
    assert!(got.alice_infos.is_empty(), "{:?}", got.alice_infos);
    assert!(
        tones_of_one_digit(got.alice_tones),
        "{} packets of tones",
        got.alice_tones
    );
}

/// The provider of `trunk_switch`: an address of its own, as a trunk's calls are told by it.
const PROVIDER: &str = "127.0.0.5:5060";

/// A switch whose trunk "prov" is the `PROVIDER` (by address, no account) with `dtmf` of its
/// own; 0… goes out through it, and its calls in to 2001 are bridged to Alice.
fn trunk_switch(n: &mut Net, dtmf: &str) -> Id {
    let toml = format!(
        r#"
[rtp]
media_timeout_s = 0
{TRUST_LOOPBACK}
[[trunks]]
name = "prov"
host = "{PROVIDER}"
dtmf = "{dtmf}"
did_context = "from-prov"
[dialplan]
default_context = "default"
[dialplan.contexts.default]
trunks = ["prov"]
[[dialplan.contexts.default.rules]]
regex = "^0\\d+$"
steps = ["bridge trunk/prov/${{EXTEN}} timeout=20"]
[[dialplan.contexts.from-prov.rules]]
exten = "2001"
steps = ["bridge sip:2001@{ALICE} timeout=20"]
"#
    );
    n.switch(&toml, &[SW], 1)
}

#[test]
fn a_trunks_dtmf_mode_gives_the_provider_digits_by_info_on_calls_out_and_in() {
    let mut n = Net::new(6);
    trunk_switch(&mut n, "INFO");
    let a = n.ua(ALICE, "alice");
    let b = n.ua(PROVIDER, "provider");
    n.agent(a).send_rtp = true;
    n.agent(b).send_rtp = true;
    // Out: Alice through the trunk to the provider.
    let c = n.invite(a, "sip:0301234@127.0.0.1", SW);
    assert!(n.run_until(secs(5), confirmed(a, c)));
    let bc = n.agent(b).last_index().unwrap();
    let out = cross_digits(&mut n, (a, c), (b, bc));
    assert_eq!(out.bob_infos, ["Signal=1\r\nDuration=200\r\n"]);
    assert_eq!(out.bob_tones, 0);
    assert!(out.alice_infos.is_empty(), "{:?}", out.alice_infos);
    assert!(
        tones_of_one_digit(out.alice_tones),
        "{} packets",
        out.alice_tones
    );
    hang_up(&mut n, a, c, secs(2));
    // In: the provider calls Alice.
    let c = n.invite(b, "sip:2001@127.0.0.1", SW);
    assert!(n.run_until(secs(5), confirmed(b, c)));
    let ac = n.agent(a).last_index().unwrap();
    let inb = cross_digits(&mut n, (a, ac), (b, c));
    assert_eq!(inb.bob_infos, ["Signal=1\r\nDuration=200\r\n"]);
    assert!(inb.alice_infos.is_empty(), "{:?}", inb.alice_infos);
    assert!(
        tones_of_one_digit(inb.alice_tones),
        "{} packets",
        inb.alice_tones
    );
}
