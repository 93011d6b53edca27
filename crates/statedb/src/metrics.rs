//! The state database's metrics as `prometheus-client` types, for the node to register.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// The state database's metrics. Cloning shares the underlying values.
#[derive(Debug, Clone)]
pub struct StateDbMetrics {
    /// Blocks applied into write transactions (committed or not).
    pub blocks_applied: Counter,
    /// Account and slot changes applied.
    pub state_changes_applied: Counter,
    /// Group commits.
    pub groups_committed: Counter,
    /// Groups discarded (an error in a group, or a writer dropped with an open group).
    pub groups_discarded: Counter,
    /// Blocks whose computed state root was not their header's (refused).
    pub root_mismatches: Counter,
    /// Seconds per block to write its changes into the open transaction.
    pub apply_seconds: Histogram,
    /// Seconds per group from its first write to the start of its commit.
    pub write_txn_seconds: Histogram,
    /// Seconds per flush of the buffered hashed-table writes.
    pub hashed_flush_seconds: Histogram,
    /// Seconds per commit (until durable under `Durability::Durable`).
    pub commit_seconds: Histogram,
    /// Durable points made by syncing commits that were not synced when made.
    pub syncs: Counter,
    /// Seconds per such sync on the writer's thread (after a writeback, what is left of it).
    pub sync_seconds: Histogram,
    /// Seconds per durable point's writeback on its own thread, while the writer applies on.
    pub writeback_seconds: Histogram,
    /// The last block that survives a power loss.
    pub durable_block: Gauge,
    /// Seconds per state root (trie update).
    pub trie_update_seconds: Histogram,
    /// Leaves hashed by roots.
    pub trie_leaves_hashed: Counter,
    /// Trie rebuilds from the hashed tables.
    pub trie_rebuilds: Counter,
    /// The block of the last computed root.
    pub last_root_block: Gauge,
    /// Trie node seeks the writer's cache answered.
    pub trie_cache_hits: Counter,
    /// Trie node seeks that went to MDBX.
    pub trie_cache_misses: Counter,
    /// Cache entries dropped to keep within its budget.
    pub trie_cache_evicted: Counter,
    /// Bytes the trie cache holds (its estimate of its entries' sizes).
    pub trie_cache_bytes: Gauge,
    /// Entries the trie cache holds.
    pub trie_cache_entries: Gauge,
    /// Bytes of the data file up to its last used page.
    pub used_bytes: Gauge,
    /// Bytes of the memory map (the file's current size).
    pub map_bytes: Gauge,
    /// Branch pages over all tables.
    pub branch_pages: Gauge,
    /// Leaf pages over all tables.
    pub leaf_pages: Gauge,
    /// Overflow pages over all tables.
    pub overflow_pages: Gauge,
}

impl Default for StateDbMetrics {
    fn default() -> Self {
        // 20 us to about 2 minutes in steps of 1.5x.
        let seconds = || Histogram::new(exponential_buckets(20e-6, 1.5, 40));
        Self {
            blocks_applied: Counter::default(),
            state_changes_applied: Counter::default(),
            groups_committed: Counter::default(),
            groups_discarded: Counter::default(),
            root_mismatches: Counter::default(),
            apply_seconds: seconds(),
            write_txn_seconds: seconds(),
            hashed_flush_seconds: seconds(),
            commit_seconds: seconds(),
            syncs: Counter::default(),
            sync_seconds: seconds(),
            writeback_seconds: seconds(),
            durable_block: Gauge::default(),
            trie_update_seconds: seconds(),
            trie_leaves_hashed: Counter::default(),
            trie_rebuilds: Counter::default(),
            last_root_block: Gauge::default(),
            trie_cache_hits: Counter::default(),
            trie_cache_misses: Counter::default(),
            trie_cache_evicted: Counter::default(),
            trie_cache_bytes: Gauge::default(),
            trie_cache_entries: Gauge::default(),
            used_bytes: Gauge::default(),
            map_bytes: Gauge::default(),
            branch_pages: Gauge::default(),
            leaf_pages: Gauge::default(),
            overflow_pages: Gauge::default(),
        }
    }
}

