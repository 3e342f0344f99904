//! Two `Endpoint`s talking through an in-memory network with injected time and optional loss.

use iax2::frame::{iax, FrameType, FullFrame};
use iax2::ie::{self, IeBuilder, Ies};
use iax2::{format, CallId, Config, EndReason, Endpoint, Event, Frame, NewCall};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

type Filter = Box<dyn FnMut(bool, &[u8]) -> bool>;

struct Net {
    a: Endpoint,
    b: Endpoint,
    a_addr: SocketAddr,
    b_addr: SocketAddr,
    now: Instant,
    /// (from a?, bytes) -> deliver?
    keep: Filter,
    /// Every datagram put on the wire: (from a?, bytes).
    wire: Vec<(bool, Vec<u8>)>,
    ev_a: Vec<Event>,
    ev_b: Vec<Event>,
}

impl Net {
    fn new(cfg_a: Config, cfg_b: Config) -> Net {
        let now = Instant::now();
        Net {
            a: Endpoint::with_seed(cfg_a, [1; 16], now),
            b: Endpoint::with_seed(cfg_b, [2; 16], now),
            a_addr: "192.0.2.1:4569".parse().unwrap(),
            b_addr: "198.51.100.2:4569".parse().unwrap(),
            now,
            keep: Box::new(|_, _| true),
            wire: Vec::new(),
            ev_a: Vec::new(),
            ev_b: Vec::new(),
        }
    }

    /// Delivers everything queued (and what it provokes) at the current time.
    fn pump(&mut self) {
        loop {
            let mut moved = false;
            while let Some(t) = self.a.poll_transmit() {
                moved = true;
                assert_eq!(t.to, self.b_addr);
                self.wire.push((true, t.bytes.clone()));
                if (self.keep)(true, &t.bytes) {
                    self.b.handle(self.a_addr, &t.bytes, self.now);
                }
            }
            while let Some(t) = self.b.poll_transmit() {
                moved = true;
                assert_eq!(t.to, self.a_addr);
                self.wire.push((false, t.bytes.clone()));
                if (self.keep)(false, &t.bytes) {
                    self.a.handle(self.b_addr, &t.bytes, self.now);
                }
            }
            while let Some(e) = self.a.poll_event() {
                self.ev_a.push(e);
            }
            while let Some(e) = self.b.poll_event() {
                self.ev_b.push(e);
            }
            if !moved {
                break;
            }
        }
    }

    /// Advances time by `d` in 10 ms steps, firing timers and delivering.
    fn run(&mut self, d: Duration) {
        let end = self.now + d;
        self.pump();
        while self.now < end {
            self.now += Duration::from_millis(10);
            self.a.handle_timeout(self.now);
            self.b.handle_timeout(self.now);
            self.pump();
        }
    }

    fn take_b(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.ev_b)
    }

    fn take_a(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.ev_a)
    }
}

fn new_call(secret: Option<&str>) -> NewCall {
    NewCall {
        called_number: "2000".into(),
        calling_number: Some("1000".into()),
        calling_name: Some("Alice".into()),
        username: Some("alice".into()),
        secret: secret.map(str::to_string),
        format: format::ULAW,
        capability: format::ULAW | format::ALAW,
        ..Default::default()
    }
}

fn incoming(events: &[Event]) -> Option<CallId> {
    events.iter().find_map(|e| match e {
        Event::Incoming { call, .. } => Some(*call),
        _ => None,
    })
}

/// Sets up an answered call a -> b (b challenges with MD5) and returns (a's id, b's id).
fn answered_call(net: &mut Net) -> (CallId, CallId) {
    let now = net.now;
    let ca = net
        .a
        .call(net.b_addr, &new_call(Some("s3cret")), now)
        .unwrap();
    net.run(Duration::from_millis(20));
    let evb = net.take_b();
    let cb = incoming(&evb).expect("b sees the NEW once the token handshake is done");
    let now = net.now;
    net.b.authenticate(cb, "s3cret", now).unwrap();
    net.run(Duration::from_millis(20));
    assert!(net.take_b().contains(&Event::Authenticated { call: cb }));
    let now = net.now;
    net.b.accept(cb, format::ULAW, now).unwrap();
    net.b.ringing(cb, now).unwrap();
    net.run(Duration::from_millis(20));
    let now = net.now;
    net.b.answer(cb, now).unwrap();
    net.run(Duration::from_millis(20));
    let eva = net.take_a();
    assert!(eva.contains(&Event::Accepted {
        call: ca,
        format: format::ULAW
    }));
    assert!(eva.contains(&Event::Ringing { call: ca }));
    assert!(eva.contains(&Event::Answered { call: ca }));
    (ca, cb)
}

