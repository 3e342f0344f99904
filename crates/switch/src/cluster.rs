//! What the nodes sharing one Redis hold for each other: which node hosts a conference room or
//! a call queue, which holds a park slot, and who is logged in to each queue. Each place is a
//! claim in the store (`store::Claims`: a name, its holder — this node's `cluster.node_uri` —
//! and when the claim lapses), asked for as a store operation like any other, so no worker ever
//! waits on Redis. Only calls that use a room, a queue or a slot touch the store; a room's or a
//! queue's claim is renewed while it has callers.
//!
//! A caller that reaches a room, a queue or a slot another node holds is bridged there, to the
//! same extension on that node (the nodes share the dialplan, and trust each other's
//! addresses). While the store cannot be reached, each node keeps its rooms, queues and slots
//! to itself, as a single node does: logged once when it starts and once when it ends.

use crate::call::Wait;
use crate::engine::Engine;
use crate::io::Level;
use crate::registrar::{Pending, StoreOp, StoreReply, StoreResult};
use std::time::{Duration, Instant};
use store::Claim;

/// How long a room's or a queue's claim lives unless renewed (a node that dies frees them
/// within this time), and how much longer than its lot's timeout a park slot's claim lives.
pub(crate) const CLAIM_TTL: Duration = Duration::from_secs(60);
/// How often a node renews the claims of its rooms and queues in use.
pub(crate) const RENEW_EVERY: Duration = Duration::from_secs(20);
/// How long a caller bridged to the node that hosts a room or holds a slot waits for it.
const BRIDGE_TIMEOUT: Duration = Duration::from_secs(30);

/// This worker's view of the shared store's claims.
#[derive(Default)]
pub(crate) struct Cluster {
    /// The store could not be reached at the last claim (the episode is logged once).
    away: bool,
}

/// A place whose callers all meet on the one node that claimed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Hosted {
    /// A conference room (conference.rs).
    Room(String),
    /// A call queue (queues.rs).
    Queue(String),
}

impl Hosted {
    /// Its claim set (one per place, so a Redis Cluster spreads them) and its name there.
    fn claim(&self) -> (String, String) {
        match self {
            Hosted::Room(r) => (format!("room:{r}"), r.clone()),
            Hosted::Queue(q) => (format!("queue:{q}"), q.clone()),
        }
    }
}

impl std::fmt::Display for Hosted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Hosted::Room(r) => write!(f, "conference {r}"),
            Hosted::Queue(q) => write!(f, "queue {q}"),
        }
    }
}

/// What a claim operation was for.
pub(crate) enum Why {
    /// A caller of a room or a queue, before anything is answered.
    Host {
        call: usize,
        gen: u64,
        place: Hosted,
    },
    /// A room or a queue of this node renewing its claim.
    Renew(Hosted),
    /// A `park` step's slot (parking.rs).
    Park { call: usize, gen: u64, lot: String },
    /// A `retrieve` step looking for a slot parked on another node (parking.rs).
    Retrieve { call: usize, gen: u64, slot: String },
    /// A queue's roster read while this node hosts it (queues.rs).
    Roster { queue: String },
    /// A claim given up or a roster written: only a failure is of interest.
    Write,
}

/// The claim set of park lot `lot`: its slots in one set, so the first free is one operation.
pub(crate) fn lot_set(lot: &str) -> String {
    format!("park:{lot}")
}

/// `exten` at the node whose URI is `node` (`sip:HOST[:PORT][;params]`).
pub(crate) fn at_node(node: &str, exten: &str) -> String {
    let rest = node.strip_prefix("sip:").unwrap_or(node);
    format!("sip:{exten}@{rest}")
}

impl Engine {
    /// This node's URI when rooms, queues and slots are claimed in a shared store.
    pub(crate) fn cluster_node(&self) -> Option<String> {
        self.s.cluster.as_deref().map(str::to_string)
    }

    /// Asks the store for the first free of `names` in `set`, for this node, for `ttl`.
    pub(crate) fn cluster_claim(
        &mut self,
        set: String,
        names: Vec<String>,
        ttl: Duration,
        why: Why,
    ) {
        let Some(holder) = self.cluster_node() else {
            return;
        };
        let op = StoreOp::Claim {
            set,
            names,
            holder,
            now: self.clock.unix(),
            ttl_s: ttl.as_secs().max(1),
        };
        self.store_op(op, Pending::Cluster(why));
    }

    /// Gives up this node's claim of `name` in `set`.
    pub(crate) fn cluster_release(&mut self, set: String, name: String) {
        let Some(holder) = self.cluster_node() else {
            return;
        };
        let op = StoreOp::Release { set, name, holder };
        self.store_op(op, Pending::Cluster(Why::Write));
    }

    /// Claims `place` for this node, for caller `call` (which waits for the answer, unanswered):
    /// `hosted` goes on with it.
    pub(crate) fn cluster_host(&mut self, call: usize, place: Hosted) {
        let c = &mut self.calls[call];
        c.wait = Wait::Store;
        let gen = c.timer_gen;
        let (set, name) = place.claim();
        let why = Why::Host { call, gen, place };
        self.cluster_claim(set, vec![name], CLAIM_TTL, why);
    }

    /// Renews this node's claim of `place`, which still has callers here.
    pub(crate) fn cluster_renew(&mut self, place: Hosted) {
        let (set, name) = place.claim();
        self.cluster_claim(set, vec![name], CLAIM_TTL, Why::Renew(place));
    }

