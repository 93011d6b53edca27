//! Roots over the last commit plus the open group, held in memory, on several threads.
//!
//! **Why.** A root computed inside the writer's transaction runs on the writer's thread
//! (MDBX ties a write transaction to one thread), and writes every block's changed branch
//! nodes and hashed leaves into it: over 10M accounts the same upper nodes are copied and
//! rewritten by every block of a group. Here the group's hashed leaves and branch nodes stay
//! in memory ([`TrieLayer`]) until the commit writes them once, sorted; a root reads the
//! last commit through read transactions of its own, with the layer laid over it
//! ([`Layered`]), so it can run on every core.
//!
//! **Exact.** A read transaction begun while the writer's group is open sees the last
//! commit, and the layer holds every hashed and trie change since: together they are what
//! the writer's transaction holds, so a root over them is the root over it, and the
//! branch nodes it returns are those a walk inside the transaction would store.

use std::collections::BTreeMap;
use std::ops::Bound;

use alloy_primitives::map::B256Map;
use alloy_primitives::{B256, U256};
use alloy_trie::{BranchNodeCompact, Nibbles};
use gigas_primitives::{AccountState, ChangeSet, HashedKeys};

use crate::cache::Found;
use crate::error::TrieDbError;
use crate::root::RootOutcome;
use gigas_trie::walk::{TrieRun, TrieSource};

mod parallel;

pub use parallel::{layered_root, preload_sparse_accounts, LayeredRoot, Parallelism};

/// Branch nodes changed since the last commit, by path (`None`: removed).
pub type NodeLayer = BTreeMap<Nibbles, Option<BranchNodeCompact>>;

/// One account's storage changed since the last commit.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct StorageLayer {
    /// The committed slots and storage trie are gone (self-destruct): only what is here.
    pub wiped: bool,
    /// Hashed slot to value (zero: the slot is empty).
    pub slots: BTreeMap<B256, U256>,
    /// The storage trie's branch nodes.
    pub nodes: NodeLayer,
}

/// The hashed tables' and trie tables' changes of the open group.
#[derive(Debug, Default, Clone)]
pub struct TrieLayer {
    /// Hashed account to state (`None`: the account does not exist).
    pub accounts: BTreeMap<B256, Option<AccountState>>,
    /// The account trie's branch nodes.
    pub account_nodes: NodeLayer,
    /// Each changed account's storage: its slots and storage trie nodes.
    pub storage: B256Map<StorageLayer>,
}

/// Heap bytes per layer entry, estimated: key and value with a B-tree's share of node
/// overhead (about half again), and for a branch node its hashes (about eight).
const ACCOUNT_ENTRY_BYTES: u64 = 170;
const SLOT_ENTRY_BYTES: u64 = 100;
const NODE_ENTRY_BYTES: u64 = 400;
const STORAGE_ENTRY_BYTES: u64 = 120;

impl TrieLayer {
    /// Whether it holds no change.
    pub fn is_empty(&self) -> bool {
        self.accounts.is_empty() && self.account_nodes.is_empty() && self.storage.is_empty()
    }

    /// The memory it holds, estimated from its entry counts (a pass over the accounts with
    /// storage changes, none for plain transfers).
    pub fn approx_bytes(&self) -> u64 {
        let storage: u64 = self
            .storage
            .values()
            .map(|s| {
                STORAGE_ENTRY_BYTES
                    + s.slots.len() as u64 * SLOT_ENTRY_BYTES
                    + s.nodes.len() as u64 * NODE_ENTRY_BYTES
            })
            .sum();
        self.accounts.len() as u64 * ACCOUNT_ENTRY_BYTES
            + self.account_nodes.len() as u64 * NODE_ENTRY_BYTES
            + storage
    }

    /// Takes in one block's changes by hashed key (`keys` fit `changes`): each account's
    /// state, and its slots; a wiped storage hides what the layer held of the account's
    /// slots and storage trie before (the stored ones are hidden by the wipe itself).
    pub fn write_block(&mut self, changes: &ChangeSet, keys: &HashedKeys) {
        for ((_, change), &h) in changes.accounts().iter().zip(keys.accounts()) {
            if change.storage_wiped {
                let entry = self.storage.entry(h).or_default();
                entry.wiped = true;
                entry.slots.clear();
                // Nodes of the trie the wipe took.
                entry.nodes.clear();
            }
            self.accounts.insert(h, change.state);
        }
        for ((_, _, value), &(h, s)) in changes.storage().iter().zip(keys.slots()) {
            self.storage.entry(h).or_default().slots.insert(s, *value);
        }
    }