fn full_frames(wire: &[(bool, Vec<u8>)], from_a: bool) -> Vec<FullFrame<'_>> {
    wire.iter()
        .filter(|(a, _)| *a == from_a)
        .filter_map(|(_, b)| match Frame::parse(b) {
            Ok(Frame::Full(f)) => Some(f),
            _ => None,
        })
        .collect()
}

#[test]
fn call_with_token_md5_auth_ringing_answer_voice_dtmf_hangup() {
    let mut net = Net::new(Config::default(), Config::default());
    let (ca, cb) = answered_call(&mut net);
    // The token handshake happened: NEW, CALLTOKEN, NEW with the token.
    let b_full = full_frames(&net.wire, false);
    assert!(b_full[0].is_iax(iax::CALLTOKEN));
    let a_full = full_frames(&net.wire, true);
    let news: Vec<_> = a_full.iter().filter(|f| f.is_iax(iax::NEW)).collect();
    assert_eq!(news.len(), 2);
    let tok = Ies::parse(news[1].payload)
        .unwrap()
        .get(ie::CALLTOKEN)
        .unwrap();
    assert_eq!(tok.len(), 24);
    assert!(a_full.iter().any(|f| f.is_iax(iax::AUTHREP)));

    // Voice: the first frame full, the rest mini; the peer sees every one, in order.
    let start = net.wire.len();
    for i in 0..5u8 {
        let now = net.now;
        net.a.send_voice(ca, format::ULAW, &[i; 160], now).unwrap();
        net.run(Duration::from_millis(20));
    }
    let voice: Vec<_> = net
        .take_b()
        .into_iter()
        .filter_map(|e| match e {
            Event::Voice {
                call, data, format, ..
            } => Some((call, data[0], format)),
            _ => None,
        })
        .collect();
    assert_eq!(
        voice,
        (0..5u8).map(|i| (cb, i, format::ULAW)).collect::<Vec<_>>()
    );
    let minis = net.wire[start..]
        .iter()
        .filter(|(a, b)| *a && matches!(Frame::parse(b), Ok(Frame::Mini(_))))
        .count();
    assert_eq!(minis, 4);

    // DTMF both ways.
    let now = net.now;
    net.a.send_dtmf(ca, '5', true, now).unwrap();
    net.a.send_dtmf(ca, '5', false, now).unwrap();
    net.b.send_dtmf(cb, '#', false, now).unwrap();
    net.run(Duration::from_millis(20));
    let evb = net.take_b();
    assert!(evb.contains(&Event::Dtmf {
        call: cb,
        digit: '5',
        begin: true
    }));
    assert!(evb.contains(&Event::Dtmf {
        call: cb,
        digit: '5',
        begin: false
    }));
    assert!(net.take_a().contains(&Event::Dtmf {
        call: ca,
        digit: '#',
        begin: false
    }));

    // PING/PONG and LAGRQ/LAGRP are answered.
    let now = net.now;
    net.a.ping(ca, now).unwrap();
    net.run(Duration::from_millis(20));
    assert!(net
        .take_a()
        .iter()
        .any(|e| matches!(e, Event::Pong { call, .. } if *call == ca)));

    // Hangup from a reaches b with the cause; both free the call after the linger.
    let now = net.now;
    net.a.hangup(ca, 16, now).unwrap();
    net.run(Duration::from_millis(20));
    assert!(net.take_b().contains(&Event::Hangup {
        call: cb,
        reason: EndReason::Hangup {
            cause: Some("Normal Clearing".into()),
            code: Some(16)
        }
    }));
    assert_eq!(
        net.a.send_voice(ca, format::ULAW, &[0], net.now),
        Err(iax2::Error::UnknownCall)
    );
    net.run(Duration::from_secs(5));
    assert_eq!(net.a.call_count(), 0);
    assert_eq!(net.b.call_count(), 0);
    assert!(net.a.poll_timeout().is_none() || net.a.call_count() == 0);
}

