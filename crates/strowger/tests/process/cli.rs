//! The command line: check-config, default-config, startup and clean shutdown on signals.

use crate::common;

use common::switch::{config_path, run_cli};
use common::{Strowger, TempDir};

/// The configs the other tests run with must pass check-config.
#[test]
fn test_configs_pass_check_config() {
    let dir = TempDir::new("check-config");
    for name in ["scenarios.toml", "max_calls.toml"] {
        let path = config_path(name);
        let out = run_cli(&["check-config", path.to_str().unwrap()], dir.path());
        assert!(
            out.status.success(),
            "check-config {name}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Every problem is reported as `file:line:col: key: message`, and the exit code is 2.
#[test]
fn check_config_reports_each_error_with_position() {
    let dir = TempDir::new("bad-config");
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[rtp]\nports = \"20001-10000\"\n\n[dialplan]\ndefault_context = \"default\"\n\n\
         [[dialplan.contexts.default.rules]]\nregex = \"(unclosed\"\nsteps = [\"answer\"]\n",
    )
    .unwrap();
    let out = run_cli(&["check-config", bad.to_str().unwrap()], dir.path());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "exit code; stderr:\n{err}");
    let file = bad.to_str().unwrap();
    for (line, key) in [
        (2, "rtp.ports"),
        (8, "dialplan.contexts.default.rules[0].regex"),
    ] {
        let (prefix, key) = (format!("{file}:{line}:"), format!(": {key}: "));
        assert!(
            err.lines()
                .any(|l| l.starts_with(&prefix) && l.contains(&key)),
            "want a `{prefix}COL{key}message` line; stderr:\n{err}"
        );
    }
}

/// default-config prints a configuration that check-config accepts.
#[test]
fn default_config_round_trips() {
    let dir = TempDir::new("default-config");
    let out = run_cli(&["default-config"], dir.path());
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("44444") && text.contains("9196") && text.contains("bridge_target"));
    let path = dir.path().join("default.toml");
    std::fs::write(&path, text).unwrap();
    let out = run_cli(&["check-config", path.to_str().unwrap()], dir.path());
    assert!(
        out.status.success(),
        "check-config on default-config's output: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// SIGTERM and SIGINT both stop strowger with exit status 0.
#[test]
fn signals_stop_cleanly() {
    for sig in ["-TERM", "-INT"] {
        let mut s = Strowger::start("signals");
        s.assert_alive();
        let st = s.stop_with(sig);
        assert!(
            st.success(),
            "exit after {sig}: {st}; stderr:\n{}",
            s.stderr()
        );
    }
}
