//! The detector against synthesized DTMF at the Q.24 limits, in white noise, and against
//! recorded speech and music that must not be taken for digits.

use super::*;
use std::path::{Path, PathBuf};

const ALL: &str = "0123456789*#ABCD";
/// Amplitude of a 0 dBm0 sine in 16-bit linear PCM (G.711: +3.17 dBm0 is full scale).
const DBM0: f32 = 22_300.0;

/// What one test signal is made of.
#[derive(Clone, Copy)]
struct Spec {
    /// Level of the weaker tone, dBm0.
    level: f32,
    /// Column minus row level, dB.
    twist: f32,
    /// Both tones' frequencies times these.
    deviation: (f32, f32),
    on_ms: u32,
    off_ms: u32,
    /// Signal (both tones) to white noise, dB; `None` for none.
    snr: Option<f32>,
}

const NOMINAL: Spec = Spec {
    level: -10.0,
    twist: 0.0,
    deviation: (1.0, 1.0),
    on_ms: 60,
    off_ms: 60,
    snr: None,
};

/// `digits` as tones per `spec`, each preceded by its gap, starting `lead` samples in.
fn signal(digits: &str, spec: Spec, lead: usize, rng: &mut fastrand::Rng) -> Vec<i16> {
    let amp = |dbm0: f32| DBM0 * 10f32.powf(dbm0 / 20.0);
    let (row_db, col_db) = if spec.twist >= 0.0 {
        (spec.level, spec.level + spec.twist)
    } else {
        (spec.level - spec.twist, spec.level)
    };
    let (ra, ca) = (amp(row_db), amp(col_db));
    let signal_power = (ra * ra + ca * ca) / 2.0;
    let sigma = spec
        .snr
        .map_or(0.0, |snr| (signal_power / 10f32.powf(snr / 10.0)).sqrt());
    let mut out = vec![0.0f32; lead];
    for d in digits.chars() {
        out.extend(std::iter::repeat_n(0.0, (spec.off_ms * 8) as usize));
        let (r, c) = frequencies(d).expect("a DTMF key");
        let (r, c) = (
            f32::from(r) * spec.deviation.0,
            f32::from(c) * spec.deviation.1,
        );
        let (pr, pc) = (rng.f32() * 2.0 * PI, rng.f32() * 2.0 * PI);
        out.extend((0..spec.on_ms * 8).map(|n| {
            let t = n as f32 / RATE;
            ra * (2.0 * PI * r * t + pr).sin() + ca * (2.0 * PI * c * t + pc).sin()
        }));
    }
    out.extend(std::iter::repeat_n(
        0.0,
        (spec.off_ms * 8) as usize + 2 * BLOCK,
    ));
    out.iter()
        .map(|&v| {
            // Box-Muller: one normal sample from two uniform ones.
            let u = rng.f32().max(f32::MIN_POSITIVE);
            let n = (-2.0 * u.ln()).sqrt() * (2.0 * PI * rng.f32()).cos();
            (v + sigma * n).clamp(-32768.0, 32767.0) as i16
        })
        .collect()
}

fn detect(pcm: &[i16]) -> Vec<Detected> {
    let mut det = ToneDetector::default();
    let mut found = Vec::new();
    // In 20 ms packets, as a leg's audio arrives.
    for packet in pcm.chunks(160) {
        det.push(packet.iter().copied(), |d| found.push(d));
    }
    found
}

fn digits(pcm: &[i16]) -> String {
    detect(pcm).iter().map(|d| d.digit).collect()
}

#[test]
fn every_digit_is_heard_once_with_its_duration() {
    let mut rng = fastrand::Rng::with_seed(1);
    let found = detect(&signal(ALL, NOMINAL, 0, &mut rng));
    let heard: String = found.iter().map(|d| d.digit).collect();
    assert_eq!(heard, ALL);
    for d in found {
        assert!((40..=80).contains(&d.duration_ms), "{d:?} from 60 ms");
    }
    let long = Spec {
        on_ms: 1000,
        ..NOMINAL
    };
    let found = detect(&signal("5", long, 0, &mut rng));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!((970..=1020).contains(&found[0].duration_ms), "{found:?}");
}

