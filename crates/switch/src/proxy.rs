//! The proxy role (RFC 3261 §16): for the domains in `[proxy]`, strowger forwards requests to
//! where the user registered instead of answering them as a B2BUA. It is transaction-stateful:
//! each forwarded request has a server transaction towards the caller and a client
//! transaction towards the callee, so retransmissions, timeouts (408) and CANCEL are handled
//! here; no call state, no media. With `record_route` the rest of the dialog comes through
//! strowger too and is forwarded by its Route headers without a store lookup.
//!
//! One contact is tried, the highest q (then the most recently refreshed): forking belongs to
//! the B2BUA role (`bridge user/NAME`).

use crate::auth::{AuthWait, Then};
use crate::engine::Engine;
use crate::registrar::{Pending, StoreOp};
use rustc_hash::FxHashMap;
use sip::auth::Authorization;
use sip::header::{parse_u32, HeaderName, NameAddr};
use sip::transaction::{ClientTxId, Peer, ServerTxId};
use sip::{Message, Method, Uri};
use std::fmt::Write;
use std::time::Instant;
use store::Binding;

/// A request forwarded downstream: the caller's server transaction its responses go back on.
struct Forwarded {
    stx: ServerTxId,
    peer: Peer,
    /// The request as received (a 408 on timeout is built from it).
    req: Message,
}

/// What the proxy role keeps per forwarded request, until its client transaction ends.
#[derive(Default)]
pub(crate) struct Proxy {
    /// Forwarded requests by their client transaction.
    up: FxHashMap<ClientTxId, Forwarded>,
    /// The client INVITE transaction of each caller's server INVITE transaction (for CANCEL).
    down: FxHashMap<ServerTxId, ClientTxId>,
}

impl Proxy {
    fn record(&mut self, ctx: ClientTxId, f: Forwarded, invite: bool) {
        if invite {
            self.down.insert(f.stx, ctx);
        }
        self.up.insert(ctx, f);
    }

    fn forwarded(&self, ctx: ClientTxId) -> Option<&Forwarded> {
        self.up.get(&ctx)
    }

    /// The client transaction an INVITE's server transaction was forwarded on.
    fn client_of(&self, stx: ServerTxId) -> Option<ClientTxId> {
        self.down.get(&stx).copied()
    }

    fn forget(&mut self, ctx: ClientTxId) -> Option<Forwarded> {
        let f = self.up.remove(&ctx)?;
        self.down.remove(&f.stx);
        Some(f)
    }
}

impl Engine {
    /// Whether the proxy role takes this request: its Request-URI is in a proxied domain, or its
    /// top Route is strowger's own Record-Route (the rest of a proxied dialog).
    pub(crate) fn proxies(&self, msg: &Message) -> bool {
        if self.s.proxy.domains.is_empty() {
            return false;
        }
        self.routed_to_us(msg)
            || msg
                .request_uri()
                .and_then(|u| Uri::parse(u).ok())
                .is_some_and(|u| {
                    self.s
                        .proxy
                        .domains
                        .iter()
                        .any(|d| d.eq_ignore_ascii_case(u.host))
                })
    }

    /// The top Route names one of strowger's listen addresses.
    fn routed_to_us(&self, msg: &Message) -> bool {
        msg.header(HeaderName::Route)
            .and_then(|r| NameAddr::parse(r).ok())
            .and_then(|n| {
                Uri::parse(n.uri)
                    .ok()
                    .as_ref()
                    .and_then(crate::bridge::resolve)
            })
            .is_some_and(|p| self.s.listen.iter().any(|(_, a)| *a == p.addr))
    }

