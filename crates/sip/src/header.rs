//! Header names and typed views of the header values the call path needs.
//!
//! Views borrow from the message and are parsed on demand; each returns `Err(reason)` with a
//! short text that goes into a 400's Warning, so a sender learns what was wrong.

use crate::method::Method;
use crate::uri::Uri;

macro_rules! header_names {
    ($($variant:ident => $text:literal $(| $compact:literal)?),* $(,)?) => {
        /// Header names strowger reads; anything else is `Other` and is kept as written.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum HeaderName { $($variant,)* Other }

        impl HeaderName {
            /// Case-insensitive, with RFC 3261 §7.3.3 compact forms.
            pub fn from_bytes(b: &[u8]) -> HeaderName {
                $(
                    if b.eq_ignore_ascii_case($text.as_bytes()) $(|| b.eq_ignore_ascii_case($compact.as_bytes()))? {
                        return HeaderName::$variant;
                    }
                )*
                HeaderName::Other
            }
            pub fn as_str(self) -> &'static str {
                match self { $(HeaderName::$variant => $text,)* HeaderName::Other => "" }
            }
        }
    };
}

header_names! {
    Via => "Via" | "v",
    From => "From" | "f",
    To => "To" | "t",
    CallId => "Call-ID" | "i",
    CSeq => "CSeq",
    Contact => "Contact" | "m",
    MaxForwards => "Max-Forwards",
    ContentLength => "Content-Length" | "l",
    ContentType => "Content-Type" | "c",
    ContentEncoding => "Content-Encoding" | "e",
    Route => "Route",
    RecordRoute => "Record-Route",
    Path => "Path",
    Expires => "Expires",
    MinExpires => "Min-Expires",
    Require => "Require",
    ProxyRequire => "Proxy-Require",
    Supported => "Supported" | "k",
    Unsupported => "Unsupported",
    Allow => "Allow",
    Accept => "Accept",
    Authorization => "Authorization",
    ProxyAuthorization => "Proxy-Authorization",
    WwwAuthenticate => "WWW-Authenticate",
    ProxyAuthenticate => "Proxy-Authenticate",
    SessionExpires => "Session-Expires" | "x",
    MinSe => "Min-SE",
    Subject => "Subject" | "s",
    UserAgent => "User-Agent",
    Server => "Server",
    RetryAfter => "Retry-After",
    Warning => "Warning",
    Reason => "Reason",
    Event => "Event" | "o",
    ReferTo => "Refer-To" | "r",
    Date => "Date",
}

/// `;name[=value]` parameters after a header value or URI. Iteration yields (name, value) pairs;
/// values keep their quotes. Whitespace around `;` and `=` is allowed (RFC 3261 SEMI and EQUAL).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Params<'a>(pub &'a str);

impl<'a> Params<'a> {
    /// Checks every parameter is well formed: a token name and a token, quoted or host value.
    pub fn validate(&self) -> Result<(), &'static str> {
        for (name, value) in self.iter() {
            if name.is_empty() || !name.bytes().all(is_param_char) {
                return Err("empty or malformed parameter");
            }
            if let Some(v) = value {
                let quoted = v.len() >= 2 && v.starts_with('"') && v.ends_with('"');
                if v.is_empty() || (!quoted && !v.bytes().all(is_param_char)) {
                    return Err("malformed parameter value");
                }
            }
        }
        Ok(())
    }

    pub fn iter(&self) -> impl Iterator<Item = (&'a str, Option<&'a str>)> {
        let s = self.0.trim_start();
        let s = s.strip_prefix(';').unwrap_or(s);
        split_outside_quotes(s, b';').map(|p| match p.find('=') {
            Some(eq) => (p[..eq].trim(), Some(p[eq + 1..].trim())),
            None => (p.trim(), None),
        })
    }

    /// The value of a parameter (`Some("")` for a value-less flag such as `lr` or `rport`).
    pub fn get(&self, name: &str) -> Option<&'a str> {
        self.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.unwrap_or(""))
    }
}

/// A byte of a parameter name or value: a token character or one of `[]/:&+$%` (hosts,
/// IPv6 references). A match, not a search of a list: every parameter is checked a byte at a time.
fn is_param_char(b: u8) -> bool {
    crate::message::is_token(b)
        || matches!(b, b'[' | b']' | b'/' | b':' | b'&' | b'+' | b'$' | b'%')
}

