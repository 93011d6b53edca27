//! Multi-version memory: every write of every transaction, keyed by location, then by the
//! writing transaction's index.
//!
//! Layout: 64 shards, each a mutex over a hash map (foldhash) from location to a vector of
//! `(tx index, incarnation, value or ESTIMATE)` sorted by index. A read by transaction `i` is
//! the entry with the greatest index below `i`, found by binary search, so a read costs one
//! shard lock, one hash lookup and a few comparisons, and writers of different locations
//! rarely share a lock. Most locations are written by one or two transactions of a block, so a
//! sorted vector (one allocation, contiguous) beats a tree; a hot location written by every
//! transaction (a counter, a popular balance) costs a shift on insert, which is cheap next to
//! executing the transaction that writes it.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::sync::Mutex;

use alloy_primitives::{Address, U256};
use revm::state::AccountInfo;

use crate::scheduler::Version;

/// A piece of state a transaction reads or writes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Location {
    /// An account's balance, nonce and code.
    Account(Address),
    /// The event "this account's storage was wiped" (created or self-destructed).
    StorageReset(Address),
    /// A storage slot.
    Slot(Address, U256),
    /// The fee transaction `i` owes the beneficiary, paid in block order at the end. Read only
    /// by transactions that read the beneficiary's account.
    Fee(usize),
}

/// A value written to a location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// The account after the write; `None` once self-destructed.
    Account(Option<AccountInfo>),
    /// Storage was wiped.
    StorageReset,
    /// A slot's value.
    Slot(U256),
    /// A beneficiary fee.
    Fee(U256),
}

/// Where a read got its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// From the state before the block.
    Base,
    /// From the write of this incarnation of an earlier transaction.
    Written(Version),
}

/// What a read finds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadResult {
    /// No earlier transaction wrote the location.
    NotFound,
    /// An earlier transaction wrote it.
    Value(Version, Value),
    /// The latest earlier writer was aborted and will write again: wait for it.
    Estimate(usize),
}

/// A recorded read: location and where its value came from.
pub type Read = (Location, Origin);

#[derive(Debug, Clone)]
enum Entry {
    Written(usize, Value),
    Estimate,
}

const SHARDS: usize = 64;

/// Writes of one location, sorted by transaction index.
type Versions = Vec<(usize, Entry)>;

type Shard = HashMap<Location, Versions, foldhash::fast::RandomState>;

/// The multi-version memory of one block.
pub struct MvMemory {
    shards: Vec<Mutex<Shard>>,
    hasher: foldhash::fast::RandomState,
    last_writes: Vec<Mutex<Vec<Location>>>,
    last_reads: Vec<Mutex<Vec<Read>>>,
    /// `Fee(i)` is written only by transaction `i`: a slot per transaction, no hashing.
    fees: Vec<Mutex<Option<Entry>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl MvMemory {
    /// Memory for `len` transactions.
    pub fn new(len: usize) -> Self {
        Self {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(HashMap::default()))
                .collect(),
            hasher: foldhash::fast::RandomState::default(),
            last_writes: (0..len).map(|_| Mutex::new(Vec::new())).collect(),
            last_reads: (0..len).map(|_| Mutex::new(Vec::new())).collect(),
            fees: (0..len).map(|_| Mutex::new(None)).collect(),
        }
    }

    fn fee_slot(&self, location: &Location) -> Option<&Mutex<Option<Entry>>> {
        match location {
            Location::Fee(j) => self.fees.get(*j),
            _ => None,
        }
    }

    fn shard(&self, location: &Location) -> &Mutex<Shard> {
        &self.shards[(self.hasher.hash_one(location) as usize) % SHARDS]
    }

    /// The value of `location` as transaction `idx` sees it.
    pub fn read(&self, location: &Location, idx: usize) -> ReadResult {
        if let Location::Fee(j) = *location {
            if j >= idx {
                return ReadResult::NotFound;
            }
            return match self.fees.get(j).map(|f| lock(f).clone()) {
                None | Some(None) => ReadResult::NotFound,
                Some(Some(Entry::Estimate)) => ReadResult::Estimate(j),
                Some(Some(Entry::Written(incarnation, value))) => {
                    ReadResult::Value((j, incarnation), value)
                }
            };
        }
        let shard = lock(self.shard(location));
        let Some(versions) = shard.get(location) else {
            return ReadResult::NotFound;
        };
        let below = versions.partition_point(|(writer, _)| *writer < idx);
        match below.checked_sub(1).map(|i| &versions[i]) {
            None => ReadResult::NotFound,
            Some((writer, Entry::Estimate)) => ReadResult::Estimate(*writer),
            Some((writer, Entry::Written(incarnation, value))) => {
                ReadResult::Value((*writer, *incarnation), value.clone())
            }
        }
    }

