//! A deliberately small SIP UAC and RTP endpoint written from literal message text, so that
//! strowger is checked against RFC 3261/3550 wire format and not against its own sip crate.

use super::audio::{ulaw_decode_all, ulaw_encode};
use super::net::{free_port, free_port_range};
use super::Strowger;
use std::net::{SocketAddr, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant};

/// A parsed SIP message (request or response).
#[derive(Clone, Debug)]
pub struct Msg {
    pub start: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

/// Compact header forms (RFC 3261 §7.3.3) mapped to their long names.
fn long_name(name: &str) -> String {
    let n = name.to_ascii_lowercase();
    let long = match n.as_str() {
        "v" => "via",
        "i" => "call-id",
        "f" => "from",
        "t" => "to",
        "m" => "contact",
        "l" => "content-length",
        "c" => "content-type",
        "k" => "supported",
        _ => return n,
    };
    long.into()
}

impl Msg {
    pub fn parse(data: &[u8]) -> Option<Msg> {
        let text = String::from_utf8_lossy(data);
        let (head, body) = text.split_once("\r\n\r\n")?;
        let mut lines = head.split("\r\n");
        let start = lines.next()?.to_string();
        let mut headers: Vec<(String, String)> = Vec::new();
        for line in lines {
            if line.starts_with([' ', '\t']) {
                // Folded continuation of the previous header.
                if let Some(last) = headers.last_mut() {
                    last.1.push(' ');
                    last.1.push_str(line.trim());
                }
            } else if let Some((n, v)) = line.split_once(':') {
                headers.push((long_name(n.trim()), v.trim().to_string()));
            }
        }
        Some(Msg {
            start,
            headers,
            body: body.to_string(),
        })
    }

    /// The status code, for a response.
    pub fn status(&self) -> Option<u16> {
        let rest = self.start.strip_prefix("SIP/2.0 ")?;
        rest.split(' ').next()?.parse().ok()
    }

    /// The method, for a request.
    pub fn method(&self) -> Option<&str> {
        if self.start.starts_with("SIP/") {
            None
        } else {
            self.start.split(' ').next()
        }
    }

    /// First value of a header (case-insensitive, compact forms accepted).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = long_name(name);
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// All values of a header, in order (Via, Record-Route).
    pub fn headers(&self, name: &str) -> Vec<&str> {
        let name = long_name(name);
        self.headers
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The CSeq method.
    pub fn cseq_method(&self) -> Option<&str> {
        self.header("cseq")?.split_whitespace().nth(1)
    }
}

/// `;tag=` of a From/To value.
pub fn tag_of(value: &str) -> Option<String> {
    value
        .split(';')
        .skip(1)
        .find_map(|p| p.trim().strip_prefix("tag="))
        .map(str::to_string)
}

/// The URI inside `<...>` of a Contact/To value (or the whole value).
pub fn uri_of(value: &str) -> String {
    match (value.find('<'), value.find('>')) {
        (Some(a), Some(b)) if a < b => value[a + 1..b].to_string(),
        _ => value.split(';').next().unwrap_or(value).trim().to_string(),
    }
}

fn random_token() -> String {
    use std::hash::{BuildHasher, Hasher};
    let h = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    format!("{h:016x}")
}

/// One call from a UDP UAC at 127.0.0.1.
pub struct Uac {
    pub sock: UdpSocket,
    pub server: SocketAddr,
    pub local: SocketAddr,
    pub call_id: String,
    from_tag: String,
    to_uri: String,
    to_tag: Option<String>,
    /// Request-URI for in-dialog requests: the remote Contact.
    target: String,
    cseq: u32,
    invite_branch: String,
    /// The last request sent, for retransmit().
    last_sent: Vec<u8>,
}

impl Uac {
    pub fn new(server: SocketAddr, exten: &str) -> Uac {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let local = sock.local_addr().unwrap();
        let to_uri = format!("sip:{exten}@{server}");
        Uac {
            sock,
            server,
            local,
            call_id: format!("{}@test.invalid", random_token()),
            from_tag: random_token()[..8].to_string(),
            target: to_uri.clone(),
            to_uri,
            to_tag: None,
            cseq: 0,
            invite_branch: String::new(),
            last_sent: Vec::new(),
        }
    }

