//! A digit played as its two DTMF tones over the audio relayed to a leg whose far end takes no
//! telephone-event: what a digit that arrived as an RFC 4733 event or a SIP INFO becomes there.

use codec::G711;

use crate::dtmf_detect::frequencies;
use crate::tone::{ToneGen, ToneSpec};

/// Level of each tone, dBm0: well inside what Q.24 receivers take (−26 to 0).
const LEVEL_DBM0: f32 = -8.0;
/// Shortest and longest tone played, ms (Q.24 receivers need 40 ms; a stuck key is cut).
const MIN_MS: u32 = 60;
const MAX_MS: u32 = 2000;

/// The tones still to play.
pub(crate) struct DigitTone {
    gen: ToneGen,
    /// Samples left (8 kHz).
    left: u32,
}

impl DigitTone {
    /// The tones of `digit` for `duration_ms`; `None` for a character that is no DTMF key.
    pub(crate) fn new(digit: char, duration_ms: u32) -> Option<DigitTone> {
        let (row, col) = frequencies(digit)?;
        let spec = ToneSpec {
            freqs_hz: vec![row, col],
            cadence: Vec::new(),
            level_dbm0: LEVEL_DBM0,
        };
        Some(DigitTone {
            gen: ToneGen::new(&spec, 8000),
            left: duration_ms.clamp(MIN_MS, MAX_MS) * 8,
        })
    }

    /// Overwrites the start of a G.711 payload with the tones; true once they are done.
    pub(crate) fn overlay(&mut self, law: G711, payload: &mut [u8]) -> bool {
        let mut pcm = [0i16; 160];
        for chunk in payload.chunks_mut(pcm.len()) {
            let n = chunk.len().min(self.left as usize);
            if n == 0 {
                break;
            }
            self.gen.fill(&mut pcm[..n]);
            for (b, &s) in chunk.iter_mut().zip(&pcm[..n]) {
                *b = law.encode_sample(s);
            }
            self.left -= n as u32;
        }
        self.left == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtmf_detect::ToneDetector;

    /// What is laid over silence is heard as the digit by the detector, for as long as asked.
    #[test]
    fn the_overlay_is_heard_as_the_digit() {
        for digit in "0123456789*#ABCD".chars() {
            let mut tone = DigitTone::new(digit, 100).unwrap();
            let mut det = ToneDetector::default();
            let mut found = Vec::new();
            for _ in 0..20 {
                let mut payload = [G711::Pcmu.silence(); 160];
                tone.overlay(G711::Pcmu, &mut payload);
                let pcm = payload.iter().map(|&b| G711::Pcmu.decode_sample(b));
                det.push(pcm, |d| found.push(d));
            }
            assert_eq!(found.len(), 1, "{digit}: {found:?}");
            assert_eq!(found[0].digit, digit);
            // Heard in whole blocks of 12.75 ms.
            assert!((85..=115).contains(&found[0].duration_ms), "{found:?}");
        }
        assert!(DigitTone::new('x', 100).is_none());
    }
}
