//! One call: its legs, where its dialplan program stands, what it waits for, and its CDR so far.

use crate::cdr::Cdr;
use crate::dialog::Dialog;
use crate::dialplan::{Route, Vars};
use sdp::{LocalSession, Negotiated, SessionDescription};
use sip::transaction::{ClientTxId, Peer, ServerTxId};
use sip::Message;
use slab::Slab;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a call's program is waiting for before its next step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Ready to run the next step.
    None,
    /// A non-looping playback to finish.
    Playback,
    Timer(Instant),
    /// Recording until '#', this deadline or hang-up.
    Record {
        until: Instant,
    },
    /// The callee of a bridge to answer (or the bridge to time out).
    Bridge {
        until: Instant,
    },
    /// A prompt or recording file the shell is opening (`Event::Prompt`, `Event::Recording`).
    File,
    /// A store operation of the program's (`forward`).
    Store,
    /// The caller's next digit for a `read` or `menu` (ivr.rs), until its timeout.
    Digits,
    /// FROM to answer a call the API placed (originate.rs), until this deadline.
    Answer {
        until: Instant,
    },
    /// Nothing more: the call stays until a side hangs up (echo, looped playback, bridged).
    Forever,
}

/// How a leg is signalled.
pub enum Signal {
    Sip(Dialog),
    /// Over IAX2 (iax.rs). `call_id` names the leg (the key of CDRs and per-call files);
    /// `call` is None once the IAX2 call is over, so no HANGUP is sent for it again.
    Iax {
        call: Option<iax2::CallId>,
        call_id: String,
        peer: SocketAddr,
    },
}

/// What a leg is to its call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The leg the call came in on; it lives as long as the call.
    Caller,
    /// The callee: the one answered, or while ringing the one that last responded (at most one).
    Callee,
    /// Another callee ringing at once (parallel forking to every contact of a user); the first
    /// to answer becomes the callee and the rest are cancelled.
    Ringing,
    /// The party that transferred the call (REFER), kept while its transfer is under way so it
    /// gets the outcome and, if the target fails, its call back (transfer.rs).
    Transferor,
}

/// A leg of a call, by its place in the call's legs (stable while the leg lasts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LegIdx(usize);

/// A leg of a call in the call table: what the maps of `Calls` find from a Call-ID, an
/// outbound INVITE or a media leg.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LegRef {
    pub call: usize,
    pub leg: LegIdx,
}

/// One leg of a call, its signalling and its media (none for a leg without media).
pub struct Leg {
    pub role: Role,
    pub signal: Signal,
    pub sdp: LocalSession,
    /// The offer the peer made (inbound INVITE with SDP), answered when strowger answers.
    pub remote_offer: Option<SessionDescription>,
    pub negotiated: Option<Negotiated>,
    /// The offer strowger sent and whose answer it waits for (in an ACK or a response).
    pub our_offer: Option<SessionDescription>,
    /// The SDP strowger sent on this leg (kept so 183 and 200 carry the same answer).
    pub local_body: Option<String>,
    pub media: Option<media::LegId>,
    pub port: u16,
    /// The ACK for the outbound leg's 2xx, re-sent when the 2xx is retransmitted.
    pub ack: Option<(Peer, Arc<[u8]>)>,
    /// The pending outbound INVITE.
    pub invite_tx: Option<ClientTxId>,
    pub confirmed: bool,
    /// An outbound leg through a trunk: its credentials' use and the servers left to try.
    pub trunk: Option<Box<crate::trunks::Outbound>>,
    /// The far end put the call on hold (its last offer stops it receiving).
    pub held: bool,
    /// How the far end sends and takes digits: its user's or trunk's `dtmf` (None:
    /// `rtp.dtmf`), given to the media leg when it is made.
    pub dtmf: Option<media::DtmfMode>,
    /// When strowger's re-INVITE, refused with 491, goes again (reinvite.rs).
    pub reoffer_at: Option<Instant>,
    /// A re-INVITE is moving the leg off a shared port onto a pair of its own (`strays`).
    pub moving: bool,
}

impl Leg {
    pub fn new(
        signal: Signal,
        sdp: LocalSession,
        remote_offer: Option<SessionDescription>,
        negotiated: Option<Negotiated>,
    ) -> Leg {
        Leg {
            role: Role::Caller,
            signal,
            sdp,
            remote_offer,
            negotiated,
            our_offer: None,
            local_body: None,
            media: None,
            port: 0,
            ack: None,
            invite_tx: None,
            confirmed: false,
            trunk: None,
            held: false,
            dtmf: None,
            reoffer_at: None,
            moving: false,
        }
    }

    /// The SIP dialog (None for an IAX2 leg).
    pub fn dialog(&self) -> Option<&Dialog> {
        match &self.signal {
            Signal::Sip(d) => Some(d),
            Signal::Iax { .. } => None,
        }
    }

