//! The proxy role (RFC 3261 §16): for the domains in `[proxy]`, strowger forwards requests to
//! where the user registered instead of answering them as a B2BUA. It is transaction-stateful:
//! each forwarded request has a server transaction towards the caller and a client
//! transaction towards the callee, so retransmissions, timeouts (408) and CANCEL are handled
//! here; no call state, no media. With `record_route` the rest of the dialog comes through
//! strowger too and is forwarded by its Route headers without a store lookup.
//!
//! A user with several contacts is forked to (fork.rs): the caller's server transaction has
//! one response context, its branches one client transaction each.

use crate::auth::{AuthWait, Then};
use crate::engine::Engine;
use crate::fork::{Context, Target, Verdict};
use crate::record_route::RouteKey;
use crate::registrar::{Pending, StoreOp};
use rustc_hash::FxHashMap;
use sip::auth::Authorization;
use sip::header::{parse_u32, HeaderName, NameAddr};
use sip::transaction::{ClientTxId, Peer, ServerTxId, Transport};
use sip::{Message, Method, Rewrite, Uri};
use std::collections::VecDeque;
use std::time::Instant;
use store::Binding;

/// What the proxy role keeps per forwarded request, until its branches' transactions end.
pub(crate) struct Proxy {
    /// The caller's server transaction of each branch, by its client transaction.
    up: FxHashMap<ClientTxId, ServerTxId>,
    /// The response context of each forwarded request, by the caller's server transaction.
    contexts: FxHashMap<ServerTxId, Context>,
    /// Group timers of forks (`proxy.fork_timeout_s`), in the order they fall due.
    groups: VecDeque<(Instant, ServerTxId)>,
    /// Signs strowger's Record-Route and checks the Routes that name strowger.
    key: RouteKey,
}

/// Why a request is not forwarded: 403 with this Warning text.
const PRELOADED: &str = "a Route beyond strowger is accepted only from peers in security.trusted";
const NOT_OURS: &str =
    "this Route was not record-routed by strowger for this dialog (peers in security.trusted may route)";

impl Proxy {
    /// `secret`: the registrar's per-process secret, from which the Route key is derived.
    pub(crate) fn new(secret: &[u8; 32]) -> Proxy {
        Proxy {
            up: FxHashMap::default(),
            contexts: FxHashMap::default(),
            groups: VecDeque::new(),
            key: RouteKey::new(secret),
        }
    }

    /// A branch of the request on `stx` went to `hop` on `ctx`.
    fn record(&mut self, ctx: ClientTxId, stx: ServerTxId, peer: Peer, req: &Message, hop: Peer) {
        self.contexts
            .entry(stx)
            .or_insert_with(|| Context::new(peer, req.clone(), VecDeque::new()))
            .add(ctx, hop);
        self.up.insert(ctx, stx);
    }

    /// The context of the branch on `ctx`.
    fn context(&mut self, ctx: ClientTxId) -> Option<(ServerTxId, &mut Context)> {
        let stx = *self.up.get(&ctx)?;
        Some((stx, self.contexts.get_mut(&stx)?))
    }

    /// Drops the branch on `ctx`, and its context with its last branch.
    fn forget(&mut self, ctx: ClientTxId) {
        let Some(stx) = self.up.remove(&ctx) else {
            return;
        };
        if self.contexts.get_mut(&stx).is_some_and(|c| c.remove(ctx)) {
            self.contexts.remove(&stx);
        }
    }

    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.groups.front().map(|g| g.0)
    }
}

impl Engine {
    /// Whether the proxy role takes this request: its Request-URI is in a proxied domain, or its
    /// top Route names strowger (the rest of a proxied dialog, or strowger as outbound proxy) —
    /// unless that Route is all there is to a new request for strowger itself, which its dialplan
    /// serves as if the phone had sent it without.
    pub(crate) fn proxies(&self, msg: &Message) -> bool {
        if self.s.proxy.domains.is_empty() {
            return false;
        }
        if self.in_domains(msg) {
            return true;
        }
        let for_us = msg.uri().ok().is_some_and(|u| self.names_us(&u));
        self.routed_to_us(msg) && !(for_us && !in_dialog(msg) && msg.count(HeaderName::Route) == 1)
    }

