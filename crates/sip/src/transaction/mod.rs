//! The RFC 3261 §17 transaction layer, sans-IO: the caller feeds parsed messages and the current
//! `Instant` in, and drains datagrams to send (`poll_transmit`), events for the transaction user
//! (`poll_event`) and the next deadline (`poll_timeout`). No sockets, no clock reads, so every
//! timer is testable with injected time.
//!
//! Responses go back to the address the request came from (symmetric response routing, as
//! RFC 3581 asks for and as NATed phones need), over the transport it came on.

mod client;
mod key;
mod pool;
mod server;
mod sharded;
#[cfg(test)]
mod tests;
mod timer;

use crate::message::Message;
use crate::method::Method;
use client::ClientTxn;
use pool::{Key, Pool};
pub use pool::{Pooled, Wire};
use server::ServerTxn;
use sharded::Sharded;
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use timer::TimerQueue;

/// RFC 3261 timer base values (§17.1.1.1, table 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timers {
    /// Round-trip estimate: first retransmission interval (500 ms).
    pub t1: Duration,
    /// Cap on the retransmission interval of non-INVITE requests and INVITE responses (4 s).
    pub t2: Duration,
    /// How long a message may stay in the network (5 s).
    pub t4: Duration,
}

impl Default for Timers {
    fn default() -> Timers {
        Timers {
            t1: Duration::from_millis(500),
            t2: Duration::from_secs(4),
            t4: Duration::from_secs(5),
        }
    }
}

impl Timers {
    /// Timers B, F, H, J, L and M, and the give-up time of 2xx retransmission.
    fn t64(&self) -> Duration {
        self.t1 * 64
    }

    /// Next interval of timers E and G and of the 2xx retransmission: doubling, capped at T2.
    fn backoff(&self, interval: Duration) -> Duration {
        (interval * 2).min(self.t2)
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Transport {
    Udp,
    Tcp,
    /// TCP with TLS (RFC 3261 §26): framed like TCP.
    Tls,
    /// WebSocket over TCP (RFC 7118): a SIP message per WebSocket message.
    Ws,
    /// WebSocket over TLS.
    Wss,
}

impl Transport {
    /// Reliable transports get no retransmissions and zero-length D, I, J and K.
    pub fn is_reliable(self) -> bool {
        self != Transport::Udp
    }

    /// Whether messages go over a connection (TCP, TLS or a WebSocket) rather than datagrams.
    pub fn is_stream(self) -> bool {
        self != Transport::Udp
    }

    /// Whether it is a WebSocket: only the connection the peer opened reaches it (RFC 7118 §5),
    /// strowger never dials one.
    pub fn is_websocket(self) -> bool {
        matches!(self, Transport::Ws | Transport::Wss)
    }
}

/// Where a message came from or goes to.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Peer {
    pub transport: Transport,
    pub addr: SocketAddr,
}

/// A server transaction. Ids are never reused, so a stale id is simply ignored.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct ServerTxId(u64);

/// A client transaction. Ids are never reused, so a stale id is simply ignored.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct ClientTxId(u64);

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum TxId {
    Server(ServerTxId),
    Client(ClientTxId),
}

/// What the transaction user must do with an incoming request.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Incoming {
    /// A new server transaction: the TU handles the request and answers with `respond`.
    New(ServerTxId),
    /// A retransmission, absorbed; the latest response (if any) was queued again.
    Retransmission,
    /// The ACK for a non-2xx final, absorbed by its INVITE transaction.
    AckNon2xx,
    /// An ACK no transaction absorbs (ACK for a 2xx): the TU handles it in its dialog. If it
    /// matches a 2xx this layer retransmits, that retransmission has stopped.
    Ack,
    /// A new CANCEL transaction and the INVITE transaction it targets (`None`: answer 481). The
    /// TU answers 200 to the CANCEL and 487 to the INVITE (dropped if it already has a final).
    Cancel {
        cancel: ServerTxId,
        invite: Option<ServerTxId>,
    },
    /// No usable Via or CSeq (the request skipped validation): drop it.
    Invalid,
}

