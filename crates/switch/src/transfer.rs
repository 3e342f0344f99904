//! Call transfer: blind transfer by REFER (RFC 3515), attended transfer by a REFER whose
//! Refer-To carries Replaces, and a new INVITE that replaces a dialog (RFC 3891).
//!
//! A transfer stays inside one call (one CDR): the transferee takes the caller's place if it was
//! not the caller already (`Calls::swap_caller`), the transferor's leg stays as
//! `Role::Transferor` until the outcome is known, and the target's dialplan program becomes the
//! call's program, run in the call's own context — a transfer reaches nothing the call could not
//! dial. The outcome goes to the transferor as NOTIFYs of the refer event (message/sipfrag): 100
//! at once, then the target's final status. On success the transferor's leg is released; on
//! failure the transferee is bridged back to it as before.

use crate::call::{Call, Leg, LegIdx, LegRef, Role, Wait};
use crate::dialog::Dialog;
use crate::dialplan::{Route, Step, Vars};
use crate::engine::{Engine, ALLOW, SUPPORTED};
use sip::header::{HeaderName, NameAddr, Params};
use sip::transaction::{Peer, ServerTxId};
use sip::{Message, Method, Uri};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// How long the transferor's leg is kept after the final NOTIFY of a successful transfer, for
/// its phone to hang up itself (RFC 5589 §6.1: the transferor sends BYE); past it strowger sends
/// the BYE. Phones do so within milliseconds; two seconds leave room for a lost NOTIFY's
/// retransmission without holding the leg long.
const GRACE: Duration = Duration::from_secs(2);

/// The implicit subscription's lifetime announced in the first NOTIFY (RFC 3515 §2.4.4); the
/// final NOTIFY, which ends it, comes when the target answers or fails.
const EXPIRES_S: u32 = 60;

/// The refer event id of a transfer the control API asked for (call_commands.rs): no REFER,
/// so no NOTIFYs. No REFER has it: a CSeq is below 2^31 (RFC 3261 §8.1.1.5).
const BY_API: u32 = u32::MAX;

/// A transfer under way in a call (at most one; a second REFER meanwhile gets 491).
pub(crate) struct Transfer {
    /// The leg that sent the REFER; None once it hung up.
    transferor: Option<LegIdx>,
    /// The CSeq of its REFER: the `id` of its refer event (RFC 3515 §2.4.6).
    id: u32,
    /// The extension the transferee was sent to (the CDR's `transferred_to` on success).
    target: String,
    /// What the call was before, while the target's program runs; None once it answered.
    before: Option<Box<Before>>,
    /// When the transferor's leg is released (BYE) after a successful transfer.
    release_at: Option<Instant>,
    /// The transferee waits for a party another worker holds (crossing.rs).
    awaiting: bool,
}

impl Transfer {
    /// The target's program still runs (no final NOTIFY yet).
    fn pending(&self) -> bool {
        self.before.is_some()
    }
}

/// The call before a blind transfer, restored if the target fails.
struct Before {
    program: Route,
    wait: Wait,
    vars: Vars,
    exten: String,
    bridged_to: Option<String>,
    /// The transferor was the caller: the transferee took its place (and its INVITE and user,
    /// kept here, stop naming the call's caller).
    swapped: bool,
    invite: Option<Message>,
    user: Option<Box<crate::auth::UserCall>>,
    /// The transferor was alone in the call (a caller of an app such as 44444): the target's
    /// program runs for the transferor itself, and a failure starts its own rule again.
    alone: bool,
}

/// The dialog a Replaces header names (RFC 3891 §6.1): to-tag is the tag of strowger's side,
/// from-tag the far end's.
#[derive(Debug, PartialEq, Eq, Clone)]
pub(crate) struct Replaces {
    pub(crate) call_id: String,
    pub(crate) to_tag: String,
    pub(crate) from_tag: String,
    early_only: bool,
}

impl Replaces {
    fn parse(v: &str) -> Option<Replaces> {
        let (call_id, params) = v.trim().split_once(';').unwrap_or((v.trim(), ""));
        let params = Params(params);
        let tag = |n: &str| params.get(n).map(|t| t.trim_matches('"').to_string());
        let r = Replaces {
            call_id: call_id.trim().to_string(),
            to_tag: tag("to-tag")?,
            from_tag: tag("from-tag")?,
            early_only: params
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case("early-only")),
        };
        (!r.call_id.is_empty()).then_some(r)
    }
}

/// Undoes %-escapes (the Replaces value carried in a Refer-To URI's headers).
fn unescape(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The Replaces of a Refer-To URI's headers (`?Replaces=...`), if any.
fn replaces_in(headers: Option<&str>) -> Option<Option<Replaces>> {
    let Some(h) = headers else {
        return Some(None);
    };
    match h.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        k.eq_ignore_ascii_case("replaces").then_some(v)
    }) {
        Some(v) => unescape(v).and_then(|v| Replaces::parse(&v)).map(Some),
        None => Some(None),
    }
}

