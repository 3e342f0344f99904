//! A simulated network for strowger's call engine: several stations — strowger switches (one or
//! more `Node`s, its workers) and scripted SIP user agents (`Ua`) — addressed by `SocketAddr`
//! (IPv4 or IPv6), exchanging datagrams with a per-link delay, loss and reordering drawn from a
//! seeded RNG, in virtual time that only `Net::run_for` / `Net::run_until` move. Nothing sleeps
//! and nothing touches a socket. With one seed the net makes the same choices (what is lost,
//! delayed, reordered) for the same traffic; the engine still draws its tags, branches and
//! Call-IDs from a generator of its own, so tests assert on behaviour, never on those values.
//!
//! Shaped after quinn-proto's test `Pair`: stations are sans-IO; the net moves their datagrams
//! and wakes them at their deadlines.
#![allow(dead_code, unused_imports)]

pub mod node;
pub mod ua;

pub use node::{MemStore, Node, Shared};
pub use ua::{Policy, State, Ua};

use media::Law;
use sip::Message;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// A datagram on the network: SIP (or a keep-alive) or media.
#[derive(Clone, Debug)]
pub struct Packet {
    pub from: SocketAddr,
    pub to: SocketAddr,
    pub bytes: Vec<u8>,
    /// RTP or RTCP rather than signalling.
    pub media: bool,
}

impl Packet {
    pub fn sip(from: SocketAddr, to: SocketAddr, bytes: Vec<u8>) -> Packet {
        Packet {
            from,
            to,
            bytes,
            media: false,
        }
    }

    pub fn media(from: SocketAddr, to: SocketAddr, bytes: Vec<u8>) -> Packet {
        Packet {
            from,
            to,
            bytes,
            media: true,
        }
    }
}

/// What a link does to the datagrams on it (each direction alike).
#[derive(Clone, Copy, Debug)]
pub struct Link {
    pub delay: Duration,
    /// Up to this much more delay, uniformly.
    pub jitter: Duration,
    /// Probability a datagram is lost.
    pub loss: f64,
    /// Probability a datagram is held back long enough for later ones to overtake it.
    pub reorder: f64,
}

impl Default for Link {
    fn default() -> Link {
        Link {
            delay: Duration::from_millis(5),
            jitter: Duration::ZERO,
            loss: 0.0,
            reorder: 0.0,
        }
    }
}

/// A SIP datagram the net carried (or lost), for tests to look at.
#[derive(Clone, Debug)]
pub struct Trace {
    pub sent: Instant,
    pub from: SocketAddr,
    pub to: SocketAddr,
    pub bytes: Vec<u8>,
    pub lost: bool,
}

impl Trace {
    pub fn msg(&self) -> Option<Message> {
        Message::parse(&self.bytes, true).ok()
    }

    /// The request method or status of a SIP message ("INVITE", "200"), or "" for other bytes.
    pub fn what(&self) -> String {
        match self.msg() {
            Some(m) => match (m.method(), m.status()) {
                (Some(method), _) => method.to_string(),
                (None, Some(s)) => s.to_string(),
                _ => String::new(),
            },
            None => String::new(),
        }
    }
}

/// A strowger switch: its workers share its addresses (as the real process's do), and each
/// datagram is handed to the worker that owns it.
pub struct Switch {
    pub workers: Vec<Node>,
    pub shared: Shared,
    /// Deliver every SIP datagram as having waited too long in the socket.
    pub late: bool,
}

impl Switch {
    /// The single worker of a one-worker switch.
    pub fn node(&mut self) -> &mut Node {
        &mut self.workers[0]
    }

    pub fn cdrs(&self) -> Vec<serde_json::Value> {
        self.workers
            .iter()
            .flat_map(|w| w.cdrs().to_vec())
            .collect()
    }

    pub fn logs(&self) -> Vec<String> {
        self.workers
            .iter()
            .flat_map(|w| w.logs().to_vec())
            .collect()
    }

    pub fn active_calls(&self) -> usize {
        self.workers.iter().map(Node::active_calls).sum()
    }

    /// What `/metrics` would show of these workers (no CPU time or store here).
    pub fn scrape(&mut self) -> String {
        self.scrape_nodes(&[])
    }

