//! The formats strowger can put on the wire, with their RTP and SDP facts.

use std::fmt;

/// An audio format on the wire. Every format decodes to linear PCM at its
/// [`Format::pcm_rate`] and encodes from it (Opus at any of its [`Format::pcm_rates`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Format {
    /// G.711 µ-law, static PT 0.
    Pcmu,
    /// G.711 A-law, static PT 8.
    Pcma,
    /// GSM 06.10 full rate (Rust, [`crate::gsm`]), static PT 3, 33 bytes per 20 ms.
    Gsm,
    /// G.722 at 64 kbit/s (Rust, [`crate::g722`]): 16 kHz audio, 8 kHz RTP clock (RFC 3551 §4.5.2), PT 9.
    G722,
    /// G.726 at 32 kbit/s (Rust, [`crate::g726`]), RFC 3551 bit order, dynamic PT.
    G726,
    /// Speex narrowband (libspeex), dynamic PT.
    Speex,
    /// Speex wideband, 16 kHz, dynamic PT.
    Speex16,
    /// Opus (libopus), mono, 48 kHz clock per RFC 7587, dynamic PT.
    Opus,
    /// iLBC (RFC 3951) in 20 ms frames of 38 bytes, dynamic PT, `mode=20`.
    Ilbc20,
    /// iLBC in 30 ms frames of 50 bytes, dynamic PT, `mode=30` (RFC 3952's default).
    Ilbc30,
    /// Linear 16-bit big-endian at 8 kHz, dynamic PT.
    L16,
    /// Linear 16-bit big-endian at 16 kHz, dynamic PT.
    L16Wide,
    /// G.729 (bcg729, GPL: only with the `g729` cargo feature), static PT 18.
    #[cfg(feature = "g729")]
    G729,
}