    /// A request the proxy role takes (see `proxies`).
    pub(crate) fn proxy_request(
        &mut self,
        stx: ServerTxId,
        msg: Message,
        peer: Peer,
        now: Instant,
    ) {
        let mf = msg
            .header(HeaderName::MaxForwards)
            .and_then(parse_u32)
            .unwrap_or(70);
        if mf == 0 {
            return self.respond(stx, &msg, peer, 483, "Too Many Hops", None, &[], None, now);
        }
        if msg.method() == Some(&Method::Invite) {
            self.respond(stx, &msg, peer, 100, "Trying", None, &[], None, now);
        }
        if self.routed_to_us(&msg) {
            // Later in a dialog: loose routing (§16.4): our Route goes, the next one (or the
            // Request-URI) says where to.
            let Some((hop, ruri)) = loose_route(&msg) else {
                return self.respond(stx, &msg, peer, 404, "Not Found", None, &[], None, now);
            };
            return self.forward(Some((stx, peer)), &msg, &ruri, &[], hop, now);
        }
        if !self.s.proxy.authenticate {
            return self.proxy_locate(stx, msg, peer, now);
        }
        let realm = self.s.registrar.domain.clone();
        let auth = msg
            .all(HeaderName::ProxyAuthorization)
            .filter_map(|v| Authorization::parse(v).ok())
            .find(|a| a.realm == realm);
        let Some(auth) = auth else {
            return self.proxy_challenge(stx, &msg, peer, false, now);
        };
        self.fetch_credentials(AuthWait {
            stx,
            msg,
            peer,
            auth: Box::new(auth),
            recent: true,
            then: Then::Proxy,
        });
    }

    /// 407 with fresh challenges (RFC 3261 §22.3).
    pub(crate) fn proxy_challenge(
        &mut self,
        stx: ServerTxId,
        msg: &Message,
        peer: Peer,
        stale: bool,
        now: Instant,
    ) {
        let extra: Vec<(&str, String)> = self
            .challenges(stale)
            .into_iter()
            .map(|c| ("Proxy-Authenticate", c))
            .collect();
        let tag = self.tag();
        let reason = "Proxy Authentication Required";
        self.respond(stx, msg, peer, 407, reason, Some(&tag), &extra, None, now);
    }

    /// Looks the Request-URI's user up in the location store.
    pub(crate) fn proxy_locate(&mut self, stx: ServerTxId, msg: Message, peer: Peer, now: Instant) {
        let user = msg
            .request_uri()
            .and_then(|u| Uri::parse(u).ok())
            .and_then(|u| u.user.map(str::to_string));
        let Some(user) = user else {
            let tag = self.tag();
            return self.respond(
                stx,
                &msg,
                peer,
                404,
                "Not Found",
                Some(&tag),
                &[],
                None,
                now,
            );
        };
        let op = StoreOp::Locate {
            user,
            domain: self.s.registrar.domain.clone(),
            now: self.clock.unix(),
        };
        self.store_op(op, Pending::Proxy { stx, msg, peer });
    }

    /// Where the user is: forward to its best contact, or 404 / 480.
    pub(crate) fn proxy_located(
        &mut self,
        stx: ServerTxId,
        msg: &Message,
        peer: Peer,
        exists: bool,
        bindings: &[Binding],
        now: Instant,
    ) {
        let best = bindings
            .iter()
            .max_by(|a, b| a.q.cmp(&b.q).then(a.expires_at.cmp(&b.expires_at)));
        let (status, reason) = match (exists, best) {
            (false, _) => (404, "Not Found"),
            (true, None) => (480, "Temporarily Unavailable"),
            (true, Some(b)) => {
                let (route_set, hop) = self.route_to(b);
                return self.forward(Some((stx, peer)), msg, &b.contact, &route_set, hop, now);
            }
        };
        let tag = self.tag();
        self.respond(stx, msg, peer, status, reason, Some(&tag), &[], None, now);
    }

