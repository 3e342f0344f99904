//! The registrar (RFC 3261 §10) with digest authentication (RFC 3261 §22, RFC 8760), and the
//! location lookups behind `bridge user/NAME`.
//!
//! Store I/O never runs here: the engine asks the `Host` to run a `StoreOp` and gets its result
//! later through `Engine::on_store_result`. A REGISTER therefore waits in `pending` while one
//! operation checks its digest answer against the stored credentials and writes its bindings;
//! if the store fails, the phone gets 503 with Retry-After, never a 200 for bindings that were
//! not stored.

use crate::call::Wait;
use crate::config::KeepAliveKind;
use crate::engine::Engine;
use crate::keepalive::KeepAlives;
use rustc_hash::FxHashMap;
use sip::auth::{Algorithm, Authorization, Challenge, NonceCheck, Nonces};
use sip::header::{parse_u32, HeaderName, NameAddr};
use sip::transaction::{Peer, ServerTxId, Transport};
use sip::{Message, Uri};
use std::time::{Duration, Instant};
use store::pipe::{Answer, Ask};
use store::{Binding, Change, Credentials};

/// Nonces whose nonce-count one worker remembers at once (replay protection); each worker has
/// its own table.
const NONCE_TABLE: usize = 100_000;

/// What the engine asks the store to do.
#[derive(Debug, Clone)]
pub enum StoreOp {
    /// A user's credentials. With `recent`, a copy the store read from its backend shortly
    /// before `now` (unix seconds; `store::USER_TTL_S`) will do: answered without I/O.
    User {
        user: String,
        domain: String,
        recent: bool,
        now: u64,
    },
    /// An authenticated REGISTER in one trip to the store thread: `auth` is checked against
    /// `user`'s credentials (`Registrar::check_digest`), and when it passes, `changes` (None: a
    /// REGISTER refused once authenticated) are applied to `aor`. A recent copy of the
    /// credentials can only let it through; a denial is checked again against the backend.
    Register {
        user: String,
        aor: String,
        auth: Box<Authorization>,
        changes: Option<Vec<Change>>,
        now: u64,
        registrar: Registrar,
    },
    /// Changes to an AOR's bindings; the reply is what remains.
    Update {
        aor: String,
        changes: Vec<Change>,
        now: u64,
    },
    /// Where to reach a user: whether the user exists, and its current bindings.
    Locate {
        user: String,
        domain: String,
        now: u64,
    },
    /// Sets (`target` Some) or clears a user's forwarding of `kind` (None: every kind).
    Forward {
        user: String,
        domain: String,
        kind: Option<store::Forward>,
        target: Option<String>,
    },
    /// Claims the first free of `names` in the cluster's claim set `set` for `holder`
    /// (`store::Claims::claim`; cluster.rs).
    Claim {
        set: String,
        names: Vec<String>,
        holder: String,
        now: u64,
        ttl_s: u64,
    },
    /// Gives a claim up if `holder` still holds it.
    Release {
        set: String,
        name: String,
        holder: String,
    },
    /// Who holds `name` of `set` at `now`.
    Holder { set: String, name: String, now: u64 },
    /// Writes `member` into the cluster's roster `roster` as logged in (`on`) or out.
    Enrol {
        roster: String,
        member: String,
        on: bool,
    },
    /// Every member of roster `roster` with its last state.
    Roster { roster: String },
}

#[derive(Debug, Clone)]
pub enum StoreReply {
    User(Option<Credentials>),
    Bindings(Vec<Binding>),
    /// What a `Register`'s digest answer was worth, and the bindings left when it was applied.
    Registered {
        digest: Digest,
        bindings: Vec<Binding>,
    },
    Located {
        exists: bool,
        bindings: Vec<Binding>,
        /// The user's forwarding (`bridge user/NAME` honours it).
        forward: store::Forwarding,
        /// How the user's phones take digits (None: `rtp.dtmf`).
        dtmf: Option<media::DtmfMode>,
    },
    /// Whether the user whose forwarding was to change exists.
    Forwarded(bool),
    Claimed(store::Claim),
    /// A claim given up, or a roster written.
    Written,
    Holder(Option<String>),
    Roster(Vec<(String, bool)>),
}

pub type StoreResult = Result<StoreReply, String>;

/// The answer to `op` when the store has it without I/O (a recent copy of credentials): the
/// shell then answers on the worker, sparing two thread hand-offs.
pub fn answer_now(s: &dyn store::Store, op: &StoreOp) -> Option<StoreResult> {
    match op {
        StoreOp::User {
            user,
            domain,
            recent: true,
            now,
        } => s
            .recent_user(user, domain, *now)
            .map(|c| Ok(StoreReply::User(c))),
        _ => None,
    }
}

/// Runs an operation on a store (what the shell's store threads do): the steps `drive` takes
/// over a pipe, each ask answered by a blocking call, so both paths share one logic.
pub fn run(s: &dyn store::Store, op: StoreOp) -> StoreResult {
    let mut next = drive(s, op);
    loop {
        next = match next {
            Next::Done(r) => return r,
            Next::Ask(ask, flow) => {
                let answer = match ask {
                    Ask::User { user, domain } => s.user(&user, &domain).map(Answer::User),
                    Ask::Update { aor, changes, now } => {
                        s.update(&aor, &changes, now).map(Answer::Bindings)
                    }
                };
                match answer {
                    Ok(a) => flow.resume(a),
                    Err(e) => return Err(e.to_string()),
                }
            }
            Next::Threads(StoreOp::Locate { user, domain, now }) => {
                return locate(s, &user, &domain, now).map_err(|e| e.to_string())
            }
            Next::Threads(StoreOp::Forward {
                user,
                domain,
                kind,
                target,
            }) => {
                return s
                    .set_forward(&user, &domain, kind, target.as_deref())
                    .map(StoreReply::Forwarded)
                    .map_err(|e| e.to_string())
            }
            Next::Threads(
                op @ (StoreOp::Claim { .. }
                | StoreOp::Release { .. }
                | StoreOp::Holder { .. }
                | StoreOp::Enrol { .. }
                | StoreOp::Roster { .. }),
            ) => return claims(s, op).map_err(|e| e.to_string()),
            // `resume` hands over only a reply that does not fit its step; a blocking call's
            // answer always fits.
            Next::Threads(op) => return Err(format!("no step of {op:?} on this store")),
        };
    }
}

