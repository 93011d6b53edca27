//! gigas-history: the sequencer's chain history. A block is made durable by appending it to
//! the **block log** (`gigas-blocklog`: checksummed, append-only segment files, one
//! sequential `fdatasync`); an **indexer** thread then writes it, in batches, to the **index**
//! in MDBX (`signet-libmdbx`, reth's bindings), and until then reads answer for it from
//! memory.
//!
//! **Owns:** headers with their hashes and the sequencer's signatures, transactions with
//! their senders, receipts, the lookups by block hash and by transaction hash, the log index
//! behind `eth_getLogs`, each block's encoded ChangeSet for a retention window, and the old
//! value of every state key each block changed (what answers state queries at older blocks,
//! as reth's `AccountChangeSets` / `StorageChangeSets` do); the block log's record format
//! (`record.rs`), the indexer, and the order that keeps reads whole while it runs.
//!
//! **Must not:** execute anything (no EVM), hold or read current state (that is Vilmo's; the
//! history only says whether a later block changed a key and what the key held before),
//! recover senders (they come with the transactions and are stored next to them), or talk to
//! the network. ChangeSets and state keys are opaque bytes here.
//!
//! One [`History`] per directory per process (the block log and MDBX both lock it); share it
//! (it is `Send + Sync`) through an `Arc`. Its metrics ([`History::metrics`]) register under
//! `gigas_history_*`.
//!
//! # Why a log in front of the index
//!
//! Two of the index's tables are keyed at random: the transaction-hash lookup and the state
//! history by state key. Every block dirties pages all over them, and a durable MDBX commit
//! writes each dirtied page and its branch pages: measured at 186 ms of a 226 ms block of
//! 1,746 transactions on a 2-vCPU EPYC VM, which capped the sequencer at 7,000 tx/s there. The
//! durable path now writes only sequential bytes; the index is built behind it, in batches
//! (after reth's static files and ETL-sorted hash indices, and geth's freezer).
//!
//! Measured with `gigas-bench ramp` on a 2-vCPU Xeon VM (1M accounts, Zipf transfers, 250 ms
//! blocks), old and new node binaries on the same machine: the history in one durable MDBX
//! transaction per group of blocks sustained **14,000 tx/s**, with `commit_history` 79 % of
//! block time and MDBX's commit 83 % of that. Log first, index behind, block by block:
//! 18,000 tx/s, now bound by CPU, of which the indexer took 0.5 cores (a batch of one block
//! dirties a page per row of the random-keyed tables). Batches of
//! [`HistoryOptions::index_min_blocks`] blocks (24, or 5 s) with the random-keyed rows of
//! the whole batch written in key order: **23,000 tx/s**, the indexer on 0.18 cores, and the
//! durable path (encode, append, `fdatasync`) 93 ms mean per group of 5,600-transaction
//! blocks.
//!
//! # Durability and the order of reads
//!
//! [`History::commit_blocks`] returns after the block log's `fdatasync`: a SIGKILL or power
//! loss keeps the blocks. It then adds them to the **unindexed** blocks in memory (at most
//! [`HistoryOptions::max_unindexed_blocks`]; a commit waits for the indexer beyond that). The
//! indexer writes them to the index in one durable MDBX transaction per batch, *then* drops
//! them from memory, *then* removes the log segments the index now covers. So every
//! committed block is, at every instant, in memory or in the index (or both), and on disk in
//! the log or in the index. A read takes the unindexed blocks first and asks the index second,
//! so a batch indexed in between is seen in one or the other.
//!
//! [`History::open`] opens the index, then the log (cutting a torn tail: records appended
//! after the last sync were never acknowledged), and indexes every block the log holds beyond
//! the index's head before it returns: after a crash, at most
//! [`HistoryOptions::max_unindexed_blocks`] blocks. A log that does not join the index (a gap
//! between them, or a log that ends before the index) is refused as
//! [`HistoryError::Inconsistent`]. An existing history without a log simply starts one.
//!
//! The indexer refuses what the index refuses (a transaction or block hash seen before); the
//! blocks stay durable in the log, every later commit fails with
//! [`HistoryError::IndexerFailed`], and the next open tries again.
//!
//! # Tables
//!
//! Declared once, in [`tables`] ([`Table::ALL`]), as reth declares its tables. Integers are
//! big-endian (byte order is numeric order), `‖` is concatenation.
//!
//! | table | key | value | dup |
//! |---|---|---|---|
//! | `Headers` | block: u64 | hash (32) ‖ signature r ‖ s ‖ v (65) ‖ header (RLP) | |
//! | `HeaderNumbers` | block hash (32) | block: u64 | |
//! | `Transactions` | block: u64 ‖ index: u32 | sender (20) ‖ transaction (EIP-2718) | |
//! | `TransactionLocations` | transaction hash (32) | block: u64 ‖ index: u32 | |
//! | `Receipts` | block: u64 ‖ index: u32 | receipt (EIP-2718, with its bloom) | |
//! | `LogBlocks` | block: u64 | logs in the block: u32 (blocks with logs only) | |
//! | `LogAddresses` | address (20) | block: u64 | DUPSORT, DUPFIXED |
//! | `LogTopics` | position: u8 ‖ topic (32) | block: u64 | DUPSORT, DUPFIXED |
//! | `ChangeSets` | block: u64 | ChangeSet bytes (window) | |
//! | `StateHistory` | key length: u8 ‖ state key ‖ block: u64 | 0 (absent) or 1 ‖ value (window) | |
//! | `StateHistoryKeys` | block: u64 | key length: u8 ‖ state key (window) | DUPSORT |
//! | `Meta` | name | `schema_version`: u32, `state_pruned_below`: u64 | |
//!
//! Encodings are alloy's: the header's RLP, transactions' and receipts' EIP-2718 bytes. A
//! transaction row starts with its sender so that reads never recover a signature; its hash
//! is not stored (decoding computes it, and the log path hashes the row's bytes). Point reads
//! are one B-tree seek each: a header, a block number, a transaction location, a transaction
//! (location, then row: two seeks, no block body), a ChangeSet. A block's transactions or
//! receipts are one seek and a scan of adjacent rows.
//!
//! # State history and its window
//!
//! `StateHistory` holds, for each key a block `b` changed, the key's value before `b`, under
//! `len ‖ key ‖ b`. The length byte makes the key encoding prefix-free, so one key's rows are
//! contiguous and sorted by block even when another key begins with its bytes. The value of
//! `key` at the end of block `n` is then one seek ([`History::value_at`]): the first row at or
//! after `len ‖ key ‖ n+1`. If it belongs to `key`, the block it names is the first later
//! block that changed `key`, and its old value is the answer ([`HistoricValue::Changed`]);
//! otherwise no later block changed `key` and current state answers
//! ([`HistoricValue::Unchanged`]).
//!
//! With a window of `W = state_history_blocks` and head `h`, a commit deletes the ChangeSets
//! and state history of blocks `<= h - W`, so [`History::value_at`] answers every block from
//! `h - W` ([`History::oldest_state_block`]) to the head and older blocks get
//! [`HistoricValue::Pruned`]; `changeset(n)` is kept for the last `W` blocks (the head's
//! always, which crash recovery re-applies). Pruning reads the block's key list in
//! `StateHistoryKeys` and deletes exactly those rows: no scan. The watermark lives in `Meta`,
//! so a larger window after a restart does not pretend to answer pruned blocks, and a smaller
//! one is caught up at most `prune_blocks_per_commit` blocks per indexed block so that no single
//! write transaction balloons. Headers, transactions, receipts and the log index are kept for
//! ever.
//!
//! # Log index
//!
//! Each block adds one `LogAddresses` row per distinct emitting address, one `LogTopics` row
//! per distinct (position, topic) among positions 0 to 3, and a `LogBlocks` row when it has
//! logs. [`History::logs`] intersects the filter's groups (addresses OR-ed; each constrained
//! topic position OR-ed) by leapfrogging seeks over those sorted block lists, reads the
//! receipts of only the blocks every group names, and filters their logs exactly. A query
//! for a rare address or topic over a long range reads as many receipts as there are matching
//! blocks (tests/logs.rs counts them through [`HistoryMetrics::receipt_blocks_read`]); a query
//! without addresses or topics reads the blocks that have logs, never empty ones.
//!
//! # Environment settings
//!
//! After reth's (`crates/storage/db/src/implementation/mdbx/mod.rs`), each with its reason:
//!
//! - **Sync mode `SafeNoSync`**, with a durable point every
//!   [`HistoryOptions::index_sync_period`] (`Durable`, a sync per batch, when it is zero): the
//!   block log is the durable record, so the index need not be (see below).
//! - **No readahead** (`MDBX_NORDAHEAD`): reads here are point seeks and short scans of
//!   adjacent rows; readahead would pull whole windows of unrelated pages into the page cache,
//!   which under a memory limit evicts what matters (reth measured the same; node-facts.md
//!   records a 400x slowdown for random reads under a cgroup limit with readahead on).
//! - **`write_map` off** by default ([`HistoryOptions::write_map`] turns it on). Measured with
//!   `tests/commit_cost.rs` (1,000 signed transfers per block, durable, this 2-vCPU VM): a
//!   median commit of 5.3 to 6.3 ms without it against 6.8 to 8.1 ms with it, and 5.3 against
//!   5.5 to 5.9 ms with pruning in every commit. reth turns it on for sync, whose write
//!   transactions are gigabytes; ours are about a megabyte, where writing dirty pages from
//!   heap buffers costs no more, and without it the map is read-only, so a stray write
//!   anywhere in the process faults instead of corrupting the database.
//! - **Coalesce** (`MDBX_COALESCE`): merge freed-page lists so that pruning's deletions are
//!   reused compactly, as reth does. **`rp_augment_limit` 256 Ki pages**: reth's value.
//! - **Geometry:** upper bound [`HistoryOptions::max_size_bytes`] (default 1 TiB: reth's 8 TB
//!   reserves address space that several nodes in one test process would exhaust, and 1 TiB is
//!   weeks of history at full load), **growth step** [`HistoryOptions::growth_step_bytes`]
//!   (default 1 GiB: a grow remaps the file, so steps are large, while the file stays sparse
//!   so a step costs disk only as pages are written; reth uses 4 GB at mainnet scale), no
//!   shrinking (a history only grows, and shrinking remaps), the OS page size.
//! - **`max_dbs` 32** (12 tables and headroom; MDBX searches the slots linearly, so reth's 256
//!   buys nothing here). **`max_readers`** [`HistoryOptions::max_readers`] (default 4,096):
//!   each read call holds a reader slot for its duration, so this bounds concurrent reads
//!   across RPC and blocking threads; a slot is 64 bytes of lock file.
//!
//! # The index's own durability
//!
//! An index batch is one MDBX write transaction: a crash during it leaves the previous batch,
//! never half a block. Batches are committed without a sync (`SafeNoSync`), and every
//! [`HistoryOptions::index_sync_period`] the indexer makes a durable point (`mdbx_env_sync`:
//! data pages, then a steady meta page). A killed process loses no committed batch (the page
//! cache keeps it); a power loss takes the index back to its last durable point. Either way the
//! block log still holds every block after that point: its segments are removed only through a
//! durable point, and open makes one before it removes any. So the index never holds a block
//! the log lost, and open indexes again whatever the log holds beyond the index.
//!
//! Why not sync every batch: over an ERC-20 load at 15,000 tx/s, a durable commit of 24
//! blocks took about 1 s, writing and syncing pages of the random-keyed tables that the next
//! batches dirty again, and its writeback made the block log's and Vilmo's syncs on the
//! durable path slower. `tests/chain.rs` kills a writer process at random points and checks
//! that every block it had reported survives and reads back whole.
//!
//! # Measured cost of the index
//!
//! A block of 1,000 signed EIP-1559 transfers with receipts, a 186 KB ChangeSet and 2,001
//! state keys: about 6 ms per durable commit and 1.2 MB of table pages while its ChangeSet is
//! in the window (0.76 MB after). Per transaction that is about 217 bytes in `Transactions`
//! (sender included), 79 in `TransactionLocations` and 317 in `Receipts`, of which the
//! stored bloom is 256: recomputing blooms on read instead would be the first saving.

mod codec;
mod error;
mod history;
mod logs;
mod metrics;
mod recent;
mod record;
mod store;
pub mod tables;
mod types;

pub use codec::MAX_STATE_KEY_LEN;
pub use error::HistoryError;
pub use history::{History, IndexHold, LOG_DIR};
pub use metrics::{CommitPhase, HistoryMetrics, IndexPhase, PhaseLabel};
pub use store::TableStats;
pub use tables::{Dup, Table};
pub use types::{
    BlockRecord, HistoricValue, HistoryOptions, IndexedLog, LogMatcher, LogQuery, SealedHeader,
    TxLocation,
};

#[cfg(test)]
mod tests {
    use super::Table;

    #[test]
    fn the_crate_documentation_lists_every_table() {
        assert_eq!(
            gigas_mdbx::check_table_doc::<Table>(include_str!("lib.rs")),
            Ok(())
        );
    }

    #[test]
    fn history_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<super::History>();
    }
}
