//! `strowger-load flood`: attack traffic for the flood benchmark, from many loopback addresses
//! on one socket. Two streams, paced in 1 ms slots and spread round-robin over the sources
//! (127.2.x.y, each datagram's source set with IP_PKTINFO): unauthenticated INVITEs (a scanner, a
//! toll-fraud attempt) and REGISTERs answering the server's challenge with a wrong digest (a
//! password cracker; each source asks for a challenge first, then answers its nonce). Answers
//! are read and counted by status; a source that stops getting any is one the server banned.

use crate::run::{loopback_device, udp_socket_on};
use mmsg::{enable_destinations, Batch, Outbox};
use rustc_hash::FxHashMap;
use std::fmt::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

/// What to send.
pub struct Flood {
    pub target: SocketAddr,
    pub user: String,
    pub invites_per_s: u32,
    pub digests_per_s: u32,
    pub sources: u32,
    pub seconds: f64,
    /// Send the INVITE stream from this one address only (a source the server banned).
    pub from: Option<Ipv4Addr>,
}

/// What was sent and what came back.
#[derive(Default, Debug)]
pub struct Outcome {
    pub invites: u64,
    pub challenge_requests: u64,
    pub digests: u64,
    pub statuses: FxHashMap<u16, u64>,
    /// Sources that got no answer in the last second of the run (banned, or never answered).
    pub silent_at_end: usize,
    pub sources: usize,
    pub seconds: f64,
}

impl Outcome {
    pub fn to_json(&self) -> String {
        let mut statuses: Vec<_> = self.statuses.iter().collect();
        statuses.sort();
        let statuses: Vec<String> = statuses
            .iter()
            .map(|(s, n)| format!("\"{s}\":{n}"))
            .collect();
        format!(
            r#"{{"seconds":{:.2},"sources":{},"sent":{{"invite":{},"challenge_request":{},"digest":{}}},"statuses":{{{}}},"sources_unanswered_at_end":{}}}"#,
            self.seconds,
            self.sources,
            self.invites,
            self.challenge_requests,
            self.digests,
            statuses.join(","),
            self.silent_at_end
        )
    }
}

/// Source `i` of the rotating set: 127.2.x.y with y in 1..=250.
fn source(i: u32) -> Ipv4Addr {
    Ipv4Addr::new(127, 2, (i / 250) as u8, (i % 250) as u8 + 1)
}

/// Runs the flood; only loopback targets are accepted.
pub fn run(f: &Flood) -> std::io::Result<Outcome> {
    if !f.target.ip().is_loopback() {
        return Err(std::io::Error::other("flood: only loopback targets"));
    }
    let srcs: Vec<Ipv4Addr> = match f.from {
        Some(a) => vec![a],
        None => (0..f.sources.clamp(1, 250 * 256)).map(source).collect(),
    };
    let bind = SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), 0);
    let sock = udp_socket_on(bind, 4 << 20, loopback_device())?;
    enable_destinations(&sock);
    let port = sock.local_addr()?.port();
    let mut nonces: FxHashMap<Ipv4Addr, String> = FxHashMap::default();
    let mut last_answer: FxHashMap<Ipv4Addr, Instant> = FxHashMap::default();
    let mut out = Outcome {
        sources: srcs.len(),
        ..Outcome::default()
    };
    let mut outbox = Outbox::default();
    let mut batch = Batch::new(64, 2048, false);
    let mut msg = String::with_capacity(1024);
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(f.seconds.min(120.0));
    let (mut owed_inv, mut owed_dig) = (0.0f64, 0.0f64);
    let digests_per_s = if f.from.is_some() { 0 } else { f.digests_per_s };
    let (mut seq, mut next) = (0u64, 0usize);
    let slot = Duration::from_millis(1);
    let mut due = start;
    while Instant::now() < end + Duration::from_secs(1) {
        let now = Instant::now();
        if now < end {
            owed_inv += f64::from(f.invites_per_s) / 1000.0;
            owed_dig += f64::from(digests_per_s) / 1000.0;
        }
        while owed_inv >= 1.0 {
            let src = srcs[next % srcs.len()];
            next += 1;
            seq += 1;
            msg.clear();
            invite(&mut msg, f, src, port, seq);
            outbox.push_from(&[msg.as_bytes()], f.target, Some(src.into()));
            out.invites += 1;
            owed_inv -= 1.0;
        }
        while owed_dig >= 1.0 {
            let src = srcs[next % srcs.len()];
            next += 1;
            seq += 1;
            msg.clear();
            let nonce = nonces.get(&src).map(String::as_str);
            register(&mut msg, f, src, port, seq, nonce);
            outbox.push_from(&[msg.as_bytes()], f.target, Some(src.into()));
            match nonce {
                Some(_) => out.digests += 1,
                None => out.challenge_requests += 1,
            }
            owed_dig -= 1.0;
        }
        outbox.flush(&sock);
        batch.drain(&sock, |b, n| {
            for k in 0..n {
                let (Some((data, _)), Some(IpAddr::V4(to))) = (b.get(k), b.destination(k)) else {
                    continue;
                };
                let status = std::str::from_utf8(data.get(8..11).unwrap_or_default())
                    .ok()
                    .and_then(|s| s.parse::<u16>().ok())
                    .unwrap_or(0);
                *out.statuses.entry(status).or_default() += 1;
                last_answer.insert(to, now);
                if status == 401 {
                    if let Some(n) = nonce_of(data) {
                        nonces.entry(to).or_insert(n);
                    }
                }
            }
        });
        due += slot;
        if let Some(pause) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(pause);
        }
    }
    out.seconds = start.elapsed().as_secs_f64() - 1.0;
    let quiet_since = end - Duration::from_secs(1);
    out.silent_at_end = srcs
        .iter()
        .filter(|s| last_answer.get(s).is_none_or(|t| *t < quiet_since))
        .count();
    Ok(out)
}

