//! A parsed SIP message: one owned buffer plus spans into it.
//!
//! Parsing is lexical only (start line, header lines, framing), so it is cheap and never fails on
//! content it does not need; typed views (`header` module) parse a header value when asked, and
//! those every layer asks about are kept once parsed (`fields` module). A
//! message that frames but breaks a rule of RFC 3261 is still returned, with its first defect, so
//! the caller can answer it with 400 instead of dropping it silently.

use crate::fields::Fields;
use crate::header::HeaderName;
use crate::method::Method;
use std::fmt;
use std::ops::Range;

/// Byte range into the message buffer (u32 keeps a header entry at 12 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Span {
    pub start: u32,
    pub end: u32,
}

impl Span {
    fn new(r: Range<usize>) -> Span {
        Span {
            start: r.start as u32,
            end: r.end as u32,
        }
    }
    pub(crate) fn range(self) -> Range<usize> {
        self.start as usize..self.end as usize
    }
}

/// One header field value (comma lists of known multi-value headers are split into entries).
#[derive(Clone, Copy, Debug)]
pub struct HeaderEntry {
    pub name: HeaderName,
    pub(crate) name_span: Span,
    pub(crate) value: Span,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartLine {
    Request { method: Method, uri: Span },
    Response { status: u16, reason: Span },
}

/// Why a datagram or stream chunk is not a SIP message at all (dropped and counted, never answered).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// Only CRLFs: a keep-alive (RFC 5626 §3.5.1), not an error for the peer.
    KeepAlive,
    /// Stream transports: the message is not complete yet; read more.
    Incomplete,
    /// Not SIP: the reason says why.
    Invalid(&'static str),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::KeepAlive => f.write_str("keep-alive"),
            ParseError::Incomplete => f.write_str("incomplete message"),
            ParseError::Invalid(why) => f.write_str(why),
        }
    }
}

/// A framed SIP message.
#[derive(Clone, Debug)]
pub struct Message {
    pub(crate) buf: Vec<u8>,
    start: StartLine,
    version: Span,
    /// Where the first header line starts: just after the start line's line end.
    pub(crate) head: u32,
    pub(crate) headers: Vec<HeaderEntry>,
    pub(crate) body: Span,
    /// The first rule of RFC 3261 this message breaks while still being framed (answer 400 to it).
    pub defect: Option<&'static str>,
    /// How many bytes of the input this message used (the rest of a stream is the next message).
    pub consumed: usize,
    /// Typed fields parsed so far (fields.rs).
    pub(crate) fields: Fields,
}

/// Headers that RFC 3261 §7.3.1 lets a sender combine into one comma-separated line.
fn is_list(name: HeaderName) -> bool {
    use HeaderName::*;
    matches!(
        name,
        Via | Contact
            | Route
            | RecordRoute
            | Path
            | Allow
            | Supported
            | Require
            | ProxyRequire
            | Unsupported
            | Accept
    )
}

const MAX_HEADERS: usize = 256;

