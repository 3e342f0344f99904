//! The Rust G.722 and G.726 against spandsp, and the Rust GSM 06.10 against libgsm, the C
//! libraries strowger used for them before: the same code words and the same samples, bit for bit, on speech and music (Debian's
//! asterisk-core-sounds-en-wav and asterisk-moh-opsound-wav, installed by scripts/setup.sh),
//! full-scale noise, tones, square waves and silence, and random code word streams.
//! No Debian package ships the ITU-T G.726/G.722 test vectors (G.191) or the ETSI GSM 06.10
//! ones, so they are not run here.

use crate::g722::{G722Decoder, G722Encoder};
use crate::g726::{G726Decoder, G726Encoder, Rate};
use crate::gsm::{GsmDecoder, GsmEncoder, FRAME_BYTES, FRAME_SAMPLES};
use crate::libgsm::Libgsm;
use crate::spandsp;

/// Up to `seconds` of the 8 kHz mono 16-bit WAVs directly in `dir`, in name order.
pub(crate) fn wav_dir(dir: &str, seconds: usize) -> Vec<i16> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{dir}: {e} (scripts/setup.sh installs it)"))
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "wav"))
        .collect();
    files.sort();
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
    assert!(pcm.len() >= seconds * 8000 / 2, "{dir}: too little audio");
    pcm
}

fn lcg(seed: u32) -> impl FnMut() -> u32 {
    let mut x = seed;
    move || {
        x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        x
    }
}

/// Named signals at `rate`: speech, music, full-scale noise, a sweep, a clipping square wave,
/// the extremes held and silence.
fn corpus(rate: u32) -> Vec<(&'static str, Vec<i16>)> {
    let up = |pcm: Vec<i16>| {
        if rate == 8000 {
            pcm
        } else {
            crate::resample::resample(&pcm, 8000, rate)
        }
    };
    let n = rate as usize * 5;
    let mut r = lcg(99);
    let noise: Vec<i16> = (0..n).map(|_| (r() >> 16) as i16).collect();
    let sweep: Vec<i16> = (0..n)
        .map(|i| {
            let t = i as f64 / rate as f64;
            let f = 50.0 + (rate as f64 / 2.0 - 100.0) * t / 5.0;
            (32767.0 * (std::f64::consts::PI * f * t).sin()) as i16
        })
        .collect();
    let square: Vec<i16> = (0..n)
        .map(|i| {
            if (i / 37) % 2 == 0 {
                i16::MAX
            } else {
                i16::MIN
            }
        })
        .collect();
    let mut extremes = vec![i16::MAX; rate as usize];
    extremes.extend(vec![i16::MIN; rate as usize]);
    vec![
        (
            "speech",
            up(wav_dir("/usr/share/asterisk/sounds/en_US_f_Allison", 60)),
        ),
        ("music", up(wav_dir("/usr/share/asterisk/moh", 30))),
        ("noise", noise),
        ("sweep", sweep),
        ("square", square),
        ("extremes", extremes),
        ("silence", vec![0; rate as usize]),
    ]
}

/// Chunk sizes of 20 ms packets, with odd ones in between (bits carried over between calls).
fn chunks(len: usize, packet: usize) -> Vec<std::ops::Range<usize>> {
    let sizes = [packet, packet, 7, packet, 1, 3, packet, 2 * packet + 5];
    let (mut at, mut out) = (0, Vec::new());
    for &s in sizes.iter().cycle() {
        if at >= len {
            break;
        }
        let end = (at + s).min(len);
        out.push(at..end);
        at = end;
    }
    out
}

