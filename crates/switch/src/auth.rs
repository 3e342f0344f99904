//! Who a new call is from, and what it may reach. A new INVITE (past the message checks of
//! `Engine::new_call`) is admitted one of three ways:
//!
//! - from a trusted peer (`security.trusted`: trunks, an edge proxy): in
//!   `dialplan.default_context`, unchallenged;
//! - to an extension the public context (`security.public_context`) lists: there,
//!   unauthenticated, whoever calls;
//! - otherwise as a user: challenged (401, RFC 3261 §22) with the registrar's nonces, and once its
//!   digest answer checks out against the user's credentials in the store, run in the user's
//!   context with the user's caller ID, call limit and allowed patterns.
//!
//! Nothing can be learnt by asking: every unauthenticated INVITE for an extension outside the
//! public context gets the same 401 whether the extension or user exists or not, and an unknown
//! user, a wrong password and a destination the user may not call all get the same 403 (what
//! Asterisk calls `alwaysauthreject`).
//!
//! The digest check is shared with the proxy role (proxy.rs): the credentials come from the store
//! as a `StoreOp::User` (`fetch_credentials`), and `credentials_arrived` checks the answer, counts
//! its nonce and goes on with what the request was authenticated for (`Then`).

use crate::dialplan::{Route, Vars};
use crate::engine::Engine;
use crate::io::Level;
use crate::registrar::{Digest, Pending, StoreOp};
use crate::slots::UserSlot;
use regex::Regex;
use rustc_hash::FxHashMap;
use sip::auth::{Authorization, NonceCheck, Nonces};
use sip::header::HeaderName;
use sip::transaction::{Peer, ServerTxId};
use sip::{Message, Method};
use std::net::SocketAddr;
use std::time::Instant;
use store::Credentials;

/// A caller ID as a user's settings give it: `"Alice" <1001>`, `Alice <1001>` or `1001`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallerId {
    /// The display name, without quotes.
    pub name: Option<String>,
    /// The number: the user part of the From of the user's calls, and their CALLER.
    pub number: String,
}

impl CallerId {
    pub fn parse(s: &str) -> Result<CallerId, String> {
        let expect = "expected a number such as \"1001\" or a name and number such as \"\\\"Alice\\\" <1001>\"";
        let s = s.trim();
        let (name, number) = match s.split_once('<') {
            Some((name, rest)) => {
                let number = rest
                    .strip_suffix('>')
                    .ok_or_else(|| format!("{s:?} — {expect}"))?;
                let name = name.trim();
                let name = name
                    .strip_prefix('"')
                    .and_then(|n| n.strip_suffix('"'))
                    .unwrap_or(name);
                let bad = |c: char| c == '"' || c == '\\' || c.is_control();
                if name.contains(bad) {
                    return Err(format!(
                        "{s:?} — the name must not contain quotes, backslashes or control characters"
                    ));
                }
                ((!name.is_empty()).then(|| name.to_string()), number.trim())
            }
            None => (None, s),
        };
        let bad = |c: char| "@:<>\";,?&=\\/".contains(c) || c.is_whitespace() || c.is_control();
        if number.is_empty() || number.contains(bad) {
            return Err(format!("{s:?} — {expect}"));
        }
        Ok(CallerId {
            name,
            number: number.to_string(),
        })
    }
}

/// Whether a user's `allow` pattern is a valid regular expression (checked where it is set:
/// `[[users]]`, `strowger user add`).
pub fn check_pattern(p: &str) -> Result<(), String> {
    Regex::new(p).map(|_| ()).map_err(|e| {
        format!(
            "invalid regex {p:?}: {}",
            e.to_string().lines().last().unwrap_or("")
        )
    })
}

/// An authenticated caller, kept with its call: its name, the caller ID its calls carry, and
/// its share of its `max_calls` (given back when the call is dropped).
#[derive(Debug)]
pub(crate) struct UserCall {
    pub name: String,
    /// The display name as written in a From (quoted), if any.
    pub display: Option<String>,
    pub number: String,
    /// Never read: dropping it (with the call) gives the user's call back.
    pub _slot: Option<UserSlot>,
}

impl UserCall {
    /// The From of the calls this user places from `host` (without a tag).
    pub(crate) fn caller_from(&self, host: SocketAddr) -> String {
        match &self.display {
            Some(d) => format!("{d} <sip:{}@{host}>", self.number),
            None => format!("<sip:{}@{host}>", self.number),
        }
    }
}

