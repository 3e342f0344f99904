//! SDES-SRTP with a real phone: baresip registers over TLS with its srtp module and
//! `mediaenc=srtp-mand` (RTP/SAVP with `a=crypto` keys or no call). It hears its own speech
//! back from the echo extension while the RTP strowger sends it is not G.711 on the wire, and a
//! packet under another key sent to strowger's ports mid-call is dropped and logged while the
//! call goes on; bridged to a plain-RTP phone, each hears the other.

use crate::common;
use crate::softphone::{assert_heard, speech_wav};
use crate::tls::{config, with_users_config};

use common::audio::{best_correlation, read_wav};
use common::baresip::{account, Baresip};
use common::pcap::{pcmu_from, Capture};
use common::switch::assert_answered_cdrs;
use common::TempDir;
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::time::Duration;

/// baresip's config lines for SRTP over TLS: its srtp module and strowger's certificate as CA.
pub(crate) fn srtp_config(ca: &Path) -> String {
    format!("module srtp.so\nsip_cafile {}", ca.display())
}

/// An accounts line registering `user` over TLS that makes and takes SRTP calls only.
pub(crate) fn srtp_account(tls: SocketAddr, user: &str, password: &str) -> String {
    format!(
        "<sip:{user}@{tls};transport=tls>;auth_pass={password};regint=600;audio_codecs=PCMU;\
         mediaenc=srtp-mand"
    )
}

/// A G.711 packet with an 80-bit tag that no key made, to every port of `rtp` (RTP and RTCP).
fn forge(rtp: (u16, u16)) {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut packet = vec![0x80, 0, 0x12, 0x34, 0, 0, 0x40, 0, 0xde, 0xad, 0xbe, 0xef];
    packet.extend([0xff; 160]);
    packet.extend([0x5a; 10]);
    for port in rtp.0..=rtp.1 {
        sock.send_to(&packet, ("127.0.0.1", port)).unwrap();
    }
}

#[test]
fn baresip_with_sdes_srtp_hears_its_echo_and_forged_packets_are_dropped() {
    // Without symmetric RTP no source address is filtered: SRTP's authentication alone keeps
    // the forged packets out of the call.
    let conf = TempDir::new("srtp-echo-conf");
    let file = config(
        conf.path(),
        "strowger.toml",
        &[("symmetric = true", "symmetric = false")],
        "",
    );
    let (dir, s, tls, ca) = with_users_config("srtp-echo", &[("1001", "pw-srtp-1001")], Some(file));
    let speech = speech_wav(dir.path());
    let capture = Capture::start(
        dir.path(),
        &format!("udp portrange {}-{}", s.rtp.0, s.rtp.1),
    );
    let phone = Baresip::spawn_with(
        "127.0.0.1",
        dir.path(),
        "1001",
        &srtp_account(tls, "1001", "pw-srtp-1001"),
        &speech,
        &[],
        10,
        &srtp_config(&ca),
    );
    phone.wait_registered("1001 over TLS");
    phone.command(&format!("/dial sip:9196@{tls};transport=tls"));
    std::thread::sleep(Duration::from_secs(3));
    forge(s.rtp);
    let heard = phone.finish("1001 calling 9196 with SRTP");
    let datagrams = capture.finish();
    assert_heard(
        &heard,
        &read_wav(&speech).samples,
        "its speech (echo over SRTP)",
    );
    s.wait_log(
        "SRTP packet(s) since the last report that failed authentication",
        0,
    );
    assert_answered_cdrs(&s.wait_cdrs(1), 1, "9196");

    // On the wire, strowger's packets carry a tag and their payload is not the speech.
    let ours: Vec<_> = datagrams
        .iter()
        .filter(|(src, _, d)| (s.rtp.0..=s.rtp.1).contains(src) && d.len() > 12 && d[1] == 0)
        .collect();
    assert!(ours.len() > 100, "{} RTP packets from strowger", ours.len());
    assert!(
        ours.iter().all(|(.., d)| d.len() > 12 + 160),
        "a packet of plain G.711 length"
    );
    let as_g711 = pcmu_from(&datagrams, s.rtp);
    let (c, _) = best_correlation(
        &as_g711,
        &read_wav(&speech).samples,
        4000,
        24000,
        -8000..=8000,
    );
    assert!(
        c < 0.5,
        "the SRTP payload read as G.711 correlates {c:.3} with the speech"
    );
}

