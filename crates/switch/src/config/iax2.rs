//! `[iax2]` and `[[iax2.peers]]`: the IAX2 listener and the peers strowger calls, takes calls
//! from, accepts registrations from or registers to.

use std::net::{IpAddr, SocketAddr};

use super::raw::RawIax2;
use super::{bounded, narrow, supported_codec, Diagnostics};
use media::Format;

/// The IAX2 port (RFC 5456 §1).
pub const IAX2_PORT: u16 = 4569;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Iax2 {
    /// UDP address for IAX2; `None` (no `listen`) turns IAX2 off.
    pub listen: Option<SocketAddr>,
    /// Demand the CALLTOKEN exchange before a NEW or REGREQ sets up state.
    pub call_tokens: bool,
    /// Addresses whose requests without a CALLTOKEN element (pre-2009 clients) are let through.
    pub calltoken_optional: Vec<IpAddr>,
    pub max_calls_per_ip: usize,
    /// Take calls from callers that name no configured peer (no authentication).
    pub allow_guests: bool,
    /// Seconds strowger asks a provider to keep its registration, and grants peers at most.
    pub register_refresh: u16,
    /// Seconds between POKEs to each peer with a known address; 0: no qualify.
    pub qualify: u16,
    pub peers: Vec<IaxPeer>,
}

impl Default for Iax2 {
    fn default() -> Iax2 {
        Iax2 {
            listen: None,
            call_tokens: true,
            calltoken_optional: Vec::new(),
            max_calls_per_ip: 2048,
            allow_guests: false,
            register_refresh: 60,
            qualify: 60,
            peers: Vec::new(),
        }
    }
}

/// Where a peer is: a fixed address, or wherever it last registered from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IaxHost {
    Static(SocketAddr),
    Dynamic,
}

/// One `[[iax2.peers]]` entry: a peer (strowger calls it), a user (it calls strowger, by
/// `name` as its username), a registering peer (`host = "dynamic"`), a provider strowger
/// registers to (`register = true`), and a trunk (`trunk = true`) all at once, as needed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IaxPeer {
    pub name: String,
    pub host: IaxHost,
    /// MD5 secret both ways; a peer without one is trusted by its address alone.
    pub secret: Option<String>,
    /// The username strowger gives when calling or registering to this peer (default `name`).
    pub username: String,
    /// Formats in preference order.
    pub codecs: Vec<Format>,
    /// Voice to this peer in meta trunk frames.
    pub trunk: bool,
    /// strowger registers to this peer (a provider).
    pub register: bool,
    /// The dialplan context its calls enter (default: the dialplan's default).
    pub context: Option<String>,
}

/// Formats IAX2 can carry here (each has an IAX2 format bit).
const IAX_FORMATS: [Format; 6] = [
    Format::Pcmu,
    Format::Pcma,
    Format::Gsm,
    Format::G722,
    Format::Speex,
    Format::L16,
];

impl Iax2 {
    pub fn peer(&self, name: &str) -> Option<&IaxPeer> {
        self.peers.iter().find(|p| p.name == name)
    }

    /// `--iax-listen ADDR:PORT`.
    pub fn override_listen(&mut self, addr: &str) -> Result<(), String> {
        self.listen = Some(addr.parse().map_err(|_| {
            format!("--iax-listen {addr:?} — expected ADDRESS:PORT, e.g. 127.0.0.1:4569")
        })?);
        Ok(())
    }
}

fn host(text: &str) -> Option<IaxHost> {
    if text.eq_ignore_ascii_case("dynamic") {
        return Some(IaxHost::Dynamic);
    }
    if let Ok(a) = text.parse::<SocketAddr>() {
        return Some(IaxHost::Static(a));
    }
    let (h, port) = match text.strip_prefix("localhost") {
        Some("") => ("127.0.0.1", IAX2_PORT),
        Some(p) => ("127.0.0.1", p.strip_prefix(':')?.parse().ok()?),
        None => (text.trim_matches(['[', ']']), IAX2_PORT),
    };
    let ip: IpAddr = h.parse().ok()?;
    Some(IaxHost::Static(SocketAddr::new(ip, port)))
}

