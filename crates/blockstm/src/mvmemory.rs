//! Multi-version memory: every write of every transaction, keyed by location, then by the
//! writing transaction's index.
//!
//! Layout, chosen by profiling a block of 10,000 transfers (where the machinery, not the EVM,
//! is the cost):
//!
//! - A location is hashed once (foldhash). Bits 40..46 of that hash pick one of 64 shards, and
//!   the same hash finds the location in the shard's `hashbrown::HashTable`, so a read costs one
//!   hash, one uncontended lock and one probe. (The bits that pick the shard are neither the
//!   table's bucket bits, the low ones, nor its tag bits, the top seven: taking either would
//!   crowd a shard's keys into a fraction of its buckets or make every tag match.)
//! - Each location holds its writes as a vector sorted by transaction index with the first
//!   write stored inline (`SmallVec<[_; 1]>`): most locations of a block are written by one
//!   transaction, and the heap allocation per location (and its free when the block's memory
//!   is dropped) cost more than the rest of a write.
//! - A read by transaction `i` is the entry with the greatest index below `i`, by binary
//!   search. A hot location written by every transaction (a counter, a popular balance) costs a
//!   shift on insert, which is cheap next to executing the transaction that writes it.
//! - Accounts are stored without their code (code lives in one map by code hash), so a version
//!   is a copy of a few words and no reference count is touched on read.
//! - Per transaction, the last incarnation's read set and written locations live in one slot;
//!   the worker's buffers are swapped in and out, so a steady-state execution allocates
//!   nothing here.
//! - The fee each transaction owes the beneficiary has a slot per transaction, not a hashed
//!   location: only transaction `i` writes `Fee(i)`.
//! - A filter of one bit per hash bucket (2^20 bits) marks locations written in the block,
//!   set before each write. Most reads are of locations no other transaction writes (a
//!   sender's account, a token balance, a contract's storage-wipe marker read on every SLOAD):
//!   they find the bit clear and return without a lock. Without it, two workers reading one
//!   hot contract's slots took turns on one shard's lock; a read that races with a write sees
//!   the state before the write, which validation (run after the writer finishes) catches as
//!   with any early read.

use std::fmt;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use alloy_primitives::{Address, U256};
use hashbrown::HashTable;
use revm::state::AccountInfo;
use smallvec::SmallVec;

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
    /// The account after the write (its code, if any, is looked up by hash); `None` once
    /// self-destructed.
    Account(Option<AccountInfo>),
    /// Storage was wiped.
    StorageReset,
    /// A slot's value.
    Slot(U256),
    /// A beneficiary fee.
    Fee(U256),
}

/// Where a read got its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// From the state before the block.
    Base,
    /// From the write of this incarnation of an earlier transaction, with the value read.
    /// Still valid while the location holds an equal value, whoever wrote it.
    Written(Version, Value),
    /// Like [`Origin::Written`], for a read whose meaning depends on which transaction wrote
    /// the value and not only on the value: a slot and a storage wipe of the same account
    /// (whichever came last decides what the slot holds) and the beneficiary's account (the
    /// fees of the transactions after its writer are added to it). Another transaction's
    /// equal value changes what the reader made of it, so the read is still valid only while
    /// the same transaction is the latest writer (in any incarnation that wrote an equal
    /// value).
    WrittenBy(Version, Value),
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

/// Bits of the written-location filter: 128 KiB, cleared per block; about 3% of unwritten
/// locations take the locked path in a block writing 30,000 locations.
const FILTER_BITS: usize = 1 << 20;

/// Writes of one location, sorted by transaction index; the first one inline.
type Versions = SmallVec<[(usize, Entry); 1]>;

type Shard = HashTable<(Location, Versions)>;

/// What the last incarnation of a transaction read and wrote.
#[derive(Debug, Default)]
struct TxRecord {
    reads: Vec<Read>,
    writes: Vec<Location>,
}

/// Pads a shard lock to its own cache line, so that two workers locking neighbouring shards
/// do not invalidate each other's line.
#[repr(align(128))]
struct Padded<T>(T);

/// The multi-version memory of one block.
pub struct MvMemory {
    shards: Box<[Padded<Mutex<Shard>>]>,
    hasher: foldhash::fast::FixedState,
    /// Per transaction; may be longer than the block (kept from a larger one), the rest unused.
    records: Vec<Mutex<TxRecord>>,
    /// `Fee(i)` is written only by transaction `i`: a slot per transaction, no hashing.
    fees: Vec<Mutex<Option<Entry>>>,
    /// One bit per hash bucket of locations written in this block, set before the write:
    /// a read of a location whose bit is clear finds nothing without taking a lock.
    written: Box<[AtomicU64]>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn shard_index(hash: u64) -> usize {
    ((hash >> 40) as usize) % SHARDS
}

/// The latest entry of `versions` written by a transaction below `idx`.
fn latest_below(versions: &Versions, idx: usize) -> Option<&(usize, Entry)> {
    let below = versions.partition_point(|(writer, _)| *writer < idx);
    below.checked_sub(1).map(|i| &versions[i])
}

impl fmt::Debug for MvMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MvMemory")
            .field("shards", &self.shards.len())
            .field("transactions", &self.records.len())
            .finish_non_exhaustive()
    }
}

