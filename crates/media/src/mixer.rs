//! Conference rooms: every member's voice decoded to linear PCM at the room's rate, and every
//! member sent the sum of the others' — the total minus its own — in its own format. A room
//! mixes on its own 20 ms clock from the engine's ticks; an arriving packet is only decoded
//! into its member's queue, so calls outside rooms pay nothing for them.
//!
//! A room mixes at its widest member's rate, up to the room's own: a room whose members all
//! speak G.711 mixes at 8 kHz and resamples nothing, one with a G.722 member at 16 kHz.
//!
//! In a large room only the loudest few members are mixed (as large conference servers do):
//! the rest add their line noise and nothing else. A member is talking while its level stays
//! above a threshold, with a hang time so that pauses between words do not flap.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use codec::{Decoder, Format, Resampler};

use crate::engine::{LegId, MediaEvent};
use crate::tone::ToneGen;
use crate::ToneSpec;

/// The mixing interval.
const MIX_INTERVAL: Duration = Duration::from_millis(20);
/// Mean square (of 16-bit samples) above which a member talks: an RMS of 330, about -40 dBFS.
const TALK_LEVEL: i64 = 330 * 330;
/// Frames a talker stays talking below the level (400 ms).
const HANG_FRAMES: u16 = 20;
/// Frames a member's queue fills before it is read, at first and after it ran dry, so that
/// arrival jitter up to a frame costs no gaps.
const PRIME_FRAMES: usize = 2;
/// A queue longer than this drops its oldest audio, bounding the delay a burst adds.
const MAX_FRAMES: usize = 5;
/// A tick this many frames behind skips ahead instead of mixing a burst.
const MAX_CATCH_UP: u32 = 5;
/// Largest decoded packet (120 ms at 48 kHz).
const MAX_DECODED: usize = 5760;
/// The gain of each volume step from -4 to +4 (3 dB a step), in 1/256.
const GAIN_Q8: [i32; 9] = [64, 91, 128, 181, 256, 362, 511, 721, 1019];
/// Volume steps go from `-MAX_STEP` to `MAX_STEP`.
pub const MAX_STEP: i8 = 4;

/// Handle of a room. Indices are reused after [`crate::Engine::remove_room`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RoomId(usize);

/// How a member is heard and what it hears, as the call logic sets it (mute, volume keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SeatLevels {
    /// Nothing the member says reaches the room.
    pub muted: bool,
    /// Volume steps of what the member says (see [`MAX_STEP`]).
    pub talk: i8,
    /// Volume steps of what the member hears.
    pub listen: i8,
}

/// The rooms of one engine.
pub(crate) struct Rooms {
    rooms: Vec<Option<Room>>,
    free: Vec<usize>,
    /// A decoded packet, then the same at the room's rate.
    decoded: Box<[i16]>,
    resampled: Box<[i16]>,
}

impl Default for Rooms {
    fn default() -> Rooms {
        Rooms {
            rooms: Vec::new(),
            free: Vec::new(),
            decoded: vec![0; MAX_DECODED].into(),
            resampled: vec![0; MAX_DECODED + 64].into(),
        }
    }
}

impl Rooms {
    pub(crate) fn is_empty(&self) -> bool {
        self.free.len() == self.rooms.len()
    }

    pub(crate) fn add(&mut self, rate: u32, loudest: usize) -> RoomId {
        let room = Some(Room::new(rate, loudest));
        match self.free.pop() {
            Some(i) => {
                self.rooms[i] = room;
                RoomId(i)
            }
            None => {
                self.rooms.push(room);
                RoomId(self.rooms.len() - 1)
            }
        }
    }

    /// Removes the room; returns its members.
    pub(crate) fn remove(&mut self, id: RoomId) -> Vec<LegId> {
        let Some(room) = self.rooms.get_mut(id.0).and_then(Option::take) else {
            return Vec::new();
        };
        self.free.push(id.0);
        room.seats.iter().map(|s| s.leg).collect()
    }

    pub(crate) fn get_mut(&mut self, id: RoomId) -> Option<&mut Room> {
        self.rooms.get_mut(id.0)?.as_mut()
    }

