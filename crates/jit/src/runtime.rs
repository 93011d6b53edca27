//! What compiled code runs against: the context it reads and writes, its exit codes, and the
//! one helper through which it executes every instruction it does not translate inline.
//!
//! Compiled code keeps the EVM stack in the interpreter's own stack buffer (revm's `Stack`
//! holds a `Vec<U256>` with capacity for 1024 words, little-endian limbs), so that handing a
//! frame back to the interpreter at any instruction costs nothing. Instructions with dynamic
//! gas, memory, hashing or host access run revm's own instruction functions through
//! [`generic_instruction`]: their semantics, gas and errors are the interpreter's by
//! construction.

use revm::interpreter::interpreter::EthInterpreter;
use revm::interpreter::interpreter_types::{Jumps, LegacyBytecode, LoopControl};
use revm::interpreter::{
    GasTable, Host, InstructionContext, InstructionResult, InstructionTable, Interpreter,
    InterpreterAction,
};
use revm::primitives::U256;
use std::any::Any;
use std::panic::AssertUnwindSafe;

use crate::CompiledCode;

/// Compiled code finished the frame: the interpreter holds the action (return, revert or
/// halt), as after its own loop.
pub const EXIT_DONE: u32 = 1;
/// Compiled code hands the frame to the interpreter at `JitContext::pc`, with the stack and
/// gas exactly as the interpreter would have them there.
pub const EXIT_BAIL: u32 = 2;
/// A JUMP or JUMPI to an offset that is not a JUMPDEST.
pub const EXIT_INVALID_JUMP: u32 = 3;
/// A CALL or CREATE left a new-frame action: revm runs the child frame, then enters compiled
/// code again at the instruction after it (`JitContext::pc`).
pub const EXIT_SUSPEND: u32 = 4;
/// The helper caught a panic (from a revm instruction, the host or the database); the runtime
/// resumes unwinding once compiled code has returned, so that the caller sees the panic as it
/// would from the interpreter.
pub const EXIT_PANIC: u32 = 5;
/// The helper executed the instruction; compiled code continues.
pub const CONTINUE: u32 = 0;

/// The helper compiled code calls for an instruction it does not translate: the offset of
/// the instruction and the static gas of the instructions after it in its block (already
/// charged by compiled code, not yet by the interpreter's count).
pub type InstructionFn = unsafe extern "C" fn(*mut JitContext, u64, u64) -> u32;

/// The state compiled code works on. Field offsets are part of the code generator's contract
/// (see `compiler.rs`); keep `repr(C)` and the order.
#[repr(C)]
#[derive(Debug)]
pub struct JitContext {
    /// The interpreter stack's buffer (capacity 1024 words).
    pub stack: *mut U256,
    /// Stack height.
    pub sp: u64,
    /// Gas remaining, with the static gas of the whole current block already charged.
    pub gas: u64,
    /// On entry, where the frame starts (0, or just after a CALL it suspended at); after
    /// [`EXIT_BAIL`], where the interpreter resumes.
    pub pc: u64,
    /// The helper for instructions not translated inline.
    pub instruction: InstructionFn,
    /// What the helper needs: a `Frame<H>`.
    pub frame: *mut core::ffi::c_void,
    /// The frame's memory (its context's part of revm's shared buffer).
    pub memory: *mut u8,
    /// Bytes of memory paid for and present: an access inside needs no expansion gas.
    pub memory_len: u64,
}

const _: () = {
    assert!(core::mem::offset_of!(JitContext, stack) == offsets::STACK as usize);
    assert!(core::mem::offset_of!(JitContext, sp) == offsets::SP as usize);
    assert!(core::mem::offset_of!(JitContext, gas) == offsets::GAS as usize);
    assert!(core::mem::offset_of!(JitContext, pc) == offsets::PC as usize);
    assert!(core::mem::offset_of!(JitContext, instruction) == offsets::INSTRUCTION as usize);
    assert!(core::mem::offset_of!(JitContext, memory) == offsets::MEMORY as usize);
    assert!(core::mem::offset_of!(JitContext, memory_len) == offsets::MEMORY_LEN as usize);
};

/// Offsets of the [`JitContext`] fields, for the code generator.
pub mod offsets {
    /// `stack`.
    pub const STACK: i32 = 0;
    /// `sp`.
    pub const SP: i32 = 8;
    /// `gas`.
    pub const GAS: i32 = 16;
    /// `pc`.
    pub const PC: i32 = 24;
    /// `instruction`.
    pub const INSTRUCTION: i32 = 32;
    /// `memory`.
    pub const MEMORY: i32 = 48;
    /// `memory_len`.
    pub const MEMORY_LEN: i32 = 56;
}

