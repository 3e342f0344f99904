//! Recording a whole call in the background: the tap on a leg that copies what the leg
//! receives (the caller) and what it sends (the callee, music, prompts) as 8 kHz PCM into
//! blocks for a writer thread ([`CallRecording`]).
//!
//! The media path only decodes: each direction's audio is decoded straight into a ring that
//! holds the recording by time (both directions added in place when mono, interleaved when
//! stereo), and every half second the ring's oldest part goes to the writer as one block
//! through a bounded channel. A full channel (a slow or full disk) drops the block and marks
//! the recording incomplete rather than wait. Output follows the clock, not the packets: every
//! 20 ms of call time is one frame of both directions (silence where nothing came), so the
//! file's duration is the time recorded.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use codec::{Decoder, Format, Resampler, G711};

/// Samples in one 20 ms frame at 8 kHz.
const FRAME: usize = 160;
const FRAME_TIME: Duration = Duration::from_millis(20);
/// Frames in a block handed to the writer (500 ms): few, large messages and writes.
const BLOCK_FRAMES: usize = 25;
/// Samples per channel in a block.
const BLOCK: usize = BLOCK_FRAMES * FRAME;
/// Blocks a recording may have waiting for its writer (2 s) before it drops audio.
pub const QUEUE_BLOCKS: usize = 4;
/// Frames of jitter absorbed (200 ms; a recording can wait): a frame is cut this long after
/// its time.
const LAG_FRAMES: u64 = 10;
/// How far a direction may run ahead of the cut (one side sending faster than the clock):
/// 500 ms, beyond which its audio is dropped. (Jitter leaves a direction further ahead at each
/// gap, until this cap.)
const MAX_AHEAD: usize = 25 * FRAME;
/// Samples per channel in the ring: the block being filled and what may run ahead of it.
const RING: usize = (BLOCK + MAX_AHEAD).next_power_of_two();
/// Linear samples in the largest packet any decoder produces (120 ms at 48 kHz).
const MAX_DECODED: usize = 5760;
/// G.711 codes decoded at a time on their way into the ring: two frames.
const LAW_PIECE: usize = 2 * FRAME;

/// How the two directions go into the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mix {
    /// Both directions added into one channel (saturating).
    Mono,
    /// The caller (what the leg receives) left, the other side (what it sends) right.
    Stereo,
}

impl Mix {
    pub fn channels(self) -> u16 {
        match self {
            Mix::Mono => 1,
            Mix::Stereo => 2,
        }
    }
}

/// What a recording has come to, shared by the tap, its writer and the call (for the CDR).
#[derive(Debug, Default)]
pub struct RecordingStatus {
    /// Samples per channel handed to the writer.
    samples: AtomicU64,
    incomplete: AtomicBool,
}

impl RecordingStatus {
    /// Audio handed to the writer so far (what a complete file holds).
    pub fn duration(&self) -> Duration {
        Duration::from_micros(self.samples.load(Ordering::Relaxed) * 1_000_000 / 8000)
    }

    /// False once audio was dropped (the writer fell behind) or could not be written.
    pub fn complete(&self) -> bool {
        !self.incomplete.load(Ordering::Relaxed)
    }

    pub fn mark_incomplete(&self) {
        self.incomplete.store(true, Ordering::Relaxed);
    }
}

/// The writer's end of a recording: blocks of 8 kHz 16-bit PCM (interleaved left, right when
/// stereo) until the channel disconnects, which is the end of the recording.
pub struct CallRecording {
    pub blocks: Receiver<Vec<i16>>,
    pub mix: Mix,
    pub status: Arc<RecordingStatus>,
}

impl std::fmt::Debug for CallRecording {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallRecording")
            .field("mix", &self.mix)
            .field("status", &self.status)
            .finish()
    }
}

/// The tap on a recorded leg (`Leg::tap`).
pub(crate) struct Tap {
    received: Direction,
    sent: Direction,
    start: Instant,
    /// Frames cut so far: the audio before sample `frames * FRAME` is final.
    frames: u64,
    /// Samples per channel handed to the writer (or dropped), a whole number of blocks.
    handed: u64,
    ring: Ring,
    tx: SyncSender<Vec<i16>>,
    status: Arc<RecordingStatus>,
}

impl Tap {
    /// A tap on a leg in `format`, and the writer's end of its recording.
    pub(crate) fn new(format: Format, mix: Mix, now: Instant) -> (Tap, CallRecording) {
        let (tx, blocks) = sync_channel(QUEUE_BLOCKS);
        let status = Arc::new(RecordingStatus::default());
        let tap = Tap {
            received: Direction::new(format, 0),
            sent: Direction::new(format, 1),
            start: now,
            frames: 0,
            handed: 0,
            ring: Ring::new(mix),
            tx,
            status: status.clone(),
        };
        (
            tap,
            CallRecording {
                blocks,
                mix,
                status,
            },
        )
    }

