//! `strowger-load register`: one REGISTER per address of record (users `first`,
//! `first + 1`, …), at a given rate, answering a 401/407 digest challenge when a password is
//! given (RFC 3261 §22, RFC 8760: the first MD5 or SHA-256 challenge offered), and measuring
//! each registration from its first REGISTER to its final response.
//!
//! [`Registrations`] is the sans-IO part: it is handed the time and the datagrams that arrive,
//! and says what to send; [`run`] drives it over one UDP socket.

use crate::report::process_cpu;
use crate::sipmsg::{self, Kind};
use sip::auth::{Authorization, Challenge};
use std::collections::{BTreeMap, HashMap};
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// Retransmissions of a REGISTER without an answer (RFC 3261 timer E: 0.5 s, doubling).
const T1: Duration = Duration::from_millis(500);
/// A registration without a final response this long after it began has failed ("timeout").
const GIVE_UP: Duration = Duration::from_secs(8);

#[derive(Clone, Debug)]
pub struct Params {
    pub target: SocketAddr,
    /// Where the REGISTERs come from (the Via, Contact and the socket's address).
    pub local: SocketAddr,
    /// The registrar's domain: Request-URI `sip:DOMAIN`, To/From `sip:USER@DOMAIN`.
    pub domain: String,
    /// Users `first` … `first + users - 1`, one REGISTER each.
    pub first: u64,
    pub users: u64,
    /// REGISTERs begun per second.
    pub rate: f64,
    /// Every user's password; without it a challenge is a failure.
    pub password: Option<String>,
    pub expires: u32,
}

/// One registration under way.
struct Reg {
    user: u64,
    began: Instant,
    cseq: u32,
    /// The request last sent (retransmitted as is).
    request: Vec<u8>,
    next_retransmit: Instant,
    interval: Duration,
    challenged: bool,
}

/// What the run saw.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub attempted: u64,
    pub registered: u64,
    pub failed: u64,
    /// Failure reasons: a final status ("403"), "timeout", "challenge" (no usable challenge,
    /// or one without --auth), "unfinished".
    pub reasons: BTreeMap<String, u64>,
    pub challenges: u64,
    pub retransmissions: u64,
    /// First REGISTER → 200, µs, one per registration.
    pub latency_us: Vec<u32>,
    pub first_attempt: Option<Instant>,
    pub last_attempt: Option<Instant>,
    pub wall: Duration,
    pub cpu: Duration,
}

impl Outcome {
    fn fail(&mut self, reason: &str) {
        self.failed += 1;
        *self.reasons.entry(reason.to_string()).or_default() += 1;
    }

    /// The `p`-th percentile (nearest rank) of the latencies; sorts them.
    pub fn percentile(&mut self, p: f64) -> Option<u32> {
        if self.latency_us.is_empty() {
            return None;
        }
        self.latency_us.sort_unstable();
        let rank = ((p / 100.0) * self.latency_us.len() as f64).ceil() as usize;
        Some(self.latency_us[rank.clamp(1, self.latency_us.len()) - 1])
    }

    /// REGISTERs begun per second, first to last.
    pub fn rate(&self) -> f64 {
        match (self.first_attempt, self.last_attempt) {
            (Some(a), Some(b)) if b > a && self.attempted > 1 => {
                (self.attempted - 1) as f64 / (b - a).as_secs_f64()
            }
            _ => 0.0,
        }
    }

    pub fn json(&mut self) -> serde_json::Value {
        let (p50, p90, p99) = (
            self.percentile(50.0),
            self.percentile(90.0),
            self.percentile(99.0),
        );
        serde_json::json!({
            "attempted": self.attempted,
            "registered": self.registered,
            "failed": self.failed,
            "failed_reasons": self.reasons,
            "failure_pct": if self.attempted > 0 { 100.0 * self.failed as f64 / self.attempted as f64 } else { 0.0 },
            "challenges": self.challenges,
            "retransmissions": self.retransmissions,
            "registers_per_s": (self.rate() * 10.0).round() / 10.0,
            "latency_us": { "p50": p50, "p90": p90, "p99": p99,
                            "max": self.latency_us.last().copied(), "n": self.latency_us.len() },
            "wall_s": (self.wall.as_secs_f64() * 1000.0).round() / 1000.0,
            "cpu_s": (self.cpu.as_secs_f64() * 1000.0).round() / 1000.0,
        })
    }

