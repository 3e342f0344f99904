//! Announcements, stored pre-encoded in both G.711 laws so that steady-state
//! playback is a `memcpy` into the packet buffer; for other formats the prompt
//! is encoded once into that format's packets, packet by packet as the first
//! call playing it reaches them, so no call waits for a whole prompt to be
//! encoded and later calls cost no codec work at all. A prompt stored coded
//! (`.gsm`, `.g722`) keeps its own frames, for playback that transcodes per call.

use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use codec::{Codec, Encoder, Format, G711};

use crate::decimate::decimate_by_two;

const SOX_HINT: &str = "convert with `sox in.wav -b16 -c1 -r8000 out.wav`";

/// A prompt file's own frames, one packet ([`Format::packet_ms`]) each.
pub type Frames = Arc<[Box<[u8]>]>;

/// A prompt's audio as whole packets of one format, shared by every call that
/// plays it, each encoded the first time any call asks for it.
pub struct Packets {
    slots: Box<[OnceLock<Box<[u8]>>]>,
    /// What encodes the slots in order; `None` once all are done (or given).
    encoding: Mutex<Option<Encoding>>,
}

struct Encoding {
    encoder: Box<dyn Encoder>,
    /// The prompt at the encoder's rate, padded to whole packets.
    pcm: Vec<i16>,
    next: usize,
}

impl fmt::Debug for Packets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Packets({})", self.slots.len())
    }
}

impl Packets {
    fn given(frames: &[Box<[u8]>]) -> Packets {
        Packets {
            slots: frames.iter().map(|f| OnceLock::from(f.clone())).collect(),
            encoding: Mutex::new(None),
        }
    }

    /// Encodes `linear`, 8 kHz audio at `rate` (the lowest rate `format` codes).
    fn encode(format: Format, rate: u32, linear: &[i16]) -> Packets {
        let n = codec::samples_at(rate, format.packet_ms());
        let mut pcm = linear.to_vec();
        pcm.resize(pcm.len().div_ceil(n) * n, 0);
        Packets {
            slots: (0..pcm.len() / n).map(|_| OnceLock::new()).collect(),
            encoding: Mutex::new(Some(Encoding {
                encoder: format.encoder_at(rate, 8000),
                pcm,
                next: 0,
            })),
        }
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Packet `i`, encoding it (and any before it not yet done: the encoder
    /// is stateful) if no call has asked for it yet. Empty if it would not encode.
    pub fn get(&self, i: usize) -> &[u8] {
        if let Some(p) = self.slots[i].get() {
            return p;
        }
        let mut guard = self.encoding.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = guard.as_mut() {
            let n = e.pcm.len() / self.slots.len();
            let mut buf = [0u8; 1500];
            while e.next <= i {
                let k = e.next;
                let len = e
                    .encoder
                    .encode(&e.pcm[k * n..(k + 1) * n], &mut buf)
                    .unwrap_or(0);
                let _ = self.slots[k].set(Box::from(&buf[..len]));
                e.next += 1;
            }
            if e.next == self.slots.len() {
                *guard = None;
            }
        }
        self.slots[i].get().map_or(&[], |p| p)
    }
}

/// Audio ready to play on any leg.
#[derive(Debug)]
pub struct Prompt {
    name: String,
    ulaw: Vec<u8>,
    alaw: Vec<u8>,
    /// Linear audio at 8, 16 and 48 kHz, made on first use.
    linear: [OnceLock<Vec<i16>>; 3],
    /// The file's own packets when it was stored in a codec other than G.711.
    coded: Option<(Format, Frames)>,
    /// Packets per format, made on first use (a handful of formats at most).
    packets: Mutex<Vec<(Format, Arc<Packets>)>>,
}

/// A prompt that could not be loaded: which file, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptError {
    pub source: String,
    pub problem: String,
}

impl fmt::Display for PromptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.source, self.problem)
    }
}

impl std::error::Error for PromptError {}

impl Prompt {
    /// From 8 kHz linear PCM.
    pub fn from_pcm(name: impl Into<String>, pcm: &[i16]) -> Prompt {
        let encode = |law: G711| {
            let mut out = vec![0; pcm.len()];
            law.encode(pcm, &mut out);
            out
        };
        Prompt {
            name: name.into(),
            ulaw: encode(G711::Pcmu),
            alaw: encode(G711::Pcma),
            linear: Default::default(),
            coded: None,
            packets: Mutex::default(),
        }
    }

