//! The Ethereum state trie (MPT) over the hashed tables: incremental roots from stored
//! branch nodes, rebuilds, and proofs: the store side of `gigas_trie`'s engine (its walk and
//! sparse trie read the tables through [`store`]'s `TrieSource`s).

pub(crate) mod cache;
pub(crate) mod layer;
pub(crate) mod overlay;
pub(crate) mod rebuild;
pub(crate) mod root;
pub(crate) mod store;
