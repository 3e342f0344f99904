//! RTCP (RFC 3550 §6): what a softswitch needs to report and to learn
//! loss, jitter and round-trip time from the far end.
//!
//! We always send a compound of SR or RR followed by SDES CNAME, which is
//! the minimum RFC 3550 §6.1 allows. Parsing walks any compound and exposes
//! SR/RR report blocks, SDES CNAMEs and BYE; other packet types are passed
//! over so new ones (XR, feedback) do not break older code.

use std::time::Duration;

use crate::{be16, be32, Error};

pub const PT_SR: u8 = 200;
pub const PT_RR: u8 = 201;
pub const PT_SDES: u8 = 202;
pub const PT_BYE: u8 = 203;

const REPORT_BLOCK_LEN: usize = 24;
const SDES_CNAME: u8 = 1;

/// Sender information of an SR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SenderInfo {
    /// 64-bit NTP timestamp (seconds since 1900 in the upper 32 bits).
    pub ntp: u64,
    pub rtp_timestamp: u32,
    pub packet_count: u32,
    pub octet_count: u32,
}

/// One reception report block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReportBlock {
    /// The source this block reports on.
    pub ssrc: u32,
    /// Fraction lost since the previous report, in 1/256.
    pub fraction_lost: u8,
    /// Cumulative packets lost (24-bit signed on the wire).
    pub cumulative_lost: i32,
    /// Extended highest sequence number received.
    pub highest_seq: u32,
    /// Interarrival jitter in timestamp units.
    pub jitter: u32,
    /// Middle 32 bits of the NTP time of the last SR received, 0 if none.
    pub lsr: u32,
    /// Delay since that SR in 1/65536 s.
    pub dlsr: u32,
}

/// The middle 32 bits of an NTP timestamp, as used by LSR.
pub fn ntp_short(ntp: u64) -> u32 {
    (ntp >> 16) as u32
}

/// A duration in 1/65536 s, as used by DLSR (saturating).
pub fn duration_to_short(d: Duration) -> u32 {
    let units = (d.as_secs() << 16) | (((d.subsec_nanos() as u64) << 16) / 1_000_000_000);
    units.min(u32::MAX as u64) as u32
}

/// Round-trip time per RFC 3550 §6.4.1, from a report block received at NTP
/// time `arrival_ntp`. `None` if the far end has not seen an SR from us yet
/// or the numbers are inconsistent.
pub fn round_trip(arrival_ntp: u64, block: &ReportBlock) -> Option<Duration> {
    if block.lsr == 0 {
        return None;
    }
    let rtt = ntp_short(arrival_ntp)
        .wrapping_sub(block.lsr)
        .wrapping_sub(block.dlsr) as i32;
    // A far end that rounds its DLSR up makes a round trip near zero (a LAN, loopback) come out
    // slightly negative: that is zero. Far below it means clock trouble, not an 18-hour RTT.
    match rtt {
        0.. => Some(Duration::from_nanos((rtt as u64 * 1_000_000_000) >> 16)),
        NEGATIVE_SLACK.. => Some(Duration::ZERO),
        _ => None,
    }
}

/// How far below zero (10 ms in 1/65536 s) a round trip is still rounding, not clock trouble.
const NEGATIVE_SLACK: i32 = -655;

