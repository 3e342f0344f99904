//! Flood, scanner and brute-force defence, as Kamailio's pike and a fail2ban jail do together:
//! a per-source request rate (a token bucket), a per-source count of failed authentications in a
//! window, bans for `security.ban_s`, scanners known by their User-Agent, and a whitelist
//! (`security.whitelist` and `security.trusted`) that none of it touches. Sans-IO: the time is
//! given with every call.
//!
//! The shell asks [`Engine::admit`] about every SIP datagram before parsing it, so a banned
//! source costs one hash lookup. A ban starts on the worker that saw the offence
//! ([`Event::Ban`]); the shell hands it to every other worker ([`Input::Ban`]), so it holds
//! whichever worker the kernel gives the source's next datagram to. Rates and failure counts are
//! kept by each worker for what it sees: a source the kernel spreads over N workers (many source
//! ports, or REGISTERs handed on by Call-ID while a worker is busy) may get up to N times the
//! allowance before its ban.
//!
//! Memory is bounded: each table has a cap and is swept of what expired every [`SWEEP`]. A full
//! rate table lets new sources through untracked (a flood from that many addresses is beyond
//! what a per-source limit stops); a full failure or ban table makes room by dropping its oldest.
//!
//! [`Event::Ban`]: crate::io::Event::Ban
//! [`Input::Ban`]: crate::io::Input::Ban

use crate::acl::{canonical, Acl};
use crate::config::{ScannerAction, Security};
use crate::engine::Engine;
use rustc_hash::FxHashMap;
use sip::header::HeaderName;
use sip::transaction::Peer;
use sip::Message;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// The default `security.scanner_user_agents`: what SIPVicious (`friendly-scanner`), sipcli,
/// VaxSIPUserAgent and the other well-known SIP scanners put in their User-Agent.
pub const SCANNERS: &[&str] = &[
    "friendly-scanner",
    "sipvicious",
    "sipcli",
    "vaxsipuseragent",
    "sip-scan",
    "iwar",
    "sivus",
    "sundayddr",
    "siparmyknife",
    "smap",
    "pplsip",
];

/// Why a source was banned (the `reason` of its security log line).
pub const REQUEST_RATE: &str = "request rate";
pub const AUTH_FAILURES: &str = "authentication failures";
pub const SCANNER: &str = "scanner";

/// Sources whose request rate one worker follows at once (about 40 bytes each).
const MAX_SOURCES: usize = 65_536;
/// Sources with failed authentications counted at once (each needed a round trip: no spoofing).
const MAX_OFFENDERS: usize = 16_384;
const MAX_BANS: usize = 65_536;
/// Scanner sources already logged (each once per ban period).
const MAX_NOTED: usize = 4_096;
/// How often the tables are swept of expired entries.
pub const SWEEP: Duration = Duration::from_secs(10);
/// A scanner source is logged again after this long (when bans are off).
const NOTE_AGAIN: Duration = Duration::from_secs(600);

/// What to do with a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    /// Drop it unread: its source is banned, or over its rate while bans are off.
    Drop,
    /// Drop it, and its source is banned from now on.
    Ban(Ban),
}

/// A ban just decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ban {
    pub until: Instant,
    pub seconds: u64,
    pub reason: &'static str,
}

/// What a request from a known scanner gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scanner {
    /// Dropped; `note`: the first from its source in a while, worth a log line.
    Drop {
        note: bool,
    },
    Ban(Ban),
}

#[derive(Clone, Copy)]
struct Bucket {
    tokens: f32,
    last: Instant,
    exempt: bool,
}

#[derive(Clone, Copy)]
struct Offender {
    failures: u32,
    since: Instant,
}

