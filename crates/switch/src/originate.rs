//! Calls the control API places (`Command::Originate`): strowger calls FROM — every contact
//! of a registered user at once, or a SIP URI at a trusted peer — and once FROM answers, runs the
//! dialplan for TO on that leg as if FROM had dialled TO. The leg FROM answers on is the call's
//! caller, so every app (echo, playback, menus, bridge, transfer) serves it unchanged; only its
//! INVITE goes out instead of coming in, and its answer starts the program.
//!
//! Never an open relay: a URI is called only at an address in `security.trusted`, the peers
//! strowger already exchanges calls with unchallenged.

use crate::bridge::better_final;
use crate::call::{Call, Leg, LegIdx, LegRef, Role, Signal, Wait};
use crate::cdr::{unix_seconds, Cdr};
use crate::control::Notice;
use crate::dialog::Dialog;
use crate::dialplan::{Cause, Vars};
use crate::engine::{transport_param, Engine};
use crate::registrar::{Pending, StoreOp, StoreResult};
use sip::transaction::{Peer, Transport};
use sip::{Message, Uri};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

/// A call to place: the API's `POST /api/v1/calls`.
#[derive(Debug, Clone)]
pub struct Originate {
    /// The Call-ID of the leg to FROM, and so the call's id; chosen by the API so that it
    /// hashes to the worker it is sent to (`owner`), where FROM's in-dialog requests land.
    pub call_id: String,
    /// A user name (`alice`, `alice@domain`) or a `sip:` URI.
    pub from: String,
    /// The extension whose dialplan rule runs once FROM answers.
    pub to: String,
    pub context: String,
    /// The number FROM's phone shows and the program's `${CALLER}`; None: TO.
    pub caller_id: Option<String>,
    /// How long FROM may ring.
    pub timeout: Duration,
}

/// Why a call cannot be placed: an HTTP status and a message that names the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub status: u16,
    pub message: String,
}

fn refused(status: u16, message: String) -> Result<(), Refused> {
    Err(Refused { status, message })
}

/// The Q.850 cause of a leg that failed with `status` (no contact: 480, no answer: 408).
fn cause_of(status: u16) -> u8 {
    Cause::from_sip_status(status).0
}

impl Engine {
    /// Checks and places call `o`: the call exists (listed, its `created` notice made) when
    /// this returns Ok; whether FROM answers is told later, by notices and the CDR.
    pub(crate) fn originate(&mut self, o: Originate, now: Instant) -> Result<(), Refused> {
        if !self.dialplan.has_context(&o.context) {
            return refused(
                400,
                format!(
                    "no dialplan context {:?}: define [[dialplan.contexts.{}.rules]] or name another",
                    o.context, o.context
                ),
            );
        }
        if self.calls.leg_by_call_id(&o.call_id).is_some() {
            return refused(409, format!("call {:?} exists already", o.call_id));
        }
        let caller = o.caller_id.clone().unwrap_or_else(|| o.to.clone());
        let vars = Vars::for_call(&o.to, &caller, &o.call_id, &self.s.data_dir);
        let Some(program) = self.dialplan.route(&o.context, &o.to, &vars) else {
            return refused(
                400,
                format!(
                    "no dialplan rule for {:?} in context {:?} (dialplan.contexts.{}.rules)",
                    o.to, o.context, o.context
                ),
            );
        };
        // Where FROM is: a URI's own address now, a user's contact once it is looked up.
        let uri_peer = match o.from.contains(':') {
            true => Some(self.uri_target(&o.from)?),
            false => None,
        };
        if self.draining {
            return refused(503, "strowger is stopping (draining): no new calls".into());
        }
        if self.overloaded || !self.s.slots.try_take() {
            return refused(
                503,
                "strowger is at its call limit (general.max_calls): try again later".into(),
            );
        }
        self.stats.calls_started += 1;
        let (remote, peer) = match uri_peer {
            Some(peer) => (o.from.clone(), peer),
            None => (
                format!("sip:{}", self.aor_of(&o.from)),
                Peer {
                    transport: Transport::Udp,
                    addr: SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
                },
            ),
        };
        // Our URIs are made when the INVITE goes (`ring_origin`): a user's address is not known yet.
        let dialog = Dialog {
            call_id: o.call_id.clone(),
            local_tag: self.tag(),
            remote_tag: String::new(),
            local_uri: String::new(),
            remote_uri: format!("<{remote}>"),
            remote_target: remote,
            route_set: Vec::new(),
            local_cseq: 0,
            remote_cseq: 0,
            peer,
            max_forwards: 70,
            local_contact: String::new(),
        };
        let sdp = self.local_session(self.s.media_ip, peer.transport);
        let leg = Leg::new(Signal::Sip(dialog), sdp, None, None);
        let cdr = Cdr {
            call_id: o.call_id.clone(),
            from: o.from.clone(),
            to: o.to.clone(),
            exten: o.to.clone(),
            context: o.context.clone(),
            start: unix_seconds(self.clock.wall_at(now)),
            ..Cdr::default()
        };
        let mut c = Call::new(leg, None, None, program, vars, cdr, now, None);
        let until = now + o.timeout;
        c.wait = Wait::Answer { until };
        let call = self.calls.add(c);
        self.calls.arm(call, until);
        self.created_notice(call);
        match uri_peer {
            Some(_) => self.ring_origin(call, Call::CALLER, now),
            None => {
                let (user, domain) = self.user_domain(&o.from);
                let gen = self.calls[call].timer_gen;
                let op = StoreOp::Locate {
                    user,
                    domain,
                    now: self.clock.unix(),
                };
                self.store_op(op, Pending::Origin { call, gen });
            }
        }
        Ok(())
    }

