//! RFC 4733 telephone events: payload format, a receiver that reports each
//! digit exactly once, and a sender sequence.
//!
//! An event is identified by its RTP timestamp (the event start); senders
//! repeat the start for robustness and send the end three times, so the
//! detector keys on that timestamp to de-duplicate.

use crate::{be16, Error};

/// Payload length of one telephone event.
pub const EVENT_LEN: usize = 4;

/// Audio arriving this many samples (100 ms at 8 kHz) past the known end of
/// an event means its end packets were lost.
const LOST_END_SLACK: u32 = 800;

/// One telephone-event payload (RFC 4733 §2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TelephoneEvent {
    /// Event code: 0-9, 10 `*`, 11 `#`, 12-15 `A`-`D`, 16 flash.
    pub event: u8,
    pub end: bool,
    /// Power level in -dBm0 (0..=63).
    pub volume: u8,
    /// Duration so far, in timestamp units.
    pub duration: u16,
}

impl TelephoneEvent {
    /// Parses the first event of a payload; anything after it is ignored.
    pub fn parse(payload: &[u8]) -> Result<Self, Error> {
        if payload.len() < EVENT_LEN {
            return Err(Error::Truncated);
        }
        Ok(TelephoneEvent {
            event: payload[0],
            end: payload[1] & 0x80 != 0,
            volume: payload[1] & 0x3F,
            duration: be16(payload, 2),
        })
    }

    pub fn write(&self, buf: &mut [u8]) -> Result<usize, Error> {
        let out = buf.get_mut(..EVENT_LEN).ok_or(Error::BufferTooSmall)?;
        out[0] = self.event;
        out[1] = (self.end as u8) << 7 | (self.volume & 0x3F);
        out[2..4].copy_from_slice(&self.duration.to_be_bytes());
        Ok(EVENT_LEN)
    }
}

/// The character for a DTMF event code (`!` for flash), if it is one.
pub fn event_char(event: u8) -> Option<char> {
    Some(match event {
        0..=9 => (b'0' + event) as char,
        10 => '*',
        11 => '#',
        12..=15 => (b'A' + event - 12) as char,
        16 => '!',
        _ => return None,
    })
}

/// The event code for a DTMF character; inverse of [`event_char`].
pub fn char_event(c: char) -> Option<u8> {
    (0..=16).find(|&e| event_char(e) == Some(c.to_ascii_uppercase()))
}

/// A digit reported by [`DtmfDetector`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Digit {
    pub digit: char,
    /// Duration in timestamp units.
    pub duration: u32,
}

#[derive(Debug, Clone, Copy)]
struct Ongoing {
    timestamp: u32,
    event: u8,
    duration: u16,
}

/// Turns received telephone-event packets into one report per digit.
#[derive(Debug, Default)]
pub struct DtmfDetector {
    ongoing: Option<Ongoing>,
    /// Timestamp of the last reported event, to drop its late duplicates.
    reported: Option<u32>,
}

impl DtmfDetector {
    /// Feeds one event packet with its RTP timestamp; `report` is called for
    /// each finished digit (twice at most, when a new event reveals that the
    /// previous one lost all its end packets).
    pub fn on_event(&mut self, timestamp: u32, ev: &TelephoneEvent, mut report: impl FnMut(Digit)) {
        if self.reported == Some(timestamp) {
            return;
        }
        if let Some(prev) = self.ongoing.filter(|o| o.timestamp != timestamp) {
            self.finish(prev, &mut report);
        }
        let mut cur = Ongoing {
            timestamp,
            event: ev.event,
            duration: ev.duration,
        };
        if let Some(o) = self.ongoing {
            cur.duration = cur.duration.max(o.duration);
        }
        if ev.end {
            self.finish(cur, &mut report);
        } else {
            self.ongoing = Some(cur);
        }
    }

    /// Feeds the timestamp of an audio packet: audio well past an unfinished
    /// event means its end packets were all lost, so report it now.
    pub fn on_audio(&mut self, timestamp: u32, report: impl FnMut(Digit)) {
        if let Some(o) = self.ongoing {
            let since = timestamp.wrapping_sub(o.timestamp);
            if since < u32::MAX / 2 && since > o.duration as u32 + LOST_END_SLACK {
                self.finish(o, report);
            }
        }
    }

    fn finish(&mut self, o: Ongoing, mut report: impl FnMut(Digit)) {
        self.ongoing = None;
        self.reported = Some(o.timestamp);
        if let Some(digit) = event_char(o.event) {
            report(Digit {
                digit,
                duration: o.duration as u32,
            });
        }
    }
}

/// Generates the payloads for sending one digit: a start packet (send with
/// the RTP marker bit), updates every `step`, then the end three times. All
/// carry the same RTP timestamp, the event start.
#[derive(Debug, Clone)]
pub struct DtmfSender {
    event: u8,
    volume: u8,
    total: u16,
    step: u16,
    sent: u16,
    ends_left: u8,
}

/// One packet of a [`DtmfSender`] sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DtmfPacket {
    pub marker: bool,
    pub event: TelephoneEvent,
}