    pub fn text(&mut self) -> String {
        let j = self.json();
        let us = |k: &str| {
            j["latency_us"][k]
                .as_u64()
                .map_or("-".to_string(), |v| v.to_string())
        };
        let reasons: Vec<String> = self
            .reasons
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        format!(
            "registrations: attempted {} registered {} failed {}{} | challenges {} | retransmissions {}\n\
             rate: {:.1} REGISTER/s (first to last); run {:.1} s\n\
             latency (first REGISTER→200) µs: p50 {} p90 {} p99 {} max {}\n\
             cpu: {:.2} s",
            self.attempted,
            self.registered,
            self.failed,
            if reasons.is_empty() { String::new() } else { format!(" ({})", reasons.join(", ")) },
            self.challenges,
            self.retransmissions,
            self.rate(),
            self.wall.as_secs_f64(),
            us("p50"),
            us("p90"),
            us("p99"),
            us("max"),
            self.cpu.as_secs_f64(),
        )
    }
}

/// The registrations of one run, sans IO.
pub struct Registrations {
    p: Params,
    /// A per-run tag so Call-IDs of two runs never collide.
    run: u32,
    started: Instant,
    gap: Duration,
    next_user: u64,
    /// By Call-ID.
    live: HashMap<String, Reg>,
    pub out: Outcome,
}

impl Registrations {
    pub fn new(p: Params, run: u32, now: Instant) -> Registrations {
        Registrations {
            gap: Duration::from_secs_f64(1.0 / p.rate.max(0.001)),
            p,
            run,
            started: now,
            next_user: 0,
            live: HashMap::new(),
            out: Outcome::default(),
        }
    }

    /// Every registration has ended.
    pub fn done(&self) -> bool {
        self.next_user >= self.p.users && self.live.is_empty()
    }

    /// When `poll` next has something to do.
    pub fn next_wake(&self) -> Option<Instant> {
        let begin = (self.next_user < self.p.users)
            .then(|| self.started + self.gap.mul_f64(self.next_user as f64));
        let timers = self
            .live
            .values()
            .map(|r| r.next_retransmit.min(r.began + GIVE_UP));
        begin.into_iter().chain(timers).min()
    }

    /// A REGISTER; `auth` is the credentials header (name, value).
    fn request(&self, user: u64, call_id: &str, cseq: u32, auth: Option<(&str, &str)>) -> Vec<u8> {
        let (l, d) = (self.p.local, &self.p.domain);
        let branch = format!("z9hG4bK{call_id}-{cseq}");
        let mut m = format!(
            "REGISTER sip:{d} SIP/2.0\r\n\
             Via: SIP/2.0/UDP {l};branch={branch};rport\r\n\
             Max-Forwards: 70\r\n\
             From: <sip:{user}@{d}>;tag={call_id}\r\n\
             To: <sip:{user}@{d}>\r\n\
             Call-ID: {call_id}\r\n\
             CSeq: {cseq} REGISTER\r\n\
             Contact: <sip:{user}@{l}>\r\n\
             Expires: {}\r\n",
            self.p.expires
        );
        if let Some((name, value)) = auth {
            m.push_str(&format!("{name}: {value}\r\n"));
        }
        m.push_str("User-Agent: strowger-load\r\nContent-Length: 0\r\n\r\n");
        m.into_bytes()
    }

    /// Begins the registrations now due, retransmits and times out; returns what to send.
    pub fn poll(&mut self, now: Instant) -> Vec<Vec<u8>> {
        let mut send = Vec::new();
        while self.next_user < self.p.users
            && now >= self.started + self.gap.mul_f64(self.next_user as f64)
        {
            let user = self.p.first + self.next_user;
            self.next_user += 1;
            let call_id = format!("reg{}-{user}", self.run);
            let request = self.request(user, &call_id, 1, None);
            send.push(request.clone());
            self.out.attempted += 1;
            self.out.first_attempt.get_or_insert(now);
            self.out.last_attempt = Some(now);
            self.live.insert(
                call_id,
                Reg {
                    user,
                    began: now,
                    cseq: 1,
                    request,
                    next_retransmit: now + T1,
                    interval: T1,
                    challenged: false,
                },
            );
        }
        let mut expired = Vec::new();
        for (id, r) in self.live.iter_mut() {
            if now >= r.began + GIVE_UP {
                expired.push(id.clone());
            } else if now >= r.next_retransmit {
                send.push(r.request.clone());
                self.out.retransmissions += 1;
                r.interval = (r.interval * 2).min(Duration::from_secs(4));
                r.next_retransmit = now + r.interval;
            }
        }
        for id in expired {
            self.live.remove(&id);
            self.out.fail("timeout");
        }
        send
    }

