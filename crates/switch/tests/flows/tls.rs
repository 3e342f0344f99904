//! SIP over TLS in the engine: a phone that registers over a TLS connection (the shell hands
//! its messages in as `Transport::Tls`) is bound with that transport, and a call to it goes out
//! as `Transport::Tls` to the address it registered from — the shell sends it over that
//! connection (RFC 5923 reuse) — with a TLS Via and SDES keys in its offer.

use crate::net;

use net::*;
use sip::transaction::{Peer, Transport};
use sip::Message;

#[test]
fn a_phone_registered_over_tls_is_called_over_tls() {
    let phone = addr("127.0.0.1:40610");
    let (_, _, to_phone) = register_then_call(Transport::Tls, phone, &phone.to_string());
    let invite = to_phone
        .iter()
        .find(|m| m.starts_with("INVITE "))
        .unwrap_or_else(|| panic!("no INVITE to the TLS phone: {to_phone:?}"));
    assert!(invite.contains("\r\nVia: SIP/2.0/TLS "), "{invite}");
    assert!(
        invite.starts_with("INVITE sip:1001@127.0.0.1:40610;transport=tls "),
        "{invite}"
    );
    // rtp.srtp = "offer": SDES keys on RTP/AVP, so a phone without SRTP still answers.
    assert!(invite.contains(" RTP/AVP "), "{invite}");
    assert!(
        invite.contains("a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:"),
        "{invite}"
    );
}

/// User 1001 registers from `phone` over `transport` with a Contact at `host` (answered 200),
/// then a trusted caller over UDP (ALICE) dials 1001: the switch, and what it sent `phone`.
pub fn register_then_call(
    transport: Transport,
    phone: std::net::SocketAddr,
    host: &str,
) -> (Net, Id, Vec<String>) {
    register_then_dial(transport, phone, host, "")
}

/// `register_then_call` where the caller dials `1001@{domain}`; a `domain` other than "" is
/// served by the proxy role.
pub fn register_then_dial(
    transport: Transport,
    phone: std::net::SocketAddr,
    host: &str,
    domain: &str,
) -> (Net, Id, Vec<String>) {
    register_then_dial_with(transport, phone, host, domain, "")
}

/// `register_then_dial` with `extra` at the head of the configuration (`[rtp]` settings).
pub fn register_then_dial_with(
    transport: Transport,
    phone: std::net::SocketAddr,
    host: &str,
    domain: &str,
    extra: &str,
) -> (Net, Id, Vec<String>) {
    let mut n = Net::new(7);
    let mut head = format!("{extra}[registrar]\nauthenticate = false\nkeepalive_s = 0\n");
    if !domain.is_empty() {
        head += &format!("[proxy]\ndomains = [\"{domain}\"]\n");
    }
    let sw = n.switch(&config(&head), &[SW], 1);
    let target = if domain.is_empty() { SW } else { domain };
    // `bridge user/1001` calls a known user's contacts (its REGISTER needs no password here).
    n.sw(sw).shared.store.add_user("1001", "strowger", "pw");
    let (via, param) = match transport {
        Transport::Tls => ("TLS", "tls"),
        Transport::Ws => ("WS", "ws"),
        Transport::Wss => ("WSS", "wss"),
        t => panic!("no connection transport: {t:?}"),
    };
    let register = register_1001(via, param, host);
    let now = n.now;
    let node = n.sw(sw).node();
    let msg = Message::parse(register.as_bytes(), false).unwrap();
    node.deliver_msg(
        msg,
        Peer {
            transport,
            addr: phone,
        },
        addr(SW),
        false,
        now,
    );
    let answers: Vec<Message> = node
        .drain()
        .into_iter()
        .filter(|p| p.to == phone)
        .filter_map(|p| Message::parse(&p.bytes, true).ok())
        .collect();
    assert_eq!(
        answers.first().and_then(|m| m.status()),
        Some(200),
        "{answers:?}"
    );

    // A trusted caller over UDP dials 1001 (default context: bridge user/1001).
    let alice = addr(ALICE);
    let invite = format!(
        "INVITE sip:1001@{target} SIP/2.0\r\nVia: SIP/2.0/UDP {alice};branch=z9hG4bK-inv1\r\n\
         Max-Forwards: 70\r\nFrom: <sip:alice@{alice}>;tag=a1\r\nTo: <sip:1001@{target}>\r\n\
         Call-ID: call-{param}@{alice}\r\nCSeq: 1 INVITE\r\nContact: <sip:alice@{alice}>\r\n\
         Content-Type: application/sdp\r\nContent-Length: {len}\r\n\r\n{sdp}",
        sdp = SDP,
        len = SDP.len()
    );
    n.sw(sw)
        .deliver(Packet::sip(alice, addr(SW), invite.into_bytes()), now);
    let to_phone = n
        .sw(sw)
        .node()
        .drain()
        .into_iter()
        .filter(|p| p.to == phone)
        .map(|p| String::from_utf8_lossy(&p.bytes).into_owned())
        .collect();
    (n, sw, to_phone)
}

/// 1001's REGISTER over a connection: `via` the Via transport (TLS, WS), `param` the
/// Contact's transport, `host` the phone's host name.
pub fn register_1001(via: &str, param: &str, host: &str) -> String {
    format!(
        "REGISTER sip:strowger SIP/2.0\r\nVia: SIP/2.0/{via} {host};branch=z9hG4bK-reg1\r\n\
         Max-Forwards: 70\r\nFrom: <sip:1001@strowger>;tag=r1\r\nTo: <sip:1001@strowger>\r\n\
         Call-ID: reg-{param}@{host}\r\nCSeq: 1 REGISTER\r\nContact: <sip:1001@{host};transport={param}>\r\n\
         Expires: 600\r\nContent-Length: 0\r\n\r\n"
    )
}

const SDP: &str = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n\
                   m=audio 40000 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n";
