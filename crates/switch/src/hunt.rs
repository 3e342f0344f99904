//! The `bridge` step's targets: one, or a ring group rung all at once (ringall) or one member
//! after another (sequential, roundrobin). A call's `Hunt` holds the members still to ring,
//! the user lookups under way and the best failure so far; every failure of a leg passes
//! through `dial_next`, which rings the next member, follows the user's forwarding
//! (forwarding.rs) or lets the program go on with DIALSTATUS.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use sip::Uri;

use crate::bridge::{better_final, resolve};
use crate::call::Wait;
use crate::dialplan::groups::{member_kind_ok, Turn, MEMBER_HELP};
use crate::dialplan::Strategy;
use crate::engine::Engine;
use crate::registrar::StoreResult;

/// A `bridge` under way.
pub(crate) struct Hunt {
    strategy: Strategy,
    /// Members not rung yet (sequential, roundrobin).
    members: VecDeque<String>,
    member_timeout: Option<Duration>,
    /// When the whole bridge gives up.
    until: Instant,
    /// The best final status of the members that failed (RFC 3261 §16.7).
    best: Option<u16>,
    /// Tokens of the user lookups whose answers are still wanted.
    lookups: Vec<u64>,
    /// One target, not a group: a user's forwarding applies to it.
    single: bool,
    /// The user dialled alone, whose busy and no-answer forwarding apply if it fails.
    alone: Option<(String, store::Forwarding)>,
}

impl Hunt {
    fn ringall(&self) -> bool {
        self.strategy == Strategy::RingAll
    }
}

/// A user lookup's answer: its store token, and the call (slot and generation) it is for.
pub(crate) struct Lookup {
    pub token: u64,
    pub call: usize,
    pub gen: u64,
}

/// What one `bridge` step asks for.
pub(crate) struct BridgeStep {
    pub uri: String,
    pub timeout: Duration,
    pub strategy: Option<Strategy>,
    pub member_timeout: Option<Duration>,
    pub turn: Turn,
}

impl Engine {
    /// Runs a `bridge` step: one target, a `group/NAME` or targets joined by `&`.
    pub(crate) fn bridge_step(&mut self, call: usize, b: BridgeStep, now: Instant) {
        let group = b.uri.strip_prefix("group/");
        let found = group.map(|name| {
            self.dialplan
                .ring_group(name)
                .map(|g| {
                    (
                        g.members.clone(),
                        g.strategy,
                        g.member_timeout,
                        g.turn.clone(),
                    )
                })
                .ok_or_else(|| {
                    format!("bridge: no ring group {name:?} — define [ring_groups.{name}]")
                })
        });
        let (members, strategy, member_timeout, turn) = match found {
            Some(Ok((members, strategy, timeout, turn))) => (
                members,
                b.strategy.unwrap_or(strategy),
                b.member_timeout.or(Some(timeout)),
                turn,
            ),
            Some(Err(e)) => {
                self.warn_call(call, e);
                return self.bridge_failed(call, 404, now);
            }
            None => {
                let members: Vec<String> = b.uri.split('&').map(str::to_owned).collect();
                let strategy = b.strategy.unwrap_or(Strategy::RingAll);
                (members, strategy, b.member_timeout, b.turn)
            }
        };
        let several = members.len() > 1;
        // A user's forwarding applies when it is dialled alone, never as a group's member.
        let single = !several && group.is_none();
        let mut members: VecDeque<String> = members
            .into_iter()
            .filter(|m| {
                let ok = !several || member_kind_ok(m);
                if !ok {
                    let msg = format!("bridge: {m:?} skipped: {MEMBER_HELP}");
                    self.warn_call(call, msg);
                }
                ok
            })
            .collect();
        if strategy == Strategy::RoundRobin {
            let start = turn.take(members.len());
            members.rotate_left(start);
        }
        let Some(c) = self.calls.get_mut(call) else {
            return;
        };
        c.hunt = Some(Box::new(Hunt {
            strategy: if several {
                strategy
            } else {
                Strategy::Sequential
            },
            members,
            member_timeout,
            until: now + b.timeout,
            best: None,
            lookups: Vec::new(),
            single,
            alone: None,
        }));
        if several && strategy == Strategy::RingAll {
            self.ring_all(call, now);
        } else if self.ring_next(call, now).is_some() {
            self.bridge_failed(call, 404, now);
        }
    }

    /// Rings every member at once, each user on all its phones.
    fn ring_all(&mut self, call: usize, now: Instant) {
        let Some(h) = self.calls.get_mut(call).and_then(|c| c.hunt.as_mut()) else {
            return;
        };
        let members = std::mem::take(&mut h.members);
        let left = h.until.saturating_duration_since(now);
        let mut rung = false;
        for m in members {
            // A member that failed at once (no RTP port left) may have ended the bridge.
            if self.hunt_mut(call).is_none() {
                return;
            }
            if let Some(name) = m.strip_prefix("user/") {
                self.dial_user_member(call, name, left, now);
                rung = true;
                continue;
            }
            if Uri::parse(&m)
                .ok()
                .filter(Uri::is_sip)
                .as_ref()
                .and_then(resolve)
                .is_none()
            {
                self.warn_call(
                    call,
                    format!("bridge: cannot route to {m:?}: use sip:user@IP[:port]"),
                );
                self.note_failure(call, 502);
                continue;
            }
            let Some(c) = self.calls.get_mut(call) else {
                return;
            };
            c.demote_callee();
            self.start_bridge(call, &m, left, now);
            rung = true;
        }
        if !rung {
            let best = self.hunt_mut(call).and_then(|h| h.best).unwrap_or(404);
            self.bridge_failed(call, best, now);
        }
    }

