//! What a worker's engine counts for the process's metrics, and the Prometheus text a scrape
//! renders from every worker's counts.
//!
//! The engine owns its [`Counts`] and bumps them with a plain `+= 1` on its one thread: no
//! atomic, no lock, no allocation on a packet's or a message's path. They live in one flat
//! table so the shell can copy it to shared atomics once a second ([`Engine::metrics`]) and a
//! scrape can add the workers' tables up. Every label comes from a fixed list (SIP methods, a
//! set of response codes, Q.850 causes, the codec table's formats): no per-call or per-user
//! series, so the number of series is bounded whatever the traffic.
//!
//! [`Engine::metrics`]: crate::Engine::metrics

use crate::dialplan::Cause;
use media::Format;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use sip::{Message, Method};
use std::fmt;
use std::time::Duration;

/// The methods counted by name; any other is counted as the last, "other".
pub const METHODS: [&str; 15] = [
    "INVITE",
    "ACK",
    "BYE",
    "CANCEL",
    "OPTIONS",
    "REGISTER",
    "UPDATE",
    "INFO",
    "PRACK",
    "REFER",
    "SUBSCRIBE",
    "NOTIFY",
    "MESSAGE",
    "PUBLISH",
    "other",
];

/// The response codes counted exactly; any other is counted in its class ("4xx").
pub const CODES: [u16; 20] = [
    100, 180, 181, 183, 200, 202, 401, 403, 404, 407, 408, 480, 481, 486, 487, 488, 500, 503, 504,
    603,
];
const CLASSES: [&str; 6] = ["1xx", "2xx", "3xx", "4xx", "5xx", "6xx"];
const CODE_LABELS: usize = CODES.len() + CLASSES.len();
/// Q.850 cause values are 0–127.
const CAUSES: usize = 128;
/// Room for every format of the codec table (`codec::Format::all`, G.729 included).
const FORMATS: usize = 13;

/// A histogram's place in a table: a count per bucket (the last is +Inf), then the sum of the
/// values observed in `unit`s (an integer, so it adds up across workers exactly).
#[derive(Clone, Copy)]
pub struct Hist {
    at: usize,
    bounds: &'static [f64],
    unit: f64,
}

impl Hist {
    const fn end(&self) -> usize {
        self.at + self.bounds.len() + 2
    }

    /// Slots this histogram takes.
    pub const fn table_len(&self) -> usize {
        self.bounds.len() + 2
    }

    /// The slot `value` counts in, and what it adds to the sum's slot.
    pub fn slots(&self, value: f64) -> (usize, usize, u64) {
        let bucket = self.bounds.iter().take_while(|b| value > **b).count();
        let sum = self.at + self.bounds.len() + 1;
        (self.at + bucket, sum, (value / self.unit).round() as u64)
    }

    fn observe(&self, table: &mut [u64], value: f64) {
        let (bucket, sum, add) = self.slots(value);
        table[bucket] += 1;
        table[sum] += add;
    }

    fn encode(
        &self,
        table: &[u64],
        m: &mut prometheus_client::encoding::MetricEncoder,
    ) -> fmt::Result {
        let counts = &table[self.at..self.end() - 1];
        let buckets: Vec<(f64, u64)> = self
            .bounds
            .iter()
            .copied()
            .chain([f64::INFINITY])
            .zip(counts.iter().copied())
            .collect();
        let sum = table[self.end() - 1] as f64 * self.unit;
        let count = counts.iter().sum();
        m.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }
}

