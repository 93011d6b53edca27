//! Low-cost instrumentation hooks for the profiler.
//!
//! A probed EVM is plain revm with three changes, none of which alters results:
//!
//! - every entry of the instruction table is wrapped by a const-generic function that counts
//!   the opcode and publishes it as the *current activity* before running revm's own
//!   instruction (`Instruction::new` takes a plain `fn`, so the opcode is a const parameter and
//!   the counters live in revm's chain-specific slot of the context, [`Probe`]);
//! - the precompile provider publishes [`Phase::Precompile`] while a precompile runs and puts
//!   back the calling opcode afterwards;
//! - the handler publishes the transaction phases outside the interpreter (validation,
//!   pre-execution, first frame set-up, post-execution) and the executor publishes the commit.
//!
//! The current activity is one relaxed atomic store per instruction into a cache line of its
//! own ([`ActivityCell`]). A sampler on another thread reads it on a timer; this file does not
//! time anything itself, which is what keeps the probe's overhead small and measurable.

use std::fmt;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;

use revm::context::result::{EVMError, HaltReason, InvalidTransaction, ResultAndState};
use revm::context::{Evm, TxEnv};
use revm::context_interface::{ContextSetters, ContextTr, JournalTr};
use revm::database_interface::{Database, DatabaseCommit};
use revm::handler::{EthPrecompiles, FrameResult, Handler, MainnetHandler, PrecompileProvider};
use revm::interpreter::instructions::{gas_table_spec, instruction_table, InstructionTable};
use revm::interpreter::interpreter::EthInterpreter;
use revm::interpreter::{
    CallInputs, Instruction, InstructionContext, InstructionExecResult, InterpreterResult,
};
use revm::primitives::{Address, AddressSet};
use revm::state::EvmState;

use crate::executor::{block_context, BlockContext, BlockEvm, Frame, Instructions, PreparedBlock};

/// Work outside the interpreter's instructions, published as activities `256 + phase`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u16)]
pub enum Phase {
    /// Not executing a block (the harness between blocks). Samples here are not attributed.
    Idle = 256,
    /// The block loop between transactions: cloning the tx environment, assembling receipts.
    BlockLoop,
    /// Transaction validation: environment checks, intrinsic gas, loading and debiting the
    /// caller.
    Validation,
    /// Pre-execution: warming the beneficiary, access lists and precompiles, EIP-7702
    /// authorisations.
    PreExecution,
    /// Setting up the transaction's first frame: loading the callee's code or creating the
    /// contract account.
    FrameSetup,
    /// Post-execution: refunds, reimbursing the caller, paying the beneficiary, building the
    /// result.
    PostExecution,
    /// Finalising the journal and committing the transaction's state to the database.
    Commit,
    /// Running a precompiled contract.
    Precompile,
}

impl Phase {
    /// Every phase, in activity order.
    pub const ALL: [Phase; 8] = [
        Phase::Idle,
        Phase::BlockLoop,
        Phase::Validation,
        Phase::PreExecution,
        Phase::FrameSetup,
        Phase::PostExecution,
        Phase::Commit,
        Phase::Precompile,
    ];

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Idle => "(idle)",
            Phase::BlockLoop => "(block loop)",
            Phase::Validation => "(tx validation)",
            Phase::PreExecution => "(tx pre-execution)",
            Phase::FrameSetup => "(tx first frame setup)",
            Phase::PostExecution => "(tx post-execution)",
            Phase::Commit => "(state commit)",
            Phase::Precompile => "(precompiles)",
        }
    }

    /// The phase an activity value stands for, if it is not an opcode.
    pub fn from_activity(activity: u16) -> Option<Phase> {
        Phase::ALL.iter().copied().find(|p| *p as u16 == activity)
    }
}

/// Number of distinct activity values: 256 opcodes and the phases.
pub const ACTIVITY_COUNT: usize = 256 + Phase::ALL.len();

/// The activity the probed thread is executing now: an opcode (`0..256`) or a [`Phase`].
///
/// Padded to its own pair of cache lines so that the sampler's reads do not slow down writes
/// to anything else the interpreter touches.
#[repr(align(128))]
#[derive(Debug)]
pub struct ActivityCell {
    current: AtomicU16,
}

impl Default for ActivityCell {
    fn default() -> Self {
        Self {
            current: AtomicU16::new(Phase::Idle as u16),
        }
    }
}

