//! SIP trunks to providers (`[[trunks]]`) in the call engine:
//!
//! - where a provider is: its host resolved per RFC 3263 by the shell (`Event::Resolve`, answered
//!   by `Input::Resolved`), kept until the answer's TTL runs out, on every worker;
//! - registration to it: worker 0 runs each trunk's [`register::Registration`] on the
//!   engine's timers, and writes their state for `strowger show peers` ([`TRUNKS_STATE`]);
//! - calls out (`bridge trunk/NAME/NUMBER`, from a context that lists the trunk): a callee leg
//!   whose INVITE answers a 401/407 once with the trunk's credentials and goes on to the next
//!   server when one times out or answers 503;
//! - calls in: a new INVITE from the provider (its `acl`, or an address its host resolves to)
//!   enters the trunk's `did_context` with the DID as the extension ([`Engine::trunk_call`]).

pub mod dns;
pub mod register;

pub use dns::{DnsQuery, Resolved};

use crate::call::{LegRef, Signal};
use crate::config::{Trunk, TrunkHost};
use crate::engine::{transport_param, Engine, ALLOW};
use crate::io::{Event, Level};
use register::{Account, Next, Outcome, Registration};
use rustc_hash::FxHashMap;
use sip::auth::Authorization;
use sip::header::{HeaderName, NameAddr};
use sip::transaction::{ClientTxId, Peer, Transport};
use sip::{Message, Method, RequestBuilder, Uri};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// The file in the data directory that `strowger show peers` reads the registrations from.
pub const TRUNKS_STATE: &str = "trunks.json";

/// A lookup that failed is tried again after this long (calls meanwhile fail at once).
const NEGATIVE_TTL: Duration = Duration::from_secs(10);
/// The shortest time a DNS answer is kept, whatever its TTL.
const MIN_TTL: Duration = Duration::from_secs(1);
/// A server that let a call's INVITE time out is tried last by other calls for this long.
const DOWN_FOR: Duration = Duration::from_secs(60);
/// A server that has not answered a call's INVITE at all (not even 100 Trying) within this
/// many T1 is given up for the next one, if there is one, rather than after timer B (64 T1).
const SILENT_T1S: u32 = 8;

/// The trunk state of one worker.
pub(crate) struct Trunks {
    /// The trunks of the configuration in force, in its order (a trunk's place is what calls,
    /// lookups and REGISTERs hold), then those a reload removed or changed, kept while a call
    /// or their un-REGISTER still uses them ([`Engine::trunks_reload`]).
    list: Vec<TrunkState>,
    /// How many of `list` are the configuration's (the rest are retired).
    live: usize,
    /// DNS lookups under way: token → trunk.
    lookups: FxHashMap<u64, usize>,
    next_token: u64,
    /// REGISTER transactions under way → their trunk.
    reg_txs: FxHashMap<ClientTxId, usize>,
}

/// One trunk as this worker runs it.
struct TrunkState {
    /// Its settings (a retired trunk's as they were).
    cfg: Trunk,
    dns: TrunkDns,
    /// This worker's registration (None: the trunk does not register, or another worker
    /// registers it).
    reg: Option<Reg>,
}

/// Where one trunk's provider is, as this worker knows it.
#[derive(Default)]
struct TrunkDns {
    targets: Vec<Peer>,
    /// Until when `targets` holds (None: never resolved).
    valid_until: Option<Instant>,
    resolving: bool,
    /// Calls waiting for the lookup to dial.
    waiting: Vec<Waiting>,
    /// Servers that timed out on a call recently, and until when they are tried last.
    down: Vec<(Peer, Instant)>,
}

struct Waiting {
    call: usize,
    gen: u64,
    number: String,
    until: Instant,
}

struct Reg {
    machine: Registration,
    call_id: String,
    from_tag: String,
    /// The server last reported registered at (logged only when it changes).
    reported: Option<Peer>,
    /// Why the last REGISTER failed, until one succeeds (for `show peers`).
    last_error: Option<String>,
}

/// An outbound leg through a trunk.
#[derive(Debug)]
pub struct Outbound {
    pub trunk: usize,
    /// Servers this call's INVITE went to, the current one last.
    tried: Vec<Peer>,
    /// The INVITE under way answers a challenge.
    answered: bool,
    nc: u32,
    /// The credentials the INVITE under way carries (header name and value).
    auth: Option<(&'static str, String)>,
    /// Until when the server may stay silent before the next one is tried (None: it answered).
    silent_until: Option<Instant>,
}

impl Outbound {
    /// The credentials of the INVITE under way, for the ACK of its 2xx.
    pub(crate) fn credentials(&self) -> Option<(&'static str, &str)> {
        self.auth.as_ref().map(|(n, v)| (*n, v.as_str()))
    }
}

impl Trunks {
    pub(crate) fn new(trunks: &[Trunk]) -> Trunks {
        Trunks {
            list: trunks.iter().map(TrunkState::new).collect(),
            live: trunks.len(),
            lookups: FxHashMap::default(),
            next_token: 0,
            reg_txs: FxHashMap::default(),
        }
    }

