//! The code cache: which contracts run compiled, the background compiler thread, the memory
//! budget of machine code and what the cache counts.
//!
//! # When a contract is compiled
//!
//! [`JitMode::Eager`] compiles a contract when it is first called, before its frame runs.
//! [`JitMode::On`] counts the calls of every contract and the gas its interpreted frames spend
//! on their own instructions, and queues it for the compiler thread once that reaches
//! [`Hotness`]; its frames stay interpreted until the code is ready.
//!
//! # The budget and what is evicted
//!
//! The cache holds at most [`CacheConfig::budget_bytes`] of machine code, counted as the
//! memory it takes (each contract's code rounded up to whole pages, as it is mapped). When a
//! newly compiled contract does not fit, the cache evicts the contracts worth least per byte
//! until it does. A contract's worth is the gas its compiled frames spent on their own
//! instructions (what compiled code saves is roughly proportional to the instructions it
//! runs), aged: each time the cache has taken in compiled code amounting to half its budget,
//! every contract's worth is halved, so that what ran long ago gives way to what runs now,
//! and a contract's worth is divided by its size, so that a large contract must run
//! proportionally more to keep its place. A newly compiled contract starts with the gas its
//! interpreted frames spent before it was compiled (what made it hot), so that it is not the
//! first thing the next compile evicts. A contract larger than the whole budget is not kept
//! (it runs interpreted). An evicted contract starts over: `On` compiles it again once it is
//! hot again, `Eager` at its next call.
//!
//! Eviction drops the cache's handle on the contract's code. The code itself is freed, and
//! its pages returned to the system, when the last [`CompiledCode`] handle on it is dropped:
//! at once if no frame runs it, otherwise when the last frame holding it has finished (see
//! the crate documentation). So the code the cache holds never exceeds the budget, while the
//! code mapped may exceed it by what running frames still hold, until they end.
//!
//! # Bounds
//!
//! Every table is bounded: the contracts counted towards hotness (and those the compiler
//! could not compile, remembered so as not to try again) at
//! [`CacheConfig::max_tracked`]: when full, the half with the least gas is forgotten and the
//! rest have their gas halved; compile requests waiting for the compiler thread at
//! [`CacheConfig::max_queued`]: a request that finds the queue full is dropped and its
//! contract counted again from zero; compiled contracts by the budget.
//!
//! # Failures
//!
//! A contract the compiler rejects runs interpreted. A panic in the compiler (a Cranelift
//! bug) is caught on the compiler thread, logged, counted as a failed compile and as a panic,
//! and the thread goes on with a fresh compiler.

mod config;
mod hotlist;
mod stats;

use std::collections::HashMap;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{mpsc, Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use alloy_primitives::{Bytes, B256};
use prometheus_client::metrics::gauge::Gauge;
use revm::primitives::hardfork::SpecId;

use crate::compiler::{CompileError, CompiledCode, Compiler};

pub use config::{
    CacheConfig, Hotness, JitMode, ParseJitModeError, DEFAULT_BUDGET_BYTES, DEFAULT_MAX_QUEUED,
    DEFAULT_MAX_TRACKED,
};
pub use hotlist::{HotList, HotListError, MAX_HOT_LIST};
pub use stats::{JitCounts, JitStats};

/// What the cache holds, recounted from its entries by [`CodeCache::residency`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Residency {
    /// Bytes of machine code held.
    pub resident_bytes: u64,
    /// Compiled contracts held.
    pub resident_contracts: usize,
    /// Contracts counted towards hotness or remembered as not compilable.
    pub tracked_contracts: usize,
    /// Contracts waiting for the compiler.
    pub pending_contracts: usize,
    /// The budget.
    pub budget_bytes: u64,
}

