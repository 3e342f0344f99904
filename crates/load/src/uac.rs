//! One call as a sans-IO UAC (RFC 3261): INVITE with an SDP offer → 1xx → 2xx → ACK → hold →
//! BYE → 200. Time comes in as an argument; the call says what to send and when it next needs
//! to be woken, and the thread's loop does the I/O. Retransmissions follow §17.1: over UDP the
//! INVITE is resent at T1, 2·T1, 4·T1… until a provisional response (timer A) and abandoned
//! after 64·T1 (timer B); the BYE is resent at T1 doubling up to T2 (timer E) and abandoned
//! after 64·T1 (timer F).

use std::io::Write as _;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

pub const T1: Duration = Duration::from_millis(500);
pub const T2: Duration = Duration::from_secs(4);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Free,
    /// INVITE sent, nothing heard yet (timer A running).
    Calling,
    /// A provisional response arrived: no more INVITE retransmissions, timer B still runs.
    Proceeding,
    /// 2xx received and ACKed; the call holds until `bye_at`.
    Up,
    /// BYE sent, waiting for its final response.
    Ending,
}

/// What the call wants sent now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Emit {
    Invite,
    /// ACK for a 2xx (a new transaction, sent to the Contact).
    Ack,
    /// ACK for a non-2xx final response (part of the INVITE transaction).
    AckFailure,
    Bye,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// A final response ≥ 300 to the INVITE (or the BYE).
    Status(u16),
    /// Timer B: no final response to the INVITE within 64·T1.
    InviteTimeout,
    /// Timer F: no final response to the BYE within 64·T1.
    ByeTimeout,
    /// The server hung up (BYE) before the hold time ran out.
    RemoteBye,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// 2xx to the INVITE: set-up time from the first INVITE.
    Answered(Duration),
    /// The BYE got its 200: the call is over and the slot may be reused.
    Completed,
    Failed(Failure),
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Out {
    pub send: Option<Emit>,
    pub event: Option<Event>,
    /// The send is a retransmission.
    pub retransmit: bool,
}

/// One call slot; reused, so its strings keep their capacity.
#[derive(Debug)]
pub struct Call {
    pub state: State,
    /// Bumped every time the slot is reused; part of the Call-ID so stale messages miss.
    pub generation: u32,
    pub invite_at: Instant,
    pub answered_at: Option<Instant>,
    hold: Duration,
    retx_at: Option<Instant>,
    retx_every: Duration,
    give_up_at: Instant,
    bye_at: Option<Instant>,
    pub to_tag: String,
    pub contact: String,
    pub remote_rtp: Option<SocketAddr>,
    /// Where this call takes RTP (its SDP offer's address and port).
    pub local_rtp: SocketAddr,
    /// SDES: the master key and salt this call offers (AES_CM_128_HMAC_SHA1_80, RTP/SAVP).
    pub sdes_key: Option<[u8; SDES_KEY_LEN]>,
}

/// Master key and salt of AES_CM_128_HMAC_SHA1_80, the one suite SRTP calls offer.
pub const SDES_KEY_LEN: usize = 30;

impl Call {
    pub fn new(now: Instant) -> Call {
        Call {
            state: State::Free,
            generation: 0,
            invite_at: now,
            answered_at: None,
            hold: Duration::ZERO,
            retx_at: None,
            retx_every: T1,
            give_up_at: now,
            bye_at: None,
            to_tag: String::new(),
            contact: String::new(),
            remote_rtp: None,
            local_rtp: SocketAddr::from(([0, 0, 0, 0], 0)),
            sdes_key: None,
        }
    }

    /// Starts a new call in this slot: send the INVITE.
    pub fn start(&mut self, now: Instant, hold: Duration, local_rtp: SocketAddr) -> Out {
        self.generation = self.generation.wrapping_add(1);
        self.state = State::Calling;
        self.invite_at = now;
        self.answered_at = None;
        self.hold = hold;
        self.retx_every = T1;
        self.retx_at = Some(now + T1);
        self.give_up_at = now + 64 * T1;
        self.bye_at = None;
        self.to_tag.clear();
        self.contact.clear();
        self.remote_rtp = None;
        self.local_rtp = local_rtp;
        Out {
            send: Some(Emit::Invite),
            ..Out::default()
        }
    }

