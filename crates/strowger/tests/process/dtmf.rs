//! DTMF in every form against a running strowger: SIP INFO digits and tones in the audio reach
//! the dialplan (the record extension 9197 ends on '#'), and a digit crosses a bridge in the
//! form the other party takes (RFC 4733 in and INFO out, INFO in and RFC 4733 out, tones in and
//! RFC 4733 out).

use crate::common;

use common::audio::{tone, ulaw_encode};
use common::sip::{sdp, sdp_audio, tag_of, Msg, Rtp, RtpPkt, Uac, DTMF, PCMU};
use common::sipp::{Scenario, Sipp};
use common::switch::{default_config_trusting_loopback, trusting_loopback, Opts};
use common::{Strowger, TempDir};
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// The row and column frequencies of a key.
fn key(digit: char) -> (f64, f64) {
    let keys = ["123A", "456B", "789C", "*0#D"];
    let row = keys.iter().position(|r| r.contains(digit)).unwrap();
    let col = keys[row].find(digit).unwrap();
    (
        [697.0, 770.0, 852.0, 941.0][row],
        [1209.0, 1336.0, 1477.0, 1633.0][col],
    )
}

/// 20 ms µ-law packets: `lead_ms` of 440 Hz, then `digit`'s tones for 100 ms at −10 dBm0
/// each, then 400 ms of silence.
fn tone_frames(lead_ms: usize, digit: char) -> Vec<Vec<u8>> {
    let (r, c) = key(digit);
    let amp = 22_300.0 * 10f64.powf(-10.0 / 20.0);
    let mut pcm = tone(440.0, lead_ms * 8, 8000.0);
    pcm.extend((0..800).map(|n| {
        let t = n as f64 / 8000.0;
        let w = 2.0 * std::f64::consts::PI * t;
        (amp * ((w * r).sin() + (w * c).sin())) as i16
    }));
    pcm.extend(std::iter::repeat_n(0i16, 3200));
    pcm.chunks(160)
        .map(|c| c.iter().map(|&s| ulaw_encode(s)).collect())
        .collect()
}

