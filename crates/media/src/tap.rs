//! Recording a whole call in the background: the tap on a leg that copies what the leg
//! receives (the caller) and what it sends (the callee, music, prompts) as 8 kHz PCM into
//! blocks for a writer thread ([`CallRecording`]).
//!
//! The media path only decodes and copies: blocks go through a bounded channel, and a full one
//! (a slow or full disk) drops the block and marks the recording incomplete rather than wait.
//! Output follows the clock, not the packets: every 20 ms of call time is one frame of both
//! directions (silence where nothing came), so the file's duration is the time recorded.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use codec::{Decoder, Format, Resampler, G711};

/// Samples in one 20 ms frame at 8 kHz.
const FRAME: usize = 160;
const FRAME_TIME: Duration = Duration::from_millis(20);
/// Frames in a block handed to the writer (100 ms): fewer, larger messages.
const BLOCK_FRAMES: usize = 5;
/// Blocks a recording may have waiting for its writer (2 s) before it drops audio.
pub const QUEUE_BLOCKS: usize = 20;
/// Frames of jitter absorbed (200 ms; a recording can wait): a frame is cut this long after
/// its time.
const LAG_FRAMES: u64 = 10;
/// A direction holding more than this (one side sending faster than the clock) loses the oldest.
/// (Jitter leaves a direction more frames behind at each gap, until this cap: 500 ms.)
const MAX_QUEUED: usize = 25 * FRAME;
/// Linear samples in the largest packet any decoder produces (120 ms at 48 kHz).
const MAX_DECODED: usize = 5760;

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
    mix: Mix,
    received: Direction,
    sent: Direction,
    start: Instant,
    /// Frames cut so far.
    frames: u64,
    block: Vec<i16>,
    tx: SyncSender<Vec<i16>>,
    status: Arc<RecordingStatus>,
}

impl Tap {
    /// A tap on a leg in `format`, and the writer's end of its recording.
    pub(crate) fn new(format: Format, mix: Mix, now: Instant) -> (Tap, CallRecording) {
        let (tx, blocks) = sync_channel(QUEUE_BLOCKS);
        let status = Arc::new(RecordingStatus::default());
        let tap = Tap {
            mix,
            received: Direction::new(format),
            sent: Direction::new(format),
            start: now,
            frames: 0,
            block: Tap::empty_block(mix),
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

    fn empty_block(mix: Mix) -> Vec<i16> {
        Vec::with_capacity(BLOCK_FRAMES * FRAME * usize::from(mix.channels()))
    }

    /// The leg's codec changed (re-INVITE): decode what follows with the new one.
    pub(crate) fn set_format(&mut self, format: Format) {
        self.received.set_format(format);
        self.sent.set_format(format);
    }

    /// An audio payload arrived on the leg (in its format).
    pub(crate) fn received(&mut self, payload: &[u8], now: Instant) {
        self.advance(now);
        self.received.push(payload);
    }

    /// An audio payload left on the leg.
    pub(crate) fn sent(&mut self, payload: &[u8], now: Instant) {
        self.advance(now);
        self.sent.push(payload);
    }

    /// Cuts every frame due by `now`.
    pub(crate) fn advance(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.start);
        let due = elapsed.as_secs() * 50 + u64::from(elapsed.subsec_nanos()) / 20_000_000;
        while self.frames + LAG_FRAMES < due {
            self.cut();
        }
    }

    /// Ends the recording at `now`: what is due and what waits, then the last block.
    pub(crate) fn finish(mut self, now: Instant) {
        self.advance(now + FRAME_TIME * LAG_FRAMES as u32);
        if !self.block.is_empty() {
            self.send();
        }
    }

    /// One frame of both directions into the block.
    fn cut(&mut self) {
        let (mut a, mut b) = ([0i16; FRAME], [0i16; FRAME]);
        self.received.take(&mut a);
        self.sent.take(&mut b);
        match self.mix {
            Mix::Mono => self
                .block
                .extend(a.iter().zip(&b).map(|(a, b)| a.saturating_add(*b))),
            Mix::Stereo => {
                for (a, b) in a.iter().zip(&b) {
                    self.block.push(*a);
                    self.block.push(*b);
                }
            }
        }
        self.frames += 1;
        if self.block.len() == self.block.capacity() {
            self.send();
        }
    }

    fn send(&mut self) {
        let block = std::mem::replace(&mut self.block, Tap::empty_block(self.mix));
        let samples = (block.len() / usize::from(self.mix.channels())) as u64;
        match self.tx.try_send(block) {
            Ok(()) => {
                self.status.samples.fetch_add(samples, Ordering::Relaxed);
            }
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.status.mark_incomplete();
            }
        }
    }
}

/// One direction of a tapped leg: its decoder and the 8 kHz samples not yet cut into frames.
struct Direction {
    format: Format,
    law: Option<G711>,
    decoder: Option<Box<dyn Decoder>>,
    /// To 8 kHz from a wideband format's rate.
    down: Option<Resampler>,
    pcm: Vec<i16>,
    pcm8: Vec<i16>,
    queue: VecDeque<i16>,
}

impl Direction {
    fn new(format: Format) -> Direction {
        let mut d = Direction {
            format,
            law: None,
            decoder: None,
            down: None,
            pcm: Vec::new(),
            pcm8: Vec::new(),
            // What a direction may hold and a packet: a ring no larger than it must be stays in cache
            // (a wideband decoder's larger packets grow it once).
            queue: VecDeque::with_capacity(MAX_QUEUED + 2 * FRAME),
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

    fn push(&mut self, payload: &[u8]) {
        if let Some(law) = self.law {
            self.queue
                .extend(payload.iter().map(|&c| law.decode_sample(c)));
        } else if let Some(dec) = &mut self.decoder {
            // A payload that does not decode is left out, like a lost packet.
            let Ok(n) = dec.decode(payload, &mut self.pcm) else {
                return;
            };
            match &mut self.down {
                Some(r) => {
                    let m = r.process(&self.pcm[..n], &mut self.pcm8);
                    self.queue.extend(&self.pcm8[..m]);
                }
                None => self.queue.extend(&self.pcm[..n]),
            }
        }
        if self.queue.len() > MAX_QUEUED {
            let excess = self.queue.len() - MAX_QUEUED;
            self.queue.drain(..excess);
        }
    }

    /// Moves the next frame's samples into `out` (silence, as it is, where none came).
    fn take(&mut self, out: &mut [i16; FRAME]) {
        let n = self.queue.len().min(FRAME);
        let (front, back) = self.queue.as_slices();
        let k = front.len().min(n);
        out[..k].copy_from_slice(&front[..k]);
        out[k..n].copy_from_slice(&back[..n - k]);
        self.queue.drain(..n);
    }
}

#[cfg(test)]
mod tests;