impl StateDbMetrics {
    /// Registers every metric under `gigas_statedb_*`.
    pub fn register(&self, registry: &mut Registry) {
        let sub = registry.sub_registry_with_prefix("gigas_statedb");
        sub.register(
            "blocks_applied",
            "Blocks applied into write transactions",
            self.blocks_applied.clone(),
        );
        sub.register(
            "state_changes_applied",
            "Account and slot changes applied",
            self.state_changes_applied.clone(),
        );
        sub.register(
            "syncs",
            "Durable points made by syncing commits that were not synced when made",
            self.syncs.clone(),
        );
        sub.register(
            "sync_seconds",
            "Seconds per sync of unsynced commits on the writer's thread",
            self.sync_seconds.clone(),
        );
        sub.register(
            "writeback_seconds",
            "Seconds per durable point's writeback on its own thread",
            self.writeback_seconds.clone(),
        );
        sub.register(
            "durable_block",
            "The last block that survives a power loss",
            self.durable_block.clone(),
        );
        sub.register(
            "groups_committed",
            "Group commits",
            self.groups_committed.clone(),
        );
        sub.register(
            "groups_discarded",
            "Groups discarded before their commit",
            self.groups_discarded.clone(),
        );
        sub.register(
            "root_mismatches",
            "Blocks refused because the state root computed after them was not their header's",
            self.root_mismatches.clone(),
        );
        sub.register(
            "apply_seconds",
            "Seconds per block to write its changes into the open transaction",
            self.apply_seconds.clone(),
        );
        sub.register(
            "write_txn_seconds",
            "Seconds per group from its first write to its commit",
            self.write_txn_seconds.clone(),
        );
        sub.register(
            "hashed_flush_seconds",
            "Seconds per flush of buffered hashed-table writes",
            self.hashed_flush_seconds.clone(),
        );
        sub.register(
            "commit_seconds",
            "Seconds per group commit, until durable",
            self.commit_seconds.clone(),
        );
        sub.register(
            "trie_update_seconds",
            "Seconds per state root computation",
            self.trie_update_seconds.clone(),
        );
        sub.register(
            "trie_leaves_hashed",
            "Trie leaves hashed by root computations",
            self.trie_leaves_hashed.clone(),
        );
        sub.register(
            "trie_rebuilds",
            "State trie rebuilds from the hashed tables",
            self.trie_rebuilds.clone(),
        );
        sub.register(
            "last_root_block",
            "Block of the last computed state root",
            self.last_root_block.clone(),
        );
        sub.register(
            "trie_cache_hits",
            "Trie node seeks answered by the writer's in-memory cache",
            self.trie_cache_hits.clone(),
        );
        sub.register(
            "trie_cache_misses",
            "Trie node seeks that searched MDBX",
            self.trie_cache_misses.clone(),
        );
        sub.register(
            "trie_cache_evicted",
            "Trie cache entries dropped to keep within its budget",
            self.trie_cache_evicted.clone(),
        );
        sub.register(
            "trie_cache_bytes",
            "Bytes the trie cache holds (estimated from its entries)",
            self.trie_cache_bytes.clone(),
        );
        sub.register(
            "trie_cache_entries",
            "Entries the trie cache holds",
            self.trie_cache_entries.clone(),
        );
        sub.register(
            "used_bytes",
            "Bytes of the MDBX data file up to its last used page",
            self.used_bytes.clone(),
        );
        sub.register(
            "map_bytes",
            "Bytes of the MDBX memory map",
            self.map_bytes.clone(),
        );
        sub.register(
            "branch_pages",
            "MDBX branch pages over all tables",
            self.branch_pages.clone(),
        );
        sub.register(
            "leaf_pages",
            "MDBX leaf pages over all tables",
            self.leaf_pages.clone(),
        );
        sub.register(
            "overflow_pages",
            "MDBX overflow pages over all tables",
            self.overflow_pages.clone(),
        );
    }
}