/// The user part of a leg's far end (a callee's number, for CALLER when it is transferred).
fn number_of(leg: &Leg) -> String {
    leg.dialog()
        .and_then(|d| NameAddr::parse(&d.remote_uri).ok())
        .and_then(|n| Uri::parse(n.uri).ok()?.user.map(str::to_string))
        .unwrap_or_default()
}

/// The ringback tone of the dialplan's tone table, which the transferee hears while the target
/// is dialled.
fn ringback() -> Option<media::ToneSpec> {
    match Step::parse("tone ringback") {
        Ok(Step::Tone { tone, .. }) => Some(media::ToneSpec::new(tone.freqs_hz, tone.cadence)),
        _ => None,
    }
}

/// The other party of leg `at` in its call: the caller for the callee, the answered callee for
/// the caller.
fn party_of(c: &Call, at: LegIdx) -> Option<LegIdx> {
    match c.leg(at).map(|l| l.role) {
        Some(Role::Callee) => Some(Call::CALLER),
        Some(Role::Caller) => c
            .callee_idx()
            .filter(|&i| c.leg(i).is_some_and(|l| l.confirmed)),
        _ => None,
    }
}

/// The variables of call `c` for a transfer target `exten` sent by leg `at`: EXTEN is the
/// target, and CALLER the transferee when it was the callee.
fn target_vars(c: &Call, at: LegIdx, exten: &str) -> Vars {
    let mut vars = c.vars.clone();
    vars.set("EXTEN", exten);
    if let Some(t) = party_of(c, at).filter(|&t| t != Call::CALLER) {
        vars.set("CALLER", c.leg(t).map(number_of).unwrap_or_default());
    }
    vars
}

/// What stops naming the call's caller when a transfer puts another leg in its place: its
/// INVITE and its user.
type CallerOf = (Option<Message>, Option<Box<crate::auth::UserCall>>);

/// Whether an in-dialog request's tags are those of `d` (its From tag the far end's, its To tag
/// ours).
fn tags_match(msg: &Message, d: &Dialog) -> bool {
    let tag = |h| {
        msg.header(h)
            .and_then(|v| NameAddr::parse(v).ok())
            .and_then(|n| n.tag().map(str::to_string))
    };
    tag(HeaderName::From).as_deref() == Some(d.remote_tag.as_str())
        && tag(HeaderName::To).as_deref() == Some(d.local_tag.as_str())
}

impl Engine {
    /// The leg that transferred call `call` while its transfer is under way or its leg is
    /// about to be released (e.g. for an announcement to it before the final NOTIFY).
    pub fn transferor(&self, call: usize) -> Option<LegIdx> {
        self.calls.get(call)?.transfer.as_ref()?.transferor
    }

    /// The leg of a dialog strowger has on this worker: `local_tag` is strowger's tag, and
    /// `remote_tag` the far end's (not checked for an outbound leg still ringing, whose far end
    /// has not given its tag in a final answer yet). The one place that finds a dialog a
    /// Replaces names.
    pub(crate) fn find_dialog(
        &self,
        call_id: &str,
        local_tag: &str,
        remote_tag: &str,
    ) -> Option<LegRef> {
        let at = self.calls.leg_by_call_id(call_id)?;
        let d = self.calls.get(at.call)?.leg(at.leg)?.dialog()?;
        let remote = d.remote_tag == remote_tag || d.remote_tag.is_empty();
        (d.local_tag == local_tag && remote).then_some(at)
    }

    /// The extension the call dialled whose dialog an INVITE's Replaces names (auth.rs admits
    /// the INVITE as a call to it).
    pub(crate) fn replaced_exten(&self, msg: &Message) -> Option<String> {
        let r = Replaces::parse(msg.header_named("Replaces")?)?;
        let at = self.find_dialog(&r.call_id, &r.to_tag, &r.from_tag)?;
        Some(self.calls.get(at.call)?.cdr.exten.clone())
    }