pub(crate) fn iax2(raw: RawIax2, rtp_codecs: &[sdp::Codec], d: &mut Diagnostics) -> Iax2 {
    let listen = raw.listen.as_ref().and_then(|l| match l.parse() {
        Ok(a) => Some(a),
        Err(_) => {
            d.error(
                "iax2.listen",
                format_args!("{l:?} — expected ADDRESS:PORT, e.g. \"127.0.0.1:4569\""),
            );
            None
        }
    });
    // By default a peer gets the [rtp] codecs IAX2 can carry, in that order.
    let default_codecs: Vec<Format> = rtp_codecs
        .iter()
        .filter_map(|c| Format::from_rtpmap(c.name, c.clock, c.fmtp))
        .filter(|f| IAX_FORMATS.contains(f))
        .collect();
    let mut peers: Vec<IaxPeer> = Vec::new();
    for (i, p) in raw.peers.into_iter().enumerate() {
        let key = format!("iax2.peers[{i}]");
        if p.name.is_empty()
            || !p
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        {
            d.error(
                &format!("{key}.name"),
                format_args!(
                    "{:?} — expected letters, digits, '-', '_' or '.', e.g. \"provider\"",
                    p.name
                ),
            );
        } else if peers.iter().any(|o| o.name == p.name) {
            d.error(
                &format!("{key}.name"),
                format_args!("{:?} is listed twice", p.name),
            );
        }
        let host = match p.host.as_deref() {
            None => {
                d.error(
                    &format!("{key}.name"),
                    "needs host = \"IP[:PORT]\" (a fixed peer) or host = \"dynamic\" (it registers to strowger)",
                );
                IaxHost::Dynamic
            }
            Some(text) => host(text).unwrap_or_else(|| {
                d.error(
                    &format!("{key}.host"),
                    format_args!("{text:?} — expected \"dynamic\" or an IP address with an optional port, e.g. \"192.0.2.7:4569\""),
                );
                IaxHost::Dynamic
            }),
        };
        if let Some(s) = &p.secret {
            if s.is_empty() {
                d.error(
                    &format!("{key}.secret"),
                    "must not be empty (leave it out to trust the peer by its address)",
                );
            }
        }
        if host == IaxHost::Dynamic && p.secret.is_none() {
            d.error(
                &format!("{key}.host"),
                "a dynamic peer must have a secret to register with",
            );
        }
        if p.register && (p.secret.is_none() || host == IaxHost::Dynamic) {
            d.error(
                &format!("{key}.register"),
                "registering to a peer needs its fixed host and a secret",
            );
        }
        let mut codecs = Vec::new();
        for (j, name) in p.codecs.iter().enumerate() {
            let f =
                supported_codec(name).and_then(|c| Format::from_rtpmap(c.name, c.clock, c.fmtp));
            match f.filter(|f| IAX_FORMATS.contains(f)) {
                Some(f) if codecs.contains(&f) => d.error(&format!("{key}.codecs[{j}]"), format_args!("{name:?} is listed twice")),
                Some(f) => codecs.push(f),
                None => d.error(
                    &format!("{key}.codecs[{j}]"),
                    format_args!("{name:?} cannot be used over IAX2 — supported: PCMU, PCMA, GSM, G722, speex, L16"),
                ),
            }
        }
        if codecs.is_empty() {
            codecs = if default_codecs.is_empty() {
                vec![Format::Pcmu]
            } else {
                default_codecs.clone()
            };
        }
        peers.push(IaxPeer {
            username: p.username.unwrap_or_else(|| p.name.clone()),
            name: p.name,
            host,
            secret: p.secret,
            codecs,
            trunk: p.trunk,
            register: p.register,
            context: p.context,
        });
    }
    let mut calltoken_optional = Vec::new();
    for (i, a) in raw.calltoken_optional.iter().enumerate() {
        match a.parse() {
            Ok(ip) => calltoken_optional.push(ip),
            Err(_) => d.error(
                &format!("iax2.calltoken_optional[{i}]"),
                format_args!("{a:?} — expected an IP address, e.g. \"127.0.0.1\""),
            ),
        }
    }
    Iax2 {
        listen,
        call_tokens: raw.call_tokens,
        calltoken_optional,
        max_calls_per_ip: narrow(bounded(
            d,
            "iax2.max_calls_per_ip",
            raw.max_calls_per_ip,
            1,
            65_535,
        )),
        allow_guests: raw.allow_guests,
        register_refresh: narrow(bounded(
            d,
            "iax2.register_refresh_s",
            raw.register_refresh_s,
            10,
            3600,
        )),
        qualify: narrow(bounded(d, "iax2.qualify_s", raw.qualify_s, 0, 3600)),
        peers,
    }
}
