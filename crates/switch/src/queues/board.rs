//! The queue board every worker shares: the callers waiting in each queue in arrival order
//! (whatever worker their call lives on), the agents' state, the dynamic logins and the
//! statistics. It is one mutex, taken only on queue events (a caller joins, leaves, an agent
//! answers or fails) and on each worker's periodic check while it has callers waiting; the
//! media path never touches it. Time is given by the caller (sans-IO).
//!
//! Agents are handed out here and only here: on each check the board offers the free agents to
//! the waiting callers in arrival order (a caller that already rings someone keeps its place),
//! reserving them, and each worker dials the agents offered to its own callers. So the order
//! is fair across workers, and an agent is never rung for two callers at once.

use crate::config::{Queue as Config, Strategy};
use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

#[derive(Debug, Default)]
pub struct Board {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    queues: FxHashMap<Box<str>, Queue>,
    /// Agents by user name: one state whatever queues the user serves.
    agents: FxHashMap<Box<str>, Agent>,
    next_ticket: u64,
}

#[derive(Debug)]
struct Queue {
    cfg: Arc<Config>,
    /// Removed by a reload while callers waited: they stay until they leave, as in Asterisk,
    /// but no caller joins; the queue goes with its last caller.
    closing: bool,
    members: Vec<Member>,
    waiting: VecDeque<Waiter>,
    /// Callers answered by an agent whose call goes on.
    talking: usize,
    /// Round robin: the member index to try first.
    next: usize,
    answered: u64,
    abandoned: u64,
    timed_out: u64,
    /// The waits of the answered callers, summed: the expected wait's base.
    waited: Duration,
}

#[derive(Debug)]
struct Member {
    name: Box<str>,
    /// Listed in the configuration (a reload drops those it no longer lists); the others
    /// logged in with `queue_login` and stay.
    listed: bool,
    logged_in: bool,
    /// Calls of this queue taken.
    calls: u64,
}

#[derive(Debug)]
struct Waiter {
    ticket: u64,
    worker: usize,
    since: Instant,
    /// The agents reserved for it (being dialled); empty while it just waits.
    offered: Vec<Box<str>>,
    /// Offered since its worker last looked.
    fresh: bool,
    /// Agents that did not answer it; passed over until every free agent has been tried.
    tried: Vec<Box<str>>,
}

#[derive(Debug, Default)]
struct Agent {
    state: AgentState,
    /// Not offered before this (wrap-up after a call, or a retry after busy).
    ready_at: Option<Instant>,
    last_call: Option<Instant>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum AgentState {
    #[default]
    Free,
    /// Reserved for (rung for) the caller with this ticket.
    Offered(u64),
    OnCall,
}

/// What a worker is to do for one of its waiting callers (`Board::poll`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Ring these agents (reserved for it).
    Dial { ticket: u64, agents: Vec<Box<str>> },
    /// It waited `max_wait`: it is off the board; its program goes on with QUEUESTATUS.
    Leave { ticket: u64, status: &'static str },
    /// Where it stands (1: next) and the wait expected, if any call was answered yet.
    Position {
        ticket: u64,
        position: usize,
        expected: Option<Duration>,
    },
}

/// A queue's figures at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stats {
    pub waiting: usize,
    pub longest_wait: Duration,
    pub answered: u64,
    pub abandoned: u64,
    pub timed_out: u64,
    /// Members logged in, with the calls of this queue each took (in member order).
    pub agents: Vec<(String, u64)>,
}

impl Board {
    pub fn new(queues: &[Config]) -> Board {
        let board = Board::default();
        board.reconfigure(queues);
        board
    }

