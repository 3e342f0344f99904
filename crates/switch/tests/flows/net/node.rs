//! `Node`: one strowger worker (`switch::Engine`) on the simulated network. Every call into the
//! engine's API is made in this file, so a change of that API changes only this adapter.

use super::Packet;
use sip::transaction::{Peer, Timers, Transport};
use sip::Message;
use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use store::voicemail::MailboxOp;
use store::{Binding, Change, Credentials};
use switch::config::Config;
use switch::{CallSlots, Clock, Engine, Event, Input, Output, Settings};

/// The media tick of the real worker.
pub const FRAME: Duration = Duration::from_millis(20);

/// Stands in for the process around the engine: RTP ports from a counter, a built-in prompt,
/// recordings in memory, CDRs and operator messages kept, an in-memory location store.
struct NodeHost {
    next_port: u16,
    /// Media leg index → its RTP address (the address of the leg's family, `Event::MediaOpen`).
    ports: HashMap<usize, SocketAddr>,
    /// For each media leg opened: whether it shares a port.
    shareable: Vec<bool>,
    /// The RTP ports that are shared pairs'.
    shared: HashSet<u16>,
    cdrs: Vec<serde_json::Value>,
    logs: Vec<String>,
    /// Bans decided here, not yet handed to the other workers.
    bans: Vec<(IpAddr, Instant)>,
    store: Arc<MemStore>,
    dns: Arc<Mutex<HashMap<String, Vec<Peer>>>>,
    /// Every name the engine asked to resolve, in order.
    lookups: Vec<String>,
    /// Every prompt the engine asked to load, in order.
    prompts: Vec<String>,
    /// Spoken (`tts:`) prompts held back (`Node::hold_speech`) instead of answered at once.
    held_speech: Option<Vec<u64>>,
    /// What this worker tells the others of trunk servers (`Event::TrunkServer`).
    broadcasts: Vec<(usize, Peer, Option<Instant>)>,
    /// Store operations held back (`Node::hold_store`) instead of answered at once.
    held: Option<Vec<(u64, switch::registrar::StoreOp)>>,
    /// New calls handed to another worker (`Event::HandOff`), for the switch to deliver.
    handoffs: Vec<switch::HandOff>,
    handed_off: usize,
    /// Transfer messages for another worker (`Event::Crossing`), for the switch to deliver.
    crossings: Vec<switch::Crossing>,
    /// The data directory voicemail boxes and their recordings are really written to.
    data_dir: PathBuf,
    /// Boxes this worker's operations changed, not yet handed to the other workers.
    boxes_changed: Vec<(String, store::voicemail::Mailbox)>,
    /// Every box operation fails with this (`Node::boxes_away`: a store that is down).
    boxes_away: Option<String>,
    /// Whole-call recordings handed over (`Event::RecordCall`), for the test to drain.
    recordings: Vec<(String, media::CallRecording)>,
    /// Answers to control API commands (`Event::Api`), by token.
    replies: Vec<(u64, switch::control::Reply)>,
    /// The event stream's notices (`Event::Notice`), in order.
    notices: Vec<switch::control::Notice>,
}

/// Spare RTP pairs a node keeps handed in, as the worker keeps them bound.
const SPARE: usize = 32;

/// A location and credential store in memory, shared by the workers of one switch (or of
/// several, standing for a Redis they share: `Net::switch_sharing`).
#[derive(Default)]
pub struct MemStore {
    bindings: Mutex<HashMap<String, Vec<Binding>>>,
    users: Mutex<HashMap<String, Credentials>>,
    claims: store::LocalClaims,
}

impl MemStore {
    pub fn add_user(&self, user: &str, domain: &str, password: &str) {
        self.users.lock().unwrap().insert(
            format!("{user}@{domain}"),
            switch::registrar::credentials(user, domain, password),
        );
    }
}

impl store::LocationStore for MemStore {
    fn claims(&self) -> Option<&dyn store::Claims> {
        Some(&self.claims)
    }

