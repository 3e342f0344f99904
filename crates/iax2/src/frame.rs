//! IAX2 frames (RFC 5456 §8): full frames, mini frames, meta trunk frames and meta video mini
//! frames. Parsing borrows from the datagram and returns an error for any input it cannot
//! read; it never panics. Building writes into a caller-owned `Vec`.

use std::fmt;

/// Length of a full frame header.
pub const FULL_HEADER_LEN: usize = 12;
/// Length of a mini frame header.
pub const MINI_HEADER_LEN: usize = 4;
/// Length of a meta trunk frame header.
pub const TRUNK_HEADER_LEN: usize = 8;
/// Largest call number (15 bits).
pub const MAX_CALL_NUMBER: u16 = 0x7fff;

/// Why bytes are not an IAX2 frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// Shorter than the header its first bits announce.
    Short,
    /// A subclass with the C bit whose exponent does not fit 32 bits (or is 0xff).
    BadSubclass,
    /// A meta frame with a command other than trunk (1).
    UnknownMeta(u8),
    /// A trunk entry running past the end of the datagram.
    BadTrunkEntry,
    /// Information elements running past the end of the payload.
    BadIe,
    /// A value that cannot be encoded (subclass not a power of two, call number over 15 bits,
    /// IE longer than 255 bytes).
    Unencodable,
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Short => f.write_str("datagram shorter than its frame header"),
            FrameError::BadSubclass => f.write_str("compressed subclass out of range"),
            FrameError::UnknownMeta(c) => write!(f, "unknown meta command {c}"),
            FrameError::BadTrunkEntry => f.write_str("trunk entry past the end of the frame"),
            FrameError::BadIe => f.write_str("information element past the end of the frame"),
            FrameError::Unencodable => f.write_str("value cannot be encoded"),
        }
    }
}

impl std::error::Error for FrameError {}

/// Full frame types (RFC 5456 §8.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FrameType {
    DtmfEnd,
    Voice,
    Video,
    Control,
    Null,
    Iax,
    Text,
    Image,
    Html,
    ComfortNoise,
    Modem,
    DtmfBegin,
    Other(u8),
}

impl FrameType {
    pub fn from_u8(v: u8) -> FrameType {
        match v {
            0x01 => FrameType::DtmfEnd,
            0x02 => FrameType::Voice,
            0x03 => FrameType::Video,
            0x04 => FrameType::Control,
            0x05 => FrameType::Null,
            0x06 => FrameType::Iax,
            0x07 => FrameType::Text,
            0x08 => FrameType::Image,
            0x09 => FrameType::Html,
            0x0a => FrameType::ComfortNoise,
            0x0b => FrameType::Modem,
            0x0c => FrameType::DtmfBegin,
            v => FrameType::Other(v),
        }
    }

    pub fn to_u8(self) -> u8 {
        match self {
            FrameType::DtmfEnd => 0x01,
            FrameType::Voice => 0x02,
            FrameType::Video => 0x03,
            FrameType::Control => 0x04,
            FrameType::Null => 0x05,
            FrameType::Iax => 0x06,
            FrameType::Text => 0x07,
            FrameType::Image => 0x08,
            FrameType::Html => 0x09,
            FrameType::ComfortNoise => 0x0a,
            FrameType::Modem => 0x0b,
            FrameType::DtmfBegin => 0x0c,
            FrameType::Other(v) => v,
        }
    }
}

/// IAX control frame subclasses (frame type 6, RFC 5456 §8.4).
pub mod iax {
    pub const NEW: u32 = 0x01;
    pub const PING: u32 = 0x02;
    pub const PONG: u32 = 0x03;
    pub const ACK: u32 = 0x04;
    pub const HANGUP: u32 = 0x05;
    pub const REJECT: u32 = 0x06;
    pub const ACCEPT: u32 = 0x07;
    pub const AUTHREQ: u32 = 0x08;
    pub const AUTHREP: u32 = 0x09;
    pub const INVAL: u32 = 0x0a;
    pub const LAGRQ: u32 = 0x0b;
    pub const LAGRP: u32 = 0x0c;
    pub const REGREQ: u32 = 0x0d;
    pub const REGAUTH: u32 = 0x0e;
    pub const REGACK: u32 = 0x0f;
    pub const REGREJ: u32 = 0x10;
    pub const REGREL: u32 = 0x11;
    pub const VNAK: u32 = 0x12;
    pub const DPREQ: u32 = 0x13;
    pub const DPREP: u32 = 0x14;
    pub const DIAL: u32 = 0x15;
    pub const TXREQ: u32 = 0x16;
    pub const TXCNT: u32 = 0x17;
    pub const TXACC: u32 = 0x18;
    pub const TXREADY: u32 = 0x19;
    pub const TXREL: u32 = 0x1a;
    pub const TXREJ: u32 = 0x1b;
    pub const QUELCH: u32 = 0x1c;
    pub const UNQUELCH: u32 = 0x1d;
    pub const POKE: u32 = 0x1e;
    pub const MWI: u32 = 0x20;
    pub const UNSUPPORT: u32 = 0x21;
    pub const TRANSFER: u32 = 0x22;
    pub const TXMEDIA: u32 = 0x26;
    pub const RTKEY: u32 = 0x27;
    pub const CALLTOKEN: u32 = 0x28;

