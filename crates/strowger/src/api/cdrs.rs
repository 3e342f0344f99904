//! `/api/v1/cdrs`: the recent CDRs of the JSON-lines file (`general.cdr`), newest first,
//! filtered by a search text. Read from the file's tail on the API thread (bounded), so the
//! workers, which only append, are never asked.

use super::server::{page_limit, ApiError};
use super::Shared;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::Arc;

/// How much of the file's end a search reads: about ten thousand CDRs.
const TAIL_BYTES: u64 = 8 << 20;

pub fn routes() -> Router<Arc<Shared>> {
    Router::new().route("/api/v1/cdrs", get(list))
}

#[derive(Deserialize)]
struct Search {
    /// Text the CDR's JSON must contain (any case): a number, a Call-ID, a cause.
    q: Option<String>,
    limit: Option<usize>,
}

async fn list(
    State(s): State<Arc<Shared>>,
    Query(p): Query<Search>,
) -> Result<Json<Value>, ApiError> {
    let limit = page_limit(p.limit)?;
    let path = {
        let cfg = s.reloader.config();
        cfg.general.data_dir.join(&cfg.general.cdr)
    };
    let q = p.q.unwrap_or_default().to_lowercase();
    let cdrs = tokio::task::spawn_blocking(move || recent(&path, &q, limit))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
    Ok(Json(json!({ "cdrs": cdrs })))
}

/// The last `limit` CDRs holding `q`, newest first.
fn recent(path: &Path, q: &str, limit: usize) -> Result<Vec<Value>, ApiError> {
    let mut f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!(
                    "cannot read the CDR file {}: {e} (general.cdr)",
                    path.display()
                ),
            ))
        }
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let from = len.saturating_sub(TAIL_BYTES);
    let mut text = String::new();
    f.seek(SeekFrom::Start(from))
        .and_then(|_| f.read_to_string(&mut text))
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("CDR file: {e}")))?;
    // A tail that starts mid-line starts with part of a CDR: skip it.
    let lines: Vec<&str> = text.lines().skip(usize::from(from > 0)).collect();
    Ok(lines
        .into_iter()
        .rev()
        .filter(|l| q.is_empty() || l.to_lowercase().contains(q))
        .filter_map(|l| serde_json::from_str(l).ok())
        .take(limit)
        .collect())
}
