//! Call transfer through the strowger process: SIPp transfers a call by REFER from the callee's
//! side and from the caller's (tests/sipp/transfer_*.xml: 202, NOTIFY sipfrag 100 then 200),
//! and the transferee is checked to get the target's audio; a hand-written phone (common/sip.rs)
//! completes an attended transfer (REFER with Replaces) and takes over a call with an INVITE
//! with Replaces, with SIPp as the far ends, and SIPp takes over a call the same way; with two
//! workers, it completes an attended transfer whose consultation call the other worker holds,
//! and transfers to a target still ringing, a tone crossing the transferred call both ways;
//! baresip transfers its call with its own command.

use crate::common;

use common::audio::{dominant_freq, tone, tone_purity, ulaw_decode_all, ulaw_encode};
use common::baresip::Baresip;
use common::sip::{sdp, sdp_audio, Rtp, Uac};
use common::sipp::{Scenario, Sipp, SippProcess};
use common::switch::{default_config_trusting_loopback, Cdr, Opts};
use common::{wait_for, Strowger, TempDir};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A target that plays a 3 s tone and hangs up: the transferee hears it and the call ends.
const TONE_RULE: &str = "[[dialplan.contexts.default.rules]]\nexten = \"81990\"\n\
steps = [\"answer\", \"tone 1000 duration=3\", \"hangup\"]\n\n";

/// The embedded configuration trusting 127.0.0.1, with 81990 (`TONE_RULE`) in the default
/// context, written to `dir`.
fn config(dir: &Path) -> PathBuf {
    let path = default_config_trusting_loopback(dir);
    let text = std::fs::read_to_string(&path).unwrap();
    let marker = "# 2000-2999: bridged";
    assert!(text.contains(marker), "no {marker:?} in the default config");
    std::fs::write(&path, text.replace(marker, &format!("{TONE_RULE}{marker}"))).unwrap();
    path
}

/// strowger with `config` whose 2XXX go to `target`, with one worker, so that every call of
/// a test shares it (two workers: `a_phone_completes_an_attended_transfer_across_workers`).
fn strowger(label: &str, dir: &Path, target: &str) -> Strowger {
    Strowger::with(
        label,
        Opts {
            config_file: Some(config(dir)),
            vars: vec![("bridge_target".into(), target.into())],
            workers: Some(1),
            ..Opts::default()
        },
    )
}

/// The one CDR, with the transfer and the caller's audio in it.
fn one_cdr(s: &Strowger) -> Cdr {
    let cdrs = s.wait_cdrs(1);
    assert_eq!(cdrs.len(), 1, "{cdrs:?}");
    cdrs[0].clone()
}

/// The callee (SIPp, tests/sipp/transfer_uas_refer.xml) sends its caller (SIPp's uac, echoing
/// RTP) to 44444: the caller hears the demo in the dialog it had.
#[test]
fn sipp_callee_transfers_its_caller_to_the_demo() {
    let dir = TempDir::new("transfer-callee");
    let callee = Sipp::new(Scenario::File("transfer_uas_refer.xml"))
        .args(&["-key", "target", "44444", "-aa"])
        .spawn(None, dir.path());
    let s = strowger("transfer-callee", dir.path(), &callee.addr.to_string());
    Sipp::new(Scenario::Builtin("uac"))
        .service("2001")
        .duration_ms(4000)
        .rtp_echo()
        .run(s.sip, s.dir.path())
        .assert_ok(1);
    callee.finish().assert_ok(1);
    let cdr = one_cdr(&s);
    assert_eq!(cdr.str("transferred_to"), "44444", "{cdr:?}");
    assert_eq!(cdr.str("hangup_side"), "caller", "{cdr:?}");
    // The demo played to the caller after the transfer (3.5 s of 4) and came back echoed.
    assert!(cdr.num("packets_sent") >= 100.0, "{cdr:?}");
    assert!(cdr.num("packets_received") >= 50.0, "{cdr:?}");
}