/// One worker's view of who may send what.
pub struct Guard {
    trusted: Acl,
    whitelist: Acl,
    ban: Duration,
    /// Tokens a second (0: no rate limit) and the bucket's size.
    rate: f32,
    burst: f32,
    max_failures: u32,
    window: Duration,
    /// One searcher for every scanner User-Agent, case ignored; None: no list.
    scanners: Option<aho_corasick::AhoCorasick>,
    scanner_action: ScannerAction,
    bans: FxHashMap<IpAddr, Instant>,
    buckets: FxHashMap<IpAddr, Bucket>,
    offenders: FxHashMap<IpAddr, Offender>,
    /// Scanner sources logged, until when they are not logged again.
    noted: FxHashMap<IpAddr, Instant>,
    next_sweep: Option<Instant>,
}

impl Guard {
    /// The limits of `s` (a reload), with the bans, rates and failures counted so far kept.
    pub fn reconfigure(&mut self, s: &Security) {
        let mut fresh = Guard::new(s);
        fresh.bans = std::mem::take(&mut self.bans);
        fresh.buckets = std::mem::take(&mut self.buckets);
        fresh.offenders = std::mem::take(&mut self.offenders);
        fresh.noted = std::mem::take(&mut self.noted);
        fresh.next_sweep = self.next_sweep;
        *self = fresh;
    }

    pub fn new(s: &Security) -> Guard {
        Guard {
            trusted: s.trusted.clone(),
            whitelist: s.whitelist.clone(),
            ban: s.ban,
            rate: s.requests_per_s as f32,
            burst: s.request_burst as f32,
            max_failures: s.max_auth_failures,
            window: s.auth_window,
            scanners: (!s.scanner_user_agents.is_empty())
                .then(|| {
                    aho_corasick::AhoCorasick::builder()
                        .ascii_case_insensitive(true)
                        .build(&s.scanner_user_agents)
                        .ok()
                })
                .flatten(),
            scanner_action: s.scanner_action,
            bans: FxHashMap::default(),
            buckets: FxHashMap::default(),
            offenders: FxHashMap::default(),
            noted: FxHashMap::default(),
            next_sweep: None,
        }
    }

    /// Whether `ip` is never limited nor banned (`security.whitelist`, `security.trusted`).
    pub fn exempt(&self, ip: IpAddr) -> bool {
        self.whitelist.contains(ip) || self.trusted.contains(ip)
    }

    /// Whether `ip` is banned at `now`.
    #[inline]
    pub fn banned(&self, ip: IpAddr, now: Instant) -> bool {
        !self.bans.is_empty() && self.bans.get(&canonical(ip)).is_some_and(|&u| u > now)
    }