    /// Takes the queues of a new configuration (a reload; the same one again changes nothing,
    /// so every worker may pass it on). A queue that stays keeps its callers in their places,
    /// its statistics and the members still listed (with their calls and logins) or logged in
    /// by `queue_login`; new members are logged in. A queue no longer listed closes
    /// ([`Queue::closing`]).
    pub fn reconfigure(&self, queues: &[Config]) {
        let mut guard = self.lock();
        let Inner {
            queues: now,
            agents,
            ..
        } = &mut *guard;
        for q in now.values_mut() {
            q.closing = !queues.iter().any(|c| *c.name == *q.cfg.name);
        }
        now.retain(|_, q| !(q.closing && q.waiting.is_empty()));
        for cfg in queues {
            let q = now
                .entry(cfg.name.as_str().into())
                .or_insert_with(|| Queue {
                    cfg: Arc::new(cfg.clone()),
                    closing: false,
                    members: Vec::new(),
                    waiting: VecDeque::new(),
                    talking: 0,
                    next: 0,
                    answered: 0,
                    abandoned: 0,
                    timed_out: 0,
                    waited: Duration::ZERO,
                });
            if *q.cfg != *cfg {
                q.cfg = Arc::new(cfg.clone());
            }
            // The listed members in the configuration's order, then those logged in by hand.
            let mut old = std::mem::take(&mut q.members);
            for name in &cfg.members {
                agents.entry(name.as_str().into()).or_default();
                let kept = old.iter().position(|m| *m.name == **name);
                let mut m = match kept {
                    Some(i) => old.remove(i),
                    None => Member {
                        name: name.as_str().into(),
                        listed: true,
                        logged_in: true,
                        calls: 0,
                    },
                };
                m.listed = true;
                q.members.push(m);
            }
            q.members.extend(old.into_iter().filter(|m| !m.listed));
        }
    }

