//! SIP INFO digits on the simulated network (tests/net): the answers RFC 6086 asks for, and a
//! digit from one party of a bridged call reaching the other as INFO (`rtp.dtmf = "info"`) or
//! as tones in its audio (it negotiated no telephone-event).

mod net;

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
