//! Multi-version memory: every write of every transaction, keyed by location, then by the
//! writing transaction's index.
//!
//! Layout: 64 shards, each a mutex over a hash map from location to a `BTreeMap` of
//! `tx index -> (incarnation, value or ESTIMATE)`. A read by transaction `i` is the entry with
//! the greatest index below `i` (`range(..i).next_back()`), so a read costs one shard lock, one
//! hash lookup and one tree step, and writers of different locations rarely share a lock.
//! Block sizes (hundreds to a few thousand transactions) keep the trees shallow; a location
//! written by few transactions (most of them) holds a one- or two-entry tree.

use std::collections::{BTreeMap, HashMap};
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

type Shard = HashMap<Location, BTreeMap<usize, Entry>>;

/// The multi-version memory of one block.
pub struct MvMemory {
    shards: Vec<Mutex<Shard>>,
    hasher: std::hash::RandomState,
    last_writes: Vec<Mutex<Vec<Location>>>,
    last_reads: Vec<Mutex<Vec<Read>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl MvMemory {
    /// Memory for `len` transactions.
    pub fn new(len: usize) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: std::hash::RandomState::new(),
            last_writes: (0..len).map(|_| Mutex::new(Vec::new())).collect(),
            last_reads: (0..len).map(|_| Mutex::new(Vec::new())).collect(),
        }
    }

    fn shard(&self, location: &Location) -> &Mutex<Shard> {
        &self.shards[(self.hasher.hash_one(location) as usize) % SHARDS]
    }

    /// The value of `location` as transaction `idx` sees it.
    pub fn read(&self, location: &Location, idx: usize) -> ReadResult {
        let shard = lock(self.shard(location));
        let Some(tree) = shard.get(location) else {
            return ReadResult::NotFound;
        };
        match tree.range(..idx).next_back() {
            None => ReadResult::NotFound,
            Some((&writer, Entry::Estimate)) => ReadResult::Estimate(writer),
            Some((&writer, Entry::Written(incarnation, value))) => {
                ReadResult::Value((writer, *incarnation), value.clone())
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
            lock(self.shard(&location))
                .entry(location.clone())
                .or_default()
                .insert(idx, Entry::Written(incarnation, value));
            locations.push(location);
        }
        // Locations the previous incarnation wrote and this one did not.
        for stale in previous {
            if let Some(tree) = lock(self.shard(&stale)).get_mut(&stale) {
                tree.remove(&idx);
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
            if let Some(tree) = lock(self.shard(location)).get_mut(location) {
                tree.insert(idx, Entry::Estimate);
            }
        }
    }

    /// Whether every read of transaction `idx` would still find the same origin.
    pub fn validate_read_set(&self, idx: usize) -> bool {
        let reads = lock(&self.last_reads[idx]);
        reads.iter().all(
            |(location, origin)| match (self.read(location, idx), origin) {
                (ReadResult::NotFound, Origin::Base) => true,
                (ReadResult::Value(version, _), Origin::Written(read)) => version == *read,
                _ => false,
            },
        )
    }
}
