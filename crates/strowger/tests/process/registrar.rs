//! The registrar end to end: SIPp phones REGISTER with digest authentication against a real
//! strowger, then are called through `bridge user/NAME` (tests/configs/registrar.toml), on each
//! store backend: the local snapshot file, Redis and Memcached (real servers on free ports);
//! `strowger show peers` lists the registration from the same store.

use crate::common;

use common::net::free_port;
use common::registrar::{
    call_answered_by, call_phone, contacts_in_200, finals, invite_status, register, registered,
    start, write_config,
};
use common::servers::Server;
use common::sipp::{Scenario, Sipp};
use common::switch::run_cli;
use common::TempDir;
use std::path::Path;
use std::time::Duration;

/// Everything on one backend: REGISTER → 200 listing the binding; a call to the registered
/// user reaches its phone; unregistered user → 480; unknown user → 404; wrong password →
/// 403 and never 200; un-REGISTER → 200 without contacts, and then the user is unregistered.
fn registrar_flow(label: &str, store: &str, dir: &TempDir) {
    let cfg = write_config(dir.path(), store);
    let s = start(label, &cfg);
    let port = free_port();
    registered(&s, "1001", "secret-1001", port);
    let line = shown_by_show_peers(&cfg, dir.path(), "1001");
    assert!(
        line.contains(&format!(
            "sip:1001@127.0.0.1:{port} from 127.0.0.1:{port} over udp, expires in"
        )),
        "{line}"
    );
    call_phone(&s, "1001", port, 1);

    assert_eq!(
        invite_status(&s, "1002"),
        Some(480),
        "1002 is not registered"
    );
    assert_eq!(invite_status(&s, "1999"), Some(404), "1999 is no user");

    let bad = register(&s, "1002", "wrong", free_port());
    let f = finals(&bad);
    assert!(
        !f.is_empty() && f.iter().all(|m| m.status() == Some(403)),
        "a wrong password gets 403 and never 200: {f:#?}\n{}",
        bad.evidence()
    );
    assert!(
        bad.received().iter().all(|m| m.status() != Some(200)),
        "no 200 at all for a wrong password\n{}",
        bad.evidence()
    );

    let un = Sipp::new(Scenario::File("unregister.xml"))
        .service("1001")
        .port(port)
        .arg("-au")
        .arg("1001")
        .arg("-ap")
        .arg("secret-1001")
        .run(s.sip, s.dir.path());
    un.assert_ok(1);
    let left = contacts_in_200(&un);
    assert!(
        left.is_empty(),
        "no binding after Expires: 0: {left:?}\n{}",
        un.evidence()
    );
    assert_eq!(invite_status(&s, "1001"), Some(480), "1001 unregistered");
    let line = shown_by_show_peers(&cfg, dir.path(), "1001");
    assert!(line.ends_with("not registered"), "{line}");
}

/// `strowger show peers`, run beside the switch on its configuration: the line of `user`,
/// whose contacts it reads from the same store.
fn shown_by_show_peers(cfg: &Path, dir: &Path, user: &str) -> String {
    let out = run_cli(&["--config", cfg.to_str().unwrap(), "show", "peers"], dir);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "show peers: {out:?}");
    text.lines()
        .find(|l| l.trim_start().starts_with(&format!("{user}@")))
        .unwrap_or_else(|| panic!("show peers lists no {user}:\n{text}"))
        .to_string()
}

#[test]
fn register_and_call_local_store() {
    let dir = TempDir::new("reg-local");
    let snap = dir.path().join("store.snap");
    registrar_flow("reg-local", &format!("local:{}", snap.display()), &dir);
    assert!(snap.exists(), "the local store writes its snapshot");
}

#[test]
fn register_and_call_redis() {
    let dir = TempDir::new("reg-redis");
    let redis = Server::redis();
    registrar_flow("reg-redis", &redis.url, &dir);
}

