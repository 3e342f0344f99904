//! Hold with music between real phones: a callee (two registered baresips, the callee holding
//! with its own hold command; a SIPp phone running tests/sipp/uas_hold.xml) puts the call on
//! hold and the caller must hear the default music class (Debian's asterisk-moh-opsound-wav,
//! whose first file plays first) — matched sample for sample against the file — until the
//! callee resumes, when the callee's tone comes back.

use crate::common;

use common::audio::{
    best_correlation, read_wav, rms, tone, tone_purity, ulaw_decode_all, ulaw_encode,
};
use common::baresip::{account, Baresip};
use common::sip::{sdp, sdp_audio, Rtp, Uac, PCMU};
use common::sipp::{Scenario, Sipp};
use common::switch::{default_config_trusting_loopback, run_cli, Opts};
use common::{tail, wait_for, Strowger, TempDir};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The default class's first track (files play in name order).
const FIRST_TRACK: &str = "/usr/share/asterisk/moh/macroform-cold_day.wav";
/// Samples per analysed frame: 100 ms at 8 kHz.
const FRAME: usize = 800;

/// A 1 kHz tone, 8 kHz 16-bit mono, long enough for the whole call.
fn tone_wav(dir: &Path) -> PathBuf {
    let out = dir.join("tone.wav");
    let status = Command::new("sox")
        .args(["-n", "-r", "8000", "-c", "1", "-b", "16"])
        .arg(&out)
        .args(["synth", "40", "sine", "1000", "vol", "0.5"])
        .status()
        .expect("sox (scripts/setup.sh installs it)");
    assert!(status.success());
    out
}

/// The frames of `x`: whether each is the callee's tone (most of its energy at 1 kHz), or
/// other sound, or silence.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Heard {
    Tone,
    Other,
    Quiet,
}

fn frames(x: &[i16]) -> Vec<Heard> {
    x.chunks_exact(FRAME)
        .map(|f| match (rms(f) > 200.0, tone_purity(f, 1000.0) > 0.8) {
            (false, _) => Heard::Quiet,
            (true, true) => Heard::Tone,
            (true, false) => Heard::Other,
        })
        .collect()
}

/// The longest run of frames that are `what`: (first frame, length).
fn longest_run(f: &[Heard], what: Heard) -> (usize, usize) {
    let mut best = (0, 0);
    let mut start = 0;
    for (i, h) in f.iter().enumerate() {
        if *h != what {
            start = i + 1;
        } else if i + 1 - start > best.1 {
            best = (start, i + 1 - start);
        }
    }
    best
}

#[test]
fn a_baresip_that_holds_leaves_the_other_hearing_music_on_hold_until_it_resumes() {
    assert!(
        Path::new(FIRST_TRACK).exists(),
        "{FIRST_TRACK} missing: run scripts/setup.sh (asterisk-moh-opsound-wav)"
    );
    let dir = TempDir::new("hold-baresip");
    let home = dir.subdir("home");
    for (user, password) in [("1001", "pw-for-1001"), ("1002", "pw-for-1002")] {
        let out = run_cli(&["user", "add", user, "--password", password], &home);
        assert!(out.status.success(), "strowger user add {user}: {out:?}");
    }
    let s = Strowger::with(
        "hold-baresip",
        Opts {
            cwd: Some(home.clone()),
            ..Opts::default()
        },
    );
    let tone = tone_wav(dir.path());
    let account = |user: &str, password: &str, extra: &str| account(s.sip, user, password, extra);
    let callee = Baresip::spawn(
        dir.path(),
        "1001",
        &account("1001", "pw-for-1001", ";answermode=auto"),
        &tone,
        &[],
        20,
    );
    callee.wait_registered("1001");
    let caller = Baresip::spawn(
        dir.path(),
        "1002",
        &account("1002", "pw-for-1002", ""),
        &tone,
        &[&format!("/dial sip:1001@{}", s.sip)],
        14,
    );
    let up = wait_for(Duration::from_secs(10), || {
        callee.log().contains("Call established").then_some(())
    });
    assert!(
        up.is_some(),
        "no call:\n{}\nstrowger:\n{}",
        callee.log(),
        s.stderr()
    );
    std::thread::sleep(Duration::from_secs(3));
    callee.command("/hold");
    std::thread::sleep(Duration::from_secs(4));
    callee.command("/resume");
    let heard = caller.finish("1002 calling 1001");
    let callee_log = callee.log();
    callee.finish("1001 holding");
    assert!(
        s.stderr().contains("sendonly") || callee_log.to_lowercase().contains("hold"),
        "the callee held the call:\n{}",
        tail(&callee_log, 30)
    );

    assert_music_while_held(&heard.samples, 30..=45);
    assert_eq!(s.wait_cdrs(1).len(), 1);
}