impl Format {
    /// Every format this build supports, in a stable order.
    pub fn all() -> &'static [Format] {
        &[
            Format::Pcmu,
            Format::Pcma,
            Format::Gsm,
            Format::G722,
            Format::G726,
            Format::Speex,
            Format::Speex16,
            Format::Opus,
            Format::Ilbc20,
            Format::Ilbc30,
            Format::L16,
            Format::L16Wide,
            #[cfg(feature = "g729")]
            Format::G729,
        ]
    }

    /// Short lower-case name used in configuration and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Format::Pcmu => "pcmu",
            Format::Pcma => "pcma",
            Format::Gsm => "gsm",
            Format::G722 => "g722",
            Format::G726 => "g726",
            Format::Speex => "speex",
            Format::Speex16 => "speex16",
            Format::Opus => "opus",
            Format::Ilbc20 => "ilbc20",
            Format::Ilbc30 => "ilbc30",
            Format::L16 => "l16",
            Format::L16Wide => "l16-16k",
            #[cfg(feature = "g729")]
            Format::G729 => "g729",
        }
    }

    /// By [`Format::name`] or SDP encoding name, case-insensitively
    /// (`"G726-32"`, `"ulaw"` and `"alaw"` are accepted too).
    pub fn from_name(name: &str) -> Option<Format> {
        let n = name.to_ascii_lowercase();
        let alias = match n.as_str() {
            "ulaw" | "g711u" => Some(Format::Pcmu),
            "alaw" | "g711a" => Some(Format::Pcma),
            "g726-32" => Some(Format::G726),
            "speex8" => Some(Format::Speex),
            "l16-8k" => Some(Format::L16),
            "ilbc" => Some(Format::Ilbc30),
            _ => None,
        };
        alias.or_else(|| Format::all().iter().copied().find(|f| f.name() == n))
    }

    /// Encoding name in `a=rtpmap`.
    pub fn encoding_name(self) -> &'static str {
        match self {
            Format::Pcmu => "PCMU",
            Format::Pcma => "PCMA",
            Format::Gsm => "GSM",
            Format::G722 => "G722",
            Format::G726 => "G726-32",
            Format::Speex | Format::Speex16 => "speex",
            Format::Opus => "opus",
            Format::Ilbc20 | Format::Ilbc30 => "iLBC",
            Format::L16 | Format::L16Wide => "L16",
            #[cfg(feature = "g729")]
            Format::G729 => "G729",
        }
    }

    /// The format an `a=rtpmap` names (encoding name and clock rate), with the
    /// stream's `a=fmtp` parameters: iLBC's `mode` picks its frame length
    /// (30 ms when absent, RFC 3952 §5).
    pub fn from_rtpmap(name: &str, clock: u32, fmtp: Option<&str>) -> Option<Format> {
        let f = Format::all()
            .iter()
            .copied()
            .find(|f| f.encoding_name().eq_ignore_ascii_case(name) && f.rtp_clock() == clock)?;
        Some(match f {
            Format::Ilbc20 | Format::Ilbc30 => match fmtp_param(fmtp.unwrap_or(""), "mode") {
                Some("20") => Format::Ilbc20,
                _ => Format::Ilbc30,
            },
            f => f,
        })
    }

    /// Sample rate of the linear audio the codec consumes and produces.
    pub fn pcm_rate(self) -> u32 {
        *self.pcm_rates().last().expect("a rate")
    }

    /// Every rate of linear audio the codec's encoder takes and its decoder gives, highest
    /// ([`Format::pcm_rate`]) last: libopus codes at 8, 16 and 48 kHz alike, so audio from a
    /// narrowband or wideband leg is coded at its own rate, never resampled for Opus.
    pub fn pcm_rates(self) -> &'static [u32] {
        match self {
            Format::Opus => &[8000, 16000, 48000],
            Format::G722 | Format::Speex16 | Format::L16Wide => &[16000],
            _ => &[8000],
        }
    }

    /// RTP timestamp clock rate.
    pub fn rtp_clock(self) -> u32 {
        match self {
            Format::G722 => 8000,
            f => f.pcm_rate(),
        }
    }

    /// Channels in `a=rtpmap` (Opus is always written `opus/48000/2`, RFC 7587).
    pub fn rtpmap_channels(self) -> Option<u8> {
        (self == Format::Opus).then_some(2)
    }

    /// Default `a=fmtp` parameters we offer.
    pub fn fmtp(self) -> Option<&'static str> {
        match self {
            Format::Opus => {
                Some("useinbandfec=1; maxplaybackrate=16000; sprop-maxcapturerate=16000")
            }
            Format::Speex | Format::Speex16 => Some("vbr=off"),
            Format::Ilbc20 => Some("mode=20"),
            Format::Ilbc30 => Some("mode=30"),
            #[cfg(feature = "g729")]
            Format::G729 => Some("annexb=no"),
            _ => None,
        }
    }

    pub fn static_payload_type(self) -> Option<u8> {
        match self {
            Format::Pcmu => Some(0),
            Format::Gsm => Some(3),
            Format::Pcma => Some(8),
            Format::G722 => Some(9),
            #[cfg(feature = "g729")]
            Format::G729 => Some(18),
            _ => None,
        }
    }

    /// Linear samples (at [`Format::pcm_rate`]) in the smallest unit the
    /// encoder accepts; whole packets are multiples of it.
    pub fn frame_samples(self) -> usize {
        match self {
            Format::Pcmu | Format::Pcma | Format::L16 | Format::L16Wide => 1,
            Format::G722 | Format::G726 => 2,
            Format::Gsm | Format::Speex | Format::Ilbc20 => 160,
            Format::Ilbc30 => 240,
            Format::Speex16 => 320,
            Format::Opus => 480,
            #[cfg(feature = "g729")]
            Format::G729 => 80,
        }
    }

    /// Milliseconds of audio in each packet strowger sends: one iLBC frame
    /// for iLBC, 20 ms for everything else.
    pub fn packet_ms(self) -> u32 {
        match self {
            Format::Ilbc30 => 30,
            _ => 20,
        }
    }

    /// Linear samples in `ms` milliseconds of audio.
    pub fn samples_in(self, ms: u32) -> usize {
        samples_at(self.pcm_rate(), ms)
    }

    /// RTP timestamp units in `ms` milliseconds.
    pub fn clock_units_in(self, ms: u32) -> u32 {
        self.rtp_clock() / 1000 * ms
    }

    /// An upper bound of the encoded size of `samples` linear samples.
    pub fn max_encoded_len(self, samples: usize) -> usize {
        let frames = samples.div_ceil(self.frame_samples());
        match self {
            Format::Pcmu | Format::Pcma => samples,
            Format::L16 | Format::L16Wide => 2 * samples,
            Format::G722 | Format::G726 => frames,
            Format::Gsm => 33 * frames,
            Format::Speex | Format::Speex16 => 106 * frames,
            Format::Opus => 1275,
            Format::Ilbc20 => 38 * frames,
            Format::Ilbc30 => 50 * frames,
            #[cfg(feature = "g729")]
            Format::G729 => 10 * frames,
        }
    }

    pub fn is_linear(self) -> bool {
        matches!(self, Format::L16 | Format::L16Wide)
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Linear samples in `ms` milliseconds of audio at `rate` Hz.
pub fn samples_at(rate: u32, ms: u32) -> usize {
    (rate / 1000 * ms) as usize
}

/// The value of `key` in `a=fmtp` parameters (`key=value` separated by `;`).
pub fn fmtp_param<'a>(params: &'a str, key: &str) -> Option<&'a str> {
    params.split(';').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        k.trim().eq_ignore_ascii_case(key).then_some(v.trim())
    })
}
