//! Prior values: each changed key's value before the block, which both the encoder and the
//! decoder need (values travel as deltas against them).
//!
//! The sequencer fills a [`PriorValues`] at seal time from the state it read before committing
//! (or reads its store through [`PriorState`] directly); a follower reads its own state, which
//! holds exactly the same values because it verified every earlier block. [`MemoryState`] is
//! a complete in-memory state for tests, the bench and simple followers.
//!
//! Two rules make both sides agree whatever their store: an account that does not exist counts
//! as (nonce 0, balance 0, no code), and the slots of an account whose storage the block wiped
//! count as zero (the codec applies that rule itself and never asks the store for them).

use alloy_primitives::map::{AddressMap, B256Map, U256Map};
use alloy_primitives::{Address, Bytes, B256, KECCAK256_EMPTY, U256};
use gigas_primitives::{AccountState, ChangeSet};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::StoreError;

/// What an absent account counts as.
pub const EMPTY_ACCOUNT: AccountState = AccountState {
    nonce: 0,
    balance: U256::ZERO,
    code_hash: KECCAK256_EMPTY,
};

/// The state before the block, as far as the codec needs it.
pub trait PriorState {
    /// The account before the block; `None` when it did not exist.
    fn account(&self, address: &Address) -> Result<Option<AccountState>, StoreError>;

    /// The slot's value before the block (zero when unset).
    fn slot(&self, address: &Address, slot: &U256) -> Result<U256, StoreError>;

    /// [`PriorState::account`] when the caller has `keccak(address)` already (`hashed`): a
    /// store kept by keccak reads with it instead of hashing again. The default ignores it.
    fn account_hashed(
        &self,
        address: &Address,
        hashed: &B256,
    ) -> Result<Option<AccountState>, StoreError> {
        let _ = hashed;
        self.account(address)
    }

    /// [`PriorState::slot`] with `keccak(address)` and `keccak(slot)` given, as
    /// [`PriorState::account_hashed`].
    fn slot_hashed(
        &self,
        address: &Address,
        slot: &U256,
        hashed: &(B256, B256),
    ) -> Result<U256, StoreError> {
        let _ = hashed;
        self.slot(address, slot)
    }
}

impl<T: PriorState + ?Sized> PriorState for &T {
    fn account(&self, address: &Address) -> Result<Option<AccountState>, StoreError> {
        (**self).account(address)
    }

    fn slot(&self, address: &Address, slot: &U256) -> Result<U256, StoreError> {
        (**self).slot(address, slot)
    }

    fn account_hashed(
        &self,
        address: &Address,
        hashed: &B256,
    ) -> Result<Option<AccountState>, StoreError> {
        (**self).account_hashed(address, hashed)
    }

    fn slot_hashed(
        &self,
        address: &Address,
        slot: &U256,
        hashed: &(B256, B256),
    ) -> Result<U256, StoreError> {
        (**self).slot_hashed(address, slot, hashed)
    }
}

/// The prior values of one block's changed keys, in sorted vectors (binary search). Asking
/// for a key it does not hold is an error, never a silent zero: a writer that forgot a key
/// would otherwise publish a diff that no follower can decode.
#[derive(Debug, Default)]
pub struct PriorValues {
    accounts: Vec<(Address, Option<AccountState>)>,
    slots: Vec<(Address, U256, U256)>,
    /// Where the last lookups ended: the encoder asks in the ChangeSet's order, which is this
    /// order, so the next key is usually the next entry and no search is needed.
    next_account: AtomicUsize,
    next_slot: AtomicUsize,
}

impl Clone for PriorValues {
    fn clone(&self) -> Self {
        Self::sorted(self.accounts.clone(), self.slots.clone())
    }
}

impl PartialEq for PriorValues {
    fn eq(&self, other: &Self) -> bool {
        self.accounts == other.accounts && self.slots == other.slots
    }
}

impl Eq for PriorValues {}

impl PriorValues {
    /// From the accounts' states (`None`: did not exist) and the slots' values before the
    /// block, in any order; of repeated keys the first is kept.
    pub fn new(
        mut accounts: Vec<(Address, Option<AccountState>)>,
        mut slots: Vec<(Address, U256, U256)>,
    ) -> Self {
        // Stable sorts keep the first of equal keys first, and dedup keeps it.
        accounts.sort_by_key(|a| a.0);
        accounts.dedup_by(|later, first| later.0 == first.0);
        slots.sort_by_key(|s| (s.0, s.1));
        slots.dedup_by(|later, first| (later.0, later.1) == (first.0, first.1));
        Self::sorted(accounts, slots)
    }

