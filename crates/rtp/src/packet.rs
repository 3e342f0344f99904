//! RTP data packets (RFC 3550 §5.1).

use crate::{be16, be32, Error};

/// Length of the fixed RTP header, without CSRCs or extension.
pub const HEADER_LEN: usize = 12;

/// Zero-copy view of a validated RTP packet.
#[derive(Debug, Clone, Copy)]
pub struct RtpPacket<'a> {
    buf: &'a [u8],
    /// Payload bounds after CSRCs/extension and before padding.
    payload_start: usize,
    payload_end: usize,
}

impl<'a> RtpPacket<'a> {
    /// Validates version, CSRC list, header extension and padding.
    pub fn parse(buf: &'a [u8]) -> Result<Self, Error> {
        if buf.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if buf[0] >> 6 != 2 {
            return Err(Error::BadVersion);
        }
        let mut start = HEADER_LEN + 4 * (buf[0] & 0x0F) as usize;
        if buf.len() < start {
            return Err(Error::Truncated);
        }
        if buf[0] & 0x10 != 0 {
            if buf.len() < start + 4 {
                return Err(Error::Truncated);
            }
            start += 4 + 4 * be16(buf, start + 2) as usize;
            if buf.len() < start {
                return Err(Error::Truncated);
            }
        }
        let mut end = buf.len();
        if buf[0] & 0x20 != 0 {
            let pad = buf[buf.len() - 1] as usize;
            if pad == 0 || pad > end - start {
                return Err(Error::BadPadding);
            }
            end -= pad;
        }
        Ok(RtpPacket {
            buf,
            payload_start: start,
            payload_end: end,
        })
    }

    pub fn marker(&self) -> bool {
        self.buf[1] & 0x80 != 0
    }

    pub fn payload_type(&self) -> u8 {
        self.buf[1] & 0x7F
    }

    pub fn sequence(&self) -> u16 {
        be16(self.buf, 2)
    }

    pub fn timestamp(&self) -> u32 {
        be32(self.buf, 4)
    }

    pub fn ssrc(&self) -> u32 {
        be32(self.buf, 8)
    }

    /// Contributing sources, in order.
    pub fn csrcs(&self) -> impl Iterator<Item = u32> + 'a {
        let buf = self.buf;
        (0..(buf[0] & 0x0F) as usize).map(move |i| be32(buf, HEADER_LEN + 4 * i))
    }

    /// Payload without padding.
    pub fn payload(&self) -> &'a [u8] {
        &self.buf[self.payload_start..self.payload_end]
    }
}

/// Fixed header fields for a packet we send (we never send CSRCs,
/// extensions or padding).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtpHeader {
    pub marker: bool,
    pub payload_type: u8,
    pub sequence: u16,
    pub timestamp: u32,
    pub ssrc: u32,
}

impl RtpHeader {
    /// Writes the 12-byte header to the start of `buf`, so the caller can
    /// encode the payload straight into `buf[HEADER_LEN..]` without copying.
    pub fn write(&self, buf: &mut [u8]) -> Result<usize, Error> {
        let out = buf.get_mut(..HEADER_LEN).ok_or(Error::BufferTooSmall)?;
        out[0] = 0x80;
        out[1] = (self.marker as u8) << 7 | (self.payload_type & 0x7F);
        out[2..4].copy_from_slice(&self.sequence.to_be_bytes());
        out[4..8].copy_from_slice(&self.timestamp.to_be_bytes());
        out[8..12].copy_from_slice(&self.ssrc.to_be_bytes());
        Ok(HEADER_LEN)
    }

    /// Writes header and payload; returns the packet length.
    pub fn write_with_payload(&self, payload: &[u8], buf: &mut [u8]) -> Result<usize, Error> {
        let len = HEADER_LEN + payload.len();
        if buf.len() < len {
            return Err(Error::BufferTooSmall);
        }
        self.write(buf)?;
        buf[HEADER_LEN..len].copy_from_slice(payload);
        Ok(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> RtpHeader {
        RtpHeader {
            marker: true,
            payload_type: 8,
            sequence: 0xFFFE,
            timestamp: 0xDEADBEEF,
            ssrc: 0x01020304,
        }
    }

    #[test]
    fn build_then_parse() {
        let mut buf = [0u8; 64];
        let n = header().write_with_payload(&[1, 2, 3], &mut buf).unwrap();
        assert_eq!(n, 15);
        let p = RtpPacket::parse(&buf[..n]).unwrap();
        assert!(p.marker());
        assert_eq!(p.payload_type(), 8);
        assert_eq!(p.sequence(), 0xFFFE);
        assert_eq!(p.timestamp(), 0xDEADBEEF);
        assert_eq!(p.ssrc(), 0x01020304);
        assert_eq!(p.payload(), &[1, 2, 3]);
        assert_eq!(p.csrcs().count(), 0);
        assert_eq!(
            header().write_with_payload(&[0; 60], &mut buf),
            Err(Error::BufferTooSmall)
        );
    }

    #[test]
    fn csrcs_extension_and_padding_are_skipped() {
        let mut pkt = vec![0xB2, 0x00, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3]; // V=2 P X CC=2
        pkt.extend_from_slice(&[0, 0, 0, 10, 0, 0, 0, 11]); // CSRCs
        pkt.extend_from_slice(&[0xBE, 0xDE, 0, 1, 9, 9, 9, 9]); // one-word extension
        pkt.extend_from_slice(&[7, 7]); // payload
        pkt.extend_from_slice(&[0, 0, 3]); // 3 bytes padding
        let p = RtpPacket::parse(&pkt).unwrap();
        assert_eq!(p.csrcs().collect::<Vec<_>>(), vec![10, 11]);
        assert_eq!(p.payload(), &[7, 7]);
    }

    #[test]
    fn rejects_bad_packets() {
        let mut buf = [0u8; 32];
        let n = header().write_with_payload(&[1, 2], &mut buf).unwrap();
        assert_eq!(RtpPacket::parse(&buf[..11]).unwrap_err(), Error::Truncated);
        let mut v1 = buf;
        v1[0] = 0x40;
        assert_eq!(RtpPacket::parse(&v1[..n]).unwrap_err(), Error::BadVersion);
        let mut pad = buf;
        pad[0] |= 0x20;
        pad[n - 1] = 0;
        assert_eq!(RtpPacket::parse(&pad[..n]).unwrap_err(), Error::BadPadding);
        pad[n - 1] = 3; // more than the 2-byte payload
        assert_eq!(RtpPacket::parse(&pad[..n]).unwrap_err(), Error::BadPadding);
        let mut cc = buf;
        cc[0] |= 0x0F;
        assert_eq!(RtpPacket::parse(&cc[..n]).unwrap_err(), Error::Truncated);
        let mut ext = buf;
        ext[0] |= 0x10;
        assert_eq!(RtpPacket::parse(&ext[..n]).unwrap_err(), Error::Truncated);
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut rng = fastrand::Rng::with_seed(7);
        let mut buf = [0u8; 64];
        for _ in 0..100_000 {
            let len = rng.usize(..buf.len());
            rng.fill(&mut buf[..len]);
            if rng.bool() {
                buf[0] = 0x80 | (buf[0] & 0x3F); // get past the version check
            }
            if let Ok(p) = RtpPacket::parse(&buf[..len]) {
                assert!(p.payload().len() <= len);
                let _ = p.csrcs().count();
            }
        }
    }
}
