//! Compiled code in revm's frame loop: the `--jit off|on|eager` switch, the code cache, and
//! the EVM wrapper whose `frame_run` runs a frame's compiled code when there is one.
//!
//! The interpreter stays the reference. A frame whose code is compiled when it starts runs
//! compiled code, which stops at each CALL or CREATE for revm to run the child frame and is
//! entered again after it; compiled code hands the frame to the interpreter where it cannot
//! go on (a failed gas or stack check), and the interpreter then runs the frame up to its end
//! or its next CALL. A frame that starts interpreted stays interpreted. Compilation happens on one background thread that owns the
//! Cranelift module (and so keeps every function alive as long as the cache lives).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::{mpsc, Arc, Mutex};

use alloy_primitives::{Bytes, B256};
use gigas_jit::CompiledCode;
use revm::context::ContextError;
use revm::context_interface::ContextTr;
use revm::handler::evm::{ContextDbError, FrameInitResult, FrameTr};
use revm::handler::{EthFrame, EvmTr, FrameInitOrResult, MainnetEvm};
use revm::interpreter::interpreter::EthInterpreter;
use revm::interpreter::interpreter_types::Jumps;
use revm::interpreter::{FrameInput, InterpreterAction};
use revm::primitives::hardfork::SpecId;

/// When compiled code runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JitMode {
    /// Never: the interpreter runs everything.
    #[default]
    Off,
    /// Contracts become hot by calls and by the gas their interpreted frames spend (see
    /// [`Hotness`]) and are then compiled in the background; frames are interpreted until
    /// their code is ready.
    On,
    /// Every contract is compiled when first called, before its frame runs.
    Eager,
}

impl FromStr for JitMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(Self::Off),
            "on" => Ok(Self::On),
            "eager" => Ok(Self::Eager),
            other => Err(format!(
                "unknown JIT mode {other:?}: expected off, on or eager"
            )),
        }
    }
}

impl fmt::Display for JitMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Off => "off",
            Self::On => "on",
            Self::Eager => "eager",
        })
    }
}

/// When `JitMode::On` compiles a contract: once it has been called at least `calls` times
/// and its interpreted frames have spent at least `gas` on their own instructions (gas
/// passed on to child frames is not theirs).
///
/// Gas is the better measure of what compiling saves: a contract called a thousand times to
/// run forty instructions gains less than one that loops for a million gas, and compiled code
/// that runs rarely only takes room in the instruction cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hotness {
    /// Calls (frames started) before compiling.
    pub calls: u32,
    /// Gas spent by interpreted frames of the contract before compiling.
    pub gas: u64,
}

impl Default for Hotness {
    /// 300,000 gas, whatever the calls: on the 50 shipped mainnet blocks it compiles 243
    /// contracts (88 MB of machine code) and replays 1.09x to 1.14x faster than the
    /// interpreter, where 8 calls compiled 612 (156 MB) for 1.03x, 100,000 gas 765 for 1.04x
    /// and 1,000,000 gas 62 for 1.08x to 1.09x.
    fn default() -> Self {
        Self {
            calls: 1,
            gas: 300_000,
        }
    }
}

impl Hotness {
    fn reached(&self, calls: u32, gas: u64) -> bool {
        calls >= self.calls && gas >= self.gas
    }
}

enum Entry {
    /// Calls seen so far and the gas their interpreted frames spent.
    Counting {
        calls: u32,
        gas: u64,
    },
    /// Sent to the compiler.
    Pending,
    Ready(CompiledCode),
    /// Not compilable (or the compiler failed): always interpreted.
    Failed,
}

struct Request {
    key: (B256, SpecId),
    code: Bytes,
    reply: Option<mpsc::Sender<()>>,
}

/// What the compiler thread is asked to do, in order.
enum Job {
    Compile(Request),
    /// Answer once every job sent before is done.
    Barrier(mpsc::Sender<()>),
}