/// Splits `s` at `sep` outside double quotes (a backslash escapes the next byte inside them),
/// finding each delimiter with `memchr` rather than a byte at a time.
fn split_outside_quotes(s: &str, sep: u8) -> impl Iterator<Item = &str> {
    let b = s.as_bytes();
    let mut start = 0;
    let mut quoted = false;
    let mut i = 0;
    let mut done = s.is_empty();
    std::iter::from_fn(move || {
        if done {
            return None;
        }
        loop {
            let found = match quoted {
                false => memchr::memchr2(sep, b'"', &b[i.min(b.len())..]),
                true => memchr::memchr2(b'"', b'\\', &b[i.min(b.len())..]),
            };
            let Some(p) = found else {
                break;
            };
            let at = i + p;
            match b[at] {
                b'"' => {
                    quoted = !quoted;
                    i = at + 1;
                }
                b'\\' => i = at + 2,
                _ => {
                    let part = &s[start..at];
                    i = at + 1;
                    start = i;
                    return Some(part);
                }
            }
        }
        done = true;
        Some(&s[start.min(s.len())..])
    })
}

/// From, To, Contact, Route, Record-Route: `[display] <uri>;params` or `uri;params`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NameAddr<'a> {
    pub display: Option<&'a str>,
    pub uri: &'a str,
    pub params: Params<'a>,
    /// True when the URI was written inside `<>` (then it may carry its own `;params`).
    pub bracketed: bool,
}

impl<'a> NameAddr<'a> {
    pub fn parse(s: &'a str) -> Result<NameAddr<'a>, &'static str> {
        let s = s.trim();
        let (display, rest) = if let Some(q) = s.strip_prefix('"') {
            let end = closing_quote(q).ok_or("unterminated quoted display name")?;
            (Some(&s[..end + 2]), q[end + 1..].trim_start())
        } else if let Some(lt) = s.find('<') {
            let d = s[..lt].trim();
            let words_ok = d
                .split_ascii_whitespace()
                .all(|w| w.bytes().all(crate::message::is_token));
            if !words_ok {
                return Err("display name with characters that must be quoted");
            }
            ((!d.is_empty()).then_some(d), &s[lt..])
        } else {
            (None, s)
        };
        if let Some(inner) = rest.strip_prefix('<') {
            let gt = inner.find('>').ok_or("missing '>' after URI")?;
            let uri = &inner[..gt];
            if uri.trim() != uri || uri.is_empty() {
                return Err("whitespace inside <> around a URI");
            }
            let params = Params(&inner[gt + 1..]);
            check_params_start(params.0)?;
            params.validate()?;
            Uri::parse(uri)?;
            return Ok(NameAddr {
                display,
                uri,
                params,
                bracketed: true,
            });
        }
        if display.is_some() {
            return Err("display name without <URI>");
        }
        // addr-spec form: the first ';' starts header parameters and the URI cannot hold '?' or ','.
        let (uri, params) = match rest.find(';') {
            Some(p) => (&rest[..p], Params(&rest[p..])),
            None => (rest, Params("")),
        };
        let uri = uri.trim_end();
        if uri.contains('?') || uri.contains(',') || uri.contains(' ') {
            return Err("URI with headers or spaces must be enclosed in <>");
        }
        params.validate()?;
        Uri::parse(uri)?;
        Ok(NameAddr {
            display,
            uri,
            params,
            bracketed: false,
        })
    }

    pub fn tag(&self) -> Option<&'a str> {
        self.params.get("tag").filter(|t| !t.is_empty())
    }
}

fn check_params_start(p: &str) -> Result<(), &'static str> {
    let t = p.trim_start();
    if t.is_empty() || t.starts_with(';') {
        Ok(())
    } else {
        Err("unexpected text after '>'")
    }
}

/// Index of the closing quote in `s` (which starts just after the opening quote).
fn closing_quote(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return Some(i),
            _ => i += 1,
        }
    }
    None
}

/// `Via: SIP/2.0/UDP host[:port];branch=…;received=…;rport`
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Via<'a> {
    pub transport: &'a str,
    pub host: &'a str,
    pub port: Option<u16>,
    pub params: Params<'a>,
}

impl<'a> Via<'a> {
    pub fn parse(s: &'a str) -> Result<Via<'a>, &'static str> {
        let mut rest = s.trim();
        let mut fields = [""; 3];
        for (i, field) in fields.iter_mut().enumerate() {
            let end = rest
                .find(|c: char| c == '/' || c.is_ascii_whitespace())
                .ok_or("malformed Via protocol")?;
            *field = &rest[..end];
            rest = rest[end..].trim_start();
            if i < 2 {
                rest = rest
                    .strip_prefix('/')
                    .ok_or("malformed Via protocol")?
                    .trim_start();
            }
        }
        if !fields[0].eq_ignore_ascii_case("SIP") || fields[1] != "2.0" {
            return Err("Via protocol is not SIP/2.0");
        }
        if fields[2].is_empty() || !fields[2].bytes().all(crate::message::is_token) {
            return Err("malformed Via transport");
        }
        let (sent_by, params) = match rest.find(';') {
            Some(p) => (rest[..p].trim(), Params(&rest[p..])),
            None => (rest.trim(), Params("")),
        };
        let (host, port) = crate::uri::split_host_port(sent_by)?;
        params.validate()?;
        Ok(Via {
            transport: fields[2],
            host,
            port,
            params,
        })
    }

