//! The in-memory index of live keys: key -> (file, offset of its put record).
//!
//! Keys are not stored in memory. An entry holds the key's 64-bit hash and where its put
//! record starts; the key itself is read back from the memory-mapped log to confirm a match.
//! That costs one access to the mapped record on lookup, which a read needs anyway for the
//! value, and keeps an entry at 16 bytes: with the hash table's control byte and load factor
//! between 7/16 and 7/8, 19 to 39 bytes per live key, whatever the key's length.
//!
//! Small values are not inlined: the entry must point at the record to verify the key, and the
//! value sits right after the key in the same cache lines.

use std::hash::BuildHasher;

use hashbrown::HashTable;

/// Where a key's current put record starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Location {
    /// The log file.
    pub file: u32,
    /// Byte offset of the record in the file.
    pub offset: u32,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    hash: u64,
    location: Location,
}

/// The index. `key_at` callbacks resolve a location to the key stored there.
pub(crate) struct Index {
    table: HashTable<Entry>,
    hasher: foldhash::fast::RandomState,
}

impl Default for Index {
    fn default() -> Self {
        Self {
            table: HashTable::new(),
            hasher: foldhash::fast::RandomState::default(),
        }
    }
}

impl Index {
    /// The hash of a key.
    #[inline]
    pub(crate) fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// Live keys.
    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether no key is live.
    pub(crate) fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Bytes the table occupies (entries and control bytes).
    pub(crate) fn memory_bytes(&self) -> usize {
        let buckets = self.table.capacity().max(1).next_power_of_two() * 8 / 7;
        buckets * (std::mem::size_of::<Entry>() + 1)
    }

    /// Where `key` lives.
    #[inline]
    pub(crate) fn get<'a>(
        &self,
        key: &[u8],
        key_at: impl Fn(Location) -> &'a [u8],
    ) -> Option<Location> {
        self.get_hashed(self.hash(key), key, key_at)
    }

    /// Where `key`, whose hash is `hash`, lives.
    #[inline]
    pub(crate) fn get_hashed<'a>(
        &self,
        hash: u64,
        key: &[u8],
        key_at: impl Fn(Location) -> &'a [u8],
    ) -> Option<Location> {
        self.table
            .find(hash, |e| e.hash == hash && key_at(e.location) == key)
            .map(|e| e.location)
    }

    /// Points the key with hash `hash`, known to live at `old` (or to be absent), at
    /// `location`. Matching the entry by location instead of by key saves reading the old
    /// record; `insert` is the fallback should the hint be stale.
    #[inline]
    pub(crate) fn insert_hinted<'a>(
        &mut self,
        hash: u64,
        key: &[u8],
        old: Option<Location>,
        location: Location,
        key_at: impl Fn(Location) -> &'a [u8],
    ) -> Option<Location> {
        match old {
            Some(old) => {
                if let Some(entry) = self
                    .table
                    .find_mut(hash, |e| e.hash == hash && e.location == old)
                {
                    entry.location = location;
                    return Some(old);
                }
            }
            None => {
                // The hint comes from a lookup under the same state: the key is absent.
                debug_assert!(self
                    .table
                    .find(hash, |e| e.hash == hash && key_at(e.location) == key)
                    .is_none());
                self.table
                    .insert_unique(hash, Entry { hash, location }, |e| e.hash);
                return None;
            }
        }
        debug_assert!(false, "stale index hint");
        self.insert(key, location, key_at)
    }

    /// Points `key` at `location`, returning where it lived before.
    #[inline]
    pub(crate) fn insert<'a>(
        &mut self,
        key: &[u8],
        location: Location,
        key_at: impl Fn(Location) -> &'a [u8],
    ) -> Option<Location> {
        let hash = self.hash(key);
        match self.table.entry(
            hash,
            |e| e.hash == hash && key_at(e.location) == key,
            |e| e.hash,
        ) {
            hashbrown::hash_table::Entry::Occupied(mut occupied) => {
                let previous = occupied.get().location;
                occupied.get_mut().location = location;
                Some(previous)
            }
            hashbrown::hash_table::Entry::Vacant(vacant) => {
                vacant.insert(Entry { hash, location });
                None
            }
        }
    }

    /// Removes `key`, returning where it lived.
    #[inline]
    pub(crate) fn remove<'a>(
        &mut self,
        key: &[u8],
        key_at: impl Fn(Location) -> &'a [u8],
    ) -> Option<Location> {
        let hash = self.hash(key);
        match self
            .table
            .find_entry(hash, |e| e.hash == hash && key_at(e.location) == key)
        {
            Ok(occupied) => Some(occupied.remove().0.location),
            Err(_) => None,
        }
    }

    /// Every live location, in no particular order.
    pub(crate) fn locations(&self) -> impl Iterator<Item = Location> + '_ {
        self.table.iter().map(|e| e.location)
    }
}
