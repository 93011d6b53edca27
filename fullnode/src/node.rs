//! Putting the node together: the database, the genesis, the fetcher task, the apply thread,
//! the JSON-RPC server and the metrics endpoint.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gigas_chain::ChainConfig;
use gigas_statedb::{StateDb, StateDbError, StateDbOptions, WriterOptions};
use prometheus_client::registry::Registry;
use tokio::sync::{mpsc, watch};
use tracing::{error, info, warn};

use crate::fetch::{Cursor, FetchConfig, FetchError, Fetcher};
use crate::follow::{FollowConfig, FollowError};
use crate::genesis::GenesisError;
use crate::metrics::FollowerMetrics;
use crate::status::SyncState;

/// Everything a full node runs with.
#[derive(Debug, Clone)]
pub struct FullNodeConfig {
    /// Where its state lives (`DATADIR/state` is the MDBX environment).
    pub datadir: PathBuf,
    /// The chain it follows.
    pub chain: ChainConfig,
    /// Where diffs come from.
    pub fetch: FetchConfig,
    /// Group bounds and the root interval.
    pub writer: WriterOptions,
    /// The MDBX environment's settings.
    pub db: StateDbOptions,
    /// Re-execute every block and compare with its diff.
    pub verify_execution: bool,
    /// The JSON-RPC server (HTTP and WebSocket on one port).
    pub rpc: gigas_rpc::RpcConfig,
    /// What one client execution (eth_call, eth_estimateGas) may use.
    pub call_budget: gigas_evm::budget::CallBudget,
    /// Where to serve `/metrics`, if anywhere.
    pub metrics: Option<SocketAddr>,
    /// The sequencer's URL as users should be told it (in the errors of refused writes).
    pub sequencer_url: String,
    /// How many recent blocks' states are served besides the head's, and in how many bytes.
    pub state_window: crate::window::WindowLimits,
    /// Read each fetched diff's pages ahead of the apply thread ([`crate::prefetch`]).
    pub prefetch: bool,
    /// Write each block's changes into the open write transaction while waiting for the
    /// next block ([`gigas_statedb::StateWriter::flush_idle`]).
    pub flush_idle: bool,
    /// Keep the state's lattice hash and check every diff's signed state commitment.
    pub state_commitment: bool,
    /// Load the account trie in memory with the stored nodes at start (`--trie.preload`).
    pub preload_trie: bool,
    /// Verify and decode each block on a thread ahead of the apply thread
    /// (`--decode-ahead`, [`crate::decode`]).
    pub decode_ahead: bool,
    /// Start an empty database from a snapshot instead of the genesis (`None`: genesis).
    pub bootstrap: Option<crate::bootstrap::BootstrapConfig>,
    /// Write (every K blocks) and serve snapshots of this node's state (`None`: neither).
    pub snapshots: Option<crate::snapshots::SnapshotConfig>,
}