#[test]
fn g726_is_bit_exact_with_spandsp_at_every_rate() {
    for (name, pcm) in corpus(8000) {
        for rate in Rate::ALL {
            let (mut ours, mut theirs) =
                (G726Encoder::new(rate), spandsp::G726::new(rate.bit_rate()));
            let (mut a, mut b) = (vec![0u8; 1000], vec![0u8; 1000]);
            let mut stream = Vec::new();
            for c in chunks(pcm.len(), 160) {
                let n = ours.encode(&pcm[c.clone()], &mut a);
                let m = theirs.encode(&pcm[c.clone()], &mut b);
                assert_eq!(a[..n], b[..m], "{name} at {rate:?}: encoded samples {c:?}");
                stream.extend_from_slice(&a[..n]);
            }
            // Decode the encoded audio and a stream of random code words.
            let mut r = lcg(rate.bits());
            let junk: Vec<u8> = (0..40_000).map(|_| (r() >> 24) as u8).collect();
            for (what, bytes) in [("decoded", &stream), ("random", &junk)] {
                let (mut ours, mut theirs) =
                    (G726Decoder::new(rate), spandsp::G726::new(rate.bit_rate()));
                let (mut x, mut y) = (vec![0i16; 5000], vec![0i16; 5000]);
                for c in chunks(bytes.len(), 80) {
                    let n = ours.decode(&bytes[c.clone()], &mut x);
                    let m = theirs.decode(&bytes[c.clone()], &mut y);
                    assert_eq!(x[..n], y[..m], "{name} {what} at {rate:?}: bytes {c:?}");
                }
            }
        }
    }
}

#[test]
fn g722_is_bit_exact_with_spandsp() {
    for (name, pcm) in corpus(16000) {
        let (mut ours, mut theirs) = (G722Encoder::new(), spandsp::G722Encoder::new());
        let (mut a, mut b) = (vec![0u8; 2000], vec![0u8; 2000]);
        let mut stream = Vec::new();
        for c in chunks(pcm.len() / 2, 160) {
            let c = 2 * c.start..2 * c.end;
            let n = ours.encode(&pcm[c.clone()], &mut a);
            let m = theirs.encode(&pcm[c.clone()], &mut b);
            assert_eq!(a[..n], b[..m], "{name}: encoded samples {c:?}");
            stream.extend_from_slice(&a[..n]);
        }
        let mut r = lcg(722);
        let junk: Vec<u8> = (0..40_000).map(|_| (r() >> 24) as u8).collect();
        for (what, bytes) in [("decoded", &stream), ("random", &junk)] {
            let (mut ours, mut theirs) = (G722Decoder::new(), spandsp::G722Decoder::new());
            let (mut x, mut y) = (vec![0i16; 5000], vec![0i16; 5000]);
            for c in chunks(bytes.len(), 160) {
                let n = ours.decode(&bytes[c.clone()], &mut x);
                let m = theirs.decode(&bytes[c.clone()], &mut y);
                assert_eq!(x[..n], y[..m], "{name} {what}: bytes {c:?}");
            }
        }
    }
}

#[test]
fn gsm_is_bit_exact_with_libgsm() {
    let mut r = lcg(610);
    // Random frames, half of them with the signature so that most reach the decoder.
    let junk: Vec<u8> = (0..2000 * FRAME_BYTES)
        .map(|i| {
            let b = (r() >> 24) as u8;
            if i % FRAME_BYTES == 0 && i % (2 * FRAME_BYTES) == 0 {
                0xD0 | (b & 0xF)
            } else {
                b
            }
        })
        .collect();
    for (name, pcm) in corpus(8000) {
        let (mut ours, mut theirs) = (GsmEncoder::new(), Libgsm::new());
        let (mut a, mut b) = ([0u8; FRAME_BYTES], [0u8; FRAME_BYTES]);
        let mut stream = Vec::new();
        for (n, f) in pcm.chunks_exact(FRAME_SAMPLES).enumerate() {
            let f = f.try_into().unwrap();
            ours.encode(f, &mut a);
            theirs.encode(f, &mut b);
            assert_eq!(a, b, "{name}: encoded frame {n}");
            stream.extend_from_slice(&a);
        }
        for (what, bytes) in [("decoded", &stream), ("random", &junk)] {
            let (mut ours, mut theirs) = (GsmDecoder::new(), Libgsm::new());
            let (mut x, mut y) = ([0i16; FRAME_SAMPLES], [0i16; FRAME_SAMPLES]);
            for (n, f) in bytes.chunks_exact(FRAME_BYTES).enumerate() {
                let f = f.try_into().unwrap();
                assert_eq!(
                    ours.decode(f, &mut x),
                    theirs.decode(f, &mut y),
                    "{name} {what}: frame {n}"
                );
                assert_eq!(x, y, "{name} {what}: frame {n}");
            }
        }
    }
}
