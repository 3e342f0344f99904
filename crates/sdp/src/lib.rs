//! SDP (RFC 4566) parsing and serialization, and the offer/answer model (RFC 3264)
//! for the single audio stream a softswitch call leg carries.
//!
//! Everything here is sans-IO: bodies in, bodies and negotiated parameters out.
//! SDP arrives from the network, so [`SessionDescription::parse`] accepts any bytes
//! and returns an error rather than panicking.

mod codec;
mod crypto;
mod model;
mod negotiate;
mod parse;
mod webrtc;
mod write;

pub use codec::{Caps, Codec};
pub use crypto::{Crypto, CryptoSuite, SrtpKeys};
pub use model::{Attribute, Direction, Media, Origin, SessionDescription};
pub use negotiate::{LocalSession, Negotiated, NegotiationError};
pub use parse::ParseError;
pub use webrtc::{Setup, WebRtcLocal, WebRtcRemote};
