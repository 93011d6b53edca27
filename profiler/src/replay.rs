//! Replaying the workload: the checking pass, then plain and probed passes alternated.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gigas_evm::fixture::fixture_dirs;
use gigas_evm::probe::{ActivityCell, Phase, Probe, ProbedEvm};
use gigas_evm::revm::database::{CacheDB, EmptyDB};
use gigas_evm::{
    execute_block, load_fixture, BlockCheck, ExecutionError, FixtureError, PlainEvm, PreparedBlock,
};
use gigas_primitives::ChainSpec;

use crate::sampler::{Histogram, Sampler};

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

    /// Executes one block on the probed EVM with a sampler reading it every `interval`.
    pub fn probed_block(
        &self,
        loaded: &LoadedBlock,
        interval: Duration,
    ) -> Result<ProbedBlock, ReplayError> {
        let cell = Arc::new(ActivityCell::default());
        let mut evm = ProbedEvm::new(
            loaded.db.clone(),
            &loaded.block,
            Probe::new(Arc::clone(&cell)),
        );
        let sampler = Sampler::start(Arc::clone(&cell), interval).map_err(ReplayError::Sampler)?;
        let start = Instant::now();
        cell.set_phase(Phase::BlockLoop);
        let outcome = execute_block(&mut evm, &loaded.block);
        cell.set_phase(Phase::Idle);
        let elapsed = start.elapsed();
        let histogram = sampler.stop();
        let outcome = outcome?;
        let probe = evm.into_probe();
        Ok(ProbedBlock {
            elapsed,
            gas: outcome.gas_used(),
            histogram,
            counts: probe.counts,
            precompile_calls: probe.precompile_calls,
        })
    }

    /// Runs `rounds` rounds over every block. Each block runs once plain and once probed,
    /// back to back, the order alternating from block to block and round to round, so that
    /// drift in the machine's speed hits both alike. Calls `progress` after each round.
    pub fn measure(
        &self,
        rounds: usize,
        interval: Duration,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<Vec<Round>, ReplayError> {
        let mut out = Vec::with_capacity(rounds);
        for r in 0..rounds {
            let mut round = Round::default();
            for (i, loaded) in self.blocks.iter().enumerate() {
                let (plain, probed) = if (r + i) % 2 == 0 {
                    let plain = self.plain_block(loaded)?;
                    (plain, self.probed_block(loaded, interval)?)
                } else {
                    let probed = self.probed_block(loaded, interval)?;
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
                round.probed.add(probed);
            }
            out.push(round);
            progress(r + 1, rounds);
        }
        Ok(out)
    }
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
}

impl Default for ProbedPass {
    fn default() -> Self {
        Self {
            timing: PassTiming::default(),
            histogram: Histogram::default(),
            counts: [0; 256],
            precompile_calls: 0,
        }
    }
}

impl ProbedPass {
    fn add(&mut self, block: ProbedBlock) {
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
