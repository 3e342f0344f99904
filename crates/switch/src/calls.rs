//! The call table of one worker: the calls, the maps that find a call from what arrives (a
//! Call-ID, a server or client transaction, a media leg), the calls' timers and the calls whose
//! program can run. The maps change only here, as calls are added and removed and legs are
//! indexed and forgotten, so keeping them in step with the calls is this file's job alone.

use crate::call::{Call, Leg, LegIdx, LegRef, Role};
use crate::dialog::Dialog;
use rustc_hash::FxHashMap;
use sip::transaction::{ClientTxId, ServerTxId};
use slab::Slab;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ops::{Index, IndexMut};
use std::time::Instant;

/// What a worker's call table holds: every entry of its maps, its legs and the timers not yet
/// fired (tests check that calls leave nothing behind).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TableCounts {
    pub calls: usize,
    pub legs: usize,
    pub call_ids: usize,
    pub server_txs: usize,
    pub client_txs: usize,
    pub media_legs: usize,
    /// Timers not yet due, ended calls' included (they are dropped when due).
    pub timers: usize,
    /// Of those, the timers of calls still in the table.
    pub live_timers: usize,
    pub orphans: usize,
}

#[derive(Default)]
pub(crate) struct Calls {
    calls: Slab<Call>,
    /// Call-ID → its leg, for the SIP legs.
    by_call_id: FxHashMap<String, LegRef>,
    /// The caller's INVITE transaction → its call.
    server_txs: FxHashMap<ServerTxId, usize>,
    /// Outbound INVITE transactions (every ringing leg, forks too) → their leg.
    client_txs: FxHashMap<ClientTxId, LegRef>,
    /// Media leg index → its call's leg.
    by_media: FxHashMap<usize, LegRef>,
    /// (when, call, generation): a timer fires only if it carries the call's current generation,
    /// so a slot reused by a new call never gets the old call's timers.
    timers: BinaryHeap<Reverse<(Instant, usize, u64)>>,
    next_gen: u64,
    /// Calls whose program may take its next step.
    to_run: Vec<usize>,
    /// Outbound INVITEs whose call ended before the callee answered: a late 2xx is still ACKed
    /// and ended with a BYE.
    orphans: FxHashMap<ClientTxId, Dialog>,
    /// The journal of the calls up, when the worker keeps one (journal.rs).
    pub(crate) journal: Option<crate::journal::Journal>,
}

impl Calls {
    /// Adds a call with its caller's leg: found from then on by its Call-ID (a SIP caller's) and
    /// its INVITE's server transaction. The call gets a new timer generation.
    pub(crate) fn add(&mut self, mut call: Call) -> usize {
        self.next_gen += 1;
        call.timer_gen = self.next_gen;
        let sip = call.caller().dialog().map(|d| d.call_id.clone());
        let stx = call.invite_tx;
        let id = self.calls.insert(call);
        if let Some(j) = self.journal.as_mut() {
            j.opened(id, &self.calls[id].cdr);
        }
        if let Some(call_id) = sip {
            let caller = LegRef {
                call: id,
                leg: Call::CALLER,
            };
            self.by_call_id.insert(call_id, caller);
        }
        if let Some(stx) = stx {
            self.server_txs.insert(stx, id);
        }
        id
    }

    /// Removes a call with the entries of its caller's leg; its other legs are the caller's to
    /// release (`forget_leg`).
    pub(crate) fn remove(&mut self, id: usize) -> Option<Call> {
        let c = self.calls.try_remove(id)?;
        if let Some(j) = self.journal.as_mut() {
            j.ended(id);
        }
        // The INVITE's transaction is no longer on the call once answered: find it by value.
        self.server_txs.retain(|_, v| *v != id);
        self.by_call_id.remove(c.caller().call_id());
        if let Some(m) = c.caller().media {
            self.by_media.remove(&m.index());
        }
        Some(c)
    }

    /// Forgets a leg being released: its Call-ID, media leg and pending INVITE.
    pub(crate) fn forget_leg(&mut self, leg: &Leg) {
        self.by_call_id.remove(leg.call_id());
        if let Some(m) = leg.media {
            self.by_media.remove(&m.index());
        }
        if let Some(ctx) = leg.invite_tx {
            self.client_txs.remove(&ctx);
        }
    }