    /// A SIP datagram (or TCP message) from `ip` at `now`: whether to read it. Banned sources
    /// cost one lookup; others take a token from their bucket, and one with none left is banned.
    #[inline]
    pub fn admit(&mut self, ip: IpAddr, now: Instant) -> Verdict {
        let ip = canonical(ip);
        if !self.bans.is_empty() {
            if let Some(&until) = self.bans.get(&ip) {
                if until > now {
                    return Verdict::Drop;
                }
                self.bans.remove(&ip);
            }
        }
        if self.rate <= 0.0 {
            return Verdict::Pass;
        }
        if self.next_sweep.is_none_or(|t| now >= t) {
            self.sweep(now);
        }
        if self.buckets.len() >= MAX_SOURCES && !self.buckets.contains_key(&ip) {
            return Verdict::Pass;
        }
        let (burst, rate) = (self.burst, self.rate);
        let exempt = |ip| self.whitelist.contains(ip) || self.trusted.contains(ip);
        let b = self.buckets.entry(ip).or_insert_with(|| Bucket {
            tokens: burst,
            last: now,
            exempt: exempt(ip),
        });
        if b.exempt {
            return Verdict::Pass;
        }
        if now > b.last {
            let refill = now.duration_since(b.last).as_secs_f32() * rate;
            b.tokens = (b.tokens + refill).min(burst);
            b.last = now;
        }
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            return Verdict::Pass;
        }
        match self.ban_now(ip, now, REQUEST_RATE) {
            Some(ban) => Verdict::Ban(ban),
            None => Verdict::Drop,
        }
    }

    /// A failed authentication from `ip`: the ban it earned, if this was one too many.
    pub fn auth_failed(&mut self, ip: IpAddr, now: Instant) -> Option<Ban> {
        let ip = canonical(ip);
        if self.max_failures == 0 || self.exempt(ip) {
            return None;
        }
        if self.offenders.len() >= MAX_OFFENDERS && !self.offenders.contains_key(&ip) {
            let window = self.window;
            self.offenders
                .retain(|_, o| now.saturating_duration_since(o.since) < window);
            if self.offenders.len() >= MAX_OFFENDERS {
                let oldest = self.offenders.iter().min_by_key(|(_, o)| o.since);
                if let Some(&ip) = oldest.map(|(ip, _)| ip) {
                    self.offenders.remove(&ip);
                }
            }
        }
        let o = self.offenders.entry(ip).or_insert(Offender {
            failures: 0,
            since: now,
        });
        if now.saturating_duration_since(o.since) >= self.window {
            *o = Offender {
                failures: 0,
                since: now,
            };
        }
        o.failures += 1;
        if o.failures < self.max_failures {
            return None;
        }
        self.offenders.remove(&ip);
        self.ban_now(ip, now, AUTH_FAILURES)
    }

    /// Whether a User-Agent names a known scanner (`security.scanner_user_agents`): one pass
    /// over it for every name at once (about 0.1 µs for a 60-byte User-Agent).
    pub fn is_scanner(&self, user_agent: &str) -> bool {
        self.scanners
            .as_ref()
            .is_some_and(|s| s.is_match(user_agent))
    }

    /// A request from a known scanner at `ip`.
    pub fn scanner(&mut self, ip: IpAddr, now: Instant) -> Scanner {
        let ip = canonical(ip);
        if self.scanner_action == ScannerAction::Ban && !self.exempt(ip) {
            if let Some(ban) = self.ban_now(ip, now, SCANNER) {
                return Scanner::Ban(ban);
            }
        }
        if self.noted.get(&ip).is_some_and(|&t| t > now) {
            return Scanner::Drop { note: false };
        }
        if self.noted.len() >= MAX_NOTED {
            self.noted.retain(|_, t| *t > now);
            if self.noted.len() >= MAX_NOTED {
                self.noted.clear();
            }
        }
        self.noted.insert(ip, now + self.ban.max(NOTE_AGAIN));
        Scanner::Drop { note: true }
    }

    /// A ban another worker decided (or this one, again).
    pub fn ban(&mut self, ip: IpAddr, until: Instant) {
        let ip = canonical(ip);
        if self.exempt(ip) {
            return;
        }
        self.make_room_for_ban(&ip);
        let u = self.bans.entry(ip).or_insert(until);
        *u = (*u).max(until);
    }

    fn ban_now(&mut self, ip: IpAddr, now: Instant, reason: &'static str) -> Option<Ban> {
        if self.ban.is_zero() {
            return None;
        }
        let until = now + self.ban;
        self.ban(ip, until);
        Some(Ban {
            until,
            seconds: self.ban.as_secs(),
            reason,
        })
    }

    /// A full ban table gives up the ban that ends first (the sweep keeps it clear of
    /// expired ones).
    fn make_room_for_ban(&mut self, ip: &IpAddr) {
        if self.bans.len() < MAX_BANS || self.bans.contains_key(ip) {
            return;
        }
        let first = self.bans.iter().min_by_key(|(_, u)| **u).map(|(ip, _)| *ip);
        if let Some(ip) = first {
            self.bans.remove(&ip);
        }
    }

    /// Drops what expired: bans past, buckets full again (as good as new), failure windows
    /// closed, scanner notes past.
    fn sweep(&mut self, now: Instant) {
        self.next_sweep = Some(now + SWEEP);
        let (rate, burst, window) = (self.rate, self.burst, self.window);
        self.bans.retain(|_, u| *u > now);
        self.buckets.retain(|_, b| {
            let idle = now.saturating_duration_since(b.last);
            match b.exempt {
                true => idle < SWEEP,
                false => b.tokens + idle.as_secs_f32() * rate < burst,
            }
        });
        self.offenders
            .retain(|_, o| now.saturating_duration_since(o.since) < window);
        self.noted.retain(|_, t| *t > now);
    }

    /// Entries held (bans, rate buckets, offenders, scanner notes): for tests of the bounds.
    pub fn sizes(&self) -> (usize, usize, usize, usize) {
        (
            self.bans.len(),
            self.buckets.len(),
            self.offenders.len(),
            self.noted.len(),
        )
    }
}

