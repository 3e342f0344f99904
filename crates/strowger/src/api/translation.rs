//! `/api/v1/translation`: what converting between two formats costs, in µs of CPU per second
//! of audio — the graph the process measured at start and routes its calls by
//! (`strowger show translation` prints the same).

use super::Shared;
use axum::routing::get;
use axum::{Json, Router};
use codec::translate::Graph;
use serde_json::{json, Value};
use std::sync::Arc;

pub fn routes() -> Router<Arc<Shared>> {
    Router::new().route(
        "/api/v1/translation",
        get(|| async { Json(matrix(Graph::global())) }),
    )
}

fn matrix(g: &Graph) -> Value {
    let nodes = g.nodes();
    let cost: Vec<Vec<Option<f64>>> = nodes
        .iter()
        .map(|&a| {
            nodes
                .iter()
                .map(|&b| g.path(a, b).map(|p| p.cost_us))
                .collect()
        })
        .collect();
    json!({
        "formats": nodes.iter().map(|n| n.name()).collect::<Vec<_>>(),
        "cost_us": cost,
    })
}