    /// A queue's settings (None: no such queue, or it is closing).
    pub fn config(&self, queue: &str) -> Option<Arc<Config>> {
        let b = self.lock();
        b.queues
            .get(queue)
            .filter(|q| !q.closing)
            .map(|q| q.cfg.clone())
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A caller of worker `worker` joins the end of `queue`: its ticket, None for no such queue.
    pub fn join(&self, queue: &str, worker: usize, now: Instant) -> Option<u64> {
        let mut b = self.lock();
        b.next_ticket += 1;
        let ticket = b.next_ticket;
        let q = b.queues.get_mut(queue).filter(|q| !q.closing)?;
        q.waiting.push_back(Waiter {
            ticket,
            worker,
            since: now,
            offered: Vec::new(),
            fresh: false,
            tried: Vec::new(),
        });
        Some(ticket)
    }

    /// Offers free agents to waiting callers (all workers'), then says what `worker` is to do
    /// for its own: agents to dial, callers whose wait is over, and every caller's position.
    pub fn poll(&self, worker: usize, now: Instant) -> Vec<Action> {
        let mut guard = self.lock();
        let Inner { queues, agents, .. } = &mut *guard;
        let mut out = Vec::new();
        for q in queues.values_mut() {
            q.time_out(worker, agents, now, &mut out);
            q.offer(agents, now);
            let logged_in = q.members.iter().filter(|m| m.logged_in).count().max(1);
            let average = (q.answered > 0).then(|| q.waited / q.answered as u32);
            for (i, w) in q.waiting.iter_mut().enumerate() {
                if w.worker != worker {
                    continue;
                }
                if w.fresh {
                    w.fresh = false;
                    out.push(Action::Dial {
                        ticket: w.ticket,
                        agents: w.offered.clone(),
                    });
                }
                out.push(Action::Position {
                    ticket: w.ticket,
                    position: i + 1,
                    expected: average.map(|a| a * (i as u32 + 1) / logged_in as u32),
                });
            }
        }
        queues.retain(|_, q| !(q.closing && q.waiting.is_empty()));
        out
    }

    /// `agent` answered the caller `ticket`: the caller is off the board, the agent on a call,
    /// and the other agents rung for it are free again.
    pub fn answered(&self, queue: &str, ticket: u64, agent: &str, now: Instant) {
        let mut guard = self.lock();
        let Inner { queues, agents, .. } = &mut *guard;
        let Some(q) = queues.get_mut(queue) else {
            return;
        };
        let Some(w) = q.remove(ticket) else {
            return;
        };
        free(agents, &w.offered, ticket);
        if let Some(a) = agents.get_mut(agent) {
            a.state = AgentState::OnCall;
        }
        if let Some(m) = q.members.iter_mut().find(|m| &*m.name == agent) {
            m.calls += 1;
        }
        q.answered += 1;
        q.talking += 1;
        q.waited += now.saturating_duration_since(w.since);
        close_if_done(queues, queue);
    }

    /// `agent`, rung for `ticket`, did not take the call (`status`: 408 and 487 are no answer;
    /// anything else, busy or unreachable, keeps the agent out for `retry`).
    pub fn failed(&self, queue: &str, ticket: u64, agent: &str, status: u16, now: Instant) {
        let mut guard = self.lock();
        let Inner { queues, agents, .. } = &mut *guard;
        let Some(q) = queues.get_mut(queue) else {
            return;
        };
        let retry = q.cfg.retry;
        let Some(w) = q.waiting.iter_mut().find(|w| w.ticket == ticket) else {
            return;
        };
        w.offered.retain(|a| &**a != agent);
        w.tried.push(agent.into());
        if let Some(a) = agents.get_mut(agent) {
            if a.state == AgentState::Offered(ticket) {
                a.state = AgentState::Free;
                if !matches!(status, 408 | 487) {
                    a.ready_at = Some(now + retry);
                }
            }
        }
    }

    /// The caller `ticket` hung up while waiting: abandoned.
    pub fn abandon(&self, queue: &str, ticket: u64) {
        let mut guard = self.lock();
        let Inner { queues, agents, .. } = &mut *guard;
        let Some(q) = queues.get_mut(queue) else {
            return;
        };
        if let Some(w) = q.remove(ticket) {
            free(agents, &w.offered, ticket);
            q.abandoned += 1;
        }
        close_if_done(queues, queue);
    }

    /// `agent`'s queue call ended: free after the queue's wrap-up time.
    pub fn done(&self, queue: &str, agent: &str, now: Instant) {
        let mut guard = self.lock();
        let Inner { queues, agents, .. } = &mut *guard;
        let q = queues.get_mut(queue);
        let wrapup = q.map_or(Duration::ZERO, |q| {
            q.talking = q.talking.saturating_sub(1);
            q.cfg.wrapup
        });
        if let Some(a) = agents.get_mut(agent) {
            a.state = AgentState::Free;
            a.ready_at = Some(now + wrapup);
            a.last_call = Some(now);
        }
    }

    /// `user` logs in to (`on`) or out of `queue`; None: no such queue. A user not among the
    /// members joins them.
    pub fn log_in(&self, queue: &str, user: &str, on: bool) -> Option<()> {
        let mut guard = self.lock();
        let Inner { queues, agents, .. } = &mut *guard;
        let q = queues.get_mut(queue)?;
        match q.members.iter_mut().find(|m| &*m.name == user) {
            Some(m) => m.logged_in = on,
            None if on => {
                agents.entry(user.into()).or_default();
                q.members.push(Member {
                    name: user.into(),
                    listed: false,
                    logged_in: true,
                    calls: 0,
                });
            }
            None => {}
        }
        Some(())
    }

    /// Whether `queue` has callers on this node, waiting or with an agent: while it has, a
    /// cluster's other nodes send theirs here (cluster.rs).
    pub fn hosts(&self, queue: &str) -> bool {
        let b = self.lock();
        b.queues
            .get(queue)
            .is_some_and(|q| !q.waiting.is_empty() || q.talking > 0)
    }

    /// `queue`'s figures now.
    pub fn stats(&self, queue: &str, now: Instant) -> Option<Stats> {
        let b = self.lock();
        let q = b.queues.get(queue)?;
        Some(Stats {
            waiting: q.waiting.len(),
            longest_wait: q
                .waiting
                .front()
                .map_or(Duration::ZERO, |w| now.saturating_duration_since(w.since)),
            answered: q.answered,
            abandoned: q.abandoned,
            timed_out: q.timed_out,
            agents: q
                .members
                .iter()
                .filter(|m| m.logged_in)
                .map(|m| (m.name.to_string(), m.calls))
                .collect(),
        })
    }
}

/// Drops `queue` if a reload removed it and its last caller has left.
fn close_if_done(queues: &mut FxHashMap<Box<str>, Queue>, queue: &str) {
    if queues
        .get(queue)
        .is_some_and(|q| q.closing && q.waiting.is_empty())
    {
        queues.remove(queue);
    }
}

/// Frees the agents still reserved for `ticket`.
fn free(agents: &mut FxHashMap<Box<str>, Agent>, names: &[Box<str>], ticket: u64) {
    for n in names {
        if let Some(a) = agents.get_mut(n) {
            if a.state == AgentState::Offered(ticket) {
                a.state = AgentState::Free;
            }
        }
    }
}

impl Queue {
    fn remove(&mut self, ticket: u64) -> Option<Waiter> {
        let i = self.waiting.iter().position(|w| w.ticket == ticket)?;
        self.waiting.remove(i)
    }

