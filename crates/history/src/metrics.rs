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
    /// Seconds per phase of `commit_block` (see [`CommitPhase`]): where a commit's time goes
    /// as the tables grow.
    pub commit_phase_seconds: Family<PhaseLabel, Histogram, fn() -> Histogram>,
}

/// A phase of committing one block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CommitPhase {
    /// Header, its hash lookup, transactions and their hash lookups.
    Transactions,
    /// Receipts and the log index.
    Receipts,
    /// The ChangeSet and the old value of every changed key (`StateHistory`).
    StateHistory,
    /// Pruning what left the state-history window.
    Prune,
    /// The durable commit (page writes and syncs).
    Commit,
}

impl CommitPhase {
    /// Every phase, in the order a commit goes through them.
    pub const ALL: [CommitPhase; 5] = [
        CommitPhase::Transactions,
        CommitPhase::Receipts,
        CommitPhase::StateHistory,
        CommitPhase::Prune,
        CommitPhase::Commit,
    ];

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            CommitPhase::Transactions => "transactions",
            CommitPhase::Receipts => "receipts",
            CommitPhase::StateHistory => "state_history",
            CommitPhase::Prune => "prune",
            CommitPhase::Commit => "commit",
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
            "Seconds per block commit, until durable",
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
            "Seconds per phase of a block commit (transactions, receipts, state_history, prune, commit)",
            self.commit_phase_seconds.clone(),
        );
        sub.register(
            "used_bytes",
            "Bytes of the MDBX data file up to its last used page",
            self.used_bytes.clone(),
        );
    }
}
