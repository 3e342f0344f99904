//! Call queues on the simulated network (tests/net): callers of extension 7000 wait in queue
//! `q` with music, agents (scripted phones registered as users 1001-1003) are rung by the
//! queue's strategy, and the board every worker shares keeps arrival order, wrap-up, busy
//! agents, abandoned callers and the statistics.

use crate::net;

use net::*;
use sip::Method;
use std::time::Duration;

const AGENTS: [&str; 3] = ["1001", "1002", "1003"];

/// A switch with `workers` workers, its registrar taking anyone, queue `q` configured by
/// `queue` (its table's keys), extension 7000 queueing and then bridging to Bob with the
/// queue's status as the user part (sip:TIMEOUT@Bob), so the step after `queue` is seen.
fn queue_switch(n: &mut Net, queue: &str, workers: usize) -> Id {
    n.switch(&queue_config(queue, ""), &[SW], workers)
}

/// The configuration `queue_switch` gives a switch, with `more` (tables and rules) added.
fn queue_config(queue: &str, more: &str) -> String {
    let head = format!(
        "[registrar]\nauthenticate = false\nkeepalive_s = 0\n[queues.q]\n{queue}\n\
         [[dialplan.contexts.default.rules]]\nexten = \"7000\"\n\
         steps = [\"queue q\", \"bridge sip:${{QUEUESTATUS}}@{BOB} timeout=5\"]\n{more}"
    );
    config(&head)
}

/// Agents registered as `users` of switch `sw`, answering after `after` (each its own), at
/// 127.0.0.1:51xx.
fn agents(n: &mut Net, sw: Id, users: &[&str], after: &[Duration]) -> Vec<Id> {
    for u in users {
        n.sw(sw).shared.store.add_user(u, "strowger", "pw");
    }
    let ids: Vec<Id> = users
        .iter()
        .zip(after)
        .enumerate()
        .map(|(i, (u, after))| {
            let ua = n.ua(&format!("127.0.0.1:{}", 5101 + i), u);
            n.agent(ua).policy = Policy {
                provisional: vec![(180, false)],
                status: 200,
                after: *after,
            };
            n.register(ua, SW, "strowger", 600);
            ua
        })
        .collect();
    let all = ids.clone();
    assert!(n.run_until(secs(2), move |n| all
        .iter()
        .all(|&ua| n.agent(ua).register_statuses == [200])));
    ids
}

/// A caller at 127.0.0.1:`port` calls the queue; returns it and its call.
fn caller(n: &mut Net, port: u16) -> (Id, usize) {
    let ua = n.ua(&format!("127.0.0.1:{port}"), &format!("caller{port}"));
    let c = n.invite(ua, "sip:7000@127.0.0.1", SW);
    (ua, c)
}

/// Whether agent `ua` answered its `i`-th call, and its 200 had time to reach the switch.
fn answered(ua: Id, i: usize) -> impl FnMut(&mut Net) -> bool {
    let mut at = None;
    move |n| {
        let now = n.now;
        let up = n
            .agent(ua)
            .calls
            .get(i)
            .is_some_and(|c| c.state == State::Confirmed);
        let since = *at.get_or_insert(now);
        if !up {
            at = None;
        }
        up && now - since >= ms(20)
    }
}

/// The agent (index into `agents`) whose latest call is confirmed.
fn talking(n: &mut Net, agents: &[Id]) -> Option<usize> {
    agents.iter().position(|&a| {
        let ua = n.agent(a);
        ua.calls.last().is_some_and(|c| c.state == State::Confirmed)
    })
}

/// The queue's statistics now.
fn stats(n: &mut Net, sw: Id) -> switch::queues::Stats {
    let now = n.now;
    n.sw(sw).shared.queues.stats("q", now).unwrap()
}

