//! IAX2 through strowger: a test client built from crates/iax2 calls in and is called (echo,
//! SIP callers and callees, call tokens, a lost frame, trunk frames, a tshark capture), and a
//! real iaxmodem registers with MD5, answers a SIP call and dials the echo extension.

use crate::common;

use common::audio::{dominant_freq, tone, ulaw_decode_all, ulaw_encode};
use common::net::free_port;
use common::sip::{sdp, sdp_audio, Rtp, RtpPkt, Uac, DTMF, PCMU};
use common::sipp::{Scenario, Sipp};
use common::switch::Opts;
use common::{wait_for, Strowger, TempDir};
use iax2::frame::iax;
use iax2::ie::{self, IeBuilder};
use iax2::{
    format, CallId, Config, EndReason, Endpoint, Event, Frame, FrameType, FullFrame, NewCall,
};
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// One side of the wire as a test client sees it.
type Wire = Vec<(SocketAddr, SocketAddr, Vec<u8>)>;

/// Says which incoming datagrams a lossy link drops.
type DropRule = Box<dyn FnMut(&[u8]) -> bool>;

/// An IAX2 endpoint on a UDP socket, pumped by hand; it records every datagram both ways.
struct Client {
    sock: UdpSocket,
    addr: SocketAddr,
    ep: Endpoint,
    wire: Wire,
    /// Incoming datagrams this predicate matches are dropped (once each time it says so).
    drop_in: Option<DropRule>,
    received: Vec<Vec<u8>>,
}

impl Client {
    fn bind(cfg: Config) -> Client {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = sock.local_addr().unwrap();
        Client {
            sock,
            addr,
            ep: Endpoint::new(cfg, Instant::now()),
            wire: Vec::new(),
            drop_in: None,
            received: Vec::new(),
        }
    }

    fn flush(&mut self) {
        while let Some(t) = self.ep.poll_transmit() {
            self.sock.send_to(&t.bytes, t.to).unwrap();
            self.wire.push((self.addr, t.to, t.bytes));
        }
    }

    /// Runs the endpoint for `dur`, returning its events.
    fn pump(&mut self, dur: Duration) -> Vec<Event> {
        self.pump_until(dur, |_| false)
    }

    /// Runs the endpoint until an event matches `stop` (returned last) or `dur` passes.
    fn pump_until(&mut self, dur: Duration, mut stop: impl FnMut(&Event) -> bool) -> Vec<Event> {
        let end = Instant::now() + dur;
        let mut events = Vec::new();
        let mut buf = [0u8; 2048];
        loop {
            self.flush();
            let now = Instant::now();
            if now >= end {
                return events;
            }
            let wake = self.ep.poll_timeout().map_or(end, |t| t.min(end));
            let wait = wake
                .saturating_duration_since(now)
                .max(Duration::from_millis(1));
            self.sock.set_read_timeout(Some(wait)).unwrap();
            if let Ok((n, from)) = self.sock.recv_from(&mut buf) {
                let data = &buf[..n];
                let dropped = self.drop_in.as_mut().is_some_and(|f| f(data));
                if !dropped {
                    self.wire.push((from, self.addr, data.to_vec()));
                    self.received.push(data.to_vec());
                    self.ep.handle(from, data, Instant::now());
                }
            }
            self.ep.handle_timeout(Instant::now());
            self.flush();
            while let Some(e) = self.ep.poll_event() {
                let done = stop(&e);
                events.push(e);
                if done {
                    return events;
                }
            }
        }
    }

    /// Sends `frames` of µ-law 20 ms apart while collecting what comes back, then `tail`.
    fn send_frames(&mut self, call: CallId, frames: &[Vec<u8>], tail: Duration) -> Vec<Event> {
        let start = Instant::now();
        let mut got = Vec::new();
        for (i, f) in frames.iter().enumerate() {
            self.ep
                .send_voice(call, format::ULAW, f, Instant::now())
                .unwrap();
            self.ep.flush_trunks();
            let due = start + Duration::from_millis(20 * (i as u64 + 1));
            got.extend(self.pump(due.saturating_duration_since(Instant::now())));
        }
        got.extend(self.pump(tail));
        got
    }
}

fn voice(events: &[Event]) -> Vec<Vec<u8>> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Voice { data, .. } => Some(data.clone()),
            _ => None,
        })
        .collect()
}

/// 20 ms µ-law frames of `samples`.
fn frames(samples: &[i16]) -> Vec<Vec<u8>> {
    samples
        .chunks(160)
        .map(|c| c.iter().map(|&s| ulaw_encode(s)).collect())
        .collect()
}

/// The same, numbered in their first byte so each frame is recognisable.
fn numbered(samples: &[i16]) -> Vec<Vec<u8>> {
    frames(samples)
        .into_iter()
        .enumerate()
        .map(|(i, mut f)| {
            f[0] = i as u8;
            f
        })
        .collect()
}

const CLIENT_SECRET: &str = "client-secret";
/// Call tokens for every address (the default), or not for a local client older than them.
const TOKENS: &str = "calltoken_optional = []";
const LEGACY_OK: &str = "calltoken_optional = [\"127.0.0.1\"]";

/// A configuration: the embedded default plus IAX2 on `iax`, test extensions (3XXX to the
/// peer `client`, 4XXX to the trunk peer `trunk`, 5000 to the registered `modem`), `peers`
/// (`provider` is registered to) and `iax2`: `[iax2]` lines, each replacing the default's.
fn config(dir: &TempDir, iax: SocketAddr, peers: &[(&str, SocketAddr)], iax2: &str) -> PathBuf {
    let base = include_str!("../../../switch/src/default.toml");
    let rules = r#"
[[dialplan.contexts.default.rules]]
regex = "^3\\d{3}$"
steps = ["bridge iax2/client/${EXTEN} timeout=10"]

[[dialplan.contexts.default.rules]]
regex = "^4\\d{3}$"
steps = ["bridge iax2/trunk/${EXTEN} timeout=10"]

[[dialplan.contexts.default.rules]]
exten = "5001"
steps = ["answer", "tone ringback duration=3", "hangup"]

[[dialplan.contexts.default.rules]]
exten = "5000"
steps = ["bridge iax2/modem/5000 timeout=30"]

# Everything else: 404 Not Found."#;
    // The SIP phones of the tests call from a trusted address (in the default context).
    let mut text = common::switch::trusting_loopback(base)
        .replace("# Everything else: 404 Not Found.", rules)
        .replace(
            "# listen = \"127.0.0.1:4569\"",
            &format!("listen = \"{iax}\""),
        );
    // Each `key = value` line of `iax2` replaces the [iax2] line of that key.
    for line in iax2.lines() {
        let key = line.split(" =").next().unwrap_or_default();
        let old = text
            .lines()
            .find(|l| l.starts_with(&format!("{key} =")))
            .unwrap_or_else(|| panic!("no [iax2] key {key:?} in the default configuration"))
            .to_string();
        text = text.replacen(&old, line, 1);
    }
    for (name, addr) in peers {
        let trunk = *name == "trunk";
        let register = *name == "provider";
        text += &format!(
            "\n[[iax2.peers]]\nname = \"{name}\"\nhost = \"{addr}\"\nsecret = \"{CLIENT_SECRET}\"\n\
             codecs = [\"PCMU\"]\ntrunk = {trunk}\nregister = {register}\n"
        );
    }
    text += "\n[[iax2.peers]]\nname = \"modem\"\nhost = \"dynamic\"\nsecret = \"modem-secret\"\ncodecs = [\"PCMU\"]\n";
    let path = dir.path().join("strowger.toml");
    std::fs::write(&path, text).unwrap();
    path
}

