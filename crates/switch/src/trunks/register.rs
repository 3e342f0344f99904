//! Outbound registration to a provider (RFC 3261 §10.2), sans-IO and without the engine: the
//! engine tells it the time, the provider's servers and the answers, and it says what to send
//! next and when. One REGISTER at a time, on one Call-ID with rising CSeq (§10.2.4); a 401/407
//! is answered once with the trunk's credentials; a registration is refreshed before it runs
//! out; a server that does not answer, answers 5xx, or cannot be reached is left for the next
//! one the DNS gave (RFC 3263 §4.3); when none is left, the next round waits, longer after
//! each failed one (exponential back-off).

use sip::auth::{Authorization, Challenge};
use sip::header::{parse_u32, HeaderName, NameAddr};
use sip::transaction::Peer;
use sip::Message;
use std::time::{Duration, Instant};

/// The first wait after a round of failures, doubled each round up to [`BACKOFF_MAX`].
pub const BACKOFF_MIN: Duration = Duration::from_secs(5);
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);

/// What the registration does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Nothing before `Registration::deadline`.
    Wait,
    /// The provider's servers are needed (none known, or the DNS answer expired).
    Resolve,
    /// Send a REGISTER to `to` asking for `expires` seconds, with CSeq `cseq` and, answering a
    /// challenge, this header (`Authorization` or `Proxy-Authorization`).
    Send {
        to: Peer,
        cseq: u32,
        expires: u32,
        auth: Option<(&'static str, String)>,
    },
}

/// What became of a REGISTER, for the operator's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Registered at `at` for `granted` seconds.
    Registered { at: Peer, granted: u32 },
    /// `at` refused or failed (`why`); the next server is tried, or the round ends and the next
    /// starts after `retry` (Some).
    Failed {
        at: Peer,
        why: String,
        retry: Option<Duration>,
    },
    /// Answering a challenge (or retrying with another Expires): nothing to report.
    Retrying,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    /// Waiting until `at` to send (the first try, a refresh, or after a back-off).
    Idle { at: Instant },
    /// Waiting for the provider's servers.
    Resolving,
    /// A REGISTER is out to `to`; `answered`: it answers the challenge the last one got.
    Sent { to: Peer, answered: bool },
}

/// The credentials and what is asked of the provider.
#[derive(Clone, Debug)]
pub struct Account {
    /// Digest username and password.
    pub auth_user: String,
    pub password: String,
    /// The Request-URI (`sip:DOMAIN`), which the digest covers.
    pub uri: String,
    pub expires: u32,
}

#[derive(Debug)]
pub struct Registration {
    pub account: Account,
    state: State,
    cseq: u32,
    /// The server in use (kept across refreshes), and those that failed in this round.
    current: Option<Peer>,
    tried: Vec<Peer>,
    /// Rounds that failed in a row (the back-off doubles with each).
    failures: u32,
    /// Expires asked for (raised by a 423's Min-Expires).
    expires: u32,
    /// When the registration runs out, once registered.
    pub until: Option<Instant>,
    /// Digest nonce-count per challenge answered.
    nc: u32,
}

impl Registration {
    /// A registration that starts at `now`.
    pub fn new(account: Account, now: Instant) -> Registration {
        let expires = account.expires;
        Registration {
            account,
            state: State::Idle { at: now },
            cseq: 0,
            current: None,
            tried: Vec::new(),
            failures: 0,
            expires,
            until: None,
            nc: 0,
        }
    }

    /// When `poll` has something to do (None: it waits for an answer or for the DNS).
    pub fn deadline(&self) -> Option<Instant> {
        match self.state {
            State::Idle { at } => Some(at),
            _ => None,
        }
    }

    /// Whether it is registered at `now`.
    pub fn registered(&self, now: Instant) -> bool {
        self.until.is_some_and(|u| u > now)
    }

    /// The server it registers at (or last tried).
    pub fn server(&self) -> Option<Peer> {
        self.current
    }

    /// What to do at `now` with the provider's servers `targets` (in order; `fresh`: the DNS
    /// answer still holds).
    pub fn poll(&mut self, now: Instant, targets: &[Peer], fresh: bool) -> Next {
        match self.state {
            State::Idle { at } if at <= now => {}
            _ => return Next::Wait,
        }
        if !fresh || targets.is_empty() {
            self.state = State::Resolving;
            return Next::Resolve;
        }
        self.send(targets, None)
    }