// Where each series lives in a worker's table.
const REQUESTS: usize = 0; // [direction][method]
const RESPONSES: usize = REQUESTS + 2 * METHODS.len(); // [direction][code label]
const RETRANSMISSIONS: usize = RESPONSES + 2 * CODE_LABELS;
const TOO_LARGE: usize = RETRANSMISSIONS + 1;
const REGISTRATIONS: usize = TOO_LARGE + 1;
const ANSWERS_REFUSED: usize = REGISTRATIONS + 1;
const STRAY_RTP: usize = ANSWERS_REFUSED + 1;
const LEGS_MOVED: usize = STRAY_RTP + 1;
const REFUSED: usize = LEGS_MOVED + 1; // [Refusal]
const ENDED: usize = REFUSED + REFUSALS.len(); // [Q.850 cause]
/// INVITE received → answered or refused, in seconds.
const SETUP: Hist = Hist {
    at: ENDED + CAUSES,
    bounds: &[0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0],
    unit: 1e-6,
};
/// The caller's packets lost over those expected, per call ended with media.
const LOSS: Hist = Hist {
    at: SETUP.end(),
    bounds: &[0.0, 0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2],
    unit: 1e-6,
};
/// The caller's interarrival jitter at the end of a call (RFC 3550), in seconds.
const JITTER: Hist = Hist {
    at: LOSS.end(),
    bounds: &[0.001, 0.002, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16],
    unit: 1e-6,
};
/// How late each media pass ran after its 5 ms grid point, in seconds.
const TICK_LAG: Hist = Hist {
    at: JITTER.end(),
    bounds: &[0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1],
    unit: 1e-6,
};
// Taken when the table is read (`Engine::metrics`), not counted as they happen.
const CALLS: usize = TICK_LAG.end();
// packets out, bytes out, packets in, bytes in, late ticks, SRTP rejected
const RTP: usize = CALLS + 1;
const TRANSCODERS: usize = RTP + 7; // [from][to]
/// The call table's sizes: legs, SIP transactions, media legs, timers (a soak watches them
/// return to their baseline).
const TABLE: usize = TRANSCODERS + FORMATS * FORMATS;
/// The nodes of the `[[dispatch]]` sets, in the order configured: [node][NODE_SERIES].
const NODES: usize = TABLE + 4;
/// Room for that many dispatch nodes in all (config/dispatch.rs allows no more).
pub const DISPATCH_NODES: usize = 64;
/// Per node: up (1/0, this worker's view), probes failed, requests sent to it, requests it
/// failed (503 or silence) that went on to another node.
const NODE_SERIES: usize = 4;
/// Slots in a worker's table.
pub const LEN: usize = NODES + DISPATCH_NODES * NODE_SERIES;

/// Store operations' latency, by backend (a table of its own per backend, kept by the shell).
pub const STORE_LATENCY: Hist = Hist {
    at: 0,
    bounds: &[
        0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1.0,
    ],
    unit: 1e-6,
};

/// Why a new call was refused with 503 before it began (the `calls_refused` metric's reason).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The worker is past capacity (its own work makes its media ticks late).
    Overloaded,
    /// The INVITE waited too long in the socket (a signalling backlog).
    SignallingLate,
    /// The process is draining to stop or restart.
    Draining,
    /// `general.max_calls` calls are up.
    MaxCalls,
    /// No RTP port pair is free in `rtp.ports`.
    NoRtpPort,
}

/// [`Refusal`]s' labels, in its order.
pub const REFUSALS: [&str; 5] = [
    "overloaded",
    "signalling_late",
    "draining",
    "max_calls",
    "no_rtp_port",
];

impl Refusal {
    /// What a person reads in the log: the cause and what to do about it.
    pub fn explain(self) -> &'static str {
        match self {
            Refusal::Overloaded => "a worker is past capacity (its own work makes its media ticks late): add cores or move load away",
            Refusal::SignallingLate => "INVITEs waited too long in the socket (a signalling backlog): add cores or move load away",
            Refusal::Draining => "strowger is draining to stop or restart",
            Refusal::MaxCalls => "general.max_calls calls are up: raise general.max_calls",
            Refusal::NoRtpPort => "no free RTP port pair: widen rtp.ports",
        }
    }
}

