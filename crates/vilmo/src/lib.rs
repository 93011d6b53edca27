//! Vilmo: the sequencer's checksummed, append-only state store.
//!
//! After the store of the same name in Ava Labs' HyperSDK (see `shared/seeds/vryx-vilmo-100k-tps.md`):
//! state changes are committed in large batches to a small set of rotating append-only log
//! files; every batch gets a checksum chained over all batches before it, which nodes compare
//! instead of a Merkle root; an in-memory index maps every live key to its record in a
//! memory-mapped log; files whose data has mostly died are compacted by rewriting their live
//! records forward; and a new node syncs by copying the log files and replaying them.
//!
//! Owns: the on-disk format ([`format`], and `FORMAT.md` beside this crate, byte by byte), durability, recovery, compaction, the
//! index and its metrics. Must not: know what keys mean (accounts, slots), execute anything,
//! or prove the value of individual keys (it trades that away for write speed).
//!
//! # Checksum
//!
//! BLAKE3: a cryptographic hash (the chain is what nodes compare, so collisions must be out of
//! reach) that runs at several GB/s per core with SIMD and splits large inputs across threads,
//! so checksumming a 10 MB batch costs about a millisecond, small next to `fdatasync`.
//! Keccak-256 would be about five times slower for no benefit here.
//!
//! # Memory
//!
//! The index keeps no key in memory: an entry is the key's 64-bit hash and the file and offset
//! of its record (16 bytes), and a lookup confirms the key against the mapped record. With the
//! hash table's control byte and load factor that is 19 to 39 bytes per live key whatever the
//! key length (about 41 at 2 and 10 million keys, measured by `gigas-bench storage`).
//!
//! # Crash safety
//!
//! `commit` returns after `fdatasync` of the batch (and of the directory when a file was
//! created). A compacted file is unlinked only after the batch that drops it is durable. A
//! batch whose `fdatasync` failed is cut back off the file before `commit` returns the error.
//! One process at a time: `open` takes an exclusive `flock` on the directory's `LOCK` file.
//!
//! On open every file is verified with ordinary reads before anything changes; a torn last
//! batch of the newest file (short, or holding a page of zeros) is truncated; anything else that
//! does not verify is an [`Error::Corrupt`] naming the file and offset, or an
//! [`Error::MissingFile`]. `FORMAT.md` lists the rules. All file operations go through
//! [`Storage`], so the tests can run the store on a simulated disk and check every state a
//! power loss could leave (`tests/power_loss.rs`).
//!
//! Reads after open go through memory maps: a device error on a page that was verified at open
//! and later evicted raises SIGBUS there. That is the price of zero-copy reads.

#![warn(missing_docs)]

pub mod error;
pub mod format;
mod index;
pub mod metrics;
mod recovery;
mod state;
mod store;

pub use error::{Error, Result};
pub use format::Checksum;
/// The file operations behind the store (re-exported from `gigas-storage`).
pub use gigas_storage as storage;
pub use gigas_storage::{FsStorage, Storage, StorageFile};
pub use metrics::Metrics;
pub use store::{
    Batch, Commit, Options, Recovery, Stats, Unsynced, Vilmo, MAX_KEY_LEN, MAX_VALUE_LEN,
};
