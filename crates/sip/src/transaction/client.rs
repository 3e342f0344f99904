//! Client transactions (RFC 3261 §17.1, with the INVITE "Accepted" state of RFC 6026), and the
//! requests the layer derives from an INVITE: the ACK for a non-2xx and the CANCEL.

use super::timer::{Armed, Slot};
use super::{ClientTxId, Io, Key, Life, Peer, Timers, TxEvent, Wire};
use crate::builder::RequestBuilder;
use crate::header::HeaderName;
use crate::message::Message;
use crate::method::Method;
use std::time::{Duration, Instant};

/// Timer D for UDP: long enough to absorb every retransmission of the final (§17.1.1.2).
const TIMER_D: Duration = Duration::from_secs(32);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum State {
    /// Created but not sent: a CANCEL waits here for its INVITE's first provisional (§9.1).
    Deferred,
    /// Request sent, no response yet ("Trying" for non-INVITE).
    Calling,
    Proceeding,
    Completed,
    /// INVITE only: 2xx received; 2xx retransmissions still reach the TU until timer M.
    Accepted,
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::Deferred => "Deferred",
            State::Calling => "Calling",
            State::Proceeding => "Proceeding",
            State::Completed => "Completed",
            State::Accepted => "Accepted",
        }
    }
}

pub(super) struct ClientTxn {
    /// None when the TU's request had no branch or CSeq: it can only time out.
    pub key: Option<Key>,
    pub invite: bool,
    pub state: State,
    pub peer: Peer,
    /// Sent and retransmitted until a final response; dropped then, since nothing re-sends it
    /// afterwards (the ACK for a non-2xx is derived from it first) and the transaction may
    /// linger for timer D, K or M.
    request: Option<Wire>,
    /// INVITE only: the ACK sent for the non-2xx final, re-sent on each of its retransmissions
    /// until timer D: in the pool, as it lingers.
    ack: Option<Wire>,
    /// INVITE only: its CANCEL transaction, once the TU asked for one.
    pub cancel: Option<u64>,
    interval: Duration,
    pub timers: Armed,
}

impl ClientTxn {
    pub fn new(id: u64, key: Option<Key>, invite: bool, request: Wire, peer: Peer) -> Self {
        ClientTxn {
            key,
            invite,
            state: State::Deferred,
            peer,
            request: Some(request),
            ack: None,
            cancel: None,
            interval: Duration::ZERO,
            timers: Armed::new(id),
        }
    }

    /// The request, until a final response.
    pub fn request(&self) -> Option<&[u8]> {
        self.request.as_deref()
    }

    /// A cancelled INVITE, Proceeding (no timer of its own), waits 64*T1 from its CANCEL for
    /// a final, then ends as if timer B fired (RFC 3261 §9.1): a callee that answers neither,
    /// or only the CANCEL, would otherwise hold it for good.
    pub fn await_final(&mut self, now: Instant, t: &Timers, io: &mut Io) {
        self.timers.arm(&mut io.queue, Slot::End, now + t.t64());
    }

    /// Sends the request and starts timers A+B (INVITE) or E+F.
    pub fn start(&mut self, now: Instant, t: &Timers, io: &mut Io) {
        self.state = State::Calling;
        self.retransmit(io);
        if !self.peer.transport.is_reliable() {
            self.interval = t.t1;
            self.timers.arm(&mut io.queue, Slot::Retransmit, now + t.t1);
        }
        self.timers.arm(&mut io.queue, Slot::End, now + t.t64());
    }

