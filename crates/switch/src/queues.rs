//! Call queues (ACD) on one worker: the `queue`, `queue_login` and `queue_logout` steps, and
//! this worker's waiting callers. Who waits in what order and which agent is free is the
//! shared board's (queues/board.rs); a worker dials the agents the board offers its own
//! callers (the outbound legs are the caller's worker's, as for any bridge), plays them music
//! and announcements, and tells the board what happened (answered, busy, no answer, hung up).
//! A worker with callers waiting looks at the board every `CHECK` and at once after its own
//! queue events.
//!
//! With `[cluster]`, a queue lives on one node at a time: the node its first caller reaches
//! claims it (cluster.rs) until its last caller there is gone, and callers reaching other nodes
//! are bridged to it. Logins and logouts are written to the store's roster of the queue, which
//! the hosting node reads when it takes the queue and every `ROSTER_EVERY` while callers wait,
//! so every node rings the same agents (found, as always, through the location store).

pub(crate) mod announce;
mod board;

pub use board::{Action, Board, Stats};

use crate::call::{Call, Wait};
use crate::cluster::{Hosted, Why, RENEW_EVERY};
use crate::config::Queue as Config;
use crate::engine::Engine;
use crate::io::Level;
use crate::registrar::{Pending, StoreOp, StoreReply};
use announce::{announcement, prompts};
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a worker with callers waiting looks at the board (other workers' callers leaving
/// or agents freed show up by then).
const CHECK: Duration = Duration::from_millis(250);
/// How often a node hosting a queue with callers waiting reads its roster (a login on another
/// node counts here by then).
const ROSTER_EVERY: Duration = Duration::from_secs(2);

/// This worker's callers in queues.
#[derive(Default)]
pub(crate) struct Queued {
    calls: FxHashMap<usize, QueueCall>,
    by_ticket: FxHashMap<u64, usize>,
    next_check: Option<Instant>,
    /// With `[cluster]` and callers here: when the rosters are read next, and the claims
    /// renewed.
    roster_at: Option<Instant>,
    renew_at: Option<Instant>,
    /// The sound directories whose prompts were asked of the shell.
    loaded: FxHashSet<String>,
}

impl Queued {
    /// When the worker next looks at the board.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        [self.next_check, self.roster_at]
            .into_iter()
            .flatten()
            .min()
    }

    fn check_at(&mut self, at: Instant) {
        self.next_check = Some(self.next_check.map_or(at, |t| t.min(at)));
    }
}

struct QueueCall {
    /// The call's timer generation: store answers for an older call in its slot are dropped.
    gen: u64,
    cfg: Arc<Config>,
    ticket: u64,
    phase: Phase,
    next_announce: Option<Instant>,
    /// While an announcement plays: its prompts still to come.
    announcing: Option<VecDeque<String>>,
}

enum Phase {
    Waiting,
    /// Agents offered by the board: those whose phones are being looked up, and the legs
    /// ringing (each leg's Call-ID and its agent).
    Dialing {
        locating: Vec<Box<str>>,
        legs: Vec<(String, Box<str>)>,
    },
    Connected {
        agent: Box<str>,
    },
}

impl Engine {
    /// `queue NAME`: with `[cluster]`, first which node hosts the queue, unless this one does
    /// already (cluster.rs); then `queue_join`.
    pub(crate) fn queue_step(&mut self, call: usize, queue: &str, now: Instant) {
        let known = self.s.queues.config(queue).is_some();
        if self.s.cluster.is_none() || !known || self.s.queues.hosts(queue) {
            return self.queue_join(call, queue, now);
        }
        self.cluster_host(call, Hosted::Queue(queue.to_string()));
    }

    /// The queue is this node's (claimed, or the store is away): the caller joins here, and
    /// a queue just claimed takes the cluster's logins first.
    pub(crate) fn queue_hosted(&mut self, call: usize, queue: String, taken: bool, now: Instant) {
        if taken {
            self.read_roster(queue.clone());
        }
        self.queue_join(call, &queue, now);
    }

    fn read_roster(&mut self, queue: String) {
        let op = StoreOp::Roster {
            roster: roster(&queue),
        };
        self.store_op(op, Pending::Cluster(Why::Roster { queue }));
    }

    /// A roster read: its logins and logouts count on this node's board (None: the store is
    /// away, and the board keeps what it had, its configured members at first).
    pub(crate) fn queue_roster(&mut self, queue: &str, reply: Option<StoreReply>) {
        let Some(StoreReply::Roster(members)) = reply else {
            return;
        };
        for (user, on) in members {
            self.s.queues.log_in(queue, &user, on);
        }
    }