    /// Makes leg `leg` of `call` the caller and the caller a leg in `role` (call.rs
    /// `Call::swap_caller`), with the maps following both legs to their new places.
    pub(crate) fn swap_caller(&mut self, call: usize, leg: LegIdx, role: Role) -> bool {
        let Some(c) = self.calls.get_mut(call) else {
            return false;
        };
        if !c.swap_caller(leg, role) {
            return false;
        }
        for at in [Call::CALLER, leg] {
            self.index_leg(LegRef { call, leg: at });
        }
        true
    }

    /// Puts `leg` into `call` in `role`, found from then on by its Call-ID, media leg and
    /// pending INVITE (a leg moved from another call, or one that replaces another).
    pub(crate) fn put_leg(&mut self, call: usize, leg: Leg, role: Role) -> Option<LegRef> {
        let i = self.calls.get_mut(call)?.add_leg(leg, role);
        let at = LegRef { call, leg: i };
        self.index_leg(at);
        Some(at)
    }

    /// Takes a leg (never a caller's) out of its call and out of the maps; it is the caller's
    /// to release or to put into another call.
    pub(crate) fn take_leg(&mut self, at: LegRef) -> Option<Leg> {
        let leg = self.calls.get_mut(at.call)?.remove_leg(at.leg)?;
        self.forget_leg(&leg);
        Some(leg)
    }

    /// Another INVITE answered into `call` (one with Replaces): if its 2xx is never ACKed, the
    /// call ends as for the caller's own INVITE.
    pub(crate) fn index_server_tx(&mut self, stx: ServerTxId, call: usize) {
        self.server_txs.insert(stx, call);
    }

    /// Points the maps at `at` for what its leg is found by.
    fn index_leg(&mut self, at: LegRef) {
        let Some(leg) = self.calls.get(at.call).and_then(|c| c.leg(at.leg)) else {
            return;
        };
        if let Some(d) = leg.dialog() {
            self.by_call_id.insert(d.call_id.clone(), at);
        }
        if let Some(m) = leg.media {
            self.by_media.insert(m.index(), at);
        }
        if let Some(ctx) = leg.invite_tx {
            self.client_txs.insert(ctx, at);
        }
    }

    /// A leg's Call-ID (a callee's, a fork's), under which its far end's requests arrive.
    pub(crate) fn index_call_id(&mut self, call_id: String, leg: LegRef) {
        self.by_call_id.insert(call_id, leg);
    }

    /// The INVITE sent on a leg.
    pub(crate) fn index_invite(&mut self, ctx: ClientTxId, leg: LegRef) {
        self.client_txs.insert(ctx, leg);
    }

    /// A media leg created for a leg of a call.
    pub(crate) fn bind_media(&mut self, m: media::LegId, leg: LegRef) {
        self.by_media.insert(m.index(), leg);
    }

    /// The leg a Call-ID names.
    pub(crate) fn leg_by_call_id(&self, call_id: &str) -> Option<LegRef> {
        self.by_call_id.get(call_id).copied()
    }

    /// The call whose caller's INVITE is `stx`.
    pub(crate) fn call_by_server_tx(&self, stx: ServerTxId) -> Option<usize> {
        self.server_txs.get(&stx).copied()
    }

    /// The leg whose outbound INVITE is `ctx`; with `done`, forgotten (it got its final
    /// response or timed out).
    pub(crate) fn leg_by_client_tx(&mut self, ctx: ClientTxId, done: bool) -> Option<LegRef> {
        match done {
            true => self.client_txs.remove(&ctx),
            false => self.client_txs.get(&ctx).copied(),
        }
    }

    /// The call's leg of a media leg.
    pub(crate) fn leg_by_media(&self, leg: usize) -> Option<LegRef> {
        self.by_media.get(&leg).copied()
    }

    /// Remembers a released leg's INVITE that was CANCELled (see `orphans`).
    pub(crate) fn orphan(&mut self, ctx: ClientTxId, dialog: Dialog) {
        self.orphans.insert(ctx, dialog);
    }

    pub(crate) fn is_orphan(&self, ctx: ClientTxId) -> bool {
        self.orphans.contains_key(&ctx)
    }

    /// An orphaned INVITE got its final response: its dialog, forgotten.
    pub(crate) fn take_orphan(&mut self, ctx: ClientTxId) -> Option<Dialog> {
        self.orphans.remove(&ctx)
    }

    /// A timer for `call` at `at`, in the call's current generation.
    pub(crate) fn arm(&mut self, call: usize, at: Instant) {
        if let Some(c) = self.calls.get(call) {
            self.timers.push(Reverse((at, call, c.timer_gen)));
        }
    }