/// A new call once admitted: where it runs and the rule it runs.
pub(crate) struct Admitted {
    pub context: String,
    pub exten: String,
    pub vars: Vars,
    pub program: Route,
    /// The authenticated user (None for a trusted peer or the public context).
    pub user: Option<Box<UserCall>>,
    /// 100 Trying went out already (while the credentials were fetched).
    pub trying: bool,
    /// The trunk a provider's call came in on (trunks.rs).
    pub trunk: Option<String>,
    /// How the caller sends and takes digits: its user's or trunk's (None: `rtp.dtmf`).
    pub dtmf: Option<media::DtmfMode>,
}

/// What a request is authenticated for.
#[derive(Debug)]
pub(crate) enum Then {
    /// A request for a proxied domain: forwarded once authenticated.
    Proxy,
    /// A new call to the B2BUA, to `local`, with the session interval its INVITE asked for.
    Call {
        local: SocketAddr,
        session_expires: Option<u32>,
    },
    /// A SUBSCRIBE to a voicemail box, received at `local` (mwi.rs).
    Subscribe { local: SocketAddr },
}

/// A request whose digest answer waits for the user's credentials.
pub(crate) struct AuthWait {
    pub stx: ServerTxId,
    pub msg: Message,
    pub peer: Peer,
    pub auth: Box<Authorization>,
    /// A copy the store read shortly before will do (`StoreOp::User::recent`): it can only let
    /// the request in; a denial is checked again against the backend.
    pub recent: bool,
    pub then: Then,
}

/// What a worker keeps for admission between inputs.
#[derive(Default)]
pub(crate) struct AuthState {
    /// Users' `allow` patterns compiled (None: invalid), by their text.
    patterns: FxHashMap<String, Option<Regex>>,
    /// The store operation each INVITE waiting for its caller's credentials is in (a CANCEL
    /// finds it here).
    waiting: FxHashMap<ServerTxId, u64>,
}

/// Compiled patterns kept at most; past it the cache starts over.
const PATTERNS: usize = 4096;

/// The dialled extension (Request-URI user) and the caller (From user) of a request; an INVITE
/// that replaces a dialog (transfer.rs) dials what the replaced call dialled, so it is admitted
/// as a call to that extension would be.
fn call_names(e: &Engine, msg: &Message) -> (String, String) {
    let exten = e.replaced_exten(msg).unwrap_or_else(|| {
        msg.uri()
            .ok()
            .and_then(|u| u.user)
            .unwrap_or("")
            .to_string()
    });
    let caller = msg
        .from_addr()
        .ok()
        .and_then(|n| sip::Uri::parse(n.uri).ok().and_then(|u| u.user))
        .unwrap_or("")
        .to_string();
    (exten, caller)
}

impl Engine {
    /// A new INVITE that passed the message checks: run it as a trusted peer's or in the public
    /// context, or authenticate its caller as a user.
    pub(crate) fn admit_call(
        &mut self,
        stx: ServerTxId,
        msg: Message,
        peer: Peer,
        local: SocketAddr,
        session_expires: Option<u32>,
        now: Instant,
    ) {
        let (exten, caller) = call_names(self, &msg);
        let call_id = msg.header(HeaderName::CallId).unwrap_or_default();
        // A provider's call (trunks.rs) enters its trunk's context by its DID, unchallenged.
        let inbound = self.trunk_call(peer.addr, &msg);
        let trusted = inbound.is_some() || self.s.security.trusted.contains(peer.addr.ip());
        let (exten, trunk_context) = match &inbound {
            Some(t) => (t.exten.clone(), Some(t.context.clone())),
            None => (exten, None),
        };
        let context = match (&trunk_context, &self.s.security.public_context, trusted) {
            (Some(trunk), _, _) => trunk,
            (None, _, true) => &self.s.default_context,
            (None, Some(public), false) => public,
            (None, None, false) => {
                let then = Then::Call {
                    local,
                    session_expires,
                };
                return self.authenticate(stx, msg, peer, then, now);
            }
        };
        let vars = Vars::for_call(&exten, &caller, call_id, &self.s.data_dir);
        let Some(program) = self.dialplan.route(context, &exten, &vars) else {
            if !trusted {
                // Not for anyone: only a user may call it.
                let then = Then::Call {
                    local,
                    session_expires,
                };
                return self.authenticate(stx, msg, peer, then, now);
            }
            let warning =
                format!("399 strowger \"no dialplan rule for {exten} in context {context}\"");
            let extra = [("Warning", warning)];
            return self.reply(stx, &msg, peer, 404, "Not Found", &extra, now);
        };
        let a = Admitted {
            context: context.clone(),
            exten,
            vars,
            program,
            user: None,
            trying: false,
            dtmf: inbound.as_ref().and_then(|t| t.dtmf),
            trunk: inbound.map(|t| t.trunk),
        };
        self.start_call(stx, msg, peer, local, session_expires, a, now);
    }

