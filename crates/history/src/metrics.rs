//! The history's metrics as `prometheus-client` types, for the node to register.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// The history's metrics. Cloning shares the underlying values.
#[derive(Debug, Clone)]
pub struct HistoryMetrics {
    /// Blocks committed.
    pub blocks_committed: Counter,
    /// Seconds per `commit_block`, from the start of the write transaction to durable.
    pub commit_seconds: Histogram,
    /// Blocks whose ChangeSet and state history were pruned.
    pub blocks_pruned: Counter,
    /// Blocks whose receipts a read loaded (by `receipts` or `logs`).
    pub receipt_blocks_read: Counter,
    /// Log queries answered.
    pub log_queries: Counter,
    /// Cursor seeks in the log index.
    pub log_index_seeks: Counter,
    /// Bytes of the data file up to its last used page, after the last commit (the file itself
    /// is sparse and may be larger).
    pub used_bytes: Gauge,
    /// Seconds per phase of a durable commit (see [`CommitPhase`]): encoding, waiting for
    /// room, appending to the block log, syncing it.
    pub commit_phase_seconds: Family<PhaseLabel, Histogram, fn() -> Histogram>,
    /// Seconds per phase of an index batch (see [`IndexPhase`]): where the indexer's time
    /// goes as the tables grow.
    pub index_phase_seconds: Family<PhaseLabel, Histogram, fn() -> Histogram>,
    /// Seconds per index batch (one MDBX write transaction, durable).
    pub index_seconds: Histogram,
    /// Blocks per index batch.
    pub index_batch_blocks: Histogram,
    /// The newest block in the index.
    pub indexed_head: Gauge,
    /// Blocks durable in the block log and not yet in the index (held in memory).
    pub unindexed_blocks: Gauge,
    /// Bytes of the block log's segments.
    pub log_bytes: Gauge,
}

/// A phase of a durable commit ([`crate::History::commit_blocks`]): what the committer
/// waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CommitPhase {
    /// Checking the blocks, encoding their log records, building their in-memory lookups.
    Encode,
    /// Waiting for the indexer to make room under the bound on unindexed blocks.
    IndexWait,
    /// Appending the records to the block log.
    Append,
    /// Syncing the block log (`fdatasync`).
    Sync,
}

impl CommitPhase {
    /// Every phase, in the order a commit goes through them.
    pub const ALL: [CommitPhase; 4] = [
        CommitPhase::Encode,
        CommitPhase::IndexWait,
        CommitPhase::Append,
        CommitPhase::Sync,
    ];

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            CommitPhase::Encode => "encode",
            CommitPhase::IndexWait => "index_wait",
            CommitPhase::Append => "append",
            CommitPhase::Sync => "sync",
        }
    }
}

/// A phase of writing one block to the index (on the indexer's thread).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IndexPhase {
    /// Header, its hash lookup, transactions and their hash lookups.
    Transactions,
    /// Receipts and the log index.
    Receipts,
    /// The ChangeSet and the old value of every changed key (`StateHistory`).
    StateHistory,
    /// Pruning what left the state-history window.
    Prune,
    /// The MDBX commit of the batch (page writes; syncs too when every batch is durable).
    Commit,
    /// A durable point: `mdbx_env_sync` of the batches committed since the last one.
    Sync,
}

impl IndexPhase {
    /// Every phase, in the order an index batch goes through them.
    pub const ALL: [IndexPhase; 6] = [
        IndexPhase::Transactions,
        IndexPhase::Receipts,
        IndexPhase::StateHistory,
        IndexPhase::Prune,
        IndexPhase::Commit,
        IndexPhase::Sync,
    ];

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            IndexPhase::Transactions => "transactions",
            IndexPhase::Receipts => "receipts",
            IndexPhase::StateHistory => "state_history",
            IndexPhase::Prune => "prune",
            IndexPhase::Commit => "commit",
            IndexPhase::Sync => "sync",
        }
    }
}

