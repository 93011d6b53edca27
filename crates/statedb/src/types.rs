//! What goes in and comes out of the state database.

use std::time::Duration;

use alloy_consensus::Header;
use alloy_primitives::{Address, Bytes, Signature, B256, U256};
use gigas_primitives::ChangeSet;
use gigas_statediff::{HashedKeys, StateCommitment, StateKey, VerifiedDiff};

/// How often MDBX syncs a commit to the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Data pages, then the meta page that makes them current, are synced before a commit
    /// returns: a committed group survives a power loss. The default, and what "applied"
    /// means to the full node.
    #[default]
    Durable,
    /// The meta page is not synced: a power loss (never a process kill) may undo the last
    /// commits, never corrupt the file.
    NoMetaSync,
    /// Nothing is synced at commit; MDBX keeps the last synced ("steady") commit usable, so a
    /// power loss falls back to it and a process kill loses nothing (the page cache keeps
    /// the data). Never synced until the database closes: for measurements.
    SafeNoSync,
    /// Commits as [`Durability::SafeNoSync`] (a process kill loses nothing), and the writer
    /// makes a durable point (`mdbx_env_sync`: data pages, then a steady meta page) once the
    /// schedule's period has passed or its bytes were written since the last one. A power
    /// loss rolls the database back to the last durable point, consistent: MDBX does not
    /// reuse a page the steady snapshot needs until the next one. For a follower, whose
    /// source of truth is the diff archive: it fetches the lost blocks again.
    Periodic(SyncSchedule),
}

impl Durability {
    /// Whether every commit is durable when it returns.
    pub fn every_commit(&self) -> bool {
        matches!(self, Self::Durable)
    }
}

/// When a [`Durability::Periodic`] writer makes its durable points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncSchedule {
    /// At most this long between durable points while commits come (and a commit left
    /// unsynced is synced this long after it when none follows).
    pub period: Duration,
    /// Or sooner, once commits wrote this many bytes of pages since the last durable point,
    /// which bounds what a sync must write back.
    ///
    /// Starting each commit's writeback at once instead (`sync_file_range` on a thread of
    /// the writer's, so that the disk works while the next blocks apply) was measured and
    /// dropped: over 10M accounts, live, it took a core of its own (140 CPU seconds against
    /// 58 per run), pages written back were faulted writable again, and applying was 13 %
    /// slower than leaving the pages for the durable point.
    pub bytes: u64,
    /// Write a due durable point's pages back on a thread of the writer's (an `fdatasync`
    /// of the data file) while the writer applies on, and finish it (what was written since,
    /// then the steady meta page) on the writer's thread at its first call after that ends:
    /// the commit after the one that was due, or the next block through
    /// [`crate::StateWriter::sync_if_due`]. `false`: the writer syncs when due, standing still
    /// meanwhile. Either way a block is durable only once the writer's own sync returned.
    /// Over 10M accounts (a commit every 32 blocks) it cut a follower's lag p99 from 18-33
    /// blocks to 5 and made catching up about 10 % slower.
    pub background: bool,
}

impl Default for SyncSchedule {
    fn default() -> Self {
        Self {
            period: Duration::from_secs(1),
            bytes: 256 << 20,
            background: true,
        }
    }
}

/// How [`crate::StateDb`] opens its MDBX environment. Each setting is explained in the crate
/// documentation with its measurement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateDbOptions {
    /// The largest the data file may grow, in bytes. MDBX reserves this much address space
    /// (not memory, not disk) at open.
    pub max_size_bytes: usize,
    /// How much the data file grows at a time, in bytes.
    pub growth_step_bytes: usize,
    /// MDBX page size in bytes (a power of two, 256 to 65536); `None` takes the OS page size.
    pub page_size: Option<usize>,
    /// Open with `MDBX_WRITEMAP`: write transactions change pages in the file mapping itself
    /// instead of in heap copies (off by default; see the crate documentation).
    pub write_map: bool,
    /// Most bytes of dirty pages a write transaction keeps in memory before MDBX writes some
    /// to the file early (`MDBX_opt_txn_dp_limit`, rounded down to pages). Without the write
    /// map they are heap, and a commit over 10M accounts dirties about 400 MB of pages.
    pub max_dirty_bytes: u64,
    /// Let the kernel read ahead around each page fault (off: `MDBX_NORDAHEAD`).
    pub readahead: bool,
    /// Sync mode of commits.
    pub durability: Durability,
    /// Reader slots: concurrent read views across threads.
    pub max_readers: u64,
}