    /// `scrape` with the dispatch nodes labelled (set name, node URI), as configured.
    pub fn scrape_nodes(&mut self, nodes: &[(&str, &str)]) -> String {
        let workers = self.workers.iter_mut().map(|w| (w.metrics(), 0.0));
        let scrape = switch::metrics::Scrape {
            workers: workers.collect(),
            nodes: nodes
                .iter()
                .map(|(s, n)| (s.to_string(), n.to_string()))
                .collect(),
            ..Default::default()
        };
        scrape.render()
    }

    pub fn deliver(&mut self, p: Packet, now: Instant) {
        let late = self.late;
        let n = self.workers.len();
        if p.media {
            if let Some(w) = self.workers.iter_mut().find(|w| w.has_media_addr(p.to)) {
                w.deliver_rtp(&p.bytes, p.from, p.to, now);
            }
            return;
        }
        // The kernel hands a source address's datagrams to one worker (here: by port), whose
        // guard reads them or drops them before the owner gets them.
        let first = usize::from(p.from.port()) % n;
        let pass = self.workers[first].admit(p.from, now);
        if pass {
            let pins = &self.shared.rendezvous.pins;
            let w = node::owner_of(&p.bytes, p.from, n, pins);
            self.workers[w].deliver_admitted(&p.bytes, p.from, p.to, late, now);
            self.hand_offs(now);
        }
        // A ban holds on every worker, as the shell broadcasts it.
        for w in 0..n {
            for (source, until) in self.workers[w].take_bans() {
                for (i, other) in self.workers.iter_mut().enumerate() {
                    if i != w {
                        other.ban(source, until);
                    }
                }
            }
        }
    }

    /// A SIP message from `peer` over a connection (TLS, a WebSocket), to the worker the
    /// shell's dispatch would give it, then on to another if that one hands it off.
    pub fn deliver_over(&mut self, text: &str, peer: sip::transaction::Peer, now: Instant) {
        let pins = &self.shared.rendezvous.pins;
        let w = node::owner_of(text.as_bytes(), peer.addr, self.workers.len(), pins);
        let msg = Message::parse(text.as_bytes(), false).expect("a SIP message");
        let local = self.workers[w].addrs()[0];
        self.workers[w].deliver_msg(msg, peer, local, false, now);
        self.hand_offs(now);
    }

    /// New calls handed from one worker to another so far.
    pub fn handed_off(&self) -> usize {
        self.workers.iter().map(Node::handed_off).sum()
    }

    /// New calls and transfer messages a worker handed to another reach it, as through its
    /// inbox.
    fn hand_offs(&mut self, now: Instant) {
        loop {
            let handed: Vec<_> = self
                .workers
                .iter_mut()
                .flat_map(Node::take_handoffs)
                .collect();
            let crossings: Vec<_> = self
                .workers
                .iter_mut()
                .flat_map(Node::take_crossings)
                .collect();
            if handed.is_empty() && crossings.is_empty() {
                return;
            }
            for h in handed {
                self.workers[h.worker].deliver_msg(h.msg, h.peer, h.local, h.late, now);
            }
            for c in crossings {
                self.workers[c.worker].deliver_crossing(c, now);
            }
        }
    }

    fn advance(&mut self, now: Instant) {
        for w in &mut self.workers {
            w.advance(now);
        }
        self.hand_offs(now);
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.workers.iter().filter_map(Node::next_deadline).min()
    }

    pub fn drain(&mut self) -> Vec<Packet> {
        // What a worker tells the others (trunk servers found dead or alive) reaches them now.
        for w in 0..self.workers.len() {
            for (trunk, server, until) in self.workers[w].take_broadcasts() {
                for (o, other) in self.workers.iter_mut().enumerate() {
                    if o != w {
                        other.trunk_server(trunk, server, until);
                    }
                }
            }
        }
        // So do the voicemail boxes a worker changed.
        for w in 0..self.workers.len() {
            for (user, mailbox) in self.workers[w].take_boxes_changed() {
                for (o, other) in self.workers.iter_mut().enumerate() {
                    if o != w {
                        other.mailbox_changed(user.clone(), mailbox.clone());
                    }
                }
            }
        }
        self.workers.iter_mut().flat_map(Node::drain).collect()
    }
}

