//! Audio codecs for strowger's media path.
//!
//! - [`Codec`]: the stateless sample codec interface G.711 implements
//!   ([`g711`]: table lookups, byte-to-byte µ↔A transcoding).
//! - [`Format`]: every wire format (G.711, GSM 06.10, G.722, G.726-32,
//!   Speex NB/WB, Opus, L16 8/16 kHz; G.729 with the `g729` feature) with its
//!   RTP/SDP facts, and stateful [`Encoder`]/[`Decoder`]s: G.711, [`g722`], [`g726`], [`gsm`]
//!   and [`ilbc`] in Rust, the others over the field's C libraries (libspeex, libopus,
//!   bcg729) declared by hand in `ffi`. [`spandsp`] and [`libgsm`] keep the C G.722/G.726 and
//!   GSM strowger used before, as the references its own are tested and benchmarked against.
//! - [`resample`]: 8/16/48 kHz conversion, a polyphase FIR filter in Rust; [`speexdsp`] keeps
//!   libspeexdsp's resampler strowger used before as its reference.
//! - [`translate`]: measured step costs, cheapest paths, and [`Translator`].

mod ffi;
mod format;
pub mod g711;
pub mod g722;
pub mod g726;
pub mod gsm;
pub mod ilbc;
mod impls;
pub mod libgsm;
pub mod resample;
pub mod spandsp;
pub mod speexdsp;
pub mod translate;

pub use format::{fmtp_param, samples_at, Format};
pub use g711::G711;
pub use impls::{
    opus_options, set_opus_options, set_speex_quality, CodecError, Decoder, Encoder, OpusDec,
    OpusEnc, OpusOptions,
};
pub use resample::Resampler;
pub use translate::{Graph, Node, Path, Step, Translator};

/// A sample-based codec working on whole frames with no state (G.711).
///
/// Buffers are supplied by the caller so that the hot path never allocates.
pub trait Codec {
    /// Encoding name as used in SDP `a=rtpmap` (e.g. `"PCMU"`).
    fn name(&self) -> &'static str;
    /// RTP clock rate in Hz.
    fn clock_rate(&self) -> u32;
    /// Samples in one codec frame (G.711 is sample-based, so 1).
    fn frame_samples(&self) -> usize;
    /// Static RTP payload type (RFC 3551), if the codec has one.
    fn static_payload_type(&self) -> Option<u8>;
    /// Encodes as many whole frames of `pcm` as fit into `out`; returns bytes written.
    fn encode(&self, pcm: &[i16], out: &mut [u8]) -> usize;
    /// Decodes as much of `payload` as fits into `out`; returns samples written.
    fn decode(&self, payload: &[u8], out: &mut [i16]) -> usize;
}

#[cfg(test)]
mod conformance;
#[cfg(test)]
mod tests;