/// What an edge knows of one dispatch node, as its worker's engine last saw it.
#[derive(Clone, Copy, Debug, Default)]
pub struct NodeCounts {
    pub up: bool,
    pub probes_failed: u64,
    pub dispatched: u64,
    pub failovers: u64,
}

/// One worker's counts. Plain integers: the engine is single-threaded.
#[derive(Clone)]
pub struct Counts(pub Box<[u64; LEN]>);

impl Default for Counts {
    fn default() -> Self {
        Counts(Box::new([0; LEN]))
    }
}

fn method_index(m: &Method) -> usize {
    match m {
        Method::Invite => 0,
        Method::Ack => 1,
        Method::Bye => 2,
        Method::Cancel => 3,
        Method::Options => 4,
        Method::Register => 5,
        Method::Update => 6,
        Method::Info => 7,
        Method::Prack => 8,
        Method::Refer => 9,
        Method::Subscribe => 10,
        Method::Notify => 11,
        Method::Message => 12,
        Method::Publish => 13,
        Method::Other(_) => 14,
    }
}

fn code_index(code: u16) -> usize {
    match CODES.iter().position(|&c| c == code) {
        Some(i) => i,
        None => CODES.len() + usize::from(code / 100).clamp(1, 6) - 1,
    }
}

fn code_label(i: usize) -> String {
    match CODES.get(i) {
        Some(c) => c.to_string(),
        None => CLASSES[i - CODES.len()].to_string(),
    }
}

const OUT: usize = 1;

impl Counts {
    /// A SIP message received.
    pub(crate) fn sip_in(&mut self, msg: &Message) {
        match (msg.method(), msg.status()) {
            (Some(m), _) => self.0[REQUESTS + method_index(m)] += 1,
            (None, Some(code)) => self.0[RESPONSES + code_index(code)] += 1,
            (None, None) => {}
        }
    }

    /// A SIP message sent, as the bytes on the wire: a response's status line, or a request's
    /// method, read without parsing the rest.
    pub(crate) fn sip_out(&mut self, bytes: &[u8]) {
        if let Some(rest) = bytes.strip_prefix(b"SIP/2.0 ") {
            let digits = rest.get(..3).unwrap_or_default();
            let code = digits.iter().try_fold(0u16, |n, d| {
                d.is_ascii_digit().then(|| n * 10 + u16::from(d - b'0'))
            });
            if let Some(code) = code {
                self.0[RESPONSES + CODE_LABELS * OUT + code_index(code)] += 1;
            }
            return;
        }
        let name = bytes.split(|&b| b == b' ').next().unwrap_or_default();
        let i = METHODS[..METHODS.len() - 1]
            .iter()
            .position(|m| m.as_bytes() == name)
            .unwrap_or(METHODS.len() - 1);
        self.0[REQUESTS + METHODS.len() * OUT + i] += 1;
    }

    /// A retransmitted request, absorbed by its transaction.
    pub(crate) fn retransmission(&mut self) {
        self.0[RETRANSMISSIONS] += 1;
    }

    /// A datagram longer than `sip.max_message_size`.
    pub(crate) fn too_large(&mut self) {
        self.0[TOO_LARGE] += 1;
    }

    /// A REGISTER accepted (bindings added, refreshed or removed).
    pub(crate) fn registration(&mut self) {
        self.0[REGISTRATIONS] += 1;
    }

    /// A 2xx whose SDP answer could not be taken: its leg was ended with a BYE.
    pub(crate) fn answer_refused(&mut self) {
        self.0[ANSWERS_REFUSED] += 1;
    }

    /// An RTP packet on a shared port from a source no leg there announced (dropped).
    pub(crate) fn stray_rtp(&mut self) {
        self.0[STRAY_RTP] += 1;
    }

    /// A leg moved off a shared port onto a pair of its own by a re-INVITE.
    pub(crate) fn leg_moved(&mut self) {
        self.0[LEGS_MOVED] += 1;
    }

