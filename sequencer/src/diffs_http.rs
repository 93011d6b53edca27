//! The diff archive over HTTP and WebSocket, on the JSON-RPC port.
//!
//! | route | answer |
//! |---|---|
//! | `GET /diffs/{n}` | the diff file of block `n`; immutable |
//! | `GET /blocks/{n}` | block `n`'s transactions and receipts; immutable |
//! | `GET /diffs?from=A&to=B` | diffs `A..=B` in one body, each as its length (u32 LE) then its bytes; immutable when `B` is produced, else clipped to the head and not cached |
//! | `GET /diffs/head` | JSON `{number, hash, stateRoot}`; never cached |
//! | `GET /diffs/stream?from=N` (WebSocket) | one binary message per diff, from `N` (default: the next one) on, in order |
//! | `GET /snapshots/head`, `/snapshots/{n}/manifest`, `/snapshots/{n}/{k}` | state snapshots from the archive's `snapshots/` ([`gigas_snapshot::http`]) |
//!
//! Immutable answers carry `Cache-Control: public, max-age=31536000, immutable` and a strong
//! `ETag` (a hash of the bytes), and answer `If-None-Match` with 304. A block not produced yet
//! is 404, one removed by retention 410, both with a JSON error body, so that any HTTP cache
//! in between can serve the files without knowing anything of Gigas.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use gigas_statediff::archive::FileKind;
use tokio::sync::{broadcast, Semaphore};

use gigas_rpc::accept::{ClientAddr, ClientLimits};
use gigas_rpc::files::{matches_etag, OpenFile, IMMUTABLE};

use crate::diffs::DiffArchive;

/// The most diffs one range request returns.
pub const MAX_RANGE_BLOCKS: u64 = 1024;
/// The most bytes one range request returns (the range is cut short before it).
pub const MAX_RANGE_BYTES: usize = 16 << 20;
/// The most range requests answered at once; more get 503 with `Retry-After` (a follower
/// backs off and asks again). Answers are streamed a file at a time, so ranges hold at most
/// one file each in memory.
pub const MAX_RANGES: usize = 16;
/// How far past the archive's next block a stream may start (a follower that is ahead of an
/// archive catching up after a restart); further is refused.
pub const MAX_STREAM_AHEAD: u64 = 4096;
/// The most open `/diffs/stream` connections.
pub const MAX_STREAMS: usize = 256;
/// The most `/diffs/stream` connections one client address may hold (a follower needs one):
/// a single client cannot take the whole [`MAX_STREAMS`].
pub const MAX_STREAMS_PER_CLIENT: usize = 4;
/// How long a stream may wait for its client to take a message: one that does not read is
/// closed instead of holding the server's buffers.
pub const STREAM_SEND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

#[derive(Debug, Clone)]
struct AppState {
    diffs: Arc<DiffArchive>,
    streams: Arc<Semaphore>,
    /// Streams per client address.
    stream_clients: Arc<ClientLimits>,
    ranges: Arc<Semaphore>,
}

/// The routes, to hand to `gigas_rpc::HttpRoutes::new(..).with_websocket_paths(["/diffs/stream"])`.
/// `limit_loopback`: hold loopback clients to the per-client stream bound too (as the
/// server's `--rpc.limit-loopback`).
pub fn router(diffs: Arc<DiffArchive>, limit_loopback: bool) -> Router {
    Router::new()
        .route("/diffs", get(range))
        .route("/diffs/head", get(head))
        .route("/diffs/stream", get(stream))
        .route("/diffs/{n}", get(diff_file))
        .route("/blocks/{n}", get(block_file))
        .fallback(|| async { json_error(StatusCode::NOT_FOUND, "no such route; see /diffs/head") })
        .with_state(AppState {
            diffs,
            streams: Arc::new(Semaphore::new(MAX_STREAMS)),
            stream_clients: ClientLimits::new(MAX_STREAMS_PER_CLIENT, limit_loopback),
            ranges: Arc::new(Semaphore::new(MAX_RANGES)),
        })
}

/// An error answer before it is rendered (small, unlike a `Response`).
#[derive(Debug)]
struct HttpError {
    status: StatusCode,
    message: String,
}

impl HttpError {
    fn bad_request(message: String) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message,
        }
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        json_error(self.status, &self.message)
    }
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