/// A datagram or stream write to perform. Retransmissions share the stored bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    pub to: Peer,
    pub bytes: Wire,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxEvent {
    /// Timer B or F: no final response; the TU acts as if it received 408.
    Timeout(ClientTxId),
    /// Timer H: the ACK for a non-2xx final never came.
    ServerNoAck(ServerTxId),
    /// A 2xx to INVITE was retransmitted for 64*T1 without an ACK: the TU ends the session
    /// with a BYE (§13.3.1.4).
    AckTimeout { call_id: String, cseq: u32 },
    /// The transaction is gone; its id is stale from now on.
    Terminated(TxId),
}

/// Whether a transaction goes on after handling something.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Life {
    Live,
    Dead,
}

/// Output queues, the timer queue and the pool of what lingers, handed to a transaction while
/// the maps are borrowed.
#[derive(Default)]
struct Io {
    queue: TimerQueue,
    transmits: VecDeque<Transmit>,
    events: VecDeque<TxEvent>,
    pool: Pool,
}

impl Io {
    fn send(&mut self, to: Peer, bytes: Wire) {
        self.transmits.push_back(Transmit { to, bytes });
    }
}

/// Timers one `Transactions::handle_timeout` fires at most (a few milliseconds of work).
pub const TIMERS_PER_CALL: usize = 1024;

/// Every transaction of one SIP endpoint.
pub struct Transactions {
    timers: Timers,
    reliable_2xx: bool,
    next_id: u64,
    /// Transactions and their keys, in sharded maps: completed non-INVITE server transactions
    /// linger for timer J (32 s), so a flood of calls leaves many, and no insert may stall the
    /// worker by resizing a map of them all at once (see [`sharded`]).
    servers: Sharded<u64, ServerTxn>,
    clients: Sharded<u64, ClientTxn>,
    server_keys: Sharded<Key, u64>,
    client_keys: Sharded<Key, u64>,
    /// Call-ID + CSeq of INVITE server transactions, for the ACK to a 2xx.
    ack_keys: Sharded<Key, u64>,
    io: Io,
    /// Key buffer reused by every lookup.
    scratch: String,
}

impl Transactions {
    /// A zero T1 would make retransmission timers spin, so it is raised to 1 ms.
    pub fn new(mut timers: Timers) -> Self {
        timers.t1 = timers.t1.max(Duration::from_millis(1));
        Transactions {
            timers,
            reliable_2xx: true,
            next_id: 0,
            servers: Sharded::default(),
            clients: Sharded::default(),
            server_keys: Sharded::default(),
            client_keys: Sharded::default(),
            ack_keys: Sharded::default(),
            io: Io::default(),
            scratch: String::with_capacity(256),
        }
    }

    /// Whether the layer retransmits a 2xx to INVITE until its ACK (default: yes). Off, the TU
    /// does it and re-sends through `respond` while the transaction is Accepted.
    pub fn with_reliable_2xx(mut self, on: bool) -> Self {
        self.reliable_2xx = on;
        self
    }

    /// Whether a server transaction already holds this request (a retransmission), without
    /// creating one: lets an overloaded core refuse new requests statelessly.
    pub fn has_server(&mut self, msg: &Message) -> bool {
        msg.method().is_some_and(|m| {
            key::server(msg, m, &mut self.scratch)
                && self.server_keys.contains_key(self.scratch.as_str())
        })
    }

    /// A request arrived (already validated with `sip::validate`).
    pub fn on_request(&mut self, msg: &Message, from: Peer, now: Instant) -> Incoming {
        let incoming = match msg.method() {
            None => Incoming::Invalid,
            Some(Method::Ack) => self.on_ack(msg, now),
            Some(method) => self.on_non_ack(msg, method, from),
        };
        self.prune();
        incoming
    }

    fn on_ack(&mut self, msg: &Message, now: Instant) -> Incoming {
        if !key::server(msg, &Method::Invite, &mut self.scratch) {
            return Incoming::Invalid;
        }
        let (id, same_branch) = match self.server_keys.get(self.scratch.as_str()) {
            Some(&id) => (id, true),
            None if key::ack(msg, &mut self.scratch) => {
                match self.ack_keys.get(self.scratch.as_str()) {
                    Some(&id) => (id, false),
                    None => return Incoming::Ack,
                }
            }
            None => return Incoming::Ack,
        };
        let Some(txn) = self.servers.get_mut(&id) else {
            return Incoming::Ack;
        };
        let (incoming, life) = txn.ack(same_branch, now, &self.timers, &mut self.io);
        self.end_if(id, life);
        incoming
    }

