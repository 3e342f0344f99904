//! The control API and `strowger ctl` against a running strowger: calls SIPp places through
//! it are listed with their legs and hung up (SIPp sees the BYE, the CDR the cause), the event
//! stream tells a call's life in order, and the token and the loopback rule keep strangers out.

use crate::common;

use common::api::Api;
use common::sipp::{Scenario, Sipp, SippProcess};
use common::switch::{default_config_trusting_loopback, run_cli, Opts};
use common::{wait_for, Strowger, TempDir};
use serde_json::{json, Value};
use std::time::Duration;

/// strowger bridging 2001 to a SIPp UAS, which waits for strowger's BYE.
struct Bridge {
    s: Strowger,
    uas: SippProcess,
    dir: TempDir,
}

fn bridge(label: &str) -> Bridge {
    let dir = TempDir::new(label);
    let uas = Sipp::new(Scenario::Builtin("uas"))
        .calls(1, 1, 1)
        .spawn(None, dir.path());
    let s = Strowger::with(
        label,
        Opts {
            config_file: Some(default_config_trusting_loopback(dir.path())),
            vars: vec![("bridge_target".into(), uas.addr.to_string())],
            ..Opts::default()
        },
    );
    Bridge { s, uas, dir }
}

impl Bridge {
    /// A caller dialling 2001 that holds the call until strowger's BYE
    /// (tests/sipp/switch_bye.xml): one call with two legs.
    fn call(&self) -> SippProcess {
        Sipp::new(Scenario::File("switch_bye.xml"))
            .service("2001")
            .spawn(Some(self.s.sip), self.dir.path())
    }
}

/// The one call, once both its legs are up.
fn answered_call(api: &Api) -> Value {
    wait_for(Duration::from_secs(10), || {
        let calls = api.calls();
        let up = |c: &Value| {
            c["legs"]
                .as_array()
                .is_some_and(|l| l.len() == 2 && l.iter().all(|l| l["state"] == "up"))
        };
        calls.into_iter().find(up)
    })
    .unwrap_or_else(|| panic!("no answered call with two legs listed: {:?}", api.calls()))
}

/// GET /calls lists the bridged call with its two legs; DELETE hangs it up with the cause
/// asked for: both SIPp scenarios get their BYE, and the CDR says user_busy (17). The event
/// stream told the call's life in order.
#[test]
fn a_bridged_call_is_listed_and_hung_up_with_its_cause() {
    let b = bridge("api-hangup");
    let (s, uas) = (&b.s, &b.uas);
    let api = Api::of(s);
    let mut events = api.events("call");
    let uac = b.call();

    let call = answered_call(&api);
    let id = call["id"].as_str().expect("an id").to_string();
    assert_eq!(call["exten"], "2001", "{call}");
    assert_eq!(call["state"], "answered", "{call}");
    let legs = call["legs"].as_array().unwrap();
    let caller = legs.iter().find(|l| l["role"] == "caller").expect("caller");
    let callee = legs.iter().find(|l| l["role"] == "callee").expect("callee");
    assert_eq!(caller["call_id"], id.as_str());
    assert_eq!(caller["direction"], "in");
    assert_eq!(callee["direction"], "out");
    assert_eq!(callee["peer"], uas.addr.to_string(), "{call}");
    assert_eq!(caller["codec"], "PCMU", "{call}");
    assert_eq!(
        api.ok("GET", &format!("/api/v1/calls/{}", enc(&id)))["id"],
        id.as_str()
    );
    assert_eq!(api.ok("GET", "/api/v1/stats")["calls_active"], 1);

    let hung = api.ok("DELETE", &format!("/api/v1/calls/{}?cause=busy", enc(&id)));
    assert_eq!(hung["cause"], 17, "{hung}");
    uac.finish().assert_ok(1);
    let cdrs = s.wait_cdrs(1);
    assert_eq!(cdrs[0].str("call_id"), id);
    assert_eq!(cdrs[0].num("cause"), 17.0, "{:?}", cdrs[0]);
    assert_eq!(cdrs[0].str("cause_text"), "user_busy");
    assert_eq!(cdrs[0].str("hangup_side"), "switch");
    assert!(api.calls().is_empty());
    let (status, _, _) = api.call_as(
        "DELETE",
        &format!("/api/v1/calls/{}", enc(&id)),
        Some(&api.token),
        None,
    );
    assert_eq!(status, 404, "a call already gone");

    b.uas.finish().assert_ok(1);
    let got = events.until(Duration::from_secs(5), |e| e["event"] == "ended");
    let order: Vec<&str> = got
        .iter()
        .filter(|e| e["call_id"] == id.as_str())
        .filter_map(|e| e["event"].as_str())
        .collect();
    let first = |name: &str| order.iter().position(|e| *e == name);
    let (c, r, a, e) = (
        first("created"),
        first("ringing"),
        first("answered"),
        first("ended"),
    );
    assert!(
        c.is_some() && c < r && r < a && a < e,
        "created → ringing → answered → ended, got {order:?}"
    );
    let ended = got.iter().find(|e| e["event"] == "ended").unwrap();
    assert_eq!(ended["type"], "call");
    assert_eq!(
        ended["cdr"]["cause"], 17,
        "the ended event carries the CDR: {ended}"
    );
}

