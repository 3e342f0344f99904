//! `Node`: one strowger worker (`switch::Engine`) on the simulated network. Every call into the
//! engine's API is made in this file, so a change of that API changes only this adapter.

use super::Packet;
use sip::transaction::{Peer, Timers, Transport};
use sip::Message;
use std::collections::HashMap;
use std::fs::File;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use store::{Binding, Change, Credentials};
use switch::config::Config;
use switch::{CallSlots, Engine, Host, Settings};

/// The media tick of the real worker.
pub const FRAME: Duration = Duration::from_millis(20);

/// Stands in for the process around the engine: RTP ports from a counter, a built-in prompt,
/// CDRs and operator messages kept in memory, an in-memory location store.
struct NodeHost {
    next_port: u16,
    /// Media leg index → its RTP port.
    ports: HashMap<usize, u16>,
    /// What each `open_media` was told: whether the leg may share a port.
    shareable: Vec<bool>,
    cdrs: Vec<serde_json::Value>,
    logs: Vec<String>,
    store: Arc<MemStore>,
}

impl Host for NodeHost {
    fn open_media(&mut self, leg: usize, shareable: bool) -> Option<u16> {
        self.shareable.push(shareable);
        let port = self.next_port;
        self.next_port += 2;
        self.ports.insert(leg, port);
        Some(port)
    }
    fn close_media(&mut self, leg: usize) {
        self.ports.remove(&leg);
    }
    fn prompt(&mut self, _name: &str, _cache: bool) -> Result<Arc<media::Prompt>, String> {
        let pcm: Vec<i16> = (0..8000).map(|i| ((i % 80) as i16 - 40) * 100).collect();
        Ok(Arc::new(media::Prompt::from_pcm("test", &pcm)))
    }
    fn recording(&mut self, name: &str) -> std::io::Result<File> {
        let name = name.replace('/', "_");
        File::create(
            std::env::temp_dir().join(format!("strowger-net-{}-{name}", std::process::id())),
        )
    }
    fn cdr(&mut self, line: &str) {
        self.cdrs
            .push(serde_json::from_str(line).expect("a CDR is JSON"));
    }
    fn log(&mut self, msg: &str) {
        self.logs.push(msg.to_string());
    }
    fn store(
        &mut self,
        _token: u64,
        op: switch::registrar::StoreOp,
    ) -> Option<switch::registrar::StoreResult> {
        Some(switch::registrar::run(&*self.store, op))
    }
}

