//! The file as serde sees it: every key optional with its default, unknown keys refused.
//! Values that need parsing (addresses, ranges, codecs, dialplan steps) stay strings
//! here so that validation can report all of them at once, with positions.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{LogFormat, LogLevel};

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawConfig {
    pub general: RawGeneral,
    pub sip: RawSip,
    pub rtp: RawRtp,
    pub vars: BTreeMap<String, String>,
    pub dialplan: RawDialplan,
    pub registrar: RawRegistrar,
    pub users: Vec<RawUser>,
    pub iax2: RawIax2,
    pub proxy: RawProxy,
    pub dispatch: Vec<super::dispatch::RawDispatch>,
    pub security: RawSecurity,
    pub trunks: Vec<RawTrunk>,
    pub parking: BTreeMap<String, super::parking::RawLot>,
    pub pickup_groups: BTreeMap<String, Vec<String>>,
    pub moh: BTreeMap<String, super::music::RawMusicClass>,
    pub ring_groups: BTreeMap<String, RawRingGroup>,
    pub queues: BTreeMap<String, RawQueue>,
    pub sounds: super::ivr::RawSounds,
    pub menus: BTreeMap<String, super::ivr::RawMenu>,
    pub voicemail: super::voicemail::RawVoicemail,
    pub conferences: BTreeMap<String, super::conference::RawConference>,
    pub cluster: super::cluster::RawCluster,
    pub api: super::api::RawApi,
    pub cdr: super::cdr::RawCdr,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRingGroup {
    pub members: Vec<String>,
    #[serde(default = "default_strategy")]
    pub strategy: String,
    #[serde(default = "default_member_timeout")]
    pub member_timeout_s: u64,
}

fn default_strategy() -> String {
    "ringall".into()
}

fn default_member_timeout() -> u64 {
    15
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawQueue {
    pub members: Vec<String>,
    pub strategy: String,
    pub member_timeout_s: u64,
    pub wrapup_s: u64,
    pub retry_s: u64,
    pub max_wait_s: u64,
    pub music: String,
    pub announce_s: u64,
    pub sounds_dir: String,
}

impl Default for RawQueue {
    fn default() -> Self {
        RawQueue {
            members: Vec::new(),
            strategy: "ringall".into(),
            member_timeout_s: 15,
            wrapup_s: 5,
            retry_s: 5,
            max_wait_s: 300,
            music: "default".into(),
            announce_s: 30,
            sounds_dir: "/usr/share/asterisk/sounds/en_US_f_Allison".into(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTrunk {
    pub name: String,
    pub host: String,
    pub transport: Option<String>,
    pub username: Option<String>,
    pub auth_user: Option<String>,
    pub password: Option<String>,
    #[serde(default)]
    pub register: bool,
    #[serde(default = "default_trunk_expires")]
    pub expires: u64,
    pub from_user: Option<String>,
    pub from_domain: Option<String>,
    #[serde(default)]
    pub acl: Vec<String>,
    pub did_context: Option<String>,
    pub caller_id: Option<String>,
    #[serde(default)]
    pub strip: u64,
    #[serde(default)]
    pub prefix: String,
    #[serde(default)]
    pub did_strip: u64,
    #[serde(default)]
    pub did_prefix: String,
    #[serde(default)]
    pub codecs: Vec<String>,
    pub dtmf: Option<String>,
}

fn default_trunk_expires() -> u64 {
    600
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawSecurity {
    pub trusted: Vec<String>,
    pub whitelist: Vec<String>,
    pub ban_s: u64,
    pub requests_per_s: u64,
    pub request_burst: u64,
    pub max_auth_failures: u64,
    pub auth_window_s: u64,
    pub scanner_user_agents: Vec<String>,
    pub scanner_action: String,
    pub tcp_max: u64,
    pub tcp_max_per_source: u64,
    pub tcp_idle_s: u64,
    pub tcp_unauthenticated_s: u64,
    /// None: "public" when the dialplan has such a context.
    pub public_context: Option<String>,
}

impl Default for RawSecurity {
    fn default() -> Self {
        RawSecurity {
            trusted: Vec::new(),
            whitelist: vec!["127.0.0.0/8".into(), "::1".into()],
            ban_s: 600,
            requests_per_s: 200,
            request_burst: 400,
            max_auth_failures: 5,
            auth_window_s: 600,
            scanner_user_agents: crate::guard::SCANNERS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            scanner_action: "drop".into(),
            tcp_max: 4096,
            tcp_max_per_source: 32,
            tcp_idle_s: 120,
            tcp_unauthenticated_s: 30,
            public_context: None,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawProxy {
    pub domains: Vec<String>,
    pub record_route: bool,
    pub authenticate: bool,
    pub relay_for_users: bool,
    pub dispatch: String,
    pub fork_timeout_s: u64,
}

impl Default for RawProxy {
    fn default() -> Self {
        RawProxy {
            domains: Vec::new(),
            record_route: true,
            authenticate: false,
            relay_for_users: false,
            dispatch: String::new(),
            fork_timeout_s: 30,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawIax2 {
    pub listen: Option<String>,
    pub call_tokens: bool,
    pub calltoken_optional: Vec<String>,
    pub max_calls_per_ip: u64,
    pub allow_guests: bool,
    pub register_refresh_s: u64,
    pub qualify_s: u64,
    pub peers: Vec<RawIaxPeer>,
}

impl Default for RawIax2 {
    fn default() -> Self {
        RawIax2 {
            listen: None,
            call_tokens: true,
            calltoken_optional: Vec::new(),
            max_calls_per_ip: 2048,
            allow_guests: false,
            register_refresh_s: 60,
            qualify_s: 60,
            peers: Vec::new(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawIaxPeer {
    pub name: String,
    pub host: Option<String>,
    pub secret: Option<String>,
    pub username: Option<String>,
    #[serde(default)]
    pub codecs: Vec<String>,
    #[serde(default)]
    pub trunk: bool,
    #[serde(default)]
    pub register: bool,
    pub context: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawRegistrar {
    pub domain: String,
    pub min_expires: u64,
    pub max_expires: u64,
    pub default_expires: u64,
    pub authenticate: bool,
    pub store: String,
    pub nonce_lifetime_s: u64,
    pub algorithms: Vec<String>,
    pub keepalive_s: u64,
    pub keepalive: String,
    pub max_contacts: u64,
    pub contacts_overflow: String,
    pub cache_entries: u64,
}

impl Default for RawRegistrar {
    fn default() -> Self {
        RawRegistrar {
            domain: "strowger".into(),
            min_expires: 60,
            max_expires: 3600,
            default_expires: 3600,
            authenticate: true,
            store: "local:strowger-data/store.snap".into(),
            nonce_lifetime_s: 300,
            algorithms: vec!["MD5".into()],
            keepalive_s: 30,
            keepalive: "options".into(),
            max_contacts: 10,
            contacts_overflow: "refuse".into(),
            cache_entries: 20_000,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawUser {
    pub user: String,
    pub password: String,
    pub domain: Option<String>,
    pub context: Option<String>,
    pub caller_id: Option<String>,
    #[serde(default)]
    pub max_calls: u64,
    #[serde(default)]
    pub allow: Vec<String>,
    pub record_calls: Option<String>,
    pub dtmf: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawGeneral {
    pub data_dir: String,
    pub workers: u64,
    pub max_calls: u64,
    pub retry_after_s: u64,
    pub cdr: String,
    pub security_log: String,
    pub log_level: LogLevel,
    pub log_format: LogFormat,
    pub realtime_priority: u64,
    pub drain_timeout_s: u64,
    pub dns_server: Option<String>,
}

impl Default for RawGeneral {
    fn default() -> Self {
        RawGeneral {
            data_dir: "strowger-data".into(),
            workers: 0,
            max_calls: 1000,
            retry_after_s: 5,
            cdr: "cdr.jsonl".into(),
            security_log: "security.log".into(),
            log_level: LogLevel::Info,
            log_format: LogFormat::Text,
            realtime_priority: 0,
            drain_timeout_s: 30,
            dns_server: None,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawSip {
    pub listen: Vec<String>,
    pub t1_ms: u64,
    pub t2_ms: u64,
    pub t4_ms: u64,
    pub user_agent: String,
    pub max_message_size: u64,
    pub session_expires: u64,
    pub min_se: u64,
    pub accept_require: Vec<String>,
    pub tls_cert: Option<String>,
    pub tls_key: Option<String>,
    pub tls_client_ca: Option<String>,
    pub tls_ca: Option<String>,
    pub tls_handshake_s: u64,
    pub ws_path: String,
    pub ws_origins: Vec<String>,
    pub ws_max_connections: u64,
    pub ws_handshake_s: u64,
    pub ws_ping_s: u64,
}

impl Default for RawSip {
    fn default() -> Self {
        RawSip {
            listen: [
                "udp:127.0.0.1:5060",
                "tcp:127.0.0.1:5060",
                "udp:[::1]:5060",
                "tcp:[::1]:5060",
                "tls:127.0.0.1:5061",
                "wss:127.0.0.1:8089",
            ]
            .map(String::from)
            .into(),
            t1_ms: 500,
            t2_ms: 4000,
            t4_ms: 5000,
            user_agent: "strowger".into(),
            max_message_size: 65535,
            session_expires: 1800,
            min_se: 90,
            accept_require: vec!["timer".into(), "replaces".into()],
            tls_cert: None,
            tls_key: None,
            tls_client_ca: None,
            tls_ca: None,
            tls_handshake_s: 10,
            ws_path: "/ws".into(),
            ws_origins: Vec::new(),
            ws_max_connections: 1024,
            ws_handshake_s: 10,
            ws_ping_s: 30,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawRtp {
    pub ports: String,
    pub media_timeout_s: u64,
    pub hold_timeout_s: u64,
    pub rtcp_interval_s: u64,
    pub codecs: Vec<String>,
    pub dtmf_pt: u64,
    pub symmetric: bool,
    pub shared_ports: bool,
    pub speex_quality: u64,
    pub opus_bitrate: u64,
    pub opus_complexity: u64,
    pub opus_fec: bool,
    pub opus_dtx: bool,
    pub dtmf: String,
    pub advertise_ipv4: String,
    pub advertise_ipv6: String,
    pub srtp: String,
    pub webrtc_public_address: String,
}

impl Default for RawRtp {
    fn default() -> Self {
        RawRtp {
            ports: "10000-19999".into(),
            media_timeout_s: 60,
            hold_timeout_s: 3600,
            rtcp_interval_s: 5,
            codecs: vec!["PCMU".into(), "PCMA".into()],
            dtmf_pt: 101,
            symmetric: true,
            shared_ports: true,
            speex_quality: 8,
            opus_bitrate: codec::OpusOptions::default().bitrate as u64,
            opus_complexity: codec::OpusOptions::default().complexity as u64,
            opus_fec: codec::OpusOptions::default().fec,
            opus_dtx: codec::OpusOptions::default().dtx,
            dtmf: "auto".into(),
            advertise_ipv4: String::new(),
            advertise_ipv6: String::new(),
            srtp: "offer".into(),
            webrtc_public_address: String::new(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawDialplan {
    pub default_context: String,
    /// The IANA time zone of `goto ... time="..."` conditions.
    pub timezone: String,
    pub contexts: BTreeMap<String, RawContext>,
}

impl Default for RawDialplan {
    fn default() -> Self {
        RawDialplan {
            default_context: "default".into(),
            timezone: "UTC".into(),
            contexts: BTreeMap::new(),
        }
    }
}

impl RawDialplan {
    /// Every step's text with its key (`dialplan.contexts.CONTEXT.rules[R].steps[S]`), for
    /// the checks of what steps refer to.
    pub(crate) fn steps(&self) -> impl Iterator<Item = (String, &str)> {
        self.contexts.iter().flat_map(|(ctx, context)| {
            context.rules.iter().enumerate().flat_map(move |(r, rule)| {
                rule.steps.iter().enumerate().map(move |(s, text)| {
                    let key = format!("dialplan.contexts.{ctx}.rules[{r}].steps[{s}]");
                    (key, text.as_str())
                })
            })
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawContext {
    /// Trunks (`[[trunks]]` names) this context's calls may dial out through.
    #[serde(default)]
    pub trunks: Vec<String>,
    pub rules: Vec<RawRule>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRule {
    pub exten: Option<String>,
    pub prefix: Option<String>,
    pub regex: Option<String>,
    pub caller: Option<String>,
    pub steps: Vec<String>,
}
