use crate::translate::{encode_packets, test_signal};
use crate::*;

/// Best normalised cross-correlation of `b` against `a` over lags 0..max_lag (codec delay).
pub(crate) fn best_correlation(a: &[i16], b: &[i16], max_lag: usize) -> (f64, usize) {
    let mut best = (f64::MIN, 0);
    for lag in 0..=max_lag {
        let n = a.len().min(b.len().saturating_sub(lag));
        let (mut ab, mut aa, mut bb) = (0.0, 0.0, 0.0);
        for i in 0..n {
            let (x, y) = (a[i] as f64, b[i + lag] as f64);
            ab += x * y;
            aa += x * x;
            bb += y * y;
        }
        let c = ab / (aa.sqrt() * bb.sqrt()).max(1.0);
        if c > best.0 {
            best = (c, lag);
        }
    }
    best
}

fn round_trip(f: Format, pcm: &[i16]) -> Vec<i16> {
    let mut dec = f.decoder();
    let mut out = vec![0i16; pcm.len() + 5760];
    let mut n = 0;
    for p in encode_packets(f, pcm) {
        n += dec.decode(&p, &mut out[n..]).unwrap();
    }
    out.truncate(n);
    out
}

#[test]
fn every_format_round_trips_speechlike_audio() {
    for &f in Format::all() {
        // 1.2 s: whole packets of every format (iLBC's are 30 ms).
        let pcm = test_signal(f.pcm_rate(), 1200);
        let back = round_trip(f, &pcm);
        assert_eq!(back.len(), pcm.len(), "{f}");
        let (c, lag) = best_correlation(&pcm, &back, f.samples_in(20));
        // Waveform codecs keep the waveform; parametric ones (GSM, Speex, Opus) keep less of it.
        let min = match f {
            Format::Pcmu | Format::Pcma | Format::L16 | Format::L16Wide => 0.999,
            // G.726's backward-adaptive ADPCM tracks this harsh synthetic signal less well than speech.
            Format::G722 => 0.95,
            Format::G726 => 0.9,
            _ => 0.6,
        };
        assert!(c >= min, "{f}: correlation {c:.3} at lag {lag}");
    }
}

#[test]
fn packet_sizes_match_the_rfcs() {
    let size = |f: Format| encode_packets(f, &test_signal(f.pcm_rate(), f.packet_ms()))[0].len();
    assert_eq!(size(Format::Pcmu), 160);
    assert_eq!(size(Format::Gsm), 33);
    assert_eq!(size(Format::G722), 160);
    assert_eq!(size(Format::G726), 80);
    assert_eq!(size(Format::L16), 320);
    assert_eq!(size(Format::L16Wide), 640);
    assert_eq!(size(Format::Speex), 38); // quality 8: 15 kbit/s
    assert!((20..=120).contains(&size(Format::Opus)));
    assert_eq!(size(Format::Ilbc20), 38);
    assert_eq!(size(Format::Ilbc30), 50);
}

#[test]
fn bad_lengths_and_corrupt_payloads_are_errors_not_panics() {
    let mut out = [0u8; 2000];
    for &f in Format::all() {
        let mut enc = f.encoder();
        if f.frame_samples() > 1 {
            assert!(enc.encode(&[0; 7], &mut out).is_err(), "{f}");
        }
        let mut dec = f.decoder();
        let mut pcm = vec![0i16; 5760];
        let mut rng = 7u32;
        for len in [0usize, 1, 5, 33, 38, 160, 321] {
            let junk: Vec<u8> = (0..len)
                .map(|_| {
                    rng = rng.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    (rng >> 24) as u8
                })
                .collect();
            let _ = dec.decode(&junk, &mut pcm);
        }
        assert_eq!(dec.conceal(&mut pcm[..f.samples_in(20)]), f.samples_in(20));
    }
}

/// An empty payload carries no audio. libopus took one for a lost packet and concealed the whole
/// output, 120 ms in the engine's buffer, for a 12-byte datagram (found by fuzz target codec_opus).
#[test]
fn an_empty_payload_decodes_to_no_audio() {
    for &f in Format::all() {
        let mut pcm = vec![0i16; 5760];
        let n = f.decoder().decode(&[], &mut pcm).unwrap_or(0);
        assert_eq!(n, 0, "{f}");
    }
}

