//! Starting a node from a snapshot (`--bootstrap snapshot`) instead of the genesis.
//!
//! 1. **Manifest.** Every `--snapshot-source` is asked for `/snapshots/head`; the newest
//!    snapshot is fetched and checked against the sequencer's key ([`Manifest::verify`]). A
//!    source whose manifest fails is reported and the next one asked. A bootstrap that was
//!    under way in the database resumes with its own snapshot while a source still serves it.
//! 2. **Chunks.** Fetched with several in flight, each from the sources in turn (chunk `k`
//!    starts at source `k mod n`), checked on arrival ([`verify_chunk`]) on the blocking
//!    pool; a chunk that fails (HTTP error, cut short, tampered, from another snapshot) is
//!    asked of the next source, and after every source failed `attempts` times the bootstrap
//!    stops, naming the chunk and each source's reason. Checked chunks are written in order
//!    on a thread of their own, each in one MDBX transaction with the progress, so a kill
//!    resumes at the first chunk not written.
//! 3. **Merkleize and record.** [`Restore::finish`]: the codes are complete, the MPT root and
//!    trie are built from the written state on every core (`gigas-statedb`'s parallel
//!    rebuild), and block N becomes the head. Until then the
//!    node serves nothing: the RPC server starts after the bootstrap.
//!
//! Memory is bounded: at most `concurrency` chunks (at most [`gigas_snapshot::MAX_CHUNK_RAW`]
//! each, decoded) are held, plus one being written.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use alloy_primitives::{Address, B256};
use futures::StreamExt;
use gigas_snapshot::{manifest_id, verify_chunk, Manifest, Restore, SnapshotError, SnapshotHead};
use gigas_statedb::{SnapshotEntries, StateDb};
use gigas_statediff::ChainTip;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tracing::{info, warn};

/// How a bootstrap fetches.
#[derive(Debug, Clone)]
pub struct BootstrapConfig {
    /// Base URLs serving `snapshots/` (a sequencer, a full node, nginx over an archive).
    pub sources: Vec<String>,
    /// Chunks in flight.
    pub concurrency: usize,
    /// Rounds over every source for one chunk before giving up.
    pub attempts: u32,
    /// Wait between rounds.
    pub backoff: Duration,
    /// Timeout of one request.
    pub request_timeout: Duration,
    /// Draw a progress bar on standard error.
    pub progress_bar: bool,
    /// Where the node fetches diffs after the snapshot (the sequencer or an archive): a
    /// snapshot whose next diff it no longer keeps cannot be followed from, and is passed
    /// over before anything is downloaded.
    pub diff_source: Option<String>,
    /// Where the manifests that could not be completed are remembered across restarts
    /// ([`FailedManifests`]); `None`: for this run only.
    pub failed_manifests: Option<std::path::PathBuf>,
}

impl BootstrapConfig {
    /// Defaults for `sources`.
    pub fn new(sources: Vec<String>) -> Self {
        Self {
            sources,
            concurrency: 4,
            attempts: 3,
            backoff: Duration::from_secs(1),
            request_timeout: Duration::from_secs(60),
            progress_bar: false,
            diff_source: None,
            failed_manifests: None,
        }
    }
}

/// Where the time of a bootstrap went.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct BootstrapReport {
    /// The snapshot's block.
    pub block: u64,
    /// Chunks in the snapshot.
    pub chunks: u32,
    /// Chunks written by an earlier, interrupted run.
    pub resumed_from: u32,
    /// Bytes fetched (chunks and manifests, refused ones included).
    pub bytes_fetched: u64,
    /// Chunks refused and fetched again.
    pub refused: u64,
    /// Seconds to find and check the manifest.
    pub manifest_seconds: f64,
    /// Seconds spent in HTTP requests, summed over requests in flight.
    pub fetch_seconds: f64,
    /// Seconds spent checking chunks, summed.
    pub verify_seconds: f64,
    /// Seconds the writer thread spent writing chunks.
    pub write_seconds: f64,
    /// Wall seconds from the first chunk asked to the last written.
    pub chunks_wall_seconds: f64,
    /// Seconds to check completeness and build the trie and root.
    pub merkleize_seconds: f64,
    /// Wall seconds in all.
    pub total_seconds: f64,
    /// The MPT root built.
    pub state_root: B256,
}