/// `heard` is the callee's tone, then the class's first track from its start for a number of
/// 100 ms frames in `held`, then the tone again.
fn assert_music_while_held(heard: &[i16], held: std::ops::RangeInclusive<usize>) {
    let f = frames(heard);
    let (start, len) = longest_run(&f, Heard::Other);
    let summary: String = f
        .iter()
        .map(|h| match h {
            Heard::Tone => 't',
            Heard::Other => 'M',
            Heard::Quiet => '.',
        })
        .collect();
    println!("what the caller heard, per 100 ms: {summary}");
    assert!(
        held.contains(&len),
        "music while held for {held:?} frames, not {len}: {summary}"
    );
    let tone_before = f[..start].iter().filter(|h| **h == Heard::Tone).count();
    let tone_after = f[start + len..]
        .iter()
        .filter(|h| **h == Heard::Tone)
        .count();
    assert!(
        tone_before >= 15 && tone_after >= 15,
        "the callee's tone before the hold and after the resume: {summary}"
    );
    // The music is the class's first file from its beginning: 1 s of what was heard, 0.5 s
    // into the hold, matches the file at an offset of about 0.5 s.
    let music = read_wav(Path::new(FIRST_TRACK));
    assert_eq!(music.rate, 8000);
    let at = (start + 5) * FRAME;
    let lag = -(start as isize * FRAME as isize);
    let (c, found) = best_correlation(heard, &music.samples, at, 8000, lag - 4000..=lag + 4000);
    assert!(
        c > 0.9,
        "the held caller hears {FIRST_TRACK}: best correlation {c:.3} at lag {found}"
    );
}

/// A SIPp phone (tests/sipp/uas_hold.xml, echoing what it hears) answers 2001, holds the call
/// 2 s in and resumes it 3 s later; the caller, sending a 1 kHz tone, hears its tone, the music
/// while held, then its tone again.
#[test]
fn a_sipp_phone_holds_and_resumes_and_the_caller_hears_music_in_between() {
    let dir = TempDir::new("hold-sipp");
    let uas = Sipp::new(Scenario::File("uas_hold.xml"))
        .rtp_echo()
        .spawn(None, dir.path());
    let s = Strowger::with(
        "hold-sipp",
        Opts {
            config_file: Some(default_config_trusting_loopback(dir.path())),
            vars: vec![("bridge_target".into(), uas.addr.to_string())],
            ..Opts::default()
        },
    );
    let mut rtp = Rtp::bind();
    let mut uac = Uac::new(s.sip, "2001");
    let ok = uac.invite(&sdp(rtp.port, &[PCMU], "sendrecv"));
    assert_eq!(ok.status(), Some(200), "{ok:?}");
    uac.ack("");
    rtp.remote = Some(sdp_audio(&ok.body).0);
    let frames: Vec<Vec<u8>> = tone(1000.0, 8000 * 7, 12000.0)
        .chunks(160)
        .map(|f| f.iter().map(|&x| ulaw_encode(x)).collect())
        .collect();
    let mut got = rtp.send_frames(&frames, Duration::from_millis(200));
    assert_eq!(uac.bye().status(), Some(200));
    uas.finish().assert_ok(1);
    got.sort_by_key(|p| p.at);
    let heard: Vec<i16> = got
        .iter()
        .flat_map(|p| ulaw_decode_all(&p.payload))
        .collect();
    assert_music_while_held(&heard, 25..=35);
}