impl MvMemory {
    /// Memory for `len` transactions.
    pub fn new(len: usize) -> Self {
        let mut memory = Self {
            shards: (0..SHARDS)
                .map(|_| Padded(Mutex::new(HashTable::new())))
                .collect(),
            hasher: foldhash::fast::FixedState::default(),
            records: Vec::new(),
            fees: Vec::new(),
            written: (0..FILTER_BITS / 64).map(|_| AtomicU64::new(0)).collect(),
        };
        memory.reset(len);
        memory
    }

    /// Empties the memory for a block of `len` transactions, keeping its allocations: a
    /// sequencer executes block after block, and fresh tables would be paid for in page faults
    /// on every block.
    pub fn reset(&mut self, len: usize) {
        // Most transactions write two or three locations; sizing the tables up front avoids
        // rehashing while workers hold the shard locks.
        let per_shard = (len * 3).div_ceil(SHARDS);
        let hasher = self.hasher.clone();
        for shard in self.shards.iter_mut() {
            let table = shard
                .0
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            table.clear();
            table.reserve(per_shard, |(l, _)| hasher.hash_one(l));
        }
        for word in self.written.iter_mut() {
            *word.get_mut() = 0;
        }
        for record in self.records.iter_mut().take(len) {
            let record = record
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            record.reads.clear();
            record.writes.clear();
        }
        for fee in self.fees.iter_mut().take(len) {
            *fee.get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
        }
        self.records
            .resize_with(len.max(self.records.len()), Default::default);
        self.fees
            .resize_with(len.max(self.fees.len()), Default::default);
    }

    fn hash(&self, location: &Location) -> u64 {
        self.hasher.hash_one(location)
    }

    /// Marks `hash`'s bucket written. Called before the write is inserted, so a reader that
    /// sees the bit clear reads as if before the write (which validation then catches).
    fn mark_written(&self, hash: u64) {
        let bit = (hash as usize) % FILTER_BITS;
        self.written[bit / 64].fetch_or(1 << (bit % 64), Ordering::SeqCst);
    }

    /// Whether a location with `hash` may have been written in this block.
    fn maybe_written(&self, hash: u64) -> bool {
        let bit = (hash as usize) % FILTER_BITS;
        self.written[bit / 64].load(Ordering::SeqCst) & (1 << (bit % 64)) != 0
    }

