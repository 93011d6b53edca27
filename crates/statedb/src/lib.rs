//! gigas-statedb: the full node's state in MDBX (`signet-libmdbx`, reth's bindings), with
//! reth's table layout less its tables by address (see [`tables`]), a writer that applies verified blocks in groups, the Ethereum state
//! root kept incrementally with `alloy-trie`, and `eth_getProof` proofs.
//!
//! **Owns:** the current state (accounts and storage by hash, code), the state
//! trie's branch nodes, the state-diff enumeration index ([`gigas_statediff::KeyIndex`]), the
//! applied head (number, hash, chained state checksum, the lattice hash of the state commitment) and the headers of applied blocks with
//! the MPT root computed for them. Reads: [`StateView`] (a snapshot of the last commit) and
//! [`StateWriter`] (the open group), both implementing the diff decoder's
//! [`gigas_statediff::PriorState`] and [`gigas_statediff::KeyIndex`] and revm's
//! `DatabaseRef`; [`AheadState`] (the last commit with the blocks a follower's decode thread
//! decoded ahead of the writer held in memory) implements the decoder's two.
//!
//! **Must not:** verify anything (signatures and the checksum chain are checked by
//! `gigas_statediff::verify_and_decode` before a block reaches [`StateWriter::apply`]),
//! execute, fetch, or keep old state (no per-block change sets: the full node answers at its
//! head only). It trusts what it is given to apply and refuses only what does not follow its
//! tip.
//!
//! # Tables
//!
//! Declared once, in [`tables`] ([`Table::ALL`]) and `gigas_triedb::tables`, after reth's
//! (`crates/storage/db-api/src/tables/mod.rs`). Integers in keys are big-endian (byte order is
//! numeric order), `‖` is concatenation.
//!
//! | table | key | value | dup |
//! |---|---|---|---|
//! | `Bytecodes` | code hash (32) | code | |
//! | `IndexedKeys` | index: u64 | address (20) or address ‖ slot (52) | |
//! | `KeyIndices` | address (20) or address ‖ slot (52) | index: u64 | |
//! | `Headers` | block: u64 | hash ‖ flags ‖ [signature (65)] ‖ [MPT root (32)] ‖ [state commitment (32 ‖ 65)] ‖ header RLP | |
//! | `HeaderNumbers` | hash (32) | block: u64 | |
//! | `Meta` | name | `schema_version`, `head`, `last_root`, `trie`, `index_len`, `lattice` (the state commitment's sum at the head, when kept), `bootstrap` (a snapshot being written: its block, manifest hash and chunks done) | |
//!
//! The state itself, its hashed accounts and slots and the trie's branch nodes, is in the
//! trie tables of `gigas_triedb` (`HashedAccounts`, `HashedStorages`, `AccountsTrie`,
//! `StoragesTrie`, the changed-key tables and `TrieMeta`), opened in the same environment:
//! the sequencer keeps the same tables in a store of its own.
//!
//! # Writing: groups
//!
//! [`StateWriter::apply`] writes one verified block into the writer's open MDBX write
//! transaction; [`StateWriter::commit`] commits every block applied since the last commit at
//! once, `Meta` naming the last. The caller bounds a group by count and by time
//! ([`WriterOptions`], [`StateWriter::should_commit`]). A crash loses the open group and
//! nothing else: the head in `Meta` is the last commit's, and the follower replays from it.
//! MDBX lets a write transaction read its own writes, so the writer is itself the prior state
//! and key index the next block decodes against, the open group included.
//!
//! By default ([`HashedWrites::SortedPerGroup`]) a group's state writes are collected in
//! memory, deduplicated (a hot account changed by many blocks is written once) and written
//! in key order at the commit (or before a root inside the transaction); the writer's reads
//! (the next block's prior values) look in them before the transaction. Measured (`tests/settings.rs`, Zipf transfers,
//! batched groups, 100k and 300k accounts): 416k to 543k state changes per second sorted
//! against 323k to 351k in ChangeSet order, so sorting pays.
//!
//! With [`WriterOptions`]'s `commit_thread`, a group's commit runs on a thread of its own
//! (`persist`): [`StateWriter::start_commit`] hands the group over whole and returns, and the
//! writer, which then holds no write transaction, reads the last commit through a read
//! transaction with a copy of the committing group's changes over it until the commit lands
//! ([`StateWriter::committed_tip`] moves then). At most one commit is under way; a failed
//! one discards both groups, back to the last commit that landed.
//!
//! # State root
//!
//! Incremental, as reth's: the keys changed since the last root (prefix sets) name the paths
//! to recompute; a walk over the stored branch nodes feeds alloy-trie's `HashBuilder` the
//! stored hash of every unchanged subtrie and the leaves of changed ones, and stores the
//! branch nodes it returns (see `gigas_trie::walk`). Changed storage tries first, then the account
//! trie. `root_every: K` computes a root after every block whose number is a multiple of K
//! (the changed keys of blocks in between are kept in `TrieChanged*` across commits); K = 0
//! turns the trie off: nothing is tracked, `Meta` marks the trie stale, and the next root
//! rebuilds it from the hashed tables (a walk with no stored nodes, which is how a genesis
//! computes its root too; a rebuild writes branch nodes as it goes, so it holds at most 64 Ki
//! of them). Proofs ([`StateView::proof`]) are the same walk with the targets added to the
//! changed keys and alloy-trie's proof retainer on.
//!
//! What a root costs: every changed account re-reads and re-hashes the sibling leaves of its
//! bottom branch (stored nodes keep the hashes of branch children only, as reth's do) and
//! rewrites the stored nodes on its path. Storing leaf hashes with their branch too (as
//! Gravity Reth does) was measured and dropped: over 10M accounts it wrote 21 % more pages
//! per block (every branch with leaf children becomes a stored node) and applied live 19 %
//! slower; what a root costs here is MDBX's B-tree searches and page copies, not the leaves'
//! keccak (5 % of a profile). Keccak is alloy-primitives' `asm-keccak`, as reth's.
//!
//! The writer can keep stored nodes in memory across roots, each with its leaf children's
//! hashes as the last walk that entered it knew them (`gigas_triedb::cache`, [`WriterOptions`]'s
//! `trie_cache_bytes`, off by default): a root then seeks most nodes in a hash map and
//! feeds unchanged sibling leaves to the hash builder by their kept hash. It describes the
//! trie as the writer sees it (the last commit with the open group over it), so layered
//! roots use it on every thread. Over 10M accounts it answered 84 % of seeks and skipped
//! 47 % of the leaves, and applied 9 to 11 % slower (the figures are on the field): its
//! upkeep costs more than the hot B-tree searches and hashes it saves.
//!
//! The writer can also hold the account trie itself in memory across layered roots
//! (`gigas_trie::sparse`, [`WriterOptions`]'s `sparse_trie_bytes`): sixteen parts, one per first
//! nibble, each changed account set in its part on one of the root's threads and only the
//! changed paths re-hashed, a depth at a time so that a depth's encodings are hashed
//! together (eight Keccak states side by side where the CPU has AVX-512,
//! `gigas_primitives::keccak`); a subtrie it never saw is loaded from the stored nodes the first
//! time a key enters it (its stored branch node, and the leaves of its other children, which
//! it hashes once). It keeps the branch nodes it changes until the writer drains them, once
//! per group at the commit (or at an idle write, or before a root that walks the stored trie),
//! instead of putting every root's nodes into the layer; past its budget, the subtries no
//! root changed since the last drain fold back into their hashes.
//!
//! Roots are *layered* (`gigas_triedb::layer`,
//! [`WriterOptions`]'s `layered_roots` and `root_threads`): the open group's hashed leaves
//! and the branch nodes its roots change stay in memory and are written once, sorted, at the
//! group's commit; a root reads the last commit through read transactions of its own with
//! them laid over it, so it runs off the write transaction's thread: changed storage tries
//! on every core, then the account trie split into its sixteen subtries under the root
//! node, the root node assembled from their hashes. Over 10M accounts (Zipf transfers, a
//! commit every 4 blocks, 2 cores) the trie's share of the time went from 16.9 s to 6.7 s
//! of a run and the apply rate from 19,141 to 21,860 changes/s: the commit's writeback
//! (the same 80 MB per block either way) is what is left.
//!
//! # Environment settings
//!
//! [`StateDbOptions`], after reth's (`crates/storage/db/src/implementation/mdbx/mod.rs`).
//! `tests/settings.rs` (`#[ignore]`, command in its header) measures the writer's modes and
//! the write map over a genesis of N accounts and Zipf transfers; the figures below are from
//! short runs on this 2-vCPU VM while another benchmark ran, so they are indicative, and the
//! memory-limited measurements (readahead, page cache) belong to the next issue:
//!
//! - **No readahead** (`MDBX_NORDAHEAD`, [`StateDbOptions::readahead`] off): state reads are
//!   point lookups at random keys (keccak order, or addresses), and readahead pulls in pages
//!   nobody asked for, which under a memory limit evicts the ones that matter. reth turns it
//!   off; here a 5.5 GB MDBX state under a 2 GiB cgroup ran uniform updates over 400 times
//!   slower with it on (node-facts.md).
//! - **Write map off** ([`StateDbOptions::write_map`]): with it, a transaction changes pages
//!   in the file mapping itself; without it, in heap copies that the commit writes with
//!   `pwrite`. On small states it was faster (batched 416k to 543k changes/s against 425k
//!   to 428k). Over 10M accounts, live, a commit every 32 blocks, alternating in one run
//!   (`gigas-bench fullnode --live-group 32 --write-map true,false --runs 2`): 40,354 and
//!   39,991 changes/s with it, 51,396 and 52,338 without, and 31 CPU seconds against 19.
//!   The difference is the kernel: each durable point writes back pages that are mapped
//!   writable, so it write-protects every one (a TLB flush on every core, an IPI that costs
//!   a VM exit), and the next write to each faults again. Without the map the dirty pages
//!   are heap until the commit: [`StateDbOptions::max_dirty_bytes`] bounds them (MDBX
//!   writes some early past it).
//! - **Durability** ([`Durability`]): `Durable` syncs every commit; `Periodic` (the full
//!   node's default) leaves commits unsynced and makes a durable point per
//!   [`SyncSchedule`], so that a power loss rolls back to it and a process kill loses
//!   nothing. Measured over 10M accounts, live (a commit every block), two alternating
//!   rounds: 14,560 changes/s against 13,541. Only 7.5 % more: either way each commit writes
//!   about 112 MB of fresh pages (MDBX copies every changed page, and under `SafeNoSync`
//!   does not reuse pages freed since the last durable point), and the sync writes them all.
//!   A due point's writeback runs on a thread of its own (`writeback`, an `fdatasync` of the
//!   data file) while the writer applies on; the writer's next [`StateWriter::sync_if_due`]
//!   after it ended finishes the point (what was written since, the steady meta page), so
//!   only the writer ever makes a block durable ([`SyncSchedule::background`]).
//! - **Page size** ([`StateDbOptions::page_size`]): the OS page size (4 KiB) by default, as
//!   reth (which clamps it to 4..64 KiB): point reads touch one leaf page per level, and a
//!   smaller page is less to fault in per random read. Smaller than the OS page writes
//!   *more*, measured over 10M accounts (`gigas-bench fullnode --page-size 2048`, a commit
//!   per block): 101 MB per block against 82 MB with no root, 148 MB against 121 MB with
//!   one, at the same speed. A page copied on write lands wherever MDBX's free list has
//!   room, not beside the other copies, so each still dirties an OS page of its own, and the
//!   deeper B-tree copies more branch pages. Larger pages pay once a group of commits
//!   dirties most leaf pages anyway: [`page_size_for_memory`] (the full node's `auto`)
//!   gives 16 KiB where the state lives in memory, for a commit spent mostly on MDBX's
//!   work per dirty page (the figures are on the function).
//! - **Growth step** 1 GiB ([`StateDbOptions::growth_step_bytes`]): a grow remaps the file, so
//!   steps are large (reth: 4 GB), and the file is sparse so a step costs disk only as pages
//!   are written. **Upper bound** 1 TiB of address space (reth: 8 TB, which several nodes in
//!   one test process would exhaust). No shrinking.
//! - **Coalesce** and **`rp_augment_limit` 256 Ki pages**: reth's, so that freed pages are
//!   reused compactly. **`max_readers`** 4,096 by default: each live [`StateView`] holds one.
//!
//! # Threads
//!
//! [`StateDb`] is `Send + Sync`; share it through an `Arc`. One [`StateWriter`] at a time,
//! on one thread (it is not `Send`: MDBX binds a write transaction to its thread). Views are
//! `Send`, one per request. The writer starts its own threads and joins them before it
//! goes: roots (`gigas-root`), the commit thread (`gigas-commit`), each beginning its own
//! transactions, and a durable point's writeback.

