//! 16 kHz → 8 kHz decimation for prompts.
//!
//! A 63-tap Hamming-windowed sinc low-pass (cut-off 3.7 kHz) keeps the
//! telephone band and stops aliasing from 4-8 kHz content. It runs once at
//! prompt load, never per packet. General resampling arrives with the
//! wideband codec work.

const TAPS: usize = 63;
const CUTOFF_HZ: f64 = 3700.0;
const RATE_HZ: f64 = 16000.0;

fn taps() -> [f64; TAPS] {
    let mid = (TAPS / 2) as f64;
    let fc = CUTOFF_HZ / RATE_HZ;
    let mut h = [0.0; TAPS];
    for (i, t) in h.iter_mut().enumerate() {
        let n = i as f64 - mid;
        let sinc = if n == 0.0 {
            2.0 * fc
        } else {
            (2.0 * std::f64::consts::PI * fc * n).sin() / (std::f64::consts::PI * n)
        };
        let window =
            0.54 - 0.46 * (2.0 * std::f64::consts::PI * i as f64 / (TAPS - 1) as f64).cos();
        *t = sinc * window;
    }
    let gain: f64 = h.iter().sum();
    h.map(|x| x / gain)
}

/// Low-pass filters 16 kHz samples and keeps every other one.
pub(crate) fn decimate_by_two(input: &[i16]) -> Vec<i16> {
    let h = taps();
    let mid = TAPS / 2;
    (0..input.len())
        .step_by(2)
        .map(|center| {
            let acc: f64 = h
                .iter()
                .enumerate()
                .filter_map(|(k, c)| {
                    (center + k)
                        .checked_sub(mid)
                        .and_then(|i| input.get(i))
                        .map(|&x| c * x as f64)
                })
                .sum();
            acc.round().clamp(i16::MIN as f64, i16::MAX as f64) as i16
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sine(freq: f64, n: usize) -> Vec<i16> {
        (0..n)
            .map(|i| {
                (10000.0 * (2.0 * std::f64::consts::PI * freq * i as f64 / RATE_HZ).sin()) as i16
            })
            .collect()
    }

    fn rms(x: &[i16]) -> f64 {
        (x.iter().map(|&s| (s as f64).powi(2)).sum::<f64>() / x.len() as f64).sqrt()
    }

    #[test]
    fn keeps_voice_band_and_stops_aliases() {
        let pass = decimate_by_two(&sine(1000.0, 16000));
        assert_eq!(pass.len(), 8000);
        // Skip the filter's start-up edge.
        let ratio = rms(&pass[100..7900]) / rms(&sine(1000.0, 16000));
        assert!((0.97..1.03).contains(&ratio), "1 kHz gain {ratio}");
        // 6 kHz would alias to 2 kHz: must be at least 40 dB down.
        let stop = decimate_by_two(&sine(6000.0, 16000));
        assert!(
            rms(&stop[100..7900]) < 10000.0 / 100.0,
            "6 kHz leaked: {}",
            rms(&stop[100..7900])
        );
    }
}