/// Writes a compound RTCP packet: an SR when `sender` is given, else an RR,
/// followed by SDES with our CNAME. Returns the length written.
pub fn write_report(
    buf: &mut [u8],
    ssrc: u32,
    sender: Option<&SenderInfo>,
    blocks: &[ReportBlock],
    cname: &[u8],
) -> Result<usize, Error> {
    if blocks.len() > 31 || cname.len() > 255 {
        return Err(Error::Malformed);
    }
    let report_len = 8 + sender.map_or(0, |_| 20) + REPORT_BLOCK_LEN * blocks.len();
    // SDES: header, SSRC, CNAME item, at least one END octet, pad to 4.
    let sdes_len = (4 + 4 + 2 + cname.len() + 1).div_ceil(4) * 4;
    let out = buf
        .get_mut(..report_len + sdes_len)
        .ok_or(Error::BufferTooSmall)?;
    out.fill(0);

    let pt = if sender.is_some() { PT_SR } else { PT_RR };
    write_header(out, blocks.len() as u8, pt, report_len);
    out[4..8].copy_from_slice(&ssrc.to_be_bytes());
    let mut at = 8;
    if let Some(s) = sender {
        out[at..at + 8].copy_from_slice(&s.ntp.to_be_bytes());
        out[at + 8..at + 12].copy_from_slice(&s.rtp_timestamp.to_be_bytes());
        out[at + 12..at + 16].copy_from_slice(&s.packet_count.to_be_bytes());
        out[at + 16..at + 20].copy_from_slice(&s.octet_count.to_be_bytes());
        at += 20;
    }
    for b in blocks {
        let lost = (b.cumulative_lost.clamp(-0x80_0000, 0x7F_FFFF) as u32) & 0xFF_FFFF;
        out[at..at + 4].copy_from_slice(&b.ssrc.to_be_bytes());
        out[at + 4..at + 8].copy_from_slice(&((b.fraction_lost as u32) << 24 | lost).to_be_bytes());
        out[at + 8..at + 12].copy_from_slice(&b.highest_seq.to_be_bytes());
        out[at + 12..at + 16].copy_from_slice(&b.jitter.to_be_bytes());
        out[at + 16..at + 20].copy_from_slice(&b.lsr.to_be_bytes());
        out[at + 20..at + 24].copy_from_slice(&b.dlsr.to_be_bytes());
        at += REPORT_BLOCK_LEN;
    }

    let sdes = &mut out[at..];
    write_header(sdes, 1, PT_SDES, sdes_len);
    sdes[4..8].copy_from_slice(&ssrc.to_be_bytes());
    sdes[8] = SDES_CNAME;
    sdes[9] = cname.len() as u8;
    sdes[10..10 + cname.len()].copy_from_slice(cname);
    Ok(report_len + sdes_len)
}

fn write_header(out: &mut [u8], count: u8, pt: u8, len: usize) {
    out[0] = 0x80 | count;
    out[1] = pt;
    out[2..4].copy_from_slice(&((len / 4 - 1) as u16).to_be_bytes());
}

/// One packet of a compound.
#[derive(Debug, Clone, Copy)]
pub enum RtcpPacket<'a> {
    SenderReport {
        ssrc: u32,
        info: SenderInfo,
        blocks: ReportBlocks<'a>,
    },
    ReceiverReport {
        ssrc: u32,
        blocks: ReportBlocks<'a>,
    },
    Sdes(Sdes<'a>),
    Bye(Bye<'a>),
    /// A packet type we do not interpret (APP, XR, feedback...).
    Other {
        packet_type: u8,
    },
}

/// Iterates over the packets of a compound RTCP datagram; yields one error
/// and stops at the first malformed packet.
pub fn parse_compound(buf: &[u8]) -> Compound<'_> {
    Compound { rest: buf }
}

#[derive(Debug, Clone)]
pub struct Compound<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Compound<'a> {
    type Item = Result<RtcpPacket<'a>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let result = parse_one(self.rest);
        match result {
            Ok((_, rest)) => self.rest = rest,
            Err(_) => self.rest = &[],
        }
        Some(result.map(|(p, _)| p))
    }
}

fn parse_one(buf: &[u8]) -> Result<(RtcpPacket<'_>, &[u8]), Error> {
    if buf.len() < 4 {
        return Err(Error::Truncated);
    }
    if buf[0] >> 6 != 2 {
        return Err(Error::BadVersion);
    }
    let len = (be16(buf, 2) as usize + 1) * 4;
    if buf.len() < len {
        return Err(Error::Truncated);
    }
    let (pkt, rest) = buf.split_at(len);
    let mut body = &pkt[4..];
    if pkt[0] & 0x20 != 0 {
        let pad = pkt[len - 1] as usize;
        if pad == 0 || pad > body.len() {
            return Err(Error::BadPadding);
        }
        body = &body[..body.len() - pad];
    }
    let count = (pkt[0] & 0x1F) as usize;
    let packet = match pkt[1] {
        PT_SR => {
            let blocks = report_blocks(body, 24, count)?;
            let info = SenderInfo {
                ntp: (be32(body, 4) as u64) << 32 | be32(body, 8) as u64,
                rtp_timestamp: be32(body, 12),
                packet_count: be32(body, 16),
                octet_count: be32(body, 20),
            };
            RtcpPacket::SenderReport {
                ssrc: be32(body, 0),
                info,
                blocks,
            }
        }
        PT_RR => {
            let blocks = report_blocks(body, 4, count)?;
            RtcpPacket::ReceiverReport {
                ssrc: be32(body, 0),
                blocks,
            }
        }
        PT_SDES => {
            let sdes = Sdes { count, body };
            // Validate every chunk now so iteration cannot fail later.
            let mut rest = body;
            for _ in 0..count {
                rest = next_chunk(rest)?.1;
            }
            RtcpPacket::Sdes(sdes)
        }
        PT_BYE => {
            let ssrcs = body.get(..4 * count).ok_or(Error::Truncated)?;
            let reason = match body.get(4 * count) {
                None => None,
                Some(&n) => Some(
                    body.get(4 * count + 1..4 * count + 1 + n as usize)
                        .ok_or(Error::Truncated)?,
                ),
            };
            RtcpPacket::Bye(Bye { ssrcs, reason })
        }
        packet_type => RtcpPacket::Other { packet_type },
    };
    Ok((packet, rest))
}