/// [`StateDbOptions::max_dirty_bytes`] by default.
pub const DEFAULT_MAX_DIRTY_BYTES: u64 = 256 << 20;

impl Default for StateDbOptions {
    fn default() -> Self {
        Self {
            max_size_bytes: 1 << 40,
            growth_step_bytes: 1 << 30,
            page_size: None,
            write_map: false,
            max_dirty_bytes: DEFAULT_MAX_DIRTY_BYTES,
            readahead: false,
            durability: Durability::Durable,
            max_readers: 4096,
        }
    }
}

/// In which order a group's writes to the hashed tables reach MDBX.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HashedWrites {
    /// Collected over the whole group, deduplicated (a key changed by several blocks is
    /// written once) and written in key order before a root or the commit.
    #[default]
    SortedPerGroup,
    /// Written as each block is applied, in the ChangeSet's order (by address, which is
    /// random in keccak order). Kept to measure what sorting buys.
    ChangeSetOrder,
}

/// How a [`crate::StateWriter`] groups blocks and keeps the root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterOptions {
    /// Compute the MPT root after every block whose number is a multiple of this; 0 turns
    /// the trie off (the next root then rebuilds it from the hashed tables).
    pub root_every: u64,
    /// Refuse a block whose computed root is not its header's `stateRoot`
    /// ([`crate::StateDbError::StateRootMismatch`], the open group discarded). Every root the
    /// writer computes is checked: with `root_every` 1, every block. Off only for callers
    /// whose headers carry something else (tests of the store's own mechanics).
    pub verify_roots: bool,
    /// [`crate::StateWriter::should_commit`] once the open group holds this many blocks.
    pub max_group_blocks: u64,
    /// [`crate::StateWriter::should_commit`] once the open group's first block was applied
    /// this long ago.
    pub max_group_age: Duration,
    /// [`crate::StateWriter::should_commit`] once the open group's changes held in memory
    /// (state and trie nodes, [`crate::StateWriter::group_bytes`]) reach this many bytes.
    pub max_group_bytes: u64,
    /// Order of the hashed tables' writes.
    pub hashed_writes: HashedWrites,
    /// Bytes of stored trie nodes (with their leaf children's hashes) the writer keeps in
    /// memory across roots, so that a root finds the nodes recent ones used without
    /// searching MDBX and the sibling leaves of a changed key without reading and hashing
    /// them; the least recently used go beyond it. 0 (the default) turns the cache off.
    /// Layered roots use it on every thread (the account trie's part in a shard per first
    /// nibble), as roots inside the write transaction do.
    ///
    /// Measured over 10M accounts (`gigas-bench fullnode --trie-cache 0,1GiB`, Zipf
    /// transfers, live, a commit every 128 blocks, layered roots on 2 cores, 146 blocks after
    /// 94 of warm-up): it held 224 MiB, answered 84.5 % of node seeks and took 2.40M of
    /// 5.06M leaves from kept hashes, and applied 48,181 and 49,098 changes/s against
    /// 53,912 and 54,994 without, with 2.3 CPU seconds more. Its bookkeeping (a hash-map
    /// lookup and clone per seek, every changed path's answers dropped and put back after
    /// each root) costs more than the hot B-tree searches and sibling-leaf hashes it saves.
    /// (In the transaction, before layered roots: 7 % slower with a commit per 64 blocks.)
    pub trie_cache_bytes: usize,
    /// Bytes of the account trie the writer keeps in memory across layered roots, with
    /// every loaded node's encoding (the sparse trie, [`gigas_trie::sparse`]): a
    /// root then sets each changed account in it and re-hashes only the changed paths,
    /// instead of walking the stored nodes and re-reading every changed account's sibling
    /// leaves. The least recently changed subtries are folded back into hashes beyond it.
    /// 0 turns it off (roots walk the stored trie). Used by layered roots only.
    ///
    /// Its branch nodes stay in it until the writer drains them: once per group at the
    /// commit (or an idle write, or before a root that walks the stored trie), so a node
    /// every root of a group changes is stored once instead of going into the layer at
    /// every root. Measured over 10M accounts (`gigas-bench fullnode --sparse-trie 0,2GiB`,
    /// Zipf transfers, live, a commit every 128 blocks, 2 cores, 146 blocks after 94 of
    /// warm-up): 72,703 and 73,706 changes/s against 55,876 and 62,681 without.
    pub sparse_trie_bytes: usize,
    /// Roots over the last commit with the open group's changes in memory over it, on
    /// [`WriterOptions::root_threads`] threads (the default), instead of inside the write
    /// transaction on the writer's thread. Needs [`HashedWrites::SortedPerGroup`];
    /// otherwise roots run inside the transaction.
    /// The group's hashed leaves and branch nodes are then written once, at its commit.
    pub layered_roots: bool,
    /// Threads a layered root runs on (0: one per core; at most 64): different storage
    /// tries, and the account trie's sixteen subtries, are walked at once.
    pub root_threads: usize,
    /// Fewest changed accounts for which a root splits the account trie across threads
    /// (below it the split's fixed cost, a walk per subtrie, is not worth it).
    pub root_split_min_accounts: usize,
    /// A block's root runs on its own threads while the writer takes the next blocks (the
    /// follower decodes and writes them meanwhile), instead of holding the writer until it
    /// is done. Applies to layered roots through the account trie in memory
    /// ([`WriterOptions::sparse_trie_bytes`]) with the trie cache off; other roots run
    /// where they are due. At most one root is in flight: the next due root, the commit,
    /// an idle write and [`StateWriter::finish_root`](crate::StateWriter::finish_root)
    /// wait for it, and a root therefore reaches the caller one call late
    /// ([`RootInfo::block`] names its block).
    pub overlap_roots: bool,
    /// Each group's commit runs on a thread of its own (the commit thread, see the crate's
    /// `persist` module) while the writer takes the next blocks, instead of holding the
    /// writer until MDBX's commit returns: [`crate::StateWriter::start_commit`] hands the
    /// group over, and [`crate::StateWriter::committed_tip`] moves when it lands. At most
    /// one commit is under way; a group that reaches its bounds meanwhile waits for it.
    /// The writer then holds no write transaction: it reads the last commit through a
    /// read transaction with the committing group's changes kept over it in memory (a copy
    /// of its layer, up to [`WriterOptions::max_group_bytes`] more until it lands), and
    /// writes nothing between commits ([`crate::StateWriter::flush_idle`] does nothing).
    /// Applies when roots overlap ([`WriterOptions::roots_overlap`]) and `root_every` is
    /// not 0, and once the trie follows the state (a writer opened over a stale trie
    /// rebuilds it in its own transaction and commits on its thread).
    pub commit_thread: bool,
}

