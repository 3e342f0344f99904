//! WebRTC legs in the engine: a browser (here a test peer with its own certificate, ICE
//! credentials and the project's SRTP) calls over a WebSocket, is answered with ICE-lite and
//! DTLS-SRTP, passes a connectivity check, shakes hands, and hears its own audio back from
//! the echo extension, decrypted with the keys the handshake exported. Nothing goes out in
//! clear before that; DTLS from a source that passed no check and SRTP under another key are
//! dropped and counted, and the call carries on.

use std::net::SocketAddr;

use crate::net::*;
use sdp::{Attribute, CryptoSuite, SessionDescription, SrtpKeys};
use sip::transaction::{Peer, Transport};
use sip::Message;
use webrtc::{stun, Certificate, Dtls, DtlsState, IceCredentials, Role};

const BROWSER: &str = "127.0.0.1:40100";
const STRANGER: &str = "127.0.0.1:40200";

fn config() -> String {
    format!(
        "[rtp]\nmedia_timeout_s = 0\n{TRUST_LOOPBACK}\n[dialplan]\ndefault_context = \"default\"\n\
         [[dialplan.contexts.default.rules]]\nexten = \"9196\"\nsteps = [\"answer\", \"echo\"]\n"
    )
}

/// What a browser offers: PCMU, ICE credentials, its fingerprint, actpass, rtcp-mux, BUNDLE.
fn offer(ice: &IceCredentials, cert: &Certificate) -> String {
    format!(
        "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0\r\n\
         m=audio 40100 UDP/TLS/RTP/SAVPF 0 126\r\nc=IN IP4 127.0.0.1\r\n\
         a=candidate:1 1 udp 2122260223 127.0.0.1 40100 typ host\r\n\
         a=ice-ufrag:{}\r\na=ice-pwd:{}\r\na=fingerprint:{}\r\na=setup:actpass\r\na=mid:0\r\n\
         a=sendrecv\r\na=rtcp-mux\r\na=rtpmap:0 PCMU/8000\r\na=rtcp-fb:0 transport-cc\r\n\
         a=rtpmap:126 telephone-event/8000\r\n",
        ice.ufrag,
        ice.pwd,
        cert.fingerprint()
    )
}

/// A browser's INVITE over its WebSocket to `exten`, with Call-ID `call_id` and offer `sdp`.
fn invite_text(exten: &str, call_id: &str, sdp: &str) -> String {
    format!(
        "INVITE sip:{exten}@{SW} SIP/2.0\r\nVia: SIP/2.0/WS df7jal23ls0d.invalid;branch=z9hG4bK-w1\r\n\
         Max-Forwards: 70\r\nFrom: <sip:web@df7jal23ls0d.invalid>;tag=w1\r\nTo: <sip:{exten}@{SW}>\r\n\
         Call-ID: {call_id}\r\nCSeq: 1 INVITE\r\nContact: <sip:web@df7jal23ls0d.invalid;transport=ws>\r\n\
         Content-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{sdp}",
        sdp.len()
    )
}

fn value<'a>(m: &'a sdp::Media, name: &str) -> &'a str {
    m.attributes
        .iter()
        .find_map(|a| match a {
            Attribute::Other { name: n, value } if n == name => {
                Some(value.as_deref().unwrap_or(""))
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("no a={name} in the answer"))
}

/// The browser's DTLS handshake as client with `node`'s leg, `path` being (the browser's
/// address, the leg's), in six rounds of 20 ms from `now` (moved on): the keys it exported, and
/// what else the browser got meanwhile.
fn handshake(
    node: &mut Node,
    cert: &Certificate,
    fp: webrtc::Fingerprint,
    (browser, leg): (SocketAddr, SocketAddr),
    now: &mut std::time::Instant,
) -> (SrtpKeys, Vec<Vec<u8>>) {
    let mut dtls = Dtls::new(cert, Role::Client, fp, *now).unwrap();
    let mut besides = Vec::new();
    for _ in 0..6 {
        while let Some(d) = dtls.poll_transmit() {
            node.deliver_rtp(&d, browser, leg, *now);
        }
        *now += ms(20);
        node.advance(*now);
        for d in media_to(node.drain(), browser) {
            match (20..=63).contains(&d[0]) {
                true => dtls.handle(&d, *now),
                false => besides.push(d),
            }
        }
    }
    let DtlsState::Connected(keys) = dtls.state().clone() else {
        panic!("handshake not done: {:?}", dtls.state());
    };
    (keys, besides)
}

/// Media strowger sent to `to`.
fn media_to(out: Vec<Packet>, to: SocketAddr) -> Vec<Vec<u8>> {
    out.into_iter()
        .filter(|p| p.media && p.to == to)
        .map(|p| p.bytes)
        .collect()
}

fn rtp(seq: u16, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0x80, 0];
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&(u32::from(seq) * 160).to_be_bytes());
    p.extend_from_slice(&0x1234_5678u32.to_be_bytes());
    p.extend_from_slice(payload);
    p
}

