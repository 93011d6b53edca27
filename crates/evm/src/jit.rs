//! Compiled code in revm's frame loop: the EVM wrapper whose `frame_run` runs a frame's
//! compiled code when there is one. The `--jit off|on|eager` switch, the code cache with its
//! budget and its counters are `gigas_jit`'s, re-exported here.
//!
//! The interpreter stays the reference. A frame whose code is compiled when it starts runs
//! compiled code, which stops at each CALL or CREATE for revm to run the child frame and is
//! entered again after it; compiled code hands the frame to the interpreter where it cannot
//! go on (a failed gas or stack check), and the interpreter then runs the frame up to its end
//! or its next CALL. A frame that starts interpreted stays interpreted.
//!
//! Machine code stays mapped while a frame can run it: each frame holds a [`CompiledCode`]
//! handle from its start until it returns, and so does the per-transaction table of code
//! already looked up, so that the cache may evict a contract at any time (see `gigas_jit`'s
//! crate documentation).

use std::collections::HashMap;
use std::sync::Arc;

use alloy_primitives::B256;
pub use gigas_jit::cache::{
    CacheConfig, CacheInvariantError, CodeCache, HotList, HotListError, Hotness, JitCounts,
    JitMode, JitStats, ParseJitModeError, Residency, DEFAULT_BUDGET_BYTES,
};
use gigas_jit::CompiledCode;
use revm::context::ContextError;
use revm::context_interface::ContextTr;
use revm::handler::evm::{ContextDbError, FrameInitResult, FrameTr};
use revm::handler::{EthFrame, EvmTr, FrameInitOrResult, MainnetEvm};
use revm::interpreter::interpreter::EthInterpreter;
use revm::interpreter::interpreter_types::Jumps;
use revm::interpreter::{FrameInput, InterpreterAction};
use revm::primitives::hardfork::SpecId;

/// Contracts one transaction remembers having found compiled, at most: beyond, the table
/// starts over (the cache still has them).
pub const MAX_FOUND_PER_TRANSACTION: usize = 256;

/// revm's mainnet EVM whose frames run compiled code when the cache has it.
pub struct JitEvm<CTX: ContextTr> {
    /// The wrapped EVM. Crate-visible only while `executor` still reaches in; it holds no
    /// compiled code, so nothing here depends on it staying put.
    pub(crate) inner: MainnetEvm<CTX>,
    /// The code cache; `None` runs the interpreter only. Crate-visible only while `executor`
    /// still sets it after construction. Replacing it is harmless to frames that run:
    /// they hold their own handles on their code.
    pub(crate) cache: Option<Arc<CodeCache>>,
    /// The compiled code of the frame at each depth of the frame stack, chosen when the frame
    /// started and held until it returns: a frame resumed after a child frame goes on in what
    /// it started with, even if the cache has evicted it since. At most one per depth (revm
    /// limits depth to 1,024).
    frames: Vec<Option<CompiledCode>>,
    /// Compiled code this transaction has already found in the shared cache: later frames of
    /// the same contract take no lock. Cleared at every transaction's first frame, and when it
    /// reaches [`MAX_FOUND_PER_TRANSACTION`], so that it pins evicted code for one transaction
    /// at most.
    found: HashMap<(B256, SpecId), CompiledCode>,
    /// Gas the interpreted frame at each depth has spent on its own instructions so far,
    /// reported to the cache's hotness count when the frame ends.
    own_gas: Vec<u64>,
}

impl<CTX: ContextTr> std::fmt::Debug for JitEvm<CTX> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JitEvm")
            .field("cache", &self.cache)
            .field("frames", &self.frames.len())
            .field("found", &self.found.len())
            .finish_non_exhaustive()
    }
}

impl<CTX: ContextTr> JitEvm<CTX> {
    /// An EVM whose frames run compiled code from `cache` (`None`: interpreter only).
    pub fn new(inner: MainnetEvm<CTX>, cache: Option<Arc<CodeCache>>) -> Self {
        Self {
            inner,
            cache,
            frames: Vec::new(),
            found: HashMap::new(),
            own_gas: Vec::new(),
        }
    }