    /// `worker`'s callers that waited `max_wait` and ring nobody leave.
    fn time_out(
        &mut self,
        worker: usize,
        agents: &mut FxHashMap<Box<str>, Agent>,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        let max = self.cfg.max_wait;
        let status = match self.members.iter().any(|m| m.logged_in) {
            true => "TIMEOUT",
            false => "EMPTY",
        };
        let before = self.waiting.len();
        self.waiting.retain(|w| {
            let over = w.worker == worker
                && w.offered.is_empty()
                && now.saturating_duration_since(w.since) >= max;
            if over {
                free(agents, &w.offered, w.ticket);
                out.push(Action::Leave {
                    ticket: w.ticket,
                    status,
                });
            }
            !over
        });
        self.timed_out += (before - self.waiting.len()) as u64;
    }

    /// Offers free agents to the callers in arrival order, by the queue's strategy, until no
    /// agent is free.
    fn offer(&mut self, agents: &mut FxHashMap<Box<str>, Agent>, now: Instant) {
        let Queue {
            cfg,
            members,
            waiting,
            next,
            ..
        } = self;
        let ready = |m: &Member, agents: &FxHashMap<Box<str>, Agent>| {
            m.logged_in
                && agents.get(&m.name).is_some_and(|a| {
                    a.state == AgentState::Free && a.ready_at.is_none_or(|t| t <= now)
                })
        };
        for w in waiting.iter_mut().filter(|w| w.offered.is_empty()) {
            let free: Vec<usize> = (0..members.len())
                .filter(|&i| ready(&members[i], agents))
                .collect();
            if free.is_empty() {
                return;
            }
            let mut untried: Vec<usize> = free
                .iter()
                .copied()
                .filter(|&i| !w.tried.contains(&members[i].name))
                .collect();
            if untried.is_empty() {
                // Every free agent was tried: a new round.
                w.tried.clear();
                untried = free;
            }
            let last = |i: &usize| agents.get(&members[*i].name).and_then(|a| a.last_call);
            let picked: Vec<usize> = match cfg.strategy {
                Strategy::RingAll => untried,
                Strategy::RoundRobin => {
                    let n = members.len();
                    let first = untried
                        .iter()
                        .copied()
                        .min_by_key(|&i| (i + n - *next % n) % n);
                    if let Some(i) = first {
                        *next = i + 1;
                    }
                    first.into_iter().collect()
                }
                Strategy::LeastRecent => untried
                    .iter()
                    .copied()
                    .min_by_key(last)
                    .into_iter()
                    .collect(),
                Strategy::FewestCalls => untried
                    .iter()
                    .copied()
                    .min_by_key(|&i| members[i].calls)
                    .into_iter()
                    .collect(),
            };
            for &i in &picked {
                if let Some(a) = agents.get_mut(&members[i].name) {
                    a.state = AgentState::Offered(w.ticket);
                }
            }
            w.offered = picked.iter().map(|&i| members[i].name.clone()).collect();
            w.fresh = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(strategy: Strategy, members: &[&str]) -> Config {
        Config {
            name: "q".into(),
            members: members.iter().map(|m| m.to_string()).collect(),
            strategy,
            member_timeout: Duration::from_secs(15),
            wrapup: Duration::from_secs(10),
            retry: Duration::from_secs(5),
            max_wait: Duration::from_secs(60),
            music: "default".into(),
            announce: None,
            sounds_dir: "/tmp".into(),
        }
    }

    fn dials(actions: &[Action]) -> Vec<(u64, Vec<&str>)> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Dial { ticket, agents } => {
                    Some((*ticket, agents.iter().map(|a| &**a).collect()))
                }
                _ => None,
            })
            .collect()
    }