/// A broken invariant of the cache's tables (a bug in this module).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CacheInvariantError {
    /// The running totals disagree with the entries.
    #[error("running totals {counted:?} disagree with the entries {recounted:?}")]
    Totals {
        /// The totals kept as entries change.
        counted: Residency,
        /// The totals recounted from the entries.
        recounted: Residency,
    },
    /// More machine code is held than the budget allows.
    #[error("{resident_bytes} bytes of machine code held, over the budget of {budget_bytes}")]
    OverBudget {
        /// Bytes held.
        resident_bytes: u64,
        /// The budget.
        budget_bytes: u64,
    },
    /// More contracts are tracked than the bound allows.
    #[error("{tracked} contracts tracked, over the bound of {max}")]
    TooManyTracked {
        /// Contracts tracked.
        tracked: usize,
        /// The bound.
        max: usize,
    },
}

type Key = (B256, SpecId);

enum Entry {
    /// Calls seen so far and the gas their interpreted frames spent.
    Counting {
        calls: u32,
        gas: u64,
    },
    /// Sent to the compiler, with the gas that made it hot.
    Pending {
        gas: u64,
    },
    Ready(Resident),
    /// Not compilable (or the compiler failed, or it exceeds the budget): always
    /// interpreted. `gas` orders it against counted contracts when the table is swept.
    Failed {
        gas: u64,
    },
}

struct Resident {
    code: CompiledCode,
    /// Aged gas (see the module documentation); the gas recorded in `code` since the last
    /// aging comes on top.
    credit: u64,
    /// Admission order: among contracts of equal worth the older goes first.
    order: u64,
}

impl Resident {
    /// Worth per byte of mapped machine code.
    fn density(&self) -> f64 {
        self.credit.saturating_add(self.code.peek_gas()) as f64 / self.code.mapped_bytes() as f64
    }
}

/// The cache's entries and the running totals over them.
struct Table {
    entries: HashMap<Key, Entry>,
    resident_bytes: u64,
    resident: usize,
    tracked: usize,
    pending: usize,
    /// Bytes of machine code taken in since the last aging.
    since_aging: u64,
    admitted: u64,
    resident_bytes_gauge: Gauge,
    resident_gauge: Gauge,
    tracked_gauge: Gauge,
}

/// What an entry adds to the running totals.
#[derive(Clone, Copy)]
enum Share {
    Tracked,
    Pending,
    Resident(u64),
}

fn share(entry: &Entry) -> Share {
    match entry {
        Entry::Counting { .. } | Entry::Failed { .. } => Share::Tracked,
        Entry::Pending { .. } => Share::Pending,
        Entry::Ready(r) => Share::Resident(r.code.mapped_bytes()),
    }
}

impl Table {
    fn new(stats: &JitStats) -> Self {
        Self {
            entries: HashMap::new(),
            resident_bytes: 0,
            resident: 0,
            tracked: 0,
            pending: 0,
            since_aging: 0,
            admitted: 0,
            resident_bytes_gauge: stats.resident_bytes.clone(),
            resident_gauge: stats.resident_contracts.clone(),
            tracked_gauge: stats.tracked_contracts.clone(),
        }
    }

    fn apply(&mut self, share: Share, add: bool) {
        match (share, add) {
            (Share::Tracked, true) => self.tracked += 1,
            (Share::Tracked, false) => self.tracked -= 1,
            (Share::Pending, true) => self.pending += 1,
            (Share::Pending, false) => self.pending -= 1,
            (Share::Resident(bytes), true) => {
                self.resident += 1;
                self.resident_bytes += bytes;
            }
            (Share::Resident(bytes), false) => {
                self.resident -= 1;
                self.resident_bytes -= bytes;
            }
        }
    }

    /// Sets (or with `None` removes) the entry of `key`, keeping the totals; returns the old
    /// entry (dropping it frees evicted code no frame holds).
    fn set(&mut self, key: Key, entry: Option<Entry>) -> Option<Entry> {
        let new = entry.as_ref().map(share);
        let old = match entry {
            Some(entry) => self.entries.insert(key, entry),
            None => self.entries.remove(&key),
        };
        if let Some(old) = &old {
            self.apply(share(old), false);
        }
        if let Some(new) = new {
            self.apply(new, true);
        }
        self.resident_bytes_gauge
            .set(i64::try_from(self.resident_bytes).unwrap_or(i64::MAX));
        self.resident_gauge.set(self.resident as i64);
        self.tracked_gauge.set(self.tracked as i64);
        old
    }

