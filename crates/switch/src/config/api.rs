//! `[api]`: the control API (HTTP and its event stream) — where it listens, its token and its
//! TLS certificate.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use super::Diagnostics;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawApi {
    pub listen: String,
    pub token: String,
    pub max_event_clients: u64,
    pub event_backlog: u64,
    pub tls_cert: String,
    pub tls_key: String,
}

impl Default for RawApi {
    fn default() -> RawApi {
        RawApi {
            listen: "127.0.0.1:8088".into(),
            token: String::new(),
            max_event_clients: 16,
            event_backlog: 1024,
            tls_cert: String::new(),
            tls_key: String::new(),
        }
    }
}

/// The API settings, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Api {
    /// None: no API (`listen = ""`). A loopback address unless `tls` is set: plain HTTP would
    /// carry the bearer token in the clear.
    pub listen: Option<SocketAddr>,
    /// The bearer token; None: the one in `<data_dir>/api.token`, made on first start.
    pub token: Option<String>,
    /// Event-stream clients at once; more are refused with 503.
    pub max_event_clients: usize,
    /// Events an event-stream client may fall behind by before it is closed (1008).
    pub event_backlog: usize,
    /// The API speaks HTTPS with this certificate and key; None: plain HTTP, on loopback only.
    pub tls: Option<Tls>,
}

/// `api.tls_cert` and `api.tls_key`: PEM files, read at start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tls {
    /// The certificate chain, the server's own certificate first.
    pub cert: PathBuf,
    /// Its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

pub(crate) fn api(raw: RawApi, d: &mut Diagnostics) -> Api {
    let tls = match (raw.tls_cert.as_str(), raw.tls_key.as_str()) {
        ("", "") => None,
        (cert, key) if !cert.is_empty() && !key.is_empty() => Some(Tls {
            cert: cert.into(),
            key: key.into(),
        }),
        ("", _) => {
            d.error(
                "api.tls_cert",
                "api.tls_key is set: give the certificate too",
            );
            None
        }
        _ => {
            d.error(
                "api.tls_key",
                "api.tls_cert is set: give its private key too",
            );
            None
        }
    };
    let listen = match raw.listen.as_str() {
        "" => None,
        s => match s.parse::<SocketAddr>() {
            Ok(a) if a.ip().is_loopback() || tls.is_some() => Some(a),
            Ok(a) => {
                d.error("api.listen", plain_off_loopback(&a.to_string(), a.port()));
                None
            }
            Err(_) => {
                d.error(
                    "api.listen",
                    format_args!("{s:?} — expected ADDR:PORT, e.g. \"127.0.0.1:8088\", or \"\""),
                );
                None
            }
        },
    };
    let token = match raw.token.as_str() {
        "" => None,
        t if t.len() < 16 || !t.bytes().all(|b| b.is_ascii_graphic()) => {
            d.error(
                "api.token",
                "too short or not printable — use at least 16 printable characters, or \"\" to \
                 have strowger make one in <data_dir>/api.token",
            );
            None
        }
        t => Some(t.to_string()),
    };
    if !(1..=1024).contains(&raw.max_event_clients) {
        d.error("api.max_event_clients", "expected 1-1024");
    }
    if !(16..=65536).contains(&raw.event_backlog) {
        d.error("api.event_backlog", "expected 16-65536");
    }
    Api {
        listen,
        token,
        max_event_clients: raw.max_event_clients.clamp(1, 1024) as usize,
        event_backlog: raw.event_backlog.clamp(16, 65536) as usize,
        tls,
    }
}

/// Why a plain-HTTP API may not listen on `addr`, and the ways out.
fn plain_off_loopback(addr: &str, port: u16) -> String {
    format!(
        "{addr} is not a loopback address and the API has no TLS: set api.tls_cert and \
         api.tls_key (PEM files) to serve HTTPS there, or api.listen = \"127.0.0.1:{port}\" and \
         reach it through an SSH tunnel, or \"\" for no API"
    )
}

impl Api {
    /// `--api-listen ADDR:PORT` (`""`: no API), held to the same rule as the file.
    pub fn override_listen(&mut self, v: &str) -> Result<(), String> {
        self.listen = match v {
            "" => None,
            v => match v.parse::<SocketAddr>() {
                Ok(a) if a.ip().is_loopback() || self.tls.is_some() => Some(a),
                Ok(a) => {
                    return Err(format!(
                        "--api-listen {}",
                        plain_off_loopback(&a.to_string(), a.port())
                    ))
                }
                Err(_) => {
                    return Err(format!(
                        "--api-listen {v:?} — expected ADDRESS:PORT, e.g. 127.0.0.1:8088, or \"\""
                    ))
                }
            },
        };
        Ok(())
    }
}