struct Rig {
    s: Strowger,
    iax: SocketAddr,
    _dir: TempDir,
}

/// strowger with IAX2 on a free port, the given peers, and `vars`; two workers, so every flow
/// crosses the hand-over from the IAX2 port (worker 0) to the worker of its call.
fn start(
    label: &str,
    peers: &[(&str, SocketAddr)],
    iax2: &str,
    vars: Vec<(String, String)>,
) -> Rig {
    let dir = TempDir::new(&format!("{label}-cfg"));
    let iax: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let file = config(&dir, iax, peers, iax2);
    let s = Strowger::with(
        label,
        Opts {
            config_file: Some(file),
            vars,
            workers: Some(2),
            ..Opts::default()
        },
    );
    assert!(
        s.stderr().contains(&format!("IAX2 on udp:{iax}")),
        "startup line names the IAX2 socket:\n{}",
        s.stderr()
    );
    Rig { s, iax, _dir: dir }
}

fn new_call(exten: &str, user: &str) -> NewCall {
    NewCall {
        called_number: exten.into(),
        calling_number: Some("7001".into()),
        calling_name: Some("Test Client".into()),
        username: Some(user.into()),
        secret: Some(CLIENT_SECRET.into()),
        format: format::ULAW,
        capability: format::ULAW,
        ..NewCall::default()
    }
}

/// Calls `exten` as peer `user` and waits for the answer.
fn call_answered(c: &mut Client, server: SocketAddr, exten: &str, user: &str) -> CallId {
    let id =
        c.ep.call(server, &new_call(exten, user), Instant::now())
            .unwrap();
    let ev = c.pump_until(Duration::from_secs(5), |e| {
        matches!(e, Event::Answered { .. } | Event::Hangup { .. })
    });
    assert!(
        ev.iter().any(|e| matches!(
            e,
            Event::Accepted {
                format: format::ULAW,
                ..
            }
        )),
        "ACCEPT with µ-law expected: {ev:?}"
    );
    assert!(
        matches!(ev.last(), Some(Event::Answered { call }) if *call == id),
        "call to {exten} answered: {ev:?}"
    );
    id
}

/// The first provisional response after 100 Trying.
fn provisional(uac: &Uac) -> Option<u16> {
    loop {
        let m = uac.recv(Duration::from_secs(3))?;
        if m.status() != Some(100) {
            return m.status();
        }
    }
}

fn hangup(c: &mut Client, id: CallId) {
    c.ep.hangup(id, 16, Instant::now()).unwrap();
    c.pump(Duration::from_millis(300));
}

/// 9196 over IAX2: MD5 authentication, then 100 numbered µ-law frames must come back unchanged
/// and in order; the CDR names the IAX2 caller.
#[test]
fn iax2_caller_hears_its_echo() {
    let mut c = Client::bind(Config::default());
    let r = start("iax-echo", &[("client", c.addr)], TOKENS, vec![]);
    let id = call_answered(&mut c, r.iax, "9196", "client");
    let sent = numbered(&tone(1000.0, 160 * 100, 8000.0));
    let back = voice(&c.send_frames(id, &sent, Duration::from_millis(400)));
    hangup(&mut c, id);
    let ours: Vec<usize> = back
        .iter()
        .filter_map(|f| sent.iter().position(|s| s == f))
        .collect();
    println!("9196 over IAX2: {} of 100 frames echoed", ours.len());
    assert!(
        ours.len() >= 95,
        "{} of 100 frames echoed unchanged",
        ours.len()
    );
    assert!(
        ours.windows(2).all(|w| w[0] < w[1]),
        "echo out of order: {ours:?}"
    );
    let cdr = r.s.wait_cdrs(1).remove(0);
    assert_eq!(cdr.str("exten"), "9196", "{cdr:?}");
    assert!(!cdr.is_null("answer"), "{cdr:?}");
    assert!(cdr.str("from").contains("iax2:7001@"), "{cdr:?}");
    assert_eq!(cdr.str("codec"), "PCMU", "{cdr:?}");
    assert_eq!(cdr.str("hangup_side"), "caller", "{cdr:?}");
    assert!(cdr.num("packets_received") >= 95.0, "{cdr:?}");
}

/// 9195 over IAX2 (record-call in stereo, then echo): the IAX2 caller's CDR names the
/// recording, its length and that it is complete, as a SIP caller's does; the file holds the
/// caller's tone left and its echo right.
#[test]
fn an_iax2_callers_recording_is_in_its_cdr() {
    let mut c = Client::bind(Config::default());
    let r = start("iax-record", &[("client", c.addr)], TOKENS, vec![]);
    let id = call_answered(&mut c, r.iax, "9195", "client");
    c.send_frames(
        id,
        &frames(&tone(1000.0, 160 * 100, 8000.0)),
        Duration::from_millis(200),
    );
    hangup(&mut c, id);
    let cdr = r.s.wait_cdrs(1).remove(0);
    let file = format!("calls/{}.wav", cdr.str("call_id"));
    assert_eq!(cdr.str("recording"), file, "{cdr:?}");
    assert!(cdr.line.contains("\"recording_complete\":true"), "{cdr:?}");
    let secs = cdr.num("recording_s");
    assert!((2.0..3.5).contains(&secs), "{secs} s recorded: {cdr:?}");
    // The writer completes the file just after the CDR.
    std::thread::sleep(Duration::from_millis(300));
    let wav = common::audio::read_wav(&r.s.data_dir().join(&file));
    assert_eq!(wav.channels, 2);
    let file_secs = wav.samples.len() as f64 / 16_000.0;
    assert!(
        (file_secs - secs).abs() < 0.001,
        "file {file_secs} s, CDR {secs} s"
    );
    let left: Vec<i16> = wav.samples.iter().step_by(2).copied().collect();
    let right: Vec<i16> = wav.samples.iter().skip(1).step_by(2).copied().collect();
    assert_eq!(dominant_freq(&left), 1000.0, "the caller, left");
    assert_eq!(dominant_freq(&right), 1000.0, "its echo, right");
}