    /// When a registration next has something to do.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.list
            .iter()
            .filter_map(|t| t.reg.as_ref()?.machine.deadline())
            .min()
    }
}

impl TrunkState {
    fn new(cfg: &Trunk) -> TrunkState {
        TrunkState {
            cfg: cfg.clone(),
            dns: TrunkDns::default(),
            reg: None,
        }
    }
}

/// The name and port to resolve for a trunk host, or its fixed address.
fn query(t: &Trunk) -> Result<DnsQuery, Peer> {
    let transport = t.transport.map(Transport::from);
    match &t.host {
        TrunkHost::Addr(addr) => Err(Peer {
            transport: transport.unwrap_or(Transport::Udp),
            addr: *addr,
        }),
        TrunkHost::NamePort(name, port) => Ok(DnsQuery {
            name: name.clone(),
            port: Some(*port),
            transport,
        }),
        TrunkHost::Domain(name) => Ok(DnsQuery {
            name: name.clone(),
            port: None,
            transport,
        }),
    }
}

/// The user part of a URI in a header value (name-addr or bare URI).
fn header_user(v: &str) -> Option<String> {
    let uri = NameAddr::parse(v).map(|n| n.uri.to_string()).ok()?;
    Uri::parse(&uri).ok()?.user.map(str::to_string)
}

impl Engine {
    /// At start: every trunk of the configuration ([`Engine::trunk_start`]).
    pub(crate) fn trunks_start(&mut self, now: Instant) {
        for t in 0..self.trunks.live {
            self.trunk_start(t, now);
        }
    }

    /// Trunk `t` at start or added by a reload: its fixed address when given by IP, a lookup
    /// otherwise (every worker matches calls in by it), and its registration on worker 0.
    fn trunk_start(&mut self, t: usize, now: Instant) {
        match query(&self.trunks.list[t].cfg) {
            Err(peer) => {
                let d = &mut self.trunks.list[t].dns;
                d.targets = vec![peer];
                d.valid_until = Some(now + Duration::from_secs(10 * 365 * 86_400));
            }
            Ok(_) => self.resolve_trunk(t),
        }
        // Worker 0 registers every trunk (as it registers to IAX2 providers), so one worker
        // writes the registrations' state file.
        let cfg = &self.trunks.list[t].cfg;
        if !cfg.register || self.s.worker != 0 {
            return;
        }
        let Some(password) = cfg.password.clone() else {
            return;
        };
        let account = Account {
            auth_user: cfg.auth_user.clone(),
            password,
            uri: format!("sip:{}", cfg.from_domain),
            expires: cfg.expires,
        };
        let call_id = self.own_call_id();
        let from_tag = self.tag();
        self.trunks.list[t].reg = Some(Reg {
            machine: Registration::new(account, now),
            call_id,
            from_tag,
            reported: None,
            last_error: None,
        });
    }

