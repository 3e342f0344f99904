//! A received message sent on with a few changes (a proxy's forwarded request or relayed
//! response, RFC 3261 §16.6, §16.7): the received bytes are copied range by range around the
//! headers that change, instead of being rebuilt a header at a time.

use crate::header::HeaderName;
use crate::message::Message;
use std::ops::Range;

/// Changes to one message, applied by `finish`. Header entries are addressed as in
/// `Message::all`: the `nth` value of a header, comma lists already split.
pub struct Rewrite<'m> {
    msg: &'m Message,
    /// Replaces the start line (without its CRLF) when set.
    start: Option<String>,
    /// Header lines (each with its CRLF) before the first received one.
    top: String,
    /// Header lines added after the last received one.
    bottom: String,
    /// Byte ranges of the received header section replaced by `text[..]` ranges.
    edits: Vec<(Range<usize>, Range<usize>)>,
    text: String,
}

impl<'m> Rewrite<'m> {
    pub fn new(msg: &'m Message) -> Rewrite<'m> {
        Rewrite {
            msg,
            start: None,
            top: String::with_capacity(256),
            bottom: String::new(),
            edits: Vec::new(),
            text: String::new(),
        }
    }

    /// A new start line (a forwarded request's, with its new Request-URI), without CRLF.
    pub fn start_line(&mut self, line: String) -> &mut Self {
        self.start = Some(line);
        self
    }

    /// Where header lines go in front of the received ones (`name: value\r\n` each).
    pub fn top(&mut self) -> &mut String {
        &mut self.top
    }

    /// Adds `name: value` after the received header lines.
    pub fn append(&mut self, name: &str, value: &str) -> &mut Self {
        for part in [name, ": ", value, "\r\n"] {
            self.bottom.push_str(part);
        }
        self
    }

    /// Removes the `nth` value of a header (its whole line when it is alone on it); false if
    /// there is none.
    pub fn remove(&mut self, name: HeaderName, nth: usize) -> bool {
        let Some(i) = self.index(name, nth) else {
            return false;
        };
        let hs = &self.msg.headers;
        let h = hs[i];
        let same_line = |j: usize| hs.get(j).is_some_and(|o| o.name_span == h.name_span);
        let range = match (i > 0 && same_line(i - 1), same_line(i + 1)) {
            // `a, b`: the first value goes with the comma after it, a later one with the one before.
            (_, true) => h.value.start as usize..hs[i + 1].value.start as usize,
            (true, false) => hs[i - 1].value.end as usize..h.value.end as usize,
            (false, false) => h.name_span.start as usize..self.line_end(h.value.end as usize),
        };
        self.edits.push((range, 0..0));
        true
    }

    /// Removes every value of a header.
    pub fn remove_all(&mut self, name: HeaderName) -> &mut Self {
        let hs = &self.msg.headers;
        let mut last = None;
        for h in hs.iter().filter(|h| h.name == name) {
            // A comma list is one line: removed once.
            if last != Some(h.name_span) {
                let end = self.line_end(h.value.end as usize);
                self.edits.push((h.name_span.start as usize..end, 0..0));
                last = Some(h.name_span);
            }
        }
        self
    }

    /// Replaces the value of the `nth` `name` (false if there is none).
    pub fn replace(&mut self, name: HeaderName, nth: usize, value: &str) -> bool {
        let Some(i) = self.index(name, nth) else {
            return false;
        };
        let at = self.text.len();
        self.text.push_str(value);
        let range = self.msg.headers[i].value.range();
        self.edits.push((range, at..self.text.len()));
        true
    }

    /// The message to send: new start line, `top`, the received headers with the edits,
    /// appended lines, a Content-Length if the received message had none, and the body.
    pub fn finish(mut self) -> Vec<u8> {
        let m = self.msg;
        let buf = &m.buf;
        let body = m.body();
        if m.count(HeaderName::ContentLength) == 0 {
            self.bottom.push_str("Content-Length: ");
            self.bottom.push_str(itoa(body.len(), &mut [0; 20]));
            self.bottom.push_str("\r\n");
        }
        let head = m.head as usize;
        let head_end = m.body.start as usize;
        let mut out =
            Vec::with_capacity(head_end + self.top.len() + self.bottom.len() + 64 + body.len());
        match &self.start {
            Some(line) => {
                out.extend_from_slice(line.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            None => {
                let lead = buf
                    .iter()
                    .take_while(|&&b| b == b'\r' || b == b'\n')
                    .count();
                out.extend_from_slice(&buf[lead.min(head)..head]);
            }
        }
        out.extend_from_slice(self.top.as_bytes());
        self.edits.sort_unstable_by_key(|(r, _)| r.start);
        let mut at = head;
        for (range, with) in &self.edits {
            // Overlapping edits (the same value twice) keep the first.
            if range.start < at {
                continue;
            }
            out.extend_from_slice(&buf[at..range.start]);
            out.extend_from_slice(&self.text.as_bytes()[with.clone()]);
            at = range.end;
        }
        out.extend_from_slice(&buf[at.min(head_end)..head_end]);
        out.extend_from_slice(self.bottom.as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(body);
        out
    }

    fn index(&self, name: HeaderName, nth: usize) -> Option<usize> {
        let hs = &self.msg.headers;
        (0..hs.len()).filter(|&i| hs[i].name == name).nth(nth)
    }

    /// The end of the line holding `pos`, after its line feed.
    fn line_end(&self, pos: usize) -> usize {
        let head_end = self.msg.body.start as usize;
        memchr::memchr(b'\n', &self.msg.buf[pos..head_end]).map_or(head_end, |p| pos + p + 1)
    }
}

/// `n` in decimal, written into `buf`.
fn itoa(mut n: usize, buf: &mut [u8; 20]) -> &str {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    std::str::from_utf8(&buf[i..]).unwrap_or("0")
}

#[cfg(test)]
mod tests {
    use super::*;

    const INVITE: &[u8] = b"INVITE sip:bob@example.com SIP/2.0\r\n\
Via: SIP/2.0/UDP 10.0.0.1;branch=z9hG4bK-1\r\n\
Route: <sip:proxy.example.com;lr>, <sip:next.example.com;lr>\r\n\
Max-Forwards: 70\r\n\
Proxy-Authorization: Digest username=\"a\"\r\n\
From: <sip:alice@example.com>;tag=1\r\n\
To: <sip:bob@example.com>\r\n\
Call-ID: c1\r\n\
CSeq: 1 INVITE\r\n\
Content-Length: 4\r\n\
\r\n\
v=0\n";

    fn text(b: Vec<u8>) -> String {
        String::from_utf8(b).unwrap()
    }

    #[test]
    fn a_forwarded_request_keeps_everything_it_did_not_change() {
        let m = Message::parse(INVITE, true).unwrap();
        let mut w = Rewrite::new(&m);
        w.start_line("INVITE sip:bob@10.0.0.2 SIP/2.0".into());
        w.top()
            .push_str("Via: SIP/2.0/UDP 10.0.0.9;branch=z9hG4bK-2\r\n");
        assert!(w.remove(HeaderName::Route, 0));
        assert!(w.replace(HeaderName::MaxForwards, 0, "69"));
        w.remove_all(HeaderName::ProxyAuthorization);
        let out = text(w.finish());
        assert_eq!(
            out,
            "INVITE sip:bob@10.0.0.2 SIP/2.0\r\n\
Via: SIP/2.0/UDP 10.0.0.9;branch=z9hG4bK-2\r\n\
Via: SIP/2.0/UDP 10.0.0.1;branch=z9hG4bK-1\r\n\
Route: <sip:next.example.com;lr>\r\n\
Max-Forwards: 69\r\n\
From: <sip:alice@example.com>;tag=1\r\n\
To: <sip:bob@example.com>\r\n\
Call-ID: c1\r\n\
CSeq: 1 INVITE\r\n\
Content-Length: 4\r\n\
\r\n\
v=0\n"
        );
        let again = Message::parse(out.as_bytes(), true).unwrap();
        assert_eq!(again.count(HeaderName::Via), 2);
        assert_eq!(again.body(), b"v=0\n");
    }

    #[test]
    fn a_relayed_response_loses_its_top_via_only() {
        let resp = b"SIP/2.0 180 Ringing\r\n\
Via: SIP/2.0/UDP 10.0.0.9;branch=z9hG4bK-2\r\n\
v: SIP/2.0/UDP 10.0.0.1;branch=z9hG4bK-1, SIP/2.0/UDP 10.0.0.0;branch=z9hG4bK-0\r\n\
CSeq: 1 INVITE\r\n\r\n";
        let m = Message::parse(resp, true).unwrap();
        let mut w = Rewrite::new(&m);
        assert!(w.remove(HeaderName::Via, 0));
        w.append("WWW-Authenticate", "Digest realm=\"x\"");
        assert_eq!(
            text(w.finish()),
            "SIP/2.0 180 Ringing\r\n\
v: SIP/2.0/UDP 10.0.0.1;branch=z9hG4bK-1, SIP/2.0/UDP 10.0.0.0;branch=z9hG4bK-0\r\n\
CSeq: 1 INVITE\r\n\
WWW-Authenticate: Digest realm=\"x\"\r\n\
Content-Length: 0\r\n\r\n"
        );
    }

    #[test]
    fn values_of_a_comma_list_go_one_at_a_time() {
        let m = Message::parse(
            b"SIP/2.0 200 OK\r\nVia: a, b, c\r\nContent-Length: 0\r\n\r\n",
            true,
        )
        .unwrap();
        let cut = |nth| {
            let mut w = Rewrite::new(&m);
            assert!(w.remove(HeaderName::Via, nth));
            text(w.finish())
        };
        assert!(cut(0).contains("\r\nVia: b, c\r\n"));
        assert!(cut(1).contains("\r\nVia: a, c\r\n"));
        assert!(cut(2).contains("\r\nVia: a, b\r\n"));
        let mut w = Rewrite::new(&m);
        assert!(!w.remove(HeaderName::Route, 0));
    }
}