/// A SIP phone (offering A-law only) dials 3001, bridged to the IAX2 peer `client` (µ-law):
/// the peer is called with MD5 and a call token of its own, rings, answers; each side hears
/// the other's tone through the µ-law/A-law transcoding; the SIP BYE hangs up the IAX2 leg.
#[test]
fn sip_caller_reaches_an_iax2_peer_and_hears_it() {
    let mut c = Client::bind(Config::default());
    let r = start("sip-to-iax", &[("client", c.addr)], TOKENS, vec![]);
    let mut rtp = Rtp::bind();
    let (mut uac, call, pts) = sip_call_to_client(&mut c, &r, &mut rtp, &[(8, "PCMA/8000")]);
    assert_eq!(pts.first(), Some(&8), "A-law answered");
    // 1.5 s both ways: 440 Hz A-law from the SIP side, 1 kHz µ-law from the IAX2 side.
    let alaw: Vec<Vec<u8>> = tone(440.0, 160 * 75, 8000.0)
        .chunks(160)
        .map(|c| {
            c.iter()
                .map(|&s| codec::G711::Pcma.encode_sample(s))
                .collect()
        })
        .collect();
    let iax_frames = frames(&tone(1000.0, 160 * 75, 8000.0));
    let mut heard_sip = Vec::new();
    let mut heard_iax = Vec::new();
    let start = Instant::now();
    for i in 0..75 {
        rtp.send(8, i == 0, &alaw[i], 160);
        c.ep.send_voice(call, format::ULAW, &iax_frames[i], Instant::now())
            .unwrap();
        let due = start + Duration::from_millis(20 * (i as u64 + 1));
        heard_iax.extend(voice(
            &c.pump(due.saturating_duration_since(Instant::now()) / 2),
        ));
        heard_sip.extend(rtp.recv_for(due.saturating_duration_since(Instant::now())));
    }
    heard_iax.extend(voice(&c.pump(Duration::from_millis(200))));
    heard_sip.extend(rtp.recv_for(Duration::from_millis(200)));
    let sip_pcm: Vec<i16> = heard_sip
        .iter()
        .filter(|p| p.pt == 8)
        .flat_map(|p| {
            p.payload
                .iter()
                .map(|&b| codec::G711::Pcma.decode_sample(b))
        })
        .collect();
    let iax_pcm: Vec<i16> = heard_iax.iter().flat_map(|f| ulaw_decode_all(f)).collect();
    println!(
        "SIP heard {} samples at {:.0} Hz, IAX2 heard {} samples at {:.0} Hz",
        sip_pcm.len(),
        dominant_freq(&sip_pcm),
        iax_pcm.len(),
        dominant_freq(&iax_pcm)
    );
    assert!(
        sip_pcm.len() >= 160 * 60,
        "SIP side got {} samples",
        sip_pcm.len()
    );
    assert!(
        iax_pcm.len() >= 160 * 60,
        "IAX2 side got {} samples",
        iax_pcm.len()
    );
    assert!(
        (dominant_freq(&sip_pcm) - 1000.0).abs() < 30.0,
        "SIP side hears the IAX2 tone"
    );
    assert!(
        (dominant_freq(&iax_pcm) - 440.0).abs() < 30.0,
        "IAX2 side hears the SIP tone"
    );
    assert_eq!(uac.bye().status(), Some(200));
    let ev = c.pump_until(Duration::from_secs(3), |e| {
        matches!(e, Event::Hangup { .. })
    });
    assert!(
        matches!(
            ev.last(),
            Some(Event::Hangup {
                reason: EndReason::Hangup { .. },
                ..
            })
        ),
        "the SIP BYE hangs up the IAX2 leg: {ev:?}"
    );
    let cdr = r.s.wait_cdrs(1).remove(0);
    cdr.assert_answered("3001");
    assert_eq!(cdr.str("bridged_to"), "iax2/client/3001", "{cdr:?}");
}

/// A SIP phone offering `offer` dials 3001, bridged to the IAX2 peer `client`: the client
/// answers strowger's NEW (its own call token, MD5 with the peer's secret), rings (the phone
/// gets 180) and answers. Returns the phone's dialog, the IAX2 call and the answered PTs.
fn sip_call_to_client(
    c: &mut Client,
    r: &Rig,
    rtp: &mut Rtp,
    offer: &[(u8, &str)],
) -> (Uac, CallId, Vec<u8>) {
    let mut uac = Uac::new(r.s.sip, "3001");
    uac.send_invite(&sdp(rtp.port, offer, "sendrecv"));
    let ev = c.pump_until(Duration::from_secs(5), |e| {
        matches!(e, Event::Incoming { .. })
    });
    let Some(Event::Incoming { call, info, .. }) = ev.last().cloned() else {
        panic!("no NEW from strowger: {ev:?}");
    };
    assert_eq!(info.called_number.as_deref(), Some("3001"));
    assert_eq!(info.username.as_deref(), Some("client"));
    // strowger must answer our MD5 challenge with the peer's secret.
    c.ep.authenticate(call, CLIENT_SECRET, Instant::now())
        .unwrap();
    let ev = c.pump_until(Duration::from_secs(3), |e| {
        matches!(e, Event::Authenticated { .. })
    });
    assert!(
        matches!(ev.last(), Some(Event::Authenticated { .. })),
        "{ev:?}"
    );
    c.ep.accept(call, format::ULAW, Instant::now()).unwrap();
    c.ep.ringing(call, Instant::now()).unwrap();
    c.pump(Duration::from_millis(200));
    assert_eq!(provisional(&uac), Some(180));
    c.ep.answer(call, Instant::now()).unwrap();
    c.pump(Duration::from_millis(100));
    let ok = uac.final_response("INVITE", Duration::from_secs(5));
    assert_eq!(ok.status(), Some(200), "{ok:?}");
    uac.invite_answered(&ok);
    let (addr, pts) = sdp_audio(&ok.body);
    rtp.remote = Some(addr);
    uac.ack("");
    (uac, call, pts)
}

/// Incoming calls from one peer address spread over both workers: strowger's call numbers
/// (each worker draws its own share, n mod 2) show that both took calls, and every call's
/// echo comes back whole while all are up, so each frame reached its call's worker.
#[test]
fn incoming_calls_spread_over_the_workers() {
    let mut c = Client::bind(Config::default());
    let r = start("iax-spread", &[("client", c.addr)], TOKENS, vec![]);
    let ids: Vec<CallId> = (0..12)
        .map(|_| call_answered(&mut c, r.iax, "9196", "client"))
        .collect();
    let numbers: Vec<u16> = c
        .received
        .iter()
        .filter_map(|b| full(b))
        .filter(|f| f.frame_type == FrameType::Iax && f.subclass == iax::ACCEPT)
        .map(|f| f.src_call)
        .collect();
    let odd = numbers.iter().filter(|n| *n % 2 == 1).count();
    println!("strowger's call numbers: {numbers:?}");
    assert!(
        odd > 0 && odd < numbers.len(),
        "both workers took calls: {numbers:?}"
    );
    let sent = numbered(&tone(1000.0, 160 * 50, 8000.0));
    let start = Instant::now();
    let mut events = Vec::new();
    for (i, f) in sent.iter().enumerate() {
        for id in &ids {
            c.ep.send_voice(*id, format::ULAW, f, Instant::now())
                .unwrap();
        }
        let due = start + Duration::from_millis(20 * (i as u64 + 1));
        events.extend(c.pump(due.saturating_duration_since(Instant::now())));
    }
    events.extend(c.pump(Duration::from_millis(300)));
    for id in &ids {
        let back = events
            .iter()
            .filter(|e| matches!(e, Event::Voice { call, data, .. } if call == id && sent.contains(data)))
            .count();
        assert!(back >= 45, "call {id:?}: {back} of 50 frames echoed");
    }
    for id in ids {
        hangup(&mut c, id);
    }
    r.s.wait_cdrs(12);
}

