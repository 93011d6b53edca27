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
//!
//! The cell lives inside the probe, so inside revm's context, not behind a pointer: the store's
//! address is then an offset from the context the instruction already holds. Measured
//! alternating on the shipped blocks, the same store through a pointer (an `Arc`, or a
//! thread-local) cost 4-6 % of plain replay and from the context about 2 %; the sampler
//! reads it through a [`CellReader`] that [`ProbedEvm::reader`] hands out for as long as the
//! EVM is borrowed.
//!
//! Counting is the other per-instruction cost (one more read-modify-write, about 2 %), and
//! counts are the same on every replay of a block, so a probe can leave it out
//! ([`Probe::without_counts`]): the profiler counts each block once and times it with
//! publishing alone.
//!
//! With call stacks on ([`Probe::with_call_stacks`]), the EVM also keeps the block's
//! calling-context tree ([`crate::callstack`]): a wrapper around revm's frame hooks opens a node
//! when a frame starts and closes it when the frame returns, and the word each instruction
//! publishes carries the node with the opcode. That costs about 60 ns per call (measured:
//! about 1 % of a replay of the shipped blocks), nothing more per instruction.

use std::fmt;
use std::marker::{PhantomData, PhantomPinned};
use std::sync::atomic::{AtomicU64, Ordering};

use revm::context::result::{EVMError, HaltReason, InvalidTransaction, ResultAndState};
use revm::context::{Evm, TxEnv};
use revm::context_interface::{ContextSetters, ContextTr, JournalTr};
use revm::database_interface::{Database, DatabaseCommit};
use revm::handler::{
    EthPrecompiles, EvmTr, FrameInitOrResult, FrameResult, FrameTr, Handler, ItemOrResult,
    MainnetHandler, PrecompileProvider,
};
use revm::interpreter::instructions::{gas_table_spec, instruction_table, InstructionTable};
use revm::interpreter::interpreter::EthInterpreter;
use revm::interpreter::{
    CallInputs, CallScheme, FrameInput, Instruction, InstructionContext, InstructionExecResult,
    InterpreterResult,
};
use revm::primitives::{Address, AddressSet};
use revm::state::EvmState;

use crate::callstack::{self, CallKind, CallTree, NodeId, ROOT};
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

/// What the probed thread is executing now: an activity (an opcode `0..256` or a [`Phase`])
/// and the call-tree node it runs in, packed into one word ([`callstack::pack`]) so that a
/// reader never pairs one frame's node with another's opcode.
///
/// Padded to its own pair of cache lines so that the sampler's reads do not slow down writes
/// to anything else the interpreter touches.
#[repr(align(128))]
#[derive(Debug)]
pub struct ActivityCell {
    current: AtomicU64,
}

impl Default for ActivityCell {
    fn default() -> Self {
        Self {
            current: AtomicU64::new(callstack::pack(ROOT, Phase::Idle as u16)),
        }
    }
}

impl ActivityCell {
    /// Publishes a packed word ([`callstack::pack`]).
    #[inline(always)]
    pub fn set(&self, word: u64) {
        self.current.store(word, Ordering::Relaxed);
    }

    /// Publishes a phase outside any transaction (the block's node).
    #[inline(always)]
    pub fn set_phase(&self, phase: Phase) {
        self.set(callstack::pack(ROOT, phase as u16));
    }

    /// Reads the packed word.
    #[inline(always)]
    pub fn get(&self) -> u64 {
        self.current.load(Ordering::Relaxed)
    }

    /// Reads the current activity alone.
    #[inline(always)]
    pub fn activity(&self) -> u16 {
        callstack::unpack(self.get()).1
    }

    /// A reader of this cell for another thread, valid while the cell is borrowed.
    pub fn reader(&self) -> CellReader<'_> {
        CellReader::at(&self.current)
    }
}

/// Reads an [`ActivityCell`] from another thread (the sampler) while the thread it belongs to
/// writes it.
///
/// It holds a raw pointer rather than a reference so that [`ProbedEvm::reader`] can hand it
/// out while the EVM stays mutably borrowed for execution. That is sound because:
///
/// - the pointer is to an atomic, and both sides access it only atomically;
/// - the lifetime `'a` is a borrow of the place that holds the cell, which therefore stays
///   alive and in place (it may be overwritten by another value of the same type, whose cell
///   is then what is read);
/// - [`Probe`] is `!Unpin` ([`PhantomPinned`]), so mutable references to the context and the
///   EVM around it are not assumed unique, the rule that lets a future be read through a
///   pointer into itself.
#[derive(Debug, Clone, Copy)]
pub struct CellReader<'a> {
    word: *const AtomicU64,
    _cell: PhantomData<&'a ActivityCell>,
}

