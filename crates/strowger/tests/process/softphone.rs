//! Real softphones: Debian's baresip, headless, with file audio (aufile source; the sndfile
//! filter dumps what it decodes), bound to 127.0.0.1 only (common/baresip.rs). Unregistered, it
//! calls 9196 with espeak-ng speech and must hear that speech back, then calls 44444 and must
//! hear demo.wav (the public context: no password asked). Registered with passwords, two of
//! them call each other through strowger, the caller answering the 401 to its INVITE as its
//! user, and each must hear what the other sends.

use crate::common;

use common::audio::{best_correlation, read_wav, Wav};
use common::baresip::{account, Baresip};
use common::switch::{assert_answered_cdrs, run_cli, Opts};
use common::{Strowger, TempDir};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// How long baresip stays up (-t): the call lasts a little less.
const RUN_S: u32 = 8;

/// Speech from espeak-ng, as 8 kHz 16-bit mono (what aufile needs for a G.711 call).
pub(crate) fn speech_wav(dir: &Path) -> PathBuf {
    let raw = dir.join("speech22k.wav");
    let out = dir.join("speech.wav");
    let text = "Testing the strowger echo extension. The quick brown fox jumps over the lazy dog, \
                one two three four five six seven eight nine ten.";
    run(Command::new("espeak-ng")
        .args(["-v", "en-us", "-s", "150", "-w"])
        .arg(&raw)
        .arg(text));
    run(Command::new("sox")
        .arg(&raw)
        .args(["-r", "8000", "-c", "1", "-b", "16"])
        .arg(&out));
    out
}

fn run(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e} (run scripts/setup.sh)"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs baresip once, unregistered: dials `exten` at `sip`, plays `source`, quits after RUN_S
/// seconds, and returns what it decoded.
fn baresip_call(dir: &Path, sip: SocketAddr, exten: &str, source: &Path) -> Wav {
    Baresip::spawn(
        dir,
        exten,
        "<sip:tester@127.0.0.1>;regint=0;audio_codecs=PCMU",
        source,
        &[&format!("/dial sip:{exten}@{sip}")],
        RUN_S,
    )
    .finish(&format!("calling {exten}"))
}

/// Best correlation of 3 s of what baresip heard (from 0.5 s in) with `reference`.
pub(crate) fn assert_heard(heard: &Wav, reference: &[i16], what: &str) {
    let (c, lag) = best_correlation(&heard.samples, reference, 4000, 24000, -8000..=8000);
    println!("baresip vs {what}: correlation {c:.3} at lag {lag}");
    assert!(
        c > 0.9,
        "baresip's received audio vs {what}: best correlation {c:.3} at lag {lag} samples"
    );
}

/// The embedded configuration with `rtp.shared_ports = on`, written to `dir`.
fn shared_ports_config(dir: &Path, on: bool) -> PathBuf {
    let out = run_cli(&["default-config"], dir);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("\nshared_ports = true\n"),
        "on by default: {text}"
    );
    let config = dir.join("shared.toml");
    let line = format!("\nshared_ports = {on}\n");
    std::fs::write(&config, text.replace("\nshared_ports = true\n", &line)).unwrap();
    config
}

/// baresip calls the echo (9196) sending `speech` and hears it back.
fn assert_hears_its_echo(dir: &Path, sip: SocketAddr, speech: &Path) {
    let heard = baresip_call(dir, sip, "9196", speech);
    assert_heard(
        &heard,
        &read_wav(speech).samples,
        "the speech it sent (echo)",
    );
}

#[test]
fn baresip_hears_its_echo_and_the_demo() {
    let dir = TempDir::new("baresip");
    let s = Strowger::start("baresip");
    let speech = speech_wav(dir.path());
    assert_hears_its_echo(dir.path(), s.sip, &speech);

    let heard = baresip_call(dir.path(), s.sip, "44444", &speech);
    let demo = read_wav(&common::repo_root().join("assets/demo.wav"));
    assert_heard(&heard, &demo.samples, "assets/demo.wav");

    let mut cdrs = s.wait_cdrs(2);
    cdrs.sort_by(|a, b| a.num("start").total_cmp(&b.num("start")));
    assert_answered_cdrs(&cdrs[..1], 1, "9196");
    assert_answered_cdrs(&cdrs[1..], 1, "44444");
    for c in &cdrs {
        assert_eq!(c.str("context"), "public", "a stranger's call: {c:?}");
        assert!(c.is_null("user"), "{c:?}");
    }
}

