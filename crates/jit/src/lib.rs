//! Cranelift compiler from EVM bytecode to native code, and the cache of compiled contracts.
//!
//! Owns: bytecode analysis ([`analysis`]), translation of a contract into one native function
//! ([`compiler`]), what that function runs against: its context, exit codes, helpers, and
//! running a frame in it up to its end or its next CALL ([`runtime`]), and the code cache:
//! the `off|on|eager` switch, hotness, the background compiler thread, the memory budget of
//! machine code, eviction and the `gigas_jit_*` metrics ([`cache`]). The hook into revm's
//! frame loop lives in `gigas_evm::jit`, where revm is configured.
//!
//! Must not: change what a transaction does. The interpreter is the reference; compiled code
//! gives the same status, gas, output, logs and state, and hands the frame to the interpreter
//! wherever it cannot go on. Must not free machine code that a frame can still reach.
//!
//! # Never freeing code a frame can still reach
//!
//! cranelift-jit frees nothing when a `JITModule` is dropped; only the unsafe
//! `JITModule::free_memory` unmaps a module's code. So each contract is compiled into a
//! module of its own, owned by a private owner whose `Drop` calls `free_memory`, and the
//! guarantee rests on three rules that the types enforce:
//!
//! 1. The only way to run compiled code is through a [`CompiledCode`] handle, and every handle
//!    holds an `Arc` to its module's owner. The function pointer is private to this crate and
//!    never leaves the handle: [`runtime::run_frame`] borrows the handle for the whole time
//!    the code runs.
//! 2. Whoever may run the code again holds a handle: the cache while the contract is
//!    resident; in `gigas_evm::jit::JitEvm`, the frame stack (one handle per frame, from the
//!    frame's start until it returns, so a frame suspended at a CALL keeps its code while
//!    its child runs) and the per-transaction table of code already looked up.
//! 3. Eviction only drops the cache's handle. The owner's `Drop`, and so `free_memory`, runs
//!    when the last handle is dropped, which by rules 1 and 2 is when no frame runs the code
//!    and none can call it again.
//!
//! A handle cannot be forged (its fields are private) and is `Send + Sync`, so this holds
//! across threads: a Block-STM worker running an evicted contract keeps its pages mapped
//! until its frame ends, while the cache has already taken in other code.
//!
//! # The default budget
//!
//! [`cache::DEFAULT_BUDGET_BYTES`] is 64 MiB of machine code (whole pages). It was chosen with
//! `gigas-bench jit --blocks-only --skip-eager --block-rounds 11 --budget MIB` on the 50 shipped
//! mainnet blocks under `on`, the mode of a node, one run per budget on an otherwise idle
//! 2-CPU machine (medians of 11 rounds; an earlier sweep of 5 rounds gave the same picture,
//! and 0.96x at 4 MiB). With no limit, the contracts `on` compiles there take 88 MiB (machine
//! code is about 32 times the size of the EVM code it comes from):
//!
//! | budget | interp/jit | resident MiB (contracts) | evictions | compiles per timed pass | frames run compiled per pass |
//! |---|---:|---:|---:|---:|---:|
//! | unlimited | 1.01x | 88.5 (255) | 0 | 1.1 | 7,330 |
//! | 64 MiB | 1.02x | 63.6 (218) | 37 | 1.1 | 6,972 |
//! | 32 MiB | 1.01x | 31.8 (139) | 128 | 1.2 | 5,377 |
//! | 16 MiB | 0.98x | 15.9 (58) | 263 | 1.7 | 787 |
//! | 8 MiB | 0.97x | 7.6 (31) | 323 | 1.9 | 250 |
//!
//! On these blocks compiled code barely beats the interpreter at any budget (the code before
//! this cache gave 0.96x and 0.99x in the same sitting, 5 rounds), so the ratio alone cannot
//! choose; what does is how much of the compiled work survives. Down to 32 MiB the replay is
//! as fast as without a limit and compiles no more per pass; at 16 MiB the frames that run
//! compiled collapse to a tenth and evicted contracts are compiled again every pass. 64 MiB
//! keeps 95% of the compiled frames of an unlimited cache at three quarters of its memory, and
//! twice the room of 32 MiB, below which the working set stops fitting, for a sequencer whose
//! hot contracts are not these blocks'. Set [`cache::CacheConfig::budget_bytes`] to change
//! it. `eager` is meant for checking compiled code, not for a node: under a budget smaller
//! than every contract it meets, it compiles evicted contracts again in the foreground.

#![warn(missing_docs)]

pub mod analysis;
pub mod cache;
pub mod compiler;
pub mod runtime;

pub use cache::{
    CacheConfig, CodeCache, HotList, HotListError, Hotness, JitCounts, JitMode, JitStats,
};
pub use compiler::{CodeMemoryMetrics, CompileError, CompiledCode, Compiler};
