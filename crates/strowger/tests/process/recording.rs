//! Whole-call recordings in real calls: a hand-written caller (tests/common/sip.rs) calls
//! through strowger to a hand-written callee, each sending its own tone, with `record-call`
//! in stereo (the caller left, the callee right), mixed mono, and stereo Opus (decoded with
//! opusdec); a SIPp caller and a SIPp callee, each playing its own speech from a pcap, are
//! recorded in stereo; a call recorded onto a full disk (a 64 KiB tmpfs in a private mount
//! namespace) completes normally while its CDR says the recording is incomplete, the log names
//! the file and /metrics counts it; a few SIPp calls recorded at once each leave a file as long
//! as their CDR's billable time; and a call under way when strowger is stopped (SIGTERM) leaves
//! a whole file.

use crate::common;

use common::api::Api;
use common::audio::{best_correlation, dominant_freq, read_wav, tone, tone_purity, ulaw_encode};
use common::pcap::Stream;
use common::sip::{sdp, sdp_audio, Rtp, Uac, Uas, DTMF, PCMU};
use common::sipp::Sipp;
use common::switch::{Cdr, Opts};
use common::Strowger;
use std::path::Path;
use std::time::Duration;

/// The caller's tone and the callee's.
const CALLER_HZ: f64 = 440.0;
const CALLEE_HZ: f64 = 1000.0;
/// How long each side talks.
const TALK_SAMPLES: usize = 8000 * 3;

/// Strowger with the default dialplan plus 3101 (stereo WAV), 3102 (mono WAV) and 3103
/// (stereo Opus), each recording then bridging to `callee`.
fn start(label: &str, callee: std::net::SocketAddr) -> (Strowger, common::TempDir) {
    let dir = common::TempDir::new(&format!("{label}-config"));
    let default =
        common::switch::trusting_loopback(include_str!("../../../switch/src/default.toml"));
    let bridge = "\"bridge sip:2000@${bridge_target} timeout=10\"";
    let rules = [
        ("3101", "calls/stereo.wav mix=stereo"),
        ("3102", "calls/mono.wav"),
        ("3103", "calls/stereo.opus mix=stereo format=opus"),
    ]
    .map(|(exten, args)| {
        format!(
            "[[dialplan.contexts.default.rules]]\nexten = \"{exten}\"\n\
             steps = [\"record-call {args}\", {bridge}]\n\n"
        )
    })
    .concat();
    let config = default.replacen("# Echo test.", &format!("{rules}# Echo test."), 1);
    assert!(config.contains("3103"), "default.toml's echo rule moved");
    let path = dir.path().join("strowger.toml");
    std::fs::write(&path, config).unwrap();
    let s = Strowger::with(
        label,
        Opts {
            config_file: Some(path),
            vars: vec![("bridge_target".to_string(), callee.to_string())],
            ..Opts::default()
        },
    );
    (s, dir)
}

/// 20 ms µ-law frames of a tone.
fn frames(hz: f64) -> Vec<Vec<u8>> {
    tone(hz, TALK_SAMPLES, 8000.0)
        .chunks(160)
        .map(|c| c.iter().map(|&s| ulaw_encode(s)).collect())
        .collect()
}

/// The caller calls `exten`, the callee answers; both send their tone at once for 3 s, then
/// the caller hangs up. Returns the call's CDR.
fn bridged_call(s: &Strowger, uas: &Uas, exten: &str) -> Cdr {
    let mut caller_rtp = Rtp::bind();
    let mut callee_rtp = Rtp::bind();
    let mut uac = Uac::new(s.sip, exten);
    uac.send_invite(&sdp(caller_rtp.port, &[PCMU, DTMF], "sendrecv"));
    let offer = uas.answer(&sdp(callee_rtp.port, &[PCMU], "sendrecv"));
    callee_rtp.remote = Some(sdp_audio(&offer.body).0);
    let resp = uac.final_response("INVITE", Duration::from_secs(10));
    assert_eq!(resp.status(), Some(200), "INVITE to {exten}: {resp:?}");
    uac.invite_answered(&resp);
    caller_rtp.remote = Some(sdp_audio(&resp.body).0);
    uac.ack("");
    uas.serve(Duration::from_millis(200));

    let from_callee = frames(CALLEE_HZ);
    let callee = std::thread::spawn(move || {
        callee_rtp.send_frames(&from_callee, Duration::ZERO);
    });
    caller_rtp.send_frames(&frames(CALLER_HZ), Duration::ZERO);
    callee.join().unwrap();
    assert_eq!(uac.bye().status(), Some(200));
    uas.serve(Duration::from_millis(200));
    let cdrs = s.wait_cdrs(1);
    cdrs.into_iter()
        .find(|c| c.str("exten") == exten)
        .expect("the call's CDR")
}