// SAFETY: the pointee is an `AtomicU64`, which is `Sync`; the lifetime keeps it alive.
unsafe impl Send for CellReader<'_> {}
// SAFETY: as above; reading is one atomic load.
unsafe impl Sync for CellReader<'_> {}

impl CellReader<'_> {
    /// A reader of the word at `word`; the caller ties the lifetime to a borrow of its place.
    fn at(word: *const AtomicU64) -> Self {
        Self {
            word,
            _cell: PhantomData,
        }
    }

    /// Reads the packed word ([`callstack::pack`]).
    #[inline(always)]
    pub fn get(&self) -> u64 {
        // SAFETY: see the type's documentation.
        unsafe { (*self.word).load(Ordering::Relaxed) }
    }

    /// Reads the current activity alone.
    #[inline(always)]
    pub fn activity(&self) -> u16 {
        callstack::unpack(self.get()).1
    }
}

/// The probe carried in revm's chain-specific slot of the context.
#[derive(Debug)]
pub struct Probe {
    /// Where the current activity is published: first, in a cache line of its own.
    cell: ActivityCell,
    /// How many times each opcode was dispatched (after its static gas was charged); zeros
    /// when the probe does not count ([`Probe::without_counts`]).
    pub counts: [u64; 256],
    /// How many precompile calls ran.
    pub precompile_calls: u64,
    /// Whether the instructions count themselves.
    counting: bool,
    /// The current node, shifted into place ([`callstack::pack`]): ORed into every word.
    tag: u64,
    /// The block's calling-context tree, when call stacks are on.
    tree: Option<CallTree>,
    /// Transactions begun in this block.
    txs: u32,
    /// The receipt gas of the transaction between its execution and its commit.
    tx_gas: u64,
    /// The sampler reads `cell` through a pointer while the EVM holding it is mutably
    /// borrowed ([`CellReader`]).
    _pinned: PhantomPinned,
}

impl Default for Probe {
    fn default() -> Self {
        Self::new()
    }
}

impl Probe {
    /// A probe that counts every opcode and publishes what runs, without call stacks.
    pub fn new() -> Self {
        Self {
            cell: ActivityCell::default(),
            counts: [0; 256],
            precompile_calls: 0,
            counting: true,
            tag: 0,
            tree: None,
            txs: 0,
            tx_gas: 0,
            _pinned: PhantomPinned,
        }
    }

    /// A probe that also keeps the block's calling-context tree, of at most `max_nodes`
    /// nodes, and publishes each activity with its node.
    pub fn with_call_stacks(max_nodes: usize) -> Self {
        Self {
            tree: Some(CallTree::with_capacity(max_nodes)),
            ..Self::new()
        }
    }

    /// The same probe, publishing without counting: what a timed pass runs once the counts
    /// are known from another run of the same block.
    pub fn without_counts(self) -> Self {
        Self {
            counting: false,
            ..self
        }
    }

    /// Whether the probe counts opcodes.
    pub fn counts_opcodes(&self) -> bool {
        self.counting
    }

    /// Where the current activity is published.
    pub fn cell(&self) -> &ActivityCell {
        &self.cell
    }

    /// The block's calling-context tree, when call stacks are on.
    pub fn call_tree(&self) -> Option<&CallTree> {
        self.tree.as_ref()
    }

    /// Takes the calling-context tree out.
    pub fn take_call_tree(&mut self) -> Option<CallTree> {
        self.tree.take()
    }

    /// Publishes `activity` in the current node.
    #[inline(always)]
    fn publish(&self, activity: u16) {
        self.cell.set(self.tag | activity as u64);
    }

    #[inline(always)]
    fn move_to(&mut self, node: NodeId) {
        self.tag = callstack::pack(node, 0);
    }

    fn begin_tx(&mut self) {
        if let Some(tree) = &mut self.tree {
            let node = tree.begin_tx(self.txs);
            self.move_to(node);
        }
        self.txs = self.txs.saturating_add(1);
        self.tx_gas = 0;
    }

    fn end_tx(&mut self) {
        if let Some(tree) = &mut self.tree {
            tree.end_tx(self.tx_gas);
        }
        self.move_to(ROOT);
    }