    fn update(&self, aor: &str, changes: &[Change], now: u64) -> store::Result<Vec<Binding>> {
        let mut map = self.bindings.lock().unwrap();
        let list = map.remove(aor).unwrap_or_default();
        let list = store::apply(list, changes, now);
        map.insert(aor.to_string(), list.clone());
        Ok(list)
    }
    fn lookup(&self, aor: &str, now: u64) -> store::Result<Vec<Binding>> {
        let map = self.bindings.lock().unwrap();
        Ok(map
            .get(aor)
            .map(|l| store::apply(l.clone(), &[], now))
            .unwrap_or_default())
    }
}

impl store::CredentialStore for MemStore {
    fn user(&self, user: &str, domain: &str) -> store::Result<Option<Credentials>> {
        Ok(self
            .users
            .lock()
            .unwrap()
            .get(&format!("{user}@{domain}"))
            .cloned())
    }
    fn put_user(&self, c: &Credentials) -> store::Result<()> {
        self.users
            .lock()
            .unwrap()
            .insert(format!("{}@{}", c.user, c.domain), c.clone());
        Ok(())
    }
    fn del_user(&self, user: &str, domain: &str) -> store::Result<bool> {
        Ok(self
            .users
            .lock()
            .unwrap()
            .remove(&format!("{user}@{domain}"))
            .is_some())
    }
    fn users(&self) -> store::Result<Vec<Credentials>> {
        Ok(self.users.lock().unwrap().values().cloned().collect())
    }
}

/// What the workers of one switch share: the configuration, the call slots, the registrar's
/// settings (with the secret that signs every worker's nonces) and the store.
#[derive(Clone)]
pub struct Shared {
    pub cfg: Arc<Config>,
    pub slots: Arc<CallSlots>,
    pub registrar: switch::registrar::Registrar,
    pub store: Arc<MemStore>,
    /// The DNS as the shell's resolver would answer `Event::Resolve`: a trunk host's name →
    /// its servers in order (a name not listed does not resolve). Answers hold for 300 s.
    pub dns: Arc<Mutex<HashMap<String, Vec<Peer>>>>,
    /// The pins and boards calls of different workers meet through.
    pub rendezvous: Arc<switch::Rendezvous>,
    /// The call queues' board, one for all workers.
    pub queues: Arc<switch::queues::Board>,
    /// A data directory of the switch's own (voicemail boxes), removed with the last worker.
    pub data_dir: Arc<DataDir>,
}

/// A fresh directory under the system's temporary one, removed when dropped.
pub struct DataDir(pub PathBuf);

impl DataDir {
    fn new() -> DataDir {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("strowger-net-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        DataDir(dir)
    }
}

impl Drop for DataDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Shared {
    /// `toml` on top of the defaults (every key is optional).
    pub fn new(toml: &str) -> Shared {
        let cfg = Config::from_str(toml, "net-test.toml").expect("test config is valid");
        Shared {
            slots: Arc::new(CallSlots::new(cfg.general.max_calls as usize)),
            registrar: switch::registrar::Registrar::new(&cfg.registrar, [7; 32]),
            store: Arc::new(MemStore::default()),
            dns: Arc::default(),
            rendezvous: Arc::default(),
            queues: Arc::new(switch::queues::Board::new(&cfg.queues)),
            data_dir: Arc::new(DataDir::new()),
            cfg: Arc::new(cfg),
        }
    }
}

/// One worker of a strowger switch listening on `addrs` (UDP), worker `worker` of `workers`,
/// its RTP ports counted up from `port_base`.
pub struct Node {
    engine: Engine,
    host: NodeHost,
    addrs: Vec<SocketAddr>,
    /// Packets to send, in order.
    out: Vec<Packet>,
    next_tick: Option<Instant>,
    /// When the engine wants `Input::Timeout` (its last `Output::Timeout`).
    deadline: Option<Instant>,
    /// The time of the last input, and of the first.
    now: Instant,
    start: Instant,
}

impl Node {
    pub fn new(
        shared: &Shared,
        addrs: &[SocketAddr],
        worker: usize,
        workers: usize,
        port_base: u16,
    ) -> Node {
        Node::starting_at(shared, addrs, worker, workers, port_base, Instant::now())
    }