    /// A node hosts a queue (holds its cluster claim) from its first caller until its last one
    /// left: answered callers count until their call ends, a timed-out one leaves at once.
    #[test]
    fn a_queue_is_hosted_while_callers_wait_or_talk() {
        let t0 = Instant::now();
        let mut cfg = queue(Strategy::LeastRecent, &["a"]);
        cfg.max_wait = Duration::from_secs(30);
        let b = Board::new(&[cfg]);
        assert!(!b.hosts("q") && !b.hosts("none"));
        let first = b.join("q", 0, t0).unwrap();
        let second = b.join("q", 1, t0).unwrap();
        assert!(b.hosts("q"));
        assert_eq!(dials(&b.poll(0, t0)), [(first, vec!["a"])]);
        b.answered("q", first, "a", t0);
        let t = t0 + Duration::from_secs(31);
        let left = b.poll(1, t);
        let timed_out = Action::Leave {
            ticket: second,
            status: "TIMEOUT",
        };
        assert!(left.contains(&timed_out), "{left:?}");
        assert!(b.hosts("q"), "the answered caller still talks");
        b.done("q", "a", t);
        assert!(!b.hosts("q"), "empty: its claim goes");
    }

    /// Callers of two workers are offered agents in arrival order, each worker hearing only of
    /// its own; a busy agent waits out its retry, wrap-up holds an agent back.
    #[test]
    fn agents_go_to_callers_in_arrival_order_across_workers() {
        let t0 = Instant::now();
        let b = Board::new(&[queue(Strategy::LeastRecent, &["a", "b"])]);
        let one = b.join("q", 1, t0).unwrap();
        let zero = b.join("q", 0, t0).unwrap();
        let late = b.join("q", 0, t0).unwrap();
        // Worker 0 polls first, but worker 1's caller came first and gets agent a.
        assert_eq!(dials(&b.poll(0, t0)), [(zero, vec!["b"])]);
        assert_eq!(dials(&b.poll(1, t0)), [(one, vec!["a"])]);
        b.failed("q", zero, "b", 486, t0);
        assert!(dials(&b.poll(0, t0)).is_empty(), "b is busy for its retry");
        b.answered("q", one, "a", t0);
        b.done("q", "a", t0 + Duration::from_secs(1));
        let t = t0 + Duration::from_secs(6);
        assert_eq!(dials(&b.poll(0, t)), [(zero, vec!["b"])], "b again");
        b.answered("q", zero, "b", t);
        assert!(dials(&b.poll(0, t)).is_empty(), "a wraps up");
        let t = t0 + Duration::from_secs(11);
        assert_eq!(dials(&b.poll(0, t)), [(late, vec!["a"])]);
        b.abandon("q", late);
        let s = b.stats("q", t).unwrap();
        assert_eq!((s.waiting, s.answered, s.abandoned), (0, 2, 1));
        assert_eq!(s.agents, [("a".to_string(), 1), ("b".to_string(), 1)]);
    }

