//! strowger's G.722 and G.726 against spandsp, and its GSM 06.10 against libgsm (the C
//! libraries strowger linked for them before, called directly through the same FFI) on the
//! same speech: thread CPU µs per second of audio of encoding and decoding it in 20 ms packets,
//! interleaved round by round (the best of each kept: a busy machine only ever adds time), and
//! the ratio; the same for its resampler against speexdsp's at each 8/16/48 kHz conversion. Then a PCMU ↔ Opus transcoded call-second with Opus coded at 8 kHz (the
//! translator's path) against resampled to and from 48 kHz (the path before); with
//! `OPUS_WAVS=DIR` the source and its round trip through Opus by each path are written there as
//! 8 kHz WAVs for PESQ. `bench/codecs.sh` runs it.
//!
//! Speech: Debian's asterisk-core-sounds-en-wav (scripts/setup.sh), upsampled to 16 kHz for G.722.

use codec::g722::{G722Decoder, G722Encoder};
use codec::g726::{G726Decoder, G726Encoder, Rate};
use codec::gsm::{GsmDecoder, GsmEncoder, FRAME_BYTES, FRAME_SAMPLES};
use codec::ilbc::{IlbcDecoder, IlbcEncoder, Mode};
use codec::libgsm::Libgsm;
use codec::spandsp;
use codec::speexdsp;
use codec::translate::{cpu_now, encode_packets, measure_step};
use codec::{Format, Graph, Node, Resampler, Step, Translator};

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
    } else if what.starts_with("resample") {
        "speexdsp"
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
    if let Ok(path) = std::env::var("OPUS_CALL") {
        return opus_call_once(&path, &pcm8);
    }
    if let Ok(what) = std::env::var("ONCE") {
        return once(&what, &pcm8, &pcm16);
    }
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
    for (from, to) in RATES {
        let pcm = codec::resample::resample(&pcm8, 8000, from);
        let block = from as usize / 50;
        let mut o1 = vec![0i16; block * to as usize / from as usize + 16];
        let mut o2 = o1.clone();
        report(
            &format!("resample {}->{}k", from / 1000, to / 1000),
            race(
                rounds,
                seconds,
                Box::new(|| {
                    let mut r = Resampler::new(from, to);
                    for p in pcm.chunks_exact(block) {
                        std::hint::black_box(r.process(p, &mut o1));
                    }
                }),
                Box::new(|| {
                    let mut r = speexdsp::Resampler::new(from, to);
                    for p in pcm.chunks_exact(block) {
                        std::hint::black_box(r.process(p, &mut o2));
                    }
                }),
            ),
        );
    }
    opus_pcmu_call(rounds, seconds, &pcm8);
}

use codec::resample::RATES;