    fn enter(&mut self, frame: callstack::Frame) {
        if let Some(tree) = &mut self.tree {
            let node = tree.enter(frame);
            self.move_to(node);
        }
    }

    fn exit(&mut self, gas: u64) {
        if let Some(tree) = &mut self.tree {
            let node = tree.exit(gas);
            self.move_to(node);
        }
    }
}

/// The context of a probed EVM.
pub type ProbedContext<DB> = BlockContext<DB, Probe>;

type InnerRevm<DB> =
    Evm<ProbedContext<DB>, (), Instructions<ProbedContext<DB>>, ProbedPrecompiles, Frame>;

/// Counts the opcode (when `COUNT`), publishes it, then runs revm's own instruction for it.
///
/// `OP` is a const parameter because revm's instruction table holds plain function pointers;
/// the inner instruction is a compile-time constant, so the call is direct. `COUNT` is one
/// too, so that a probe that does not count has no branch either.
fn probed<const OP: u8, const COUNT: bool, DB: Database>(
    ctx: InstructionContext<'_, ProbedContext<DB>, EthInterpreter>,
) -> InstructionExecResult {
    let probe = &mut ctx.host.chain;
    if COUNT {
        probe.counts[OP as usize] += 1;
    }
    probe.publish(OP as u16);
    let inner: Instruction<EthInterpreter, ProbedContext<DB>> =
        const { instruction_table::<EthInterpreter, ProbedContext<DB>>()[OP as usize] };
    inner.execute(ctx)
}

macro_rules! fill_row {
    ($table:ident, $count:literal, $hi:literal, $($lo:literal)*) => {
        $( $table[$hi * 16 + $lo] = Instruction::new(probed::<{ $hi * 16 + $lo }, $count, DB>); )*
    };
}

macro_rules! fill_table {
    ($table:ident, $count:literal, $($hi:literal)*) => {
        $( fill_row!($table, $count, $hi, 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15); )*
    };
}

/// revm's mainnet instruction table with every entry wrapped by [`probed`], counting when
/// `count`.
pub fn probed_instruction_table<DB: Database>(
    count: bool,
) -> InstructionTable<EthInterpreter, ProbedContext<DB>> {
    let mut table = instruction_table::<EthInterpreter, ProbedContext<DB>>();
    if count {
        fill_table!(table, true, 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15);
    } else {
        fill_table!(table, false, 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15);
    }
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
        // Every call frame asks; only a real precompile is timed as one. Most frames are
        // calls to contracts, which the address's leading zeros rule out without the two
        // set lookups (this one and the inner provider's) a plain EVM does not pay twice.
        if !maybe_precompile(&inputs.bytecode_address)
            || !self.inner.contains(&inputs.bytecode_address)
        {
            return Ok(None);
        }
        // The precompile's own node is open (see `ProbedRevm::frame_init`); the caller's
        // word comes back once it returns.
        let caller_word = context.chain.cell.get();
        context.chain.publish(Phase::Precompile as u16);
        context.chain.precompile_calls += 1;
        let out = self.inner.run(context, inputs);
        context.chain.cell.set(caller_word);
        out
    }

    fn warm_addresses(&self) -> &AddressSet {
        self.inner.warm_addresses()
    }

    fn contains(&self, address: &Address) -> bool {
        self.inner.contains(address)
    }
}

/// revm's EVM with the frame hooks that keep the call tree: a node opens when a frame starts
/// (around a precompile, which runs inside the call) and closes when it returns.
struct ProbedRevm<DB: Database> {
    inner: InnerRevm<DB>,
}

/// The frame a call tree records for a frame that has just started.
fn started_frame<DB: Database>(ctx: &ProbedContext<DB>, frame: &Frame) -> callstack::Frame {
    match &frame.input {
        FrameInput::Call(call) => callstack::Frame {
            code: delegate_of(ctx, call.bytecode_address),
            selector: selector(ctx, call),
            kind: call_kind(call.scheme),
            precompile: false,
        },
        FrameInput::Create(create) => callstack::Frame {
            code: match &frame.data {
                revm::handler::FrameData::Create(created) => created.created_address,
                revm::handler::FrameData::Call(_) => Address::ZERO,
            },
            selector: None,
            kind: match create.scheme() {
                revm::context_interface::cfg::CreateScheme::Create2 { .. } => CallKind::Create2,
                _ => CallKind::Create,
            },
            precompile: false,
        },
        FrameInput::Empty => callstack::Frame {
            code: Address::ZERO,
            selector: None,
            kind: CallKind::Call,
            precompile: false,
        },
    }
}

