//! `[[trunks]]`: SIP trunks to providers. strowger registers to a provider (`register = true`),
//! dials out through it (`bridge trunk/NAME/NUMBER`, from the contexts that list the trunk in
//! their `trunks`), and takes its calls in (matched by `acl` or by the addresses its host
//! resolves to) into `did_context` by the dialled number (DID).

use std::net::SocketAddr;

use super::raw::{RawDialplan, RawTrunk};
use super::{bounded, narrow, Diagnostics, Transport};
use crate::acl::Acl;
use crate::dialplan::Step;

/// Where a provider is (RFC 3263 §4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TrunkHost {
    /// An IP address (port 5060 unless given, 5061 with `transport = "tls"`): no DNS.
    Addr(SocketAddr),
    /// A name with an explicit port: its A/AAAA records only (RFC 3263 §4.2).
    NamePort(String, u16),
    /// A domain: NAPTR, then SRV (`_sip._udp`, `_sip._tcp`), then A/AAAA on the transport's
    /// default port (5060, or 5061 for TLS).
    Domain(String),
}

impl TrunkHost {
    /// The host part for URIs (Request-URI and From domain): the domain, or the address.
    pub fn uri_host(&self) -> String {
        match self {
            TrunkHost::Addr(a) if a.port() == 5060 => match a {
                SocketAddr::V4(v4) => v4.ip().to_string(),
                SocketAddr::V6(v6) => format!("[{}]", v6.ip()),
            },
            TrunkHost::Addr(a) => a.to_string(),
            TrunkHost::NamePort(n, p) => format!("{n}:{p}"),
            TrunkHost::Domain(d) => d.clone(),
        }
    }
}

/// One `[[trunks]]` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trunk {
    pub name: String,
    pub host: TrunkHost,
    /// Forced transport; None: what NAPTR/SRV say (UDP when they say nothing).
    pub transport: Option<Transport>,
    /// The account: the user of the REGISTER's To and From and of our Contact.
    pub username: String,
    /// The digest username (default `username`).
    pub auth_user: String,
    /// None: the provider asks for no credentials (a trunk by IP).
    pub password: Option<String>,
    pub register: bool,
    /// Seconds strowger asks the provider to keep its registration.
    pub expires: u32,
    /// From of outbound calls: `from_user@from_domain` (defaults: the caller's number, the
    /// host's domain).
    pub from_user: Option<String>,
    pub from_domain: String,
    /// Addresses the provider's calls come from (besides those its host resolves to).
    pub acl: Acl,
    /// The context its calls enter (default: the dialplan's default).
    pub did_context: Option<String>,
    /// The caller number presented on outbound calls (From user), whatever the caller's was.
    pub caller_id: Option<String>,
    /// Outbound number rewriting: drop `strip` leading characters, then put `prefix` before.
    pub strip: usize,
    pub prefix: String,
    /// Inbound DID rewriting, the same way, before the dialplan sees it.
    pub did_strip: usize,
    pub did_prefix: String,
    /// The codecs offered on calls out, in order (empty: `rtp.codecs`).
    pub codecs: Vec<sdp::Codec>,
    /// How the provider sends and takes digits; None: `rtp.dtmf`.
    pub dtmf: Option<media::DtmfMode>,
}

impl Trunk {
    /// The number sent to the provider for a dialled `number`.
    pub fn outbound_number(&self, number: &str) -> String {
        rewrite(number, self.strip, &self.prefix)
    }

    /// The extension an inbound call to `did` enters the dialplan with.
    pub fn inbound_did(&self, did: &str) -> String {
        rewrite(did, self.did_strip, &self.did_prefix)
    }
}

fn rewrite(number: &str, strip: usize, prefix: &str) -> String {
    let rest: String = number.chars().skip(strip).collect();
    format!("{prefix}{rest}")
}

/// A name of letters, digits, '-', '_' or '.' (trunk names appear in `trunk/NAME/…`).
fn good_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// A SIP user part strowger writes into URIs as is: no '@', ':', spaces, quotes or brackets.
fn good_user(user: &str) -> bool {
    !user.is_empty() && !user.contains(['@', ':', ' ', '"', '<', '>', ';', ','])
}

