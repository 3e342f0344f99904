//! RTP ports on a shared host: another program holding part of `rtp.ports` costs only the ports
//! it holds, and a call is refused only when the rest of the range is in use.

use crate::common;

use common::api::Api;
use common::net::free_port_range;
use common::sipp::{Scenario, Sipp};
use common::switch::Opts;
use common::{wait_for, Strowger};
use std::net::UdpSocket;
use std::time::Duration;

/// Pairs in strowger's range, and how many of them (the first, in a row) this test holds.
const PAIRS: u16 = 60;
const HELD: u16 = 20;

/// The test holds the first third of a 60-pair range (a run of held ports at the head of the
/// free list); 40 held echo calls all get a pair, and the 41st is refused with 503, logged with
/// how many pairs are in use and how many are held elsewhere, and counted by its reason.
#[test]
fn ports_held_by_another_program_are_set_aside_and_the_rest_serve_calls() {
    let lo = free_port_range(2 * PAIRS);
    let _held: Vec<UdpSocket> = (lo..lo + 2 * HELD)
        .step_by(2)
        .map(|p| UdpSocket::bind(("127.0.0.1", p)).expect("hold a port of the range"))
        .collect();
    let mut s = Strowger::with(
        "rtp-ports-held",
        Opts {
            workers: Some(1),
            rtp_ports: Some(2 * PAIRS),
            rtp_lo: Some(lo),
            ..Opts::default()
        },
    );
    let free = u32::from(PAIRS - HELD);
    let run = Sipp::new(Scenario::Builtin("uac"))
        .service("9196")
        .calls(free + 1, 20, free + 1)
        .duration_ms(5000)
        .run(s.sip, s.dir.path());
    assert_eq!(
        (run.successful, run.failed),
        (u64::from(free), 1),
        "{}",
        run.evidence()
    );
    let refused: Vec<_> = run.received().iter().filter_map(|m| m.status()).collect();
    assert!(refused.contains(&503), "refused with 503: {refused:?}");
    let log = s.stderr();
    assert!(
        log.contains(&format!(
            "rtp.ports is used up on this worker ({free} pairs in use, {HELD} set aside"
        )),
        "the refusal names rtp.ports and the pairs in use and set aside:\n{log}"
    );
    let metric = r#"strowger_calls_refused_total{reason="no_rtp_port"} 1"#;
    let api = Api::of(&s);
    let counted = wait_for(Duration::from_secs(5), || {
        api.text("/metrics").contains(metric).then_some(())
    });
    assert!(counted.is_some(), "{metric} in:\n{}", api.text("/metrics"));
    s.assert_alive();
}