    /// A new INVITE without credentials that only a user may make (not from a trusted peer or a
    /// trunk, not for the public context, not for the proxy role) gets its 401 at once and
    /// statelessly, as a REGISTER does: a scanner's or a flood's INVITEs leave no transaction
    /// retransmitting the challenge, and a phone that missed it sends its INVITE again.
    pub(crate) fn challenge_call_statelessly(&mut self, msg: &Message, peer: Peer) -> bool {
        let initial = msg.method() == Some(&Method::Invite)
            && msg.header(HeaderName::Authorization).is_none()
            && msg.to_addr().ok().is_some_and(|t| t.tag().is_none());
        // An INVITE refused for its content gets that answer (415, 406) from the call path;
        // asked last, so a trusted peer's INVITE is not checked twice.
        if !initial
            || self.s.security.trusted.contains(peer.addr.ip())
            || self.proxies(msg)
            || self.trunk_call(peer.addr, msg).is_some()
            || crate::engine::content_refusal(msg).is_some()
        {
            return false;
        }
        if let Some(public) = &self.s.security.public_context {
            let (exten, caller) = call_names(self, msg);
            let call_id = msg.header(HeaderName::CallId).unwrap_or_default();
            let vars = Vars::for_call(&exten, &caller, call_id, &self.s.data_dir);
            if self.dialplan.route(public, &exten, &vars).is_some() {
                return false;
            }
        }
        self.stateless_challenge(msg, peer);
        true
    }

    /// A request only a user may make: a 401 without (or with a stale) digest answer, else its
    /// sender's credentials are fetched to check the answer, then it goes on as `then` says.
    pub(crate) fn authenticate(
        &mut self,
        stx: ServerTxId,
        msg: Message,
        peer: Peer,
        then: Then,
        now: Instant,
    ) {
        let Some(auth) = self.answer_for_us(&msg) else {
            return self.challenge(stx, &msg, peer, false, now);
        };
        // The call lives on this worker (its Call-ID's), so its nonce's uses must be counted
        // here: a nonce another worker issued (a phone reusing one for its next call) is
        // answered with a fresh one of ours, stale=true, which the phone takes without asking
        // its user. Stale or replayed nonces are refused before the store is asked.
        let ours = Nonces::issuer(&auth.nonce) == u8::try_from(self.s.worker).ok();
        let nc = auth.qop_auth.then_some(auth.nc.as_deref().unwrap_or(""));
        match self.peek_nonce(&auth.nonce, nc, peer) {
            NonceCheck::Valid if ours => {}
            NonceCheck::Invalid => return self.challenge(stx, &msg, peer, false, now),
            NonceCheck::Valid | NonceCheck::Stale => {
                return self.challenge(stx, &msg, peer, true, now)
            }
        }
        // The store may take a while: no retransmissions meanwhile.
        self.respond(stx, &msg, peer, 100, "Trying", None, &[], None, now);
        let w = AuthWait {
            stx,
            msg,
            peer,
            auth: Box::new(auth),
            recent: true,
            then,
        };
        self.fetch_credentials(w);
    }

    /// Asks the store for the credentials a request's digest answer names.
    pub(crate) fn fetch_credentials(&mut self, w: AuthWait) {
        let op = StoreOp::User {
            user: w.auth.username.clone(),
            domain: self.s.registrar.domain.clone(),
            recent: w.recent,
            now: self.clock.unix(),
        };
        let stx = w.stx;
        let is_call = matches!(w.then, Then::Call { .. });
        let token = self.store_op(op, Pending::Auth(Box::new(w)));
        if is_call {
            self.auth.waiting.insert(stx, token);
        }
    }