#[test]
fn voice_timestamp_wrap_sends_a_full_frame_and_mini_timestamps_unwrap() {
    let mut net = Net::new(Config::default(), Config::default());
    let (ca, cb) = answered_call(&mut net);
    let base = net.now;
    let mut seen = Vec::new();
    // Frames around the 65,536 ms wrap of the mini timestamp.
    for ms in [1000u64, 65_000, 65_520, 65_540, 65_560, 131_100] {
        net.now = base + Duration::from_millis(ms);
        let now = net.now;
        net.a.send_voice(ca, format::ULAW, &[1; 10], now).unwrap();
        // Keep the call alive: deliver without running retransmission timers across the gap.
        net.pump();
        for e in net.take_b() {
            if let Event::Voice { call, ts, .. } = e {
                assert_eq!(call, cb);
                seen.push(ts);
            }
        }
    }
    assert_eq!(seen.len(), 6);
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    assert!(seen[3] >= 65_536);
    let fulls = full_frames(&net.wire, true)
        .iter()
        .filter(|f| f.frame_type == FrameType::Voice)
        .count();
    assert_eq!(
        fulls, 3,
        "first frame and each 16-bit wrap go as full voice frames"
    );
}

#[test]
fn lost_frames_are_retransmitted_and_duplicates_acked_and_dropped() {
    let mut net = Net::new(Config::default(), Config::default());
    // Lose a third of the datagrams in both directions (seeded, so the test is repeatable).
    let mut x = 0x2545_f491_4f6c_dd1du64;
    net.keep = Box::new(move |_, _| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % 3 >= 1
    });
    let now = net.now;
    let ca = net.a.call(net.b_addr, &new_call(None), now).unwrap();
    net.run(Duration::from_secs(3));
    let cb = incoming(&net.take_b()).expect("NEW got through");
    let now = net.now;
    net.b.accept(cb, format::ULAW, now).unwrap();
    net.b.answer(cb, now).unwrap();
    net.run(Duration::from_secs(3));
    let eva = net.take_a();
    assert_eq!(
        eva.iter()
            .filter(|e| matches!(e, Event::Accepted { .. }))
            .count(),
        1,
        "delivered once despite retransmissions: {eva:?}"
    );
    assert_eq!(
        eva.iter()
            .filter(|e| matches!(e, Event::Answered { .. }))
            .count(),
        1
    );
    assert!(net.a.stats().retransmits + net.b.stats().retransmits > 0);
    let retransmitted = net
        .wire
        .iter()
        .filter_map(|(_, b)| match Frame::parse(b) {
            Ok(Frame::Full(f)) => Some(f.retransmit),
            _ => None,
        })
        .filter(|r| *r)
        .count();
    assert!(retransmitted > 0);
    // The signalling still completes in order after loss.
    net.keep = Box::new(|_, _| true);
    let now = net.now;
    net.a.hangup(ca, 16, now).unwrap();
    net.run(Duration::from_secs(1));
    assert!(net
        .take_b()
        .iter()
        .any(|e| matches!(e, Event::Hangup { call, .. } if *call == cb)));
}

#[test]
fn unanswered_frames_give_up_with_a_timeout_hangup() {
    let mut net = Net::new(Config::default(), Config::default());
    let (ca, cb) = answered_call(&mut net);
    net.keep = Box::new(|from_a, _| !from_a); // a's frames are all lost from now on
    let now = net.now;
    net.a.send_dtmf(ca, '1', false, now).unwrap();
    let sent_at = net.now;
    net.run(Duration::from_secs(20));
    let gone = net.ev_a.iter().any(|e| {
        *e == Event::Hangup {
            call: ca,
            reason: EndReason::Timeout,
        }
    });
    assert!(gone, "{:?}", net.ev_a);
    // 0.5 + 1 + 2 + 4 + 4 s of backoff before giving up.
    assert!(net.now - sent_at >= Duration::from_millis(11_500));
    assert_eq!(net.a.call_count(), 0);
    let _ = cb;
}

fn raw_new(src_call: u16, ies: &[u8]) -> Vec<u8> {
    FullFrame {
        src_call,
        dst_call: 0,
        retransmit: false,
        ts: 3,
        oseqno: 0,
        iseqno: 0,
        frame_type: FrameType::Iax,
        subclass: iax::NEW,
        payload: ies,
    }
    .to_vec()
    .unwrap()
}

