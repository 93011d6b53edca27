//! Every table of the state database, declared once: name, key and value layout, duplicate
//! flags. The state itself (hashed accounts and slots, the trie's branch nodes) is in the
//! trie tables of `gigas_triedb`, opened in the same environment.
//!
//! The layouts are byte layouts: `u64` is big-endian so that MDBX's byte order is numeric
//! order, `‖` is concatenation, "compact account" and "trimmed" are defined in the crate
//! documentation. Opening a database creates the tables that are missing and checks the flags
//! of those that exist (a table created with other flags is an error).
//!
//! **No tables by address.** reth keeps every account and slot twice, by address for
//! execution and by hash for the trie. A diff follower does not execute blocks; its reads by
//! address (RPC, `eth_call`, the diff decoder's prior values) cost one keccak more through
//! the hashed tables. Each change then dirties one leaf page instead of two, which over 10M
//! accounts is about a quarter of the pages a commit writes, and half the leaf pages the page
//! cache must hold. (Layout version 1 had `PlainAccountState` and `PlainStorageState`.)

pub use gigas_mdbx::Dup;

gigas_mdbx::tables! {
    /// A table of the state database.
    Table {
        /// Contract code by its keccak-256.
        Bytecodes {
            key: "code hash (32)",
            value: "code",
            dup: No
        },
        /// The state-diff enumeration index, index to key (`KeyIndex::key_at`).
        IndexedKeys {
            key: "index: u64",
            value: "address (20) | address (20) ‖ slot (32)",
            dup: No
        },
        /// The state-diff enumeration index, key to index (`KeyIndex::index_of`).
        KeyIndices {
            key: "address (20) | address (20) ‖ slot (32)",
            value: "index: u64",
            dup: No
        },
        /// Headers of applied blocks, for `eth_getBlockByNumber`.
        Headers {
            key: "block: u64",
            value: "hash (32) ‖ flags (1) ‖ [signature (65)] ‖ [MPT root (32)] ‖ [commitment: lattice checksum (32) ‖ signature (65)] ‖ header (RLP)",
            dup: No
        },
        /// Block numbers by block hash (the sequencer's signed header hash), for
        /// `eth_getBlockByHash` over every block the database holds. Filled at open for a
        /// database written before it existed.
        HeaderNumbers {
            key: "hash (32)",
            value: "block: u64",
            dup: No
        },
        /// Small named values: `schema_version`, `head`, `last_root`, `trie`, `index_len`.
        Meta {
            key: "name (ASCII)",
            value: "per name",
            dup: No
        },
    }
}

/// `Meta` key of the layout version (u32).
pub(crate) const META_SCHEMA_VERSION: &[u8] = b"schema_version";
/// `Meta` key of the applied head: number (u64) ‖ hash (32) ‖ state checksum (32).
pub(crate) const META_HEAD: &[u8] = b"head";
/// `Meta` key of the last computed root: block (u64) ‖ root (32).
pub(crate) const META_LAST_ROOT: &[u8] = b"last_root";
/// `Meta` key of the trie's state (1 byte): 1 when the trie tables and the changed-key tables
/// describe the hashed tables, 0 when a root needs a rebuild first.
pub(crate) const META_TRIE: &[u8] = b"trie";
/// `Meta` key of the enumeration index's length (u64).
pub(crate) const META_INDEX_LEN: &[u8] = b"index_len";
/// `Meta` key of the lattice hash of the state at the head (2,048 bytes; absent when the
/// node does not keep the state commitment).
pub(crate) const META_LATTICE: &[u8] = b"lattice";
/// `Meta` key of a bootstrap from a snapshot under way: block (u64) ‖ manifest hash (32) ‖
/// chunks written (u32). Present only while the database has no head.
pub(crate) const META_BOOTSTRAP: &[u8] = b"bootstrap";
/// The layout this build writes and reads (`Meta`'s `schema_version`). Version 3: headers
/// carry the Ethereum state root (diff format version 2) and the trie tables are
/// `gigas_triedb`'s; a database of version 1 or 2 holds a chain whose headers carried a
/// state checksum, and is refused ([`crate::StateDbError::OldLayout`]).
pub const SCHEMA_VERSION: u32 = 3;