/// The caller (SIPp, tests/sipp/transfer_uac_refer.xml) sends its callee (SIPp's uas, echoing
/// RTP) to 81990: the callee hears the tone, and strowger ends its call after it.
#[test]
fn sipp_caller_transfers_its_callee_to_a_tone() {
    let dir = TempDir::new("transfer-caller");
    let callee = Sipp::new(Scenario::Builtin("uas"))
        .rtp_echo()
        .spawn(None, dir.path());
    let s = strowger("transfer-caller", dir.path(), &callee.addr.to_string());
    Sipp::new(Scenario::File("transfer_uac_refer.xml"))
        .service("2001")
        .args(&["-key", "target", "81990", "-aa"])
        .run(s.sip, s.dir.path())
        .assert_ok(1);
    callee.finish().assert_ok(1);
    let cdr = one_cdr(&s);
    assert_eq!(cdr.str("transferred_to"), "81990", "{cdr:?}");
    assert_eq!(cdr.str("hangup_side"), "switch", "{cdr:?}");
    // The CDR's caller is the transferee now: the 3 s tone went to it and came back.
    assert!(cdr.num("packets_sent") >= 100.0, "{cdr:?}");
    assert!(cdr.num("packets_received") >= 50.0, "{cdr:?}");
}

/// `n` frames of PCMU silence.
fn frames(n: usize) -> Vec<Vec<u8>> {
    vec![vec![0xff; 160]; n]
}

/// A phone (hand-written UAC) answered by strowger for `exten`, with its RTP endpoint.
fn call(s: &Strowger, exten: &str) -> (Uac, Rtp) {
    let rtp = Rtp::bind();
    let mut uac = Uac::new(s.sip, exten);
    let ok = uac.invite(&sdp(rtp.port, &[(0, "PCMU/8000")], "sendrecv"));
    assert_eq!(ok.status(), Some(200), "{ok:?}");
    uac.ack("");
    (uac, rtp)
}

/// The messages phone `uac` gets within `limit`, requests answered 200, until `done` holds.
fn collect(
    uac: &Uac,
    limit: Duration,
    mut done: impl FnMut(&[common::sip::Msg]) -> bool,
) -> Vec<common::sip::Msg> {
    let end = Instant::now() + limit;
    let mut got = Vec::new();
    while !done(&got) {
        let Some(left) = end.checked_duration_since(Instant::now()) else {
            break;
        };
        if let Some(m) = uac.recv(left) {
            if m.method().is_some() {
                uac.respond(&m, 200);
            }
            got.push(m);
        }
    }
    got
}

/// The sipfrag status lines of the NOTIFYs among `msgs`, each NOTIFY once: a retransmission
/// (its CSeq again, sent when strowger took our 200 late on a loaded machine) is no new one.
fn sipfrags(msgs: &[common::sip::Msg]) -> Vec<String> {
    let mut seen = Vec::new();
    msgs.iter()
        .filter(|m| m.method() == Some("NOTIFY"))
        .filter(|m| {
            let cseq = m.header("cseq").unwrap_or_default();
            let new = !seen.contains(&cseq);
            seen.push(cseq);
            new
        })
        .map(|m| m.body.lines().next().unwrap_or_default().to_string())
        .collect()
}

/// A phone in two calls through strowger to two SIPp legs completes an attended transfer:
/// REFER in the first with Replaces naming the second. Both its dialogs end (its consultation at
/// once, the first after the NOTIFY 200) and the two far ends stay, bridged to each other.
#[test]
fn a_phone_completes_an_attended_transfer() {
    let dir = TempDir::new("transfer-attended");
    let far = Sipp::new(Scenario::Builtin("uas"))
        .calls(2, 10, 2)
        .rtp_echo()
        .spawn(None, dir.path());
    let mut s = strowger("transfer-attended", dir.path(), &far.addr.to_string());
    let (mut first, _r1) = call(&s, "2001");
    let (consult, _r2) = call(&s, "2002");
    let escaped = consult
        .replaces()
        .replace('@', "%40")
        .replace(';', "%3B")
        .replace('=', "%3D");
    let refer_to = format!("Refer-To: <sip:2002@{}?Replaces={escaped}>\r\n", s.sip);
    first.send_request("REFER", &refer_to, "");
    let got = collect(&first, Duration::from_secs(5), |m| {
        sipfrags(m).iter().any(|f| f.starts_with("SIP/2.0 2"))
    });
    assert!(got.iter().any(|m| m.status() == Some(202)), "{got:#?}");
    assert_eq!(sipfrags(&got), ["SIP/2.0 100 Trying", "SIP/2.0 200 OK"]);
    consult.expect_request("BYE", Duration::from_secs(5));
    first.expect_request("BYE", Duration::from_secs(5));
    // The far ends are in one call now: strowger's shutdown hangs both up.
    std::thread::sleep(Duration::from_millis(500));
    s.stop();
    far.finish().assert_ok(2);
    let cdrs = s.cdrs();
    assert_eq!(cdrs.len(), 2, "{cdrs:?}");
    let transferred = cdrs.iter().filter(|c| !c.is_null("transferred_to"));
    let to: Vec<&str> = transferred.map(|c| c.str("transferred_to")).collect();
    assert!(to.len() == 1 && to[0].contains("2002"), "{cdrs:?}");
}

