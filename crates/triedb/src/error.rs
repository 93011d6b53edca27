//! The trie store's typed error.

use gigas_mdbx::StoreError;
use signet_libmdbx::MdbxError;

/// What went wrong in the trie store.
#[derive(Debug, thiserror::Error)]
pub enum TrieDbError {
    /// The environment or its tables could not be opened (directory, layout version, table
    /// flags).
    #[error(transparent)]
    Open(gigas_mdbx::OpenError),
    /// MDBX refused an operation.
    #[error("MDBX failed to {op}: {source}")]
    Mdbx {
        /// What the store was doing ("write HashedAccounts", ...).
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
    /// The store found its own bookkeeping inconsistent: a bug, reported instead of a panic.
    #[error("the state trie's bookkeeping is inconsistent: {what} (a bug)")]
    Invariant {
        /// What was found.
        what: String,
    },
    /// The thread writing a parallel rebuild's nodes stopped before the parts ended (its
    /// own error is the one reported; this one reaches no caller).
    #[error("the thread writing the rebuilt trie stopped")]
    RebuildWriterStopped,
    /// A thread computing part of a root panicked (a bug: its message is in the log).
    #[error("a state root thread panicked")]
    RootThreadPanicked,
    /// The trie held in memory was asked to hash a subtrie it never loaded (a bug: its
    /// owner clears it and the next root walks the stored trie).
    #[error("the in-memory trie has no encoding for the subtrie at {path:?}")]
    SparseTrieUnloaded {
        /// The subtrie's path.
        path: alloy_trie::Nibbles,
    },
    /// A block that does not follow the store's head.
    #[error("block {got} is not the next block of the state trie: expected {expected}")]
    NotNext {
        /// The number the next block must have.
        expected: u64,
        /// The number given.
        got: u64,
    },
    /// The store holds no state yet: a genesis (or a reset) comes first.
    #[error("the state trie holds no state yet: write a genesis first")]
    NoGenesis,
    /// Work given a deadline (a proof for an RPC request) passed it and stopped.
    #[error("{0}: stopped at its deadline")]
    DeadlinePassed(&'static str),
}

/// The engine's failures keep the names callers match on (a walk's deadline is how an RPC
/// server tells a request that ran out of time).
impl From<gigas_trie::TrieError> for TrieDbError {
    fn from(e: gigas_trie::TrieError) -> Self {
        use gigas_trie::TrieError;
        match e {
            TrieError::Invariant { what } => Self::Invariant { what },
            TrieError::ThreadPanicked => Self::RootThreadPanicked,
            TrieError::Unloaded { path } => Self::SparseTrieUnloaded { path },
            TrieError::DeadlinePassed(what) => Self::DeadlinePassed(what),
            TrieError::SlotsWithoutAccount { address } => Self::Invariant {
                what: format!("storage under {address}, which has no account"),
            },
        }
    }
}

impl From<gigas_mdbx::OpenError> for TrieDbError {
    fn from(error: gigas_mdbx::OpenError) -> Self {
        <Self as StoreError>::from_open(error)
    }
}

impl StoreError for TrieDbError {
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