/// Points `ctx` at the interpreter's memory as it is now. Any instruction run by the
/// interpreter may grow (and so move) the shared buffer; compiled code reads these fields
/// again after each.
fn sync_memory(ctx: &mut JitContext, interpreter: &mut Interpreter<EthInterpreter>) {
    let paid = interpreter.gas.memory().words_num as u64 * 32;
    let mut memory = interpreter.memory.context_memory_mut();
    ctx.memory_len = paid.min(memory.len() as u64);
    ctx.memory = memory.as_mut_ptr();
}

/// The interpreter state behind a running compiled frame.
pub struct Frame<'a, H: Host> {
    /// The frame's interpreter: stack, memory, gas, bytecode, input.
    pub interpreter: &'a mut Interpreter<EthInterpreter>,
    /// The host (revm's context).
    pub host: &'a mut H,
    /// The instruction table the interpreter runs.
    pub table: &'a InstructionTable<EthInterpreter, H>,
    /// A panic caught in the helper, to be resumed by [`run_frame`] (see [`EXIT_PANIC`]).
    panic: Option<Box<dyn Any + Send>>,
}

impl<H: Host> std::fmt::Debug for Frame<'_, H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Frame")
            .field("pc", &self.interpreter.bytecode.pc())
            .field("stack", &self.interpreter.stack.len())
            .field("panicked", &self.panic.is_some())
            .finish_non_exhaustive()
    }
}

/// Runs one instruction of the frame through the interpreter's own instruction function.
///
/// # Safety
///
/// `ctx` must point to a live [`JitContext`] whose `frame` points to a live `Frame<H>` and
/// whose `stack` is that interpreter's stack buffer with `sp` initialised words.
pub unsafe extern "C" fn generic_instruction<H: Host>(
    ctx: *mut JitContext,
    pc: u64,
    gas_after: u64,
) -> u32 {
    let ctx = &mut *ctx;
    let frame = &mut *(ctx.frame as *mut Frame<'_, H>);
    // A panic must not unwind out of an `extern "C"` function (the process would abort) nor
    // through the native frames of compiled code, which the system unwinder knows nothing of
    // (Cranelift's JIT module registers no unwind tables): it is caught here and resumed by
    // `run_frame` in Rust frames. The frame's state after a panic is abandoned with the
    // unwind, as it would be under the interpreter, so asserting unwind safety exposes
    // nothing broken.
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
        run_instruction::<H>(
            ctx,
            frame.interpreter,
            frame.host,
            frame.table,
            pc,
            gas_after,
        )
    }));
    match result {
        Ok(status) => status,
        Err(payload) => {
            frame.panic = Some(payload);
            EXIT_PANIC
        }
    }
}

/// The body of [`generic_instruction`], inside its panic guard.
///
/// # Safety
///
/// `ctx.stack` must be this interpreter's stack buffer with `ctx.sp` initialised words.
unsafe fn run_instruction<H: Host>(
    ctx: &mut JitContext,
    interpreter: &mut Interpreter<EthInterpreter>,
    host: &mut H,
    table: &InstructionTable<EthInterpreter, H>,
    pc: u64,
    gas_after: u64,
) -> u32 {
    sync_into(ctx, interpreter, gas_after);
    let pc = pc as usize;
    let opcode = interpreter
        .bytecode
        .bytecode_slice()
        .get(pc)
        .copied()
        .unwrap_or(0);
    // As the interpreter's loop does: the instruction pointer is past the opcode.
    interpreter.bytecode.absolute_jump(pc + 1);
    let instruction = table[opcode as usize];
    let result = instruction.execute(InstructionContext {
        interpreter: &mut *interpreter,
        host: &mut *host,
    });
    if let Err(e) = result {
        if interpreter.bytecode.action().is_none() {
            interpreter.halt(e);
            return EXIT_DONE;
        }
        // CALL and CREATE leave a new-frame action and report `Suspend`: the interpreter's
        // loop stops there too.
        return if e == InstructionResult::Suspend {
            EXIT_SUSPEND
        } else {
            EXIT_DONE
        };
    }
    ctx.sp = interpreter.stack.len() as u64;
    sync_memory(ctx, interpreter);
    let remaining = interpreter.gas.remaining();
    if remaining < gas_after {
        // The rest of the block's static gas is not there: the interpreter runs out at some
        // later instruction of the block, and only it knows which error comes first. It
        // resumes with exactly the gas it would have here.
        ctx.pc = interpreter.bytecode.pc() as u64;
        ctx.gas = remaining;
        return EXIT_BAIL;
    }
    ctx.gas = remaining - gas_after;
    // An instruction that moved the instruction pointer (none of those reaching here do)
    // would need a bail as well.
    debug_assert_eq!(interpreter.bytecode.pc(), pc + 1 + immediate_len(opcode));
    CONTINUE
}

fn immediate_len(opcode: u8) -> usize {
    use revm::bytecode::opcode::{PUSH0, PUSH1, PUSH32};
    if (PUSH1..=PUSH32).contains(&opcode) {
        (opcode - PUSH0) as usize
    } else {
        0
    }
}

