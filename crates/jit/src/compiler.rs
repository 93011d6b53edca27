//! Translation of a contract into one native function with Cranelift.
//!
//! The function takes a [`JitContext`] and returns an exit code (`runtime::EXIT_*`). Each
//! basic block of the analysis becomes a Cranelift block that first checks, once, that the
//! stack holds what the block pops and has room for what it pushes and that the gas covers
//! the block's static gas; if not, the frame goes back to the interpreter at the block's
//! start, unchanged, and the interpreter meets the error at the exact instruction. Otherwise
//! the block's static gas is charged and its instructions run:
//!
//! - inline, on four 64-bit limbs: PUSH, POP, DUP, SWAP, ADD, SUB, AND, OR, XOR, NOT, LT,
//!   GT, SLT, SGT, EQ, ISZERO, PC, JUMPDEST, JUMP and JUMPI (through a jump table of the
//!   JUMPDESTs), and MLOAD, MSTORE and MSTORE8 inside memory already paid for (outside it,
//!   the interpreter's function expands memory);
//! - through direct calls of small helpers working in place on the stack for the arithmetic
//!   that has no dynamic gas and cannot fail (MUL, DIV, SDIV, MOD, SMOD, ADDMOD, MULMOD,
//!   SIGNEXTEND, BYTE, SHL, SHR, SAR);
//! - through the interpreter's own instruction function (`runtime::generic_instruction`) for
//!   everything else, with the interpreter's gas set to what it would be at that instruction.
//!
//! Within a block, stack words live in SSA values (a compile-time model of the stack: words
//! pushed or loaded, with the constants of PUSHes) and reach the stack buffer only when the
//! block ends or calls out; a JUMP or JUMPI to a pushed constant branches straight to its
//! block, without the jump table.
//!
//! An instruction that starts a new frame (the CALL and CREATE families) runs through the
//! interpreter's instruction function like any other; it leaves a new-frame action, and
//! compiled code returns (`EXIT_SUSPEND`) for revm to run the child frame. When the child
//! returns, revm has pushed its outcome on the parent's stack, and the parent's compiled code
//! is entered again with `JitContext::pc` at the instruction after the CALL, which starts a
//! block: the function's entry dispatches there (`pc` 0 is the frame's start).

use alloy_primitives::{keccak256, B256};
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, AbiParam, InstBuilder, MemFlagsData, Signature, UserFuncName};
use cranelift_codegen::ir::{Block as ClBlock, Value};
use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_codegen::Context;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Switch, Variable};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, Linkage, Module};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use revm::bytecode::opcode::{self, OpCode};
use revm::interpreter::GasTable;
use revm::primitives::hardfork::SpecId;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::analysis::{analyze, gas_table, Analysis, STACK_LIMIT};
use crate::runtime::{offsets, JitContext, CONTINUE, EXIT_BAIL, EXIT_INVALID_JUMP};

/// Why a contract was not compiled.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// The host ISA is not supported by Cranelift.
    #[error("no Cranelift backend for this machine: {0}")]
    Isa(String),
    /// Cranelift rejected the generated code (a compiler bug).
    #[error("Cranelift: {0}")]
    Codegen(String),
    /// No block of the contract can be translated.
    #[error("nothing to compile: every block needs the interpreter")]
    NothingToCompile,
}

/// The signature of a compiled contract.
pub(crate) type NativeFn = unsafe extern "C" fn(*mut JitContext) -> u32;

/// A compiled contract: a handle on its native function that keeps the function's machine
/// code mapped.
///
/// Every contract is compiled into a Cranelift module of its own, and every handle holds a
/// reference to that module; the module's memory is returned to the system (unmapped) when
/// the last handle is dropped, and not before. The function pointer never leaves the handle:
/// [`runtime::run_frame`](crate::runtime::run_frame) borrows the handle for as long as the
/// code runs. So whoever can still run the code holds a handle, and the code cannot be freed
/// under it.
#[derive(Debug, Clone)]
pub struct CompiledCode {
    function: NativeFn,
    code_size: usize,
    blocks: (usize, usize),
    code_hash: B256,
    spec: SpecId,
    module: Arc<CodeModule>,
}

impl CompiledCode {
    /// The native function, valid while `self` lives.
    pub(crate) fn function(&self) -> NativeFn {
        self.function
    }

    /// Bytes of machine code.
    pub fn code_size(&self) -> usize {
        self.code_size
    }

    /// Bytes of memory the machine code takes: its size rounded up to whole pages, as
    /// cranelift-jit maps each function's code on pages of its own.
    pub fn mapped_bytes(&self) -> u64 {
        self.module.mapped_bytes
    }

    /// Basic blocks translated and total.
    pub fn blocks(&self) -> (usize, usize) {
        self.blocks
    }

    /// The Keccak-256 hash of the EVM code this was compiled from.
    pub fn code_hash(&self) -> B256 {
        self.code_hash
    }

    /// The spec this was compiled for.
    pub fn spec(&self) -> SpecId {
        self.spec
    }

    /// Adds `gas` spent by compiled frames of this contract on their own instructions: the
    /// code cache's measure of what the code is worth keeping (lock-free; any thread).
    pub fn record_gas(&self, gas: u64) {
        self.module.gas.fetch_add(gas, Ordering::Relaxed);
    }

    /// Gas recorded by [`Self::record_gas`] since the last take.
    pub(crate) fn take_gas(&self) -> u64 {
        self.module.gas.swap(0, Ordering::Relaxed)
    }

    /// Gas recorded by [`Self::record_gas`] since the last take, left in place.
    pub(crate) fn peek_gas(&self) -> u64 {
        self.module.gas.load(Ordering::Relaxed)
    }

    /// Handles on this code alive now, `self` included.
    pub(crate) fn handles(&self) -> usize {
        Arc::strong_count(&self.module)
    }
}

