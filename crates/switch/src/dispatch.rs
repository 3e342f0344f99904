//! The edge: `proxy.dispatch` sends the requests of the proxied domains (calls and REGISTERs)
//! to the nodes of a `[[dispatch]]` set instead of to registered contacts, through the proxy
//! role (proxy.rs), which keeps the caller's server transaction.
//!
//! - Selection: weighted rendezvous hashing of the Call-ID over the nodes that are up. A dialog's
//!   requests (a REGISTER and its authenticated retry, whose nonce only its node knows) land on
//!   one node, each node takes its weight's share, and a node going down moves only its own
//!   dialogs. Nothing is kept per dialog: in-dialog requests follow the edge's Record-Route to
//!   the node that answered.
//! - Health: every node gets an OPTIONS each `probe_interval_s`. A probe unanswered within
//!   `timeout_ms` (or the interval, if shorter), or answered 5xx, fails; `probe_failures` in a
//!   row and the node is down, so a node that dies is out within about interval × failures +
//!   timeout. A deadline the edge itself met late (its worker starved of CPU: the answers may
//!   be unread in its socket) fails no probe. Its first good answer (any other status: it is alive) and it is up again. Each worker probes
//!   for itself, so no worker waits on another's view.
//! - Failover (serial forking, RFC 3261 §16.7): a request its node answers 503, or does not
//!   answer at all (Timer B/F, or for an INVITE no response within `timeout_ms`), goes to the
//!   next live node not yet tried. A branch left for silence is cancelled when it answers
//!   (RFC 3261 §9.1: no CANCEL before a provisional). After the caller's CANCEL nothing is
//!   tried again.

use crate::config::DispatchSet;
use crate::engine::Engine;
use rustc_hash::FxHashMap;
use sip::header::HeaderName;
use sip::transaction::{ClientTxId, Peer, ServerTxId};
use sip::{Message, Method};
use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

/// A probe deadline checked this late was missed by the edge, not by the nodes: a worker's
/// loop wakes every 5–20 ms, so only a worker starved of CPU runs its timers this late, and
/// then the answers may be waiting unread in its socket.
const LATE_TIMER: Duration = Duration::from_millis(250);

/// What a worker knows of its dispatch sets, and of the requests it dispatched.
pub(crate) struct Dispatch {
    sets: Vec<Health>,
    /// Dispatched requests in progress, by their client transaction.
    branches: FxHashMap<ClientTxId, Branch>,
    /// Probes in flight: (set, node).
    probes: FxHashMap<ClientTxId, (usize, usize)>,
}

/// One set's nodes and timers.
struct Health {
    nodes: Vec<NodeHealth>,
    next_probe: Instant,
    /// When the probes in flight have failed if still unanswered.
    probes_by: Option<Instant>,
    /// INVITEs sent, by when their node must have answered something (in order: one timeout a set).
    waiting: VecDeque<(Instant, ClientTxId)>,
}

struct NodeHealth {
    up: bool,
    /// Probes failed in a row.
    failures: u32,
    /// The probe in flight.
    probe: Option<ClientTxId>,
    /// Totals for /metrics: probes failed, requests sent, requests failed over to another node.
    counts: crate::metrics::NodeCounts,
}

/// A dispatched request: its set, the nodes tried (the last is the one in progress).
struct Branch {
    set: usize,
    tried: Vec<usize>,
    /// Its node answered something: it is not left for silence.
    heard: bool,
    /// The caller cancelled: no other node is tried.
    cancelled: bool,
}

/// A node changed state, for the log.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Change {
    Down,
    Up,
}