fn context(keys: &SrtpKeys, local: bool) -> srtp::Context {
    let suite = match keys.suite {
        CryptoSuite::AeadAes128Gcm => srtp::Suite::AeadAes128Gcm,
        CryptoSuite::AesCm128HmacSha1_80 => srtp::Suite::AesCm128HmacSha1_80,
        CryptoSuite::AesCm128HmacSha1_32 => srtp::Suite::AesCm128HmacSha1_32,
    };
    let (key, dir) = match local {
        true => (&keys.local, srtp::Direction::Outbound),
        false => (&keys.remote, srtp::Direction::Inbound),
    };
    srtp::Context::new(suite, key, dir).unwrap()
}

fn seal(ctx: &mut srtp::Context, packet: &[u8]) -> Vec<u8> {
    let mut buf = packet.to_vec();
    buf.resize(packet.len() + 64, 0);
    let n = ctx.protect(&mut buf, packet.len()).unwrap();
    buf.truncate(n);
    buf
}

#[test]
fn a_browser_calls_the_echo_over_ice_lite_and_dtls_srtp_and_hears_itself() {
    let mut n = Net::new(31);
    let sw = n.switch(&config(), &[SW], 1);
    let (alice, browser, stranger) = (addr(ALICE), addr(BROWSER), addr(STRANGER));
    let ice = IceCredentials::random();
    let cert = Certificate::generate().unwrap();
    let sdp = offer(&ice, &cert);
    let invite = invite_text("9196", "webrtc@browser", &sdp);
    let mut now = n.now;
    let node = n.sw(sw).node();
    let peer = Peer {
        transport: Transport::Ws,
        addr: alice,
    };
    node.deliver_msg(
        Message::parse(invite.as_bytes(), false).unwrap(),
        peer,
        addr(SW),
        false,
        now,
    );
    let mut out = node.drain();
    for _ in 0..5 {
        now += ms(20);
        node.advance(now);
        out.extend(node.drain());
    }
    let ok = out
        .iter()
        .filter(|p| !p.media && p.to == alice)
        .filter_map(|p| Message::parse(&p.bytes, true).ok())
        .find(|m| m.status().is_some_and(|s| s >= 200))
        .expect("a final response");
    assert_eq!(ok.status(), Some(200), "{ok:?}");
    let answer = SessionDescription::parse(ok.body()).unwrap();
    let m = &answer.media[0];
    assert_eq!(m.proto, "UDP/TLS/RTP/SAVPF");
    assert_eq!(value(m, "setup"), "passive");
    let (sw_ufrag, sw_pwd) = (value(m, "ice-ufrag"), value(m, "ice-pwd"));
    let sw_fp = webrtc::Fingerprint::parse(value(m, "fingerprint")).unwrap();
    assert_eq!(&sw_fp, Certificate::process().fingerprint());
    let leg = SocketAddr::new(addr(SW).ip(), m.port);
    assert!(
        value(m, "candidate").ends_with(&format!(" {} typ host", m.port)),
        "{answer}"
    );
    assert!(media_to(out, browser).is_empty(), "nothing before a check");

    // The connectivity check, nominating: answered, signed with strowger's password.
    let check = stun::binding_request(&[9; 12], &format!("{sw_ufrag}:{}", ice.ufrag), true, sw_pwd);
    let node = n.sw(sw).node();
    node.deliver_rtp(&check, browser, leg, now);
    let replies = media_to(node.drain(), browser);
    assert_eq!(replies.len(), 1);
    assert_eq!(
        stun::parse_binding_success(&replies[0], sw_pwd),
        Ok(browser)
    );

    // A stranger's DTLS (it passed no check) is dropped and counted.
    let mut intruder = Dtls::new(&cert, Role::Client, sw_fp.clone(), now).unwrap();
    while let Some(d) = intruder.poll_transmit() {
        node.deliver_rtp(&d, stranger, leg, now);
    }
    assert!(media_to(node.drain(), stranger).is_empty());

    // The browser's handshake, as DTLS client.
    let (keys, besides) = handshake(node, &cert, sw_fp, (browser, leg), &mut now);
    let firsts: Vec<&[u8]> = besides.iter().map(|d| &d[..4]).collect();
    assert!(firsts.is_empty(), "only DTLS before the keys: {firsts:?}");
    let (mut tx, mut rx) = (context(&keys, true), context(&keys, false));

    // Audio to the echo, encrypted: it comes back encrypted with strowger's key.
    let payloads: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i.wrapping_mul(37); 160]).collect();
    let mut back = Vec::new();
    let node = n.sw(sw).node();
    for (seq, p) in payloads.iter().enumerate() {
        node.deliver_rtp(&seal(&mut tx, &rtp(seq as u16, p)), browser, leg, now);
        now += ms(20);
        node.advance(now);
        back.extend(media_to(node.drain(), browser));
    }
    let heard: Vec<Vec<u8>> = back
        .iter()
        .filter(|d| (128..=191).contains(&d[0]) && !(192..=223).contains(&d[1]))
        .map(|d| {
            let mut d = d.clone();
            let n = rx.unprotect(&mut d).expect("SRTP under the exported key");
            d[12..n].to_vec()
        })
        .collect();
    assert_eq!(heard, payloads, "the echo returns every packet, in order");

    // A re-INVITE from the same browser (same credentials and certificate) keeps the
    // association: the echo still answers under the same keys.
    let to = ok.header(sip::HeaderName::To).unwrap();
    let reinvite = invite
        .replace("CSeq: 1 INVITE", "CSeq: 2 INVITE")
        .replace("branch=z9hG4bK-w1", "branch=z9hG4bK-w2")
        .replace(&format!("To: <sip:9196@{SW}>"), &format!("To: {to}"))
        .replace("o=- 1 2 ", "o=- 1 3 ");
    node.deliver_msg(
        Message::parse(reinvite.as_bytes(), false).unwrap(),
        peer,
        addr(SW),
        false,
        now,
    );
    let reanswered = node
        .drain()
        .into_iter()
        .filter(|p| !p.media && p.to == alice)
        .filter_map(|p| Message::parse(&p.bytes, true).ok())
        .any(|m| m.status() == Some(200));
    assert!(reanswered, "the re-INVITE's 200");
    let again = vec![0x42; 160];
    node.deliver_rtp(&seal(&mut tx, &rtp(10, &again)), browser, leg, now);
    now += ms(20);
    node.advance(now);
    let echoed: Vec<Vec<u8>> = media_to(node.drain(), browser)
        .into_iter()
        .filter(|d| (128..=191).contains(&d[0]) && !(192..=223).contains(&d[1]))
        .map(|mut d| {
            let n = rx.unprotect(&mut d).expect("SRTP under the same keys");
            d[12..n].to_vec()
        })
        .collect();
    assert_eq!(echoed, [again]);

    // SRTP under another key: dropped and counted, the call goes on.
    let other = SrtpKeys {
        local: vec![7; keys.local.len()],
        ..keys.clone()
    };
    let forged = seal(&mut context(&other, true), &rtp(99, &[0; 160]));
    node.deliver_rtp(&forged, browser, leg, now);
    node.advance(now + ms(20));
    let scrape = n.sw(sw).scrape();
    assert!(
        scrape.contains("strowger_srtp_rejected_packets_total 1\n"),
        "{scrape}"
    );
    assert!(
        scrape.contains("strowger_ice_refused_packets_total 1\n"),
        "{scrape}"
    );
    assert_eq!(n.sw(sw).active_calls(), 1);
}