    /// A datagram from the registrar; returns a REGISTER to send when it was a challenge.
    pub fn on_datagram(&mut self, data: &[u8], now: Instant) -> Option<Vec<u8>> {
        let s = sipmsg::scan(data)?;
        let Kind::Response(code) = s.kind else {
            return None;
        };
        let reg = self.live.get(s.call_id)?;
        if s.cseq_num != reg.cseq || code < 200 {
            return None;
        }
        let call_id = s.call_id.to_string();
        if code == 200 {
            let r = self.live.remove(&call_id)?;
            self.out.registered += 1;
            let us = (now - r.began).as_micros().min(u128::from(u32::MAX)) as u32;
            self.out.latency_us.push(us);
            return None;
        }
        if (code == 401 || code == 407) && !reg.challenged {
            let (challenge_name, answer_name) = if code == 401 {
                ("WWW-Authenticate", "Authorization")
            } else {
                ("Proxy-Authenticate", "Proxy-Authorization")
            };
            let challenge = challenges(data, challenge_name).find_map(|v| Challenge::parse(v).ok());
            if let (Some(c), Some(pw)) = (challenge, self.p.password.as_deref()) {
                self.out.challenges += 1;
                let (user, cseq) = (reg.user, reg.cseq + 1);
                let uri = format!("sip:{}", self.p.domain);
                let cnonce = format!("{:08x}", user as u32 ^ self.run);
                let auth =
                    Authorization::build(&c, &user.to_string(), pw, "REGISTER", &uri, 1, &cnonce);
                let request = self.request(user, &call_id, cseq, Some((answer_name, &auth)));
                let r = self.live.get_mut(&call_id)?;
                r.cseq = cseq;
                r.challenged = true;
                r.request = request.clone();
                r.interval = T1;
                r.next_retransmit = now + T1;
                return Some(request);
            }
            self.live.remove(&call_id);
            self.out.fail("challenge");
            return None;
        }
        self.live.remove(&call_id);
        self.out.fail(&code.to_string());
        None
    }

    /// Ends the run: what is still under way counts as "unfinished".
    pub fn finish(mut self, wall: Duration) -> Outcome {
        for _ in 0..self.live.len() {
            self.out.fail("unfinished");
        }
        self.out.wall = wall;
        self.out
    }
}

/// The values of every `name` header line of a response (challenges are one per line).
fn challenges<'a>(data: &'a [u8], name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    let head = data
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(data, |n| &data[..n]);
    std::str::from_utf8(head)
        .unwrap_or("")
        .split("\r\n")
        .filter_map(move |l| {
            let (n, v) = l.split_once(':')?;
            n.trim().eq_ignore_ascii_case(name).then_some(v.trim())
        })
}

/// Runs the registrations over one UDP socket, giving up after `max_time`.
pub fn run(p: Params, max_time: Duration) -> std::io::Result<Outcome> {
    let sock = UdpSocket::bind(p.local)?;
    let s2 = socket2::SockRef::from(&sock);
    let _ = s2.set_recv_buffer_size(8 << 20);
    let _ = s2.set_send_buffer_size(8 << 20);
    sock.connect(p.target)?;
    let mut p = p;
    p.local = sock.local_addr()?;
    let start = Instant::now();
    let run = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos())
        ^ std::process::id();
    let mut regs = Registrations::new(p, run, start);
    let mut buf = vec![0u8; 65536];
    while !regs.done() && start.elapsed() < max_time {
        let now = Instant::now();
        for m in regs.poll(now) {
            send(&sock, &m);
        }
        let wait = regs
            .next_wake()
            .map_or(Duration::from_millis(10), |t| {
                t.saturating_duration_since(Instant::now())
            })
            .clamp(Duration::from_micros(50), Duration::from_millis(10));
        sock.set_read_timeout(Some(wait))?;
        // Drain what arrived, then go back to the timers.
        loop {
            match sock.recv(&mut buf) {
                Ok(n) => {
                    if let Some(m) = regs.on_datagram(&buf[..n], Instant::now()) {
                        send(&sock, &m);
                    }
                    sock.set_read_timeout(Some(Duration::from_micros(1)))?;
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    break
                }
                // ICMP port unreachable from a registrar that is not there: the timers decide.
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => break,
                Err(e) => return Err(e),
            }
        }
    }
    let mut out = regs.finish(start.elapsed());
    out.cpu = process_cpu();
    Ok(out)
}

fn send(sock: &UdpSocket, m: &[u8]) {
    // A full socket buffer or a refused port is like a lost datagram: retransmission covers it.
    let _ = sock.send(m);
}

#[cfg(test)]
mod tests {
    use super::*;
    use sip::auth::{Algorithm, NonceCheck, Nonces};

    fn params(password: Option<&str>) -> Params {
        Params {
            target: "127.0.0.1:5060".parse().unwrap(),
            local: "127.0.0.1:40000".parse().unwrap(),
            domain: "strowger".into(),
            first: 5000,
            users: 3,
            rate: 10.0,
            password: password.map(str::to_string),
            expires: 600,
        }
    }