/// `ONCE=g722-decode|g722-decode-spandsp|resample|resample-speexdsp|ilbc-{encode,decode}[-20]`:
/// the clip decoded once, or converted once at each of [`RATES`], by one side, for instruction
/// counts (`valgrind --tool=callgrind --toggle-collect='*once_*'`). iLBC is strowger's alone
/// (30 ms frames, or 20 ms with `-20`), so its line also gives the pass's thread CPU µs per second
/// of audio, for old and new builds run in turn (bench/ilbc.sh).
fn once(what: &str, pcm8: &[i16], pcm16: &[i16]) {
    if let Some(op) = what.strip_prefix("ilbc-") {
        return ilbc_pass(what, op, pcm8);
    }
    if what.starts_with("resample") {
        for (from, to) in RATES {
            let pcm = codec::resample::resample(pcm8, 8000, from);
            let n = if what == "resample" {
                once_resample(Resampler::new(from, to), &pcm, |r, i, o| r.process(i, o))
            } else {
                let r = speexdsp::Resampler::new(from, to);
                once_resample(r, &pcm, |r, i, o| r.process(i, o))
            };
            println!("{what} {from}->{to}: {n} samples");
        }
        return;
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
    let n = match what {
        "g722-decode" => once_g722_rust(&packets),
        "g722-decode-spandsp" => once_g722_spandsp(&packets),
        other => panic!("ONCE={other}: g722-decode or g722-decode-spandsp"),
    };
    println!("{what}: {n} samples");
}

/// One pass of iLBC encoding or decoding (`op`: `encode`/`decode`, `-20` for 20 ms frames) of
/// the clip, timed; the decoder loses every 50th packet, so its concealment is counted too.
fn ilbc_pass(what: &str, op: &str, pcm8: &[i16]) {
    let (op, mode) = match op.strip_suffix("-20") {
        Some(op) => (op, Mode::Ms20),
        None => (op, Mode::Ms30),
    };
    let frames: Vec<&[i16]> = pcm8.chunks_exact(mode.samples()).collect();
    let mut enc = IlbcEncoder::new(mode);
    let mut encode = || {
        frames
            .iter()
            .map(|f| {
                let mut b = vec![0u8; mode.bytes()];
                enc.encode(f, &mut b);
                b
            })
            .collect::<Vec<_>>()
    };
    let t0 = std::cell::Cell::new(cpu_now());
    let n = match op {
        "encode" => once_ilbc_encode(encode),
        "decode" => once_ilbc_decode(mode, &encode(), &t0),
        other => panic!("ONCE=ilbc-{other}: ilbc-encode, ilbc-decode (-20 for 20 ms frames)"),
    };
    let seconds = frames.len() as f64 * mode.ms() as f64 / 1000.0;
    let us = (cpu_now() - t0.get()) / seconds;
    println!("{what}: {n} bytes/samples, {us:.1} µs thread CPU per second of audio");
}

#[inline(never)]
fn once_ilbc_encode(encode: impl FnOnce() -> Vec<Vec<u8>>) -> usize {
    encode().iter().map(Vec::len).sum()
}

/// Decodes `packets`, restarting the clock `t0` once they are encoded.
#[inline(never)]
fn once_ilbc_decode(mode: Mode, packets: &[Vec<u8>], t0: &std::cell::Cell<f64>) -> usize {
    t0.set(cpu_now());
    let mut d = IlbcDecoder::new(mode);
    let mut out = vec![0i16; mode.samples()];
    for (i, p) in packets.iter().enumerate() {
        d.decode((i % 50 != 49).then_some(&p[..]), &mut out);
        std::hint::black_box(&out);
    }
    packets.len() * mode.samples()
}

#[inline(never)]
fn once_resample<R>(
    mut r: R,
    pcm: &[i16],
    f: impl Fn(&mut R, &[i16], &mut [i16]) -> usize,
) -> usize {
    let mut out = [0i16; 2000];
    pcm.chunks_exact(pcm.len() / 3000)
        .map(|p| std::hint::black_box(f(&mut r, p, &mut out)))
        .sum()
}

#[inline(never)]
fn once_g722_rust(packets: &[Vec<u8>]) -> usize {
    let (mut d, mut s) = (G722Decoder::new(), [0i16; 320]);
    packets
        .iter()
        .map(|p| std::hint::black_box(d.decode(p, &mut s)))
        .sum()
}

#[inline(never)]
fn once_g722_spandsp(packets: &[Vec<u8>]) -> usize {
    let (mut d, mut s) = (spandsp::G722Decoder::new(), [0i16; 320]);
    packets
        .iter()
        .map(|p| std::hint::black_box(d.decode(p, &mut s)))
        .sum()
}

/// The graph before Opus took 8 and 16 kHz audio: its only linear rate was 48 kHz.
fn resampled_graph() -> Graph {
    Graph::build(|s| match s {
        Step::Decode(Format::Opus, r) | Step::Encode(Format::Opus, r) if r != 48000 => f64::MAX,
        s => measure_step(s, 200, 3),
    })
}

/// A PCMU ↔ Opus call's packets: `pcm8` in µ-law, and from a fullband Opus encoder (a browser).
fn call_packets(pcm8: &[i16]) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let pcm48 = codec::resample::resample(pcm8, 8000, 48000);
    (
        encode_packets(Format::Pcmu, pcm8),
        encode_packets(Format::Opus, &pcm48),
    )
}

