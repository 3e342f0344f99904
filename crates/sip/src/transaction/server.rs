//! Server transactions (RFC 3261 §17.2, with the INVITE "Accepted" state of RFC 6026).

use super::timer::{Armed, Slot};
use super::{key, Incoming, Io, Key, Life, Peer, ServerTxId, Timers, TxEvent, Wire};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum State {
    /// No response yet (non-INVITE "Trying"; an INVITE starts in Proceeding).
    Trying,
    Proceeding,
    /// Final (non-2xx for INVITE) sent; timer G retransmits it until the ACK, H gives up.
    Completed,
    /// INVITE only: ACK received, timer I absorbs ACK retransmissions.
    Confirmed,
    /// INVITE only: 2xx sent. Lives for timer L to absorb INVITE retransmissions; `retransmit`
    /// while the layer re-sends the 2xx itself and no ACK has come (§13.3.1.4).
    Accepted {
        retransmit: bool,
    },
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::Trying => "Trying",
            State::Proceeding => "Proceeding",
            State::Completed => "Completed",
            State::Confirmed => "Confirmed",
            State::Accepted { .. } => "Accepted",
        }
    }
}

pub(super) struct ServerTxn {
    pub key: Key,
    /// INVITE only: CSeq + Call-ID, to match the ACK for a 2xx, which has its own branch.
    pub ack_key: Option<Key>,
    pub state: State,
    pub peer: Peer,
    /// The latest response, re-sent on request retransmissions and by timer G. Dropped once an
    /// ACK proves a 2xx arrived: the transaction lingers 32 s more (timer L) only to absorb late
    /// INVITE retransmissions, and a flood's 2xx bodies held that long were most of the memory
    /// its lingering transactions kept.
    last: Option<Wire>,
    interval: Duration,
    pub timers: Armed,
}

impl ServerTxn {
    pub fn new(id: u64, key: Key, ack_key: Option<Key>, peer: Peer) -> ServerTxn {
        ServerTxn {
            state: if ack_key.is_some() {
                State::Proceeding
            } else {
                State::Trying
            },
            key,
            ack_key,
            peer,
            last: None,
            interval: Duration::ZERO,
            timers: Armed::new(id),
        }
    }

    fn is_invite(&self) -> bool {
        self.ack_key.is_some()
    }

    fn udp(&self) -> bool {
        !self.peer.transport.is_reliable()
    }

    /// A retransmitted request: answer it with the latest response, if any yet.
    pub fn retransmission(&self, io: &mut Io) {
        if let Some(bytes) = &self.last {
            io.send(self.peer, bytes.clone());
        }
    }

    /// An ACK for this INVITE: `same_branch` when it matched by the transaction key (ACK for a
    /// non-2xx), else it matched by Call-ID and CSeq (ACK for a 2xx, a new transaction).
    pub fn ack(
        &mut self,
        same_branch: bool,
        now: Instant,
        t: &Timers,
        io: &mut Io,
    ) -> (Incoming, Life) {
        match self.state {
            State::Accepted { .. } => {
                self.state = State::Accepted { retransmit: false };
                self.timers.disarm(Slot::Retransmit);
                self.last = None;
                (Incoming::Ack, Life::Live)
            }
            _ if !same_branch => (Incoming::Ack, Life::Live),
            State::Completed => {
                self.state = State::Confirmed;
                self.timers.disarm(Slot::Retransmit);
                let i = if self.udp() { t.t4 } else { Duration::ZERO };
                (
                    Incoming::AckNon2xx,
                    self.timers.end_after(&mut io.queue, i, now),
                )
            }
            _ => (Incoming::AckNon2xx, Life::Live),
        }
    }

    /// The TU's response. Anything after the final is dropped, except a repeated 2xx to INVITE
    /// (a TU that retransmits its 2xx itself).
    pub fn respond(
        &mut self,
        status: u16,
        bytes: Vec<u8>,
        now: Instant,
        t: &Timers,
        reliable_2xx: bool,
        io: &mut Io,
    ) -> Life {
        let success = (200..300).contains(&status);
        match self.state {
            State::Trying | State::Proceeding if (100..700).contains(&status) => {}
            State::Accepted { .. } if success => {
                let bytes = Wire::from(bytes);
                io.send(self.peer, bytes.clone());
                self.last = Some(bytes);
                return Life::Live;
            }
            _ => return Life::Live,
        }
        // A final kept for timer J, or until the ACK of a non-2xx, lingers with the keys: in the
        // pool. A 2xx to INVITE goes at its ACK and a provisional at the final: on the heap.
        let bytes = if status >= 300 || (status >= 200 && !self.is_invite()) {
            io.pool.put(&bytes)
        } else {
            Wire::from(bytes)
        };
        io.send(self.peer, bytes.clone());
        self.last = Some(bytes);
        if status < 200 {
            self.state = State::Proceeding;
            return Life::Live;
        }
        if !self.is_invite() {
            self.state = State::Completed;
            let j = if self.udp() { t.t64() } else { Duration::ZERO };
            return self.timers.end_after(&mut io.queue, j, now);
        }
        // Timer G for a non-2xx over UDP, or the UAS core's 2xx retransmission on any
        // transport (§13.3.1.4: there may be UDP hops further on).
        let retransmit = if success { reliable_2xx } else { self.udp() };
        self.state = if success {
            State::Accepted { retransmit }
        } else {
            State::Completed
        };
        if retransmit {
            self.interval = t.t1;
            self.timers.arm(&mut io.queue, Slot::Retransmit, now + t.t1);
        }
        // Timer H (non-2xx) or L (2xx, RFC 6026); both 64*T1.
        self.timers.end_after(&mut io.queue, t.t64(), now)
    }

    pub fn on_timer(&mut self, id: u64, slot: Slot, at: Instant, t: &Timers, io: &mut Io) -> Life {
        if slot == Slot::Retransmit {
            self.retransmission(io);
            self.interval = t.backoff(self.interval);
            self.timers
                .arm(&mut io.queue, Slot::Retransmit, at + self.interval);
            return Life::Live;
        }
        match self.state {
            State::Completed if self.is_invite() => {
                io.events.push_back(TxEvent::ServerNoAck(ServerTxId(id)));
            }
            State::Accepted { retransmit: true } => {
                let (cseq, call_id) = key::split_ack(self.ack_key.as_deref().unwrap_or(""));
                io.events.push_back(TxEvent::AckTimeout {
                    call_id: call_id.to_string(),
                    cseq,
                });
            }
            _ => {}
        }
        Life::Dead
    }
}