    /// When the call next needs `on_timer`.
    pub fn next_timer(&self) -> Option<Instant> {
        match self.state {
            State::Free => None,
            State::Calling | State::Ending => Some(
                self.retx_at
                    .map_or(self.give_up_at, |r| r.min(self.give_up_at)),
            ),
            State::Proceeding => Some(self.give_up_at),
            State::Up => self.bye_at,
        }
    }

    pub fn on_timer(&mut self, now: Instant) -> Out {
        let mut out = Out::default();
        match self.state {
            State::Free => {}
            State::Calling | State::Proceeding | State::Ending if now >= self.give_up_at => {
                let f = if self.state == State::Ending {
                    Failure::ByeTimeout
                } else {
                    Failure::InviteTimeout
                };
                self.state = State::Free;
                out.event = Some(Event::Failed(f));
            }
            State::Calling | State::Ending => {
                if self.retx_at.is_some_and(|r| now >= r) {
                    out.send = Some(if self.state == State::Calling {
                        Emit::Invite
                    } else {
                        Emit::Bye
                    });
                    out.retransmit = true;
                    self.retx_every *= 2;
                    if self.state == State::Ending {
                        self.retx_every = self.retx_every.min(T2);
                    }
                    self.retx_at = Some(now + self.retx_every);
                }
            }
            State::Proceeding => {}
            State::Up => {
                if self.bye_at.is_some_and(|b| now >= b) {
                    self.bye_at = None;
                    self.state = State::Ending;
                    self.retx_every = T1;
                    self.retx_at = Some(now + T1);
                    self.give_up_at = now + 64 * T1;
                    out.send = Some(Emit::Bye);
                }
            }
        }
        out
    }

    /// A response for this call. `contact` and `remote_rtp` matter only on a 2xx to the INVITE.
    pub fn on_response(
        &mut self,
        status: u16,
        invite: bool,
        to_tag: &str,
        contact: &str,
        remote_rtp: Option<SocketAddr>,
        now: Instant,
    ) -> Out {
        let mut out = Out::default();
        match (self.state, invite) {
            (State::Calling | State::Proceeding, true) => {
                if status < 200 {
                    self.state = State::Proceeding;
                    self.retx_at = None;
                } else if status < 300 {
                    self.state = State::Up;
                    self.answered_at = Some(now);
                    self.to_tag.clear();
                    self.to_tag.push_str(to_tag);
                    self.contact.clear();
                    self.contact.push_str(contact);
                    self.remote_rtp = remote_rtp;
                    self.bye_at = Some(now + self.hold);
                    out.send = Some(Emit::Ack);
                    out.event = Some(Event::Answered(now - self.invite_at));
                } else {
                    self.to_tag.clear();
                    self.to_tag.push_str(to_tag);
                    self.state = State::Free;
                    out.send = Some(Emit::AckFailure);
                    out.event = Some(Event::Failed(Failure::Status(status)));
                }
            }
            // A retransmitted 2xx: our ACK was lost (or crossed it); ACK again.
            (State::Up | State::Ending, true) if (200..300).contains(&status) => {
                out.send = Some(Emit::Ack);
                out.retransmit = true;
            }
            (State::Ending, false) if status >= 200 => {
                self.state = State::Free;
                out.event = Some(if status < 300 {
                    Event::Completed
                } else {
                    Event::Failed(Failure::Status(status))
                });
            }
            _ => {}
        }
        out
    }

    /// The server sent BYE: it is answered 200 by the caller of this; the call ends here.
    pub fn on_bye(&mut self) -> Out {
        let mut out = Out::default();
        match self.state {
            State::Up => {
                self.state = State::Free;
                out.event = Some(Event::Failed(Failure::RemoteBye));
            }
            // Our BYE crossed theirs: the call is over either way.
            State::Ending => {
                self.state = State::Free;
                out.event = Some(Event::Completed);
            }
            _ => {}
        }
        out
    }
}

/// What every message of one thread shares.
pub struct Endpoint {
    pub server: SocketAddr,
    pub local: SocketAddr,
    pub ext: String,
    /// Distinguishes this run's Call-IDs from another run's.
    pub run: u32,
    pub thread: u32,
    /// The one codec offered: its payload type and SDP lines (rtpmap, fmtp).
    pub payload_type: u8,
    pub sdp_codec: String,
    /// SIP over TLS: Vias, the Request-URI and the Contact say so.
    pub tls: bool,
}

