//! Proofs against a state that differs from the committed one in a few keys: a recent past
//! block's state, which the full node describes as the head's state with the values its undo
//! records give back (see the full node's `window` module).
//!
//! The walk needs no new machinery for it. Every overlaid key joins the changed-key set, so
//! the walk recomputes exactly the paths that lead to them and reads their leaves, which an
//! [`Overlaid`] source serves from the overlay merged with the hashed tables; every other
//! subtrie is the same in both states, so its stored hash holds. The root that comes out is
//! the past block's state root, which the caller checks against the one stored with the
//! block before it answers.

use std::collections::{HashMap, HashSet};

use alloy_primitives::{keccak256, Address, B256, U256};
use alloy_trie::{BranchNodeCompact, Nibbles};
use gigas_primitives::AccountState;

use crate::error::StateDbError;
use crate::trie::walk::TrieSource;

/// A state described as the committed state with some keys set to other values.
#[derive(Debug, Clone, Default)]
pub struct StateOverlay {
    accounts: HashMap<Address, Option<AccountState>>,
    slots: HashMap<(Address, U256), U256>,
    cleared: HashSet<Address>,
}

impl StateOverlay {
    /// No difference: the committed state.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.accounts.is_empty() && self.slots.is_empty() && self.cleared.is_empty()
    }

    /// The account's state in this state (`None`: it does not exist). The first value set
    /// for a key stays: a caller walking undo records from the oldest block sets each key to
    /// its oldest value.
    pub fn set_account(&mut self, address: Address, state: Option<AccountState>) {
        self.accounts.entry(address).or_insert(state);
    }

    /// A slot's value in this state; the first value set stays, as for accounts, and a
    /// slot of a cleared account is set already.
    pub fn set_slot(&mut self, address: Address, slot: U256, value: U256) {
        if !self.cleared.contains(&address) {
            self.slots.entry((address, slot)).or_insert(value);
        }
    }

    /// Every slot of the account not set yet is empty in this state, whatever the committed
    /// state holds.
    pub fn clear_storage(&mut self, address: Address) {
        self.cleared.insert(address);
    }

    /// The account as this state has it, if the overlay says.
    pub fn account(&self, address: &Address) -> Option<Option<AccountState>> {
        self.accounts.get(address).copied()
    }

    /// The slot as this state has it, if the overlay says.
    pub fn slot(&self, address: &Address, slot: &U256) -> Option<U256> {
        let set = self.slots.get(&(*address, *slot)).copied();
        set.or_else(|| self.cleared.contains(address).then_some(U256::ZERO))
    }

    /// The overlay by hashed keys, sorted, as the trie walks them.
    pub(crate) fn hashed(&self) -> HashedOverlay {
        let mut accounts: Vec<(B256, Option<AccountState>)> = self
            .accounts
            .iter()
            .map(|(address, state)| (keccak256(address), *state))
            .collect();
        accounts.sort_unstable_by_key(|(k, _)| *k);
        let mut storage: HashMap<B256, HashedStorage> = HashMap::new();
        for address in &self.cleared {
            storage.entry(keccak256(address)).or_default().cleared = true;
        }
        for ((address, slot), value) in &self.slots {
            let entry = storage.entry(keccak256(address)).or_default();
            let value = (!value.is_zero()).then_some(*value);
            entry
                .slots
                .push((keccak256(slot.to_be_bytes::<32>()), value));
        }
        for entry in storage.values_mut() {
            entry.slots.sort_unstable_by_key(|(k, _)| *k);
        }
        HashedOverlay { accounts, storage }
    }
}

/// One account's overlaid storage, by hashed slot.
#[derive(Debug, Default)]
pub(crate) struct HashedStorage {
    /// The committed slots are not there at all (only `slots`).
    pub(crate) cleared: bool,
    /// Sorted; `None`: the slot is empty.
    pub(crate) slots: Vec<(B256, Option<U256>)>,
}

/// [`StateOverlay`] by hashed keys.
#[derive(Debug, Default)]
pub(crate) struct HashedOverlay {
    /// Sorted; `None`: the account does not exist.
    pub(crate) accounts: Vec<(B256, Option<AccountState>)>,
    pub(crate) storage: HashMap<B256, HashedStorage>,
}

/// A trie source with some leaves replaced, added or removed: the committed leaves merged, in
/// key order, with the overlay's.
pub(crate) struct Overlaid<'o, S: TrieSource> {
    inner: S,
    entries: &'o [(B256, Option<S::Leaf>)],
    /// The committed trie is not there (its stored nodes and leaves are ignored).
    hidden: bool,
    /// The committed leaf the merge stands at, not yet returned.
    pending: Option<(B256, S::Leaf)>,
    /// The overlay entry the merge stands at.
    at: usize,
}

impl<'o, S: TrieSource> Overlaid<'o, S> {
    pub(crate) fn new(inner: S, entries: &'o [(B256, Option<S::Leaf>)], hidden: bool) -> Self {
        Self {
            inner,
            entries,
            hidden,
            pending: None,
            at: 0,
        }
    }

    fn advance_inner(&mut self) -> Result<(), StateDbError> {
        self.pending = if self.hidden {
            None
        } else {
            self.inner.next_leaf()?
        };
        Ok(())
    }