    /// When the earliest call timer is due.
    pub(crate) fn next_timer(&self) -> Option<Instant> {
        self.timers.peek().map(|Reverse((t, _, _))| *t)
    }

    /// The call of the next timer due at `now` that is still its call's (stale ones are dropped).
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<usize> {
        while let Some(&Reverse((t, call, gen))) = self.timers.peek() {
            if t > now {
                return None;
            }
            self.timers.pop();
            if self.calls.get(call).is_some_and(|c| c.timer_gen == gen) {
                return Some(call);
            }
        }
        None
    }

    /// The call's program may take its next step (`Engine::run_pending`).
    pub(crate) fn run_later(&mut self, call: usize) {
        self.to_run.push(call);
    }

    pub(crate) fn next_to_run(&mut self) -> Option<usize> {
        self.to_run.pop()
    }

    pub(crate) fn get(&self, id: usize) -> Option<&Call> {
        self.calls.get(id)
    }

    pub(crate) fn get_mut(&mut self, id: usize) -> Option<&mut Call> {
        self.calls.get_mut(id)
    }

    pub(crate) fn contains(&self, id: usize) -> bool {
        self.calls.contains(id)
    }

    pub(crate) fn len(&self) -> usize {
        self.calls.len()
    }

    /// Legs, media legs and timer entries: the gauges the metrics take once a second, without
    /// the walk over timers that [`Calls::counts`] does for the tests.
    pub(crate) fn gauges(&self) -> [usize; 3] {
        [self.legs(), self.by_media.len(), self.timers.len()]
    }

    fn legs(&self) -> usize {
        self.calls.iter().map(|(_, c)| c.legs().count()).sum()
    }

    pub(crate) fn counts(&self) -> TableCounts {
        TableCounts {
            calls: self.calls.len(),
            legs: self.legs(),
            call_ids: self.by_call_id.len(),
            server_txs: self.server_txs.len(),
            client_txs: self.client_txs.len(),
            media_legs: self.by_media.len(),
            timers: self.timers.len(),
            live_timers: self
                .timers
                .iter()
                .filter(|Reverse((_, id, gen))| {
                    self.calls.get(*id).is_some_and(|c| c.timer_gen == *gen)
                })
                .count(),
            orphans: self.orphans.len(),
        }
    }

    /// Notes in the journal that a call was answered at `at` (Unix seconds, its CDR's).
    pub(crate) fn answered(&mut self, id: usize, at: f64) {
        if let Some(j) = self.journal.as_mut() {
            j.answered(id, at);
        }
    }

    /// Hands `write` what the journal has to write now (`wall`: Unix ms); on compaction, the
    /// notes of every call up.
    pub(crate) fn take_journal(&mut self, wall: u64, write: impl FnOnce(crate::journal::Write)) {
        let calls = &self.calls;
        let Some(j) = self.journal.as_mut() else {
            return;
        };
        let live = |j: &mut crate::journal::Journal| {
            for (id, c) in calls {
                j.opened(id, &c.cdr);
                if let Some(a) = c.cdr.answer {
                    j.answered(id, a);
                }
            }
        };
        j.take(wall, live, write);
    }

    pub(crate) fn ids(&self) -> Vec<usize> {
        self.calls.iter().map(|(i, _)| i).collect()
    }
}

impl Index<usize> for Calls {
    type Output = Call;

    fn index(&self, id: usize) -> &Call {
        &self.calls[id]
    }
}

impl IndexMut<usize> for Calls {
    fn index_mut(&mut self, id: usize) -> &mut Call {
        &mut self.calls[id]
    }
}

#[cfg(test)]
mod tests {
    use super::Calls;
    use crate::call::{Call, Leg, LegRef, Role, Signal};
    use crate::cdr::Cdr;
    use crate::config::Config;
    use crate::dialog::Dialog;
    use crate::dialplan::Vars;
    use sdp::LocalSession;
    use sip::transaction::{Peer, Transport};
    use std::net::{IpAddr, Ipv4Addr, SocketAddr};
    use std::time::Instant;