/// Why a bootstrap stopped.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// No source serves a snapshot that checks out.
    #[error("no usable snapshot: {0}")]
    NoSnapshot(String),
    /// A chunk failed from every source, every attempt.
    #[error(
        "snapshot chunk {chunk} failed from every source ({reasons}); nothing of the snapshot \
         is served. The chunks written so far are kept: start again to resume, give another \
         --snapshot-source, or start without --bootstrap snapshot to replay from genesis"
    )]
    Chunk {
        /// The chunk.
        chunk: u32,
        /// Each source's last reason.
        reasons: String,
    },
    /// The snapshot or the database failed.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// Stopped before it finished (resumes at the next start).
    #[error("stopped during the bootstrap (it resumes at the next start)")]
    Stopped,
    /// A thread failed.
    #[error("bootstrap: {0}")]
    Internal(String),
}

/// The bootstrap's metrics (`gigas_fullnode_bootstrap_*`).
#[derive(Debug, Clone, Default)]
pub struct BootstrapMetrics {
    /// 0 idle, 1 manifest, 2 chunks, 3 merkleize, 4 done.
    pub phase: Gauge,
    /// The snapshot's block.
    pub block: Gauge,
    /// Chunks in the snapshot.
    pub chunks: Gauge,
    /// Chunks written.
    pub chunks_written: Gauge,
    /// Bytes fetched.
    pub bytes: Counter,
    /// Chunks refused (each fetched again).
    pub refused: Counter,
    /// Seconds since the bootstrap started.
    pub seconds: Gauge<f64, AtomicU64>,
}

impl BootstrapMetrics {
    /// Registers them.
    pub fn register(&self, registry: &mut Registry) {
        let sub = registry.sub_registry_with_prefix("gigas_fullnode_bootstrap");
        sub.register(
            "phase",
            "Bootstrap phase: 0 idle, 1 manifest, 2 chunks, 3 merkleize, 4 done",
            self.phase.clone(),
        );
        sub.register("block", "The snapshot's block", self.block.clone());
        sub.register("chunks", "Chunks in the snapshot", self.chunks.clone());
        sub.register(
            "chunks_written",
            "Chunks checked and written",
            self.chunks_written.clone(),
        );
        sub.register(
            "bytes",
            "Bytes fetched from snapshot sources",
            self.bytes.clone(),
        );
        sub.register(
            "refused",
            "Snapshot chunks refused (each fetched again)",
            self.refused.clone(),
        );
        sub.register(
            "seconds",
            "Seconds since the bootstrap started",
            self.seconds.clone(),
        );
    }
}

/// An HTTP client for the sources, with answers read up to a bound.
#[derive(Debug, Clone)]
struct Sources {
    client: reqwest::Client,
    bases: Vec<String>,
    /// Failed requests (timeouts, refused connections, errors) per source: a source that
    /// fails is asked after the others for the next chunks.
    strikes: Arc<Vec<std::sync::atomic::AtomicU32>>,
}

impl Sources {
    /// `GET base + path`, read up to `cap` bytes; `Ok(None)` on 404.
    async fn get(&self, base: &str, path: &str, cap: u64) -> Result<Option<Vec<u8>>, String> {
        let url = format!("{base}{path}");
        let mut response = self
            .client
            .get(&url)
            .send()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        let status = response.status();
        if status == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !status.is_success() {
            return Err(format!("GET {url}: HTTP {}", status.as_u16()));
        }
        let expected = response.content_length();
        if expected.is_some_and(|n| n > cap) {
            return Err(format!("GET {url}: announces more than {cap} bytes"));
        }
        let mut bytes = Vec::with_capacity(expected.unwrap_or(0).min(cap) as usize);
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?
        {
            if bytes.len() as u64 + chunk.len() as u64 > cap {
                return Err(format!("GET {url}: more than {cap} bytes"));
            }
            bytes.extend_from_slice(&chunk);
        }
        if expected.is_some_and(|n| n != bytes.len() as u64) {
            return Err(format!(
                "GET {url}: cut short at {} of {} bytes",
                bytes.len(),
                expected.unwrap_or_default()
            ));
        }
        Ok(Some(bytes))
    }
}