    /// Rings the next member alone, for its share of the time left. Returns the status to fail
    /// with when no member or no time is left.
    fn ring_next(&mut self, call: usize, now: Instant) -> Option<u16> {
        let h = self.hunt_mut(call)?;
        let left = h.until.saturating_duration_since(now);
        let next = h.members.pop_front().filter(|_| !left.is_zero());
        let Some(m) = next else {
            return Some(h.best.unwrap_or(408));
        };
        h.lookups.clear();
        let timeout = h.member_timeout.map_or(left, |t| t.min(left));
        self.dial_target(call, &m, timeout, now);
        None
    }

    /// Dials one target on its own.
    fn dial_target(&mut self, call: usize, target: &str, timeout: Duration, now: Instant) {
        if let Some(name) = target.strip_prefix("user/") {
            self.dial_user_member(call, name, timeout, now);
        } else if let Some(target) = target.strip_prefix("iax2/") {
            self.dial_iax(call, target, timeout, now)
        } else if target.starts_with("trunk/") {
            self.dial_trunk(call, target, timeout, now)
        } else {
            self.start_bridge(call, target, timeout, now)
        }
    }

    /// Looks a user up, the hunt waiting for the answer.
    fn dial_user_member(&mut self, call: usize, name: &str, timeout: Duration, now: Instant) {
        self.ring_start(call, name);
        if let Some(token) = self.dial_user(call, name, timeout, now) {
            if let Some(h) = self.hunt_mut(call) {
                h.lookups.push(token);
            }
        }
    }

    fn hunt_mut(&mut self, call: usize) -> Option<&mut Hunt> {
        self.calls.get_mut(call)?.hunt.as_deref_mut()
    }

    /// Remembers a member's failure; the best one is what the caller gets if all fail.
    fn note_failure(&mut self, call: usize, status: u16) -> Option<u16> {
        let h = self.hunt_mut(call)?;
        let best = h.best.map_or(status, |b| better_final(b, status));
        h.best = Some(best);
        Some(best)
    }

    /// The answer to a user lookup (`dial_user`): ring its phones, or follow its forwarding.
    pub(crate) fn dial_located(
        &mut self,
        lookup: Lookup,
        user: &str,
        result: StoreResult,
        timeout: Duration,
        now: Instant,
    ) {
        use crate::registrar::StoreReply::Located;
        let call = lookup.call;
        let Some(c) = self
            .calls
            .get_mut(call)
            .filter(|c| c.timer_gen == lookup.gen)
        else {
            return;
        };
        // An answer nobody waits for any more (the member's turn is over, the call moved on);
        // a lookup no `bridge` step made is wanted while nothing else rings.
        let wanted = match c.hunt.as_mut() {
            Some(h) => h
                .lookups
                .iter()
                .position(|t| *t == lookup.token)
                .map(|i| h.lookups.remove(i))
                .is_some(),
            None => c.callee().is_none(),
        };
        if !wanted || !matches!(c.wait, Wait::Bridge { .. }) {
            return;
        }
        let alone = c.hunt.as_ref().is_some_and(|h| h.single);
        match result {
            Ok(Located { exists: false, .. }) => self.member_failed(call, 404, now),
            Ok(Located {
                bindings,
                forward,
                dtmf,
                ..
            }) => {
                if alone && self.forward_always(call, user, &forward, now) {
                    return;
                }
                if alone {
                    if let Some(h) = self.hunt_mut(call) {
                        h.alone = Some((user.to_owned(), forward));
                    }
                }
                self.dial_bindings(call, bindings, dtmf, timeout, now)
            }
            Ok(_) => {}
            Err(e) => {
                self.warn_call(call, format!("location store: {e}"));
                self.member_failed(call, 503, now);
            }
        }
    }

    /// A member failed before it had a leg (unknown user, nothing registered, no route): while
    /// others of a ringall still ring or are being looked up, the call waits for them.
    pub(crate) fn member_failed(&mut self, call: usize, status: u16, now: Instant) {
        let waiting = self.calls.get(call).is_some_and(|c| {
            let legs = c.callee().is_some() || c.ringing().next().is_some();
            c.hunt
                .as_ref()
                .is_some_and(|h| h.ringall() && (legs || !h.lookups.is_empty()))
        });
        if waiting {
            self.note_failure(call, status);
            return;
        }
        self.bridge_failed(call, status, now);
    }

    /// Every leg of the bridge failed with `status` and is released: rings the next member,
    /// or follows the forwarding of the user dialled alone. `Some(status)`: nothing more to
    /// try, the bridge fails with it; None: the call goes on ringing.
    pub(crate) fn dial_next(&mut self, call: usize, status: u16, now: Instant) -> Option<u16> {
        // A leg no `bridge` step dialled fails as it is.
        let Some(best) = self.note_failure(call, status) else {
            return Some(status);
        };
        let h = self.hunt_mut(call)?;
        if h.ringall() {
            if !h.lookups.is_empty() && now < h.until {
                return None;
            }
        } else if let Some((user, forward)) = h.alone.take() {
            if self.forward_on_failure(call, &user, &forward, status, now) {
                return None;
            }
        } else {
            let failed = self.ring_next(call, now)?;
            self.calls[call].hunt = None;
            return Some(failed);
        }
        self.calls[call].hunt = None;
        Some(best)
    }

    /// The bridge connected: the hunt is over and the program can tell (DIALSTATUS=ANSWER).
    pub(crate) fn dial_answered(&mut self, call: usize) {
        if let Some(c) = self.calls.get_mut(call) {
            c.hunt = None;
            c.vars.set("DIALSTATUS", "ANSWER");
            c.vars.set("BRIDGE_STATUS", "200");
        }
    }
}
