//! `--verify-execution` in the replay: each timed block is re-executed with the full node's own
//! re-execution ([`gigas_fullnode::reexec`]) over the MDBX state before its diff is applied,
//! and the time is split as the MegaETH talk splits execution: EVM work against state loading,
//! with the misses at each cache level and the mean miss penalty.
//!
//! The two cache levels, as in the talk's reth:
//!
//! 1. **revm's `CacheDB`**, which the re-execution puts over the state for the block: every
//!    request of revm's journal reaches it (an *access*); what it does not hold goes to the
//!    database (a *level-1 miss*, a *read*).
//! 2. **The page cache** under MDBX's map: a read that takes a major page fault on this thread
//!    (`getrusage(RUSAGE_THREAD)` around the read) went to the disk (a *level-2 miss*).
//!
//! The miss penalty is what a faulting read costs beyond one that does not: the mean time of
//! reads with a major fault minus the mean of those without. The probe's own cost (two
//! `getrusage` calls per read, outside the read's timed span, calibrated before the run) is
//! taken off the EVM's time, which is the execution's time minus the reads'.
//!
//! The block is re-executed before its diff is verified: the diff's decoding reads the prior
//! value of every key it changes, which would bring the block's pages in before the EVM asks
//! for them. Here execution pays for its own state, as in a node that executes blocks; the node
//! (`gigas-fullnode --verify-execution`) verifies the diff first.
//!
//! Must not: execute or compare anything itself (the node's `reexec` does), or hold state
//! beyond the counters.

use std::cell::Cell;
use std::fmt;
use std::time::Instant;

use alloy_consensus::Header;
use alloy_primitives::{Address, B256, U256};
use eyre::{eyre, Result, WrapErr};
use gigas_evm::revm::database::CacheDB;
use gigas_evm::revm::database_interface::{Database, DatabaseCommit, DatabaseRef, WrapDatabaseRef};
use gigas_evm::revm::primitives::AddressMap;
use gigas_evm::revm::state::{Account, AccountInfo, Bytecode};
use gigas_fullnode::reexec;
use gigas_primitives::{ChainSpec, ChangeSet};
use gigas_statediff::BlockFile;
use serde::Serialize;

/// Kinds of state request, in the order of the counters.
const KINDS: [&str; 4] = ["account", "storage", "code", "block hash"];

/// Major faults of the calling thread so far.
fn thread_major_faults() -> u64 {
    // SAFETY: getrusage fills the struct it is given; zeroed is a valid rusage.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a rusage for RUSAGE_THREAD.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) } != 0 {
        return 0;
    }
    u64::try_from(usage.ru_majflt).unwrap_or(0)
}

/// Nanoseconds one probe adds to the execution (two `getrusage` calls and a clock read around
/// nothing): the median of 15 rounds of 2,000 empty probes.
fn calibrate_probe_ns() -> f64 {
    let mut rounds: Vec<f64> = (0..15)
        .map(|_| {
            let started = Instant::now();
            let mut sink = 0u64;
            for _ in 0..2_000 {
                let f0 = thread_major_faults();
                let t = Instant::now();
                let f1 = thread_major_faults();
                sink = sink.wrapping_add(f1 - f0 + t.elapsed().as_nanos() as u64);
            }
            std::hint::black_box(sink);
            started.elapsed().as_nanos() as f64 / 2_000.0
        })
        .collect();
    rounds.sort_by(f64::total_cmp);
    rounds[rounds.len() / 2]
}

/// Counters of one kind of database read.
#[derive(Debug, Default, Clone, Copy)]
struct ReadCounters {
    reads: u64,
    faulting_reads: u64,
    major_faults: u64,
    clean_ns: u64,
    faulting_ns: u64,
}

/// The state as the re-execution's database: every read timed and its major faults counted.
struct ProbedState<'a, DB> {
    inner: &'a DB,
    counters: [Cell<ReadCounters>; 4],
}