    /// The leg's codec changed (re-INVITE): decode what follows with the new one.
    pub(crate) fn set_format(&mut self, format: Format) {
        self.received.set_format(format);
        self.sent.set_format(format);
    }

    /// An audio payload arrived on the leg (in its format). It goes where its direction is,
    /// from the cut of the last [`Tap::advance`] on: the media pass advances every tap once per
    /// frame interval, which the lag absorbs, so a packet costs no clock reading.
    pub(crate) fn received(&mut self, payload: &[u8]) {
        let cut = self.cut();
        self.received.push(payload, &mut self.ring, cut);
    }

    /// An audio payload left on the leg.
    pub(crate) fn sent(&mut self, payload: &[u8]) {
        let cut = self.cut();
        self.sent.push(payload, &mut self.ring, cut);
    }

    /// A packet left on the leg whose audio the caller has as 8 kHz linear samples (a µ-law
    /// prompt's own): copied rather than decoded again.
    pub(crate) fn sent_linear(&mut self, pcm: &[i16]) {
        let cut = self.cut();
        self.sent.place(pcm, &mut self.ring, cut);
    }

    /// Cuts every frame due by `now`, handing each block on as it fills.
    pub(crate) fn advance(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.start);
        let due = elapsed.as_secs() * 50 + u64::from(elapsed.subsec_nanos()) / 20_000_000;
        while self.frames + LAG_FRAMES < due {
            self.frames += 1;
            if self.cut() - self.handed == BLOCK as u64 {
                self.hand(BLOCK);
            }
        }
    }

    /// Ends the recording at `now`: what is due and what waits, then the last block.
    pub(crate) fn finish(mut self, now: Instant) {
        self.advance(now + FRAME_TIME * LAG_FRAMES as u32);
        let rest = (self.cut() - self.handed) as usize;
        if rest > 0 {
            self.hand(rest);
        }
    }

    /// Samples per channel cut so far.
    fn cut(&self) -> u64 {
        self.frames * FRAME as u64
    }

    /// Hands the ring's next `n` samples per channel to the writer as a block.
    fn hand(&mut self, n: usize) {
        let block = self.ring.take(self.handed, n);
        self.handed += n as u64;
        match self.tx.try_send(block) {
            Ok(()) => {
                self.status.samples.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.status.mark_incomplete();
            }
        }
    }
}

/// One direction of a tapped leg: its decoder, its channel, and where its audio goes next.
struct Direction {
    /// Left for what the leg receives, right for what it sends (both add into one when mono).
    channel: usize,
    /// The sample (per channel, from the start) its next audio goes to; behind the cut when
    /// it fell silent, and then it resumes at the cut.
    at: u64,
    format: Format,
    law: Option<G711>,
    decoder: Option<Box<dyn Decoder>>,
    /// To 8 kHz from a wideband format's rate.
    down: Option<Resampler>,
    pcm: Vec<i16>,
    pcm8: Vec<i16>,
    /// A G.711 payload's piece decoded, kept so no packet clears a buffer on the stack.
    law_pcm: Box<[i16; LAW_PIECE]>,
}

impl Direction {
    fn new(format: Format, channel: usize) -> Direction {
        let mut d = Direction {
            channel,
            at: 0,
            format,
            law: None,
            decoder: None,
            down: None,
            pcm: Vec::new(),
            pcm8: Vec::new(),
            law_pcm: Box::new([0; LAW_PIECE]),
        };
        d.set_format(format);
        d
    }

    fn set_format(&mut self, format: Format) {
        if self.format == format && (self.law.is_some() || self.decoder.is_some()) {
            return;
        }
        self.format = format;
        self.law = match format {
            Format::Pcmu => Some(G711::Pcmu),
            Format::Pcma => Some(G711::Pcma),
            _ => None,
        };
        self.decoder = self.law.is_none().then(|| format.decoder());
        self.down = (format.pcm_rate() != 8000).then(|| Resampler::new(format.pcm_rate(), 8000));
        if self.decoder.is_some() {
            self.pcm.resize(MAX_DECODED, 0);
            self.pcm8.resize(MAX_DECODED, 0);
        }
    }

    /// Decodes `payload` into the ring from where this direction is (the cut, if that is
    /// later), as far as it may run ahead of the cut.
    fn push(&mut self, payload: &[u8], ring: &mut Ring, cut: u64) {
        let Direction {
            channel,
            at,
            law,
            decoder,
            down,
            pcm,
            pcm8,
            law_pcm,
            ..
        } = self;
        let mut place = |pcm: &[i16]| place(at, *channel, pcm, ring, cut);
        if let Some(law) = law {
            // Decoded a piece at a time, then copied or added as whole slices.
            for piece in payload.chunks(LAW_PIECE) {
                let n = law.decode_into(piece, &mut law_pcm[..]);
                place(&law_pcm[..n]);
            }
        } else if let Some(dec) = decoder {
            // A payload that does not decode is left out, like a lost packet.
            let Ok(n) = dec.decode(payload, pcm) else {
                return;
            };
            match down {
                Some(r) => {
                    let m = r.process(&pcm[..n], pcm8);
                    place(&pcm8[..m]);
                }
                None => place(&pcm[..n]),
            }
        }
    }

