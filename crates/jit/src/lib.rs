//! Cranelift compiler from EVM bytecode to native code (work in progress).
//!
//! Owns: bytecode analysis, translation of a contract into one native function, the code
//! cache, and the hook that lets revm run compiled code for a frame. Must not: change what a
//! transaction does. The interpreter is the reference; compiled code gives the same status,
//! gas, output, logs and state, and whatever it does not translate runs in the interpreter.

#![warn(missing_docs)]

pub mod analysis;
pub mod compiler;
pub mod runtime;

pub use compiler::{CompileError, CompiledCode, Compiler};
