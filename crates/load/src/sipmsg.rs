//! A zero-allocation scan of the few SIP fields a UAC needs from what a server sends it: the
//! start line, Call-ID, CSeq, the To tag, Contact, Content-Length and the body (for the SDP
//! answer's address). Compact header forms (RFC 3261 §7.3.3) are understood. The full parser of
//! the `sip` crate builds owned header tables; at tens of thousands of messages a second this
//! scan keeps the generator's cost per message to a walk over the bytes.

use std::net::{IpAddr, SocketAddr};

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    #[default]
    Other,
    Response(u16),
    Request(Method),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Invite,
    Ack,
    Bye,
    Cancel,
    Options,
    Other,
}

impl Method {
    fn from(s: &str) -> Method {
        match s {
            "INVITE" => Method::Invite,
            "ACK" => Method::Ack,
            "BYE" => Method::Bye,
            "CANCEL" => Method::Cancel,
            "OPTIONS" => Method::Options,
            _ => Method::Other,
        }
    }
}

/// The fields of one message, borrowed from its datagram.
#[derive(Debug, Default)]
pub struct Scan<'a> {
    pub kind: Kind,
    pub call_id: &'a str,
    pub cseq_num: u32,
    pub cseq_method: Option<Method>,
    /// The whole To header value (for echoing it in a response) and its tag.
    pub to: &'a str,
    pub to_tag: &'a str,
    pub from: &'a str,
    /// Every Via value in order, as one span per header line (a request's response repeats them).
    pub vias: [&'a str; 4],
    pub via_count: usize,
    /// The URI inside the first Contact.
    pub contact_uri: &'a str,
    pub body: &'a [u8],
}

/// Scans one datagram; None when it does not frame as SIP.
pub fn scan(data: &[u8]) -> Option<Scan<'_>> {
    let head_end = find(data, b"\r\n\r\n")?;
    let head = std::str::from_utf8(&data[..head_end]).ok()?;
    let mut lines = head.split("\r\n");
    let first = lines.next()?;
    let mut s = Scan::default();
    if let Some(rest) = first.strip_prefix("SIP/2.0 ") {
        let code = rest.get(..3)?.parse().ok()?;
        s.kind = Kind::Response(code);
    } else {
        let (m, rest) = first.split_once(' ')?;
        if !rest.ends_with("SIP/2.0") {
            return None;
        }
        s.kind = Kind::Request(Method::from(m));
    }
    let mut content_length: Option<usize> = None;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let name = name.trim_end();
        let value = value.trim();
        if eq(name, "Call-ID") || name == "i" {
            s.call_id = value;
        } else if eq(name, "CSeq") {
            let (n, m) = value.split_once(' ')?;
            s.cseq_num = n.trim().parse().ok()?;
            s.cseq_method = Some(Method::from(m.trim()));
        } else if eq(name, "To") || name == "t" {
            s.to = value;
            s.to_tag = param(value, "tag").unwrap_or("");
        } else if eq(name, "From") || name == "f" {
            s.from = value;
        } else if eq(name, "Via") || name == "v" {
            if s.via_count < s.vias.len() {
                s.vias[s.via_count] = value;
                s.via_count += 1;
            }
        } else if (eq(name, "Contact") || name == "m") && s.contact_uri.is_empty() {
            s.contact_uri = match (value.find('<'), value.find('>')) {
                (Some(a), Some(b)) if a < b => &value[a + 1..b],
                _ => value.split(';').next().unwrap_or(value),
            };
        } else if eq(name, "Content-Length") || name == "l" {
            content_length = value.parse().ok();
        }
    }
    if s.call_id.is_empty() || s.cseq_method.is_none() {
        return None;
    }
    let body = &data[head_end + 4..];
    s.body = match content_length {
        Some(n) if n <= body.len() => &body[..n],
        Some(_) => return None,
        None => body,
    };
    Some(s)
}

fn eq(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A `;name=value` parameter of a header value (outside any `<...>`).
fn param<'a>(value: &'a str, name: &str) -> Option<&'a str> {
    let after = match value.rfind('>') {
        Some(i) => &value[i + 1..],
        None => value,
    };
    after.split(';').skip(1).find_map(|p| {
        let (k, v) = p.split_once('=')?;
        eq(k.trim(), name).then_some(v.trim())
    })
}

/// The RTP address of an SDP answer: the audio `m=` port with the media- or session-level `c=`.
pub fn sdp_audio(body: &[u8]) -> Option<SocketAddr> {
    let text = std::str::from_utf8(body).ok()?;
    let mut session_c: Option<IpAddr> = None;
    let mut media_c: Option<IpAddr> = None;
    let mut port: Option<u16> = None;
    for line in text.lines() {
        let line = line.trim_end();
        if let Some(c) = line.strip_prefix("c=") {
            let ip = c.split_whitespace().nth(2)?.split('/').next()?.parse().ok();
            if port.is_some() {
                media_c = ip;
            } else {
                session_c = ip;
            }
        } else if let Some(m) = line.strip_prefix("m=") {
            if port.is_some() {
                break; // only the first stream
            }
            let mut f = m.split_whitespace();
            if f.next()? != "audio" {
                return None;
            }
            port = f.next()?.parse().ok();
        }
    }
    let port = port.filter(|p| *p != 0)?;
    Some(SocketAddr::new(media_c.or(session_c)?, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &[u8] = b"SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP 127.0.0.1:5070;branch=z9hG4bK1;rport=5070\r\n\
From: <sip:load@127.0.0.1>;tag=abc\r\nTo: <sip:44444@127.0.0.1>;tag=srv9\r\ni: L1-7-2\r\n\
CSeq: 1 INVITE\r\nm: <sip:44444@127.0.0.1:5060;transport=udp>\r\nContent-Type: application/sdp\r\n\
l: 88\r\n\r\nv=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.2\r\nt=0 0\r\nm=audio 20002 RTP/AVP 0\r\n";

    #[test]
    fn scans_a_response_with_compact_headers_and_sdp() {
        let s = scan(OK).unwrap();
        assert_eq!(s.kind, Kind::Response(200));
        assert_eq!(s.call_id, "L1-7-2");
        assert_eq!((s.cseq_num, s.cseq_method), (1, Some(Method::Invite)));
        assert_eq!(s.to_tag, "srv9");
        assert_eq!(s.contact_uri, "sip:44444@127.0.0.1:5060;transport=udp");
        assert_eq!(s.via_count, 1);
        assert_eq!(s.body.len(), 88);
        assert_eq!(sdp_audio(s.body), Some("127.0.0.2:20002".parse().unwrap()));
    }

    #[test]
    fn scans_a_request_and_rejects_garbage() {
        let bye = b"BYE sip:load@127.0.0.1:5070 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bKx\r\n\
From: <sip:44444@h>;tag=s\r\nTo: <sip:load@h>;tag=c\r\nCall-ID: L1-0-0\r\nCSeq: 2 BYE\r\nContent-Length: 0\r\n\r\n";
        let s = scan(bye).unwrap();
        assert_eq!(s.kind, Kind::Request(Method::Bye));
        assert_eq!(s.to_tag, "c");
        assert!(scan(b"hello\r\n\r\n").is_none());
        assert!(scan(b"\r\n\r\n").is_none());
        assert!(scan(&OK[..OK.len() - 5]).is_none(), "short body");
    }
}