/// DTMF both ways across a SIP↔IAX2 bridge: the phone's RFC 4733 digit reaches the IAX2
/// peer as DTMF_BEGIN/DTMF_END, and the peer's digit reaches the phone as RFC 4733 events.
#[test]
fn dtmf_crosses_between_sip_and_iax2_both_ways() {
    let mut c = Client::bind(Config::default());
    let r = start("iax-dtmf", &[("client", c.addr)], TOKENS, vec![]);
    let mut rtp = Rtp::bind();
    let (mut uac, call, pts) = sip_call_to_client(&mut c, &r, &mut rtp, &[PCMU, DTMF]);
    assert!(pts.contains(&DTMF.0), "telephone-event answered: {pts:?}");
    let silence = vec![0xffu8; 160];
    for _ in 0..5 {
        rtp.send(PCMU.0, false, &silence, 160);
        c.pump(Duration::from_millis(20));
    }
    // '5' from the phone: a start, two updates, three end packets, all at one timestamp.
    let mut ev = Vec::new();
    let steps = [160u16, 320, 480, 640, 640, 640];
    for (i, dur) in steps.into_iter().enumerate() {
        let end = i >= 3;
        let mut payload = vec![5, 10 | if end { 0x80 } else { 0 }];
        payload.extend_from_slice(&dur.to_be_bytes());
        rtp.send(DTMF.0, i == 0, &payload, 0);
        ev.extend(c.pump(Duration::from_millis(20)));
    }
    rtp.send(PCMU.0, false, &silence, 640);
    ev.extend(c.pump(Duration::from_millis(300)));
    let digits: Vec<(char, bool)> = ev
        .iter()
        .filter_map(|e| match e {
            Event::Dtmf { digit, begin, .. } => Some((*digit, *begin)),
            _ => None,
        })
        .collect();
    assert_eq!(digits, vec![('5', true), ('5', false)], "{ev:?}");
    // '#' from the IAX2 peer, held 100 ms.
    c.ep.send_dtmf(call, '#', true, Instant::now()).unwrap();
    c.pump(Duration::from_millis(100));
    c.ep.send_dtmf(call, '#', false, Instant::now()).unwrap();
    c.pump(Duration::from_millis(100));
    let events: Vec<RtpPkt> = rtp
        .recv_for(Duration::from_millis(300))
        .into_iter()
        .filter(|p| p.pt == DTMF.0)
        .collect();
    assert!(
        events.iter().all(|p| p.payload.first() == Some(&11)),
        "RFC 4733 event 11 is '#': {events:?}"
    );
    assert!(
        events
            .iter()
            .any(|p| p.payload.get(1).is_some_and(|b| b & 0x80 == 0)),
        "a start or update of the digit: {events:?}"
    );
    assert!(
        events
            .iter()
            .any(|p| p.payload.get(1).is_some_and(|b| b & 0x80 != 0)),
        "the digit's end: {events:?}"
    );
    assert_eq!(uac.bye().status(), Some(200));
    r.s.wait_cdrs(1);
}

/// In a call, strowger answers PING with PONG and LAGRQ with LAGRP (each echoing the
/// request's timestamp, so the peer measures its round trip), and a POKE outside any call
/// with a stateless PONG.
#[test]
fn ping_lagrq_and_poke_are_answered() {
    let mut c = Client::bind(Config::default());
    let r = start("iax-ping", &[("client", c.addr)], TOKENS, vec![]);
    let id = call_answered(&mut c, r.iax, "9196", "client");
    c.ep.ping(id, Instant::now()).unwrap();
    c.ep.lagrq(id, Instant::now()).unwrap();
    let poke = c.ep.poke(r.iax, Instant::now()).unwrap();
    let ev = c.pump(Duration::from_millis(300));
    let pongs: Vec<CallId> = ev
        .iter()
        .filter_map(|e| match e {
            Event::Pong { call, rtt } if *rtt < Duration::from_millis(100) => Some(*call),
            _ => None,
        })
        .collect();
    assert_eq!(pongs.iter().filter(|c| **c == id).count(), 2, "{ev:?}");
    assert_eq!(pongs.iter().filter(|c| **c == poke).count(), 1, "{ev:?}");
    let answers: Vec<u32> = c
        .received
        .iter()
        .filter_map(|b| full(b))
        .filter(|f| f.frame_type == FrameType::Iax)
        .map(|f| f.subclass)
        .filter(|s| [iax::PONG, iax::LAGRP].contains(s))
        .collect();
    assert_eq!(answers.len(), 3, "PONG, LAGRP and PONG: {answers:?}");
    assert!(answers.contains(&iax::LAGRP));
    hangup(&mut c, id);
}

/// `max_calls_per_ip = 2`: two calls from one address are up, the third gets a stateless
/// REJECT (cause 34) and leaves no state or CDR.
#[test]
fn calls_per_address_are_limited() {
    let mut c = Client::bind(Config::default());
    let r = start(
        "iax-limit",
        &[("client", c.addr)],
        "calltoken_optional = []\nmax_calls_per_ip = 2",
        vec![],
    );
    let a = call_answered(&mut c, r.iax, "9196", "client");
    let b = call_answered(&mut c, r.iax, "9196", "client");
    let third =
        c.ep.call(r.iax, &new_call("9196", "client"), Instant::now())
            .unwrap();
    let ev = c.pump_until(Duration::from_secs(5), |e| {
        matches!(e, Event::Hangup { .. } | Event::Answered { .. })
    });
    assert_eq!(
        ev.last(),
        Some(&Event::Hangup {
            call: third,
            reason: EndReason::Rejected {
                cause: Some("Too many calls".into()),
                code: Some(34)
            }
        }),
        "{ev:?}"
    );
    hangup(&mut c, a);
    hangup(&mut c, b);
    r.s.wait_cdrs(2);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(r.s.cdrs().len(), 2, "the refused call left no CDR");
}