    /// Where a `sip:` URI FROM is sent, if strowger may call it.
    fn uri_target(&self, from: &str) -> Result<Peer, Refused> {
        let Some(peer) = Uri::parse(from)
            .ok()
            .filter(Uri::is_sip)
            .as_ref()
            .and_then(crate::bridge::resolve)
        else {
            return Err(Refused {
                status: 400,
                message: format!("from {from:?}: expected a user name or sip:user@IP[:port]"),
            });
        };
        if !self.s.security.trusted.contains(peer.addr.ip()) {
            return Err(Refused {
                status: 403,
                message: format!(
                    "from {from:?}: strowger calls a URI only at a trusted peer, and {} is not in security.trusted (add it there, or originate from a registered user)",
                    peer.addr.ip()
                ),
            });
        }
        Ok(peer)
    }

    fn user_domain(&self, name: &str) -> (String, String) {
        match name.split_once('@') {
            Some((u, d)) => (u.to_string(), d.to_string()),
            None => (name.to_string(), self.s.registrar.domain.clone()),
        }
    }

    fn aor_of(&self, name: &str) -> String {
        let (user, domain) = self.user_domain(name);
        format!("{user}@{domain}")
    }

    /// The answer to FROM's lookup: ring every contact at once, as the desk phone and the
    /// softphone of a user both ring for a call to it (the first to answer wins:
    /// `origin_answered`), or end the call — 404 for no such user, 480 for one with no phone
    /// registered.
    pub(crate) fn origin_located(
        &mut self,
        call: usize,
        gen: u64,
        result: StoreResult,
        now: Instant,
    ) {
        use crate::registrar::StoreReply::Located;
        let waiting = self
            .calls
            .get(call)
            .is_some_and(|c| c.timer_gen == gen && matches!(c.wait, Wait::Answer { .. }));
        if !waiting {
            return;
        }
        match result {
            Ok(Located { exists: false, .. }) => self.origin_failed(call, 404, now),
            Ok(Located { bindings, .. }) if bindings.is_empty() => {
                self.origin_failed(call, 480, now)
            }
            Ok(Located {
                mut bindings, dtmf, ..
            }) => {
                crate::registrar::preference_order(&mut bindings);
                let mut forks = Vec::with_capacity(bindings.len());
                for b in bindings {
                    let (route_set, peer) = self.route_to(&b);
                    let at = match forks.is_empty() {
                        true => Some(Call::CALLER),
                        false => self.origin_fork(call),
                    };
                    let Some(at) = at else {
                        return;
                    };
                    let Some(leg) = self.calls[call].leg_mut(at) else {
                        return;
                    };
                    leg.dtmf = dtmf;
                    if let Some(d) = leg.dialog_mut() {
                        d.remote_target = b.contact;
                        d.route_set = route_set;
                        d.peer = peer;
                    }
                    forks.push(at);
                }
                for at in forks {
                    if !self.calls.contains(call) {
                        return;
                    }
                    self.ring_origin(call, at, now);
                }
            }
            Ok(_) => {}
            Err(e) => {
                self.warn_call(call, format!("location store: {e}"));
                self.origin_failed(call, 503, now);
            }
        }
    }