impl ActivityCell {
    /// Publishes the current activity.
    #[inline(always)]
    pub fn set(&self, activity: u16) {
        self.current.store(activity, Ordering::Relaxed);
    }

    /// Publishes a phase.
    #[inline(always)]
    pub fn set_phase(&self, phase: Phase) {
        self.set(phase as u16);
    }

    /// Reads the current activity.
    #[inline(always)]
    pub fn get(&self) -> u16 {
        self.current.load(Ordering::Relaxed)
    }
}

/// The probe carried in revm's chain-specific slot of the context.
#[derive(Debug, Clone)]
pub struct Probe {
    /// How many times each opcode was dispatched (after its static gas was charged).
    pub counts: [u64; 256],
    /// How many precompile calls ran.
    pub precompile_calls: u64,
    /// Where the current activity is published.
    pub cell: Arc<ActivityCell>,
}

impl Default for Probe {
    fn default() -> Self {
        Self::new(Arc::default())
    }
}

impl Probe {
    /// A probe with zeroed counters publishing into `cell`.
    pub fn new(cell: Arc<ActivityCell>) -> Self {
        Self {
            counts: [0; 256],
            precompile_calls: 0,
            cell,
        }
    }
}

/// The context of a probed EVM.
pub type ProbedContext<DB> = BlockContext<DB, Probe>;

type ProbedRevm<DB> =
    Evm<ProbedContext<DB>, (), Instructions<ProbedContext<DB>>, ProbedPrecompiles, Frame>;

/// Counts the opcode, publishes it, then runs revm's own instruction for it.
///
/// `OP` is a const parameter because revm's instruction table holds plain function pointers;
/// the inner instruction is a compile-time constant, so the call is direct.
fn probed<const OP: u8, DB: Database>(
    ctx: InstructionContext<'_, ProbedContext<DB>, EthInterpreter>,
) -> InstructionExecResult {
    let probe = &mut ctx.host.chain;
    probe.counts[OP as usize] += 1;
    probe.cell.set(OP as u16);
    let inner: Instruction<EthInterpreter, ProbedContext<DB>> =
        const { instruction_table::<EthInterpreter, ProbedContext<DB>>()[OP as usize] };
    inner.execute(ctx)
}

macro_rules! fill_row {
    ($table:ident, $hi:literal, $($lo:literal)*) => {
        $( $table[$hi * 16 + $lo] = Instruction::new(probed::<{ $hi * 16 + $lo }, DB>); )*
    };
}

macro_rules! fill_table {
    ($table:ident, $($hi:literal)*) => {
        $( fill_row!($table, $hi, 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15); )*
    };
}

/// revm's mainnet instruction table with every entry wrapped by [`probed`].
pub fn probed_instruction_table<DB: Database>(
) -> InstructionTable<EthInterpreter, ProbedContext<DB>> {
    let mut table = instruction_table::<EthInterpreter, ProbedContext<DB>>();
    fill_table!(table, 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15);
    table
}

/// revm's precompiles, publishing [`Phase::Precompile`] while one runs.
#[derive(Debug, Clone)]
pub struct ProbedPrecompiles {
    inner: EthPrecompiles,
}

impl<DB: Database> PrecompileProvider<ProbedContext<DB>> for ProbedPrecompiles {
    type Output = InterpreterResult;

    fn set_spec(&mut self, spec: revm::primitives::hardfork::SpecId) -> bool {
        <EthPrecompiles as PrecompileProvider<ProbedContext<DB>>>::set_spec(&mut self.inner, spec)
    }

    fn run(
        &mut self,
        context: &mut ProbedContext<DB>,
        inputs: &CallInputs,
    ) -> Result<Option<Self::Output>, String> {
        // Every call frame asks; only a real precompile is timed as one.
        if !self.inner.contains(&inputs.bytecode_address) {
            return Ok(None);
        }
        let caller_activity = context.chain.cell.get();
        context.chain.cell.set_phase(Phase::Precompile);
        context.chain.precompile_calls += 1;
        let out = self.inner.run(context, inputs);
        context.chain.cell.set(caller_activity);
        out
    }

    fn warm_addresses(&self) -> &AddressSet {
        self.inner.warm_addresses()
    }

    fn contains(&self, address: &Address) -> bool {
        self.inner.contains(address)
    }
}