fn typical_new_ies(token: Option<&[u8]>) -> Vec<u8> {
    let mut b = IeBuilder::new();
    b.u16(ie::VERSION, 2)
        .str(ie::CALLED_NUMBER, "2000")
        .str(ie::CALLING_NUMBER, "1000")
        .str(ie::USERNAME, "alice")
        .u32(ie::FORMAT, format::ULAW)
        .u32(ie::CAPABILITY, format::ULAW);
    b.bytes(ie::CALLTOKEN, token.unwrap_or(&[]));
    b.finish()
}

#[test]
fn new_without_valid_token_gets_small_calltoken_reply_and_no_state() {
    let now = Instant::now();
    let mut b = Endpoint::with_seed(Config::default(), [9; 16], now);
    let peer: SocketAddr = "203.0.113.5:4569".parse().unwrap();
    let req = raw_new(100, &typical_new_ies(None));
    b.handle(peer, &req, now);
    let reply = b.poll_transmit().expect("CALLTOKEN reply");
    assert!(
        reply.bytes.len() <= req.len(),
        "{} > {}",
        reply.bytes.len(),
        req.len()
    );
    let Ok(Frame::Full(f)) = Frame::parse(&reply.bytes) else {
        panic!()
    };
    assert!(f.is_iax(iax::CALLTOKEN));
    assert_eq!(f.dst_call, 100);
    let token = Ies::parse(f.payload)
        .unwrap()
        .get(ie::CALLTOKEN)
        .unwrap()
        .to_vec();
    assert_eq!(b.call_count(), 0);
    assert!(b.poll_event().is_none());
    assert!(b.poll_timeout().is_none());

    // A request smaller than the reply would be gets nothing (no amplification).
    b.handle(peer, &raw_new(101, &[]), now);
    assert!(b.poll_transmit().is_none());
    assert_eq!(b.stats().token_replies_suppressed, 1);

    // The token from another address, a forged one, and an expired one are refused.
    let other: SocketAddr = "203.0.113.6:4569".parse().unwrap();
    b.handle(other, &raw_new(102, &typical_new_ies(Some(&token))), now);
    let mut forged = token.clone();
    forged[23] ^= 1;
    b.handle(peer, &raw_new(103, &typical_new_ies(Some(&forged))), now);
    b.handle(
        peer,
        &raw_new(104, &typical_new_ies(Some(&token))),
        now + Duration::from_secs(12),
    );
    assert_eq!(b.call_count(), 0);
    let replies: Vec<_> = std::iter::from_fn(|| b.poll_transmit()).collect();
    assert_eq!(replies.len(), 3, "each refused NEW gets a fresh CALLTOKEN");

    // The right token within its lifetime sets up the call.
    b.handle(
        peer,
        &raw_new(105, &typical_new_ies(Some(&token))),
        now + Duration::from_secs(5),
    );
    assert_eq!(b.call_count(), 1);
    assert!(
        matches!(b.poll_event(), Some(Event::Incoming { peer: p, ref info, .. })
        if p == peer && info.called_number.as_deref() == Some("2000")
            && info.username.as_deref() == Some("alice"))
    );
}

#[test]
fn per_address_call_limit_rejects_statelessly() {
    let now = Instant::now();
    let cfg = Config {
        call_tokens: false,
        max_calls_per_ip: 2,
        ..Config::default()
    };
    let mut b = Endpoint::with_seed(cfg, [9; 16], now);
    for (i, port) in [(1u16, 4569u16), (2, 4570), (3, 4571)] {
        let peer = SocketAddr::new("203.0.113.5".parse().unwrap(), port);
        b.handle(peer, &raw_new(i, &typical_new_ies(None)), now);
    }
    assert_eq!(b.call_count(), 2);
    let rejects: Vec<_> = std::iter::from_fn(|| b.poll_transmit())
        .filter(|t| matches!(Frame::parse(&t.bytes), Ok(Frame::Full(f)) if f.is_iax(iax::REJECT)))
        .collect();
    assert_eq!(rejects.len(), 1);
    assert_eq!(b.stats().over_limit, 1);
    // Another address is not affected.
    b.handle(
        "203.0.113.9:4569".parse().unwrap(),
        &raw_new(4, &typical_new_ies(None)),
        now,
    );
    assert_eq!(b.call_count(), 3);
}