/// The browser's 200 to strowger's INVITE, with `sdp`.
pub fn ok_to(invite: &Message, sdp: &str) -> Message {
    Message::parse(ok_text(invite, sdp).as_bytes(), true).unwrap()
}

/// [`ok_to`]'s text (the To tag added unless a re-INVITE's To has it).
fn ok_text(invite: &Message, sdp: &str) -> String {
    let h = |name| invite.header_named(name).unwrap_or_default();
    let to = match h("To").contains(";tag=") {
        true => h("To").to_string(),
        false => format!("{};tag=b1", h("To")),
    };
    format!(
        "SIP/2.0 200 OK\r\nVia: {}\r\nFrom: {}\r\nTo: {to}\r\nCall-ID: {}\r\nCSeq: {}\r\n\
         Contact: <sip:1001@df7jal23ls0d.invalid;transport=ws>\r\n\
         Content-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{sdp}",
        h("Via"),
        h("From"),
        h("Call-ID"),
        h("CSeq"),
        sdp.len()
    )
}

#[test]
fn a_phone_calls_a_browser_registered_over_a_websocket_through_a_bridge_that_encrypts() {
    // Both PCMU: the phone's payloads reach the browser unchanged, encrypted.
    let payloads: Vec<Vec<u8>> = (0..5u8).map(|i| vec![0x55 ^ i; 160]).collect();
    let heard = phone_to_browser("PCMU", &payloads);
    assert_eq!(heard, payloads);
}

#[test]
fn a_browser_answering_opus_hears_the_phones_g711_transcoded() {
    // A 1 kHz tone in PCMU from the phone; the browser decodes Opus at 48 kHz.
    let tone: Vec<i16> = (0..8000 * 2 / 5)
        .map(|i| (8000.0 * (2.0 * std::f64::consts::PI * 1000.0 * i as f64 / 8000.0).sin()) as i16)
        .collect();
    let mut pcmu = media::Format::Pcmu.encoder();
    let payloads: Vec<Vec<u8>> = tone
        .chunks(160)
        .map(|pcm| {
            let mut out = vec![0u8; 160];
            let n = pcmu.encode(pcm, &mut out).unwrap();
            out[..n].to_vec()
        })
        .collect();
    let heard = phone_to_browser("opus", &payloads);
    assert!(heard.len() >= 15, "{} Opus packets", heard.len());
    let mut dec = media::Format::Opus.decoder();
    let mut pcm = Vec::new();
    for p in &heard {
        let mut out = [0i16; 960];
        let n = dec
            .decode(p, &mut out)
            .expect("Opus the browser can decode");
        pcm.extend_from_slice(&out[..n]);
    }
    // After the codecs' delay, a tone as loud as the one sent (RMS 5657), at 1 kHz: the
    // signal and itself a quarter period (12 samples at 48 kHz) later are uncorrelated.
    let tail = &pcm[pcm.len() / 2..];
    let rms = (tail.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>() / tail.len() as f64).sqrt();
    assert!((3000.0..8000.0).contains(&rms), "RMS {rms}");
    let lagged: f64 = tail
        .windows(13)
        .map(|w| f64::from(w[0]) * f64::from(w[12]))
        .sum();
    let power: f64 = tail.iter().map(|&x| f64::from(x).powi(2)).sum();
    assert!(
        (lagged / power).abs() < 0.2,
        "not 1 kHz: {}",
        lagged / power
    );
}