/// The `phase` label.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct PhaseLabel {
    /// The phase's name.
    pub phase: &'static str,
}

fn phase_histogram() -> Histogram {
    Histogram::new(exponential_buckets(20e-6, 1.5, 34))
}

impl Default for HistoryMetrics {
    fn default() -> Self {
        Self {
            blocks_committed: Counter::default(),
            // 50 us to about 13 s in steps of 1.5x.
            commit_seconds: Histogram::new(exponential_buckets(50e-6, 1.5, 32)),
            blocks_pruned: Counter::default(),
            receipt_blocks_read: Counter::default(),
            log_queries: Counter::default(),
            log_index_seeks: Counter::default(),
            used_bytes: Gauge::default(),
            commit_phase_seconds: Family::new_with_constructor(phase_histogram),
            index_phase_seconds: Family::new_with_constructor(phase_histogram),
            // 1 ms to about 290 s.
            index_seconds: Histogram::new(exponential_buckets(1e-3, 1.5, 32)),
            index_batch_blocks: Histogram::new(exponential_buckets(1.0, 2.0, 12)),
            indexed_head: Gauge::default(),
            unindexed_blocks: Gauge::default(),
            log_bytes: Gauge::default(),
        }
    }
}

impl HistoryMetrics {
    /// Records how long one phase of a commit took.
    pub fn phase(&self, phase: CommitPhase, seconds: f64) {
        self.commit_phase_seconds
            .get_or_create(&PhaseLabel {
                phase: phase.name(),
            })
            .observe(seconds);
    }

    /// Records how long one phase of an index batch took.
    pub fn index_phase(&self, phase: IndexPhase, seconds: f64) {
        self.index_phase_seconds
            .get_or_create(&PhaseLabel {
                phase: phase.name(),
            })
            .observe(seconds);
    }

    /// Registers every metric under `gigas_history_*`.
    pub fn register(&self, registry: &mut Registry) {
        let sub = registry.sub_registry_with_prefix("gigas_history");
        sub.register(
            "blocks_committed",
            "Blocks committed",
            self.blocks_committed.clone(),
        );
        sub.register(
            "commit_seconds",
            "Seconds per durable commit of a group of blocks (block log appended and synced)",
            self.commit_seconds.clone(),
        );
        sub.register(
            "blocks_pruned",
            "Blocks whose ChangeSet and state history were pruned",
            self.blocks_pruned.clone(),
        );
        sub.register(
            "receipt_blocks_read",
            "Blocks whose receipts a read loaded",
            self.receipt_blocks_read.clone(),
        );
        sub.register(
            "log_queries",
            "Log queries answered",
            self.log_queries.clone(),
        );
        sub.register(
            "log_index_seeks",
            "Cursor seeks in the log index",
            self.log_index_seeks.clone(),
        );
        sub.register(
            "commit_phase_seconds",
            "Seconds per phase of a durable commit (encode, index_wait, append, sync)",
            self.commit_phase_seconds.clone(),
        );
        sub.register(
            "index_phase_seconds",
            "Seconds per phase of writing a block to the index (transactions, receipts, state_history, prune, commit)",
            self.index_phase_seconds.clone(),
        );
        sub.register(
            "index_seconds",
            "Seconds per index batch (one durable MDBX transaction)",
            self.index_seconds.clone(),
        );
        sub.register(
            "index_batch_blocks",
            "Blocks per index batch",
            self.index_batch_blocks.clone(),
        );
        sub.register(
            "indexed_head",
            "The newest block in the index",
            self.indexed_head.clone(),
        );
        sub.register(
            "unindexed_blocks",
            "Blocks durable in the block log and not yet indexed (held in memory)",
            self.unindexed_blocks.clone(),
        );
        sub.register(
            "log_bytes",
            "Bytes of the block log's segments",
            self.log_bytes.clone(),
        );
        sub.register(
            "used_bytes",
            "Bytes of the MDBX data file up to its last used page",
            self.used_bytes.clone(),
        );
    }
}