impl Dispatch {
    /// Every node starts up, and the first probes go at `now`.
    pub(crate) fn new(sets: &[DispatchSet], now: Instant) -> Dispatch {
        Dispatch {
            sets: sets
                .iter()
                .map(|s| Health {
                    nodes: s
                        .nodes
                        .iter()
                        .map(|_| NodeHealth {
                            up: true,
                            failures: 0,
                            probe: None,
                            counts: Default::default(),
                        })
                        .collect(),
                    next_probe: now,
                    probes_by: None,
                    waiting: VecDeque::new(),
                })
                .collect(),
            branches: FxHashMap::default(),
            probes: FxHashMap::default(),
        }
    }

    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.sets
            .iter()
            .flat_map(|h| {
                [
                    Some(h.next_probe),
                    h.probes_by,
                    h.waiting.front().map(|w| w.0),
                ]
            })
            .flatten()
            .min()
    }

    /// Every node's counts, sets in order, for /metrics.
    pub(crate) fn node_counts(&self) -> impl Iterator<Item = crate::metrics::NodeCounts> + '_ {
        self.sets.iter().flat_map(|h| {
            h.nodes.iter().map(|n| crate::metrics::NodeCounts {
                up: n.up,
                ..n.counts
            })
        })
    }

    fn node_mut(&mut self, set: usize, node: usize) -> Option<&mut NodeHealth> {
        self.sets.get_mut(set).and_then(|h| h.nodes.get_mut(node))
    }

    fn is_up(&self, set: usize, node: usize) -> bool {
        self.sets
            .get(set)
            .and_then(|h| h.nodes.get(node))
            .is_some_and(|n| n.up)
    }

    /// Probes unanswered in time fail (the changes that makes are pushed on `changes`); returns
    /// the nodes to probe now: those of every set whose interval is up.
    pub(crate) fn probes_due(
        &mut self,
        cfg: &[DispatchSet],
        now: Instant,
        changes: &mut Vec<(usize, usize, Change)>,
    ) -> Vec<(usize, usize)> {
        let mut due = Vec::new();
        for (s, c) in cfg.iter().enumerate() {
            let Some(h) = self.sets.get_mut(s) else {
                continue;
            };
            if let Some(by) = h.probes_by.filter(|&t| t <= now) {
                h.probes_by = None;
                let counts = now.saturating_duration_since(by) < LATE_TIMER;
                for (i, n) in h.nodes.iter_mut().enumerate() {
                    if let Some(ctx) = n.probe.take() {
                        self.probes.remove(&ctx);
                        if counts {
                            changes.extend(fail(n, c.probe_failures).map(|ch| (s, i, ch)));
                        }
                    }
                }
            }
            if h.next_probe <= now {
                h.next_probe = now + c.probe_interval;
                h.probes_by = Some(now + c.timeout.min(c.probe_interval));
                due.extend((0..h.nodes.len()).map(|i| (s, i)));
            }
        }
        due
    }

    pub(crate) fn probe_sent(&mut self, set: usize, node: usize, ctx: ClientTxId) {
        if let Some(n) = self.sets.get_mut(set).and_then(|h| h.nodes.get_mut(node)) {
            n.probe = Some(ctx);
            self.probes.insert(ctx, (set, node));
        }
    }

    /// A probe's answer. None: `ctx` is not a probe in flight; else the node's change, if any.
    pub(crate) fn probe_answered(
        &mut self,
        ctx: ClientTxId,
        status: u16,
        cfg: &[DispatchSet],
    ) -> Option<Option<(usize, usize, Change)>> {
        let (s, i) = self.probes.remove(&ctx)?;
        let n = &mut self.sets[s].nodes[i];
        n.probe = None;
        let change = if status >= 500 {
            fail(n, cfg[s].probe_failures)
        } else {
            n.failures = 0;
            (!std::mem::replace(&mut n.up, true)).then_some(Change::Up)
        };
        Some(change.map(|c| (s, i, c)))
    }

    /// The next node for `call_id` in set `set`: up, not in `tried`.
    pub(crate) fn pick(
        &self,
        cfg: &[DispatchSet],
        set: usize,
        call_id: &str,
        tried: &[usize],
    ) -> Option<usize> {
        let nodes = &cfg.get(set)?.nodes;
        (0..nodes.len())
            .filter(|i| self.is_up(set, *i) && !tried.contains(i))
            .map(|i| (score(call_id, &nodes[i].uri, nodes[i].weight), i))
            .max_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, i)| i)
    }

    /// A request went to a node on `ctx`; an INVITE must hear from it by `answer_by`.
    fn sent(&mut self, ctx: ClientTxId, set: usize, tried: Vec<usize>, answer_by: Option<Instant>) {
        if let (Some(t), Some(h)) = (answer_by, self.sets.get_mut(set)) {
            h.waiting.push_back((t, ctx));
        }
        if let Some(n) = tried.last().and_then(|&i| self.node_mut(set, i)) {
            n.counts.dispatched += 1;
        }
        let b = Branch {
            set,
            tried,
            heard: false,
            cancelled: false,
        };
        self.branches.insert(ctx, b);
    }

    /// The node of `ctx` answered (a branch and a map look-up when nothing is dispatched).
    pub(crate) fn heard(&mut self, ctx: ClientTxId) -> bool {
        if self.branches.is_empty() {
            return false;
        }
        self.branches
            .get_mut(&ctx)
            .map(|b| b.heard = true)
            .is_some()
    }

    /// The caller cancelled the request on `ctx`.
    pub(crate) fn cancelled(&mut self, ctx: ClientTxId) {
        if let Some(b) = self.branches.get_mut(&ctx) {
            b.cancelled = true;
        }
    }

    pub(crate) fn forget(&mut self, ctx: ClientTxId) {
        if !self.branches.is_empty() {
            self.branches.remove(&ctx);
        }
    }

    /// INVITE branches whose node said nothing in time: (ctx, whether the caller cancelled).
    fn overdue(&mut self, now: Instant) -> Vec<(ClientTxId, bool)> {
        let mut out = Vec::new();
        for h in &mut self.sets {
            while let Some(&(t, ctx)) = h.waiting.front() {
                if t > now {
                    break;
                }
                h.waiting.pop_front();
                if let Some(b) = self.branches.get(&ctx).filter(|b| !b.heard) {
                    out.push((ctx, b.cancelled));
                }
            }
        }
        out
    }
}