/// [`WriterOptions::max_group_bytes`] by default.
pub const DEFAULT_MAX_GROUP_BYTES: u64 = 512 << 20;

/// [`WriterOptions::root_split_min_accounts`] by default.
pub const DEFAULT_ROOT_SPLIT_MIN_ACCOUNTS: usize = 256;

/// [`WriterOptions::sparse_trie_bytes`] by default: off, so that a library user chooses
/// its memory; the full node turns it on with [`sparse_trie_budget`] of its memory.
pub const DEFAULT_SPARSE_TRIE_BYTES: usize = 0;

/// A budget for the in-memory account trie ([`WriterOptions::sparse_trie_bytes`]) on a node
/// with `memory_bytes` of memory: a quarter of it, at most 2 GiB (2 GiB on an 8 GiB node),
/// and none (off: roots walk the stored trie) when that is below
/// [`MIN_SPARSE_TRIE_BYTES`]. Over 10M accounts the whole stored trie is 813 MiB (1.39M
/// nodes) and the trie held about 800 MiB after 240 blocks of Zipf transfers, so a
/// quarter of 8 GiB holds all of it, preloaded, with room to spare; past the budget it
/// folds the subtries no recent root changed back into hashes, and loads them again when a
/// key enters them. Too small a budget thrashes: with storage (the mix workload over 10M
/// accounts and 10M slots), 128 MiB folded back 903,552 nodes in 129 blocks and applied
/// 14,324 changes/s, against 38,967 with the trie off.
pub fn sparse_trie_budget(memory_bytes: u64) -> usize {
    let budget = (memory_bytes / 4).min(2 << 30);
    if budget < MIN_SPARSE_TRIE_BYTES as u64 {
        return 0;
    }
    usize::try_from(budget).unwrap_or(usize::MAX)
}