/// Callers one after another (each hangs up once its agent answered): which agent took each.
/// The callers are at 127.0.0.1:`first`, the next port, ...
fn serve_one_by_one(n: &mut Net, agents: &[Id], first: u16, callers: u16) -> Vec<&'static str> {
    let mut order = Vec::new();
    for i in 0..callers {
        let (a, c) = caller(n, first + i);
        let ags = agents.to_vec();
        assert!(
            n.run_until(secs(5), move |n| talking(n, &ags).is_some()),
            "caller {i} was connected"
        );
        n.run_for(ms(50));
        let who = talking(n, agents).unwrap();
        order.push(AGENTS[who]);
        assert_eq!(n.agent(a).call(c).state, State::Confirmed);
        hang_up(n, a, c, secs(2));
        n.run_for(ms(100));
    }
    order
}

#[test]
fn round_robin_rings_the_agents_in_turn() {
    let mut n = Net::new(71);
    let sw = queue_switch(
        &mut n,
        "members = [\"1001\", \"1002\", \"1003\"]\nstrategy = \"roundrobin\"\nwrapup_s = 0",
        2,
    );
    let ags = agents(&mut n, sw, &AGENTS, &[ms(200); 3]);
    let order = serve_one_by_one(&mut n, &ags, 5200, 4);
    assert_eq!(order, ["1001", "1002", "1003", "1001"]);
    let s = stats(&mut n, sw);
    assert_eq!(
        (s.waiting, s.answered, s.abandoned, s.timed_out),
        (0, 4, 0, 0)
    );
    let calls: Vec<u64> = s.agents.iter().map(|(_, c)| *c).collect();
    assert_eq!(calls, [2, 1, 1]);
    assert_eq!(n.sw(sw).active_calls(), 0);
    let logs = n.sw(sw).logs();
    assert!(
        logs.iter()
            .any(|l| l.contains("queue q: call with agent 1001 ended") && l.contains("answered 4")),
        "{logs:?}"
    );
}

/// The agent whose last queue call ended longest ago (or who never had one) goes first.
#[test]
fn least_recent_rings_the_agent_idle_longest() {
    let mut n = Net::new(72);
    let sw = queue_switch(
        &mut n,
        "members = [\"1001\", \"1002\", \"1003\"]\nstrategy = \"leastrecent\"\nwrapup_s = 0",
        1,
    );
    let ags = agents(&mut n, sw, &AGENTS, &[ms(200); 3]);
    // A talks to 1001, B to 1002; B ends first, then A.
    let (a, ca) = caller(&mut n, 5200);
    assert!(n.run_until(secs(3), answered(ags[0], 0)));
    let (b, cb) = caller(&mut n, 5201);
    assert!(n.run_until(secs(3), answered(ags[1], 0)));
    hang_up(&mut n, b, cb, secs(2));
    n.run_for(secs(1));
    hang_up(&mut n, a, ca, secs(2));
    n.run_for(ms(100));
    // 1003 never had a call; then 1002, whose call ended before 1001's.
    let order = serve_one_by_one(&mut n, &ags, 5210, 3);
    assert_eq!(order, ["1003", "1002", "1001"]);
}

/// The agent with the fewest calls of the queue goes first: one who logs in late catches up.
#[test]
fn fewest_calls_favours_an_agent_who_logged_in_late() {
    let mut n = Net::new(73);
    let sw = queue_switch(
        &mut n,
        "members = [\"1001\", \"1002\"]\nstrategy = \"fewestcalls\"\nwrapup_s = 0",
        2,
    );
    let ags = agents(&mut n, sw, &AGENTS[..2], &[ms(200); 2]);
    n.sw(sw).shared.queues.log_in("q", "1002", false).unwrap();
    let mut order = serve_one_by_one(&mut n, &ags, 5200, 2);
    n.sw(sw).shared.queues.log_in("q", "1002", true).unwrap();
    order.extend(serve_one_by_one(&mut n, &ags, 5210, 3));
    assert_eq!(order, ["1001", "1001", "1002", "1002", "1001"]);
}

