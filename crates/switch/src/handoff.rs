//! A new call that must join a call living on another worker (a parked call's retrieval, a
//! pickup, a conference room's members) is handed to that worker before anything is answered or
//! kept here: its Call-ID is pinned there (`Pins`), and the message leaves as `Event::HandOff`
//! for the shell to post to that worker's inbox, as dispatch would have. See docs/architecture.md, "Calls that join a
//! call on another worker".

use crate::dialplan::{Step, Vars};
use crate::engine::Engine;
use crate::io::{Event, HandOff, Level};
use crate::parklot::ParkLots;
use crate::pins::Pins;
use crate::ringboard::RingBoard;
use rustc_hash::FxHashMap;
use sip::header::HeaderName;
use sip::transaction::Peer;
use sip::{Message, Method, Uri};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// What the workers share so a call can find, and move to, a call of another worker.
#[derive(Default, Debug)]
pub struct Rendezvous {
    /// Call-IDs that run elsewhere than their hash says.
    pub pins: Pins,
    /// The parked calls, by slot.
    pub lots: ParkLots,
    /// The calls ringing a user, for pickup.
    pub ringing: RingBoard,
}

/// The Call-IDs pinned to this worker, each with when it was last seen without a call here:
/// one that has no call a while later (the caller never came back after a challenge, or its
/// call ended and its last retransmissions are past) is unpinned.
#[derive(Default)]
pub(crate) struct HandOffs {
    pinned: FxHashMap<Box<str>, Instant>,
}

impl Engine {
    /// Before any transaction or response: an initial INVITE that must run on another worker
    /// (its Call-ID is pinned there, or it dials a slot whose call is parked there or picks up
    /// a call ringing there) leaves for it, and None is returned; otherwise the message stays.
    pub(crate) fn hand_off(
        &mut self,
        msg: Message,
        peer: Peer,
        local: SocketAddr,
        late: bool,
        now: Instant,
    ) -> Option<Message> {
        let rv = &self.s.rendezvous;
        if self.s.workers <= 1
            || msg.method() != Some(&Method::Invite)
            || (rv.pins.is_empty()
                && rv.lots.is_empty()
                && rv.ringing.is_empty()
                && !self.dialplan.has_conference())
        {
            return Some(msg);
        }
        let initial = msg.to_addr().ok().is_some_and(|t| t.tag().is_none());
        if !initial {
            return Some(msg);
        }
        let call_id = msg.header(HeaderName::CallId).unwrap_or_default();
        let worker = match rv.pins.get(call_id) {
            Some(w) if w == self.s.worker => {
                let pinned = &mut self.handoffs.pinned;
                pinned.entry(call_id.into()).or_insert(now);
                return Some(msg);
            }
            Some(w) => w,
            // A retransmission of an INVITE this worker took before the boards changed stays.
            None if self.txs.has_server(&msg) => return Some(msg),
            None => match self.meeting_worker(&msg) {
                Some(w) if w != self.s.worker => {
                    self.s.rendezvous.pins.pin(call_id, w);
                    w
                }
                _ => return Some(msg),
            },
        };
        let message = format!("new call handed to worker {worker}, where the call it joins is");
        self.log(Level::Debug, Some(call_id), message);
        let h = HandOff {
            worker,
            msg,
            peer,
            local,
            late,
        };
        self.events.push_back(Event::HandOff(Box::new(h)));
        None
    }

    /// The worker of the call a new INVITE joins, by what its extension would run first in
    /// some context (`Dialplan::rendezvous`): the parked call's of a slot, the ringing call's
    /// of a pickup, the room's (a hash of its name, so no board is needed) of a conference. A
    /// group pickup knows its caller by the From user here, before the caller authenticated:
    /// this only chooses the worker, and the pickup there checks the user.
    fn meeting_worker(&self, msg: &Message) -> Option<usize> {
        let exten = msg.uri().ok()?.user?.to_string();
        let caller = msg
            .from_addr()
            .ok()
            .and_then(|n| Uri::parse(n.uri).ok()?.user)
            .unwrap_or_default()
            .to_string();
        let call_id = msg.header(HeaderName::CallId).unwrap_or_default();
        let vars = Vars::for_call(&exten, &caller, call_id, &self.s.data_dir);
        let rv = &self.s.rendezvous;
        match self.dialplan.rendezvous(&exten, &vars)? {
            Step::Retrieve { slot } => rv.lots.find(&slot).map(|p| p.worker),
            Step::Pickup { exten: Some(e) } => rv.ringing.oldest([e.as_str()]).map(|r| r.worker),
            Step::Pickup { exten: None } => {
                let peers = self.s.parking.pickup_peers(&caller);
                rv.ringing.oldest(peers).map(|r| r.worker)
            }
            Step::Conference { room } => Some(crate::engine::owner(&room, self.s.workers)),
            _ => None,
        }
    }

    /// An INVITE handed here was challenged statelessly: it leaves nothing here, so neither does
    /// its pin (a flood of strangers' INVITEs to a slot pins nothing). The caller's answer is
    /// handed here again by the board, and this worker's nonce is checked here.
    pub(crate) fn unpin_challenged(&mut self, msg: &Message) {
        let pins = &self.s.rendezvous.pins;
        if pins.is_empty() {
            return;
        }
        let call_id = msg.header(HeaderName::CallId).unwrap_or_default();
        if pins.get(call_id) == Some(self.s.worker) && self.calls.leg_by_call_id(call_id).is_none()
        {
            pins.unpin(call_id);
            self.handoffs.pinned.remove(call_id);
        }
    }

    /// A call's leg whose Call-ID hashes elsewhere came here (crossing.rs): pinned here, it is
    /// unpinned once it has had no call here for `pin_linger`.
    pub(crate) fn keep_pinned(&mut self, call_id: &str, now: Instant) {
        self.s.rendezvous.pins.pin(call_id, self.s.worker);
        self.handoffs.pinned.entry(call_id.into()).or_insert(now);
    }

    /// A leg leaves for `worker` (crossing.rs): its Call-ID is pinned there, and this worker's
    /// sweep no longer minds it.
    pub(crate) fn pin_elsewhere(&mut self, call_id: &str, worker: usize) {
        self.s.rendezvous.pins.pin(call_id, worker);
        self.handoffs.pinned.remove(call_id);
    }

    /// How long a pin outlives its call (or waits for one): RFC 3261's 64·T1, the life of a
    /// transaction, so retransmissions and a challenged caller's second INVITE still find it.
    fn pin_linger(&self) -> Duration {
        self.s.timers.t1 * 64
    }

    /// When `sweep_pins` has something to look at.
    pub(crate) fn pins_deadline(&self) -> Option<Instant> {
        let linger = self.pin_linger();
        self.handoffs.pinned.values().min().map(|t| *t + linger)
    }

    /// Unpins the Call-IDs pinned here that have had no call for `pin_linger`.
    pub(crate) fn sweep_pins(&mut self, now: Instant) {
        let linger = self.pin_linger();
        if self.handoffs.pinned.values().all(|t| *t + linger > now) {
            return;
        }
        let calls = &self.calls;
        let pins = &self.s.rendezvous.pins;
        self.handoffs.pinned.retain(|id, since| {
            if *since + linger > now {
                return true;
            }
            if calls.leg_by_call_id(id).is_some() {
                *since = now;
                return true;
            }
            pins.unpin(id);
            false
        });
    }
}