    /// A new call refused with 503.
    pub(crate) fn refused(&mut self, why: Refusal) {
        self.0[REFUSED + why as usize] += 1;
    }

    /// A call answered or refused `after` its INVITE arrived.
    pub(crate) fn set_up(&mut self, after: Duration) {
        SETUP.observe(&mut self.0[..], after.as_secs_f64());
    }

    /// A call ended with Q.850 `cause`; with the caller's media `(received, lost, jitter)`.
    pub(crate) fn ended(&mut self, cause: u8, media: Option<(u64, u64, Duration)>) {
        self.0[ENDED + usize::from(cause).min(CAUSES - 1)] += 1;
        if let Some((received, lost, jitter)) = media.filter(|m| m.0 + m.1 > 0) {
            LOSS.observe(&mut self.0[..], lost as f64 / (received + lost) as f64);
            JITTER.observe(&mut self.0[..], jitter.as_secs_f64());
        }
    }

    /// A media pass ran `late` after its grid point.
    pub(crate) fn tick(&mut self, late: Duration) {
        TICK_LAG.observe(&mut self.0[..], late.as_secs_f64());
    }

    /// The dispatch nodes' counts, in the order configured, read when the table is taken.
    pub(crate) fn take_nodes(&mut self, nodes: impl Iterator<Item = NodeCounts>) {
        let table = &mut self.0[NODES..];
        for (slots, n) in table.chunks_exact_mut(NODE_SERIES).zip(nodes) {
            slots.copy_from_slice(&[u64::from(n.up), n.probes_failed, n.dispatched, n.failovers]);
        }
    }

    /// The values read off the engine when the table is taken: calls in progress, the media
    /// engine's RTP totals, the transcodings in use.
    pub(crate) fn take_levels(&mut self, calls: usize, table: [usize; 4], media: &media::Engine) {
        self.0[CALLS] = calls as u64;

        let t = media.totals();
        self.0[RTP..RTP + 7].copy_from_slice(&[
            t.packets_sent,
            t.bytes_sent,
            t.packets_received,
            t.bytes_received,
            t.late_ticks,
            t.srtp_rejected,
            t.ice_refused,
        ]);
        let pairs = &mut self.0[TRANSCODERS..TABLE];
        pairs.fill(0);
        media.translations(|from, to| pairs[from as usize * FORMATS + to as usize] += 1);
        for (slot, n) in self.0[TABLE..].iter_mut().zip(table) {
            *slot = n as u64;
        }
    }

    /// Adds another worker's counts to these.
    pub fn add(&mut self, other: &[u64; LEN]) {
        for (a, b) in self.0.iter_mut().zip(other) {
            *a += b;
        }
    }
}

/// What one scrape shows: the workers' counts (summed, and by worker where it says which
/// worker is busy) and what the process counts outside the engines.
#[derive(Debug, Default)]
pub struct Scrape {
    /// Each worker's table, and the CPU seconds its thread used.
    pub workers: Vec<(Counts, f64)>,
    /// SIP datagrams that did not parse.
    pub unparseable: u64,
    /// SIP datagrams and TCP messages dropped unread (banned sources, over their rate).
    pub refused: u64,
    /// Bindings in the location store, where the backend can count them (the local store).
    pub bindings: Option<u64>,
    /// Whole-call recordings that ended incomplete (counted by the recordings' writers).
    pub recordings_incomplete: u64,
    /// [`STORE_LATENCY`] tables, by backend name.
    pub store: Vec<(&'static str, Vec<u64>)>,
    /// The dispatch nodes (`[[dispatch]]` set name, node URI), in the order configured: the
    /// labels of the node series.
    pub nodes: Vec<(String, String)>,
}

impl fmt::Debug for Counts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Counts")
    }
}

