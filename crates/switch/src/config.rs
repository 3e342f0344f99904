//! The switch configuration: a TOML file (or the embedded `default.toml`) parsed,
//! checked and turned into typed settings. All checks happen at load so a running
//! switch never meets a bad regex or port range; every error carries
//! `file:line:column: key: message` and says what would be accepted.

mod api;
mod cdr;
mod cluster;
mod conference;
mod dispatch;
mod iax2;
mod ivr;
mod music;
mod parking;
mod queues;
pub(crate) mod raw;
mod source;
mod tls;
mod trunks;
mod voicemail;
mod ws;

pub use api::{Api, Tls as ApiTls};
pub use cdr::{Cdr, CdrDatabase};
pub use cluster::Cluster;
pub use conference::{Conference, Conferences};
pub use dispatch::{DispatchSet, Node as DispatchNode};
pub use iax2::{Iax2, IaxHost, IaxPeer, IAX2_PORT};
pub use ivr::{Ivr, Menu};
pub use music::MusicClass;
pub use parking::{Lot, Parking, DEFAULT_LOT};
pub use queues::{Queue, Strategy};
pub use tls::Tls;
pub use trunks::{trunk_target, Trunk, TrunkHost};
pub use voicemail::{valid_pin, Voicemail};
pub use ws::Ws;

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use sdp::{Caps, Codec};
use serde::Deserialize;
use toml_edit::Document;

use crate::dialplan::Dialplan;
use raw::{RawConfig, RawGeneral, RawProxy, RawRegistrar, RawRtp, RawSecurity, RawSip, RawUser};
pub use source::ConfigError;
pub(crate) use source::Diagnostics;

/// The configuration used when no file is given; its comments document the schema.
pub const DEFAULT_TOML: &str = include_str!("default.toml");

/// Codecs the media engine can encode and decode, by their name in `rtp.codecs`.
const SUPPORTED_CODECS: [(&str, Codec); 11] = [
    ("PCMU", Codec::PCMU),
    ("PCMA", Codec::PCMA),
    ("GSM", Codec::GSM),
    ("G722", Codec::G722),
    ("G726-32", Codec::G726_32),
    ("speex", Codec::SPEEX),
    ("speex16", Codec::SPEEX16),
    ("opus", Codec::OPUS),
    ("L16", Codec::L16),
    ("iLBC20", Codec::ILBC20),
    ("iLBC30", Codec::ILBC30),
];

/// A supported codec by its configuration name, case-insensitively; `speex/16000` and
/// `G726` are accepted too.
fn supported_codec(name: &str) -> Option<Codec> {
    let alias = match name.to_ascii_lowercase().as_str() {
        "g726" => Some(Codec::G726_32),
        "speex/16000" => Some(Codec::SPEEX16),
        "ilbc" => Some(Codec::ILBC30),
        _ => None,
    };
    alias.or_else(|| {
        SUPPORTED_CODECS
            .into_iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, c)| c)
    })
}

#[derive(Clone, Debug)]
pub struct Config {
    pub general: General,
    pub sip: Sip,
    pub rtp: Rtp,
    pub dialplan: Dialplan,
    pub registrar: Registrar,
    /// `[[users]]`: loaded into the store at start.
    pub users: Vec<User>,
    /// `[iax2]`: off unless `listen` is set.
    pub iax2: Iax2,
    /// `[proxy]`: domains served as a stateful proxy instead of the B2BUA.
    pub proxy: Proxy,
    /// `[[dispatch]]`: sets of nodes an edge spreads requests over.
    pub dispatch: Vec<DispatchSet>,
    /// `[security]`: who is trusted, and the limits that keep strangers out.
    pub security: Security,
    /// `[[trunks]]`: SIP trunks to providers.
    pub trunks: Vec<Trunk>,
    /// `[parking.LOT]` and `[pickup_groups]`.
    pub parking: Parking,
    /// `[queues.NAME]`: call queues.
    pub queues: Vec<Queue>,
    /// `[moh.NAME]`: music-on-hold classes.
    pub music: Vec<MusicClass>,
    /// `[sounds]` and `[menus.NAME]`: what `say`, `tts:` prompts and `menu` use.
    pub ivr: Ivr,
    /// `[voicemail]`: users' boxes and message-waiting indication.
    pub voicemail: Voicemail,
    /// `[conferences.NAME]`: conference rooms.
    pub conferences: Conferences,
    /// `[cluster]`: this node among the nodes sharing the store.
    pub cluster: Cluster,
    /// `[api]`: the control API.
    pub api: Api,
    /// `[cdr]`: the CDR database and its writer's limits.
    pub cdr: Cdr,
    /// Problems that do not stop loading, e.g. a variable nothing defines.
    pub warnings: Vec<ConfigError>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct General {
    /// Recordings, relative playback files and the CDR live here; relative to the cwd.
    pub data_dir: PathBuf,
    /// Worker threads; 0 means one per core.
    pub workers: usize,
    /// Calls beyond this many get 503 with `Retry-After: retry_after_s`.
    pub max_calls: u32,
    pub retry_after_s: u32,
    /// CDR file (JSON lines), relative to `data_dir`.
    pub cdr: PathBuf,
    /// The security log (failed authentications, bans: what fail2ban reads), relative to
    /// `data_dir`; None: only the main log has them.
    pub security_log: Option<PathBuf>,
    /// The least severe log events written (`--log-level` overrides).
    pub log_level: LogLevel,
    /// How log lines are written: text for people, JSON objects for log collectors.
    pub log_format: LogFormat,
    /// SCHED_FIFO priority of the worker threads (1-99); 0 leaves them to the normal scheduler.
    pub realtime_priority: u8,
    /// How long calls in progress may go on after SIGTERM before they get BYE (zero: none).
    pub drain_timeout: Duration,
    /// The DNS server trunk hosts are resolved with; None: those of /etc/resolv.conf.
    pub dns_server: Option<SocketAddr>,
}

/// `[registrar]`: REGISTER handling and the store behind it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registrar {
    /// The realm of digest challenges and the domain part of every AOR.
    pub domain: String,
    pub min_expires: u32,
    pub max_expires: u32,
    pub default_expires: u32,
    /// Digest authentication of REGISTER (off: any REGISTER is accepted, for a trusted
    /// network or a benchmark of the location store alone).
    pub authenticate: bool,
    /// `local:PATH`, `redis://HOST:PORT`, `redis+cluster://…` or `memcached://HOST:PORT`.
    pub store: String,
    /// How long a nonce is accepted before the phone is challenged again with stale=true.
    pub nonce_lifetime_s: u32,
    /// Digest algorithms offered in each 401, in this order (clients answer the first they know).
    pub algorithms: Vec<sip::auth::Algorithm>,
    /// Keep-alive period for contacts behind NAT (0: none), and what is sent.
    pub keepalive_s: u32,
    pub keepalive: KeepAliveKind,
    /// Contacts one address-of-record may have, and what a REGISTER that would add more gets.
    pub max_contacts: usize,
    pub contacts_overflow: store::Overflow,
    /// AORs (and as many users) a network store's read cache keeps for when the backend is
    /// away; the oldest go first, lapsed ones every half minute.
    pub cache_entries: usize,
}

