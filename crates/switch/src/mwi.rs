//! Message-waiting indication (RFC 3842): a phone SUBSCRIBEs to the `message-summary` of its
//! user's voicemail box and is sent a NOTIFY with the box's counts at once, on every change
//! and when the subscription ends. Only the box's own user, authenticated by digest, may
//! subscribe, and a user holds at most `voicemail.max_subscriptions_per_user` for
//! `voicemail.min/max_subscribe_expires_s`. A box nobody subscribes to is told to its user's
//! registered phones unsolicited when it changes (`voicemail.unsolicited_mwi`), as Asterisk
//! does for phones that do not subscribe. A subscription whose NOTIFY is refused or not
//! answered ends (RFC 6665 §4.2.2): the phone is gone or no longer wants it.

use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;
use sip::header::HeaderName;
use sip::transaction::{ClientTxId, Peer, ServerTxId};
use sip::{Message, Method};
use store::voicemail::Mailbox;

use crate::dialog::Dialog;
use crate::engine::{transport_param, Engine};
use crate::registrar::{Pending, StoreOp, StoreReply, StoreResult};

/// The event package, and the body type its NOTIFYs carry.
const EVENT: &str = "message-summary";
const BODY_TYPE: &str = "application/simple-message-summary";
/// Seconds a SUBSCRIBE without Expires lasts (RFC 3842 §6: one hour).
const DEFAULT_EXPIRES: u32 = 3600;
/// How long a fetch (a new SUBSCRIBE with Expires: 0) waits for the box's counts.
const FETCH_WAIT: Duration = Duration::from_secs(2);

/// The subscriptions of this worker, and the counts of each box last seen.
#[derive(Default)]
pub(crate) struct Mwi {
    subs: Vec<Sub>,
    /// New and old messages of the boxes seen, so a phone is told of changes only.
    counts: FxHashMap<String, (usize, usize)>,
}

/// One phone's subscription to one box: the dialog its NOTIFYs go in.
struct Sub {
    user: String,
    dialog: Dialog,
    expires: Instant,
    /// The counts last sent (None: a NOTIFY is due, as after each SUBSCRIBE).
    told: Option<(usize, usize)>,
    /// The last NOTIFY, until it is answered.
    notify: Option<ClientTxId>,
    /// A fetch (RFC 6665 §4.4.3): one NOTIFY, which ends it.
    fetch: bool,
}

impl Mwi {
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.subs.iter().map(|s| s.expires).min()
    }
}

/// The NOTIFY body for a box with `new` and `old` messages (RFC 3842 §5).
fn summary(user: &str, domain: &str, (new, old): (usize, usize)) -> String {
    let waiting = if new > 0 { "yes" } else { "no" };
    format!(
        "Messages-Waiting: {waiting}\r\nMessage-Account: sip:{user}@{domain}\r\nVoice-Message: {new}/{old} (0/0)\r\n"
    )
}

/// The user part of a request's Request-URI: the box a SUBSCRIBE is for.
fn box_of(msg: &Message) -> Option<String> {
    let uri = sip::Uri::parse(msg.request_uri()?).ok()?;
    uri.user.map(str::to_string)
}

impl Engine {
    /// A SUBSCRIBE: for `message-summary` only, and from the box's user (challenged).
    pub(crate) fn on_subscribe(
        &mut self,
        stx: ServerTxId,
        msg: Message,
        peer: Peer,
        local: std::net::SocketAddr,
        now: Instant,
    ) {
        let event = msg.header(HeaderName::Event).unwrap_or_default();
        let package = event.split(';').next().unwrap_or_default().trim();
        if !package.eq_ignore_ascii_case(EVENT) {
            let extra = [("Allow-Events", EVENT.to_string())];
            return self.reply(stx, &msg, peer, 489, "Bad Event", &extra, now);
        }
        let then = crate::auth::Then::Subscribe { local };
        self.authenticate(stx, msg, peer, then, now);
    }