fn invite(m: &mut String, f: &Flood, src: Ipv4Addr, port: u16, seq: u64) {
    let (host, user) = (f.target.ip(), &f.user);
    let _ = write!(
        m,
        "INVITE sip:{user}@{host} SIP/2.0\r\nVia: SIP/2.0/UDP {src}:{port};branch=z9hG4bK-fl{seq}\r\n\
         From: <sip:{user}@{host}>;tag=fl{seq}\r\nTo: <sip:{user}@{host}>\r\n\
         Call-ID: flood-{seq}@{src}\r\nCSeq: 1 INVITE\r\nContact: <sip:{user}@{src}:{port}>\r\n\
         Max-Forwards: 70\r\nContent-Length: 0\r\n\r\n"
    );
}

/// A REGISTER for the user; with `nonce`, answered with a digest that is wrong (any hex string is
/// as wrong as a guessed password and costs the server the same check).
fn register(m: &mut String, f: &Flood, src: Ipv4Addr, port: u16, seq: u64, nonce: Option<&str>) {
    let (host, user) = (f.target.ip(), &f.user);
    let _ = write!(
        m,
        "REGISTER sip:{host} SIP/2.0\r\nVia: SIP/2.0/UDP {src}:{port};branch=z9hG4bK-fr{seq}\r\n\
         From: <sip:{user}@{host}>;tag=fr{seq}\r\nTo: <sip:{user}@{host}>\r\n\
         Call-ID: crack-{src}\r\nCSeq: {seq} REGISTER\r\nContact: <sip:{user}@{src}:{port}>\r\n\
         Max-Forwards: 70\r\nExpires: 60\r\n"
    );
    if let Some(nonce) = nonce {
        let _ = write!(
            m,
            "Authorization: Digest username=\"{user}\", realm=\"strowger\", nonce=\"{nonce}\", \
             uri=\"sip:{host}\", response=\"{seq:032x}\", algorithm=MD5, qop=auth, nc=00000001, \
             cnonce=\"{seq:x}\"\r\n"
        );
    }
    m.push_str("Content-Length: 0\r\n\r\n");
}

/// The nonce of a 401's challenge.
fn nonce_of(data: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(data).ok()?;
    let at = text.find("nonce=\"")? + 7;
    let len = text[at..].find('"')?;
    Some(text[at..at + len].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_rotate_over_127_2_without_network_or_broadcast_hosts() {
        assert_eq!(source(0), Ipv4Addr::new(127, 2, 0, 1));
        assert_eq!(source(249), Ipv4Addr::new(127, 2, 0, 250));
        assert_eq!(source(250), Ipv4Addr::new(127, 2, 1, 1));
    }

    #[test]
    fn a_challenge_gives_its_nonce() {
        let r = b"SIP/2.0 401 Unauthorized\r\nWWW-Authenticate: Digest realm=\"strowger\", nonce=\"abc123\", qop=\"auth\"\r\n\r\n";
        assert_eq!(nonce_of(r).as_deref(), Some("abc123"));
    }

    #[test]
    fn only_loopback_targets_are_flooded() {
        let f = Flood {
            target: "192.0.2.1:5060".parse().unwrap(),
            user: "1001".into(),
            invites_per_s: 1,
            digests_per_s: 0,
            sources: 1,
            seconds: 0.1,
            from: None,
        };
        assert!(run(&f).is_err());
    }
}