    fn on_non_ack(&mut self, msg: &Message, method: &Method, from: Peer) -> Incoming {
        if !key::server(msg, method, &mut self.scratch) {
            return Incoming::Invalid;
        }
        if let Some(txn) = self
            .server_keys
            .get(self.scratch.as_str())
            .and_then(|id| self.servers.get(id))
        {
            txn.retransmission(&mut self.io);
            return Incoming::Retransmission;
        }
        let key = self.io.pool.key(&self.scratch);
        let ack_key = (*method == Method::Invite && key::ack(msg, &mut self.scratch))
            .then(|| self.io.pool.key(&self.scratch));
        let id = self.next_id();
        self.server_keys.insert(key.clone(), id);
        if let Some(k) = &ack_key {
            self.ack_keys.insert(k.clone(), id);
        }
        self.servers
            .insert(id, ServerTxn::new(id, key, ack_key, from));
        if *method != Method::Cancel {
            return Incoming::New(ServerTxId(id));
        }
        let invite = key::server(msg, &Method::Invite, &mut self.scratch)
            .then(|| self.server_keys.get(self.scratch.as_str()))
            .flatten()
            .map(|&id| ServerTxId(id));
        Incoming::Cancel {
            cancel: ServerTxId(id),
            invite,
        }
    }

    /// The TU's response on a server transaction, already built (`ResponseBuilder`). The layer
    /// sends it, keeps it for retransmission and runs the timers of the state it leads to.
    pub fn respond(&mut self, tx: ServerTxId, status: u16, bytes: Vec<u8>, now: Instant) {
        if let Some(txn) = self.servers.get_mut(&tx.0) {
            let life = txn.respond(
                status,
                bytes,
                now,
                &self.timers,
                self.reliable_2xx,
                &mut self.io,
            );
            self.end_if(tx.0, life);
        }
        self.prune();
    }

    /// Starts a client transaction for a request the TU built (top Via with a z9hG4bK branch).
    /// INVITE runs timers A, B and D; anything else E, F and K. An ACK is no transaction: send
    /// it with `send_stateless`. A request without branch or CSeq matches no response and
    /// times out.
    pub fn send_request(&mut self, bytes: Vec<u8>, to: Peer, now: Instant) -> ClientTxId {
        let bytes = Wire::from(bytes);
        let (key, invite) = self.parsed_key(&bytes);
        self.start_client(bytes, to, key, invite, now)
    }

    /// `send_request` for a request whose top Via branch and method the TU wrote itself (a
    /// proxy forwarding): the key is made from them, without parsing the bytes again.
    pub fn send_request_keyed(
        &mut self,
        bytes: Vec<u8>,
        to: Peer,
        branch: &str,
        method: &Method,
        now: Instant,
    ) -> ClientTxId {
        let key = key::client_of(branch, method, &mut self.scratch)
            .then(|| self.io.pool.key(&self.scratch));
        self.start_client(bytes.into(), to, key, *method == Method::Invite, now)
    }

    fn start_client(
        &mut self,
        bytes: Wire,
        to: Peer,
        key: Option<Key>,
        invite: bool,
        now: Instant,
    ) -> ClientTxId {
        let id = self.insert_client(bytes, to, key, invite);
        if let Some(txn) = self.clients.get_mut(&id) {
            txn.start(now, &self.timers, &mut self.io);
        }
        self.prune();
        ClientTxId(id)
    }

    /// Queues a message outside any transaction: the ACK for a 2xx, or a stateless response.
    pub fn send_stateless(&mut self, bytes: Vec<u8>, to: Peer) {
        self.io.send(to, bytes.into());
    }

    /// The client key of a request the layer holds as bytes, and whether it is an INVITE.
    fn parsed_key(&mut self, bytes: &[u8]) -> (Option<Key>, bool) {
        let parsed = Message::parse(bytes, true).ok();
        let invite = parsed
            .as_ref()
            .is_some_and(|m| m.method() == Some(&Method::Invite));
        let key = parsed
            .filter(|m| key::client(m, &mut self.scratch))
            .map(|_| self.io.pool.key(&self.scratch));
        (key, invite)
    }

