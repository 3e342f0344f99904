//! `POST /api/v1/calls`: strowger calls FROM and, once answered, runs the dialplan for TO on
//! that leg (switch's originate.rs). The call's id is a Call-ID made here, and the call is
//! placed on the worker it hashes to (`switch::owner`), where FROM's in-dialog requests land.

use super::server::{ask_worker, ApiError};
use super::Shared;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use switch::control::{Command, Reply};
use switch::originate::Originate;

/// How long FROM rings unless `timeout_s` says otherwise, and the most it may.
const DEFAULT_TIMEOUT_S: u64 = 30;
const MAX_TIMEOUT_S: u64 = 300;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Place {
    from: String,
    to: String,
    context: Option<String>,
    caller_id: Option<String>,
    timeout_s: Option<u64>,
}

fn bad(message: String) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, message)
}

/// What a name may hold: it goes into SIP headers and URIs.
fn plain(what: &str, v: &str) -> Result<(), ApiError> {
    let ok = !v.is_empty()
        && v.len() <= 128
        && v.bytes()
            .all(|b| b.is_ascii_graphic() && !b"<>\"\\".contains(&b));
    match ok {
        true => Ok(()),
        false => Err(bad(format!(
            "{what} {v:?}: expected 1-128 printable characters, no <>\"\\ or spaces"
        ))),
    }
}

/// Places the call and answers 201 with its id at once: whether FROM answers is told by the
/// event stream and the CDR.
pub(super) async fn place(
    State(s): State<Arc<Shared>>,
    body: Result<Json<Place>, axum::extract::rejection::JsonRejection>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let Json(p) = body.map_err(|e| {
        bad(format!(
            "{e}: expected {{\"from\": user or sip: URI, \"to\": extension, \"context\"?, \"caller_id\"?, \"timeout_s\"?}}"
        ))
    })?;
    plain("from", &p.from)?;
    plain("to", &p.to)?;
    if let Some(c) = &p.caller_id {
        plain("caller_id", c)?;
    }
    let timeout_s = p.timeout_s.unwrap_or(DEFAULT_TIMEOUT_S);
    if !(1..=MAX_TIMEOUT_S).contains(&timeout_s) {
        return Err(bad(format!(
            "timeout_s={timeout_s}: expected 1-{MAX_TIMEOUT_S}"
        )));
    }
    let context = p
        .context
        .unwrap_or_else(|| s.reloader.config().dialplan.default_context().to_string());
    let call_id = format!("{:032x}@strowger-api", fastrand::u128(..));
    let worker = switch::owner(&call_id, s.workers);
    let o = Originate {
        call_id: call_id.clone(),
        from: p.from,
        to: p.to,
        context,
        caller_id: p.caller_id,
        timeout: Duration::from_secs(timeout_s),
    };
    match ask_worker(&s, worker, Command::Originate(Box::new(o))).await? {
        Reply::Originated(Ok(())) => Ok((StatusCode::CREATED, Json(json!({ "id": call_id })))),
        Reply::Originated(Err(r)) => Err(ApiError::new(
            StatusCode::from_u16(r.status).unwrap_or(StatusCode::BAD_REQUEST),
            r.message,
        )),
        _ => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "unexpected answer",
        )),
    }
}
