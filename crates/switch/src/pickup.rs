//! Call pickup: a call dialling a user (`bridge user/NAME`) is on the shared ring board while
//! it rings, so `pickup EXTEN` (`*8EXT`: the call ringing that user) or `pickup` alone (`*8`:
//! a call ringing a member of the picker's pickup groups) finds it; the hand-off
//! (handoff.rs) brought the picker to the ringing call's worker, where the ringing legs are
//! cancelled and the ringing call's caller is joined to the picker.

use crate::call::{Role, Wait};
use crate::engine::Engine;
use crate::io::Level;
use rustc_hash::FxHashMap;
use std::time::Instant;

/// This worker's calls on the ring board: call → its caller's Call-ID and the users it rings
/// (a ring group rings several).
#[derive(Default)]
pub(crate) struct Pickup {
    ringing: FxHashMap<usize, (Box<str>, Vec<Box<str>>)>,
}

impl Engine {
    /// Call `call` starts ringing user `user` (only when some rule picks calls up).
    pub(crate) fn ring_start(&mut self, call: usize, user: &str) {
        if !self.dialplan.has_pickup() {
            return;
        }
        let Some(c) = self.calls.get(call) else {
            return;
        };
        let call_id = c.caller().call_id();
        let (_, users) = self
            .pickup
            .ringing
            .entry(call)
            .or_insert_with(|| (call_id.into(), Vec::new()));
        if users.iter().any(|u| &**u == user) {
            return;
        }
        users.push(user.into());
        let board = &self.s.rendezvous.ringing;
        board.ring(user, self.s.worker, call_id);
    }

    /// Call `call` no longer rings anyone (answered, failed, picked up or ended).
    pub(crate) fn ring_end(&mut self, call: usize) {
        if self.pickup.ringing.is_empty() {
            return;
        }
        if let Some((call_id, users)) = self.pickup.ringing.remove(&call) {
            for user in users {
                self.s.rendezvous.ringing.stop(&user, &call_id);
            }
        }
    }

    /// The `pickup` step: joins the caller to the call ringing `exten`, or without one to the
    /// call that has rung longest among the picker's pickup groups (`[pickup_groups]`, the
    /// picker known by its user name or, unauthenticated, its caller number). Nothing to pick
    /// up: 480.
    pub(crate) fn pickup(&mut self, call: usize, exten: Option<&str>, now: Instant) {
        let c = &self.calls[call];
        let picker = match &c.user {
            Some(u) => u.name.clone(),
            None => c.vars.get("CALLER").unwrap_or_default().to_string(),
        };
        let parking = self.s.parking.clone();
        let targets = match exten {
            Some(e) => vec![e],
            None => parking.pickup_peers(&picker),
        };
        let ring = self.s.rendezvous.ringing.oldest(targets);
        let found = ring
            .filter(|r| r.worker == self.s.worker)
            .and_then(|r| self.calls.leg_by_call_id(&r.call_id))
            .map(|at| at.call)
            .filter(|r| *r != call && self.rings(*r));
        let Some(ringing) = found else {
            let call_id = c.caller().call_id().to_string();
            let what = exten.map_or(format!("for {picker}'s pickup groups"), str::to_string);
            self.log(
                Level::Info,
                Some(&call_id),
                format!("pickup: nothing rings {what}"),
            );
            return self.hangup(call, 20, "switch", None, now);
        };
        self.ring_end(ringing);
        // The phones ringing stop (CANCEL); the ringing call's caller is answered instead.
        let c = &mut self.calls[ringing];
        let mut legs = c.take_ringing();
        legs.extend(c.take_callee(false));
        c.wait = Wait::Forever;
        if let Some(m) = c.caller().media {
            self.media.unbridge(m);
        }
        for mut leg in legs {
            self.release_outbound(&mut leg, 26, true, now);
        }
        if !self.answer(ringing, now) || !self.answer(call, now) {
            return;
        }
        self.join(call, ringing);
    }

    /// Whether call `call` is ringing a callee not yet answered.
    fn rings(&self, call: usize) -> bool {
        self.calls.get(call).is_some_and(|c| {
            matches!(c.wait, Wait::Bridge { .. })
                && c.legs()
                    .any(|(_, l)| matches!(l.role, Role::Callee | Role::Ringing) && !l.confirmed)
        })
    }
}
