//! The router: every route, behind the bearer-token check, and the way a route asks the
//! workers (`ask`). Another part of the process adds its routes by merging a `Router` in
//! [`router`], before the token layer so they are guarded too.

use super::Shared;
use crate::worker::Envelope;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use std::sync::Arc;
use std::time::Duration;
use subtle::ConstantTimeEq;
use switch::control::{Command, Reply};

/// How long a route waits for every worker's answer; a worker that takes longer is stuck or
/// overloaded, and the client gets 503 rather than a partial answer.
const ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// The API's routes, all behind the token check.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/openapi.json", get(openapi))
        .merge(super::calls::routes())
        .merge(super::call_commands::routes())
        .merge(super::directory::routes())
        .merge(super::peers::routes())
        .merge(super::events::routes())
        .merge(super::reload::routes())
        .merge(super::cdrs::routes())
        .merge(super::translation::routes())
        .merge(crate::metrics::routes())
        .layer(middleware::from_fn_with_state(shared.clone(), authorize))
        // The console's files carry no data: the page asks for the token itself.
        .merge(super::console::routes())
        .with_state(shared)
}

/// The OpenAPI 3 document of every route (checked in; tests/api.rs holds the router to it).
async fn openapi() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        include_str!("openapi.json"),
    )
        .into_response()
}

/// Lets a request through only with `Authorization: Bearer TOKEN` — or, for the event stream
/// (browsers cannot set headers on a WebSocket), `?token=TOKEN`. Compared in constant time.
async fn authorize(State(s): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    let bearer = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let query = match req.uri().path() == super::events::PATH {
        true => req.uri().query().and_then(|q| {
            q.split('&')
                .find_map(|kv| kv.strip_prefix("token="))
                .map(str::to_string)
        }),
        false => None,
    };
    let given = bearer.map(str::to_string).or(query);
    match given {
        Some(t) if bool::from(t.as_bytes().ct_eq(s.token.as_bytes())) => next.run(req).await,
        _ => {
            let mut r = ApiError::new(
                StatusCode::UNAUTHORIZED,
                "missing or wrong token: send `Authorization: Bearer TOKEN` (api.token, or the \
                 data directory's api.token)",
            )
            .into_response();
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            r
        }
    }
}

/// A list holds this many items unless `limit` says otherwise, and at most [`MAX_LIMIT`].
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1000;

/// A list request's `limit`: the default when absent, 400 when out of range.
pub fn page_limit(limit: Option<usize>) -> Result<usize, ApiError> {
    let limit = limit.unwrap_or(DEFAULT_LIMIT);
    match (1..=MAX_LIMIT).contains(&limit) {
        true => Ok(limit),
        false => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("limit={limit}: expected 1-{MAX_LIMIT}"),
        )),
    }
}

/// An error as the API returns it: a status and `{"error": "..."}` that names the fix.
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.message });
        (self.status, Json(body)).into_response()
    }
}

/// Posts `cmd` to every worker's inbox and gathers their answers. The worker never waits: it
/// answers through a oneshot channel when its loop reaches the command.
pub async fn ask(s: &Shared, cmd: Command) -> Result<Vec<Reply>, ApiError> {
    ask_some(s, 0..s.workers, cmd).await
}

/// Posts `cmd` to worker `w` alone (the one that owns a call) and awaits its answer.
pub async fn ask_worker(s: &Shared, w: usize, cmd: Command) -> Result<Reply, ApiError> {
    let mut r = ask_some(s, w..w + 1, cmd).await?;
    r.pop()
        .ok_or_else(|| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "no worker answered"))
}

async fn ask_some(
    s: &Shared,
    workers: std::ops::Range<usize>,
    cmd: Command,
) -> Result<Vec<Reply>, ApiError> {
    let waits: Vec<_> = workers
        .map(|w| {
            let (reply, wait) = tokio::sync::oneshot::channel();
            let command = cmd.clone();
            s.mail.send(w, Envelope::Api { command, reply });
            wait
        })
        .collect();
    let gather = async {
        let mut replies = Vec::with_capacity(waits.len());
        for w in waits {
            replies.push(w.await.ok()?);
        }
        Some(replies)
    };
    match tokio::time::timeout(ASK_TIMEOUT, gather).await {
        Ok(Some(r)) => Ok(r),
        _ => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "a worker did not answer within 2 s (overloaded or stopping): try again",
        )),
    }
}