    /// A packet of `leg`'s voice in its format, into its queue at the room's rate.
    pub(crate) fn hear(&mut self, id: RoomId, leg: LegId, payload: &[u8]) {
        let Some(room) = self.rooms.get_mut(id.0).and_then(Option::as_mut) else {
            return;
        };
        let limit = room.frame * MAX_FRAMES;
        let Some(seat) = room.seat_mut(leg) else {
            return;
        };
        // A packet that does not decode is dropped like a lost one.
        let Ok(n) = seat.decoder.decode(payload, &mut self.decoded) else {
            return;
        };
        let pcm = match &mut seat.inbound {
            Some(r) => {
                let m = r.process(&self.decoded[..n], &mut self.resampled);
                &self.resampled[..m]
            }
            None => &self.decoded[..n],
        };
        seat.queue.extend(pcm);
        if seat.queue.len() > limit {
            let excess = seat.queue.len() - limit;
            seat.queue.drain(..excess);
        }
    }

    /// Mixes every room whose frames are due by `due` (with half a frame of slack), handing
    /// each member's audio to `send` (its leg, what it hears at its format's rate, whether the
    /// mix ran late).
    pub(crate) fn mix_due(
        &mut self,
        due: Instant,
        events: &mut VecDeque<MediaEvent>,
        mut send: impl FnMut(LegId, &mut Vec<i16>, bool),
    ) {
        let horizon = due + MIX_INTERVAL / 2;
        for room in self.rooms.iter_mut().flatten() {
            let mut at = *room.next_mix.get_or_insert(due);
            let mut frames = 0;
            while at <= horizon {
                if frames == MAX_CATCH_UP {
                    let missed = (horizon - at).as_nanos() / MIX_INTERVAL.as_nanos() + 1;
                    at += MIX_INTERVAL * missed as u32;
                    break;
                }
                frames += 1;
                room.mix(events);
                for seat in &mut room.seats {
                    send(seat.leg, &mut seat.heard, frames > 1);
                }
                at += MIX_INTERVAL;
            }
            room.next_mix = Some(at);
        }
    }
}

/// One room: its members' seats and the sum they hear.
pub(crate) struct Room {
    /// The most the room mixes at (its configured rate).
    max_rate: u32,
    /// The rate it mixes at: its widest member's, up to `max_rate`.
    rate: u32,
    /// Samples in a mixing frame.
    frame: usize,
    /// How many of the loudest members are mixed.
    loudest: usize,
    seats: Vec<Seat>,
    /// When the next frame is mixed; `None` until the first tick.
    next_mix: Option<Instant>,
    /// A tone every member hears (joins, leaves) and the samples it has left.
    cue: Option<Cue>,
    total: Vec<i32>,
    /// This frame's mixed members, by seat.
    speakers: Vec<usize>,
    /// One member's audio at the room's rate.
    out: Vec<i16>,
    /// The same at its leg's rate.
    resampled: Vec<i16>,
    /// The plain sum at each rate its listeners take it at.
    common: Vec<Common>,
}

/// A tone played to the whole room: its spec, kept to play it on at another rate.
struct Cue {
    spec: ToneSpec,
    gen: ToneGen,
    left: usize,
}

/// What the members who are not mixed and hear at the normal volume all get — most of a large
/// room — resampled once per rate instead of once per member.
struct Common {
    rate: u32,
    resampler: Option<Resampler>,
    pcm: Vec<i16>,
    len: usize,
    /// `pcm` is this frame's.
    fresh: bool,
}

impl Room {
    fn new(max_rate: u32, loudest: usize) -> Room {
        let mut room = Room {
            max_rate,
            rate: 0,
            frame: 0,
            loudest: loudest.max(1),
            seats: Vec::new(),
            next_mix: None,
            cue: None,
            total: Vec::new(),
            speakers: Vec::with_capacity(loudest + 1),
            out: Vec::new(),
            resampled: Vec::new(),
            common: Vec::new(),
        };
        room.retune();
        room
    }

