//! Call parking: the `park` step puts the caller in the first free slot of a lot (the shared
//! `ParkLots` says which call holds which slot, on which worker), tells the slot number and
//! plays music on hold; `retrieve` (dialling the slot) joins whoever dials it to the parked
//! call — on the worker that holds it, where the hand-off (handoff.rs) brought the retriever;
//! when the lot's timeout passes, the parked call rings back whoever parked it (`PARKER`).
//!
//! With a shared store, a slot is also claimed for this node (cluster.rs): a slot another node
//! holds is not taken here, and whoever dials it here is bridged to that node, where the
//! retrieval above joins the calls.

use crate::call::{Call, LegIdx, Wait};
use crate::cluster::{lot_set, Why, CLAIM_TTL};
use crate::engine::Engine;
use crate::io::Level;
use crate::registrar::StoreReply;
use rustc_hash::FxHashMap;
use std::time::Instant;
use store::Claim;

/// This worker's parked calls, by call.
#[derive(Default)]
pub(crate) struct Parking {
    here: FxHashMap<usize, ParkedCall>,
}

struct ParkedCall {
    slot: String,
    lot: String,
    /// The parked party's Call-ID (what the shared lot knows the call by).
    call_id: String,
    until: Instant,
    stage: Stage,
}

/// Where a parked call's own program stands (`Engine::parked_step`).
enum Stage {
    /// Telling `leg` the slot: the digits still to say. Another leg than the parked caller
    /// (a transferor) is told while the caller hears its music already.
    Announce { leg: LegIdx, left: Vec<char> },
    /// Music on hold to start.
    Music,
    /// Held: nothing to do until it is retrieved, times out or hangs up.
    Held,
}

impl Parking {
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.here.values().map(|p| p.until).min()
    }
}

impl Engine {
    /// The `park` step: answers the caller, takes a slot of `lot`, sets PARKINGSLOT (and
    /// PARKER, unless the dialplan set it: the authenticated caller), and announces the slot.
    pub(crate) fn park(&mut self, call: usize, lot: &str, now: Instant) {
        let parking = self.s.parking.clone();
        let Some(l) = parking.lots.get(lot) else {
            self.warn_call(
                call,
                format!("park: no lot {lot:?}: add [parking.{lot}] with slots = \"801-820\" to the configuration, or name a lot that exists"),
            );
            return self.hangup(call, 34, "switch", None, now);
        };
        if !self.answer(call, now) {
            return;
        }
        if self.s.cluster.is_some() {
            // The slots this node holds are not asked for (one parked while the store was away
            // may not be in it).
            let lots = &self.s.rendezvous.lots;
            let free = l.slots.iter().filter(|s| lots.find(s).is_none());
            let names = free.cloned().collect();
            let c = &mut self.calls[call];
            c.wait = Wait::Store;
            let gen = c.timer_gen;
            let why = Why::Park {
                call,
                gen,
                lot: lot.to_string(),
            };
            return self.cluster_claim(lot_set(lot), names, l.timeout + CLAIM_TTL, why);
        }
        self.park_in(call, lot, None, now);
    }

    /// The store's answer to a `park` step's claim: the slot it took, none free (every slot
    /// held by some node), or no answer (the store away: a slot free on this node will do).
    pub(crate) fn slot_claimed(
        &mut self,
        call: usize,
        gen: u64,
        lot: &str,
        reply: Option<StoreReply>,
        now: Instant,
    ) {
        let here = self.calls.get(call);
        if here.is_none_or(|c| !c.awaits_store(gen)) {
            // The caller left meanwhile: the slot it got is free again.
            if let Some(StoreReply::Claimed(Claim::Taken(slot))) = reply {
                self.cluster_release(lot_set(lot), slot);
            }
            return;
        }
        self.calls[call].wait = Wait::None;
        let claimed = match reply {
            Some(StoreReply::Claimed(Claim::Taken(slot))) => Some(slot),
            Some(StoreReply::Claimed(Claim::Held(_))) => {
                let msg = format!("park: every slot of lot {lot:?} is taken on some node: widen parking.{lot}.slots");
                self.warn_call(call, msg);
                return self.hangup(call, 34, "switch", None, now);
            }
            _ => None,
        };
        self.park_in(call, lot, claimed.as_deref(), now);
    }