    /// Gives up this node's claim of `place`, whose last caller here left.
    pub(crate) fn cluster_unhost(&mut self, place: &Hosted) {
        let (set, name) = place.claim();
        self.cluster_release(set, name);
    }

    /// Which node hosts the caller's place: another one is where the caller is bridged to (its
    /// extension there); this one, or none known while the store is away, hosts it here.
    fn hosted(
        &mut self,
        call: usize,
        gen: u64,
        place: Hosted,
        reply: Option<StoreReply>,
        now: Instant,
    ) {
        let Some(exten) = self.store_answered(call, gen) else {
            return;
        };
        let taken = match reply {
            Some(StoreReply::Claimed(Claim::Held(node))) if !node.is_empty() => {
                if !self.came_from(call, &node) {
                    return self.bridge_to_node(call, &node, &exten, now);
                }
                self.warn_call(call, format!("{place}: node {node} sent this caller here but holds it itself: hosted here too"));
                false
            }
            Some(StoreReply::Claimed(Claim::Taken(_))) => true,
            _ => false,
        };
        match place {
            Hosted::Room(room) => self.conference_enter(call, room, now),
            Hosted::Queue(queue) => self.queue_hosted(call, queue, taken, now),
        }
    }

    /// A renewal's answer: another node holding the place means it took it while this one
    /// could not reach the store; the two halves meet again once one of them empties.
    fn renewed(&mut self, place: &Hosted, reply: Option<StoreReply>) {
        if let Some(StoreReply::Claimed(Claim::Held(node))) = reply {
            self.warn(format!("{place}: node {node} hosts it too (it took it while this node could not reach the store); callers on each node meet only their own node's until one side empties"));
        }
    }

    /// Asks who holds `name` in `set`.
    pub(crate) fn cluster_holder(&mut self, set: String, name: String, why: Why) {
        let now = self.clock.unix();
        self.store_op(StoreOp::Holder { set, name, now }, Pending::Cluster(why));
    }

    /// The extension `call` dialled, if it was waiting for the store's answer `gen` (where its
    /// room, queue or parking slot is held), which it has now; None when it left or moved on.
    pub(crate) fn store_answered(&mut self, call: usize, gen: u64) -> Option<String> {
        let c = self.calls.get_mut(call)?;
        if !c.awaits_store(gen) {
            return None;
        }
        c.wait = Wait::None;
        Some(c.cdr.exten.clone())
    }

    /// Whether `call` came from node `node` (its caller is that node's bridge): sending it back
    /// there would loop, were the two nodes to disagree for a moment on who holds what.
    pub(crate) fn came_from(&self, call: usize, node: &str) -> bool {
        let from = self.calls[call].caller().peer_addr();
        sip::Uri::parse(node)
            .ok()
            .as_ref()
            .and_then(crate::bridge::resolve)
            .is_some_and(|p| p.addr == from)
    }

    /// Bridges `call` to `exten` on the node `node`, where its room, queue or slot is.
    pub(crate) fn bridge_to_node(&mut self, call: usize, node: &str, exten: &str, now: Instant) {
        let uri = at_node(node, exten);
        let call_id = self.calls[call].caller().call_id().to_string();
        let msg = format!("{exten} is on node {node}: bridged there");
        self.log(Level::Info, Some(&call_id), msg);
        let b = crate::hunt::BridgeStep {
            uri,
            timeout: BRIDGE_TIMEOUT,
            strategy: None,
            member_timeout: None,
            turn: Default::default(),
        };
        self.bridge_step(call, b, now);
    }

    /// A claim operation's answer: the store's reply, or None while the store is away (logged
    /// once per episode: the caller then goes on as a single node would).
    fn cluster_reply(&mut self, result: StoreResult) -> Option<StoreReply> {
        match result {
            Ok(r) => {
                if std::mem::take(&mut self.cluster.away) {
                    let msg = "cluster: the store answers again: conference rooms, queues and park slots are shared with the other nodes again";
                    self.log(Level::Info, None, msg.into());
                }
                Some(r)
            }
            Err(e) => {
                if !std::mem::replace(&mut self.cluster.away, true) {
                    self.warn(format!("cluster: {e}: conference rooms, queues (with their configured members) and park slots stay on this node until the store answers again"));
                }
                None
            }
        }
    }

    pub(crate) fn cluster_answered(&mut self, why: Why, result: StoreResult, now: Instant) {
        let reply = self.cluster_reply(result);
        match why {
            Why::Host { call, gen, place } => self.hosted(call, gen, place, reply, now),
            Why::Renew(place) => self.renewed(&place, reply),
            Why::Park { call, gen, lot } => self.slot_claimed(call, gen, &lot, reply, now),
            Why::Retrieve { call, gen, slot } => self.slot_located(call, gen, &slot, reply, now),
            Why::Roster { queue } => self.queue_roster(&queue, reply),
            Why::Write => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rooms_and_queues_are_claimed_in_sets_of_their_own() {
        let room = Hosted::Room("8000".into());
        let queue = Hosted::Queue("8000".into());
        assert_eq!(room.claim(), ("room:8000".into(), "8000".into()));
        assert_eq!(queue.claim(), ("queue:8000".into(), "8000".into()));
        assert_eq!(queue.to_string(), "queue 8000");
    }

    #[test]
    fn an_extension_at_a_node() {
        assert_eq!(
            at_node("sip:127.0.0.2:5070", "8000"),
            "sip:8000@127.0.0.2:5070"
        );
        assert_eq!(
            at_node("sip:10.0.0.2;transport=tcp", "701"),
            "sip:701@10.0.0.2;transport=tcp"
        );
    }
}
