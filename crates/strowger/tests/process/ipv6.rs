//! Dual-stack media in the real process: strowger listening on 127.0.0.1 and [::1] gives a
//! caller over IPv6 IPv6 media (`c=IN IP6`, RTP on ::1), and bridges IPv4 and IPv6 far ends
//! both ways, transcoding too, with the audio checked in captures of what strowger sent.

use crate::common;

use common::audio::{read_wav, tone, tone_purity};
use common::baresip::Baresip;
use common::pcap::{g711_from, Capture, Stream};
use common::sipp::{Scenario, Sipp};
use common::switch::{default_config_trusting_loopback, Opts};
use common::Strowger;

/// A dual-stack strowger (`Opts::ipv6`) with the default configuration trusting loopback.
fn dual_stack(label: &str, dir: &common::TempDir, vars: Vec<(String, String)>) -> Strowger {
    Strowger::with(
        label,
        Opts {
            config_file: Some(default_config_trusting_loopback(dir.path())),
            vars,
            ipv6: true,
            ..Opts::default()
        },
    )
}

/// Starts capturing what strowger sends from its RTP ports over IPv6 (`v6`) or IPv4.
fn capture(s: &Strowger, v6: bool) -> Capture {
    let family = if v6 { "ip6" } else { "ip" };
    let filter = format!("{family} and udp and src portrange {}-{}", s.rtp.0, s.rtp.1);
    // A directory per family: each capture writes its own capture.pcap.
    let dir = s.dir.path().join(family);
    std::fs::create_dir_all(&dir).unwrap();
    Capture::start(&dir, &filter)
}

/// The purity of `freq` in the last second of `heard`, which must hold 2 s at least.
fn last_second_purity(heard: &[i16], freq: f64, what: &str) -> f64 {
    assert!(heard.len() > 8000 * 2, "{} samples {what}", heard.len());
    tone_purity(&heard[heard.len() - 8000..], freq)
}

/// SIPp calls the demo (44444) over IPv6 and echoes what it gets: the answer names IPv6 media
/// and strowger counts the echo as received.
#[test]
fn an_ipv6_caller_of_the_demo_gets_ipv6_media_both_ways() {
    let dir = common::TempDir::new("ipv6-demo");
    let s = dual_stack("ipv6-demo", &dir, Vec::new());
    let run = Sipp::new(Scenario::Builtin("uac"))
        .ip("::1")
        .service("44444")
        .calls(2, 2, 1)
        .duration_ms(2500)
        .rtp_echo()
        .run(s.sip6.unwrap(), s.dir.path());
    run.assert_ok(2);
    let ok: Vec<_> = run
        .received()
        .into_iter()
        .filter(|m| m.status() == Some(200) && m.body.contains("m=audio"))
        .collect();
    assert!(!ok.is_empty(), "{}", run.evidence());
    assert!(
        ok.iter().all(|m| m.body.contains("c=IN IP6 ::1")),
        "{:?}",
        ok[0].body
    );
    for c in s.wait_cdrs(2) {
        c.assert_answered("44444");
        assert!(c.num("packets_sent") >= 100.0, "2.5 s of playback: {c:?}");
        assert!(
            c.num("packets_received") >= 50.0,
            "SIPp echoed the playback: {c:?}"
        );
    }
}

/// SIPp over IPv6 talks 440 Hz to the echo test (9196): strowger sends it back over IPv6.
#[test]
fn an_ipv6_caller_of_the_echo_test_hears_itself() {
    let dir = common::TempDir::new("ipv6-echo");
    let s = dual_stack("ipv6-echo", &dir, Vec::new());
    let mut media = Stream::default();
    media.audio(&tone(440.0, 8000 * 3, 8000.0));
    let cap = capture(&s, true);
    Sipp::media_caller("9196", &media, false, media.duration())
        .ip("::1")
        .run(s.sip6.unwrap(), s.dir.path())
        .assert_ok(1);
    let heard = g711_from(&cap.finish(), s.rtp, codec::G711::Pcmu);
    let purity = last_second_purity(&heard, 440.0, "echoed over IPv6");
    assert!(purity > 0.8, "SIPp's 440 Hz echoed: purity {purity:.2}");
    let c = s.wait_cdrs(1).remove(0);
    assert!(c.num("packets_received") >= 100.0, "{c:?}");
}

