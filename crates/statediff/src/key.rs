//! State keys and their enumeration indices.
//!
//! A key gets the next index (0, 1, 2, ...) the first time a diff writes it, in the order the
//! diff lists its first writes, and keeps it forever, also after the account is destroyed or
//! the slot deleted. The table is a pure function of the diff stream: the sequencer and every
//! follower derive the same one without exchanging it. Encoding and decoding only read the
//! table; the caller extends it with a diff's new keys once the diff is durable (writer) or
//! decoded and verified (follower), so a refused diff leaves no trace.

use alloy_primitives::{Address, U256};
use std::hash::BuildHasher;

use crate::error::StoreError;

/// A key of the state: an account, or one storage slot of an account.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StateKey {
    /// An account's nonce, balance and code hash.
    Account(Address),
    /// A storage slot.
    Slot(Address, U256),
}

/// The enumeration index table, read-only. The full node implements it over MDBX; tests and
/// the bench use [`MemoryKeyIndex`].
pub trait KeyIndex {
    /// The key's index, if a diff has written it.
    fn index_of(&self, key: &StateKey) -> Result<Option<u64>, StoreError>;

    /// The key with this index, if there is one.
    fn key_at(&self, index: u64) -> Result<Option<StateKey>, StoreError>;

    /// Number of keys (the next index to assign).
    fn len(&self) -> Result<u64, StoreError>;

    /// Whether no key has an index yet.
    fn is_empty(&self) -> Result<bool, StoreError> {
        Ok(self.len()? == 0)
    }
}

const SLOT_BIT: u32 = 1 << 31;

/// The enumeration index table in memory.
///
/// Each key is stored once, packed (20 bytes for an account, 52 for a slot), in one of two
/// vectors; a `u32` per index locates it, and a hash table of `u32` indices finds a key's index
/// by hashing the key and comparing against the packed bytes. That is about 29 bytes per
/// account key and 61 per slot key (plus the table's growth slack): 10 million account keys
/// take about 300 MB, where a `HashMap<StateKey, u64>` beside a `Vec<StateKey>` would take
/// about 1.4 GB. Holds up to 2^31 keys of each kind.
#[derive(Clone)]
pub struct MemoryKeyIndex {
    accounts: Vec<[u8; 20]>,
    slots: Vec<[u8; 52]>,
    /// Per index: bit 31 set for a slot, the low bits its position in `accounts` or `slots`.
    locators: Vec<u32>,
    /// Indices, hashed by their key.
    table: hashbrown::HashTable<u32>,
    /// Keys come from the chain, which anyone can write to: a per-process random seed keeps
    /// crafted keys from colliding on purpose.
    hasher: foldhash::quality::RandomState,
}

impl std::fmt::Debug for MemoryKeyIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryKeyIndex")
            .field("accounts", &self.accounts.len())
            .field("slots", &self.slots.len())
            .finish_non_exhaustive()
    }
}

impl Default for MemoryKeyIndex {
    fn default() -> Self {
        Self::new()
    }
}