impl Message {
    /// Parses one message. `datagram`: the input is a whole UDP datagram (no Content-Length means
    /// "the rest"; a short body is an error), else a stream (TCP) where a short input is `Incomplete`.
    pub fn parse(input: &[u8], datagram: bool) -> Result<Message, ParseError> {
        let lead = input
            .iter()
            .take_while(|&&b| b == b'\r' || b == b'\n')
            .count();
        if lead == input.len() {
            return Err(if lead == 0 {
                ParseError::Incomplete
            } else {
                ParseError::KeepAlive
            });
        }
        let mut defect = None;
        let (head_end, body_start) = match find_blank_line(&input[lead..]) {
            Some((h, b)) => (lead + h, lead + b),
            None if datagram => {
                defect = Some("header section not terminated by an empty line");
                (input.len(), input.len())
            }
            None if input.len() > 65536 => return Err(ParseError::Invalid("header too long")),
            None => return Err(ParseError::Incomplete),
        };
        // A datagram's body is the rest of it: room for it now, so appending it once framed does
        // not allocate again (a stream's input may hold more messages than this one).
        let mut buf = Vec::with_capacity(if datagram { input.len() } else { head_end });
        buf.extend_from_slice(&input[..head_end]);
        unfold(&mut buf[lead..]);

        let mut lines = LineIter {
            buf: &buf,
            pos: lead,
        };
        let first = lines.next().ok_or(ParseError::Invalid("empty message"))?;
        let (start, version, line_defect) = parse_start_line(&buf, first)?;
        let head = lines.pos as u32;
        if line_defect.is_some() {
            defect = line_defect;
        }
        let mut headers = Vec::with_capacity(16);
        for line in lines {
            if line.is_empty() {
                continue;
            }
            if headers.len() >= MAX_HEADERS {
                // Kept as a defect, not an error: the request is answered 400 (from the headers
                // read so far) rather than dropped without a word.
                defect.get_or_insert("too many header fields");
                break;
            }
            let text = &buf[line.clone()];
            let Some(colon) = memchr::memchr(b':', text) else {
                defect.get_or_insert("header line without a colon");
                continue;
            };
            let name_bytes = trim(&text[..colon]);
            if name_bytes.is_empty() || !name_bytes.iter().all(|&b| is_token(b)) {
                defect.get_or_insert("malformed header name");
                continue;
            }
            let name_off = line.start + (name_bytes.as_ptr() as usize - text.as_ptr() as usize);
            let name_span = Span::new(name_off..name_off + name_bytes.len());
            let name = HeaderName::from_bytes(name_bytes);
            let vstart = line.start + colon + 1;
            let value = trim_span(&buf, vstart..line.end);
            if is_list(name) {
                split_commas(&buf, value, |part| {
                    headers.push(HeaderEntry {
                        name,
                        name_span,
                        value: Span::new(part),
                    })
                });
            } else {
                headers.push(HeaderEntry {
                    name,
                    name_span,
                    value: Span::new(value),
                });
            }
        }

        let (body_len, consumed) = frame_body(
            &buf,
            &headers,
            input.len() - body_start,
            datagram,
            &mut defect,
        )?;
        let body_off = buf.len();
        buf.extend_from_slice(&input[body_start..body_start + body_len]);
        Ok(Message {
            buf,
            start,
            version,
            head,
            headers,
            body: Span::new(body_off..body_off + body_len),
            defect,
            consumed: body_start + consumed,
            fields: Fields::default(),
        })
    }

    pub fn start_line(&self) -> &StartLine {
        &self.start
    }
    pub fn is_request(&self) -> bool {
        matches!(self.start, StartLine::Request { .. })
    }
    /// The request method, or `None` for a response (use `cseq()` for a response's method).
    pub fn method(&self) -> Option<&Method> {
        match &self.start {
            StartLine::Request { method, .. } => Some(method),
            StartLine::Response { .. } => None,
        }
    }
    pub fn status(&self) -> Option<u16> {
        match self.start {
            StartLine::Response { status, .. } => Some(status),
            StartLine::Request { .. } => None,
        }
    }
    pub fn request_uri(&self) -> Option<&str> {
        match self.start {
            StartLine::Request { uri, .. } => Some(self.text(uri)),
            StartLine::Response { .. } => None,
        }
    }
    pub fn reason(&self) -> Option<&str> {
        match self.start {
            StartLine::Response { reason, .. } => Some(self.text(reason)),
            StartLine::Request { .. } => None,
        }
    }
    pub fn version(&self) -> &str {
        self.text(self.version)
    }
    pub fn body(&self) -> &[u8] {
        &self.buf[self.body.range()]
    }
    pub fn headers(&self) -> impl Iterator<Item = (HeaderName, &str, &str)> + '_ {
        self.headers
            .iter()
            .map(|h| (h.name, self.text(h.name_span), self.text(h.value)))
    }
    /// The first value of a header.
    pub fn header(&self, name: HeaderName) -> Option<&str> {
        self.all(name).next()
    }
    /// Every value of a header, in order (comma lists already split).
    pub fn all(&self, name: HeaderName) -> impl Iterator<Item = &str> + '_ {
        self.headers
            .iter()
            .filter(move |h| h.name == name)
            .map(|h| self.text(h.value))
    }
    pub fn count(&self, name: HeaderName) -> usize {
        self.headers.iter().filter(|h| h.name == name).count()
    }
    /// Header by its name as written (for headers strowger has no variant for).
    pub fn header_named(&self, name: &str) -> Option<&str> {
        self.headers()
            .find(|(_, n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, _, v)| v)
    }
    fn text(&self, s: Span) -> &str {
        // Spans are cut at ASCII delimiters; a header with invalid UTF-8 reads as empty.
        std::str::from_utf8(&self.buf[s.range()]).unwrap_or("")
    }
}