    /// A response to `req` with `status` and extra header lines, as a registrar sends it.
    fn respond(req: &[u8], status: u16, extra: &str) -> Vec<u8> {
        let s = sipmsg::scan(req).unwrap();
        format!(
            "SIP/2.0 {status} X\r\nVia: {}\r\nFrom: {}\r\nTo: {};tag=r\r\nCall-ID: {}\r\nCSeq: {} REGISTER\r\n{extra}Content-Length: 0\r\n\r\n",
            s.vias[0], s.from, s.to, s.call_id, s.cseq_num
        )
        .into_bytes()
    }

    fn header<'a>(req: &'a [u8], name: &'a str) -> Option<&'a str> {
        challenges(req, name).next()
    }

    #[test]
    fn paced_unique_aors_with_digest_that_a_registrar_accepts() {
        let t0 = Instant::now();
        let mut r = Registrations::new(params(Some("pw")), 7, t0);
        let first = r.poll(t0);
        assert_eq!(first.len(), 1, "one at t0, the next 100 ms later");
        assert!(r.poll(t0 + Duration::from_millis(50)).is_empty());
        let second = r.poll(t0 + Duration::from_millis(100));
        assert_eq!(second.len(), 1);
        let to = |m: &[u8]| header(m, "To").unwrap().to_string();
        assert_eq!(to(&first[0]), "<sip:5000@strowger>");
        assert_eq!(to(&second[0]), "<sip:5001@strowger>");

        // The registrar's side: a nonce it issued, checked with the same code strowger uses.
        let mut nonces = Nonces::new([9; 32], 300, 100);
        let nonce = nonces.issue(1_000, b"");
        let md5 = Challenge {
            realm: "strowger".into(),
            nonce,
            opaque: None,
            algorithm: Algorithm::Md5,
            qop_auth: true,
            stale: false,
        };
        let resp = respond(
            &first[0],
            401,
            &format!("WWW-Authenticate: {}\r\n", md5.to_header()),
        );
        let authed = r
            .on_datagram(&resp, t0 + Duration::from_millis(110))
            .expect("answers the challenge");
        assert_eq!(sipmsg::scan(&authed).unwrap().cseq_num, 2);
        let a = Authorization::parse(header(&authed, "Authorization").unwrap()).unwrap();
        let ha1 = sip::auth::ha1(Algorithm::Md5, "5000", "strowger", "pw");
        assert!(a.verify(&ha1, "REGISTER"), "{a:?}");
        assert_eq!(
            nonces.check(&a.nonce, a.nc.as_deref(), 1_001, b""),
            NonceCheck::Valid
        );

        let ok = respond(&authed, 200, "");
        assert!(r
            .on_datagram(&ok, t0 + Duration::from_millis(130))
            .is_none());
        assert_eq!(r.out.registered, 1);
        assert_eq!(r.out.latency_us, [130_000]);
        // The 200 for the first CSeq, arriving late, is not counted twice.
        assert!(r
            .on_datagram(&ok, t0 + Duration::from_millis(140))
            .is_none());
        assert_eq!(r.out.registered, 1);

        // The second gets 403: a failure with its status.
        let bad = respond(&second[0], 403, "");
        r.on_datagram(&bad, t0 + Duration::from_millis(150));
        assert_eq!(r.out.reasons.get("403"), Some(&1));
    }

    #[test]
    fn retransmits_then_times_out_and_a_challenge_without_password_fails() {
        let t0 = Instant::now();
        let mut p = params(None);
        p.users = 2;
        p.rate = 1.0;
        let mut r = Registrations::new(p, 1, t0);
        let first = r.poll(t0);
        assert_eq!(r.poll(t0 + T1), first, "retransmitted unchanged");
        assert_eq!(r.out.retransmissions, 1);
        let second = r.poll(t0 + Duration::from_secs(1));
        assert_eq!(
            second.len(),
            1,
            "the second begins; the first waits for 1.5 s"
        );
        let challenge =
            "WWW-Authenticate: Digest realm=\"strowger\", nonce=\"n\", algorithm=MD5\r\n";
        assert!(r
            .on_datagram(
                &respond(&second[0], 401, challenge),
                t0 + Duration::from_millis(700)
            )
            .is_none());
        assert_eq!(r.out.reasons.get("challenge"), Some(&1));
        r.poll(t0 + GIVE_UP);
        assert_eq!(r.out.reasons.get("timeout"), Some(&1));
        assert!(r.done());
        let mut out = r.finish(Duration::from_secs(9));
        assert_eq!((out.attempted, out.registered, out.failed), (2, 0, 2));
        assert_eq!(out.json()["failure_pct"], 100.0);
    }
}