/// Ring all: every free agent rings, the first to answer takes the call and the others are
/// cancelled; a busy one (486) is skipped without holding the caller up.
#[test]
fn ring_all_connects_the_first_agent_to_answer_and_skips_a_busy_one() {
    let mut n = Net::new(74);
    let sw = queue_switch(&mut n, "members = [\"1001\", \"1002\", \"1003\"]", 2);
    let ags = agents(&mut n, sw, &AGENTS, &[secs(3), secs(1), ms(10)]);
    n.agent(ags[2]).policy.status = 486;
    let (a, c) = caller(&mut n, 5200);
    assert!(n.run_until(secs(3), answered(ags[1], 0)));
    assert_eq!(n.agent(a).call(c).state, State::Confirmed);
    n.run_for(secs(1));
    let slow = n.agent(ags[0]).last();
    assert_eq!(slow.state, State::Ended);
    assert_eq!(
        slow.requests_of(&Method::Cancel).len(),
        1,
        "the slower one cancelled"
    );
    assert_eq!(n.agent(ags[2]).calls.len(), 1, "the busy one was rung once");
    let s = stats(&mut n, sw);
    assert_eq!((s.waiting, s.answered), (0, 1));
    hang_up(&mut n, a, c, secs(2));
    assert!(n.run_until(secs(2), |n| n.agent(ags[1]).last().state == State::Ended));
}

/// Round robin with its first agent busy: the next one takes the call at once.
#[test]
fn a_busy_agent_is_skipped_for_the_next() {
    let mut n = Net::new(75);
    let sw = queue_switch(
        &mut n,
        "members = [\"1001\", \"1002\"]\nstrategy = \"roundrobin\"",
        1,
    );
    let ags = agents(&mut n, sw, &AGENTS[..2], &[ms(10), ms(200)]);
    n.agent(ags[0]).policy.status = 486;
    let t0 = n.now;
    let (a, c) = caller(&mut n, 5200);
    assert!(n.run_until(secs(3), answered(ags[1], 0)));
    assert!(n.now - t0 < secs(1), "no wait for the busy agent");
    assert_eq!(n.agent(a).call(c).state, State::Confirmed);
    assert_eq!(n.agent(ags[0]).calls.len(), 1);
    assert_eq!(stats(&mut n, sw).answered, 1);
}

/// After a queue call an agent is not offered another until its wrap-up time is over.
#[test]
fn wrap_up_time_holds_the_agent_back() {
    let mut n = Net::new(76);
    let sw = queue_switch(&mut n, "members = [\"1001\"]\nwrapup_s = 10", 1);
    let ags = agents(&mut n, sw, &AGENTS[..1], &[ms(100)]);
    let (a, c) = caller(&mut n, 5200);
    assert!(n.run_until(secs(3), confirmed(a, c)));
    assert!(n.run_until(secs(3), answered(ags[0], 0)));
    let (b, cb) = caller(&mut n, 5201);
    n.run_for(secs(1));
    hang_up(&mut n, a, c, secs(2));
    let ended = n.now;
    assert!(n.run_until(secs(15), |n| n.agent(ags[0]).calls.len() == 2));
    let waited = n.now - ended;
    assert!(
        waited >= secs(10) && waited < secs(11),
        "offered again after {waited:?}"
    );
    assert!(n.run_until(secs(2), answered(ags[0], 1)));
    assert_eq!(n.agent(b).call(cb).state, State::Confirmed);
    assert_eq!(stats(&mut n, sw).answered, 2);
}

/// Nobody answers within max_wait_s: the caller leaves the queue and its program goes on with
/// QUEUESTATUS=TIMEOUT; with no agent logged in, EMPTY.
#[test]
fn max_wait_moves_the_caller_on_to_the_next_step() {
    let mut n = Net::new(77);
    let sw = queue_switch(
        &mut n,
        "members = [\"1001\"]\nmax_wait_s = 4\nmember_timeout_s = 2",
        2,
    );
    let bob = n.ua(BOB, "bob");
    let ags = agents(&mut n, sw, &AGENTS[..1], &[secs(100)]);
    let (a, c) = caller(&mut n, 5200);
    assert!(n.run_until(secs(10), |n| !n.agent(bob).calls.is_empty()));
    let waited = n.elapsed();
    let invite = n.agent(bob).last().requests[0].clone();
    assert!(
        invite.request_uri().unwrap().starts_with("sip:TIMEOUT@"),
        "{invite:?}"
    );
    assert!(n.agent(ags[0]).calls.len() >= 2, "the agent was rung again");
    assert!(n.agent(a).call(c).state == State::Confirmed);
    let s = stats(&mut n, sw);
    assert_eq!((s.waiting, s.timed_out, s.answered), (0, 1, 0));
    let _ = waited;

    // No agent logged in: EMPTY.
    n.sw(sw).shared.queues.log_in("q", "1001", false).unwrap();
    let before = n.agent(bob).calls.len();
    let (_, _) = caller(&mut n, 5201);
    assert!(n.run_until(secs(10), |n| n.agent(bob).calls.len() > before));
    let uri = n.agent(bob).last().requests[0]
        .request_uri()
        .unwrap()
        .to_string();
    assert!(uri.starts_with("sip:EMPTY@"), "{uri}");
    assert_eq!(stats(&mut n, sw).timed_out, 2);
}