    /// The provider's servers arrived (or the lookup failed: `targets` empty).
    pub fn resolved(&mut self, now: Instant, targets: &[Peer]) -> (Next, Option<Outcome>) {
        if self.state != State::Resolving {
            return (Next::Wait, None);
        }
        if targets.is_empty() {
            let retry = self.back_off(now);
            let at = self.current.unwrap_or(Peer {
                transport: sip::transaction::Transport::Udp,
                addr: std::net::SocketAddr::from(([0, 0, 0, 0], 0)),
            });
            let why = "its host does not resolve".to_string();
            let retry = Some(retry);
            return (Next::Wait, Some(Outcome::Failed { at, why, retry }));
        }
        (self.send(targets, None), None)
    }

    /// The next REGISTER: to the server in use while it is among `targets`, else the first not
    /// yet tried in this round.
    fn send(&mut self, targets: &[Peer], auth: Option<(&'static str, String)>) -> Next {
        let to = match self
            .current
            .filter(|c| targets.contains(c) && !self.tried.contains(c))
        {
            Some(c) => c,
            None => match targets.iter().find(|t| !self.tried.contains(t)) {
                Some(t) => *t,
                None => targets[0],
            },
        };
        self.current = Some(to);
        self.cseq += 1;
        self.state = State::Sent {
            to,
            answered: auth.is_some(),
        };
        Next::Send {
            to,
            cseq: self.cseq,
            expires: self.expires,
            auth,
        }
    }

    /// A final response to the REGISTER under way; `cnonce` is a fresh client nonce in case a
    /// challenge is answered.
    pub fn on_response(
        &mut self,
        msg: &Message,
        now: Instant,
        targets: &[Peer],
        cnonce: &str,
    ) -> (Next, Outcome) {
        let State::Sent { to, answered } = self.state.clone() else {
            return (Next::Wait, Outcome::Retrying);
        };
        let status = msg.status().unwrap_or(500);
        match status {
            200..=299 => {
                let granted = granted(msg, self.expires);
                if granted == 0 {
                    return self.failed(to, now, targets, "the 200 granted no time".into(), false);
                }
                self.until = Some(now + Duration::from_secs(u64::from(granted)));
                self.failures = 0;
                self.tried.clear();
                self.state = State::Idle {
                    at: now + refresh_after(granted),
                };
                (Next::Wait, Outcome::Registered { at: to, granted })
            }
            401 | 407 => {
                match challenge(msg) {
                    // A challenge to an answer is a wrong password, unless the nonce was stale.
                    Some((c, answer)) if !answered || c.stale => {
                        self.nc += 1;
                        let a = &self.account;
                        let header = Authorization::build(
                            &c,
                            &a.auth_user,
                            &a.password,
                            "REGISTER",
                            &a.uri,
                            self.nc,
                            cnonce,
                        );
                        (
                            self.send(targets, Some((answer, header))),
                            Outcome::Retrying,
                        )
                    }
                    Some(_) => {
                        let why = format!("{status}: the provider refused the credentials (check username, auth_user and password)");
                        self.failed(to, now, targets, why, false)
                    }
                    None => {
                        let why = format!("{status} without a digest challenge strowger can answer (MD5 or SHA-256)");
                        self.failed(to, now, targets, why, false)
                    }
                }
            }
            423 => match msg.header(HeaderName::MinExpires).and_then(parse_u32) {
                Some(min) if min > self.expires => {
                    self.expires = min;
                    (self.send(targets, None), Outcome::Retrying)
                }
                _ => self.failed(
                    to,
                    now,
                    targets,
                    "423 without a usable Min-Expires".into(),
                    false,
                ),
            },
            500..=599 => {
                let why = format!("{status} {}", msg.reason().unwrap_or_default());
                self.failed(to, now, targets, why, true)
            }
            _ => {
                let why = format!("{status} {}", msg.reason().unwrap_or_default());
                self.failed(to, now, targets, why, false)
            }
        }
    }

    /// The REGISTER under way got no answer (timer F).
    pub fn on_timeout(&mut self, now: Instant, targets: &[Peer]) -> (Next, Outcome) {
        self.on_failure(now, targets, "no answer")
    }

    /// The REGISTER under way failed without an answer (`why`): the next server.
    pub fn on_failure(&mut self, now: Instant, targets: &[Peer], why: &str) -> (Next, Outcome) {
        let State::Sent { to, .. } = self.state else {
            return (Next::Wait, Outcome::Retrying);
        };
        self.failed(to, now, targets, why.into(), true)
    }

    /// `to` failed: with `failover`, the next server of this round at once; otherwise (or
    /// when none is left) the round ends with a back-off.
    fn failed(
        &mut self,
        to: Peer,
        now: Instant,
        targets: &[Peer],
        why: String,
        failover: bool,
    ) -> (Next, Outcome) {
        self.until = self.until.filter(|u| *u > now);
        self.tried.push(to);
        if failover && targets.iter().any(|t| !self.tried.contains(t)) {
            let next = self.send(targets, None);
            return (
                next,
                Outcome::Failed {
                    at: to,
                    why,
                    retry: None,
                },
            );
        }
        let retry = self.back_off(now);
        (
            Next::Wait,
            Outcome::Failed {
                at: to,
                why,
                retry: Some(retry),
            },
        )
    }

    /// Ends a round that failed: the next one starts from the best server after the back-off.
    fn back_off(&mut self, now: Instant) -> Duration {
        self.failures += 1;
        self.tried.clear();
        self.current = None;
        let wait = BACKOFF_MIN
            .saturating_mul(1 << (self.failures - 1).min(10))
            .min(BACKOFF_MAX);
        self.state = State::Idle { at: now + wait };
        wait
    }

    /// The REGISTER that ends the registration (Expires: 0) at shutdown, if registered.
    pub fn unregister(&mut self, now: Instant) -> Option<Next> {
        let to = self.current.filter(|_| self.registered(now))?;
        self.until = None;
        self.cseq += 1;
        self.state = State::Sent {
            to,
            answered: false,
        };
        self.expires = 0;
        Some(Next::Send {
            to,
            cseq: self.cseq,
            expires: 0,
            auth: None,
        })
    }
}

/// The digest challenge of a 401 (WWW-Authenticate) or 407 (Proxy-Authenticate) strowger can
/// answer, and the header its answer goes in.
pub fn challenge(msg: &Message) -> Option<(Challenge, &'static str)> {
    let (name, answer) = match msg.status()? {
        401 => (HeaderName::WwwAuthenticate, "Authorization"),
        407 => (HeaderName::ProxyAuthenticate, "Proxy-Authorization"),
        _ => return None,
    };
    let c = msg.all(name).find_map(|v| Challenge::parse(v).ok())?;
    Some((c, answer))
}

/// The seconds a 2xx granted: the `expires` parameter of our contact (the one at the address
/// of our Via: a registrar lists every contact of the account, stale ones of an earlier run
/// too), else of the only contact, else the Expires header, else what was asked.
fn granted(msg: &Message, asked: u32) -> u32 {
    let sent_by = msg
        .header(HeaderName::Via)
        .and_then(|v| v.split(';').next())
        .and_then(|v| v.split_whitespace().nth(1))
        .unwrap_or_default()
        .to_ascii_lowercase();
    let contacts: Vec<NameAddr> = msg
        .all(HeaderName::Contact)
        .flat_map(crate::registrar::split_contacts)
        .filter_map(|c| NameAddr::parse(c).ok())
        .collect();
    let ours = contacts.iter().find(|n| {
        sip::Uri::parse(n.uri).is_ok_and(|u| {
            let host = match u.port {
                Some(p) => format!("{}:{p}", u.host),
                None => u.host.to_string(),
            };
            !sent_by.is_empty() && host.to_ascii_lowercase() == sent_by
        })
    });
    let only = (contacts.len() == 1).then(|| &contacts[0]);
    let from_contact = ours.or(only).and_then(|n| {
        n.params
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("expires"))
            .and_then(|(_, v)| v.and_then(parse_u32))
    });
    from_contact
        .or_else(|| msg.header(HeaderName::Expires).and_then(parse_u32))
        .unwrap_or(asked)
}

/// When to refresh a registration granted for `secs`: at half of a short one, a minute
/// before the end of a long one (room for a failover and its retransmissions).
pub fn refresh_after(secs: u32) -> Duration {
    let secs = u64::from(secs);
    let before = (secs / 2).min(60);
    Duration::from_secs(secs - before)
}

#[cfg(test)]
mod tests;