/// Makes the interpreter's stack height and gas those of compiled code (plus `gas_after`,
/// the static gas compiled code charged ahead for the rest of the block).
///
/// # Safety
///
/// `ctx.sp` words of the stack buffer must be initialised and at most its capacity.
unsafe fn sync_into(
    ctx: &JitContext,
    interpreter: &mut Interpreter<EthInterpreter>,
    gas_after: u64,
) {
    let data = interpreter.stack.data_mut();
    debug_assert!(ctx.sp as usize <= data.capacity());
    data.set_len(ctx.sp as usize);
    interpreter.gas.set_remaining(ctx.gas + gas_after);
}

/// How compiled code left a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// It ran the frame to its end.
    Done,
    /// It ended at a jump to an invalid destination.
    InvalidJump,
    /// It handed the frame to the interpreter at this offset.
    Bailed(usize),
    /// It stopped at a CALL or CREATE, for revm to run the child frame.
    Suspended,
}

/// Runs a compiled frame from where its interpreter stands (its first instruction, or just
/// after a CALL) to its end or its next CALL, or until compiled code hands it to the
/// interpreter, which then goes on as far as its own loop would. Returns what the interpreter's own loop
/// would have returned, and how compiled code left.
///
/// # Panics
///
/// Where the interpreter's loop would: a panic in an instruction function, the host or the
/// database while compiled code runs is caught below compiled code and resumed here.
///
/// The machine code stays mapped while it runs: `code` is borrowed for the whole call (see
/// [`CompiledCode`]).
///
/// # Safety
///
/// `code` must have been compiled from this interpreter's bytecode for its spec.
pub unsafe fn run_frame<H: Host>(
    code: &CompiledCode,
    interpreter: &mut Interpreter<EthInterpreter>,
    host: &mut H,
    table: &InstructionTable<EthInterpreter, H>,
    gas_table: &GasTable,
) -> (InterpreterAction, Exit) {
    // The frame (and its borrows of the interpreter and host) lives only while compiled code
    // runs; afterwards the interpreter is used directly.
    let (exit, ctx) = {
        let mut frame = Frame {
            interpreter: &mut *interpreter,
            host: &mut *host,
            table,
            panic: None,
        };
        let stack = frame.interpreter.stack.data_mut();
        let mut ctx = JitContext {
            stack: stack.as_mut_ptr(),
            sp: stack.len() as u64,
            gas: frame.interpreter.gas.remaining(),
            pc: frame.interpreter.bytecode.pc() as u64,
            instruction: generic_instruction::<H>,
            frame: &mut frame as *mut Frame<'_, H> as *mut core::ffi::c_void,
            memory: core::ptr::null_mut(),
            memory_len: 0,
        };
        sync_memory(&mut ctx, frame.interpreter);
        let exit = (code.function())(&mut ctx);
        if let Some(payload) = frame.panic.take() {
            std::panic::resume_unwind(payload);
        }
        (exit, ctx)
    };
    match exit {
        EXIT_DONE => (interpreter.take_next_action(), Exit::Done),
        EXIT_SUSPEND => (interpreter.take_next_action(), Exit::Suspended),
        EXIT_INVALID_JUMP => {
            sync_into(&ctx, interpreter, 0);
            interpreter.halt(InstructionResult::InvalidJump);
            (interpreter.take_next_action(), Exit::InvalidJump)
        }
        _ => {
            sync_into(&ctx, interpreter, 0);
            interpreter.bytecode.absolute_jump(ctx.pc as usize);
            let action = interpreter.run_plain(table, gas_table, host);
            (action, Exit::Bailed(ctx.pc as usize))
        }
    }
}

fn saturated(x: &U256) -> usize {
    let limbs = x.as_limbs();
    if limbs[1] | limbs[2] | limbs[3] != 0 {
        usize::MAX
    } else {
        usize::try_from(limbs[0]).unwrap_or(usize::MAX)
    }
}

/// A stack operation with no gas beyond its static gas and no way to fail, run in place on
/// the stack below `top` (one word past the top): the operands are the top words, the result
/// replaces the deepest operand. Compiled code calls these directly, without syncing anything
/// with the interpreter.
pub type PureFn = unsafe extern "C" fn(*mut U256);

macro_rules! pure_binary {
    ($name:ident, |$a:ident, $b:ident| $body:expr) => {
        /// In place on the two top words (see [`PureFn`]); as revm's instruction computes it.
        ///
        /// # Safety
        ///
        /// `top` must be one word past at least two initialised stack words.
        pub unsafe extern "C" fn $name(top: *mut U256) {
            let $a = *top.sub(1);
            let $b = *top.sub(2);
            *top.sub(2) = $body;
        }
    };
}