    /// After a reload (`self.s.trunks` the new ones): a trunk whose settings did not change
    /// keeps its servers, registration and calls at its new place; one removed or changed is
    /// un-registered (Expires: 0) and retired, out of reach of new calls and of calls in, kept
    /// while its calls or its un-REGISTER last (so they finish as they started); one added or
    /// changed starts as at start.
    pub(crate) fn trunks_reload(&mut self, now: Instant) {
        let new = self.s.trunks.clone();
        let old_live = self.trunks.live;
        let mut old: Vec<Option<TrunkState>> = std::mem::take(&mut self.trunks.list)
            .into_iter()
            .map(Some)
            .collect();
        // Old place → new place.
        let mut moved: Vec<Option<usize>> = vec![None; old.len()];
        let mut list = Vec::with_capacity(new.len());
        let mut added = Vec::new();
        for cfg in new.iter() {
            let same = (0..old_live).find(|&i| old[i].as_ref().is_some_and(|o| o.cfg == *cfg));
            match same.and_then(|i| Some((i, old[i].take()?))) {
                Some((i, kept)) => {
                    moved[i] = Some(list.len());
                    list.push(kept);
                }
                None => {
                    added.push(list.len());
                    list.push(TrunkState::new(cfg));
                }
            }
        }
        let in_calls: Vec<usize> = self
            .calls
            .ids()
            .into_iter()
            .flat_map(|c| self.calls.get(c).into_iter().flat_map(|c| c.legs()))
            .filter_map(|(_, l)| Some(l.trunk.as_deref()?.trunk))
            .collect();
        let mut unregister = Vec::new();
        for (i, slot) in old.iter_mut().enumerate() {
            let Some(mut gone) = slot.take() else {
                continue;
            };
            if i < old_live {
                if self.s.worker == 0 {
                    let name = &gone.cfg.name;
                    let message =
                        format!("trunk {name}: removed or changed by a reload; its calls go on");
                    self.log(Level::Info, None, message);
                }
                let next = gone.reg.as_mut().and_then(|r| r.machine.unregister(now));
                match next {
                    Some(next) => unregister.push((list.len(), next)),
                    None => gone.reg = None,
                }
            }
            let used = gone.reg.is_some()
                || !gone.dns.waiting.is_empty()
                || in_calls.contains(&i)
                || self.trunks.reg_txs.values().any(|&t| t == i);
            if used {
                moved[i] = Some(list.len());
                list.push(gone);
            }
        }
        let at = |i: usize| moved.get(i).copied().flatten();
        self.trunks.reg_txs = std::mem::take(&mut self.trunks.reg_txs)
            .into_iter()
            .filter_map(|(tx, i)| Some((tx, at(i)?)))
            .collect();
        self.trunks.lookups = std::mem::take(&mut self.trunks.lookups)
            .into_iter()
            .filter_map(|(token, i)| Some((token, at(i)?)))
            .collect();
        for c in self.calls.ids() {
            let Some(call) = self.calls.get_mut(c) else {
                continue;
            };
            let legs: Vec<_> = call.legs().map(|(idx, _)| idx).collect();
            for idx in legs {
                if let Some(out) = call.leg_mut(idx).and_then(|l| l.trunk.as_deref_mut()) {
                    out.trunk = at(out.trunk).unwrap_or(out.trunk);
                }
            }
        }
        self.trunks.list = list;
        self.trunks.live = new.len();
        for (t, next) in unregister {
            self.reg_act(t, next, now);
        }
        for &t in &added {
            self.trunk_start(t, now);
        }
        if self.s.worker == 0 && (!added.is_empty() || old_live != new.len()) {
            self.save_trunks();
        }
    }

    /// Asks the shell to resolve trunk `t`'s host, unless a lookup is under way.
    fn resolve_trunk(&mut self, t: usize) {
        let Ok(query) = query(&self.trunks.list[t].cfg) else {
            return;
        };
        let d = &mut self.trunks.list[t].dns;
        if d.resolving {
            return;
        }
        d.resolving = true;
        self.trunks.next_token += 1;
        let token = self.trunks.next_token;
        self.trunks.lookups.insert(token, t);
        self.events.push_back(Event::Resolve { token, query });
    }

    /// `dead` did not answer: trunk `t`'s calls, on every worker, try it last for
    /// [`DOWN_FOR`].
    fn mark_down(&mut self, t: usize, dead: Peer, now: Instant) {
        let until = now + DOWN_FOR;
        self.trunk_server(t, dead, Some(until));
        if t >= self.trunks.live {
            return;
        }
        self.events.push_back(Event::TrunkServer {
            trunk: t,
            server: dead,
            down_until: Some(until),
        });
    }

    /// `server` answered: if it was taken for dead, it is not any more, on every worker.
    fn mark_up(&mut self, t: usize, server: Peer) {
        if self.trunks.list[t]
            .dns
            .down
            .iter()
            .any(|(p, _)| *p == server)
        {
            self.trunk_server(t, server, None);
            if t >= self.trunks.live {
                return;
            }
            self.events.push_back(Event::TrunkServer {
                trunk: t,
                server,
                down_until: None,
            });
        }
    }

    /// What some worker learnt of a trunk's server (`Input::TrunkServer`), or this one.
    pub(crate) fn trunk_server(&mut self, t: usize, server: Peer, down_until: Option<Instant>) {
        let Some(d) = self.trunks.list.get_mut(t).map(|s| &mut s.dns) else {
            return;
        };
        d.down.retain(|(p, _)| *p != server);
        if let Some(until) = down_until {
            d.down.push((server, until));
        }
    }

    fn trunk_fresh(&self, t: usize, now: Instant) -> bool {
        self.trunks.list[t].dns.valid_until.is_some_and(|u| u > now)
    }

    /// Trunk `t`'s servers in the order to try them: those that timed out lately go last.
    fn trunk_order(&self, t: usize, now: Instant) -> Vec<Peer> {
        let d = &self.trunks.list[t].dns;
        let down = |p: &Peer| d.down.iter().any(|(q, until)| q == p && *until > now);
        let mut v: Vec<Peer> = d.targets.iter().copied().filter(|p| !down(p)).collect();
        v.extend(d.targets.iter().copied().filter(|p| down(p)));
        v
    }

