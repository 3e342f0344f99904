//! Audio codecs for strowger's media path.
//!
//! Every codec sits behind [`Codec`] so the media engine can treat G.711
//! today and other codecs later the same way. G.711 lives in [`g711`]:
//! table-driven µ-law/A-law encode/decode plus byte-to-byte transcoding
//! tables, so bridging PCMU to PCMA never goes through linear PCM.

pub mod g711;

pub use g711::G711;

/// A narrowband/wideband audio codec working on whole frames.
///
/// Buffers are supplied by the caller so that the hot path never allocates.
pub trait Codec {
    /// Encoding name as used in SDP `a=rtpmap` (e.g. `"PCMU"`).
    fn name(&self) -> &'static str;
    /// RTP clock rate in Hz.
    fn clock_rate(&self) -> u32;
    /// Samples in one codec frame: frame-based codecs must be fed multiples
    /// of this (G.711 is sample-based, so 1).
    fn frame_samples(&self) -> usize;
    /// Static RTP payload type (RFC 3551), if the codec has one.
    fn static_payload_type(&self) -> Option<u8>;
    /// Encodes as many whole frames of `pcm` as fit into `out`; returns bytes written.
    fn encode(&self, pcm: &[i16], out: &mut [u8]) -> usize;
    /// Decodes as much of `payload` as fits into `out`; returns samples written.
    fn decode(&self, payload: &[u8], out: &mut [i16]) -> usize;
}