    /// The Request-URI's host is a proxied domain.
    pub(crate) fn in_domains(&self, msg: &Message) -> bool {
        msg.uri().ok().is_some_and(|u| {
            self.s
                .proxy
                .domains
                .iter()
                .any(|d| d.eq_ignore_ascii_case(u.host))
        })
    }

    /// The top Route names strowger: one of its listen addresses, or by name a domain it serves
    /// (`registrar.domain`, `proxy.domains`).
    fn routed_to_us(&self, msg: &Message) -> bool {
        self.our_route(msg).is_some()
    }

    /// The `rr` signature of the top Route when that Route names strowger (empty if it has
    /// none): read once for both questions an in-dialog request asks of it.
    fn our_route<'m>(&self, msg: &'m Message) -> Option<&'m str> {
        let (_, uri) = msg.top_route()?.ok()?;
        self.names_us(&uri)
            .then(|| uri.params.get("rr").unwrap_or(""))
    }

    /// Whether `u` names strowger: one of its listen addresses, or its registrar or proxy
    /// domain on a port it listens on.
    pub(crate) fn names_us(&self, u: &Uri) -> bool {
        if let Some(p) = crate::bridge::resolve(u) {
            return self.s.listen.iter().any(|(_, a)| *a == p.addr);
        }
        let port_ours = u
            .port
            .is_none_or(|p| self.s.listen.iter().any(|(_, a)| a.port() == p));
        port_ours
            && (u.host.eq_ignore_ascii_case(&self.s.registrar.domain)
                || self
                    .s
                    .proxy
                    .domains
                    .iter()
                    .any(|d| d.eq_ignore_ascii_case(u.host)))
    }

    /// Whether the top Route, which names strowger, is strowger's own signed Record-Route of
    /// this request's dialog, the request coming from one end of it and going to the other.
    /// `sig`: the top Route's `rr` (`our_route`).
    fn signed_for(&self, sig: &str, msg: &Message, source: Peer, hop: Peer) -> bool {
        let call_id = msg.header(HeaderName::CallId).unwrap_or_default();
        let tags = [msg.from_tag(), msg.to_tag().unwrap_or("")];
        self.proxy
            .key
            .verify(sig, call_id, &tags, source.addr.ip(), hop.addr.ip())
    }

    /// 403 for a request strowger will not forward, with a Warning saying why.
    fn refuse_relay(
        &mut self,
        stx: ServerTxId,
        msg: &Message,
        peer: Peer,
        why: &str,
        now: Instant,
    ) {
        let tag = self.tag();
        let w = [("Warning", format!("399 strowger \"{why}\""))];
        self.respond(stx, msg, peer, 403, "Forbidden", Some(&tag), &w, None, now);
    }

    /// A request the proxy role takes (see `proxies`). A Route naming strowger is followed
    /// (loose routing, RFC 3261 §16.4) when it is strowger's own Record-Route of the request's
    /// dialog or the request comes from a trusted peer; from anyone else an initial request may
    /// name strowger alone (an outbound proxy) and is then handled by its Request-URI: a proxied
    /// domain is looked up, any other domain is a relay, for authenticated users only
    /// (`proxy.relay_for_users`).
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
        let trusted = self.s.security.trusted.contains(peer.addr.ip());
        if let Some(sig) = self.our_route(&msg).filter(|_| trusted || in_dialog(&msg)) {
            // Later in a dialog: our Route goes, the next one (or the Request-URI) says where to.
            let Some((hop, ruri)) = loose_route(&msg) else {
                return self.respond(stx, &msg, peer, 404, "Not Found", None, &[], None, now);
            };
            if !trusted && !self.signed_for(sig, &msg, peer, hop) {
                return self.refuse_relay(stx, &msg, peer, NOT_OURS, now);
            }
            self.forward(Some((stx, peer)), &msg, &ruri, &[], hop, now);
            return;
        }
        // From a stranger, a Route may name strowger alone, as a phone's outbound proxy.
        let routes = msg.count(HeaderName::Route);
        if !trusted && (routes > 1 || (routes == 1 && !self.routed_to_us(&msg))) {
            return self.refuse_relay(stx, &msg, peer, PRELOADED, now);
        }
        let ours = self.in_domains(&msg);
        if !ours && !trusted && !self.s.proxy.relay_for_users {
            let why = format!(
                "strowger does not relay to {}: not in proxy.domains \
                 (users may when proxy.relay_for_users is on)",
                request_host(&msg)
            );
            return self.refuse_relay(stx, &msg, peer, &why, now);
        }
        if trusted || (ours && !self.s.proxy.authenticate) {
            return self.proxy_onward(stx, msg, peer, now);
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

    /// A request allowed on: to the user's contact for a proxied domain, else (a relay, or a
    /// trusted peer's routed request) on by its Route or Request-URI.
    pub(crate) fn proxy_onward(&mut self, stx: ServerTxId, msg: Message, peer: Peer, now: Instant) {
        if self.in_domains(&msg) {
            return match self.dispatch_set() {
                Some(set) => self.dispatch_request(stx, &msg, peer, set, now),
                None => self.proxy_locate(stx, msg, peer, now),
            };
        }
        match loose_route(&msg) {
            Some((hop, ruri)) => {
                self.forward(Some((stx, peer)), &msg, &ruri, &[], hop, now);
            }
            None => self.reply(stx, &msg, peer, 404, "Not Found", &[], now),
        }
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
            .challenges(stale, peer)
            .into_iter()
            .map(|c| ("Proxy-Authenticate", c))
            .collect();
        let tag = self.tag();
        let reason = "Proxy Authentication Required";
        self.respond(stx, msg, peer, 407, reason, Some(&tag), &extra, None, now);
    }

    /// Looks the Request-URI's user up in the location store.
    pub(crate) fn proxy_locate(&mut self, stx: ServerTxId, msg: Message, peer: Peer, now: Instant) {
        let user = msg.uri().ok().and_then(|u| u.user.map(str::to_string));
        let Some(user) = user else {
            return self.reply(stx, &msg, peer, 404, "Not Found", &[], now);
        };
        let op = StoreOp::Locate {
            user,
            domain: self.s.registrar.domain.clone(),
            now: self.clock.unix(),
        };
        self.store_op(op, Pending::Proxy { stx, msg, peer });
    }

    /// Where the user is: forked to its contacts, or 404 / 480.
    pub(crate) fn proxy_located(
        &mut self,
        stx: ServerTxId,
        msg: &Message,
        peer: Peer,
        exists: bool,
        bindings: &[Binding],
        now: Instant,
    ) {
        let (status, reason) = match (exists, bindings.is_empty()) {
            (false, _) => (404, "Not Found"),
            (true, true) => (480, "Temporarily Unavailable"),
            (true, false) => return self.fork(stx, msg, peer, bindings, now),
        };
        let tag = self.tag();
        self.respond(stx, msg, peer, status, reason, Some(&tag), &[], None, now);
    }

    /// Forwards `msg` to every contact of the highest q (the most recently refreshed first),
    /// and keeps the contacts of each lower q as a group to try next (RFC 3261 §16.6).
    fn fork(
        &mut self,
        stx: ServerTxId,
        msg: &Message,
        peer: Peer,
        bindings: &[Binding],
        now: Instant,
    ) {
        let mut order: Vec<&Binding> = bindings.iter().collect();
        order.sort_by(|a, b| b.q.cmp(&a.q).then(b.expires_at.cmp(&a.expires_at)));
        let top = order[0].q;
        let split = order.iter().position(|b| b.q != top).unwrap_or(order.len());
        let mut later: VecDeque<Vec<Target>> = VecDeque::new();
        for (i, b) in order[split..].iter().enumerate() {
            if i == 0 || order[split + i - 1].q != b.q {
                later.push_back(Vec::new());
            }
            let (routes, hop) = self.route_to(b);
            let t = Target {
                ruri: b.contact.clone(),
                routes,
                hop,
            };
            if let Some(g) = later.back_mut() {
                g.push(t);
            }
        }
        if !later.is_empty() {
            let cx = Context::new(peer, msg.clone(), later);
            self.proxy.contexts.insert(stx, cx);
        }
        for b in &order[..split] {
            let (route_set, hop) = self.route_to(b);
            self.forward(Some((stx, peer)), msg, &b.contact, &route_set, hop, now);
        }
        self.group_started(stx, now);
    }

    /// Forwards the request of context `stx` to the next group of targets.
    fn next_group(&mut self, stx: ServerTxId, now: Instant) {
        let Some(cx) = self.proxy.contexts.get_mut(&stx) else {
            return;
        };
        let (group, peer, req) = (cx.next_group(), cx.peer, cx.req.clone());
        for t in group {
            self.forward(Some((stx, peer)), &req, &t.ruri, &t.routes, t.hop, now);
        }
        self.group_started(stx, now);
    }

    /// A group went out: its timer runs if another group waits; a context none of whose
    /// branches could be sent goes.
    fn group_started(&mut self, stx: ServerTxId, now: Instant) {
        let wait = self.s.proxy.fork_timeout;
        let Some(cx) = self.proxy.contexts.get_mut(&stx) else {
            return;
        };
        if cx.is_idle() {
            self.proxy.contexts.remove(&stx);
        } else if cx.has_later() && !wait.is_zero() {
            let at = now + wait;
            cx.group_by = Some(at);
            self.proxy.groups.push_back((at, stx));
        }
    }

    /// Group timers due: the group still ringing is cancelled and the next one tried.
    pub(crate) fn proxy_timers(&mut self, now: Instant) {
        while let Some(&(at, stx)) = self.proxy.groups.front() {
            if at > now {
                break;
            }
            self.proxy.groups.pop_front();
            let Some(due) = self
                .proxy
                .contexts
                .get_mut(&stx)
                .and_then(|c| c.group_due(at))
            else {
                continue;
            };
            for ctx in due {
                self.txs.cancel(ctx, now);
            }
            self.next_group(stx, now);
        }
    }

    /// Sends `msg` on with Request-URI `ruri`: our Via on top, our Route (if it was ours) removed,
    /// `routes` in front of the rest, Record-Route on dialog-creating requests when configured,
    /// Max-Forwards less one. `up`: the server transaction its responses go back on (None for
    /// an ACK, which is forwarded without a transaction). Returns the client transaction.
    pub(crate) fn forward(
        &mut self,
        up: Option<(ServerTxId, Peer)>,
        msg: &Message,
        ruri: &str,
        routes: &[String],
        hop: Peer,
        now: Instant,
    ) -> Option<ClientTxId> {
        let method = msg.method().cloned().unwrap_or(Method::Options);
        let local = self.local_for(hop).to_string();
        let branch = match up {
            Some(_) => self.branch(),
            // Forwarded without a transaction: a retransmitted ACK must go on with the same
            // branch as the first (RFC 3261 §16.11), or the callee takes it for a new request.
            None => stateless_branch(msg),
        };
        let transport = crate::dialog::transport_name(hop.transport);
        let mut w = Rewrite::new(msg);
        let mut line = String::with_capacity(ruri.len() + 24);
        for part in [method.as_str(), " ", ruri, " SIP/2.0"] {
            line.push_str(part);
        }
        w.start_line(line);
        let out = w.top();
        for part in [
            "Via: SIP/2.0/",
            transport,
            " ",
            &local,
            ";branch=",
            &branch,
            ";rport\r\n",
        ] {
            out.push_str(part);
        }
        let initial = msg.to_addr().is_ok_and(|n| n.tag().is_none());
        if let Some((_, caller)) =
            up.filter(|_| self.s.proxy.record_route && initial && method == Method::Invite)
        {
            let call_id = msg.header(HeaderName::CallId).unwrap_or_default();
            let sig = self
                .proxy
                .key
                .sign(call_id, msg.from_tag(), caller.addr.ip(), hop.addr.ip());
            let tp = crate::engine::transport_param(hop.transport);
            for part in [
                "Record-Route: <sip:",
                &local,
                ";lr",
                tp,
                ";rr=",
                &sig,
                ">\r\n",
            ] {
                out.push_str(part);
            }
        }
        for r in routes {
            header_line(out, "Route", r);
        }
        if method == Method::Register {
            // Only an edge forwards a REGISTER (dispatch.rs): the node calls the phone back
            // through it (RFC 3327), the way the phone's NAT binding is open.
            let tp = crate::engine::transport_param(hop.transport);
            for part in ["Path: <sip:", &local, ";lr", tp, ">\r\n"] {
                out.push_str(part);
            }
        }
        match msg.header(HeaderName::MaxForwards) {
            Some(v) => {
                let mf = parse_u32(v).unwrap_or(70).saturating_sub(1);
                w.replace(HeaderName::MaxForwards, 0, &mf.to_string());
            }
            None => header_line(w.top(), "Max-Forwards", "69"),
        }
        if self.routed_to_us(msg) {
            w.remove(HeaderName::Route, 0);
        }
        // Credentials strowger may have consumed (RFC 3261 §22.3).
        if self.s.proxy.authenticate || self.s.proxy.relay_for_users {
            w.remove_all(HeaderName::ProxyAuthorization);
        }
        let bytes = w.finish();
        if hop.transport == Transport::Udp && bytes.len() > self.s.max_datagram {
            if let Some((stx, peer)) = up {
                let w = format!(
                    "399 strowger \"forwarded, the request ({} bytes) would not fit in a UDP \
                     datagram ({} bytes, sip.max_message_size)\"",
                    bytes.len(),
                    self.s.max_datagram
                );
                let (tag, reason) = (self.tag(), "Message Too Large");
                let extra = [("Warning", w)];
                self.respond(stx, msg, peer, 513, reason, Some(&tag), &extra, None, now);
            }
            return None;
        }
        match up {
            Some((stx, peer)) => {
                let ctx = self
                    .txs
                    .send_request_keyed(bytes, hop, &branch, &method, now);
                self.proxy.record(ctx, stx, peer, msg, hop);
                Some(ctx)
            }
            // Through the transaction layer's queue, like the BYE that may follow in the same
            // batch: an ACK sent after that BYE would reach the callee out of order.
            None => {
                self.txs.send_stateless(bytes, hop);
                None
            }
        }
    }

    /// An ACK routed through strowger (the ACK for a 2xx in a record-routed dialog): forwarded
    /// as it is, without a transaction. Returns false if it is not the proxy's.
    /// An ACK whose Route is not strowger's for its dialog is not forwarded: it is left to the
    /// B2BUA (a phone that names strowger as its outbound proxy on every request), which drops
    /// it if it knows no such call.
    pub(crate) fn proxy_ack(&mut self, msg: &Message, peer: Peer, now: Instant) -> bool {
        if self.s.proxy.domains.is_empty() {
            return false;
        }
        let Some(sig) = self.our_route(msg) else {
            return false;
        };
        let trusted = self.s.security.trusted.contains(peer.addr.ip());
        match loose_route(msg) {
            Some((hop, ruri)) if trusted || self.signed_for(sig, msg, peer, hop) => {
                self.forward(None, msg, &ruri, &[], hop, now);
                true
            }
            _ => false,
        }
    }

    /// A CANCEL for an INVITE the proxy forwarded: 200 to it, and CANCEL on every branch
    /// going (§16.10); no new branch starts. Returns false if the INVITE is not the proxy's.
    pub(crate) fn proxy_cancel(
        &mut self,
        cancel: ServerTxId,
        invite: Option<ServerTxId>,
        msg: &Message,
        peer: Peer,
        now: Instant,
    ) -> bool {
        let Some(cx) = invite.and_then(|i| self.proxy.contexts.get_mut(&i)) else {
            return false;
        };
        let branches = cx.cancel();
        self.respond(cancel, msg, peer, 200, "OK", None, &[], None, now);
        for ctx in branches {
            self.dispatch.cancelled(ctx);
            self.txs.cancel(ctx, now);
        }
        true
    }

    /// A response on a branch: provisional ones go to the caller until it has a final one;
    /// finals go through the response context (fork.rs). Returns false if the client
    /// transaction is not the proxy's.
    pub(crate) fn proxy_response(
        &mut self,
        ctx: ClientTxId,
        msg: &Message,
        first: bool,
        now: Instant,
    ) -> bool {
        let Some(&stx) = self.proxy.up.get(&ctx) else {
            return false;
        };
        let status = msg.status().unwrap_or(500);
        if self.dispatch.heard(ctx) && status == 503 && self.redispatch(ctx, now) {
            return true;
        }
        if status == 100 {
            return true; // hop by hop: the caller had ours
        }
        let Some(cx) = self.proxy.contexts.get_mut(&stx) else {
            return true;
        };
        if status < 200 {
            if cx.relays_provisional() {
                self.txs.respond(stx, status, relayed(msg, &[]), now);
            }
            return true;
        }
        if !first {
            // A retransmitted 2xx: the caller's ACK was lost (a 2xx is retransmitted end to end).
            if status < 300 {
                let peer = cx.peer;
                self.txs.send_stateless(relayed(msg, &[]), peer);
            }
            return true;
        }
        let verdict = cx.on_final(ctx, status, Some(msg));
        self.proxy_verdict(stx, verdict, Some(msg), now);
        if status >= 300 {
            self.proxy_forget(ctx);
        }
        true
    }

    /// Does what a final response on a branch of `stx` led to (`msg`: the response, None for
    /// one strowger made for a branch that got none).
    fn proxy_verdict(
        &mut self,
        stx: ServerTxId,
        verdict: Verdict,
        msg: Option<&Message>,
        now: Instant,
    ) {
        match verdict {
            Verdict::Wait => {}
            Verdict::Answer(others) => {
                if let Some(m) = msg {
                    let status = m.status().unwrap_or(200);
                    self.txs.respond(stx, status, relayed(m, &[]), now);
                }
                let why = Some(crate::apps::COMPLETED_ELSEWHERE);
                for ctx in others {
                    self.txs.cancel_because(ctx, why, now);
                }
            }
            Verdict::Late => {
                // Each 2xx to an INVITE makes a dialog the caller must ACK (§16.7 step 5).
                let invite = self
                    .proxy
                    .contexts
                    .get(&stx)
                    .filter(|c| c.req.method() == Some(&Method::Invite));
                if let Some((m, peer)) = msg.zip(invite.map(|c| c.peer)) {
                    self.txs.send_stateless(relayed(m, &[]), peer);
                }
            }
            Verdict::Stop(others) => {
                for ctx in others {
                    self.txs.cancel(ctx, now);
                }
            }
            Verdict::Next => self.next_group(stx, now),
            Verdict::Best => {
                let Some(cx) = self.proxy.contexts.get_mut(&stx) else {
                    return;
                };
                let (best, more) = cx.best();
                match best.msg {
                    Some(m) => self.txs.respond(stx, best.status, relayed(&m, &more), now),
                    None => {
                        let (peer, req) = (cx.peer, cx.req.clone());
                        let reason = match best.status {
                            480 => "Temporarily Unavailable",
                            _ => "Request Timeout",
                        };
                        let tag = self.tag();
                        self.respond(
                            stx,
                            &req,
                            peer,
                            best.status,
                            reason,
                            Some(&tag),
                            &[],
                            None,
                            now,
                        );
                    }
                }
            }
        }
    }

    /// No final response from downstream (Timer B/F): as if the branch had answered 408
    /// (§16.7 step 2), unless the edge sends the request to another node.
    pub(crate) fn proxy_timeout(&mut self, ctx: ClientTxId, now: Instant) -> bool {
        if self.redispatch(ctx, now) {
            return true;
        }
        self.dispatch.forget(ctx);
        self.proxy_branch_failed(ctx, 408, now)
    }

    /// A branch ended without a response: `status` (408, 480) stands for one.
    fn proxy_branch_failed(&mut self, ctx: ClientTxId, status: u16, now: Instant) -> bool {
        let Some((stx, cx)) = self.proxy.context(ctx) else {
            return false;
        };
        let verdict = cx.on_final(ctx, status, None);
        self.proxy_verdict(stx, verdict, None, now);
        self.proxy_forget(ctx);
        true
    }

    /// The connection to `peer` (a phone on a WebSocket) is gone: its branches fail at once
    /// with 480 instead of waiting out Timer B.
    pub(crate) fn proxy_peer_gone(&mut self, peer: Peer, now: Instant) {
        let gone: Vec<ClientTxId> = self
            .proxy
            .contexts
            .values()
            .flat_map(|c| c.waiting_on(peer))
            .collect();
        for ctx in gone {
            self.proxy_branch_failed(ctx, 480, now);
        }
    }

    /// A client transaction ended: forget what the proxy kept for it.
    pub(crate) fn proxy_forget(&mut self, ctx: ClientTxId) {
        self.dispatch.forget(ctx);
        self.proxy.forget(ctx);
    }

    /// The caller's server transaction, where it came from and the request forwarded on `ctx`.
    pub(crate) fn proxy_forwarded(&self, ctx: ClientTxId) -> Option<(ServerTxId, Peer, Message)> {
        let stx = *self.proxy.up.get(&ctx)?;
        let cx = self.proxy.contexts.get(&stx)?;
        Some((stx, cx.peer, cx.req.clone()))
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

/// A response to send back upstream: our Via removed, `more` headers added (the challenges of
/// other branches, RFC 3261 §16.7 step 7).
fn relayed(msg: &Message, more: &[(HeaderName, String)]) -> Vec<u8> {
    let mut w = Rewrite::new(msg);
    w.remove(HeaderName::Via, 0);
    for (name, value) in more {
        w.append(name.as_str(), value);
    }
    w.finish()
}

/// Appends `name: value` and its CRLF: a forwarded message is copied a header at a time, and
/// four appends cost a fraction of `write!`'s formatting machinery.
fn header_line(out: &mut String, name: &str, value: &str) {
    out.push_str(name);
    out.push_str(": ");
    out.push_str(value);
    out.push_str("\r\n");
}

/// A request inside a dialog (its To has a tag).
fn in_dialog(msg: &Message) -> bool {
    msg.to_tag().is_some()
}

/// The Request-URI's host, for messages.
fn request_host(msg: &Message) -> String {
    msg.uri()
        .ok()
        .map_or_else(String::new, |u| u.host.to_string())
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
    let hop = match msg.all(HeaderName::Route).nth(1) {
        Some(r) => {
            let n = NameAddr::parse(r).ok()?;
            crate::bridge::resolve(&Uri::parse(n.uri).ok()?)?
        }
        None => crate::bridge::resolve(&msg.uri().ok()?)?,
    };
    Some((hop, msg.request_uri()?.to_string()))
}
