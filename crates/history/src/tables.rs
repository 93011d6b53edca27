//! Every table of the history, declared once: name, key and value layout, duplicate flags.
//!
//! The layouts are byte layouts: `u64` and `u32` are big-endian so that MDBX's byte order is
//! numeric order, `‖` is concatenation. Opening a history creates the tables that are missing
//! and checks the flags of those that exist (a table created with other flags is an error).

use signet_libmdbx::DatabaseFlags;

/// How a table stores several values under one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dup {
    /// One value per key.
    No,
    /// `DUPSORT`: sorted values under a key, each at most MDBX's maximum key size.
    Sorted,
    /// `DUPSORT | DUPFIXED`: sorted values of one fixed length, packed in pages.
    Fixed,
}

macro_rules! tables {
    ($(
        $(#[doc = $doc:literal])*
        $name:ident { key: $key:literal, value: $value:literal, dup: $dup:ident }
    ),* $(,)?) => {
        /// A table of the history.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Table {
            $( $(#[doc = $doc])* $name, )*
        }

        impl Table {
            /// Every table, in declaration order (which is also each table's slot in
            /// [`crate::History`]'s handle array).
            pub const ALL: &'static [Table] = &[$(Table::$name),*];

            /// The table's name in the MDBX environment.
            pub const fn name(self) -> &'static str {
                match self { $(Table::$name => stringify!($name),)* }
            }

            /// The key's byte layout.
            pub const fn key_layout(self) -> &'static str {
                match self { $(Table::$name => $key,)* }
            }

            /// The value's byte layout.
            pub const fn value_layout(self) -> &'static str {
                match self { $(Table::$name => $value,)* }
            }

            /// How the table stores several values under one key.
            pub const fn dup(self) -> Dup {
                match self { $(Table::$name => Dup::$dup,)* }
            }
        }
    };
}

tables! {
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

impl Table {
    /// How many tables there are.
    pub const COUNT: usize = Table::ALL.len();

    /// The table's slot in [`Table::ALL`].
    pub(crate) const fn slot(self) -> usize {
        self as usize
    }

    /// The MDBX flags the table is created with.
    pub(crate) fn flags(self) -> DatabaseFlags {
        match self.dup() {
            Dup::No => DatabaseFlags::empty(),
            Dup::Sorted => DatabaseFlags::DUP_SORT,
            Dup::Fixed => DatabaseFlags::DUP_SORT | DatabaseFlags::DUP_FIXED,
        }
    }
}

/// `Meta` key of the layout version.
pub(crate) const META_SCHEMA_VERSION: &[u8] = b"schema_version";
/// `Meta` key of the pruning watermark.
pub(crate) const META_STATE_PRUNED_BELOW: &[u8] = b"state_pruned_below";
/// The layout this build writes and reads.
pub(crate) const SCHEMA_VERSION: u32 = 1;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_declaration_order() {
        for (i, table) in Table::ALL.iter().enumerate() {
            assert_eq!(table.slot(), i);
        }
        let mut names: Vec<_> = Table::ALL.iter().map(|t| t.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Table::COUNT);
    }
}