    /// A REFER in the dialog of leg `at` of `call`.
    pub(crate) fn on_refer(
        &mut self,
        stx: ServerTxId,
        msg: Message,
        peer: Peer,
        at: LegRef,
        now: Instant,
    ) {
        let refuse = |e: &mut Engine, status: u16, reason: &str, why: &str| {
            let extra = [("Warning", format!("399 strowger \"{why}\""))];
            e.respond(stx, &msg, peer, status, reason, None, &extra, None, now);
        };
        let Some(c) = self.calls.get(at.call) else {
            return;
        };
        let Some(leg) = c.leg(at.leg) else {
            return;
        };
        if !leg.dialog().is_some_and(|d| tags_match(&msg, d)) {
            let reason = "Call/Transaction Does Not Exist";
            return self.respond(stx, &msg, peer, 481, reason, None, &[], None, now);
        }
        if c.transfer.as_ref().is_some_and(|t| t.pending()) {
            let extra = [("Retry-After", "1".to_string())];
            let reason = "Request Pending";
            return self.respond(stx, &msg, peer, 491, reason, None, &extra, None, now);
        }
        if !c.answered || !leg.confirmed || !matches!(leg.role, Role::Caller | Role::Callee) {
            let why = "REFER is taken from a party of an answered call";
            return refuse(self, 403, "Forbidden", why);
        }
        if msg.count(HeaderName::ReferTo) != 1 {
            return refuse(self, 400, "Bad Request", "one Refer-To header expected");
        }
        let refer_to = msg.header(HeaderName::ReferTo).unwrap_or_default();
        let target = NameAddr::parse(refer_to)
            .ok()
            .and_then(|n| Uri::parse(n.uri).ok())
            .filter(|u| u.is_sip() && self.names_us(u))
            .and_then(|u| Some((u.user?.to_string(), replaces_in(u.headers)?)));
        let Some((exten, replaces)) = target else {
            let why = "Refer-To must be sip:EXTENSION@ an address of strowger";
            return refuse(self, 403, "Forbidden", why);
        };
        let id = msg
            .header(HeaderName::CSeq)
            .and_then(|c| sip::CSeq::parse(c).ok())
            .map_or(0, |c| c.seq);
        // A done transfer's transferor still lingering goes now.
        self.release_transferor(at.call, now);
        self.respond(stx, &msg, peer, 202, "Accepted", None, &[], None, now);
        self.notify(at, id, 100, now);
        match replaces {
            Some(r) => self.attended(at, id, &r, exten, now),
            None => {
                self.blind(at, id, exten, now);
            }
        }
    }

    /// A NOTIFY of the refer event on leg `at` (RFC 3515 §2.4.5), sipfrag `status`; a final
    /// status ends the implicit subscription.
    pub(crate) fn notify(&mut self, at: LegRef, id: u32, status: u16, now: Instant) {
        if id == BY_API {
            return;
        }
        let Some(d) = self
            .calls
            .get(at.call)
            .and_then(|c| c.leg(at.leg)?.dialog())
        else {
            return;
        };
        let local = self.local_for(d.peer);
        let branch = self.branch();
        let ua = self.s.user_agent.clone();
        let Some(d) = self.calls[at.call]
            .leg_mut(at.leg)
            .and_then(Leg::dialog_mut)
        else {
            return;
        };
        let contact = d.local_contact.clone();
        let mut b = d.request(&Method::Notify, &branch, local, None);
        b.header("Contact", contact);
        b.header("Event", format_args!("refer;id={id}"));
        match status {
            100..=199 => b.header(
                "Subscription-State",
                format_args!("active;expires={EXPIRES_S}"),
            ),
            _ => b.header("Subscription-State", "terminated;reason=noresource"),
        };
        b.header("User-Agent", ua);
        let frag = format!(
            "SIP/2.0 {status} {}\r\n",
            sip::status::reason_phrase(status)
        );
        let bytes = b.finish(Some(("message/sipfrag;version=2.0", frag.as_bytes())));
        let peer = d.peer;
        self.txs.send_request(bytes, peer, now);
    }

    /// A blind transfer the control API asked for, as if leg `at` had sent a REFER to `exten`:
    /// Err(409) while another is under way, Err(404) with no rule for `exten`.
    pub(crate) fn transfer_by_api(
        &mut self,
        at: LegRef,
        exten: &str,
        now: Instant,
    ) -> Result<(), u16> {
        let c = self.calls.get(at.call).ok_or(404u16)?;
        if c.transfer.as_ref().is_some_and(|t| t.pending()) {
            return Err(409);
        }
        self.release_transferor(at.call, now);
        match self.blind(at, BY_API, exten.to_string(), now) {
            true => Ok(()),
            false => Err(404),
        }
    }

    /// Blind transfer: the transferee runs `exten`'s program in the call's context. False:
    /// there is no rule for `exten`.
    fn blind(&mut self, at: LegRef, id: u32, exten: String, now: Instant) -> bool {
        let c = &self.calls[at.call];
        let vars = target_vars(c, at.leg, &exten);
        let Some(program) = self.dialplan.route(&c.cdr.context, &exten, &vars) else {
            let msg = format!(
                "transfer to {exten}: no dialplan rule in context {}",
                c.cdr.context
            );
            let call_id = c.caller().call_id().to_string();
            self.log(crate::io::Level::Info, Some(&call_id), msg);
            self.notify(at, id, 404, now);
            return false;
        };
        self.redirect(at, id, exten, program, vars, now);
        self.calls.run_later(at.call);
        true
    }