pub enum Station {
    Switch(Box<Switch>),
    Ua(Box<Ua>),
}

/// Which station.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Id(usize);

struct InFlight {
    at: Instant,
    seq: u64,
    packet: Packet,
}

impl PartialEq for InFlight {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for InFlight {}
impl PartialOrd for InFlight {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for InFlight {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// A rule that drops matching datagrams, `left` more times.
struct Drop {
    matches: Box<dyn Fn(&Packet) -> bool>,
    left: usize,
}

pub struct Net {
    pub now: Instant,
    pub start: Instant,
    rng: fastrand::Rng,
    media_rng: fastrand::Rng,
    stations: Vec<Station>,
    /// Every address a station receives on (SIP and, for agents, media).
    addrs: HashMap<SocketAddr, usize>,
    links: HashMap<(usize, usize), Link>,
    pub default_link: Link,
    queue: BinaryHeap<Reverse<InFlight>>,
    seq: u64,
    drops: Vec<Drop>,
    /// Every SIP (non-media) datagram sent, in order.
    pub trace: Vec<Trace>,
    /// SIP datagrams sent to an address no station has (or of another address family).
    pub undeliverable: Vec<Packet>,
    /// Media sent to an address no station has: when, from, to.
    pub media_undeliverable: Vec<(Instant, SocketAddr, SocketAddr)>,
    /// Datagrams to the addresses of a peer the test plays by hand (a browser, which no `Ua`
    /// is), kept for it to take (`Net::tap`).
    taps: HashMap<SocketAddr, Vec<Packet>>,
    /// The DNS switches created from now on resolve trunk hosts with (see `Shared::dns`).
    pub dns: HashMap<String, Vec<sip::transaction::Peer>>,
}

impl Net {
    pub fn new(seed: u64) -> Net {
        let now = Instant::now();
        Net {
            now,
            start: now,
            rng: fastrand::Rng::with_seed(seed),
            media_rng: fastrand::Rng::with_seed(seed ^ 0x6d_6564_6961),
            stations: Vec::new(),
            addrs: HashMap::new(),
            links: HashMap::new(),
            default_link: Link::default(),
            queue: BinaryHeap::new(),
            seq: 0,
            drops: Vec::new(),
            trace: Vec::new(),
            undeliverable: Vec::new(),
            media_undeliverable: Vec::new(),
            taps: HashMap::new(),
            dns: HashMap::new(),
        }
    }

    /// A strowger switch with `workers` workers listening on `addrs`, configured by `toml`
    /// (on top of the built-in defaults).
    pub fn switch(&mut self, toml: &str, addrs: &[&str], workers: usize) -> Id {
        self.switch_on(Shared::new(toml), addrs, workers)
    }

    /// `switch`, on the store of switch `other` (two nodes sharing a Redis).
    pub fn switch_sharing(&mut self, toml: &str, addrs: &[&str], workers: usize, other: Id) -> Id {
        let mut shared = Shared::new(toml);
        shared.store = self.sw(other).shared.store.clone();
        self.switch_on(shared, addrs, workers)
    }

    fn switch_on(&mut self, shared: Shared, addrs: &[&str], workers: usize) -> Id {
        let addrs: Vec<SocketAddr> = addrs.iter().map(|a| a.parse().unwrap()).collect();
        *shared.dns.lock().unwrap() = self.dns.clone();
        let id = self.stations.len();
        let base = 20000 + 2000 * id as u16;
        let nodes = (0..workers)
            .map(|w| {
                Node::starting_at(&shared, &addrs, w, workers, base + 500 * w as u16, self.now)
            })
            .collect();
        for a in &addrs {
            assert!(self.addrs.insert(*a, id).is_none(), "{a} taken");
        }
        self.stations.push(Station::Switch(Box::new(Switch {
            workers: nodes,
            shared,
            late: false,
        })));
        Id(id)
    }

    /// A user agent at `addr` for `user`.
    pub fn ua(&mut self, addr: &str, user: &str) -> Id {
        let ua = Ua::new(addr.parse().unwrap(), user);
        let id = self.stations.len();
        let rtcp = SocketAddr::new(ua.media.ip(), ua.media.port() + 1);
        for a in [ua.addr, ua.media, rtcp] {
            assert!(self.addrs.insert(a, id).is_none(), "{a} taken");
        }
        self.stations.push(Station::Ua(Box::new(ua)));
        Id(id)
    }