#[test]
fn opus_uses_a_48k_clock_and_fec_recovers_a_lost_packet() {
    assert_eq!(Format::Opus.rtp_clock(), 48000);
    assert_eq!(Format::Opus.clock_units_in(20), 960);
    let pcm = test_signal(48000, 200);
    let mut enc = OpusEnc::new(OpusOptions {
        fec: true,
        loss_percent: 20,
        ..Default::default()
    })
    .unwrap();
    let mut buf = [0u8; 1275];
    let packets: Vec<Vec<u8>> = pcm
        .chunks_exact(960)
        .map(|p| {
            let n = enc.encode(p, &mut buf).unwrap();
            buf[..n].to_vec()
        })
        .collect();
    let mut dec = OpusDec::new().unwrap();
    let mut out = [0i16; 960];
    for p in &packets[..5] {
        assert_eq!(dec.decode(p, &mut out).unwrap(), 960);
    }
    // Packet 5 is lost: recover it from packet 6's FEC.
    assert_eq!(dec.decode_fec(&packets[6], &mut out).unwrap(), 960);
    assert!(out.iter().any(|&s| s != 0));
    let dtx = OpusEnc::new(OpusOptions {
        dtx: true,
        ..Default::default()
    });
    assert!(dtx.is_ok());
}

#[test]
fn resampler_keeps_a_tone_between_8_16_and_48k() {
    for (a, b) in crate::resample::RATES {
        let tone = |rate: u32| -> Vec<i16> {
            (0..rate as usize / 2)
                .map(|i| {
                    (8000.0 * (2.0 * std::f64::consts::PI * 1000.0 * i as f64 / rate as f64).sin())
                        as i16
                })
                .collect()
        };
        let mut r = Resampler::new(a, b);
        let mut out = Vec::new();
        let mut buf = vec![0i16; r.output_len((a / 50) as usize) + 16];
        for chunk in tone(a).chunks_exact((a / 50) as usize) {
            let n = r.process(chunk, &mut buf);
            out.extend_from_slice(&buf[..n]);
        }
        let expect = tone(b);
        assert_eq!(out.len(), expect.len(), "{a}->{b}");
        let (c, _) = best_correlation(&expect[..expect.len() / 2], &out, b as usize / 100);
        assert!(c > 0.99, "{a}->{b}: {c}");
    }
}

#[test]
fn graph_finds_cheapest_paths() {
    // Fixed costs make the expected paths certain.
    let g = Graph::build(|s| match s {
        Step::Table(..) => 10.0,
        Step::Resample(..) => 100.0,
        Step::Decode(f, _) | Step::Encode(f, _) if f == Format::Opus => 1000.0,
        _ => 50.0,
    });
    let p = |a: Format, b: Format| g.path(Node::Codec(a), Node::Codec(b)).unwrap().clone();
    assert_eq!(
        p(Format::Pcmu, Format::Pcma).steps,
        [Step::Table(Format::Pcmu, Format::Pcma)]
    );
    assert_eq!(
        p(Format::Gsm, Format::Speex).steps,
        [
            Step::Decode(Format::Gsm, 8000),
            Step::Encode(Format::Speex, 8000)
        ]
    );
    // Opus codes a narrowband or wideband leg's audio at its rate, without resampling.
    let gsm_opus = p(Format::Gsm, Format::Opus);
    assert_eq!(
        gsm_opus.steps,
        [
            Step::Decode(Format::Gsm, 8000),
            Step::Encode(Format::Opus, 8000)
        ]
    );
    assert_eq!(gsm_opus.cost_us, 1050.0);
    assert_eq!(
        p(Format::Opus, Format::G722).steps,
        [
            Step::Decode(Format::Opus, 16000),
            Step::Encode(Format::G722, 16000)
        ]
    );
    assert!(g
        .path(Node::Codec(Format::Gsm), Node::Codec(Format::Gsm))
        .is_none());
    let m = g.render_matrix();
    assert!(m.contains("slin16") && m.contains("g726"), "{m}");
}

/// A path never narrows the audio both its ends carry, however cheap the narrower way.
#[test]
fn paths_keep_the_bandwidth_both_ends_carry() {
    let g = Graph::build(|s| match s {
        Step::Decode(Format::Opus, 8000) | Step::Encode(Format::Opus, 8000) => 1.0,
        Step::Decode(Format::Opus, _) | Step::Encode(Format::Opus, _) => 1000.0,
        _ => 50.0,
    });
    let p = |a: Format, b: Format| g.path(Node::Codec(a), Node::Codec(b)).unwrap().clone();
    assert_eq!(
        p(Format::Opus, Format::L16Wide).steps,
        [
            Step::Decode(Format::Opus, 16000),
            Step::Encode(Format::L16Wide, 16000)
        ]
    );
    assert_eq!(
        p(Format::Speex16, Format::Opus).steps,
        [
            Step::Decode(Format::Speex16, 16000),
            Step::Encode(Format::Opus, 16000)
        ]
    );
    assert_eq!(
        p(Format::Opus, Format::Pcmu).steps,
        [
            Step::Decode(Format::Opus, 8000),
            Step::Encode(Format::Pcmu, 8000)
        ]
    );
}

