//! The web console: a page and its scripts, built into the binary (crates/strowger/console;
//! uPlot comes from npm at build time, build.rs), served without the token — the page itself
//! asks for the token and sends it with every API request it makes. `/phone` leads to the
//! phone page, which the WebSocket listeners serve (sip_io/page.rs).

use super::Shared;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;
use std::sync::Arc;
use switch::config::{Listen, Transport};

/// Every file of the console: (name, content type, bytes).
const FILES: &[(&str, &str, &[u8])] = &[
    (
        "index.html",
        "text/html; charset=utf-8",
        include_bytes!("../../console/index.html"),
    ),
    (
        "console.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../console/console.js"),
    ),
    (
        "console.css",
        "text/css; charset=utf-8",
        include_bytes!("../../console/console.css"),
    ),
    (
        "uPlot.iife.min.js",
        "text/javascript; charset=utf-8",
        include_bytes!(concat!(env!("OUT_DIR"), "/console/uPlot.iife.min.js")),
    ),
    (
        "uPlot.min.css",
        "text/css; charset=utf-8",
        include_bytes!(concat!(env!("OUT_DIR"), "/console/uPlot.min.css")),
    ),
];

pub fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/", get(|| async { Redirect::to("/console/") }))
        .route("/phone", get(phone))
        .route("/console", get(|| async { Redirect::to("/console/") }))
        .route("/console/", get(|| async { file("index.html") }))
        .route(
            "/console/{name}",
            get(
                |axum::extract::Path(name): axum::extract::Path<String>| async move { file(&name) },
            ),
        )
}

fn file(name: &str) -> Response {
    match FILES.iter().find(|(n, _, _)| *n == name) {
        Some((_, kind, bytes)) => (
            [
                (header::CONTENT_TYPE, *kind),
                // The page must not be framed by another site (clickjacking of the hang-up button).
                (header::X_FRAME_OPTIONS, "DENY"),
                (
                    header::CONTENT_SECURITY_POLICY,
                    "default-src 'self'; connect-src 'self' ws: wss:; frame-ancestors 'none'",
                ),
            ],
            *bytes,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "no such console file").into_response(),
    }
}

/// To the phone page, on the listener its WebSocket is (its origin: see sip_io/page.rs).
async fn phone(State(s): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(host_of);
    match phone_url(&s.reloader.config().sip.listen, host) {
        Some(url) => Redirect::to(&url).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            "no phone page: it is served by a WebSocket listener; add \"wss:ADDR:PORT\" to \
             sip.listen",
        )
            .into_response(),
    }
}

/// The phone page's address: the first `wss:` listener's, else the first `ws:` one's; a
/// listener on every address (0.0.0.0, [::]) is reached at `host`, the one the console was.
fn phone_url(listen: &[Listen], host: Option<&str>) -> Option<String> {
    let first = |t| listen.iter().find(|l| l.transport == t);
    let (scheme, l) = match first(Transport::Wss) {
        Some(l) => ("https", l),
        None => ("http", first(Transport::Ws)?),
    };
    let port = l.addr.port();
    Some(match (l.addr.ip().is_unspecified(), host) {
        (true, Some(h)) => format!("{scheme}://{h}:{port}/"),
        _ => format!("{scheme}://{}/", l.addr),
    })
}

/// The host of a Host header (`host[:port]`), an IPv6 one with its brackets.
fn host_of(value: &str) -> &str {
    match value.find(']') {
        Some(end) if value.starts_with('[') => &value[..=end],
        _ => value.split(':').next().unwrap_or(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listen(l: &[(Transport, &str)]) -> Vec<Listen> {
        l.iter()
            .map(|&(transport, a)| Listen {
                transport,
                addr: a.parse().unwrap(),
            })
            .collect()
    }

    #[test]
    fn the_phone_page_is_on_the_first_secure_websocket_listener() {
        let both = listen(&[
            (Transport::Udp, "127.0.0.1:5060"),
            (Transport::Ws, "127.0.0.1:8088"),
            (Transport::Wss, "127.0.0.1:8089"),
        ]);
        assert_eq!(
            phone_url(&both, None).as_deref(),
            Some("https://127.0.0.1:8089/")
        );
        let plain = listen(&[(Transport::Ws, "[::1]:8088")]);
        assert_eq!(
            phone_url(&plain, Some("x")).as_deref(),
            Some("http://[::1]:8088/")
        );
        let any = listen(&[(Transport::Wss, "0.0.0.0:8089")]);
        assert_eq!(
            phone_url(&any, Some(host_of("pbx.example.com:8088"))).as_deref(),
            Some("https://pbx.example.com:8089/")
        );
        assert_eq!(host_of("[::1]:8088"), "[::1]");
        assert_eq!(
            phone_url(&listen(&[(Transport::Udp, "127.0.0.1:5060")]), None),
            None
        );
    }
}