/// The cluster's claims (cluster.rs) on a store that holds them.
fn claims(s: &dyn store::Store, op: StoreOp) -> store::Result<StoreReply> {
    let Some(c) = s.claims() else {
        return Err(store::Error::Refused {
            backend: "the store".into(),
            reason: "it keeps no claims shared by nodes (use redis:// or redis+cluster://)".into(),
        });
    };
    Ok(match op {
        StoreOp::Claim {
            set,
            names,
            holder,
            now,
            ttl_s,
        } => StoreReply::Claimed(c.claim(&set, &names, &holder, now, ttl_s)?),
        StoreOp::Release { set, name, holder } => {
            c.release(&set, &name, &holder)?;
            StoreReply::Written
        }
        StoreOp::Holder { set, name, now } => StoreReply::Holder(c.holder(&set, &name, now)?),
        StoreOp::Enrol { roster, member, on } => {
            c.enrol(&roster, &member, on)?;
            StoreReply::Written
        }
        StoreOp::Roster { roster } => StoreReply::Roster(c.roster(&roster)?),
        _ => unreachable!("only claims come here"),
    })
}

/// `StoreOp::Locate` (the one operation `drive` leaves to the blocking path): whether the user
/// exists may come from a recent copy; the bindings never do.
fn locate(s: &dyn store::Store, user: &str, domain: &str, now: u64) -> store::Result<StoreReply> {
    let creds = s
        .recent_user(user, domain, now)
        .map_or_else(|| s.user(user, domain), Ok)?;
    let bindings = match creds {
        Some(_) => s.lookup(&format!("{user}@{domain}"), now)?,
        None => Vec::new(),
    };
    Ok(StoreReply::Located {
        exists: creds.is_some(),
        bindings,
        dtmf: creds
            .as_ref()
            .and_then(|c| c.dtmf.as_deref())
            .and_then(media::DtmfMode::parse),
        forward: creds.map(|c| c.forward).unwrap_or_default(),
    })
}

/// A store operation a worker drives itself over the store's pipe (`store::pipe`): the common
/// path of `run`, one ask at a time, without a store thread.
#[derive(Debug)]
pub struct Flow {
    op: StoreOp,
    /// A `Register`'s digest answer once checked (its nonce count is then taken).
    digest: Option<Digest>,
}

/// What the worker does next with an operation it drives.
#[derive(Debug)]
pub enum Next {
    /// Send this ask and give its answer to `Flow::resume`.
    Ask(Ask, Flow),
    Done(StoreResult),
    /// Run this on a store thread: it is off the common path, and nothing was changed yet.
    Threads(StoreOp),
}

/// The first step of `op` on `s`.
pub fn drive(s: &dyn store::Store, op: StoreOp) -> Next {
    if let Some(r) = answer_now(s, &op) {
        return Next::Done(r);
    }
    let flow = Flow { op, digest: None };
    match &flow.op {
        StoreOp::User { user, domain, .. } => {
            let ask = Ask::User {
                user: user.clone(),
                domain: domain.clone(),
            };
            Next::Ask(ask, flow)
        }
        StoreOp::Update { aor, changes, now } => {
            let ask = Ask::Update {
                aor: aor.clone(),
                changes: changes.clone(),
                now: *now,
            };
            Next::Ask(ask, flow)
        }
        StoreOp::Register {
            user,
            auth,
            now,
            registrar,
            ..
        } => {
            let domain = &registrar.domain;
            let check =
                |c: Option<Credentials>| registrar.check_digest(auth, c.as_ref(), "REGISTER");
            match s.recent_user(user, domain, *now).map(check) {
                // A recent copy can only let a phone in: a denial is checked again against
                // the backend.
                Some(Digest::Denied) | None => {
                    let ask = Ask::User {
                        user: user.clone(),
                        domain: domain.clone(),
                    };
                    Next::Ask(ask, flow)
                }
                Some(d) => flow.checked(d),
            }
        }
        StoreOp::Locate { .. }
        | StoreOp::Forward { .. }
        | StoreOp::Claim { .. }
        | StoreOp::Release { .. }
        | StoreOp::Holder { .. }
        | StoreOp::Enrol { .. }
        | StoreOp::Roster { .. } => Next::Threads(flow.op),
    }
}

impl Flow {
    /// The next step once `answer` came back for the last ask.
    pub fn resume(self, answer: Answer) -> Next {
        match (&self.op, answer, &self.digest) {
            (StoreOp::User { .. }, Answer::User(c), _) => Next::Done(Ok(StoreReply::User(c))),
            (StoreOp::Update { .. }, Answer::Bindings(list), _) => {
                Next::Done(Ok(StoreReply::Bindings(list)))
            }
            (
                StoreOp::Register {
                    auth, registrar, ..
                },
                Answer::User(c),
                None,
            ) => {
                let d = registrar.check_digest(auth, c.as_ref(), "REGISTER");
                self.checked(d)
            }
            (StoreOp::Register { .. }, Answer::Bindings(bindings), Some(d)) => {
                Next::Done(Ok(StoreReply::Registered {
                    digest: *d,
                    bindings,
                }))
            }
            _ => Next::Threads(self.fallback()),
        }
    }

    /// A `Register` whose digest answer is now known: its bindings next, if it passed.
    fn checked(mut self, d: Digest) -> Next {
        match (&self.op, d) {
            (
                StoreOp::Register {
                    aor,
                    changes: Some(changes),
                    now,
                    ..
                },
                Digest::Valid,
            ) => {
                let ask = Ask::Update {
                    aor: aor.clone(),
                    changes: changes.clone(),
                    now: *now,
                };
                self.digest = Some(d);
                Next::Ask(ask, self)
            }
            _ => Next::Done(Ok(StoreReply::Registered {
                digest: d,
                bindings: Vec::new(),
            })),
        }
    }