/// Finds the empty line ending the header section; returns (end of headers, start of body).
fn find_blank_line(b: &[u8]) -> Option<(usize, usize)> {
    let mut i = 0;
    while let Some(p) = memchr::memchr(b'\n', &b[i..]) {
        let nl = i + p;
        let next = nl + 1;
        if b.get(next) == Some(&b'\n') {
            return Some((next, next + 1));
        }
        if b.get(next) == Some(&b'\r') && b.get(next + 1) == Some(&b'\n') {
            return Some((next, next + 2));
        }
        i = next;
    }
    None
}

/// Replaces line folding (CRLF followed by SP/HT) with spaces in place, so spans stay valid and
/// every header value is on one line (RFC 3261 §7.3.1).
fn unfold(b: &mut [u8]) {
    let mut i = 0;
    while let Some(p) = memchr::memchr(b'\n', &b[i..]) {
        i += p;
        if matches!(b.get(i + 1), Some(b' ' | b'\t')) {
            b[i] = b' ';
            if i > 0 && b[i - 1] == b'\r' {
                b[i - 1] = b' ';
            }
        }
        i += 1;
    }
}

struct LineIter<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Iterator for LineIter<'_> {
    type Item = Range<usize>;
    fn next(&mut self) -> Option<Range<usize>> {
        if self.pos >= self.buf.len() {
            return None;
        }
        let rest = &self.buf[self.pos..];
        let (len, adv) = match memchr::memchr(b'\n', rest) {
            Some(p) => (p, p + 1),
            None => (rest.len(), rest.len()),
        };
        let mut end = self.pos + len;
        if end > self.pos && self.buf[end - 1] == b'\r' {
            end -= 1;
        }
        let r = self.pos..end;
        self.pos += adv;
        Some(r)
    }
}

fn parse_start_line(
    buf: &[u8],
    line: Range<usize>,
) -> Result<(StartLine, Span, Option<&'static str>), ParseError> {
    let text = &buf[line.clone()];
    let base = line.start;
    if text.len() > 8 && text[..4].eq_ignore_ascii_case(b"SIP/") {
        // Status-Line = SIP-Version SP Status-Code SP Reason-Phrase
        let sp = text
            .iter()
            .position(|&b| b == b' ')
            .ok_or(ParseError::Invalid("status line without a code"))?;
        let rest = &text[sp + 1..];
        if rest.len() < 3 || !rest[..3].iter().all(u8::is_ascii_digit) {
            return Err(ParseError::Invalid("status code is not three digits"));
        }
        if rest.len() > 3 && rest[3] != b' ' {
            return Err(ParseError::Invalid("status code is not three digits"));
        }
        let status =
            (rest[0] - b'0') as u16 * 100 + (rest[1] - b'0') as u16 * 10 + (rest[2] - b'0') as u16;
        if !(100..=699).contains(&status) {
            return Err(ParseError::Invalid("status code out of range"));
        }
        let reason_start = (base + sp + 5).min(line.end);
        return Ok((
            StartLine::Response {
                status,
                reason: Span::new(reason_start..line.end),
            },
            Span::new(base..base + sp),
            None,
        ));
    }
    // Request-Line = Method SP Request-URI SP SIP-Version. Extra whitespace is a defect (answered
    // with 400, RFC 4475 §3.1.2.8-10), not a reason to drop the request silently.
    let m_end = text
        .iter()
        .position(|&b| b == b' ')
        .ok_or(ParseError::Invalid("request line without a URI"))?;
    let m = &text[..m_end];
    let words: Vec<&[u8]> = text
        .split(|&b| b == b' ')
        .filter(|w| !w.is_empty())
        .collect();
    if words.len() < 3 {
        return Err(ParseError::Invalid("request line without a URI or version"));
    }
    let ver = words[words.len() - 1];
    if m.is_empty() || !m.iter().all(|&b| is_token(b)) {
        return Err(ParseError::Invalid("malformed method"));
    }
    if ver.len() < 4 || !ver[..4].eq_ignore_ascii_case(b"SIP/") {
        return Err(ParseError::Invalid("not a SIP request line"));
    }
    let ver_start = base + (ver.as_ptr() as usize - text.as_ptr() as usize);
    let uri_start = base + (words[1].as_ptr() as usize - text.as_ptr() as usize);
    let uri_end = base
        + (words[words.len() - 2].as_ptr() as usize - text.as_ptr() as usize)
        + words[words.len() - 2].len();
    let exact = words.len() == 3 && text.len() == m.len() + words[1].len() + ver.len() + 2;
    Ok((
        StartLine::Request {
            method: Method::from_bytes(m),
            uri: Span::new(uri_start..uri_end),
        },
        Span::new(ver_start..ver_start + ver.len()),
        (!exact).then_some("extra whitespace in the request line"),
    ))
}

