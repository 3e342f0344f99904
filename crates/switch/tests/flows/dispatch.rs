//! The edge (`proxy.dispatch`) on the simulated network: calls and REGISTERs for its domain
//! spread over a `[[dispatch]]` set's nodes by weight, nodes probed down and up, failover on 503
//! and on silence, CANCEL during failover, and in-dialog requests kept on the answering node.

use crate::net;

use net::*;
use sip::{HeaderName, Method};

const N1: &str = "127.0.0.2:5060";
const N2: &str = "127.0.0.3:5060";

/// An edge on `SW` for example.com dispatching to nodes N1 and N2 (agents answering by their
/// policies) with these weights; `set` adds keys to the `[[dispatch]]` table.
fn edge(seed: u64, w1: u32, w2: u32, set: &str) -> (Net, Id, Id, Id, Id) {
    let mut n = Net::new(seed);
    let toml = config(&format!(
        "[proxy]\ndomains = [\"example.com\"]\ndispatch = \"nodes\"\n\
         [[dispatch]]\nname = \"nodes\"\n\
         nodes = [\"sip:{N1};weight={w1}\", \"sip:{N2};weight={w2}\"]\n{set}\n"
    ));
    let sw = n.switch(&toml, &[SW], 1);
    let n1 = n.ua(N1, "node1");
    let n2 = n.ua(N2, "node2");
    // Its Call-IDs favour node 1 first where the weights are lopsided (see the tests).
    let a = n.ua(ALICE, "caller");
    (n, sw, a, n1, n2)
}

/// INVITEs the edge sent to `node`.
fn invites_to(n: &Net, node: &str) -> usize {
    n.sent(addr(SW), addr(node), "INVITE").len()
}

/// A node series of the edge's scrape: `metric` for `node`.
fn node_metric(n: &mut Net, sw: Id, metric: &str, node: &str) -> f64 {
    let nodes = [
        ("nodes", &*format!("sip:{N1}")),
        ("nodes", &*format!("sip:{N2}")),
    ];
    let text = n.sw(sw).scrape_nodes(&nodes);
    let s = crate::metrics::samples(&text);
    crate::metrics::value(
        &s,
        &format!("strowger_{metric}{{set=\"nodes\",node=\"sip:{node}\"}}"),
    )
}

/// Cuts (or restores) the link between the edge and a node: every datagram lost.
fn cut(n: &mut Net, sw: Id, node: Id, lost: bool) {
    let loss = if lost { 1.0 } else { 0.0 };
    n.link(
        sw,
        node,
        Link {
            loss,
            ..Link::default()
        },
    );
}

#[test]
fn calls_spread_over_the_nodes_and_their_dialogs_stay_on_the_answering_node() {
    let (mut n, sw, a, n1, n2) = edge(31, 1, 1, "");
    let mut calls = Vec::new();
    for _ in 0..20 {
        let c = n.invite(a, "sip:1002@example.com", SW);
        assert!(n.run_until(secs(5), confirmed(a, c)));
        calls.push(c);
    }
    let (c1, c2) = (n.agent(n1).calls.len(), n.agent(n2).calls.len());
    assert_eq!(c1 + c2, 20);
    assert!(c1 >= 4 && c2 >= 4, "equal weights, {c1} and {c2} calls");
    // The edge record-routed: each BYE goes through it to the node that answered, by Route.
    for c in calls {
        n.bye(a, c);
        assert!(n.run_until(secs(5), bye_answered(a, c)));
        assert_bye_ok(&mut n, a, c, "BYE through the edge");
    }
    let byes = |n: &Net, node| n.sent(addr(SW), addr(node), "BYE").len();
    assert_eq!((byes(&n, N1), byes(&n, N2)), (c1, c2));
    // The node got the Request-URI Alice asked for, and the edge's Record-Route.
    let inv = n.agent(n1).calls[0].call_id.clone();
    let req = n
        .agent(n1)
        .received
        .iter()
        .find(|(_, _, m)| {
            m.method() == Some(&Method::Invite) && m.header(HeaderName::CallId) == Some(&inv)
        })
        .map(|(_, _, m)| m.clone())
        .unwrap();
    assert_eq!(req.request_uri(), Some("sip:1002@example.com"));
    assert!(req
        .header(HeaderName::RecordRoute)
        .is_some_and(|r| r.contains("127.0.0.1:5060")));
    assert_eq!(n.sw(sw).active_calls(), 0, "the edge keeps no calls");
}

