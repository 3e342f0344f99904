//! Writing SIP messages: straight into one byte buffer, headers in the order given.

use crate::header::{HeaderName, Via};
use crate::message::Message;
use crate::method::Method;
use std::fmt::{Display, Write as _};
use std::net::SocketAddr;

/// Header section writer shared by requests and responses.
pub struct Builder {
    buf: String,
}

impl Builder {
    fn with_start_line(line: std::fmt::Arguments<'_>) -> Builder {
        let mut buf = String::with_capacity(512);
        let _ = write!(buf, "{line}\r\n");
        Builder { buf }
    }

    pub fn header(&mut self, name: &str, value: impl Display) -> &mut Self {
        let _ = write!(self.buf, "{name}: {value}\r\n");
        self
    }

    /// A header whose value is already text: copied without the formatting machinery, which
    /// costs several times the copy for the short values of a response.
    pub fn header_str(&mut self, name: &str, value: &str) -> &mut Self {
        self.header_parts(name, &[value])
    }

    /// A header whose value is the concatenation of `parts`, copied as text.
    fn header_parts(&mut self, name: &str, parts: &[&str]) -> &mut Self {
        self.buf.push_str(name);
        self.buf.push_str(": ");
        for p in parts {
            self.buf.push_str(p);
        }
        self.buf.push_str("\r\n");
        self
    }

    /// Ends the header section with Content-Length (and Content-Type when there is a body).
    pub fn finish(mut self, body: Option<(&str, &[u8])>) -> Vec<u8> {
        let (ct, body) = body.unwrap_or(("", b""));
        if !body.is_empty() {
            self.header_str("Content-Type", ct);
        }
        match body.len() {
            0 => self.header_str("Content-Length", "0"),
            n => self.header("Content-Length", n),
        };
        self.buf.push_str("\r\n");
        let mut out = self.buf.into_bytes();
        out.extend_from_slice(body);
        out
    }
}

/// A response to a received request (RFC 3261 §8.2.6): Vias, From, To, Call-ID and CSeq copied.
pub struct ResponseBuilder(pub Builder);

impl ResponseBuilder {
    /// `source`: where the request came from, written into the top Via as `received` and, when
    /// the client asked, `rport` (RFC 3261 §18.2.1, RFC 3581). `to_tag` is added when To has none.
    pub fn new(
        req: &Message,
        status: u16,
        reason: &str,
        source: Option<SocketAddr>,
        to_tag: Option<&str>,
    ) -> ResponseBuilder {
        let mut buf = String::with_capacity(512);
        buf.push_str("SIP/2.0 ");
        let _ = write!(buf, "{status}");
        buf.push(' ');
        buf.push_str(reason);
        buf.push_str("\r\n");
        let mut b = Builder { buf };
        for (i, via) in req.all(HeaderName::Via).enumerate() {
            match (i, source) {
                (0, Some(src)) => {
                    b.buf.push_str("Via: ");
                    stamp_received(via, req.top_via(), src, &mut b.buf);
                    b.buf.push_str("\r\n");
                }
                _ => {
                    b.header_str("Via", via);
                }
            }
        }
        for (name, h) in [("From", HeaderName::From), ("To", HeaderName::To)] {
            if let Some(v) = req.header(h) {
                match to_tag.filter(|_| h == HeaderName::To && req.to_tag().is_none()) {
                    Some(tag) => b.header_parts(name, &[v, ";tag=", tag]),
                    None => b.header_str(name, v),
                };
            }
        }
        for (name, h) in [("Call-ID", HeaderName::CallId), ("CSeq", HeaderName::CSeq)] {
            if let Some(v) = req.header(h) {
                b.header_str(name, v);
            }
        }
        ResponseBuilder(b)
    }

    pub fn header(&mut self, name: &str, value: impl Display) -> &mut Self {
        self.0.header(name, value);
        self
    }

    pub fn header_str(&mut self, name: &str, value: &str) -> &mut Self {
        self.0.header_str(name, value);
        self
    }

    pub fn finish(self, body: Option<(&str, &[u8])>) -> Vec<u8> {
        self.0.finish(body)
    }
}

/// Writes `via` (parsed: `parsed`) to `out` with the request's source stamped in.
fn stamp_received(
    via: &str,
    parsed: Result<Via<'_>, &'static str>,
    src: SocketAddr,
    out: &mut String,
) {
    let Ok(parsed) = parsed else {
        out.push_str(via);
        return;
    };
    // Rewrite the parameter list: fill a bare `rport`, and add `received` (RFC 3581 requires it
    // whenever rport is present; RFC 3261 when the host differs from the source).
    let head_end = via.len() - parsed.params.0.len();
    out.push_str(&via[..head_end]);
    let mut rport = false;
    for (name, value) in parsed.params.iter() {
        if name.eq_ignore_ascii_case("rport") {
            rport = true;
            let _ = write!(out, ";rport={}", src.port());
        } else if name.eq_ignore_ascii_case("received") {
            continue;
        } else {
            out.push(';');
            out.push_str(name);
            if let Some(v) = value {
                out.push('=');
                out.push_str(v);
            }
        }
    }
    if rport || crate::uri::host_ip(parsed.host) != Some(src.ip()) {
        let _ = write!(out, ";received={}", src.ip());
    }
}

/// A new request (UAC side of a B2BUA leg, or in-dialog requests).
pub struct RequestBuilder(pub Builder);

impl RequestBuilder {
    pub fn new(method: &Method, uri: &str) -> RequestBuilder {
        RequestBuilder(Builder::with_start_line(format_args!(
            "{method} {uri} SIP/2.0"
        )))
    }

    pub fn header(&mut self, name: &str, value: impl Display) -> &mut Self {
        self.0.header(name, value);
        self
    }

    pub fn finish(self, body: Option<(&str, &[u8])>) -> Vec<u8> {
        self.0.finish(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_copies_and_stamps() {
        let req = Message::parse(
            b"OPTIONS sip:x@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 10.0.0.1:5062;branch=z9hG4bKa;rport\r\n\
Via: SIP/2.0/UDP h;branch=z9hG4bKb\r\nFrom: <sip:a@b>;tag=1\r\nTo: <sip:x@c>\r\nCall-ID: c1\r\nCSeq: 2 OPTIONS\r\n\r\n",
            true,
        )
        .unwrap();
        let src: SocketAddr = "127.0.0.1:7000".parse().unwrap();
        let mut r = ResponseBuilder::new(&req, 200, "OK", Some(src), Some("t9"));
        r.header("Allow", "INVITE, ACK");
        let bytes = r.finish(Some(("application/sdp", b"v=0\r\n")));
        let resp = Message::parse(&bytes, true).unwrap();
        assert_eq!(resp.status(), Some(200));
        let vias: Vec<_> = resp.all(HeaderName::Via).collect();
        assert_eq!(
            vias[0],
            "SIP/2.0/UDP 10.0.0.1:5062;branch=z9hG4bKa;rport=7000;received=127.0.0.1"
        );
        assert_eq!(vias[1], "SIP/2.0/UDP h;branch=z9hG4bKb");
        assert_eq!(resp.header(HeaderName::To), Some("<sip:x@c>;tag=t9"));
        assert_eq!(resp.body(), b"v=0\r\n");
        assert_eq!(resp.header(HeaderName::ContentLength), Some("5"));
    }
}
