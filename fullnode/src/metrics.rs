//! The follower's metrics (`gigas_fullnode_*`); the database's own are `gigas_statedb_*`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use std::sync::atomic::AtomicU64;

/// A label naming why a diff was rejected (see [`crate::apply::rejection_reason`]).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// The reason.
    pub reason: String,
}

/// A label naming how diffs were fetched: `range`, `file` or `stream`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabel {
    /// The way.
    pub source: String,
}

/// The follower's metrics.
#[derive(Debug, Clone)]
pub struct FollowerMetrics {
    /// Blocks the sequencer has that this node has not made durable.
    pub lag_blocks: Gauge,
    /// How long the oldest block not yet durable here has been known to this node (0 when
    /// caught up), in seconds.
    pub lag_seconds: Gauge<f64, AtomicU64>,
    /// The last durable block.
    pub applied_block: Gauge,
    /// The sequencer's head as last seen.
    pub sequencer_head: Gauge,
    /// Diffs received, by how.
    pub diffs_fetched: Family<SourceLabel, Counter>,
    /// Diffs rejected by verification, by reason.
    pub diffs_rejected: Family<ReasonLabel, Counter>,
    /// Bytes of diff files received.
    pub bytes_received: Counter,
    /// HTTP or WebSocket failures (each followed by a backoff).
    pub fetch_errors: Counter,
    /// 1 while a verification failure holds the node.
    pub halted: Gauge,
    /// State changes per second over the last commit interval.
    pub apply_changes_per_second: Gauge<f64, AtomicU64>,
    /// Seconds per block to decode and verify a diff (reads of prior values included).
    pub verify_seconds: Histogram,
    /// Blocks per group commit.
    pub group_blocks: Histogram,
    /// Resident memory, bytes.
    pub resident_bytes: Gauge,
    /// Resident memory that is file-backed (the MDBX map's pages in the page cache), bytes.
    pub resident_file_bytes: Gauge,
    /// Anonymous resident memory (heap), bytes.
    pub resident_anon_bytes: Gauge,
    /// Major page faults since the start (pages read from disk).
    pub major_faults: Counter,
    /// The process's count at the last sample (the counter advances by the difference).
    last_major_faults: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// Re-executions that matched their diff.
    pub reexecuted_blocks: Counter,
    /// Blocks whose undo records are held for reads of recent states.
    pub state_window_blocks: Gauge,
    /// Approximate bytes those records take (bounded by `--state-window-mib`).
    pub state_window_bytes: Gauge,
    /// Blocks served and not yet committed (logged in `applied.wal`, read from memory).
    pub uncommitted_blocks: Gauge,
    /// Approximate bytes of their redo records (a commit is forced past 256 MiB).
    pub uncommitted_bytes: Gauge,
    /// Keys whose pages the prefetch stage read ahead of the apply thread.
    pub prefetched_keys: Counter,
    /// Seconds per block the prefetch stage took.
    pub prefetch_seconds: Histogram,
    /// Blocks verified and decoded on the decode thread (`--decode-ahead`).
    pub decoded_ahead_blocks: Counter,
    /// Seconds the apply thread waited for the decode thread's next block.
    pub decode_wait_seconds: Counter<f64, std::sync::atomic::AtomicU64>,
}

impl Default for FollowerMetrics {
    fn default() -> Self {
        Self {
            lag_blocks: Gauge::default(),
            lag_seconds: Gauge::default(),
            applied_block: Gauge::default(),
            sequencer_head: Gauge::default(),
            diffs_fetched: Family::default(),
            diffs_rejected: Family::default(),
            bytes_received: Counter::default(),
            fetch_errors: Counter::default(),
            halted: Gauge::default(),
            apply_changes_per_second: Gauge::default(),
            // 20 us to about 2 minutes in steps of 1.5x.
            verify_seconds: Histogram::new(exponential_buckets(20e-6, 1.5, 40)),
            group_blocks: Histogram::new(exponential_buckets(1.0, 2.0, 12)),
            resident_bytes: Gauge::default(),
            resident_file_bytes: Gauge::default(),
            resident_anon_bytes: Gauge::default(),
            major_faults: Counter::default(),
            last_major_faults: std::sync::Arc::default(),
            reexecuted_blocks: Counter::default(),
            state_window_blocks: Gauge::default(),
            state_window_bytes: Gauge::default(),
            uncommitted_blocks: Gauge::default(),
            uncommitted_bytes: Gauge::default(),
            prefetched_keys: Counter::default(),
            prefetch_seconds: Histogram::new(exponential_buckets(20e-6, 1.5, 40)),
            decoded_ahead_blocks: Counter::default(),
            decode_wait_seconds: Counter::default(),
        }
    }
}

impl FollowerMetrics {
    /// Counts a rejection.
    pub fn rejected(&self, reason: &str) {
        self.diffs_rejected
            .get_or_create(&ReasonLabel {
                reason: reason.to_string(),
            })
            .inc();
    }