    /// Sends a request in this call (new branch); returns the branch.
    pub fn send_request(&mut self, method: &str, extra: &str, body: &str) -> String {
        if method != "ACK" && method != "CANCEL" {
            self.cseq += 1;
        }
        let branch = format!("z9hG4bK{}", random_token());
        self.send_with_branch(method, &branch, extra, body);
        branch
    }

    fn send_with_branch(&mut self, method: &str, branch: &str, extra: &str, body: &str) {
        let to_tag = self
            .to_tag
            .as_deref()
            .map(|t| format!(";tag={t}"))
            .unwrap_or_default();
        let ctype = if body.is_empty() || extra.to_ascii_lowercase().contains("content-type:") {
            String::new()
        } else {
            "Content-Type: application/sdp\r\n".into()
        };
        let uri = if method == "INVITE" && self.to_tag.is_none() || method == "CANCEL" {
            &self.to_uri
        } else {
            &self.target
        };
        let msg = format!(
            "{method} {uri} SIP/2.0\r\n\
             Via: SIP/2.0/UDP {local};branch={branch};rport\r\n\
             Max-Forwards: 70\r\n\
             From: <sip:tester@{local}>;tag={from_tag}\r\n\
             To: <{to}>{to_tag}\r\n\
             Call-ID: {call_id}\r\n\
             CSeq: {cseq} {method}\r\n\
             Contact: <sip:tester@{local}>\r\n\
             {extra}{ctype}Content-Length: {len}\r\n\r\n{body}",
            local = self.local,
            from_tag = self.from_tag,
            to = self.to_uri,
            call_id = self.call_id,
            cseq = self.cseq,
            len = body.len(),
        );
        self.sock.send_to(msg.as_bytes(), self.server).unwrap();
        self.last_sent = msg.into_bytes();
    }

    /// The Replaces value (RFC 3891) that names this call's dialog to strowger: its tag as
    /// to-tag, ours as from-tag.
    pub fn replaces(&self) -> String {
        let theirs = self.to_tag.as_deref().unwrap_or_default();
        format!(
            "{};to-tag={theirs};from-tag={}",
            self.call_id, self.from_tag
        )
    }

    /// Sends the last request again, byte for byte (as Timer A would).
    pub fn retransmit(&self) {
        self.sock.send_to(&self.last_sent, self.server).unwrap();
    }

    /// Every message arriving within `dur`.
    pub fn recv_all(&self, dur: Duration) -> Vec<Msg> {
        let end = Instant::now() + dur;
        std::iter::from_fn(|| self.recv(end.checked_duration_since(Instant::now())?)).collect()
    }

    /// The next message within `timeout`.
    pub fn recv(&self, timeout: Duration) -> Option<Msg> {
        let end = Instant::now() + timeout;
        let mut buf = vec![0u8; 65536];
        loop {
            let left = end.checked_duration_since(Instant::now())?;
            self.sock
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .unwrap();
            if let Ok((n, _)) = self.sock.recv_from(&mut buf) {
                if let Some(m) = Msg::parse(&buf[..n]) {
                    return Some(m);
                }
            }
        }
    }

    /// The final response to the request with CSeq method `method`, skipping provisionals,
    /// and answering any request strowger sends meanwhile.
    pub fn final_response(&self, method: &str, timeout: Duration) -> Msg {
        let end = Instant::now() + timeout;
        loop {
            let left = end
                .checked_duration_since(Instant::now())
                .unwrap_or_default();
            let m = self
                .recv(left)
                .unwrap_or_else(|| panic!("no final response to {method} within {timeout:?}"));
            match m.status() {
                Some(s) if s >= 200 && m.cseq_method() == Some(method) => return m,
                Some(_) => {}
                None => self.respond(&m, 200),
            }
        }
    }

    /// INVITE with `sdp` (may be empty); returns the final response, ACKing non-2xx itself.
    pub fn invite(&mut self, sdp: &str) -> Msg {
        self.send_invite(sdp);
        let resp = self.final_response("INVITE", Duration::from_secs(10));
        self.invite_answered(&resp);
        resp
    }

    pub fn send_invite(&mut self, sdp: &str) {
        self.invite_branch = self.send_request("INVITE", "", sdp);
    }

    /// Takes the dialog from a final response to our INVITE; ACKs it if it is not a 2xx.
    pub fn invite_answered(&mut self, resp: &Msg) {
        self.to_tag = resp.header("to").and_then(tag_of);
        if resp.status().unwrap() < 300 {
            if let Some(c) = resp.header("contact") {
                self.target = uri_of(c);
            }
        } else {
            // ACK for a non-2xx final belongs to the INVITE transaction: same branch.
            let branch = self.invite_branch.clone();
            self.send_with_branch("ACK", &branch, "", "");
        }
    }