pure_binary!(mul, |a, b| a.wrapping_mul(b));
pure_binary!(div, |a, b| if b.is_zero() { b } else { a.wrapping_div(b) });
pure_binary!(
    sdiv,
    |a, b| revm::interpreter::instructions::i256::i256_div(a, b)
);
pure_binary!(rem, |a, b| if b.is_zero() { b } else { a.wrapping_rem(b) });
pure_binary!(
    smod,
    |a, b| revm::interpreter::instructions::i256::i256_mod(a, b)
);
pure_binary!(signextend, |ext, x| {
    if ext < U256::from(31) {
        let bit_index = (8 * ext.as_limbs()[0] + 7) as usize;
        let mask = (U256::from(1) << bit_index) - U256::from(1);
        if x.bit(bit_index) {
            x | !mask
        } else {
            x & mask
        }
    } else {
        x
    }
});
pure_binary!(byte, |i, x| {
    let i = saturated(&i);
    if i < 32 {
        U256::from(x.byte(31 - i))
    } else {
        U256::ZERO
    }
});
pure_binary!(shl, |shift, x| {
    let shift = saturated(&shift);
    if shift < 256 {
        x << shift
    } else {
        U256::ZERO
    }
});
pure_binary!(shr, |shift, x| {
    let shift = saturated(&shift);
    if shift < 256 {
        x >> shift
    } else {
        U256::ZERO
    }
});
pure_binary!(sar, |shift, x| {
    let shift = saturated(&shift);
    if shift < 256 {
        x.arithmetic_shr(shift)
    } else if x.bit(255) {
        U256::MAX
    } else {
        U256::ZERO
    }
});

/// ADDMOD in place on the three top words (see [`PureFn`]).
///
/// # Safety
///
/// `top` must be one word past at least three initialised stack words.
pub unsafe extern "C" fn addmod(top: *mut U256) {
    let (a, b, n) = (*top.sub(1), *top.sub(2), *top.sub(3));
    *top.sub(3) = a.add_mod(b, n);
}

/// MULMOD in place on the three top words (see [`PureFn`]).
///
/// # Safety
///
/// `top` must be one word past at least three initialised stack words.
pub unsafe extern "C" fn mulmod(top: *mut U256) {
    let (a, b, n) = (*top.sub(1), *top.sub(2), *top.sub(3));
    *top.sub(3) = a.mul_mod(b, n);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The in-place helpers are `extern "C"` too, but unlike `generic_instruction` they call
    /// nothing that can panic: division and remainder are guarded against zero, shifts and
    /// bit indices are bounded, and ruint's modular operations return zero for a zero
    /// modulus. Every combination of edge values returns (a panic here would abort the
    /// test binary), with the EVM's results where they are special.
    #[test]
    fn pure_helpers_return_on_every_edge_value() {
        let min = U256::from(1) << 255;
        let minus_one = U256::MAX;
        let edges = [
            U256::ZERO,
            U256::from(1),
            U256::from(2),
            U256::from(30),
            U256::from(31),
            U256::from(32),
            U256::from(255),
            U256::from(256),
            U256::from(u64::MAX),
            U256::from(1) << 64,
            min,
            min - U256::from(1),
            minus_one,
        ];
        let binary: [PureFn; 10] = [mul, div, sdiv, rem, smod, signextend, byte, shl, shr, sar];
        let ternary: [PureFn; 2] = [addmod, mulmod];
        let run = |f: PureFn, operands: &[U256]| {
            // The top of the stack is the last word; operands are listed top first.
            let mut stack: Vec<U256> = operands.iter().rev().copied().collect();
            let top = stack.as_mut_ptr_range().end;
            // SAFETY: `top` is one past `operands.len()` initialised words.
            unsafe { f(top) };
            stack[0]
        };
        for f in binary {
            for a in edges {
                for b in edges {
                    run(f, &[a, b]);
                }
            }
        }
        for f in ternary {
            for a in edges {
                for b in edges {
                    for n in edges {
                        run(f, &[a, b, n]);
                    }
                }
            }
        }
        assert_eq!(run(div, &[minus_one, U256::ZERO]), U256::ZERO);
        assert_eq!(run(rem, &[minus_one, U256::ZERO]), U256::ZERO);
        assert_eq!(run(sdiv, &[min, minus_one]), min);
        assert_eq!(run(smod, &[min, minus_one]), U256::ZERO);
        assert_eq!(run(addmod, &[minus_one, minus_one, U256::ZERO]), U256::ZERO);
        assert_eq!(run(mulmod, &[minus_one, minus_one, U256::ZERO]), U256::ZERO);
        assert_eq!(run(sar, &[U256::from(256), min]), minus_one);
        assert_eq!(
            run(byte, &[U256::from(31), U256::from(0xab)]),
            U256::from(0xab)
        );
    }
}
