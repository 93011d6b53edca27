//! Replaying the workload: the checking pass, then plain and probed passes alternated.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gigas_evm::fixture::fixture_dirs;
use gigas_evm::probe::{ActivityCell, Probe, ProbedEvm};
use gigas_evm::revm::database::{CacheDB, EmptyDB};
use gigas_evm::{
    execute_block, load_fixture, BlockCheck, ExecutionError, FixtureError, PlainEvm, PreparedBlock,
};
use gigas_primitives::ChainSpec;

use crate::sampler::{sample_during, sampled_block, Histogram, SampledBlock};
use crate::stacks::StackProfile;

/// A block loaded for replay: its environments and its pre-state database.
#[derive(Debug)]
pub struct LoadedBlock {
    /// Where it came from.
    pub dir: PathBuf,
    /// The prepared block.
    pub block: PreparedBlock,
    /// The pre-state; every pass executes on a fresh clone of it.
    pub db: CacheDB<EmptyDB>,
}

/// The blocks of one run.
#[derive(Debug)]
pub struct Workload {
    /// The blocks, in block order.
    pub blocks: Vec<LoadedBlock>,
}

/// Errors of a replay.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// A fixture could not be loaded.
    #[error(transparent)]
    Fixture(#[from] FixtureError),
    /// A block could not be executed.
    #[error(transparent)]
    Execution(#[from] ExecutionError),
    /// A block executed but does not match its header.
    #[error("block {number} ({dir}) does not match its header: {details}")]
    HeaderMismatch {
        /// Block number.
        number: u64,
        /// Its fixture directory.
        dir: String,
        /// The mismatching fields.
        details: String,
    },
    /// The probed pass disagreed with the plain one: the probe changed execution.
    #[error("block {number}: the probed run used {probed} gas but the plain run {plain}")]
    ProbeChangedResult {
        /// Block number.
        number: u64,
        /// Gas of the plain run.
        plain: u64,
        /// Gas of the probed run.
        probed: u64,
    },
    /// A block came without a header to check against.
    #[error("{dir}: block has no header to check against")]
    NoHeader {
        /// Its fixture directory.
        dir: String,
    },
    /// The timed pass of a block did not execute as its counting pass did.
    #[error(
        "block {number}: the counting pass used {} gas and {} precompile calls, the timed pass {} and {}",
        counted.0, counted.1, timed.0, timed.1
    )]
    CountsDiffer {
        /// Block number.
        number: u64,
        /// Gas and precompile calls of the counting pass.
        counted: (u64, u64),
        /// Gas and precompile calls of the timed pass.
        timed: (u64, u64),
    },
    /// The sampler thread could not start.
    #[error("cannot start the sampler thread: {0}")]
    Sampler(std::io::Error),
}