/// A second phone takes over an answered call with an INVITE with Replaces: answered with SDP,
/// its audio reaches the far end (SIPp echoing it) and comes back, the replaced phone gets BYE;
/// replacing the same dialog again gets 481.
#[test]
fn a_phone_takes_over_a_call_with_an_invite_with_replaces() {
    let dir = TempDir::new("transfer-replaces");
    let far = Sipp::new(Scenario::Builtin("uas"))
        .rtp_echo()
        .spawn(None, dir.path());
    let s = strowger("transfer-replaces", dir.path(), &far.addr.to_string());
    let (old, _r) = call(&s, "2001");
    let mut rtp = Rtp::bind();
    let mut new = Uac::new(s.sip, "2001");
    let replaces = format!("Replaces: {}\r\n", old.replaces());
    let offer = sdp(rtp.port, &[(0, "PCMU/8000")], "sendrecv");
    new.send_request("INVITE", &replaces, &offer);
    let ok = new.final_response("INVITE", Duration::from_secs(5));
    assert_eq!(ok.status(), Some(200), "{ok:?}");
    new.invite_answered(&ok);
    new.ack("");
    old.expect_request("BYE", Duration::from_secs(5));
    rtp.remote = Some(sdp_audio(&ok.body).0);
    let back = rtp.send_frames(&frames(100), Duration::from_millis(500));
    assert!(back.len() >= 50, "{} packets echoed back", back.len());

    let mut again = Uac::new(s.sip, "2001");
    again.send_request("INVITE", &replaces, &offer);
    let r = again.final_response("INVITE", Duration::from_secs(5));
    assert_eq!(r.status(), Some(481), "{r:?}");
    again.invite_answered(&r);

    assert_eq!(new.bye().status(), Some(200));
    far.finish().assert_ok(1);
    let cdr = one_cdr(&s);
    assert!(cdr.str("transferred_to").contains("tester"), "{cdr:?}");
}

/// SIPp (tests/sipp/replaces_uac.xml, with `Require: replaces`) takes over a phone's call with
/// an INVITE with Replaces: answered with SDP, the phone gets BYE, and SIPp's own BYE ends the
/// call with the far end (SIPp's uas).
#[test]
fn sipp_takes_over_a_call_with_an_invite_with_replaces() {
    let dir = TempDir::new("transfer-sipp-replaces");
    let far = Sipp::new(Scenario::Builtin("uas"))
        .rtp_echo()
        .spawn(None, dir.path());
    let s = strowger("transfer-sipp-replaces", dir.path(), &far.addr.to_string());
    let (old, _r) = call(&s, "2001");
    Sipp::new(Scenario::File("replaces_uac.xml"))
        .service("2001")
        .args(&["-key", "replaces", &old.replaces()])
        .run(s.sip, s.dir.path())
        .assert_ok(1);
    old.expect_request("BYE", Duration::from_secs(1));
    far.finish().assert_ok(1);
    let cdr = one_cdr(&s);
    assert!(cdr.str("transferred_to").contains("sipp"), "{cdr:?}");
    assert_eq!(cdr.str("hangup_side"), "caller", "{cdr:?}");
}

/// A softphone transfers its call with its own command: baresip calls 2001 (SIPp's uas, echoing
/// RTP), then `/transfer sip:81990@strowger`; the uas ends up at 81990, hears its tone and is hung
/// up after it, and baresip's leg is released.
#[test]
fn baresip_transfers_its_call_with_its_transfer_command() {
    let dir = TempDir::new("transfer-baresip");
    let far = Sipp::new(Scenario::Builtin("uas"))
        .rtp_echo()
        .spawn(None, dir.path());
    let s = strowger("transfer-baresip", dir.path(), &far.addr.to_string());
    let phone = Baresip::spawn(
        dir.path(),
        "transferor",
        "<sip:tester@127.0.0.1>;regint=0;audio_codecs=PCMU",
        &common::repo_root().join("assets/demo.wav"),
        &[&format!("/dial sip:2001@{}", s.sip)],
        12,
    );
    let up = wait_for(Duration::from_secs(8), || {
        phone.log().contains("Call established").then_some(())
    });
    assert!(up.is_some(), "baresip's call: {}", phone.log());
    std::thread::sleep(Duration::from_millis(500));
    phone.command(&format!("/transfer sip:81990@{}", s.sip));
    far.finish().assert_ok(1);
    let cdr = one_cdr(&s);
    assert_eq!(
        cdr.str("transferred_to"),
        "81990",
        "{cdr:?}\n{}",
        phone.log()
    );
    assert!(
        cdr.num("packets_sent") >= 100.0,
        "the tone reached the uas: {cdr:?}"
    );
    assert!(
        cdr.num("packets_received") >= 50.0,
        "and came back: {cdr:?}"
    );
    phone.finish("transferring its call");
}