impl<'a, DB: DatabaseRef> ProbedState<'a, DB> {
    fn new(inner: &'a DB) -> Self {
        Self {
            inner,
            counters: Default::default(),
        }
    }

    fn probe<T>(&self, kind: usize, read: impl FnOnce() -> T) -> T {
        let f0 = thread_major_faults();
        let started = Instant::now();
        let value = read();
        let ns = started.elapsed().as_nanos() as u64;
        let faults = thread_major_faults().saturating_sub(f0);
        let cell = &self.counters[kind];
        let mut c = cell.get();
        c.reads += 1;
        if faults > 0 {
            c.faulting_reads += 1;
            c.major_faults += faults;
            c.faulting_ns += ns;
        } else {
            c.clean_ns += ns;
        }
        cell.set(c);
        value
    }
}

impl<DB: DatabaseRef> DatabaseRef for ProbedState<'_, DB> {
    type Error = DB::Error;

    fn basic_ref(&self, address: Address) -> Result<Option<AccountInfo>, Self::Error> {
        self.probe(0, || self.inner.basic_ref(address))
    }

    fn storage_ref(&self, address: Address, index: U256) -> Result<U256, Self::Error> {
        self.probe(1, || self.inner.storage_ref(address, index))
    }

    fn code_by_hash_ref(&self, code_hash: B256) -> Result<Bytecode, Self::Error> {
        self.probe(2, || self.inner.code_by_hash_ref(code_hash))
    }

    fn block_hash_ref(&self, number: u64) -> Result<B256, Self::Error> {
        self.probe(3, || self.inner.block_hash_ref(number))
    }
}

/// revm's `CacheDB` with every request counted (the level-1 accesses).
struct CountedCache<D: DatabaseRef> {
    cache: CacheDB<WrapDatabaseRef<D>>,
    accesses: [u64; 4],
}

impl<D: DatabaseRef> Database for CountedCache<D> {
    type Error = D::Error;

    fn basic(&mut self, address: Address) -> Result<Option<AccountInfo>, Self::Error> {
        self.accesses[0] += 1;
        self.cache.basic(address)
    }

    fn storage(&mut self, address: Address, index: U256) -> Result<U256, Self::Error> {
        self.accesses[1] += 1;
        self.cache.storage(address, index)
    }

    fn code_by_hash(&mut self, code_hash: B256) -> Result<Bytecode, Self::Error> {
        self.accesses[2] += 1;
        self.cache.code_by_hash(code_hash)
    }

    fn block_hash(&mut self, number: u64) -> Result<B256, Self::Error> {
        self.accesses[3] += 1;
        self.cache.block_hash(number)
    }
}

impl<D: DatabaseRef> DatabaseCommit for CountedCache<D> {
    fn commit(&mut self, changes: AddressMap<Account>) {
        self.cache.commit(changes);
    }
}

/// One kind of state request over a run.
#[derive(Debug, Clone, Serialize)]
pub struct RequestKind {
    /// `account`, `storage`, `code` or `block hash`.
    pub kind: &'static str,
    /// Requests of revm's journal (level-1 accesses).
    pub accesses: u64,
    /// Of those, reads of the database (level-1 misses).
    pub reads: u64,
    /// Of those, reads with a major fault (level-2 misses).
    pub faulting_reads: u64,
}

