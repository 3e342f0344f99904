//! Recording what a leg receives to a WAV (8 kHz, 16-bit, mono).
//!
//! Placement is by RTP timestamp, so lost packets and silence suppression
//! become zero samples and the file's duration matches the call.

use std::io::{Seek, Write};

use codec::G711;

/// Gaps beyond this (10 s) are treated as a timestamp jump, not silence.
const MAX_GAP: u32 = 80_000;

/// Where a recording goes. Writes happen inline on the media path, so give
/// the engine a buffered writer (`BufWriter<File>`) or a `Cursor<Vec<u8>>`.
pub trait RecordSink: Write + Seek + Send {}

impl<T: Write + Seek + Send> RecordSink for T {}

pub use hound::Error as RecordError;

pub(crate) struct Recorder {
    wav: hound::WavWriter<Box<dyn RecordSink>>,
    /// SSRC and timestamp expected next.
    next: Option<(u32, u32)>,
}

impl Recorder {
    pub(crate) fn new(sink: Box<dyn RecordSink>) -> Result<Recorder, RecordError> {
        let spec = hound::WavSpec {
            channels: 1,
            sample_rate: 8000,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        Ok(Recorder {
            wav: hound::WavWriter::new(sink, spec)?,
            next: None,
        })
    }

    /// Appends one packet's audio, preceded by silence for any timestamp gap.
    /// Late (reordered) packets are dropped: the file cannot be rewritten.
    pub(crate) fn write(
        &mut self,
        ssrc: u32,
        ts: u32,
        payload: &[u8],
        law: G711,
    ) -> Result<(), RecordError> {
        if let Some((_, next_ts)) = self.next.filter(|(s, _)| *s == ssrc) {
            let gap = ts.wrapping_sub(next_ts);
            if gap > u32::MAX / 2 {
                return Ok(());
            }
            if (1..=MAX_GAP).contains(&gap) {
                let mut w = self.wav.get_i16_writer(gap);
                for _ in 0..gap {
                    w.write_sample(0i16);
                }
                w.flush()?;
            }
        }
        let mut w = self.wav.get_i16_writer(payload.len() as u32);
        for &c in payload {
            w.write_sample(law.decode_sample(c));
        }
        w.flush()?;
        self.next = Some((ssrc, ts.wrapping_add(payload.len() as u32)));
        Ok(())
    }

    /// Completes the WAV header; returns the samples written.
    pub(crate) fn finish(self) -> Result<u32, RecordError> {
        let n = self.wav.len();
        self.wav.finalize()?;
        Ok(n)
    }
}
