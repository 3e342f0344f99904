//! Kamailio's dispatcher as the edge (examples/kamailio-edge/kamailio.cfg) in front of two
//! strowger nodes sharing one Redis location store: SIPp's echo calls to 9196 spread over both
//! nodes (their CDRs say where each went); phones register through the edge, which adds its
//! Path, and a call to one of them reaches it through the edge from either node; the calls a full
//! node refuses with 503, and a killed node's share of new calls (on the INVITE's timeout), fail
//! over to the other node.

use crate::common;

use common::group::Proc;
use common::net::free_port;
use common::servers::Server;
use common::sipp::{Scenario, Sipp};
use common::switch::Opts;
use common::{wait_for, Strowger, TempDir};
use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

/// A node: trusts the edge (and SIPp) on loopback, keeps locations in `store`, answers 9196
/// with the echo and rings registered users at 1XXX; beyond `max_calls` calls it answers 503.
fn node(label: &str, dir: &TempDir, store: &str, max_calls: u32) -> Strowger {
    let text = format!(
        "[general]\nmax_calls = {max_calls}\n[security]\ntrusted = [\"127.0.0.1\"]\n\
         [registrar]\ndomain = \"strowger\"\nstore = \"{store}\"\n\
         [[users]]\nuser = \"1001\"\npassword = \"secret-1001\"\n\
         [[users]]\nuser = \"1002\"\npassword = \"secret-1002\"\n\
         [[dialplan.contexts.default.rules]]\nexten = \"9196\"\nsteps = [\"answer\", \"echo\"]\n\
         [[dialplan.contexts.default.rules]]\nregex = \"^1[0-9]{{3}}$\"\n\
         steps = [\"bridge user/${{EXTEN}} timeout=10\"]\n"
    );
    let path = dir.path().join(format!("{label}.toml"));
    std::fs::write(&path, text).unwrap();
    Strowger::with(
        label,
        Opts {
            config_file: Some(path),
            workers: Some(1),
            ..Opts::default()
        },
    )
}

/// Kamailio with examples/kamailio-edge/kamailio.cfg on 127.0.0.1:`port`, dispatching to
/// `nodes` and probing them every second.
fn kamailio(port: u16, nodes: &[&Strowger], dir: &TempDir) -> Proc {
    let list = dir.path().join("dispatcher.list");
    let lines: Vec<String> = nodes.iter().map(|n| format!("1 sip:{}\n", n.sip)).collect();
    std::fs::write(&list, lines.concat()).unwrap();
    let cfg = common::repo_root().join("examples/kamailio-edge/kamailio.cfg");
    let mut cmd = Command::new("kamailio");
    cmd.arg("-f")
        .arg(cfg)
        .args(["-DD", "-E", "-n", "2", "-m", "64", "-M", "8"])
        .arg("-l")
        .arg(format!("udp:127.0.0.1:{port}"))
        .arg("-A")
        .arg(format!("DISPATCHER_LIST=\"{}\"", list.display()))
        .args(["-A", "PING_INTERVAL=1"]);
    let mut p = Proc::spawn("kamailio", &mut cmd, dir.path());
    std::thread::sleep(Duration::from_millis(500));
    p.assert_alive();
    p
}

/// `calls` calls to `exten` through the edge from 127.0.0.1:`port` (None: any), all answered.
fn call_through(edge: SocketAddr, exten: &str, calls: u32, port: Option<u16>, dir: &TempDir) {
    let mut sipp = Sipp::new(Scenario::File("proxy_uac.xml"))
        .service(exten)
        .args(&["-key", "domain", "strowger"])
        .calls(calls, 20, 10)
        .duration_ms(200);
    if let Some(p) = port {
        sipp = sipp.port(p);
    }
    sipp.run(edge, dir.path()).assert_ok(calls.into());
}

/// Each node's CDRs for `exten`, once they add up to `total`.
fn cdrs(nodes: &[&Strowger], exten: &str, total: usize) -> Vec<Vec<common::switch::Cdr>> {
    let of = || -> Vec<Vec<_>> {
        nodes
            .iter()
            .map(|n| {
                n.cdrs()
                    .into_iter()
                    .filter(|c| c.str("exten") == exten)
                    .collect()
            })
            .collect()
    };
    wait_for(Duration::from_secs(10), || {
        (of().iter().map(Vec::len).sum::<usize>() == total).then_some(())
    });
    of()
}