impl Scrape {
    /// The Prometheus text exposition (OpenMetrics 1.0) of this scrape; metric names start
    /// with `strowger_`.
    pub fn render(self) -> String {
        let mut registry = Registry::with_prefix("strowger");
        registry.register_collector(Box::new(self));
        let mut out = String::new();
        // Writing to a String does not fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }

    fn total(&self) -> Counts {
        let mut all = Counts::default();
        for (c, _) in &self.workers {
            all.add(&c.0);
        }
        all
    }
}

/// A family of counters: `(labels, value)` for each series.
fn counters<'a, const N: usize>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = ([(&'a str, String); N], u64)>,
) -> fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in series {
        ConstCounter::new(v).encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

fn counter(enc: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> fmt::Result {
    let m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    ConstCounter::new(v).encode(m)
}

fn gauge(enc: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> fmt::Result {
    let m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    ConstGauge::new(v as i64).encode(m)
}

fn histogram(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    h: Hist,
    t: &[u64],
) -> fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Histogram)?;
    h.encode(t, &mut m)
}

/// A family of histograms labelled by `key`, a table each.
fn histograms<'a>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    key: &str,
    h: Hist,
    tables: impl IntoIterator<Item = (String, &'a [u64])>,
) -> fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Histogram)?;
    for (label, t) in tables {
        h.encode(t, &mut m.encode_family(&[(key, label)])?)?;
    }
    Ok(())
}

const DIRECTIONS: [&str; 2] = ["in", "out"];

impl Scrape {
    /// The edge's view of its dispatch nodes: up when every worker's probes say so, and the
    /// workers' counts summed. Nothing when strowger dispatches to no node.
    fn encode_nodes(&self, e: &mut DescriptorEncoder, t: &[u64]) -> fmt::Result {
        if self.nodes.is_empty() {
            return Ok(());
        }
        let nodes = self.nodes.iter().take(DISPATCH_NODES).enumerate();
        let series = |k: usize| {
            nodes.clone().map(move |(i, (set, uri))| {
                let labels = [("set", set.clone()), ("node", uri.clone())];
                (labels, t[NODES + i * NODE_SERIES + k])
            })
        };
        let workers = self.workers.len() as u64;
        let mut m = e.encode_descriptor(
            "dispatch_node_up",
            "Whether a dispatch node answers its probes (1) or is left out (0), as every worker sees it.",
            None,
            MetricType::Gauge,
        )?;
        for (labels, up) in series(0) {
            ConstGauge::new(i64::from(up == workers)).encode(m.encode_family(&labels)?)?;
        }
        let help = "OPTIONS probes a dispatch node failed (unanswered in time, or answered 5xx).";
        counters(e, "dispatch_probe_failures", help, series(1))?;
        let help = "Requests (calls, REGISTERs) the edge sent to a dispatch node.";
        counters(e, "dispatch_requests", help, series(2))?;
        let help =
            "Requests a dispatch node failed (503 or no answer) that went on to another node.";
        counters(e, "dispatch_failovers", help, series(3))
    }
}

