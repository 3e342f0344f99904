//! The transport of a WebRTC leg, sans-IO: ICE-lite connectivity checks answered in STUN
//! ([`ice`], [`stun`]) and the DTLS-SRTP handshake that keys its SRTP ([`dtls`]). The media
//! engine demultiplexes a leg's one port by the first byte (RFC 7983) and feeds each part here.

pub mod dtls;
pub mod ice;
pub mod stun;

pub use dtls::{Certificate, Dtls, DtlsError, DtlsState, Fingerprint, Role};
pub use ice::{IceCredentials, IceLite};
pub use openssl::error::ErrorStack;

/// What a datagram on a WebRTC leg's port is, by its first byte (RFC 7983 §7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Stun,
    Dtls,
    /// RTP or RTCP (SRTP, SRTCP).
    Rtp,
    Other,
}

pub fn classify(data: &[u8]) -> Kind {
    match data.first() {
        Some(0..=3) => Kind::Stun,
        Some(20..=63) => Kind::Dtls,
        Some(128..=191) => Kind::Rtp,
        _ => Kind::Other,
    }
}
