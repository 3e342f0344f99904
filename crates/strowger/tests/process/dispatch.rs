//! The edge: one strowger with `proxy.dispatch` in front of two strowger nodes (small
//! configurations, quick to start: the nodes trust loopback, so the edge's calls run in their
//! default context). SIPp calls the echo extension 9196 at edge.test through the edge
//! (tests/sipp/proxy_uac.xml); the nodes' CDRs say where each call went.

use crate::common;

use common::sipp::{Scenario, Sipp};
use common::switch::Opts;
use common::{wait_for, Strowger, TempDir};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The echo extension, which nodes answer (and the edge's configuration needs a dialplan).
const ECHO: &str =
    "[[dialplan.contexts.default.rules]]\nexten = \"9196\"\nsteps = [\"answer\", \"echo\"]\n";

/// `text` written to `dir/name`.
fn write(dir: &TempDir, name: &str, text: &str) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// A node on `sip` (None: a free port), with one worker.
fn node(label: &str, dir: &TempDir, sip: Option<SocketAddr>) -> Strowger {
    let text = format!(
        "[security]\ntrusted = [\"127.0.0.1\"]\n\
         [[users]]\nuser = \"1001\"\npassword = \"secret-1001\"\n{ECHO}"
    );
    Strowger::with(
        label,
        Opts {
            config_file: Some(write(dir, "node.toml", &text)),
            workers: Some(1),
            sip,
            ..Opts::default()
        },
    )
}

/// The edge for edge.test (calls) and strowger (REGISTERs) over `nodes`, probing every second, a node down after 2 failures.
fn edge(dir: &TempDir, nodes: &[&Strowger]) -> Strowger {
    let list: Vec<String> = nodes.iter().map(|n| format!("\"sip:{}\"", n.sip)).collect();
    let text = format!(
        "[proxy]\ndomains = [\"edge.test\", \"strowger\"]\ndispatch = \"nodes\"\n{ECHO}\
         [[dispatch]]\nname = \"nodes\"\nnodes = [{}]\nprobe_interval_s = 1\n\
         probe_failures = 2\ntimeout_ms = 500\n",
        list.join(", ")
    );
    Strowger::with(
        "dispatch-edge",
        Opts {
            config_file: Some(write(dir, "edge.toml", &text)),
            ..Opts::default()
        },
    )
}

/// `calls` echo calls through the edge, all answered.
fn call_through(edge: &Strowger, calls: u32) {
    Sipp::new(Scenario::File("proxy_uac.xml"))
        .service("9196")
        .args(&["-key", "domain", "edge.test"])
        .calls(calls, 20, 10)
        .duration_ms(200)
        .run(edge.sip, edge.dir.path())
        .assert_ok(calls.into());
}

/// Waits until the nodes have written `total` CDRs between them; returns each one's count.
fn cdrs(nodes: &[&Strowger], total: usize) -> Vec<usize> {
    let counts = || nodes.iter().map(|n| n.cdrs().len()).collect::<Vec<_>>();
    wait_for(Duration::from_secs(10), || {
        (counts().iter().sum::<usize>() == total).then_some(())
    });
    counts()
}

#[test]
fn calls_spread_over_the_nodes_and_a_killed_node_leaves_and_rejoins() {
    let dir = TempDir::new("dispatch");
    let a = node("dispatch-a", &dir, None);
    let mut b = node("dispatch-b", &dir, None);
    let e = edge(&dir, &[&a, &b]);

    call_through(&e, 20);
    let split = cdrs(&[&a, &b], 20);
    assert!(split[0] > 0 && split[1] > 0, "equal weights: {split:?}");

    // Registrations through the edge: each REGISTER's retry with credentials reaches the node
    // whose nonce it answers (the nodes' nonce keys differ), so all four succeed.
    Sipp::new(Scenario::File("register.xml"))
        .service("1001")
        .args(&["-au", "1001", "-ap", "secret-1001"])
        .calls(4, 10, 1)
        .run(e.sip, e.dir.path())
        .assert_ok(4);

    // Node b dies: the edge takes it out within about interval × failures + timeout.
    let b_sip = b.sip;
    let killed = Instant::now();
    b.signal("-KILL");
    b.wait_exit(Duration::from_secs(5), "SIGKILL");
    e.wait_log(&format!("node sip:{b_sip} is down"), 0);
    let took = killed.elapsed();
    assert!(took < Duration::from_millis(3500), "down after {took:?}");
    // From then on every call goes to a, none fails.
    call_through(&e, 10);
    assert_eq!(cdrs(&[&a], split[0] + 10), [split[0] + 10]);

    // Restarted on its address, b is back after its first answered probe and takes calls.
    let b = node("dispatch-b2", &dir, Some(b_sip));
    e.wait_log(&format!("node sip:{b_sip} is up"), 0);
    call_through(&e, 20);
    let again = cdrs(&[&a, &b], split[0] + 10 + 20);
    assert!(again[1] > 0, "b rejoined: {again:?}");
}