/// `[proxy]`: strowger as a stateful proxy (RFC 3261 §16) for some domains.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Proxy {
    /// Requests for USER@DOMAIN with DOMAIN listed here go to USER's registered contact.
    pub domains: Vec<String>,
    /// Insert Record-Route, so requests later in the dialog pass through strowger too.
    pub record_route: bool,
    /// Challenge callers (407) for the credentials of a `[registrar]` user before forwarding.
    pub authenticate: bool,
    /// Forward a request for a domain not listed here (routed to strowger as an outbound
    /// proxy) when its caller authenticates as a user; otherwise such requests get 403.
    pub relay_for_users: bool,
    /// `proxy.dispatch`: the `[[dispatch]]` set (its index) the proxied domains go to instead
    /// of the users' registered contacts; REGISTERs for them go there too.
    pub dispatch: Option<usize>,
    /// `proxy.fork_timeout_s`: how long a group of a user's contacts (those of one q) rings
    /// before the group of the next lower q is tried too; zero: only once the group has failed.
    pub fork_timeout: Duration,
}

/// `[security]`: what strowger grants by address, and the limits that keep floods, scanners
/// and password guessers out (switch::guard; TCP limits in the shell).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Security {
    /// Trunks and edge proxies: their requests are not challenged and may carry a preloaded
    /// Route or a Path. Never rate-limited nor banned.
    pub trusted: crate::acl::Acl,
    /// Never rate-limited nor banned (nor capped per source over TCP).
    pub whitelist: crate::acl::Acl,
    /// How long a ban lasts; zero: nobody is banned (floods are still cut to the rate).
    pub ban: Duration,
    /// SIP datagrams (and TCP messages) a second one source may send, sustained, and in a
    /// burst; past that its datagrams are dropped and it is banned. Rate 0: no limit.
    pub requests_per_s: u32,
    pub request_burst: u32,
    /// Failed authentications from one source within `auth_window` that ban it (0: none do).
    pub max_auth_failures: u32,
    pub auth_window: Duration,
    /// User-Agent substrings (compared without case) of known scanners: their requests go
    /// unanswered.
    pub scanner_user_agents: Vec<String>,
    pub scanner_action: ScannerAction,
    /// TCP connections at once, in all and from one source (the whitelisted aside).
    pub tcp_max: u32,
    pub tcp_max_per_source: u32,
    /// A TCP connection that carried nothing either way this long is closed.
    pub tcp_idle: Duration,
    /// A TCP connection that carried no successful REGISTER or authenticated request this
    /// long after it opened is closed (trusted and whitelisted peers aside).
    pub tcp_unauthenticated: Duration,
    /// The context of callers that are neither users nor trusted peers; None: such callers are
    /// challenged for every extension.
    pub public_context: Option<String>,
}

/// What a request from a known scanner gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScannerAction {
    /// No answer; its source is logged once.
    Drop,
    /// No answer, and its source is banned.
    Ban,
}

/// What keeps a NAT binding open towards a registered phone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeepAliveKind {
    /// An OPTIONS request (RFC 3261 §11): the phone answers, so both directions see traffic.
    Options,
    /// A bare CRLF pair, the cheapest packet a SIP stack ignores (RFC 5626 §3.5.1 for UDP uses
    /// STUN; a CRLF is what most phones and proxies send instead).
    Crlf,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub user: String,
    pub password: String,
    pub domain: String,
    /// The dialplan context of the user's calls (None: `dialplan.default_context`).
    pub context: Option<String>,
    /// `"Name" <number>` or a number: the CALLER and From of the user's calls.
    pub caller_id: Option<String>,
    /// Calls at once; 0: no limit.
    pub max_calls: u32,
    /// Regexes the dialled extension must match one of (empty: any).
    pub allow: Vec<String>,
    /// Records the user's calls whole: a `RECORD_CALLS` value (call_recording.rs).
    pub record_calls: Option<String>,
    /// How the user's phones send and take digits; None: `rtp.dtmf`.
    pub dtmf: Option<media::DtmfMode>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

impl LogLevel {
    pub const NAMES: [&str; 5] = ["error", "warn", "info", "debug", "trace"];
}

impl FromStr for LogLevel {
    type Err = String;

    fn from_str(s: &str) -> Result<LogLevel, String> {
        match s {
            "error" => Ok(LogLevel::Error),
            "warn" => Ok(LogLevel::Warn),
            "info" => Ok(LogLevel::Info),
            "debug" => Ok(LogLevel::Debug),
            "trace" => Ok(LogLevel::Trace),
            _ => Err(format!(
                "{s:?} — expected one of {}",
                LogLevel::NAMES.join(", ")
            )),
        }
    }
}

