//! `/api/v1/calls` (list, show, hang up) and `/api/v1/stats`: each asks every worker through
//! its inbox (`server::ask`).

use super::server::{ask, page_limit, ApiError};
use super::Shared;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use switch::control::{cause_named, CallInfo, Command, Reply};

pub fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/api/v1/calls", get(list).post(super::originate::place))
        .route("/api/v1/calls/{id}", get(show).delete(hang_up))
        .route("/api/v1/stats", get(stats))
}

#[derive(Deserialize)]
struct Page {
    limit: Option<usize>,
    /// The last id of the previous page: calls come in id order, so pages are stable while
    /// calls come and go.
    after: Option<String>,
}

/// Every worker's calls, in id order.
async fn all_calls(s: &Shared) -> Result<Vec<CallInfo>, ApiError> {
    let mut calls: Vec<CallInfo> = ask(s, Command::Calls)
        .await?
        .into_iter()
        .flat_map(|r| match r {
            Reply::Calls(c) => c,
            _ => Vec::new(),
        })
        .collect();
    calls.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(calls)
}

async fn list(
    State(s): State<Arc<Shared>>,
    Query(p): Query<Page>,
) -> Result<Json<Value>, ApiError> {
    let limit = page_limit(p.limit)?;
    let calls = all_calls(&s).await?;
    let page: Vec<&CallInfo> = calls
        .iter()
        .filter(|c| p.after.as_ref().is_none_or(|a| c.id > *a))
        .take(limit + 1)
        .collect();
    let next = (page.len() > limit).then(|| page[limit - 1].id.clone());
    let page = &page[..page.len().min(limit)];
    Ok(Json(json!({ "calls": page, "next": next })))
}

async fn show(
    State(s): State<Arc<Shared>>,
    Path(id): Path<String>,
) -> Result<Json<CallInfo>, ApiError> {
    all_calls(&s)
        .await?
        .into_iter()
        .find(|c| c.id == id)
        .map(Json)
        .ok_or_else(|| no_call(&id))
}

pub(super) fn no_call(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("no call {id:?} (GET /api/v1/calls lists them)"),
    )
}

#[derive(Deserialize)]
struct HangUp {
    cause: Option<String>,
}

/// Hangs the call up on the worker that has it: BYE, CANCEL or a final response on every
/// leg, and its CDR written with the cause.
async fn hang_up(
    State(s): State<Arc<Shared>>,
    Path(id): Path<String>,
    Query(q): Query<HangUp>,
) -> Result<Json<Value>, ApiError> {
    let name = q.cause.as_deref().unwrap_or("normal");
    let cause = cause_named(name).ok_or_else(|| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("cause={name}: expected normal, busy, rejected, noanswer, or a Q.850 name or number"),
        )
    })?;
    let replies = ask(
        &s,
        Command::Hangup {
            call_id: id.clone(),
            cause,
        },
    )
    .await?;
    match replies.iter().any(|r| matches!(r, Reply::Hangup(true))) {
        true => Ok(Json(json!({ "id": id, "cause": cause }))),
        false => Err(no_call(&id)),
    }
}

async fn stats(State(s): State<Arc<Shared>>) -> Result<Json<Value>, ApiError> {
    let workers: Vec<_> = ask(&s, Command::Stats)
        .await?
        .into_iter()
        .filter_map(|r| match r {
            Reply::Stats(w) => Some(w),
            _ => None,
        })
        .collect();
    let c = &s.counters;
    Ok(Json(json!({
        "calls_active": workers.iter().map(|w| w.calls_active).sum::<usize>(),
        "calls_started": workers.iter().map(|w| w.calls_started).sum::<u64>(),
        "calls_rejected_busy": workers.iter().map(|w| w.calls_rejected_busy).sum::<u64>(),
        "dropped_unparseable": c.dropped_unparseable.load(Ordering::Relaxed),
        "dropped_guard": c.dropped_guard.load(Ordering::Relaxed),
        "tcp_refused": c.tcp_refused.load(Ordering::Relaxed),
        "tls_handshakes_cut": c.tls_handshakes_cut.load(Ordering::Relaxed),
        "event_clients": s.feed.clients(),
        "process_cpu_s": process_cpu_s(),
        "workers": workers,
    })))
}

/// CPU seconds (user and system) the whole process has used: the console's CPU graph is its
/// rate of change.
fn process_cpu_s() -> f64 {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given; RUSAGE_SELF is always valid.
    let u = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, u.as_mut_ptr());
        u.assume_init()
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(u.ru_utime) + secs(u.ru_stime)
}