    /// Starts counting `key`, forgetting the least-counted half of the tracked contracts
    /// first if the table is full.
    fn track(&mut self, key: Key, max_tracked: usize) {
        if self.tracked >= max_tracked {
            self.sweep(max_tracked / 2);
        }
        self.set(key, Some(Entry::Counting { calls: 0, gas: 0 }));
    }

    /// Keeps the `keep` tracked contracts with the most gas, their gas halved (so that old
    /// counts fade), and forgets the others. Runs once per `max_tracked / 2` new contracts at
    /// most, so its cost per contract is constant.
    fn sweep(&mut self, keep: usize) {
        let mut tracked: Vec<(u64, Key)> = self
            .entries
            .iter()
            .filter_map(|(key, entry)| match entry {
                Entry::Counting { gas, .. } | Entry::Failed { gas } => Some((*gas, *key)),
                _ => None,
            })
            .collect();
        tracked.sort_unstable_by_key(|(gas, _)| std::cmp::Reverse(*gas));
        for (i, (_, key)) in tracked.into_iter().enumerate() {
            if i >= keep {
                self.set(key, None);
            } else if let Some(Entry::Counting { gas, .. } | Entry::Failed { gas }) =
                self.entries.get_mut(&key)
            {
                *gas /= 2;
            }
        }
    }

    /// Marks a pending contract as not compilable.
    fn fail(&mut self, key: Key, gas: u64, max_tracked: usize) {
        // It stops being pending before it is tracked, so the bound holds.
        self.set(key, None);
        if self.tracked >= max_tracked {
            self.sweep(max_tracked / 2);
        }
        self.set(key, Some(Entry::Failed { gas }));
    }

    /// Takes in freshly compiled `code` for `key`, evicting the contracts worth least per
    /// byte until it fits in `budget`; `credit` is what made it hot. Returns the code if the
    /// cache keeps it.
    fn admit(
        &mut self,
        key: Key,
        code: CompiledCode,
        credit: u64,
        config: &CacheConfig,
        stats: &JitStats,
    ) -> Option<CompiledCode> {
        let budget = config.budget_bytes;
        let footprint = code.mapped_bytes();
        if footprint > budget {
            tracing::debug!(hash = %key.0, footprint, budget, "interpreted: larger than the JIT budget");
            stats.failed.inc();
            self.fail(key, credit, config.max_tracked);
            return None;
        }
        self.set(key, None);
        self.since_aging = self.since_aging.saturating_add(footprint);
        if budget != u64::MAX && self.since_aging >= budget / 2 {
            self.since_aging = 0;
            for entry in self.entries.values_mut() {
                if let Entry::Ready(r) = entry {
                    r.credit = r.credit.saturating_add(r.code.take_gas()) / 2;
                }
            }
        }
        if self.resident_bytes.saturating_add(footprint) > budget {
            let mut candidates: Vec<(f64, u64, Key)> = self
                .entries
                .iter()
                .filter_map(|(key, entry)| match entry {
                    Entry::Ready(r) => Some((r.density(), r.order, *key)),
                    _ => None,
                })
                .collect();
            candidates.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            for (_, _, victim) in candidates {
                if self.resident_bytes + footprint <= budget {
                    break;
                }
                if let Some(Entry::Ready(evicted)) = self.set(victim, None) {
                    stats.evictions.inc();
                    if evicted.code.handles() > 1 {
                        stats.evicted_in_use.inc();
                    }
                }
            }
        }
        self.admitted += 1;
        let order = self.admitted;
        self.set(
            key,
            Some(Entry::Ready(Resident {
                code: code.clone(),
                credit,
                order,
            })),
        );
        debug_assert!(self.resident_bytes <= budget, "over the JIT budget");
        debug_assert_eq!(
            self.recount(budget).resident_bytes,
            self.resident_bytes,
            "resident bytes miscounted"
        );
        Some(code)
    }