/// The recording's name, duration and completeness in `cdr`.
fn assert_recorded(cdr: &Cdr, file: &str, complete: bool) -> f64 {
    assert_eq!(cdr.str("recording"), file, "{cdr:?}");
    let flag = format!("\"recording_complete\":{complete}");
    assert!(cdr.line.contains(&flag), "{flag} in {cdr:?}");
    let secs = cdr.num("recording_s");
    // From the first step to the hang-up: the call's whole length.
    assert!(
        (cdr.num("duration_s") - secs).abs() < 0.2,
        "recording {secs} s of a {} s call",
        cdr.num("duration_s")
    );
    secs
}

/// A file the writer thread finishes just after the call ends.
fn finished(path: &Path) -> common::audio::Wav {
    std::thread::sleep(Duration::from_millis(300));
    read_wav(path)
}

/// Left and right of interleaved stereo.
fn split(samples: &[i16]) -> (Vec<i16>, Vec<i16>) {
    let left = samples.iter().step_by(2).copied().collect();
    let right = samples.iter().skip(1).step_by(2).copied().collect();
    (left, right)
}

/// Each channel holds its own side's tone alone and correlates with what that side sent.
fn assert_stereo(wav: &common::audio::Wav, what: &str) {
    assert_eq!((wav.rate, wav.channels), (8000, 2), "{what}");
    let (left, right) = split(&wav.samples);
    let sides = [
        ("left", &left, CALLER_HZ, CALLEE_HZ),
        ("right", &right, CALLEE_HZ, CALLER_HZ),
    ];
    for (channel, x, hz, other) in sides {
        let (f, purity, leak) = (dominant_freq(x), tone_purity(x, hz), tone_purity(x, other));
        let sent = tone(hz, TALK_SAMPLES, 8000.0);
        let (c, lag) = best_correlation(x, &sent, 8000, 8000, -8000..=8000);
        println!(
            "{what} {channel}: {f} Hz, purity {purity:.2}, other side {leak:.3}, correlation {c:.3} at {lag}"
        );
        assert_eq!(f, hz, "{what}: the {channel} channel's tone");
        assert!(
            purity > 0.6,
            "{what}: the {channel} channel is mostly its side's tone"
        );
        assert!(
            leak < 0.02,
            "{what}: the {channel} channel has none of the other side"
        );
        assert!(
            c > 0.8,
            "{what}: the {channel} channel vs what its side sent"
        );
    }
}

#[test]
fn a_stereo_recording_has_the_caller_left_and_the_callee_right() {
    let uas = Uas::bind();
    let (s, _config) = start("record-stereo", uas.addr());
    let cdr = bridged_call(&s, &uas, "3101");
    let secs = assert_recorded(&cdr, "calls/stereo.wav", true);
    let wav = finished(&s.data_dir().join("calls/stereo.wav"));
    let file_secs = wav.samples.len() as f64 / 2.0 / 8000.0;
    assert!(
        (file_secs - secs).abs() < 0.001,
        "file {file_secs} s, CDR {secs} s"
    );
    assert_stereo(&wav, "stereo WAV");
}