    /// With `[cluster]`: reads the rosters of the queues this worker has callers waiting in,
    /// and renews the claims of those it has callers in, when due.
    fn queue_cluster_tick(&mut self, now: Instant) {
        if self.queued.roster_at.is_none_or(|t| t > now) {
            return;
        }
        let mut waiting: Vec<String> = Vec::new();
        let mut held: Vec<String> = Vec::new();
        for q in self.queued.calls.values() {
            let name = &q.cfg.name;
            if !matches!(q.phase, Phase::Connected { .. }) && !waiting.contains(name) {
                waiting.push(name.clone());
            }
            if !held.contains(name) {
                held.push(name.clone());
            }
        }
        if held.is_empty() {
            self.queued.roster_at = None;
            self.queued.renew_at = None;
            return;
        }
        self.queued.roster_at = Some(now + ROSTER_EVERY);
        for queue in waiting {
            self.read_roster(queue);
        }
        if self.queued.renew_at.is_some_and(|t| t <= now) {
            self.queued.renew_at = Some(now + RENEW_EVERY);
            for queue in held {
                self.cluster_renew(Hosted::Queue(queue));
            }
        }
    }

    /// A caller of `queue` is gone from this worker: the node gives the queue's claim up with
    /// its last caller.
    fn queue_left(&mut self, queue: &str) {
        if self.s.cluster.is_some() && !self.s.queues.hosts(queue) {
            self.cluster_unhost(&Hosted::Queue(queue.to_string()));
        }
    }

    /// `queue NAME` on the node that hosts it: the caller is answered and waits on the board.
    pub(crate) fn queue_join(&mut self, call: usize, queue: &str, now: Instant) {
        let Some(cfg) = self.s.queues.config(queue) else {
            // Checked at load; a board built from another configuration lacks it.
            self.warn_call(call, format!("queue {queue:?}: no such queue in [queues]"));
            return;
        };
        if !self.answer(call, now) {
            return;
        }
        // A call an agent sent back to a queue (transferred it): that agent's call is done.
        self.queue_ended(call, now);
        let Some(ticket) = self.s.queues.join(queue, self.s.worker, now) else {
            return;
        };
        self.load_prompts(&cfg.sounds_dir);
        let c = &mut self.calls[call];
        c.wait = Wait::Forever;
        // The queue's music, unless the call's context chose a class (`set MOH=...`).
        if c.vars.get("MOH").is_none() {
            c.vars.set("MOH", cfg.music.clone());
        }
        let q = QueueCall {
            gen: c.timer_gen,
            next_announce: cfg.announce.map(|a| now + a),
            cfg,
            ticket,
            phase: Phase::Waiting,
            announcing: None,
        };
        self.queued.calls.insert(call, q);
        self.queued.by_ticket.insert(ticket, call);
        if self.s.cluster.is_some() && self.queued.roster_at.is_none() {
            self.queued.roster_at = Some(now + ROSTER_EVERY);
            self.queued.renew_at = Some(now + RENEW_EVERY);
        }
        self.queue_music(call);
        self.queued.check_at(now);
    }

    /// After a reload (the board reconfigured): this worker's callers take their queue's new
    /// settings (member timeout, announcements) for what comes next; those of a closing queue
    /// keep theirs.
    pub(crate) fn queues_reload(&mut self) {
        for q in self.queued.calls.values_mut() {
            if let Some(cfg) = self.s.queues.config(&q.cfg.name) {
                q.cfg = cfg;
            }
        }
    }