    /// What a store thread runs when the pipe cannot finish this flow: the whole operation, or
    /// once a `Register`'s digest passed only its bindings (checking the answer again would
    /// take its nonce count twice).
    pub fn fallback(self) -> StoreOp {
        match (self.op, self.digest) {
            (
                StoreOp::Register {
                    aor,
                    changes: Some(changes),
                    now,
                    ..
                },
                Some(Digest::Valid),
            ) => StoreOp::Update { aor, changes, now },
            (op, _) => op,
        }
    }
}

/// HA1s for a new password (what `strowger user add` and `[[users]]` store), with the default
/// call settings.
pub fn credentials(user: &str, domain: &str, password: &str) -> Credentials {
    Credentials {
        user: user.to_string(),
        domain: domain.to_string(),
        ha1_md5: sip::auth::ha1(Algorithm::Md5, user, domain, password),
        ha1_sha256: sip::auth::ha1(Algorithm::Sha256, user, domain, password),
        ..Credentials::default()
    }
}

/// What a `[[users]]` entry stores: its HA1s and its call settings.
pub fn user_credentials(u: &crate::config::User) -> Credentials {
    Credentials {
        context: u.context.clone(),
        caller_id: u.caller_id.clone(),
        max_calls: u.max_calls,
        allow: u.allow.clone(),
        record_calls: u.record_calls.clone(),
        dtmf: u.dtmf.map(|m| m.name().to_string()),
        ..credentials(&u.user, &u.domain, &u.password)
    }
}

/// Registrar settings, shared by the workers (the nonce table is one for the process).
#[derive(Clone)]
pub struct Registrar {
    pub domain: String,
    pub min_expires: u32,
    pub max_expires: u32,
    pub default_expires: u32,
    pub algorithms: Vec<Algorithm>,
    pub keepalive: Option<(Duration, KeepAliveKind)>,
    pub authenticate: bool,
    /// Signs the nonces every worker issues (each counts the uses of its own).
    pub secret: [u8; 32],
    pub nonce_lifetime_s: u64,
    /// Contacts per address-of-record (`Change::Limit`, decided by the store).
    pub max_contacts: usize,
    pub contacts_overflow: store::Overflow,
}

impl std::fmt::Debug for Registrar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registrar")
            .field("domain", &self.domain)
            .finish_non_exhaustive()
    }
}

impl Registrar {
    /// `secret` signs nonces: pick it at random per process.
    pub fn new(cfg: &crate::config::Registrar, secret: [u8; 32]) -> Registrar {
        Registrar {
            domain: cfg.domain.clone(),
            min_expires: cfg.min_expires,
            max_expires: cfg.max_expires,
            default_expires: cfg.default_expires,
            algorithms: cfg.algorithms.clone(),
            keepalive: (cfg.keepalive_s > 0)
                .then(|| (Duration::from_secs(cfg.keepalive_s.into()), cfg.keepalive)),
            authenticate: cfg.authenticate,
            secret,
            nonce_lifetime_s: cfg.nonce_lifetime_s.into(),
            max_contacts: cfg.max_contacts,
            contacts_overflow: cfg.contacts_overflow,
        }
    }

    /// A worker's nonce table: nonces that name the worker, their uses counted there.
    pub fn nonces(&self, worker: usize) -> Nonces {
        Nonces::new(self.secret, self.nonce_lifetime_s, NONCE_TABLE)
            .with_issuer(u8::try_from(worker).unwrap_or(u8::MAX))
    }

    /// Checks digest credentials against a user's stored HA1s (the worker checks the nonce:
    /// `Engine::count_nonce`).
    pub fn check_digest(
        &self,
        auth: &Authorization,
        creds: Option<&Credentials>,
        method: &str,
    ) -> Digest {
        if !self.algorithms.contains(&auth.algorithm) {
            // Answered with an algorithm this registrar does not offer: challenge again.
            return Digest::Rechallenge { stale: false };
        }
        let ok = creds.is_some_and(|c| {
            let ha1 = match auth.algorithm {
                Algorithm::Md5 => &c.ha1_md5,
                Algorithm::Sha256 => &c.ha1_sha256,
            };
            auth.verify(ha1, method)
        });
        match ok {
            true => Digest::Valid,
            false => Digest::Denied,
        }
    }
}

/// What a digest answer is worth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Digest {
    Valid,
    /// Wrong password or unknown user.
    Denied,
    /// Right password but a nonce that is stale, replayed or not ours, or an algorithm not
    /// offered: challenge again.
    Rechallenge {
        stale: bool,
    },
}

/// What a store operation was for.
pub(crate) enum Pending {
    /// A REGISTER whose bindings are being written (after its digest answer is checked, with
    /// `StoreOp::Register`); `refused`: the answer it gets instead once authenticated.
    Register {
        stx: ServerTxId,
        msg: Message,
        peer: Peer,
        aor: String,
        refused: Option<Refusal>,
        /// The digest answer, whose nonce use is counted once the password is right.
        auth: Option<Box<Authorization>>,
    },
    /// A request (a proxied one, or a new call) whose caller's credentials are being fetched
    /// to check its digest answer (auth.rs).
    Auth(Box<crate::auth::AuthWait>),
    /// A request for a proxied domain waiting for the callee's bindings.
    Proxy {
        stx: ServerTxId,
        msg: Message,
        peer: Peer,
    },
    /// A queue's agent being located for a waiting caller (queues.rs).
    Queue {
        call: usize,
        gen: u64,
        agent: Box<str>,
    },
    /// `bridge user/NAME` waiting for the callee's bindings.
    Dial {
        call: usize,
        gen: u64,
        user: String,
        timeout: Duration,
    },
    /// The API's call waiting for FROM's bindings (originate.rs).
    Origin { call: usize, gen: u64 },
    /// A `forward` step waiting for the user's forwarding to be stored.
    Forward { call: usize, gen: u64 },
    /// A voicemail box's user's phones, to be told of its messages unsolicited (mwi.rs).
    Mwi { user: String },
    /// A claim of the cluster's (cluster.rs).
    Cluster(crate::cluster::Why),
}