/// Where `text` names; an address without a port gets `default_port`.
fn host(text: &str, default_port: u16) -> Option<TrunkHost> {
    let (h, port) = sip::uri::split_host_port(text).ok()?;
    if let Some(ip) = sip::uri::host_ip(h) {
        return Some(TrunkHost::Addr(SocketAddr::new(
            ip,
            port.unwrap_or(default_port),
        )));
    }
    if h.starts_with('[') || !h.bytes().any(|b| b.is_ascii_alphabetic()) {
        return None;
    }
    let h = h.trim_end_matches('.').to_ascii_lowercase();
    Some(match port {
        Some(p) => TrunkHost::NamePort(h, p),
        None => TrunkHost::Domain(h),
    })
}

pub(crate) fn trunks(raw: Vec<RawTrunk>, d: &mut Diagnostics) -> Vec<Trunk> {
    let mut out: Vec<Trunk> = Vec::new();
    for (i, t) in raw.into_iter().enumerate() {
        let key = format!("trunks[{i}]");
        if !good_name(&t.name) {
            d.error(
                &format!("{key}.name"),
                format_args!(
                    "{:?} — expected letters, digits, '-', '_' or '.', e.g. \"provider\"",
                    t.name
                ),
            );
        } else if out.iter().any(|o| o.name == t.name) {
            d.error(
                &format!("{key}.name"),
                format_args!("{:?} is listed twice", t.name),
            );
        }
        let transport = match t
            .transport
            .as_deref()
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            None => None,
            Some("udp") => Some(Transport::Udp),
            Some("tcp") => Some(Transport::Tcp),
            Some("tls") => Some(Transport::Tls),
            Some(other) => {
                d.error(
                    &format!("{key}.transport"),
                    format_args!("{other:?} — expected \"udp\", \"tcp\" or \"tls\" (leave it out to follow the provider's NAPTR/SRV records)"),
                );
                None
            }
        };
        let port = match transport {
            Some(Transport::Tls) => 5061,
            _ => 5060,
        };
        let host = host(&t.host, port).unwrap_or_else(|| {
            d.error(
                &format!("{key}.host"),
                format_args!(
                    "{:?} — expected a domain (resolved by NAPTR/SRV/A, e.g. \"sip.example.com\"), a host name with a port, or an IP address with an optional port, e.g. \"192.0.2.7:5060\"",
                    t.host
                ),
            );
            TrunkHost::Addr(SocketAddr::from(([0, 0, 0, 0], 5060)))
        });
        for (k, v) in [
            ("username", &t.username),
            ("auth_user", &t.auth_user),
            ("from_user", &t.from_user),
            ("caller_id", &t.caller_id),
        ] {
            if let Some(v) = v {
                if !good_user(v) {
                    d.error(
                        &format!("{key}.{k}"),
                        format_args!("{v:?} — expected a SIP user such as \"4930123456\" (no @, :, spaces, quotes, brackets, ; or ,)"),
                    );
                }
            }
        }
        if let Some(p) = &t.password {
            if p.is_empty() {
                d.error(
                    &format!("{key}.password"),
                    "must not be empty (leave it out for a provider that trusts strowger's address)",
                );
            }
        }
        if t.password.is_some() && t.username.is_none() && t.auth_user.is_none() {
            d.error(
                &format!("{key}.password"),
                "a password needs the account's username (or auth_user)",
            );
        }
        if t.register && (t.username.is_none() || t.password.is_none()) {
            d.error(
                &format!("{key}.register"),
                "registering to a provider needs username and password",
            );
        }
        let expires = bounded(d, &format!("{key}.expires"), t.expires, 60, 86_400);
        let mut acl = Acl::default();
        for (j, a) in t.acl.iter().enumerate() {
            match a.parse() {
                Ok(c) => acl.0.push(c),
                Err(e) => d.error(&format!("{key}.acl[{j}]"), e),
            }
        }
        if let Some(dom) = &t.from_domain {
            if dom.is_empty() || dom.contains(['@', ' ', ';', '<', '>', '"']) {
                d.error(
                    &format!("{key}.from_domain"),
                    format_args!("{dom:?} — expected a host name or IP address"),
                );
            }
        }
        let strip = bounded(d, &format!("{key}.strip"), t.strip, 0, 32);
        let did_strip = bounded(d, &format!("{key}.did_strip"), t.did_strip, 0, 32);
        for (k, v) in [("prefix", &t.prefix), ("did_prefix", &t.did_prefix)] {
            if !v.is_empty() && !good_user(v) {
                d.error(
                    &format!("{key}.{k}"),
                    format_args!(
                        "{v:?} — expected digits or other URI user characters, e.g. \"+49\""
                    ),
                );
            }
        }
        let mut codecs = Vec::new();
        for (j, name) in t.codecs.iter().enumerate() {
            match super::supported_codec(name) {
                Some(c) if codecs.contains(&c) => d.error(
                    &format!("{key}.codecs[{j}]"),
                    format_args!("{name:?} is listed twice"),
                ),
                Some(c) => codecs.push(c),
                None => d.error(
                    &format!("{key}.codecs[{j}]"),
                    format_args!(
                        "unknown codec {name:?} — use the names of rtp.codecs, e.g. \"PCMA\""
                    ),
                ),
            }
        }
        let dtmf = (t.dtmf.as_deref()).map(|m| super::dtmf_mode(d, &format!("{key}.dtmf"), m));
        let username = t.username.clone().unwrap_or_else(|| t.name.clone());
        out.push(Trunk {
            auth_user: t.auth_user.unwrap_or_else(|| username.clone()),
            username,
            from_domain: t.from_domain.unwrap_or_else(|| host.uri_host()),
            name: t.name,
            host,
            transport,
            password: t.password,
            register: t.register,
            expires: narrow(expires),
            from_user: t.from_user,
            acl,
            did_context: t.did_context,
            caller_id: t.caller_id,
            strip: narrow(strip),
            prefix: t.prefix,
            did_strip: narrow(did_strip),
            did_prefix: t.did_prefix,
            codecs,
            dtmf,
        });
    }
    out
}