    pub(crate) fn sorted(
        accounts: Vec<(Address, Option<AccountState>)>,
        slots: Vec<(Address, U256, U256)>,
    ) -> Self {
        Self {
            accounts,
            slots,
            next_account: AtomicUsize::new(0),
            next_slot: AtomicUsize::new(0),
        }
    }

    /// Reads from `state` the prior value of every key `changes` writes (slots of accounts
    /// the block wiped excepted: they count as zero).
    pub fn capture(changes: &ChangeSet, state: &impl PriorState) -> Result<Self, StoreError> {
        let mut accounts = Vec::with_capacity(changes.accounts().len());
        for (address, _) in changes.accounts() {
            accounts.push((*address, state.account(address)?));
        }
        let wiped = wiped_addresses(changes);
        let mut slots = Vec::with_capacity(changes.storage().len());
        for (address, slot, _) in changes.storage() {
            if wiped.binary_search(address).is_err() {
                slots.push((*address, *slot, state.slot(address, slot)?));
            }
        }
        // Both lists come out of the ChangeSet's order: already sorted and unique.
        Ok(Self::sorted(accounts, slots))
    }

    /// Accounts held.
    pub fn accounts(&self) -> &[(Address, Option<AccountState>)] {
        &self.accounts
    }

    /// Slots held.
    pub fn slots(&self) -> &[(Address, U256, U256)] {
        &self.slots
    }
}

impl PriorState for PriorValues {
    fn account(&self, address: &Address) -> Result<Option<AccountState>, StoreError> {
        let hint = self.next_account.load(Ordering::Relaxed);
        let found = match self.accounts.get(hint) {
            Some((a, _)) if a == address => Ok(hint),
            _ => self.accounts.binary_search_by(|(a, _)| a.cmp(address)),
        };
        let i =
            found.map_err(|_| StoreError::msg(format!("no prior value for account {address}")))?;
        self.next_account.store(i + 1, Ordering::Relaxed);
        Ok(self.accounts[i].1)
    }

    fn slot(&self, address: &Address, slot: &U256) -> Result<U256, StoreError> {
        let hint = self.next_slot.load(Ordering::Relaxed);
        let found = match self.slots.get(hint) {
            Some((a, s, _)) if a == address && s == slot => Ok(hint),
            _ => self
                .slots
                .binary_search_by(|(a, s, _)| (a, s).cmp(&(address, slot))),
        };
        let i = found
            .map_err(|_| StoreError::msg(format!("no prior value for slot {slot} of {address}")))?;
        self.next_slot.store(i + 1, Ordering::Relaxed);
        Ok(self.slots[i].2)
    }
}

/// The addresses whose storage `changes` wipes, sorted (the ChangeSet's order).
pub(crate) fn wiped_addresses(changes: &ChangeSet) -> Vec<Address> {
    changes
        .accounts()
        .iter()
        .filter(|(_, c)| c.storage_wiped)
        .map(|(a, _)| *a)
        .collect()
}

/// A whole state in memory: accounts, storage and code, changed block by block with
/// [`MemoryState::apply`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryState {
    // alloy's maps hash fixed-size keys as whole words, seeded per process.
    accounts: AddressMap<AccountState>,
    storage: AddressMap<U256Map<U256>>,
    codes: B256Map<Bytes>,
}

impl MemoryState {
    /// An empty state.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets an account (genesis or a test's pre-state).
    pub fn insert_account(&mut self, address: Address, state: AccountState) {
        self.accounts.insert(address, state);
    }

    /// Sets a slot (zero removes it).
    pub fn insert_slot(&mut self, address: Address, slot: U256, value: U256) {
        if value.is_zero() {
            if let Some(slots) = self.storage.get_mut(&address) {
                slots.remove(&slot);
                if slots.is_empty() {
                    self.storage.remove(&address);
                }
            }
        } else {
            self.storage.entry(address).or_default().insert(slot, value);
        }
    }

    /// Adds a bytecode, by its hash.
    pub fn insert_code(&mut self, code: Bytes) {
        self.codes.insert(alloy_primitives::keccak256(&code), code);
    }

    /// Applies a block's changes: wipes first (a wiped account's old storage is gone as a
    /// whole), then accounts, slots and new code.
    pub fn apply(&mut self, changes: &ChangeSet) {
        for (address, change) in changes.accounts() {
            if change.storage_wiped {
                self.storage.remove(address);
            }
            match change.state {
                Some(state) => {
                    self.accounts.insert(*address, state);
                }
                None => {
                    self.accounts.remove(address);
                }
            }
        }
        for (address, slot, value) in changes.storage() {
            self.insert_slot(*address, *slot, *value);
        }
        for (hash, code) in changes.bytecodes() {
            self.codes.insert(*hash, code.clone());
        }
    }