/// A UDP phone calls 1001, a browser registered over a WebSocket that answers `codec` as DTLS
/// client; the phone sends `payloads` (PCMU): what the browser heard, decrypted.
fn phone_to_browser(codec: &str, payloads: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let phone = addr("127.0.0.1:40620");
    let (mut n, sw, to_phone) =
        crate::tls::register_then_call(Transport::Ws, phone, "df7jal23ls0d.invalid");
    let invite = to_phone
        .iter()
        .find(|m| m.starts_with("INVITE "))
        .expect("an INVITE down the WebSocket");
    let invite = Message::parse(invite.as_bytes(), false).unwrap();
    let offer = SessionDescription::parse(invite.body()).unwrap();
    let m = &offer.media[0];
    assert_eq!(m.proto, "UDP/TLS/RTP/SAVPF", "{offer}");
    assert_eq!(value(m, "setup"), "actpass");
    assert_eq!(value(m, "rtcp-mux"), "");
    let (sw_ufrag, sw_pwd) = (
        value(m, "ice-ufrag").to_owned(),
        value(m, "ice-pwd").to_owned(),
    );
    let sw_fp = webrtc::Fingerprint::parse(value(m, "fingerprint")).unwrap();
    let leg = SocketAddr::new(addr(SW).ip(), m.port);

    // The browser answers PCMU, DTLS client (setup:active).
    let ice = IceCredentials::random();
    let cert = Certificate::generate().unwrap();
    let answer = offer_text_as_answer(&ice, &cert, codec);
    let mut now = n.now;
    let node = n.sw(sw).node();
    let ws = Peer {
        transport: Transport::Ws,
        addr: phone,
    };
    node.deliver_msg(ok_to(&invite, &answer), ws, addr(SW), false, now);
    let out = node.drain();
    let to_alice = out
        .iter()
        .filter(|p| !p.media && p.to == addr(ALICE))
        .filter_map(|p| Message::parse(&p.bytes, true).ok())
        .find(|m| m.status() == Some(200))
        .expect("the caller's 200");
    let alice_leg = SocketAddr::new(
        addr(SW).ip(),
        SessionDescription::parse(to_alice.body()).unwrap().media[0].port,
    );

    let browser = addr(BROWSER);
    let check = stun::binding_request(
        &[3; 12],
        &format!("{sw_ufrag}:{}", ice.ufrag),
        true,
        &sw_pwd,
    );
    node.deliver_rtp(&check, browser, leg, now);
    let (keys, _) = handshake(node, &cert, sw_fp, (browser, leg), &mut now);
    let mut rx = context(&keys, false);

    // The caller's plain RTP reaches the browser encrypted.
    let alice_rtp = addr("127.0.0.1:40000");
    let mut heard = Vec::new();
    for (seq, p) in payloads.iter().enumerate() {
        node.deliver_rtp(&rtp(seq as u16, p), alice_rtp, alice_leg, now);
        now += ms(20);
        node.advance(now);
        for mut d in media_to(node.drain(), browser) {
            if (128..=191).contains(&d[0]) && !(192..=223).contains(&d[1]) {
                let n = rx.unprotect(&mut d).expect("SRTP under the exported key");
                heard.push(d[12..n].to_vec());
            }
        }
    }
    heard
}

/// A browser's answer: `codec` (PCMU, or opus with strowger's number), its ICE credentials
/// and fingerprint, DTLS client.
fn offer_text_as_answer(ice: &IceCredentials, cert: &Certificate, codec: &str) -> String {
    let pcmu = offer(ice, cert)
        .replace("a=setup:actpass", "a=setup:active")
        .replace(" 0 126\r\n", " 0\r\n")
        .replace("a=rtpmap:126 telephone-event/8000\r\n", "");
    match codec {
        "opus" => pcmu
            .replace("SAVPF 0\r\n", "SAVPF 96\r\n")
            .replace("a=rtpmap:0 PCMU/8000", "a=rtpmap:96 opus/48000/2")
            .replace("a=rtcp-fb:0", "a=rtcp-fb:96"),
        _ => pcmu,
    }
}

/// Parking at 700 (slots 701-703) and retrieval by dialling the slot.
const PARKING: &str = "[parking.default]\nslots = \"701-703\"\ntimeout_s = 600\n\
    [[dialplan.contexts.default.rules]]\nexten = \"700\"\nsteps = [\"park\"]\n\
    [[dialplan.contexts.default.rules]]\nregex = \"^70[1-3]$\"\nsteps = [\"retrieve\"]\n";

/// The browser's WebSocket (its signalling address) in the tests on the net.
const BROWSER_WS: &str = "127.0.0.1:40110";