    /// Agent `ua` sends its RTP from `from` instead of the address its SDP names.
    pub fn send_rtp_from(&mut self, ua: Id, from: &str) {
        let from = addr(from);
        assert!(self.addrs.insert(from, ua.0).is_none(), "{from} taken");
        self.agent(ua).rtp_from = Some(from);
    }

    /// Agent `ua` takes its media at `media` (RTP, RTCP above) in the calls it makes or answers
    /// from now on; the old address stays its own.
    pub fn set_media(&mut self, ua: Id, media: &str) {
        let media = addr(media);
        let rtcp = SocketAddr::new(media.ip(), media.port() + 1);
        for a in [media, rtcp] {
            self.addrs.entry(a).or_insert(ua.0);
        }
        self.agent(ua).media = media;
    }

    /// Puts a datagram on the wire now, from an address no station owns (a scanner's).
    pub fn inject(&mut self, p: Packet) {
        let now = self.now;
        if let Some(Station::Switch(s)) = self.station_of(p.to).map(|i| &mut self.stations[i]) {
            s.deliver(p, now);
        }
        self.flush();
    }

    pub fn sw(&mut self, id: Id) -> &mut Switch {
        match &mut self.stations[id.0] {
            Station::Switch(s) => s,
            Station::Ua(_) => panic!("station {id:?} is a user agent"),
        }
    }

    pub fn agent(&mut self, id: Id) -> &mut Ua {
        match &mut self.stations[id.0] {
            Station::Ua(u) => u,
            Station::Switch(_) => panic!("station {id:?} is a switch"),
        }
    }

    /// The link between two stations (both directions).
    pub fn link(&mut self, a: Id, b: Id, link: Link) {
        self.links.insert((a.0, b.0), link);
        self.links.insert((b.0, a.0), link);
    }

    /// Drops the next `count` datagrams that match.
    pub fn drop_next(&mut self, count: usize, matches: impl Fn(&Packet) -> bool + 'static) {
        self.drops.push(Drop {
            matches: Box::new(matches),
            left: count,
        });
    }

    /// Agent `ua` calls `uri` through `next_hop`; returns the agent's call index.
    pub fn invite(&mut self, ua: Id, uri: &str, next_hop: &str) -> usize {
        self.invite_with(ua, uri, next_hop, &[])
    }

    pub fn invite_with(
        &mut self,
        ua: Id,
        uri: &str,
        next_hop: &str,
        extra: &[(&str, &str)],
    ) -> usize {
        let now = self.now;
        self.agent(ua).invite_with(uri, addr(next_hop), extra, now)
    }

    /// Agent `ua` presses `digit` in call `call` (RFC 4733, `Ua::dtmf`).
    pub fn dtmf(&mut self, ua: Id, call: usize, digit: char) {
        self.agent(ua).dtmf(call, digit);
    }

    pub fn bye(&mut self, ua: Id, call: usize) {
        let now = self.now;
        self.agent(ua).bye(call, now);
    }

    pub fn cancel(&mut self, ua: Id, call: usize) {
        let now = self.now;
        self.agent(ua).cancel(call, now);
    }

    pub fn reinvite(&mut self, ua: Id, call: usize, sdp: String) {
        let now = self.now;
        self.agent(ua).reinvite(call, sdp, now);
    }

    pub fn update(&mut self, ua: Id, call: usize, sdp: String) {
        let now = self.now;
        self.agent(ua).update(call, sdp, now);
    }

    pub fn refer(&mut self, ua: Id, call: usize, refer_to: &str) {
        let now = self.now;
        self.agent(ua).refer(call, refer_to, now);
    }

    pub fn info(&mut self, ua: Id, call: usize, content_type: &str, body: &str) {
        let now = self.now;
        self.agent(ua).info(call, content_type, body, now);
    }

    pub fn register(&mut self, ua: Id, registrar: &str, domain: &str, expires: u32) {
        let now = self.now;
        self.agent(ua)
            .register(addr(registrar), domain, expires, now);
    }