impl Workload {
    /// Loads every block fixture below `dir`, calling `progress` after each.
    pub fn load(
        dir: &Path,
        chain: &ChainSpec,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<Self, ReplayError> {
        let dirs = fixture_dirs(dir)?;
        let mut blocks = Vec::with_capacity(dirs.len());
        for (i, dir) in dirs.iter().enumerate() {
            let fixture = load_fixture(dir)?;
            let block = PreparedBlock::from_fixture(&fixture, chain)?;
            blocks.push(LoadedBlock {
                dir: dir.clone(),
                block,
                db: fixture.database(),
            });
            progress(i + 1, dirs.len());
        }
        Ok(Self { blocks })
    }

    /// The code of every account with code in the blocks' pre-states: its hash, length and
    /// the forks of the blocks that touch it (contracts created inside the blocks are not
    /// there).
    pub fn codes(&self) -> std::collections::HashMap<alloy_primitives::Address, CodeInfo> {
        let mut codes = std::collections::HashMap::new();
        for loaded in &self.blocks {
            for (address, account) in &loaded.db.cache.accounts {
                let info = &account.info;
                if info.code_hash == gigas_evm::revm::primitives::KECCAK_EMPTY
                    || info.code_hash.is_zero()
                {
                    continue;
                }
                let bytes = info
                    .code
                    .as_ref()
                    .or_else(|| loaded.db.cache.contracts.get(&info.code_hash))
                    .map_or(0, |code| code.original_byte_slice().len());
                let spec = 1u64 << (loaded.block.cfg.spec as u8 % 64);
                codes
                    .entry(*address)
                    .or_insert(CodeInfo {
                        hash: info.code_hash,
                        bytes,
                        specs: 0,
                    })
                    .specs |= spec;
            }
        }
        codes
    }

    /// Transactions in the workload.
    pub fn tx_count(&self) -> usize {
        self.blocks.iter().map(|b| b.block.txs.len()).sum()
    }

    /// Gas of the workload, from the headers.
    pub fn gas(&self) -> u64 {
        self.blocks
            .iter()
            .filter_map(|b| b.block.header_gas_used())
            .sum()
    }

    /// Executes every block once on plain revm and checks it against its header.
    ///
    /// This pass is also the warm-up: it pays one-time initialisation (precompile tables, the
    /// KZG trusted setup) so that no timed pass does.
    pub fn check(
        &self,
        progress: impl FnMut(usize, usize),
    ) -> Result<Vec<BlockCheck>, ReplayError> {
        self.check_with(None, progress)
    }

    /// [`Self::check`], with frames running compiled code from `jit` when given.
    pub fn check_with(
        &self,
        jit: Option<&std::sync::Arc<gigas_evm::jit::CodeCache>>,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<Vec<BlockCheck>, ReplayError> {
        let mut checks = Vec::with_capacity(self.blocks.len());
        for (i, loaded) in self.blocks.iter().enumerate() {
            let mut evm = match jit {
                Some(cache) => PlainEvm::with_jit(
                    loaded.db.clone(),
                    &loaded.block,
                    std::sync::Arc::clone(cache),
                ),
                None => PlainEvm::new(loaded.db.clone(), &loaded.block),
            };
            let outcome = execute_block(&mut evm, &loaded.block)?;
            let Some(check) = outcome.check(&loaded.block) else {
                return Err(ReplayError::NoHeader {
                    dir: loaded.dir.display().to_string(),
                });
            };
            if !check.is_match() {
                return Err(ReplayError::HeaderMismatch {
                    number: loaded.block.number,
                    dir: loaded.dir.display().to_string(),
                    details: check
                        .mismatches
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; "),
                });
            }
            checks.push(check);
            progress(i + 1, self.blocks.len());
        }
        Ok(checks)
    }

    /// Executes one block on plain revm. Times only execution: cloning the pre-state and
    /// building the EVM happen before the clock starts, dropping them after it stops.
    pub fn plain_block(&self, loaded: &LoadedBlock) -> Result<(Duration, u64), ReplayError> {
        let mut evm = PlainEvm::new(loaded.db.clone(), &loaded.block);
        let start = Instant::now();
        let outcome = execute_block(&mut evm, &loaded.block)?;
        let elapsed = start.elapsed();
        Ok((elapsed, outcome.gas_used()))
    }

    /// [`Workload::plain_block`] with a sampler spinning on the other core, reading a word
    /// nothing writes: what the sampler's mere presence costs plain replay (a second busy
    /// core shares the machine's caches, memory bandwidth and, on a VM, the host's time).
    pub fn plain_block_beside_sampler(
        &self,
        loaded: &LoadedBlock,
        interval: Duration,
    ) -> Result<Duration, ReplayError> {
        let cell = ActivityCell::default();
        let (timed, _) = sample_during(cell.reader(), interval, || self.plain_block(loaded))
            .map_err(ReplayError::Sampler)?;
        Ok(timed?.0)
    }

    /// Executes every block once, untimed, on a probe that counts: the exact counts every
    /// timed pass is credited with, since a block's replay dispatches the same opcodes every
    /// time (each timed pass checks its gas and precompile calls against them).
    pub fn count(&self) -> Result<Vec<BlockCounts>, ReplayError> {
        self.blocks
            .iter()
            .map(|loaded| {
                let mut evm = ProbedEvm::new(loaded.db.clone(), &loaded.block, Probe::new());
                let outcome = execute_block(&mut evm, &loaded.block)?;
                let probe = evm.probe();
                Ok(BlockCounts {
                    opcodes: probe.counts,
                    precompile_calls: probe.precompile_calls,
                    gas: outcome.gas_used(),
                })
            })
            .collect()
    }

    /// Executes one block on the probed EVM with a sampler reading it every `interval`,
    /// keeping its call tree when `stacks`. The probe publishes without counting; the block's
    /// `counts` ([`Workload::count`]) are what the result carries.
    pub fn probed_block(
        &self,
        loaded: &LoadedBlock,
        counts: &BlockCounts,
        interval: Duration,
        stacks: bool,
    ) -> Result<ProbedBlock, ReplayError> {
        let probe = if stacks {
            Probe::with_call_stacks(gigas_evm::callstack::DEFAULT_MAX_NODES)
        } else {
            Probe::new()
        };
        let mut evm = ProbedEvm::new(loaded.db.clone(), &loaded.block, probe.without_counts());
        let SampledBlock {
            outcome,
            elapsed,
            histogram,
        } = sampled_block(&mut evm, &loaded.block, interval).map_err(ReplayError::Sampler)?;
        let outcome = outcome?;
        let mut probe = evm.into_probe();
        let gas = outcome.gas_used();
        if gas != counts.gas || probe.precompile_calls != counts.precompile_calls {
            return Err(ReplayError::CountsDiffer {
                number: loaded.block.number,
                counted: (counts.gas, counts.precompile_calls),
                timed: (gas, probe.precompile_calls),
            });
        }
        Ok(ProbedBlock {
            elapsed,
            gas,
            histogram,
            counts: counts.opcodes,
            precompile_calls: probe.precompile_calls,
            tree: probe.take_call_tree(),
        })
    }

    /// Runs `rounds` rounds over every block with call stacks on ([`Workload::measure_with`]).
    pub fn measure(
        &self,
        rounds: usize,
        interval: Duration,
        progress: impl FnMut(usize, usize),
    ) -> Result<Vec<Round>, ReplayError> {
        self.measure_with(rounds, interval, true, progress)
    }

    /// Runs `rounds` rounds over every block. Each block runs once plain and once probed,
    /// back to back, the order alternating from block to block and round to round, so that
    /// drift in the machine's speed hits both alike. With `stacks`, the probed runs keep
    /// their call trees and each round's samples are credited to call paths
    /// ([`ProbedPass::stacks`]). Calls `progress` after each round.
    pub fn measure_with(
        &self,
        rounds: usize,
        interval: Duration,
        stacks: bool,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<Vec<Round>, ReplayError> {
        let counts = self.count()?;
        let mut out = Vec::with_capacity(rounds);
        for r in 0..rounds {
            let mut round = Round::default();
            for (i, (loaded, counts)) in self.blocks.iter().zip(&counts).enumerate() {
                let (plain, probed) = if (r + i) % 2 == 0 {
                    let plain = self.plain_block(loaded)?;
                    (plain, self.probed_block(loaded, counts, interval, stacks)?)
                } else {
                    let probed = self.probed_block(loaded, counts, interval, stacks)?;
                    (self.plain_block(loaded)?, probed)
                };
                if plain.1 != probed.gas {
                    return Err(ReplayError::ProbeChangedResult {
                        number: loaded.block.number,
                        plain: plain.1,
                        probed: probed.gas,
                    });
                }
                round.plain.per_block.push(plain.0);
                round.plain.gas.push(plain.1);
                let hashes: Vec<_> = loaded.block.txs.iter().map(|tx| tx.hash).collect();
                round.probed.add(probed, loaded.block.number, &hashes);
            }
            out.push(round);
            progress(r + 1, rounds);
        }
        Ok(out)
    }
}

/// One round of [`Workload::measure_overhead`]: each block's time in each way of running.
#[derive(Debug, Clone, Default)]
pub struct OverheadRound {
    /// Each block's times, in block order, indexed by way: [`OverheadRound::PLAIN`],
    /// [`OverheadRound::BESIDE_SAMPLER`], [`OverheadRound::PROBED`],
    /// [`OverheadRound::STACKED`].
    pub per_block: Vec<[Duration; 4]>,
}

impl OverheadRound {
    /// Plain revm.
    pub const PLAIN: usize = 0;
    /// Plain revm with the sampler spinning beside it, reading nothing.
    pub const BESIDE_SAMPLER: usize = 1;
    /// Probed, opcodes only.
    pub const PROBED: usize = 2;
    /// Probed with call stacks.
    pub const STACKED: usize = 3;

    /// The round's pass time in `way`, seconds: its blocks' times summed.
    pub fn pass_seconds(&self, way: usize) -> f64 {
        self.per_block
            .iter()
            .map(|times| times[way].as_secs_f64())
            .sum()
    }
}

impl Workload {
    /// The cost of call-stack attribution: each block runs plain, plain beside a spinning
    /// sampler, probed without call stacks and probed with them, back to back in an order
    /// rotating from block to block and round to round, sampled every `interval`. Calls
    /// `progress` after each round.
    pub fn measure_overhead(
        &self,
        rounds: usize,
        interval: Duration,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<Vec<OverheadRound>, ReplayError> {
        let counts = self.count()?;
        let mut out = Vec::with_capacity(rounds);
        for r in 0..rounds {
            let mut round = OverheadRound::default();
            for (i, (loaded, counts)) in self.blocks.iter().zip(&counts).enumerate() {
                let mut times = [Duration::ZERO; 4];
                for way in 0..4 {
                    let at = (way + r + i) % 4;
                    times[at] = match at {
                        OverheadRound::PLAIN => self.plain_block(loaded)?.0,
                        OverheadRound::BESIDE_SAMPLER => {
                            self.plain_block_beside_sampler(loaded, interval)?
                        }
                        OverheadRound::PROBED => {
                            self.probed_block(loaded, counts, interval, false)?.elapsed
                        }
                        _ => self.probed_block(loaded, counts, interval, true)?.elapsed,
                    };
                }
                round.per_block.push(times);
            }
            out.push(round);
            progress(r + 1, rounds);
        }
        Ok(out)
    }
}

/// A contract's code, as the JIT's cache knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct CodeInfo {
    /// Its code hash (what compiled code is keyed by).
    pub hash: alloy_primitives::B256,
    /// Its length in bytes (what compiling it costs, and its machine code's size, scale with).
    pub bytes: usize,
    /// The forks it runs under, one bit per `SpecId`: compiled code is per fork, so a
    /// contract called in blocks of three forks is compiled, and held, three times.
    pub specs: u64,
}

/// The exact counts of one block, from its counting pass ([`Workload::count`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockCounts {
    /// Opcodes dispatched, by opcode.
    pub opcodes: [u64; 256],
    /// Precompile calls.
    pub precompile_calls: u64,
    /// Gas the block used.
    pub gas: u64,
}

/// One block executed on the probed EVM.
#[derive(Debug, Clone)]
pub struct ProbedBlock {
    /// Execution time.
    pub elapsed: Duration,
    /// Gas used.
    pub gas: u64,
    /// Sampled time per activity.
    pub histogram: Histogram,
    /// Exact opcode counts.
    pub counts: [u64; 256],
    /// Precompile calls.
    pub precompile_calls: u64,
    /// The block's call tree, when call stacks were on.
    pub tree: Option<gigas_evm::callstack::CallTree>,
}

/// Timings of one pass.
#[derive(Debug, Clone, Default)]
pub struct PassTiming {
    /// Execution time of each block.
    pub per_block: Vec<Duration>,
    /// Gas each block used.
    pub gas: Vec<u64>,
}

impl PassTiming {
    /// Execution time of the whole pass.
    pub fn total(&self) -> Duration {
        self.per_block.iter().sum()
    }
}

/// A probed pass: timings, the sampled histogram and exact opcode counts.
#[derive(Debug, Clone)]
pub struct ProbedPass {
    /// Block timings under the probe.
    pub timing: PassTiming,
    /// Sampled time per activity.
    pub histogram: Histogram,
    /// Exact opcode counts.
    pub counts: [u64; 256],
    /// Precompile calls.
    pub precompile_calls: u64,
    /// The pass's samples by call path, when call stacks were on.
    pub stacks: Option<StackProfile>,
}

impl Default for ProbedPass {
    fn default() -> Self {
        Self {
            timing: PassTiming::default(),
            histogram: Histogram::default(),
            counts: [0; 256],
            precompile_calls: 0,
            stacks: None,
        }
    }
}

impl ProbedPass {
    fn add(&mut self, block: ProbedBlock, number: u64, tx_hashes: &[alloy_primitives::B256]) {
        if let Some(tree) = &block.tree {
            self.stacks
                .get_or_insert_with(StackProfile::default)
                .add_block(number, tx_hashes, tree, &block.histogram.by_word, true);
        }
        self.timing.per_block.push(block.elapsed);
        self.timing.gas.push(block.gas);
        self.histogram.merge(&block.histogram);
        for (total, n) in self.counts.iter_mut().zip(block.counts.iter()) {
            *total += n;
        }
        self.precompile_calls += block.precompile_calls;
    }
}

/// One plain pass and one probed pass over every block.
#[derive(Debug, Clone, Default)]
pub struct Round {
    /// The plain pass.
    pub plain: PassTiming,
    /// The probed pass.
    pub probed: ProbedPass,
}
