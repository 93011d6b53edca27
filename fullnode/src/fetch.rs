//! Fetching diffs: catch up over HTTP, then follow the push.
//!
//! The fetcher keeps a cursor, the next block the apply thread wants, and loops:
//!
//! 1. **Head.** `GET /diffs/head` gives the sequencer's head.
//! 2. **Catch up** to it. From the sequencer, ranges (`GET /diffs?from=A&to=B`, several in
//!    flight, answers used in order); from a static server or cache, which has only the
//!    files, one `GET /diffs/N` per block with as many in flight. `--source-layout auto` tries
//!    a range first and falls back to files for good when the answer is not a range.
//! 3. **Follow.** The WebSocket `/diffs/stream?from=N` pushes each new diff. Where it cannot
//!    be opened (a static server, a proxy without WebSocket), the fetcher polls the head
//!    every `poll_interval` and fetches the files.
//!
//! Any failure (connection refused, timeout, a cut-short answer) costs a backoff (doubling
//! from `backoff_min` to `backoff_max`) and starts again from step 1 at the cursor, so a
//! restarted sequencer or proxy is picked up where the node is. The apply thread resets the
//! cursor (a new *epoch*) when it rejects a diff, so a corrupt file is fetched again rather
//! than skipped, and items of the old epoch still queued are dropped.
//!
//! Memory is bounded: diffs wait in a channel of `queue_blocks` entries holding at most
//! `queue_bytes` between them, and the fetcher awaits room before fetching more (a slow
//! apply thread slows the fetcher, and the sequencer's stream falls back to its files).
//! An answer is read into memory only up to `max_response_bytes` (a source that sends an
//! endless body is cut off, not followed into an out-of-memory kill), and the WebSocket's
//! messages to the same bound.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use tokio::sync::{mpsc, watch};
use tracing::{info, warn};

use crate::metrics::FollowerMetrics;
use crate::status::SyncState;

/// How the source lays out its diffs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum SourceLayout {
    /// Try the sequencer's range endpoint; fall back to files.
    #[default]
    Auto,
    /// A Gigas sequencer: ranges and the WebSocket stream.
    Sequencer,
    /// A static HTTP server or cache over the archive directory: files and `diffs/head` only.
    Static,
}

/// The fetcher's settings.
#[derive(Debug, Clone)]
pub struct FetchConfig {
    /// Base URL of the source (`http://host:port`, no trailing slash).
    pub base: String,
    /// How the source lays out diffs.
    pub layout: SourceLayout,
    /// Blocks per range request.
    pub range_blocks: u64,
    /// Requests in flight while catching up.
    pub concurrency: usize,
    /// Diffs fetched and not yet taken by the apply thread, at most.
    pub queue_blocks: usize,
    /// Bytes of diffs (and block files) fetched and not yet applied, at most. A single diff
    /// larger than this still goes through, alone.
    pub queue_bytes: u64,
    /// Largest answer (a range of diffs, one diff, one WebSocket message) read from the
    /// source; a larger one fails the round like a malformed one.
    pub max_response_bytes: u64,
    /// Head polling interval where no push stream is available.
    pub poll_interval: Duration,
    /// First backoff after a failure.
    pub backoff_min: Duration,
    /// Largest backoff.
    pub backoff_max: Duration,
    /// Timeout of one HTTP request.
    pub request_timeout: Duration,
    /// Also fetch each block's transactions (`/blocks/N`), for re-execution.
    pub with_blocks: bool,
}

impl FetchConfig {
    /// Defaults for a source at `base`.
    pub fn new(base: impl Into<String>) -> Self {
        Self {
            base: base.into().trim_end_matches('/').to_string(),
            layout: SourceLayout::Auto,
            range_blocks: 64,
            concurrency: 4,
            queue_blocks: 256,
            queue_bytes: DEFAULT_QUEUE_BYTES,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            poll_interval: Duration::from_millis(100),
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            with_blocks: false,
        }
    }
}

/// [`FetchConfig::queue_bytes`] by default.
pub const DEFAULT_QUEUE_BYTES: u64 = 256 << 20;