/// What one worker's registrar keeps between inputs: store operations under way, the nonces it
/// issued and the keep-alives of the phones that registered through it. The fields are this
/// module's: only the registrar and its lookups read and write them.
pub(crate) struct RegistrarState {
    /// Store operations under way (registrar, location lookups), by token.
    pending: FxHashMap<u64, Pending>,
    next_token: u64,
    /// The nonces this worker issued and how often each was used (requests answering one are
    /// handed to this worker: `nonce_owner`).
    nonces: Nonces,
    /// Keep-alives to NATed phones registered through this worker (`registrar.keepalive_s`).
    keepalives: Option<KeepAlives>,
    /// The contacts registered through this worker while an event client listens.
    watch: crate::reg_watch::RegWatch,
}

impl RegistrarState {
    pub(crate) fn new(r: &Registrar, worker: usize) -> RegistrarState {
        RegistrarState {
            pending: FxHashMap::default(),
            next_token: 0,
            nonces: r.nonces(worker),
            keepalives: r.keepalive.map(|(period, _)| KeepAlives::new(period)),
            watch: Default::default(),
        }
    }

    /// When the next keep-alive is due, or a watched contact lapses.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let keepalive = self.keepalives.as_ref().and_then(KeepAlives::next_deadline);
        keepalive
            .into_iter()
            .chain(self.watch.next_deadline())
            .min()
    }

    /// The AOR's bindings were removed outside SIP (the API, which tells it): none expires.
    pub(crate) fn forget(&mut self, aor: &str) {
        self.watch.forget(aor);
    }
}