/// `general.log_format`: one line of text per event, or one JSON object per line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sip {
    pub listen: Vec<Listen>,
    /// RFC 3261 §17 timers.
    pub t1: Duration,
    pub t2: Duration,
    pub t4: Duration,
    pub user_agent: String,
    /// Larger requests are answered 513.
    pub max_message_size: usize,
    /// RFC 4028 session timer we ask for, and the smallest we accept, in seconds.
    pub session_expires: u32,
    pub min_se: u32,
    /// Option tags accepted in `Require`; others get 420 Bad Extension.
    pub accept_require: Vec<String>,
    pub tls: Tls,
    pub ws: Ws,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Udp,
    Tcp,
    Tls,
    /// SIP over WebSocket (RFC 7118), and over secure WebSocket with the TLS certificate.
    Ws,
    Wss,
}

impl Transport {
    /// How `sip.listen` writes it.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Udp => "udp",
            Transport::Tcp => "tcp",
            Transport::Tls => "tls",
            Transport::Ws => "ws",
            Transport::Wss => "wss",
        }
    }
}

impl From<Transport> for sip::transaction::Transport {
    fn from(t: Transport) -> Self {
        match t {
            Transport::Udp => Self::Udp,
            Transport::Tcp => Self::Tcp,
            Transport::Tls => Self::Tls,
            Transport::Ws => Self::Ws,
            Transport::Wss => Self::Wss,
        }
    }
}

/// One SIP listening socket, written `udp:127.0.0.1:5060` or `tcp:[::1]:5060`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listen {
    pub transport: Transport,
    pub addr: SocketAddr,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rtp {
    pub ports: PortRange,
    /// Hang up after this long without RTP from the remote; `None` never does.
    pub media_timeout: Option<Duration>,
    /// Hang up after this long without RTP or RTCP from a held remote; `None` never does.
    pub hold_timeout: Option<Duration>,
    pub rtcp_interval: Duration,
    /// Preference order for offers and answers.
    pub codecs: Vec<Codec>,
    /// Dynamic payload type for telephone-event in our offers.
    pub dtmf_pt: u8,
    /// Send RTP to where the remote's RTP comes from (NAT), not to its SDP address.
    pub symmetric: bool,
    /// Each worker serves its legs from a few RTP ports, told apart by the far end's address,
    /// instead of a port pair per leg (legs whose far end cannot be told apart so keep a pair).
    pub shared_ports: bool,
    /// Speex encoder quality, 0-10.
    pub speex_quality: u8,
    /// Settings of every Opus encoder of calls (`rtp.opus_*`).
    pub opus: codec::OpusOptions,
    /// How digits are taken from the far ends and given to them.
    pub dtmf: media::DtmfMode,
    /// The addresses announced in SDP, Contact and Via instead of the listen address of that
    /// family (a server behind NAT); None: the listen address.
    pub advertise_ipv4: Option<IpAddr>,
    pub advertise_ipv6: Option<IpAddr>,
    /// SRTP keyed by SDES on legs signalled over TLS, and WebRTC on legs over WebSockets.
    pub srtp: crate::sdes::SrtpPolicy,
    /// The host candidate address of WebRTC legs; None: the address in their SDP.
    pub webrtc_public_address: Option<IpAddr>,
}

/// RTP ports `lo..=hi`; RTP uses the even ones, RTCP the odd one above.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortRange {
    pub lo: u16,
    pub hi: u16,
}

impl Config {
    /// Parses and validates `text` (one parse: the document that gives errors their line and
    /// column is the one deserialized); `file` is only used in messages. On failure every
    /// problem found is returned, warnings included, in file order. Unknown keys and
    /// type mismatches stop serde at the first one; all other checks run to the end.
    pub fn from_str(text: &str, file: &str) -> Result<Config, Vec<ConfigError>> {
        let doc = Document::parse(text)
            .map_err(|e| vec![source::syntax_error(file, text, e.span(), e.message())])?;
        let mut d = Diagnostics::new(file, text, &doc);
        let de = toml_edit::de::Deserializer::from(doc.clone());
        let raw = match <RawConfig as serde::Deserialize>::deserialize(de) {
            Ok(raw) => raw,
            Err(e) => {
                d.serde(e.span(), e.message());
                return Err(d.found);
            }
        };
        let general = general(raw.general, &mut d);
        let sip = sip(raw.sip, &mut d);
        let rtp = rtp(raw.rtp, &mut d);
        check_wildcards(&sip, &rtp, &mut d);
        let dialplan = Dialplan::compile(&raw.dialplan, raw.vars, &raw.ring_groups, &mut d);
        let registrar = registrar(raw.registrar, &mut d);
        let users = users(raw.users, &registrar.domain, &dialplan, &mut d);
        let iax2 = iax2::iax2(raw.iax2, &rtp.codecs, &mut d);
        let dispatch_to = raw.proxy.dispatch.clone();
        let mut proxy = proxy(raw.proxy, &mut d);
        let dispatch = dispatch::dispatch(raw.dispatch, &mut d);
        proxy.dispatch = dispatch::link(&dispatch_to, &dispatch, &proxy.domains, &mut d);
        let security = security(raw.security, &dialplan, &mut d);
        let trunks = trunks::trunks(raw.trunks, &mut d);
        let music = music::music(raw.moh, &mut d);
        let parking = parking::parking(raw.parking, raw.pickup_groups, &music, &mut d);
        trunks::check_dialplan(&trunks, &raw.dialplan, |c| dialplan.has_context(c), &mut d);
        let queues = queues::queues(raw.queues, &mut d);
        let voicemail = voicemail::voicemail(raw.voicemail, &mut d);
        queues::check_dialplan(&queues, &raw.dialplan, &mut d);
        queues::check_music(&queues, &music, &mut d);
        let ivr = ivr::ivr(raw.sounds, raw.menus, &mut d);
        ivr::check_dialplan(&ivr, &raw.dialplan, &mut d);
        if let Some(public) = &security.public_context {
            check_public_gotos(public, &raw.dialplan, &ivr, &mut d);
        }
        let conferences = conference::conferences(raw.conferences, &mut d);
        let cluster = cluster::cluster(raw.cluster, &mut d);
        let api = api::api(raw.api, &mut d);
        let cdr = cdr::cdr(raw.cdr, &mut d);
        for (i, p) in iax2.peers.iter().enumerate() {
            if let Some(c) = &p.context {
                if !dialplan.has_context(c) {
                    d.error(
                        &format!("iax2.peers[{i}].context"),
                        format_args!("no dialplan context {c:?}"),
                    );
                }
            }
        }
        let mut found = d.found;
        found.sort_by_key(|e| (e.line, e.column));
        if found.iter().any(|e| !e.warning) {
            return Err(found);
        }
        Ok(Config {
            general,
            sip,
            rtp,
            dialplan,
            registrar,
            users,
            iax2,
            proxy,
            dispatch,
            security,
            trunks,
            parking,
            queues,
            music,
            ivr,
            voicemail,
            conferences,
            cluster,
            api,
            cdr,
            warnings: found,
        })
    }