    /// ACK for a 2xx (its own transaction), optionally with an SDP answer.
    pub fn ack(&mut self, sdp: &str) {
        self.send_request("ACK", "", sdp);
    }

    /// BYE; returns the final response.
    pub fn bye(&mut self) -> Msg {
        self.send_request("BYE", "", "");
        self.final_response("BYE", Duration::from_secs(5))
    }

    /// Waits for a request `method` from strowger and answers it with 200.
    pub fn expect_request(&self, method: &str, timeout: Duration) -> Msg {
        let end = Instant::now() + timeout;
        loop {
            let left = end
                .checked_duration_since(Instant::now())
                .unwrap_or_default();
            let m = self
                .recv(left)
                .unwrap_or_else(|| panic!("no {method} from strowger within {timeout:?}"));
            if m.method().is_some() {
                self.respond(&m, 200);
                if m.method() == Some(method) {
                    return m;
                }
            }
        }
    }

    /// Answers request `req` with `status`, copying the headers RFC 3261 §8.2.6 says to.
    pub fn respond(&self, req: &Msg, status: u16) {
        let mut out = format!("SIP/2.0 {status} Whatever\r\n");
        for v in req.headers("via") {
            out += &format!("Via: {v}\r\n");
        }
        for h in ["from", "to", "call-id", "cseq"] {
            out += &format!("{h}: {}\r\n", req.header(h).unwrap_or(""));
        }
        out += "Content-Length: 0\r\n\r\n";
        self.sock.send_to(out.as_bytes(), self.server).unwrap();
    }
}

/// An SDP offer/answer for one PCMU (+ telephone-event) audio stream at 127.0.0.1:`port`.
pub fn sdp(port: u16, pts: &[(u8, &str)], direction: &str) -> String {
    let fmts: Vec<String> = pts.iter().map(|(pt, _)| pt.to_string()).collect();
    let mut s = format!(
        "v=0\r\no=tester 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n\
         m=audio {port} RTP/AVP {}\r\n",
        fmts.join(" ")
    );
    for (pt, map) in pts {
        s += &format!("a=rtpmap:{pt} {map}\r\n");
        if map.starts_with("telephone-event") {
            s += &format!("a=fmtp:{pt} 0-16\r\n");
        }
    }
    s += &format!("a=ptime:20\r\na={direction}\r\n");
    s
}

pub const PCMU: (u8, &str) = (0, "PCMU/8000");
pub const DTMF: (u8, &str) = (101, "telephone-event/8000");

/// The RTP address and payload types of the first m=audio line of an SDP body.
pub fn sdp_audio(body: &str) -> (SocketAddr, Vec<u8>) {
    let mut ip = None;
    let mut media = None;
    for line in body.lines() {
        let line = line.trim();
        if let Some(c) = line.strip_prefix("c=IN IP4 ") {
            ip = Some(c.trim().to_string());
        }
        if let Some(m) = line.strip_prefix("m=audio ") {
            let f: Vec<&str> = m.split_whitespace().collect();
            let pts = f[2..].iter().filter_map(|p| p.parse().ok()).collect();
            media = Some((f[0].parse::<u16>().expect("m= port"), pts));
        }
    }
    let (port, pts) = media.unwrap_or_else(|| panic!("no m=audio in SDP:\n{body}"));
    let ip = ip.unwrap_or_else(|| panic!("no c=IN IP4 in SDP:\n{body}"));
    (format!("{ip}:{port}").parse().unwrap(), pts)
}

/// A received RTP packet.
#[derive(Clone, Debug)]
pub struct RtpPkt {
    pub pt: u8,
    pub marker: bool,
    pub seq: u16,
    pub ts: u32,
    pub ssrc: u32,
    pub payload: Vec<u8>,
    pub at: Instant,
}

impl RtpPkt {
    pub fn parse(b: &[u8]) -> Option<RtpPkt> {
        if b.len() < 12 || b[0] >> 6 != 2 {
            return None;
        }
        let cc = usize::from(b[0] & 0x0f);
        let mut start = 12 + 4 * cc;
        if b[0] & 0x10 != 0 {
            let words = usize::from(u16::from_be_bytes([*b.get(start + 2)?, *b.get(start + 3)?]));
            start += 4 + 4 * words;
        }
        let mut end = b.len();
        if b[0] & 0x20 != 0 {
            end -= usize::from(*b.last()?);
        }
        Some(RtpPkt {
            pt: b[1] & 0x7f,
            marker: b[1] & 0x80 != 0,
            seq: u16::from_be_bytes([b[2], b[3]]),
            ts: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
            ssrc: u32::from_be_bytes([b[8], b[9], b[10], b[11]]),
            payload: b.get(start..end)?.to_vec(),
            at: Instant::now(),
        })
    }
}

/// Our side of an RTP stream on 127.0.0.1 (even port; RTCP on the odd one is not read).
pub struct Rtp {
    pub sock: UdpSocket,
    pub port: u16,
    pub remote: Option<SocketAddr>,
    seq: u16,
    ts: u32,
    ssrc: u32,
}

impl Rtp {
    pub fn bind() -> Rtp {
        let port = free_port_range(2);
        let sock = UdpSocket::bind(("127.0.0.1", port)).expect("bind RTP port");
        Rtp {
            sock,
            port,
            remote: None,
            seq: 1000,
            ts: 160_000,
            ssrc: 0x5354_5257,
        }
    }