    fn insert_client(&mut self, bytes: Wire, to: Peer, key: Option<Key>, invite: bool) -> u64 {
        let id = self.next_id();
        if let Some(k) = &key {
            self.client_keys.insert(k.clone(), id);
        }
        self.clients
            .insert(id, ClientTxn::new(id, key, invite, bytes, to));
        id
    }

    /// A response arrived. `Some((tx, first_time))` when the TU should see it: provisionals,
    /// finals, and retransmitted 2xx to INVITE (`first_time` false: re-send the ACK). `None`
    /// when absorbed or stray. `first_time` is false for every 2xx after the first, a second
    /// fork's included: a TU that cares about forks compares To tags.
    pub fn on_response(&mut self, msg: &Message, now: Instant) -> Option<(ClientTxId, bool)> {
        let status = msg.status()?;
        if !key::client(msg, &mut self.scratch) {
            return None;
        }
        let id = *self.client_keys.get(self.scratch.as_str())?;
        let txn = self.clients.get_mut(&id)?;
        let (report, life) = txn.on_response(msg, status, now, &self.timers, &mut self.io);
        if let (Some(cancel), Some(_)) = (txn.cancel, report) {
            self.release_cancel(id, cancel, status, now);
        }
        self.end_if(id, life);
        self.prune();
        report.map(|first| (ClientTxId(id), first))
    }

    /// A CANCEL waiting for a provisional goes out with it, and is moot after a final.
    fn release_cancel(&mut self, invite: u64, cancel: u64, status: u16, now: Instant) {
        if !self
            .clients
            .get(&cancel)
            .is_some_and(|c| c.state == client::State::Deferred)
        {
            return;
        }
        if status < 200 {
            self.start_cancel(invite, cancel, now);
        } else {
            self.end_if(cancel, Life::Dead);
        }
    }

    /// Sends a CANCEL, and gives its INVITE 64*T1 for a final (`ClientTxn::await_final`).
    fn start_cancel(&mut self, invite: u64, cancel: u64, now: Instant) {
        let (t, io) = (&self.timers, &mut self.io);
        if let Some(c) = self.clients.get_mut(&cancel) {
            c.start(now, t, io);
        }
        if let Some(i) = self.clients.get_mut(&invite) {
            i.await_final(now, t, io);
        }
    }

    /// CANCELs a client INVITE (§9.1). The CANCEL goes out once a provisional has arrived, or
    /// at once if one has; it is dropped if a final arrives first. From the CANCEL on, the
    /// INVITE waits 64*T1 for its final (487, or an answer that crossed the CANCEL), then
    /// ends with `TxEvent::Timeout`. `None` when the INVITE is unknown or already has a final.
    /// Asking again returns the same CANCEL.
    pub fn cancel(&mut self, invite: ClientTxId, now: Instant) -> Option<ClientTxId> {
        self.cancel_because(invite, None, now)
    }