/// A browser on the simulated net, played by hand (its SIP and media addresses tapped): its
/// ICE credentials and certificate, and once answered, strowger's leg (address, ICE
/// credentials, fingerprint), then the SRTP contexts its handshake keyed.
struct Browser {
    ice: IceCredentials,
    cert: Certificate,
    far: Option<(SocketAddr, String, String, webrtc::Fingerprint)>,
    srtp: Option<(srtp::Context, srtp::Context)>,
    seq: u16,
}

impl Browser {
    fn new(n: &mut Net) -> Browser {
        n.tap(addr(BROWSER_WS));
        n.tap(addr(BROWSER));
        Browser {
            ice: IceCredentials::random(),
            cert: Certificate::generate().unwrap(),
            far: None,
            srtp: None,
            seq: 0,
        }
    }

    /// A Call-ID of ours that hashes to `worker` of two.
    fn call_id_on(worker: usize) -> String {
        (0..)
            .map(|i| format!("webrtc-{i}@browser"))
            .find(|c| switch::owner(c, 2) == worker)
            .unwrap()
    }

    /// Calls `exten` over the WebSocket with Call-ID `call_id`: strowger answers 200 with a
    /// WebRTC leg (ICE-lite, DTLS passive), which is acknowledged.
    fn call(&mut self, n: &mut Net, sw: Id, exten: &str, call_id: &str) {
        let ws = self.ws();
        let invite = invite_text(exten, call_id, &offer(&self.ice, &self.cert));
        let now = n.now;
        n.sw(sw).deliver_over(&invite, ws, now);
        let mut ok = None;
        for _ in 0..100 {
            n.run_for(ms(20));
            let got = n.take_tapped(addr(BROWSER_WS));
            let mut finals = got
                .iter()
                .filter_map(|p| Message::parse(&p.bytes, true).ok())
                .filter(|m| m.status().is_some_and(|s| s >= 200));
            if let Some(m) = finals.next() {
                ok = Some(m);
                break;
            }
        }
        let ok = ok.expect("a final response to the browser");
        assert_eq!(ok.status(), Some(200), "{ok:?}");
        self.far = Some(far_end(&ok));
        let to = ok.header(sip::HeaderName::To).unwrap();
        let ack = format!(
            "ACK sip:{exten}@{SW} SIP/2.0\r\nVia: SIP/2.0/WS df7jal23ls0d.invalid;branch=z9hG4bK-a1\r\n\
             Max-Forwards: 70\r\nFrom: <sip:web@df7jal23ls0d.invalid>;tag=w1\r\nTo: {to}\r\n\
             Call-ID: {call_id}\r\nCSeq: 1 ACK\r\nContent-Length: 0\r\n\r\n"
        );
        let now = n.now;
        n.sw(sw).deliver_over(&ack, ws, now);
    }

    /// Registers as 1001 over its WebSocket.
    fn register(&self, n: &mut Net, sw: Id) {
        let register = crate::tls::register_1001("WS", "ws", "df7jal23ls0d.invalid");
        let now = n.now;
        n.sw(sw).deliver_over(&register, self.ws(), now);
        n.run_for(ms(20));
        let ok = n
            .take_tapped(addr(BROWSER_WS))
            .iter()
            .filter_map(|p| Message::parse(&p.bytes, true).ok())
            .any(|m| m.status() == Some(200));
        assert!(ok, "registered");
    }

    /// Its WebSocket, as strowger's peer.
    fn ws(&self) -> Peer {
        Peer {
            transport: Transport::Ws,
            addr: addr(BROWSER_WS),
        }
    }

    /// Waits up to `limit` for an INVITE down the WebSocket and answers it 200, PCMU, DTLS
    /// client: with ICE credentials of its own, new ones when strowger's changed (an ICE
    /// restart, RFC 8839 §4.4.1.1.1). The INVITE.
    fn answer(&mut self, n: &mut Net, sw: Id, limit: std::time::Duration) -> Message {
        let invite = Browser::invited(n, limit);
        let far = far_end(&invite);
        if self.far.as_ref().is_some_and(|f| f.1 != far.1) {
            self.ice = IceCredentials::random();
        }
        self.far = Some(far);
        let answer = offer_text_as_answer(&self.ice, &self.cert, "PCMU");
        let now = n.now;
        n.sw(sw)
            .deliver_over(&ok_text(&invite, &answer), self.ws(), now);
        invite
    }

    /// The first INVITE down the WebSocket within `limit` (its other messages are dropped).
    fn invited(n: &mut Net, limit: std::time::Duration) -> Message {
        let end = n.now + limit;
        loop {
            assert!(n.now < end, "no INVITE to the browser");
            n.run_for(ms(20));
            let got = n.take_tapped(addr(BROWSER_WS));
            let mut invites = got
                .iter()
                .filter_map(|p| Message::parse(&p.bytes, true).ok())
                .filter(|m| m.method() == Some(&sip::Method::Invite));
            if let Some(m) = invites.next() {
                return m;
            }
        }
    }

    /// strowger's media leg: its address.
    fn leg(&self) -> SocketAddr {
        self.far.as_ref().expect("an answered call").0
    }

    /// Sends `bytes` from the browser's media address to strowger's leg.
    fn send(&self, n: &mut Net, sw: Id, bytes: Vec<u8>) {
        let (now, p) = (n.now, Packet::media(addr(BROWSER), self.leg(), bytes));
        n.sw(sw).deliver(p, now);
    }