/// 404 or 410 for a block the archive cannot serve, else `None`.
fn unavailable(diffs: &DiffArchive, number: u64) -> Option<Response> {
    let Some(head) = diffs.head() else {
        return Some(json_error(
            StatusCode::NOT_FOUND,
            "no diff published yet; the sequencer is still writing its archive",
        ));
    };
    if number > head.number {
        return Some(json_error(
            StatusCode::NOT_FOUND,
            &format!(
                "block {number} is not produced yet; the head is {}",
                head.number
            ),
        ));
    }
    if number < diffs.oldest() {
        return Some(json_error(
            StatusCode::GONE,
            &format!(
                "block {number} was removed by retention; this archive keeps blocks from {} on",
                diffs.oldest()
            ),
        ));
    }
    None
}

fn etag(domain: &[u8], bytes: &[u8]) -> String {
    let mut hasher = blake3::Hasher::new();
    hasher.update(domain);
    hasher.update(bytes);
    let hash = hasher.finalize();
    format!("\"{}\"", hex::encode(&hash.as_bytes()[..16]))
}

fn parse_number(raw: &str) -> Result<u64, HttpError> {
    raw.parse().map_err(|_| {
        HttpError::bad_request(format!(
            "'{raw}' is not a block number (decimal, e.g. /diffs/17)"
        ))
    })
}

/// Runs a read of the archive on the blocking pool; a failure is logged and answered 500.
async fn blocking_read<T, E>(
    read: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> Result<T, Response>
where
    T: Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    tokio::task::spawn_blocking(read)
        .await
        .map_err(|e| json_error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()))?
        .map_err(|e| {
            tracing::error!(error = %e, "reading the diff archive");
            json_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "reading the archive failed",
            )
        })
}

async fn read_file(
    diffs: &Arc<DiffArchive>,
    kind: FileKind,
    number: u64,
) -> Result<Option<Vec<u8>>, Response> {
    let diffs = diffs.clone();
    blocking_read(move || diffs.archive().read(kind, number)).await
}

/// Opens block `number`'s file of `kind` and computes its ETag, on the blocking pool.
async fn open_file(
    diffs: &Arc<DiffArchive>,
    kind: FileKind,
    number: u64,
) -> Result<Option<OpenFile>, Response> {
    let path = diffs.archive().path(kind, number);
    blocking_read(move || OpenFile::open(&path, b"")).await
}

async fn file(
    kind: FileKind,
    State(state): State<AppState>,
    Path(raw): Path<String>,
    headers: HeaderMap,
) -> Response {
    let number = match parse_number(&raw) {
        Ok(n) => n,
        Err(e) => return e.into_response(),
    };
    if let Some(response) = unavailable(&state.diffs, number) {
        return response;
    }
    // Streamed from the file a piece at a time (the route's permit is in the body): an
    // answer holds one piece in memory, whatever the file's length and the client's pace.
    match open_file(&state.diffs, kind, number).await {
        Ok(Some(file)) => file
            .respond(&headers, "application/octet-stream", None)
            .into_response(),
        // Retention raced the request.
        Ok(None) => json_error(
            StatusCode::GONE,
            &format!("block {number} was removed by retention"),
        ),
        Err(response) => response,
    }
}

async fn diff_file(state: State<AppState>, raw: Path<String>, headers: HeaderMap) -> Response {
    file(FileKind::Diff, state, raw, headers).await
}

async fn block_file(state: State<AppState>, raw: Path<String>, headers: HeaderMap) -> Response {
    file(FileKind::Block, state, raw, headers).await
}

