//! Writing snapshots of this node's state every K blocks (`--snapshot-every`), on a thread of
//! its own from one MDBX read view, so that following never waits for it; and serving them
//! (`/snapshots/...` on the JSON-RPC port, [`gigas_snapshot::http`]).
//!
//! The thread runs at a lower CPU priority ([`PRODUCER_NICE`]) and looks at the committed
//! head once a second. Once it is `every` blocks past the
//! newest snapshot, it writes one of the committed state (whose header carries the signed
//! commitment), then prunes to `keep`. A snapshot is of a committed block: the blocks served
//! from memory above it are not in the view.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use gigas_snapshot::ProduceOptions;
use gigas_statedb::StateDb;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tracing::{info, warn};

/// When and where snapshots are written.
#[derive(Debug, Clone)]
pub struct SnapshotConfig {
    /// The snapshots directory (served as `/snapshots/`; give an archive's `snapshots/` to
    /// have the archive's server serve them).
    pub dir: PathBuf,
    /// Blocks between snapshots (0: none are written; the directory is still served).
    pub every: u64,
    /// Snapshots kept.
    pub keep: usize,
    /// How chunks are cut.
    pub produce: ProduceOptions,
}

/// The producer's metrics (`gigas_fullnode_snapshot_*`).
#[derive(Debug, Clone, Default)]
pub struct SnapshotMetrics {
    /// The newest snapshot's block.
    pub last_block: Gauge,
    /// Seconds the last snapshot took.
    pub last_seconds: Gauge<f64, AtomicU64>,
    /// Bytes of the last snapshot.
    pub last_bytes: Gauge,
    /// Snapshots written.
    pub written: Counter,
    /// Snapshots that failed.
    pub failed: Counter,
}

impl SnapshotMetrics {
    /// Registers them.
    pub fn register(&self, registry: &mut Registry) {
        let sub = registry.sub_registry_with_prefix("gigas_fullnode_snapshot");
        sub.register(
            "last_block",
            "The newest snapshot's block",
            self.last_block.clone(),
        );
        sub.register(
            "last_seconds",
            "Seconds the last snapshot took to write",
            self.last_seconds.clone(),
        );
        sub.register(
            "last_bytes",
            "Bytes of the last snapshot",
            self.last_bytes.clone(),
        );
        sub.register("written", "Snapshots written", self.written.clone());
        sub.register("failed", "Snapshots that failed", self.failed.clone());
    }
}

/// Starts the producer thread (when `every` > 0). It ends when `stop` is set.
pub fn spawn(
    db: Arc<StateDb>,
    config: SnapshotConfig,
    metrics: SnapshotMetrics,
    stop: Arc<AtomicBool>,
) -> std::io::Result<()> {
    if config.every == 0 {
        return Ok(());
    }
    std::fs::create_dir_all(&config.dir)?;
    std::thread::Builder::new()
        .name("gigas-snapshot".into())
        .spawn(move || run(&db, &config, &metrics, &stop))?;
    Ok(())
}

/// The nice value the producer thread runs at: it yields the cores to following whenever
/// both want them (a node catching up loses little; one that keeps up has cores to spare
/// between blocks, and the snapshot takes them).
pub const PRODUCER_NICE: i32 = 10;

/// Lowers the calling thread's CPU priority to [`PRODUCER_NICE`]. On Linux a nice value
/// belongs to the thread, not the process. Failing to lower it is logged and ignored: the
/// snapshot is the same, only following may slow more while it is written.
pub fn lower_thread_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid takes no arguments and cannot fail; setpriority reads only its
        // integer arguments.
        let result = unsafe {
            let tid = libc::syscall(libc::SYS_gettid);
            libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, PRODUCER_NICE)
        };
        if result != 0 {
            warn!(
                error = %std::io::Error::last_os_error(),
                "could not lower the snapshot thread's priority"
            );
        }
    }
}

fn run(db: &StateDb, config: &SnapshotConfig, metrics: &SnapshotMetrics, stop: &AtomicBool) {
    lower_thread_priority();
    let mut last = match gigas_snapshot::list(&config.dir) {
        Ok(blocks) => blocks.last().copied(),
        Err(e) => {
            warn!(error = %e, "reading the snapshots directory");
            None
        }
    };
    if let Some(block) = last {
        metrics
            .last_block
            .set(i64::try_from(block).unwrap_or(i64::MAX));
    }
    // A failing snapshot is tried again after this long, not every second.
    let mut retry_at = std::time::Instant::now();
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_secs(1));
        let head = match db.head() {
            Ok(Some(tip)) => tip.number,
            Ok(None) => continue,
            Err(e) => {
                warn!(error = %e, "reading the head for a snapshot");
                continue;
            }
        };
        let due = last.map_or(head >= config.every, |l| head >= l + config.every);
        if !due || std::time::Instant::now() < retry_at {
            continue;
        }
        let produced = db
            .view()
            .map_err(gigas_snapshot::SnapshotError::from)
            .and_then(|view| gigas_snapshot::write_snapshot(&view, &config.dir, config.produce));
        match produced {
            Ok(p) => {
                last = Some(p.block);
                metrics
                    .last_block
                    .set(i64::try_from(p.block).unwrap_or(i64::MAX));
                if p.written {
                    metrics.written.inc();
                    metrics.last_seconds.set(p.seconds);
                    metrics
                        .last_bytes
                        .set(i64::try_from(p.bytes).unwrap_or(i64::MAX));
                }
                match gigas_snapshot::prune(&config.dir, config.keep) {
                    Ok(removed) if !removed.is_empty() => {
                        info!(?removed, keep = config.keep, "old snapshots pruned")
                    }
                    Ok(_) => {}
                    Err(e) => warn!(error = %e, "pruning old snapshots"),
                }
            }
            Err(e) => {
                metrics.failed.inc();
                warn!(error = %e, "writing a snapshot failed; trying again in a minute");
                retry_at = std::time::Instant::now() + Duration::from_secs(60);
            }
        }
    }
}
