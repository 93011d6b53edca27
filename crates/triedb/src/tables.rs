//! The tables of the state trie, declared once: name, key and value layout, duplicate flags.
//!
//! The layouts are byte layouts: `‖` is concatenation; "compact account" and "trimmed" are
//! defined in [`crate::codec`]. The full node keeps them in its state database's environment
//! beside its own tables; the sequencer in an environment of their own (`DATADIR/trie`).

use signet_libmdbx::{Database, Environment};
use std::path::Path;

use crate::error::TrieDbError;

gigas_mdbx::tables! {
    /// A table of the state trie.
    TrieTable {
        /// Accounts by keccak(address): the leaves of the account trie, in trie order.
        HashedAccounts {
            key: "keccak(address) (32)",
            value: "compact account",
            dup: No
        },
        /// Non-zero slots by keccak(address), one duplicate per keccak(slot): the leaves of each
        /// storage trie, in trie order.
        HashedStorages {
            key: "keccak(address) (32)",
            value: "keccak(slot) (32) ‖ trimmed value",
            dup: Sorted
        },
        /// Branch nodes of the account trie by nibble path (reth's `AccountsTrie`).
        AccountsTrie {
            key: "nibble path (33)",
            value: "branch node",
            dup: No
        },
        /// Branch nodes of each storage trie (reth's `StoragesTrie`), one duplicate per path.
        StoragesTrie {
            key: "keccak(address) (32)",
            value: "nibble path (33) ‖ branch node",
            dup: Sorted
        },
        /// Accounts changed since the last computed root, which the next root recomputes.
        TrieChangedAccounts {
            key: "keccak(address) (32)",
            value: "flags (1): bit 0 storage changed",
            dup: No
        },
        /// Slots changed since the last computed root.
        TrieChangedStorages {
            key: "keccak(address) (32)",
            value: "keccak(slot) (32)",
            dup: Fixed
        },
        /// Small named values of the trie's own: `trie_schema_version`, and in a store of its
        /// own ([`crate::TrieStore`]) `committed`.
        TrieMeta {
            key: "name (ASCII)",
            value: "per name",
            dup: No
        },
    }
}

/// The tables that hold the state and its trie: all but `TrieMeta` (what a store clears to
/// start over).
pub const STATE_TABLES: [TrieTable; 6] = [
    TrieTable::HashedAccounts,
    TrieTable::HashedStorages,
    TrieTable::AccountsTrie,
    TrieTable::StoragesTrie,
    TrieTable::TrieChangedAccounts,
    TrieTable::TrieChangedStorages,
];

/// `TrieMeta` key of the trie tables' layout version (u32).
pub const META_TRIE_SCHEMA_VERSION: &[u8] = b"trie_schema_version";
/// The layout of the trie tables this build writes and reads.
pub const TRIE_SCHEMA_VERSION: u32 = 1;

/// The trie tables' handles in one environment.
#[derive(Debug, Clone, Copy)]
pub struct TrieDbs([Database; TrieTable::COUNT]);

impl TrieDbs {
    /// Creates the trie tables that are missing in `env` (at `dir`), checks the flags of
    /// those that exist and the layout version, and returns their handles.
    pub fn open(env: &Environment, dir: &Path) -> Result<Self, TrieDbError> {
        let dbs = gigas_mdbx::open_tables(
            env,
            dir,
            TrieTable::TrieMeta,
            META_TRIE_SCHEMA_VERSION,
            TRIE_SCHEMA_VERSION,
        )?;
        let dbs = dbs.try_into().map_err(|_| TrieDbError::Invariant {
            what: "open_tables returned another number of tables than it was given".into(),
        })?;
        Ok(Self(dbs))
    }

    /// Every table's handle, in [`TrieTable::ALL`] order.
    pub fn handles(&self) -> &[Database] {
        &self.0
    }

    /// The handle of `table`.
    pub fn get(&self, table: TrieTable) -> Database {
        self.0[table.slot()]
    }
}