impl Sources {
    /// Counts a failed request against source `s`.
    fn strike(&self, s: usize) {
        if let Some(strikes) = self.strikes.get(s) {
            strikes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Whether the diff source still keeps the diff after block `block`, the first a node
    /// bootstrapped at `block` fetches: `Err` with the reason when it does not (the sequencer
    /// answers 410 for a diff its retention removed; a static server 404 for one below its
    /// head), `Ok` when it does, will (not written yet), or cannot be asked (then the
    /// fetcher finds out, as before).
    async fn successor_kept(&self, diff_source: &str, block: u64) -> Result<(), String> {
        let base = diff_source.trim_end_matches('/');
        let next = block + 1;
        let url = format!("{base}/diffs/{next}");
        let status = match self.client.head(&url).send().await {
            Ok(response) => response.status(),
            Err(e) => {
                warn!(url, error = %e, "cannot ask the diff source whether it keeps the diff after the snapshot");
                return Ok(());
            }
        };
        let gone = || {
            format!(
                "{base} no longer keeps diff {next}, the first after snapshot {block} (its \
                 retention, `--diffs.retain`, removed it): a node bootstrapped there could \
                 not follow on; use a newer snapshot or a diff source that keeps more"
            )
        };
        match status {
            s if s.is_success() || s == reqwest::StatusCode::NOT_MODIFIED => Ok(()),
            reqwest::StatusCode::GONE => Err(gone()),
            reqwest::StatusCode::NOT_FOUND => {
                // Not written yet, or removed by a server that does not say 410: its head
                // tells which.
                let head = self
                    .get(base, "/diffs/head", 1 << 16)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
                    .and_then(|v| v["number"].as_u64());
                match head {
                    Some(head) if head >= next => Err(gone()),
                    _ => Ok(()),
                }
            }
            other => {
                warn!(
                    url,
                    status = other.as_u16(),
                    "the diff source did not say whether it keeps the diff after the snapshot"
                );
                Ok(())
            }
        }
    }
}

/// A chosen snapshot: its manifest, identity and the sources that serve it.
struct Chosen {
    manifest: Manifest,
    id: B256,
    bytes: u64,
    /// The sources whose head names it (asked first for its chunks).
    serving: Vec<String>,
}

/// Finds the snapshot to write: the one under way in `db` if a source still serves it and
/// it has not failed, else the best of the snapshots the sources name: the manifest most
/// sources name first (several sources agreeing is the strongest sign it can be completed),
/// the newest among equals. Manifests in `failed` (ones that could not be completed before)
/// are passed over, and so is a snapshot whose next diff the diff source no longer keeps.
async fn choose(
    sources: &Sources,
    sequencer: Address,
    resume: Option<gigas_statedb::BootstrapProgress>,
    failed: &FailedManifests,
    diff_source: Option<&str>,
) -> Result<Chosen, BootstrapError> {
    let mut reasons = Vec::new();
    let mut fetched = 0u64;
    let manifest_at = |base: String, block: u64| {
        let sources = sources.clone();
        async move {
            let bytes = sources
                .get(
                    &base,
                    &format!("/snapshots/{block}/manifest"),
                    gigas_snapshot::MAX_MANIFEST_BYTES,
                )
                .await?
                .ok_or_else(|| format!("{base}: no snapshot {block}"))?;
            let manifest = Manifest::decode(&bytes).map_err(|e| format!("{base}: {e}"))?;
            manifest
                .verify(sequencer)
                .map_err(|e| format!("{base}: {e}"))?;
            if manifest.block() != block {
                return Err(format!(
                    "{base}: /snapshots/{block}/manifest is the manifest of block {}",
                    manifest.block()
                ));
            }
            Ok::<_, String>((manifest, manifest_id(&bytes), bytes.len() as u64))
        }
    };
    let followable = |block: u64| async move {
        match diff_source {
            Some(diffs) => sources.successor_kept(diffs, block).await,
            None => Ok(()),
        }
    };
    if let Some(p) = resume.filter(|p| {
        let skip = failed.contains(&p.manifest);
        if skip {
            warn!(block = p.block, manifest = %p.manifest, "the snapshot under way could not be completed before; taking another");
        }
        !skip
    }) {
        for base in &sources.bases {
            match manifest_at(base.clone(), p.block).await {
                Ok((manifest, id, bytes)) if id == p.manifest => {
                    if let Err(e) = followable(p.block).await {
                        reasons.push(e);
                        break;
                    }
                    info!(block = p.block, chunks_done = p.chunks_done, source = %base, "resuming the bootstrap");
                    return Ok(Chosen {
                        manifest,
                        id,
                        bytes: fetched + bytes,
                        serving: vec![base.clone()],
                    });
                }
                Ok((_, _, bytes)) => {
                    fetched += bytes;
                    reasons.push(format!("{base}: snapshot {} is another manifest", p.block));
                }
                Err(e) => reasons.push(e),
            }
        }
        warn!(block = p.block, reasons = %reasons.join("; "), "the snapshot being written is no longer served; starting over with the newest");
        reasons.clear();
    }
    let mut heads: Vec<(SnapshotHead, String)> = Vec::new();
    for base in &sources.bases {
        match sources.get(base, "/snapshots/head", 1 << 16).await {
            Ok(Some(bytes)) => match SnapshotHead::from_json_with_older(&bytes) {
                Ok((head, older)) => {
                    heads.push((head, base.clone()));
                    // The older snapshots it still serves: the fallbacks when the newer
                    // ones cannot be used.
                    heads.extend(older.into_iter().map(|h| (h, base.clone())));
                }
                Err(e) => reasons.push(format!("{base}: {e}")),
            },
            Ok(None) => reasons.push(format!("{base}: serves no snapshot")),
            Err(e) => reasons.push(e),
        }
    }
    for (head, serving) in candidates(&heads, failed, &mut reasons) {
        let block = head.number;
        for base in &serving {
            match manifest_at(base.clone(), block).await {
                Ok((manifest, id, bytes)) if id == head.manifest => {
                    if let Err(e) = followable(block).await {
                        warn!(block, reason = %e, "snapshot passed over");
                        reasons.push(e);
                        break;
                    }
                    info!(block, source = %base, sources = serving.len(), chunks = manifest.chunks.len(), accounts = manifest.accounts, slots = manifest.slots, "snapshot manifest checked against the sequencer's signature");
                    return Ok(Chosen {
                        manifest,
                        id,
                        bytes: fetched + bytes,
                        serving,
                    });
                }
                Ok((_, id, bytes)) => {
                    fetched += bytes;
                    let e = format!(
                        "{base}: snapshot {block}'s manifest is {id}, not the {} its head names",
                        head.manifest
                    );
                    warn!(block, source = %base, reason = %e, "snapshot manifest refused");
                    reasons.push(e);
                }
                Err(e) => {
                    warn!(block, source = %base, reason = %e, "snapshot manifest refused");
                    reasons.push(e);
                }
            }
        }
    }
    Err(BootstrapError::NoSnapshot(if reasons.is_empty() {
        "no --snapshot-source given".into()
    } else {
        reasons.join("; ")
    }))
}

/// The snapshots the sources name, best first, with the sources naming each: by how many
/// sources name the same manifest, then by block (newest first), then in the order the
/// sources were given. Manifests in `failed` are left out (and said so in `reasons`).
fn candidates(
    heads: &[(SnapshotHead, String)],
    failed: &FailedManifests,
    reasons: &mut Vec<String>,
) -> Vec<(SnapshotHead, Vec<String>)> {
    let mut groups: Vec<(SnapshotHead, Vec<String>)> = Vec::new();
    for (head, base) in heads {
        if failed.contains(&head.manifest) {
            reasons.push(format!(
                "{base}: snapshot {} ({}) could not be completed before",
                head.number, head.manifest
            ));
            continue;
        }
        match groups.iter_mut().find(|(h, _)| h == head) {
            Some((_, bases)) => bases.push(base.clone()),
            None => groups.push((*head, vec![base.clone()])),
        }
    }
    // Stable: equals keep the sources' order.
    groups.sort_by_key(|(head, bases)| {
        (
            std::cmp::Reverse(bases.len()),
            std::cmp::Reverse(head.number),
        )
    });
    groups
}

/// The manifests a bootstrap could not complete (a chunk no source served right, codes
/// missing at the end), kept in a file beside the database so that a restart does not take
/// them again: at most [`FailedManifests::MAX`], the oldest forgotten first.
#[derive(Debug, Default)]
pub struct FailedManifests {
    path: Option<std::path::PathBuf>,
    ids: Vec<B256>,
}

impl FailedManifests {
    /// The most remembered.
    pub const MAX: usize = 64;

    /// Reads the list at `path` (none yet: empty; a line that does not parse is skipped).
    pub fn load(path: Option<std::path::PathBuf>) -> Self {
        let ids = path
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .map(|text| {
                text.lines()
                    .filter_map(|l| l.trim().parse::<B256>().ok())
                    .collect()
            })
            .unwrap_or_default();
        Self { path, ids }
    }

    /// Whether manifest `id` failed before.
    pub fn contains(&self, id: &B256) -> bool {
        self.ids.contains(id)
    }

    /// Remembers manifest `id` (written at once; a failure to write is logged, and the
    /// manifest is still passed over for the rest of this run).
    pub fn add(&mut self, id: B256) {
        if self.contains(&id) {
            return;
        }
        self.ids.push(id);
        if self.ids.len() > Self::MAX {
            self.ids.remove(0);
        }
        if let Some(path) = &self.path {
            let text: String = self.ids.iter().map(|id| format!("{id}\n")).collect();
            if let Err(e) = std::fs::write(path, text) {
                warn!(path = %path.display(), error = %e, "cannot write the list of snapshots that failed");
            }
        }
    }
}

/// Fetches and checks one chunk, from the sources in turn.
async fn fetch_chunk(
    sources: &Sources,
    serving: &[String],
    manifest: &Arc<Manifest>,
    chunk: u32,
    config: &BootstrapConfig,
    metrics: &BootstrapMetrics,
    report: &Arc<std::sync::Mutex<BootstrapReport>>,
) -> Result<SnapshotEntries, BootstrapError> {
    let n = sources.bases.len().max(1);
    let block = manifest.block();
    let cap = u64::from(manifest.chunks[chunk as usize].file_len);
    let mut last: Vec<String> = vec![String::new(); n];
    for attempt in 0..config.attempts.max(1) {
        if attempt > 0 {
            tokio::time::sleep(config.backoff * attempt).await;
        }
        // The sources whose head names the snapshot first, then by fewest failures, then
        // in turn by chunk (so that chunks in flight spread over the sources).
        let mut order: Vec<usize> = (0..sources.bases.len()).collect();
        order.sort_by_key(|&s| {
            (
                !serving.contains(&sources.bases[s]),
                sources.strikes[s].load(std::sync::atomic::Ordering::Relaxed),
                (s + n - chunk as usize % n) % n,
            )
        });
        for s in order {
            let base = &sources.bases[s];
            let started = Instant::now();
            // One byte over the listed size tells a longer file from a right one.
            let got = sources
                .get(base, &format!("/snapshots/{block}/{chunk}"), cap + 1)
                .await;
            let fetched = started.elapsed().as_secs_f64();
            let bytes = match got {
                Ok(Some(bytes)) => bytes,
                Ok(None) => {
                    sources.strike(s);
                    last[s] = format!("{base}: not found");
                    continue;
                }
                Err(e) => {
                    sources.strike(s);
                    last[s] = e;
                    continue;
                }
            };
            metrics.bytes.inc_by(bytes.len() as u64);
            let len = bytes.len() as u64;
            let manifest = manifest.clone();
            let started = Instant::now();
            let checked =
                tokio::task::spawn_blocking(move || verify_chunk(&manifest, chunk, &bytes))
                    .await
                    .map_err(|e| BootstrapError::Internal(e.to_string()))?;
            if let Ok(mut r) = report.lock() {
                r.bytes_fetched += len;
                r.fetch_seconds += fetched;
                r.verify_seconds += started.elapsed().as_secs_f64();
            }
            match checked {
                Ok(entries) => return Ok(entries),
                Err(e) => {
                    metrics.refused.inc();
                    if let Ok(mut r) = report.lock() {
                        r.refused += 1;
                    }
                    warn!(chunk, source = %base, reason = %e, "snapshot chunk refused; asking the next source");
                    sources.strike(s);
                    last[s] = format!("{base}: {e}");
                }
            }
        }
    }
    Err(BootstrapError::Chunk {
        chunk,
        reasons: last.join("; "),
    })
}

/// Bootstraps the empty `db` from the newest snapshot the sources serve (or resumes the one
/// under way), checked against `sequencer`'s key. Returns the head it recorded.
pub async fn bootstrap(
    db: Arc<StateDb>,
    sequencer: Address,
    config: BootstrapConfig,
    metrics: BootstrapMetrics,
    mut stop: watch::Receiver<bool>,
) -> Result<(ChainTip, BootstrapReport), BootstrapError> {
    let start = Instant::now();
    let client = reqwest::Client::builder()
        .timeout(config.request_timeout)
        .connect_timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| BootstrapError::Internal(e.to_string()))?;
    let bases: Vec<String> = config
        .sources
        .iter()
        .map(|s| s.trim_end_matches('/').to_string())
        .collect();
    let sources = Sources {
        client,
        strikes: Arc::new(bases.iter().map(|_| Default::default()).collect()),
        bases,
    };
    // A manifest that verifies can still be impossible to complete (shares moved between
    // chunks, chunks no source serves): it is remembered, and the next candidate taken,
    // until one completes or none is left.
    let mut failed = FailedManifests::load(config.failed_manifests.clone());
    loop {
        metrics.phase.set(1);
        let resume = db.bootstrap_progress().map_err(SnapshotError::from)?;
        let chosen = choose(
            &sources,
            sequencer,
            resume,
            &failed,
            config.diff_source.as_deref(),
        )
        .await?;
        let (id, block) = (chosen.id, chosen.manifest.block());
        match write_chosen(&db, &sources, chosen, &config, &metrics, &mut stop, start).await {
            // A state whose root is not the signed header's (its chunks added up to the
            // signed lattice hash, so its sequencer signed two commitments that disagree)
            // is refused like one that cannot be completed.
            Err(
                e @ (BootstrapError::Chunk { .. }
                | BootstrapError::Snapshot(SnapshotError::Incomplete(_))
                | BootstrapError::Snapshot(SnapshotError::Store(
                    gigas_statedb::StateDbError::StateRootMismatch { .. },
                ))),
            ) => {
                warn!(block, manifest = %id, error = %e, "this snapshot cannot be completed; it is remembered and another is taken");
                failed.add(id);
            }
            other => return other,
        }
    }
}

/// Writes the chosen snapshot: its chunks fetched `config.concurrency` at a time and written
/// in order by a writer thread, then the state's checks and root.
async fn write_chosen(
    db: &Arc<StateDb>,
    sources: &Sources,
    chosen: Chosen,
    config: &BootstrapConfig,
    metrics: &BootstrapMetrics,
    stop: &mut watch::Receiver<bool>,
    start: Instant,
) -> Result<(ChainTip, BootstrapReport), BootstrapError> {
    let serving = chosen.serving.clone();
    let report = Arc::new(std::sync::Mutex::new(BootstrapReport {
        block: chosen.manifest.block(),
        chunks: chosen.manifest.chunks.len() as u32,
        bytes_fetched: chosen.bytes,
        manifest_seconds: start.elapsed().as_secs_f64(),
        ..BootstrapReport::default()
    }));
    metrics.bytes.inc_by(chosen.bytes);
    metrics
        .block
        .set(i64::try_from(chosen.manifest.block()).unwrap_or(i64::MAX));
    metrics.chunks.set(chosen.manifest.chunks.len() as i64);
    let manifest = Arc::new(chosen.manifest);

    // The writer thread owns the database's write side for the whole bootstrap.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(u32, SnapshotEntries)>(2);
    let (start_tx, start_rx) = tokio::sync::oneshot::channel::<Result<u32, SnapshotError>>();
    let writer = {
        let db = db.clone();
        let manifest = (*manifest).clone();
        let id = chosen.id;
        let metrics = metrics.clone();
        let report = report.clone();
        std::thread::Builder::new()
            .name("gigas-bootstrap".into())
            .spawn(move || -> Result<gigas_statedb::BootstrapOutcome, SnapshotError> {
                let mut restore = match Restore::start(&db, manifest, id) {
                    Ok(r) => r,
                    Err(e) => {
                        let message = e.to_string();
                        let _ = start_tx.send(Err(e));
                        return Err(SnapshotError::Unsupported(message));
                    }
                };
                let _ = start_tx.send(Ok(restore.next_chunk()));
                metrics.chunks_written.set(i64::from(restore.next_chunk()));
                while !restore.complete() {
                    let Some((chunk, entries)) = rx.blocking_recv() else {
                        return Err(SnapshotError::Incomplete("stopped".into()));
                    };
                    let started = Instant::now();
                    restore.write(chunk, &entries)?;
                    drop(entries);
                    if let Ok(mut r) = report.lock() {
                        r.write_seconds += started.elapsed().as_secs_f64();
                    }
                    metrics.chunks_written.set(i64::from(chunk) + 1);
                }
                metrics.phase.set(3);
                info!("every snapshot chunk written; checking the codes and building the state trie");
                restore.finish()
            })
            .map_err(|e| BootstrapError::Internal(e.to_string()))?
    };
    let first = start_rx
        .await
        .map_err(|_| BootstrapError::Internal("the bootstrap writer stopped".into()))??;
    metrics.phase.set(2);
    let total = manifest.chunks.len() as u32;
    if let Ok(mut r) = report.lock() {
        r.resumed_from = first;
    }
    let bar = config.progress_bar.then(|| {
        let bar = indicatif::ProgressBar::new(u64::from(total));
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "snapshot {msg} [{bar:40}] {pos}/{len} chunks, {elapsed} ({eta} left)",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.set_message(format!("{}", manifest.block()));
        bar.set_position(u64::from(first));
        bar
    });
    let chunks_started = Instant::now();
    let mut fetches = futures::stream::iter(first..total)
        .map(|chunk| {
            let manifest = &manifest;
            let report = &report;
            let serving = &serving;
            async move {
                fetch_chunk(sources, serving, manifest, chunk, config, metrics, report)
                    .await
                    .map(|entries| (chunk, entries))
            }
        })
        .buffered(config.concurrency.max(1));
    let outcome: Result<(), BootstrapError> = loop {
        tokio::select! {
            next = fetches.next() => match next {
                None => break Ok(()),
                Some(Ok(item)) => {
                    if tx.send(item).await.is_err() {
                        break Ok(()); // the writer failed: its error is the one to report
                    }
                    if let Some(bar) = &bar {
                        bar.inc(1);
                    }
                    metrics.seconds.set(start.elapsed().as_secs_f64());
                }
                Some(Err(e)) => break Err(e),
            },
            _ = stop.changed() => {
                if *stop.borrow() {
                    break Err(BootstrapError::Stopped);
                }
            }
        }
    };
    drop(fetches);
    drop(tx);
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let chunks_wall = chunks_started.elapsed().as_secs_f64();
    let merkleize_started = Instant::now();
    let written = tokio::task::spawn_blocking(move || writer.join())
        .await
        .map_err(|e| BootstrapError::Internal(e.to_string()))?
        .map_err(|_| BootstrapError::Internal("the bootstrap writer panicked".into()))?;
    outcome?;
    let outcome = written?;
    metrics.phase.set(4);
    metrics.seconds.set(start.elapsed().as_secs_f64());
    let mut report = report.lock().map(|r| r.clone()).unwrap_or_default();
    report.chunks_wall_seconds = chunks_wall;
    report.merkleize_seconds = merkleize_started.elapsed().as_secs_f64();
    report.total_seconds = start.elapsed().as_secs_f64();
    report.state_root = outcome.state_root;
    info!(
        block = report.block,
        chunks = report.chunks,
        mib = report.bytes_fetched as f64 / (1 << 20) as f64,
        refused = report.refused,
        seconds = report.total_seconds,
        merkleize_seconds = report.merkleize_seconds,
        root = %outcome.state_root,
        "bootstrapped from a snapshot; following from the next block"
    );
    Ok((outcome.tip, report))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(number: u64, manifest: u8) -> SnapshotHead {
        SnapshotHead {
            number,
            manifest: B256::repeat_byte(manifest),
        }
    }

    /// Issue 66, item 3: the manifest several sources name comes first, then the newest;
    /// failed manifests are left out, and remembered across a restart.
    #[test]
    fn candidates_prefer_agreement_then_the_newest_and_skip_failed_manifests() {
        let heads = vec![
            (head(20, 1), "a".to_string()),
            (head(16, 2), "b".to_string()),
            (head(16, 2), "c".to_string()),
            (head(24, 3), "d".to_string()),
            (head(16, 4), "e".to_string()),
        ];
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("failed");
        let mut failed = FailedManifests::load(Some(path.clone()));
        let mut reasons = Vec::new();
        let order: Vec<(u64, Vec<String>)> = candidates(&heads, &failed, &mut reasons)
            .into_iter()
            .map(|(h, s)| (h.number, s))
            .collect();
        assert_eq!(
            order,
            vec![
                (16, vec!["b".to_string(), "c".to_string()]),
                (24, vec!["d".to_string()]),
                (20, vec!["a".to_string()]),
                (16, vec!["e".to_string()]),
            ]
        );
        failed.add(B256::repeat_byte(2));
        let again = FailedManifests::load(Some(path));
        assert!(again.contains(&B256::repeat_byte(2)), "remembered on disk");
        let order: Vec<u64> = candidates(&heads, &again, &mut reasons)
            .into_iter()
            .map(|(h, _)| h.number)
            .collect();
        assert_eq!(order, vec![24, 20, 16]);
        assert_eq!(reasons.len(), 2, "{reasons:?}");
        // A source's older snapshots are candidates after the newer ones it names.
        let older = vec![
            (head(24, 3), "d".to_string()),
            (head(16, 4), "d".to_string()),
            (head(8, 5), "d".to_string()),
        ];
        let order: Vec<u64> = candidates(&older, &FailedManifests::default(), &mut reasons)
            .into_iter()
            .map(|(h, _)| h.number)
            .collect();
        assert_eq!(order, vec![24, 16, 8]);
        let mut bounded = FailedManifests::default();
        for i in 0..(FailedManifests::MAX + 5) {
            bounded.add(B256::from(alloy_primitives::U256::from(i)));
        }
        assert_eq!(bounded.ids.len(), FailedManifests::MAX);
    }
}