mod ahead;
mod codec;
mod db;
mod error;
mod genesis;
mod metrics;
mod persist;
mod read;
mod rows;
mod snapshot;
pub mod tables;
mod types;
mod view;
mod warm;
mod writeback;
mod writer;

pub use ahead::{AheadState, AheadStats};
pub use db::StateDb;
pub use error::StateDbError;
pub use gigas_trie::SparseTrieStats;
pub use gigas_triedb::cache::TrieCacheStats;
pub use gigas_triedb::overlay::StateOverlay;
pub use gigas_triedb::{TrieDbError, TrieTable};
pub use metrics::StateDbMetrics;
pub use snapshot::{Bootstrap, BootstrapOutcome, BootstrapProgress, SnapshotEntries};
pub use tables::{Dup, Table, SCHEMA_VERSION};
pub use types::{
    page_size_for_memory, sparse_trie_budget, AccountProof, AnyTable, BlockToApply, CommitInfo,
    Durability, GenesisBlock, GenesisEntry, GenesisOutcome, HashedWrites, RootInfo, StateDbOptions,
    StorageProof, StoredHeader, SyncSchedule, TableStats, WriterOptions, DEFAULT_MAX_DIRTY_BYTES,
    DEFAULT_MAX_GROUP_BYTES, DEFAULT_ROOT_SPLIT_MIN_ACCOUNTS, DEFAULT_SPARSE_TRIE_BYTES,
    DEFAULT_TRIE_CACHE_BYTES, LARGE_PAGE_BYTES, LARGE_PAGE_MIN_MEMORY, MIN_SPARSE_TRIE_BYTES,
};
pub use view::StateView;
pub use warm::Warmed;
pub use writer::StateWriter;

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
    fn the_database_is_send_and_sync_and_views_are_send() {
        fn send_sync<T: Send + Sync>() {}
        fn send<T: Send>() {}
        send_sync::<super::StateDb>();
        send::<super::StateView<'static>>();
    }
}