/// How many of `node`'s CDRs are answered calls to `exten`, once `n` are (10 s at most).
fn answered(node: &Strowger, exten: &str, n: usize) -> usize {
    let count = || {
        node.cdrs()
            .iter()
            .filter(|c| c.str("exten") == exten && !c.is_null("answer"))
            .count()
    };
    wait_for(Duration::from_secs(10), || (count() >= n).then_some(()));
    std::thread::sleep(Duration::from_millis(300)); // and no more
    count()
}

/// `user` registers from 127.0.0.1:`port` through the edge (digest; the retry's Call-ID takes
/// it to the node that challenged it).
fn register(edge: SocketAddr, user: &str, port: u16, dir: &TempDir) {
    Sipp::new(Scenario::File("register.xml"))
        .service(user)
        .port(port)
        .args(&["-au", user, "-ap", &format!("secret-{user}")])
        .run(edge, dir.path())
        .assert_ok(1);
}

/// Node b's max_calls.
const FULL: u32 = 6;

#[test]
fn kamailio_dispatches_to_strowger_nodes() {
    let dir = TempDir::new("kamailio-edge");
    let redis = Server::redis();
    let a = node("kam-node-a", &dir, &redis.url, 1000);
    let mut b = node("kam-node-b", &dir, &redis.url, FULL);
    let edge: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut kam = kamailio(edge.port(), &[&a, &b], &dir);

    // Echo calls: the Call-ID hash spreads them over both nodes.
    call_through(edge, "9196", 20, None, &dir);
    let split = cdrs(&[&a, &b], "9196", 20);
    assert!(
        !split[0].is_empty() && !split[1].is_empty(),
        "both nodes answer: {} and {}",
        split[0].len(),
        split[1].len()
    );
    for c in split.iter().flatten() {
        c.assert_answered("9196");
    }

    // Phones register through the edge; calls to 1001 from 1002's phone reach it whichever
    // node takes them (12 calls: both nodes take some but for a chance of 1 in 2,048).
    let (p1001, p1002) = (free_port(), free_port());
    register(edge, "1001", p1001, &dir);
    register(edge, "1002", p1002, &dir);
    let phone = Sipp::new(Scenario::File("uas_proxied.xml"))
        .port(p1001)
        .calls(12, 10, 10)
        .spawn(None, dir.path());
    std::thread::sleep(Duration::from_millis(300)); // let it bind
    call_through(edge, "1001", 12, Some(p1002), &dir);
    let rang = phone.finish();
    rang.assert_ok(12);
    // Each INVITE came through the edge (its Via on top), following the Path the node stored.
    let invites: Vec<_> = rang
        .received()
        .into_iter()
        .filter(|m| m.method() == Some("INVITE"))
        .collect();
    assert_eq!(invites.len(), 12);
    for m in &invites {
        let via = m.headers("via")[0];
        assert!(via.contains(&edge.to_string()), "not via the edge: {m:?}");
    }
    let rung = cdrs(&[&a, &b], "1001", 12);
    assert!(
        !rung[0].is_empty() && !rung[1].is_empty(),
        "both nodes reach the phone: {} and {}",
        rung[0].len(),
        rung[1].len()
    );
    for c in rung.iter().flatten() {
        c.assert_answered("1001");
        assert_eq!(c.str("bridged_to"), format!("sip:1001@127.0.0.1:{p1001}"));
    }

    // Node b full, its max_calls taken by calls straight to it: the calls hashed to it get 503
    // there and go to a.
    let (a0, b0) = (split[0].len(), split[1].len());
    let filling = Sipp::new(Scenario::Builtin("uac"))
        .service("9196")
        .calls(FULL, 20, FULL)
        .duration_ms(5000)
        .spawn(Some(b.sip), dir.path());
    std::thread::sleep(Duration::from_millis(1500));
    call_through(edge, "9196", 10, None, &dir);
    filling.finish().assert_ok(FULL.into());
    assert_eq!(answered(&a, "9196", a0 + 10), a0 + 10, "a took them all");
    let b1 = b0 + FULL as usize;
    assert_eq!(answered(&b, "9196", b1), b1, "b only its own");

    // Node b dies: the calls hashed to it time out there (1 s) and go to a; none fails.
    b.signal("-KILL");
    b.wait_exit(Duration::from_secs(5), "SIGKILL");
    call_through(edge, "9196", 10, None, &dir);
    assert_eq!(answered(&a, "9196", a0 + 20), a0 + 20, "a took them all");
    kam.assert_alive();
}