    fn recount(&self, budget_bytes: u64) -> Residency {
        let mut r = Residency {
            resident_bytes: 0,
            resident_contracts: 0,
            tracked_contracts: 0,
            pending_contracts: 0,
            budget_bytes,
        };
        for entry in self.entries.values() {
            match share(entry) {
                Share::Tracked => r.tracked_contracts += 1,
                Share::Pending => r.pending_contracts += 1,
                Share::Resident(bytes) => {
                    r.resident_contracts += 1;
                    r.resident_bytes += bytes;
                }
            }
        }
        r
    }
}

struct Request {
    key: Key,
    code: Bytes,
    reply: Option<mpsc::Sender<Option<CompiledCode>>>,
}

/// What the compiler thread is asked to do, in order.
enum Job {
    Compile(Request),
    /// Answer once every job sent before is done.
    Barrier(mpsc::Sender<()>),
}

struct Shared {
    config: CacheConfig,
    /// With a hot list, `On` compiles listed contracts at their first call, before any other
    /// reaches the threshold.
    hot: Option<HotList>,
    table: Mutex<Table>,
    stats: JitStats,
}

impl Shared {
    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Compiled contracts by code hash and spec, shared by every EVM of a process, within a
/// budget of machine code (see the module documentation).
pub struct CodeCache {
    shared: Arc<Shared>,
    requests: Option<mpsc::SyncSender<Job>>,
    worker: Option<std::thread::JoinHandle<()>>,
}

impl fmt::Debug for CodeCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CodeCache")
            .field("config", &self.shared.config)
            .field("stats", &self.shared.stats)
            .finish()
    }
}

impl CodeCache {
    /// A cache for `mode` with the default [`CacheConfig`], and its compiler thread (none
    /// for `Off`).
    pub fn new(mode: JitMode) -> Arc<Self> {
        Self::with_config(CacheConfig::new(mode))
    }

    /// A cache for `mode` whose `On` mode compiles what `hotness` calls hot.
    pub fn with_hotness(mode: JitMode, hotness: Hotness) -> Arc<Self> {
        Self::with_config(CacheConfig {
            hotness,
            ..CacheConfig::new(mode)
        })
    }

    /// A cache configured by `config`.
    pub fn with_config(config: CacheConfig) -> Arc<Self> {
        Self::build(config, None)
    }

    /// A cache configured by `config` whose `On` mode compiles the contracts of `hot` at
    /// their first call; the others still compile once `config.hotness` is reached
    /// ([`Hotness::NEVER`] compiles the list alone). See [`HotList`].
    pub fn with_hot_list(config: CacheConfig, hot: HotList) -> Arc<Self> {
        Self::build(config, Some(hot))
    }

    /// The hot list, if the cache has one.
    pub fn hot_list(&self) -> Option<&HotList> {
        self.shared.hot.as_ref()
    }

    fn build(config: CacheConfig, hot: Option<HotList>) -> Arc<Self> {
        let stats = JitStats::default();
        stats
            .budget_bytes
            .set(i64::try_from(config.budget_bytes).unwrap_or(i64::MAX));
        let shared = Arc::new(Shared {
            table: Mutex::new(Table::new(&stats)),
            config,
            hot,
            stats,
        });
        let (requests, worker) = if config.mode == JitMode::Off {
            (None, None)
        } else {
            let (tx, rx) = mpsc::sync_channel::<Job>(config.max_queued.max(1));
            let thread_shared = Arc::clone(&shared);
            let worker = std::thread::Builder::new()
                .name("gigas-jit".into())
                .spawn(move || compile_loop(rx, &thread_shared))
                .ok();
            (worker.as_ref().map(|_| tx), worker)
        };
        Arc::new(Self {
            shared,
            requests,
            worker,
        })
    }

