//! Feeds strowger-built IAX2 traffic (a call with the token handshake, MD5 auth, voice in full,
//! mini and trunk frames, DTMF, hangup, and a registration) to Wireshark's IAX2 dissector and
//! checks that it decodes every datagram without a malformed-packet warning. Skipped (with a
//! note) when `tshark` is not installed.

use iax2::{format, Config, Endpoint, Event, NewCall};
use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

fn pump(
    a: &mut Endpoint,
    b: &mut Endpoint,
    aa: SocketAddr,
    ba: SocketAddr,
    now: Instant,
    wire: &mut Vec<(SocketAddr, SocketAddr, Vec<u8>)>,
) -> (Vec<Event>, Vec<Event>) {
    let (mut ea, mut eb) = (Vec::new(), Vec::new());
    loop {
        let mut moved = false;
        while let Some(t) = a.poll_transmit() {
            moved = true;
            b.handle(aa, &t.bytes, now);
            wire.push((aa, ba, t.bytes));
        }
        while let Some(t) = b.poll_transmit() {
            moved = true;
            a.handle(ba, &t.bytes, now);
            wire.push((ba, aa, t.bytes));
        }
        ea.extend(std::iter::from_fn(|| a.poll_event()));
        eb.extend(std::iter::from_fn(|| b.poll_event()));
        if !moved {
            return (ea, eb);
        }
    }
}

fn traffic() -> Vec<(SocketAddr, SocketAddr, Vec<u8>)> {
    let t0 = Instant::now();
    let aa: SocketAddr = "10.0.0.1:4569".parse().unwrap();
    let ba: SocketAddr = "10.0.0.2:4569".parse().unwrap();
    let mut a = Endpoint::with_seed(
        Config {
            trunk: true,
            ..Config::default()
        },
        [1; 16],
        t0,
    );
    let mut b = Endpoint::with_seed(Config::default(), [2; 16], t0);
    let mut wire = Vec::new();
    let mut now = t0;
    let p = NewCall {
        called_number: "2000".into(),
        calling_number: Some("1000".into()),
        calling_name: Some("Alice".into()),
        username: Some("alice".into()),
        secret: Some("pw".into()),
        format: format::ULAW,
        capability: format::ULAW | format::ALAW | format::G729,
        ..Default::default()
    };
    let ca = a.call(ba, &p, now).unwrap();
    let (_, eb) = pump(&mut a, &mut b, aa, ba, now, &mut wire);
    let Some(Event::Incoming { call: cb, .. }) = eb.first().cloned() else {
        panic!("{eb:?}")
    };
    b.authenticate(cb, "pw", now).unwrap();
    pump(&mut a, &mut b, aa, ba, now, &mut wire);
    b.accept(cb, format::ULAW, now).unwrap();
    b.ringing(cb, now).unwrap();
    b.answer(cb, now).unwrap();
    pump(&mut a, &mut b, aa, ba, now, &mut wire);
    for i in 0..4u8 {
        now += Duration::from_millis(20);
        a.send_voice(ca, format::ULAW, &[i; 160], now).unwrap();
        b.send_voice(cb, format::ULAW, &[i; 160], now).unwrap();
        a.flush_trunks();
        pump(&mut a, &mut b, aa, ba, now, &mut wire);
    }
    a.send_dtmf(ca, '7', true, now).unwrap();
    a.send_dtmf(ca, '7', false, now).unwrap();
    a.ping(ca, now).unwrap();
    pump(&mut a, &mut b, aa, ba, now, &mut wire);
    a.hangup(ca, 16, now).unwrap();
    pump(&mut a, &mut b, aa, ba, now, &mut wire);
    let _reg = a.register(ba, "alice", "pw", 60, now);
    let (_, eb) = pump(&mut a, &mut b, aa, ba, now, &mut wire);
    let Some(Event::RegisterRequest { call, .. }) = eb.first().cloned() else {
        panic!("{eb:?}")
    };
    b.authenticate(call, "pw", now).unwrap();
    pump(&mut a, &mut b, aa, ba, now, &mut wire);
    b.accept_registration(call, 60, now).unwrap();
    pump(&mut a, &mut b, aa, ba, now, &mut wire);
    wire
}

#[test]
fn wireshark_dissects_strowger_frames_without_malformed_packets() {
    if Command::new("tshark").arg("--version").output().is_err() {
        eprintln!("tshark not installed: skipping the Wireshark dissector check");
        return;
    }
    let wire = traffic();
    assert!(wire.len() > 30);
    let path = std::env::temp_dir().join(format!("strowger-iax2-{}.pcap", std::process::id()));
    std::fs::write(&path, iax2::pcap::pcap(&wire)).unwrap();
    let out = Command::new("tshark")
        .args(["-n", "-r"])
        .arg(&path)
        .args(["-V", "-o", "iax2.reassemble:FALSE"])
        .output();
    let out = match out {
        Ok(o) if o.status.success() => o,
        // An unknown preference name on another Wireshark version: run without it.
        _ => Command::new("tshark")
            .args(["-n", "-V", "-r"])
            .arg(&path)
            .output()
            .unwrap(),
    };
    if std::env::var_os("IAX2_KEEP_PCAP").is_none() {
        let _ = std::fs::remove_file(&path);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let decoded = text.matches("Inter-Asterisk eXchange v2").count();
    assert_eq!(decoded, wire.len(), "every datagram is dissected as IAX2");
    for bad in [
        "Malformed",
        "malformed",
        "Dissector bug",
        "Expert Info (Error",
    ] {
        assert!(!text.contains(bad), "tshark reports {bad:?}:\n{text}");
    }
    assert!(text.contains("NEW"));
    assert!(text.contains("CALLTOKEN") || text.contains("Call token"));
    assert!(text.contains("Trunk") || text.contains("trunk"));
}