    /// A second leg to FROM, ringing beside the caller's. It shares the caller's Call-ID and
    /// From tag, as a forking proxy's branches do (RFC 3261 §16.6): whichever contact answers,
    /// the call keeps the id the API gave it. Not indexed by that Call-ID (the caller is).
    fn origin_fork(&mut self, call: usize) -> Option<LegIdx> {
        let d = self.calls[call].caller().dialog()?.clone();
        let sdp = self.local_session(self.s.media_ip, d.peer.transport);
        let leg = Leg::new(Signal::Sip(d), sdp, None, None);
        Some(self.calls[call].add_leg(leg, Role::Ringing))
    }

    /// Sends the INVITE to FROM's leg `at` with strowger's offer, From the caller ID.
    fn ring_origin(&mut self, call: usize, at: LegIdx, now: Instant) {
        if !self.ensure_media(call, at, now) {
            return self.origin_failed(call, 503, now);
        }
        let caps = self.s.caps.clone();
        let c = &self.calls[call];
        let caller = c.vars.get("CALLER").unwrap_or("strowger").to_string();
        let Some(peer) = c.leg(at).and_then(Leg::dialog).map(|d| d.peer) else {
            return;
        };
        let local = self.local_for(peer);
        let Some(leg) = self.calls[call].leg_mut(at) else {
            return;
        };
        if let Some(d) = leg.dialog_mut() {
            d.local_uri = format!("<sip:{caller}@{local}>");
            d.local_contact = format!("<sip:strowger@{local}{}>", transport_param(peer.transport));
        }
        let offer = leg.sdp.offer(&caps, leg.port);
        leg.our_offer = Some(offer);
        self.send_invite(call, at, None, now);
    }

    /// A response to the INVITE to FROM on leg `at`: a 2xx starts the program, a failure
    /// drops that leg and ends the call once no other leg rings.
    pub(crate) fn origin_response(&mut self, at: LegRef, msg: &Message, status: u16, now: Instant) {
        match status {
            100 => {}
            101..=199 => self.notice(crate::control::CALL, |e| {
                let (call_id, contact) = e.origin_contact(at)?;
                Some(Notice::Ringing { call_id, contact })
            }),
            200..=299 => self.origin_answered(at, msg, now),
            _ => self.origin_leg_failed(at, status, now),
        }
    }

    /// The call's id and the contact leg `at` rings (before its 2xx's Contact replaces it).
    fn origin_contact(&self, at: LegRef) -> Option<(String, Option<String>)> {
        let c = self.calls.get(at.call)?;
        let contact = c.leg(at.leg)?.dialog().map(|d| d.remote_target.clone());
        Some((c.caller().call_id().to_string(), contact))
    }