/// Where a compiler reports the machine code it maps and frees (the code cache passes its
/// `gigas_jit_*` metrics; they are shared handles on the same values).
#[derive(Debug, Clone, Default)]
pub struct CodeMemoryMetrics {
    /// Bytes of machine code mapped now, by every live compiled contract.
    pub mapped_bytes: Gauge,
    /// Compiled contracts whose machine code is mapped now.
    pub mapped_modules: Gauge,
    /// Compiled contracts whose machine code was unmapped.
    pub freed_modules: Counter,
}

/// One contract's Cranelift module: the owner of its machine code.
struct CodeModule {
    /// `None` once freed. The mutex only makes the module (which is `Send` but not `Sync`)
    /// shareable; it is touched on drop alone, through `get_mut`.
    module: Mutex<Option<JITModule>>,
    mapped_bytes: u64,
    /// Gas run in this code since the cache last looked (see `CompiledCode::record_gas`).
    gas: AtomicU64,
    metrics: Option<CodeMemoryMetrics>,
}

impl std::fmt::Debug for CodeModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CodeModule")
            .field("mapped_bytes", &self.mapped_bytes)
            .finish()
    }
}

impl CodeModule {
    fn new(module: JITModule, metrics: Option<CodeMemoryMetrics>) -> Self {
        Self {
            module: Mutex::new(Some(module)),
            mapped_bytes: 0,
            gas: AtomicU64::new(0),
            metrics,
        }
    }

    fn module(&mut self) -> &mut JITModule {
        let slot = self
            .module
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match slot {
            Some(module) => module,
            // Only `drop` empties the slot.
            None => unreachable!("a code module is used after it was freed"),
        }
    }

    /// Counts `bytes` of machine code as mapped by this module.
    fn set_mapped(&mut self, bytes: u64) {
        self.mapped_bytes = bytes;
        if let Some(metrics) = &self.metrics {
            metrics.mapped_bytes.inc_by(bytes as i64);
            metrics.mapped_modules.inc();
        }
    }
}

impl Drop for CodeModule {
    fn drop(&mut self) {
        let slot = self
            .module
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(module) = slot.take() {
            // SAFETY: every pointer into this module's code was handed out inside a
            // `CompiledCode`, each of which holds an `Arc` to this owner; the last one is
            // gone, so no frame runs this code and none can call it again. (A module whose
            // compile failed handed out no pointer at all.)
            unsafe { module.free_memory() };
        }
        if let Some(metrics) = &self.metrics {
            if self.mapped_bytes > 0 {
                metrics.mapped_bytes.dec_by(self.mapped_bytes as i64);
                metrics.mapped_modules.dec();
                metrics.freed_modules.inc();
            }
        }
    }
}

/// The system's page size (cranelift-jit maps code on whole pages).
pub(crate) fn page_size() -> u64 {
    static PAGE: OnceLock<u64> = OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf reads a constant of the system.
        let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        u64::try_from(size).ok().filter(|s| *s > 0).unwrap_or(4096)
    })
}

/// Compiles contracts, each into a Cranelift JIT module of its own (so that its machine code
/// can be freed alone; see [`CompiledCode`]).
pub struct Compiler {
    isa: OwnedTargetIsa,
    ctx: Context,
    builder_ctx: FunctionBuilderContext,
    functions: usize,
    metrics: Option<CodeMemoryMetrics>,
    /// Makes the next definition fail in Cranelift (declared as an import, which cannot be
    /// defined): how the tests reach the error path.
    #[cfg(test)]
    pub(crate) fail_next_definition: bool,
}

impl std::fmt::Debug for Compiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compiler")
            .field("functions", &self.functions)
            .finish()
    }
}

const TRUSTED: MemFlagsData = MemFlagsData::trusted();

/// Four 64-bit limbs, least significant first (the layout of revm's `U256`).
type Word = [Value; 4];

/// EVM code that makes a test build of the compiler panic, as a Cranelift bug would: how the
/// code cache's tests reach its panic guard.
#[cfg(test)]
pub(crate) const PANIC_FOR_TESTS: &[u8] = b"\xfe\xfe\xfegigas-jit: panic in the compiler";

impl Compiler {
    /// A compiler for the host machine, optimising for speed.
    pub fn new() -> Result<Self, CompileError> {
        let mut flags = settings::builder();
        for (name, value) in [
            ("opt_level", "speed"),
            // The IR is generated, not written by hand, and the differential tests check the
            // generator; verifying every function costs compile time in production.
            ("enable_verifier", "false"),
            ("use_colocated_libcalls", "false"),
            ("is_pic", "false"),
        ] {
            flags
                .set(name, value)
                .map_err(|e| CompileError::Isa(e.to_string()))?;
        }
        let isa = cranelift_native::builder()
            .map_err(|e| CompileError::Isa(e.to_string()))?
            .finish(settings::Flags::new(flags))
            .map_err(|e| CompileError::Isa(e.to_string()))?;
        let mut ctx = Context::new();
        ctx.func.signature.call_conv = isa.default_call_conv();
        Ok(Self {
            isa,
            ctx,
            builder_ctx: FunctionBuilderContext::new(),
            functions: 0,
            metrics: None,
            #[cfg(test)]
            fail_next_definition: false,
        })
    }

    /// A compiler like [`Self::new`] that counts the machine code it maps, and frees, in
    /// `metrics`.
    pub fn with_metrics(metrics: CodeMemoryMetrics) -> Result<Self, CompileError> {
        let mut compiler = Self::new()?;
        compiler.metrics = Some(metrics);
        Ok(compiler)
    }