/// Counters of the code cache.
#[derive(Debug, Default)]
pub struct JitStats {
    /// Contracts compiled.
    pub compiled: Counter,
    /// Contracts that could not be compiled (they run in the interpreter).
    pub failed: Counter,
    /// Nanoseconds spent compiling.
    pub compile_ns: Counter,
    /// Bytes of machine code held.
    pub code_bytes: Counter,
    /// Bytes of EVM code compiled.
    pub evm_bytes: Counter,
    /// Frames that started in compiled code.
    pub compiled_frames: Counter,
    /// Times compiled code handed a frame to the interpreter before its end (or its next
    /// CALL).
    pub bailed_frames: Counter,
    /// Times compiled code stopped at a CALL or CREATE for a child frame.
    pub suspensions: Counter,
}

impl JitStats {
    /// Registers the counters as `gigas_jit_*` for the node's `/metrics` (they are shared:
    /// the registry reads the live values).
    pub fn register(&self, registry: &mut Registry) {
        let sub = registry.sub_registry_with_prefix("gigas_jit");
        for (name, help, counter) in [
            ("contracts_compiled", "Contracts compiled", &self.compiled),
            (
                "contracts_not_compiled",
                "Contracts the compiler failed on or found nothing to compile in (interpreted)",
                &self.failed,
            ),
            (
                "compile_nanoseconds",
                "Time spent compiling",
                &self.compile_ns,
            ),
            (
                "machine_code_bytes",
                "Bytes of machine code the code cache holds",
                &self.code_bytes,
            ),
            (
                "evm_code_bytes",
                "Bytes of EVM code compiled",
                &self.evm_bytes,
            ),
            (
                "compiled_frames",
                "Frames that started in compiled code",
                &self.compiled_frames,
            ),
            (
                "handovers",
                "Times compiled code handed a frame to the interpreter",
                &self.bailed_frames,
            ),
            (
                "suspensions",
                "Times compiled code stopped at a CALL or CREATE",
                &self.suspensions,
            ),
        ] {
            sub.register(name, help, counter.clone());
        }
    }

    /// The counters' values now.
    pub fn snapshot(&self) -> JitCounts {
        let get = |c: &Counter| c.get();
        JitCounts {
            compiled: get(&self.compiled),
            failed: get(&self.failed),
            compile_ns: get(&self.compile_ns),
            code_bytes: get(&self.code_bytes),
            evm_bytes: get(&self.evm_bytes),
            compiled_frames: get(&self.compiled_frames),
            bailed_frames: get(&self.bailed_frames),
            suspensions: get(&self.suspensions),
        }
    }
}

/// The values of [`JitStats`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JitCounts {
    /// Contracts compiled.
    pub compiled: u64,
    /// Contracts that could not be compiled.
    pub failed: u64,
    /// Nanoseconds spent compiling.
    pub compile_ns: u64,
    /// Bytes of machine code held.
    pub code_bytes: u64,
    /// Bytes of EVM code compiled.
    pub evm_bytes: u64,
    /// Frames that started in compiled code.
    pub compiled_frames: u64,
    /// Times compiled code handed a frame to the interpreter.
    pub bailed_frames: u64,
    /// Times compiled code stopped at a CALL or CREATE.
    pub suspensions: u64,
}

/// Compiled contracts by code hash and spec, shared by every EVM of a process.
pub struct CodeCache {
    mode: JitMode,
    hotness: Hotness,
    entries: Arc<Mutex<HashMap<(B256, SpecId), Entry>>>,
    requests: Option<mpsc::Sender<Job>>,
    worker: Option<std::thread::JoinHandle<()>>,
    stats: Arc<JitStats>,
}