    /// The answer to an `Event::Resolve`.
    pub(crate) fn on_resolved(
        &mut self,
        token: u64,
        result: Result<Resolved, String>,
        now: Instant,
    ) {
        let Some(t) = self.trunks.lookups.remove(&token) else {
            return;
        };
        let name = self.trunks.list[t].cfg.name.clone();
        let d = &mut self.trunks.list[t].dns;
        d.resolving = false;
        match result {
            Ok(r) if !r.targets.is_empty() => {
                d.valid_until = Some(r.valid_until.max(now + MIN_TTL));
                d.targets = r.targets;
            }
            Ok(_) | Err(_) => {
                let why = match result {
                    Err(e) => e,
                    Ok(_) => "no NAPTR, SRV or A/AAAA records".into(),
                };
                // An earlier answer is kept for calls in and out meanwhile.
                d.valid_until = Some(now + NEGATIVE_TTL);
                let host = self.trunks.list[t].cfg.host.uri_host();
                self.log(
                    Level::Warn,
                    None,
                    format!("trunk {name}: cannot resolve {host}: {why} (check [[trunks]] host and general.dns_server)"),
                );
            }
        }
        let targets = self.trunk_order(t, now);
        if let Some(reg) = self.trunks.list[t].reg.as_mut() {
            let (next, outcome) = reg.machine.resolved(now, &targets);
            if let Some(o) = outcome {
                self.reg_outcome(t, o);
            }
            self.reg_act(t, next, now);
        }
        let waiting = std::mem::take(&mut self.trunks.list[t].dns.waiting);
        for w in waiting {
            let live = self.calls.get(w.call).is_some_and(|c| {
                c.timer_gen == w.gen
                    && c.callee().is_none()
                    && matches!(c.wait, crate::call::Wait::Bridge { .. })
            });
            if live {
                self.trunk_dial(w.call, t, &w.number, w.until, now);
            }
        }
        self.run_pending(now);
    }

    /// Registrations whose time came (`Input::Timeout`).
    pub(crate) fn trunk_timers(&mut self, now: Instant) {
        for t in 0..self.trunks.list.len() {
            let due = self.trunks.list[t]
                .reg
                .as_ref()
                .and_then(|r| r.machine.deadline())
                .is_some_and(|d| d <= now);
            if !due {
                continue;
            }
            let targets = self.trunk_order(t, now);
            let fresh = self.trunk_fresh(t, now);
            let Some(reg) = self.trunks.list[t].reg.as_mut() else {
                continue;
            };
            let next = reg.machine.poll(now, &targets, fresh);
            self.reg_act(t, next, now);
        }
    }