    /// The transfer's common start: call `at.call` gets `program` (the target `exten`'s) and
    /// `vars` in place of its own, kept in `Before` for a failure; the transferor steps aside
    /// and the transferee hears ringback. The program is not run here.
    fn redirect(
        &mut self,
        at: LegRef,
        id: u32,
        exten: String,
        program: Route,
        vars: Vars,
        now: Instant,
    ) {
        let call = at.call;
        let c = &self.calls[call];
        let transferee = party_of(c, at.leg);
        // Alone in the call, the transferor's own rule starts again if the target fails.
        let restart = match transferee {
            None => self.dialplan.route(&c.cdr.context, &c.cdr.exten, &c.vars),
            Some(_) => None,
        };
        self.stop_recording(call);
        if transferee.is_none() {
            // Alone in the call: a callee still ringing is not a party to keep.
            self.drop_callees(call, 16, now);
        }
        let c = &mut self.calls[call];
        let mut before = Before {
            program: std::mem::replace(&mut c.program, program),
            wait: c.wait,
            vars: std::mem::replace(&mut c.vars, vars),
            exten: std::mem::replace(&mut c.cdr.exten, exten.clone()),
            bridged_to: c.cdr.bridged_to.clone(),
            swapped: false,
            invite: None,
            user: None,
            alone: transferee.is_none(),
        };
        let transferor = match transferee {
            None => {
                if let Some(p) = restart {
                    before.program = p;
                }
                Call::CALLER
            }
            Some(t) => {
                let (transferor, caller) = self.step_aside(at, t);
                if let Some((invite, user)) = caller {
                    before.swapped = true;
                    before.invite = invite;
                    before.user = user;
                }
                transferor
            }
        };
        self.iax_rehome(call);
        let c = &mut self.calls[call];
        c.wait = Wait::None;
        c.bridge_status = None;
        c.transfer = Some(Box::new(Transfer {
            transferor: Some(transferor),
            id,
            target: exten,
            before: Some(Box::new(before)),
            release_at: None,
            awaiting: false,
        }));
        if let (Some(m), Some(tone)) = (c.caller().media, ringback()) {
            // Also ends the bridge: the transferor hears nothing from now on.
            self.media.tone(m, tone);
        }
    }

    /// The call's program answered (again) while a transfer is under way: the target took the
    /// transferee (its bridge answered, or it runs an app that answers). The transferor hears
    /// so, and its leg goes after `GRACE` unless it hangs up first; a queue agent's call is over.
    pub(crate) fn transfer_answered(&mut self, call: usize, now: Instant) {
        let Some(c) = self.calls.get_mut(call) else {
            return;
        };
        let Some(t) = c.transfer.as_mut() else {
            return;
        };
        let Some(before) = t.before.take() else {
            return;
        };
        c.cdr.exten = before.exten;
        c.cdr.transferred_to = Some(t.target.clone());
        let (who, id) = (t.transferor, t.id);
        if before.alone || who.is_none() {
            c.transfer = None;
        } else {
            let at = now + GRACE;
            t.release_at = Some(at);
            self.calls.arm(call, at);
        }
        if let Some(leg) = who {
            self.notify(LegRef { call, leg }, id, 200, now);
        }
        // An agent that passed its queue caller on is done with it (wrap-up starts).
        self.queue_ended(call, now);
    }

    /// The call's program ended (or hung up) with `status` while a transfer is under way: the
    /// target failed. The transferor hears the status and gets the transferee back as it was.
    /// False if there is no transfer to undo (the call then ends as it would without one).
    pub(crate) fn transfer_failed(
        &mut self,
        call: usize,
        status: Option<u16>,
        now: Instant,
    ) -> bool {
        let Some(c) = self.calls.get_mut(call) else {
            return false;
        };
        // Only a pending transfer is undone; a done one keeps its transferor's release.
        if c.transfer.as_ref().is_none_or(|t| !t.pending()) {
            return false;
        }
        let Some(t) = c.transfer.take() else {
            return false;
        };
        let (Some(before), Some(who)) = (t.before, t.transferor) else {
            return false;
        };
        let status = status.filter(|s| *s >= 300).unwrap_or(480);
        // Whatever the target's program left dialling goes.
        self.drop_callees(call, 16, now);
        let c = &mut self.calls[call];
        c.program = before.program;
        c.vars = before.vars;
        c.cdr.exten = before.exten;
        c.cdr.bridged_to = before.bridged_to;
        c.bridge_status = None;
        let mut who = who;
        if before.alone {
            c.wait = Wait::None;
            self.calls.run_later(call);
        } else {
            if before.swapped {
                self.calls.swap_caller(call, who, Role::Callee);
                let c = &mut self.calls[call];
                c.invite = before.invite;
                c.user = before.user;
                who = Call::CALLER;
            } else if let Some(l) = c.leg_mut(who) {
                l.role = Role::Callee;
            }
            self.iax_rehome(call);
            self.calls[call].wait = before.wait;
            // Bridged again, or music for the one not holding (hold.rs).
            self.rejoin(call);
        }
        self.notify(LegRef { call, leg: who }, t.id, status, now);
        true
    }

