//! `rtp.shared_ports` (the default) with a far end that sends RTP from another port than its
//! SDP names: a shared port does not take it, and strowger moves the call onto a port pair of
//! its own by a re-INVITE, where it is heard.

use crate::common;

use common::api::Api;
use common::audio::{tone, tone_purity};
use common::pcap::{g711_from, Capture, Stream};
use common::sipp::{Scenario, Sipp};
use common::Strowger;

/// SIPp (tests/sipp/media_uac_elsewhere.xml) announces 127.0.0.2 and the port two above its
/// media port, and plays 5 s of 440 Hz from its own address to the echo test (9196): once
/// strowger re-INVITEs it onto a pair of its own, the tone arrives and is echoed back.
#[test]
fn a_caller_sending_from_another_port_than_its_sdp_names_is_heard_after_a_re_invite() {
    let s = Strowger::start("shared-elsewhere");
    let mut media = Stream::default();
    media.audio(&tone(440.0, 8000 * 5, 8000.0));
    let filter = format!("ip and udp and src portrange {}-{}", s.rtp.0, s.rtp.1);
    let cap = Capture::start(s.dir.path(), &filter);
    Sipp::new(Scenario::File("media_uac_elsewhere.xml"))
        .service("9196")
        .duration_ms(3000)
        .args(&["-key", "pts", "0"])
        .file("media.pcap", media.pcap())
        .run(s.sip, s.dir.path())
        .assert_ok(1);
    let heard = g711_from(&cap.finish(), s.rtp, codec::G711::Pcmu);
    assert!(heard.len() > 8000 * 2, "{} samples echoed", heard.len());
    let purity = tone_purity(&heard[heard.len() - 8000..], 440.0);
    assert!(purity > 0.8, "SIPp's 440 Hz echoed: purity {purity:.2}");
    let c = s.wait_cdrs(1).remove(0);
    assert!(c.num("packets_received") >= 100.0, "{c:?}");
    let metrics = Api::of(&s).text("/metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l == "strowger_rtp_legs_moved_total 1"),
        "one leg moved:\n{metrics}"
    );
}