    /// `queue_login NAME` / `queue_logout NAME` (`on`): the caller's user joins or leaves the
    /// queue's agents and hears a confirmation tone; AGENTSTATUS says what happened
    /// (LOGGEDIN, LOGGEDOUT, or NOUSER for a caller that is not an authenticated user).
    pub(crate) fn queue_login(&mut self, call: usize, queue: &str, on: bool, now: Instant) {
        let user = self.calls[call].user.as_ref().map(|u| u.name.clone());
        if !self.answer(call, now) {
            return;
        }
        let (status, tone) = match &user {
            Some(u) if self.s.queues.log_in(queue, u, on).is_some() => {
                if self.s.cluster.is_some() {
                    let op = StoreOp::Enrol {
                        roster: roster(queue),
                        member: u.clone(),
                        on,
                    };
                    self.store_op(op, Pending::Cluster(Why::Write));
                }
                let what = if on { "logged in to" } else { "logged out of" };
                let call_id = self.calls[call].caller().call_id().to_string();
                self.log(
                    Level::Info,
                    Some(&call_id),
                    format!("{u} {what} queue {queue}"),
                );
                let status = if on { "LOGGEDIN" } else { "LOGGEDOUT" };
                // Two short beeps.
                (
                    status,
                    media::ToneSpec::new(vec![1400], ms(&[120, 120, 120, 640])),
                )
            }
            _ => (
                "NOUSER",
                media::ToneSpec::new(vec![480, 620], ms(&[250, 250])),
            ),
        };
        let c = &mut self.calls[call];
        c.vars.set("AGENTSTATUS", status);
        if let Some(m) = c.caller().media {
            self.media.tone(m, tone);
        }
        let until = now + Duration::from_secs(1);
        c.wait = Wait::Timer(until);
        self.calls.arm(call, until);
        if on && !self.queued.calls.is_empty() {
            self.queued.check_at(now);
        }
    }

    /// The worker's look at the board (from `handle_timeout`).
    pub(crate) fn queue_tick(&mut self, now: Instant) {
        self.queue_cluster_tick(now);
        if self.queued.next_check.is_none_or(|t| t > now) {
            return;
        }
        self.queued.next_check = None;
        let waiting = |q: &QueueCall| !matches!(q.phase, Phase::Connected { .. });
        if !self.queued.calls.values().any(waiting) {
            return;
        }
        for action in self.s.queues.clone().poll(self.s.worker, now) {
            let ticket = match &action {
                Action::Dial { ticket, .. }
                | Action::Leave { ticket, .. }
                | Action::Position { ticket, .. } => *ticket,
            };
            let Some(&call) = self.queued.by_ticket.get(&ticket) else {
                continue;
            };
            match action {
                Action::Dial { agents, .. } => self.dial_agents(call, agents, now),
                Action::Leave { status, .. } => self.leave_queue(call, status),
                Action::Position {
                    position, expected, ..
                } => self.announce(call, position, expected, now),
            }
        }
        if self.queued.calls.values().any(waiting) {
            self.queued.check_at(now + CHECK);
        }
    }

    /// Rings the agents the board offered call `call`.
    fn dial_agents(&mut self, call: usize, agents: Vec<Box<str>>, now: Instant) {
        let Some(q) = self.queued.calls.get_mut(&call) else {
            return;
        };
        let gen = q.gen;
        q.phase = Phase::Dialing {
            locating: agents.clone(),
            legs: Vec::new(),
        };
        let until = now + q.cfg.member_timeout;
        self.calls[call].wait = Wait::Bridge { until };
        self.calls.arm(call, until);
        let domain = self.s.registrar.domain.clone();
        for agent in agents {
            let (user, domain) = match agent.split_once('@') {
                Some((u, d)) => (u.to_string(), d.to_string()),
                None => (agent.to_string(), domain.clone()),
            };
            let op = StoreOp::Locate {
                user,
                domain,
                now: self.clock.unix(),
            };
            self.store_op(op, Pending::Queue { call, gen, agent });
        }
    }

    /// Where an agent's phones are: ring them beside the other agents', or count the agent out.
    pub(crate) fn queue_located(
        &mut self,
        call: usize,
        gen: u64,
        agent: Box<str>,
        result: Result<StoreReply, String>,
        now: Instant,
    ) {
        let asked = self.queued.calls.get(&call).is_some_and(|q| {
            q.gen == gen
                && matches!(&q.phase, Phase::Dialing { locating, .. } if locating.contains(&agent))
        });
        if !asked {
            return;
        }
        let bindings = match result {
            Ok(StoreReply::Located { exists: false, .. }) => Err(404),
            Ok(StoreReply::Located { bindings, dtmf, .. }) if !bindings.is_empty() => {
                Ok((bindings, dtmf))
            }
            Ok(_) => Err(480),
            Err(e) => {
                self.warn_call(call, format!("location store: {e}"));
                Err(503)
            }
        };
        let Some(q) = self.queued.calls.get_mut(&call) else {
            return;
        };
        let Phase::Dialing { locating, legs } = &mut q.phase else {
            return;
        };
        locating.retain(|a| *a != agent);
        let (bindings, dtmf) = match bindings {
            Ok(b) => b,
            Err(status) => {
                let (queue, ticket) = (q.cfg.name.clone(), q.ticket);
                self.s.queues.failed(&queue, ticket, &agent, status, now);
                if locating.is_empty() && legs.is_empty() {
                    self.back_to_waiting(call, now);
                }
                return;
            }
        };
        // Until its legs exist the agent holds an empty one, so a dial that fails at once
        // (bridge_failed, `queue_agents_failed`) counts it out with the others.
        legs.push((String::new(), agent.clone()));
        let timeout = q.cfg.member_timeout;
        let before: Vec<String> = self.calls[call]
            .legs()
            .map(|(_, l)| l.call_id().to_string())
            .collect();
        self.dial_bindings(call, bindings, dtmf, timeout, now);
        let new: Vec<String> = match self.calls.get(call) {
            Some(c) => c
                .legs()
                .map(|(_, l)| l.call_id().to_string())
                .filter(|id| !before.contains(id))
                .collect(),
            None => return,
        };
        if let Some(QueueCall {
            phase: Phase::Dialing { legs, .. },
            ..
        }) = self.queued.calls.get_mut(&call)
        {
            legs.retain(|(id, _)| !id.is_empty());
            legs.extend(new.into_iter().map(|id| (id, agent.clone())));
        }
    }

