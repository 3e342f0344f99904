//! Request and response checks of RFC 3261 §8.2 and §16.3 that every element applies before a
//! message reaches a transaction, mapped to the response code a sender should get.

use crate::header::{parse_u32, CSeq, HeaderName, NameAddr, Via};
use crate::message::Message;
use crate::method::Method;

/// Why a request is refused: the status to answer with and the text for its Warning header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reject {
    pub status: u16,
    pub reason: &'static str,
    pub warning: String,
    /// Option tags for the Unsupported header of a 420.
    pub unsupported: Vec<String>,
}

impl Reject {
    fn new(status: u16, reason: &'static str, warning: impl Into<String>) -> Reject {
        Reject {
            status,
            reason,
            warning: warning.into(),
            unsupported: Vec::new(),
        }
    }
    fn bad(warning: impl Into<String>) -> Reject {
        Reject::new(400, "Bad Request", warning)
    }
}

/// Checks a request; `supported` lists the option tags strowger implements (for Require).
pub fn check_request(m: &Message, supported: &[&str]) -> Result<(), Reject> {
    let method = m.method().ok_or_else(|| Reject::bad("not a request"))?;
    if let Some(d) = m.defect {
        return Err(Reject::bad(d));
    }
    if !m.version().eq_ignore_ascii_case("SIP/2.0") {
        return Err(Reject::new(
            505,
            "Version Not Supported",
            format!("SIP version {} is not supported", m.version()),
        ));
    }
    for h in [
        HeaderName::CallId,
        HeaderName::From,
        HeaderName::To,
        HeaderName::CSeq,
    ] {
        match m.count(h) {
            0 => return Err(Reject::bad(format!("missing {} header", h.as_str()))),
            1 => {}
            _ => return Err(Reject::bad(format!("more than one {} header", h.as_str()))),
        }
    }
    if m.count(HeaderName::Via) == 0 {
        return Err(Reject::bad("missing Via header"));
    }
    let top = m.top_via();
    let rest = m.all(HeaderName::Via).skip(1).map(Via::parse);
    for via in std::iter::once(top).chain(rest) {
        let via = via.map_err(|e| Reject::bad(format!("Via: {e}")))?;
        if via.branch() == Some("z9hG4bK") {
            return Err(Reject::bad("Via branch is only the magic cookie"));
        }
    }
    if m.header(HeaderName::CallId).is_some_and(str::is_empty) {
        return Err(Reject::bad("empty Call-ID"));
    }
    if matches!(method, Method::Other(_)) {
        return Err(Reject::new(
            501,
            "Not Implemented",
            format!("method {method} is not implemented"),
        ));
    }
    let cseq = m.cseq().map_err(|e| Reject::bad(format!("CSeq: {e}")))?;
    if &cseq.method != method {
        return Err(Reject::bad("CSeq method does not match the request method"));
    }
    m.from_addr()
        .map_err(|e| Reject::bad(format!("From: {e}")))?;
    m.to_addr().map_err(|e| Reject::bad(format!("To: {e}")))?;
    let uri = m
        .uri()
        .map_err(|e| Reject::bad(format!("Request-URI: {e}")))?;
    if !uri.is_sip() && !uri.scheme.eq_ignore_ascii_case("tel") {
        return Err(Reject::new(
            416,
            "Unsupported URI Scheme",
            format!("URI scheme {} is not supported", uri.scheme),
        ));
    }
    if uri.headers.is_some() {
        return Err(Reject::bad("Request-URI carries escaped headers"));
    }
    for h in [HeaderName::MaxForwards, HeaderName::Expires] {
        if let Some(v) = m.header(h) {
            parse_u32(v)
                .ok_or_else(|| Reject::bad(format!("{} is not a 32-bit integer", h.as_str())))?;
        }
    }
    for c in m.all(HeaderName::Contact) {
        if c != "*" {
            let na = NameAddr::parse(c).map_err(|e| Reject::bad(format!("Contact: {e}")))?;
            if let Some(exp) = na.params.get("expires") {
                parse_u32(exp)
                    .ok_or_else(|| Reject::bad("Contact expires is not a 32-bit integer"))?;
            }
        }
    }
    if !matches!(method, Method::Ack | Method::Cancel) {
        let unsupported: Vec<String> = m
            .all(HeaderName::Require)
            .filter(|t| !supported.iter().any(|s| s.eq_ignore_ascii_case(t)))
            .map(str::to_string)
            .collect();
        if !unsupported.is_empty() {
            let mut r = Reject::new(
                420,
                "Bad Extension",
                format!("unsupported extension {}", unsupported.join(", ")),
            );
            r.unsupported = unsupported;
            return Err(r);
        }
    }
    Ok(())
}

/// Checks a response; a failing response is dropped (RFC 4475 §3.1.2.5, §3.1.2.19).
pub fn check_response(m: &Message) -> Result<CSeq, &'static str> {
    if let Some(d) = m.defect {
        return Err(d);
    }
    if m.count(HeaderName::Via) == 0 || m.count(HeaderName::CallId) != 1 {
        return Err("missing Via or Call-ID");
    }
    m.top_via()?;
    m.cseq().cloned()
}
