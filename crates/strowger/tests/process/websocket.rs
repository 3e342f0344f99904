//! SIP over WebSocket (RFC 7118), with a real WebSocket client (tungstenite, over rustls for
//! `wss:`) acting as a browser phone: it registers with a digest over `ws:` and `wss:` and the
//! API lists both bindings; it calls the echo over its WebSocket and hears itself; SIPp calls
//! it over UDP and the INVITE comes down its WebSocket; garbage on it leaves its call up; once
//! its WebSocket closes, a call to it fails with 480 at once; a wrong Origin, path or
//! subprotocol is refused at the upgrade; a reload changes the Origins, path and cap.

use crate::common;

use common::api::Api;
use common::audio::{dominant_freq, tone};
use common::sip::Uac;
use common::sip::{frames, pcm, sdp, sdp_audio, Rtp, PCMU};
use common::sipp::{Scenario, Sipp};
use common::switch::Opts;
use common::ws::{connect, Upgrade, WsPhone, HOST};
use common::{Strowger, TempDir};
use serde_json::json;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Anyone may dial 1001 (the public context): a caller without credentials reaches it.
const PUBLIC_1001: &str =
    "\n[[dialplan.contexts.public.rules]]\nexten = \"1001\"\nsteps = [\"bridge user/1001\"]\n";

/// A strowger with `ws:` and `wss:` listeners and `users` (password `pw-USER`): itself, both
/// addresses, and the self-signed certificate its `wss:` listener presents.
fn with_users(label: &str, users: &[&str]) -> (Strowger, SocketAddr, SocketAddr, PathBuf) {
    configured(label, users, &[])
}

/// As [`with_users`], with `edits` to the embedded configuration.
fn configured(
    label: &str,
    users: &[&str],
    edits: &[(&str, &str)],
) -> (Strowger, SocketAddr, SocketAddr, PathBuf) {
    let dir = TempDir::new(label);
    let config = crate::tls::config(dir.path(), "ws.toml", edits, PUBLIC_1001);
    let s = Strowger::with(
        label,
        Opts {
            ws: true,
            config_file: Some(config),
            ..Opts::default()
        },
    );
    let api = Api::of(&s);
    for u in users {
        let user = json!({ "user": u, "password": format!("pw-{u}"), "context": "default" });
        assert_eq!(api.send("POST", "/api/v1/users", Some(user))["user"], *u);
    }
    let (ws, wss) = s.ws.unwrap();
    let ca = s.data_dir().join("tls/cert.pem");
    assert!(ca.exists(), "no {}:\n{}", ca.display(), s.stderr());
    (s, ws, wss, ca)
}