/// The trunk a `bridge` step dials, if it dials one: `trunk/NAME/NUMBER` → (NAME, NUMBER).
pub fn trunk_target(uri: &str) -> Option<(&str, &str)> {
    uri.strip_prefix("trunk/")?.split_once('/')
}

/// Cross-checks against the dialplan: every `did_context` and every context's `trunks` entry
/// names something that exists, and a `bridge trunk/NAME/…` step dials only a trunk its own
/// context lists (names built from variables are checked when the call dials).
pub(crate) fn check_dialplan(
    trunks: &[Trunk],
    raw: &RawDialplan,
    has_context: impl Fn(&str) -> bool,
    d: &mut Diagnostics,
) {
    let names = || {
        let n: Vec<&str> = trunks.iter().map(|t| t.name.as_str()).collect();
        if n.is_empty() {
            "none ([[trunks]] defines them)".to_string()
        } else {
            n.join(", ")
        }
    };
    for (i, t) in trunks.iter().enumerate() {
        if let Some(c) = &t.did_context {
            if !has_context(c) {
                d.error(
                    &format!("trunks[{i}].did_context"),
                    format_args!("no dialplan context {c:?}"),
                );
            }
        }
    }
    for (ctx, context) in &raw.contexts {
        for (i, name) in context.trunks.iter().enumerate() {
            if !trunks.iter().any(|t| &t.name == name) {
                d.error(
                    &format!("dialplan.contexts.{ctx}.trunks[{i}]"),
                    format_args!("no trunk {name:?} — defined: {}", names()),
                );
            }
        }
        for (r, rule) in context.rules.iter().enumerate() {
            for (s, text) in rule.steps.iter().enumerate() {
                let Ok(Step::Bridge { uri, .. }) = Step::parse(text) else {
                    continue;
                };
                let key = format!("dialplan.contexts.{ctx}.rules[{r}].steps[{s}]");
                if !uri.starts_with("trunk/") {
                    continue;
                }
                let Some((name, number)) = trunk_target(&uri) else {
                    d.error(
                        &key,
                        "bridge trunk/NAME/NUMBER needs the number to dial, e.g. trunk/provider/${EXTEN}",
                    );
                    continue;
                };
                if number.is_empty() {
                    d.error(&key, "bridge trunk/NAME/NUMBER: the number is empty");
                }
                if name.contains("${") {
                    continue;
                }
                if !trunks.iter().any(|t| t.name == name) {
                    d.error(
                        &key,
                        format_args!("bridge: no trunk {name:?} — defined: {}", names()),
                    );
                } else if !context.trunks.iter().any(|t| t == name) {
                    d.error(
                        &key,
                        format_args!(
                            "bridge: context {ctx:?} may not dial out through trunk {name:?} — add it to the context's list: trunks = [\"{name}\"]"
                        ),
                    );
                }
            }
        }
    }
}