    /// Parks the answered `call` in `slot` of `lot` (a slot claimed for this node), or the first
    /// free on this node.
    fn park_in(&mut self, call: usize, lot: &str, slot: Option<&str>, now: Instant) {
        let parking = self.s.parking.clone();
        let Some(l) = parking.lots.get(lot) else {
            return;
        };
        let until = now + l.timeout;
        let c = &mut self.calls[call];
        let call_id = c.caller().call_id().to_string();
        let lots = &self.s.rendezvous.lots;
        let worker = self.s.worker;
        let taken = slot
            .and_then(|s| lots.take(std::iter::once(s), worker, &call_id))
            .or_else(|| lots.take(l.slots.iter().map(String::as_str), worker, &call_id));
        let Some(slot) = taken else {
            let msg =
                format!("park: every slot of lot {lot:?} is taken: widen parking.{lot}.slots");
            self.warn_call(call, msg);
            return self.hangup(call, 34, "switch", None, now);
        };
        let slot = slot.to_string();
        c.vars.set("PARKINGSLOT", slot.as_str());
        if c.vars.get("PARKER").is_none() {
            if let Some(u) = &c.user {
                let parker = format!("user/{}", u.name);
                c.vars.set("PARKER", parker);
            }
        }
        let message = format!("parked in slot {slot} of lot {lot}");
        self.log(Level::Info, Some(&call_id), message);
        let parked = ParkedCall {
            slot,
            lot: lot.to_string(),
            call_id,
            until,
            stage: Stage::Music,
        };
        self.parking.here.insert(call, parked);
        // Parked by a transfer (transfer.rs), the transferor is told, while its leg lasts.
        let parker = self.transferor(call).unwrap_or(Call::CALLER);
        self.announce_slot(call, parker);
    }

    /// Tells leg `leg` of parked call `call` its slot, digit by digit, and plays the parked
    /// party music on hold (after the slot when it is the one told). The `park` step announces
    /// to the caller it parks, or to the transferor when a transfer brought the caller there.
    pub(crate) fn announce_slot(&mut self, call: usize, leg: LegIdx) {
        let Some(p) = self.parking.here.get_mut(&call) else {
            return;
        };
        let left = p.slot.chars().rev().collect();
        p.stage = Stage::Announce { leg, left };
        if leg != Call::CALLER {
            let music = self.s.parking.lots.get(&p.lot).map(|l| l.music.clone());
            self.hold_music(call, music.unwrap_or_default());
        }
        if let Some(c) = self.calls.get_mut(call) {
            if !matches!(c.wait, Wait::File | Wait::Playback) {
                c.wait = Wait::None;
                self.calls.run_later(call);
            }
        }
    }

    /// A parked call's program: the next digit of its slot, then its music, then holding. True
    /// if the call is parked (its dialplan program waits until it is no longer).
    pub(crate) fn parked_step(&mut self, call: usize) -> bool {
        let Some(p) = self.parking.here.get_mut(&call) else {
            return false;
        };
        let lot = self.s.parking.lots.get(&p.lot);
        match &mut p.stage {
            Stage::Announce { leg, left } => {
                let leg = *leg;
                let dir = lot.map_or("", |l| l.announce.as_str());
                // A leg gone meanwhile (a transferor that hung up) hears nothing more.
                let heard = self.calls[call].leg(leg).is_some_and(|l| l.media.is_some());
                match left.pop().filter(|_| heard && !dir.is_empty()) {
                    Some(d) => {
                        let file = format!("{}/{d}.wav", dir.trim_end_matches('/'));
                        self.play_file(call, leg, file, false, true);
                    }
                    // The caller's music is on already when another leg was told.
                    None if leg == Call::CALLER => p.stage = Stage::Music,
                    None => p.stage = Stage::Held,
                }
            }
            Stage::Music => {
                p.stage = Stage::Held;
                let music = lot.map(|l| l.music.clone()).unwrap_or_default();
                self.hold_music(call, music);
            }
            Stage::Held => self.calls[call].wait = Wait::Forever,
        }
        true
    }

    /// Music on hold for the parked party: the lot's class (`[moh.NAME]`), which becomes the
    /// call's `MOH`.
    fn hold_music(&mut self, call: usize, class: String) {
        let c = &mut self.calls[call];
        if !class.is_empty() {
            c.vars.set("MOH", class);
        }
        c.wait = Wait::Forever;
        self.start_moh(call, Call::CALLER);
    }

