//! The history's typed error.

use alloy_primitives::B256;
use gigas_mdbx::StoreError;
use signet_libmdbx::MdbxError;

/// What went wrong in the history.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The environment or its tables could not be opened (directory, layout version, table
    /// flags).
    #[error(transparent)]
    Open(gigas_mdbx::OpenError),
    /// MDBX refused an operation.
    #[error("MDBX failed to {op}: {source}")]
    Mdbx {
        /// What the history was doing ("open the environment", "write Receipts", ...).
        op: &'static str,
        /// MDBX's error.
        source: MdbxError,
    },
    /// `commit_block` was given a block that does not follow the head.
    #[error("block {got} is not the next block: expected {expected}")]
    NotNext {
        /// The number the next block must have (head + 1, or 0 on an empty history).
        expected: u64,
        /// The number given.
        got: u64,
    },
    /// A block's transactions and receipts differ in count.
    #[error("block {block} has {transactions} transactions but {receipts} receipts")]
    ReceiptCount {
        /// The block.
        block: u64,
        /// Transactions given.
        transactions: usize,
        /// Receipts given.
        receipts: usize,
    },
    /// A block has more transactions than a `u32` index can name.
    #[error("block {block} has {count} transactions, more than a u32 index names")]
    TooManyTransactions {
        /// The block.
        block: u64,
        /// Transactions given.
        count: usize,
    },
    /// A block hash that already names a committed block.
    #[error("block hash {hash} already names block {existing}")]
    DuplicateBlockHash {
        /// The hash.
        hash: B256,
        /// The block it names.
        existing: u64,
    },
    /// A transaction hash that is already in the history.
    #[error("transaction {hash} is already in block {block} at index {index}")]
    DuplicateTransaction {
        /// The hash.
        hash: B256,
        /// The block that holds it.
        block: u64,
        /// Its index there.
        index: u32,
    },
    /// A state key longer than the history stores.
    #[error("a state key of block {block} has {len} bytes; at most {max} are stored")]
    StateKeyTooLong {
        /// The block.
        block: u64,
        /// The key's length.
        len: usize,
        /// The longest key stored.
        max: usize,
    },
    /// A state key named twice in one block's state history.
    #[error("state key 0x{key} is named twice in block {block}'s state history")]
    DuplicateStateKey {
        /// The block.
        block: u64,
        /// The key, in hex.
        key: String,
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
    /// More logs match a query than the caller's limit.
    #[error("more than {limit} logs match the query")]
    TooManyLogs {
        /// The limit.
        limit: usize,
    },
    /// A log scan ran past its deadline.
    #[error("the log scan of blocks {from}..={to} ran out of time at block {reached}")]
    LogScanTimedOut {
        /// The first block asked for.
        from: u64,
        /// The block the scan had reached.
        reached: u64,
        /// The last block asked for.
        to: u64,
    },
    /// The block log (the durable record) failed.
    #[error("block log: {0}")]
    BlockLog(#[from] gigas_blocklog::Error),
    /// A block record in the log does not decode: the log verified its checksum, so it was
    /// written so (a bug, or a log from another version).
    #[error("block {block}'s record in the block log does not decode: {reason}")]
    BadRecord {
        /// The block.
        block: u64,
        /// What is wrong.
        reason: String,
    },
    /// The log and the index do not fit together.
    #[error("{dir}: {message}")]
    Inconsistent {
        /// The history directory.
        dir: std::path::PathBuf,
        /// What does not fit, and what to do.
        message: String,
    },
    /// The indexer stopped on an error; blocks stay durable in the log, but the history takes
    /// no more until it is reopened (which indexes them again).
    #[error("the history's indexer failed: {0}")]
    IndexerFailed(String),
}

impl From<gigas_mdbx::OpenError> for HistoryError {
    fn from(error: gigas_mdbx::OpenError) -> Self {
        <Self as StoreError>::from_open(error)
    }
}

impl StoreError for HistoryError {
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

pub(crate) use gigas_mdbx::hex_key as hex_string;