/// The transports of `user`'s bindings as the API lists them.
fn bound_transports(s: &Strowger, user: &str) -> Vec<String> {
    let regs = Api::of(s).ok("GET", &format!("/api/v1/registrations?user={user}"));
    regs["registrations"][0]["contacts"]
        .as_array()
        .unwrap_or_else(|| panic!("{user} registered: {regs}"))
        .iter()
        .map(|c| c["transport"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn a_phone_registers_over_ws_and_wss_and_hears_its_echo() {
    let (s, ws, wss, ca) = with_users("ws-register", &["1001"]);
    let mut plain = connect(ws, None, Upgrade::default()).expect("ws upgrade");
    let ok = plain.register("1001", "pw-1001");
    assert_eq!(ok.status(), Some(200), "{ok:?}");
    let mut secure = connect(wss, Some(&ca), Upgrade::default()).expect("wss upgrade");
    let ok = secure.register("1001", "pw-1001");
    assert_eq!(ok.status(), Some(200), "{ok:?}");
    let mut bound = bound_transports(&s, "1001");
    bound.sort();
    assert_eq!(bound, ["ws", "wss"]);

    // The echo over the secure WebSocket: 200 with SDP, its tone back, BYE on the same socket.
    let mut rtp = Rtp::bind();
    let to = "<sip:9196@strowger>";
    let offer = sdp(rtp.port, &[PCMU], "sendrecv");
    secure.request("INVITE sip:9196@strowger", "echo-wss", to, "", &offer);
    let answer = secure.final_response("INVITE");
    assert_eq!(answer.status(), Some(200), "{answer:?}");
    let (media, _) = sdp_audio(&answer.body);
    rtp.remote = Some(media);
    let to = answer.header("to").unwrap().to_string();
    secure.request("ACK sip:9196@strowger", "echo-wss", &to, "", "");
    assert_echoes_800_hz(&mut rtp);
    secure.request("BYE sip:9196@strowger", "echo-wss", &to, "", "");
    let bye = secure.final_response("BYE");
    assert_eq!(bye.status(), Some(200), "{bye:?}");
}

/// Garbage on the WebSocket of a call in progress (binary noise, text that is no SIP, an HTTP
/// request after the upgrade) is dropped and counted, and the call goes on: its echo still
/// comes back and its BYE is answered on the same WebSocket.
#[test]
fn garbage_on_a_websocket_leaves_its_call_up() {
    let (s, _, wss, ca) = with_users("ws-garbage", &["1001"]);
    let mut phone = connect(wss, Some(&ca), Upgrade::default()).expect("wss upgrade");
    assert_eq!(phone.register("1001", "pw-1001").status(), Some(200));
    let mut rtp = Rtp::bind();
    let to = "<sip:9196@strowger>";
    let offer = sdp(rtp.port, &[PCMU], "sendrecv");
    phone.request("INVITE sip:9196@strowger", "echo-garbage", to, "", &offer);
    let answer = phone.final_response("INVITE");
    assert_eq!(answer.status(), Some(200), "{answer:?}");
    rtp.remote = Some(sdp_audio(&answer.body).0);
    let to = answer.header("to").unwrap().to_string();
    phone.request("ACK sip:9196@strowger", "echo-garbage", &to, "", "");
    let before = Api::of(&s).ok("GET", "/api/v1/stats")["dropped_unparseable"]
        .as_u64()
        .unwrap();
    phone.send_binary(&[0, 159, 146, 150]);
    phone.send("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    phone.send("SIP/2.0 banana\r\n");
    assert_echoes_800_hz(&mut rtp);
    let after = Api::of(&s).ok("GET", "/api/v1/stats")["dropped_unparseable"]
        .as_u64()
        .unwrap();
    assert_eq!(after - before, 3, "the three messages that are no SIP");
    phone.request("BYE sip:9196@strowger", "echo-garbage", &to, "", "");
    let bye = phone.final_response("BYE");
    assert_eq!(bye.status(), Some(200), "{bye:?}");
}

/// SIPp over UDP calls 1001, registered over a WebSocket only: the INVITE comes down
/// that WebSocket (Via WS, the Contact's `.invalid` host as Request-URI), 1001 answers there,
/// and SIPp's BYE follows it.
#[test]
fn sipp_calls_a_phone_registered_over_a_websocket() {
    let (s, ws, _, _) = with_users("ws-callee", &["1001"]);
    let mut phone = connect(ws, None, Upgrade::default()).expect("ws upgrade");
    assert_eq!(phone.register("1001", "pw-1001").status(), Some(200));
    let caller = Sipp::new(Scenario::Builtin("uac"))
        .service("1001")
        .duration_ms(300)
        .spawn(Some(s.sip), s.dir.path());
    answer(&mut phone);
    caller.finish().assert_ok(1);
}

/// Answers the INVITE that comes down `phone`'s WebSocket and the BYE after it.
fn answer(phone: &mut WsPhone) {
    let invite = phone.expect_request("INVITE");
    assert!(
        invite
            .start
            .starts_with(&format!("INVITE sip:1001@{HOST};transport=ws ")),
        "{invite:?}"
    );
    assert!(
        invite.header("via").unwrap().starts_with("SIP/2.0/WS "),
        "{invite:?}"
    );
    let rtp = Rtp::bind();
    phone.respond(&invite, 200, &sdp(rtp.port, &[PCMU], "sendrecv"));
    phone.expect_request("ACK");
    let bye = phone.expect_request("BYE");
    phone.respond(&bye, 200, "");
}

/// 1001's WebSocket closes while its INVITE rings there: the caller hears 480 at once (not
/// after timer B's 32 s), and so does the next caller, though 1001's binding has not expired.
#[test]
fn a_call_to_a_phone_whose_websocket_closed_fails_at_once() {
    let (s, ws, _, _) = with_users("ws-gone", &["1001"]);
    let mut phone = connect(ws, None, Upgrade::default()).expect("ws upgrade");
    assert_eq!(phone.register("1001", "pw-1001").status(), Some(200));
    let rtp = Rtp::bind();
    let offer = sdp(rtp.port, &[PCMU], "sendrecv");
    let mut ringing = Uac::new(s.sip, "1001");
    ringing.send_invite(&offer);
    phone.expect_request("INVITE");
    let closed = Instant::now();
    drop(phone);
    let failed = ringing.final_response("INVITE", Duration::from_secs(10));
    assert_eq!(failed.status(), Some(480), "{failed:?}");
    assert!(
        closed.elapsed() < Duration::from_secs(3),
        "{:?}",
        closed.elapsed()
    );
    assert_eq!(bound_transports(&s, "1001"), ["ws"]);
    let called = Instant::now();
    let next = Uac::new(s.sip, "1001").invite(&offer);
    assert_eq!(next.status(), Some(480), "{next:?}");
    assert!(
        called.elapsed() < Duration::from_secs(3),
        "{:?}",
        called.elapsed()
    );
}

#[test]
fn upgrades_from_a_foreign_origin_a_wrong_path_or_without_sip_are_refused() {
    let (_s, ws, wss, ca) = with_users("ws-refused", &[]);
    let refused = |addr, ca: Option<&std::path::Path>, up| connect(addr, ca, up).err();
    let foreign = Upgrade {
        origin: Some("https://evil.example"),
        ..Upgrade::default()
    };
    assert_eq!(refused(ws, None, foreign), Some(403));
    let elsewhere = Upgrade {
        path: "/other",
        ..Upgrade::default()
    };
    assert_eq!(refused(wss, Some(&ca), elsewhere), Some(404));
    let no_sip = Upgrade {
        subprotocol: Some("chat"),
        ..Upgrade::default()
    };
    assert_eq!(refused(ws, None, no_sip), Some(400));
    // A page of the listen address's own host, on another port: let in by default.
    let own = Upgrade {
        origin: Some("https://127.0.0.1:8443"),
        ..Upgrade::default()
    };
    assert!(connect(wss, Some(&ca), own).is_ok());
}

/// With `sip.ws_max_connections = 1`, `sip.ws_ping_s = 1` and `sip.ws_handshake_s = 1`: a
/// second WebSocket is refused while the first is open, the first, silent, is pinged, and a
/// connection that never sends its upgrade is closed after the second.
#[test]
fn websockets_are_capped_pinged_and_cut_when_they_never_upgrade() {
    let (_s, ws, _, _) = configured(
        "ws-limits",
        &[],
        &[
            ("ws_max_connections = 1024", "ws_max_connections = 1"),
            ("ws_ping_s = 30", "ws_ping_s = 1"),
            ("ws_handshake_s = 10", "ws_handshake_s = 1"),
        ],
    );
    let mut first = connect(ws, None, Upgrade::default()).expect("the first WebSocket");
    assert_eq!(connect(ws, None, Upgrade::default()).err(), Some(0));
    assert!(first.pinged_within(Duration::from_secs(4)), "no ping");
    drop(first);
    // Its close reaches worker 0 before the next connection does.
    std::thread::sleep(Duration::from_millis(300));
    let mut mute = std::net::TcpStream::connect(ws).unwrap();
    let opened = Instant::now();
    assert!(crate::tls::closed_within(&mut mute, Duration::from_secs(5)));
    assert!(
        opened.elapsed() >= Duration::from_millis(900),
        "{:?}",
        opened.elapsed()
    );
}

/// A second of an 800 Hz tone sent on `rtp` comes back as an 800 Hz tone (the echo, 9196).
fn assert_echoes_800_hz(rtp: &mut Rtp) {
    let back = rtp.send_frames(
        &frames(&tone(800.0, 8000, 8000.0)),
        Duration::from_millis(300),
    );
    let heard = pcm(&back);
    assert!(heard.len() > 4000, "{} samples echoed", heard.len());
    assert!(
        (dominant_freq(&heard) - 800.0).abs() < 20.0,
        "{}",
        dominant_freq(&heard)
    );
}

/// A reload applies `sip.ws_origins`, `sip.ws_path` and `sip.ws_max_connections` to the
/// upgrades after it, while a WebSocket opened before stays up; `security.tcp_max`, fitted to
/// the file descriptors at start, is logged as needing a restart.
#[test]
fn a_reload_applies_the_websocket_origins_path_and_cap() {
    let dir = TempDir::new("ws-reload");
    // Music from an empty directory: a reload reads the music again, and decoding the
    // default class's tracks takes seconds in a debug build on a busy machine.
    let moh = format!("\ndirectory = \"{}\"\n", dir.path().display());
    let write = |origin: &str, path: &str, max: &str, tcp_max: &str| {
        crate::tls::config(
            dir.path(),
            "ws.toml",
            &[
                ("\ndirectory = \"/usr/share/asterisk/moh\"\n", &moh),
                ("ws_origins = []", &format!("ws_origins = [\"{origin}\"]")),
                ("ws_path = \"/ws\"", &format!("ws_path = \"{path}\"")),
                (
                    "ws_max_connections = 1024",
                    &format!("ws_max_connections = {max}"),
                ),
                ("tcp_max = 4096", &format!("tcp_max = {tcp_max}")),
            ],
            PUBLIC_1001,
        )
    };
    let config = write("https://a.example", "/ws", "1", "4096");
    let s = Strowger::with(
        "ws-reload",
        Opts {
            ws: true,
            config_file: Some(config),
            ..Opts::default()
        },
    );
    let (ws, _) = s.ws.unwrap();
    let from = |origin, path| Upgrade {
        origin: Some(origin),
        path,
        ..Upgrade::default()
    };
    assert_eq!(
        connect(ws, None, from("https://b.example", "/ws")).err(),
        Some(403)
    );
    let mut a = connect(ws, None, from("https://a.example", "/ws")).expect("a.example's page");
    assert_eq!(
        connect(ws, None, from("https://a.example", "/ws")).err(),
        Some(0),
        "a second WebSocket over sip.ws_max_connections = 1"
    );

    write("https://b.example", "/sip", "2", "4000");
    s.signal("-HUP");
    s.wait_log("needs a restart: security.tcp_max", 0);
    assert_eq!(
        connect(ws, None, from("https://b.example", "/ws")).err(),
        Some(404)
    );
    assert_eq!(
        connect(ws, None, from("https://a.example", "/sip")).err(),
        Some(403)
    );
    // The refused connections' closes reach worker 0 before the next connection does.
    std::thread::sleep(Duration::from_millis(300));
    let mut b = connect(ws, None, from("https://b.example", "/sip"))
        .expect("b.example's page at /sip, the second WebSocket of two");
    let user = json!({ "user": "1001", "password": "pw-1001", "context": "default" });
    Api::of(&s).send("POST", "/api/v1/users", Some(user));
    for (phone, who) in [(&mut a, "a, opened before the reload"), (&mut b, "b")] {
        let ok = phone.register("1001", "pw-1001");
        assert_eq!(ok.status(), Some(200), "{who}: {ok:?}");
    }
}
