//! Frame legs: legs whose transport carries encoded audio frames and digits itself (IAX2), not
//! RTP. What arrives is handed over with [`crate::Engine::on_frame`] as a [`Frame`], and what the
//! engine sends such a leg comes out as a [`FrameOut`] through [`Output::frame`], with no RTP
//! header to write or to parse. Inside the engine a frame leg is an ordinary leg (prompts, tones,
//! echo, bridges, translation, recording): only where its packets enter and leave differs.
//!
//! Timestamps of frames count milliseconds. Sequence numbers, losses and RTCP do not apply to
//! frame legs; interarrival jitter is measured from the frames' timestamps.

use std::time::{Duration, Instant};

use rtp::stats::ReceiveStats;

use crate::engine::{LegId, Transmit};

/// The shortest digit reported or sent: a press whose begin was lost lasts this long.
pub(crate) const MIN_DIGIT: Duration = Duration::from_millis(40);

/// What arrives on a frame leg.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// Encoded audio in the leg's format, stamped `ts` milliseconds on the sender's clock.
    Voice { ts: u32, payload: &'a [u8] },
    /// A key went down (`end` false) or came up (`end` true).
    Digit { digit: char, end: bool },
}

/// What the engine sends on a frame leg, for the shell to send in the leg's own transport.
/// `payload` borrows the engine's buffer: send (or copy) it before returning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameOut<'a> {
    /// Encoded audio in the leg's format. `ts` counts milliseconds on the leg's outgoing clock
    /// (wrapping): frames are spaced by their timestamps, whenever a pass sent them.
    Voice {
        leg: LegId,
        ts: u32,
        payload: &'a [u8],
    },
    /// A digit begins (`end` false) or ends (`end` true).
    Digit { leg: LegId, digit: char, end: bool },
}

/// Where the engine's output goes: datagrams for the shell's RTP/RTCP sockets, and frames for
/// frame legs. A closure taking [`Transmit`] is an `Output` that drops frames: enough for a
/// shell without frame legs.
pub trait Output {
    fn transmit(&mut self, t: Transmit<'_>);
    fn frame(&mut self, f: FrameOut<'_>);
}

impl<F: FnMut(Transmit<'_>) + ?Sized> Output for F {
    #[inline]
    fn transmit(&mut self, t: Transmit<'_>) {
        self(t)
    }

    fn frame(&mut self, _: FrameOut<'_>) {}
}

/// A digit arriving on a frame leg.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DigitIn {
    pub(crate) digit: char,
    pub(crate) since: Instant,
    /// Where the digit starts on the bridged RTP leg's stream (its RFC 4733 timestamp).
    pub(crate) peer_ts: u32,
}

/// What a frame leg keeps beside an RTP leg's state.
#[derive(Debug, Default)]
pub(crate) struct FrameState {
    /// Interarrival jitter of voice frames (made at the first, on the leg's clock).
    pub(crate) jitter: Option<ReceiveStats>,
    pub(crate) digit_in: Option<DigitIn>,
    /// The RFC 4733 event relayed out as digits: its timestamp and whether its end went out.
    pub(crate) digit_out: Option<(u32, bool)>,
    /// The last voice frame sent: its timestamp in clock units and in ms.
    clock_out: Option<(u32, u32)>,
}

impl FrameState {
    /// The leg's format changed: its clock did.
    pub(crate) fn reclock(&mut self) {
        self.jitter = None;
        self.clock_out = None;
    }

    /// The ms timestamp of an outgoing frame stamped `units` on the leg's stream: counted from
    /// the previous frame, so the clock units may wrap while the ms carry on.
    pub(crate) fn out_ms(&mut self, units: u32, per_ms: u32) -> u32 {
        let per_ms = per_ms.max(1) as i32;
        let (u0, m0) = *self.clock_out.get_or_insert((units, 0));
        let ms = units.wrapping_sub(u0) as i32 / per_ms;
        let out = (
            u0.wrapping_add((ms * per_ms) as u32),
            m0.wrapping_add(ms as u32),
        );
        self.clock_out = Some(out);
        out.1
    }
}