    /// Leg `at` answered: it becomes the caller, the others are cancelled (a 2xx that crosses
    /// the CANCEL is ACKed and ended with a BYE: `orphan_answer`).
    fn origin_answered(&mut self, at: LegRef, msg: &Message, now: Instant) {
        let call = at.call;
        // Its INVITE is done (and out of the index): not to be indexed again by the swap.
        if let Some(leg) = self.calls[call].leg_mut(at.leg) {
            leg.invite_tx = None;
        }
        if at.leg != Call::CALLER {
            self.calls.swap_caller(call, at.leg, Role::Ringing);
        }
        let losers = self.calls[call].take_ringing();
        for mut leg in losers {
            self.release_outbound(&mut leg, 26, true, now);
        }
        self.index_origin(call);
        let answered = self.origin_contact(LegRef {
            call,
            leg: Call::CALLER,
        });
        let refused = self
            .accept_answer(call, Call::CALLER, msg.body(), now)
            .err();
        let c = &mut self.calls[call];
        let leg = c.caller_mut();
        let Some(d) = leg.dialog_mut() else {
            return;
        };
        d.confirm_uac(msg);
        let cseq = d.local_cseq;
        leg.confirmed = true;
        c.answered = true;
        c.answered_at = Some(now);
        let at = unix_seconds(self.clock.wall_at(now));
        c.cdr.answer = Some(at);
        c.best_status = None;
        c.wait = Wait::None;
        self.metrics
            .set_up(now.saturating_duration_since(c.started));
        self.calls.answered(call, at);
        self.ack_answer(call, Call::CALLER, cseq);
        if let Some(e) = refused {
            // The one leg there is answered with SDP that cannot be taken: it ends at once.
            self.note_refused_answer(call, e, "the call");
            return self.hangup(call, 88, "switch", None, now);
        }
        self.notice(crate::control::CALL, |_| {
            let (call_id, contact) = answered?;
            Some(Notice::Answered { call_id, contact })
        });
        self.calls.run_later(call);
    }

    /// Leg `at` failed with `status` (or its INVITE timed out: 408): while another leg rings,
    /// only that leg goes (a ringing one takes the caller's place if it was the caller's) and
    /// the best failure is kept (`better_final`); the last one ends the call with it.
    pub(crate) fn origin_leg_failed(&mut self, at: LegRef, status: u16, now: Instant) {
        let call = at.call;
        let Some(c) = self.calls.get_mut(call) else {
            return;
        };
        if let Some(leg) = c.leg_mut(at.leg) {
            leg.invite_tx = None;
        }
        let best = c.best_status.map_or(status, |b| better_final(b, status));
        let Some(next) = c.legs().map(|(i, _)| i).find(|i| *i != at.leg) else {
            return self.origin_failed(call, best, now);
        };
        c.best_status = Some(best);
        let gone = match at.leg == Call::CALLER {
            true if self.calls.swap_caller(call, next, Role::Ringing) => next,
            true => return,
            false => at.leg,
        };
        if let Some(mut leg) = self.calls[call].remove_leg(gone) {
            self.release_outbound(&mut leg, 16, false, now);
        }
        self.index_origin(call);
    }

    /// Puts the caller back under the call's Call-ID, which a fork sharing it took out of the
    /// index when it was released or swapped.
    fn index_origin(&mut self, call: usize) {
        let Some(id) = self
            .calls
            .get(call)
            .map(|c| c.caller().call_id().to_string())
        else {
            return;
        };
        let caller = LegRef {
            call,
            leg: Call::CALLER,
        };
        self.calls.index_call_id(id, caller);
    }

    /// FROM could not be reached (`status`): the call ends with its cause, in the CDR and the
    /// `ended` notice.
    pub(crate) fn origin_failed(&mut self, call: usize, status: u16, now: Instant) {
        if let Some(c) = self.calls.get_mut(call) {
            c.cdr.sip_status = status;
        }
        self.hangup(call, cause_of(status), "caller", None, now);
    }

    /// The caller's leg is one strowger dialled and nobody answered yet (`hangup` cancels it
    /// rather than answering an INVITE).
    pub(crate) fn unanswered_origin(c: &Call) -> bool {
        c.invite.is_none() && c.caller().iax().is_none() && !c.caller().confirmed
    }
}
