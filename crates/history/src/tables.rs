//! Every table of the history, declared once: name, key and value layout, duplicate flags.
//!
//! The layouts are byte layouts: `u64` and `u32` are big-endian so that MDBX's byte order is
//! numeric order, `‖` is concatenation. Opening a history creates the tables that are missing
//! and checks the flags of those that exist (a table created with other flags is an error).

pub use gigas_mdbx::Dup;

gigas_mdbx::tables! {
    /// A table of the history.
    Table {
        /// Sealed headers by number.
        Headers {
            key: "block: u64",
            value: "hash (32) ‖ signature r ‖ s ‖ v (65) ‖ header (RLP)",
            dup: No
        },
        /// Block numbers by block hash.
        HeaderNumbers {
            key: "block hash (32)",
            value: "block: u64",
            dup: No
        },
        /// Transactions with their senders, by block and position.
        Transactions {
            key: "block: u64 ‖ index: u32",
            value: "sender (20) ‖ transaction (EIP-2718)",
            dup: No
        },
        /// Where each transaction is, by transaction hash.
        TransactionLocations {
            key: "transaction hash (32)",
            value: "block: u64 ‖ index: u32",
            dup: No
        },
        /// Receipts by block and position.
        Receipts {
            key: "block: u64 ‖ index: u32",
            value: "receipt (EIP-2718, with its bloom)",
            dup: No
        },
        /// The blocks that have at least one log (what a query without addresses or topics walks).
        LogBlocks {
            key: "block: u64",
            value: "logs in the block: u32",
            dup: No
        },
        /// The blocks in which an address emitted a log.
        LogAddresses {
            key: "address (20)",
            value: "block: u64 (one per block, sorted)",
            dup: Fixed
        },
        /// The blocks that have a log with a topic at a position.
        LogTopics {
            key: "position: u8 ‖ topic (32)",
            value: "block: u64 (one per block, sorted)",
            dup: Fixed
        },
        /// Each block's encoded ChangeSet, for the retention window.
        ChangeSets {
            key: "block: u64",
            value: "ChangeSet bytes (opaque here)",
            dup: No
        },
        /// The value a state key had before a block changed it, for the retention window.
        StateHistory {
            key: "key length: u8 ‖ state key ‖ block: u64",
            value: "0 (absent) | 1 ‖ value",
            dup: No
        },
        /// The state keys each block changed: what pruning deletes from StateHistory.
        StateHistoryKeys {
            key: "block: u64",
            value: "key length: u8 ‖ state key (sorted)",
            dup: Sorted
        },
        /// Small named values: `schema_version` (u32), `state_pruned_below` (u64: the blocks below it
        /// have no ChangeSets and StateHistory rows any more).
        Meta {
            key: "name (ASCII)",
            value: "per name",
            dup: No
        },
    }
}

/// `Meta` key of the layout version.
pub(crate) const META_SCHEMA_VERSION: &[u8] = b"schema_version";
/// `Meta` key of the pruning watermark.
pub(crate) const META_STATE_PRUNED_BELOW: &[u8] = b"state_pruned_below";
/// The layout this build writes and reads.
pub(crate) const SCHEMA_VERSION: u32 = 1;
