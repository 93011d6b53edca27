//! Snapshots over HTTP, from a snapshots directory, with the diff archive's caching rules.
//!
//! | route | answer |
//! |---|---|
//! | `GET /snapshots/head` | JSON `{number, manifest}` of the newest snapshot; never cached |
//! | `GET /snapshots/{n}/manifest` | the manifest of the snapshot at block `n`; immutable |
//! | `GET /snapshots/{n}/{k}` | its chunk `k`; immutable |
//!
//! Immutable answers carry `Cache-Control: public, max-age=31536000, immutable` and a strong
//! `ETag`, and answer `If-None-Match` with 304, as diffs do: the same directory served by
//! nginx, a CDN or an object store works the same way (a static server's own ETags differ,
//! which clients do not depend on). A snapshot pruned meanwhile is 404.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::extract::{Path as UrlPath, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use gigas_rpc::files::OpenFile;
use tokio::sync::Semaphore;

use crate::format::MAX_MANIFEST_BYTES;

/// The most snapshot files being sent at once; more wait. An answer holds one piece of its
/// file ([`gigas_rpc::files::PIECE`]) at a time, and a client that stops reading is cut at
/// the server's send timeout, freeing its place.
pub const MAX_READS: usize = 32;

#[derive(Debug, Clone)]
struct AppState {
    dir: Arc<PathBuf>,
    reads: Arc<Semaphore>,
}

/// The routes over the snapshots directory `dir` (created or not yet: answers are 404
/// until a snapshot is written).
pub fn router(dir: PathBuf) -> Router {
    Router::new()
        .route("/snapshots/head", get(head))
        .route("/snapshots/{n}/{file}", get(file))
        .with_state(AppState {
            dir: Arc::new(dir),
            reads: Arc::new(Semaphore::new(MAX_READS)),
        })
}

fn json_error(status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({ "error": message }).to_string();
    (
        status,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

async fn read(state: &AppState, path: PathBuf) -> Result<Option<Vec<u8>>, Response> {
    let _permit = state
        .reads
        .acquire()
        .await
        .map_err(|_| json_error(StatusCode::SERVICE_UNAVAILABLE, "shutting down"))?;
    tokio::task::spawn_blocking(move || read_bounded(&path))
        .await
        .map_err(|e| json_error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()))?
        .map_err(|e| {
            tracing::error!(error = %e, "reading a snapshot file");
            json_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "reading the snapshot failed",
            )
        })
}

fn read_bounded(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    match std::fs::metadata(path) {
        Ok(m) if m.len() > MAX_MANIFEST_BYTES => Err(std::io::Error::other(format!(
            "{} is {} bytes, larger than any snapshot file",
            path.display(),
            m.len()
        ))),
        Ok(_) => std::fs::read(path).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

async fn head(State(state): State<AppState>) -> Response {
    match read(&state, state.dir.join(crate::produce::HEAD_FILE)).await {
        Ok(Some(bytes)) => (
            StatusCode::OK,
            [
                (header::CONTENT_TYPE, "application/json"),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            bytes,
        )
            .into_response(),
        Ok(None) => json_error(StatusCode::NOT_FOUND, "no snapshot written yet"),
        Err(response) => response,
    }
}

async fn file(
    State(state): State<AppState>,
    UrlPath((n, file)): UrlPath<(String, String)>,
    headers: HeaderMap,
) -> Response {
    // Only canonical decimals and `manifest`: nothing else of the directory is reachable.
    let decimal = |s: &str| s.parse::<u64>().ok().filter(|v| v.to_string() == s);
    let Some(block) = decimal(&n) else {
        return json_error(
            StatusCode::BAD_REQUEST,
            &format!("'{n}' is not a block number (decimal, e.g. /snapshots/1200/manifest)"),
        );
    };
    if file != "manifest" && decimal(&file).is_none() {
        return json_error(
            StatusCode::BAD_REQUEST,
            &format!("'{file}' is neither `manifest` nor a chunk number"),
        );
    }
    let path = state.dir.join(block.to_string()).join(&file);
    // Streamed from the file a piece at a time, the read permit held by the body until the
    // last byte is sent (or the server cuts a client that stopped reading): what the routes
    // hold is a piece per permit, whatever the files' lengths.
    let Ok(permit) = state.reads.clone().acquire_owned().await else {
        return json_error(StatusCode::SERVICE_UNAVAILABLE, "shutting down");
    };
    let opened = tokio::task::spawn_blocking(move || {
        match std::fs::metadata(&path) {
            Ok(m) if m.len() > MAX_MANIFEST_BYTES => {
                return Err(std::io::Error::other(format!(
                    "{} is {} bytes, larger than any snapshot file",
                    path.display(),
                    m.len()
                )))
            }
            _ => {}
        }
        OpenFile::open(&path, b"")
    })
    .await;
    let opened = match opened {
        Ok(Ok(opened)) => opened,
        Ok(Err(e)) => {
            tracing::error!(error = %e, "reading a snapshot file");
            return json_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "reading the snapshot failed",
            );
        }
        Err(e) => return json_error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    };
    match opened {
        Some(file) => file
            .respond(&headers, "application/octet-stream", Some(permit))
            .into_response(),
        None => json_error(
            StatusCode::NOT_FOUND,
            &format!(
                "no snapshot file {block}/{file} (pruned, or never written); see /snapshots/head"
            ),
        ),
    }
}
