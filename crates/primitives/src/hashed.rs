//! The keccak of every key a block changes, computed once where the block is made (the
//! sequencer) or decoded (a follower) and carried to each step that names keys by it: the
//! prior-value reads of a store kept by keccak (the full node's), the lattice delta, and the
//! hashed tables and the trie (both nodes'), which is why it sits beside the ChangeSet.
//!
//! Why: a changed account's `keccak(address)` was computed three times per block (decode,
//! lattice, write), and a slot's two keccaks as often; on one core that was about 3 % of a
//! follower's time (`gigas-bench fullnode`, `perf`).
//!
//! The hashes are only as good as their alignment with the ChangeSet they came with, so the
//! type keeps them private: they are made here, by [`HashedKeys::of`] or by the decoder from the
//! same keys in the same order, and a consumer checks [`HashedKeys::fits`] before it trusts
//! them (a mismatch is a caller's bug, refused as an error).

use crate::keccak::keccak256_all;
use crate::ChangeSet;
use alloy_primitives::{keccak256, Address, B256, U256};

/// The keccak of each changed key of one ChangeSet, in the ChangeSet's order: one hash per
/// account of [`ChangeSet::accounts`], one (address hash, slot hash) per entry of
/// [`ChangeSet::storage`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HashedKeys {
    accounts: Vec<B256>,
    slots: Vec<(B256, B256)>,
}

/// `(keccak(address), keccak(slot))` of each key, in order: the slots hashed together
/// ([`keccak256_all`]), an address once per run of its slots. What [`HashedKeys::of`] and
/// the diff decoder both hash a block's slots with.
pub fn slot_hashes<'a, I>(keys: I) -> Vec<(B256, B256)>
where
    I: Iterator<Item = (&'a Address, &'a U256)> + Clone,
{
    let words: Vec<[u8; 32]> = keys.clone().map(|(_, slot)| slot.to_be_bytes()).collect();
    let mut runs = AddressRuns::default();
    keys.zip(keccak256_all(words.iter().map(|w| w.as_slice())))
        .map(|((address, _), slot)| (runs.hash(address), slot))
        .collect()
}

impl HashedKeys {
    /// Hashes every key of `changes` (an address once per run of its slots).
    pub fn of(changes: &ChangeSet) -> Self {
        let accounts = keccak256_all(changes.accounts().iter().map(|(a, _)| a.as_slice()));
        let slots = slot_hashes(changes.storage().iter().map(|(a, slot, _)| (a, slot)));
        Self { accounts, slots }
    }

    /// Built by a decoder from the keys it hashed in the ChangeSet's order (with
    /// [`slot_hashes`] for the slots); consumers still check [`HashedKeys::fits`].
    pub fn from_parts(accounts: Vec<B256>, slots: Vec<(B256, B256)>) -> Self {
        Self { accounts, slots }
    }

    /// `keccak(address)` of each changed account, in [`ChangeSet::accounts`]' order.
    pub fn accounts(&self) -> &[B256] {
        &self.accounts
    }

    /// `(keccak(address), keccak(slot))` of each changed slot, in [`ChangeSet::storage`]'s
    /// order (the slot as its 32 big-endian bytes).
    pub fn slots(&self) -> &[(B256, B256)] {
        &self.slots
    }

    /// Whether these hashes can belong to `changes`: one per account and one per slot.
    /// (Their values are right by construction; tests check them against [`HashedKeys::of`].)
    pub fn fits(&self, changes: &ChangeSet) -> bool {
        self.accounts.len() == changes.accounts().len()
            && self.slots.len() == changes.storage().len()
    }
}

/// Hashes addresses that come in runs (a ChangeSet's slots, sorted by address) once per run.
#[derive(Debug, Default)]
pub struct AddressRuns {
    last: Option<(Address, B256)>,
}

impl AddressRuns {
    /// `keccak(address)`, from the last call when the address is the same.
    pub fn hash(&mut self, address: &Address) -> B256 {
        match self.last {
            Some((a, h)) if a == *address => h,
            _ => {
                let h = keccak256(address);
                self.last = Some((*address, h));
                h
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AccountState, ChangeSetBuilder};
    use alloy_primitives::U256;

    #[test]
    fn of_hashes_each_key_in_the_changesets_order() {
        let mut b = ChangeSetBuilder::new();
        let (a, c) = (Address::with_last_byte(2), Address::with_last_byte(9));
        let state = AccountState {
            nonce: 1,
            balance: U256::from(5),
            code_hash: alloy_primitives::KECCAK256_EMPTY,
        };
        b.account(c, state, false);
        b.account(a, state, false);
        b.slot(c, U256::from(7), U256::from(1));
        b.slot(a, U256::from(3), U256::from(1));
        b.slot(a, U256::from(1), U256::from(1));
        let changes = b.build();
        let hashed = HashedKeys::of(&changes);
        assert!(hashed.fits(&changes));
        for ((address, _), h) in changes.accounts().iter().zip(hashed.accounts()) {
            assert_eq!(*h, keccak256(address));
        }
        for ((address, slot, _), (ha, hs)) in changes.storage().iter().zip(hashed.slots()) {
            assert_eq!(*ha, keccak256(address));
            assert_eq!(*hs, keccak256(slot.to_be_bytes::<32>()));
        }
        assert_eq!(hashed.slots().len(), 3);
        assert!(!HashedKeys::default().fits(&changes));
    }
}
