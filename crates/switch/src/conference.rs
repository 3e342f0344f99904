//! Conference rooms of this worker (`conference ROOM`): who is in which room, who is typing a
//! room's PIN, and the members' keys. The media engine mixes (media's `mixer`); this module
//! decides who joins, with what levels, and who leaves.
//!
//! Keys in a room: `1` mute/unmute, `4`/`6` hear quieter/louder, `7`/`9` speak quieter/louder,
//! `5` both volumes back to normal; a moderator also has `2` lock/unlock (a locked room admits
//! moderators only) and `3` remove the member who joined last.
//!
//! Every caller of a room meets on one worker: an INVITE whose extension starts with
//! `conference ROOM` is handed to the room's worker, a hash of its name (handoff.rs). With a
//! shared store, on one node too: the node that hosts the room claims it (cluster.rs), and
//! callers reaching another node are bridged to it.

use crate::call::Wait;
use crate::cluster::{Hosted, RENEW_EVERY};
use crate::engine::Engine;
use crate::io::Level;
use media::{SeatLevels, ToneSpec, MAX_STEP};
use rustc_hash::FxHashMap;
use std::time::{Duration, Instant};

/// How long a caller has to key a PIN and `#`.
const PIN_TIMEOUT: Duration = Duration::from_secs(20);
/// Wrong PINs before the caller is turned away (CONFSTATUS=BADPIN).
const PIN_TRIES: u8 = 3;
/// Longest PIN read; more digits are ignored until `#`.
const PIN_MAX: usize = 16;
/// Join, leave and lock cues, played to the whole room.
const CUE: Duration = Duration::from_millis(200);

/// This worker's rooms, and its calls in one or typing a room's PIN.
#[derive(Default)]
pub(crate) struct Conferences {
    rooms: FxHashMap<String, Room>,
    seats: FxHashMap<usize, Seat>,
    /// When this node's claims of its rooms are renewed next (with a shared store and rooms).
    renew_at: Option<Instant>,
}

impl Conferences {
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.renew_at
    }
}

struct Room {
    media: media::RoomId,
    /// Its calls, in the order they joined.
    members: Vec<usize>,
    /// Only moderators may join.
    locked: bool,
}

/// A call's place in a room, or its way in.
struct Seat {
    room: String,
    /// The call's timer generation: a slot reused by a new call is not this seat's.
    gen: u64,
    state: State,
}

enum State {
    /// Keying the PIN: the digits so far and the wrong PINs given.
    Pin {
        typed: String,
        wrong: u8,
    },
    In {
        moderator: bool,
        levels: SeatLevels,
    },
}

impl Engine {
    /// `conference ROOM`: with a shared store, first which node hosts the room, unless this
    /// one does already (cluster.rs); then `conference_enter`.
    pub(crate) fn conference_step(&mut self, call: usize, room: String, now: Instant) {
        if self.s.cluster.is_none() || self.conferences.rooms.contains_key(&room) {
            return self.conference_enter(call, room, now);
        }
        self.cluster_host(call, Hosted::Room(room));
    }

    /// Renews this node's claims of its rooms, when due.
    pub(crate) fn conference_renewals(&mut self, now: Instant) {
        if self.conferences.renew_at.is_none_or(|at| at > now) {
            return;
        }
        self.conferences.renew_at = Some(now + RENEW_EVERY);
        let rooms: Vec<String> = self.conferences.rooms.keys().cloned().collect();
        for room in rooms {
            self.cluster_renew(Hosted::Room(room));
        }
    }