/// Decides the body length from Content-Length and the transport (RFC 3261 §18.3).
fn frame_body(
    buf: &[u8],
    headers: &[HeaderEntry],
    available: usize,
    datagram: bool,
    defect: &mut Option<&'static str>,
) -> Result<(usize, usize), ParseError> {
    let mut declared: Option<usize> = None;
    for h in headers
        .iter()
        .filter(|h| h.name == HeaderName::ContentLength)
    {
        let v = &buf[h.value.range()];
        let n = if !v.is_empty() && v.len() <= 9 && v.iter().all(u8::is_ascii_digit) {
            v.iter().fold(0usize, |n, d| n * 10 + (d - b'0') as usize)
        } else {
            if !datagram {
                return Err(ParseError::Invalid("malformed Content-Length on a stream"));
            }
            defect.get_or_insert("malformed Content-Length");
            return Ok((0, available));
        };
        match declared {
            Some(d) if d != n => {
                if !datagram {
                    return Err(ParseError::Invalid(
                        "conflicting Content-Length on a stream",
                    ));
                }
                defect.get_or_insert("conflicting Content-Length headers");
                return Ok((0, available));
            }
            _ => declared = Some(n),
        }
    }
    match declared {
        Some(n) if n <= available => Ok((n, if datagram { available } else { n })),
        Some(_) if datagram => {
            defect.get_or_insert("Content-Length larger than the datagram's body");
            Ok((0, available))
        }
        Some(_) => Err(ParseError::Incomplete),
        None if datagram => Ok((available, available)),
        None => {
            defect.get_or_insert("Content-Length missing on a stream transport");
            Ok((0, 0))
        }
    }
}

pub(crate) fn is_token(b: u8) -> bool {
    TOKEN[usize::from(b)]
}

/// RFC 3261 `token` characters, by byte: every header name and many values are checked a
/// character at a time.
static TOKEN: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        let c = i as u8;
        t[i] = c.is_ascii_alphanumeric()
            || matches!(
                c,
                b'-' | b'.' | b'!' | b'%' | b'*' | b'_' | b'+' | b'`' | b'\'' | b'~'
            );
        i += 1;
    }
    t
};

fn trim(b: &[u8]) -> &[u8] {
    let s = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    let e = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(s, |e| e + 1);
    &b[s..e]
}

fn trim_span(buf: &[u8], r: Range<usize>) -> Range<usize> {
    let t = trim(&buf[r.clone()]);
    if t.is_empty() {
        return r.end..r.end;
    }
    let s = r.start + (t.as_ptr() as usize - buf[r.clone()].as_ptr() as usize);
    s..s + t.len()
}