    /// Hangs up every call of switch `sw` (process shutdown).
    pub fn shutdown(&mut self, sw: Id) {
        let now = self.now;
        for w in &mut self.sw(sw).workers {
            w.shutdown(now);
        }
    }

    /// Switch `sw` takes configuration `toml` (one [`switch::Reload`] for all its workers).
    pub fn reload(&mut self, sw: Id, toml: &str) {
        let cfg = switch::config::Config::from_str(toml, "reload.toml").expect("valid config");
        self.reload_with(sw, switch::Reload::new(cfg));
    }

    /// Switch `sw`'s workers take reload `r`.
    pub fn reload_with(&mut self, sw: Id, r: switch::Reload) {
        let now = self.now;
        let r = std::sync::Arc::new(r);
        for w in &mut self.sw(sw).workers {
            w.reload(r.clone(), now);
        }
    }

    /// Switch `sw` drains: new calls are refused, calls in progress go on.
    pub fn drain_calls(&mut self, sw: Id) {
        let now = self.now;
        for w in &mut self.sw(sw).workers {
            w.start_draining(now);
        }
    }

    /// Virtual time since the net started.
    pub fn elapsed(&self) -> Duration {
        self.now - self.start
    }

    /// The station a datagram's address belongs to: exact for SIP addresses and agents' media,
    /// by IP and media port for switches.
    fn station_of(&self, addr: SocketAddr) -> Option<usize> {
        if let Some(&s) = self.addrs.get(&addr) {
            return Some(s);
        }
        self.stations.iter().position(|s| match s {
            Station::Switch(sw) => sw.workers.iter().any(|w| w.has_media_addr(addr)),
            Station::Ua(_) => false,
        })
    }

    /// Takes what every station sent and puts it on the wire.
    fn flush(&mut self) {
        for i in 0..self.stations.len() {
            let out = match &mut self.stations[i] {
                Station::Switch(s) => s.drain(),
                Station::Ua(u) => u.drain(),
            };
            for p in out {
                self.send(i, p);
            }
        }
    }

    /// Keeps what is sent to `addr` from now on for [`Net::take_tapped`].
    pub fn tap(&mut self, addr: SocketAddr) {
        self.taps.entry(addr).or_default();
    }

    /// What was sent to the tapped `addr` since the last take, in order.
    pub fn take_tapped(&mut self, addr: SocketAddr) -> Vec<Packet> {
        std::mem::take(self.taps.get_mut(&addr).expect("an address tapped"))
    }

    fn send(&mut self, from: usize, p: Packet) {
        if let Some(tapped) = self.taps.get_mut(&p.to) {
            tapped.push(p);
            return;
        }
        // No datagram crosses from IPv4 to IPv6 or back.
        let to = self
            .station_of(p.to)
            .filter(|_| p.from.is_ipv6() == p.to.is_ipv6());
        let Some(to) = to else {
            // Media for a leg that just closed is no surprise; signalling nobody gets is.
            if p.media {
                self.media_undeliverable.push((self.now, p.from, p.to));
            } else {
                self.undeliverable.push(p);
            }
            return;
        };
        let link = self
            .links
            .get(&(from, to))
            .copied()
            .unwrap_or(self.default_link);
        // Media draws from its own generator, so the signalling's fate depends on the
        // signalling alone (media timing, RTCP intervals, may vary with the engine's randomness).
        let rng = if p.media {
            &mut self.media_rng
        } else {
            &mut self.rng
        };
        let mut lost = link.loss > 0.0 && rng.f64() < link.loss;
        if let Some(d) = self
            .drops
            .iter_mut()
            .find(|d| d.left > 0 && (d.matches)(&p))
        {
            d.left -= 1;
            lost = true;
        }
        let rng = if p.media {
            &mut self.media_rng
        } else {
            &mut self.rng
        };
        let mut delay = link.delay + link.jitter.mul_f64(rng.f64());
        if link.reorder > 0.0 && rng.f64() < link.reorder {
            delay += link.delay * 4 + Duration::from_millis(40);
        }
        if !p.media {
            self.trace.push(Trace {
                sent: self.now,
                from: p.from,
                to: p.to,
                bytes: p.bytes.clone(),
                lost,
            });
        }
        if lost {
            return;
        }
        self.seq += 1;
        self.queue.push(Reverse(InFlight {
            at: self.now + delay,
            seq: self.seq,
            packet: p,
        }));
    }