#[test]
fn weights_share_the_calls_and_register_goes_to_a_node() {
    let (mut n, _sw, a, n1, n2) = edge(32, 4, 1, "");
    for _ in 0..30 {
        let c = n.invite(a, "sip:1002@example.com", SW);
        assert!(n.run_until(secs(5), confirmed(a, c)));
    }
    let (c1, c2) = (n.agent(n1).calls.len(), n.agent(n2).calls.len());
    assert!(c1 > 2 * c2 && c2 > 0, "weights 4:1, {c1} and {c2} calls");

    // A REGISTER for the edge's domain is the nodes' to keep, not the edge's.
    let b = n.ua("127.0.0.1:5072", "bob");
    n.register(b, SW, "example.com", 600);
    assert!(n.run_until(secs(2), registered([b])));
    let held: Vec<String> = [n1, n2]
        .iter()
        .flat_map(|&x| n.agent(x).bindings.clone())
        .collect();
    assert_eq!(held.len(), 1, "{held:?}");
    assert!(held[0].contains("127.0.0.1:5072"), "{held:?}");
}

#[test]
fn a_silent_node_is_down_after_its_failed_probes_and_up_after_one_good_one() {
    let (mut n, sw, a, n1, _n2) = edge(33, 1, 1, "probe_interval_s = 5\nprobe_failures = 2");
    // Both answer the first probe; then node 1 falls silent.
    n.run_for(secs(1));
    cut(&mut n, sw, n1, true);
    // Probes at 5 s and 10 s go unanswered, each failing 2 s (timeout_ms) later.
    n.run_for(secs(10));
    assert!(n.sw(sw).logs().iter().all(|l| !l.contains("is down")));
    n.run_for(secs(1) + ms(100));
    let logs = n.sw(sw).logs();
    assert!(
        logs.iter()
            .any(|l| l.contains("node sip:127.0.0.2:5060 is down (2 probes failed)")),
        "{logs:?}"
    );
    assert_eq!(node_metric(&mut n, sw, "dispatch_node_up", N1), 0.0);
    assert_eq!(node_metric(&mut n, sw, "dispatch_node_up", N2), 1.0);
    assert_eq!(
        node_metric(&mut n, sw, "dispatch_probe_failures_total", N1),
        2.0
    );
    assert_eq!(
        node_metric(&mut n, sw, "dispatch_probe_failures_total", N2),
        0.0
    );
    // Every new call goes to node 2 at once: none waits for node 1.
    for _ in 0..10 {
        let c = n.invite(a, "sip:1002@example.com", SW);
        assert!(n.run_until(secs(1), confirmed(a, c)));
    }
    assert_eq!(invites_to(&n, N1), 0);
    // Back: its first answered probe (at most one interval) and it takes calls again.
    cut(&mut n, sw, n1, false);
    n.run_for(secs(5));
    assert!(n
        .sw(sw)
        .logs()
        .iter()
        .any(|l| l.contains("node sip:127.0.0.2:5060 is up")));
    assert_eq!(node_metric(&mut n, sw, "dispatch_node_up", N1), 1.0);
    for _ in 0..10 {
        let c = n.invite(a, "sip:1002@example.com", SW);
        assert!(n.run_until(secs(1), confirmed(a, c)));
    }
    assert!(invites_to(&n, N1) > 0);
}

#[test]
fn a_node_answering_503_passes_the_call_to_the_next() {
    let (mut n, sw, a, n1, n2) = edge(34, 1, 1, "");
    n.agent(n1).policy.status = 503;
    for _ in 0..10 {
        let c = n.invite(a, "sip:1002@example.com", SW);
        assert!(n.run_until(secs(5), confirmed(a, c)));
        assert!(!invite_statuses(&mut n, a, c).contains(&503));
    }
    assert!(invites_to(&n, N1) > 0, "some calls tried node 1 first");
    assert_eq!(n.agent(n2).calls.len(), 10);
    // /metrics: every call node 1 refused went on to node 2.
    let to_n1 = invites_to(&n, N1) as f64;
    assert_eq!(
        node_metric(&mut n, sw, "dispatch_requests_total", N1),
        to_n1
    );
    assert_eq!(
        node_metric(&mut n, sw, "dispatch_failovers_total", N1),
        to_n1
    );
    assert_eq!(node_metric(&mut n, sw, "dispatch_requests_total", N2), 10.0);
    assert_eq!(node_metric(&mut n, sw, "dispatch_failovers_total", N2), 0.0);

    // With every node refusing, the caller gets the last refusal.
    n.agent(n2).policy.status = 503;
    let c = n.invite(a, "sip:1002@example.com", SW);
    assert!(n.run_until(secs(5), ended(a, c)));
    assert_eq!(invite_statuses(&mut n, a, c).last(), Some(&503));
}

