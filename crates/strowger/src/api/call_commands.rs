//! Commands on a call in progress: `POST /api/v1/calls/{id}/dtmf`, `.../transfer`,
//! `.../play`, `.../record` and `.../mute` (and `DELETE` of those two). Each is asked of every worker, as a hang-up is; the
//! one that has the call acts (switch's call_commands.rs) and the others say they do not have it.

use super::calls::no_call;
use super::server::{ask, ApiError};
use super::Shared;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use switch::call_commands::{Action, Side};
use switch::control::{Command, Reply};

pub fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/api/v1/calls/{id}/dtmf", post(dtmf))
        .route("/api/v1/calls/{id}/transfer", post(transfer))
        .route("/api/v1/calls/{id}/play", post(play))
        .route(
            "/api/v1/calls/{id}/record",
            post(record).delete(stop_recording),
        )
        .route("/api/v1/calls/{id}/mute", post(mute).delete(unmute))
}

/// The most digits one request sends.
const MAX_DIGITS: usize = 32;

fn bad(message: String) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, message)
}

/// A JSON body, or 400 saying what was expected.
fn body<T>(b: Result<Json<T>, JsonRejection>, expected: &str) -> Result<T, ApiError> {
    b.map(|Json(t)| t)
        .map_err(|e| bad(format!("{e}: expected {expected}")))
}

fn side(leg: Option<&str>) -> Result<Side, ApiError> {
    match leg.unwrap_or("caller") {
        "caller" => Ok(Side::Caller),
        "callee" => Ok(Side::Callee),
        other => Err(bad(format!("leg {other:?}: expected caller or callee"))),
    }
}

/// Asks every worker to act on call `id`: 404 if none has it, else the one's answer.
async fn act(s: &Shared, id: String, action: Action) -> Result<Json<Value>, ApiError> {
    let cmd = Command::Act {
        call_id: id.clone(),
        action,
    };
    let answer = ask(s, cmd).await?.into_iter().find_map(|r| match r {
        Reply::Acted(a) => a,
        _ => None,
    });
    match answer {
        None => Err(no_call(&id)),
        Some(Ok(())) => Ok(Json(json!({ "id": id }))),
        Some(Err(r)) => Err(ApiError::new(
            StatusCode::from_u16(r.status).unwrap_or(StatusCode::CONFLICT),
            r.message,
        )),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Dtmf {
    digits: String,
    leg: Option<String>,
}

/// Digits as if the leg (default the caller) pressed them: the call's app hears them, and the
/// party bridged to it gets them in its negotiated form.
async fn dtmf(
    State(s): State<Arc<Shared>>,
    Path(id): Path<String>,
    b: Result<Json<Dtmf>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let d = body(
        b,
        "{\"digits\": \"0-9*#A-D\", \"leg\"?: \"caller\" or \"callee\"}",
    )?;
    let ok = !d.digits.is_empty()
        && d.digits.len() <= MAX_DIGITS
        && d.digits
            .chars()
            .all(|c| matches!(c, '0'..='9' | '*' | '#' | 'A'..='D'));
    if !ok {
        return Err(bad(format!(
            "digits {:?}: expected 1-{MAX_DIGITS} of 0-9 * # A-D",
            d.digits
        )));
    }
    let leg = side(d.leg.as_deref())?;
    let action = Action::Dtmf {
        digits: d.digits,
        leg,
    };
    act(&s, id, action).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Transfer {
    to: String,
    leg: Option<String>,
}

/// Blind transfer of a bridged call's party (default the caller) to an extension of the call's
/// own context; the other party is released.
async fn transfer(
    State(s): State<Arc<Shared>>,
    Path(id): Path<String>,
    b: Result<Json<Transfer>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let t = body(b, "{\"to\": extension, \"leg\"?: \"caller\" or \"callee\"}")?;
    let plain = !t.to.is_empty()
        && t.to.len() <= 64
        && t.to
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"*#+-_.".contains(&b));
    if !plain {
        return Err(bad(format!(
            "to {:?}: expected an extension (letters, digits, * # + - _ .)",
            t.to
        )));
    }
    let leg = side(t.leg.as_deref())?;
    act(&s, id, Action::Transfer { to: t.to, leg }).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Play {
    file: String,
    leg: Option<String>,
}

/// Plays a prompt to a leg (default the caller) of a bridged call, in place of its party until
/// the prompt ends: `demo`, `tts:TEXT`, or a WAV file under the data directory — one that is
/// not there is 404 here, rather than a line in the log once the worker looks for it.
async fn play(
    State(s): State<Arc<Shared>>,
    Path(id): Path<String>,
    b: Result<Json<Play>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let p = body(
        b,
        "{\"file\": \"demo\", \"tts:TEXT\" or \"NAME.wav\" under the data directory, \"leg\"?: \"caller\" or \"callee\"}",
    )?;
    let leg = side(p.leg.as_deref())?;
    let relative = !p.file.starts_with('/') && !p.file.split('/').any(|c| c == "..");
    if p.file.ends_with(".wav") && relative {
        let path = s.reloader.config().general.data_dir.join(&p.file);
        if !path.is_file() {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                format!("no file {} (a WAV under general.data_dir)", path.display()),
            ));
        }
    }
    act(&s, id, Action::Play { file: p.file, leg }).await
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Record {
    file: Option<String>,
}

/// Starts recording the call (stereo: caller left) to `file` under the data directory, or
/// `calls/CALL-ID.wav`.
async fn record(
    State(s): State<Arc<Shared>>,
    Path(id): Path<String>,
    b: Result<Json<Record>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let r = body(
        b,
        "{\"file\"?: \"NAME.wav\" or \"NAME.opus\" under the data directory}",
    )?;
    act(&s, id, Action::Record { file: r.file }).await
}

async fn stop_recording(
    State(s): State<Arc<Shared>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    act(&s, id, Action::StopRecording).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Mute {
    leg: Option<String>,
    direction: Option<String>,
}

/// Mutes a leg (default the caller): `in`, what it says reaches nobody (the default); `out`,
/// it hears nothing; `both`.
async fn mute(
    State(s): State<Arc<Shared>>,
    Path(id): Path<String>,
    b: Result<Json<Mute>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let expected =
        "{\"leg\"?: \"caller\" or \"callee\", \"direction\"?: \"in\", \"out\" or \"both\"}";
    let m = body(b, expected)?;
    let leg = side(m.leg.as_deref())?;
    let (muted, deaf) = match m.direction.as_deref().unwrap_or("in") {
        "in" => (true, false),
        "out" => (false, true),
        "both" => (true, true),
        other => {
            return Err(bad(format!(
                "direction {other:?}: expected in, out or both"
            )))
        }
    };
    act(&s, id, Action::Mute { leg, muted, deaf }).await
}

#[derive(Deserialize)]
struct Leg {
    leg: Option<String>,
}

/// Undoes a leg's mute (`?leg=callee`; default the caller).
async fn unmute(
    State(s): State<Arc<Shared>>,
    Path(id): Path<String>,
    axum::extract::Query(q): axum::extract::Query<Leg>,
) -> Result<Json<Value>, ApiError> {
    let leg = side(q.leg.as_deref())?;
    let action = Action::Mute {
        leg,
        muted: false,
        deaf: false,
    };
    act(&s, id, action).await
}
