//! Forwarding and ring groups against the strowger process with the default configuration
//! (nobody trusted by address, callers authenticate as users): a real SIPp caller dials the
//! default feature code *72 as a user and that user's calls then reach the forward target, *73
//! takes it back; the demo ring group (6000) set to `sequential` rings a SIPp phone that rings,
//! then answers busy, and only then the next member's SIPp phone, which answers.

use crate::common;

use common::net::free_port;
use common::registrar::register;
use common::sipp::{Scenario, Sipp, SippResult};
use common::switch::{run_cli, Opts};
use common::{Strowger, TempDir};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The embedded configuration with users 1001-1003 (password "pw-USER"), its demo ring group
/// `sales` rung with `strategy`, written to `dir`.
fn config(dir: &Path, strategy: &str) -> PathBuf {
    let default = include_str!("../../../switch/src/default.toml");
    // The group's strategy, not the queue's below it.
    let group = default
        .find("[ring_groups.sales]")
        .expect("the demo ring group");
    let (head, tail) = default.split_at(group);
    assert!(tail.contains("strategy = \"ringall\""));
    let mut text = head.to_string()
        + &tail.replacen(
            "strategy = \"ringall\"",
            &format!("strategy = \"{strategy}\""),
            1,
        );
    for u in ["1001", "1002", "1003"] {
        text += &format!("\n[[users]]\nuser = \"{u}\"\npassword = \"pw-{u}\"\n");
    }
    let path = dir.join("forwarding.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn start(label: &str, dir: &TempDir, strategy: &str, vars: Vec<(String, String)>) -> Strowger {
    Strowger::with(
        label,
        Opts {
            config_file: Some(config(dir.path(), strategy)),
            vars,
            ..Opts::default()
        },
    )
}

/// SIPp (tests/sipp/uac_auth.xml) calls `exten` as `user`, answered and hung up by SIPp.
fn call_as(s: &Strowger, exten: &str, user: &str) -> SippResult {
    Sipp::new(Scenario::File("uac_auth.xml"))
        .service(exten)
        .args(&["-au", user, "-ap", &format!("pw-{user}")])
        .duration_ms(300)
        .run(s.sip, s.dir.path())
}

/// The Request-URI of the INVITEs a SIPp phone received.
fn invited(r: &SippResult) -> Vec<String> {
    r.received()
        .into_iter()
        .filter(|m| m.method() == Some("INVITE"))
        .map(|m| m.start.clone())
        .collect()
}

/// When SIPp logged the first message `direction` ("message received" / "message sent")
/// starting with `start`, in seconds of the day (its -trace_msg block header's
/// "YYYY-MM-DD HH:MM:SS.UUUUUU").
fn logged_at(r: &SippResult, direction: &str, start: &str) -> f64 {
    let log = std::fs::read_to_string(r.dir.join("messages.log")).unwrap();
    log.split("-----------------------------------------------")
        .filter_map(|block| block.split_once("\n\n"))
        .find(|(head, msg)| head.contains(direction) && msg.trim_start().starts_with(start))
        .and_then(|(head, _)| head.split_whitespace().nth(1))
        .and_then(|time| {
            let mut hms = time.split(':').map(|v| v.parse::<f64>().ok());
            Some(hms.next()?? * 3600.0 + hms.next()?? * 60.0 + hms.next()??)
        })
        .unwrap_or_else(|| panic!("no {direction} {start:?} with a time\n{}", r.evidence()))
}

#[test]
fn a_sipp_user_forwards_its_calls_with_star_72_and_takes_them_back_with_star_73() {
    let dir = TempDir::new("fwd-star72");
    let bob = Sipp::new(Scenario::Builtin("uas")).spawn(None, dir.path());
    let s = start(
        "fwd-star72",
        &dir,
        "ringall",
        vec![("bridge_target".into(), bob.addr.to_string())],
    );
    // 1002 forwards every call to 2001 (at the bridge target): answered with a tone, and kept
    // with the user in the store.
    call_as(&s, "*722001", "1002").assert_ok(1);
    let cfg = dir.path().join("forwarding.toml");
    let out = run_cli(
        &["--config", cfg.to_str().unwrap(), "user", "list"],
        s.dir.path(),
    );
    let list = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        list.lines()
            .any(|l| l == "1002@strowger  forward_always=2001"),
        "{list}{out:?}"
    );
    // 1001 calls 1002, whose phone is not even registered: Bob answers as 2001.
    call_as(&s, "1002", "1001").assert_ok(1);
    let bob = bob.finish();
    bob.assert_ok(1);
    let uris = invited(&bob);
    assert!(
        uris.iter().all(|u| u.starts_with("INVITE sip:2001@")),
        "{uris:?}"
    );
    let cdrs = s.wait_cdrs(2);
    let call = &cdrs[1];
    assert_eq!(
        (call.str("user"), call.str("exten")),
        ("1001", "1002"),
        "{call:?}"
    );
    assert!(call.str("bridged_to").starts_with("sip:2001@"), "{call:?}");

    // *73: the forwarding is gone, and 1002 unregistered gets 480 again.
    call_as(&s, "*73", "1002").assert_ok(1);
    let r = Sipp::new(Scenario::File("uac_auth.xml"))
        .service("1002")
        .args(&["-au", "1001", "-ap", "pw-1001"])
        .run(s.sip, s.dir.path());
    let finals: Vec<_> = r
        .received()
        .into_iter()
        .filter_map(|m| m.status())
        .filter(|st| *st >= 300 && *st != 401)
        .collect();
    assert_eq!(finals.first(), Some(&480), "{}", r.evidence());
}

#[test]
fn a_sequential_ring_group_hunts_past_a_busy_sipp_phone_to_one_that_answers() {
    let dir = TempDir::new("fwd-hunt");
    let mut s = start("fwd-hunt", &dir, "sequential", Vec::new());
    let (busy_port, answer_port) = (free_port(), free_port());
    register(&s, "1001", "pw-1001", busy_port).assert_ok(1);
    register(&s, "1002", "pw-1002", answer_port).assert_ok(1);
    let busy = Sipp::new(Scenario::File("uas_ring_busy.xml"))
        .port(busy_port)
        .spawn(None, s.dir.path());
    let answers = Sipp::new(Scenario::Builtin("uas"))
        .port(answer_port)
        .spawn(None, s.dir.path());
    std::thread::sleep(Duration::from_millis(300)); // let them bind
    call_as(&s, "6000", "1003").assert_ok(1);
    let (busy, answers) = (busy.finish(), answers.finish());
    busy.assert_ok(1);
    answers.assert_ok(1);
    // In turn: the second member was rung only once the first said busy, after ringing 1 s
    // (rung at once, it would have answered first and the busy phone been cancelled).
    let first = logged_at(&busy, "message received", "INVITE");
    let second = logged_at(&answers, "message received", "INVITE");
    let gap = (second - first).rem_euclid(86_400.0);
    assert!(
        gap >= 0.9,
        "the second member rung {gap:.3} s after the first"
    );
    let cdrs = s.wait_cdrs(1);
    assert_eq!(
        cdrs[0].str("bridged_to"),
        format!("sip:1002@127.0.0.1:{answer_port}"),
        "{:?}",
        cdrs[0]
    );
    s.assert_alive();
}
