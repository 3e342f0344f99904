//! The registrar end to end: SIPp phones REGISTER with digest authentication against a real
//! strowger, then are called through `bridge user/NAME` (tests/configs/registrar.toml), on each
//! store backend: the local snapshot file, Redis and Memcached (real servers on free ports);
//! `strowger show peers` lists the registration from the same store.

mod common;

use common::net::free_port;
use common::sip::{sdp, uri_of, Rtp, Uac, PCMU};
use common::sipp::{Scenario, Sipp, SippResult};
use common::switch::{config_path, run_cli, Opts};
use common::{wait_for, Strowger, TempDir};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// tests/configs/registrar.toml with `registrar.store` set to `store`, written into `dir`.
fn write_config(dir: &Path, store: &str) -> PathBuf {
    let template = std::fs::read_to_string(config_path("registrar.toml")).unwrap();
    let text: String = template
        .lines()
        .map(|l| {
            if l.starts_with("store = ") {
                format!("store = \"{store}\"\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    let path = dir.join(format!("registrar-{}.toml", free_port()));
    std::fs::write(&path, text).unwrap();
    path
}

fn start(label: &str, config: &Path) -> Strowger {
    Strowger::with(
        label,
        Opts {
            config_file: Some(config.to_path_buf()),
            ..Opts::default()
        },
    )
}

/// A Redis or Memcached server on a free loopback port, killed on drop.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    fn spawn(cmd: &mut Command, url: String, port: u16) -> Server {
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {cmd:?} (run scripts/setup.sh): {e}"));
        let up = wait_for(Duration::from_secs(10), || {
            TcpStream::connect(("127.0.0.1", port)).ok()
        });
        assert!(up.is_some(), "{cmd:?} is not listening on port {port}");
        Server { child, url }
    }

    fn redis() -> Server {
        let port = free_port();
        Server::spawn(
            Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"]),
            format!("redis://127.0.0.1:{port}"),
            port,
        )
    }

    fn memcached() -> Server {
        let port = free_port();
        Server::spawn(
            Command::new("memcached")
                .args(["-l", "127.0.0.1", "-p", &port.to_string(), "-U", "0"])
                .args(["-u", "root"]),
            format!("memcached://127.0.0.1:{port}"),
            port,
        )
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// REGISTERs `user` from 127.0.0.1:`port` with `password` (tests/sipp/register.xml: 401, then
/// credentials, then 200 or 403).
fn register(s: &Strowger, user: &str, password: &str, port: u16) -> SippResult {
    Sipp::new(Scenario::File("register.xml"))
        .service(user)
        .port(port)
        .arg("-au")
        .arg(user)
        .arg("-ap")
        .arg(password)
        .run(s.sip, s.dir.path())
}

/// The final responses SIPp received for its authenticated REGISTER (CSeq 2).
fn finals(r: &SippResult) -> Vec<common::sip::Msg> {
    r.received()
        .into_iter()
        .filter(|m| m.status().is_some_and(|s| s >= 200))
        .filter(|m| m.header("cseq").is_some_and(|c| c.starts_with('2')))
        .collect()
}

/// The contacts listed in the (single) 200 of a REGISTER run.
fn contacts_in_200(r: &SippResult) -> Vec<String> {
    let f = finals(r);
    assert!(
        f.len() == 1 && f[0].status() == Some(200),
        "want one 200 to the authenticated REGISTER, got {f:#?}\n{}",
        r.evidence()
    );
    f[0].headers("contact")
        .iter()
        .flat_map(|v| v.split(','))
        .map(uri_of)
        .collect()
}

fn registered(s: &Strowger, user: &str, password: &str, port: u16) {
    let r = register(s, user, password, port);
    r.assert_ok(1);
    let contacts = contacts_in_200(&r);
    assert_eq!(
        contacts,
        [format!("sip:{user}@127.0.0.1:{port}")],
        "the 200 lists the new binding\n{}",
        r.evidence()
    );
}

/// The phone registered from `port` as a SIPp uas (it answers one call).
fn phone(s: &Strowger, port: u16) -> common::sipp::SippProcess {
    let p = Sipp::new(Scenario::Builtin("uas"))
        .port(port)
        .spawn(None, s.dir.path());
    std::thread::sleep(Duration::from_millis(300)); // let it bind
    p
}

/// A SIPp uac calls `user`; the phone at `port` answers, and the call's CDR (the `n`th of this
/// strowger) shows it bridged to the registered contact.
fn call_answered_by(s: &Strowger, user: &str, uas: common::sipp::SippProcess, port: u16, n: usize) {
    Sipp::new(Scenario::Builtin("uac"))
        .service(user)
        .duration_ms(500)
        .run(s.sip, s.dir.path())
        .assert_ok(1);
    uas.finish().assert_ok(1);
    let cdrs = s.wait_cdrs(n);
    assert_eq!(cdrs.len(), n, "{cdrs:#?}");
    let c = &cdrs[n - 1];
    c.assert_answered(user);
    assert_eq!(
        c.str("bridged_to"),
        format!("sip:{user}@127.0.0.1:{port}"),
        "{c:?}"
    );
}

fn call_phone(s: &Strowger, user: &str, port: u16, n: usize) {
    let uas = phone(s, port);
    call_answered_by(s, user, uas, port, n);
}

/// The final status of an INVITE to `exten` from the hand client.
fn invite_status(s: &Strowger, exten: &str) -> Option<u16> {
    let rtp = Rtp::bind();
    let mut uac = Uac::new(s.sip, exten);
    uac.invite(&sdp(rtp.port, &[PCMU], "sendrecv")).status()
}

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