    /// Frames that take no sequence number and are never acknowledged (RFC 5456 §7: ACK,
    /// INVAL, VNAK, TXCNT, TXACC; and the stateless CALLTOKEN reply).
    pub fn is_unsequenced(subclass: u32) -> bool {
        matches!(subclass, ACK | INVAL | VNAK | TXCNT | TXACC | CALLTOKEN)
    }
}

/// Control frame subclasses (frame type 4, RFC 5456 §8.3).
pub mod control {
    pub const HANGUP: u32 = 0x01;
    pub const RINGING: u32 = 0x03;
    pub const ANSWER: u32 = 0x04;
    pub const BUSY: u32 = 0x05;
    pub const CONGESTION: u32 = 0x08;
    pub const FLASH: u32 = 0x09;
    pub const OPTION: u32 = 0x0b;
    pub const KEY: u32 = 0x0c;
    pub const UNKEY: u32 = 0x0d;
    pub const PROGRESS: u32 = 0x0e;
    pub const PROCEEDING: u32 = 0x0f;
    pub const HOLD: u32 = 0x10;
    pub const UNHOLD: u32 = 0x11;
}

/// Media format bits (voice subclasses and the FORMAT/CAPABILITY IEs, RFC 5456 §8.7).
pub mod format {
    pub const G723_1: u32 = 0x0001;
    pub const GSM: u32 = 0x0002;
    pub const ULAW: u32 = 0x0004;
    pub const ALAW: u32 = 0x0008;
    pub const G726: u32 = 0x0010;
    pub const ADPCM: u32 = 0x0020;
    pub const SLINEAR: u32 = 0x0040;
    pub const LPC10: u32 = 0x0080;
    pub const G729: u32 = 0x0100;
    pub const SPEEX: u32 = 0x0200;
    pub const ILBC: u32 = 0x0400;
    pub const G726_AAL2: u32 = 0x0800;
    pub const G722: u32 = 0x1000;
    pub const AMR: u32 = 0x2000;
}

/// Reads a subclass octet: values below 0x80 are literal; with the C bit (0x80) the low bits
/// are the exponent of a power of two (RFC 5456 §8.1.1).
pub fn decode_subclass(octet: u8) -> Result<u32, FrameError> {
    if octet & 0x80 == 0 {
        Ok(octet as u32)
    } else if octet == 0xff || octet & 0x7f >= 32 {
        Err(FrameError::BadSubclass)
    } else {
        Ok(1u32 << (octet & 0x7f))
    }
}

/// Writes a subclass octet: literal below 0x80, else the C bit and the exponent (only powers of
/// two can be sent).
pub fn encode_subclass(value: u32) -> Result<u8, FrameError> {
    if value < 0x80 {
        Ok(value as u8)
    } else if value.is_power_of_two() {
        Ok(0x80 | value.trailing_zeros() as u8)
    } else {
        Err(FrameError::Unencodable)
    }
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// A full frame: reliable, sequenced, carrying signalling or media with a 32-bit timestamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FullFrame<'a> {
    pub src_call: u16,
    pub dst_call: u16,
    /// The R bit: this is a retransmission.
    pub retransmit: bool,
    pub ts: u32,
    pub oseqno: u8,
    pub iseqno: u8,
    pub frame_type: FrameType,
    pub subclass: u32,
    pub payload: &'a [u8],
}