    fn next_event(&self) -> Option<Instant> {
        let packet = self.queue.peek().map(|Reverse(f)| f.at);
        let stations = self.stations.iter().filter_map(|s| match s {
            Station::Switch(s) => s.next_deadline(),
            Station::Ua(u) => u.next_deadline(),
        });
        packet.into_iter().chain(stations).min()
    }

    /// Delivers what has arrived by `now` and wakes the stations whose deadlines passed.
    fn step(&mut self) {
        let now = self.now;
        while self.queue.peek().is_some_and(|Reverse(f)| f.at <= now) {
            let Reverse(f) = self.queue.pop().unwrap();
            let Some(to) = self.station_of(f.packet.to) else {
                continue;
            };
            match &mut self.stations[to] {
                Station::Switch(s) => s.deliver(f.packet, now),
                Station::Ua(u) => u.deliver(f.packet, now),
            }
            self.flush();
        }
        for s in &mut self.stations {
            match s {
                Station::Switch(s) => s.advance(now),
                Station::Ua(u) => u.advance(now),
            }
        }
        self.flush();
    }

    /// Runs until `pred` holds (true) or `limit` of virtual time passed (false).
    pub fn run_until(&mut self, limit: Duration, mut pred: impl FnMut(&mut Net) -> bool) -> bool {
        let end = self.now + limit;
        let mut spins = 0u32;
        loop {
            self.flush();
            if pred(self) {
                return true;
            }
            let next = self.next_event().map(|t| t.max(self.now));
            match next {
                Some(t) if t <= end => {
                    if t == self.now {
                        spins += 1;
                        assert!(
                            spins < 100_000,
                            "the net makes no progress at {:?}",
                            self.elapsed()
                        );
                    } else {
                        spins = 0;
                    }
                    self.now = t;
                    self.step();
                }
                _ => {
                    self.now = end;
                    self.step();
                    return pred(self);
                }
            }
        }
    }

    /// Runs for `d` of virtual time.
    pub fn run_for(&mut self, d: Duration) {
        self.run_until(d, |_| false);
    }