    /// The credentials of a request's digest answer arrived (None: no such user): check the
    /// answer, count its nonce's use, and go on with what it was for.
    pub(crate) fn credentials_arrived(
        &mut self,
        mut w: Box<AuthWait>,
        creds: Option<Credentials>,
        now: Instant,
    ) {
        self.auth.waiting.remove(&w.stx);
        let method = w.msg.method().map_or("INVITE", Method::as_str).to_string();
        let digest = match self
            .s
            .registrar
            .check_digest(&w.auth, creds.as_ref(), &method)
        {
            Digest::Valid => self.count_nonce(&w.auth, w.peer),
            d => d,
        };
        match (digest, creds) {
            (Digest::Valid, Some(creds)) => {
                let w = *w;
                self.authenticated(w.peer);
                match w.then {
                    Then::Proxy => self.proxy_onward(w.stx, w.msg, w.peer, now),
                    Then::Call {
                        local,
                        session_expires,
                    } => self.user_call(w.stx, w.msg, w.peer, local, session_expires, creds, now),
                    Then::Subscribe { local } => {
                        self.subscribe_authenticated(w.stx, w.msg, w.peer, local, creds.user, now)
                    }
                }
            }
            // The copy may predate a new password or user: only the backend's answer can deny.
            (Digest::Valid | Digest::Denied, _) if w.recent => {
                w.recent = false;
                self.fetch_credentials(*w);
            }
            (Digest::Valid | Digest::Denied, _) => {
                // Unknown user or wrong password: the same answer, so users cannot be guessed.
                // Counted only for a nonce sent to this address: nobody can get another
                // address banned by answering a nonce of its own from there.
                if self.nonce_sent_to(&w.auth, w.peer) {
                    self.auth_failed(w.peer, &w.auth.username, "wrong password");
                }
                self.forbid(w.stx, &w.msg, w.peer, now);
            }
            (Digest::Rechallenge { stale }, _) => match w.then {
                Then::Proxy => self.proxy_challenge(w.stx, &w.msg, w.peer, stale, now),
                Then::Call { .. } | Then::Subscribe { .. } => {
                    self.challenge(w.stx, &w.msg, w.peer, stale, now)
                }
            },
        }
    }

    /// The store failed while a request waited for its caller's credentials.
    pub(crate) fn credentials_failed(&mut self, w: Box<AuthWait>, e: &str, now: Instant) {
        self.auth.waiting.remove(&w.stx);
        self.store_down(w.stx, &w.msg, w.peer, e, now);
    }

    /// 403 Forbidden: the one answer to an unknown user, a wrong password and a destination the
    /// user may not call (same status, reason and headers, no Warning), so none of them can be
    /// told from the others.
    pub(crate) fn forbid(&mut self, stx: ServerTxId, msg: &Message, peer: Peer, now: Instant) {
        self.reply(stx, msg, peer, 403, "Forbidden", &[], now);
    }

    /// A CANCEL for an INVITE whose caller's credentials are being fetched: 200 to it, 487 to
    /// the INVITE, and the credentials are not waited for. False if the INVITE is not waiting.
    pub(crate) fn cancel_authenticating(
        &mut self,
        cancel: ServerTxId,
        invite: Option<ServerTxId>,
        msg: &Message,
        peer: Peer,
        now: Instant,
    ) -> bool {
        let Some(token) = invite.and_then(|i| self.auth.waiting.remove(&i)) else {
            return false;
        };
        let Some(Pending::Auth(w)) = self.take_pending(token) else {
            return false;
        };
        self.respond(cancel, msg, peer, 200, "OK", None, &[], None, now);
        let tag = self.tag();
        let reason = "Request Terminated";
        self.respond(
            w.stx,
            &w.msg,
            w.peer,
            487,
            reason,
            Some(&tag),
            &[],
            None,
            now,
        );
        true
    }

