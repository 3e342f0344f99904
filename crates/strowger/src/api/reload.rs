//! `POST /api/v1/reload`: the configuration file read again and applied as SIGHUP does it
//! (crate::reload); a configuration that fails its check changes nothing and its errors are
//! returned, as check-config prints them.

use super::server::ApiError;
use super::Shared;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::json;
use std::sync::Arc;

pub fn routes() -> Router<Arc<Shared>> {
    Router::new().route("/api/v1/reload", post(reload))
}

async fn reload(State(s): State<Arc<Shared>>) -> Result<Response, ApiError> {
    let reloader = s.reloader.clone();
    // Reading and checking the file blocks: off the API's one runtime thread.
    let result = tokio::task::spawn_blocking(move || reloader.reload_and_log())
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    Ok(match result {
        Ok(report) => Json(report).into_response(),
        Err(errors) => (
            StatusCode::UNPROCESSABLE_ENTITY,
            Json(json!({
                "error": "the configuration was refused and the one in force is unchanged: fix it \
                          (strowger check-config FILE) and reload again",
                "errors": errors,
            })),
        )
            .into_response(),
    })
}