    /// Seats `leg`, speaking `format` (again, with fresh codecs, if it was seated).
    pub(crate) fn join(&mut self, leg: LegId, format: Format) {
        let seat = Seat::new(leg, format, self.rate);
        match self.seat_mut(leg) {
            Some(s) => {
                *s = Seat {
                    levels: s.levels,
                    ..seat
                }
            }
            None => self.seats.push(seat),
        }
        self.retune();
    }

    pub(crate) fn leave(&mut self, leg: LegId) {
        self.seats.retain(|s| s.leg != leg);
        self.retune();
    }

    /// Mixes at the widest member's rate (up to the room's): when that changes, every seat
    /// gets resamplers for the new rate and primes again, and a cue plays on at it.
    fn retune(&mut self) {
        let widest = self.seats.iter().map(|s| s.rate).max().unwrap_or(8000);
        let rate = widest.min(self.max_rate);
        if rate == self.rate {
            return;
        }
        let old = std::mem::replace(&mut self.rate, rate);
        self.frame = rate as usize / 50;
        self.total = vec![0; self.frame];
        self.out = vec![0; self.frame];
        self.resampled = vec![0; self.frame * 6 + 64];
        self.common.clear();
        for seat in &mut self.seats {
            seat.tune(rate);
        }
        if let Some(c) = &mut self.cue {
            c.gen = ToneGen::new(&c.spec, rate);
            c.left = (c.left as u64 * u64::from(rate) / u64::from(old.max(1))) as usize;
        }
    }

    pub(crate) fn set_levels(&mut self, leg: LegId, levels: SeatLevels) {
        if let Some(s) = self.seat_mut(leg) {
            s.levels = levels;
        }
    }

    /// Plays `tone` to every member for `duration`, over the voices.
    pub(crate) fn cue(&mut self, tone: &ToneSpec, duration: Duration) {
        let samples = (duration.as_millis() as u64 * u64::from(self.rate) / 1000) as usize;
        self.cue = Some(Cue {
            spec: tone.clone(),
            gen: ToneGen::new(tone, self.rate),
            left: samples,
        });
    }

    fn seat_mut(&mut self, leg: LegId) -> Option<&mut Seat> {
        self.seats.iter_mut().find(|s| s.leg == leg)
    }

    /// One frame: each member's voice taken from its queue, the loudest summed, and each
    /// member's share — the sum less its own voice, at its listening volume — appended to what
    /// it hears. The sum stays in 32 bits until each share is clamped, so two loud members
    /// still hear each other undistorted however far the total overflows 16 bits.
    pub(crate) fn mix(&mut self, events: &mut VecDeque<MediaEvent>) {
        let frame = self.frame;
        for seat in &mut self.seats {
            seat.take_frame(frame, events);
        }
        self.choose_speakers();
        self.total.fill(0);
        for &i in &self.speakers {
            for (t, &s) in self.total.iter_mut().zip(&self.seats[i].said) {
                *t += i32::from(s);
            }
        }
        if let Some(Cue { gen, left, .. }) = &mut self.cue {
            let n = (*left).min(frame);
            gen.fill(&mut self.out[..n]);
            for (t, &s) in self.total.iter_mut().zip(&self.out[..n]) {
                *t += i32::from(s);
            }
            *left -= n;
            if *left == 0 {
                self.cue = None;
            }
        }
        self.common.iter_mut().for_each(|c| c.fresh = false);
        for (i, seat) in self.seats.iter_mut().enumerate() {
            let speaking = self.speakers.contains(&i);
            if !speaking && seat.levels.listen == 0 {
                let (rate, total) = (self.rate, &self.total[..]);
                let pcm = common(&mut self.common, seat.rate, rate, total, &mut self.out);
                seat.heard.extend_from_slice(pcm);
                continue;
            }
            let own = speaking.then_some(&seat.said[..]);
            share(&self.total, own, seat.levels.listen, &mut self.out);
            match &mut seat.outbound {
                Some(r) => {
                    let n = r.process(&self.out, &mut self.resampled);
                    seat.heard.extend_from_slice(&self.resampled[..n]);
                }
                None => seat.heard.extend_from_slice(&self.out),
            }
        }
    }