/// A caller who hangs up while its agent rings: the agent's call is cancelled, the caller is
/// counted abandoned and nothing of it is left; the next caller gets the agent.
#[test]
fn a_caller_hanging_up_while_waiting_is_abandoned_and_leaves_nothing() {
    let mut n = Net::new(78);
    let sw = queue_switch(&mut n, "members = [\"1001\"]\nwrapup_s = 0", 2);
    let ags = agents(&mut n, sw, &AGENTS[..1], &[secs(3)]);
    let (a, c) = caller(&mut n, 5200);
    assert!(n.run_until(secs(2), |n| n.agent(ags[0]).calls.len() == 1));
    // Music while waiting.
    assert!(
        n.run_until(secs(1), |n| n.agent(a).rtp.len() > 10),
        "music heard"
    );
    hang_up(&mut n, a, c, secs(2));
    assert!(n.run_until(secs(2), |n| n.agent(ags[0]).last().state == State::Ended));
    let s = stats(&mut n, sw);
    assert_eq!((s.waiting, s.abandoned, s.answered), (0, 1, 0));
    assert_eq!(n.sw(sw).active_calls(), 0);
    let (b, cb) = caller(&mut n, 5201);
    assert!(n.run_until(secs(5), answered(ags[0], 1)));
    assert_eq!(n.agent(b).call(cb).state, State::Confirmed);
    // A caller hanging up before any agent rings is abandoned too.
    let (d, cd) = caller(&mut n, 5202);
    n.run_for(secs(1));
    hang_up(&mut n, d, cd, secs(2));
    n.run_for(ms(300));
    let s = stats(&mut n, sw);
    assert_eq!((s.waiting, s.abandoned, s.answered), (0, 2, 1));
}

/// Callers on two workers are served in the order they came, whichever worker holds them.
#[test]
fn callers_on_several_workers_are_served_in_arrival_order() {
    let mut n = Net::new(79);
    let sw = queue_switch(&mut n, "members = [\"1001\"]\nwrapup_s = 0", 2);
    let ags = agents(&mut n, sw, &AGENTS[..1], &[ms(300)]);
    let mut callers = Vec::new();
    for i in 0..6 {
        callers.push(caller(&mut n, 5200 + i));
        n.run_for(ms(200));
    }
    // Each worker holds some of them.
    let per_worker: Vec<usize> = n.sw(sw).workers.iter().map(|w| w.active_calls()).collect();
    assert!(per_worker.iter().all(|&c| c > 0), "{per_worker:?}");
    let mut served = Vec::new();
    for _ in 0..callers.len() {
        let agent = ags[0];
        assert!(n.run_until(secs(5), move |n| n.agent(agent).last().state
            == State::Confirmed));
        let from = n.agent(agent).last().remote_uri.clone();
        let i = (0..callers.len())
            .find(|i| from.contains(&format!("caller{}@", 5200 + i)))
            .unwrap_or_else(|| panic!("{from}"));
        served.push(i);
        let (ua, c) = callers[i];
        hang_up(&mut n, ua, c, secs(2));
        assert!(n.run_until(secs(2), move |n| n.agent(agent).last().state
            == State::Ended));
    }
    assert_eq!(served, [0, 1, 2, 3, 4, 5]);
    let s = stats(&mut n, sw);
    assert_eq!((s.answered, s.abandoned, s.waiting), (6, 0, 0));
}

