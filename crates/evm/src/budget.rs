//! Bounds on the executions a node runs for anyone who asks: `eth_call`, `eth_estimateGas`,
//! access lists and traces. A signed transaction pays for its gas and is held to the block's
//! gas limit; a call request pays nothing, names its own gas and may override the block, so
//! the node must bound it itself:
//!
//! - **gas**, to [`CallBudget::gas_cap`] whatever the request and its block overrides say
//!   (geth's `--rpc.gascap`, 50M by default);
//! - **memory**, to [`CallBudget::memory_limit`] bytes of EVM memory across all frames (revm's
//!   `memory_limit`; a frame that would grow past it halts as out of gas). Gas alone bounds a
//!   frame's memory only quadratically: 2^64 gas pays for a terabyte;
//! - **time**, to [`CallBudget::timeout`] of wall clock for the whole request (geth's
//!   `--rpc.evmtimeout`, 5 s), an estimate's many runs together. Gas does not bound time well:
//!   cold state reads and some precompiles cost far more time per gas than arithmetic does.
//!
//! The deadline is checked by the instructions that can repeat work (`JUMP`, `JUMPI`) and those
//! that start frames (the `CALL` and `CREATE` families): every loop and every recursion passes
//! through one of them, and code between two of them is straight-line and at most 24 KiB long.
//! Only the interpreter serves RPC executions (compiled code is for block production), so the
//! wrapped instruction table is the whole check. The deadline lives in a thread-local set for
//! the duration of an execution ([`Deadline::enter`]): revm's instruction table holds plain
//! function pointers, which cannot capture it.

use std::cell::Cell;
use std::time::{Duration, Instant};

use revm::bytecode::opcode;
use revm::handler::instructions::EthInstructions;
use revm::interpreter::interpreter::EthInterpreter;
use revm::interpreter::{
    instruction_table, Host, Instruction, InstructionContext, InstructionExecResult,
    InstructionResult,
};

/// How much one RPC execution may use. [`CallBudget::default`] is geth's: 50M gas, 5 s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallBudget {
    /// Most gas one execution may have, whatever the request or its block overrides ask.
    pub gas_cap: u64,
    /// Most bytes of EVM memory, all frames of one execution together.
    pub memory_limit: u64,
    /// Wall-clock time one request may take, all its executions together (an estimate runs
    /// the call a few dozen times).
    pub timeout: Duration,
}

/// geth's `--rpc.gascap` default.
pub const DEFAULT_GAS_CAP: u64 = 50_000_000;
/// geth's `--rpc.evmtimeout` default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// 64 MiB: no contract in the shipped mainnet blocks uses more than a few hundred KiB, and
/// the node runs a few executions at once.
pub const DEFAULT_MEMORY_LIMIT: u64 = 64 << 20;

impl Default for CallBudget {
    fn default() -> Self {
        Self {
            gas_cap: DEFAULT_GAS_CAP,
            memory_limit: DEFAULT_MEMORY_LIMIT,
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

impl CallBudget {
    /// No bound at all: what block execution and tests of the unbounded path use.
    pub fn unbounded() -> Self {
        Self {
            gas_cap: u64::MAX,
            memory_limit: u64::MAX,
            timeout: Duration::MAX,
        }
    }

    /// `gas`, held to the cap.
    pub fn clamp_gas(&self, gas: u64) -> u64 {
        gas.min(self.gas_cap)
    }

    /// The deadline of a request that starts now (`None` when the timeout is too long for
    /// the clock to express).
    pub fn deadline_from_now(&self) -> Option<Instant> {
        Instant::now().checked_add(self.timeout)
    }
}

thread_local! {
    /// The deadline of the execution running on this thread, if any.
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
    /// Set once the deadline has passed; every later check fails at once, so that each frame
    /// on the stack halts at its next loop or call.
    static EXPIRED: Cell<bool> = const { Cell::new(false) };
    /// Checks left before the clock is read again.
    static COUNTDOWN: Cell<u32> = const { Cell::new(0) };
}

/// Checks between two readings of the clock. A check costs a thread-local decrement; a
/// reading about 20 ns. The tightest loop (`JUMPDEST PUSH JUMP`) takes some 10 ns an
/// iteration here, so the clock is read every few microseconds.
const CHECKS_PER_READING: u32 = 256;

/// The deadline of the executions run on this thread until the guard is dropped.
#[derive(Debug)]
pub struct Deadline {
    previous: Option<Instant>,
    previous_expired: bool,
}

impl Deadline {
    /// Executions on this thread stop at `deadline` (`None`: never) until the guard drops.
    /// Guards nest: dropping one restores the deadline before it.
    pub fn enter(deadline: Option<Instant>) -> Self {
        let previous = DEADLINE.with(|d| d.replace(deadline));
        let previous_expired = EXPIRED.with(|e| e.replace(false));
        COUNTDOWN.with(|c| c.set(0));
        Self {
            previous,
            previous_expired,
        }
    }

    /// Whether an execution on this thread was stopped by the deadline since the guard was
    /// entered.
    pub fn expired(&self) -> bool {
        EXPIRED.with(Cell::get)
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        DEADLINE.with(|d| d.set(self.previous));
        EXPIRED.with(|e| e.set(self.previous_expired));
        COUNTDOWN.with(|c| c.set(0));
    }
}

/// Whether this thread's deadline has passed (cheap: the clock is read every
/// [`CHECKS_PER_READING`] calls).
#[inline]
fn past_deadline() -> bool {
    if EXPIRED.with(Cell::get) {
        return true;
    }
    let left = COUNTDOWN.with(|c| {
        let left = c.get();
        c.set(left.wrapping_sub(1));
        left
    });
    if left != 0 {
        return false;
    }
    COUNTDOWN.with(|c| c.set(CHECKS_PER_READING));
    let expired = DEADLINE
        .with(Cell::get)
        .is_some_and(|d| Instant::now() >= d);
    if expired {
        EXPIRED.with(|e| e.set(true));
    }
    expired
}

/// Runs revm's own instruction `OP` unless the deadline has passed; then the frame halts out
/// of gas (and with it, at their next check, the frames below it).
fn guarded<const OP: u8, H: Host>(
    ctx: InstructionContext<'_, H, EthInterpreter>,
) -> InstructionExecResult {
    if past_deadline() {
        return Err(InstructionResult::OutOfGas);
    }
    let inner: Instruction<EthInterpreter, H> =
        const { instruction_table::<EthInterpreter, H>()[OP as usize] };
    inner.execute(ctx)
}

/// Wraps the instructions that loop or start frames in `instructions` with the deadline check
/// of the executing thread (see the module documentation). Static gas is unchanged.
pub fn guard_instructions<H: Host>(instructions: &mut EthInstructions<EthInterpreter, H>) {
    let table = instructions.instruction_table_mut();
    macro_rules! guard {
        ($($op:ident)*) => {
            $( table[opcode::$op as usize] = Instruction::new(guarded::<{ opcode::$op }, H>); )*
        };
    }
    guard!(JUMP JUMPI CALL CALLCODE DELEGATECALL STATICCALL CREATE CREATE2);
}
