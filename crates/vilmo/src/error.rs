//! Errors of the store. Every corruption names the file and the byte offset.

use std::path::PathBuf;

/// What can go wrong opening, writing or syncing a store.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O operation failed.
    #[error("{path}: {op}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// A log holds bytes that are not what was written: a flipped bit, a bad checksum, a
    /// broken chain. Nothing after this point is used.
    #[error("{path} at byte {offset}: corrupt: {reason}")]
    Corrupt {
        /// The log file.
        path: PathBuf,
        /// Byte offset in the file.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// A log file in the middle of the chain is missing and was not compacted away.
    #[error("{dir}: log file {file_id} is missing from the middle of the chain (between {before} and {after}); it was never compacted away, so state would be lost")]
    MissingFile {
        /// The store directory.
        dir: PathBuf,
        /// The missing file's number.
        file_id: u32,
        /// The nearest file before it that is present or accounted for.
        before: String,
        /// The nearest file after it.
        after: String,
    },
    /// A synced store does not end where the source said it ends.
    #[error("synced logs end at batch {got_batch} with checksum {got}, expected batch {expected_batch} with checksum {expected}")]
    SyncMismatch {
        /// The expected last batch.
        expected_batch: u64,
        /// The expected checksum, hex.
        expected: String,
        /// The batch the synced logs end at.
        got_batch: u64,
        /// Their checksum, hex.
        got: String,
    },
    /// A key or value is too large for the format.
    #[error("{what} of {len} bytes exceeds the format's limit of {limit} bytes")]
    TooLarge {
        /// Key, value or batch.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// An earlier write failed part-way; the store must be reopened, which truncates the torn
    /// batch.
    #[error("store is unusable after an earlier write error; reopen it to recover")]
    Poisoned,
    /// Another `Vilmo` (in this process or another) has the store open.
    #[error("{dir}: the store is locked by another open Vilmo (in this process or another); close it first, two writers would corrupt the logs")]
    Locked {
        /// The store directory.
        dir: PathBuf,
    },
    /// Options out of range.
    #[error("invalid option: {0}")]
    InvalidOption(String),
}

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;
