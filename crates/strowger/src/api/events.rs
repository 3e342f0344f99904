//! `/api/v1/events`: the WebSocket event stream. Each client gets the feed's events of the
//! types it asked for as JSON text frames; one that falls behind is closed with 1008. The
//! workers are told which types some client wants (`Envelope::Watch`) as clients come and go;
//! they make notices of those types only.

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
use futures_util::SinkExt;
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};

pub const PATH: &str = "/api/v1/events";
/// The types a client may ask for (`?types=`; all without it).
const TYPES: [&str; 5] = switch::control::KINDS;
/// WebSocket close code 1008, policy violation: the client read too slowly.
const POLICY: u16 = 1008;
/// How long the first event of a batch waits for the next ones. While the stream gathers, no
/// task waits on the feed, so a worker's publish wakes no thread; and the batch is one write.
/// At 1,000 calls/s this is about 50 wake-ups a second instead of 5,000.
const GATHER: Duration = Duration::from_millis(20);
/// The read buffer of a client's WebSocket. A client sends only pings and a close, but
/// tungstenite zeroes its whole read buffer before every read, and the stream reads each time
/// it has sent a batch: 128 KiB (its default) made that zeroing most of the API thread's work
/// per batch (bench/RESULTS.md). A larger frame still arrives, over several reads.
const READ_BUFFER: usize = 4096;

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
    Ok(ws
        .read_buffer_size(READ_BUFFER)
        .on_upgrade(move |socket| stream(s, types, socket)))
}

async fn stream(s: Arc<Shared>, types: Vec<&'static str>, mut socket: WebSocket) {
    // Subscribed before the workers are told, so the first notice is not missed.
    let mut rx = s.feed.subscribe();
    let mask = types
        .iter()
        .fold(0, |m, t| m | switch::control::kind_bit(t));
    s.feed.subscribed(mask, true, |all| watch(&s, all));
    loop {
        tokio::select! {
            got = rx.recv() => {
                tokio::time::sleep(GATHER).await;
                match send_batch(got, &mut rx, &types, &mut socket).await {
                    Batch::Sent => {}
                    Batch::Lagged(n) => {
                        let reason = format!("too slow: {n} events missed; reconnect");
                        let close = CloseFrame { code: POLICY, reason: reason.into() };
                        let _ = socket.send(Message::Close(Some(close))).await;
                        break;
                    }
                    Batch::Gone => break,
                }
            }
            // Anything from the client but a ping is the end (or an error).
            msg = socket.recv() => match msg {
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                _ => break,
            },
        }
    }
    s.feed.subscribed(mask, false, |all| watch(&s, all));
}

/// How a batch ended.
enum Batch {
    Sent,
    /// The client fell this many events behind.
    Lagged(u64),
    /// The client or the feed is gone.
    Gone,
}

/// Writes `first` and every event published since, of the client's types, and flushes once.
async fn send_batch(
    first: Result<Arc<Item>, RecvError>,
    rx: &mut tokio::sync::broadcast::Receiver<Arc<Item>>,
    types: &[&'static str],
    socket: &mut WebSocket,
) -> Batch {
    let mut got = first;
    loop {
        match got {
            Ok(item) if types.contains(&item.kind) => {
                if socket
                    .feed(Message::Text(text(&item).into()))
                    .await
                    .is_err()
                {
                    return Batch::Gone;
                }
            }
            Ok(_) => {}
            Err(RecvError::Lagged(n)) => return Batch::Lagged(n),
            Err(RecvError::Closed) => return Batch::Gone,
        }
        got = match rx.try_recv() {
            Ok(item) => Ok(item),
            Err(TryRecvError::Lagged(n)) => Err(RecvError::Lagged(n)),
            Err(TryRecvError::Closed) => Err(RecvError::Closed),
            Err(TryRecvError::Empty) => break,
        };
    }
    match socket.flush().await {
        Ok(()) => Batch::Sent,
        Err(_) => Batch::Gone,
    }
}

fn text(item: &Item) -> String {
    serde_json::to_string(item).unwrap_or_default()
}

/// Tells every worker which types of notices to make.
fn watch(s: &Shared, mask: u8) {
    for w in 0..s.workers {
        s.mail.send(w, Envelope::Watch(mask));
    }
}