    /// One agent's leg failed while others still ring: the agent is counted out once none of
    /// its legs is left, and the caller hears the music again.
    pub(crate) fn queue_fork_failed(&mut self, call: usize, leg: &str, status: u16, now: Instant) {
        let Some(q) = self.queued.calls.get_mut(&call) else {
            return;
        };
        let Phase::Dialing { locating, legs } = &mut q.phase else {
            return;
        };
        let Some(i) = legs.iter().position(|(id, _)| id == leg) else {
            return;
        };
        let (_, agent) = legs.remove(i);
        let gone = !legs.iter().any(|(_, a)| *a == agent) && !locating.contains(&agent);
        if gone {
            let (queue, ticket) = (q.cfg.name.clone(), q.ticket);
            self.s.queues.failed(&queue, ticket, &agent, status, now);
        }
        self.queue_music(call);
    }

    /// Every leg ringing for a queue caller failed (or its agents did not answer in time):
    /// their agents are counted out, and unless phones are still being looked up the caller
    /// waits on the board again. False if the call is not dialling agents (a plain bridge).
    pub(crate) fn queue_agents_failed(&mut self, call: usize, status: u16, now: Instant) -> bool {
        let Some(q) = self.queued.calls.get_mut(&call) else {
            return false;
        };
        let Phase::Dialing { locating, legs } = &mut q.phase else {
            return false;
        };
        let mut agents: Vec<Box<str>> = legs.drain(..).map(|(_, a)| a).collect();
        // The member timeout is over for the agents still being looked up too.
        if status == 408 {
            agents.append(locating);
        }
        agents.dedup();
        let (queue, ticket) = (q.cfg.name.clone(), q.ticket);
        let left = !locating.is_empty();
        for agent in agents {
            self.s.queues.failed(&queue, ticket, &agent, status, now);
        }
        if !left {
            self.back_to_waiting(call, now);
        }
        true
    }

    fn back_to_waiting(&mut self, call: usize, now: Instant) {
        if let Some(q) = self.queued.calls.get_mut(&call) {
            q.phase = Phase::Waiting;
        }
        self.calls[call].wait = Wait::Forever;
        self.queue_music(call);
        self.queued.check_at(now);
    }

    /// The callee that answered a queue caller is its agent: off the board, on the call.
    pub(crate) fn queue_answered(&mut self, call: usize, now: Instant) {
        let Some(q) = self.queued.calls.get_mut(&call) else {
            return;
        };
        let Phase::Dialing { legs, .. } = &q.phase else {
            return;
        };
        let callee = self.calls[call].callee().map(|l| l.call_id().to_string());
        let Some((_, agent)) = legs.iter().find(|(id, _)| Some(id) == callee.as_ref()) else {
            return;
        };
        let agent = agent.clone();
        self.s.queues.answered(&q.cfg.name, q.ticket, &agent, now);
        self.queued.by_ticket.remove(&q.ticket);
        q.announcing = None;
        q.phase = Phase::Connected { agent };
    }

