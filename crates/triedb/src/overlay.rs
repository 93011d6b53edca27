//! Proofs against a state that differs from the committed one in a few keys: a recent past
//! block's state, which the full node describes as the head's state with the values its undo
//! records give back (see the full node's `window` module).
//!
//! The walk needs no new machinery for it. Every overlaid key joins the changed-key set, so
//! the walk recomputes exactly the paths that lead to them and reads their leaves, which a
//! [`Layered`](crate::layer::Layered) source serves from the overlay (as a
//! [`TrieLayer`] of leaves only) merged with the hashed tables; every other
//! subtrie is the same in both states, so its stored hash holds. The root that comes out is
//! the past block's state root, which the caller checks against the one stored with the
//! block before it answers.

use std::collections::{HashMap, HashSet};

use alloy_primitives::{keccak256, Address, U256};
use gigas_primitives::AccountState;

use crate::layer::TrieLayer;

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

    /// How many keys it sets (accounts, slots and cleared storages).
    pub fn len(&self) -> usize {
        self.accounts.len() + self.slots.len() + self.cleared.len()
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

    /// The overlay by hashed keys, as a layer of leaves over the committed trie (a cleared
    /// account's committed slots and storage trie hidden).
    pub fn hashed(&self) -> TrieLayer {
        let mut layer = TrieLayer::default();
        for (address, state) in &self.accounts {
            layer.accounts.insert(keccak256(address), *state);
        }
        for address in &self.cleared {
            layer.storage.entry(keccak256(address)).or_default().wiped = true;
        }
        for ((address, slot), value) in &self.slots {
            layer
                .storage
                .entry(keccak256(address))
                .or_default()
                .slots
                .insert(keccak256(slot.to_be_bytes::<32>()), *value);
        }
        layer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(!storage.wiped);
        assert_eq!(storage.slots.len(), 2);
        assert!(storage.slots.values().any(|v| v.is_zero()));
        overlay.clear_storage(a);
        overlay.set_slot(a, U256::from(3), U256::from(7));
        assert_eq!(overlay.slot(&a, &U256::from(1)), Some(U256::from(5)));
        assert_eq!(overlay.slot(&a, &U256::from(3)), Some(U256::ZERO));
        assert_eq!(overlay.slot(&a, &U256::from(4)), Some(U256::ZERO));
        let hashed = overlay.hashed();
        assert!(hashed.storage[&keccak256(a)].wiped);
        assert_eq!(hashed.storage[&keccak256(a)].slots.len(), 2);
    }
}