    /// From a headerless file of `format`'s packets (`.gsm`: 33-byte GSM 06.10
    /// frames; `.g722`: 64 kbit/s G.722), decoded once for the G.711 copies.
    pub fn from_packets(
        name: impl Into<String>,
        format: Format,
        bytes: &[u8],
    ) -> Result<Prompt, PromptError> {
        let name = name.into();
        let fail = |problem: String| PromptError {
            source: name.clone(),
            problem,
        };
        let size = format.max_encoded_len(format.samples_in(format.packet_ms()));
        if bytes.is_empty() {
            return Err(fail(format!("no {} audio", format.name())));
        }
        let packets: Frames = bytes.chunks(size).map(Box::from).collect();
        let mut dec = format.decoder();
        let mut pcm = Vec::with_capacity(packets.len() * format.samples_in(format.packet_ms()));
        let mut out = vec![0i16; format.samples_in(format.packet_ms())];
        for (i, p) in packets.iter().enumerate() {
            let n = dec.decode(p, &mut out).map_err(|e| {
                fail(format!(
                    "packet {i} does not decode as {} ({e}): expected raw {size}-byte frames",
                    format.name()
                ))
            })?;
            pcm.extend_from_slice(&out[..n]);
        }
        let pcm = if format.pcm_rate() == 16000 {
            decimate_by_two(&pcm)
        } else {
            pcm
        };
        let mut prompt = Self::from_pcm(name, &pcm);
        prompt.coded = Some((format, packets));
        Ok(prompt)
    }

    /// From raw G.711 bytes (a headerless `.ulaw`/`.alaw` file).
    pub fn from_coded(name: impl Into<String>, bytes: Vec<u8>, law: G711) -> Prompt {
        let other = match law {
            G711::Pcmu => G711::Pcma,
            G711::Pcma => G711::Pcmu,
        };
        let mut converted = vec![0; bytes.len()];
        law.transcode(other, &bytes, &mut converted);
        let (ulaw, alaw) = if law == G711::Pcmu {
            (bytes, converted)
        } else {
            (converted, bytes)
        };
        Prompt {
            name: name.into(),
            ulaw,
            alaw,
            linear: Default::default(),
            coded: None,
            packets: Mutex::default(),
        }
    }

    /// From an in-memory WAV file (8 or 16 kHz, mono, 16-bit PCM), e.g. one
    /// embedded in the binary with `include_bytes!`.
    pub fn from_wav_bytes(bytes: &[u8]) -> Result<Prompt, PromptError> {
        Self::from_wav("<memory>", bytes)
    }

    /// From a file, by extension: `.wav`, `.ulaw`/`.ul`/`.pcmu`, `.alaw`/`.al`/`.pcma`,
    /// `.gsm` or `.g722`.
    pub fn load(path: &Path) -> Result<Prompt, PromptError> {
        let name = path.display().to_string();
        let fail = |problem: String| PromptError {
            source: name.clone(),
            problem,
        };
        let bytes = std::fs::read(path).map_err(|e| fail(format!("cannot read: {e}")))?;
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or("")
            .to_ascii_lowercase();
        match ext.as_str() {
            "wav" => Self::from_wav(&name, &bytes),
            "ulaw" | "ul" | "pcmu" => Ok(Self::from_coded(name, bytes, G711::Pcmu)),
            "alaw" | "al" | "pcma" => Ok(Self::from_coded(name, bytes, G711::Pcma)),
            "gsm" => Self::from_packets(name, Format::Gsm, &bytes),
            "g722" => Self::from_packets(name, Format::G722, &bytes),
            _ => Err(fail(format!(
                "unknown prompt type {ext:?}: expected .wav, .ulaw, .alaw, .gsm or .g722"
            ))),
        }
    }

