//! One call: its legs, where its dialplan program stands, what it waits for, and its CDR so far.

use crate::cdr::Cdr;
use crate::dialog::Dialog;
use crate::dialplan::{Route, Vars};
use sdp::{LocalSession, Negotiated, SessionDescription};
use sip::transaction::{ClientTxId, Peer, ServerTxId};
use sip::Message;
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

/// One leg of a call, its signalling and its media.
pub struct Leg {
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
}

impl Leg {
    pub fn new(
        signal: Signal,
        sdp: LocalSession,
        remote_offer: Option<SessionDescription>,
        negotiated: Option<Negotiated>,
    ) -> Leg {
        Leg {
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
    pub inbound: Leg,
    /// The outbound leg: the one answered, or while ringing the one that last responded.
    pub outbound: Option<Leg>,
    /// The other outbound legs ringing at once (parallel forking to every contact of a user);
    /// the first to answer becomes `outbound` and the rest are cancelled.
    pub forks: Vec<Leg>,
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
}

impl Call {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        inbound: Leg,
        invite: Option<Message>,
        invite_tx: Option<ServerTxId>,
        program: Route,
        vars: Vars,
        cdr: Cdr,
        now: Instant,
        session_interval: Option<u32>,
    ) -> Call {
        Call {
            inbound,
            outbound: None,
            forks: Vec::new(),
            best_status: None,
            invite,
            invite_tx,
            program,
            vars,
            wait: Wait::None,
            answered: false,
            early_media: false,
            digits: String::new(),
            cdr,
            started: now,
            answered_at: None,
            timer_gen: 0,
            session_interval,
            session_deadline: None,
            bridge_status: None,
            recording: false,
        }
    }

    pub fn leg_mut(&mut self, outbound: bool) -> Option<&mut Leg> {
        if outbound {
            self.outbound.as_mut()
        } else {
            Some(&mut self.inbound)
        }
    }

    /// RFC 4028 §10: without a refresh, the session ends a little before the interval runs out.
    pub fn refresh_session(&mut self, interval: u32, now: Instant) {
        self.session_interval = Some(interval);
        let margin = (interval / 3).min(32);
        self.session_deadline = Some(now + Duration::from_secs(u64::from(interval - margin)));
    }
}