impl<'a> FullFrame<'a> {
    pub fn parse(b: &'a [u8]) -> Result<FullFrame<'a>, FrameError> {
        if b.len() < FULL_HEADER_LEN || b[0] & 0x80 == 0 {
            return Err(FrameError::Short);
        }
        Ok(FullFrame {
            src_call: be16(b, 0) & 0x7fff,
            dst_call: be16(b, 2) & 0x7fff,
            retransmit: b[2] & 0x80 != 0,
            ts: be32(b, 4),
            oseqno: b[8],
            iseqno: b[9],
            frame_type: FrameType::from_u8(b[10]),
            subclass: decode_subclass(b[11])?,
            payload: &b[FULL_HEADER_LEN..],
        })
    }

    /// Appends the frame to `out`.
    pub fn write(&self, out: &mut Vec<u8>) -> Result<(), FrameError> {
        if self.src_call > MAX_CALL_NUMBER || self.dst_call > MAX_CALL_NUMBER {
            return Err(FrameError::Unencodable);
        }
        let sub = encode_subclass(self.subclass)?;
        out.reserve(FULL_HEADER_LEN + self.payload.len());
        out.extend_from_slice(&(0x8000 | self.src_call).to_be_bytes());
        let r = if self.retransmit { 0x8000 } else { 0 };
        out.extend_from_slice(&(r | self.dst_call).to_be_bytes());
        out.extend_from_slice(&self.ts.to_be_bytes());
        out.extend_from_slice(&[self.oseqno, self.iseqno, self.frame_type.to_u8(), sub]);
        out.extend_from_slice(self.payload);
        Ok(())
    }

    pub fn to_vec(&self) -> Result<Vec<u8>, FrameError> {
        let mut v = Vec::new();
        self.write(&mut v)?;
        Ok(v)
    }

    /// Whether this is an IAX control frame with `subclass`.
    pub fn is_iax(&self, subclass: u32) -> bool {
        self.frame_type == FrameType::Iax && self.subclass == subclass
    }
}

/// Sets the R bit of an encoded full frame in place (for retransmission).
pub fn set_retransmit_bit(frame: &mut [u8]) {
    if frame.len() >= FULL_HEADER_LEN {
        frame[2] |= 0x80;
    }
}

/// A mini frame: voice on the format of the last full voice frame, 16-bit timestamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MiniFrame<'a> {
    pub src_call: u16,
    pub ts: u16,
    pub payload: &'a [u8],
}

impl MiniFrame<'_> {
    pub fn write(&self, out: &mut Vec<u8>) -> Result<(), FrameError> {
        if self.src_call == 0 || self.src_call > MAX_CALL_NUMBER {
            return Err(FrameError::Unencodable);
        }
        out.extend_from_slice(&self.src_call.to_be_bytes());
        out.extend_from_slice(&self.ts.to_be_bytes());
        out.extend_from_slice(self.payload);
        Ok(())
    }
}

/// One call's media inside a trunk frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrunkEntry<'a> {
    pub src_call: u16,
    /// Present in trunk frames sent with timestamps (cmddata T bit).
    pub ts: Option<u16>,
    pub payload: &'a [u8],
}

/// A meta trunk frame (RFC 5456 §8.1, meta command 1): several calls' media to one
/// peer in one datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrunkFrame<'a> {
    pub ts: u32,
    pub timestamps: bool,
    entries: &'a [u8],
}

impl<'a> TrunkFrame<'a> {
    fn parse(b: &'a [u8]) -> Result<TrunkFrame<'a>, FrameError> {
        if b.len() < TRUNK_HEADER_LEN {
            return Err(FrameError::Short);
        }
        let frame = TrunkFrame {
            ts: be32(b, 4),
            timestamps: b[3] & 1 != 0,
            entries: &b[TRUNK_HEADER_LEN..],
        };
        // Validate every entry once so that iteration cannot fail.
        let mut it = frame.raw_entries();
        for e in &mut it {
            e?;
        }
        Ok(frame)
    }

    fn raw_entries(&self) -> RawEntries<'a> {
        RawEntries {
            rest: self.entries,
            timestamps: self.timestamps,
        }
    }

    /// The entries, in order.
    pub fn entries(&self) -> impl Iterator<Item = TrunkEntry<'a>> + 'a {
        self.raw_entries().map_while(Result::ok)
    }
}

struct RawEntries<'a> {
    rest: &'a [u8],
    timestamps: bool,
}

impl<'a> Iterator for RawEntries<'a> {
    type Item = Result<TrunkEntry<'a>, FrameError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let b = self.rest;
        let hdr = if self.timestamps { 6 } else { 4 };
        if b.len() < hdr {
            self.rest = &[];
            return Some(Err(FrameError::BadTrunkEntry));
        }
        let (src_call, len, ts) = if self.timestamps {
            (be16(b, 2) & 0x7fff, be16(b, 0) as usize, Some(be16(b, 4)))
        } else {
            (be16(b, 0) & 0x7fff, be16(b, 2) as usize, None)
        };
        if b.len() < hdr + len {
            self.rest = &[];
            return Some(Err(FrameError::BadTrunkEntry));
        }
        self.rest = &b[hdr + len..];
        Some(Ok(TrunkEntry {
            src_call,
            ts,
            payload: &b[hdr..hdr + len],
        }))
    }
}