/// A location and credential store in memory, shared by the workers of one switch.
#[derive(Default)]
pub struct MemStore {
    bindings: Mutex<HashMap<String, Vec<Binding>>>,
    users: Mutex<HashMap<String, Credentials>>,
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
/// nonce table and the store.
#[derive(Clone)]
pub struct Shared {
    pub cfg: Arc<Config>,
    pub slots: Arc<CallSlots>,
    pub registrar: switch::registrar::Registrar,
    pub store: Arc<MemStore>,
}

impl Shared {
    /// `toml` on top of the defaults (every key is optional).
    pub fn new(toml: &str) -> Shared {
        let cfg = Config::from_str(toml, "net-test.toml").expect("test config is valid");
        Shared {
            slots: Arc::new(CallSlots::new(cfg.general.max_calls as usize)),
            registrar: switch::registrar::Registrar::new(&cfg.registrar, [7; 32]),
            store: Arc::new(MemStore::default()),
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
    media_ip: IpAddr,
    /// Packets to send, in order.
    out: Vec<Packet>,
    next_tick: Option<Instant>,
}

impl Node {
    pub fn new(
        shared: &Shared,
        addrs: &[SocketAddr],
        worker: usize,
        workers: usize,
        port_base: u16,
    ) -> Node {
        let cfg = &shared.cfg;
        let media_ip = addrs[0].ip();
        let s = Settings {
            timers: Timers {
                t1: cfg.sip.t1,
                t2: cfg.sip.t2,
                t4: cfg.sip.t4,
            },
            slots: shared.slots.clone(),
            user_agent: cfg.sip.user_agent.clone(),
            media_timeout: cfg.rtp.media_timeout,
            caps: cfg.rtp.caps(),
            symmetric_rtp: cfg.rtp.symmetric,
            session_expires: cfg.sip.session_expires,
            min_se: cfg.sip.min_se,
            accept_require: cfg.sip.accept_require.clone(),
            retry_after_s: cfg.general.retry_after_s,
            media_ip,
            default_context: cfg.dialplan.default_context().to_string(),
            listen: addrs.iter().map(|a| (Transport::Udp, *a)).collect(),
            data_dir: std::env::temp_dir().display().to_string(),
            worker,
            workers,
            registrar: shared.registrar.clone(),
            proxy: cfg.proxy.clone(),
        };
        let engine = Engine::new(s, Arc::new(cfg.dialplan.clone()));
        let host = NodeHost {
            next_port: port_base,
            ports: HashMap::new(),
            shareable: Vec::new(),
            cdrs: Vec::new(),
            logs: Vec::new(),
            store: shared.store.clone(),
        };
        Node {
            engine,
            host,
            addrs: addrs.to_vec(),
            media_ip,
            out: Vec::new(),
            next_tick: None,
        }
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
    pub fn has_media_port(&self, port: u16) -> bool {
        self.host
            .ports
            .values()
            .any(|p| *p == port || *p + 1 == port)
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
        let Ok(msg) = Message::parse(bytes, true) else {
            return;
        };
        let peer = Peer {
            transport: Transport::Udp,
            addr: from,
        };
        self.engine.on_sip(msg, peer, to, late, now, &mut self.host);
        self.arm_tick(now);
        self.collect();
    }

    /// An RTP or RTCP datagram to one of our media ports.
    pub fn deliver_rtp(&mut self, bytes: &[u8], from: SocketAddr, to: SocketAddr, now: Instant) {
        let Some((&leg, &port)) = self.host.ports.iter().find(|(_, p)| {
            let p = **p;
            p == to.port() || p + 1 == to.port()
        }) else {
            return;
        };
        let media_ip = self.media_ip;
        let out = &mut self.out;
        let ports = &self.host.ports;
        if to.port() == port {
            self.engine.on_rtp(leg, bytes, from, now, &mut |t| {
                push_media(out, ports, media_ip, &t)
            });
        } else {
            self.engine.on_rtcp(leg, bytes, from, now);
        }
        self.engine.process(now, &mut self.host);
        self.arm_tick(now);
        self.collect();
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
                let media_ip = self.media_ip;
                let out = &mut self.out;
                let ports = &self.host.ports;
                self.engine
                    .tick(tick, &mut |t| push_media(out, ports, media_ip, &t));
                self.engine.process(tick, &mut self.host);
                tick += FRAME;
            }
            self.next_tick = Some(tick);
        } else {
            self.next_tick = None;
        }
        if self.engine.next_deadline().is_some_and(|d| d <= now) {
            self.engine.handle_timeout(now, &mut self.host);
        }
        self.collect();
    }

    /// When `advance` next has something to do.
    pub fn next_deadline(&self) -> Option<Instant> {
        let tick = self.next_tick.filter(|_| self.engine.active_calls() > 0);
        [self.engine.next_deadline(), tick]
            .into_iter()
            .flatten()
            .min()
    }

    /// Hangs up every call (process shutdown).
    pub fn shutdown(&mut self, now: Instant) {
        self.engine.shutdown(now, &mut self.host);
        self.collect();
    }

    pub fn set_overloaded(&mut self, on: bool) {
        self.engine.set_overloaded(on);
    }

    pub fn active_calls(&self) -> usize {
        self.engine.active_calls()
    }

    /// Everything the worker sent since the last call, in order.
    pub fn drain(&mut self) -> Vec<Packet> {
        self.collect();
        std::mem::take(&mut self.out)
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
        self.engine.too_large(bytes, peer);
        self.collect();
    }

    /// Operator messages logged so far.
    pub fn logs(&self) -> &[String] {
        &self.host.logs
    }

    fn collect(&mut self) {
        while let Some((peer, bytes)) = self.engine.poll_transmit() {
            let from = self.local_for(peer.addr);
            self.out.push(Packet::sip(from, peer.addr, bytes.to_vec()));
        }
    }
}

/// The worker of `workers` that handles a SIP datagram, as the real process routes them: by
/// its Call-ID's owner, except for requests any worker may take (REGISTER), which stay where
/// the kernel put them (here: by the source port), and bytes that are not SIP (worker 0).
pub fn owner_of(bytes: &[u8], from: SocketAddr, workers: usize) -> usize {
    let Ok(msg) = Message::parse(bytes, true) else {
        return 0;
    };
    if switch::stateless(&msg) {
        return usize::from(from.port()) % workers;
    }
    let call_id = msg.header(sip::HeaderName::CallId).unwrap_or_default();
    switch::owner(call_id, workers)
}

fn push_media(
    out: &mut Vec<Packet>,
    ports: &HashMap<usize, u16>,
    ip: IpAddr,
    t: &media::Transmit<'_>,
) {
    let Some(port) = ports.get(&t.leg.index()) else {
        return;
    };
    let port = if t.rtcp { port + 1 } else { *port };
    out.push(Packet::media(
        SocketAddr::new(ip, port),
        t.dst,
        t.payload.to_vec(),
    ));
}
