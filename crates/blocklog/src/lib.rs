//! gigas-blocklog: the sequencer's chain as numbered records in append-only, checksummed
//! segment files. A block is durable once its record is appended and [`BlockLog::sync`]
//! returned: one sequential `fdatasync`, whatever the block holds. (After geth's freezer and
//! reth's static files: immutable data goes to files written in order; the B-tree indices are
//! built from them, off the path that makes a block durable.)
//!
//! **Owns:** the file format ([`format`]), the segment files of one directory, appending,
//! syncing, reading a record back by number, verifying every byte at open and cutting a torn
//! tail, and removing the segments a caller no longer needs.
//!
//! **Must not:** know what a record holds (the chain history encodes blocks; here they are
//! opaque bytes), index anything, or decide when segments may go (the caller removes what its
//! own durable indices cover).
//!
//! # Layout
//!
//! A directory of segments named after their first record's number
//! (`00000000000000001234.blocks`, twenty digits so that names sort as numbers). Each holds a
//! 64-byte header and records numbered consecutively; numbers continue from one segment to
//! the next. Every record carries a BLAKE3 checksum over the previous record's checksum and
//! its own bytes, and a segment's header names the checksum it continues from (its anchor),
//! so the records of a directory form one chain: a record lost, repeated or reordered breaks
//! it. [`format`] gives the bytes.
//!
//! # Durability
//!
//! [`BlockLog::append`] writes through to the file (the page cache); [`BlockLog::sync`]
//! makes every record appended so far durable: `fdatasync` of each segment written since the
//! last sync, then of the directory when a segment was created. A caller acknowledges a block
//! only after `sync` returned. A failed write or sync poisons the log: every later call fails
//! (Linux may drop the dirty pages of a failed `fdatasync`, so retrying could acknowledge
//! data that is gone); reopening the directory finds what reached the disk.
//!
//! On open every segment is read and verified. In the newest segment, the first record that
//! does not verify (short, zeros where a header should be, a bad checksum) and everything after
//! it are cut off: only records appended after the last sync can be there (a power loss may
//! persist any subset of their pages), and none of them was acknowledged. A newest segment
//! whose header does not verify was created and never synced, and is removed. Anything that
//! does not verify in an older segment, or a segment missing between two others, is
//! [`Error::Corrupt`]: a segment and its directory entry are synced before the next one is
//! created, so only the newest can hold an unsynced record or be unsynced itself.
//!
//! Segments are removed ([`BlockLog::remove_through`]) only whole and never the newest, so
//! the newest record is always on disk: the log knows where the chain continues.
//!
//! # Cost
//!
//! 48 bytes of framing per record, and BLAKE3 over its bytes at several GB/s: a block of
//! 2,000 transfers (about 1.5 MB encoded) costs well under a millisecond to checksum. Memory:
//! 40 bytes per record kept (its offset and checksum), so that reads need no scan.

pub mod format;
mod log;

pub use log::{BlockLog, OpenReport, Options};

use std::path::PathBuf;

/// What can go wrong opening, appending, syncing or reading a block log.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file operation failed.
    #[error("{path}: {op}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// Synced bytes are not what was written: a bad checksum, a broken chain, a bad header.
    #[error("{path} at byte {offset}: corrupt: {reason}")]
    Corrupt {
        /// The segment file.
        path: PathBuf,
        /// Byte offset in the file.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// A record was appended out of order.
    #[error("record {got} appended, but the log continues at {expected}")]
    NotNext {
        /// The number the log expects.
        expected: u64,
        /// The number given.
        got: u64,
    },
    /// A record is larger than the format allows.
    #[error("a record of {len} bytes exceeds the format's limit of {limit} bytes")]
    TooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// An earlier write or sync failed; the log accepts nothing more until it is reopened.
    #[error(
        "the block log failed earlier ({0}); reopen it to continue from what reached the disk"
    )]
    Poisoned(String),
    /// Another process (or another handle in this one) has the directory open.
    #[error("{0}: the block log is open elsewhere (another process using this data directory?)")]
    Locked(PathBuf),
}

/// The result of block log operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;