fn report_blocks(body: &[u8], offset: usize, count: usize) -> Result<ReportBlocks<'_>, Error> {
    body.get(offset..offset + count * REPORT_BLOCK_LEN)
        .map(ReportBlocks)
        .ok_or(Error::Truncated)
}

/// The report blocks of an SR or RR.
#[derive(Debug, Clone, Copy)]
pub struct ReportBlocks<'a>(&'a [u8]);

impl Iterator for ReportBlocks<'_> {
    type Item = ReportBlock;

    fn next(&mut self) -> Option<ReportBlock> {
        let b = self.0.get(..REPORT_BLOCK_LEN)?;
        self.0 = &self.0[REPORT_BLOCK_LEN..];
        let word = be32(b, 4);
        Some(ReportBlock {
            ssrc: be32(b, 0),
            fraction_lost: (word >> 24) as u8,
            // Sign-extend the 24-bit field.
            cumulative_lost: ((word << 8) as i32) >> 8,
            highest_seq: be32(b, 8),
            jitter: be32(b, 12),
            lsr: be32(b, 16),
            dlsr: be32(b, 20),
        })
    }
}

/// An SDES packet; its chunks were validated when parsed.
#[derive(Debug, Clone, Copy)]
pub struct Sdes<'a> {
    count: usize,
    body: &'a [u8],
}

/// The part of an SDES chunk we use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SdesChunk<'a> {
    pub ssrc: u32,
    pub cname: Option<&'a [u8]>,
}

impl<'a> Sdes<'a> {
    pub fn chunks(&self) -> impl Iterator<Item = SdesChunk<'a>> + 'a {
        let mut rest = self.body;
        (0..self.count).map_while(move |_| {
            let (chunk, next) = next_chunk(rest).ok()?;
            rest = next;
            Some(chunk)
        })
    }
}

fn next_chunk(data: &[u8]) -> Result<(SdesChunk<'_>, &[u8]), Error> {
    if data.len() < 4 {
        return Err(Error::Truncated);
    }
    let mut chunk = SdesChunk {
        ssrc: be32(data, 0),
        cname: None,
    };
    let mut i = 4;
    loop {
        match data.get(i) {
            None => return Err(Error::Truncated),
            Some(0) => break,
            Some(&item) => {
                let len = *data.get(i + 1).ok_or(Error::Truncated)? as usize;
                let text = data.get(i + 2..i + 2 + len).ok_or(Error::Truncated)?;
                if item == SDES_CNAME {
                    chunk.cname = Some(text);
                }
                i += 2 + len;
            }
        }
    }
    // END octet, then padding to the next 32-bit boundary.
    let next = ((i + 1).div_ceil(4) * 4).min(data.len());
    Ok((chunk, &data[next..]))
}

/// A BYE packet.
#[derive(Debug, Clone, Copy)]
pub struct Bye<'a> {
    ssrcs: &'a [u8],
    pub reason: Option<&'a [u8]>,
}