    /// Answers, then asks for the room's PIN or joins at once.
    pub(crate) fn conference_enter(&mut self, call: usize, room: String, now: Instant) {
        if !self.answer(call, now) {
            return;
        }
        let cfg = self.s.conferences.get(&room);
        if cfg.pin.is_none() && cfg.moderator_pin.is_none() {
            return self.conference_admit(call, room, false);
        }
        let c = &mut self.calls[call];
        // A beep every 5 s says: key the PIN, then #.
        let beep = ToneSpec::new(
            vec![480],
            vec![Duration::from_millis(250), Duration::from_millis(4750)],
        );
        if let Some(m) = c.caller().media {
            self.media.tone(m, beep);
        }
        // The program goes on with this status if the time runs out.
        c.vars.set("CONFSTATUS", "NOPIN");
        let until = now + PIN_TIMEOUT;
        c.wait = Wait::Timer(until);
        let gen = c.timer_gen;
        self.calls.arm(call, until);
        let seat = Seat {
            room,
            gen,
            state: State::Pin {
                typed: String::new(),
                wrong: 0,
            },
        };
        self.conferences.seats.insert(call, seat);
    }

    /// A digit of call `call`: a PIN's, or a member's key. False when the call is in no room.
    pub(crate) fn conference_digit(&mut self, call: usize, digit: char, now: Instant) -> bool {
        let Some(c) = self.calls.get(call) else {
            return false;
        };
        let (gen, waiting) = (c.timer_gen, c.wait);
        let Some(seat) = self.conferences.seats.get_mut(&call) else {
            return false;
        };
        if seat.gen != gen {
            self.conferences.seats.remove(&call);
            return false;
        }
        match &mut seat.state {
            State::Pin { .. } if !matches!(waiting, Wait::Timer(_)) => {
                // The time ran out and the program went on.
                self.conferences.seats.remove(&call);
                false
            }
            State::Pin { typed, .. } if digit != '#' => {
                if typed.len() < PIN_MAX {
                    typed.push(digit);
                }
                true
            }
            State::Pin { typed, wrong } => {
                let cfg = self.s.conferences.get(&seat.room);
                let given = std::mem::take(typed);
                let moderator = cfg.moderator_pin.as_ref() == Some(&given);
                let member = cfg.pin.as_ref().map_or(given.is_empty(), |p| *p == given);
                if moderator || member {
                    let room = seat.room.clone();
                    self.conference_admit(call, room, moderator);
                } else {
                    *wrong += 1;
                    if *wrong >= PIN_TRIES {
                        self.conferences.seats.remove(&call);
                        self.conference_turned_away(call, "BADPIN");
                    }
                }
                true
            }
            State::In { moderator, levels } => {
                let moderator = *moderator;
                let mut l = *levels;
                let step = |v: &mut i8, by: i8| *v = (*v + by).clamp(-MAX_STEP, MAX_STEP);
                match digit {
                    '1' => l.muted = !l.muted,
                    '4' => step(&mut l.listen, -1),
                    '6' => step(&mut l.listen, 1),
                    '7' => step(&mut l.talk, -1),
                    '9' => step(&mut l.talk, 1),
                    '5' => {
                        l = SeatLevels {
                            muted: l.muted,
                            ..SeatLevels::default()
                        }
                    }
                    '2' if moderator => {
                        let room = seat.room.clone();
                        self.conference_lock(&room);
                        return true;
                    }
                    '3' if moderator => {
                        let room = seat.room.clone();
                        self.conference_kick(call, &room, now);
                        return true;
                    }
                    _ => return true,
                }
                *levels = l;
                if let Some(m) = self.calls[call].caller().media {
                    self.media.set_seat(m, l);
                }
                true
            }
        }
    }