#[test]
fn register_and_call_memcached() {
    let dir = TempDir::new("reg-memcached");
    let mc = Server::memcached();
    registrar_flow("reg-memcached", &mc.url, &dir);
}

/// Register, stop strowger, start a new one on the same store: the phone is still reached.
fn survives_restart(label: &str, store: &str, dir: &TempDir, user: &str, password: &str) {
    let config = write_config(dir.path(), store);
    let port = free_port();
    let mut first = start(label, &config);
    registered(&first, user, password, port);
    first.stop();
    let second = start(label, &config);
    call_phone(&second, user, port, 1);
}

/// The local store, with the user added by `strowger user add` (not [[users]]).
#[test]
fn registration_survives_restart_local_store() {
    let dir = TempDir::new("reg-restart-local");
    let store = format!("local:{}", dir.path().join("store.snap").display());
    let out = run_cli(
        &[
            "user",
            "add",
            "1003",
            "--password",
            "secret-1003",
            "--store",
            &store,
        ],
        dir.path(),
    );
    assert!(out.status.success(), "user add: {out:?}");
    survives_restart("reg-restart-local", &store, &dir, "1003", "secret-1003");
}

#[test]
fn registration_survives_restart_redis() {
    let dir = TempDir::new("reg-restart-redis");
    let redis = Server::redis();
    survives_restart("reg-restart-redis", &redis.url, &dir, "1001", "secret-1001");
}

/// Parallel forking: two phones registered as the same user ring at once; the one that answers
/// (after a second of ringing) gets the call, the one that only rings gets CANCEL (487).
#[test]
fn parallel_ringing_first_answer_wins() {
    let dir = TempDir::new("reg-fork");
    let store = format!("local:{}", dir.path().join("store.snap").display());
    let s = start("reg-fork", &write_config(dir.path(), &store));
    let (late, ringer) = (free_port(), free_port());
    registered(&s, "1001", "secret-1001", late);
    let both = register(&s, "1001", "secret-1001", ringer);
    both.assert_ok(1);
    let mut contacts = contacts_in_200(&both);
    contacts.sort();
    let mut want = vec![
        format!("sip:1001@127.0.0.1:{late}"),
        format!("sip:1001@127.0.0.1:{ringer}"),
    ];
    want.sort();
    assert_eq!(contacts, want, "both bindings listed\n{}", both.evidence());

    let answers = Sipp::new(Scenario::File("uas_answer_late.xml"))
        .port(late)
        .spawn(None, s.dir.path());
    let rings = Sipp::new(Scenario::File("uas_ring_cancel.xml"))
        .port(ringer)
        .spawn(None, s.dir.path());
    std::thread::sleep(Duration::from_millis(300));
    call_answered_by(&s, "1001", answers, late, 1);
    let r = rings.finish();
    r.assert_ok(1);
    assert!(
        r.received().iter().any(|m| m.method() == Some("CANCEL")),
        "the phone that only rang got CANCEL\n{}",
        r.evidence()
    );
}

/// Every contact fails: the caller gets the best of the final responses (486 over 480/487).
#[test]
fn parallel_ringing_all_fail_best_response() {
    let dir = TempDir::new("reg-fork-fail");
    let store = format!("local:{}", dir.path().join("store.snap").display());
    let s = start("reg-fork-fail", &write_config(dir.path(), &store));
    let (busy, unavailable) = (free_port(), free_port());
    registered(&s, "1001", "secret-1001", busy);
    register(&s, "1001", "secret-1001", unavailable).assert_ok(1);
    let a = Sipp::new(Scenario::File("uas_busy.xml"))
        .port(busy)
        .spawn(None, s.dir.path());
    let b = Sipp::new(Scenario::File("uas_unavailable.xml"))
        .port(unavailable)
        .spawn(None, s.dir.path());
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(invite_status(&s, "1001"), Some(486), "486 beats 480");
    a.finish().assert_ok(1);
    b.finish().assert_ok(1);
}