    /// Compiles `code` (original bytes) for `spec`.
    pub fn compile(&mut self, code: &[u8], spec: SpecId) -> Result<CompiledCode, CompileError> {
        #[cfg(test)]
        if code == PANIC_FOR_TESTS {
            panic!("a compiler panic, provoked by a test");
        }
        let gas = gas_table(spec);
        let analysis = analyze(code, spec, &gas);
        let translated = analysis.blocks.iter().filter(|b| b.compilable).count();
        if translated == 0 {
            return Err(CompileError::NothingToCompile);
        }
        // Owned from the start, so that every way out of here, a panic included, frees
        // whatever the module mapped.
        let mut owner = CodeModule::new(
            JITModule::new(JITBuilder::with_isa(
                self.isa.clone(),
                default_libcall_names(),
            )),
            self.metrics.clone(),
        );
        let module = owner.module();
        let pointer = module.target_config().pointer_type();
        let mut signature = Signature::new(module.isa().default_call_conv());
        signature.params.push(AbiParam::new(pointer));
        signature.returns.push(AbiParam::new(types::I32));
        self.functions += 1;
        #[cfg(test)]
        let linkage = if std::mem::take(&mut self.fail_next_definition) {
            Linkage::Import
        } else {
            Linkage::Local
        };
        #[cfg(not(test))]
        let linkage = Linkage::Local;
        let id = module
            .declare_function("evm", linkage, &signature)
            .map_err(|e| CompileError::Codegen(e.to_string()))?;
        self.ctx.func.signature = signature;
        self.ctx.func.name = UserFuncName::user(0, id.as_u32());
        let frontend = module.isa().frontend_config();
        {
            let builder = FunctionBuilder::new(&mut self.ctx.func, &mut self.builder_ctx);
            Translator::new(builder, code, &analysis, gas, spec, pointer).translate(frontend);
        }
        let defined = module
            .define_function(id, &mut self.ctx)
            .map_err(|e| CompileError::Codegen(format!("{e:?}")));
        let code_size = self
            .ctx
            .compiled_code()
            .map_or(0, |c| c.code_buffer().len());
        // On every path, error or not: the next compile builds its function in this context,
        // and what is left in it would become the start of that function.
        module.clear_context(&mut self.ctx);
        defined?;
        module
            .finalize_definitions()
            .map_err(|e| CompileError::Codegen(e.to_string()))?;
        let pointer = module.get_finalized_function(id);
        // SAFETY: the function was declared with this signature: one pointer in, i32 out.
        let function = unsafe { std::mem::transmute::<*const u8, NativeFn>(pointer) };
        let page = page_size();
        owner.set_mapped((code_size as u64).div_ceil(page) * page);
        Ok(CompiledCode {
            function,
            code_size,
            blocks: (translated, analysis.blocks.len()),
            code_hash: keccak256(code),
            spec,
            module: Arc::new(owner),
        })
    }
}

struct Translator<'a> {
    b: FunctionBuilder<'a>,
    code: &'a [u8],
    analysis: &'a Analysis,
    ptr: types::Type,
    ctx: Value,
    stack: Value,
    sp: Variable,
    gas: Variable,
    blocks: Vec<ClBlock>,
    invalid_jump: ClBlock,
    exit_block: ClBlock,
    return_block: ClBlock,
    /// The block that dispatches a jump target (in `jump_target`) to its JUMPDEST.
    dispatch: ClBlock,
    /// The block that dispatches `entry_pc` to the block resuming after a CALL.
    resume: ClBlock,
    entry_pc: Value,
    jump_target: Variable,
    gas_table: GasTable,
    spec: SpecId,
    generic_sig: Option<cranelift_codegen::ir::SigRef>,
    pure_sig: Option<cranelift_codegen::ir::SigRef>,
    /// The stack model of the block being translated: the buffer address and runtime height
    /// at its origin, the height relative to it, and the words known as SSA values.
    base: Value,
    origin_sp: Value,
    depth: i64,
    known: std::collections::BTreeMap<i64, Known>,
}

/// A stack word held in SSA values while a block is translated.
#[derive(Debug, Clone, Copy)]
struct Known {
    word: Word,
    /// Its value, when it comes from a PUSH (jump targets usually do).
    constant: Option<[u64; 4]>,
    /// Whether the buffer does not hold it yet.
    dirty: bool,
}

impl<'a> Translator<'a> {
    fn new(
        mut b: FunctionBuilder<'a>,
        code: &'a [u8],
        analysis: &'a Analysis,
        gas_table: GasTable,
        spec: SpecId,
        ptr: types::Type,
    ) -> Self {
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let ctx = b.block_params(entry)[0];
        let sp = b.declare_var(types::I64);
        let gas = b.declare_var(types::I64);
        let jump_target = b.declare_var(types::I64);
        let stack = b.ins().load(ptr, TRUSTED, ctx, offsets::STACK);
        let sp0 = b.ins().load(types::I64, TRUSTED, ctx, offsets::SP);
        let gas0 = b.ins().load(types::I64, TRUSTED, ctx, offsets::GAS);
        b.def_var(sp, sp0);
        b.def_var(gas, gas0);
        let zero = b.ins().iconst(types::I64, 0);
        b.def_var(jump_target, zero);
        let blocks: Vec<ClBlock> = analysis.blocks.iter().map(|_| b.create_block()).collect();
        let invalid_jump = b.create_block();
        let exit_block = b.create_block();
        let return_block = b.create_block();
        let dispatch = b.create_block();
        // Where the frame starts: its first instruction, or the instruction after a CALL it
        // suspended at.
        let entry_pc = b.ins().load(types::I64, TRUSTED, ctx, offsets::PC);
        let resume = b.create_block();
        b.ins().brif(entry_pc, resume, &[], blocks[0], &[]);
        Self {
            b,
            code,
            analysis,
            ptr,
            ctx,
            stack,
            sp,
            gas,
            blocks,
            invalid_jump,
            exit_block,
            return_block,
            dispatch,
            resume,
            entry_pc,
            jump_target,
            gas_table,
            spec,
            generic_sig: None,
            pure_sig: None,
            base: stack,
            origin_sp: sp0,
            depth: 0,
            known: std::collections::BTreeMap::new(),
        }
    }