/// The MDBX page size for a new database on a node with `memory_bytes` of memory:
/// [`LARGE_PAGE_BYTES`] from [`LARGE_PAGE_MIN_MEMORY`] (where the state lives in the page
/// cache), else `None`, the OS page. The page size is fixed when the database is created;
/// an existing one keeps its own.
///
/// Why larger pages where the state fits in memory: a group of 128 blocks over 10M
/// accounts changes a few hundred thousand random keys, which dirties nearly every leaf
/// page of `HashedAccounts` whatever their size, so 16 KiB pages write about as many bytes
/// (1.9 GB a run against 1.3 GB) in a quarter as many pages. MDBX's cost per dirty page is
/// what a commit spends most on: its dirty-page list is sorted and searched on every page a
/// write transaction reads, and each page is allocated, copied and written alone. Measured
/// over 10M accounts under 8 GiB (`gigas-bench fullnode --page-size`, alternating runs):
/// live on two cores 101,067 / 100,699 changes/s against 91,561 / 94,710 with 4 KiB pages
/// (the commit from 2.8-3.0 s to 2.0 s a run), batched 149,239 / 143,967 against 127,227 /
/// 131,639; on one core 61,906 against 62,641; 32 KiB pages gave 101,320 and 64 KiB 96,141.
/// Under a small limit the other side wins: each fault reads a whole page, and the cache
/// holds fewer of the pages that matter.
pub fn page_size_for_memory(memory_bytes: u64) -> Option<usize> {
    (memory_bytes >= LARGE_PAGE_MIN_MEMORY).then_some(LARGE_PAGE_BYTES)
}

/// The page size [`page_size_for_memory`] gives a node with enough memory.
pub const LARGE_PAGE_BYTES: usize = 16 << 10;

/// The least memory for which [`page_size_for_memory`] gives [`LARGE_PAGE_BYTES`]: as for
/// the account trie in memory ([`MIN_SPARSE_TRIE_BYTES`]), a smaller node leaves its
/// memory to the page cache, where small pages keep more of what matters.
pub const LARGE_PAGE_MIN_MEMORY: u64 = 4 << 30;

/// The smallest budget [`sparse_trie_budget`] gives: a quarter of 4 GiB. A node with less
/// memory leaves it to MDBX's page cache, which the mix workload under 1 GiB needs all of.
pub const MIN_SPARSE_TRIE_BYTES: usize = 1 << 30;

/// [`WriterOptions::trie_cache_bytes`] by default: off, as measured (see the field).
pub const DEFAULT_TRIE_CACHE_BYTES: usize = 0;

impl WriterOptions {
    /// Whether the writer commits on the commit thread ([`WriterOptions::commit_thread`]),
    /// given a trie that follows the state.
    pub fn commits_in_background(&self) -> bool {
        self.commit_thread && self.roots_overlap() && self.root_every > 0
    }

    /// Whether roots run while the writer takes the next blocks
    /// ([`WriterOptions::overlap_roots`]): asked for, and layered roots through the account
    /// trie in memory with the trie cache off (the only roots that overlap).
    pub fn roots_overlap(&self) -> bool {
        self.overlap_roots
            && self.layered_roots
            && self.hashed_writes == HashedWrites::SortedPerGroup
            && self.sparse_trie_bytes > 0
            && self.trie_cache_bytes == 0
    }
}

impl Default for WriterOptions {
    fn default() -> Self {
        Self {
            root_every: 1,
            verify_roots: true,
            max_group_blocks: 1,
            max_group_age: Duration::from_millis(500),
            max_group_bytes: DEFAULT_MAX_GROUP_BYTES,
            hashed_writes: HashedWrites::SortedPerGroup,
            trie_cache_bytes: DEFAULT_TRIE_CACHE_BYTES,
            sparse_trie_bytes: DEFAULT_SPARSE_TRIE_BYTES,
            layered_roots: true,
            root_threads: 0,
            root_split_min_accounts: DEFAULT_ROOT_SPLIT_MIN_ACCOUNTS,
            overlap_roots: false,
            commit_thread: false,
        }
    }
}