    /// The mode.
    pub fn mode(&self) -> JitMode {
        self.shared.config.mode
    }

    /// When `JitMode::On` compiles.
    pub fn hotness(&self) -> Hotness {
        self.shared.config.hotness
    }

    /// The configuration.
    pub fn config(&self) -> CacheConfig {
        self.shared.config
    }

    /// The counters.
    pub fn stats(&self) -> &JitStats {
        &self.shared.stats
    }

    /// What the cache holds, recounted from its entries, after checking the running totals
    /// against the recount, the bytes held against the budget and the contracts tracked
    /// against their bound.
    pub fn residency(&self) -> Result<Residency, CacheInvariantError> {
        let table = self.shared.table();
        let config = &self.shared.config;
        let recounted = table.recount(config.budget_bytes);
        let counted = Residency {
            resident_bytes: table.resident_bytes,
            resident_contracts: table.resident,
            tracked_contracts: table.tracked,
            pending_contracts: table.pending,
            budget_bytes: config.budget_bytes,
        };
        if counted != recounted {
            return Err(CacheInvariantError::Totals { counted, recounted });
        }
        if counted.resident_bytes > config.budget_bytes {
            return Err(CacheInvariantError::OverBudget {
                resident_bytes: counted.resident_bytes,
                budget_bytes: config.budget_bytes,
            });
        }
        if counted.tracked_contracts > config.max_tracked.max(1) {
            return Err(CacheInvariantError::TooManyTracked {
                tracked: counted.tracked_contracts,
                max: config.max_tracked,
            });
        }
        Ok(counted)
    }

    /// The compiled code for `code` under `spec`, if it is ready; counts a call and may start
    /// compiling it (in `Eager` mode: compiles it and waits).
    pub fn lookup(&self, hash: B256, code: &[u8], spec: SpecId) -> Option<CompiledCode> {
        let requests = self.requests.as_ref()?;
        let config = &self.shared.config;
        let key = (hash, spec);
        let mut table = self.shared.table();
        if !table.entries.contains_key(&key) {
            table.track(key, config.max_tracked);
        }
        let gas = match table.entries.get_mut(&key) {
            Some(Entry::Ready(r)) => return Some(r.code.clone()),
            Some(Entry::Counting { calls, gas }) => {
                *calls = calls.saturating_add(1);
                // The list is looked up only here, for contracts not yet compiled: a
                // compiled contract's lookup stays one table probe.
                let listed = || self.shared.hot.as_ref().is_some_and(|h| h.contains(&hash));
                if config.mode == JitMode::On && !config.hotness.reached(*calls, *gas) && !listed()
                {
                    return None;
                }
                *gas
            }
            _ => return None,
        };
        table.set(key, Some(Entry::Pending { gas }));
        drop(table);
        let code = Bytes::copy_from_slice(code);
        if config.mode == JitMode::Eager {
            let (reply, done) = mpsc::channel();
            let sent = requests.send(Job::Compile(Request {
                key,
                code,
                reply: Some(reply),
            }));
            if sent.is_err() {
                self.shared.table().set(key, None);
                return None;
            }
            return done.recv().ok().flatten();
        }
        self.compile_in_background(key, code);
        None
    }

    /// Queues `code` for the compiler thread; the caller has marked its entry `Pending`.
    fn compile_in_background(&self, key: Key, code: Bytes) {
        let Some(requests) = &self.requests else {
            return;
        };
        let request = Job::Compile(Request {
            key,
            code,
            reply: None,
        });
        match requests.try_send(request) {
            Ok(()) => {}
            Err(mpsc::TrySendError::Full(_)) => {
                // The contract is counted again from zero; if it is still hot once the
                // compiler has caught up, it is requested again.
                self.shared.stats.dropped_requests.inc();
                self.shared.table().set(key, None);
            }
            Err(mpsc::TrySendError::Disconnected(_)) => {
                // The compiler thread is gone; the contract stays interpreted, which is
                // always correct.
                self.shared.table().set(key, None);
            }
        }
    }