/// `queue_login` / `queue_logout` (the *45 / *46 of the default configuration): an
/// authenticated user joins the queue's agents and is rung for its callers, then leaves.
#[test]
fn a_user_logs_in_as_an_agent_takes_a_call_and_logs_out() {
    let mut n = Net::new(80);
    let head = "[security]\ntrusted = []\n[registrar]\nauthenticate = false\nkeepalive_s = 0\n\
        [queues.q]\nwrapup_s = 0\n\
        [[dialplan.contexts.default.rules]]\nexten = \"7000\"\nsteps = [\"queue q\"]\n\
        [[dialplan.contexts.default.rules]]\nexten = \"*45\"\nsteps = [\"queue_login q\", \"hangup\"]\n\
        [[dialplan.contexts.default.rules]]\nexten = \"*46\"\nsteps = [\"queue_logout q\", \"hangup\"]\n";
    let sw = n.switch(&config(head), &[SW], 2);
    let ags = agents(&mut n, sw, &AGENTS[..1], &[ms(100)]);
    n.agent(ags[0]).credentials = Some(("1001".into(), "pw".into()));
    assert!(stats(&mut n, sw).agents.is_empty(), "nobody logged in");
    let feature = |n: &mut Net, code: &str| {
        let c = n.invite(ags[0], &format!("sip:{code}@127.0.0.1"), SW);
        assert!(
            n.run_until(secs(3), ended(ags[0], c)),
            "{code} ends after its tone"
        );
        assert_eq!(n.agent(ags[0]).call(c).auth_attempts, 1, "as user 1001");
        // Answered, with the confirmation tone, then hung up.
        assert!(invite_statuses(n, ags[0], c).contains(&200));
    };
    feature(&mut n, "*45");
    assert_eq!(stats(&mut n, sw).agents, [("1001".to_string(), 0)]);
    n.sw(sw).shared.store.add_user("2001", "strowger", "pw");
    let a = n.ua("127.0.0.1:5200", "2001");
    n.agent(a).credentials = Some(("2001".into(), "pw".into()));
    let c = n.invite(a, "sip:7000@127.0.0.1", SW);
    let agent_calls = n.agent(ags[0]).calls.len();
    assert!(n.run_until(secs(3), answered(ags[0], agent_calls)));
    hang_up(&mut n, a, c, secs(2));
    n.run_for(ms(200));
    feature(&mut n, "*46");
    let s = stats(&mut n, sw);
    assert!(s.agents.is_empty(), "{s:?}");
    assert_eq!(s.answered, 1);
    let logs = n.sw(sw).logs();
    assert!(
        logs.iter().any(|l| l == "1001 logged in to queue q"),
        "{logs:?}"
    );
    assert!(
        logs.iter().any(|l| l == "1001 logged out of queue q"),
        "{logs:?}"
    );
}

/// An agent who does not answer within member_timeout_s is cancelled and the caller goes on to
/// the next; the silent agent is free for other callers at once (no answer is no refusal).
#[test]
fn an_agent_who_does_not_answer_in_time_is_cancelled_for_the_next() {
    let mut n = Net::new(81);
    let sw = queue_switch(
        &mut n,
        "members = [\"1001\", \"1002\"]\nstrategy = \"roundrobin\"\nmember_timeout_s = 2",
        2,
    );
    let ags = agents(&mut n, sw, &AGENTS[..2], &[secs(100), ms(100)]);
    let t0 = n.now;
    let (a, c) = caller(&mut n, 5200);
    assert!(n.run_until(secs(5), answered(ags[1], 0)));
    let waited = n.now - t0;
    assert!(
        waited >= secs(2) && waited < secs(3),
        "the next agent after the member timeout: {waited:?}"
    );
    let silent = n.agent(ags[0]).call(0);
    assert_eq!(silent.state, State::Ended);
    assert_eq!(silent.requests_of(&Method::Cancel).len(), 1);
    assert_eq!(n.agent(a).call(c).state, State::Confirmed);
    // The next caller rings 1001 again at once (round robin), not after a retry pause.
    let (_b, _) = caller(&mut n, 5201);
    assert!(n.run_until(secs(1), |n| n.agent(ags[0]).calls.len() == 2));
    let s = stats(&mut n, sw);
    assert_eq!((s.answered, s.waiting), (1, 1));
}

