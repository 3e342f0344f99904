//! Calls placed through the control API against a running strowger (tests/configs/
//! originate.toml): a SIPp phone registered as user 1001 is rung, answers, and hears the
//! dialplan of the extension it was called for (a 440 Hz tone, captured on lo); `ctl
//! originate` rings a URI at the trusted address; a URI anywhere else is refused with 403.
//! A user with two phones has both rung; the first to answer gets the call, the other CANCEL.
//! Commands on a call in progress: digits sent through the API pick a menu's branch, and a
//! bridged SIPp caller is transferred to the tone, and hears a prompt played over its bridge.

use crate::common;

use common::api::Api;
use common::audio::{tone, tone_purity, write_wav};
use common::net::free_port;
use common::pcap::{pcmu_from, Capture};
use common::registrar::{phone, register, registered};
use common::sipp::{Scenario, Sipp};
use common::switch::Opts;
use common::{wait_for, Strowger};
use serde_json::{json, Value};
use std::time::Duration;

fn start(label: &str) -> Strowger {
    start_with(label, Vec::new())
}

fn start_with(label: &str, vars: Vec<(String, String)>) -> Strowger {
    Strowger::with(
        label,
        Opts {
            config: Some("originate.toml"),
            vars,
            ..Opts::default()
        },
    )
}

/// Captures what strowger's RTP ports send, on lo.
fn capture_from(s: &Strowger) -> Capture {
    let from_strowger = format!("udp and src portrange {}-{}", s.rtp.0, s.rtp.1);
    Capture::start(s.dir.path(), &from_strowger)
}