/// Both ways of a transcoded PCMU ↔ Opus call, by `g`'s paths; returns the bytes sent.
#[inline(never)]
fn transcode_call(g: &Graph, (ulaw, opus): &(Vec<Vec<u8>>, Vec<Vec<u8>>)) -> usize {
    let mut buf = [0u8; 1275];
    let mut sent = 0;
    for (from, to, packets) in [
        (Format::Pcmu, Format::Opus, ulaw),
        (Format::Opus, Format::Pcmu, opus),
    ] {
        let mut t = Translator::new(g, from, to).unwrap();
        for p in packets {
            t.push(Some(p), 0).unwrap();
            while let Some(r) = t.pull(20, &mut buf) {
                sent += r.unwrap();
            }
        }
    }
    std::hint::black_box(sent)
}

/// `OPUS_CALL=at8k|resampled`: the call once by one path, for instruction counts
/// (`valgrind --tool=callgrind --toggle-collect='*transcode_call*'`).
fn opus_call_once(path: &str, pcm8: &[i16]) {
    let g = match path {
        "at8k" => Graph::global().clone(),
        "resampled" => resampled_graph(),
        other => panic!("OPUS_CALL={other}: at8k or resampled"),
    };
    let sent = transcode_call(&g, &call_packets(pcm8));
    println!("{path}: {sent} bytes sent");
}

/// A transcoded PCMU ↔ Opus call-second both ways (PCMU → Opus, and Opus from a fullband
/// encoder → PCMU), by the graph's path (Opus coded at 8 kHz) against the path before it
/// (resampled to and from 48 kHz, the encoder held to narrowband): µs of thread CPU per second
/// of audio in each round, the two alternating; the median ratio of the rounds and its spread.
fn opus_pcmu_call(rounds: usize, seconds: f64, pcm8: &[i16]) {
    let graph = Graph::global();
    let resampled = resampled_graph();
    let packets = call_packets(pcm8);
    let time = |g: &Graph| {
        let t0 = cpu_now();
        transcode_call(g, &packets);
        (cpu_now() - t0) / seconds
    };
    let (mut at8, mut at48) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        if r % 2 == 0 {
            at8.push(time(graph));
            at48.push(time(&resampled));
        } else {
            at48.push(time(&resampled));
            at8.push(time(graph));
        }
    }
    let mut ratios: Vec<f64> = at8.iter().zip(&at48).map(|(a, b)| a / b).collect();
    ratios.sort_by(f64::total_cmp);
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let path = |g: &Graph, a, b| {
        let p = g.path(Node::Codec(a), Node::Codec(b)).unwrap();
        let s: Vec<String> = p.steps.iter().map(|s| format!("{s:?}")).collect();
        s.join(" > ")
    };
    println!(
        "pcmu<->opus call at 8 kHz {:7.1}  resampled {:7.1}  ratio median {:.3} (min {:.3}, max {:.3}, {rounds} rounds; {})",
        median(&at8),
        median(&at48),
        median(&ratios),
        ratios[0],
        ratios[ratios.len() - 1],
        Format::Opus.implementation()
    );
    for g in [graph, &resampled] {
        println!(
            "  {}  |  {}",
            path(g, Format::Pcmu, Format::Opus),
            path(g, Format::Opus, Format::Pcmu)
        );
    }
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
    // Linear 8 kHz speech through Opus and back by each path, for PESQ.
    write("source", pcm8);
    let l16 = encode_packets(Format::L16, pcm8);
    for (name, g) in [("at8k", graph), ("resampled", &resampled)] {
        let mut there = Translator::new(g, Format::L16, Format::Opus).unwrap();
        let mut back = Translator::new(g, Format::Opus, Format::L16).unwrap();
        let (mut b1, mut b2, mut pcm) = ([0u8; 1275], [0u8; 320], Vec::new());
        for p in &l16 {
            there.push(Some(p), 0).unwrap();
            while let Some(r) = there.pull(20, &mut b1) {
                back.push(Some(&b1[..r.unwrap()]), 0).unwrap();
                while let Some(r) = back.pull(20, &mut b2) {
                    let n = r.unwrap();
                    pcm.extend(
                        b2[..n]
                            .chunks_exact(2)
                            .map(|b| i16::from_be_bytes([b[0], b[1]])),
                    );
                }
            }
        }
        write(name, &pcm);
    }
}
