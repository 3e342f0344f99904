//! Call-progress tones generated on the fly: summed sines with any on/off
//! cadence, using a phase accumulator over a shared sine table (exact
//! frequency over long calls, no per-sample `sin`).

use std::sync::OnceLock;
use std::time::Duration;

const TABLE_BITS: u32 = 10;
#[cfg(test)]
const RATE: u64 = 8000;

/// What to play: frequencies summed, switched by a cadence.
#[derive(Debug, Clone, PartialEq)]
pub struct ToneSpec {
    pub freqs_hz: Vec<u16>,
    /// Alternating on, off, on, off... durations, repeated; empty plays continuously.
    pub cadence: Vec<Duration>,
    /// Level of each frequency in dBm0.
    pub level_dbm0: f32,
}

impl ToneSpec {
    /// A tone at -16 dBm0 per frequency, a comfortable level for all of
    /// dial, ringback and busy.
    pub fn new(freqs_hz: Vec<u16>, cadence: Vec<Duration>) -> ToneSpec {
        ToneSpec {
            freqs_hz,
            cadence,
            level_dbm0: -16.0,
        }
    }

    /// North American ringback: 440+480 Hz, 2 s on, 4 s off.
    pub fn ringback() -> ToneSpec {
        Self::new(
            vec![440, 480],
            vec![Duration::from_secs(2), Duration::from_secs(4)],
        )
    }

    /// North American busy: 480+620 Hz, 0.5 s on, 0.5 s off.
    pub fn busy() -> ToneSpec {
        Self::new(
            vec![480, 620],
            vec![Duration::from_millis(500), Duration::from_millis(500)],
        )
    }

    /// North American dial tone: 350+440 Hz, continuous.
    pub fn dial() -> ToneSpec {
        Self::new(vec![350, 440], vec![])
    }
}

fn sine_table() -> &'static [f32; 1 << TABLE_BITS] {
    static TABLE: OnceLock<[f32; 1 << TABLE_BITS]> = OnceLock::new();
    TABLE.get_or_init(|| {
        std::array::from_fn(|i| (i as f32 * std::f32::consts::TAU / (1 << TABLE_BITS) as f32).sin())
    })
}

/// Generator state for one leg.
#[derive(Debug, Clone)]
pub(crate) struct ToneGen {
    /// (phase, increment) per frequency, in 2^-32 turns.
    oscillators: Vec<(u32, u32)>,
    amplitude: f32,
    /// Cadence segments in samples.
    segments: Vec<u64>,
    segment: usize,
    left: u64,
}

impl ToneGen {
    /// A generator of `spec` at `rate` samples per second.
    pub(crate) fn new(spec: &ToneSpec, rate: u32) -> ToneGen {
        let rate = u64::from(rate);
        let oscillators = spec
            .freqs_hz
            .iter()
            .map(|&f| (0, (((f as u64) << 32) / rate) as u32))
            .collect();
        // A full-scale G.711 sine (peak 32124 of 16 bits) is +3.17 dBm0.
        let amplitude = 32124.0 * 10f32.powf((spec.level_dbm0 - 3.17) / 20.0);
        let segments: Vec<u64> = spec
            .cadence
            .iter()
            .map(|d| (d.as_nanos() as u64 * rate / 1_000_000_000).max(1))
            .collect();
        let left = segments.first().copied().unwrap_or(u64::MAX);
        ToneGen {
            oscillators,
            amplitude,
            segments,
            segment: 0,
            left,
        }
    }

    /// Fills `out` with the next samples.
    pub(crate) fn fill(&mut self, out: &mut [i16]) {
        let table = sine_table();
        for s in out {
            let on = self.segment & 1 == 0; // even segments are "on"
            let mut acc = 0.0;
            for (phase, inc) in &mut self.oscillators {
                if on {
                    acc += table[(*phase >> (32 - TABLE_BITS)) as usize];
                }
                *phase = phase.wrapping_add(*inc);
            }
            *s = (acc * self.amplitude).clamp(i16::MIN as f32, i16::MAX as f32) as i16;
            if !self.segments.is_empty() {
                self.left -= 1;
                if self.left == 0 {
                    self.segment = (self.segment + 1) % self.segments.len();
                    self.left = self.segments[self.segment];
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goertzel power of `freq` in `x`, normalised to amplitude.
    fn amplitude_at(x: &[i16], freq: f64) -> f64 {
        let w = 2.0 * std::f64::consts::PI * freq / RATE as f64;
        let (mut s1, mut s2) = (0.0, 0.0);
        for &v in x {
            let s = v as f64 + 2.0 * w.cos() * s1 - s2;
            s2 = s1;
            s1 = s;
        }
        (s1 * s1 + s2 * s2 - 2.0 * w.cos() * s1 * s2).sqrt() * 2.0 / x.len() as f64
    }

    #[test]
    fn ringback_has_its_frequencies_and_cadence() {
        let mut g = ToneGen::new(&ToneSpec::ringback(), 8000);
        let mut buf = vec![0i16; 8000 * 6];
        g.fill(&mut buf);
        let on = &buf[..16000];
        let a440 = amplitude_at(on, 440.0);
        let a480 = amplitude_at(on, 480.0);
        let expect = 32124.0 * 10f64.powf((-16.0 - 3.17) / 20.0);
        assert!(
            (a440 / expect - 1.0).abs() < 0.05 && (a480 / expect - 1.0).abs() < 0.05,
            "{a440} {a480} vs {expect}"
        );
        assert!(amplitude_at(on, 1000.0) < expect / 100.0);
        assert!(
            buf[16000..].iter().all(|&s| s == 0),
            "off period must be silent"
        );
        // The cadence repeats: the next 6 s start with tone again.
        g.fill(&mut buf[..160]);
        assert!(buf[..160].iter().any(|&s| s.abs() > 1000));
    }

    #[test]
    fn continuous_tone_never_stops() {
        let mut g = ToneGen::new(&ToneSpec::dial(), 8000);
        let mut buf = vec![0i16; 800];
        for _ in 0..100 {
            g.fill(&mut buf);
            assert!(buf.iter().any(|&s| s.abs() > 1000));
        }
    }
}