/// Builds a meta trunk frame entry by entry.
#[derive(Clone, Debug)]
pub struct TrunkBuilder {
    buf: Vec<u8>,
    timestamps: bool,
    count: usize,
}

impl TrunkBuilder {
    pub fn new(ts: u32, timestamps: bool) -> TrunkBuilder {
        let mut buf = Vec::with_capacity(512);
        buf.extend_from_slice(&[0, 0, 0x01, timestamps as u8]);
        buf.extend_from_slice(&ts.to_be_bytes());
        TrunkBuilder {
            buf,
            timestamps,
            count: 0,
        }
    }

    /// Adds one call's media; `ts` is used only when the frame carries timestamps.
    pub fn push(&mut self, src_call: u16, ts: u16, payload: &[u8]) -> Result<(), FrameError> {
        if src_call > MAX_CALL_NUMBER || payload.len() > u16::MAX as usize {
            return Err(FrameError::Unencodable);
        }
        let len = (payload.len() as u16).to_be_bytes();
        if self.timestamps {
            self.buf.extend_from_slice(&len);
            self.buf.extend_from_slice(&src_call.to_be_bytes());
            self.buf.extend_from_slice(&ts.to_be_bytes());
        } else {
            self.buf.extend_from_slice(&src_call.to_be_bytes());
            self.buf.extend_from_slice(&len);
        }
        self.buf.extend_from_slice(payload);
        self.count += 1;
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn entries(&self) -> usize {
        self.count
    }

    pub fn finish(self) -> Vec<u8> {
        self.buf
    }
}

/// Any IAX2 datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    Full(FullFrame<'a>),
    Mini(MiniFrame<'a>),
    Trunk(TrunkFrame<'a>),
    /// A meta video mini frame (V bit): call number and a 15-bit timestamp.
    VideoMini(MiniFrame<'a>),
}

impl<'a> Frame<'a> {
    /// Reads any datagram; never panics.
    pub fn parse(b: &'a [u8]) -> Result<Frame<'a>, FrameError> {
        if b.len() < MINI_HEADER_LEN {
            return Err(FrameError::Short);
        }
        if b[0] & 0x80 != 0 {
            return FullFrame::parse(b).map(Frame::Full);
        }
        let call = be16(b, 0);
        if call != 0 {
            return Ok(Frame::Mini(MiniFrame {
                src_call: call,
                ts: be16(b, 2),
                payload: &b[MINI_HEADER_LEN..],
            }));
        }
        if b[2] & 0x80 != 0 {
            if b.len() < 6 {
                return Err(FrameError::Short);
            }
            return Ok(Frame::VideoMini(MiniFrame {
                src_call: be16(b, 2) & 0x7fff,
                ts: be16(b, 4) & 0x7fff,
                payload: &b[6..],
            }));
        }
        match b[2] {
            0x01 => TrunkFrame::parse(b).map(Frame::Trunk),
            c => Err(FrameError::UnknownMeta(c)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subclass_power_of_two_encoding() {
        assert_eq!(encode_subclass(0x04), Ok(0x04));
        assert_eq!(encode_subclass(0x7f), Ok(0x7f));
        assert_eq!(encode_subclass(format::G729), Ok(0x88));
        assert_eq!(encode_subclass(format::AMR), Ok(0x8d));
        assert_eq!(encode_subclass(0x180), Err(FrameError::Unencodable));
        assert_eq!(decode_subclass(0x88), Ok(0x100));
        assert_eq!(decode_subclass(0x9f), Ok(1 << 31));
        assert_eq!(decode_subclass(0xa0), Err(FrameError::BadSubclass));
        assert_eq!(decode_subclass(0xff), Err(FrameError::BadSubclass));
        for bit in 0..32 {
            let v = 1u32 << bit;
            assert_eq!(decode_subclass(encode_subclass(v).unwrap()), Ok(v));
        }
    }

    #[test]
    fn full_frame_roundtrip_and_layout() {
        let f = FullFrame {
            src_call: 0x1234,
            dst_call: 0x7fff,
            retransmit: true,
            ts: 0xdeadbeef,
            oseqno: 3,
            iseqno: 250,
            frame_type: FrameType::Voice,
            subclass: format::G729,
            payload: b"abc",
        };
        let v = f.to_vec().unwrap();
        assert_eq!(
            &v[..12],
            &[0x92, 0x34, 0xff, 0xff, 0xde, 0xad, 0xbe, 0xef, 3, 250, 2, 0x88]
        );
        assert_eq!(Frame::parse(&v), Ok(Frame::Full(f)));
        let mut plain = f;
        plain.retransmit = false;
        let mut w = plain.to_vec().unwrap();
        set_retransmit_bit(&mut w);
        assert_eq!(w, v);
        let mut bad = f;
        bad.src_call = 0x8000;
        assert_eq!(bad.to_vec(), Err(FrameError::Unencodable));
    }

    #[test]
    fn mini_and_video_frames() {
        let mut v = Vec::new();
        MiniFrame {
            src_call: 77,
            ts: 0xfff0,
            payload: &[1, 2, 3],
        }
        .write(&mut v)
        .unwrap();
        assert_eq!(v, [0, 77, 0xff, 0xf0, 1, 2, 3]);
        assert_eq!(
            Frame::parse(&v),
            Ok(Frame::Mini(MiniFrame {
                src_call: 77,
                ts: 0xfff0,
                payload: &[1, 2, 3]
            }))
        );
        let video = [0, 0, 0x80, 5, 0x80, 9, 0xaa];
        assert_eq!(
            Frame::parse(&video),
            Ok(Frame::VideoMini(MiniFrame {
                src_call: 5,
                ts: 9,
                payload: &[0xaa]
            }))
        );
        assert_eq!(
            Frame::parse(&[0, 0, 0x02, 0]),
            Err(FrameError::UnknownMeta(2))
        );
        assert_eq!(Frame::parse(&[0x80, 1, 0]), Err(FrameError::Short));
    }

    #[test]
    fn trunk_frames_with_and_without_timestamps() {
        for timestamps in [false, true] {
            let mut t = TrunkBuilder::new(1000, timestamps);
            t.push(10, 160, &[0xaa; 20]).unwrap();
            t.push(0x7000, 320, &[]).unwrap();
            t.push(11, 480, &[0xbb; 3]).unwrap();
            assert_eq!(t.entries(), 3);
            let bytes = t.finish();
            let Ok(Frame::Trunk(tf)) = Frame::parse(&bytes) else {
                panic!("not a trunk frame")
            };
            assert_eq!(tf.ts, 1000);
            assert_eq!(tf.timestamps, timestamps);
            let e: Vec<_> = tf.entries().collect();
            assert_eq!(e.len(), 3);
            assert_eq!(e[0].src_call, 10);
            assert_eq!(e[0].payload, &[0xaa; 20]);
            assert_eq!(e[1].src_call, 0x7000);
            assert_eq!(e[2].payload, &[0xbb; 3]);
            assert_eq!(e[2].ts, timestamps.then_some(480));
            // Truncating anywhere inside the entries is an error, never a panic.
            for cut in TRUNK_HEADER_LEN + 1..bytes.len() {
                let r = Frame::parse(&bytes[..cut]);
                assert!(
                    r.is_err() || matches!(r, Ok(Frame::Trunk(_))),
                    "cut {cut}: {r:?}"
                );
            }
        }
        // Without timestamps the header is callno then length; with them, length then callno.
        let mut t = TrunkBuilder::new(0, false);
        t.push(0x0102, 0, &[9]).unwrap();
        assert_eq!(&t.finish()[8..], &[1, 2, 0, 1, 9]);
        let mut t = TrunkBuilder::new(0, true);
        t.push(0x0102, 0x0304, &[9]).unwrap();
        assert_eq!(&t.finish()[8..], &[0, 1, 1, 2, 3, 4, 9]);
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut x: u64 = 0x9e3779b97f4a7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..200_000 {
            let len = (next() % 80) as usize;
            let mut b: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            // Bias towards the interesting headers.
            match next() % 4 {
                0 if len >= 4 => b[..3].copy_from_slice(&[0, 0, 1]),
                1 if len >= 1 => b[0] |= 0x80,
                _ => {}
            }
            match Frame::parse(&b) {
                Ok(Frame::Full(f)) => {
                    let _ = crate::ie::Ies::parse(f.payload);
                    assert!(f.payload.len() + FULL_HEADER_LEN == b.len());
                }
                Ok(Frame::Trunk(t)) => {
                    let total: usize = t.entries().map(|e| e.payload.len()).sum();
                    assert!(total <= b.len());
                }
                _ => {}
            }
        }
    }
}