    /// A node whose clock starts at `start` (a network's virtual time, however long building
    /// the engine took in real time).
    pub fn starting_at(
        shared: &Shared,
        addrs: &[SocketAddr],
        worker: usize,
        workers: usize,
        port_base: u16,
        start: Instant,
    ) -> Node {
        let cfg = &shared.cfg;
        let media_ip = addrs[0].ip();
        let listen: Vec<_> = addrs.iter().map(|a| (Transport::Udp, *a)).collect();
        let slots = shared.slots.clone();
        let registrar = shared.registrar.clone();
        let mut s = Settings::new(cfg, &listen, media_ip, slots, registrar, worker, workers);
        s.data_dir = std::env::temp_dir().display().to_string();
        s.rendezvous = shared.rendezvous.clone();
        s.queues = shared.queues.clone();
        // The store in memory stands for a shared one when the configuration names the node.
        s.cluster = cfg.cluster.node_uri.as_deref().map(Into::into);
        let engine = Engine::new(
            s,
            Arc::new(cfg.dialplan.clone()),
            start,
            SystemTime::UNIX_EPOCH,
        );
        let host = NodeHost {
            next_port: port_base,
            ports: HashMap::new(),
            shareable: Vec::new(),
            shared: HashSet::new(),
            cdrs: Vec::new(),
            logs: Vec::new(),
            bans: Vec::new(),
            store: shared.store.clone(),
            dns: shared.dns.clone(),
            lookups: Vec::new(),
            prompts: Vec::new(),
            held_speech: None,
            broadcasts: Vec::new(),
            held: None,
            handoffs: Vec::new(),
            crossings: Vec::new(),
            handed_off: 0,
            data_dir: shared.data_dir.0.clone(),
            boxes_changed: Vec::new(),
            boxes_away: None,
            recordings: Vec::new(),
            replies: Vec::new(),
            notices: Vec::new(),
        };
        let mut node = Node {
            engine,
            host,
            addrs: addrs.to_vec(),
            out: Vec::new(),
            next_tick: None,
            deadline: None,
            now: start,
            start,
        };
        node.collect();
        node
    }

    /// Both clocks at `now` (the wall clock starts at 2027-01-15 with the node).
    fn clock(&self, now: Instant) -> Clock {
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        Clock::new(now, wall + now.saturating_duration_since(self.start))
    }

    /// Hands the engine one input at `now` and does what it asks.
    fn input(&mut self, now: Instant, input: Input<'_>) {
        self.now = self.now.max(now);
        self.engine.handle_input(self.clock(now), input);
        self.collect();
    }

    /// The SIP addresses this worker listens on.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// The address strowger sends from towards `to` (same address family).
    fn local_for(&self, to: SocketAddr) -> SocketAddr {
        self.addrs
            .iter()
            .copied()
            .find(|a| a.is_ipv6() == to.is_ipv6())
            .unwrap_or(self.addrs[0])
    }

    /// Whether an RTP or RTCP port of this worker's media legs is `port`.
    /// Whether `addr` is a leg's RTP or RTCP address.
    pub fn has_media_addr(&self, addr: SocketAddr) -> bool {
        self.host.ports.values().any(|p| is_pair_of(*p, addr))
    }

    /// A SIP datagram from `from` to our address `to`. `late`: it waited too long in the socket.
    /// Bytes that are not SIP (a CRLF keep-alive) are dropped as the shell drops them.
    pub fn deliver_sip(
        &mut self,
        bytes: &[u8],
        from: SocketAddr,
        to: SocketAddr,
        late: bool,
        now: Instant,
    ) {
        if !self.admit(from, now) {
            return;
        }
        self.deliver_admitted(bytes, from, to, late, now);
    }

    /// What the shell asks the guard of every datagram, before parsing it (on the worker the
    /// kernel gave it to): whether to read it.
    pub fn admit(&mut self, from: SocketAddr, now: Instant) -> bool {
        self.now = self.now.max(now);
        let pass = self.engine.admit(from.ip(), now);
        if !pass {
            self.collect();
        }
        pass
    }

    /// A datagram the receiving worker's guard let through.
    pub fn deliver_admitted(
        &mut self,
        bytes: &[u8],
        from: SocketAddr,
        to: SocketAddr,
        late: bool,
        now: Instant,
    ) {
        let Ok(msg) = Message::parse(bytes, true) else {
            return;
        };
        let peer = Peer {
            transport: Transport::Udp,
            addr: from,
        };
        self.deliver_msg(msg, peer, to, late, now);
    }

