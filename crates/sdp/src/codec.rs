//! Codecs the negotiator knows by name, and the local capability set.

/// An RTP audio codec, identified in SDP by encoding name and clock rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Codec {
    /// Encoding name as written in `a=rtpmap` (compared case-insensitively).
    pub name: &'static str,
    /// RTP clock rate in Hz (8000 for G.722 too, per RFC 3551 §4.5.2).
    pub clock: u32,
    /// Static payload type from RFC 3551, if any; such codecs may be offered without rtpmap.
    /// Codecs without one get a dynamic number (96-127) in our offers.
    pub static_pt: Option<u8>,
    /// Channel count written in `a=rtpmap` (`opus/48000/2`, RFC 7587).
    pub channels: Option<u8>,
    /// `a=fmtp` parameters we send with the codec.
    pub fmtp: Option<&'static str>,
}

impl Codec {
    pub const PCMU: Codec = Codec::fixed("PCMU", 0);
    pub const GSM: Codec = Codec::fixed("GSM", 3);
    pub const PCMA: Codec = Codec::fixed("PCMA", 8);
    pub const G722: Codec = Codec::fixed("G722", 9);
    pub const G729: Codec = Codec::fixed("G729", 18);
    /// G.726 at 32 kbit/s (RFC 3551 §4.5.4).
    pub const G726_32: Codec = Codec::dynamic("G726-32", 8000, None, None);
    /// Speex narrowband (RFC 5574).
    pub const SPEEX: Codec = Codec::dynamic("speex", 8000, None, Some("vbr=off"));
    /// Speex wideband (RFC 5574).
    pub const SPEEX16: Codec = Codec::dynamic("speex", 16000, None, Some("vbr=off"));
    /// Opus: always `opus/48000/2` whatever is sent (RFC 7587 §7).
    pub const OPUS: Codec = Codec::dynamic(
        "opus",
        48000,
        Some(2),
        Some("useinbandfec=1; maxplaybackrate=16000; sprop-maxcapturerate=16000"),
    );
    /// Linear 16-bit at 8 kHz, mono (RFC 3551's static 10/11 are 44.1 kHz).
    pub const L16: Codec = Codec::dynamic("L16", 8000, None, None);
    /// iLBC in 20 ms frames (RFC 3952).
    pub const ILBC20: Codec = Codec::dynamic("iLBC", 8000, None, Some("mode=20"));
    /// iLBC in 30 ms frames, what an `iLBC/8000` without `mode` means (RFC 3952 §5).
    pub const ILBC30: Codec = Codec::dynamic("iLBC", 8000, None, Some("mode=30"));

    /// Every codec this crate can name; static ones double as the RFC 3551 table.
    pub const KNOWN: [Codec; 12] = [
        Codec::PCMU,
        Codec::GSM,
        Codec::PCMA,
        Codec::G722,
        Codec::G729,
        Codec::G726_32,
        Codec::SPEEX,
        Codec::SPEEX16,
        Codec::OPUS,
        Codec::L16,
        Codec::ILBC20,
        Codec::ILBC30,
    ];

    const fn fixed(name: &'static str, pt: u8) -> Codec {
        Codec {
            name,
            clock: 8000,
            static_pt: Some(pt),
            channels: None,
            fmtp: None,
        }
    }

    const fn dynamic(
        name: &'static str,
        clock: u32,
        channels: Option<u8>,
        fmtp: Option<&'static str>,
    ) -> Codec {
        Codec {
            name,
            clock,
            static_pt: None,
            channels,
            fmtp,
        }
    }

    /// Looks a codec up by encoding name, case-insensitively (SDP names are); `name/clock`
    /// picks among clock rates (`speex/16000`), a bare name gives the first listed.
    pub fn by_name(name: &str) -> Option<Codec> {
        let (name, clock) = match name.split_once('/') {
            Some((n, c)) => (n, Some(c.parse::<u32>().ok()?)),
            None => (name, None),
        };
        Self::KNOWN.into_iter().find(|c| {
            c.name.eq_ignore_ascii_case(name) && clock.is_none_or(|clock| clock == c.clock)
        })
    }

    /// The codec implied by a static payload type when the offer has no rtpmap for it.
    pub fn by_static_pt(pt: u8) -> Option<Codec> {
        Self::KNOWN.into_iter().find(|c| c.static_pt == Some(pt))
    }

    pub(crate) fn matches(&self, name: &str, clock: u32) -> bool {
        self.name.eq_ignore_ascii_case(name) && self.clock == clock
    }

    /// Whether a stream's payload type, with its `a=fmtp` parameters, is this codec.
    /// Only iLBC is told apart by a parameter: its `mode` (30 when absent).
    pub(crate) fn matches_params(&self, name: &str, clock: u32, fmtp: Option<&str>) -> bool {
        self.matches(name, clock)
            && self.frame_ms().is_none_or(|own| {
                fmtp_param(fmtp.unwrap_or(""), "mode").unwrap_or("30") == own.to_string()
            })
    }

    /// The fixed frame length of a codec whose packets must hold whole frames
    /// of it (iLBC's `mode`).
    pub fn frame_ms(&self) -> Option<u32> {
        if !self.name.eq_ignore_ascii_case("iLBC") {
            return None;
        }
        fmtp_param(self.fmtp.unwrap_or(""), "mode").and_then(|m| m.parse().ok())
    }
}

/// What the local side can receive and send: codecs in preference order, and the
/// dynamic payload type used when we offer telephone-event (RFC 4733).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caps {
    pub codecs: Vec<Codec>,
    /// `None` disables DTMF events; answers then leave telephone-event out.
    pub dtmf_pt: Option<u8>,
}

impl Default for Caps {
    fn default() -> Self {
        Caps {
            codecs: vec![Codec::PCMU, Codec::PCMA],
            dtmf_pt: Some(101),
        }
    }
}

/// The value of `key` in `a=fmtp` parameters (`key=value` separated by `;`).
pub fn fmtp_param<'a>(params: &'a str, key: &str) -> Option<&'a str> {
    params.split(';').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        k.trim().eq_ignore_ascii_case(key).then_some(v.trim())
    })
}