    /// Sends one packet; `ts_step` is added to the timestamp afterwards (0 for DTMF updates).
    pub fn send(&mut self, pt: u8, marker: bool, payload: &[u8], ts_step: u32) {
        let mut p = vec![0x80, pt | if marker { 0x80 } else { 0 }];
        p.extend_from_slice(&self.seq.to_be_bytes());
        p.extend_from_slice(&self.ts.to_be_bytes());
        p.extend_from_slice(&self.ssrc.to_be_bytes());
        p.extend_from_slice(payload);
        let to = self.remote.expect("remote RTP address not set");
        self.sock.send_to(&p, to).unwrap();
        self.seq = self.seq.wrapping_add(1);
        self.ts = self.ts.wrapping_add(ts_step);
    }

    /// Sends `digit` as RFC 4733 telephone-events (payload type 101): a start packet with the
    /// marker, updates, then the end packet three times, all with the event's start timestamp,
    /// 20 ms apart.
    pub fn dtmf(&mut self, digit: char) {
        let event = match digit {
            '*' => 10,
            '#' => 11,
            d => d.to_digit(10).expect("a DTMF digit") as u8,
        };
        for (i, dur) in [160u16, 320, 480, 640, 800, 800, 800].iter().enumerate() {
            let end = if i >= 4 { 0x80 } else { 0 };
            let payload = [event, end | 10, (dur >> 8) as u8, *dur as u8];
            let last = i == 6;
            self.send(101, i == 0, &payload, if last { 800 } else { 0 });
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends `frames` as PCMU packets paced at 20 ms while collecting what arrives, then keeps
    /// listening for `tail`.
    pub fn send_frames(&mut self, frames: &[Vec<u8>], tail: Duration) -> Vec<RtpPkt> {
        let start = Instant::now();
        let mut got = Vec::new();
        for (i, f) in frames.iter().enumerate() {
            self.send(0, i == 0, f, 160);
            let due = start + Duration::from_millis(20 * (i as u64 + 1));
            got.extend(self.recv_for(due.saturating_duration_since(Instant::now())));
        }
        got.extend(self.recv_for(tail));
        got
    }

    /// Every packet arriving within `dur`.
    pub fn recv_for(&self, dur: Duration) -> Vec<RtpPkt> {
        let end = Instant::now() + dur;
        let mut buf = [0u8; 2048];
        let mut got = Vec::new();
        while let Some(left) = end.checked_duration_since(Instant::now()) {
            self.sock
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .unwrap();
            if let Ok((n, _)) = self.sock.recv_from(&mut buf) {
                got.extend(RtpPkt::parse(&buf[..n]));
            }
        }
        got
    }
}

/// Calls `exten` offering PCMU (+ telephone-event), ACKs the 200 and points `rtp` at the answer.
pub fn call(s: &Strowger, exten: &str, rtp: &mut Rtp) -> Uac {
    let mut uac = Uac::new(s.sip, exten);
    let resp = uac.invite(&sdp(rtp.port, &[PCMU, DTMF], "sendrecv"));
    assert_eq!(resp.status(), Some(200), "INVITE to {exten}: {resp:?}");
    let (addr, pts) = sdp_audio(&resp.body);
    assert_eq!(pts.first(), Some(&0), "PCMU answered first: {}", resp.body);
    assert!(
        (s.rtp.0..=s.rtp.1).contains(&addr.port()) && addr.port() % 2 == 0,
        "answer's RTP port {} outside --rtp-ports {:?} or odd",
        addr.port(),
        s.rtp
    );
    rtp.remote = Some(addr);
    uac.ack("");
    uac
}

/// 20 ms of µ-law per packet.
pub fn frames(samples: &[i16]) -> Vec<Vec<u8>> {
    samples
        .chunks(160)
        .map(|c| c.iter().map(|&s| ulaw_encode(s)).collect())
        .collect()
}

/// The PCMU audio of `pkts` (other payload types left out).
pub fn pcm(pkts: &[RtpPkt]) -> Vec<i16> {
    pkts.iter()
        .filter(|p| p.pt == 0)
        .flat_map(|p| ulaw_decode_all(&p.payload))
        .collect()
}

/// A minimal UAS on its own UDP socket: answers the first INVITE with `answer_sdp`.
pub struct Uas {
    sock: UdpSocket,
}

impl Uas {
    pub fn bind() -> Uas {
        let sock = UdpSocket::bind(("127.0.0.1", free_port())).unwrap();
        Uas { sock }
    }

    pub fn addr(&self) -> SocketAddr {
        self.sock.local_addr().unwrap()
    }

    pub fn recv(&self, timeout: Duration) -> Option<(Msg, SocketAddr)> {
        self.sock.set_read_timeout(Some(timeout)).unwrap();
        let mut buf = vec![0u8; 65536];
        let (n, from) = self.sock.recv_from(&mut buf).ok()?;
        Some((Msg::parse(&buf[..n])?, from))
    }

    /// Sends `status` for `req` (with a To tag and, if given, an SDP body).
    pub fn respond(&self, req: &Msg, to: SocketAddr, status: u16, body: &str) {
        let mut out = format!("SIP/2.0 {status} Whatever\r\n");
        for v in req.headers("via") {
            out += &format!("Via: {v}\r\n");
        }
        let to_h = req.header("to").unwrap_or("");
        let to_h = if to_h.contains("tag=") {
            to_h.to_string()
        } else {
            format!("{to_h};tag=uas1")
        };
        out += &format!(
            "From: {}\r\nTo: {to_h}\r\nCall-ID: {}\r\nCSeq: {}\r\nContact: <sip:uas@{}>\r\n",
            req.header("from").unwrap_or(""),
            req.header("call-id").unwrap_or(""),
            req.header("cseq").unwrap_or(""),
            self.addr()
        );
        if !body.is_empty() {
            out += "Content-Type: application/sdp\r\n";
        }
        out += &format!("Content-Length: {}\r\n\r\n{body}", body.len());
        self.sock.send_to(out.as_bytes(), to).unwrap();
    }

    /// Waits for the INVITE and answers it with 200 and `answer_sdp`; returns its offer.
    pub fn answer(&self, answer_sdp: &str) -> Msg {
        loop {
            let (m, from) = self
                .recv(Duration::from_secs(10))
                .expect("INVITE to the callee");
            if m.method() == Some("INVITE") {
                self.respond(&m, from, 200, answer_sdp);
                return m;
            }
        }
    }

    /// Answers every request (BYE at the end of the call) with 200 for `dur`.
    pub fn serve(&self, dur: Duration) {
        let end = std::time::Instant::now() + dur;
        while let Some(left) = end.checked_duration_since(std::time::Instant::now()) {
            if let Some((m, from)) = self.recv(left.max(Duration::from_millis(1))) {
                if m.method().is_some_and(|x| x != "ACK") {
                    self.respond(&m, from, 200, "");
                }
            }
        }
    }
}

/// The hex digest of `data` by coreutils (md5sum / sha256sum): the test's own digest, not
/// strowger's.
pub fn coreutils_hash(tool: &str, data: &str) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("printf %s \"$1\" | {tool}"))
        .arg("sh")
        .arg(data)
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()[..if tool == "md5sum" { 32 } else { 64 }].to_string()
}

/// A quoted parameter of a WWW-Authenticate value.
pub fn param<'a>(challenge: &'a str, name: &str) -> Option<&'a str> {
    let at = challenge.find(&format!("{name}=\""))? + name.len() + 2;
    challenge[at..].split('"').next()
}