#[test]
fn a_mono_recording_mixes_both_sides() {
    let uas = Uas::bind();
    let (s, _config) = start("record-mono", uas.addr());
    let cdr = bridged_call(&s, &uas, "3102");
    assert_recorded(&cdr, "calls/mono.wav", true);
    let wav = finished(&s.data_dir().join("calls/mono.wav"));
    assert_eq!((wav.rate, wav.channels), (8000, 1));
    // Judged window by window: over the whole file the tones' share falls with the silence
    // before and after the talk, and with any frame a busy machine placed a little off, which
    // breaks the tones' phase across the file (not within 100 ms).
    let windows: Vec<(f64, f64)> = wav
        .samples
        .chunks_exact(MIX_WINDOW)
        .map(|w| (tone_purity(w, CALLER_HZ), tone_purity(w, CALLEE_HZ)))
        .collect();
    let mixed = windows
        .iter()
        .filter(|&&(a, b)| a > 0.25 && b > 0.25 && a + b > 0.8)
        .count();
    println!(
        "mono: {mixed} of {} windows hold both tones alone: {windows:.2?}",
        windows.len()
    );
    // Both sides talk for the same 3 s at once: all but their start and end hold both.
    assert!(
        mixed * MIX_WINDOW >= TALK_SAMPLES * 2 / 3,
        "the mix is the two tones in {mixed} windows of 100 ms, of {} talked",
        TALK_SAMPLES / MIX_WINDOW
    );
}

/// Samples in a window of the mono mix judged on its own (100 ms: whole cycles of both tones).
const MIX_WINDOW: usize = 800;

#[test]
fn an_opus_recording_decodes_to_both_sides() {
    let uas = Uas::bind();
    let (s, _config) = start("record-opus", uas.addr());
    let cdr = bridged_call(&s, &uas, "3103");
    let secs = assert_recorded(&cdr, "calls/stereo.opus", true);
    std::thread::sleep(Duration::from_millis(300));
    let opus = s.data_dir().join("calls/stereo.opus");
    let wav = s.dir.path().join("decoded.wav");
    let out = std::process::Command::new("opusdec")
        .args(["--quiet", "--rate", "8000"])
        .arg(&opus)
        .arg(&wav)
        .output()
        .expect("run opusdec (opus-tools)");
    assert!(out.status.success(), "opusdec: {out:?}");
    let wav = read_wav(&wav);
    let file_secs = wav.samples.len() as f64 / 2.0 / 8000.0;
    assert!(
        (file_secs - secs).abs() < 0.01,
        "decoded {file_secs} s, CDR {secs} s"
    );
    assert_stereo(&wav, "stereo Opus");
}

/// Outer: the disk-full test in its own mount namespace.
#[test]
fn a_call_recorded_onto_a_full_disk_completes_and_its_recording_is_incomplete() {
    common::netns::in_private_mount_ns("full_disk_inner");
}

#[test]
#[ignore = "runs inside a private mount namespace (the test above)"]
fn full_disk_inner() {
    common::netns::assert_isolated();
    let uas = Uas::bind();
    let (s, _config) = start("record-full", uas.addr());
    let calls = s.data_dir().join("calls");
    std::fs::create_dir_all(&calls).unwrap();
    let mount = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
        .arg(&calls)
        .status()
        .expect("run mount");
    assert!(
        mount.success(),
        "mount a 64 KiB tmpfs on {}",
        calls.display()
    );
    // 3 s of stereo WAV is 96 KB: the disk fills two seconds in.
    let cdr = bridged_call(&s, &uas, "3101");
    assert_recorded(&cdr, "calls/stereo.wav", false);
    cdr.assert_answered("3101");
    let log = s.stderr();
    assert!(
        log.contains("recording") && log.contains("No space left on device"),
        "the full disk is logged:\n{log}"
    );
    let named = format!(
        "recording {} is incomplete",
        calls.join("stereo.wav").display()
    );
    assert!(log.contains(&named), "{named} in the log:\n{log}");
    assert_eq!(incomplete_total(&s), 1.0);
    let _ = std::process::Command::new("umount").arg(&calls).status();
}