    /// The members mixed this frame: those heard at all, the loudest `loudest` of them.
    fn choose_speakers(&mut self) {
        self.speakers.clear();
        for (i, seat) in self.seats.iter().enumerate() {
            if seat.energy == 0 {
                continue;
            }
            let at = self
                .speakers
                .iter()
                .position(|&j| self.seats[j].energy < seat.energy)
                .unwrap_or(self.speakers.len());
            if at < self.loudest {
                self.speakers.insert(at, i);
                self.speakers.truncate(self.loudest);
            }
        }
    }
}

/// This frame's plain sum at `rate` (made by the frame's first listener at that rate; `scratch`
/// holds a frame at the `room`'s rate).
fn common<'a>(
    commons: &'a mut Vec<Common>,
    rate: u32,
    room: u32,
    total: &[i32],
    scratch: &mut [i16],
) -> &'a [i16] {
    let at = match commons.iter().position(|c| c.rate == rate) {
        Some(at) => at,
        None => {
            commons.push(Common {
                rate,
                resampler: (rate != room).then(|| Resampler::new(room, rate)),
                pcm: vec![0; scratch.len() * 6 + 64],
                len: 0,
                fresh: false,
            });
            commons.len() - 1
        }
    };
    let c = &mut commons[at];
    if !c.fresh {
        c.fresh = true;
        share(total, None, 0, scratch);
        c.len = match &mut c.resampler {
            Some(r) => r.process(scratch, &mut c.pcm),
            None => {
                c.pcm[..scratch.len()].copy_from_slice(scratch);
                scratch.len()
            }
        };
    }
    &c.pcm[..c.len]
}

/// What one member hears: `total` less its `own` voice (if it was mixed), at `listen` steps,
/// clamped to 16 bits.
fn share(total: &[i32], own: Option<&[i16]>, listen: i8, out: &mut [i16]) {
    let gain = GAIN_Q8[(listen.clamp(-MAX_STEP, MAX_STEP) + MAX_STEP) as usize];
    let clamp = |v: i32| v.clamp(i16::MIN.into(), i16::MAX.into()) as i16;
    match (own, gain) {
        (None, 256) => {
            for (o, &t) in out.iter_mut().zip(total) {
                *o = clamp(t);
            }
        }
        (None, g) => {
            for (o, &t) in out.iter_mut().zip(total) {
                *o = clamp(((i64::from(t) * i64::from(g)) >> 8) as i32);
            }
        }
        (Some(own), g) => {
            for ((o, &t), &s) in out.iter_mut().zip(total).zip(own) {
                let v = t - i32::from(s);
                *o = clamp(((i64::from(v) * i64::from(g)) >> 8) as i32);
            }
        }
    }
}

/// A member: its codecs, its queue of voice, and what it hears.
struct Seat {
    leg: LegId,
    /// Its format's rate.
    rate: u32,
    levels: SeatLevels,
    decoder: Box<dyn Decoder>,
    /// From the leg's rate to the room's, and back, where they differ.
    inbound: Option<Resampler>,
    outbound: Option<Resampler>,
    /// Voice at the room's rate, waiting to be mixed.
    queue: Vec<i16>,
    /// The queue is filling before it is read.
    priming: bool,
    /// This frame's voice at the talking volume; silence when muted.
    said: Vec<i16>,
    /// Mean square of `said`; 0 when nothing was said.
    energy: i64,
    talking: bool,
    /// Frames below the talking level so far.
    quiet: u16,
    /// Audio at the leg's rate waiting to fill its next packet.
    heard: Vec<i16>,
}

impl Seat {
    fn new(leg: LegId, format: Format, rate: u32) -> Seat {
        let own = format.pcm_rate();
        let mut seat = Seat {
            leg,
            rate: own,
            levels: SeatLevels::default(),
            decoder: format.decoder(),
            inbound: None,
            outbound: None,
            queue: Vec::new(),
            priming: true,
            said: Vec::new(),
            energy: 0,
            talking: false,
            quiet: 0,
            heard: Vec::with_capacity(own as usize / 10),
        };
        seat.tune(rate);
        seat
    }

