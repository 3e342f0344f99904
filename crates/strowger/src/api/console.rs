//! The web console: a page and its scripts, built into the binary (crates/strowger/console;
//! uPlot comes from npm at build time, build.rs), served without the token — the page itself
//! asks for the token and sends it with every API request it makes.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;

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

pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(|| async { Redirect::to("/console/") }))
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