/// The demo extension 9195: echo, recorded in stereo under the call's Call-ID.
#[test]
fn the_demo_extension_records_an_echo_call_in_stereo() {
    let uas = Uas::bind();
    let (s, _config) = start("record-demo", uas.addr());
    let mut rtp = Rtp::bind();
    let mut uac = s.answered("9195", &[PCMU, DTMF], &mut rtp);
    rtp.send_frames(&frames(CALLER_HZ), Duration::from_millis(200));
    assert_eq!(uac.bye().status(), Some(200));
    let cdr = s.wait_cdrs(1).remove(0);
    let file = format!("calls/{}.wav", cdr.str("call_id"));
    assert_recorded(&cdr, &file, true);
    let wav = finished(&s.data_dir().join(&file));
    assert_eq!(wav.channels, 2);
    let (left, right) = split(&wav.samples);
    assert_eq!(dominant_freq(&left), CALLER_HZ, "the caller, left");
    assert_eq!(dominant_freq(&right), CALLER_HZ, "its echo, right");
}

/// `strowger_recordings_incomplete_total` on /metrics.
fn incomplete_total(s: &Strowger) -> f64 {
    let metrics = Api::of(s).text("/metrics");
    let line = metrics
        .lines()
        .find(|l| l.starts_with("strowger_recordings_incomplete_total "))
        .unwrap_or_else(|| panic!("strowger_recordings_incomplete_total in:\n{metrics}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// Four SIPp callers at once call 9195 (answer, record in stereo under the Call-ID, echo),
/// each playing 2 s of speech: every call leaves a whole WAV as long as its CDR's billable time
/// (±100 ms), and /metrics counts no incomplete recording.
#[test]
fn recordings_of_calls_at_once_are_as_long_as_their_billable_time() {
    const CALLS: usize = 4;
    let demo = read_wav(&common::repo_root().join("assets/demo.wav")).samples;
    let mut media = Stream::default();
    media.audio(&demo[..8000 * 2]);
    let uas = Uas::bind();
    let (s, _config) = start("record-at-once", uas.addr());
    let hold = media.duration() + Duration::from_millis(500);
    Sipp::media_caller("9195", &media, true, hold)
        .calls(CALLS as u32, CALLS as u32, CALLS as u32)
        .run(s.sip, s.dir.path())
        .assert_ok(CALLS as u64);
    let cdrs = s.wait_cdrs(CALLS);
    std::thread::sleep(Duration::from_millis(300));
    for cdr in &cdrs {
        let file = format!("calls/{}.wav", cdr.str("call_id"));
        assert_recorded(cdr, &file, true);
        let wav = read_wav(&s.data_dir().join(&file));
        assert_eq!((wav.rate, wav.channels), (8000, 2), "{file}");
        let (file_secs, billable) = (wav.samples.len() as f64 / 16_000.0, cdr.num("billable_s"));
        println!("{file}: {file_secs:.3} s, billable {billable:.3} s");
        assert!(
            (file_secs - billable).abs() <= 0.1,
            "{file}: {file_secs} s of a call billed {billable} s"
        );
    }
    assert_eq!(incomplete_total(&s), 0.0);
    // The writers run at their workers' priority, not below it (where a busy host starved them).
    let nice = niceness(s.pid().expect("strowger runs"));
    let of = |prefix: &str| -> Vec<i64> {
        let n = nice.iter().filter(|(name, _)| name.starts_with(prefix));
        n.map(|&(_, v)| v).collect()
    };
    let (writers, workers) = (of("recordings-"), of("worker-"));
    assert!(!writers.is_empty(), "a recordings thread in {nice:?}");
    assert!(
        writers.iter().all(|w| workers.contains(w)),
        "writers' nice {writers:?}, workers' {workers:?}"
    );
}

/// Each thread of process `pid`: its name and nice value (/proc/PID/task/TID/stat).
fn niceness(pid: u32) -> Vec<(String, i64)> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("stat")).ok())
        .map(|stat| {
            let (open, close) = (stat.find('(').unwrap(), stat.rfind(')').unwrap());
            // After the name: state is field 3, nice field 19.
            let nice = stat[close + 2..]
                .split(' ')
                .nth(16)
                .unwrap()
                .parse()
                .unwrap();
            (stat[open + 1..close].to_string(), nice)
        })
        .collect()
}