    fn translate(mut self, frontend: cranelift_codegen::isa::TargetFrontendConfig) {
        for index in 0..self.analysis.blocks.len() {
            self.block(index);
        }
        // Invalid jump: hand back stack and gas, let the runtime halt.
        self.b.switch_to_block(self.invalid_jump);
        self.exit(EXIT_INVALID_JUMP);
        // Jump table over the JUMPDESTs.
        self.b.switch_to_block(self.dispatch);
        let target = self.b.use_var(self.jump_target);
        let mut switch = Switch::new();
        for (index, block) in self.analysis.blocks.iter().enumerate() {
            if self.analysis.jump_target(block.start) == Some(index) {
                switch.set_entry(block.start as u128, self.blocks[index]);
            }
        }
        switch.emit(&mut self.b, target, self.invalid_jump);
        // Resumption after a CALL or CREATE; any other offset goes to the interpreter.
        self.b.switch_to_block(self.resume);
        let mut switch = Switch::new();
        for (index, block) in self.analysis.blocks.iter().enumerate() {
            if block.resumes {
                switch.set_entry(block.start as u128, self.blocks[index]);
            }
        }
        let elsewhere = self.b.create_block();
        switch.emit(&mut self.b, self.entry_pc, elsewhere);
        self.b.switch_to_block(elsewhere);
        let code = self.b.ins().iconst(types::I32, EXIT_BAIL as i64);
        self.b
            .ins()
            .jump(self.exit_block, &[code.into(), self.entry_pc.into()]);
        self.emit_shared_exits();
        self.b.seal_all_blocks();
        self.b.finalize(frontend);
    }

    /// Stores stack height and gas into the context and returns `code`.
    /// Leaves through the shared exit block, which stores stack height, gas and `pc` and
    /// returns `code` (one epilogue for the whole function keeps the machine code small).
    fn exit_at(&mut self, code: u32, pc: usize) {
        let code = self.b.ins().iconst(types::I32, code as i64);
        let pc = self.b.ins().iconst(types::I64, pc as i64);
        self.b
            .ins()
            .jump(self.exit_block, &[code.into(), pc.into()]);
    }

    fn exit(&mut self, code: u32) {
        self.exit_at(code, 0);
    }

    /// Hands the frame to the interpreter at `pc`.
    fn bail(&mut self, pc: usize) {
        self.exit_at(EXIT_BAIL, pc);
    }

    /// Returns `status` through the shared return block.
    fn leave(&mut self, status: Value) {
        self.b.ins().jump(self.return_block, &[status.into()]);
    }

    fn emit_shared_exits(&mut self) {
        self.b.switch_to_block(self.exit_block);
        let code = self.b.append_block_param(self.exit_block, types::I32);
        let pc = self.b.append_block_param(self.exit_block, types::I64);
        let sp = self.b.use_var(self.sp);
        let gas = self.b.use_var(self.gas);
        self.b.ins().store(TRUSTED, sp, self.ctx, offsets::SP);
        self.b.ins().store(TRUSTED, gas, self.ctx, offsets::GAS);
        self.b.ins().store(TRUSTED, pc, self.ctx, offsets::PC);
        self.b.ins().return_(&[code]);
        self.b.switch_to_block(self.return_block);
        let status = self.b.append_block_param(self.return_block, types::I32);
        self.b.ins().return_(&[status]);
    }

    fn block(&mut self, index: usize) {
        let block = self.analysis.blocks[index].clone();
        self.b.switch_to_block(self.blocks[index]);
        if !block.compilable {
            self.bail(block.start);
            return;
        }
        // Entry checks: stack bounds and static gas, once for the block.
        let sp = self.b.use_var(self.sp);
        let gas = self.b.use_var(self.gas);
        let low = self.b.ins().icmp_imm_u(
            IntCC::UnsignedGreaterThanOrEqual,
            sp,
            block.min_height as i64,
        );
        let high = self.b.ins().icmp_imm_u(
            IntCC::UnsignedLessThanOrEqual,
            sp,
            (STACK_LIMIT - block.max_growth.min(STACK_LIMIT)) as i64,
        );
        let enough = self.b.ins().icmp_imm_u(
            IntCC::UnsignedGreaterThanOrEqual,
            gas,
            block.static_gas as i64,
        );
        let ok = self.b.ins().band(low, high);
        let ok = self.b.ins().band(ok, enough);
        let body = self.b.create_block();
        let bail = self.b.create_block();
        // Failed checks, slow paths and exits are laid out after the hot code.
        self.b.set_cold_block(bail);
        self.b.ins().brif(ok, body, &[], bail, &[]);
        self.b.switch_to_block(bail);
        self.bail(block.start);
        self.b.switch_to_block(body);
        let charged = self.b.ins().iadd_imm_s(gas, -(block.static_gas as i64));
        self.b.def_var(self.gas, charged);
        self.rebase();

        let gas_table = self.gas_table;
        let mut pc = block.start;
        let mut static_after = block.static_gas;
        while pc < block.end {
            let op = self.code.get(pc).copied().unwrap_or(opcode::STOP);
            static_after -= gas_table[op as usize] as u64;
            let immediate = if (opcode::PUSH1..=opcode::PUSH32).contains(&op) {
                (op - opcode::PUSH0) as usize
            } else {
                0
            };
            let terminated = self.instruction(op, pc, static_after, index);
            pc += 1 + immediate;
            if terminated {
                return;
            }
        }
        // Fell off the block without a jump: into the next one.
        self.flush();
        if block.falls_through {
            match self.blocks.get(index + 1) {
                Some(&next) => {
                    self.b.ins().jump(next, &[]);
                }
                None => self.bail(block.end),
            }
        } else {
            self.bail(block.end);
        }
    }