    fn from_wav(name: &str, bytes: &[u8]) -> Result<Prompt, PromptError> {
        let fail = |problem: String| PromptError {
            source: name.to_string(),
            problem,
        };
        let reader =
            hound::WavReader::new(bytes).map_err(|e| fail(format!("not a WAV file: {e}")))?;
        let spec = reader.spec();
        if spec.channels != 1 {
            return Err(fail(format!(
                "{}-channel WAV not supported (need mono): {SOX_HINT}",
                spec.channels
            )));
        }
        if spec.sample_format != hound::SampleFormat::Int || spec.bits_per_sample != 16 {
            return Err(fail(format!(
                "{}-bit {:?} WAV not supported (need 16-bit PCM): {SOX_HINT}",
                spec.bits_per_sample, spec.sample_format
            )));
        }
        if spec.sample_rate != 8000 && spec.sample_rate != 16000 {
            return Err(fail(format!(
                "{} Hz WAV not supported (need 8000 or 16000 Hz): {SOX_HINT}",
                spec.sample_rate
            )));
        }
        // A hostile header must not make us reserve gigabytes.
        if reader.len() as usize > bytes.len() / 2 {
            return Err(fail(
                "WAV header claims more audio than the file holds (truncated?)".into(),
            ));
        }
        let pcm: Vec<i16> = reader
            .into_samples::<i16>()
            .collect::<Result<_, _>>()
            .map_err(|e| fail(format!("corrupt WAV data: {e}")))?;
        if pcm.is_empty() {
            return Err(fail("WAV has no audio".into()));
        }
        let pcm = if spec.sample_rate == 16000 {
            decimate_by_two(&pcm)
        } else {
            pcm
        };
        Ok(Self::from_pcm(name, &pcm))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Length in 8 kHz samples.
    pub fn samples(&self) -> usize {
        self.ulaw.len()
    }

    /// The prompt as linear audio at `rate` (8000, 16000 or 48000 Hz; others
    /// get 8000), resampled and cached on the first call for each rate.
    pub fn linear(&self, rate: u32) -> &[i16] {
        let slot = match rate {
            16000 => 1,
            48000 => 2,
            _ => 0,
        };
        self.linear[slot].get_or_init(|| {
            let mut pcm = vec![0; self.ulaw.len()];
            G711::Pcmu.decode(&self.ulaw, &mut pcm);
            match slot {
                0 => pcm,
                _ => codec::resample::resample(&pcm, 8000, rate),
            }
        })
    }

    /// The prompt in whole packets of `format`, shared by every call: the file's
    /// own packets if it is stored in `format`, else encoded as calls reach them.
    pub fn packets(&self, format: Format) -> Arc<Packets> {
        let mut cache = self.packets.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, p)) = cache.iter().find(|(f, _)| *f == format) {
            return p.clone();
        }
        let packets = Arc::new(match &self.coded {
            Some((f, frames)) if *f == format => Packets::given(frames),
            _ => {
                // The prompt is 8 kHz audio: Opus codes it at 8 kHz, G.722 at its 16 kHz.
                let rate = format.pcm_rates()[0];
                Packets::encode(format, rate, self.linear(rate))
            }
        });
        cache.push((format, packets.clone()));
        packets
    }

    /// The file's own packets and their format, when it was stored coded (not G.711).
    pub fn coded(&self) -> Option<(Format, &Frames)> {
        self.coded.as_ref().map(|(f, p)| (*f, p))
    }

    /// The prompt coded in `law`.
    pub fn encoded(&self, law: G711) -> &[u8] {
        match law {
            G711::Pcmu => &self.ulaw,
            G711::Pcma => &self.alaw,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A mono 16-bit WAV in memory.
    pub(crate) fn wav(rate: u32, channels: u16, samples: &[i16]) -> Vec<u8> {
        let spec = hound::WavSpec {
            channels,
            sample_rate: rate,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        let mut cur = std::io::Cursor::new(Vec::new());
        let mut w = hound::WavWriter::new(&mut cur, spec).unwrap();
        for &s in samples {
            w.write_sample(s).unwrap();
        }
        w.finalize().unwrap();
        cur.into_inner()
    }

    #[test]
    fn wav_8k_is_encoded_in_both_laws() {
        let pcm: Vec<i16> = (0..400).map(|i| (i * 37 % 2000) as i16 - 1000).collect();
        let p = Prompt::from_wav_bytes(&wav(8000, 1, &pcm)).unwrap();
        assert_eq!(p.samples(), 400);
        let expect: Vec<u8> = pcm.iter().map(|&s| G711::Pcma.encode_sample(s)).collect();
        assert_eq!(p.encoded(G711::Pcma), &expect[..]);
        assert_eq!(p.encoded(G711::Pcmu)[0], G711::Pcmu.encode_sample(pcm[0]));
    }

    #[test]
    fn bundled_demo_announcement_loads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../assets/demo.wav");
        let p = Prompt::load(&path).unwrap();
        assert!(p.samples() > 8000 * 10, "{} samples", p.samples());
    }

    #[test]
    fn wav_16k_is_halved() {
        let p = Prompt::from_wav_bytes(&wav(16000, 1, &[100; 1000])).unwrap();
        assert_eq!(p.samples(), 500);
    }

    #[test]
    fn errors_name_the_problem() {
        let e = Prompt::from_wav_bytes(&wav(8000, 2, &[0; 10])).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("<memory>: 2-channel WAV not supported (need mono): {SOX_HINT}")
        );
        let e = Prompt::from_wav_bytes(&wav(44100, 1, &[0; 10])).unwrap_err();
        assert!(e.problem.starts_with("44100 Hz WAV not supported"), "{e}");
        assert!(Prompt::from_wav_bytes(b"RIFF\0\0")
            .unwrap_err()
            .problem
            .starts_with("not a WAV file"));
        assert!(Prompt::from_wav_bytes(&wav(8000, 1, &[])).is_err());
        let e = Prompt::load(Path::new("/nonexistent/x.wav")).unwrap_err();
        assert_eq!(e.source, "/nonexistent/x.wav");
    }

    #[test]
    fn truncated_and_random_wavs_are_errors_not_panics() {
        let good = wav(8000, 1, &[5; 100]);
        for cut in 0..good.len() - 1 {
            let _ = Prompt::from_wav_bytes(&good[..cut]);
        }
        let mut rng = fastrand::Rng::with_seed(1);
        for _ in 0..2000 {
            let mut b = good.clone();
            for _ in 0..4 {
                let i = rng.usize(..b.len());
                b[i] = rng.u8(..);
            }
            let _ = Prompt::from_wav_bytes(&b);
        }
    }

    #[test]
    fn gsm_file_keeps_its_frames_and_other_formats_are_encoded_once() {
        let pcm = codec::translate::test_signal(8000, 400);
        let frames = codec::translate::encode_packets(Format::Gsm, &pcm).concat();
        let p = Prompt::from_packets("x.gsm", Format::Gsm, &frames).unwrap();
        assert_eq!(p.samples(), 3200);
        let all = |p: &Packets| (0..p.len()).map(|i| p.get(i).to_vec()).collect::<Vec<_>>();
        assert_eq!(all(&p.packets(Format::Gsm)).concat(), frames);
        let a = p.packets(Format::Ilbc20);
        assert!(Arc::ptr_eq(&a, &p.packets(Format::Ilbc20)), "cached");
        assert_eq!(a.len(), 20);
        // Asked out of order, packets come out as one encoder run would make them.
        let (last, first) = (a.get(19).to_vec(), a.get(0).to_vec());
        let once = codec::translate::encode_packets(Format::Ilbc20, p.linear(8000));
        assert_eq!((first, last), (once[0].clone(), once[19].clone()));
        assert_eq!(all(&a), once);
        assert_eq!(
            p.packets(Format::Ilbc30).len(),
            14,
            "400 ms in 30 ms packets, the last padded"
        );
        let e = Prompt::from_packets("y.gsm", Format::Gsm, &frames[..40]).unwrap_err();
        assert_eq!(e.source, "y.gsm");
        assert!(
            e.problem.starts_with("packet 1 does not decode as gsm"),
            "{e}"
        );
    }

    #[test]
    fn raw_files_by_extension() {
        let dir = std::env::temp_dir().join(format!("strowger-prompt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.alaw");
        std::fs::write(&path, [0xD5, 0x55, 0xAA]).unwrap();
        let p = Prompt::load(&path).unwrap();
        assert_eq!(p.encoded(G711::Pcma), &[0xD5, 0x55, 0xAA]);
        // A-law's smallest levels are ±8, which µ-law codes as 0xFE/0x7E.
        assert_eq!(p.encoded(G711::Pcmu)[..2], [0xFE, 0x7E]);
        let bad = dir.join("x.mp3");
        std::fs::write(&bad, [0]).unwrap();
        assert!(Prompt::load(&bad)
            .unwrap_err()
            .problem
            .contains("expected .wav"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