    /// The call ended: a caller still waiting abandoned the queue; an agent's call is done
    /// (wrap-up starts). Logged with the queue's figures.
    pub(crate) fn queue_ended(&mut self, call: usize, now: Instant) {
        let Some(q) = self.queued.calls.remove(&call) else {
            return;
        };
        self.queued.by_ticket.remove(&q.ticket);
        let queue = &q.cfg.name;
        let what = match &q.phase {
            Phase::Connected { agent } => {
                self.s.queues.done(queue, agent, now);
                format!("call with agent {agent} ended")
            }
            _ => {
                self.s.queues.abandon(queue, q.ticket);
                "caller hung up while waiting (abandoned)".to_string()
            }
        };
        self.queue_left(queue);
        let Some(s) = self.s.queues.stats(queue, now) else {
            return;
        };
        let agents: Vec<String> = s.agents.iter().map(|(a, n)| format!("{a}:{n}")).collect();
        let call_id = self
            .calls
            .get(call)
            .map(|c| c.caller().call_id().to_string());
        let message = format!(
            "queue {queue}: {what}; waiting {}, longest wait {}s, answered {}, abandoned {}, \
             timed out {}, calls by agent [{}]",
            s.waiting,
            s.longest_wait.as_secs(),
            s.answered,
            s.abandoned,
            s.timed_out,
            agents.join(" ")
        );
        self.log(Level::Info, call_id.as_deref(), message);
    }

    /// The caller waited `max_wait_s`: its program goes on with QUEUESTATUS.
    fn leave_queue(&mut self, call: usize, status: &'static str) {
        let Some(q) = self.queued.calls.remove(&call) else {
            return;
        };
        self.queued.by_ticket.remove(&q.ticket);
        self.queue_left(&q.cfg.name);
        self.stop_moh(call, Call::CALLER);
        let c = &mut self.calls[call];
        c.vars.set("QUEUESTATUS", status);
        c.wait = Wait::None;
        self.calls.run_later(call);
    }

    /// Announces the caller's position and expected wait when `announce_s` of music since
    /// joining or since the last announcement are up.
    fn announce(&mut self, call: usize, position: usize, expected: Option<Duration>, now: Instant) {
        let Some(q) = self.queued.calls.get_mut(&call) else {
            return;
        };
        let due = q.next_announce.is_some_and(|t| t <= now);
        if !due || !matches!(q.phase, Phase::Waiting) || q.announcing.is_some() {
            return;
        }
        // The next one is due `announce_s` after this one ends (`next_prompt`).
        q.next_announce = None;
        let dir = &q.cfg.sounds_dir;
        let pieces = announcement(position, expected);
        q.announcing = Some(pieces.iter().map(|p| format!("{dir}/{p}.wav")).collect());
        self.next_prompt(call, now);
    }

    /// A prompt ended on a queue caller's leg: the announcement goes on, or the music
    /// resumes.
    pub(crate) fn queue_playback_done(&mut self, call: usize, now: Instant) {
        let announcing = self
            .queued
            .calls
            .get(&call)
            .is_some_and(|q| q.announcing.is_some());
        if announcing {
            self.next_prompt(call, now);
        }
    }

    /// Plays the announcement's next prompt (one the shell could not load is left out), or
    /// the music after the last, until the next announcement.
    fn next_prompt(&mut self, call: usize, now: Instant) {
        let Some(q) = self.queued.calls.get_mut(&call) else {
            return;
        };
        let m = self.calls[call].caller().media;
        while let Some(file) = q.announcing.as_mut().and_then(VecDeque::pop_front) {
            if let (Some(p), Some(m)) = (self.files.prompt(&file), m) {
                self.media.play(m, p, false, true);
                return;
            }
        }
        q.announcing = None;
        q.next_announce = q.cfg.announce.map(|a| now + a);
        self.queue_music(call);
    }

    /// Music for a caller waiting (or hearing agents ring), unless an announcement plays.
    fn queue_music(&mut self, call: usize) {
        let announcing = self
            .queued
            .calls
            .get(&call)
            .is_some_and(|q| q.announcing.is_some());
        if !announcing {
            self.start_moh(call, Call::CALLER);
        }
    }

    /// Asks the shell once for the prompts of announcements in `dir`.
    fn load_prompts(&mut self, dir: &str) {
        if !self.queued.loaded.insert(dir.to_string()) {
            return;
        }
        for name in prompts() {
            self.preload(format!("{dir}/{name}.wav"));
        }
    }
}

/// The store's roster of `queue`'s logins.
fn roster(queue: &str) -> String {
    format!("queue:{queue}")
}

fn ms(cadence: &[u64]) -> Vec<Duration> {
    cadence.iter().map(|&m| Duration::from_millis(m)).collect()
}