    /// Starts a fresh model of the stack at the current runtime height (block entry, and
    /// after an instruction that changed the stack behind compiled code's back).
    fn rebase(&mut self) {
        let sp = self.b.use_var(self.sp);
        let bytes = self.b.ins().ishl_imm_u(sp, 5);
        self.base = self.b.ins().iadd(self.stack, bytes);
        self.origin_sp = sp;
        self.depth = 0;
        self.known.clear();
    }

    /// The word at `position` (relative to the model's origin), loading it if not known.
    fn get(&mut self, position: i64) -> Known {
        if let Some(k) = self.known.get(&position) {
            return *k;
        }
        let offset = (position * 32) as i32;
        let base = self.base;
        let word: Word = std::array::from_fn(|limb| {
            self.b
                .ins()
                .load(types::I64, TRUSTED, base, offset + 8 * limb as i32)
        });
        let k = Known {
            word,
            constant: None,
            dirty: false,
        };
        self.known.insert(position, k);
        k
    }

    fn pop(&mut self) -> Known {
        let k = self.get(self.depth - 1);
        self.known.remove(&(self.depth - 1));
        self.depth -= 1;
        k
    }

    fn push(&mut self, word: Word, constant: Option<[u64; 4]>) {
        self.known.insert(
            self.depth,
            Known {
                word,
                constant,
                dirty: true,
            },
        );
        self.depth += 1;
    }

    /// Writes every changed word the model holds to the stack buffer and the height to the
    /// `sp` variable: after it, the runtime stack is the EVM stack.
    fn flush(&mut self) {
        let depth = self.depth;
        self.known.retain(|p, _| *p < depth);
        let dirty: Vec<(i64, Word)> = self
            .known
            .iter()
            .filter(|(_, k)| k.dirty)
            .map(|(p, k)| (*p, k.word))
            .collect();
        for (position, word) in dirty {
            for (limb, value) in word.into_iter().enumerate() {
                self.b.ins().store(
                    TRUSTED,
                    value,
                    self.base,
                    (position * 32) as i32 + 8 * limb as i32,
                );
            }
            if let Some(k) = self.known.get_mut(&position) {
                k.dirty = false;
            }
        }
        let sp = self.b.ins().iadd_imm_s(self.origin_sp, depth);
        self.b.def_var(self.sp, sp);
    }

    fn bool_word(&mut self, flag: Value) -> Word {
        let low = self.b.ins().uextend(types::I64, flag);
        let zero = self.b.ins().iconst(types::I64, 0);
        [low, zero, zero, zero]
    }

    fn is_zero(&mut self, a: Word) -> Value {
        let x = self.b.ins().bor(a[0], a[1]);
        let y = self.b.ins().bor(a[2], a[3]);
        let z = self.b.ins().bor(x, y);
        self.b.ins().icmp_imm_u(IntCC::Equal, z, 0)
    }

    /// `a + b` and its carry out (0 or 1, as i64), given the carry in `c` (0 or 1).
    fn add_carry(&mut self, a: Value, b: Value, c: Value) -> (Value, Value) {
        let s = self.b.ins().iadd(a, b);
        let c1 = self.b.ins().icmp(IntCC::UnsignedLessThan, s, a);
        let t = self.b.ins().iadd(s, c);
        let c2 = self.b.ins().icmp(IntCC::UnsignedLessThan, t, s);
        let carry = self.b.ins().bor(c1, c2);
        (t, self.b.ins().uextend(types::I64, carry))
    }

    /// `a - b - c` and its borrow out (0 or 1, as i64), given the borrow in `c` (0 or 1).
    fn sub_borrow(&mut self, a: Value, b: Value, c: Value) -> (Value, Value) {
        let d = self.b.ins().isub(a, b);
        let b1 = self.b.ins().icmp(IntCC::UnsignedLessThan, a, b);
        let t = self.b.ins().isub(d, c);
        let b2 = self.b.ins().icmp(IntCC::UnsignedLessThan, d, c);
        let borrow = self.b.ins().bor(b1, b2);
        (t, self.b.ins().uextend(types::I64, borrow))
    }

    fn add(&mut self, a: Word, b: Word) -> Word {
        let mut carry = self.b.ins().iconst(types::I64, 0);
        std::array::from_fn(|i| {
            let (s, c) = self.add_carry(a[i], b[i], carry);
            carry = c;
            s
        })
    }

    fn sub(&mut self, a: Word, b: Word) -> Word {
        let mut borrow = self.b.ins().iconst(types::I64, 0);
        std::array::from_fn(|i| {
            let (d, c) = self.sub_borrow(a[i], b[i], borrow);
            borrow = c;
            d
        })
    }

    /// Unsigned `a < b` (an i8 flag), most significant limb deciding.
    fn ult(&mut self, a: Word, b: Word) -> Value {
        let mut lt = self.b.ins().icmp(IntCC::UnsignedLessThan, a[0], b[0]);
        for limb in 1..4 {
            let below = self.b.ins().icmp(IntCC::UnsignedLessThan, a[limb], b[limb]);
            let equal = self.b.ins().icmp(IntCC::Equal, a[limb], b[limb]);
            let carried = self.b.ins().band(equal, lt);
            lt = self.b.ins().bor(below, carried);
        }
        lt
    }

    /// Signed `a < b`: unsigned comparison with the sign bits flipped.
    fn slt(&mut self, a: Word, b: Word) -> Value {
        let sign = self.b.ins().iconst(types::I64, i64::MIN);
        let mut a = a;
        let mut b = b;
        a[3] = self.b.ins().bxor(a[3], sign);
        b[3] = self.b.ins().bxor(b[3], sign);
        self.ult(a, b)
    }