#[test]
fn thirty_thousand_calls_each_found_by_local_and_by_remote_number() {
    let now = Instant::now();
    let cfg = Config {
        call_tokens: false,
        max_calls_per_ip: 100_000,
        ..Config::default()
    };
    let mut b = Endpoint::with_seed(cfg, [5; 16], now);
    let ies = typical_new_ies(None);
    let peer_of = |i: u32| -> SocketAddr {
        SocketAddr::new("10.0.0.1".parse().unwrap(), 10_000 + (i % 300) as u16)
    };
    let remote_of = |i: u32| (1 + i / 300) as u16;
    let mut ids = Vec::new();
    for i in 0..30_000u32 {
        b.handle(peer_of(i), &raw_new(remote_of(i), &ies), now);
        let Some(Event::Incoming { call, peer, .. }) = b.poll_event() else {
            panic!("call {i} not set up")
        };
        assert_eq!(peer, peer_of(i));
        ids.push(call);
    }
    assert_eq!(b.call_count(), 30_000);
    while b.poll_transmit().is_some() {}
    let mut numbers: Vec<u16> = ids.iter().map(|c| c.number()).collect();
    numbers.sort_unstable();
    numbers.dedup();
    assert_eq!(numbers.len(), 30_000);
    for (i, id) in ids.iter().enumerate() {
        let i = i as u32;
        // By (peer, remote number): a retransmitted NEW is acknowledged from the right call.
        let mut again = raw_new(remote_of(i), &ies);
        again[2] |= 0x80;
        b.handle(peer_of(i), &again, now);
        let ack = b.poll_transmit().unwrap();
        let Ok(Frame::Full(f)) = Frame::parse(&ack.bytes) else {
            panic!()
        };
        assert!(f.is_iax(iax::ACK));
        assert_eq!((f.src_call, f.dst_call), (id.number(), remote_of(i)));
        // By (peer, local number): a HANGUP reaches exactly this call.
        let hangup = FullFrame {
            src_call: remote_of(i),
            dst_call: id.number(),
            retransmit: false,
            ts: 10,
            oseqno: 1,
            iseqno: 0,
            frame_type: FrameType::Iax,
            subclass: iax::HANGUP,
            payload: &[],
        }
        .to_vec()
        .unwrap();
        // From the wrong port the call is not found.
        b.handle(peer_of(i + 1), &hangup, now);
        b.handle(peer_of(i), &hangup, now);
        assert_eq!(
            b.poll_event(),
            Some(Event::Hangup {
                call: *id,
                reason: EndReason::Hangup {
                    cause: None,
                    code: None
                }
            })
        );
        while b.poll_transmit().is_some() {}
    }
}

#[test]
fn registration_client_and_server_with_md5_and_refresh() {
    let mut net = Net::new(Config::default(), Config::default());
    let now = net.now;
    let reg = net.a.register(net.b_addr, "alice", "pw", 60, now);
    net.run(Duration::from_millis(20));
    let evb = net.take_b();
    let Some(Event::RegisterRequest {
        call,
        peer,
        username,
        refresh,
        release: false,
    }) = evb.first().cloned()
    else {
        panic!("{evb:?}")
    };
    assert_eq!(
        (peer, username.as_str(), refresh),
        (net.a_addr, "alice", Some(60))
    );
    let now = net.now;
    net.b.authenticate(call, "pw", now).unwrap();
    net.run(Duration::from_millis(20));
    assert_eq!(net.take_b(), vec![Event::Authenticated { call }]);
    let now = net.now;
    net.b.accept_registration(call, 60, now).unwrap();
    net.run(Duration::from_millis(20));
    assert_eq!(
        net.take_a(),
        vec![Event::Registered {
            reg,
            refresh: 60,
            apparent: Some(net.a_addr)
        }]
    );
    net.run(Duration::from_secs(5));
    assert_eq!(net.a.call_count(), 0);
    assert_eq!(net.b.call_count(), 0);
    // Refreshed before the 60 s run out.
    net.run(Duration::from_secs(41));
    assert!(net
        .take_b()
        .iter()
        .any(|e| matches!(e, Event::RegisterRequest { .. })));
    // Released: REGREL, answered with MD5 like a REGREQ, then no refresh any more.
    net.run(Duration::from_secs(1));
    net.take_a();
    net.take_b();
    let now = net.now;
    net.a.unregister(reg, now);
    net.run(Duration::from_millis(20));
    let evb = net.take_b();
    let Some(Event::RegisterRequest {
        call,
        username,
        release: true,
        ..
    }) = evb.first().cloned()
    else {
        panic!("REGREL expected: {evb:?}")
    };
    assert_eq!(username, "alice");
    let now = net.now;
    net.b.authenticate(call, "pw", now).unwrap();
    net.run(Duration::from_millis(20));
    assert_eq!(net.take_b(), vec![Event::Authenticated { call }]);
    let now = net.now;
    net.b.accept_registration(call, 0, now).unwrap();
    net.run(Duration::from_millis(20));
    assert_eq!(net.take_a(), vec![Event::Unregistered { reg }]);
    net.run(Duration::from_secs(120));
    assert!(net.take_b().is_empty(), "nothing after the REGREL");
}