impl Engine {
    /// Whether the shell should read a SIP datagram (or hand over a TCP message) from `ip`: the
    /// first thing it asks, before parsing. False: drop it unanswered (a new ban leaves as
    /// `Event::Ban`, for the shell to hand to every worker and to log).
    #[inline]
    pub fn admit(&mut self, ip: IpAddr, now: Instant) -> bool {
        match self.guard.admit(ip, now) {
            Verdict::Pass => true,
            Verdict::Drop => false,
            Verdict::Ban(ban) => {
                self.ban_event(ip, ban);
                false
            }
        }
    }

    /// Whether events wait to be taken (`poll_output`): after a datagram `admit` dropped, only
    /// a new ban leaves one, and the shell need not poll otherwise.
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// Whether `ip` is banned (a TCP connection from it is closed at once).
    pub fn banned(&self, ip: IpAddr, now: Instant) -> bool {
        self.guard.banned(ip, now)
    }

    /// Whether `ip` is whitelisted or trusted (its TCP connections are not capped per source
    /// nor closed for want of authentication).
    pub fn exempt(&self, ip: IpAddr) -> bool {
        self.guard.exempt(ip)
    }

    pub(crate) fn ban_event(&mut self, ip: IpAddr, ban: Ban) {
        self.events.push_back(crate::io::Event::Ban {
            source: canonical(ip),
            until: ban.until,
            seconds: ban.seconds,
            reason: ban.reason,
        });
    }

    /// A request from a known scanner is dropped here (true), before any transaction exists.
    pub(crate) fn screen(&mut self, msg: &Message, peer: Peer, now: Instant) -> bool {
        let Some(ua) = msg.header(HeaderName::UserAgent) else {
            return false;
        };
        if !self.guard.is_scanner(ua) {
            return false;
        }
        match self.guard.scanner(peer.addr.ip(), now) {
            Scanner::Drop { note: false } => {}
            Scanner::Drop { note: true } => self.events.push_back(crate::io::Event::Scanner {
                source: canonical(peer.addr.ip()),
                user_agent: ua.chars().take(100).collect(),
            }),
            Scanner::Ban(ban) => self.ban_event(peer.addr.ip(), ban),
        }
        true
    }

    /// A failed authentication from `peer`, counted towards its ban.
    pub(crate) fn count_auth_failure(&mut self, peer: Peer) {
        if let Some(ban) = self.guard.auth_failed(peer.addr.ip(), self.clock.now) {
            self.ban_event(peer.addr.ip(), ban);
        }
    }

