//! `/metrics` scraped by a real Prometheus (Debian's `prometheus`, scripts/setup.sh) with the
//! API's bearer token: SIPp's calls and a registration appear in Prometheus's own queries.

use crate::common;

use common::servers::{http_get, Prometheus};
use common::sipp::{Scenario, Sipp};
use common::switch::{default_config_trusting_loopback, Opts};
use common::{wait_for, Strowger};
use std::time::Duration;

#[test]
fn prometheus_scrapes_the_calls_and_the_registration() {
    let dir = common::TempDir::new("metrics-config");
    let config = default_config_trusting_loopback(dir.path());
    let users = "\n[[users]]\nuser = \"1001\"\npassword = \"secret-1001\"\n";
    let text = std::fs::read_to_string(&config).unwrap() + users;
    std::fs::write(&config, text).unwrap();
    let s = Strowger::with(
        "metrics",
        Opts {
            config_file: Some(config),
            workers: Some(2),
            ..Opts::default()
        },
    );
    let token = std::fs::read_to_string(s.data_dir().join("api.token")).unwrap();
    let token = token.trim();
    let prometheus = Prometheus::start(dir.path(), s.api, token);

    // Without the token, nothing: /metrics is the API's.
    let refused = std::panic::catch_unwind(|| http_get(s.api.port(), "/metrics"));
    assert!(refused.is_err(), "/metrics answered without the token");

    Sipp::new(Scenario::Builtin("uac"))
        .service("44444")
        .calls(3, 5, 3)
        .duration_ms(500)
        .run(s.sip, s.dir.path())
        .assert_ok(3);
    Sipp::new(Scenario::File("register.xml"))
        .service("1001")
        .args(&["-au", "1001", "-ap", "secret-1001"])
        .run(s.sip, s.dir.path())
        .assert_ok(1);

    let sum = |query: &str| -> f64 { prometheus.query(query).iter().map(|(_, v)| v).sum() };
    let seen = wait_for(Duration::from_secs(15), || {
        let calls = sum(r#"strowger_calls_total{cause="normal_clearing"}"#);
        let registered = sum("strowger_registrations_total");
        (calls == 3.0 && registered == 1.0).then_some(())
    });
    assert!(
        seen.is_some(),
        "Prometheus has calls {:?}, registrations {:?}, up {:?}",
        prometheus.query("strowger_calls_total"),
        prometheus.query("strowger_registrations_total"),
        prometheus.query("up"),
    );
    assert_eq!(sum("strowger_registered_bindings"), 1.0);
    assert_eq!(
        sum(r#"strowger_sip_requests_total{method="INVITE",direction="in"}"#),
        3.0
    );
    assert_eq!(sum("strowger_calls_in_progress"), 0.0);
    assert!(sum(r#"strowger_rtp_packets_total{direction="out"}"#) > 50.0);
    // Both workers report their CPU time.
    assert_eq!(
        prometheus.query("strowger_worker_cpu_seconds_total").len(),
        2
    );
}
