//! Lenient, panic-free parsing: unknown line types and unknown attributes are
//! skipped or kept verbatim; only what negotiation depends on is an error.

use std::fmt;
use std::net::IpAddr;

use crate::model::{Attribute, Direction, Media, Origin, SessionDescription};

/// Why a body is not usable SDP; `line` is 1-based (0 when the whole body is at fault).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    pub line: usize,
    pub reason: &'static str,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "invalid SDP: {}", self.reason)
        } else {
            write!(f, "invalid SDP line {}: {}", self.line, self.reason)
        }
    }
}

impl std::error::Error for ParseError {}

impl std::str::FromStr for SessionDescription {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, ParseError> {
        SessionDescription::parse(s.as_bytes())
    }
}

impl SessionDescription {
    /// Parses a body as received; accepts CRLF or bare LF line ends.
    pub fn parse(body: &[u8]) -> Result<SessionDescription, ParseError> {
        let text = std::str::from_utf8(body).map_err(|_| err(0, "not UTF-8"))?;
        let mut lines = text
            .split('\n')
            .map(|l| l.strip_suffix('\r').unwrap_or(l))
            .enumerate()
            .map(|(i, l)| (i + 1, l))
            .filter(|(_, l)| !l.trim().is_empty());

        match lines.next() {
            Some((_, "v=0")) => {}
            Some((n, _)) => return Err(err(n, "the first line must be v=0")),
            None => return Err(err(0, "empty body")),
        }

        let mut origin = None;
        let mut session_name = None;
        let mut connection = None;
        let mut time = (0, 0);
        let mut attributes = Vec::new();
        let mut media: Vec<Media> = Vec::new();

        for (n, line) in lines {
            let Some((kind, value)) = line.split_once('=') else {
                return Err(err(n, "expected <type>=<value>"));
            };
            match (kind, media.last_mut()) {
                ("o", None) => origin = Some(parse_origin(value).ok_or(err(n, "bad o= line"))?),
                ("s", None) => session_name = Some(value.to_owned()),
                ("t", None) => time = parse_time(value).ok_or(err(n, "bad t= line"))?,
                ("c", None) => connection = Some(parse_connection(value, n)?),
                ("c", Some(m)) => m.connection = Some(parse_connection(value, n)?),
                ("a", None) => attributes.push(parse_attribute(value)),
                ("a", Some(m)) => m.attributes.push(parse_attribute(value)),
                ("m", _) => media.push(parse_media(value).ok_or(err(n, "bad m= line"))?),
                (k, _) if k.len() == 1 && k.bytes().all(|b| b.is_ascii_lowercase()) => {}
                _ => return Err(err(n, "expected <type>=<value>")),
            }
        }

        Ok(SessionDescription {
            origin: origin.ok_or(err(0, "missing o= line"))?,
            session_name: session_name.ok_or(err(0, "missing s= line"))?,
            connection,
            time,
            attributes,
            media,
        })
    }
}

fn err(line: usize, reason: &'static str) -> ParseError {
    ParseError { line, reason }
}

fn parse_origin(value: &str) -> Option<Origin> {
    let f: Vec<&str> = value.split_ascii_whitespace().collect();
    let [username, id, version, "IN", addr_type, address] = f[..] else {
        return None;
    };
    Some(Origin {
        username: username.to_owned(),
        session_id: id.to_owned(),
        session_version: version.parse().ok()?,
        addr_type: addr_type.to_owned(),
        address: address.to_owned(),
    })
}

fn parse_time(value: &str) -> Option<(u64, u64)> {
    let (start, stop) = value.trim().split_once(' ')?;
    Some((start.parse().ok()?, stop.trim().parse().ok()?))
}

/// `IN IP4 <addr>[/ttl[/count]]`. Host names cannot be used without a resolver, so
/// they are rejected here rather than failing later in negotiation.
fn parse_connection(value: &str, n: usize) -> Result<IpAddr, ParseError> {
    let f: Vec<&str> = value.split_ascii_whitespace().collect();
    let ["IN", addr_type @ ("IP4" | "IP6"), addr] = f[..] else {
        return Err(err(n, "c= must be IN IP4|IP6 <address>"));
    };
    let addr: IpAddr = addr
        .split('/')
        .next()
        .unwrap_or_default()
        .parse()
        .map_err(|_| err(n, "c= address is not an IP literal"))?;
    if addr.is_ipv4() != (addr_type == "IP4") {
        return Err(err(n, "c= address does not match its address type"));
    }
    Ok(addr)
}

fn parse_media(value: &str) -> Option<Media> {
    let mut f = value.split_ascii_whitespace();
    let kind = f.next()?.to_owned();
    let port = f.next()?;
    let (port, port_count) = match port.split_once('/') {
        Some((port, count)) => (port.parse().ok()?, Some(count.parse().ok()?)),
        None => (port.parse().ok()?, None),
    };
    let proto = f.next()?.to_owned();
    Some(Media {
        kind,
        port,
        port_count,
        proto,
        formats: f.map(str::to_owned).collect(),
        connection: None,
        attributes: Vec::new(),
    })
}

fn parse_attribute(value: &str) -> Attribute {
    let (name, arg) = match value.split_once(':') {
        Some((name, arg)) => (name, Some(arg)),
        None => (value, None),
    };
    typed_attribute(name, arg).unwrap_or_else(|| Attribute::Other {
        name: name.to_owned(),
        value: arg.map(str::to_owned),
    })
}

fn typed_attribute(name: &str, arg: Option<&str>) -> Option<Attribute> {
    Some(match (name, arg) {
        ("rtpmap", Some(arg)) => {
            let (pt, map) = arg.split_once(' ')?;
            let mut parts = map.trim().split('/');
            let encoding = parts.next().filter(|e| !e.is_empty())?.to_owned();
            let clock = parts.next()?.parse().ok()?;
            let channels = parts.next().map(str::parse).transpose().ok()?;
            Attribute::Rtpmap {
                pt: payload_type(pt)?,
                encoding,
                clock,
                channels,
            }
        }
        ("fmtp", Some(arg)) => {
            let (pt, params) = arg.split_once(' ')?;
            Attribute::Fmtp {
                pt: payload_type(pt)?,
                params: params.trim().to_owned(),
            }
        }
        ("ptime", Some(arg)) => Attribute::Ptime(arg.trim().parse().ok()?),
        ("maxptime", Some(arg)) => Attribute::MaxPtime(arg.trim().parse().ok()?),
        ("rtcp", Some(arg)) => {
            let mut f = arg.split_ascii_whitespace();
            let port = f.next()?.parse().ok()?;
            let addr = match (f.next(), f.next(), f.next()) {
                (None, ..) => None,
                (Some("IN"), Some("IP4" | "IP6"), Some(addr)) => Some(addr.parse().ok()?),
                _ => return None,
            };
            Attribute::Rtcp { port, addr }
        }
        ("crypto", Some(arg)) => Attribute::Crypto(crate::Crypto::parse(arg)?),
        (name, None) => Attribute::Direction(Direction::from_name(name)?),
        _ => return None,
    })
}

fn payload_type(s: &str) -> Option<u8> {
    s.parse().ok().filter(|pt| *pt < 128)
}
