//! Two calls of one worker joined by a retrieval or a pickup: each caller hears the other
//! (their media legs bridged), and the end of one ends the other. Each call keeps its own
//! legs, program and CDR.

use crate::call::Wait;
use crate::engine::Engine;
use rustc_hash::FxHashMap;
use std::time::Instant;

/// Call → the call it is joined to (both ways).
#[derive(Default)]
pub(crate) struct Joins {
    peer: FxHashMap<usize, usize>,
}

impl Engine {
    /// Joins the callers of calls `a` and `b` (both answered): media bridged, both holding.
    pub(crate) fn join(&mut self, a: usize, b: usize) {
        let media = |e: &Engine, c: usize| e.calls.get(c).and_then(|c| c.caller().media);
        if let (Some(ma), Some(mb)) = (media(self, a), media(self, b)) {
            self.media.bridge(ma, mb);
        }
        for c in [a, b] {
            self.calls[c].wait = Wait::Forever;
        }
        self.joins.peer.insert(a, b);
        self.joins.peer.insert(b, a);
    }

    /// The call `call` is joined to, if any.
    pub(crate) fn joined_to(&self, call: usize) -> Option<usize> {
        self.joins.peer.get(&call).copied()
    }

    /// Call `call` ended: the call joined to it ends too, a parked call's slot is freed, a
    /// ringing call leaves the ring board, a conference member its room.
    pub(crate) fn call_ended(&mut self, call: usize, side: &'static str, now: Instant) {
        self.ring_end(call);
        self.parked_gone(call);
        self.conference_left(call);
        if let Some(other) = self.joins.peer.remove(&call) {
            self.joins.peer.remove(&other);
            self.hangup(other, 16, side, None, now);
        }
    }
}
