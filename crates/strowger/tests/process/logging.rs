//! The server's log on stderr: `general.log_level` (and `--log-level` over it) decides what is
//! written, debug adds every SIP message with its Call-ID, and `log_format = "json"` writes one
//! JSON object per line.

use crate::common;

use common::json::Json;
use common::sipp::{Scenario, Sipp};
use common::switch::{run_cli, Opts};
use common::{Strowger, TempDir};
use std::path::PathBuf;

/// The embedded configuration with `[general]` log keys replaced, written to `dir`.
fn config(dir: &TempDir, level: &str, format: &str) -> PathBuf {
    let out = run_cli(&["default-config"], dir.path());
    assert!(out.status.success(), "default-config: {out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let text = text
        .replace("log_level = \"info\"", &format!("log_level = \"{level}\""))
        .replace(
            "log_format = \"text\"",
            &format!("log_format = \"{format}\""),
        );
    assert!(text.contains(&format!("log_level = \"{level}\"")));
    assert!(text.contains(&format!("log_format = \"{format}\"")));
    let path = dir.path().join(format!("{level}-{format}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

/// One call to 9196 (echo) held half a second; returns its Call-ID as SIPp saw it.
fn call(s: &Strowger) -> String {
    let r = Sipp::new(Scenario::Builtin("uac"))
        .service("9196")
        .calls(1, 1, 1)
        .duration_ms(500)
        .run(s.sip, s.dir.path());
    r.assert_ok(1);
    s.wait_cdrs(1);
    let received = r.received();
    let ok = received
        .iter()
        .find(|m| m.status() == Some(200))
        .unwrap_or_else(|| panic!("no 200 for the INVITE:\n{}", r.evidence()));
    ok.header("Call-ID").expect("Call-ID").to_string()
}

/// At `log_level = "error"` a call, its start and its stop write nothing at all.
#[test]
fn error_level_writes_nothing() {
    let dir = TempDir::new("log-error");
    let mut s = Strowger::with(
        "log-error",
        Opts {
            config_file: Some(config(&dir, "error", "text")),
            workers: Some(2),
            quiet: true,
            ..Opts::default()
        },
    );
    call(&s);
    assert!(s.stop().success());
    assert_eq!(s.stderr(), "", "nothing above error happened");
}

/// `--log-level debug` over a config at error: every SIP message of the call is on stderr,
/// the INVITE's request line among them, each with the call's Call-ID as a field; every line of
/// an event starts with a timestamp.
#[test]
fn debug_level_traces_the_calls_sip_messages() {
    let dir = TempDir::new("log-debug");
    let mut s = Strowger::with(
        "log-debug",
        Opts {
            config_file: Some(config(&dir, "error", "text")),
            workers: Some(2),
            log_level: Some("debug"),
            ..Opts::default()
        },
    );
    let call_id = call(&s);
    assert!(s.stop().success());
    let log = s.stderr();
    let events: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(" DEBUG ") || l.contains(" INFO ") || l.contains(" WARN "))
        .collect();
    let traced = |what: &str| {
        events
            .iter()
            .filter(|l| l.contains("strowger::sip:") && l.contains(what))
            .filter(|l| l.contains(&format!("call_id=\"{call_id}\"")))
            .count()
    };
    // INVITE, ACK and BYE in; 100, 200 (INVITE) and 200 (BYE) out at least.
    assert!(traced("SIP received from udp:") >= 3, "{log}");
    assert!(traced("SIP sent to udp:") >= 2, "{log}");
    assert!(
        log.lines().any(|l| l.starts_with("INVITE sip:9196@")),
        "the INVITE's request line:\n{log}"
    );
    assert!(
        log.lines().any(|l| l == format!("Call-ID: {call_id}")),
        "the INVITE's Call-ID header:\n{log}"
    );
    for e in &events {
        let stamp = e.split(' ').next().unwrap();
        assert!(
            stamp.len() >= 20 && stamp.as_bytes()[4] == b'-' && stamp.ends_with('Z'),
            "no timestamp on {e:?}"
        );
    }
}

/// `log_format = "json"`: every line is a JSON object with a timestamp, a level and a message;
/// the SIP trace's lines carry the Call-ID as a field.
#[test]
fn json_lines_parse() {
    let dir = TempDir::new("log-json");
    let mut s = Strowger::with(
        "log-json",
        Opts {
            config_file: Some(config(&dir, "debug", "json")),
            workers: Some(2),
            ..Opts::default()
        },
    );
    let call_id = call(&s);
    assert!(s.stop().success());
    let log = s.stderr();
    let lines: Vec<Json> = log
        .lines()
        .map(|l| Json::parse(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}")))
        .collect();
    assert!(lines.len() > 5, "{log}");
    for j in &lines {
        assert!(j.get("timestamp").and_then(Json::as_str).is_some(), "{j:?}");
        assert!(j.get("level").and_then(Json::as_str).is_some(), "{j:?}");
        let message = j.get("fields").and_then(|f| f.get("message"));
        assert!(message.and_then(Json::as_str).is_some(), "{j:?}");
    }
    let invites = lines.iter().filter(|j| {
        let f = |k: &str| {
            j.get("fields")
                .and_then(|f| f.get(k))
                .and_then(Json::as_str)
        };
        j.get("target").and_then(Json::as_str) == Some("strowger::sip")
            && f("call_id") == Some(call_id.as_str())
            && f("message").is_some_and(|m| m.contains("\nINVITE sip:9196@"))
    });
    assert!(invites.count() >= 1, "the INVITE with its Call-ID:\n{log}");
}