    /// Adds `gas` that an interpreted frame of `code` spent on its own instructions; may start
    /// compiling it (in `JitMode::On`).
    pub fn spent(&self, hash: B256, code: &[u8], spec: SpecId, gas: u64) {
        let config = &self.shared.config;
        // A listed contract left `Counting` at its first call, so it is not counted below.
        if config.mode != JitMode::On {
            return;
        }
        let key = (hash, spec);
        let mut table = self.shared.table();
        let Some(Entry::Counting { calls, gas: spent }) = table.entries.get_mut(&key) else {
            return;
        };
        *spent = spent.saturating_add(gas);
        if !config.hotness.reached(*calls, *spent) {
            return;
        }
        let gas = *spent;
        table.set(key, Some(Entry::Pending { gas }));
        drop(table);
        self.compile_in_background(key, Bytes::copy_from_slice(code));
    }

    /// Waits until every compilation requested so far is done (benchmarks use it to time
    /// a warmed cache; execution never needs to wait).
    pub fn wait_for_compiles(&self) {
        let Some(requests) = &self.requests else {
            return;
        };
        let (reply, done) = mpsc::channel();
        if requests.send(Job::Barrier(reply)).is_ok() {
            let _ = done.recv();
        }
    }
}

impl Drop for CodeCache {
    fn drop(&mut self) {
        // Closing the channel ends the compiler thread. The cache's handles on compiled code
        // go with the last `Arc` of the shared state; code that EVMs still hold stays mapped
        // until they drop it.
        self.requests.take();
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(not a string)")
}

fn compile_loop(requests: mpsc::Receiver<Job>, shared: &Shared) {
    let stats = &shared.stats;
    let new_compiler = || match Compiler::with_metrics(stats.memory.clone()) {
        Ok(compiler) => Some(compiler),
        Err(e) => {
            tracing::warn!(error = %e, "no JIT on this machine; everything is interpreted");
            None
        }
    };
    let mut compiler = new_compiler();
    for job in requests {
        let request = match job {
            Job::Compile(request) => request,
            Job::Barrier(reply) => {
                let _ = reply.send(());
                continue;
            }
        };
        let (hash, spec) = request.key;
        let started = Instant::now();
        let result = match compiler.as_mut() {
            Some(c) => catch_unwind(AssertUnwindSafe(|| c.compile(&request.code, spec))),
            None => Ok(Err(CompileError::Isa("no compiler".into()))),
        };
        let result = match result {
            Ok(result) => result,
            Err(payload) => {
                stats.compile_panics.inc();
                tracing::error!(
                    %hash,
                    ?spec,
                    evm_bytes = request.code.len(),
                    panic = panic_message(payload.as_ref()),
                    "the JIT compiler panicked; the contract stays interpreted"
                );
                // Whatever the compiler was doing is abandoned with its state; the next
                // contract gets a fresh one. The module of the failed contract was freed as
                // the panic unwound (it had handed out no code).
                compiler = new_compiler();
                Err(CompileError::Codegen("the compiler panicked".into()))
            }
        };
        let mut table = shared.table();
        let credit = match table.entries.get(&request.key) {
            Some(Entry::Pending { gas }) => *gas,
            _ => 0,
        };
        let kept = match result {
            Ok(code) => {
                stats.compiled.inc();
                stats
                    .compile_seconds
                    .inc_by(started.elapsed().as_secs_f64());
                stats.code_bytes.inc_by(code.code_size() as u64);
                stats.evm_bytes.inc_by(request.code.len() as u64);
                table.admit(request.key, code, credit, &shared.config, stats)
            }
            Err(e) => {
                stats.failed.inc();
                tracing::debug!(%hash, error = %e, "interpreted: not compiled");
                table.fail(request.key, credit, shared.config.max_tracked);
                None
            }
        };
        drop(table);
        if let Some(reply) = request.reply {
            let _ = reply.send(kept);
        }
    }
}

#[cfg(test)]
mod tests;
