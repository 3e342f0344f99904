//! Hold with music between real phones: two registered baresips in a call through strowger;
//! the callee puts the call on hold with its own hold command and the caller must hear the
//! default music class (Debian's asterisk-moh-opsound-wav, whose first file plays first) —
//! matched sample for sample against the file — until the callee resumes, when the callee's
//! tone comes back.

mod common;

use common::audio::{best_correlation, read_wav, rms, tone_purity};
use common::baresip::Baresip;
use common::switch::{run_cli, Opts};
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
    let account = |user: &str, password: &str, extra: &str| {
        format!(
            "<sip:{user}@127.0.0.1:{port}>;auth_pass={password};regint=600;\
             audio_codecs=PCMU{extra}",
            port = s.sip.port()
        )
    };
    let callee = Baresip::spawn(
        dir.path(),
        "1001",
        &account("1001", "pw-for-1001", ";answermode=auto"),
        &tone,
        &[],
        20,
    );
    let registered = wait_for(Duration::from_secs(10), || {
        callee.log().contains("200 OK").then_some(())
    });
    assert!(
        registered.is_some(),
        "1001 did not register:\n{}",
        callee.log()
    );
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

    let f = frames(&heard.samples);
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
        (30..=45).contains(&len),
        "about 4 s of music while held, not {len} frames: {summary}"
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
    let (c, found) = best_correlation(
        &heard.samples,
        &music.samples,
        at,
        8000,
        lag - 4000..=lag + 4000,
    );
    assert!(
        c > 0.9,
        "the held caller hears {FIRST_TRACK}: best correlation {c:.3} at lag {found}"
    );
    assert_eq!(s.wait_cdrs(1).len(), 1);
}