/// A provider (`register = true`): strowger registers to it with the provider's call token and
/// MD5, refreshes before the granted 10 s run out, qualifies it with POKE (and logs a peer that
/// answers no POKE as unreachable), shows both and a peer registered to it in `show peers`,
/// and at shutdown releases the registration with REGREL.
#[test]
fn strowger_registers_to_a_provider_qualifies_peers_and_releases_at_shutdown() {
    let mut p = Client::bind(Config::default());
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap();
    let mut r = start(
        "iax-provider",
        &[("provider", p.addr), ("silent", silent_addr)],
        "calltoken_optional = []\nregister_refresh_s = 10",
        vec![],
    );
    // Answers a REGREQ (or REGREL) with MD5; returns when it was accepted.
    let answer = |p: &mut Client, release: bool| -> Instant {
        let ev = p.pump_until(Duration::from_secs(12), |e| {
            matches!(e, Event::RegisterRequest { .. })
        });
        let Some(Event::RegisterRequest {
            call,
            username,
            refresh,
            release: got,
            ..
        }) = ev.last().cloned()
        else {
            panic!("no registration request (release {release}): {ev:?}")
        };
        assert_eq!((username.as_str(), got), ("provider", release));
        if !release {
            assert_eq!(refresh, Some(10));
        }
        p.ep.authenticate(call, CLIENT_SECRET, Instant::now())
            .unwrap();
        let ev = p.pump_until(Duration::from_secs(3), |e| {
            matches!(e, Event::Authenticated { .. })
        });
        assert!(
            matches!(ev.last(), Some(Event::Authenticated { .. })),
            "strowger answers MD5 with the provider's secret: {ev:?}"
        );
        let granted = if release { 0 } else { 10 };
        p.ep.accept_registration(call, granted, Instant::now())
            .unwrap();
        p.pump(Duration::from_millis(50));
        Instant::now()
    };
    let first = answer(&mut p, false);
    let again = answer(&mut p, false);
    let gap = again - first;
    assert!(
        (Duration::from_secs(6)..=Duration::from_secs(9)).contains(&gap),
        "refreshed at about 3/4 of 10 s, after {gap:?}"
    );
    assert!(r
        .s
        .stderr()
        .contains("iax2: registered to provider for 10 s"));
    assert!(
        p.received
            .iter()
            .filter_map(|b| full(b))
            .any(|f| f.frame_type == FrameType::Iax && f.subclass == iax::POKE),
        "the provider is qualified with POKE"
    );
    let logged = |p: &mut Client, r: &Rig, line: &str| {
        wait_for(Duration::from_secs(15), || {
            p.pump(Duration::from_millis(100));
            r.s.stderr().contains(line).then_some(())
        })
        .unwrap_or_else(|| panic!("{line:?} not logged:\n{}", r.s.stderr()))
    };
    let provider = p.addr;
    logged(
        &mut p,
        &r,
        &format!("peer provider at {provider} is reachable"),
    );
    logged(
        &mut p,
        &r,
        &format!("peer silent at {silent_addr} is unreachable"),
    );
    // The provider registers to strowger too, as the dynamic peer `modem`; `show peers` lists
    // every peer with what the running switch knows of it.
    let reg =
        p.ep.register(r.iax, "modem", "modem-secret", 60, Instant::now());
    let ev = p.pump_until(Duration::from_secs(5), |e| {
        matches!(
            e,
            Event::Registered { .. } | Event::RegistrationFailed { .. }
        )
    });
    assert!(
        matches!(ev.last(), Some(Event::Registered { reg: r, .. }) if *r == reg),
        "{ev:?}"
    );
    let cfg = r._dir.path().join("strowger.toml");
    let data = r.s.data_dir();
    let out = common::switch::run_cli(
        &[
            "--config",
            cfg.to_str().unwrap(),
            "--data-dir",
            data.to_str().unwrap(),
            "show",
            "peers",
        ],
        r._dir.path(),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}");
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = |name: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no line for {name}:\n{text}"))
            .to_string()
    };
    assert!(text.contains("SIP users"), "{text}");
    let provider_line = line("provider");
    assert!(
        provider_line.contains(&provider.to_string())
            && provider_line.contains("reachable, ")
            && provider_line.contains("registers to it"),
        "{provider_line}"
    );
    assert!(line("silent").contains("UNREACHABLE"), "{text}");
    let modem = line("modem");
    assert!(
        modem.contains(&format!("{provider} (registered, expires in")),
        "{modem}"
    );
    // Stopping: the REGREL goes out (with the token handshake and MD5) before the exit.
    std::thread::scope(|sc| {
        let s = &mut r.s;
        let stopping = sc.spawn(move || s.stop());
        answer(&mut p, true);
        assert!(stopping.join().unwrap().success());
    });
    assert!(
        r.s.stderr()
            .contains("iax2: unregistered from provider (REGREL)"),
        "{}",
        r.s.stderr()
    );
}

/// The IAX2 client dials 2001, bridged to a SIPp uas that echoes RTP: the client's numbered
/// frames come back through SIP and IAX2 unchanged; the client's HANGUP ends the SIP leg.
#[test]
fn iax2_caller_reaches_a_sip_callee() {
    let dir = TempDir::new("iax-to-sip");
    let uas = Sipp::new(Scenario::Builtin("uas"))
        .calls(1, 1, 1)
        .rtp_echo()
        .spawn(None, dir.path());
    let mut c = Client::bind(Config::default());
    let r = start(
        "iax-to-sip",
        &[("client", c.addr)],
        TOKENS,
        vec![("bridge_target".into(), uas.addr.to_string())],
    );
    let id = call_answered(&mut c, r.iax, "2001", "client");
    let sent = numbered(&tone(700.0, 160 * 100, 8000.0));
    let back = voice(&c.send_frames(id, &sent, Duration::from_millis(500)));
    hangup(&mut c, id);
    let ours = back.iter().filter(|f| sent.contains(f)).count();
    println!("IAX2 -> SIP echo: {ours} of 100 frames back");
    assert!(
        ours >= 90,
        "{ours} of 100 frames came back through the SIP callee"
    );
    uas.finish().assert_ok(1);
    let cdr = r.s.wait_cdrs(1).remove(0);
    assert_eq!(cdr.str("exten"), "2001");
    assert!(cdr.str("bridged_to").contains("2001"), "{cdr:?}");
}

fn full(bytes: &[u8]) -> Option<FullFrame<'_>> {
    match Frame::parse(bytes) {
        Ok(Frame::Full(f)) => Some(f),
        _ => None,
    }
}