/// RFC 4733 `event`: a start packet with the marker, updates, then the end three times.
fn send_event(rtp: &mut Rtp, event: u8) {
    for (i, dur) in [160u16, 320, 480, 640, 800, 800, 800].iter().enumerate() {
        let end = if i >= 4 { 0x80 } else { 0 };
        let payload = [event, end | 10, (dur >> 8) as u8, *dur as u8];
        rtp.send(101, i == 0, &payload, if i == 6 { 800 } else { 0 });
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Calls `exten` offering `pts`; ACKs the 200 and points `rtp` at the answer.
fn call(s: &Strowger, exten: &str, pts: &[(u8, &str)], rtp: &mut Rtp) -> Uac {
    s.answered(exten, pts, rtp)
}

/// SIP INFO: 415 for another body type, 400 for an unreadable digit, 200 for '#', which ends
/// the recording (SIPp's scenario waits at most 8 s for the BYE after it; the recording would
/// go on for 10 s without it).
#[test]
fn info_digits_reach_the_dialplan() {
    let s = Strowger::start("dtmf-info");
    Sipp::new(Scenario::File("info_dtmf.xml"))
        .service("9197")
        .run(s.sip, s.dir.path())
        .assert_ok(1);
}

/// Tones in the audio of a caller that offered no telephone-event: '#' after 1 s ends the
/// recording, which strowger plays back before hanging up.
#[test]
fn in_band_digits_reach_the_dialplan() {
    let s = Strowger::start("dtmf-inband");
    let mut rtp = Rtp::bind();
    let uac = call(&s, "9197", &[PCMU], &mut rtp);
    let sent_at = Instant::now();
    rtp.send_frames(&tone_frames(1000, '#'), Duration::ZERO);
    uac.expect_request("BYE", Duration::from_secs(8));
    let took = sent_at.elapsed();
    assert!(
        took < Duration::from_secs(8),
        "BYE {took:?} after the call began: the recording ended on '#' (else 10 s)"
    );
}

/// A callee on 127.0.0.1 written from literal text: answers strowger's INVITE with `pts`, then
/// answers every request with 200 and keeps it.
struct Uas {
    sock: UdpSocket,
    rtp: Rtp,
    requests: Vec<Msg>,
}

impl Uas {
    fn bind() -> Uas {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        Uas {
            sock,
            rtp: Rtp::bind(),
            requests: Vec::new(),
        }
    }

    fn addr(&self) -> SocketAddr {
        self.sock.local_addr().unwrap()
    }

    /// The next request within `timeout`, answered 200 (with `body` as SDP, a To tag and a
    /// Contact for an INVITE).
    fn next_request(&mut self, timeout: Duration) -> Option<Msg> {
        let end = Instant::now() + timeout;
        let mut buf = [0u8; 4096];
        while let Some(left) = end.checked_duration_since(Instant::now()) {
            self.sock
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .unwrap();
            let Ok((n, from)) = self.sock.recv_from(&mut buf) else {
                continue;
            };
            let Some(m) = Msg::parse(&buf[..n]) else {
                continue;
            };
            if m.method().is_none() {
                continue;
            }
            if m.method() != Some("ACK") {
                self.respond(&m, from);
            }
            self.requests.push(m.clone());
            return Some(m);
        }
        None
    }

    fn respond(&mut self, req: &Msg, to: SocketAddr) {
        let mut out = String::from("SIP/2.0 200 OK\r\n");
        for v in req.headers("via") {
            out += &format!("Via: {v}\r\n");
        }
        let to_hdr = req.header("to").unwrap_or("");
        let tag = if tag_of(to_hdr).is_some() {
            ""
        } else {
            ";tag=uas1"
        };
        out += &format!("To: {to_hdr}{tag}\r\n");
        for h in ["from", "call-id", "cseq"] {
            out += &format!("{h}: {}\r\n", req.header(h).unwrap_or(""));
        }
        let body = if req.method() == Some("INVITE") {
            out += &format!("Contact: <sip:uas@{}>\r\n", self.addr());
            let offer = sdp_audio(&req.body).0;
            self.rtp.remote = Some(offer);
            sdp(self.rtp.port, &[PCMU, DTMF], "sendrecv")
        } else {
            String::new()
        };
        if !body.is_empty() {
            out += "Content-Type: application/sdp\r\n";
        }
        out += &format!("Content-Length: {}\r\n\r\n{body}", body.len());
        self.sock.send_to(out.as_bytes(), to).unwrap();
    }

    /// Waits for strowger's INVITE and its ACK.
    fn answer(&mut self) {
        let invite = self.next_request(Duration::from_secs(5)).expect("INVITE");
        assert_eq!(invite.method(), Some("INVITE"), "{invite:?}");
        let ack = self.next_request(Duration::from_secs(5)).expect("ACK");
        assert_eq!(ack.method(), Some("ACK"), "{ack:?}");
    }

    /// The RFC 4733 events (code, end) arriving within `d`.
    fn events(&self, d: Duration) -> Vec<(u8, bool)> {
        let pkts: Vec<RtpPkt> = self.rtp.recv_for(d);
        pkts.iter()
            .filter(|p| p.pt == 101 && p.payload.len() >= 4)
            .map(|p| (p.payload[0], p.payload[1] & 0x80 != 0))
            .collect()
    }
}

/// Strowger with the default configuration trusting 127.0.0.1, 2XXX bridged to `uas`, and
/// `rtp.dtmf` set to `mode`.
fn bridging(label: &str, dir: &TempDir, uas: &Uas, mode: &str) -> Strowger {
    let text = include_str!("../../../switch/src/default.toml");
    let path = if mode == "auto" {
        default_config_trusting_loopback(dir.path())
    } else {
        let text = trusting_loopback(text)
            .replace("\ndtmf = \"auto\"\n", &format!("\ndtmf = \"{mode}\"\n"));
        let path = dir.path().join("dtmf.toml");
        std::fs::write(&path, text).unwrap();
        path
    };
    Strowger::with(
        label,
        Opts {
            config_file: Some(path),
            vars: vec![("bridge_target".into(), uas.addr().to_string())],
            ..Opts::default()
        },
    )
}

/// A bridged call from a caller offering `pts` to `uas` (which takes telephone-event).
fn bridged(s: &Strowger, uas: &mut Uas, pts: &[(u8, &str)], rtp: &mut Rtp) -> Uac {
    let mut uac = Uac::new(s.sip, "2001");
    uac.send_invite(&sdp(rtp.port, pts, "sendrecv"));
    uas.answer();
    let resp = uac.final_response("INVITE", Duration::from_secs(5));
    assert_eq!(resp.status(), Some(200), "{resp:?}");
    uac.invite_answered(&resp);
    rtp.remote = Some(sdp_audio(&resp.body).0);
    uac.ack("");
    uac
}

/// An INFO digit from the caller reaches the callee as RFC 4733 events.
#[test]
fn info_in_rfc4733_out() {
    let dir = TempDir::new("dtmf-info-4733");
    let mut uas = Uas::bind();
    let s = bridging("dtmf-info-4733", &dir, &uas, "auto");
    let mut rtp = Rtp::bind();
    let mut uac = bridged(&s, &mut uas, &[PCMU, DTMF], &mut rtp);
    let extra = "Content-Type: application/dtmf-relay\r\n";
    uac.send_request("INFO", extra, "Signal=5\r\nDuration=160\r\n");
    assert_eq!(
        uac.final_response("INFO", Duration::from_secs(5)).status(),
        Some(200)
    );
    let events = uas.events(Duration::from_millis(500));
    assert!(
        events.contains(&(5, false)) && events.iter().filter(|e| **e == (5, true)).count() == 3,
        "a start and three ends of event 5: {events:?}"
    );
}

/// Tones from a caller without telephone-event reach the callee as RFC 4733 events.
#[test]
fn in_band_in_rfc4733_out() {
    let dir = TempDir::new("dtmf-inband-4733");
    let mut uas = Uas::bind();
    let s = bridging("dtmf-inband-4733", &dir, &uas, "auto");
    let mut rtp = Rtp::bind();
    let _uac = bridged(&s, &mut uas, &[PCMU], &mut rtp);
    rtp.send_frames(&tone_frames(200, '7'), Duration::ZERO);
    let events = uas.events(Duration::from_millis(500));
    assert!(
        events.contains(&(7, false)) && events.contains(&(7, true)),
        "event 7 from the tones: {events:?}"
    );
    assert!(events.iter().all(|e| e.0 == 7), "{events:?}");
}

/// With `rtp.dtmf = "info"`, an RFC 4733 digit from the caller reaches the callee as an INFO
/// (and not as events as well).
#[test]
fn rfc4733_in_info_out() {
    let dir = TempDir::new("dtmf-4733-info");
    let mut uas = Uas::bind();
    let s = bridging("dtmf-4733-info", &dir, &uas, "info");
    let mut rtp = Rtp::bind();
    let _uac = bridged(&s, &mut uas, &[PCMU, DTMF], &mut rtp);
    send_event(&mut rtp, 11);
    let info = uas.next_request(Duration::from_secs(3)).expect("an INFO");
    assert_eq!(info.method(), Some("INFO"), "{info:?}");
    assert_eq!(info.header("content-type"), Some("application/dtmf-relay"));
    assert!(info.body.contains("Signal=#"), "{}", info.body);
    assert_eq!(
        uas.events(Duration::from_millis(300)),
        [],
        "no events besides"
    );
}