    /// The wrapped EVM.
    pub fn inner(&self) -> &MainnetEvm<CTX> {
        &self.inner
    }

    /// The wrapped EVM, to set the transaction or reach the database between transactions.
    pub fn inner_mut(&mut self) -> &mut MainnetEvm<CTX> {
        &mut self.inner
    }

    /// Gives the wrapped EVM back (and drops this EVM's handles on compiled code).
    pub fn into_inner(self) -> MainnetEvm<CTX> {
        self.inner
    }

    /// The code cache, if frames run compiled code.
    pub fn cache(&self) -> Option<&Arc<CodeCache>> {
        self.cache.as_ref()
    }

    /// Handles on compiled code this EVM holds now (its frames' and its table of code
    /// found): what keeps evicted code mapped.
    pub fn held_code(&self) -> usize {
        self.frames.iter().flatten().count() + self.found.len()
    }
}

impl<CTX: ContextTr> EvmTr for JitEvm<CTX> {
    type Context = CTX;
    type Instructions = revm::handler::instructions::EthInstructions<EthInterpreter, CTX>;
    type Precompiles = revm::handler::EthPrecompiles;
    type Frame = EthFrame<EthInterpreter>;

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
    ) -> Result<FrameInitResult<'_, Self::Frame>, ContextDbError<CTX>> {
        self.inner.frame_init(frame_input)
    }

    fn frame_run(&mut self) -> Result<FrameInitOrResult<Self::Frame>, ContextDbError<CTX>> {
        let evm = &mut self.inner;
        let depth = evm.frame_stack.index().unwrap_or(0);
        let frame = evm.frame_stack.get();
        let interpreter = &mut frame.interpreter;
        let table = evm.instruction.instruction_table();
        let gas_table = evm.instruction.gas_table();
        if self.frames.len() <= depth {
            self.frames.resize(depth + 1, None);
            self.own_gas.resize(depth + 1, 0);
        }
        let hash = interpreter.bytecode.hash();
        let spec = interpreter.runtime_flag.spec_id;
        // A frame picks its code when it starts; CREATE frames (no code hash) run init code
        // once and are not worth compiling.
        if interpreter.bytecode.pc() == 0 {
            if depth == 0 {
                // A transaction's first frame: what the last one found may since have been
                // evicted, and must not stay mapped for this one's sake.
                self.found.clear();
            }
            let code = match (&self.cache, hash) {
                (Some(cache), Some(hash)) => match self.found.get(&(hash, spec)) {
                    Some(code) => Some(code.clone()),
                    None => {
                        let code =
                            cache.lookup(hash, interpreter.bytecode.original_byte_slice(), spec);
                        if let Some(code) = &code {
                            if self.found.len() >= MAX_FOUND_PER_TRANSACTION {
                                self.found.clear();
                            }
                            self.found.insert((hash, spec), code.clone());
                        }
                        code
                    }
                },
                _ => None,
            };
            if let (Some(_), Some(cache)) = (&code, &self.cache) {
                cache.stats().compiled_frames.inc();
            }
            self.frames[depth] = code;
            self.own_gas[depth] = 0;
        }
        // Compiled code runs only on the bytecode and spec it was compiled for: the check
        // costs a comparison and makes the unsafe call below depend on nothing but the
        // handle.
        let compiled = self.frames[depth]
            .as_ref()
            .filter(|code| Some(code.code_hash()) == hash && code.spec() == spec);
        let action = match (compiled, &self.cache) {
            (Some(code), Some(cache)) => {
                let before = interpreter.gas.remaining();
                // SAFETY: `code` was compiled from this frame's bytecode (its hash is the
                // frame's code hash) for its spec; the borrowed handle keeps the machine code
                // mapped while it runs.
                let (action, exit) = unsafe {
                    gigas_jit::runtime::run_frame(code, interpreter, &mut evm.ctx, table, gas_table)
                };
                code.record_gas(own_gas(before, interpreter.gas.remaining(), &action));
                let stats = cache.stats();
                match exit {
                    gigas_jit::runtime::Exit::Bailed(_) => {
                        stats.bailed_frames.inc();
                    }
                    gigas_jit::runtime::Exit::Suspended => {
                        stats.suspensions.inc();
                    }
                    _ => {}
                }
                action
            }
            (None, Some(cache)) if cache.mode() == JitMode::On => {
                let before = interpreter.gas.remaining();
                let action = interpreter.run_plain(table, gas_table, &mut evm.ctx);
                let own = own_gas(before, interpreter.gas.remaining(), &action);
                self.own_gas[depth] = self.own_gas[depth].saturating_add(own);
                if action.is_return() {
                    if let Some(hash) = hash {
                        cache.spent(
                            hash,
                            interpreter.bytecode.original_byte_slice(),
                            spec,
                            self.own_gas[depth],
                        );
                    }
                }
                action
            }
            _ => interpreter.run_plain(table, gas_table, &mut evm.ctx),
        };
        if action.is_return() {
            // The frame is done with its code: evicted code must not stay mapped for it.
            self.frames[depth] = None;
        }
        frame
            .process_next_action::<_, ContextError<_>>(&mut evm.ctx, action)
            .inspect(|i| {
                if i.is_result() {
                    frame.set_finished(true);
                }
            })
    }

    fn frame_return_result(
        &mut self,
        result: <Self::Frame as FrameTr>::FrameResult,
    ) -> Result<Option<<Self::Frame as FrameTr>::FrameResult>, ContextDbError<CTX>> {
        self.inner.frame_return_result(result)
    }
}