    /// Records a walk's nodes: the entered ones replaced by its updates or removed.
    fn record(nodes: &mut NodeLayer, run: TrieRun) {
        // Most entered nodes come back as updates: each path goes into the (large) map
        // once, not once as removed and again as updated.
        for path in run.removed {
            if run
                .updates
                .binary_search_by(|(updated, _)| updated.cmp(&path))
                .is_err()
            {
                nodes.insert(path, None);
            }
        }
        for (path, node) in run.updates {
            nodes.insert(path, Some(node));
        }
    }

    /// Lays `later` (the writes made after this layer was taken for a root running
    /// meanwhile) over this one: its values win, and a storage it wiped hides this one's
    /// slots and nodes of that account.
    pub fn absorb(&mut self, later: TrieLayer) {
        self.accounts.extend(later.accounts);
        self.account_nodes.extend(later.account_nodes);
        for (address, storage) in later.storage {
            if storage.wiped {
                self.storage.insert(address, storage);
            } else {
                let entry = self.storage.entry(address).or_default();
                entry.slots.extend(storage.slots);
                entry.nodes.extend(storage.nodes);
            }
        }
    }

    /// Drops what `committed` (a layer the last commit now holds) holds with the same
    /// value: a read of the commit finds it there. What was written again since with
    /// another value stays, and so does a wiped storage unless nothing was written under
    /// it since (its wipe hides the commit's slots).
    pub fn prune_committed(&mut self, committed: &TrieLayer) {
        for (h, state) in &committed.accounts {
            if self.accounts.get(h) == Some(state) {
                self.accounts.remove(h);
            }
        }
        prune_nodes(&mut self.account_nodes, &committed.account_nodes);
        for (h, done) in &committed.storage {
            let Some(mine) = self.storage.get_mut(h) else {
                continue;
            };
            if mine.wiped {
                if mine == done {
                    self.storage.remove(h);
                }
                continue;
            }
            for (slot, value) in &done.slots {
                if mine.slots.get(slot) == Some(value) {
                    mine.slots.remove(slot);
                }
            }
            prune_nodes(&mut mine.nodes, &done.nodes);
            if mine.slots.is_empty() && mine.nodes.is_empty() {
                self.storage.remove(h);
            }
        }
    }

    /// Takes in the nodes a root computed, and returns what it did.
    pub fn record_root(&mut self, root: LayeredRoot) -> (RootOutcome, bool) {
        for (address, run) in root.storage {
            Self::record(&mut self.storage.entry(address).or_default().nodes, run);
        }
        Self::record(&mut self.account_nodes, root.accounts);
        (root.outcome, root.split)
    }
}

/// Drops from `nodes` the entries `committed` holds with the same value.
fn prune_nodes(nodes: &mut NodeLayer, committed: &NodeLayer) {
    for (path, node) in committed {
        if nodes.get(path) == Some(node) {
            nodes.remove(path);
        }
    }
}

/// A source that can find the first stored node at or after a path, whatever its prefix.
pub(crate) trait NodesFrom: TrieSource<Error = TrieDbError> {
    fn seek_node_from(&mut self, from: &Nibbles) -> Result<Found, TrieDbError>;
}

/// The path right after `path` in path order (its first possible descendant).
fn successor(path: &Nibbles) -> Nibbles {
    let mut next = *path;
    next.push(0);
    next
}

/// A committed trie (`inner`) with the layer's nodes and leaves (values `V`) laid over it.
pub(crate) struct Layered<'l, S: TrieSource<Error = TrieDbError>, V> {
    inner: S,
    nodes: &'l NodeLayer,
    leaves: &'l BTreeMap<B256, V>,
    /// A layer value as a leaf (`None`: no leaf there, an empty slot or a deleted account).
    leaf: fn(&V) -> Option<S::Leaf>,
    /// The committed trie is not there (a wiped storage trie).
    hidden: bool,
    /// The committed leaf the merge stands at, not yet returned.
    pending: Option<(B256, S::Leaf)>,
    /// The layer entry the merge stands at, not yet returned.
    next: Option<(B256, Option<S::Leaf>)>,
}

impl<'l, S: TrieSource<Error = TrieDbError>, V> Layered<'l, S, V> {
    pub(crate) fn new(
        inner: S,
        nodes: &'l NodeLayer,
        leaves: &'l BTreeMap<B256, V>,
        leaf: fn(&V) -> Option<S::Leaf>,
        hidden: bool,
    ) -> Self {
        Self {
            inner,
            nodes,
            leaves,
            leaf,
            hidden,
            pending: None,
            next: None,
        }
    }

    fn into_inner(self) -> S {
        self.inner
    }

    fn layer_from(&self, from: Bound<B256>) -> Option<(B256, Option<S::Leaf>)> {
        self.leaves
            .range((from, Bound::Unbounded))
            .next()
            .map(|(k, v)| (*k, (self.leaf)(v)))
    }