    /// A parsed SIP message, as the shell hands it over (from the socket or another worker).
    pub fn deliver_msg(
        &mut self,
        msg: Message,
        peer: Peer,
        local: SocketAddr,
        late: bool,
        now: Instant,
    ) {
        self.input(
            now,
            Input::Sip {
                msg,
                peer,
                local,
                late,
            },
        );
        self.arm_tick(now);
    }

    /// An RTP or RTCP datagram to one of our media ports.
    pub fn deliver_rtp(&mut self, bytes: &[u8], from: SocketAddr, to: SocketAddr, now: Instant) {
        let mut legs = self.host.ports.iter().filter(|(_, p)| is_pair_of(**p, to));
        let Some((&first, &rtp)) = legs.next() else {
            return;
        };
        // A shared port's legs are told apart by their far end's address, as the shell does:
        // RTP from an address no leg sends to is the engine's to count.
        let found = match self.host.shared.contains(&rtp.port()) {
            false => Some(first),
            true if to == rtp => self.engine.rtp_leg_from(from),
            true => self.engine.rtcp_leg_from(from),
        };
        let Some(leg) = found else {
            if to == rtp {
                let (port, src) = (to.port(), from);
                self.input(now, Input::StrayRtp { port, src });
                self.input(now, Input::Process);
            }
            return;
        };
        // A leg found by address that left this pair for one of its own takes nothing here.
        if !self
            .host
            .ports
            .get(&leg)
            .is_some_and(|p| is_pair_of(*p, to))
        {
            return;
        }
        let (data, src) = (bytes, from);
        match to == rtp {
            true => self.input(now, Input::Rtp { leg, data, src }),
            false => self.input(now, Input::Rtcp { leg, data, src }),
        }
        self.input(now, Input::Process);
        self.arm_tick(now);
    }

    /// Media ticks start with the first call.
    fn arm_tick(&mut self, now: Instant) {
        if self.next_tick.is_none() && self.engine.active_calls() > 0 {
            self.next_tick = Some(now + FRAME);
        }
    }

    /// Runs what is due at `now`: the media tick every 20 ms while calls are up, then timers.
    pub fn advance(&mut self, now: Instant) {
        if self.engine.active_calls() > 0 {
            let mut tick = *self.next_tick.get_or_insert(now);
            while tick <= now {
                let (due, phase, phases) = (tick, 0, 1);
                self.input(tick, Input::MediaTick { due, phase, phases });
                self.input(tick, Input::Process);
                tick += FRAME;
            }
            self.next_tick = Some(tick);
        } else {
            self.next_tick = None;
        }
        if self.deadline.is_some_and(|d| d <= now) {
            self.input(now, Input::Timeout);
        }
    }

    /// When `advance` next has something to do.
    pub fn next_deadline(&self) -> Option<Instant> {
        let tick = self.next_tick.filter(|_| self.engine.active_calls() > 0);
        [self.deadline, tick].into_iter().flatten().min()
    }

    /// Hangs up every call (process shutdown).
    pub fn shutdown(&mut self, now: Instant) {
        self.input(now, Input::Shutdown);
    }

    /// A new configuration, as the process hands it to every worker on SIGHUP.
    pub fn reload(&mut self, r: Arc<switch::Reload>, now: Instant) {
        self.input(now, Input::Reload(r));
    }

    /// New calls are refused from now on (SIGTERM's drain).
    pub fn start_draining(&mut self, now: Instant) {
        self.input(now, Input::Drain);
    }

    /// Runs a control API command as the shell posts it, and returns the engine's answer.
    pub fn command(&mut self, command: switch::control::Command) -> switch::control::Reply {
        let token = self.host.replies.len() as u64 + 1000;
        self.input(self.now, Input::Api { token, command });
        let at = self.host.replies.iter().position(|(t, _)| *t == token);
        self.host
            .replies
            .remove(at.expect("the engine answers a command at once"))
            .1
    }

    /// An event-stream client subscribed to every type starts (true) or stops listening.
    pub fn watch(&mut self, on: bool) {
        self.watch_kinds(if on { u8::MAX } else { 0 });
    }

    /// The event types (bits of `switch::control::KINDS`) clients subscribe to now.
    pub fn watch_kinds(&mut self, mask: u8) {
        self.input(self.now, Input::Watch(mask));
    }