    /// Sends `msg` on with Request-URI `ruri`: our Via on top, our Route (if it was ours) removed,
    /// `routes` in front of the rest, Record-Route on dialog-creating requests when configured,
    /// Max-Forwards less one. `up`: the server transaction its responses go back on (None for
    /// an ACK, which is forwarded without a transaction).
    pub(crate) fn forward(
        &mut self,
        up: Option<(ServerTxId, Peer)>,
        msg: &Message,
        ruri: &str,
        routes: &[String],
        hop: Peer,
        now: Instant,
    ) {
        let method = msg.method().cloned().unwrap_or(Method::Options);
        let local = self.local_for(hop);
        let branch = match up {
            Some(_) => self.branch(),
            // Forwarded without a transaction: a retransmitted ACK must go on with the same
            // branch as the first (RFC 3261 §16.11), or the callee takes it for a new request.
            None => stateless_branch(msg),
        };
        let transport = crate::dialog::transport_name(hop.transport);
        let mut out = String::with_capacity(msg.body().len() + 1024);
        let _ = write!(
            out,
            "{method} {ruri} SIP/2.0\r\nVia: SIP/2.0/{transport} {local};branch={branch};rport\r\n"
        );
        let initial = msg
            .header(HeaderName::To)
            .and_then(|t| NameAddr::parse(t).ok())
            .is_some_and(|n| n.tag().is_none());
        if self.s.proxy.record_route && initial && method == Method::Invite {
            let _ = write!(
                out,
                "Record-Route: <sip:{local};lr{}>\r\n",
                crate::engine::transport_param(hop.transport)
            );
        }
        for r in routes {
            let _ = write!(out, "Route: {r}\r\n");
        }
        let mut skip_route = self.routed_to_us(msg);
        for (name, text, value) in msg.headers() {
            match name {
                HeaderName::Route if skip_route => {
                    skip_route = false;
                    continue;
                }
                HeaderName::MaxForwards => {
                    let mf = parse_u32(value).unwrap_or(70).saturating_sub(1);
                    let _ = write!(out, "Max-Forwards: {mf}\r\n");
                    continue;
                }
                HeaderName::ContentLength => continue,
                HeaderName::ProxyAuthorization if self.s.proxy.authenticate => continue,
                _ => {}
            }
            let _ = write!(out, "{text}: {value}\r\n");
        }
        if msg.header(HeaderName::MaxForwards).is_none() {
            out.push_str("Max-Forwards: 69\r\n");
        }
        let _ = write!(out, "Content-Length: {}\r\n\r\n", msg.body().len());
        let mut bytes = out.into_bytes();
        bytes.extend_from_slice(msg.body());
        match up {
            Some((stx, peer)) => {
                let ctx = self.txs.send_request(bytes, hop, now);
                let req = msg.clone();
                let invite = method == Method::Invite;
                self.proxy.record(ctx, Forwarded { stx, peer, req }, invite);
            }
            // Through the transaction layer's queue, like the BYE that may follow in the same
            // batch: an ACK sent after that BYE would reach the callee out of order.
            None => self.txs.send_stateless(bytes, hop),
        }
    }

    /// An ACK routed through strowger (the ACK for a 2xx in a record-routed dialog): forwarded
    /// as it is, without a transaction. Returns false if it is not the proxy's.
    pub(crate) fn proxy_ack(&mut self, msg: &Message, now: Instant) -> bool {
        if self.s.proxy.domains.is_empty() || !self.routed_to_us(msg) {
            return false;
        }
        if let Some((hop, ruri)) = loose_route(msg) {
            self.forward(None, msg, &ruri, &[], hop, now);
        }
        true
    }

    /// A CANCEL for an INVITE the proxy forwarded: 200 to it, and CANCEL downstream (§16.10).
    /// Returns false if the INVITE is not the proxy's.
    pub(crate) fn proxy_cancel(
        &mut self,
        cancel: ServerTxId,
        invite: Option<ServerTxId>,
        msg: &Message,
        peer: Peer,
        now: Instant,
    ) -> bool {
        let Some(ctx) = invite.and_then(|i| self.proxy.client_of(i)) else {
            return false;
        };
        self.respond(cancel, msg, peer, 200, "OK", None, &[], None, now);
        self.txs.cancel(ctx, now);
        true
    }