    /// The call ends while its transfer is pending (its transferee hung up, or the switch is
    /// shutting down): the transferor hears 487 in the final NOTIFY, just before its BYE.
    pub(crate) fn transfer_abandoned(&mut self, call: usize, now: Instant) {
        let Some(t) = self.calls.get(call).and_then(|c| c.transfer.as_ref()) else {
            return;
        };
        let alone = t.before.as_ref().is_none_or(|b| b.alone);
        if let (Some(leg), false) = (t.transferor, alone) {
            let id = t.id;
            self.notify(LegRef { call, leg }, id, 487, now);
        }
    }

    /// Leg `at` hung up (its BYE answered): if it is a transferor's, only its leg goes and the
    /// transfer goes on without it. False for any other leg.
    pub(crate) fn transferor_left(&mut self, at: LegRef, now: Instant) -> bool {
        let Some(c) = self.calls.get_mut(at.call) else {
            return false;
        };
        let Some(t) = c.transfer.as_mut() else {
            return false;
        };
        let alone = t.before.as_ref().is_some_and(|b| b.alone);
        if t.transferor != Some(at.leg) || alone {
            return false;
        }
        t.transferor = None;
        if !t.pending() {
            c.transfer = None;
        }
        if let Some(mut leg) = c.remove_leg(at.leg) {
            self.release_outbound(&mut leg, 16, false, now);
        }
        true
    }

    /// A call timer: a done transfer's transferor that did not hang up within `GRACE` is
    /// released now.
    pub(crate) fn transfer_timer(&mut self, call: usize, now: Instant) {
        let due = self
            .calls
            .get(call)
            .and_then(|c| c.transfer.as_ref()?.release_at)
            .is_some_and(|at| at <= now);
        if due {
            self.release_transferor(call, now);
        }
    }

    /// Releases (BYE) the transferor of a done transfer, if it is still there.
    fn release_transferor(&mut self, call: usize, now: Instant) {
        let Some(c) = self.calls.get_mut(call) else {
            return;
        };
        if c.transfer.as_ref().is_none_or(|t| t.pending()) {
            return;
        }
        let who = c.transfer.take().and_then(|t| t.transferor);
        if let Some(mut leg) = who.and_then(|w| c.remove_leg(w)) {
            self.release_outbound(&mut leg, 16, true, now);
        }
    }

    /// The transferor `at` becomes `Role::Transferor`, its place taken by `transferee` if it
    /// was the caller (its session timer dropped with it). Returns where the transferor is now
    /// and, if it was the caller, what named it so (`CallerOf`).
    fn step_aside(&mut self, at: LegRef, transferee: LegIdx) -> (LegIdx, Option<CallerOf>) {
        let call = at.call;
        if at.leg != Call::CALLER {
            if let Some(l) = self.calls[call].leg_mut(at.leg) {
                l.role = Role::Transferor;
            }
            return (at.leg, None);
        }
        self.calls.swap_caller(call, transferee, Role::Transferor);
        (transferee, Some(self.caller_replaced(call)))
    }

    /// Another leg took the caller's place: the session timer the old caller asked for goes, and
    /// its INVITE and user no longer name the caller (returned).
    fn caller_replaced(&mut self, call: usize) -> CallerOf {
        let c = &mut self.calls[call];
        c.session_interval = None;
        c.session_deadline = None;
        (c.invite.take(), c.user.take())
    }

    /// Releases the call's callee and the legs ringing (CANCEL, or BYE once answered), and
    /// ends the bridge that dialled them.
    fn drop_callees(&mut self, call: usize, q850: u8, now: Instant) {
        let Some(c) = self.calls.get_mut(call) else {
            return;
        };
        // A ring group's members still to ring or being looked up go with them (hunt.rs).
        c.hunt = None;
        let mut gone = c.take_ringing();
        gone.extend(c.take_callee(false));
        for mut leg in gone {
            self.release_outbound(&mut leg, q850, true, now);
        }
    }

    /// Attended transfer: the REFER on leg `at` names, in Replaces, the transferor's other
    /// dialog (its consultation call): the party there replaces the transferor here. A
    /// consultation call of another worker sends its party over (crossing.rs).
    fn attended(&mut self, at: LegRef, id: u32, r: &Replaces, exten: String, now: Instant) {
        let consult = self
            .find_dialog(&r.call_id, &r.to_tag, &r.from_tag)
            .filter(|o| o.call != at.call);
        let c = &self.calls[at.call];
        let transferee = party_of(c, at.leg);
        let from = c.leg(at.leg).map(|l| l.peer_addr().ip());
        let Some(other) = consult else {
            return match (self.worker_of(&r.call_id), transferee, from) {
                (Some(w), Some(_), Some(from)) => {
                    self.ask_for_party(w, at, id, r, exten, from, now)
                }
                (Some(_), _, _) => self.notify(at, id, 403, now),
                (None, _, _) => self.notify(at, id, 481, now),
            };
        };
        let consulted = self.consultation(other, from);
        match (consulted, transferee) {
            (Err(status), _) => self.notify(at, id, status, now),
            (Ok(_), None) => self.notify(at, id, 403, now),
            (Ok(true), Some(_)) => self.semi_attended(at, id, other.call, now),
            (Ok(false), Some(t)) => match self.take_party(other, now) {
                Some((moved, reached)) => self.join_party(at, t, id, moved, reached, now),
                None => self.notify(at, id, 403, now),
            },
        }
    }