    fn sip_leg(call_id: &str) -> Leg {
        let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)), 5060);
        let dialog = Dialog {
            call_id: call_id.to_string(),
            local_tag: "l".into(),
            remote_tag: "r".into(),
            local_uri: "<sip:a@example.com>".into(),
            remote_uri: "<sip:b@example.com>".into(),
            remote_target: "sip:b@192.0.2.1".into(),
            route_set: Vec::new(),
            local_cseq: 1,
            remote_cseq: 1,
            peer: Peer {
                transport: Transport::Udp,
                addr,
            },
            local_contact: "<sip:strowger@192.0.2.2>".into(),
            max_forwards: 70,
        };
        let sdp = LocalSession::new(1, IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2)));
        Leg::new(Signal::Sip(dialog), sdp, None, None)
    }

    fn call(caller: Leg) -> Call {
        let rules = "[[dialplan.contexts.default.rules]]\nexten = \"9196\"\nsteps = [\"echo\"]\n";
        let plan = match Config::from_str(rules, "t.toml") {
            Ok(c) => c.dialplan,
            Err(_) => panic!("test dialplan"),
        };
        let vars = Vars::new();
        let route = plan.route(plan.default_context(), "9196", &vars);
        let route = route.expect("a route for 9196");
        Call::new(
            caller,
            None,
            None,
            route,
            vars,
            Cdr::default(),
            Instant::now(),
            None,
        )
    }

    /// The table notes its calls in the journal: a call added, answered and not removed is what
    /// a killed node's next start writes a CDR for; a removed one is not. Compaction rewrites
    /// the journal with the calls up, answered ones still answered.
    #[test]
    fn the_journal_holds_the_calls_up() {
        use crate::journal::{recover, Write};
        let mut calls = Calls {
            journal: Some(Default::default()),
            ..Calls::default()
        };
        let mut file = String::new();
        let write = |calls: &mut Calls, t: f64, file: &mut String| {
            calls.take_journal((t * 1000.0) as u64, |w| match w {
                Write::Append(s) => file.push_str(std::str::from_utf8(s).unwrap()),
                Write::Replace(s) => *file = String::from_utf8(s.to_vec()).unwrap(),
            })
        };
        let mut c = call(sip_leg("up@x"));
        c.cdr.call_id = "up@x".into();
        c.cdr.start = 100.0;
        let up = calls.add(c);
        // As the engine answers: the CDR's answer time, and the note.
        calls[up].cdr.answer = Some(101.0);
        calls.answered(up, 101.0);
        let gone = calls.add(call(sip_leg("gone@x")));
        calls.remove(gone);
        write(&mut calls, 103.0, &mut file);
        let cdrs = recover(&file);
        assert_eq!(cdrs.len(), 1);
        assert_eq!(
            (cdrs[0].call_id.as_str(), cdrs[0].answer),
            ("up@x", Some(101.0))
        );
        assert_eq!(cdrs[0].billable_s, 2.0);
        // Churn past the compaction bound: the file shrinks back to the call up.
        let mut t = 104.0;
        while file.len() < 200 * 1024 {
            for _ in 0..100 {
                let id = calls.add(call(sip_leg("brief@x")));
                calls.remove(id);
            }
            t += 1.0;
            write(&mut calls, t, &mut file);
        }
        write(&mut calls, t + 1.0, &mut file);
        // One batch that carries the file past 256 KiB.
        for _ in 0..(100 * 1024 / 30) {
            let id = calls.add(call(sip_leg("brief@x")));
            calls.remove(id);
        }
        write(&mut calls, t + 2.0, &mut file);
        assert!(file.len() < 1024, "compacted to {} bytes", file.len());
        let cdrs = recover(&file);
        assert_eq!(cdrs.len(), 1);
        assert_eq!(
            (cdrs[0].call_id.as_str(), cdrs[0].answer),
            ("up@x", Some(101.0))
        );
        assert_eq!(cdrs[0].end, t + 2.0);
    }

    /// A call holding three legs (say a consultation call during an attended transfer): each
    /// is found by its Call-ID and media leg, a leg without media is fine, and a released leg
    /// is forgotten while the others stay.
    #[test]
    fn a_call_with_three_legs() {
        let mut calls = Calls::default();
        let id = calls.add(call(sip_leg("caller@x")));
        let caller = LegRef {
            call: id,
            leg: Call::CALLER,
        };
        assert_eq!(calls.leg_by_call_id("caller@x"), Some(caller));

        let callee = calls[id].set_callee(sip_leg("callee@x"));
        let callee = LegRef {
            call: id,
            leg: callee,
        };
        calls.index_call_id("callee@x".into(), callee);
        let third = calls[id].add_leg(sip_leg("third@x"), Role::Ringing);
        let third = LegRef {
            call: id,
            leg: third,
        };
        calls.index_call_id("third@x".into(), third);
        assert_eq!(calls[id].legs().count(), 3);

        // Media for the caller and the third leg; the callee has none (a parked leg, say).
        let (m_caller, m_third) = (media::LegId::from_index(7), media::LegId::from_index(9));
        calls[id].caller_mut().media = Some(m_caller);
        calls.bind_media(m_caller, caller);
        if let Some(l) = calls[id].leg_mut(third.leg) {
            l.media = Some(m_third);
        }
        calls.bind_media(m_third, third);

        assert_eq!(calls.leg_by_call_id("callee@x"), Some(callee));
        assert_eq!(calls.leg_by_call_id("third@x"), Some(third));
        assert_eq!(calls.leg_by_media(7), Some(caller));
        assert_eq!(calls.leg_by_media(9), Some(third));
        assert_ne!(callee.leg, third.leg);
        let c = &calls[id];
        assert_eq!(c.caller().call_id(), "caller@x");
        assert_eq!(c.callee().map(Leg::call_id), Some("callee@x"));
        assert!(c.callee().is_some_and(|l| l.media.is_none()));
        let ringing: Vec<_> = c.ringing().map(|(_, l)| l.call_id()).collect();
        assert_eq!(ringing, ["third@x"]);

        // The third leg is released: forgotten by the maps, the other two stay.
        let leg = calls[id].remove_leg(third.leg).expect("the third leg");
        calls.forget_leg(&leg);
        assert_eq!(calls.leg_by_call_id("third@x"), None);
        assert_eq!(calls.leg_by_media(9), None);
        assert_eq!(calls.leg_by_call_id("callee@x"), Some(callee));
        assert_eq!(calls.leg_by_media(7), Some(caller));
        assert!(calls[id].leg(third.leg).is_none());
        assert_eq!(calls[id].legs().count(), 2);
        assert_eq!(calls[id].ringing().count(), 0);
        // The caller's leg is never removed on its own; removing the call forgets it.
        assert!(calls[id].remove_leg(Call::CALLER).is_none());
        let c = calls.remove(id).expect("the call");
        assert_eq!(c.callee().map(Leg::call_id), Some("callee@x"));
        assert_eq!(calls.leg_by_call_id("caller@x"), None);
        assert_eq!(calls.leg_by_media(7), None);
    }

    /// A transfer's moves: the callee takes the caller's place (the maps follow both legs), a
    /// leg leaves one call and joins another, and every map finds each leg where it is.
    #[test]
    fn legs_swap_places_and_move_between_calls() {
        let mut calls = Calls::default();
        let one = calls.add(call(sip_leg("a@x")));
        let b = calls[one].set_callee(sip_leg("b@x"));
        calls.index_call_id("b@x".into(), LegRef { call: one, leg: b });
        let m = media::LegId::from_index(3);
        calls[one].leg_mut(b).expect("b").media = Some(m);
        calls.bind_media(m, LegRef { call: one, leg: b });

        assert!(calls.swap_caller(one, b, Role::Transferor));
        let caller = LegRef {
            call: one,
            leg: Call::CALLER,
        };
        assert_eq!(calls.leg_by_call_id("b@x"), Some(caller));
        assert_eq!(calls.leg_by_media(3), Some(caller));
        assert_eq!(
            calls.leg_by_call_id("a@x"),
            Some(LegRef { call: one, leg: b })
        );
        assert_eq!(calls[one].leg(b).map(|l| l.role), Some(Role::Transferor));
        assert_eq!(calls[one].caller().call_id(), "b@x");

        // The old caller leaves for another call, as a consultation's party does.
        let two = calls.add(call(sip_leg("c@x")));
        let moved = calls.take_leg(LegRef { call: one, leg: b }).expect("a leg");
        assert_eq!(calls.leg_by_call_id("a@x"), None);
        let at = calls.put_leg(two, moved, Role::Callee).expect("put");
        assert_eq!(calls.leg_by_call_id("a@x"), Some(at));
        assert_eq!(calls[two].callee().map(Leg::call_id), Some("a@x"));
        // The caller's place is never taken by a put.
        assert!(calls
            .take_leg(LegRef {
                call: two,
                leg: Call::CALLER
            })
            .is_none());
        calls.remove(one);
        let c = calls.remove(two).expect("call two");
        for l in c.legs().map(|(_, l)| l) {
            calls.forget_leg(l);
        }
        assert_eq!(calls.counts(), super::TableCounts::default());
    }
}