impl<'a> Bye<'a> {
    pub fn ssrcs(&self) -> impl Iterator<Item = u32> + 'a {
        self.ssrcs.chunks_exact(4).map(|c| be32(c, 0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(ssrc: u32) -> ReportBlock {
        ReportBlock {
            ssrc,
            fraction_lost: 25,
            cumulative_lost: -3,
            highest_seq: 0x1_0005,
            jitter: 42,
            lsr: 0x1234_5678,
            dlsr: 0x0001_8000,
        }
    }

    #[test]
    fn sr_with_sdes_round_trips() {
        let info = SenderInfo {
            ntp: 0xAABB_CCDD_1122_3344,
            rtp_timestamp: 160,
            packet_count: 7,
            octet_count: 1120,
        };
        let mut buf = [0u8; 256];
        let n = write_report(
            &mut buf,
            99,
            Some(&info),
            &[block(5), block(6)],
            b"strowger@host",
        )
        .unwrap();
        assert_eq!(n % 4, 0);
        let pkts: Vec<_> = parse_compound(&buf[..n]).collect::<Result<_, _>>().unwrap();
        assert_eq!(pkts.len(), 2);
        match pkts[0] {
            RtcpPacket::SenderReport {
                ssrc,
                info: got,
                blocks,
            } => {
                assert_eq!(ssrc, 99);
                assert_eq!(got, info);
                assert_eq!(blocks.collect::<Vec<_>>(), vec![block(5), block(6)]);
            }
            other => panic!("expected SR, got {other:?}"),
        }
        match pkts[1] {
            RtcpPacket::Sdes(s) => assert_eq!(
                s.chunks().collect::<Vec<_>>(),
                vec![SdesChunk {
                    ssrc: 99,
                    cname: Some(&b"strowger@host"[..])
                }]
            ),
            other => panic!("expected SDES, got {other:?}"),
        }
    }

    #[test]
    fn rr_and_bye() {
        let mut buf = [0u8; 128];
        // CNAME of length 2 makes the SDES chunk end exactly on a boundary plus END.
        let n = write_report(&mut buf, 1, None, &[block(2)], b"ab").unwrap();
        let bye = [0x81, PT_BYE, 0, 2, 0, 0, 0, 1, 3, b'b', b'y', b'e'];
        buf[n..n + bye.len()].copy_from_slice(&bye);
        let pkts: Vec<_> = parse_compound(&buf[..n + bye.len()])
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(matches!(
            pkts[0],
            RtcpPacket::ReceiverReport { ssrc: 1, .. }
        ));
        match pkts[2] {
            RtcpPacket::Bye(b) => {
                assert_eq!(b.ssrcs().collect::<Vec<_>>(), vec![1]);
                assert_eq!(b.reason, Some(&b"bye"[..]));
            }
            other => panic!("expected BYE, got {other:?}"),
        }
    }

    #[test]
    fn round_trip_time() {
        let b = ReportBlock {
            lsr: 0x0001_0000,
            dlsr: 0x0000_8000,
            ..Default::default()
        };
        // Arrival 2 s after LSR's 1 s mark, 0.5 s held by the far end: 0.5 s RTT.
        let arrival = 3u64 << 32;
        assert_eq!(round_trip(arrival, &b), Some(Duration::from_millis(1500)));
        assert_eq!(round_trip(arrival, &ReportBlock::default()), None);
        // DLSR rounded past the arrival: zero, not an 18-hour round trip; far past it: no value.
        let rounded = ReportBlock {
            dlsr: 0x0002_0000 + 0x40,
            ..b
        };
        assert_eq!(round_trip(arrival, &rounded), Some(Duration::ZERO));
        let wrong = ReportBlock {
            dlsr: 0x0002_8000,
            ..b
        };
        assert_eq!(round_trip(arrival, &wrong), None);
        assert_eq!(duration_to_short(Duration::from_millis(1500)), 0x0001_8000);
    }

    #[test]
    fn malformed_compounds_are_errors() {
        let mut buf = [0u8; 128];
        let n = write_report(&mut buf, 1, None, &[block(2)], b"x").unwrap();
        // Every cut except the RR/SDES boundary (32) leaves a partial packet.
        for cut in (1..n).filter(|&c| c != 32) {
            let r: Result<Vec<_>, _> = parse_compound(&buf[..cut]).collect();
            assert!(r.is_err(), "cut at {cut} parsed");
        }
        let mut bad = buf;
        bad[0] = 0x9F; // RR claiming 31 blocks
        assert_eq!(
            parse_compound(&bad[..n]).next().unwrap().unwrap_err(),
            Error::Truncated
        );
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut rng = fastrand::Rng::with_seed(3);
        let mut buf = [0u8; 96];
        for _ in 0..100_000 {
            let len = rng.usize(..buf.len());
            rng.fill(&mut buf[..len]);
            if len > 4 {
                buf[0] = 0x80 | (buf[0] & 0x3F);
                buf[1] = 200 + rng.u8(..5);
                buf[2] = 0;
                buf[3] = rng.u8(..(len / 4) as u8);
            }
            for p in parse_compound(&buf[..len]).flatten() {
                match p {
                    RtcpPacket::SenderReport { blocks, .. }
                    | RtcpPacket::ReceiverReport { blocks, .. } => {
                        let _ = blocks.count();
                    }
                    RtcpPacket::Sdes(s) => {
                        let _ = s.chunks().count();
                    }
                    RtcpPacket::Bye(b) => {
                        let _ = b.ssrcs().count();
                    }
                    RtcpPacket::Other { .. } => {}
                }
            }
        }
    }
}