    /// `peer` proved who it is (a successful REGISTER or authenticated request): over TCP, its
    /// connection is kept past `security.tcp_unauthenticated_s`.
    pub(crate) fn authenticated(&mut self, peer: Peer) {
        if peer.transport.is_stream() {
            self.events
                .push_back(crate::io::Event::TcpAuthenticated { peer: peer.addr });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn guard(security: &str) -> Guard {
        let text = format!(
            "[security]\n{security}\n[[dialplan.contexts.default.rules]]\nexten = \"1\"\nsteps = [\"echo\"]\n"
        );
        Guard::new(&Config::from_str(&text, "g.toml").unwrap().security)
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    const S: fn(u64) -> Duration = Duration::from_secs;
    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn a_flood_past_the_burst_is_banned_and_the_ban_ends() {
        let mut g = guard("whitelist = []\nrequests_per_s = 10\nrequest_burst = 20\nban_s = 60");
        let t0 = Instant::now();
        let a = ip("192.0.2.1");
        for i in 0..20 {
            assert_eq!(g.admit(a, t0), Verdict::Pass, "datagram {i} of the burst");
        }
        let Verdict::Ban(ban) = g.admit(a, t0) else {
            panic!("the 21st datagram at once bans")
        };
        assert_eq!(
            (ban.until, ban.seconds, ban.reason),
            (t0 + S(60), 60, REQUEST_RATE)
        );
        assert!(g.banned(a, t0 + S(59)));
        assert_eq!(g.admit(a, t0 + S(59)), Verdict::Drop);
        // Another source is untouched.
        assert_eq!(g.admit(ip("192.0.2.2"), t0), Verdict::Pass);
        // After the ban: a fresh allowance.
        assert!(!g.banned(a, t0 + S(60)));
        assert_eq!(g.admit(a, t0 + S(60)), Verdict::Pass);
    }

    #[test]
    fn a_steady_rate_within_the_limit_passes_forever() {
        let mut g = guard("whitelist = []\nrequests_per_s = 10\nrequest_burst = 10");
        let t0 = Instant::now();
        let a = ip("192.0.2.1");
        // 9 a second for 100 s.
        for i in 0..900u64 {
            let t = t0 + MS(i * 1000 / 9);
            assert_eq!(g.admit(a, t), Verdict::Pass, "datagram {i}");
        }
    }

    #[test]
    fn whitelisted_and_trusted_sources_are_never_limited_nor_banned() {
        let mut g = guard(
            "whitelist = [\"10.0.0.0/8\"]\ntrusted = [\"198.51.100.7\"]\nrequests_per_s = 1\nrequest_burst = 1\nmax_auth_failures = 1",
        );
        let t0 = Instant::now();
        for who in ["10.1.2.3", "198.51.100.7", "::ffff:10.9.9.9"] {
            for _ in 0..1000 {
                assert_eq!(g.admit(ip(who), t0), Verdict::Pass, "{who}");
            }
            assert_eq!(g.auth_failed(ip(who), t0), None, "{who}");
            g.ban(ip(who), t0 + S(100));
            assert!(!g.banned(ip(who), t0), "{who}");
        }
        // The default whitelist is loopback.
        let mut d = guard("requests_per_s = 1\nrequest_burst = 1");
        for _ in 0..100 {
            assert_eq!(d.admit(ip("127.0.0.1"), t0), Verdict::Pass);
            assert_eq!(d.admit(ip("::1"), t0), Verdict::Pass);
        }
    }

    #[test]
    fn failed_authentications_ban_within_the_window_only() {
        let mut g = guard("whitelist = []\nmax_auth_failures = 3\nauth_window_s = 60\nban_s = 600");
        let t0 = Instant::now();
        let a = ip("203.0.113.9");
        assert_eq!(g.auth_failed(a, t0), None);
        assert_eq!(g.auth_failed(a, t0 + S(10)), None);
        // The window closed: counting starts again.
        assert_eq!(g.auth_failed(a, t0 + S(61)), None);
        assert_eq!(g.auth_failed(a, t0 + S(62)), None);
        let ban = g
            .auth_failed(a, t0 + S(63))
            .expect("third failure in 60 s bans");
        assert_eq!((ban.until, ban.reason), (t0 + S(663), AUTH_FAILURES));
        assert_eq!(g.admit(a, t0 + S(100)), Verdict::Drop);
        assert_eq!(g.admit(ip("203.0.113.10"), t0 + S(100)), Verdict::Pass);
        // An IPv4 source seen through an IPv6 socket is the same source.
        assert!(g.banned(ip("::ffff:203.0.113.9"), t0 + S(100)));
    }

    #[test]
    fn bans_off_still_cut_a_flood_to_the_rate() {
        let mut g = guard("whitelist = []\nban_s = 0\nrequests_per_s = 10\nrequest_burst = 10\nmax_auth_failures = 1");
        let t0 = Instant::now();
        let a = ip("192.0.2.1");
        let passed = (0..1000)
            .filter(|i| g.admit(a, t0 + MS(*i)) == Verdict::Pass)
            .count();
        // The burst and one second's refill.
        assert!((19..=21).contains(&passed), "{passed}");
        assert_eq!(g.auth_failed(a, t0), None);
        assert!(!g.banned(a, t0));
    }

    #[test]
    fn known_scanners_by_user_agent_any_case() {
        let g = guard("");
        assert!(g.is_scanner("friendly-scanner"));
        assert!(g.is_scanner("Friendly-Scanner 0.3.8"));
        assert!(g.is_scanner("sipcli/v1.8"));
        assert!(g.is_scanner("VaxSIPUserAgent/3.1"));
        assert!(!g.is_scanner("baresip v1.0.0 (x86_64/linux)"));
        assert!(!g.is_scanner("sipp"));
        assert!(!guard("scanner_user_agents = []").is_scanner("friendly-scanner"));
    }

    #[test]
    fn a_scanner_is_noted_once_or_banned() {
        let mut g = guard("whitelist = []");
        let t0 = Instant::now();
        let a = ip("192.0.2.1");
        assert_eq!(g.scanner(a, t0), Scanner::Drop { note: true });
        assert_eq!(g.scanner(a, t0 + S(1)), Scanner::Drop { note: false });
        assert_eq!(g.scanner(ip("192.0.2.2"), t0), Scanner::Drop { note: true });
        assert!(!g.banned(a, t0));
        let mut b = guard("whitelist = []\nscanner_action = \"ban\"\nban_s = 30");
        let Scanner::Ban(ban) = b.scanner(a, t0) else {
            panic!("banned")
        };
        assert_eq!((ban.seconds, ban.reason), (30, SCANNER));
        assert!(b.banned(a, t0 + S(29)));
    }

    #[test]
    fn the_tables_stay_bounded_and_expire() {
        let mut g = guard("whitelist = []\nrequests_per_s = 100\nrequest_burst = 100\nban_s = 5\nmax_auth_failures = 2\nauth_window_s = 5");
        let t0 = Instant::now();
        // A flood from 200,000 addresses, one datagram each.
        for i in 0..200_000u32 {
            let a = IpAddr::from((0x0a00_0000 + i).to_be_bytes());
            assert_eq!(g.admit(a, t0), Verdict::Pass);
        }
        assert!(g.sizes().1 <= MAX_SOURCES, "{:?}", g.sizes());
        for i in 0..(MAX_OFFENDERS as u32 + 100) {
            let a = IpAddr::from((0x0b00_0000 + i).to_be_bytes());
            g.auth_failed(a, t0);
        }
        assert!(g.sizes().2 <= MAX_OFFENDERS, "{:?}", g.sizes());
        for i in 0..(MAX_BANS as u32 + 10) {
            g.ban(IpAddr::from((0x0c00_0000 + i).to_be_bytes()), t0 + S(5));
        }
        assert!(g.sizes().0 <= MAX_BANS, "{:?}", g.sizes());
        // Once everything expired, a sweep empties the tables.
        g.admit(ip("192.0.2.1"), t0 + S(20));
        let (bans, buckets, offenders, _) = g.sizes();
        assert_eq!((bans, offenders), (0, 0));
        assert_eq!(buckets, 1, "only the source just seen");
    }
}