/// A header as the database keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredHeader {
    /// The header (its `state_root` is the Ethereum state root after the block, as the
    /// sequencer signed it).
    pub header: Header,
    /// Its hash.
    pub hash: B256,
    /// The sequencer's signature over the hash (`None` for a genesis given without one).
    pub signature: Option<Signature>,
    /// The Ethereum state root (MPT) this database computed after the block, when it computed
    /// one at that block.
    pub state_root: Option<B256>,
    /// The sequencer's signed state commitment after the block, when the node keeps it: what
    /// a snapshot of this block's state is checked against (`gigas-snapshot`).
    pub commitment: Option<StateCommitment>,
}

/// One verified block, as [`crate::StateWriter::apply`] takes it.
#[derive(Debug, Clone, Copy)]
pub struct BlockToApply<'a> {
    /// The header; it must follow the writer's tip.
    pub header: &'a Header,
    /// Its hash.
    pub hash: B256,
    /// The sequencer's signature.
    pub signature: Option<Signature>,
    /// The block's changes.
    pub changes: &'a ChangeSet,
    /// The keccak of each changed key, in `changes`' order, when the caller has them (the
    /// decoder's [`VerifiedDiff::hashed`]); `None`: the writer hashes the keys. Hashes that do
    /// not fit `changes` are refused.
    pub hashed: Option<&'a HashedKeys>,
    /// The keys the block's diff names for the first time, in index order.
    pub new_keys: &'a [StateKey],
    /// The lattice hash of the state after the block (`None`: the database stops keeping
    /// the state commitment).
    pub lattice: Option<&'a gigas_primitives::LatticeHash>,
    /// The sequencer's signed commitment to `lattice`, stored with the header.
    pub commitment: Option<StateCommitment>,
}

impl<'a> From<&'a VerifiedDiff> for BlockToApply<'a> {
    fn from(diff: &'a VerifiedDiff) -> Self {
        Self {
            header: &diff.header,
            hash: diff.hash,
            signature: Some(diff.signature),
            changes: &diff.changes,
            hashed: Some(&diff.hashed),
            new_keys: &diff.new_keys,
            lattice: diff.lattice.as_ref(),
            commitment: diff.commitment,
        }
    }
}

/// The genesis block as the chain file gives it.
#[derive(Debug, Clone, Copy)]
pub struct GenesisBlock<'a> {
    /// The genesis header (number 0 by convention; its `state_root` is the genesis state's
    /// root).
    pub header: &'a Header,
    /// Its hash.
    pub hash: B256,
    /// The sequencer's signature over it, if the chain file has one.
    pub signature: Option<Signature>,
    /// Keep the state commitment, which the sequencer signed at genesis as this: the genesis
    /// state's lattice hash is summed while it is written (seconds for millions of accounts)
    /// and must give its checksum, or no head is recorded. `None`: not kept.
    pub commitment: Option<StateCommitment>,
    /// Refuse the genesis (no head recorded) unless the root computed over the state written
    /// is the header's `stateRoot` ([`crate::StateDbError::StateRootMismatch`]).
    pub verify_root: bool,
}

/// One item of a genesis stream. Each address has at most one `Account` entry, and a slot
/// belongs to an address that has one; entries may come in any order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GenesisEntry {
    /// An account.
    Account {
        /// Its address.
        address: Address,
        /// Its nonce.
        nonce: u64,
        /// Its balance.
        balance: U256,
        /// Its code (`None` or empty: none).
        code: Option<Bytes>,
    },
    /// A storage slot (zero values are skipped).
    Slot {
        /// The account.
        address: Address,
        /// The slot.
        slot: U256,
        /// Its value.
        value: U256,
    },
}

/// What a genesis wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenesisOutcome {
    /// The Ethereum state root of the genesis state.
    pub state_root: B256,
    /// Accounts written.
    pub accounts: u64,
    /// Non-zero slots written.
    pub slots: u64,
    /// Write transactions committed (one per chunk, and the final one).
    pub transactions: u64,
}