    fn reg_act(&mut self, t: usize, next: Next, now: Instant) {
        match next {
            Next::Wait => {}
            Next::Resolve => self.resolve_trunk(t),
            Next::Send {
                to,
                cseq,
                expires,
                auth,
            } => self.send_register(t, to, cseq, expires, auth, now),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn send_register(
        &mut self,
        t: usize,
        to: Peer,
        cseq: u32,
        expires: u32,
        auth: Option<(&'static str, String)>,
        now: Instant,
    ) {
        let local = self.local_for(to);
        let branch = self.branch();
        let trunk = &self.trunks.list[t].cfg;
        let Some(reg) = self.trunks.list[t].reg.as_ref() else {
            return;
        };
        let domain = &trunk.from_domain;
        let aor = format!("<sip:{}@{domain}>", trunk.username);
        let mut b = RequestBuilder::new(&Method::Register, &format!("sip:{domain}"));
        b.header(
            "Via",
            format_args!(
                "SIP/2.0/{} {local};branch={branch};rport",
                crate::dialog::transport_name(to.transport)
            ),
        );
        b.header("Max-Forwards", 70);
        b.header("From", format_args!("{aor};tag={}", reg.from_tag));
        b.header("To", &aor);
        b.header("Call-ID", &reg.call_id);
        b.header("CSeq", format_args!("{cseq} REGISTER"));
        b.header(
            "Contact",
            format_args!(
                "<sip:{}@{local}{}>",
                trunk.username,
                transport_param(to.transport)
            ),
        );
        b.header("Expires", expires);
        b.header("Allow", ALLOW);
        b.header("User-Agent", &self.s.user_agent);
        if let Some((name, value)) = &auth {
            b.header(name, value);
        }
        let bytes = b.finish(None);
        let ctx = self.txs.send_request(bytes, to, now);
        self.trunks.reg_txs.insert(ctx, t);
    }

    /// A response to one of our REGISTERs (true), or to something else (false).
    pub(crate) fn trunk_response(&mut self, ctx: ClientTxId, msg: &Message, now: Instant) -> bool {
        let Some(&t) = self.trunks.reg_txs.get(&ctx) else {
            return false;
        };
        if msg.status().unwrap_or(500) < 200 {
            return true;
        }
        self.trunks.reg_txs.remove(&ctx);
        if t >= self.trunks.live && msg.status().is_some_and(|s| s < 300) {
            let name = &self.trunks.list[t].cfg.name;
            let message = format!("trunk {name}: unregistered (removed or changed by a reload)");
            self.trunks.list[t].reg = None;
            self.log(Level::Info, None, message);
            return true;
        }
        let targets = self.trunk_order(t, now);
        let cnonce = format!("{:016x}", self.rng.u64(..));
        let Some(reg) = self.trunks.list[t].reg.as_mut() else {
            return true;
        };
        let (next, outcome) = reg.machine.on_response(msg, now, &targets, &cnonce);
        self.reg_outcome(t, outcome);
        self.reg_act(t, next, now);
        true
    }

    /// Timer F of one of our REGISTERs (true), or another transaction's (false).
    pub(crate) fn trunk_tx_timeout(&mut self, ctx: ClientTxId, now: Instant) -> bool {
        self.register_failed(ctx, "no answer", now)
    }

    /// One of our REGISTERs failed without an answer (true), or `ctx` is not one (false).
    fn register_failed(&mut self, ctx: ClientTxId, why: &str, now: Instant) -> bool {
        let Some(t) = self.trunks.reg_txs.remove(&ctx) else {
            return false;
        };
        // Calls on this worker try that server last for a while.
        if let Some(dead) = self.trunks.list[t]
            .reg
            .as_ref()
            .and_then(|r| r.machine.server())
        {
            self.mark_down(t, dead, now);
        }
        let targets = self.trunk_order(t, now);
        let Some(reg) = self.trunks.list[t].reg.as_mut() else {
            return true;
        };
        let (next, outcome) = reg.machine.on_failure(now, &targets, why);
        self.reg_outcome(t, outcome);
        self.reg_act(t, next, now);
        true
    }

    /// Tells the operator what became of a REGISTER (a refresh at the same server is quiet),
    /// and rewrites the registrations' state file.
    fn reg_outcome(&mut self, t: usize, outcome: Outcome) {
        let name = self.trunks.list[t].cfg.name.clone();
        if t >= self.trunks.live {
            // A retired trunk's un-REGISTER: once answered (or failed) there is no more to send.
            // (Its 2xx never gets here: trunk_response.)
            let message = match outcome {
                Outcome::Failed { at, why, .. } => {
                    format!("trunk {name}: unregistering at {} failed: {why}", at.addr)
                }
                Outcome::Registered { .. } | Outcome::Retrying => return,
            };
            self.trunks.list[t].reg = None;
            return self.log(Level::Info, None, message);
        }
        if !matches!(outcome, Outcome::Retrying) {
            if let Some(reg) = self.trunks.list[t].reg.as_mut() {
                reg.last_error = match &outcome {
                    Outcome::Failed { at, why, .. } => Some(format!("{}: {why}", at.addr)),
                    _ => None,
                };
            }
            self.save_trunks();
        }
        let (level, message) = match outcome {
            Outcome::Retrying => return,
            Outcome::Registered { at, granted } => {
                self.mark_up(t, at);
                let Some(reg) = self.trunks.list[t].reg.as_mut() else {
                    return;
                };
                if reg.reported == Some(at) {
                    return;
                }
                reg.reported = Some(at);
                (
                    Level::Info,
                    format!("trunk {name}: registered at {} for {granted} s", at.addr),
                )
            }
            Outcome::Failed { at, why, retry } => {
                if let Some(reg) = self.trunks.list[t].reg.as_mut() {
                    reg.reported = None;
                }
                let then = match retry {
                    None => "trying the provider's next server".to_string(),
                    Some(d) => format!("trying again in {} s", d.as_secs()),
                };
                (
                    Level::Warn,
                    format!(
                        "trunk {name}: registration at {} failed: {why}; {then}",
                        at.addr
                    ),
                )
            }
        };
        self.log(level, None, message);
    }

    /// Writes where each registering trunk is registered, until when, and its last failure
    /// (`strowger show peers` reads it).
    fn save_trunks(&mut self) {
        let now = self.clock.now;
        let wall = crate::cdr::unix_seconds(self.clock.wall);
        let trunks: serde_json::Map<String, serde_json::Value> = self.trunks.list
            [..self.trunks.live]
            .iter()
            .enumerate()
            .filter_map(|(t, s)| Some((t, s.reg.as_ref()?)))
            .map(|(t, r)| {
                let until = r.machine.until.filter(|u| *u > now);
                let state = serde_json::json!({
                    "registered_at": until.and(r.machine.server()).map(|p| p.addr.to_string()),
                    "registered_until": until.map(|u| (wall + (u - now).as_secs_f64()).round()),
                    "last_error": r.last_error,
                });
                (self.trunks.list[t].cfg.name.clone(), state)
            })
            .collect();
        let contents = serde_json::json!({ "written": wall.round(), "trunks": trunks }).to_string();
        self.events.push_back(Event::State {
            name: TRUNKS_STATE,
            contents,
        });
    }

    /// `bridge trunk/NAME/NUMBER` (`uri`): NUMBER through trunk NAME, if the call's context
    /// lists it.
    pub(crate) fn dial_trunk(&mut self, call: usize, uri: &str, timeout: Duration, now: Instant) {
        let Some((name, number)) = crate::config::trunk_target(uri).filter(|(_, n)| !n.is_empty())
        else {
            self.warn_call(call, format!("bridge {uri}: expected trunk/NAME/NUMBER"));
            return self.bridge_failed(call, 404, now);
        };
        let Some(t) = self.s.trunks.iter().position(|t| t.name == name) else {
            self.warn_call(
                call,
                format!("bridge {uri}: no trunk {name:?} in [[trunks]]"),
            );
            return self.bridge_failed(call, 404, now);
        };
        let context = self.calls[call].cdr.context.clone();
        if !self.dialplan.allows_trunk(&context, name) {
            self.warn_call(
                call,
                format!("bridge {uri}: context {context:?} may not dial out through trunk {name:?} (its trunks = [...] does not list it)"),
            );
            return self.bridge_failed(call, 403, now);
        }
        let number = self.trunks.list[t].cfg.outbound_number(number);
        let until = now + timeout;
        self.calls[call].cdr.trunk = Some(name.to_string());
        if self.trunk_fresh(t, now) {
            return self.trunk_dial(call, t, &number, until, now);
        }
        let c = &mut self.calls[call];
        // Dialled once the provider's servers are known (or given up on at `until`).
        c.wait = crate::call::Wait::Bridge { until };
        let gen = c.timer_gen;
        self.calls.arm(call, until);
        self.trunks.list[t].dns.waiting.push(Waiting {
            call,
            gen,
            number,
            until,
        });
        self.resolve_trunk(t);
    }

    /// Places the INVITE for `number` through trunk `t` at its first server.
    fn trunk_dial(&mut self, call: usize, t: usize, number: &str, until: Instant, now: Instant) {
        let targets = self.trunk_order(t, now);
        let trunk = &self.trunks.list[t].cfg;
        let Some(&peer) = targets.first() else {
            let name = trunk.name.clone();
            self.warn_call(
                call,
                format!("trunk {name}: no server to call (its host does not resolve)"),
            );
            return self.bridge_failed(call, 503, now);
        };
        let c = &self.calls[call];
        let user = trunk
            .caller_id
            .clone()
            .or_else(|| trunk.from_user.clone())
            .or_else(|| {
                c.vars
                    .get("CALLER")
                    .filter(|u| !u.is_empty() && !u.contains(['@', ':', ' ', '"', '<', '>']))
                    .map(str::to_string)
            })
            .unwrap_or_else(|| trunk.username.clone());
        let from = format!("<sip:{user}@{}>", trunk.from_domain);
        let target = format!("sip:{number}@{}", trunk.host.uri_host());
        let timeout = until.saturating_duration_since(now);
        let opts = crate::bridge::LegOptions {
            from: Some(from),
            caps: (!trunk.codecs.is_empty()).then(|| sdp::Caps {
                codecs: trunk.codecs.clone(),
                dtmf_pt: self.s.caps.dtmf_pt,
            }),
            dtmf: trunk.dtmf,
        };
        let Some(leg) = self.bridge_leg(call, &target, peer, Vec::new(), opts, timeout, now) else {
            return;
        };
        if let Some(l) = self.calls.get_mut(call).and_then(|c| c.leg_mut(leg)) {
            l.trunk = Some(Box::new(Outbound {
                trunk: t,
                tried: vec![peer],
                answered: false,
                nc: 0,
                auth: None,
                silent_until: None,
            }));
            self.watch_silence(call, leg, now);
        }
    }

    /// A trunk leg's INVITE failed with `status` (`msg`: the response; None: timer B): answers
    /// a 401/407 with the trunk's credentials, once per challenge, or sends the INVITE to the
    /// provider's next server after a timeout or 503 (true); false when the failure stands.
    pub(crate) fn trunk_retry(
        &mut self,
        at: LegRef,
        msg: Option<&Message>,
        status: u16,
        now: Instant,
    ) -> bool {
        let Some(out) = self
            .calls
            .get(at.call)
            .and_then(|c| c.leg(at.leg))
            .and_then(|l| l.trunk.as_deref())
        else {
            return false;
        };
        let t = out.trunk;
        let answered = out.answered;
        let tried = out.tried.clone();
        match (status, msg) {
            (401 | 407, Some(msg)) => {
                let trunk = &self.trunks.list[t].cfg;
                let Some(password) = trunk.password.clone() else {
                    return false;
                };
                let Some((challenge, answer)) = register::challenge(msg) else {
                    return false;
                };
                if answered && !challenge.stale {
                    let name = trunk.name.clone();
                    self.warn_call(
                        at.call,
                        format!("trunk {name}: the provider refused the credentials ({status}): check username, auth_user and password"),
                    );
                    return false;
                }
                let auth_user = trunk.auth_user.clone();
                let cnonce = format!("{:016x}", self.rng.u64(..));
                let Some(leg) = self.calls[at.call].leg_mut(at.leg) else {
                    return false;
                };
                let Some(uri) = leg.dialog().map(|d| d.remote_target.clone()) else {
                    return false;
                };
                let Some(out) = leg.trunk.as_deref_mut() else {
                    return false;
                };
                out.answered = true;
                out.nc += 1;
                let header = Authorization::build(
                    &challenge, &auth_user, &password, "INVITE", &uri, out.nc, &cnonce,
                );
                out.auth = Some((answer, header.clone()));
                self.send_invite(at.call, at.leg, Some((answer, &header)), now);
                true
            }
            (408 | 503, _) => {
                let targets = self.trunk_order(t, now);
                let Some(&next) = targets.iter().find(|p| !tried.contains(p)) else {
                    return false;
                };
                if let Some(&dead) = tried.last().filter(|_| status == 408) {
                    self.mark_down(t, dead, now);
                }
                let local = self.local_for(next);
                let Some(leg) = self.calls[at.call].leg_mut(at.leg) else {
                    return false;
                };
                if let Signal::Sip(d) = &mut leg.signal {
                    d.peer = next;
                    d.local_contact =
                        format!("<sip:strowger@{local}{}>", transport_param(next.transport));
                }
                if let Some(out) = leg.trunk.as_deref_mut() {
                    out.tried.push(next);
                    out.answered = false;
                    out.auth = None;
                }
                self.watch_silence(at.call, at.leg, now);
                let name = self.trunks.list[t].cfg.name.clone();
                let from = tried.last().map_or(String::new(), |p| p.addr.to_string());
                let call_id = self.calls[at.call].caller().call_id().to_string();
                self.log(
                    Level::Info,
                    Some(&call_id),
                    format!(
                        "trunk {name}: {from} {}; trying {}",
                        if status == 408 {
                            "did not answer"
                        } else {
                            "answered 503"
                        },
                        next.addr
                    ),
                );
                self.send_invite(at.call, at.leg, None, now);
                true
            }
            _ => false,
        }
    }

    /// The INVITE just sent on trunk leg `leg` must hear from its server within
    /// [`SILENT_T1S`] T1 (when another server is left to try).
    fn watch_silence(&mut self, call: usize, leg: crate::call::LegIdx, now: Instant) {
        let until = now + self.s.timers.t1 * SILENT_T1S;
        if let Some(out) = self
            .calls
            .get_mut(call)
            .and_then(|c| c.leg_mut(leg))
            .and_then(|l| l.trunk.as_deref_mut())
        {
            out.silent_until = Some(until);
            self.calls.arm(call, until);
        }
    }

    /// A response to a trunk leg's INVITE: its server is alive.
    pub(crate) fn trunk_heard(&mut self, at: LegRef) {
        let Some(leg) = self.calls.get_mut(at.call).and_then(|c| c.leg_mut(at.leg)) else {
            return;
        };
        let server = leg.dialog().map(|d| d.peer);
        let Some(out) = leg.trunk.as_deref_mut() else {
            return;
        };
        out.silent_until = None;
        let t = out.trunk;
        if let Some(server) = server {
            self.mark_up(t, server);
        }
    }

    /// A call timer: if its trunk leg's server stayed silent too long, the INVITE goes to the
    /// next server now (with none left, timer B decides).
    pub(crate) fn trunk_silence(&mut self, call: usize, now: Instant) {
        let silent = self
            .trunk_invite(call)
            .is_some_and(|(_, out, _)| out.silent_until.is_some_and(|u| u <= now));
        if silent {
            self.leave_server(call, now);
        }
    }

    /// `server` cannot be reached (`Input::Unreachable`): the REGISTER and the calls' INVITEs
    /// waiting on it go on to the next server now; a call with none left fails with 503.
    pub(crate) fn trunk_unreachable(&mut self, server: Peer, now: Instant) {
        let regs: Vec<ClientTxId> = self
            .trunks
            .reg_txs
            .iter()
            .filter(|(_, &t)| {
                self.trunks.list[t]
                    .reg
                    .as_ref()
                    .and_then(|r| r.machine.server())
                    == Some(server)
            })
            .map(|(ctx, _)| *ctx)
            .collect();
        for ctx in regs {
            self.register_failed(ctx, "unreachable", now);
        }
        for call in self.calls.ids() {
            let waiting = self
                .trunk_invite(call)
                .is_some_and(|(_, _, peer)| peer == server);
            if waiting && !self.leave_server(call, now) {
                if let Some((ctx, _, _)) = self.trunk_invite(call) {
                    self.calls.leg_by_client_tx(ctx, true);
                    self.leg_failed(call, 503, now);
                }
            }
        }
        self.run_pending(now);
    }

    /// The INVITE a call's trunk leg waits on: its transaction, its trunk state, its server.
    fn trunk_invite(&self, call: usize) -> Option<(ClientTxId, &Outbound, Peer)> {
        let c = self.calls.get(call)?;
        let l = c.leg(c.callee_idx()?)?;
        Some((l.invite_tx?, l.trunk.as_deref()?, l.dialog()?.peer))
    }

    /// Gives up the server a call's trunk leg waits on for the next one (false: none is left).
    /// The old transaction runs on unwatched; should it answer 2xx after all, that dialog is
    /// ACKed and ended at once (an orphan, as after a CANCEL).
    fn leave_server(&mut self, call: usize, now: Instant) -> bool {
        let Some((ctx, out, _)) = self.trunk_invite(call) else {
            return false;
        };
        let (t, tried) = (out.trunk, out.tried.clone());
        if !self.trunk_order(t, now).iter().any(|p| !tried.contains(p)) {
            return false;
        }
        let c = &self.calls[call];
        let Some(leg) = c.callee_idx() else {
            return false;
        };
        let Some(dialog) = c.leg(leg).and_then(|l| l.dialog()).cloned() else {
            return false;
        };
        self.calls.leg_by_client_tx(ctx, true);
        self.calls.orphan(ctx, dialog);
        self.trunk_retry(LegRef { call, leg }, None, 408, now)
    }

    /// Whether a new INVITE from `from` is a trunk's call: from an address in its `acl`, or
    /// one its host resolves to. Then the context it enters and its extension: the DID (the
    /// Request-URI's user, or the To user when the Request-URI names our account, as after a
    /// registration), rewritten by `did_strip` / `did_prefix`. Not challenged: the provider
    /// authenticated its caller.
    pub(crate) fn trunk_call(&self, from: SocketAddr, msg: &Message) -> Option<TrunkCall> {
        let ip = from.ip();
        let live = &self.trunks.list[..self.trunks.live];
        let t = live.iter().position(|t| {
            t.cfg.acl.contains(ip) || t.dns.targets.iter().any(|p| p.addr.ip() == ip)
        })?;
        let trunk = &self.trunks.list[t].cfg;
        let ruri_user = msg.uri().ok().and_then(|u| u.user.map(str::to_string));
        let to_user = msg.header(HeaderName::To).and_then(header_user);
        let did = match ruri_user {
            Some(u) if !u.is_empty() && u != trunk.username => u,
            _ => to_user.unwrap_or_default(),
        };
        Some(TrunkCall {
            trunk: trunk.name.clone(),
            dtmf: trunk.dtmf,
            context: trunk
                .did_context
                .clone()
                .unwrap_or_else(|| self.s.default_context.clone()),
            exten: trunk.inbound_did(&did),
        })
    }

    /// At shutdown: registrations are ended (Expires: 0), so the provider sends no calls to a
    /// switch that is gone.
    pub(crate) fn trunks_shutdown(&mut self, now: Instant) {
        for t in 0..self.trunks.list.len() {
            let next = self.trunks.list[t]
                .reg
                .as_mut()
                .and_then(|r| r.machine.unregister(now));
            if let Some(next) = next {
                self.reg_act(t, next, now);
            }
        }
    }
}

/// Where a trunk's call in goes.
pub(crate) struct TrunkCall {
    pub trunk: String,
    /// How the provider sends and takes digits (None: `rtp.dtmf`).
    pub dtmf: Option<media::DtmfMode>,
    pub context: String,
    pub exten: String,
}