async fn head(State(state): State<AppState>) -> Response {
    match state.diffs.head() {
        Some(head) => (
            StatusCode::OK,
            [
                (header::CONTENT_TYPE, "application/json"),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            head.to_json(),
        )
            .into_response(),
        None => json_error(StatusCode::NOT_FOUND, "no diff published yet"),
    }
}

/// `from` and `to` of a query string (other parameters are ignored).
fn query_numbers(uri: &Uri) -> Result<(Option<u64>, Option<u64>), HttpError> {
    let (mut from, mut to) = (None, None);
    for pair in uri.query().unwrap_or_default().split('&') {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        match name {
            "from" => from = Some(parse_number(value)?),
            "to" => to = Some(parse_number(value)?),
            _ => {}
        }
    }
    Ok((from, to))
}

async fn range(State(state): State<AppState>, uri: Uri, headers: HeaderMap) -> Response {
    let (from, to) = match query_numbers(&uri) {
        Ok((Some(from), Some(to))) if from <= to => (from, to),
        Ok(_) => {
            return json_error(
                StatusCode::BAD_REQUEST,
                "give a range as /diffs?from=A&to=B with A <= B",
            )
        }
        Err(e) => return e.into_response(),
    };
    if to - from >= MAX_RANGE_BLOCKS {
        return json_error(
            StatusCode::BAD_REQUEST,
            &format!("at most {MAX_RANGE_BLOCKS} blocks per request"),
        );
    }
    if let Some(response) = unavailable(&state.diffs, from) {
        return response;
    }
    let Ok(permit) = state.ranges.clone().try_acquire_owned() else {
        let mut response = json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!("{MAX_RANGES} range requests are being answered; try again shortly"),
        );
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return response;
    };
    let head = state.diffs.head().map_or(0, |h| h.number);
    let last = to.min(head);
    let diffs = state.diffs.clone();
    let plan = tokio::task::spawn_blocking(move || plan_range(&diffs, from, last, to)).await;
    let plan = match plan {
        Ok(Ok(plan)) => plan,
        Ok(Err(e)) => {
            tracing::error!(error = %e, "reading the diff archive");
            return json_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "reading the archive failed",
            );
        }
        Err(e) => return json_error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    };
    let Some(&(last_included, _)) = plan.files.last() else {
        return json_error(
            StatusCode::GONE,
            &format!("block {from} was removed by retention"),
        );
    };
    let mut response = Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .header(header::CONTENT_LENGTH, plan.length)
        .header("x-gigas-range", format!("{from}-{last_included}"));
    // The whole range asked for: as immutable as its files. Cut short (by the head or the
    // size bound): the answer to this URL will change, so it is not cached.
    match &plan.etag {
        Some(tag) if last_included == to => {
            if matches_etag(&headers, tag) {
                return (
                    StatusCode::NOT_MODIFIED,
                    [
                        (header::ETAG, tag.clone()),
                        (header::CACHE_CONTROL, IMMUTABLE.to_string()),
                    ],
                )
                    .into_response();
            }
            response = response
                .header(header::ETAG, tag)
                .header(header::CACHE_CONTROL, IMMUTABLE);
        }
        _ => response = response.header(header::CACHE_CONTROL, "no-store"),
    }
    let body = send_range(state.diffs.clone(), plan.files, permit);
    response
        .body(body)
        .unwrap_or_else(|_| json_error(StatusCode::INTERNAL_SERVER_ERROR, "building a response"))
}

/// The files a range answer sends, planned from their sizes before any is read.
struct RangePlan {
    /// `(block, file size)`, in order.
    files: Vec<(u64, u64)>,
    /// The answer's length: each file with its 4-byte length prefix.
    length: u64,
    /// A strong validator when the whole range is there: the range and the last file's
    /// bytes, whose signed header commits to every block before it.
    etag: Option<String>,
}

fn plan_range(
    diffs: &DiffArchive,
    from: u64,
    last: u64,
    to: u64,
) -> Result<RangePlan, gigas_statediff::archive::ArchiveError> {
    let mut plan = RangePlan {
        files: Vec::new(),
        length: 0,
        etag: None,
    };
    for n in from..=last {
        let Some(size) = diffs.archive().size(FileKind::Diff, n)? else {
            break;
        };
        let with_prefix = 4 + size;
        if !plan.files.is_empty() && plan.length + with_prefix > MAX_RANGE_BYTES as u64 {
            break;
        }
        plan.files.push((n, size));
        plan.length += with_prefix;
    }
    if plan.files.last().is_some_and(|(n, _)| *n == to) {
        if let Some(bytes) = diffs.archive().read(FileKind::Diff, to)? {
            plan.etag = Some(etag(format!("{from}-{to}").as_bytes(), &bytes));
        }
    }
    Ok(plan)
}

/// Streams the planned files, one read at a time, so that an answer holds one file in
/// memory whatever its length. The range's permit goes with the stream. A client that takes
/// nothing for [`STREAM_SEND_TIMEOUT`] is cut off, and so is one whose file changed or went
/// (retention) since the plan: the answer ends short of its `Content-Length`, which clients
/// see as a failed request and ask again.
fn send_range(
    diffs: Arc<DiffArchive>,
    files: Vec<(u64, u64)>,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> Body {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(1);
    tokio::spawn(async move {
        let _permit = permit;
        for (n, size) in files {
            let archive = diffs.clone();
            let read =
                tokio::task::spawn_blocking(move || archive.archive().read(FileKind::Diff, n))
                    .await;
            let chunk = match read {
                Ok(Ok(Some(bytes))) if bytes.len() as u64 == size => {
                    let mut chunk = Vec::with_capacity(4 + bytes.len());
                    chunk.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
                    chunk.extend_from_slice(&bytes);
                    Ok(chunk)
                }
                Ok(Err(e)) => {
                    tracing::error!(error = %e, block = n, "reading the diff archive for a range");
                    Err(std::io::Error::other("reading the archive failed"))
                }
                _ => Err(std::io::Error::other(format!(
                    "block {n}'s diff changed or was removed while the range was sent"
                ))),
            };
            let failed = chunk.is_err();
            let sent = tokio::time::timeout(STREAM_SEND_TIMEOUT, tx.send(chunk)).await;
            if failed || !matches!(sent, Ok(Ok(()))) {
                return;
            }
        }
    });
    Body::from_stream(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (chunk, rx))
    }))
}