    /// A nominating connectivity check, answered, then the DTLS handshake as client: the
    /// SRTP contexts its keys make.
    fn connect(&mut self, n: &mut Net, sw: Id) {
        self.check(n, sw);
        let fp = self.far.clone().expect("an answered call").3;
        let mut dtls = Dtls::new(&self.cert, Role::Client, fp, n.now).unwrap();
        for _ in 0..10 {
            while let Some(d) = dtls.poll_transmit() {
                self.send(n, sw, d.to_vec());
            }
            n.run_for(ms(20));
            for p in n.take_tapped(addr(BROWSER)) {
                if (20..=63).contains(&p.bytes[0]) {
                    dtls.handle(&p.bytes, n.now);
                }
            }
        }
        let DtlsState::Connected(keys) = dtls.state().clone() else {
            panic!("handshake not done: {:?}", dtls.state());
        };
        self.srtp = Some((context(&keys, true), context(&keys, false)));
    }

    /// A nominating connectivity check to strowger's leg, which must answer it.
    fn check(&mut self, n: &mut Net, sw: Id) {
        let (_, ufrag, pwd, _) = self.far.clone().expect("an answered call");
        let user = format!("{ufrag}:{}", self.ice.ufrag);
        self.send(n, sw, stun::binding_request(&[5; 12], &user, true, &pwd));
        n.run_for(ms(20));
        let checked = n
            .take_tapped(addr(BROWSER))
            .iter()
            .any(|p| stun::parse_binding_success(&p.bytes, &pwd) == Ok(addr(BROWSER)));
        assert!(checked, "the connectivity check answered");
    }

    /// Sends `payload` every 20 ms for `d`, encrypted: the payloads strowger sent the browser
    /// meanwhile, decrypted (a packet under another key fails the test).
    /// One second of talk both ways: the browser hears `phone`'s voice (0x11) and `phone`
    /// hears the browser's (0x42), 40 frames or more each.
    fn hears_and_is_heard_by(&mut self, n: &mut Net, sw: Id, phone: Id, name: &str) {
        let since = n.now;
        let heard = self.talk(n, sw, &[0x42; 160], secs(1));
        assert!(
            count_of(&heard, &[0x11; 160]) > 40,
            "the browser hears {name}"
        );
        let ua = n.agent(phone);
        let from_browser = ua
            .rtp
            .iter()
            .zip(&ua.rtp_payloads)
            .filter(|((t, ..), p)| *t > since && p.as_slice() == [0x42; 160])
            .count();
        assert!(
            from_browser > 40,
            "{name} hears the browser: {from_browser}"
        );
    }

    fn talk(
        &mut self,
        n: &mut Net,
        sw: Id,
        payload: &[u8],
        d: std::time::Duration,
    ) -> Vec<Vec<u8>> {
        let end = n.now + d;
        let mut heard = Vec::new();
        while n.now < end {
            let (tx, _) = self.srtp.as_mut().expect("a handshake");
            let packet = seal(tx, &rtp(self.seq, payload));
            self.seq = self.seq.wrapping_add(1);
            self.send(n, sw, packet);
            n.run_for(ms(20));
            let (_, rx) = self.srtp.as_mut().unwrap();
            for mut p in n.take_tapped(addr(BROWSER)) {
                let d = &mut p.bytes;
                if (128..=191).contains(&d[0]) && !(192..=223).contains(&d[1]) {
                    let k = rx.unprotect(d).expect("SRTP under the handshake's keys");
                    heard.push(d[12..k].to_vec());
                }
            }
        }
        heard
    }
}

/// strowger's media leg in the SDP of `m` (an offer or answer): its address, ICE
/// credentials and fingerprint.
fn far_end(m: &Message) -> (SocketAddr, String, String, webrtc::Fingerprint) {
    let sdp = SessionDescription::parse(m.body()).unwrap();
    let m = &sdp.media[0];
    assert_eq!(m.proto, "UDP/TLS/RTP/SAVPF");
    (
        SocketAddr::new(addr(SW).ip(), m.port),
        value(m, "ice-ufrag").to_owned(),
        value(m, "ice-pwd").to_owned(),
        webrtc::Fingerprint::parse(value(m, "fingerprint")).unwrap(),
    )
}

/// Packets in `heard` carrying `payload`.
fn count_of(heard: &[Vec<u8>], payload: &[u8]) -> usize {
    heard.iter().filter(|p| p.as_slice() == payload).count()
}