    /// Seats the call in `room` (made on first use), unless it is full or locked to it.
    fn conference_admit(&mut self, call: usize, name: String, moderator: bool) {
        let cfg = self.s.conferences.get(&name);
        let full = self
            .conferences
            .rooms
            .get(&name)
            .map(|r| (r.members.len() >= cfg.max_members, r.locked && !moderator));
        match full {
            Some((true, _)) => return self.conference_turned_away(call, "FULL"),
            Some((_, true)) => return self.conference_turned_away(call, "LOCKED"),
            _ => {}
        }
        let Some(m) = self.calls[call].caller().media else {
            return;
        };
        if self.s.cluster.is_some() && self.conferences.renew_at.is_none() {
            self.conferences.renew_at = Some(self.clock.now + RENEW_EVERY);
        }
        let media = &mut self.media;
        let room = self
            .conferences
            .rooms
            .entry(name.clone())
            .or_insert_with(|| Room {
                media: media.add_room(cfg.rate, cfg.loudest),
                members: Vec::new(),
                locked: false,
            });
        media.join_room(m, room.media);
        room.members.push(call);
        media.room_tone(room.media, &ToneSpec::new(vec![880], Vec::new()), CUE);
        let n = room.members.len();
        let c = &mut self.calls[call];
        c.vars.set("CONFSTATUS", "JOINED");
        c.wait = Wait::Forever;
        let seat = Seat {
            room: name.clone(),
            gen: c.timer_gen,
            state: State::In {
                moderator,
                levels: SeatLevels::default(),
            },
        };
        self.conferences.seats.insert(call, seat);
        let call_id = c.caller().call_id().to_string();
        let role = if moderator { "moderator" } else { "member" };
        let msg = format!("joined conference {name} as {role} ({n} in the room)");
        self.log(Level::Info, Some(&call_id), msg);
    }

    /// The call is not let in: its program goes on with CONFSTATUS `status`.
    fn conference_turned_away(&mut self, call: usize, status: &str) {
        let c = &mut self.calls[call];
        c.vars.set("CONFSTATUS", status);
        c.wait = Wait::None;
        if let Some(m) = c.caller().media {
            self.media.silence(m);
        }
        self.calls.run_later(call);
    }

    /// A moderator's `2`: locks or unlocks the room (a high or a low cue says which).
    fn conference_lock(&mut self, name: &str) {
        let Some(room) = self.conferences.rooms.get_mut(name) else {
            return;
        };
        room.locked = !room.locked;
        let hz = if room.locked { 1200 } else { 600 };
        self.media
            .room_tone(room.media, &ToneSpec::new(vec![hz], Vec::new()), CUE);
    }

    /// A moderator's `3`: hangs up the member who joined last (other than the moderator).
    fn conference_kick(&mut self, moderator: usize, name: &str, now: Instant) {
        let last = self
            .conferences
            .rooms
            .get(name)
            .and_then(|r| r.members.iter().rev().find(|&&c| c != moderator).copied());
        if let Some(kicked) = last {
            self.hangup(kicked, 16, "switch", None, now);
        }
    }

    /// Call `call` ended: it leaves its room, which ends with its last member.
    pub(crate) fn conference_left(&mut self, call: usize) {
        let Some(seat) = self.conferences.seats.remove(&call) else {
            return;
        };
        let (State::In { .. }, Some(room)) =
            (seat.state, self.conferences.rooms.get_mut(&seat.room))
        else {
            return;
        };
        room.members.retain(|&c| c != call);
        if room.members.is_empty() {
            self.media.remove_room(room.media);
            self.conferences.rooms.remove(&seat.room);
            if self.conferences.rooms.is_empty() {
                self.conferences.renew_at = None;
            }
            self.cluster_unhost(&Hosted::Room(seat.room));
        } else {
            let low = ToneSpec::new(vec![440], Vec::new());
            self.media.room_tone(room.media, &low, CUE);
        }
    }

    /// A member started or stopped talking: logged (an API would publish it).
    pub(crate) fn conference_talking(&mut self, call: usize, talking: bool) {
        let Some(seat) = self.conferences.seats.get(&call) else {
            return;
        };
        let what = if talking {
            "talking"
        } else {
            "stopped talking"
        };
        let msg = format!("conference {}: {what}", seat.room);
        let call_id = self.calls[call].caller().call_id().to_string();
        self.log(Level::Debug, Some(&call_id), msg);
    }
}