#[test]
fn poke_is_answered_with_pong_or_times_out_and_lagrq_gets_lagrp() {
    let mut net = Net::new(Config::default(), Config::default());
    let now = net.now;
    let poke = net.a.poke(net.b_addr, now).unwrap();
    net.run(Duration::from_millis(30));
    let eva = net.take_a();
    assert!(
        matches!(eva.as_slice(), [Event::Pong { call, .. }] if *call == poke),
        "{eva:?}"
    );
    assert!(net.take_b().is_empty(), "a POKE is answered statelessly");
    net.run(Duration::from_secs(4));
    assert_eq!((net.a.call_count(), net.b.call_count()), (0, 0));
    // Nobody answers: after every retransmission, a timeout.
    net.keep = Box::new(|from_a, _| !from_a);
    let now = net.now;
    let lost = net.a.poke(net.b_addr, now).unwrap();
    net.run(Duration::from_secs(20));
    assert_eq!(
        net.take_a(),
        vec![Event::Hangup {
            call: lost,
            reason: EndReason::Timeout
        }]
    );
    // LAGRQ and PING in a call are answered with the round trip.
    net.keep = Box::new(|_, _| true);
    let (ca, _) = answered_call(&mut net);
    let now = net.now;
    net.a.lagrq(ca, now).unwrap();
    net.a.ping(ca, now).unwrap();
    net.run(Duration::from_millis(30));
    let pongs = net
        .take_a()
        .into_iter()
        .filter(|e| matches!(e, Event::Pong { call, .. } if *call == ca))
        .count();
    assert_eq!(pongs, 2);
    let answers: Vec<u32> = full_frames(&net.wire, false)
        .iter()
        .filter(|f| f.frame_type == FrameType::Iax)
        .map(|f| f.subclass)
        .filter(|s| [iax::LAGRP, iax::PONG].contains(s))
        .collect();
    assert_eq!(answers, vec![iax::PONG, iax::LAGRP, iax::PONG]);
}

#[test]
fn registration_with_wrong_secret_is_refused() {
    let mut net = Net::new(Config::default(), Config::default());
    let now = net.now;
    let reg = net.a.register(net.b_addr, "alice", "wrong", 60, now);
    net.run(Duration::from_millis(20));
    let Some(Event::RegisterRequest { call, .. }) = net.take_b().first().cloned() else {
        panic!()
    };
    let now = net.now;
    net.b.authenticate(call, "pw", now).unwrap();
    net.run(Duration::from_millis(20));
    assert_eq!(
        net.take_b(),
        vec![Event::Hangup {
            call,
            reason: EndReason::AuthFailed
        }]
    );
    let eva = net.take_a();
    assert!(
        matches!(&eva[..], [Event::RegistrationFailed { reg: r, reason: EndReason::Rejected { code: Some(21), .. } }] if *r == reg),
        "{eva:?}"
    );
}

#[test]
fn call_with_wrong_secret_is_rejected_and_reject_reaches_caller() {
    let mut net = Net::new(Config::default(), Config::default());
    let now = net.now;
    let ca = net.a.call(net.b_addr, &new_call(Some("bad")), now).unwrap();
    net.run(Duration::from_millis(20));
    let cb = incoming(&net.take_b()).unwrap();
    let now = net.now;
    net.b.authenticate(cb, "good", now).unwrap();
    net.run(Duration::from_millis(20));
    assert!(net.take_b().contains(&Event::Hangup {
        call: cb,
        reason: EndReason::AuthFailed
    }));
    assert!(net.take_a().iter().any(|e| matches!(e,
        Event::Hangup { call, reason: EndReason::Rejected { .. } } if *call == ca)));

    // A plain reject of an unauthenticated call.
    let now = net.now;
    let ca = net.a.call(net.b_addr, &new_call(None), now).unwrap();
    net.run(Duration::from_millis(20));
    let cb = incoming(&net.take_b()).unwrap();
    let now = net.now;
    net.b.reject(cb, "Busy", 17, now).unwrap();
    net.run(Duration::from_millis(20));
    assert!(net.take_a().contains(&Event::Hangup {
        call: ca,
        reason: EndReason::Rejected {
            cause: Some("Busy".into()),
            code: Some(17)
        }
    }));
}