    /// Puts 8 kHz linear audio into the ring as [`Direction::push`] does.
    fn place(&mut self, pcm: &[i16], ring: &mut Ring, cut: u64) {
        place(&mut self.at, self.channel, pcm, ring, cut);
    }
}

/// Puts `pcm` into `channel` of the ring from sample `at` (the cut, if that is later), as far
/// as it may run ahead of the cut, and moves `at` past it.
fn place(at: &mut u64, channel: usize, pcm: &[i16], ring: &mut Ring, cut: u64) {
    let from = (*at).max(cut);
    let room = (cut + MAX_AHEAD as u64).saturating_sub(from) as usize;
    let n = pcm.len().min(room);
    ring.put(channel, from, &pcm[..n]);
    *at = from + n as u64;
}

/// The recording by time, `RING` samples per channel a lap: sample `t` (per channel) at
/// `t % RING`, times the channels. Up to `filled` it holds what both directions wrote (zero
/// where neither did); past it, the last lap's audio, which a write overwrites rather than
/// adds to — so the first direction to reach a slot only stores, and no slot is cleared ahead.
struct Ring {
    mix: Mix,
    samples: Box<[i16]>,
    filled: u64,
}

impl Ring {
    fn new(mix: Mix) -> Ring {
        Ring {
            mix,
            samples: vec![0; RING * usize::from(mix.channels())].into(),
            filled: 0,
        }
    }

    /// Writes `src` from sample `at` on: added to what the other direction put there when mono
    /// (saturating), into `channel` when stereo.
    fn put(&mut self, channel: usize, at: u64, src: &[i16]) {
        if at > self.filled {
            self.clear(self.filled, at);
        }
        let written = ((self.filled - at) as usize).min(src.len());
        let end = at + src.len() as u64;
        // Over what the other direction wrote: added (mono) or beside it (stereo).
        let (over, fresh) = src.split_at(written);
        for (slot, src) in pieces(at, over) {
            match self.mix {
                Mix::Mono => {
                    for (r, &s) in self.samples[slot..slot + src.len()].iter_mut().zip(src) {
                        *r = r.saturating_add(s);
                    }
                }
                Mix::Stereo => {
                    let pairs = self.samples[slot * 2..(slot + src.len()) * 2].chunks_exact_mut(2);
                    for (r, &s) in pairs.zip(src) {
                        r[channel] = s;
                    }
                }
            }
        }
        // Past it: stored over the last lap.
        for (slot, src) in pieces(at + written as u64, fresh) {
            match self.mix {
                Mix::Mono => self.samples[slot..slot + src.len()].copy_from_slice(src),
                Mix::Stereo => {
                    let pairs = self.samples[slot * 2..(slot + src.len()) * 2].chunks_exact_mut(2);
                    for (r, &s) in pairs.zip(src) {
                        r[channel] = s;
                        r[1 - channel] = 0;
                    }
                }
            }
        }
        self.filled = self.filled.max(end);
    }

    /// Silence from sample `from` to `to`, which is then filled.
    fn clear(&mut self, from: u64, to: u64) {
        let ch = usize::from(self.mix.channels());
        for (slot, len) in spans(from, (to - from) as usize) {
            self.samples[slot * ch..(slot + len) * ch].fill(0);
        }
        self.filled = to;
    }

    /// A copy of `n` samples per channel from sample `from` on (silence where nothing came).
    fn take(&mut self, from: u64, n: usize) -> Vec<i16> {
        let to = from + n as u64;
        if to > self.filled {
            self.clear(self.filled.max(from), to);
        }
        let ch = usize::from(self.mix.channels());
        let mut block = Vec::with_capacity(n * ch);
        for (slot, len) in spans(from, n) {
            block.extend_from_slice(&self.samples[slot * ch..(slot + len) * ch]);
        }
        block
    }
}

/// The ring's slots of `len` samples from sample `at` on: where each of (at most) two pieces
/// starts and how long it is.
fn spans(at: u64, len: usize) -> [(usize, usize); 2] {
    let start = (at % RING as u64) as usize;
    let head = len.min(RING - start);
    [(start, head), (0, len - head)]
}

/// `src` cut where [`spans`] cuts it, each piece with its slot; empty pieces left out (no
/// copy is called for nothing).
fn pieces<T>(at: u64, src: &[T]) -> impl Iterator<Item = (usize, &[T])> {
    let [(start, head), (_, _)] = spans(at, src.len());
    let (head, tail) = src.split_at(head);
    [(start, head), (0, tail)]
        .into_iter()
        .filter(|(_, piece)| !piece.is_empty())
}

#[cfg(test)]
mod tests;