async fn stream(
    State(state): State<AppState>,
    uri: Uri,
    client: Option<axum::Extension<ClientAddr>>,
    upgrade: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    let client = client.map(|axum::Extension(c)| c);
    let upgrade = match upgrade {
        Ok(upgrade) => upgrade,
        Err(_) => {
            return json_error(
                StatusCode::BAD_REQUEST,
                "/diffs/stream is a WebSocket: connect with a WebSocket client",
            )
        }
    };
    let from = match query_numbers(&uri) {
        Ok((from, _)) => from,
        Err(e) => return e.into_response(),
    };
    if let Some(from) = from {
        if from < state.diffs.oldest() {
            return json_error(
                StatusCode::GONE,
                &format!("block {from} was removed by retention"),
            );
        }
        // A stream from far beyond the head would hold a connection for nothing. A little
        // ahead is fine: after a restart the archive catches up with blocks a follower
        // already has.
        let next = state.diffs.head().map_or(0, |h| h.number + 1);
        if from > next.saturating_add(MAX_STREAM_AHEAD) {
            return json_error(
                StatusCode::NOT_FOUND,
                &format!(
                    "block {from} is not produced yet; the archive's next block is {next}, and a \
                     stream starts at most {MAX_STREAM_AHEAD} blocks after it"
                ),
            );
        }
    }
    // Requests always carry their client (the server's accept loop puts it there); one
    // without it (a router served elsewhere) is counted under the unspecified address.
    let client = client.map_or(std::net::Ipv4Addr::UNSPECIFIED.into(), |c| c.ip());
    let Some(slot) = state.stream_clients.try_open(client) else {
        return json_error(
            StatusCode::TOO_MANY_REQUESTS,
            &format!(
                "this address holds {MAX_STREAMS_PER_CLIENT} diff streams already; a follower \
                 needs one"
            ),
        );
    };
    let Ok(permit) = state.streams.clone().try_acquire_owned() else {
        return json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!("at most {MAX_STREAMS} diff streams are open; try again later"),
        );
    };
    upgrade.on_upgrade(move |socket| async move {
        let _permit = permit;
        let _slot = slot;
        if let Err(e) = send_stream(socket, state.diffs, from).await {
            tracing::debug!(error = %e, "diff stream closed");
        }
    })
}

/// Sends one message, closing the stream when the client has not taken it within
/// [`STREAM_SEND_TIMEOUT`].
async fn send_bounded(socket: &mut WebSocket, message: Message) -> Result<(), axum::Error> {
    match tokio::time::timeout(STREAM_SEND_TIMEOUT, socket.send(message)).await {
        Ok(sent) => sent,
        Err(_) => Err(axum::Error::new(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the client did not read the stream",
        ))),
    }
}

/// Sends diffs from `from` (or the next one) on, in order, reading from the archive whatever
/// the live channel did not carry (a late start, or a lag).
async fn send_stream(
    mut socket: WebSocket,
    diffs: Arc<DiffArchive>,
    from: Option<u64>,
) -> Result<(), axum::Error> {
    let mut live = diffs.subscribe();
    let mut next = from.unwrap_or_else(|| diffs.head().map_or(0, |h| h.number + 1));
    loop {
        // Catch up from the files up to the head.
        while diffs.head().is_some_and(|h| h.number >= next) {
            match read_file(&diffs, FileKind::Diff, next).await {
                Ok(Some(bytes)) => {
                    send_bounded(&mut socket, Message::Binary(bytes.into())).await?;
                    next += 1;
                }
                // Removed by retention while the follower was behind: it must start again.
                Ok(None) | Err(_) => {
                    let _ = socket
                        .send(Message::Close(Some(axum::extract::ws::CloseFrame {
                            code: 1011,
                            reason: format!("block {next} is no longer in the archive").into(),
                        })))
                        .await;
                    return Ok(());
                }
            }
        }
        tokio::select! {
            received = live.recv() => match received {
                Ok(diff) if diff.number == next => {
                    send_bounded(&mut socket, Message::Binary(diff.bytes.0)).await?;
                    next += 1;
                }
                // Older: already sent. Newer: the loop reads the gap from the files.
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return Ok(()),
            },
            incoming = socket.recv() => match incoming {
                // The follower closed, or the connection dropped.
                None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return Ok(()),
                Some(Ok(_)) => {}
            },
        }
    }
}