/// A browser dials the slot of a call parked on the other worker of two: its INVITE is handed
/// to that worker before anything is answered, so its WebRTC leg (ICE, DTLS) is made there,
/// beside the parked call, and the two hear each other under the handshake's keys.
#[test]
fn a_browser_retrieves_a_call_parked_on_the_other_worker_and_they_hear_each_other() {
    let mut n = Net::new(41);
    let sw = n.switch(&(config() + PARKING), &[SW], 2);
    let a = n.ua(ALICE, "alice");
    n.agent(a).send_rtp = true;
    n.agent(a).voice = vec![0x11; 160];
    let parked = n.invite(a, "sip:700@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, parked)));
    n.run_for(secs(1));
    let there = switch::owner(&n.agent(a).call(parked).call_id, 2);

    let mut browser = Browser::new(&mut n);
    browser.call(&mut n, sw, "701", &Browser::call_id_on(1 - there));
    assert_eq!(
        n.sw(sw).handed_off(),
        1,
        "handed to the parked call's worker"
    );
    assert_eq!(n.sw(sw).workers[1 - there].active_calls(), 0);
    assert!(n.sw(sw).workers[there].has_media_addr(browser.leg()));
    browser.connect(&mut n, sw);
    browser.hears_and_is_heard_by(&mut n, sw, a, "Alice");
}

/// A browser's call parked on its worker (its leg up, keyed) is retrieved by a phone whose
/// INVITE hashes to the other worker: the phone is handed to the browser's worker, and the
/// browser's DTLS association and keys carry on into the new call.
#[test]
fn a_phone_on_the_other_worker_retrieves_a_parked_browser_and_they_hear_each_other() {
    let mut n = Net::new(42);
    let sw = n.switch(&(config() + PARKING), &[SW], 2);
    let mut browser = Browser::new(&mut n);
    let call_id = Browser::call_id_on(0);
    browser.call(&mut n, sw, "700", &call_id);
    browser.connect(&mut n, sw);
    let parked = browser.talk(&mut n, sw, &[0x42; 160], secs(1));
    assert!(
        parked.len() > 40,
        "the slot and music, encrypted: {}",
        parked.len()
    );

    let user = (0..)
        .map(|i| format!("carol{i}"))
        .find(|u| switch::owner(&format!("call-{u}1@ua"), 2) == 1)
        .unwrap();
    let c = n.ua("127.0.0.1:5062", &user);
    n.agent(c).send_rtp = true;
    n.agent(c).voice = vec![0x11; 160];
    let r = n.invite(c, "sip:701@127.0.0.1", SW);
    assert_eq!(switch::owner(&n.agent(c).call(r).call_id, 2), 1);
    // The browser keeps talking while the phone calls (its packets keep the leg's media
    // flowing, as a browser's would).
    browser.talk(&mut n, sw, &[0x42; 160], ms(200));
    assert!(n.run_until(secs(2), confirmed(c, r)));
    assert_eq!(n.sw(sw).handed_off(), 1, "handed to the browser's worker");
    assert_eq!(n.sw(sw).workers[1].active_calls(), 0);
    browser.hears_and_is_heard_by(&mut n, sw, c, "Carol");
}

/// Attended transfer across workers where the consulted party is a browser: Alice calls Bob,
/// Bob consults 1001 (a browser over its WebSocket) in a call the other worker holds, and
/// refers Alice's call to it. The browser's leg moves to Alice's worker; the re-INVITE gives
/// it a port there, new ICE credentials and that worker's certificate, so the browser checks
/// the new port and shakes hands anew (it would keep its DTLS association, and the keys now on
/// the wrong worker, were the fingerprint unchanged); then Alice and the browser hear each
/// other under the new keys.
#[test]
fn a_browser_consulted_on_another_worker_is_transferred_with_a_new_handshake() {
    let Consulted {
        mut n,
        sw,
        mut browser,
        a,
        b,
        cb,
        consult,
        here,
        there,
        ..
    } = consulted_on_another_worker(50, "");
    let heard = browser.talk(&mut n, sw, &[0x42; 160], secs(1));
    assert!(count_of(&heard, &[0x22; 160]) > 40, "the browser hears Bob");
    let (first_leg, first_fp) = (browser.leg(), browser.far.clone().unwrap().3);

    let refer_to = crate::transfer::refer_to_replacing(&mut n, b, consult, "1001");
    n.refer(b, cb, &refer_to);
    let reinvite = browser.answer(&mut n, sw, secs(2));
    assert!(reinvite
        .header(sip::HeaderName::To)
        .unwrap()
        .contains("tag=b1"));
    assert_ne!(browser.leg(), first_leg, "a port of the other worker");
    assert!(n.sw(sw).workers[here].has_media_addr(browser.leg()));
    let fp = browser.far.clone().unwrap().3;
    match fp != first_fp {
        // A new fingerprint: a new DTLS association (RFC 8842 §4).
        true => browser.connect(&mut n, sw),
        // The same: the browser keeps its association and only checks the new port.
        false => browser.check(&mut n, sw),
    }
    assert!(n.run_until(secs(5), |n| {
        crate::transfer::notifies(n, b, cb).len() == 2
    }));
    assert_eq!(crate::transfer::notifies(&mut n, b, cb), [100, 200]);
    assert!(n.run_until(secs(5), crate::transfer::got_bye(b, consult)));
    browser.hears_and_is_heard_by(&mut n, sw, a, "Alice");
    assert_eq!(n.sw(sw).workers[there].active_calls(), 0);
}

/// Under `rtp.srtp = "require"`, the browser consulted on another worker answers the
/// re-INVITE that moves it with plain RTP. strowger does not take that answer: it ACKs the
/// 2xx, then ends the browser's leg with a BYE (Q.850 88), counts it in
/// `strowger_sdp_answers_refused_total`, logs why, and sends no media to that address. The
/// transfer fails as when a target refuses (NOTIFY 488): Alice is Bob's again.
#[test]
fn require_refuses_a_plain_answer_to_the_re_invite_that_moves_a_browser() {
    let Consulted {
        mut n,
        sw,
        browser,
        a,
        b,
        cb,
        consult,
        ..
    } = consulted_on_another_worker(90, "media_timeout_s = 0\nsrtp = \"require\"\n");

    let refer_to = crate::transfer::refer_to_replacing(&mut n, b, consult, "1001");
    n.refer(b, cb, &refer_to);
    let reinvite = Browser::invited(&mut n, secs(2));
    let plain = "v=0\r\no=- 1 3 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n\
                 m=audio 40100 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n";
    n.take_tapped(addr(BROWSER));
    let now = n.now;
    n.sw(sw)
        .deliver_over(&ok_text(&reinvite, plain), browser.ws(), now);
    n.run_for(ms(200));
    let to_browser: Vec<Message> = n
        .take_tapped(addr(BROWSER_WS))
        .iter()
        .filter_map(|p| Message::parse(&p.bytes, true).ok())
        .collect();
    let methods: Vec<String> = to_browser
        .iter()
        .filter_map(|m| m.method().map(|m| m.to_string()))
        .collect();
    assert_eq!(methods, ["ACK", "BYE"], "{to_browser:?}");
    assert_eq!(to_browser[1].header_named("Reason"), Some("Q.850;cause=88"));
    let rtp = n
        .take_tapped(addr(BROWSER))
        .iter()
        .filter(|p| (128..=191).contains(&p.bytes[0]))
        .count();
    assert_eq!(rtp, 0, "no RTP goes to the browser's plain answer");
    let metrics = n.sw(sw).scrape();
    assert!(
        metrics.contains("strowger_sdp_answers_refused_total 1\n"),
        "{metrics}"
    );
    let logs = n.sw(sw).logs();
    assert!(
        logs.iter()
            .any(|l| l.contains("rtp.srtp = \"require\"") && l.contains("plain RTP")),
        "{logs:?}"
    );
    assert!(n.run_until(secs(5), |n| {
        crate::transfer::notifies(n, b, cb).len() == 2
    }));
    let notified = crate::transfer::notifies(&mut n, b, cb);
    assert_eq!(notified[0], 100);
    assert!(notified[1] >= 300, "the transfer failed: {notified:?}");
    // As when a transfer target refuses: Alice is Bob's again, and they hear each other.
    n.run_for(ms(200));
    let since = n.now;
    n.run_for(secs(1));
    let heard = |ua: &Ua, voice: u8| {
        ua.rtp
            .iter()
            .zip(&ua.rtp_payloads)
            .filter(|((t, ..), p)| *t > since && p.as_slice() == [voice; 160])
            .count()
    };
    assert!(heard(n.agent(a), 0x22) > 40, "Alice hears Bob again");
    assert!(heard(n.agent(b), 0x11) > 40, "Bob hears Alice again");
}

/// Alice and Bob in a call (`cb`, Bob's side), and Bob's consultation (`consult`) answered by the
/// browser (1001) on the other worker, its DTLS keys agreed: where the cross-worker transfer tests
/// start. Seeds from `seed` on are tried until the consultation lands on the other worker
/// (`here` is the first call's, `there` the consultation's); `rtp` goes into the `[rtp]` table.
struct Consulted {
    n: Net,
    sw: Id,
    browser: Browser,
    a: Id,
    b: Id,
    cb: usize,
    consult: usize,
    here: usize,
    there: usize,
}

fn consulted_on_another_worker(seed: u64, rtp: &str) -> Consulted {
    for k in 0..32 {
        let mut n = Net::new(seed + k);
        let head = format!(
            "[rtp]\n{rtp}\
             [registrar]\nauthenticate = false\nkeepalive_s = 0\n\
             [vars]\nbridge_target = \"{BOB}\"\nself = \"{SW}\"\n"
        );
        let sw = n.switch(&crate::net::config(&head), &[SW], 2);
        n.sw(sw).shared.store.add_user("1001", "strowger", "pw");
        let mut browser = Browser::new(&mut n);
        browser.register(&mut n, sw);
        let a = n.ua(ALICE, "alice");
        let b = n.ua(BOB, &format!("bob{k}"));
        for (ua, voice) in [(a, 0x11), (b, 0x22)] {
            n.agent(ua).send_rtp = true;
            n.agent(ua).voice = vec![voice; 160];
        }
        let (ca, cb) = crate::transfer::alice_calls_bob(&mut n, a, b);
        let consult = n.invite(b, "sip:1001@127.0.0.1", SW);
        let here = switch::owner(&n.agent(a).call(ca).call_id, 2);
        let there = switch::owner(&n.agent(b).call(consult).call_id, 2);
        if here == there {
            continue;
        }
        browser.answer(&mut n, sw, secs(2));
        assert!(n.run_until(secs(2), confirmed(b, consult)));
        browser.connect(&mut n, sw);
        return Consulted {
            n,
            sw,
            browser,
            a,
            b,
            cb,
            consult,
            here,
            there,
        };
    }
    panic!("no consultation call landed on the other worker");
}
