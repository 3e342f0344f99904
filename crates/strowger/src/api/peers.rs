//! `/api/v1/iax2/peers`: the `[[iax2.peers]]` with the state the workers last wrote to the data
//! directory (`Event::State`, the file `strowger show peers` reads): where a dynamic peer
//! registered from and until when, and whether its last POKE was answered.

use super::server::ApiError;
use super::Shared;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};
use std::sync::Arc;
use switch::config::IaxHost;

pub fn routes() -> Router<Arc<Shared>> {
    Router::new().route("/api/v1/iax2/peers", get(peers))
}

async fn peers(State(s): State<Arc<Shared>>) -> Result<Json<Value>, ApiError> {
    let cfg = s.reloader.config();
    let path = cfg.general.data_dir.join(switch::iax::PEERS_STATE);
    let text = tokio::task::spawn_blocking(move || std::fs::read_to_string(path).ok())
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let state: Value = text
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null);
    let rows: Vec<Value> = cfg
        .iax2
        .peers
        .iter()
        .map(|p| {
            let st = &state["peers"][&p.name];
            json!({
                "name": p.name,
                "host": match p.host {
                    IaxHost::Static(a) => a.to_string(),
                    IaxHost::Dynamic => "dynamic".to_string(),
                },
                "registered_from": st["registered_from"],
                "registered_until": st["registered_until"],
                "reachable": st["reachable"],
                "rtt_ms": st["rtt_ms"],
                "codecs": p.codecs.iter().map(|f| f.name()).collect::<Vec<_>>(),
                "trunk": p.trunk,
            })
        })
        .collect();
    Ok(Json(json!({ "peers": rows, "as_of": state["written"] })))
}