impl fmt::Debug for CodeCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CodeCache")
            .field("mode", &self.mode)
            .field("hotness", &self.hotness)
            .field("stats", &self.stats)
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl CodeCache {
    /// A cache for `mode`, with its compiler thread (none for `Off`) and the default
    /// [`Hotness`].
    pub fn new(mode: JitMode) -> Arc<Self> {
        Self::with_hotness(mode, Hotness::default())
    }

    /// A cache for `mode` whose `On` mode compiles what `hotness` calls hot.
    pub fn with_hotness(mode: JitMode, hotness: Hotness) -> Arc<Self> {
        let entries = Arc::new(Mutex::new(HashMap::new()));
        let stats = Arc::new(JitStats::default());
        let (requests, worker) = if mode == JitMode::Off {
            (None, None)
        } else {
            let (tx, rx) = mpsc::channel::<Job>();
            let entries = Arc::clone(&entries);
            let stats = Arc::clone(&stats);
            let worker = std::thread::Builder::new()
                .name("gigas-jit".into())
                .spawn(move || compile_loop(rx, &entries, &stats))
                .ok();
            (worker.as_ref().map(|_| tx), worker)
        };
        Arc::new(Self {
            mode,
            hotness,
            entries,
            requests,
            worker,
            stats,
        })
    }

    /// The mode.
    pub fn mode(&self) -> JitMode {
        self.mode
    }

    /// When `JitMode::On` compiles.
    pub fn hotness(&self) -> Hotness {
        self.hotness
    }

    /// The counters.
    pub fn stats(&self) -> &JitStats {
        &self.stats
    }

    /// The compiled code for `code` under `spec`, if it is ready; counts a call and may start
    /// compiling it.
    pub fn lookup(&self, hash: B256, code: &[u8], spec: SpecId) -> Option<CompiledCode> {
        let requests = self.requests.as_ref()?;
        let key = (hash, spec);
        let mut entries = lock(&self.entries);
        let entry = entries
            .entry(key)
            .or_insert(Entry::Counting { calls: 0, gas: 0 });
        match entry {
            Entry::Ready(code) => return Some(*code),
            Entry::Failed | Entry::Pending => return None,
            Entry::Counting { calls, gas } => {
                *calls = calls.saturating_add(1);
                if self.mode == JitMode::On && !self.hotness.reached(*calls, *gas) {
                    return None;
                }
            }
        }
        *entry = Entry::Pending;
        drop(entries);
        let code = Bytes::copy_from_slice(code);
        if self.mode == JitMode::Eager {
            let (reply, done) = mpsc::channel();
            let sent = requests.send(Job::Compile(Request {
                key,
                code,
                reply: Some(reply),
            }));
            if sent.is_ok() {
                let _ = done.recv();
            }
            return match lock(&self.entries).get(&key) {
                Some(Entry::Ready(code)) => Some(*code),
                _ => None,
            };
        }
        self.compile_in_background(key, code);
        None
    }

    /// Queues `code` for the compiler thread; the caller has marked its entry `Pending`.
    fn compile_in_background(&self, key: (B256, SpecId), code: Bytes) {
        if let Some(requests) = &self.requests {
            // A send fails only when the compiler thread is gone; the contract then stays
            // interpreted, which is always correct.
            let _ = requests.send(Job::Compile(Request {
                key,
                code,
                reply: None,
            }));
        }
    }

    /// Adds `gas` that an interpreted frame of `code` spent on its own instructions; may start
    /// compiling it (in `JitMode::On`).
    pub fn spent(&self, hash: B256, code: &[u8], spec: SpecId, gas: u64) {
        if self.mode != JitMode::On {
            return;
        }
        let key = (hash, spec);
        let mut entries = lock(&self.entries);
        let Some(entry) = entries.get_mut(&key) else {
            return;
        };
        let Entry::Counting { calls, gas: spent } = entry else {
            return;
        };
        *spent = spent.saturating_add(gas);
        if !self.hotness.reached(*calls, *spent) {
            return;
        }
        *entry = Entry::Pending;
        drop(entries);
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
        // Closing the channel ends the compiler thread, which frees the machine code: no EVM
        // holds the cache any more, so none can run it.
        self.requests.take();
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

fn compile_loop(
    requests: mpsc::Receiver<Job>,
    entries: &Mutex<HashMap<(B256, SpecId), Entry>>,
    stats: &JitStats,
) {
    let mut compiler = match gigas_jit::Compiler::new() {
        Ok(compiler) => Some(compiler),
        Err(e) => {
            tracing::warn!(error = %e, "no JIT on this machine; everything is interpreted");
            None
        }
    };
    for job in requests {
        let request = match job {
            Job::Compile(request) => request,
            Job::Barrier(reply) => {
                let _ = reply.send(());
                continue;
            }
        };
        let started = std::time::Instant::now();
        let result = match compiler.as_mut() {
            Some(compiler) => compiler.compile(&request.code, request.key.1),
            None => Err(gigas_jit::CompileError::Isa("no compiler".into())),
        };
        let entry = match result {
            Ok(code) => {
                stats.compiled.inc_by(1);
                stats.compile_ns.inc_by(started.elapsed().as_nanos() as u64);
                stats.code_bytes.inc_by(code.code_size as u64);
                stats.evm_bytes.inc_by(request.code.len() as u64);
                Entry::Ready(code)
            }
            Err(e) => {
                stats.failed.inc_by(1);
                tracing::debug!(hash = %request.key.0, error = %e, "interpreted: not compiled");
                Entry::Failed
            }
        };
        lock(entries).insert(request.key, entry);
        if let Some(reply) = request.reply {
            let _ = reply.send(());
        }
    }
}

/// revm's mainnet EVM whose frames run compiled code when the cache has it.
pub struct JitEvm<CTX: ContextTr> {
    /// The wrapped EVM.
    pub inner: MainnetEvm<CTX>,
    /// The code cache; `None` runs the interpreter only.
    pub cache: Option<Arc<CodeCache>>,
    /// The compiled code of the frame at each depth of the frame stack, chosen when the frame
    /// started: a frame resumed after a child frame goes on in what it started with.
    pub frames: Vec<Option<CompiledCode>>,
    /// Compiled code this EVM has already found in the shared cache: later frames of the same
    /// contract take no lock.
    pub found: HashMap<(B256, SpecId), CompiledCode>,
    /// Gas the interpreted frame at each depth has spent on its own instructions so far,
    /// reported to the cache's hotness count when the frame ends.
    pub own_gas: Vec<u64>,
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
        // A frame picks its code when it starts; CREATE frames (no code hash) run init code
        // once and are not worth compiling.
        let compiled = if interpreter.bytecode.pc() == 0 {
            let code = match (&self.cache, interpreter.bytecode.hash()) {
                (Some(cache), Some(hash)) => {
                    let key = (hash, interpreter.runtime_flag.spec_id);
                    match self.found.get(&key) {
                        Some(code) => Some(*code),
                        None => {
                            let code = cache.lookup(
                                hash,
                                interpreter.bytecode.original_byte_slice(),
                                key.1,
                            );
                            if let Some(code) = code {
                                self.found.insert(key, code);
                            }
                            code
                        }
                    }
                }
                _ => None,
            };
            self.frames[depth] = code;
            self.own_gas[depth] = 0;
            code
        } else {
            self.frames[depth]
        };
        if compiled.is_some() && interpreter.bytecode.pc() == 0 {
            if let Some(cache) = &self.cache {
                cache.stats().compiled_frames.inc_by(1);
            }
        }
        let action = match (compiled, &self.cache) {
            (Some(code), Some(cache)) => {
                // SAFETY: compiled from this frame's bytecode for its spec; the cache keeps
                // the machine code alive while this EVM holds it.
                let (action, exit) = unsafe {
                    gigas_jit::runtime::run_frame(
                        code.function,
                        interpreter,
                        &mut evm.ctx,
                        table,
                        gas_table,
                    )
                };
                let stats = cache.stats();
                match exit {
                    gigas_jit::runtime::Exit::Bailed(_) => {
                        stats.bailed_frames.inc_by(1);
                    }
                    gigas_jit::runtime::Exit::Suspended => {
                        stats.suspensions.inc_by(1);
                    }
                    _ => {}
                }
                action
            }
            (None, Some(cache)) if cache.mode() == JitMode::On => {
                let before = interpreter.gas.remaining();
                let action = interpreter.run_plain(table, gas_table, &mut evm.ctx);
                // A CALL or CREATE charged the gas it passes on to the child frame; that gas
                // is the child's to spend.
                let passed_on = match &action {
                    InterpreterAction::NewFrame(FrameInput::Call(call)) => call.gas_limit,
                    InterpreterAction::NewFrame(FrameInput::Create(create)) => create.gas_limit(),
                    _ => 0,
                };
                let own = before
                    .saturating_sub(interpreter.gas.remaining())
                    .saturating_sub(passed_on);
                self.own_gas[depth] = self.own_gas[depth].saturating_add(own);
                if action.is_return() {
                    if let Some(hash) = interpreter.bytecode.hash() {
                        cache.spent(
                            hash,
                            interpreter.bytecode.original_byte_slice(),
                            interpreter.runtime_flag.spec_id,
                            self.own_gas[depth],
                        );
                    }
                }
                action
            }
            _ => interpreter.run_plain(table, gas_table, &mut evm.ctx),
        };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::{execute_block, PlainEvm};
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
}
