//! SIP, SIPS and other URIs (RFC 3261 §19.1, RFC 5118 for IPv6 references).

use crate::header::Params;
use std::net::{IpAddr, Ipv6Addr};

/// A URI borrowed from a message. Non-SIP schemes (`tel:`, `http:`, …) keep only scheme and rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Uri<'a> {
    pub scheme: &'a str,
    /// The user part as written (still %-escaped: never unescape twice, RFC 4475 §3.1.1.3).
    pub user: Option<&'a str>,
    pub password: Option<&'a str>,
    /// Host as written; IPv6 references keep their brackets.
    pub host: &'a str,
    pub port: Option<u16>,
    pub params: Params<'a>,
    /// `?h=v&…` escaped headers, without the `?`.
    pub headers: Option<&'a str>,
    /// Everything after `scheme:` for schemes other than sip/sips.
    pub opaque: &'a str,
}

impl<'a> Uri<'a> {
    pub fn parse(s: &'a str) -> Result<Uri<'a>, &'static str> {
        let colon = s.find(':').ok_or("URI without a scheme")?;
        let scheme = &s[..colon];
        let first_ok = scheme
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic());
        if !first_ok
            || !scheme
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
        {
            return Err("malformed URI scheme");
        }
        let rest = &s[colon + 1..];
        if rest.is_empty()
            || rest
                .bytes()
                .any(|b| b.is_ascii_whitespace() || b == b'<' || b == b'>')
        {
            return Err("URI with whitespace or angle brackets");
        }
        let mut uri = Uri {
            scheme,
            user: None,
            password: None,
            host: "",
            port: None,
            params: Params(""),
            headers: None,
            opaque: rest,
        };
        if !uri.is_sip() {
            return Ok(uri);
        }
        let (userinfo, hostpart) = match rest.find('@') {
            Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
            None => (None, rest),
        };
        if let Some(ui) = userinfo {
            let (user, password) = match ui.find(':') {
                Some(c) => (&ui[..c], Some(&ui[c + 1..])),
                None => (ui, None),
            };
            if user.is_empty() {
                return Err("empty user part in URI");
            }
            uri.user = Some(user);
            uri.password = password;
        }
        let (hostpart, headers) = match hostpart.find('?') {
            Some(q) => (&hostpart[..q], Some(&hostpart[q + 1..])),
            None => (hostpart, None),
        };
        let (hostport, params) = match hostpart.find(';') {
            Some(p) => (&hostpart[..p], &hostpart[p..]),
            None => (hostpart, ""),
        };
        let (host, port) = split_host_port(hostport)?;
        uri.host = host;
        uri.port = port;
        uri.params = Params(params);
        uri.params.validate()?;
        uri.headers = headers;
        Ok(uri)
    }

    pub fn is_sip(&self) -> bool {
        self.scheme.eq_ignore_ascii_case("sip") || self.scheme.eq_ignore_ascii_case("sips")
    }

    /// The host as an IP address, if it is one (brackets removed).
    pub fn ip(&self) -> Option<IpAddr> {
        host_ip(self.host)
    }
}

/// `host[:port]` with IPv6 references in brackets; an unbracketed IPv6 address is an error
/// (RFC 5118 §4.2). Tolerates the three-colon form RFC 3261's ABNF allowed (§4.10).
pub fn split_host_port(s: &str) -> Result<(&str, Option<u16>), &'static str> {
    let (host, port) = if s.starts_with('[') {
        let end = s.find(']').ok_or("unterminated IPv6 reference")?;
        let inner = &s[1..end];
        if inner.is_empty()
            || !inner
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
        {
            return Err("malformed IPv6 reference");
        }
        match &s[end + 1..] {
            "" => (&s[..=end], None),
            p => (
                &s[..=end],
                Some(p.strip_prefix(':').ok_or("junk after IPv6 reference")?),
            ),
        }
    } else {
        match s.find(':') {
            Some(c) => (&s[..c], Some(&s[c + 1..])),
            None => (s, None),
        }
    };
    if host.is_empty() {
        return Err("empty host");
    }
    if !host.starts_with('[')
        && !host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
    {
        return Err("malformed host");
    }
    let port = match port {
        None => None,
        Some(p) => {
            if p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err("malformed port");
            }
            Some(p.parse::<u16>().map_err(|_| "port out of range")?)
        }
    };
    Ok((host, port))
}

/// The address in a host string, if it is an IP literal (brackets removed; the RFC 3261
/// three-colon IPv6 form is read as the two-colon form it means).
pub fn host_ip(host: &str) -> Option<IpAddr> {
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return inner
            .parse::<Ipv6Addr>()
            .or_else(|_| inner.replacen(":::", "::", 1).parse())
            .ok()
            .map(IpAddr::V6);
    }
    host.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sip_uris() {
        let u = Uri::parse("sip:user;par=u%40example.net@example.com").unwrap();
        assert_eq!(u.user, Some("user;par=u%40example.net"));
        assert_eq!(u.host, "example.com");
        let u = Uri::parse("sip:[2001:db8::10]:5070").unwrap();
        assert_eq!((u.host, u.port), ("[2001:db8::10]", Some(5070)));
        let u = Uri::parse("sip:[2001:db8::10:5070]").unwrap();
        assert_eq!(u.port, None);
        assert!(Uri::parse("sip:2001:db8::10").is_err());
        let u = Uri::parse("sip:alice@[2001:db8:::192.0.2.1]").unwrap();
        assert!(u.ip().is_some());
        let u = Uri::parse("sip:44444@127.0.0.1:5060;transport=udp").unwrap();
        assert_eq!(u.params.get("transport"), Some("udp"));
        let u = Uri::parse("sip:sip.example.com?Route=%3Csip:sip.example.com%3E").unwrap();
        assert!(u.headers.is_some());
        let u = Uri::parse("nobodyKnowsThisScheme:totallyopaquecontent").unwrap();
        assert!(!u.is_sip());
        assert!(Uri::parse("sip:host:99999").is_err());
        assert!(Uri::parse("sip:a@b; lr").is_err());
    }
}