    fn merged(&mut self) -> Result<Option<(B256, S::Leaf)>, StateDbError>
    where
        S::Leaf: Clone,
    {
        loop {
            let overlay = self.entries.get(self.at);
            match (&self.pending, overlay) {
                (None, None) => return Ok(None),
                (Some((key, _)), Some((o_key, _))) if key < o_key => {}
                (Some(_), None) => {}
                (pending, Some((o_key, value))) => {
                    // The overlay's entry comes first, or replaces the committed leaf.
                    if pending.as_ref().is_some_and(|(key, _)| key == o_key) {
                        self.advance_inner()?;
                    }
                    self.at += 1;
                    match value {
                        Some(leaf) => return Ok(Some((*o_key, leaf.clone()))),
                        None => continue,
                    }
                }
            }
            let leaf = self.pending.take();
            self.advance_inner()?;
            return Ok(leaf);
        }
    }
}

impl<S: TrieSource> TrieSource for Overlaid<'_, S>
where
    S::Leaf: Clone,
{
    type Leaf = S::Leaf;

    fn seek_node(
        &mut self,
        path: &Nibbles,
    ) -> Result<Option<(Nibbles, BranchNodeCompact)>, StateDbError> {
        if self.hidden {
            return Ok(None);
        }
        self.inner.seek_node(path)
    }

    fn seek_leaf(&mut self, key: &B256) -> Result<Option<(B256, S::Leaf)>, StateDbError> {
        self.pending = if self.hidden {
            None
        } else {
            self.inner.seek_leaf(key)?
        };
        self.at = self.entries.partition_point(|(k, _)| k < key);
        self.merged()
    }

    fn next_leaf(&mut self) -> Result<Option<(B256, S::Leaf)>, StateDbError> {
        self.merged()
    }

    fn leaf_value(
        &mut self,
        key: &B256,
        leaf: &S::Leaf,
        out: &mut Vec<u8>,
    ) -> Result<(), StateDbError> {
        self.inner.leaf_value(key, leaf, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Leaves from a sorted vector, no stored nodes.
    struct Plain {
        leaves: Vec<(B256, U256)>,
        at: usize,
    }

    impl TrieSource for Plain {
        type Leaf = U256;

        fn seek_node(
            &mut self,
            _: &Nibbles,
        ) -> Result<Option<(Nibbles, BranchNodeCompact)>, StateDbError> {
            Ok(None)
        }

        fn seek_leaf(&mut self, key: &B256) -> Result<Option<(B256, U256)>, StateDbError> {
            self.at = self.leaves.partition_point(|(k, _)| k < key);
            self.next_leaf()
        }

        fn next_leaf(&mut self) -> Result<Option<(B256, U256)>, StateDbError> {
            let leaf = self.leaves.get(self.at).copied();
            self.at += 1;
            Ok(leaf)
        }

        fn leaf_value(&mut self, _: &B256, _: &U256, _: &mut Vec<u8>) -> Result<(), StateDbError> {
            Ok(())
        }
    }

    fn key(i: u8) -> B256 {
        B256::with_last_byte(i)
    }

    fn all(source: &mut impl TrieSource<Leaf = U256>, from: u8) -> Vec<(u8, u64)> {
        let mut out = Vec::new();
        let mut next = source.seek_leaf(&key(from)).unwrap();
        while let Some((k, v)) = next {
            out.push((k[31], v.to::<u64>()));
            next = source.next_leaf().unwrap();
        }
        out
    }

    #[test]
    fn the_merge_replaces_adds_and_removes_leaves_in_key_order() {
        let committed = |at| Plain {
            leaves: [2u8, 4, 6, 8]
                .iter()
                .map(|i| (key(*i), U256::from(*i)))
                .collect(),
            at,
        };
        let entries = vec![
            (key(1), Some(U256::from(100))),
            (key(4), None),
            (key(6), Some(U256::from(600))),
            (key(7), None),
            (key(9), Some(U256::from(900))),
        ];
        let mut merged = Overlaid::new(committed(0), &entries, false);
        assert_eq!(
            all(&mut merged, 0),
            vec![(1, 100), (2, 2), (6, 600), (8, 8), (9, 900)]
        );
        assert_eq!(all(&mut merged, 5), vec![(6, 600), (8, 8), (9, 900)]);
        assert_eq!(all(&mut merged, 9), vec![(9, 900)]);
        assert_eq!(all(&mut merged, 10), vec![]);
        let mut hidden = Overlaid::new(committed(0), &entries, true);
        assert_eq!(all(&mut hidden, 0), vec![(1, 100), (6, 600), (9, 900)]);
    }

    #[test]
    fn the_first_value_set_stays_and_clearing_sets_the_rest() {
        let a = Address::with_last_byte(1);
        let mut overlay = StateOverlay::new();
        overlay.set_slot(a, U256::from(1), U256::from(5));
        overlay.set_slot(a, U256::from(1), U256::from(6));
        overlay.set_slot(a, U256::from(2), U256::ZERO);
        assert_eq!(overlay.slot(&a, &U256::from(1)), Some(U256::from(5)));
        let hashed = overlay.hashed();
        let storage = &hashed.storage[&keccak256(a)];
        assert!(!storage.cleared);
        assert_eq!(storage.slots.len(), 2);
        assert!(storage.slots.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(storage.slots.iter().any(|(_, v)| v.is_none()));
        overlay.clear_storage(a);
        overlay.set_slot(a, U256::from(3), U256::from(7));
        assert_eq!(overlay.slot(&a, &U256::from(1)), Some(U256::from(5)));
        assert_eq!(overlay.slot(&a, &U256::from(3)), Some(U256::ZERO));
        assert_eq!(overlay.slot(&a, &U256::from(4)), Some(U256::ZERO));
        let hashed = overlay.hashed();
        assert!(hashed.storage[&keccak256(a)].cleared);
        assert_eq!(hashed.storage[&keccak256(a)].slots.len(), 2);
    }
}
