//! `/api/v1/registrations` and `/api/v1/users`: the users and where their phones registered,
//! read and changed through the location and credential store the workers use — as the
//! registrar and `strowger user` change it. Store calls may wait on the network (Redis,
//! Memcached), so they run on tokio's blocking threads, never on the API's own.

use super::server::{page_limit, ApiError};
use super::Shared;
use crate::users::{with_password, NewUser};
use crate::worker::Envelope;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, put};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

pub fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/api/v1/registrations", get(registrations))
        .route(
            "/api/v1/registrations/{user}",
            axum::routing::delete(unregister),
        )
        .route("/api/v1/users", get(users).post(add_user))
        .route("/api/v1/users/{user}", put(set_password).delete(del_user))
}

/// Runs a store call off the API's thread; a store error is 503 naming the store.
async fn with_store<T: Send + 'static>(
    s: &Arc<Shared>,
    f: impl FnOnce(&dyn store::Store) -> Result<T, String> + Send + 'static,
) -> Result<T, ApiError> {
    let store = s.store.clone();
    tokio::task::spawn_blocking(move || f(&*store))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(|e| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the store (registrar.store): {e}"),
            )
        })
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[derive(Deserialize)]
struct RegPage {
    user: Option<String>,
    limit: Option<usize>,
    after: Option<String>,
}

/// The users with a registered contact, in user order (`after`: the last of the previous page).
async fn registrations(
    State(s): State<Arc<Shared>>,
    Query(p): Query<RegPage>,
) -> Result<Json<Value>, ApiError> {
    let limit = page_limit(p.limit)?;
    let (rows, next) = with_store(&s, move |st| {
        // Each user's address-of-record is USER@ITS-DOMAIN, as the registrar keys it.
        let mut aors: Vec<(String, String)> = st
            .users()
            .map_err(|e| e.to_string())?
            .into_iter()
            .filter(|c| p.user.as_ref().is_none_or(|u| c.user == *u))
            .map(|c| (c.user.clone(), format!("{}@{}", c.user, c.domain)))
            .collect();
        aors.sort();
        aors.dedup();
        let now = now();
        let mut rows = Vec::new();
        let mut next = None;
        let after = |u: &String| p.after.as_ref().is_none_or(|a| u > a);
        for (user, aor) in aors.into_iter().filter(|(u, _)| after(u)) {
            let bindings = st.lookup(&aor, now).map_err(|e| e.to_string())?;
            if bindings.is_empty() {
                continue;
            }
            if rows.len() == limit {
                next = rows.last().map(|r: &Value| r["user"].clone());
                break;
            }
            let contacts: Vec<Value> = bindings
                .iter()
                .map(|b| {
                    json!({
                        "contact": b.contact,
                        "expires_in": b.remaining(now),
                        "received": b.received.to_string(),
                        "transport": b.transport,
                        "q": f64::from(b.q) / 1000.0,
                        "user_agent_instance": b.instance,
                    })
                })
                .collect();
            rows.push(json!({ "user": user, "aor": aor, "contacts": contacts }));
        }
        Ok((rows, next))
    })
    .await?;
    Ok(Json(json!({ "registrations": rows, "next": next })))
}

/// Removes every binding of the user's address-of-record, as a `Contact: *` REGISTER with
/// `Expires: 0` would: event clients are told each contact was removed, and the workers that
/// watched them that they will not expire.
async fn unregister(
    State(s): State<Arc<Shared>>,
    Path(user): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let aor = format!("{user}@{}", s.reloader.config().registrar.domain);
    let key = aor.clone();
    let removed = with_store(&s, move |st| {
        let now = now();
        let had = st.lookup(&key, now).map_err(|e| e.to_string())?;
        st.update(&key, &[store::Change::RemoveAll], now)
            .and_then(|_| st.commit())
            .map_err(|e| e.to_string())?;
        Ok(had)
    })
    .await?;
    if removed.is_empty() {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("{aor} has no registered contact"),
        ));
    }
    for w in 0..s.workers {
        s.mail.send(w, Envelope::Unregistered(aor.clone()));
    }
    for b in &removed {
        s.feed.notice(switch::control::Notice::Removed {
            aor: aor.clone(),
            contact: b.contact.clone(),
        });
    }
    Ok(Json(json!({ "aor": aor, "removed": removed.len() })))
}

/// The users (never their HA1s).
async fn users(State(s): State<Arc<Shared>>) -> Result<Json<Value>, ApiError> {
    let users = with_store(&s, |st| st.users().map_err(|e| e.to_string())).await?;
    let rows: Vec<Value> = users
        .iter()
        .map(|c| {
            json!({
                "user": c.user,
                "domain": c.domain,
                "context": c.context,
                "caller_id": c.caller_id,
                "max_calls": c.max_calls,
                "allow": c.allow,
            })
        })
        .collect();
    Ok(Json(json!({ "users": rows })))
}

async fn add_user(
    State(s): State<Arc<Shared>>,
    Json(new): Json<NewUser>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let c = new
        .credentials(&s.reloader.config())
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e))?;
    let (user, domain) = (c.user.clone(), c.domain.clone());
    with_store(&s, move |st| st.put_user(&c).map_err(|e| e.to_string())).await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({ "user": user, "domain": domain })),
    ))
}

#[derive(Deserialize)]
struct Password {
    password: String,
}

async fn set_password(
    State(s): State<Arc<Shared>>,
    Path(user): Path<String>,
    Json(p): Json<Password>,
) -> Result<Json<Value>, ApiError> {
    let domain = s.reloader.config().registrar.domain.clone();
    let (u, d) = (user.clone(), domain.clone());
    let old = with_store(&s, move |st| st.user(&u, &d).map_err(|e| e.to_string())).await?;
    let old = old.ok_or_else(|| no_user(&user, &domain))?;
    let c =
        with_password(old, &p.password).map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e))?;
    with_store(&s, move |st| st.put_user(&c).map_err(|e| e.to_string())).await?;
    Ok(Json(json!({ "user": user, "domain": domain })))
}

async fn del_user(
    State(s): State<Arc<Shared>>,
    Path(user): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let domain = s.reloader.config().registrar.domain.clone();
    let (u, d) = (user.clone(), domain.clone());
    match with_store(&s, move |st| st.del_user(&u, &d).map_err(|e| e.to_string())).await? {
        true => Ok(Json(json!({ "user": user, "domain": domain }))),
        false => Err(no_user(&user, &domain)),
    }
}

fn no_user(user: &str, domain: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("{user}@{domain}: no such user (POST /api/v1/users adds one)"),
    )
}
