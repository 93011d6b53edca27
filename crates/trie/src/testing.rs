//! What the engine's tests share: a trie source in memory, and the root computed from scratch.

use std::collections::BTreeMap;

use alloy_primitives::{B256, U256};
use alloy_trie::{BranchNodeCompact, HashBuilder, Nibbles};

use crate::error::TrieError;
use crate::walk::{LeafHashes, TrieSource};

/// Stored nodes and leaves in B-trees (a path's `Nibbles` order is the trie's pre-order, as
/// a stored path key's byte order is), with leaf hashes kept by node path.
#[derive(Default)]
pub(crate) struct Memory {
    pub(crate) nodes: BTreeMap<Nibbles, BranchNodeCompact>,
    pub(crate) leaves: BTreeMap<B256, U256>,
    at: Option<B256>,
    /// Leaf hashes kept with nodes, by node path.
    pub(crate) kept: BTreeMap<Nibbles, LeafHashes>,
    /// What the last node seek found kept.
    stash: Option<LeafHashes>,
}

impl Memory {
    /// A source holding these leaves and no stored node.
    pub(crate) fn with_leaves(leaves: BTreeMap<B256, U256>) -> Self {
        Self {
            leaves,
            ..Self::default()
        }
    }
}

impl TrieSource for Memory {
    type Leaf = U256;
    type Error = TrieError;

    fn seek_node(
        &mut self,
        path: &Nibbles,
    ) -> Result<Option<(Nibbles, BranchNodeCompact)>, TrieError> {
        let found = self
            .nodes
            .range(*path..)
            .next()
            .filter(|(p, _)| p.starts_with(path))
            .map(|(p, n)| (*p, n.clone()));
        self.stash = found.as_ref().and_then(|(p, _)| self.kept.get(p).cloned());
        Ok(found)
    }

    fn seek_leaf(&mut self, key: &B256) -> Result<Option<(B256, U256)>, TrieError> {
        let found = self.leaves.range(*key..).next().map(|(k, v)| (*k, *v));
        self.at = found.map(|f| f.0);
        Ok(found)
    }

    fn next_leaf(&mut self) -> Result<Option<(B256, U256)>, TrieError> {
        let Some(at) = self.at else { return Ok(None) };
        let found = self
            .leaves
            .range((std::ops::Bound::Excluded(at), std::ops::Bound::Unbounded))
            .next()
            .map(|(k, v)| (*k, *v));
        self.at = found.map(|f| f.0);
        Ok(found)
    }

    fn leaf_value(&mut self, _: &B256, leaf: &U256, out: &mut Vec<u8>) -> Result<(), TrieError> {
        alloy_rlp::Encodable::encode(leaf, out);
        Ok(())
    }

    fn take_leaf_hashes(&mut self) -> Option<LeafHashes> {
        self.stash.take()
    }
}

/// The root of these leaves from scratch, by alloy-trie alone.
pub(crate) fn reference(leaves: &BTreeMap<B256, U256>) -> B256 {
    let mut hb = HashBuilder::default();
    for (k, v) in leaves {
        hb.add_leaf(Nibbles::unpack(k), &alloy_rlp::encode(v));
    }
    hb.root()
}
