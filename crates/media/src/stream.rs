//! The RTP stream a leg sends: one SSRC whose sequence numbers and
//! timestamps stay continuous whichever source (prompt, tone, echo, bridge)
//! feeds it.

use std::time::Instant;

use rtp::{RtpHeader, RtpPacket};

/// How an incoming stream maps onto ours while relaying.
#[derive(Debug, Clone, Copy)]
struct RelayMap {
    in_ssrc: u32,
    ts_offset: u32,
    seq_offset: u16,
}

#[derive(Debug)]
pub(crate) struct OutStream {
    pub(crate) ssrc: u32,
    /// RTP clock rate of the leg's format.
    pub(crate) clock: u64,
    /// Next sequence number and the timestamp just past the last sample sent.
    seq: u16,
    ts: u32,
    /// Set when the source changed: the next packet starts a talkspurt.
    restart: bool,
    relay: Option<RelayMap>,
    /// How a frame leg's timestamps map onto ours while relaying its frames.
    frame_offset: Option<u32>,
    /// When the last packet went out and its timestamp, to resume in step
    /// with wall-clock time after a pause.
    last: Option<(Instant, u32)>,
    pub(crate) packets: u64,
    pub(crate) octets: u64,
}

impl OutStream {
    pub(crate) fn new(rng: &mut fastrand::Rng) -> OutStream {
        OutStream {
            ssrc: rng.u32(..),
            clock: 8000,
            seq: rng.u16(..),
            ts: rng.u32(..),
            restart: true,
            relay: None,
            frame_offset: None,
            last: None,
            packets: 0,
            octets: 0,
        }
    }

    /// The source changed: the next packet sets the marker bit and
    /// timestamps jump by the time that passed.
    pub(crate) fn restart(&mut self) {
        self.restart = true;
        self.relay = None;
        self.frame_offset = None;
    }

    /// Moves `ts` forward to account for wall-clock time since the last packet.
    fn resync(&mut self, now: Instant) {
        if let Some((at, last_ts)) = self.last {
            let elapsed = (now.saturating_duration_since(at).as_nanos() as u64 * self.clock
                / 1_000_000_000) as u32;
            let wall = last_ts.wrapping_add(elapsed);
            if is_after(wall, self.ts) {
                self.ts = wall;
            }
        }
    }

    /// Header for a locally generated frame of `samples`; timestamps advance
    /// by frame count so they stay exact however the ticks jitter.
    pub(crate) fn next_frame(&mut self, payload_type: u8, samples: u32, now: Instant) -> RtpHeader {
        let marker = std::mem::take(&mut self.restart);
        if marker {
            self.resync(now);
        }
        let h = RtpHeader {
            marker,
            payload_type,
            sequence: self.seq,
            timestamp: self.ts,
            ssrc: self.ssrc,
        };
        self.seq = self.seq.wrapping_add(1);
        self.ts = self.ts.wrapping_add(samples);
        h
    }

    /// Frames skipped (the shell stalled): keep the timestamp on the clock.
    pub(crate) fn skip(&mut self, samples: u32) {
        self.ts = self.ts.wrapping_add(samples);
    }

    /// Header for relaying `pkt` (holding `samples` of audio, 0 for events):
    /// its sequence and timestamp are shifted by fixed offsets so gaps and
    /// reordering pass through unchanged.
    pub(crate) fn relay(
        &mut self,
        pkt: &RtpPacket<'_>,
        payload_type: u8,
        samples: u32,
        now: Instant,
    ) -> RtpHeader {
        let map = match self.relay.filter(|m| m.in_ssrc == pkt.ssrc()) {
            Some(m) => m,
            None => {
                self.restart = true;
                self.resync(now);
                let m = RelayMap {
                    in_ssrc: pkt.ssrc(),
                    ts_offset: self.ts.wrapping_sub(pkt.timestamp()),
                    seq_offset: self.seq.wrapping_sub(pkt.sequence()),
                };
                self.relay = Some(m);
                m
            }
        };
        let marker = std::mem::take(&mut self.restart) || pkt.marker();
        let h = RtpHeader {
            marker,
            payload_type,
            sequence: pkt.sequence().wrapping_add(map.seq_offset),
            timestamp: pkt.timestamp().wrapping_add(map.ts_offset),
            ssrc: self.ssrc,
        };
        let next = h.sequence.wrapping_add(1);
        if seq_after(next, self.seq) {
            self.seq = next;
        }
        let end = h.timestamp.wrapping_add(samples);
        if is_after(end, self.ts) {
            self.ts = end;
        }
        h
    }

    /// Header for relaying a frame leg's frame stamped `ts` (in this stream's clock units),
    /// holding `samples`: shifted by a fixed offset as [`OutStream::relay`] does; frames carry no
    /// sequence numbers, so they are numbered as they go out.
    pub(crate) fn relay_frame(
        &mut self,
        ts: u32,
        payload_type: u8,
        samples: u32,
        now: Instant,
    ) -> RtpHeader {
        let offset = match self.frame_offset {
            Some(o) => o,
            None => {
                self.restart = true;
                self.resync(now);
                *self.frame_offset.insert(self.ts.wrapping_sub(ts))
            }
        };
        let h = RtpHeader {
            marker: std::mem::take(&mut self.restart),
            payload_type,
            sequence: self.seq,
            timestamp: ts.wrapping_add(offset),
            ssrc: self.ssrc,
        };
        self.seq = self.seq.wrapping_add(1);
        let end = h.timestamp.wrapping_add(samples);
        if is_after(end, self.ts) {
            self.ts = end;
        }
        h
    }

    /// Where an event starting now lies on the stream: just past the last sample sent.
    pub(crate) fn position(&mut self, now: Instant) -> u32 {
        self.resync(now);
        self.ts
    }

    /// Header for an RFC 4733 event packet of the event starting at `timestamp`.
    pub(crate) fn event(&mut self, payload_type: u8, timestamp: u32, marker: bool) -> RtpHeader {
        let h = RtpHeader {
            marker,
            payload_type,
            sequence: self.seq,
            timestamp,
            ssrc: self.ssrc,
        };
        self.seq = self.seq.wrapping_add(1);
        h
    }

    /// Accounts for a packet that was handed to the shell.
    pub(crate) fn sent(&mut self, header: &RtpHeader, payload_len: usize, now: Instant) {
        self.packets += 1;
        self.octets += payload_len as u64;
        self.last = Some((now, header.timestamp));
    }

    /// RTP timestamp corresponding to `now`, for the SR.
    pub(crate) fn timestamp_at(&self, now: Instant) -> u32 {
        self.last.map_or(self.ts, |(at, ts)| {
            ts.wrapping_add(
                (now.saturating_duration_since(at).as_nanos() as u64 * self.clock / 1_000_000_000)
                    as u32,
            )
        })
    }
}

/// Serial-number comparison for 32-bit timestamps.
fn is_after(a: u32, b: u32) -> bool {
    a != b && a.wrapping_sub(b) < u32::MAX / 2
}

/// Serial-number comparison for 16-bit sequence numbers.
fn seq_after(a: u16, b: u16) -> bool {
    a != b && a.wrapping_sub(b) < 0x8000
}
