//! `[api]`: the control API (HTTP and its event stream) — where it listens and its token.

use std::net::SocketAddr;

use serde::Deserialize;

use super::Diagnostics;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawApi {
    pub listen: String,
    pub token: String,
    pub max_event_clients: u64,
}

impl Default for RawApi {
    fn default() -> RawApi {
        RawApi {
            listen: "127.0.0.1:8088".into(),
            token: String::new(),
            max_event_clients: 16,
        }
    }
}

/// The API settings, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Api {
    /// None: no API (`listen = ""`). Always a loopback address: the API speaks plain HTTP.
    pub listen: Option<SocketAddr>,
    /// The bearer token; None: the one in `<data_dir>/api.token`, made on first start.
    pub token: Option<String>,
    /// Event-stream clients at once; more are refused with 503.
    pub max_event_clients: usize,
}

pub(crate) fn api(raw: RawApi, d: &mut Diagnostics) -> Api {
    let listen = match raw.listen.as_str() {
        "" => None,
        s => match s.parse::<SocketAddr>() {
            Ok(a) if a.ip().is_loopback() => Some(a),
            Ok(a) => {
                d.error(
                    "api.listen",
                    format_args!(
                        "{a} is not a loopback address: the API speaks plain HTTP, so it listens \
                         on loopback only — set api.listen = \"127.0.0.1:{}\" and reach it \
                         through an SSH tunnel or a TLS reverse proxy, or \"\" for no API",
                        a.port()
                    ),
                );
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
    Api {
        listen,
        token,
        max_event_clients: raw.max_event_clients.clamp(1, 1024) as usize,
    }
}

impl Api {
    /// `--api-listen ADDR:PORT` (`""`: no API), held to the same loopback rule as the file.
    pub fn override_listen(&mut self, v: &str) -> Result<(), String> {
        self.listen = match v {
            "" => None,
            v => match v.parse::<SocketAddr>() {
                Ok(a) if a.ip().is_loopback() => Some(a),
                Ok(a) => {
                    return Err(format!(
                        "--api-listen {a} is not a loopback address: the API speaks plain HTTP \
                         (api.listen) — give 127.0.0.1:PORT"
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