    /// Returns `Some(first_time)` when the TU should see the response.
    pub fn on_response(
        &mut self,
        msg: &Message,
        status: u16,
        now: Instant,
        t: &Timers,
        io: &mut Io,
    ) -> (Option<bool>, Life) {
        let udp = !self.peer.transport.is_reliable();
        match (self.state, status) {
            (State::Calling | State::Proceeding, 100..=199) => {
                if self.invite && self.state == State::Calling {
                    // No more retransmissions, and timer B only guards the Calling state (a
                    // later provisional leaves the wait a CANCEL armed, `Transactions::cancel`).
                    self.timers.disarm(Slot::Retransmit);
                    self.timers.disarm(Slot::End);
                }
                self.state = State::Proceeding;
                (Some(true), Life::Live)
            }
            (State::Calling | State::Proceeding, 200..=299) if self.invite => {
                self.state = State::Accepted;
                self.timers.disarm(Slot::Retransmit);
                self.request = None;
                self.timers.arm(&mut io.queue, Slot::End, now + t.t64());
                (Some(true), Life::Live)
            }
            (State::Calling | State::Proceeding, _) => {
                self.state = State::Completed;
                self.timers.disarm(Slot::Retransmit);
                let wait = if !udp {
                    Duration::ZERO
                } else if self.invite {
                    TIMER_D
                } else {
                    t.t4
                };
                if self.invite {
                    let to = msg.header(HeaderName::To);
                    self.ack = self
                        .request()
                        .and_then(|r| derive(r, Method::Ack, to, None))
                        .map(|ack| io.pool.put(&ack));
                    self.resend_ack(io);
                }
                self.request = None;
                (Some(true), self.timers.end_after(&mut io.queue, wait, now))
            }
            (State::Accepted, 200..=299) => (Some(false), Life::Live),
            (State::Completed, 300..) if self.invite => {
                self.resend_ack(io);
                (None, Life::Live)
            }
            _ => (None, Life::Live),
        }
    }

    fn retransmit(&self, io: &mut Io) {
        if let Some(request) = &self.request {
            io.send(self.peer, request.clone());
        }
    }

    fn resend_ack(&self, io: &mut Io) {
        if let Some(ack) = &self.ack {
            io.send(self.peer, ack.clone());
        }
    }

    pub fn on_timer(&mut self, id: u64, slot: Slot, at: Instant, t: &Timers, io: &mut Io) -> Life {
        if slot == Slot::Retransmit {
            self.retransmit(io);
            // A doubles without bound; E doubles up to T2, and is T2 once a provisional came.
            self.interval = match (self.invite, self.state) {
                (true, _) => self.interval * 2,
                (false, State::Proceeding) => t.t2,
                (false, _) => t.backoff(self.interval),
            };
            self.timers
                .arm(&mut io.queue, Slot::Retransmit, at + self.interval);
            return Life::Live;
        }
        if matches!(self.state, State::Calling | State::Proceeding) {
            // Timer B or F, or a cancelled INVITE's wait for its final: the TU acts as if it
            // got a 408.
            io.events.push_back(TxEvent::Timeout(ClientTxId(id)));
        }
        Life::Dead
    }
}

/// A request built from the INVITE with `method` (§17.1.1.3 ACK, §9.1 CANCEL): same
/// Request-URI, top Via (so the same branch), From, Call-ID, CSeq number and Route set; To from
/// the response for an ACK (it carries the tag), from the INVITE for a CANCEL; and a CANCEL's
/// Reason (RFC 3326), if given.
pub(super) fn derive(
    invite: &[u8],
    method: Method,
    to: Option<&str>,
    reason: Option<&str>,
) -> Option<Vec<u8>> {
    let req = Message::parse(invite, true).ok()?;
    let cseq = req.cseq().ok()?;
    let mut b = RequestBuilder::new(&method, req.request_uri()?);
    b.header("Via", req.header(HeaderName::Via)?);
    for route in req.all(HeaderName::Route) {
        b.header("Route", route);
    }
    b.header("Max-Forwards", 70)
        .header("From", req.header(HeaderName::From)?)
        .header("To", to.or(req.header(HeaderName::To))?)
        .header("Call-ID", req.header(HeaderName::CallId)?)
        .header("CSeq", format_args!("{} {method}", cseq.seq));
    if let Some(reason) = reason {
        b.header("Reason", reason);
    }
    Some(b.finish(None))
}