/// Q.24's limits at once: −26 dBm0, +4 and −8 dB of twist, ±1.5 % off, 40 ms tones with
/// 40 ms gaps, in white noise 15 dB down; at every alignment to the blocks.
#[test]
fn digits_at_the_q24_limits_in_noise_are_heard_exactly() {
    let mut rng = fastrand::Rng::with_seed(2);
    let mut runs = 0;
    for twist in [4.0, -8.0] {
        for deviation in [
            (1.015, 1.015),
            (0.985, 0.985),
            (1.015, 0.985),
            (0.985, 1.015),
        ] {
            for lead in [0, 25, 51, 77] {
                let spec = Spec {
                    level: -26.0,
                    twist,
                    deviation,
                    on_ms: 40,
                    off_ms: 40,
                    snr: Some(15.0),
                };
                let heard = digits(&signal(ALL, spec, lead, &mut rng));
                assert_eq!(
                    heard, ALL,
                    "twist {twist} dB, frequencies ×{deviation:?}, lead {lead}"
                );
                runs += 1;
            }
        }
    }
    assert_eq!(runs, 32);
}

#[test]
fn a_repeated_digit_after_a_40ms_gap_is_heard_twice() {
    let mut rng = fastrand::Rng::with_seed(3);
    let spec = Spec {
        on_ms: 40,
        off_ms: 40,
        snr: Some(15.0),
        ..NOMINAL
    };
    for lead in [0, 40, 80] {
        assert_eq!(digits(&signal("5599##", spec, lead, &mut rng)), "5599##");
    }
}

#[test]
fn tones_3_5_percent_off_are_not_digits() {
    let mut rng = fastrand::Rng::with_seed(4);
    for deviation in [(1.035, 1.0), (0.965, 1.0), (1.0, 1.035), (1.0, 0.965)] {
        for twist in [0.0, 4.0, -8.0] {
            let spec = Spec {
                deviation,
                twist,
                on_ms: 200,
                ..NOMINAL
            };
            let heard = digits(&signal(ALL, spec, 0, &mut rng));
            assert_eq!(heard, "", "frequencies ×{deviation:?}, twist {twist} dB");
        }
    }
}

#[test]
fn tones_too_short_too_quiet_or_too_twisted_are_not_digits() {
    let mut rng = fastrand::Rng::with_seed(5);
    let cases = [
        (
            "20 ms",
            Spec {
                on_ms: 20,
                ..NOMINAL
            },
        ),
        (
            "−40 dBm0",
            Spec {
                level: -40.0,
                ..NOMINAL
            },
        ),
        (
            "+9 dB twist",
            Spec {
                twist: 9.0,
                ..NOMINAL
            },
        ),
        (
            "−16 dB twist",
            Spec {
                twist: -16.0,
                ..NOMINAL
            },
        ),
    ];
    for (what, spec) in cases {
        assert_eq!(digits(&signal(ALL, spec, 0, &mut rng)), "", "{what}");
    }
}

#[test]
fn one_tone_alone_or_noise_alone_is_no_digit() {
    let mut rng = fastrand::Rng::with_seed(6);
    let tone: Vec<i16> = (0..8000)
        .map(|n| (8000.0 * (2.0 * PI * 770.0 * n as f32 / RATE).sin()) as i16)
        .collect();
    assert_eq!(digits(&tone), "");
    let noise: Vec<i16> = (0..8000 * 10).map(|_| rng.i16(-8000..8000)).collect();
    assert_eq!(digits(&noise), "");
}

/// WAV files under `dir`, in name order.
fn wavs(dir: &Path, into: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() {
            wavs(&p, into);
        } else if p.extension().is_some_and(|e| e == "wav") {
            into.push(p);
        }
    }
}

/// Up to `seconds` of 8 kHz mono audio from the WAVs under `dir`.
fn audio(dir: &str, seconds: usize) -> Vec<i16> {
    let mut files = Vec::new();
    wavs(Path::new(dir), &mut files);
    let mut pcm = Vec::new();
    for f in files {
        let Ok(r) = hound::WavReader::open(&f) else {
            continue;
        };
        let s = r.spec();
        if (s.sample_rate, s.channels, s.bits_per_sample) != (8000, 1, 16) {
            continue;
        }
        pcm.extend(r.into_samples::<i16>().map_while(Result::ok));
        if pcm.len() >= seconds * 8000 {
            pcm.truncate(seconds * 8000);
            break;
        }
    }
    pcm
}

/// Talk-off: five minutes of speech and five of music (Debian's asterisk-core-sounds-en-wav
/// and asterisk-moh-opsound-wav, installed by scripts/setup.sh) hold no digit.
#[test]
fn speech_and_music_are_not_digits() {
    let speech = audio("/usr/share/asterisk/sounds/en_US_f_Allison", 300);
    let music = audio("/usr/share/asterisk/moh", 300);
    assert_eq!(
        speech.len(),
        300 * 8000,
        "5 min of speech (scripts/setup.sh)"
    );
    assert_eq!(music.len(), 300 * 8000, "5 min of music (scripts/setup.sh)");
    assert_eq!(detect(&speech), [], "digits in speech");
    assert_eq!(detect(&music), [], "digits in music");
}
