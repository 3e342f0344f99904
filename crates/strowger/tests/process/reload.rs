//! Operating the process: SIGHUP reloads the configuration while calls are held, a broken one is
//! refused with check-config's errors in the log; SIGTERM drains (503 for new calls, calls in
//! progress end on their own, then exit 0; BYE after a short `drain_timeout_s`); `--store URL`
//! on the server; `general.log_level` applied at start and by reload; the systemd unit, its
//! notifications and `make install`.

use crate::common;

use common::registrar::{finals, invite_status, register, registered, write_config};
use common::servers::Server;
use common::sipp::{Scenario, Sipp};
use common::switch::{binary, run_cli, trusting_loopback, Opts};
use common::{repo_root, wait_for, Strowger, TempDir};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The embedded configuration trusting 127.0.0.1, its music on hold the built-in tune (these
/// tests play none, and decoding the tracks is most of a debug build's start on a busy machine).
fn default_config(dir: &Path) -> String {
    let text = trusting_loopback(include_str!("../../../switch/src/default.toml"));
    let moh = "\ndirectory = \"/usr/share/asterisk/moh\"\n";
    assert_eq!(text.matches(moh).count(), 1, "[moh.default] moved");
    text.replace(moh, &format!("\ndirectory = \"{}\"\n", dir.display()))
}

/// `text` with `extra` put before the default context's last rule (its catch-all 404).
fn with_rules(text: &str, extra: &str) -> String {
    let catch_all = "\n# Everything else: 404 Not Found.\n";
    assert_eq!(
        text.matches(catch_all).count(),
        1,
        "the catch-all rule moved"
    );
    text.replace(catch_all, &format!("\n{extra}{catch_all}"))
}

/// [`default_config`] [`with_rules`] `extra`, written to `path`.
fn write(path: &Path, extra: &str) {
    let text = default_config(path.parent().unwrap());
    std::fs::write(path, with_rules(&text, extra)).unwrap();
}

/// A strowger on `config` (rewritten by the test) with `rtp_ports` ports.
fn start(label: &str, config: &Path, rtp_ports: u16, quiet: bool) -> Strowger {
    Strowger::with(
        label,
        Opts {
            config_file: Some(config.to_path_buf()),
            rtp_ports: Some(rtp_ports),
            quiet,
            ..Opts::default()
        },
    )
}

const EXTEN_4321: &str =
    "[[dialplan.contexts.default.rules]]\nexten = \"4321\"\nsteps = [\"answer\", \"echo\"]\n";

/// One SIPp call to `exten`, held half a second: answered and ended normally.
fn answered(s: &Strowger, exten: &str) {
    Sipp::new(Scenario::Builtin("uac"))
        .service(exten)
        .duration_ms(500)
        .run(s.sip, s.dir.path())
        .assert_ok(1);
}

/// What `strowger check-config FILE` prints about `file`, line by line.
fn check_config(file: &Path) -> Vec<String> {
    let out = run_cli(&["check-config", file.to_str().unwrap()], Path::new("/"));
    assert!(!out.status.success(), "{file:?} must be refused");
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn a_reload_during_200_held_calls_adds_an_extension_and_a_broken_config_keeps_the_plan() {
    let dir = TempDir::new("reload-held");
    let config = dir.path().join("strowger.toml");
    // Real-time workers (as root; a warning otherwise): other programs on a busy test machine
    // would make the media ticks late, and a worker past capacity refuses new calls with 503.
    let base = default_config(dir.path())
        .replace("\nrealtime_priority = 0\n", "\nrealtime_priority = 10\n");
    let write = |extra: &str| std::fs::write(&config, with_rules(&base, extra)).unwrap();
    write("");
    // A port pair per held call (SIPp's calls share one media address), slices per worker.
    let mut s = start("reload-held", &config, 500, false);
    let held = Sipp::new(Scenario::Builtin("uac"))
        .service("9196")
        .calls(200, 50, 200)
        .duration_ms(10_000)
        .spawn(Some(s.sip), s.dir.path());
    std::thread::sleep(Duration::from_millis(4500));
    assert_eq!(invite_status(&s, "4321"), Some(404), "no 4321 yet");

    write(EXTEN_4321);
    s.signal("-HUP");
    s.wait_log("reloaded ", 0);
    answered(&s, "4321");

    // A syntax error, then a semantic one: each refused with what check-config says.
    for (n, broken) in [
        "bogus = [\n",
        "[[users]]\nuser = \"3001\"\npassword = \"pw-3001\"\ncontext = \"nowhere\"\n",
    ]
    .into_iter()
    .enumerate()
    {
        write(&format!("{EXTEN_4321}{broken}"));
        s.signal("-HUP");
        s.wait_log("refused: the configuration in force is unchanged", n);
        let log = s.stderr();
        for line in check_config(&config) {
            assert!(
                log.contains(&format!("reload refused: {line}")),
                "the log has check-config's {line:?}:\n{log}"
            );
        }
    }
    assert!(
        s.stderr()
            .contains("users[0].context: no dialplan context \"nowhere\""),
        "the semantic error names its key"
    );
    answered(&s, "4321");
    s.assert_alive();
    // None of the held calls was dropped: each ended with SIPp's own BYE, answered 200.
    held.finish().assert_ok(200);
    let cdrs = s.wait_cdrs(202);
    let held: Vec<_> = cdrs.iter().filter(|c| c.str("exten") == "9196").collect();
    assert_eq!(held.len(), 200, "{cdrs:#?}");
    assert!(
        held.iter().all(|c| c.str("hangup_side") == "caller"),
        "{held:#?}"
    );
}

/// `calls` SIPp calls to 9196 held `hold_ms`, all set up before this returns.
fn held_calls(s: &Strowger, calls: u32, hold_ms: u32) -> common::sipp::SippProcess {
    let p = Sipp::new(Scenario::Builtin("uac"))
        .service("9196")
        .calls(calls, 50, calls)
        .duration_ms(hold_ms)
        .spawn(Some(s.sip), s.dir.path());
    std::thread::sleep(Duration::from_millis(800));
    p
}

#[test]
fn sigterm_drains_new_calls_get_503_and_the_process_exits_0_after_its_calls() {
    let dir = TempDir::new("drain");
    let config = dir.path().join("strowger.toml");
    write(&config, "");
    let mut s = start("drain", &config, 100, false);
    let calls = held_calls(&s, 5, 4000);
    let signalled = Instant::now();
    s.signal("-TERM");
    s.wait_log("draining", 0);
    assert_eq!(
        invite_status(&s, "9196"),
        Some(503),
        "a new call is refused"
    );
    // A phone still registers, as REGISTERs are served while draining.
    assert!(register(&s, "1001", "wrong", common::net::free_port())
        .received()
        .iter()
        .any(|m| m.status() == Some(401)));
    s.assert_alive();
    calls.finish().assert_ok(5);
    let ended = signalled.elapsed();
    let status = s.wait_exit(Duration::from_secs(5), "the last call's end");
    assert_eq!(status.code(), Some(0), "exit 0 after a drain");
    assert!(
        ended >= Duration::from_secs(2),
        "the calls ran their course after SIGTERM"
    );
    let cdrs = s.cdrs();
    assert_eq!(cdrs.len(), 5, "{cdrs:#?}");
    assert!(
        cdrs.iter().all(|c| c.str("hangup_side") == "caller"),
        "{cdrs:#?}"
    );
}

#[test]
fn after_a_short_drain_timeout_the_calls_left_get_bye_from_strowger() {
    let dir = TempDir::new("drain-timeout");
    let config = dir.path().join("strowger.toml");
    let text = default_config(dir.path());
    let text = text.replace("\ndrain_timeout_s = 30\n", "\ndrain_timeout_s = 1\n");
    std::fs::write(&config, text).unwrap();
    let mut s = start("drain-timeout", &config, 100, false);
    let calls = held_calls(&s, 4, 30_000);
    let signalled = Instant::now();
    s.signal("-TERM");
    let status = s.wait_exit(Duration::from_secs(8), "SIGTERM");
    assert_eq!(status.code(), Some(0));
    assert!(
        signalled.elapsed() >= Duration::from_secs(1),
        "the drain waited"
    );
    let r = calls.finish();
    let byes = r
        .received()
        .iter()
        .filter(|m| m.method() == Some("BYE"))
        .count();
    assert_eq!(
        byes,
        4,
        "each call left got strowger's BYE\n{}",
        r.evidence()
    );
    let cdrs = s.cdrs();
    assert_eq!(cdrs.len(), 4, "{cdrs:#?}");
    assert!(
        cdrs.iter().all(|c| c.str("hangup_side") == "switch"),
        "{cdrs:#?}"
    );
}

/// Calls a graceful stop ends — after a drain's timeout (SIGTERM) or at once (SIGINT) — get
/// their CDRs then, and leave nothing open in the journal of calls in progress: the next start
/// on the same data directory writes no `node_failure` CDR for them.
#[test]
fn calls_ended_by_a_graceful_stop_get_no_node_failure_cdr_at_the_next_start() {
    let dir = TempDir::new("stop-journal");
    let config = dir.path().join("strowger.toml");
    let text = default_config(dir.path());
    let text = text.replace("\ndrain_timeout_s = 30\n", "\ndrain_timeout_s = 1\n");
    std::fs::write(&config, text).unwrap();
    let data = dir.path().join("data");
    let run = || {
        Strowger::with(
            "stop-journal",
            Opts {
                config_file: Some(config.clone()),
                rtp_ports: Some(100),
                data_dir: Some(data.clone()),
                ..Opts::default()
            },
        )
    };
    let mut cdrs = 0;
    for (signal, calls) in [("-TERM", 3), ("-INT", 4)] {
        let mut s = run();
        assert_eq!(s.cdrs().len(), cdrs, "after the {signal} stop's restart");
        let held = held_calls(&s, calls, 30_000);
        s.signal(signal);
        assert_eq!(s.wait_exit(Duration::from_secs(8), signal).code(), Some(0));
        held.finish();
        cdrs += calls as usize;
        let written = s.cdrs();
        assert_eq!(written.len(), cdrs, "{signal}: {written:#?}");
        assert!(
            written
                .iter()
                .all(|c| c.str("cause_text") != "node_failure"),
            "{written:#?}"
        );
    }
    // The journal is read (and reset) before the workers start: the restart has done it.
    let mut s = run();
    let written = s.cdrs();
    assert_eq!(written.len(), cdrs, "no call recovered: {written:#?}");
    s.stop();
}

#[test]
fn the_servers_store_flag_takes_users_added_to_that_store() {
    let dir = TempDir::new("store-flag");
    let redis = Server::redis();
    // The file names a local store; the user exists only in Redis.
    let local = format!("local:{}", dir.path().join("store.snap").display());
    let config = write_config(dir.path(), &local);
    let add = [
        "user",
        "add",
        "2001",
        "--password",
        "pw-2001",
        "--domain",
        "strowger",
        "--store",
        &redis.url,
    ];
    let out = run_cli(&add, dir.path());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = Strowger::with(
        "store-flag",
        Opts {
            config_file: Some(config.clone()),
            store: Some(redis.url.clone()),
            ..Opts::default()
        },
    );
    registered(&s, "2001", "pw-2001", common::net::free_port());
    // [[users]] added by a reload are loaded into that store too.
    let port = common::net::free_port();
    let refused = register(&s, "2002", "pw-2002", port);
    let statuses: Vec<_> = finals(&refused).iter().map(|m| m.status()).collect();
    assert!(
        statuses == [Some(403)],
        "no 2002 yet: {statuses:?}\n{}",
        refused.evidence()
    );
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("\n[[users]]\nuser = \"2002\"\npassword = \"pw-2002\"\n");
    std::fs::write(&config, text).unwrap();
    s.signal("-HUP");
    s.wait_log("reloaded ", 0);
    registered(&s, "2002", "pw-2002", port);
}

#[test]
fn log_level_warn_hides_info_lines_and_a_reload_to_info_shows_them() {
    let dir = TempDir::new("log-level");
    let config = dir.path().join("strowger.toml");
    let write_level = |level: &str, workers: &str| {
        let text = default_config(dir.path());
        let text = text
            .replace(
                "\nlog_level = \"info\"\n",
                &format!("\nlog_level = \"{level}\"\n"),
            )
            .replace("\nworkers = 0\n", &format!("\nworkers = {workers}\n"));
        std::fs::write(&config, text).unwrap();
    };
    write_level("warn", "0");
    let s = start("log-level", &config, 100, true);
    // A reload logs `reloaded` (info), then a warning for a key that needs a restart: once the
    // warning is there, so would the info line be.
    write_level("warn", "3");
    s.signal("-HUP");
    s.wait_log("needs a restart: general.workers", 0);
    let log = s.stderr();
    assert!(
        !log.contains(" INFO "),
        "no info line at warn (start, reload):\n{log}"
    );
    write_level("info", "3");
    s.signal("-HUP");
    s.wait_log("reloaded ", 0);
    answered(&s, "9196");
    assert!(s.stderr().contains(" INFO "), "{}", s.stderr());
}

/// contrib/systemd/strowger.service as `make install` writes it, with `binary` in ExecStart.
fn installed_unit(root: &Path) -> PathBuf {
    let out = std::process::Command::new("make")
        .arg("-s")
        .arg("install")
        .arg(format!("DESTDIR={}", root.display()))
        .arg(format!("BIN={}", binary()))
        .current_dir(repo_root())
        .output()
        .expect("make (scripts/setup.sh installs it)");
    assert!(
        out.status.success(),
        "make install: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    root.join("usr/local/lib/systemd/system/strowger.service")
}

#[test]
fn make_install_stages_the_binary_unit_user_and_state_dir_and_the_unit_verifies() {
    let dir = TempDir::new("install");
    let root = dir.subdir("root");
    let unit = installed_unit(&root);
    for f in [
        "usr/local/bin/strowger",
        "usr/local/lib/sysusers.d/strowger.conf",
        "usr/local/lib/tmpfiles.d/strowger.conf",
        "etc/strowger/strowger.toml",
    ] {
        assert!(root.join(f).is_file(), "{f} installed");
    }
    assert!(root.join("var/lib/strowger").is_dir());
    let check = run_cli(
        &[
            "check-config",
            root.join("etc/strowger/strowger.toml").to_str().unwrap(),
        ],
        dir.path(),
    );
    assert!(
        check.status.success(),
        "the installed configuration is valid"
    );
    let sysusers =
        std::fs::read_to_string(root.join("usr/local/lib/sysusers.d/strowger.conf")).unwrap();
    assert!(
        sysusers.lines().any(|l| l.starts_with("u strowger ")),
        "{sysusers}"
    );

    // systemd-analyze checks the unit against the real binary (it must exist to verify).
    let text = std::fs::read_to_string(&unit).unwrap();
    for key in [
        "Type=notify",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "User=strowger",
        "ProtectSystem=strict",
        "ReadWritePaths=/var/lib/strowger",
    ] {
        assert!(text.lines().any(|l| l == key), "{key} in the unit");
    }
    let verified = dir.path().join("strowger.service");
    std::fs::write(&verified, text.replace("/usr/local/bin/strowger", binary())).unwrap();
    let out = std::process::Command::new("systemd-analyze")
        .args(["verify", "--man=no", "--recursive-errors=no"])
        .arg(&verified)
        .output()
        .expect("systemd-analyze (scripts/setup.sh installs systemd)");
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "systemd-analyze verify: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn ready_and_stopping_reach_the_notify_socket() {
    let dir = TempDir::new("notify");
    let path = dir.path().join("notify.sock");
    let sock = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let config = dir.path().join("strowger.toml");
    write(&config, "");
    let mut s = Strowger::with(
        "notify",
        Opts {
            config_file: Some(config),
            env: vec![
                ("NOTIFY_SOCKET".into(), path.display().to_string()),
                ("WATCHDOG_USEC".into(), "400000".into()),
            ],
            ..Opts::default()
        },
    );
    let mut buf = [0u8; 512];
    let mut next = || {
        let n = sock.recv(&mut buf).expect("a notification");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    assert!(next().lines().any(|l| l == "READY=1"));
    // The watchdog's WATCHDOG=1 every 200 ms (half of WATCHDOG_USEC).
    let beats = wait_for(Duration::from_secs(3), || {
        let got: Vec<String> = (0..3).map(|_| next()).collect();
        got.iter().all(|m| m == "WATCHDOG=1").then_some(got)
    });
    assert!(beats.is_some(), "WATCHDOG=1 keeps coming");
    s.signal("-TERM");
    let stopping = wait_for(Duration::from_secs(5), || {
        let m = next();
        m.lines().any(|l| l == "STOPPING=1").then_some(m)
    });
    assert!(stopping.is_some(), "STOPPING=1 on SIGTERM");
    assert_eq!(
        s.wait_exit(Duration::from_secs(10), "SIGTERM").code(),
        Some(0)
    );
}

/// `POST /api/v1/reload` adds a trunk (a SIPp UAS as the provider) and a queue to a running
/// strowger, and its reply lists nothing that needs a restart: a SIPp call then goes out
/// through the trunk, and a SIPp caller enters the queue (agentless, so after `max_wait_s` it
/// goes on out through the trunk with QUEUESTATUS in the number).
#[test]
fn a_reload_adds_a_trunk_and_a_queue_that_calls_use_at_once() {
    let dir = TempDir::new("reload-parts");
    let config = dir.path().join("strowger.toml");
    let provider = Sipp::new(Scenario::Builtin("uas"))
        .calls(2, 2, 2)
        .spawn(None, dir.path());
    let rules =
        "[[dialplan.contexts.default.rules]]\nregex = \"^0\\\\d+$\"\nsteps = [\"goto out\"]\n\
                 [[dialplan.contexts.default.rules]]\nexten = \"7100\"\n\
                 steps = [\"queue sales\", \"goto out\"]\n";
    write(&config, "");
    let s = start("reload-parts", &config, 20, true);
    assert_eq!(invite_status(&s, "0555"), Some(404), "no trunk yet");

    let added = format!(
        "\n[dialplan.contexts.out]\ntrunks = [\"provider\"]\n[[dialplan.contexts.out.rules]]\n\
         prefix = \"\"\nsteps = [\"bridge trunk/provider/${{EXTEN}}-${{QUEUESTATUS}} timeout=5\"]\n\
         [[trunks]]\nname = \"provider\"\nhost = \"{}\"\n\
         [queues.sales]\nmembers = []\nmax_wait_s = 1\n",
        provider.addr
    );
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("{}{added}", with_rules(&text, rules))).unwrap();
    let report = common::api::Api::of(&s).ok("POST", "/api/v1/reload");
    assert_eq!(report["needs_restart"], serde_json::json!([]), "{report}");

    answered(&s, "0555");
    // Held past the queue's max_wait, so the call goes on from the queue to the trunk.
    Sipp::new(Scenario::Builtin("uac"))
        .service("7100")
        .duration_ms(3000)
        .run(s.sip, s.dir.path())
        .assert_ok(1);
    provider.finish().assert_ok(2);
    let cdrs = s.wait_cdrs(3);
    let out: Vec<_> = cdrs
        .iter()
        .filter(|c| !c.is_null("trunk") && c.str("trunk") == "provider")
        .collect();
    assert_eq!(out.len(), 2, "{cdrs:#?}");
    let queued = out
        .iter()
        .find(|c| c.str("exten") == "7100")
        .expect("the queue's caller");
    assert!(
        queued.str("bridged_to").contains("7100-EMPTY@"),
        "it waited in the queue, which nobody serves: {queued:?}"
    );
}
