//! Audio checks written from the specs: G.711 µ-law, WAV reading, tones, Goertzel and
//! normalized cross-correlation with a lag search.

use std::f64::consts::PI;
use std::path::Path;

/// G.711 µ-law byte to linear 16-bit (ITU-T G.711, the usual bias-0x84 formulation).
pub fn ulaw_decode(u: u8) -> i16 {
    let u = !u;
    let t = ((i32::from(u & 0x0f) << 3) + 0x84) << ((u & 0x70) >> 4);
    (if u & 0x80 != 0 { 0x84 - t } else { t - 0x84 }) as i16
}

/// Linear 16-bit to G.711 µ-law.
pub fn ulaw_encode(s: i16) -> u8 {
    const CLIP: i32 = 32635;
    let mut x = i32::from(s);
    let sign = if x < 0 { 0x80 } else { 0 };
    if x < 0 {
        x = -x;
    }
    x = x.min(CLIP) + 0x84;
    let exp = (7 - (x.leading_zeros() as i32 - 17)).clamp(0, 7);
    let mant = (x >> (exp + 3)) & 0x0f;
    !(sign | (exp << 4) as u8 | mant as u8)
}

pub fn ulaw_decode_all(bytes: &[u8]) -> Vec<i16> {
    bytes.iter().copied().map(ulaw_decode).collect()
}

/// A 16-bit PCM WAV file: sample rate, channels and the samples (interleaved).
pub struct Wav {
    pub rate: u32,
    pub channels: u16,
    pub bits: u16,
    pub samples: Vec<i16>,
}

pub fn read_wav(path: &Path) -> Wav {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    assert!(
        b.len() >= 12 && &b[0..4] == b"RIFF" && &b[8..12] == b"WAVE",
        "{} is not a RIFF/WAVE file",
        path.display()
    );
    let (mut fmt, mut data) = (None, None);
    let mut i = 12;
    while i + 8 <= b.len() {
        let id = &b[i..i + 4];
        let len = u32::from_le_bytes(b[i + 4..i + 8].try_into().unwrap()) as usize;
        let body = &b[i + 8..(i + 8 + len).min(b.len())];
        match id {
            b"fmt " => fmt = Some(body),
            b"data" => data = Some(body),
            _ => {}
        }
        i += 8 + len + (len & 1);
    }
    let fmt = fmt.unwrap_or_else(|| panic!("{}: no fmt chunk", path.display()));
    let data = data.unwrap_or_else(|| panic!("{}: no data chunk", path.display()));
    let u16_at = |o: usize| u16::from_le_bytes([fmt[o], fmt[o + 1]]);
    let wav = Wav {
        channels: u16_at(2),
        rate: u32::from_le_bytes(fmt[4..8].try_into().unwrap()),
        bits: u16_at(14),
        samples: data
            .chunks_exact(2)
            .map(|c| i16::from_le_bytes([c[0], c[1]]))
            .collect(),
    };
    assert_eq!(u16_at(0), 1, "{}: not PCM", path.display());
    assert_eq!(wav.bits, 16, "{}: not 16-bit", path.display());
    wav
}

/// `n` samples of a sine at `freq` Hz (8 kHz) and peak `amp`.
pub fn tone(freq: f64, n: usize, amp: f64) -> Vec<i16> {
    (0..n)
        .map(|i| (amp * (2.0 * PI * freq * i as f64 / 8000.0).sin()) as i16)
        .collect()
}

/// Power of `freq` in `x` (8 kHz), normalised by length.
pub fn goertzel(x: &[i16], freq: f64) -> f64 {
    let w = 2.0 * PI * freq / 8000.0;
    let c = 2.0 * w.cos();
    let (mut s1, mut s2) = (0.0, 0.0);
    for &v in x {
        let s = f64::from(v) + c * s1 - s2;
        s2 = s1;
        s1 = s;
    }
    (s1 * s1 + s2 * s2 - c * s1 * s2) / (x.len() as f64).powi(2)
}