/// Gas a frame spent on its own instructions between `before` and `after`: a CALL or CREATE
/// charged the gas it passes on to the child frame, and that gas is the child's to spend.
fn own_gas(before: u64, after: u64, action: &InterpreterAction) -> u64 {
    let passed_on = match action {
        InterpreterAction::NewFrame(FrameInput::Call(call)) => call.gas_limit,
        InterpreterAction::NewFrame(FrameInput::Create(create)) => create.gas_limit(),
        _ => 0,
    };
    before.saturating_sub(after).saturating_sub(passed_on)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::{execute_block, PlainEvm};
    use alloy_primitives::Bytes;
    use prometheus_client::registry::Registry;
    use revm::bytecode::opcode::*;

    /// `On` compiles a contract once its interpreted frames have spent the hotness gas on
    /// their own instructions; gas passed on to a callee does not count.
    #[test]
    fn on_compiles_after_own_gas_not_gas_passed_on() {
        let cache = CodeCache::with_hotness(
            JitMode::On,
            Hotness {
                calls: 1,
                gas: 1_000,
            },
        );
        // About 117 gas of its own per call (pushes, GAS, a warm CALL, POP), while the CALL
        // hands almost a million gas to the identity precompile.
        let code = Bytes::from(vec![
            PUSH0, PUSH0, PUSH0, PUSH0, PUSH0, PUSH1, 4, GAS, CALL, POP, STOP,
        ]);
        let (block, db) = crate::program::call_block(code, Bytes::new(), 1_000_000);
        let call = || {
            let mut evm = PlainEvm::with_jit(db.clone(), &block, Arc::clone(&cache));
            let outcome = execute_block(&mut evm, &block).expect("executes");
            assert!(outcome.receipts[0].success);
            cache.wait_for_compiles();
        };
        let stats = cache.stats();
        let mut calls = 0;
        while stats.compiled.get() == 0 && calls < 30 {
            assert_eq!(stats.compiled_frames.get(), 0);
            call();
            calls += 1;
        }
        // 1,000 gas at about 117 a call: the ninth call makes it hot.
        assert_eq!(calls, 9, "compiled after {calls} calls");
        call();
        assert_eq!(stats.compiled_frames.get(), 1, "compiled code did not run");
    }

    /// A compiled program runs, its counters move, and `/metrics` shows them.
    #[test]
    fn compiled_frames_are_counted_in_metrics() {
        let cache = CodeCache::new(JitMode::Eager);
        // Store CALLVALUE at slot 0 through a CALL to the identity precompile and back.
        let code = Bytes::from(vec![
            PUSH0, PUSH0, PUSH0, PUSH0, PUSH0, PUSH1, 4, GAS, CALL, PUSH0, SSTORE, STOP,
        ]);
        let (block, db) = crate::program::call_block(code, Bytes::new(), 1_000_000);
        let mut evm = PlainEvm::with_jit(db, &block, Arc::clone(&cache));
        let outcome = execute_block(&mut evm, &block).expect("executes");
        assert!(outcome.receipts[0].success);
        let mut registry = Registry::default();
        cache.stats().register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
        for line in [
            "gigas_jit_contracts_compiled_total 1",
            "gigas_jit_compiled_frames_total 1",
            "gigas_jit_suspensions_total 1",
            "gigas_jit_handovers_total 0",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }

    /// Runs `tx` on `evm` as the block executor does, without committing.
    fn transact<DB: revm::Database>(
        evm: &mut JitEvm<crate::executor::BlockContext<DB>>,
        tx: revm::context::TxEnv,
    ) {
        use revm::context::result::{EVMError, InvalidTransaction};
        use revm::context_interface::{ContextSetters, JournalTr};
        use revm::handler::Handler;
        evm.inner_mut().ctx.set_tx(tx);
        let mut handler = revm::handler::MainnetHandler::<
            JitEvm<crate::executor::BlockContext<DB>>,
            EVMError<DB::Error, InvalidTransaction>,
            EthFrame<EthInterpreter>,
        >::default();
        let result = handler.run(evm);
        evm.inner_mut().ctx.journal_mut().finalize();
        assert!(
            result.is_ok_and(|r| r.is_success()),
            "the transaction fails"
        );
    }

    /// A frame lets go of its code when it returns, and a transaction's table of code found
    /// lets go of it when the next transaction starts: code the cache evicts meanwhile stays
    /// mapped for exactly that long, and is then freed.
    #[test]
    fn evicted_code_is_freed_when_the_transaction_holding_it_is_over() {
        use crate::executor::block_context;
        use revm::MainBuilder;
        let program =
            |value: u8| Bytes::from(vec![PUSH1, value, PUSH0, MSTORE8, PUSH1, 1, PUSH0, RETURN]);
        let (a, b) = (program(1), program(2));
        let page = gigas_jit::Compiler::new()
            .expect("host ISA")
            .compile(&a, SpecId::CANCUN)
            .expect("compiles")
            .mapped_bytes();
        // Room for one of the two programs.
        let cache = CodeCache::with_config(CacheConfig {
            budget_bytes: page,
            ..CacheConfig::new(JitMode::Eager)
        });
        let (block_a, db_a) = crate::program::call_block(a, Bytes::new(), 1_000_000);
        let (block_b, db_b) = crate::program::call_block(b, Bytes::new(), 1_000_000);
        let tx_a = block_a.txs[0].env.clone();
        let mut evm = JitEvm::new(
            block_context(db_a, &block_a, ()).build_mainnet(),
            Some(Arc::clone(&cache)),
        );
        transact(&mut evm, tx_a.clone());
        assert_eq!(
            evm.held_code(),
            1,
            "the finished frame let go; the table holds `a`"
        );
        // Another EVM compiles `b`, which evicts `a` while this EVM's table holds it.
        let mut other = JitEvm::new(
            block_context(db_b, &block_b, ()).build_mainnet(),
            Some(Arc::clone(&cache)),
        );
        transact(&mut other, block_b.txs[0].env.clone());
        let counts = cache.stats().snapshot();
        assert_eq!((counts.evictions, counts.evicted_in_use), (1, 1));
        assert_eq!((counts.mapped_modules, counts.freed_modules), (2, 0));
        // The next transaction starts by letting go of what the last one found: the old `a`
        // is freed, and compiled again (evicting `b`, which nothing holds any more once
        // `other` is gone).
        drop(other);
        transact(&mut evm, tx_a);
        let counts = cache.stats().snapshot();
        assert_eq!(counts.compiled, 3);
        assert_eq!((counts.evictions, counts.evicted_in_use), (2, 1));
        assert_eq!((counts.mapped_modules, counts.freed_modules), (1, 2));
        assert_eq!(counts.compiled_frames, 3, "every frame ran compiled code");
        drop(evm);
        drop(cache);
        // Nothing of the cache is left mapped, whoever dropped last.
    }
}