#[test]
fn an_invite_its_node_does_not_answer_goes_to_the_next_after_timeout_ms() {
    // Weights so lopsided that the call tries node 1 first.
    let (mut n, sw, a, n1, n2) = edge(35, 100, 1, "timeout_ms = 1500");
    n.run_for(secs(1));
    cut(&mut n, sw, n1, true);
    let t0 = n.now;
    let c = n.invite(a, "sip:1002@example.com", SW);
    assert!(n.run_until(secs(5), confirmed(a, c)));
    let took = n.now - t0;
    assert!(
        took >= ms(1500) && took < ms(2000),
        "answered after {took:?}"
    );
    assert!(invites_to(&n, N1) > 0);
    assert_eq!(n.agent(n2).calls.len(), 1);
    assert!(n.agent(n1).calls.is_empty());
}

#[test]
fn cancel_during_failover_goes_to_the_branch_in_progress() {
    let (mut n, sw, a, n1, n2) = edge(36, 100, 1, "");
    n.agent(n2).policy.after = secs(60);
    n.run_for(secs(1));
    cut(&mut n, sw, n1, true);

    // Cancelled after the failover: the CANCEL goes to node 2, ringing; none to node 1.
    let c = n.invite(a, "sip:1002@example.com", SW);
    assert!(n.run_until(secs(5), |n| !n.agent(n2).calls.is_empty()));
    n.run_for(ms(500));
    n.cancel(a, c);
    assert!(n.run_until(secs(5), ended(a, c)));
    assert_eq!(invite_statuses(&mut n, a, c).last(), Some(&487));
    assert_eq!(n.sent(addr(SW), addr(N2), "CANCEL").len(), 1);
    assert!(n.sent(addr(SW), addr(N1), "CANCEL").is_empty());

    // Cancelled while the silent node 1 is tried: nothing goes to node 2, the caller gets 487
    // when the edge gives node 1 up.
    let before = n.agent(n2).calls.len();
    let c = n.invite(a, "sip:1002@example.com", SW);
    n.run_for(ms(500));
    n.cancel(a, c);
    assert!(n.run_until(secs(5), ended(a, c)));
    assert_eq!(invite_statuses(&mut n, a, c).last(), Some(&487));
    assert_eq!(n.agent(n2).calls.len(), before);
}

#[test]
fn with_no_node_up_the_caller_gets_503_with_retry_after() {
    let (mut n, sw, a, n1, n2) = edge(37, 1, 1, "probe_interval_s = 2\nprobe_failures = 1");
    cut(&mut n, sw, n1, true);
    cut(&mut n, sw, n2, true);
    n.run_for(secs(3));
    let c = n.invite(a, "sip:1002@example.com", SW);
    assert!(n.run_until(secs(2), ended(a, c)));
    let r = last_response(&mut n, a, c, "INVITE");
    assert_eq!(r.status(), Some(503));
    assert!(r.header(HeaderName::RetryAfter).is_some());
    assert!(r
        .header(HeaderName::Warning)
        .is_some_and(|w| w.contains("no node of dispatch set nodes is up")));
}