/// Whether `address` is low enough to be a precompile (every fork's sit below 2^16): most
/// calls go to contracts, and this spares them a set lookup per call.
#[inline]
fn maybe_precompile(address: &Address) -> bool {
    address.0[..18].iter().all(|b| *b == 0)
}

/// The account whose code runs for `address`: its EIP-7702 delegate, if it has one (from
/// Prague; before, no account has one and the lookup is skipped).
fn delegate_of<DB: Database>(ctx: &ProbedContext<DB>, address: Address) -> Address {
    if !ctx
        .cfg
        .spec
        .is_enabled_in(revm::primitives::hardfork::SpecId::PRAGUE)
    {
        return address;
    }
    ctx.journaled_state
        .state
        .get(&address)
        .and_then(|account| account.info.code.as_ref())
        .and_then(|code| code.eip7702_address())
        .unwrap_or(address)
}

fn selector<DB: Database>(ctx: &ProbedContext<DB>, call: &CallInputs) -> Option<[u8; 4]> {
    let input = call.input.as_bytes(ctx);
    input.get(..4).and_then(|s| s.try_into().ok())
}

fn call_kind(scheme: CallScheme) -> CallKind {
    match scheme {
        CallScheme::Call => CallKind::Call,
        CallScheme::CallCode => CallKind::CallCode,
        CallScheme::DelegateCall => CallKind::DelegateCall,
        CallScheme::StaticCall => CallKind::StaticCall,
    }
}

impl<DB: Database> EvmTr for ProbedRevm<DB> {
    type Context = ProbedContext<DB>;
    type Instructions = Instructions<ProbedContext<DB>>;
    type Precompiles = ProbedPrecompiles;
    type Frame = Frame;

    fn all(
        &self,
    ) -> (
        &Self::Context,
        &Self::Instructions,
        &Self::Precompiles,
        &revm::context_interface::local::FrameStack<Self::Frame>,
    ) {
        self.inner.all()
    }

    fn all_mut(
        &mut self,
    ) -> (
        &mut Self::Context,
        &mut Self::Instructions,
        &mut Self::Precompiles,
        &mut revm::context_interface::local::FrameStack<Self::Frame>,
    ) {
        self.inner.all_mut()
    }

    fn frame_init(
        &mut self,
        frame_input: <Self::Frame as FrameTr>::FrameInit,
    ) -> Result<
        revm::handler::evm::FrameInitResult<'_, Self::Frame>,
        revm::context_interface::ContextError<DB::Error>,
    > {
        if self.inner.ctx.chain.tree.is_none() {
            return self.inner.frame_init(frame_input);
        }
        // A precompile runs inside `frame_init` and never becomes a frame: its node is
        // open around the call, so that its time lands in it.
        let precompile = match &frame_input.frame_input {
            FrameInput::Call(call)
                if maybe_precompile(&call.bytecode_address)
                    && self
                        .inner
                        .precompiles
                        .inner
                        .contains(&call.bytecode_address) =>
            {
                Some(callstack::Frame {
                    code: call.bytecode_address,
                    selector: None,
                    kind: call_kind(call.scheme),
                    precompile: true,
                })
            }
            _ => None,
        };
        if let Some(frame) = precompile {
            self.inner.ctx.chain.enter(frame);
        }
        let result = match self.inner.frame_init(frame_input)? {
            ItemOrResult::Item(_) => None,
            ItemOrResult::Result(result) => Some(result),
        };
        match result {
            // A precompile, or a call that ended before it started (no code, depth, balance).
            Some(result) => {
                if precompile.is_some() {
                    self.inner.ctx.chain.exit(result.gas().total_gas_spent());
                }
                Ok(ItemOrResult::Result(result))
            }
            None => {
                let frame = started_frame(&self.inner.ctx, self.inner.frame_stack.get());
                self.inner.ctx.chain.enter(frame);
                Ok(ItemOrResult::Item(self.inner.frame_stack.get()))
            }
        }
    }

    fn frame_run(
        &mut self,
    ) -> Result<FrameInitOrResult<Self::Frame>, revm::context_interface::ContextError<DB::Error>>
    {
        self.inner.frame_run()
    }