    pub fn dialog_mut(&mut self) -> Option<&mut Dialog> {
        match &mut self.signal {
            Signal::Sip(d) => Some(d),
            Signal::Iax { .. } => None,
        }
    }

    /// The IAX2 call of an IAX2 leg while that call lasts.
    pub fn iax(&self) -> Option<iax2::CallId> {
        match self.signal {
            Signal::Iax { call, .. } => call,
            Signal::Sip(_) => None,
        }
    }

    /// Ends the leg's IAX2 call on our side: returns it, and no HANGUP is sent for it later.
    pub fn take_iax(&mut self) -> Option<iax2::CallId> {
        match &mut self.signal {
            Signal::Iax { call, .. } => call.take(),
            Signal::Sip(_) => None,
        }
    }

    pub fn call_id(&self) -> &str {
        match &self.signal {
            Signal::Sip(d) => &d.call_id,
            Signal::Iax { call_id, .. } => call_id,
        }
    }

    /// The far end's address.
    pub fn peer_addr(&self) -> SocketAddr {
        match &self.signal {
            Signal::Sip(d) => d.peer.addr,
            Signal::Iax { peer, .. } => *peer,
        }
    }
}

pub struct Call {
    /// Every leg of the call, each with its role: the caller first (`Call::CALLER`), then the
    /// callee and the legs ringing; more (a conference, a queue, a transfer) need no new field.
    legs: Slab<Leg>,
    /// The best final response of the forks that failed so far (RFC 3261 §16.7).
    pub best_status: Option<u16>,
    /// The inbound INVITE (none for an IAX2 caller) and its server transaction, until a final
    /// response went out.
    pub invite: Option<Message>,
    pub invite_tx: Option<ServerTxId>,
    pub program: Route,
    pub vars: Vars,
    pub wait: Wait,
    pub answered: bool,
    pub early_media: bool,
    pub digits: String,
    /// A step has read the caller's digits: its media listens for tones (digits.rs).
    pub reads_digits: bool,
    pub cdr: Cdr,
    pub started: Instant,
    pub answered_at: Option<Instant>,
    /// Call timers are lazily deleted: a timer fires only if it carries the call's current
    /// generation (given by `Calls::add`).
    pub timer_gen: u64,
    pub session_interval: Option<u32>,
    pub session_deadline: Option<Instant>,
    /// Status of the last failed bridge, for the caller's final response.
    pub bridge_status: Option<u16>,
    pub recording: bool,
    /// The user the caller authenticated as: the caller ID of the calls it places, and its
    /// share of its `max_calls` until the call is dropped (auth.rs).
    pub(crate) user: Option<Box<crate::auth::UserCall>>,
    /// The members of the `bridge` under way still to ring, and what it has found (hunt.rs).
    pub(crate) hunt: Option<Box<crate::hunt::Hunt>>,
    /// How often a user's forwarding has sent this call elsewhere (forwarding.rs).
    pub(crate) forwarded: u8,
    /// The transfer under way, at most one at a time (transfer.rs).
    pub(crate) transfer: Option<Box<crate::transfer::Transfer>>,
    /// The voice-menu step under way and the digits typed for it (ivr.rs).
    pub(crate) ivr: Option<Box<crate::ivr::Ivr>>,
    /// The whole-call recording under way (call_recording.rs).
    pub(crate) call_recording: Option<Box<crate::call_recording::Recorded>>,
    /// A prompt the control API plays over the bridge: the bridge resumes when it ends
    /// (call_commands.rs).
    pub(crate) api_prompt: bool,
}

impl Call {
    /// Whether a store answer tagged `gen` is the one this call's program still waits for (a
    /// later step or a hangup makes an answer stale).
    pub(crate) fn awaits_store(&self, gen: u64) -> bool {
        self.timer_gen == gen && self.wait == Wait::Store
    }

    #[allow(clippy::too_many_arguments)]
    pub fn new(
        mut caller: Leg,
        invite: Option<Message>,
        invite_tx: Option<ServerTxId>,
        program: Route,
        vars: Vars,
        cdr: Cdr,
        now: Instant,
        session_interval: Option<u32>,
    ) -> Call {
        caller.role = Role::Caller;
        let mut legs = Slab::with_capacity(2);
        legs.insert(caller);
        Call {
            legs,
            best_status: None,
            invite,
            invite_tx,
            program,
            vars,
            wait: Wait::None,
            answered: false,
            early_media: false,
            digits: String::new(),
            reads_digits: false,
            cdr,
            started: now,
            answered_at: None,
            timer_gen: 0,
            session_interval,
            session_deadline: None,
            bridge_status: None,
            recording: false,
            user: None,
            hunt: None,
            forwarded: 0,
            transfer: None,
            ivr: None,
            call_recording: None,
            api_prompt: false,
        }
    }

    /// The caller's leg, first of the call's legs and there as long as the call.
    pub const CALLER: LegIdx = LegIdx(0);

    pub fn caller(&self) -> &Leg {
        &self.legs[Self::CALLER.0]
    }