    /// The embedded default configuration.
    pub fn embedded() -> Config {
        Config::from_str(DEFAULT_TOML, "default.toml").expect("the embedded default.toml is valid")
    }

    /// `--sip-listen ADDR:PORT[,ADDR:PORT...]`: listen on UDP and TCP there instead of the
    /// configured list (one address of each family for dual-stack media).
    pub fn override_sip_listen(&mut self, addrs: &str) -> Result<(), String> {
        let mut listen = Vec::new();
        for text in addrs.split(',') {
            let addr: SocketAddr = text.parse().map_err(|_| {
                format!(
                    "--sip-listen {text:?} — expected ADDRESS:PORT[,ADDRESS:PORT...], e.g. 127.0.0.1:5060,[::1]:5060"
                )
            })?;
            listen.extend(
                [Transport::Udp, Transport::Tcp].map(|transport| Listen { transport, addr }),
            );
        }
        self.sip.listen = listen;
        Ok(())
    }

    /// `--tls-listen`, `--ws-listen` or `--wss-listen ADDR:PORT`: a listener of that transport
    /// besides the configured ones.
    pub fn add_listen(&mut self, transport: Transport, addr: &str) -> Result<(), String> {
        let addr = addr.parse().map_err(|_| {
            format!(
                "--{}-listen {addr:?} — expected ADDRESS:PORT, e.g. 127.0.0.1:5061",
                transport.name()
            )
        })?;
        let l = Listen { transport, addr };
        if !self.sip.listen.contains(&l) {
            self.sip.listen.push(l);
        }
        Ok(())
    }

    /// `--rtp-ports LO-HI`.
    pub fn override_rtp_ports(&mut self, ports: &str) -> Result<(), String> {
        self.rtp.ports = ports.parse().map_err(|e| format!("--rtp-ports {e}"))?;
        Ok(())
    }

    /// `--log-level LEVEL`.
    pub fn override_log_level(&mut self, level: &str) -> Result<(), String> {
        self.general.log_level = level.parse().map_err(|e| format!("--log-level {e}"))?;
        Ok(())
    }

    /// `--data-dir DIR`.
    pub fn override_data_dir(&mut self, dir: &str) -> Result<(), String> {
        if dir.is_empty() {
            return Err("--data-dir must not be empty".into());
        }
        self.general.data_dir = dir.into();
        Ok(())
    }
}

impl Rtp {
    /// The SDP capabilities these settings describe.
    pub fn caps(&self) -> Caps {
        Caps {
            codecs: self.codecs.clone(),
            dtmf_pt: Some(self.dtmf_pt),
        }
    }
}

impl PortRange {
    /// Number of RTP/RTCP pairs, i.e. concurrent media streams.
    pub fn pairs(&self) -> usize {
        usize::from(self.hi - self.lo).div_ceil(2)
    }
}

impl FromStr for PortRange {
    type Err = String;

    fn from_str(s: &str) -> Result<PortRange, String> {
        let parsed = s.split_once('-').and_then(|(lo, hi)| {
            Some((
                lo.trim().parse::<u16>().ok()?,
                hi.trim().parse::<u16>().ok()?,
            ))
        });
        match parsed {
            Some((lo, hi)) if lo < hi && lo % 2 == 0 => Ok(PortRange { lo, hi }),
            _ => Err(format!(
                "{s:?} — expected LO-HI with LO < HI, even LO, e.g. \"10000-19999\""
            )),
        }
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.lo, self.hi)
    }
}

impl FromStr for Listen {
    type Err = String;

    fn from_str(s: &str) -> Result<Listen, String> {
        let parsed = s.split_once(':').and_then(|(transport, addr)| {
            let transport = match transport {
                "udp" => Transport::Udp,
                "tcp" => Transport::Tcp,
                "tls" => Transport::Tls,
                "ws" => Transport::Ws,
                "wss" => Transport::Wss,
                _ => return None,
            };
            Some(Listen {
                transport,
                addr: addr.parse().ok()?,
            })
        });
        parsed.ok_or_else(|| {
            format!(
                "{s:?} — expected udp:, tcp:, tls:, ws: or wss:ADDRESS:PORT with an IP \
                 address, e.g. \"udp:127.0.0.1:5060\" or \"wss:[::1]:8089\""
            )
        })
    }
}

impl fmt::Display for Listen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.transport.name(), self.addr)
    }
}