/// A phone registered through the edge is called back through it: the edge's REGISTER carries
/// its Path, the node's INVITE follows that Path to the edge, which loose-routes it to the phone.
#[test]
fn a_phone_registered_through_the_edge_is_called_through_it() {
    let mut n = Net::new(38);
    let edge_toml = config(&format!(
        "[proxy]\ndomains = [\"example.com\"]\ndispatch = \"nodes\"\n\
         [[dispatch]]\nname = \"nodes\"\nnodes = [\"sip:{N1}\"]\n"
    ));
    n.switch(&edge_toml, &[SW], 1);
    let node_toml = config(&format!(
        "[registrar]\ndomain = \"example.com\"\nauthenticate = false\nkeepalive_s = 0\n\
         [vars]\nbridge_target = \"{BOB}\"\nself = \"{N1}\"\n"
    ));
    let node = n.switch(&node_toml, &[N1], 1);
    n.sw(node)
        .shared
        .store
        .add_user("1002", "example.com", "pw");
    let bob = n.ua("127.0.0.1:5072", "1002");
    n.register(bob, SW, "example.com", 600);
    assert!(n.run_until(secs(2), registered([bob])));
    let reg = n.sent(addr(SW), addr(N1), "REGISTER")[0].msg().unwrap();
    assert_eq!(
        reg.header(HeaderName::Path),
        Some("<sip:127.0.0.1:5060;lr>")
    );

    // A caller of the node reaches Bob by way of the edge.
    let a = n.ua(ALICE, "caller");
    let c = n.invite(a, "sip:1002@127.0.0.2", N1);
    assert!(n.run_until(secs(5), confirmed(a, c)));
    assert_eq!(n.sent(addr(N1), addr(SW), "INVITE").len(), 1);
    assert_eq!(n.sent(addr(SW), addr("127.0.0.1:5072"), "INVITE").len(), 1);
    assert_eq!(n.agent(bob).calls.len(), 1);
    n.bye(a, c);
    assert!(n.run_until(secs(5), bye_answered(a, c)));
    assert_bye_ok(&mut n, a, c, "BYE");
}

/// On an edge of two workers every REGISTER is dispatched by its Call-ID's worker, where the
/// node's answer arrives, whichever worker read it.
#[test]
fn registers_read_by_any_worker_of_the_edge_are_answered() {
    let mut n = Net::new(39);
    let toml = config(&format!(
        "[proxy]\ndomains = [\"example.com\"]\ndispatch = \"nodes\"\n\
         [[dispatch]]\nname = \"nodes\"\nnodes = [\"sip:{N1}\", \"sip:{N2}\"]\n"
    ));
    let sw = n.switch(&toml, &[SW], 2);
    n.ua(N1, "node1");
    n.ua(N2, "node2");
    let phones: Vec<Id> = (0..8)
        .map(|i| n.ua(&format!("127.0.0.1:{}", 5072 + i), &format!("10{i:02}")))
        .collect();
    for &p in &phones {
        n.register(p, SW, "example.com", 600);
    }
    assert!(n.run_until(secs(2), |n| phones
        .iter()
        .all(|&p| n.agent(p).register_statuses == [200])));
    assert!(
        n.sw(sw).handed_off() > 0,
        "some were read by the other worker"
    );
}

/// A reload that changes the sets takes effect for the next requests: a node added is probed
/// and takes its share.
#[test]
fn a_reload_adds_a_node() {
    let set = |nodes: &str| {
        config(&format!(
            "[proxy]\ndomains = [\"example.com\"]\ndispatch = \"nodes\"\n\
             [[dispatch]]\nname = \"nodes\"\nnodes = [{nodes}]\n"
        ))
    };
    let mut n = Net::new(40);
    let sw = n.switch(&set(&format!("\"sip:{N1}\"")), &[SW], 1);
    let n1 = n.ua(N1, "node1");
    let n2 = n.ua(N2, "node2");
    let a = n.ua(ALICE, "caller");
    for _ in 0..5 {
        let c = n.invite(a, "sip:1002@example.com", SW);
        assert!(n.run_until(secs(5), confirmed(a, c)));
    }
    assert_eq!(n.agent(n1).calls.len(), 5);
    n.reload(sw, &set(&format!("\"sip:{N1}\", \"sip:{N2};weight=100\"")));
    n.run_for(secs(1));
    assert!(
        !n.sent(addr(SW), addr(N2), "OPTIONS").is_empty(),
        "the new node is probed"
    );
    for _ in 0..5 {
        let c = n.invite(a, "sip:1002@example.com", SW);
        assert!(n.run_until(secs(5), confirmed(a, c)));
    }
    assert!(n.agent(n2).calls.len() >= 4, "{}", n.agent(n2).calls.len());
}