/// [`FetchConfig::max_response_bytes`] by default: tungstenite's own bound on a message,
/// four times the sequencer's bound on a range answer (16 MiB).
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 64 << 20;

/// The queue's byte bound is kept in permits of this many bytes (tokio counts permits in
/// `u32`).
const QUEUE_PERMIT_BYTES: u64 = 1024;

/// One fetched diff on its way to the apply thread.
#[derive(Debug)]
pub struct Fetched {
    /// The cursor epoch it was fetched in.
    pub epoch: u64,
    /// The block it is meant to be (by position: the apply thread verifies it).
    pub number: u64,
    /// The diff file.
    pub diff: Vec<u8>,
    /// The block file, when re-execution asked for it.
    pub block: Option<Vec<u8>>,
    /// When it arrived.
    pub received: Instant,
    /// Its share of [`FetchConfig::queue_bytes`], given back when it is dropped (applied).
    pub room: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl AsRef<[u8]> for Fetched {
    /// The diff file (what the decode stage reads).
    fn as_ref(&self) -> &[u8] {
        &self.diff
    }
}

/// Where the apply thread wants the fetcher to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// Bumped at every reset.
    pub epoch: u64,
    /// The next block wanted.
    pub next: u64,
}

/// Why a fetch round failed (each is followed by a backoff and a new round).
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The HTTP request failed.
    #[error("GET {url}: {source}")]
    Http {
        /// The URL.
        url: String,
        /// The cause.
        source: reqwest::Error,
    },
    /// The server answered with an error status.
    #[error("GET {url}: HTTP {status}: {body}")]
    Status {
        /// The URL.
        url: String,
        /// The status.
        status: u16,
        /// The start of the body.
        body: String,
    },
    /// The answer is not what was asked for.
    #[error("GET {url}: {reason}")]
    Malformed {
        /// The URL.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// The WebSocket failed.
    #[error("diff stream {url}: {reason}")]
    Stream {
        /// The URL.
        url: String,
        /// What happened.
        reason: String,
    },
    /// The apply thread is gone.
    #[error("the apply thread stopped")]
    Closed,
    /// The apply thread moved the cursor: start over from it.
    #[error("cursor reset")]
    Reset,
}

/// The fetcher task. Runs until `stop` turns true or the apply thread drops its receiver.
#[derive(Debug)]
pub struct Fetcher {
    config: FetchConfig,
    client: reqwest::Client,
    metrics: FollowerMetrics,
    sync: Arc<SyncState>,
    /// Whether ranges work with this source (learnt on the first try in `Auto`).
    ranges: Option<bool>,
    /// Whether the source pushes diffs over a WebSocket (learnt on the first try).
    push: Option<bool>,
    /// The queue's byte bound, in permits of [`QUEUE_PERMIT_BYTES`].
    room: Arc<tokio::sync::Semaphore>,
    /// Permits in all.
    room_permits: u32,
    /// When a source that refused the push is asked again, and the wait after that.
    push_retry: Option<(Instant, Duration)>,
}

/// Whether an HTTP status means "try again later" (overloaded, restarting, rate-limited, a
/// proxy's upstream down) rather than "this source does not serve that".
fn is_transient(status: u16) -> bool {
    status == 408 || status == 429 || status >= 500
}

/// The first wait before a source that refused the push is asked again, and the longest.
const PUSH_RETRY_MIN: Duration = Duration::from_secs(30);
const PUSH_RETRY_MAX: Duration = Duration::from_secs(600);