    /// Sets the seat up for a room mixing at `rate`: resamplers where the rates differ, and
    /// an empty queue to prime again.
    fn tune(&mut self, rate: u32) {
        let (own, frame) = (self.rate, rate as usize / 50);
        self.inbound = (own != rate).then(|| Resampler::new(own, rate));
        self.outbound = (own != rate).then(|| Resampler::new(rate, own));
        self.queue = Vec::with_capacity(frame * (MAX_FRAMES + 1));
        self.priming = true;
        self.said = vec![0; frame];
    }

    /// Takes this frame's voice from the queue (silence while it fills) and tracks talking.
    fn take_frame(&mut self, frame: usize, events: &mut VecDeque<MediaEvent>) {
        self.priming = match self.priming {
            true => self.queue.len() < frame * PRIME_FRAMES,
            false => self.queue.len() < frame,
        };
        if self.priming || self.levels.muted {
            if !self.priming {
                self.queue.drain(..frame);
            }
            self.said.fill(0);
            self.energy = 0;
        } else {
            let gain = GAIN_Q8[(self.levels.talk.clamp(-MAX_STEP, MAX_STEP) + MAX_STEP) as usize];
            let mut sum = 0i64;
            for (o, &s) in self.said.iter_mut().zip(&self.queue[..frame]) {
                let v = ((i32::from(s) * gain) >> 8).clamp(i16::MIN.into(), i16::MAX.into());
                *o = v as i16;
                sum += i64::from(v) * i64::from(v);
            }
            self.queue.drain(..frame);
            self.energy = sum / frame as i64;
        }
        let talking = if self.energy >= TALK_LEVEL {
            self.quiet = 0;
            true
        } else {
            self.quiet = self.quiet.saturating_add(1);
            self.talking && self.quiet < HANG_FRAMES
        };
        if talking != self.talking {
            self.talking = talking;
            events.push_back(MediaEvent::Talking {
                leg: self.leg,
                talking,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use codec::{Encoder, G711};

    fn leg(i: usize) -> LegId {
        LegId::from_index(i)
    }

    /// A room of `n` linear 8 kHz members, whose queues are primed with constant voices.
    fn room(loudest: usize, voices: &[i16]) -> Room {
        let mut r = Room::new(8000, loudest);
        for (i, &v) in voices.iter().enumerate() {
            r.join(leg(i), Format::L16);
            r.seats[i].queue = vec![v; 160 * PRIME_FRAMES];
        }
        r
    }

    /// What each member heard of the last frame (first sample).
    fn heard(r: &mut Room) -> Vec<i16> {
        let v = r.seats.iter().map(|s| s.heard[s.heard.len() - 1]).collect();
        r.seats.iter_mut().for_each(|s| s.heard.clear());
        v
    }

    /// Goertzel amplitude of `freq` in `x` sampled at `rate`.
    fn amplitude_at(x: &[i16], freq: f64, rate: u32) -> f64 {
        let w = 2.0 * std::f64::consts::PI * freq / f64::from(rate);
        let (mut s1, mut s2) = (0.0, 0.0);
        for &v in x {
            let s = f64::from(v) + 2.0 * w.cos() * s1 - s2;
            s2 = s1;
            s1 = s;
        }
        (s1 * s1 + s2 * s2 - 2.0 * w.cos() * s1 * s2).sqrt() * 2.0 / x.len() as f64
    }

    #[test]
    fn each_member_hears_everyone_but_itself() {
        let mut r = room(3, &[1000, 2000, 4000]);
        r.mix(&mut VecDeque::new());
        assert_eq!(heard(&mut r), [6000, 5000, 3000]);
    }

    #[test]
    fn the_total_saturates_only_in_what_each_member_hears() {
        let mut r = room(3, &[30000, 30000, 0, -30000]);
        r.mix(&mut VecDeque::new());
        // Each hears the exact sum of the others, clamped only then: the loud ones cancel out
        // for 0 and 1, and the total (30000) never wrapped on its way.
        assert_eq!(heard(&mut r), [0, 0, 30000, i16::MAX]);
        let mut r = room(3, &[30000, 30000, 0]);
        r.mix(&mut VecDeque::new());
        assert_eq!(heard(&mut r), [30000, 30000, i16::MAX]);
    }

    #[test]
    fn only_the_loudest_are_mixed() {
        let mut r = room(3, &[100, 200, 300, 400, 500]);
        r.mix(&mut VecDeque::new());
        assert_eq!(heard(&mut r), [1200, 1200, 900, 800, 700]);
    }

    #[test]
    fn muted_members_are_not_heard_and_volumes_scale_by_steps() {
        let mut r = room(3, &[1000, 2000, 4000]);
        r.set_levels(
            leg(0),
            SeatLevels {
                muted: true,
                ..Default::default()
            },
        );
        r.set_levels(
            leg(1),
            SeatLevels {
                talk: -2,
                listen: 2,
                ..Default::default()
            },
        );
        r.mix(&mut VecDeque::new());
        // Member 1 says 2000 at -6 dB (1000) and hears 4000 at +6 dB.
        assert_eq!(heard(&mut r), [5000, 7984, 1000]);
    }

    #[test]
    fn a_queue_primes_before_it_is_read() {
        let mut r = room(3, &[1000, 0]);
        r.seats[0].queue.truncate(160);
        r.mix(&mut VecDeque::new());
        assert_eq!(heard(&mut r), [0, 0], "one frame queued: still priming");
        r.seats[0].queue.extend([1000; 160]);
        r.mix(&mut VecDeque::new());
        assert_eq!(heard(&mut r), [0, 1000]);
    }

    #[test]
    fn talking_starts_above_the_level_and_ends_after_the_hang_time() {
        let mut r = room(3, &[1000, 0]);
        let mut events = VecDeque::new();
        r.mix(&mut events);
        let on = MediaEvent::Talking {
            leg: leg(0),
            talking: true,
        };
        assert_eq!(events.drain(..).collect::<Vec<_>>(), [on]);
        r.seats[0].queue.clear();
        for i in 0..HANG_FRAMES {
            r.seats[0].queue.extend([10; 160]);
            r.mix(&mut events);
            let ended = i + 1 == HANG_FRAMES;
            assert_eq!(events.is_empty(), !ended, "frame {i}");
        }
        let off = MediaEvent::Talking {
            leg: leg(0),
            talking: false,
        };
        assert_eq!(events.drain(..).collect::<Vec<_>>(), [off]);
    }

    /// In a 16 kHz room mixing one member, the 8 kHz listeners (who share one resampled sum) all
    /// hear the same, the speaker's tone; the speaker hears nothing of itself.
    #[test]
    fn listeners_at_another_rate_hear_the_speaker_and_it_hears_nothing() {
        let mut rooms = Rooms::default();
        let id = rooms.add(16000, 1);
        for i in 0..4 {
            rooms.get_mut(id).unwrap().join(leg(i), Format::Pcmu);
        }
        let mut heard: Vec<Vec<i16>> = vec![Vec::new(); 4];
        let start = Instant::now();
        for n in 0..25u32 {
            for i in 0..4 {
                let packet: Vec<u8> = (0..160u32)
                    .map(|k| {
                        let t = f64::from(n * 160 + k) / 8000.0;
                        let v = if i == 0 {
                            (std::f64::consts::TAU * 1000.0 * t).sin()
                        } else {
                            0.0
                        };
                        codec::G711::Pcmu.encode_sample((6000.0 * v) as i16)
                    })
                    .collect();
                rooms.hear(id, leg(i), &packet);
            }
            rooms.mix_due(
                start + MIX_INTERVAL * n,
                &mut VecDeque::new(),
                |l, pcm, _| {
                    heard[l.index()].append(pcm);
                },
            );
        }
        assert_eq!(heard[1], heard[2]);
        assert_eq!(heard[1], heard[3]);
        let tail = |i: usize| &heard[i][heard[i].len() / 2..];
        assert!(amplitude_at(tail(1), 1000.0, 8000) > 5000.0);
        assert!(
            tail(0).iter().all(|&s| s.abs() < 50),
            "the speaker hears silence"
        );
    }

    /// A 16 kHz room of G.711 members mixes at 8 kHz: each hears the other's samples exactly,
    /// with nothing resampled. A G.722 member widens it to 16 kHz, and its leaving narrows it.
    #[test]
    fn a_room_mixes_at_its_widest_members_rate() {
        let mut rooms = Rooms::default();
        let id = rooms.add(16000, 3);
        let room = rooms.get_mut(id).unwrap();
        room.join(leg(0), Format::Pcmu);
        room.join(leg(1), Format::Pcma);
        assert_eq!((room.rate, room.frame), (8000, 160));
        assert!(room
            .seats
            .iter()
            .all(|s| s.inbound.is_none() && s.outbound.is_none()));
        let said: Vec<u8> = (0..160u8).map(|k| k.wrapping_mul(7) | 0x80).collect();
        let start = Instant::now();
        let mut heard = Vec::new();
        for n in 0..4u32 {
            rooms.hear(id, leg(0), &said);
            rooms.hear(id, leg(1), &[0xd5; 160]);
            rooms.mix_due(
                start + MIX_INTERVAL * n,
                &mut VecDeque::new(),
                |l, pcm, _| {
                    if l == leg(1) {
                        heard.append(pcm);
                    }
                    pcm.clear();
                },
            );
        }
        let expected: Vec<i16> = said.iter().map(|&c| G711::Pcmu.decode_sample(c)).collect();
        assert_eq!(&heard[heard.len() - 160..], &expected[..]);

        let room = rooms.get_mut(id).unwrap();
        room.join(leg(2), Format::G722);
        assert_eq!((room.rate, room.frame), (16000, 320));
        assert!(room.seats[..2]
            .iter()
            .all(|s| s.inbound.is_some() && s.said.len() == 320));
        room.leave(leg(2));
        assert_eq!(room.rate, 8000);
        assert!(room.seats.iter().all(|s| s.inbound.is_none()));
    }

    /// Members in G.711 (8 kHz), G.722 (16 kHz) and Opus (48 kHz) in rooms of each rate, each
    /// saying its own tone: each hears the others' tones and not its own.
    #[test]
    fn members_of_any_rate_hear_the_others_in_rooms_of_every_rate() {
        let members = [
            (Format::Pcmu, 500.0),
            (Format::G722, 900.0),
            (Format::Opus, 1300.0),
        ];
        for rate in [8000, 16000, 48000] {
            let mut rooms = Rooms::default();
            let id = rooms.add(rate, 3);
            let mut encoders: Vec<Box<dyn Encoder>> = Vec::new();
            for (i, &(f, _)) in members.iter().enumerate() {
                rooms.get_mut(id).unwrap().join(leg(i), f);
                encoders.push(f.encoder());
            }
            let mut heard: Vec<Vec<i16>> = vec![Vec::new(); members.len()];
            let mut events = VecDeque::new();
            let start = Instant::now();
            for n in 0..50u32 {
                for (i, &(f, freq)) in members.iter().enumerate() {
                    let own = f.pcm_rate();
                    let pcm: Vec<i16> = (0..own / 50)
                        .map(|k| {
                            let t = f64::from(n * own / 50 + k) / f64::from(own);
                            (8000.0 * (std::f64::consts::TAU * freq * t).sin()) as i16
                        })
                        .collect();
                    let mut packet = [0u8; 1500];
                    let len = encoders[i].encode(&pcm, &mut packet).unwrap();
                    rooms.hear(id, leg(i), &packet[..len]);
                }
                let due = start + MIX_INTERVAL * n;
                rooms.mix_due(due, &mut events, |leg, pcm, _| {
                    heard[leg.index()].append(pcm);
                });
            }
            for (i, &(f, own)) in members.iter().enumerate() {
                // The last half second, past priming and codec delays.
                let pcm = &heard[i][heard[i].len() / 2..];
                for &(_, freq) in &members {
                    let a = amplitude_at(pcm, freq, f.pcm_rate());
                    match freq == own {
                        true => assert!(a < 300.0, "{rate} Hz room: {f} hears itself: {a}"),
                        false => assert!(a > 3000.0, "{rate} Hz room: {f} misses {freq}: {a}"),
                    }
                }
            }
        }
    }
}