    /// Whether dialog `other`, named by a REFER's Replaces from the phone at `from`, is a
    /// consultation call with a party to hand over: Ok(true) if it still rings its target (a
    /// semi-attended transfer), Ok(false) if answered; else the status for the final NOTIFY.
    pub(crate) fn consultation(&self, other: LegRef, from: Option<IpAddr>) -> Result<bool, u16> {
        let c2 = self.calls.get(other.call).ok_or(481u16)?;
        // The consultation call still rings its target: the transferor did not wait for the
        // answer (a semi-attended transfer).
        let ringing = !c2.answered
            && other.leg == Call::CALLER
            && c2.callee().is_some()
            && matches!(c2.wait, Wait::Bridge { .. });
        let Some(named) = c2
            .leg(other.leg)
            .filter(|l| ringing || (l.confirmed && c2.answered))
        else {
            // An early dialog strowger did not start (RFC 3891 §3).
            return Err(481);
        };
        // The same phone on both dialogs (by address: a phone's dialogs come from one host).
        let same_party = from == Some(named.peer_addr().ip());
        let partner = ringing || party_of(c2, other.leg).is_some();
        match (same_party, partner, c2.transfer.is_none()) {
            (true, true, true) => Ok(ringing),
            _ => Err(403),
        }
    }

    /// Whether the party of consultation dialog `other` is signalled by SIP.
    pub(crate) fn party_is_sip(&self, other: LegRef) -> bool {
        let Some(c2) = self.calls.get(other.call) else {
            return false;
        };
        let party = party_of(c2, other.leg).and_then(|p| c2.leg(p));
        party.is_some_and(|l| l.dialog().is_some())
    }

    /// Takes the answered party out of consultation dialog `other` (checked by
    /// `consultation`), first giving up the caller's place, and ends that call: it holds the
    /// transferor's other leg alone now (BYE). Returns the party's leg and what it reached.
    pub(crate) fn take_party(&mut self, other: LegRef, now: Instant) -> Option<(Leg, String)> {
        let mut partner = LegRef {
            call: other.call,
            leg: party_of(self.calls.get(other.call)?, other.leg)?,
        };
        if partner.leg == Call::CALLER {
            self.calls.swap_caller(other.call, other.leg, Role::Callee);
            partner.leg = other.leg;
        }
        let moved = self.calls.take_leg(partner)?;
        let reached = moved
            .dialog()
            .map_or_else(|| moved.call_id().to_string(), |d| d.remote_uri.clone());
        self.hangup(other.call, 16, "switch", None, now);
        Some((moved, reached))
    }

    /// The consulted party's leg `moved` (what it `reached`) takes the place of transferor `at`
    /// (its call's `transferee` stays): the transferor hears 200 and goes after `GRACE`.
    fn join_party(
        &mut self,
        at: LegRef,
        transferee: LegIdx,
        id: u32,
        moved: Leg,
        reached: String,
        now: Instant,
    ) {
        let call = at.call;
        let (transferor, _) = self.step_aside(at, transferee);
        self.calls.put_leg(call, moved, Role::Callee);
        self.iax_rehome(call);
        let c = &mut self.calls[call];
        c.wait = Wait::Forever;
        c.cdr.bridged_to = Some(reached.clone());
        c.cdr.transferred_to = Some(reached);
        let until = now + GRACE;
        c.transfer = Some(Box::new(Transfer {
            transferor: Some(transferor),
            id,
            target: String::new(),
            before: None,
            release_at: Some(until),
            awaiting: false,
        }));
        self.calls.arm(call, until);
        self.rejoin(call);
        self.notify(
            LegRef {
                call,
                leg: transferor,
            },
            id,
            200,
            now,
        );
    }

    /// Attended transfer to a party another worker holds (crossing.rs): the transferee of the
    /// REFER on `at` (to `exten`) waits for it as for a blind transfer's target, hearing
    /// ringback, with no program of its own — a failure, or no party within 64·T1 (the life of
    /// the re-INVITE that follows), returns it to the transferor. Returns the transferee's
    /// Call-ID, by which the answer finds the call (the transferor may hang up meanwhile).
    pub(crate) fn await_party(
        &mut self,
        at: LegRef,
        id: u32,
        exten: String,
        now: Instant,
    ) -> Option<String> {
        let c = self.calls.get(at.call)?;
        let transferee = c.leg(party_of(c, at.leg)?)?.call_id().to_string();
        let vars = target_vars(c, at.leg, &exten);
        let program = c.program.done();
        self.redirect(at, id, exten, program, vars, now);
        let until = now + self.s.timers.t1 * 64;
        let c = &mut self.calls[at.call];
        if let Some(t) = c.transfer.as_mut() {
            t.awaiting = true;
        }
        c.wait = Wait::Timer(until);
        self.calls.arm(at.call, until);
        Some(transferee)
    }

