//! The state root from scratch: every account and slot hashed, sorted and fed to alloy-trie's
//! own root functions, with nothing stored and nothing kept between calls. It is the check an
//! incremental root is held to, and it reads a store that keeps no trie (the sequencer's
//! Vilmo, by address) as a trie would see it.
//!
//! It holds the whole state in memory, and hashes it on one thread: 10M accounts read from
//! the sequencer's store took 28 s (`gigas-sequencer state-root`).

use std::collections::HashMap;

use alloy_primitives::{Address, B256, U256};
use alloy_trie::root::{state_root_unhashed, storage_root_unhashed};
use alloy_trie::TrieAccount;
use gigas_primitives::AccountState;

use crate::error::TrieError;

/// A state collected account by account and slot by slot, in any order.
#[derive(Debug, Default)]
pub struct ScratchState {
    accounts: HashMap<Address, AccountState>,
    storage: HashMap<Address, Vec<(B256, U256)>>,
    slots: u64,
}

impl ScratchState {
    /// An empty state.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `address`'s account.
    pub fn account(&mut self, address: Address, state: AccountState) {
        self.accounts.insert(address, state);
    }

    /// Adds a non-zero slot of `address` (a zero slot is no leaf, and is skipped).
    pub fn slot(&mut self, address: Address, slot: U256, value: U256) {
        if value.is_zero() {
            return;
        }
        self.storage
            .entry(address)
            .or_default()
            .push((B256::from(slot), value));
        self.slots += 1;
    }

    /// Accounts collected.
    pub fn accounts(&self) -> usize {
        self.accounts.len()
    }

    /// Non-zero slots collected.
    pub fn slots(&self) -> u64 {
        self.slots
    }

    /// The Ethereum state root of what was collected. Slots of an address with no account
    /// are an inconsistent state, refused with the address.
    pub fn root(self) -> Result<B256, TrieError> {
        let Self {
            accounts,
            mut storage,
            ..
        } = self;
        let trie_accounts: Vec<(Address, TrieAccount)> = accounts
            .into_iter()
            .map(|(address, state)| {
                let storage_root =
                    storage_root_unhashed(storage.remove(&address).unwrap_or_default());
                let account = TrieAccount {
                    nonce: state.nonce,
                    balance: state.balance,
                    storage_root,
                    code_hash: state.code_hash,
                };
                (address, account)
            })
            .collect();
        if let Some(address) = storage.keys().next() {
            return Err(TrieError::SlotsWithoutAccount { address: *address });
        }
        Ok(state_root_unhashed(trie_accounts))
    }
}

#[cfg(test)]
mod tests {
    use alloy_primitives::{address, keccak256, KECCAK256_EMPTY};
    use alloy_trie::EMPTY_ROOT_HASH;

    use super::*;

    #[test]
    fn the_empty_state_and_a_known_root() {
        assert_eq!(ScratchState::new().root().unwrap(), EMPTY_ROOT_HASH);
        // One account with no storage: the root is the hash of the one-leaf trie, a leaf
        // node over the whole hashed address.
        let who = address!("0x00000000000000000000000000000000000000aa");
        let mut state = ScratchState::new();
        state.account(
            who,
            AccountState {
                nonce: 1,
                balance: U256::from(7),
                code_hash: KECCAK256_EMPTY,
            },
        );
        let leaf = alloy_rlp::encode(TrieAccount {
            nonce: 1,
            balance: U256::from(7),
            storage_root: EMPTY_ROOT_HASH,
            code_hash: KECCAK256_EMPTY,
        });
        let mut hb = alloy_trie::HashBuilder::default();
        hb.add_leaf(alloy_trie::Nibbles::unpack(keccak256(who)), &leaf);
        assert_eq!(state.root().unwrap(), hb.root());
    }

    #[test]
    fn zero_slots_are_no_leaves_and_orphan_slots_are_refused() {
        let who = address!("0x00000000000000000000000000000000000000bb");
        let account = AccountState {
            nonce: 0,
            balance: U256::from(1),
            code_hash: KECCAK256_EMPTY,
        };
        let mut with_zero = ScratchState::new();
        with_zero.account(who, account);
        with_zero.slot(who, U256::from(1), U256::ZERO);
        let mut plain = ScratchState::new();
        plain.account(who, account);
        assert_eq!(with_zero.slots(), 0);
        assert_eq!(with_zero.root().unwrap(), plain.root().unwrap());

        let mut orphan = ScratchState::new();
        orphan.slot(who, U256::from(1), U256::from(2));
        assert_eq!(
            orphan.root(),
            Err(TrieError::SlotsWithoutAccount { address: who })
        );
    }
}