    /// The notices made so far (taken).
    pub fn take_notices(&mut self) -> Vec<switch::control::Notice> {
        std::mem::take(&mut self.host.notices)
    }

    pub fn set_overloaded(&mut self, on: bool) {
        self.input(self.now, Input::Overloaded(on));
    }

    pub fn active_calls(&self) -> usize {
        self.engine.active_calls()
    }

    /// The engine's counts for the metrics, as the shell takes them.
    pub fn metrics(&mut self) -> switch::metrics::Counts {
        self.engine.metrics().clone()
    }

    pub fn table_counts(&self) -> switch::TableCounts {
        self.engine.table_counts()
    }

    /// Everything the worker sent since the last call, in order.
    pub fn drain(&mut self) -> Vec<Packet> {
        self.collect();
        std::mem::take(&mut self.out)
    }

    /// The whole-call recordings handed over so far, by file name, as a writer gets them.
    pub fn recordings(&mut self) -> &mut Vec<(String, media::CallRecording)> {
        &mut self.host.recordings
    }

    /// The CDRs written so far.
    pub fn cdrs(&self) -> &[serde_json::Value] {
        &self.host.cdrs
    }

    /// For each media leg opened so far, whether the engine let it share a port.
    pub fn shareable(&self) -> &[bool] {
        &self.host.shareable
    }

    /// A datagram larger than `sip.max_message_size` (the shell hands it over unparsed).
    pub fn too_large(&mut self, bytes: &[u8], from: SocketAddr) {
        let peer = Peer {
            transport: Transport::Udp,
            addr: from,
        };
        self.input(self.now, Input::TooLarge { bytes, peer });
    }

    /// What this worker told the others about trunk servers since the last call.
    pub fn take_broadcasts(&mut self) -> Vec<(usize, Peer, Option<Instant>)> {
        std::mem::take(&mut self.host.broadcasts)
    }

    /// The voicemail boxes this worker's operations changed since the last call.
    pub fn take_boxes_changed(&mut self) -> Vec<(String, store::voicemail::Mailbox)> {
        std::mem::take(&mut self.host.boxes_changed)
    }

    /// What another worker's operation left of a voicemail box.
    pub fn mailbox_changed(&mut self, user: String, mailbox: store::voicemail::Mailbox) {
        self.input(self.now, Input::MailboxChanged { user, mailbox });
    }

    /// What the shell says when a TCP connection to `peer` could not be made.
    pub fn unreachable(&mut self, peer: Peer) {
        self.input(self.now, Input::Unreachable(peer));
    }

    /// What another worker told of a trunk's server.
    pub fn trunk_server(&mut self, trunk: usize, server: Peer, down_until: Option<Instant>) {
        let input = Input::TrunkServer {
            trunk,
            server,
            down_until,
        };
        self.input(self.now, input);
    }

    /// The prompts the engine asked the shell to load.
    pub fn prompts(&self) -> &[String] {
        &self.host.prompts
    }

    /// The names the engine asked the DNS for.
    pub fn lookups(&self) -> &[String] {
        &self.host.lookups
    }

    /// Bans this worker decided since the last call (for the other workers: `ban`).
    pub fn take_bans(&mut self) -> Vec<(IpAddr, Instant)> {
        std::mem::take(&mut self.host.bans)
    }

    /// A ban another worker decided, as the shell hands it over.
    pub fn ban(&mut self, source: IpAddr, until: Instant) {
        self.input(self.now, Input::Ban { source, until });
    }

    /// From now on the store answers only when `release_store` says so (a slow backend).
    pub fn hold_store(&mut self) {
        self.host.held = Some(Vec::new());
    }

    /// From now on every voicemail box operation fails with `why`, as while `voicemail.store`
    /// is down.
    pub fn boxes_away(&mut self, why: &str) {
        self.host.boxes_away = Some(why.to_string());
    }

    /// From now on `tts:` prompts load only when `release_speech` says so (a slow speech
    /// engine).
    pub fn hold_speech(&mut self) {
        self.host.held_speech = Some(Vec::new());
    }

    /// Answers the `tts:` prompts held back, and answers at once again.
    pub fn release_speech(&mut self) {
        let clock = self.clock(self.now);
        for token in self.host.held_speech.take().unwrap_or_default() {
            let result = Ok(test_prompt());
            self.engine
                .handle_input(clock, Input::Prompt { token, result });
        }
        self.collect();
    }