/// `value` if within `lo..=hi`, else an error naming the range (and `lo` to carry on).
fn bounded(d: &mut Diagnostics, key: &str, value: u64, lo: u64, hi: u64) -> u64 {
    if (lo..=hi).contains(&value) {
        value
    } else {
        d.error(
            key,
            format_args!("{value} is out of range — expected {lo} to {hi}"),
        );
        lo
    }
}

/// Every step from which `named` takes a name (a queue's, a menu's) must name one of the
/// `defined` `[TABLE.NAME]` tables; `what` is the thing named, for the message.
fn check_named(
    raw: &raw::RawDialplan,
    (what, table): (&str, &str),
    defined: &[&str],
    named: impl Fn(crate::dialplan::Step) -> Option<String>,
    d: &mut Diagnostics,
) {
    for (key, text) in raw.steps() {
        let Some(name) = crate::dialplan::Step::parse(text).ok().and_then(&named) else {
            continue;
        };
        if !defined.contains(&name.as_str()) {
            let list = match defined {
                [] => "none".to_string(),
                names => names.join(", "),
            };
            d.error(
                &key,
                format_args!("no {what} {name:?} — defined: {list} (add a [{table}.{name}] table)"),
            );
        }
    }
}

/// The public context (callers without a password) may go on only within itself: a `goto`
/// elsewhere — in one of its rules, or in a menu one of them runs — would hand strangers the
/// extensions of a context meant for users.
fn check_public_gotos(public: &str, raw: &raw::RawDialplan, ivr: &Ivr, d: &mut Diagnostics) {
    use crate::dialplan::Step;
    let leaves = |step: &Step| match step {
        Step::Goto { context, .. } if context != public => Some(context.clone()),
        _ => None,
    };
    let prefix = format!("dialplan.contexts.{public}.rules[");
    let mut menus = Vec::new();
    for (key, text) in raw.steps().filter(|(k, _)| k.starts_with(&prefix)) {
        let Ok(step) = Step::parse(text) else {
            continue;
        };
        if let Step::Menu { name } = &step {
            menus.push(name.clone());
        }
        if let Some(other) = leaves(&step) {
            d.error(
                &key,
                format_args!("goes to context {other:?} from the public context {public:?}, so callers without a password would reach it — go to an extension of {public:?} instead"),
            );
        }
    }
    for name in menus {
        let Some(menu) = ivr.menus.get(&name) else {
            continue;
        };
        let steps = menu
            .choices
            .iter()
            .map(|(k, s)| (format!("choices.{k:?}"), s));
        for (what, step) in steps.chain([("fallback".to_string(), &menu.fallback)]) {
            if let Some(other) = leaves(step) {
                d.error(
                    &format!("menus.{name}.{what}"),
                    format_args!("goes to context {other:?}, and the public context {public:?} runs this menu, so callers without a password would reach it — give the public context a menu of its own"),
                );
            }
        }
    }
}

/// Narrows a value `bounded` has already range-checked.
fn narrow<T: TryFrom<u64> + Default>(value: u64) -> T {
    T::try_from(value).unwrap_or_default()
}

fn non_empty(d: &mut Diagnostics, key: &str, value: &str) {
    if value.is_empty() {
        d.error(key, "must not be empty");
    }
}

fn general(raw: RawGeneral, d: &mut Diagnostics) -> General {
    non_empty(d, "general.data_dir", &raw.data_dir);
    non_empty(d, "general.cdr", &raw.cdr);
    General {
        workers: narrow(bounded(d, "general.workers", raw.workers, 0, 64)),
        max_calls: narrow(bounded(d, "general.max_calls", raw.max_calls, 1, 1_000_000)),
        retry_after_s: narrow(bounded(
            d,
            "general.retry_after_s",
            raw.retry_after_s,
            1,
            3600,
        )),
        data_dir: raw.data_dir.into(),
        cdr: raw.cdr.into(),
        security_log: (!raw.security_log.is_empty()).then(|| raw.security_log.into()),
        log_level: raw.log_level,
        log_format: raw.log_format,
        realtime_priority: narrow(bounded(
            d,
            "general.realtime_priority",
            raw.realtime_priority,
            0,
            99,
        )),
        drain_timeout: Duration::from_secs(bounded(
            d,
            "general.drain_timeout_s",
            raw.drain_timeout_s,
            0,
            86_400,
        )),
        dns_server: raw.dns_server.as_deref().and_then(|s| {
            let addr = s
                .parse::<SocketAddr>()
                .ok()
                .or_else(|| Some(SocketAddr::new(sip::uri::host_ip(s)?, 53)));
            if addr.is_none() {
                d.error(
                    "general.dns_server",
                    format_args!("{s:?} — expected an IP address with an optional port, e.g. \"127.0.0.1:5353\" or \"192.0.2.53\""),
                );
            }
            addr
        }),
    }
}