    fn frame_return_result(
        &mut self,
        result: <Self::Frame as FrameTr>::FrameResult,
    ) -> Result<
        Option<<Self::Frame as FrameTr>::FrameResult>,
        revm::context_interface::ContextError<DB::Error>,
    > {
        // The top frame is finished when the result is its own; a result that `frame_init`
        // returned without a frame belongs to no open node.
        if self.inner.ctx.chain.tree.is_some() && self.inner.frame_stack.get().is_finished() {
            self.inner.ctx.chain.exit(result.gas().total_gas_spent());
        }
        self.inner.frame_return_result(result)
    }
}

/// revm's mainnet handler, publishing the transaction phases.
struct PhaseHandler<DB: Database> {
    inner: MainnetHandler<ProbedRevm<DB>, EVMError<DB::Error, InvalidTransaction>, Frame>,
}

fn publish<DB: Database>(evm: &mut ProbedRevm<DB>, phase: Phase) {
    evm.inner.ctx.chain.publish(phase as u16);
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
            .field("spec", &self.evm.inner.ctx.cfg.spec)
            .field("block", &self.evm.inner.ctx.block.number)
            .finish_non_exhaustive()
    }
}

impl<DB: Database + DatabaseCommit> ProbedEvm<DB> {
    /// A probed EVM for `block` over `db`, publishing into `probe`'s cell.
    pub fn new(db: DB, block: &PreparedBlock, probe: Probe) -> Self {
        let spec = block.spec();
        let instructions = Instructions::new(
            probed_instruction_table::<DB>(probe.counting),
            gas_table_spec(spec),
            spec,
        );
        let precompiles = ProbedPrecompiles {
            inner: EthPrecompiles::new(spec),
        };
        Self {
            evm: ProbedRevm {
                inner: Evm::new(block_context(db, block, probe), instructions, precompiles),
            },
        }
    }

    /// The probe, with the counts of everything executed so far.
    pub fn probe(&self) -> &Probe {
        &self.evm.inner.ctx.chain
    }

    /// Gives the probe back.
    pub fn into_probe(self) -> Probe {
        self.evm.inner.ctx.chain
    }

    /// Publishes `phase` outside any transaction: the harness marks the start and the end
    /// of a timed block with it.
    pub fn set_phase(&self, phase: Phase) {
        self.evm.inner.ctx.chain.cell.set_phase(phase);
    }

    /// A reader of the probe's cell for a sampler on another thread, and the EVM back to
    /// execute with: both for as long as `self` is borrowed ([`CellReader`] says why that is
    /// sound).
    pub fn reader(&mut self) -> (CellReader<'_>, &mut Self) {
        let reader = CellReader::at(&raw const self.evm.inner.ctx.chain.cell.current);
        (reader, self)
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
        self.evm.inner.ctx.chain.begin_tx();
        publish(&mut self.evm, Phase::Validation);
        self.evm.inner.ctx.set_tx(tx);
        let mut handler = PhaseHandler {
            inner: MainnetHandler::default(),
        };
        let result = handler.run(&mut self.evm);
        // Finalising the journal, folding the changes and committing them are the commit
        // phase, up to `commit` below; they belong to the transaction.
        publish(&mut self.evm, Phase::Commit);
        let state = self.evm.inner.ctx.journal_mut().finalize();
        match result {
            Ok(result) => {
                self.evm.inner.ctx.chain.tx_gas = result.tx_gas_used();
                Ok(ResultAndState::new(result, state))
            }
            Err(e) => {
                self.evm.inner.ctx.chain.end_tx();
                publish(&mut self.evm, Phase::BlockLoop);
                Err(e)
            }
        }
    }

    fn commit(&mut self, state: EvmState) {
        self.evm.inner.ctx.db_mut().commit(state);
        self.evm.inner.ctx.chain.end_tx();
        publish(&mut self.evm, Phase::BlockLoop);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use revm::primitives::hardfork::SpecId;

    /// The precompile provider answers "not a precompile" from the address alone for
    /// anything above 2^16: that must hold for every precompile of every fork.
    #[test]
    fn every_precompile_passes_the_leading_zeros_check() {
        for spec in [
            SpecId::FRONTIER,
            SpecId::BYZANTIUM,
            SpecId::ISTANBUL,
            SpecId::BERLIN,
            SpecId::CANCUN,
            SpecId::PRAGUE,
            SpecId::OSAKA,
        ] {
            let precompiles = EthPrecompiles::new(spec);
            assert!(!precompiles.warm_addresses().is_empty());
            for address in precompiles.warm_addresses() {
                assert!(maybe_precompile(address), "{spec:?}: {address}");
            }
        }
        assert!(!maybe_precompile(&Address::repeat_byte(0x11)));
    }
}
