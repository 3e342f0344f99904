//! The typed header fields every layer asks about (validation, transaction keys, dialogs, a
//! proxy's checks), parsed once per message on first use and kept as offsets into the header
//! value they came from, so the second reader gets the same view without parsing again.

use crate::header::{CSeq, HeaderName, NameAddr, Params, Via};
use crate::message::Message;
use crate::uri::Uri;
use std::cell::OnceCell;

/// A field's parse, kept by the message (`Err`: why it does not parse, for a 400's Warning).
type Kept<T> = OnceCell<Result<T, &'static str>>;

/// What a message has parsed so far; cloned with the message.
#[derive(Clone, Debug, Default)]
pub(crate) struct Fields {
    via: Kept<ViaAt>,
    from: Kept<NameAddrAt>,
    to: Kept<NameAddrAt>,
    cseq: Kept<CSeq>,
    uri: Kept<UriAt>,
    route: Kept<(NameAddrAt, UriAt)>,
}

/// `&str` pieces of a view as byte offsets into the header value they borrow from.
#[derive(Clone, Copy, Debug, Default)]
struct At(u32, u32);

impl At {
    /// `s` must lie inside `base`; anything else (an empty literal a parser put in) is empty.
    fn of(base: &str, s: &str) -> At {
        let off = (s.as_ptr() as usize).wrapping_sub(base.as_ptr() as usize);
        if s.is_empty() || off + s.len() > base.len() {
            return At(0, 0);
        }
        At(off as u32, (off + s.len()) as u32)
    }
    fn get(self, base: &str) -> &str {
        base.get(self.0 as usize..self.1 as usize).unwrap_or("")
    }
}

#[derive(Clone, Copy, Debug)]
struct UriAt {
    scheme: At,
    user: Option<At>,
    password: Option<At>,
    host: At,
    port: Option<u16>,
    params: At,
    headers: Option<At>,
    opaque: At,
}