    /// Counts a received diff of `bytes` bytes.
    pub fn fetched(&self, source: &str, bytes: usize) {
        self.diffs_fetched
            .get_or_create(&SourceLabel {
                source: source.to_string(),
            })
            .inc();
        self.bytes_received.inc_by(bytes as u64);
    }

    /// Reads resident memory and major faults of this process from `/proc/self`.
    pub fn sample_memory(&self) {
        let Some(mem) = ProcessMemory::read() else {
            return;
        };
        let set = |g: &Gauge, v: u64| {
            g.set(i64::try_from(v).unwrap_or(i64::MAX));
        };
        set(&self.resident_bytes, mem.resident);
        set(&self.resident_file_bytes, mem.file);
        set(&self.resident_anon_bytes, mem.anon);
        let last = self
            .last_major_faults
            .fetch_max(mem.major_faults, std::sync::atomic::Ordering::Relaxed);
        self.major_faults
            .inc_by(mem.major_faults.saturating_sub(last));
    }

    /// Registers every metric under `gigas_fullnode_*`, and the cgroup's memory
    /// (`gigas_memory_limit_bytes`, `gigas_cgroup_*`, read at scrape time) on `registry`
    /// itself, which is the root one.
    pub fn register(&self, registry: &mut Registry) {
        gigas_cgroup::MemoryCollector::register(registry);
        let sub = registry.sub_registry_with_prefix("gigas_fullnode");
        sub.register(
            "lag_blocks",
            "Blocks the sequencer has that this node has not made durable",
            self.lag_blocks.clone(),
        );
        sub.register(
            "lag_seconds",
            "Seconds the oldest block not yet durable here has been known (0 when caught up)",
            self.lag_seconds.clone(),
        );
        sub.register(
            "applied_block",
            "The last durable block",
            self.applied_block.clone(),
        );
        sub.register(
            "sequencer_head",
            "The sequencer's head as last seen",
            self.sequencer_head.clone(),
        );
        sub.register(
            "diffs_fetched",
            "Diff files received, by source (range, file, stream)",
            self.diffs_fetched.clone(),
        );
        sub.register(
            "diffs_rejected",
            "Diffs rejected by verification, by reason",
            self.diffs_rejected.clone(),
        );
        sub.register(
            "received_bytes",
            "Bytes of diff files received",
            self.bytes_received.clone(),
        );
        sub.register(
            "fetch_errors",
            "HTTP and WebSocket failures, each followed by a backoff",
            self.fetch_errors.clone(),
        );
        sub.register(
            "halted",
            "1 while a rejected diff holds the node at its head",
            self.halted.clone(),
        );
        sub.register(
            "apply_changes_per_second",
            "State changes per second over the last commit interval",
            self.apply_changes_per_second.clone(),
        );
        sub.register(
            "verify_seconds",
            "Seconds per block to decode and verify its diff (prior-value reads included)",
            self.verify_seconds.clone(),
        );
        sub.register(
            "prefetched_keys",
            "Keys whose pages the prefetch stage read ahead of the apply thread",
            self.prefetched_keys.clone(),
        );
        sub.register(
            "prefetch_seconds",
            "Seconds per block the prefetch stage took",
            self.prefetch_seconds.clone(),
        );
        sub.register(
            "decoded_ahead_blocks",
            "Blocks verified and decoded on the decode thread ahead of the apply thread",
            self.decoded_ahead_blocks.clone(),
        );
        sub.register(
            "decode_wait_seconds",
            "Seconds the apply thread waited for the decode thread's next block",
            self.decode_wait_seconds.clone(),
        );
        sub.register(
            "group_blocks",
            "Blocks per group commit",
            self.group_blocks.clone(),
        );
        sub.register(
            "resident_bytes",
            "Resident memory of the process",
            self.resident_bytes.clone(),
        );
        sub.register(
            "resident_file_bytes",
            "File-backed resident memory (mapped database pages in the page cache)",
            self.resident_file_bytes.clone(),
        );
        sub.register(
            "resident_anon_bytes",
            "Anonymous resident memory (heap)",
            self.resident_anon_bytes.clone(),
        );
        sub.register(
            "major_faults",
            "Major page faults since start (pages read from disk)",
            self.major_faults.clone(),
        );
        sub.register(
            "reexecuted_blocks",
            "Blocks re-executed whose result matched their diff",
            self.reexecuted_blocks.clone(),
        );
        sub.register(
            "state_window_blocks",
            "Blocks whose undo records are held for reads of recent states",
            self.state_window_blocks.clone(),
        );
        sub.register(
            "state_window_bytes",
            "Approximate bytes of the undo records held for reads of recent states",
            self.state_window_bytes.clone(),
        );
        sub.register(
            "uncommitted_blocks",
            "Blocks served and not yet committed: logged in applied.wal, read from memory",
            self.uncommitted_blocks.clone(),
        );
        sub.register(
            "uncommitted_bytes",
            "Approximate bytes of the redo records of the blocks served and not yet committed",
            self.uncommitted_bytes.clone(),
        );
    }
}

pub use gigas_cgroup::ProcessMemory;