#[test]
fn measured_costs_are_plausible() {
    let g = Graph::measure(200, 1);
    let cost = |a: &str, b: &str| {
        g.path(Node::from_name(a).unwrap(), Node::from_name(b).unwrap())
            .unwrap()
            .cost_us
    };
    assert!(cost("pcmu", "pcma") < cost("gsm", "pcmu"));
    assert!(cost("slin", "gsm") > 0.0);
    assert!(cost("slin48", "opus") > cost("slin", "pcmu"));
}

#[test]
fn translator_carries_audio_across_formats_and_rates() {
    let g = Graph::build(|_| 1.0);
    for (from, to) in [
        (Format::Gsm, Format::Opus),
        (Format::Opus, Format::Speex),
        (Format::G722, Format::Opus),
        (Format::Opus, Format::Pcmu),
        (Format::G722, Format::Pcmu),
        (Format::Pcmu, Format::Pcma),
        (Format::Speex16, Format::G726),
        (Format::Gsm, Format::Ilbc30),
        (Format::Ilbc20, Format::Speex),
    ] {
        let src = test_signal(from.pcm_rate(), 1200);
        let mut t = Translator::new(&g, from, to).unwrap();
        let mut dec = to.decoder();
        let mut out = vec![0u8; 2000];
        let mut pcm = vec![0i16; 5760];
        let mut got = Vec::new();
        for (i, p) in encode_packets(from, &src).iter().enumerate() {
            // One loss in the middle is concealed, not fatal.
            t.push((i != 20).then_some(&p[..]), from.packet_ms())
                .unwrap();
            while let Some(r) = t.pull(to.packet_ms(), &mut out) {
                let n = dec.decode(&out[..r.unwrap()], &mut pcm).unwrap();
                got.extend_from_slice(&pcm[..n]);
            }
        }
        assert_eq!(got.len(), to.samples_in(1200), "{from}->{to}");
        let reference =
            crate::resample::resample(&src[..src.len() / 3], from.pcm_rate(), to.pcm_rate());
        let (c, _) = best_correlation(&reference, &got, to.samples_in(40));
        assert!(c > 0.5, "{from}->{to}: {c}");
    }
}

#[test]
fn names_resolve() {
    assert_eq!(Format::from_name("G726-32"), Some(Format::G726));
    assert_eq!(Format::from_name("ulaw"), Some(Format::Pcmu));
    assert_eq!(Format::from_rtpmap("opus", 48000, None), Some(Format::Opus));
    assert_eq!(
        Format::from_rtpmap("SPEEX", 16000, None),
        Some(Format::Speex16)
    );
    assert_eq!(
        Format::from_rtpmap("L16", 16000, None),
        Some(Format::L16Wide)
    );
    assert_eq!(Format::from_rtpmap("G722", 8000, None), Some(Format::G722));
    // RFC 3952 §5: iLBC without `mode` is 30 ms.
    assert_eq!(
        Format::from_rtpmap("iLBC", 8000, None),
        Some(Format::Ilbc30)
    );
    assert_eq!(
        Format::from_rtpmap("ILBC", 8000, Some("mode=20")),
        Some(Format::Ilbc20)
    );
    assert_eq!(
        Format::from_rtpmap("iLBC", 8000, Some(" mode = 30 ")),
        Some(Format::Ilbc30)
    );
    for &f in Format::all() {
        assert_eq!(Format::from_name(f.name()), Some(f));
    }
}

#[test]
fn implementations_name_the_code_and_its_settings() {
    assert_eq!(Format::G726.implementation(), "rust, 32 kbit/s");
    assert_eq!(Format::G722.implementation(), "rust, 64 kbit/s");
    assert_eq!(Format::Pcmu.implementation(), "rust");
    assert_eq!(Format::Gsm.implementation(), "rust");
    assert_eq!(
        Format::Opus.implementation(),
        "libopus, 24 kbit/s, complexity 5, fec on, dtx off"
    );
    assert!(Format::Speex
        .implementation()
        .starts_with("libspeex, quality "));
}
