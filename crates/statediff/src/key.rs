//! State keys and their enumeration indices.
//!
//! A key gets the next index (0, 1, 2, ...) the first time a diff writes it, in the order the
//! diff lists its first writes, and keeps it forever, also after the account is destroyed or
//! the slot deleted. The table is a pure function of the diff stream: the sequencer and every
//! follower derive the same one without exchanging it. Encoding and decoding only read the
//! table; the caller extends it with a diff's new keys once the diff is durable (writer) or
//! decoded and verified (follower), so a refused diff leaves no trace.

use alloy_primitives::{Address, U256};
use std::hash::{BuildHasher, Hasher};

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
/// vectors; a `u32` per index locates it, and a hash table of (index, locator) pairs finds a
/// key's index by hashing the key and comparing against the packed bytes, one memory access
/// away. That is about 33 bytes per account key and 65 per slot key, plus the table's growth
/// slack: 10 million account keys take about 350 MB, where a `HashMap<StateKey, u64>` beside
/// a `Vec<StateKey>` would take about 1.4 GB. Holds up to 2^31 keys of each kind.
#[derive(Clone)]
pub struct MemoryKeyIndex {
    accounts: Vec<[u8; 20]>,
    slots: Vec<[u8; 52]>,
    /// Per index: bit 31 set for a slot, the low bits its position in `accounts` or `slots`.
    locators: Vec<u32>,
    /// Per key: its index in the high 32 bits, its locator in the low 32.
    table: hashbrown::HashTable<u64>,
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

fn pack_slot(address: &Address, slot: &U256) -> [u8; 52] {
    let mut out = [0u8; 52];
    out[..20].copy_from_slice(address.as_slice());
    out[20..].copy_from_slice(&slot.to_be_bytes::<32>());
    out
}

fn word(bytes: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(w)
}

/// Hashes a packed key as whole words (the slice path of a hasher is several times slower on
/// these short keys).
fn hash_packed(hasher: &foldhash::quality::RandomState, bytes: &[u8]) -> u64 {
    let mut h = hasher.build_hasher();
    let mut at = 0;
    while at + 8 <= bytes.len() {
        h.write_u64(word(bytes, at));
        at += 8;
    }
    let mut tail = [0u8; 4];
    tail.copy_from_slice(&bytes[at..]);
    h.write_u32(u32::from_le_bytes(tail));
    h.finish()
}

const fn entry(index: u32, locator: u32) -> u64 {
    (index as u64) << 32 | locator as u64
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
            // hashbrown: one control byte and one u64 per bucket; buckets ~ capacity * 8 / 7.
            + self.table.capacity() * 8 / 7 * 9
    }

    fn bytes_at(&self, locator: u32) -> &[u8] {
        let position = (locator & !SLOT_BIT) as usize;
        if locator & SLOT_BIT == 0 {
            &self.accounts[position]
        } else {
            &self.slots[position]
        }
    }

    fn find(&self, key: &StateKey) -> Option<u32> {
        let packed;
        let bytes: &[u8] = match key {
            StateKey::Account(address) => address.as_slice(),
            StateKey::Slot(address, slot) => {
                packed = pack_slot(address, slot);
                &packed
            }
        };
        let is_slot = matches!(key, StateKey::Slot(..));
        let hash = hash_packed(&self.hasher, bytes);
        self.table
            .find(hash, |&e| {
                let locator = e as u32;
                (locator & SLOT_BIT != 0) == is_slot && self.bytes_at(locator) == bytes
            })
            .map(|&e| (e >> 32) as u32)
    }

    /// Gives `new_keys` the next indices, in order. Call it with a diff's new keys only after
    /// the diff is durable (writer) or decoded and verified (follower). Refuses, changing
    /// nothing, a key that already has an index (or appears twice) and a table that would
    /// outgrow 2^31 keys of a kind.
    pub fn extend(&mut self, new_keys: &[StateKey]) -> Result<(), StoreError> {
        let start = self.locators.len();
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
        {
            let Self {
                table,
                hasher,
                accounts,
                slots,
                ..
            } = self;
            table.reserve(new_keys.len(), |&e| {
                let locator = e as u32;
                let position = (locator & !SLOT_BIT) as usize;
                if locator & SLOT_BIT == 0 {
                    hash_packed(hasher, &accounts[position])
                } else {
                    hash_packed(hasher, &slots[position])
                }
            });
        }
        for (n, key) in new_keys.iter().enumerate() {
            if let Some(existing) = self.find(key) {
                self.truncate(start);
                return Err(StoreError::msg(format!(
                    "new key {n} of {} ({key:?}) already has index {existing}",
                    new_keys.len()
                )));
            }
            let index = self.locators.len() as u32;
            let locator = match key {
                StateKey::Account(address) => {
                    self.accounts.push(address.0 .0);
                    (self.accounts.len() - 1) as u32
                }
                StateKey::Slot(address, slot) => {
                    self.slots.push(pack_slot(address, slot));
                    (self.slots.len() - 1) as u32 | SLOT_BIT
                }
            };
            self.locators.push(locator);
            let hash = hash_packed(&self.hasher, self.bytes_at(locator));
            let Self {
                table,
                hasher,
                accounts,
                slots,
                ..
            } = self;
            table.insert_unique(hash, entry(index, locator), |&e| {
                let locator = e as u32;
                let position = (locator & !SLOT_BIT) as usize;
                if locator & SLOT_BIT == 0 {
                    hash_packed(hasher, &accounts[position])
                } else {
                    hash_packed(hasher, &slots[position])
                }
            });
        }
        Ok(())
    }

    /// Undoes a partial [`Self::extend`]: removes the keys from index `start` on.
    fn truncate(&mut self, start: usize) {
        for index in (start..self.locators.len()).rev() {
            let locator = self.locators[index];
            let hash = hash_packed(&self.hasher, self.bytes_at(locator));
            let wanted = entry(index as u32, locator);
            if let Ok(found) = self.table.find_entry(hash, |&e| e == wanted) {
                found.remove();
            }
            if locator & SLOT_BIT == 0 {
                self.accounts.pop();
            } else {
                self.slots.pop();
            }
        }
        self.locators.truncate(start);
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
        let locator = self.locators[index as usize];
        let bytes = self.bytes_at(locator);
        let address = Address::from_slice(&bytes[..20]);
        Ok(Some(if locator & SLOT_BIT == 0 {
            StateKey::Account(address)
        } else {
            StateKey::Slot(address, U256::from_be_slice(&bytes[20..]))
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