    /// SIP datagrams sent from `from` to `to` whose method or status is `what`.
    pub fn sent(&self, from: SocketAddr, to: SocketAddr, what: &str) -> Vec<&Trace> {
        self.trace
            .iter()
            .filter(|t| t.from == from && t.to == to && t.what() == what)
            .collect()
    }
}

/// The start of every test dialplan (tests/net's and tests/engine.rs's), a string literal for
/// `concat!`: 44444 plays the demo prompt, 5555 rings, 6666 answers and hangs up after a second.
macro_rules! basic_dialplan {
    () => {
        r#"
[dialplan]
default_context = "default"
[[dialplan.contexts.default.rules]]
exten = "44444"
steps = ["answer", "playback demo loop=true"]
[[dialplan.contexts.default.rules]]
exten = "5555"
steps = ["ringing", "wait 30"]
[[dialplan.contexts.default.rules]]
exten = "6666"
steps = ["answer", "wait 1", "hangup"]
"#
    };
}
pub(crate) use basic_dialplan;

/// A dialplan for the tests, appended to a configuration's other tables: `basic_dialplan!`,
/// 5556 sends a 183 and waits, 2XXX is bridged to `${bridge_target}`, 3XXX is bridged after a
/// 183 of strowger's own, 1XXX calls the phone registered as that user, 7XXX is bridged to
/// strowger's own address `${self}` (a loop).
pub const DIALPLAN: &str = concat!(
    basic_dialplan!(),
    r#"[[dialplan.contexts.default.rules]]
exten = "5556"
steps = ["progress", "wait 30"]
[[dialplan.contexts.default.rules]]
regex = "^2(\\d{3})$"
steps = ["bridge sip:${EXTEN}@${bridge_target} timeout=20"]
[[dialplan.contexts.default.rules]]
regex = "^3(\\d{3})$"
steps = ["progress", "bridge sip:${EXTEN}@${bridge_target} timeout=20"]
[[dialplan.contexts.default.rules]]
regex = "^1\\d{3}$"
steps = ["bridge user/${EXTEN} timeout=20"]
[[dialplan.contexts.default.rules]]
regex = "^7\\d{3}$"
steps = ["bridge sip:${EXTEN}@${self} timeout=20"]
"#
);

/// A configuration: `head` (tables other than the dialplan, e.g. `[general]`, `[vars]`) with
/// media timeouts off and the loopback addresses trusted (the agents call without credentials,
/// as a trunk does; a `[security]` table in `head` replaces that), then `DIALPLAN`.
pub fn config(head: &str) -> String {
    let rtp = if head.contains("[rtp]") {
        ""
    } else {
        "[rtp]\nmedia_timeout_s = 0\n"
    };
    let security = if head.contains("[security]") {
        ""
    } else {
        TRUST_LOOPBACK
    };
    format!("{rtp}{security}{head}\n{DIALPLAN}")
}

/// 20 ms of a `hz` tone in µ-law (a whole number of periods, so packets repeat seamlessly).
pub fn tone(hz: u32) -> Vec<u8> {
    (0..160)
        .map(|i| {
            let x = (std::f64::consts::TAU * f64::from(hz) * f64::from(i) / 8000.0).sin();
            Law::Pcmu.encode_sample((6000.0 * x) as i16)
        })
        .collect()
}

/// The amplitude of each of `freqs` in what `ua` hears during the next `d`.
pub fn hears(n: &mut Net, ua: Id, freqs: &[u32], d: Duration) -> Vec<f64> {
    let from = n.agent(ua).rtp_payloads.len();
    n.run_for(d);
    let pcm: Vec<f64> = n.agent(ua).rtp_payloads[from..]
        .iter()
        .flatten()
        .map(|&b| f64::from(Law::Pcmu.decode_sample(b)))
        .collect();
    assert!(
        pcm.len() as u128 > 8 * d.as_millis() * 9 / 10,
        "{ua:?} hears a stream"
    );
    freqs
        .iter()
        .map(|&hz| {
            // Goertzel.
            let w = std::f64::consts::TAU * f64::from(hz) / 8000.0;
            let (mut s1, mut s2) = (0.0, 0.0);
            for &x in &pcm {
                let s = x + 2.0 * w.cos() * s1 - s2;
                s2 = s1;
                s1 = s;
            }
            (s1 * s1 + s2 * s2 - 2.0 * w.cos() * s1 * s2).sqrt() * 2.0 / pcm.len() as f64
        })
        .collect()
}

/// Every agent on 127.0.0.0/8 and ::1 is a trusted peer: calls in the default context,
/// unchallenged.
pub const TRUST_LOOPBACK: &str = "[security]\ntrusted = [\"127.0.0.0/8\", \"::1\"]\n";

/// The switch's address in the IPv4 tests.
pub const SW: &str = "127.0.0.1:5060";
/// Alice's address (a caller) in the IPv4 tests.
pub const ALICE: &str = "127.0.0.1:5061";
/// Bob's address (a callee) in the IPv4 tests.
pub const BOB: &str = "127.0.0.1:5090";

/// A one-worker switch on `SW` whose 2XXX and 3XXX calls are bridged to `BOB` and 7XXX back to
/// itself; `head` adds configuration tables.
pub fn b2bua(n: &mut Net, head: &str) -> Id {
    n.switch(&b2bua_config(head), &[SW], 1)
}

/// The configuration `b2bua` gives a switch (for a reload that keeps it).
pub fn b2bua_config(head: &str) -> String {
    let toml = format!("{head}\n[vars]\nbridge_target = \"{BOB}\"\nself = \"{SW}\"\n");
    config(&toml)
}

/// `s` seconds.
pub fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// `ms` milliseconds.
pub fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// A socket address from text.
pub fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// 10 ms of delay and of jitter, 10 % loss and 10 % reordering.
pub const LOSSY: Link = Link {
    delay: Duration::from_millis(10),
    jitter: Duration::from_millis(10),
    loss: 0.10,
    reorder: 0.10,
};

/// A message's body as text.
pub fn body(m: &Message) -> String {
    String::from_utf8_lossy(m.body()).into_owned()
}

/// The statuses agent `ua` got for its INVITEs in call `c`.
pub fn invite_statuses(n: &mut Net, ua: Id, c: usize) -> Vec<u16> {
    n.agent(ua)
        .call(c)
        .responses_to("INVITE")
        .iter()
        .filter_map(|m| m.status())
        .collect()
}

/// The last response agent `ua` got to its `method` requests in call `c`.
pub fn last_response(n: &mut Net, ua: Id, c: usize, method: &str) -> Message {
    n.agent(ua)
        .call(c)
        .responses_to(method)
        .last()
        .map(|m| (*m).clone())
        .unwrap()
}

/// Whether agent `ua`'s call `c` is confirmed.
pub fn confirmed(ua: Id, c: usize) -> impl FnMut(&mut Net) -> bool {
    move |n| n.agent(ua).call(c).state == State::Confirmed
}

/// Whether agent `ua`'s call `c` has ended.
pub fn ended(ua: Id, c: usize) -> impl FnMut(&mut Net) -> bool {
    move |n| n.agent(ua).call(c).state == State::Ended
}

/// Whether each of `uas` got a 200 for its one REGISTER.
pub fn registered<const N: usize>(uas: [Id; N]) -> impl FnMut(&mut Net) -> bool {
    move |n| uas.iter().all(|&ua| n.agent(ua).register_statuses == [200])
}

/// Whether agent `ua` got one answer to a BYE in call `c`.
pub fn bye_answered(ua: Id, c: usize) -> impl FnMut(&mut Net) -> bool {
    move |n| n.agent(ua).call(c).responses_to("BYE").len() == 1
}

/// Asserts that the answer agent `ua` got to its BYE in call `c` is a 200.
pub fn assert_bye_ok(n: &mut Net, ua: Id, c: usize, what: &str) {
    assert_eq!(
        n.agent(ua).call(c).responses_to("BYE")[0].status(),
        Some(200),
        "{what}"
    );
}

/// Agent `ua` hangs up call `c`; within `limit` the BYE is answered with a 200.
pub fn hang_up(n: &mut Net, ua: Id, c: usize, limit: Duration) {
    n.bye(ua, c);
    assert!(n.run_until(limit, bye_answered(ua, c)));
    assert_bye_ok(n, ua, c, "");
}

/// Asserts that each of `agents` has no transaction left unanswered or 2xx left unACKed.
pub fn assert_no_tx_events(n: &mut Net, agents: &[Id], what: &str) {
    for &ua in agents {
        assert!(
            n.agent(ua).tx_events.is_empty(),
            "{what}{:?}",
            n.agent(ua).tx_events
        );
    }
}

/// Asserts that switch `sw` wrote one CDR, and returns it.
pub fn one_cdr(n: &mut Net, sw: Id, what: &str) -> serde_json::Value {
    let cdrs = n.sw(sw).cdrs();
    assert_eq!(cdrs.len(), 1, "{what}{cdrs:?}");
    cdrs[0].clone()
}

/// With `LOSSY` links from switch `sw` to caller `a` and callee `b`, `a` calls `uri` through
/// `next_hop`, talks for `talk` and hangs up: retransmissions carry the call through (answered,
/// the BYE answered with a 200 and the callee's leg ended), and 40 s later the callee had one
/// call and neither agent a transaction left unanswered or a 2xx unACKed. `what` names the run.
#[allow(clippy::too_many_arguments)]
pub fn lossy_call(
    n: &mut Net,
    sw: Id,
    a: Id,
    b: Id,
    uri: &str,
    next_hop: &str,
    talk: Duration,
    what: &str,
) {
    n.link(sw, a, LOSSY);
    n.link(sw, b, LOSSY);
    let c = n.invite(a, uri, next_hop);
    assert!(
        n.run_until(secs(40), confirmed(a, c)),
        "{what}: not answered"
    );
    n.run_for(talk);
    n.bye(a, c);
    let mut answered = bye_answered(a, c);
    assert!(
        n.run_until(secs(40), |n| answered(n)
            && n.agent(b).last().state == State::Ended),
        "{what}: not hung up"
    );
    assert_bye_ok(n, a, c, what);
    n.run_for(secs(40));
    assert_eq!(n.agent(b).calls.len(), 1, "{what}: one call at the callee");
    assert_no_tx_events(n, &[a, b], &format!("{what}: "));
}