    /// An account's state (`None`: it does not exist).
    pub fn account_state(&self, address: &Address) -> Option<AccountState> {
        self.accounts.get(address).copied()
    }

    /// A slot's value.
    pub fn slot_value(&self, address: &Address, slot: &U256) -> U256 {
        self.storage
            .get(address)
            .and_then(|s| s.get(slot))
            .copied()
            .unwrap_or_default()
    }

    /// A bytecode by its hash.
    pub fn code(&self, hash: &B256) -> Option<&Bytes> {
        self.codes.get(hash)
    }

    /// The lattice hash of the state (accounts and slots; the key index is not state:
    /// [`crate::commitment`]), from scratch.
    pub fn lattice(&self) -> gigas_primitives::LatticeHash {
        let mut sum = gigas_primitives::LatticeHash::zero();
        for (address, account) in &self.accounts {
            sum.add(&gigas_primitives::LatticeHash::account(address, account));
        }
        for (address, slots) in &self.storage {
            for (slot, value) in slots {
                sum.add_slot(address, slot, value);
            }
        }
        sum
    }

    /// Every account, in no order.
    pub fn accounts(&self) -> impl Iterator<Item = (&Address, &AccountState)> {
        self.accounts.iter()
    }

    /// Every non-zero slot (address, slot, value), in no order.
    pub fn slots(&self) -> impl Iterator<Item = (&Address, &U256, &U256)> {
        self.storage
            .iter()
            .flat_map(|(address, slots)| slots.iter().map(move |(s, v)| (address, s, v)))
    }

    /// Number of accounts.
    pub fn account_count(&self) -> usize {
        self.accounts.len()
    }

    /// Number of non-zero slots.
    pub fn slot_count(&self) -> usize {
        self.storage.values().map(|s| s.len()).sum()
    }
}

impl PriorState for MemoryState {
    fn account(&self, address: &Address) -> Result<Option<AccountState>, StoreError> {
        Ok(self.account_state(address))
    }

    fn slot(&self, address: &Address, slot: &U256) -> Result<U256, StoreError> {
        Ok(self.slot_value(address, slot))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gigas_primitives::ChangeSetBuilder;

    fn state(nonce: u64) -> AccountState {
        AccountState {
            nonce,
            balance: U256::from(nonce * 10),
            code_hash: KECCAK256_EMPTY,
        }
    }

    #[test]
    fn a_wipe_removes_old_storage_before_the_block_s_slots() {
        let a = Address::repeat_byte(1);
        let mut s = MemoryState::new();
        s.insert_account(a, state(1));
        s.insert_slot(a, U256::from(1), U256::from(5));
        s.insert_slot(a, U256::from(2), U256::from(6));
        let mut b = ChangeSetBuilder::new();
        b.destroyed(a);
        b.account(a, state(2), true);
        b.slot(a, U256::from(2), U256::from(9));
        s.apply(&b.build());
        assert_eq!(s.account_state(&a), Some(state(2)));
        assert_eq!(s.slot_value(&a, &U256::from(1)), U256::ZERO);
        assert_eq!(s.slot_value(&a, &U256::from(2)), U256::from(9));
        assert_eq!(s.slot_count(), 1);
    }

    #[test]
    fn prior_values_hold_what_was_captured_and_nothing_else() {
        let a = Address::repeat_byte(1);
        let w = Address::repeat_byte(2);
        let mut s = MemoryState::new();
        s.insert_account(a, state(3));
        s.insert_slot(a, U256::from(1), U256::from(5));
        s.insert_slot(w, U256::from(1), U256::from(5));
        let mut b = ChangeSetBuilder::new();
        b.account(a, state(4), false);
        b.slot(a, U256::from(1), U256::from(6));
        b.destroyed(w);
        b.slot(w, U256::from(1), U256::from(7));
        let changes = b.build();
        let prior = PriorValues::capture(&changes, &s).unwrap();
        assert_eq!(prior.account(&a).unwrap(), Some(state(3)));
        assert_eq!(prior.account(&w).unwrap(), None);
        assert_eq!(prior.slot(&a, &U256::from(1)).unwrap(), U256::from(5));
        // The wiped account's slot was not read.
        assert!(prior.slot(&w, &U256::from(1)).is_err());
        assert!(prior.account(&Address::repeat_byte(9)).is_err());
        let built = PriorValues::new(
            vec![(w, None), (a, Some(state(3))), (a, Some(state(8)))],
            vec![(a, U256::from(1), U256::from(5))],
        );
        assert_eq!(built, prior);
    }
}
