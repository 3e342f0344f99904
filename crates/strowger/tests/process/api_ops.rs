//! The control API operated: over TLS with a certificate the test makes (openssl), `strowger
//! ctl events` printing a call's life, an event client that stops reading closed with 1008
//! while calls go on, registration events, and the configuration the API reads after a reload.

use crate::common;

use common::api::Api;
use common::sipp::{Scenario, Sipp};
use common::switch::{binary, run_cli, Opts};
use common::{wait_for, Strowger, TempDir};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A self-signed server certificate for 127.0.0.1 and its key (`openssl req`; not a CA, which
/// webpki refuses to see serve): (cert, key).
fn certificate(dir: &Path) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("api-cert.pem"), dir.join("api-key.pem"));
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "1", "-subj", "/CN=strowger test"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1"])
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .args(["-addext", "extendedKeyUsage=serverAuth"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl (scripts/setup.sh installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (cert, key)
}

/// `strowger --data-dir DATA ctl --api URL ARGS` with the token strowger made: its output.
fn ctl(s: &Strowger, url: &str, args: &[&str]) -> std::process::Output {
    let data = s.data_dir();
    let mut all = vec!["--data-dir", data.to_str().unwrap(), "ctl", "--api", url];
    all.extend(args);
    run_cli(&all, s.dir.path())
}

/// With api.tls_cert and api.tls_key the API speaks HTTPS only: a client trusting the test's
/// certificate gets /api/v1/stats, plain HTTP to the port gets no answer, and `ctl --ca` works.
/// Off loopback, check-config takes the address with TLS and refuses it without, naming the keys.
#[test]
fn the_api_over_tls_answers_https_only() {
    let dir = TempDir::new("api-tls");
    let (cert, key) = certificate(dir.path());
    let conf = common::switch::default_config_trusting_loopback(dir.path());
    let tls = format!(
        "tls_cert = {:?}\ntls_key = {:?}\n",
        cert.display(),
        key.display()
    );
    let text = std::fs::read_to_string(&conf).unwrap();
    let unset = "tls_cert = \"\"\ntls_key = \"\"\n";
    assert_eq!(text.matches(unset).count(), 1, "[api] moved");
    std::fs::write(&conf, text.replace(unset, &tls)).unwrap();
    let s = Strowger::with(
        "api-tls",
        Opts {
            config_file: Some(conf.clone()),
            ..Opts::default()
        },
    );
    assert!(
        s.stderr().contains(&format!("API on https://{}", s.api)),
        "{}",
        s.stderr()
    );
    let token = Api::of(&s).token;
    let pem = std::fs::read(&cert).unwrap();
    let trusted = ureq::tls::Certificate::from_pem(&pem).unwrap();
    let tls_cfg = ureq::tls::TlsConfig::builder()
        .unversioned_rustls_crypto_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .root_certs(ureq::tls::RootCerts::new_with_certs(&[trusted]))
        .build();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .tls_config(tls_cfg)
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into();
    let stats: Value = agent
        .get(format!("https://{}/api/v1/stats", s.api))
        .header("Authorization", format!("Bearer {token}"))
        .call()
        .expect("HTTPS GET /api/v1/stats")
        .into_body()
        .read_json()
        .unwrap();
    assert!(stats["calls_active"].is_u64(), "{stats}");
    let plain = agent
        .get(format!("http://{}/api/v1/stats", s.api))
        .header("Authorization", format!("Bearer {token}"))
        .call();
    assert!(plain.is_err(), "plain HTTP answered: {plain:?}");

    let url = format!("https://{}", s.api);
    let ca = cert.to_str().unwrap();
    let out = ctl(&s, &url, &["--ca", ca, "--json", "show", "stats"]);
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(&printed).expect("ctl --json prints JSON");
    assert!(v["calls_active"].is_u64(), "{v}");
    let untrusted = ctl(&s, &url, &["show", "stats"]);
    let err = String::from_utf8_lossy(&untrusted.stderr);
    assert!(!untrusted.status.success() && err.contains("--ca"), "{err}");

    let public = dir.path().join("public.toml");
    let check = |text: &str| {
        let text = text.replace("listen = \"127.0.0.1:8088\"", "listen = \"0.0.0.0:8443\"");
        std::fs::write(&public, text).unwrap();
        run_cli(&["check-config", public.to_str().unwrap()], dir.path())
    };
    let with_tls = check(&std::fs::read_to_string(&conf).unwrap());
    assert!(
        with_tls.status.success(),
        "{}",
        String::from_utf8_lossy(&with_tls.stderr)
    );
    let check = check(&text);
    let err = String::from_utf8_lossy(&check.stderr);
    assert!(
        !check.status.success() && err.contains("api.tls_cert") && err.contains("api.tls_key"),
        "{err}"
    );
}

/// `strowger ctl events` as a child process: its stdout lines, as they come.
struct Tail {
    child: std::process::Child,
    lines: mpsc::Receiver<String>,
}

impl Tail {
    fn start(s: &Strowger, args: &[&str]) -> Tail {
        let data = s.data_dir();
        let url = format!("http://{}", s.api);
        let mut child = Command::new(binary())
            .args(["--data-dir", data.to_str().unwrap(), "ctl", "--api", &url])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("strowger ctl events");
        let out = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in out.lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Tail { child, lines }
    }

    /// The lines printed until one satisfies `done` (or `limit` passes).
    fn until(&self, limit: Duration, done: impl Fn(&str) -> bool) -> Vec<String> {
        let end = std::time::Instant::now() + limit;
        let mut got = Vec::new();
        while let Some(left) = end.checked_duration_since(std::time::Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    let stop = done(&l);
                    got.push(l);
                    if stop {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
        got
    }
}

impl Drop for Tail {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until the API counts `n` event-stream clients (so no event of the test is missed).
fn wait_event_clients(api: &Api, n: u64) {
    let joined = wait_for(Duration::from_secs(5), || {
        (api.ok("GET", "/api/v1/stats")["event_clients"] == n).then_some(())
    });
    assert!(joined.is_some(), "{n} event client(s) never joined");
}

/// `ctl events --types call --json` prints a SIPp call's events as JSON lines, created first
/// and ended last, all of type call.
#[test]
fn ctl_events_prints_a_calls_life_as_json_lines() {
    let s = Strowger::start("api-ctl-events");
    let api = Api::of(&s);
    let tail = Tail::start(&s, &["--json", "events", "--types", "call"]);
    wait_event_clients(&api, 1);
    Sipp::new(Scenario::Builtin("uac"))
        .service("9196")
        .duration_ms(200)
        .run(s.sip, s.dir.path())
        .assert_ok(1);
    let lines = tail.until(Duration::from_secs(10), |l| l.contains("\"ended\""));
    let events: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    let names: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(names.first(), Some(&"created"), "{lines:?}");
    assert_eq!(names.last(), Some(&"ended"), "{lines:?}");
    assert!(names.contains(&"answered"), "{lines:?}");
    assert!(events.iter().all(|e| e["type"] == "call"), "{lines:?}");
    let id = &events[0]["call_id"];
    assert!(events.iter().all(|e| &e["call_id"] == id), "{lines:?}");
}

/// The API reads the configuration in force: after `POST /api/v1/reload` adds a context
/// `sales` and a user of it, the user is listed and a new user may be put in `sales`, which
/// was refused before the reload.
#[test]
fn the_api_reads_the_configuration_a_reload_left() {
    let dir = TempDir::new("api-reload-cfg");
    let config = common::switch::default_config_trusting_loopback(dir.path());
    let base = std::fs::read_to_string(&config).unwrap();
    let s = Strowger::with(
        "api-reload-cfg",
        Opts {
            config_file: Some(config.clone()),
            ..Opts::default()
        },
    );
    let api = Api::of(&s);
    let seller =
        serde_json::json!({ "user": "5002", "password": "a-long-password", "context": "sales" });
    let (status, body, _) = api.call_as("POST", "/api/v1/users", Some(&api.token), Some(&seller));
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]
        .as_str()
        .unwrap()
        .contains("no such dialplan context"));

    let sales = "\n[[dialplan.contexts.sales.rules]]\nexten = \"600\"\nsteps = [\"answer\", \"echo\"]\n\
                 \n[[users]]\nuser = \"5001\"\npassword = \"another-long-one\"\ncontext = \"sales\"\n";
    std::fs::write(&config, format!("{base}{sales}")).unwrap();
    api.ok("POST", "/api/v1/reload");
    let users = api.ok("GET", "/api/v1/users");
    let listed = users["users"].as_array().unwrap();
    assert!(
        listed
            .iter()
            .any(|u| u["user"] == "5001" && u["context"] == "sales"),
        "{users}"
    );
    assert_eq!(
        api.send("POST", "/api/v1/users", Some(seller))["user"],
        "5002"
    );
}

/// An event-stream client whose socket takes in 4 KiB and which reads nothing until told to.
fn stalled_client(api: &Api, s: &Strowger) -> tungstenite::WebSocket<std::net::TcpStream> {
    use socket2::{Domain, Socket, Type};
    let sock = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    // Set before connecting, so the window strowger sees stays small.
    sock.set_recv_buffer_size(4096).unwrap();
    sock.connect(&s.api.into()).unwrap();
    let tcp: std::net::TcpStream = sock.into();
    let url = format!("ws://{}/api/v1/events?token={}", s.api, api.token);
    let (ws, _) = tungstenite::client(url.as_str(), tcp).expect("event stream");
    ws
}

/// A client that stops reading while a burst of calls makes events is closed with 1008 and a
/// reason once it falls `api.event_backlog` (here 16) events behind, and every call of the
/// burst completes.
#[test]
fn a_client_that_stops_reading_is_closed_with_1008_and_calls_go_on() {
    let dir = TempDir::new("api-slow-client");
    let config = common::switch::default_config_trusting_loopback(dir.path());
    let text = std::fs::read_to_string(&config).unwrap();
    let backlog = "event_backlog = 1024\n";
    assert_eq!(text.matches(backlog).count(), 1, "[api] moved");
    std::fs::write(&config, text.replace(backlog, "event_backlog = 16\n")).unwrap();
    let s = Strowger::with(
        "api-slow-client",
        Opts {
            config_file: Some(config),
            ..Opts::default()
        },
    );
    let api = Api::of(&s);
    let mut ws = stalled_client(&api, &s);
    wait_event_clients(&api, 1);
    let calls = 120;
    Sipp::new(Scenario::Builtin("uac"))
        .service("9196")
        .duration_ms(0)
        .calls(calls, 20, 10)
        .run(s.sip, s.dir.path())
        .assert_ok(u64::from(calls));
    ws.get_ref()
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut events = 0;
    let close = loop {
        match ws.read() {
            Ok(tungstenite::Message::Text(_)) => events += 1,
            Ok(tungstenite::Message::Close(f)) => break f,
            Ok(_) => {}
            Err(e) => panic!("no close frame after {events} events: {e}"),
        }
    };
    let close = close.expect("a close frame with a code");
    assert_eq!(u16::from(close.code), 1008, "{close:?}");
    assert!(close.reason.contains("too slow"), "{close:?}");
    // Each call made at least created and ended: some were never sent to this client.
    assert!(events < 2 * calls as usize, "{events} events read");
    wait_event_clients(&api, 0);
}

/// SIPp registers 5001 for 3 s and does not refresh: the event stream tells `added`, then
/// `expired` within the expiry and 2 s; registered again, `DELETE /registrations/5001` is told
/// as `removed`.
#[test]
fn registrations_are_told_added_expired_and_removed() {
    let dir = TempDir::new("api-reg-events");
    let config = common::switch::default_config_trusting_loopback(dir.path());
    let text = std::fs::read_to_string(&config).unwrap();
    assert_eq!(
        text.matches("min_expires = 60\n").count(),
        1,
        "[registrar] moved"
    );
    std::fs::write(
        &config,
        text.replace("min_expires = 60\n", "min_expires = 2\n"),
    )
    .unwrap();
    let s = Strowger::with(
        "api-reg-events",
        Opts {
            config_file: Some(config),
            ..Opts::default()
        },
    );
    let api = Api::of(&s);
    let user = serde_json::json!({ "user": "5001", "password": "secret-5001-pass" });
    api.send("POST", "/api/v1/users", Some(user));
    let mut events = api.events("registration");
    wait_event_clients(&api, 1);
    let port = common::net::free_port();
    let register = |expires: u32| {
        Sipp::new(Scenario::File("register_with.xml"))
            .service("5001")
            .port(port)
            .args(&["-au", "5001", "-ap", "secret-5001-pass"])
            .args(&["-key", "contact", &format!("<sip:5001@127.0.0.1:{port}>")])
            .args(&["-key", "expires", &expires.to_string()])
            .args(&["-key", "extra", "Subject: events test"])
            .run(s.sip, s.dir.path())
            .assert_ok(1)
    };
    register(3);
    let got = events.until(Duration::from_secs(8), |e| e["event"] == "expired");
    let names: Vec<&str> = got.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(names, ["added", "expired"], "{got:?}");
    assert!(got
        .iter()
        .all(|e| e["type"] == "registration" && e["aor"] == "5001@strowger"));
    assert_eq!(got[0]["expires_in"], 3, "{got:?}");
    let contact = format!("sip:5001@127.0.0.1:{port}");
    assert!(
        got.iter().all(|e| e["contact"] == contact.as_str()),
        "{got:?}"
    );
    let lapse = got[1]["time"].as_f64().unwrap() - got[0]["time"].as_f64().unwrap();
    assert!((2.5..5.0).contains(&lapse), "expired {lapse} s after added");

    register(60);
    let got = events.until(Duration::from_secs(5), |e| e["event"] == "added");
    assert_eq!(
        got.last().map(|e| &e["event"]),
        Some(&"added".into()),
        "{got:?}"
    );
    assert_eq!(api.ok("DELETE", "/api/v1/registrations/5001")["removed"], 1);
    let got = events.until(Duration::from_secs(5), |e| e["event"] == "removed");
    let names: Vec<&str> = got.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(names, ["removed"], "{got:?}");
    assert_eq!(got[0]["contact"], contact.as_str());
}