/// Call tokens are on by default: a NEW without a token, or with a forged one, gets only a
/// CALLTOKEN reply and no call; a client that does the handshake is answered; a wrong secret
/// is refused.
#[test]
fn call_tokens_and_authentication_are_enforced() {
    let mut c = Client::bind(Config::default());
    let r = start("iax-tokens", &[("client", c.addr)], TOKENS, vec![]);
    let probe = UdpSocket::bind("127.0.0.1:0").unwrap();
    probe
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    for token in [None, Some(&b"1234567890?forged-token"[..])] {
        let mut ies = IeBuilder::new();
        ies.u16(ie::VERSION, 2)
            .str(ie::CALLED_NUMBER, "9196")
            .str(ie::USERNAME, "client");
        ies.u32(ie::FORMAT, format::ULAW)
            .u32(ie::CAPABILITY, format::ULAW);
        if let Some(t) = token {
            ies.bytes(ie::CALLTOKEN, t);
        }
        // Padding so the request is large enough to be answered (no amplification).
        ies.bytes(ie::PADDING, &[0; 60]);
        let new = FullFrame {
            src_call: 77,
            dst_call: 0,
            retransmit: false,
            ts: 3,
            oseqno: 0,
            iseqno: 0,
            frame_type: FrameType::Iax,
            subclass: iax::NEW,
            payload: ies.as_bytes(),
        }
        .to_vec()
        .unwrap();
        probe.send_to(&new, r.iax).unwrap();
        let mut buf = [0u8; 1500];
        let mut replies = Vec::new();
        while let Ok((n, _)) = probe.recv_from(&mut buf) {
            replies.push(buf[..n].to_vec());
        }
        let subclasses: Vec<u32> = replies
            .iter()
            .filter_map(|b| full(b))
            .map(|f| f.subclass)
            .collect();
        assert_eq!(
            subclasses,
            vec![iax::CALLTOKEN],
            "NEW with token {token:?}: only a CALLTOKEN reply, no call state"
        );
    }
    // The real handshake (CALLTOKEN, NEW again with it, MD5) gets the call.
    let id = call_answered(&mut c, r.iax, "9196", "client");
    hangup(&mut c, id);
    assert!(
        c.received
            .iter()
            .filter_map(|b| full(b))
            .any(|f| f.subclass == iax::CALLTOKEN && f.frame_type == FrameType::Iax),
        "strowger asked this client for a call token too"
    );
    // A wrong secret.
    let mut bad = new_call("9196", "client");
    bad.secret = Some("wrong".into());
    c.ep.call(r.iax, &bad, Instant::now()).unwrap();
    let ev = c.pump_until(Duration::from_secs(5), |e| {
        matches!(e, Event::Hangup { .. })
    });
    assert!(
        matches!(
            ev.last(),
            Some(Event::Hangup {
                reason: EndReason::Rejected { .. },
                ..
            })
        ),
        "a wrong secret is rejected: {ev:?}"
    );
    // Only the good call left a CDR.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(r.s.cdrs().len(), 1, "{:?}", r.s.cdrs());
}

/// strowger's ACCEPT is lost once: strowger sends it again (retransmit bit set, on the
/// client's VNAK or its timer) and the call goes on to be answered.
#[test]
fn lost_accept_is_retransmitted() {
    let mut c = Client::bind(Config::default());
    let r = start("iax-loss", &[("client", c.addr)], TOKENS, vec![]);
    let mut dropped = 0;
    c.drop_in = Some(Box::new(move |b| {
        let accept =
            full(b).is_some_and(|f| f.frame_type == FrameType::Iax && f.subclass == iax::ACCEPT);
        if accept && dropped == 0 {
            dropped += 1;
            return true;
        }
        false
    }));
    let t0 = Instant::now();
    let id = call_answered(&mut c, r.iax, "9196", "client");
    let again = c
        .received
        .iter()
        .filter_map(|b| full(b))
        .find(|f| f.frame_type == FrameType::Iax && f.subclass == iax::ACCEPT)
        .expect("ACCEPT arrived again");
    assert!(
        again.retransmit,
        "the second ACCEPT carries the retransmission bit"
    );
    // The ANSWER behind it arrives out of order, so the client's VNAK asks for it at once.
    println!("ACCEPT retransmitted; answered after {:?}", t0.elapsed());
    hangup(&mut c, id);
    r.s.wait_cdrs(1);
}

/// A peer configured with `trunk = true`: a SIP caller's audio reaches it in meta trunk frames,
/// and its own trunk frames reach the SIP caller.
#[test]
fn trunk_peer_exchanges_meta_trunk_frames() {
    let mut c = Client::bind(Config {
        trunk: true,
        ..Config::default()
    });
    let r = start("iax-trunk", &[("trunk", c.addr)], TOKENS, vec![]);
    let mut rtp = Rtp::bind();
    let mut uac = Uac::new(r.s.sip, "4001");
    uac.send_invite(&sdp(rtp.port, &[PCMU], "sendrecv"));
    let ev = c.pump_until(Duration::from_secs(5), |e| {
        matches!(e, Event::Incoming { .. })
    });
    let Some(Event::Incoming { call, .. }) = ev.last().cloned() else {
        panic!("no NEW: {ev:?}");
    };
    c.ep.accept(call, format::ULAW, Instant::now()).unwrap();
    c.ep.answer(call, Instant::now()).unwrap();
    c.pump(Duration::from_millis(100));
    let ok = uac.final_response("INVITE", Duration::from_secs(5));
    assert_eq!(ok.status(), Some(200), "{ok:?}");
    uac.invite_answered(&ok);
    rtp.remote = Some(sdp_audio(&ok.body).0);
    uac.ack("");
    let sip_frames = frames(&tone(440.0, 160 * 50, 8000.0));
    let iax_frames = frames(&tone(1000.0, 160 * 50, 8000.0));
    let mut heard_sip: Vec<RtpPkt> = Vec::new();
    let mut heard_iax = Vec::new();
    let start = Instant::now();
    for i in 0..50 {
        rtp.send(0, i == 0, &sip_frames[i], 160);
        c.ep.send_voice(call, format::ULAW, &iax_frames[i], Instant::now())
            .unwrap();
        let due = start + Duration::from_millis(20 * (i as u64 + 1));
        heard_iax.extend(voice(
            &c.pump(due.saturating_duration_since(Instant::now()) / 2),
        ));
        heard_sip.extend(rtp.recv_for(due.saturating_duration_since(Instant::now())));
    }
    heard_iax.extend(voice(&c.pump(Duration::from_millis(200))));
    heard_sip.extend(rtp.recv_for(Duration::from_millis(100)));
    let trunks_in = c
        .received
        .iter()
        .filter(|b| matches!(Frame::parse(b), Ok(Frame::Trunk(_))))
        .count();
    let trunks_out = c
        .wire
        .iter()
        .filter(|(from, _, b)| *from == c.addr && matches!(Frame::parse(b), Ok(Frame::Trunk(_))))
        .count();
    println!("trunk frames: {trunks_in} from strowger, {trunks_out} to it");
    // One trunk frame per 20 ms interval, carrying whatever voice is queued.
    assert!(trunks_in >= 20, "strowger sent {trunks_in} trunk frames");
    assert!(
        trunks_out >= 20,
        "the client sent {trunks_out} trunk frames"
    );
    assert!(
        heard_iax.len() >= 40,
        "{} voice frames reached the trunk peer",
        heard_iax.len()
    );
    let iax_pcm: Vec<i16> = heard_iax.iter().flat_map(|f| ulaw_decode_all(f)).collect();
    let sip_pcm: Vec<i16> = heard_sip
        .iter()
        .flat_map(|p| ulaw_decode_all(&p.payload))
        .collect();
    assert!(
        (dominant_freq(&iax_pcm) - 440.0).abs() < 30.0,
        "trunk peer hears the SIP tone"
    );
    assert!(
        (dominant_freq(&sip_pcm) - 1000.0).abs() < 30.0,
        "SIP caller hears the trunk tone"
    );
    assert_eq!(uac.bye().status(), Some(200));
    r.s.wait_cdrs(1);
}