/// revm's mainnet handler, publishing the transaction phases.
struct PhaseHandler<DB: Database> {
    inner: MainnetHandler<ProbedRevm<DB>, EVMError<DB::Error, InvalidTransaction>, Frame>,
}

fn publish<DB: Database>(evm: &mut ProbedRevm<DB>, phase: Phase) {
    evm.ctx.chain.cell.set_phase(phase);
}

impl<DB: Database> Handler for PhaseHandler<DB> {
    type Evm = ProbedRevm<DB>;
    type Error = EVMError<DB::Error, InvalidTransaction>;
    type HaltReason = HaltReason;

    fn validate(
        &self,
        evm: &mut Self::Evm,
    ) -> Result<revm::interpreter::InitialAndFloorGas, Self::Error> {
        publish(evm, Phase::Validation);
        self.inner.validate(evm)
    }

    fn pre_execution(
        &self,
        evm: &mut Self::Evm,
        gas: &mut revm::interpreter::GasTracker,
    ) -> Result<Option<revm::handler::PreExecutionOutput>, Self::Error> {
        publish(evm, Phase::PreExecution);
        self.inner.pre_execution(evm, gas)
    }

    fn execution(
        &mut self,
        evm: &mut Self::Evm,
        checkpoint: revm::context_interface::journaled_state::JournalCheckpoint,
        gas: &mut revm::interpreter::GasTracker,
    ) -> Result<Option<FrameResult>, Self::Error> {
        publish(evm, Phase::FrameSetup);
        self.inner.execution(evm, checkpoint, gas)
    }

    fn post_execution(
        &self,
        evm: &mut Self::Evm,
        exec_result: &mut FrameResult,
        init_and_floor_gas: revm::interpreter::InitialAndFloorGas,
        eip7702_gas_refund: i64,
    ) -> Result<revm::context_interface::result::ResultGas, Self::Error> {
        publish(evm, Phase::PostExecution);
        self.inner
            .post_execution(evm, exec_result, init_and_floor_gas, eip7702_gas_refund)
    }
}

/// A revm EVM with the probe's hooks installed.
pub struct ProbedEvm<DB: Database> {
    evm: ProbedRevm<DB>,
}

impl<DB: Database> fmt::Debug for ProbedEvm<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProbedEvm")
            .field("spec", &self.evm.ctx.cfg.spec)
            .field("block", &self.evm.ctx.block.number)
            .finish_non_exhaustive()
    }
}

impl<DB: Database + DatabaseCommit> ProbedEvm<DB> {
    /// A probed EVM for `block` over `db`, publishing into `probe`'s cell.
    pub fn new(db: DB, block: &PreparedBlock, probe: Probe) -> Self {
        let spec = block.spec();
        let instructions =
            Instructions::new(probed_instruction_table::<DB>(), gas_table_spec(spec), spec);
        let precompiles = ProbedPrecompiles {
            inner: EthPrecompiles::new(spec),
        };
        Self {
            evm: Evm::new(block_context(db, block, probe), instructions, precompiles),
        }
    }

    /// The probe, with the counts of everything executed so far.
    pub fn probe(&self) -> &Probe {
        &self.evm.ctx.chain
    }

    /// Gives the probe back.
    pub fn into_probe(self) -> Probe {
        self.evm.ctx.chain
    }
}

impl<DB: Database + DatabaseCommit> BlockEvm for ProbedEvm<DB>
where
    DB::Error: fmt::Display,
{
    type DbError = DB::Error;

    fn transact(
        &mut self,
        tx: TxEnv,
    ) -> Result<ResultAndState, EVMError<DB::Error, InvalidTransaction>> {
        publish(&mut self.evm, Phase::Validation);
        self.evm.ctx.set_tx(tx);
        let mut handler = PhaseHandler {
            inner: MainnetHandler::default(),
        };
        let result = handler.run(&mut self.evm);
        // Finalising the journal, folding the changes and committing them are the commit
        // phase, up to `commit` below.
        publish(&mut self.evm, Phase::Commit);
        let state = self.evm.ctx.journal_mut().finalize();
        match result {
            Ok(result) => Ok(ResultAndState::new(result, state)),
            Err(e) => {
                publish(&mut self.evm, Phase::BlockLoop);
                Err(e)
            }
        }
    }

    fn commit(&mut self, state: EvmState) {
        self.evm.ctx.db_mut().commit(state);
        publish(&mut self.evm, Phase::BlockLoop);
    }
}