/// The suite of the calls' `a=crypto` offers.
pub const SDES_SUITE: sdp::CryptoSuite = sdp::CryptoSuite::AesCm128HmacSha1_80;

/// The far end's key in a 2xx's SDP answer: the first audio stream's `a=crypto` line that
/// answers our tag 1 in our suite (RFC 4568 §5.1.2).
pub fn answered_key(body: &[u8]) -> Option<[u8; SDES_KEY_LEN]> {
    let answer = sdp::SessionDescription::parse(body).ok()?;
    let audio = answer.media.iter().find(|m| m.kind == "audio")?;
    let line = audio
        .crypto()
        .find(|c| c.tag == 1 && c.suite == SDES_SUITE)?;
    line.key.as_slice().try_into().ok()
}

/// The payload type and `a=rtpmap`/`a=fmtp` lines offering `f` alone, in 20 ms packets.
pub fn sdp_codec(f: codec::Format) -> (u8, String) {
    let pt = f.static_payload_type().unwrap_or(96);
    let mut lines = format!("a=rtpmap:{pt} {}/{}", f.encoding_name(), f.rtp_clock());
    if let Some(ch) = f.rtpmap_channels() {
        lines += &format!("/{ch}");
    }
    lines += "\r\n";
    if let Some(fmtp) = f.fmtp() {
        lines += &format!("a=fmtp:{pt} {fmtp}\r\n");
    }
    (pt, lines)
}

/// Call-ID `L<run>-<thread>-<slot>-<generation>`: the slot comes back out of it without a map.
pub fn parse_call_id(id: &str) -> Option<(u32, u32, usize, u32)> {
    let mut f = id.strip_prefix('L')?.split('-');
    let run = f.next()?.parse().ok()?;
    let thread = f.next()?.parse().ok()?;
    let slot = f.next()?.parse().ok()?;
    let generation = f.next()?.parse().ok()?;
    Some((run, thread, slot, generation))
}

/// SDP's name for `ip`'s address family.
fn family(ip: std::net::IpAddr) -> &'static str {
    if ip.is_ipv4() {
        "IP4"
    } else {
        "IP6"
    }
}

/// Writes `what` for `call` in slot `slot` into `buf` (cleared first).
pub fn write(buf: &mut Vec<u8>, ep: &Endpoint, slot: usize, call: &Call, what: Emit) {
    buf.clear();
    let g = call.generation;
    let (run, th) = (ep.run, ep.thread);
    let (via, uri_param) = match ep.tls {
        true => ("TLS", ";transport=tls"),
        false => ("UDP", ""),
    };
    let uri_target = format_args!("sip:{}@{}{uri_param}", ep.ext, ep.server);
    let (method, cseq, branch_n) = match what {
        Emit::Invite => ("INVITE", "1 INVITE", 0),
        Emit::AckFailure => ("ACK", "1 ACK", 0),
        Emit::Ack => ("ACK", "1 ACK", 1),
        Emit::Bye => ("BYE", "2 BYE", 2),
    };
    let ruri_contact = matches!(what, Emit::Ack | Emit::Bye) && !call.contact.is_empty();
    if ruri_contact {
        let _ = write!(buf, "{method} {} SIP/2.0\r\n", call.contact);
    } else {
        let _ = write!(buf, "{method} {uri_target} SIP/2.0\r\n");
    }
    let _ = write!(
        buf,
        "Via: SIP/2.0/{via} {};branch=z9hG4bK{run}x{th}x{slot}x{g}x{branch_n};rport\r\n\
         Max-Forwards: 70\r\n\
         From: <sip:load@{}>;tag={run}t{th}s{slot}g{g}\r\n",
        ep.local, ep.local
    );
    if call.to_tag.is_empty() || what == Emit::Invite {
        let _ = write!(buf, "To: <{uri_target}>\r\n");
    } else {
        let _ = write!(buf, "To: <{uri_target}>;tag={}\r\n", call.to_tag);
    }
    let _ = write!(buf, "Call-ID: L{run}-{th}-{slot}-{g}\r\nCSeq: {cseq}\r\n");
    if what == Emit::Invite {
        let (o_ip, ip) = (ep.local.ip(), call.local_rtp.ip());
        let (o_family, family) = (family(o_ip), family(ip));
        // The length is patched in after the body is written (zero-padded digits are valid).
        let _ = write!(
            buf,
            "Contact: <sip:load@{}{uri_param}>\r\nContent-Type: application/sdp\r\nContent-Length: 0000\r\n\r\n",
            ep.local
        );
        let start = buf.len();
        let _ = write!(
            buf,
            "v=0\r\no=load {g} {g} IN {o_family} {o_ip}\r\ns=strowger-load\r\nc=IN {family} {ip}\r\n\
             t=0 0\r\nm=audio {} {} {}\r\n{}a=ptime:20\r\na=sendrecv\r\n",
            call.local_rtp.port(),
            if call.sdes_key.is_some() { "RTP/SAVP" } else { "RTP/AVP" },
            ep.payload_type,
            ep.sdp_codec
        );
        if let Some(key) = call.sdes_key {
            let line = sdp::Crypto::new(1, SDES_SUITE, key.to_vec());
            let _ = write!(buf, "a={line}\r\n");
        }
        let len = buf.len() - start;
        for (i, d) in buf[start - 8..start - 4].iter_mut().enumerate() {
            *d = b'0' + (len / 10usize.pow(3 - i as u32) % 10) as u8;
        }
    } else {
        buf.extend_from_slice(b"Content-Length: 0\r\n\r\n");
    }
}