    fn advance_inner(&mut self) -> Result<(), TrieDbError> {
        self.pending = if self.hidden {
            None
        } else {
            self.inner.next_leaf()?
        };
        Ok(())
    }

    fn merged(&mut self) -> Result<Option<(B256, S::Leaf)>, TrieDbError> {
        loop {
            let layer_first = match (&self.pending, &self.next) {
                (None, None) => return Ok(None),
                (Some(_), None) => false,
                (None, Some(_)) => true,
                (Some((key, _)), Some((l_key, _))) => l_key <= key,
            };
            if !layer_first {
                let leaf = self.pending.take();
                self.advance_inner()?;
                return Ok(leaf);
            }
            let Some((key, leaf)) = self.next.take() else {
                return Ok(None);
            };
            if self.pending.as_ref().is_some_and(|(k, _)| *k == key) {
                self.advance_inner()?;
            }
            self.next = self.layer_from(Bound::Excluded(key));
            if let Some(leaf) = leaf {
                return Ok(Some((key, leaf)));
            }
        }
    }
}

impl<S: NodesFrom, V> TrieSource for Layered<'_, S, V> {
    type Leaf = S::Leaf;
    type Error = TrieDbError;

    fn seek_node(&mut self, path: &Nibbles) -> Result<Found, TrieDbError> {
        let layer = self
            .nodes
            .range(*path..)
            .take_while(|(k, _)| k.starts_with(path))
            .find_map(|(k, node)| node.as_ref().map(|n| (*k, n.clone())));
        if self.hidden || layer.as_ref().is_some_and(|(k, _)| k == path) {
            return Ok(layer);
        }
        let mut from = *path;
        loop {
            let Some((found, node)) = self
                .inner
                .seek_node_from(&from)?
                .filter(|(k, _)| k.starts_with(path))
            else {
                return Ok(layer);
            };
            if layer.as_ref().is_some_and(|(k, _)| *k <= found) {
                return Ok(layer);
            }
            // A committed node the layer names is one it removed (one it replaced would
            // sort at or before `found` in `layer`): look past it.
            if self.nodes.contains_key(&found) {
                from = successor(&found);
                continue;
            }
            return Ok(Some((found, node)));
        }
    }

    fn seek_leaf(&mut self, key: &B256) -> Result<Option<(B256, S::Leaf)>, TrieDbError> {
        self.pending = if self.hidden {
            None
        } else {
            self.inner.seek_leaf(key)?
        };
        self.next = self.layer_from(Bound::Included(*key));
        self.merged()
    }

    fn next_leaf(&mut self) -> Result<Option<(B256, S::Leaf)>, TrieDbError> {
        self.merged()
    }

    fn leaf_value(
        &mut self,
        key: &B256,
        leaf: &S::Leaf,
        out: &mut Vec<u8>,
    ) -> Result<(), TrieDbError> {
        self.inner.leaf_value(key, leaf, out)
    }
}

/// A layer's account value as a leaf.
pub fn account_leaf(state: &Option<AccountState>) -> Option<AccountState> {
    *state
}

/// A layer's slot value as a leaf (zero: no leaf).
pub fn slot_leaf(value: &U256) -> Option<U256> {
    (!value.is_zero()).then_some(*value)
}

#[cfg(test)]
mod tests {
    //! The merge of a committed trie with a layer, against the merged maps it stands for.

    use alloy_trie::TrieMask;

    use super::*;

    /// A committed trie in memory: nodes and leaves in sorted maps.
    #[derive(Default)]
    struct Committed {
        nodes: BTreeMap<Nibbles, BranchNodeCompact>,
        leaves: BTreeMap<B256, U256>,
        at: Option<B256>,
    }

    impl TrieSource for Committed {
        type Leaf = U256;
        type Error = TrieDbError;

        fn seek_node(&mut self, path: &Nibbles) -> Result<Found, TrieDbError> {
            Ok(self
                .seek_node_from(path)?
                .filter(|(k, _)| k.starts_with(path)))
        }

        fn seek_leaf(&mut self, key: &B256) -> Result<Option<(B256, U256)>, TrieDbError> {
            let found = self.leaves.range(*key..).next().map(|(k, v)| (*k, *v));
            self.at = found.map(|(k, _)| k);
            Ok(found)
        }

        fn next_leaf(&mut self) -> Result<Option<(B256, U256)>, TrieDbError> {
            let Some(at) = self.at else { return Ok(None) };
            let found = self
                .leaves
                .range((Bound::Excluded(at), Bound::Unbounded))
                .next()
                .map(|(k, v)| (*k, *v));
            self.at = found.map(|(k, _)| k);
            Ok(found)
        }