/// baresip answers strowger's RTCP sender reports with receiver reports: the CDR carries the round
/// trip they give (loopback: a few ms at most) and the loss baresip saw (none).
#[test]
fn the_cdr_carries_the_round_trip_baresip_reports_over_rtcp() {
    let dir = TempDir::new("baresip-rtcp");
    let s = Strowger::start("baresip-rtcp");
    let speech = speech_wav(dir.path());
    Baresip::spawn(
        dir.path(),
        "9196",
        "<sip:tester@127.0.0.1>;regint=0;audio_codecs=PCMU",
        &speech,
        &[&format!("/dial sip:9196@{}", s.sip)],
        16,
    )
    .finish("calling 9196 for 16 s");
    let cdrs = s.wait_cdrs(1);
    assert_answered_cdrs(&cdrs, 1, "9196");
    // A number (not null) only once a receiver report answered one of strowger's sender reports.
    let rtt = cdrs[0].num("rtt_ms");
    assert!(
        (0.0..20.0).contains(&rtt),
        "round trip from baresip's receiver reports: {cdrs:?}"
    );
    assert_eq!(cdrs[0].num("remote_packets_lost"), 0.0, "{cdrs:?}");
}

/// rtp.shared_ports (set explicitly, as the default is): baresip's call shares its worker's one
/// RTP port with every other call there and is told apart by baresip's address; baresip still
/// hears its own speech.
#[test]
fn baresip_hears_its_echo_through_a_shared_rtp_port() {
    let dir = TempDir::new("baresip-shared");
    let s = Strowger::with(
        "baresip-shared",
        Opts {
            config_file: Some(shared_ports_config(dir.path(), true)),
            ..Opts::default()
        },
    );
    assert_hears_its_echo(dir.path(), s.sip, &speech_wav(dir.path()));
    assert_answered_cdrs(&s.wait_cdrs(1), 1, "9196");
}

/// The README's softphone steps with the default configuration: `strowger user add` for two
/// users (the default local store, relative to where strowger starts), both baresips register
/// with their passwords, 1002 dials 1001 (default dialplan: `bridge user/${EXTEN}`), 1001
/// answers by itself. Each phone must hear what the other sends: 1001 plays speech, 1002 plays
/// demo.wav. Both legs of the bridge are on their worker's shared RTP port (the default), each
/// phone told apart by its address.
#[test]
fn two_registered_baresips_call_each_other() {
    registered_baresips_call_each_other("baresip-reg", None);
}

/// The same with `rtp.shared_ports = false`: a port pair per call leg.
#[test]
fn two_registered_baresips_call_each_other_on_a_port_pair_per_leg() {
    registered_baresips_call_each_other("baresip-reg-pairs", Some(false));
}

fn registered_baresips_call_each_other(label: &str, shared_ports: Option<bool>) {
    let dir = TempDir::new(label);
    let home = dir.subdir("home");
    for (user, password) in [("1001", "pw-for-1001"), ("1002", "pw-for-1002")] {
        let out = run_cli(&["user", "add", user, "--password", password], &home);
        assert!(out.status.success(), "strowger user add {user}: {out:?}");
    }
    let s = Strowger::with(
        label,
        Opts {
            cwd: Some(home.clone()),
            config_file: shared_ports.map(|on| shared_ports_config(dir.path(), on)),
            ..Opts::default()
        },
    );
    let speech = speech_wav(dir.path());
    let demo = common::repo_root().join("assets/demo.wav");
    let account = |user: &str, password: &str, extra: &str| account(s.sip, user, password, extra);
    let callee = Baresip::spawn(
        dir.path(),
        "1001",
        &account("1001", "pw-for-1001", ";answermode=auto"),
        &speech,
        &[],
        RUN_S + 6,
    );
    callee.wait_registered("1001");
    let caller = Baresip::spawn(
        dir.path(),
        "1002",
        &account("1002", "pw-for-1002", ""),
        &demo,
        &[&format!("/dial sip:1001@{}", s.sip)],
        RUN_S,
    );
    let heard_by_caller = caller.finish("1002 calling 1001");
    let heard_by_callee = callee.finish("1001 answering");
    assert_heard(
        &heard_by_caller,
        &read_wav(&speech).samples,
        "1001's speech (heard by 1002)",
    );
    assert_heard(
        &heard_by_callee,
        &read_wav(&demo).samples,
        "1002's demo.wav (heard by 1001)",
    );
    let cdrs = s.wait_cdrs(1);
    assert_answered_cdrs(&cdrs, 1, "1001");
    // 1001 is no public extension: 1002's baresip answered the challenge as its user.
    assert_eq!(cdrs[0].str("user"), "1002", "{cdrs:?}");
    assert_eq!(cdrs[0].str("context"), "default", "{cdrs:?}");
    // baresip registers a Contact of its own making: sip:1001-0x…@127.0.0.1:PORT.
    assert!(
        cdrs[0].str("bridged_to").starts_with("sip:1001-"),
        "bridged to 1001's registered contact: {cdrs:?}"
    );
}
