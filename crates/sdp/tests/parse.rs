use std::net::IpAddr;

use sdp::{Attribute, Direction, SessionDescription};

/// RFC 5118 §4.6: IPv6 connection address, host name in o=.
const IPV6: &str = "v=0\r\n\
o=bob 280744730 28977631 IN IP6 host.example.com\r\n\
s= \r\n\
c=IN IP6 2001:db8::9:1\r\n\
t=0 0\r\n\
m=audio 22334 RTP/AVP 0\r\n\
a=rtpmap:0 PCMU/8000\r\n";

#[test]
fn parses_ipv6_session() {
    let sdp: SessionDescription = IPV6.parse().unwrap();
    assert_eq!(sdp.origin.username, "bob");
    assert_eq!(sdp.origin.session_id, "280744730");
    assert_eq!(sdp.origin.session_version, 28977631);
    assert_eq!(sdp.origin.addr_type, "IP6");
    assert_eq!(sdp.origin.address, "host.example.com");
    assert_eq!(sdp.connection, Some("2001:db8::9:1".parse().unwrap()));
    assert_eq!(sdp.media[0].port, 22334);
    assert_eq!(sdp.media[0].encoding(0), Some(("PCMU", 8000)));
}

#[test]
fn serialization_round_trips_in_rfc_order() {
    let sdp: SessionDescription = IPV6.parse().unwrap();
    assert_eq!(sdp.to_string(), IPV6);
    assert_eq!(sdp.to_string().parse::<SessionDescription>().unwrap(), sdp);
}

#[test]
fn typed_attributes_and_media_level_connection() {
    let body = "v=0\n\
o=- 1 2 IN IP4 192.0.2.1\n\
s=-\n\
t=0 0\n\
a=recvonly\n\
m=audio 4000/2 RTP/AVP 8 101\n\
c=IN IP4 198.51.100.7/127\n\
b=AS:64\n\
a=rtpmap:101 telephone-event/8000\n\
a=fmtp:101 0-15\n\
a=ptime:30\n\
a=maxptime:60\n\
a=rtcp:5001 IN IP4 198.51.100.8\n\
a=rtpmap:bogus\n\
a=x-custom:value with spaces\n";
    let sdp = SessionDescription::parse(body.as_bytes()).unwrap();
    let m = &sdp.media[0];
    assert_eq!(sdp.connection, None);
    assert_eq!(m.connection, Some(IpAddr::from([198, 51, 100, 7])));
    assert_eq!(m.port_count, Some(2));
    assert_eq!(m.encoding(8), Some(("PCMA", 8000)), "static payload type");
    assert_eq!(m.encoding(101), Some(("telephone-event", 8000)));
    assert_eq!(m.fmtp(101), Some("0-15"));
    assert_eq!(m.ptime(), Some(30));
    assert!(m.attributes.contains(&Attribute::MaxPtime(60)));
    assert_eq!(
        m.rtcp(),
        Some((5001, Some(IpAddr::from([198, 51, 100, 8]))))
    );
    assert_eq!(
        m.direction(&sdp),
        Direction::RecvOnly,
        "session-level default"
    );
    assert!(m.attributes.contains(&Attribute::Other {
        name: "rtpmap".into(),
        value: Some("bogus".into())
    }));
    assert!(m.attributes.contains(&Attribute::Other {
        name: "x-custom".into(),
        value: Some("value with spaces".into())
    }));
}

#[test]
fn rejects_what_negotiation_cannot_use() {
    let cases = [
        ("", 0),
        ("v=1\r\n", 1),
        ("v=0\r\ns=-\r\n", 0),
        ("v=0\r\no=- 1 x IN IP4 1.2.3.4\r\ns=-\r\n", 2),
        (
            "v=0\r\no=- 1 1 IN IP4 a\r\ns=-\r\nc=IN IP4 host.example.com\r\n",
            4,
        ),
        (
            "v=0\r\no=- 1 1 IN IP4 a\r\ns=-\r\nc=IN IP4 2001:db8::1\r\n",
            4,
        ),
        (
            "v=0\r\no=- 1 1 IN IP4 a\r\ns=-\r\nm=audio x RTP/AVP 0\r\n",
            4,
        ),
        ("v=0\r\no=- 1 1 IN IP4 a\r\ns=-\r\ngarbage\r\n", 4),
    ];
    for (body, line) in cases {
        let e = SessionDescription::parse(body.as_bytes()).unwrap_err();
        assert_eq!(e.line, line, "{body:?}: {e}");
    }
    assert!(SessionDescription::parse(b"v=0\r\n\xff\xfe").is_err());
}

/// SDP comes from the internet: no input may panic, truncated or random.
#[test]
fn hostile_input_never_panics() {
    let valid = IPV6.as_bytes();
    for end in 0..valid.len() {
        let _ = SessionDescription::parse(&valid[..end]);
    }
    let alphabet = b"vosctma=:/ \r\n0123456789IPN46.-rtpmap";
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..5000 {
        let len = (next() % 200) as usize;
        let bytes: Vec<u8> = (0..len)
            .map(|_| match next() % 4 {
                0 => next() as u8,
                _ => alphabet[(next() % alphabet.len() as u64) as usize],
            })
            .collect();
        let _ = SessionDescription::parse(&bytes);
        let mut mutated = valid.to_vec();
        let at = (next() as usize) % mutated.len();
        mutated[at] = next() as u8;
        if let Ok(sdp) = SessionDescription::parse(&mutated) {
            let _ = sdp.to_string();
        }
    }
}
