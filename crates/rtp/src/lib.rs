//! RTP/RTCP wire formats and per-stream bookkeeping (RFC 3550, RFC 4733).
//!
//! Everything here is sans-IO and allocation-free: parsers are zero-copy
//! views over the caller's bytes that return [`Error`] for any malformed
//! input, writers fill a caller-supplied buffer, and time arrives as
//! [`std::time::Instant`] arguments.
//!
//! - [`packet`]: RTP header view and writer.
//! - [`rtcp`]: compound SR/RR + SDES CNAME builder; SR/RR/SDES/BYE parser.
//! - [`dtmf`]: RFC 4733 telephone-event payloads, a once-per-digit detector
//!   and a sender sequence generator.
//! - [`stats`]: receive statistics (RFC 3550 A.1 sequence tracking, A.8 jitter).

pub mod dtmf;
pub mod packet;
pub mod rtcp;
pub mod stats;

pub use dtmf::{DtmfDetector, DtmfSender, TelephoneEvent};
pub use packet::{RtpHeader, RtpPacket};
pub use stats::ReceiveStats;

/// Why bytes could not be parsed or a packet could not be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// Fewer bytes than the headers or declared lengths require.
    Truncated,
    /// RTP/RTCP version field is not 2.
    BadVersion,
    /// Padding count is zero or larger than the packet.
    BadPadding,
    /// A length field or item is inconsistent with the packet.
    Malformed,
    /// The output buffer is too small for what is being written.
    BufferTooSmall,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Error::Truncated => "packet truncated",
            Error::BadVersion => "not RTP version 2",
            Error::BadPadding => "invalid padding",
            Error::Malformed => "malformed packet",
            Error::BufferTooSmall => "output buffer too small",
        })
    }
}

impl std::error::Error for Error {}

/// Reads a big-endian u16 at `at`; callers have checked the length.
fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Reads a big-endian u32 at `at`; callers have checked the length.
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