/// SIPp calls 3101 (stereo WAV) and a SIPp callee answers, each playing 3 s of its own speech
/// (two parts of the demo announcement): the left channel is the caller's speech, the right
/// the callee's, and neither is the other's.
#[test]
fn sipp_caller_and_callee_are_recorded_left_and_right() {
    let demo = read_wav(&common::repo_root().join("assets/demo.wav")).samples;
    let (caller, callee) = (&demo[..8000 * 3], &demo[8000 * 10..8000 * 13]);
    let mut callee_media = Stream::default();
    callee_media.audio(callee);
    let runs = common::TempDir::new("record-sipp-callee");
    let uas = Sipp::media_callee(&callee_media).spawn(None, runs.path());
    let (s, _config) = start("record-sipp", uas.addr);
    let mut caller_media = Stream::default();
    caller_media.audio(caller);
    let hold = caller_media.duration() + Duration::from_millis(500);
    Sipp::media_caller("3101", &caller_media, true, hold)
        .run(s.sip, s.dir.path())
        .assert_ok(1);
    uas.finish().assert_ok(1);
    let cdr = s.wait_cdrs(1).remove(0);
    let secs = assert_recorded(&cdr, "calls/stereo.wav", true);
    let wav = finished(&s.data_dir().join("calls/stereo.wav"));
    assert_eq!((wav.rate, wav.channels), (8000, 2));
    assert!((wav.samples.len() as f64 / 16_000.0 - secs).abs() < 0.001);
    let (left, right) = split(&wav.samples);
    // A second of each channel from 1 s in, against each side's speech.
    let lags = -16_000..=16_000;
    let with = |x: &[i16], sent: &[i16]| best_correlation(x, sent, 8000, 8000, lags.clone()).0;
    let (ll, lr) = (with(&left, caller), with(&left, callee));
    let (rr, rl) = (with(&right, callee), with(&right, caller));
    println!("left: caller {ll:.3}, callee {lr:.3}; right: callee {rr:.3}, caller {rl:.3}");
    assert!(ll > 0.9, "the left channel is the caller's speech: {ll:.3}");
    assert!(
        rr > 0.9,
        "the right channel is the callee's speech: {rr:.3}"
    );
    assert!(
        lr < 0.5 && rl < 0.5,
        "each channel has none of the other side"
    );
}

/// strowger is stopped (SIGTERM) 2 s into a recorded call (9195, echo): the call is ended, and
/// before the process exits its writer completes the file — a WAV as long as the CDR says,
/// holding the caller's tone — and the CDR says the recording is complete.
#[test]
fn a_call_recorded_when_strowger_is_stopped_leaves_a_whole_file() {
    let uas = Uas::bind();
    let (mut s, _config) = start("record-sigterm", uas.addr());
    let mut rtp = Rtp::bind();
    let _uac = s.answered("9195", &[PCMU, DTMF], &mut rtp);
    rtp.send_frames(&frames(CALLER_HZ)[..100], Duration::ZERO);
    assert!(s.stop().success(), "strowger exits cleanly");
    let cdr = s.cdrs().remove(0);
    assert_eq!(cdr.str("hangup_side"), "switch", "{cdr:?}");
    let file = format!("calls/{}.wav", cdr.str("call_id"));
    let secs = assert_recorded(&cdr, &file, true);
    assert!((2.0..3.0).contains(&secs), "{secs} s recorded");
    // No waiting: the process is gone, so the file is as it will stay.
    let wav = read_wav(&s.data_dir().join(&file));
    assert_eq!((wav.rate, wav.channels), (8000, 2));
    let file_secs = wav.samples.len() as f64 / 16_000.0;
    assert!(
        (file_secs - secs).abs() < 0.001,
        "file {file_secs} s, CDR {secs} s"
    );
    let (left, _) = split(&wav.samples);
    assert_eq!(dominant_freq(&left), CALLER_HZ, "the caller, left");
}
