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
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tokio::sync::Semaphore;

use crate::format::MAX_MANIFEST_BYTES;

/// The most snapshot files read at once; more wait (a chunk is at most a few MiB, so this
/// bounds the memory the routes hold).
pub const MAX_READS: usize = 8;

const IMMUTABLE: &str = "public, max-age=31536000, immutable";

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

fn etag(bytes: &[u8]) -> String {
    let hash = blake3::hash(bytes);
    format!("\"{}\"", hex::encode(&hash.as_bytes()[..16]))
}

fn matches_etag(headers: &HeaderMap, tag: &str) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .any(|candidate| candidate == tag || candidate == "*")
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
    match read(&state, path).await {
        Ok(Some(bytes)) => immutable(bytes, &headers),
        Ok(None) => json_error(
            StatusCode::NOT_FOUND,
            &format!(
                "no snapshot file {block}/{file} (pruned, or never written); see /snapshots/head"
            ),
        ),
        Err(response) => response,
    }
}

fn immutable(bytes: Vec<u8>, headers: &HeaderMap) -> Response {
    let tag = etag(&bytes);
    let tag_value = HeaderValue::from_str(&tag).unwrap_or(HeaderValue::from_static("\"\""));
    if matches_etag(headers, &tag) {
        return (
            StatusCode::NOT_MODIFIED,
            [
                (header::ETAG, tag_value),
                (header::CACHE_CONTROL, HeaderValue::from_static(IMMUTABLE)),
            ],
        )
            .into_response();
    }
    (
        StatusCode::OK,
        [
            (header::ETAG, tag_value),
            (header::CACHE_CONTROL, HeaderValue::from_static(IMMUTABLE)),
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            ),
        ],
        bytes,
    )
        .into_response()
}