    #[test]
    fn round_robin_goes_on_from_the_last_agent_rung() {
        let t0 = Instant::now();
        let b = Board::new(&[queue(Strategy::RoundRobin, &["a", "b", "c"])]);
        let mut order = Vec::new();
        for _ in 0..4 {
            let t = b.join("q", 0, t0).unwrap();
            let actions = b.poll(0, t0);
            order.push(dials(&actions)[0].1[0].to_string());
            b.answered("q", t, &order[order.len() - 1], t0);
            b.done("q", &order[order.len() - 1], t0 - Duration::from_secs(60));
        }
        assert_eq!(order, ["a", "b", "c", "a"]);
    }

    /// A reload: callers keep their places, a dropped member is not offered, a member logged in
    /// by hand stays; a removed queue keeps its callers until they leave but takes no one new.
    #[test]
    fn a_reload_keeps_callers_in_place_and_closes_a_removed_queue() {
        let t0 = Instant::now();
        let mut other = queue(Strategy::RingAll, &["c"]);
        other.name = "other".into();
        other.max_wait = Duration::from_secs(300);
        let b = Board::new(&[queue(Strategy::RingAll, &["a"]), other.clone()]);
        b.log_in("q", "x", true);
        b.log_in("q", "x", false);
        b.log_in("q", "y", true);
        b.log_in("q", "y", false);
        let first = b.join("q", 0, t0).unwrap();
        let second = b.join("q", 0, t0).unwrap();
        let closing = b.join("other", 0, t0).unwrap();
        b.log_in("q", "x", true);

        let mut changed = queue(Strategy::RoundRobin, &["b"]);
        changed.max_wait = Duration::from_secs(300);
        b.reconfigure(&[changed.clone()]);
        b.reconfigure(&[changed.clone()]);
        assert_eq!(b.config("q").unwrap().strategy, Strategy::RoundRobin);
        assert!(b.config("other").is_none() && b.join("other", 0, t0).is_none());
        let t = t0 + Duration::from_secs(61);
        let actions = b.poll(0, t);
        assert!(
            !actions
                .iter()
                .any(|a| matches!(a, Action::Leave { ticket, .. } if *ticket != closing)),
            "the new max_wait holds: {actions:?}"
        );
        // One agent each (round robin now), b (new) and x (logged in by hand); a is gone.
        let mut offered = dials(&actions);
        offered.sort();
        assert_eq!(
            offered,
            [
                (first, vec!["b"]),
                (second, vec!["x"]),
                (closing, vec!["c"])
            ]
        );
        let positions: Vec<(u64, usize)> = actions
            .iter()
            .filter_map(|a| match a {
                Action::Position {
                    ticket, position, ..
                } => Some((*ticket, *position)),
                _ => None,
            })
            .collect();
        assert!(positions.contains(&(first, 1)) && positions.contains(&(second, 2)));
        b.answered("q", first, "b", t);
        // The closing queue's caller is answered by its last member; then the queue is gone.
        b.answered("other", closing, "c", t);
        assert!(b.stats("other", t).is_none());
        let s = b.stats("q", t).unwrap();
        assert_eq!(s.agents, [("b".to_string(), 1), ("x".to_string(), 0)]);
    }

    #[test]
    fn a_caller_past_max_wait_leaves_with_empty_when_nobody_is_logged_in() {
        let t0 = Instant::now();
        let b = Board::new(&[queue(Strategy::RingAll, &["a"])]);
        b.log_in("q", "a", false);
        let t = b.join("q", 0, t0).unwrap();
        assert!(dials(&b.poll(0, t0)).is_empty());
        let later = t0 + Duration::from_secs(60);
        assert!(b.poll(0, later).contains(&Action::Leave {
            ticket: t,
            status: "EMPTY"
        }));
        assert_eq!(b.stats("q", later).unwrap().timed_out, 1);
    }
}
