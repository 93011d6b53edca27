//! gigas-storage: the file operations Gigas's append-only stores (Vilmo's state logs, the
//! chain history's block log) go through, behind two small traits.
//!
//! **Owns:** [`Storage`] and [`StorageFile`] (create, list, append, truncate, `fdatasync`,
//! directory sync, lock, map), the real implementation [`FsStorage`], and, for tests,
//! [`sim::SimDisk`]: an in-memory disk that knows at every sync barrier which states
//! a power loss could leave, so that a store's tests can reopen it on each of them.
//!
//! **Must not:** know any file format, or decide when to sync: the durability argument is the
//! store's, and these traits only make the order of its operations observable.
//!
//! Why a trait and not `std::fs` directly: a SIGKILL test keeps the page cache, so it cannot
//! see an unlink that reached the disk before the record explaining it, or a size persisted
//! before the pages. Only a disk that records what was synced and what was not can.

mod fs;
pub mod sim;

pub use fs::{FsFile, FsLock, FsStorage, Storage, StorageFile, LOCK_FILE};