impl Fetcher {
    /// A fetcher for `config`.
    pub fn new(
        config: FetchConfig,
        metrics: FollowerMetrics,
        sync: Arc<SyncState>,
    ) -> Result<Self, FetchError> {
        let client = reqwest::Client::builder()
            .timeout(config.request_timeout)
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|source| FetchError::Http {
                url: config.base.clone(),
                source,
            })?;
        let room_permits = u32::try_from(config.queue_bytes.div_ceil(QUEUE_PERMIT_BYTES))
            .unwrap_or(u32::MAX)
            .max(1);
        let ranges = match config.layout {
            SourceLayout::Auto => None,
            SourceLayout::Sequencer => Some(true),
            SourceLayout::Static => Some(false),
        };
        Ok(Self {
            config,
            client,
            metrics,
            sync,
            ranges,
            push: None,
            push_retry: None,
            room: Arc::new(tokio::sync::Semaphore::new(room_permits as usize)),
            room_permits,
        })
    }

    /// Fetches `GET {base}{path}`; `Ok(None)` on 404.
    async fn get(&self, path: &str) -> Result<Option<Vec<u8>>, FetchError> {
        let url = format!("{}{path}", self.config.base);
        let http = |source| FetchError::Http {
            url: url.clone(),
            source,
        };
        let response = self.client.get(&url).send().await.map_err(http)?;
        let status = response.status();
        if status == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            return Err(FetchError::Status {
                url,
                status: status.as_u16(),
                body: body.chars().take(200).collect(),
            });
        }
        let expected = response.content_length();
        let cap = self.config.max_response_bytes;
        let too_large = |url: String, what: String| FetchError::Malformed {
            url,
            reason: format!(
                "the answer {what}, more than the {cap}-byte bound; raise \
                 --fetch-max-response if the source is right"
            ),
        };
        if let Some(n) = expected.filter(|&n| n > cap) {
            return Err(too_large(url, format!("announces {n} bytes")));
        }
        let mut response = response;
        let mut bytes =
            Vec::with_capacity(usize::try_from(expected.unwrap_or(0).min(cap)).unwrap_or_default());
        while let Some(chunk) = response.chunk().await.map_err(http)? {
            let got = bytes.len() as u64 + chunk.len() as u64;
            if got > cap {
                return Err(too_large(url, format!("went on past {got} bytes")));
            }
            bytes.extend_from_slice(&chunk);
        }
        if expected.is_some_and(|n| n != bytes.len() as u64) {
            return Err(FetchError::Malformed {
                url,
                reason: format!(
                    "cut short: {} of {} bytes",
                    bytes.len(),
                    expected.unwrap_or_default()
                ),
            });
        }
        Ok(Some(bytes))
    }

    /// The sequencer's head block, from `/diffs/head` (`None` before the first diff).
    pub async fn head(&self) -> Result<Option<u64>, FetchError> {
        let Some(body) = self.get("/diffs/head").await? else {
            return Ok(None);
        };
        let url = format!("{}/diffs/head", self.config.base);
        let value: serde_json::Value =
            serde_json::from_slice(&body).map_err(|e| FetchError::Malformed {
                url: url.clone(),
                reason: format!("not JSON: {e}"),
            })?;
        let number = value
            .get("number")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| FetchError::Malformed {
                url,
                reason: "no `number` in the head".into(),
            })?;
        self.sync.saw_sequencer_head(number);
        self.metrics
            .sequencer_head
            .set(i64::try_from(number).unwrap_or(i64::MAX));
        Ok(Some(number))
    }

    /// One diff file (`None`: not published yet).
    pub async fn diff_file(&self, number: u64) -> Result<Option<Vec<u8>>, FetchError> {
        self.get(&format!("/diffs/{number}")).await
    }

    /// Diffs `from..=to` by one range request; `None` when the source has no ranges. The
    /// answer may stop early (the head moved back, or a size bound): what came is returned.
    async fn range(&self, from: u64, to: u64) -> Result<Option<Vec<Vec<u8>>>, FetchError> {
        let path = format!("/diffs?from={from}&to={to}");
        let url = format!("{}{path}", self.config.base);
        let body = match self.get(&path).await {
            Ok(Some(body)) => body,
            // A static server: no such file, or a directory listing, or a redirect to one.
            Ok(None) => return Ok(None),
            // Refused for good (no such route), not for now: 410 means the diffs are gone,
            // and 5xx, 429 or 408 that the source is busy or restarting.
            Err(FetchError::Status { status, .. }) if status != 410 && !is_transient(status) => {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
        let mut diffs = Vec::new();
        let mut at = 0usize;
        while at < body.len() {
            let Some(len) = body
                .get(at..at + 4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
            else {
                return Err(FetchError::Malformed {
                    url,
                    reason: format!("a length cut short at byte {at}"),
                });
            };
            let Some(diff) = body.get(at + 4..at + 4 + len) else {
                return Err(FetchError::Malformed {
                    url,
                    reason: format!("diff {} cut short at byte {at}", from + diffs.len() as u64),
                });
            };
            if !diff.starts_with(&gigas_statediff::DIFF_MAGIC) {
                // Not a range answer at all (an HTML page from a static server, say).
                return if diffs.is_empty() {
                    Ok(None)
                } else {
                    Err(FetchError::Malformed {
                        url,
                        reason: format!("entry at byte {at} is not a diff file"),
                    })
                };
            }
            diffs.push(diff.to_vec());
            at += 4 + len;
        }
        Ok(Some(diffs))
    }

    /// The block file of `number` (for re-execution), waiting for it if it is not there yet.
    async fn block_file(&self, number: u64) -> Result<Vec<u8>, FetchError> {
        match self.get(&format!("/blocks/{number}")).await? {
            Some(bytes) => Ok(bytes),
            None => Err(FetchError::Malformed {
                url: format!("{}/blocks/{number}", self.config.base),
                reason: "the block file is missing (is --verify-execution given a source that keeps /blocks?)".into(),
            }),
        }
    }

    /// Runs until `stop`, sending diffs from the cursor on to `out` in order.
    pub async fn run(
        mut self,
        mut cursor: watch::Receiver<Cursor>,
        out: mpsc::Sender<Fetched>,
        mut stop: watch::Receiver<bool>,
    ) {
        let mut backoff = self.config.backoff_min;
        loop {
            if *stop.borrow() {
                return;
            }
            let at = *cursor.borrow_and_update();
            let round = self.round(at, &out, &mut cursor);
            let result = tokio::select! {
                r = round => r,
                _ = stop.changed() => return,
            };
            match result {
                Ok(()) | Err(FetchError::Reset) => backoff = self.config.backoff_min,
                Err(FetchError::Closed) => return,
                Err(e) => {
                    self.metrics.fetch_errors.inc();
                    warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "fetching diffs failed");
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = stop.changed() => return,
                        _ = cursor.changed() => {}
                    }
                    backoff = (backoff * 2).min(self.config.backoff_max);
                }
            }
        }
    }

    /// One round: head, catch up, follow. Returns on failure or a cursor reset.
    async fn round(
        &mut self,
        at: Cursor,
        out: &mpsc::Sender<Fetched>,
        cursor: &mut watch::Receiver<Cursor>,
    ) -> Result<(), FetchError> {
        let mut next = at.next;
        loop {
            let head = self.head().await?;
            if let Some(head) = head {
                if head >= next {
                    next = self.catch_up(at.epoch, next, head, out, cursor).await?;
                    continue;
                }
            }
            // Caught up: follow the push where there is one, else poll. A source that refused
            // the push is asked again now and then: a proxy or a restarting sequencer may
            // have refused it for the moment only.
            if self.push == Some(false)
                && self.push_retry.is_some_and(|(at, _)| Instant::now() >= at)
            {
                self.push = None;
            }
            if self.push != Some(false) {
                self.stream(at.epoch, &mut next, out, cursor).await?;
                if self.push == Some(true) {
                    // The stream ended without an error: start a new round at once.
                    return Ok(());
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(self.config.poll_interval) => {}
                _ = cursor.changed() => return Err(FetchError::Reset),
            }
        }
    }

    /// Fetches `next..=head` (ranges or files, several in flight) and sends them in order.
    /// Returns the new cursor.
    async fn catch_up(
        &mut self,
        epoch: u64,
        mut next: u64,
        head: u64,
        out: &mpsc::Sender<Fetched>,
        cursor: &mut watch::Receiver<Cursor>,
    ) -> Result<u64, FetchError> {
        if self.ranges.is_none() {
            let to = head.min(next + self.config.range_blocks.max(1) - 1);
            match self.range(next, to).await? {
                Some(diffs) => {
                    info!(source = %self.config.base, "the source serves ranges");
                    self.ranges = Some(true);
                    next = self
                        .deliver(epoch, next, diffs, "range", out, cursor)
                        .await?;
                }
                None => {
                    info!(source = %self.config.base, "the source serves files only (a static server or cache)");
                    self.ranges = Some(false);
                }
            }
        }
        let concurrency = self.config.concurrency.max(1);
        if self.ranges == Some(true) {
            let step = self.config.range_blocks.max(1);
            while next <= head {
                let starts: Vec<u64> = (0..concurrency as u64)
                    .map(|i| next + i * step)
                    .filter(|&from| from <= head)
                    .collect();
                let this = &*self;
                let answers = futures::future::join_all(
                    starts
                        .iter()
                        .map(|&from| this.range(from, (from + step - 1).min(head))),
                )
                .await;
                for (from, answer) in starts.into_iter().zip(answers) {
                    let diffs = answer?.ok_or_else(|| FetchError::Malformed {
                        url: format!("{}/diffs?from={from}", self.config.base),
                        reason: "the source stopped serving ranges".into(),
                    })?;
                    if from != next || diffs.is_empty() {
                        // An earlier answer stopped short: ask again from where it ended.
                        break;
                    }
                    next = self
                        .deliver(epoch, next, diffs, "range", out, cursor)
                        .await?;
                }
            }
        } else {
            while next <= head {
                let numbers: Vec<u64> = (next..=head).take(concurrency * 4).collect();
                let this = &*self;
                let answers =
                    futures::future::join_all(numbers.iter().map(|&n| this.diff_file(n))).await;
                for (n, answer) in numbers.into_iter().zip(answers) {
                    let Some(diff) = answer? else {
                        return Err(FetchError::Malformed {
                            url: format!("{}/diffs/{n}", self.config.base),
                            reason: format!("missing although the head is {head}"),
                        });
                    };
                    next = self
                        .deliver(epoch, n, vec![diff], "file", out, cursor)
                        .await?;
                }
            }
        }
        Ok(next)
    }

    /// Sends `diffs` (blocks `first..`) to the apply thread; returns the block after them.
    async fn deliver(
        &self,
        epoch: u64,
        first: u64,
        diffs: Vec<Vec<u8>>,
        source: &str,
        out: &mpsc::Sender<Fetched>,
        cursor: &mut watch::Receiver<Cursor>,
    ) -> Result<u64, FetchError> {
        let mut number = first;
        for diff in diffs {
            self.metrics.fetched(source, diff.len());
            let block = if self.config.with_blocks {
                Some(self.block_file(number).await?)
            } else {
                None
            };
            let size = diff.len() as u64 + block.as_ref().map_or(0, |b| b.len() as u64);
            // A diff larger than the whole bound takes all of it: it waits for an empty
            // queue instead of forever.
            let permits = u32::try_from(size.div_ceil(QUEUE_PERMIT_BYTES))
                .unwrap_or(u32::MAX)
                .clamp(1, self.room_permits);
            let room = tokio::select! {
                room = self.room.clone().acquire_many_owned(permits) => {
                    room.map_err(|_| FetchError::Closed)?
                }
                _ = cursor.changed() => return Err(FetchError::Reset),
            };
            let item = Fetched {
                epoch,
                number,
                diff,
                block,
                received: Instant::now(),
                room: Some(room),
            };
            tokio::select! {
                sent = out.send(item) => sent.map_err(|_| FetchError::Closed)?,
                _ = cursor.changed() => return Err(FetchError::Reset),
            }
            number += 1;
        }
        Ok(number)
    }

    /// Follows the WebSocket push from `next`.
    async fn stream(
        &mut self,
        epoch: u64,
        next: &mut u64,
        out: &mpsc::Sender<Fetched>,
        cursor: &mut watch::Receiver<Cursor>,
    ) -> Result<(), FetchError> {
        let ws_base = self
            .config
            .base
            .replacen("https://", "wss://", 1)
            .replacen("http://", "ws://", 1);
        let url = format!("{ws_base}/diffs/stream?from={next}");
        let failed = |reason: String| FetchError::Stream {
            url: url.clone(),
            reason,
        };
        let cap = usize::try_from(self.config.max_response_bytes).unwrap_or(usize::MAX);
        let ws_config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
            .max_message_size(Some(cap))
            .max_frame_size(Some(cap));
        let connected = tokio::time::timeout(
            self.config.request_timeout,
            tokio_tungstenite::connect_async_with_config(&url, Some(ws_config), false),
        )
        .await;
        let mut socket = match connected {
            Ok(Ok((socket, _))) => socket,
            // Refused as a WebSocket (a static server, a proxy without upgrades): poll the
            // head from now on; a connection failure is an ordinary error.
            Ok(Err(tokio_tungstenite::tungstenite::Error::Http(response)))
                if !is_transient(response.status().as_u16()) =>
            {
                let wait = self
                    .push_retry
                    .map_or(PUSH_RETRY_MIN, |(_, last)| (last * 2).min(PUSH_RETRY_MAX));
                info!(%url, status = response.status().as_u16(), retry_in_s = wait.as_secs(), "the source has no diff stream; polling its head");
                self.push = Some(false);
                self.push_retry = Some((Instant::now() + wait, wait));
                return Ok(());
            }
            // Busy, rate-limited or restarting: an ordinary failure, retried with back-off.
            Ok(Err(tokio_tungstenite::tungstenite::Error::Http(response))) => {
                return Err(failed(format!(
                    "the upgrade was refused with {} (transient)",
                    response.status()
                )))
            }
            Ok(Err(e)) => return Err(failed(e.to_string())),
            Err(_) => return Err(failed("timed out connecting".into())),
        };
        info!(%url, "following the diff stream");
        self.push = Some(true);
        self.push_retry = None;
        // A block time is far shorter than `idle`: a silent stream is probed with a ping, and
        // a second silence means it is dead.
        let idle = self.config.request_timeout;
        let mut pinged = false;
        loop {
            use tokio_tungstenite::tungstenite::Message;
            let message = tokio::select! {
                m = tokio::time::timeout(idle, socket.next()) => m,
                _ = cursor.changed() => return Err(FetchError::Reset),
            };
            match message {
                Err(_) if pinged => return Err(failed("no answer to a ping".into())),
                Err(_) => {
                    pinged = true;
                    socket
                        .send(Message::Ping(Vec::new().into()))
                        .await
                        .map_err(|e| failed(format!("ping: {e}")))?;
                }
                Ok(None) => return Err(failed("closed by the server".into())),
                Ok(Some(Err(e))) => return Err(failed(e.to_string())),
                Ok(Some(Ok(Message::Binary(bytes)))) => {
                    pinged = false;
                    self.sync.saw_sequencer_head(*next);
                    self.metrics
                        .sequencer_head
                        .set(i64::try_from(self.sync.sequencer_head()).unwrap_or(i64::MAX));
                    *next = self
                        .deliver(epoch, *next, vec![bytes.to_vec()], "stream", out, cursor)
                        .await?;
                }
                Ok(Some(Ok(Message::Close(frame)))) => {
                    return Err(failed(format!(
                        "closed by the server: {}",
                        frame.map(|f| f.reason.to_string()).unwrap_or_default()
                    )))
                }
                Ok(Some(Ok(_))) => pinged = false,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A source on 127.0.0.1 that answers every request with `head` and then `body_chunks`
    /// chunks of 64 KiB (chunked transfer encoding), or endlessly for `None`.
    async fn hostile_source(head: &'static str, body_chunks: Option<usize>) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut request = [0u8; 4096];
                    let _ = socket.read(&mut request).await;
                    if socket.write_all(head.as_bytes()).await.is_err() {
                        return;
                    }
                    let chunk = vec![0xab_u8; 64 << 10];
                    let mut sent = 0;
                    while body_chunks.is_none_or(|n| sent < n) {
                        let framed =
                            [format!("{:x}\r\n", chunk.len()).as_bytes(), &chunk, b"\r\n"].concat();
                        if socket.write_all(&framed).await.is_err() {
                            return;
                        }
                        sent += 1;
                    }
                    let _ = socket.write_all(b"0\r\n\r\n").await;
                });
            }
        });
        format!("http://{addr}")
    }

    fn fetcher(base: &str, max_response_bytes: u64, queue_bytes: u64) -> Fetcher {
        let mut config = FetchConfig::new(base);
        config.max_response_bytes = max_response_bytes;
        config.queue_bytes = queue_bytes;
        config.request_timeout = Duration::from_secs(20);
        let sync = Arc::new(SyncState::new(0, alloy_primitives::B256::ZERO));
        Fetcher::new(config, FollowerMetrics::default(), sync).unwrap()
    }

    const CHUNKED: &str =
        "HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ntransfer-encoding: chunked\r\n\r\n";

    #[tokio::test]
    async fn an_endless_or_oversized_answer_is_cut_off_at_the_bound_not_read_into_memory() {
        let endless = hostile_source(CHUNKED, None).await;
        let err = fetcher(&endless, 1 << 20, 1 << 20)
            .diff_file(1)
            .await
            .expect_err("an endless body is refused");
        let text = err.to_string();
        assert!(matches!(err, FetchError::Malformed { .. }), "{text}");
        assert!(
            text.contains("went on past") && text.contains("more than the 1048576-byte bound"),
            "{text}"
        );

        // Announced too large: refused before reading it.
        let announced = hostile_source(
            "HTTP/1.1 200 OK\r\ncontent-length: 10000000000\r\n\r\n",
            Some(0),
        )
        .await;
        let err = fetcher(&announced, 1 << 20, 1 << 20)
            .diff_file(1)
            .await
            .expect_err("an announced 10 GB body is refused");
        assert!(
            err.to_string().contains("announces 10000000000 bytes"),
            "{err}"
        );

        // Within the bound, the same source's answer is read whole.
        let fits = hostile_source(CHUNKED, Some(4)).await;
        let body = fetcher(&fits, 1 << 20, 1 << 20)
            .diff_file(1)
            .await
            .unwrap()
            .expect("an answer");
        assert_eq!(body.len(), 4 << 16);
    }

    #[tokio::test]
    async fn the_queue_holds_at_most_its_bytes_and_a_larger_diff_goes_alone() {
        let fetcher = fetcher("http://127.0.0.1:9", 1 << 20, 100 << 10);
        let (out, mut queued) = mpsc::channel(64);
        let (_cursor_tx, mut cursor) = watch::channel(Cursor { epoch: 0, next: 1 });
        // Three diffs of 40 KiB: two fit in 100 KiB, the third waits for room.
        let diffs = vec![
            vec![1u8; 40 << 10],
            vec![2u8; 40 << 10],
            vec![3u8; 40 << 10],
        ];
        let deliver = fetcher.deliver(0, 1, diffs, "test", &out, &mut cursor);
        tokio::pin!(deliver);
        let mut taken = Vec::new();
        for _ in 0..2 {
            tokio::select! {
                _ = &mut deliver => panic!("all three were queued within 100 KiB"),
                item = queued.recv() => taken.push(item.unwrap()),
            }
        }
        let waited = tokio::time::timeout(Duration::from_millis(300), &mut deliver).await;
        assert!(waited.is_err(), "the third diff was queued without room");
        assert!(queued.try_recv().is_err());
        // Applying one gives its room back.
        drop(taken.remove(0));
        let next = tokio::time::timeout(Duration::from_secs(5), &mut deliver)
            .await
            .expect("room was given back")
            .unwrap();
        assert_eq!(next, 4);
        assert_eq!(queued.recv().await.unwrap().number, 3);

        // A diff larger than the whole bound waits for an empty queue, then goes alone.
        drop(taken);
        let huge = vec![vec![9u8; 300 << 10]];
        let (_cursor_tx, mut cursor) = watch::channel(Cursor { epoch: 0, next: 4 });
        let delivered = tokio::time::timeout(
            Duration::from_secs(5),
            fetcher.deliver(0, 4, huge, "test", &out, &mut cursor),
        )
        .await
        .expect("a diff over the bound is not held forever");
        assert_eq!(delivered.unwrap(), 5);
    }
}
