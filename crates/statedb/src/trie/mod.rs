//! The Ethereum state trie (MPT) over the hashed tables: incremental roots from stored
//! branch nodes, rebuilds, and proofs.

pub(crate) mod cache;
pub(crate) mod layer;
pub(crate) mod overlay;
pub(crate) mod prefix;
pub(crate) mod rebuild;
pub(crate) mod root;
pub(crate) mod sparse;
pub(crate) mod store;
pub(crate) mod walk;
