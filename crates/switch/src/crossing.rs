//! An attended transfer whose consultation call another worker holds (the two calls' Call-IDs
//! hash apart). The worker of the REFER asks the consultation's worker for its party; that
//! worker takes the party's leg out of the consultation (ending it, as on one worker), closes
//! the leg's media, pins its Call-ID to the asking worker and sends the leg over — dialog and
//! session, no socket. Meanwhile the transferee waits as for a blind transfer's target
//! (transfer.rs `await_party`); the party joins it as its callee, re-INVITEd to a port of this
//! worker, and the answer completes the transfer. One call goes on, with one CDR, as on one
//! worker. A consultation still ringing is cancelled instead, and the transferee dials its
//! extension. See docs/architecture.md, "Calls that join a call on another worker".

use crate::call::{Leg, LegRef};
use crate::engine::{owner, Engine};
use crate::io::Event;
use crate::transfer::Replaces;
use std::net::IpAddr;
use std::time::Instant;

/// What one worker's engine sends another's for a transfer: the shell posts an
/// `Event::Crossing` to `worker`'s inbox as `Input::Crossing`.
pub struct Crossing {
    pub worker: usize,
    what: What,
}

impl std::fmt::Debug for Crossing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match &self.what {
            What::Ask { .. } => "ask",
            What::Party { .. } => "party",
            What::Ringing { .. } => "ringing",
            What::Refused { .. } => "refused",
        };
        write!(f, "Crossing({what} to worker {})", self.worker)
    }
}

enum What {
    /// The party of the dialog `replaces` names, for the transfer `back` by the phone at `from`.
    Ask {
        replaces: Replaces,
        from: IpAddr,
        back: Back,
    },
    /// That party's leg (without media) and what it reached.
    Party {
        back: Back,
        leg: Box<Leg>,
        reached: String,
    },
    /// The consultation still rang `exten` (its target's INVITE could not move): it was
    /// cancelled there, and the transferee dials `exten` here, as in a blind transfer.
    Ringing { back: Back, exten: String },
    /// No party to give: the transfer's final NOTIFY carries `status`.
    Refused { back: Back, status: u16 },
}

/// The transfer waiting for a party: its worker, its transferee's leg by Call-ID (a call index
/// could name another call by the time the answer comes; the transferor may hang up
/// meanwhile), and the REFER's event id.
struct Back {
    worker: usize,
    transferee: String,
    id: u32,
}

impl Engine {
    /// The worker other than this one that holds the dialog of `call_id` (its pin, or its
    /// hash: every strowger dialog's Call-ID hashes to its worker or is pinned there).
    pub(crate) fn worker_of(&self, call_id: &str) -> Option<usize> {
        let workers = self.s.workers;
        if workers <= 1 {
            return None;
        }
        let pins = &self.s.rendezvous.pins;
        let w = pins.get(call_id).unwrap_or_else(|| owner(call_id, workers));
        (w != self.s.worker).then_some(w)
    }

    /// Asks `worker` for the party of the consultation dialog `r` for the REFER on `at` (to
    /// `exten`, from the phone at `from`, its event `id`), whose transferee waits meanwhile.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn ask_for_party(
        &mut self,
        worker: usize,
        at: LegRef,
        id: u32,
        r: &Replaces,
        exten: String,
        from: IpAddr,
        now: Instant,
    ) {
        let Some(transferee) = self.await_party(at, id, exten, now) else {
            return self.notify(at, id, 403, now);
        };
        let back = Back {
            worker: self.s.worker,
            transferee,
            id,
        };
        let what = What::Ask {
            replaces: r.clone(),
            from,
            back,
        };
        self.send_crossing(worker, what);
    }

    fn send_crossing(&mut self, worker: usize, what: What) {
        let c = Crossing { worker, what };
        self.events.push_back(Event::Crossing(Box::new(c)));
    }

    /// A transfer message from another worker (`Input::Crossing`).
    pub(crate) fn on_crossing(&mut self, c: Crossing, now: Instant) {
        match c.what {
            What::Ask {
                replaces,
                from,
                back,
            } => self.give_party(&replaces, from, back, now),
            What::Party { back, leg, reached } => {
                self.keep_pinned(leg.call_id(), now);
                let (who, id) = (back.transferee.as_str(), back.id);
                // The transfer's call ended or gave up meanwhile: the party is hung up.
                if let Err(mut leg) = self.party_arrived(who, id, leg, reached, now) {
                    self.release_outbound(&mut leg, 16, true, now);
                }
            }
            What::Ringing { back, exten } => {
                self.party_ringing(&back.transferee, back.id, exten, now);
            }
            What::Refused { back, status } => {
                self.party_refused(&back.transferee, back.id, status, now);
            }
        }
    }

    /// Another worker's transfer asks for the party of dialog `r`: its leg is sent over, its
    /// media closed here and its Call-ID pinned there, and the consultation call ends; or the
    /// status of the refusal is.
    fn give_party(&mut self, r: &Replaces, from: IpAddr, back: Back, now: Instant) {
        let worker = back.worker;
        let consult = self
            .find_dialog(&r.call_id, &r.to_tag, &r.from_tag)
            .ok_or(481)
            .and_then(|other| Ok((other, self.consultation(other, Some(from))?)));
        if let Ok((other, true)) = consult {
            // A ringing target's INVITE is this worker's transaction and cannot move: the
            // ringing stops here and the transferee dials the same extension.
            let exten = self.calls[other.call].cdr.exten.clone();
            self.hangup(other.call, 16, "switch", None, now);
            return self.send_crossing(worker, What::Ringing { back, exten });
        }
        let taken = consult.and_then(|(other, _)| match self.party_is_sip(other) {
            // An IAX2 party's call numbers are this worker's.
            false => Err(403),
            true => self.take_party(other, now).ok_or(403),
        });
        let (mut leg, reached) = match taken {
            Ok(t) => t,
            Err(status) => return self.send_crossing(worker, What::Refused { back, status }),
        };
        if let Some(m) = leg.media.take() {
            self.media.remove_leg(m);
            self.close_media(m, leg.port);
        }
        leg.port = 0;
        self.pin_elsewhere(leg.call_id(), worker);
        let leg = Box::new(leg);
        self.send_crossing(worker, What::Party { back, leg, reached });
    }
}
