//! Codec quality and interop, black-box through `strowger codec`: espeak-ng speech
//! (synthesized here) round-trips through every codec and is scored by aligned
//! correlation and SNR against the input, next to sox's own GSM round trip;
//! strowger's GSM decodes with sox, strowger's Ogg Opus with opusdec, and Speex both ways with
//! ffmpeg (its own Speex decoder, and libspeex encoding); `codec transcode` against sox.
//! (PESQ is not used: the `pesq` pip package is not installed by setup.sh.)

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_strowger")
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn dir(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("strowger-codecs-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Samples of a 16-bit mono WAV (any header layout sox or strowger writes).
fn read_wav(path: &Path) -> (u32, Vec<i16>) {
    let b = std::fs::read(path).unwrap();
    let mut i = 12;
    let mut rate = 0;
    while i + 8 <= b.len() {
        let len = u32::from_le_bytes(b[i + 4..i + 8].try_into().unwrap()) as usize;
        if &b[i..i + 4] == b"fmt " {
            rate = u32::from_le_bytes(b[i + 12..i + 16].try_into().unwrap());
        }
        if &b[i..i + 4] == b"data" {
            let end = (i + 8 + len).min(b.len());
            let pcm = b[i + 8..end]
                .chunks_exact(2)
                .map(|c| i16::from_le_bytes([c[0], c[1]]))
                .collect();
            return (rate, pcm);
        }
        i += 8 + len + (len & 1);
    }
    panic!("{}: no data", path.display())
}

/// (correlation, SNR in dB) of `b` against `a` at the best lag up to 50 ms.
fn score(a: &[i16], b: &[i16]) -> (f64, f64) {
    let mut best = (f64::MIN, 0usize);
    for lag in 0..400 {
        let n = a.len().min(b.len().saturating_sub(lag));
        let (mut ab, mut aa, mut bb) = (0.0, 0.0, 0.0);
        for i in 0..n {
            let (x, y) = (a[i] as f64, b[i + lag] as f64);
            ab += x * y;
            aa += x * x;
            bb += y * y;
        }
        let c = ab / (aa * bb).sqrt().max(1.0);
        if c > best.0 {
            best = (c, lag);
        }
    }
    let (c, lag) = best;
    let n = a.len().min(b.len() - lag);
    let (mut sig, mut err) = (0.0, 0.0);
    for i in 0..n {
        let (x, y) = (a[i] as f64, b[i + lag] as f64);
        sig += x * x;
        err += (x - y) * (x - y);
    }
    (c, 10.0 * (sig / err.max(1.0)).log10())
}

fn speech(d: &Path) -> PathBuf {
    let raw = d.join("speech22k.wav");
    run(Command::new("espeak-ng").arg("-w").arg(&raw).arg(
        "Please hold the line. Your call is important to us, and an operator will answer shortly.",
    ));
    let wav = d.join("speech.wav");
    run(Command::new("sox")
        .arg(&raw)
        .args(["-b16", "-c1", "-r8000"])
        .arg(&wav));
    wav
}

#[test]
fn every_codec_round_trips_speech() {
    let d = dir("roundtrip");
    let input = speech(&d);
    let (_, src) = read_wav(&input);
    // sox's own GSM (libgsm) as the reference for the same codec.
    let sox_gsm = d.join("sox.gsm");
    let sox_rt = d.join("sox-gsm.wav");
    run(Command::new("sox").arg(&input).arg(&sox_gsm));
    run(Command::new("sox")
        .arg(&sox_gsm)
        .args(["-e", "signed", "-b16"])
        .arg(&sox_rt));
    let (sox_c, sox_snr) = score(&src, &read_wav(&sox_rt).1);
    eprintln!("sox gsm: correlation {sox_c:.3}, SNR {sox_snr:.1} dB");
    for (codec, min_corr) in [
        ("pcmu", 0.999),
        ("pcma", 0.999),
        ("l16", 0.9999),
        ("l16-16k", 0.99),
        ("g722", 0.97),
        ("g726", 0.97),
        ("gsm", 0.8),
        ("speex", 0.8),
        ("speex16", 0.8),
        ("opus", 0.8),
        ("ilbc20", 0.8),
        ("ilbc30", 0.8),
    ] {
        let out = d.join(format!("rt-{codec}.wav"));
        run(Command::new(bin())
            .args(["codec", "roundtrip", "--codec", codec])
            .arg(&input)
            .arg(&out));
        let (rate, back) = read_wav(&out);
        assert_eq!(rate, 8000, "{codec}");
        let (c, snr) = score(&src, &back);
        eprintln!("{codec}: correlation {c:.3}, SNR {snr:.1} dB");
        assert!(c >= min_corr, "{codec}: correlation {c:.3} < {min_corr}");
        if codec == "gsm" {
            assert!(c >= sox_c - 0.01, "gsm {c:.3} worse than sox's {sox_c:.3}");
        }
    }
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn gsm_from_strowger_decodes_with_sox_and_opus_with_opusdec() {
    let d = dir("interop");
    let input = speech(&d);
    let gsm = d.join("s.gsm");
    run(Command::new(bin())
        .args(["codec", "encode", "--codec", "gsm"])
        .arg(&input)
        .arg(&gsm));
    let by_sox = d.join("gsm-by-sox.wav");
    run(Command::new("sox").arg(&gsm).args(["-b16"]).arg(&by_sox));
    let ours = d.join("gsm-by-us.wav");
    run(Command::new(bin())
        .args(["codec", "decode", "--codec", "gsm"])
        .arg(&gsm)
        .arg(&ours));
    let (c, _) = score(&read_wav(&ours).1, &read_wav(&by_sox).1);
    assert!(c > 0.9999, "sox decodes strowger's GSM differently: {c}");

    let opus = d.join("s.opus");
    run(Command::new(bin())
        .args(["codec", "encode", "--codec", "opus"])
        .arg(&input)
        .arg(&opus));
    let dec48 = d.join("opusdec.wav");
    run(Command::new("opusdec")
        .arg("--quiet")
        .arg("--rate")
        .arg("48000")
        .arg(&opus)
        .arg(&dec48));
    let ours48 = d.join("opus-by-us.wav");
    run(Command::new(bin())
        .args(["codec", "decode", "--codec", "opus"])
        .arg(&opus)
        .arg(&ours48));
    let (c, snr) = score(&read_wav(&ours48).1, &read_wav(&dec48).1);
    eprintln!("opusdec vs strowger decoding strowger's Opus: correlation {c:.4}, SNR {snr:.1} dB");
    assert!(c > 0.99, "opusdec decodes strowger's Opus differently: {c}");
    std::fs::remove_dir_all(&d).ok();
}

/// `strowger show translation` prints the matrix and which implementation codes each format at
/// the configured settings: G.722, G.726 and GSM in Rust, Speex at the configuration's
/// `rtp.speex_quality`, Opus at its `rtp.opus_*` at each rate it codes; and with `--paths`, the
/// steps of each path.
#[test]
fn show_translation_prints_the_matrix_and_implementations() {
    let d = dir("translation");
    let cfg = d.join("strowger.toml");
    let embedded = common::read_text(&common::repo_root().join("crates/switch/src/default.toml"));
    std::fs::write(
        &cfg,
        embedded
            .replace("speex_quality = 8", "speex_quality = 3")
            .replace("opus_bitrate = 24000", "opus_bitrate = 16000")
            .replace("opus_complexity = 5", "opus_complexity = 3")
            .replace("opus_dtx = false", "opus_dtx = true"),
    )
    .unwrap();
    let out = Command::new(bin())
        .arg("--config")
        .arg(&cfg)
        .args(["show", "translation", "--paths"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for name in ["pcmu", "gsm", "g722", "g726", "speex16", "opus", "slin48"] {
        assert!(text.contains(name), "{name} missing:\n{text}");
    }
    let line = |f: &str| {
        // The implementations follow the matrix, whose rows start with the same names; the
        // paths follow them.
        text.lines()
            .filter(|l| !l.contains(" -> "))
            .rfind(|l| l.split_whitespace().next() == Some(f))
            .unwrap_or_else(|| panic!("no {f} line:\n{text}"))
            .to_string()
    };
    assert!(line("g726").ends_with("rust, 32 kbit/s"), "{text}");
    assert!(line("g722").ends_with("rust, 64 kbit/s"), "{text}");
    assert!(line("gsm").ends_with("rust"), "{text}");
    assert!(line("speex").ends_with("libspeex, quality 3"), "{text}");
    for opus in ["opus/8k", "opus/16k", "opus/48k"] {
        assert!(
            line(opus).ends_with("libopus, 16 kbit/s, complexity 3, fec on, dtx on"),
            "{text}"
        );
    }
    // Opus codes a narrowband leg's audio at 8 kHz: a PCMU call's paths never touch 48 kHz.
    for (a, b) in [("pcmu", "opus"), ("opus", "pcmu")] {
        let path = text
            .lines()
            .find(|l| l.split_whitespace().take(3).eq([a, "->", b]))
            .unwrap_or_else(|| panic!("no {a} -> {b} path:\n{text}"));
        assert!(
            path.contains("(Opus, ") && !path.contains("48000"),
            "{path}"
        );
    }
    eprintln!("{text}");
    std::fs::remove_dir_all(&d).ok();
}

/// `strowger codec transcode`: sox's GSM through the translator to µ-law is what sox hears in
/// the GSM file, µ-law's quantisation apart; the CPU per frame is printed.
#[test]
fn transcode_gsm_from_sox_to_pcmu() {
    let d = dir("transcode");
    let input = speech(&d);
    let gsm = d.join("s.gsm");
    run(Command::new("sox").arg(&input).arg(&gsm));
    let ulaw = d.join("s.ul");
    let out = Command::new(bin())
        .args(["codec", "transcode", "--codec", "gsm", "--to", "pcmu"])
        .arg(&gsm)
        .arg(&ulaw)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("µs per 20 ms of audio"), "{err}");
    let (from_gsm, from_ulaw) = (d.join("gsm.wav"), d.join("ulaw.wav"));
    run(Command::new("sox").arg(&gsm).arg("-b16").arg(&from_gsm));
    run(Command::new("sox")
        .args(["-t", "ul", "-r", "8000", "-c", "1"])
        .arg(&ulaw)
        .arg("-b16")
        .arg(&from_ulaw));
    let (a, b) = (read_wav(&from_gsm).1, read_wav(&from_ulaw).1);
    assert_eq!(a.len(), b.len(), "one µ-law sample per GSM sample");
    let (c, snr) = score(&a, &b);
    assert!(c > 0.999 && snr > 30.0, "correlation {c}, SNR {snr:.1} dB");
    let bad = Command::new(bin())
        .args(["codec", "transcode", "--codec", "gsm"])
        .arg(&gsm)
        .arg(&ulaw)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&bad.stderr).contains("transcode needs --to CODEC"));
    std::fs::remove_dir_all(&d).ok();
}

fn ffmpeg(args: &[&str]) {
    run(Command::new("ffmpeg")
        .args(["-hide_banner", "-loglevel", "error", "-y"])
        .args(args));
}

/// Speex both ways with independent code: strowger's Ogg Speex decodes with ffmpeg's own Speex
/// decoder (not libspeex) like strowger hears it, and ffmpeg's libspeex encoding decodes in
/// strowger like ffmpeg hears it.
#[test]
fn speex_interop_with_ffmpeg() {
    let d = dir("speex");
    let input = speech(&d);
    let path = |n: &str| d.join(n);
    let s = |p: &PathBuf| p.to_str().unwrap().to_string();
    run(Command::new(bin())
        .args(["codec", "encode", "--codec", "speex"])
        .arg(&input)
        .arg(path("ours.spx")));
    ffmpeg(&[
        "-c:a",
        "speex",
        "-i",
        &s(&path("ours.spx")),
        "-ar",
        "8000",
        &s(&path("ours-by-ffmpeg.wav")),
    ]);
    run(Command::new(bin())
        .args(["codec", "decode", "--codec", "speex"])
        .arg(path("ours.spx"))
        .arg(path("ours-by-us.wav")));
    let (c, snr) = score(
        &read_wav(&path("ours-by-us.wav")).1,
        &read_wav(&path("ours-by-ffmpeg.wav")).1,
    );
    eprintln!(
        "strowger's Speex, ffmpeg's decoder vs strowger's: correlation {c:.4}, SNR {snr:.1} dB"
    );
    assert!(
        c > 0.999,
        "ffmpeg's Speex decoder hears strowger's Speex differently: {c}"
    );

    ffmpeg(&[
        "-i",
        &s(&input),
        "-c:a",
        "libspeex",
        "-cbr_quality",
        "8",
        &s(&path("ffmpeg.spx")),
    ]);
    ffmpeg(&[
        "-c:a",
        "libspeex",
        "-i",
        &s(&path("ffmpeg.spx")),
        &s(&path("ffmpeg-by-ffmpeg.wav")),
    ]);
    run(Command::new(bin())
        .args(["codec", "decode", "--codec", "speex"])
        .arg(path("ffmpeg.spx"))
        .arg(path("ffmpeg-by-us.wav")));
    let (c, snr) = score(
        &read_wav(&path("ffmpeg-by-ffmpeg.wav")).1,
        &read_wav(&path("ffmpeg-by-us.wav")).1,
    );
    eprintln!(
        "ffmpeg's Speex, strowger's decoder vs ffmpeg's: correlation {c:.4}, SNR {snr:.1} dB"
    );
    assert!(c > 0.999, "strowger hears ffmpeg's Speex differently: {c}");
    std::fs::remove_dir_all(&d).ok();
}

/// `strowger codec` encodes at the configuration's `rtp.speex_quality`, as calls do: quality 3
/// is Speex narrowband's 8 kbit/s mode (20 bytes a frame), the default 8 its 15.2 kbit/s one
/// (38 bytes).
#[test]
fn codec_command_encodes_speex_at_the_configured_quality() {
    let d = dir("speex-quality");
    let input = speech(&d);
    let defaults = Command::new(bin()).arg("default-config").output().unwrap();
    let text = String::from_utf8(defaults.stdout).unwrap();
    assert!(
        text.contains("speex_quality = 8\n"),
        "default speex_quality moved"
    );
    let cfg = d.join("q3.toml");
    std::fs::write(
        &cfg,
        text.replace("speex_quality = 8\n", "speex_quality = 3\n"),
    )
    .unwrap();
    let kbits = |config: Option<&Path>| {
        let mut cmd = Command::new(bin());
        if let Some(c) = config {
            cmd.arg("--config").arg(c);
        }
        let out = cmd
            .args(["codec", "encode", "--codec", "speex"])
            .arg(&input)
            .arg(d.join("out.spx"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{err}");
        let rate = err.split(", ").find_map(|f| f.strip_suffix(" kbit/s\n"));
        rate.unwrap_or_else(|| panic!("no bit rate in {err:?}"))
            .to_string()
    };
    assert_eq!(kbits(None), "15.2");
    assert_eq!(kbits(Some(&cfg)), "8.0");
}