/// An agent sends its caller back to the queue (a blind transfer to 7000): the agent's queue
/// call is done (it is free again) and the caller waits for the next agent.
#[test]
fn an_agent_transferring_its_caller_back_to_the_queue_is_free_again() {
    let mut n = Net::new(82);
    let sw = queue_switch(
        &mut n,
        "members = [\"1001\", \"1002\"]\nstrategy = \"roundrobin\"\nwrapup_s = 0",
        2,
    );
    let ags = agents(&mut n, sw, &AGENTS[..2], &[ms(100); 2]);
    let (a, c) = caller(&mut n, 5200);
    assert!(n.run_until(secs(3), answered(ags[0], 0)));
    n.refer(ags[0], 0, "<sip:7000@127.0.0.1>");
    assert!(
        n.run_until(secs(5), answered(ags[1], 0)),
        "the next agent took it"
    );
    hang_up(&mut n, ags[0], 0, secs(2));
    n.run_for(ms(300));
    assert_eq!(n.agent(a).call(c).state, State::Confirmed);
    let s = stats(&mut n, sw);
    assert_eq!((s.answered, s.waiting), (2, 0));
    assert_eq!(s.agents, [("1001".to_string(), 1), ("1002".to_string(), 1)]);
    // 1001 is free: the next caller gets it.
    let (_b, _) = caller(&mut n, 5201);
    assert!(n.run_until(secs(3), answered(ags[0], 1)));
}

/// An agent passes its queue caller on to an extension (44444, the demo) by a blind transfer:
/// once the demo answers, the agent's queue call is over and the next caller gets that agent.
#[test]
fn an_agent_transferring_its_caller_elsewhere_is_free_again() {
    let mut n = Net::new(83);
    let sw = queue_switch(&mut n, "members = [\"1001\"]\nwrapup_s = 0", 1);
    let ags = agents(&mut n, sw, &AGENTS[..1], &[ms(100)]);
    let (a, c) = caller(&mut n, 5200);
    assert!(n.run_until(secs(3), answered(ags[0], 0)));
    n.refer(ags[0], 0, "<sip:44444@127.0.0.1>");
    n.run_for(secs(1));
    hang_up(&mut n, ags[0], 0, secs(2));
    n.run_for(ms(300));
    assert_eq!(
        n.agent(a).call(c).state,
        State::Confirmed,
        "the caller is at the demo"
    );
    let s = stats(&mut n, sw);
    assert_eq!((s.answered, s.waiting), (1, 0));
    let (_b, _) = caller(&mut n, 5201);
    assert!(
        n.run_until(secs(3), answered(ags[0], 1)),
        "1001 takes the next caller"
    );
}

/// A reload while two callers wait with no agent: the queue's new member takes them in their
/// order, the dropped member is not rung, and a queue the reload added takes callers.
#[test]
fn a_reload_changes_members_keeps_callers_in_place_and_adds_a_queue() {
    let mut n = Net::new(90);
    let sw = queue_switch(&mut n, "members = [\"1001\"]\nwrapup_s = 0", 2);
    let ags = agents(&mut n, sw, &AGENTS, &[ms(200); 3]);
    n.sw(sw).shared.queues.log_in("q", "1001", false).unwrap();
    let (a1, c1) = caller(&mut n, 5200);
    n.run_for(ms(100));
    let (a2, c2) = caller(&mut n, 5201);
    assert!(n.run_until(secs(2), |n| stats(n, sw).waiting == 2));

    let q2 = "[queues.q2]\nmembers = [\"1003\"]\n\
              [[dialplan.contexts.default.rules]]\nexten = \"7001\"\nsteps = [\"queue q2\"]\n";
    n.reload(sw, &queue_config("members = [\"1002\"]\nwrapup_s = 0", q2));
    // The first caller gets the new member first; the second waits its turn.
    assert!(n.run_until(secs(5), answered(ags[1], 0)));
    assert_eq!(stats(&mut n, sw).waiting, 1);
    hang_up(&mut n, a1, c1, secs(2));
    assert!(n.run_until(secs(5), answered(ags[1], 1)));
    assert_eq!(n.agent(a2).call(c2).state, State::Confirmed);
    hang_up(&mut n, a2, c2, secs(2));
    assert!(
        n.agent(ags[0]).calls.is_empty(),
        "the dropped member was not rung"
    );
    let s = stats(&mut n, sw);
    assert_eq!((s.answered, s.abandoned), (2, 0), "the statistics go on");
    assert_eq!(s.agents, [("1002".to_string(), 2)]);
    // The added queue.
    let carol = n.ua("127.0.0.1:5202", "carol");
    let c = n.invite(carol, "sip:7001@127.0.0.1", SW);
    assert!(n.run_until(secs(5), answered(ags[2], 0)));
    hang_up(&mut n, carol, c, secs(2));
    let now = n.now;
    assert_eq!(n.sw(sw).shared.queues.stats("q2", now).unwrap().answered, 1);
}