    /// Answers the store operations held back, and answers at once again.
    pub fn release_store(&mut self) {
        let clock = self.clock(self.now);
        for (token, op) in self.host.held.take().unwrap_or_default() {
            let result = switch::registrar::run(&*self.host.store, op);
            self.engine
                .handle_input(clock, Input::Store { token, result });
        }
        self.collect();
    }

    /// New calls this worker handed to another since the last call.
    pub fn take_handoffs(&mut self) -> Vec<switch::HandOff> {
        std::mem::take(&mut self.host.handoffs)
    }

    /// Transfer messages this worker sent another since the last call.
    pub fn take_crossings(&mut self) -> Vec<switch::Crossing> {
        std::mem::take(&mut self.host.crossings)
    }

    /// A transfer message from another worker, as the shell hands it over from its inbox.
    pub fn deliver_crossing(&mut self, c: switch::Crossing, now: Instant) {
        self.input(now, Input::Crossing(Box::new(c)));
        self.arm_tick(now);
    }

    /// New calls this worker handed to another so far.
    pub fn handed_off(&self) -> usize {
        self.host.handed_off
    }

    /// Operator messages logged so far.
    pub fn logs(&self) -> &[String] {
        &self.host.logs
    }

    /// Takes the engine's outputs as the worker does: packets to send, events done here (the
    /// answers to its requests go back in at once), spare RTP ports topped up.
    fn collect(&mut self) {
        let clock = self.clock(self.now);
        loop {
            match self.engine.poll_output() {
                Output::Sip(peer, bytes) => {
                    let from = self.local_for(peer.addr);
                    self.out.push(Packet::sip(from, peer.addr, bytes.to_vec()));
                }
                Output::Media(t) => {
                    // The kernel refuses to send across families: such a packet is lost.
                    if let Some(rtp) = self.host.ports.get(&t.leg.index()) {
                        let from = SocketAddr::new(rtp.ip(), rtp.port() + u16::from(t.rtcp));
                        if from.is_ipv6() == t.dst.is_ipv6() {
                            self.out
                                .push(Packet::media(from, t.dst, t.payload.to_vec()));
                        }
                    }
                }
                Output::Iax(_) => {}
                Output::Timeout(t) => {
                    self.deadline = t;
                    break;
                }
                Output::Event(ev) => self.event(clock, ev),
            }
        }
        if self.engine.spare_ports() < SPARE / 2 {
            let ports: Vec<u16> = (0..SPARE as u16)
                .map(|i| self.host.next_port + 2 * i)
                .collect();
            self.host.next_port += 2 * SPARE as u16;
            self.engine.handle_input(clock, Input::MediaPorts(&ports));
        }
    }

