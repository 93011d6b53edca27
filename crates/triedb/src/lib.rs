//! The Ethereum state trie in MDBX, the store side of [`gigas_trie`]'s engine: the hashed
//! leaves (`HashedAccounts`, `HashedStorages`) and the stored branch nodes (`AccountsTrie`,
//! `StoragesTrie`) reth keeps, roots computed incrementally from the stored nodes, rebuilds,
//! proofs. Both nodes use it: the full node inside its state database's environment, the
//! sequencer in an environment of its own.
//!
//! - [`tables`]: the tables and their handles ([`TrieDbs`]); [`codec`]: their rows;
//!   [`rows`]: point reads and writes.
//! - [`store`]: the tries over the tables (walk sources, node writes, the changed-key tables
//!   that carry prefix sets across commits); [`cache`]: hashes of subtries kept between
//!   roots.
//! - [`layer`]: roots over the last commit with the open group's changes held in memory laid
//!   over it, on several threads; [`flush`]: writing such a group into a transaction.
//! - [`root`]: roots and proofs inside one transaction; [`rebuild`]: the trie from the
//!   leaves alone (parallel); [`overlay`]: a view's pending changes over a commit.
//! - [`trie_store`]: a trie in an environment of its own, kept block by block with its
//!   commits on a thread of their own (the sequencer's).
//!
//! # Tables
//!
//! Declared once, in [`tables`] ([`TrieTable::ALL`]), after reth's
//! (`crates/storage/db-api/src/tables/mod.rs`); `‖` is concatenation.
//!
//! | table | key | value | dup |
//! |---|---|---|---|
//! | `HashedAccounts` | keccak(address) (32) | compact account | |
//! | `HashedStorages` | keccak(address) (32) | keccak(slot) (32) ‖ trimmed value | DUPSORT |
//! | `AccountsTrie` | nibble path (33) | branch node | |
//! | `StoragesTrie` | keccak(address) (32) | nibble path (33) ‖ branch node | DUPSORT |
//! | `TrieChangedAccounts` | keccak(address) (32) | flags (1) | |
//! | `TrieChangedStorages` | keccak(address) (32) | keccak(slot) (32) | DUPSORT, DUPFIXED |
//! | `TrieMeta` | name | `trie_schema_version`; in a store of its own, `committed` | |
//!
//! - **Compact account:** nonce length (1) ‖ nonce ‖ balance length (1) ‖ balance ‖ code
//!   hash (32, only for an account with code), integers without leading zeros: 14 bytes for
//!   a typical account instead of 72, which is page cache on a small machine. **Trimmed
//!   value:** a slot's value without leading zeros; zero values are never stored.
//! - **Nibble path:** the packed nibbles padded to 32 bytes, then the nibble count. Byte order
//!   of these keys is the trie's pre-order (a path before its extensions, siblings by
//!   nibble), so a cursor seek finds the first stored node at or under a path.
//! - **Branch node:** reth's `BranchNodeCompact`: state, tree and hash masks (2 bytes each),
//!   the hashes the hash mask names, and the root hash on the node at the empty path.
//! - Storage is DUPSORT so that a wipe (an account destroyed, perhaps re-created, in a block)
//!   deletes all of an account's slots, hashed slots and storage-trie nodes in one call each,
//!   without knowing which slots it had.
//!

pub mod cache;
pub mod codec;
pub mod error;
pub mod flush;
pub mod layer;
pub mod overlay;
pub mod rebuild;
pub mod root;
pub mod rows;
pub mod store;
pub mod tables;
pub mod trie_store;

pub use error::TrieDbError;
pub use tables::{TrieDbs, TrieTable};
pub use trie_store::{
    BlockRoot, CommitGate, TrieCommitStats, TrieHead, TrieStore, TrieStoreOptions,
};

#[cfg(test)]
mod tests {
    #[test]
    fn the_crate_documentation_lists_every_table() {
        assert_eq!(
            gigas_mdbx::check_table_doc::<super::TrieTable>(include_str!("lib.rs")),
            Ok(())
        );
    }
}