    /// The call whose transferee (by Call-ID) awaits a party for transfer `id`.
    fn awaiting(&mut self, transferee: &str, id: u32) -> Option<usize> {
        let call = self.calls.leg_by_call_id(transferee)?.call;
        let t = self.calls.get_mut(call)?.transfer.as_mut()?;
        (t.awaiting && t.id == id).then(|| {
            t.awaiting = false;
            call
        })
    }

    /// The party another worker sent (what it `reached`) joins the call of `transferee` as its
    /// callee, re-INVITEd to a port of this worker; its answer completes the transfer as a
    /// blind one's target does (`transfer_answered`). Err: no such transfer waits any more.
    pub(crate) fn party_arrived(
        &mut self,
        transferee: &str,
        id: u32,
        leg: Box<Leg>,
        reached: String,
        now: Instant,
    ) -> Result<(), Box<Leg>> {
        let Some(call) = self.awaiting(transferee, id) else {
            return Err(leg);
        };
        if let Some(t) = self.calls[call].transfer.as_mut() {
            t.target = reached;
        }
        if let Some(joined) = self.calls.put_leg(call, *leg, Role::Callee) {
            self.reinvite(joined, now);
        }
        Ok(())
    }

    /// The other worker's consultation still rang `exten`, and stopped: the transferee
    /// awaiting it dials `exten` itself, as in a blind transfer.
    pub(crate) fn party_ringing(&mut self, transferee: &str, id: u32, exten: String, now: Instant) {
        let Some(call) = self.awaiting(transferee, id) else {
            return;
        };
        let c = &mut self.calls[call];
        c.vars.set("EXTEN", exten.as_str());
        let Some(program) = self.dialplan.route(&c.cdr.context, &exten, &c.vars) else {
            return self.no_party(call, 404, now);
        };
        c.program = program;
        c.cdr.exten = exten.clone();
        if let Some(t) = c.transfer.as_mut() {
            t.target = exten;
        }
        c.wait = Wait::None;
        self.calls.run_later(call);
    }

    /// The other worker has no party for the transfer `id` of `transferee` (`status`).
    pub(crate) fn party_refused(&mut self, transferee: &str, id: u32, status: u16, now: Instant) {
        if let Some(call) = self.awaiting(transferee, id) {
            self.no_party(call, status, now);
        }
    }

    /// The transfer of call `call` got no party (`status`): the transferee returns to the
    /// transferor, or if that one hung up meanwhile, the call ends.
    fn no_party(&mut self, call: usize, status: u16, now: Instant) {
        if !self.transfer_failed(call, Some(status), now) {
            self.hangup(call, 16, "switch", None, now);
        }
    }

    /// Semi-attended transfer: the REFER's Replaces names the caller's leg of call `consult`,
    /// which still rings its target. As Asterisk and FreeSWITCH do, the ringing target goes to
    /// the transferee: its ringing legs move into the transferee's call with the rest of the
    /// consultation's program (what follows its `bridge`), so the transferee hears the target
    /// ring (or its early media) and the answer completes the transfer as a blind one's does.
    /// The consultation call ends without its legs.
    fn semi_attended(&mut self, at: LegRef, id: u32, consult: usize, now: Instant) {
        let c2 = &self.calls[consult];
        let Wait::Bridge { until } = c2.wait else {
            return;
        };
        let (program, exten, early) = (c2.program.clone(), c2.cdr.exten.clone(), c2.early_media);
        let vars = target_vars(&self.calls[at.call], at.leg, &exten);
        let legs: Vec<(LegIdx, Role)> = c2
            .legs()
            .filter(|(_, l)| matches!(l.role, Role::Callee | Role::Ringing))
            .map(|(i, l)| (i, l.role))
            .collect();
        self.redirect(at, id, exten, program, vars, now);
        let call = at.call;
        for (leg, role) in legs {
            if let Some(l) = self.calls.take_leg(LegRef { call: consult, leg }) {
                self.calls.put_leg(call, l, role);
            }
        }
        let hunt = self.calls[consult].hunt.take();
        let c = &mut self.calls[call];
        c.hunt = hunt;
        c.wait = Wait::Bridge { until };
        self.calls.arm(call, until);
        let c = &self.calls[call];
        if let (true, Some(a), Some(b)) =
            (early, c.caller().media, c.callee().and_then(|l| l.media))
        {
            // The target's early media reaches the transferee instead of the ringback.
            self.media.bridge(a, b);
        }
        self.hangup(consult, 16, "switch", None, now);
    }