enum Packed<'a> {
    Account(&'a [u8; 20]),
    Slot(&'a [u8; 52]),
}

fn pack_slot(address: &Address, slot: &U256) -> [u8; 52] {
    let mut out = [0u8; 52];
    out[..20].copy_from_slice(address.as_slice());
    out[20..].copy_from_slice(&slot.to_be_bytes::<32>());
    out
}

impl MemoryKeyIndex {
    /// An empty table.
    pub fn new() -> Self {
        Self {
            accounts: Vec::new(),
            slots: Vec::new(),
            locators: Vec::new(),
            table: hashbrown::HashTable::new(),
            hasher: foldhash::quality::RandomState::default(),
        }
    }

    /// Number of keys.
    pub fn key_count(&self) -> u64 {
        self.locators.len() as u64
    }

    /// Bytes of memory held (capacities, not lengths), for reports.
    pub fn memory_bytes(&self) -> usize {
        self.accounts.capacity() * 20
            + self.slots.capacity() * 52
            + self.locators.capacity() * 4
            // hashbrown: one control byte and one u32 per bucket; buckets ~ capacity * 8 / 7.
            + self.table.capacity() * 8 / 7 * 5
    }

    fn packed(&self, index: u32) -> Packed<'_> {
        let locator = self.locators[index as usize];
        let position = (locator & !SLOT_BIT) as usize;
        if locator & SLOT_BIT == 0 {
            Packed::Account(&self.accounts[position])
        } else {
            Packed::Slot(&self.slots[position])
        }
    }

    fn hash_packed(hasher: &foldhash::quality::RandomState, packed: &Packed<'_>) -> u64 {
        match packed {
            Packed::Account(bytes) => hasher.hash_one(&bytes[..]),
            Packed::Slot(bytes) => hasher.hash_one(&bytes[..]),
        }
    }

    fn find(&self, key: &StateKey) -> Option<u32> {
        match key {
            StateKey::Account(address) => {
                let bytes: &[u8; 20] = &address.0 .0;
                let hash = self.hasher.hash_one(&bytes[..]);
                self.table
                    .find(
                        hash,
                        |&i| matches!(self.packed(i), Packed::Account(b) if b == bytes),
                    )
                    .copied()
            }
            StateKey::Slot(address, slot) => {
                let bytes = pack_slot(address, slot);
                let hash = self.hasher.hash_one(&bytes[..]);
                self.table
                    .find(
                        hash,
                        |&i| matches!(self.packed(i), Packed::Slot(b) if *b == bytes),
                    )
                    .copied()
            }
        }
    }

    /// Gives `new_keys` the next indices, in order. Call it with a diff's new keys only after
    /// the diff is durable (writer) or decoded and verified (follower). Refuses, changing
    /// nothing, a key that already has an index (or appears twice) and a table that would
    /// outgrow 2^31 keys of a kind.
    pub fn extend(&mut self, new_keys: &[StateKey]) -> Result<(), StoreError> {
        let start = (
            self.accounts.len(),
            self.slots.len(),
            self.locators.len(),
            self.table.len(),
        );
        let slots = new_keys
            .iter()
            .filter(|k| matches!(k, StateKey::Slot(..)))
            .count();
        let accounts = new_keys.len() - slots;
        if self.accounts.len() + accounts >= SLOT_BIT as usize
            || self.slots.len() + slots >= SLOT_BIT as usize
            || self.locators.len() + new_keys.len() >= u32::MAX as usize
        {
            return Err(StoreError::msg(
                "the in-memory key index is full (2^31 keys of a kind)",
            ));
        }
        self.accounts.reserve(accounts);
        self.slots.reserve(slots);
        self.locators.reserve(new_keys.len());
        for (n, key) in new_keys.iter().enumerate() {
            if let Some(existing) = self.find(key) {
                self.truncate(start);
                return Err(StoreError::msg(format!(
                    "new key {n} of {} ({key:?}) already has index {existing}",
                    new_keys.len()
                )));
            }
            let index = self.locators.len() as u32;
            match key {
                StateKey::Account(address) => {
                    self.locators.push(self.accounts.len() as u32);
                    self.accounts.push(address.0 .0);
                }
                StateKey::Slot(address, slot) => {
                    self.locators.push(self.slots.len() as u32 | SLOT_BIT);
                    self.slots.push(pack_slot(address, slot));
                }
            }
            let hash = Self::hash_packed(&self.hasher, &self.packed(index));
            let Self {
                table,
                hasher,
                accounts,
                slots,
                locators,
            } = self;
            table.insert_unique(hash, index, |&i| {
                let locator = locators[i as usize];
                let position = (locator & !SLOT_BIT) as usize;
                if locator & SLOT_BIT == 0 {
                    hasher.hash_one(&accounts[position][..])
                } else {
                    hasher.hash_one(&slots[position][..])
                }
            });
        }
        Ok(())
    }

    /// Undoes a partial [`Self::extend`]: removes every index from the table that the
    /// vectors' lengths in `start` do not cover.
    fn truncate(&mut self, start: (usize, usize, usize, usize)) {
        let (accounts, slots, locators, _) = start;
        for index in (locators..self.locators.len()).rev() {
            let index = index as u32;
            let hash = Self::hash_packed(&self.hasher, &self.packed(index));
            if let Ok(entry) = self.table.find_entry(hash, |&i| i == index) {
                entry.remove();
            }
        }
        self.accounts.truncate(accounts);
        self.slots.truncate(slots);
        self.locators.truncate(locators);
    }
}

impl KeyIndex for MemoryKeyIndex {
    fn index_of(&self, key: &StateKey) -> Result<Option<u64>, StoreError> {
        Ok(self.find(key).map(u64::from))
    }

    fn key_at(&self, index: u64) -> Result<Option<StateKey>, StoreError> {
        if index >= self.locators.len() as u64 {
            return Ok(None);
        }
        Ok(Some(match self.packed(index as u32) {
            Packed::Account(bytes) => StateKey::Account(Address::from(*bytes)),
            Packed::Slot(bytes) => StateKey::Slot(
                Address::from_slice(&bytes[..20]),
                U256::from_be_slice(&bytes[20..]),
            ),
        }))
    }

    fn len(&self) -> Result<u64, StoreError> {
        Ok(self.locators.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_follow_first_writes_and_refusals_change_nothing() {
        let mut index = MemoryKeyIndex::new();
        let a = StateKey::Account(Address::repeat_byte(1));
        let s = StateKey::Slot(Address::repeat_byte(1), U256::from(7));
        let b = StateKey::Account(Address::repeat_byte(2));
        index.extend(&[a, s]).unwrap();
        index.extend(&[b]).unwrap();
        assert_eq!(index.index_of(&a).unwrap(), Some(0));
        assert_eq!(index.index_of(&s).unwrap(), Some(1));
        assert_eq!(index.index_of(&b).unwrap(), Some(2));
        assert_eq!(index.key_at(1).unwrap(), Some(s));
        assert_eq!(index.key_at(3).unwrap(), None);
        // A key already present, or one listed twice: refused, the table unchanged.
        let c = StateKey::Slot(Address::repeat_byte(3), U256::MAX);
        assert!(index.extend(&[c, a]).is_err());
        assert!(index.extend(&[c, c]).is_err());
        assert_eq!(index.len().unwrap(), 3);
        assert_eq!(index.index_of(&c).unwrap(), None);
        index.extend(&[c]).unwrap();
        assert_eq!(index.index_of(&c).unwrap(), Some(3));
        assert_eq!(index.key_at(3).unwrap(), Some(c));
    }

    #[test]
    fn many_keys_survive_table_growth() {
        let mut index = MemoryKeyIndex::new();
        let keys: Vec<StateKey> = (0..50_000u64)
            .map(|i| {
                let address = Address::from_word(alloy_primitives::B256::from(U256::from(i)));
                if i % 3 == 0 {
                    StateKey::Slot(address, U256::from(i * 7))
                } else {
                    StateKey::Account(address)
                }
            })
            .collect();
        for chunk in keys.chunks(999) {
            index.extend(chunk).unwrap();
        }
        for (i, key) in keys.iter().enumerate() {
            assert_eq!(index.index_of(key).unwrap(), Some(i as u64));
            assert_eq!(index.key_at(i as u64).unwrap().as_ref(), Some(key));
        }
        assert!(index.memory_bytes() > 0);
    }
}