/// Wireshark's IAX2 dissector reads a call through strowger (token handshake, MD5, voice in
/// full, mini and trunk frames, DTMF, ping, hangup) with no malformed packet or error.
#[test]
fn tshark_dissects_strowgers_iax2_traffic() {
    if std::process::Command::new("tshark")
        .arg("--version")
        .output()
        .is_err()
    {
        panic!("tshark is not installed: run scripts/setup.sh");
    }
    let mut c = Client::bind(Config {
        trunk: true,
        ..Config::default()
    });
    let r = start("iax-tshark", &[("trunk", c.addr)], TOKENS, vec![]);
    let id = call_answered(&mut c, r.iax, "9196", "trunk");
    let sent = numbered(&tone(1000.0, 160 * 20, 8000.0));
    let back = voice(&c.send_frames(id, &sent, Duration::from_millis(200)));
    assert!(
        back.len() >= 15,
        "echo over trunk frames: {} frames",
        back.len()
    );
    c.ep.send_dtmf(id, '5', true, Instant::now()).unwrap();
    c.ep.send_dtmf(id, '5', false, Instant::now()).unwrap();
    c.ep.ping(id, Instant::now()).unwrap();
    let ev = c.pump_until(Duration::from_secs(2), |e| matches!(e, Event::Pong { .. }));
    assert!(
        matches!(ev.last(), Some(Event::Pong { .. })),
        "PONG from strowger: {ev:?}"
    );
    hangup(&mut c, id);
    let path = r._dir.path().join("iax2.pcap");
    std::fs::write(&path, iax2::pcap::pcap(&c.wire)).unwrap();
    let out = std::process::Command::new("tshark")
        .arg("-n")
        .arg("-r")
        .arg(&path)
        .arg("-V")
        .arg("-d")
        .arg(format!("udp.port=={},iax2", r.iax.port()))
        .arg("-d")
        .arg(format!("udp.port=={},iax2", c.addr.port()))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let decoded = text.matches("Inter-Asterisk eXchange v2").count();
    assert_eq!(decoded, c.wire.len(), "every datagram dissected as IAX2");
    for bad in [
        "Malformed",
        "malformed",
        "Dissector bug",
        "Expert Info (Error",
        "Expert Info (Warning",
    ] {
        assert!(
            !text.contains(bad),
            "tshark reports {bad:?} in {}",
            path.display()
        );
    }
    for want in [
        "CALLTOKEN",
        "AUTHREQ",
        "ACCEPT",
        "ANSWER",
        "Trunk",
        "HANGUP",
        "PONG",
    ] {
        assert!(text.contains(want), "capture shows {want}");
    }
}

// ------------------------------------------------------------------ iaxmodem, a real peer

/// iaxmodem and the pty it makes (the modem's DTE side), killed on drop.
struct Modem {
    child: std::process::Child,
    tty: std::fs::File,
    log: PathBuf,
}

