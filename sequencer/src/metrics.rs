//! The node's own metrics (`gigas_sequencer_*`); the engines register theirs beside them.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// A stage of producing a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    /// Choosing transactions from the pool.
    Select,
    /// Executing them (Block-STM or sequential, with the JIT).
    Execute,
    /// Receipts, the transactions' and receipts' roots, the header and its signature.
    Seal,
    /// The state root: the block's changes into the state trie, and its root.
    Root,
    /// Writing the block to the chain history (its block log, appended and synced).
    CommitHistory,
    /// Writing the ChangeSet to Vilmo (durable).
    CommitState,
    /// Publishing: the head, subscriptions, the pool's update.
    Publish,
}

impl Stage {
    /// Every stage, in order.
    pub const ALL: [Stage; 7] = [
        Stage::Select,
        Stage::Execute,
        Stage::Root,
        Stage::Seal,
        Stage::CommitHistory,
        Stage::CommitState,
        Stage::Publish,
    ];

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Select => "select",
            Stage::Execute => "execute",
            Stage::Seal => "seal",
            Stage::Root => "state_root",
            Stage::CommitHistory => "commit_history",
            Stage::CommitState => "commit_state",
            Stage::Publish => "publish",
        }
    }
}

/// The `stage` label.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct StageLabel {
    /// The stage's name.
    pub stage: &'static str,
}

fn seconds_buckets() -> Histogram {
    // 20 us to about 50 s in steps of 1.5x: fine enough to read a median and a p99.
    Histogram::new(exponential_buckets(20e-6, 1.5, 37))
}

/// The node's metrics.
#[derive(Debug, Clone)]
pub struct NodeMetrics {
    /// Seconds per stage of each block.
    pub stage_seconds: Family<StageLabel, Histogram, fn() -> Histogram>,
    /// Seconds from the start of a block's selection to its publication.
    pub block_seconds: Histogram,
    /// Seconds between the publication of consecutive blocks.
    pub block_interval_seconds: Histogram,
    /// Gas used per block.
    pub block_gas: Histogram,
    /// Transactions per block.
    pub block_transactions: Histogram,
    /// The head block number.
    pub head: Gauge,
    /// Transactions included in blocks.
    pub transactions_included: Counter,
    /// Transactions the executor found invalid at their turn in a block: left out of it in
    /// place (and out of the pool unless they wait behind a nonce gap).
    pub transactions_dropped: Counter,
    /// Blocks produced.
    pub blocks: Counter,
    /// Blocks per history group commit.
    pub commit_group_blocks: Histogram,
    /// Trie leaves the blocks' state roots read.
    pub root_leaves: Counter,
}

impl Default for NodeMetrics {
    fn default() -> Self {
        Self {
            stage_seconds: Family::new_with_constructor(seconds_buckets),
            block_seconds: seconds_buckets(),
            block_interval_seconds: seconds_buckets(),
            block_gas: Histogram::new(exponential_buckets(21_000.0, 2.0, 16)),
            block_transactions: Histogram::new(exponential_buckets(1.0, 2.0, 20)),
            head: Gauge::default(),
            transactions_included: Counter::default(),
            transactions_dropped: Counter::default(),
            blocks: Counter::default(),
            commit_group_blocks: Histogram::new(exponential_buckets(1.0, 2.0, 5)),
            root_leaves: Counter::default(),
        }
    }
}

impl NodeMetrics {
    /// Registers under `gigas_sequencer_*`, and the cgroup's memory (`gigas_memory_limit_bytes`,
    /// `gigas_cgroup_*`, read at scrape time) on `registry` itself, which is the root one.
    pub fn register(&self, registry: &mut Registry) {
        gigas_cgroup::MemoryCollector::register(registry);
        let sub = registry.sub_registry_with_prefix("gigas_sequencer");
        sub.register(
            "stage_seconds",
            "Seconds per stage of producing a block",
            self.stage_seconds.clone(),
        );
        sub.register(
            "block_seconds",
            "Seconds from selecting a block's transactions to publishing it",
            self.block_seconds.clone(),
        );
        sub.register(
            "block_interval_seconds",
            "Seconds between consecutive blocks' publication",
            self.block_interval_seconds.clone(),
        );
        sub.register("block_gas", "Gas used per block", self.block_gas.clone());
        sub.register(
            "block_transactions",
            "Transactions per block",
            self.block_transactions.clone(),
        );
        sub.register("head", "The head block number", self.head.clone());
        sub.register(
            "transactions_included",
            "Transactions included in blocks",
            self.transactions_included.clone(),
        );
        sub.register(
            "transactions_dropped",
            "Transactions found invalid at their turn in a block and left out of it",
            self.transactions_dropped.clone(),
        );
        sub.register("blocks", "Blocks produced", self.blocks.clone());
        sub.register(
            "commit_group_blocks",
            "Blocks written to the history per durable transaction (more when the disk lags)",
            self.commit_group_blocks.clone(),
        );
    }

    /// Records one stage's duration.
    pub fn stage(&self, stage: Stage, seconds: f64) {
        self.stage_seconds
            .get_or_create(&StageLabel {
                stage: stage.name(),
            })
            .observe(seconds);
    }
}
