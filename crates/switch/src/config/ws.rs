//! `[sip]` WebSocket keys (RFC 7118): the path phones connect to, which browser pages may
//! open a connection, and what the connections may hold.

use super::raw::RawSip;
use super::{bounded, Diagnostics, Listen, Transport};
use std::time::Duration;

/// WebSocket settings (the shell's `sip_io::ws` checks handshakes against them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ws {
    /// The request path of the upgrade, e.g. `/ws`.
    pub path: String,
    /// Origins (`https://host[:port]`) a browser page may connect from.
    pub origins: Vec<String>,
    /// WebSocket connections open at once (they count against `security.tcp_*` too).
    pub max_connections: usize,
    /// A connection whose upgrade has not finished this long after it opened is closed.
    pub handshake: Duration,
    /// A connection silent this long is pinged, so a live browser answers and keeps it open
    /// past `security.tcp_idle_s`, and a gone one is closed then.
    pub ping: Duration,
}

pub(crate) fn ws(raw: &RawSip, d: &mut Diagnostics) -> Ws {
    if !raw.ws_path.starts_with('/') || raw.ws_path.contains(char::is_whitespace) {
        d.error(
            "sip.ws_path",
            format_args!("{:?} — expected a path such as \"/ws\"", raw.ws_path),
        );
    }
    for (i, o) in raw.ws_origins.iter().enumerate() {
        if !valid_origin(o) {
            d.error(
                &format!("sip.ws_origins[{i}]"),
                format_args!(
                    "{o:?} — expected an origin, scheme://host[:port] without a path, \
                     e.g. \"https://pbx.example.com\""
                ),
            );
        }
    }
    Ws {
        path: raw.ws_path.clone(),
        origins: raw.ws_origins.clone(),
        max_connections: bounded(
            d,
            "sip.ws_max_connections",
            raw.ws_max_connections,
            1,
            1 << 20,
        ) as usize,
        handshake: Duration::from_secs(bounded(
            d,
            "sip.ws_handshake_s",
            raw.ws_handshake_s,
            1,
            300,
        )),
        ping: Duration::from_secs(bounded(d, "sip.ws_ping_s", raw.ws_ping_s, 1, 3600)),
    }
}

/// `scheme://host[:port]`, as browsers send it in `Origin`.
fn valid_origin(o: &str) -> bool {
    let Some((scheme, rest)) = o.split_once("://") else {
        return false;
    };
    !scheme.is_empty()
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
        && !rest.is_empty()
        && !rest.contains(['/', '?', '#', ' '])
}

impl super::Sip {
    /// Hosts whose pages may connect on any port and scheme: with `sip.ws_origins` unset, the
    /// `ws:`/`wss:` listen addresses (and `localhost` for loopback ones), so a page elsewhere
    /// cannot make a visitor's browser connect (cross-site WebSocket hijacking).
    pub fn ws_same_hosts(&self) -> Vec<String> {
        match self.ws.origins.is_empty() {
            true => same_hosts(&self.listen),
            false => Vec::new(),
        }
    }
}

/// The hosts of the WebSocket listen addresses as an Origin writes them.
fn same_hosts(listen: &[Listen]) -> Vec<String> {
    let mut hosts = Vec::new();
    let ws = listen
        .iter()
        .filter(|l| matches!(l.transport, Transport::Ws | Transport::Wss));
    for l in ws {
        let ip = l.addr.ip();
        let host = match ip {
            std::net::IpAddr::V6(v6) => format!("[{v6}]"),
            v4 => v4.to_string(),
        };
        // An unspecified address is no host a browser names: only sip.ws_origins lets in.
        let names = match (ip.is_unspecified(), ip.is_loopback()) {
            (true, _) => vec![],
            (false, true) => vec![host, "localhost".to_string()],
            (false, false) => vec![host],
        };
        for n in names {
            if !hosts.contains(&n) {
                hosts.push(n);
            }
        }
    }
    hosts
}