impl DtmfSender {
    /// `duration` and `step` (one packet interval) are in timestamp units;
    /// `None` for a character that is not a DTMF digit or a zero step.
    pub fn new(digit: char, duration: u16, step: u16, volume: u8) -> Option<Self> {
        if step == 0 {
            return None;
        }
        Some(DtmfSender {
            event: char_event(digit)?,
            volume: volume & 0x3F,
            total: duration,
            step,
            sent: 0,
            ends_left: 3,
        })
    }
}

impl Iterator for DtmfSender {
    type Item = DtmfPacket;

    fn next(&mut self) -> Option<DtmfPacket> {
        let marker = self.sent == 0;
        let next = self.sent.saturating_add(self.step);
        let (duration, end) = if next < self.total || marker {
            self.sent = next.min(self.total).max(1);
            (self.sent, false)
        } else if self.ends_left > 0 {
            self.ends_left -= 1;
            (self.total, true)
        } else {
            return None;
        };
        Some(DtmfPacket {
            marker,
            event: TelephoneEvent {
                event: self.event,
                end,
                volume: self.volume,
                duration,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: u8, end: bool, duration: u16) -> TelephoneEvent {
        TelephoneEvent {
            event,
            end,
            volume: 10,
            duration,
        }
    }

    fn detect(d: &mut DtmfDetector, ts: u32, e: TelephoneEvent) -> Vec<Digit> {
        let mut out = vec![];
        d.on_event(ts, &e, |x| out.push(x));
        out
    }

    #[test]
    fn payload_round_trip_and_truncation() {
        let e = ev(11, true, 1600);
        let mut buf = [0u8; 4];
        assert_eq!(e.write(&mut buf), Ok(4));
        assert_eq!(buf, [11, 0x8A, 0x06, 0x40]);
        assert_eq!(TelephoneEvent::parse(&buf), Ok(e));
        assert_eq!(TelephoneEvent::parse(&buf[..3]), Err(Error::Truncated));
        assert_eq!(e.write(&mut buf[..2]), Err(Error::BufferTooSmall));
    }

    #[test]
    fn chars_map_both_ways() {
        for (c, e) in [
            ('0', 0),
            ('9', 9),
            ('*', 10),
            ('#', 11),
            ('A', 12),
            ('d', 15),
            ('!', 16),
        ] {
            assert_eq!(char_event(c), Some(e));
        }
        assert_eq!(event_char(17), None);
        assert_eq!(char_event('x'), None);
    }

    #[test]
    fn each_digit_reported_once() {
        let mut d = DtmfDetector::default();
        assert!(detect(&mut d, 1000, ev(5, false, 160)).is_empty());
        assert!(detect(&mut d, 1000, ev(5, false, 160)).is_empty()); // retransmitted start
        assert!(detect(&mut d, 1000, ev(5, false, 320)).is_empty());
        assert_eq!(
            detect(&mut d, 1000, ev(5, true, 800)),
            vec![Digit {
                digit: '5',
                duration: 800
            }]
        );
        assert!(detect(&mut d, 1000, ev(5, true, 800)).is_empty());
        assert!(detect(&mut d, 1000, ev(5, true, 800)).is_empty());
        // Same digit again is a new event with a new timestamp.
        assert_eq!(
            detect(&mut d, 3000, ev(5, true, 480)),
            vec![Digit {
                digit: '5',
                duration: 480
            }]
        );
    }

    #[test]
    fn lost_end_packets_are_recovered() {
        let mut d = DtmfDetector::default();
        detect(&mut d, 1000, ev(1, false, 320));
        // Next event reveals the first one is over.
        assert_eq!(
            detect(&mut d, 5000, ev(2, true, 400)),
            vec![
                Digit {
                    digit: '1',
                    duration: 320
                },
                Digit {
                    digit: '2',
                    duration: 400
                }
            ]
        );
        detect(&mut d, 9000, ev(3, false, 160));
        let mut out = vec![];
        d.on_audio(9000 + 160 + 100, |x| out.push(x));
        assert!(
            out.is_empty(),
            "audio overlapping the event must not end it"
        );
        d.on_audio(9000 + 160 + 900, |x| out.push(x));
        assert_eq!(
            out,
            vec![Digit {
                digit: '3',
                duration: 160
            }]
        );
    }

    #[test]
    fn sender_sequence() {
        let pkts: Vec<_> = DtmfSender::new('#', 800, 160, 10).unwrap().collect();
        let durations: Vec<_> = pkts
            .iter()
            .map(|p| (p.event.duration, p.event.end, p.marker))
            .collect();
        assert_eq!(
            durations,
            vec![
                (160, false, true),
                (320, false, false),
                (480, false, false),
                (640, false, false),
                (800, true, false),
                (800, true, false),
                (800, true, false)
            ]
        );
        assert!(pkts.iter().all(|p| p.event.event == 11));
        // A short digit still gets a start packet before its ends.
        let short: Vec<_> = DtmfSender::new('1', 100, 160, 10).unwrap().collect();
        assert_eq!(short.len(), 4);
        assert!(short[0].marker && !short[0].event.end && short[0].event.duration == 100);
        // The sender's packets feed the detector to exactly one digit.
        let mut d = DtmfDetector::default();
        let found: Vec<_> = pkts
            .iter()
            .flat_map(|p| detect(&mut d, 42, p.event))
            .collect();
        assert_eq!(
            found,
            vec![Digit {
                digit: '#',
                duration: 800
            }]
        );
        assert!(DtmfSender::new('x', 800, 160, 10).is_none());
    }
}
