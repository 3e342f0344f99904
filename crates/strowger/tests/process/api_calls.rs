//! Calls placed through the control API against a running strowger (tests/configs/
//! originate.toml): a SIPp phone registered as user 1001 is rung, answers, and hears the
//! dialplan of the extension it was called for (a 440 Hz tone, captured on lo); `ctl
//! originate` rings a URI at the trusted address; a URI anywhere else is refused with 403.

use crate::common;

use common::api::Api;
use common::audio::tone_purity;
use common::net::free_port;
use common::pcap::{pcmu_from, Capture};
use common::registrar::{phone, registered};
use common::switch::Opts;
use common::{wait_for, Strowger};
use serde_json::{json, Value};
use std::time::Duration;

fn start(label: &str) -> Strowger {
    Strowger::with(
        label,
        Opts {
            config: Some("originate.toml"),
            ..Opts::default()
        },
    )
}

/// The call `id` once it is answered.
fn answered(api: &Api, id: &str) -> Value {
    wait_for(Duration::from_secs(10), || {
        api.calls()
            .into_iter()
            .find(|c| c["id"] == id && c["state"] == "answered")
    })
    .unwrap_or_else(|| panic!("call {id} not answered: {:?}", api.calls()))
}

#[test]
fn a_registered_phone_is_rung_and_hears_the_extension_it_was_called_for() {
    let s = start("api-originate");
    let api = Api::of(&s);
    let port = free_port();
    registered(&s, "1001", "secret-1001", port);
    let uas = phone(&s, port);
    let from_strowger = format!("udp and src portrange {}-{}", s.rtp.0, s.rtp.1);
    let capture = Capture::start(s.dir.path(), &from_strowger);
    let placed = json!({ "from": "1001", "to": "440" });
    let id = api.send("POST", "/api/v1/calls", Some(placed))["id"]
        .as_str()
        .expect("201 with the call's id")
        .to_string();
    let call = answered(&api, &id);
    assert_eq!(
        (
            call["exten"].as_str(),
            call["legs"][0]["direction"].as_str()
        ),
        (Some("440"), Some("out"))
    );
    std::thread::sleep(Duration::from_millis(1500));
    api.ok("DELETE", &format!("/api/v1/calls/{id}"));
    // SIPp's uas answered strowger's INVITE and took its BYE.
    uas.finish().assert_ok(1);
    let heard = pcmu_from(&capture.finish(), s.rtp);
    assert!(
        heard.len() > 8000,
        "{} samples sent to the phone",
        heard.len()
    );
    let purity = tone_purity(&heard[heard.len() - 8000..], 440.0);
    assert!(
        purity > 0.8,
        "the phone hears 440's tone: purity {purity:.2}"
    );
    let cdrs = s.wait_cdrs(1);
    assert_eq!(cdrs[0].str("call_id"), id);
    cdrs[0].assert_answered("440");
}

#[test]
fn ctl_originate_rings_a_trusted_uri_and_a_stranger_is_refused() {
    let s = start("api-originate-ctl");
    let api = Api::of(&s);
    let port = free_port();
    let uas = phone(&s, port);
    let from = format!("sip:phone@127.0.0.1:{port}");
    let out = crate::api::ctl(&s, &["--json", "originate", &from, "440"]);
    let v: Value = serde_json::from_str(&out).expect("JSON");
    let id = v["id"].as_str().expect("the call's id");
    answered(&api, id);
    api.ok("DELETE", &format!("/api/v1/calls/{id}"));
    uas.finish().assert_ok(1);

    // Not an open relay: 192.0.2.1 is not in security.trusted.
    let stranger = json!({ "from": "sip:x@192.0.2.1", "to": "440" });
    let (status, body, _) = api.call_as("POST", "/api/v1/calls", Some(&api.token), Some(&stranger));
    assert_eq!(status, 403, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("security.trusted"),
        "{body}"
    );
    let (status, body, _) = api.call_as(
        "POST",
        "/api/v1/calls",
        Some(&api.token),
        Some(&json!({ "from": "1001" })),
    );
    assert_eq!(status, 400, "{body}");
    assert_eq!(s.wait_cdrs(1).len(), 1, "nothing else was placed");
}
