//! strowger's G.722 and G.726 against spandsp, and its GSM 06.10 against libgsm (the C
//! libraries strowger linked for them before, called directly through the same FFI) on the
//! same speech: thread CPU µs per second of audio of encoding and decoding it in 20 ms packets,
//! interleaved round by round (the best of each kept: a busy machine only ever adds time), and
//! the ratio. Then Opus fed from a narrowband source, held to narrowband (what the translator
//! makes for G.711 and the like) against left at fullband, the same way; with `OPUS_WAVS=DIR`
//! both decodings and the source are written there as 8 kHz WAVs for PESQ. `bench/codecs.sh`
//! runs it.
//!
//! Speech: Debian's asterisk-core-sounds-en-wav (scripts/setup.sh), upsampled to 16 kHz for G.722.

use codec::g722::{G722Decoder, G722Encoder};
use codec::g726::{G726Decoder, G726Encoder, Rate};
use codec::gsm::{GsmDecoder, GsmEncoder, FRAME_BYTES, FRAME_SAMPLES};
use codec::libgsm::Libgsm;
use codec::spandsp;
use codec::translate::cpu_now;
use codec::{Decoder, Format, OpusDec};

const SPEECH: &str = "/usr/share/asterisk/sounds/en_US_f_Allison";
const SECONDS: usize = 60;

fn speech() -> Vec<i16> {
    let mut files: Vec<_> = std::fs::read_dir(SPEECH)
        .unwrap_or_else(|e| panic!("{SPEECH}: {e} (scripts/setup.sh installs it)"))
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "wav"))
        .collect();
    files.sort();
    let mut pcm = Vec::new();
    for f in files {
        let Ok(r) = hound::WavReader::open(&f) else {
            continue;
        };
        if r.spec().sample_rate == 8000 && r.spec().channels == 1 {
            pcm.extend(r.into_samples::<i16>().map_while(Result::ok));
        }
        if pcm.len() >= SECONDS * 8000 {
            break;
        }
    }
    pcm.truncate(SECONDS * 8000);
    pcm
}

/// One side of a comparison: runs the whole clip once.
type Run<'a> = Box<dyn FnMut() + 'a>;

/// µs of thread CPU per second of audio, best of `rounds`, ours and theirs interleaved.
fn race(rounds: usize, seconds: f64, mut ours: Run<'_>, mut theirs: Run<'_>) -> (f64, f64) {
    let (mut a, mut b) = (f64::MAX, f64::MAX);
    for r in 0..rounds {
        let time = |f: &mut Run<'_>| {
            let t0 = cpu_now();
            f();
            (cpu_now() - t0) / seconds
        };
        if r % 2 == 0 {
            a = a.min(time(&mut ours));
            b = b.min(time(&mut theirs));
        } else {
            b = b.min(time(&mut theirs));
            a = a.min(time(&mut ours));
        }
    }
    (a, b)
}

fn report(what: &str, (ours, theirs): (f64, f64)) {
    let lib = if what.starts_with("gsm") {
        "libgsm "
    } else {
        "spandsp"
    };
    println!(
        "{what:<16} strowger {ours:7.1}  {lib} {theirs:7.1}  ratio {:.3}",
        ours / theirs
    );
}