/// What re-executing the run's timed blocks measured.
#[derive(Debug, Clone, Serialize)]
pub struct ExecutionFigures {
    /// Blocks re-executed in the clock's span.
    pub blocks: u64,
    /// Their transactions.
    pub transactions: u64,
    /// Their gas.
    pub gas_used: u64,
    /// Seconds of the whole re-execution (prepare, EVM, state loading, compare).
    pub seconds: f64,
    /// Decoding the block file, checking it against the header and recovering the senders.
    pub prepare_seconds: f64,
    /// EVM work: execution minus state loading and the probe's calibrated cost.
    pub evm_seconds: f64,
    /// Reading the state from the database (the reads' own time).
    pub state_loading_seconds: f64,
    /// Comparing receipts and the ChangeSet with the block file and the diff.
    pub compare_seconds: f64,
    /// State loading over EVM work plus state loading.
    pub state_loading_share: f64,
    /// Gas per second of EVM work plus state loading.
    pub gas_per_second: f64,
    /// Per kind of request.
    pub kinds: Vec<RequestKind>,
    /// Requests of revm's journal (level-1 accesses).
    pub accesses: u64,
    /// Reads of the database (level-1 misses).
    pub reads: u64,
    /// Reads with a major fault (level-2 misses).
    pub faulting_reads: u64,
    /// Major faults taken by those reads.
    pub major_faults: u64,
    /// Level-1 miss ratio: reads over accesses.
    pub level1_miss_ratio: f64,
    /// Level-2 miss ratio: faulting reads over reads.
    pub level2_miss_ratio: f64,
    /// Accesses that went to the disk: faulting reads over accesses.
    pub disk_ratio: f64,
    /// Mean µs of a read without a major fault.
    pub clean_read_us: f64,
    /// Mean µs of a read with one or more major faults.
    pub faulting_read_us: Option<f64>,
    /// What a level-2 miss costs beyond a hit, in µs: the talk's mean miss penalty.
    pub miss_penalty_us: Option<f64>,
    /// The probe's calibrated cost per read (its two `getrusage` calls), in ns, taken off the
    /// EVM's time.
    pub probe_ns: f64,
}

/// What the timed blocks added up to.
#[derive(Debug, Default, Clone)]
struct Tally {
    blocks: u64,
    transactions: u64,
    gas_used: u64,
    prepare: f64,
    execute: f64,
    compare: f64,
    accesses: [u64; 4],
    reads: [ReadCounters; 4],
}

/// Re-executes blocks and keeps the run's figures.
pub(super) struct Reexecutor {
    spec: ChainSpec,
    probe_ns: f64,
    tally: Tally,
}

impl fmt::Debug for Reexecutor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reexecutor")
            .field("probe_ns", &self.probe_ns)
            .field("tally", &self.tally)
            .finish_non_exhaustive()
    }
}

impl Reexecutor {
    /// A re-executor for blocks of the chain `spec`, with the probe calibrated.
    pub(super) fn new(spec: ChainSpec) -> Self {
        Self {
            spec,
            probe_ns: calibrate_probe_ns(),
            tally: Tally::default(),
        }
    }

    /// Forgets what was counted (the warm-up's blocks).
    pub(super) fn reset(&mut self) {
        self.tally = Tally::default();
    }

    /// Re-executes the block of `header` (its file `block_bytes`) over `state` (the state
    /// after its parent) and returns its ChangeSet, checked against the block file's receipts
    /// and the header. The caller compares it with the diff's ([`Reexecutor::compare`]).
    pub(super) fn execute<DB>(
        &mut self,
        state: &DB,
        header: &Header,
        block_bytes: &[u8],
    ) -> Result<ChangeSet>
    where
        DB: DatabaseRef,
        DB::Error: fmt::Display,
    {
        let number = header.number;
        let started = Instant::now();
        let file = BlockFile::decode(block_bytes)
            .wrap_err_with(|| format!("decoding the block file of block {number}"))?;
        let prepared = reexec::prepare(&self.spec, header, &file)
            .wrap_err_with(|| format!("preparing block {number}"))?;
        let prepared_at = Instant::now();
        let probed = ProbedState::new(state);
        let mut db = CountedCache {
            cache: CacheDB::new(WrapDatabaseRef(&probed)),
            accesses: [0; 4],
        };
        let got = reexec::execute_prepared(&mut db, &prepared)
            .wrap_err_with(|| format!("re-executing block {number}"))?;
        let executed_at = Instant::now();
        reexec::check_receipts(header, &file, &got).map_err(|m| eyre!("{m}"))?;
        let done = Instant::now();

        let t = &mut self.tally;
        t.prepare += (prepared_at - started).as_secs_f64();
        t.execute += (executed_at - prepared_at).as_secs_f64();
        t.compare += (done - executed_at).as_secs_f64();
        t.blocks += 1;
        t.transactions += file.transactions.len() as u64;
        t.gas_used += got.gas_used();
        for kind in 0..KINDS.len() {
            t.accesses[kind] += db.accesses[kind];
            let c = probed.counters[kind].get();
            let r = &mut t.reads[kind];
            r.reads += c.reads;
            r.faulting_reads += c.faulting_reads;
            r.major_faults += c.major_faults;
            r.clean_ns += c.clean_ns;
            r.faulting_ns += c.faulting_ns;
        }
        Ok(got.changes)
    }