    /// Pops two words, pushes `f(top, second)`.
    fn binary(&mut self, f: impl FnOnce(&mut Self, Word, Word) -> Word) {
        let a = self.pop().word;
        let b = self.pop().word;
        let r = f(self, a, b);
        self.push(r, None);
    }

    fn limbwise(
        &mut self,
        a: Word,
        b: Word,
        f: fn(&mut FunctionBuilder<'a>, Value, Value) -> Value,
    ) -> Word {
        std::array::from_fn(|i| f(&mut self.b, a[i], b[i]))
    }

    /// The block a constant jump target enters: `Some(block)` for a JUMPDEST, `None` for an
    /// invalid destination; `Err` when the target is not known at compile time.
    fn static_target(&self, target: &Known) -> Result<Option<ClBlock>, ()> {
        let limbs = target.constant.ok_or(())?;
        if limbs[1] | limbs[2] | limbs[3] != 0 {
            return Ok(None);
        }
        Ok(usize::try_from(limbs[0])
            .ok()
            .and_then(|offset| self.analysis.jump_target(offset))
            .map(|index| self.blocks[index]))
    }

    /// Jumps to the JUMPDEST at `target`, or to the invalid-jump exit; the stack must be
    /// flushed.
    fn jump_to(&mut self, target: Known) {
        match self.static_target(&target) {
            Ok(Some(block)) => {
                self.b.ins().jump(block, &[]);
            }
            Ok(None) => {
                self.b.ins().jump(self.invalid_jump, &[]);
            }
            Err(()) => {
                let word = target.word;
                let high = self.b.ins().bor(word[1], word[2]);
                let high = self.b.ins().bor(high, word[3]);
                let fits = self.b.ins().icmp_imm_u(IntCC::Equal, high, 0);
                self.b.def_var(self.jump_target, word[0]);
                self.b
                    .ins()
                    .brif(fits, self.dispatch, &[], self.invalid_jump, &[]);
            }
        }
    }

    /// Translates one instruction; returns whether it ended the block's control flow.
    fn instruction(&mut self, op: u8, pc: usize, static_after: u64, index: usize) -> bool {
        use opcode::*;
        match op {
            JUMPDEST => {}
            // Before Shanghai PUSH0 is not an instruction: the interpreter halts on it.
            PUSH0 if !self.spec.is_enabled_in(SpecId::SHANGHAI) => {
                return self.generic(op, pc, static_after)
            }
            PUSH0..=PUSH32 => {
                let n = (op - PUSH0) as usize;
                let mut bytes = [0u8; 32];
                for i in 0..n {
                    bytes[32 - n + i] = self.code.get(pc + 1 + i).copied().unwrap_or(0);
                }
                let limbs: [u64; 4] = std::array::from_fn(|limb| {
                    let start = 32 - 8 * (limb + 1);
                    let mut be = [0u8; 8];
                    be.copy_from_slice(&bytes[start..start + 8]);
                    u64::from_be_bytes(be)
                });
                let word: Word =
                    std::array::from_fn(|limb| self.b.ins().iconst(types::I64, limbs[limb] as i64));
                self.push(word, Some(limbs));
            }
            POP => {
                self.known.remove(&(self.depth - 1));
                self.depth -= 1;
            }
            DUP1..=DUP16 => {
                let n = (op - DUP1) as i64 + 1;
                let k = self.get(self.depth - n);
                self.push(k.word, k.constant);
            }
            SWAP1..=SWAP16 => {
                let n = (op - SWAP1) as i64 + 1;
                let (top, other) = (self.depth - 1, self.depth - 1 - n);
                let a = self.get(top);
                let b = self.get(other);
                self.known.insert(top, Known { dirty: true, ..b });
                self.known.insert(other, Known { dirty: true, ..a });
            }
            ADD => self.binary(|t, a, b| t.add(a, b)),
            SUB => self.binary(|t, a, b| t.sub(a, b)),
            AND => self.binary(|t, a, b| t.limbwise(a, b, |b, x, y| b.ins().band(x, y))),
            OR => self.binary(|t, a, b| t.limbwise(a, b, |b, x, y| b.ins().bor(x, y))),
            XOR => self.binary(|t, a, b| t.limbwise(a, b, |b, x, y| b.ins().bxor(x, y))),
            LT => self.binary(|t, a, b| {
                let f = t.ult(a, b);
                t.bool_word(f)
            }),
            GT => self.binary(|t, a, b| {
                let f = t.ult(b, a);
                t.bool_word(f)
            }),
            SLT => self.binary(|t, a, b| {
                let f = t.slt(a, b);
                t.bool_word(f)
            }),
            SGT => self.binary(|t, a, b| {
                let f = t.slt(b, a);
                t.bool_word(f)
            }),
            EQ => self.binary(|t, a, b| {
                let x = t.limbwise(a, b, |b, x, y| b.ins().bxor(x, y));
                let f = t.is_zero(x);
                t.bool_word(f)
            }),
            ISZERO => {
                let a = self.pop().word;
                let f = self.is_zero(a);
                let r = self.bool_word(f);
                self.push(r, None);
            }
            NOT => {
                let a = self.pop().word;
                let r: Word = std::array::from_fn(|i| self.b.ins().bnot(a[i]));
                self.push(r, None);
            }
            PC => {
                let v = self.b.ins().iconst(types::I64, pc as i64);
                let zero = self.b.ins().iconst(types::I64, 0);
                self.push([v, zero, zero, zero], Some([pc as u64, 0, 0, 0]));
            }
            JUMP => {
                let target = self.pop();
                self.flush();
                self.jump_to(target);
                return true;
            }
            JUMPI => {
                let target = self.pop();
                let cond = self.pop();
                self.flush();
                let zero = self.is_zero(cond.word);
                let next = match self.blocks.get(index + 1) {
                    Some(&next) => next,
                    None => {
                        let end = self.b.create_block();
                        let here = self.b.current_block();
                        self.b.switch_to_block(end);
                        self.bail(pc + 1);
                        if let Some(here) = here {
                            self.b.switch_to_block(here);
                        }
                        end
                    }
                };
                match self.static_target(&target) {
                    Ok(Some(block)) => {
                        self.b.ins().brif(zero, next, &[], block, &[]);
                    }
                    Ok(None) => {
                        self.b.ins().brif(zero, next, &[], self.invalid_jump, &[]);
                    }
                    Err(()) => {
                        let taken = self.b.create_block();
                        self.b.ins().brif(zero, next, &[], taken, &[]);
                        self.b.switch_to_block(taken);
                        self.jump_to(target);
                    }
                }
                return true;
            }
            MLOAD | MSTORE | MSTORE8 => self.memory_access(op, pc, static_after),
            MUL | DIV | SDIV | MOD | SMOD | SIGNEXTEND | BYTE => self.pure(op, 2),
            SHL | SHR | SAR if self.spec.is_enabled_in(SpecId::PETERSBURG) => self.pure(op, 2),
            ADDMOD | MULMOD => self.pure(op, 3),
            _ => return self.generic(op, pc, static_after),
        }
        false
    }

    /// MLOAD, MSTORE and MSTORE8: inline when the access lies inside memory already paid for
    /// (then the static gas is all it costs and nothing can fail), else through the
    /// interpreter's instruction function, which expands memory and charges for it.
    fn memory_access(&mut self, op: u8, pc: usize, static_after: u64) {
        use opcode::*;
        let width: i64 = if op == MSTORE8 { 1 } else { 32 };
        // Operands are read before the branch so that both paths see the same SSA values.
        let offset = self.get(self.depth - 1);
        let value = (op != MLOAD).then(|| self.get(self.depth - 2));
        self.flush();
        let memory = self
            .b
            .ins()
            .load(self.ptr, TRUSTED, self.ctx, offsets::MEMORY);
        let len = self
            .b
            .ins()
            .load(types::I64, TRUSTED, self.ctx, offsets::MEMORY_LEN);
        let high = self.b.ins().bor(offset.word[1], offset.word[2]);
        let high = self.b.ins().bor(high, offset.word[3]);
        let small = self.b.ins().icmp_imm_u(IntCC::Equal, high, 0);
        let room = self
            .b
            .ins()
            .icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, len, width);
        let last = self.b.ins().iadd_imm_s(len, -width);
        let inside = self
            .b
            .ins()
            .icmp(IntCC::UnsignedLessThanOrEqual, offset.word[0], last);
        let ok = self.b.ins().band(small, room);
        let ok = self.b.ins().band(ok, inside);
        let fast = self.b.create_block();
        let slow = self.b.create_block();
        self.b.set_cold_block(slow);
        let merge = self.b.create_block();
        if op == MLOAD {
            for _ in 0..4 {
                self.b.append_block_param(merge, types::I64);
            }
        }
        self.b.ins().brif(ok, fast, &[], slow, &[]);

        // Slow path: the interpreter's function, on the stack written back above. It leaves
        // the height where the fast path leaves it; the model restarts from the buffer at
        // the merge, so that no word stays live (spilled) across the call.
        self.b.switch_to_block(slow);
        self.generic(op, pc, static_after);
        if op == MLOAD {
            // `generic` restarted the model at the runtime height: the result is its top.
            let base = self.base;
            let word: Vec<_> = (0..4)
                .map(|limb| {
                    self.b
                        .ins()
                        .load(types::I64, TRUSTED, base, -32 + 8 * limb)
                        .into()
                })
                .collect();
            self.b.ins().jump(merge, &word);
        } else {
            self.b.ins().jump(merge, &[]);
        }

        // Fast path: big-endian words in memory, little-endian limbs on the stack.
        self.b.switch_to_block(fast);
        let address = self.b.ins().iadd(memory, offset.word[0]);
        let flags = MemFlagsData::new().with_notrap();
        match (op, value) {
            (MLOAD, _) => {
                let word: Vec<_> = (0..4)
                    .map(|limb| {
                        let be = self
                            .b
                            .ins()
                            .load(types::I64, flags, address, 8 * (3 - limb));
                        self.b.ins().bswap(be).into()
                    })
                    .collect();
                self.b.ins().jump(merge, &word);
            }
            (MSTORE8, Some(value)) => {
                self.b.ins().istore8(flags, value.word[0], address, 0);
                self.pop_height(2);
                self.b.ins().jump(merge, &[]);
            }
            (_, Some(value)) => {
                for limb in 0..4 {
                    let be = self.b.ins().bswap(value.word[limb]);
                    self.b
                        .ins()
                        .store(flags, be, address, 8 * (3 - limb as i32));
                }
                self.pop_height(2);
                self.b.ins().jump(merge, &[]);
            }
            _ => unreachable!("stores have a value operand"),
        }

        self.b.switch_to_block(merge);
        // Both paths leave the runtime stack complete (flushed) at the height after the
        // instruction, except the MLOAD result, which stays in SSA values.
        self.rebase();
        if op == MLOAD {
            let params = self.b.block_params(merge);
            let word: Word = [params[0], params[1], params[2], params[3]];
            self.depth -= 1;
            self.push(word, None);
        }
    }

