//! Load-style calls with SIPp's built-in uac (and uas as the far end of a bridge) against the
//! default dialplan, checked through SIPp's exit code and stats and through the CDRs.

use crate::common;

use common::sipp::{Scenario, Sipp};
use common::switch::{assert_answered_cdrs, default_config_trusting_loopback, Cdr, Opts};
use common::Strowger;

const CALLS: u32 = 10;
/// How long the uac holds each call (-d).
const HOLD_MS: u32 = 3000;

/// 10 calls at 5/s, at most 10 at once, each held 3 s, all to `exten`.
fn uac(exten: &str) -> Sipp {
    Sipp::new(Scenario::Builtin("uac"))
        .service(exten)
        .calls(CALLS, 5, 10)
        .duration_ms(HOLD_MS)
}

/// Runs the uac and checks SIPp's verdict and one answered CDR per call; returns the CDRs.
fn run_calls(s: &mut Strowger, sipp: Sipp, exten: &str) -> Vec<Cdr> {
    sipp.run(s.sip, s.dir.path()).assert_ok(CALLS.into());
    let cdrs = s.wait_cdrs(CALLS as usize);
    assert_answered_cdrs(&cdrs, CALLS as usize, exten);
    for c in &cdrs {
        assert_eq!(c.str("hangup_side"), "caller", "{c:?}");
        assert_eq!(c.num("cause"), 16.0, "normal clearing: {c:?}");
        assert_eq!(c.str("codec"), "PCMU", "SIPp offers PCMU only: {c:?}");
        let held = f64::from(HOLD_MS) / 1000.0;
        let billable = c.num("billable_s");
        assert!(
            billable > held - 0.5 && billable < held + 2.0,
            "billable_s {billable} for a call held {held} s: {c:?}"
        );
    }
    s.assert_alive();
    cdrs
}

/// 44444 plays the demo: ~50 packets/s must leave strowger, and with SIPp echoing them back
/// they must be counted as received too.
#[test]
fn demo_44444_with_rtp_echo() {
    let mut s = Strowger::start("demo-echo");
    for c in run_calls(&mut s, uac("44444").rtp_echo(), "44444") {
        assert!(c.num("packets_sent") >= 100.0, "3 s of playback: {c:?}");
        assert!(
            c.num("packets_received") >= 50.0,
            "SIPp echoed the playback: {c:?}"
        );
    }
}

/// Same without -rtp_echo: strowger's RTP goes to a port nobody reads (ICMP port unreachable
/// on loopback), which must not disturb it.
#[test]
fn demo_44444_without_rtp_from_caller() {
    let mut s = Strowger::start("demo-norx");
    for c in run_calls(&mut s, uac("44444"), "44444") {
        assert!(c.num("packets_sent") >= 100.0, "3 s of playback: {c:?}");
        assert_eq!(c.num("packets_received"), 0.0, "SIPp sent no RTP: {c:?}");
    }
}

/// 9196 echo with SIPp echoing too: nobody originates audio, so the calls just have to work.
#[test]
fn echo_9196() {
    let mut s = Strowger::start("echo");
    run_calls(&mut s, uac("9196").rtp_echo(), "9196");
}

/// 2XXX is bridged to sip:${EXTEN}@${bridge_target}; a SIPp uas there must see every call
/// complete, and the CDRs must name it. SIPp calls from a trusted address (2XXX is no public
/// extension).
#[test]
fn bridge_2xxx_to_sipp_uas() {
    let dir = common::TempDir::new("bridge-uas");
    let uas = Sipp::new(Scenario::Builtin("uas"))
        .calls(CALLS, 5, 10)
        .rtp_echo()
        .spawn(None, dir.path());
    let target = uas.addr.to_string();
    let mut s = Strowger::with(
        "bridge",
        Opts {
            config_file: Some(default_config_trusting_loopback(dir.path())),
            vars: vec![("bridge_target".into(), target.clone())],
            ..Opts::default()
        },
    );
    let cdrs = run_calls(&mut s, uac("2001"), "2001");
    uas.finish().assert_ok(CALLS.into());
    for c in &cdrs {
        let to = c.str("bridged_to");
        assert!(
            to.contains("2001") && to.contains(&target),
            "bridged_to {to:?} should be sip:2001@{target}: {c:?}"
        );
    }
}

/// The same echo calls over TCP (`--sip-listen` binds TCP too): one connection, SIPp's t1 mode.
#[test]
fn echo_9196_over_tcp() {
    let mut s = Strowger::start("echo-tcp");
    run_calls(&mut s, uac("9196").rtp_echo().arg("-t").arg("t1"), "9196");
}

/// With RTP ports for two calls only, a third concurrent call is refused with 503 at once (the
/// port pool is a free list, not a sweep of the range), the two calls go on, and the ports come
/// back when they end: the next two calls are answered.
#[test]
fn rtp_port_exhaustion_refuses_with_503_and_recovers() {
    let mut s = Strowger::with(
        "rtp-exhausted",
        Opts {
            workers: Some(1),
            rtp_ports: Some(4),
            ..Opts::default()
        },
    );
    let busy = Sipp::new(Scenario::Builtin("uac"))
        .service("9196")
        .calls(3, 20, 3)
        .duration_ms(2000)
        .run(s.sip, s.dir.path());
    assert_eq!(
        (busy.successful, busy.failed),
        (2, 1),
        "{}",
        busy.evidence()
    );
    let statuses: Vec<_> = busy.received().iter().filter_map(|m| m.status()).collect();
    assert!(statuses.contains(&503), "refused with 503: {statuses:?}");
    s.assert_alive();
    Sipp::new(Scenario::Builtin("uac"))
        .service("9196")
        .calls(2, 10, 2)
        .duration_ms(500)
        .run(s.sip, s.dir.path())
        .assert_ok(2);
}