impl Collector for Scrape {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let all = self.total();
        let t = &all.0[..];
        let e = &mut enc;
        gauge(
            e,
            "calls_in_progress",
            "Calls up or being set up.",
            t[CALLS],
        )?;
        // Causes without a name share "other", so each label appears once.
        let mut causes: Vec<(&str, u64)> = Vec::new();
        for (q850, &n) in t[ENDED..ENDED + CAUSES].iter().enumerate() {
            let name = Cause(q850 as u8).name().unwrap_or("other");
            match causes.iter_mut().find(|(c, _)| *c == name) {
                Some((_, total)) => *total += n,
                None if n > 0 => causes.push((name, n)),
                None => {}
            }
        }
        let causes = causes
            .into_iter()
            .map(|(c, n)| ([("cause", c.to_string())], n));
        counters(e, "calls", "Calls ended, by Q.850 hangup cause.", causes)?;
        let refused = REFUSALS
            .iter()
            .enumerate()
            .map(|(i, r)| ([("reason", r.to_string())], t[REFUSED + i]));
        let help = "New calls refused with 503, by reason: overloaded, signalling_late, \
                    draining, max_calls, no_rtp_port.";
        counters(e, "calls_refused", help, refused)?;
        let help = "Seconds from an INVITE to its call's answer or refusal.";
        histogram(e, "call_setup_seconds", help, SETUP, t)?;
        let requests = (0..2).flat_map(|d| {
            METHODS.iter().enumerate().map(move |(i, m)| {
                let labels = [
                    ("direction", DIRECTIONS[d].to_string()),
                    ("method", m.to_string()),
                ];
                (labels, t[REQUESTS + d * METHODS.len() + i])
            })
        });
        counters(
            e,
            "sip_requests",
            "SIP requests received and sent.",
            requests,
        )?;
        let responses = (0..2).flat_map(|d| {
            (0..CODE_LABELS).filter_map(move |i| {
                let n = t[RESPONSES + d * CODE_LABELS + i];
                let labels = [
                    ("direction", DIRECTIONS[d].to_string()),
                    ("code", code_label(i)),
                ];
                (n > 0).then_some((labels, n))
            })
        });
        counters(
            e,
            "sip_responses",
            "SIP responses received and sent.",
            responses,
        )?;
        let help = "Retransmitted SIP requests received, absorbed by their transaction.";
        counter(e, "sip_retransmissions", help, t[RETRANSMISSIONS])?;
        let dropped = [
            ("unparseable", self.unparseable),
            ("too_large", t[TOO_LARGE]),
            ("refused", self.refused),
        ]
        .map(|(r, n)| ([("reason", r.to_string())], n));
        let help = "SIP datagrams dropped: unparseable, over sip.max_message_size, or from a \
                    banned or rate-limited source.";
        counters(e, "sip_dropped", help, dropped)?;
        let help = "REGISTER requests accepted.";
        counter(e, "registrations", help, t[REGISTRATIONS])?;
        let help = "2xx answers to strowger's offers it could not take (a plain answer where \
                    rtp.srtp = \"require\", or no codec it offered): each leg was ACKed, then \
                    ended with a BYE.";
        counter(e, "sdp_answers_refused", help, t[ANSWERS_REFUSED])?;
        let help = "RTP packets on shared ports (rtp.shared_ports) from a source no leg there \
                    announced: dropped, and counted toward moving a leg that hears nothing.";
        counter(e, "rtp_stray_packets", help, t[STRAY_RTP])?;
        let help = "Legs moved off a shared port onto a port pair of their own by a re-INVITE: \
                    their far end sends from another address than its SDP names, or shares \
                    its address with another leg.";
        counter(e, "rtp_legs_moved", help, t[LEGS_MOVED])?;
        let help = "Whole-call recordings that ended incomplete: audio dropped because the \
                    writer fell behind, or a write that failed (the log names each file).";
        counter(e, "recordings_incomplete", help, self.recordings_incomplete)?;
        if let Some(b) = self.bindings {
            gauge(
                e,
                "registered_bindings",
                "Contacts bound in the location store.",
                b,
            )?;
        }
        let rtp = |i: usize| {
            [("out", t[RTP + i]), ("in", t[RTP + 2 + i])]
                .map(|(d, n)| ([("direction", d.to_string())], n))
        };
        counters(e, "rtp_packets", "RTP packets received and sent.", rtp(0))?;
        counters(
            e,
            "rtp_bytes",
            "RTP payload bytes received and sent.",
            rtp(1),
        )?;
        let sizes = [
            ("call_legs", "SIP and IAX2 legs of the calls in progress."),
            ("sip_transactions", "SIP transactions not yet terminated."),
            (
                "media_legs",
                "Media legs (RTP port pairs and IAX2 media) in use.",
            ),
            (
                "call_timers",
                "Call timers pending, ended calls' included until due.",
            ),
        ];
        for (i, (name, help)) in sizes.into_iter().enumerate() {
            gauge(e, name, help, t[TABLE + i])?;
        }
        self.encode_nodes(e, t)?;
        let help = "Fraction of the caller's RTP packets lost, per call ended.";
        histogram(e, "rtp_loss_ratio", help, LOSS, t)?;
        let help = "The caller's RTP interarrival jitter at the end of each call, in seconds.";
        histogram(e, "rtp_jitter_seconds", help, JITTER, t)?;
        let help = "Media passes that had to send a leg more than one frame to catch up.";
        counter(e, "media_late_frames", help, t[RTP + 4])?;
        let help = "SRTP/SRTCP packets dropped for failing authentication or being replays.";
        counter(e, "srtp_rejected_packets", help, t[RTP + 5])?;
        let help = "Datagrams on WebRTC legs refused by ICE: failed connectivity checks, and \
                    DTLS or SRTP from a source that passed no check.";
        counter(e, "ice_refused_packets", help, t[RTP + 6])?;
        let pairs = Format::all().iter().flat_map(|&from| {
            Format::all().iter().filter_map(move |&to| {
                let n = t[TRANSCODERS + from as usize * FORMATS + to as usize];
                let labels = [
                    ("from", from.name().to_string()),
                    ("to", to.name().to_string()),
                ];
                (n > 0).then_some((labels, n))
            })
        });
        let mut m = e.encode_descriptor(
            "transcoding",
            "Media legs translating from one codec to another.",
            None,
            MetricType::Gauge,
        )?;
        for (labels, n) in pairs {
            ConstGauge::new(n as i64).encode(m.encode_family(&labels)?)?;
        }
        let by_worker = self.workers.iter().enumerate();
        let lag = by_worker
            .clone()
            .map(|(w, (c, _))| (w.to_string(), &c.0[..]));
        let help = "How late each media pass ran after its 5 ms grid point, by worker.";
        histograms(e, "worker_tick_lag_seconds", help, "worker", TICK_LAG, lag)?;
        let mut m = e.encode_descriptor(
            "worker_cpu_seconds",
            "CPU time used by each worker thread.",
            None,
            MetricType::Counter,
        )?;
        for (w, (_, cpu)) in by_worker {
            ConstCounter::new(*cpu).encode(m.encode_family(&[("worker", w.to_string())])?)?;
        }
        let store = self.store.iter().map(|(b, t)| (b.to_string(), &t[..]));
        let help = "Seconds per location or credential store operation, by backend.";
        histograms(
            e,
            "store_operation_seconds",
            help,
            "backend",
            STORE_LATENCY,
            store,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_slots_take_the_first_bucket_at_or_above_the_value() {
        let (bucket, sum, add) = SETUP.slots(0.3);
        assert_eq!(bucket - SETUP.at, 4, "0.3 s is at most 0.5 s");
        assert_eq!(sum, SETUP.end() - 1);
        assert_eq!(add, 300_000);
        assert_eq!(SETUP.slots(0.01).0 - SETUP.at, 0, "a bound is inclusive");
        assert_eq!(SETUP.slots(1e9).0 - SETUP.at, SETUP.bounds.len(), "+Inf");
    }

    #[test]
    fn codes_outside_the_set_count_in_their_class() {
        assert_eq!(code_label(code_index(486)), "486");
        assert_eq!(code_label(code_index(499)), "4xx");
        assert_eq!(code_label(code_index(699)), "6xx");
        let mut c = Counts::default();
        c.sip_out(b"SIP/2.0 302 Moved\r\n\r\n");
        c.sip_out(b"FOO sip:x SIP/2.0\r\n\r\n");
        c.sip_out(b"BYE sip:x SIP/2.0\r\n\r\n");
        assert_eq!(c.0[RESPONSES + CODE_LABELS + code_index(399)], 1);
        assert_eq!(c.0[REQUESTS + METHODS.len() + 14], 1, "other");
        assert_eq!(c.0[REQUESTS + METHODS.len() + 2], 1, "BYE");
    }
}