/// `strowger ctl show calls --json` lists the call and `ctl hangup` ends it (normal clearing),
/// both finding the API and its token from `--data-dir` as the server took it.
#[test]
fn ctl_shows_and_hangs_up_a_call() {
    let b = bridge("api-ctl");
    let uac = b.call();
    let id = answered_call(&Api::of(&b.s))["id"]
        .as_str()
        .unwrap()
        .to_string();
    let listed: Value =
        serde_json::from_str(&ctl(&b.s, &["--json", "show", "calls"])).expect("JSON");
    let ids: Vec<&str> = listed["calls"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["id"].as_str())
        .collect();
    assert_eq!(ids, [id.as_str()]);
    assert!(
        ctl(&b.s, &["show", "calls"]).contains(&id),
        "the table lists the call"
    );
    assert!(ctl(&b.s, &["hangup", &id]).contains("hung up"));
    uac.finish().assert_ok(1);
    b.uas.finish().assert_ok(1);
    let cdrs = b.s.wait_cdrs(1);
    assert_eq!(cdrs[0].str("cause_text"), "normal_clearing");
}

/// `strowger --data-dir DATA ctl --api URL ARGS`: the token from the data directory as the
/// server made it, the address the harness gave it; its stdout.
pub(crate) fn ctl(s: &Strowger, args: &[&str]) -> String {
    let data = s.data_dir();
    let url = format!("http://{}", s.api);
    let mut all = vec!["--data-dir", data.to_str().unwrap(), "ctl", "--api", &url];
    all.extend(args);
    let out = run_cli(&all, s.dir.path());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "ctl {args:?}: {err}");
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// Without a token, or with a wrong one, every route answers 401 with `WWW-Authenticate:
/// Bearer`; with it, every path and method of /openapi.json is served (none falls through to
/// the router's bare 404 or 405).
#[test]
fn the_token_guards_every_route_of_the_openapi_document() {
    let s = Strowger::start("api-token");
    let api = Api::of(&s);
    assert_eq!(api.token.len(), 64, "32 random bytes in hex");
    let doc = api.ok("GET", "/openapi.json");
    assert_eq!(doc["openapi"].as_str().map(|v| &v[..2]), Some("3."));
    let paths = doc["paths"].as_object().expect("paths");
    assert!(paths.contains_key("/api/v1/calls") && paths.contains_key("/api/v1/events"));
    for (path, item) in paths {
        let concrete = path
            .replace("{id}", "no-such-call")
            .replace("{user}", "nobody");
        for method in item
            .as_object()
            .unwrap()
            .keys()
            .filter(|m| *m != "parameters")
        {
            let m = method.to_uppercase();
            for bad in [None, Some("wrong-token-0123456789")] {
                let (status, body, www) = api.call_as(&m, &concrete, bad, None);
                assert_eq!(status, 401, "{m} {path} with {bad:?}: {body}");
                assert_eq!(www.as_deref(), Some("Bearer"));
            }
            let (status, body, _) = api.call_as(&m, &concrete, Some(&api.token), None);
            // Served: not the router's 405, nor its bare 404 (a missing call or user is 404
            // with the API's own error body). The event stream wants a WebSocket upgrade, and
            // POST and PUT a proper body: their 4xx are fine here.
            assert!(
                status != 405 && (status != 404 || body["error"].is_string()),
                "{m} {path}: {status} {body}"
            );
        }
    }
}