#[test]
fn an_srtp_phone_and_a_plain_phone_hear_each_other_through_a_bridge() {
    let (dir, s, tls, ca) = with_users_config(
        "srtp-bridge",
        &[("1001", "pw-srtp-1001"), ("1002", "pw-udp-1002")],
        None,
    );
    let speech = speech_wav(dir.path());
    let demo = common::repo_root().join("assets/demo.wav");
    let callee = Baresip::spawn(
        dir.path(),
        "1002",
        &account(s.sip, "1002", "pw-udp-1002", ";answermode=auto"),
        &demo,
        &[],
        14,
    );
    callee.wait_registered("1002 over UDP");
    let caller = Baresip::spawn_with(
        "127.0.0.1",
        dir.path(),
        "1001",
        &srtp_account(tls, "1001", "pw-srtp-1001"),
        &speech,
        &[],
        8,
        &srtp_config(&ca),
    );
    caller.wait_registered("1001 over TLS");
    caller.command(&format!("/dial sip:1002@{tls};transport=tls"));
    let heard_by_caller = caller.finish("1001 (SRTP) calling 1002");
    let heard_by_callee = callee.finish("1002 (RTP) answering");
    assert_heard(
        &heard_by_caller,
        &read_wav(&demo).samples,
        "1002's demo.wav, re-encrypted",
    );
    assert_heard(
        &heard_by_callee,
        &read_wav(&speech).samples,
        "1001's speech, decrypted",
    );
    assert_answered_cdrs(&s.wait_cdrs(1), 1, "1002");
}

/// The other way round: a plain phone calls a phone registered over TLS whose account takes
/// SRTP when offered (`mediaenc=srtp`). strowger offers it keys on RTP/AVP, the phone answers
/// with its own, and the leg to it is SRTP while the caller's stays plain.
#[test]
fn strowger_offers_sdes_to_a_phone_registered_over_tls() {
    let (dir, s, tls, ca) = with_users_config(
        "srtp-offer",
        &[("1001", "pw-srtp-1001"), ("1002", "pw-udp-1002")],
        None,
    );
    let speech = speech_wav(dir.path());
    let demo = common::repo_root().join("assets/demo.wav");
    let capture = Capture::start(
        dir.path(),
        &format!("udp portrange {}-{}", s.rtp.0, s.rtp.1),
    );
    let callee = Baresip::spawn_with(
        "127.0.0.1",
        dir.path(),
        "1001",
        &format!(
            "<sip:1001@{tls};transport=tls>;auth_pass=pw-srtp-1001;regint=600;audio_codecs=PCMU;\
             mediaenc=srtp;answermode=auto"
        ),
        &speech,
        &[],
        14,
        &srtp_config(&ca),
    );
    callee.wait_registered("1001 over TLS");
    let caller = Baresip::spawn(
        dir.path(),
        "1002",
        &account(s.sip, "1002", "pw-udp-1002", ""),
        &demo,
        &[&format!("/dial sip:1001@{}", s.sip)],
        8,
    );
    let heard_by_caller = caller.finish("1002 calling 1001");
    let heard_by_callee = callee.finish("1001 answering with SRTP");
    let datagrams = capture.finish();
    assert_heard(
        &heard_by_caller,
        &read_wav(&speech).samples,
        "1001's speech",
    );
    assert_heard(
        &heard_by_callee,
        &read_wav(&demo).samples,
        "1002's demo.wav",
    );
    // strowger's G.711 packets: plain to the caller, tagged to the callee.
    let lengths: Vec<usize> = datagrams
        .iter()
        .filter(|(src, _, d)| (s.rtp.0..=s.rtp.1).contains(src) && d.len() > 12 && d[1] == 0)
        .map(|(.., d)| d.len())
        .collect();
    let plain = lengths.iter().filter(|&&n| n == 12 + 160).count();
    let tagged = lengths.iter().filter(|&&n| n > 12 + 160).count();
    assert!(
        plain > 100 && tagged > 100,
        "{plain} plain, {tagged} SRTP packets"
    );
    assert_answered_cdrs(&s.wait_cdrs(1), 1, "1001");
}
