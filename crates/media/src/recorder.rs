//! Recording what a leg receives to a WAV (8 kHz, 16-bit, mono).
//!
//! Placement is by RTP timestamp, so lost packets and silence suppression
//! become zero samples and the file's duration matches the call.

use std::io::{Seek, Write};

use codec::{Decoder, Format, Resampler};

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
    format: Format,
    /// For formats other than G.711 (which decode by table).
    decoder: Option<Box<dyn Decoder>>,
    /// To 8 kHz from a wideband format's rate.
    down: Option<Resampler>,
    pcm: Vec<i16>,
    pcm8: Vec<i16>,
}

/// Linear samples in the largest packet any decoder produces (120 ms at 48 kHz).
const MAX_DECODED: usize = 5760;

impl Recorder {
    pub(crate) fn new(sink: Box<dyn RecordSink>, format: Format) -> Result<Recorder, RecordError> {
        let spec = hound::WavSpec {
            channels: 1,
            sample_rate: 8000,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        Ok(Recorder {
            wav: hound::WavWriter::new(sink, spec)?,
            next: None,
            format,
            decoder: None,
            down: None,
            pcm: vec![0; MAX_DECODED],
            pcm8: vec![0; MAX_DECODED],
        }
        .with_format(format))
    }

    fn with_format(mut self, format: Format) -> Recorder {
        self.set_format(format);
        self
    }

    /// The leg's codec changed (re-INVITE): decode what follows with the new one.
    pub(crate) fn set_format(&mut self, format: Format) {
        if self.format == format && (self.decoder.is_some() || is_g711(format)) {
            return;
        }
        self.format = format;
        self.decoder = (!is_g711(format)).then(|| format.decoder());
        self.down = (format.pcm_rate() != 8000).then(|| Resampler::new(format.pcm_rate(), 8000));
        self.next = None;
    }

    /// Appends one packet's audio, preceded by silence for any timestamp gap.
    /// Late (reordered) packets are dropped: the file cannot be rewritten.
    pub(crate) fn write(&mut self, ssrc: u32, ts: u32, payload: &[u8]) -> Result<(), RecordError> {
        let clock = self.format.rtp_clock();
        if let Some((_, next_ts)) = self.next.filter(|(s, _)| *s == ssrc) {
            let gap = ts.wrapping_sub(next_ts);
            if gap > u32::MAX / 2 {
                return Ok(());
            }
            // In 8 kHz samples.
            let gap = (u64::from(gap) * 8000 / u64::from(clock)) as u32;
            if (1..=MAX_GAP).contains(&gap) {
                let mut w = self.wav.get_i16_writer(gap);
                for _ in 0..gap {
                    w.write_sample(0i16);
                }
                w.flush()?;
            }
        }
        let units = match (self.format, &mut self.decoder) {
            (Format::Pcmu | Format::Pcma, _) => {
                let law = if self.format == Format::Pcmu {
                    codec::G711::Pcmu
                } else {
                    codec::G711::Pcma
                };
                let mut w = self.wav.get_i16_writer(payload.len() as u32);
                for &c in payload {
                    w.write_sample(law.decode_sample(c));
                }
                w.flush()?;
                payload.len() as u32
            }
            (_, Some(dec)) => {
                // A payload that does not decode is left out, like a lost packet.
                let Ok(n) = dec.decode(payload, &mut self.pcm) else {
                    return Ok(());
                };
                let out = match &mut self.down {
                    Some(r) => {
                        let m = r.process(&self.pcm[..n], &mut self.pcm8);
                        &self.pcm8[..m]
                    }
                    None => &self.pcm[..n],
                };
                let mut w = self.wav.get_i16_writer(out.len() as u32);
                for &s in out {
                    w.write_sample(s);
                }
                w.flush()?;
                (n as u64 * u64::from(clock) / u64::from(self.format.pcm_rate())) as u32
            }
            (_, None) => return Ok(()),
        };
        self.next = Some((ssrc, ts.wrapping_add(units)));
        Ok(())
    }

    /// Completes the WAV header; returns the samples written.
    pub(crate) fn finish(self) -> Result<u32, RecordError> {
        let n = self.wav.len();
        self.wav.finalize()?;
        Ok(n)
    }
}

fn is_g711(f: Format) -> bool {
    matches!(f, Format::Pcmu | Format::Pcma)
}