    /// Compares a re-executed ChangeSet with the diff's (timed with the comparisons).
    pub(super) fn compare(&mut self, number: u64, diff: &ChangeSet, got: &ChangeSet) -> Result<()> {
        let started = Instant::now();
        let result = reexec::compare(number, diff, got).map_err(|m| eyre!("{m}"));
        self.tally.compare += started.elapsed().as_secs_f64();
        result
    }

    /// The figures so far.
    pub(super) fn figures(&self) -> ExecutionFigures {
        let t = &self.tally;
        let total = |f: fn(&ReadCounters) -> u64| t.reads.iter().map(f).sum::<u64>();
        let reads = total(|c| c.reads);
        let faulting_reads = total(|c| c.faulting_reads);
        let clean_reads = reads - faulting_reads;
        let clean_ns = total(|c| c.clean_ns) as f64;
        let faulting_ns = total(|c| c.faulting_ns) as f64;
        let state_loading = (clean_ns + faulting_ns) / 1e9;
        // The probe's getrusage calls fall outside the reads' timed spans but inside the
        // execution's: they come off the EVM's share.
        let probe_seconds = reads as f64 * self.probe_ns / 1e9;
        let evm = (t.execute - state_loading - probe_seconds).max(0.0);
        let accesses: u64 = t.accesses.iter().sum();
        let ratio = |a: u64, b: u64| if b > 0 { a as f64 / b as f64 } else { 0.0 };
        let clean_read_us = if clean_reads > 0 {
            clean_ns / clean_reads as f64 / 1e3
        } else {
            0.0
        };
        let faulting_read_us =
            (faulting_reads > 0).then(|| faulting_ns / faulting_reads as f64 / 1e3);
        ExecutionFigures {
            blocks: t.blocks,
            transactions: t.transactions,
            gas_used: t.gas_used,
            seconds: t.prepare + t.execute + t.compare,
            prepare_seconds: t.prepare,
            evm_seconds: evm,
            state_loading_seconds: state_loading,
            compare_seconds: t.compare,
            state_loading_share: if evm + state_loading > 0.0 {
                state_loading / (evm + state_loading)
            } else {
                0.0
            },
            gas_per_second: if evm + state_loading > 0.0 {
                t.gas_used as f64 / (evm + state_loading)
            } else {
                0.0
            },
            kinds: KINDS
                .iter()
                .enumerate()
                .map(|(i, &kind)| RequestKind {
                    kind,
                    accesses: t.accesses[i],
                    reads: t.reads[i].reads,
                    faulting_reads: t.reads[i].faulting_reads,
                })
                .collect(),
            accesses,
            reads,
            faulting_reads,
            major_faults: total(|c| c.major_faults),
            level1_miss_ratio: ratio(reads, accesses),
            level2_miss_ratio: ratio(faulting_reads, reads),
            disk_ratio: ratio(faulting_reads, accesses),
            clean_read_us,
            faulting_read_us,
            miss_penalty_us: faulting_read_us.map(|f| f - clean_read_us),
            probe_ns: self.probe_ns,
        }
    }
}
