//! A client of the control API of a [`Strowger`] under test: ureq for HTTP, tungstenite for
//! the event stream, the token read from its data directory as `strowger ctl` reads it.

use super::Strowger;
use serde_json::Value;
use std::net::TcpStream;
use std::time::Duration;
use tungstenite::stream::MaybeTlsStream;
use tungstenite::WebSocket;

pub struct Api {
    pub base: String,
    pub token: String,
}

impl Api {
    /// The API of `s`, with the token strowger made in its data directory.
    pub fn of(s: &Strowger) -> Api {
        let token = std::fs::read_to_string(s.data_dir().join("api.token"))
            .expect("strowger writes data/api.token on start");
        Api {
            base: format!("http://{}", s.api),
            token: token.trim().to_string(),
        }
    }

    /// `METHOD path` with `token` as the bearer (None: no Authorization header) and a JSON
    /// body for POST and PUT (`{}` without one): status, JSON body (Null if none), and the
    /// WWW-Authenticate header.
    pub fn call_as(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> (u16, Value, Option<String>) {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(10)))
            .build()
            .into();
        let url = format!("{}{path}", self.base);
        let auth = token.map_or(String::new(), |t| format!("Bearer {t}"));
        let empty = serde_json::json!({});
        let body = body.unwrap_or(&empty);
        let resp = match method {
            "DELETE" => agent.delete(&url).header("Authorization", &auth).call(),
            "POST" => agent
                .post(&url)
                .header("Authorization", &auth)
                .send_json(body),
            "PUT" => agent
                .put(&url)
                .header("Authorization", &auth)
                .send_json(body),
            _ => agent.get(&url).header("Authorization", &auth).call(),
        }
        .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
        let status = resp.status().as_u16();
        let www = resp
            .headers()
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let text = resp.into_body().read_to_string().unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        (status, body, www)
    }

    /// `METHOD path` with the right token; panics unless it succeeds.
    pub fn ok(&self, method: &str, path: &str) -> Value {
        self.send(method, path, None)
    }

    /// `METHOD path` with the right token and a JSON body; panics unless it succeeds.
    pub fn send(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let (status, body) = {
            let (s, b, _) = self.call_as(method, path, Some(&self.token), body.as_ref());
            (s, b)
        };
        assert!(
            (200..300).contains(&status),
            "{method} {path}: {status} {body}"
        );
        body
    }

    /// `GET path` with the right token, as text (`/metrics`); panics unless it succeeds.
    pub fn text(&self, path: &str) -> String {
        let mut resp = ureq::get(format!("{}{path}", self.base))
            .header("Authorization", format!("Bearer {}", self.token))
            .call()
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        resp.body_mut().read_to_string().unwrap_or_default()
    }

    /// The calls listed now.
    pub fn calls(&self) -> Vec<Value> {
        self.ok("GET", "/api/v1/calls")["calls"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The event stream (`?types=`), token in the query as a browser sends it.
    pub fn events(&self, types: &str) -> Events {
        let ws = self.base.replacen("http", "ws", 1);
        let url = format!("{ws}/api/v1/events?types={types}&token={}", self.token);
        let (socket, _) = tungstenite::connect(url.as_str()).expect("event stream");
        if let MaybeTlsStream::Plain(s) = socket.get_ref() {
            s.set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
        }
        Events { socket }
    }
}

pub struct Events {
    socket: WebSocket<MaybeTlsStream<TcpStream>>,
}

impl Events {
    /// The events received within `limit` until `done` says the last one is enough.
    pub fn until(&mut self, limit: Duration, mut done: impl FnMut(&Value) -> bool) -> Vec<Value> {
        let end = std::time::Instant::now() + limit;
        let mut got = Vec::new();
        while std::time::Instant::now() < end {
            match super::ws::read_within(&mut self.socket) {
                Ok(Some(tungstenite::Message::Text(t))) => {
                    let v: Value = serde_json::from_str(&t).expect("an event is JSON");
                    let stop = done(&v);
                    got.push(v);
                    if stop {
                        break;
                    }
                }
                Ok(_) => {}
                Err(e) => panic!("event stream: {e} (after {got:?})"),
            }
        }
        got
    }
}