/// An error response to a REGISTER: status and extra headers.
pub(crate) type Refusal = (u16, Vec<(&'static str, String)>);

/// Where a binding's REGISTER came from, on its transport.
pub(crate) fn source_of(b: &Binding) -> Peer {
    let transport = match b.transport.as_str() {
        "tcp" => Transport::Tcp,
        "tls" => Transport::Tls,
        "ws" => Transport::Ws,
        "wss" => Transport::Wss,
        _ => Transport::Udp,
    };
    Peer {
        transport,
        addr: b.received,
    }
}

/// Splits a Contact header value into its contacts (commas inside <> or quotes do not split).
pub(crate) fn split_contacts(v: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut quoted, mut start) = (0, false, 0);
    let b = v.as_bytes();
    for i in 0..b.len() {
        match b[i] {
            b'"' if i == 0 || b[i - 1] != b'\\' => quoted = !quoted,
            b'<' if !quoted => depth += 1,
            b'>' if !quoted => depth -= 1,
            b',' if !quoted && depth == 0 => {
                out.push(v[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(v[start..].trim());
    out.retain(|s| !s.is_empty());
    out
}

/// The user a REGISTER registers: the user part of its To URI.
fn register_user(msg: &Message) -> Option<String> {
    let to = NameAddr::parse(msg.header(HeaderName::To)?).ok()?;
    let user = Uri::parse(to.uri).ok()?.user?;
    (!user.is_empty()).then(|| user.to_string())
}

/// What a nonce is bound to: the address it is sent to (an IPv4 address as its IPv6-mapped
/// form, so both sockets agree).
fn nonce_bind(peer: Peer) -> [u8; 16] {
    match crate::acl::canonical(peer.addr.ip()) {
        std::net::IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        std::net::IpAddr::V6(a) => a.octets(),
    }
}

fn unquote(s: &str) -> String {
    s.trim_matches('"').to_string()
}

impl Engine {
    /// Asks the shell for a store operation; its result comes back as `Input::Store` with the
    /// token returned.
    pub(crate) fn store_op(&mut self, op: StoreOp, why: Pending) -> u64 {
        let r = &mut self.registrar;
        r.next_token += 1;
        let token = r.next_token;
        r.pending.insert(token, why);
        let op = Box::new(op);
        self.events.push_back(crate::io::Event::Store { token, op });
        token
    }

    /// Gives up waiting for a store operation: its result will be dropped when it comes.
    pub(crate) fn take_pending(&mut self, token: u64) -> Option<Pending> {
        self.registrar.pending.remove(&token)
    }

    /// What this worker's nonce table says of a nonce and nonce-count, recording nothing.
    /// Whether `nonce` is one of ours, sent to `peer`'s address, still fresh and (with `nc`)
    /// not replayed; nothing is counted.
    pub(crate) fn peek_nonce(&self, nonce: &str, nc: Option<&str>, peer: Peer) -> NonceCheck {
        let bind = nonce_bind(peer);
        self.registrar
            .nonces
            .peek(nonce, nc, self.clock.unix(), &bind)
    }

    /// The result of an operation `store_op` asked for.
    pub(crate) fn on_store_result(&mut self, token: u64, result: StoreResult, now: Instant) {
        let Some(why) = self.registrar.pending.remove(&token) else {
            return;
        };
        match why {
            Pending::Register {
                stx,
                msg,
                peer,
                aor,
                refused,
                auth,
            } => match result {
                Ok(StoreReply::Bindings(list)) => self.stored(stx, &msg, peer, &aor, &list, now),
                Ok(StoreReply::Registered { digest, bindings }) => {
                    let digest = match (digest, auth) {
                        (Digest::Valid, Some(a)) => self.count_nonce(&a, peer),
                        (d, _) => d,
                    };
                    match (digest, refused) {
                        (Digest::Valid, None) => self.stored(stx, &msg, peer, &aor, &bindings, now),
                        (Digest::Valid, Some(r)) => self.refuse(stx, &msg, peer, r, now),
                        // Unknown user or wrong password: the same answer, so users cannot be
                        // guessed.
                        (Digest::Denied, _) => {
                            self.auth_failed(peer, &aor, "wrong password");
                            self.reg_reply(stx, &msg, peer, 403, &[], now)
                        }
                        (Digest::Rechallenge { stale }, _) => {
                            self.challenge(stx, &msg, peer, stale, now)
                        }
                    }
                }
                Ok(_) => {}
                Err(e) => self.store_down(stx, &msg, peer, &e, now),
            },
            Pending::Auth(w) => match result {
                Ok(StoreReply::User(creds)) => self.credentials_arrived(w, creds, now),
                Ok(_) => {}
                Err(e) => self.credentials_failed(w, &e, now),
            },
            Pending::Proxy { stx, msg, peer } => match result {
                Ok(StoreReply::Located {
                    exists, bindings, ..
                }) => self.proxy_located(stx, &msg, peer, exists, &bindings, now),
                Ok(_) => {}
                Err(e) => self.store_down(stx, &msg, peer, &e, now),
            },
            Pending::Queue { call, gen, agent } => {
                self.queue_located(call, gen, agent, result, now)
            }
            Pending::Dial {
                call,
                gen,
                user,
                timeout,
            } => {
                let lookup = crate::hunt::Lookup { token, call, gen };
                self.dial_located(lookup, &user, result, timeout, now)
            }
            Pending::Forward { call, gen } => self.forward_stored(call, gen, result, now),
            Pending::Origin { call, gen } => self.origin_located(call, gen, result, now),
            Pending::Mwi { user } => self.mwi_located(&user, result, now),
            Pending::Cluster(why) => self.cluster_answered(why, result, now),
        }
        self.run_pending(now);
    }

    pub(crate) fn store_down(
        &mut self,
        stx: ServerTxId,
        msg: &Message,
        peer: Peer,
        e: &str,
        now: Instant,
    ) {
        self.warn(format!("location store: {e}"));
        let extra = self.retry_after();
        self.reply(stx, msg, peer, 503, "Service Unavailable", &extra, now);
    }

    fn reg_reply(
        &mut self,
        stx: ServerTxId,
        msg: &Message,
        peer: Peer,
        status: u16,
        extra: &[(&str, String)],
        now: Instant,
    ) {
        let tag = self.tag();
        let reason = sip::status::reason_phrase(status);
        self.respond(stx, msg, peer, status, reason, Some(&tag), extra, None, now);
    }

    /// One challenge per configured algorithm (RFC 8760), in the configured order, on one fresh
    /// nonce. Clients differ: SIPp 3.6 answers the first challenge and fails if it is SHA-256,
    /// Debian 12's baresip refuses any set with SHA-256 in it; hence MD5 alone unless
    /// configured. A client that picks SHA-256 is verified with it.
    pub(crate) fn challenges(&mut self, stale: bool, peer: Peer) -> Vec<String> {
        let nonce = self
            .registrar
            .nonces
            .issue(self.clock.unix(), &nonce_bind(peer));
        self.s
            .registrar
            .algorithms
            .iter()
            .map(|&algorithm| {
                Challenge {
                    realm: self.s.registrar.domain.clone(),
                    nonce: nonce.clone(),
                    opaque: None,
                    algorithm,
                    qop_auth: true,
                    stale,
                }
                .to_header()
            })
            .collect()
    }

    /// A REGISTER without credentials is challenged without a transaction, as a stateless
    /// proxy would: the 401 keeps no state (a retransmission gets a fresh nonce, and every
    /// nonce this process issued is good), so half of a registration's transactions and their
    /// 32 s of timer J are spared. Returns false when the request needs the full path.
    pub(crate) fn challenge_statelessly(&mut self, msg: &Message, peer: Peer) -> bool {
        if !self.s.registrar.authenticate
            || msg.method() != Some(&sip::Method::Register)
            || msg.header(HeaderName::Authorization).is_some()
            || register_user(msg).is_none()
            || self.dispatches_register(msg)
        {
            return false;
        }
        self.stateless_challenge(msg, peer);
        true
    }

    /// A 401 with fresh challenges, sent without a transaction.
    pub(crate) fn stateless_challenge(&mut self, msg: &Message, peer: Peer) {
        let extra = self.challenge_headers(false, peer);
        self.reject_stateless(msg, peer, 401, "Unauthorized", &extra);
    }

    /// The request's Authorization for our realm, if it carries one that parses.
    pub(crate) fn answer_for_us(&self, msg: &Message) -> Option<Authorization> {
        let realm = &self.s.registrar.domain;
        msg.all(HeaderName::Authorization)
            .filter_map(|v| Authorization::parse(v).ok())
            .find(|a| &a.realm == realm)
    }

    fn challenge_headers(&mut self, stale: bool, peer: Peer) -> Vec<(&'static str, String)> {
        self.challenges(stale, peer)
            .into_iter()
            .map(|c| ("WWW-Authenticate", c))
            .collect()
    }

    /// Counts a use of a digest answer's nonce whose password was right: a replayed or stale
    /// one, or one sent to another address than `peer`'s, is challenged again.
    pub(crate) fn count_nonce(&mut self, auth: &Authorization, peer: Peer) -> Digest {
        let nc = auth.qop_auth.then_some(auth.nc.as_deref().unwrap_or(""));
        let bind = nonce_bind(peer);
        match self
            .registrar
            .nonces
            .check(&auth.nonce, nc, self.clock.unix(), &bind)
        {
            NonceCheck::Valid => Digest::Valid,
            NonceCheck::Stale => Digest::Rechallenge { stale: true },
            NonceCheck::Invalid => Digest::Rechallenge { stale: false },
        }
    }

    /// A digest that did not prove the password (or named an unknown user: the same to the
    /// caller): a security event for the security log, counted towards the source's ban
    /// (`security.max_auth_failures`).
    pub(crate) fn auth_failed(&mut self, peer: Peer, user: &str, reason: &'static str) {
        let user = user.to_string();
        self.events.push_back(crate::io::Event::Security {
            source: crate::acl::canonical(peer.addr.ip()),
            user,
            reason,
        });
        self.count_auth_failure(peer);
    }

    /// Whether a digest answer's nonce is one this worker sent to `peer`'s address (fresh or
    /// not): only then does its failure count against that address, which a forged source
    /// cannot make it do.
    pub(crate) fn nonce_sent_to(&self, auth: &Authorization, peer: Peer) -> bool {
        let nc = auth.qop_auth.then_some(auth.nc.as_deref().unwrap_or(""));
        self.peek_nonce(&auth.nonce, nc, peer) != NonceCheck::Invalid
    }

    /// 401 with fresh challenges.
    pub(crate) fn challenge(
        &mut self,
        stx: ServerTxId,
        msg: &Message,
        peer: Peer,
        stale: bool,
        now: Instant,
    ) {
        let extra = self.challenge_headers(stale, peer);
        self.reg_reply(stx, msg, peer, 401, &extra, now);
    }

    /// A REGISTER: challenge it, or have the store check its answer and write its bindings.
    pub(crate) fn on_register(&mut self, stx: ServerTxId, msg: Message, peer: Peer, now: Instant) {
        let Some(user) = register_user(&msg) else {
            let w = [(
                "Warning",
                "399 strowger \"To needs a user: sip:USER@DOMAIN\"".to_string(),
            )];
            return self.reg_reply(stx, &msg, peer, 400, &w, now);
        };
        if !self.s.registrar.authenticate {
            return self.store_bindings(stx, msg, peer, &user, now);
        }
        let Some(auth) = self.answer_for_us(&msg) else {
            return self.challenge(stx, &msg, peer, false, now);
        };
        let realm = self.s.registrar.domain.clone();
        // The nonce first: a failure is counted towards a ban only for an answer to one of our
        // challenges, not for any datagram that names a user.
        let nc = auth.qop_auth.then_some(auth.nc.as_deref().unwrap_or(""));
        match self.peek_nonce(&auth.nonce, nc, peer) {
            NonceCheck::Valid => {}
            NonceCheck::Stale => return self.challenge(stx, &msg, peer, true, now),
            NonceCheck::Invalid => return self.challenge(stx, &msg, peer, false, now),
        }
        if auth.username != user {
            self.auth_failed(peer, &auth.username, "username does not match");
            let w = [(
                "Warning",
                "399 strowger \"username does not match the To user\"".to_string(),
            )];
            return self.reg_reply(stx, &msg, peer, 403, &w, now);
        }
        let aor = format!("{user}@{realm}");
        let (changes, refused) = match self.changes(&msg, peer) {
            Ok(c) => (Some(c), None),
            Err(r) => (None, Some(r)),
        };
        let auth = Box::new(auth);
        let op = StoreOp::Register {
            user,
            aor: aor.clone(),
            auth: auth.clone(),
            changes,
            now: self.clock.unix(),
            registrar: self.s.registrar.clone(),
        };
        let why = Pending::Register {
            stx,
            msg,
            peer,
            aor,
            refused,
            auth: Some(auth),
        };
        self.store_op(op, why);
    }

    /// Writes the bindings an accepted REGISTER asks for; the 200 is sent once they are stored.
    fn store_bindings(
        &mut self,
        stx: ServerTxId,
        msg: Message,
        peer: Peer,
        user: &str,
        now: Instant,
    ) {
        let aor = format!("{user}@{}", self.s.registrar.domain);
        let changes = match self.changes(&msg, peer) {
            Ok(c) => c,
            Err(r) => return self.refuse(stx, &msg, peer, r, now),
        };
        let op = StoreOp::Update {
            aor: aor.clone(),
            changes,
            now: self.clock.unix(),
        };
        let why = Pending::Register {
            stx,
            msg,
            peer,
            aor,
            refused: None,
            auth: None,
        };
        self.store_op(op, why);
    }

    fn refuse(&mut self, stx: ServerTxId, msg: &Message, peer: Peer, r: Refusal, now: Instant) {
        let (status, extra) = r;
        let extra: Vec<(&str, String)> = extra.iter().map(|(n, v)| (*n, v.clone())).collect();
        self.reg_reply(stx, msg, peer, status, &extra, now);
    }

    /// The bindings are stored: keep-alives follow them, and the phone gets its 200.
    fn stored(
        &mut self,
        stx: ServerTxId,
        msg: &Message,
        peer: Peer,
        aor: &str,
        list: &[Binding],
        now: Instant,
    ) {
        if self.over_limit(msg, peer, list) {
            let w = format!(
                "399 strowger \"{aor} has registrar.max_contacts ({}) contacts; \
                 unregister one or raise the limit\"",
                self.s.registrar.max_contacts
            );
            return self.reg_reply(stx, msg, peer, 403, &[("Warning", w)], now);
        }
        if let Some(k) = self.registrar.keepalives.as_mut() {
            k.update(aor, list, now, self.clock.unix());
        }
        self.authenticated(peer);
        if self.watched & crate::control::REGISTRATION != 0 {
            let unix = self.clock.unix();
            let bound: Vec<_> = list
                .iter()
                .map(|b| (b.contact.clone(), b.remaining(unix)))
                .collect();
            for n in self.registrar.watch.stored(aor, &bound, now) {
                self.events.push_back(crate::io::Event::Notice(n));
            }
        }
        self.registered(stx, msg, peer, list, now)
    }

    /// Whether the store refused a REGISTER's new contacts for `registrar.max_contacts`: one it
    /// put is not among the bindings it returned (`Overflow::Refuse` applies nothing).
    /// A refusal needs the bindings and the new contacts (at most one more than the commas in
    /// the Contact values) to pass the limit, so the common REGISTER is not parsed again.
    fn over_limit(&self, msg: &Message, peer: Peer, list: &[Binding]) -> bool {
        let most_new: usize = msg
            .all(HeaderName::Contact)
            .map(|v| 1 + v.bytes().filter(|&b| b == b',').count())
            .sum();
        self.s.registrar.contacts_overflow == store::Overflow::Refuse
            && list.len() + most_new > self.s.registrar.max_contacts
            && self.changes(msg, peer).is_ok_and(|changes| {
                changes.iter().any(
                    |c| matches!(c, Change::Put(b) if !list.iter().any(|l| l.contact == b.contact)),
                )
            })
    }

    /// The binding changes a REGISTER asks for, or the error response (RFC 3261 §10.3).
    fn changes(&self, msg: &Message, peer: Peer) -> Result<Vec<Change>, Refusal> {
        let r = &self.s.registrar;
        // A Path makes strowger send a user's calls wherever it points (RFC 3327): only an edge
        // proxy strowger trusts may set one.
        if msg.header(HeaderName::Path).is_some()
            && !self.s.security.trusted.contains(peer.addr.ip())
        {
            let w = "399 strowger \"Path is accepted only from edge proxies in security.trusted\"";
            return Err((403, vec![("Warning", w.to_string())]));
        }
        let header_expires = msg.header(HeaderName::Expires).and_then(parse_u32);
        let contacts: Vec<&str> = msg
            .all(HeaderName::Contact)
            .flat_map(split_contacts)
            .collect();
        let bad = |w: &str| (400, vec![("Warning", format!("399 strowger \"{w}\""))]);
        if contacts.contains(&"*") {
            if contacts.len() != 1 || header_expires != Some(0) {
                return Err(bad("Contact: * needs Expires: 0 and no other contact"));
            }
            return Ok(vec![Change::RemoveAll]);
        }
        let call_id = msg
            .header(HeaderName::CallId)
            .unwrap_or_default()
            .to_string();
        let cseq =
            sip::CSeq::parse(msg.header(HeaderName::CSeq).unwrap_or_default()).map_or(0, |c| c.seq);
        let now = self.clock.unix();
        let mut out = Vec::new();
        for c in contacts {
            let Ok(n) = NameAddr::parse(c) else {
                return Err(bad("unparseable Contact"));
            };
            let param = |name: &str| {
                n.params
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(name))
                    .map(|(_, v)| v.unwrap_or(""))
            };
            let expires = param("expires")
                .and_then(parse_u32)
                .or(header_expires)
                .unwrap_or(r.default_expires);
            if expires == 0 {
                out.push(Change::Remove {
                    contact: n.uri.to_string(),
                });
                continue;
            }
            if expires < r.min_expires {
                return Err((423, vec![("Min-Expires", r.min_expires.to_string())]));
            }
            let expires = expires.min(r.max_expires);
            let q = param("q")
                .and_then(|q| q.parse::<f32>().ok())
                .map_or(1000, |q| (q.clamp(0.0, 1.0) * 1000.0).round() as u16);
            out.push(Change::Put(Binding {
                contact: n.uri.to_string(),
                expires_at: now + u64::from(expires),
                q,
                received: peer.addr,
                transport: match peer.transport {
                    Transport::Udp => "udp".into(),
                    Transport::Tcp => "tcp".into(),
                    Transport::Tls => "tls".into(),
                    Transport::Ws => "ws".into(),
                    Transport::Wss => "wss".into(),
                },
                path: msg.all(HeaderName::Path).map(str::to_string).collect(),
                instance: param("+sip.instance").map(unquote),
                reg_id: param("reg-id").and_then(parse_u32),
                call_id: call_id.clone(),
                cseq,
            }));
        }
        let puts = out.iter().filter(|c| matches!(c, Change::Put(_))).count();
        if puts > r.max_contacts {
            let w = format!(
                "399 strowger \"{puts} contacts in one REGISTER; registrar.max_contacts is {}\"",
                r.max_contacts
            );
            return Err((403, vec![("Warning", w)]));
        }
        if puts > 0 {
            out.push(Change::Limit {
                max: r.max_contacts,
                overflow: r.contacts_overflow,
            });
        }
        Ok(out)
    }

    /// 200 listing every current contact with its remaining time.
    fn registered(
        &mut self,
        stx: ServerTxId,
        msg: &Message,
        peer: Peer,
        list: &[Binding],
        now: Instant,
    ) {
        let t = self.clock.unix();
        let mut extra: Vec<(&str, String)> = list
            .iter()
            .map(|b| ("Contact", contact_value(b, t)))
            .collect();
        extra.push(("Date", httpdate(t)));
        self.metrics.registration();
        self.reg_reply(stx, msg, peer, 200, &extra, now);
    }

    /// Tells the watched contacts whose time passed with no refresh (forgets them all once
    /// nobody listens).
    pub(crate) fn tell_expired(&mut self, now: Instant) {
        if self.watched & crate::control::REGISTRATION == 0 {
            return self.registrar.watch.clear();
        }
        for n in self.registrar.watch.expired(now) {
            self.events.push_back(crate::io::Event::Notice(n));
        }
    }

    /// Sends the keep-alives that are due: a stateless OPTIONS (its answer matches no
    /// transaction and is dropped) or a CRLF pair, to where the phone's REGISTER came from.
    pub(crate) fn send_keepalives(&mut self, now: Instant) {
        let (Some(k), Some((_, kind))) = (
            self.registrar.keepalives.as_mut(),
            self.s.registrar.keepalive,
        ) else {
            return;
        };
        for (peer, contact) in k.poll(now) {
            let bytes: Vec<u8> = match kind {
                KeepAliveKind::Crlf => b"\r\n\r\n".to_vec(),
                KeepAliveKind::Options => {
                    let call_id = format!("{}@strowger", self.branch());
                    self.options_request(peer, &contact, &call_id)
                }
            };
            self.out.push_back((peer, bytes.into()));
        }
    }

    /// An OPTIONS to `uri` at `peer` (keep-alives, dispatch probes).
    pub(crate) fn options_request(&mut self, peer: Peer, uri: &str, call_id: &str) -> Vec<u8> {
        let local = self.local_for(peer);
        let (branch, tag) = (self.branch(), self.tag());
        let mut b = sip::RequestBuilder::new(&sip::Method::Options, uri);
        b.header(
            "Via",
            format_args!(
                "SIP/2.0/{} {local};branch={branch};rport",
                crate::dialog::transport_name(peer.transport)
            ),
        );
        b.header("Max-Forwards", 70);
        b.header("From", format_args!("<sip:strowger@{local}>;tag={tag}"));
        b.header("To", format_args!("<{uri}>"));
        b.header("Call-ID", call_id);
        b.header("CSeq", "1 OPTIONS");
        b.header("User-Agent", &self.s.user_agent);
        b.finish(None)
    }

    /// `bridge user/NAME`: look the user up, then call where it registered from
    /// (`dial_located`). Returns the lookup's token.
    pub(crate) fn dial_user(
        &mut self,
        call: usize,
        name: &str,
        timeout: Duration,
        now: Instant,
    ) -> Option<u64> {
        let (user, domain) = match name.split_once('@') {
            Some((u, d)) => (u.to_string(), d.to_string()),
            None => (name.to_string(), self.s.registrar.domain.clone()),
        };
        let c = self.calls.get_mut(call)?;
        let until = now + timeout;
        c.wait = Wait::Bridge { until };
        let gen = c.timer_gen;
        self.calls.arm(call, until);
        let op = StoreOp::Locate {
            user: user.clone(),
            domain,
            now: self.clock.unix(),
        };
        let why = Pending::Dial {
            call,
            gen,
            user,
            timeout,
        };
        Some(self.store_op(op, why))
    }

    /// Rings every contact of a user at once (each a fork of the call, beside the legs a ring
    /// group already rings).
    /// Rings every binding of a user whose phones take digits as `dtmf` says.
    pub(crate) fn dial_bindings(
        &mut self,
        call: usize,
        mut bindings: Vec<Binding>,
        dtmf: Option<media::DtmfMode>,
        timeout: Duration,
        now: Instant,
    ) {
        preference_order(&mut bindings);
        if bindings.is_empty() {
            return self.member_failed(call, 480, now);
        }
        // Parallel forking: every contact rings at once; the first 2xx wins (bridge.rs).
        for (i, b) in bindings.iter().enumerate() {
            // A phone behind proxies (Path, RFC 3327) is reached through them: the Path is the
            // route set and its first hop is where the INVITE goes. Otherwise the INVITE goes
            // where the REGISTER came from (NAT), not to the Contact's host.
            let (route_set, peer) = self.route_to(b);
            // The callee rung so far keeps ringing as a fork; a failed dial ends the loop.
            let Some(c) = self.calls.get_mut(call) else {
                return;
            };
            if !c.demote_callee() && i > 0 {
                return;
            }
            let opts = crate::bridge::LegOptions {
                dtmf,
                ..Default::default()
            };
            self.bridge_leg(call, &b.contact, peer, route_set, opts, timeout, now);
        }
    }
}

/// Highest q first, then the most recently refreshed: the order a user's contacts are rung in.
pub(crate) fn preference_order(bindings: &mut [Binding]) {
    bindings.sort_by(|a, b| b.q.cmp(&a.q).then(b.expires_at.cmp(&a.expires_at)));
}

/// A binding as the 200 lists it: expiry left, q when not the default, and the RFC 5626
/// instance and reg-id the phone registered with (it matches its flows by them).
fn contact_value(b: &Binding, now: u64) -> String {
    let mut v = format!("<{}>;expires={}", b.contact, b.remaining(now));
    if b.q != 1000 {
        let q = format!("{:.3}", f32::from(b.q) / 1000.0);
        v.push_str(";q=");
        v.push_str(q.trim_end_matches('0').trim_end_matches('.'));
    }
    if let Some(i) = &b.instance {
        v.push_str(&format!(";+sip.instance=\"{i}\""));
    }
    if let Some(r) = b.reg_id {
        v.push_str(&format!(";reg-id={r}"));
    }
    v
}

/// An RFC 7231 date for the Date header (RFC 3261 §20.17).
fn httpdate(unix: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = unix / 86_400;
    let secs = unix % 86_400;
    // Civil from days (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{}, {d:02} {} {y} {:02}:{:02}:{:02} GMT",
        DAYS[(days % 7) as usize],
        MONTHS[(m - 1) as usize],
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `Register` the pipe began, with its digest answer checked (`digest`) or not.
    fn register_flow(digest: Option<Digest>) -> Flow {
        let cfg = crate::config::Config::embedded().registrar;
        let auth = "Digest username=\"a\", realm=\"x\", nonce=\"n\", uri=\"sip:x\", response=\"r\"";
        let op = StoreOp::Register {
            user: "a".into(),
            aor: "a@x".into(),
            auth: Box::new(Authorization::parse(auth).unwrap()),
            changes: Some(vec![Change::RemoveAll]),
            now: 1,
            registrar: Registrar::new(&cfg, [7; 32]),
        };
        Flow { op, digest }
    }

    #[test]
    fn a_flow_the_pipe_cannot_finish_never_checks_a_digest_twice() {
        // Not checked yet: the store thread does all of it.
        assert!(matches!(
            register_flow(None).fallback(),
            StoreOp::Register { .. }
        ));
        // Checked (its nonce count taken): only the bindings are left to write.
        let op = register_flow(Some(Digest::Valid)).fallback();
        assert!(
            matches!(&op, StoreOp::Update { aor, changes, now: 1 } if aor == "a@x" && changes == &[Change::RemoveAll]),
            "{op:?}"
        );
        // Its bindings written: done, with the digest's verdict.
        let Next::Done(Ok(StoreReply::Registered { digest, bindings })) =
            register_flow(Some(Digest::Valid)).resume(Answer::Bindings(Vec::new()))
        else {
            panic!("a registered flow is done");
        };
        assert_eq!((digest, bindings.len()), (Digest::Valid, 0));
        // An answer that does not fit the step goes to the store thread.
        let next = register_flow(None).resume(Answer::Bindings(Vec::new()));
        assert!(
            matches!(next, Next::Threads(StoreOp::Register { .. })),
            "{next:?}"
        );
    }

    #[test]
    fn contacts_split_outside_brackets_and_quotes() {
        assert_eq!(
            split_contacts("\"a, b\" <sip:a@x>;q=0.5, <sip:b@y;p=1,2>;expires=60"),
            ["\"a, b\" <sip:a@x>;q=0.5", "<sip:b@y;p=1,2>;expires=60"]
        );
        assert_eq!(split_contacts("*"), ["*"]);
    }

    #[test]
    fn contacts_in_the_200_carry_q_and_instance() {
        let b = Binding {
            contact: "sip:a@127.0.0.1:5070".into(),
            expires_at: 160,
            q: 500,
            received: "127.0.0.1:5070".parse().unwrap(),
            transport: "udp".into(),
            path: Vec::new(),
            instance: Some("<urn:uuid:00000000-0000-1000-8000-000A95A0E128>".into()),
            reg_id: Some(1),
            call_id: "c".into(),
            cseq: 1,
        };
        assert_eq!(
            contact_value(&b, 100),
            "<sip:a@127.0.0.1:5070>;expires=60;q=0.5;\
             +sip.instance=\"<urn:uuid:00000000-0000-1000-8000-000A95A0E128>\";reg-id=1"
        );
        let plain = Binding {
            q: 1000,
            instance: None,
            reg_id: None,
            ..b
        };
        assert_eq!(
            contact_value(&plain, 100),
            "<sip:a@127.0.0.1:5070>;expires=60"
        );
    }

    #[test]
    fn http_dates() {
        assert_eq!(httpdate(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(httpdate(1_700_000_000), "Tue, 14 Nov 2023 22:13:20 GMT");
    }
}