/// Splits a header value at commas outside quoted strings and angle brackets, passing each part
/// to `out` (no list is allocated per header line).
fn split_commas(buf: &[u8], r: Range<usize>, mut out: impl FnMut(Range<usize>)) {
    let (mut quoted, mut angle, mut escape) = (false, false, false);
    let mut start = r.start;
    for i in r.clone() {
        let c = buf[i];
        if escape {
            escape = false;
            continue;
        }
        match c {
            b'\\' if quoted => escape = true,
            b'"' => quoted = !quoted,
            b'<' if !quoted => angle = true,
            b'>' if !quoted => angle = false,
            b',' if !quoted && !angle => {
                out(trim_span(buf, start..i));
                start = i + 1;
            }
            _ => {}
        }
    }
    out(trim_span(buf, start..r.end));
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_request_with_too_many_headers_parses_with_a_defect() {
        let mut req = String::from(
            "REGISTER sip:s SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:5070;branch=z9hG4bK-1\r\n\
             From: <sip:a@s>;tag=1\r\nTo: <sip:a@s>\r\nCall-ID: c\r\nCSeq: 1 REGISTER\r\n",
        );
        for i in 0..2000 {
            req.push_str(&format!("Contact: <sip:a@127.0.0.1:{}>\r\n", 1000 + i));
        }
        req.push_str("Content-Length: 0\r\n\r\n");
        let m = super::Message::parse(req.as_bytes(), true).expect("parses");
        assert_eq!(m.defect, Some("too many header fields"));
        assert!(m.header(super::HeaderName::Via).is_some());
    }

    use super::*;

    const INVITE: &[u8] = b"INVITE sip:44444@127.0.0.1:5060 SIP/2.0\r\n\
Via: SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bK-1, SIP/2.0/UDP 10.0.0.1;branch=z9hG4bK-2\r\n\
From: sipp <sip:sipp@127.0.0.1:5061>;tag=1\r\n\
To: <sip:44444@127.0.0.1:5060>\r\n\
Call-ID: 1-abc@127.0.0.1\r\n\
CSeq: 1 INVITE\r\n\
Max-Forwards: 70\r\n\
Subject: a,b\r\n\
Content-Length: 4\r\n\r\nv=0\n";

    #[test]
    fn parses_request_and_splits_lists_only() {
        let m = Message::parse(INVITE, true).unwrap();
        assert_eq!(m.method(), Some(&Method::Invite));
        assert_eq!(m.request_uri(), Some("sip:44444@127.0.0.1:5060"));
        assert_eq!(m.count(HeaderName::Via), 2);
        assert_eq!(m.header(HeaderName::Subject), Some("a,b"));
        assert_eq!(m.body(), b"v=0\n");
        assert_eq!(m.defect, None);
    }

    #[test]
    fn stream_framing_and_incomplete() {
        let mut two = INVITE.to_vec();
        two.extend_from_slice(INVITE);
        let m = Message::parse(&two, false).unwrap();
        assert_eq!(m.consumed, INVITE.len());
        assert!(matches!(
            Message::parse(&INVITE[..INVITE.len() - 2], false),
            Err(ParseError::Incomplete)
        ));
        assert_eq!(
            Message::parse(b"\r\n\r\n", false).unwrap_err(),
            ParseError::KeepAlive
        );
    }

    #[test]
    fn folded_header_becomes_one_line() {
        let m = Message::parse(
            b"OPTIONS sip:a@b SIP/2.0\r\nSubject: one\r\n two\r\nCSeq: 9\r\n\tOPTIONS\r\n\r\n",
            true,
        )
        .unwrap();
        assert_eq!(m.header(HeaderName::Subject), Some("one   two"));
        assert_eq!(m.header(HeaderName::CSeq), Some("9  \tOPTIONS"));
    }

    #[test]
    fn datagram_length_rules() {
        let base = "OPTIONS sip:a@b SIP/2.0\r\nContent-Length: ";
        let m = Message::parse(format!("{base}9999\r\n\r\nabc").as_bytes(), true).unwrap();
        assert!(m.defect.is_some());
        let m = Message::parse(format!("{base}-999\r\n\r\nabc").as_bytes(), true).unwrap();
        assert!(m.defect.is_some());
        let m = Message::parse(format!("{base}2\r\n\r\nabcdef").as_bytes(), true).unwrap();
        assert_eq!(m.body(), b"ab");
        let m = Message::parse(format!("{base}2\r\nl: 3\r\n\r\nabcdef").as_bytes(), true).unwrap();
        assert_eq!(m.defect, Some("conflicting Content-Length headers"));
    }

    #[test]
    fn responses_and_bad_codes() {
        let m = Message::parse(b"SIP/2.0 100 \r\nCSeq: 1 INVITE\r\n\r\n", true).unwrap();
        assert_eq!(m.status(), Some(100));
        assert_eq!(m.reason(), Some(""));
        assert!(Message::parse(b"SIP/2.0 4294967301 Bad\r\n\r\n", true).is_err());
        assert!(Message::parse(b"SIP/2.0 099 Bad\r\n\r\n", true).is_err());
    }

    #[test]
    fn garbage_never_panics() {
        let mut seed = 0x1234_5678u32;
        let alphabet = b"INVITE SIP/2.0\r\n:;,<>\"@ \tVia1 ";
        for len in 0..400 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    alphabet[(seed >> 16) as usize % alphabet.len()]
                })
                .collect();
            let _ = Message::parse(&bytes, true);
            let _ = Message::parse(&bytes, false);
            for cut in 0..INVITE.len().min(len) {
                let _ = Message::parse(&INVITE[..cut], false);
            }
        }
    }
}