#[test]
fn trunk_frames_carry_several_calls_media() {
    let cfg_a = Config {
        trunk: true,
        ..Config::default()
    };
    let mut net = Net::new(cfg_a, Config::default());
    let calls: Vec<_> = (0..3).map(|_| answered_call(&mut net)).collect();
    // First frame of each call is a full voice frame, then media goes into trunk frames.
    for round in 0..3u8 {
        let now = net.now;
        for (i, (ca, _)) in calls.iter().enumerate() {
            net.a
                .send_voice(*ca, format::ULAW, &[i as u8 * 10 + round; 160], now)
                .unwrap();
        }
        net.run(Duration::from_millis(20));
    }
    let trunks: Vec<_> = net
        .wire
        .iter()
        .filter_map(|(a, b)| match Frame::parse(b) {
            Ok(Frame::Trunk(t)) if *a => Some(t.entries().count()),
            _ => None,
        })
        .collect();
    assert_eq!(
        trunks,
        vec![3, 3],
        "one trunk frame per interval with every call"
    );
    let evb = net.take_b();
    for (i, (_, cb)) in calls.iter().enumerate() {
        let got: Vec<u8> = evb
            .iter()
            .filter_map(|e| match e {
                Event::Voice { call, data, .. } if call == cb => Some(data[0]),
                _ => None,
            })
            .collect();
        let i = i as u8;
        assert_eq!(got, vec![i * 10, i * 10 + 1, i * 10 + 2]);
    }
}

/// Twenty calls' 160-byte frames do not fit one trunk frame: they go in several, none larger
/// than `TRUNK_MTU`, and every call's frame arrives.
#[test]
fn trunk_frames_stay_within_the_mtu() {
    let cfg_a = Config {
        trunk: true,
        ..Config::default()
    };
    let mut net = Net::new(cfg_a, Config::default());
    let calls: Vec<_> = (0..20).map(|_| answered_call(&mut net)).collect();
    for _ in 0..2 {
        let now = net.now;
        for (ca, _) in &calls {
            net.a.send_voice(*ca, format::ULAW, &[7; 160], now).unwrap();
        }
        net.run(Duration::from_millis(20));
    }
    let sizes: Vec<(usize, usize)> = net
        .wire
        .iter()
        .filter_map(|(a, b)| match Frame::parse(b) {
            Ok(Frame::Trunk(t)) if *a => Some((b.len(), t.entries().count())),
            _ => None,
        })
        .collect();
    assert!(sizes.len() >= 3, "{sizes:?}");
    assert!(
        sizes
            .iter()
            .all(|(len, _)| *len <= iax2::endpoint::TRUNK_MTU),
        "{sizes:?}"
    );
    assert_eq!(sizes.iter().map(|(_, n)| n).sum::<usize>(), 20);
    let voice = net
        .take_b()
        .iter()
        .filter(|e| matches!(e, Event::Voice { .. }))
        .count();
    assert_eq!(voice, 40, "a full frame and a trunk entry per call");
}

#[test]
fn poke_is_answered_statelessly_and_unknown_calls_get_inval() {
    let now = Instant::now();
    let mut b = Endpoint::with_seed(Config::default(), [9; 16], now);
    let peer: SocketAddr = "203.0.113.5:4569".parse().unwrap();
    let mut poke = raw_new(77, &[]);
    poke[11] = iax::POKE as u8;
    b.handle(peer, &poke, now);
    let t = b.poll_transmit().unwrap();
    assert!(
        matches!(Frame::parse(&t.bytes), Ok(Frame::Full(f)) if f.is_iax(iax::PONG) && f.dst_call == 77)
    );
    assert_eq!(b.call_count(), 0);
    let mut stray = raw_new(77, &[]);
    stray[3] = 200; // dst call 200, unknown
    stray[11] = iax::HANGUP as u8;
    b.handle(peer, &stray, now);
    let t = b.poll_transmit().unwrap();
    assert!(matches!(Frame::parse(&t.bytes), Ok(Frame::Full(f)) if f.is_iax(iax::INVAL)));
    // Garbage is counted, not answered.
    b.handle(peer, &[0x80, 1, 2], now);
    assert!(b.poll_transmit().is_none());
    assert_eq!(b.stats().malformed, 1);
}