    /// A new INVITE (admitted in `context`, its leg built as a caller's) carrying Replaces
    /// (RFC 3891 §3): its leg takes the named dialog's place, answered and bridged to that
    /// dialog's partner, and the replaced leg is released (BYE, or CANCEL while it rings).
    pub(crate) fn invite_replaces(
        &mut self,
        stx: ServerTxId,
        msg: &Message,
        peer: Peer,
        leg: Leg,
        context: &str,
        now: Instant,
    ) {
        let reply = |e: &mut Engine, status: u16| {
            let reason = sip::status::reason_phrase(status);
            e.reply(stx, msg, peer, status, reason, &[], now);
        };
        let Some(r) = msg.header_named("Replaces").and_then(Replaces::parse) else {
            return reply(self, 400);
        };
        let Some(old) = self.find_dialog(&r.call_id, &r.to_tag, &r.from_tag) else {
            return reply(self, 481);
        };
        let c = &self.calls[old.call];
        let Some(l) = c.leg(old.leg) else {
            return reply(self, 481);
        };
        let (role, confirmed) = (l.role, l.confirmed);
        if c.cdr.context != context {
            return self.forbid(stx, msg, peer, now);
        }
        match role {
            // An early dialog strowger did not start, or a transferor on its way out.
            Role::Caller if !confirmed => return reply(self, 481),
            Role::Transferor => return reply(self, 481),
            _ if confirmed && r.early_only => return reply(self, 486),
            _ => {}
        }
        let call = old.call;
        let reached = msg
            .header(HeaderName::From)
            .map(crate::dialog::without_tag)
            .unwrap_or_default();
        let new = if role == Role::Caller {
            // The new leg takes the caller's place; the old caller is released.
            let Some(n) = self.calls.put_leg(call, leg, Role::Ringing) else {
                return;
            };
            self.calls.swap_caller(call, n.leg, Role::Ringing);
            if let Some(mut gone) = self.calls[call].remove_leg(n.leg) {
                self.release_outbound(&mut gone, 16, true, now);
            }
            self.caller_replaced(call);
            Call::CALLER
        } else {
            // A callee answered or ringing (a pickup): it and every other fork go.
            self.drop_callees(call, 26, now);
            let Some(n) = self.calls.put_leg(call, leg, Role::Callee) else {
                return;
            };
            n.leg
        };
        self.iax_rehome(call);
        let body = match self.ensure_media(call, new, now) {
            true => self.answer_body(call, new),
            false => None,
        };
        let Some(body) = body else {
            reply(self, 503);
            return self.hangup(call, 34, "switch", None, now);
        };
        let c = &mut self.calls[call];
        let Some(d) = c.leg(new).and_then(Leg::dialog) else {
            return;
        };
        let (tag, contact) = (d.local_tag.clone(), d.local_contact.clone());
        let mut extra = vec![
            ("Contact", contact),
            ("Allow", ALLOW.to_string()),
            ("Supported", SUPPORTED.join(", ")),
        ];
        // Proxies on the way stay in the new dialog (RFC 3261 §12.1.1).
        for rr in msg.all(HeaderName::RecordRoute) {
            extra.push(("Record-Route", rr.to_string()));
        }
        if let Some(l) = c.leg_mut(new) {
            l.confirmed = true;
        }
        c.wait = Wait::Forever;
        c.cdr.transferred_to = Some(reached);
        self.respond(
            stx,
            msg,
            peer,
            200,
            "OK",
            Some(&tag),
            &extra,
            Some(body.as_bytes()),
            now,
        );
        self.calls.index_server_tx(stx, call);
        // A pickup answers the caller now.
        if self.answer(call, now) {
            self.rejoin(call);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{replaces_in, unescape, Replaces};

    #[test]
    fn replaces_from_a_refer_to_uri() {
        let h = Some("Replaces=abc%40host%3Bto-tag%3Dt1%3Bfrom-tag%3Df1");
        let r = replaces_in(h).expect("well formed").expect("a Replaces");
        assert_eq!(
            r,
            Replaces {
                call_id: "abc@host".into(),
                to_tag: "t1".into(),
                from_tag: "f1".into(),
                early_only: false,
            }
        );
        assert_eq!(replaces_in(None).map(|r| r.is_none()), Some(true));
        assert_eq!(replaces_in(Some("X=1")).map(|r| r.is_none()), Some(true));
        // Missing tags or a broken escape: not a Replaces to act on.
        assert!(replaces_in(Some("Replaces=abc%3Bto-tag%3Dt1")).is_none());
        assert!(replaces_in(Some("Replaces=abc%3")).is_none());
        assert_eq!(unescape("a%3bb"), Some("a;b".into()));
    }

    #[test]
    fn replaces_header_with_early_only() {
        let r = Replaces::parse("x@y;from-tag=F;to-tag=T;early-only").expect("parses");
        assert_eq!((r.to_tag.as_str(), r.from_tag.as_str()), ("T", "F"));
        assert!(r.early_only);
        assert!(Replaces::parse(";to-tag=T;from-tag=F").is_none());
    }
}