    /// A response on a forwarded request: our Via removed, sent back on the caller's server
    /// transaction (a retransmitted 2xx straight to the caller). Returns false if the client
    /// transaction is not the proxy's.
    pub(crate) fn proxy_response(
        &mut self,
        ctx: ClientTxId,
        msg: &Message,
        first: bool,
        now: Instant,
    ) -> bool {
        let Some(up) = self.proxy.forwarded(ctx) else {
            return false;
        };
        let (stx, peer) = (up.stx, up.peer);
        let status = msg.status().unwrap_or(500);
        if status == 100 {
            return true; // hop by hop: the caller had ours
        }
        let mut out = String::with_capacity(msg.body().len() + 1024);
        let _ = write!(out, "SIP/2.0 {status} {}\r\n", msg.reason().unwrap_or(""));
        let mut skip_via = true;
        for (name, text, value) in msg.headers() {
            match name {
                HeaderName::Via if skip_via => {
                    skip_via = false;
                    continue;
                }
                HeaderName::ContentLength => continue,
                _ => {}
            }
            let _ = write!(out, "{text}: {value}\r\n");
        }
        let _ = write!(out, "Content-Length: {}\r\n\r\n", msg.body().len());
        let mut bytes = out.into_bytes();
        bytes.extend_from_slice(msg.body());
        if first {
            self.txs.respond(stx, status, bytes, now);
        } else if (200..300).contains(&status) {
            self.txs.send_stateless(bytes, peer);
        }
        if status >= 300 {
            self.proxy_forget(ctx);
        }
        true
    }

    /// No final response from downstream (Timer B/F): 408 to the caller.
    pub(crate) fn proxy_timeout(&mut self, ctx: ClientTxId, now: Instant) -> bool {
        let Some(f) = self.proxy.forget(ctx) else {
            return false;
        };
        let tag = self.tag();
        let reason = "Request Timeout";
        self.respond(
            f.stx,
            &f.req,
            f.peer,
            408,
            reason,
            Some(&tag),
            &[],
            None,
            now,
        );
        true
    }

    /// A client transaction ended: forget what the proxy kept for it.
    pub(crate) fn proxy_forget(&mut self, ctx: ClientTxId) {
        self.proxy.forget(ctx);
    }

    /// The route set and first hop towards a binding: its Path if it has one (RFC 3327),
    /// else where its REGISTER came from.
    pub(crate) fn route_to(&self, b: &Binding) -> (Vec<String>, Peer) {
        let route_set: Vec<String> = b
            .path
            .iter()
            .flat_map(|p| crate::registrar::split_contacts(p))
            .map(str::to_string)
            .collect();
        let first_hop = route_set
            .first()
            .and_then(|r| NameAddr::parse(r).ok())
            .and_then(|n| {
                Uri::parse(n.uri)
                    .ok()
                    .as_ref()
                    .and_then(crate::bridge::resolve)
            });
        let hop = first_hop.unwrap_or_else(|| crate::registrar::source_of(b));
        (route_set, hop)
    }
}

/// A branch derived from the request's own top Via branch: the same request forwarded twice
/// gets the same branch.
fn stateless_branch(msg: &Message) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = rustc_hash::FxHasher::default();
    msg.header(HeaderName::Via).unwrap_or_default().hash(&mut h);
    format!("z9hG4bK-sw{:016x}", h.finish())
}

/// Where a request routed through us goes next (loose routing, RFC 3261 §16.4): our Route goes,
/// the next one (or the Request-URI) names the hop; the Request-URI itself is kept.
fn loose_route(msg: &Message) -> Option<(Peer, String)> {
    let next = msg
        .all(HeaderName::Route)
        .nth(1)
        .and_then(|r| NameAddr::parse(r).ok().map(|n| n.uri.to_string()))
        .or_else(|| msg.request_uri().map(str::to_string))?;
    let hop = crate::bridge::resolve(&Uri::parse(&next).ok()?)?;
    Some((hop, msg.request_uri()?.to_string()))
}