    /// Lowers the runtime height (the `sp` variable) by `n` words, as the interpreter's pops
    /// would, where the paths of an instruction merge.
    fn pop_height(&mut self, n: i64) {
        let sp = self.b.use_var(self.sp);
        let sp = self.b.ins().iadd_imm_s(sp, -n);
        self.b.def_var(self.sp, sp);
    }

    /// Calls the pure helper of `op` on the top `inputs` words in place; one word results.
    fn pure(&mut self, op: u8, inputs: i64) {
        use crate::runtime as rt;
        use opcode::*;
        let function: rt::PureFn = match op {
            MUL => rt::mul,
            DIV => rt::div,
            SDIV => rt::sdiv,
            MOD => rt::rem,
            SMOD => rt::smod,
            SIGNEXTEND => rt::signextend,
            BYTE => rt::byte,
            SHL => rt::shl,
            SHR => rt::shr,
            SAR => rt::sar,
            ADDMOD => rt::addmod,
            _ => rt::mulmod,
        };
        self.flush();
        let signature = self.pure_signature();
        let address = self.b.ins().iconst(self.ptr, function as usize as i64);
        let top = self.b.ins().iadd_imm_s(self.base, self.depth * 32);
        self.b.ins().call_indirect(signature, address, &[top]);
        // The result is in the buffer where the deepest operand was; words below it that the
        // model holds are still valid.
        self.depth -= inputs - 1;
        let depth = self.depth;
        self.known.retain(|p, _| *p < depth - 1);
    }