/// A caller (IPv6 if `caller_v6`, 440 Hz, PCMU) dials 2001, bridged to a SIPp callee of the
/// other family answering `callee_law` with 1000 Hz: each hears the other's tone, sent over
/// its own family in its own law.
fn bridged_across(label: &str, caller_v6: bool, callee_law: codec::G711) {
    let dir = common::TempDir::new(label);
    let mut callee_media = Stream::default();
    if callee_law == codec::G711::Pcma {
        callee_media.pcma();
    }
    callee_media.audio(&tone(1000.0, 8000 * 4, 8000.0));
    let callee_ip = if caller_v6 { "127.0.0.1" } else { "::1" };
    let uas = Sipp::media_callee(&callee_media)
        .ip(callee_ip)
        .spawn(None, dir.path());
    let vars = vec![("bridge_target".into(), uas.addr.to_string())];
    let s = dual_stack(label, &dir, vars);
    let (to_caller, to_callee) = (capture(&s, caller_v6), capture(&s, !caller_v6));
    let mut caller_media = Stream::default();
    caller_media.audio(&tone(440.0, 8000 * 3, 8000.0));
    let (ip, sip) = match caller_v6 {
        true => ("::1", s.sip6.unwrap()),
        false => ("127.0.0.1", s.sip),
    };
    Sipp::media_caller("2001", &caller_media, false, caller_media.duration())
        .ip(ip)
        .run(sip, s.dir.path())
        .assert_ok(1);
    uas.finish().assert_ok(1);
    let heard = g711_from(&to_caller.finish(), s.rtp, codec::G711::Pcmu);
    let purity = last_second_purity(&heard, 1000.0, "to the caller");
    assert!(
        purity > 0.8,
        "the caller hears the callee: purity {purity:.2}"
    );
    let heard = g711_from(&to_callee.finish(), s.rtp, callee_law);
    let purity = last_second_purity(&heard, 440.0, "to the callee");
    assert!(
        purity > 0.8,
        "the callee hears the caller: purity {purity:.2}"
    );
}

#[test]
fn an_ipv4_caller_is_bridged_to_an_ipv6_callee() {
    bridged_across("ipv4-to-ipv6", false, codec::G711::Pcmu);
}

#[test]
fn an_ipv6_caller_is_bridged_to_an_ipv4_callee() {
    bridged_across("ipv6-to-ipv4", true, codec::G711::Pcmu);
}

#[test]
fn an_ipv4_caller_is_bridged_to_an_ipv6_callee_transcoding_pcmu_to_pcma() {
    bridged_across("ipv4-to-ipv6-pcma", false, codec::G711::Pcma);
}

/// An IPv4-only strowger and a caller whose SDP names IPv6 media (SIPp `-mi ::1`): the demo's
/// RTP cannot leave an IPv4 socket for ::1, and the CDR says so — send errors, none sent — and
/// the log tells the operator.
#[test]
fn rtp_the_kernel_refuses_is_counted_as_send_errors_not_sent() {
    let s = Strowger::start("ipv6-send-errors");
    Sipp::new(Scenario::Builtin("uac"))
        .service("44444")
        .calls(1, 1, 1)
        .duration_ms(1500)
        .args(&["-mi", "::1"])
        .run(s.sip, s.dir.path())
        .assert_ok(1);
    let c = s.wait_cdrs(1).remove(0);
    c.assert_answered("44444");
    assert!(
        c.num("send_errors") >= 50.0,
        "1.5 s of playback refused: {c:?}"
    );
    assert_eq!(c.num("packets_sent"), 0.0, "{c:?}");
    let log = s.stderr();
    assert!(log.contains("the kernel refused to send RTP"), "{log}");
}

/// baresip over IPv6 only (`-6`, bound to ::1) calls the echo test with speech and hears it back.
#[test]
fn baresip_over_ipv6_hears_its_echo() {
    let dir = common::TempDir::new("baresip-ipv6");
    let s = dual_stack("baresip-ipv6", &dir, Vec::new());
    let speech = crate::softphone::speech_wav(dir.path());
    let heard = Baresip::spawn_at(
        "::1",
        dir.path(),
        "9196",
        "<sip:tester@[::1]>;regint=0;audio_codecs=PCMU",
        &speech,
        &[&format!("/dial sip:9196@{}", s.sip6.unwrap())],
        8,
    )
    .finish("calling 9196 over IPv6");
    let echo = "the speech it sent, echoed over IPv6";
    crate::softphone::assert_heard(&heard, &read_wav(&speech).samples, echo);
}
