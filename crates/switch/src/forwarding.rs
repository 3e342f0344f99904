//! Call forwarding: the `forward` step sets or clears the calling user's forward targets in
//! the store, and `bridge user/NAME` honours them (hunt.rs asks here). A forwarded call is
//! routed like a new number dialled in the call's own context (`goto` with the target as the
//! extension), so forwarding never reaches what the caller's context may not; it follows at
//! most `MAX_FORWARDS` forwardings, so two users forwarding to each other cannot loop.

use std::time::Instant;

use store::{Forward, Forwarding};

use crate::call::Wait;
use crate::dialplan::dialable;
use crate::engine::Engine;
use crate::registrar::{Pending, StoreOp, StoreReply, StoreResult};

/// Forwardings one call follows; past that a user's forwarding is ignored (a loop, likely).
pub(crate) const MAX_FORWARDS: u8 = 3;

impl Engine {
    /// The `forward` step: changes the calling user's forwarding, then the program goes on
    /// once the store has it.
    pub(crate) fn forward_step(
        &mut self,
        call: usize,
        kind: Option<Forward>,
        target: Option<String>,
        now: Instant,
    ) {
        let Some(c) = self.calls.get_mut(call) else {
            return;
        };
        let Some(user) = c.user.as_ref().map(|u| u.name.clone()) else {
            let msg =
                "forward: the caller is not an authenticated user (only users have forwarding)";
            self.warn_call(call, msg.to_string());
            return self.hangup(call, 21, "switch", None, now);
        };
        // A literal target was checked at load; one from a variable is checked here.
        if let Some(t) = target.as_deref().filter(|t| !dialable(t)) {
            self.warn_call(
                call,
                format!("forward: {t:?} is not a number to forward to"),
            );
            return self.hangup(call, 28, "switch", None, now);
        }
        c.wait = Wait::Store;
        let gen = c.timer_gen;
        let op = StoreOp::Forward {
            user,
            domain: self.s.registrar.domain.clone(),
            kind,
            target,
        };
        self.store_op(op, Pending::Forward { call, gen });
    }

    /// The store's answer to a `forward` step.
    pub(crate) fn forward_stored(
        &mut self,
        call: usize,
        gen: u64,
        result: StoreResult,
        now: Instant,
    ) {
        let Some(c) = self.calls.get_mut(call) else {
            return;
        };
        if !c.awaits_store(gen) {
            return;
        }
        match result {
            Ok(StoreReply::Forwarded(true)) => {
                c.wait = Wait::None;
                self.calls.run_later(call);
            }
            Ok(_) => {
                self.warn_call(call, "forward: the user is not in the store".into());
                self.hangup(call, 21, "switch", None, now);
            }
            Err(e) => {
                self.warn_call(call, format!("forward: store: {e}"));
                self.hangup(call, 41, "switch", None, now);
            }
        }
    }

    /// `user`, dialled alone, forwards every call: route the target instead of ringing it.
    pub(crate) fn forward_always(
        &mut self,
        call: usize,
        user: &str,
        forward: &Forwarding,
        now: Instant,
    ) -> bool {
        match forward.target(Forward::Always) {
            Some(target) => self.forward_to(call, user, target, now),
            None => false,
        }
    }

    /// `user`, dialled alone, failed with `status`: its busy or no-answer forwarding, if set.
    pub(crate) fn forward_on_failure(
        &mut self,
        call: usize,
        user: &str,
        forward: &Forwarding,
        status: u16,
        now: Instant,
    ) -> bool {
        let kind = match status {
            486 | 600 => Forward::Busy,
            408 | 480 | 487 => Forward::NoAnswer,
            _ => return false,
        };
        match forward.target(kind) {
            Some(target) => self.forward_to(call, user, target, now),
            None => false,
        }
    }

    /// Sends the call to `target` through its current context, unless it was forwarded too
    /// often already.
    fn forward_to(&mut self, call: usize, user: &str, target: &str, now: Instant) -> bool {
        let Some(c) = self.calls.get_mut(call) else {
            return false;
        };
        if c.forwarded >= MAX_FORWARDS {
            let msg = format!(
                "forwarding of {user} to {target} not followed: the call was forwarded {MAX_FORWARDS} times already (a loop?)"
            );
            self.warn_call(call, msg);
            return false;
        }
        c.forwarded += 1;
        c.hunt = None;
        c.vars.set("FORWARDED_FROM", user);
        c.wait = Wait::None;
        let context = c.cdr.context.clone();
        self.calls.run_later(call);
        self.goto(call, &context, Some(target.to_owned()), now);
        true
    }

    /// Continues the call's program with the first rule of `context` matching `exten` (None:
    /// the call's `EXTEN`), which becomes the call's `EXTEN`; no rule: 404.
    pub(crate) fn goto(&mut self, call: usize, context: &str, exten: Option<String>, now: Instant) {
        let Some(c) = self.calls.get_mut(call) else {
            return;
        };
        let exten = exten
            .or_else(|| c.vars.get("EXTEN").map(str::to_owned))
            .unwrap_or_else(|| c.cdr.exten.clone());
        c.vars.set("EXTEN", exten.clone());
        match self.dialplan.route(context, &exten, &c.vars) {
            Some(p) => {
                c.program = p;
                c.cdr.context = context.to_owned();
            }
            None => self.hangup(call, 1, "switch", None, now),
        }
    }
}
