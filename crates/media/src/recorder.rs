//! Recording what a leg receives to a WAV (8 kHz, 16-bit, mono).
//!
//! Placement is by RTP timestamp, so lost packets and silence suppression
//! become zero samples and the file's duration matches the call. A recording
//! may end on its own after a run of silence ([`SilenceEnd`]): quiet audio is
//! held back until something louder follows, so the silence that ended it is
//! never written.

use std::io::{Seek, Write};
use std::time::Duration;

use codec::{Decoder, Format, Resampler};

/// Gaps beyond this (10 s) are treated as a timestamp jump, not silence.
const MAX_GAP: u32 = 80_000;

/// Where a recording goes. Writes happen inline on the media path, so give
/// the engine a buffered writer (`BufWriter<File>`) or a `Cursor<Vec<u8>>`.
pub trait RecordSink: Write + Seek + Send {}

impl<T: Write + Seek + Send> RecordSink for T {}

pub use hound::Error as RecordError;

/// Ends a recording after `after` of audio whose level stays below `level`
/// (the mean absolute sample value of a packet, 0–32767).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SilenceEnd {
    pub level: u16,
    pub after: Duration,
}

pub(crate) struct Recorder {
    out: Out,
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

/// The file, and the silence held back from it.
struct Out {
    wav: hound::WavWriter<Box<dyn RecordSink>>,
    silence: Option<Silence>,
}

struct Silence {
    level: u64,
    /// Samples of silence that end the recording.
    limit: usize,
    /// The quiet samples since the last loud packet, not written yet.
    held: Vec<i16>,
    ended: bool,
}

impl Out {
    /// Appends one packet's (or gap's) samples: a quiet one is held back; a loud one writes
    /// what was held, then itself.
    fn put(&mut self, samples: &[i16]) -> Result<(), RecordError> {
        if let Some(s) = &mut self.silence {
            if s.ended {
                return Ok(());
            }
            let sum: u64 = samples.iter().map(|&x| u64::from(x.unsigned_abs())).sum();
            if sum <= s.level * samples.len() as u64 {
                s.held.extend_from_slice(samples);
                if s.held.len() >= s.limit {
                    s.ended = true;
                    s.held = Vec::new();
                }
                return Ok(());
            }
            write_samples(&mut self.wav, &s.held)?;
            s.held.clear();
        }
        write_samples(&mut self.wav, samples)
    }
}

fn write_samples(
    wav: &mut hound::WavWriter<Box<dyn RecordSink>>,
    samples: &[i16],
) -> Result<(), RecordError> {
    if samples.is_empty() {
        return Ok(());
    }
    let mut w = wav.get_i16_writer(samples.len() as u32);
    for &s in samples {
        w.write_sample(s);
    }
    w.flush()
}

/// Linear samples in the largest packet any decoder produces (120 ms at 48 kHz).
const MAX_DECODED: usize = 5760;

impl Recorder {
    pub(crate) fn new(
        sink: Box<dyn RecordSink>,
        format: Format,
        end: Option<SilenceEnd>,
    ) -> Result<Recorder, RecordError> {
        let spec = hound::WavSpec {
            channels: 1,
            sample_rate: 8000,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        let silence = end.map(|e| Silence {
            level: u64::from(e.level),
            limit: (e.after.as_millis() as usize * 8).max(1),
            held: Vec::new(),
            ended: false,
        });
        Ok(Recorder {
            out: Out {
                wav: hound::WavWriter::new(sink, spec)?,
                silence,
            },
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
                const ZEROS: [i16; 160] = [0; 160];
                let mut left = gap as usize;
                while left > 0 {
                    let n = left.min(ZEROS.len());
                    self.out.put(&ZEROS[..n])?;
                    left -= n;
                }
            }
        }
        let units = match (self.format, &mut self.decoder) {
            (Format::Pcmu | Format::Pcma, _) => {
                let law = if self.format == Format::Pcmu {
                    codec::G711::Pcmu
                } else {
                    codec::G711::Pcma
                };
                for chunk in payload.chunks(MAX_DECODED) {
                    for (s, &c) in self.pcm.iter_mut().zip(chunk) {
                        *s = law.decode_sample(c);
                    }
                    self.out.put(&self.pcm[..chunk.len()])?;
                }
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
                self.out.put(out)?;
                (n as u64 * u64::from(clock) / u64::from(self.format.pcm_rate())) as u32
            }
            (_, None) => return Ok(()),
        };
        self.next = Some((ssrc, ts.wrapping_add(units)));
        Ok(())
    }

    /// Whether a run of silence ended the recording (what follows is not written).
    pub(crate) fn ended_on_silence(&self) -> bool {
        self.out.silence.as_ref().is_some_and(|s| s.ended)
    }

    /// Completes the WAV header (silence held back is left out); returns the samples written.
    pub(crate) fn finish(self) -> Result<u32, RecordError> {
        let n = self.out.wav.len();
        self.out.wav.finalize()?;
        Ok(n)
    }
}

fn is_g711(f: Format) -> bool {
    matches!(f, Format::Pcmu | Format::Pcma)
}