/// Why the node could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The database failed.
    #[error("state database in {dir}: {source}")]
    Store {
        /// Its directory.
        dir: PathBuf,
        /// The cause.
        source: StateDbError,
    },
    /// The data directory could not be created.
    #[error("creating {dir}: {source}")]
    Datadir {
        /// The directory.
        dir: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The genesis could not be set up.
    #[error(transparent)]
    Genesis(#[from] GenesisError),
    /// The bootstrap from a snapshot failed.
    #[error(transparent)]
    Bootstrap(#[from] crate::bootstrap::BootstrapError),
    /// The fetcher could not be built.
    #[error(transparent)]
    Fetch(#[from] FetchError),
    /// The apply thread failed.
    #[error(transparent)]
    Follow(#[from] FollowError),
    /// Applying the logged blocks again at start failed.
    #[error(transparent)]
    Recover(#[from] crate::wal::WalError),
    /// A server could not start.
    #[error("{what}: {detail}")]
    Serve {
        /// Which server.
        what: &'static str,
        /// Why.
        detail: String,
    },
    /// Stopped before it was ready.
    #[error("stopped before the genesis could be fetched")]
    Stopped,
}

/// A running full node.
#[derive(Debug)]
pub struct FullNode {
    db: Arc<StateDb>,
    sync: Arc<SyncState>,
    registry: Arc<Mutex<Registry>>,
    stop: Arc<watch::Sender<bool>>,
    apply: Option<std::thread::JoinHandle<Result<(), FollowError>>>,
    rpc: Option<gigas_rpc::RpcHandle>,
    rpc_addr: Option<SocketAddr>,
    metrics_addr: Option<SocketAddr>,
}

impl FullNode {
    /// Opens the database (writing the genesis on a first start, after checking it against
    /// the sequencer's signed block 0), then starts the fetcher, the apply thread, the
    /// JSON-RPC server and the metrics endpoint on `runtime`.
    pub fn start(
        config: FullNodeConfig,
        runtime: &tokio::runtime::Runtime,
    ) -> Result<Self, NodeError> {
        let dir = config.datadir.join("state");
        std::fs::create_dir_all(&dir).map_err(|source| NodeError::Datadir {
            dir: dir.clone(),
            source,
        })?;
        let db = Arc::new(StateDb::open(&dir, config.db.clone()).map_err(|source| {
            NodeError::Store {
                dir: dir.clone(),
                source,
            }
        })?);
        let metrics = FollowerMetrics::default();
        let bootstrap_metrics = crate::bootstrap::BootstrapMetrics::default();
        let snapshot_metrics = crate::snapshots::SnapshotMetrics::default();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        bootstrap_metrics.register(&mut registry);
        snapshot_metrics.register(&mut registry);
        db.metrics().register(&mut registry);
        let registry = Arc::new(Mutex::new(registry));
        let (stop, stop_rx) = watch::channel(false);
        let stop = Arc::new(stop);
        // Before the genesis or a bootstrap, which can take minutes: their progress is
        // watched there.
        let metrics_addr = match config.metrics {
            Some(addr) => Some(serve_metrics(
                runtime,
                addr,
                registry.clone(),
                stop_rx.clone(),
            )?),
            None => None,
        };

        let tip = match db.head().map_err(|source| NodeError::Store {
            dir: dir.clone(),
            source,
        })? {
            Some(_) => crate::genesis::check_existing(&db, &config.chain, config.state_commitment)?,
            None if config.bootstrap.is_some() => {
                let mut bootstrap = config.bootstrap.clone().unwrap_or_else(|| {
                    crate::bootstrap::BootstrapConfig::new(vec![config.fetch.base.clone()])
                });
                // The diffs after the snapshot come from where the node follows.
                bootstrap.diff_source = Some(config.fetch.base.clone());
                bootstrap.failed_manifests =
                    Some(config.datadir.join("bootstrap-failed-manifests"));
                if !config.state_commitment {
                    return Err(NodeError::Bootstrap(crate::bootstrap::BootstrapError::NoSnapshot(
                        "a snapshot is checked against the state commitment:                          --bootstrap snapshot needs --state-commitment on"
                            .into(),
                    )));
                }
                let sequencer = crate::genesis::sequencer_address(&config.chain)?;
                info!(sources = ?bootstrap.sources, "bootstrapping from a snapshot");
                let (tip, _report) = runtime.block_on(crate::bootstrap::bootstrap(
                    db.clone(),
                    sequencer,
                    bootstrap,
                    bootstrap_metrics.clone(),
                    stop_rx.clone(),
                ))?;
                tip
            }
            None => {
                if let Ok(Some(progress)) = db.bootstrap_progress() {
                    warn!(
                        block = progress.block,
                        chunks_done = progress.chunks_done,
                        "a bootstrap from a snapshot was under way in this database;                          writing the genesis instead (give --bootstrap snapshot to resume it)"
                    );
                }
                let fetcher = Fetcher::new(
                    config.fetch.clone(),
                    metrics.clone(),
                    Arc::new(SyncState::default()),
                )?;
                let diff0 = runtime.block_on(fetch_genesis(&fetcher, stop_rx.clone()))?;
                info!("writing the genesis state");
                let (tip, outcome) = crate::genesis::initialize(
                    &db,
                    &config.chain,
                    &diff0,
                    config.state_commitment,
                )?;
                info!(accounts = outcome.accounts, slots = outcome.slots, root = %outcome.state_root, "genesis written");
                tip
            }
        };
        let sequencer = crate::genesis::sequencer_address(&config.chain)?;
        let applied_log = config.datadir.join(crate::wal::FILE_NAME);
        // The blocks served before the last stop and not committed: applied again before
        // anything is served, so that `latest` never goes back.
        let tip = crate::wal::recover(&db, &applied_log, config.writer, sequencer, tip)?;
        info!(head = tip.number, hash = %tip.hash, datadir = %config.datadir.display(), "state opened");
        let sync = Arc::new(SyncState::new(tip.number, tip.hash));
        metrics
            .applied_block
            .set(i64::try_from(tip.number).unwrap_or(i64::MAX));

        let (cursor_tx, cursor_rx) = watch::channel(Cursor {
            epoch: 0,
            next: tip.number + 1,
        });
        let queue = config.fetch.queue_blocks.max(1);
        // With the prefetch stage, the fetcher's queue is in front of it and only a few
        // warmed diffs wait for the apply thread: pages read further ahead could be evicted
        // again (under a memory limit) before they are used.
        let (items_tx, items_rx) = mpsc::channel(if config.prefetch {
            crate::prefetch::AHEAD_BLOCKS
        } else {
            queue
        });
        let mut fetch_config = config.fetch.clone();
        fetch_config.with_blocks = config.verify_execution;
        let fetcher = Fetcher::new(fetch_config, metrics.clone(), sync.clone())?;
        let fetched_tx = if config.prefetch {
            let (fetched_tx, fetched_rx) = mpsc::channel(queue);
            let db = db.clone();
            let metrics = metrics.clone();
            // Ends when the fetcher drops its sender or the apply thread its receiver.
            std::thread::Builder::new()
                .name("gigas-prefetch".into())
                .spawn(move || crate::prefetch::run(db, sequencer, fetched_rx, items_tx, metrics))
                .map_err(|e| NodeError::Serve {
                    what: "the prefetch thread",
                    detail: e.to_string(),
                })?;
            fetched_tx
        } else {
            items_tx
        };
        runtime.spawn(fetcher.run(cursor_rx, fetched_tx, stop_rx.clone()));

        // Memory gauges, sampled once a second.
        {
            let metrics = metrics.clone();
            let mut stop = stop_rx.clone();
            runtime.spawn(async move {
                loop {
                    metrics.sample_memory();
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                        _ = stop.changed() => return,
                    }
                }
            });
        }

        let window = Arc::new(crate::window::StateWindow::new(config.state_window));
        let follow = FollowConfig {
            window: window.clone(),
            writer: config.writer,
            sequencer,
            applied_log: Some(applied_log),
            verify_execution: config.verify_execution,
            flush_idle: config.flush_idle,
            spec: config.chain.spec(),
            retry_after_rejection: Duration::from_secs(1),
            state_commitment: config.state_commitment,
            preload_trie: config.preload_trie,
            decode_ahead: config.decode_ahead,
        };
        let backend = Arc::new(
            crate::rpc::FullNodeBackend::new(
                db.clone(),
                &config.chain,
                config.sequencer_url.clone(),
                sync.clone(),
                gigas_rpc::SubscriptionHub::new(gigas_rpc::SubscriptionBuffers::default()),
            )
            .with_call_budget(config.call_budget)
            .with_state_window(window),
        );
        if let Some(snapshots) = &config.snapshots {
            let stop_flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
            {
                let stop_flag = stop_flag.clone();
                let mut stop = stop_rx.clone();
                runtime.spawn(async move {
                    while stop.changed().await.is_ok() {
                        if *stop.borrow() {
                            break;
                        }
                    }
                    stop_flag.store(true, std::sync::atomic::Ordering::Release);
                });
            }
            crate::snapshots::spawn(db.clone(), snapshots.clone(), snapshot_metrics, stop_flag)
                .map_err(|e| NodeError::Serve {
                    what: "the snapshot thread",
                    detail: format!("{}: {e}", snapshots.dir.display()),
                })?;
        }
        let rpc = runtime
            .block_on(async {
                match &config.snapshots {
                    Some(snapshots) => {
                        gigas_rpc::RpcServer::start_with_routes(
                            config.rpc.clone(),
                            backend.clone(),
                            gigas_rpc::HttpRoutes::new(gigas_snapshot::http::router(
                                snapshots.dir.clone(),
                            )),
                        )
                        .await
                    }
                    None => gigas_rpc::RpcServer::start(config.rpc.clone(), backend.clone()).await,
                }
            })
            .map_err(|e| NodeError::Serve {
                what: "JSON-RPC",
                detail: format!(
                    "listening on {}: {e} (is the port in use? try --http.port)",
                    config.rpc.listen
                ),
            })?;
        let rpc_addr = rpc.local_addr();
        if let Ok(mut registry) = registry.lock() {
            rpc.metrics().register(&mut registry);
        }
        info!(url = %format!("http://{rpc_addr}"), "JSON-RPC (HTTP and WebSocket)");
        let on_head: crate::follow::OnHead = {
            let backend = backend.clone();
            Box::new(move |_, tip| {
                if let Err(e) = backend.publish_heads(tip.number) {
                    warn!(error = %e, "publishing new heads");
                }
            })
        };

        let apply = {
            let db = db.clone();
            let sync = sync.clone();
            let metrics = metrics.clone();
            let handle = runtime.handle().clone();
            let stop_rx = stop_rx.clone();
            let stopper = stop.clone();
            std::thread::Builder::new()
                .name("gigas-apply".into())
                .spawn(move || {
                    let result = crate::follow::run(
                        db,
                        follow,
                        crate::follow::ThreadIo {
                            handle,
                            input: items_rx,
                            cursor: cursor_tx,
                            stop: stop_rx,
                        },
                        sync,
                        metrics,
                        on_head,
                    );
                    if let Err(e) = &result {
                        error!(error = %e, "the apply thread failed; stopping the node");
                    }
                    let _ = stopper.send(true);
                    result
                })
                .map_err(|e| NodeError::Serve {
                    what: "the apply thread",
                    detail: e.to_string(),
                })?
        };

        Ok(Self {
            db,
            sync,
            registry,
            stop,
            apply: Some(apply),
            rpc: Some(rpc),
            rpc_addr: Some(rpc_addr),
            metrics_addr,
        })
    }

    /// The database.
    pub fn db(&self) -> &Arc<StateDb> {
        &self.db
    }

    /// What the node knows of the chain.
    pub fn sync(&self) -> &Arc<SyncState> {
        &self.sync
    }

    /// The metrics registry.
    pub fn registry(&self) -> &Arc<Mutex<Registry>> {
        &self.registry
    }

    /// Where JSON-RPC listens.
    pub fn rpc_addr(&self) -> Option<SocketAddr> {
        self.rpc_addr
    }

    /// Where `/metrics` is served.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// Asks every part to stop (the apply thread commits its open group first).
    pub fn stop(&self) {
        let _ = self.stop.send(true);
    }

    /// A handle that stops the node from another task or thread.
    pub fn stop_handle(&self) -> StopHandle {
        StopHandle(self.stop.clone())
    }

    /// A receiver that turns true when the node stops (asked to, or on a failure).
    pub fn stopped(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    /// Waits for the apply thread and stops the servers.
    pub fn join(mut self) -> Result<(), NodeError> {
        let result = match self.apply.take() {
            Some(handle) => handle.join().unwrap_or(Err(FollowError::Panicked)),
            None => Ok(()),
        };
        if let Some(rpc) = self.rpc.take() {
            rpc.stop();
        }
        result.map_err(NodeError::from)
    }
}

/// Stops a [`FullNode`].
#[derive(Debug, Clone)]
pub struct StopHandle(Arc<watch::Sender<bool>>);

impl StopHandle {
    /// Asks the node to stop (the apply thread commits its open group first).
    pub fn stop(&self) {
        let _ = self.0.send(true);
    }
}

/// Fetches diff 0, retrying with a backoff while the source is not reachable yet.
async fn fetch_genesis(
    fetcher: &Fetcher,
    mut stop: watch::Receiver<bool>,
) -> Result<Vec<u8>, NodeError> {
    let mut backoff = Duration::from_millis(200);
    loop {
        match fetcher.diff_file(0).await {
            Ok(Some(bytes)) => return Ok(bytes),
            Ok(None) => warn!("the source has no block 0 yet; waiting"),
            Err(e) => warn!(error = %e, "fetching the genesis (block 0) failed; retrying"),
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stop.changed() => return Err(NodeError::Stopped),
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

fn serve_metrics(
    runtime: &tokio::runtime::Runtime,
    addr: SocketAddr,
    registry: Arc<Mutex<Registry>>,
    mut stop: watch::Receiver<bool>,
) -> Result<SocketAddr, NodeError> {
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind(addr))
        .map_err(|e| NodeError::Serve {
            what: "the metrics endpoint",
            detail: format!(
                "binding {addr}: {e} (is the port in use? try --metrics with another port)"
            ),
        })?;
    let local = listener.local_addr().map_err(|e| NodeError::Serve {
        what: "the metrics endpoint",
        detail: e.to_string(),
    })?;
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let registry = registry.clone();
            async move {
                let mut out = String::new();
                {
                    let registry = registry.lock().unwrap_or_else(|p| p.into_inner());
                    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
                }
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    out,
                )
            }
        }),
    );
    runtime.spawn(async move {
        let shutdown = async move {
            let _ = stop.changed().await;
        };
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
        {
            error!(error = %e, "metrics endpoint stopped");
        }
    });
    Ok(local)
}