        fn leaf_value(&mut self, _: &B256, _: &U256, _: &mut Vec<u8>) -> Result<(), TrieDbError> {
            Ok(())
        }
    }

    impl NodesFrom for Committed {
        fn seek_node_from(&mut self, from: &Nibbles) -> Result<Found, TrieDbError> {
            Ok(self
                .nodes
                .range(*from..)
                .next()
                .map(|(k, n)| (*k, n.clone())))
        }
    }

    /// A node told apart by its root hash.
    fn node(tag: u8) -> BranchNodeCompact {
        BranchNodeCompact::new(
            TrieMask::new(0b11),
            TrieMask::new(0),
            TrieMask::new(0),
            vec![],
            Some(B256::repeat_byte(tag)),
        )
    }

    fn path(nibbles: &[u8]) -> Nibbles {
        Nibbles::from_nibbles(nibbles)
    }

    fn key(first: u8) -> B256 {
        B256::repeat_byte(first)
    }

    /// Every path the committed nodes and the layer name, with their prefixes.
    fn probes(committed: &Committed, layer: &NodeLayer) -> Vec<Nibbles> {
        let mut out = vec![Nibbles::new()];
        for p in committed.nodes.keys().chain(layer.keys()) {
            for len in 0..=p.len() {
                out.push(p.slice(..len));
            }
            out.push(successor(p));
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    #[test]
    fn node_seeks_equal_the_merged_tables() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for round in 0..300 {
            let mut committed = Committed::default();
            let mut layer = NodeLayer::new();
            let random_path = |next: &mut dyn FnMut() -> u64| {
                let len = (next() % 4) as usize;
                let nibbles: Vec<u8> = (0..len).map(|_| (next() % 3) as u8).collect();
                path(&nibbles)
            };
            for i in 0..(next() % 8) {
                committed
                    .nodes
                    .insert(random_path(&mut next), node(i as u8));
            }
            for i in 0..(next() % 8) {
                let value = (next() % 2 == 0).then(|| node(100 + i as u8));
                layer.insert(random_path(&mut next), value);
            }
            // What the writer's transaction would hold after the layer's writes.
            let mut merged = committed.nodes.clone();
            for (p, n) in &layer {
                match n {
                    Some(n) => merged.insert(*p, n.clone()),
                    None => merged.remove(p),
                };
            }
            let hidden = round % 10 == 0;
            if hidden {
                merged = layer
                    .iter()
                    .filter_map(|(p, n)| n.clone().map(|n| (*p, n)))
                    .collect();
            }
            let probes = probes(&committed, &layer);
            let leaves = BTreeMap::new();
            let mut source = Layered::new(committed, &layer, &leaves, slot_leaf, hidden);
            for probe in probes {
                let expected = merged
                    .range(probe..)
                    .next()
                    .filter(|(k, _)| k.starts_with(&probe))
                    .map(|(k, n)| (*k, n.clone()));
                assert_eq!(
                    source.seek_node(&probe).unwrap(),
                    expected,
                    "round {round}, seek under {probe:?}, layer {layer:?}"
                );
            }
        }
    }

    #[test]
    fn leaves_merge_in_key_order_with_replacements_and_removals() {
        let mut committed = Committed::default();
        for k in [1u8, 3, 5, 7] {
            committed.leaves.insert(key(k), U256::from(k));
        }
        // 2 added, 3 replaced, 5 emptied (removed), 9 added past the committed end.
        let layer: BTreeMap<B256, U256> = [(2u8, 20u64), (3, 30), (5, 0), (9, 90)]
            .into_iter()
            .map(|(k, v)| (key(k), U256::from(v)))
            .collect();
        let nodes = NodeLayer::new();
        let all = |source: &mut Layered<'_, Committed, U256>, from: u8| {
            let mut out = Vec::new();
            let mut leaf = source.seek_leaf(&key(from)).unwrap();
            while let Some((k, v)) = leaf {
                out.push((k[0], v.to::<u64>()));
                leaf = source.next_leaf().unwrap();
            }
            out
        };
        let mut source = Layered::new(committed, &nodes, &layer, slot_leaf, false);
        assert_eq!(
            all(&mut source, 0),
            [(1, 1), (2, 20), (3, 30), (7, 7), (9, 90)]
        );
        assert_eq!(all(&mut source, 3), [(3, 30), (7, 7), (9, 90)]);
        assert_eq!(all(&mut source, 4), [(7, 7), (9, 90)]);
        assert_eq!(all(&mut source, 8), [(9, 90)]);
        let committed = source.into_inner();
        let mut wiped = Layered::new(committed, &nodes, &layer, slot_leaf, true);
        assert_eq!(all(&mut wiped, 0), [(2, 20), (3, 30), (9, 90)]);
    }
}