    /// A SUBSCRIBE whose sender authenticated as `user`: a new subscription, a refresh or
    /// (Expires: 0) its end, each answered with a NOTIFY of the box.
    pub(crate) fn subscribe_authenticated(
        &mut self,
        stx: ServerTxId,
        msg: Message,
        peer: Peer,
        local: std::net::SocketAddr,
        user: String,
        now: Instant,
    ) {
        let vm = self.s.voicemail.clone();
        if box_of(&msg).as_deref() != Some(user.as_str()) || !vm.mailboxes.contains_key(&user) {
            return self.forbid(stx, &msg, peer, now);
        }
        let asked = match msg.header(HeaderName::Expires) {
            None => DEFAULT_EXPIRES,
            Some(v) => match v.trim().parse::<u32>() {
                Ok(e) => e,
                Err(_) => return self.reply(stx, &msg, peer, 400, "Bad Request", &[], now),
            },
        };
        if asked != 0 && asked < vm.min_subscribe_expires_s {
            let extra = [("Min-Expires", vm.min_subscribe_expires_s.to_string())];
            return self.reply(stx, &msg, peer, 423, "Interval Too Brief", &extra, now);
        }
        let expires = asked.min(vm.max_subscribe_expires_s);
        let call_id = msg.header(HeaderName::CallId).unwrap_or_default();
        let to_tag = msg.to_addr().ok().and_then(|n| n.tag().map(str::to_string));
        // A refresh is taken from the subscription's own user only.
        let found = to_tag.as_ref().and_then(|tag| {
            self.mwi.subs.iter().position(|s| {
                s.dialog.call_id == call_id && s.dialog.local_tag == *tag && s.user == user
            })
        });
        let i = match (found, to_tag) {
            (Some(i), _) => i,
            (None, Some(_)) => {
                let reason = "Call/Transaction Does Not Exist";
                return self.respond(stx, &msg, peer, 481, reason, None, &[], None, now);
            }
            (None, None) => {
                let held = self.mwi.subs.iter().filter(|s| s.user == user).count();
                if held >= vm.max_subscriptions_per_user {
                    self.warn(format!(
                        "user {user}: a SUBSCRIBE refused, {held} subscriptions held already (voicemail.max_subscriptions_per_user)"
                    ));
                    let extra = [("Retry-After", "60".to_string())];
                    return self.reply(stx, &msg, peer, 503, "Service Unavailable", &extra, now);
                }
                let tag = self.tag();
                let contact = format!("<sip:strowger@{local}{}>", transport_param(peer.transport));
                let Some(dialog) = Dialog::uas(&msg, peer, tag, contact) else {
                    return self.reply(stx, &msg, peer, 400, "Bad Request", &[], now);
                };
                self.mwi.subs.push(Sub {
                    user: user.clone(),
                    dialog,
                    expires: now,
                    told: None,
                    notify: None,
                    fetch: expires == 0,
                });
                self.mwi.subs.len() - 1
            }
        };
        let sub = &mut self.mwi.subs[i];
        sub.expires = match sub.fetch {
            true => now + FETCH_WAIT,
            false => now + Duration::from_secs(u64::from(expires)),
        };
        sub.told = None;
        let d = &sub.dialog;
        let (tag, contact) = (d.local_tag.clone(), d.local_contact.clone());
        let extra = [("Expires", expires.to_string()), ("Contact", contact)];
        self.respond(stx, &msg, peer, 200, "OK", Some(&tag), &extra, None, now);
        if expires == 0 && !self.mwi.subs[i].fetch {
            let mut sub = self.mwi.subs.swap_remove(i);
            let counts = self.mwi.counts.get(&user).copied().unwrap_or_default();
            let state = "terminated;reason=timeout";
            self.mwi_notify(&mut sub.dialog, &user, counts, state, now);
            return;
        }
        self.fetch_counts(&user);
    }

    /// Asks for a box's listing; its answer (`mwi_box`) tells the subscriptions due a NOTIFY.
    fn fetch_counts(&mut self, user: &str) {
        self.ask_box(None, user, store::voicemail::MailboxOp::List);
    }

