//! `/api/v1/events`: the WebSocket event stream. Each client gets the feed's events of the
//! types it asked for as JSON text frames; one that falls behind is closed with 1008. The
//! first client turns the workers' notices on (`Envelope::Watch`), the last one off.

use super::feed::Item;
use super::server::ApiError;
use super::Shared;
use crate::worker::Envelope;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use serde::Deserialize;
use std::sync::Arc;
use tokio::sync::broadcast::error::RecvError;

pub const PATH: &str = "/api/v1/events";
/// The types a client may ask for (`?types=`; all without it).
const TYPES: [&str; 3] = ["call", "dtmf", "overload"];
/// WebSocket close code 1008, policy violation: the client read too slowly.
const POLICY: u16 = 1008;

pub fn routes() -> Router<Arc<Shared>> {
    Router::new().route(PATH, get(upgrade))
}

#[derive(Deserialize)]
struct Params {
    types: Option<String>,
}

async fn upgrade(
    State(s): State<Arc<Shared>>,
    Query(p): Query<Params>,
    ws: WebSocketUpgrade,
) -> Result<Response, ApiError> {
    let types: Vec<&'static str> = match p.types.as_deref() {
        None | Some("") => TYPES.to_vec(),
        Some(list) => list
            .split(',')
            .map(|t| {
                TYPES
                    .iter()
                    .copied()
                    .find(|k| *k == t.trim())
                    .ok_or_else(|| {
                        ApiError::new(
                            StatusCode::BAD_REQUEST,
                            format!("types: {t:?} — expected some of {}", TYPES.join(",")),
                        )
                    })
            })
            .collect::<Result<_, _>>()?,
    };
    if s.feed.clients() >= s.max_event_clients {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "{} event-stream clients already (api.max_event_clients)",
                s.max_event_clients
            ),
        ));
    }
    Ok(ws.on_upgrade(move |socket| stream(s, types, socket)))
}

async fn stream(s: Arc<Shared>, types: Vec<&'static str>, mut socket: WebSocket) {
    // Subscribed before the workers are told, so the first notice is not missed.
    let mut rx = s.feed.subscribe();
    if s.feed.join() == 0 {
        watch(&s, true);
    }
    loop {
        tokio::select! {
            got = rx.recv() => match got {
                Ok(item) => {
                    if !types.contains(&item.kind) {
                        continue;
                    }
                    if socket.send(Message::Text(text(&item).into())).await.is_err() {
                        break;
                    }
                }
                Err(RecvError::Lagged(n)) => {
                    let reason = format!("too slow: {n} events missed; reconnect");
                    let close = CloseFrame { code: POLICY, reason: reason.into() };
                    let _ = socket.send(Message::Close(Some(close))).await;
                    break;
                }
                Err(RecvError::Closed) => break,
            },
            // Anything from the client but a ping is the end (or an error).
            msg = socket.recv() => match msg {
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                _ => break,
            },
        }
    }
    if s.feed.leave() == 0 {
        watch(&s, false);
    }
}

fn text(item: &Item) -> String {
    serde_json::to_string(item).unwrap_or_default()
}

/// Tells every worker whether to make notices.
fn watch(s: &Shared, on: bool) {
    for w in 0..s.workers {
        s.mail.send(w, Envelope::Watch(on));
    }
}