    /// Records what an incarnation read and wrote. Returns whether it wrote a location the
    /// previous incarnation did not.
    pub fn record(
        &self,
        version: Version,
        reads: Vec<Read>,
        writes: Vec<(Location, Value)>,
    ) -> bool {
        let (idx, incarnation) = version;
        let mut previous = std::mem::take(&mut *lock(&self.last_writes[idx]));
        let mut wrote_new = false;
        let mut locations = Vec::with_capacity(writes.len());
        for (location, value) in writes {
            match previous.iter().position(|p| *p == location) {
                Some(i) => {
                    previous.swap_remove(i);
                }
                None => wrote_new = true,
            }
            let entry = Entry::Written(incarnation, value);
            if let Some(slot) = self.fee_slot(&location) {
                *lock(slot) = Some(entry);
                locations.push(location);
                continue;
            }
            {
                let mut shard = lock(self.shard(&location));
                let versions = shard.entry(location.clone()).or_default();
                match versions.binary_search_by_key(&idx, |(writer, _)| *writer) {
                    Ok(i) => versions[i].1 = entry,
                    Err(i) => versions.insert(i, (idx, entry)),
                }
            }
            locations.push(location);
        }
        // Locations the previous incarnation wrote and this one did not.
        for stale in previous {
            if let Some(slot) = self.fee_slot(&stale) {
                *lock(slot) = None;
                continue;
            }
            if let Some(versions) = lock(self.shard(&stale)).get_mut(&stale) {
                if let Ok(i) = versions.binary_search_by_key(&idx, |(writer, _)| *writer) {
                    versions.remove(i);
                }
            }
        }
        *lock(&self.last_writes[idx]) = locations;
        *lock(&self.last_reads[idx]) = reads;
        wrote_new
    }

    /// Turns an aborted incarnation's writes into ESTIMATE markers, so that readers wait for
    /// the next incarnation instead of using values that are likely to change.
    pub fn convert_writes_to_estimates(&self, idx: usize) {
        for location in lock(&self.last_writes[idx]).iter() {
            if let Some(slot) = self.fee_slot(location) {
                *lock(slot) = Some(Entry::Estimate);
                continue;
            }
            if let Some(versions) = lock(self.shard(location)).get_mut(location) {
                if let Ok(i) = versions.binary_search_by_key(&idx, |(writer, _)| *writer) {
                    versions[i].1 = Entry::Estimate;
                }
            }
        }
    }

    /// Whether every read of transaction `idx` would still find the same origin.
    pub fn validate_read_set(&self, idx: usize) -> bool {
        let reads = lock(&self.last_reads[idx]);
        reads
            .iter()
            .all(|(location, origin)| self.origin(location, idx) == Some(*origin))
    }

    /// Where a read of `location` by `idx` would come from now; `None` for an ESTIMATE. Like
    /// [`Self::read`] without cloning the value.
    fn origin(&self, location: &Location, idx: usize) -> Option<Origin> {
        if let Location::Fee(_) = location {
            return match self.read(location, idx) {
                ReadResult::NotFound => Some(Origin::Base),
                ReadResult::Value(version, _) => Some(Origin::Written(version)),
                ReadResult::Estimate(_) => None,
            };
        }
        let shard = lock(self.shard(location));
        let Some(versions) = shard.get(location) else {
            return Some(Origin::Base);
        };
        let below = versions.partition_point(|(writer, _)| *writer < idx);
        match below.checked_sub(1).map(|i| &versions[i]) {
            None => Some(Origin::Base),
            Some((_, Entry::Estimate)) => None,
            Some((writer, Entry::Written(incarnation, _))) => {
                Some(Origin::Written((*writer, *incarnation)))
            }
        }
    }
}