    pub fn branch(&self) -> Option<&'a str> {
        self.params.get("branch")
    }

    /// Whether the sender asked for the source port in the response (RFC 3581).
    pub fn wants_rport(&self) -> bool {
        self.params.get("rport").is_some()
    }
}

/// `CSeq: 4711 INVITE`
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CSeq {
    pub seq: u32,
    pub method: Method,
}

impl CSeq {
    pub fn parse(s: &str) -> Result<CSeq, &'static str> {
        let mut it = s.split_ascii_whitespace();
        let seq = it.next().ok_or("empty CSeq")?;
        let method = it.next().ok_or("CSeq without a method")?;
        if it.next().is_some() {
            return Err("CSeq with extra text");
        }
        let seq = parse_u32(seq).ok_or("CSeq number is not a 32-bit integer")?;
        if !method.bytes().all(crate::message::is_token) {
            return Err("malformed CSeq method");
        }
        Ok(CSeq {
            seq,
            method: Method::from_bytes(method.as_bytes()),
        })
    }
}

/// A decimal 32-bit unsigned value (Max-Forwards, Expires, CSeq, Retry-After); leading zeros are fine.
pub fn parse_u32(s: &str) -> Option<u32> {
    let s = s.trim();
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let digits = s.trim_start_matches('0');
    if digits.len() > 10 {
        return None;
    }
    digits
        .parse::<u64>()
        .map_or(Some(0), |v| u32::try_from(v).ok())
}

/// Comma-list tokens (Require, Supported, Allow) are already split by the message parser; this
/// checks one option tag.
pub fn is_option_tag(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(crate::message::is_token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_addr_forms() {
        let n =
            NameAddr::parse("\"J Rosenberg \\\\\\\"\"  <sip:jdrosen@example.com> ; tag = 98asjd8")
                .unwrap();
        assert_eq!(n.uri, "sip:jdrosen@example.com");
        assert_eq!(n.tag(), Some("98asjd8"));
        let n = NameAddr::parse("caller<sip:caller@example.com>;tag=323").unwrap();
        assert_eq!(n.display, Some("caller"));
        let n = NameAddr::parse("sip:user@host;tag=1;expires=60").unwrap();
        assert_eq!((n.uri, n.tag()), ("sip:user@host", Some("1")));
        assert!(NameAddr::parse("Bell, Alexander <sip:a.g.bell@example.com>;tag=43").is_err());
        assert!(NameAddr::parse("\"Mr. J. User <sip:j.user@example.com>").is_err());
        assert!(NameAddr::parse("sip:user@example.com?Route=%3Csip:sip.example.com%3E").is_err());
        assert!(NameAddr::parse("<sip:a@b>;;tag=1").is_err());
    }

    #[test]
    fn via_with_lws_and_ipv6() {
        let v = Via::parse("SIP  /   2.0 /UDP    192.0.2.2;branch=390skdjuw").unwrap();
        assert_eq!((v.transport, v.host, v.port), ("UDP", "192.0.2.2", None));
        assert_eq!(v.branch(), Some("390skdjuw"));
        let v = Via::parse("SIP/2.0/UDP [2001:db8::9:1]:5070;received=[2001:db8::9:255];rport")
            .unwrap();
        assert_eq!((v.host, v.port), ("[2001:db8::9:1]", Some(5070)));
        assert!(v.wants_rport());
        assert!(Via::parse("SIP/2.0/UDP 192.0.2.15;;,;,,").is_err());
    }

    #[test]
    fn params_split_outside_quotes_only() {
        let p = Params(r#";a="x;y\";z";b=1;c"#);
        assert_eq!(p.get("a"), Some(r#""x;y\";z""#));
        assert_eq!(
            (p.get("b"), p.get("c"), p.get("d")),
            (Some("1"), Some(""), None)
        );
        assert_eq!(p.iter().count(), 3);
        assert!(p.validate().is_ok());
        assert_eq!(Params(r#";a="open;b=1"#).iter().count(), 1);
        assert!(Params(";a=b c").validate().is_err());
    }

    #[test]
    fn cseq_bounds() {
        assert_eq!(CSeq::parse("0009   INVITE").unwrap().seq, 9);
        assert!(CSeq::parse("36893488147419103232 INVITE").is_err());
        assert_eq!(parse_u32("4294967295"), Some(u32::MAX));
        assert_eq!(parse_u32("4294967296"), None);
        assert_eq!(parse_u32("0000"), Some(0));
    }
}