/// A user added through the API registers with the password it was given, its registration
/// is listed and removed through the store, and the user is deleted.
#[test]
fn users_and_registrations_are_managed_through_the_store() {
    let s = Strowger::start("api-users");
    let api = Api::of(&s);
    let added = json!({ "user": "3001", "password": "first-pass", "context": "default" });
    assert_eq!(
        api.send("POST", "/api/v1/users", Some(added))["user"],
        "3001"
    );
    let bad = json!({ "user": "3002", "password": "x", "context": "nowhere" });
    let (status, body, _) = api.call_as("POST", "/api/v1/users", Some(&api.token), Some(&bad));
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]
        .as_str()
        .unwrap()
        .contains("no such dialplan context"));
    let new_password = json!({ "password": "second-pass" });
    api.send("PUT", "/api/v1/users/3001", Some(new_password));
    let users = api.ok("GET", "/api/v1/users");
    let listed = users["users"].as_array().unwrap();
    let u = listed
        .iter()
        .find(|u| u["user"] == "3001")
        .expect("3001 listed");
    assert_eq!(u["context"], "default");
    assert!(u.get("ha1_md5").is_none(), "no HA1 leaves the store: {u}");

    let phone = Sipp::new(Scenario::File("register.xml"))
        .service("3001")
        .args(&["-au", "3001", "-ap", "second-pass"])
        .spawn(Some(s.sip), s.dir.path());
    let port = phone.addr.port();
    phone.finish().assert_ok(1);
    let regs = api.ok("GET", "/api/v1/registrations?user=3001");
    let contacts = regs["registrations"][0]["contacts"].as_array().cloned();
    let contacts = contacts.unwrap_or_else(|| panic!("3001 registered: {regs}"));
    assert_eq!(contacts.len(), 1);
    assert_eq!(contacts[0]["received"], format!("127.0.0.1:{port}"));
    assert!(contacts[0]["expires_in"].as_u64().unwrap() > 3000);
    let shown = ctl(&s, &["show", "registrations"]);
    assert!(shown.contains(&format!("127.0.0.1:{port}")), "{shown}");

    assert_eq!(api.ok("DELETE", "/api/v1/registrations/3001")["removed"], 1);
    let regs = api.ok("GET", "/api/v1/registrations?user=3001");
    assert_eq!(regs["registrations"], json!([]));
    api.ok("DELETE", "/api/v1/users/3001");
    let (status, _, _) = api.call_as("DELETE", "/api/v1/users/3001", Some(&api.token), None);
    assert_eq!(status, 404);
}

/// A non-loopback api.listen is refused: check-config names the key, and strowger does not
/// start with it.
#[test]
fn a_non_loopback_api_listen_is_refused() {
    let dir = TempDir::new("api-public");
    let conf = dir.path().join("public-api.toml");
    std::fs::write(&conf, "[api]\nlisten = \"0.0.0.0:8088\"\n").unwrap();
    let conf = conf.to_str().unwrap();
    let check = run_cli(&["check-config", conf], dir.path());
    let err = String::from_utf8_lossy(&check.stderr);
    assert_eq!(check.status.code(), Some(2), "{err}");
    assert!(
        err.contains("api.listen") && err.contains("loopback"),
        "{err}"
    );
    let run = run_cli(
        &["--config", conf, "--sip-listen", "127.0.0.1:0"],
        dir.path(),
    );
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success() && err.contains("api.listen"), "{err}");
    let flag = run_cli(&["--api-listen", "192.0.2.1:8088"], dir.path());
    let err = String::from_utf8_lossy(&flag.stderr);
    assert!(
        !flag.status.success() && err.contains("api.listen"),
        "{err}"
    );
}

/// With its API port taken, strowger says so naming the key, and takes calls all the same.
#[test]
fn a_taken_api_port_is_logged_and_calls_go_on() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut s = Strowger::with(
        "api-taken",
        Opts {
            api: Some(taken.local_addr().unwrap()),
            ..Opts::default()
        },
    );
    // The workers answer SIP before the API binds: wait for the line, not for readiness.
    s.wait_log("no control API", 0);
    let log = s.stderr();
    assert!(log.contains("api.listen"), "{log}");
    let uac = Sipp::new(Scenario::Builtin("uac"))
        .service("9196")
        .duration_ms(200);
    uac.run(s.sip, s.dir.path()).assert_ok(1);
    s.assert_alive();
}

/// A Call-ID percent-encoded for a path.
fn enc(id: &str) -> String {
    id.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