    /// A box as an operation left it: every subscription to it not told these counts yet gets
    /// a NOTIFY; without any, the user's phones are told unsolicited if the counts changed
    /// (by the worker whose operation it was: `ours`).
    pub(crate) fn mwi_box(&mut self, user: &str, b: &Mailbox, ours: bool, now: Instant) {
        let counts = (b.new.len(), b.old.len());
        let before = self.mwi.counts.insert(user.to_string(), counts);
        let mut subscribed = false;
        for i in 0..self.mwi.subs.len() {
            let s = &mut self.mwi.subs[i];
            if s.user != user {
                continue;
            }
            subscribed = true;
            if s.told == Some(counts) {
                continue;
            }
            s.told = Some(counts);
            let state = match s.fetch {
                true => "terminated;reason=timeout".to_string(),
                false => format!(
                    "active;expires={}",
                    s.expires.saturating_duration_since(now).as_secs()
                ),
            };
            let mut d = s.dialog.clone();
            let tx = self.mwi_notify(&mut d, user, counts, &state, now);
            let s = &mut self.mwi.subs[i];
            s.dialog = d;
            s.notify = Some(tx);
        }
        self.mwi.subs.retain(|s| !(s.fetch && s.told.is_some()));
        if ours && !subscribed && before != Some(counts) && self.s.voicemail.unsolicited_mwi {
            let op = StoreOp::Locate {
                user: user.to_string(),
                domain: self.s.registrar.domain.clone(),
                now: self.clock.unix(),
            };
            self.store_op(op, Pending::Mwi { user: user.into() });
        }
    }

    /// A NOTIFY of a box's counts in dialog `d` (its CSeq counts on).
    fn mwi_notify(
        &mut self,
        d: &mut Dialog,
        user: &str,
        counts: (usize, usize),
        state: &str,
        now: Instant,
    ) -> ClientTxId {
        let branch = self.branch();
        let local = self.local_for(d.peer);
        let body = summary(user, &self.s.registrar.domain, counts);
        let mut b = d.request(&Method::Notify, &branch, local, None);
        b.header("Contact", &d.local_contact);
        b.header("Event", EVENT);
        b.header("Subscription-State", state);
        b.header("User-Agent", &self.s.user_agent);
        let bytes = b.finish(Some((BODY_TYPE, body.as_bytes())));
        self.txs.send_request(bytes, d.peer, now)
    }

    /// A final response (`status`) to a NOTIFY, or none in time (None): true if it was a
    /// subscription's, which ends unless the NOTIFY was taken.
    pub(crate) fn mwi_answered(&mut self, tx: ClientTxId, status: Option<u16>) -> bool {
        let Some(i) = self.mwi.subs.iter().position(|s| s.notify == Some(tx)) else {
            return false;
        };
        match status {
            Some(200..=299) => self.mwi.subs[i].notify = None,
            _ => {
                self.mwi.subs.swap_remove(i);
            }
        }
        true
    }

    /// The registered phones of a box's user, for an unsolicited NOTIFY each.
    pub(crate) fn mwi_located(&mut self, user: &str, result: StoreResult, now: Instant) {
        let Ok(StoreReply::Located { bindings, .. }) = result else {
            return;
        };
        let Some(counts) = self.mwi.counts.get(user).copied() else {
            return;
        };
        let domain = self.s.registrar.domain.clone();
        for b in &bindings {
            let (route_set, peer) = self.route_to(b);
            let local = self.local_for(peer);
            let aor = format!("<sip:{user}@{domain}>");
            let mut d = Dialog {
                call_id: format!("{}-mwi", self.tag()),
                local_tag: self.tag(),
                remote_tag: String::new(),
                local_uri: aor.clone(),
                remote_uri: aor,
                remote_target: b.contact.clone(),
                route_set,
                local_cseq: 0,
                remote_cseq: 0,
                peer,
                local_contact: format!("<sip:strowger@{local}{}>", transport_param(peer.transport)),
                max_forwards: 70,
            };
            self.mwi_notify(&mut d, user, counts, "active", now);
        }
    }

    /// Subscriptions past their expiry end with a last NOTIFY.
    pub(crate) fn mwi_timeouts(&mut self, now: Instant) {
        while let Some(i) = self.mwi.subs.iter().position(|s| s.expires <= now) {
            let mut s = self.mwi.subs.swap_remove(i);
            let counts = self.mwi.counts.get(&s.user).copied().unwrap_or_default();
            let state = "terminated;reason=timeout";
            self.mwi_notify(&mut s.dialog, &s.user, counts, state, now);
        }
    }
}