/// One more failed probe; `Some(Down)` when that takes the node down.
fn fail(n: &mut NodeHealth, limit: u32) -> Option<Change> {
    n.failures = n.failures.saturating_add(1);
    n.counts.probes_failed += 1;
    (n.up && n.failures >= limit).then(|| {
        n.up = false;
        Change::Down
    })
}

/// A node's weighted rendezvous score for a Call-ID (the highest wins): `weight / -ln(u)` with
/// `u` uniform in (0, 1) from a hash of both, so each node wins its weight's share of Call-IDs.
fn score(call_id: &str, node: &str, weight: u32) -> f64 {
    let mut h = rustc_hash::FxHasher::default();
    call_id.hash(&mut h);
    node.hash(&mut h);
    // FxHash mixes little in its last step; a finaliser (splitmix64) spreads it evenly.
    let mut x = h.finish();
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    let u = ((x >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    f64::from(weight) / -u.ln()
}

impl Engine {
    /// The set a request of the proxied domains goes to, if any (`proxy.dispatch`).
    pub(crate) fn dispatch_set(&self) -> Option<usize> {
        self.s.proxy.dispatch
    }

    /// A REGISTER for a proxied domain goes to the dispatch set too: the nodes keep the
    /// registrations (in the store they share), not the edge.
    pub(crate) fn dispatches_register(&self, msg: &Message) -> bool {
        self.s.proxy.dispatch.is_some() && self.in_domains(msg)
    }

    /// A request the edge dispatches runs on its Call-ID's worker, where the node's responses
    /// arrive (the shell keeps a REGISTER on the worker that read it, and sends a digest answer
    /// to the worker of its nonce, which here is a node's): other workers hand it over.
    pub(crate) fn dispatch_hand_off(
        &mut self,
        msg: Message,
        peer: Peer,
        local: std::net::SocketAddr,
        late: bool,
    ) -> Option<Message> {
        if self.s.proxy.dispatch.is_none() || !self.in_domains(&msg) {
            return Some(msg);
        }
        let call_id = msg.header(HeaderName::CallId).unwrap_or_default();
        let worker = crate::engine::owner(call_id, self.s.workers);
        if worker == self.s.worker {
            return Some(msg);
        }
        let h = crate::io::HandOff {
            worker,
            msg,
            peer,
            local,
            late,
        };
        self.events
            .push_back(crate::io::Event::HandOff(Box::new(h)));
        None
    }

    /// A request for the dispatch set `set`: to the Call-ID's node, or 503 when none is up.
    pub(crate) fn dispatch_request(
        &mut self,
        stx: ServerTxId,
        msg: &Message,
        peer: Peer,
        set: usize,
        now: Instant,
    ) {
        if !self.dispatch_next(stx, msg, peer, set, Vec::new(), now) {
            let name = &self.s.dispatch[set].name;
            let w = format!("399 strowger \"no node of dispatch set {name} is up\"");
            let mut extra = vec![("Warning", w)];
            extra.extend(self.retry_after());
            self.reply(stx, msg, peer, 503, "Service Unavailable", &extra, now);
        }
    }

    /// Sends `msg` to the next live node of `set` not in `tried`; false if there is none.
    fn dispatch_next(
        &mut self,
        stx: ServerTxId,
        msg: &Message,
        peer: Peer,
        set: usize,
        mut tried: Vec<usize>,
        now: Instant,
    ) -> bool {
        let call_id = msg.header(HeaderName::CallId).unwrap_or_default();
        let Some(node) = self.dispatch.pick(&self.s.dispatch, set, call_id, &tried) else {
            return false;
        };
        let cfg = &self.s.dispatch[set];
        let hop = cfg.nodes[node].peer;
        let answer_by = (msg.method() == Some(&Method::Invite)).then(|| now + cfg.timeout);
        let ruri = msg.request_uri().unwrap_or_default().to_string();
        tried.push(node);
        if let Some(ctx) = self.forward(Some((stx, peer)), msg, &ruri, &[], hop, now) {
            self.dispatch.sent(ctx, set, tried, answer_by);
        }
        true
    }

    /// The request on `ctx` failed at its node (503, or silence): sent to the next live node,
    /// keeping the caller's server transaction. False (the failure goes to the caller as it
    /// is) if it was not dispatched, the caller cancelled, or no node is left.
    pub(crate) fn redispatch(&mut self, ctx: ClientTxId, now: Instant) -> bool {
        let Some(b) = self.dispatch.branches.get(&ctx).filter(|b| !b.cancelled) else {
            return false;
        };
        let (set, tried) = (b.set, b.tried.clone());
        let Some((stx, peer, req)) = self.proxy_forwarded(ctx) else {
            return false;
        };
        let call_id = req.header(HeaderName::CallId).unwrap_or_default();
        if self
            .dispatch
            .pick(&self.s.dispatch, set, call_id, &tried)
            .is_none()
        {
            return false;
        }
        if let Some(n) = tried.last().and_then(|&i| self.dispatch.node_mut(set, i)) {
            n.counts.failovers += 1;
        }
        self.proxy_forget(ctx);
        self.dispatch_next(stx, &req, peer, set, tried, now)
    }

    /// Sends the probes that are due and the INVITEs that waited too long on to the next node.
    pub(crate) fn dispatch_timers(&mut self, now: Instant) {
        if self.s.dispatch.is_empty() {
            return;
        }
        let mut changes = Vec::new();
        let sets = self.s.dispatch.clone();
        for (s, i) in self.dispatch.probes_due(&sets, now, &mut changes) {
            let node = &sets[s].nodes[i];
            let call_id = self.own_call_id();
            let bytes = self.options_request(node.peer, &node.uri, &call_id);
            let ctx = self.txs.send_request(bytes, node.peer, now);
            self.dispatch.probe_sent(s, i, ctx);
        }
        self.log_changes(changes);
        for (ctx, cancelled) in self.dispatch.overdue(now) {
            if cancelled {
                // Nothing more will be tried: the caller hears that now, not at Timer B.
                if let Some((stx, peer, req)) = self.proxy_forwarded(ctx) {
                    self.proxy_forget(ctx);
                    self.reply(stx, &req, peer, 487, "Request Terminated", &[], now);
                }
            } else if self.redispatch(ctx, now) {
                // Cancelled once it answers, if it ever does.
                self.txs.cancel(ctx, now);
            }
        }
    }

    /// A response on a client transaction: true if it answered a probe.
    pub(crate) fn probe_answered(&mut self, ctx: ClientTxId, msg: &Message) -> bool {
        if self.s.dispatch.is_empty() {
            return false;
        }
        let status = msg.status().unwrap_or(500);
        if status < 200 {
            return self.dispatch.probes.contains_key(&ctx);
        }
        let sets = self.s.dispatch.clone();
        match self.dispatch.probe_answered(ctx, status, &sets) {
            None => false,
            Some(change) => {
                self.log_changes(change.into_iter().collect());
                true
            }
        }
    }

    fn log_changes(&mut self, changes: Vec<(usize, usize, Change)>) {
        for (s, i, c) in changes {
            let set = &self.s.dispatch[s];
            let (name, uri) = (set.name.clone(), set.nodes[i].uri.clone());
            match c {
                Change::Down => self.warn(format!(
                    "dispatch set {name}: node {uri} is down ({} probes failed); new requests \
                     go to the other nodes",
                    set.probe_failures
                )),
                Change::Up => self.log(
                    crate::io::Level::Info,
                    None,
                    format!("dispatch set {name}: node {uri} is up"),
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn set(weights: &[u32]) -> Vec<DispatchSet> {
        let nodes = weights
            .iter()
            .enumerate()
            .map(|(i, w)| crate::config::DispatchNode {
                uri: format!("sip:127.0.0.{}:5060", i + 2),
                peer: Peer {
                    transport: sip::transaction::Transport::Udp,
                    addr: format!("127.0.0.{}:5060", i + 2).parse().unwrap(),
                },
                weight: *w,
            })
            .collect();
        vec![DispatchSet {
            name: "nodes".into(),
            nodes,
            probe_interval: Duration::from_secs(5),
            probe_failures: 2,
            timeout: Duration::from_secs(2),
        }]
    }

    #[test]
    fn call_ids_spread_by_weight_and_stick() {
        let cfg = set(&[2, 1, 1]);
        let d = Dispatch::new(&cfg, Instant::now());
        let mut counts = [0u32; 3];
        for k in 0..40_000 {
            let id = format!("{k:x}@caller");
            let n = d.pick(&cfg, 0, &id, &[]).unwrap();
            assert_eq!(
                d.pick(&cfg, 0, &id, &[]),
                Some(n),
                "the same Call-ID, the same node"
            );
            counts[n] += 1;
        }
        // 50 %, 25 %, 25 %, within 1.5 points.
        for (n, want) in [(0, 20_000), (1, 10_000), (2, 10_000)] {
            assert!(counts[n].abs_diff(want) < 600, "{counts:?}");
        }
    }

    #[test]
    fn failover_skips_the_tried_and_a_down_node_moves_only_its_own() {
        let cfg = set(&[1, 1, 1]);
        let t0 = Instant::now();
        let mut d = Dispatch::new(&cfg, t0);
        let ids: Vec<String> = (0..3000).map(|k| format!("{k}@x")).collect();
        let before: Vec<usize> = ids
            .iter()
            .map(|i| d.pick(&cfg, 0, i, &[]).unwrap())
            .collect();
        let first = before[0];
        let second = d.pick(&cfg, 0, &ids[0], &[first]).unwrap();
        assert_ne!(first, second);
        let third = d.pick(&cfg, 0, &ids[0], &[first, second]).unwrap();
        assert_eq!(d.pick(&cfg, 0, &ids[0], &[first, second, third]), None);

        d.sets[0].nodes[1].up = false;
        for (id, was) in ids.iter().zip(&before) {
            let now = d.pick(&cfg, 0, id, &[]).unwrap();
            assert_ne!(now, 1);
            if *was != 1 {
                assert_eq!(now, *was, "{id} moved though its node is up");
            }
        }
    }

    #[test]
    fn down_after_n_failed_probes_up_after_one_good_one() {
        let cfg = set(&[1, 1]);
        let s = Duration::from_secs;
        let t0 = Instant::now();
        let mut d = Dispatch::new(&cfg, t0);
        let mut ch = Vec::new();
        let mut txs = sip::transaction::Transactions::new(Default::default());
        let mut round = |d: &mut Dispatch, at, ch: &mut Vec<_>| {
            let due = d.probes_due(&cfg, at, ch);
            assert_eq!(due, [(0, 0), (0, 1)]);
            due.iter()
                .map(|&(s, i)| {
                    let ctx = ctx(&mut txs);
                    d.probe_sent(s, i, ctx);
                    ctx
                })
                .collect::<Vec<_>>()
        };
        let p = round(&mut d, t0, &mut ch);
        assert_eq!(
            d.next_deadline(),
            Some(t0 + s(2)),
            "the probes' answers are due"
        );
        // Node 0 answers 200, node 1 is silent; then node 1 answers 500.
        assert_eq!(d.probe_answered(p[0], 200, &cfg), Some(None));
        assert!(d.probes_due(&cfg, t0 + s(2), &mut ch).is_empty());
        assert!(ch.is_empty(), "one failure is not down: {ch:?}");
        assert_eq!(d.sets[0].nodes[1].failures, 1);
        let p = round(&mut d, t0 + s(5), &mut ch);
        assert_eq!(
            d.probe_answered(p[1], 500, &cfg),
            Some(Some((0, 1, Change::Down)))
        );
        assert!(!d.is_up(0, 1) && d.is_up(0, 0));
        assert_eq!(d.pick(&cfg, 0, "any", &[]), Some(0));
        // A 404 is an answer: the node is alive.
        let p = round(&mut d, t0 + s(10), &mut ch);
        assert_eq!(
            d.probe_answered(p[1], 404, &cfg),
            Some(Some((0, 1, Change::Up)))
        );
        assert_eq!(d.probe_answered(p[1], 200, &cfg), None, "answered once");
    }

    #[test]
    fn a_probe_deadline_the_edge_met_late_fails_no_node() {
        let cfg = set(&[1, 1]);
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        let mut d = Dispatch::new(&cfg, t0);
        let mut txs = sip::transaction::Transactions::new(Default::default());
        let mut ch = Vec::new();
        let mut probe = |d: &mut Dispatch, at, ch: &mut Vec<_>| {
            for (s, i) in d.probes_due(&cfg, at, ch) {
                d.probe_sent(s, i, ctx(&mut txs));
            }
        };
        // Probes every 5 s, answers due 2 s after. Starved twice: each deadline is checked
        // 1.5 s late, and the nodes' answers are not read by then.
        for at in [t0, t0 + ms(3500), t0 + s(5), t0 + ms(8500)] {
            probe(&mut d, at, &mut ch);
        }
        assert_eq!(
            d.sets[0].nodes[0].failures, 0,
            "the edge's lateness is no failure"
        );
        assert!(ch.is_empty(), "no node is down: {ch:?}");
        assert!(d.is_up(0, 0) && d.is_up(0, 1));
        // Checked on time (10 ms after the deadline), silence counts: twice and they are down.
        probe(&mut d, t0 + s(10), &mut ch);
        probe(&mut d, t0 + ms(12_010), &mut ch);
        assert_eq!(d.sets[0].nodes[1].failures, 1);
        assert!(ch.is_empty());
        probe(&mut d, t0 + s(15), &mut ch);
        probe(&mut d, t0 + ms(17_010), &mut ch);
        assert_eq!(ch, [(0, 0, Change::Down), (0, 1, Change::Down)]);
    }

    /// Client transaction ids, as a transaction layer makes them.
    fn ctx(txs: &mut sip::transaction::Transactions) -> ClientTxId {
        let peer = Peer {
            transport: sip::transaction::Transport::Udp,
            addr: "127.0.0.2:5060".parse().unwrap(),
        };
        txs.send_request(
            b"OPTIONS sip:x SIP/2.0\r\n\r\n".to_vec(),
            peer,
            Instant::now(),
        )
    }
}