    fn event(&mut self, clock: Clock, ev: Event) {
        let h = &mut self.host;
        match ev {
            Event::MediaOpen {
                leg,
                port,
                shared,
                ip,
                ..
            } => {
                h.shareable.push(shared);
                if shared {
                    h.shared.insert(port);
                }
                h.ports.insert(leg, SocketAddr::new(ip, port));
            }
            Event::MediaClose { leg } => {
                h.ports.remove(&leg);
            }
            Event::Store { token, op } if h.held.is_some() => {
                h.held.get_or_insert_with(Vec::new).push((token, *op));
            }
            Event::Store { token, op } => {
                let result = switch::registrar::run(&*h.store, *op);
                self.engine
                    .handle_input(clock, Input::Store { token, result });
            }
            Event::Resolve { token, query } => {
                h.lookups.push(query.name.clone());
                let found = h.dns.lock().unwrap().get(&query.name).cloned();
                let result = match found {
                    Some(targets) => Ok(switch::trunks::Resolved {
                        targets,
                        valid_until: clock.now + Duration::from_secs(300),
                    }),
                    None => Err(format!("{}: no such name", query.name)),
                };
                self.engine
                    .handle_input(clock, Input::Resolved { token, result });
            }
            Event::Prompt { token, name, .. } => {
                let speech = name.starts_with("tts:");
                h.prompts.push(name);
                match h.held_speech.as_mut() {
                    Some(held) if speech => held.push(token),
                    _ => {
                        let result = Ok(test_prompt());
                        self.engine
                            .handle_input(clock, Input::Prompt { token, result });
                    }
                }
            }
            Event::Recording { token, name } if name.starts_with("voicemail/") => {
                let path = h.data_dir.join(&name);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                let file = std::fs::File::create(&path).unwrap();
                let sink: Box<dyn media::RecordSink> = Box::new(std::io::BufWriter::new(file));
                self.engine.handle_input(
                    clock,
                    Input::Recording {
                        token,
                        result: Ok(sink),
                    },
                );
            }
            Event::Recording { token, .. } => {
                let sink: Box<dyn media::RecordSink> = Box::new(std::io::Cursor::new(Vec::new()));
                let result = Ok(sink);
                self.engine
                    .handle_input(clock, Input::Recording { token, result });
            }
            Event::RecordCall {
                name, recording, ..
            } => h.recordings.push((name, recording)),
            Event::Cdr(line) => h
                .cdrs
                .push(serde_json::from_str(&line).expect("a CDR is JSON")),
            Event::Log { message, .. } => h.logs.push(message),
            Event::Security {
                source,
                user,
                reason,
            } => h.logs.push(format!(
                "security: auth_failed source={source} user={user:?} reason={reason:?}"
            )),
            Event::Ban {
                source,
                until,
                seconds,
                reason,
            } => {
                h.logs.push(format!(
                    "security: banned source={source} reason=\"{reason}\" for={seconds}s"
                ));
                h.bans.push((source, until));
            }
            Event::Scanner { source, user_agent } => h.logs.push(format!(
                "security: scanner source={source} user_agent={user_agent:?}"
            )),
            Event::TcpAuthenticated { .. } => {}
            Event::State { .. } => {}
            Event::IaxPeer { .. } => {}
            Event::TrunkServer {
                trunk,
                server,
                down_until,
            } => h.broadcasts.push((trunk, server, down_until)),
            Event::Voicemail { token, user, op } => {
                let result = match &h.boxes_away {
                    Some(why) => Err(why.clone()),
                    None => store::voicemail::Mailboxes::new(&h.data_dir, None)
                        .and_then(|b| b.run(&user, &op)),
                };
                if let Some(b) = result.as_ref().ok().filter(|_| op != MailboxOp::List) {
                    h.boxes_changed.push((user.clone(), b.clone()));
                }
                self.engine.handle_input(
                    clock,
                    Input::Voicemail {
                        token,
                        user,
                        result,
                    },
                );
            }
            Event::HandOff(handoff) => {
                h.handed_off += 1;
                h.handoffs.push(*handoff);
            }
            Event::Crossing(c) => h.crossings.push(*c),
            Event::Api { token, reply } => h.replies.push((token, reply)),
            Event::Notice(n) => h.notices.push(n),
        }
    }
}

/// The worker of `workers` that handles a SIP datagram, as the real process routes them: by
/// its Call-ID's owner, except for digest answers (to the worker that issued their nonce) and
/// requests any worker may take (REGISTER), which stay where the kernel put them (here: by the
/// source port), and bytes that are not SIP (worker 0).
pub fn owner_of(bytes: &[u8], from: SocketAddr, workers: usize, pins: &switch::Pins) -> usize {
    let Ok(msg) = Message::parse(bytes, true) else {
        return 0;
    };
    if let Some(w) = switch::nonce_owner(&msg, workers) {
        return w;
    }
    if switch::stateless(&msg) {
        return usize::from(from.port()) % workers;
    }
    if let Some(w) = pins.route(&msg, workers) {
        return w;
    }
    let call_id = msg.header(sip::HeaderName::CallId).unwrap_or_default();
    switch::owner(call_id, workers)
}

/// The prompt the test shell loads for any name: a second of a 100 Hz sawtooth.
fn test_prompt() -> Arc<media::Prompt> {
    let pcm: Vec<i16> = (0..8000).map(|i| ((i % 80) as i16 - 40) * 100).collect();
    Arc::new(media::Prompt::from_pcm("test", &pcm))
}

/// Whether `addr` is the RTP address `rtp` or the RTCP one above it.
fn is_pair_of(rtp: SocketAddr, addr: SocketAddr) -> bool {
    rtp.ip() == addr.ip() && (rtp.port() == addr.port() || rtp.port() + 1 == addr.port())
}