/// A 200 to a request the server sent (BYE, OPTIONS), echoing its Vias, From, To, Call-ID, CSeq.
pub fn write_ok(buf: &mut Vec<u8>, req: &crate::sipmsg::Scan<'_>, cseq_method: &str) {
    buf.clear();
    buf.extend_from_slice(b"SIP/2.0 200 OK\r\n");
    for v in &req.vias[..req.via_count] {
        let _ = write!(buf, "Via: {v}\r\n");
    }
    let _ = write!(
        buf,
        "From: {}\r\nTo: {}\r\nCall-ID: {}\r\nCSeq: {} {cseq_method}\r\nContent-Length: 0\r\n\r\n",
        req.from, req.to, req.call_id, req.cseq_num
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sipmsg::{scan, sdp_audio, Kind, Method};

    fn ep() -> Endpoint {
        Endpoint {
            server: "127.0.0.1:5060".parse().unwrap(),
            local: "127.0.0.1:5070".parse().unwrap(),
            ext: "44444".into(),
            run: 9,
            thread: 1,
            payload_type: 0,
            sdp_codec: sdp_codec(codec::Format::Pcmu).1,
            tls: false,
        }
    }

    fn rtp(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn a_whole_call_with_a_lost_invite_and_a_retransmitted_200() {
        let t0 = Instant::now();
        let mut c = Call::new(t0);
        let hold = Duration::from_secs(3);
        assert_eq!(c.start(t0, hold, rtp(40000)).send, Some(Emit::Invite));
        // Timer A: INVITE again at T1, then 2·T1 later.
        assert_eq!(c.next_timer(), Some(t0 + T1));
        let o = c.on_timer(t0 + T1);
        assert_eq!((o.send, o.retransmit), (Some(Emit::Invite), true));
        assert_eq!(c.next_timer(), Some(t0 + 3 * T1));
        // 100 Trying stops retransmissions, timer B stays.
        c.on_response(100, true, "", "", None, t0 + 2 * T1);
        assert_eq!(c.next_timer(), Some(t0 + 64 * T1));
        let at = t0 + Duration::from_millis(1100);
        let rtp = Some("127.0.0.1:20000".parse().unwrap());
        let o = c.on_response(200, true, "x1", "sip:s@127.0.0.1", rtp, at);
        assert_eq!(o.send, Some(Emit::Ack));
        assert_eq!(o.event, Some(Event::Answered(Duration::from_millis(1100))));
        assert_eq!(c.remote_rtp, rtp);
        let o = c.on_response(200, true, "x1", "sip:s@127.0.0.1", rtp, at);
        assert_eq!((o.send, o.event), (Some(Emit::Ack), None));
        assert_eq!(c.next_timer(), Some(at + hold));
        assert_eq!(c.on_timer(at + hold).send, Some(Emit::Bye));
        // Timer E: BYE again at T1, 2·T1, … capped at T2.
        let o = c.on_timer(at + hold + T1);
        assert_eq!((o.send, o.retransmit), (Some(Emit::Bye), true));
        let o = c.on_response(200, false, "x1", "", None, at + hold + T1);
        assert_eq!(o.event, Some(Event::Completed));
        assert_eq!(c.state, State::Free);
    }

    #[test]
    fn timers_b_and_f_and_a_rejection() {
        let t0 = Instant::now();
        let mut c = Call::new(t0);
        c.start(t0, Duration::ZERO, rtp(40000));
        let mut t = t0;
        let mut sends = 0;
        while let Some(next) = c.next_timer() {
            t = next;
            let o = c.on_timer(t);
            sends += o.send.is_some() as u32;
            if o.event.is_some() {
                assert_eq!(o.event, Some(Event::Failed(Failure::InviteTimeout)));
                break;
            }
        }
        assert_eq!(t, t0 + 64 * T1);
        assert_eq!(
            sends, 6,
            "INVITE resent at 0.5, 1.5, 3.5, 7.5, 15.5, 31.5 s"
        );
        c.start(t0, Duration::ZERO, rtp(40000));
        let o = c.on_response(404, true, "nf", "", None, t0);
        assert_eq!(o.send, Some(Emit::AckFailure));
        assert_eq!(o.event, Some(Event::Failed(Failure::Status(404))));
        // BYE unanswered: E capped at T2, F after 64·T1.
        c.start(t0, Duration::ZERO, rtp(40000));
        c.on_response(200, true, "a", "", None, t0);
        assert_eq!(c.on_timer(t0).send, Some(Emit::Bye));
        let mut gaps = Vec::new();
        let mut last = t0;
        loop {
            let next = c.next_timer().unwrap();
            let o = c.on_timer(next);
            if let Some(e) = o.event {
                assert_eq!(e, Event::Failed(Failure::ByeTimeout));
                assert_eq!(next, t0 + 64 * T1);
                break;
            }
            gaps.push((next - last).as_millis());
            last = next;
        }
        assert_eq!(&gaps[..5], &[500, 1000, 2000, 4000, 4000]);
    }

    #[test]
    fn written_messages_scan_back() {
        let t0 = Instant::now();
        let mut c = Call::new(t0);
        // The SDP names the call's own RTP address, not the SIP socket's.
        c.start(t0, Duration::ZERO, "127.16.0.3:40002".parse().unwrap());
        let mut buf = Vec::new();
        write(&mut buf, &ep(), 17, &c, Emit::Invite);
        let s = scan(&buf).unwrap();
        assert_eq!(s.kind, Kind::Request(Method::Invite));
        assert_eq!(parse_call_id(s.call_id), Some((9, 1, 17, c.generation)));
        assert_eq!(sdp_audio(s.body), Some("127.16.0.3:40002".parse().unwrap()));
        assert!(s.to_tag.is_empty());
        c.on_response(200, true, "srv", "sip:x@127.0.0.1:5060", None, t0);
        write(&mut buf, &ep(), 17, &c, Emit::Bye);
        let text = std::str::from_utf8(&buf).unwrap();
        assert!(
            text.starts_with("BYE sip:x@127.0.0.1:5060 SIP/2.0\r\n"),
            "{text}"
        );
        let s = scan(&buf).unwrap();
        assert_eq!((s.to_tag, s.cseq_num), ("srv", 2));
        let mut ok = Vec::new();
        write_ok(&mut ok, &s, "BYE");
        let r = scan(&ok).unwrap();
        assert_eq!(
            (r.kind, r.call_id, r.to_tag),
            (Kind::Response(200), s.call_id, "srv")
        );
        // Over TLS with SDES: the transport is named and the offer's key reads back.
        let tls = Endpoint { tls: true, ..ep() };
        c.start(t0, Duration::ZERO, rtp(40000));
        c.sdes_key = Some([7; SDES_KEY_LEN]);
        write(&mut buf, &tls, 17, &c, Emit::Invite);
        let text = std::str::from_utf8(&buf).unwrap();
        assert!(text.starts_with("INVITE sip:44444@127.0.0.1:5060;transport=tls SIP/2.0\r\n"));
        assert!(text.contains("Via: SIP/2.0/TLS 127.0.0.1:5070;"), "{text}");
        assert!(text.contains("m=audio 40000 RTP/SAVP 0\r\n"), "{text}");
        let invite = scan(&buf).unwrap();
        assert_eq!(answered_key(invite.body), Some([7; SDES_KEY_LEN]));
        assert_eq!(answered_key(b"v=0\r\nm=audio 4000 RTP/AVP 0\r\n"), None);
    }
}
