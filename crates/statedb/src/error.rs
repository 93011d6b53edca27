//! The state database's typed error.

use alloy_primitives::B256;
use gigas_evm::revm::database_interface::DBErrorMarker;
use gigas_mdbx::StoreError;
use gigas_statediff::StateKey;
use signet_libmdbx::MdbxError;

use crate::tables::SCHEMA_VERSION;

/// What went wrong in the state database.
#[derive(Debug, thiserror::Error)]
pub enum StateDbError {
    /// The environment or its tables could not be opened (directory, layout version, table
    /// flags).
    #[error(transparent)]
    Open(gigas_mdbx::OpenError),
    /// The directory holds a database of an earlier layout, whose chain's headers carried a
    /// state checksum instead of the state root: it cannot follow a chain of this build.
    #[error(
        "the state database in {dir} has layout version {found}, from before headers carried \
         the state root; this build reads version {SCHEMA_VERSION}. Remove it (or give another \
         --datadir) and start again from the sequencer's genesis or a snapshot"
    )]
    OldLayout {
        /// The directory.
        dir: std::path::PathBuf,
        /// Its layout version.
        found: u32,
    },
    /// MDBX refused an operation.
    #[error("MDBX failed to {op}: {source}")]
    Mdbx {
        /// What the database was doing ("open the environment", "write HashedAccounts", ...).
        op: &'static str,
        /// MDBX's error.
        source: MdbxError,
    },
    /// A stored row that does not decode.
    #[error("corrupt row in {table} at key 0x{key}: {reason}")]
    Corrupt {
        /// The table.
        table: &'static str,
        /// The row's key, in hex.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The database holds no genesis yet: apply one first.
    #[error("the state database holds no genesis yet")]
    NotInitialized,
    /// A genesis was given to a database that already has a head.
    #[error("the state database already holds a chain (head block {head})")]
    AlreadyInitialized {
        /// Its head.
        head: u64,
    },
    /// A block given with key hashes that do not fit its ChangeSet (the caller's bug): the
    /// block is refused before anything of it is written.
    #[error(
        "block {block} came with {hashed_accounts} account and {hashed_slots} slot hashes for \
         {accounts} changed accounts and {slots} changed slots"
    )]
    HashesDoNotFit {
        /// The block.
        block: u64,
        /// Account hashes given.
        hashed_accounts: usize,
        /// Slot hashes given.
        hashed_slots: usize,
        /// Accounts the block changes.
        accounts: usize,
        /// Slots the block changes.
        slots: usize,
    },
    /// A block that does not follow the writer's tip.
    #[error("block {got} is not the next block: expected {expected}")]
    NotNext {
        /// The number the next block must have.
        expected: u64,
        /// The number given.
        got: u64,
    },
    /// A block whose parent hash is not the tip's hash.
    #[error("block {block} names parent {found}, but the tip's hash is {expected}")]
    WrongParent {
        /// The block.
        block: u64,
        /// The tip's hash.
        expected: B256,
        /// The parent hash the header names.
        found: B256,
    },
    /// A block's new index key that already has an index.
    #[error("block {block} gives {key:?} a new index, but it already has index {index}")]
    KeyAlreadyIndexed {
        /// The block.
        block: u64,
        /// The key.
        key: StateKey,
        /// Its existing index.
        index: u64,
    },
    /// Another writer (or a genesis) holds the database's write side.
    #[error("another writer is open on this state database")]
    WriterBusy,
    /// The writer has no open write transaction (beginning one failed earlier).
    #[error("the writer has no open write transaction: {reason}")]
    NoTransaction {
        /// Why.
        reason: String,
    },
    /// The writer found its own bookkeeping inconsistent: a bug, reported instead of a
    /// panic; the open group is discarded and the follower applies it again.
    #[error("the state writer's bookkeeping is inconsistent: {what} (a bug; the open group is discarded)")]
    Invariant {
        /// What was found.
        what: String,
    },
    /// The state trie failed in a way of its own (a root thread that panicked, a subtrie the
    /// trie in memory never loaded: bugs, reported instead of panics; the open group is
    /// discarded). Its failures that this crate has words for arrive as those.
    #[error(transparent)]
    Trie(gigas_triedb::TrieDbError),
    /// A proof or root was asked of a trie that is not maintained (the writer ran with
    /// `root_every: 0` since the last root); the next computed root rebuilds it.
    #[error("the state trie is not maintained since block {last_root}; compute a root first")]
    TrieStale {
        /// The block of the last computed root (0 for none).
        last_root: u64,
    },
    /// BLOCKHASH asked for a block whose header the database does not hold.
    #[error("block {0}'s header is not in the database (BLOCKHASH needs the 256 before the block executing)")]
    MissingHeader(u64),
    /// The state root computed after a block is not the one its signed header carries: the
    /// block's changes (or this node's state) are wrong. The open group is discarded;
    /// nothing of it was committed. geth's words.
    #[error("invalid merkle root at block {block} (remote: {header} local: {computed})")]
    StateRootMismatch {
        /// The block.
        block: u64,
        /// The header's `stateRoot`.
        header: B256,
        /// The root of this database's state after the block.
        computed: B256,
    },
    /// Work given a deadline (a proof for an RPC request) passed it and stopped.
    #[error("{0}: stopped at its deadline")]
    DeadlinePassed(&'static str),
    /// The genesis input failed.
    #[error("genesis input: {0}")]
    Genesis(Box<dyn std::error::Error + Send + Sync>),
    /// A code hash without its code.
    #[error("code {0} is missing from Bytecodes")]
    MissingCode(B256),
    /// A file operation of the store's own (outside MDBX) failed.
    #[error("failed to {what}: {source}")]
    Io {
        /// What the store was doing.
        what: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

impl DBErrorMarker for StateDbError {}

/// The trie store's failures keep the names this crate's callers match on (a walk's deadline
/// is how the full node tells a request that ran out of time).
impl From<gigas_triedb::TrieDbError> for StateDbError {
    fn from(e: gigas_triedb::TrieDbError) -> Self {
        use gigas_triedb::TrieDbError;
        match e {
            TrieDbError::Open(e) => Self::Open(e),
            TrieDbError::Mdbx { op, source } => Self::Mdbx { op, source },
            TrieDbError::Corrupt { table, key, reason } => Self::Corrupt { table, key, reason },
            TrieDbError::Invariant { what } => Self::Invariant { what },
            TrieDbError::DeadlinePassed(what) => Self::DeadlinePassed(what),
            TrieDbError::NotNext { expected, got } => Self::NotNext { expected, got },
            TrieDbError::NoGenesis => Self::NotInitialized,
            e @ (TrieDbError::RebuildWriterStopped
            | TrieDbError::RootThreadPanicked
            | TrieDbError::SparseTrieUnloaded { .. }) => Self::Trie(e),
        }
    }
}

/// The engine's failures, through the trie store's names.
impl From<gigas_trie::TrieError> for StateDbError {
    fn from(e: gigas_trie::TrieError) -> Self {
        gigas_triedb::TrieDbError::from(e).into()
    }
}

impl From<gigas_mdbx::OpenError> for StateDbError {
    fn from(error: gigas_mdbx::OpenError) -> Self {
        <Self as StoreError>::from_open(error)
    }
}

impl StoreError for StateDbError {
    fn from_mdbx(op: &'static str, source: MdbxError) -> Self {
        Self::Mdbx { op, source }
    }

    fn from_open_failure(error: gigas_mdbx::OpenError) -> Self {
        Self::Open(error)
    }

    fn from_corrupt_row(table: &'static str, key: String, reason: String) -> Self {
        Self::Corrupt { table, key, reason }
    }
}