/// What a group commit made durable.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CommitInfo {
    /// Blocks in the group.
    pub blocks: u64,
    /// The last block of the group (now the committed head).
    pub head: u64,
    /// Account and slot changes in the group.
    pub changes: u64,
    /// Seconds from the group's first write to the start of the commit.
    pub write_seconds: f64,
    /// Seconds the commit took (flushing hashed writes excluded).
    pub commit_seconds: f64,
    /// Seconds of the durable point made after the commit, when one was due
    /// ([`Durability::Periodic`]); 0 otherwise.
    pub sync_seconds: f64,
    /// The root the commit waited for ([`WriterOptions::overlap_roots`]), or one that an
    /// idle write or [`StateWriter::compute_root`](crate::StateWriter::compute_root)
    /// waited for and no call returned yet.
    pub root: Option<RootInfo>,
}

/// A computed root and what it cost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RootInfo {
    /// The block after which it was computed.
    pub block: u64,
    /// The Ethereum state root.
    pub root: B256,
    /// Whether the trie was rebuilt from the hashed tables (it was stale).
    pub rebuilt: bool,
    /// Accounts whose leaves were recomputed.
    pub changed_accounts: u64,
    /// Storage tries recomputed.
    pub storage_tries: u64,
    /// Leaves hashed.
    pub leaves: u64,
    /// Subtries taken from their stored hash.
    pub skipped: u64,
    /// Leaves taken from the writer's remembered hashes instead of read and hashed.
    pub remembered: u64,
    /// Trie walks done again without remembered hashes (a deletion changed the shape
    /// around one).
    pub rereads: u64,
    /// The account trie was walked as subtries under its root node on several threads
    /// ([`WriterOptions::root_threads`]).
    pub split: bool,
    /// Seconds it took.
    pub seconds: f64,
    /// Seconds of it the writer's caller spent: all of them for a root computed where it
    /// was due; for an overlapped one, starting it and waiting for it to end.
    pub waited_seconds: f64,
}

/// A storage slot's proof, EIP-1186 shaped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageProof {
    /// The slot.
    pub slot: U256,
    /// Its value (zero when unset).
    pub value: U256,
    /// The storage trie nodes from the account's storage root to the slot (or to where its
    /// path leaves the trie), RLP-encoded.
    pub proof: Vec<Bytes>,
}

/// An account's proof with its storage proofs, EIP-1186 shaped (`eth_getProof`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountProof {
    /// The state root the proof is against.
    pub state_root: B256,
    /// The block of that state.
    pub block: u64,
    /// The account.
    pub address: Address,
    /// Its nonce (0 when absent).
    pub nonce: u64,
    /// Its balance (0 when absent).
    pub balance: U256,
    /// Its code hash (the empty code's hash when absent).
    pub code_hash: B256,
    /// Its storage root (the empty trie's root when absent).
    pub storage_root: B256,
    /// Whether the account exists.
    pub exists: bool,
    /// The account trie nodes from the state root to the account, RLP-encoded.
    pub account_proof: Vec<Bytes>,
    /// One per asked slot, in the order asked.
    pub storage_proofs: Vec<StorageProof>,
}

/// Entries and size of one table.
pub type TableStats = gigas_mdbx::TableStats<AnyTable>;

/// A table of the state database's environment: its own, or one of the trie's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AnyTable {
    /// The state database's own ([`crate::Table`]).
    State(crate::tables::Table),
    /// The trie's ([`gigas_triedb::TrieTable`]).
    Trie(gigas_triedb::TrieTable),
}

impl From<crate::tables::Table> for AnyTable {
    fn from(table: crate::tables::Table) -> Self {
        Self::State(table)
    }
}

impl From<gigas_triedb::TrieTable> for AnyTable {
    fn from(table: gigas_triedb::TrieTable) -> Self {
        Self::Trie(table)
    }
}

impl AnyTable {
    /// The table's name in the environment.
    pub const fn name(self) -> &'static str {
        match self {
            Self::State(t) => t.name(),
            Self::Trie(t) => t.name(),
        }
    }
}