    pub fn caller_mut(&mut self) -> &mut Leg {
        &mut self.legs[Self::CALLER.0]
    }

    /// The callee's leg (`Role::Callee`), if any.
    pub fn callee_idx(&self) -> Option<LegIdx> {
        self.leg_in(Role::Callee)
    }

    pub fn callee(&self) -> Option<&Leg> {
        self.leg(self.callee_idx()?)
    }

    pub fn callee_mut(&mut self) -> Option<&mut Leg> {
        let i = self.callee_idx()?;
        self.leg_mut(i)
    }

    /// The other callees still ringing (`Role::Ringing`).
    pub fn ringing(&self) -> impl Iterator<Item = (LegIdx, &Leg)> {
        self.legs
            .iter()
            .filter(|(_, l)| l.role == Role::Ringing)
            .map(|(i, l)| (LegIdx(i), l))
    }

    pub fn legs(&self) -> impl Iterator<Item = (LegIdx, &Leg)> {
        self.legs.iter().map(|(i, l)| (LegIdx(i), l))
    }

    pub fn leg(&self, i: LegIdx) -> Option<&Leg> {
        self.legs.get(i.0)
    }

    pub fn leg_mut(&mut self, i: LegIdx) -> Option<&mut Leg> {
        self.legs.get_mut(i.0)
    }

    /// Adds a leg in `role` (not a second caller: one with that role is added as ringing).
    pub fn add_leg(&mut self, mut leg: Leg, role: Role) -> LegIdx {
        leg.role = match role {
            Role::Caller => Role::Ringing,
            r => r,
        };
        LegIdx(self.legs.insert(leg))
    }

    /// Takes a leg out of the call (never the caller's): the caller releases it.
    pub fn remove_leg(&mut self, i: LegIdx) -> Option<Leg> {
        if i == Self::CALLER {
            return None;
        }
        self.legs.try_remove(i.0)
    }

    /// Makes `leg` the callee, dropping the callee it replaces (released already, if any).
    pub fn set_callee(&mut self, leg: Leg) -> LegIdx {
        if let Some(old) = self.callee_idx() {
            self.legs.remove(old.0);
        }
        self.add_leg(leg, Role::Callee)
    }

    /// Makes the ringing leg `i` the callee; the callee it replaces rings on. False if `i` is
    /// not a callee's leg.
    pub fn select_callee(&mut self, i: LegIdx) -> bool {
        match self.leg(i).map(|l| l.role) {
            Some(Role::Callee) => true,
            Some(Role::Ringing) => {
                if let Some(old) = self.callee_mut() {
                    old.role = Role::Ringing;
                }
                self.legs[i.0].role = Role::Callee;
                true
            }
            _ => false,
        }
    }

    /// The callee rings on as one of the ringing legs while another is dialled. False if there
    /// is no callee.
    pub fn demote_callee(&mut self) -> bool {
        match self.callee_mut() {
            Some(l) => {
                l.role = Role::Ringing;
                true
            }
            None => false,
        }
    }

    /// Takes the callee's leg out of the call; the latest leg still ringing, if any, becomes
    /// the callee in its place when `next`.
    pub fn take_callee(&mut self, next: bool) -> Option<Leg> {
        let old = self.callee_idx().and_then(|i| self.remove_leg(i));
        if next {
            if let Some((i, _)) = self.ringing().last() {
                self.legs[i.0].role = Role::Callee;
            }
        }
        old
    }

    /// Makes leg `i` the caller, and the caller leg `i` in `role` (a transfer moves the caller's
    /// partner into the caller's place). The legs trade places, so their `LegIdx`s trade too:
    /// `Calls::swap_caller` re-indexes them. False if `i` is not another leg of the call.
    pub fn swap_caller(&mut self, i: LegIdx, role: Role) -> bool {
        let Some((caller, other)) = self.legs.get2_mut(Self::CALLER.0, i.0) else {
            return false;
        };
        std::mem::swap(caller, other);
        caller.role = Role::Caller;
        other.role = match role {
            Role::Caller => Role::Ringing,
            r => r,
        };
        true
    }

    /// The leg in `role` (the first, if several have it).
    pub fn leg_in(&self, role: Role) -> Option<LegIdx> {
        self.legs().find(|(_, l)| l.role == role).map(|(i, _)| i)
    }

    /// Takes every ringing leg out of the call.
    pub fn take_ringing(&mut self) -> Vec<Leg> {
        let ids: Vec<LegIdx> = self.ringing().map(|(i, _)| i).collect();
        ids.into_iter().filter_map(|i| self.remove_leg(i)).collect()
    }

    /// RFC 4028 §10: without a refresh, the session ends a little before the interval runs out.
    pub fn refresh_session(&mut self, interval: u32, now: Instant) {
        self.session_interval = Some(interval);
        let margin = (interval / 3).min(32);
        self.session_deadline = Some(now + Duration::from_secs(u64::from(interval - margin)));
    }
}