/// A Call-ID of a phone's new call that strowger with two workers hands to `worker`.
pub(crate) fn call_id_on(worker: usize, what: &str) -> String {
    (0..)
        .map(|i| format!("{what}-{i}@test.invalid"))
        .find(|c| switch::owner(c, 2) == worker)
        .unwrap()
}

/// A phone answered by strowger for `exten` in a call with Call-ID `call_id`, its RTP sent to
/// strowger's side of the call.
fn call_with_id(s: &Strowger, exten: &str, call_id: String) -> (Uac, Rtp) {
    let mut rtp = Rtp::bind();
    let mut uac = Uac::new(s.sip, exten);
    uac.call_id = call_id;
    let ok = uac.invite(&sdp(rtp.port, &[(0, "PCMU/8000")], "sendrecv"));
    assert_eq!(ok.status(), Some(200), "{ok:?}");
    uac.ack("");
    rtp.remote = Some(sdp_audio(&ok.body).0);
    (uac, rtp)
}

/// The far ends of a transfer through strowger with `workers` workers: the transferee (2001:
/// SIPp, tests/sipp/uas_media_at.xml, whose media is the returned RTP socket) and the target
/// (82001: SIPp running `target`, echoing RTP).
fn far_ends(
    label: &str,
    dir: &Path,
    target: &'static str,
    workers: usize,
) -> (Strowger, SippProcess, SippProcess, Rtp) {
    let heard = Rtp::bind();
    let transferee = Sipp::new(Scenario::File("uas_media_at.xml"))
        .args(&["-key", "media", &heard.port.to_string()])
        .spawn(None, dir);
    let target = Sipp::new(Scenario::File(target))
        .rtp_echo()
        .spawn(None, dir);
    let path = config(dir);
    let rule = format!(
        "[[dialplan.contexts.default.rules]]\nexten = \"82001\"\n\
         steps = [\"bridge sip:target@{} timeout=10\"]\n\n",
        target.addr
    );
    let text = std::fs::read_to_string(&path).unwrap();
    let marker = "# 2000-2999: bridged";
    std::fs::write(&path, text.replace(marker, &format!("{rule}{marker}"))).unwrap();
    let s = Strowger::with(
        label,
        Opts {
            config_file: Some(path),
            vars: vec![("bridge_target".into(), transferee.addr.to_string())],
            workers: Some(workers),
            ..Opts::default()
        },
    );
    (s, transferee, target, heard)
}

/// The phone's first call, to the transferee (2001) with Call-ID `call_id`; the transferee's
/// socket `heard` learns strowger's side of that call from the phone's speech.
pub(crate) fn first_call(s: &Strowger, call_id: String, heard: &mut Rtp) -> Uac {
    let (first, mut spoken) = call_with_id(s, "2001", call_id);
    spoken.send_frames(&frames(10), Duration::from_millis(200));
    heard
        .sock
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let mut buf = [0u8; 2048];
    let (_, from) = heard.sock.recv_from(&mut buf).expect("the phone's speech");
    heard.remote = Some(from);
    heard.recv_for(Duration::from_millis(300));
    first
}

/// The phone sends REFER in `first` to `exten` with Replaces `replaces` (naming its
/// consultation's dialog): 202, and NOTIFYs with sipfrag 100 then 200.
pub(crate) fn refer_replacing(s: &Strowger, first: &mut Uac, exten: &str, replaces: &str) {
    let escaped = replaces
        .replace('@', "%40")
        .replace(';', "%3B")
        .replace('=', "%3D");
    let refer_to = format!("Refer-To: <sip:{exten}@{}?Replaces={escaped}>\r\n", s.sip);
    first.send_request("REFER", &refer_to, "");
    // A browser's answer to its re-INVITE waits for its ICE gathering: 15 s on a loaded machine.
    let got = collect(first, Duration::from_secs(15), |m| {
        sipfrags(m).iter().any(|f| f.starts_with("SIP/2.0 2"))
    });
    assert!(got.iter().any(|m| m.status() == Some(202)), "{got:#?}");
    assert_eq!(sipfrags(&got), ["SIP/2.0 100 Trying", "SIP/2.0 200 OK"]);
}

