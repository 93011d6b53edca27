//! Cranelift compiler from EVM bytecode to native code.
//!
//! Owns: bytecode analysis ([`analysis`]), translation of a contract into one native function
//! ([`compiler`]) and what that function runs against: its context, exit codes, helpers, and
//! running a frame in it up to its end or its next CALL ([`runtime`]). The code cache, the
//! background compiler thread and the hook into revm's frame loop live in `gigas_evm::jit`,
//! where revm is configured.
//!
//! Must not: change what a transaction does. The interpreter is the reference; compiled code
//! gives the same status, gas, output, logs and state, and hands the frame to the interpreter
//! wherever it cannot go on.

#![warn(missing_docs)]

pub mod analysis;
pub mod compiler;
pub mod runtime;

pub use compiler::{CompileError, CompiledCode, Compiler};