/// A queue a reload removes (with the rule that led to it) keeps the caller waiting in it, who
/// is answered by its member as before; nobody new enters it, and it goes with its last caller.
#[test]
fn a_removed_queue_keeps_its_waiting_caller_until_answered_and_takes_no_one_new() {
    let mut n = Net::new(91);
    let sw = queue_switch(&mut n, "members = [\"1001\"]\nwrapup_s = 0", 2);
    let ags = agents(&mut n, sw, &AGENTS[..1], &[ms(200)]);
    n.sw(sw).shared.queues.log_in("q", "1001", false).unwrap();
    let (a, c) = caller(&mut n, 5200);
    assert!(n.run_until(secs(2), |n| stats(n, sw).waiting == 1));

    let head = "[registrar]\nauthenticate = false\nkeepalive_s = 0\n\
                [[dialplan.contexts.default.rules]]\nexten = \"7000\"\n\
                steps = [\"hangup unallocated_number\"]\n";
    n.reload(sw, &config(head));
    let (late, lc) = caller(&mut n, 5201);
    assert!(n.run_until(secs(2), ended(late, lc)));
    assert_eq!(invite_statuses(&mut n, late, lc).last(), Some(&404));
    n.run_for(secs(3));
    assert_eq!(stats(&mut n, sw).waiting, 1, "the caller stays");
    assert_eq!(n.agent(a).call(c).state, State::Confirmed);

    n.sw(sw).shared.queues.log_in("q", "1001", true).unwrap();
    assert!(n.run_until(secs(5), answered(ags[0], 0)));
    hang_up(&mut n, a, c, secs(2));
    let now = n.now;
    assert!(
        n.sw(sw).shared.queues.stats("q", now).is_none(),
        "gone with its last caller"
    );
}