/// How much of 440 Hz the last second strowger sent holds.
fn ends_in_440(s: &Strowger, capture: Capture) -> f64 {
    let heard = pcmu_from(&capture.finish(), s.rtp);
    assert!(heard.len() > 8000, "{} samples sent", heard.len());
    tone_purity(&heard[heard.len() - 8000..], 440.0)
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
    let capture = capture_from(&s);
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

/// User 1001 has two phones: `ctl originate` rings both; the one that answers after a second
/// gets the call under the id the API gave (listed, its events naming the contact that
/// answered) and hears the extension's tone, the one that only rings gets CANCEL.
#[test]
fn ctl_originate_rings_every_phone_of_a_user_and_the_first_to_answer_hears_the_extension() {
    let s = start("api-originate-fork");
    let api = Api::of(&s);
    let (answers, rings) = (free_port(), free_port());
    registered(&s, "1001", "secret-1001", answers);
    register(&s, "1001", "secret-1001", rings).assert_ok(1);
    let spawn = |xml, port| {
        Sipp::new(Scenario::File(xml))
            .port(port)
            .spawn(None, s.dir.path())
    };
    let answering = spawn("uas_answer_late.xml", answers);
    let ringing = spawn("uas_ring_cancel.xml", rings);
    std::thread::sleep(Duration::from_millis(300));
    let mut events = api.events("call");
    let capture = capture_from(&s);
    let out = crate::api::ctl(&s, &["--json", "originate", "1001", "440"]);
    let v: Value = serde_json::from_str(&out).expect("JSON");
    let id = v["id"].as_str().expect("the call's id").to_string();
    answered(&api, &id);
    let call = api.ok("GET", &format!("/api/v1/calls/{id}"));
    let legs = call["legs"].as_array().unwrap();
    assert_eq!(legs.len(), 1, "the phone that rang is gone: {call}");
    assert_eq!(legs[0]["peer"], format!("127.0.0.1:{answers}"), "{call}");
    std::thread::sleep(Duration::from_millis(1500));
    api.ok("DELETE", &format!("/api/v1/calls/{id}"));
    answering.finish().assert_ok(1);
    let r = ringing.finish();
    r.assert_ok(1);
    let cancel = r
        .received()
        .into_iter()
        .find(|m| m.method() == Some("CANCEL"));
    let reason = cancel.as_ref().and_then(|m| m.header("reason"));
    assert!(
        reason.is_some_and(|r| r.contains("cause=200")),
        "the phone that only rang got CANCEL, completed elsewhere: {reason:?}\n{}",
        r.evidence()
    );
    let purity = ends_in_440(&s, capture);
    assert!(
        purity > 0.8,
        "the phone hears 440's tone: purity {purity:.2}"
    );
    let got = events.until(Duration::from_secs(5), |e| e["event"] == "ended");
    let of = |event: &str| -> Vec<&str> {
        got.iter()
            .filter(|e| e["call_id"] == id.as_str() && e["event"] == event)
            .filter_map(|e| e["contact"].as_str())
            .collect()
    };
    let contact = |port| format!("sip:1001@127.0.0.1:{port}");
    assert_eq!(of("answered"), [contact(answers)], "{got:?}");
    let mut rang = of("ringing");
    rang.sort();
    let mut both = [contact(answers), contact(rings)];
    both.sort();
    assert_eq!(rang, both, "{got:?}");
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

#[test]
fn digits_sent_through_the_api_pick_a_menus_branch() {
    let s = start("api-dtmf");
    let api = Api::of(&s);
    let port = free_port();
    let uas = phone(&s, port);
    let capture = capture_from(&s);
    let from = format!("sip:phone@127.0.0.1:{port}");
    let id = crate::api::ctl(&s, &["--json", "originate", &from, "500"]);
    let id: Value = serde_json::from_str(&id).expect("JSON");
    let id = id["id"].as_str().unwrap();
    answered(&api, id);
    std::thread::sleep(Duration::from_millis(500));
    // The menu's prompt plays; 1 leads to the tone.
    assert!(crate::api::ctl(&s, &["dtmf", id, "1"]).contains("sent 1"));
    std::thread::sleep(Duration::from_millis(1500));
    api.ok("DELETE", &format!("/api/v1/calls/{id}"));
    uas.finish().assert_ok(1);
    let purity = ends_in_440(&s, capture);
    assert!(
        purity > 0.8,
        "after 1 the phone hears the tone: purity {purity:.2}"
    );
    let (status, body, _) = api.call_as(
        "POST",
        &format!("/api/v1/calls/{id}/dtmf"),
        Some(&api.token),
        Some(&json!({ "digits": "1" })),
    );
    assert_eq!(status, 404, "the call is over: {body}");
}

/// A SIPp caller (switch_bye.xml: it waits for strowger's BYE) bridged through 2001 to a SIPp
/// UAS, both legs up; `id` is the call's id in the API.
struct Bridged {
    s: Strowger,
    api: Api,
    caller: common::sipp::SippProcess,
    callee: common::sipp::SippProcess,
    id: String,
    /// Last, so it outlives the processes that write into it.
    _dir: common::TempDir,
}

fn bridged(label: &str) -> Bridged {
    let dir = common::TempDir::new(&format!("{label}-sipp"));
    let callee = Sipp::new(Scenario::Builtin("uas"))
        .calls(1, 1, 1)
        .spawn(None, dir.path());
    let s = start_with(
        label,
        vec![("bridge_target".into(), callee.addr.to_string())],
    );
    let api = Api::of(&s);
    let caller = Sipp::new(Scenario::File("switch_bye.xml"))
        .service("2001")
        .spawn(Some(s.sip), dir.path());
    let call = wait_for(Duration::from_secs(10), || {
        api.calls().into_iter().find(|c| {
            c["legs"]
                .as_array()
                .is_some_and(|l| l.len() == 2 && l.iter().all(|l| l["state"] == "up"))
        })
    })
    .expect("the bridged call");
    let id = call["id"].as_str().unwrap().to_string();
    Bridged {
        s,
        api,
        caller,
        callee,
        id,
        _dir: dir,
    }
}

#[test]
fn a_bridged_sipp_caller_is_transferred_to_the_tone() {
    let Bridged {
        _dir,
        s,
        api,
        caller,
        callee,
        id,
    } = bridged("api-transfer");
    let capture = capture_from(&s);
    let out = crate::api::ctl(&s, &["transfer", &id, "440"]);
    assert!(out.contains("transferring"), "{out}");
    // The callee is released (its uas ends on strowger's BYE), the caller hears the tone.
    callee.finish().assert_ok(1);
    std::thread::sleep(Duration::from_millis(1000));
    api.ok("DELETE", &format!("/api/v1/calls/{id}"));
    caller.finish().assert_ok(1);
    let purity = ends_in_440(&s, capture);
    assert!(
        purity > 0.8,
        "the caller hears 440's tone: purity {purity:.2}"
    );
    let cdrs = s.wait_cdrs(1);
    assert_eq!(cdrs[0].str("transferred_to"), "440", "{:?}", cdrs[0]);
}

#[test]
fn a_prompt_played_over_a_bridge_reaches_the_caller_and_the_bridge_resumes() {
    let Bridged {
        _dir,
        s,
        api,
        caller,
        callee,
        id,
    } = bridged("api-play");
    write_wav(
        &s.data_dir().join("sounds/notice.wav"),
        8000,
        &tone(1000.0, 12_000, 8000.0),
    );
    let play = format!("/api/v1/calls/{id}/play");
    let (status, body, _) = api.call_as(
        "POST",
        &play,
        Some(&api.token),
        Some(&json!({ "file": "sounds/missing.wav" })),
    );
    assert_eq!(status, 404, "no such file: {body}");
    assert!(body.to_string().contains("general.data_dir"), "{body}");
    let capture = capture_from(&s);
    let out = crate::api::ctl(&s, &["play", &id, "sounds/notice.wav"]);
    assert!(out.contains("playing"), "{out}");
    // The prompt lasts 1.5 s; then the bridge is back and the call goes on.
    std::thread::sleep(Duration::from_millis(2500));
    let legs = api.calls().into_iter().find(|c| c["id"] == id.as_str());
    let up = legs.is_some_and(|c| c["legs"].as_array().is_some_and(|l| l.len() == 2));
    assert!(up, "the call is still bridged after the prompt");
    assert!(crate::api::ctl(&s, &["mute", &id, "both"]).contains("muted"));
    assert!(crate::api::ctl(&s, &["mute", &id, "--off"]).contains("unmuted"));
    api.ok("DELETE", &format!("/api/v1/calls/{id}"));
    caller.finish().assert_ok(1);
    callee.finish().assert_ok(1);
    // Neither SIPp sends audio, so all strowger sent is the prompt, to the caller.
    let heard = pcmu_from(&capture.finish(), s.rtp);
    assert!(
        heard.len() >= 11_000,
        "{} samples of the prompt",
        heard.len()
    );
    let purity = tone_purity(&heard, 1000.0);
    assert!(
        purity > 0.8,
        "the caller hears the prompt: purity {purity:.2}"
    );
}