    /// `cancel` with a Reason header (RFC 3326), such as why a fork stops ringing.
    pub fn cancel_because(
        &mut self,
        invite: ClientTxId,
        reason: Option<&str>,
        now: Instant,
    ) -> Option<ClientTxId> {
        let txn = self.clients.get(&invite.0).filter(|t| t.invite)?;
        if let Some(id) = txn.cancel {
            return Some(ClientTxId(id));
        }
        let state = txn.state;
        if !matches!(state, client::State::Calling | client::State::Proceeding) {
            return None;
        }
        let bytes = Wire::from(client::derive(
            txn.request()?,
            Method::Cancel,
            None,
            reason,
        )?);
        let peer = txn.peer;
        let (key, is_invite) = self.parsed_key(&bytes);
        let id = self.insert_client(bytes, peer, key, is_invite);
        if let Some(txn) = self.clients.get_mut(&invite.0) {
            txn.cancel = Some(id);
        }
        if state == client::State::Proceeding {
            self.start_cancel(invite.0, id, now);
        }
        self.prune();
        Some(ClientTxId(id))
    }

    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.io.transmits.pop_front()
    }

    pub fn poll_event(&mut self) -> Option<TxEvent> {
        self.io.events.pop_front()
    }

    /// The next deadline; call `handle_timeout` then.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.io.queue.next().map(|(at, _, _)| at)
    }

    /// Fires the timers due at `now`, at most [`TIMERS_PER_CALL`] of them: a backlog (a flood's
    /// transactions all ending 32 s later) is swept in slices, and the caller's next
    /// `poll_timeout` is already due for the rest, so its media passes run in between.
    pub fn handle_timeout(&mut self, now: Instant) {
        for _ in 0..TIMERS_PER_CALL {
            let Some((at, id, slot)) = self.io.queue.pop_due(now) else {
                break;
            };
            let (t, io) = (&self.timers, &mut self.io);
            let life = if let Some(s) = self.servers.get_mut(&id).filter(|s| s.timers.is(slot, at))
            {
                s.timers.disarm(slot);
                s.on_timer(id, slot, at, t, io)
            } else if let Some(c) = self.clients.get_mut(&id).filter(|c| c.timers.is(slot, at)) {
                c.timers.disarm(slot);
                c.on_timer(id, slot, at, t, io)
            } else {
                continue;
            };
            self.end_if(id, life);
        }
        self.prune();
    }

    /// Live transactions.
    pub fn len(&self) -> usize {
        self.servers.len() + self.clients.len()
    }

    /// Live transactions by kind, counted when asked (O(n)): "server INVITE Proceeding",
    /// "client BYE Calling", with " (no timer)" for one that waits on its user or peer alone.
    /// What an operator reads when transactions stay without calls (`strowger ctl show stats`).
    pub fn kinds(&self) -> BTreeMap<String, usize> {
        let mut kinds = BTreeMap::new();
        let mut count = |side: &str, method: &str, state: &str, idle: bool| {
            let idle = if idle { " (no timer)" } else { "" };
            *kinds
                .entry(format!("{side} {method} {state}{idle}"))
                .or_default() += 1;
        };
        for s in self.servers.values() {
            let method = key::server_method(&s.key);
            count("server", method, s.state.name(), s.timers.idle());
        }
        for c in self.clients.values() {
            let method = match (&c.key, c.invite) {
                (Some(k), _) => key::client_method(k),
                (None, true) => "INVITE",
                (None, false) => "unkeyed",
            };
            count("client", method, c.state.name(), c.timers.idle());
        }
        kinds
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Drops stale timer entries at the head, so `poll_timeout` reports a real deadline.
    fn prune(&mut self) {
        while let Some((at, id, slot)) = self.io.queue.next() {
            let live = match self.servers.get(&id) {
                Some(s) => s.timers.is(slot, at),
                None => self.clients.get(&id).is_some_and(|c| c.timers.is(slot, at)),
            };
            if live {
                return;
            }
            self.io.queue.pop();
        }
    }

    fn end_if(&mut self, id: u64, life: Life) {
        if life == Life::Live {
            return;
        }
        if let Some(txn) = self.servers.remove(&id) {
            unmap(&mut self.server_keys, Some(&txn.key), id);
            unmap(&mut self.ack_keys, txn.ack_key.as_ref(), id);
            let tx = TxId::Server(ServerTxId(id));
            self.io.events.push_back(TxEvent::Terminated(tx));
        } else if let Some(txn) = self.clients.remove(&id) {
            unmap(&mut self.client_keys, txn.key.as_ref(), id);
            let tx = TxId::Client(ClientTxId(id));
            self.io.events.push_back(TxEvent::Terminated(tx));
            // A CANCEL never sent dies with its INVITE.
            if let Some(cancel) = txn.cancel {
                if self
                    .clients
                    .get(&cancel)
                    .is_some_and(|c| c.state == client::State::Deferred)
                {
                    self.end_if(cancel, Life::Dead);
                }
            }
        }
    }
}

/// Removes a key only if it still maps to this transaction (a reused branch may have taken it).
fn unmap(map: &mut Sharded<Key, u64>, key: Option<&Key>, id: u64) {
    if let Some(key) = key {
        if map.get(&**key) == Some(&id) {
            map.remove(&**key);
        }
    }
}
