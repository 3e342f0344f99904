//! Codecs the negotiator knows by name, and the local capability set.

/// An RTP audio codec, identified in SDP by encoding name and clock rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Codec {
    /// Encoding name as written in `a=rtpmap` (compared case-insensitively).
    pub name: &'static str,
    /// RTP clock rate in Hz (8000 for G.722 too, per RFC 3551 §4.5.2).
    pub clock: u32,
    /// Static payload type from RFC 3551, if any; such codecs may be offered without rtpmap.
    pub static_pt: Option<u8>,
}

impl Codec {
    pub const PCMU: Codec = Codec::fixed("PCMU", 0);
    pub const GSM: Codec = Codec::fixed("GSM", 3);
    pub const PCMA: Codec = Codec::fixed("PCMA", 8);
    pub const G722: Codec = Codec::fixed("G722", 9);
    pub const G729: Codec = Codec::fixed("G729", 18);

    /// Every codec this crate can name; static ones double as the RFC 3551 table.
    pub const KNOWN: [Codec; 5] = [
        Codec::PCMU,
        Codec::GSM,
        Codec::PCMA,
        Codec::G722,
        Codec::G729,
    ];

    const fn fixed(name: &'static str, pt: u8) -> Codec {
        Codec {
            name,
            clock: 8000,
            static_pt: Some(pt),
        }
    }

    /// Looks a codec up by encoding name, case-insensitively (SDP names are).
    pub fn by_name(name: &str) -> Option<Codec> {
        Self::KNOWN
            .into_iter()
            .find(|c| c.name.eq_ignore_ascii_case(name))
    }

    /// The codec implied by a static payload type when the offer has no rtpmap for it.
    pub fn by_static_pt(pt: u8) -> Option<Codec> {
        Self::KNOWN.into_iter().find(|c| c.static_pt == Some(pt))
    }

    pub(crate) fn matches(&self, name: &str, clock: u32) -> bool {
        self.name.eq_ignore_ascii_case(name) && self.clock == clock
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