impl Modem {
    /// Starts iaxmodem registering to `server` as `modem`, and opens its tty in raw mode.
    fn start(dir: &Path, server: SocketAddr) -> Modem {
        assert!(
            std::process::Command::new("iaxmodem")
                .arg("-V")
                .output()
                .is_ok(),
            "iaxmodem is not installed: run scripts/setup.sh"
        );
        let device = dir.join("ttyIAX");
        let port = free_port();
        let cfg = dir.join("modem.cfg");
        std::fs::write(
            &cfg,
            format!(
                "device {}\nowner root:root\nmode 660\nport {port}\nrefresh 60\nserver {server}\n\
                 peername modem\nsecret modem-secret\ncidname Modem\ncidnumber 6001\ncodec ulaw\n",
                device.display()
            ),
        )
        .unwrap();
        // iaxmodem reads /etc/iaxmodem/NAME; a relative path from there reaches our file.
        let name = format!("../..{}", cfg.display());
        let log = dir.join("iaxmodem.log");
        let child = std::process::Command::new("iaxmodem")
            .arg(name)
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::create(dir.join("iaxmodem.err")).unwrap())
            .spawn()
            .unwrap();
        wait_for(Duration::from_secs(5), || device.exists().then_some(()))
            .expect("iaxmodem made its tty");
        let tty = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&device)
            .unwrap();
        raw(&tty);
        Modem { child, tty, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn send(&mut self, cmd: &str) {
        use std::io::Write;
        self.tty.write_all(cmd.as_bytes()).unwrap();
    }

    /// What the modem writes to its DTE until `want` appears or `dur` passes.
    fn read_until(&mut self, want: &str, dur: Duration) -> String {
        use std::io::Read;
        let end = Instant::now() + dur;
        let mut out = String::new();
        let mut buf = [0u8; 256];
        while Instant::now() < end && !out.contains(want) {
            let mut fds = libc::pollfd {
                fd: std::os::fd::AsRawFd::as_raw_fd(&self.tty),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd for the duration of the call.
            if unsafe { libc::poll(&mut fds, 1, 100) } > 0 {
                if let Ok(n) = self.tty.read(&mut buf) {
                    out.push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            }
        }
        out
    }
}

impl Drop for Modem {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Raw mode, so the modem's replies are not echoed back into it as commands.
fn raw(tty: &std::fs::File) {
    let fd = std::os::fd::AsRawFd::as_raw_fd(tty);
    // SAFETY: termios is plain data, filled by tcgetattr on an open descriptor.
    unsafe {
        let mut t: libc::termios = std::mem::zeroed();
        assert_eq!(libc::tcgetattr(fd, &mut t), 0);
        libc::cfmakeraw(&mut t);
        assert_eq!(libc::tcsetattr(fd, libc::TCSANOW, &t), 0);
    }
}

fn as_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("iaxmodem runs only as root: skipping");
    }
    root
}

/// iaxmodem (libiax2, which predates call tokens) registers to strowger with MD5; a SIP call to
/// 5000 reaches it at its registered address, rings its tty (RING), and when the DTE answers
/// (ATA) the SIP caller is answered and hears the modem's answer tone.
#[test]
fn iaxmodem_registers_and_answers_a_sip_call() {
    if !as_root() {
        return;
    }
    let r = start("iaxmodem-in", &[], LEGACY_OK, vec![]);
    let dir = TempDir::new("iaxmodem-in-dev");
    let mut m = Modem::start(dir.path(), r.iax);
    m.send("ATZ\r");
    assert!(m.read_until("OK", Duration::from_secs(3)).contains("OK"));
    wait_for(Duration::from_secs(10), || {
        r.s.stderr()
            .contains("iax2: peer modem registered from 127.0.0.1:")
            .then_some(())
    })
    .unwrap_or_else(|| panic!("iaxmodem did not register:\n{}", m.log()));
    // iaxmodem refuses calls (busy) for 5 s after it starts or hangs up.
    std::thread::sleep(Duration::from_secs(6));
    let mut rtp = Rtp::bind();
    let mut uac = Uac::new(r.s.sip, "5000");
    uac.send_invite(&sdp(rtp.port, &[PCMU], "sendrecv"));
    let rang = m.read_until("RING", Duration::from_secs(8));
    assert!(
        rang.contains("RING"),
        "the modem rings: {rang:?}\n{}",
        m.log()
    );
    assert_eq!(provisional(&uac), Some(180));
    m.send("AT+FCLASS=1\rATA\r");
    let ok = uac.final_response("INVITE", Duration::from_secs(10));
    assert_eq!(
        ok.status(),
        Some(200),
        "answered when the modem went off hook: {ok:?}"
    );
    uac.invite_answered(&ok);
    rtp.remote = Some(sdp_audio(&ok.body).0);
    uac.ack("");
    // Send silence so the modem hears a line, and listen to what it sends.
    let silence = vec![0xffu8; 160];
    let mut heard = Vec::new();
    for i in 0..100 {
        rtp.send(0, i == 0, &silence, 160);
        heard.extend(rtp.recv_for(Duration::from_millis(20)));
    }
    let pcm: Vec<i16> = heard
        .iter()
        .flat_map(|p| ulaw_decode_all(&p.payload))
        .collect();
    let f = dominant_freq(&pcm);
    println!(
        "iaxmodem answered; {} samples heard at {f:.0} Hz",
        pcm.len()
    );
    assert!(
        pcm.len() >= 160 * 50,
        "audio from the modem: {} samples",
        pcm.len()
    );
    assert!(
        (f - 2100.0).abs() < 60.0,
        "the modem's 2100 Hz answer tone, heard {f:.0} Hz"
    );
    assert_eq!(uac.bye().status(), Some(200));
    let cdr = r.s.wait_cdrs(1).remove(0);
    cdr.assert_answered("5000");
    assert_eq!(cdr.str("bridged_to"), "iax2/modem/5000");
}

/// iaxmodem dials 5001: its NEW (no call token: libiax2 predates them) enters the dialplan,
/// which answers, sends a tone and hangs up; the modem's audio was received (CDR packets).
#[test]
fn iaxmodem_dials_strowger() {
    if !as_root() {
        return;
    }
    let r = start("iaxmodem-out", &[], LEGACY_OK, vec![]);
    let dir = TempDir::new("iaxmodem-out-dev");
    let mut m = Modem::start(dir.path(), r.iax);
    m.send("ATZ\r");
    assert!(m.read_until("OK", Duration::from_secs(3)).contains("OK"));
    wait_for(Duration::from_secs(10), || {
        r.s.stderr()
            .contains("iax2: peer modem registered from 127.0.0.1:")
            .then_some(())
    })
    .unwrap_or_else(|| panic!("iaxmodem did not register:\n{}", m.log()));
    // 5001 answers, plays ringback for 3 s and hangs up.
    m.send("ATD5001\r");
    let said = m.read_until("NO CARRIER", Duration::from_secs(15));
    println!("modem: {said:?}");
    assert!(
        said.contains("NO CARRIER"),
        "strowger ended the modem's call: {said:?}"
    );
    let cdr = r.s.wait_cdrs(1).remove(0);
    println!("{cdr:?}");
    assert_eq!(cdr.str("exten"), "5001");
    assert!(cdr.str("from").contains("iax2:6001@"), "{cdr:?}");
    assert!(!cdr.is_null("answer"), "answered: {cdr:?}");
    assert_eq!(cdr.str("hangup_side"), "switch", "{cdr:?}");
    assert!(
        cdr.num("packets_received") >= 100.0,
        "modem audio received: {cdr:?}"
    );
    assert!(cdr.num("packets_sent") >= 100.0, "tone sent: {cdr:?}");
}

/// The SIP callee (SIPp, tests/sipp/transfer_uas_refer.xml) of an IAX2 caller transfers it by
/// REFER to 9196: the IAX2 caller, the transferee, hears its own frames come back from the echo.
#[test]
fn an_iax2_caller_is_transferred_by_its_sip_callee() {
    let dir = TempDir::new("iax-transferee");
    let callee = Sipp::new(Scenario::File("transfer_uas_refer.xml"))
        .args(&["-key", "target", "9196", "-aa"])
        .spawn(None, dir.path());
    let mut c = Client::bind(Config::default());
    let r = start(
        "iax-transferee",
        &[("client", c.addr)],
        TOKENS,
        vec![("bridge_target".into(), callee.addr.to_string())],
    );
    let id = call_answered(&mut c, r.iax, "2001", "client");
    // The callee refers after 0.5 s and hangs up once it hears 200 in the NOTIFY.
    c.pump(Duration::from_millis(1500));
    callee.finish().assert_ok(1);
    let sent = numbered(&tone(700.0, 160 * 100, 8000.0));
    let back = voice(&c.send_frames(id, &sent, Duration::from_millis(500)));
    hangup(&mut c, id);
    let ours = back.iter().filter(|f| sent.contains(f)).count();
    assert!(ours >= 90, "{ours} of 100 frames echoed after the transfer");
    let cdr = r.s.wait_cdrs(1).remove(0);
    assert_eq!(cdr.str("transferred_to"), "9196", "{cdr:?}");
    assert_eq!(cdr.str("hangup_side"), "caller", "{cdr:?}");
}

/// A SIP caller (SIPp's uac, echoing RTP) is transferred by its SIP callee to 3001, the IAX2
/// peer `client`: strowger dials the peer, and once it answers the peer's frames reach the SIP
/// caller and come back.
#[test]
fn a_sip_caller_is_transferred_to_an_iax2_peer() {
    let dir = TempDir::new("iax-target");
    let callee = Sipp::new(Scenario::File("transfer_uas_refer.xml"))
        .args(&["-key", "target", "3001", "-aa"])
        .spawn(None, dir.path());
    let mut c = Client::bind(Config::default());
    let r = start(
        "iax-target",
        &[("client", c.addr)],
        TOKENS,
        vec![("bridge_target".into(), callee.addr.to_string())],
    );
    let caller = Sipp::new(Scenario::Builtin("uac"))
        .service("2001")
        .duration_ms(5000)
        .rtp_echo()
        .spawn(Some(r.s.sip), dir.path());
    let ev = c.pump_until(Duration::from_secs(8), |e| {
        matches!(e, Event::Incoming { .. })
    });
    let Some(Event::Incoming { call, info, .. }) = ev.last().cloned() else {
        panic!("no NEW from strowger after the transfer: {ev:?}");
    };
    assert_eq!(info.called_number.as_deref(), Some("3001"));
    c.ep.authenticate(call, CLIENT_SECRET, Instant::now())
        .unwrap();
    c.pump_until(Duration::from_secs(3), |e| {
        matches!(e, Event::Authenticated { .. })
    });
    c.ep.accept(call, format::ULAW, Instant::now()).unwrap();
    c.ep.answer(call, Instant::now()).unwrap();
    c.pump(Duration::from_millis(300));
    let sent = numbered(&tone(700.0, 160 * 100, 8000.0));
    let back = voice(&c.send_frames(call, &sent, Duration::from_millis(500)));
    let ours = back.iter().filter(|f| sent.contains(f)).count();
    assert!(
        ours >= 90,
        "{ours} of 100 frames came back through the SIP caller"
    );
    callee.finish().assert_ok(1);
    caller.finish().assert_ok(1);
    let cdr = r.s.wait_cdrs(1).remove(0);
    assert_eq!(cdr.str("transferred_to"), "3001", "{cdr:?}");
    assert_eq!(cdr.str("bridged_to"), "iax2/client/3001", "{cdr:?}");
}