fn sip(raw: RawSip, d: &mut Diagnostics) -> Sip {
    if raw.listen.is_empty() {
        d.error(
            "sip.listen",
            "needs at least one address, e.g. [\"udp:127.0.0.1:5060\"]",
        );
    }
    let mut listen = Vec::new();
    for (i, text) in raw.listen.iter().enumerate() {
        let key = format!("sip.listen[{i}]");
        match text.parse::<Listen>() {
            Ok(l) if listen.contains(&l) => d.error(&key, format_args!("{text:?} is listed twice")),
            Ok(l) => listen.push(l),
            Err(e) => d.error(&key, e),
        }
    }
    let t1 = bounded(d, "sip.t1_ms", raw.t1_ms, 1, 60_000);
    let t2 = bounded(d, "sip.t2_ms", raw.t2_ms, t1, 600_000);
    let min_se = bounded(d, "sip.min_se", raw.min_se, 90, 86_400);
    let session_expires = bounded(
        d,
        "sip.session_expires",
        raw.session_expires,
        min_se,
        86_400,
    );
    for (i, tag) in raw.accept_require.iter().enumerate() {
        if tag.is_empty()
            || !tag
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-.!%*_+`'~".contains(&b))
        {
            d.error(
                &format!("sip.accept_require[{i}]"),
                format_args!("{tag:?} is not an option tag, e.g. \"timer\""),
            );
        }
    }
    non_empty(d, "sip.user_agent", &raw.user_agent);
    let tls = tls::tls(&raw, d);
    let ws = ws::ws(&raw, d);
    Sip {
        tls,
        ws,
        listen,
        t1: Duration::from_millis(t1),
        t2: Duration::from_millis(t2),
        t4: Duration::from_millis(bounded(d, "sip.t4_ms", raw.t4_ms, 1, 60_000)),
        user_agent: raw.user_agent,
        max_message_size: narrow(bounded(
            d,
            "sip.max_message_size",
            raw.max_message_size,
            1500,
            1 << 20,
        )),
        session_expires: narrow(session_expires),
        min_se: narrow(min_se),
        accept_require: raw.accept_require,
    }
}

fn registrar(raw: RawRegistrar, d: &mut Diagnostics) -> Registrar {
    non_empty(d, "registrar.domain", &raw.domain);
    if let Err(e) = raw.store.parse::<store::StoreUrl>() {
        d.error("registrar.store", e);
    }
    let min = bounded(d, "registrar.min_expires", raw.min_expires, 1, 86_400);
    let max = bounded(d, "registrar.max_expires", raw.max_expires, min, 604_800);
    let default = bounded(
        d,
        "registrar.default_expires",
        raw.default_expires,
        min,
        max,
    );
    let nonce = bounded(
        d,
        "registrar.nonce_lifetime_s",
        raw.nonce_lifetime_s,
        1,
        86_400,
    );
    let mut algorithms = Vec::new();
    for (i, a) in raw.algorithms.iter().enumerate() {
        let key = format!("registrar.algorithms[{i}]");
        match sip::auth::Algorithm::parse(Some(a)) {
            Some(alg) if !algorithms.contains(&alg) => algorithms.push(alg),
            Some(_) => d.error(&key, format_args!("{a:?} is listed twice")),
            None => d.error(
                &key,
                format_args!("{a:?} is not a digest algorithm — use \"MD5\" and/or \"SHA-256\""),
            ),
        }
    }
    if raw.algorithms.is_empty() {
        d.error(
            "registrar.algorithms",
            "must not be empty — use [\"MD5\", \"SHA-256\"]",
        );
    }
    let keepalive_s = bounded(d, "registrar.keepalive_s", raw.keepalive_s, 0, 3600);
    let keepalive = match raw.keepalive.to_ascii_lowercase().as_str() {
        "options" => KeepAliveKind::Options,
        "crlf" => KeepAliveKind::Crlf,
        other => {
            d.error(
                "registrar.keepalive",
                format_args!("{other:?} — expected \"options\" or \"crlf\""),
            );
            KeepAliveKind::Options
        }
    };
    let max_contacts = bounded(d, "registrar.max_contacts", raw.max_contacts, 1, 1000);
    let contacts_overflow = match raw.contacts_overflow.to_ascii_lowercase().as_str() {
        "refuse" => store::Overflow::Refuse,
        "replace_oldest" => store::Overflow::ReplaceOldest,
        other => {
            d.error(
                "registrar.contacts_overflow",
                format_args!("{other:?} — expected \"refuse\" or \"replace_oldest\""),
            );
            store::Overflow::Refuse
        }
    };
    Registrar {
        domain: raw.domain,
        min_expires: narrow(min),
        max_expires: narrow(max),
        default_expires: narrow(default),
        authenticate: raw.authenticate,
        store: raw.store,
        nonce_lifetime_s: narrow(nonce),
        algorithms,
        keepalive_s: narrow(keepalive_s),
        keepalive,
        max_contacts: narrow(max_contacts),
        contacts_overflow,
        cache_entries: narrow(bounded(
            d,
            "registrar.cache_entries",
            raw.cache_entries,
            1,
            10_000_000,
        )),
    }
}

fn proxy(raw: RawProxy, d: &mut Diagnostics) -> Proxy {
    for (i, dom) in raw.domains.iter().enumerate() {
        if dom.is_empty() || dom.contains(['@', ':', ' ', ';', '<', '>']) {
            d.error(
                &format!("proxy.domains[{i}]"),
                format_args!(
                    "{dom:?} — expected a host name or IP address, e.g. \"proxy.example.com\""
                ),
            );
        }
    }
    Proxy {
        domains: raw.domains.iter().map(|d| d.to_ascii_lowercase()).collect(),
        record_route: raw.record_route,
        authenticate: raw.authenticate,
        relay_for_users: raw.relay_for_users,
        dispatch: None,
        fork_timeout: Duration::from_secs(bounded(
            d,
            "proxy.fork_timeout_s",
            raw.fork_timeout_s,
            0,
            3600,
        )),
    }
}

fn acl(list: &[String], key: &str, d: &mut Diagnostics) -> crate::acl::Acl {
    let mut acl = crate::acl::Acl::default();
    for (i, t) in list.iter().enumerate() {
        match t.parse() {
            Ok(c) => acl.0.push(c),
            Err(e) => d.error(&format!("{key}[{i}]"), e),
        }
    }
    acl
}

fn security(raw: RawSecurity, dialplan: &Dialplan, d: &mut Diagnostics) -> Security {
    let trusted = acl(&raw.trusted, "security.trusted", d);
    let whitelist = acl(&raw.whitelist, "security.whitelist", d);
    let day = 86_400;
    let ban = bounded(d, "security.ban_s", raw.ban_s, 0, 30 * day);
    let requests_per_s = bounded(
        d,
        "security.requests_per_s",
        raw.requests_per_s,
        0,
        1_000_000,
    );
    let request_burst = bounded(
        d,
        "security.request_burst",
        raw.request_burst,
        1,
        10_000_000,
    );
    if requests_per_s > 0 && request_burst < requests_per_s {
        d.error(
            "security.request_burst",
            format_args!(
                "{request_burst} is below security.requests_per_s ({requests_per_s}) — a burst \
                 must hold at least a second of the rate"
            ),
        );
    }
    let max_auth_failures = bounded(
        d,
        "security.max_auth_failures",
        raw.max_auth_failures,
        0,
        1_000_000,
    );
    let auth_window = bounded(d, "security.auth_window_s", raw.auth_window_s, 1, day);
    for (i, ua) in raw.scanner_user_agents.iter().enumerate() {
        if ua.trim().is_empty() {
            d.error(
                &format!("security.scanner_user_agents[{i}]"),
                "must not be empty (it would match every User-Agent)",
            );
        }
    }
    let scanner_action = match raw.scanner_action.as_str() {
        "drop" => ScannerAction::Drop,
        "ban" => ScannerAction::Ban,
        other => {
            d.error(
                "security.scanner_action",
                format_args!("{other:?} — expected \"drop\" or \"ban\""),
            );
            ScannerAction::Drop
        }
    };
    let tcp_max = bounded(d, "security.tcp_max", raw.tcp_max, 1, 1_000_000);
    let tcp_max_per_source = bounded(
        d,
        "security.tcp_max_per_source",
        raw.tcp_max_per_source,
        1,
        1_000_000,
    );
    let tcp_idle = bounded(d, "security.tcp_idle_s", raw.tcp_idle_s, 1, day);
    let tcp_unauthenticated = bounded(
        d,
        "security.tcp_unauthenticated_s",
        raw.tcp_unauthenticated_s,
        1,
        day,
    );
    let public_context = match raw.public_context {
        // Not set: the `public` context if the dialplan has one.
        None => Some("public".to_string()).filter(|c| dialplan.has_context(c)),
        Some(c) if c.is_empty() => None,
        Some(c) if !dialplan.has_context(&c) => {
            d.error(
                "security.public_context",
                format_args!(
                    "no dialplan context {c:?} — define [[dialplan.contexts.{c}.rules]], or set \"\" so that every caller must be a user or a trusted peer"
                ),
            );
            None
        }
        Some(c) => Some(c),
    };
    if let Some(c) = &public_context {
        if let Some(i) = dialplan.catch_all(c) {
            d.error(
                &format!("dialplan.contexts.{c}.rules[{i}]"),
                format_args!(
                    "matches every extension, so callers that are not users would never be asked for a password: the public context {c:?} may list only the extensions anyone may call"
                ),
            );
        }
    }
    Security {
        trusted,
        public_context,
        whitelist,
        ban: Duration::from_secs(ban),
        requests_per_s: narrow(requests_per_s),
        request_burst: narrow(request_burst),
        max_auth_failures: narrow(max_auth_failures),
        auth_window: Duration::from_secs(auth_window),
        scanner_user_agents: raw
            .scanner_user_agents
            .iter()
            .map(|s| s.trim().to_ascii_lowercase())
            .filter(|s| !s.is_empty())
            .collect(),
        scanner_action,
        tcp_max: narrow(tcp_max),
        tcp_max_per_source: narrow(tcp_max_per_source),
        tcp_idle: Duration::from_secs(tcp_idle),
        tcp_unauthenticated: Duration::from_secs(tcp_unauthenticated),
    }
}

fn users(raw: Vec<RawUser>, domain: &str, dialplan: &Dialplan, d: &mut Diagnostics) -> Vec<User> {
    let mut out: Vec<User> = Vec::new();
    // (user, domain) seen so far: a set, so tens of thousands of users load in linear time.
    let mut seen = std::collections::HashSet::new();
    for (i, u) in raw.into_iter().enumerate() {
        let key = format!("users[{i}]");
        if u.user.is_empty() || u.user.contains(['@', ':', ' ', '"']) {
            d.error(
                &format!("{key}.user"),
                format_args!(
                    "{:?} — expected a SIP user name such as \"1001\" (no @, :, spaces or quotes)",
                    u.user
                ),
            );
        }
        if u.password.is_empty() {
            d.error(&format!("{key}.password"), "must not be empty");
        }
        let domain = u.domain.unwrap_or_else(|| domain.to_string());
        if !seen.insert((u.user.clone(), domain.clone())) {
            d.error(
                &format!("{key}.user"),
                format_args!("{}@{domain} is listed twice", u.user),
            );
        }
        if let Some(c) = &u.context {
            if !dialplan.has_context(c) {
                d.error(
                    &format!("{key}.context"),
                    format_args!("no dialplan context {c:?}"),
                );
            }
        }
        if let Some(id) = &u.caller_id {
            if let Err(e) = crate::auth::CallerId::parse(id) {
                d.error(&format!("{key}.caller_id"), e);
            }
        }
        for (j, a) in u.allow.iter().enumerate() {
            if let Err(e) = crate::auth::check_pattern(a) {
                d.error(&format!("{key}.allow[{j}]"), e);
            }
        }
        if let Some(Err(e)) = u
            .record_calls
            .as_deref()
            .map(crate::call_recording::RecordCalls::parse)
        {
            d.error(&format!("{key}.record_calls"), e);
        }
        let dtmf = u.dtmf.map(|m| dtmf_mode(d, &format!("{key}.dtmf"), &m));
        let max_calls = bounded(d, &format!("{key}.max_calls"), u.max_calls, 0, 1_000_000);
        out.push(User {
            user: u.user,
            password: u.password,
            domain,
            context: u.context,
            caller_id: u.caller_id,
            max_calls: narrow(max_calls),
            allow: u.allow,
            record_calls: u.record_calls,
            dtmf,
        });
    }
    out
}

fn rtp(raw: RawRtp, d: &mut Diagnostics) -> Rtp {
    let ports = raw.ports.parse().unwrap_or_else(|e| {
        d.error("rtp.ports", e);
        PortRange {
            lo: 10000,
            hi: 19999,
        }
    });
    if raw.codecs.is_empty() {
        d.error(
            "rtp.codecs",
            "needs at least one codec, e.g. [\"PCMU\", \"PCMA\"]",
        );
    }
    let mut codecs = Vec::new();
    for (i, name) in raw.codecs.iter().enumerate() {
        let key = format!("rtp.codecs[{i}]");
        match supported_codec(name) {
            Some(c) if codecs.contains(&c) => {
                d.error(&key, format_args!("{name:?} is listed twice"))
            }
            Some(c) => codecs.push(c),
            None => {
                let supported: Vec<_> = SUPPORTED_CODECS.iter().map(|(n, _)| *n).collect();
                d.error(
                    &key,
                    format_args!(
                        "unknown codec {name:?} — supported: {}",
                        supported.join(", ")
                    ),
                );
            }
        }
    }
    let media_timeout = bounded(d, "rtp.media_timeout_s", raw.media_timeout_s, 0, 86_400);
    let hold_timeout = bounded(d, "rtp.hold_timeout_s", raw.hold_timeout_s, 0, 86_400);
    Rtp {
        ports,
        media_timeout: (media_timeout > 0).then(|| Duration::from_secs(media_timeout)),
        hold_timeout: (hold_timeout > 0).then(|| Duration::from_secs(hold_timeout)),
        rtcp_interval: Duration::from_secs(bounded(
            d,
            "rtp.rtcp_interval_s",
            raw.rtcp_interval_s,
            1,
            300,
        )),
        codecs,
        dtmf_pt: narrow(bounded(d, "rtp.dtmf_pt", raw.dtmf_pt, 96, 127)),
        symmetric: raw.symmetric,
        shared_ports: raw.shared_ports,
        speex_quality: narrow(bounded(d, "rtp.speex_quality", raw.speex_quality, 0, 10)),
        opus: codec::OpusOptions {
            bitrate: narrow(bounded(
                d,
                "rtp.opus_bitrate",
                raw.opus_bitrate,
                6000,
                510_000,
            )),
            complexity: narrow(bounded(
                d,
                "rtp.opus_complexity",
                raw.opus_complexity,
                0,
                10,
            )),
            fec: raw.opus_fec,
            dtx: raw.opus_dtx,
            ..codec::OpusOptions::default()
        },
        dtmf: dtmf_mode(d, "rtp.dtmf", &raw.dtmf),
        advertise_ipv4: advertise(d, "rtp.advertise_ipv4", &raw.advertise_ipv4, false),
        advertise_ipv6: advertise(d, "rtp.advertise_ipv6", &raw.advertise_ipv6, true),
        srtp: crate::sdes::SrtpPolicy::parse(&raw.srtp).unwrap_or_else(|| {
            let expected = "expected \"offer\", \"require\" or \"refuse\"";
            d.error("rtp.srtp", format_args!("{:?} — {expected}", raw.srtp));
            crate::sdes::SrtpPolicy::Offer
        }),
        webrtc_public_address: public_address(d, &raw.webrtc_public_address),
    }
}

/// `rtp.webrtc_public_address`: "" for the SDP's address, else a unicast address browsers
/// can send to.
fn public_address(d: &mut Diagnostics, text: &str) -> Option<IpAddr> {
    if text.is_empty() {
        return None;
    }
    match text.parse::<IpAddr>() {
        Ok(ip) if !ip.is_unspecified() && !ip.is_multicast() => Some(ip),
        _ => {
            let why =
                "expected a unicast address browsers can reach, or \"\" for the address in the SDP";
            d.error(
                "rtp.webrtc_public_address",
                format_args!("{text:?} — {why}"),
            );
            None
        }
    }
}

/// An `rtp.advertise_ipv*` address: "" for none, else a unicast address of that family that
/// far ends can send to.
fn advertise(d: &mut Diagnostics, key: &str, text: &str, v6: bool) -> Option<IpAddr> {
    if text.is_empty() {
        return None;
    }
    let family = if v6 { "IPv6" } else { "IPv4" };
    match text.parse::<IpAddr>() {
        Ok(ip) if ip.is_ipv6() == v6 && !ip.is_unspecified() && !ip.is_multicast() => Some(ip),
        _ => {
            d.error(
                key,
                format_args!("{text:?} — expected an {family} unicast address far ends can reach, or \"\" for the listen address"),
            );
            None
        }
    }
}

/// A wildcard UDP listen address cannot go into SDP, Contact or Via: its family needs an
/// advertised address.
fn check_wildcards(sip: &Sip, rtp: &Rtp, d: &mut Diagnostics) {
    for (i, l) in sip.listen.iter().enumerate() {
        let (v6, advertised) = match l.addr {
            SocketAddr::V4(_) => (false, rtp.advertise_ipv4.is_some()),
            SocketAddr::V6(_) => (true, rtp.advertise_ipv6.is_some()),
        };
        if l.addr.ip().is_unspecified() && !advertised {
            let key = if v6 {
                "rtp.advertise_ipv6"
            } else {
                "rtp.advertise_ipv4"
            };
            d.error(
                &format!("sip.listen[{i}]"),
                format_args!("{} listens on every address, which cannot be announced to far ends — set {key} to the address they reach", l.addr),
            );
        }
    }
}

/// A `dtmf` setting (`rtp.dtmf`, a user's, a trunk's): `auto`, `inband` or `info`.
pub(crate) fn dtmf_mode(d: &mut Diagnostics, key: &str, name: &str) -> media::DtmfMode {
    media::DtmfMode::parse(&name.to_ascii_lowercase()).unwrap_or_else(|| {
        let expected = "expected \"auto\", \"inband\" or \"info\"";
        d.error(key, format_args!("{name:?} — {expected}"));
        media::DtmfMode::Auto
    })
}

#[cfg(test)]
mod tests;