    fn pure_signature(&mut self) -> cranelift_codegen::ir::SigRef {
        if let Some(signature) = self.pure_sig {
            return signature;
        }
        let mut signature = Signature::new(self.b.func.signature.call_conv);
        signature.params.push(AbiParam::new(self.ptr));
        let signature = self.b.import_signature(signature);
        self.pure_sig = Some(signature);
        signature
    }

    /// Runs the instruction at `pc` through the interpreter's instruction function.
    fn generic(&mut self, op: u8, pc: usize, static_after: u64) -> bool {
        self.flush();
        let sp = self.b.use_var(self.sp);
        let gas = self.b.use_var(self.gas);
        self.b.ins().store(TRUSTED, sp, self.ctx, offsets::SP);
        self.b.ins().store(TRUSTED, gas, self.ctx, offsets::GAS);
        let function = self
            .b
            .ins()
            .load(self.ptr, TRUSTED, self.ctx, offsets::INSTRUCTION);
        let signature = match self.generic_sig {
            Some(signature) => signature,
            None => {
                let mut signature = Signature::new(self.b.func.signature.call_conv);
                signature.params.push(AbiParam::new(self.ptr));
                signature.params.push(AbiParam::new(types::I64));
                signature.params.push(AbiParam::new(types::I64));
                signature.returns.push(AbiParam::new(types::I32));
                let signature = self.b.import_signature(signature);
                self.generic_sig = Some(signature);
                signature
            }
        };
        let pc_value = self.b.ins().iconst(types::I64, pc as i64);
        let after = self.b.ins().iconst(types::I64, static_after as i64);
        let call = self
            .b
            .ins()
            .call_indirect(signature, function, &[self.ctx, pc_value, after]);
        let status = self.b.inst_results(call)[0];
        // Terminating instructions (STOP, RETURN, REVERT, INVALID, SELFDESTRUCT, unknown
        // opcodes) always leave: nothing follows them in the block.
        let terminating = OpCode::new(op).is_none_or(|o| o.info().is_terminating());
        if terminating {
            self.leave(status);
            return true;
        }
        let go_on = self.b.create_block();
        let leave = self.b.create_block();
        self.b.set_cold_block(leave);
        let continues = self
            .b
            .ins()
            .icmp_imm_u(IntCC::Equal, status, CONTINUE as i64);
        self.b.ins().brif(continues, go_on, &[], leave, &[]);
        self.b.switch_to_block(leave);
        self.leave(status);
        self.b.switch_to_block(go_on);
        let sp = self
            .b
            .ins()
            .load(types::I64, TRUSTED, self.ctx, offsets::SP);
        let gas = self
            .b
            .ins()
            .load(types::I64, TRUSTED, self.ctx, offsets::GAS);
        self.b.def_var(self.sp, sp);
        self.b.def_var(self.gas, gas);
        self.rebase();
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gigas_evm::executor::BlockContext;
    use revm::database::{CacheDB, EmptyDB};
    use revm::interpreter::interpreter::EthInterpreter;
    use revm::interpreter::{instruction_table, InterpreterAction};
    use revm::primitives::U256;

    /// A Cancun block's timestamp.
    const CANCUN: u64 = 1_720_000_000;

    /// Code that returns the one byte `value`.
    fn returning(value: u8) -> Vec<u8> {
        use opcode::*;
        vec![PUSH1, value, PUSH0, MSTORE8, PUSH1, 1, PUSH0, RETURN]
    }

    /// What the compiled `code` returns when run as a frame on its own.
    fn run(code: &[u8], compiled: &CompiledCode) -> InterpreterAction {
        let (mut interpreter, mut host) =
            gigas_evm::program::frame(code, &[], U256::ZERO, 100_000, CANCUN);
        let spec = interpreter.runtime_flag.spec_id;
        let table = instruction_table::<EthInterpreter, BlockContext<CacheDB<EmptyDB>>>();
        // SAFETY: compiled from this code for this spec.
        let (action, _) = unsafe {
            crate::runtime::run_frame(
                compiled,
                &mut interpreter,
                &mut host,
                &table,
                &gas_table(spec),
            )
        };
        action
    }

    /// A Cranelift error on one contract leaves nothing behind: the next contract compiles
    /// to its own code.
    #[test]
    fn a_failed_definition_leaves_the_next_compile_clean() {
        let mut compiler = Compiler::new().expect("host ISA");
        compiler.fail_next_definition = true;
        let failed = compiler.compile(&returning(1), SpecId::CANCUN);
        assert!(
            matches!(failed, Err(CompileError::Codegen(_))),
            "{failed:?}"
        );
        for value in [2, 3] {
            let code = returning(value);
            let compiled = compiler
                .compile(&code, SpecId::CANCUN)
                .expect("compiles after a failure");
            match run(&code, &compiled) {
                InterpreterAction::Return(r) => {
                    assert_eq!(r.output.as_ref(), &[value], "{:?}", r.result)
                }
                other => panic!("{other:?}"),
            }
        }
    }
}
