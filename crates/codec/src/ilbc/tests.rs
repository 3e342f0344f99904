use super::*;

/// A vowel-like test signal: a 140 Hz pulse train through two resonances,
/// with a slow amplitude envelope.
fn voiced(samples: usize) -> Vec<i16> {
    let mut out = Vec::with_capacity(samples);
    let (mut y1, mut y2, mut z1, mut z2) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    for n in 0..samples {
        let pulse = if n % 57 == 0 { 4000.0 } else { 0.0 };
        let (r, w) = (0.97f64, 2.0 * std::f64::consts::PI * 700.0 / 8000.0);
        let y = pulse + 2.0 * r * w.cos() * y1 - r * r * y2;
        y2 = y1;
        y1 = y;
        let (r2, w2) = (0.95f64, 2.0 * std::f64::consts::PI * 1200.0 / 8000.0);
        let z = y + 2.0 * r2 * w2.cos() * z1 - r2 * r2 * z2;
        z2 = z1;
        z1 = z;
        let env = 0.6 + 0.4 * (n as f64 / 2000.0).sin();
        out.push((z * 0.05 * env).clamp(-32000.0, 32000.0) as i16);
    }
    out
}

fn snr_db(reference: &[i16], decoded: &[i16]) -> f64 {
    let (mut s, mut e) = (0.0f64, 0.0f64);
    for (a, b) in reference.iter().zip(decoded) {
        s += f64::from(*a).powi(2);
        e += (f64::from(*a) - f64::from(*b)).powi(2);
    }
    10.0 * (s / e.max(1.0)).log10()
}

/// Round trip with the decoder's delay (40/80 samples of enhancer look-ahead
/// are not added: the enhancer's output is aligned with its input frame
/// minus the delay, so compare at the best small shift).
fn round_trip(mode: Mode, pcm: &[i16]) -> (Vec<u8>, Vec<i16>) {
    let mut enc = IlbcEncoder::new(mode);
    let mut dec = IlbcDecoder::new(mode);
    let (mut bits, mut out) = (Vec::new(), Vec::new());
    for frame in pcm.chunks_exact(mode.samples()) {
        let mut b = vec![0u8; mode.bytes()];
        enc.encode(frame, &mut b);
        let mut o = vec![0i16; mode.samples()];
        dec.decode(Some(&b), &mut o);
        bits.extend_from_slice(&b);
        out.extend_from_slice(&o);
    }
    (bits, out)
}

fn best_snr(pcm: &[i16], out: &[i16]) -> (usize, f64) {
    (0..120)
        .map(|d| {
            (
                d,
                snr_db(&pcm[..pcm.len() - 200], &out[d..d + pcm.len() - 200]),
            )
        })
        .fold((0, f64::MIN), |b, x| if x.1 > b.1 { x } else { b })
}

#[test]
fn frames_have_the_rfc_sizes_and_decode_to_the_input() {
    let pcm = voiced(8000);
    for mode in [Mode::Ms20, Mode::Ms30] {
        let (bits, out) = round_trip(mode, &pcm[..pcm.len() / mode.samples() * mode.samples()]);
        assert_eq!(bits.len(), pcm.len() / mode.samples() * mode.bytes());
        let (delay, snr) = best_snr(&pcm, &out);
        eprintln!("{mode:?}: delay {delay}, SNR {snr:.1} dB");
        assert!(snr > 8.0, "{mode:?}: SNR {snr:.1} dB at delay {delay}");
    }
}

#[test]
fn bits_round_trip() {
    for mode in [Mode::Ms20, Mode::Ms30] {
        let mut seed = 1u32;
        for _ in 0..50 {
            let mut frame = vec![0u8; mode.bytes()];
            for b in frame.iter_mut() {
                seed = seed.wrapping_mul(1103515245).wrapping_add(12345);
                *b = (seed >> 16) as u8;
            }
            // The last bit is the "empty frame" flag; the 30 ms layout has
            // no spare bit besides it, the 20 ms one none either.
            *frame.last_mut().unwrap() &= 0xfe;
            let (p, not_empty) = bits::unpack(mode, &frame);
            assert!(not_empty);
            let mut again = vec![0u8; mode.bytes()];
            bits::pack(mode, &p, &mut again);
            assert_eq!(frame, again);
        }
    }
}

#[test]
fn any_frame_decodes_without_panic_and_losses_are_concealed() {
    for mode in [Mode::Ms20, Mode::Ms30] {
        let mut dec = IlbcDecoder::new(mode);
        let mut seed = 7u32;
        let mut out = vec![0i16; mode.samples()];
        for i in 0..400 {
            let mut frame = vec![0u8; mode.bytes()];
            for b in frame.iter_mut() {
                seed = seed.wrapping_mul(1103515245).wrapping_add(12345);
                *b = (seed >> 16) as u8;
            }
            if i % 3 == 0 {
                frame.fill(if i % 2 == 0 { 0xff } else { 0 });
            }
            dec.decode(if i % 7 == 0 { None } else { Some(&frame) }, &mut out);
        }
    }
}

#[test]
fn concealment_continues_the_signal() {
    let pcm = voiced(4800);
    let mode = Mode::Ms20;
    let mut enc = IlbcEncoder::new(mode);
    let mut dec = IlbcDecoder::new(mode);
    let mut lost_energy = 0.0f64;
    for (i, frame) in pcm.chunks_exact(160).enumerate() {
        let mut b = [0u8; 38];
        enc.encode(frame, &mut b);
        let mut o = [0i16; 160];
        let lost = i == 20;
        dec.decode(if lost { None } else { Some(&b) }, &mut o);
        if lost {
            lost_energy = o.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>() / 160.0;
        }
    }
    // The concealed frame is neither silence nor an explosion.
    let signal = pcm.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>() / pcm.len() as f64;
    assert!(
        lost_energy > signal * 0.05 && lost_energy < signal * 10.0,
        "{lost_energy} vs {signal}"
    );
}