    /// The `retrieve` step: joins the caller to the call parked in `slot` on this worker (the
    /// hand-off brought the caller here); an empty slot is refused with 404.
    pub(crate) fn retrieve(&mut self, call: usize, slot: &str, now: Instant) {
        let lots = &self.s.rendezvous.lots;
        // Found by its slot here: its caller may have been replaced (RFC 3891) meanwhile.
        let here = &self.parking.here;
        let parked = lots
            .find(slot)
            .filter(|p| p.worker == self.s.worker)
            .and_then(|_| here.iter().find(|(_, p)| p.slot == slot))
            .map(|(c, _)| *c)
            .filter(|p| *p != call);
        let Some(parked) = parked else {
            // Not here: another node may hold it.
            let lot = self
                .s
                .parking
                .lots
                .iter()
                .find(|(_, l)| l.slots.iter().any(|s| s == slot));
            if let (Some(_), Some((lot, _))) = (&self.s.cluster, lot) {
                let set = lot_set(lot);
                let c = &mut self.calls[call];
                c.wait = Wait::Store;
                let gen = c.timer_gen;
                let slot = slot.to_string();
                let why = Why::Retrieve {
                    call,
                    gen,
                    slot: slot.clone(),
                };
                return self.cluster_holder(set, slot, why);
            }
            return self.nothing_parked(call, slot, now);
        };
        self.unpark(parked);
        if !self.answer(call, now) {
            return;
        }
        self.join(call, parked);
    }

    /// Who holds a slot this node has no call in: another node is where the retriever is
    /// bridged to (the slot's extension there).
    pub(crate) fn slot_located(
        &mut self,
        call: usize,
        gen: u64,
        slot: &str,
        reply: Option<StoreReply>,
        now: Instant,
    ) {
        let Some(exten) = self.store_answered(call, gen) else {
            return;
        };
        let me = self.s.cluster.as_deref();
        match reply {
            Some(StoreReply::Holder(Some(node)))
                if Some(node.as_str()) != me && !self.came_from(call, &node) =>
            {
                self.bridge_to_node(call, &node, &exten, now)
            }
            _ => self.nothing_parked(call, slot, now),
        }
    }

    /// `retrieve` of an empty slot: refused (404).
    fn nothing_parked(&mut self, call: usize, slot: &str, now: Instant) {
        let call_id = self.calls[call].caller().call_id().to_string();
        let message = format!("retrieve: no call is parked in slot {slot:?}");
        self.log(Level::Info, Some(&call_id), message);
        self.hangup(call, 1, "switch", None, now);
    }

    /// The call leaves its slot (retrieved, timed out or gone), here and in the shared store.
    fn unpark(&mut self, call: usize) -> Option<ParkedCall> {
        let p = self.parking.here.remove(&call)?;
        self.s.rendezvous.lots.release(&p.slot, &p.call_id);
        self.cluster_release(lot_set(&p.lot), p.slot.clone());
        Some(p)
    }

    /// A parked call ended: its slot is free again.
    pub(crate) fn parked_gone(&mut self, call: usize) {
        self.unpark(call);
    }

    /// Parked calls whose time is up ring back whoever parked them (`PARKER`, a dial string
    /// such as `user/1001`), or go to their lot's `timeout_exten`; without either they are
    /// hung up. If the ring-back fails, the park rule's next steps run.
    pub(crate) fn park_timeouts(&mut self, now: Instant) {
        if self.parking.here.values().all(|p| p.until > now) {
            return;
        }
        let due: Vec<usize> = self
            .parking
            .here
            .iter()
            .filter(|(_, p)| p.until <= now)
            .map(|(c, _)| *c)
            .collect();
        for call in due {
            let Some(p) = self.unpark(call) else {
                continue;
            };
            let message = format!("parked call in slot {} timed out", p.slot);
            self.log(Level::Info, Some(&p.call_id), message);
            let parking = self.s.parking.clone();
            let Some(lot) = parking.lots.get(&p.lot) else {
                continue;
            };
            let c = &mut self.calls[call];
            c.wait = Wait::None;
            if let Some(parker) = c.vars.get("PARKER").map(str::to_string) {
                // For as long again as it was parked.
                let ring_back = crate::hunt::BridgeStep {
                    uri: parker,
                    timeout: lot.timeout,
                    strategy: None,
                    member_timeout: None,
                    turn: Default::default(),
                };
                self.bridge_step(call, ring_back, now);
                continue;
            }
            let route = lot
                .timeout_exten
                .as_ref()
                .and_then(|e| Some((e, self.dialplan.route(&c.cdr.context, e, &c.vars)?)));
            match route {
                Some((exten, program)) => {
                    c.program = program;
                    c.cdr.exten = exten.clone();
                    self.calls.run_later(call);
                }
                None => {
                    if let Some(e) = &lot.timeout_exten {
                        let context = &c.cdr.context;
                        let msg = format!("parking.{}.timeout_exten {e:?}: context {context} has no rule for it; add one or change the key", p.lot);
                        self.warn_call(call, msg);
                    }
                    self.hangup(call, 16, "switch", None, now)
                }
            }
        }
    }
}