/// The strongest frequency of `x` between 100 and 3900 Hz, in 10 Hz steps.
pub fn dominant_freq(x: &[i16]) -> f64 {
    (10..390)
        .map(|k| f64::from(k) * 10.0)
        .map(|f| (goertzel(x, f), f))
        .fold((0.0, 0.0), |best, p| if p.0 > best.0 { p } else { best })
        .1
}

/// Fraction of `x`'s energy that sits at `freq` (1.0 for a pure tone).
pub fn tone_purity(x: &[i16], freq: f64) -> f64 {
    let energy: f64 = x.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / x.len() as f64;
    // A sine of amplitude A has Goertzel power A²/4 and mean energy A²/2.
    2.0 * goertzel(x, freq) / energy.max(1e-9)
}

/// Writes `samples` as a 16-bit mono WAV file at `rate`.
pub fn write_wav(path: &Path, rate: u32, samples: &[i16]) {
    let data = (samples.len() * 2) as u32;
    let mut b = Vec::with_capacity(44 + data as usize);
    b.extend_from_slice(b"RIFF");
    b.extend_from_slice(&(36 + data).to_le_bytes());
    b.extend_from_slice(b"WAVEfmt ");
    for v in [16u32, 1 | (1 << 16), rate, rate * 2, 2 | (16 << 16)] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    b.extend_from_slice(b"data");
    b.extend_from_slice(&data.to_le_bytes());
    samples
        .iter()
        .for_each(|v| b.extend_from_slice(&v.to_le_bytes()));
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::write(path, b).unwrap();
}

pub fn rms(x: &[i16]) -> f64 {
    (x.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / x.len().max(1) as f64).sqrt()
}

fn ncc(a: &[f32], b: &[f32]) -> f64 {
    let (mut ab, mut aa, mut bb) = (0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        ab += f64::from(x * y);
        aa += f64::from(x * x);
        bb += f64::from(y * y);
    }
    ab / (aa * bb).sqrt().max(1e-9)
}

fn decimate4(x: &[f32]) -> Vec<f32> {
    x.chunks_exact(4)
        .map(|c| c.iter().sum::<f32>() / 4.0)
        .collect()
}

/// Best normalized cross-correlation of `sig[start..start+len]` against `reference` shifted by
/// a lag in `lags` (sig[i] ≈ reference[i + lag]), and that lag. Coarse search on 4× decimated
/// signals, then a fine search around the coarse peak (the tests run unoptimised).
pub fn best_correlation(
    sig: &[i16],
    reference: &[i16],
    start: usize,
    len: usize,
    lags: std::ops::RangeInclusive<isize>,
) -> (f64, isize) {
    let to_f = |v: &[i16]| v.iter().map(|&s| f32::from(s)).collect::<Vec<f32>>();
    let (s, r) = (to_f(sig), to_f(reference));
    assert!(
        start + len <= s.len(),
        "signal too short: {} < {}",
        s.len(),
        start + len
    );
    // seg against r at (start + lag) / d for each lag, on signals decimated by d.
    let search = |seg: &[f32], r: &[f32], d: isize, lags: &mut dyn Iterator<Item = isize>| {
        let mut best = (f64::MIN, 0);
        for lag in lags {
            let from = (start as isize + lag) / d;
            if from >= 0 && from as usize + seg.len() <= r.len() {
                let c = ncc(seg, &r[from as usize..from as usize + seg.len()]);
                if c > best.0 {
                    best = (c, lag);
                }
            }
        }
        best
    };
    let (sd, rd) = (decimate4(&s), decimate4(&r));
    let coarse = search(
        &sd[start / 4..(start + len) / 4],
        &rd,
        4,
        &mut lags.clone().step_by(4),
    );
    let mut fine = (coarse.1 - 8..=coarse.1 + 8).filter(|l| lags.contains(l));
    search(&s[start..start + len], &r, 1, &mut fine)
}