fn main() {
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(9);
    let pcm8 = speech();
    let pcm16 = codec::resample::resample(&pcm8, 8000, 16000);
    let seconds = pcm8.len() as f64 / 8000.0;
    println!(
        "µs of thread CPU per second of audio ({seconds:.0} s of speech in 20 ms packets, best of {rounds}, interleaved)"
    );

    for rate in Rate::ALL {
        let bytes = rate.bytes_for(160);
        let mut enc = G726Encoder::new(rate);
        let mut out = vec![0u8; bytes + 1];
        let packets: Vec<Vec<u8>> = pcm8
            .chunks_exact(160)
            .map(|p| {
                let n = enc.encode(p, &mut out);
                out[..n].to_vec()
            })
            .collect();
        let name = format!("g726-{}", rate.bit_rate() / 1000);
        let (mut o1, mut o2) = (vec![0u8; bytes + 1], vec![0u8; bytes + 1]);
        report(
            &format!("{name} encode"),
            race(
                rounds,
                seconds,
                Box::new(|| {
                    let mut e = G726Encoder::new(rate);
                    for p in pcm8.chunks_exact(160) {
                        std::hint::black_box(e.encode(p, &mut o1));
                    }
                }),
                Box::new(|| {
                    let mut e = spandsp::G726::new(rate.bit_rate());
                    for p in pcm8.chunks_exact(160) {
                        std::hint::black_box(e.encode(p, &mut o2));
                    }
                }),
            ),
        );
        let (mut s1, mut s2) = (vec![0i16; 4 * bytes + 4], vec![0i16; 4 * bytes + 4]);
        report(
            &format!("{name} decode"),
            race(
                rounds,
                seconds,
                Box::new(|| {
                    let mut d = G726Decoder::new(rate);
                    for p in &packets {
                        std::hint::black_box(d.decode(p, &mut s1));
                    }
                }),
                Box::new(|| {
                    let mut d = spandsp::G726::new(rate.bit_rate());
                    for p in &packets {
                        std::hint::black_box(d.decode(p, &mut s2));
                    }
                }),
            ),
        );
    }

    let mut enc = G722Encoder::new();
    let mut out = [0u8; 160];
    let packets: Vec<Vec<u8>> = pcm16
        .chunks_exact(320)
        .map(|p| {
            let n = enc.encode(p, &mut out);
            out[..n].to_vec()
        })
        .collect();
    let (mut o1, mut o2) = ([0u8; 160], [0u8; 160]);
    report(
        "g722 encode",
        race(
            rounds,
            seconds,
            Box::new(|| {
                let mut e = G722Encoder::new();
                for p in pcm16.chunks_exact(320) {
                    std::hint::black_box(e.encode(p, &mut o1));
                }
            }),
            Box::new(|| {
                let mut e = spandsp::G722Encoder::new();
                for p in pcm16.chunks_exact(320) {
                    std::hint::black_box(e.encode(p, &mut o2));
                }
            }),
        ),
    );
    let (mut s1, mut s2) = ([0i16; 320], [0i16; 320]);
    report(
        "g722 decode",
        race(
            rounds,
            seconds,
            Box::new(|| {
                let mut d = G722Decoder::new();
                for p in &packets {
                    std::hint::black_box(d.decode(p, &mut s1));
                }
            }),
            Box::new(|| {
                let mut d = spandsp::G722Decoder::new();
                for p in &packets {
                    std::hint::black_box(d.decode(p, &mut s2));
                }
            }),
        ),
    );

    let frames: Vec<&[i16; FRAME_SAMPLES]> = pcm8
        .chunks_exact(FRAME_SAMPLES)
        .map(|f| f.try_into().unwrap())
        .collect();
    let mut enc = GsmEncoder::new();
    let packets: Vec<[u8; FRAME_BYTES]> = frames
        .iter()
        .map(|f| {
            let mut out = [0u8; FRAME_BYTES];
            enc.encode(f, &mut out);
            out
        })
        .collect();
    let (mut o1, mut o2) = ([0u8; FRAME_BYTES], [0u8; FRAME_BYTES]);
    report(
        "gsm encode",
        race(
            rounds,
            seconds,
            Box::new(|| {
                let mut e = GsmEncoder::new();
                for f in &frames {
                    e.encode(f, &mut o1);
                    std::hint::black_box(&o1);
                }
            }),
            Box::new(|| {
                let mut e = Libgsm::new();
                for f in &frames {
                    e.encode(f, &mut o2);
                    std::hint::black_box(&o2);
                }
            }),
        ),
    );
    let (mut s1, mut s2) = ([0i16; FRAME_SAMPLES], [0i16; FRAME_SAMPLES]);
    report(
        "gsm decode",
        race(
            rounds,
            seconds,
            Box::new(|| {
                let mut d = GsmDecoder::new();
                for p in &packets {
                    std::hint::black_box(d.decode(p, &mut s1)).ok();
                }
            }),
            Box::new(|| {
                let mut d = Libgsm::new();
                for p in &packets {
                    std::hint::black_box(d.decode(p, &mut s2)).ok();
                }
            }),
        ),
    );
    opus_from_narrowband(rounds, seconds, &pcm8);
}

/// Encoding CPU and bit rate of Opus over 8 kHz speech, held to narrowband (as
/// [`Format::encoder_from`] makes it for a narrowband source) and not.
fn opus_from_narrowband(rounds: usize, seconds: f64, pcm8: &[i16]) {
    let pcm48 = codec::resample::resample(pcm8, 8000, 48000);
    let run = |source_rate: u32| {
        let mut out = [0u8; 1275];
        let mut e = Format::Opus.encoder_from(source_rate);
        pcm48
            .chunks_exact(960)
            .map(|p| {
                let n = e.encode(p, &mut out).unwrap();
                out[..n].to_vec()
            })
            .collect::<Vec<_>>()
    };
    let (narrow, full) = race(
        rounds,
        seconds,
        Box::new(|| {
            std::hint::black_box(run(8000));
        }),
        Box::new(|| {
            std::hint::black_box(run(48000));
        }),
    );
    let kbits =
        |p: &[Vec<u8>]| p.iter().map(Vec::len).sum::<usize>() as f64 * 8.0 / seconds / 1000.0;
    let (pn, pf) = (run(8000), run(48000));
    println!(
        "opus from 8 kHz  narrowband {narrow:7.1}  fullband {full:7.1}  ratio {:.3}  ({:.1} vs {:.1} kbit/s, {})",
        narrow / full,
        kbits(&pn),
        kbits(&pf),
        Format::Opus.implementation()
    );
    let Ok(dir) = std::env::var("OPUS_WAVS") else {
        return;
    };
    let write = |name: &str, pcm: &[i16]| {
        let spec = hound::WavSpec {
            channels: 1,
            sample_rate: 8000,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        let mut w = hound::WavWriter::create(format!("{dir}/{name}.wav"), spec).unwrap();
        pcm.iter().for_each(|&s| w.write_sample(s).unwrap());
        w.finalize().unwrap();
    };
    write("source", pcm8);
    for (name, packets) in [("narrowband", pn), ("fullband", pf)] {
        let mut d = OpusDec::new().unwrap();
        let mut pcm = vec![0i16; pcm48.len()];
        for (p, o) in packets.iter().zip(pcm.chunks_exact_mut(960)) {
            d.decode(p, o).unwrap();
        }
        write(name, &codec::resample::resample(&pcm, 48000, 8000));
    }
}