/// Two switches on one store, each naming itself in `[cluster]`, with queue `q` and no agents
/// configured. The queue lives on the node its first caller reached; the other node's caller
/// is bridged there and waits behind it. An agent registered and logged in through the second
/// node (the roster is the store's) is rung from the first, answers the callers in the order
/// they came, and each caller hears the agent and the agent each caller. With its last caller
/// gone the queue's claim is free: the next caller, of a third node, is queued there, and the
/// agent is rung from there (it read the roster when it took the queue).
#[test]
fn callers_on_two_nodes_wait_in_one_queue_and_are_answered_in_order() {
    const SW2: &str = "127.0.0.2:5060";
    let mut n = Net::new(86);
    let head = |addr: &str, security: &str| {
        format!(
            "[cluster]\nnode_uri = \"sip:{addr}\"\n{security}\
             [registrar]\nauthenticate = false\nkeepalive_s = 0\n[queues.q]\nwrapup_s = 0\n\
             [[dialplan.contexts.default.rules]]\nexten = \"7000\"\nsteps = [\"queue q\"]\n\
             [[dialplan.contexts.default.rules]]\nexten = \"*45\"\nsteps = [\"queue_login q\", \"hangup\"]\n"
        )
    };
    let a = n.switch(&config(&head(SW, "")), &[SW], 2);
    // The second node challenges all but its callers and the first node, so the agent's login
    // is its user's.
    let b_config = config(&head(SW2, "[security]\ntrusted = [\"127.0.0.1/32\"]\n"));
    let b = n.switch_sharing(&b_config, &[SW2], 2, a);
    let caller = |n: &mut Net, sw: &str, port: u16, hz: u32| {
        let ua = n.ua(&format!("127.0.0.1:{port}"), &format!("caller{port}"));
        let u = n.agent(ua);
        u.codecs = vec![0, 101];
        u.send_rtp = true;
        u.voice = tone(hz);
        let c = n.invite(ua, "sip:7000@127.0.0.1", sw);
        assert!(
            n.run_until(secs(2), confirmed(ua, c)),
            "{port} answered by the queue"
        );
        (ua, c)
    };
    let first = caller(&mut n, SW, 5061, 700);
    let second = caller(&mut n, SW2, 5062, 900);
    n.run_for(ms(500));
    assert_eq!(stats(&mut n, a).waiting, 2, "both wait on the first node");
    assert!(!n.sw(b).shared.queues.hosts("q"));
    let bridged = "7000 is on node sip:127.0.0.1:5060: bridged there";
    assert!(n.sw(b).logs().iter().any(|l| l.contains(bridged)));

    n.sw(b).shared.store.add_user("1001", "strowger", "pw");
    let agent = n.ua("127.0.0.9:5101", "1001");
    let u = n.agent(agent);
    u.credentials = Some(("1001".into(), "pw".into()));
    u.codecs = vec![0, 101];
    u.send_rtp = true;
    u.voice = tone(1300);
    u.policy = Policy {
        provisional: vec![(180, false)],
        status: 200,
        after: ms(100),
    };
    n.register(agent, SW2, "strowger", 600);
    let login = n.invite(agent, "sip:*45@127.0.0.2", SW2);
    assert!(n.run_until(secs(3), ended(agent, login)));
    assert!(
        n.agent(agent).call(login).auth_attempts == 1,
        "logged in as 1001"
    );
    assert!(
        stats(&mut n, a).agents.is_empty(),
        "not yet read by the hosting node"
    );

    for (i, (ua, c)) in [first, second].into_iter().enumerate() {
        let nth = i + 1;
        assert!(
            n.run_until(secs(4), answered(agent, nth)),
            "the agent answers caller {i}"
        );
        let from = n.agent(agent).call(nth).remote_uri.clone();
        let port = 5061 + i;
        assert!(from.contains(&format!("caller{port}")), "in order: {from}");
        let heard = hears(&mut n, ua, &[1300, 700, 900], secs(1));
        assert!(
            heard[0] > 3000.0,
            "caller {port} hears the agent: {heard:?}"
        );
        let heard = hears(&mut n, agent, &[700, 900], secs(1));
        let (own, other) = if i == 0 { (0, 1) } else { (1, 0) };
        assert!(
            heard[own] > 3000.0 && heard[other] < 300.0,
            "the agent hears caller {port} alone: {heard:?}"
        );
        hang_up(&mut n, ua, c, secs(2));
        n.run_for(ms(100));
    }
    let s = stats(&mut n, a);
    assert_eq!((s.answered, s.abandoned), (2, 0));
    assert_eq!(s.agents, [("1001".to_string(), 2)]);
    assert_eq!(n.sw(a).active_calls() + n.sw(b).active_calls(), 0);

    const SW3: &str = "127.0.0.3:5060";
    let c3 = n.switch_sharing(&config(&head(SW3, "")), &[SW3], 1, a);
    let (ua, c) = caller(&mut n, SW3, 5063, 700);
    assert!(n.sw(c3).shared.queues.hosts("q"), "the third node's now");
    assert!(!n.sw(a).shared.queues.hosts("q"));
    assert!(
        n.run_until(secs(4), answered(agent, 3)),
        "the third node read the roster when it took the queue"
    );
    assert_eq!(stats(&mut n, c3).answered, 1);
    hang_up(&mut n, ua, c, secs(2));
}