/// The transferee speaks a 1 kHz tone, and the target's echo brings it back through the
/// transferred call.
fn tone_comes_back(heard: &mut Rtp) {
    let pcm = tone(1000.0, 8000 * 2, 8000.0);
    let sent: Vec<Vec<u8>> = pcm
        .chunks(160)
        .map(|c| c.iter().map(|&v| ulaw_encode(v)).collect())
        .collect();
    let back = heard.send_frames(&sent, Duration::from_millis(500));
    assert!(back.len() >= 50, "{} packets came back", back.len());
    let payload: Vec<u8> = back.iter().flat_map(|p| p.payload.clone()).collect();
    let echoed = ulaw_decode_all(&payload);
    let f = dominant_freq(&echoed);
    assert!((f - 1000.0).abs() <= 10.0, "the echo's tone is at {f} Hz");
    assert!(tone_purity(&echoed, f) > 0.5, "a clean tone");
}

/// Two CDRs: the consultation's, and the transferred call's, naming the target.
fn cdrs_name_the_target(s: &Strowger) {
    let cdrs = s.cdrs();
    assert_eq!(cdrs.len(), 2, "{cdrs:?}");
    let transferred = cdrs.iter().filter(|c| !c.is_null("transferred_to"));
    let to: Vec<&str> = transferred.map(|c| c.str("transferred_to")).collect();
    let named = |t: &str| t.contains("82001") || t.contains("target@");
    assert!(to.len() == 1 && named(to[0]), "{cdrs:?}");
}

/// With two workers, a phone's first call (to the transferee) is held by worker 0 and its
/// consultation call (to the target, tests/sipp/uas_reinvite.xml) by worker 1. The phone's
/// REFER with Replaces gets NOTIFY 100 then 200 and both its dialogs end; the target is
/// re-INVITEd to worker 0, and the transferee's tone comes back from the target's echo.
#[test]
fn a_phone_completes_an_attended_transfer_across_workers() {
    let dir = TempDir::new("transfer-workers");
    let (mut s, transferee, target, mut heard) =
        far_ends("transfer-workers", dir.path(), "uas_reinvite.xml", 2);
    let mut first = first_call(&s, call_id_on(0, "first"), &mut heard);
    let (consult, _r) = call_with_id(&s, "82001", call_id_on(1, "consult"));
    refer_replacing(&s, &mut first, "82001", &consult.replaces());
    consult.expect_request("BYE", Duration::from_secs(5));
    first.expect_request("BYE", Duration::from_secs(5));
    tone_comes_back(&mut heard);
    s.stop();
    transferee.finish().assert_ok(1);
    target.finish().assert_ok(1);
    cdrs_name_the_target(&s);
}

/// A semi-attended transfer through the process: the phone transfers while its consultation
/// still rings (the target, tests/sipp/uas_answer_late.xml, answers after a second). The
/// transferee gets the ringing target, the NOTIFY 200 comes when it answers, and the
/// transferee's tone comes back from the target's echo.
#[test]
fn a_phone_transfers_to_a_target_still_ringing() {
    let dir = TempDir::new("transfer-semi");
    let (mut s, transferee, target, mut heard) =
        far_ends("transfer-semi", dir.path(), "uas_answer_late.xml", 1);
    let mut first = first_call(&s, call_id_on(0, "first"), &mut heard);
    let rtp = Rtp::bind();
    let mut consult = Uac::new(s.sip, "82001");
    consult.send_invite(&sdp(rtp.port, &[(0, "PCMU/8000")], "sendrecv"));
    let ringing = wait_for(Duration::from_secs(5), || {
        consult
            .recv(Duration::from_millis(100))
            .filter(|m| m.status() == Some(180))
    })
    .expect("the target rings");
    consult.invite_answered(&ringing);
    refer_replacing(&s, &mut first, "82001", &consult.replaces());
    let end = consult.final_response("INVITE", Duration::from_secs(5));
    assert!(end.status() >= Some(300), "{end:?}");
    consult.invite_answered(&end);
    first.expect_request("BYE", Duration::from_secs(5));
    tone_comes_back(&mut heard);
    s.stop();
    transferee.finish().assert_ok(1);
    target.finish().assert_ok(1);
    cdrs_name_the_target(&s);
}