/// Two endpoints share one port, as two workers do: the reader routes every datagram with
/// `route`. NEWs spread over both, each taking numbers of its own share; each call's full
/// frames, mini frames and trunk entries (a trunk frame split in two) reach the endpoint that
/// took the call; a call the reader places from the port gets its media back too.
#[test]
fn endpoints_sharing_a_port_route_every_frame_to_its_call() {
    let now = Instant::now();
    let share = |i| Config {
        callno_share: (2, i),
        ..Config::default()
    };
    let mut srv = [
        Endpoint::with_seed(share(0), [3; 16], now),
        Endpoint::with_seed(share(1), [4; 16], now),
    ];
    let mut cli = Endpoint::with_seed(
        Config {
            trunk: true,
            ..Config::default()
        },
        [5; 16],
        now,
    );
    let s_addr: SocketAddr = "192.0.2.1:4569".parse().unwrap();
    let c_addr: SocketAddr = "198.51.100.2:4569".parse().unwrap();
    let mut splits = 0;
    let mut pump = |srv: &mut [Endpoint; 2], cli: &mut Endpoint, ev: &mut [Vec<Event>; 3]| loop {
        let mut moved = false;
        while let Some(t) = cli.poll_transmit() {
            moved = true;
            match srv[0].route(c_addr, &t.bytes) {
                iax2::Route::To(w) => srv[w].handle(c_addr, &t.bytes, now),
                iax2::Route::Split(parts) => {
                    splits += 1;
                    for (w, b) in parts {
                        srv[w].handle(c_addr, &b, now);
                    }
                }
            }
        }
        for s in srv.iter_mut() {
            while let Some(t) = s.poll_transmit() {
                moved = true;
                cli.handle(s_addr, &t.bytes, now);
            }
        }
        for (i, s) in srv.iter_mut().enumerate() {
            while let Some(e) = s.poll_event() {
                ev[i].push(e);
            }
        }
        while let Some(e) = cli.poll_event() {
            ev[2].push(e);
        }
        if !moved {
            break;
        }
    };
    let mut ev: [Vec<Event>; 3] = Default::default();
    let calls: Vec<CallId> = (0..20)
        .map(|_| cli.call(s_addr, &new_call(None), now).unwrap())
        .collect();
    pump(&mut srv, &mut cli, &mut ev);
    for (i, s) in srv.iter_mut().enumerate() {
        for e in std::mem::take(&mut ev[i]) {
            if let Event::Incoming { call, .. } = e {
                assert_eq!(call.number() % 2, i as u16, "numbers of its own share");
                s.accept(call, format::ULAW, now).unwrap();
                s.answer(call, now).unwrap();
            }
        }
    }
    let taken = [srv[0].call_count(), srv[1].call_count()];
    assert_eq!(taken[0] + taken[1], 20);
    assert!(taken[0] > 0 && taken[1] > 0, "NEWs spread: {taken:?}");
    // The reader's own call, from the shared port.
    let out = srv[0].call(c_addr, &new_call(None), now).unwrap();
    pump(&mut srv, &mut cli, &mut ev);
    let incoming = incoming(&ev[2]).expect("the client sees the reader's NEW");
    cli.accept(incoming, format::ULAW, now).unwrap();
    cli.answer(incoming, now).unwrap();
    pump(&mut srv, &mut cli, &mut ev);
    ev = Default::default();
    // Voice on every call: a full frame first, then trunk entries.
    for _ in 0..3 {
        for c in calls.iter().chain([&incoming]) {
            cli.send_voice(*c, format::ULAW, &[0x55; 160], now).unwrap();
        }
        cli.flush_trunks();
        pump(&mut srv, &mut cli, &mut ev);
    }
    assert!(splits >= 2, "trunk frames were split between the endpoints");
    let voice = |evs: &[Event]| {
        evs.iter()
            .filter(|e| matches!(e, Event::Voice { .. }))
            .count()
    };
    assert_eq!(
        voice(&ev[0]),
        3 * (taken[0] + 1),
        "its calls and the one it placed"
    );
    assert_eq!(voice(&ev[1]), 3 * taken[1]);
    assert!(ev[0]
        .iter()
        .any(|e| matches!(e, Event::Voice { call, .. } if *call == out)));
    assert_eq!(srv[0].stats().unknown_call + srv[1].stats().unknown_call, 0);
}