    /// An authenticated user's call: in the user's context, if the user may call the
    /// extension and has a call to spare.
    #[allow(clippy::too_many_arguments)]
    fn user_call(
        &mut self,
        stx: ServerTxId,
        msg: Message,
        peer: Peer,
        local: SocketAddr,
        session_expires: Option<u32>,
        creds: Credentials,
        now: Instant,
    ) {
        let (exten, _) = call_names(self, &msg);
        let context = creds
            .context
            .unwrap_or_else(|| self.s.default_context.clone());
        if !self.dialplan.has_context(&context) {
            self.warn(format!(
                "user {}: no dialplan context {context:?} (its calls are refused until it names one)",
                creds.user
            ));
            return self.forbid(stx, &msg, peer, now);
        }
        let caller_id = match creds.caller_id.as_deref().map(CallerId::parse) {
            Some(Ok(id)) => id,
            Some(Err(e)) => {
                self.warn(format!(
                    "user {}: caller_id {e}; using the user name",
                    creds.user
                ));
                CallerId {
                    name: None,
                    number: creds.user.clone(),
                }
            }
            None => CallerId {
                name: None,
                number: creds.user.clone(),
            },
        };
        let routed = match self.allowed(&creds.allow, &exten) {
            true => {
                let call_id = msg.header(HeaderName::CallId).unwrap_or_default();
                let mut vars = Vars::for_call(&exten, &caller_id.number, call_id, &self.s.data_dir);
                if let Some(r) = &creds.record_calls {
                    vars.set(crate::call_recording::RECORD_CALLS, r);
                }
                self.dialplan
                    .route(&context, &exten, &vars)
                    .map(|program| (vars, program))
            }
            false => None,
        };
        let Some((vars, program)) = routed else {
            let call_id = msg.header(HeaderName::CallId).map(str::to_string);
            let message = format!(
                "user {} may not call {exten:?} (context {context})",
                creds.user
            );
            self.log(Level::Info, call_id.as_deref(), message);
            return self.forbid(stx, &msg, peer, now);
        };
        let dtmf = creds.dtmf.as_deref().and_then(media::DtmfMode::parse);
        let slot = match creds.max_calls {
            0 => None,
            max => match self.s.slots.try_take_user(&creds.user, max) {
                Some(slot) => Some(slot),
                None => {
                    return self.reply(stx, &msg, peer, 486, "Busy Here", &[], now);
                }
            },
        };
        // Without a caller ID of its own the user keeps the display name its phone sends.
        let display = match caller_id.name {
            Some(n) => Some(format!("\"{n}\"")),
            None if creds.caller_id.is_none() => msg
                .from_addr()
                .ok()
                .and_then(|n| n.display.map(str::to_string)),
            None => None,
        };
        let user = UserCall {
            name: creds.user,
            display,
            number: caller_id.number,
            _slot: slot,
        };
        let a = Admitted {
            context,
            exten,
            vars,
            program,
            user: Some(Box::new(user)),
            trying: true,
            trunk: None,
            dtmf,
        };
        self.start_call(stx, msg, peer, local, session_expires, a, now);
    }

    /// Whether `exten` matches one of a user's `allow` patterns (any extension without them).
    fn allowed(&mut self, allow: &[String], exten: &str) -> bool {
        if allow.is_empty() {
            return true;
        }
        let mut found = false;
        for p in allow {
            if self.auth.patterns.len() >= PATTERNS {
                self.auth.patterns.clear();
            }
            if !self.auth.patterns.contains_key(p) {
                let re = Regex::new(p).ok();
                if re.is_none() {
                    self.warn(format!(
                        "a user's allow pattern {p:?} is not a regex: it matches nothing"
                    ));
                }
                self.auth.patterns.insert(p.clone(), re);
            }
            if self.auth.patterns[p]
                .as_ref()
                .is_some_and(|re| re.is_match(exten))
            {
                found = true;
                break;
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caller_ids_with_and_without_a_name() {
        let id = |s: &str| CallerId::parse(s);
        assert_eq!(
            id("\"Alice Smith\" <1001>"),
            Ok(CallerId {
                name: Some("Alice Smith".into()),
                number: "1001".into()
            })
        );
        assert_eq!(
            id("Alice <+15551234>").unwrap().name.as_deref(),
            Some("Alice")
        );
        assert_eq!(
            id(" 1001 "),
            Ok(CallerId {
                name: None,
                number: "1001".into()
            })
        );
        assert_eq!(id("<1001>").unwrap().name, None);
        for bad in [
            "",
            "Alice <>",
            "Alice <1001",
            "a b",
            "1001@host",
            "\"A\"B\" <1>",
            "<sip:1@x>",
        ] {
            assert!(id(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn patterns_are_checked_with_the_reason() {
        assert!(check_pattern("^1\\d{3}$").is_ok());
        let e = check_pattern("(unclosed").unwrap_err();
        assert!(e.starts_with("invalid regex \"(unclosed\""), "{e}");
    }
}
