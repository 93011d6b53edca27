//! gigas-trie: the Ethereum state trie (Merkle-Patricia) engine both nodes use.
//!
//! **Owns:** which subtries a root must recompute ([`PrefixSet`]); the incremental walk that
//! recomputes only changed paths over stored branch nodes and reads every other subtrie's
//! hash from them, which is also how rebuilds and EIP-1186 proofs are computed ([`walk`]);
//! the sparse trie held in memory across roots, re-hashing changed nodes a depth at a time
//! ([`sparse`]); the byte keys under which stored nodes sort in the trie's pre-order
//! ([`keys`]); and the root from scratch that incremental roots are held to ([`scratch`]).
//! Stored nodes are reth's `BranchNodeCompact` and hashing is `alloy-trie`'s
//! `HashBuilder`, so every root agrees with a from-scratch `alloy-trie` root.
//!
//! **Must not:** know where nodes and leaves are stored. A store gives them through
//! [`TrieSource`] (ordered seeks over its branch nodes and hashed leaves), with its own error
//! type. The full node's MDBX state (`gigas-statedb`) is one such store; the engine is apart
//! from it so that the sequencer can keep a store of its own without linking the full
//! node's. Today the sequencer uses only [`scratch`], to compute its state's root from
//! scratch (`gigas-sequencer state-root`).

pub mod error;
pub mod keys;
pub mod prefix;
pub mod scratch;
pub mod sparse;
#[cfg(test)]
mod testing;
pub mod walk;

pub use error::TrieError;
pub use prefix::PrefixSet;
pub use scratch::ScratchState;
pub use sparse::{Drained, Emitted, SparseAccounts, SparseTrie, SparseTrieStats};
pub use walk::{LeafHashes, Spill, TrieRun, TrieSource};