impl UriAt {
    fn of(b: &str, u: &Uri) -> UriAt {
        UriAt {
            scheme: At::of(b, u.scheme),
            user: u.user.map(|s| At::of(b, s)),
            password: u.password.map(|s| At::of(b, s)),
            host: At::of(b, u.host),
            port: u.port,
            params: At::of(b, u.params.0),
            headers: u.headers.map(|s| At::of(b, s)),
            opaque: At::of(b, u.opaque),
        }
    }
    fn view(self, b: &str) -> Uri<'_> {
        Uri {
            scheme: self.scheme.get(b),
            user: self.user.map(|a| a.get(b)),
            password: self.password.map(|a| a.get(b)),
            host: self.host.get(b),
            port: self.port,
            params: Params(self.params.get(b)),
            headers: self.headers.map(|a| a.get(b)),
            opaque: self.opaque.get(b),
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct NameAddrAt {
    display: Option<At>,
    uri: At,
    params: At,
    bracketed: bool,
}

impl NameAddrAt {
    fn of(b: &str, n: &NameAddr) -> NameAddrAt {
        NameAddrAt {
            display: n.display.map(|s| At::of(b, s)),
            uri: At::of(b, n.uri),
            params: At::of(b, n.params.0),
            bracketed: n.bracketed,
        }
    }
    fn view(self, b: &str) -> NameAddr<'_> {
        NameAddr {
            display: self.display.map(|a| a.get(b)),
            uri: self.uri.get(b),
            params: Params(self.params.get(b)),
            bracketed: self.bracketed,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct ViaAt {
    transport: At,
    host: At,
    port: Option<u16>,
    params: At,
}

/// The typed fields, parsed on first use.
impl Message {
    /// The top Via.
    pub fn top_via(&self) -> Result<Via<'_>, &'static str> {
        let b = self.header(HeaderName::Via).ok_or("missing Via header")?;
        let at = self.fields.via.get_or_init(|| {
            Via::parse(b).map(|v| ViaAt {
                transport: At::of(b, v.transport),
                host: At::of(b, v.host),
                port: v.port,
                params: At::of(b, v.params.0),
            })
        });
        at.map(|v| Via {
            transport: v.transport.get(b),
            host: v.host.get(b),
            port: v.port,
            params: Params(v.params.get(b)),
        })
    }

    /// The From header.
    pub fn from_addr(&self) -> Result<NameAddr<'_>, &'static str> {
        self.name_addr(HeaderName::From, &self.fields.from)
    }

    /// The To header.
    pub fn to_addr(&self) -> Result<NameAddr<'_>, &'static str> {
        self.name_addr(HeaderName::To, &self.fields.to)
    }

    /// The From tag ("" if none or From does not parse).
    pub fn from_tag(&self) -> &str {
        self.from_addr().ok().and_then(|n| n.tag()).unwrap_or("")
    }

    /// The To tag (None before the dialog has one, or if To does not parse).
    pub fn to_tag(&self) -> Option<&str> {
        self.to_addr().ok().and_then(|n| n.tag())
    }

    /// The CSeq header.
    pub fn cseq(&self) -> Result<&CSeq, &'static str> {
        let kept = self.fields.cseq.get_or_init(|| {
            let v = self.header(HeaderName::CSeq).ok_or("missing CSeq header")?;
            CSeq::parse(v)
        });
        kept.as_ref().map_err(|e| *e)
    }

    /// The Request-URI (an error for a response).
    pub fn uri(&self) -> Result<Uri<'_>, &'static str> {
        let b = self.request_uri().ok_or("not a request")?;
        let at = self
            .fields
            .uri
            .get_or_init(|| Uri::parse(b).map(|u| UriAt::of(b, &u)));
        at.map(|u| u.view(b))
    }

    /// The top Route and its URI (None without a Route).
    pub fn top_route(&self) -> Option<Result<(NameAddr<'_>, Uri<'_>), &'static str>> {
        let b = self.header(HeaderName::Route)?;
        let at = self.fields.route.get_or_init(|| {
            let n = NameAddr::parse(b)?;
            let u = Uri::parse(n.uri)?;
            Ok((NameAddrAt::of(b, &n), UriAt::of(b, &u)))
        });
        Some(at.map(|(n, u)| (n.view(b), u.view(b))))
    }

    fn name_addr(
        &self,
        name: HeaderName,
        kept: &Kept<NameAddrAt>,
    ) -> Result<NameAddr<'_>, &'static str> {
        let b = self.header(name).ok_or("missing header")?;
        let at = kept.get_or_init(|| NameAddr::parse(b).map(|n| NameAddrAt::of(b, &n)));
        at.map(|n| n.view(b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INVITE: &[u8] = b"INVITE sip:bob@example.com:5070;transport=udp SIP/2.0\r\n\
Via: SIP/2.0/UDP 10.0.0.1:5062;branch=z9hG4bK-1;rport, SIP/2.0/TCP 10.0.0.2;branch=z9hG4bK-0\r\n\
Route: <sip:proxy.example.com;lr;rr=abc>\r\n\
From: \"Alice\" <sip:alice@example.com>;tag=a1\r\n\
To: sip:bob@example.com\r\n\
Call-ID: c1\r\n\
CSeq: 7 INVITE\r\n\r\n";

    #[test]
    fn fields_read_twice_are_the_same_as_parsed_directly() {
        let m = Message::parse(INVITE, true).unwrap();
        for _ in 0..2 {
            let via = m.top_via().unwrap();
            assert_eq!(via, Via::parse(m.header(HeaderName::Via).unwrap()).unwrap());
            assert_eq!(
                (via.host, via.port, via.branch()),
                ("10.0.0.1", Some(5062), Some("z9hG4bK-1"))
            );
            assert_eq!(m.from_addr().unwrap().display, Some("\"Alice\""));
            assert_eq!(m.from_tag(), "a1");
            assert_eq!(m.to_tag(), None);
            assert_eq!(m.to_addr().unwrap().uri, "sip:bob@example.com");
            assert_eq!(m.cseq().unwrap().seq, 7);
            let u = m.uri().unwrap();
            assert_eq!(u, Uri::parse(m.request_uri().unwrap()).unwrap());
            assert_eq!(
                (u.user, u.host, u.port),
                (Some("bob"), "example.com", Some(5070))
            );
            let (route, ruri) = m.top_route().unwrap().unwrap();
            assert_eq!(ruri.params.get("rr"), Some("abc"));
            assert_eq!(
                (route.uri, ruri.host),
                ("sip:proxy.example.com;lr;rr=abc", "proxy.example.com")
            );
        }
        // Clones keep what was parsed, and read the same.
        let c = m.clone();
        assert_eq!(c.from_tag(), "a1");
    }

    #[test]
    fn a_field_that_does_not_parse_says_why_every_time() {
        let m = Message::parse(
            b"SIP/2.0 200 OK\r\nVia: SIP/3.0/UDP h\r\nFrom: <sip:a@b\r\nCSeq: x\r\n\r\n",
            true,
        )
        .unwrap();
        for _ in 0..2 {
            assert_eq!(m.top_via(), Err("Via protocol is not SIP/2.0"));
            assert_eq!(m.from_addr(), Err("missing '>' after URI"));
            assert!(m.to_addr().is_err());
            assert!(m.cseq().is_err());
            assert_eq!(m.uri(), Err("not a request"));
            assert!(m.top_route().is_none());
        }
    }
}