    fn shard(&self, hash: u64) -> std::sync::MutexGuard<'_, Shard> {
        lock(&self.shards[shard_index(hash)].0)
    }

    fn fee_read(&self, j: usize, idx: usize) -> ReadResult {
        if j >= idx {
            return ReadResult::NotFound;
        }
        match self.fees.get(j).map(|f| lock(f).clone()) {
            None | Some(None) => ReadResult::NotFound,
            Some(Some(Entry::Estimate)) => ReadResult::Estimate(j),
            Some(Some(Entry::Written(incarnation, value))) => {
                ReadResult::Value((j, incarnation), value)
            }
        }
    }

    /// The value of `location` as transaction `idx` sees it.
    pub fn read(&self, location: &Location, idx: usize) -> ReadResult {
        if let Location::Fee(j) = *location {
            return self.fee_read(j, idx);
        }
        let hash = self.hash(location);
        if !self.maybe_written(hash) {
            return ReadResult::NotFound;
        }
        let shard = self.shard(hash);
        let Some((_, versions)) = shard.find(hash, |(l, _)| l == location) else {
            return ReadResult::NotFound;
        };
        match latest_below(versions, idx) {
            None => ReadResult::NotFound,
            Some((writer, Entry::Estimate)) => ReadResult::Estimate(*writer),
            Some((writer, Entry::Written(incarnation, value))) => {
                ReadResult::Value((*writer, *incarnation), value.clone())
            }
        }
    }

    fn write(&self, location: Location, idx: usize, entry: Entry) {
        if let Location::Fee(j) = location {
            if let Some(slot) = self.fees.get(j) {
                *lock(slot) = Some(entry);
            }
            return;
        }
        let hash = self.hash(&location);
        self.mark_written(hash);
        let mut shard = self.shard(hash);
        let hasher = &self.hasher;
        let (_, versions) = shard
            .entry(hash, |(l, _)| *l == location, |(l, _)| hasher.hash_one(l))
            .or_insert_with(|| (location, SmallVec::new()))
            .into_mut();
        match versions.binary_search_by_key(&idx, |(writer, _)| *writer) {
            Ok(i) => versions[i].1 = entry,
            Err(i) => versions.insert(i, (idx, entry)),
        }
    }

    fn remove(&self, location: &Location, idx: usize) {
        if let Location::Fee(j) = *location {
            if let Some(slot) = self.fees.get(j) {
                *lock(slot) = None;
            }
            return;
        }
        let hash = self.hash(location);
        let mut shard = self.shard(hash);
        if let Some((_, versions)) = shard.find_mut(hash, |(l, _)| l == location) {
            if let Ok(i) = versions.binary_search_by_key(&idx, |(writer, _)| *writer) {
                versions.remove(i);
            }
        }
    }

    /// Records what an incarnation read and wrote, taking the contents of both buffers (they
    /// come back empty, with the capacity of the previous incarnation's buffers, for reuse).
    /// Returns whether it wrote a location the previous incarnation did not.
    pub fn record(
        &self,
        version: Version,
        reads: &mut Vec<Read>,
        writes: &mut Vec<(Location, Value)>,
    ) -> bool {
        let (idx, incarnation) = version;
        let mut record = lock(&self.records[idx]);
        let previous = std::mem::take(&mut record.writes);
        // Write sets are usually a handful of locations, compared pairwise; a large one
        // (a contract writing many slots) gets a set.
        let large = previous.len() > 16 && writes.len() > 16;
        let set =
            |locations: &[Location]| -> hashbrown::HashSet<Location, foldhash::fast::FixedState> {
                locations.iter().cloned().collect()
            };
        let previous_set = if large {
            set(&previous)
        } else {
            Default::default()
        };
        let mut wrote_new = false;
        let mut locations = Vec::with_capacity(writes.len());
        for (location, value) in writes.drain(..) {
            wrote_new |= if large {
                !previous_set.contains(&location)
            } else {
                !previous.contains(&location)
            };
            self.write(location.clone(), idx, Entry::Written(incarnation, value));
            locations.push(location);
        }
        // Locations the previous incarnation wrote and this one did not.
        let written_set = if large {
            set(&locations)
        } else {
            Default::default()
        };
        for stale in &previous {
            let kept = if large {
                written_set.contains(stale)
            } else {
                locations.contains(stale)
            };
            if !kept {
                self.remove(stale, idx);
            }
        }
        record.writes = locations;
        std::mem::swap(&mut record.reads, reads);
        reads.clear();
        wrote_new
    }

    /// Turns an aborted incarnation's writes into ESTIMATE markers, so that readers wait for
    /// the next incarnation instead of using values that are likely to change.
    pub fn convert_writes_to_estimates(&self, idx: usize) {
        let record = lock(&self.records[idx]);
        for location in &record.writes {
            if let Location::Fee(j) = *location {
                if let Some(slot) = self.fees.get(j) {
                    *lock(slot) = Some(Entry::Estimate);
                }
                continue;
            }
            let hash = self.hash(location);
            let mut shard = self.shard(hash);
            if let Some((_, versions)) = shard.find_mut(hash, |(l, _)| l == location) {
                if let Ok(i) = versions.binary_search_by_key(&idx, |(writer, _)| *writer) {
                    versions[i].1 = Entry::Estimate;
                }
            }
        }
    }

    /// Whether every read of transaction `idx` would still find the same value.
    ///
    /// A read is still valid when it would come from the same write, or from another write
    /// of an equal value: an earlier transaction that is re-executed usually writes what it
    /// wrote before (a sender's nonce, a fee), and its readers then read the same state and
    /// need not run again. (The paper compares versions only; Aptos's implementation compares
    /// values too.) A read recorded as [`Origin::WrittenBy`] also needs the same writing
    /// transaction.
    pub fn validate_read_set(&self, idx: usize) -> bool {
        let record = lock(&self.records[idx]);
        record
            .reads
            .iter()
            .all(|(location, origin)| self.still_valid(location, origin, idx))
    }

    fn still_valid(&self, location: &Location, origin: &Origin, idx: usize) -> bool {
        if let Location::Fee(j) = *location {
            return match (origin, self.fee_read(j, idx)) {
                (Origin::Base, ReadResult::NotFound) => true,
                (Origin::Written(read, old), ReadResult::Value(now, value)) => {
                    *read == now || *old == value
                }
                (Origin::WrittenBy(read, old), ReadResult::Value(now, value)) => {
                    read.0 == now.0 && (read.1 == now.1 || *old == value)
                }
                _ => false,
            };
        }
        let hash = self.hash(location);
        if !self.maybe_written(hash) {
            return matches!(origin, Origin::Base);
        }
        let shard = self.shard(hash);
        let latest = shard
            .find(hash, |(l, _)| l == location)
            .and_then(|(_, versions)| latest_below(versions, idx));
        match (origin, latest) {
            (Origin::Base, None) => true,
            (Origin::Written(read, old), Some((writer, Entry::Written(incarnation, value)))) => {
                *read == (*writer, *incarnation) || old == value
            }
            (Origin::WrittenBy(read, old), Some((writer, Entry::Written(incarnation, value)))) => {
                read.0 == *writer && (read.1 == *incarnation || old == value)
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(i: u64) -> Location {
        Location::Slot(Address::with_last_byte(1), U256::from(i))
    }

    #[test]
    fn reads_see_the_latest_lower_write_and_estimates() {
        let mv = MvMemory::new(4);
        let (mut reads, mut writes) = (Vec::new(), vec![(slot(1), Value::Slot(U256::from(7)))]);
        assert!(mv.record((1, 0), &mut reads, &mut writes));
        assert!(writes.is_empty());
        assert_eq!(mv.read(&slot(1), 1), ReadResult::NotFound);
        assert_eq!(
            mv.read(&slot(1), 3),
            ReadResult::Value((1, 0), Value::Slot(U256::from(7)))
        );
        mv.convert_writes_to_estimates(1);
        assert_eq!(mv.read(&slot(1), 2), ReadResult::Estimate(1));
        // The next incarnation writes another slot: the stale one disappears.
        let mut writes = vec![(slot(2), Value::Slot(U256::from(8)))];
        assert!(mv.record((1, 1), &mut reads, &mut writes));
        assert_eq!(mv.read(&slot(1), 2), ReadResult::NotFound);
        // The same location again is not new.
        let mut writes = vec![(slot(2), Value::Slot(U256::from(9)))];
        assert!(!mv.record((1, 2), &mut reads, &mut writes));
    }

    #[test]
    fn validation_follows_origins() {
        let mv = MvMemory::new(3);
        let mut reads = vec![(slot(5), Origin::Base)];
        assert!(!mv.record((2, 0), &mut reads, &mut Vec::new()));
        assert!(reads.is_empty());
        assert!(mv.validate_read_set(2));
        let mut writes = vec![(slot(5), Value::Slot(U256::from(1)))];
        mv.record((0, 0), &mut Vec::new(), &mut writes);
        assert!(!mv.validate_read_set(2));
        // Transaction 2 runs again and reads transaction 0's write.
        let mut reads = vec![(slot(5), Origin::Written((0, 0), Value::Slot(U256::from(1))))];
        mv.record((2, 1), &mut reads, &mut Vec::new());
        assert!(mv.validate_read_set(2));
        // Transaction 0 runs again and writes the same value: still valid. Another value and
        // an estimate are not.
        let mut writes = vec![(slot(5), Value::Slot(U256::from(1)))];
        mv.record((0, 1), &mut Vec::new(), &mut writes);
        assert!(mv.validate_read_set(2));
        mv.convert_writes_to_estimates(0);
        assert!(!mv.validate_read_set(2));
        let mut writes = vec![(slot(5), Value::Slot(U256::from(2)))];
        mv.record((0, 2), &mut Vec::new(), &mut writes);
        assert!(!mv.validate_read_set(2));
    }

    #[test]
    fn pinned_reads_need_the_same_writer() {
        let five = || Value::Slot(U256::from(5));
        let mv = MvMemory::new(4);
        mv.record((0, 0), &mut Vec::new(), &mut vec![(slot(1), five())]);
        // Transaction 3 reads transaction 0's write twice: once by value, once pinned.
        let mut reads = vec![
            (slot(1), Origin::Written((0, 0), five())),
            (slot(1), Origin::WrittenBy((0, 0), five())),
        ];
        mv.record((3, 0), &mut reads, &mut Vec::new());
        assert!(mv.validate_read_set(3));
        // A newer incarnation of the same writer with an equal value keeps both reads.
        mv.record((0, 1), &mut Vec::new(), &mut vec![(slot(1), five())]);
        assert!(mv.validate_read_set(3));
        // Another transaction writing an equal value keeps the read by value only.
        mv.record((1, 0), &mut Vec::new(), &mut vec![(slot(1), five())]);
        assert!(!mv.validate_read_set(3));
        let mut reads = vec![(slot(1), Origin::Written((0, 1), five()))];
        mv.record((3, 1), &mut reads, &mut Vec::new());
        assert!(mv.validate_read_set(3));
    }
}
