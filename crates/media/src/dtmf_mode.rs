//! How a switch takes digits from a far end and gives it digits (its `rtp.dtmf` setting, or
//! the far end's user's or trunk's `dtmf`).

/// Which legs are listened to for tones, and how a digit reaches a leg that did not send it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DtmfMode {
    /// RFC 4733 events where telephone-event was negotiated; elsewhere (G.711 legs) the audio
    /// is listened to for tones, and digits are sent as tones.
    #[default]
    Auto,
    /// As `Auto`, and every G.711 leg is listened to for tones, for phones that send tones
    /// although they offered telephone-event.
    Inband,
    /// As `Auto`, but a digit goes to the other leg of a bridge by signalling (SIP INFO, which
    /// the call logic sends), never regenerated in the media.
    Info,
}

impl DtmfMode {
    /// The mode a setting names: `auto`, `inband` or `info`.
    pub fn parse(name: &str) -> Option<DtmfMode> {
        match name {
            "auto" => Some(DtmfMode::Auto),
            "inband" => Some(DtmfMode::Inband),
            "info" => Some(DtmfMode::Info),
            _ => None,
        }
    }

    /// The setting's name, as `parse` takes it.
    pub fn name(self) -> &'static str {
        match self {
            DtmfMode::Auto => "auto",
            DtmfMode::Inband => "inband",
            DtmfMode::Info => "info",
        }
    }
}
